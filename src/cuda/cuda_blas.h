/* cuda_blas.h — cuBLAS, loaded when the first CUDA session is created
 * (dlopen, as NCCL is): every other command starts without mapping its
 * hundreds of megabytes. Only the calls the backend makes. */
#ifndef MU_CUDA_BLAS_H
#define MU_CUDA_BLAS_H

#include <cublas_v2.h>

typedef struct mu_cublas {
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                              const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                              cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
} mu_cublas;

/* The loaded library's calls; MUSER_EBACKEND with the reason when it
 * cannot be loaded (then NULL in *out). */
int mu_cublas_load(const mu_cublas **out);

#endif
