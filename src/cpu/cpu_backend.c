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
#include <stdatomic.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "cpu/ops.h"
#include "engine/parity.h"
#include "model/rope.h"
#include "util/error.h"

/* ---- per-token elementwise steps -------------------------------------------
 * Each step runs over the tokens of the chunk, in one parallel region when
 * the chunk is large enough to pay for it (prefill), else on this thread. */

typedef struct token_ctx {
    cpu_backend *b;
    int layer, T;
    mu_cpu_token_fn fn;
    _Alignas(64) atomic_int next; /* next unclaimed token */
} token_ctx;

static void token_worker(void *vctx, int ith, int nth) {
    (void)ith, (void)nth;
    token_ctx *c = vctx;
    for (int t; (t = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed)) < c->T;) c->fn(c->b, c->layer, t);
}

#define PAR_TOKENS 4

void mu_cpu_for_tokens(cpu_backend *b, int layer, int T, mu_cpu_token_fn fn) {
    PROF_BEGIN(b);
    if (T >= PAR_TOKENS) {
        token_ctx c = {b, layer, T, fn, 0};
        mu_pool_run_elastic(b->pool, token_worker, &c);
    } else {
        for (int t = 0; t < T; t++) fn(b, layer, t);
    }
    PROF_END(b, MU_PROF_ELEMWISE, 1, 0);
}

static void tok_embed(cpu_backend *b, int layer, int t) {
    (void)layer;
    const mu_model *m = b->m;
    float *xt = b->x + (int64_t)t * m->hp.n_embd;
    if (m->hp.embd_norm) mu_rmsnorm(xt, NULL, xt, m->hp.n_embd, m->hp.rms_eps);
}

static void tok_attn_norm(cpu_backend *b, int layer, int t) {
    const int64_t E = b->m->hp.n_embd;
    mu_rmsnorm(b->x + t * E, b->m->layers[layer].attn_norm, b->a + t * E, E, b->m->hp.rms_eps);
}

void mu_cpu_store_kv(cpu_backend *b, int layer, int64_t slot, const float *k, const float *v) {
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

/* QK-norm, RoPE, then the K/V rows into the slot reserved for token t. */
static void tok_qk_store(cpu_backend *b, int layer, int t) {
    const mu_hparams *hp = &b->m->hp;
    const mu_layer *L = &b->m->layers[layer];
    const int64_t Q = (int64_t)hp->n_head * hp->head_dim, KV = b->kv_dim;
    float *qt = b->q + t * Q, *kt = b->k_cur + t * KV;
    if (L->q_norm) {
        for (int h = 0; h < hp->n_head; h++)
            mu_rmsnorm(qt + h * hp->head_dim, L->q_norm, qt + h * hp->head_dim, hp->head_dim, hp->rms_eps);
        for (int h = 0; h < hp->n_head_kv; h++)
            mu_rmsnorm(kt + h * hp->head_dim, L->k_norm, kt + h * hp->head_dim, hp->head_dim, hp->rms_eps);
    }
    if (L->use_rope) {
        float *cs = b->rope_cs + (int64_t)t * hp->n_rot;
        mu_rope_table(hp, L->rope_base, b->m->rope_freq_factors, b->slots_pos0 + t, cs);
        mu_rope_apply(hp, cs, qt, hp->n_head);
        mu_rope_apply(hp, cs, kt, hp->n_head_kv);
    }
    mu_cpu_store_kv(b, layer, b->slots[t], kt, b->v_cur + t * KV);
}

static void tok_gate(cpu_backend *b, int layer, int t) {
    (void)layer;
    const int64_t Q = (int64_t)b->m->hp.n_head * b->m->hp.head_dim;
    b->k->sigmoid_mul(b->o + t * Q, b->g + t * Q, Q);
}

/* Post-attention norm, residual, and the FFN's pre-norm. */
static void tok_post_attn(cpu_backend *b, int layer, int t) {
    const mu_hparams *hp = &b->m->hp;
    const mu_layer *L = &b->m->layers[layer];
    const int64_t E = hp->n_embd;
    float *tt = b->t + t * E, *xt = b->x + t * E;
    if (L->post_attn_norm) mu_rmsnorm(tt, L->post_attn_norm, tt, E, hp->post_norm_eps);
    for (int64_t i = 0; i < E; i++) xt[i] += tt[i];
    mu_rmsnorm(xt, L->ffn_norm, b->a + t * E, E, hp->rms_eps);
}

static void tok_swiglu(cpu_backend *b, int layer, int t) {
    (void)layer;
    const int64_t F = b->m->hp.n_ff;
    b->k->silu_mul(b->ff_g + t * F, b->ff_u + t * F, F);
}

static void tok_post_ffn(cpu_backend *b, int layer, int t) {
    const mu_hparams *hp = &b->m->hp;
    const mu_layer *L = &b->m->layers[layer];
    const int64_t E = hp->n_embd;
    float *tt = b->t + t * E, *xt = b->x + t * E;
    if (L->post_ffn_norm) mu_rmsnorm(tt, L->post_ffn_norm, tt, E, hp->post_norm_eps);
    for (int64_t i = 0; i < E; i++) xt[i] += tt[i];
}

/* ---- the forward pass ------------------------------------------------------ */

/* The embedding rows of the tokens into x, normed where the model says so;
 * a split's later side takes the residual rows its earlier side left. */
static void embed(cpu_backend *b, const muser_token *tokens, int T) {
    const mu_model *m = b->m;
    const int64_t E = m->hp.n_embd;
    if (!mu_model_embeds(m)) {
        memcpy(b->x, b->hidden, sizeof(float) * (size_t)T * (size_t)E);
        return;
    }
    PROF_BEGIN(b);
    for (int t = 0; t < T; t++)
        mu_dequant_row(m->tok_embd.type, (const uint8_t *)m->tok_embd.data + (uint64_t)tokens[t] * m->tok_embd.row_bytes,
                       b->x + t * E, E);
    PROF_END(b, MU_PROF_EMBED, 1, (uint64_t)T * m->tok_embd.row_bytes);
    mu_cpu_for_tokens(b, 0, T, tok_embed);
}

/* Layer l up to attention: the norm and the {q, k, v, gate} set. */
static void layer_qkvg(cpu_backend *b, int l, int T) {
    const mu_layer *L = &b->m->layers[l];
    mu_cpu_for_tokens(b, l, T, tok_attn_norm);
    mm_job qkvg[4] = {{&L->wq, b->q}, {&L->wk, b->k_cur}, {&L->wv, b->v_cur}, {&L->wgate, b->g}};
    mu_cpu_matmul_set(b, qkvg, L->wgate.data ? 4 : 3, b->a, T, -1);
}

/* Layer l after attention: gate, Wo, post-norm and residual, the FFN. */
static void layer_after_attention(cpu_backend *b, int l, int T) {
    const mu_layer *L = &b->m->layers[l];
    if (L->wgate.data) mu_cpu_for_tokens(b, l, T, tok_gate);
    mm_job wo = {&L->wo, b->t};
    mu_cpu_matmul_set(b, &wo, 1, b->o, T, -1);
    mu_cpu_for_tokens(b, l, T, tok_post_attn);
    mm_job gu[2] = {{&L->ffn_gate, b->ff_g}, {&L->ffn_up, b->ff_u}};
    mu_cpu_matmul_set(b, gu, 2, b->a, T, -1);
    mu_cpu_for_tokens(b, l, T, tok_swiglu);
    mm_job down = {&L->ffn_down, b->t};
    mu_cpu_matmul_set(b, &down, 1, b->ff_g, T, -1);
    mu_cpu_for_tokens(b, l, T, tok_post_ffn);
}

static int cpu_forward(mu_backend *base, const muser_token *tokens, int T, int pos0, bool all_logits, float *logits) {
    cpu_backend *b = (cpu_backend *)base;
    const mu_model *m = b->m;
    const mu_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd;

    embed(b, tokens, T);
    for (int l = 0; l < hp->n_layer; l++) {
        const mu_layer *L = &m->layers[l];
        if (b->n_cap) mu_cpu_capture(b, l, T);
        layer_qkvg(b, l, T);

        /* Slots are reserved in order on this thread; the stores run in parallel. */
        for (int t = 0; t < T; t++) {
            b->slots[t] = mu_kv_append(&b->planes[l]);
            if (b->slots[t] < 0) return mu_fail(MUSER_ECONTEXT, "layer %d: KV plane is full", l);
        }
        b->slots_pos0 = pos0;
        mu_cpu_for_tokens(b, l, T, tok_qk_store);

        {
            PROF_BEGIN(b);
            int rc = mu_cpu_attention(b, l, T, pos0, b->q, b->o);
            if (rc) return rc;
            uint64_t kv_bytes = 0;
            for (int t = 0; t < T; t++)
                kv_bytes += 2 * b->kv_row_bytes * (uint64_t)mu_layer_visible(hp, L, pos0 + t);
            PROF_END(b, MU_PROF_ATTN, 1, kv_bytes);
        }

        layer_after_attention(b, l, T);
    }
    if (!mu_model_heads(m)) { /* a split's earlier side: the residual rows cross to the later one */
        memcpy(b->hidden, b->x, sizeof(float) * (size_t)T * (size_t)E);
        return 0;
    }

    /* Final norm and LM head for the rows that want logits. */
    const int first = all_logits ? 0 : T - 1, rows = T - first;
    {
        PROF_BEGIN(b);
        for (int t = 0; t < rows; t++) mu_rmsnorm(b->x + (first + t) * E, m->output_norm, b->a + t * E, E, hp->rms_eps);
        PROF_END(b, MU_PROF_ELEMWISE, 1, 0);
    }
    mm_job head = {&m->output, logits};
    mu_cpu_matmul_set(b, &head, 1, b->a, rows, MU_PROF_LM_HEAD);
    {
        PROF_BEGIN(b);
        for (int t = 0; t < rows; t++) b->k->softcap(logits + (int64_t)t * hp->n_vocab, hp->n_vocab, hp->logit_scale, hp->softcap);
        PROF_END(b, MU_PROF_ELEMWISE, 1, 0);
    }
    return 0;
}

/* A chunk with every row's logits kept here, each row's greedy choice out
 * (speculative steps: the engine's interface for backends whose logits
 * live elsewhere; here it saves the engine nothing but runs its path). */
static int cpu_forward_argmax(mu_backend *base, const muser_token *tokens, int T, int pos0, muser_token *ids) {
    cpu_backend *b = (cpu_backend *)base;
    const int V = b->m->hp.n_vocab;
    if (!mu_model_heads(b->m)) return mu_fail(MUSER_EUNSUPPORTED, "a split's earlier side has no logits");
    b->kept_rows = 0;
    if (T > b->kept_cap) {
        float *l = realloc(b->kept_logits, sizeof(float) * (size_t)T * (size_t)V);
        if (!l) return mu_fail(MUSER_ENOMEM, "out of memory for logits");
        b->kept_logits = l;
        b->kept_cap = T;
    }
    int rc = cpu_forward(base, tokens, T, pos0, true, b->kept_logits);
    if (rc) return rc;
    for (int t = 0; t < T; t++) ids[t] = mu_argmax(b->kept_logits + (size_t)t * (size_t)V, V);
    b->kept_rows = T;
    return 0;
}

static int cpu_logits_row(mu_backend *base, int t, float *logits) {
    cpu_backend *b = (cpu_backend *)base;
    const size_t V = (size_t)b->m->hp.n_vocab;
    if (t < 0 || t >= b->kept_rows) return mu_fail(MUSER_ERANGE, "logit row %d of %d kept", t, b->kept_rows);
    memcpy(logits, b->kept_logits + (size_t)t * V, sizeof(float) * V);
    return 0;
}

/* ---- batched decode ---------------------------------------------------------
 * One token for each of n sequences: the weights are read once for all n
 * rows (every matmul set runs with T = n on the leader's activations and
 * threads), while each row's RoPE, KV append and attention use its own
 * position and KV planes. Those per-row steps run on a view of the leader:
 * the leader's threads, scratch and activation rows, the row's planes. */

/* The leader seen as a one-token chunk of row r over row_kv's planes. */
static cpu_backend row_view(const cpu_backend *lead, const cpu_backend *row_kv, int r) {
    const mu_hparams *hp = &lead->m->hp;
    const int64_t Q = (int64_t)hp->n_head * hp->head_dim, KV = lead->kv_dim;
    cpu_backend v = *lead;
    v.planes = row_kv->planes;
    v.kcache = row_kv->kcache;
    v.vcache = row_kv->vcache;
    v.q = lead->q + r * Q;
    v.o = lead->o + r * Q;
    v.k_cur = lead->k_cur + r * KV;
    v.v_cur = lead->v_cur + r * KV;
    v.rope_cs = lead->rope_cs + (int64_t)r * hp->n_rot;
    v.slots = lead->slots + r;
    return v;
}

static int cpu_forward_batch(mu_backend *const *rows, const muser_token *tokens, const int *pos, int n,
                             float *const *logits) {
    cpu_backend *b = (cpu_backend *)rows[0];
    const mu_model *m = b->m;
    const mu_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd;
    if (n > b->cfg.n_batch) return mu_fail(MUSER_EINVAL, "batch of %d rows exceeds the leader's %d", n, b->cfg.n_batch);
    for (int r = 1; r < n; r++) {
        const cpu_backend *row = (const cpu_backend *)rows[r];
        if (row->m != m || row->cfg.kv_type != b->cfg.kv_type || row->cfg.lane != b->cfg.lane)
            return mu_fail(MUSER_EUNSUPPORTED, "batched rows need one model, KV type and lane");
    }
    embed(b, tokens, n);
    for (int l = 0; l < hp->n_layer; l++) {
        layer_qkvg(b, l, n);
        for (int r = 0; r < n; r++) {
            cpu_backend *row = (cpu_backend *)rows[r];
            cpu_backend v = row_view(b, row, r);
            v.slots[0] = mu_kv_append(&row->planes[l]);
            if (v.slots[0] < 0) return mu_fail(MUSER_ECONTEXT, "layer %d: KV plane of row %d is full", l, r);
            v.slots_pos0 = pos[r];
            tok_qk_store(&v, l, 0);
            int rc = mu_cpu_attention(&v, l, 1, pos[r], v.q, v.o);
            if (rc) return rc;
        }
        layer_after_attention(b, l, n);
    }
    if (!mu_model_heads(m)) { /* the rows cross to the split's later side through the leader's rows */
        memcpy(b->hidden, b->x, sizeof(float) * (size_t)n * (size_t)E);
        return 0;
    }
    for (int r = 0; r < n; r++) mu_rmsnorm(b->x + r * E, m->output_norm, b->a + r * E, E, hp->rms_eps);
    /* The head reads the output matrix once for all rows, into [n][n_vocab]. */
    if (n > b->batch_logits_rows) {
        float *l = realloc(b->batch_logits, sizeof(float) * (size_t)n * (size_t)hp->n_vocab);
        if (!l) return mu_fail(MUSER_ENOMEM, "out of memory for batched logits");
        b->batch_logits = l;
        b->batch_logits_rows = n;
    }
    mm_job head = {&m->output, b->batch_logits};
    mu_cpu_matmul_set(b, &head, 1, b->a, n, MU_PROF_LM_HEAD);
    for (int r = 0; r < n; r++) memcpy(logits[r], b->batch_logits + (int64_t)r * hp->n_vocab, sizeof(float) * hp->n_vocab);
    for (int r = 0; r < n; r++) b->k->softcap(logits[r], hp->n_vocab, hp->logit_scale, hp->softcap);
    return 0;
}

static int cpu_truncate(mu_backend *base, int pos) {
    cpu_backend *b = (cpu_backend *)base;
    if (!b->draft) return mu_planes_truncate(b->m, b->planes, pos);
    /* A drafter's cache only steers its guesses (the target's output never
     * depends on it): when it cannot be cut back to exactly pos (a ring
     * that forgot, or a target that moved on without it), it restarts
     * empty at pos rather than fail. */
    mu_planes_rewind_or_restart(b->m, b->planes, pos);
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
    free(b->batch_logits);
    free(b->kept_logits);
    mu_pool_free(b->pool);
    mu_tentative_free(&b->tentative);
    free(b);
}

/* ---- bench hooks ----------------------------------------------------------- */

static const mu_prof_entry *cpu_profile(mu_backend *base, bool on) {
    cpu_backend *b = (cpu_backend *)base;
    if (!MUSER_PROFILE) return NULL;
    if (on) memset(b->prof.e, 0, sizeof b->prof.e);
    b->prof.on = on;
    return b->prof.e;
}

/* Random but finite K/V rows, as if depth tokens had been decoded: each
 * plane holds what it would hold then (a ring its last `capacity` rows,
 * starting at the physical slot the appends would have reached). Values
 * are uniform in [-2, 2), about the scale of QK-normed keys. */
static int cpu_fill_kv(mu_backend *base, int depth, uint64_t seed) {
    cpu_backend *b = (cpu_backend *)base;
    const int kvd = b->kv_dim;
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int l = 0; l < b->m->hp.n_layer; l++) {
        mu_kv_plane *p = &b->planes[l];
        mu_kv_plane_reset(p);
        if (depth > p->capacity && !p->ring)
            return mu_fail(MUSER_ECONTEXT, "layer %d: depth %d exceeds the plane's %lld rows", l, depth,
                           (long long)p->capacity);
        const int64_t held = depth < p->capacity ? depth : p->capacity;
        p->origin_logical = depth - held;
        p->origin_physical = depth > p->capacity ? depth % p->capacity : 0;
        p->len = held;
        for (int64_t r = 0; r < held; r++) {
            uint8_t *rows[2] = {(uint8_t *)b->kcache[l] + (size_t)r * b->kv_row_bytes,
                                (uint8_t *)b->vcache[l] + (size_t)r * b->kv_row_bytes};
            for (int kv = 0; kv < 2; kv++)
                for (int i = 0; i < kvd; i++) {
                    st ^= st << 13, st ^= st >> 7, st ^= st << 17; /* xorshift64 */
                    const float v = (float)(st >> 40) * (4.0f / 16777216.0f) - 2.0f;
                    if (b->cfg.kv_type == MUSER_KV_F16) ((uint16_t *)rows[kv])[i] = mu_f32_to_f16(v);
                    else ((float *)rows[kv])[i] = v;
                }
        }
    }
    return 0;
}

static int cpu_set_hidden(mu_backend *base, float *rows) {
    ((cpu_backend *)base)->hidden = rows;
    return 0;
}

static const mu_backend_ops cpu_ops = {.name = "cpu",
                                       .forward = cpu_forward,
                                       .truncate = cpu_truncate,
                                       .reset = cpu_reset,
                                       .free = cpu_free,
                                       .checkpoint_save = mu_cpu_checkpoint_save,
                                       .checkpoint_restore = mu_cpu_checkpoint_restore,
                                       .forward_batch = cpu_forward_batch,
                                       .fill_kv = cpu_fill_kv,
                                       .profile = cpu_profile,
                                       .set_capture = mu_cpu_set_capture,
                                       .tentative_begin = mu_cpu_tentative_begin,
                                       .tentative_keep = mu_cpu_tentative_keep,
                                       .forward_argmax = cpu_forward_argmax,
                                       .logits_row = cpu_logits_row,
                                       .draft_inject = mu_cpu_draft_inject,
                                       .set_hidden = cpu_set_hidden};

/* Every weight needs this ISA's kernels: the model binds any type it can
 * dequantize, some of which (Q8_1, Q8_K: activation formats) the CPU does
 * not multiply with. */
static int check_kernels(const mu_cpu_kernels *k, const mu_model *m) {
    const mu_weight *out = &m->output; /* (none in a split's earlier side) */
    if (out->data && (!k->matvec_f32[out->type] || !k->matmul_f32[out->type])) goto missing;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const mu_layer *L = &m->layers[l];
        const mu_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wgate, &L->wo, &L->ffn_gate, &L->ffn_up, &L->ffn_down};
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) {
            out = ws[i];
            if (out->data && (!k->matvec_f32[out->type] || !k->matmul_f32[out->type])) goto missing;
        }
    }
    return 0;
missing:
    return mu_fail(MUSER_EUNSUPPORTED, "the CPU backend has no %s kernel for tensor '%s' (type %s)", k->isa,
                   out->name, mu_type_name(out->type));
}

int mu_cpu_backend_new(const mu_model *m, const mu_session_config *cfg, mu_backend **out) {
    return mu_cpu_backend_open(m, cfg, 0, out);
}

int mu_cpu_backend_open(const mu_model *m, const mu_session_config *cfg, int64_t extra_cols, mu_backend **out) {
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
    int rc = check_kernels(b->k, m);
    if (rc) {
        free(b);
        return rc;
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
    if ((size_t)extra_cols > widest) widest = (size_t)extra_cols;
    widest = (widest + MU_QK_K - 1) / MU_QK_K * MU_QK_K; /* quantized rows are whole blocks */
    b->attn_scratch_floats = (mu_cpu_attn_scratch_floats(hp) + 15) / 16 * 16;
    size_t floats = T * E * 2 /* x, a */ + T * Q * 3 /* q, g, o */ + T * KV * 2 + T * E /* t */ + T * F * 2 +
                    T * (size_t)hp->n_rot + T * 2 /* slots */ + nth * (size_t)hp->n_head * (2 + (size_t)hp->head_dim) +
                    nth * b->attn_scratch_floats + 16;
    size_t xq_bytes = T * (size_t)mu_act_row_bytes((int64_t)widest) + 64;
    if (T * (size_t)mu_act_kd_bytes((int64_t)widest) + 64 > xq_bytes) /* b->xqp also holds the decode pack */
        xq_bytes = T * (size_t)mu_act_kd_bytes((int64_t)widest) + 64;
    if (!rc) {
        b->arena = malloc(floats * sizeof(float) + 2 * xq_bytes + 64);
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
    b->rope_cs = p, p += T * (size_t)hp->n_rot;
    b->slots = (int64_t *)p, p += T * 2;
    b->part_m = p, p += nth * (size_t)hp->n_head;
    b->part_s = p, p += nth * (size_t)hp->n_head;
    b->part_o = p, p += nth * (size_t)hp->n_head * hp->head_dim;
    p = (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
    b->attn_scratch = p, p += nth * b->attn_scratch_floats;
    b->xq = (uint8_t *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
    b->xqp = b->xq + (xq_bytes - 64 + 63) / 64 * 64;
    *out = &b->base;
    return 0;
}
