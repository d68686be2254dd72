/* cu_mmf.cu — the batched fast lane on tensor cores in f16: Y[t][r] =
 * W[r] . x[t] for the K-quants, the weights read in place (cu_kq.cuh's
 * tiled streams) and dequantized to f16 in registers, the inputs f16.
 *
 * Why f16 rather than int8 inputs: the weights carry their scales into the
 * multiply, so a k16 step is one mma.sync m16n8k16 and the f32
 * accumulators take no per-token arithmetic; the dequantization is paid
 * once per weight, whatever the number of tokens.
 *
 * A warp owns 16 weight rows and NT tiles of 8 tokens; the W warps of a
 * block (4, or 8 above 32 tokens) take W row groups over the same spans of
 * K (two blocks each).
 * The spans stream through shared memory in a ring of S stages (cp.async):
 * each lane copies its own lane-blocks of rows gid and gid + 8 (the block
 * 2q + (tig >> 1), c0 = tig & 1; a row's quad reads 64 contiguous bytes a
 * copy) and the block copies the span's packed inputs once for its W
 * warps, S - 1 spans ahead of the one it multiplies, so the bytes in flight
 * do not depend on registers. The weights' first stages are copied before
 * the kernel waits for its predecessor (they do not depend on it). The
 * blocks take equal ranges of (row groups x spans) in one wave, the ring
 * running on across row groups; a group cut between ranges is summed in
 * range order by the block that finishes last (cu_tc_rows.cuh).
 *
 * The k order inside an mma is free as long as A and B agree: slot (cc, k,
 * h) of a span gives lane tig the four weights 64X + 32h + 4k + j (X = c0 +
 * 2cc, j = 0..3) of its block as the k-pairs (j0, j2) and (j1, j3), which
 * is how they come out of a nibble word; mmf_pack_kernel writes the inputs
 * in that order. Q4_K/Q5_K: q * (d sc) is one exact-bias f16 FMA (1024 +
 * q, minus 1024 * scale, both exact; Q4_K's high nibbles are masked in
 * place as 1024 + 16 q, their scale taken / 16); the min term -dmin m *
 * sum(x) over each sub-block is one more mma a span (slot 32: A the lane's
 * four sub-blocks' -dmin m, B their input sums). Q6_K: (1024 + q) - 1056 is
 * exact, times the group's d * scale. Every scale is taken times MMF_UP
 * (2^8) so that small ones stay normal f16 numbers; the sums are scaled
 * back at the end.
 *
 * Packed inputs xp: [T/8 tiles][spans][33 slots][32 lanes][4] f16.
 * A stage in shared memory: [W warps][slots][2 rows][32 lanes] uint4 of
 * weights (mmf_wslots), then [NT][33 slots][32 lanes] uint2 of inputs. */
#include "cuda/cu_mmf_in.cuh"
#include "cuda/cu_tc_rows.cuh"
#include "cuda/cuda_plan.h"

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
    for (int s = 0; s < 4; s++) { /* Q4_K's high nibbles stay in place (x16): 1/16 in their scale */
        const float hs = TYPE == MU_TYPE_Q4_K && (s & 1) ? 0.0625f : 1.0f;
        const __half h = __float2half_rn(d * hs * (float)sc[s]);
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
    if (TYPE == MU_TYPE_Q4_K) { /* the high nibbles in place: 1024 + 16 q, their scale s / 16 */
        const uint32_t w = kq_qword(L, cc, k), m = h ? 0x00F000F0u : 0x000F000Fu;
        e = (w & m) | M;
        o = ((w >> 8) & m) | M;
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

/* ---- the ring of stages ----------------------------------------------------- */

__device__ __forceinline__ void mmf_cp16(void *dst, const void *src, bool on, uint64_t pol) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(
                     (unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(on ? 16 : 0), "l"(pol)
                 : "memory");
}
__device__ __forceinline__ void mmf_cp8(void *dst, const void *src, bool on) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src),
                 "r"(on ? 8 : 0)
                 : "memory");
}
__device__ __forceinline__ void mmf_cp4(void *dst, const void *src, bool on) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src),
                 "r"(on ? 4 : 0)
                 : "memory");
}
__device__ __forceinline__ void mmf_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void mmf_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* 16-byte slots a lane copies per row and span: the nibbles (4), the meta
 * (Q6_K: its 8 bytes, then the 4-byte pair of d that holds the block's),
 * the high bits (Q5_K 1, Q6_K 2). */
template <uint32_t TYPE>
__host__ __device__ constexpr int mmf_wslots() {
    return TYPE == MU_TYPE_Q4_K ? 5 : (TYPE == MU_TYPE_Q5_K ? 6 : 7);
}
#define MMF_TILE_U2 (MMF_SLOTS * 32) /* uint2 of one tile's inputs of a span (8448 bytes) */
/* bytes of one stage */
template <uint32_t TYPE>
__host__ __device__ constexpr size_t mmf_stage_bytes(int nt, int warps) {
    return (size_t)warps * mmf_wslots<TYPE>() * 2 * 32 * 16 + (size_t)nt * MMF_TILE_U2 * 8;
}

/* Copies span q's lane-blocks of both rows into ws [slots][2][32] (zeros
 * where a row or the block is absent: nothing read). The d stream is
 * 256-byte aligned and padded, so the aligned pair holding d is in it. */
template <uint32_t TYPE>
__device__ __forceinline__ void mmf_copy_w(uint4 *ws, const mu_cu_weight &w, const int64_t (&r)[2],
                                           const bool (&ok)[2], int q, int lane, int nb, uint64_t pol) {
    const int tig = lane & 3, blk = 2 * q + (tig >> 1), c0 = tig & 1;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const bool on = ok[i] && blk < nb;
        const int b = on ? blk : 0;
        const int64_t rb = (on ? r[i] : 0) * nb;
        uint4 *const sl = ws + i * 32 + lane; /* slot k at sl + 64 k */
        const uint8_t *qp = w.qs + rb * 128 + kq_qs_off(b, c0, 0, nb);
        const uint32_t span = kq_qs_off(b, c0, 1, nb) - kq_qs_off(b, c0, 0, nb);
#pragma unroll
        for (int k = 0; k < 4; k++) mmf_cp16(sl + 64 * k, qp + span * k, on, pol);
        if (TYPE == MU_TYPE_Q6_K) {
            mmf_cp8(sl + 256, w.meta + rb * 16 + 16 * b + 8 * c0, on);
            mmf_cp4(reinterpret_cast<uint32_t *>(sl + 256) + 2, w.d + ((rb + b) & ~(int64_t)1), on);
            const uint8_t *qh = w.qh + rb * 64;
            mmf_cp16(sl + 320, qh + kq_qh6_off(b, c0, 0, nb), on, pol);
            mmf_cp16(sl + 384, qh + kq_qh6_off(b, c0, 1, nb), on, pol);
        } else {
            mmf_cp16(sl + 256, w.meta + rb * 16 + 16 * b, on, pol);
            if (TYPE == MU_TYPE_Q5_K) mmf_cp16(sl + 320, w.qh + rb * 32 + (uint32_t)b * 32u + 16u * (uint32_t)c0, on, pol);
        }
    }
}

/* Copies span q's packed inputs of the block's n_tiles tiles into xs
 * [NT][MMF_TILE_U2] (every thread of the block's W warps a share of each
 * tile, no division in the addresses; the tiles past n_tiles keep what
 * they held). */
template <int NT, int W>
__device__ __forceinline__ void mmf_copy_x(uint2 *xs, const uint2 *xq, int64_t tile_stride, int n_tiles) {
    constexpr int CH = MMF_TILE_U2 / 2, PER = (CH + W * 32 - 1) / (W * 32); /* 16-byte chunks of a tile; a thread's */
#pragma unroll
    for (int n = 0; n < NT; n++) {
        if (n >= n_tiles) break;
        const uint2 *const src = xq + n * tile_stride;
        uint2 *const dst = xs + n * MMF_TILE_U2;
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const int j = (int)threadIdx.x + i * W * 32;
            if (j < CH)
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                                 (unsigned)__cvta_generic_to_shared(dst + 2 * j)),
                             "l"(src + 2 * j)
                             : "memory");
        }
    }
}

/* Both rows' lane-blocks from ws (mmf_copy_w's slots) into registers. */
template <uint32_t TYPE>
__device__ __forceinline__ void mmf_read_w(KqLane<uint4> (&L)[2], const uint4 *ws, int lane, const int64_t (&r)[2],
                                           int q, int nb) {
    const int blk = 2 * q + ((lane & 3) >> 1);
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const uint4 *const sl = ws + i * 32 + lane;
#pragma unroll
        for (int k = 0; k < 4; k++) L[i].q[k] = sl[64 * k];
        const uint4 m = sl[256];
        L[i].d = 0u;
        if (TYPE == MU_TYPE_Q6_K) {
            L[i].m = make_uint4(m.x, m.y, 0u, 0u);
            L[i].d = (m.z >> (16 * (int)((r[i] * nb + blk) & 1))) & 0xFFFFu;
            L[i].h[0] = sl[320];
            L[i].h[1] = sl[384];
        } else {
            L[i].m = m;
            if (TYPE == MU_TYPE_Q5_K) L[i].h[0] = sl[320];
        }
    }
}

/* Span q's 32 (Q6_K) or 33 mmas a tile into acc, from the loaded
 * lane-blocks L and the stage's inputs xq (+ lane). Every tile of the
 * stage is multiplied, also those past the tokens (what they hold is never
 * written out): no branch stands between the shared-memory loads of a slot
 * and its mmas, so they issue back to back. One tile accumulates in two
 * sets (by h) so that consecutive mmas do not wait for each other. */
template <uint32_t TYPE, int NT, int NA>
__device__ __forceinline__ void mmf_span(const KqLane<uint4> (&L)[2], const bool (&ok)[2], int q, int nb,
                                         const uint2 *xq, float (&acc)[NA][4]) {
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
                const int slot = (cc * 8 + k) * 2 + h;
                uint2 bx[NT];
#pragma unroll
                for (int n = 0; n < NT; n++) bx[n] = xq[n * MMF_TILE_U2 + slot * 32];
                uint32_t a0, a2, a1, a3;
                mmf_weights<TYPE>(L[0], S[0], cc, k, h, a0, a2);
                mmf_weights<TYPE>(L[1], S[1], cc, k, h, a1, a3);
#pragma unroll
                for (int n = 0; n < NT; n++) mma_f16_m16n8k16(acc[NT == 1 ? h : n], a0, a1, a2, a3, bx[n].x, bx[n].y);
            }
    if (TYPE != MU_TYPE_Q6_K) { /* the min terms of the lane's four sub-blocks */
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const uint2 bx = xq[n * MMF_TILE_U2 + 32 * 32];
            mma_f16_m16n8k16(acc[n], S[0].mn[0], S[1].mn[0], S[0].mn[1], S[1].mn[1], bx.x, bx.y);
        }
    }
}

/* What a warp takes of unit u (span q of group-block gb): its group g,
 * the group's segment s and both rows of the lane; next() steps to unit
 * u + 1 (the group's rows looked up only when the group-block changes). */
struct MmfUnit {
    int64_t r[2];
    int gb, g, s, q;
    bool ok[2];
    __device__ void locate(const mu_cu_mvr &a, int groups, int W) {
        g = gb * W + (threadIdx.x >> 5);
        int64_t r0 = 0;
        s = tc_locate(a, g, r0);
        const int gid = (threadIdx.x & 31) >> 2;
        r[0] = r0 + gid, r[1] = r0 + gid + 8;
        ok[0] = g < groups && r[0] < a.seg[s].w.rows;
        ok[1] = g < groups && r[1] < a.seg[s].w.rows;
    }
    __device__ void at(const mu_cu_mvr &a, int groups, int NS, int W, int u) {
        gb = u / NS;
        q = u - gb * NS;
        locate(a, groups, W);
    }
    __device__ void next(const mu_cu_mvr &a, int groups, int NS, int W) {
        if (++q < NS) return;
        q = 0;
        gb++;
        locate(a, groups, W);
    }
};

/* The lane's sums of its group's tokens into the segment's y (u: times
 * 1 / MMF_UP). */
template <int NT>
__device__ __forceinline__ void mmf_store(const mu_cu_mvr &a, const MmfUnit &m, int n0, const float (&v)[NT][4]) {
    const int T = a.nrows, tig = threadIdx.x & 3;
    float *const y = a.seg[m.s].y;
    const int64_t ldy = a.seg[m.s].ldy;
    const float u = 1.0f / MMF_UP;
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int tok0 = 8 * (n0 + n) + 2 * tig, tok1 = tok0 + 1;
        if (m.ok[0] && tok0 < T) y[tok0 * ldy + m.r[0]] = v[n][0] * u;
        if (m.ok[0] && tok1 < T) y[tok1 * ldy + m.r[0]] = v[n][1] * u;
        if (m.ok[1] && tok0 < T) y[tok0 * ldy + m.r[1]] = v[n][2] * u;
        if (m.ok[1] && tok1 < T) y[tok1 * ldy + m.r[1]] = v[n][3] * u;
    }
}

/* The lane's piece of block b: [b][end][tile column][W warps][NT][32 lanes] float4. */
template <int NT, int W>
__device__ __forceinline__ float4 *mmf_piece(const mu_cu_mvr &a, int64_t b, int end) {
    const int64_t at = ((b * 2 + end) * gridDim.y + blockIdx.y) * W + (threadIdx.x >> 5);
    return reinterpret_cast<float4 *>(a.part) + at * NT * 32 + (threadIdx.x & 31);
}

/* A group-block's sums are complete in this block's range (whole): stored;
 * else this block's piece goes to part, and the block whose piece comes
 * last adds every piece in range order and stores. P blocks over U units. */
template <int NT, int W>
__device__ __forceinline__ void mmf_flush(const mu_cu_mvr &a, const MmfUnit &m, int groups, int NS, int64_t P,
                                          int64_t U, int64_t u0, int64_t u1, int n0, const float (&v)[NT][4]) {
    const int64_t first = (int64_t)m.gb * NS, last = first + NS - 1;
    if (first >= u0 && last < u1) {
        mmf_store<NT>(a, m, n0, v);
        return;
    }
    if (m.g >= groups) return; /* (past the row space: every piece's warp skips alike) */
    const int64_t b = blockIdx.x, b0 = tc_block_of(first, P, U), b1 = tc_block_of(last, P, U);
    const int end = m.gb == u0 / NS ? 0 : 1; /* (the group-block its range starts in: the first piece) */
    float4 *const mine = mmf_piece<NT, W>(a, b, end);
#pragma unroll
    for (int n = 0; n < NT; n++) mine[n * 32] = make_float4(v[n][0], v[n][1], v[n][2], v[n][3]);
    __threadfence();
    __syncwarp();
    unsigned *const cnt = a.counters + (int64_t)m.g * gridDim.y + blockIdx.y;
    unsigned prev = 0;
    if ((threadIdx.x & 31) == 0) prev = atomicAdd(cnt, 1u);
    prev = __shfl_sync(MU_FULL, prev, 0);
    if (prev != (unsigned)(b1 - b0)) return;
    __threadfence();
    float s[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
    for (int64_t k = b0; k <= b1; k++) {
        const float4 *const p = mmf_piece<NT, W>(a, k, m.gb == tc_first(k, P, U) / NS ? 0 : 1);
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const float4 f = __ldcg(p + n * 32);
            s[n][0] += f.x, s[n][1] += f.y, s[n][2] += f.z, s[n][3] += f.w;
        }
    }
    mmf_store<NT>(a, m, n0, s);
    if ((threadIdx.x & 31) == 0) *cnt = 0u;
}

/* Block b's range of units (cu_tc_rows.cuh), a warp a group of each
 * unit's group-block; pieces false: a block per group-block, whole. S
 * stages of mmf_stage_bytes<TYPE>(NT) in dynamic shared memory. */
template <uint32_t TYPE, int NT, int S, int W>
__global__ void __launch_bounds__(W * 32) mmf_kernel(const __grid_constant__ mu_cu_mvr a, int groups,
                                                     bool pieces) {
    extern __shared__ uint4 mmf_ring[];
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int T = a.nrows, nb = (int)(a.seg[0].w.cols >> 8), NS = (nb + 1) >> 1;
    const int n0 = blockIdx.y * NT, n_tiles = min(NT, ((T + 7) >> 3) - n0);
    const int64_t span_stride = MMF_TILE_U2, tile_stride = (int64_t)NS * span_stride;
    const uint2 *xp = reinterpret_cast<const uint2 *>(a.xp) + n0 * tile_stride;
    constexpr int WU = mmf_wslots<TYPE>() * 64;                   /* uint4 of a warp's weights a stage */
    constexpr int STAGE = (int)(mmf_stage_bytes<TYPE>(NT, W) / 16); /* uint4 of a stage */
    constexpr int NA = NT == 1 ? 2 : NT;                             /* accumulator sets */
    uint4 *const wring = mmf_ring + warp * WU;
    uint2 *const xring = reinterpret_cast<uint2 *>(mmf_ring + W * WU);
    const uint64_t pol = l2_evict_first();
    const int64_t P = gridDim.x, U = (int64_t)((groups + W - 1) / W) * NS; /* (U < 2^31: tc_launch) */
    const int64_t u0 = tc_first(blockIdx.x, P, U), u1 = pieces ? tc_first(blockIdx.x + 1, P, U) : u0 + NS;
    const int n = (int)(u1 - u0), v0 = (int)u0;
    float acc[NA][4];
#pragma unroll
    for (int i = 0; i < NA; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    MmfUnit cp, cur; /* the unit whose copies go next; the unit multiplied next */
    cp.at(a, groups, NS, W, v0);
    cur = cp;
#pragma unroll
    for (int p = 0; p < S - 1; p++) {
        if (p < n) mmf_copy_w<TYPE>(wring + p * STAGE, a.seg[cp.s].w, cp.r, cp.ok, cp.q, lane, nb, pol);
        cp.next(a, groups, NS, W);
    }
    pdl_wait(); /* the inputs are the predecessor's */
#pragma unroll
    for (int p = 0; p < S - 1; p++) {
        if (p < n) mmf_copy_x<NT, W>(xring + 2 * p * STAGE, xp + ((v0 + p) % NS) * span_stride, tile_stride, n_tiles);
        mmf_commit();
    }
    for (int i = 0; i < n; i++) {
        mmf_wait<S - 2>(); /* this thread's copies of unit i have landed */
        __syncthreads();   /* ... and everyone's; and the stage about to be refilled is read */
        if (i + S - 1 < n) {
            const int st = (i + S - 1) % S;
            mmf_copy_w<TYPE>(wring + st * STAGE, a.seg[cp.s].w, cp.r, cp.ok, cp.q, lane, nb, pol);
            mmf_copy_x<NT, W>(xring + 2 * st * STAGE, xp + cp.q * span_stride, tile_stride, n_tiles);
            cp.next(a, groups, NS, W);
        }
        mmf_commit();
        const int st = i % S;
        const MmfUnit m = cur;
        cur.next(a, groups, NS, W);
        KqLane<uint4> L[2];
        mmf_read_w<TYPE>(L, wring + st * STAGE, lane, m.r, m.q, nb);
        mmf_span<TYPE, NT, NA>(L, m.ok, m.q, nb, xring + 2 * st * STAGE + lane, acc);
        if (m.q == NS - 1 || i == n - 1) { /* the group's last span in this range */
            float v[NT][4];
#pragma unroll
            for (int t = 0; t < NT; t++)
#pragma unroll
                for (int j = 0; j < 4; j++) v[t][j] = NT == 1 ? acc[0][j] + acc[NA - 1][j] : acc[t][j];
            mmf_flush<NT, W>(a, m, groups, NS, P, U, u0, u1, n0, v);
#pragma unroll
            for (int t = 0; t < NA; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
        }
    }
    mmf_wait<0>();
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

/* One launch with S stages (smem bytes, blocks a SM), the blocks one wave
 * of equal ranges (tc_launch). */
template <uint32_t TYPE, int NT, int S, int W>
static cudaError_t mmf_launch(const mu_cu_mvr *a, const mu_cu_exec *x, size_t smem, int blocks_per_sm) {
    static bool raised[MU_CU_MAX_DEVICES];
    int dev = 0;
    cudaError_t e = current_device(&dev);
    if (e != cudaSuccess) return e;
    if (!raised[dev]) {
        e = cudaFuncSetAttribute(mmf_kernel<TYPE, NT, S, W>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(mmf_kernel<TYPE, NT, S, W>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     (int)cudaSharedmemCarveoutMaxShared);
        if (e != cudaSuccess) return e;
        raised[dev] = true;
    }
    const int64_t spans = (a->seg[0].w.cols / 256 + 1) / 2;
    return tc_launch(mmf_kernel<TYPE, NT, S, W>, a, x, W, NT, spans, blocks_per_sm, smem);
}

/* One tile of tokens: three stages where two blocks fit an SM with them;
 * more tiles (or where three do not fit): two stages, as many blocks an SM
 * as fit, at most 16 warps (one H100, 30B, step ms three / two stages: 8
 * rows 12.85 / 13.11, 16 rows 17.16 / 15.84, 64 rows 73.2 / 72.7). */
template <uint32_t TYPE, int NT, int W>
static cudaError_t mmf_stages(const mu_cu_mvr *a, const mu_cu_exec *x, size_t per_block, size_t per_sm) {
    const size_t st = mmf_stage_bytes<TYPE>(NT, W), two = per_sm / 2 - 1024;
    if (NT == 1 && 3 * st <= per_block && 3 * st <= two) return mmf_launch<TYPE, NT, 3, W>(a, x, 3 * st, 2);
    const int fit = (int)(per_sm / (2 * st + 1024)), most = 16 / W;
    return mmf_launch<TYPE, NT, 2, W>(a, x, 2 * st, fit > most ? most : (fit < 1 ? 1 : fit));
}

/* NT tiles of 8 tokens a block by the token count, fewer where two stages
 * of them do not fit a block's shared memory (GPUs with less of it). */
template <uint32_t TYPE, int W>
static cudaError_t mmf_tiles(const mu_cu_mvr *a, const mu_cu_exec *x, const mu_cu_shape &d) {
    const size_t per_block = (size_t)d.smem_block, per_sm = (size_t)d.smem_sm;
    int nt = a->nrows <= 8 ? 1 : (a->nrows <= 16 ? 2 : (a->nrows <= 32 ? 4 : 8));
    if (x->mmf_tiles > 0 && nt > x->mmf_tiles) nt = x->mmf_tiles;
    while (nt > 1 && 2 * mmf_stage_bytes<TYPE>(nt, W) > per_block) nt /= 2;
    if (2 * mmf_stage_bytes<TYPE>(nt, W) > per_block) return cudaErrorNotSupported;
    switch (nt) {
    case 1: return mmf_stages<TYPE, 1, W>(a, x, per_block, per_sm);
    case 2: return mmf_stages<TYPE, 2, W>(a, x, per_block, per_sm);
    case 4: return mmf_stages<TYPE, 4, W>(a, x, per_block, per_sm);
    default: return mmf_stages<TYPE, 8, W>(a, x, per_block, per_sm);
    }
}

/* Warps a block: 8 where x->mmf_wide says always, or by default above 32
 * tokens (the inputs' stage then serves twice the rows; where two stages
 * of 8 tiles do not fit a block, Q5_K's and Q6_K's, a block takes 4
 * tiles); else 4. */
template <uint32_t TYPE>
static cudaError_t mmf_blocks(const mu_cu_mvr *a, const mu_cu_exec *x) {
    mu_cu_shape d;
    const cudaError_t e = device_shape(&d);
    if (e != cudaSuccess) return e;
    bool eight = x->mmf_wide == MU_CU_ROUTE_ALWAYS;
    if (x->mmf_wide == MU_CU_ROUTE_AUTO) eight = a->nrows > 32;
    return eight ? mmf_tiles<TYPE, 8>(a, x, d) : mmf_tiles<TYPE, 4>(a, x, d);
}

extern "C" int mu_cu_mmf_ok(uint32_t type, int64_t cols) {
    return (type == MU_TYPE_Q4_K || type == MU_TYPE_Q5_K || type == MU_TYPE_Q6_K) && cols > 0 && cols % 256 == 0;
}

extern "C" cudaError_t mu_cu_mmf_set(const mu_cu_mvr *a, const mu_cu_exec *x) {
    if (a->nrows < 1 || a->nseg < 1 || a->nseg > MU_CU_MAX_SEG || !a->xp) return cudaErrorInvalidValue;
    for (int s = 0; s < a->nseg; s++)
        if (a->seg[s].w.type != a->seg[0].w.type || a->seg[s].w.cols != a->seg[0].w.cols ||
            !mu_cu_mmf_ok(a->seg[s].w.type, a->seg[s].w.cols))
            return cudaErrorInvalidValue;
    switch (a->seg[0].w.type) {
    case MU_TYPE_Q4_K: return mmf_blocks<MU_TYPE_Q4_K>(a, x);
    case MU_TYPE_Q5_K: return mmf_blocks<MU_TYPE_Q5_K>(a, x);
    case MU_TYPE_Q6_K: return mmf_blocks<MU_TYPE_Q6_K>(a, x);
    default: return cudaErrorInvalidValue;
    }
}
