/* cu_tc_rows.cuh — the tensor-core batch's (cu_mmf.cu) work: the row
 * space's groups of 16 rows, W to a block ("group-blocks"), times the spans
 * of K. Unit u = gb x NS + q is span q of group-block gb. The grid is what
 * the SMs hold at once (one wave: no tail of a few blocks), and block b
 * takes the contiguous units [b U / P, (b + 1) U / P): every block streams
 * about the same bytes whatever the matrices' shapes. A group-block whose
 * spans fall in several blocks' ranges is a piece in each; the block that
 * finishes its piece last adds them in range order (deterministic) and
 * writes the rows.
 */
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

/* The first unit of block b's range (of P blocks over U units). */
__device__ __forceinline__ int64_t tc_first(int64_t b, int64_t P, int64_t U) { return b * U / P; }

/* The block whose range holds unit u. */
__device__ __forceinline__ int64_t tc_block_of(int64_t u, int64_t P, int64_t U) { return ((u + 1) * P - 1) / U; }

/* Floats of piece room a launch of P x tiles blocks takes: two pieces a
 * block (the group-blocks its range starts and ends in) of W warps x nt
 * tiles x 32 lanes x 4. */
static inline int64_t tc_piece_floats(int64_t P, int64_t tiles, int warps, int nt) {
    return P * 2 * tiles * warps * nt * 128;
}

/* One launch of kernel(a, groups, pieces) over the row space: `warps`
 * warps a block (smem bytes of dynamic shared memory), blocks_per_sm of
 * them an SM, grid.y tiles of 8 nt tokens. With a->part (and counters),
 * grid.x is the blocks the SMs hold at once over grid.y, fewer where the
 * units, the piece room or the counters are fewer; without, a block per
 * group-block (pieces false). */
template <class Kernel>
static cudaError_t tc_launch(Kernel kernel, const mu_cu_mvr *a, const mu_cu_exec *x, int warps, int nt, int64_t spans,
                             int blocks_per_sm, size_t smem) {
    int64_t groups = 0;
    for (int s = 0; s < a->nseg; s++) groups += (a->seg[s].w.rows + 15) / 16;
    const int64_t tiles = (a->nrows + 8 * nt - 1) / (8 * nt);
    const int64_t gbs = (groups + warps - 1) / warps, units = gbs * spans;
    if (units >= INT32_MAX / 2) return cudaErrorInvalidValue;
    int64_t P = gbs;
    bool pieces = false;
    mu_cu_shape d;
    if (a->part && a->counters && groups * tiles <= a->counter_cap && device_shape(&d) == cudaSuccess) {
        P = (int64_t)d.sms * blocks_per_sm / tiles;
        if (P < 1) P = 1;
        if (P > units) P = units;
        const int64_t room = a->part_cap / tc_piece_floats(1, tiles, warps, nt);
        if (P > room) P = room;
        pieces = P >= 1;
        if (!pieces) P = gbs;
    }
    const dim3 grid((unsigned)P, (unsigned)tiles, 1);
    return launch_pdl(kernel, grid, dim3(warps * 32), smem, x, *a, (int)groups, pieces);
}

#endif
