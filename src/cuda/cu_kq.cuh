/* cu_kq.cuh — the K-quant formats (Q4_K, Q5_K, Q6_K) as the GPU stores
 * them, and the per-lane arithmetic of the matvec, dequantization and the
 * embedding. Everything here is __host__ __device__, so the layout and the
 * lane arithmetic are checked on the CPU (mu_cuda_selftest_kq) where no GPU
 * is present.
 *
 * The work item of a lane is a "lane-block": one 256-weight block b and a
 * chunk parity c0 (0 or 1), i.e. the two 64-weight chunks X = c0 and
 * X = c0 + 2 of the block (128 weights). Two lanes cover a block; the lane
 * index fixes c0, so every selection by c0 is a per-lane constant, and the
 * 6-bit scale words of the block are unpacked once for the four sub-blocks
 * the lane needs (amortized over 128 weights).
 *
 * Canonical nibble layout of a chunk X (32 bytes): byte i holds weight
 * 64X + i in its low nibble and weight 64X + 32 + i in its high nibble (the
 * file's layout for Q4_K and Q5_K; Q6_K's low four bits are rearranged into
 * it at upload). Load i (0..3) of lane c0 of a block is the 16-byte half
 * Y = i & 1 of chunk X = c0 + 2 (i >> 1).
 *
 * Tiles: a row's blocks form groups of 16 from the row's start (the last
 * group may be shorter: nbb blocks). A warp batch is one group, lane pair p
 * on block p, so the group's nibbles are stored load-major:
 *   group start + 32 nbb i + 32 p + 16 c0
 * and each of a warp's four loads reads one contiguous span of 32 nbb
 * bytes. (Block-major, each load touched 32 bytes of 16 lines; a probe
 * streamed 20% faster tiled, bench_cuda --chain-rows.) Q6_K's high bits
 * (two 16-byte loads per lane) are tiled the same way. Launches that split
 * a row into parts cut it at multiples of 16 blocks, so their batches are
 * the groups; any other batching still finds its bytes (kq_qs_off).
 *
 * Side streams, per block (same bytes as the file, only moved):
 *   Q4_K: meta 16 B (d, dmin, scales[12]) as in the file.
 *   Q5_K: meta as Q4_K; qh 32 B = 16 B per c0: word 2cc + (k >> 2) (cc: which
 *         of the lane's chunks, k: 32-bit word of the chunk), byte j, bit
 *         (k & 3) = 5th bit of low weight 4k + j, bit 4 + (k & 3) = of high.
 *   Q6_K: qh 64 B = 32 B per c0 (tiled: kq_qh6_off): uint4 cc, word p, byte j holds the top two
 *         bits of the chunk's weights in words k = p and p + 4:
 *         [1:0] high of p+4, [3:2] low of p+4, [5:4] low of p, [7:6] high of p;
 *         meta 16 B = 8 B per c0: the int8 scales of the 16-weight groups
 *         4c0..4c0+3 then 8+4c0..8+4c0+3; d (f16) per block.
 */
#ifndef MU_CU_KQ_CUH
#define MU_CU_KQ_CUH

#include <stdint.h>

#include <cuda_fp16.h>

#ifndef _Static_assert
#define _Static_assert static_assert
#define MU_KQ_UNDEF_SA
#endif
extern "C" {
#include "quant/quant.h"
}
#ifdef MU_KQ_UNDEF_SA
#undef _Static_assert
#undef MU_KQ_UNDEF_SA
#endif

#define KQ_HD __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define KQ_UNROLL _Pragma("unroll")
#else
#define KQ_UNROLL
#endif

/* ---- portable primitives (device instructions, host emulation) ---------------- */

/* dot of four signed byte pairs, accumulated */
KQ_HD int kq_dp4a(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a((int)a, (int)b, c);
#else
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
#endif
}
/* unsigned bytes of a times signed bytes of b */
KQ_HD int kq_dp4a_us(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
    int r;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
#else
    for (int i = 0; i < 4; i++) c += (int)(uint8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
#endif
}
KQ_HD float kq_h2f(uint32_t h) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half((unsigned short)h));
#else
    return mu_f16_to_f32((uint16_t)h);
#endif
}
/* products and differences without FMA contraction (bit-exact dequant) */
KQ_HD float kq_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
KQ_HD float kq_sub(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

typedef struct kq_u4 {
    uint32_t x, y, z, w;
} kq_u4;
KQ_HD uint32_t kq_word(const kq_u4 &v, int k) { return k == 0 ? v.x : (k == 1 ? v.y : (k == 2 ? v.z : v.w)); }

/* ---- upload: one block of the file -> the GPU streams ---------------------------- */

/* The 6-bit value of weight i (0..255) of a Q6_K block (before the -32). */
KQ_HD int kq_q6_value(const uint8_t *ql, const uint8_t *qh, int i) {
    const int n = i >> 7, r = i & 127, quarter = r >> 5, l = r & 31;
    const uint8_t lo = ql[64 * n + l + (quarter & 1) * 32];
    const int low4 = quarter < 2 ? (lo & 0x0F) : (lo >> 4);
    const int hi2 = (qh[32 * n + l] >> (2 * quarter)) & 3;
    return low4 | (hi2 << 4);
}

/* Byte offset, within its row's stream, of 16-byte load i of lane c0 of
 * block b of a row of nb blocks, for a stream of 32 * loads bytes per block
 * (nibbles: 4 loads; Q6_K's high bits: 2): the tile of b's group. */
KQ_HD uint32_t kq_tile_off(int b, int c0, int i, int nb, int loads) {
    const int b0 = b & ~15, nbb = nb - b0 < 16 ? nb - b0 : 16;
    return (uint32_t)(32 * loads * b0 + 32 * nbb * i + 32 * (b - b0) + 16 * c0);
}
KQ_HD uint32_t kq_qs_off(int b, int c0, int i, int nb) { return kq_tile_off(b, c0, i, nb, 4); }
KQ_HD uint32_t kq_qh6_off(int b, int c0, int j, int nb) { return kq_tile_off(b, c0, j, nb, 2); }

/* src: block b of a row of nb blocks in the file's layout; qs_row, qh_row,
 * meta_row, d_row: the row's place in each stream (qs 128 B per block, qh
 * 32/64 B, meta 16 B, d 1). */
KQ_HD void kq_repack_block(uint32_t type, const uint8_t *src, int b, int nb, uint8_t *qs_row, uint8_t *qh_row,
                           uint8_t *meta_row, uint16_t *d_row) {
    uint8_t *const meta = meta_row + 16 * b;
    uint8_t chunk[128]; /* canonical nibble layout */
    if (type == MU_TYPE_Q4_K || type == MU_TYPE_Q5_K) {
        const uint8_t *fq = src + (type == MU_TYPE_Q4_K ? 16 : 48);
        for (int i = 0; i < 128; i++) chunk[i] = fq[i];
        for (int i = 0; i < 16; i++) meta[i] = src[i];
        if (type == MU_TYPE_Q5_K) {
            const uint8_t *fh = src + 16; /* bit 2X of fh[l]: low weight l of chunk X; 2X+1: high */
            uint8_t *const qh = qh_row + 32 * b; /* lane c0's 16 bytes at 16 c0: contiguous across lanes */
            for (int i = 0; i < 32; i++) qh[i] = 0;
            for (int c0 = 0; c0 < 2; c0++)
                for (int cc = 0; cc < 2; cc++)
                    for (int k = 0; k < 8; k++)
                        for (int j = 0; j < 4; j++) {
                            const int X = c0 + 2 * cc, l = 4 * k + j;
                            const int lo = (fh[l] >> (2 * X)) & 1, hi = (fh[l] >> (2 * X + 1)) & 1;
                            qh[16 * c0 + 4 * (2 * cc + (k >> 2)) + j] |= (uint8_t)((lo << (k & 3)) | (hi << (4 + (k & 3))));
                        }
        }
    } else { /* Q6_K */
        const uint8_t *ql = src, *fh = src + 128;
        const int8_t *sc = (const int8_t *)(src + 192);
        for (int X = 0; X < 4; X++)
            for (int i = 0; i < 32; i++)
                chunk[32 * X + i] =
                    (uint8_t)((kq_q6_value(ql, fh, 64 * X + i) & 15) | ((kq_q6_value(ql, fh, 64 * X + 32 + i) & 15) << 4));
        for (int c0 = 0; c0 < 2; c0++)
            for (int cc = 0; cc < 2; cc++) {
                const int X = c0 + 2 * cc;
                uint8_t *const qh = qh_row + kq_qh6_off(b, c0, cc, nb); /* lane c0's load cc */
                for (int p = 0; p < 4; p++)
                    for (int j = 0; j < 4; j++) {
                        const int lo_p = kq_q6_value(ql, fh, 64 * X + 4 * p + j) >> 4;
                        const int hi_p = kq_q6_value(ql, fh, 64 * X + 32 + 4 * p + j) >> 4;
                        const int lo_q = kq_q6_value(ql, fh, 64 * X + 4 * (p + 4) + j) >> 4;
                        const int hi_q = kq_q6_value(ql, fh, 64 * X + 32 + 4 * (p + 4) + j) >> 4;
                        qh[4 * p + j] = (uint8_t)(hi_q | (lo_q << 2) | (lo_p << 4) | (hi_p << 6));
                    }
            }
        for (int c0 = 0; c0 < 2; c0++)
            for (int t = 0; t < 4; t++) {
                meta[8 * c0 + t] = (uint8_t)sc[4 * c0 + t];
                meta[8 * c0 + 4 + t] = (uint8_t)sc[8 + 4 * c0 + t];
            }
        d_row[b] = (uint16_t)(src[208] | (src[209] << 8));
    }
    for (int c0 = 0; c0 < 2; c0++)
        for (int i = 0; i < 4; i++) {
            const int X = c0 + 2 * (i >> 1), Y = i & 1;
            uint8_t *const q = qs_row + kq_qs_off(b, c0, i, nb);
            for (int k = 0; k < 16; k++) q[k] = chunk[32 * X + 16 * Y + k];
        }
}

/* ---- a lane-block's data ------------------------------------------------------------ */

/* What one lane loads for one lane-block: qs units (X = c0: halves 0, 1;
 * X = c0 + 2: halves 0, 1), the block's meta (Q6_K: the lane's 8 scale
 * bytes in m.x, m.y), the lane's high bits, and Q6_K's d. */
template <class V4>
struct KqLane {
    V4 q[4];
    V4 m;
    V4 h[2];
    uint32_t d;
};

/* Word k (0..7) of the lane's chunk cc (0: X = c0, 1: X = c0 + 2). */
template <class V4>
KQ_HD uint32_t kq_qword(const KqLane<V4> &L, int cc, int k) {
    const V4 &v = L.q[2 * cc + (k >> 2)];
    const int kk = k & 3;
    return kk == 0 ? v.x : (kk == 1 ? v.y : (kk == 2 ? v.z : v.w));
}
template <class V4>
KQ_HD uint32_t kq_w4(const V4 &v, int k) {
    return k == 0 ? v.x : (k == 1 ? v.y : (k == 2 ? v.z : v.w));
}

/* Low-group and high-group byte values (0..15, 0..31 or 0..63) of word k of
 * chunk cc: bytes j of lo are weights 64X + 4k + j, of hi 64X + 32 + 4k + j. */
template <uint32_t TYPE, class V4>
KQ_HD void kq_values(const KqLane<V4> &L, int cc, int k, uint32_t &lo, uint32_t &hi) {
    const uint32_t w = kq_qword(L, cc, k), M = 0x0F0F0F0Fu;
    lo = w & M;
    hi = (w >> 4) & M;
    if (TYPE == MU_TYPE_Q5_K) {
        const uint32_t H = kq_w4(L.h[0], 2 * cc + (k >> 2));
        const int s = k & 3;
        lo |= (H << (4 - s)) & 0x10101010u;
        hi |= (H >> s) & 0x10101010u;
    } else if (TYPE == MU_TYPE_Q6_K) {
        const uint32_t H = kq_w4(L.h[cc], k & 3);
        if (k < 4) {
            lo |= H & 0x30303030u;
            hi |= (H >> 2) & 0x30303030u;
        } else {
            lo |= (H << 2) & 0x30303030u;
            hi |= (H << 4) & 0x30303030u;
        }
    }
}

/* Scales of the lane's four sub-blocks s (0: X = c0 low half, 1: X = c0
 * high, 2: X = c0 + 2 low, 3: high) for Q4_K / Q5_K, unpacked word-wise
 * (spec §7 get_scale_min_k4 with j = 2c0, 2c0 + 1, 2c0 + 4, 2c0 + 5). */
template <class V4>
KQ_HD void kq_scales_k4(const V4 &m, int c0, int sc[4], int mn[4]) {
    const int sh = 16 * c0;
    const uint32_t Y = m.y >> sh, Z = m.z >> sh, W = m.w >> sh;
    sc[0] = (int)(Y & 63);
    sc[1] = (int)((Y >> 8) & 63);
    mn[0] = (int)(Z & 63);
    mn[1] = (int)((Z >> 8) & 63);
    sc[2] = (int)((W & 15) | ((Y >> 2) & 0x30));
    sc[3] = (int)(((W >> 8) & 15) | ((Y >> 10) & 0x30));
    mn[2] = (int)(((W >> 4) & 15) | ((Z >> 2) & 0x30));
    mn[3] = (int)(((W >> 12) & 15) | ((Z >> 10) & 0x30));
}

/* The Q6_K scale of group t (0..3) of chunk cc: byte 4cc + t of (m.x, m.y). */
template <class V4>
KQ_HD int kq_scale_q6(const V4 &m, int cc, int t) {
    const uint32_t w = cc ? m.y : m.x;
    return (int)(int8_t)(w >> (8 * t));
}

/* ---- fast lane: int8 activations ----------------------------------------------------
 * Per lane-block the staged activations: xq (int8 of the lane's 128
 * weights: xa[cc][t] = weights 64X + 16t .. +15) and the record
 *   dx[4cc + t]  scale of group 4X + t (x~ = dx * q),
 *   S[2cc + s]   sum of x~ over sub-block 2X + s (the K-quant min term),
 *   asum[4cc+t]  sum of the int8 q of the group (Q6_K's -32 offset). */
typedef struct kq_act {
    kq_u4 xa[2][4];
    float dx[8];
    float S[4];
    int asum[8];
} kq_act;

template <uint32_t TYPE, class V4, class A>
KQ_HD float kq_dot_fast(const KqLane<V4> &L, int c0, const A &x) {
    float acc = 0.f;
    if (TYPE == MU_TYPE_Q6_K) {
        const float d = kq_h2f(L.d);
KQ_UNROLL
        for (int cc = 0; cc < 2; cc++) {
            int is[4] = {0, 0, 0, 0};
KQ_UNROLL
            for (int k = 0; k < 8; k++) {
                uint32_t lo, hi;
                kq_values<TYPE>(L, cc, k, lo, hi);
                is[k >> 2] = kq_dp4a(lo, kq_w4(x.xa[cc][k >> 2], k & 3), is[k >> 2]);
                is[2 + (k >> 2)] = kq_dp4a(hi, kq_w4(x.xa[cc][2 + (k >> 2)], k & 3), is[2 + (k >> 2)]);
            }
KQ_UNROLL
            for (int t = 0; t < 4; t++) {
                const int v = is[t] - 32 * x.asum[4 * cc + t];
                acc += (d * (float)kq_scale_q6(L.m, cc, t)) * (x.dx[4 * cc + t] * (float)v);
            }
        }
        return acc;
    }
    /* Q4_K, Q5_K: d * sum(sc * dx * isum) - dmin * sum(m * S) over the sub-blocks */
    const float d = kq_h2f(L.m.x & 0xFFFF), dmin = kq_h2f(L.m.x >> 16);
    int sc[4], mn[4];
    kq_scales_k4(L.m, c0, sc, mn);
    /* Q4_K: the high nibbles stay in place (x16) and 1/16 goes into the sum */
    const float hs = TYPE == MU_TYPE_Q4_K ? 0.0625f : 1.0f;
    float ad = 0.f, am = 0.f;
KQ_UNROLL
    for (int cc = 0; cc < 2; cc++) {
        int is[4] = {0, 0, 0, 0};
KQ_UNROLL
        for (int k = 0; k < 8; k++) {
            uint32_t lo, hi;
            if (TYPE == MU_TYPE_Q4_K) {
                const uint32_t w = kq_qword(L, cc, k);
                lo = w & 0x0F0F0F0Fu;
                hi = w & 0xF0F0F0F0u;
                is[k >> 2] = kq_dp4a(lo, kq_w4(x.xa[cc][k >> 2], k & 3), is[k >> 2]);
                is[2 + (k >> 2)] = kq_dp4a_us(hi, kq_w4(x.xa[cc][2 + (k >> 2)], k & 3), is[2 + (k >> 2)]);
            } else {
                kq_values<TYPE>(L, cc, k, lo, hi);
                is[k >> 2] = kq_dp4a(lo, kq_w4(x.xa[cc][k >> 2], k & 3), is[k >> 2]);
                is[2 + (k >> 2)] = kq_dp4a(hi, kq_w4(x.xa[cc][2 + (k >> 2)], k & 3), is[2 + (k >> 2)]);
            }
        }
        const float f_lo = x.dx[4 * cc + 0] * (float)is[0] + x.dx[4 * cc + 1] * (float)is[1];
        const float f_hi = x.dx[4 * cc + 2] * (float)is[2] + x.dx[4 * cc + 3] * (float)is[3];
        ad += (float)sc[2 * cc] * f_lo + (float)sc[2 * cc + 1] * (hs * f_hi);
        am += (float)mn[2 * cc] * x.S[2 * cc] + (float)mn[2 * cc + 1] * x.S[2 * cc + 1];
    }
    return d * ad - dmin * am;
}

/* ---- exact lane: f32 activations; X(i) returns activation i of the block ---- */
template <uint32_t TYPE, class V4, class XF>
KQ_HD float kq_dot_exact(const KqLane<V4> &L, int c0, const XF &X) {
    float acc = 0.f;
    if (TYPE == MU_TYPE_Q6_K) {
        const float d = kq_h2f(L.d);
KQ_UNROLL
        for (int cc = 0; cc < 2; cc++) {
            const int base = 64 * (c0 + 2 * cc);
            float g[4] = {0.f, 0.f, 0.f, 0.f};
KQ_UNROLL
            for (int k = 0; k < 8; k++) {
                uint32_t lo, hi;
                kq_values<TYPE>(L, cc, k, lo, hi);
KQ_UNROLL
                for (int j = 0; j < 4; j++) {
                    g[k >> 2] += (float)((int)((lo >> (8 * j)) & 0xFF) - 32) * X(base + 4 * k + j);
                    g[2 + (k >> 2)] += (float)((int)((hi >> (8 * j)) & 0xFF) - 32) * X(base + 32 + 4 * k + j);
                }
            }
KQ_UNROLL
            for (int t = 0; t < 4; t++) acc += (d * (float)kq_scale_q6(L.m, cc, t)) * g[t];
        }
        return acc;
    }
    const float d = kq_h2f(L.m.x & 0xFFFF), dmin = kq_h2f(L.m.x >> 16);
    int sc[4], mn[4];
    kq_scales_k4(L.m, c0, sc, mn);
KQ_UNROLL
    for (int cc = 0; cc < 2; cc++) {
        const int base = 64 * (c0 + 2 * cc);
        float q0 = 0.f, x0 = 0.f, q1 = 0.f, x1 = 0.f;
KQ_UNROLL
        for (int k = 0; k < 8; k++) {
            uint32_t lo, hi;
            kq_values<TYPE>(L, cc, k, lo, hi);
KQ_UNROLL
            for (int j = 0; j < 4; j++) {
                const float xl = X(base + 4 * k + j), xh = X(base + 32 + 4 * k + j);
                q0 += (float)((lo >> (8 * j)) & 0xFF) * xl;
                x0 += xl;
                q1 += (float)((hi >> (8 * j)) & 0xFF) * xh;
                x1 += xh;
            }
        }
        acc += d * ((float)sc[2 * cc] * q0 + (float)sc[2 * cc + 1] * q1) -
               dmin * ((float)mn[2 * cc] * x0 + (float)mn[2 * cc + 1] * x1);
    }
    return acc;
}

/* ---- dequantization: the lane-block's 128 weights, bit-exact with the CPU ----
 * put(i, v): weight i of the block (0..255) has value v. */
template <uint32_t TYPE, class V4, class PUT>
KQ_HD void kq_dequant(const KqLane<V4> &L, int c0, const PUT &put) {
    if (TYPE == MU_TYPE_Q6_K) {
        const float d = kq_h2f(L.d);
        for (int cc = 0; cc < 2; cc++) {
            const int base = 64 * (c0 + 2 * cc);
            float ds[4];
            for (int t = 0; t < 4; t++) ds[t] = kq_mul(d, (float)kq_scale_q6(L.m, cc, t));
            for (int k = 0; k < 8; k++) {
                uint32_t lo, hi;
                kq_values<TYPE>(L, cc, k, lo, hi);
                for (int j = 0; j < 4; j++) {
                    put(base + 4 * k + j, kq_mul(ds[k >> 2], (float)((int)((lo >> (8 * j)) & 0xFF) - 32)));
                    put(base + 32 + 4 * k + j, kq_mul(ds[2 + (k >> 2)], (float)((int)((hi >> (8 * j)) & 0xFF) - 32)));
                }
            }
        }
        return;
    }
    const float d = kq_h2f(L.m.x & 0xFFFF), dmin = kq_h2f(L.m.x >> 16);
    int sc[4], mn[4];
    kq_scales_k4(L.m, c0, sc, mn);
    for (int cc = 0; cc < 2; cc++) {
        const int base = 64 * (c0 + 2 * cc);
        /* the CPU's order: d1 = d * sc, m1 = dmin * m, y = d1 * q - m1 */
        const float d0 = kq_mul(d, (float)sc[2 * cc]), m0 = kq_mul(dmin, (float)mn[2 * cc]);
        const float d1 = kq_mul(d, (float)sc[2 * cc + 1]), m1 = kq_mul(dmin, (float)mn[2 * cc + 1]);
        for (int k = 0; k < 8; k++) {
            uint32_t lo, hi;
            kq_values<TYPE>(L, cc, k, lo, hi);
            for (int j = 0; j < 4; j++) {
                put(base + 4 * k + j, kq_sub(kq_mul(d0, (float)((lo >> (8 * j)) & 0xFF)), m0));
                put(base + 32 + 4 * k + j, kq_sub(kq_mul(d1, (float)((hi >> (8 * j)) & 0xFF)), m1));
            }
        }
    }
}

#endif
