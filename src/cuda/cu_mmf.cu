/* cu_mmf.cu — the batched fast lane on tensor cores in f16: Y[t][r] =
 * W[r] . x[t] for the K-quants, the weights read in place (cu_kq.cuh's
 * tiled streams) and dequantized to f16 in registers, the inputs f16.
 *
 * Why f16 rather than int8 inputs: the weights carry their scales into the
 * multiply, so a k16 step is one mma.sync m16n8k16 and the f32
 * accumulators take no per-token arithmetic; the dequantization is paid
 * once per weight, whatever the number of tokens.
 *
 * A warp owns 16 weight rows and NT tiles of 8 tokens; the four warps of a
 * block take four row groups over the same spans of K (two blocks each),
 * so each input fragment is read once from L2 for 64 rows and the other
 * warps find it in L1 (per 16 rows the packed inputs would outweigh the
 * weights). Where the grid is small, K is split over grid.z into partial
 * sums added in order by a second launch (deterministic). Lane (gid, tig)
 * loads the lane-block (block 2q + (tig >> 1), c0 = tig & 1) of rows gid
 * and gid + 8, the next span's while it computes this one; a row's quad
 * reads 64 contiguous bytes a load.
 *
 * The k order inside an mma is free as long as A and B agree: slot (cc, k,
 * h) of a span gives lane tig the four weights 64X + 32h + 4k + j (X = c0 +
 * 2cc, j = 0..3) of its block as the k-pairs (j0, j2) and (j1, j3), which
 * is how they come out of a nibble word; mmf_pack_kernel writes the inputs
 * in that order. Q4_K/Q5_K: q * (d sc) is one exact-bias f16 FMA (1024 +
 * q, minus 1024 * scale, both exact); the min term -dmin m * sum(x) over
 * each sub-block is one more mma a span (slot 32: A the lane's four
 * sub-blocks' -dmin m, B their input sums). Q6_K: (1024 + q) - 1056 is
 * exact, times the group's d * scale. Every scale is taken times MMF_UP
 * (2^8) so that small ones stay normal f16 numbers; the sums are scaled
 * back at the end.
 *
 * Packed inputs xp: [T/8 tiles][spans][33 slots][32 lanes][4] f16. */
#include "cuda/cu_tc_rows.cuh"
#include "cuda/cuda_plan.h"

#define MMF_SLOTS 33
#define MMF_UP 256.0f

__device__ __forceinline__ void mma_f16_m16n8k16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                 uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ __half2 u2h2(uint32_t u) { return *reinterpret_cast<const __half2 *>(&u); }
__device__ __forceinline__ uint32_t h22u(__half2 h) { return *reinterpret_cast<const uint32_t *>(&h); }

/* The lane's scales for one row's lane-block (times MMF_UP): Q4_K/Q5_K per
 * sub-block s (kq_scales_k4's order) s[s] = d sc, b[s] = -1024 d sc (the
 * exact bias) and mn = (-dmin m) as two half2 (s 0, 1 and 2, 3); Q6_K per
 * group (cc, t) s[4cc + t] = d scale. Zero where the lane has no block. */
struct MmfScales {
    __half2 s[8], b[4];
    uint32_t mn[2];
};
template <uint32_t TYPE>
__device__ __forceinline__ void mmf_scales(const KqLane<uint4> &L, int c0, bool on, MmfScales &S) {
    if (TYPE == MU_TYPE_Q6_K) {
        const float d = on ? kq_h2f(L.d) * MMF_UP : 0.f;
#pragma unroll
        for (int cc = 0; cc < 2; cc++)
#pragma unroll
            for (int t = 0; t < 4; t++) S.s[4 * cc + t] = __float2half2_rn(d * (float)kq_scale_q6(L.m, cc, t));
        return;
    }
    const float d = on ? kq_h2f(L.m.x & 0xFFFF) * MMF_UP : 0.f, dmin = on ? kq_h2f(L.m.x >> 16) * MMF_UP : 0.f;
    int sc[4], mn[4];
    kq_scales_k4(L.m, c0, sc, mn);
#pragma unroll
    for (int s = 0; s < 4; s++) {
        const __half h = __float2half_rn(d * (float)sc[s]);
        S.s[s] = __half2half2(h);
        S.b[s] = __half2half2(__hmul(h, __float2half(-1024.f)));
    }
    S.mn[0] = h22u(__floats2half2_rn(-dmin * (float)mn[0], -dmin * (float)mn[1]));
    S.mn[1] = h22u(__floats2half2_rn(-dmin * (float)mn[2], -dmin * (float)mn[3]));
}

/* The A fragments of slot (cc, k, h) for one row: pair (j0, j2) and (j1, j3). */
template <uint32_t TYPE>
__device__ __forceinline__ void mmf_weights(const KqLane<uint4> &L, const MmfScales &S, int cc, int k, int h,
                                            uint32_t &p02, uint32_t &p13) {
    const uint32_t M = 0x64006400u;
    uint32_t e, o; /* the pairs as f16 1024 + value */
    if (TYPE == MU_TYPE_Q4_K) {
        const uint32_t w = kq_qword(L, cc, k) >> (4 * h);
        e = (w & 0x000F000Fu) | M;
        o = ((w >> 8) & 0x000F000Fu) | M;
    } else {
        uint32_t lo, hi;
        kq_values<TYPE>(L, cc, k, lo, hi);
        const uint32_t v = h ? hi : lo;
        e = (v & 0x00FF00FFu) | M;
        o = ((v >> 8) & 0x00FF00FFu) | M;
    }
    if (TYPE == MU_TYPE_Q6_K) {
        const __half2 sc = S.s[4 * cc + 2 * h + (k >> 2)], off = __float2half2_rn(1056.f);
        p02 = h22u(__hmul2(__hsub2(u2h2(e), off), sc));
        p13 = h22u(__hmul2(__hsub2(u2h2(o), off), sc));
        return;
    }
    const int s = 2 * cc + h;
    p02 = h22u(__hfma2(u2h2(e), S.s[s], S.b[s]));
    p13 = h22u(__hfma2(u2h2(o), S.s[s], S.b[s]));
}

/* Both rows' lane-blocks of span q (zeros where a row or the block is absent). */
template <uint32_t TYPE>
__device__ __forceinline__ void mmf_load(KqLane<uint4> (&L)[2], const mu_cu_weight &w, const int64_t (&r)[2],
                                         const bool (&ok)[2], int q, int tig, int nb) {
    const int blk = 2 * q + (tig >> 1);
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const uint4 z = make_uint4(0u, 0u, 0u, 0u);
        L[i].q[0] = L[i].q[1] = L[i].q[2] = L[i].q[3] = L[i].m = L[i].h[0] = L[i].h[1] = z;
        L[i].d = 0u;
        if (ok[i] && blk < nb) kq_load<TYPE>(L[i], w, r[i], blk, tig & 1);
    }
}

/* Span q's 32 (Q6_K) or 33 mmas into acc, from the loaded lane-blocks L. */
template <uint32_t TYPE, int NT>
__device__ __forceinline__ void mmf_span(const KqLane<uint4> (&L)[2], const bool (&ok)[2], int q, int nb,
                                         const uint2 *xq, int64_t tile_stride, int n_tiles, float (&acc)[NT][4]) {
    const int tig = threadIdx.x & 3;
    const bool on = 2 * q + (tig >> 1) < nb;
    MmfScales S[2];
    mmf_scales<TYPE>(L[0], tig & 1, on && ok[0], S[0]);
    mmf_scales<TYPE>(L[1], tig & 1, on && ok[1], S[1]);
#pragma unroll
    for (int cc = 0; cc < 2; cc++)
#pragma unroll
        for (int k = 0; k < 8; k++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                uint32_t a0, a2, a1, a3;
                mmf_weights<TYPE>(L[0], S[0], cc, k, h, a0, a2);
                mmf_weights<TYPE>(L[1], S[1], cc, k, h, a1, a3);
                const int slot = (cc * 8 + k) * 2 + h;
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    if (n >= n_tiles) break;
                    const uint2 bx = __ldg(xq + n * tile_stride + slot * 32);
                    mma_f16_m16n8k16(acc[n], a0, a1, a2, a3, bx.x, bx.y);
                }
            }
    if (TYPE != MU_TYPE_Q6_K) { /* the min terms of the lane's four sub-blocks */
#pragma unroll
        for (int n = 0; n < NT; n++) {
            if (n >= n_tiles) break;
            const uint2 bx = __ldg(xq + n * tile_stride + 32 * 32);
            mma_f16_m16n8k16(acc[n], S[0].mn[0], S[1].mn[0], S[0].mn[1], S[1].mn[1], bx.x, bx.y);
        }
    }
}

/* splits > 1: split z's sums into part [splits][T][total rows] (tc_reduce
 * adds them in order); else straight into the segments' y. */
template <uint32_t TYPE, int NT>
__global__ void __launch_bounds__(TC_WARPS * 32) mmf_kernel(const __grid_constant__ mu_cu_mvr a, int64_t groups,
                                                             int splits, float *part, int64_t total) {
    pdl_trigger();
    pdl_wait();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
    const int64_t g = (int64_t)blockIdx.x * TC_WARPS + warp;
    if (g >= groups) return; /* (no block-wide barrier below) */
    int64_t r0 = 0;
    const int s = tc_locate(a, g, r0);
    const mu_cu_weight &w = a.seg[s].w;
    const int64_t r[2] = {r0 + gid, r0 + gid + 8};
    const bool ok[2] = {r[0] < w.rows, r[1] < w.rows};
    const int T = a.nrows, nb = (int)(w.cols >> 8), NS = (nb + 1) >> 1;
    const int n0 = blockIdx.y * NT, n_tiles = min(NT, ((T + 7) >> 3) - n0);
    const int64_t span_stride = MMF_SLOTS * 32, tile_stride = (int64_t)NS * span_stride;
    const uint2 *xp = reinterpret_cast<const uint2 *>(a.xp) + n0 * tile_stride + lane;
    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    const int z = blockIdx.z;
    int q0, q1; /* split z's spans */
    tc_split(NS, splits, z, q0, q1);
    KqLane<uint4> L0[2], L1[2];
    if (q0 < q1) mmf_load<TYPE>(L0, w, r, ok, q0, tig, nb);
    for (int q = q0; q < q1; q += 2) { /* two register sets: the next span loads while this one computes */
        if (q + 1 < q1) mmf_load<TYPE>(L1, w, r, ok, q + 1, tig, nb);
        mmf_span<TYPE, NT>(L0, ok, q, nb, xp + q * span_stride, tile_stride, n_tiles, acc);
        if (q + 1 >= q1) break;
        if (q + 2 < q1) mmf_load<TYPE>(L0, w, r, ok, q + 2, tig, nb);
        mmf_span<TYPE, NT>(L1, ok, q + 1, nb, xp + (q + 1) * span_stride, tile_stride, n_tiles, acc);
    }
    float *y = a.seg[s].y;
    int64_t ldy = a.seg[s].ldy;
    if (splits > 1) {
        y = part + (int64_t)z * T * total + tc_seg_first(a, s);
        ldy = total;
    }
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int tok0 = 8 * (n0 + n) + 2 * tig, tok1 = tok0 + 1;
        const float u = 1.0f / MMF_UP;
        if (ok[0] && tok0 < T) y[tok0 * ldy + r[0]] = acc[n][0] * u;
        if (ok[0] && tok1 < T) y[tok1 * ldy + r[0]] = acc[n][1] * u;
        if (ok[1] && tok0 < T) y[tok0 * ldy + r[1]] = acc[n][2] * u;
        if (ok[1] && tok1 < T) y[tok1 * ldy + r[1]] = acc[n][3] * u;
    }
}

__device__ __forceinline__ float4 mmf_in4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
__device__ __forceinline__ float4 mmf_in4(const __half *p) {
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    const float2 a = __half22float2(u2h2(u.x)), b = __half22float2(u2h2(u.y));
    return make_float4(a.x, a.y, b.x, b.y);
}

/* x [T][ldx] (f32 or f16) -> xp in mmf_kernel's order (K columns; zeros
 * past K and T): slots 0..31 the inputs as k-pairs (j0, j2), (j1, j3);
 * slot 32 the sums of the lane's four sub-blocks. One thread per lane
 * entry. */
template <class X>
__global__ void mmf_pack_kernel(const X *x, int64_t ldx, int K, int T, int NS, uint2 *xp) {
    pdl_trigger();
    pdl_wait();
    const int64_t n_all = (int64_t)((T + 7) >> 3) * NS * MMF_SLOTS * 32;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n_all; i += (int64_t)gridDim.x * blockDim.x) {
        const int lane = (int)(i & 31);
        const int64_t rest = i >> 5;
        const int slot = (int)(rest % MMF_SLOTS);
        const int64_t span = rest / MMF_SLOTS;
        const int q = (int)(span % NS), n = (int)(span / NS);
        const int gid = lane >> 2, tig = lane & 3, tok = 8 * n + gid, blk = 2 * q + (tig >> 1), c0 = tig & 1;
        const bool on = tok < T && 256 * blk < K;
        const X *row = x + (int64_t)tok * ldx + 256 * blk;
        float v[4] = {0.f, 0.f, 0.f, 0.f};
        if (slot < 32) {
            const int cc = slot >> 4, k = (slot >> 1) & 7, h = slot & 1;
            if (on) {
                const float4 f = mmf_in4(row + 64 * (c0 + 2 * cc) + 32 * h + 4 * k);
                v[0] = f.x, v[1] = f.z, v[2] = f.y, v[3] = f.w; /* (j0, j2), (j1, j3) */
            }
        } else if (on) { /* sub-blocks s = 0..3: X = c0 (halves 0, 1), X = c0 + 2 (halves 0, 1) */
#pragma unroll
            for (int sb = 0; sb < 4; sb++) {
                const X *p = row + 64 * (c0 + 2 * (sb >> 1)) + 32 * (sb & 1);
                float sum = 0.f;
                for (int j = 0; j < 32; j += 4) {
                    const float4 f = mmf_in4(p + j);
                    sum += (f.x + f.y) + (f.z + f.w);
                }
                v[sb] = sum;
            }
        }
        xp[i] = make_uint2(h22u(__floats2half2_rn(v[0], v[1])), h22u(__floats2half2_rn(v[2], v[3])));
    }
}

template <class X>
static cudaError_t mmf_pack(const X *x, int64_t ldx, int64_t K, int T, void *xp, const mu_cu_exec *e) {
    if (T < 1 || K < 256 || K % 256 || ldx < K || ldx % 4) return cudaErrorInvalidValue;
    const int NS = (int)((K / 256 + 1) / 2);
    const int64_t n = (int64_t)((T + 7) / 8) * NS * MMF_SLOTS * 32;
    const unsigned blocks = (unsigned)((n + 255) / 256 < 2048 ? (n + 255) / 256 : 2048);
    return launch_pdl(mmf_pack_kernel<X>, dim3(blocks), dim3(256), 0, e, x, ldx, (int)K, T, NS,
                      reinterpret_cast<uint2 *>(xp));
}

extern "C" cudaError_t mu_cu_mmf_pack(const float *x, int64_t ldx, int64_t K, int T, void *xp, const mu_cu_exec *e) {
    return mmf_pack(x, ldx, K, T, xp, e);
}

extern "C" cudaError_t mu_cu_mmf_pack16(const uint16_t *x, int64_t ldx, int64_t K, int T, void *xp,
                                        const mu_cu_exec *e) {
    return mmf_pack(reinterpret_cast<const __half *>(x), ldx, K, T, xp, e);
}

/* K split: enough warps for 12 a SM (three blocks at its registers), at
 * least one span each */
template <uint32_t TYPE>
static cudaError_t mmf_tiles(const mu_cu_mvr *a, const mu_cu_exec *x) {
    const int64_t spans = (a->seg[0].w.cols / 256 + 1) / 2;
    if (a->nrows <= 8) return tc_launch(mmf_kernel<TYPE, 1>, a, x, 1, spans, 12);
    if (a->nrows <= 16) return tc_launch(mmf_kernel<TYPE, 2>, a, x, 2, spans, 12);
    if (a->nrows <= 32) return tc_launch(mmf_kernel<TYPE, 4>, a, x, 4, spans, 12);
    return tc_launch(mmf_kernel<TYPE, 8>, a, x, 8, spans, 12);
}

extern "C" cudaError_t mu_cu_mmf_set(const mu_cu_mvr *a, const mu_cu_exec *x) {
    if (a->nrows < 1 || a->nseg < 1 || a->nseg > MU_CU_MAX_SEG || !a->xp) return cudaErrorInvalidValue;
    for (int s = 0; s < a->nseg; s++)
        if (a->seg[s].w.type != a->seg[0].w.type || a->seg[s].w.cols != a->seg[0].w.cols ||
            !mu_cu_mmq_ok(a->seg[s].w.type, a->seg[s].w.cols))
            return cudaErrorInvalidValue;
    switch (a->seg[0].w.type) {
    case MU_TYPE_Q4_K: return mmf_tiles<MU_TYPE_Q4_K>(a, x);
    case MU_TYPE_Q5_K: return mmf_tiles<MU_TYPE_Q5_K>(a, x);
    case MU_TYPE_Q6_K: return mmf_tiles<MU_TYPE_Q6_K>(a, x);
    default: return cudaErrorInvalidValue;
    }
}
