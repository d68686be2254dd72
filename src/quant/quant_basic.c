/* quant_basic.c — scalar reference rows for the plain and 32-element
 * formats (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1) and the Q8_K
 * activations.
 *
 * The quantizers here are the fixed rules llama.cpp uses (no search), so
 * the bytes they write are identical to ggml's reference quantizers, except
 * that a block scale beyond the f16 range (inputs beyond ~8e6) saturates at
 * 65504 where ggml would store inf.
 */
#include "quant/quant_impl.h"

#include <math.h>

/* Converts an already rounded value to int within [lo, hi]; NaN gives lo
 * (a plain cast of NaN or of a huge value would be undefined). */
static int clamp_to_int(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo;
    if (v > (float)hi) return hi;
    return (int)v;
}

/* ---- F32, F16, BF16: plain little-endian arrays along ne[0] ------------ */

void mu_dequant_row_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }
void mu_quant_row_f32(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

void mu_dequant_row_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *halves = src;
    for (int64_t i = 0; i < n; i++) dst[i] = mu_half_to_float(halves[i]);
}

void mu_quant_row_f16(const float *src, void *dst, int64_t n) {
    uint16_t *halves = dst;
    for (int64_t i = 0; i < n; i++) halves[i] = mu_float_to_half(src[i]);
}

void mu_dequant_row_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *halves = src;
    for (int64_t i = 0; i < n; i++) dst[i] = mu_bfloat_to_float(halves[i]);
}

void mu_quant_row_bf16(const float *src, void *dst, int64_t n) {
    uint16_t *halves = dst;
    for (int64_t i = 0; i < n; i++) halves[i] = mu_float_to_bfloat(src[i]);
}

/* ---- Q4_0 ------------------------------------------------------------------
 *   offset 0  d      f16
 *   offset 2  qs[16] byte j: low nibble = q[j], high nibble = q[j+16]
 *   y[j] = (q[j] - 8) * d,  q in 0..15
 */
void mu_int_block_q4_0(const void *block, mu_int_block *out) {
    const mu_block_q4_0 *b = block;
    for (int j = 0; j < 16; j++) {
        out->q[j] = (int8_t)((b->qs[j] & 0x0F) - 8);
        out->q[j + 16] = (int8_t)((b->qs[j] >> 4) - 8);
    }
    out->scale[0] = out->scale[1] = mu_half_to_float(b->d);
}

void mu_dequant_row_q4_0(const void *src, float *dst, int64_t n) {
    mu_dequant_via_ints(mu_int_block_q4_0, false, 32, sizeof(mu_block_q4_0), src, dst, n);
}

void mu_quant_row_q4_0(const float *src, void *dst, int64_t n) {
    mu_block_q4_0 *blocks = dst;
    for (int64_t b = 0; b < n / MU_QK4_0; b++, src += MU_QK4_0) {
        /* the signed max lands on the -8 end, the one with no +8 counterpart */
        const float d = mu_signed_absmax(src, MU_QK4_0) / -8.0f;
        const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
        blocks[b].d = mu_float_to_half_saturated(d);
        for (int j = 0; j < MU_QK4_0 / 2; j++) {
            /* x*inverse is in [-8, 8], so +8.5 is positive and floor rounds half up */
            int lo = clamp_to_int(floorf(src[j] * inverse + 8.5f), 0, 15);
            int hi = clamp_to_int(floorf(src[j + MU_QK4_0 / 2] * inverse + 8.5f), 0, 15);
            blocks[b].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

/* ---- Q4_1, Q5_1: an affine block (scale and min) ---------------------------
 *   Q4_1: offset 0 d f16, 2 m f16, 4 qs[16] (nibbles as Q4_0)
 *   Q5_1: offset 0 d f16, 2 m f16, 4 qh[4], 8 qs[16] (low bits as Q4_0,
 *         bit j of qh, a little-endian u32, is the fifth bit of weight j)
 *   y = q*d + m
 * The quantizer maps [min, max] onto 0..levels-1: d = (max-min)/(levels-1),
 * q = trunc((x-min)/d + 0.5), with 1/d taken before d is rounded to f16. */
static float affine_block(const float *x, int levels, float *min_out, float *inverse) {
    float min = x[0], max = x[0];
    for (int j = 1; j < 32; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / (float)(levels - 1);
    *inverse = d != 0.0f ? 1.0f / d : 0.0f;
    *min_out = min;
    return d;
}

/* The fifth bits of 32 levels as Q5_0/Q5_1 store them. */
static void put_fifth_bits(const int *q, uint8_t qh[4]) {
    uint32_t bits = 0;
    for (int j = 0; j < 32; j++) bits |= (uint32_t)(q[j] >> 4 & 1) << j;
    for (int i = 0; i < 4; i++) qh[i] = (uint8_t)(bits >> 8 * i);
}

static uint32_t get_fifth_bits(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

void mu_int_block_q4_1(const void *block, mu_int_block *out) {
    const mu_block_q4_1 *b = block;
    for (int j = 0; j < 16; j++) {
        out->q[j] = (int8_t)(b->qs[j] & 0x0F);
        out->q[j + 16] = (int8_t)(b->qs[j] >> 4);
    }
    out->scale[0] = out->scale[1] = mu_half_to_float(b->d);
    out->offset[0] = out->offset[1] = mu_half_to_float(b->m);
}

void mu_dequant_row_q4_1(const void *src, float *dst, int64_t n) {
    mu_dequant_via_ints(mu_int_block_q4_1, true, 32, sizeof(mu_block_q4_1), src, dst, n);
}

void mu_quant_row_q4_1(const float *src, void *dst, int64_t n) {
    mu_block_q4_1 *blocks = dst;
    for (int64_t b = 0; b < n / 32; b++, src += 32) {
        float min, inverse;
        blocks[b].d = mu_float_to_half_saturated(affine_block(src, 16, &min, &inverse));
        blocks[b].m = mu_float_to_half_saturated(min);
        for (int j = 0; j < 16; j++) {
            /* (x-min)*inverse is in [0, 15], so the cast truncates a positive value */
            int lo = clamp_to_int(truncf((src[j] - min) * inverse + 0.5f), 0, 15);
            int hi = clamp_to_int(truncf((src[j + 16] - min) * inverse + 0.5f), 0, 15);
            blocks[b].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

/* Q5_0's and Q5_1's 5-bit values: nibbles as Q4_0, fifth bits from qh. */
static void five_bit_values(const uint8_t qs[16], const uint8_t qh[4], int bias, int8_t *q) {
    const uint32_t h = get_fifth_bits(qh);
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(((qs[j] & 0x0F) | (int)(h >> j & 1) << 4) - bias);
        q[j + 16] = (int8_t)(((qs[j] >> 4) | (int)(h >> (j + 16) & 1) << 4) - bias);
    }
}

void mu_int_block_q5_1(const void *block, mu_int_block *out) {
    const mu_block_q5_1 *b = block;
    five_bit_values(b->qs, b->qh, 0, out->q);
    out->scale[0] = out->scale[1] = mu_half_to_float(b->d);
    out->offset[0] = out->offset[1] = mu_half_to_float(b->m);
}

void mu_dequant_row_q5_1(const void *src, float *dst, int64_t n) {
    mu_dequant_via_ints(mu_int_block_q5_1, true, 32, sizeof(mu_block_q5_1), src, dst, n);
}

void mu_quant_row_q5_1(const float *src, void *dst, int64_t n) {
    mu_block_q5_1 *blocks = dst;
    for (int64_t b = 0; b < n / 32; b++, src += 32) {
        float min, inverse;
        blocks[b].d = mu_float_to_half_saturated(affine_block(src, 32, &min, &inverse));
        blocks[b].m = mu_float_to_half_saturated(min);
        int q[32];
        for (int j = 0; j < 32; j++) q[j] = clamp_to_int(truncf((src[j] - min) * inverse + 0.5f), 0, 31);
        for (int j = 0; j < 16; j++) blocks[b].qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
        put_fifth_bits(q, blocks[b].qh);
    }
}

/* ---- Q5_0 ------------------------------------------------------------------
 *   offset 0  d       f16
 *   offset 2  qh[4]   fifth bits, as Q5_1
 *   offset 6  qs[16]  low 4 bits, as Q4_0
 *   y = (q - 16) * d,  q in 0..31
 */
void mu_int_block_q5_0(const void *block, mu_int_block *out) {
    const mu_block_q5_0 *b = block;
    five_bit_values(b->qs, b->qh, 16, out->q);
    out->scale[0] = out->scale[1] = mu_half_to_float(b->d);
}

void mu_dequant_row_q5_0(const void *src, float *dst, int64_t n) {
    mu_dequant_via_ints(mu_int_block_q5_0, false, 32, sizeof(mu_block_q5_0), src, dst, n);
}

void mu_quant_row_q5_0(const float *src, void *dst, int64_t n) {
    mu_block_q5_0 *blocks = dst;
    for (int64_t b = 0; b < n / 32; b++, src += 32) {
        /* as Q4_0: the signed max lands on the -16 end */
        const float d = mu_signed_absmax(src, 32) / -16.0f;
        const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
        blocks[b].d = mu_float_to_half_saturated(d);
        int q[32];
        for (int j = 0; j < 32; j++) q[j] = clamp_to_int(floorf(src[j] * inverse + 16.5f), 0, 31);
        for (int j = 0; j < 16; j++) blocks[b].qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
        put_fifth_bits(q, blocks[b].qh);
    }
}

/* ---- Q8_0 ------------------------------------------------------------------
 *   offset 0  d       f16
 *   offset 2  qs[32]  int8
 *   y = q * d
 */
void mu_int_block_q8_0(const void *block, mu_int_block *out) {
    const mu_block_q8_0 *b = block;
    memcpy(out->q, b->qs, 32);
    out->scale[0] = out->scale[1] = mu_half_to_float(b->d);
}

void mu_dequant_row_q8_0(const void *src, float *dst, int64_t n) {
    mu_dequant_via_ints(mu_int_block_q8_0, false, 32, sizeof(mu_block_q8_0), src, dst, n);
}

/* d = amax/127 and q = roundf(x/d), with 1/d taken before d is rounded to
 * f16 (as ggml does). Returns d (f32) and the sum of the q. */
static float quantize_block_q8(const float *x, int8_t *qs, int *sum) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    int total = 0;
    for (int j = 0; j < 32; j++) {
        int q = clamp_to_int(roundf(x[j] * inverse), -127, 127); /* clamps only NaN/inf input */
        qs[j] = (int8_t)q;
        total += q;
    }
    *sum = total;
    return d;
}

void mu_quant_row_q8_0(const float *src, void *dst, int64_t n) {
    mu_block_q8_0 *blocks = dst;
    for (int64_t b = 0; b < n / MU_QK8_0; b++, src += MU_QK8_0) {
        int sum;
        blocks[b].d = mu_float_to_half_saturated(quantize_block_q8(src, blocks[b].qs, &sum));
    }
}

/* ---- Q8_1 ------------------------------------------------------------------
 *   offset 0  d       f16
 *   offset 2  s       f16   d * sum(q)
 *   offset 4  qs[32]  int8
 *   y = q * d
 */
void mu_dequant_row_q8_1(const void *src, float *dst, int64_t n) {
    const mu_block_q8_1 *blocks = src;
    for (int64_t b = 0; b < n / MU_QK8_1; b++, dst += MU_QK8_1) {
        const float d = mu_half_to_float(blocks[b].d);
        for (int j = 0; j < MU_QK8_1; j++) dst[j] = (float)blocks[b].qs[j] * d;
    }
}

void mu_quant_row_q8_1(const float *src, void *dst, int64_t n) {
    mu_block_q8_1 *blocks = dst;
    for (int64_t b = 0; b < n / MU_QK8_1; b++, src += MU_QK8_1) {
        int sum;
        const float d = quantize_block_q8(src, blocks[b].qs, &sum);
        blocks[b].d = mu_float_to_half_saturated(d);
        blocks[b].s = mu_float_to_half_saturated((float)sum * d);
    }
}

/* ---- Q8_K (activations for K-quant dot products) ------------------------------
 *   offset 0    d          f32 (may be negative: it carries the sign of max)
 *   offset 4    qs[256]    int8
 *   offset 260  bsums[16]  int16, bsums[g] = sum of qs[16g .. 16g+15]
 *   y = d * q
 */
void mu_dequant_row_q8_K(const void *src, float *dst, int64_t n) {
    const mu_block_q8_K *blocks = src;
    for (int64_t b = 0; b < n / MU_QK_K; b++, dst += MU_QK_K) {
        for (int j = 0; j < MU_QK_K; j++) dst[j] = blocks[b].d * (float)blocks[b].qs[j];
    }
}

void mu_quant_row_q8_K(const float *src, void *dst, int64_t n) {
    mu_block_q8_K *blocks = dst;
    for (int64_t b = 0; b < n / MU_QK_K; b++, src += MU_QK_K) {
        mu_block_q8_K *out = &blocks[b];
        const float max = mu_signed_absmax(src, MU_QK_K);
        if (max == 0.0f) {
            memset(out, 0, sizeof *out);
            continue;
        }
        /* -127 rather than -128 keeps q symmetric, so -q never overflows int8 */
        const float iscale = -127.0f / max;
        for (int j = 0; j < MU_QK_K; j++) {
            int q = mu_nearest_int(iscale * src[j]);
            out->qs[j] = (int8_t)(q > 127 ? 127 : q < -128 ? -128 : q);
        }
        mu_q8_K_fill_bsums(out);
        out->d = 1.0f / iscale;
    }
}
