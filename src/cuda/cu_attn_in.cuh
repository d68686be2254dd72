/* cu_attn_in.cuh — decode attention formed in Wo's staging (mu_cu_mv.attn_in,
 * matvec QI 3). Included by cu_kernels.cu after the staging helpers.
 *
 * At short spans the attention launch between qkv + gate and Wo is a chain
 * of round trips with almost no bytes: its own release, the projections'
 * loads, QK-norm/RoPE, the scores, the softmax, P V, the int8 result
 * stored, then Wo's release and Wo's staging loading that result again
 * (about 5.4 + 2 us a layer on one H200 at depth 0, docs/cuda-notes.md
 * version 14). Here every block of the Wo launch computes the whole
 * token's attention itself, from the projections in L2 and the span's
 * cached rows (copied into shared memory before the wait, while qkv + gate
 * streams), and stages the result as its input: one launch and one
 * staging fewer a layer. The arithmetic is the tensor-core split kernel's
 * (attn_mma_kernel: Q in f16 hi + lo parts, P in f16 with the sum of the
 * rounded weights), with the whole span in one step, so no online rescaling.
 *
 * Warp roles (nw warps): query heads warp, warp + nw, ..., and KV head
 * warp in the first round (qkv_post_raw / qkv_post_finish, the norm weights
 * and the cos/sin table staged before the wait); Q K^T jobs (KV group, 8-row
 * n-tile); the softmax a warp per query head; P V jobs (KV group, 8-dim
 * n-tile); the gate and the int8 groups a float4 per thread. */

/* The region past the staged input and the groups' scales. */
__device__ __forceinline__ uint8_t *attn_in_region(uint8_t *sm, int64_t cols) {
    return sm + kq_stage_bytes(cols) + (size_t)(cols / 16) * 8;
}

/* Before the wait: the span's cached rows into the K and V tiles by
 * cp.async (rows past the span as zeros: P V reads whole 16-row steps). No
 * launch of this step writes them; the token's own row (the span's last,
 * appended by block 0 of this launch) is written into the tiles after the
 * wait. A span the route cannot hold traps (fails closed). */
__device__ __noinline__ void attn_in_preload(const mu_cu_attn_decode &ad, uint8_t *reg, bool rows) {
    const mu_cu_qkv_post &qp = ad.qp;
    const mu_cu_attn_in_layout Lo = mu_cu_attn_in_smem(qp.n_head, qp.n_head_kv, ad.short_max, (int)(blockDim.x >> 5));
    const int nr = mu_cu_attn_in_rows(ad.short_max), kvh = qp.n_head_kv;
    const mu_cu_rec_layer lt = rec_layer(qp.recs, 0, qp.layer);
    int64_t n = lt.n_visible;
    const int64_t cap = ad.at.capacity;
    if (n < 1 || n > ad.short_max || row_slot(lt, n - 1, cap) != lt.slot) __trap();
    /* the arguments and the span's rows into shared memory: the phases
     * after the wait read them there, not through the parameter space's
     * generic window */
    for (int i = threadIdx.x; i < (int)(sizeof(mu_cu_attn_decode) / 4); i += blockDim.x)
        reinterpret_cast<uint32_t *>(reg + Lo.a)[i] = reinterpret_cast<const uint32_t *>(&ad)[i];
    if (threadIdx.x == 0) *reinterpret_cast<int *>(reg + Lo.n) = (int)n;
    if (!rows) n = 0; /* (timing: no rows copied) */
    const int chunks = kvh * nr * 16; /* 16-byte chunks of a tile */
    const int64_t row_elems = (int64_t)kvh * 128;
    for (int idx = threadIdx.x; idx < 2 * chunks; idx += blockDim.x) {
        const bool isv = idx >= chunks;
        const int j = isv ? idx - chunks : idx, c = j & 15, gi = j >> 4, g = gi / nr, i = gi - g * nr;
        uint4 *dst = reinterpret_cast<uint4 *>(reg + (isv ? Lo.v : Lo.k) + (int64_t)gi * MU_CU_ATTN_IN_ROW) + c;
        if (i >= n) {
            if (rows) cp_async16(dst, ad.at.kc, false);
            continue;
        }
        const int64_t slot = row_slot(lt, i, cap);
        if (slot == lt.slot) continue;
        const uint16_t *plane = (const uint16_t *)(isv ? ad.at.vc : ad.at.kc);
        cp_async16(dst, plane + slot * row_elems + g * 128 + 8 * c, true);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    /* the QK-norm weights and the position's cos/sin table (immutable in the
     * step), so that the heads' norms wait on one round of loads, not three */
    float *w = reinterpret_cast<float *>(reg + Lo.w);
    const float *cs = qp.use_rope ? rec_rope(qp.recs, 0, qp.base_index) : nullptr;
    for (int i = threadIdx.x; i < 3 * 128; i += blockDim.x) {
        const int part = i >> 7, j = i & 127;
        const float *src = part == 0 ? qp.q_norm : part == 1 ? qp.k_norm : cs;
        if (src && (part < 2 || j < qp.n_rot)) w[i] = __ldg(src + j);
    }
    __syncthreads(); /* (the staging reads other threads' copies of them) */
}

/* The raw gate of float4 c of the output: its parts added in order (gate_raw). */
__device__ __forceinline__ float4 attn_in_gate4(const mu_cu_reduce &rd, int c) {
    const float4 *g = reinterpret_cast<const float4 *>(rd.gate) + c;
    float4 v = __ldcg(g);
    const int64_t part = (int64_t)rd.n_head * rd.head_dim / 4;
    for (int p = 1; p < rd.gate_parts; p++) {
        const float4 w = __ldcg(g + p * part);
        v.x += w.x, v.y += w.y, v.z += w.z, v.w += w.w;
    }
    return v;
}

__device__ __forceinline__ float sigmoid_gate(float g) { return 1.0f / (1.0f + expf(-g)); }

/* After the wait, in phases (each its own function, so that none holds
 * another's registers: one function spilled 136-264 bytes a thread, into
 * an L1 the tiles had shrunk, at ~18 us a launch). */
struct attn_in_ctx {
    uint8_t *reg;
    int H, kvh, per_kv, nr, n, nw, warp, lane;
};
__device__ __forceinline__ attn_in_ctx attn_in_begin(const mu_cu_attn_decode &ad, uint8_t *reg) {
    attn_in_ctx c;
    c.reg = reg;
    c.H = ad.qp.n_head, c.kvh = ad.qp.n_head_kv, c.per_kv = c.H / c.kvh, c.nr = mu_cu_attn_in_rows(ad.short_max);
    c.nw = (int)(blockDim.x >> 5), c.warp = threadIdx.x >> 5, c.lane = threadIdx.x & 31;
    c.n = *reinterpret_cast<const int *>(reg + mu_cu_attn_in_smem(c.H, c.kvh, ad.short_max, c.nw).n);
    return c;
}

/* 1. Q (log2 units, hi + lo) and the token's own K/V row into the tiles,
 * the gate's sigmoid; block 0 appends K and V to the planes. A warp's
 * query head and (first round) KV head load before either's arithmetic. */
__device__ __noinline__ void attn_in_heads(const mu_cu_attn_decode &ad, uint8_t *reg) {
    const attn_in_ctx c = attn_in_begin(ad, reg);
    const mu_cu_qkv_post &qp = ad.qp;
    const mu_cu_attn_in_layout Lo = mu_cu_attn_in_smem(c.H, c.kvh, ad.short_max, c.nw);
    constexpr int ROW = MU_CU_ATTN_IN_ROW;
    const int n4 = c.H * 32;
    const bool gated = ad.rd.gate != nullptr;
    float4 g_first = make_float4(0.f, 0.f, 0.f, 0.f);
    if (gated && (int)threadIdx.x < n4) g_first = attn_in_gate4(ad.rd, threadIdx.x);
    const float *wsm = reinterpret_cast<const float *>(reg + Lo.w);
    const float *wq = qp.q_norm ? wsm : nullptr, *wk = qp.k_norm ? wsm + 128 : nullptr, *cs = wsm + 256;
    float *buf = reinterpret_cast<float *>(reg + Lo.o) + c.warp * 128; /* (the rotation's scratch, neox) */
    for (int base = 0; base < c.H; base += c.nw) {
        const int hq = base + c.warp, hk = base == 0 && c.warp < c.kvh ? c.warp : -1;
        float xq[4], xk[4];
        float4 vq, vk;
        if (hq < c.H) qkv_post_raw(qp, 0, hq, false, xq, vq);
        if (hk >= 0) qkv_post_raw(qp, 0, c.H + hk, true, xk, vk);
        if (hq < c.H) {
            qkv_post_finish(qp, buf, wq, cs, xq);
            const int g = hq / c.per_kv, r = hq - g * c.per_kv;
            uint32_t *hi = reinterpret_cast<uint32_t *>(reg + Lo.qh + (g * 16 + r) * ROW) + 2 * c.lane;
            uint32_t *lo = reinterpret_cast<uint32_t *>(reg + Lo.ql + (g * 16 + r) * ROW) + 2 * c.lane;
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float v0 = xq[2 * e] * ad.at.scale_log2, v1 = xq[2 * e + 1] * ad.at.scale_log2;
                const __half2 h2 = __floats2half2_rn(v0, v1);
                const float2 hf = __half22float2(h2);
                hi[e] = *reinterpret_cast<const uint32_t *>(&h2);
                lo[e] = pack_half2(v0 - hf.x, v1 - hf.y);
            }
        }
        if (hk >= 0) {
            __syncwarp(); /* (buf's readers above are done) */
            qkv_post_finish(qp, buf, wk, cs, xk);
            if (blockIdx.x == 0) qkv_post_store(qp, 0, c.H + hk, xk, vk, true);
            const int own = (hk * c.nr + c.n - 1) * ROW;
            uint32_t *kr = reinterpret_cast<uint32_t *>(reg + Lo.k + own) + 2 * c.lane;
            uint32_t *vr = reinterpret_cast<uint32_t *>(reg + Lo.v + own) + 2 * c.lane;
            kr[0] = pack_half2(xk[0], xk[1]), kr[1] = pack_half2(xk[2], xk[3]);
            vr[0] = pack_half2(vk.x, vk.y), vr[1] = pack_half2(vk.z, vk.w);
        }
    }
    if (gated) {
        float4 *G = reinterpret_cast<float4 *>(reg + Lo.g);
        for (int i = threadIdx.x; i < n4; i += blockDim.x) {
            const float4 gv = i == (int)threadIdx.x ? g_first : attn_in_gate4(ad.rd, i);
            G[i] = make_float4(sigmoid_gate(gv.x), sigmoid_gate(gv.y), sigmoid_gate(gv.z), sigmoid_gate(gv.w));
        }
    }
}

/* 2. scores S = Q K^T, a job per (KV group, 8 rows): Q rows are the
 * group's heads (A: rows gq, gq + 8; k pairs 2tq, 2tq + 8), K rows the
 * n-tile's (B: n = gq). */
__device__ __noinline__ void attn_in_scores(const mu_cu_attn_decode &ad, uint8_t *reg) {
    const attn_in_ctx c = attn_in_begin(ad, reg);
    const mu_cu_attn_in_layout Lo = mu_cu_attn_in_smem(c.H, c.kvh, ad.short_max, c.nw);
    constexpr int ROW = MU_CU_ATTN_IN_ROW;
    const int gq = c.lane >> 2, tq = c.lane & 3, nt8 = (c.n + 7) / 8;
    float *S = reinterpret_cast<float *>(reg + Lo.s);
    for (int j = c.warp; j < c.kvh * nt8; j += c.nw) {
        const int g = j / nt8, n0 = (j - g * nt8) * 8;
        const uint8_t *qh = reg + Lo.qh + g * 16 * ROW + gq * ROW + 4 * tq;
        const uint8_t *ql = reg + Lo.ql + g * 16 * ROW + gq * ROW + 4 * tq;
        const uint8_t *kt = reg + Lo.k + (g * c.nr + n0 + gq) * ROW + 4 * tq;
        float acc[4] = {0.f, 0.f, 0.f, 0.f}, accl[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 1
        for (int ks = 0; ks < 8; ks++) {
            const int b0 = 32 * ks, b8 = b0 + 16; /* byte offsets of dims 16 ks + 2tq, + 8 */
            const uint32_t ah[4] = {*reinterpret_cast<const uint32_t *>(qh + b0),
                                    *reinterpret_cast<const uint32_t *>(qh + 8 * ROW + b0),
                                    *reinterpret_cast<const uint32_t *>(qh + b8),
                                    *reinterpret_cast<const uint32_t *>(qh + 8 * ROW + b8)};
            const uint32_t k0 = *reinterpret_cast<const uint32_t *>(kt + b0);
            const uint32_t k8 = *reinterpret_cast<const uint32_t *>(kt + b8);
            mma16816(acc, ah, k0, k8);
            const uint32_t al[4] = {*reinterpret_cast<const uint32_t *>(ql + b0),
                                    *reinterpret_cast<const uint32_t *>(ql + 8 * ROW + b0),
                                    *reinterpret_cast<const uint32_t *>(ql + b8),
                                    *reinterpret_cast<const uint32_t *>(ql + 8 * ROW + b8)};
            mma16816(accl, al, k0, k8);
        }
        /* C: [0] (head gq, row n0 + 2tq), [1] (gq, +1), [2] (gq + 8, 2tq), [3] (gq + 8, +1) */
        const int h0 = g * c.per_kv, i0 = n0 + 2 * tq;
        if (gq < c.per_kv)
            *reinterpret_cast<float2 *>(S + (h0 + gq) * c.nr + i0) = make_float2(acc[0] + accl[0], acc[1] + accl[1]);
        if (gq + 8 < c.per_kv)
            *reinterpret_cast<float2 *>(S + (h0 + gq + 8) * c.nr + i0) = make_float2(acc[2] + accl[2], acc[3] + accl[3]);
    }
}

/* 3. the softmax, a warp per query head: P in f16 (rows past the span as
 * zeros), its sum over the rounded weights (as P V sees them). */
__device__ __noinline__ void attn_in_softmax(const mu_cu_attn_decode &ad, uint8_t *reg) {
    const attn_in_ctx c = attn_in_begin(ad, reg);
    const mu_cu_attn_in_layout Lo = mu_cu_attn_in_smem(c.H, c.kvh, ad.short_max, c.nw);
    for (int h = c.warp; h < c.H; h += c.nw) {
        const int g = h / c.per_kv, r = h - g * c.per_kv;
        const float *sr = reinterpret_cast<const float *>(reg + Lo.s) + h * c.nr;
        float m = -INFINITY;
        for (int i = c.lane; i < c.n; i += 32) m = fmaxf(m, sr[i]);
        m = warp_max(m);
        __half *pr = reinterpret_cast<__half *>(reg + Lo.p) + (g * 16 + r) * (c.nr + 8);
        float sum = 0.f;
        for (int i = c.lane; i < c.nr; i += 32) {
            const __half ph = __float2half_rn(i < c.n ? exp2f(sr[i] - m) : 0.f);
            sum += __half2float(ph);
            pr[i] = ph;
        }
        sum = warp_sum(sum);
        if (c.lane == 0) reinterpret_cast<float *>(reg + Lo.l)[h] = sum;
    }
}

/* 4. O = P V / L, a job per (KV group, 8 dims): P rows the group's heads
 * (A), V rows k (B: k pairs 2tq, 2tq + 8 of the step, n = dim d0 + gq). */
__device__ __noinline__ void attn_in_pv(const mu_cu_attn_decode &ad, uint8_t *reg) {
    const attn_in_ctx c = attn_in_begin(ad, reg);
    const mu_cu_attn_in_layout Lo = mu_cu_attn_in_smem(c.H, c.kvh, ad.short_max, c.nw);
    constexpr int VS = MU_CU_ATTN_IN_ROW / 2; /* elements per tile row */
    const int gq = c.lane >> 2, tq = c.lane & 3, steps = (c.n + 15) / 16, ps = c.nr + 8;
    const float *Ls = reinterpret_cast<const float *>(reg + Lo.l);
    float *O = reinterpret_cast<float *>(reg + Lo.o);
    for (int j = c.warp; j < c.kvh * 16; j += c.nw) {
        const int g = j >> 4, d0 = (j & 15) * 8;
        const uint16_t *pb = reinterpret_cast<const uint16_t *>(reg + Lo.p) + g * 16 * ps + gq * ps + 2 * tq;
        const uint16_t *vt = reinterpret_cast<const uint16_t *>(reg + Lo.v) + g * c.nr * VS + 2 * tq * VS + d0 + gq;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 1
        for (int ks = 0; ks < steps; ks++) {
            const int k0 = ks * 16;
            const uint32_t a[4] = {*reinterpret_cast<const uint32_t *>(pb + k0),
                                   *reinterpret_cast<const uint32_t *>(pb + 8 * ps + k0),
                                   *reinterpret_cast<const uint32_t *>(pb + k0 + 8),
                                   *reinterpret_cast<const uint32_t *>(pb + 8 * ps + k0 + 8)};
            const uint16_t *v = vt + k0 * VS;
            const uint32_t b0 = (uint32_t)v[0] | ((uint32_t)v[VS] << 16);
            const uint32_t b1 = (uint32_t)v[8 * VS] | ((uint32_t)v[9 * VS] << 16);
            mma16816(acc, a, b0, b1);
        }
        /* C: [0] (head gq, dim d0 + 2tq), [1] (gq, +1), [2] (gq + 8, 2tq), [3] (gq + 8, +1) */
        const int h0 = g * c.per_kv, dd = d0 + 2 * tq;
        if (gq < c.per_kv) {
            const float il = 1.0f / Ls[h0 + gq];
            *reinterpret_cast<float2 *>(O + (h0 + gq) * 128 + dd) = make_float2(acc[0] * il, acc[1] * il);
        }
        if (gq + 8 < c.per_kv) {
            const float il = 1.0f / Ls[h0 + gq + 8];
            *reinterpret_cast<float2 *>(O + (h0 + gq + 8) * 128 + dd) = make_float2(acc[2] * il, acc[3] * il);
        }
    }
}

/* 5. gated, into int8 groups of 16 in the staged layout (4 lanes a group,
 * quantize4 as the norm-in staging does); block 0 keeps the f32 output
 * (the buffer the separate launch writes). */
__device__ __noinline__ void attn_in_quantize(const mu_cu_attn_decode &ad, uint8_t *sm, uint8_t *reg, float *gds) {
    const int H = ad.qp.n_head, n4 = H * 32;
    const mu_cu_attn_in_layout Lo = mu_cu_attn_in_smem(H, ad.qp.n_head_kv, ad.short_max, (int)(blockDim.x >> 5));
    const float4 *O = reinterpret_cast<const float4 *>(reg + Lo.o), *G = reinterpret_cast<const float4 *>(reg + Lo.g);
    const bool gated = ad.rd.gate != nullptr;
    for (int c = threadIdx.x; c < n4; c += blockDim.x) {
        float4 o = O[c];
        if (gated) {
            const float4 gs = G[c];
            o = make_float4(o.x * gs.x, o.y * gs.y, o.z * gs.z, o.w * gs.w);
        }
        if (blockIdx.x == 0) reinterpret_cast<float4 *>(ad.rd.out.x)[c] = o;
        const int g = c >> 2;
        int8_t *q = reinterpret_cast<int8_t *>(sm + KQ_XQ * (g >> 4) + 16 * (g & 15) - 16 * g);
        quantize4(o, 4 * c, q, gds);
    }
}

/* After the wait: the token's attention, staged as Wo's int8 input. */
__device__ __noinline__ void kq_stage_attn(const mu_cu_attn_decode &ap, int64_t cols, uint8_t *sm, unsigned lab) {
    uint8_t *reg = attn_in_region(sm, cols);
    const mu_cu_attn_in_layout Lo = mu_cu_attn_in_smem(ap.qp.n_head, ap.qp.n_head_kv, ap.short_max, (int)(blockDim.x >> 5));
    const mu_cu_attn_decode &ad = *reinterpret_cast<const mu_cu_attn_decode *>(reg + Lo.a); /* (the preload's copy) */
    float *gds = reinterpret_cast<float *>(sm + kq_stage_bytes(cols));
    if (!(lab & MU_CU_LAB_ATTN_IN_NO_HEADS)) attn_in_heads(ad, reg);
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    if (!(lab & MU_CU_LAB_ATTN_IN_NO_MMA)) {
        attn_in_scores(ad, reg);
        __syncthreads();
        attn_in_softmax(ad, reg);
        __syncthreads();
        attn_in_pv(ad, reg);
        __syncthreads();
    }
    attn_in_quantize(ad, sm, reg, gds);
    __syncthreads();
    kq_stage_records<true>(sm + (size_t)(cols >> 8) * KQ_XQ, (int)(cols >> 8), reinterpret_cast<const float2 *>(gds));
}
