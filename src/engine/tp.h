/* tp.h — the tensor-parallel plan: how a model is split across N GPUs.
 *
 * Each rank owns a run of query heads (and the KV heads they read: a KV head
 * is replicated when its query group spans ranks), the matching rows of
 * Wq / Wgate and columns of Wo, a slice of the FFN (rows of ffn_gate and
 * ffn_up, columns of ffn_down), and a slice of the LM head's rows. Norms and
 * the embedding are replicated. Per layer the partial outputs of Wo and of
 * ffn_down are summed across ranks (two all-reduces); the LM head slices are
 * gathered.
 *
 * Column slices of a quantized matrix must start and end on block
 * boundaries, so head and FFN slices are whole blocks of the weight types
 * involved (256 elements for K-quants): Muse Glimmer's 32 heads of 128 split
 * 2, 4, 8 or 16 ways; 32 ways would cut Wo's Q4_K blocks in half and is
 * refused. An uneven FFN split (78 blocks over 4 ranks: 20, 20, 19, 19) is
 * fine.
 */
#ifndef MU_TP_H
#define MU_TP_H

#include <stdint.h>

#include "model/model.h"

#define MU_TP_MAX_RANKS 64

typedef struct mu_tp_shard {
    int rank, n_ranks;
    int head0, n_heads;       /* query heads owned                          */
    int kv_head0, n_kv_heads; /* KV heads those queries read (maybe shared) */
    int64_t ff0, n_ff;        /* FFN slice                                  */
    int64_t vocab0, n_vocab;  /* LM head rows                               */
    uint64_t weight_bytes;    /* weight bytes this rank streams per token   */
} mu_tp_shard;

/* Fills shards[0..n_ranks). Fails (MUSER_EUNSUPPORTED, with the reason)
 * when the model cannot be split that way. */
int mu_tp_plan(const mu_model *m, int n_ranks, mu_tp_shard *shards);

/* A view of rows [r0, r0 + n) of w. */
mu_weight mu_weight_rows(const mu_weight *w, int64_t r0, int64_t n);
/* A view of columns [c0, c0 + n) of w (block aligned; rows keep their
 * stride, so the view's row_bytes is the parent's). */
mu_weight mu_weight_cols(const mu_weight *w, int64_t c0, int64_t n);

#endif
