/* cu_tc_rows.cuh — the tensor-core batch's (cu_mmf.cu) row space: segments
 * cut into groups of 16 rows, K split over grid.z where the grid is small,
 * and the second launch that adds the splits' partial sums in order
 * (deterministic). */
#ifndef MU_CU_TC_ROWS_CUH
#define MU_CU_TC_ROWS_CUH

#include "cuda/cu_matvec_policy.cuh"

/* The segment and first row of row group g (16 rows of one segment): the
 * segments' groups follow each other (ceil(rows / 16) each). */
__device__ __forceinline__ int tc_locate(const mu_cu_mvr &a, int64_t g, int64_t &r0) {
    int s = 0;
    for (; s + 1 < a.nseg; s++) {
        const int64_t n = (a.seg[s].w.rows + 15) >> 4;
        if (g < n) break;
        g -= n;
    }
    r0 = g << 4;
    return s;
}

/* The first row of segment s in the row space (the partials' layout). */
__device__ __forceinline__ int64_t tc_seg_first(const mu_cu_mvr &a, int s) {
    int64_t r = 0;
    for (int i = 0; i < s; i++) r += a.seg[i].w.rows;
    return r;
}

/* Units [u0, u1) of split z of S over n units (the first n % S one longer). */
__device__ __forceinline__ void tc_split(int n, int S, int z, int &u0, int &u1) {
    const int q = n / S, r = n % S;
    u0 = z * q + min(z, r);
    u1 = u0 + q + (z < r ? 1 : 0);
}

/* y of every segment = the splits' partials [splits][T][total] added in order */
static __global__ void tc_reduce_kernel(const __grid_constant__ mu_cu_mvr a, const float *part, int64_t total, int splits) {
    pdl_trigger();
    pdl_wait();
    const int64_t n = (int64_t)a.nrows * total;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / total;
        int64_t r = i - t * total;
        int s = 0;
        while (s + 1 < a.nseg && r >= a.seg[s].w.rows) r -= a.seg[s].w.rows, s++;
        float v = part[i];
        for (int z = 1; z < splits; z++) v += part[(int64_t)z * n + i];
        a.seg[s].y[t * a.seg[s].ldy + r] = v;
    }
}

static cudaError_t tc_reduce(const mu_cu_mvr *a, int64_t total, int splits, const mu_cu_exec *x) {
    const int64_t n = (int64_t)a->nrows * total;
    return launch_pdl(tc_reduce_kernel, dim3((unsigned)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096)), dim3(256), 0,
                      x, *a, (const float *)a->part, total, splits);
}

static int tc_sms() { /* (0 where the device cannot be read: no split) */
    mu_cu_shape d;
    return device_shape(&d) == cudaSuccess ? d.sms : 0;
}

/* Splits of K: enough warps for warps_per_sm on every SM (groups x tiles
 * warps without a split), at most max_units, within the partials' room
 * (a->part_cap floats); 1 without a->part. */
static int tc_splits(const mu_cu_mvr *a, int64_t groups, int64_t tiles, int64_t total, int64_t max_units,
                     int warps_per_sm) {
    if (!a->part) return 1;
    const int64_t want = (int64_t)tc_sms() * warps_per_sm;
    int64_t S = (want + groups * tiles - 1) / (groups * tiles);
    if (S > max_units) S = max_units;
    const int64_t room = a->part_cap / ((int64_t)a->nrows * total);
    if (S > room) S = room;
    return S > 1 ? (int)S : 1;
}

/* One launch of kernel(a, groups, splits, part, total) over the row
 * space: `warps` warps a block (smem bytes of dynamic shared memory), a
 * warp per 16-row group, grid.y tiles of 8 nt tokens, K split over grid.z
 * (at most max_units splits, enough warps for warps_per_sm), then the
 * in-order sum of the splits. */
template <class Kernel>
static cudaError_t tc_launch(Kernel kernel, const mu_cu_mvr *a, const mu_cu_exec *x, int warps, int nt,
                             int64_t max_units, int warps_per_sm, size_t smem) {
    int64_t groups = 0, total = 0;
    for (int s = 0; s < a->nseg; s++) groups += (a->seg[s].w.rows + 15) / 16, total += a->seg[s].w.rows;
    const int64_t tiles = (a->nrows + 8 * nt - 1) / (8 * nt);
    const int S = tc_splits(a, groups, tiles, total, max_units, warps_per_sm);
    const dim3 grid((unsigned)((groups + warps - 1) / warps), (unsigned)tiles, (unsigned)S);
    const cudaError_t e = launch_pdl(kernel, grid, dim3(warps * 32), smem, x, *a, groups, S, a->part, total);
    if (e != cudaSuccess || S == 1) return e;
    return tc_reduce(a, total, S, x);
}

#endif
