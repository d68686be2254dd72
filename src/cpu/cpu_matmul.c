/* cpu_matmul.c — matmul sets: every job of a set reads the same input, and
 * the rows of all jobs form one space run as a single parallel region.
 *
 * Scheduling is by bytes: each job's rows are cut into units of about the
 * same number of weight bytes (so a Q6_K row counts for more than a Q4_K
 * row), and threads claim runs of units from a shared counter, guided:
 * a claim takes 1/(2*threads) of what is left, at least one unit and at
 * most MAX_CLAIM_UNITS. Claims of up to ~1 MiB keep each thread on long
 * sequential streams; smaller claims at the end even out the finish. The
 * cap matters on a shared machine: a thread that another process preempts
 * holds at most one claim the others cannot take over.
 *
 * Decode (T = 1) runs the matvec kernels; prefill runs the matmul kernels,
 * which reuse each weight block across the tokens of the chunk. A few
 * tokens (T <= SMALL_T: a batched decode step) give each token its T = 1
 * numbers: in the fast lane matvec_q8_rows, which unpacks each weight block
 * once for all of them; in the exact lane the matvec per token over
 * cache-sized row tiles. Fast-lane K-quants with a packed-decode kernel
 * (matvec_q8_kd) run it for one row and for steps of up to KD_T rows: a
 * row's numbers are then the same at every width of the step.
 */
#include <stdatomic.h>
#include <string.h>

#include "cpu/cpu_internal.h"

#define MAX_JOBS 4
#define ROW_ALIGN 16 /* rows per unit are a multiple of this (kernel row tiles) */
#define MAX_CLAIM_UNITS 32

typedef struct mm_set {
    cpu_backend *b;
    const mm_job *jobs;
    int n_jobs;
    const float *x; /* [T][cols] */
    int T;
    bool prefill; /* the prefill kernels run (units are tiles reused across tokens) */
    int64_t unit_rows[MAX_JOBS];
    int64_t unit_first[MAX_JOBS + 1]; /* prefix sums of units per job */
    _Alignas(64) atomic_llong next;   /* next unclaimed unit */
} mm_set;

static uint8_t *quantized_input(cpu_backend *b, int t, int64_t cols) {
    return b->xq + (size_t)t * (size_t)mu_act_row_bytes(cols);
}

static bool fast_job(const cpu_backend *b, const mu_weight *w) {
    return b->cfg.lane == MUSER_LANE_FAST && mu_cpu_fast_type(w->type) && b->k->matvec_q8[w->type];
}

/* A few tokens (a batched decode step of several sessions, a short
 * chunk), each with the numbers of its own T = 1 matvec. Fast lane: the
 * batched matvec, each weight block read and unpacked once for all tokens.
 * Exact lane: the matvec once per token over tiles of ROW_ALIGN rows, so
 * each tile is read from memory once and from cache for the other tokens.
 * More tokens take the prefill kernels: they sum in another order, and
 * from about 16 rows on they cost less per token than these. */
#define SMALL_T 8

/* Decode and steps of up to KD_T rows, fast lane, K-quants: the packed
 * decode kernel on the rows packed into b->xqp (kernels.h). Up to 64 rows
 * it costs no more per row than the prefill kernel (measured on Zen 5). */
#define KD_T 64
static bool kd_job(const cpu_backend *b, const mu_weight *w, int T) {
    return T <= KD_T && fast_job(b, w) && b->k->matvec_q8_kd[w->type];
}

/* Prefill of a K-quant in the fast lane: the kernel on the rows in the
 * K-quant prefill layout (b->xqp, kernels.h). */
static bool kp_job(const cpu_backend *b, const mu_weight *w, int T) {
    return T > KD_T && T > SMALL_T && fast_job(b, w) && b->k->matmul_q8_kp[w->type];
}

static void run_rows_small_t(cpu_backend *b, const mm_job *job, const float *x, int T, int64_t r0, int64_t r1) {
    const mu_weight *w = job->w;
    const int64_t cols = w->cols;
    if (fast_job(b, w)) {
        b->k->matvec_q8_rows[w->type]((const uint8_t *)w->data + (uint64_t)r0 * w->row_bytes, w->row_bytes, r1 - r0,
                                      quantized_input(b, 0, cols), mu_act_row_bytes(cols), cols, T, job->y + r0,
                                      w->rows);
        return;
    }
    for (int64_t c0 = r0; c0 < r1; c0 += ROW_ALIGN) {
        const int64_t nr = r1 - c0 < ROW_ALIGN ? r1 - c0 : ROW_ALIGN;
        const uint8_t *rows = (const uint8_t *)w->data + (uint64_t)c0 * w->row_bytes;
        for (int t = 0; t < T; t++)
            b->k->matvec_f32[w->type](rows, w->row_bytes, nr, x + (int64_t)t * cols, cols, job->y + (int64_t)t * w->rows + c0);
    }
}

/* Rows [r0, r1) of one job, for all T tokens. */
static void run_rows(cpu_backend *b, const mm_job *job, const float *x, int T, int64_t r0, int64_t r1) {
    const mu_weight *w = job->w;
    const int64_t cols = w->cols;
    const mu_cpu_kernels *k = b->k;
    const uint8_t *rows = (const uint8_t *)w->data + (uint64_t)r0 * w->row_bytes;
    float *y = job->y + r0;
    if (kd_job(b, w, T)) {
        k->matvec_q8_kd[w->type](rows, w->row_bytes, r1 - r0, b->xqp, cols, T, y, w->rows);
        return;
    }
    if (T > 1 && T <= SMALL_T) {
        run_rows_small_t(b, job, x, T, r0, r1);
        return;
    }
    if (kp_job(b, w, T)) {
        k->matmul_q8_kp[w->type](rows, w->row_bytes, r1 - r0, b->xqp, mu_act_row_bytes(cols), cols, T, y, w->rows);
    } else if (fast_job(b, w)) {
        const void *xq = quantized_input(b, 0, cols);
        if (T == 1) k->matvec_q8[w->type](rows, w->row_bytes, r1 - r0, xq, cols, y);
        else k->matmul_q8[w->type](rows, w->row_bytes, r1 - r0, xq, mu_act_row_bytes(cols), cols, T, y, w->rows);
    } else {
        if (T == 1) k->matvec_f32[w->type](rows, w->row_bytes, r1 - r0, x, cols, y);
        else k->matmul_f32[w->type](rows, w->row_bytes, r1 - r0, x, cols, T, y, w->rows);
    }
}

static void mm_set_worker(void *ctx, int ith, int nth) {
    (void)ith;
    mm_set *s = ctx;
    const long long total = s->unit_first[s->n_jobs];
    /* In prefill one unit is milliseconds of work (a MiB of weights against
     * every token of the chunk): claims of one unit, so a thread that
     * another process preempts holds back at most one. A batched decode
     * step keeps the long claims of decode: with two threads, claims of
     * 2 units (a 16-row step's work of 32 units of one row) took 20% more
     * time per row on Zen 5 than claims of 32, each thread's stream of
     * weights broken every 32 rows. */
    const long long max_take = s->prefill ? 1 : MAX_CLAIM_UNITS;
    for (;;) {
        long long u0 = atomic_load_explicit(&s->next, memory_order_relaxed), take;
        do {
            if (u0 >= total) return;
            take = (total - u0) / (2 * nth);
            if (take < 1) take = 1;
            if (take > max_take) take = max_take;
        } while (!atomic_compare_exchange_weak_explicit(&s->next, &u0, u0 + take, memory_order_relaxed,
                                                        memory_order_relaxed));
        const long long u1 = u0 + take;
        for (int j = 0; j < s->n_jobs; j++) {
            const long long a = u0 > s->unit_first[j] ? u0 : s->unit_first[j];
            const long long e = u1 < s->unit_first[j + 1] ? u1 : s->unit_first[j + 1];
            if (a >= e) continue;
            const int64_t rows = s->jobs[j].w->rows;
            const int64_t r0 = (a - s->unit_first[j]) * s->unit_rows[j];
            int64_t r1 = (e - s->unit_first[j]) * s->unit_rows[j];
            if (r1 > rows) r1 = rows;
            run_rows(s->b, &s->jobs[j], s->x, s->T, r0, r1);
        }
    }
}

/* Quantizes the input rows once for the whole set (fast lane). */
typedef struct quant_ctx {
    cpu_backend *b;
    const float *x;
    int T;
    int64_t cols;
    bool kp; /* also write the K-quant prefill layout */
    bool kd; /* also pack the rows for the decode kernel */
    _Alignas(64) atomic_int next; /* next unclaimed token */
} quant_ctx;

static void quantize_tokens(const quant_ctx *c, int t0, int t1) {
    for (int t = t0; t < t1; t++) {
        uint8_t *row = quantized_input(c->b, t, c->cols);
        c->b->k->quantize_act(c->x + (int64_t)t * c->cols, row, c->cols);
        if (c->kp) mu_act_kq_permute(row, c->b->xqp + (row - c->b->xq), c->cols);
        if (c->kd) mu_act_kd_pack_row(row, t, c->T, c->cols, c->b->xqp);
    }
}

static void quant_worker(void *ctx, int ith, int nth) {
    (void)ith, (void)nth;
    quant_ctx *c = ctx;
    for (int t; (t = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed)) < c->T;) quantize_tokens(c, t, t + 1);
}

static void quantize_inputs(cpu_backend *b, const mm_job *jobs, int n_jobs, const float *x, int T, int64_t cols) {
    bool need = false, kp = false, kd = false;
    for (int j = 0; j < n_jobs; j++)
        need |= fast_job(b, jobs[j].w), kp |= kp_job(b, jobs[j].w, T), kd |= kd_job(b, jobs[j].w, T);
    if (!need) return;
    quant_ctx c = {b, x, T, cols, kp, kd, 0};
    PROF_BEGIN(b);
    if (T >= 8) mu_pool_run_elastic(b->pool, quant_worker, &c);
    else quantize_tokens(&c, 0, T);
    PROF_END(b, MU_PROF_QUANT, 1, (uint64_t)T * (uint64_t)cols * 4);
}

void mu_cpu_matmul_set(cpu_backend *b, const mm_job *jobs, int n_jobs, const float *x, int T, int prof_family) {
    mm_set s;
    memset(&s, 0, sizeof s);
    s.b = b;
    s.jobs = jobs;
    s.n_jobs = n_jobs;
    s.x = x;
    s.T = T;
    /* Units of ~32 KiB of weights in decode (the packed-decode kernel
     * included, whatever T); bigger in prefill, where a unit is also a
     * tile the kernel reuses across T tokens. */
    s.prefill = false;
    for (int j = 0; j < n_jobs; j++) s.prefill |= T > SMALL_T && !kd_job(b, jobs[j].w, T);
    uint64_t unit_bytes = 32u << 10;
    if (s.prefill) unit_bytes = (uint64_t)(T < 32 ? T : 32) * (32u << 10);
    uint64_t bytes = 0;
    for (int j = 0; j < n_jobs; j++) {
        const mu_weight *w = jobs[j].w;
        int64_t ur = (int64_t)(unit_bytes / (w->row_bytes ? w->row_bytes : 1));
        ur = (ur + ROW_ALIGN - 1) / ROW_ALIGN * ROW_ALIGN;
        if (ur < ROW_ALIGN) ur = ROW_ALIGN;
        s.unit_rows[j] = ur;
        s.unit_first[j + 1] = s.unit_first[j] + (w->rows + ur - 1) / ur;
        bytes += (uint64_t)w->rows * w->row_bytes;
    }
    atomic_init(&s.next, 0);
    quantize_inputs(b, jobs, n_jobs, x, T, jobs[0].w->cols);
    PROF_BEGIN(b);
    mu_pool_run_elastic(b->pool, mm_set_worker, &s);
#if MUSER_PROFILE
    if (b->prof.on) {
        /* A set's time is shared among its weight types by bytes. */
        const uint64_t ns = mu_now_ns() - prof_t0_;
        for (int j = 0; j < n_jobs; j++) {
            const mu_weight *w = jobs[j].w;
            const uint64_t wb = (uint64_t)w->rows * w->row_bytes;
            mu_prof_entry *e = &b->prof.e[prof_family >= 0 ? prof_family : (int)w->type];
            e->ns += bytes ? (uint64_t)((double)ns * (double)wb / (double)bytes) : 0;
            e->calls += 1;
            e->bytes += wb;
        }
    }
#endif
}
