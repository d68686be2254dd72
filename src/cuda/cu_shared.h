/* cu_shared.h — what the C host code (cuda_*.c) and the CUDA kernels (*.cu)
 * share: device-side descriptions of weights, activations and the per-token
 * step records, how a backend launches (mu_cu_exec), and the extern "C"
 * wrappers of the small kernels. The matvec family is in cu_matvec.h, the
 * attention in cu_attn.h.
 *
 * Every wrapper enqueues on the given stream and returns the launch's
 * cudaError_t; the host checks it with CU_CHECK (file and line). Kernels
 * launched with programmatic dependent launch (mu_cu_exec.pdl) start while
 * their predecessor drains: before griddepcontrol.wait they touch only
 * immutable data (weights), so the token step's order is kept.
 */
#ifndef MU_CU_SHARED_H
#define MU_CU_SHARED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __CUDACC__
#define MU_CU_HD __host__ __device__
#else
#define MU_CU_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- weights ----------------------------------------------------------------
 * Quantized weights are repacked at upload into separate streams, so that a
 * warp reads each row with 16-byte loads that fill whole 32-byte sectors:
 *   Q4_K: qs 128 B/block, meta 16 B/block (d, dmin, scales[12])
 *   Q5_K: qs 128 B/block, qh 32 B/block, meta 16 B/block
 *   Q6_K: qs 128 B/block, qh 64 B/block, meta (scales) 16 B/block, d
 *   Q8_0: qs 32 B/block, d;   Q4_0: qs 16 B/block, d
 *   Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K: qs in 16-byte units, the
 *     high bits, scale bytes and f16 scales apart (cu_units.cuh, TIv)
 *   F32, F16, BF16: the rows as they are, in qs.
 * Same bytes as the file, only moved (the K-quants' order within a block
 * is described in cu_kq.cuh); each stream is row-major. */
typedef struct mu_cu_weight {
    uint32_t type;        /* enum mu_type                              */
    int32_t units;        /* 16-byte units of qs per row (qs row = 16 * units) */
    int64_t rows, cols;
    const uint8_t *qs;
    const uint8_t *qh;
    const uint8_t *meta;
    const uint16_t *d;    /* f16 block scales                          */
    const uint16_t *f16;  /* dequantized f16 copy for prefill, or NULL */
    uint64_t bytes;       /* device bytes of the quantized streams     */
} mu_cu_weight;

/* Device bytes of each stream of a weight (0 when absent). */
typedef struct mu_cu_layout {
    uint64_t qs, qh, meta, d;
} mu_cu_layout;
/* false for types the CUDA backend cannot compute with. */
bool mu_cu_weight_layout(uint32_t type, int64_t rows, int64_t cols, mu_cu_layout *out);
/* 16-byte units of the bulk stream per row (every format: qs row bytes / 16). */
int32_t mu_cu_units(uint32_t type, int64_t cols);
/* ---- activations --------------------------------------------------------------
 * An input vector in both lanes' forms: f32 (exact lane, float weights) and
 * int8 groups of 16 (fast lane) with, per group, its scale d = amax/127 and
 * d * sum(q) (for the K-quant min terms). */
typedef struct mu_cu_act {
    const float *x;   /* [n]           */
    const int8_t *q;  /* [n]           */
    const float *ds;  /* [n/16][2]: d and d * sum(q) of each group of 16 */
} mu_cu_act;

/* Outputs of a normalization: f32, plus int8 blocks and/or f16 when asked,
 * and/or the tensor-core batch's packed inputs (cu_mmf_in.cuh; rows of at
 * most MU_CU_TAIL_MAXN for the residual/norm tail). */
typedef struct mu_cu_normout {
    float *x;
    int8_t *q;        /* NULL: no int8 blocks */
    float *ds;
    uint16_t *h;      /* NULL: no f16 copy    */
    void *xp;         /* NULL: not packed     */
    int xp_nb;        /* K-blocks of 256 a row */
} mu_cu_normout;
#define MU_CU_TAIL_MAXN 8192 /* the widest row the tail stages in shared memory */

/* Residual update and the next pre-norm, one row of n:
 *   if branch: h += post_norm(branch) (eps_post; w_post NULL: plain add)
 *   out = rmsnorm(h, eps_next) * w_next (w_next NULL: no weight)
 * With embd (embedding rows): h = rmsnorm(h) without weight first. */
/* The ranks of a tensor-parallel step meeting inside a kernel (the fused
 * all-reduce): every rank's inbox lives at the same offset of an NCCL
 * symmetric window, reached through NCCL's load/store-accessible (LSA)
 * mapping of the window; rank p's copy of a location is at
 * (its rank-0 address) + p * stride. Each meeting raises every rank's
 * epoch by one (the ranks run the same sequence of meetings). */
typedef struct mu_cu_xrank {
    int n, rank;           /* n < 2: no meeting                             */
    uint32_t *inbox0;      /* rank 0's inbox (MU_CU_XRANK_MAX slots), LSA-mapped */
    int64_t stride;        /* 4-byte elements between two ranks' copies     */
    uint32_t *epoch;       /* this rank's meetings so far (device memory)   */
} mu_cu_xrank;
#define MU_CU_XRANK_MAX 64

typedef struct mu_cu_resnorm {
    const float *branch;   /* branch_parts partial sums, part_stride apart, added in order */
    int branch_parts;      /* 0 or 1: one                                   */
    int64_t part_stride;   /* elements between parts (0: n)                 */
    mu_cu_xrank xr;        /* RESNORM launch: the ranks meet before the tail
                              (their branches are then the parts: the
                              all-reduce summed inside the tail)          */
    const float *w_post;
    float eps_post;
    float *h;
    const float *w_next;
    float eps_next;
    int embd_norm;    /* weightless norm of h before anything else (embedding) */
    int n;
    mu_cu_normout out;
    /* row strides in elements for multi-row use (branch, h, out.*) */
    int64_t stride;
} mu_cu_resnorm;

/* ---- per-token step records -----------------------------------------------------
 * One record per token of a chunk, uploaded by one small copy before the
 * kernels run (the token step's only host input):
 *   header, then per layer {slot, n_visible, phys_first, route},
 *   then per RoPE base the cos/sin table of the position (mu_rope_table). */
typedef struct mu_cu_rec_hdr {
    int32_t token;
    int32_t pos;
    float temperature; /* <= 0: greedy selection */
    uint32_t seed;
} mu_cu_rec_hdr;

typedef struct mu_cu_rec_layer {
    int32_t slot;       /* KV row this token appends                     */
    int32_t n_visible;  /* rows the token's query sees                   */
    int32_t phys_first; /* physical slot of the first visible row        */
    int32_t route;      /* MU_CU_ROUTE_*                                 */
} mu_cu_rec_layer;
enum { MU_CU_ROUTE_CONTIGUOUS = 0, MU_CU_ROUTE_ORIGIN = 1 };

typedef struct mu_cu_recs {
    const uint8_t *base; /* device records                              */
    int64_t stride;      /* bytes per record                            */
    int n_layer, n_rot, n_bases;
} mu_cu_recs;

static inline int64_t mu_cu_rec_bytes(int n_layer, int n_bases, int n_rot) {
    int64_t b = (int64_t)sizeof(mu_cu_rec_hdr) + (int64_t)n_layer * (int64_t)sizeof(mu_cu_rec_layer) +
                4 * (int64_t)n_bases * n_rot;
    return (b + 15) / 16 * 16;
}

/* ---- launching ----------------------------------------------------------------
 * How a backend launches its kernels, from its tuning table (cuda_tuning.h);
 * every wrapper that launches with PDL takes one. */
enum { MU_CU_ROUTE_AUTO = 0, MU_CU_ROUTE_NEVER = 1, MU_CU_ROUTE_ALWAYS = 2 };
typedef struct mu_cu_exec {
    cudaStream_t stream;
    bool pdl;              /* programmatic dependent launch                  */
    int mv_blocks_per_sm;  /* matvec blocks per SM (0: as many as fit)        */
    int mv_grid_cap;       /* matvec blocks in all (0: no cap; tests use it to
                              give each warp many rows)                     */
    int mv_flat;           /* MU_CU_ROUTE_*: gate/up in flat batches across rows */
    int mv_cut;            /* MU_CU_ROUTE_*: STORE launches in ranges cut inside rows */
    bool mv_pair;          /* paired staging where it can run (mu_cu_matvec) */
    long long *pair_counts;/* optional [2]: matvec launches that could pair,
                              and those that did (tests: the route ran)     */
    int mmf_wide;          /* MU_CU_ROUTE_*: tensor-core batch blocks of 8 warps (else 4) */
    int mmf_tiles;         /* tensor-core batch: at most this many tiles of 8
                              tokens a block (0: by the token count; tests
                              set 1 for many block columns)                 */
    bool clusters;         /* thread-block clusters may be launched (the device
                              and the loaded code have them, and the portable
                              paths are not forced: cuda_features.c); a
                              cluster launch without it fails              */
} mu_cu_exec;

/* The PTX target the driver loaded this library's kernels from, as
 * 10 major + minor (cuda_features.c: below 90 the code has no Hopper
 * instructions, whatever the device). */
cudaError_t mu_cu_code_arch(int *ptx_arch);

/* ---- small kernels ------------------------------------------------------------- */
/* Raw GGUF rows [r0, r0+nrows) staged on the device -> repacked streams;
 * src_stride: bytes between the staged rows (0: the rows are contiguous). */
cudaError_t mu_cu_repack(const mu_cu_weight *w, const void *raw, int64_t r0, int64_t nrows, int64_t src_stride,
                         cudaStream_t s);
/* Rows [r0, r0+nrows) dequantized into dst (f16 when to_f16, else f32), row-major [nrows][cols]. */
cudaError_t mu_cu_dequant(const mu_cu_weight *w, int64_t r0, int64_t nrows, void *dst, bool to_f16, cudaStream_t s);
/* Token embedding rows + (embd norm) + first pre-norm, T rows; zeroes *best. */
cudaError_t mu_cu_embed(const mu_cu_weight *tok, mu_cu_recs recs, int T, mu_cu_resnorm rn,
                        unsigned long long *best, const mu_cu_exec *x);
/* rn applied to T rows (prefill). */
cudaError_t mu_cu_resnorm_rows(mu_cu_resnorm rn, int T, const mu_cu_exec *x);
/* out = silu(g) * u for T rows of n, f32 in place of g and optional f16. */
cudaError_t mu_cu_swiglu_rows(float *g, const float *u, uint16_t *h, int64_t n, int T, void *xp, const mu_cu_exec *x);
/* logits = cap * tanh(scale * logits / cap) over n values. */
cudaError_t mu_cu_logits_finish(float *logits, int64_t n, float scale, float softcap, const mu_cu_exec *x);
/* ids[t] = the greedy choice of row t of x [T][n] (engine/parity.h's
 * mu_argmax: the first largest, NaN never wins, a NaN at 0 stays), made
 * on the device; part: [T][MU_CU_ARGMAX_SPLITS] scratch. No PDL: starts
 * once the grid before it (the logits' finish) is done. */
#define MU_CU_ARGMAX_SPLITS 16
cudaError_t mu_cu_rows_argmax(const float *x, int64_t n, int T, unsigned long long *part, int32_t *ids,
                              cudaStream_t s);
/* Row r of x [T][n] plus its bias (bias_off [T + 1] into bias_ids and
 * bias_vals, added in order, in place; bias_off NULL: none), then its k
 * (1 to MU_CU_TOP_MAX, at most n) top values by value then lower index,
 * NaN as -inf, -0 as +0, into vals, ids [T][k] in no particular order
 * (cu_top.cu). No PDL. */
#define MU_CU_TOP_MAX 256
cudaError_t mu_cu_rows_top(float *x, int64_t n, int T, const int *bias_off, const int32_t *bias_ids,
                           const float *bias_vals, int k, float *vals, int32_t *ids, cudaStream_t s);
/* int8 groups of 16 (fast-lane activations: q [T][n], ds [T][n/16][2]) of
 * T rows of n, n a multiple of 32. */
cudaError_t mu_cu_quantize_rows(const float *x, int8_t *q, float *ds, int64_t n, int T, const mu_cu_exec *ex);
/* Fills n values (f32 or f16) with random finite numbers (bench depth, copy benchmark). */
cudaError_t mu_cu_fill_random(void *dst, int64_t n, bool f32, uint64_t seed, float scale, cudaStream_t s);
/* The addresses of (window, offset) on ranks 0..n-1 of the window's LSA
 * team, as this GPU reaches them (window: an ncclWindow_t of NCCL 2.28+;
 * cudaErrorNotSupported in a build without nccl_device.h). */
cudaError_t mu_cu_lsa_pointers(void *window, size_t offset, int n, void **out, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
