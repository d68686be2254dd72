/* cu_attn.cu — QK-norm + RoPE + KV append, split-K decode attention (a
 * tensor-core path for f16 KV and a plain f32 path), and the reducer that
 * merges the splits, divides once and applies the sigmoid gate.
 *
 * Attention for token t and KV head g is split into up to split_cap runs of
 * whole 32-row blocks (mu_splitk_owned); each block of the grid keeps the
 * online-softmax triple (max, sum, unnormalized weighted V) of its run in
 * log2 units and writes it as one partial. Rows are addressed through the
 * route the host chose: contiguous spans by plain offsets, wrapped rings
 * through the explicit origin (slot = phys_first + i, minus the capacity
 * past the end).
 */
#include <cooperative_groups.h>
#include <math.h>

#include "cuda/cu_device.cuh"
#include "cuda/cu_mmf_in.cuh"

/* ---- QK-norm + RoPE + KV append -----------------------------------------------------------
 * One warp per head (query heads, then KV heads; qkv_post_head in
 * cu_device.cuh, shared with the one-launch decode attention). */
__global__ void __launch_bounds__(256) qkv_post_kernel(const __grid_constant__ mu_cu_qkv_post a) {
    __shared__ float buf[8][128];
    pdl_trigger(); /* the next grid may launch now; it waits for this one to finish */
    pdl_wait();
    const int warp = threadIdx.x >> 5;
    const int hh = blockIdx.y * 8 + warp;
    if (hh >= a.n_head + a.n_head_kv) return;
    qkv_post_head(a, blockIdx.x, hh, buf[warp], true);
}

extern "C" cudaError_t mu_cu_qkv_post_launch(const mu_cu_qkv_post *a, const mu_cu_exec *x) {
    const int heads = a->n_head + a->n_head_kv;
    return launch_pdl(qkv_post_kernel, dim3(a->T, (heads + 7) / 8), dim3(256), 0, x, *a);
}

/* ---- attention: f32 path ------------------------------------------------------------------
 * 128 threads; tiles of 32 rows staged in shared memory as f32. Thread d
 * owns output dim d of every query head of the group. */
#define AF_MAXQ 16
template <bool KVF32>
__global__ void __launch_bounds__(128) attn_f32_kernel(const __grid_constant__ mu_cu_attn a) {
    __shared__ float qs[AF_MAXQ][128];
    __shared__ float ks[32][129];
    __shared__ float vs[32][128];
    __shared__ float ps[AF_MAXQ][32];
    __shared__ float ms[AF_MAXQ], ls[AF_MAXQ], cs[AF_MAXQ];
    pdl_trigger(); /* the next grid may launch now; it waits for this one to finish */
    pdl_wait();
    const int s = blockIdx.x, g = blockIdx.y, t = blockIdx.z;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int per_kv = a.n_head / a.n_head_kv;
    const mu_cu_rec_layer lt = rec_layer(a.recs, t, a.layer);
    const int S = mu_cu_attn_splits(lt.n_visible, a.split_cap);
    if (s >= S) return;
    int64_t r0, nr;
    splitk_owned(lt.n_visible, S, s, r0, nr);
    const int h0 = g * per_kv;
    for (int i = tid; i < per_kv * 128; i += 128) qs[i / 128][i % 128] = a.q[((int64_t)t * a.n_head + h0) * 128 + i];
    if (tid < per_kv) {
        ms[tid] = -INFINITY;
        ls[tid] = 0.f;
    }
    float acc[AF_MAXQ];
#pragma unroll
    for (int h = 0; h < AF_MAXQ; h++) acc[h] = 0.f;
    const int64_t row_elems = (int64_t)a.n_head_kv * 128;
    const void *const kplane = token_plane(a.kc, a.kc_rows, t), *const vplane = token_plane(a.vc, a.vc_rows, t);
    for (int64_t tile = 0; tile < nr; tile += 32) {
        __syncthreads();
        for (int j = 0; j < 32; j++) {
            const int64_t i = tile + j;
            float kv = 0.f, vv = 0.f;
            if (i < nr) {
                const int64_t off = row_slot(lt, r0 + i, a.capacity) * row_elems + g * 128 + tid;
                if (KVF32) {
                    kv = ((const float *)kplane)[off];
                    vv = ((const float *)vplane)[off];
                } else {
                    kv = f16_to_f32(((const uint16_t *)kplane)[off]);
                    vv = f16_to_f32(((const uint16_t *)vplane)[off]);
                }
            }
            ks[j][tid] = kv;
            vs[j][tid] = vv;
        }
        __syncthreads();
        for (int idx = tid; idx < per_kv * 32; idx += 128) {
            const int h = idx >> 5, j = idx & 31;
            float sc = 0.f;
            for (int d = 0; d < 128; d++) sc += qs[h][d] * ks[j][d];
            ps[h][j] = tile + j < nr ? sc * a.scale_log2 : -INFINITY;
        }
        __syncthreads();
        for (int h = warp; h < per_kv; h += 4) {
            const float sc = ps[h][lane];
            const float mt = warp_max(sc);
            const float m_old = ms[h];
            const float m_new = fmaxf(m_old, mt);
            const float corr = m_old == -INFINITY ? 0.f : exp2f(m_old - m_new);
            const float p = sc == -INFINITY ? 0.f : exp2f(sc - m_new);
            const float psum = warp_sum(p);
            ps[h][lane] = p;
            __syncwarp();
            if (lane == 0) {
                ls[h] = ls[h] * corr + psum;
                ms[h] = m_new;
                cs[h] = corr;
            }
        }
        __syncthreads();
#pragma unroll
        for (int h = 0; h < AF_MAXQ; h++) {
            if (h < per_kv) {
                float o = acc[h] * cs[h];
                for (int j = 0; j < 32; j++) o += ps[h][j] * vs[j][tid];
                acc[h] = o;
            }
        }
    }
    __syncthreads();
    const int64_t pbase = ((int64_t)t * a.n_head + h0) * a.split_cap + s;
#pragma unroll
    for (int h = 0; h < AF_MAXQ; h++) {
        if (h < per_kv) {
            const int64_t p = pbase + (int64_t)h * a.split_cap;
            a.part_o[p * 128 + tid] = acc[h];
            if (tid == 0) {
                a.part_m[p] = ms[h];
                a.part_l[p] = ls[h];
            }
        }
    }
}

/* ---- attention: tensor-core path (f16 KV, head_dim 128, <= 16 heads per KV head) ---------
 * Per warp, 16-row steps: S[16 heads][16 rows] = Q K^T with mma.m16n8k16 (Q
 * split into f16 hi + lo parts so the scores keep ~f32 accuracy), online
 * softmax in registers, O[16][128] += P V with P in f16. Each thread copies
 * its K fragments (16-byte chunks) from global memory into its own slots of
 * a two-stage shared-memory ring by cp.async, the warp's next step in
 * flight while the current one is computed (the thread reads back only
 * what it copied, so its own cp.async.wait_group orders them); its V
 * fragments it loads into registers at the start of the step, in flight
 * during Q K^T and the softmax:
 *   QK^T: thread (g = lane/4, q = lane%4) loads 16-byte chunks q, q+4, q+8,
 *         q+12 of row g; the head dims are permuted consistently in Q and K
 *         (any permutation of the summed index leaves the dot unchanged);
 *   PV:   thread loads dims 16g..16g+15 of rows 2q, 2q+1, 2q+8, 2q+9; output
 *         column n of n-tile j is dim 16n + j, so a thread ends up owning
 *         dims 32q .. 32q+31 of heads g and g+8. */

/* Head dim of logical k index (2q + e) (b0/a0/a1) in k-step s; +2 for b1/a2/a3. */
__device__ __forceinline__ int qk_dim(int s, int q, int e) { return 8 * q + 32 * (s >> 1) + 4 * (s & 1) + e; }

/* The ring: stages x warps x 8 chunks x 32 lanes of 16 bytes (32 KB); after
 * the loop it holds the merge state too. Shared memory per block is what
 * decides here (docs/lab-log.md, version 11): K and V both in a ring
 * (65 KB a block) measured 2-4% faster than register loads at depths
 * 2048-32768, K alone (33 KB) 1-4% faster again; the K+V ring beside a
 * separate 32 KB merge buffer (97 KB), or at 3 blocks per SM, 12% and 30%
 * slower. */
#define ATT_RING_CHUNKS 8
#define ATT_RING_BYTES (2 * 4 * ATT_RING_CHUNKS * 32 * 16)


__global__ void __launch_bounds__(128) attn_mma_kernel(const __grid_constant__ mu_cu_attn a) {
    extern __shared__ uint4 att_ring[];
    /* after the loop, the merge state in the ring */
    float(*so)[16][128] = reinterpret_cast<float(*)[16][128]>(att_ring);
    __shared__ float sm[4][16], sl[4][16], sf[4][16];
    pdl_trigger(); /* the next grid may launch now; it waits for this one to finish */
    const int s = blockIdx.x, g = blockIdx.y, t = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    const int per_kv = a.n_head / a.n_head_kv;
    /* the step's records (copied before the step's first launch) */
    const mu_cu_rec_layer lt = rec_layer(a.recs, t, a.layer);
    const int S = mu_cu_attn_splits(lt.n_visible, a.split_cap);
    if (s >= S) return;
    int64_t r0, nr;
    splitk_owned(lt.n_visible, S, s, r0, nr);
    const int h0 = g * per_kv;
    const int64_t row_elems = (int64_t)a.n_head_kv * 128;
    const uint16_t *kc = (const uint16_t *)token_plane(a.kc, a.kc_rows, t) + g * 128,
                   *vc = (const uint16_t *)token_plane(a.vc, a.vc_rows, t) + g * 128;
    const int64_t steps = (nr + 15) / 16;

    /* this thread's chunk c of ring stage k */
    auto slot = [&](int k, int c) { return att_ring + (((k * 4 + warp) * ATT_RING_CHUNKS + c) * 32 + lane); };
    /* step st's K fragments into stage k: rows rb + gq (n-tile 0) and rb + 8
     * + gq (n-tile 1), chunks 0-7; rows past the run as zeros */
    auto issue = [&](int64_t st, int k) {
        const int64_t rb = st * 16;
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            const int64_t i = rb + nt * 8 + gq;
            const bool on = i < nr;
            const uint16_t *p = on ? kc + row_slot(lt, r0 + i, a.capacity) * row_elems : kc;
#pragma unroll
            for (int c = 0; c < 4; c++) cp_async16(slot(k, nt * 4 + c), p + 8 * (tq + 4 * c), on);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    /* A decoded token's rows but its own (the last, appended by the launch
     * before) are written by no launch of the step: every split but the
     * last issues its first K step before the wait. (A chunk's rows are its
     * own: after the wait.) */
    const bool early = a.T == 1 && s < S - 1;
    if (early && warp < steps) issue(warp, 0);
    pdl_wait();
    if (!early && warp < steps) issue(warp, 0);

    /* Q fragments, scaled into log2 units, hi and lo halves */
    uint32_t qa_hi[8][4], qa_lo[8][4];
    const float *qb = a.q + ((int64_t)t * a.n_head + h0) * 128;
#pragma unroll
    for (int ks = 0; ks < 8; ks++) {
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int head = gq + (r & 1) * 8;
            const int d = qk_dim(ks, tq, 0) + ((r >> 1) ? 2 : 0);
            float v0 = 0.f, v1 = 0.f;
            if (head < per_kv) {
                v0 = qb[head * 128 + d] * a.scale_log2;
                v1 = qb[head * 128 + d + 1] * a.scale_log2;
            }
            const __half2 hi = __floats2half2_rn(v0, v1);
            const float2 hf = __half22float2(hi);
            qa_hi[ks][r] = *reinterpret_cast<const uint32_t *>(&hi);
            qa_lo[ks][r] = pack_half2(v0 - hf.x, v1 - hf.y);
        }
    }

    float o[16][4];
#pragma unroll
    for (int j = 0; j < 16; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    int stage = 0;
    for (int64_t st = warp; st < steps; st += 4, stage ^= 1) {
        const int64_t rb = st * 16; /* first row of the step within the run */
        /* V: rows rb + 2tq, +1, +8, +9; dims 16gq .. 16gq+15 (in flight during Q K^T) */
        uint4 vw[4][2];
#pragma unroll
        for (int rr = 0; rr < 4; rr++) {
            const int64_t i = rb + (rr >> 1) * 8 + 2 * tq + (rr & 1);
            if (i < nr) {
                const uint16_t *p = vc + row_slot(lt, r0 + i, a.capacity) * row_elems + 16 * gq;
                vw[rr][0] = __ldg(reinterpret_cast<const uint4 *>(p));
                vw[rr][1] = __ldg(reinterpret_cast<const uint4 *>(p + 8));
            } else {
                vw[rr][0] = vw[rr][1] = make_uint4(0, 0, 0, 0);
            }
        }
        if (st + 4 < steps) {
            issue(st + 4, stage ^ 1); /* (its slots were read into registers last step) */
            asm volatile("cp.async.wait_group 1;" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;" ::: "memory");
        }
        uint4 kw[2][4];
#pragma unroll
        for (int c = 0; c < 8; c++) kw[c >> 2][c & 3] = *slot(stage, c);
        float sc[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            /* hi and lo parts in separate accumulators: two chains of 8 mma, not one of 16 */
            float slo[4] = {0.f, 0.f, 0.f, 0.f};
            sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.f;
#pragma unroll
            for (int ks = 0; ks < 8; ks++) {
                const uint32_t b0 = word_of(kw[nt][ks >> 1], 2 * (ks & 1));
                const uint32_t b1 = word_of(kw[nt][ks >> 1], 2 * (ks & 1) + 1);
                mma16816(sc[nt], qa_hi[ks], b0, b1);
                mma16816(slo, qa_lo[ks], b0, b1);
            }
#pragma unroll
            for (int r = 0; r < 4; r++) sc[nt][r] += slo[r];
            /* C: [0] (head gq, row 2tq), [1] (gq, 2tq+1), [2] (gq+8, 2tq), [3] (gq+8, 2tq+1) */
#pragma unroll
            for (int r = 0; r < 4; r++)
                if (rb + nt * 8 + 2 * tq + (r & 1) >= nr) sc[nt][r] = -INFINITY;
        }
        float mx0 = fmaxf(fmaxf(sc[0][0], sc[0][1]), fmaxf(sc[1][0], sc[1][1]));
        float mx1 = fmaxf(fmaxf(sc[0][2], sc[0][3]), fmaxf(sc[1][2], sc[1][3]));
        mx0 = fmaxf(mx0, __shfl_xor_sync(MU_FULL, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(MU_FULL, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(MU_FULL, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(MU_FULL, mx1, 2));
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        const float c0 = m0 == -INFINITY ? 0.f : exp2f(m0 - mn0);
        const float c1 = m1 == -INFINITY ? 0.f : exp2f(m1 - mn1);
        m0 = mn0;
        m1 = mn1;
        uint32_t pa[4];
        float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            const float p0 = exp2f(sc[nt][0] - mn0), p1 = exp2f(sc[nt][1] - mn0);
            const float p2 = exp2f(sc[nt][2] - mn1), p3 = exp2f(sc[nt][3] - mn1);
            const __half2 hA = __floats2half2_rn(p0, p1), hB = __floats2half2_rn(p2, p3);
            const float2 fA = __half22float2(hA), fB = __half22float2(hB);
            ps0 += fA.x + fA.y; /* the sum uses the same rounded weights as P V */
            ps1 += fB.x + fB.y;
            pa[nt * 2 + 0] = *reinterpret_cast<const uint32_t *>(&hA); /* a0 / a2: head gq   */
            pa[nt * 2 + 1] = *reinterpret_cast<const uint32_t *>(&hB); /* a1 / a3: head gq+8 */
        }
        l0 = l0 * c0 + ps0;
        l1 = l1 * c1 + ps1;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            o[j][0] *= c0;
            o[j][1] *= c0;
            o[j][2] *= c1;
            o[j][3] *= c1;
            const uint32_t sel = (j & 1) ? 0x7632u : 0x5410u;
            const int wi = j >> 1; /* word within the 8 words of dims 16gq.. */
            const uint32_t w0 = word_of(vw[0][wi >> 2], wi & 3), w1 = word_of(vw[1][wi >> 2], wi & 3);
            const uint32_t w2 = word_of(vw[2][wi >> 2], wi & 3), w3 = word_of(vw[3][wi >> 2], wi & 3);
            mma16816(o[j], pa, __byte_perm(w0, w1, sel), __byte_perm(w2, w3, sel));
        }
    }
    l0 += __shfl_xor_sync(MU_FULL, l0, 1);
    l0 += __shfl_xor_sync(MU_FULL, l0, 2);
    l1 += __shfl_xor_sync(MU_FULL, l1, 1);
    l1 += __shfl_xor_sync(MU_FULL, l1, 2);
    /* per-warp state to shared memory (over the ring: every warp is past
     * its loop), then merge the four warps */
    __syncthreads();
#pragma unroll
    for (int j = 0; j < 16; j++) {
        so[warp][gq][32 * tq + j] = o[j][0];
        so[warp][gq][32 * tq + 16 + j] = o[j][1];
        so[warp][gq + 8][32 * tq + j] = o[j][2];
        so[warp][gq + 8][32 * tq + 16 + j] = o[j][3];
    }
    if (tq == 0) {
        sm[warp][gq] = m0;
        sm[warp][gq + 8] = m1;
        sl[warp][gq] = l0;
        sl[warp][gq + 8] = l1;
    }
    __syncthreads();
    /* the merge weights once per head (thread h), not by every thread */
    const int d = threadIdx.x;
    const int64_t pbase = ((int64_t)t * a.n_head + h0) * a.split_cap + s;
    if (d < per_kv) {
        const int h = d;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < 4; w++) M = fmaxf(M, sm[w][h]);
        float L = 0.f;
#pragma unroll
        for (int w = 0; w < 4; w++) {
            const float f = sm[w][h] == -INFINITY ? 0.f : exp2f(sm[w][h] - M);
            L += f * sl[w][h];
            sf[w][h] = f;
        }
        const int64_t p = pbase + (int64_t)h * a.split_cap;
        a.part_m[p] = M;
        a.part_l[p] = L;
    }
    __syncthreads();
    for (int h = 0; h < per_kv; h++) {
        float O = 0.f;
#pragma unroll
        for (int w = 0; w < 4; w++)
            if (sf[w][h] != 0.f) O += sf[w][h] * so[w][h][d];
        a.part_o[(pbase + (int64_t)h * a.split_cap) * 128 + d] = O;
    }
}

extern "C" cudaError_t mu_cu_attention(const mu_cu_attn *a, bool use_mma, const mu_cu_exec *x) {
    const dim3 grid(a->split_cap, a->n_head_kv, a->T);
    if (use_mma) {
        static bool ring_set[MU_CU_MAX_DEVICES];
        int dev = 0;
        cudaError_t e = current_device(&dev);
        if (e != cudaSuccess) return e;
        if (!ring_set[dev]) {
            e = cudaFuncSetAttribute(attn_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_RING_BYTES);
            if (e != cudaSuccess) return e;
            ring_set[dev] = true;
        }
        return launch_pdl(attn_mma_kernel, grid, dim3(128), ATT_RING_BYTES, x, *a);
    }
    if (a->kv_f32) return launch_pdl(attn_f32_kernel<true>, grid, dim3(128), 0, x, *a);
    return launch_pdl(attn_f32_kernel<false>, grid, dim3(128), 0, x, *a);
}

/* The raw gate of element i of token t: its parts (T = 1) added in order. */
__device__ __forceinline__ float gate_raw(const mu_cu_reduce &a, int t, int64_t i) {
    const float *g = a.gate + (int64_t)t * a.gate_stride + i;
    float v = __ldcg(g);
    for (int p = 1; p < a.gate_parts; p++) v += __ldcg(g + (int64_t)p * a.n_head * a.head_dim);
    return v;
}

/* ---- reducer: merge the splits, divide once, gate ------------------------------------------
 * 512 threads per (token, head): the split maxima and weights in parallel,
 * then four groups of 128 (one dim each) sum a quarter of the splits. */
__global__ void __launch_bounds__(512) attn_reduce_kernel(const __grid_constant__ mu_cu_reduce a) {
    __shared__ float sf[512], red[33], so[4][128];
    pdl_trigger(); /* the next grid may launch now; it waits for this one to finish */
    pdl_wait();
    const int h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x;
    const int g = tid >> 7, d = tid & 127;
    const int64_t base = ((int64_t)t * a.n_head + h) * a.split_cap;
    /* every load in one round, before the split count is known (the
     * buffers hold split_cap partials; values past S are masked below) */
    const float ms_raw = tid < a.split_cap ? __ldcg(a.part_m + base + tid) : -INFINITY;
    const float pl = tid < a.split_cap ? __ldcg(a.part_l + base + tid) : 0.f;
    const float o_first = g < a.split_cap ? __ldcg(a.part_o + (base + g) * 128 + d) : 0.f;
    const float gv = (a.gate && tid < 128) ? gate_raw(a, t, h * 128 + d) : 0.f;
    const mu_cu_rec_layer lt = rec_layer(a.recs, t, a.layer);
    const int S = mu_cu_attn_splits(lt.n_visible, a.split_cap);
    const float ms = tid < S ? ms_raw : -INFINITY;
    /* block max */
    float mx = warp_max(ms);
    if ((tid & 31) == 0) red[tid >> 5] = mx;
    __syncthreads();
    if (tid < 32) {
        float v = tid < 16 ? red[tid] : -INFINITY;
        v = warp_max(v);
        if (tid == 0) red[32] = v;
    }
    __syncthreads();
    const float M = red[32];
    const float f = ms == -INFINITY ? 0.f : exp2f(ms - M);
    sf[tid] = f;
    const float L = block_sum(tid < S ? f * pl : 0.f, red);
    float O = 0.f;
    if (g < S && sf[g] != 0.f) O += sf[g] * o_first;
#pragma unroll 8
    for (int s = g + 4; s < S; s += 4)
        if (sf[s] != 0.f) O += sf[s] * __ldcg(a.part_o + (base + s) * 128 + d);
    so[g][d] = O;
    __syncthreads();
    if (tid >= 128) return;
    float o = (so[0][d] + so[1][d] + so[2][d] + so[3][d]) * (1.0f / L);
    if (a.gate) o *= 1.0f / (1.0f + expf(-gv));
    const int64_t off = (int64_t)t * a.out_stride + h * 128 + d;
    a.out.x[off] = o;
    if (a.out.h) a.out.h[off] = f32_to_f16(o);
    if (a.out.q) {
        const int64_t blk = off - (d & 31); /* start of this warp's 32-element block */
        quantize_block_warp(o, a.out.q + blk, a.out.ds + blk / 16 * 2);
    }
    if (a.out.xp) mmf_in_put1(static_cast<uint2 *>(a.out.xp), a.out.xp_nb, t, h * 128 + d, o);
}

extern "C" cudaError_t mu_cu_attn_reduce(const mu_cu_reduce *a, const mu_cu_exec *x) {
    return launch_pdl(attn_reduce_kernel, dim3(a->n_head, a->T), dim3(512), 0, x, *a);
}

/* ---- decode of a short span in one launch --------------------------------------------------
 * Block h (128 threads) owns query head h of the single token. Warp 0
 * normalizes and ropes the query head; warp 1 the group's K head, with its
 * raw V. The group's first block appends K and V to the planes; every block
 * keeps them in shared memory and uses them for the token's own row (its
 * slot), so no block waits for another. The cached rows do not depend on
 * this step: their first K rows (a thread per row) and V rows (16 per warp)
 * are loaded before the wait, while the qkv launch finishes.
 * Then the scores, the block's softmax, P V by the four warps (a lane per
 * 4 dims), and the output divided, gated and quantized as the reducer does.
 * (The host routes here only steps whose spans are all short.)
 * CLUSTER: a cluster of C blocks per query head, block c taking the c-th
 * run of ceil(n / C) rows, so that a span of up to C x 128 rows costs about
 * what 128 rows cost one block; the blocks' (max, sum, unnormalized o) meet
 * in rank 0 through distributed shared memory (no global round trip, no
 * reducer launch). */
/* q . k for an f16 K row held as 16 x 16 bytes. */
__device__ __forceinline__ float dot_f16_row(const uint4 (&w)[16], const float *qs) {
    float acc = 0.f;
#pragma unroll
    for (int c = 0; c < 16; c++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&((const uint32_t *)&w[c])[e]));
            acc += qs[8 * c + 2 * e] * f.x + qs[8 * c + 2 * e + 1] * f.y;
        }
    return acc;
}

template <bool KVF32>
__device__ __forceinline__ float row_dot(const void *plane, int64_t off, const float *qs) {
    float acc = 0.f;
    if (KVF32) {
        const float4 *p = reinterpret_cast<const float4 *>((const float *)plane + off);
#pragma unroll 8
        for (int c = 0; c < 32; c++) {
            const float4 k = __ldg(p + c);
            acc += qs[4 * c] * k.x + qs[4 * c + 1] * k.y + qs[4 * c + 2] * k.z + qs[4 * c + 3] * k.w;
        }
    } else {
        const uint4 *p = reinterpret_cast<const uint4 *>((const uint16_t *)plane + off);
        uint4 w[16];
#pragma unroll
        for (int c = 0; c < 16; c++) w[c] = __ldg(p + c);
        acc = dot_f16_row(w, qs);
    }
    return acc;
}

/* Dims 4 lane .. 4 lane + 3 of a V row: raw (16 bytes f32, 8 f16), then as floats. */
template <bool KVF32>
__device__ __forceinline__ uint4 v_raw(const void *plane, int64_t off) {
    if (KVF32) return __ldg(reinterpret_cast<const uint4 *>((const float *)plane + off));
    const uint2 w = __ldg(reinterpret_cast<const uint2 *>((const uint16_t *)plane + off));
    return make_uint4(w.x, w.y, 0u, 0u);
}
template <bool KVF32>
__device__ __forceinline__ float4 v_float(const uint4 w) {
    if (KVF32) return make_float4(__uint_as_float(w.x), __uint_as_float(w.y), __uint_as_float(w.z), __uint_as_float(w.w));
    const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&w.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2 *>(&w.y));
    return make_float4(a.x, a.y, b.x, b.y);
}

#define AD_VR 16 /* V rows per warp per round */
template <bool KVF32, bool CLUSTER>
__global__ void __launch_bounds__(128) attn_decode_kernel(const __grid_constant__ mu_cu_attn_decode a) {
    __shared__ float qs[128], ks[128], vs[128], buf[2][128];
    __shared__ float sc[MU_CU_ATTN_SHORT_MAX];
    __shared__ float red[33];
    __shared__ __align__(16) float po[4][128];
    __shared__ float part_o[CLUSTER ? 128 : 1], part_ml[2]; /* CLUSTER: this block's run, for rank 0 */
    pdl_trigger(); /* the next grid may launch now; it waits for this one to finish */
    const mu_cu_qkv_post &qp = a.qp;
    const int C = CLUSTER ? a.cluster : 1;
    const int h = blockIdx.x / C, c = blockIdx.x % C, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int per_kv = qp.n_head / qp.n_head_kv, g = h / per_kv;
    const bool writer = h % per_kv == 0 && c == 0;
    /* the step's records (copied before the step's first launch) */
    const mu_cu_rec_layer lt = rec_layer(qp.recs, 0, qp.layer);
    const int64_t n = lt.n_visible, cap = a.at.capacity;
    if (n < 1 || n > a.short_max) __trap(); /* a route error: fail closed */
    /* this block's rows: r0 .. r0 + nr - 1 of the span (all of it unless CLUSTER) */
    int64_t r0 = 0, nr = n;
    if (CLUSTER) {
        const int64_t per = (n + C - 1) / C;
        r0 = c * per < n ? c * per : n;
        nr = (r0 + per < n ? r0 + per : n) - r0;
    }
    if (nr > MU_CU_ATTN_SHORT_MAX) __trap(); /* (the host keeps short_max <= C x that) */
    const int64_t row_elems = (int64_t)qp.n_head_kv * 128, col = (int64_t)g * 128;
    /* the cached rows' first round (f16 K: a row per thread in registers),
     * before the wait: no launch of this step writes them (the token's own
     * row, appended here, is the slot left out) */
    uint4 kw[16];
    bool k_in_regs = false;
    if (!KVF32 && tid < nr) {
        const int64_t slot = row_slot(lt, r0 + tid, cap);
        if (slot != lt.slot) {
            const uint4 *p = reinterpret_cast<const uint4 *>((const uint16_t *)a.at.kc + slot * row_elems + col);
#pragma unroll
            for (int c = 0; c < 16; c++) kw[c] = __ldg(p + c);
            k_in_regs = true;
        }
    }
    uint4 vw[AD_VR];
#pragma unroll
    for (int r = 0; r < AD_VR; r++) {
        const int64_t i = warp * AD_VR + r;
        vw[r] = make_uint4(0u, 0u, 0u, 0u);
        if (i < nr) {
            const int64_t slot = row_slot(lt, r0 + i, cap);
            if (slot != lt.slot) vw[r] = v_raw<KVF32>(a.at.vc, slot * row_elems + col + 4 * lane);
        }
    }
    pdl_wait(); /* the projections come after */
    /* the gate, raw (sigmoid below) */
    const float gv = a.rd.gate ? gate_raw(a.rd, 0, h * 128 + tid) : 0.f;
    if (warp == 0) {
        float x[4];
        float4 v;
        qkv_post_values(qp, 0, h, buf[0], false, x, v);
#pragma unroll
        for (int j = 0; j < 4; j++) qs[4 * lane + j] = x[j] * a.at.scale_log2;
    } else if (warp == 1) {
        float x[4];
        float4 v;
        qkv_post_values(qp, 0, qp.n_head + g, buf[1], true, x, v);
        if (writer) qkv_post_store(qp, 0, qp.n_head + g, x, v, true);
        const float vv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; j++) { /* as the planes hold them */
            ks[4 * lane + j] = KVF32 ? x[j] : f16_to_f32(f32_to_f16(x[j]));
            vs[4 * lane + j] = KVF32 ? vv[j] : f16_to_f32(f32_to_f16(vv[j]));
        }
    }
    __syncthreads();
    /* scores, a thread per row */
    float mx = -INFINITY;
    for (int64_t i = tid; i < nr; i += 128) {
        const int64_t slot = row_slot(lt, r0 + i, cap);
        float d = 0.f;
        if (slot == lt.slot) {
#pragma unroll 8
            for (int j = 0; j < 128; j++) d += qs[j] * ks[j];
        } else if (!KVF32 && i == tid && k_in_regs) {
            d = dot_f16_row(kw, qs);
        } else {
            d = row_dot<KVF32>(a.at.kc, slot * row_elems + col, qs);
        }
        sc[i] = d;
        mx = fmaxf(mx, d);
    }
    mx = warp_max(mx);
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    const float M = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
    float ls = 0.f;
    for (int64_t i = tid; i < nr; i += 128) {
        const float p = exp2f(sc[i] - M);
        sc[i] = p;
        ls += p;
    }
    const float L = block_sum(ls, red); /* (its barriers also publish sc) */
    /* P V: rounds of 64 rows, 16 per warp, a lane per 4 dims */
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int64_t v0 = 0; v0 < nr; v0 += 4 * AD_VR) {
        if (v0 > 0) {
#pragma unroll
            for (int r = 0; r < AD_VR; r++) {
                const int64_t i = v0 + warp * AD_VR + r;
                vw[r] = make_uint4(0u, 0u, 0u, 0u);
                if (i < nr) {
                    const int64_t slot = row_slot(lt, r0 + i, cap);
                    if (slot != lt.slot) vw[r] = v_raw<KVF32>(a.at.vc, slot * row_elems + col + 4 * lane);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < AD_VR; r++) {
            const int64_t i = v0 + warp * AD_VR + r;
            if (i >= nr) break;
            const float p = sc[i];
            const float4 v = row_slot(lt, r0 + i, cap) == lt.slot
                                 ? make_float4(vs[4 * lane], vs[4 * lane + 1], vs[4 * lane + 2], vs[4 * lane + 3])
                                 : v_float<KVF32>(vw[r]);
            acc.x += p * v.x;
            acc.y += p * v.y;
            acc.z += p * v.z;
            acc.w += p * v.w;
        }
    }
    reinterpret_cast<float4 *>(po[warp])[lane] = acc;
    __syncthreads();
    const int d = tid;
    float o;
    if constexpr (!CLUSTER) {
        o = (po[0][d] + po[1][d] + po[2][d] + po[3][d]) * (1.0f / L);
    } else {
        /* the runs merged in rank 0 (an empty run: max -inf, weight 0);
         * the second sync keeps every block's shared memory until rank 0
         * has read it */
        part_o[d] = po[0][d] + po[1][d] + po[2][d] + po[3][d];
        if (d == 0) part_ml[0] = nr > 0 ? M : -INFINITY, part_ml[1] = L;
#if !MU_CU_HOPPER_CODE
        __trap(); /* no clusters in this code: the host never launches it here (launch_pdl_cluster) */
        o = 0.f; /* (unreached) */
#else
        cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
        cl.sync();
        float Mx = -INFINITY, Ls = 0.f, O = 0.f;
        if (c == 0) {
            for (int k = 0; k < C; k++) Mx = fmaxf(Mx, cl.map_shared_rank(part_ml, k)[0]);
            for (int k = 0; k < C; k++) {
                const float *ml = cl.map_shared_rank(part_ml, k);
                const float f = ml[0] == -INFINITY ? 0.f : exp2f(ml[0] - Mx);
                Ls += f * ml[1];
                O += f * cl.map_shared_rank(part_o, k)[d];
            }
        }
        cl.sync();
        if (c != 0) return;
        o = O * (1.0f / Ls);
#endif
    }
    if (a.rd.gate) o *= 1.0f / (1.0f + expf(-gv));
    const int64_t off = h * 128 + d;
    a.rd.out.x[off] = o;
    if (a.rd.out.h) a.rd.out.h[off] = f32_to_f16(o);
    if (a.rd.out.q) {
        const int64_t blk = off - (d & 31); /* start of this warp's 32-element block */
        quantize_block_warp(o, a.rd.out.q + blk, a.rd.out.ds + blk / 16 * 2);
    }
}

extern "C" cudaError_t mu_cu_attn_decode_launch(const mu_cu_attn_decode *a, const mu_cu_exec *x) {
    const int C = a->cluster;
    if (a->qp.T != 1 || C < 1 || C > MU_CU_ATTN_CLUSTER_MAX || a->short_max < 1 ||
        a->short_max > C * MU_CU_ATTN_SHORT_MAX || a->qp.head_dim != 128)
        return cudaErrorInvalidValue;
    void (*kernel)(mu_cu_attn_decode) = a->qp.kv_f32 ? (C > 1 ? attn_decode_kernel<true, true> : attn_decode_kernel<true, false>)
                                                      : (C > 1 ? attn_decode_kernel<false, true> : attn_decode_kernel<false, false>);
    return launch_pdl_cluster(kernel, dim3(a->qp.n_head * C), dim3(128), 0, x, C, *a);
}
