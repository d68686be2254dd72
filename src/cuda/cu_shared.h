/* cu_shared.h — what the C host code (cuda_backend.c) and the CUDA kernels
 * (*.cu) share: device-side descriptions of weights, activations and the
 * per-token step records, and the extern "C" launch wrappers.
 *
 * Every wrapper enqueues on the given stream and returns the launch's
 * cudaError_t; the host checks it with CU_CHECK (file and line). Kernels
 * launched with programmatic dependent launch (mu_cu_set_pdl) start while
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
/* Dynamic shared memory of a Wo launch forming the decode attention
 * (mu_cu_mv.attn_in): the staged input, the groups' scales, the region. */
size_t mu_cu_attn_in_launch_smem(int64_t cols, int n_head, int n_head_kv, int short_max);
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
struct mu_cu_mv;
int mu_cu_mv_batch_parts(const struct mu_cu_mv *a);

/* ---- activations --------------------------------------------------------------
 * An input vector in both lanes' forms: f32 (exact lane, float weights) and
 * int8 groups of 16 (fast lane) with, per group, its scale d = amax/127 and
 * d * sum(q) (for the K-quant min terms). */
typedef struct mu_cu_act {
    const float *x;   /* [n]           */
    const int8_t *q;  /* [n]           */
    const float *ds;  /* [n/16][2]: d and d * sum(q) of each group of 16 */
} mu_cu_act;

/* Outputs of a normalization: f32, plus int8 blocks and/or f16 when asked. */
typedef struct mu_cu_normout {
    float *x;
    int8_t *q;        /* NULL: no int8 blocks */
    float *ds;
    uint16_t *h;      /* NULL: no f16 copy    */
} mu_cu_normout;

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

/* ---- matvec --------------------------------------------------------------------- */
enum { MU_CU_LANE_EXACT = 0, MU_CU_LANE_FAST = 1 };
enum {
    MU_CU_EPI_STORE = 0,   /* y_seg[r] = dot                                  */
    MU_CU_EPI_GATEUP = 1,  /* seg0 gate, seg1 up: out = silu(g)*u as f32 + int8 */
    MU_CU_EPI_RESNORM = 2, /* y = dot; the last block runs the resnorm tail   */
    MU_CU_EPI_LOGITS = 3,  /* logits = cap*tanh(scale*y/cap); device argmax   */
};
#define MU_CU_MAX_SEG 4

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
    int kv_f32;
    mu_cu_recs recs;
} mu_cu_qkv_post;

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

/* ---- attention ------------------------------------------------------------------- */
typedef struct mu_cu_attn {
    int T, layer;
    int n_head, n_head_kv, head_dim;
    int kv_f32;
    int64_t capacity;      /* rows of the plane                         */
    void *kc, *vc;         /* planes [capacity][n_head_kv*head_dim]     */
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

/* Decode attention formed in Wo's staging (mu_cu_mv.attn_in; fast lane,
 * f16 KV, K-quant Wo, one GPU): every block of the Wo launch computes all
 * heads of the token's attention over a short span (QK-norm/RoPE of the
 * token, tensor-core Q K^T and P V over the cached rows copied into shared
 * memory before the wait, the gate, the int8 groups) and stages the result
 * as its input, in place of the attention launch and Wo's int8 copy.
 * Block 0 appends K and V. Shared memory past the staged input and the
 * groups' scales, per the layout below: rows = the span's tile rows (the
 * route's limit rounded up to 16). */
#define MU_CU_ATTN_IN_MAX 128 /* rows (the tiles' limit) */
#define MU_CU_ATTN_IN_ROW 272 /* bytes per tile row of 128 f16: 16 of padding, no bank conflicts */
MU_CU_HD static inline int mu_cu_attn_in_rows(int short_max) { return (short_max + 15) & ~15; }
typedef struct mu_cu_attn_in_layout {
    int k, v, qh, ql, p, s, l, o, g, w, a, n, total; /* byte offsets into the region, and its size */
} mu_cu_attn_in_layout;
MU_CU_HD static inline mu_cu_attn_in_layout mu_cu_attn_in_smem(int n_head, int n_head_kv, int short_max, int warps) {
    const int nr = mu_cu_attn_in_rows(short_max), kv = n_head_kv;
    mu_cu_attn_in_layout L;
    L.k = 0;
    L.v = L.k + kv * nr * MU_CU_ATTN_IN_ROW;
    L.qh = L.v + kv * nr * MU_CU_ATTN_IN_ROW;   /* Q in log2 units, f16 hi part: [kv][16][136] */
    L.ql = L.qh + kv * 16 * MU_CU_ATTN_IN_ROW;  /* and the lo part                             */
    L.p = L.ql + kv * 16 * MU_CU_ATTN_IN_ROW;   /* softmax weights f16: [kv][16][rows + 8]      */
    L.s = L.p + kv * 16 * (nr + 8) * 2;         /* scores f32: [n_head][rows]                   */
    L.l = L.s + n_head * nr * 4;                /* softmax sums: [n_head]                       */
    L.o = L.l + (n_head * 4 + 15) / 16 * 16;    /* output f32 [n_head][128]; first the warps' scratch */
    L.g = L.o + (n_head > warps ? n_head : warps) * 128 * 4; /* the sigmoid gate [n_head][128] */
    L.w = L.g + n_head * 128 * 4;               /* the QK-norm weights (q, k) and the cos/sin table: 3 x 128 f32 */
    L.a = L.w + 3 * 128 * 4;                    /* the launch's mu_cu_attn_decode and the span's rows (int) */
    L.n = L.a + (int)((sizeof(mu_cu_attn_decode) + 15) / 16 * 16);
    L.total = L.n + 16;
    return L;
}

typedef struct mu_cu_mv_seg {
    mu_cu_weight w;
    float *y;
} mu_cu_mv_seg;

typedef struct mu_cu_mv {
    mu_cu_mv_seg seg[MU_CU_MAX_SEG];
    int nseg;
    int lane;
    int epi;
    mu_cu_act act;
    int64_t rows_total;    /* set by mu_cu_matvec                          */
    int prefetch;          /* set by mu_cu_matvec: prefetch before the wait (see below) */
    unsigned lab;          /* set by mu_cu_matvec: MU_CU_LAB_* */
    int stamp_id;          /* set by mu_cu_matvec: the launch's stage-stamp row, -1: none */
    int parts;             /* set by mu_cu_matvec: RESNORM rows split in K parts
                              (y holds parts x rows partial sums)          */
    int pack;              /* set by mu_cu_matvec: K-quant row-dots per batch (short rows) */
    int even_rounds;       /* grid: the fewest warps that keep the number of rounds, so every
                              warp gets as many row-dots (0: every warp that fits; the last
                              round then partial) */
    int split_parts;       /* STORE of one matrix: rows split in K parts as RESNORM
                              (a norm-in consumer sums them)                */
    int batch_parts;       /* STORE, fast lane, K-quants: row-dots in this many parts of
                              one batch (mu_cu_mv_batch_parts; 0 or 1: whole) */
    int cut_b0[MU_CU_MAX_SEG + 1]; /* set by launch_mv for cut ranges (mv_kernel, FLAT 2):
                              segment i's blocks are [cut_b0[i], cut_b0[i + 1]) */
    int attn_in;           /* STORE, fast lane, K-quants: the input is the decode attention
                              of ad, formed while staging (mu_cu_attn_in_smem; act unused) */
    mu_cu_attn_decode ad;
    mu_cu_norm_in nin;     /* nin.h set: the input is formed while staging (fast-lane
                              K-quants; act unused)                         */
    int pair;              /* set by launch_mv_grid: launched in clusters of two blocks whose
                              staging loads are shared (fast-lane K-quants that quantize
                              their input: each block loads half, into both) */
    int quant_input;       /* fast lane: act.x is quantized into int8 groups of 16
                              while it is staged (act.q, act.ds unused); the
                              producer (gate/up) then stores f32 only      */
    /* GATEUP */
    mu_cu_normout gu;
    unsigned int *group_count; /* [rows/16], zero; each group's last writer quantizes it and re-zeroes */
    /* RESNORM */
    mu_cu_resnorm rn;
    unsigned int *counter; /* zero before the launch; the last block re-zeroes it */
    /* LOGITS */
    float logit_scale, softcap;
    unsigned long long *best;  /* packed (ordered key, ~index), zeroed by the embed kernel */
    const mu_cu_rec_hdr *hdr;  /* temperature and seed of the step                     */
    int64_t vocab0;            /* global index of row 0 (a tensor-parallel rank's slice) */
    uint64_t step;
} mu_cu_mv;

/* ---- launch wrappers ----------------------------------------------------------------- */
void mu_cu_set_pdl(bool on);
bool mu_cu_get_pdl(void);
/* Blocks per SM of the matvec grid (0: as many as fit, the default), and a
 * cap on its blocks in all (0: none; tests use it to give each warp many rows). */
void mu_cu_set_matvec_occupancy(int blocks_per_sm);
void mu_cu_set_matvec_grid_cap(int blocks);
/* Matvec prefetch before griddepcontrol.wait: 0 (default) only the first
 * batch into registers; 1 also each warp's next row-dots into L2 (bulk
 * prefetch), while the previous kernel drains. */
void mu_cu_set_matvec_prefetch(int level);
/* Experiments of the A/B lab: leave out a part of the matvec kernels to
 * time what it costs (the results are then wrong). */
enum {
    MU_CU_LAB_NO_GROUP_QUANT = 1,
    MU_CU_LAB_NO_TAIL = 2,
    MU_CU_LAB_NO_STAGE = 4,
    MU_CU_LAB_EPI_GROUP_QUANT = 8, /* a real variant: gate/up quantizes its groups (counter per group)
                                      instead of the down launch quantizing while it stages */
    MU_CU_LAB_SKIP_ATTN = 16,      /* the host leaves out QK-norm/RoPE/append, attention, reducer */
    MU_CU_LAB_NO_TAIL_PREFETCH = 32, /* RESNORM: no L2 prefetch of h and the norm weights at the start */
    MU_CU_LAB_NO_PACK = 64,        /* short K-quant row-dots one per batch, not packed */
    MU_CU_LAB_EVEN_ROUNDS = 128,   /* every launch as mu_cu_mv.even_rounds (the fewest warps that keep the rounds) */
    MU_CU_LAB_TAIL_STAMPS = 256,   /* the RESNORM tails record clock stamps (mu_cu_lab_tail_stamps) */
    MU_CU_LAB_NO_FLAT = 512,       /* gate/up in whole rows per warp, not flat batches across rows */
    MU_CU_LAB_FLAT = 1024,         /* gate/up in flat batches wherever they can run (tests) */
    MU_CU_LAB_NO_STAGE_NORM = 2048,  /* timing: no staging in the launches that form their input (norm-in) */
    MU_CU_LAB_NO_STAGE_QUANT = 4096, /* timing: no staging in the launches that quantize theirs (down) */
    MU_CU_LAB_NO_STAGE_COPY = 8192,  /* timing: no staging in the launches that copy int8 (Wo) */
    MU_CU_LAB_STAGE_STAMPS = 16384,    /* matvec launches record globaltimer stamps (mu_cu_lab_stage_stamps) */
    MU_CU_LAB_NO_NORM_W_L1 = 32768,    /* norm-in: no L1 prefetch of the norm weights before the wait */
    MU_CU_LAB_NO_CUT = 65536,          /* STORE: whole rows per warp, not ranges cut inside rows (mv_kernel) */
    MU_CU_LAB_CUT = 131072,            /* STORE: cut ranges wherever they can run (tests) */
    MU_CU_LAB_ATTN_IN_NO_PRELOAD = 262144, /* timing: attention in Wo without the cached rows' copy */
    MU_CU_LAB_ATTN_IN_NO_HEADS = 524288,   /* timing: ... without the heads' norm/rope (phase 1) */
    MU_CU_LAB_ATTN_IN_NO_MMA = 1048576,    /* timing: ... without the scores, softmax and P V */
    MU_CU_LAB_NO_PAIR = 4194304,           /* no paired staging: every block loads all of its input */
    MU_CU_LAB_BLOCK_MAJOR = 8388608,       /* whole-row launches: row-dots round-robin in block-major warp order */
};
/* Stage stamps: a row per matvec launch captured since
 * mu_cu_lab_stage_stamps_begin (the ids are fixed at capture), columns
 * (globaltimer ns, each the max over the launch's blocks or warps; "min"
 * columns hold ~t): kind + 1 (kind = EPI * 4 + QI), ~entry, ~wait
 * released, wait released, first block sum (norm-in), second block sum,
 * staged, last warp's end, ~staged; then the norm-in staging's warps
 * (every eighth block): the branch loaded (max, ~min), h' formed, the
 * input quantized, the records built. mu_cu_lab_stage_stamps copies the
 * rows of the launches since the last call and clears them. */
#define MU_CU_STAGE_STAMP_COLS 14
int mu_cu_lab_stage_stamps_begin(void); /* -1: not compiled in (MUSER_LAB_STAMPS) */
int mu_cu_lab_stage_stamps(unsigned long long *out, int max_rows);
/* Per block of each of those launches (call before mu_cu_lab_stage_stamps,
 * which clears them): rows x MU_CU_STAGE_BLOCKS_MAX x {wait released, last
 * warp's end (globaltimer ns), SM id + 1}, 0 where a block did not run */
#define MU_CU_STAGE_BLOCKS_MAX 160
int mu_cu_lab_block_stamps(unsigned long long *out, int rows);
/* The tails' stamps since the last call (then cleared), rows of
 * MU_CU_TAIL_STAMP_COLS: parts, then SM clocks at the block's handshake
 * start, the last-block decision, the tail's start, after its loads and
 * first sum, after its second sum, after its stores; then globaltimer
 * (ns) at the tail's start and end. Returns the rows written. */
#define MU_CU_TAIL_STAMP_COLS 9
int mu_cu_lab_tail_stamps(unsigned long long *out, int max_rows);
void mu_cu_set_matvec_lab(unsigned flags);
/* matvec launches so far with paired staging (mu_cu_mv.pair); eligible (if
 * not NULL): those that could have been (a fast-lane K-quant input
 * quantized while staged, on an even grid, pairs not turned off) */
long long mu_cu_pair_launches(long long *eligible);
unsigned mu_cu_get_matvec_lab(void);

/* Raw GGUF rows [r0, r0+nrows) staged on the device -> repacked streams;
 * src_stride: bytes between the staged rows (0: the rows are contiguous). */
cudaError_t mu_cu_repack(const mu_cu_weight *w, const void *raw, int64_t r0, int64_t nrows, int64_t src_stride,
                         cudaStream_t s);
/* Rows [r0, r0+nrows) dequantized into dst (f16 when to_f16, else f32), row-major [nrows][cols]. */
cudaError_t mu_cu_dequant(const mu_cu_weight *w, int64_t r0, int64_t nrows, void *dst, bool to_f16, cudaStream_t s);

cudaError_t mu_cu_matvec(const mu_cu_mv *a, cudaStream_t s);
/* Batched decode, exact lane: y[j][0..rows) = W . x[j] for j < nrows (row
 * strides ldx, ldy in elements), the weights read once per MU_CU_MVR_MAX rows. */
#define MU_CU_MVR_MAX 16
cudaError_t mu_cu_matvec_rows(const mu_cu_weight *w, const float *x, int64_t ldx, float *y, int64_t ldy, int nrows,
                              cudaStream_t s);
/* Token embedding rows + (embd norm) + first pre-norm, T rows; zeroes *best. */
cudaError_t mu_cu_embed(const mu_cu_weight *tok, mu_cu_recs recs, int T, mu_cu_resnorm rn,
                        unsigned long long *best, cudaStream_t s);
/* rn applied to T rows (prefill). */
cudaError_t mu_cu_resnorm_rows(mu_cu_resnorm rn, int T, cudaStream_t s);
/* The addresses of (window, offset) on ranks 0..n-1 of the window's LSA
 * team, as this GPU reaches them (window: an ncclWindow_t of NCCL 2.28+;
 * cudaErrorNotSupported in a build without nccl_device.h). */
cudaError_t mu_cu_lsa_pointers(void *window, size_t offset, int n, void **out, cudaStream_t s);
/* out = silu(g) * u for T rows of n, f32 in place of g and optional f16. */
cudaError_t mu_cu_swiglu_rows(float *g, const float *u, uint16_t *h, int64_t n, int T, cudaStream_t s);
/* logits = cap * tanh(scale * logits / cap) over n values. */
cudaError_t mu_cu_logits_finish(float *logits, int64_t n, float scale, float softcap, cudaStream_t s);
/* int8 blocks (fast-lane activations) of T rows of n. */
cudaError_t mu_cu_quantize_rows(const float *x, int8_t *q, float *ds, int64_t n, int T, cudaStream_t s);
/* f32 -> f16 conversion of n values. */
cudaError_t mu_cu_to_f16(const float *x, uint16_t *h, int64_t n, cudaStream_t s);

cudaError_t mu_cu_qkv_post_launch(const mu_cu_qkv_post *a, cudaStream_t s);
/* use_mma: tensor-core path (f16 KV, head_dim 128, <= 16 query heads per KV head). */
cudaError_t mu_cu_attention(const mu_cu_attn *a, bool use_mma, cudaStream_t s);
cudaError_t mu_cu_attn_reduce(const mu_cu_reduce *a, cudaStream_t s);
/* a->short_max in 1 .. MU_CU_ATTN_SHORT_MAX. */
cudaError_t mu_cu_attn_decode_launch(const mu_cu_attn_decode *a, cudaStream_t s);

/* Fills rows [0, rows) of a KV plane with random values (bench depth). */
cudaError_t mu_cu_fill_random(void *dst, int64_t n, bool f32, uint64_t seed, float scale, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
