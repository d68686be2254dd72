/* bench_kq.c — the fast-lane K-quant kernels alone, one thread: the cost of
 * a batched decode step's arithmetic per token and weight block.
 *
 *   bench_kq [TYPE] [N] [ROWS] [T,T,...]
 *
 * For each token count T it times what the CPU backend runs for a step of
 * T rows (cpu_matmul.c): matvec_q8 for one, matvec_q8_rows up to its
 * limit, the K-quant prefill kernel on permuted rows beyond; and
 * matvec_q8_rows at every T. Weights of ROWS x N (default 128 x 6656: in
 * L2, the arithmetic alone; 16384 rows stream from memory). Thread CPU
 * time, so a shared machine's preemption does not count; the fastest of 21
 * samples, in ns per weight block and per (token, block), and in cycles at
 * the clock given by MUSER_GHZ (default 3.43, this VM's add-chain clock).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/kernels.h"
#include "quant/quant.h"

static double cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return 1e9 * (double)t.tv_sec + (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct bench {
    const mu_cpu_kernels *k;
    uint32_t type;
    const void *w;
    uint64_t rb;
    int64_t rows, n, T;
    const uint8_t *xq, *xqp;
    uint8_t *xd; /* the T rows packed for matvec_q8_kd */
    uint64_t xb;
    float *y;
} bench;

/* 0: what the backend runs; 1: matvec_q8_rows; 2: matvec_q8_kd */
static void run(const bench *b, int which) {
    const mu_cpu_kernels *k = b->k;
    if (which == 2) {
        k->matvec_q8_kd[b->type](b->w, b->rb, b->rows, b->xd, b->n, b->T, b->y, b->rows);
        return;
    }
    if (which == 0 && b->T == 1) k->matvec_q8[b->type](b->w, b->rb, b->rows, b->xq, b->n, b->y);
    else if (which == 0 && b->T > 8 && k->matmul_q8_kp[b->type])
        k->matmul_q8_kp[b->type](b->w, b->rb, b->rows, b->xqp, b->xb, b->n, b->T, b->y, b->rows);
    else k->matvec_q8_rows[b->type](b->w, b->rb, b->rows, b->xq, b->xb, b->n, b->T, b->y, b->rows);
}

/* The fastest of 21 samples of about a millisecond: on a shared machine a
 * sample that another process interrupts (and evicts the caches of) is
 * slower, never faster. */
static double time_run(const bench *b, int which) {
    enum { SAMPLES = 21 };
    double s[SAMPLES];
    const double blocks = (double)b->rows * (double)(b->n / MU_QK_K);
    int reps = (int)(2e5 / (blocks * (double)b->T)) + 1;
    run(b, which); /* warm */
    for (int i = 0; i < SAMPLES; i++) {
        const double t0 = cpu_ns();
        for (int r = 0; r < reps; r++) run(b, which);
        s[i] = (cpu_ns() - t0) / reps;
    }
    qsort(s, SAMPLES, sizeof s[0], cmp_d);
    return s[0];
}

int main(int argc, char **argv) {
    const char *tname = argc > 1 ? argv[1] : "Q4_K";
    const int64_t n = argc > 2 ? atoll(argv[2]) : 6656, rows = argc > 3 ? atoll(argv[3]) : 128;
    const char *tl = argc > 4 ? argv[4] : "1,2,4,8,16";
    const double ghz = getenv("MUSER_GHZ") ? atof(getenv("MUSER_GHZ")) : 3.43;
    uint32_t type = MU_TYPE_COUNT;
    for (uint32_t t = 0; t < MU_TYPE_COUNT; t++)
        if (mu_type_name(t) && !strcmp(mu_type_name(t), tname)) type = t;
    const mu_cpu_kernels *k = mu_cpu_kernels_get(NULL);
    if (type == MU_TYPE_COUNT || !k->matvec_q8_rows[type]) {
        fprintf(stderr, "bench_kq: no fast-lane kernel for %s\n", tname);
        return 1;
    }
    uint64_t rng = 7;
    bench b = {k, type, NULL, mu_row_bytes(type, n), rows, n, 0, NULL, NULL, NULL, mu_act_row_bytes(n), NULL};
    void *w = malloc(b.rb * (uint64_t)rows + 64);
    if (mu_random_blocks(type, w, n * rows, &rng, 0.05f)) return 1;
    b.w = w;
    enum { TMAX = 64 };
    float *x = malloc(sizeof(float) * (size_t)n);
    /* 64-byte aligned as the backend's: a vector load across two lines costs two */
    const size_t xbytes = (b.xb * TMAX + 127) / 64 * 64;
    uint8_t *xq = aligned_alloc(64, xbytes), *xqp = aligned_alloc(64, xbytes);
    for (int t = 0; t < TMAX; t++) {
        for (int64_t i = 0; i < n; i++) x[i] = (float)((rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 40) / 16777216.0f - 0.5f;
        k->quantize_act(x, xq + t * b.xb, n);
        mu_act_kq_permute(xq + t * b.xb, xqp + t * b.xb, n);
    }
    b.xq = xq, b.xqp = xqp;
    b.xd = aligned_alloc(64, (mu_act_kd_bytes(n) * TMAX + 127) / 64 * 64);
    b.y = malloc(sizeof(float) * (size_t)(rows * TMAX));
    printf("%s: %s n=%lld rows=%lld (%.1f MiB of weights), one thread, %.2f GHz assumed\n", k->isa, tname, (long long)n,
           (long long)rows, (double)(b.rb * (uint64_t)rows) / 1048576.0, ghz);
    printf("| T | kernel | ns/call | ns/block | cyc/(token*block) | matvec_q8_rows | matvec_q8_kd | kd ns/block |\n");
    for (const char *p = tl; *p;) {
        b.T = strtoll(p, (char **)&p, 10);
        if (*p == ',') p++;
        if (b.T < 1 || b.T > TMAX) continue;
        const double blocks = (double)rows * (double)(n / MU_QK_K);
        mu_act_kd_pack(xq, b.xb, b.T, n, b.xd);
        const double a = time_run(&b, 0), r = time_run(&b, 1), d = k->matvec_q8_kd[type] ? time_run(&b, 2) : 0;
        const char *kn = b.T == 1 ? "matvec_q8" : b.T > 8 && k->matmul_q8_kp[type] ? "matmul_q8_kp" : "matvec_q8_rows";
        printf("| %lld | %s | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", (long long)b.T, kn, a, a / blocks,
               a * ghz / (blocks * (double)b.T), r * ghz / (blocks * (double)b.T), d * ghz / (blocks * (double)b.T),
               d / blocks);
    }
    free(w), free(x), free(xq), free(xqp), free(b.xd), free(b.y);
    return 0;
}
