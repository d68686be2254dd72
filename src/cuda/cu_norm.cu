/* cu_norm.cu — the row kernels: the residual/norm tail over T rows
 * (prefill), the token embedding with the first pre-norm, SwiGLU, the
 * logits' scale and soft-cap, and random fills (bench depths).
 */
#include "cuda/cu_norm.cuh"
#include "cuda/cu_units.cuh"

__global__ void __launch_bounds__(256) resnorm_rows_kernel(const __grid_constant__ mu_cu_resnorm rn) {
    pdl_trigger(); /* the next grid may launch now; it waits for this one to finish */
    pdl_wait();
    __shared__ __align__(16) float sv[TAIL_MAXN];
    resnorm_block<8>(rn, blockIdx.x, sv);
}

extern "C" cudaError_t mu_cu_resnorm_rows(mu_cu_resnorm rn, int T, const mu_cu_exec *x) {
    return launch_pdl(resnorm_rows_kernel, dim3(T), dim3(256), 0, x, rn);
}

/* An empty kernel whose attributes say which of the build's targets the
 * driver picked for this device (every kernel here is built for the same
 * list, MUSER_CUDA_ARCHS). */
__global__ void code_arch_probe_kernel() {}

extern "C" cudaError_t mu_cu_code_arch(int *ptx_arch) {
    cudaFuncAttributes fa;
    const cudaError_t e = cudaFuncGetAttributes(&fa, code_arch_probe_kernel);
    *ptx_arch = e == cudaSuccess ? fa.ptxVersion : 0;
    return e;
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
                                   unsigned long long *best, const mu_cu_exec *x) {
    return launch_pdl(embed_kernel, dim3(T), dim3(256), 0, x, *tok, recs, rn, best);
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

/* As swiglu_kernel, four elements a thread, also into the tensor-core
 * batch's packed inputs (rows of n, n % 256 == 0: a warp's 128 elements
 * lie in one row, every lane of it in range together). */
__global__ void swiglu_pack_kernel(float *g, const float *u, uint16_t *h, int64_t n, int64_t total4, uint2 *xp) {
    pdl_trigger();
    pdl_wait();
    const int64_t n4 = n / 4;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total4; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 x = reinterpret_cast<const float4 *>(g)[i], y = __ldg(reinterpret_cast<const float4 *>(u) + i);
        const float4 v = make_float4(swiglu1(x.x, y.x), swiglu1(x.y, y.y), swiglu1(x.z, y.z), swiglu1(x.w, y.w));
        reinterpret_cast<float4 *>(g)[i] = v;
        if (h) {
            uint16_t *o = h + 4 * i;
            o[0] = f32_to_f16(v.x), o[1] = f32_to_f16(v.y), o[2] = f32_to_f16(v.z), o[3] = f32_to_f16(v.w);
        }
        const int64_t t = i / n4;
        mmf_in_put4(xp, (int)(n / 256), t, (int)(4 * (i - t * n4)), v);
    }
}

extern "C" cudaError_t mu_cu_swiglu_rows(float *g, const float *u, uint16_t *h, int64_t n, int T, void *xp,
                                         const mu_cu_exec *x) {
    if (xp) {
        if (n % 256) return cudaErrorInvalidValue;
        return launch_pdl(swiglu_pack_kernel, dim3(1024), dim3(256), 0, x, g, u, h, n, n * T / 4,
                          static_cast<uint2 *>(xp));
    }
    return launch_pdl(swiglu_kernel, dim3(1024), dim3(256), 0, x, g, u, h, n * T);
}

/* int8 groups of 16 (the fast lane's activations) of T rows of n, n a
 * multiple of 32: the batched steps' inputs of Wo and ffn down on tensor
 * cores. One warp a 32-element block, the tails' arithmetic. */
__global__ void quantize_rows_kernel(const float *x, int8_t *q, float *ds, int64_t blocks) {
    pdl_trigger();
    pdl_wait();
    const int64_t blk = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    if (blk >= blocks) return;
    quantize_block_warp(x[blk * 32 + (threadIdx.x & 31)], q + blk * 32, ds + blk * 4);
}

extern "C" cudaError_t mu_cu_quantize_rows(const float *x, int8_t *q, float *ds, int64_t n, int T,
                                           const mu_cu_exec *ex) {
    if (n % 32) return cudaErrorInvalidValue;
    const int64_t blocks = n * T / 32;
    return launch_pdl(quantize_rows_kernel, dim3((unsigned)((blocks * 32 + 255) / 256)), dim3(256), 0, ex, x, q, ds,
                      blocks);
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

extern "C" cudaError_t mu_cu_logits_finish(float *logits, int64_t n, float scale, float softcap,
                                       const mu_cu_exec *x) {
    return launch_pdl(logits_finish_kernel, dim3(2048), dim3(256), 0, x, logits, n, scale, softcap);
}

/* ---- each row's greedy choice (speculative steps: no vocabulary rows to the host) ----
 * mu_argmax's answer (engine/parity.h: the first largest; NaN never wins; a
 * NaN at 0 stays; -0 == +0) of each of T rows of n floats. MU_CU_ARGMAX_SPLITS
 * blocks a row each keep the largest key of a slice; one warp a row then
 * takes the largest of its slices'. A key packs the value's order above the
 * complement of the index, so the larger key is the larger value, then the
 * lower index; every value but NaN has a key above 0. */
#define ARGMAX_THREADS 256

__device__ __forceinline__ bool argmax_nan(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }

__device__ __forceinline__ unsigned long long argmax_key(float f, uint32_t i) {
    uint32_t u = __float_as_uint(f);
    if (argmax_nan(u)) return 0ull;
    if ((u << 1) == 0u) u = 0u; /* -0 as +0 */
    const uint32_t o = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* the float's order as unsigned */
    return ((unsigned long long)o << 32) | (unsigned long long)(0xFFFFFFFFu - i);
}

__device__ __forceinline__ unsigned long long argmax_warp(unsigned long long k) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long y = __shfl_down_sync(0xFFFFFFFFu, k, o);
        k = y > k ? y : k;
    }
    return k; /* (lane 0's is the warp's) */
}

__global__ void __launch_bounds__(ARGMAX_THREADS) argmax_slices_kernel(const float *x, int64_t n,
                                                                       unsigned long long *part) {
    const int64_t per = (n + MU_CU_ARGMAX_SPLITS - 1) / MU_CU_ARGMAX_SPLITS, lo = blockIdx.x * per;
    const int64_t hi = lo + per < n ? lo + per : n;
    const float *row = x + (int64_t)blockIdx.y * n;
    unsigned long long best = 0ull;
#pragma unroll 4
    for (int64_t i = lo + threadIdx.x; i < hi; i += ARGMAX_THREADS) {
        const unsigned long long k = argmax_key(row[i], (uint32_t)i);
        best = k > best ? k : best;
    }
    best = argmax_warp(best);
    __shared__ unsigned long long w[ARGMAX_THREADS / 32];
    if ((threadIdx.x & 31) == 0) w[threadIdx.x >> 5] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 1; k < ARGMAX_THREADS / 32; k++) best = w[k] > best ? w[k] : best;
        part[(int64_t)blockIdx.y * MU_CU_ARGMAX_SPLITS + blockIdx.x] = best;
    }
}

__global__ void __launch_bounds__(32) argmax_pick_kernel(const float *x, int64_t n, const unsigned long long *part,
                                                         int32_t *ids) {
    const int64_t r = blockIdx.x;
    const int l = threadIdx.x;
    const unsigned long long best = argmax_warp(l < MU_CU_ARGMAX_SPLITS ? part[r * MU_CU_ARGMAX_SPLITS + l] : 0ull);
    if (l == 0)
        ids[r] = argmax_nan(__float_as_uint(x[r * n])) || best == 0ull ? 0 : (int32_t)(0xFFFFFFFFu - (uint32_t)best);
}

extern "C" cudaError_t mu_cu_rows_argmax(const float *x, int64_t n, int T, unsigned long long *part, int32_t *ids,
                                         cudaStream_t s) {
    if (T < 1 || T > 65535 || n < 1 || n > 0x7FFFFFFFll) return cudaErrorInvalidValue;
    argmax_slices_kernel<<<dim3(MU_CU_ARGMAX_SPLITS, T), ARGMAX_THREADS, 0, s>>>(x, n, part);
    argmax_pick_kernel<<<T, 32, 0, s>>>(x, n, part, ids);
    return cudaGetLastError();
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

