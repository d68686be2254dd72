/* cu_matvec.h — the matvec family's request (mu_cu_mv) and its launch.
 *
 * One launch multiplies up to MU_CU_MAX_SEG matrices of the same column
 * count by one input vector (the matrices' rows form one row space) and
 * applies one epilogue to each row's dot. The input comes in three forms:
 * the activation as given (f32 for the exact lane and float weights, int8
 * groups for the fast lane), quantized from f32 while staged, or formed
 * from the residual while staged (norm-in). How the launch deals its
 * row-dots to warps (whole rows, packed short rows, flat gate/up batches,
 * ranges cut inside rows) is the launcher's choice (cu_matvec.cu).
 */
#ifndef MU_CU_MATVEC_H
#define MU_CU_MATVEC_H

#include "cuda/cu_shared.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { MU_CU_LANE_EXACT = 0, MU_CU_LANE_FAST = 1 };
enum {
    MU_CU_EPI_STORE = 0,   /* y_seg[r] = dot                                  */
    MU_CU_EPI_GATEUP = 1,  /* seg0 gate, seg1 up: seg0's y = silu(g) * u (f32) */
    MU_CU_EPI_RESNORM = 2, /* y = dot; the last block runs the resnorm tail   */
    MU_CU_EPI_LOGITS = 3,  /* logits = cap*tanh(scale*y/cap); device choice   */
};
#define MU_CU_MAX_SEG 4

/* Norm-in staging (fast-lane K-quant launches): the consumer of a
 * residual/norm boundary forms its own input while it stages it, in every
 * block, instead of the producer's last block running a tail:
 *   h' = h + rmsnorm(branch, eps_post) * w_post   (w_post NULL: h + branch)
 *   x  = rmsnorm(h', eps_next) * w_next, quantized into int8 groups of 16,
 * the branch being the sum of parts partial sums part_stride apart, added
 * in order (the producer's split rows). Block 0 writes h' to h_out (NULL:
 * not kept), which must not alias h (the residual alternates between two
 * buffers). */
typedef struct mu_cu_norm_in {
    const float *h;
    float *h_out;
    const float *branch;
    int parts;
    int64_t part_stride;
    const float *w_post, *w_next;
    float eps_post, eps_next;
} mu_cu_norm_in;

typedef struct mu_cu_mv_seg {
    mu_cu_weight w;
    float *y;              /* [rows] (in parts: [parts][rows])              */
} mu_cu_mv_seg;

/* The LM head's epilogue: scale, soft-cap and the device-side choice. */
typedef struct mu_cu_mv_logits {
    float scale, softcap;
    unsigned long long *best;  /* packed (ordered key, ~index), zeroed by the embed kernel */
    const mu_cu_rec_hdr *hdr;  /* temperature and seed of the step                     */
    int64_t vocab0;            /* global index of row 0 (a tensor-parallel rank's slice) */
} mu_cu_mv_logits;

typedef struct mu_cu_mv {
    mu_cu_mv_seg seg[MU_CU_MAX_SEG];
    int nseg;
    int lane;              /* MU_CU_LANE_*                                  */
    int epi;               /* MU_CU_EPI_*                                   */
    /* the input */
    mu_cu_act act;
    int quant_input;       /* fast lane: act.x is quantized into int8 groups of 16
                              while it is staged (act.q, act.ds unused)      */
    mu_cu_norm_in nin;     /* nin.h set: the input is formed while staging (fast-lane
                              K-quants; act unused)                         */
    /* how the rows are dealt */
    int even_rounds;       /* the fewest warps that keep the number of rounds, so every
                              warp gets as many row-dots (0: every warp that fits; the last
                              round then partial)                           */
    int split_parts;       /* STORE of one matrix: rows split in parts as RESNORM
                              (a norm-in consumer sums them)                */
    int batch_parts;       /* STORE, fast lane, K-quants: row-dots in this many parts of
                              one batch (mu_cu_mv_batch_parts; 0 or 1: whole) */
    /* RESNORM */
    mu_cu_resnorm rn;
    unsigned int *counter; /* zero before the launch; the last block re-zeroes it */
    /* LOGITS */
    mu_cu_mv_logits lg;
} mu_cu_mv;

/* Parts a long row of a one-matrix RESNORM launch (ffn down) is split into,
 * so that every warp streams about the same bytes; the tail adds the parts'
 * partial sums in order (deterministic). */
int mu_cu_mv_parts(uint32_t type, int64_t cols);
/* Most batch parts a fast-lane STORE may split its row-dots into (the
 * activation buffers of q, k, v and the gate hold this many rows). */
#define MU_CU_BATCH_PARTS_MAX 8
/* Parts of one batch (16 blocks) each for the row-dots of a fast-lane
 * K-quant STORE launch when that takes at least a quarter fewer rounds of
 * batches on the current GPU than whole rows (qkv + gate of a tensor-
 * parallel rank of the 30B: 4352 rows of 26 blocks on 4224 warps, 4 rounds
 * whole, 3 in parts); 1 otherwise. The consumer sums the parts (part p of
 * matrix m at y_m + p * rows_m). */
int mu_cu_mv_batch_parts(const mu_cu_mv *a);

cudaError_t mu_cu_matvec(const mu_cu_mv *a, const mu_cu_exec *x);
/* Batched decode, exact lane: y[j][0..rows) = W . x[j] for j < nrows (row
 * strides ldx, ldy in elements), the weights read once per MU_CU_MVR_MAX
 * rows, each row with the arithmetic of its own one-row exact-lane matvec. */
#define MU_CU_MVR_MAX 16
cudaError_t mu_cu_matvec_rows(const mu_cu_weight *w, const float *xin, int64_t ldx, float *y, int64_t ldy, int nrows,
                              const mu_cu_exec *x);

/* Batched decode, fast lane: y_s[j][r] = W_s[r] . x[j] for the rows j <
 * nrows and the segments s (one type and column count: one row space),
 * each input staged as int8 groups of 16 in shared memory, the weights read
 * once per launch of up to MU_CU_MVRF_MAX rows (fewer where the staged rows
 * do not fit). */
#define MU_CU_MVRF_MAX 16
typedef struct mu_cu_mvr_seg {
    mu_cu_weight w;
    float *y;              /* [nrows][ldy]                                   */
    int64_t ldy;
} mu_cu_mvr_seg;
typedef struct mu_cu_mvr {
    mu_cu_mvr_seg seg[MU_CU_MAX_SEG];
    int nseg;
    mu_cu_act act;         /* row 0: q and ds (int8 groups as written), or x alone
                              (f32, quantized while staged)                  */
    int64_t ldx;           /* elements between rows of x and q (ds: ldx / 8 floats) */
    int nrows;
    float *part;           /* mu_cu_mmf_set: room for the pieces of row groups whose K
                              spans more than one block's range (NULL: a block per
                              W row groups, whole)                           */
    int64_t part_cap;      /* floats at part                                   */
    unsigned int *counters; /* [counter_cap] zero before the launch (each piece's
                              group re-zeroes its own)                        */
    int64_t counter_cap;
    const void *xp;        /* mu_cu_mmf_set: the inputs as mu_cu_mmf_pack wrote them */
} mu_cu_mvr;
/* Whether the fast B-row matvec takes weights of this type and column
 * count (a type it has a kernel for; one row's staged input fits). */
int mu_cu_matvec_rows_fast_ok(uint32_t type, int64_t cols, int quant_input);
cudaError_t mu_cu_matvec_rows_fast(const mu_cu_mvr *a, const mu_cu_exec *x);

/* Batched fast lane on tensor cores in f16 (cu_mmf.cu), K-quants: y_s[t][r]
 * = W_s[r] . x[t] for the tokens t < a->nrows and the segments s (one type
 * and column count), the weights dequantized to f16 in registers, the
 * inputs f16 packed by mu_cu_mmf_pack (x [T][ldx] f32, K columns) into xp,
 * mu_gpu_mmf_halves(K, T) halves (cuda_plan.h); one launch (and one more
 * to add the K splits' partials where a->part is given and the grid is
 * small). mmf_ok: the types and column counts it takes. */
int mu_cu_mmf_ok(uint32_t type, int64_t cols);
cudaError_t mu_cu_mmf_pack(const float *x, int64_t ldx, int64_t K, int T, void *xp, const mu_cu_exec *e);
cudaError_t mu_cu_mmf_pack16(const uint16_t *x, int64_t ldx, int64_t K, int T, void *xp, const mu_cu_exec *e);
cudaError_t mu_cu_mmf_set(const mu_cu_mvr *a, const mu_cu_exec *x);

#ifdef __cplusplus
}
#endif
#endif
