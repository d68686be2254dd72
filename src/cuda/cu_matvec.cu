/* cu_matvec.cu — the matvec kernel and its launcher.
 *
 * A grid of warps over a stream of row-dots (cu_matvec_walk.cuh); a
 * row-dot is streamed in batches of 16-byte weight loads, format-
 * specialized (cu_matvec_policy.cuh); the fast lane's int8 input is staged
 * once per block in shared memory (cu_matvec_stage.cuh). Several matrices
 * over the same input (q, k, v, gate) form one row space and one launch;
 * the epilogues fuse SwiGLU (gate/up), the residual/norm tail (Wo, down)
 * and logit scale + soft-cap + the device-side token choice (LM head).
 *
 * The kernel's template parameters are few and named: the weight family
 * P, the lane, the epilogue, the input form (MvInput) and the walk
 * (MvWalk). The launcher (mu_cu_matvec) checks the request, plans the
 * launch (row parts, packing, cut ranges, paired staging) and picks the
 * instance.
 */
#include <string.h>

#include "cuda/cu_matvec_walk.cuh"

template <class P, int LANE, int EPI, int IN, int WALK>
__global__ void __launch_bounds__(mv_warps<LANE>() * 32, 1) mv_kernel(const __grid_constant__ MvLaunch a) {
    constexpr int NW = mv_warps<LANE>();
    pdl_trigger();
    if (a.pair) cluster_arrive_relaxed(); /* (the staging waits on it before its first store to the peer) */
    extern __shared__ __align__(16) uint8_t mv_smem[]; /* the staged input (fast lane) */
    MvWalkOf<P, LANE, EPI, WALK> walk;
    walk.begin(a, NW);
    if constexpr (IN == MV_IN_NORM && LANE == MU_CU_LANE_FAST) {
        /* the norm weights (immutable) toward L1, a line per thread: the
         * staging's __ldg then hits L1, not L2 (+0.9% a token) */
        const int lines = (int)(a.r.seg[0].w.cols * 4 / 128);
        for (int i = threadIdx.x; i < lines; i += blockDim.x) {
            if (a.r.nin.w_post) prefetch_l1(a.r.nin.w_post + 32 * i);
            if (a.r.nin.w_next) prefetch_l1(a.r.nin.w_next + 32 * i);
        }
    }
    pdl_wait(); /* the weights above are immutable; activations come after */
    if constexpr (EPI == MU_CU_EPI_RESNORM) {
        /* what the tail reads from DRAM (h, the norm weights) into L2 now,
         * so the tail's one round of loads hits L2 */
        if (blockIdx.x == 0 && threadIdx.x == 0) {
            prefetch_l2_range(a.r.rn.h, (uint64_t)a.r.rn.n * 4);
            if (a.r.rn.w_post) prefetch_l2_range(a.r.rn.w_post, (uint64_t)a.r.rn.n * 4);
            if (a.r.rn.w_next) prefetch_l2_range(a.r.rn.w_next, (uint64_t)a.r.rn.n * 4);
        }
    }
    if constexpr (LANE == MU_CU_LANE_FAST) {
        P::template stage<IN>(a.r, mv_smem, a.pair);
        __syncthreads();
    }
    MvEpi<EPI, NW> epi;
    walk.run(a, mv_smem, epi);
    epi.finish(a);
}

/* ---- planning ------------------------------------------------------------------------------ */

static bool is_kquant(uint32_t t) { return t == MU_TYPE_Q4_K || t == MU_TYPE_Q5_K || t == MU_TYPE_Q6_K; }

extern "C" int mu_cu_mv_parts(uint32_t type, int64_t cols) {
    /* K-quants: parts of two batches (32 blocks: the tiles' groups, cu_kq.cuh),
     * the last one shorter; unit formats: equal parts of at most 256 units */
    if (is_kquant(type)) {
        const int64_t items = cols / 256;
        return items <= 32 ? 1 : (int)((items + 31) / 32 < 8 ? (items + 31) / 32 : 8);
    }
    const int64_t items = mu_cu_units(type, cols);
    if (items <= 256) return 1;
    for (int p = 2; p <= 8; p++)
        if (items % p == 0 && items / p <= 256) return p;
    return 1;
}

extern "C" int mu_cu_mv_batch_parts(const mu_cu_mv *a) {
    if (a->epi != MU_CU_EPI_STORE || a->lane != MU_CU_LANE_FAST || a->nseg < 1 || a->split_parts) return 1;
    int64_t rows = 0;
    for (int i = 0; i < a->nseg; i++) {
        if (!is_kquant(a->seg[i].w.type) || a->seg[i].w.cols != a->seg[0].w.cols) return 1;
        rows += a->seg[i].w.rows;
    }
    const int64_t batches = (a->seg[0].w.cols / 256 + 15) / 16; /* per whole row */
    if (batches < 2 || batches > MU_CU_BATCH_PARTS_MAX) return 1;
    int dev = 0, sms = 0;
    if (current_device(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1)
        return 1;
    const int64_t warps = (int64_t)sms * mv_warps<MU_CU_LANE_FAST>(); /* one block per SM */
    /* a quarter fewer rounds at least: measured (same call, depth 0) on one
     * H200, qkv + gate 6 -> 5 rounds (only the last round's 256 warps gain)
     * -0.5%; on a rank of two, 4 -> 3 rounds (every warp) +2.0% */
    const int64_t whole = (rows + warps - 1) / warps * batches, split = (rows * batches + warps - 1) / warps;
    return 4 * split <= 3 * whole ? (int)batches : 1;
}

/* What the launcher needs to know of a request's matrices. */
struct MvShape {
    int64_t rows, cols; /* all rows; every segment's columns */
    bool same_cols;     /* every segment has cols columns     */
    bool all_k;         /* every segment a K-quant            */
    bool one_type;      /* every segment of seg[0]'s type     */
};

static MvShape mv_shape(const mu_cu_mv &a) {
    MvShape s = {0, a.seg[0].w.cols, true, true, true};
    for (int i = 0; i < a.nseg; i++) {
        s.rows += a.seg[i].w.rows;
        s.same_cols = s.same_cols && a.seg[i].w.cols == s.cols;
        s.all_k = s.all_k && is_kquant(a.seg[i].w.type);
        s.one_type = s.one_type && a.seg[i].w.type == a.seg[0].w.type;
    }
    return s;
}

/* Whether the kernels can run a request (one family of weights: formats
 * of different families are split into a launch per matrix first). Fails
 * closed: a launch that is not one of these is refused, never guessed. */
static bool mv_request_ok(const mu_cu_mv &a, const MvShape &s) {
    const bool fast = a.lane == MU_CU_LANE_FAST;
    const int64_t nb = s.cols / 256; /* K-quant blocks a row */
    const bool segments_ok = a.nseg >= 1 && a.nseg <= MU_CU_MAX_SEG && s.same_cols;
    /* norm-in staging: the fast lane's K-quant stagings form it */
    const bool norm_in_ok = !a.nin.h || (fast && s.all_k && !a.quant_input && a.epi != MU_CU_EPI_RESNORM);
    /* quantized while staged: the fast lane's STORE and RESNORM (ffn down) */
    const bool quant_ok = !a.quant_input || !fast || a.epi == MU_CU_EPI_STORE || a.epi == MU_CU_EPI_RESNORM;
    /* row-dots in parts of one batch: the fast lane's K-quant STORE, every part a batch at most */
    const bool batch_parts_ok = a.batch_parts <= 1 || (a.epi == MU_CU_EPI_STORE && fast && s.all_k && !a.split_parts &&
                                                       a.batch_parts <= MU_CU_BATCH_PARTS_MAX &&
                                                       (int64_t)a.batch_parts * 16 >= nb);
    /* the ranks meet in a RESNORM tail that sums one part per rank */
    const bool xrank_ok = a.rn.xr.n <= 1 || (a.epi == MU_CU_EPI_RESNORM && a.rn.branch_parts == a.rn.xr.n);
    /* K-quants of mixed types in the fast lane switch per batch: STORE, or packed short rows */
    const bool mixed_ok = s.one_type || !fast || a.epi == MU_CU_EPI_STORE || a.epi == MU_CU_EPI_RESNORM;
    return segments_ok && norm_in_ok && quant_ok && batch_parts_ok && xrank_ok && mixed_ok;
}

/* Shared memory of a launch: the staged input (fast lane). */
static size_t stage_bytes(const mu_cu_mv &a, bool kq) {
    if (a.lane != MU_CU_LANE_FAST) return 0;
    const int64_t cols = a.seg[0].w.cols;
    if (kq) /* + the groups' scales when quantizing or forming it, + the summed branch (then h') when forming it */
        return (size_t)(cols / 256) * (KQ_XQ + KQ_AUX) + (a.quant_input || a.nin.h ? (size_t)(cols / 16) * 8 : 0) +
               (a.nin.h ? (size_t)cols * 4 : 0);
    return (size_t)((cols + 15) & ~15) + (size_t)cols / 2;
}

/* Cut ranges run one block per SM (the grid cap applies). */
static int64_t cut_blocks(int sms, const mu_cu_exec *x) {
    return x->mv_grid_cap > 0 && x->mv_grid_cap < sms ? x->mv_grid_cap : sms;
}

/* Cut ranges (MV_WALK_CUT) for a STORE launch of K-quant rows on `blocks`
 * blocks of nw warps: the blocks spread over the segments in proportion to
 * their bytes (cumulative rounding). False where they cannot run (rows
 * under a batch, a segment without a block or with fewer than nw rows a
 * block: a warp's range shorter than a row) or, unless forced, where a
 * warp would not stream fewer batches than with whole rows on as many
 * warps (measured: qkv + gate of the 30B, +1.9% a token). */
static bool cut_plan(MvLaunch *a, const mu_cu_exec *x, int nw, int64_t blocks, int per_batch) {
    const mu_cu_mv &r = a->r;
    if (x->mv_cut == MU_CU_ROUTE_NEVER || a->parts > 1 || a->pack > 1 || blocks < r.nseg) return false;
    const int64_t nb = r.seg[0].w.cols / 256;
    if (nb < per_batch) return false;
    int64_t bytes[MU_CU_MAX_SEG], total = 0;
    for (int i = 0; i < r.nseg; i++) {
        const uint32_t t = r.seg[i].w.type;
        if (!is_kquant(t)) return false;
        bytes[i] = r.seg[i].w.rows * (int64_t)mu_row_bytes(t, r.seg[i].w.cols), total += bytes[i];
    }
    int64_t cum = 0, most = 0;
    a->cut_b0[0] = 0;
    for (int i = 0; i < r.nseg; i++) {
        cum += bytes[i];
        a->cut_b0[i + 1] = (int)((cum * blocks + total / 2) / total);
        const int64_t nbk = a->cut_b0[i + 1] - a->cut_b0[i], rows = r.seg[i].w.rows;
        if (nbk < 1 || rows / nbk < nw) return false;
        const int64_t range = ((rows + nbk - 1) / nbk * nb + nw - 1) / nw; /* the longest range */
        most = max(most, (range + per_batch - 1) / per_batch);
    }
    const int64_t w = blocks * nw, whole = (a->rows_total + w - 1) / w * ((nb + per_batch - 1) / per_batch);
    return most < whole || x->mv_cut == MU_CU_ROUTE_ALWAYS;
}

/* Flat gate/up (MV_WALK_FLAT) over cap_w warps: where a row has a batch or
 * more, a warp's range fits its gate sums, and (unless forced) the most
 * batches a warp streams drop by an eighth at least. Measured: a rank of
 * two, 3 pairs of 26-block rows per warp, 12 -> 10 batches, +2.2% a token;
 * one H200, 5 pairs, 20 -> 18, equal (the per-lane row bookkeeping costs
 * about what a tenth of the batches saves). */
static bool flat_pays(const mu_cu_mv &r, const mu_cu_exec *x, int64_t cap_w, int per_batch) {
    if (x->mv_flat == MU_CU_ROUTE_NEVER) return false;
    const int64_t rows = r.seg[0].w.rows, nb = r.seg[0].w.cols / 256;
    const int64_t range = (rows + cap_w - 1) / cap_w, per_row = (nb + per_batch - 1) / per_batch;
    const int64_t flat = 2 * ((range * nb + per_batch - 1) / per_batch), whole = 2 * range * per_row;
    return nb >= per_batch && range <= MV_FLAT_ROWS && (x->mv_flat == MU_CU_ROUTE_ALWAYS || 8 * flat <= 7 * whole);
}

/* ---- launching ----------------------------------------------------------------------------- */

/* The current device's SM count and how many blocks of the kernel fit an SM
 * with smem bytes of dynamic shared memory (cached per device and kernel;
 * the first use lets the kernel take all the shared memory its static use
 * leaves). */
template <class P, int LANE, int EPI, int IN, int WALK>
static cudaError_t mv_fit(size_t smem, int *dev_out, int *sms_out, int *fit_out) {
    constexpr int NW = mv_warps<LANE>();
    auto kernel = mv_kernel<P, LANE, EPI, IN, WALK>;
    static int sms[MU_CU_MAX_DEVICES], fit[MU_CU_MAX_DEVICES];
    static size_t fit_smem[MU_CU_MAX_DEVICES];
    int dev = 0;
    cudaError_t e = current_device(&dev);
    if (e != cudaSuccess) return e;
    if (!sms[dev]) {
        int optin = 0;
        cudaFuncAttributes fa;
        e = cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, kernel);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - (int)fa.sharedSizeBytes);
        if (e != cudaSuccess) {
            sms[dev] = 0;
            return e;
        }
        fit_smem[dev] = (size_t)-1;
    }
    if (smem != fit_smem[dev]) {
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit[dev], kernel, NW * 32, smem);
        if (e != cudaSuccess) return e;
        if (fit[dev] < 1) return cudaErrorInvalidConfiguration; /* does not fit an SM */
        fit_smem[dev] = smem;
    }
    *dev_out = dev, *sms_out = sms[dev], *fit_out = fit[dev];
    return cudaSuccess;
}

/* A launch on `blocks` blocks. Paired staging (clusters of two blocks, each
 * quantizing half of the input into both) where the launch quantizes a
 * K-quant input (down: 80 KB of f32 a block, read by every block), the grid
 * is even, clusters can be launched (x->clusters: Hopper's) and every pair
 * fits the GPU at once (measured +1.1% a token; the
 * norm-in stagings paired the same way lost: their cluster barriers cost
 * more than half of their reads). */
template <class P, int LANE, int EPI, int IN, int WALK>
static cudaError_t mv_launch_grid(MvLaunch &a, int64_t blocks, size_t smem, int dev, const mu_cu_exec *x) {
    constexpr int NW = mv_warps<LANE>();
    auto kernel = mv_kernel<P, LANE, EPI, IN, WALK>;
    a.pair = 0;
    if constexpr (LANE == MU_CU_LANE_FAST && P::NORM_IN && IN == MV_IN_QUANT) {
        if (x->mv_pair && x->clusters && blocks % 2 == 0) {
            if (x->pair_counts) x->pair_counts[0]++;
            static int ok[MU_CU_MAX_DEVICES];
            static int64_t ok_blocks[MU_CU_MAX_DEVICES];
            static size_t ok_smem[MU_CU_MAX_DEVICES];
            if (ok_blocks[dev] != blocks || ok_smem[dev] != smem) {
                cudaLaunchConfig_t cfg = {};
                cfg.gridDim = dim3((unsigned)blocks);
                cfg.blockDim = dim3(NW * 32);
                cfg.dynamicSmemBytes = smem;
                cudaLaunchAttribute at;
                at.id = cudaLaunchAttributeClusterDimension;
                at.val.clusterDim.x = 2, at.val.clusterDim.y = 1, at.val.clusterDim.z = 1;
                cfg.attrs = &at;
                cfg.numAttrs = 1;
                int n = 0;
                if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) (void)cudaGetLastError(), n = 0;
                ok[dev] = 2 * (int64_t)n >= blocks;
                ok_blocks[dev] = blocks, ok_smem[dev] = smem;
            }
            if (ok[dev]) {
                a.pair = 1;
                if (x->pair_counts) x->pair_counts[1]++;
                return launch_pdl_cluster(kernel, dim3((unsigned)blocks), dim3(NW * 32), smem, x, 2, a);
            }
        }
    }
    return launch_pdl(kernel, dim3((unsigned)blocks), dim3(NW * 32), smem, x, a);
}

/* A launch of one walk: its grid (flat ranges over every warp that fits,
 * cut ranges a block per SM, else as many warps as fit or as few as keep
 * the same number of rounds). */
template <class P, int LANE, int EPI, int IN, int WALK>
static cudaError_t mv_launch_walk(MvLaunch &a, int64_t jobs, size_t smem, const mu_cu_exec *x) {
    constexpr int NW = mv_warps<LANE>();
    int dev = 0, sms = 0, fit = 0;
    const cudaError_t e = mv_fit<P, LANE, EPI, IN, WALK>(smem, &dev, &sms, &fit);
    if (e != cudaSuccess) return e;
    if constexpr (WALK == MV_WALK_CUT) return mv_launch_grid<P, LANE, EPI, IN, WALK>(a, cut_blocks(sms, x), smem, dev, x);
    const int per_sm = x->mv_blocks_per_sm > 0 && x->mv_blocks_per_sm < fit ? x->mv_blocks_per_sm : fit;
    /* as many warps as fit (measured +1.5-1.8% a token: more bytes in
     * flight in the full rounds), or as few as keep the same number of
     * rounds, every warp with as many row-dots (tensor-parallel ranks:
     * measured 3.5% faster at depth 2048, equal at 0) */
    const int64_t max_w = (int64_t)sms * per_sm * NW;
    const int64_t cap_w = x->mv_grid_cap > 0 && max_w > (int64_t)x->mv_grid_cap * NW ? (int64_t)x->mv_grid_cap * NW : max_w;
    if constexpr (WALK == MV_WALK_FLAT) return mv_launch_grid<P, LANE, EPI, IN, WALK>(a, cap_w / NW, smem, dev, x);
    const int64_t rounds = (jobs + max_w - 1) / max_w;
    const int64_t warps = a.r.even_rounds ? (jobs + rounds - 1) / rounds : (jobs < max_w ? jobs : max_w);
    int64_t blocks = (warps + NW - 1) / NW;
    if (x->mv_grid_cap > 0 && blocks > x->mv_grid_cap) blocks = x->mv_grid_cap;
    if (blocks < 1) blocks = 1;
    return mv_launch_grid<P, LANE, EPI, IN, WALK>(a, blocks, smem, dev, x);
}

/* The walk: packed short rows, flat gate/up or cut ranges where they run
 * and pay, else whole rows. */
template <class P, int LANE, int EPI, int IN>
static cudaError_t mv_launch(MvLaunch &a, int64_t jobs, size_t smem, const mu_cu_exec *x) {
    constexpr int NW = mv_warps<LANE>();
    if constexpr (P::PACK_OK && (EPI == MU_CU_EPI_STORE || EPI == MU_CU_EPI_RESNORM))
        if (a.pack > 1) return mv_launch_walk<P, LANE, EPI, IN, MV_WALK_PACKED>(a, jobs, smem, x);
    if constexpr (P::FLAT_OK && LANE == MU_CU_LANE_FAST && EPI == MU_CU_EPI_GATEUP) {
        int dev = 0, sms = 0, fit = 0;
        const cudaError_t e = mv_fit<P, LANE, EPI, IN, MV_WALK_ROWS>(smem, &dev, &sms, &fit);
        if (e != cudaSuccess) return e;
        const int per_sm = x->mv_blocks_per_sm > 0 && x->mv_blocks_per_sm < fit ? x->mv_blocks_per_sm : fit;
        const int64_t max_w = (int64_t)sms * per_sm * NW;
        const int64_t cap_w =
            x->mv_grid_cap > 0 && max_w > (int64_t)x->mv_grid_cap * NW ? (int64_t)x->mv_grid_cap * NW : max_w;
        if (flat_pays(a.r, x, cap_w, P::PER_BATCH)) return mv_launch_walk<P, LANE, EPI, IN, MV_WALK_FLAT>(a, jobs, smem, x);
    }
    if constexpr (P::CUT_OK && LANE == MU_CU_LANE_FAST && EPI == MU_CU_EPI_STORE) {
        /* qkv + gate (one GPU), down's rank part; Wo's rows are one batch
         * (nothing to gain: whole rows stay) */
        int dev = 0, sms = 0;
        if (current_device(&dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
            cut_plan(&a, x, NW, cut_blocks(sms, x), P::PER_BATCH))
            return mv_launch_walk<P, LANE, EPI, IN, MV_WALK_CUT>(a, jobs, smem, x);
    }
    return mv_launch_walk<P, LANE, EPI, IN, MV_WALK_ROWS>(a, jobs, smem, x);
}

/* Mixed K-quant types in the fast lane (PolKQ<0>, switching type per
 * batch): STORE, and packed short rows for RESNORM. */
template <class P>
static cudaError_t mv_dispatch_mixed(MvLaunch &a, int64_t jobs, size_t smem, const mu_cu_exec *x) {
    constexpr int F = MU_CU_LANE_FAST;
    if (a.r.epi == MU_CU_EPI_RESNORM) {
        if (a.pack <= 1) return cudaErrorInvalidValue;
        if (a.r.quant_input) return mv_launch_walk<P, F, MU_CU_EPI_RESNORM, MV_IN_QUANT, MV_WALK_PACKED>(a, jobs, smem, x);
        return mv_launch_walk<P, F, MU_CU_EPI_RESNORM, MV_IN_COPY, MV_WALK_PACKED>(a, jobs, smem, x);
    }
    if (a.r.epi != MU_CU_EPI_STORE) return cudaErrorInvalidValue;
    if (a.r.nin.h) return mv_launch<P, F, MU_CU_EPI_STORE, MV_IN_NORM>(a, jobs, smem, x);
    if (a.r.quant_input) return mv_launch<P, F, MU_CU_EPI_STORE, MV_IN_QUANT>(a, jobs, smem, x);
    return mv_launch<P, F, MU_CU_EPI_STORE, MV_IN_COPY>(a, jobs, smem, x);
}

/* The input form and the epilogue as template parameters. */
template <class P, int LANE>
static cudaError_t mv_dispatch(MvLaunch &a, int64_t jobs, size_t smem, const mu_cu_exec *x) {
    const int epi = a.r.epi;
    if constexpr (LANE == MU_CU_LANE_FAST) {
        if (a.r.nin.h) { /* the consumers of a residual/norm boundary: gate/up, qkv, the LM head */
            if constexpr (P::NORM_IN) {
                if (epi == MU_CU_EPI_STORE) return mv_launch<P, LANE, MU_CU_EPI_STORE, MV_IN_NORM>(a, jobs, smem, x);
                if (epi == MU_CU_EPI_GATEUP) return mv_launch<P, LANE, MU_CU_EPI_GATEUP, MV_IN_NORM>(a, jobs, smem, x);
                if (epi == MU_CU_EPI_LOGITS) return mv_launch<P, LANE, MU_CU_EPI_LOGITS, MV_IN_NORM>(a, jobs, smem, x);
            }
            return cudaErrorInvalidValue;
        }
        if (a.r.quant_input) { /* the consumers of gate/up: down (tail or a rank's store) */
            if (epi == MU_CU_EPI_RESNORM) return mv_launch<P, LANE, MU_CU_EPI_RESNORM, MV_IN_QUANT>(a, jobs, smem, x);
            if (epi == MU_CU_EPI_STORE) return mv_launch<P, LANE, MU_CU_EPI_STORE, MV_IN_QUANT>(a, jobs, smem, x);
            return cudaErrorInvalidValue;
        }
    }
    switch (epi) {
    case MU_CU_EPI_GATEUP: return mv_launch<P, LANE, MU_CU_EPI_GATEUP, MV_IN_COPY>(a, jobs, smem, x);
    case MU_CU_EPI_RESNORM: return mv_launch<P, LANE, MU_CU_EPI_RESNORM, MV_IN_COPY>(a, jobs, smem, x);
    case MU_CU_EPI_LOGITS: return mv_launch<P, LANE, MU_CU_EPI_LOGITS, MV_IN_COPY>(a, jobs, smem, x);
    default: return mv_launch<P, LANE, MU_CU_EPI_STORE, MV_IN_COPY>(a, jobs, smem, x);
    }
}

template <class P>
static cudaError_t mv_dispatch_lane(MvLaunch &a, int64_t jobs, size_t smem, const mu_cu_exec *x) {
    if (a.r.lane == MU_CU_LANE_FAST) return mv_dispatch<P, MU_CU_LANE_FAST>(a, jobs, smem, x);
    return mv_dispatch<P, MU_CU_LANE_EXACT>(a, jobs, smem, x);
}

extern "C" cudaError_t mu_cu_matvec(const mu_cu_mv *in, const mu_cu_exec *x) {
    if (in->nseg < 1 || in->nseg > MU_CU_MAX_SEG) return cudaErrorInvalidValue;
    const MvShape s = mv_shape(*in);
    if (!s.all_k && !s.one_type) {
        /* formats of different families: one launch per matrix (STORE only) */
        if (in->epi != MU_CU_EPI_STORE || !s.same_cols) return cudaErrorInvalidValue;
        for (int i = 0; i < in->nseg; i++) {
            mu_cu_mv one = *in;
            one.seg[0] = in->seg[i];
            one.nseg = 1;
            const cudaError_t e = mu_cu_matvec(&one, x);
            if (e != cudaSuccess) return e;
        }
        return cudaSuccess;
    }
    if (!mv_request_ok(*in, s)) return cudaErrorInvalidValue;
    MvLaunch a;
    memset(&a, 0, sizeof a);
    a.r = *in;
    a.rows_total = s.rows;
    const uint32_t type = in->seg[0].w.type;
    /* row parts: batch parts as asked; a RESNORM (or split STORE) of one
     * matrix in parts that spread long rows over more warps; the ranks'
     * meeting sums one part per rank, whole rows */
    a.parts = 1;
    if (in->batch_parts > 1) {
        a.parts = in->batch_parts;
    } else if (in->rn.xr.n <= 1) {
        if ((in->epi == MU_CU_EPI_RESNORM || (in->epi == MU_CU_EPI_STORE && in->split_parts)) && in->nseg == 1)
            a.parts = mu_cu_mv_parts(type, s.cols);
        a.r.rn.branch_parts = a.parts;
    }
    int64_t jobs = in->epi == MU_CU_EPI_GATEUP ? in->seg[0].w.rows : s.rows * a.parts;
    /* K-quant row-dots of at most 8 blocks (a divisor of 16) share batches */
    const int64_t plen = s.all_k ? s.cols / 256 / a.parts : 0;
    a.pack = 1;
    if (s.all_k && (in->epi == MU_CU_EPI_STORE || in->epi == MU_CU_EPI_RESNORM) && plen <= 8 && 16 % plen == 0 &&
        !in->nin.h) {
        a.pack = (int)(16 / plen);
        jobs = (jobs + a.pack - 1) / a.pack;
    }
    const size_t smem = stage_bytes(*in, s.all_k);
    if (s.all_k) {
        /* the exact lane and mixed K-quant types switch type per batch */
        if (in->lane != MU_CU_LANE_FAST) return mv_dispatch<PolKQ<0>, MU_CU_LANE_EXACT>(a, jobs, smem, x);
        if (!s.one_type) return mv_dispatch_mixed<PolKQ<0>>(a, jobs, smem, x);
        switch (type) {
        case MU_TYPE_Q4_K: return mv_dispatch<PolKQ<MU_TYPE_Q4_K>, MU_CU_LANE_FAST>(a, jobs, smem, x);
        case MU_TYPE_Q5_K: return mv_dispatch<PolKQ<MU_TYPE_Q5_K>, MU_CU_LANE_FAST>(a, jobs, smem, x);
        default: return mv_dispatch<PolKQ<MU_TYPE_Q6_K>, MU_CU_LANE_FAST>(a, jobs, smem, x);
        }
    }
    switch (type) {
    case MU_TYPE_Q8_0: return mv_dispatch_lane<PolUnit<TQ80>>(a, jobs, smem, x);
    case MU_TYPE_Q4_0: return mv_dispatch_lane<PolUnit<TQ40>>(a, jobs, smem, x);
    case MU_TYPE_Q4_1: return mv_dispatch_lane<PolUnit<TIv<MU_TYPE_Q4_1>>>(a, jobs, smem, x);
    case MU_TYPE_Q5_0: return mv_dispatch_lane<PolUnit<TIv<MU_TYPE_Q5_0>>>(a, jobs, smem, x);
    case MU_TYPE_Q5_1: return mv_dispatch_lane<PolUnit<TIv<MU_TYPE_Q5_1>>>(a, jobs, smem, x);
    case MU_TYPE_IQ4_NL: return mv_dispatch_lane<PolUnit<TIv<MU_TYPE_IQ4_NL>>>(a, jobs, smem, x);
    case MU_TYPE_IQ4_XS: return mv_dispatch_lane<PolUnit<TIv<MU_TYPE_IQ4_XS>>>(a, jobs, smem, x);
    case MU_TYPE_Q2_K: return mv_dispatch_lane<PolUnit<TIv<MU_TYPE_Q2_K>>>(a, jobs, smem, x);
    case MU_TYPE_Q3_K: return mv_dispatch_lane<PolUnit<TIv<MU_TYPE_Q3_K>>>(a, jobs, smem, x);
    case MU_TYPE_F32: return mv_dispatch_lane<PolUnit<TFloat<0>>>(a, jobs, smem, x);
    case MU_TYPE_F16: return mv_dispatch_lane<PolUnit<TFloat<1>>>(a, jobs, smem, x);
    case MU_TYPE_BF16: return mv_dispatch_lane<PolUnit<TFloat<2>>>(a, jobs, smem, x);
    default: return cudaErrorInvalidValue;
    }
}
