/* cu_mmf_in.cuh — the tensor-core batch's packed inputs (cu_mmf.cu), as
 * the kernels that produce a batch's inputs write them directly (the
 * residual/norm tail, the attention merge, SwiGLU: mu_cu_normout.xp), so
 * no separate packing pass runs between producer and multiply.
 *
 * xp: [T/8 tiles][NS spans][MMF_SLOTS][32 lanes] uint2 (four f16), NS =
 * ceil(nb / 2) spans of two K-blocks of 256. Lane (gid, tig) of tile n is
 * token 8n + gid and block 2q + (tig >> 1), half c0 = tig & 1. Slot (cc,
 * k, h) < 32 holds the block's elements 64X + 32h + 4k + j (X = c0 + 2cc)
 * as the k-pairs (j0, j2), (j1, j3); slot 32 the sums of its four
 * sub-blocks of 32, sb = 2cc + h (X = c0 + 2cc, half h). A missing block
 * (odd nb: the last span's second) reads zeros.
 */
#ifndef MU_CU_MMF_IN_CUH
#define MU_CU_MMF_IN_CUH

#include "cuda/cu_device.cuh"

#define MMF_SLOTS 33

/* The uint2 of xp that holds elements e..e+3 (e % 4 == 0) of token t
 * (sum false), or their sub-block's sum (sum true: half sb of it). */
__device__ __forceinline__ int64_t mmf_in_at(int ns, int64_t t, int e, bool sum, int *sb) {
    const int blk = e >> 8, o = e & 255, X = o >> 6, h = (o >> 5) & 1, k = (o >> 2) & 7;
    const int tig = 2 * (blk & 1) + (X & 1), slot = sum ? 32 : ((X >> 1) * 8 + k) * 2 + h;
    *sb = 2 * (X >> 1) + h;
    return (((t >> 3) * ns + (blk >> 1)) * MMF_SLOTS + slot) * 32 + (t & 7) * 4 + tig;
}

/* Whether e lies in a row's last block with no second block in its span
 * (nb odd): its twin entries (lane tig + 2) are then written as zeros. */
__device__ __forceinline__ bool mmf_in_odd_tail(int nb, int e) { return (nb & 1) && (e >> 8) == nb - 1; }

/* Elements e..e+3 of token t (rows of nb K-blocks). */
__device__ __forceinline__ void mmf_in_store4(uint2 *xp, int nb, int64_t t, int e, float4 a) {
    int sb = 0;
    const int64_t at = mmf_in_at((nb + 1) >> 1, t, e, false, &sb);
    const __half2 p02 = __floats2half2_rn(a.x, a.z), p13 = __floats2half2_rn(a.y, a.w);
    xp[at] = make_uint2(*reinterpret_cast<const uint32_t *>(&p02), *reinterpret_cast<const uint32_t *>(&p13));
    if (mmf_in_odd_tail(nb, e)) xp[at + 2] = make_uint2(0u, 0u);
}

/* The sum of the sub-block of 32 that starts at element e of token t. */
__device__ __forceinline__ void mmf_in_store_sum(uint2 *xp, int nb, int64_t t, int e, float s) {
    int sb = 0;
    const int64_t at = mmf_in_at((nb + 1) >> 1, t, e, true, &sb);
    reinterpret_cast<__half *>(xp + at)[sb] = __float2half_rn(s);
    if (mmf_in_odd_tail(nb, e)) reinterpret_cast<__half *>(xp + at + 2)[sb] = __float2half_rn(0.f);
}

/* Elements e..e+3 of token t (a), every lane of the warp holding the four
 * after the previous lane's (e = 4 lane + a multiple of 128, all 32 lanes
 * here): each 8 lanes' 32 elements are a sub-block, its sum written by the
 * first of them. */
__device__ __forceinline__ void mmf_in_put4(uint2 *xp, int nb, int64_t t, int e, float4 a) {
    mmf_in_store4(xp, nb, t, e, a);
    float s = (a.x + a.y) + (a.z + a.w);
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    s += __shfl_xor_sync(0xffffffffu, s, 4);
    if ((threadIdx.x & 7) == 0) mmf_in_store_sum(xp, nb, t, e, s);
}

/* Element e of token t (v), the warp's 32 lanes holding one sub-block's 32
 * consecutive elements (e = lane + a multiple of 32). */
__device__ __forceinline__ void mmf_in_put1(uint2 *xp, int nb, int64_t t, int e, float v) {
    const float v1 = __shfl_down_sync(0xffffffffu, v, 1), v2 = __shfl_down_sync(0xffffffffu, v, 2),
                v3 = __shfl_down_sync(0xffffffffu, v, 3);
    if ((threadIdx.x & 3) == 0) mmf_in_store4(xp, nb, t, e, make_float4(v, v1, v2, v3));
    float s = v;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) mmf_in_store_sum(xp, nb, t, e, s);
}

#endif
