/* cu_kernels.cu — weight repacking and dequantization, the matvec family
 * with its fused epilogues, the residual/norm tail, the token embedding and
 * small elementwise kernels.
 *
 * Matvec: warps over a stream of row-dots (rows strided over all warps),
 * format-specialized; all 16-byte weight loads of a batch issued before its
 * arithmetic, the first batch before griddepcontrol.wait, so a kernel
 * launched early (PDL) streams its weights while its predecessor finishes.
 * Several matrices over the same input (q, k, v, gate) form one row space
 * and one launch; the epilogues fuse SwiGLU + int8 groups (gate/up), the
 * residual/norm tail (Wo, down), and logit scale + soft-cap + the
 * device-side token choice (LM head).
 */
#include <math.h>
#include <stdlib.h>
#include <type_traits>

#include "cuda/cu_device.cuh"

static bool g_pdl = false;
extern "C" void mu_cu_set_pdl(bool on) { g_pdl = on; }
extern "C" bool mu_cu_get_pdl(void) { return g_pdl; }

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
    default: {
        const IvGeom g = iv_geom(type);
        if (!g.block_elems || cols % g.block_elems) return false;
        const uint64_t nb = r * (uint64_t)(cols / g.block_elems);
        o->qs = nb * (uint64_t)(g.block_elems / g.unit_elems) * 16;
        o->qh = nb * (uint64_t)g.qh, o->meta = nb * (uint64_t)g.meta, o->d = nb * (uint64_t)g.dh * 2;
        return true;
    }
    }
}

extern "C" int32_t mu_cu_units(uint32_t type, int64_t cols) {
    switch (type) {
    case MU_TYPE_Q4_K: case MU_TYPE_Q5_K: case MU_TYPE_Q6_K: return (int32_t)(cols / 256 * 8);
    case MU_TYPE_Q8_0: return (int32_t)(cols / 16);
    case MU_TYPE_Q4_0: return (int32_t)(cols / 32);
    case MU_TYPE_F32: return (int32_t)(cols / 4);
    case MU_TYPE_F16: case MU_TYPE_BF16: return (int32_t)(cols / 8);
    default: return iv_geom(type).unit_elems ? (int32_t)(cols / iv_geom(type).unit_elems) : 0;
    }
}

/* An integer-view block (file layout, quant.h) into the streams of
 * cu_device.cuh's TIv; gb: its index among the weight's blocks. */
__device__ void iv_repack_block(uint32_t type, const uint8_t *src, int64_t gb, uint8_t *qs, uint8_t *qh, uint8_t *meta,
                                uint16_t *d) {
    const IvGeom g = iv_geom(type);
    const int qs_bytes = g.block_elems / g.unit_elems * 16;
    auto half_at = [&](int at) { return (uint16_t)(src[at] | (src[at + 1] << 8)); };
    int qs_at = 0;
    switch (type) {
    case MU_TYPE_Q4_1: d[2 * gb] = half_at(0), d[2 * gb + 1] = half_at(2), qs_at = 4; break;
    case MU_TYPE_Q5_0:
        d[gb] = half_at(0), qs_at = 6;
        for (int k = 0; k < 4; k++) qh[gb * 4 + k] = src[2 + k];
        break;
    case MU_TYPE_Q5_1:
        d[2 * gb] = half_at(0), d[2 * gb + 1] = half_at(2), qs_at = 8;
        for (int k = 0; k < 4; k++) qh[gb * 4 + k] = src[4 + k];
        break;
    case MU_TYPE_IQ4_NL: d[gb] = half_at(0), qs_at = 2; break;
    case MU_TYPE_IQ4_XS: { /* d, scales_h, scales_l[4], qs[128] */
        d[gb] = half_at(0), qs_at = 8;
        const int sh = half_at(2);
        for (int j = 0; j < 8; j++)
            meta[gb * 8 + j] = (uint8_t)(((src[4 + j / 2] >> (4 * (j % 2))) & 15) | ((sh >> (2 * j)) & 3) << 4);
        break;
    }
    case MU_TYPE_Q2_K: /* scales[16], qs[64], d, dmin */
        d[2 * gb] = half_at(80), d[2 * gb + 1] = half_at(82), qs_at = 16;
        for (int q = 0; q < 4; q++)
            for (int j = 0; j < 4; j++) meta[gb * 16 + 4 * q + j] = src[8 * (q >> 1) + 2 * j + (q & 1)];
        break;
    case MU_TYPE_Q3_K: { /* hmask[32], qs[64], scales[12], d */
        d[gb] = half_at(108), qs_at = 32;
        for (int q = 0; q < 4; q++) { /* the unit's hmask bits (cu_device.cuh) */
            uint64_t bits = 0;
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 16; l++)
                    bits |= (uint64_t)((src[16 * (q & 1) + l] >> (4 * (q >> 1) + j)) & 1) << (16 * j + l);
            for (int k = 0; k < 8; k++) qh[gb * 32 + 8 * q + k] = (uint8_t)(bits >> (8 * k));
        }
        const uint8_t *sc = src + 96;
        for (int q = 0; q < 4; q++)
            for (int j = 0; j < 4; j++) {
                const int gr = 8 * (q >> 1) + 2 * j + (q & 1);
                const int low = gr < 8 ? sc[gr] & 15 : sc[gr - 8] >> 4;
                meta[gb * 16 + 4 * q + j] = (uint8_t)(low | ((sc[8 + gr % 4] >> (2 * (gr / 4))) & 3) << 4);
            }
        break;
    }
    default: return;
    }
    for (int k = 0; k < qs_bytes; k++) qs[gb * qs_bytes + k] = src[qs_at + k];
}

/* One thread per block of the file's layout: bytes move to their streams.
 * src_stride: bytes between the rows in raw (a column slice of a wider
 * matrix keeps its parent's row stride). */
__global__ void repack_kernel(mu_cu_weight w, const uint8_t *raw, int64_t r0, int64_t nrows, int64_t src_stride) {
    int bpr = 0, bb = 0;
    switch (w.type) {
    case MU_TYPE_Q4_K: bpr = (int)(w.cols / 256), bb = 144; break;
    case MU_TYPE_Q5_K: bpr = (int)(w.cols / 256), bb = 176; break;
    case MU_TYPE_Q6_K: bpr = (int)(w.cols / 256), bb = 210; break;
    case MU_TYPE_Q8_0: bpr = (int)(w.cols / 32), bb = 34; break;
    case MU_TYPE_Q4_0: bpr = (int)(w.cols / 32), bb = 18; break;
    default:
        if (!iv_geom(w.type).block_elems) return;
        bpr = (int)(w.cols / iv_geom(w.type).block_elems), bb = iv_geom(w.type).block_bytes;
        break;
    }
    if (src_stride <= 0) src_stride = (int64_t)bpr * bb;
    const int64_t total = nrows * bpr;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t rr = i / bpr, b = i % bpr, gb = (r0 + rr) * bpr + b; /* global block index */
        const uint8_t *src = raw + rr * src_stride + b * bb;
        uint8_t *qs = (uint8_t *)w.qs, *qh = (uint8_t *)w.qh, *meta = (uint8_t *)w.meta;
        uint16_t *d = (uint16_t *)w.d;
        const int64_t rb = gb - b; /* the row's first block */
        switch (w.type) {
        case MU_TYPE_Q4_K:
            kq_repack_block(w.type, src, (int)b, bpr, qs + rb * 128, nullptr, meta + rb * 16, nullptr);
            break;
        case MU_TYPE_Q5_K:
            kq_repack_block(w.type, src, (int)b, bpr, qs + rb * 128, qh + rb * 32, meta + rb * 16, nullptr);
            break;
        case MU_TYPE_Q6_K:
            kq_repack_block(w.type, src, (int)b, bpr, qs + rb * 128, qh + rb * 64, meta + rb * 16, d + rb);
            break;
        case MU_TYPE_Q8_0:
            d[gb] = (uint16_t)(src[0] | (src[1] << 8));
            for (int k = 0; k < 32; k++) qs[gb * 32 + k] = src[2 + k];
            break;
        case MU_TYPE_Q4_0:
            d[gb] = (uint16_t)(src[0] | (src[1] << 8));
            for (int k = 0; k < 16; k++) qs[gb * 16 + k] = src[2 + k];
            break;
        default: iv_repack_block(w.type, src, gb, qs, qh, meta, d); break;
        }
    }
}

extern "C" cudaError_t mu_cu_repack(const mu_cu_weight *w, const void *raw, int64_t r0, int64_t nrows,
                                    int64_t src_stride, cudaStream_t s) {
    repack_kernel<<<1024, 256, 0, s>>>(*w, (const uint8_t *)raw, r0, nrows, src_stride);
    return cudaGetLastError();
}

/* ---- K-quant lane-blocks: loads shared by the matvec, dequant and embedding ---- */

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

/* Dequantizes lane-blocks (row r0 + rr, b, c0) into dst rows of cols. */
template <uint32_t TYPE, class O>
__device__ void kq_dequant_rows(const mu_cu_weight &w, int64_t r0, int64_t nrows, O *dst) {
    const int64_t nb = w.cols >> 8, total = nrows * nb * 2;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t rr = i / (nb * 2);
        const int b = (int)((i >> 1) % nb), c0 = (int)(i & 1);
        KqLane<uint4> L;
        kq_load<TYPE>(L, w, r0 + rr, b, c0);
        O *out = dst + rr * w.cols + (int64_t)b * 256;
        kq_dequant<TYPE>(L, c0, [&](int e, float v) { put(out, e, v); });
    }
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
    switch (w.type) {
    case MU_TYPE_Q4_K: kq_dequant_rows<MU_TYPE_Q4_K, O>(w, r0, nrows, dst); break;
    case MU_TYPE_Q5_K: kq_dequant_rows<MU_TYPE_Q5_K, O>(w, r0, nrows, dst); break;
    case MU_TYPE_Q6_K: kq_dequant_rows<MU_TYPE_Q6_K, O>(w, r0, nrows, dst); break;
    default: MU_CU_DISPATCH_UNITS(w.type, (dequant_units<TT, O>(w, r0, nrows, dst)));
    }
}

extern "C" cudaError_t mu_cu_dequant(const mu_cu_weight *w, int64_t r0, int64_t nrows, void *dst, bool to_f16,
                                     cudaStream_t s) {
    if (to_f16) dequant_kernel<uint16_t><<<2048, 256, 0, s>>>(*w, r0, nrows, (uint16_t *)dst);
    else dequant_kernel<float><<<2048, 256, 0, s>>>(*w, r0, nrows, (float *)dst);
    return cudaGetLastError();
}

/* ---- the residual / norm tail ----------------------------------------------------------
 * One row of n (a multiple of 32) by one block of NW warps. Each phase is
 * one round of independent 16-byte loads (no load waits on a store), so the
 * tail costs a few L2 round trips, not one per element: the current h is
 * staged in shared memory; warp w owns 128-element chunks w, w + NW, ...
 * (lane l: elements 4l .. 4l+3 of a chunk) in every phase. Data other
 * blocks or kernels wrote is read through L2. */
#define TAIL_MAXN 8192

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
/* acc + the sum of a's squares, explicitly rounded: the tails and the
 * norm-in staging sum the same squares and must agree to the bit, which a
 * contraction into acc in one of them and not the other broke twice */
__device__ __forceinline__ float f4sq_acc(float acc, float4 a) {
    const float s = __fmaf_rn(a.w, a.w, __fmaf_rn(a.z, a.z, __fmaf_rn(a.y, a.y, __fmul_rn(a.x, a.x))));
    return __fadd_rn(acc, s);
}
/* h + the branch, post-normed (r1, weights w) when post: rounded products
 * and sum, never contracted into an FMA, so the residual/norm tails and
 * the norm-in staging agree to the bit however the compiler arranges
 * either (a contraction across the branch once made them differ) */
__device__ __forceinline__ float residual_add(float h, float b, bool post, float r1, float w) {
    return __fadd_rn(h, post ? __fmul_rn(__fmul_rn(b, r1), w) : b);
}
__device__ __forceinline__ float4 residual_add4(float4 h, float4 b, bool post, float r1, float4 w) {
    return make_float4(residual_add(h.x, b.x, post, r1, w.x), residual_add(h.y, b.y, post, r1, w.y),
                       residual_add(h.z, b.z, post, r1, w.z), residual_add(h.w, b.w, post, r1, w.w));
}

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
        const int64_t ps = rn.part_stride ? rn.part_stride : n;
        auto branch_at = [&](int i) {
            float v = __ldcg(br + i);
            for (int p = 1; p < np; p++) v += __ldcg(br + (int64_t)p * ps + i);
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
            const float hv = residual_add(__ldcg(h + i), v, rn.w_post != nullptr, r1, rn.w_post ? rn.w_post[i] : 0.f);
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

/* Lab (MU_CU_LAB_TAIL_STAMPS): rows of the tails' clock stamps. */
#define TAIL_STAMP_ROWS 1024
__device__ unsigned long long g_tail_stamps[TAIL_STAMP_ROWS][MU_CU_TAIL_STAMP_COLS];
__device__ unsigned g_tail_rows;
__device__ __forceinline__ void tail_stamp(unsigned long long *st, int k) {
    if (st && threadIdx.x == 0) st[k] = clock64();
}
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Lab (MU_CU_LAB_STAGE_STAMPS): the matvec launches' phases in globaltimer ns.
 * Compiled in only with MUSER_LAB_STAMPS=1 (CMake -DMUSER_LAB_STAMPS=ON):
 * even unused, the stamp code moved the register allocation of some
 * kernels (tensor-parallel ranks' packed launches spilled more). */
#ifndef MUSER_LAB_STAMPS
#define MUSER_LAB_STAMPS 0
#endif
#define STAGE_STAMP_ROWS 1024
__device__ unsigned long long g_stage_stamps[STAGE_STAMP_ROWS][MU_CU_STAGE_STAMP_COLS];
__device__ __forceinline__ void stage_stamp(unsigned long long *row, int col, bool as_min) {
    if (!row) return;
    const unsigned long long t = global_ns();
    atomicMax(row + col, as_min ? ~t : t);
}
__device__ __forceinline__ unsigned long long *stage_row(int id) {
    return id >= 0 && id < STAGE_STAMP_ROWS ? g_stage_stamps[id] : nullptr;
}
/* Per block of a launch: its wait released, its last warp's end (ns), its
 * SM id + 1; the 3.9 MB only in lab builds */
#define STAGE_BLOCK_ROWS (MUSER_LAB_STAMPS ? STAGE_STAMP_ROWS : 1)
__device__ unsigned long long g_block_stamps[STAGE_BLOCK_ROWS][MU_CU_STAGE_BLOCKS_MAX][3];
__device__ __forceinline__ void block_span_stamp(int id, int which) {
    if (!MUSER_LAB_STAMPS || id < 0 || id >= STAGE_BLOCK_ROWS || blockIdx.x >= MU_CU_STAGE_BLOCKS_MAX) return;
    atomicMax(&g_block_stamps[id][blockIdx.x][which], global_ns());
    if (which == 0) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        g_block_stamps[id][blockIdx.x][2] = sm + 1ull;
    }
}
/* A block's stamp (thread 0) */
__device__ __forceinline__ void block_stage_stamp(unsigned long long *row, int col, bool as_min = false) {
    if (MUSER_LAB_STAMPS && row && threadIdx.x == 0) stage_stamp(row, col, as_min);
}
/* A warp's stamp (lane 0, after the warp converges), from every eighth
 * block: fewer atomics on the row's one address */
__device__ __forceinline__ void warp_stage_stamp(unsigned long long *row, int col, bool as_min = false) {
    if (!MUSER_LAB_STAMPS || !row) return;
    __syncwarp();
    if ((threadIdx.x & 31) == 0 && (blockIdx.x & 7) == 0) stage_stamp(row, col, as_min);
}


/* sv: TAIL_MAXN floats of shared memory (16-byte aligned) for h; stamp:
 * the lab's stamp row (block-uniform), or null. */
template <int NW>
__device__ void resnorm_block(const mu_cu_resnorm &rn, int64_t t, float *sv, unsigned long long *stamp = nullptr) {
    constexpr int TAIL_PER = (TAIL_MAXN + NW * 128 - 1) / (NW * 128); /* float4 chunks per thread */
    __shared__ float red[33];
    if (rn.n > TAIL_MAXN || blockDim.x != NW * 32) {
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
    _Pragma("unroll") for (int k = 0; k < TAIL_PER; k++) if (const int e = ((warp + NW * k) * 32 + lane) * 4; e < n)

    /* Round 1: the norm weights, the current h (staged in shared memory)
     * and the branch (in registers), every load independent of every other
     * and all before any global store (a store through a pointer that may
     * alias would keep later loads from being hoisted, and each would wait
     * on DRAM in turn). Round 2: arithmetic and stores only. */
    const int np = rn.branch_parts > 1 ? rn.branch_parts : 1;
    const int64_t ps = rn.part_stride ? rn.part_stride : n;
    float ss = 0.f, st = 0.f;
    float4 tv[TAIL_PER], wpv[TAIL_PER], wnv[TAIL_PER];
    /* the norm weights (immutable) in the same round as h and the branch */
    const float4 one4 = make_float4(1.f, 1.f, 1.f, 1.f);
    TAIL_FOR(k, e) {
        wpv[k] = wp ? __ldg(reinterpret_cast<const float4 *>(wp + e)) : one4;
        wnv[k] = wn ? __ldg(reinterpret_cast<const float4 *>(wn + e)) : one4;
    }
    TAIL_FOR(k, e) {
        const float4 v = __ldcg(reinterpret_cast<const float4 *>(h + e));
        s4[e / 4] = v;
        ss = f4sq_acc(ss, v);
        tv[k] = br ? __ldcg(reinterpret_cast<const float4 *>(br + e)) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    if (np > 1) { /* the second part in the same round (a second rank's branch: one NVLink round trip) */
        float4 t1[TAIL_PER];
        TAIL_FOR(k, e) t1[k] = __ldcg(reinterpret_cast<const float4 *>(br + ps + e));
        TAIL_FOR(k, e) tv[k] = make_float4(tv[k].x + t1[k].x, tv[k].y + t1[k].y, tv[k].z + t1[k].z, tv[k].w + t1[k].w);
    }
    for (int p = 2; p < np; p++) {
        TAIL_FOR(k, e) {
            const float4 w = __ldcg(reinterpret_cast<const float4 *>(br + (int64_t)p * ps + e));
            tv[k] = make_float4(tv[k].x + w.x, tv[k].y + w.y, tv[k].z + w.z, tv[k].w + w.w);
        }
    }
    if (br) TAIL_FOR(k, e) st = f4sq_acc(st, tv[k]);
    if (rn.embd_norm) {
        const float r = 1.0f / sqrtf(block_sum(ss, red) / (float)n + rn.eps_next);
        TAIL_FOR(k, e) s4[e / 4] = f4mul(s4[e / 4], r);
    }
    float ss2 = 0.f;
    if (br) {
        const float r1 = wp ? 1.0f / sqrtf(block_sum(st, red) / (float)n + rn.eps_post) : 1.0f;
        tail_stamp(stamp, 4);
        TAIL_FOR(k, e) {
            const float4 hv = residual_add4(s4[e / 4], tv[k], wp, r1, wpv[k]);
            s4[e / 4] = hv;
            ss2 = f4sq_acc(ss2, hv);
            tv[k] = wnv[k]; /* tv[k] now holds the next norm's weights */
        }
    } else {
        TAIL_FOR(k, e) {
            if (rn.embd_norm) ss2 = f4sq_acc(ss2, s4[e / 4]);
            tv[k] = wnv[k];
        }
        if (!rn.embd_norm) ss2 = ss;
    }
    const float r2 = 1.0f / sqrtf(block_sum(ss2, red) / (float)n + rn.eps_next);
    tail_stamp(stamp, 5);
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
    if (stamp) {
        __syncthreads();
        tail_stamp(stamp, 6);
        if (threadIdx.x == 0) stamp[8] = global_ns();
    }
#undef TAIL_FOR
}

__global__ void __launch_bounds__(256) resnorm_rows_kernel(const __grid_constant__ mu_cu_resnorm rn) {
    pdl_trigger(); /* the next grid may launch now; it waits for this one to finish */
    pdl_wait();
    __shared__ __align__(16) float sv[TAIL_MAXN];
    resnorm_block<8>(rn, blockIdx.x, sv);
}

extern "C" cudaError_t mu_cu_resnorm_rows(mu_cu_resnorm rn, int T, cudaStream_t s) {
    return launch_pdl(resnorm_rows_kernel, dim3(T), dim3(256), 0, s, rn);
}

/* ---- embedding ------------------------------------------------------------------------- */
template <uint32_t TYPE>
__device__ void embed_row_kq(const mu_cu_weight &w, int64_t token, float *dst) {
    const int nb = (int)(w.cols >> 8);
    for (int i = threadIdx.x; i < nb * 2; i += blockDim.x) {
        KqLane<uint4> L;
        kq_load<TYPE>(L, w, token, i >> 1, i & 1);
        float *out = dst + (int64_t)(i >> 1) * 256;
        kq_dequant<TYPE>(L, i & 1, [&](int e, float v) { out[e] = v; });
    }
}

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
    switch (tok.type) {
    case MU_TYPE_Q4_K: embed_row_kq<MU_TYPE_Q4_K>(tok, token, h); break;
    case MU_TYPE_Q5_K: embed_row_kq<MU_TYPE_Q5_K>(tok, token, h); break;
    case MU_TYPE_Q6_K: embed_row_kq<MU_TYPE_Q6_K>(tok, token, h); break;
    default: MU_CU_DISPATCH_UNITS(tok.type, (embed_row<TT>(tok, token, h)));
    }
    __threadfence_block();
    __syncthreads();
    __shared__ __align__(16) float sv[TAIL_MAXN];
    resnorm_block<8>(rn, t, sv);
}

extern "C" cudaError_t mu_cu_embed(const mu_cu_weight *tok, mu_cu_recs recs, int T, mu_cu_resnorm rn,
                                   unsigned long long *best, cudaStream_t s) {
    return launch_pdl(embed_kernel, dim3(T), dim3(256), 0, s, *tok, recs, rn, best);
}

/* ---- matvec ----------------------------------------------------------------------------
 * A grid of warps over a stream of row-dots: warp g of W takes row-dots
 * g, g + W, ..., whole-row launches counting their warps warp-major (g = warp x blocks + block,
 * so a partial last round is spread over every block) (gate/up: output
 * rows, each two row-dots; short K-quant
 * rows: 16 / blocks of them per batch), W every warp that fits, or the
 * fewest that give every warp as many (mu_cu_mv.even_rounds). A row-dot
 * is streamed in batches; all 16-byte weight loads of a batch are issued
 * before any of its arithmetic, the first batch before griddepcontrol.wait
 * (weights are immutable), so a kernel launched early (PDL) streams while
 * its predecessor finishes. Kernels are specialized per weight family:
 *   K-quants: a batch is 16 blocks of a row, two lanes per block (the
 *     lane-blocks of cu_kq.cuh); the fast lane's int8 input is staged once
 *     per block of threads in shared memory in the order the lanes read it
 *     (conflict-free 16-byte reads) with the per-group scales and sums;
 *   unit formats (Q8_0, Q4_0, F32, F16, BF16): a batch is 4 units per lane
 *     (the decoders of cu_device.cuh). */

/* warps per block: one block of 32 warps per SM in the fast lane (64
 * registers each; measured faster than two of 16: the input is staged once
 * per SM); the exact lane, 16 warps with up to 128 registers */
template <int LANE>
__host__ __device__ constexpr int mv_warps() {
    return LANE == MU_CU_LANE_FAST ? 32 : 16;
}
#define MV_NB 4 /* unit formats: 16-byte units per lane per batch */
#define MV_FLAT_ROWS 8 /* flat gate/up: most row pairs per warp */

/* Shared-memory layout of the staged fast-lane input for the K-quants, per
 * 256-element block b: the int8 values at KQ_XQ * b (16 bytes of padding
 * per block spread the lanes of a quarter-warp over all banks), then the
 * lane records at aux + KQ_AUX * b + 64 c0: dx[8], S[4] (floats), asum[8]
 * (int16). */
#define KQ_XQ 272
#define KQ_AUX 144

__device__ __forceinline__ size_t kq_stage_bytes(int64_t cols) { return (size_t)(cols >> 8) * (KQ_XQ + KQ_AUX); }

/* Group g (16 values) of x as int8 with its d = amax/127 and d * sum(q):
 * the arithmetic of quantize_block_warp / quantize4 (the same bits). */
__device__ __forceinline__ void quant_group16(const float *x, int g, uint4 &q, float2 &ds) {
    float v[16];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const float4 f = __ldcg(reinterpret_cast<const float4 *>(x) + 4 * g + k);
        v[4 * k] = f.x, v[4 * k + 1] = f.y, v[4 * k + 2] = f.z, v[4 * k + 3] = f.w;
    }
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(v[i]));
    const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    uint32_t w[4] = {0u, 0u, 0u, 0u};
    int sum = 0;
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const int qi = (int)roundf(v[i] * id);
        sum += qi;
        w[i >> 2] |= (uint32_t)(qi & 0xFF) << (8 * (i & 3));
    }
    q = make_uint4(w[0], w[1], w[2], w[3]);
    ds = make_float2(d, d * (float)sum);
}

/* The lane record of lane-block (b, c0) from its 8 groups' (d, d * sum(q)). */
__device__ __forceinline__ void kq_stage_rec(uint8_t *aux, int b, int c0, const float2 ds[8]) {
    float dx[8], sy[8];
    int as[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
        dx[k] = ds[k].x;
        sy[k] = ds[k].y;
        /* d * sum(q) / d recovers the integer sum exactly (|sum| <= 2032) */
        as[k] = ds[k].x > 0.0f ? (int)rintf(ds[k].y / ds[k].x) : 0;
    }
    float *rec = reinterpret_cast<float *>(aux + KQ_AUX * b + 64 * c0);
    reinterpret_cast<float4 *>(rec)[0] = make_float4(dx[0], dx[1], dx[2], dx[3]);
    reinterpret_cast<float4 *>(rec)[1] = make_float4(dx[4], dx[5], dx[6], dx[7]);
    reinterpret_cast<float4 *>(rec)[2] = make_float4(sy[0] + sy[1], sy[2] + sy[3], sy[4] + sy[5], sy[6] + sy[7]);
    uint4 packed;
    packed.x = (uint32_t)(as[0] & 0xFFFF) | ((uint32_t)as[1] << 16);
    packed.y = (uint32_t)(as[2] & 0xFFFF) | ((uint32_t)as[3] << 16);
    packed.z = (uint32_t)(as[4] & 0xFFFF) | ((uint32_t)as[5] << 16);
    packed.w = (uint32_t)(as[6] & 0xFFFF) | ((uint32_t)as[7] << 16);
    reinterpret_cast<uint4 *>(rec)[3] = packed;
}

/* The lane records of the staged input from the groups' (d, d * sum(q)):
 * gds in shared memory (smem) or global. From the top thread down: when
 * copying, threads of the int8 copy rarely also build records, so both
 * rounds of loads fly at once. */
template <bool smem>
__device__ __forceinline__ void kq_stage_records(uint8_t *aux, int nb, const float2 *gds) {
    for (int i = (int)(blockDim.x - 1 - threadIdx.x); i < nb * 2; i += blockDim.x) {
        const int b = i >> 1, c0 = i & 1;
        float2 ds[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float2 *p = gds + 16 * b + 4 * (c0 + 2 * (k >> 2)) + (k & 3);
            if constexpr (smem) ds[k] = *p;
            else ds[k] = __ldcg(p);
        }
        kq_stage_rec(aux, b, c0, ds);
    }
}

/* Paired staging (mu_cu_mv.pair): unit k of this block's half, past the
 * end when >= the count (runs of 2^log units alternate between the ranks) */
__device__ __forceinline__ int pair_own(int k, int log, unsigned rank) {
    return (((k >> log) << 1 | (int)rank) << log) | (k & ((1 << log) - 1));
}

/* Stages the int8 input and the lane records (quant: x is quantized into
 * int8 groups here). Kept register-light: the first batch's weights stay
 * live across it, at 64 registers a thread (loading two items per thread
 * before storing spilled ~100-200 bytes in every K-quant kernel and was
 * measured 11% slower per token). */
template <bool quant>
__device__ __forceinline__ void kq_stage(const mu_cu_act &a, int64_t cols, uint8_t *sm, bool pair = false) {
    const int nb = (int)(cols >> 8);
    uint8_t *aux = sm + (size_t)nb * KQ_XQ;
    const float2 *gds = reinterpret_cast<const float2 *>(a.ds);
    if constexpr (quant) {
        /* one thread per group of 16: int8 into place, (d, d * sum) aside */
        float2 *tmp = reinterpret_cast<float2 *>(sm + kq_stage_bytes(cols));
        if (pair) {
            /* this block quantizes half of the groups (runs of 8: 512 bytes
             * of x), into both blocks: each block reads half of x from L2 */
            const unsigned rank = cluster_rank();
            const uint32_t psm = cluster_peer_addr(sm, rank ^ 1u), ptmp = cluster_peer_addr(tmp, rank ^ 1u);
            cluster_wait(); /* (the kernel's first arrive: the peer has started) */
            for (int k = threadIdx.x;; k += blockDim.x) {
                const int i = pair_own(k, 3, rank);
                if (i >= nb * 16) break;
                uint4 q;
                float2 ds;
                quant_group16(a.x, i, q, ds);
                const int off = KQ_XQ * (i >> 4) + 16 * (i & 15);
                *reinterpret_cast<uint4 *>(sm + off) = q;
                tmp[i] = ds;
                st_cluster(psm + (uint32_t)off, q);
                st_cluster(ptmp + 8u * (uint32_t)i, ds);
            }
            cluster_sync_all(); /* (the peer's stores visible; none after it) */
            kq_stage_records<quant>(aux, nb, tmp);
            return;
        }
        for (int i = threadIdx.x; i < nb * 16; i += blockDim.x) {
            uint4 q;
            float2 ds;
            quant_group16(a.x, i, q, ds);
            *reinterpret_cast<uint4 *>(sm + KQ_XQ * (i >> 4) + 16 * (i & 15)) = q;
            tmp[i] = ds;
        }
        __syncthreads();
        gds = tmp;
    } else {
        for (int i = threadIdx.x; i < nb * 16; i += blockDim.x)
            *reinterpret_cast<uint4 *>(sm + KQ_XQ * (i >> 4) + 16 * (i & 15)) =
                __ldcg(reinterpret_cast<const uint4 *>(a.q) + i);
    }
    kq_stage_records<quant>(aux, nb, gds);
}

/* Norm-in staging (mu_cu_norm_in): every block forms x from h and the
 * branch parts with the residual/norm tail's arithmetic (two block sums,
 * the same order of operations), quantizes it in groups of 16 (4 lanes a
 * group, the tail's quantize4) into the staged layout and builds the
 * records; block 0 writes h'. Register-light (the first batch's weights
 * are live across it): nothing is held across a block sum; the summed
 * branch, then h', wait in shared memory. h is loaded after the first sum,
 * with the post-norm weights: one vector of shared memory, not two
 * (+0.5% against h loaded with the branch and kept, one same-call A/B,
 * near its spread). */
__device__ __noinline__ void kq_stage_norm(const mu_cu_norm_in &ni, int64_t cols, uint8_t *sm,
                                          unsigned long long *srow) {
    __shared__ float red[33];
    const int n = (int)cols, nb = n >> 8, nc = n >> 2;
    uint8_t *aux = sm + (size_t)nb * KQ_XQ;
    float2 *gds = reinterpret_cast<float2 *>(sm + kq_stage_bytes(cols)); /* per group (d, d * sum(q)) */
    float4 *vsm = reinterpret_cast<float4 *>(sm + kq_stage_bytes(cols) + (size_t)(n / 16) * 8);
    const int np = ni.parts > 1 ? ni.parts : 1;
    float st = 0.f;
    for (int c = threadIdx.x; c < nc; c += blockDim.x) {
        float4 bv = __ldcg(reinterpret_cast<const float4 *>(ni.branch) + c);
        for (int p = 1; p < np; p++) {
            const float4 w = __ldcg(reinterpret_cast<const float4 *>(ni.branch + p * ni.part_stride) + c);
            bv = make_float4(bv.x + w.x, bv.y + w.y, bv.z + w.z, bv.w + w.w);
        }
        st = f4sq_acc(st, bv);
        vsm[c] = bv;
    }
    warp_stage_stamp(srow, 9), warp_stage_stamp(srow, 10, true);
    const float r1 = ni.w_post ? 1.0f / sqrtf(block_sum(st, red) / (float)n + ni.eps_post) : 1.0f;
    block_stage_stamp(srow, 4);
    float ss2 = 0.f;
    for (int c = threadIdx.x; c < nc; c += blockDim.x) {
        const float4 h = __ldcg(reinterpret_cast<const float4 *>(ni.h) + c);
        const float4 w = ni.w_post ? __ldg(reinterpret_cast<const float4 *>(ni.w_post) + c) : make_float4(0, 0, 0, 0);
        const float4 hv = residual_add4(h, vsm[c], ni.w_post != nullptr, r1, w);
        vsm[c] = hv;
        if (blockIdx.x == 0 && ni.h_out) reinterpret_cast<float4 *>(ni.h_out)[c] = hv;
        ss2 = f4sq_acc(ss2, hv);
    }
    warp_stage_stamp(srow, 11);
    const float r2 = 1.0f / sqrtf(block_sum(ss2, red) / (float)n + ni.eps_next);
    block_stage_stamp(srow, 5);
    /* (a group's 4 chunks are 4 consecutive threads: n % 16 == 0, blockDim % 4 == 0) */
    for (int c = threadIdx.x; c < nc; c += blockDim.x) {
        float4 a = f4mul(vsm[c], r2);
        if (ni.w_next) {
            const float4 w = __ldg(reinterpret_cast<const float4 *>(ni.w_next) + c);
            a = make_float4(a.x * w.x, a.y * w.y, a.z * w.z, a.w * w.w);
        }
        /* quantize4 stores at q + 4c: q is set so that lands in group g's staged 16 bytes */
        const int g = c >> 2;
        int8_t *q = reinterpret_cast<int8_t *>(sm + KQ_XQ * (g >> 4) + 16 * (g & 15) - 16 * g);
        quantize4(a, 4 * c, q, reinterpret_cast<float *>(gds));
    }
    warp_stage_stamp(srow, 12);
    __syncthreads();
    kq_stage_records<true>(aux, nb, gds);
    warp_stage_stamp(srow, 13);
}

#include "cuda/cu_attn_in.cuh"

/* The staged input of lane-block (b, c0). */
template <uint32_t TYPE>
__device__ __forceinline__ void kq_act_load(const uint8_t *sm, int nb, int b, int c0, kq_act &x) {
    const uint8_t *xq = sm + KQ_XQ * b + 64 * c0;
#pragma unroll
    for (int cc = 0; cc < 2; cc++)
#pragma unroll
        for (int t = 0; t < 4; t++) x.xa[cc][t] = *reinterpret_cast<const kq_u4 *>(xq + 128 * cc + 16 * t);
    const uint8_t *rec = sm + (size_t)nb * KQ_XQ + KQ_AUX * b + 64 * c0;
    const float4 d0 = reinterpret_cast<const float4 *>(rec)[0], d1 = reinterpret_cast<const float4 *>(rec)[1];
    x.dx[0] = d0.x, x.dx[1] = d0.y, x.dx[2] = d0.z, x.dx[3] = d0.w;
    x.dx[4] = d1.x, x.dx[5] = d1.y, x.dx[6] = d1.z, x.dx[7] = d1.w;
    if (TYPE == MU_TYPE_Q6_K) {
        const uint4 p = reinterpret_cast<const uint4 *>(rec)[3];
        x.asum[0] = (int)(int16_t)(p.x & 0xFFFF), x.asum[1] = (int)p.x >> 16;
        x.asum[2] = (int)(int16_t)(p.y & 0xFFFF), x.asum[3] = (int)p.y >> 16;
        x.asum[4] = (int)(int16_t)(p.z & 0xFFFF), x.asum[5] = (int)p.z >> 16;
        x.asum[6] = (int)(int16_t)(p.w & 0xFFFF), x.asum[7] = (int)p.w >> 16;
    } else {
        const float4 S = reinterpret_cast<const float4 *>(rec)[2];
        x.S[0] = S.x, x.S[1] = S.y, x.S[2] = S.z, x.S[3] = S.w;
    }
}

template <uint32_t T>
struct kq_type_tag {
    static constexpr uint32_t value = T;
};

/* K-quant family. TYPE 0: the type of each segment, switched per batch
 * (launches mixing K-quants, and the exact lane). */
template <uint32_t TYPE>
struct PolKQ {
    static constexpr int PER_BATCH = 16; /* blocks */
    static constexpr int PART_ALIGN = 16; /* parts start at a tile group */
    static constexpr bool FLAT_OK = TYPE != 0; /* gate/up in flat batches (one type) */
    static constexpr bool CUT_OK = true; /* STORE in ranges cut inside rows (mv_kernel, FLAT 2) */
    static constexpr uint32_t KQ_TYPE = TYPE;
    static constexpr bool PACKS = false; /* PolKQP: short row-dots share a batch */
    struct Regs {
        KqLane<uint4> L;
        int b;
        bool on;
    };
    __device__ static int items(const mu_cu_weight &w) { return (int)(w.cols >> 8); }
    static constexpr bool NORM_IN = true; /* can form its input (QI 2: mu_cu_norm_in) */
    template <int Q>
    __device__ static void stage(const mu_cu_mv &a, uint8_t *sm) {
        if constexpr (Q == 3) kq_stage_attn(a.ad, a.seg[0].w.cols, sm, a.lab);
        else if constexpr (Q == 2) kq_stage_norm(a.nin, a.seg[0].w.cols, sm, MUSER_LAB_STAMPS ? stage_row(a.stamp_id) : nullptr);
        else kq_stage<Q == 1>(a.act, a.seg[0].w.cols, sm, a.pair);
    }

    template <uint32_t T>
    __device__ static void load_t(Regs &R, const mu_cu_weight &w, int64_t row) {
        kq_load<T>(R.L, w, row, R.b, threadIdx.x & 1);
    }
    /* blocks [i0, i1) of the row: lane pair (l >> 1) takes block i0 + (l >> 1) */
    __device__ static void load(Regs &R, const mu_cu_weight &w, int64_t row, int i0, int i1) {
        const int b = i0 + ((threadIdx.x & 31) >> 1);
        load_at(R, w, row, b, b < i1);
    }
    /* block b of the row, this lane's half of it (off: nothing) */
    __device__ static void load_at(Regs &R, const mu_cu_weight &w, int64_t row, int b, bool on) {
        R.b = b;
        R.on = on;
        if (!on) return;
        if (TYPE) {
            load_t<TYPE>(R, w, row);
            return;
        }
        switch (w.type) {
        case MU_TYPE_Q4_K: load_t<MU_TYPE_Q4_K>(R, w, row); break;
        case MU_TYPE_Q5_K: load_t<MU_TYPE_Q5_K>(R, w, row); break;
        default: load_t<MU_TYPE_Q6_K>(R, w, row); break;
        }
    }
    template <uint32_t T>
    __device__ static float fast_t(const Regs &R, const uint8_t *sm, int nb) {
        kq_act x;
        kq_act_load<T>(sm, nb, R.b, threadIdx.x & 1, x);
        return kq_dot_fast<T>(R.L, threadIdx.x & 1, x);
    }
    /* load_at and dot_fast for a type known to the caller (cut ranges: one
     * segment a block, so the mixed launch's blocks switch once, not per batch) */
    template <uint32_t T>
    __device__ static void load_at_t(Regs &R, const mu_cu_weight &w, int64_t row, int b, bool on) {
        R.b = b;
        R.on = on;
        if (on) load_t<T>(R, w, row);
    }
    template <uint32_t T>
    __device__ static float dot_fast_t(const Regs &R, const uint8_t *sm, int nb) {
        return R.on ? fast_t<T>(R, sm, nb) : 0.f;
    }
    __device__ static float dot_fast(const Regs &R, const mu_cu_weight &w, int64_t, const mu_cu_act &,
                                     const uint8_t *sm) {
        if (!R.on) return 0.f;
        const int nb = (int)(w.cols >> 8);
        if (TYPE) return fast_t<TYPE>(R, sm, nb);
        switch (w.type) {
        case MU_TYPE_Q4_K: return fast_t<MU_TYPE_Q4_K>(R, sm, nb);
        case MU_TYPE_Q5_K: return fast_t<MU_TYPE_Q5_K>(R, sm, nb);
        default: return fast_t<MU_TYPE_Q6_K>(R, sm, nb);
        }
    }
    template <uint32_t T>
    __device__ static float exact_t(const Regs &R, const float *x) {
        const float *xb = x + (int64_t)R.b * 256;
        return kq_dot_exact<T>(R.L, threadIdx.x & 1, [&](int i) { return __ldg(xb + i); });
    }
    __device__ static float dot_exact(const Regs &R, const mu_cu_weight &w, int64_t, const mu_cu_act &act) {
        if (!R.on) return 0.f;
        switch (w.type) {
        case MU_TYPE_Q4_K: return exact_t<MU_TYPE_Q4_K>(R, act.x);
        case MU_TYPE_Q5_K: return exact_t<MU_TYPE_Q5_K>(R, act.x);
        default: return exact_t<MU_TYPE_Q6_K>(R, act.x);
        }
    }
};

/* The same with short row-dots packed into batches (mu_cu_mv.pack > 1:
 * STORE and RESNORM launches only). */
template <uint32_t TYPE>
struct PolKQP : PolKQ<TYPE> {
    static constexpr bool CUT_OK = false;
    static constexpr bool PACKS = true;
};

/* A decoder's per-unit side record (TT::Side, loaded by TT::side with the
 * batch), or none. */
template <class T, class = void>
struct unit_side {
    struct type {};
    static constexpr bool has = false;
};
template <class T>
struct unit_side<T, std::void_t<typename T::Side>> {
    typedef typename T::Side type;
    static constexpr bool has = true;
};

/* Unit formats: lane l takes units i0 + 32k + l (k < MV_NB) of the row. */
template <class TT>
struct PolUnit {
    static constexpr int PER_BATCH = 32 * MV_NB; /* units */
    static constexpr int PART_ALIGN = 1; /* (equal parts: mu_cu_mv_parts) */
    static constexpr bool FLAT_OK = false;
    static constexpr bool CUT_OK = false;
    static constexpr bool PACKS = false;
    struct Regs {
        uint4 v[MV_NB];
        typename unit_side<TT>::type sd[MV_NB];
        int u0;
    };
    static constexpr bool NORM_IN = false;
    __device__ static int items(const mu_cu_weight &w) { return w.units; }
    /* the int8 input and its scales, copied as they are (Q 0) or quantized
     * from x (Q 1) */
    template <int Q>
    __device__ static void stage(const mu_cu_mv &a, uint8_t *sm) {
        static_assert(Q == 0 || Q == 1, "unit formats do not form their input");
        const int ne = (int)a.seg[0].w.cols;
        int8_t *sq = reinterpret_cast<int8_t *>(sm);
        float *sds = reinterpret_cast<float *>(sm + ((ne + 15) & ~15));
        if constexpr (Q == 1) {
            for (int i = threadIdx.x; i < ne / 16; i += blockDim.x) {
                uint4 q;
                float2 ds;
                quant_group16(a.act.x, i, q, ds);
                reinterpret_cast<uint4 *>(sq)[i] = q;
                reinterpret_cast<float2 *>(sds)[i] = ds;
            }
        } else {
            for (int i = threadIdx.x; i < ne / 16; i += blockDim.x)
                reinterpret_cast<int4 *>(sq)[i] = __ldcg(reinterpret_cast<const int4 *>(a.act.q) + i);
            for (int i = threadIdx.x; i < ne / 32; i += blockDim.x)
                reinterpret_cast<float4 *>(sds)[i] = __ldcg(reinterpret_cast<const float4 *>(a.act.ds) + i);
        }
    }
    __device__ static void load(Regs &R, const mu_cu_weight &w, int64_t row, int i0, int i1) {
        const int lane = threadIdx.x & 31;
        const uint8_t *p = w.qs + row * (int64_t)w.units * 16;
        R.u0 = i0;
#pragma unroll
        for (int k = 0; k < MV_NB; k++) {
            const int u = i0 + k * 32 + lane;
            R.v[k] = u < i1 ? ld_stream(p + (uint32_t)u * 16u) : make_uint4(0, 0, 0, 0);
        }
        if constexpr (unit_side<TT>::has) {
            const RowCtx rc = TT::row(w, row);
#pragma unroll
            for (int k = 0; k < MV_NB; k++) {
                const int u = i0 + k * 32 + lane;
                if (u < i1) R.sd[k] = TT::side(rc, u);
            }
        }
    }
    __device__ static float dot_fast(const Regs &R, const mu_cu_weight &w, int64_t row, const mu_cu_act &act,
                                     const uint8_t *sm) {
        mu_cu_act s = act;
        const int ne = (int)w.cols;
        s.q = reinterpret_cast<const int8_t *>(sm);
        s.ds = reinterpret_cast<const float *>(sm + ((ne + 15) & ~15));
        const RowCtx rc = TT::row(w, row);
        const int lane = threadIdx.x & 31, n = w.units;
        float acc = 0.f;
#pragma unroll
        for (int k = 0; k < MV_NB; k++) {
            const int u = R.u0 + k * 32 + lane;
            if constexpr (unit_side<TT>::has) {
                if (u < n) acc += TT::dot_q8(rc, u, R.v[k], R.sd[k], s);
            } else {
                if (u < n) acc += TT::dot_q8(rc, u, R.v[k], s);
            }
        }
        return acc;
    }
    __device__ static float dot_exact(const Regs &R, const mu_cu_weight &w, int64_t row, const mu_cu_act &act) {
        const RowCtx rc = TT::row(w, row);
        const int lane = threadIdx.x & 31, n = w.units;
        float acc = 0.f;
#pragma unroll
        for (int k = 0; k < MV_NB; k++) {
            const int u = R.u0 + k * 32 + lane;
            if constexpr (unit_side<TT>::has) {
                if (u < n) acc += TT::dot_f32(rc, u, R.v[k], R.sd[k], act);
            } else {
                if (u < n) acc += TT::dot_f32(rc, u, R.v[k], act);
            }
        }
        return acc;
    }
};

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

/* The weight bytes of row-dot (row, items [i0, i1)) into L2 (lane 0; one
 * bulk prefetch per stream). */
__device__ __forceinline__ void rowdot_prefetch_l2(const mu_cu_weight &w, int64_t row, int i0, int i1) {
    const int64_t nb = w.cols >> 8;
    switch (w.type) {
    case MU_TYPE_Q4_K: case MU_TYPE_Q5_K: case MU_TYPE_Q6_K: {
        int qh, meta, d;
        kq_streams(w.type, qh, meta, d);
        /* whole tile groups (16 blocks from the row's start, load-major): a
         * range cut inside a group holds its blocks' bytes only in part */
        i0 &= ~15;
        i1 = (int)min((int64_t)((i1 + 15) & ~15), nb);
        const int64_t b0 = row * nb + i0, n = i1 - i0;
        prefetch_l2_range(w.qs + b0 * 128, (uint64_t)n * 128);
        prefetch_l2_range(w.meta + b0 * meta, (uint64_t)n * meta);
        if (qh) prefetch_l2_range(w.qh + b0 * qh, (uint64_t)n * qh);
        if (d) prefetch_l2_range(w.d + b0, (uint64_t)n * 2);
        break;
    }
    default: prefetch_l2_range(w.qs + (row * w.units + i0) * 16, (uint64_t)(i1 - i0) * 16); break;
    }
}

/* Orders this thread's earlier writes before a later counter update (and,
 * after reading the counter, later reads after it): a release/acquire
 * fence (measured: as fast as __threadfence's sequentially consistent one,
 * and all the counters need). */
__device__ __forceinline__ void fence_acq_rel() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

/* The ranks of a tensor-parallel step meet (one block of each): this
 * rank's writes, which its block has acquired from the other blocks, are
 * released to the system (one fence, then relaxed stores: the release
 * pattern); each rank's slot in every other rank's inbox is raised to the
 * new epoch; the block waits until every other rank's slot in its own
 * inbox has reached it (relaxed polls, one acquire fence after). The
 * peers' data is then read through the LSA mapping. epoch: this rank's
 * count before the meeting (thread 0 loaded it during the handshake). A
 * peer missing for 20 s (a failed launch on its GPU) traps: an error, not
 * a hang. */
__device__ __noinline__ void xrank_meet(const mu_cu_xrank &x, uint32_t epoch) {
    if (threadIdx.x == 0) {
        const uint32_t e = epoch + 1u;
        *x.epoch = e;
        asm volatile("fence.acq_rel.sys;" ::: "memory");
        for (int p = 0; p < x.n; p++) {
            if (p == x.rank) continue;
            uint32_t *slot = x.inbox0 + (int64_t)p * x.stride + x.rank;
            asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(slot), "r"(e) : "memory");
        }
        uint64_t t0;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        for (int p = 0; p < x.n; p++) {
            if (p == x.rank) continue;
            const uint32_t *slot = x.inbox0 + (int64_t)x.rank * x.stride + p;
            for (;;) {
                uint32_t got;
                asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(got) : "l"(slot) : "memory");
                if ((int32_t)(got - e) >= 0) break;
                uint64_t t;
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
                if (t - t0 > 20000000000ull) __trap();
            }
        }
        asm volatile("fence.acq_rel.sys;" ::: "memory"); /* (thread 0's acquire covers the block via the barrier) */
    }
    __syncthreads();
}

/* QI: how the fast lane's input is staged: 0 copied as int8, 1 quantized
 * from f32 (mu_cu_mv.quant_input), 2 formed from the residual and the
 * branch (mu_cu_mv.nin), 3 the decode attention (mu_cu_mv.attn_in,
 * cu_attn_in.cuh); a template parameter (the quantizing code in every
 * kernel spilled registers). */
template <class P, int LANE, int EPI, int QI, int FLAT = 0>
__global__ void __launch_bounds__(mv_warps<LANE>() * 32, 1) mv_kernel(const __grid_constant__ mu_cu_mv a) {
    constexpr int NW = mv_warps<LANE>();
    pdl_trigger();
    if (a.pair) cluster_arrive_relaxed(); /* (the staging waits on it before its first store to the peer) */
    if (MUSER_LAB_STAMPS && a.stamp_id >= 0 && threadIdx.x == 0) { /* (lab: parameters only, nothing kept live) */
        stage_row(a.stamp_id)[0] = EPI * 4 + QI + 1; /* (every block writes the same) */
        stage_stamp(stage_row(a.stamp_id), 1, true);
    }
    extern __shared__ __align__(16) uint8_t mv_smem[]; /* the staged input (fast lane) */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t W = (int64_t)gridDim.x * NW, gw = (int64_t)blockIdx.x * NW + warp;
    /* the round-robin's warp order, warp-major: a partial last round falls
     * on the same warps of every block, so every SM streams about the same
     * bytes (block-major, blocks 0-75 of the 30B's Wo took two rows a warp
     * and blocks 76-131 one, and the blocks' ends followed their index) */
    const int64_t gi = a.lab & MU_CU_LAB_BLOCK_MAJOR ? gw : (int64_t)warp * gridDim.x + blockIdx.x;
    const int n_items = P::items(a.seg[0].w); /* every segment reads the same input */
    /* part p of a row-dot: items [p plen, min((p + 1) plen, n_items)); K-quant
     * parts are cut at the tiles' groups of 16 blocks, the last one shorter */
    const int parts = a.parts > 1 ? a.parts : 1;
    const int plen = parts == 1 ? n_items : (n_items + parts - 1) / parts + P::PART_ALIGN - 1 & ~(P::PART_ALIGN - 1);
    const int64_t jobs = EPI == MU_CU_EPI_GATEUP ? a.seg[0].w.rows : a.rows_total * parts;
    /* row-dot r of the launch (r < jobs) -> (segment, row, part) */
    auto locate_id = [&](int64_t r, int &seg, int64_t &row, int &part) {
        part = (int)(r / a.rows_total);
        r -= (int64_t)part * a.rows_total;
        seg = 0;
        while (r >= a.seg[seg].w.rows) r -= a.seg[seg].w.rows, seg++;
        row = r;
    };
    /* row-dot k of this warp -> (segment, row, part); false past the end */
    auto locate = [&](int64_t k, int &seg, int64_t &row, int &part) -> bool {
        if (EPI == MU_CU_EPI_GATEUP) {
            row = gi + (k >> 1) * W;
            seg = (int)(k & 1);
            part = 0;
            return row < jobs;
        }
        const int64_t r = gi + k * W;
        if (r >= jobs) return false;
        locate_id(r, seg, row, part);
        return true;
    };

    /* Packed launches (a.pack > 1: row-dots of plen = 16 / pack blocks, stored
     * as they are): a batch holds pack whole row-dots, lane pair p takes
     * block p % plen of row-dot pack * j + p / plen of the warp's job j, so
     * short rows (a tensor-parallel rank's Wo: 8 blocks) fill the warp. */
    constexpr bool PACKED = P::PACKS && (EPI == MU_CU_EPI_STORE || EPI == MU_CU_EPI_RESNORM);
    const int pack = PACKED ? a.pack : 1;
    const int psub = PACKED ? (lane >> 1) / plen : 0, pblk = (lane >> 1) - psub * plen;
    int cs = 0, cp = 0;
    int64_t cr = 0, ck = 0;
    bool have;
    typename P::Regs R;
    /* packed job k of this warp: this lane's block loaded; false past the end */
    auto load_packed = [&](int64_t k) -> bool {
        const int64_t j = gw + k * W, r = j * pack + psub;
        const bool on = r < jobs;
        cs = 0, cr = 0, cp = 0;
        if (on) locate_id(r, cs, cr, cp);
        if constexpr (PACKED) P::load_at(R, a.seg[cs].w, cr, cp * plen + pblk, on);
        return j * pack < jobs;
    };
    int ci0 = 0, cend = 0;
    /* FLAT (gate/up, fast lane): warp gw takes the row pairs [f_p0, f_p1) and
     * streams the range's blocks in batches of 16 that run across rows (lane
     * pair p on block 16 j + p of the range), gate's range then up's: a
     * 26-block row no longer leaves 6 of 16 lane pairs idle in its second
     * batch. Lane state: (f_row, f_b), the block it loads. */
    const int64_t f_p0 = FLAT == 1 ? gw * a.seg[0].w.rows / W : 0, f_p1 = FLAT == 1 ? (gw + 1) * a.seg[0].w.rows / W : 0;
    int64_t f_row = f_p0;
    int f_b = lane >> 1;
    /* CUT (FLAT 2: STORE, fast lane, K-quant rows of a batch or more): block
     * b takes the rows [c_r0, c_r0 + rows) of one segment c_s (launch_mv
     * spreads the blocks over the segments by bytes: every batch has one
     * weight type), and warp w the blocks [c_f0, c_f1) = [w T / NW,
     * (w + 1) T / NW) of those rows flattened (T = rows x nb), in batches
     * of 16 that run across rows as flat gate/up's do. A warp then streams
     * ceil(T / NW / 16) batches or fewer: the 30B's qkv + gate (8704 rows
     * of 26 blocks on 4224 warps) 4 at most, against 6 for the 256 warps
     * that took a third whole row (measured +1.9% a token at depth 0,
     * +1.5% at 2048, same call, one H200). Each range is a row long or
     * longer (launch_mv), so a row is cut between two warps at most: both
     * sums go to shared memory and are added in order at the block's end. */
    int c_s = 0, c_r0 = 0, c_T = 0, c_f0 = 0, c_f1 = 0;
    if constexpr (FLAT == 1) {
        have = f_p0 < f_p1;
        if (have) P::load_at(R, a.seg[0].w, f_row, f_b, true);
    } else if constexpr (FLAT == 2) {
        while (c_s + 1 < a.nseg && (int)blockIdx.x >= a.cut_b0[c_s + 1]) c_s++;
        const int bi = (int)blockIdx.x - a.cut_b0[c_s], nbk = a.cut_b0[c_s + 1] - a.cut_b0[c_s];
        const int64_t rows = a.seg[c_s].w.rows;
        c_r0 = (int)(bi * rows / nbk);
        c_T = (int)(((bi + 1) * rows / nbk - c_r0) * n_items);
        c_f0 = (int)((int64_t)warp * c_T / NW), c_f1 = (int)((int64_t)(warp + 1) * c_T / NW);
        const int f = c_f0 + (lane >> 1), fr = f / n_items; /* this lane's first block */
        f_row = c_r0 + fr, f_b = f - fr * n_items;
        have = c_f0 < c_f1;
        if (have) P::load_at(R, a.seg[c_s].w, f_row, f_b, f < c_f1);
    } else if constexpr (PACKED) {
        have = load_packed(0);
    } else {
        have = locate(0, cs, cr, cp);
        ci0 = cp * plen, cend = min(ci0 + plen, n_items);
        if (have) P::load(R, a.seg[cs].w, cr, ci0, min(ci0 + P::PER_BATCH, cend));
    }
    if (a.prefetch >= 1 && lane == 0 && !PACKED && !FLAT) {
        /* the next two row-dots into L2 while the previous kernel drains */
        for (int64_t k = 1; k <= 2; k++) {
            int ps, pp;
            int64_t pr;
            if (locate(k, ps, pr, pp)) rowdot_prefetch_l2(a.seg[ps].w, pr, pp * plen, min((pp + 1) * plen, n_items));
        }
    }
    if constexpr (QI == 2 && LANE == MU_CU_LANE_FAST) {
        if (!(a.lab & MU_CU_LAB_NO_NORM_W_L1)) {
            /* the norm weights (immutable) toward L1, a line per thread: the
             * staging's __ldg then hits L1, not L2 (+0.9% a token, same-call A/B) */
            const int lines = (int)(a.seg[0].w.cols * 4 / 128);
            for (int i = threadIdx.x; i < lines; i += blockDim.x) {
                if (a.nin.w_post) prefetch_l1(a.nin.w_post + 32 * i);
                if (a.nin.w_next) prefetch_l1(a.nin.w_next + 32 * i);
            }
        }
    }
    if constexpr (QI == 3 && LANE == MU_CU_LANE_FAST) /* the span's cached rows (written by no launch of the step) */
        if (!(a.lab & (MU_CU_LAB_NO_STAGE | MU_CU_LAB_NO_STAGE_COPY)))
            attn_in_preload(a.ad, attn_in_region(mv_smem, a.seg[0].w.cols), !(a.lab & MU_CU_LAB_ATTN_IN_NO_PRELOAD));
    pdl_wait(); /* the weights above are immutable; activations come after */
    if (MUSER_LAB_STAMPS) {
        block_stage_stamp(stage_row(a.stamp_id), 2, true), block_stage_stamp(stage_row(a.stamp_id), 3);
        if (threadIdx.x == 0) block_span_stamp(a.stamp_id, 0);
    }
    if constexpr (EPI == MU_CU_EPI_RESNORM) {
        /* what the tail reads from DRAM (h, the norm weights) into L2 now,
         * so the tail's one round of loads hits L2 */
        if (blockIdx.x == 0 && threadIdx.x == 0 && !(a.lab & MU_CU_LAB_NO_TAIL_PREFETCH)) {
            prefetch_l2_range(a.rn.h, (uint64_t)a.rn.n * 4);
            if (a.rn.w_post) prefetch_l2_range(a.rn.w_post, (uint64_t)a.rn.n * 4);
            if (a.rn.w_next) prefetch_l2_range(a.rn.w_next, (uint64_t)a.rn.n * 4);
        }
    }

    constexpr unsigned no_stage_qi = QI == 2 ? MU_CU_LAB_NO_STAGE_NORM : QI == 1 ? MU_CU_LAB_NO_STAGE_QUANT : MU_CU_LAB_NO_STAGE_COPY; /* (QI 3: copy) */
    if (LANE == MU_CU_LANE_FAST && !(a.lab & (MU_CU_LAB_NO_STAGE | no_stage_qi))) {
        P::template stage<QI>(a, mv_smem);
        __syncthreads();
    }
    if (MUSER_LAB_STAMPS) block_stage_stamp(stage_row(a.stamp_id), 6), block_stage_stamp(stage_row(a.stamp_id), 8, true);

    float acc = 0.f, gate = 0.f;
    unsigned long long best = 0ull;
    if constexpr (PACKED) {
        while (have) {
            float v = LANE == MU_CU_LANE_FAST ? P::dot_fast(R, a.seg[cs].w, cr, a.act, mv_smem)
                                              : P::dot_exact(R, a.seg[cs].w, cr, a.act);
            const bool on = R.on;
            float *y = a.seg[cs].y + cr + (int64_t)cp * a.seg[cs].w.rows;
            have = load_packed(++ck); /* the next loads fly during the sums */
            for (int o = 1; o < 2 * plen; o <<= 1) v += __shfl_xor_sync(MU_FULL, v, o);
            if (on && (lane & (2 * plen - 1)) == 0) *y = v;
        }
    }
    /* the epilogue of a complete row-dot (segment cs, row cr, part cp) */
    auto row_done = [&](const float y) {
        if constexpr (EPI == MU_CU_EPI_GATEUP) {
            if (cs == 0) {
                gate = y;
            } else {
                const float prod = swiglu1(gate, y);
                unsigned prev = 0;
                if (lane == 0) {
                    a.gu.x[cr] = prod;
                    if (a.gu.h) a.gu.h[cr] = f32_to_f16(prod);
                    if (a.gu.q && !(a.lab & MU_CU_LAB_NO_GROUP_QUANT)) {
                        fence_acq_rel();
                        prev = atomicAdd(a.group_count + (cr >> 4), 1u);
                    }
                }
                prev = __shfl_sync(MU_FULL, prev, 0);
                if (a.gu.q && prev == 15) {
                    /* the group's last product: quantize its 16 values */
                    fence_acq_rel();
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
                const uint32_t hsh = hash32(a.hdr->seed, (uint32_t)a.hdr->pos, (uint32_t)(cr + a.vocab0));
                const float uu = ((float)(hsh >> 8) + 0.5f) * (1.0f / 16777216.0f);
                sel = v / temp - logf(-logf(uu)); /* Gumbel-max: a softmax sample */
            }
            const unsigned long long key = ((unsigned long long)ordered_bits(sel) << 32) |
                                           (unsigned long long)(0xFFFFFFFFu - (uint32_t)(cr + a.vocab0));
            best = key > best ? key : best;
        } else {
            if (lane == 0) a.seg[cs].y[cr + (int64_t)cp * a.seg[cs].w.rows] = y;
        }
    };
    if constexpr (FLAT == 1) {
        __shared__ float f_gate[NW][MV_FLAT_ROWS]; /* the range's gate sums, up's pass reads them */
        const int nb = n_items;
        int pass = 0; /* 0: gate, 1: up */
        int64_t row_a = f_p0; /* the range's oldest incomplete row in this pass */
        int bs = 0;           /* the batch's first block within row_a */
        float acc_a = 0.f, acc_b = 0.f; /* this lane's sums of row_a, row_a + 1 */
        while (have) {
            const float v = P::dot_fast(R, a.seg[pass].w, f_row, a.act, mv_smem); /* (0 when off) */
            if (f_row == row_a) acc_a += v;
            else acc_b += v;
            const bool done_a = nb - bs <= P::PER_BATCH; /* row_a's last block is in this batch */
            /* the next batch, its loads in flight during the sums */
            int64_t n_row_a = row_a;
            int n_bs = bs + P::PER_BATCH, n_pass = pass;
            if (n_bs >= nb) n_bs -= nb, n_row_a++;
            f_b += P::PER_BATCH;
            if (f_b >= nb) f_b -= nb, f_row++;
            if (n_row_a >= f_p1) n_pass++, n_row_a = f_p0, n_bs = 0, f_row = f_p0, f_b = lane >> 1;
            have = n_pass < 2;
            if (have) P::load_at(R, a.seg[n_pass].w, f_row, f_b, f_row < f_p1);
            if (done_a) {
                const float y = warp_sum(acc_a);
                acc_a = acc_b;
                acc_b = 0.f;
                const int i = (int)(row_a - f_p0);
                if (pass == 0) {
                    if (lane == 0) f_gate[warp][i] = y;
                    __syncwarp();
                } else {
                    gate = f_gate[warp][i];
                    cs = 1;
                    cr = row_a;
                    row_done(y);
                }
            }
            row_a = n_row_a, bs = n_bs, pass = n_pass;
        }
    }
    if constexpr (FLAT == 2 && P::CUT_OK) {
        __shared__ float c_head[NW], c_tail[NW]; /* each warp's cut rows: its first, its last */
        const int nb = n_items;
        const int row_first = c_r0 + c_f0 / nb, row_last = c_r0 + (c_f1 - 1) / nb;
        const bool head_cut = c_f0 != (row_first - c_r0) * nb, tail_cut = c_f1 != (row_last - c_r0 + 1) * nb;
        int row_a = row_first; /* the oldest incomplete row */
        int fs = c_f0;         /* the batch's first block */
        float acc_a = 0.f, acc_b = 0.f; /* this lane's sums of row_a, row_a + 1 */
        auto store = [&](int row, float y) {
            if (lane != 0) return;
            if (row == row_first && head_cut) c_head[warp] = y;
            else if (row == row_last && tail_cut) c_tail[warp] = y;
            else a.seg[c_s].y[row] = y;
        };
        auto stream = [&](auto type) { /* the block's batches, its weight type known */
            constexpr uint32_t T = decltype(type)::value;
            const mu_cu_weight &w = a.seg[c_s].w;
            while (have) {
                const float v = P::template dot_fast_t<T>(R, mv_smem, nb); /* (0 when off) */
                if (f_row == row_a) acc_a += v;
                else acc_b += v;
                /* row_a's last block is in this batch (nb >= 16: the next row's
                 * only if the range ends in it, handled after the loop) */
                const bool done_a = (row_a - c_r0 + 1) * nb <= min(fs + P::PER_BATCH, c_f1);
                /* the next batch, its loads in flight during the sums */
                fs += P::PER_BATCH;
                f_b += P::PER_BATCH;
                if (f_b >= nb) f_b -= nb, f_row++;
                have = fs < c_f1;
                if (have) P::template load_at_t<T>(R, w, f_row, f_b, fs + (lane >> 1) < c_f1);
                if (done_a) {
                    store(row_a, warp_sum(acc_a));
                    acc_a = acc_b;
                    acc_b = 0.f;
                    row_a++;
                }
            }
        };
        if constexpr (P::KQ_TYPE != 0) {
            stream(kq_type_tag<P::KQ_TYPE>{});
        } else {
            switch (a.seg[c_s].w.type) {
            case MU_TYPE_Q4_K: stream(kq_type_tag<MU_TYPE_Q4_K>{}); break;
            case MU_TYPE_Q5_K: stream(kq_type_tag<MU_TYPE_Q5_K>{}); break;
            default: stream(kq_type_tag<MU_TYPE_Q6_K>{}); break;
            }
        }
        if (row_a <= row_last) store(row_a, warp_sum(acc_a)); /* the range's end cut it, or it began in the last batch */
        __syncthreads();
        if (threadIdx.x >= 1 && threadIdx.x < NW) { /* the row cut where warp w's range begins */
            const int f = (int)((int64_t)threadIdx.x * c_T / NW);
            if (f % nb) a.seg[c_s].y[c_r0 + f / nb] = c_tail[threadIdx.x - 1] + c_head[threadIdx.x];
        }
    }
    while (!PACKED && !FLAT && have) {
        const int ci1 = min(ci0 + P::PER_BATCH, cend);
        acc += LANE == MU_CU_LANE_FAST ? P::dot_fast(R, a.seg[cs].w, cr, a.act, mv_smem)
                                       : P::dot_exact(R, a.seg[cs].w, cr, a.act);
        if (ci1 < cend) { /* the rest of this row-dot */
            ci0 = ci1;
            P::load(R, a.seg[cs].w, cr, ci0, min(ci0 + P::PER_BATCH, cend));
            continue;
        }
        /* the row-dot is complete */
        const float y = warp_sum(acc);
        acc = 0.f;
        row_done(y);
        ck++;
        have = locate(ck, cs, cr, cp);
        ci0 = cp * plen;
        cend = min(ci0 + plen, n_items);
        if (have) P::load(R, a.seg[cs].w, cr, ci0, min(ci0 + P::PER_BATCH, cend));
    }

    if constexpr (EPI == MU_CU_EPI_LOGITS) {
        __shared__ unsigned long long best_w[NW];
        if (lane == 0) best_w[warp] = best;
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long m = 0ull;
            for (int i = 0; i < NW; i++) m = best_w[i] > m ? best_w[i] : m;
            if (m) atomicMax(a.best, m);
        }
    }
    if constexpr (EPI == MU_CU_EPI_RESNORM) {
        /* the last block to finish runs the residual + norm tail. Only
         * thread 0 synchronizes (the grid barrier's pattern), by one
         * acquire-release add: the barrier orders the block's writes before
         * its release, and its acquire before the block's reads (before: a
         * fence in every warp, then in every thread of the last block) */
        __shared__ int is_last;
        __shared__ unsigned long long *stamp_row; /* (block-uniform: the tail syncs on it) */
        __syncthreads();
        uint32_t epoch = 0; /* (thread 0: loaded here, its latency under the handshake's) */
        if (threadIdx.x == 0) {
            const unsigned long long c0 = clock64(); /* (the lab's stamp: the handshake's start) */
            stamp_row = nullptr;
            if (a.rn.xr.n > 1) epoch = *reinterpret_cast<volatile uint32_t *>(a.rn.xr.epoch);
            unsigned prev;
            asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(prev) : "l"(a.counter) : "memory");
            is_last = prev == gridDim.x - 1;
            if (is_last && (a.lab & MU_CU_LAB_TAIL_STAMPS)) {
                const unsigned row = atomicAdd(&g_tail_rows, 1u);
                if (row < TAIL_STAMP_ROWS) {
                    stamp_row = g_tail_stamps[row];
                    stamp_row[0] = (unsigned long long)a.rn.branch_parts;
                    stamp_row[1] = c0;
                    stamp_row[2] = clock64();
                }
            }
        }
        __syncthreads();
        unsigned long long *const stamp = stamp_row;
        if (is_last && a.rn.xr.n > 1) xrank_meet(a.rn.xr, epoch); /* every rank's branch is complete */
        if (is_last && !(a.lab & MU_CU_LAB_NO_TAIL)) {
            __shared__ __align__(16) float tail_sv[TAIL_MAXN];
            tail_stamp(stamp, 3);
            if (stamp && threadIdx.x == 0) stamp[7] = global_ns();
            resnorm_block<NW>(a.rn, 0, tail_sv, stamp);
        }
        if (is_last && threadIdx.x == 0) *a.counter = 0u;
    }
    if (MUSER_LAB_STAMPS && a.stamp_id >= 0 && (threadIdx.x & 31) == 0)
        stage_stamp(stage_row(a.stamp_id), 7, false), block_span_stamp(a.stamp_id, 1);
}

static int g_stage_next = 0; /* the next launch's row (host, at capture) */
extern "C" int mu_cu_lab_stage_stamps_begin(void) {
    g_stage_next = 0;
    return MUSER_LAB_STAMPS ? 0 : -1;
}

extern "C" int mu_cu_lab_stage_stamps(unsigned long long *out, int max_rows) {
    int rows = g_stage_next < STAGE_STAMP_ROWS ? g_stage_next : STAGE_STAMP_ROWS;
    if (rows > max_rows) rows = max_rows;
    if (cudaDeviceSynchronize() != cudaSuccess) return -1;
    if (rows && out &&
        cudaMemcpyFromSymbol(out, g_stage_stamps, sizeof(unsigned long long) * MU_CU_STAGE_STAMP_COLS * rows) !=
            cudaSuccess)
        return -1;
    static unsigned long long zero[STAGE_STAMP_ROWS][MU_CU_STAGE_STAMP_COLS];
    static unsigned long long zero_b[STAGE_BLOCK_ROWS][MU_CU_STAGE_BLOCKS_MAX][3];
    if (cudaMemcpyToSymbol(g_stage_stamps, zero, sizeof zero) != cudaSuccess ||
        cudaMemcpyToSymbol(g_block_stamps, zero_b, sizeof zero_b) != cudaSuccess)
        return -1;
    return rows;
}

extern "C" int mu_cu_lab_block_stamps(unsigned long long *out, int rows) {
    if (!MUSER_LAB_STAMPS || rows < 0 || rows > STAGE_BLOCK_ROWS || cudaDeviceSynchronize() != cudaSuccess) return -1;
    if (rows && cudaMemcpyFromSymbol(out, g_block_stamps, sizeof(unsigned long long) * MU_CU_STAGE_BLOCKS_MAX * 3 * rows) !=
                    cudaSuccess)
        return -1;
    return rows;
}

extern "C" int mu_cu_lab_tail_stamps(unsigned long long *out, int max_rows) {
    unsigned rows = 0;
    if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpyFromSymbol(&rows, g_tail_rows, sizeof rows) != cudaSuccess)
        return -1;
    if (rows > TAIL_STAMP_ROWS) rows = TAIL_STAMP_ROWS;
    if ((int)rows > max_rows) rows = (unsigned)max_rows;
    if (rows && cudaMemcpyFromSymbol(out, g_tail_stamps, sizeof(unsigned long long) * MU_CU_TAIL_STAMP_COLS * rows) !=
                    cudaSuccess)
        return -1;
    const unsigned zero = 0;
    if (cudaMemcpyToSymbol(g_tail_rows, &zero, sizeof zero) != cudaSuccess) return -1;
    return (int)rows;
}

static int g_occupancy = 0; /* blocks per SM; 0: as many as fit */
static int g_prefetch = 0;
extern "C" void mu_cu_set_matvec_prefetch(int level) { g_prefetch = level; }
static int g_grid_cap = 0;  /* blocks in all; 0: no cap */
static unsigned g_lab = 0;  /* MU_CU_LAB_* (timing experiments only) */
static bool g_lab_set = false;
extern "C" void mu_cu_set_matvec_lab(unsigned flags) { g_lab = flags, g_lab_set = true; }
/* MUSER_CUDA_LAB: the flags until a tool sets them (to run the tests on a variant) */
extern "C" unsigned mu_cu_get_matvec_lab(void) {
    if (!g_lab_set) {
        const char *e = getenv("MUSER_CUDA_LAB");
        g_lab = e ? (unsigned)strtoul(e, NULL, 0) : 0u;
        g_lab_set = true;
    }
    return g_lab;
}
extern "C" void mu_cu_set_matvec_occupancy(int blocks_per_sm) { g_occupancy = blocks_per_sm > 0 ? blocks_per_sm : 0; }
extern "C" void mu_cu_set_matvec_grid_cap(int blocks) { g_grid_cap = blocks > 0 ? blocks : 0; }

static bool is_kquant(uint32_t t) { return t == MU_TYPE_Q4_K || t == MU_TYPE_Q5_K || t == MU_TYPE_Q6_K; }

extern "C" int mu_cu_mv_parts(uint32_t type, int64_t cols) {
    /* K-quants: parts of two batches (32 blocks: the tiles' groups, cu_kq.cuh),
     * the last one shorter; unit formats: equal parts of at most 256 units */
    if (is_kquant(type)) {
        const int64_t items = cols / 256;
        return items <= 32 ? 1 : (int)((items + 31) / 32 < 8 ? (items + 31) / 32 : 8);
    }
    const int64_t items = mu_cu_units(type, cols);
    if (items <= 256) return 1;
    for (int p = 2; p <= 8; p++)
        if (items % p == 0 && items / p <= 256) return p;
    return 1;
}

extern "C" int mu_cu_mv_batch_parts(const mu_cu_mv *a) {
    if (a->epi != MU_CU_EPI_STORE || a->lane != MU_CU_LANE_FAST || a->nseg < 1 || a->split_parts) return 1;
    int64_t rows = 0;
    for (int i = 0; i < a->nseg; i++) {
        if (!is_kquant(a->seg[i].w.type) || a->seg[i].w.cols != a->seg[0].w.cols) return 1;
        rows += a->seg[i].w.rows;
    }
    const int64_t batches = (a->seg[0].w.cols / 256 + 15) / 16; /* per whole row */
    if (batches < 2 || batches > MU_CU_BATCH_PARTS_MAX) return 1;
    int dev = 0, sms = 0;
    if (current_device(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1)
        return 1;
    const int64_t warps = (int64_t)sms * mv_warps<MU_CU_LANE_FAST>(); /* one block per SM */
    /* a quarter fewer rounds at least: measured (same call, depth 0) on one
     * H200, qkv + gate 6 -> 5 rounds (only the last round's 256 warps gain)
     * -0.5%; on a rank of two, 4 -> 3 rounds (every warp) +2.0% */
    const int64_t whole = (rows + warps - 1) / warps * batches, split = (rows * batches + warps - 1) / warps;
    return 4 * split <= 3 * whole ? (int)batches : 1;
}

extern "C" size_t mu_cu_attn_in_launch_smem(int64_t cols, int n_head, int n_head_kv, int short_max) {
    return (size_t)(cols / 256) * (KQ_XQ + KQ_AUX) + (size_t)(cols / 16) * 8 +
           (size_t)mu_cu_attn_in_smem(n_head, n_head_kv, short_max, mv_warps<MU_CU_LANE_FAST>()).total;
}

/* Shared memory of a launch: the staged input (fast lane). */
static size_t stage_bytes_host(const mu_cu_mv *a, bool kq) {
    if (a->lane != MU_CU_LANE_FAST) return 0;
    const int64_t cols = a->seg[0].w.cols;
    if (kq && a->attn_in) return mu_cu_attn_in_launch_smem(cols, a->ad.qp.n_head, a->ad.qp.n_head_kv, a->ad.short_max);
    if (kq) /* + the groups' scales when quantizing or forming it, + the summed branch (then h') when forming it */
        return (size_t)(cols / 256) * (KQ_XQ + KQ_AUX) + (a->quant_input || a->nin.h ? (size_t)(cols / 16) * 8 : 0) +
               (a->nin.h ? (size_t)cols * 4 : 0);
    return (size_t)((cols + 15) & ~15) + (size_t)cols / 2;
}

/* Cut ranges (mv_kernel, FLAT 2) for a STORE launch of K-quant rows on
 * `blocks` blocks of nw warps: the blocks spread over the segments in
 * proportion to their bytes (cumulative rounding). False where they cannot
 * run (rows under a batch, a segment without a block or with fewer than nw
 * rows a block: a warp's range shorter than a row) or where a warp would
 * not stream fewer batches than with whole rows on as many warps. */
static bool cut_plan(mu_cu_mv *a, int nw, int64_t blocks, int per_batch) {
    if (a->parts > 1 || a->pack > 1 || a->nseg < 1 || blocks < a->nseg || (a->lab & MU_CU_LAB_NO_CUT)) return false;
    const int64_t nb = a->seg[0].w.cols / 256;
    if (nb < per_batch) return false;
    int64_t bytes[MU_CU_MAX_SEG], total = 0;
    for (int i = 0; i < a->nseg; i++) {
        const uint32_t t = a->seg[i].w.type;
        if (!is_kquant(t) || a->seg[i].w.cols != a->seg[0].w.cols) return false;
        bytes[i] = a->seg[i].w.rows * (int64_t)mu_row_bytes(t, a->seg[i].w.cols), total += bytes[i];
    }
    int64_t cum = 0, most = 0;
    a->cut_b0[0] = 0;
    for (int i = 0; i < a->nseg; i++) {
        cum += bytes[i];
        a->cut_b0[i + 1] = (int)((cum * blocks + total / 2) / total);
        const int64_t nbk = a->cut_b0[i + 1] - a->cut_b0[i], rows = a->seg[i].w.rows;
        if (nbk < 1 || rows / nbk < nw) return false;
        const int64_t range = ((rows + nbk - 1) / nbk * nb + nw - 1) / nw; /* the longest range */
        most = max(most, (range + per_batch - 1) / per_batch);
    }
    const int64_t w = blocks * nw, whole = (a->rows_total + w - 1) / w * ((nb + per_batch - 1) / per_batch);
    return most < whole || (a->lab & MU_CU_LAB_CUT);
}

/* Cut ranges run one block per SM (the tests' grid cap applies): fixed by
 * the device alone, so a host-side plan needs no occupancy query */
static int64_t cut_blocks(int sms) { return g_grid_cap > 0 && g_grid_cap < sms ? g_grid_cap : sms; }

/* fast-lane launches that quantize a K-quant input on an even grid with
 * pairs allowed, and those of them that ran paired (tests: that the route
 * ran; the backend needs compute capability 9.0, so clusters exist) */
static long long g_pair_eligible, g_pair_launches;
extern "C" long long mu_cu_pair_launches(long long *eligible) {
    if (eligible) *eligible = g_pair_eligible;
    return g_pair_launches;
}

/* A matvec launch on `blocks` blocks. Paired staging (mu_cu_mv.pair, in
 * clusters of two) where the launch quantizes its input (down: 80 KB of
 * f32 a block, read by every block), unless the lab turns it off, where
 * the grid is even and every pair fits the GPU at once. The norm-in
 * stagings paired the same way measured slower (docs/cuda-notes.md,
 * version 21): their cluster barriers cost more than half of their reads. */
template <class P, int LANE, int EPI, int QI, int FLAT>
static cudaError_t launch_mv_grid(const mu_cu_mv *in, int64_t blocks, size_t smem, int dev, cudaStream_t s) {
    constexpr int NW = mv_warps<LANE>();
    auto kernel = mv_kernel<P, LANE, EPI, QI, FLAT>;
    if constexpr (LANE == MU_CU_LANE_FAST && P::NORM_IN && QI == 1) {
        const bool staged = !(in->lab & (MU_CU_LAB_NO_STAGE | MU_CU_LAB_NO_STAGE_QUANT));
        if (!(in->lab & MU_CU_LAB_NO_PAIR) && staged && blocks % 2 == 0) {
            g_pair_eligible++;
            static int ok[MU_CU_MAX_DEVICES];
            static int64_t ok_blocks[MU_CU_MAX_DEVICES];
            static size_t ok_smem[MU_CU_MAX_DEVICES];
            if (ok_blocks[dev] != blocks || ok_smem[dev] != smem) {
                cudaLaunchConfig_t cfg = {};
                cfg.gridDim = dim3((unsigned)blocks);
                cfg.blockDim = dim3(NW * 32);
                cfg.dynamicSmemBytes = smem;
                cudaLaunchAttribute at;
                at.id = cudaLaunchAttributeClusterDimension;
                at.val.clusterDim.x = 2, at.val.clusterDim.y = 1, at.val.clusterDim.z = 1;
                cfg.attrs = &at;
                cfg.numAttrs = 1;
                int n = 0;
                if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) (void)cudaGetLastError(), n = 0;
                ok[dev] = 2 * (int64_t)n >= blocks;
                ok_blocks[dev] = blocks, ok_smem[dev] = smem;
            }
            if (ok[dev]) {
                mu_cu_mv c = *in;
                c.pair = 1;
                g_pair_launches++;
                return launch_pdl_cluster(kernel, dim3((unsigned)blocks), dim3(NW * 32), smem, s, 2, c);
            }
        }
    }
    return launch_pdl(kernel, dim3((unsigned)blocks), dim3(NW * 32), smem, s, *in);
}

template <class P, int LANE, int EPI, int QI = 0, int FLAT = 0>
static cudaError_t launch_mv(const mu_cu_mv *in, int64_t jobs, size_t stage, cudaStream_t s) {
    constexpr int NW = mv_warps<LANE>();
    static int sms[MU_CU_MAX_DEVICES], fit[MU_CU_MAX_DEVICES];
    static size_t fit_smem[MU_CU_MAX_DEVICES];
    int dev = 0;
    cudaError_t e = current_device(&dev);
    if (e != cudaSuccess) return e;
    if (!sms[dev]) {
        /* all the dynamic shared memory the kernel's static use leaves */
        int optin = 0;
        cudaFuncAttributes fa;
        e = cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, mv_kernel<P, LANE, EPI, QI, FLAT>);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(mv_kernel<P, LANE, EPI, QI, FLAT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     optin - (int)fa.sharedSizeBytes);
        if (e != cudaSuccess) return e;
        fit_smem[dev] = (size_t)-1;
    }
    const size_t smem = stage;
    if (smem != fit_smem[dev]) {
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit[dev], mv_kernel<P, LANE, EPI, QI, FLAT>, NW * 32, smem);
        if (e != cudaSuccess) return e;
        if (fit[dev] < 1) return cudaErrorInvalidConfiguration; /* does not fit an SM */
        fit_smem[dev] = smem;
    }
    const int per_sm = g_occupancy > 0 && g_occupancy < fit[dev] ? g_occupancy : fit[dev];
    /* as many warps as fit (measured +1.5-1.8% per token on one H200: more
     * bytes in flight in the full rounds), or as few as keep the same number
     * of rounds, every warp with as many row-dots (tensor-parallel ranks:
     * measured 3.5% faster at depth 2048, equal at 0) */
    const int64_t max_w = (int64_t)sms[dev] * per_sm * NW;
    /* flat ranges are cut over the warps the tests' grid cap leaves */
    const int64_t cap_w = g_grid_cap > 0 && max_w > (int64_t)g_grid_cap * NW ? (int64_t)g_grid_cap * NW : max_w;
    if constexpr (!FLAT && P::FLAT_OK && LANE == MU_CU_LANE_FAST && EPI == MU_CU_EPI_GATEUP && QI != 3) {
        /* flat batches over every warp that fits, when a row has a batch or
         * more, a warp's range fits its gate sums, and the most batches a
         * warp streams drop by an eighth at least. Measured (same call): a
         * rank of two, 3 pairs of 26-block rows per warp, 12 -> 10 batches,
         * +2.2% per token; one H200, 5 pairs, 20 -> 18, equal (the per-lane
         * row bookkeeping costs about what a tenth of the batches saves) */
        const int64_t rows = in->seg[0].w.rows, nb = in->seg[0].w.cols / 256;
        const int64_t range = (rows + cap_w - 1) / cap_w, per_row = (nb + P::PER_BATCH - 1) / P::PER_BATCH;
        const int64_t flat = 2 * ((range * nb + P::PER_BATCH - 1) / P::PER_BATCH), whole = 2 * range * per_row;
        const bool force = in->lab & MU_CU_LAB_FLAT;
        if (nb >= P::PER_BATCH && range <= MV_FLAT_ROWS && !(in->lab & MU_CU_LAB_NO_FLAT) && (force || 8 * flat <= 7 * whole))
            return launch_mv<P, LANE, EPI, QI, 1>(in, jobs, stage, s);
    }
    if constexpr (!FLAT && P::CUT_OK && LANE == MU_CU_LANE_FAST && EPI == MU_CU_EPI_STORE && QI != 3) {
        /* qkv + gate (one GPU), down's rank part; Wo's rows are one batch
         * (nothing to gain: whole rows stay) */
        mu_cu_mv c = *in;
        if (cut_plan(&c, NW, cut_blocks(sms[dev]), P::PER_BATCH)) return launch_mv<P, LANE, EPI, QI, 2>(&c, jobs, stage, s);
    }
    if constexpr (FLAT == 2) /* (cut_b0 planned above) */
        return launch_mv_grid<P, LANE, EPI, QI, FLAT>(in, cut_blocks(sms[dev]), smem, dev, s);
    if constexpr (FLAT) return launch_mv_grid<P, LANE, EPI, QI, FLAT>(in, cap_w / NW, smem, dev, s);
    const int64_t rounds = (jobs + max_w - 1) / max_w;
    const bool even = in->even_rounds || (in->lab & MU_CU_LAB_EVEN_ROUNDS);
    const int64_t warps = even ? (jobs + rounds - 1) / rounds : (jobs < max_w ? jobs : max_w);
    int64_t blocks = (warps + NW - 1) / NW;
    if (g_grid_cap > 0 && blocks > g_grid_cap) blocks = g_grid_cap;
    if (blocks < 1) blocks = 1;
    return launch_mv_grid<P, LANE, EPI, QI, FLAT>(in, blocks, smem, dev, s);
}

/* packed short rows (STORE, RESNORM) */
template <class P, int LANE>
static cudaError_t launch_packed(const mu_cu_mv *a, int64_t jobs, size_t smem, cudaStream_t s) {
    const bool res = a->epi == MU_CU_EPI_RESNORM;
    if constexpr (LANE == MU_CU_LANE_FAST)
        if (a->quant_input)
            return res ? launch_mv<P, LANE, MU_CU_EPI_RESNORM, 1>(a, jobs, smem, s)
                       : launch_mv<P, LANE, MU_CU_EPI_STORE, 1>(a, jobs, smem, s);
    return res ? launch_mv<P, LANE, MU_CU_EPI_RESNORM>(a, jobs, smem, s)
               : launch_mv<P, LANE, MU_CU_EPI_STORE>(a, jobs, smem, s);
}

template <class P, int LANE>
static cudaError_t launch_epi(const mu_cu_mv *a, int64_t jobs, size_t smem, cudaStream_t s) {
    if constexpr (LANE == MU_CU_LANE_FAST && P::NORM_IN)
        if (a->attn_in) /* Wo forming its input from the decode attention */
            return a->epi == MU_CU_EPI_STORE ? launch_mv<P, LANE, MU_CU_EPI_STORE, 3>(a, jobs, smem, s) : cudaErrorInvalidValue;
    if constexpr (LANE == MU_CU_LANE_FAST && P::NORM_IN)
        if (a->nin.h) { /* the consumers of a residual/norm boundary: gate/up, qkv, the LM head */
            if (a->epi == MU_CU_EPI_GATEUP) return launch_mv<P, LANE, MU_CU_EPI_GATEUP, 2>(a, jobs, smem, s);
            if (a->epi == MU_CU_EPI_STORE) return launch_mv<P, LANE, MU_CU_EPI_STORE, 2>(a, jobs, smem, s);
            if (a->epi == MU_CU_EPI_LOGITS) return launch_mv<P, LANE, MU_CU_EPI_LOGITS, 2>(a, jobs, smem, s);
            return cudaErrorInvalidValue;
        }
    if (LANE == MU_CU_LANE_FAST && a->quant_input) { /* the consumers of gate/up: down (tail or TP store) */
        if (a->epi == MU_CU_EPI_RESNORM) return launch_mv<P, LANE, MU_CU_EPI_RESNORM, 1>(a, jobs, smem, s);
        if (a->epi == MU_CU_EPI_STORE) return launch_mv<P, LANE, MU_CU_EPI_STORE, 1>(a, jobs, smem, s);
        return cudaErrorInvalidValue;
    }
    switch (a->epi) {
    case MU_CU_EPI_GATEUP: return launch_mv<P, LANE, MU_CU_EPI_GATEUP>(a, jobs, smem, s);
    case MU_CU_EPI_RESNORM: return launch_mv<P, LANE, MU_CU_EPI_RESNORM>(a, jobs, smem, s);
    case MU_CU_EPI_LOGITS: return launch_mv<P, LANE, MU_CU_EPI_LOGITS>(a, jobs, smem, s);
    default: return launch_mv<P, LANE, MU_CU_EPI_STORE>(a, jobs, smem, s);
    }
}

template <class P>
static cudaError_t launch_lane(const mu_cu_mv *a, int64_t jobs, size_t smem, cudaStream_t s) {
    if (a->lane == MU_CU_LANE_FAST) return launch_epi<P, MU_CU_LANE_FAST>(a, jobs, smem, s);
    return launch_epi<P, MU_CU_LANE_EXACT>(a, jobs, smem, s);
}

extern "C" cudaError_t mu_cu_matvec(const mu_cu_mv *in, cudaStream_t s) {
    mu_cu_mv a = *in;
    if (a.nseg < 1) return cudaErrorInvalidValue;
    a.prefetch = g_prefetch;
    a.pair = 0; /* (launch_mv_grid decides) */
    a.lab = mu_cu_get_matvec_lab();
    a.stamp_id = MUSER_LAB_STAMPS && (a.lab & MU_CU_LAB_STAGE_STAMPS) ? g_stage_next++ : -1;
    a.rows_total = 0;
    bool all_k = true, same = true;
    for (int i = 0; i < a.nseg; i++) {
        a.rows_total += a.seg[i].w.rows;
        if (a.seg[i].w.cols != a.seg[0].w.cols) return cudaErrorInvalidValue;
        all_k = all_k && is_kquant(a.seg[i].w.type);
        same = same && a.seg[i].w.type == a.seg[0].w.type;
    }
    if (!all_k && !same) {
        /* formats of different families: one launch per matrix (STORE only) */
        if (a.epi != MU_CU_EPI_STORE) return cudaErrorInvalidValue;
        for (int i = 0; i < in->nseg; i++) {
            mu_cu_mv one = *in;
            one.seg[0] = in->seg[i];
            one.nseg = 1;
            cudaError_t e = mu_cu_matvec(&one, s);
            if (e != cudaSuccess) return e;
        }
        return cudaSuccess;
    }
    /* norm-in staging: fast-lane K-quants only (fails closed) */
    if (a.nin.h && (a.lane != MU_CU_LANE_FAST || !all_k || a.quant_input)) return cudaErrorInvalidValue;
    /* attention-in staging: a fast-lane K-quant STORE of the decode attention's width */
    if (a.attn_in && (a.lane != MU_CU_LANE_FAST || !all_k || !same || a.epi != MU_CU_EPI_STORE || a.nin.h ||
                      a.quant_input || a.batch_parts > 1 || a.ad.qp.T != 1 || a.ad.qp.head_dim != 128 ||
                      a.ad.qp.n_head_kv < 1 || a.ad.qp.n_head_kv > mv_warps<MU_CU_LANE_FAST>() || a.ad.qp.n_rot > 128 ||
                      a.ad.qp.n_head % a.ad.qp.n_head_kv ||
                      a.ad.qp.n_head / a.ad.qp.n_head_kv > 16 || a.ad.qp.kv_f32 || a.ad.short_max < 1 ||
                      a.ad.short_max > MU_CU_ATTN_IN_MAX || a.seg[0].w.cols != (int64_t)a.ad.qp.n_head * 128))
        return cudaErrorInvalidValue;
    const uint32_t type = a.seg[0].w.type;
    a.parts = 1;
    if (a.batch_parts > 1) {
        /* row-dots in parts of one batch (mu_cu_mv_batch_parts; the consumer sums them) */
        if (a.epi != MU_CU_EPI_STORE || a.lane != MU_CU_LANE_FAST || !all_k || a.split_parts || a.nseg < 1 ||
            a.batch_parts > MU_CU_BATCH_PARTS_MAX || (int64_t)a.batch_parts * 16 < a.seg[0].w.cols / 256)
            return cudaErrorInvalidValue;
        a.parts = a.batch_parts;
    } else if (a.rn.xr.n > 1) {
        /* the tail sums the ranks' branches: whole rows, one part per rank */
        if (a.epi != MU_CU_EPI_RESNORM || a.rn.branch_parts != a.rn.xr.n) return cudaErrorInvalidValue;
    } else {
        if ((a.epi == MU_CU_EPI_RESNORM || (a.epi == MU_CU_EPI_STORE && a.split_parts)) && a.nseg == 1)
            a.parts = mu_cu_mv_parts(type, a.seg[0].w.cols);
        a.rn.branch_parts = a.parts;
    }
    int64_t jobs = a.epi == MU_CU_EPI_GATEUP ? a.seg[0].w.rows : a.rows_total * a.parts;
    /* K-quant row-dots of at most 8 blocks (a divisor of 16) share batches */
    const int64_t plen = all_k ? a.seg[0].w.cols / 256 / a.parts : 0;
    a.pack = 1;
    if (all_k && (a.epi == MU_CU_EPI_STORE || a.epi == MU_CU_EPI_RESNORM) && plen <= 8 && 16 % plen == 0 &&
        !a.nin.h && !a.attn_in && !(a.lab & MU_CU_LAB_NO_PACK)) {
        a.pack = (int)(16 / plen);
        jobs = (jobs + a.pack - 1) / a.pack;
    }
    const size_t smem = stage_bytes_host(&a, all_k);
    if (all_k && a.pack > 1) {
        if (a.lane != MU_CU_LANE_FAST) return launch_packed<PolKQP<0>, MU_CU_LANE_EXACT>(&a, jobs, smem, s);
        if (!same) return launch_packed<PolKQP<0>, MU_CU_LANE_FAST>(&a, jobs, smem, s);
        switch (type) {
        case MU_TYPE_Q4_K: return launch_packed<PolKQP<MU_TYPE_Q4_K>, MU_CU_LANE_FAST>(&a, jobs, smem, s);
        case MU_TYPE_Q5_K: return launch_packed<PolKQP<MU_TYPE_Q5_K>, MU_CU_LANE_FAST>(&a, jobs, smem, s);
        default: return launch_packed<PolKQP<MU_TYPE_Q6_K>, MU_CU_LANE_FAST>(&a, jobs, smem, s);
        }
    }
    if (all_k) {
        /* the exact lane and mixed K-quant launches switch per batch */
        if (a.lane != MU_CU_LANE_FAST) return launch_epi<PolKQ<0>, MU_CU_LANE_EXACT>(&a, jobs, smem, s);
        if (!same) {
            if (a.epi != MU_CU_EPI_STORE) return cudaErrorInvalidValue;
            if (a.nin.h) return launch_mv<PolKQ<0>, MU_CU_LANE_FAST, MU_CU_EPI_STORE, 2>(&a, jobs, smem, s);
            if (a.quant_input) return launch_mv<PolKQ<0>, MU_CU_LANE_FAST, MU_CU_EPI_STORE, 1>(&a, jobs, smem, s);
            return launch_mv<PolKQ<0>, MU_CU_LANE_FAST, MU_CU_EPI_STORE>(&a, jobs, smem, s);
        }
        switch (type) {
        case MU_TYPE_Q4_K: return launch_epi<PolKQ<MU_TYPE_Q4_K>, MU_CU_LANE_FAST>(&a, jobs, smem, s);
        case MU_TYPE_Q5_K: return launch_epi<PolKQ<MU_TYPE_Q5_K>, MU_CU_LANE_FAST>(&a, jobs, smem, s);
        default: return launch_epi<PolKQ<MU_TYPE_Q6_K>, MU_CU_LANE_FAST>(&a, jobs, smem, s);
        }
    }
    switch (type) {
    case MU_TYPE_Q8_0: return launch_lane<PolUnit<TQ80>>(&a, jobs, smem, s);
    case MU_TYPE_Q4_0: return launch_lane<PolUnit<TQ40>>(&a, jobs, smem, s);
    case MU_TYPE_Q4_1: return launch_lane<PolUnit<TIv<MU_TYPE_Q4_1>>>(&a, jobs, smem, s);
    case MU_TYPE_Q5_0: return launch_lane<PolUnit<TIv<MU_TYPE_Q5_0>>>(&a, jobs, smem, s);
    case MU_TYPE_Q5_1: return launch_lane<PolUnit<TIv<MU_TYPE_Q5_1>>>(&a, jobs, smem, s);
    case MU_TYPE_IQ4_NL: return launch_lane<PolUnit<TIv<MU_TYPE_IQ4_NL>>>(&a, jobs, smem, s);
    case MU_TYPE_IQ4_XS: return launch_lane<PolUnit<TIv<MU_TYPE_IQ4_XS>>>(&a, jobs, smem, s);
    case MU_TYPE_Q2_K: return launch_lane<PolUnit<TIv<MU_TYPE_Q2_K>>>(&a, jobs, smem, s);
    case MU_TYPE_Q3_K: return launch_lane<PolUnit<TIv<MU_TYPE_Q3_K>>>(&a, jobs, smem, s);
    case MU_TYPE_F32: return launch_lane<PolUnit<TFloat<0>>>(&a, jobs, smem, s);
    case MU_TYPE_F16: return launch_lane<PolUnit<TFloat<1>>>(&a, jobs, smem, s);
    case MU_TYPE_BF16: return launch_lane<PolUnit<TFloat<2>>>(&a, jobs, smem, s);
    default: return cudaErrorInvalidValue;
    }
}

/* ---- elementwise ------------------------------------------------------------------------- */

__global__ void swiglu_kernel(float *g, const float *u, uint16_t *h, int64_t total) {
    pdl_trigger(); /* the next grid may launch now; it waits for this one to finish */
    pdl_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const float x = g[i];
        const float v = swiglu1(x, u[i]);
        g[i] = v;
        if (h) h[i] = f32_to_f16(v);
    }
}

extern "C" cudaError_t mu_cu_swiglu_rows(float *g, const float *u, uint16_t *h, int64_t n, int T, cudaStream_t s) {
    return launch_pdl(swiglu_kernel, dim3(1024), dim3(256), 0, s, g, u, h, n * T);
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
    return launch_pdl(logits_finish_kernel, dim3(2048), dim3(256), 0, s, logits, n, scale, softcap);
}

__global__ void to_f16_kernel(const float *x, uint16_t *h, int64_t n) {
    pdl_trigger(); /* the next grid may launch now; it waits for this one to finish */
    pdl_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        h[i] = f32_to_f16(x[i]);
}

extern "C" cudaError_t mu_cu_to_f16(const float *x, uint16_t *h, int64_t n, cudaStream_t s) {
    return launch_pdl(to_f16_kernel, dim3(1024), dim3(256), 0, s, x, h, n);
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

/* ---- B-row matvec (batched decode, exact lane) -------------------------------------
 * y[j][r] = W[r] . x[j] for j < nrows: each warp loads a batch of a weight
 * row into registers once and dots it with every row's f32 input (the same
 * per-row arithmetic and order as the one-row kernel's exact lane), so the
 * weights stream from DRAM once for all rows; the inputs (a few KB per row)
 * come from L1/L2. Rows past NR run in further launches. */
template <class P, int NR>
__global__ void __launch_bounds__(512, 1) mvr_kernel(const __grid_constant__ mu_cu_weight w, const float *x,
                                                     int64_t ldx, float *y, int64_t ldy, int nrows) {
    constexpr int NW = 16;
    pdl_trigger();
    pdl_wait();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t W = (int64_t)gridDim.x * NW;
    const int n_items = P::items(w);
    for (int64_t row = (int64_t)blockIdx.x * NW + warp; row < w.rows; row += W) {
        float acc[NR];
#pragma unroll
        for (int j = 0; j < NR; j++) acc[j] = 0.f;
        for (int i0 = 0; i0 < n_items; i0 += P::PER_BATCH) {
            typename P::Regs R;
            P::load(R, w, row, i0, min(i0 + P::PER_BATCH, n_items));
#pragma unroll
            for (int j = 0; j < NR; j++)
                if (j < nrows) {
                    const mu_cu_act a = {x + j * ldx, NULL, NULL};
                    acc[j] += P::dot_exact(R, w, row, a);
                }
        }
#pragma unroll
        for (int j = 0; j < NR; j++)
            if (j < nrows) {
                const float s = warp_sum(acc[j]);
                if (lane == 0) y[j * ldy + row] = s;
            }
    }
}

template <class P, int NR>
static cudaError_t launch_mvr(const mu_cu_weight *w, const float *x, int64_t ldx, float *y, int64_t ldy, int nrows,
                              cudaStream_t s) {
    static int sms[MU_CU_MAX_DEVICES], fit[MU_CU_MAX_DEVICES];
    int dev = 0;
    cudaError_t e = current_device(&dev);
    if (e != cudaSuccess) return e;
    if (!sms[dev]) {
        e = cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev);
        if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit[dev], mvr_kernel<P, NR>, 512, 0);
        if (e != cudaSuccess) return e;
        if (fit[dev] < 1) fit[dev] = 1;
    }
    int64_t blocks = (w->rows + 15) / 16;
    const int64_t most = (int64_t)sms[dev] * fit[dev];
    if (blocks > most) blocks = most;
    return launch_pdl(mvr_kernel<P, NR>, dim3((unsigned)blocks), dim3(512), 0, s, *w, x, ldx, y, ldy, nrows);
}

template <class P>
static cudaError_t launch_mvr_rows(const mu_cu_weight *w, const float *x, int64_t ldx, float *y, int64_t ldy,
                                   int nrows, cudaStream_t s) {
    if (nrows <= 4) return launch_mvr<P, 4>(w, x, ldx, y, ldy, nrows, s);
    if (nrows <= 8) return launch_mvr<P, 8>(w, x, ldx, y, ldy, nrows, s);
    return launch_mvr<P, 16>(w, x, ldx, y, ldy, nrows, s);
}

extern "C" cudaError_t mu_cu_matvec_rows(const mu_cu_weight *w, const float *x, int64_t ldx, float *y, int64_t ldy,
                                         int nrows, cudaStream_t s) {
    for (int j0 = 0; j0 < nrows; j0 += MU_CU_MVR_MAX) {
        const int n = nrows - j0 < MU_CU_MVR_MAX ? nrows - j0 : MU_CU_MVR_MAX;
        const float *xj = x + (int64_t)j0 * ldx;
        float *yj = y + (int64_t)j0 * ldy;
        cudaError_t e;
        switch (w->type) {
        case MU_TYPE_Q4_K: case MU_TYPE_Q5_K: case MU_TYPE_Q6_K:
            e = launch_mvr_rows<PolKQ<0>>(w, xj, ldx, yj, ldy, n, s);
            break;
        case MU_TYPE_Q8_0: e = launch_mvr_rows<PolUnit<TQ80>>(w, xj, ldx, yj, ldy, n, s); break;
        case MU_TYPE_Q4_0: e = launch_mvr_rows<PolUnit<TQ40>>(w, xj, ldx, yj, ldy, n, s); break;
        case MU_TYPE_Q4_1: e = launch_mvr_rows<PolUnit<TIv<MU_TYPE_Q4_1>>>(w, xj, ldx, yj, ldy, n, s); break;
        case MU_TYPE_Q5_0: e = launch_mvr_rows<PolUnit<TIv<MU_TYPE_Q5_0>>>(w, xj, ldx, yj, ldy, n, s); break;
        case MU_TYPE_Q5_1: e = launch_mvr_rows<PolUnit<TIv<MU_TYPE_Q5_1>>>(w, xj, ldx, yj, ldy, n, s); break;
        case MU_TYPE_IQ4_NL: e = launch_mvr_rows<PolUnit<TIv<MU_TYPE_IQ4_NL>>>(w, xj, ldx, yj, ldy, n, s); break;
        case MU_TYPE_IQ4_XS: e = launch_mvr_rows<PolUnit<TIv<MU_TYPE_IQ4_XS>>>(w, xj, ldx, yj, ldy, n, s); break;
        case MU_TYPE_Q2_K: e = launch_mvr_rows<PolUnit<TIv<MU_TYPE_Q2_K>>>(w, xj, ldx, yj, ldy, n, s); break;
        case MU_TYPE_Q3_K: e = launch_mvr_rows<PolUnit<TIv<MU_TYPE_Q3_K>>>(w, xj, ldx, yj, ldy, n, s); break;
        case MU_TYPE_F32: e = launch_mvr_rows<PolUnit<TFloat<0>>>(w, xj, ldx, yj, ldy, n, s); break;
        case MU_TYPE_F16: e = launch_mvr_rows<PolUnit<TFloat<1>>>(w, xj, ldx, yj, ldy, n, s); break;
        case MU_TYPE_BF16: e = launch_mvr_rows<PolUnit<TFloat<2>>>(w, xj, ldx, yj, ldy, n, s); break;
        default: return cudaErrorInvalidValue;
        }
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
