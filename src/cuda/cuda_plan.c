/* cuda_plan.c — a CUDA session's GPU memory, planned before anything is
 * uploaded (cuda_plan.h). Plain C and pure: compiled into every build, so
 * its arithmetic is tested without a GPU (test_gpu_plan). */
#include "cuda/cuda_plan.h"

#include "model/model.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)
#define PLAN_BATCH_PARTS 8  /* decode: q, k, v, gate in up to 8 batch parts (MU_CU_BATCH_PARTS_MAX) */
#define PLAN_DOWN_PARTS 8   /* decode: up to 8 partial sums of the split ffn down */
#define PLAN_TC_PART (2 << 20) /* floats of the tensor-core batch's pieces (CUDA_TC_PART) */
#define PLAN_TC_COUNT (1 << 18) /* its counters (CUDA_TC_COUNT) */
#define PREFILL_SPARE 3e9   /* the f16 cache is built where this much is left beside it */

/* cudaMalloc hands out 256-byte aligned blocks */
static uint64_t a256(uint64_t x) { return (x + 255) & ~(uint64_t)255; }

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* A session's own buffers (cuda_backend.c's alloc_activations), one term
 * per allocation: the one-row ones, the step records and the batched
 * steps' plane pointers of T rows. */
static uint64_t session_bytes(const mu_gpu_plan_in *in) {
    const uint64_t T = (uint64_t)in->n_batch, E = (uint64_t)in->E, Q = (uint64_t)in->Q, V = (uint64_t)in->V,
                   L = (uint64_t)in->n_layer;
    const uint64_t f32[] = {E, E, V, 2 * L};           /* h2, ax2, logits, counters */
    uint64_t sum = a256(8) + a256(T * (uint64_t)in->rec_bytes) + a256(8 * L * 2 * T); /* d_best, d_rec, d_planes */
    for (size_t i = 0; i < sizeof f32 / sizeof f32[0]; i++) sum += a256(4 * f32[i]);
    sum += a256(E) + a256(Q) + a256(4 * (E / 8)) + a256(4 * (Q / 8)); /* aq2, oq and their scales */
    return sum;
}

/* The work buffers of T rows (cuda_work.c, a model's sessions of one
 * setting share them), one term per allocation; decode's parts need at
 * least 8 rows. Without the chunk's logits. */
static uint64_t work_bytes(const mu_gpu_plan_in *in, uint64_t parts, uint64_t wtmp) {
    const uint64_t T = (uint64_t)in->n_batch, E = (uint64_t)in->E, Q = (uint64_t)in->Q, KVD = (uint64_t)in->KVD,
                   F = (uint64_t)in->F;
    const uint64_t Tp = max_u64(T, PLAN_BATCH_PARTS), T8 = max_u64(T, PLAN_DOWN_PARTS);
    const uint64_t f32[] = {T * E,  T * E, Tp * Q, Tp * Q, Tp * KVD, Tp * KVD, T * Q,
                            T * Q,  T8 * E, T * F, T * F,  parts,    parts,    parts * 128};
    const uint64_t f16[] = {T * E, T * Q, T * F};        /* a16, o16, f16b */
    const uint64_t QF = max_u64(Q, F); /* bq, bds: Wo's and down's int8 inputs in batched steps */
    uint64_t sum = a256(T * E) + a256(4 * (T * E / 8)) + /* aq, ads */
                   a256(wtmp) + a256(T * QF) + a256(4 * (T * QF / 8)) + a256(4 * (uint64_t)PLAN_TC_PART) + a256(4 * (uint64_t)PLAN_TC_COUNT) +
                   a256(2 * mu_gpu_mmf_halves(max_u64(E, QF), T)); /* + mmf_x */
    for (size_t i = 0; i < sizeof f32 / sizeof f32[0]; i++) sum += a256(4 * f32[i]);
    for (size_t i = 0; i < 3; i++) sum += a256(2 * f16[i]);
    return sum;
}

static uint64_t buffer_bytes(const mu_gpu_plan_in *in, uint64_t parts, uint64_t wtmp) {
    return session_bytes(in) + work_bytes(in, parts, wtmp);
}

void mu_gpu_plan_make(const mu_gpu_plan_in *in, mu_gpu_plan *p) {
    memset(p, 0, sizeof *p);
    const uint64_t kv_elem = in->kv_f32 ? 4 : 2;
    /* a sliding layer keeps a ring of window + chunk - 1 rows when that is
     * shorter than the context (cuda_backend.c's kv_capacity) */
    const bool ring = in->n_swa > 0 && (int64_t)in->n_swa + in->n_batch - 1 < in->n_ctx;
    p->kv_rows_full = in->n_ctx;
    p->kv_rows_swa = ring ? (int64_t)in->n_swa + in->n_batch - 1 : in->n_ctx;
    const uint64_t row = 2 * (uint64_t)in->KVD * kv_elem; /* K and V */
    const int n_full = in->n_layer - in->n_swa_layers;
    p->kv = (uint64_t)n_full * 2 * a256((uint64_t)p->kv_rows_full * row / 2) +
            (uint64_t)in->n_swa_layers * 2 * a256((uint64_t)p->kv_rows_swa * row / 2);

    p->split_dec = (in->n_ctx + 127) / 128;
    if (p->split_dec > MU_GPU_PLAN_SPLIT_MAX) p->split_dec = MU_GPU_PLAN_SPLIT_MAX;
    if (p->split_dec < 1) p->split_dec = 1;
    p->split_pre = p->split_dec < MU_GPU_PLAN_SPLIT_PREFILL ? p->split_dec : MU_GPU_PLAN_SPLIT_PREFILL;
    p->parts = (int64_t)in->n_head * p->split_dec;
    if ((int64_t)in->n_batch * in->n_head * p->split_pre > p->parts)
        p->parts = (int64_t)in->n_batch * in->n_head * p->split_pre;

    p->weights = in->weight_bytes + in->norm_bytes;
    p->logits = in->head && !in->work_shared ? a256((uint64_t)in->n_batch * (uint64_t)in->V * 4) : 0;
    p->reserve = in->work_shared ? MU_GPU_PLAN_SESSION_RESERVE : MU_GPU_PLAN_RESERVE;
    /* the dequantized tiles of the GEMMs without the f16 cache: a whole
     * matrix (f16 in the fast lane, f32 in the exact), at least 64 MB */
    p->tiles = max_u64((in->fast ? 2 : 4) * in->max_matrix_elems, 64ull << 20);
    const uint64_t base = p->weights + p->kv + p->logits + p->reserve;
    /* the fast lane's f16 prefill cache: built by the session that uploads,
     * where asked (1) or where it fits with PREFILL_SPARE left (-1) */
    bool cache = in->fast && in->cache_resident;
    if (in->fast && in->weight_bytes > 0 && in->prefill_cache != 0 && in->f16_cache_bytes > 0) {
        const uint64_t with = base + in->f16_cache_bytes + buffer_bytes(in, (uint64_t)p->parts, 0);
        if (in->prefill_cache > 0 || (double)with + PREFILL_SPARE <= (double)in->available) {
            p->f16_cache = in->f16_cache_bytes;
            cache = true;
        }
    }
    p->wtmp = cache ? 0 : p->tiles;
    p->work_shared = in->work_shared;
    if (in->work_shared) p->buffers = session_bytes(in);
    else {
        p->buffers = buffer_bytes(in, (uint64_t)p->parts, p->wtmp);
        p->work = work_bytes(in, (uint64_t)p->parts, p->wtmp) + p->logits + MU_GPU_PLAN_RESERVE -
                  MU_GPU_PLAN_SESSION_RESERVE;
    }
    p->total = base + p->f16_cache + p->buffers;
    p->fits = p->total <= in->available;
}

/* the largest context (a multiple of 1024 tokens where it can) whose plan fits,
 * 0 when none does */
static int ctx_that_fits(const mu_gpu_plan_in *in) {
    mu_gpu_plan_in t = *in;
    mu_gpu_plan p;
    int lo = 0, hi = in->n_ctx - 1; /* lo fits (0: nothing yet), hi: the largest to try */
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        t.n_ctx = mid;
        if (t.n_batch > mid) t.n_batch = mid;
        mu_gpu_plan_make(&t, &p);
        if (p.fits) lo = mid;
        else hi = mid - 1;
        t.n_batch = in->n_batch;
    }
    return lo >= 1024 ? lo / 1024 * 1024 : lo;
}

int mu_gpu_plan_fit_layers(int n_layer, mu_gpu_layers_fn layers_in, void *ctx, mu_gpu_plan *plan) {
    mu_gpu_plan_in in;
    mu_gpu_plan p;
    /* (each layer adds its weights and KV rows, the last one the head too:
     * the totals grow with n, so the first that fits from the top is the
     * largest) */
    for (int n = n_layer; n >= 1; n--) {
        layers_in(ctx, n, &in);
        mu_gpu_plan_make(&in, &p);
        if (p.fits) {
            if (plan) *plan = p;
            return n;
        }
    }
    if (plan) *plan = p;
    return 0;
}

void mu_gpu_plan_explain(const mu_gpu_plan_in *in, const mu_gpu_plan *p, uint64_t cap_bytes, uint64_t free_bytes,
                         int device, int fit_layers, int n_layer_all, char *msg, size_t cap) {
    char limit[160], fix[600] = "";
    if (cap_bytes)
        snprintf(limit, sizeof limit, "%.2f GiB may be used (--gpu-mem %.2f GiB; GPU %d has %.2f GiB free)",
                 in->available / GIB, cap_bytes / GIB, device, free_bytes / GIB);
    else snprintf(limit, sizeof limit, "GPU %d has %.2f GiB free", device, in->available / GIB);
    size_t n = 0;
#define FIX(...) n += (size_t)snprintf(fix + n, n < sizeof fix ? sizeof fix - n : 0, __VA_ARGS__)
    mu_gpu_plan q;
    const int ctx = ctx_that_fits(in);
    if (ctx > 0) {
        mu_gpu_plan_in t = *in;
        t.n_ctx = ctx;
        if (t.n_batch > ctx) t.n_batch = ctx;
        mu_gpu_plan_make(&t, &q);
        FIX("-c %d (KV cache %.2f GiB)", ctx, q.kv / GIB);
    }
    if (in->kv_f32) {
        mu_gpu_plan_in t = *in;
        t.kv_f32 = false;
        mu_gpu_plan_make(&t, &q);
        if (q.fits) FIX("%s--kv f16 (KV cache %.2f GiB)", n ? ", or " : "", q.kv / GIB);
    }
    if (in->n_batch > 128) {
        mu_gpu_plan_in t = *in;
        t.n_batch = 128;
        mu_gpu_plan_make(&t, &q);
        if (q.fits) FIX("%s-b 128 (buffers and logits %.2f GiB)", n ? ", or " : "", (q.buffers + q.logits) / GIB);
    }
    if (fit_layers > 0 && fit_layers < n_layer_all)
        FIX("%s-ngl %d (%d of the %d layers on the GPU at this context, the rest and the output head on the CPU)",
            n ? ", or " : "", fit_layers, fit_layers, n_layer_all);
    if (!n) {
        const uint64_t fixed = p->weights + p->reserve;
        FIX("no context fits: the weights alone take %.2f GiB%s; a smaller file (fewer bits a weight) or more GPU "
            "memory", fixed / GIB, fixed > in->available ? ", more than is available" : "");
    }
#undef FIX
    snprintf(msg, cap,
             "not enough GPU memory: the session needs %.2f GiB (weights %.2f%s, KV cache %.2f for %d tokens at %s, "
             "buffers %.2f, logits %.2f, reserve %.2f) but %s. What would fit: %s",
             p->total / GIB, p->weights / GIB, p->weights ? "" : " (already resident)", p->kv / GIB, in->n_ctx,
             in->kv_f32 ? "f32" : "f16", p->buffers / GIB, p->logits / GIB, p->reserve / GIB, limit, fix);
}

void mu_gpu_plan_format(const mu_gpu_plan *p, char *out, size_t cap) {
    snprintf(out, cap,
             "%.2f GiB: weights %.2f%s, f16 prefill cache %.2f, KV cache %.2f, buffers %.2f, logits %.2f, "
             "reserve %.2f%s",
             p->total / GIB, p->weights / GIB, p->weights ? "" : " (shared, counted once)", p->f16_cache / GIB,
             p->kv / GIB, p->buffers / GIB, p->logits / GIB, p->reserve / GIB,
             p->work_shared ? " (the chunk's work buffers and logits: shared with an earlier session)" : "");
}

/* f16 copies of a matrix (cuda_weights.c's prefill cache) */
static uint64_t f16_copy_bytes(const mu_weight *w) { return w->data ? a256((uint64_t)w->rows * w->cols * 2) : 0; }

static uint64_t norm_bytes(const float *v, int64_t n) { return v ? a256((uint64_t)n * 4) : 0; }

uint64_t mu_gpu_weight_bytes_bound(const mu_weight *w) {
    return w->data ? (uint64_t)w->rows * mu_row_bytes(w->type, w->cols) + 4 * 255 : 0;
}

void mu_gpu_plan_geometry(const mu_model *m, mu_gpu_weight_bytes_fn weight_bytes, int64_t rec_bytes,
                          mu_gpu_plan_in *in) {
    const mu_hparams *hp = &m->hp;
    memset(in, 0, sizeof *in); /* (the settings are the caller's to fill after) */
    in->head = mu_model_heads(m);
    in->E = hp->n_embd, in->Q = (int64_t)hp->n_head * hp->head_dim, in->KVD = (int64_t)hp->n_head_kv * hp->head_dim;
    in->F = hp->n_ff, in->V = hp->n_vocab;
    in->n_layer = hp->n_layer, in->n_head = hp->n_head;
    in->n_swa = hp->n_swa;
    in->n_swa_layers = 0;
    in->rec_bytes = rec_bytes;
    in->max_matrix_elems = 0;
    uint64_t wdev = weight_bytes(&m->tok_embd) + weight_bytes(&m->output);
    uint64_t f16 = f16_copy_bytes(&m->output), norms = norm_bytes(m->output_norm, hp->n_embd);
    for (int l = 0; l < hp->n_layer; l++) {
        const mu_layer *L = &m->layers[l];
        if (L->is_swa && hp->n_swa > 0) in->n_swa_layers++;
        const mu_weight *mats[] = {&L->wq, &L->wk, &L->wv, &L->wgate, &L->wo, &L->ffn_gate, &L->ffn_up, &L->ffn_down};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) {
            const mu_weight *w = mats[i];
            wdev += weight_bytes(w), f16 += f16_copy_bytes(w);
            if (w->data && (uint64_t)(w->rows * w->cols) > in->max_matrix_elems)
                in->max_matrix_elems = (uint64_t)(w->rows * w->cols);
        }
        norms += norm_bytes(L->attn_norm, hp->n_embd) + norm_bytes(L->q_norm, hp->head_dim) +
                 norm_bytes(L->k_norm, hp->head_dim) + norm_bytes(L->post_attn_norm, hp->n_embd) +
                 norm_bytes(L->ffn_norm, hp->n_embd) + norm_bytes(L->post_ffn_norm, hp->n_embd);
    }
    in->weight_bytes = wdev;
    in->norm_bytes = norms;
    in->f16_cache_bytes = f16;
}

void mu_gpu_plan_model_layers(void *vctx, int n, mu_gpu_plan_in *in) {
    const mu_gpu_layers_model *c = vctx;
    const mu_gpu_plan_in *s = c->settings;
    memset(in, 0, sizeof *in);
    const mu_model *v = mu_model_layer_view(c->m, 0, n);
    if (!v) { /* (out of memory: a plan that fits nothing) */
        in->weight_bytes = UINT64_MAX / 4;
        return;
    }
    mu_gpu_plan_geometry(v, c->weight_bytes, c->rec_bytes(v), in);
    bool f16 = false;
    if (c->resident && c->resident(v, c->resident_ctx, &f16)) {
        in->weight_bytes = in->norm_bytes = 0;
        in->cache_resident = f16;
    }
    in->n_ctx = s->n_ctx, in->n_batch = s->n_batch;
    in->kv_f32 = s->kv_f32, in->fast = s->fast;
    in->prefill_cache = s->prefill_cache;
    in->available = s->available;
}
