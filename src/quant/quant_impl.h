/* quant_impl.h — helpers shared by the quant sources (not public).
 *
 * Float expressions here must round the same way on every target: the
 * dequantizers follow ggml's formulas step by step, and the quantizers'
 * choices (hence their bytes) depend on the errors they compute. GCC
 * contracts a*b - c into a fused multiply-add whenever the target has one
 * (-ffp-contract=fast is its default in gnu11 mode), so each quant source
 * includes this header first and the pragmas below switch contraction off
 * for the whole file.
 */
#ifndef MU_QUANT_IMPL_H
#define MU_QUANT_IMPL_H

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "quant/quant.h"

/* Round to nearest, ties to even, for |x| < 2^22: adding 1.5*2^23 leaves
 * round(x) in the low mantissa bits. Never undefined, even for NaN or huge
 * x (the result is then meaningless but the caller clamps it). */
static inline int mu_nearest_int(float x) {
    float biased = x + 12582912.0f;
    uint32_t bits;
    memcpy(&bits, &biased, sizeof bits);
    return (int)(bits & 0x007FFFFF) - 0x00400000;
}

static inline uint32_t mu_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float mu_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Inline forms of the public conversions, for the per-element loops. */
static inline float mu_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exponent = (h >> 10) & 0x1F;
    uint32_t mantissa = h & 0x03FF;
    if (exponent == 0x1F) /* inf, or NaN made quiet as F16C does */
        return mu_bits_f32(sign | 0x7F800000u | (mantissa << 13) | (mantissa ? 0x00400000u : 0));
    if (exponent == 0) { /* zero or subnormal: mantissa * 2^-24, exact in f32 */
        float magnitude = (float)mantissa * 0x1p-24f;
        return mu_bits_f32(sign | mu_f32_bits(magnitude));
    }
    return mu_bits_f32(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

static inline uint16_t mu_float_to_half(float f) {
    uint32_t u = mu_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t magnitude = u & 0x7FFFFFFF;
    if (magnitude > 0x7F800000) /* NaN: keep it NaN (quiet) with the top payload bits */
        return (uint16_t)(sign | 0x7E00 | (magnitude >> 13 & 0x03FF));
    if (magnitude >= 0x477FF000) /* >= 65520 = halfway past 65504: rounds to inf */
        return (uint16_t)(sign | 0x7C00);
    if (magnitude <= 0x33000000) /* <= 2^-25 = half of the least subnormal: ties go to 0 */
        return sign;
    if (magnitude < 0x38800000) { /* below 2^-14: a subnormal half, in units of 2^-24 */
        uint32_t significand = (magnitude & 0x007FFFFF) | 0x00800000;
        int shift = 126 - (int)(magnitude >> 23); /* 14..24 */
        uint32_t units = significand >> shift;
        uint32_t rest = significand & ((1u << shift) - 1);
        uint32_t halfway = 1u << (shift - 1);
        if (rest > halfway || (rest == halfway && (units & 1))) units++;
        return (uint16_t)(sign | units); /* units may carry into the least normal: still right */
    }
    /* normal: rebias the exponent (127 -> 15), keep 10 mantissa bits, round
     * the 13 dropped bits to nearest even; a carry propagates into the exponent */
    uint32_t half = (magnitude - (112u << 23)) >> 13;
    uint32_t dropped = magnitude & 0x1FFF;
    if (dropped > 0x1000 || (dropped == 0x1000 && (half & 1))) half++;
    return (uint16_t)(sign | half);
}

/* f16 of a block scale, saturated at +-65504 where the plain conversion
 * would give inf, so a block never holds an infinite scale. */
#define MU_MAX_HALF 65504.0f
static inline uint16_t mu_float_to_half_saturated(float v) {
    return mu_float_to_half(v > MU_MAX_HALF ? MU_MAX_HALF : v < -MU_MAX_HALF ? -MU_MAX_HALF : v);
}

/* The least f16 >= v for a super-scale v >= 0, saturated at 65504 rather
 * than inf. Rounding up keeps the largest sub-block scale within its
 * integer range even where f16 is coarse (subnormal super-scales). */
static inline uint16_t mu_half_at_least(float v) {
    if (!(v < MU_MAX_HALF)) return mu_float_to_half(MU_MAX_HALF);
    uint16_t h = mu_float_to_half(v);
    if (mu_half_to_float(h) < v) h++;
    return h;
}

/* A row of a format with an integer view (quant.h), dequantized through
 * it: y = scale*q + offset per group, in that order (or scale*q). */
static inline void mu_dequant_via_ints(mu_int_block_fn decode, bool offset, int block_elems, int block_bytes,
                                       const void *src, float *dst, int64_t n) {
    mu_int_block ib;
    for (int64_t b = 0; b < n / block_elems; b++, dst += block_elems) {
        decode((const uint8_t *)src + b * block_bytes, &ib);
        for (int i = 0; i < block_elems; i++)
            dst[i] = offset ? ib.scale[i / 16] * (float)ib.q[i] + ib.offset[i / 16] : ib.scale[i / 16] * (float)ib.q[i];
    }
}

static inline float mu_bfloat_to_float(uint16_t h) { return mu_bits_f32((uint32_t)h << 16); }

static inline uint16_t mu_float_to_bfloat(float f) {
    uint32_t u = mu_f32_bits(f);
    if ((u & 0x7FFFFFFF) > 0x7F800000) /* NaN: truncating could make it inf, so force quiet */
        return (uint16_t)((u >> 16) | 0x0040);
    uint32_t round_bias = 0x7FFF + ((u >> 16) & 1); /* ties to even; overflow carries to inf */
    return (uint16_t)((u + round_bias) >> 16);
}

/* The element of largest |x|, with its sign; the first one wins ties. */
static inline float mu_signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }
    return max;
}

/* One candidate level set L of a scale search for x ~ s*L, given its sums
 * sum_lx = sum x*L and sum_ll = sum L^2: the least-squares s is
 * sum_lx/sum_ll and the error sum x^2 - sum_lx^2/sum_ll, so the best set
 * has the largest score sum_lx^2/sum_ll. Keeps the candidate (score and
 * s) when it beats *best_score; returns whether it did. */
static inline bool mu_keep_better_fit(double sum_lx, double sum_ll, float *best_score, float *best_scale) {
    if (!(sum_ll > 0 && sum_lx * sum_lx / sum_ll > *best_score)) return false;
    *best_score = (float)(sum_lx * sum_lx / sum_ll);
    *best_scale = (float)(sum_lx / sum_ll);
    return true;
}

/* Q8_K's bsums: the sum of the qs of each 16-element group. */
static inline void mu_q8_K_fill_bsums(mu_block_q8_K *block) {
    for (int g = 0; g < MU_QK_K / 16; g++) {
        int sum = 0;
        for (int j = 0; j < 16; j++) sum += block->qs[16 * g + j];
        block->bsums[g] = (int16_t)sum;
    }
}

/* Packs eight 6-bit (scale, min) pairs of a Q4_K/Q5_K block into the 12
 * bytes that mu_get_scale_min_k4 reads:
 *
 *   bytes 0..3:   sc[j]  | (sc[j+4] >> 4) << 6
 *   bytes 4..7:   m[j]   | (m[j+4]  >> 4) << 6
 *   bytes 8..11:  (sc[j+4] & 15) | (m[j+4] & 15) << 4      (j = 0..3)
 */
static inline void mu_pack_scales_k4(uint8_t packed[12], const uint8_t sc[8], const uint8_t m[8]) {
    for (int j = 0; j < 4; j++) {
        packed[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        packed[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
        packed[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
}

/* Packs the sixteen 6-bit scales u[g] of a Q3_K block (layout in quant.h). */
static inline void mu_pack_scales_q3(uint8_t packed[12], const int u[16]) {
    memset(packed, 0, 12);
    for (int g = 0; g < 16; g++) {
        if (g < 8) packed[g] |= (uint8_t)(u[g] & 15);
        else packed[g - 8] |= (uint8_t)((u[g] & 15) << 4);
        packed[8 + g % 4] |= (uint8_t)((u[g] >> 4) << 2 * (g / 4));
    }
}

/* Packs the eight 6-bit sub-block scales ls[j] of an IQ4_XS block. */
static inline void mu_pack_scales_iq4_xs(uint16_t *scales_h, uint8_t scales_l[4], const int ls[8]) {
    *scales_h = 0;
    memset(scales_l, 0, 4);
    for (int j = 0; j < 8; j++) {
        scales_l[j / 2] |= (uint8_t)((ls[j] & 15) << 4 * (j % 2));
        *scales_h |= (uint16_t)((ls[j] >> 4) << 2 * j);
    }
}

#endif
