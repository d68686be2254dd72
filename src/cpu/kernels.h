/* kernels.h — the CPU kernel table: one entry per weight format and lane,
 * chosen once at startup by CPU features (scalar reference, AVX2+FMA,
 * AVX-512 with VNNI). Every SIMD kernel has a scalar twin here with the same
 * signature, and tests compare them on random data at every size class.
 *
 * Lanes (DESIGN.md): `exact` feeds f32 activations into every dot product;
 * `fast` quantizes the activation vector once per matvec to int8 in groups
 * of 16 (below) and runs integer dot products. Float weights (F32/F16/BF16)
 * use f32 activations in both lanes.
 *
 * Error contract (tests/test_kernels.c holds the budgets): exact-lane SIMD
 * kernels agree with the scalar reference to f32 rounding (they may sum in
 * another order and dequantize with a fused multiply-add); fast-lane SIMD
 * kernels compute the same integer dot products exactly and differ only in
 * the order of the float group sums; the activation quantizer is
 * bit-identical to the scalar one.
 */
#ifndef MU_CPU_KERNELS_H
#define MU_CPU_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant/quant.h"

/* y[r] = dot(row r of w, x) for r < nrows; rows are row_bytes apart, n
 * elements each (a multiple of the weight's block). */
typedef void (*mu_matvec_f32_fn)(const void *w, uint64_t row_bytes, int64_t nrows, const float *x, int64_t n,
                                 float *y);
/* Same with activations already quantized (fast-lane rows, see above). */
typedef void (*mu_matvec_q8_fn)(const void *w, uint64_t row_bytes, int64_t nrows, const void *xq, int64_t n,
                                float *y);
/* Prefill: y[t*ldy + r] = dot(row r of w, x_t) for t < T and r < nrows.
 * f32: x_t = x + t*n. q8: x_t = xq + t*xq_row_bytes (fast-lane rows). Each weight block is read once per tile of tokens, not once per
 * token. */
typedef void (*mu_matmul_f32_fn)(const void *w, uint64_t row_bytes, int64_t nrows, const float *x, int64_t n,
                                 int64_t T, float *y, int64_t ldy);
typedef void (*mu_matmul_q8_fn)(const void *w, uint64_t row_bytes, int64_t nrows, const void *xq,
                                uint64_t xq_row_bytes, int64_t n, int64_t T, float *y, int64_t ldy);
typedef void (*mu_quantize_fn)(const float *x, void *dst, int64_t n);
/* Batched decode on packed rows (mu_act_kd_pack): y[t*ldy + r] = dot(row r
 * of w, x_t) for t < T and r < nrows. */
typedef void (*mu_matvec_kd_fn)(const void *w, uint64_t row_bytes, int64_t nrows, const void *xd, int64_t n, int64_t T,
                                float *y, int64_t ldy);

/* ---- fast-lane activations ------------------------------------------------
 * int8 in groups of 16 with an f32 scale per group. llama.cpp's CPU backend
 * uses 256-element groups (Q8_K); groups of 16 halve the lane's error (mean
 * KL against the exact reference on the fixtures: nano-Q4_K_M 0.0046 with
 * 256, 0.0023 with 32 and below with 16), which keeps the fast lane below
 * llama.cpp's own error on every fixture instead of level with it. The
 * cost is one float multiply per 16 integer products.
 *
 * A row of n elements (n a multiple of 16) is
 *     qs[n] int8 | d[n/16] f32 | ds[n/16] f32
 * with x[i] ~ d[g] * qs[i] for group g = i / 16, iscale = 127 / amax(group),
 * qs = nearest-even(x * iscale), d = 1 / iscale (an all-zero group: d = 0,
 * qs = 0), and ds[g] = d[g] * (the sum of the group's qs), which the
 * K-quant min term and Q6_K's -32 offset use. */
#define MU_ACT_GROUP 16
static inline uint64_t mu_act_row_bytes(int64_t n) { return (uint64_t)n + 8u * (uint64_t)(n / MU_ACT_GROUP); }
static inline const float *mu_act_d(const void *row, int64_t n) { return (const float *)((const int8_t *)row + n); }
static inline const float *mu_act_ds(const void *row, int64_t n) { return mu_act_d(row, n) + n / MU_ACT_GROUP; }

/* ---- K-quant prefill activations (fast lane) ----------------------------
 * The K-quant prefill kernels (matmul_q8_kp) take the same rows with each
 * 256-element block rearranged, so that one integer accumulator per group
 * can run over the whole block: with G(L) = 4*(L%4) + L/4 (a transpose of
 * the 16 group indices; G(G(L)) = L),
 *     qs'[64c + 4L + j] = qs[16*G(L) + 4c + j]   (c, j < 4; L < 16)
 *     d'[16b + L] = d[16b + G(L)],  ds'[16b + L] = ds[16b + G(L)]
 * per block b. The values are those of quantize_act, only moved; a tail
 * of n % 256 elements (and its groups) stays in place. The permutation is
 * its own inverse. */
void mu_act_kq_permute(const void *src, void *dst, int64_t n);

/* ---- K-quant decode activations (fast lane) -----------------------------
 * The batched-decode kernels (matvec_q8_kd) take the T rows of a step
 * packed block by block, so that a register tile of tokens reads one
 * block's activations at fixed offsets from one pointer: for each
 * 256-element block b and token t, a record of MU_KD_REC bytes at
 * dst + (b*T + t) * MU_KD_REC holding that token's block in the layout of
 * mu_act_kq_permute, and the groups' sums of qs times -32 (Q6_K's offset
 * is then an integer the dot products start from),
 *     qs'[256] int8 | d'[16] f32 | ds'[16] f32 | b'[16] int32
 * (n a multiple of 256; mu_act_kd_bytes(n) per row). src holds the rows
 * xb bytes apart. */
#define MU_KD_REC 448
static inline uint64_t mu_act_kd_bytes(int64_t n) { return (uint64_t)(n / 256) * MU_KD_REC; }
void mu_act_kd_pack(const void *src, uint64_t xb, int64_t T, int64_t n, void *dst);
/* Token t's record of block b alone: packs one row into a pack of T. */
void mu_act_kd_pack_row(const void *src, int64_t t, int64_t T, int64_t n, void *dst);

typedef struct mu_cpu_kernels {
    const char *isa;                              /* "scalar", "avx2", "avx512bw", "avx512" */
    mu_matvec_f32_fn matvec_f32[MU_TYPE_COUNT];   /* exact lane (and float weights) */
    mu_matvec_q8_fn matvec_q8[MU_TYPE_COUNT];     /* fast lane, NULL: use matvec_f32 */
    mu_matmul_f32_fn matmul_f32[MU_TYPE_COUNT];   /* prefill, exact lane */
    mu_matmul_q8_fn matmul_q8[MU_TYPE_COUNT];     /* prefill, fast lane (NULL with matvec_q8) */
    /* Prefill, fast lane, K-quants, on rows permuted by mu_act_kq_permute
     * (NULL: use matmul_q8). Same numbers as matmul_q8 up to the order of
     * the float sums; its reference is the scalar matmul_q8 on the rows
     * before the permutation. */
    mu_matmul_q8_fn matmul_q8_kp[MU_TYPE_COUNT];
    /* Batched decode, fast lane: T rows of different sequences (the
     * matmul_q8 arguments), row t bit for bit what matvec_q8 of this table
     * gives it alone, each weight block read from memory once for all T
     * (where matmul_q8 runs matvec_q8 per token, as in the scalar table,
     * it is matmul_q8). */
    mu_matmul_q8_fn matvec_q8_rows[MU_TYPE_COUNT];
    /* Decode, fast lane, K-quants, one row or a batch of T, on rows packed
     * by mu_act_kd_pack (NULL: use matvec_q8 and matvec_q8_rows). A row's
     * numbers never depend on T, on the other rows or on the range of
     * weight rows of the call: each (weight row, token) sums its blocks in
     * order in one 16-lane accumulator, then adds the lanes. Same numbers
     * as matvec_q8 up to the rounding of the float sums (their order, and
     * Q6_K's offset summed as an integer); its reference is the scalar
     * matvec_q8 on the rows before packing. */
    mu_matvec_kd_fn matvec_q8_kd[MU_TYPE_COUNT];
    mu_quantize_fn quantize_act;                  /* f32 -> a fast-lane row */
    /* Attention over a block of KV rows for the nq query heads that share
     * one KV head (q: [nq][hd] f32; rows ld floats apart):
     *   scores: s[h*lds + r] = scale * dot(q_h, k_r)        for r < nrows
     *   pv:     acc[h*hd + e] += sum_r p[h*ldp + r] * v_r[e]
     * F16 planes are converted a block at a time with cvt_f16 (each row
     * then serves all nq heads). exp_sum: x[i] = exp(x[i] - sub), returns
     * the sum (the online-softmax step). */
    void (*cvt_f16)(const uint16_t *src, float *dst, int64_t n);
    void (*attn_scores)(const float *q, int nq, const float *k, int64_t ldk, int nrows, int hd, float scale,
                        float *s, int lds);
    void (*attn_pv)(const float *p, int nq, int ldp, const float *v, int64_t ldv, int nrows, int hd, float *acc);
    float (*exp_sum)(float *x, int64_t n, float sub);
    /* Elementwise: g = silu(g) * u (SwiGLU); o = o * sigmoid(g) (the
     * attention output gate). */
    void (*silu_mul)(float *g, const float *u, int64_t n);
    void (*sigmoid_mul)(float *o, const float *g, int64_t n);
    /* Logits: x = cap * tanh(x * scale / cap), or x * scale when cap is 0. */
    void (*softcap)(float *x, int64_t n, float scale, float cap);
    /* Reads n bytes (a multiple of 256) at full speed: the memory
     * bandwidth probe of `muser bench`. Returns a value of the data. */
    uint64_t (*stream_read)(const void *p, size_t n);
} mu_cpu_kernels;

/* Sets every weight-format entry of a table from the functions named
 * matvec_f32_<TYPE>, matvec_q8_<TYPE>, matmul_f32_<TYPE> and
 * matmul_q8_<TYPE> (matvec_q8_rows too: a table whose matmul_q8 is not
 * matvec_q8 per token sets it after; TYPE: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K; the
 * float types have no _q8 entries; the integer-view formats below likewise) that the including file defines; the
 * helpers likewise from quantize_act, cvt_f16, attn_scores, attn_pv,
 * exp_sum, silu_mul, sigmoid_mul, softcap and stream_read. */
#define MU_KERNELS_SET_TYPE(k, T)                                                                                \
    do {                                                                                                       \
        (k)->matvec_f32[MU_TYPE_##T] = matvec_f32_##T;                                                         \
        (k)->matmul_f32[MU_TYPE_##T] = matmul_f32_##T;                                                         \
    } while (0)
#define MU_KERNELS_SET_TYPE_Q8(k, T)                                                                             \
    do {                                                                                                       \
        MU_KERNELS_SET_TYPE(k, T);                                                                             \
        (k)->matvec_q8[MU_TYPE_##T] = matvec_q8_##T;                                                           \
        (k)->matmul_q8[MU_TYPE_##T] = matmul_q8_##T;                                                           \
        (k)->matvec_q8_rows[MU_TYPE_##T] = matmul_q8_##T;                                                      \
    } while (0)
#define MU_KERNELS_SET_FORMATS(k)                                                                                \
    do {                                                                                                       \
        MU_KERNELS_SET_TYPE(k, F32);                                                                           \
        MU_KERNELS_SET_TYPE(k, F16);                                                                           \
        MU_KERNELS_SET_TYPE(k, BF16);                                                                          \
        MU_KERNELS_SET_TYPE_Q8(k, Q8_0);                                                                       \
        MU_KERNELS_SET_TYPE_Q8(k, Q4_0);                                                                       \
        MU_KERNELS_SET_TYPE_Q8(k, Q4_K);                                                                       \
        MU_KERNELS_SET_TYPE_Q8(k, Q5_K);                                                                       \
        MU_KERNELS_SET_TYPE_Q8(k, Q6_K);                                                                       \
    } while (0)
/* The other integer-view formats (quant.h; Q8_0 and Q4_0 are the first
 * two): Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K. Fast lane: the
 * blocks' small integers against the int8 activations (x86: one 32-byte
 * signed dot product per 32 weights; the scalar reference of all nine goes
 * through mu_int_block). Exact lane: a chunk is dequantized with the
 * scalar reference, then an f32 dot product (SIMD on x86; NEON inherits
 * the scalar kernels of both lanes for these seven). */
#define MU_KERNELS_SET_INT_FORMATS(k)                                                                            \
    do {                                                                                                       \
        MU_KERNELS_SET_TYPE_Q8(k, Q4_1);                                                                       \
        MU_KERNELS_SET_TYPE_Q8(k, Q5_0);                                                                       \
        MU_KERNELS_SET_TYPE_Q8(k, Q5_1);                                                                       \
        MU_KERNELS_SET_TYPE_Q8(k, IQ4_NL);                                                                     \
        MU_KERNELS_SET_TYPE_Q8(k, IQ4_XS);                                                                     \
        MU_KERNELS_SET_TYPE_Q8(k, Q2_K);                                                                       \
        MU_KERNELS_SET_TYPE_Q8(k, Q3_K);                                                                       \
    } while (0)
#define MU_KERNELS_SET_HELPERS(k)                                                                                \
    do {                                                                                                       \
        (k)->quantize_act = quantize_act;                                                                      \
        (k)->cvt_f16 = cvt_f16;                                                                                \
        (k)->attn_scores = attn_scores;                                                                        \
        (k)->attn_pv = attn_pv;                                                                                \
        (k)->exp_sum = exp_sum;                                                                                \
        (k)->silu_mul = silu_mul;                                                                              \
        (k)->sigmoid_mul = sigmoid_mul;                                                                        \
        (k)->softcap = softcap;                                                                                \
        (k)->stream_read = stream_read;                                                                        \
    } while (0)

/* True when the fast lane runs this weight type on int8 activations (every
 * computable quantized format); float weights take f32 activations in both
 * lanes. */
bool mu_cpu_fast_type(uint32_t weight_type);

/* The best table for this CPU; isa forces one ("scalar", "avx2", "avx512bw",
 * "avx512": AVX-512 with VNNI)
 * and returns NULL if this CPU or build cannot run it. MUSER_ISA in the
 * environment forces one too. */
const mu_cpu_kernels *mu_cpu_kernels_get(const char *isa);
const mu_cpu_kernels *mu_cpu_kernels_scalar(void);
/* Per-ISA tables; NULL when not compiled in. Filled on top of the scalar
 * table (entries the ISA does not accelerate stay scalar). */
const mu_cpu_kernels *mu_cpu_kernels_avx2(void);
const mu_cpu_kernels *mu_cpu_kernels_avx512bw(void);
const mu_cpu_kernels *mu_cpu_kernels_avx512(void);
const mu_cpu_kernels *mu_cpu_kernels_neon(void);
/* Every table this CPU and build can run, best last (for tests). */
int mu_cpu_kernels_all(const mu_cpu_kernels **out, int cap);

#endif
