/* cu_matvec_stage.cuh — the matvec's fast-lane input in shared memory.
 *
 * Every block of a fast-lane launch stages the int8 input once, in the
 * order its lanes read it: for the K-quants, per 256-element block the
 * int8 values (padded, so a quarter-warp's 16-byte reads hit every bank)
 * and a record per lane-block (the groups' scales, their sums); for the
 * unit formats, the int8 values and the groups' (d, d * sum(q)) as they
 * are. The input arrives as int8 (copied), as f32 (quantized here: ffn
 * down's input) or as a residual/norm boundary (formed here: norm-in).
 */
#ifndef MU_CU_MATVEC_STAGE_CUH
#define MU_CU_MATVEC_STAGE_CUH

#include "cuda/cu_matvec.h"
#include "cuda/cu_norm.cuh"
#include "cuda/cu_units.cuh"

/* How the fast lane's input reaches shared memory (the kernel's IN; a
 * template parameter: the quantizing code in every kernel spilled). */
enum MvInput {
    MV_IN_COPY = 0,  /* int8 groups as the producer wrote them            */
    MV_IN_QUANT = 1, /* quantized from f32 (mu_cu_mv.quant_input)         */
    MV_IN_NORM = 2,  /* formed from the residual and the branch (mu_cu_mv.nin) */
};

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

/* Paired staging (MvLaunch.pair, cu_matvec.cu): unit k of this block's half, past the
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
static __device__ __noinline__ void kq_stage_norm(const mu_cu_norm_in &ni, int64_t cols, uint8_t *sm) {
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
    const float r1 = ni.w_post ? 1.0f / sqrtf(block_sum(st, red) / (float)n + ni.eps_post) : 1.0f;
    float ss2 = 0.f;
    for (int c = threadIdx.x; c < nc; c += blockDim.x) {
        const float4 h = __ldcg(reinterpret_cast<const float4 *>(ni.h) + c);
        const float4 w = ni.w_post ? __ldg(reinterpret_cast<const float4 *>(ni.w_post) + c) : make_float4(0, 0, 0, 0);
        const float4 hv = residual_add4(h, vsm[c], ni.w_post != nullptr, r1, w);
        vsm[c] = hv;
        if (blockIdx.x == 0 && ni.h_out) reinterpret_cast<float4 *>(ni.h_out)[c] = hv;
        ss2 = f4sq_acc(ss2, hv);
    }
    const float r2 = 1.0f / sqrtf(block_sum(ss2, red) / (float)n + ni.eps_next);
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
    __syncthreads();
    kq_stage_records<true>(aux, nb, gds);
}

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

#endif
