/* cpu_attn.c — attention over the KV planes.
 *
 * Online softmax per query head over the visible rows: running max M,
 * running sum S, weighted values O. Rows are taken in blocks of
 * MU_ATTN_BLOCK: the block's K and V rows of one KV head are read once
 * (converted to f32 when the plane is F16) and serve all the query heads
 * that share that KV head (16 for Muse Glimmer), as two small matrix
 * products: scores = Q K^T (nq x rows), then O += P V.
 *
 * Decode is split-K: threads claim runs of blocks from a shared counter,
 * each keeps its own triples for every head, and a reducer merges them
 * and divides once. Prefill gives each thread whole (token, KV head) items.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "util/error.h"

#define BLK MU_ATTN_BLOCK

/* Per thread: a K block, a V block ([BLK][head_dim] f32 each) and the
 * scores of one KV head's query heads ([n_head][BLK]). */
size_t mu_cpu_attn_scratch_floats(const mu_hparams *hp) {
    return 2 * (size_t)BLK * (size_t)hp->head_dim + (size_t)hp->n_head * BLK;
}

static inline int64_t slot_of(const mu_route_decision *d, const mu_kv_plane *p, int64_t i) {
    return d->route == MU_ROUTE_CONTIGUOUS ? d->phys_first + i : (d->phys_first + i) % p->capacity;
}

/* Folds visible rows [i0, i0 + nr) (nr <= BLK) into the triples of the n_q
 * query heads that share KV head kvh. q: [n_q][head_dim]; m, s: [n_q];
 * acc: [n_q][head_dim]. */
static void attend_block(const cpu_backend *b, int layer, const mu_route_decision *d, int kvh, const float *q, int n_q,
                         int64_t i0, int nr, float *m, float *s, float *acc, float *scratch) {
    const mu_hparams *hp = &b->m->hp;
    const mu_cpu_kernels *k = b->k;
    const int hd = hp->head_dim, kvd = b->kv_dim;
    const mu_kv_plane *p = &b->planes[layer];
    const bool f16 = b->cfg.kv_type == MUSER_KV_F16;
    float *kbuf = scratch, *vbuf = scratch + BLK * hd, *sc = scratch + 2 * BLK * hd;
    const float *kp = kbuf, *vp = vbuf;
    int64_t ld = hd;
    const int64_t slot0 = slot_of(d, p, i0);
    if (!f16 && slot0 + nr <= p->capacity) {
        /* F32 rows that do not wrap: read them in place */
        kp = (const float *)b->kcache[layer] + slot0 * kvd + (int64_t)kvh * hd;
        vp = (const float *)b->vcache[layer] + slot0 * kvd + (int64_t)kvh * hd;
        ld = kvd;
    } else {
        for (int r = 0; r < nr; r++) {
            const int64_t slot = slot_of(d, p, i0 + r);
            if (f16) {
                k->cvt_f16((const uint16_t *)b->kcache[layer] + slot * kvd + (int64_t)kvh * hd, kbuf + r * hd, hd);
                k->cvt_f16((const uint16_t *)b->vcache[layer] + slot * kvd + (int64_t)kvh * hd, vbuf + r * hd, hd);
            } else {
                memcpy(kbuf + r * hd, (const float *)b->kcache[layer] + slot * kvd + (int64_t)kvh * hd, sizeof(float) * hd);
                memcpy(vbuf + r * hd, (const float *)b->vcache[layer] + slot * kvd + (int64_t)kvh * hd, sizeof(float) * hd);
            }
        }
    }
    k->attn_scores(q, n_q, kp, ld, nr, hd, hp->attn_scale, sc, BLK);
    for (int h = 0; h < n_q; h++) {
        float *sh = sc + h * BLK;
        float mx = sh[0];
        for (int r = 1; r < nr; r++) mx = sh[r] > mx ? sh[r] : mx;
        if (mx > m[h]) {
            /* new running max: rescale what was summed so far */
            const float corr = m[h] == -INFINITY ? 0.0f : expf(m[h] - mx);
            float *a = acc + (int64_t)h * hd;
            for (int e = 0; e < hd; e++) a[e] *= corr;
            s[h] *= corr;
            m[h] = mx;
        }
        s[h] += k->exp_sum(sh, nr, m[h]);
    }
    k->attn_pv(sc, n_q, BLK, vp, ld, nr, hd, acc);
}

static void init_triples(int n, int hd, float *m, float *s, float *acc) {
    for (int h = 0; h < n; h++) {
        m[h] = -INFINITY;
        s[h] = 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)n * hd);
}

typedef struct attn_ctx {
    cpu_backend *b;
    int layer, T, pos0;
    const float *q; /* [T][n_head][head_dim] */
    float *o;       /* [T][n_head][head_dim] */
    _Alignas(64) atomic_llong next;
} attn_ctx;

/* Decode: blocks claimed in runs of CLAIM_BLOCKS; every block is folded
 * into exactly one thread's triples (all initialized before the region: a
 * thread may not take part). */
#define CLAIM_BLOCKS 8

static void attn_decode_worker(void *vctx, int ith, int nth) {
    (void)nth;
    attn_ctx *c = vctx;
    cpu_backend *b = c->b;
    const mu_hparams *hp = &b->m->hp;
    const int hd = hp->head_dim, per_kv = hp->n_head / hp->n_head_kv;
    const mu_route_decision *d = &b->route;
    float *m = b->part_m + (size_t)ith * hp->n_head, *s = b->part_s + (size_t)ith * hp->n_head;
    float *acc = b->part_o + (size_t)ith * hp->n_head * hd;
    float *scratch = b->attn_scratch + (size_t)ith * b->attn_scratch_floats;
    const int64_t n_blocks = (d->n_visible + BLK - 1) / BLK;
    for (;;) {
        const int64_t b0 = atomic_fetch_add_explicit(&c->next, CLAIM_BLOCKS, memory_order_relaxed);
        if (b0 >= n_blocks) break;
        const int64_t b1 = b0 + CLAIM_BLOCKS < n_blocks ? b0 + CLAIM_BLOCKS : n_blocks;
        for (int64_t blk = b0; blk < b1; blk++) {
            const int64_t i0 = blk * BLK;
            const int nr = (int)(d->n_visible - i0 < BLK ? d->n_visible - i0 : BLK);
            for (int kvh = 0; kvh < hp->n_head_kv; kvh++) {
                const int h0 = kvh * per_kv; /* GQA: query head h reads KV head h / per_kv */
                attend_block(b, c->layer, d, kvh, c->q + (int64_t)h0 * hd, per_kv, i0, nr, m + h0, s + h0,
                             acc + (int64_t)h0 * hd, scratch);
            }
        }
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
            const float mt = b->part_m[(size_t)t * hp->n_head + h];
            if (mt == -INFINITY) continue; /* this worker owned no rows */
            const float w = expf(mt - M);
            S += w * b->part_s[(size_t)t * hp->n_head + h];
            const float *a = b->part_o + ((size_t)t * hp->n_head + h) * hd;
            for (int e = 0; e < hd; e++) out[e] += w * a[e];
        }
        const float inv = 1.0f / S;
        for (int e = 0; e < hd; e++) out[e] *= inv;
    }
}

static void attn_prefill_worker(void *vctx, int ith, int nth) {
    (void)nth;
    attn_ctx *c = vctx;
    cpu_backend *b = c->b;
    const mu_hparams *hp = &b->m->hp;
    const int hd = hp->head_dim, per_kv = hp->n_head / hp->n_head_kv;
    float *m = b->part_m + (size_t)ith * hp->n_head, *s = b->part_s + (size_t)ith * hp->n_head;
    float *acc = b->part_o + (size_t)ith * hp->n_head * hd;
    float *scratch = b->attn_scratch + (size_t)ith * b->attn_scratch_floats;
    const int items = c->T * hp->n_head_kv;
    for (;;) {
        /* latest tokens first: they see the most rows */
        const long long claimed = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (claimed >= items) break;
        const int it = items - 1 - (int)claimed;
        const int t = it / hp->n_head_kv, kvh = it % hp->n_head_kv;
        const int64_t pos = c->pos0 + t;
        /* causal, or a drafter's block that also sees its later tokens */
        int64_t first, last;
        mu_attn_span(b->m, c->layer, &b->planes[c->layer], pos, c->pos0 + c->T - 1, b->bidirectional, &first, &last);
        mu_route_decision d;
        /* Route checks are per token; the planes hold the whole chunk. */
        if (!mu_attn_route_select(&b->planes[c->layer], last, last - first + 1, c->layer, &d)) continue;
        const int h0 = kvh * per_kv;
        const float *q = c->q + ((int64_t)t * hp->n_head + h0) * hd;
        init_triples(per_kv, hd, m, s, acc);
        for (int64_t i0 = 0; i0 < d.n_visible; i0 += BLK) {
            const int nr = (int)(d.n_visible - i0 < BLK ? d.n_visible - i0 : BLK);
            attend_block(b, c->layer, &d, kvh, q, per_kv, i0, nr, m, s, acc, scratch);
        }
        for (int h = 0; h < per_kv; h++) {
            float *out = c->o + ((int64_t)t * hp->n_head + h0 + h) * hd;
            const float inv = 1.0f / s[h];
            for (int e = 0; e < hd; e++) out[e] = acc[(int64_t)h * hd + e] * inv;
        }
    }
}

int mu_cpu_attention(cpu_backend *b, int layer, int T, int pos0, const float *q, float *o) {
    attn_ctx c;
    memset(&c, 0, sizeof c);
    c.b = b;
    c.layer = layer;
    c.T = T;
    c.pos0 = pos0;
    c.q = q;
    c.o = o;
    atomic_init(&c.next, 0);
    const mu_hparams *hp = &b->m->hp;
    if (T == 1) {
        const int64_t n_vis = mu_layer_visible(hp, &b->m->layers[layer], pos0);
        if (!mu_attn_route_select(&b->planes[layer], pos0, n_vis, layer, &b->route))
            return mu_fail(MUSER_EINVAL, "layer %d: the KV plane does not hold positions %lld..%d", layer,
                           (long long)(pos0 - n_vis + 1), pos0);
        const int nth = mu_pool_size(b->pool);
        init_triples(hp->n_head * nth, hp->head_dim, b->part_m, b->part_s, b->part_o);
        mu_pool_run_elastic(b->pool, attn_decode_worker, &c);
        attn_decode_reduce(b, mu_pool_size(b->pool), o);
        return 0;
    }
    /* Prefill: every query's span must be held (rings hold window + chunk - 1). */
    for (int t = 0; t < T; t++) {
        int64_t first, last;
        mu_attn_span(b->m, layer, &b->planes[layer], (int64_t)pos0 + t, (int64_t)pos0 + T - 1, b->bidirectional,
                     &first, &last);
        if (!mu_kv_holds(&b->planes[layer], first, last))
            return mu_fail(MUSER_EINVAL, "layer %d: the KV plane does not hold positions %lld..%lld", layer,
                           (long long)first, (long long)last);
    }
    mu_pool_run_elastic(b->pool, attn_prefill_worker, &c);
    return 0;
}
