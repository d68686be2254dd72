/* cuda_batch.c — batched decode: one token for each of T sessions of a model
 * sharing its weights, on the leader's stream and activations (b =
 * rows[0]); b->h_rec holds row i's record, filled by row i's session (its
 * KV slot, routes and position). The matrices run once for all rows (the
 * B-row matvecs over the quantized weights, or the prefill GEMMs),
 * attention per row over its session's KV cache; the prefill path's op
 * order, apart on purpose.
 */
#include <string.h>

#include "cuda/cuda_internal.h"

/* How a batched step runs its matrices. */
typedef enum {
    MM_GEMM,       /* the prefill GEMMs (fast lane: f16 inputs; exact lane: f32) */
    MM_EXACT_ROWS, /* exact lane: the B-row matvec, f32 inputs, each row's one-row arithmetic */
    MM_FAST_ROWS,  /* fast lane: the B-row matvec, int8 inputs staged per row */
    MM_MMF,        /* fast lane: f16 inputs times the K-quants dequantized in registers on tensor cores */
} mm_route;

/* The fast lane takes the B-row matvec up to tune.batch_fast_rows rows,
 * when it has a kernel for every matrix of the model. */
static bool fast_rows_every_matrix(const cu_weights *W, int n_layer) {
    for (int l = 0; l < n_layer; l++) {
        const cu_layer *D = &W->layers[l];
        const mu_cu_weight *in_norm[] = {&D->wq, &D->wk, &D->wv, &D->wgate, &D->ffn_gate, &D->ffn_up};
        for (size_t k = 0; k < sizeof in_norm / sizeof in_norm[0]; k++)
            if (in_norm[k]->qs && !mu_cu_matvec_rows_fast_ok(in_norm[k]->type, in_norm[k]->cols, 0)) return false;
        if (!mu_cu_matvec_rows_fast_ok(D->wo.type, D->wo.cols, 1) ||
            !mu_cu_matvec_rows_fast_ok(D->ffn_down.type, D->ffn_down.cols, 1))
            return false;
    }
    return !W->output.qs || mu_cu_matvec_rows_fast_ok(W->output.type, W->output.cols, 0); /* (a split's first side has none) */
}

static bool fast_rows_every(const cuda_backend *b) {
    if (!b->w->fast_rows) b->w->fast_rows = fast_rows_every_matrix(b->w, b->m->hp.n_layer) ? 1 : 2;
    return b->w->fast_rows == 1;
}

/* Fast lane: up to batch_fast_rows rows the B-row matvec; more the GEMMs
 * over the f16 cache where it is resident, else on the f16 tensor cores
 * where batch_mmq (the matrices without a tensor-core kernel through the
 * B-row matvec), else GEMMs over weights dequantized every step. */
static mm_route batch_route(const cuda_backend *b, int T) {
    if (!b->fast) return b->tune.batch_exact_rows ? MM_EXACT_ROWS : MM_GEMM;
    if (!fast_rows_every(b)) return MM_GEMM;
    if (T <= b->tune.batch_fast_rows) return MM_FAST_ROWS;
    return !b->tune.batch_mmq || b->w->f16mem ? MM_GEMM : MM_MMF;
}

void cuda_mvr_take(mu_cu_mvr *r, const mu_cu_weight *const *ws, float *const *ys, const int64_t *ldy, int n, int k,
                   bool *done) {
    for (int j = k; j < n; j++) {
        if (done[j] || !ws[j]->qs || ws[j]->type != ws[k]->type || ws[j]->cols != ws[k]->cols) continue;
        r->seg[r->nseg].w = *ws[j];
        r->seg[r->nseg].y = ys[j];
        r->seg[r->nseg++].ldy = ldy[j];
        done[j] = true;
    }
}

/* Y_k = A . W_k^T for T rows and the n matrices of one input (row strides
 * ldx of A, ldy[k] of Y_k). A: f16 [T][ldx] (MM_GEMM, fast lane), f32
 * [T][ldx] (exact lane; MM_FAST_ROWS with aq NULL: quantized while staged),
 * with aq/ads its int8 groups where the producer wrote them (MM_MMF: always).
 * MM_FAST_ROWS and MM_MMF run the matrices of one type in one launch (MM_MMF
 * those without a tensor-core kernel as MM_FAST_ROWS). packed: MM_MMF's
 * packed inputs are in wk->mmf_x already (the producer wrote them). */
static int mm_set(cuda_backend *b, mm_route route, const mu_cu_weight *const *ws, float *const *ys,
                  const int64_t *ldy, int n, const void *A, const int8_t *aq, const float *ads, int64_t ldx, int T,
                  bool packed) {
    for (int k = 0; route == MM_MMF && !packed && k < n; k++)
        if (ws[k]->qs && mu_cu_mmf_ok(ws[k]->type, ws[k]->cols)) { /* the inputs packed as f16 (A: f32) */
            CU_CHECK(mu_cu_mmf_pack((const float *)A, ldx, ws[k]->cols, T, b->wk->mmf_x, &b->exec));
            break;
        }
    if (route == MM_GEMM || route == MM_EXACT_ROWS) {
        for (int k = 0; k < n; k++) {
            const mu_cu_weight *w = ws[k];
            if (route == MM_GEMM) RC(cuda_gemm_all(b, w, A, ys[k], ldy[k], T));
            else if (w->qs) CU_CHECK(mu_cu_matvec_rows(w, (const float *)A, ldx, ys[k], ldy[k], T, &b->exec));
        }
        return 0;
    }
    bool done[MU_CU_MAX_SEG] = {false};
    for (int k = 0; k < n; k++) {
        if (done[k] || !ws[k]->qs) continue;
        mu_cu_mvr r;
        memset(&r, 0, sizeof r);
        r.act = cuda_act(aq ? NULL : (const float *)A, aq, ads);
        r.ldx = ldx;
        r.nrows = T;
        r.part = b->wk->tc_part;
        r.part_cap = CUDA_TC_PART;
        r.counters = b->wk->tc_count;
        r.counter_cap = CUDA_TC_COUNT;
        r.xp = b->wk->mmf_x;
        cuda_mvr_take(&r, ws, ys, ldy, n, k, done);
        if (route == MM_MMF && mu_cu_mmf_ok(ws[k]->type, ws[k]->cols)) CU_CHECK(mu_cu_mmf_set(&r, &b->exec));
        else CU_CHECK(mu_cu_matvec_rows_fast(&r, &b->exec));
    }
    return 0;
}

/* one matrix of mm_set */
static int mm_one(cuda_backend *b, mm_route route, const mu_cu_weight *w, float *y, int64_t ldy, const void *A,
                  const int8_t *aq, const float *ads, int64_t ldx, int T, bool packed) {
    return mm_set(b, route, &w, &y, &ldy, 1, A, aq, ads, ldx, T, packed);
}

/* Row i of a batched step, layer l: QK-norm + RoPE + KV append into kv's
 * cache, split-K attention over it, merge + gate into row i of o (o16). */
static int batch_attention_row(cuda_backend *b, cuda_backend *kv, int i, int l, bool f16_out) {
    mu_cu_recs recs = cuda_recs(b);
    recs.base += (int64_t)i * b->rec_stride;
    mu_cu_qkv_post qp = cuda_qkv_post(b, l, 1);
    qp.q = b->wk->q + (int64_t)i * b->Q;
    qp.k = b->wk->k + (int64_t)i * b->KVD;
    qp.v = b->wk->v + (int64_t)i * b->KVD;
    qp.qn = b->wk->qn + (int64_t)i * b->Q;
    qp.kc = kv->kc[l];
    qp.vc = kv->vc[l];
    qp.recs = recs;
    CU_CHECK(mu_cu_qkv_post_launch(&qp, &b->exec));
    return cuda_attention(b, kv, l, 1, i, recs, b->split_dec, NULL, f16_out, false, NULL, 1, false);
}

/* Layer l's attention for all T rows of a batched step in one launch each
 * (QK-norm + RoPE + append, split-K attention, merge + gate), every row over
 * its own session's planes (d_planes), at most `cap` splits a row. */
static int batch_attention_rows(cuda_backend *b, int l, int T, int cap, bool f16_out, bool pack) {
    void *const *kc_rows = b->d_planes + (int64_t)l * 2 * T, *const *vc_rows = kc_rows + T;
    mu_cu_qkv_post qp = cuda_qkv_post(b, l, T);
    qp.kc_rows = kc_rows;
    qp.vc_rows = vc_rows;
    CU_CHECK(mu_cu_qkv_post_launch(&qp, &b->exec));
    return cuda_attention_rows(b, l, T, cap, f16_out, pack, kc_rows, vc_rows);
}

/* Splits a row of a batched step's one-launch attention may take (the
 * partial buffers hold n_parts), 0 where a row's plane could be wrapped at
 * the leader's capacity, which the launch applies to every row (a ring of
 * another capacity, a growing plane larger than the leader's: a growing
 * plane's slots stay below its own capacity): then a launch per row. */
static int rows_attention_cap(cuda_backend *const *rows, int T) {
    const cuda_backend *b = rows[0];
    for (int i = 1; i < T; i++)
        for (int l = 0; l < b->m->hp.n_layer; l++) {
            const mu_kv_plane *p = &rows[i]->planes[l], *p0 = &b->planes[l];
            if (p->capacity != p0->capacity && (p->ring || p0->ring || p->capacity > p0->capacity)) return 0;
        }
    const int64_t fit = b->n_parts / ((int64_t)T * b->m->hp.n_head);
    return (int)(fit < b->split_dec ? fit : b->split_dec);
}

/* The batched step's kernels (the records and planes uploaded, the chunk
 * logits reserved); logits of row i in row i of logits_all. cap: as
 * rows_attention_cap (0: a launch per row, over rows[i]'s planes). */
static int enqueue_batch(cuda_backend *b, cuda_backend *const *rows, int T, int cap) {
    const mu_hparams *hp = &b->m->hp;
    const mu_cu_exec *x = &b->exec;
    const mm_route route = batch_route(b, T);
    const bool f16 = b->fast && route == MM_GEMM; /* f16 inputs for the GEMMs */
    const bool rows8 = route == MM_FAST_ROWS || route == MM_MMF; /* the normed inputs' int8 groups */
    const bool tc = route == MM_MMF; /* Wo's and down's int8 inputs in bq for the B-row matvec of a matrix
                                        without a tensor-core kernel */
    const int8_t *aq = rows8 ? b->wk->aq : NULL;
    const float *ads = rows8 ? b->wk->ads : NULL;
    /* MM_MMF: the producers write the packed inputs (the residual/norm
     * tails, the attention merge of the one-launch attention, SwiGLU) */
    const bool pack_e = tc && b->E % 256 == 0 && b->E <= MU_CU_TAIL_MAXN, pack_o = tc && cap > 0 && b->Q % 256 == 0,
               pack_f = tc && b->F % 256 == 0;
    mu_cu_resnorm rn = cuda_resnorm(b, NULL, NULL, b->w->layers[0].attn_norm, f16);
    rn.embd_norm = hp->embd_norm;
    cuda_resnorm_pack(&rn, b, pack_e);
    CU_CHECK(mu_cu_embed(&b->w->tok_embd, cuda_recs(b), T, rn, b->d_best, x));
    const void *A = f16 ? (const void *)b->wk->a16 : (const void *)b->wk->ax;
    for (int l = 0; l < hp->n_layer; l++) {
        const cu_layer *D = &b->w->layers[l];
        const mu_cu_weight *qkvg[] = {&D->wq, &D->wk, &D->wv, &D->wgate};
        float *const qkvg_y[] = {b->wk->q, b->wk->k, b->wk->v, b->wk->g};
        const int64_t qkvg_ld[] = {b->Q, b->KVD, b->KVD, b->Q};
        RC(mm_set(b, route, qkvg, qkvg_y, qkvg_ld, 4, A, aq, ads, b->E, T, pack_e));
        if (cap > 0) RC(batch_attention_rows(b, l, T, cap, f16, pack_o));
        else
            for (int i = 0; i < T; i++) RC(batch_attention_row(b, rows[i], i, l, f16));
        if (tc && !mu_cu_mmf_ok(D->wo.type, D->wo.cols))
            CU_CHECK(mu_cu_quantize_rows(b->wk->o, b->wk->bq, b->wk->bds, b->Q, T, x));
        RC(mm_one(b, route, &D->wo, b->wk->t, b->E, f16 ? (const void *)b->wk->o16 : (const void *)b->wk->o,
                  tc ? b->wk->bq : NULL, tc ? b->wk->bds : NULL, b->Q, T, pack_o));
        mu_cu_resnorm tail = cuda_resnorm(b, b->wk->t, D->post_attn_norm, D->ffn_norm, f16);
        cuda_resnorm_pack(&tail, b, pack_e);
        CU_CHECK(mu_cu_resnorm_rows(tail, T, x));
        const mu_cu_weight *gu[] = {&D->ffn_gate, &D->ffn_up};
        float *const gu_y[] = {b->wk->ff, b->wk->fu};
        const int64_t gu_ld[] = {b->F, b->F};
        RC(mm_set(b, route, gu, gu_y, gu_ld, 2, A, aq, ads, b->E, T, pack_e));
        CU_CHECK(mu_cu_swiglu_rows(b->wk->ff, b->wk->fu, f16 ? b->wk->f16b : NULL, b->F, T,
                                   pack_f ? b->wk->mmf_x : NULL, x));
        if (tc && !mu_cu_mmf_ok(D->ffn_down.type, D->ffn_down.cols))
            CU_CHECK(mu_cu_quantize_rows(b->wk->ff, b->wk->bq, b->wk->bds, b->F, T, x));
        RC(mm_one(b, route, &D->ffn_down, b->wk->t, b->E, f16 ? (const void *)b->wk->f16b : (const void *)b->wk->ff,
                  tc ? b->wk->bq : NULL, tc ? b->wk->bds : NULL, b->F, T, pack_f));
        const float *next = l + 1 < hp->n_layer ? b->w->layers[l + 1].attn_norm : b->w->output_norm;
        tail = cuda_resnorm(b, b->wk->t, D->post_ffn_norm, next, f16);
        cuda_resnorm_pack(&tail, b, pack_e);
        CU_CHECK(mu_cu_resnorm_rows(tail, T, x));
    }
    if (!mu_model_heads(b->m)) return 0; /* a split's first side: the rows' h crosses to the CPU */
    RC(mm_one(b, route, &b->w->output, b->wk->logits_all, b->V, A, aq, ads, b->E, T, pack_e));
    CU_CHECK(mu_cu_logits_finish(b->wk->logits_all, (int64_t)T * b->V, hp->logit_scale, hp->softcap, x));
    return 0;
}

typedef struct {
    cuda_backend *const *rows;
    int T, cap;
} batch_args;
static int enqueue_batch_args(cuda_backend *b, void *arg) {
    const batch_args *a = arg;
    return enqueue_batch(b, a->rows, a->T, a->cap);
}

void cuda_batch_graphs_free(cuda_backend *b) {
    for (int i = 0; i < CUDA_BATCH_GRAPHS; i++) {
        if (b->batch_graphs[i].exec) cudaGraphExecDestroy(b->batch_graphs[i].exec);
        memset(&b->batch_graphs[i], 0, sizeof b->batch_graphs[i]);
    }
    b->batch_graph_broken = false;
}

/* The captured step of T rows, or NULL: then the kernels launch one by
 * one. A step absent from the cache is captured into its least recently
 * used entry when the session's previous step had as many rows (a server
 * whose batch changes every step, sessions coming and going, would
 * otherwise pay a capture a step). Only steps whose every row's planes the
 * launches reach through d_planes are captured (cap > 0): nothing in the
 * graph then depends on which sessions the rows are. */
static cudaGraphExec_t batch_graph_for(cuda_backend *b, cuda_backend *const *rows, int T, int cap) {
    const int prev_T = b->batch_prev_T;
    b->batch_prev_T = T;
    if (!b->tune.graph || b->batch_graph_broken || cap <= 0) return NULL;
    batch_graph *slot = &b->batch_graphs[0];
    for (int i = 0; i < CUDA_BATCH_GRAPHS; i++) {
        batch_graph *g = &b->batch_graphs[i];
        if (g->exec && g->T == T && g->logits == b->wk->logits_all) {
            g->used = ++b->batch_steps;
            return g->exec;
        }
        if (!g->exec || g->used < slot->used) slot = g;
    }
    if (prev_T != T) return NULL;
    if (slot->exec) cudaGraphExecDestroy(slot->exec);
    memset(slot, 0, sizeof *slot);
    batch_args args = {rows, T, cap};
    cudaGraphExec_t exec = NULL;
    if (!cuda_graph_capture(b, enqueue_batch_args, &args, "the batched step", &exec)) {
        b->batch_graph_broken = true;
        return NULL;
    }
    slot->T = T;
    slot->logits = b->wk->logits_all;
    slot->exec = exec;
    slot->used = ++b->batch_steps;
    return exec;
}

/* The batched step: the rows' records and planes up, then the captured
 * step or its kernels. */
static int run_batch(cuda_backend *b, cuda_backend *const *rows, int T) {
    const mu_hparams *hp = &b->m->hp;
    const mu_cu_exec *x = &b->exec;
    const int cap = rows_attention_cap(rows, T);
    CU_CHECK(cudaMemcpyAsync(b->d_rec, b->h_rec, (size_t)b->rec_stride * T, cudaMemcpyHostToDevice, x->stream));
    if (cap > 0) { /* every row's planes, layer by layer: [L][K, V][T] */
        for (int l = 0; l < hp->n_layer; l++)
            for (int i = 0; i < T; i++) {
                b->h_planes[((int64_t)l * 2 + 0) * T + i] = rows[i]->kc[l];
                b->h_planes[((int64_t)l * 2 + 1) * T + i] = rows[i]->vc[l];
            }
        CU_CHECK(cudaMemcpyAsync(b->d_planes, b->h_planes, sizeof(void *) * 2 * (size_t)hp->n_layer * T,
                                 cudaMemcpyHostToDevice, x->stream));
    }
    if (mu_model_heads(b->m)) RC(cuda_logit_rows_reserve(b, T));
    const cudaGraphExec_t graph = batch_graph_for(b, rows, T, cap);
    if (graph) {
        CU_CHECK(cudaGraphLaunch(graph, x->stream));
        return 0;
    }
    return enqueue_batch(b, rows, T, cap);
}

/* Batched decode (mu_backend_ops.forward_batch): one token for each of n
 * sessions of the model sharing its weights, on rows[0]'s stream and
 * activations. Each row's session appends its position to its own planes
 * and decides its own routes (its record is copied into the leader's
 * records); the matrices run once for all rows (batch_route), attention per
 * row over the row's own KV cache. Rows that cannot be mixed, or fewer than the tuning's batch_min_fast
 * / batch_min_exact (0: never), answer MUSER_EUNSUPPORTED before anything
 * changes: the engine then feeds them one by one through the decode graph.
 * The step's logits stay in the leader's logits_all. */
static int batch_step(cuda_backend *const *rows, const muser_token *tokens, const int *pos, int n) {
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
    return run_batch(b, rows, n);
}

int cuda_forward_batch(mu_backend *const *rows_in, const muser_token *tokens, const int *pos, int n,
                       float *const *logits) {
    cuda_backend *const *rows = (cuda_backend *const *)rows_in;
    cuda_backend *b = rows[0];
    RC(batch_step(rows, tokens, pos, n));
    RC(cuda_sync_checked(b));
    if (!mu_model_heads(b->m)) return cuda_copy_hidden(b, n); /* (into the leader's crossing rows) */
    for (int i = 0; i < n; i++)
        RC(cuda_copy_logits(b, b->wk->logits_all + (size_t)i * b->V, 1, logits[i], (size_t)b->V));
    return 0;
}

/* mu_backend_ops.forward_batch_greedy: the rows' greedy choices made on the
 * device (cuda_rows_argmax), n ids back instead of n rows of logits. */
int cuda_forward_batch_greedy(mu_backend *const *rows_in, const muser_token *tokens, const int *pos, int n,
                              muser_token *next) {
    cuda_backend *const *rows = (cuda_backend *const *)rows_in;
    if (!mu_model_heads(rows[0]->m))
        return mu_fail(MUSER_EUNSUPPORTED, "cuda: a split's first side has no logits to choose from");
    RC(batch_step(rows, tokens, pos, n));
    return cuda_rows_argmax(rows[0], rows[0]->wk->logits_all, n, next);
}

/* mu_backend_ops.forward_batch_top: the rows' k top logits after their
 * bias found on the device (cuda_rows_top), n x k pairs back. */
int cuda_forward_batch_top(mu_backend *const *rows_in, const muser_token *tokens, const int *pos, int n,
                           const muser_logit_bias *bias, int k, float *vals, muser_token *ids) {
    cuda_backend *const *rows = (cuda_backend *const *)rows_in;
    if (!mu_model_heads(rows[0]->m))
        return mu_fail(MUSER_EUNSUPPORTED, "cuda: a split's first side has no logits to choose from");
    RC(batch_step(rows, tokens, pos, n));
    return cuda_rows_top(rows[0], rows[0]->wk->logits_all, n, bias, k, vals, ids);
}
