/* kernels_x86.h — the x86 SIMD kernels, written once over the vocabulary of
 * simd_x86.h and compiled per ISA (kernels_avx2.c, kernels_avx512bw.c,
 * kernels_avx512.c include this file and fill their table with
 * x86_fill_table). Everything here is static.
 *
 * Exact lane (f32 activations). Each 16-weight group of a block is
 * dequantized in registers as q * scale + offset (one fused multiply-add,
 * scale and offset per group) and multiplied into 16 lanes of partial sums.
 *
 * Fast lane (int8 activations). K-quant blocks are unpacked into four
 * 64-byte "units" of unsigned values (Q4_K: the low and high nibbles of a
 * 32-byte chunk; Q5_K: plus the fifth bit; Q6_K: 6-bit values 0..63) with a
 * vector of 16-bit group scales per unit. Per unit:
 *     isum += dpwssd(maddubs(q_u8, a_s8), scales)
 * Dword lane l of isum holds bytes 4l..4l+3 of the unit, so it lies in
 * activation group 4u + l/4 and takes that group's scale (a permute of
 * the block's 16 scales); per block
 *     y += d * sum_u float(isum_u) * da_u  -  sum_g mins_g * ds_g
 * where ds_g = da_g * sum(a of g) comes with the activations. Q6_K's -32
 * offset is the "min" term with mins = 32*scales and dmin = d.
 *
 * Prefill. The fast-lane matmul unpacks each weight block once per tile of
 * tokens and runs it against all of them; with AVX-512 the K-quants take
 * their activations in a permuted layout (mu_act_kq_permute) so that one
 * vpdpbusd per 64 products accumulates a whole block (kp_tile). The exact-lane matmul dequantizes
 * a tile of rows once (as f32, rows interleaved per k) and runs a
 * register-tiled outer-product kernel over all tokens.
 * The K-quant kernels are in kernels_x86_kq.h and the attention helpers in
 * kernels_x86_attn.h, included below where they stood.
 */
#ifndef MU_KERNELS_X86_H
#define MU_KERNELS_X86_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/simd_x86.h"

/* Register tiles (see the matmul kernels): tokens per fast-lane tile, rows
 * (in vectors of 16) and tokens of the exact-lane tile. AVX2 holds half as
 * many 512-bit values in its 16 registers. */
#if MU_X86_512
#define KQ_NT 4
#define MM_MRV 3
#define MM_NR 8
#else
#define KQ_NT 2
#define MM_MRV 1
#define MM_NR 4
#endif
#define MM_MR (16 * MM_MRV)

static inline float f16f(uint16_t h) { return _cvtsh_ss(h); }

/* Software prefetch of the weight stream, PF_DIST bytes ahead of the block
 * being read (rows of a call are contiguous, so this runs on into the next
 * row). The hardware prefetcher alone leaves a single core well below the
 * memory's bandwidth when a kernel does real work per byte. */
#ifndef PF_DIST
#define PF_DIST 4096 /* measured best of 512..6144 on Zen 5 (single core, DRAM) */
#endif
MU_INLINE void prefetch_span(const void *p, uint64_t bytes) {
    for (uint64_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + PF_DIST + o, _MM_HINT_T0);
}

/* f16 of a scale, saturated as the scalar quantizers store it */
static inline uint16_t f16_saturated(float v) {
    return mu_f32_to_f16(v > 65504.0f ? 65504.0f : v < -65504.0f ? -65504.0f : v);
}

/* =====================================================================
 * K-quant scale unpacking (Q4_K, Q5_K): the eight 6-bit scales and mins
 * of the 12 packed bytes (layout in quant.h), as two 8-byte words:
 *   sc[0..3] = s[0..3] & 63,   sc[4..7] = (s[8..11] & 15) | (s[0..3] >> 6) << 4
 *   m[0..3]  = s[4..7] & 63,   m[4..7]  = (s[8..11] >> 4) | (s[4..7] >> 6) << 4
 * done four bytes at a time. */
MU_INLINE void k4_scales(const uint8_t *s, uint64_t *sc, uint64_t *m) {
    uint32_t w0, w1, w2;
    memcpy(&w0, s, 4);
    memcpy(&w1, s + 4, 4);
    memcpy(&w2, s + 8, 4);
    const uint32_t sc_lo = w0 & 0x3F3F3F3Fu, m_lo = w1 & 0x3F3F3F3Fu;
    const uint32_t sc_hi = (w2 & 0x0F0F0F0Fu) | ((w0 >> 2) & 0x30303030u);
    const uint32_t m_hi = ((w2 >> 4) & 0x0F0F0F0Fu) | ((w1 >> 2) & 0x30303030u);
    *sc = sc_lo | (uint64_t)sc_hi << 32;
    *m = m_lo | (uint64_t)m_hi << 32;
}

/* 8 unsigned bytes -> 8 floats times f */
MU_INLINE __m256 u8x8_times(uint64_t b, float f) {
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)b))), _mm256_set1_ps(f));
}

/* =====================================================================
 * Exact lane: per-format group producers. grp_<fmt>(block, g) returns the
 * raw integer values of the 16-weight group g (0..15) as floats, and
 * consts_<fmt>(block, s, o) fills the per-group scale and offset so that
 * weight = q*s[g] + o[g]. */

typedef struct grp_consts {
    float s[16], o[16];
} grp_consts;
/* Q4_K/Q5_K groups 2j and 2j+1 share sub-block j's scale and min; Q6_K has
 * one per group. */

/* Q4_K: group g lies in chunk g/4 (bytes 32(g/4)..+31), low nibbles for
 * g%4 < 2, high nibbles otherwise; sub-block g/2. */
MU_INLINE vf grp_Q4_K(const mu_block_q4_K *b, int g) {
    vi q = vi_from_u8x16(b->qs + 32 * (g / 4) + 16 * (g & 1));
    if (g & 2) q = vi_srli32(q, 4);
    return vf_from_i32(vi_and(q, vi_set1_32(0x0F)));
}
MU_INLINE void consts_k4(uint16_t d16, uint16_t dmin16, const uint8_t *scales, grp_consts *c) {
    uint64_t sc, m;
    k4_scales(scales, &sc, &m);
    const __m256 s8 = u8x8_times(sc, f16f(d16)), o8 = u8x8_times(m, -f16f(dmin16));
    /* duplicate each entry: s[2j] = s[2j+1] = scale of sub-block j */
    const __m256i lo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), hi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
    _mm256_storeu_ps(c->s, _mm256_permutevar8x32_ps(s8, lo));
    _mm256_storeu_ps(c->s + 8, _mm256_permutevar8x32_ps(s8, hi));
    _mm256_storeu_ps(c->o, _mm256_permutevar8x32_ps(o8, lo));
    _mm256_storeu_ps(c->o + 8, _mm256_permutevar8x32_ps(o8, hi));
}
MU_INLINE void consts_Q4_K(const mu_block_q4_K *b, grp_consts *c) { consts_k4(b->d, b->dmin, b->scales, c); }

/* Q5_K: as Q4_K plus bit (sub-block index) of qh[l] as value 16. */
MU_INLINE vf grp_Q5_K(const mu_block_q5_K *b, int g) {
    const int half = g & 1, sub = g / 2;
    vi q = vi_from_u8x16(b->qs + 32 * (g / 4) + 16 * half);
    if (g & 2) q = vi_srli32(q, 4);
    q = vi_and(q, vi_set1_32(0x0F));
    vi h = vi_from_u8x16(b->qh + 16 * half);
    h = sub <= 4 ? vi_slli32(h, 4 - sub) : vi_srli32(h, sub - 4);
    return vf_from_i32(vi_or(q, vi_and(h, vi_set1_32(0x10))));
}
MU_INLINE void consts_Q5_K(const mu_block_q5_K *b, grp_consts *c) { consts_k4(b->d, b->dmin, b->scales, c); }

/* Q6_K: half h = g/8 uses ql+64h, qh+32h; within it, quarter k = (g/2)%4
 * selects (low nibble of ql[l]), (low of ql[l+32]), (high of ql[l]), (high
 * of ql[l+32]) with qh bits 2k..2k+1; l runs over 16(g%2)..+15. Values are
 * 0..63 and weight = d*sc[g]*(q - 32). */
MU_INLINE vf grp_Q6_K(const mu_block_q6_K *b, int g) {
    const int h = g / 8, k = (g / 2) % 4, l0 = 16 * (g & 1);
    vi q = vi_from_u8x16(b->ql + 64 * h + l0 + 32 * (k & 1));
    if (k & 2) q = vi_srli32(q, 4);
    q = vi_and(q, vi_set1_32(0x0F));
    vi hb = vi_and(vi_srli32(vi_from_u8x16(b->qh + 32 * h + l0), 2 * k), vi_set1_32(3));
    return vf_from_i32(vi_or(q, vi_slli32(hb, 4)));
}
MU_INLINE void consts_Q6_K(const mu_block_q6_K *b, grp_consts *c) {
    const vf s = vf_mul(vf_from_i32(vi_from_s8x16(b->scales)), vf_set1(f16f(b->d)));
    vf_store(c->s, s);
    vf_store(c->o, vf_mul(s, vf_set1(-32.0f)));
}

/* Dequantizes nb blocks into out (for the exact-lane matmul tiles). */
#define EXACT_KQUANT(fmt, block_t)                                                                              \
    static void deq_##fmt(const void *src, float *out, int64_t nb) {                                          \
        const block_t *b = src;                                                                               \
        for (int64_t i = 0; i < nb; i++) {                                                                    \
            grp_consts c;                                                                                     \
            consts_##fmt(&b[i], &c);                                                                          \
            MU_UNROLL(16)                                                                                     \
            for (int g = 0; g < 16; g++)                                                                      \
                vf_store(out + i * MU_QK_K + 16 * g,                                                          \
                         vf_fma(grp_##fmt(&b[i], g), vf_set1(c.s[g]), vf_set1(c.o[g])));                      \
        }                                                                                                     \
    }

EXACT_KQUANT(Q4_K, mu_block_q4_K)
EXACT_KQUANT(Q5_K, mu_block_q5_K)
EXACT_KQUANT(Q6_K, mu_block_q6_K)

/* ---- 32-element formats, exact lane: sum q*x per block, then times d --- */

MU_INLINE vf grp_Q8_0(const mu_block_q8_0 *b, int half) { return vf_from_i32(vi_from_s8x16(b->qs + 16 * half)); }
MU_INLINE vf grp_Q4_0(const mu_block_q4_0 *b, int half) {
    vi q = vi_from_u8x16(b->qs);
    if (half) q = vi_srli32(q, 4);
    return vf_from_i32(vi_sub32(vi_and(q, vi_set1_32(0x0F)), vi_set1_32(8)));
}

#define EXACT_32(fmt, block_t)                                                                                  \
    static void matvec_f32_##fmt(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) { \
        const int64_t nb = n / 32;                                                                            \
        for (int64_t r = 0; r < nr; r++) {                                                                    \
            const block_t *b = (const block_t *)((const uint8_t *)w + (uint64_t)r * rb);                      \
            vf acc = vf_zero();                                                                               \
            for (int64_t i = 0; i < nb; i++) {                                                                \
                if (!(i & 1)) prefetch_span(&b[i], 2 * sizeof(block_t));                                     \
                vf s = vf_mul(grp_##fmt(&b[i], 0), vf_load(x + 32 * i));                                      \
                s = vf_fma(grp_##fmt(&b[i], 1), vf_load(x + 32 * i + 16), s);                                 \
                acc = vf_fma(s, vf_set1(f16f(b[i].d)), acc);                                                  \
            }                                                                                                 \
            y[r] = vf_hsum(acc);                                                                              \
        }                                                                                                     \
    }                                                                                                         \
    static void deq_##fmt(const void *src, float *out, int64_t nb) {                                          \
        const block_t *b = src;                                                                               \
        for (int64_t i = 0; i < nb; i++) {                                                                    \
            const vf d = vf_set1(f16f(b[i].d));                                                               \
            vf_store(out + 32 * i, vf_mul(grp_##fmt(&b[i], 0), d));                                           \
            vf_store(out + 32 * i + 16, vf_mul(grp_##fmt(&b[i], 1), d));                                      \
        }                                                                                                     \
    }

EXACT_32(Q8_0, mu_block_q8_0)
EXACT_32(Q4_0, mu_block_q4_0)

/* ---- float weights (both lanes) -------------------------------------------
 * Four accumulators of 16 lanes; the n % 16 tail is scalar. */

#define EXACT_FLOAT(fmt, elem_t, load16, scalar)                                                                \
    static void matvec_f32_##fmt(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) { \
        for (int64_t r = 0; r < nr; r++) {                                                                    \
            const elem_t *row = (const elem_t *)((const uint8_t *)w + (uint64_t)r * rb);                      \
            vf a0 = vf_zero(), a1 = vf_zero(), a2 = vf_zero(), a3 = vf_zero();                                \
            int64_t i = 0;                                                                                    \
            for (; i + 64 <= n; i += 64) {                                                                    \
                prefetch_span(row + i, 64 * sizeof(elem_t));                                                  \
                a0 = vf_fma(load16(row + i), vf_load(x + i), a0);                                             \
                a1 = vf_fma(load16(row + i + 16), vf_load(x + i + 16), a1);                                   \
                a2 = vf_fma(load16(row + i + 32), vf_load(x + i + 32), a2);                                   \
                a3 = vf_fma(load16(row + i + 48), vf_load(x + i + 48), a3);                                   \
            }                                                                                                 \
            for (; i + 16 <= n; i += 16) a0 = vf_fma(load16(row + i), vf_load(x + i), a0);                    \
            float sum = vf_hsum(vf_add(vf_add(a0, a1), vf_add(a2, a3)));                                      \
            for (; i < n; i++) sum += scalar(row[i]) * x[i];                                                  \
            y[r] = sum;                                                                                       \
        }                                                                                                     \
    }                                                                                                         \
    static void deq_##fmt(const void *src, float *out, int64_t n) {                                           \
        const elem_t *row = src;                                                                              \
        int64_t i = 0;                                                                                        \
        for (; i + 16 <= n; i += 16) vf_store(out + i, load16(row + i));                                      \
        for (; i < n; i++) out[i] = scalar(row[i]);                                                           \
    }

static inline float f32_id(float v) { return v; }
static inline float bf16f(uint16_t h) { return mu_bf16_to_f32(h); }
EXACT_FLOAT(F32, float, vf_load, f32_id)
EXACT_FLOAT(F16, uint16_t, vf_from_f16, f16f)
EXACT_FLOAT(BF16, uint16_t, vf_from_bf16, bf16f)


#include "cpu/kernels_x86_kq.h"

/* ---- fast lane, integer-view formats (kernels.h, quant.h) ----------------
 * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K. A chunk of 32
 * weights is one ymm of signed bytes (iv_chunk_*), multiplied into the
 * activations' 32 bytes by s8_dot32: int32 lanes 0-3 belong to activation
 * group 2c, lanes 4-7 to group 2c+1. Four chunks' products fold into one
 * vector of their eight group sums (group_sums4), which is converted and
 * multiplied once by (weight scale x activation scale) of those groups;
 * the offsets go through ds, eight groups per FMA. Superblock formats fold
 * their 8 chunks in two such quads; the 32-element formats fold four
 * consecutive blocks. */

/* [group 2c of chunks 0..3 | group 2c+1 of chunks 0..3] */
MU_INLINE __m256i group_sums4(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
    return _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
}
/* Eight consecutive group values in group_sums4's lane order. */
MU_INLINE __m256 quad_order(__m256 v) { return _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7)); }

/* 16 bytes of packed nibbles as 32 values 0..15: the low nibbles (weights
 * 0-15), then the high ones (16-31), the order of every 32-weight nibble
 * layout. */
MU_INLINE __m256i nibbles32(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
}
/* Q5_0/Q5_1: bit j of the little-endian qh as 0x10 in byte j. */
MU_INLINE __m256i fifth_bits32(const uint8_t qh[4]) {
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                               _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                                                2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}
/* IQ4_NL/IQ4_XS: 32 nibbles looked up in the 16 levels */
MU_INLINE __m256i iq4_levels32(const uint8_t *qs) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)mu_iq4_levels));
    return _mm256_shuffle_epi8(table, nibbles32(qs));
}
/* Q2_K/Q3_K: chunk c = 4h + s holds bits 2s..2s+1 of qs[32h..32h+31] */
MU_INLINE __m256i low2_bits32(const uint8_t *qs, int c) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * (c / 4)));
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * (c % 4))), _mm256_set1_epi8(3));
}

MU_INLINE __m256i iv_chunk_Q8_0(const mu_block_q8_0 *b, int c) {
    (void)c;
    return _mm256_loadu_si256((const __m256i *)b->qs);
}
MU_INLINE __m256i iv_chunk_Q4_0(const mu_block_q4_0 *b, int c) {
    (void)c;
    return _mm256_sub_epi8(nibbles32(b->qs), _mm256_set1_epi8(8));
}
MU_INLINE __m256i iv_chunk_Q4_1(const mu_block_q4_1 *b, int c) {
    (void)c;
    return nibbles32(b->qs);
}
MU_INLINE __m256i iv_chunk_Q5_1(const mu_block_q5_1 *b, int c) {
    (void)c;
    return _mm256_or_si256(nibbles32(b->qs), fifth_bits32(b->qh));
}
MU_INLINE __m256i iv_chunk_Q5_0(const mu_block_q5_0 *b, int c) {
    (void)c;
    return _mm256_sub_epi8(_mm256_or_si256(nibbles32(b->qs), fifth_bits32(b->qh)), _mm256_set1_epi8(16));
}
MU_INLINE __m256i iv_chunk_IQ4_NL(const mu_block_iq4_nl *b, int c) {
    (void)c;
    return iq4_levels32(b->qs);
}
MU_INLINE __m256i iv_chunk_IQ4_XS(const mu_block_iq4_xs *b, int c) { return iq4_levels32(b->qs + 16 * c); }
MU_INLINE __m256i iv_chunk_Q2_K(const mu_block_q2_K *b, int c) { return low2_bits32(b->qs, c); }
/* Q3_K plus 4 (IV_BIAS): bit c of hmask[l] moved to the value 4 (a 16-bit
 * shift by at most 5 keeps it within its byte) */
MU_INLINE __m256i iv_chunk_Q3_K(const mu_block_q3_K *b, int c) {
    const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
    const __m256i moved = c >= 2 ? _mm256_srl_epi16(hm, _mm_cvtsi32_si128(c - 2)) : _mm256_sll_epi16(hm, _mm_cvtsi32_si128(2 - c));
    return _mm256_or_si256(low2_bits32(b->qs, c), _mm256_and_si256(moved, _mm256_set1_epi8(4)));
}

/* The dot product of a chunk: formats whose values are never negative
 * (at most 31) skip s8_dot32's sign trick. A format with a bias B gets its
 * values plus B from iv_chunk (never negative), and the kernel takes
 * B * scale * ds of each group back, as Q6_K's -32. */
#define IV_DOT_Q8_0 s8_dot32
#define IV_DOT_Q4_0 s8_dot32
#define IV_DOT_Q5_0 s8_dot32
#define IV_DOT_IQ4_NL s8_dot32
#define IV_DOT_IQ4_XS s8_dot32
#define IV_DOT_Q3_K u8_dot32
#define IV_BIAS_Q3_K 4.0f
#define IV_DOT_Q4_1 u8_dot32
#define IV_DOT_Q5_1 u8_dot32
#define IV_DOT_Q2_K u8_dot32

/* ---- superblocks: the scales (and offsets) of groups 0-7 and 8-15 ---- */

/* 8 unsigned bytes -> 8 int32 */
MU_INLINE __m256i u8x8_i32(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }

MU_INLINE void iv_super_IQ4_XS(const mu_block_iq4_xs *b, __m256 s[2], __m256 o[2]) {
    (void)o;
    uint32_t l;
    memcpy(&l, b->scales_l, 4);
    const __m256 d = _mm256_set1_ps(f16f(b->d));
    for (int half = 0; half < 2; half++) { /* sub-blocks 4*half .. 4*half+3, two groups each */
        const __m256i j = _mm256_add_epi32(_mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), _mm256_set1_epi32(4 * half));
        const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)l), _mm256_slli_epi32(j, 2)), _mm256_set1_epi32(15));
        const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b->scales_h), _mm256_slli_epi32(j, 1)), _mm256_set1_epi32(3));
        const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
        s[half] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(ls));
    }
}
MU_INLINE void iv_super_Q2_K(const mu_block_q2_K *b, __m256 s[2], __m256 o[2]) {
    const __m256 d = _mm256_set1_ps(f16f(b->d)), mdmin = _mm256_set1_ps(-f16f(b->dmin));
    for (int half = 0; half < 2; half++) {
        const __m256i packed = u8x8_i32(b->scales + 8 * half);
        s[half] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_and_si256(packed, _mm256_set1_epi32(15))));
        o[half] = _mm256_mul_ps(mdmin, _mm256_cvtepi32_ps(_mm256_srli_epi32(packed, 4)));
    }
}
MU_INLINE void iv_super_Q3_K(const mu_block_q3_K *b, __m256 s[2], __m256 o[2]) {
    (void)o;
    uint32_t w;
    memcpy(&w, b->scales + 8, 4);
    const __m256i low_bytes = u8x8_i32(b->scales);
    const __m256 d = _mm256_set1_ps(f16f(b->d));
    for (int half = 0; half < 2; half++) { /* g = 8*half + k: low nibble k of byte k, high bits of byte 8 + g%4 */
        const __m256i low = _mm256_and_si256(half ? _mm256_srli_epi32(low_bytes, 4) : low_bytes, _mm256_set1_epi32(15));
        const __m256i shift = _mm256_add_epi32(_mm256_setr_epi32(0, 8, 16, 24, 2, 10, 18, 26), _mm256_set1_epi32(4 * half));
        const __m256i high = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), shift), _mm256_set1_epi32(3));
        const __m256i u = _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(high, 4)), _mm256_set1_epi32(32));
        s[half] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(u));
    }
}

/* ---- exact lane, integer-view formats: each 16-weight group of a chunk
 * as value * scale + offset in registers (one FMA, as the reference's
 * mu_dequant_via_ints rounds once where the offset is exact), then into
 * the f32 activations. iv_groups_* gives a block's per-group scales and
 * offsets; a bias B of iv_chunk comes back as the offset -B * scale
 * (the FMA's product is exact, so the weight rounds as q * scale). */

MU_INLINE vf iv_weights16(__m256i chunk, int half, float scale, float offset) {
    const __m128i v = half ? _mm256_extracti128_si256(chunk, 1) : _mm256_castsi256_si128(chunk);
    return vf_fma(vf_from_i32(vi_from_s8_m128(v)), vf_set1(scale), vf_set1(offset));
}

MU_INLINE void iv_groups_Q4_1(const mu_block_q4_1 *b, float s[2], float o[2]) {
    s[0] = s[1] = f16f(b->d), o[0] = o[1] = f16f(b->m);
}
MU_INLINE void iv_groups_Q5_1(const mu_block_q5_1 *b, float s[2], float o[2]) {
    s[0] = s[1] = f16f(b->d), o[0] = o[1] = f16f(b->m);
}
MU_INLINE void iv_groups_Q5_0(const mu_block_q5_0 *b, float s[2], float o[2]) {
    s[0] = s[1] = f16f(b->d), o[0] = o[1] = 0.0f;
}
MU_INLINE void iv_groups_IQ4_NL(const mu_block_iq4_nl *b, float s[2], float o[2]) {
    s[0] = s[1] = f16f(b->d), o[0] = o[1] = 0.0f;
}
#define IV_GROUPS_SUPER(fmt, block_t, has_offset, bias)                                                          \
    MU_INLINE void iv_groups_##fmt(const block_t *b, float s[16], float o[16]) {                               \
        __m256 sv[2], ov[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};                                      \
        iv_super_##fmt(b, sv, ov);                                                                             \
        for (int half = 0; half < 2; half++) {                                                                 \
            if (!(has_offset)) ov[half] = _mm256_mul_ps(_mm256_set1_ps(-(bias)), sv[half]);                    \
            _mm256_storeu_ps(s + 8 * half, sv[half]);                                                          \
            _mm256_storeu_ps(o + 8 * half, ov[half]);                                                          \
        }                                                                                                      \
    }
IV_GROUPS_SUPER(IQ4_XS, mu_block_iq4_xs, 0, 0.0f)
IV_GROUPS_SUPER(Q2_K, mu_block_q2_K, 1, 0.0f)
IV_GROUPS_SUPER(Q3_K, mu_block_q3_K, 0, 4.0f)

/* chunks: 32-weight chunks a block (1 or 8) */
#define EXACT_IV(fmt, block_t, chunks)                                                                          \
    static void deq_##fmt(const void *src, float *out, int64_t nb) {                                          \
        const block_t *b = src;                                                                               \
        for (int64_t i = 0; i < nb; i++) {                                                                    \
            float s[2 * (chunks)], o[2 * (chunks)];                                                           \
            iv_groups_##fmt(&b[i], s, o);                                                                     \
            MU_UNROLL(chunks)                                                                                 \
            for (int c = 0; c < (chunks); c++) {                                                              \
                const __m256i v = iv_chunk_##fmt(&b[i], c);                                                   \
                float *d = out + 32 * ((chunks) * i + c);                                                     \
                vf_store(d, iv_weights16(v, 0, s[2 * c], o[2 * c]));                                          \
                vf_store(d + 16, iv_weights16(v, 1, s[2 * c + 1], o[2 * c + 1]));                             \
            }                                                                                                 \
        }                                                                                                     \
    }                                                                                                         \
    static void matvec_f32_##fmt(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) { \
        const int64_t nb = n / (32 * (chunks));                                                               \
        for (int64_t r = 0; r < nr; r++) {                                                                    \
            const block_t *b = (const block_t *)((const uint8_t *)w + (uint64_t)r * rb);                      \
            vf acc0 = vf_zero(), acc1 = vf_zero();                                                            \
            for (int64_t i = 0; i < nb; i++) {                                                                \
                prefetch_span(&b[i], sizeof(block_t));                                                        \
                float s[2 * (chunks)], o[2 * (chunks)];                                                       \
                iv_groups_##fmt(&b[i], s, o);                                                                 \
                const float *xi = x + 32 * (chunks) * i;                                                      \
                MU_UNROLL(chunks)                                                                             \
                for (int c = 0; c < (chunks); c++) {                                                          \
                    const __m256i v = iv_chunk_##fmt(&b[i], c);                                               \
                    acc0 = vf_fma(iv_weights16(v, 0, s[2 * c], o[2 * c]), vf_load(xi + 32 * c), acc0);        \
                    acc1 = vf_fma(iv_weights16(v, 1, s[2 * c + 1], o[2 * c + 1]), vf_load(xi + 32 * c + 16), acc1); \
                }                                                                                             \
            }                                                                                                 \
            y[r] = vf_hsum(vf_add(acc0, acc1));                                                               \
        }                                                                                                     \
    }
EXACT_IV(Q4_1, mu_block_q4_1, 1)
EXACT_IV(Q5_0, mu_block_q5_0, 1)
EXACT_IV(Q5_1, mu_block_q5_1, 1)
EXACT_IV(IQ4_NL, mu_block_iq4_nl, 1)
EXACT_IV(IQ4_XS, mu_block_iq4_xs, 8)
EXACT_IV(Q2_K, mu_block_q2_K, 8)
EXACT_IV(Q3_K, mu_block_q3_K, 8)

#define FAST_IV_SUPER(fmt, block_t, has_offset, bias)                                                                \
    static void matvec_q8_##fmt(const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {   \
        const int64_t nb = n / MU_QK_K;                                                                        \
        const int8_t *aq = xq;                                                                                 \
        const float *ad = mu_act_d(xq, n), *ads = mu_act_ds(xq, n);                                            \
        for (int64_t r = 0; r < nr; r++) {                                                                     \
            const block_t *b = (const block_t *)((const uint8_t *)w + (uint64_t)r * rb);                       \
            __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), oacc = _mm256_setzero_ps();         \
            for (int64_t i = 0; i < nb; i++) {                                                                 \
                prefetch_span(&b[i], sizeof(block_t));                                                         \
                const int8_t *a = aq + MU_QK_K * i;                                                            \
                __m256i p[8];                                                                                  \
                MU_UNROLL(8)                                                                                   \
                for (int c = 0; c < 8; c++)                                                                    \
                    p[c] = IV_DOT_##fmt(iv_chunk_##fmt(&b[i], c), _mm256_loadu_si256((const __m256i *)(a + 32 * c))); \
                __m256 s[2], o[2];                                                                             \
                iv_super_##fmt(&b[i], s, o);                                                                   \
                const float *adi = ad + 16 * i;                                                                \
                acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(group_sums4(p[0], p[1], p[2], p[3])),                \
                                       quad_order(_mm256_mul_ps(s[0], _mm256_loadu_ps(adi))), acc0);           \
                acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(group_sums4(p[4], p[5], p[6], p[7])),                \
                                       quad_order(_mm256_mul_ps(s[1], _mm256_loadu_ps(adi + 8))), acc1);       \
                if (bias != 0.0f) { /* has_offset is false where there is a bias */                           \
                    o[0] = _mm256_mul_ps(_mm256_set1_ps(-(bias)), s[0]);                                       \
                    o[1] = _mm256_mul_ps(_mm256_set1_ps(-(bias)), s[1]);                                       \
                }                                                                                              \
                if (has_offset || bias != 0.0f) {                                                              \
                    oacc = _mm256_fmadd_ps(o[0], _mm256_loadu_ps(ads + 16 * i), oacc);                         \
                    oacc = _mm256_fmadd_ps(o[1], _mm256_loadu_ps(ads + 16 * i + 8), oacc);                     \
                }                                                                                              \
            }                                                                                                  \
            y[r] = hsum256(_mm256_add_ps(_mm256_add_ps(acc0, acc1), oacc));                                    \
        }                                                                                                      \
    }                                                                                                          \
    MATMUL_Q8_BY_ROW_TILES(fmt)


/* [h0 h1 h2 h3 h0 h1 h2 h3] of four halves as floats */
MU_INLINE __m256 halves4_twice(uint16_t h0, uint16_t h1, uint16_t h2, uint16_t h3) {
    const __m128 f = _mm_cvtph_ps(_mm_setr_epi16((short)h0, (short)h1, (short)h2, (short)h3, 0, 0, 0, 0));
    return _mm256_set_m128(f, f);
}

/* Blocks [i, i+k) with k <= 4 (a ragged tail reads zeros for the rest):
 * the products of one quad, its weight scales and mins, and the
 * activation scales and sums of its eight groups in quad order. */
#define IV_QUAD(fmt, b, i, k, a, ad, ads, acc, oacc, has_min)                                                   \
    do {                                                                                                       \
        __m256i p[4];                                                                                          \
        uint16_t dh[4] = {0, 0, 0, 0}, mh[4] = {0, 0, 0, 0};                                                   \
        float adq[8] = {0}, dsq[8] = {0};                                                                      \
        const float *adp = (ad) + 2 * (i), *dsp = (ads) + 2 * (i);                                             \
        if ((k) < 4) {                                                                                         \
            for (int j = 0; j < 2 * (k); j++) adq[j] = adp[j], dsq[j] = has_min ? dsp[j] : 0.0f;               \
            adp = adq, dsp = dsq;                                                                              \
        }                                                                                                      \
        MU_UNROLL(4)                                                                                           \
        for (int j = 0; j < 4; j++) {                                                                          \
            if (j < (k)) {                                                                                     \
                p[j] = IV_DOT_##fmt(iv_chunk_##fmt(&(b)[(i) + j], 0),                                          \
                                _mm256_loadu_si256((const __m256i *)((a) + 32 * ((i) + j))));                  \
                dh[j] = (b)[(i) + j].d;                                                                        \
                IV_MIN_##has_min(mh[j], (b)[(i) + j]);                                                         \
            } else {                                                                                           \
                p[j] = _mm256_setzero_si256();                                                                 \
            }                                                                                                  \
        }                                                                                                      \
        const __m256 sums = _mm256_cvtepi32_ps(group_sums4(p[0], p[1], p[2], p[3]));                           \
        acc = _mm256_fmadd_ps(sums, _mm256_mul_ps(halves4_twice(dh[0], dh[1], dh[2], dh[3]),                   \
                                                  quad_order(_mm256_loadu_ps(adp))), acc);                     \
        if (has_min)                                                                                           \
            oacc = _mm256_fmadd_ps(halves4_twice(mh[0], mh[1], mh[2], mh[3]), quad_order(_mm256_loadu_ps(dsp)), oacc); \
    } while (0)
#define IV_MIN_0(dst, blk) (void)0
#define IV_MIN_1(dst, blk) ((dst) = (blk).m)

#define FAST_IV_32(fmt, block_t, has_min)                                                                        \
    static void matvec_q8_##fmt(const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {   \
        const int64_t nb = n / 32;                                                                             \
        const int8_t *aq = xq;                                                                                 \
        const float *ad = mu_act_d(xq, n), *ads = mu_act_ds(xq, n);                                            \
        for (int64_t r = 0; r < nr; r++) {                                                                     \
            const block_t *b = (const block_t *)((const uint8_t *)w + (uint64_t)r * rb);                       \
            __m256 acc = _mm256_setzero_ps(), oacc = _mm256_setzero_ps();                                      \
            int64_t i = 0;                                                                                     \
            for (; i + 4 <= nb; i += 4) {                                                                      \
                prefetch_span(&b[i], 4 * sizeof(block_t));                                                     \
                IV_QUAD(fmt, b, i, 4, aq, ad, ads, acc, oacc, has_min);                                        \
            }                                                                                                  \
            if (i < nb) IV_QUAD(fmt, b, i, nb - i, aq, ad, ads, acc, oacc, has_min);                           \
            y[r] = hsum256(_mm256_add_ps(acc, oacc));                                                          \
        }                                                                                                      \
    }                                                                                                          \
    MATMUL_Q8_BY_ROW_TILES(fmt)

FAST_IV_32(Q8_0, mu_block_q8_0, 0)
FAST_IV_32(Q4_0, mu_block_q4_0, 0)
FAST_IV_32(Q4_1, mu_block_q4_1, 1)
FAST_IV_32(Q5_0, mu_block_q5_0, 0)
FAST_IV_32(Q5_1, mu_block_q5_1, 1)
FAST_IV_32(IQ4_NL, mu_block_iq4_nl, 0)
FAST_IV_SUPER(IQ4_XS, mu_block_iq4_xs, false, 0.0f)
FAST_IV_SUPER(Q2_K, mu_block_q2_K, true, 0.0f)
FAST_IV_SUPER(Q3_K, mu_block_q3_K, false, IV_BIAS_Q3_K)


/* =====================================================================
 * Exact-lane prefill: y[t][r] = sum_k W[r][k] x[t][k].
 *
 * A tile of MB rows x KC columns is dequantized once into `tile`, laid out
 * as [MB/MM_MR][KC][MM_MR] (MM_MR consecutive rows per k). The register
 * tile holds MM_MR rows (MM_MRV vectors) x MM_NR tokens: per k it loads
 * MM_MRV weight vectors, broadcasts MM_NR activations, and runs
 * MM_MRV*MM_NR fused multiply-adds. Partial sums over K tiles accumulate in
 * y itself.
 */
#define MM_MB (4 * MM_MR)
#define MM_KC 256

typedef void (*deq_fn)(const void *src, float *out, int64_t n_units);

MU_INLINE void mm_tile(const float *a, int kc, const float *x, int64_t n, int nt, float *y, int64_t ldy, int nrows,
                       bool first) {
    vf acc[MM_NR][MM_MRV];
    for (int t = 0; t < nt; t++)
        for (int m = 0; m < MM_MRV; m++) acc[t][m] = vf_zero();
    for (int k = 0; k < kc; k++) {
        vf av[MM_MRV];
        MU_UNROLL(4)
        for (int m = 0; m < MM_MRV; m++) av[m] = vf_load(a + k * MM_MR + 16 * m);
        MU_UNROLL(8)
        for (int t = 0; t < nt; t++) {
            const vf b = vf_bcast(x + t * n + k);
            MU_UNROLL(4)
            for (int m = 0; m < MM_MRV; m++) acc[t][m] = vf_fma(av[m], b, acc[t][m]);
        }
    }
    for (int t = 0; t < nt; t++) {
        float *yt = y + t * ldy;
        if (nrows == MM_MR) {
            for (int m = 0; m < MM_MRV; m++) {
                vf v = acc[t][m];
                if (!first) v = vf_add(v, vf_load(yt + 16 * m));
                vf_store(yt + 16 * m, v);
            }
        } else {
            float tmp[MM_MR];
            for (int m = 0; m < MM_MRV; m++) vf_store(tmp + 16 * m, acc[t][m]);
            for (int i = 0; i < nrows; i++) yt[i] = first ? tmp[i] : yt[i] + tmp[i];
        }
    }
}

/* elems_per_unit: how many weights one `deq` unit holds (a block, or 1). */
static void mm_exact(deq_fn deq, int64_t elems_per_unit, uint64_t unit_bytes, const void *w, uint64_t rb, int64_t nr,
                     const float *x, int64_t n, int64_t T, float *y, int64_t ldy) {
    /* on the stack: 192 KiB with AVX-512, well inside a thread's stack */
    float tile[MM_MB * MM_KC] __attribute__((aligned(64)));
    float rowbuf[MM_KC] __attribute__((aligned(64)));
    /* a K tile is a whole number of units */
    const int64_t kc_max = elems_per_unit >= MM_KC ? elems_per_unit : MM_KC / elems_per_unit * elems_per_unit;
    for (int64_t r0 = 0; r0 < nr; r0 += MM_MB) {
        const int mb = (int)(nr - r0 < MM_MB ? nr - r0 : MM_MB);
        for (int64_t k0 = 0; k0 < n; k0 += kc_max) {
            const int kc = (int)(n - k0 < kc_max ? n - k0 : kc_max);
            for (int i = 0; i < mb; i++) {
                const uint8_t *src = (const uint8_t *)w + (uint64_t)(r0 + i) * rb + (uint64_t)(k0 / elems_per_unit) * unit_bytes;
                deq(src, rowbuf, kc / elems_per_unit);
                float *dst = tile + (i / MM_MR) * (MM_KC * MM_MR) + i % MM_MR;
                for (int k = 0; k < kc; k++) dst[k * MM_MR] = rowbuf[k];
            }
            for (int i = mb; i < (mb + MM_MR - 1) / MM_MR * MM_MR; i++) { /* zero the ragged rows */
                float *dst = tile + (i / MM_MR) * (MM_KC * MM_MR) + i % MM_MR;
                for (int k = 0; k < kc; k++) dst[k * MM_MR] = 0.0f;
            }
            int64_t t = 0;
            for (; t + MM_NR <= T; t += MM_NR)
                for (int i = 0; i < mb; i += MM_MR)
                    mm_tile(tile + (i / MM_MR) * (MM_KC * MM_MR), kc, x + t * n + k0, n, MM_NR, y + t * ldy + r0 + i,
                            ldy, mb - i < MM_MR ? mb - i : MM_MR, k0 == 0);
            for (; t < T; t++)
                for (int i = 0; i < mb; i += MM_MR)
                    mm_tile(tile + (i / MM_MR) * (MM_KC * MM_MR), kc, x + t * n + k0, n, 1, y + t * ldy + r0 + i, ldy,
                            mb - i < MM_MR ? mb - i : MM_MR, k0 == 0);
        }
    }
}

#define EXACT_MATMUL(fmt, epu, ub)                                                                               \
    static void matmul_f32_##fmt(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, int64_t T,   \
                                 float *y, int64_t ldy) {                                                      \
        mm_exact(deq_##fmt, epu, ub, w, rb, nr, x, n, T, y, ldy);                                              \
    }
EXACT_MATMUL(F32, 1, 4)
EXACT_MATMUL(F16, 1, 2)
EXACT_MATMUL(BF16, 1, 2)
EXACT_MATMUL(Q8_0, 32, sizeof(mu_block_q8_0))
EXACT_MATMUL(Q4_0, 32, sizeof(mu_block_q4_0))
EXACT_MATMUL(Q4_K, MU_QK_K, sizeof(mu_block_q4_K))
EXACT_MATMUL(Q5_K, MU_QK_K, sizeof(mu_block_q5_K))
EXACT_MATMUL(Q6_K, MU_QK_K, sizeof(mu_block_q6_K))
EXACT_MATMUL(Q4_1, 32, sizeof(mu_block_q4_1))
EXACT_MATMUL(Q5_0, 32, sizeof(mu_block_q5_0))
EXACT_MATMUL(Q5_1, 32, sizeof(mu_block_q5_1))
EXACT_MATMUL(IQ4_NL, 32, sizeof(mu_block_iq4_nl))
EXACT_MATMUL(IQ4_XS, MU_QK_K, sizeof(mu_block_iq4_xs))
EXACT_MATMUL(Q2_K, MU_QK_K, sizeof(mu_block_q2_K))
EXACT_MATMUL(Q3_K, MU_QK_K, sizeof(mu_block_q3_K))

/* =====================================================================
 * The fast-lane activation quantizer: bit-identical to the scalar rule
 * (kernels.h): iscale = 127/amax per group of 16, q = nearest-even (the
 * default rounding of cvtps2dq), d = 1/iscale, ds = d * sum(q). */
static void quantize_act(const float *x, void *dst, int64_t n) {
    int8_t *qs = dst;
    float *d = (float *)mu_act_d(dst, n), *ds = (float *)mu_act_ds(dst, n);
    for (int64_t g = 0; g < n / MU_ACT_GROUP; g++) {
        const vf v = vf_load(x + 16 * g);
        const float amax = vf_hmax(vf_abs(v));
        if (amax == 0.0f) {
            memset(qs + 16 * g, 0, 16);
            d[g] = ds[g] = 0.0f;
            continue;
        }
        const float iscale = 127.0f / amax;
        const vi q = vf_to_i32(vf_mul(v, vf_set1(iscale)));
        _mm_storeu_si128((__m128i *)(qs + 16 * g), vi_pack_s8(q));
        d[g] = 1.0f / iscale;
        ds[g] = d[g] * (float)vi_hsum32(q);
    }
}

#include "cpu/kernels_x86_attn.h"

/* ===================================================================== */

static void x86_fill_table(mu_cpu_kernels *k, const char *isa) {
    *k = *mu_cpu_kernels_scalar();
    MU_KERNELS_SET_FORMATS(k);
    MU_KERNELS_SET_INT_FORMATS(k);
    MU_KERNELS_SET_HELPERS(k);
    k->matvec_q8_rows[MU_TYPE_Q4_K] = matvec_q8_rows_Q4_K;
    k->matvec_q8_rows[MU_TYPE_Q5_K] = matvec_q8_rows_Q5_K;
    k->matvec_q8_rows[MU_TYPE_Q6_K] = matvec_q8_rows_Q6_K;
#if MU_X86_512
    k->matmul_q8_kp[MU_TYPE_Q4_K] = matmul_q8_kp_Q4_K;
    k->matmul_q8_kp[MU_TYPE_Q5_K] = matmul_q8_kp_Q5_K;
    k->matmul_q8_kp[MU_TYPE_Q6_K] = matmul_q8_kp_Q6_K;
    k->matvec_q8_kd[MU_TYPE_Q4_K] = matvec_q8_kd_Q4_K;
    k->matvec_q8_kd[MU_TYPE_Q5_K] = matvec_q8_kd_Q5_K;
    k->matvec_q8_kd[MU_TYPE_Q6_K] = matvec_q8_kd_Q6_K;
#endif
    k->isa = isa;
}

#endif
