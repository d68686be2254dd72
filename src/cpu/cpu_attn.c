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
 * and divides once. Prefill gives each thread whole (tile, KV head)
 * items, a tile being up to TILE_MAX consecutive tokens: step k converts
 * the rows of every tile token's k-th block once (the union of their
 * spans, at most BLK + TILE_MAX - 1 rows: a sliding window's first row
 * moves one row per token) and each token folds its own block from it.
 * Each token keeps the block sequence it would have alone (blocks start at
 * its own first visible row) and its own triples, so its result is bit for
 * bit that of a tile of one.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "util/error.h"

#define BLK MU_ATTN_BLOCK

/* Prefill tiles: up to TILE_MAX tokens share each converted K/V block. */
#define TILE_MAX 16
#define BUF_ROWS (BLK + TILE_MAX - 1)

/* Per thread: K and V rows ([BUF_ROWS][head_dim] f32 each), the scores of
 * one KV head's query heads ([n_head][BLK]) and a tile's triples
 * ([TILE_MAX][per_kv] running max and sum, [TILE_MAX][per_kv][head_dim]
 * values). */
size_t mu_cpu_attn_scratch_floats(const mu_hparams *hp) {
    const size_t hd = (size_t)hp->head_dim, per_kv = (size_t)(hp->n_head / hp->n_head_kv);
    return 2 * (size_t)BUF_ROWS * hd + (size_t)hp->n_head * BLK + (size_t)TILE_MAX * per_kv * (2 + hd);
}

static inline int64_t slot_of(const mu_route_decision *d, const mu_kv_plane *p, int64_t i) {
    return d->route == MU_ROUTE_CONTIGUOUS ? d->phys_first + i : (d->phys_first + i) % p->capacity;
}

/* Folds nr (<= BLK) K and V rows (row r at kp + r * ld, vp + r * ld) into
 * the triples of n_q query heads. q: [n_q][head_dim]; m, s: [n_q]; acc:
 * [n_q][head_dim]; sc: [n_q][BLK] scores. */
static void fold_block(const cpu_backend *b, const float *q, int n_q, const float *kp, const float *vp, int64_t ld,
                       int nr, float *m, float *s, float *acc, float *sc) {
    const mu_hparams *hp = &b->m->hp;
    const mu_cpu_kernels *k = b->k;
    const int hd = hp->head_dim;
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

/* K and V rows of KV head kvh for the n consecutive physical slots from
 * slot0 (wrapping at the capacity) into kbuf, vbuf ([n][head_dim] f32). */
static void load_rows(const cpu_backend *b, int layer, int kvh, int64_t slot0, int n, float *kbuf, float *vbuf) {
    const int hd = b->m->hp.head_dim, kvd = b->kv_dim;
    const int64_t cap = b->planes[layer].capacity;
    const bool f16 = b->cfg.kv_type == MUSER_KV_F16;
    int64_t slot = slot0 % cap;
    for (int r = 0; r < n; r++, slot = slot + 1 == cap ? 0 : slot + 1) {
        const int64_t off = slot * kvd + (int64_t)kvh * hd;
        if (f16) {
            b->k->cvt_f16((const uint16_t *)b->kcache[layer] + off, kbuf + (int64_t)r * hd, hd);
            b->k->cvt_f16((const uint16_t *)b->vcache[layer] + off, vbuf + (int64_t)r * hd, hd);
        } else {
            memcpy(kbuf + (int64_t)r * hd, (const float *)b->kcache[layer] + off, sizeof(float) * hd);
            memcpy(vbuf + (int64_t)r * hd, (const float *)b->vcache[layer] + off, sizeof(float) * hd);
        }
    }
}

/* Folds visible rows [i0, i0 + nr) (nr <= BLK) into the triples of the n_q
 * query heads that share KV head kvh. q: [n_q][head_dim]; m, s: [n_q];
 * acc: [n_q][head_dim]. */
static void attend_block(const cpu_backend *b, int layer, const mu_route_decision *d, int kvh, const float *q, int n_q,
                         int64_t i0, int nr, float *m, float *s, float *acc, float *scratch) {
    const int hd = b->m->hp.head_dim, kvd = b->kv_dim;
    const mu_kv_plane *p = &b->planes[layer];
    const bool f16 = b->cfg.kv_type == MUSER_KV_F16;
    float *kbuf = scratch, *vbuf = scratch + BUF_ROWS * hd, *sc = scratch + 2 * BUF_ROWS * hd;
    const int64_t slot0 = slot_of(d, p, i0);
    if (!f16 && slot0 + nr <= p->capacity) {
        /* F32 rows that do not wrap: read them in place */
        fold_block(b, q, n_q, (const float *)b->kcache[layer] + slot0 * kvd + (int64_t)kvh * hd,
                   (const float *)b->vcache[layer] + slot0 * kvd + (int64_t)kvh * hd, kvd, nr, m, s, acc, sc);
    } else {
        load_rows(b, layer, kvh, slot0, nr, kbuf, vbuf);
        fold_block(b, q, n_q, kbuf, vbuf, hd, nr, m, s, acc, sc);
    }
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
    int tile;       /* prefill: tokens per tile */
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

/* One token of a prefill tile: its span's route and its place in the chunk. */
typedef struct tile_tok {
    int t;
    mu_route_decision d;
} tile_tok;

/* Tokens [t0, t1) of the chunk (t1 - t0 <= TILE_MAX) against KV head kvh. */
static void attend_tile(attn_ctx *c, int t0, int t1, int kvh, float *scratch) {
    cpu_backend *b = c->b;
    const mu_hparams *hp = &b->m->hp;
    const int hd = hp->head_dim, kvd = b->kv_dim, per_kv = hp->n_head / hp->n_head_kv, h0 = kvh * per_kv;
    const mu_kv_plane *p = &b->planes[c->layer];
    const bool f16 = b->cfg.kv_type == MUSER_KV_F16;
    float *kbuf = scratch, *vbuf = scratch + BUF_ROWS * hd, *sc = scratch + 2 * BUF_ROWS * hd;
    float *tm = sc + (size_t)hp->n_head * BLK, *ts = tm + TILE_MAX * per_kv, *tacc = ts + TILE_MAX * per_kv;
    tile_tok tok[TILE_MAX];
    int n = 0;
    int64_t first_lo = INT64_MAX, first_hi = INT64_MIN, n_steps = 0;
    for (int t = t0; t < t1; t++) {
        /* causal, or a drafter's block that also sees its later tokens */
        int64_t first, last;
        mu_attn_span(b->m, c->layer, p, c->pos0 + t, c->pos0 + c->T - 1, b->bidirectional, &first, &last);
        /* Route checks are per token; the planes hold the whole chunk. */
        if (!mu_attn_route_select(p, last, last - first + 1, c->layer, &tok[n].d)) continue;
        tok[n].t = t;
        first_lo = tok[n].d.first < first_lo ? tok[n].d.first : first_lo;
        first_hi = tok[n].d.first > first_hi ? tok[n].d.first : first_hi;
        const int64_t nb = (tok[n].d.n_visible + BLK - 1) / BLK;
        n_steps = nb > n_steps ? nb : n_steps;
        init_triples(per_kv, hd, tm + n * per_kv, ts + n * per_kv, tacc + (int64_t)n * per_kv * hd);
        n++;
    }
    if (n > 1 && first_hi - first_lo > TILE_MAX - 1) {
        /* first rows too far apart for one buffer (not a span mu_attn_span
         * gives): one token at a time */
        for (int i = 0; i < n; i++) attend_tile(c, tok[i].t, tok[i].t + 1, kvh, scratch);
        return;
    }
    for (int64_t k = 0; k < n_steps; k++) {
        const int64_t i0 = k * BLK;
        /* the union [lo, hi) of the tile tokens' k-th blocks, by position */
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        bool load = false;
        for (int i = 0; i < n; i++) {
            const mu_route_decision *d = &tok[i].d;
            if (i0 >= d->n_visible) continue;
            const int nr = (int)(d->n_visible - i0 < BLK ? d->n_visible - i0 : BLK);
            lo = d->first + i0 < lo ? d->first + i0 : lo;
            hi = d->first + i0 + nr > hi ? d->first + i0 + nr : hi;
            load = load || f16 || slot_of(d, p, i0) + nr > p->capacity;
        }
        if (load) load_rows(b, c->layer, kvh, mu_kv_physical(p, lo), (int)(hi - lo), kbuf, vbuf);
        for (int i = 0; i < n; i++) {
            const mu_route_decision *d = &tok[i].d;
            if (i0 >= d->n_visible) continue;
            const int nr = (int)(d->n_visible - i0 < BLK ? d->n_visible - i0 : BLK);
            const int64_t slot0 = slot_of(d, p, i0);
            const float *q = c->q + ((int64_t)tok[i].t * hp->n_head + h0) * hd;
            float *m = tm + i * per_kv, *s = ts + i * per_kv, *acc = tacc + (int64_t)i * per_kv * hd;
            if (!f16 && slot0 + nr <= p->capacity) {
                /* F32 rows that do not wrap: read them in place */
                fold_block(b, q, per_kv, (const float *)b->kcache[c->layer] + slot0 * kvd + (int64_t)kvh * hd,
                           (const float *)b->vcache[c->layer] + slot0 * kvd + (int64_t)kvh * hd, kvd, nr, m, s, acc,
                           sc);
            } else {
                const int64_t r0 = d->first + i0 - lo;
                fold_block(b, q, per_kv, kbuf + r0 * hd, vbuf + r0 * hd, hd, nr, m, s, acc, sc);
            }
        }
    }
    for (int i = 0; i < n; i++)
        for (int h = 0; h < per_kv; h++) {
            float *out = c->o + ((int64_t)tok[i].t * hp->n_head + h0 + h) * hd;
            const float *a = tacc + ((int64_t)i * per_kv + h) * hd;
            const float inv = 1.0f / ts[i * per_kv + h];
            for (int e = 0; e < hd; e++) out[e] = a[e] * inv;
        }
}

static void attn_prefill_worker(void *vctx, int ith, int nth) {
    (void)nth;
    attn_ctx *c = vctx;
    cpu_backend *b = c->b;
    const int n_kv = b->m->hp.n_head_kv;
    float *scratch = b->attn_scratch + (size_t)ith * b->attn_scratch_floats;
    const int n_tiles = (c->T + c->tile - 1) / c->tile, items = n_tiles * n_kv;
    for (;;) {
        /* latest tokens first: they see the most rows */
        const long long claimed = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (claimed >= items) break;
        const int it = items - 1 - (int)claimed;
        const int j = it / n_kv, kvh = it % n_kv;
        const int t0 = j * c->tile, t1 = t0 + c->tile < c->T ? t0 + c->tile : c->T;
        attend_tile(c, t0, t1, kvh, scratch);
    }
}

/* Tokens per prefill tile: up to TILE_MAX, smaller when a short chunk
 * would leave fewer than two items per thread; b->attn_tile (tests) fixes
 * it. */
static int prefill_tile(const cpu_backend *b, int T) {
    if (b->attn_tile > 0) return b->attn_tile < TILE_MAX ? b->attn_tile : TILE_MAX;
    const int want = 2 * mu_pool_size(b->pool);
    int tile = TILE_MAX;
    while (tile > 1 && ((T + tile - 1) / tile) * b->m->hp.n_head_kv < want) tile = (tile + 1) / 2;
    return tile;
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
    c.tile = prefill_tile(b, T);
    mu_pool_run_elastic(b->pool, attn_prefill_worker, &c);
    return 0;
}
