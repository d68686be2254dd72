/* kernels.h — the CPU kernel table: one entry per weight format and lane,
 * chosen once at startup by CPU features (scalar reference, AVX2+FMA,
 * AVX-512 with VNNI). Every SIMD kernel has a scalar twin here with the same
 * signature, and tests compare them on random data at every size class.
 *
 * Lanes (DESIGN.md): `exact` feeds f32 activations into every dot product;
 * `fast` quantizes the activation vector once per matvec (Q8_K blocks for
 * K-quant weights, Q8_0 blocks for Q8_0/Q4_0 weights) and runs integer dot
 * products. Float weights (F32/F16/BF16) use f32 activations in both lanes.
 */
#ifndef MU_CPU_KERNELS_H
#define MU_CPU_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "quant/quant.h"

/* y[r] = dot(row r of w, x) for r < nrows; rows are row_bytes apart, n
 * elements each (a multiple of the weight's block). */
typedef void (*mu_matvec_f32_fn)(const void *w, uint64_t row_bytes, int64_t nrows, const float *x, int64_t n,
                                 float *y);
/* Same with activations already quantized to the lane's activation type. */
typedef void (*mu_matvec_q8_fn)(const void *w, uint64_t row_bytes, int64_t nrows, const void *xq, int64_t n,
                                float *y);
typedef void (*mu_quantize_fn)(const float *x, void *dst, int64_t n);

typedef struct mu_cpu_kernels {
    const char *isa;                              /* "scalar", "avx2", "avx512" */
    mu_matvec_f32_fn matvec_f32[MU_TYPE_COUNT];   /* exact lane (and float weights) */
    mu_matvec_q8_fn matvec_q8[MU_TYPE_COUNT];     /* fast lane, NULL: use matvec_f32 */
    mu_quantize_fn quantize_q8_K;                 /* f32 -> Q8_K blocks */
    mu_quantize_fn quantize_q8_0;                 /* f32 -> Q8_0 blocks */
    /* f32 dot product (attention scores) and y += a*x (attention values) */
    float (*dot_f32)(const float *a, const float *b, int64_t n);
    float (*dot_f16_f32)(const uint16_t *a, const float *b, int64_t n);
    void (*axpy_f32)(float a, const float *x, float *y, int64_t n);
    void (*axpy_f16)(float a, const uint16_t *x, float *y, int64_t n);
} mu_cpu_kernels;

/* Activation type the fast lane uses for a weight type (MU_TYPE_Q8_K,
 * MU_TYPE_Q8_0), or MU_TYPE_F32 when the weight takes f32 activations. */
uint32_t mu_cpu_act_type(uint32_t weight_type);

/* The best table for this CPU; isa forces one ("scalar", "avx2", "avx512")
 * and returns NULL if this CPU or build cannot run it. MUSER_ISA in the
 * environment forces one too. */
const mu_cpu_kernels *mu_cpu_kernels_get(const char *isa);
const mu_cpu_kernels *mu_cpu_kernels_scalar(void);
/* Per-ISA tables; NULL when not compiled in. Filled on top of the scalar
 * table (entries the ISA does not accelerate stay scalar). */
const mu_cpu_kernels *mu_cpu_kernels_avx2(void);
const mu_cpu_kernels *mu_cpu_kernels_avx512(void);

#endif
