/* cuda_draft.c — a DFlash drafter on the GPU, beside a one-GPU target
 * session (docs/dflash.md). The drafter's decoder is a mu_model
 * (Qwen3-style dense layers: weighted QK-norm, NEOX RoPE, GQA, no gate or
 * post-norms), so a drafter's backend is a CUDA rank over it with three
 * differences:
 *
 *   - its chunks are non-causal: every row of the noise block sees the
 *     whole block (and the injected context before it). Only the step
 *     records change (cuda_fill_records with b->bidirectional: each row's
 *     visible span ends at the block's last row); the block runs the
 *     prefill path unchanged: one pass of GEMMs and split-K attention for
 *     the whole block, never a loop over its rows;
 *   - draft_inject: per target position, g = rms(fc . features * fc_scale)
 *     * enc_norm, then per layer K = rope(k_norm(Wk g)), V = Wv g appended
 *     at that position (no attention norm, no query): the fc GEMM, the
 *     norm tail, and per layer two GEMMs and the QK-norm/RoPE/append
 *     kernel over the KV heads only;
 *   - truncate never fails: a cache that cannot be cut back to a position
 *     restarts empty there (it only steers guesses).
 *
 * The target's embedding and LM head are read where the target holds them
 * (cuda_weights.c borrows them: no second upload).
 *
 * Shapes: features [T][n_target_layers x E] (host f32, staged as f16 in the
 * fast lane, f32 in the exact lane); the block's logits [T][n_vocab of the
 * drafter's head].
 */
#include <stdio.h>
#include <string.h>

#include "backends.h"
#include "cuda/cuda_api.h"
#include "cuda/cuda_internal.h"
#include "model/dflash.h"
#include "quant/quant.h"

static int draft_forward(mu_backend *base, const muser_token *tokens, int T, int pos0, bool all_logits,
                         float *logits) {
    cuda_backend *b = (cuda_backend *)base;
    RC(cuda_use_device(b));
    if (T < 1 || T > b->T_max) return mu_fail(MUSER_EINVAL, "drafter block of %d tokens (batch %d)", T, b->T_max);
    RC(cuda_fill_records(b, tokens, T, pos0, 0.0f, 0)); /* non-causal spans: b->bidirectional */
    RC(cuda_prefill_run(b, T, all_logits));              /* (one row too: the decode graph is causal-only) */
    RC(cuda_sync_checked(b));
    const size_t V = (size_t)b->V;
    return all_logits ? cuda_copy_logits(b, b->wk->logits_all, T, logits, V)
                      : cuda_copy_logits(b, b->logits, 1, logits, V);
}

/* The block's greedy guesses where its logits are: T ids cross to the host
 * instead of T x V logits (and no host scan of them). */
static int draft_forward_argmax(mu_backend *base, const muser_token *tokens, int T, int pos0, muser_token *ids) {
    cuda_backend *b = (cuda_backend *)base;
    RC(cuda_use_device(b));
    if (T < 1 || T > b->T_max) return mu_fail(MUSER_EINVAL, "drafter block of %d tokens (batch %d)", T, b->T_max);
    RC(cuda_fill_records(b, tokens, T, pos0, 0.0f, 0)); /* non-causal spans: b->bidirectional */
    RC(cuda_prefill_run(b, T, true));
    return cuda_rows_argmax(b, b->wk->logits_all, T, ids);
}

/* A drafter's cache only steers its guesses (the target's output never
 * depends on it): when it cannot be cut back to exactly pos (a ring that
 * forgot, or a target that moved on without it), it restarts empty at pos
 * rather than fail (as the CPU drafter). */
static int draft_truncate(mu_backend *base, int pos) {
    cuda_backend *b = (cuda_backend *)base;
    mu_planes_rewind_or_restart(b->m, b->planes, pos);
    return 0;
}

/* Host features of T positions into the pinned staging (times fc_scale:
 * fc is linear, so scaling its input scales its output), then the device. */
static int stage_features(cuda_backend *b, const float *features, int T) {
    const mu_drafter *d = b->draft;
    const size_t n = (size_t)T * (size_t)d->n_target_layers * (size_t)b->E;
    const float s = d->fc_scale;
    if (b->fast) {
        uint16_t *h = b->h_feat;
        for (size_t i = 0; i < n; i++) h[i] = mu_f32_to_f16(features[i] * s);
    } else {
        float *h = b->h_feat;
        for (size_t i = 0; i < n; i++) h[i] = features[i] * s;
    }
    CU_CHECK(cudaMemcpyAsync(b->d_feat, b->h_feat, n * (b->fast ? 2 : 4), cudaMemcpyHostToDevice, b->exec.stream));
    return 0;
}

static int draft_inject(mu_backend *base, const float *features, int n, int pos0) {
    cuda_backend *b = (cuda_backend *)base;
    const mu_drafter *d = b->draft;
    const mu_cu_exec *x = &b->exec;
    const int64_t width = (int64_t)d->n_target_layers * b->E;
    RC(cuda_use_device(b));
    for (int done = 0; done < n;) {
        const int T = n - done < b->T_max ? n - done : b->T_max;
        RC(stage_features(b, features + (size_t)done * (size_t)width, T));
        RC(cuda_fill_records(b, NULL, T, pos0 + done, 0.0f, 0)); /* the slots and RoPE tables */
        CU_CHECK(cudaMemcpyAsync(b->d_rec, b->h_rec, (size_t)b->rec_stride * T, cudaMemcpyHostToDevice, x->stream));
        /* h [T][E] = fc . features; ax (a16) = rms(h) * enc_norm: g */
        RC(cuda_gemm_all(b, &b->w->fc, b->d_feat, b->wk->h, b->E, T));
        CU_CHECK(mu_cu_resnorm_rows(cuda_resnorm(b, NULL, NULL, b->w->enc_norm, b->fast), T, x));
        const void *A = b->fast ? (const void *)b->wk->a16 : (const void *)b->wk->ax;
        for (int l = 0; l < b->m->hp.n_layer; l++) {
            const cu_layer *D = &b->w->layers[l];
            const mu_cu_weight *kv[] = {&D->wk, &D->wv};
            float *const kv_y[] = {b->wk->k, b->wk->v};
            const int64_t kv_ld[] = {b->KVD, b->KVD};
            RC(cuda_gemm_set(b, kv, kv_y, kv_ld, 2, A, T, false));
            mu_cu_qkv_post qp = cuda_qkv_post(b, l, T);
            qp.n_head = 0; /* no query: the KV heads only (k_norm, RoPE, append K and V) */
            qp.q = NULL;
            qp.qn = NULL;
            CU_CHECK(mu_cu_qkv_post_launch(&qp, x));
        }
        RC(cuda_sync_checked(b)); /* (the staging and the records are reused by the next chunk) */
        done += T;
    }
    return 0;
}

static void draft_free(mu_backend *base) { cuda_rank_free((cuda_backend *)base); }

static int draft_fill_kv(mu_backend *base, int depth, uint64_t seed) {
    return mu_cuda_set_synthetic_depth(base, depth, seed);
}

static const char *draft_describe(mu_backend *base) { return ((cuda_backend *)base)->desc; }

static const mu_backend_ops cuda_draft_ops = {
    .name = "cuda",
    .forward = draft_forward,
    .forward_argmax = draft_forward_argmax,
    .truncate = draft_truncate,
    .reset = cuda_reset,
    .free = draft_free,
    .fill_kv = draft_fill_kv,
    .describe = draft_describe,
    .draft_inject = draft_inject,
};

int mu_cuda_drafter_new(const mu_drafter *d, const mu_session_config *cfg, mu_backend *target, mu_backend **out) {
    *out = NULL;
    cuda_backend *t = cuda_backend_of(target);
    if (!t)
        return mu_fail(MUSER_EUNSUPPORTED, "speculative decoding on CUDA needs a one-GPU target session (--gpus N "
                                           "splits the model over GPUs, which does not run a drafter yet)");
    mu_cu_layout lay;
    if (!mu_cu_weight_layout(d->fc.type, d->fc.rows, d->fc.cols, &lay))
        return mu_fail(MUSER_EUNSUPPORTED, "DFlash drafter: 'fc.weight' of type %s is not supported by the CUDA backend",
                       mu_type_name(d->fc.type));
    cuda_backend *b = NULL;
    int rc = cuda_drafter_rank_new(d, cfg, t, &b);
    if (rc) {
        char why[512];
        snprintf(why, sizeof why, "%s", muser_last_error());
        return mu_fail(rc, "DFlash drafter on CUDA: %s", why);
    }
    const size_t feat = (size_t)b->T_max * (size_t)d->n_target_layers * (size_t)b->E * (b->fast ? 2 : 4);
    rc = cuda_dalloc(&b->d_feat, feat, "the drafter's features");
    if (!rc && cudaHostAlloc(&b->h_feat, feat, cudaHostAllocDefault) != cudaSuccess) {
        b->h_feat = NULL;
        rc = mu_fail(MUSER_EBACKEND, "cannot allocate pinned host memory for the drafter's features");
    }
    if (rc) {
        cuda_rank_free(b);
        return rc;
    }
    b->base.ops = &cuda_draft_ops;
    b->base.decode_select = NULL; /* (a drafter's rows are always a non-causal chunk) */
    *out = &b->base;
    return 0;
}
