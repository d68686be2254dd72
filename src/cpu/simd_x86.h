/* simd_x86.h — a small ISA-neutral vector vocabulary for the x86 kernels.
 *
 * The kernels in kernels_x86.h are written once against these types and
 * compiled three times (kernels_avx2.c, kernels_avx512bw.c,
 * kernels_avx512.c). Every type is 512 bits wide:
 *
 *   vf   16 floats
 *   vi   64 bytes: 64 x u8/s8, 32 x s16 or 16 x s32 depending on the op
 *
 * AVX-512 maps each to one zmm register. AVX2 maps each to a pair of ymm
 * registers (lo = elements 0..7 / bytes 0..31, hi = the rest), so code
 * written here runs unchanged at half the width. Ops that exist only as
 * a sequence on one ISA (VNNI's dpwssd/dpbusd, masked zeroing) say so.
 *
 * The one 256-bit helper, s8_dot32, serves the 32-element formats
 * (Q8_0, Q4_0), whose blocks are exactly one ymm.
 *
 * Include after the target flags are set; MU_X86_512 selects AVX-512.
 */
#ifndef MU_SIMD_X86_H
#define MU_SIMD_X86_H

#include <immintrin.h>
#include <stdint.h>

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define MU_X86_512 1
#else
#define MU_X86_512 0
#endif

#define MU_INLINE static inline __attribute__((always_inline))
/* Full unrolling of the short fixed loops (groups of a block, units,
 * tokens of a register tile) turns their indices into constants; -O2 does
 * not do it by itself. */
#define MU_PRAGMA(x) _Pragma(#x)
#define MU_UNROLL(n) MU_PRAGMA(GCC unroll n)

/* sum of the 8 floats of a ymm register (both ISAs) */
MU_INLINE float hsum256(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* sum of the 8 int32 of a ymm register, wrapping (both ISAs) */
MU_INLINE int32_t hsum256_epi32(__m256i a) {
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
    return _mm_cvtsi128_si32(t);
}

/* ===================================================================== */
#if MU_X86_512

typedef __m512 vf;
typedef __m512i vi;

MU_INLINE vf vf_zero(void) { return _mm512_setzero_ps(); }
MU_INLINE vf vf_set1(float a) { return _mm512_set1_ps(a); }
MU_INLINE vf vf_load(const float *p) { return _mm512_loadu_ps(p); }
MU_INLINE void vf_store(float *p, vf a) { _mm512_storeu_ps(p, a); }
MU_INLINE vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
MU_INLINE vf vf_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
MU_INLINE vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
MU_INLINE vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }
MU_INLINE vf vf_min(vf a, vf b) { return _mm512_min_ps(a, b); }
MU_INLINE vf vf_div(vf a, vf b) { return _mm512_div_ps(a, b); }
MU_INLINE vf vf_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); } /* a*b + c */
MU_INLINE vf vf_abs(vf a) { return _mm512_abs_ps(a); }
/* 1.0 in lanes where a < 0, else 0.0 */
MU_INLINE vf vf_negative_mask(vf a) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_LT_OQ), _mm512_set1_ps(1.0f));
}
MU_INLINE float vf_hsum(vf a) { return _mm512_reduce_add_ps(a); }
MU_INLINE float vf_hmax(vf a) { return _mm512_reduce_max_ps(a); }
MU_INLINE vf vf_from_i32(vi a) { return _mm512_cvtepi32_ps(a); }
/* 16 halves -> 16 floats */
MU_INLINE vf vf_from_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
/* 16 bf16 -> 16 floats (bf16 is the top half of an f32) */
MU_INLINE vf vf_from_bf16(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
/* 16 bytes -> 16 int32, zero- or sign-extended */
MU_INLINE vi vi_from_u8x16(const void *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)); }
MU_INLINE vi vi_from_s8x16(const void *p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)); }
MU_INLINE vi vi_from_s8_m128(__m128i b) { return _mm512_cvtepi8_epi32(b); }
/* 16 x s16 -> 16 int32 */
MU_INLINE vi vi_from_s16x16(__m256i a) { return _mm512_cvtepi16_epi32(a); }
/* round to nearest (ties to even) and convert */
MU_INLINE vi vf_to_i32(vf a) { return _mm512_cvtps_epi32(a); }
MU_INLINE vf vf_round_trunc(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
MU_INLINE vf vf_round_nearest(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* a * 2^k for integral float k (handles the whole exponent range) */
MU_INLINE vf vf_scale2(vf a, vf k) { return _mm512_scalef_ps(a, k); }
/* lanes where x < t become 0 */
MU_INLINE vf vf_zero_below(vf a, vf x, vf t) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, t, _CMP_GE_OQ), a); }
/* lanes where |a| >= 0.5 get sign(a) added (for round-half-away) */
MU_INLINE vf vf_copysign1_if_half(vf t, vf frac, vf a) {
    __mmask16 m = _mm512_cmp_ps_mask(_mm512_abs_ps(frac), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    vf one = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(_mm512_set1_ps(1.0f)),
                                                 _mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32((int)0x80000000u))));
    return _mm512_mask_add_ps(t, m, t, one);
}
/* bit i set where lane i equals v */
MU_INLINE unsigned vf_eq_mask(vf a, float v) { return (unsigned)_mm512_cmp_ps_mask(a, _mm512_set1_ps(v), _CMP_EQ_OQ); }

MU_INLINE vi vi_zero(void) { return _mm512_setzero_si512(); }
MU_INLINE vi vi_load(const void *p) { return _mm512_loadu_si512(p); }
MU_INLINE void vi_store(void *p, vi a) { _mm512_storeu_si512(p, a); }
/* 32 bytes at p0 in the low half, 32 bytes at p1 in the high half */
MU_INLINE vi vi_load2x32(const void *p0, const void *p1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0)),
                              _mm256_loadu_si256((const __m256i *)p1), 1);
}
/* the same 32 bytes in both halves */
MU_INLINE vi vi_bcast32(const void *p) { return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p)); }
MU_INLINE vi vi_set1_8(int8_t b) { return _mm512_set1_epi8(b); }
MU_INLINE vi vi_set1_32(int32_t b) { return _mm512_set1_epi32(b); }
MU_INLINE vi vi_and(vi a, vi b) { return _mm512_and_si512(a, b); }
MU_INLINE vi vi_or(vi a, vi b) { return _mm512_or_si512(a, b); }
MU_INLINE vi vi_xor(vi a, vi b) { return _mm512_xor_si512(a, b); }
MU_INLINE vi vi_add32(vi a, vi b) { return _mm512_add_epi32(a, b); }
MU_INLINE vi vi_sub32(vi a, vi b) { return _mm512_sub_epi32(a, b); }
MU_INLINE vi vi_srli32(vi a, int s) { return _mm512_srli_epi32(a, (unsigned)s); }
MU_INLINE vi vi_slli32(vi a, int s) { return _mm512_slli_epi32(a, (unsigned)s); }
/* 16-bit logical shifts by a different count in each 32-byte half */
MU_INLINE vi vi_srl16_halves(vi a, int s_lo, int s_hi) {
    return _mm512_srlv_epi16(a, _mm512_inserti64x4(_mm512_set1_epi16((short)s_lo), _mm256_set1_epi16((short)s_hi), 1));
}
MU_INLINE vi vi_sll16_halves(vi a, int s_lo, int s_hi) {
    return _mm512_sllv_epi16(a, _mm512_inserti64x4(_mm512_set1_epi16((short)s_lo), _mm256_set1_epi16((short)s_hi), 1));
}
/* u8 x s8 pairs summed into s16 (saturating; our operands never saturate:
 * |u| <= 63 or |u| <= 128 with |s| <= 127) */
MU_INLINE vi vi_maddubs(vi u, vi s) { return _mm512_maddubs_epi16(u, s); }
MU_INLINE vi vi_madd16(vi a, vi b) { return _mm512_madd_epi16(a, b); }
#if defined(__AVX512VNNI__)
/* acc + s16 x s16 pairs summed into s32 */
MU_INLINE vi vi_dpwssd(vi acc, vi a, vi b) { return _mm512_dpwssd_epi32(acc, a, b); }
#else
MU_INLINE vi vi_dpwssd(vi acc, vi a, vi b) { return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b)); }
#endif
/* wrapping adds: gcc's _mm512_reduce_add_epi32 is C arithmetic, undefined
 * (and reported by UBSan) when non-finite activations quantize to INT_MIN */
MU_INLINE int32_t vi_hsum32(vi a) {
    return hsum256_epi32(_mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1)));
}
/* s16 lanes of the 8 x s16 vector s: 16 copies of s[k0], then 16 of s[k1] */
MU_INLINE vi vi_spread16x2(__m128i s, int k0, int k1) {
    const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi16((short)k0), _mm256_set1_epi16((short)k1), 1);
    return _mm512_permutexvar_epi16(idx, _mm512_castsi128_si512(s));
}
/* s16 lanes of the 16 x s16 vector s: 8 copies each of s[g], s[g+1], s[g+2], s[g+3] */
MU_INLINE vi vi_spread8x4(__m256i s, int g) {
    const __m512i idx = _mm512_set_epi16(g + 3, g + 3, g + 3, g + 3, g + 3, g + 3, g + 3, g + 3, g + 2, g + 2, g + 2,
                                         g + 2, g + 2, g + 2, g + 2, g + 2, g + 1, g + 1, g + 1, g + 1, g + 1, g + 1,
                                         g + 1, g + 1, g, g, g, g, g, g, g, g);
    return _mm512_permutexvar_epi16(idx, _mm512_castsi256_si512(s));
}
/* 8 x s32 in the low lanes, zeros above */
MU_INLINE vi vi_from_i32x8(__m256i a) { return _mm512_zextsi256_si512(a); }
/* 8 copies of s[j0] then 8 of s[j1] */
MU_INLINE vf vf_spread8x2(__m256 s, int j0, int j1) {
    return _mm512_permutexvar_ps(_mm512_inserti64x4(_mm512_set1_epi32(j0), _mm256_set1_epi32(j1), 1),
                                 _mm512_castps256_ps512(s));
}
/* 4 copies each of s[g], s[g+1], s[g+2], s[g+3] (g a multiple of 4) */
MU_INLINE vf vf_spread4x4(vf s, int g) {
    return _mm512_permutexvar_ps(_mm512_setr_epi32(g, g, g, g, g + 1, g + 1, g + 1, g + 1, g + 2, g + 2, g + 2, g + 2,
                                                   g + 3, g + 3, g + 3, g + 3),
                                 s);
}
/* lanes k = x[4k + b] for k < 16 (a stride-4 gather from 64 floats) */
MU_INLINE vf vf_stride4(const float *x, int b) {
    const __m512i idx = _mm512_setr_epi32(b, 4 + b, 8 + b, 12 + b, 16 + b, 20 + b, 24 + b, 28 + b, b, 4 + b, 8 + b,
                                          12 + b, 16 + b, 20 + b, 24 + b, 28 + b);
    const __m512 lo = _mm512_permutex2var_ps(_mm512_loadu_ps(x), idx, _mm512_loadu_ps(x + 16));
    const __m512 hi = _mm512_permutex2var_ps(_mm512_loadu_ps(x + 32), idx, _mm512_loadu_ps(x + 48));
    return _mm512_shuffle_f32x4(lo, hi, 0x44); /* low 256 bits of each */
}
/* 16 int32 -> 16 saturated int8 */
MU_INLINE __m128i vi_pack_s8(vi a) { return _mm512_cvtsepi32_epi8(a); }

/* acc + 4 adjacent u8 x s8 products summed into each s32 lane (VNNI's
 * vpdpbusd; else maddubs + madd, exact for our operands: u <= 63,
 * |s| <= 127, so no s16 pair saturates) */
#if defined(__AVX512VNNI__)
MU_INLINE vi vi_dpbusd(vi acc, vi u, vi s) { return _mm512_dpbusd_epi32(acc, u, s); }
#else
MU_INLINE vi vi_dpbusd(vi acc, vi u, vi s) {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
}
#endif
/* interleaves of 32- and 64-bit elements within each 128-bit lane */
MU_INLINE vi vi_unpacklo32(vi a, vi b) { return _mm512_unpacklo_epi32(a, b); }
MU_INLINE vi vi_unpackhi32(vi a, vi b) { return _mm512_unpackhi_epi32(a, b); }
MU_INLINE vi vi_unpacklo64(vi a, vi b) { return _mm512_unpacklo_epi64(a, b); }
MU_INLINE vi vi_unpackhi64(vi a, vi b) { return _mm512_unpackhi_epi64(a, b); }
/* c - a*b */
MU_INLINE vf vf_fnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
/* 16 bytes in a register -> 16 floats, zero- or sign-extended */
MU_INLINE vf vf_from_u8_128(__m128i b) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b)); }
MU_INLINE vf vf_from_s8_128(__m128i b) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)); }

/* ===================================================================== */
#else /* AVX2 + FMA: each 512-bit value is a pair of ymm registers */

typedef struct { __m256 lo, hi; } vf;
typedef struct { __m256i lo, hi; } vi;

#define VF2(expr_lo, expr_hi) ((vf){(expr_lo), (expr_hi)})
#define VI2(expr_lo, expr_hi) ((vi){(expr_lo), (expr_hi)})

MU_INLINE vf vf_zero(void) { return VF2(_mm256_setzero_ps(), _mm256_setzero_ps()); }
MU_INLINE vf vf_set1(float a) { return VF2(_mm256_set1_ps(a), _mm256_set1_ps(a)); }
MU_INLINE vf vf_load(const float *p) { return VF2(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)); }
MU_INLINE void vf_store(float *p, vf a) {
    _mm256_storeu_ps(p, a.lo);
    _mm256_storeu_ps(p + 8, a.hi);
}
MU_INLINE vf vf_add(vf a, vf b) { return VF2(_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)); }
MU_INLINE vf vf_sub(vf a, vf b) { return VF2(_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)); }
MU_INLINE vf vf_mul(vf a, vf b) { return VF2(_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)); }
MU_INLINE vf vf_max(vf a, vf b) { return VF2(_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)); }
MU_INLINE vf vf_min(vf a, vf b) { return VF2(_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)); }
MU_INLINE vf vf_div(vf a, vf b) { return VF2(_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)); }
MU_INLINE vf vf_fma(vf a, vf b, vf c) { return VF2(_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)); }
MU_INLINE vf vf_abs(vf a) {
    const __m256 m = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    return VF2(_mm256_and_ps(a.lo, m), _mm256_and_ps(a.hi, m));
}
MU_INLINE float vf_hsum(vf a) { return hsum256(_mm256_add_ps(a.lo, a.hi)); }
MU_INLINE vf vf_negative_mask(vf a) {
    const __m256 z = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    return VF2(_mm256_and_ps(_mm256_cmp_ps(a.lo, z, _CMP_LT_OQ), one), _mm256_and_ps(_mm256_cmp_ps(a.hi, z, _CMP_LT_OQ), one));
}
MU_INLINE float vf_hmax(vf a) {
    __m256 m = _mm256_max_ps(a.lo, a.hi);
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
MU_INLINE vf vf_from_i32(vi a) { return VF2(_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)); }
MU_INLINE vf vf_from_f16(const uint16_t *p) {
    return VF2(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 8))));
}
MU_INLINE __m256 bf16x8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
MU_INLINE vf vf_from_bf16(const uint16_t *p) { return VF2(bf16x8(p), bf16x8(p + 8)); }
MU_INLINE vi vi_from_u8x16(const void *p) {
    __m128i b = _mm_loadu_si128((const __m128i *)p);
    return VI2(_mm256_cvtepu8_epi32(b), _mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)));
}
MU_INLINE vi vi_from_s8_m128(__m128i b) {
    return VI2(_mm256_cvtepi8_epi32(b), _mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
}
MU_INLINE vi vi_from_s8x16(const void *p) { return vi_from_s8_m128(_mm_loadu_si128((const __m128i *)p)); }
MU_INLINE vi vf_to_i32(vf a) { return VI2(_mm256_cvtps_epi32(a.lo), _mm256_cvtps_epi32(a.hi)); }
MU_INLINE vi vi_from_s16x16(__m256i a) {
    return VI2(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(a)), _mm256_cvtepi16_epi32(_mm256_extracti128_si256(a, 1)));
}
MU_INLINE vf vf_round_trunc(vf a) {
    return VF2(_mm256_round_ps(a.lo, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC),
               _mm256_round_ps(a.hi, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
}
MU_INLINE vf vf_round_nearest(vf a) {
    return VF2(_mm256_round_ps(a.lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
               _mm256_round_ps(a.hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* a * 2^k, for k in [-126, 127] (callers clamp) */
MU_INLINE __m256 scale2_256(__m256 a, __m256 k) {
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(a, _mm256_castsi256_ps(e));
}
MU_INLINE vf vf_scale2(vf a, vf k) { return VF2(scale2_256(a.lo, k.lo), scale2_256(a.hi, k.hi)); }
MU_INLINE vf vf_zero_below(vf a, vf x, vf t) {
    return VF2(_mm256_and_ps(a.lo, _mm256_cmp_ps(x.lo, t.lo, _CMP_GE_OQ)),
               _mm256_and_ps(a.hi, _mm256_cmp_ps(x.hi, t.hi, _CMP_GE_OQ)));
}
MU_INLINE __m256 copysign1_if_half_256(__m256 t, __m256 frac, __m256 a) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 m = _mm256_cmp_ps(_mm256_and_ps(frac, absmask), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_andnot_ps(absmask, a));
    return _mm256_add_ps(t, _mm256_and_ps(m, one));
}
MU_INLINE vf vf_copysign1_if_half(vf t, vf frac, vf a) {
    return VF2(copysign1_if_half_256(t.lo, frac.lo, a.lo), copysign1_if_half_256(t.hi, frac.hi, a.hi));
}
MU_INLINE unsigned vf_eq_mask(vf a, float v) {
    const __m256 b = _mm256_set1_ps(v);
    return (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(a.lo, b, _CMP_EQ_OQ)) |
           (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(a.hi, b, _CMP_EQ_OQ)) << 8;
}

MU_INLINE vi vi_zero(void) { return VI2(_mm256_setzero_si256(), _mm256_setzero_si256()); }
MU_INLINE vi vi_load(const void *p) {
    return VI2(_mm256_loadu_si256((const __m256i *)p), _mm256_loadu_si256((const __m256i *)((const uint8_t *)p + 32)));
}
MU_INLINE void vi_store(void *p, vi a) {
    _mm256_storeu_si256((__m256i *)p, a.lo);
    _mm256_storeu_si256((__m256i *)((uint8_t *)p + 32), a.hi);
}
MU_INLINE vi vi_load2x32(const void *p0, const void *p1) {
    return VI2(_mm256_loadu_si256((const __m256i *)p0), _mm256_loadu_si256((const __m256i *)p1));
}
MU_INLINE vi vi_bcast32(const void *p) {
    __m256i v = _mm256_loadu_si256((const __m256i *)p);
    return VI2(v, v);
}
MU_INLINE vi vi_set1_8(int8_t b) { return VI2(_mm256_set1_epi8(b), _mm256_set1_epi8(b)); }
MU_INLINE vi vi_set1_32(int32_t b) { return VI2(_mm256_set1_epi32(b), _mm256_set1_epi32(b)); }
MU_INLINE vi vi_and(vi a, vi b) { return VI2(_mm256_and_si256(a.lo, b.lo), _mm256_and_si256(a.hi, b.hi)); }
MU_INLINE vi vi_or(vi a, vi b) { return VI2(_mm256_or_si256(a.lo, b.lo), _mm256_or_si256(a.hi, b.hi)); }
MU_INLINE vi vi_xor(vi a, vi b) { return VI2(_mm256_xor_si256(a.lo, b.lo), _mm256_xor_si256(a.hi, b.hi)); }
MU_INLINE vi vi_add32(vi a, vi b) { return VI2(_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi)); }
MU_INLINE vi vi_sub32(vi a, vi b) { return VI2(_mm256_sub_epi32(a.lo, b.lo), _mm256_sub_epi32(a.hi, b.hi)); }
MU_INLINE vi vi_srli32(vi a, int s) { return VI2(_mm256_srli_epi32(a.lo, s), _mm256_srli_epi32(a.hi, s)); }
MU_INLINE vi vi_slli32(vi a, int s) { return VI2(_mm256_slli_epi32(a.lo, s), _mm256_slli_epi32(a.hi, s)); }
MU_INLINE vi vi_srl16_halves(vi a, int s_lo, int s_hi) {
    return VI2(_mm256_srli_epi16(a.lo, s_lo), _mm256_srli_epi16(a.hi, s_hi));
}
MU_INLINE vi vi_sll16_halves(vi a, int s_lo, int s_hi) {
    return VI2(_mm256_slli_epi16(a.lo, s_lo), _mm256_slli_epi16(a.hi, s_hi));
}
MU_INLINE vi vi_maddubs(vi u, vi s) { return VI2(_mm256_maddubs_epi16(u.lo, s.lo), _mm256_maddubs_epi16(u.hi, s.hi)); }
MU_INLINE vi vi_madd16(vi a, vi b) { return VI2(_mm256_madd_epi16(a.lo, b.lo), _mm256_madd_epi16(a.hi, b.hi)); }
MU_INLINE vi vi_dpwssd(vi acc, vi a, vi b) { return vi_add32(acc, vi_madd16(a, b)); }

MU_INLINE int32_t vi_hsum32(vi a) { return hsum256_epi32(_mm256_add_epi32(a.lo, a.hi)); }
/* Byte-shuffle mask that repeats s16 element e across a 128-bit lane. */
MU_INLINE __m256i rep16_mask(int e0, int e1) {
    const __m128i m0 = _mm_set1_epi16((short)(2 * e0 | (2 * e0 + 1) << 8));
    const __m128i m1 = _mm_set1_epi16((short)(2 * e1 | (2 * e1 + 1) << 8));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(m0), m1, 1);
}
MU_INLINE vi vi_spread16x2(__m128i s, int k0, int k1) {
    const __m256i b = _mm256_broadcastsi128_si256(s);
    return VI2(_mm256_shuffle_epi8(b, rep16_mask(k0, k0)), _mm256_shuffle_epi8(b, rep16_mask(k1, k1)));
}
MU_INLINE vi vi_spread8x4(__m256i s, int g) {
    /* groups g..g+3 lie in one 128-bit half of s (g is a multiple of 4) */
    const __m256i b = g < 8 ? _mm256_permute2x128_si256(s, s, 0x00) : _mm256_permute2x128_si256(s, s, 0x11);
    const int e = g & 7;
    return VI2(_mm256_shuffle_epi8(b, rep16_mask(e, e + 1)), _mm256_shuffle_epi8(b, rep16_mask(e + 2, e + 3)));
}
MU_INLINE vi vi_from_i32x8(__m256i a) { return VI2(a, _mm256_setzero_si256()); }
MU_INLINE vf vf_spread8x2(__m256 s, int j0, int j1) {
    return VF2(_mm256_permutevar8x32_ps(s, _mm256_set1_epi32(j0)), _mm256_permutevar8x32_ps(s, _mm256_set1_epi32(j1)));
}
MU_INLINE vf vf_spread4x4(vf s, int g) {
    const __m256 h = g < 8 ? s.lo : s.hi;
    const int e = g & 7;
    return VF2(_mm256_permutevar8x32_ps(h, _mm256_setr_epi32(e, e, e, e, e + 1, e + 1, e + 1, e + 1)),
               _mm256_permutevar8x32_ps(h, _mm256_setr_epi32(e + 2, e + 2, e + 2, e + 2, e + 3, e + 3, e + 3, e + 3)));
}
MU_INLINE vf vf_stride4(const float *x, int b) {
    const __m256i idx = _mm256_setr_epi32(b, 4 + b, 8 + b, 12 + b, 16 + b, 20 + b, 24 + b, 28 + b);
    return VF2(_mm256_i32gather_ps(x, idx, 4), _mm256_i32gather_ps(x + 32, idx, 4));
}
MU_INLINE __m128i vi_pack_s8(vi a) {
    __m256i w = _mm256_packs_epi32(a.lo, a.hi);                  /* s16, lanes interleaved by 128 bits */
    __m128i b = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    return _mm_shuffle_epi32(b, 0xD8); /* undo the 128-bit interleave: 0,2,1,3 */
}

MU_INLINE vi vi_dpbusd(vi acc, vi u, vi s) {
    const __m256i one = _mm256_set1_epi16(1);
    return VI2(_mm256_add_epi32(acc.lo, _mm256_madd_epi16(_mm256_maddubs_epi16(u.lo, s.lo), one)),
               _mm256_add_epi32(acc.hi, _mm256_madd_epi16(_mm256_maddubs_epi16(u.hi, s.hi), one)));
}
MU_INLINE vi vi_unpacklo32(vi a, vi b) { return VI2(_mm256_unpacklo_epi32(a.lo, b.lo), _mm256_unpacklo_epi32(a.hi, b.hi)); }
MU_INLINE vi vi_unpackhi32(vi a, vi b) { return VI2(_mm256_unpackhi_epi32(a.lo, b.lo), _mm256_unpackhi_epi32(a.hi, b.hi)); }
MU_INLINE vi vi_unpacklo64(vi a, vi b) { return VI2(_mm256_unpacklo_epi64(a.lo, b.lo), _mm256_unpacklo_epi64(a.hi, b.hi)); }
MU_INLINE vi vi_unpackhi64(vi a, vi b) { return VI2(_mm256_unpackhi_epi64(a.lo, b.lo), _mm256_unpackhi_epi64(a.hi, b.hi)); }
MU_INLINE vf vf_fnmadd(vf a, vf b, vf c) { return VF2(_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi)); }
MU_INLINE vf vf_from_u8_128(__m128i b) {
    return VF2(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8))));
}
MU_INLINE vf vf_from_s8_128(__m128i b) {
    return VF2(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8))));
}

#endif /* MU_X86_512 */
/* ===================================================================== */

/* Broadcast load of one float from memory. */
MU_INLINE vf vf_bcast(const float *p) { return vf_set1(*p); }

/* Dot product of 32 signed bytes, as 8 int32 partial sums. One VNNI
 * instruction where present; else maddubs + madd. w is made unsigned with
 * |w| and a takes w's sign, so no pair of products can saturate. */
MU_INLINE __m256i s8_dot32(__m256i w, __m256i a) {
    const __m256i aw = _mm256_abs_epi8(w), sa = _mm256_sign_epi8(a, w);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, sa);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sa), _mm256_set1_epi16(1));
#endif
}


/* The same for unsigned w of at most 127 (no sign trick needed: maddubs'
 * pairs stay below 2*127*127 < 32767). */
MU_INLINE __m256i u8_dot32(__m256i w, __m256i a) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, a);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1));
#endif
}

#endif
