/* cu_units.cuh — the weight decoders of the unit formats, and the include
 * that brings every weight format (the K-quants are in cu_kq.cuh).
 *
 * A "unit" is what one lane handles per 16-byte load of the bulk stream:
 * Q8_0: 16 weights; Q4_0: 32 weights (16 low, 16 high nibbles); the
 * integer-view formats: a 32-weight block or sub-block (Q4_1, Q5_0, Q5_1,
 * IQ4_NL, IQ4_XS) or a quarter of a Q2_K/Q3_K superblock (64 weights);
 * F16/BF16: 8 weights; F32: 4 weights. Every decoder offers dot_f32 (exact
 * lane: f32 activations), dot_q8 (fast lane: int8 activations, dp4a) and
 * dequant (to f32 or f16: prefill, the embedding).
 */
#ifndef MU_CU_UNITS_CUH
#define MU_CU_UNITS_CUH

#include "cuda/cu_device.cuh"
#include "cuda/cu_kq.cuh"

/* Stores a dequantized value as f32 or f16. */
__device__ __forceinline__ void put(float *dst, int64_t i, float v) { dst[i] = v; }
__device__ __forceinline__ void put(uint16_t *dst, int64_t i, float v) { dst[i] = f32_to_f16(v); }

/* Dot of 16 int8 pairs packed in 4 words each. */
__device__ __forceinline__ int dot16(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3, const int4 &a) {
    int s = __dp4a((int)w0, a.x, 0);
    s = __dp4a((int)w1, a.y, s);
    s = __dp4a((int)w2, a.z, s);
    return __dp4a((int)w3, a.w, s);
}

/* Activation reads: generic loads, so the int8 vector can live in global
 * memory or be staged in shared memory by the matvec kernel. */
__device__ __forceinline__ float2 ld_ds(const mu_cu_act &a, int elem) {
    return *(reinterpret_cast<const float2 *>(a.ds) + (elem >> 4));
}
__device__ __forceinline__ int4 ld_q16(const mu_cu_act &a, int elem) {
    return *reinterpret_cast<const int4 *>(a.q + elem);
}
__device__ __forceinline__ float4 ld_x4(const float *x) { return __ldg(reinterpret_cast<const float4 *>(x)); }
__device__ __forceinline__ float f4(const float4 &v, int i) { return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w)); }

/* A row's stream bases, computed once per row; units index with 32-bit offsets. */
struct RowCtx {
    const uint8_t *qs, *qh, *meta;
    const uint16_t *d;
};

/* ---- Q8_0 ---- */
struct TQ80 {
    __device__ static int units(int64_t cols) { return (int)(cols / 16); }
    __device__ static RowCtx row(const mu_cu_weight &w, int64_t r) {
        RowCtx c;
        c.qs = w.qs + r * w.cols;
        c.d = w.d + r * (w.cols / 32);
        c.qh = c.meta = nullptr;
        return c;
    }
    __device__ static const void *ptr(const RowCtx &c, int u) { return c.qs + u * 16; }
    __device__ static void prefetch(const RowCtx &c, int u) {
        if ((u & 63) == 0) prefetch_l1(c.d + (u >> 1));
    }
    struct A {
        int4 a0;
        float d0;
    };
    __device__ static A act(int u, const mu_cu_act &a) {
        A r;
        r.a0 = ld_q16(a, u * 16), r.d0 = ld_ds(a, u * 16).x;
        return r;
    }
    __device__ static float dot_a(const RowCtx &rc, int u, const uint4 &v, const A &x) {
        const int i = dot16(v.x, v.y, v.z, v.w, x.a0);
        return f16_to_f32(__ldg(rc.d + (u >> 1))) * x.d0 * (float)i;
    }
    __device__ static float dot_q8(const RowCtx &rc, int u, const uint4 &v, const mu_cu_act &a) {
        return dot_a(rc, u, v, act(u, a));
    }
    __device__ static float dot_f32(const RowCtx &rc, int u, const uint4 &v, const mu_cu_act &a) {
        const int e0 = u * 16;
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t wd = word_of(v, k);
            const float4 x = ld_x4(a.x + e0 + 4 * k);
#pragma unroll
            for (int i = 0; i < 4; i++) s += (float)(int8_t)((wd >> (8 * i)) & 0xFF) * f4(x, i);
        }
        return f16_to_f32(__ldg(rc.d + (u >> 1))) * s;
    }
    template <class O>
    __device__ static void dequant(const RowCtx &rc, int u, const uint4 &v, O *dst) {
        const float d = f16_to_f32(__ldg(rc.d + (u >> 1)));
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                put(dst, u * 16 + 4 * k + i, __fmul_rn((float)(int8_t)((word_of(v, k) >> (8 * i)) & 0xFF), d));
    }
};

/* ---- Q4_0 ---- */
struct TQ40 {
    __device__ static int units(int64_t cols) { return (int)(cols / 32); }
    __device__ static RowCtx row(const mu_cu_weight &w, int64_t r) {
        RowCtx c;
        c.qs = w.qs + r * (w.cols / 32 * 16);
        c.d = w.d + r * (w.cols / 32);
        c.qh = c.meta = nullptr;
        return c;
    }
    __device__ static const void *ptr(const RowCtx &c, int u) { return c.qs + u * 16; }
    __device__ static void prefetch(const RowCtx &c, int u) {
        if ((u & 63) == 0) prefetch_l1(c.d + u);
    }
    struct A {
        int4 a0, a1;
        float d0, d1;
    };
    __device__ static A act(int u, const mu_cu_act &a) {
        A r;
        r.a0 = ld_q16(a, u * 32), r.a1 = ld_q16(a, u * 32 + 16);
        r.d0 = ld_ds(a, u * 32).x, r.d1 = ld_ds(a, u * 32 + 16).x;
        return r;
    }
    __device__ static float dot_a(const RowCtx &rc, int u, const uint4 &v, const A &x) {
        const uint32_t L = 0x0F0F0F0Fu, E = 0x08080808u;
        const int i0 = dot16(__vsub4(v.x & L, E), __vsub4(v.y & L, E), __vsub4(v.z & L, E), __vsub4(v.w & L, E), x.a0);
        const int i1 = dot16(__vsub4((v.x >> 4) & L, E), __vsub4((v.y >> 4) & L, E), __vsub4((v.z >> 4) & L, E),
                             __vsub4((v.w >> 4) & L, E), x.a1);
        return f16_to_f32(__ldg(rc.d + u)) * (x.d0 * (float)i0 + x.d1 * (float)i1);
    }
    __device__ static float dot_q8(const RowCtx &rc, int u, const uint4 &v, const mu_cu_act &a) {
        return dot_a(rc, u, v, act(u, a));
    }
    __device__ static float dot_f32(const RowCtx &rc, int u, const uint4 &v, const mu_cu_act &a) {
        const int e0 = u * 32;
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t wd = word_of(v, k);
            const float4 xl = ld_x4(a.x + e0 + 4 * k), xh = ld_x4(a.x + e0 + 16 + 4 * k);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                s += (float)((int)((wd >> (8 * i)) & 0xF) - 8) * f4(xl, i);
                s += (float)((int)((wd >> (8 * i + 4)) & 0xF) - 8) * f4(xh, i);
            }
        }
        return f16_to_f32(__ldg(rc.d + u)) * s;
    }
    template <class O>
    __device__ static void dequant(const RowCtx &rc, int u, const uint4 &v, O *dst) {
        const float d = f16_to_f32(__ldg(rc.d + u));
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint32_t wd = word_of(v, k);
                put(dst, u * 32 + 4 * k + i, __fmul_rn((float)((int)((wd >> (8 * i)) & 0xF) - 8), d));
                put(dst, u * 32 + 16 + 4 * k + i, __fmul_rn((float)((int)((wd >> (8 * i + 4)) & 0xF) - 8), d));
            }
    }
};

/* ---- integer-view unit formats: Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K ----
 * The streams after the repack, per block of the file: qs (16 bytes a unit,
 * the file's bytes in the file's order), qh (Q5_x: the 4 fifth-bit bytes;
 * Q3_K: the hmask bits, 8 bytes a unit: bit 16j + l of unit q is bit
 * 4h + j of hmask[16 half + l]), meta (IQ4_XS: the 8 sub-block scales
 * ls (0..63, the weights' scale d * (ls - 32)); Q2_K: the 16 packed scale/min bytes, Q3_K: 16 signed scales
 * u, both in unit order: byte 4q + j belongs to group j of unit q)
 * and d (f16: d, then m or dmin where the format has one). A unit is G
 * groups of 16 weights: G = 2 (a 32-weight block or IQ4_XS sub-block: low
 * nibbles, then high) or G = 4 (a quarter of a Q2_K/Q3_K superblock: the
 * 2-bit fields j = 0..3 of 16 bytes, groups 8h + 2j + half). Scales and
 * offsets are formed as mu_int_block forms them, so the dequantized
 * values are the CPU's to the bit. */
struct IvGeom {
    int block_elems, block_bytes, unit_elems, qh, meta, dh; /* qh, meta: bytes a block; dh: halves a block */
};
__host__ __device__ constexpr IvGeom iv_geom(uint32_t type) {
    return type == MU_TYPE_Q4_1     ? IvGeom{32, 20, 32, 0, 0, 2}
           : type == MU_TYPE_Q5_0   ? IvGeom{32, 22, 32, 4, 0, 1}
           : type == MU_TYPE_Q5_1   ? IvGeom{32, 24, 32, 4, 0, 2}
           : type == MU_TYPE_IQ4_NL ? IvGeom{32, 18, 32, 0, 0, 1}
           : type == MU_TYPE_IQ4_XS ? IvGeom{256, 136, 32, 0, 8, 1}
           : type == MU_TYPE_Q2_K   ? IvGeom{256, 84, 64, 0, 16, 2}
           : type == MU_TYPE_Q3_K   ? IvGeom{256, 110, 64, 32, 16, 1}
                                    : IvGeom{0, 0, 0, 0, 0, 0};
}

/* 4 bits (x < 16) to bit 0 of 4 bytes */
__device__ __forceinline__ uint32_t spread4(uint32_t x) { return (x * 0x00204081u) & 0x01010101u; }
/* The IQ4 levels (mu_iq4_levels: -127 -104 -83 -65 -49 -35 -22 -10 1 13 25
 * 38 53 69 89 113) of 4 nibble indices, one a byte. */
__device__ __forceinline__ uint32_t iq4_levels4(uint32_t n) {
    /* the 4 indices as the 4 selector nibbles of a byte permute: n0 n1 in
     * byte 0 of n | n >> 4, n2 n3 in its byte 2 */
    const uint32_t sel = __byte_perm(n | (n >> 4), 0u, 0x0020u);
    const uint32_t s7 = sel & 0x7777u; /* (a selector's bit 3 would replicate a sign) */
    const uint32_t lo = __byte_perm(0xBFAD9881u, 0xF6EADDCFu, s7), hi = __byte_perm(0x26190D01u, 0x71594535u, s7);
    return __byte_perm(lo, hi, 0x3210u | ((sel >> 1) & 0x4444u)); /* byte i from hi where index i >= 8 */
}

/* Integers to floats without I2F, a conversion Hopper issues at an eighth
 * of the FP32 rate (measured: no change in decode speed against I2F, kept
 * as it costs nothing): the value in the mantissa of 1.5 * 2^23, exact for
 * |v| < 2^22 (a group's dp4a sum is below 2^18). */
#define IV_MAGIC 0x4B400000
__device__ __forceinline__ float iv_magic_float(int biased) { return __int_as_float(biased) - 12582912.0f; }
/* v - bias for v in 0..255 */
__device__ __forceinline__ float iv_small_float(uint32_t v, int bias) {
    return __int_as_float(IV_MAGIC | (int)v) - (12582912.0f + (float)bias);
}

/* Group j of unit u: its first element in the row, its 16 values (int8, 4
 * a word), its scale and offset. */
struct IvGroup {
    int e;
    uint32_t q[4];
    float s, o;
};

/* What a unit needs besides its 16 qs bytes, loaded with them (the
 * matvec issues a batch's side loads beside its stream loads, so a batch
 * waits on memory once): d (f16, and m or dmin in the high half), the
 * scale bytes, the high bits. */
struct IvSide {
    uint32_t d, meta, qh0, qh1;
};

template <uint32_t TYPE>
struct TIv {
    static constexpr IvGeom G = iv_geom(TYPE);
    static constexpr int GROUPS = G.unit_elems / 16, UPB = G.block_elems / G.unit_elems; /* units a block */
    static constexpr bool OFFSET = TYPE == MU_TYPE_Q4_1 || TYPE == MU_TYPE_Q5_1 || TYPE == MU_TYPE_Q2_K;
    typedef IvSide Side;
    __device__ static int units(int64_t cols) { return (int)(cols / G.unit_elems); }
    __device__ static RowCtx row(const mu_cu_weight &w, int64_t r) {
        const int64_t bpr = w.cols / G.block_elems;
        RowCtx c;
        c.qs = w.qs + r * (w.cols / G.unit_elems) * 16;
        c.qh = G.qh ? w.qh + r * bpr * G.qh : nullptr;
        c.meta = G.meta ? w.meta + r * bpr * G.meta : nullptr;
        c.d = w.d + r * bpr * G.dh;
        return c;
    }
    __device__ static const void *ptr(const RowCtx &c, int u) { return c.qs + u * 16; }
    __device__ static void prefetch(const RowCtx &, int) {}
    __device__ static Side side(const RowCtx &rc, int u) {
        const int b = u / UPB, q = u % UPB;
        Side sd{0u, 0u, 0u, 0u};
        sd.d = G.dh == 2 ? __ldg(reinterpret_cast<const uint32_t *>(rc.d) + b) : (uint32_t)__ldg(rc.d + b);
        if constexpr (TYPE == MU_TYPE_IQ4_XS) sd.meta = __ldg(rc.meta + 8 * b + q);
        if constexpr (GROUPS == 4) sd.meta = __ldg(reinterpret_cast<const uint32_t *>(rc.meta + 16 * b + 4 * q));
        if constexpr (TYPE == MU_TYPE_Q5_0 || TYPE == MU_TYPE_Q5_1) sd.qh0 = __ldg(reinterpret_cast<const uint32_t *>(rc.qh) + b);
        if constexpr (TYPE == MU_TYPE_Q3_K) {
            const uint2 h = __ldg(reinterpret_cast<const uint2 *>(rc.qh + 32 * b + 8 * q));
            sd.qh0 = h.x, sd.qh1 = h.y;
        }
        return sd;
    }
    __device__ static IvGroup group(const Side &sd, int u, const uint4 &v, int j) {
        IvGroup g;
        const float d = f16_to_f32((uint16_t)(sd.d & 0xFFFF));
        g.o = 0.0f;
        if constexpr (GROUPS == 2) {
            g.e = u * 32 + 16 * j;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint32_t nib = (j ? word_of(v, k) >> 4 : word_of(v, k)) & 0x0F0F0F0Fu;
                if constexpr (TYPE == MU_TYPE_Q5_0 || TYPE == MU_TYPE_Q5_1) {
                    const uint32_t v5 = nib | spread4((sd.qh0 >> (16 * j + 4 * k)) & 15u) << 4;
                    g.q[k] = TYPE == MU_TYPE_Q5_0 ? __vsub4(v5, 0x10101010u) : v5;
                } else if constexpr (TYPE == MU_TYPE_IQ4_NL || TYPE == MU_TYPE_IQ4_XS) {
                    g.q[k] = iq4_levels4(nib);
                } else {
                    g.q[k] = nib;
                }
            }
            if constexpr (TYPE == MU_TYPE_IQ4_XS) g.s = d * iv_small_float(sd.meta, 32);
            else g.s = d;
            if constexpr (OFFSET) g.o = f16_to_f32((uint16_t)(sd.d >> 16));
        } else { /* Q2_K, Q3_K: unit q = 2h + half */
            const int b = u / UPB, q = u % UPB, h = q >> 1, half = q & 1;
            g.e = b * 256 + 16 * (8 * h + 2 * j + half);
            const uint32_t sc = (sd.meta >> (8 * j)) & 0xFF;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint32_t low = (word_of(v, k) >> (2 * j)) & 0x03030303u;
                if constexpr (TYPE == MU_TYPE_Q3_K) {
                    const uint32_t hb = ((j < 2 ? sd.qh0 : sd.qh1) >> (16 * (j & 1) + 4 * k)) & 15u;
                    g.q[k] = __vsub4(low | spread4(hb) << 2, 0x04040404u);
                } else {
                    g.q[k] = low;
                }
            }
            if constexpr (TYPE == MU_TYPE_Q3_K) {
                g.s = d * iv_small_float(sc, 32);
            } else {
                g.s = d * iv_small_float(sc & 15, 0);
                g.o = -(f16_to_f32((uint16_t)(sd.d >> 16)) * iv_small_float(sc >> 4, 0));
            }
        }
        return g;
    }
    __device__ static float dot_q8(const RowCtx &, int u, const uint4 &v, const Side &sd, const mu_cu_act &a) {
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < GROUPS; j++) {
            const IvGroup g = group(sd, u, v, j);
            const float2 ds = ld_ds(a, g.e);
            const int4 x = ld_q16(a, g.e);
            int i = __dp4a((int)g.q[0], x.x, IV_MAGIC);
            i = __dp4a((int)g.q[1], x.y, i), i = __dp4a((int)g.q[2], x.z, i), i = __dp4a((int)g.q[3], x.w, i);
            acc += g.s * (ds.x * iv_magic_float(i));
            if (OFFSET) acc += g.o * ds.y;
        }
        return acc;
    }
    __device__ static float dot_f32(const RowCtx &, int u, const uint4 &v, const Side &sd, const mu_cu_act &a) {
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < GROUPS; j++) {
            const IvGroup g = group(sd, u, v, j);
            float sv = 0.f, sx = 0.f;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float4 x = ld_x4(a.x + g.e + 4 * k);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    sv += (float)(int8_t)((g.q[k] >> (8 * i)) & 0xFF) * f4(x, i);
                    if (OFFSET) sx += f4(x, i);
                }
            }
            acc += g.s * sv + (OFFSET ? g.o * sx : 0.0f);
        }
        return acc;
    }
    template <class O>
    __device__ static void dequant(const RowCtx &rc, int u, const uint4 &v, O *dst) {
        const Side sd = side(rc, u);
#pragma unroll
        for (int j = 0; j < GROUPS; j++) {
            const IvGroup g = group(sd, u, v, j);
#pragma unroll
            for (int k = 0; k < 4; k++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float p = __fmul_rn(g.s, (float)(int8_t)((g.q[k] >> (8 * i)) & 0xFF));
                    put(dst, g.e + 4 * k + i, OFFSET ? __fadd_rn(p, g.o) : p);
                }
        }
    }
};

/* ---- float formats: f32 activations in both lanes ---- */
template <int KIND> /* 0: F32, 1: F16, 2: BF16 */
struct TFloat {
    static constexpr int PER = KIND == 0 ? 4 : 8; /* elements per 16 bytes */
    __device__ static int units(int64_t cols) { return (int)(cols / PER); }
    __device__ static RowCtx row(const mu_cu_weight &w, int64_t r) {
        RowCtx c;
        c.qs = w.qs + r * w.cols * (KIND == 0 ? 4 : 2);
        c.qh = c.meta = nullptr;
        c.d = nullptr;
        return c;
    }
    __device__ static const void *ptr(const RowCtx &c, int u) { return c.qs + u * 16; }
    __device__ static void prefetch(const RowCtx &, int) {}
    __device__ static float val(const uint4 &v, int i) {
        if (KIND == 0) return __uint_as_float(word_of(v, i));
        const uint32_t wd = word_of(v, i >> 1);
        const uint16_t h = (uint16_t)((i & 1) ? (wd >> 16) : (wd & 0xFFFF));
        return KIND == 1 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    __device__ static float dot_f32(const RowCtx &rc, int u, const uint4 &v, const mu_cu_act &a) {
        const float *x = a.x + u * PER;
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < PER / 4; k++) {
            const float4 xv = ld_x4(x + 4 * k);
#pragma unroll
            for (int i = 0; i < 4; i++) s += val(v, 4 * k + i) * f4(xv, i);
        }
        return s;
    }
    struct A {
        const mu_cu_act *a;
    };
    __device__ static A act(int u, const mu_cu_act &a) { return A{&a}; }
    __device__ static float dot_a(const RowCtx &rc, int u, const uint4 &v, const A &x) {
        return dot_f32(rc, u, v, *x.a);
    }
    __device__ static float dot_q8(const RowCtx &rc, int u, const uint4 &v, const mu_cu_act &a) {
        return dot_f32(rc, u, v, a);
    }
    template <class O>
    __device__ static void dequant(const RowCtx &rc, int u, const uint4 &v, O *dst) {
#pragma unroll
        for (int i = 0; i < PER; i++) put(dst, u * PER + i, val(v, i));
    }
};

/* Runs BODY with TT = the decoder of a unit format (Q8_0, Q4_0, the
 * integer-view formats, F32, F16, BF16); nothing for other types. */
#define MU_CU_DISPATCH_UNITS(type, BODY)                            \
    switch (type) {                                                 \
    case MU_TYPE_Q8_0: { typedef TQ80 TT; BODY; } break;            \
    case MU_TYPE_Q4_0: { typedef TQ40 TT; BODY; } break;            \
    case MU_TYPE_Q4_1: { typedef TIv<MU_TYPE_Q4_1> TT; BODY; } break;     \
    case MU_TYPE_Q5_0: { typedef TIv<MU_TYPE_Q5_0> TT; BODY; } break;     \
    case MU_TYPE_Q5_1: { typedef TIv<MU_TYPE_Q5_1> TT; BODY; } break;     \
    case MU_TYPE_IQ4_NL: { typedef TIv<MU_TYPE_IQ4_NL> TT; BODY; } break; \
    case MU_TYPE_IQ4_XS: { typedef TIv<MU_TYPE_IQ4_XS> TT; BODY; } break; \
    case MU_TYPE_Q2_K: { typedef TIv<MU_TYPE_Q2_K> TT; BODY; } break;     \
    case MU_TYPE_Q3_K: { typedef TIv<MU_TYPE_Q3_K> TT; BODY; } break;     \
    case MU_TYPE_F32: { typedef TFloat<0> TT; BODY; } break;        \
    case MU_TYPE_F16: { typedef TFloat<1> TT; BODY; } break;        \
    case MU_TYPE_BF16: { typedef TFloat<2> TT; BODY; } break;       \
    default: break;                                                 \
    }

/* ---- K-quant lane-blocks (cu_kq.cuh): loads shared by the matvec, dequantization and embedding ---- */

/* The streams of lane-block (row, b, c0) into registers. */
template <uint32_t TYPE>
__device__ __forceinline__ void kq_load(KqLane<uint4> &L, const mu_cu_weight &w, int64_t row, int b, int c0) {
    const int nb = (int)(w.cols >> 8);
    const int64_t rb = row * nb; /* the row's first block */
    /* load i at q + i * span (the tiles of cu_kq.cuh) */
    const uint8_t *q = w.qs + rb * 128 + kq_qs_off(b, c0, 0, nb);
    const uint32_t span = kq_qs_off(b, c0, 1, nb) - kq_qs_off(b, c0, 0, nb);
#pragma unroll
    for (int i = 0; i < 4; i++) L.q[i] = ld_stream(q + span * i);
    if (TYPE == MU_TYPE_Q6_K) {
        const uint2 m = ld_weight8(reinterpret_cast<const uint2 *>(w.meta + rb * 16) + 2 * b + c0);
        L.m = make_uint4(m.x, m.y, 0u, 0u);
        const uint8_t *qh = w.qh + rb * 64;
        L.h[0] = ld_stream(qh + kq_qh6_off(b, c0, 0, nb));
        L.h[1] = ld_stream(qh + kq_qh6_off(b, c0, 1, nb));
        L.d = ld_weight2(w.d + rb + b);
    } else {
        L.m = ld_weight16(reinterpret_cast<const uint4 *>(w.meta + rb * 16) + b);
        if (TYPE == MU_TYPE_Q5_K) L.h[0] = ld_stream(w.qh + rb * 32 + (uint32_t)b * 32u + 16u * (uint32_t)c0);
    }
}

#endif
