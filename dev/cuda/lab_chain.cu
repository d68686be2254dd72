/* lab_chain.cu — a timing probe for a design question (bench_cuda --chain); the
 * engine does not use it. Question: what does a launch boundary cost a chain
 * of streaming launches shaped like a decode layer, against a grid-wide
 * barrier inside one persistent launch (with or without each warp's next
 * loads issued before the barrier)? The streams read distinct regions of a
 * buffer larger than L2, 16-byte loads, one block of 32 warps per SM (the
 * matvec's shape). */
#include <string.h>

#include <cooperative_groups.h>

#include <algorithm>
#include <vector>

#include "cuda/cu_device.cuh"
#include "lab.h"

extern "C" int mu_fail(int status, const char *fmt, ...);

#define LAB_WARPS 32

namespace {

struct LabChain {
    const uint4 *base;   /* regions[i] = base + region_elems * i */
    int64_t region_elems;
    int regions;
    int64_t batches[4];  /* warp batches per segment, cycling (a layer's shape) */
    int segs;
    int work;            /* arithmetic per batch: 4 independent multiply-adds per unit */
    uint32_t stage_ns;   /* every block, after the wait (the input staging) */
    uint32_t tail_ns;    /* the last block, at the end (the residual/norm tail) */
    unsigned *counter;
    int pattern;         /* 0: contiguous batches; else a matvec's rows (lab_rows_kernel) */
    int row_blocks[4];   /* 256-weight blocks per row of each segment (pattern > 0) */
    float *act;          /* lab_stage_kernel: what each launch writes at its end and the next one's staging reads */
    int act_n;           /* floats in act */
    int rounds;          /* lab_stage_kernel: the staging's dependent rounds */
    int stage_mode;      /* lab_stage_kernel: 0 a round is a load + block sum; 1 the block sum alone (no load);
                            2 the load + a warp sum (no barrier); 3 mode 2 in warp 0 alone, one barrier after;
                            4 every round's 32 KB copied into shared memory by one bulk copy (TMA) issued right
                            after the wait, then per round a warp sum (as mode 2); 5 mode 4 in clusters of
                            two, each bulk copy multicast to both blocks (half the L2 reads); 6 the first
                            block to arrive (a ticket) does mode 0's rounds alone and writes an 8 KB image,
                            then raises a flag; the others (rows dealt over them, none to the leader) copy
                            their DEPTH batches into shared memory and prefetch mode_arg batches into L2
                            while they wait on the flag, then copy the image into shared memory (one round);
                            7 the engine's block_sum alone (no load); 8 its two barriers alone; 9 its two warp sums
                            alone; 10 mode 0 in warps 0-7 alone (4 loads a thread, named barriers); 11 mode 0
                            with block b reading replica b % mode_arg of the vectors (fewer readers a line) */
    int mode_arg;        /* mode 6: batches each waiting warp prefetches into L2 (bulk); mode 11: replicas */
    unsigned long long *tickets; /* mode 6: per segment a ticket counter and the leader's flag (monotonic) */
    float *image;        /* mode 6: the leader's 8 KB image */
};

/* One mbarrier per round (phase 0 only) and bulk copies (TMA) into shared memory. */
__device__ __forceinline__ uint32_t lab_smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void lab_mbar_init(uint64_t *m) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(lab_smem(m)) : "memory");
}
__device__ __forceinline__ void lab_mbar_expect(uint64_t *m, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(lab_smem(m)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void lab_mbar_wait0(uint64_t *m) {
    asm volatile("{\n\t.reg .pred p;\n"
                 "LAB_WAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n\t"
                 "@!p bra LAB_WAIT_%=;\n}" ::"r"(lab_smem(m))
                 : "memory");
}
__device__ __forceinline__ void lab_bulk(void *dst, const void *src, unsigned bytes, uint64_t *m, unsigned short mask) {
    if (mask)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, "
                     "[%3], %4;" ::"r"(lab_smem(dst)),
                     "l"(src), "r"(bytes), "r"(lab_smem(m)), "h"(mask)
                     : "memory");
    else
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                         lab_smem(dst)),
                     "l"(src), "r"(bytes), "r"(lab_smem(m))
                     : "memory");
}
#define LAB_ROUND_FLOATS 8192 /* a round's vector: 32 KB (the 30B's 26 KB rounded up) */
#define LAB_ROUNDS_MAX 6

__device__ __forceinline__ const uint4 *lab_seg_src(const LabChain &c, int s) {
    return c.base + c.region_elems * (s % c.regions);
}

template <int NB>
__device__ __forceinline__ void lab_load(uint4 (&r)[NB], const uint4 *src, int64_t batch, int lane) {
    const uint4 *p = src + batch * (32 * NB) + lane;
#pragma unroll
    for (int i = 0; i < NB; i++) r[i] = ld_stream(p + 32 * i);
}

/* The same batch into this lane's slots of shared memory (cp.async, L2 only). */
template <int NB>
__device__ __forceinline__ void lab_copy(uint4 *slot, const uint4 *src, int64_t batch, int lane, bool on) {
    const uint4 *p = src + batch * (32 * NB) + lane;
#pragma unroll
    for (int i = 0; i < NB; i++) {
        const uint32_t d = (uint32_t)__cvta_generic_to_shared(slot + 32 * i + lane);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(p + 32 * i), "r"(on ? 16 : 0)
                     : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

template <int NB>
__device__ __forceinline__ unsigned lab_fold(const uint4 (&r)[NB], int work) {
    unsigned a = 0, b = 1, c = 2, d = 3;
#pragma unroll
    for (int i = 0; i < NB; i++) a ^= r[i].x, b ^= r[i].y, c ^= r[i].z, d ^= r[i].w;
#pragma unroll 1
    for (int j = 0; j < work; j++)
        a = a * 0x9E3779B1u + b, b = b * 0x85EBCA77u + c, c = c * 0xC2B2AE3Du + d, d = d * 0x27D4EB2Fu + a;
    return a ^ b ^ c ^ d;
}

__device__ __forceinline__ void lab_spin(uint32_t ns) {
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); while (t - t0 < ns);
}

/* A segment kernel's warp: its place in the grid, its segment's batches
 * and source, its DEPTH shared-memory slots, and its first batch, loaded
 * here (before the wait, as the matvec does). */
template <int NB, int DEPTH>
struct LabWarp {
    int warp, lane;
    int64_t W, gw, nb;
    const uint4 *src;
    uint4 *my;
    uint4 r[NB];
    /* vb, blocks: this block's place among the blocks that take rows (-1: none) */
    __device__ LabWarp(const LabChain &c, int s, uint4 *ring, int vb = (int)blockIdx.x, int blocks = (int)gridDim.x)
        : warp((int)(threadIdx.x >> 5)), lane((int)(threadIdx.x & 31)), W((int64_t)blocks * LAB_WARPS),
          gw(vb < 0 ? INT64_MAX / 2 : (int64_t)vb * LAB_WARPS + warp), nb(c.batches[s & 3]), src(lab_seg_src(c, s)),
          my(ring + (size_t)warp * (DEPTH > 0 ? DEPTH : 1) * NB * 32) {
        if (gw < nb) lab_load(r, src, gw, lane);
    }
};

/* One segment per launch (launched in a graph, with or without PDL). The
 * warp's first batch goes into registers and its next DEPTH batches into
 * its shared-memory slots before the wait; after it, each batch taken from
 * a slot is replaced by the one DEPTH batches later. */
template <int NB, int DEPTH>
__global__ void __launch_bounds__(LAB_WARPS * 32, 1) lab_seg_kernel(const __grid_constant__ LabChain c, int s,
                                                                   unsigned *sink) {
    extern __shared__ uint4 lab_ring[];
    pdl_trigger();
    LabWarp<NB, DEPTH> lw(c, s, lab_ring);
    const int lane = lw.lane;
    const int64_t W = lw.W, gw = lw.gw, nb = lw.nb;
    const uint4 *src = lw.src;
    uint4 *my = lw.my, (&r)[NB] = lw.r;
#pragma unroll
    for (int d = 0; d < DEPTH; d++) lab_copy<NB>(my + d * NB * 32, src, gw + (d + 1) * W, lane, gw + (d + 1) * W < nb);
    pdl_wait();
    if (c.stage_ns) lab_spin(c.stage_ns);
    unsigned acc = 0;
    int slot = 0;
    for (int64_t b = gw; b < nb;) {
        acc ^= lab_fold(r, c.work);
        b += W;
        if (b >= nb) break;
        if constexpr (DEPTH == 0) {
            lab_load(r, src, b, lane);
        } else {
            asm volatile("cp.async.wait_group %0;" ::"n"(DEPTH - 1) : "memory");
            const uint4 *sl = my + slot * NB * 32;
#pragma unroll
            for (int i = 0; i < NB; i++) r[i] = sl[32 * i + lane];
            const int64_t bn = b + DEPTH * W;
            lab_copy<NB>(my + slot * NB * 32, src, bn, lane, bn < nb);
            slot = slot + 1 == DEPTH ? 0 : slot + 1;
        }
    }
    if (DEPTH) asm volatile("cp.async.wait_group 0;" ::: "memory");
    if (acc == 0x9E3779B9u) *sink = acc; /* keeps the loads */
    if (c.tail_ns) {
        __shared__ bool last;
        __syncthreads();
        if (threadIdx.x == 0) {
            last = atomicAdd(c.counter, 1u) == gridDim.x - 1;
            if (last) {
                lab_spin(c.tail_ns);
                *c.counter = 0u;
            }
        }
    }
}

/* --chain-stage: the staging as what it is in the engine, a chain of
 * dependent rounds, each an L2 load per thread of the vector the previous
 * launch wrote at its end, then a block sum (two barriers); and the
 * question whether the warps' next DEPTH batches, copied into shared memory
 * during that chain (PACED 0: all right after the wait; 1: one per round),
 * hide the chain or slow it as much as they save (docs/lab-log.md,
 * version 15: L2 prefetches did). After the chain a warp folds its first
 * batch, issues its next register batch, then folds the copied ones. */
template <int NB, int DEPTH, int PACED>
__global__ void __launch_bounds__(LAB_WARPS * 32, 1) lab_stage_kernel(const __grid_constant__ LabChain c, int s,
                                                                     unsigned *sink) {
    extern __shared__ uint4 lab_ring[];
    __shared__ float red[LAB_WARPS];
    __shared__ uint64_t mbar[LAB_ROUNDS_MAX];
    __shared__ unsigned long long ticket;
    __shared__ __align__(16) float img_sm[2048];
    pdl_trigger();
    const int mode = c.stage_mode;
    if (mode == 6) { /* a ticket before the preload: it decides the rows (the leader takes none) */
        if (threadIdx.x == 0) ticket = atomicAdd(c.tickets + 2 * s, 1ull);
        __syncthreads();
    }
    const int role = mode == 6 ? (int)(ticket % gridDim.x) : (int)blockIdx.x;
    const unsigned long long gen = mode == 6 ? ticket / gridDim.x + 1 : 0;
    LabWarp<NB, DEPTH> lw(c, s, lab_ring, mode == 6 ? role - 1 : role, mode == 6 ? (int)gridDim.x - 1 : (int)gridDim.x);
    const int warp = lw.warp, lane = lw.lane;
    const int64_t W = lw.W, gw = lw.gw, nb = lw.nb;
    const uint4 *src = lw.src;
    uint4 *my = lw.my, (&r)[NB] = lw.r;
    if (mode == 4 || mode == 5) { /* the rounds' barriers, ready before the wait (and in every block of a pair) */
        if (threadIdx.x == 0) {
            for (int k = 0; k < c.rounds; k++) lab_mbar_init(&mbar[k]);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        __syncthreads();
        if (mode == 5) cooperative_groups::this_cluster().sync();
    }
    pdl_wait();
    const float *bulk = reinterpret_cast<const float *>(lab_ring); /* (modes 4, 5: the rounds' vectors) */
    if ((mode == 4 || mode == 5) && threadIdx.x == 0) {
        const unsigned rank = mode == 5 ? cooperative_groups::this_cluster().block_rank() : 0u;
        for (int k = 0; k < c.rounds; k++) lab_mbar_expect(&mbar[k], LAB_ROUND_FLOATS * 4);
        if (rank == 0)
            for (int k = 0; k < c.rounds; k++)
                lab_bulk(lab_ring + k * (LAB_ROUND_FLOATS / 4), c.act + k * LAB_ROUND_FLOATS, LAB_ROUND_FLOATS * 4, &mbar[k],
                         mode == 5 ? (unsigned short)3 : (unsigned short)0);
    }
    int issued = 0;
    auto copy_next = [&]() {
        const int64_t b = gw + (int64_t)(issued + 1) * W;
        lab_copy<NB>(my + issued * NB * 32, src, b, lane, b < nb);
        issued++;
    };
    if (!PACED && !(mode == 6 && role == 0))
        for (int d = 0; d < DEPTH; d++) copy_next();
    const float4 *act4 = reinterpret_cast<const float4 *>(c.act);
    const unsigned n4 = (unsigned)c.act_n / 4;
    unsigned dep = 0;
    if (mode == 6 && role != 0) {
        if (lane == 0)
            for (int d = 0; d < c.mode_arg; d++) {
                const int64_t b = gw + (int64_t)(DEPTH + 1 + d) * W;
                if (b < nb)
                    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src + b * (32 * NB)), "r"(32 * NB * 16)
                                 : "memory");
            }
        if (threadIdx.x == 0) {
            unsigned long long f;
            do asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(f) : "l"(c.tickets + 2 * s + 1) : "memory");
            while (f < gen);
        }
        __syncthreads();
        const float2 v = __ldcg(reinterpret_cast<const float2 *>(c.image) + threadIdx.x);
        reinterpret_cast<float2 *>(img_sm)[threadIdx.x] = v;
        __syncthreads();
        dep = __float_as_uint(img_sm[(threadIdx.x * 7u) & 2047u]) & 63u;
    }
    for (int k = 0; k < (mode == 6 && role != 0 ? 0 : c.rounds); k++) {
        if (PACED && issued < DEPTH) copy_next();
        if (mode == 3 && warp != 0) break;
        float v = (float)dep;
        if (mode == 4 || mode == 5) {
            lab_mbar_wait0(&mbar[k]);
            const unsigned i = (threadIdx.x * 2u + (unsigned)k * 97u + dep) % (LAB_ROUND_FLOATS / 4);
            const float4 *b4 = reinterpret_cast<const float4 *>(bulk + k * LAB_ROUND_FLOATS);
            const float4 a = b4[i], b = b4[(i + 1) % (LAB_ROUND_FLOATS / 4)];
            v = a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
        } else if (mode == 10) { /* 8 warps load the round's 32 KB: 4 x 16-byte pairs a thread */
            if (warp >= 8) break;
            v = 0.f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const unsigned i = ((threadIdx.x + 256u * j) * 2u + (unsigned)k * 97u + dep) % n4;
                const float4 a = __ldcg(act4 + i), b = __ldcg(act4 + (i + 1) % n4);
                v += a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
            }
        } else if ((mode != 1 && mode < 7) || mode == 11) {
            /* (mode 11: this block's replica of the vectors, one of mode_arg) */
            const float4 *v4 = mode == 11 ? act4 + (size_t)(blockIdx.x % (unsigned)c.mode_arg) * n4 : act4;
            const unsigned i = (threadIdx.x * 2u + (unsigned)k * 97u + dep) % n4;
            const float4 a = __ldcg(v4 + i), b = __ldcg(v4 + (i + 1) % n4);
            v = a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
        }
        float t;
        if (mode == 7) { /* the engine's block_sum (cu_device.cuh) */
            t = block_sum(v + (float)lane, red);
        } else if (mode == 8) { /* its two barriers alone (one smem word carries the dependency) */
            __syncthreads();
            if (threadIdx.x == 0) red[0] = v + 1.0f;
            __syncthreads();
            t = red[0];
        } else if (mode == 9) { /* its two warp sums alone */
            t = warp_sum(warp_sum(v + (float)lane) + (float)lane);
        } else if (mode == 10) { /* block_sum over warps 0-7, a named barrier of 256 threads */
            v = warp_sum(v);
            asm volatile("bar.sync 1, 256;" ::: "memory");
            if (lane == 0) red[warp + 8 * (k & 1)] = v;
            asm volatile("bar.sync 1, 256;" ::: "memory");
            t = warp_sum(lane < 8 ? red[lane + 8 * (k & 1)] : 0.f);
        } else {
            v = warp_sum(v);
            t = v;
        }
        if (mode <= 1 || mode == 6 || mode == 11) {
            if (lane == 0) red[warp] = v;
            __syncthreads();
            t = 0.f;
#pragma unroll
            for (int w = 0; w < LAB_WARPS; w++) t += red[w];
            __syncthreads();
        }
        dep = __float_as_uint(t) & 63u; /* the next round's addresses depend on this sum */
    }
    if (mode == 3 || mode == 10) __syncthreads();
    if (mode == 6 && role == 0) { /* the image, then the flag */
        reinterpret_cast<float2 *>(c.image)[threadIdx.x] = make_float2((float)dep, (float)(dep + threadIdx.x));
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(c.tickets + 2 * s + 1), "l"(gen) : "memory");
        }
        return;
    }
    while (issued < DEPTH) copy_next();
    unsigned acc = dep;
    if (gw < nb) {
        acc ^= lab_fold(r, c.work);
        int64_t b = gw + (int64_t)(DEPTH + 1) * W;
        if (b < nb) lab_load(r, src, b, lane); /* in flight while the copied batches are folded */
        if (DEPTH) asm volatile("cp.async.wait_group 0;" ::: "memory");
        for (int d = 0; d < DEPTH; d++) {
            if (gw + (int64_t)(d + 1) * W >= nb) break;
            uint4 t[NB];
            const uint4 *sl = my + d * NB * 32;
#pragma unroll
            for (int i = 0; i < NB; i++) t[i] = sl[32 * i + lane];
            acc ^= lab_fold(t, c.work);
        }
        while (b < nb) {
            acc ^= lab_fold(r, c.work);
            b += W;
            if (b < nb) lab_load(r, src, b, lane);
        }
    }
    if (DEPTH) asm volatile("cp.async.wait_group 0;" ::: "memory");
    if (threadIdx.x < 64) c.act[((unsigned)blockIdx.x * 64u + threadIdx.x) % (unsigned)c.act_n] = (float)(acc & 255u) * 1e-3f;
    if (mode == 5) cooperative_groups::this_cluster().sync(); /* (no block leaves while its pair's copies land) */
    if (acc == 0x9E3779B9u) *sink = acc;
}

/* A matvec's addressing instead of contiguous batches: warp gw takes rows
 * gw, gw + W, ...; a row of row_blocks Q4_K-sized blocks (128 B of nibbles
 * plus 16 B of scales) in batches of BB blocks, lane pair p on block p of
 * the batch, four 16-byte nibble loads and one scale load per lane.
 * PAT 1: the engine's layout (lane pair p reads 32 contiguous bytes per
 * load, scales in a separate stream); 2: the batch's nibbles tiled so that
 * each load of the warp reads one contiguous span; 3: the engine's nibble
 * order with the scales after each block's nibbles (the file's 144 bytes). */
/* Registers [i0, i1) folded into the running state, then work rounds. */
__device__ __forceinline__ void lab_fold_part(const uint4 (&r)[5], int i0, int i1, int work, unsigned (&st)[4]) {
#pragma unroll
    for (int i = 0; i < 5; i++)
        if (i >= i0 && i < i1) st[0] ^= r[i].x, st[1] ^= r[i].y, st[2] ^= r[i].z, st[3] ^= r[i].w;
    unsigned a = st[0], b = st[1], c = st[2], d = st[3];
#pragma unroll 1
    for (int j = 0; j < work; j++)
        a = a * 0x9E3779B1u + b, b = b * 0x85EBCA77u + c, c = c * 0xC2B2AE3Du + d, d = d * 0x27D4EB2Fu + a;
    st[0] = a, st[1] = b, st[2] = c, st[3] = d;
}

/* PAT 4: PAT 2's tiles, software-pipelined at half a batch: the batch's
 * first two nibble loads are folded with half the arithmetic, then the
 * next batch's first two loads issued into those registers, then the rest
 * (no extra registers: what the matvec could do without double buffers).
 * PAT 5: PAT 2's tiles double-buffered (the whole next batch in flight
 * during the arithmetic; twice the registers). */
template <int PAT, int BB>
__global__ void __launch_bounds__(LAB_WARPS * 32, 1) lab_rows_kernel(const __grid_constant__ LabChain c, int s,
                                                                    unsigned *sink) {
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, p = lane >> 1, c0 = lane & 1;
    const int64_t W = (int64_t)gridDim.x * LAB_WARPS, gw = (int64_t)blockIdx.x * LAB_WARPS + warp;
    const int64_t rows = c.batches[s & 3];
    const int rb = c.row_blocks[s & 3];
    const uint8_t *base = reinterpret_cast<const uint8_t *>(lab_seg_src(c, s));
    const uint8_t *meta = base + rows * rb * 128;
    uint4 r[5];
    /* loads [i0, i1) of the lane's five, into dst */
    auto load_into = [&](uint4 (&dst)[5], int64_t row, int b0, int i0, int i1) {
        uint4(&r)[5] = dst;
        const int nbb = min(BB, rb - b0);
        if (p >= nbb) {
#pragma unroll
            for (int i = 0; i < 5; i++)
                if (i >= i0 && i < i1) r[i] = make_uint4(0, 0, 0, 0);
            return;
        }
        if (PAT >= 4) {
            const int64_t blk = row * rb + b0 + p;
            const uint8_t *q = base + (row * rb + b0) * 128 + 32 * p + 16 * c0;
#pragma unroll
            for (int i = 0; i < 4; i++)
                if (i >= i0 && i < i1) r[i] = ld_stream(q + 32 * nbb * i);
            if (i1 == 5) r[4] = ld_weight16(meta + blk * 16);
            return;
        }
        const int64_t blk = row * rb + b0 + p;
        if (PAT == 3) {
            const uint8_t *q = base + blk * 144;
#pragma unroll
            for (int i = 0; i < 4; i++) r[i] = ld_stream(q + 32 * i + 16 * c0);
            r[4] = ld_weight16(q + 128);
            return;
        }
        if (PAT == 2) {
            const uint8_t *q = base + (row * rb + b0) * 128 + 32 * p + 16 * c0;
#pragma unroll
            for (int i = 0; i < 4; i++) r[i] = ld_stream(q + 32 * nbb * i);
        } else {
            const uint8_t *q = base + blk * 128 + 16 * c0;
#pragma unroll
            for (int i = 0; i < 4; i++) r[i] = ld_stream(q + 32 * i);
        }
        r[4] = ld_weight16(meta + blk * 16);
    };
    auto load = [&](int64_t row, int b0, int i0 = 0, int i1 = 5) { load_into(r, row, b0, i0, i1); };
    int64_t row = gw;
    int b0 = 0;
    if (row < rows) load(row, 0); /* before the wait, as the matvec */
    pdl_wait();
    if (c.stage_ns) lab_spin(c.stage_ns);
    unsigned acc = 0;
    if constexpr (PAT == 5) {
        uint4 rn[5];
        while (row < rows) {
            int nb0 = b0 + BB;
            int64_t nrow = row;
            if (nb0 >= rb) nb0 = 0, nrow += W;
            if (nrow < rows) load_into(rn, nrow, nb0, 0, 5); /* in flight during the fold */
            acc ^= lab_fold(r, c.work);
#pragma unroll
            for (int i = 0; i < 5; i++) r[i] = rn[i];
            row = nrow, b0 = nb0;
        }
    } else if constexpr (PAT == 4) {
        unsigned st[4] = {0u, 1u, 2u, 3u};
        while (row < rows) {
            int nb0 = b0 + BB;
            int64_t nrow = row;
            if (nb0 >= rb) nb0 = 0, nrow += W;
            lab_fold_part(r, 0, 2, c.work / 2, st);
            if (nrow < rows) load(nrow, nb0, 0, 2);
            lab_fold_part(r, 2, 5, c.work - c.work / 2, st);
            if (nrow < rows) load(nrow, nb0, 2, 5);
            row = nrow, b0 = nb0;
        }
        acc = st[0] ^ st[1] ^ st[2] ^ st[3];
    } else {
        while (row < rows) {
            acc ^= lab_fold(r, c.work);
            b0 += BB;
            if (b0 >= rb) b0 = 0, row += W;
            if (row < rows) load(row, b0);
        }
    }
    if (acc == 0x9E3779B9u) *sink = acc;
}

/* Every segment in one launch. mode 0: no barrier (the streaming floor);
 * 1: a grid barrier between segments; 2: the barrier with each warp's first
 * batch of the next segment loaded before it. bar counts arrivals (zeroed
 * before the launch). */
template <int NB>
__global__ void __launch_bounds__(LAB_WARPS * 32, 1) lab_persistent_kernel(const __grid_constant__ LabChain c, int mode,
                                                                          unsigned *bar, unsigned *sink) {
    const int lane = threadIdx.x & 31;
    const int64_t W = (int64_t)gridDim.x * LAB_WARPS, gw = (int64_t)blockIdx.x * LAB_WARPS + (threadIdx.x >> 5);
    uint4 r[NB];
    unsigned acc = 0;
    if (gw < c.batches[0]) lab_load(r, lab_seg_src(c, 0), gw, lane);
    for (int s = 0; s < c.segs; s++) {
        const int64_t nb = c.batches[s & 3];
        const uint4 *src = lab_seg_src(c, s);
        for (int64_t b = gw; b < nb;) {
            acc ^= lab_fold(r, c.work);
            b += W;
            if (b < nb) lab_load(r, src, b, lane);
        }
        if (s + 1 == c.segs) break;
        const int64_t nn = c.batches[(s + 1) & 3];
        const uint4 *nxt = lab_seg_src(c, s + 1);
        if (mode == 2 && gw < nn) lab_load(r, nxt, gw, lane);
        if (mode >= 1) {
            __syncthreads();
            if (threadIdx.x == 0) {
                const unsigned target = (unsigned)(s + 1) * gridDim.x;
                asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(bar) : "memory");
                unsigned v;
                do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(bar) : "memory");
                while (v < target);
            }
            __syncthreads();
        }
        if (mode != 2 && gw < nn) lab_load(r, nxt, gw, lane);
    }
    if (acc == 0x9E3779B9u) *sink = acc;
}

__global__ void lab_fill_kernel(uint4 *p, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        p[i] = make_uint4((unsigned)i, (unsigned)(i >> 7) ^ 0x55u, 3u * (unsigned)i, ~(unsigned)i);
}

typedef void (*lab_seg_fn)(LabChain, int, unsigned *);

/* The segment kernel of (nb, depth), or null when not built. */
lab_seg_fn lab_rows_pick(int pattern, int batch_blocks) {
#define LAB_PICK(P, B) \
    if (pattern == P && batch_blocks == B) return lab_rows_kernel<P, B>;
    LAB_PICK(1, 16) LAB_PICK(2, 16) LAB_PICK(3, 16) LAB_PICK(4, 16) LAB_PICK(5, 16) LAB_PICK(1, 13) LAB_PICK(2, 13)
#undef LAB_PICK
    return nullptr;
}

lab_seg_fn lab_stage_pick(int nb, int depth, int paced) {
#define LAB_PICK(N, D, P) \
    if (nb == N && depth == D && paced == P) return lab_stage_kernel<N, D, P>;
    LAB_PICK(5, 0, 0) LAB_PICK(5, 1, 0) LAB_PICK(5, 2, 0) LAB_PICK(5, 1, 1) LAB_PICK(5, 2, 1)
    LAB_PICK(4, 3, 0) LAB_PICK(4, 3, 1)
#undef LAB_PICK
    return nullptr;
}

lab_seg_fn lab_seg_pick(int nb, int depth) {
#define LAB_PICK(N, D) \
    if (nb == N && depth == D) return lab_seg_kernel<N, D>;
    LAB_PICK(4, 0) LAB_PICK(4, 1) LAB_PICK(4, 2) LAB_PICK(4, 3)
    LAB_PICK(5, 0) LAB_PICK(5, 1) LAB_PICK(5, 2)
    LAB_PICK(8, 0) LAB_PICK(8, 1)
#undef LAB_PICK
    return nullptr;
}

} // namespace

#define LCK(call)                                                                                                     \
    do {                                                                                                              \
        cudaError_t e_ = (call);                                                                                      \
        if (e_ != cudaSuccess) {                                                                                      \
            rc = mu_fail(-8, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_));                    \
            goto done;                                                                                                \
        }                                                                                                             \
    } while (0)

extern "C" int mu_cuda_lab_chain(const mu_cuda_lab_chain_cfg *cfg, mu_cuda_lab_chain_result *out) {
    int rc = 0, dev = 0, sms = 0;
    uint4 *buf = nullptr;
    unsigned *bar = nullptr, *sink = nullptr;
    cudaStream_t st = nullptr;
    cudaGraph_t graph[2] = {nullptr, nullptr};
    cudaGraphExec_t exec[2] = {nullptr, nullptr};
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    LabChain c = {};
    const int nbl = cfg->nb;
    const int64_t batch_elems = 32 * nbl; /* uint4 per warp batch */
    int64_t region = 0;
    double total_bytes = 0;
    std::vector<float> t;
    const bool rows = cfg->pattern > 0;
    const bool staged = cfg->stage_rounds != 0; /* (-1: the staging kernel with no rounds) */
    const lab_seg_fn seg = staged ? lab_stage_pick(cfg->nb, cfg->depth, cfg->paced)
                           : rows ? lab_rows_pick(cfg->pattern, cfg->batch_blocks)
                                  : lab_seg_pick(cfg->nb, cfg->depth);
    float *act = nullptr, *image = nullptr;
    unsigned long long *tickets = nullptr;
    void (*pers)(LabChain, int, unsigned *, unsigned *) =
        nbl == 4 ? lab_persistent_kernel<4> : nbl == 5 ? lab_persistent_kernel<5> : lab_persistent_kernel<8>;
    const bool bulk = staged && (cfg->stage_mode == 4 || cfg->stage_mode == 5);
    const size_t smem = bulk ? (size_t)LAB_ROUND_FLOATS * 4 * LAB_ROUNDS_MAX
                             : (size_t)LAB_WARPS * (cfg->depth > 0 ? cfg->depth : 0) * batch_elems * 16;
    const int cluster = staged && cfg->stage_mode == 5 ? 2 : 1;
    memset(out, 0, sizeof *out);
    if (!seg || cfg->segs < 2 || (rows && (cfg->persistent || cfg->depth)) || (staged && (rows || cfg->persistent)) ||
        (bulk && (cfg->depth || cfg->stage_rounds > LAB_ROUNDS_MAX)))
        return mu_fail(-2, "lab chain: no kernel for %d loads per lane at depth %d (pattern %d, batches of %d)", cfg->nb,
                       cfg->depth, cfg->pattern, cfg->batch_blocks);
    LCK(cudaGetDevice(&dev));
    LCK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    /* mode 11 reads replica blockIdx % mode_arg of the act buffer, which holds one replica per SM */
    if ((cfg->stage_mode == 11 && (cfg->mode_arg < 1 || cfg->mode_arg > sms)) ||
        (cfg->stage_mode == 6 && cfg->mode_arg < 0))
        return mu_fail(-2, "lab chain: stage mode %d cannot take mode_arg %d (%d SMs)", cfg->stage_mode, cfg->mode_arg,
                       sms);
    c.pattern = cfg->pattern;
    for (int i = 0; i < 4; i++) {
        if (rows) { /* batches[] counts rows; 144 bytes per block */
            c.row_blocks[i] = cfg->row_blocks[i] > 0 ? cfg->row_blocks[i] : 26;
            const double row_bytes = 144.0 * c.row_blocks[i];
            c.batches[i] = std::max<int64_t>(1, (int64_t)(cfg->seg_mb[i] * 1e6 / row_bytes));
            region = std::max(region, (c.batches[i] * c.row_blocks[i] * 144 + 15) / 16);
        } else {
            c.batches[i] = std::max<int64_t>(1, (int64_t)(cfg->seg_mb[i] * 1e6 / (16.0 * batch_elems)));
            region = std::max(region, c.batches[i] * batch_elems);
        }
    }
    c.segs = cfg->segs;
    c.work = cfg->work;
    c.stage_ns = (uint32_t)(cfg->stage_us * 1e3);
    c.tail_ns = (uint32_t)(cfg->tail_us * 1e3);
    c.regions = (int)std::max<int64_t>(4, (int64_t)(2e9 / (16.0 * region))); /* 2 GB: no L2 reuse */
    c.region_elems = region;
    for (int s = 0; s < c.segs; s++)
        total_bytes += rows ? 144.0 * c.row_blocks[s & 3] * c.batches[s & 3] : 16.0 * batch_elems * c.batches[s & 3];
    LCK(cudaMalloc(&buf, (size_t)(16 * region) * c.regions));
    LCK(cudaMalloc(&bar, 64));
    LCK(cudaMalloc(&sink, 64));
    LCK(cudaMemset(bar, 0, 64));
    c.base = buf;
    c.counter = bar + 8;
    c.act_n = LAB_ROUND_FLOATS * LAB_ROUNDS_MAX; /* a vector per round (the 30B's 6656 floats, rounded up) */
    c.rounds = cfg->stage_rounds > 0 ? cfg->stage_rounds : 0;
    c.stage_mode = cfg->stage_mode;
    LCK(cudaMalloc(&tickets, sizeof(unsigned long long) * 2 * c.segs));
    LCK(cudaMemset(tickets, 0, sizeof(unsigned long long) * 2 * c.segs));
    LCK(cudaMalloc(&image, 8192));
    LCK(cudaMemset(image, 0, 8192));
    c.tickets = tickets, c.image = image, c.mode_arg = cfg->mode_arg;
    LCK(cudaMalloc(&act, sizeof(float) * c.act_n * sms)); /* (mode 11: up to a replica per block) */
    LCK(cudaMemset(act, 0, sizeof(float) * c.act_n * sms));
    c.act = act;
    LCK(cudaFuncSetAttribute(seg, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    LCK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    LCK(cudaEventCreate(&e0));
    LCK(cudaEventCreate(&e1));
    lab_fill_kernel<<<1024, 256, 0, st>>>(buf, region * c.regions);
    LCK(cudaGetLastError());
    /* graphs of one launch per segment: [0] with PDL, [1] without */
    for (int g = 0; g < 2; g++) {
        mu_cu_exec x = {};
        x.stream = st;
        x.pdl = g == 0;
        x.clusters = true; /* (the lab is built for sm_90 alone and run on Hopper) */
        LCK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        for (int s = 0; s < c.segs; s++) {
            const cudaError_t e = launch_pdl_cluster(seg, dim3(sms), dim3(LAB_WARPS * 32), smem, &x, cluster, c, s, sink);
            if (e != cudaSuccess) {
                cudaStreamEndCapture(st, &graph[g]);
                LCK(e);
            }
        }
        LCK(cudaStreamEndCapture(st, &graph[g]));
        LCK(cudaGraphInstantiate(&exec[g], graph[g], 0));
    }
    /* variants: 0 graph+PDL, 1 graph, 2 persistent no barrier, 3 barrier, 4 barrier + preload */
    for (int v = 0; v < (cfg->persistent ? 5 : 2); v++) {
        t.clear();
        for (int r = 0; r < cfg->reps + 1; r++) {
            LCK(cudaMemsetAsync(bar, 0, 4, st));
            LCK(cudaEventRecord(e0, st));
            if (v < 2) {
                LCK(cudaGraphLaunch(exec[v], st));
            } else {
                pers<<<sms, LAB_WARPS * 32, 0, st>>>(c, v - 2, bar, sink);
                LCK(cudaGetLastError());
            }
            LCK(cudaEventRecord(e1, st));
            LCK(cudaEventSynchronize(e1));
            float ms = 0;
            LCK(cudaEventElapsedTime(&ms, e0, e1));
            if (r) t.push_back(ms); /* the first is a warm-up */
        }
        std::sort(t.begin(), t.end());
        out->ms[v] = t[t.size() / 2];
    }
    out->gb = total_bytes / 1e9;
    out->sms = sms;
done:
    for (int g = 0; g < 2; g++) {
        if (exec[g]) cudaGraphExecDestroy(exec[g]);
        if (graph[g]) cudaGraphDestroy(graph[g]);
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (st) cudaStreamDestroy(st);
    cudaFree(buf);
    cudaFree(act);
    cudaFree(image);
    cudaFree(tickets);
    cudaFree(bar);
    cudaFree(sink);
    return rc;
}
