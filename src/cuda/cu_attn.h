/* cu_attn.h — attention: QK-norm + RoPE + KV append, split-K attention
 * with its reducer, and the decode step's attention in one launch.
 */
#ifndef MU_CU_ATTN_H
#define MU_CU_ATTN_H

#include "cuda/cu_shared.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mu_cu_qkv_post {
    int T, layer;
    int n_head, n_head_kv, head_dim, n_rot;
    int neox;              /* rope pairing                               */
    int use_rope, base_index;
    const float *q, *k, *v;       /* raw projections [T][..]               */
    int64_t q_stride, kv_stride;  /* elements between tokens               */
    int parts;                    /* T = 1: each projection in parts (the matvec's
                                     batch_parts), a matrix's rows apart, summed
                                     in order (0, 1: one)                   */
    const float *q_norm, *k_norm; /* [head_dim] or NULL                    */
    float eps;
    float *qn;             /* [T][n_head][head_dim]                       */
    void *kc, *vc;
    void *const *kc_rows, *const *vc_rows; /* [T] device: token t's planes (the rows of a
                                              batched step, each its session's), or NULL:
                                              kc, vc for every token */
    int kv_f32;
    mu_cu_recs recs;
} mu_cu_qkv_post;

/* ---- attention ------------------------------------------------------------------- */
typedef struct mu_cu_attn {
    int T, layer;
    int n_head, n_head_kv, head_dim;
    int kv_f32;
    int64_t capacity;      /* rows of the plane                         */
    void *kc, *vc;         /* planes [capacity][n_head_kv*head_dim]     */
    void *const *kc_rows, *const *vc_rows; /* as mu_cu_qkv_post's (every plane of
                                              the same capacity)    */
    const float *q;        /* [T][n_head][head_dim], after QK-norm/RoPE */
    float scale_log2;      /* attn_scale * log2(e)                      */
    int split_cap;         /* splits per (token, kv head) at most       */
    float *part_m, *part_l, *part_o; /* [T][n_head][split_cap]([head_dim]) */
    mu_cu_recs recs;
} mu_cu_attn;

/* Splits of a visible span of n rows: about 128 rows each, at most cap. */
MU_CU_HD static inline int mu_cu_attn_splits(int64_t n, int cap) {
    int64_t s = (n + 127) / 128;
    if (s < 1) s = 1;
    return (int)(s < cap ? s : cap);
}


typedef struct mu_cu_reduce {
    int T, n_head, head_dim, split_cap, layer;
    const float *part_m, *part_l, *part_o;
    const float *gate;     /* [T][n_head*head_dim] raw gate, or NULL      */
    int64_t gate_stride;
    int gate_parts;        /* T = 1: the gate in parts n_head*head_dim apart, summed in order (0, 1: one) */
    mu_cu_normout out;     /* [T][n_head*head_dim]                         */
    int64_t out_stride;
    mu_cu_recs recs;
} mu_cu_reduce;

/* Decode (T = 1) of one layer's attention in one launch when its visible
 * span is short: QK-norm/RoPE/append, attention and the reducer's output
 * (divided, gated, int8) together, a block (or a cluster of blocks) per
 * query head, in place of the three launches. The three structs are theirs (at's split fields and
 * rd's partials unused). The host routes a step here only when every
 * layer's span is at most short_max rows; a longer span traps (fails
 * closed) rather than compute a wrong answer. */
#define MU_CU_ATTN_SHORT_MAX 512
#define MU_CU_ATTN_CLUSTER_MAX 8 /* the portable cluster size */
typedef struct mu_cu_attn_decode {
    mu_cu_qkv_post qp;
    mu_cu_attn at;
    mu_cu_reduce rd;
    int short_max;
    int cluster;  /* blocks per query head (1 .. MU_CU_ATTN_CLUSTER_MAX), each a run of
                     the span; short_max <= cluster x MU_CU_ATTN_SHORT_MAX */
} mu_cu_attn_decode;

cudaError_t mu_cu_qkv_post_launch(const mu_cu_qkv_post *a, const mu_cu_exec *x);
/* use_mma: tensor-core path (f16 KV, head_dim 128, <= 16 query heads per KV head). */
cudaError_t mu_cu_attention(const mu_cu_attn *a, bool use_mma, const mu_cu_exec *x);
cudaError_t mu_cu_attn_reduce(const mu_cu_reduce *a, const mu_cu_exec *x);
/* a->short_max in 1 .. a->cluster x MU_CU_ATTN_SHORT_MAX. */
cudaError_t mu_cu_attn_decode_launch(const mu_cu_attn_decode *a, const mu_cu_exec *x);

#ifdef __cplusplus
}
#endif
#endif
