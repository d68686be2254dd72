/* cu_matvec_policy.cuh — the matvec's weight families: how a warp loads a
 * batch of a row-dot into registers and dots it with the input, per lane.
 *   PolKQ<TYPE>: the K-quants; a batch is 16 blocks of a row, two lanes per
 *     block (the lane-blocks of cu_kq.cuh); TYPE 0: the type of each
 *     segment, switched per batch (launches mixing K-quants, the exact lane).
 *   PolUnit<TT>: the unit formats (cu_units.cuh); a batch is MV_NB units per
 *     lane.
 */
#ifndef MU_CU_MATVEC_POLICY_CUH
#define MU_CU_MATVEC_POLICY_CUH

#include <type_traits>

#include "cuda/cu_matvec_stage.cuh"
#include "cuda/cu_units.cuh"

template <uint32_t T>
struct kq_type_tag {
    static constexpr uint32_t value = T;
};

/* K-quant family. TYPE 0: the type of each segment, switched per batch
 * (launches mixing K-quants, and the exact lane). */
template <uint32_t TYPE>
struct PolKQ {
    static constexpr int PER_BATCH = 16; /* blocks */
    static constexpr int PART_ALIGN = 16; /* parts start at a tile group */
    static constexpr bool FLAT_OK = TYPE != 0; /* gate/up in flat batches (one type) */
    static constexpr bool CUT_OK = true; /* STORE in ranges cut inside rows (MV_WALK_CUT) */
    static constexpr bool PACK_OK = true; /* short row-dots share a batch (MV_WALK_PACKED) */
    static constexpr uint32_t KQ_TYPE = TYPE;
    struct Regs {
        KqLane<uint4> L;
        int b;
        bool on;
    };
    __device__ static int items(const mu_cu_weight &w) { return (int)(w.cols >> 8); }
    static constexpr bool NORM_IN = true; /* can form its input (MV_IN_NORM) */
    template <int IN>
    __device__ static void stage(const mu_cu_mv &a, uint8_t *sm, bool pair) {
        if constexpr (IN == MV_IN_NORM) kq_stage_norm(a.nin, a.seg[0].w.cols, sm);
        else kq_stage<IN == MV_IN_QUANT>(a.act, a.seg[0].w.cols, sm, pair);
    }
    /* one input of the B-row matvec (MV_IN_COPY or MV_IN_QUANT), and the
     * shared memory it takes (quantizing: the groups' scales wait past it) */
    template <int IN>
    __device__ static void stage_act(const mu_cu_act &act, int64_t cols, uint8_t *sm) {
        kq_stage<IN == MV_IN_QUANT>(act, cols, sm, false);
    }
    template <int IN>
    __host__ __device__ static size_t stage_bytes(int64_t cols) {
        return (size_t)(cols >> 8) * (KQ_XQ + KQ_AUX) + (IN == MV_IN_QUANT ? (size_t)(cols / 16) * 8 : 0);
    }

    template <uint32_t T>
    __device__ static void load_t(Regs &R, const mu_cu_weight &w, int64_t row) {
        kq_load<T>(R.L, w, row, R.b, threadIdx.x & 1);
    }
    /* blocks [i0, i1) of the row: lane pair (l >> 1) takes block i0 + (l >> 1) */
    __device__ static void load(Regs &R, const mu_cu_weight &w, int64_t row, int i0, int i1) {
        const int b = i0 + ((threadIdx.x & 31) >> 1);
        load_at(R, w, row, b, b < i1);
    }
    /* block b of the row, this lane's half of it (off: nothing) */
    __device__ static void load_at(Regs &R, const mu_cu_weight &w, int64_t row, int b, bool on) {
        R.b = b;
        R.on = on;
        if (!on) return;
        if (TYPE) {
            load_t<TYPE>(R, w, row);
            return;
        }
        switch (w.type) {
        case MU_TYPE_Q4_K: load_t<MU_TYPE_Q4_K>(R, w, row); break;
        case MU_TYPE_Q5_K: load_t<MU_TYPE_Q5_K>(R, w, row); break;
        default: load_t<MU_TYPE_Q6_K>(R, w, row); break;
        }
    }
    template <uint32_t T>
    __device__ static float fast_t(const Regs &R, const uint8_t *sm, int nb) {
        kq_act x;
        kq_act_load<T>(sm, nb, R.b, threadIdx.x & 1, x);
        return kq_dot_fast<T>(R.L, threadIdx.x & 1, x);
    }
    /* load_at and dot_fast for a type known to the caller (cut ranges: one
     * segment a block, so the mixed launch's blocks switch once, not per batch) */
    template <uint32_t T>
    __device__ static void load_at_t(Regs &R, const mu_cu_weight &w, int64_t row, int b, bool on) {
        R.b = b;
        R.on = on;
        if (on) load_t<T>(R, w, row);
    }
    template <uint32_t T>
    __device__ static float dot_fast_t(const Regs &R, const uint8_t *sm, int nb) {
        return R.on ? fast_t<T>(R, sm, nb) : 0.f;
    }
    __device__ static float dot_fast(const Regs &R, const mu_cu_weight &w, int64_t, const mu_cu_act &,
                                     const uint8_t *sm) {
        if (!R.on) return 0.f;
        const int nb = (int)(w.cols >> 8);
        if (TYPE) return fast_t<TYPE>(R, sm, nb);
        switch (w.type) {
        case MU_TYPE_Q4_K: return fast_t<MU_TYPE_Q4_K>(R, sm, nb);
        case MU_TYPE_Q5_K: return fast_t<MU_TYPE_Q5_K>(R, sm, nb);
        default: return fast_t<MU_TYPE_Q6_K>(R, sm, nb);
        }
    }
    template <uint32_t T>
    __device__ static float exact_t(const Regs &R, const float *x) {
        const float *xb = x + (int64_t)R.b * 256;
        return kq_dot_exact<T>(R.L, threadIdx.x & 1, [&](int i) { return __ldg(xb + i); });
    }
    __device__ static float dot_exact(const Regs &R, const mu_cu_weight &w, int64_t, const mu_cu_act &act) {
        if (!R.on) return 0.f;
        switch (w.type) {
        case MU_TYPE_Q4_K: return exact_t<MU_TYPE_Q4_K>(R, act.x);
        case MU_TYPE_Q5_K: return exact_t<MU_TYPE_Q5_K>(R, act.x);
        default: return exact_t<MU_TYPE_Q6_K>(R, act.x);
        }
    }
};

/* A decoder's per-unit side record (TT::Side, loaded by TT::side with the
 * batch), or none. */
template <class T, class = void>
struct unit_side {
    struct type {};
    static constexpr bool has = false;
};
template <class T>
struct unit_side<T, std::void_t<typename T::Side>> {
    typedef typename T::Side type;
    static constexpr bool has = true;
};

/* Unit formats: lane l takes units i0 + 32k + l (k < MV_NB) of the row. */
template <class TT>
struct PolUnit {
    static constexpr int PER_BATCH = 32 * MV_NB; /* units */
    static constexpr int PART_ALIGN = 1; /* (equal parts: mu_cu_mv_parts) */
    static constexpr bool FLAT_OK = false;
    static constexpr bool CUT_OK = false;
    static constexpr bool PACK_OK = false;
    struct Regs {
        uint4 v[MV_NB];
        typename unit_side<TT>::type sd[MV_NB];
        int u0;
    };
    static constexpr bool NORM_IN = false;
    __device__ static int items(const mu_cu_weight &w) { return w.units; }
    /* the int8 input and its scales, copied as they are or quantized from x */
    template <int IN>
    __device__ static void stage(const mu_cu_mv &a, uint8_t *sm, bool) {
        stage_act<IN>(a.act, a.seg[0].w.cols, sm);
    }
    template <int IN>
    __host__ __device__ static size_t stage_bytes(int64_t cols) {
        return (size_t)((cols + 15) & ~15) + (size_t)(cols / 16) * 8;
    }
    template <int IN>
    __device__ static void stage_act(const mu_cu_act &act, int64_t cols, uint8_t *sm) {
        static_assert(IN == MV_IN_COPY || IN == MV_IN_QUANT, "unit formats do not form their input");
        const int ne = (int)cols;
        int8_t *sq = reinterpret_cast<int8_t *>(sm);
        float *sds = reinterpret_cast<float *>(sm + ((ne + 15) & ~15));
        if constexpr (IN == MV_IN_QUANT) {
            for (int i = threadIdx.x; i < ne / 16; i += blockDim.x) {
                uint4 q;
                float2 ds;
                quant_group16(act.x, i, q, ds);
                reinterpret_cast<uint4 *>(sq)[i] = q;
                reinterpret_cast<float2 *>(sds)[i] = ds;
            }
        } else {
            for (int i = threadIdx.x; i < ne / 16; i += blockDim.x)
                reinterpret_cast<int4 *>(sq)[i] = __ldcg(reinterpret_cast<const int4 *>(act.q) + i);
            for (int i = threadIdx.x; i < ne / 32; i += blockDim.x)
                reinterpret_cast<float4 *>(sds)[i] = __ldcg(reinterpret_cast<const float4 *>(act.ds) + i);
        }
    }
    __device__ static void load(Regs &R, const mu_cu_weight &w, int64_t row, int i0, int i1) {
        const int lane = threadIdx.x & 31;
        const uint8_t *p = w.qs + row * (int64_t)w.units * 16;
        R.u0 = i0;
#pragma unroll
        for (int k = 0; k < MV_NB; k++) {
            const int u = i0 + k * 32 + lane;
            R.v[k] = u < i1 ? ld_stream(p + (uint32_t)u * 16u) : make_uint4(0, 0, 0, 0);
        }
        if constexpr (unit_side<TT>::has) {
            const RowCtx rc = TT::row(w, row);
#pragma unroll
            for (int k = 0; k < MV_NB; k++) {
                const int u = i0 + k * 32 + lane;
                if (u < i1) R.sd[k] = TT::side(rc, u);
            }
        }
    }
    __device__ static float dot_fast(const Regs &R, const mu_cu_weight &w, int64_t row, const mu_cu_act &act,
                                     const uint8_t *sm) {
        mu_cu_act s = act;
        const int ne = (int)w.cols;
        s.q = reinterpret_cast<const int8_t *>(sm);
        s.ds = reinterpret_cast<const float *>(sm + ((ne + 15) & ~15));
        const RowCtx rc = TT::row(w, row);
        const int lane = threadIdx.x & 31, n = w.units;
        float acc = 0.f;
#pragma unroll
        for (int k = 0; k < MV_NB; k++) {
            const int u = R.u0 + k * 32 + lane;
            if constexpr (unit_side<TT>::has) {
                if (u < n) acc += TT::dot_q8(rc, u, R.v[k], R.sd[k], s);
            } else {
                if (u < n) acc += TT::dot_q8(rc, u, R.v[k], s);
            }
        }
        return acc;
    }
    __device__ static float dot_exact(const Regs &R, const mu_cu_weight &w, int64_t row, const mu_cu_act &act) {
        const RowCtx rc = TT::row(w, row);
        const int lane = threadIdx.x & 31, n = w.units;
        float acc = 0.f;
#pragma unroll
        for (int k = 0; k < MV_NB; k++) {
            const int u = R.u0 + k * 32 + lane;
            if constexpr (unit_side<TT>::has) {
                if (u < n) acc += TT::dot_f32(rc, u, R.v[k], R.sd[k], act);
            } else {
                if (u < n) acc += TT::dot_f32(rc, u, R.v[k], act);
            }
        }
        return acc;
    }
};

#endif
