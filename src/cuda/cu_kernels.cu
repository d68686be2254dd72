/* cu_kernels.cu — weight repacking and dequantization, the matvec family
 * with its fused epilogues, the residual/norm tail, the token embedding and
 * small elementwise kernels.
 *
 * Matvec: a persistent grid over a stream of row-dots (one warp per row at a
 * time, rows strided over all warps); 16-byte coalesced weight loads issued a
 * batch ahead of the arithmetic, the first batch before griddepcontrol.wait,
 * so a kernel launched early (PDL) streams its weights while its predecessor
 * finishes. Several matrices over the same input (q, k, v, gate) form one
 * row space and one launch; the epilogues fuse SwiGLU + int8 groups (gate/up),
 * the residual/norm tail (Wo, down), and logit scale + soft-cap + the
 * device-side token choice (LM head).
 */
#include <math.h>

#include "cuda/cu_device.cuh"

#define MV_WARPS 8
#define MV_THREADS (MV_WARPS * 32)
#define MV_NB 4

static bool g_pdl = false;
extern "C" void mu_cu_set_pdl(bool on) { g_pdl = on; }
extern "C" bool mu_cu_get_pdl(void) { return g_pdl; }

/* Launches with the programmatic-serialization attribute when PDL is on. */
template <typename... KArgs, typename... Args>
static cudaError_t launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                          Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = g_pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, args...);
}

/* ---- layouts and repacking -------------------------------------------------------- */

extern "C" bool mu_cu_weight_layout(uint32_t type, int64_t rows, int64_t cols, mu_cu_layout *o) {
    o->qs = o->qh = o->meta = o->d = 0;
    const uint64_t r = (uint64_t)rows;
    switch (type) {
    case MU_TYPE_Q4_K:
        if (cols % 256) return false;
        o->qs = r * (cols / 256) * 128;
        o->meta = r * (cols / 256) * 16;
        return true;
    case MU_TYPE_Q5_K:
        if (cols % 256) return false;
        o->qs = r * (cols / 256) * 128;
        o->qh = r * (cols / 256) * 32;
        o->meta = r * (cols / 256) * 16;
        return true;
    case MU_TYPE_Q6_K:
        if (cols % 256) return false;
        o->qs = r * (cols / 256) * 128;
        o->qh = r * (cols / 256) * 64;
        o->meta = r * (cols / 256) * 16;
        o->d = r * (cols / 256) * 2;
        return true;
    case MU_TYPE_Q8_0:
        if (cols % 32) return false;
        o->qs = r * cols;
        o->d = r * (cols / 32) * 2;
        return true;
    case MU_TYPE_Q4_0:
        if (cols % 32) return false;
        o->qs = r * (cols / 32) * 16;
        o->d = r * (cols / 32) * 2;
        return true;
    case MU_TYPE_F32: if (cols % 4) return false; o->qs = r * cols * 4; return true;
    case MU_TYPE_F16:
    case MU_TYPE_BF16: if (cols % 8) return false; o->qs = r * cols * 2; return true;
    default: return false;
    }
}

extern "C" int32_t mu_cu_units(uint32_t type, int64_t cols) {
    switch (type) {
    case MU_TYPE_Q4_K: case MU_TYPE_Q5_K: case MU_TYPE_Q6_K: return (int32_t)(cols / 256 * 8);
    case MU_TYPE_Q8_0: return (int32_t)(cols / 16);
    case MU_TYPE_Q4_0: return (int32_t)(cols / 32);
    case MU_TYPE_F32: return (int32_t)(cols / 4);
    case MU_TYPE_F16: case MU_TYPE_BF16: return (int32_t)(cols / 8);
    default: return 0;
    }
}

/* One thread per block of the file's layout: bytes move to their streams. */
__global__ void repack_kernel(mu_cu_weight w, const uint8_t *raw, int64_t r0, int64_t nrows) {
    int bpr = 0, bb = 0;
    switch (w.type) {
    case MU_TYPE_Q4_K: bpr = (int)(w.cols / 256), bb = 144; break;
    case MU_TYPE_Q5_K: bpr = (int)(w.cols / 256), bb = 176; break;
    case MU_TYPE_Q6_K: bpr = (int)(w.cols / 256), bb = 210; break;
    case MU_TYPE_Q8_0: bpr = (int)(w.cols / 32), bb = 34; break;
    case MU_TYPE_Q4_0: bpr = (int)(w.cols / 32), bb = 18; break;
    default: return;
    }
    const int64_t total = nrows * bpr;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = r0 + i / bpr, b = i % bpr, gb = row * bpr + b; /* global block index */
        const uint8_t *src = raw + i * bb;
        uint8_t *qs = (uint8_t *)w.qs, *qh = (uint8_t *)w.qh, *meta = (uint8_t *)w.meta;
        uint16_t *d = (uint16_t *)w.d;
        switch (w.type) {
        case MU_TYPE_Q4_K:
            for (int k = 0; k < 16; k++) meta[gb * 16 + k] = src[k];
            for (int k = 0; k < 128; k++) qs[gb * 128 + k] = src[16 + k];
            break;
        case MU_TYPE_Q5_K:
            for (int k = 0; k < 16; k++) meta[gb * 16 + k] = src[k];
            for (int k = 0; k < 32; k++) qh[gb * 32 + k] = src[16 + k];
            for (int k = 0; k < 128; k++) qs[gb * 128 + k] = src[48 + k];
            break;
        case MU_TYPE_Q6_K:
            for (int k = 0; k < 128; k++) qs[gb * 128 + k] = src[k];
            for (int k = 0; k < 64; k++) qh[gb * 64 + k] = src[128 + k];
            for (int k = 0; k < 16; k++) meta[gb * 16 + k] = src[192 + k];
            d[gb] = (uint16_t)(src[208] | (src[209] << 8));
            break;
        case MU_TYPE_Q8_0:
            d[gb] = (uint16_t)(src[0] | (src[1] << 8));
            for (int k = 0; k < 32; k++) qs[gb * 32 + k] = src[2 + k];
            break;
        case MU_TYPE_Q4_0:
            d[gb] = (uint16_t)(src[0] | (src[1] << 8));
            for (int k = 0; k < 16; k++) qs[gb * 16 + k] = src[2 + k];
            break;
        }
    }
}

extern "C" cudaError_t mu_cu_repack(const mu_cu_weight *w, const void *raw, int64_t r0, int64_t nrows, cudaStream_t s) {
    repack_kernel<<<1024, 256, 0, s>>>(*w, (const uint8_t *)raw, r0, nrows);
    return cudaGetLastError();
}

template <class TT, class O>
__device__ void dequant_units(const mu_cu_weight &w, int64_t r0, int64_t nrows, O *dst) {
    const int64_t upr = TT::units(w.cols), total = nrows * upr;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t rr = i / upr;
        const int u = (int)(i % upr);
        const RowCtx rc = TT::row(w, r0 + rr);
        const uint4 v = ld_stream(TT::ptr(rc, u));
        TT::dequant(rc, u, v, dst + rr * w.cols);
    }
}

template <class O>
__global__ void dequant_kernel(const __grid_constant__ mu_cu_weight w, int64_t r0, int64_t nrows, O *dst) {
    MU_CU_DISPATCH(w.type, (dequant_units<TT, O>(w, r0, nrows, dst)));
}

extern "C" cudaError_t mu_cu_dequant(const mu_cu_weight *w, int64_t r0, int64_t nrows, void *dst, bool to_f16,
                                     cudaStream_t s) {
    if (to_f16) dequant_kernel<uint16_t><<<2048, 256, 0, s>>>(*w, r0, nrows, (uint16_t *)dst);
    else dequant_kernel<float><<<2048, 256, 0, s>>>(*w, r0, nrows, (float *)dst);
    return cudaGetLastError();
}

/* ---- the residual / norm tail ----------------------------------------------------------
 * One row of n (a multiple of 32) by one block of 256 threads. Each phase
 * is one round of independent 16-byte loads (no load waits on a store), so
 * the tail costs a few L2 round trips, not one per element: the current h
 * is staged in shared memory; warp w owns 128-element chunks w, w + 8, ...
 * (lane l: elements 4l .. 4l+3 of a chunk) in every phase. Data other
 * blocks or kernels wrote is read through L2. */
#define TAIL_MAXN 8192
#define TAIL_PER (TAIL_MAXN / 1024) /* float4 chunks per thread at most */

/* int8 groups of 16 held 4 per lane (4 lanes a group); q, ds: row base. */
__device__ __forceinline__ void quantize4(const float4 &v, int elem, int8_t *q, float *ds) {
    const unsigned m = __activemask(); /* whole 8-lane groups are active (n % 32 == 0) */
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    amax = fmaxf(amax, __shfl_xor_sync(m, amax, 1)); /* groups of 16 = 4 lanes */
    amax = fmaxf(amax, __shfl_xor_sync(m, amax, 2));
    const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    const int q0 = (int)roundf(v.x * id), q1 = (int)roundf(v.y * id), q2 = (int)roundf(v.z * id), q3 = (int)roundf(v.w * id);
    *reinterpret_cast<uint32_t *>(q + elem) =
        (uint32_t)(q0 & 0xFF) | ((uint32_t)(q1 & 0xFF) << 8) | ((uint32_t)(q2 & 0xFF) << 16) | ((uint32_t)(q3 & 0xFF) << 24);
    float sq = (float)(q0 + q1 + q2 + q3);
    sq += __shfl_xor_sync(m, sq, 1);
    sq += __shfl_xor_sync(m, sq, 2);
    if ((threadIdx.x & 3) == 0) {
        ds[elem / 16 * 2 + 0] = d;
        ds[elem / 16 * 2 + 1] = d * sq;
    }
}

__device__ __forceinline__ float4 f4mul(float4 a, float s) { return make_float4(a.x * s, a.y * s, a.z * s, a.w * s); }
__device__ __forceinline__ float f4dot(float4 a) { return a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w; }

/* The slow path for rows wider than TAIL_MAXN: the same arithmetic in
 * place in global memory. */
__device__ void resnorm_block_wide(const mu_cu_resnorm &rn, int64_t t) {
    __shared__ float red[33];
    const int n = rn.n, nblk = n / 32;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const int64_t off = t * rn.stride;
    float *h = rn.h + off;
    if (rn.embd_norm) {
        float ss = 0.f;
        for (int b = warp; b < nblk; b += nw) {
            const float v = __ldcg(h + b * 32 + lane);
            ss += v * v;
        }
        const float r = 1.0f / sqrtf(block_sum(ss, red) / (float)n + rn.eps_next);
        for (int b = warp; b < nblk; b += nw) h[b * 32 + lane] = __ldcg(h + b * 32 + lane) * r;
    }
    float ss2 = 0.f;
    if (rn.branch) {
        const float *br = rn.branch + off;
        const int np = rn.branch_parts > 1 ? rn.branch_parts : 1;
        auto branch_at = [&](int i) {
            float v = __ldcg(br + i);
            for (int p = 1; p < np; p++) v += __ldcg(br + (int64_t)p * n + i);
            return v;
        };
        float ss = 0.f;
        for (int b = warp; b < nblk; b += nw) {
            const float v = branch_at(b * 32 + lane);
            ss += v * v;
        }
        const float r1 = rn.w_post ? 1.0f / sqrtf(block_sum(ss, red) / (float)n + rn.eps_post) : 1.0f;
        for (int b = warp; b < nblk; b += nw) {
            const int i = b * 32 + lane;
            const float v = branch_at(i);
            const float add = rn.w_post ? (v * r1) * rn.w_post[i] : v;
            const float hv = __ldcg(h + i) + add;
            h[i] = hv;
            ss2 += hv * hv;
        }
    } else {
        for (int b = warp; b < nblk; b += nw) {
            const float v = __ldcg(h + b * 32 + lane);
            ss2 += v * v;
        }
    }
    const float r2 = 1.0f / sqrtf(block_sum(ss2, red) / (float)n + rn.eps_next);
    for (int b = warp; b < nblk; b += nw) {
        const int i = b * 32 + lane;
        float a = __ldcg(h + i) * r2;
        if (rn.w_next) a = a * rn.w_next[i];
        rn.out.x[off + i] = a;
        if (rn.out.h) rn.out.h[off + i] = f32_to_f16(a);
        if (rn.out.q) quantize_block_warp(a, rn.out.q + off + b * 32, rn.out.ds + (off + b * 32) / 16 * 2);
    }
}

__device__ void resnorm_block(const mu_cu_resnorm &rn, int64_t t) {
    __shared__ float red[33];
    __shared__ __align__(16) float sv[TAIL_MAXN];
    if (rn.n > TAIL_MAXN || blockDim.x != 256) {
        resnorm_block_wide(rn, t);
        return;
    }
    const int n = rn.n, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t off = t * rn.stride;
    float *__restrict__ h = rn.h + off;
    const float *__restrict__ br = rn.branch ? rn.branch + off : nullptr;
    const float *__restrict__ wp = rn.w_post;
    const float *__restrict__ wn = rn.w_next;
    float4 *s4 = reinterpret_cast<float4 *>(sv);
#define TAIL_FOR(k, e) \
    _Pragma("unroll") for (int k = 0; k < TAIL_PER; k++) if (const int e = ((warp + 8 * k) * 32 + lane) * 4; e < n)

    /* Round 1: the current h (staged in shared memory) and the branch (in
     * registers), every load independent of every other. Round 2: the norm
     * weights, loaded before any global store (a store through a pointer
     * that may alias would keep later loads from being hoisted, and each
     * would wait on DRAM in turn). Round 3: arithmetic and stores only. */
    const int np = rn.branch_parts > 1 ? rn.branch_parts : 1;
    float ss = 0.f, st = 0.f;
    float4 tv[TAIL_PER];
    TAIL_FOR(k, e) {
        const float4 v = __ldcg(reinterpret_cast<const float4 *>(h + e));
        s4[e / 4] = v;
        ss += f4dot(v);
        tv[k] = br ? __ldcg(reinterpret_cast<const float4 *>(br + e)) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    for (int p = 1; p < np; p++) {
        TAIL_FOR(k, e) {
            const float4 w = __ldcg(reinterpret_cast<const float4 *>(br + (int64_t)p * n + e));
            tv[k] = make_float4(tv[k].x + w.x, tv[k].y + w.y, tv[k].z + w.z, tv[k].w + w.w);
        }
    }
    if (br) TAIL_FOR(k, e) st += f4dot(tv[k]);
    if (rn.embd_norm) {
        const float r = 1.0f / sqrtf(block_sum(ss, red) / (float)n + rn.eps_next);
        TAIL_FOR(k, e) s4[e / 4] = f4mul(s4[e / 4], r);
    }
    float ss2 = 0.f;
    if (br) {
        const float r1 = wp ? 1.0f / sqrtf(block_sum(st, red) / (float)n + rn.eps_post) : 1.0f;
        TAIL_FOR(k, e) {
            float4 add = tv[k];
            if (wp) {
                const float4 w = __ldg(reinterpret_cast<const float4 *>(wp + e));
                add = make_float4((add.x * r1) * w.x, (add.y * r1) * w.y, (add.z * r1) * w.z, (add.w * r1) * w.w);
            }
            float4 hv = s4[e / 4];
            hv = make_float4(hv.x + add.x, hv.y + add.y, hv.z + add.z, hv.w + add.w);
            s4[e / 4] = hv;
            ss2 += f4dot(hv);
            /* tv[k] now holds the next norm's weights */
            tv[k] = wn ? __ldg(reinterpret_cast<const float4 *>(wn + e)) : make_float4(1.f, 1.f, 1.f, 1.f);
        }
    } else {
        TAIL_FOR(k, e) {
            if (rn.embd_norm) ss2 += f4dot(s4[e / 4]);
            tv[k] = wn ? __ldg(reinterpret_cast<const float4 *>(wn + e)) : make_float4(1.f, 1.f, 1.f, 1.f);
        }
        if (!rn.embd_norm) ss2 = ss;
    }
    const float r2 = 1.0f / sqrtf(block_sum(ss2, red) / (float)n + rn.eps_next);
    TAIL_FOR(k, e) {
        const float4 hv = s4[e / 4];
        if (br || rn.embd_norm) *reinterpret_cast<float4 *>(h + e) = hv;
        float4 a = f4mul(hv, r2);
        if (wn) a = make_float4(a.x * tv[k].x, a.y * tv[k].y, a.z * tv[k].z, a.w * tv[k].w);
        *reinterpret_cast<float4 *>(rn.out.x + off + e) = a;
        if (rn.out.h) {
            uint16_t *o = rn.out.h + off + e;
            o[0] = f32_to_f16(a.x), o[1] = f32_to_f16(a.y), o[2] = f32_to_f16(a.z), o[3] = f32_to_f16(a.w);
        }
        if (rn.out.q) quantize4(a, e, rn.out.q + off, rn.out.ds + off / 16 * 2);
    }
#undef TAIL_FOR
}

__global__ void __launch_bounds__(256) resnorm_rows_kernel(const __grid_constant__ mu_cu_resnorm rn) {
    pdl_trigger(); /* the next grid may launch now; it waits for this one to finish */
    pdl_wait();
    resnorm_block(rn, blockIdx.x);
}

extern "C" cudaError_t mu_cu_resnorm_rows(mu_cu_resnorm rn, int T, cudaStream_t s) {
    return launch(resnorm_rows_kernel, dim3(T), dim3(256), 0, s, rn);
}

/* ---- embedding ------------------------------------------------------------------------- */
template <class TT>
__device__ void embed_row(const mu_cu_weight &w, int64_t token, float *dst) {
    const int upr = TT::units(w.cols);
    const RowCtx rc = TT::row(w, token);
    for (int u = threadIdx.x; u < upr; u += blockDim.x) {
        const uint4 v = ld_stream(TT::ptr(rc, u));
        TT::dequant(rc, u, v, dst);
    }
}

__global__ void __launch_bounds__(256) embed_kernel(const __grid_constant__ mu_cu_weight tok, mu_cu_recs recs,
                                                    const __grid_constant__ mu_cu_resnorm rn,
                                                    unsigned long long *best) {
    pdl_trigger(); /* the next grid may launch now; it waits for this one to finish */
    pdl_wait();
    const int t = blockIdx.x;
    if (t == 0 && threadIdx.x == 0 && best) *best = 0ull;
    const int64_t token = rec_hdr(recs, t)->token;
    float *h = rn.h + (int64_t)t * rn.stride;
    MU_CU_DISPATCH(tok.type, (embed_row<TT>(tok, token, h)));
    __threadfence_block();
    __syncthreads();
    resnorm_block(rn, t);
}

extern "C" cudaError_t mu_cu_embed(const mu_cu_weight *tok, mu_cu_recs recs, int T, mu_cu_resnorm rn,
                                   unsigned long long *best, cudaStream_t s) {
    return launch(embed_kernel, dim3(T), dim3(256), 0, s, *tok, recs, rn, best);
}

/* ---- matvec ---------------------------------------------------------------------------- */

/* ---- matvec -------------------------------------------------------------------------------
 * A persistent grid (as many blocks as fit) over a stream of row-dots: warp
 * gw of W takes rows gw, gw + W, ... (gate/up: output rows, each two
 * row-dots). A row-dot is split into batches of MV_NB 16-byte units per
 * lane; the next batch's loads (possibly the next row's) are issued before
 * the current batch is computed, so a warp always has loads in flight, and
 * every warp has nearly the same number of rows (no partial last wave).
 * Loads are format-agnostic (row r's units are 16 bytes each at
 * qs + 16 * units * r); the arithmetic dispatches on the segment's format. */

template <int LANE>
__device__ __forceinline__ float batch_dot(const mu_cu_weight &w, int64_t row, int base, int n, const uint4 *v,
                                           const mu_cu_act &act) {
    const int lane = threadIdx.x & 31;
    float acc = 0.f;
    MU_CU_DISPATCH(w.type, {
        const RowCtx rc = TT::row(w, row);
        _Pragma("unroll") for (int k = 0; k < MV_NB; k++) {
            const int u = base + k * 32 + lane;
            if (u < n) acc += LANE == MU_CU_LANE_FAST ? TT::dot_q8(rc, u, v[k], act) : TT::dot_f32(rc, u, v[k], act);
        }
    });
    return acc;
}

/* units [base, min(base + 32 * MV_NB, end)) of a row, 16 bytes per lane per
 * unit, and a prefetch of the side streams (scales, high bits) those units
 * will read, so computing the batch waits on no DRAM round trip of its own */
__device__ __forceinline__ void batch_load(const mu_cu_weight &w, int64_t row, int base, int n, uint4 *v,
                                           bool side_prefetch) {
    const int lane = threadIdx.x & 31;
    const uint8_t *p = w.qs + row * (int64_t)w.units * 16;
#pragma unroll
    for (int k = 0; k < MV_NB; k++) {
        const int u = base + k * 32 + lane;
        v[k] = u < n ? ld_stream(p + (int64_t)u * 16) : make_uint4(0, 0, 0, 0);
    }
    if (side_prefetch) {
        MU_CU_DISPATCH(w.type, {
            const RowCtx rc = TT::row(w, row);
            _Pragma("unroll") for (int k = 0; k < MV_NB; k++) {
                const int u = base + k * 32 + lane;
                if (u < n) TT::prefetch(rc, u);
            }
        });
    }
}

__device__ __forceinline__ uint32_t ordered_bits(float f) {
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ uint32_t hash32(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t h = a * 0x9E3779B1u ^ (b + 0x7F4A7C15u) * 0x85EBCA77u ^ c * 0xC2B2AE3Du;
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    h *= 0x846CA68Bu;
    h ^= h >> 16;
    return h;
}

/* Lane 0 pulls units [u0, u1) of a row and their side streams into L2. */
__device__ __forceinline__ void rowdot_prefetch_l2(const mu_cu_weight &w, int64_t row, int u0, int u1) {
    const int64_t nb = w.cols >> 8; /* K-quant blocks per row */
    prefetch_l2_bulk(w.qs + (row * w.units + u0) * 16, (uint32_t)(u1 - u0) * 16);
    const int64_t b0 = u0 >> 3, b1 = (u1 + 7) >> 3; /* K-quant blocks of 8 units */
    switch (w.type) {
    case MU_TYPE_Q4_K: prefetch_l2_range(w.meta + (row * nb + b0) * 16, (uint64_t)(b1 - b0) * 16); break;
    case MU_TYPE_Q5_K:
        prefetch_l2_range(w.meta + (row * nb + b0) * 16, (uint64_t)(b1 - b0) * 16);
        prefetch_l2_range(w.qh + (row * nb + b0) * 32, (uint64_t)(b1 - b0) * 32);
        break;
    case MU_TYPE_Q6_K:
        prefetch_l2_range(w.meta + (row * nb + b0) * 16, (uint64_t)(b1 - b0) * 16);
        prefetch_l2_range(w.qh + (row * nb + b0) * 64, (uint64_t)(b1 - b0) * 64);
        prefetch_l2_range(w.d + row * nb + b0, (uint64_t)(b1 - b0) * 2);
        break;
    case MU_TYPE_Q8_0: prefetch_l2_range(w.d + row * (w.cols / 32) + u0 / 2, (uint64_t)((u1 - u0 + 1) / 2) * 2); break;
    case MU_TYPE_Q4_0: prefetch_l2_range(w.d + row * (w.cols / 32) + u0, (uint64_t)(u1 - u0) * 2); break;
    default: break;
    }
}

template <int LANE, int EPI>
__global__ void __launch_bounds__(MV_THREADS, LANE == MU_CU_LANE_FAST ? 3 : 2) matvec_kernel(const __grid_constant__ mu_cu_mv a) {
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t W = (int64_t)gridDim.x * MV_WARPS, gw = (int64_t)blockIdx.x * MV_WARPS + warp;
    const int n = a.seg[0].w.units; /* every segment reads the same input */
    const int parts = a.parts > 1 ? a.parts : 1, plen = n / parts;
    const int64_t jobs = EPI == MU_CU_EPI_GATEUP ? a.seg[0].w.rows : a.rows_total * parts;
    /* row-dot k of this warp -> (segment, row, part); false past the end */
    auto locate = [&](int64_t k, int &seg, int64_t &row, int &part) -> bool {
        if (EPI == MU_CU_EPI_GATEUP) {
            row = gw + (k >> 1) * W;
            seg = (int)(k & 1);
            part = 0;
            return row < jobs;
        }
        int64_t r = gw + k * W;
        if (r >= jobs) return false;
        part = (int)(r / a.rows_total);
        r -= (int64_t)part * a.rows_total;
        seg = 0;
        while (r >= a.seg[seg].w.rows) r -= a.seg[seg].w.rows, seg++;
        row = r;
        return true;
    };

    /* L2 prefetch one row-dot ahead of the register loads (more bytes in
     * flight per warp without registers; before the wait too: weights are
     * immutable, so an early-launched kernel pulls its first rows into L2
     * while its predecessor finishes) */
    auto prefetch_rowdot = [&](int64_t k) {
        int ps, pp;
        int64_t pr;
        if (a.prefetch >= 2 && lane == 0 && locate(k, ps, pr, pp))
            rowdot_prefetch_l2(a.seg[ps].w, pr, pp * plen, (pp + 1) * plen);
    };
    int cs = 0, cp = 0;
    int64_t cr = 0, ck = 0;
    bool have = locate(0, cs, cr, cp);
    int cb = cp * plen;
    uint4 vc[MV_NB];
    if (have) batch_load(a.seg[cs].w, cr, cb, cb + plen, vc, a.prefetch);
    prefetch_rowdot(1);
    pdl_wait(); /* the weights above are immutable; activations come after */

    /* fast lane: stage the int8 input in shared memory once per block, so
     * each unit's activation reads are shared-memory loads, not L1 traffic */
    mu_cu_act act = a.act;
    if (LANE == MU_CU_LANE_FAST && a.stage_act) {
        extern __shared__ __align__(16) uint8_t mv_smem[];
        const int ne = (int)a.seg[0].w.cols;
        int8_t *sq = reinterpret_cast<int8_t *>(mv_smem);
        float *sds = reinterpret_cast<float *>(mv_smem + ((ne + 15) & ~15));
        for (int i = threadIdx.x; i < ne / 16; i += MV_THREADS)
            reinterpret_cast<int4 *>(sq)[i] = __ldcg(reinterpret_cast<const int4 *>(a.act.q) + i);
        for (int i = threadIdx.x; i < ne / 32; i += MV_THREADS)
            reinterpret_cast<float4 *>(sds)[i] = __ldcg(reinterpret_cast<const float4 *>(a.act.ds) + i);
        __syncthreads();
        act.q = sq;
        act.ds = sds;
    }

    float acc = 0.f, gate = 0.f;
    unsigned long long best = 0ull;
    while (have) {
        /* the next batch: the rest of this row-dot, else the next one */
        const int cend = (cp + 1) * plen;
        int ns = cs, np = cp, nb = cb + 32 * MV_NB;
        int64_t nr = cr, nk = ck;
        bool nh = true;
        if (nb >= cend) {
            nk = ck + 1;
            nh = locate(nk, ns, nr, np);
            nb = np * plen;
            prefetch_rowdot(nk + 1);
        }
        uint4 vn[MV_NB];
        if (nh) batch_load(a.seg[ns].w, nr, nb, (np + 1) * plen, vn, a.prefetch);
        acc += batch_dot<LANE>(a.seg[cs].w, cr, cb, cend, vc, act);
        if (cb + 32 * MV_NB >= cend) { /* the row-dot is complete */
            const float y = warp_sum(acc);
            acc = 0.f;
            if constexpr (EPI == MU_CU_EPI_GATEUP) {
                if (cs == 0) {
                    gate = y;
                } else {
                    const float prod = gate / (1.0f + expf(-gate)) * y;
                    unsigned prev = 0;
                    if (lane == 0) {
                        a.gu.x[cr] = prod;
                        if (a.gu.h) a.gu.h[cr] = f32_to_f16(prod);
                        if (a.gu.q) {
                            __threadfence();
                            prev = atomicAdd(a.group_count + (cr >> 4), 1u);
                        }
                    }
                    prev = __shfl_sync(MU_FULL, prev, 0);
                    if (a.gu.q && prev == 15) {
                        /* the group's last product: quantize its 16 values */
                        __threadfence();
                        const int64_t g0 = cr & ~(int64_t)15;
                        const float x = __ldcg(a.gu.x + g0 + (lane & 15));
                        float amax = fabsf(x);
#pragma unroll
                        for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(MU_FULL, amax, o));
                        const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
                        const int qi = (int)roundf(x * id);
                        const float sq = d * half_warp_sum((float)qi);
                        if (lane < 16) a.gu.q[g0 + lane] = (int8_t)qi;
                        if (lane == 0) {
                            a.gu.ds[g0 / 16 * 2 + 0] = d;
                            a.gu.ds[g0 / 16 * 2 + 1] = sq;
                            a.group_count[cr >> 4] = 0u;
                        }
                    }
                }
            } else if constexpr (EPI == MU_CU_EPI_LOGITS) {
                float v = y * a.logit_scale;
                if (a.softcap != 0.0f) v = tanh_precise(v * (1.0f / a.softcap)) * a.softcap;
                if (lane == 0) a.seg[cs].y[cr] = v;
                float sel = v;
                const float temp = a.hdr->temperature;
                if (temp > 0.0f) {
                    const uint32_t hsh = hash32(a.hdr->seed, (uint32_t)a.hdr->pos, (uint32_t)cr);
                    const float uu = ((float)(hsh >> 8) + 0.5f) * (1.0f / 16777216.0f);
                    sel = v / temp - logf(-logf(uu)); /* Gumbel-max: a softmax sample */
                }
                const unsigned long long key =
                    ((unsigned long long)ordered_bits(sel) << 32) | (unsigned long long)(0xFFFFFFFFu - (uint32_t)cr);
                best = key > best ? key : best;
            } else {
                if (lane == 0) a.seg[cs].y[cr + (int64_t)cp * a.seg[cs].w.rows] = y;
            }
        }
        cs = ns, cr = nr, cb = nb, ck = nk, cp = np, have = nh;
#pragma unroll
        for (int k = 0; k < MV_NB; k++) vc[k] = vn[k];
    }

    if constexpr (EPI == MU_CU_EPI_LOGITS) {
        __shared__ unsigned long long best_w[MV_WARPS];
        if (lane == 0) best_w[warp] = best;
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long m = 0ull;
            for (int i = 0; i < MV_WARPS; i++) m = best_w[i] > m ? best_w[i] : m;
            if (m) atomicMax(a.best, m);
        }
    }
    if constexpr (EPI == MU_CU_EPI_RESNORM) {
        /* the last block to finish runs the residual + norm tail */
        __shared__ int is_last;
        if (lane == 0) __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            const unsigned prev = atomicAdd(a.counter, 1u);
            is_last = prev == gridDim.x - 1;
        }
        __syncthreads();
        if (is_last) {
            __threadfence();
            resnorm_block(a.rn, 0);
            if (threadIdx.x == 0) *a.counter = 0u;
        }
    }
}

static int g_occupancy = 0; /* blocks per SM; 0: as many as fit */
static int g_prefetch = 1;
extern "C" void mu_cu_set_matvec_prefetch(int level) { g_prefetch = level; }
static bool g_stage = true;
extern "C" void mu_cu_set_matvec_stage(bool on) { g_stage = on; }
static int g_grid_cap = 0;  /* blocks in all; 0: no cap */
extern "C" void mu_cu_set_matvec_occupancy(int blocks_per_sm) { g_occupancy = blocks_per_sm > 0 ? blocks_per_sm : 0; }
extern "C" void mu_cu_set_matvec_grid_cap(int blocks) { g_grid_cap = blocks > 0 ? blocks : 0; }

template <int LANE, int EPI>
static cudaError_t launch_mv(const mu_cu_mv *a, int64_t jobs, cudaStream_t s) {
    static int sms = 0;
    if (!sms) {
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        /* the staged input (up to 8192 + 4096 ... bytes) on top of the static tail */
        cudaFuncSetAttribute(matvec_kernel<LANE, EPI>, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024);
    }
    const size_t smem = a->stage_act ? (size_t)((a->seg[0].w.cols + 15) & ~15) + (size_t)a->seg[0].w.cols / 2 : 0;
    int fit = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, matvec_kernel<LANE, EPI>, MV_THREADS, smem);
    if (fit < 1) fit = 1;
    const int per_sm = g_occupancy > 0 && g_occupancy < fit ? g_occupancy : fit;
    int64_t blocks = (jobs + MV_WARPS - 1) / MV_WARPS;
    if (blocks > (int64_t)sms * per_sm) blocks = (int64_t)sms * per_sm;
    if (g_grid_cap > 0 && blocks > g_grid_cap) blocks = g_grid_cap;
    return launch(matvec_kernel<LANE, EPI>, dim3((unsigned)blocks), dim3(MV_THREADS), smem, s, *a);
}

template <int LANE>
static cudaError_t launch_lane(const mu_cu_mv *a, int64_t jobs, cudaStream_t s) {
    switch (a->epi) {
    case MU_CU_EPI_GATEUP: return launch_mv<LANE, MU_CU_EPI_GATEUP>(a, jobs, s);
    case MU_CU_EPI_RESNORM: return launch_mv<LANE, MU_CU_EPI_RESNORM>(a, jobs, s);
    case MU_CU_EPI_LOGITS: return launch_mv<LANE, MU_CU_EPI_LOGITS>(a, jobs, s);
    default: return launch_mv<LANE, MU_CU_EPI_STORE>(a, jobs, s);
    }
}

extern "C" cudaError_t mu_cu_matvec(const mu_cu_mv *in, cudaStream_t s) {
    mu_cu_mv a = *in;
    a.prefetch = g_prefetch;
    a.stage_act = g_stage && a.lane == MU_CU_LANE_FAST && a.act.q && a.seg[0].w.cols <= 32768;
    a.rows_total = 0;
    for (int i = 0; i < a.nseg; i++) {
        a.rows_total += a.seg[i].w.rows;
        if (a.seg[i].w.units != a.seg[0].w.units) return cudaErrorInvalidValue;
    }
    /* long rows of a one-matrix RESNORM launch (ffn down) split in parts of
     * ~200 units, so every warp streams nearly the same bytes; the tail adds
     * the parts in order (deterministic) */
    a.parts = 1;
    if (a.epi == MU_CU_EPI_RESNORM && a.nseg == 1) {
        const int units = a.seg[0].w.units;
        int p = units / 200;
        while (p > 1 && units % p) p--;
        a.parts = p < 1 ? 1 : (p > 8 ? 8 : p);
        while (a.parts > 1 && units % a.parts) a.parts--;
    }
    a.rn.branch_parts = a.parts;
    const int64_t jobs = a.epi == MU_CU_EPI_GATEUP ? a.seg[0].w.rows : a.rows_total * a.parts;
    if (a.lane == MU_CU_LANE_FAST) return launch_lane<MU_CU_LANE_FAST>(&a, jobs, s);
    return launch_lane<MU_CU_LANE_EXACT>(&a, jobs, s);
}

/* ---- elementwise ------------------------------------------------------------------------- */

__global__ void swiglu_kernel(float *g, const float *u, uint16_t *h, int64_t total) {
    pdl_trigger(); /* the next grid may launch now; it waits for this one to finish */
    pdl_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const float x = g[i];
        const float v = x / (1.0f + expf(-x)) * u[i];
        g[i] = v;
        if (h) h[i] = f32_to_f16(v);
    }
}

extern "C" cudaError_t mu_cu_swiglu_rows(float *g, const float *u, uint16_t *h, int64_t n, int T, cudaStream_t s) {
    return launch(swiglu_kernel, dim3(1024), dim3(256), 0, s, g, u, h, n * T);
}

__global__ void logits_finish_kernel(float *x, int64_t n, float scale, float softcap) {
    pdl_trigger(); /* the next grid may launch now; it waits for this one to finish */
    pdl_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = x[i] * scale;
        if (softcap != 0.0f) v = tanh_precise(v * (1.0f / softcap)) * softcap;
        x[i] = v;
    }
}

extern "C" cudaError_t mu_cu_logits_finish(float *logits, int64_t n, float scale, float softcap, cudaStream_t s) {
    return launch(logits_finish_kernel, dim3(2048), dim3(256), 0, s, logits, n, scale, softcap);
}

__global__ void to_f16_kernel(const float *x, uint16_t *h, int64_t n) {
    pdl_trigger(); /* the next grid may launch now; it waits for this one to finish */
    pdl_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        h[i] = f32_to_f16(x[i]);
}

extern "C" cudaError_t mu_cu_to_f16(const float *x, uint16_t *h, int64_t n, cudaStream_t s) {
    return launch(to_f16_kernel, dim3(1024), dim3(256), 0, s, x, h, n);
}

__global__ void fill_random_kernel(void *dst, int64_t n, bool f32, uint64_t seed, float scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const uint32_t a = hash32((uint32_t)seed, (uint32_t)(i >> 32), (uint32_t)i);
        const uint32_t b = hash32((uint32_t)(seed >> 32) + 1u, (uint32_t)i, a);
        /* sum of two uniforms, centred: a cheap bell-shaped value in [-1, 1] * scale * 1.7 */
        const float v = (((float)(a >> 8) + (float)(b >> 8)) * (1.0f / 16777216.0f) - 1.0f) * 1.7f * scale;
        if (f32) ((float *)dst)[i] = v;
        else ((uint16_t *)dst)[i] = f32_to_f16(v);
    }
}

extern "C" cudaError_t mu_cu_fill_random(void *dst, int64_t n, bool f32, uint64_t seed, float scale, cudaStream_t s) {
    fill_random_kernel<<<2048, 256, 0, s>>>(dst, n, f32, seed, scale);
    return cudaGetLastError();
}

/* int8 blocks of T rows of n (tests; the forward pass quantizes inside the
 * kernels that produce the activations). One warp per 32-element block. */
__global__ void quantize_rows_kernel(const float *x, int8_t *q, float *ds, int64_t blocks) {
    const int64_t blk = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    if (blk >= blocks) return;
    quantize_block_warp(x[blk * 32 + (threadIdx.x & 31)], q + blk * 32, ds + blk * 4);
}

extern "C" cudaError_t mu_cu_quantize_rows(const float *x, int8_t *q, float *ds, int64_t n, int T, cudaStream_t s) {
    const int64_t blocks = n * T / 32;
    quantize_rows_kernel<<<(unsigned)((blocks * 32 + 255) / 256), 256, 0, s>>>(x, q, ds, blocks);
    return cudaGetLastError();
}
