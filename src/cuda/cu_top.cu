/* cu_top.cu — each row's k top logits after its bias, found on the device
 * (muser_batch_decode_top: a sampler whose draw depends only on them needs
 * k pairs a row, not the row).
 *
 * One block a row. The bias is added first, in the host's order (one
 * thread, the same float adds). Rank: value, then lower id; NaN counts as
 * -inf, -0 as +0. A monotone 32-bit key of each value; four 8-bit radix
 * passes find the k-th largest key K* and how many of the keys equal to
 * it the top takes (want); then the keys above K* are written in any
 * order, and the first `want` keys equal to it by index (a block scan over
 * the row in index order). Values are written as they are (NaN as -inf).
 */
#include "cuda/cu_device.cuh"

#define TOP_THREADS 1024
#define TOP_WARPS (TOP_THREADS / 32)

__device__ __forceinline__ uint32_t top_key(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) u = 0xFF800000u; /* NaN as -inf */
    if ((u << 1) == 0u) u = 0u;                           /* -0 as +0 */
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void __launch_bounds__(TOP_THREADS)
    rows_top_kernel(float *x, int64_t n, const int *bias_off, const int32_t *bias_ids, const float *bias_vals, int k,
                    float *vals, int32_t *ids) {
    __shared__ unsigned hist[TOP_WARPS][256];
    __shared__ unsigned warp_sum[TOP_WARPS];
    __shared__ uint32_t s_prefix, s_want;
    __shared__ unsigned s_above, s_taken;
    const int r = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float *row = x + (int64_t)r * n;
    if (tid == 0 && bias_off)
        for (int j = bias_off[r]; j < bias_off[r + 1]; j++) row[bias_ids[j]] += bias_vals[j];
    __syncthreads();

    uint32_t prefix = 0u, mask = 0u, want = (uint32_t)k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = lane; i < 256; i += 32) hist[warp][i] = 0u;
        __syncwarp();
        for (int64_t base = (int64_t)warp * 32; base < n; base += TOP_THREADS) {
            const int64_t i = base + lane;
            int bin = 256; /* (none) */
            if (i < n) {
                const uint32_t key = top_key(row[i]);
                if ((key & mask) == prefix) bin = (int)((key >> shift) & 255u);
            }
            const unsigned peers = __match_any_sync(0xFFFFFFFFu, bin);
            if (bin < 256 && lane == __ffs(peers) - 1) hist[warp][bin] += __popc(peers);
            __syncwarp();
        }
        __syncthreads();
        if (tid < 256) { /* the warps' histograms summed into the first */
            unsigned c = 0u;
            for (int w = 0; w < TOP_WARPS; w++) c += hist[w][tid];
            hist[0][tid] = c;
        }
        __syncthreads();
        if (tid == 0) {
            uint32_t above = 0u, digit = 0u;
            for (int d = 255; d >= 0; d--) {
                if (above + hist[0][d] >= want) {
                    digit = (uint32_t)d;
                    break;
                }
                above += hist[0][d];
            }
            s_prefix = prefix | (digit << shift);
            s_want = want - above;
        }
        __syncthreads();
        prefix = s_prefix;
        want = s_want;
        mask |= 255u << shift;
        __syncthreads(); /* (hist is cleared next pass) */
    }

    /* the keys above K* = prefix, in any order */
    if (tid == 0) s_above = 0u, s_taken = 0u;
    __syncthreads();
    float *const out_v = vals + (int64_t)r * k;
    int32_t *const out_i = ids + (int64_t)r * k;
    for (int64_t i = tid; i < n; i += TOP_THREADS) {
        const float v = row[i];
        if (top_key(v) > prefix) {
            const unsigned at = atomicAdd(&s_above, 1u);
            out_v[at] = v != v ? __int_as_float(0xFF800000) : v;
            out_i[at] = (int32_t)i;
        }
    }
    __syncthreads();
    const unsigned above = s_above; /* k - want */
    /* the first `want` keys equal to K*, by index */
    for (int64_t base = 0; base < n; base += TOP_THREADS) {
        const unsigned taken = s_taken;
        if (taken >= want) break; /* (block-uniform) */
        const int64_t i = base + tid;
        const float v = i < n ? row[i] : 0.0f;
        const bool eq = i < n && top_key(v) == prefix;
        const unsigned ballot = __ballot_sync(0xFFFFFFFFu, eq);
        if (lane == 0) warp_sum[warp] = __popc(ballot);
        __syncthreads();
        unsigned before = __popc(ballot & ((1u << lane) - 1u));
        for (int w = 0; w < warp; w++) before += warp_sum[w];
        if (eq && taken + before < want) {
            out_v[above + taken + before] = v != v ? __int_as_float(0xFF800000) : v;
            out_i[above + taken + before] = (int32_t)i;
        }
        __syncthreads();
        if (tid == 0) {
            unsigned all = 0u;
            for (int w = 0; w < TOP_WARPS; w++) all += warp_sum[w];
            s_taken = taken + all;
        }
        __syncthreads();
    }
}

extern "C" cudaError_t mu_cu_rows_top(float *x, int64_t n, int T, const int *bias_off, const int32_t *bias_ids,
                                      const float *bias_vals, int k, float *vals, int32_t *ids, cudaStream_t s) {
    if (T < 1 || n < 1 || k < 1 || k > n || k > MU_CU_TOP_MAX) return cudaErrorInvalidValue;
    rows_top_kernel<<<T, TOP_THREADS, 0, s>>>(x, n, bias_off, bias_ids, bias_vals, k, vals, ids);
    return cudaGetLastError();
}
