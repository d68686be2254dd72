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
#include "cuda/cu_tc_rows.cuh"

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

/* splits > 1: split z's sums into part [splits][T][total rows] (tc_reduce
 * adds them in order); else straight into the segments' y. */
template <uint32_t TYPE, int NT>
__global__ void __launch_bounds__(TC_WARPS * 32) mmq_kernel(const __grid_constant__ mu_cu_mvr a, int64_t groups,
                                                             int splits, float *part, int64_t total) {
    constexpr int TT = 8 * NT;
    __shared__ __align__(16) int8_t sx[TT][MMQ_XROW]; /* the K-block's int8 inputs of the tile's tokens */
    __shared__ float sdx[TT][16], ssy[TT][16];         /* their groups' d and d * sum(q) */
    pdl_trigger();
    pdl_wait();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
    const int64_t g = (int64_t)blockIdx.x * TC_WARPS + warp;
    int64_t r0 = 0;
    const int s = tc_locate(a, g < groups ? g : groups - 1, r0);
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
    tc_split(nb, splits, blockIdx.z, kb0, kb1);
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
        y = part + (int64_t)blockIdx.z * T * total + tc_seg_first(a, s);
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

/* K split: enough warps for 16 a SM, each split at least two K-blocks */
template <uint32_t TYPE>
static cudaError_t mmq_tiles(const mu_cu_mvr *a, const mu_cu_exec *x) {
    const int64_t units = a->seg[0].w.cols / 512;
    if (a->nrows <= 8) return tc_launch(mmq_kernel<TYPE, 1>, a, x, 1, units, 16, 0);
    if (a->nrows <= 16) return tc_launch(mmq_kernel<TYPE, 2>, a, x, 2, units, 16, 0);
    return tc_launch(mmq_kernel<TYPE, 4>, a, x, 4, units, 16, 0);
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
    case MU_TYPE_Q4_K: return mmq_tiles<MU_TYPE_Q4_K>(a, x);
    case MU_TYPE_Q5_K: return mmq_tiles<MU_TYPE_Q5_K>(a, x);
    case MU_TYPE_Q6_K: return mmq_tiles<MU_TYPE_Q6_K>(a, x);
    default: return cudaErrorInvalidValue;
    }
}

