/* cuda_batch.c — batched decode: one token for each of T sessions of a model
 * sharing its weights, on the leader's stream and activations (b =
 * rows[0]); b->h_rec holds row i's record, filled by row i's session (its
 * KV slot, routes and position). The matrices run once for all rows,
 * attention per row over its session's KV cache; the prefill path's op
 * order, apart on purpose.
 */
#include <string.h>

#include "cuda/cuda_internal.h"

/* Y = A . W^T for T rows: through the GEMMs, or (mv: the exact lane with
 * tuning.batch_exact_rows) the B-row matvec over the quantized weights (A
 * f32, [T][cols]), each row with its one-row decode's arithmetic. */
static int mm_all(cuda_backend *b, bool mv, const mu_cu_weight *w, const void *A, float *Y, int64_t ldy, int T) {
    if (!mv) return cuda_gemm_all(b, w, A, Y, ldy, T);
    if (!w->qs) return 0;
    CU_CHECK(mu_cu_matvec_rows(w, (const float *)A, w->cols, Y, ldy, T, &b->exec));
    return 0;
}

/* Row i of a batched step, layer l: QK-norm + RoPE + KV append into kv's
 * cache, split-K attention over it, merge + gate into row i of o (o16). */
static int batch_attention_row(cuda_backend *b, cuda_backend *kv, int i, int l, bool f16_out) {
    mu_cu_recs recs = cuda_recs(b);
    recs.base += (int64_t)i * b->rec_stride;
    mu_cu_qkv_post qp = cuda_qkv_post(b, l, 1);
    qp.q = b->q + (int64_t)i * b->Q;
    qp.k = b->k + (int64_t)i * b->KVD;
    qp.v = b->v + (int64_t)i * b->KVD;
    qp.qn = b->qn + (int64_t)i * b->Q;
    qp.kc = kv->kc[l];
    qp.vc = kv->vc[l];
    qp.recs = recs;
    CU_CHECK(mu_cu_qkv_post_launch(&qp, &b->exec));
    return cuda_attention(b, kv, l, 1, i, recs, b->split_dec, NULL, f16_out, false, NULL, 1);
}

/* The batched step; logits of row i in row i of logits_all. */
static int run_batch(cuda_backend *b, cuda_backend *const *rows, int T) {
    const mu_hparams *hp = &b->m->hp;
    const mu_cu_exec *x = &b->exec;
    const bool f = b->fast;
    const bool mv = !f && b->tune.batch_exact_rows;
    CU_CHECK(cudaMemcpyAsync(b->d_rec, b->h_rec, (size_t)b->rec_stride * T, cudaMemcpyHostToDevice, x->stream));
    mu_cu_resnorm rn = cuda_resnorm(b, NULL, NULL, b->w->layers[0].attn_norm, f);
    rn.embd_norm = hp->embd_norm;
    CU_CHECK(mu_cu_embed(&b->w->tok_embd, cuda_recs(b), T, rn, b->d_best, x));
    const void *A = f ? (const void *)b->a16 : (const void *)b->ax;
    for (int l = 0; l < hp->n_layer; l++) {
        const cu_layer *D = &b->w->layers[l];
        RC(mm_all(b, mv, &D->wq, A, b->q, b->Q, T));
        RC(mm_all(b, mv, &D->wk, A, b->k, b->KVD, T));
        RC(mm_all(b, mv, &D->wv, A, b->v, b->KVD, T));
        RC(mm_all(b, mv, &D->wgate, A, b->g, b->Q, T));
        for (int i = 0; i < T; i++) RC(batch_attention_row(b, rows[i], i, l, f));
        RC(mm_all(b, mv, &D->wo, f ? (const void *)b->o16 : (const void *)b->o, b->t, b->E, T));
        CU_CHECK(mu_cu_resnorm_rows(cuda_resnorm(b, b->t, D->post_attn_norm, D->ffn_norm, f), T, x));
        RC(mm_all(b, mv, &D->ffn_gate, A, b->ff, b->F, T));
        RC(mm_all(b, mv, &D->ffn_up, A, b->fu, b->F, T));
        CU_CHECK(mu_cu_swiglu_rows(b->ff, b->fu, f ? b->f16b : NULL, b->F, T, x));
        RC(mm_all(b, mv, &D->ffn_down, f ? (const void *)b->f16b : (const void *)b->ff, b->t, b->E, T));
        const float *next = l + 1 < hp->n_layer ? b->w->layers[l + 1].attn_norm : b->w->output_norm;
        CU_CHECK(mu_cu_resnorm_rows(cuda_resnorm(b, b->t, D->post_ffn_norm, next, f), T, x));
    }
    RC(cuda_logit_rows_reserve(b, T));
    RC(mm_all(b, mv, &b->w->output, A, b->logits_all, b->V, T));
    CU_CHECK(mu_cu_logits_finish(b->logits_all, (int64_t)T * b->V, hp->logit_scale, hp->softcap, x));
    return 0;
}

/* Batched decode (mu_backend_ops.forward_batch): one token for each of n
 * sessions of the model sharing its weights, on rows[0]'s stream and
 * activations. Each row's session appends its position to its own planes
 * and decides its own routes (its record is copied into the leader's
 * records); the matrices run once for all rows through the prefill GEMMs
 * (fast lane: the f16 weight cache when it fits; exact lane: f32
 * dequantization per matrix), attention per row over the row's own KV
 * cache. Rows that cannot be mixed, or fewer than the tuning's batch_min_fast
 * / batch_min_exact (0: never), answer MUSER_EUNSUPPORTED before anything
 * changes: the engine then feeds them one by one through the decode graph. */
int cuda_forward_batch(mu_backend *const *rows_in, const muser_token *tokens, const int *pos, int n,
                       float *const *logits) {
    cuda_backend *const *rows = (cuda_backend *const *)rows_in;
    cuda_backend *b = rows[0];
    const int batch_min = b->fast ? b->tune.batch_min_fast : b->tune.batch_min_exact;
    if (batch_min <= 0 || n < batch_min || n > b->T_max)
        return mu_fail(MUSER_EUNSUPPORTED, "cuda: batch of %d rows not batched", n);
    for (int i = 0; i < n; i++) {
        const cuda_backend *r = rows[i];
        if (r->base.ops != b->base.ops || r->tp || r->w != b->w || r->fast != b->fast || r->kv_f32 != b->kv_f32 ||
            r->tune.mma_attention != b->tune.mma_attention || r->split_dec != b->split_dec ||
            r->rec_stride != b->rec_stride)
            return mu_fail(MUSER_EUNSUPPORTED, "cuda: rows of different weights or settings are not batched");
    }
    RC(cuda_use_device(b));
    for (int i = 0; i < n; i++) {
        cuda_backend *r = rows[i];
        RC(cuda_fill_records(r, &tokens[i], 1, pos[i], 0.0f, 0));
        if (r != b) memcpy(b->h_rec + (int64_t)i * b->rec_stride, r->h_rec, (size_t)b->rec_stride);
    }
    RC(run_batch(b, rows, n));
    RC(cuda_sync_checked(b));
    for (int i = 0; i < n; i++) RC(cuda_copy_logits(b, b->logits_all + (size_t)i * b->V, 1, logits[i], (size_t)b->V));
    return 0;
}

