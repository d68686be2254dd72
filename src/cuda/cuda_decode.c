/* cuda_decode.c — the one-token step, captured as a CUDA graph per
 * attention route (short spans: one launch a layer; clustered; split-K).
 *
 * Per layer (spec §0): the matvec of {q, k, v, gate} over the normed input
 * (one launch, one row space) -> QK-norm + RoPE + KV append + attention +
 * merge + divide + sigmoid gate + int8 groups (one launch for short and
 * clustered spans, three for the split route) -> the matvec of Wo -> the
 * matvec of gate/up with SwiGLU -> the matvec of down, which quantizes its
 * input while staging it. Each residual/norm boundary is formed by its
 * consumers while they stage their input (norm_in), or by the producer's
 * last block (its RESNORM tail). Then the LM head with logit scale,
 * soft-cap and the device-side token choice.
 */
#include <string.h>

#include "cuda/cuda_internal.h"

static const char *pf_names[PF_COUNT] = {"embed+norm",
                                         "qkv+gate matvec",
                                         "qk-norm+rope+kv",
                                         "attention (split-K; short spans: one launch, clustered)",
                                         "attn reduce+gate",
                                         "wo (+resnorm tail)",
                                         "ffn gate/up+swiglu",
                                         "ffn down (+resnorm tail)",
                                         "lm head+select",
                                         "all-reduce+resnorm (TP)"};

const char *cuda_profile_name(mu_backend *base, int family) {
    (void)base;
    return family >= 0 && family < PF_COUNT ? pf_names[family] : NULL;
}

/* The input of boundary k's consumer (norm-in staging): k = 2l is layer
 * l's Wo, 2l + 1 its ffn down; the residual is read from one buffer and
 * (keep) written to the other; the branch is the producer's parts in t. */
static mu_cu_norm_in nin_of(const cuda_backend *b, int k, const mu_cu_weight *producer, const float *w_post,
                            const float *w_next, bool keep) {
    const mu_hparams *hp = &b->m->hp;
    mu_cu_norm_in ni;
    memset(&ni, 0, sizeof ni);
    ni.h = k % 2 ? b->h2 : b->wk->h;
    ni.h_out = keep ? (k % 2 ? b->wk->h : b->h2) : NULL;
    ni.branch = b->wk->t;
    ni.parts = mu_cu_mv_parts(producer->type, producer->cols);
    ni.part_stride = producer->rows;
    ni.w_post = w_post;
    ni.eps_post = hp->post_norm_eps;
    ni.w_next = w_next;
    ni.eps_next = hp->rms_eps;
    return ni;
}

/* The LM head over one normed row (index row of ax/aq), choosing a token;
 * decode: the step's, which forms its input from the last boundary when
 * norm_in. */
int cuda_head_matvec(cuda_backend *b, int row, bool decode, prof_state *p) {
    const mu_hparams *hp = &b->m->hp;
    const int64_t off = (int64_t)row * b->E;
    mu_cu_mv a;
    cuda_mv_init(&a, b, MU_CU_EPI_LOGITS,
                 cuda_act(b->wk->ax + off, b->fast ? b->wk->aq + off : NULL,
                          b->fast ? b->wk->ads + off / 16 * 2 : NULL));
    cuda_mv_seg(&a, &b->w->output, b->logits);
    if (decode && b->norm_in) {
        const cu_layer *P = &b->w->layers[hp->n_layer - 1];
        a.nin = nin_of(b, 2 * hp->n_layer - 1, &P->ffn_down, P->post_ffn_norm, b->w->output_norm, false);
    }
    a.lg.scale = hp->logit_scale;
    a.lg.softcap = hp->softcap;
    a.lg.best = b->d_best;
    a.lg.vocab0 = b->vocab0; /* global token ids in the device choice (tensor parallel) */
    a.lg.hdr = (const mu_cu_rec_hdr *)(b->d_rec + (int64_t)row * b->rec_stride);
    RC(cuda_prof_mark(b, p, PF_HEAD));
    CU_CHECK(mu_cu_matvec(&a, &b->exec));
    return 0;
}

/* The decode step (T = 1) in parts: part 0 = embedding and layer 0 up to
 * Wo; part 2l+1 = layer l's FFN; part 2l+2 = layer l+1 up to Wo; part 2L =
 * the LM head. A single GPU runs all parts back to back with the tails
 * fused into Wo and down. So does a tensor-parallel rank with the fused
 * all-reduce (the tails sum the ranks' partial outputs); without it, Wo
 * and down write partial sums, NCCL all-reduces them between the parts,
 * and the next part starts with the residual/norm tail. */
int cuda_decode_parts(const cuda_backend *b) { return 2 * b->m->hp.n_layer + 1; }

/* The fused all-reduce (tensor parallel over NCCL's LSA mapping): the
 * RESNORM tail meets the other ranks and sums every rank's branch in rank
 * order (the same bits on every rank), read at lsa (rank 0's copy). */
static void rank_sum(const cuda_backend *b, mu_cu_resnorm *rn, const float *lsa) {
    if (b->xr.n < 2) return;
    rn->branch = lsa;
    rn->branch_parts = b->xr.n;
    rn->part_stride = b->xr.stride; /* (floats and flags are both 4 bytes) */
    rn->xr = b->xr;
}

/* Layer l up to Wo (its output in t, or the tail fused). */
static int enqueue_attn_block(cuda_backend *b, int l, prof_state *p) {
    const mu_cu_exec *x = &b->exec;
    const cu_layer *D = &b->w->layers[l];
    const mu_cu_act in_a = cuda_act(b->wk->ax, b->fast ? b->wk->aq : NULL, b->fast ? b->wk->ads : NULL);
    mu_cu_mv a;
    cuda_mv_init(&a, b, MU_CU_EPI_STORE, in_a);
    cuda_mv_seg(&a, &D->wq, b->wk->q);
    cuda_mv_seg(&a, &D->wk, b->wk->k);
    cuda_mv_seg(&a, &D->wv, b->wk->v);
    cuda_mv_seg(&a, &D->wgate, b->wk->g);
    if (b->norm_in && l > 0) {
        const cu_layer *P = &b->w->layers[l - 1];
        a.nin = nin_of(b, 2 * l - 1, &P->ffn_down, P->post_ffn_norm, D->attn_norm, true);
    }
    /* rows in parts of one batch where that takes fewer rounds (the
     * attention's QK-norm/RoPE and gate reads sum them) */
    a.batch_parts = b->tune.batch_parts ? mu_cu_mv_batch_parts(&a) : 1;
    RC(cuda_prof_mark(b, p, PF_QKVG));
    CU_CHECK(mu_cu_matvec(&a, x));
    /* (fusing this into the matvec's epilogue was measured 2.5% slower:
     * a fence and an atomic per q/k row) */
    mu_cu_qkv_post qp = cuda_qkv_post(b, l, 1);
    qp.parts = a.batch_parts;
    if (b->route == ROUTE_SHORT || b->route == ROUTE_CLUSTER) {
        RC(cuda_attention(b, b, l, 1, 0, cuda_recs(b), b->split_dec, p, false, b->fast, &qp, qp.parts, false));
    } else {
        RC(cuda_prof_mark(b, p, PF_QKPOST));
        CU_CHECK(mu_cu_qkv_post_launch(&qp, x));
        RC(cuda_attention(b, b, l, 1, 0, cuda_recs(b), b->split_dec, p, false, b->fast, NULL, qp.parts, false));
    }

    cuda_mv_init(&a, b, (b->tp && !b->xr.n) || b->norm_in ? MU_CU_EPI_STORE : MU_CU_EPI_RESNORM,
                 cuda_act(b->wk->o, b->fast ? b->oq : NULL, b->fast ? b->ods : NULL));
    cuda_mv_seg(&a, &D->wo, b->wk->t);
    if (b->norm_in) { /* the parts in t; gate/up forms its input from them */
        a.split_parts = 1;
        RC(cuda_prof_mark(b, p, PF_WO));
        CU_CHECK(mu_cu_matvec(&a, x));
        return 0;
    }
    a.rn = cuda_resnorm(b, b->wk->t, D->post_attn_norm, D->ffn_norm, false);
    rank_sum(b, &a.rn, b->lsa_t);
    a.rn.out.x = b->ax2;
    a.rn.out.q = b->fast ? b->aq2 : NULL;
    a.rn.out.ds = b->fast ? b->ads2 : NULL;
    a.counter = b->counters + 2 * l;
    RC(cuda_prof_mark(b, p, PF_WO));
    CU_CHECK(mu_cu_matvec(&a, x));
    return 0;
}

/* Layer l's FFN (down's output in t, or the tail fused). */
static int enqueue_ffn_block(cuda_backend *b, int l, prof_state *p) {
    const mu_cu_exec *x = &b->exec;
    const mu_hparams *hp = &b->m->hp;
    const cu_layer *D = &b->w->layers[l];
    mu_cu_mv a;
    cuda_mv_init(&a, b, MU_CU_EPI_GATEUP, cuda_act(b->ax2, b->fast ? b->aq2 : NULL, b->fast ? b->ads2 : NULL));
    cuda_mv_seg(&a, &D->ffn_gate, b->wk->ff);
    cuda_mv_seg(&a, &D->ffn_up, b->wk->fu);
    if (b->norm_in) a.nin = nin_of(b, 2 * l, &D->wo, D->post_attn_norm, D->ffn_norm, true);
    RC(cuda_prof_mark(b, p, PF_GATEUP));
    CU_CHECK(mu_cu_matvec(&a, x));

    cuda_mv_init(&a, b, (b->tp && !b->xr.n) || b->norm_in ? MU_CU_EPI_STORE : MU_CU_EPI_RESNORM,
                 cuda_act(b->wk->ff, NULL, NULL));
    float *y = b->xr.n ? b->t2 : b->wk->t;
    cuda_mv_seg(&a, &D->ffn_down, y);
    a.quant_input = b->fast; /* (down quantizes the products while it stages them) */
    if (b->norm_in) { /* the parts in t; the next qkv (or the LM head) forms its input from them */
        a.split_parts = 1;
        RC(cuda_prof_mark(b, p, PF_DOWN));
        CU_CHECK(mu_cu_matvec(&a, x));
        return 0;
    }
    const float *next = l + 1 < hp->n_layer ? b->w->layers[l + 1].attn_norm : b->w->output_norm;
    a.rn = cuda_resnorm(b, y, D->post_ffn_norm, next, false);
    rank_sum(b, &a.rn, b->lsa_t2);
    a.counter = b->counters + 2 * l + 1;
    RC(cuda_prof_mark(b, p, PF_DOWN));
    CU_CHECK(mu_cu_matvec(&a, x));
    return 0;
}

/* The residual/norm tail after an all-reduce (tensor parallel). */
static int enqueue_tp_tail(cuda_backend *b, int part, prof_state *p) {
    const mu_hparams *hp = &b->m->hp;
    mu_cu_resnorm rn;
    if ((part - 1) % 2 == 0) { /* after Wo of layer l: into the FFN's input */
        const int l = (part - 1) / 2;
        rn = cuda_resnorm(b, b->wk->t, b->w->layers[l].post_attn_norm, b->w->layers[l].ffn_norm, false);
        rn.out.x = b->ax2;
        rn.out.q = b->fast ? b->aq2 : NULL;
        rn.out.ds = b->fast ? b->ads2 : NULL;
    } else { /* after down of layer l */
        const int l = (part - 2) / 2;
        const float *next = l + 1 < hp->n_layer ? b->w->layers[l + 1].attn_norm : b->w->output_norm;
        /* (a rank's down is a STORE launch: one part, whole rows) */
        rn = cuda_resnorm(b, b->wk->t, b->w->layers[l].post_ffn_norm, next, false);
    }
    /* (timed with the all-reduce: its mark is set before the NCCL call) */
    CU_CHECK(mu_cu_resnorm_rows(rn, 1, &b->exec));
    return 0;
}

int cuda_decode_part(cuda_backend *b, int part, prof_state *p) {
    const int L = b->m->hp.n_layer;
    if (part == 0) {
        CU_CHECK(cudaMemcpyAsync(b->d_rec, b->h_rec, (size_t)b->rec_stride, cudaMemcpyHostToDevice, b->exec.stream));
        mu_cu_resnorm rn = cuda_resnorm(b, NULL, NULL, b->w->layers[0].attn_norm, false);
        rn.embd_norm = b->m->hp.embd_norm;
        RC(cuda_prof_mark(b, p, PF_EMBED));
        CU_CHECK(mu_cu_embed(&b->w->tok_embd, cuda_recs(b), 1, rn, b->d_best, &b->exec));
        return enqueue_attn_block(b, 0, p);
    }
    if (b->tp && !b->xr.n) RC(enqueue_tp_tail(b, part, p));
    if (part % 2 == 1) return enqueue_ffn_block(b, (part - 1) / 2, p);
    if (part < 2 * L) return enqueue_attn_block(b, part / 2, p);
    /* (a split's first side ends here: the residual stream in h crosses to the CPU) */
    if (mu_model_heads(b->m)) RC(cuda_head_matvec(b, 0, true, p));
    RC(cuda_prof_mark(b, p, PF_COUNT));
    return 0;
}

/* The host's copy of the chosen token (after the step; TP: after the max). */
int cuda_best_copy(cuda_backend *b) {
    CU_CHECK(cudaMemcpyAsync(b->h_best, b->d_best, sizeof(unsigned long long), cudaMemcpyDeviceToHost, b->exec.stream));
    return 0;
}

/* Enqueues one decode step of a single GPU on the stream. */
static int enqueue_decode(cuda_backend *b, prof_state *p) {
    for (int part = 0; part < cuda_decode_parts(b); part++) RC(cuda_decode_part(b, part, p));
    return mu_model_heads(b->m) ? cuda_best_copy(b) : 0;
}

int mu_cuda_launches_per_token(const mu_backend *base) {
    const cuda_backend *b = (const cuda_backend *)base;
    return 2 + (7 + (b->tp ? 2 : 0)) * b->m->hp.n_layer; /* + embedding, LM head */
}

uint64_t mu_cuda_weight_bytes(const mu_backend *base) {
    const cuda_backend *b = (const cuda_backend *)base;
    return b->token_bytes;
}

/* Bytes each profile family reads per decoded token at position pos. */
static void prof_bytes(const cuda_backend *b, int pos, double *fb) {
    const mu_hparams *hp = &b->m->hp;
    for (int f = 0; f < PF_COUNT; f++) fb[f] = 0;
    fb[PF_EMBED] = (double)b->m->tok_embd.row_bytes;
    fb[PF_HEAD] = (double)b->w->output.bytes;
    for (int l = 0; l < hp->n_layer; l++) {
        const cu_layer *D = &b->w->layers[l];
        fb[PF_QKVG] += (double)(D->wq.bytes + D->wk.bytes + D->wv.bytes + D->wgate.bytes);
        fb[PF_WO] += (double)D->wo.bytes;
        fb[PF_GATEUP] += (double)(D->ffn_gate.bytes + D->ffn_up.bytes);
        fb[PF_DOWN] += (double)D->ffn_down.bytes;
        fb[PF_ATTN] += 2.0 * (double)mu_layer_visible(hp, &b->m->layers[l], pos) * (double)b->KVD * (double)b->kv_elem;
    }
}

/* After a profiled step: event times per family into the accumulators. */
int cuda_prof_collect(cuda_backend *b, int pos) {
    prof_state *ps = b->prof;
    double fb[PF_COUNT];
    prof_bytes(b, pos, fb);
    bool seen[PF_COUNT] = {false};
    for (int i = 0; i + 1 < ps->n; i++) {
        if (ps->fam[i] >= PF_COUNT) continue; /* an end mark: nothing ran from it */
        float ms = 0.f;
        CU_CHECK(cudaEventElapsedTime(&ms, ps->ev[i], ps->ev[i + 1]));
        mu_prof_entry *e = &b->prof_acc[ps->fam[i]];
        e->ns += (uint64_t)(ms * 1e6);
        e->calls++;
        if (!seen[ps->fam[i]]) e->bytes += (uint64_t)fb[ps->fam[i]], seen[ps->fam[i]] = true;
    }
    return 0;
}

static int enqueue_decode_plain(cuda_backend *b, void *unused) {
    (void)unused;
    return enqueue_decode(b, NULL);
}

/* Runs the decode step: the captured graph when possible, else op by op
 * (always op by op with events while profiling). */
int cuda_decode_run(cuda_backend *b) {
    if (b->prof && b->prof->on) {
        b->prof->n = 0;
        return enqueue_decode(b, b->prof);
    }
    const int r = b->route;
    if (b->tune.graph && !b->graph_broken) {
        if (!b->graph_ready[r]) {
            const bool ok = cuda_graph_capture(b, enqueue_decode_plain, NULL, "the token step", &b->graph[r]);
            b->graph_ready[r] = ok;
            b->graph_broken = !ok;
        }
        if (b->graph_ready[r]) {
            CU_CHECK(cudaGraphLaunch(b->graph[r], b->exec.stream));
            return 0;
        }
    }
    return enqueue_decode(b, NULL);
}

