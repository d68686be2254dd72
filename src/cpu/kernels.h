/* kernels.h — the CPU kernel table: one entry per weight format and lane,
 * chosen once at startup by CPU features (scalar reference, AVX2+FMA,
 * AVX-512 with VNNI). Every SIMD kernel has a scalar twin here with the same
 * signature, and tests compare them on random data at every size class.
 *
 * Lanes (DESIGN.md): `exact` feeds f32 activations into every dot product;
 * `fast` quantizes the activation vector once per matvec (Q8_K blocks for
 * K-quant weights, Q8_0 blocks for Q8_0/Q4_0 weights) and runs integer dot
 * products. Float weights (F32/F16/BF16) use f32 activations in both lanes.
 *
 * Error contract (tests/test_kernels.c holds the budgets): exact-lane SIMD
 * kernels agree with the scalar reference to f32 rounding (they may sum in
 * another order and dequantize with a fused multiply-add); fast-lane SIMD
 * kernels compute the same integer dot products exactly and differ only in
 * the order of the float block sums; the activation quantizers are
 * bit-identical to the scalar ones.
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
/* Same with activations already quantized to the lane's activation type. */
typedef void (*mu_matvec_q8_fn)(const void *w, uint64_t row_bytes, int64_t nrows, const void *xq, int64_t n,
                                float *y);
/* Prefill: y[t*ldy + r] = dot(row r of w, x_t) for t < T and r < nrows.
 * f32: x_t = x + t*n. q8: x_t = xq + t*xq_row_bytes (the lane's activation
 * blocks). Each weight block is read once per tile of tokens, not once per
 * token. */
typedef void (*mu_matmul_f32_fn)(const void *w, uint64_t row_bytes, int64_t nrows, const float *x, int64_t n,
                                 int64_t T, float *y, int64_t ldy);
typedef void (*mu_matmul_q8_fn)(const void *w, uint64_t row_bytes, int64_t nrows, const void *xq,
                                uint64_t xq_row_bytes, int64_t n, int64_t T, float *y, int64_t ldy);
typedef void (*mu_quantize_fn)(const float *x, void *dst, int64_t n);

typedef struct mu_cpu_kernels {
    const char *isa;                              /* "scalar", "avx2", "avx512bw", "avx512" */
    mu_matvec_f32_fn matvec_f32[MU_TYPE_COUNT];   /* exact lane (and float weights) */
    mu_matvec_q8_fn matvec_q8[MU_TYPE_COUNT];     /* fast lane, NULL: use matvec_f32 */
    mu_matmul_f32_fn matmul_f32[MU_TYPE_COUNT];   /* prefill, exact lane */
    mu_matmul_q8_fn matmul_q8[MU_TYPE_COUNT];     /* prefill, fast lane (NULL with matvec_q8) */
    mu_quantize_fn quantize_q8_K;                 /* f32 -> Q8_K blocks */
    mu_quantize_fn quantize_q8_0;                 /* f32 -> Q8_0 blocks */
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

/* Activation type the fast lane uses for a weight type (MU_TYPE_Q8_K,
 * MU_TYPE_Q8_0), or MU_TYPE_F32 when the weight takes f32 activations. */
uint32_t mu_cpu_act_type(uint32_t weight_type);

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
