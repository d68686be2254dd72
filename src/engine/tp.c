#include "engine/tp.h"

#include <string.h>

#include "quant/quant.h"
#include "util/error.h"

mu_weight mu_weight_rows(const mu_weight *w, int64_t r0, int64_t n) {
    mu_weight v = *w;
    v.data = (const uint8_t *)w->data + (uint64_t)r0 * w->row_bytes;
    v.rows = n;
    return v;
}

mu_weight mu_weight_cols(const mu_weight *w, int64_t c0, int64_t n) {
    mu_weight v = *w;
    v.data = (const uint8_t *)w->data + mu_row_bytes(w->type, c0);
    v.cols = n;
    return v; /* row_bytes stays the parent's stride */
}

/* Largest block size among the weights whose columns are sliced. */
static int64_t col_block(const mu_model *m, bool ffn) {
    int64_t b = 1;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const mu_weight *w = ffn ? &m->layers[l].ffn_down : &m->layers[l].wo;
        int64_t e = mu_type_get(w->type)->block_elems;
        if (e > b) b = e;
    }
    return b;
}

static uint64_t seg_bytes(const mu_weight *w, int64_t rows, int64_t cols) {
    return w->data ? (uint64_t)rows * mu_row_bytes(w->type, cols) : 0;
}

int mu_tp_plan(const mu_model *m, int n, mu_tp_shard *shards) {
    const mu_hparams *hp = &m->hp;
    if (n < 1 || n > MU_TP_MAX_RANKS) return mu_fail(MUSER_EINVAL, "GPU count %d is out of range", n);
    if (hp->n_head % n)
        return mu_fail(MUSER_EUNSUPPORTED, "%d query heads do not split evenly over %d GPUs", hp->n_head, n);
    const int heads = hp->n_head / n, per_kv = hp->n_head / hp->n_head_kv;
    if (per_kv % heads && heads % per_kv)
        return mu_fail(MUSER_EUNSUPPORTED, "%d heads per GPU would split a group of %d heads sharing a KV head unevenly",
                       heads, per_kv);
    const int64_t qb = col_block(m, false);
    if (((int64_t)heads * hp->head_dim) % qb)
        return mu_fail(MUSER_EUNSUPPORTED,
                       "%d GPUs would give each %d heads (%lld columns of the output projection), not a whole number "
                       "of its %lld-element blocks",
                       n, heads, (long long)heads * hp->head_dim, (long long)qb);
    const int64_t fb = col_block(m, true);
    if (hp->n_ff % fb) return mu_fail(MUSER_EUNSUPPORTED, "n_ff is not a whole number of blocks");
    const int64_t ff_blocks = hp->n_ff / fb;
    if (ff_blocks < n) return mu_fail(MUSER_EUNSUPPORTED, "the FFN has only %lld blocks for %d GPUs", (long long)ff_blocks, n);

    int64_t ff_at = 0, voc_at = 0;
    for (int r = 0; r < n; r++) {
        mu_tp_shard *s = &shards[r];
        memset(s, 0, sizeof *s);
        s->rank = r, s->n_ranks = n;
        s->head0 = r * heads, s->n_heads = heads;
        s->kv_head0 = s->head0 / per_kv;
        s->n_kv_heads = heads >= per_kv ? heads / per_kv : 1;
        int64_t nb = ff_blocks / n + (r < ff_blocks % n ? 1 : 0);
        s->ff0 = ff_at, s->n_ff = nb * fb;
        ff_at += s->n_ff;
        int64_t nv = hp->n_vocab / n + (r < hp->n_vocab % n ? 1 : 0);
        s->vocab0 = voc_at, s->n_vocab = nv;
        voc_at += nv;

        const int64_t E = hp->n_embd, hd = hp->head_dim;
        uint64_t b = m->tok_embd.row_bytes + 4ull * (uint64_t)E + seg_bytes(&m->output, nv, E);
        for (int l = 0; l < hp->n_layer; l++) {
            const mu_layer *L = &m->layers[l];
            b += seg_bytes(&L->wq, (int64_t)heads * hd, E) + seg_bytes(&L->wgate, (int64_t)heads * hd, E);
            b += seg_bytes(&L->wk, (int64_t)s->n_kv_heads * hd, E) + seg_bytes(&L->wv, (int64_t)s->n_kv_heads * hd, E);
            b += seg_bytes(&L->wo, E, (int64_t)heads * hd);
            b += seg_bytes(&L->ffn_gate, s->n_ff, E) + seg_bytes(&L->ffn_up, s->n_ff, E) + seg_bytes(&L->ffn_down, E, s->n_ff);
            b += 4ull * (uint64_t)E * 4;
        }
        s->weight_bytes = b;
    }
    return 0;
}
