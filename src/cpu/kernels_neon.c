/* kernels_neon.c — AArch64 Advanced SIMD kernels. Written for clarity
 * rather than the last cycle: 16-weight groups as one uint8x16 vector, the
 * same group structure as the scalar references (kernels_scalar.c), so the
 * two agree to float rounding. Not run on this project's x86 machines; the
 * test tests/neon_cross.sh cross-compiles this file and runs the kernel
 * tests under qemu-aarch64 when a cross toolchain is installed.
 *
 * Integer dot products use SDOT (vdotq_s32) where the compiler targets the
 * dot-product extension (-march=armv8.2-a+dotprod and later), else
 * widening multiplies (vmull_s8) with pairwise adds, which every AArch64
 * core has. Entries not written here (prefill matmuls beyond a row-tiled
 * loop, exp, SwiGLU, softcap) stay the scalar ones. */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <string.h>

#include "cpu/kernels.h"

/* ---- small helpers ------------------------------------------------------- */

/* sum of 16 products of signed bytes, as one int32 */
static inline int32_t dot16(int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vaddvq_s32(vdotq_s32(vdupq_n_s32(0), a, b));
#else
    const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    const int16x8_t hi = vmull_high_s8(a, b);
    return vaddvq_s32(vaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)));
#endif
}

static inline float f16f(uint16_t h) { return mu_f16_to_f32(h); }

/* 16 unsigned byte values -> four float32x4 */
static inline void u8x16_to_f32(uint8x16_t q, float32x4_t out[4]) {
    const uint16x8_t lo = vmovl_u8(vget_low_u8(q)), hi = vmovl_u8(vget_high_u8(q));
    out[0] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo)));
    out[1] = vcvtq_f32_u32(vmovl_u16(vget_high_u16(lo)));
    out[2] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi)));
    out[3] = vcvtq_f32_u32(vmovl_u16(vget_high_u16(hi)));
}

/* acc += sum over 16 weights (q*s + o) * x */
static inline float32x4_t fma_group(float32x4_t acc, uint8x16_t q, float s, float o, const float *x) {
    float32x4_t f[4];
    u8x16_to_f32(q, f);
    for (int k = 0; k < 4; k++) acc = vfmaq_f32(acc, vfmaq_n_f32(vdupq_n_f32(o), f[k], s), vld1q_f32(x + 4 * k));
    return acc;
}

/* ---- K-quant groups: the 16 values (unsigned) of group g of a block ----- *
 * Q4_K: chunk g/4, bytes 16*(g&1).., low nibbles for g%4 < 2; sub-block g/2.
 * Q5_K: plus bit g/2 of qh as 16. Q6_K: half g/8, quarter (g/2)%4. */

static inline uint8x16_t grp_q4_K(const mu_block_q4_K *b, int g) {
    const uint8x16_t q = vld1q_u8(b->qs + 32 * (g / 4) + 16 * (g & 1));
    return g & 2 ? vshrq_n_u8(q, 4) : vandq_u8(q, vdupq_n_u8(0x0F));
}

static inline uint8x16_t grp_q5_K(const mu_block_q5_K *b, int g) {
    const uint8x16_t q = vld1q_u8(b->qs + 32 * (g / 4) + 16 * (g & 1));
    const uint8x16_t lo = g & 2 ? vshrq_n_u8(q, 4) : vandq_u8(q, vdupq_n_u8(0x0F));
    const uint8x16_t h = vld1q_u8(b->qh + 16 * (g & 1));
    const uint8x16_t bit = vandq_u8(vshlq_u8(h, vdupq_n_s8((int8_t)-(g / 2))), vdupq_n_u8(1));
    return vorrq_u8(lo, vshlq_n_u8(bit, 4));
}

static inline uint8x16_t grp_q6_K(const mu_block_q6_K *b, int g) {
    const int h = g / 8, k = (g / 2) % 4, l0 = 16 * (g & 1);
    const uint8x16_t q = vld1q_u8(b->ql + 64 * h + l0 + 32 * (k & 1));
    const uint8x16_t lo = k & 2 ? vshrq_n_u8(q, 4) : vandq_u8(q, vdupq_n_u8(0x0F));
    const uint8x16_t hb = vandq_u8(vshlq_u8(vld1q_u8(b->qh + 32 * h + l0), vdupq_n_s8((int8_t)(-2 * k))), vdupq_n_u8(3));
    return vorrq_u8(lo, vshlq_n_u8(hb, 4));
}

/* Per-group scale and offset of the exact lane (weight = q*s + o) and the
 * integer sub-scale and min of the fast lane. */
typedef struct kgroups {
    float s[16], o[16]; /* exact lane */
    int32_t isc[16];    /* fast lane: integer scale per group */
    float dmin_m[16];   /* fast lane: offset weight per group (applied to ds) */
    float d;            /* fast lane: block scale */
} kgroups;

static void groups_k4(uint16_t d16, uint16_t dmin16, const uint8_t *scales, kgroups *c) {
    const float d = f16f(d16), dmin = f16f(dmin16);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        mu_get_scale_min_k4(j, scales, &sc, &m);
        for (int h = 0; h < 2; h++) {
            c->s[2 * j + h] = d * sc;
            c->o[2 * j + h] = -dmin * m;
            c->isc[2 * j + h] = sc;
            c->dmin_m[2 * j + h] = dmin * m;
        }
    }
    c->d = d;
}

static void groups_q4_K(const void *blk, kgroups *c) {
    const mu_block_q4_K *b = blk;
    groups_k4(b->d, b->dmin, b->scales, c);
}
static void groups_q5_K(const void *blk, kgroups *c) {
    const mu_block_q5_K *b = blk;
    groups_k4(b->d, b->dmin, b->scales, c);
}
static void groups_q6_K(const void *blk, kgroups *c) {
    const mu_block_q6_K *b = blk;
    const float d = f16f(b->d);
    for (int g = 0; g < 16; g++) {
        c->s[g] = d * b->scales[g];
        c->o[g] = -32.0f * c->s[g];
        c->isc[g] = b->scales[g];
        c->dmin_m[g] = 32.0f * d * b->scales[g]; /* the -32 offset, through ds */
    }
    c->d = d;
}

static uint8x16_t grp_any(uint32_t type, const void *blk, int g) {
    switch (type) {
    case MU_TYPE_Q4_K: return grp_q4_K(blk, g);
    case MU_TYPE_Q5_K: return grp_q5_K(blk, g);
    default: return grp_q6_K(blk, g);
    }
}

static void groups_any(uint32_t type, const void *blk, kgroups *c) {
    if (type == MU_TYPE_Q4_K) groups_q4_K(blk, c);
    else if (type == MU_TYPE_Q5_K) groups_q5_K(blk, c);
    else groups_q6_K(blk, c);
}

/* ---- exact lane ---------------------------------------------------------- */

static void matvec_kq(uint32_t type, const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) {
    const int64_t nb = n / MU_QK_K;
    const uint64_t bb = (uint64_t)mu_type_get(type)->block_bytes;
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *row = (const uint8_t *)w + (uint64_t)r * rb;
        float32x4_t acc0 = vdupq_n_f32(0), acc1 = vdupq_n_f32(0);
        for (int64_t i = 0; i < nb; i++) {
            const void *blk = row + i * bb;
            kgroups c;
            groups_any(type, blk, &c);
            for (int g = 0; g < 16; g += 2) {
                acc0 = fma_group(acc0, grp_any(type, blk, g), c.s[g], c.o[g], x + i * MU_QK_K + 16 * g);
                acc1 = fma_group(acc1, grp_any(type, blk, g + 1), c.s[g + 1], c.o[g + 1], x + i * MU_QK_K + 16 * g + 16);
            }
        }
        y[r] = vaddvq_f32(vaddq_f32(acc0, acc1));
    }
}

static void matvec_f32_Q4_K(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) {
    matvec_kq(MU_TYPE_Q4_K, w, rb, nr, x, n, y);
}
static void matvec_f32_Q5_K(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) {
    matvec_kq(MU_TYPE_Q5_K, w, rb, nr, x, n, y);
}
static void matvec_f32_Q6_K(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) {
    matvec_kq(MU_TYPE_Q6_K, w, rb, nr, x, n, y);
}

/* 32-element formats: signed bytes of a block (Q4_0: nibble - 8) */
static inline int8x16x2_t q32_bytes(uint32_t type, const uint8_t *blk) {
    int8x16x2_t v;
    if (type == MU_TYPE_Q8_0) {
        v.val[0] = vld1q_s8((const int8_t *)(blk + 2));
        v.val[1] = vld1q_s8((const int8_t *)(blk + 18));
    } else {
        const uint8x16_t q = vld1q_u8(blk + 2);
        v.val[0] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
        v.val[1] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
    }
    return v;
}

static void matvec_32(uint32_t type, const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) {
    const uint64_t bb = (uint64_t)mu_type_get(type)->block_bytes;
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *row = (const uint8_t *)w + (uint64_t)r * rb;
        float32x4_t acc = vdupq_n_f32(0);
        for (int64_t i = 0; i < n / 32; i++) {
            const uint8_t *blk = row + i * bb;
            uint16_t d16;
            memcpy(&d16, blk, 2);
            const int8x16x2_t q = q32_bytes(type, blk);
            float32x4_t s = vdupq_n_f32(0);
            for (int h = 0; h < 2; h++) {
                const int16x8_t lo = vmovl_s8(vget_low_s8(q.val[h])), hi = vmovl_s8(vget_high_s8(q.val[h]));
                const float *xb = x + 32 * i + 16 * h;
                s = vfmaq_f32(s, vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), vld1q_f32(xb));
                s = vfmaq_f32(s, vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), vld1q_f32(xb + 4));
                s = vfmaq_f32(s, vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), vld1q_f32(xb + 8));
                s = vfmaq_f32(s, vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), vld1q_f32(xb + 12));
            }
            acc = vfmaq_n_f32(acc, s, f16f(d16));
        }
        y[r] = vaddvq_f32(acc);
    }
}

static void matvec_f32_Q8_0(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) {
    matvec_32(MU_TYPE_Q8_0, w, rb, nr, x, n, y);
}
static void matvec_f32_Q4_0(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) {
    matvec_32(MU_TYPE_Q4_0, w, rb, nr, x, n, y);
}

/* float weights: four f32 lanes at a time, scalar tail */
static inline float32x4_t load4(uint32_t type, const void *row, int64_t i) {
    if (type == MU_TYPE_F32) return vld1q_f32((const float *)row + i);
    const uint16x4_t h = vld1_u16((const uint16_t *)row + i);
    if (type == MU_TYPE_F16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16)); /* bf16 */
}

static void matvec_float(uint32_t type, const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) {
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *row = (const uint8_t *)w + (uint64_t)r * rb;
        float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0);
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            a0 = vfmaq_f32(a0, load4(type, row, i), vld1q_f32(x + i));
            a1 = vfmaq_f32(a1, load4(type, row, i + 4), vld1q_f32(x + i + 4));
        }
        float sum = vaddvq_f32(vaddq_f32(a0, a1));
        for (; i < n; i++) {
            float wv;
            if (type == MU_TYPE_F32) wv = ((const float *)row)[i];
            else if (type == MU_TYPE_F16) wv = f16f(((const uint16_t *)row)[i]);
            else wv = mu_bf16_to_f32(((const uint16_t *)row)[i]);
            sum += wv * x[i];
        }
        y[r] = sum;
    }
}

static void matvec_f32_F32(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) {
    matvec_float(MU_TYPE_F32, w, rb, nr, x, n, y);
}
static void matvec_f32_F16(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) {
    matvec_float(MU_TYPE_F16, w, rb, nr, x, n, y);
}
static void matvec_f32_BF16(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) {
    matvec_float(MU_TYPE_BF16, w, rb, nr, x, n, y);
}

/* ---- fast lane: int8 activations in groups of 16 (kernels.h) ------------- */

static void matvec_q8_kq(uint32_t type, const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {
    const int64_t nb = n / MU_QK_K;
    const uint64_t bb = (uint64_t)mu_type_get(type)->block_bytes;
    const int8_t *aq = xq;
    const float *ad = mu_act_d(xq, n), *ads = mu_act_ds(xq, n);
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *row = (const uint8_t *)w + (uint64_t)r * rb;
        float sum = 0.0f;
        for (int64_t i = 0; i < nb; i++) {
            const void *blk = row + i * bb;
            kgroups c;
            groups_any(type, blk, &c);
            float isum = 0.0f, offs = 0.0f;
            for (int g = 0; g < 16; g++) {
                /* values <= 63 fit a signed byte */
                const int32_t s = dot16(vreinterpretq_s8_u8(grp_any(type, blk, g)), vld1q_s8(aq + i * MU_QK_K + 16 * g));
                isum += ad[16 * i + g] * (float)(c.isc[g] * s);
                offs += c.dmin_m[g] * ads[16 * i + g];
            }
            sum += c.d * isum - offs;
        }
        y[r] = sum;
    }
}

static void matvec_q8_Q4_K(const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {
    matvec_q8_kq(MU_TYPE_Q4_K, w, rb, nr, xq, n, y);
}
static void matvec_q8_Q5_K(const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {
    matvec_q8_kq(MU_TYPE_Q5_K, w, rb, nr, xq, n, y);
}
static void matvec_q8_Q6_K(const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {
    matvec_q8_kq(MU_TYPE_Q6_K, w, rb, nr, xq, n, y);
}

static void matvec_q8_32(uint32_t type, const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {
    const uint64_t bb = (uint64_t)mu_type_get(type)->block_bytes;
    const int8_t *aq = xq;
    const float *ad = mu_act_d(xq, n);
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *row = (const uint8_t *)w + (uint64_t)r * rb;
        float sum = 0.0f;
        for (int64_t i = 0; i < n / 32; i++) {
            const uint8_t *blk = row + i * bb;
            uint16_t d16;
            memcpy(&d16, blk, 2);
            const int8x16x2_t q = q32_bytes(type, blk);
            const int32_t s0 = dot16(q.val[0], vld1q_s8(aq + 32 * i)), s1 = dot16(q.val[1], vld1q_s8(aq + 32 * i + 16));
            sum += f16f(d16) * (ad[2 * i] * (float)s0 + ad[2 * i + 1] * (float)s1);
        }
        y[r] = sum;
    }
}

static void matvec_q8_Q8_0(const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {
    matvec_q8_32(MU_TYPE_Q8_0, w, rb, nr, xq, n, y);
}
static void matvec_q8_Q4_0(const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {
    matvec_q8_32(MU_TYPE_Q4_0, w, rb, nr, xq, n, y);
}

/* Per group of 16: iscale = 127/amax, q = nearest-even (vcvtnq), d =
 * 1/iscale, ds = d * sum(q): bit-identical to the scalar quantizer. */
static void quantize_act(const float *x, void *dst, int64_t n) {
    int8_t *qs = dst;
    float *d = (float *)mu_act_d(dst, n), *ds = (float *)mu_act_ds(dst, n);
    for (int64_t g = 0; g < n / MU_ACT_GROUP; g++) {
        const float *xg = x + 16 * g;
        float32x4_t v[4];
        float32x4_t m = vdupq_n_f32(0);
        for (int k = 0; k < 4; k++) {
            v[k] = vld1q_f32(xg + 4 * k);
            m = vmaxq_f32(m, vabsq_f32(v[k]));
        }
        const float amax = vmaxvq_f32(m);
        if (amax == 0.0f) {
            memset(qs + 16 * g, 0, 16);
            d[g] = ds[g] = 0.0f;
            continue;
        }
        const float iscale = 127.0f / amax;
        int32x4_t q[4];
        for (int k = 0; k < 4; k++) q[k] = vcvtnq_s32_f32(vmulq_n_f32(v[k], iscale));
        const int16x8_t q01 = vcombine_s16(vqmovn_s32(q[0]), vqmovn_s32(q[1]));
        const int16x8_t q23 = vcombine_s16(vqmovn_s32(q[2]), vqmovn_s32(q[3]));
        vst1q_s8(qs + 16 * g, vcombine_s8(vqmovn_s16(q01), vqmovn_s16(q23)));
        const int32_t sum = vaddvq_s32(vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3])));
        d[g] = 1.0f / iscale;
        ds[g] = d[g] * (float)sum;
    }
}

/* ---- prefill: row tiles of 16 that stay in cache across the tokens ------- */

#define ROW_TILE 16
#define NEON_MATMULS(T)                                                                                          \
    static void matmul_f32_##T(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, int64_t nt,    \
                               float *y, int64_t ldy) {                                                        \
        for (int64_t r0 = 0; r0 < nr; r0 += ROW_TILE)                                                          \
            for (int64_t t = 0; t < nt; t++)                                                                   \
                matvec_f32_##T((const uint8_t *)w + (uint64_t)r0 * rb, rb, nr - r0 < ROW_TILE ? nr - r0 : ROW_TILE, \
                               x + t * n, n, y + t * ldy + r0);                                                \
    }
#define NEON_MATMULS_Q8(T)                                                                                       \
    static void matmul_q8_##T(const void *w, uint64_t rb, int64_t nr, const void *xq, uint64_t xb, int64_t n,   \
                              int64_t nt, float *y, int64_t ldy) {                                             \
        for (int64_t r0 = 0; r0 < nr; r0 += ROW_TILE)                                                          \
            for (int64_t t = 0; t < nt; t++)                                                                   \
                matvec_q8_##T((const uint8_t *)w + (uint64_t)r0 * rb, rb, nr - r0 < ROW_TILE ? nr - r0 : ROW_TILE, \
                              (const uint8_t *)xq + (uint64_t)t * xb, n, y + t * ldy + r0);                    \
    }
NEON_MATMULS(F32)
NEON_MATMULS(F16)
NEON_MATMULS(BF16)
NEON_MATMULS(Q8_0)
NEON_MATMULS(Q4_0)
NEON_MATMULS(Q4_K)
NEON_MATMULS(Q5_K)
NEON_MATMULS(Q6_K)
NEON_MATMULS_Q8(Q8_0)
NEON_MATMULS_Q8(Q4_0)
NEON_MATMULS_Q8(Q4_K)
NEON_MATMULS_Q8(Q5_K)
NEON_MATMULS_Q8(Q6_K)

/* ---- attention helpers ----------------------------------------------------- */

static void cvt_f16(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(src + i))));
    for (; i < n; i++) dst[i] = f16f(src[i]);
}

static float dot_f32(const float *a, const float *b, int n) {
    float32x4_t s0 = vdupq_n_f32(0), s1 = vdupq_n_f32(0);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
        s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
    }
    float sum = vaddvq_f32(vaddq_f32(s0, s1));
    for (; i < n; i++) sum += a[i] * b[i];
    return sum;
}

static void attn_scores(const float *q, int nq, const float *k, int64_t ldk, int nrows, int hd, float scale, float *s,
                        int lds) {
    for (int h = 0; h < nq; h++)
        for (int r = 0; r < nrows; r++) s[(int64_t)h * lds + r] = dot_f32(q + (int64_t)h * hd, k + r * ldk, hd) * scale;
}

static void attn_pv(const float *p, int nq, int ldp, const float *v, int64_t ldv, int nrows, int hd, float *acc) {
    for (int h = 0; h < nq; h++) {
        float *out = acc + (int64_t)h * hd;
        for (int r = 0; r < nrows; r++) {
            const float wgt = p[(int64_t)h * ldp + r];
            const float *vr = v + r * ldv;
            int e = 0;
            for (; e + 4 <= hd; e += 4) vst1q_f32(out + e, vfmaq_n_f32(vld1q_f32(out + e), vld1q_f32(vr + e), wgt));
            for (; e < hd; e++) out[e] += wgt * vr[e];
        }
    }
}

const mu_cpu_kernels *mu_cpu_kernels_neon(void) {
    static mu_cpu_kernels table;
    if (table.isa) return &table;
    table = *mu_cpu_kernels_scalar();
    MU_KERNELS_SET_FORMATS(&table);
    table.quantize_act = quantize_act;
    table.cvt_f16 = cvt_f16;
    table.attn_scores = attn_scores;
    table.attn_pv = attn_pv;
    table.isa = "neon";
    return &table;
}
#else
typedef int mu_no_neon; /* not an AArch64 target */
#endif
