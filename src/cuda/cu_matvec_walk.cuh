/* cu_matvec_walk.cuh — the matvec kernel's two halves: how a launch deals
 * its row-dots to warps (the walks) and what it does with each row's dot
 * (the epilogues). cu_matvec.cu assembles them into the kernel.
 *
 * Every walk issues a batch's 16-byte weight loads before any of its
 * arithmetic, and its first batch in begin(), which the kernel calls
 * before griddepcontrol.wait (weights are immutable), so a kernel launched
 * early (PDL) streams while its predecessor finishes. The next batch's
 * loads are in flight during a finished row-dot's warp sum.
 */
#ifndef MU_CU_MATVEC_WALK_CUH
#define MU_CU_MATVEC_WALK_CUH

#include "cuda/cu_matvec_policy.cuh"

/* The launch as the kernel receives it: the request and the launcher's plan. */
struct MvLaunch {
    mu_cu_mv r;
    int64_t rows_total;            /* rows of all segments                         */
    int parts;                     /* row-dots per row: whole rows split in parts
                                      (RESNORM, split_parts) or batch parts; 1: whole */
    int pack;                      /* MV_WALK_PACKED: row-dots per batch            */
    int pair;                      /* launched in clusters of two (paired staging)  */
    int cut_b0[MU_CU_MAX_SEG + 1]; /* MV_WALK_CUT: segment i's blocks are [cut_b0[i], cut_b0[i + 1]) */
};

enum MvWalk {
    MV_WALK_ROWS = 0,   /* warp g of W takes row-dots g, g + W, ... whole (or their parts) */
    MV_WALK_PACKED = 1, /* K-quant row-dots of at most 8 blocks, `pack` of them a batch
                           (STORE, RESNORM: a tensor-parallel rank's Wo) */
    MV_WALK_FLAT = 2,   /* gate/up, fast lane: a warp's range of row pairs in batches
                           that run across rows */
    MV_WALK_CUT = 3,    /* STORE of K-quant rows, fast lane: ranges cut inside rows */
};

/* Items (K-quant blocks, units) of part p of a row-dot: [p plen, min((p + 1)
 * plen, items)); K-quant parts are cut at the tiles' groups of 16 blocks,
 * the last one shorter. */
template <class P>
__device__ __forceinline__ int mv_part_len(int items, int parts) {
    return parts == 1 ? items : (items + parts - 1) / parts + P::PART_ALIGN - 1 & ~(P::PART_ALIGN - 1);
}

/* Row-dot r of the launch (r < rows_total x parts) -> (segment, row, part). */
__device__ __forceinline__ void mv_locate(const MvLaunch &a, int64_t r, int &seg, int64_t &row, int &part) {
    part = (int)(r / a.rows_total);
    r -= (int64_t)part * a.rows_total;
    seg = 0;
    while (r >= a.r.seg[seg].w.rows) r -= a.r.seg[seg].w.rows, seg++;
    row = r;
}

/* ---- epilogues ------------------------------------------------------------------------
 * row(): a complete row-dot's y (every lane holds it; lane 0 stores);
 * finish(): after the block's last row-dot. */
template <int EPI, int NW>
struct MvEpi;

/* y into its segment's output, part p at y + p x rows */
template <int NW>
struct MvEpi<MU_CU_EPI_STORE, NW> {
    __device__ void row(const MvLaunch &a, int seg, int64_t row, int part, float y) {
        if ((threadIdx.x & 31) == 0) a.r.seg[seg].y[row + (int64_t)part * a.r.seg[seg].w.rows] = y;
    }
    __device__ void finish(const MvLaunch &) {}
};

/* Orders this thread's earlier writes before a later counter update (and,
 * after reading the counter, later reads after it): a release/acquire
 * fence, all the counters need. */
__device__ __forceinline__ void fence_acq_rel() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

/* The ranks of a tensor-parallel step meet (one block of each): this
 * rank's writes, which its block has acquired from the other blocks, are
 * released to the system (one fence, then relaxed stores: the release
 * pattern); each rank's slot in every other rank's inbox is raised to the
 * new epoch; the block waits until every other rank's slot in its own
 * inbox has reached it (relaxed polls, one acquire fence after). The
 * peers' data is then read through the LSA mapping. epoch: this rank's
 * count before the meeting (thread 0 loaded it during the handshake). A
 * peer missing for 20 s (a failed launch on its GPU) traps: an error, not
 * a hang. */
static __device__ __noinline__ void xrank_meet(const mu_cu_xrank &x, uint32_t epoch) {
    if (threadIdx.x == 0) {
        const uint32_t e = epoch + 1u;
        *x.epoch = e;
        asm volatile("fence.acq_rel.sys;" ::: "memory");
        for (int p = 0; p < x.n; p++) {
            if (p == x.rank) continue;
            uint32_t *slot = x.inbox0 + (int64_t)p * x.stride + x.rank;
            asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(slot), "r"(e) : "memory");
        }
        uint64_t t0;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        for (int p = 0; p < x.n; p++) {
            if (p == x.rank) continue;
            const uint32_t *slot = x.inbox0 + (int64_t)x.rank * x.stride + p;
            for (;;) {
                uint32_t got;
                asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(got) : "l"(slot) : "memory");
                if ((int32_t)(got - e) >= 0) break;
                uint64_t t;
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
                if (t - t0 > 20000000000ull) __trap();
            }
        }
        asm volatile("fence.acq_rel.sys;" ::: "memory"); /* (thread 0's acquire covers the block via the barrier) */
    }
    __syncthreads();
}

/* As STORE; then the last block to finish runs the residual + norm tail
 * (after the ranks meet, tensor parallel). Only thread 0 synchronizes (the
 * grid barrier's pattern), by one acquire-release add: the barrier orders
 * the block's writes before its release, and its acquire before the
 * block's reads. */
template <int NW>
struct MvEpi<MU_CU_EPI_RESNORM, NW> : MvEpi<MU_CU_EPI_STORE, NW> {
    __device__ void finish(const MvLaunch &a) {
        __shared__ int is_last;
        __syncthreads();
        uint32_t epoch = 0; /* (thread 0: loaded here, its latency under the handshake's) */
        if (threadIdx.x == 0) {
            if (a.r.rn.xr.n > 1) epoch = *reinterpret_cast<volatile uint32_t *>(a.r.rn.xr.epoch);
            unsigned prev;
            asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(prev) : "l"(a.r.counter) : "memory");
            is_last = prev == gridDim.x - 1;
        }
        __syncthreads();
        if (!is_last) return;
        if (a.r.rn.xr.n > 1) xrank_meet(a.r.rn.xr, epoch); /* every rank's branch is complete */
        __shared__ __align__(16) float tail_sv[TAIL_MAXN];
        resnorm_block<NW>(a.r.rn, 0, tail_sv);
        if (threadIdx.x == 0) *a.r.counter = 0u;
    }
};

/* seg 0 gate, seg 1 up (the same row one after the other): silu(gate) x up
 * into seg 0's output */
template <int NW>
struct MvEpi<MU_CU_EPI_GATEUP, NW> {
    float gate = 0.f;
    __device__ void row(const MvLaunch &a, int seg, int64_t row, int, float y) {
        if (seg == 0) {
            gate = y;
            return;
        }
        if ((threadIdx.x & 31) == 0) a.r.seg[0].y[row] = swiglu1(gate, y);
    }
    __device__ void finish(const MvLaunch &) {}
};

/* A float's bits as an unsigned key in the float's order. */
__device__ __forceinline__ uint32_t ordered_bits(float f) {
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* The LM head: scale and soft-cap into the logits; the device-side choice
 * as the largest packed (key, ~index) of the launch: the logit (greedy) or
 * a Gumbel-max sample at the step's temperature and seed. */
template <int NW>
struct MvEpi<MU_CU_EPI_LOGITS, NW> {
    unsigned long long best = 0ull;
    __device__ void row(const MvLaunch &a, int seg, int64_t row, int, float y) {
        const mu_cu_mv_logits &g = a.r.lg;
        float v = y * g.scale;
        if (g.softcap != 0.0f) v = tanh_precise(v * (1.0f / g.softcap)) * g.softcap;
        if ((threadIdx.x & 31) == 0) a.r.seg[seg].y[row] = v;
        float sel = v;
        const float temp = g.hdr->temperature;
        if (temp > 0.0f) {
            const uint32_t hsh = hash32(g.hdr->seed, (uint32_t)g.hdr->pos, (uint32_t)(row + g.vocab0));
            const float uu = ((float)(hsh >> 8) + 0.5f) * (1.0f / 16777216.0f);
            sel = v / temp - logf(-logf(uu)); /* Gumbel-max: a softmax sample */
        }
        const unsigned long long key =
            ((unsigned long long)ordered_bits(sel) << 32) | (unsigned long long)(0xFFFFFFFFu - (uint32_t)(row + g.vocab0));
        best = key > best ? key : best;
    }
    __device__ void finish(const MvLaunch &a) {
        __shared__ unsigned long long best_w[NW];
        if ((threadIdx.x & 31) == 0) best_w[threadIdx.x >> 5] = best;
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long m = 0ull;
            for (int i = 0; i < NW; i++) m = best_w[i] > m ? best_w[i] : m;
            if (m) atomicMax(a.r.lg.best, m);
        }
    }
};

/* ---- walks ------------------------------------------------------------------------------
 * begin(): the walk's first batch in registers (before the wait);
 * run(): every row-dot of this warp, each finished one to the epilogue. */

/* Whole row-dots (or their parts), warp g of W taking g, g + W, ...; g
 * counts warp-major (g = warp x blocks + block), so a partial last round
 * falls on the same warps of every block and every SM streams about the
 * same bytes. gate/up: row-dot 2k is row k's gate, 2k + 1 its up. */
template <class P, int LANE, int EPI>
struct MvWalkRows {
    typename P::Regs R;
    int64_t W, gi, jobs, k, row;
    int n_items, plen, seg, part, i0, end;
    bool have;
    __device__ bool locate(const MvLaunch &a, int64_t kk) {
        if (EPI == MU_CU_EPI_GATEUP) {
            row = gi + (kk >> 1) * W, seg = (int)(kk & 1), part = 0;
            return row < jobs;
        }
        const int64_t r = gi + kk * W;
        if (r >= jobs) return false;
        mv_locate(a, r, seg, row, part);
        return true;
    }
    /* the row-dot k's first batch */
    __device__ void next(const MvLaunch &a) {
        have = locate(a, k);
        i0 = part * plen, end = min(i0 + plen, n_items);
        if (have) P::load(R, a.r.seg[seg].w, row, i0, min(i0 + P::PER_BATCH, end));
    }
    __device__ void begin(const MvLaunch &a, int nw) {
        W = (int64_t)gridDim.x * nw, gi = (int64_t)(threadIdx.x >> 5) * gridDim.x + blockIdx.x;
        n_items = P::items(a.r.seg[0].w);
        const int parts = a.parts > 1 ? a.parts : 1;
        plen = mv_part_len<P>(n_items, parts);
        jobs = EPI == MU_CU_EPI_GATEUP ? a.r.seg[0].w.rows : a.rows_total * parts;
        k = 0;
        next(a);
    }
    template <class E>
    __device__ void run(const MvLaunch &a, const uint8_t *sm, E &epi) {
        float acc = 0.f;
        while (have) {
            const mu_cu_weight &w = a.r.seg[seg].w;
            const int i1 = min(i0 + P::PER_BATCH, end);
            acc += LANE == MU_CU_LANE_FAST ? P::dot_fast(R, w, row, a.r.act, sm) : P::dot_exact(R, w, row, a.r.act);
            if (i1 < end) { /* the rest of this row-dot */
                i0 = i1;
                P::load(R, w, row, i0, min(i0 + P::PER_BATCH, end));
                continue;
            }
            const float y = warp_sum(acc);
            acc = 0.f;
            epi.row(a, seg, row, part, y);
            k++;
            next(a);
        }
    }
};

/* Packed short row-dots (plen = 16 / pack blocks, stored as they are): a
 * batch holds pack whole row-dots, lane pair p takes block p % plen of
 * row-dot pack x j + p / plen of the warp's job j, so short rows fill the
 * warp. */
template <class P, int LANE, int EPI>
struct MvWalkPacked {
    static_assert(EPI == MU_CU_EPI_STORE || EPI == MU_CU_EPI_RESNORM, "packed row-dots are stored as they are");
    typename P::Regs R;
    int64_t W, gw, jobs, k, row;
    int plen, pack, psub, pblk, seg, part;
    bool have;
    /* job kk's block of this lane loaded; false past the end */
    __device__ bool load(const MvLaunch &a, int64_t kk) {
        const int64_t j = gw + kk * W, r = j * pack + psub;
        const bool on = r < jobs;
        seg = 0, row = 0, part = 0;
        if (on) mv_locate(a, r, seg, row, part);
        P::load_at(R, a.r.seg[seg].w, row, part * plen + pblk, on);
        return j * pack < jobs;
    }
    __device__ void begin(const MvLaunch &a, int nw) {
        const int lane = threadIdx.x & 31;
        W = (int64_t)gridDim.x * nw, gw = (int64_t)blockIdx.x * nw + (threadIdx.x >> 5);
        const int parts = a.parts > 1 ? a.parts : 1;
        plen = mv_part_len<P>(P::items(a.r.seg[0].w), parts);
        jobs = a.rows_total * parts;
        pack = a.pack, psub = (lane >> 1) / plen, pblk = (lane >> 1) - psub * plen;
        k = 0;
        have = load(a, 0);
    }
    template <class E>
    __device__ void run(const MvLaunch &a, const uint8_t *sm, E &) {
        const int lane = threadIdx.x & 31;
        while (have) {
            float v = LANE == MU_CU_LANE_FAST ? P::dot_fast(R, a.r.seg[seg].w, row, a.r.act, sm)
                                              : P::dot_exact(R, a.r.seg[seg].w, row, a.r.act);
            const bool on = R.on;
            float *y = a.r.seg[seg].y + row + (int64_t)part * a.r.seg[seg].w.rows;
            have = load(a, ++k); /* the next loads fly during the sums */
            for (int o = 1; o < 2 * plen; o <<= 1) v += __shfl_xor_sync(MU_FULL, v, o);
            if (on && (lane & (2 * plen - 1)) == 0) *y = v;
        }
    }
};

/* Flat gate/up: warp g takes the row pairs [p0, p1) and streams the range's
 * blocks in batches of 16 that run across rows (lane pair p on block 16 j +
 * p of the range), gate's range then up's: a 26-block row no longer leaves
 * 6 of 16 lane pairs idle in its second batch. Lane state (f_row, f_b): the
 * block it loads. */
template <class P, int LANE, int EPI>
struct MvWalkFlat {
    static_assert(EPI == MU_CU_EPI_GATEUP && LANE == MU_CU_LANE_FAST, "flat batches serve the fast lane's gate/up");
    typename P::Regs R;
    int64_t p0, p1, f_row;
    int f_b;
    bool have;
    __device__ void begin(const MvLaunch &a, int nw) {
        const int64_t W = (int64_t)gridDim.x * nw, gw = (int64_t)blockIdx.x * nw + (threadIdx.x >> 5);
        p0 = gw * a.r.seg[0].w.rows / W, p1 = (gw + 1) * a.r.seg[0].w.rows / W;
        f_row = p0, f_b = (threadIdx.x & 31) >> 1;
        have = p0 < p1;
        if (have) P::load_at(R, a.r.seg[0].w, f_row, f_b, true);
    }
    template <class E>
    __device__ void run(const MvLaunch &a, const uint8_t *sm, E &epi) {
        constexpr int NW = mv_warps<LANE>();
        __shared__ float f_gate[NW][MV_FLAT_ROWS]; /* the range's gate sums, up's pass reads them */
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        const int nb = P::items(a.r.seg[0].w);
        int pass = 0;         /* 0: gate, 1: up */
        int64_t row_a = p0;   /* the range's oldest incomplete row in this pass */
        int bs = 0;           /* the batch's first block within row_a */
        float acc_a = 0.f, acc_b = 0.f; /* this lane's sums of row_a, row_a + 1 */
        while (have) {
            const float v = P::dot_fast(R, a.r.seg[pass].w, f_row, a.r.act, sm); /* (0 when off) */
            if (f_row == row_a) acc_a += v;
            else acc_b += v;
            const bool done_a = nb - bs <= P::PER_BATCH; /* row_a's last block is in this batch */
            /* the next batch, its loads in flight during the sums */
            int64_t n_row_a = row_a;
            int n_bs = bs + P::PER_BATCH, n_pass = pass;
            if (n_bs >= nb) n_bs -= nb, n_row_a++;
            f_b += P::PER_BATCH;
            if (f_b >= nb) f_b -= nb, f_row++;
            if (n_row_a >= p1) n_pass++, n_row_a = p0, n_bs = 0, f_row = p0, f_b = lane >> 1;
            have = n_pass < 2;
            if (have) P::load_at(R, a.r.seg[n_pass].w, f_row, f_b, f_row < p1);
            if (done_a) {
                const float y = warp_sum(acc_a);
                acc_a = acc_b;
                acc_b = 0.f;
                const int i = (int)(row_a - p0);
                if (pass == 0) {
                    if (lane == 0) f_gate[warp][i] = y;
                    __syncwarp();
                } else {
                    epi.row(a, 0, row_a, 0, f_gate[warp][i]);
                    epi.row(a, 1, row_a, 0, y);
                }
            }
            row_a = n_row_a, bs = n_bs, pass = n_pass;
        }
    }
};

/* Cut ranges: block b takes the rows [r0, r0 + rows) of one segment s (the
 * launcher spreads the blocks over the segments by bytes: every batch has
 * one weight type), and warp w the blocks [f0, f1) = [w T / NW, (w + 1) T /
 * NW) of those rows flattened (T = rows x nb), in batches of 16 that run
 * across rows as flat gate/up's do. A warp then streams ceil(T / NW / 16)
 * batches or fewer: the 30B's qkv + gate (8704 rows of 26 blocks on 4224
 * warps) 4 at most, against 6 for the 256 warps that take a third whole
 * row. Each range is a row long or longer (the launcher's plan), so a row
 * is cut between two warps at most: both sums go to shared memory and are
 * added in order at the block's end. */
template <class P, int LANE, int EPI>
struct MvWalkCut {
    static_assert(EPI == MU_CU_EPI_STORE && LANE == MU_CU_LANE_FAST, "cut ranges serve the fast lane's STORE");
    typename P::Regs R;
    int s, r0, T, f0, f1, f_b;
    int64_t f_row;
    bool have;
    __device__ void begin(const MvLaunch &a, int nw) {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        const int n_items = P::items(a.r.seg[0].w);
        s = 0;
        while (s + 1 < a.r.nseg && (int)blockIdx.x >= a.cut_b0[s + 1]) s++;
        const int bi = (int)blockIdx.x - a.cut_b0[s], nbk = a.cut_b0[s + 1] - a.cut_b0[s];
        const int64_t rows = a.r.seg[s].w.rows;
        r0 = (int)(bi * rows / nbk);
        T = (int)(((bi + 1) * rows / nbk - r0) * n_items);
        f0 = (int)((int64_t)warp * T / nw), f1 = (int)((int64_t)(warp + 1) * T / nw);
        const int f = f0 + (lane >> 1), fr = f / n_items; /* this lane's first block */
        f_row = r0 + fr, f_b = f - fr * n_items;
        have = f0 < f1;
        if (have) P::load_at(R, a.r.seg[s].w, f_row, f_b, f < f1);
    }
    template <class E>
    __device__ void run(const MvLaunch &a, const uint8_t *sm, E &) {
        constexpr int NW = mv_warps<LANE>();
        __shared__ float c_head[NW], c_tail[NW]; /* each warp's cut rows: its first, its last */
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        const int nb = P::items(a.r.seg[0].w);
        float *const y = a.r.seg[s].y;
        const int row_first = r0 + f0 / nb, row_last = r0 + (f1 - 1) / nb;
        const bool head_cut = f0 != (row_first - r0) * nb, tail_cut = f1 != (row_last - r0 + 1) * nb;
        int row_a = row_first; /* the oldest incomplete row */
        int fs = f0;           /* the batch's first block */
        float acc_a = 0.f, acc_b = 0.f; /* this lane's sums of row_a, row_a + 1 */
        auto store = [&](int row, float v) {
            if (lane != 0) return;
            if (row == row_first && head_cut) c_head[warp] = v;
            else if (row == row_last && tail_cut) c_tail[warp] = v;
            else y[row] = v;
        };
        auto stream = [&](auto type) { /* the block's batches, its weight type known */
            constexpr uint32_t TY = decltype(type)::value;
            const mu_cu_weight &w = a.r.seg[s].w;
            while (have) {
                const float v = P::template dot_fast_t<TY>(R, sm, nb); /* (0 when off) */
                if (f_row == row_a) acc_a += v;
                else acc_b += v;
                /* row_a's last block is in this batch (nb >= 16: the next row's
                 * only if the range ends in it, handled after the loop) */
                const bool done_a = (row_a - r0 + 1) * nb <= min(fs + P::PER_BATCH, f1);
                /* the next batch, its loads in flight during the sums */
                fs += P::PER_BATCH;
                f_b += P::PER_BATCH;
                if (f_b >= nb) f_b -= nb, f_row++;
                have = fs < f1;
                if (have) P::template load_at_t<TY>(R, w, f_row, f_b, fs + (lane >> 1) < f1);
                if (done_a) {
                    store(row_a, warp_sum(acc_a));
                    acc_a = acc_b;
                    acc_b = 0.f;
                    row_a++;
                }
            }
        };
        if constexpr (P::KQ_TYPE != 0) {
            stream(kq_type_tag<P::KQ_TYPE>{});
        } else {
            switch (a.r.seg[s].w.type) {
            case MU_TYPE_Q4_K: stream(kq_type_tag<MU_TYPE_Q4_K>{}); break;
            case MU_TYPE_Q5_K: stream(kq_type_tag<MU_TYPE_Q5_K>{}); break;
            default: stream(kq_type_tag<MU_TYPE_Q6_K>{}); break;
            }
        }
        if (row_a <= row_last) store(row_a, warp_sum(acc_a)); /* the range's end cut it, or it began in the last batch */
        __syncthreads();
        if (threadIdx.x >= 1 && threadIdx.x < NW) { /* the row cut where warp w's range begins */
            const int f = (int)((int64_t)threadIdx.x * T / NW);
            if (f % nb) y[r0 + f / nb] = c_tail[threadIdx.x - 1] + c_head[threadIdx.x];
        }
    }
};

template <class P, int LANE, int EPI, int WALK>
using MvWalkOf = typename std::conditional<
    WALK == MV_WALK_PACKED, MvWalkPacked<P, LANE, EPI>,
    typename std::conditional<WALK == MV_WALK_FLAT, MvWalkFlat<P, LANE, EPI>,
                              typename std::conditional<WALK == MV_WALK_CUT, MvWalkCut<P, LANE, EPI>,
                                                        MvWalkRows<P, LANE, EPI>>::type>::type>::type;

#endif
