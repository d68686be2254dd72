/* cuda_prefill.c — a chunk of T tokens (prefill): the decode step's op
 * order with cuBLAS GEMMs over dequantized weights (the fast lane's f16
 * copies when they are resident, else f16 or f32 tiles dequantized per
 * matrix), the attention split-K over the chunk's rows.
 */
#include <string.h>

#include "cuda/cuda_internal.h"

/* Whether the GEMM reads w's rows where they are: f16 copies, F16 rows in
 * the fast lane, F32 rows in the exact one (the device keeps float rows as
 * they are: dequantizing them would only copy them, the same values). */
static bool rows_in_place(const cuda_backend *b, const mu_cu_weight *w) {
    return b->fast ? (w->f16 || w->type == MU_TYPE_F16) : w->type == MU_TYPE_F32;
}

/* Y[T][ldy] (columns r0 .. r0+nrows) = A[T][cols] . W[r0 .. r0+nrows)^T */
static int gemm(cuda_backend *b, const mu_cu_weight *w, int64_t r0, int64_t nrows, const void *A, float *Y, int64_t ldy,
                int T) {
    const float one = 1.0f, zero = 0.0f;
    const int64_t cols = w->cols;
    if (b->fast) {
        const void *W;
        if (w->f16) {
            W = w->f16 + r0 * cols;
        } else if (w->type == MU_TYPE_F16) { /* (a drafter's 16-bit matrices: no per-pass copy) */
            W = (const uint16_t *)w->qs + r0 * cols;
        } else {
            CU_CHECK(mu_cu_dequant(w, r0, nrows, b->wk->wtmp, true, b->exec.stream));
            W = b->wk->wtmp;
        }
        BLAS_CHECK(b->cublas->gemm_ex(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nrows, T, (int)cols, &one, W, CUDA_R_16F,
                                (int)cols, A, CUDA_R_16F, (int)cols, &zero, Y, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
    } else {
        const void *W = (const float *)w->qs + r0 * cols;
        if (w->type != MU_TYPE_F32) {
            CU_CHECK(mu_cu_dequant(w, r0, nrows, b->wk->wtmp, false, b->exec.stream));
            W = b->wk->wtmp;
        }
        BLAS_CHECK(b->cublas->gemm_ex(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nrows, T, (int)cols, &one, W, CUDA_R_32F,
                                (int)cols, A, CUDA_R_32F, (int)cols, &zero, Y, CUDA_R_32F, (int)ldy,
                                CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
    }
    return 0;
}

/* Whether a short chunk (a verify block) multiplies w on the f16 tensor-core
 * batch over its quantized blocks instead of dequantized tiles. */
static bool mmf_chunk(const cuda_backend *b, const mu_cu_weight *w, int T) {
    return b->fast && w->qs && !w->f16 && T <= b->tune.prefill_mmf_rows && mu_cu_mmf_ok(w->type, w->cols) &&
           mu_gpu_mmf_halves((uint64_t)w->cols, (uint64_t)T) <= b->wk->mmf_x_halves;
}

/* Whether a chunk's producers of inputs of K columns (the residual/norm
 * tails, the attention merge, SwiGLU) also write them packed for the
 * tensor-core batch (mu_cu_normout.xp): a short chunk in the fast lane;
 * a consumer off the tensor-core batch reads A instead. */
static bool chunk_packs(const cuda_backend *b, int64_t K, int T) {
    return b->fast && T <= b->tune.prefill_mmf_rows && K % 256 == 0 &&
           mu_gpu_mmf_halves((uint64_t)K, (uint64_t)T) <= b->wk->mmf_x_halves;
}

/* Y_k = A . W_k^T for the n matrices of one input A (f16 [T][cols] in the
 * fast lane): on the f16 tensor-core batch the input is packed once (none
 * when packed: its producer wrote it) and the matrices of one type run in
 * one launch; else matrix by matrix. */
int cuda_gemm_set(cuda_backend *b, const mu_cu_weight *const *ws, float *const *ys, const int64_t *ldy, int n,
                  const void *A, int T, bool packed) {
    bool mmf = true;
    for (int k = 0; k < n; k++) mmf = mmf && (!ws[k]->qs || mmf_chunk(b, ws[k], T));
    if (!mmf) {
        for (int k = 0; k < n; k++) RC(cuda_gemm_all(b, ws[k], A, ys[k], ldy[k], T));
        return 0;
    }
    bool done[MU_CU_MAX_SEG] = {false};
    for (int k = 0; k < n; k++) {
        if (done[k] || !ws[k]->qs) continue;
        const int64_t cols = ws[k]->cols;
        if (!packed) CU_CHECK(mu_cu_mmf_pack16((const uint16_t *)A, cols, cols, T, b->wk->mmf_x, &b->exec));
        packed = true;
        mu_cu_mvr r;
        memset(&r, 0, sizeof r);
        cuda_mvr_take(&r, ws, ys, ldy, n, k, done);
        r.nrows = T;
        r.ldx = cols;
        r.xp = b->wk->mmf_x;
        r.part = b->wk->tc_part;
        r.part_cap = CUDA_TC_PART;
        r.counters = b->wk->tc_count;
        r.counter_cap = CUDA_TC_COUNT;
        CU_CHECK(mu_cu_mmf_set(&r, &b->exec));
    }
    return 0;
}

/* A whole matrix, in row tiles that fit the dequantization buffer. */
int cuda_gemm_all(cuda_backend *b, const mu_cu_weight *w, const void *A, float *Y, int64_t ldy, int T) {
    if (!w->qs) return 0;
    if (mmf_chunk(b, w, T)) return cuda_gemm_set(b, &w, &Y, &ldy, 1, A, T, false);
    const size_t elem = b->fast ? 2 : 4;
    int64_t tile = rows_in_place(b, w) ? w->rows : (int64_t)(b->wk->wtmp_bytes / ((size_t)w->cols * elem));
    if (tile < 1) return mu_fail(MUSER_EBACKEND, "dequantization buffer too small");
    for (int64_t r0 = 0; r0 < w->rows; r0 += tile) {
        int64_t n = w->rows - r0 < tile ? w->rows - r0 : tile;
        RC(gemm(b, w, r0, n, A, Y + r0, ldy, T));
    }
    return 0;
}

/* logits_all holds at least T rows (grown, never shrunk). */
int cuda_logit_rows_reserve(cuda_backend *b, int T) {
    if (b->wk->logit_rows >= T) return 0;
    if (b->wk->logits_all) cudaFree(b->wk->logits_all);
    b->wk->logits_all = NULL;
    b->wk->logit_rows = 0;
    RC(cuda_dalloc((void **)&b->wk->logits_all, (size_t)T * b->V * sizeof(float), "logits"));
    b->wk->logit_rows = T;
    return 0;
}

/* A prefill chunk (T > 1) in the decode step's parts: part 0 = embedding
 * and layer 0 up to Wo; part 2l+1 = the tail after Wo, then layer l's FFN;
 * part 2l+2 = the tail after down, then layer l+1 up to Wo, or the LM head
 * after the last layer. Each gemm into t writes the whole sum on one GPU
 * and a partial sum on a tensor-parallel rank, all-reduced between the
 * parts; every part after the first starts with the residual/norm tail. */
int cuda_prefill_part(cuda_backend *b, int part, int T, bool all_logits) {
    const mu_hparams *hp = &b->m->hp;
    const int L = hp->n_layer;
    const mu_cu_exec *x = &b->exec;
    const bool f = b->fast;
    const void *A = f ? (const void *)b->wk->a16 : (const void *)b->wk->ax;
    /* the inputs of E, Q and F columns packed by their producers */
    const bool pack_e = chunk_packs(b, b->E, T) && b->E <= MU_CU_TAIL_MAXN, pack_o = chunk_packs(b, b->Q, T),
               pack_f = chunk_packs(b, b->F, T);
    if (part == 0) {
        CU_CHECK(cudaMemcpyAsync(b->d_rec, b->h_rec, (size_t)b->rec_stride * T, cudaMemcpyHostToDevice, x->stream));
        mu_cu_resnorm rn = cuda_resnorm(b, NULL, NULL, b->w->layers[0].attn_norm, f);
        rn.embd_norm = hp->embd_norm;
        cuda_resnorm_pack(&rn, b, pack_e);
        CU_CHECK(mu_cu_embed(&b->w->tok_embd, cuda_recs(b), T, rn, b->d_best, x));
        RC(cuda_capture(b, 0, T)); /* h: layer 0's input (the embedding, normed when the model norms it) */
    } else if (part % 2 == 1) { /* after Wo of layer l: its FFN */
        const int l = (part - 1) / 2;
        const cu_layer *D = &b->w->layers[l];
        mu_cu_resnorm tail = cuda_resnorm(b, b->wk->t, D->post_attn_norm, D->ffn_norm, f);
        cuda_resnorm_pack(&tail, b, pack_e);
        CU_CHECK(mu_cu_resnorm_rows(tail, T, x));
        const mu_cu_weight *gu[] = {&D->ffn_gate, &D->ffn_up};
        float *const gu_y[] = {b->wk->ff, b->wk->fu};
        const int64_t gu_ld[] = {b->F, b->F};
        RC(cuda_gemm_set(b, gu, gu_y, gu_ld, 2, A, T, pack_e));
        CU_CHECK(mu_cu_swiglu_rows(b->wk->ff, b->wk->fu, f ? b->wk->f16b : NULL, b->F, T,
                                   pack_f ? b->wk->mmf_x : NULL, x));
        const mu_cu_weight *down = &D->ffn_down;
        const int64_t ld = b->E;
        return cuda_gemm_set(b, &down, &b->wk->t, &ld, 1, f ? (const void *)b->wk->f16b : (const void *)b->wk->ff, T,
                             pack_f);
    } else { /* after down of layer l */
        const int l = (part - 2) / 2;
        const float *next = l + 1 < L ? b->w->layers[l + 1].attn_norm : b->w->output_norm;
        mu_cu_resnorm tail = cuda_resnorm(b, b->wk->t, b->w->layers[l].post_ffn_norm, next, f);
        cuda_resnorm_pack(&tail, b, pack_e);
        CU_CHECK(mu_cu_resnorm_rows(tail, T, x));
        if (l + 1 < L) RC(cuda_capture(b, l + 1, T)); /* h: layer l + 1's input */
    }
    if (part == 2 * L) { /* the LM head (none on a split's first side: h crosses to the CPU) */
        if (!mu_model_heads(b->m)) return 0;
        if (!all_logits) return cuda_head_matvec(b, T - 1, false, NULL);
        RC(cuda_logit_rows_reserve(b, T));
        const mu_cu_weight *head = &b->w->output;
        const int64_t ld = b->V;
        RC(cuda_gemm_set(b, &head, &b->wk->logits_all, &ld, 1, A, T, pack_e));
        CU_CHECK(mu_cu_logits_finish(b->wk->logits_all, (int64_t)T * b->V, hp->logit_scale, hp->softcap, x));
        return 0;
    }
    const int l = part / 2;
    const cu_layer *D = &b->w->layers[l];
    const mu_cu_weight *qkvg[] = {&D->wq, &D->wk, &D->wv, &D->wgate};
    float *const qkvg_y[] = {b->wk->q, b->wk->k, b->wk->v, b->wk->g};
    const int64_t qkvg_ld[] = {b->Q, b->KVD, b->KVD, b->Q};
    RC(cuda_gemm_set(b, qkvg, qkvg_y, qkvg_ld, 4, A, T, pack_e));
    mu_cu_qkv_post qp = cuda_qkv_post(b, l, T);
    CU_CHECK(mu_cu_qkv_post_launch(&qp, x));
    RC(cuda_attention(b, b, l, T, 0, cuda_recs(b), b->split_pre, NULL, f, false, NULL, 1, pack_o));
    const mu_cu_weight *wo = &D->wo;
    const int64_t ld = b->E;
    return cuda_gemm_set(b, &wo, &b->wk->t, &ld, 1, f ? (const void *)b->wk->o16 : (const void *)b->wk->o, T, pack_o);
}

int cuda_prefill_run(cuda_backend *b, int T, bool all_logits) {
    for (int part = 0; part < cuda_decode_parts(b); part++) RC(cuda_prefill_part(b, part, T, all_logits));
    return 0;
}

