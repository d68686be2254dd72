/* cu_device.cuh — device helpers shared by the CUDA kernels: programmatic
 * dependent launch, clusters, streaming loads, warp and block reductions,
 * int8 activation blocks, the step records, QK-norm + RoPE of a head, and
 * the launch helpers. The weight decoders are in cu_units.cuh (unit
 * formats) and cu_kq.cuh (K-quants).
 */
#ifndef MU_CU_DEVICE_CUH
#define MU_CU_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda/cu_attn.h"
#include "cuda/cu_shared.h"

#define MU_WARP 32
#define MU_FULL 0xffffffffu

/* ---- Hopper-only instructions: where each is compiled --------------------------
 * Every target from sm_80 compiles these sources (CMakeLists.txt,
 * MUSER_CUDA_ARCHS). The instructions of sm_90 (griddepcontrol, clusters,
 * bulk copies) are emitted only where __CUDA_ARCH__ >= 900; below it:
 * - PDL: nothing. A grid launched without the attribute starts after its
 *   predecessor has completed, so the wait has nothing to wait for; the
 *   host never sets the attribute there (cuda_features.c).
 * - clusters: a trap. The host launches a cluster kernel only where the
 *   device and the loaded code have clusters (mu_cu_exec.clusters, checked
 *   again in launch_pdl_cluster): reaching one without them is a route
 *   error, and routes fail closed.
 * - the bulk L2 prefetch: nothing (a hint). */
#if __CUDA_ARCH__ >= 900
#define MU_CU_HOPPER_CODE 1
#else
#define MU_CU_HOPPER_CODE 0
#endif

/* ---- programmatic dependent launch ------------------------------------------
 * wait: blocks until the grids this one depends on have completed and their
 * writes are visible (a no-op when launched without the attribute).
 * trigger: lets the next grid in the stream start launching now. */
__device__ __forceinline__ void pdl_wait() {
#if MU_CU_HOPPER_CODE
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if MU_CU_HOPPER_CODE
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* ---- clusters: a block's shared memory written by its peer --------------------
 * Paired staging (MvLaunch.pair, cu_matvec.cu): the two blocks of a cluster each load
 * half of a launch's activations from L2 and store them into both blocks'
 * shared memory. arrive/wait alternate per thread; every thread of both
 * blocks takes part (the forms without .aligned: callers leave loops that
 * diverged). */
#if MU_CU_HOPPER_CODE
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
#else /* no clusters: a cluster kernel reached here is a route error (the header's note) */
__device__ __forceinline__ unsigned cluster_rank() {
    __trap();
    return 0;
}
__device__ __forceinline__ void cluster_arrive_relaxed() { __trap(); }
__device__ __forceinline__ void cluster_wait() { __trap(); }
__device__ __forceinline__ void cluster_sync_all() { __trap(); }
__device__ __forceinline__ uint32_t cluster_peer_addr(const void *, unsigned) {
    __trap();
    return 0;
}
__device__ __forceinline__ void st_cluster(uint32_t, uint4) { __trap(); }
__device__ __forceinline__ void st_cluster(uint32_t, float2) { __trap(); }
#endif

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
#if MU_CU_HOPPER_CODE
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
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

/* Word k of a 16-byte vector (k a constant after unrolling). */
__device__ __forceinline__ uint32_t word_of(const uint4 &v, int k) {
    return k == 0 ? v.x : (k == 1 ? v.y : (k == 2 ? v.z : v.w));
}

/* A 32-bit hash of three words (device-side sampling, random fills). */
__device__ __forceinline__ uint32_t hash32(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t h = a * 0x9E3779B1u ^ (b + 0x7F4A7C15u) * 0x85EBCA77u ^ c * 0xC2B2AE3Du;
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    h *= 0x846CA68Bu;
    h ^= h >> 16;
    return h;
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

/* Token t's K or V plane: its own in a batched step of several sessions. */
__device__ __forceinline__ void *token_plane(void *plane, void *const *rows, int t) { return rows ? rows[t] : plane; }

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
    void *const kplane = token_plane(a.kc, a.kc_rows, t), *const vplane = token_plane(a.vc, a.vc_rows, t);
    if (a.kv_f32) {
        *reinterpret_cast<float4 *>((float *)kplane + off) = make_float4(x[0], x[1], x[2], x[3]);
    } else {
        uint16_t *kc = (uint16_t *)kplane + off;
        kc[0] = f32_to_f16(x[0]), kc[1] = f32_to_f16(x[1]), kc[2] = f32_to_f16(x[2]), kc[3] = f32_to_f16(x[3]);
    }
    if (!with_v) return;
    if (a.kv_f32) {
        *reinterpret_cast<float4 *>((float *)vplane + off) = v;
    } else {
        uint16_t *vc = (uint16_t *)vplane + off;
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

/* The current device's SM count and shared memory (what a block may opt
 * in to, what an SM has), read once per device: launchers size their
 * grids and shared-memory stages by them. */
typedef struct mu_cu_shape {
    int sms, smem_block, smem_sm;
} mu_cu_shape;
static inline cudaError_t device_shape(mu_cu_shape *out) {
    static mu_cu_shape known[MU_CU_MAX_DEVICES];
    int dev = 0;
    cudaError_t e = current_device(&dev);
    if (e != cudaSuccess) return e;
    mu_cu_shape s = known[dev];
    if (!s.sms) {
        e = cudaDeviceGetAttribute(&s.smem_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&s.smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&s.sms, cudaDevAttrMultiProcessorCount, dev);
        if (e != cudaSuccess) return e;
        known[dev] = s;
    }
    *out = s;
    return cudaSuccess;
}

/* Launches on x's stream, with the programmatic-serialization attribute
 * when x->pdl (the kernel may start while its predecessor drains);
 * cluster_x > 1: in clusters of that many blocks along x, refused where
 * x->clusters is off (the device or the loaded code has none, or the
 * portable paths are forced). */
template <typename... KArgs, typename... Args>
static cudaError_t launch_pdl_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                      const mu_cu_exec *x, int cluster_x, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = x->stream;
    cudaLaunchAttribute attr[2];
    int na = 0;
    if (cluster_x > 1 && !x->clusters) return cudaErrorNotSupported; /* a route error: fail closed */
    if (x->pdl) {
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
static cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, const mu_cu_exec *x,
                              Args... args) {
    return launch_pdl_cluster(kernel, grid, block, smem, x, 1, args...);
}

#endif
