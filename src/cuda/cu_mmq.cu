/* cu_mmq.cu — batched fast lane on tensor cores: Y[t][r] = W[r] . x~[t]
 * for the K-quants, the weights read in place (the tiled streams of
 * cu_kq.cuh), the inputs as the fast lane's int8 groups of 16.
 *
 * A warp owns 16 weight rows and a tile of 8 NT tokens; each k16 step of
 * mma.sync m16n8k16 (s8 x s8 -> s32) is one input group of 16, so the
 * group's scale dx (per token) and the weight's scale (per row: d * sc of
 * its sub-block, Q6_K's group scale) apply to the integer dot afterwards;
 * the K-quant min term (dmin * m * the sub-block's sum of x~) once per
 * sub-block. Lane (gid, tig) feeds rows gid and gid + 8 with weights 4 tig
 * .. 4 tig + 3 of each group: word tig of each 16-byte half of a chunk's
 * nibbles (cu_kq.cuh: word k of chunk X holds weights 64X + 4k + j low,
 * 64X + 32 + 4k + j high), unpacked by kq_values. Every K-block (256
 * inputs) the block stages its tokens' int8 values and group records.
 */
#include "cuda/cu_matvec_policy.cuh"

#define MMQ_WARPS 4
#define MMQ_ROWS (16 * MMQ_WARPS)
#define MMQ_XROW (256 + 16) /* a staged token's bytes (padded: the gid rows of a fragment load spread over banks) */

__device__ __forceinline__ void mma_s8_m16n8k16(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b0));
}

/* Scales of lane-block c0 of one row: per sub-block s (kq_scales_k4's
 * order) d * sc and dmin * m (Q4_K, Q5_K); Q6_K: d, the group scales read
 * per group. */
struct MmqScales {
    float ws[4], wm[4], d;
};
template <uint32_t TYPE>
__device__ __forceinline__ void mmq_scales(const KqLane<uint4> &L, int c0, MmqScales &S) {
    if (TYPE == MU_TYPE_Q6_K) {
        S.d = kq_h2f(L.d);
        return;
    }
    const float d = kq_h2f(L.m.x & 0xFFFF), dmin = kq_h2f(L.m.x >> 16);
    int sc[4], mn[4];
    kq_scales_k4(L.m, c0, sc, mn);
#pragma unroll
    for (int s = 0; s < 4; s++) S.ws[s] = d * (float)sc[s], S.wm[s] = dmin * (float)mn[s];
}
/* the weight scale of group t (0..3) of chunk cc of the lane-block */
template <uint32_t TYPE>
__device__ __forceinline__ float mmq_wscale(const KqLane<uint4> &L, const MmqScales &S, int cc, int t) {
    if (TYPE == MU_TYPE_Q6_K) return S.d * (float)kq_scale_q6(L.m, cc, t);
    return S.ws[2 * cc + (t >> 1)];
}

/* The segment and first row of warp-row-group g (16 rows of one segment):
 * the segments' groups follow each other (ceil(rows / 16) each). */
__device__ __forceinline__ int mmq_locate(const mu_cu_mvr &a, int64_t g, int64_t &r0) {
    int s = 0;
    for (; s + 1 < a.nseg; s++) {
        const int64_t n = (a.seg[s].w.rows + 15) >> 4;
        if (g < n) break;
        g -= n;
    }
    r0 = g << 4;
    return s;
}

/* The first row of segment s in the row space (the partials' layout). */
__device__ __forceinline__ int64_t mmq_seg_first(const mu_cu_mvr &a, int s) {
    int64_t r = 0;
    for (int i = 0; i < s; i++) r += a.seg[i].w.rows;
    return r;
}

/* K-blocks [b0, b1) of split z of S over nb blocks (the first nb % S one longer) */
__device__ __forceinline__ void mmq_split(int nb, int S, int z, int &b0, int &b1) {
    const int q = nb / S, r = nb % S;
    b0 = z * q + min(z, r);
    b1 = b0 + q + (z < r ? 1 : 0);
}

/* splits > 1: split z's sums into part [splits][T][total rows] (mmq_reduce
 * adds them in order); else straight into the segments' y. */
template <uint32_t TYPE, int NT>
__global__ void __launch_bounds__(MMQ_WARPS * 32) mmq_kernel(const __grid_constant__ mu_cu_mvr a, int64_t groups,
                                                             int splits, float *part, int64_t total) {
    constexpr int TT = 8 * NT;
    __shared__ __align__(16) int8_t sx[TT][MMQ_XROW]; /* the K-block's int8 inputs of the tile's tokens */
    __shared__ float sdx[TT][16], ssy[TT][16];         /* their groups' d and d * sum(q) */
    pdl_trigger();
    pdl_wait();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
    const int64_t g = (int64_t)blockIdx.x * MMQ_WARPS + warp;
    int64_t r0 = 0;
    const int s = mmq_locate(a, g < groups ? g : groups - 1, r0);
    const mu_cu_weight &w = a.seg[s].w;
    const int64_t rA = r0 + gid, rB = rA + 8;
    const bool okA = g < groups && rA < w.rows, okB = g < groups && rB < w.rows;
    const int T = a.nrows, t0 = blockIdx.y * TT, nb = (int)(a.seg[0].w.cols >> 8);
    const int8_t *xq = a.act.q;
    const float *xds = a.act.ds;
    const int64_t ldx = a.ldx;
    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    int kb0, kb1;
    mmq_split(nb, splits, blockIdx.z, kb0, kb1);
    for (int b = kb0; b < kb1; b++) {
        __syncthreads(); /* (the previous K-block's reads are done) */
        for (int i = threadIdx.x; i < TT * 16; i += blockDim.x) {
            const int t = i >> 4, g = i & 15, tok = t0 + t;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            float2 ds = make_float2(0.f, 0.f);
            if (tok < T) {
                v = __ldg(reinterpret_cast<const uint4 *>(xq + tok * ldx + (int64_t)b * 256) + g);
                ds = __ldg(reinterpret_cast<const float2 *>(xds + tok * (ldx / 8)) + (int64_t)b * 16 + g);
            }
            *reinterpret_cast<uint4 *>(&sx[t][g * 16]) = v;
            sdx[t][g] = ds.x;
            ssy[t][g] = ds.y;
        }
        __syncthreads();
#pragma unroll
        for (int c0 = 0; c0 < 2; c0++) {
            KqLane<uint4> LA, LB;
            MmqScales SA, SB;
            if (okA) kq_load<TYPE>(LA, w, rA, b, c0), mmq_scales<TYPE>(LA, c0, SA);
            if (okB) kq_load<TYPE>(LB, w, rB, b, c0), mmq_scales<TYPE>(LB, c0, SB);
#pragma unroll
            for (int cc = 0; cc < 2; cc++) {
                const int X = c0 + 2 * cc;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int k = 4 * h + tig;
                    uint32_t loA = 0, hiA = 0, loB = 0, hiB = 0;
                    if (okA) kq_values<TYPE>(LA, cc, k, loA, hiA);
                    if (okB) kq_values<TYPE>(LB, cc, k, loB, hiB);
                    if (TYPE == MU_TYPE_Q6_K) { /* 0..63 -> -32..31 */
                        loA = __vsub4(loA, 0x20202020u), hiA = __vsub4(hiA, 0x20202020u);
                        loB = __vsub4(loB, 0x20202020u), hiB = __vsub4(hiB, 0x20202020u);
                    }
#pragma unroll
                    for (int half = 0; half < 2; half++) { /* low nibbles: group 4X + h; high: 4X + 2 + h */
                        const int t = 2 * half + h, G = 4 * X + t;
                        const uint32_t a0 = half ? hiA : loA, a1 = half ? hiB : loB;
                        const float fA = okA ? mmq_wscale<TYPE>(LA, SA, cc, t) : 0.f;
                        const float fB = okB ? mmq_wscale<TYPE>(LB, SB, cc, t) : 0.f;
#pragma unroll
                        for (int n = 0; n < NT; n++) {
                            const uint32_t b0 = *reinterpret_cast<const uint32_t *>(&sx[8 * n + gid][G * 16 + 4 * tig]);
                            int c[4] = {0, 0, 0, 0};
                            mma_s8_m16n8k16(c, a0, a1, b0);
                            const float dx0 = sdx[8 * n + 2 * tig][G], dx1 = sdx[8 * n + 2 * tig + 1][G];
                            acc[n][0] += (float)c[0] * (fA * dx0);
                            acc[n][1] += (float)c[1] * (fA * dx1);
                            acc[n][2] += (float)c[2] * (fB * dx0);
                            acc[n][3] += (float)c[3] * (fB * dx1);
                        }
                    }
                }
                if (TYPE != MU_TYPE_Q6_K) { /* min terms: sub-blocks 2cc (groups 4X, 4X+1) and 2cc+1 */
#pragma unroll
                    for (int half = 0; half < 2; half++) {
                        const int s = 2 * cc + half, G = 4 * X + 2 * half;
                        const float mA = okA ? SA.wm[s] : 0.f, mB = okB ? SB.wm[s] : 0.f;
#pragma unroll
                        for (int n = 0; n < NT; n++) {
                            const int u0 = 8 * n + 2 * tig;
                            const float S0 = ssy[u0][G] + ssy[u0][G + 1], S1 = ssy[u0 + 1][G] + ssy[u0 + 1][G + 1];
                            acc[n][0] -= mA * S0;
                            acc[n][1] -= mA * S1;
                            acc[n][2] -= mB * S0;
                            acc[n][3] -= mB * S1;
                        }
                    }
                }
            }
        }
    }
    float *y = a.seg[s].y;
    int64_t ldy = a.seg[s].ldy;
    if (splits > 1) {
        y = part + (int64_t)blockIdx.z * T * total + mmq_seg_first(a, s);
        ldy = total;
    }
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int tok0 = t0 + 8 * n + 2 * tig, tok1 = tok0 + 1;
        if (okA && tok0 < T) y[tok0 * ldy + rA] = acc[n][0];
        if (okA && tok1 < T) y[tok1 * ldy + rA] = acc[n][1];
        if (okB && tok0 < T) y[tok0 * ldy + rB] = acc[n][2];
        if (okB && tok1 < T) y[tok1 * ldy + rB] = acc[n][3];
    }
}

/* y of every segment = the splits' partials added in order (deterministic) */
__global__ void mmq_reduce_kernel(const __grid_constant__ mu_cu_mvr a, const float *part, int64_t total, int splits) {
    pdl_trigger();
    pdl_wait();
    const int64_t n = (int64_t)a.nrows * total;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / total;
        int64_t r = i - t * total;
        int s = 0;
        while (s + 1 < a.nseg && r >= a.seg[s].w.rows) r -= a.seg[s].w.rows, s++;
        float v = part[i];
        for (int z = 1; z < splits; z++) v += part[(int64_t)z * n + i];
        a.seg[s].y[t * a.seg[s].ldy + r] = v;
    }
}

/* ---- the f16 variant: weights dequantized to f16 in registers -------------
 * Y[t][r] = W[r] . x[t] with x in f16 (no per-group scale work per token:
 * the weights carry their scales, so a k16 step is one mma and the f32
 * accumulators take no other arithmetic). A warp owns 16 weight rows and
 * NT tiles of 8 tokens, and walks K in spans of two blocks: lane (gid, tig)
 * loads the lane-block (block 2q + (tig >> 1), c0 = tig & 1) of rows gid
 * and gid + 8, so the quad of a row reads 64 contiguous bytes per load.
 * The k order inside an mma is free as long as A and B agree: slot (cc, k,
 * h) of the span gives lane tig the four weights 64X + 32h + 4k + j (j =
 * 0..3, X = c0 + 2cc) of its block, as k-pairs (j 0,1) and (2,3); the
 * inputs are packed by mmf_pack_kernel in that order, one 8-byte load per
 * lane and slot (a warp reads 256 contiguous bytes).
 * Packed inputs xp [T/8 tiles][spans][32 slots][32 lanes][4] f16. */

__device__ __forceinline__ void mma_f16_m16n8k16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                 uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ __half2 u2h2(uint32_t u) { return *reinterpret_cast<const __half2 *>(&u); }
__device__ __forceinline__ uint32_t h22u(__half2 h) { return *reinterpret_cast<const uint32_t *>(&h); }

/* two byte values v (0..63) of a word as f16 1024 + v (selector 0x4140:
 * bytes 0, 1; 0x4342: bytes 2, 3) */
__device__ __forceinline__ __half2 mmf_pair(uint32_t v, uint32_t sel) { return u2h2(__byte_perm(v, 0x64646464u, sel)); }

/* A lane's scales for one row's lane-block: Q4_K/Q5_K per sub-block s
 * (kq_scales_k4's order) d * sc and -dmin * m; Q6_K per group (cc, t)
 * d * scale. Zero where the lane has no block (its weights then vanish). */
struct MmfScales {
    __half2 s[8], m[4];
};
template <uint32_t TYPE>
__device__ __forceinline__ void mmf_scales(const KqLane<uint4> &L, int c0, bool on, MmfScales &S) {
    if (TYPE == MU_TYPE_Q6_K) {
        const float d = on ? kq_h2f(L.d) : 0.f;
#pragma unroll
        for (int cc = 0; cc < 2; cc++)
#pragma unroll
            for (int t = 0; t < 4; t++) S.s[4 * cc + t] = __float2half2_rn(d * (float)kq_scale_q6(L.m, cc, t));
        return;
    }
    const float d = on ? kq_h2f(L.m.x & 0xFFFF) : 0.f, dmin = on ? kq_h2f(L.m.x >> 16) : 0.f;
    int sc[4], mn[4];
    kq_scales_k4(L.m, c0, sc, mn);
#pragma unroll
    for (int s = 0; s < 4; s++) S.s[s] = __float2half2_rn(d * (float)sc[s]), S.m[s] = __float2half2_rn(-dmin * (float)mn[s]);
}

/* The f16 weights of byte pair sel of v, slot (cc, k, h): exact integer
 * q = v - 1024 (Q6_K: v - 1056), then one rounding of q * scale - min. */
template <uint32_t TYPE>
__device__ __forceinline__ uint32_t mmf_weights(uint32_t v, uint32_t sel, const MmfScales &S, int cc, int k, int h) {
    const __half2 x = mmf_pair(v, sel);
    if (TYPE == MU_TYPE_Q6_K)
        return h22u(__hmul2(__hsub2(x, __float2half2_rn(1056.f)), S.s[4 * cc + 2 * h + (k >> 2)]));
    return h22u(__hfma2(__hsub2(x, __float2half2_rn(1024.f)), S.s[2 * cc + h], S.m[2 * cc + h]));
}

template <uint32_t TYPE, int NT>
__global__ void __launch_bounds__(MMQ_WARPS * 32) mmf_kernel(const __grid_constant__ mu_cu_mvr a, int64_t groups,
                                                             int splits, float *part, int64_t total) {
    pdl_trigger();
    pdl_wait();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3, c0 = tig & 1;
    const int64_t g = (int64_t)blockIdx.x * MMQ_WARPS + warp;
    if (g >= groups) return; /* (no block-wide barrier below) */
    int64_t r0 = 0;
    const int s = mmq_locate(a, g, r0);
    const mu_cu_weight &w = a.seg[s].w;
    const int64_t rA = r0 + gid, rB = rA + 8;
    const bool okA = rA < w.rows, okB = rB < w.rows;
    const int T = a.nrows, nb = (int)(w.cols >> 8), NS = (nb + 1) >> 1, tiles8 = (T + 7) >> 3;
    const int n0 = blockIdx.y * NT; /* the first token tile of 8 */
    const uint2 *xp = reinterpret_cast<const uint2 *>(a.xp);
    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    int q0, q1;
    mmq_split(NS, splits, blockIdx.z, q0, q1);
    for (int q = q0; q < q1; q++) {
        const int blk = 2 * q + (tig >> 1);
        const bool on = blk < nb, onA = on && okA, onB = on && okB;
        KqLane<uint4> LA, LB;
        LA.m = LB.m = make_uint4(0u, 0u, 0u, 0u);
        LA.q[0] = LA.q[1] = LA.q[2] = LA.q[3] = LB.q[0] = LB.q[1] = LB.q[2] = LB.q[3] = LA.m;
        LA.h[0] = LA.h[1] = LB.h[0] = LB.h[1] = LA.m;
        LA.d = LB.d = 0u;
        if (onA) kq_load<TYPE>(LA, w, rA, blk, c0);
        if (onB) kq_load<TYPE>(LB, w, rB, blk, c0);
        MmfScales SA, SB;
        mmf_scales<TYPE>(LA, c0, onA, SA);
        mmf_scales<TYPE>(LB, c0, onB, SB);
        const uint2 *xq = xp + ((int64_t)n0 * NS + q) * 32 * 32 + lane;
#pragma unroll
        for (int cc = 0; cc < 2; cc++)
#pragma unroll
            for (int k = 0; k < 8; k++) {
                uint32_t loA, hiA, loB, hiB;
                kq_values<TYPE>(LA, cc, k, loA, hiA);
                kq_values<TYPE>(LB, cc, k, loB, hiB);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint32_t vA = h ? hiA : loA, vB = h ? hiB : loB;
                    const uint32_t a0 = mmf_weights<TYPE>(vA, 0x4140u, SA, cc, k, h);
                    const uint32_t a2 = mmf_weights<TYPE>(vA, 0x4342u, SA, cc, k, h);
                    const uint32_t a1 = mmf_weights<TYPE>(vB, 0x4140u, SB, cc, k, h);
                    const uint32_t a3 = mmf_weights<TYPE>(vB, 0x4342u, SB, cc, k, h);
                    const int slot = (cc * 8 + k) * 2 + h;
#pragma unroll
                    for (int n = 0; n < NT; n++) {
                        if (n0 + n >= tiles8) break;
                        const uint2 bx = __ldg(xq + ((int64_t)n * NS * 32 + slot) * 32);
                        mma_f16_m16n8k16(acc[n], a0, a1, a2, a3, bx.x, bx.y);
                    }
                }
            }
    }
    float *y = a.seg[s].y;
    int64_t ldy = a.seg[s].ldy;
    if (splits > 1) {
        y = part + (int64_t)blockIdx.z * T * total + mmq_seg_first(a, s);
        ldy = total;
    }
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int tok0 = 8 * (n0 + n) + 2 * tig, tok1 = tok0 + 1;
        if (okA && tok0 < T) y[tok0 * ldy + rA] = acc[n][0];
        if (okA && tok1 < T) y[tok1 * ldy + rA] = acc[n][1];
        if (okB && tok0 < T) y[tok0 * ldy + rB] = acc[n][2];
        if (okB && tok1 < T) y[tok1 * ldy + rB] = acc[n][3];
    }
}

/* x [T][ldx] f32 -> xp in mmf_kernel's order (K columns; zeros past K and T) */
__global__ void mmf_pack_kernel(const float *x, int64_t ldx, int K, int T, int NS, uint2 *xp) {
    pdl_trigger();
    pdl_wait();
    const int64_t n_all = (int64_t)((T + 7) >> 3) * NS * 32 * 32;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n_all; i += (int64_t)gridDim.x * blockDim.x) {
        const int lane = (int)(i & 31), slot = (int)((i >> 5) & 31);
        const int64_t rest = i >> 10;
        const int q = (int)(rest % NS), n = (int)(rest / NS);
        const int gid = lane >> 2, tig = lane & 3, cc = slot >> 4, k = (slot >> 1) & 7, h = slot & 1;
        const int tok = 8 * n + gid, blk = 2 * q + (tig >> 1), X = (tig & 1) + 2 * cc;
        const int P = 256 * blk + 64 * X + 32 * h + 4 * k;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (tok < T && P < K) v = *reinterpret_cast<const float4 *>(x + (int64_t)tok * ldx + P);
        const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
        xp[i] = make_uint2(h22u(lo), h22u(hi));
    }
}

static int mmq_sms() {
    static int sms[MU_CU_MAX_DEVICES];
    int dev = 0;
    if (current_device(&dev) != cudaSuccess) return 0;
    if (!sms[dev] && cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
    return sms[dev];
}

/* Splits of K: enough warps for MMQ_WARPS_PER_SM on every SM, each split at
 * least two K-blocks, within the partials' room (a->part_cap floats). */
#define MMQ_WARPS_PER_SM 16
static int mmq_splits(const mu_cu_mvr *a, int64_t groups, int64_t tiles, int64_t total, bool f16) {
    if (!a->part) return 1;
    const int64_t nb = f16 ? (a->seg[0].w.cols / 256 + 1) / 2 * 2 : a->seg[0].w.cols / 256, want = (int64_t)mmq_sms() * MMQ_WARPS_PER_SM;
    int64_t S = (want + groups * tiles - 1) / (groups * tiles);
    if (S > nb / 2) S = nb / 2;
    const int64_t room = a->part_cap / ((int64_t)a->nrows * total);
    if (S > room) S = room;
    return S > 1 ? (int)S : 1;
}

template <uint32_t TYPE, int NT, bool F16>
static cudaError_t mmq_launch(const mu_cu_mvr *a, const mu_cu_exec *x) {
    int64_t groups = 0, total = 0;
    for (int s = 0; s < a->nseg; s++) groups += (a->seg[s].w.rows + 15) / 16, total += a->seg[s].w.rows;
    const int64_t tiles = (a->nrows + 8 * NT - 1) / (8 * NT);
    const int S = mmq_splits(a, groups, tiles, total, F16);
    const dim3 grid((unsigned)((groups + MMQ_WARPS - 1) / MMQ_WARPS), (unsigned)tiles, (unsigned)S);
    cudaError_t e = F16 ? launch_pdl(mmf_kernel<TYPE, NT>, grid, dim3(MMQ_WARPS * 32), 0, x, *a, groups, S, a->part, total)
                        : launch_pdl(mmq_kernel<TYPE, NT>, grid, dim3(MMQ_WARPS * 32), 0, x, *a, groups, S, a->part, total);
    if (e != cudaSuccess || S == 1) return e;
    const int64_t n = (int64_t)a->nrows * total;
    return launch_pdl(mmq_reduce_kernel, dim3((unsigned)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096)), dim3(256),
                      0, x, *a, (const float *)a->part, total, S);
}

template <uint32_t TYPE, bool F16>
static cudaError_t mmq_tiles(const mu_cu_mvr *a, const mu_cu_exec *x) {
    if (a->nrows <= 8) return mmq_launch<TYPE, 1, F16>(a, x);
    if (a->nrows <= 16) return mmq_launch<TYPE, 2, F16>(a, x);
    if (F16 && a->nrows <= 32) return mmq_launch<TYPE, 4, F16>(a, x);
    return mmq_launch<TYPE, F16 ? 8 : 4, F16>(a, x);
}

extern "C" int mu_cu_mmq_ok(uint32_t type, int64_t cols) {
    return (type == MU_TYPE_Q4_K || type == MU_TYPE_Q5_K || type == MU_TYPE_Q6_K) && cols > 0 && cols % 256 == 0;
}

static cudaError_t mmq_check(const mu_cu_mvr *a) {
    if (a->nrows < 1 || a->nseg < 1 || a->nseg > MU_CU_MAX_SEG) return cudaErrorInvalidValue;
    for (int s = 0; s < a->nseg; s++)
        if (a->seg[s].w.type != a->seg[0].w.type || a->seg[s].w.cols != a->seg[0].w.cols ||
            !mu_cu_mmq_ok(a->seg[s].w.type, a->seg[s].w.cols) || a->seg[s].w.cols > a->ldx)
            return cudaErrorInvalidValue;
    return cudaSuccess;
}

extern "C" cudaError_t mu_cu_mmq_set(const mu_cu_mvr *a, const mu_cu_exec *x) {
    if (mmq_check(a) != cudaSuccess || a->ldx % 256 || !a->act.q || !a->act.ds) return cudaErrorInvalidValue;
    switch (a->seg[0].w.type) {
    case MU_TYPE_Q4_K: return mmq_tiles<MU_TYPE_Q4_K, false>(a, x);
    case MU_TYPE_Q5_K: return mmq_tiles<MU_TYPE_Q5_K, false>(a, x);
    case MU_TYPE_Q6_K: return mmq_tiles<MU_TYPE_Q6_K, false>(a, x);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t mu_cu_mmf_pack(const float *x, int64_t ldx, int64_t K, int T, void *xp, const mu_cu_exec *e) {
    if (T < 1 || K < 256 || K % 256 || ldx < K || ldx % 4) return cudaErrorInvalidValue;
    const int NS = (int)((K / 256 + 1) / 2);
    const int64_t n = (int64_t)((T + 7) / 8) * NS * 1024;
    const unsigned blocks = (unsigned)((n + 255) / 256 < 2048 ? (n + 255) / 256 : 2048);
    return launch_pdl(mmf_pack_kernel, dim3(blocks), dim3(256), 0, e, x, ldx, (int)K, T, NS,
                      reinterpret_cast<uint2 *>(xp));
}

extern "C" cudaError_t mu_cu_mmf_set(const mu_cu_mvr *a, const mu_cu_exec *x) {
    if (mmq_check(a) != cudaSuccess || !a->xp) return cudaErrorInvalidValue;
    switch (a->seg[0].w.type) {
    case MU_TYPE_Q4_K: return mmq_tiles<MU_TYPE_Q4_K, true>(a, x);
    case MU_TYPE_Q5_K: return mmq_tiles<MU_TYPE_Q5_K, true>(a, x);
    case MU_TYPE_Q6_K: return mmq_tiles<MU_TYPE_Q6_K, true>(a, x);
    default: return cudaErrorInvalidValue;
    }
}
