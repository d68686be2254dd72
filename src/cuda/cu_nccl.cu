/* cu_nccl.cu — where the ranks of a tensor-parallel step see each other's
 * memory: NCCL's load/store-accessible (LSA) mapping of a symmetric
 * window, read with NCCL's own device function (NCCL 2.28+, nccl_device.h),
 * so the fused all-reduce of the residual/norm tail (cu_kernels.cu,
 * xrank_meet) reads its peers' partial sums through NCCL's mapping. */
#include "cuda/cu_shared.h"

#if defined(MUSER_HAVE_NCCL) && __has_include(<nccl_device.h>)
#include <nccl.h>
#include <nccl_device.h>

__global__ void lsa_pointers_kernel(ncclWindow_t win, size_t offset, int n, void **out) {
    const int p = (int)threadIdx.x;
    if (p < n) out[p] = ncclGetLsaPointer(win, offset, p);
}

extern "C" cudaError_t mu_cu_lsa_pointers(void *window, size_t offset, int n, void **out, cudaStream_t s) {
    if (n < 1 || n > MU_CU_XRANK_MAX) return cudaErrorInvalidValue;
    void **d = NULL;
    cudaError_t e = cudaMalloc((void **)&d, sizeof(void *) * (size_t)n);
    if (e != cudaSuccess) return e;
    lsa_pointers_kernel<<<1, MU_CU_XRANK_MAX, 0, s>>>((ncclWindow_t)window, offset, n, d);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaMemcpyAsync(out, d, sizeof(void *) * (size_t)n, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    cudaFree(d);
    return e;
}
#else
extern "C" cudaError_t mu_cu_lsa_pointers(void *window, size_t offset, int n, void **out, cudaStream_t s) {
    (void)window, (void)offset, (void)n, (void)out, (void)s;
    return cudaErrorNotSupported;
}
#endif
