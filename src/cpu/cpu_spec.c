/* cpu_spec.c — the CPU side of speculative decoding with a DFlash drafter:
 * the target's hidden-state capture, tentative positions of a verify step,
 * and the drafter backend (its K/V injection; its block pass is the
 * ordinary forward with non-causal attention, cpu_attn.c).
 *
 * Shapes: capture rows [T][n_cap][n_embd]; drafter features
 * [T][n_target_layers * n_embd] (the captured rows of one token, in the
 * drafter's target_layers order). */
#include <string.h>

#include "backends.h"
#include "cpu/cpu_internal.h"
#include "cpu/ops.h"
#include "model/dflash.h"
#include "model/rope.h"
#include "util/error.h"

void mu_cpu_capture(cpu_backend *b, int layer, int T) {
    const int64_t E = b->m->hp.n_embd;
    for (int k = 0; k < b->n_cap; k++) {
        if (b->cap_layers[k] != layer) continue;
        for (int t = 0; t < T; t++)
            memcpy(b->cap_rows + ((int64_t)t * b->n_cap + k) * E, b->x + (int64_t)t * E, sizeof(float) * (size_t)E);
    }
}

int mu_cpu_set_capture(mu_backend *base, const int *layers, int n, float *rows) {
    cpu_backend *b = (cpu_backend *)base;
    int rc = mu_capture_check(b->m, layers, n);
    if (rc) return rc;
    b->cap_layers = n ? layers : NULL;
    b->n_cap = n;
    b->cap_rows = n ? rows : NULL;
    return 0;
}

int mu_cpu_tentative_begin(mu_backend *base, int n) {
    cpu_backend *b = (cpu_backend *)base;
    return mu_tentative_begin(&b->tentative, b->m, b->planes, b->kv_row_bytes, n, mu_cpu_copy_rows, b);
}

int mu_cpu_tentative_keep(mu_backend *base, int n_keep) {
    cpu_backend *b = (cpu_backend *)base;
    return mu_tentative_keep(&b->tentative, b->m, b->planes, b->kv_row_bytes, n_keep, mu_cpu_copy_rows, b);
}

/* ---- the drafter's K/V injection ----------------------------------------------
 * g = rms(fc(features) * fc_scale) * enc_norm per token (x), then per layer
 * K = rope(k_norm(Wk g)) and V = Wv g at the token's position: no attention
 * norm, no query (llama.cpp's dflash KV-injection pass). */

static void tok_fuse(cpu_backend *b, int layer, int t) {
    (void)layer;
    const mu_drafter *d = b->draft;
    const int64_t E = b->m->hp.n_embd;
    float *ft = b->t + t * E;
    if (d->fc_scale != 1.0f)
        for (int64_t i = 0; i < E; i++) ft[i] *= d->fc_scale;
    mu_rmsnorm(ft, d->enc_norm, b->x + t * E, E, b->m->hp.rms_eps);
}

static void tok_inject_store(cpu_backend *b, int layer, int t) {
    const mu_hparams *hp = &b->m->hp;
    const mu_layer *L = &b->m->layers[layer];
    float *kt = b->k_cur + (int64_t)t * b->kv_dim;
    for (int h = 0; h < hp->n_head_kv; h++)
        mu_rmsnorm(kt + h * hp->head_dim, L->k_norm, kt + h * hp->head_dim, hp->head_dim, hp->rms_eps);
    float *cs = b->rope_cs + (int64_t)t * hp->n_rot;
    mu_rope_table(hp, L->rope_base, b->m->rope_freq_factors, b->slots_pos0 + t, cs);
    mu_rope_apply(hp, cs, kt, hp->n_head_kv);
    mu_cpu_store_kv(b, layer, b->slots[t], kt, b->v_cur + (int64_t)t * b->kv_dim);
}

int mu_cpu_draft_inject(mu_backend *base, const float *features, int n, int pos0) {
    cpu_backend *b = (cpu_backend *)base;
    const mu_drafter *d = b->draft;
    if (!d) return mu_fail(MUSER_EUNSUPPORTED, "draft_inject: this backend is not a drafter's");
    const int64_t width = (int64_t)d->n_target_layers * b->m->hp.n_embd;
    for (int done = 0; done < n;) {
        const int T = n - done < b->cfg.n_batch ? n - done : b->cfg.n_batch;
        mm_job fc = {&d->fc, b->t};
        mu_cpu_matmul_set(b, &fc, 1, features + (int64_t)done * width, T, -1);
        mu_cpu_for_tokens(b, 0, T, tok_fuse);
        for (int l = 0; l < b->m->hp.n_layer; l++) {
            const mu_layer *L = &b->m->layers[l];
            mm_job kv[2] = {{&L->wk, b->k_cur}, {&L->wv, b->v_cur}};
            mu_cpu_matmul_set(b, kv, 2, b->x, T, -1);
            for (int t = 0; t < T; t++) {
                b->slots[t] = mu_kv_append(&b->planes[l]);
                if (b->slots[t] < 0) return mu_fail(MUSER_ECONTEXT, "drafter layer %d: KV plane is full", l);
            }
            b->slots_pos0 = pos0 + done;
            mu_cpu_for_tokens(b, l, T, tok_inject_store);
        }
        done += T;
    }
    return 0;
}

int mu_cpu_drafter_new(const mu_drafter *d, const mu_session_config *cfg, mu_backend **out) {
    const int64_t width = (int64_t)d->n_target_layers * d->m.hp.n_embd;
    int rc = mu_cpu_backend_open(&d->m, cfg, width, out);
    if (rc) return rc;
    cpu_backend *b = (cpu_backend *)*out;
    if (!b->k->matvec_f32[d->fc.type] || !b->k->matmul_f32[d->fc.type]) {
        b->base.ops->free(*out);
        *out = NULL;
        return mu_fail(MUSER_EUNSUPPORTED, "the CPU backend has no %s kernel for tensor 'fc.weight' (type %s)",
                       mu_cpu_kernels_get(NULL)->isa, mu_type_name(d->fc.type));
    }
    b->draft = d;
    b->bidirectional = true;
    return 0;
}
