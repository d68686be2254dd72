/* cu_matvec_rows.cu — the B-row matvecs of batched decode: y[j][r] =
 * W[r] . x[j] for j < nrows. Each warp loads a batch of a weight row into
 * registers once and dots it with every row's input, so the weights stream
 * from DRAM once for all rows.
 *   exact lane: f32 inputs from L1/L2, the same per-row arithmetic and
 *     order as the one-row kernel's exact lane; rows past NR run in further
 *     launches.
 *   fast lane: every block stages the rows' inputs as int8 groups of 16 in
 *     shared memory (the one-row kernel's layout, a region per row) and
 *     dots them with the one-row kernel's per-lane arithmetic; as many rows
 *     a launch as fit shared memory, up to MU_CU_MVRF_MAX.
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
    static int fit[MU_CU_MAX_DEVICES];
    int dev = 0;
    mu_cu_shape d;
    cudaError_t e = current_device(&dev);
    if (e == cudaSuccess) e = device_shape(&d);
    if (e != cudaSuccess) return e;
    if (!fit[dev]) {
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit[dev], mvr_kernel<P, NR>, 512, 0);
        if (e != cudaSuccess) return e;
        if (fit[dev] < 1) fit[dev] = 1;
    }
    int64_t blocks = (w->rows + 15) / 16;
    const int64_t most = (int64_t)d.sms * fit[dev];
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

/* ---- fast lane ------------------------------------------------------------------------------ */

#define MVRF_WARPS 16

/* One row's staged input, rounded to 16 bytes; quantizing while staging
 * takes scratch past it (the groups' scales) that the next row's region
 * reuses (rows are staged one after the other), so a launch of n rows
 * takes n row regions and one scratch. */
template <class P>
__host__ __device__ static size_t mvrf_row_bytes(int64_t cols) {
    return (P::template stage_bytes<MV_IN_COPY>(cols) + 15) & ~(size_t)15;
}
template <class P, int IN>
__host__ __device__ static size_t mvrf_scratch_bytes(int64_t cols) {
    return P::template stage_bytes<IN>(cols) - P::template stage_bytes<MV_IN_COPY>(cols);
}

/* NR: rows a launch takes at most (accumulators); up to 4 the registers
 * leave room for two blocks an SM, 32 warps with their loads in flight. */
template <class P, int IN, int NR>
__global__ void __launch_bounds__(MVRF_WARPS * 32, NR <= 4 ? 2 : 1) mvrf_kernel(const __grid_constant__ mu_cu_mvr a) {
    extern __shared__ __align__(16) uint8_t sm[]; /* [nrows][row bytes] the staged inputs */
    pdl_trigger();
    pdl_wait();
    const int64_t cols = a.seg[0].w.cols;
    const size_t sb = mvrf_row_bytes<P>(cols);
    const int nrows = a.nrows;
    for (int j = 0; j < nrows; j++) {
        mu_cu_act x;
        x.x = a.act.x ? a.act.x + j * a.ldx : NULL;
        x.q = a.act.q ? a.act.q + j * a.ldx : NULL;
        x.ds = a.act.ds ? a.act.ds + j * (a.ldx / 8) : NULL;
        P::template stage_act<IN>(x, cols, sm + j * sb);
        __syncthreads(); /* (row j's scratch is row j + 1's region) */
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t total = 0;
    for (int s = 0; s < a.nseg; s++) total += a.seg[s].w.rows;
    const mu_cu_act none = {NULL, NULL, NULL};
    for (int64_t r = (int64_t)blockIdx.x * MVRF_WARPS + warp; r < total; r += (int64_t)gridDim.x * MVRF_WARPS) {
        int s = 0;
        int64_t row = r;
        while (row >= a.seg[s].w.rows) row -= a.seg[s++].w.rows;
        const mu_cu_weight &w = a.seg[s].w;
        const int n_items = P::items(w);
        float acc[NR];
#pragma unroll
        for (int j = 0; j < NR; j++) acc[j] = 0.f;
        for (int i0 = 0; i0 < n_items; i0 += P::PER_BATCH) {
            typename P::Regs R;
            P::load(R, w, row, i0, min(i0 + P::PER_BATCH, n_items));
#pragma unroll
            for (int j = 0; j < NR; j++)
                if (j < nrows) acc[j] += P::dot_fast(R, w, row, none, sm + j * sb);
        }
#pragma unroll
        for (int j = 0; j < NR; j++)
            if (j < nrows) {
                const float v = warp_sum(acc[j]);
                if (lane == 0) a.seg[s].y[j * a.seg[s].ldy + row] = v;
            }
    }
}

/* Launches of up to `per` rows (as many as one block's shared memory holds),
 * the rows dealt evenly over the launches. */
template <class P, int IN, int NR>
static cudaError_t mvrf_go(const mu_cu_mvr &c, int sms, int optin, int64_t total, size_t smem, const mu_cu_exec *ex) {
    auto kernel = mvrf_kernel<P, IN, NR>;
    static bool opted[MU_CU_MAX_DEVICES];
    int dev = 0;
    cudaError_t e = current_device(&dev);
    if (e != cudaSuccess) return e;
    if (!opted[dev]) {
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
        if (e != cudaSuccess) return e;
        opted[dev] = true;
    }
    static size_t asked[MU_CU_MAX_DEVICES];
    static int fits[MU_CU_MAX_DEVICES];
    if (asked[dev] != smem + 1) { /* blocks an SM holds with this launch's shared memory */
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fits[dev], kernel, MVRF_WARPS * 32, smem);
        if (e != cudaSuccess) return e;
        asked[dev] = smem + 1;
    }
    const int fit = fits[dev];
    int64_t blocks = (total + MVRF_WARPS - 1) / MVRF_WARPS;
    const int64_t most = (int64_t)sms * (fit > 1 ? fit : 1);
    if (blocks > most) blocks = most;
    return launch_pdl(kernel, dim3((unsigned)blocks), dim3(MVRF_WARPS * 32), smem, ex, c);
}

template <class P, int IN>
static cudaError_t mvrf_launch(const mu_cu_mvr *a, const mu_cu_exec *ex) {
    mu_cu_shape d;
    cudaError_t e = device_shape(&d);
    if (e != cudaSuccess) return e;
    const int sms = d.sms, optin = d.smem_block;
    const size_t sb = mvrf_row_bytes<P>(a->seg[0].w.cols), scratch = mvrf_scratch_bytes<P, IN>(a->seg[0].w.cols);
    int per = (size_t)optin > scratch ? (int)(((size_t)optin - scratch) / sb) : 0;
    if (per > MU_CU_MVRF_MAX) per = MU_CU_MVRF_MAX;
    if (per < 1) return cudaErrorInvalidValue;
    int64_t total = 0;
    for (int s = 0; s < a->nseg; s++) total += a->seg[s].w.rows;
    const int launches = (a->nrows + per - 1) / per;
    for (int k = 0, j0 = 0; k < launches; k++) {
        mu_cu_mvr c = *a;
        c.nrows = (a->nrows - j0) / (launches - k);
        if (c.act.x) c.act.x += j0 * a->ldx;
        if (c.act.q) c.act.q += j0 * a->ldx;
        if (c.act.ds) c.act.ds += j0 * (a->ldx / 8);
        for (int s = 0; s < c.nseg; s++) c.seg[s].y += j0 * c.seg[s].ldy;
        const size_t smem = sb * (size_t)c.nrows + scratch;
        e = c.nrows <= 2   ? mvrf_go<P, IN, 2>(c, sms, optin, total, smem, ex)
            : c.nrows <= 4 ? mvrf_go<P, IN, 4>(c, sms, optin, total, smem, ex)
            : c.nrows <= 8 ? mvrf_go<P, IN, 8>(c, sms, optin, total, smem, ex)
                           : mvrf_go<P, IN, MU_CU_MVRF_MAX>(c, sms, optin, total, smem, ex);
        if (e != cudaSuccess) return e;
        j0 += c.nrows;
    }
    return cudaSuccess;
}

template <class P>
static cudaError_t mvrf_input(const mu_cu_mvr *a, const mu_cu_exec *ex) {
    return a->act.q ? mvrf_launch<P, MV_IN_COPY>(a, ex) : mvrf_launch<P, MV_IN_QUANT>(a, ex);
}

/* the types with a fast B-row kernel (a switch in one place: _ok and the launch agree) */
template <class F>
static cudaError_t mvrf_by_type(uint32_t type, F &&f) {
    switch (type) {
    case MU_TYPE_Q4_K: return f(kq_type_tag<MU_TYPE_Q4_K>(), (PolKQ<MU_TYPE_Q4_K> *)0);
    case MU_TYPE_Q5_K: return f(kq_type_tag<MU_TYPE_Q5_K>(), (PolKQ<MU_TYPE_Q5_K> *)0);
    case MU_TYPE_Q6_K: return f(kq_type_tag<MU_TYPE_Q6_K>(), (PolKQ<MU_TYPE_Q6_K> *)0);
    case MU_TYPE_Q8_0: return f(kq_type_tag<MU_TYPE_Q8_0>(), (PolUnit<TQ80> *)0);
    case MU_TYPE_Q4_0: return f(kq_type_tag<MU_TYPE_Q4_0>(), (PolUnit<TQ40> *)0);
    case MU_TYPE_Q4_1: return f(kq_type_tag<MU_TYPE_Q4_1>(), (PolUnit<TIv<MU_TYPE_Q4_1>> *)0);
    case MU_TYPE_Q5_0: return f(kq_type_tag<MU_TYPE_Q5_0>(), (PolUnit<TIv<MU_TYPE_Q5_0>> *)0);
    case MU_TYPE_Q5_1: return f(kq_type_tag<MU_TYPE_Q5_1>(), (PolUnit<TIv<MU_TYPE_Q5_1>> *)0);
    case MU_TYPE_IQ4_NL: return f(kq_type_tag<MU_TYPE_IQ4_NL>(), (PolUnit<TIv<MU_TYPE_IQ4_NL>> *)0);
    case MU_TYPE_IQ4_XS: return f(kq_type_tag<MU_TYPE_IQ4_XS>(), (PolUnit<TIv<MU_TYPE_IQ4_XS>> *)0);
    case MU_TYPE_Q2_K: return f(kq_type_tag<MU_TYPE_Q2_K>(), (PolUnit<TIv<MU_TYPE_Q2_K>> *)0);
    case MU_TYPE_Q3_K: return f(kq_type_tag<MU_TYPE_Q3_K>(), (PolUnit<TIv<MU_TYPE_Q3_K>> *)0);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" int mu_cu_matvec_rows_fast_ok(uint32_t type, int64_t cols, int quant_input) {
    mu_cu_shape d;
    if (device_shape(&d) != cudaSuccess) return 0;
    const int optin = d.smem_block;
    return mvrf_by_type(type, [&](auto, auto *pol) -> cudaError_t {
               typedef std::remove_pointer_t<decltype(pol)> P;
               const size_t need = mvrf_row_bytes<P>(cols) +
                                   (quant_input ? mvrf_scratch_bytes<P, MV_IN_QUANT>(cols) : 0);
               return need <= (size_t)optin ? cudaSuccess : cudaErrorInvalidValue;
           }) == cudaSuccess;
}

extern "C" cudaError_t mu_cu_matvec_rows_fast(const mu_cu_mvr *a, const mu_cu_exec *ex) {
    if (a->nseg < 1 || a->nseg > MU_CU_MAX_SEG || a->nrows < 1) return cudaErrorInvalidValue;
    for (int s = 1; s < a->nseg; s++)
        if (a->seg[s].w.type != a->seg[0].w.type || a->seg[s].w.cols != a->seg[0].w.cols) return cudaErrorInvalidValue;
    return mvrf_by_type(a->seg[0].w.type, [&](auto, auto *pol) -> cudaError_t {
        return mvrf_input<std::remove_pointer_t<decltype(pol)>>(a, ex);
    });
}
