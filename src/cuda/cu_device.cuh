/* cu_device.cuh — device helpers shared by the CUDA kernels: programmatic
 * dependent launch, warp and block reductions, int8 activation blocks, and
 * one decoder per unit format (the K-quants live in cu_kq.cuh).
 *
 * For the unit formats a "unit" is what one lane handles per 16-byte load
 * of the bulk stream: Q8_0: 16 weights; Q4_0: 32 weights (16 low, 16 high nibbles);
 *   F16/BF16: 8 weights; F32: 4 weights.
 * Every decoder offers dot_f32 (exact lane: f32 activations), dot_q8 (fast
 * lane: int8 activations, dp4a) and dequant (to f32 or f16, prefill).
 */
#ifndef MU_CU_DEVICE_CUH
#define MU_CU_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda/cu_shared.h"
#include "cuda/cu_kq.cuh"

#define MU_WARP 32
#define MU_FULL 0xffffffffu

/* ---- programmatic dependent launch ------------------------------------------
 * wait: blocks until the grids this one depends on have completed and their
 * writes are visible (a no-op when launched without the attribute).
 * trigger: lets the next grid in the stream start launching now. */
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

/* ---- clusters: a block's shared memory written by its peer --------------------
 * Paired staging (mu_cu_mv.pair): the two blocks of a cluster each load
 * half of a launch's activations from L2 and store them into both blocks'
 * shared memory. arrive/wait alternate per thread; every thread of both
 * blocks takes part (the forms without .aligned: callers leave loops that
 * diverged). */
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }
/* the peer's stores before it are visible after it */
__device__ __forceinline__ void cluster_sync_all() {
    asm volatile("barrier.cluster.arrive.release;" ::: "memory");
    cluster_wait();
}
/* the address of p (this block's shared memory) in block `rank` of the cluster */
__device__ __forceinline__ uint32_t cluster_peer_addr(const void *p, unsigned rank) {
    uint32_t d;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(d) : "r"((uint32_t)__cvta_generic_to_shared(p)), "r"(rank));
    return d;
}
__device__ __forceinline__ void st_cluster(uint32_t a, uint4 v) {
    asm volatile("st.shared::cluster.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}
__device__ __forceinline__ void st_cluster(uint32_t a, float2 v) {
    asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};" ::"r"(a), "f"(v.x), "f"(v.y) : "memory");
}

/* An L2 policy that makes the lines a load brings in the first to be
 * evicted: weight bytes are read once per token, and without it the
 * gigabytes streamed through L2 evict the small vectors the serial parts
 * read (the residual, the norm weights, a launch's branch outputs), whose
 * loads then wait on DRAM. Pure, so the compiler shares one per kernel. */
__device__ __forceinline__ uint64_t l2_evict_first() {
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}

/* Streaming 16-byte weight load: read-only path, no L1 allocation (each
 * weight byte is read once per token), evicted first from L2. volatile
 * keeps it before the wait. */
/* 16 bytes read-only, evicted first from L2; L1 the L1 qualifier ("" or
 * ".L1::no_allocate"). */
#define MU_LD_V4_EVICT_FIRST(L1, p, v)                                                                          \
    asm volatile("ld.global.nc" L1 ".L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"                          \
                 : "=r"((v).x), "=r"((v).y), "=r"((v).z), "=r"((v).w)                                          \
                 : "l"(p), "l"(l2_evict_first()))
__device__ __forceinline__ uint4 ld_stream(const void *p) {
    uint4 v;
    MU_LD_V4_EVICT_FIRST(".L1::no_allocate", p, v);
    return v;
}
/* The same for the small per-block weight records (K-quant meta, Q6_K d),
 * which lane pairs share through L1. */
__device__ __forceinline__ uint4 ld_weight16(const void *p) {
    uint4 v;
    MU_LD_V4_EVICT_FIRST("", p, v);
    return v;
}
__device__ __forceinline__ uint2 ld_weight8(const void *p) {
    uint2 v;
    asm volatile("ld.global.nc.L2::cache_hint.v2.u32 {%0,%1}, [%2], %3;" : "=r"(v.x), "=r"(v.y) : "l"(p), "l"(l2_evict_first()));
    return v;
}
__device__ __forceinline__ uint16_t ld_weight2(const void *p) {
    uint16_t v;
    asm volatile("ld.global.nc.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(v) : "l"(p), "l"(l2_evict_first()));
    return v;
}

/* Bulk prefetch of [p, p + bytes) into L2 (sm_90): one instruction pulls a
 * whole upcoming row; p and bytes multiples of 16. */
__device__ __forceinline__ void prefetch_l2_bulk(const void *p, uint32_t bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}
/* The same for a range that need not be 16-byte aligned (rounded outward;
 * every stream is allocated with 256-byte padding). */
__device__ __forceinline__ void prefetch_l2_range(const void *p, uint64_t bytes) {
    const uint64_t a = (uint64_t)p & ~(uint64_t)15, e = ((uint64_t)p + bytes + 15) & ~(uint64_t)15;
    if (e > a) prefetch_l2_bulk((const void *)a, (uint32_t)(e - a));
}

/* Brings the line holding p toward the SM (no register; a hint). */
__device__ __forceinline__ void prefetch_l1(const void *p) { asm volatile("prefetch.global.L1 [%0];" ::"l"(p)); }

/* silu(g) * u: the FFN's product, the same bits wherever it is formed */
__device__ __forceinline__ float swiglu1(float g, float u) { return g / (1.0f + expf(-g)) * u; }

/* D += A B on tensor cores: m16n8k16, f16 inputs, f32 accumulators (the
 * fragment layouts of the PTX ISA's mma.m16n8k16). */
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
}

/* 16 bytes global -> shared, asynchronous; zeros when !on (nothing read). */
__device__ __forceinline__ void cp_async16(uint4 *dst, const void *src, bool on) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(on ? 16 : 0) : "memory");
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(MU_FULL, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(MU_FULL, v, o));
    return v;
}
/* Sum over the 16 lanes of each half-warp. */
__device__ __forceinline__ float half_warp_sum(float v) {
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(MU_FULL, v, o);
    return v;
}

/* Sum over the whole block, returned to every thread. red: >= 33 floats of
 * shared memory; the leading barrier makes back-to-back calls safe. */
__device__ __forceinline__ float block_sum(float v, float *red) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* (earlier readers of red are done) */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    /* every warp sums the warps' sums in the same order (the same bits
     * everywhere; one barrier fewer than a broadcast) */
    return warp_sum(lane < nw ? red[lane] : 0.0f);
}

__device__ __forceinline__ float f16_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ uint16_t f32_to_f16(float f) { return __half_as_ushort(__float2half_rn(f)); }
__device__ __forceinline__ float bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* Quantizes 32 values held one per lane as two groups of 16 (the fast
 * lane's activation format): per group d = amax/127, q = round(x/d), and
 * d * sum(q). q, ds: the 32 values' base. */
__device__ __forceinline__ void quantize_block_warp(float x, int8_t *q, float *ds) {
    const int lane = threadIdx.x & 31;
    float amax = fabsf(x);
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(MU_FULL, amax, o));
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    const int qi = (int)roundf(x * id);
    q[lane] = (int8_t)qi;
    /* d * sum(q), not sum(x): the K-quant min term then sees the same
     * rounded activations as the scale term, and their errors cancel
     * (measured: half the KL of sum(x) on Q4_K models) */
    const float s = d * half_warp_sum((float)qi);
    if ((lane & 15) == 0) {
        ds[(lane >> 4) * 2 + 0] = d;
        ds[(lane >> 4) * 2 + 1] = s;
    }
}

/* tanh without the approximate instruction fast-math may pick: the logits'
 * soft-cap must agree with the CPU to ~1e-6. */
__device__ __forceinline__ float tanh_precise(float x) {
    const float ax = fabsf(x);
    if (ax < 0.125f) {
        const float x2 = x * x;
        return x * (1.0f - x2 * (0.33333333f - x2 * (0.13333333f - x2 * 0.053968254f)));
    }
    const float e = expf(-2.0f * ax);
    return copysignf((1.0f - e) / (1.0f + e), x);
}

/* ---- unit-format decoders (K-quants: cu_kq.cuh) ------------------------------------ */

__device__ __forceinline__ uint32_t word_of(const uint4 &v, int k) {
    return k == 0 ? v.x : (k == 1 ? v.y : (k == 2 ? v.z : v.w));
}

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

/* ---- step records ------------------------------------------------------------------ */
__device__ __forceinline__ const mu_cu_rec_hdr *rec_hdr(const mu_cu_recs &r, int t) {
    return reinterpret_cast<const mu_cu_rec_hdr *>(r.base + (int64_t)t * r.stride);
}
__device__ __forceinline__ mu_cu_rec_layer rec_layer(const mu_cu_recs &r, int t, int layer) {
    const int4 v = *reinterpret_cast<const int4 *>(r.base + (int64_t)t * r.stride + sizeof(mu_cu_rec_hdr) +
                                                   (int64_t)layer * sizeof(mu_cu_rec_layer));
    mu_cu_rec_layer l;
    l.slot = v.x;
    l.n_visible = v.y;
    l.phys_first = v.z;
    l.route = v.w;
    return l;
}
__device__ __forceinline__ const float *rec_rope(const mu_cu_recs &r, int t, int base_index) {
    return reinterpret_cast<const float *>(r.base + (int64_t)t * r.stride + sizeof(mu_cu_rec_hdr) +
                                           (int64_t)r.n_layer * sizeof(mu_cu_rec_layer)) +
           (int64_t)base_index * r.n_rot;
}

/* The physical slot of visible row i of a layer's span: contiguous spans
 * by plain offsets, wrapped rings through the explicit origin. */
__device__ __forceinline__ int64_t row_slot(const mu_cu_rec_layer &lt, int64_t i, int64_t capacity) {
    int64_t s = (int64_t)lt.phys_first + i;
    if (lt.route != MU_CU_ROUTE_CONTIGUOUS && s >= capacity) s -= capacity;
    return s;
}

/* QK-norm + RoPE of one head of token t (hh < n_head: query head hh; else
 * KV head hh - n_head, and with_v: its raw V row into v) by one warp; lane
 * holds dims 4 lane .. 4 lane + 3 in x; buf: 128 floats of the warp's
 * shared memory. Inputs written by other blocks are read through L2.
 * In two steps: the raw rows (every load that depends on the projections),
 * then the norm and the rotation with the norm weights nw (NULL: none) and
 * the position's cos/sin table cs (which a caller may have staged). */
__device__ __forceinline__ void qkv_post_raw(const mu_cu_qkv_post &a, int t, int hh, bool with_v, float x[4],
                                             float4 &v) {
    const int lane = threadIdx.x & 31;
    const bool isq = hh < a.n_head;
    const int head = isq ? hh : hh - a.n_head;
    const float *src = isq ? a.q + (int64_t)t * a.q_stride + head * 128 : a.k + (int64_t)t * a.kv_stride + head * 128;
    const float *vsrc = a.v + (int64_t)t * a.kv_stride + head * 128;
    const bool want_v = !isq && with_v;
    {
        const float4 r = __ldcg(reinterpret_cast<const float4 *>(src) + lane);
        x[0] = r.x, x[1] = r.y, x[2] = r.z, x[3] = r.w;
    }
    /* V in the same round as the rest (a load after the K stores would wait for them) */
    v = want_v ? __ldcg(reinterpret_cast<const float4 *>(vsrc) + lane) : make_float4(0.f, 0.f, 0.f, 0.f);
    /* the matvec's batch parts, a matrix's rows apart, added in order */
    const int64_t part_rows = (int64_t)(isq ? a.n_head : a.n_head_kv) * 128;
    for (int p = 1; p < a.parts; p++) {
        const float4 r = __ldcg(reinterpret_cast<const float4 *>(src + p * part_rows) + lane);
        x[0] += r.x, x[1] += r.y, x[2] += r.z, x[3] += r.w;
        if (want_v) {
            const float4 w = __ldcg(reinterpret_cast<const float4 *>(vsrc + p * part_rows) + lane);
            v.x += w.x, v.y += w.y, v.z += w.z, v.w += w.w;
        }
    }
}
__device__ __forceinline__ void qkv_post_finish(const mu_cu_qkv_post &a, float *buf, const float *nw, const float *cs,
                                                float x[4]) {
    const int lane = threadIdx.x & 31;
    if (nw) {
        const float ss = warp_sum(x[0] * x[0] + x[1] * x[1] + x[2] * x[2] + x[3] * x[3]);
        const float r = 1.0f / sqrtf(ss / 128.0f + a.eps);
#pragma unroll
        for (int j = 0; j < 4; j++) x[j] = (x[j] * r) * nw[4 * lane + j];
    }
    if (a.use_rope) {
        const int half = a.n_rot / 2;
        if (!a.neox) {
#pragma unroll
            for (int p = 0; p < 2; p++) {
                const int i = 2 * lane + p; /* pair (2i, 2i+1) = (x[2p], x[2p+1]) */
                if (i < half) {
                    const float c = cs[2 * i], s = cs[2 * i + 1];
                    const float x0 = x[2 * p], x1 = x[2 * p + 1];
                    x[2 * p] = x0 * c - x1 * s;
                    x[2 * p + 1] = x0 * s + x1 * c;
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++) buf[4 * lane + j] = x[j];
            __syncwarp();
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int d = 4 * lane + j;
                if (d < a.n_rot) {
                    if (d < half) {
                        const float c = cs[2 * d], s = cs[2 * d + 1];
                        x[j] = buf[d] * c - buf[d + half] * s;
                    } else {
                        const int i = d - half;
                        const float c = cs[2 * i], s = cs[2 * i + 1];
                        x[j] = buf[i] * s + buf[d] * c;
                    }
                }
            }
        }
    }
}
__device__ __forceinline__ void qkv_post_values(const mu_cu_qkv_post &a, int t, int hh, float *buf, bool with_v,
                                                float x[4], float4 &v) {
    qkv_post_raw(a, t, hh, with_v, x, v);
    const bool isq = hh < a.n_head;
    qkv_post_finish(a, buf, isq ? a.q_norm : a.k_norm, a.use_rope ? rec_rope(a.recs, t, a.base_index) : nullptr, x);
}

/* Stores what qkv_post_values computed: a query head into qn; a KV head
 * appended to the K plane (and with_v, V to the V plane) at the token's slot. */
__device__ __forceinline__ void qkv_post_store(const mu_cu_qkv_post &a, int t, int hh, const float x[4],
                                               const float4 &v, bool with_v) {
    const int lane = threadIdx.x & 31;
    const bool isq = hh < a.n_head;
    const int head = isq ? hh : hh - a.n_head;
    if (isq) {
        float4 o = make_float4(x[0], x[1], x[2], x[3]);
        reinterpret_cast<float4 *>(a.qn + ((int64_t)t * a.n_head + head) * 128)[lane] = o;
        return;
    }
    const mu_cu_rec_layer lt = rec_layer(a.recs, t, a.layer);
    const int64_t off = (int64_t)lt.slot * a.n_head_kv * 128 + head * 128 + 4 * lane;
    if (a.kv_f32) {
        *reinterpret_cast<float4 *>((float *)a.kc + off) = make_float4(x[0], x[1], x[2], x[3]);
    } else {
        uint16_t *kc = (uint16_t *)a.kc + off;
        kc[0] = f32_to_f16(x[0]), kc[1] = f32_to_f16(x[1]), kc[2] = f32_to_f16(x[2]), kc[3] = f32_to_f16(x[3]);
    }
    if (!with_v) return;
    if (a.kv_f32) {
        *reinterpret_cast<float4 *>((float *)a.vc + off) = v;
    } else {
        uint16_t *vc = (uint16_t *)a.vc + off;
        vc[0] = f32_to_f16(v.x), vc[1] = f32_to_f16(v.y), vc[2] = f32_to_f16(v.z), vc[3] = f32_to_f16(v.w);
    }
}

/* Both: one head of token t normalized, roped and stored. */
__device__ __forceinline__ void qkv_post_head(const mu_cu_qkv_post &a, int t, int hh, float *buf, bool with_v) {
    float x[4];
    float4 v;
    qkv_post_values(a, t, hh, buf, with_v, x, v);
    qkv_post_store(a, t, hh, x, v, with_v);
}

/* mu_splitk_owned (kv.c) on the device: whole 32-row blocks per worker. */
__device__ __forceinline__ void splitk_owned(int64_t n_rows, int n_workers, int w, int64_t &first, int64_t &count) {
    first = 0;
    count = 0;
    if (n_rows <= 0 || n_workers <= 0 || w < 0 || w >= n_workers) return;
    const int64_t blocks = (n_rows + 31) / 32;
    const int64_t per = blocks / n_workers, extra = blocks % n_workers;
    const int64_t b0 = w * per + (w < extra ? w : extra);
    const int64_t nb = per + (w < extra ? 1 : 0);
    first = b0 * 32;
    int64_t end = (b0 + nb) * 32;
    if (end > n_rows) end = n_rows;
    count = end > first ? end - first : 0;
}

/* The current device's index for per-device caches (tensor parallel: one
 * process drives several GPUs). */
#define MU_CU_MAX_DEVICES 64
static inline cudaError_t current_device(int *dev) {
    const cudaError_t e = cudaGetDevice(dev);
    if (e != cudaSuccess) return e;
    return *dev < 0 || *dev >= MU_CU_MAX_DEVICES ? cudaErrorInvalidDevice : cudaSuccess;
}

/* Launches with the programmatic-serialization attribute when PDL is on
 * (mu_cu_set_pdl): the kernel may start while its predecessor drains;
 * cluster_x > 1: in clusters of that many blocks along x. */
template <typename... KArgs, typename... Args>
static cudaError_t launch_pdl_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                      int cluster_x, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[2];
    int na = 0;
    if (mu_cu_get_pdl()) {
        attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[na++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster_x > 1) { /* blocks i C .. i C + C - 1 form cluster i */
        attr[na].id = cudaLaunchAttributeClusterDimension;
        attr[na].val.clusterDim.x = (unsigned)cluster_x;
        attr[na].val.clusterDim.y = 1;
        attr[na++].val.clusterDim.z = 1;
    }
    cfg.attrs = attr;
    cfg.numAttrs = (unsigned)na;
    return cudaLaunchKernelEx(&cfg, kernel, args...);
}
template <typename... KArgs, typename... Args>
static cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                              Args... args) {
    return launch_pdl_cluster(kernel, grid, block, smem, s, 1, args...);
}

#endif
