/* cuda_step.c — what every path of the token step shares: the step records
 * (the host's ring bookkeeping and route decisions, uploaded per step) and
 * the arguments of the ops, built from a session's buffers.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h"
#include "model/rope.h"

mu_cu_recs cuda_recs(const cuda_backend *b) {
    mu_cu_recs r;
    r.base = b->d_rec;
    r.stride = b->rec_stride;
    r.n_layer = b->m->hp.n_layer;
    r.n_rot = b->m->hp.n_rot;
    r.n_bases = b->n_bases;
    return r;
}

/* Appends the T positions to every plane, decides every (token, layer)
 * route and fills the host records (tokens NULL: token 0 in each). The
 * planes are restored on failure. */
int cuda_fill_records(cuda_backend *b, const muser_token *tokens, int T, int pos0, float temperature, uint64_t seed) {
    const mu_model *m = b->m;
    const mu_hparams *hp = &m->hp;
    const int L = hp->n_layer;
    mu_kv_plane *backup = malloc(sizeof(mu_kv_plane) * (size_t)L);
    if (!backup) return mu_fail(MUSER_ENOMEM, "out of memory");
    memcpy(backup, b->planes, sizeof(mu_kv_plane) * (size_t)L);
    int rc = 0;
    int64_t widest = 0; /* the widest span of the step */
    for (int l = 0; l < L && !rc; l++) {
        for (int t = 0; t < T; t++) {
            int64_t slot = mu_kv_append(&b->planes[l]);
            if (slot < 0) {
                rc = mu_fail(MUSER_ECONTEXT, "layer %d: KV plane is full", l);
                break;
            }
            mu_cu_rec_layer *rl = (mu_cu_rec_layer *)(b->h_rec + (int64_t)t * b->rec_stride + sizeof(mu_cu_rec_hdr)) + l;
            rl->slot = (int32_t)slot;
        }
    }
    for (int t = 0; t < T && !rc; t++) {
        uint8_t *rec = b->h_rec + (int64_t)t * b->rec_stride;
        mu_cu_rec_hdr *hdr = (mu_cu_rec_hdr *)rec;
        const int64_t pos = (int64_t)pos0 + t;
        hdr->token = tokens ? tokens[t] : 0; /* (a drafter's injected rows have no token) */
        hdr->pos = (int32_t)pos;
        hdr->temperature = temperature;
        hdr->seed = (uint32_t)(seed ^ (seed >> 32));
        mu_cu_rec_layer *rl = (mu_cu_rec_layer *)(rec + sizeof(mu_cu_rec_hdr));
        for (int l = 0; l < L; l++) {
            mu_route_decision d;
            /* causal, or a drafter's block row that also sees the block's
             * later rows (the spans every backend's chunks take) */
            int64_t first, last;
            mu_attn_span(m, l, &b->planes[l], pos, (int64_t)pos0 + T - 1, b->bidirectional, &first, &last);
            if (!mu_attn_route_select(&b->planes[l], last, last - first + 1, l, &d)) {
                rc = mu_fail(MUSER_EINVAL, "layer %d: the KV plane does not hold positions %lld..%lld", l,
                             (long long)first, (long long)last);
                break;
            }
            rl[l].n_visible = (int32_t)d.n_visible;
            if (d.n_visible > widest) widest = d.n_visible;
            rl[l].phys_first = (int32_t)d.phys_first;
            rl[l].route = d.route == MU_ROUTE_CONTIGUOUS ? MU_CU_ROUTE_CONTIGUOUS : MU_CU_ROUTE_ORIGIN;
        }
        float *cs = (float *)(rec + sizeof(mu_cu_rec_hdr) + (size_t)L * sizeof(mu_cu_rec_layer));
        for (int i = 0; i < b->n_bases; i++)
            mu_rope_table(hp, b->bases[i], m->rope_freq_factors, pos, cs + (size_t)i * hp->n_rot);
    }
    if (rc) memcpy(b->planes, backup, sizeof(mu_kv_plane) * (size_t)L);
    free(backup);
    b->route = T != 1                                                       ? ROUTE_SPLIT
               : b->attn_short > 0 && widest <= b->attn_short               ? ROUTE_SHORT
               : b->attn_cluster_rows > 0 && widest <= b->attn_cluster_rows ? ROUTE_CLUSTER
                                                                            : ROUTE_SPLIT;
    return rc;
}

bool cuda_graph_capture(cuda_backend *b, int (*enqueue)(cuda_backend *, void *), void *arg, const char *what,
                        cudaGraphExec_t *out) {
    cudaGraph_t graph = NULL;
    *out = NULL;
    cudaError_t e = cudaStreamBeginCapture(b->exec.stream, cudaStreamCaptureModeThreadLocal);
    const int rc = e == cudaSuccess ? enqueue(b, arg) : 0;
    if (e == cudaSuccess) e = cudaStreamEndCapture(b->exec.stream, &graph);
    if (!rc && e == cudaSuccess) e = cudaGraphInstantiate(out, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (!rc && e == cudaSuccess) return true;
    mu_warn("cuda: capturing %s as a graph failed (%s); launching op by op", what,
            rc ? muser_last_error() : cudaGetErrorString(e));
    (void)cudaGetLastError();
    *out = NULL;
    return false;
}

mu_cu_act cuda_act(const float *x, const int8_t *q, const float *ds) {
    mu_cu_act a = {x, q, ds};
    return a;
}

mu_cu_resnorm cuda_resnorm(const cuda_backend *b, const float *branch, const float *w_post, const float *w_next,
                           bool f16) {
    const mu_hparams *hp = &b->m->hp;
    mu_cu_resnorm rn;
    memset(&rn, 0, sizeof rn);
    rn.branch = branch;
    rn.w_post = w_post;
    rn.eps_post = hp->post_norm_eps;
    rn.h = b->wk->h;
    rn.w_next = w_next;
    rn.eps_next = hp->rms_eps;
    rn.n = (int)b->E;
    rn.stride = b->E;
    rn.out.x = b->wk->ax;
    rn.out.q = b->fast ? b->wk->aq : NULL;
    rn.out.ds = b->fast ? b->wk->ads : NULL;
    rn.out.h = f16 ? b->wk->a16 : NULL;
    return rn;
}

void cuda_resnorm_pack(mu_cu_resnorm *rn, const cuda_backend *b, bool pack) {
    rn->out.xp = pack ? b->wk->mmf_x : NULL;
    rn->out.xp_nb = (int)(b->E / 256);
}

int cuda_prof_mark(cuda_backend *b, prof_state *p, int family) {
    if (!p || !p->on) return 0;
    if (p->n >= (int)(sizeof p->ev / sizeof p->ev[0])) return 0;
    CU_CHECK(cudaEventRecord(p->ev[p->n], b->exec.stream));
    p->fam[p->n++] = family;
    return 0;
}

mu_cu_qkv_post cuda_qkv_post(const cuda_backend *b, int l, int T) {
    const mu_hparams *hp = &b->m->hp;
    const mu_layer *L = &b->m->layers[l];
    const cu_layer *D = &b->w->layers[l];
    mu_cu_qkv_post a;
    memset(&a, 0, sizeof a);
    a.T = T;
    a.layer = l;
    a.n_head = hp->n_head;
    a.n_head_kv = hp->n_head_kv;
    a.head_dim = hp->head_dim;
    a.n_rot = hp->n_rot;
    a.neox = hp->rope_type == MU_ROPE_NEOX;
    a.use_rope = L->use_rope;
    a.base_index = D->base_index;
    a.q = b->wk->q;
    a.k = b->wk->k;
    a.v = b->wk->v;
    a.q_stride = b->Q;
    a.kv_stride = b->KVD;
    a.q_norm = D->q_norm;
    a.k_norm = D->k_norm;
    a.eps = hp->rms_eps;
    a.qn = b->wk->qn;
    a.kc = b->kc[l];
    a.vc = b->vc[l];
    a.kv_f32 = b->kv_f32;
    a.recs = cuda_recs(b);
    return a;
}

/* The split-K attention's and the reducer's arguments (cuda_attention). */
static void attn_structs(const cuda_backend *b, const cuda_backend *kv, int l, int T, int64_t row, mu_cu_recs recs,
                         int cap, bool f16_out, bool quant_out, int gate_parts, mu_cu_attn *ap, mu_cu_reduce *rp) {
    const mu_hparams *hp = &b->m->hp;
    const int64_t off = row * b->Q;
    mu_cu_attn a;
    memset(&a, 0, sizeof a);
    a.T = T;
    a.layer = l;
    a.n_head = hp->n_head;
    a.n_head_kv = hp->n_head_kv;
    a.head_dim = hp->head_dim;
    a.kv_f32 = b->kv_f32;
    a.capacity = kv->planes[l].capacity;
    a.kc = kv->kc[l];
    a.vc = kv->vc[l];
    a.q = b->wk->qn + off;
    a.scale_log2 = hp->attn_scale * 1.4426950408889634f;
    a.split_cap = cap;
    a.part_m = b->wk->part_m;
    a.part_l = b->wk->part_l;
    a.part_o = b->wk->part_o;
    a.recs = recs;

    mu_cu_reduce r;
    memset(&r, 0, sizeof r);
    r.T = T;
    r.n_head = hp->n_head;
    r.head_dim = hp->head_dim;
    r.split_cap = cap;
    r.layer = l;
    r.part_m = b->wk->part_m;
    r.part_l = b->wk->part_l;
    r.part_o = b->wk->part_o;
    r.gate = b->w->layers[l].wgate.qs ? b->wk->g + off : NULL;
    r.gate_stride = b->Q;
    r.gate_parts = gate_parts;
    r.out.x = b->wk->o + off;
    r.out.q = quant_out ? b->oq : NULL;
    r.out.ds = quant_out ? b->ods : NULL;
    r.out.h = f16_out ? b->wk->o16 + off : NULL;
    r.out_stride = b->Q;
    r.recs = recs;
    *ap = a;
    *rp = r;
}

/* The decode step's attention in one launch (the short and cluster routes). */
mu_cu_attn_decode cuda_attn_decode(const cuda_backend *b, int l, const mu_cu_qkv_post *qp, bool quant_out) {
    mu_cu_attn_decode d;
    memset(&d, 0, sizeof d);
    attn_structs(b, b, l, 1, 0, cuda_recs(b), b->split_dec, false, quant_out, qp->parts, &d.at, &d.rd);
    d.qp = *qp;
    const bool cluster = b->route == ROUTE_CLUSTER;
    d.short_max = cluster ? b->attn_cluster_rows : b->attn_short;
    d.cluster = cluster ? b->attn_cluster : 1;
    return d;
}

/* Split-K attention of T query rows starting at row `row` of b's
 * activations over kv's cache of layer l (kv is b itself, or the session
 * of that row in a batched step), then the merge + gate into o (o16; the
 * int8 copy when quant_out; with pack also the tensor-core batch's packed
 * inputs, rows from 0). fused (decode, the short and cluster
 * routes): the QK-norm/RoPE/append of the token and the whole attention
 * in one launch (mu_cu_attn_decode_launch). */
int cuda_attention(cuda_backend *b, const cuda_backend *kv, int l, int T, int64_t row, mu_cu_recs recs, int cap,
                   prof_state *p, bool f16_out, bool quant_out, const mu_cu_qkv_post *fused, int gate_parts, bool pack) {
    mu_cu_attn a;
    mu_cu_reduce r;
    attn_structs(b, kv, l, T, row, recs, cap, f16_out, quant_out, gate_parts, &a, &r);
    r.out.xp = pack ? b->wk->mmf_x : NULL;
    r.out.xp_nb = (int)(b->Q / 256);
    if (fused) { /* the whole short span in one launch */
        const mu_cu_attn_decode d = cuda_attn_decode(b, l, fused, quant_out);
        RC(cuda_prof_mark(b, p, PF_ATTN));
        CU_CHECK(mu_cu_attn_decode_launch(&d, &b->exec));
        return 0;
    }
    RC(cuda_prof_mark(b, p, PF_ATTN));
    CU_CHECK(mu_cu_attention(&a, b->tune.mma_attention && !b->kv_f32, &b->exec));
    RC(cuda_prof_mark(b, p, PF_REDUCE));
    CU_CHECK(mu_cu_attn_reduce(&r, &b->exec));
    return 0;
}

/* Split-K attention of a batched step's T rows in one launch, row i over
 * its own session's planes (kc_rows[i], vc_rows[i]: device arrays, every
 * plane of b's capacity), then the merge + gate into o (o16; with pack also
 * the tensor-core batch's packed inputs). */
int cuda_attention_rows(cuda_backend *b, int l, int T, int cap, bool f16_out, bool pack, void *const *kc_rows,
                        void *const *vc_rows) {
    mu_cu_attn a;
    mu_cu_reduce r;
    attn_structs(b, b, l, T, 0, cuda_recs(b), cap, f16_out, false, 1, &a, &r);
    r.out.xp = pack ? b->wk->mmf_x : NULL;
    r.out.xp_nb = (int)(b->Q / 256);
    a.kc_rows = kc_rows;
    a.vc_rows = vc_rows;
    CU_CHECK(mu_cu_attention(&a, b->tune.mma_attention && !b->kv_f32, &b->exec));
    CU_CHECK(mu_cu_attn_reduce(&r, &b->exec));
    return 0;
}

void cuda_mv_init(mu_cu_mv *a, const cuda_backend *b, int epi, mu_cu_act act) {
    memset(a, 0, sizeof *a);
    a->lane = b->fast ? MU_CU_LANE_FAST : MU_CU_LANE_EXACT;
    a->epi = epi;
    a->act = act;
    a->even_rounds = b->tp; /* (measured: see mv_launch_walk) */
}

void cuda_mv_seg(mu_cu_mv *a, const mu_cu_weight *w, float *y) {
    if (!w->qs) return;
    a->seg[a->nseg].w = *w;
    a->seg[a->nseg].y = y;
    a->nseg++;
}

