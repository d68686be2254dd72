/* cu_matvec_rows.cu — the B-row matvec of the exact lane (batched decode):
 * y[j][r] = W[r] . x[j] for j < nrows. Each warp loads a batch of a weight
 * row into registers once and dots it with every row's f32 input (the same
 * per-row arithmetic and order as the one-row kernel's exact lane), so the
 * weights stream from DRAM once for all rows; the inputs (a few KB per row)
 * come from L1/L2. Rows past NR run in further launches.
 */
#include "cuda/cu_matvec_policy.cuh"

template <class P, int NR>
__global__ void __launch_bounds__(512, 1) mvr_kernel(const __grid_constant__ mu_cu_weight w, const float *x,
                                                     int64_t ldx, float *y, int64_t ldy, int nrows) {
    constexpr int NW = 16;
    pdl_trigger();
    pdl_wait();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t W = (int64_t)gridDim.x * NW;
    const int n_items = P::items(w);
    for (int64_t row = (int64_t)blockIdx.x * NW + warp; row < w.rows; row += W) {
        float acc[NR];
#pragma unroll
        for (int j = 0; j < NR; j++) acc[j] = 0.f;
        for (int i0 = 0; i0 < n_items; i0 += P::PER_BATCH) {
            typename P::Regs R;
            P::load(R, w, row, i0, min(i0 + P::PER_BATCH, n_items));
#pragma unroll
            for (int j = 0; j < NR; j++)
                if (j < nrows) {
                    const mu_cu_act a = {x + j * ldx, NULL, NULL};
                    acc[j] += P::dot_exact(R, w, row, a);
                }
        }
#pragma unroll
        for (int j = 0; j < NR; j++)
            if (j < nrows) {
                const float s = warp_sum(acc[j]);
                if (lane == 0) y[j * ldy + row] = s;
            }
    }
}

template <class P, int NR>
static cudaError_t launch_mvr(const mu_cu_weight *w, const float *x, int64_t ldx, float *y, int64_t ldy, int nrows,
                              const mu_cu_exec *ex) {
    static int sms[MU_CU_MAX_DEVICES], fit[MU_CU_MAX_DEVICES];
    int dev = 0;
    cudaError_t e = current_device(&dev);
    if (e != cudaSuccess) return e;
    if (!sms[dev]) {
        e = cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev);
        if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit[dev], mvr_kernel<P, NR>, 512, 0);
        if (e != cudaSuccess) return e;
        if (fit[dev] < 1) fit[dev] = 1;
    }
    int64_t blocks = (w->rows + 15) / 16;
    const int64_t most = (int64_t)sms[dev] * fit[dev];
    if (blocks > most) blocks = most;
    return launch_pdl(mvr_kernel<P, NR>, dim3((unsigned)blocks), dim3(512), 0, ex, *w, x, ldx, y, ldy, nrows);
}

template <class P>
static cudaError_t launch_mvr_rows(const mu_cu_weight *w, const float *x, int64_t ldx, float *y, int64_t ldy,
                                   int nrows, const mu_cu_exec *ex) {
    if (nrows <= 4) return launch_mvr<P, 4>(w, x, ldx, y, ldy, nrows, ex);
    if (nrows <= 8) return launch_mvr<P, 8>(w, x, ldx, y, ldy, nrows, ex);
    return launch_mvr<P, 16>(w, x, ldx, y, ldy, nrows, ex);
}

extern "C" cudaError_t mu_cu_matvec_rows(const mu_cu_weight *w, const float *x, int64_t ldx, float *y, int64_t ldy,
                                         int nrows, const mu_cu_exec *ex) {
    for (int j0 = 0; j0 < nrows; j0 += MU_CU_MVR_MAX) {
        const int n = nrows - j0 < MU_CU_MVR_MAX ? nrows - j0 : MU_CU_MVR_MAX;
        const float *xj = x + (int64_t)j0 * ldx;
        float *yj = y + (int64_t)j0 * ldy;
        cudaError_t e;
        switch (w->type) {
        case MU_TYPE_Q4_K: case MU_TYPE_Q5_K: case MU_TYPE_Q6_K:
            e = launch_mvr_rows<PolKQ<0>>(w, xj, ldx, yj, ldy, n, ex);
            break;
        case MU_TYPE_Q8_0: e = launch_mvr_rows<PolUnit<TQ80>>(w, xj, ldx, yj, ldy, n, ex); break;
        case MU_TYPE_Q4_0: e = launch_mvr_rows<PolUnit<TQ40>>(w, xj, ldx, yj, ldy, n, ex); break;
        case MU_TYPE_Q4_1: e = launch_mvr_rows<PolUnit<TIv<MU_TYPE_Q4_1>>>(w, xj, ldx, yj, ldy, n, ex); break;
        case MU_TYPE_Q5_0: e = launch_mvr_rows<PolUnit<TIv<MU_TYPE_Q5_0>>>(w, xj, ldx, yj, ldy, n, ex); break;
        case MU_TYPE_Q5_1: e = launch_mvr_rows<PolUnit<TIv<MU_TYPE_Q5_1>>>(w, xj, ldx, yj, ldy, n, ex); break;
        case MU_TYPE_IQ4_NL: e = launch_mvr_rows<PolUnit<TIv<MU_TYPE_IQ4_NL>>>(w, xj, ldx, yj, ldy, n, ex); break;
        case MU_TYPE_IQ4_XS: e = launch_mvr_rows<PolUnit<TIv<MU_TYPE_IQ4_XS>>>(w, xj, ldx, yj, ldy, n, ex); break;
        case MU_TYPE_Q2_K: e = launch_mvr_rows<PolUnit<TIv<MU_TYPE_Q2_K>>>(w, xj, ldx, yj, ldy, n, ex); break;
        case MU_TYPE_Q3_K: e = launch_mvr_rows<PolUnit<TIv<MU_TYPE_Q3_K>>>(w, xj, ldx, yj, ldy, n, ex); break;
        case MU_TYPE_F32: e = launch_mvr_rows<PolUnit<TFloat<0>>>(w, xj, ldx, yj, ldy, n, ex); break;
        case MU_TYPE_F16: e = launch_mvr_rows<PolUnit<TFloat<1>>>(w, xj, ldx, yj, ldy, n, ex); break;
        case MU_TYPE_BF16: e = launch_mvr_rows<PolUnit<TFloat<2>>>(w, xj, ldx, yj, ldy, n, ex); break;
        default: return cudaErrorInvalidValue;
        }
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
