/* cu_norm.cuh — the residual/norm boundary as the kernels compute it: the
 * tail a launch's last block runs (resnorm_block), and the helpers the
 * matvec's norm-in staging shares with it, so both give the same bits.
 */
#ifndef MU_CU_NORM_CUH
#define MU_CU_NORM_CUH

#include "cuda/cu_device.cuh"
#include "cuda/cu_mmf_in.cuh"

/* ---- the residual / norm tail ----------------------------------------------------------
 * One row of n (a multiple of 32) by one block of NW warps. Each phase is
 * one round of independent 16-byte loads (no load waits on a store), so the
 * tail costs a few L2 round trips, not one per element: the current h is
 * staged in shared memory; warp w owns 128-element chunks w, w + NW, ...
 * (lane l: elements 4l .. 4l+3 of a chunk) in every phase. Data other
 * blocks or kernels wrote is read through L2. */
#define TAIL_MAXN MU_CU_TAIL_MAXN

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
static __device__ void resnorm_block_wide(const mu_cu_resnorm &rn, int64_t t) {
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

/* sv: TAIL_MAXN floats of shared memory (16-byte aligned) for h. */
template <int NW>
__device__ void resnorm_block(const mu_cu_resnorm &rn, int64_t t, float *sv) {
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
        if (rn.out.xp) mmf_in_put4(static_cast<uint2 *>(rn.out.xp), rn.out.xp_nb, t, e, a);
    }
#undef TAIL_FOR
}

#endif
