/* cpu_backend.c — the CPU forward pass for a chunk of T tokens.
 *
 * Per layer (spec §0): norm -> {q, k, v, gate} as one concurrent set over
 * the same normed input -> QK-norm -> RoPE (layers that use it) -> KV append
 * -> attention (route ladder, split-K in decode) -> sigmoid gate -> Wo ->
 * post-norm + residual -> norm -> {ffn_gate, ffn_up} as one set -> SwiGLU ->
 * ffn_down -> post-norm + residual. Then the final norm, the LM head, the
 * logit scale and the softcap. The llama architecture is the same graph
 * without gate, QK-norm, post-norms, embedding norm and logit transforms.
 *
 * Shapes: activations are token-major, [T][width]. KV planes are row-major
 * [capacity][n_head_kv * head_dim] in F16 or F32.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "cpu/ops.h"
#include "util/error.h"

/* ---- matmul sets ---------------------------------------------------------
 * y_j[t][r] = dot(W_j row r, x[t]) for every job j of a set, all reading
 * the same input. The rows of all jobs form one space split across
 * threads, so the set is one parallel region (one barrier). */

typedef struct mm_job {
    const mu_weight *w;
    float *y;      /* [T][w->rows] */
} mm_job;

typedef struct mm_set {
    cpu_backend *b;
    const mm_job *jobs;
    int n_jobs;
    const float *x; /* [T][cols] */
    int T;
    int64_t total_rows;
} mm_set;

#define MM_ROW_CHUNK 16

static const void *quantized_input(cpu_backend *b, uint32_t act_type, int t, int64_t cols) {
    if (act_type == MU_TYPE_Q8_K) return b->xq_k + (size_t)t * (size_t)mu_row_bytes(MU_TYPE_Q8_K, cols);
    return b->xq_0 + (size_t)t * (size_t)mu_row_bytes(MU_TYPE_Q8_0, cols);
}

static void run_rows(cpu_backend *b, const mm_job *job, const float *x, int T, int64_t r0, int64_t r1) {
    const mu_weight *w = job->w;
    const int64_t cols = w->cols;
    uint32_t act = b->cfg.lane == MUSER_LANE_FAST ? mu_cpu_act_type(w->type) : MU_TYPE_F32;
    mu_matvec_q8_fn q8 = act != MU_TYPE_F32 ? b->k->matvec_q8[w->type] : NULL;
    mu_matvec_f32_fn f32 = b->k->matvec_f32[w->type];
    for (int64_t r = r0; r < r1; r += MM_ROW_CHUNK) {
        int64_t nr = r1 - r < MM_ROW_CHUNK ? r1 - r : MM_ROW_CHUNK;
        const uint8_t *rows = (const uint8_t *)w->data + (uint64_t)r * w->row_bytes;
        for (int t = 0; t < T; t++) {
            float *y = job->y + (int64_t)t * w->rows + r;
            if (q8) q8(rows, w->row_bytes, nr, quantized_input(b, act, t, cols), cols, y);
            else f32(rows, w->row_bytes, nr, x + (int64_t)t * cols, cols, y);
        }
    }
}

static void mm_set_worker(void *ctx, int ith, int nth) {
    mm_set *s = ctx;
    /* Contiguous share of the concatenated row space, in whole chunks. */
    int64_t chunks = (s->total_rows + MM_ROW_CHUNK - 1) / MM_ROW_CHUNK;
    int64_t c0 = chunks * ith / nth, c1 = chunks * (ith + 1) / nth;
    int64_t g0 = c0 * MM_ROW_CHUNK, g1 = c1 * MM_ROW_CHUNK;
    if (g1 > s->total_rows) g1 = s->total_rows;
    int64_t base = 0;
    for (int j = 0; j < s->n_jobs && g0 < g1; j++) {
        int64_t rows = s->jobs[j].w->rows;
        int64_t lo = g0 > base ? g0 - base : 0, hi = g1 - base < rows ? g1 - base : rows;
        if (lo < hi) run_rows(s->b, &s->jobs[j], s->x, s->T, lo, hi);
        base += rows;
    }
}

/* Quantizes the T input rows once for every activation type the set needs. */
static void quantize_inputs(cpu_backend *b, const mm_job *jobs, int n_jobs, const float *x, int T, int64_t cols) {
    if (b->cfg.lane != MUSER_LANE_FAST) return;
    bool need_k = false, need_0 = false;
    for (int j = 0; j < n_jobs; j++) {
        uint32_t a = mu_cpu_act_type(jobs[j].w->type);
        if (!b->k->matvec_q8[jobs[j].w->type]) continue;
        need_k |= a == MU_TYPE_Q8_K;
        need_0 |= a == MU_TYPE_Q8_0;
    }
    for (int t = 0; t < T; t++) {
        if (need_k) b->k->quantize_q8_K(x + (int64_t)t * cols, (void *)quantized_input(b, MU_TYPE_Q8_K, t, cols), cols);
        if (need_0) b->k->quantize_q8_0(x + (int64_t)t * cols, (void *)quantized_input(b, MU_TYPE_Q8_0, t, cols), cols);
    }
}

static void matmul_set(cpu_backend *b, const mm_job *jobs, int n_jobs, const float *x, int T) {
    mm_set s = {b, jobs, n_jobs, x, T, 0};
    for (int j = 0; j < n_jobs; j++) s.total_rows += jobs[j].w->rows;
    quantize_inputs(b, jobs, n_jobs, x, T, jobs[0].w->cols);
    mu_pool_run(b->pool, mm_set_worker, &s);
}

/* ---- attention -------------------------------------------------------------
 * Online softmax per (query head) over the visible rows: running max M,
 * running sum S, weighted values O. Decode splits the rows across threads
 * (split-K, whole 32-row blocks each) and a reducer merges the partial
 * triples and divides once; prefill gives each thread whole (token, KV head)
 * items. */

typedef struct attn_ctx {
    cpu_backend *b;
    int layer, T, pos0;
    const float *q; /* [T][n_head][head_dim] */
    float *o;       /* [T][n_head][head_dim] */
} attn_ctx;

static inline const void *kv_row(const cpu_backend *b, const void *base, int64_t slot) {
    return (const uint8_t *)base + (size_t)slot * b->kv_row_bytes;
}

/* Folds rows [i0, i1) of the visible span into the triples of the n_q query
 * heads that share KV head kvh. m, s: [n_q]; acc: [n_q][head_dim]. */
static void attend_rows(const cpu_backend *b, int layer, const mu_route_decision *d, int kvh, const float *q,
                        int n_q, int64_t i0, int64_t i1, float *m, float *s, float *acc) {
    const mu_hparams *hp = &b->m->hp;
    const int hd = hp->head_dim;
    const mu_kv_plane *p = &b->planes[layer];
    const bool f16 = b->cfg.kv_type == MUSER_KV_F16;
    const size_t head_off = (size_t)kvh * hd * (f16 ? 2 : 4);
    for (int64_t i = i0; i < i1; i++) {
        int64_t slot = d->route == MU_ROUTE_CONTIGUOUS ? d->phys_first + i : (d->phys_first + i) % p->capacity;
        const uint8_t *krow = (const uint8_t *)kv_row(b, b->kcache[layer], slot) + head_off;
        const uint8_t *vrow = (const uint8_t *)kv_row(b, b->vcache[layer], slot) + head_off;
        for (int h = 0; h < n_q; h++) {
            const float *qh = q + (int64_t)h * hd;
            float score = (f16 ? b->k->dot_f16_f32((const uint16_t *)krow, qh, hd) : b->k->dot_f32((const float *)krow, qh, hd)) *
                          hp->attn_scale;
            float *a = acc + (int64_t)h * hd;
            if (score > m[h]) {
                float corr = m[h] == -INFINITY ? 0.0f : expf(m[h] - score);
                s[h] = s[h] * corr + 1.0f;
                for (int e = 0; e < hd; e++) a[e] *= corr;
                m[h] = score;
                if (f16) b->k->axpy_f16(1.0f, (const uint16_t *)vrow, a, hd);
                else b->k->axpy_f32(1.0f, (const float *)vrow, a, hd);
            } else {
                float w = expf(score - m[h]);
                s[h] += w;
                if (f16) b->k->axpy_f16(w, (const uint16_t *)vrow, a, hd);
                else b->k->axpy_f32(w, (const float *)vrow, a, hd);
            }
        }
    }
}

static void init_triples(int n, int hd, float *m, float *s, float *acc) {
    for (int h = 0; h < n; h++) {
        m[h] = -INFINITY;
        s[h] = 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)n * hd);
}

/* Decode: worker ith owns blocks mu_splitk_owned(n, nth, ith) for all heads. */
static void attn_decode_worker(void *vctx, int ith, int nth) {
    attn_ctx *c = vctx;
    cpu_backend *b = c->b;
    const mu_hparams *hp = &b->m->hp;
    const int hd = hp->head_dim, per_kv = hp->n_head / hp->n_head_kv;
    const mu_route_decision *d = &b->route;
    mu_splitk_range r = mu_splitk_owned(d->n_visible, nth, ith);
    float *m = b->part_m + (size_t)ith * hp->n_head, *s = b->part_s + (size_t)ith * hp->n_head;
    float *acc = b->part_o + (size_t)ith * hp->n_head * hd;
    init_triples(hp->n_head, hd, m, s, acc);
    for (int kvh = 0; kvh < hp->n_head_kv; kvh++) {
        int h0 = kvh * per_kv; /* GQA: query head h reads KV head h / per_kv */
        attend_rows(b, c->layer, d, kvh, c->q + (int64_t)h0 * hd, per_kv, r.first_row, r.first_row + r.n_rows,
                    m + h0, s + h0, acc + (int64_t)h0 * hd);
    }
}

/* Merges the per-thread triples and divides once. */
static void attn_decode_reduce(cpu_backend *b, int nth, float *o) {
    const mu_hparams *hp = &b->m->hp;
    const int hd = hp->head_dim;
    for (int h = 0; h < hp->n_head; h++) {
        float M = -INFINITY;
        for (int t = 0; t < nth; t++) M = fmaxf(M, b->part_m[(size_t)t * hp->n_head + h]);
        float S = 0.0f;
        float *out = o + (int64_t)h * hd;
        memset(out, 0, sizeof(float) * hd);
        for (int t = 0; t < nth; t++) {
            float mt = b->part_m[(size_t)t * hp->n_head + h];
            if (mt == -INFINITY) continue; /* this worker owned no rows */
            float w = expf(mt - M);
            S += w * b->part_s[(size_t)t * hp->n_head + h];
            const float *a = b->part_o + ((size_t)t * hp->n_head + h) * hd;
            for (int e = 0; e < hd; e++) out[e] += w * a[e];
        }
        const float inv = 1.0f / S;
        for (int e = 0; e < hd; e++) out[e] *= inv;
    }
}

static void attn_prefill_worker(void *vctx, int ith, int nth) {
    attn_ctx *c = vctx;
    cpu_backend *b = c->b;
    const mu_hparams *hp = &b->m->hp;
    const mu_layer *L = &b->m->layers[c->layer];
    const int hd = hp->head_dim, per_kv = hp->n_head / hp->n_head_kv;
    float *m = b->part_m + (size_t)ith * hp->n_head, *s = b->part_s + (size_t)ith * hp->n_head;
    float *acc = b->part_o + (size_t)ith * hp->n_head * hd;
    const int items = c->T * hp->n_head_kv;
    for (int it = ith; it < items; it += nth) {
        int t = it / hp->n_head_kv, kvh = it % hp->n_head_kv;
        int64_t pos = c->pos0 + t;
        mu_route_decision d;
        int64_t n_vis = mu_layer_visible(hp, L, pos);
        /* Route checks are per token; the planes hold the whole chunk. */
        if (!mu_attn_route_select(&b->planes[c->layer], pos, n_vis, c->layer, &d)) continue;
        int h0 = kvh * per_kv;
        init_triples(per_kv, hd, m, s, acc);
        attend_rows(b, c->layer, &d, kvh, c->q + ((int64_t)t * hp->n_head + h0) * hd, per_kv, 0, d.n_visible, m, s,
                    acc);
        for (int h = 0; h < per_kv; h++) {
            float *out = c->o + ((int64_t)t * hp->n_head + h0 + h) * hd;
            const float inv = 1.0f / s[h];
            for (int e = 0; e < hd; e++) out[e] = acc[(int64_t)h * hd + e] * inv;
        }
    }
}

static int attention(cpu_backend *b, int layer, int T, int pos0, const float *q, float *o) {
    attn_ctx c = {b, layer, T, pos0, q, o};
    const mu_hparams *hp = &b->m->hp;
    if (T == 1) {
        int64_t n_vis = mu_layer_visible(hp, &b->m->layers[layer], pos0);
        if (!mu_attn_route_select(&b->planes[layer], pos0, n_vis, layer, &b->route))
            return mu_fail(MUSER_EINVAL, "layer %d: the KV plane does not hold positions %lld..%d", layer,
                           (long long)(pos0 - n_vis + 1), pos0);
        mu_pool_run(b->pool, attn_decode_worker, &c);
        attn_decode_reduce(b, mu_pool_size(b->pool), o);
        return 0;
    }
    /* Prefill: every query's span must be held (rings hold window + chunk - 1). */
    for (int t = 0; t < T; t++) {
        int64_t pos = pos0 + t, n_vis = mu_layer_visible(hp, &b->m->layers[layer], pos);
        if (!mu_kv_holds(&b->planes[layer], pos - n_vis + 1, pos))
            return mu_fail(MUSER_EINVAL, "layer %d: the KV plane does not hold positions %lld..%lld", layer,
                           (long long)(pos - n_vis + 1), (long long)pos);
    }
    mu_pool_run(b->pool, attn_prefill_worker, &c);
    return 0;
}

/* ---- per-token elementwise work ------------------------------------------ */

typedef struct swiglu_ctx {
    float *g;
    const float *u;
    int64_t n;
} swiglu_ctx;

static void swiglu_worker(void *vctx, int ith, int nth) {
    swiglu_ctx *c = vctx;
    int64_t i0 = c->n * ith / nth, i1 = c->n * (ith + 1) / nth;
    for (int64_t i = i0; i < i1; i++) c->g[i] = mu_silu(c->g[i]) * c->u[i];
}

static void store_kv(cpu_backend *b, int layer, int64_t slot, const float *k, const float *v) {
    const int kvd = b->kv_dim;
    uint8_t *kd = (uint8_t *)b->kcache[layer] + (size_t)slot * b->kv_row_bytes;
    uint8_t *vd = (uint8_t *)b->vcache[layer] + (size_t)slot * b->kv_row_bytes;
    if (b->cfg.kv_type == MUSER_KV_F16) {
        for (int i = 0; i < kvd; i++) {
            ((uint16_t *)kd)[i] = mu_f32_to_f16(k[i]);
            ((uint16_t *)vd)[i] = mu_f32_to_f16(v[i]);
        }
    } else {
        memcpy(kd, k, sizeof(float) * kvd);
        memcpy(vd, v, sizeof(float) * kvd);
    }
}

/* ---- the forward pass ------------------------------------------------------ */

static int cpu_forward(mu_backend *base, const muser_token *tokens, int T, int pos0, bool all_logits, float *logits) {
    cpu_backend *b = (cpu_backend *)base;
    const mu_model *m = b->m;
    const mu_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, KV = b->kv_dim, F = hp->n_ff;
    float *x = b->x, *a = b->a;

    for (int t = 0; t < T; t++) {
        float *xt = x + t * E;
        mu_dequant_row(m->tok_embd.type, (const uint8_t *)m->tok_embd.data + (uint64_t)tokens[t] * m->tok_embd.row_bytes,
                       xt, E);
        if (hp->embd_norm) mu_rmsnorm(xt, NULL, xt, E, hp->rms_eps);
    }

    for (int l = 0; l < hp->n_layer; l++) {
        const mu_layer *L = &m->layers[l];
        for (int t = 0; t < T; t++) mu_rmsnorm(x + t * E, L->attn_norm, a + t * E, E, hp->rms_eps);
        mm_job qkvg[4] = {{&L->wq, b->q}, {&L->wk, b->k_cur}, {&L->wv, b->v_cur}, {&L->wgate, b->g}};
        matmul_set(b, qkvg, L->wgate.data ? 4 : 3, a, T);

        for (int t = 0; t < T; t++) {
            float *qt = b->q + t * Q, *kt = b->k_cur + t * KV;
            if (L->q_norm) {
                for (int h = 0; h < hp->n_head; h++) mu_rmsnorm(qt + h * hp->head_dim, L->q_norm, qt + h * hp->head_dim, hp->head_dim, hp->rms_eps);
                for (int h = 0; h < hp->n_head_kv; h++) mu_rmsnorm(kt + h * hp->head_dim, L->k_norm, kt + h * hp->head_dim, hp->head_dim, hp->rms_eps);
            }
            if (L->use_rope) {
                mu_rope_table(hp, L->rope_base, m->rope_freq_factors, pos0 + t, b->rope_cs);
                mu_rope_apply(hp, b->rope_cs, qt, hp->n_head);
                mu_rope_apply(hp, b->rope_cs, kt, hp->n_head_kv);
            }
            int64_t slot = mu_kv_append(&b->planes[l]);
            if (slot < 0) return mu_fail(MUSER_ECONTEXT, "layer %d: KV plane is full", l);
            store_kv(b, l, slot, kt, b->v_cur + t * KV);
        }

        int rc = attention(b, l, T, pos0, b->q, b->o);
        if (rc) return rc;

        if (L->wgate.data)
            for (int64_t i = 0; i < (int64_t)T * Q; i++) b->o[i] *= mu_sigmoid(b->g[i]);
        mm_job wo = {&L->wo, b->t};
        matmul_set(b, &wo, 1, b->o, T);
        for (int t = 0; t < T; t++) {
            float *tt = b->t + t * E, *xt = x + t * E;
            if (L->post_attn_norm) mu_rmsnorm(tt, L->post_attn_norm, tt, E, hp->post_norm_eps);
            for (int64_t i = 0; i < E; i++) xt[i] += tt[i];
            mu_rmsnorm(xt, L->ffn_norm, a + t * E, E, hp->rms_eps);
        }

        mm_job gu[2] = {{&L->ffn_gate, b->ff_g}, {&L->ffn_up, b->ff_u}};
        matmul_set(b, gu, 2, a, T);
        swiglu_ctx sw = {b->ff_g, b->ff_u, (int64_t)T * F};
        mu_pool_run(b->pool, swiglu_worker, &sw);
        mm_job down = {&L->ffn_down, b->t};
        matmul_set(b, &down, 1, b->ff_g, T);
        for (int t = 0; t < T; t++) {
            float *tt = b->t + t * E, *xt = x + t * E;
            if (L->post_ffn_norm) mu_rmsnorm(tt, L->post_ffn_norm, tt, E, hp->post_norm_eps);
            for (int64_t i = 0; i < E; i++) xt[i] += tt[i];
        }
    }

    /* Final norm and LM head for the rows that want logits. */
    int first = all_logits ? 0 : T - 1, rows = T - first;
    for (int t = 0; t < rows; t++) mu_rmsnorm(x + (first + t) * E, m->output_norm, a + t * E, E, hp->rms_eps);
    mm_job head = {&m->output, logits};
    matmul_set(b, &head, 1, a, rows);
    for (int t = 0; t < rows; t++) mu_logits_finish(logits + (int64_t)t * hp->n_vocab, hp->n_vocab, hp->logit_scale, hp->softcap);
    return 0;
}

static int cpu_truncate(mu_backend *base, int pos) {
    cpu_backend *b = (cpu_backend *)base;
    const mu_hparams *hp = &b->m->hp;
    /* Check every plane first so a refusal leaves the session unchanged. */
    for (int l = 0; l < hp->n_layer; l++) {
        const mu_kv_plane *p = &b->planes[l];
        int64_t need = pos > 0 ? pos - (mu_layer_visible(hp, &b->m->layers[l], pos) - 1) : 0;
        if (pos > 0 && p->origin_logical > need)
            return mu_fail(MUSER_EUNSUPPORTED,
                           "cannot rewind to position %d: layer %d's sliding ring no longer holds position %lld", pos,
                           l, (long long)need);
    }
    for (int l = 0; l < hp->n_layer; l++) {
        if (pos == 0) mu_kv_plane_reset(&b->planes[l]);
        else mu_kv_truncate(&b->planes[l], pos);
    }
    return 0;
}

static void cpu_reset(mu_backend *base) {
    cpu_backend *b = (cpu_backend *)base;
    for (int l = 0; l < b->m->hp.n_layer; l++) mu_kv_plane_reset(&b->planes[l]);
}

static void cpu_free(mu_backend *base) {
    cpu_backend *b = (cpu_backend *)base;
    if (!b) return;
    if (b->kcache)
        for (int l = 0; l < b->m->hp.n_layer; l++) {
            free(b->kcache[l]);
            free(b->vcache[l]);
        }
    free(b->kcache);
    free(b->vcache);
    free(b->planes);
    free(b->arena);
    mu_pool_free(b->pool);
    free(b);
}

static const mu_backend_ops cpu_ops = {"cpu", cpu_forward, cpu_truncate, cpu_reset, cpu_free,
                                       mu_cpu_checkpoint_save, mu_cpu_checkpoint_restore};

int mu_cpu_backend_new(const mu_model *m, const mu_session_config *cfg, mu_backend **out) {
    *out = NULL;
    const mu_hparams *hp = &m->hp;
    cpu_backend *b = calloc(1, sizeof *b);
    if (!b) return mu_fail(MUSER_ENOMEM, "out of memory");
    b->base.ops = &cpu_ops;
    b->m = m;
    b->cfg = *cfg;
    b->k = mu_cpu_kernels_get(NULL);
    if (!b->k) {
        free(b);
        return mu_fail(MUSER_EUNSUPPORTED, "MUSER_ISA names an instruction set this CPU or build cannot run");
    }
    b->pool = mu_pool_new(cfg->n_threads);
    if (!b->pool) {
        free(b);
        return MUSER_EINVAL;
    }
    b->kv_dim = hp->n_head_kv * hp->head_dim;
    b->kv_row_bytes = (size_t)b->kv_dim * (cfg->kv_type == MUSER_KV_F16 ? 2 : 4);

    /* KV planes: rings of window + chunk - 1 rows for sliding layers,
     * growing planes of n_ctx rows for full layers. */
    b->planes = calloc((size_t)hp->n_layer, sizeof(mu_kv_plane));
    b->kcache = calloc((size_t)hp->n_layer, sizeof(void *));
    b->vcache = calloc((size_t)hp->n_layer, sizeof(void *));
    int rc = 0;
    for (int l = 0; l < hp->n_layer && !rc; l++) {
        const mu_layer *L = &m->layers[l];
        bool ring = L->is_swa && hp->n_swa > 0 && (int64_t)hp->n_swa + cfg->n_batch - 1 < cfg->n_ctx;
        int64_t cap = ring ? (int64_t)hp->n_swa + cfg->n_batch - 1 : cfg->n_ctx;
        mu_kv_plane_init(&b->planes[l], ring, cap);
        /* calloc: pages of a large growing plane are only touched as it fills. */
        b->kcache[l] = calloc((size_t)cap, b->kv_row_bytes);
        b->vcache[l] = calloc((size_t)cap, b->kv_row_bytes);
        if (!b->kcache[l] || !b->vcache[l]) rc = mu_fail(MUSER_ENOMEM, "out of memory for the KV cache");
    }

    /* Activation arena for one chunk. */
    const size_t T = (size_t)cfg->n_batch, E = (size_t)hp->n_embd, Q = (size_t)hp->n_head * hp->head_dim,
                 KV = (size_t)b->kv_dim, F = (size_t)hp->n_ff, nth = (size_t)mu_pool_size(b->pool);
    size_t widest = E > Q ? E : Q;
    if (F > widest) widest = F;
    widest = (widest + MU_QK_K - 1) / MU_QK_K * MU_QK_K; /* quantized rows are whole blocks */
    size_t floats = T * E * 2 /* x, a */ + T * Q * 3 /* q, g, o */ + T * KV * 2 + T * E /* t */ + T * F * 2 +
                    (size_t)hp->n_rot + nth * (size_t)hp->n_head * (2 + (size_t)hp->head_dim);
    size_t qk_bytes = T * (size_t)mu_row_bytes(MU_TYPE_Q8_K, (int64_t)widest) + 64;
    size_t q0_bytes = T * (size_t)mu_row_bytes(MU_TYPE_Q8_0, (int64_t)widest) + 64;
    if (!rc) {
        b->arena = malloc(floats * sizeof(float) + qk_bytes + q0_bytes + 64);
        if (!b->arena) rc = mu_fail(MUSER_ENOMEM, "out of memory for activations");
    }
    if (rc) {
        cpu_free(&b->base);
        return rc;
    }
    float *p = b->arena;
    b->x = p, p += T * E;
    b->a = p, p += T * E;
    b->q = p, p += T * Q;
    b->g = p, p += T * Q;
    b->o = p, p += T * Q;
    b->k_cur = p, p += T * KV;
    b->v_cur = p, p += T * KV;
    b->t = p, p += T * E;
    b->ff_g = p, p += T * F;
    b->ff_u = p, p += T * F;
    b->rope_cs = p, p += (size_t)hp->n_rot;
    b->part_m = p, p += nth * (size_t)hp->n_head;
    b->part_s = p, p += nth * (size_t)hp->n_head;
    b->part_o = p, p += nth * (size_t)hp->n_head * hp->head_dim;
    b->xq_k = (uint8_t *)p;
    b->xq_0 = b->xq_k + qk_bytes;
    *out = &b->base;
    return 0;
}
