/* cu_test.cu — the single-kernel entry points of cuda_test.h (tests only):
 * each runs the product's kernels through their extern "C" wrappers, on
 * the default stream, with the routes tests/test_cuda.c forces. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "cuda/cu_attn.h"
#include "cuda/cu_matvec.h"
#include "cuda/cu_units.cuh"
#include "cuda/cuda_plan.h"
#include "cuda_test.h"

extern "C" int mu_fail(int status, const char *fmt, ...);

#define TCK(call)                                                                                                     \
    do {                                                                                                              \
        cudaError_t e_ = (call);                                                                                      \
        if (e_ != cudaSuccess) return mu_fail(-8, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
    } while (0)

namespace {

/* the launches' settings: default stream, no PDL, the routes as forced,
 * clusters as the device's route set allows (mu_cuda_test_clusters) */
mu_cu_exec g_x = {0, false, 0, 0, MU_CU_ROUTE_AUTO, MU_CU_ROUTE_AUTO, true, nullptr, 0, 0, false};


/* Device allocations freed at scope exit. */
struct Pool {
    std::vector<void *> ptrs;
    ~Pool() {
        for (void *p : ptrs) cudaFree(p);
    }
    template <class T>
    T *get(size_t n, int poison = -1) {
        void *p = nullptr;
        if (cudaMalloc(&p, n * sizeof(T) + 16) != cudaSuccess) return nullptr;
        ptrs.push_back(p);
        if (poison >= 0) cudaMemset(p, poison, n * sizeof(T) + 16);
        return (T *)p;
    }
    template <class T>
    T *up(const T *h, size_t n) {
        T *d = get<T>(n);
        if (d && h) cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice);
        return d;
    }
};

int block_bytes(uint32_t type, int &elems) {
    switch (type) {
    case MU_TYPE_Q4_K: elems = 256; return 144;
    case MU_TYPE_Q5_K: elems = 256; return 176;
    case MU_TYPE_Q6_K: elems = 256; return 210;
    case MU_TYPE_Q8_0: elems = 32; return 34;
    case MU_TYPE_Q4_0: elems = 32; return 18;
    case MU_TYPE_F32: elems = 1; return 4;
    case MU_TYPE_F16: case MU_TYPE_BF16: elems = 1; return 2;
    default: elems = iv_geom(type).block_elems; return iv_geom(type).block_bytes;
    }
}

/* int8 blocks of T rows of n: the product's kernel on stream s */
cudaError_t quantize_rows(const float *x, int8_t *q, float *ds, int64_t n, int T, cudaStream_t s) {
    mu_cu_exec ex;
    memset(&ex, 0, sizeof ex);
    ex.stream = s;
    return mu_cu_quantize_rows(x, q, ds, n, T, &ex);
}

/* Uploads a weight in file layout and repacks it as the backend does. */
int make_weight(Pool &pool, uint32_t type, const void *raw, int64_t rows, int64_t cols, mu_cu_weight *w) {
    mu_cu_layout l;
    if (!mu_cu_weight_layout(type, rows, cols, &l)) return mu_fail(-5, "type %u unsupported", type);
    int elems = 0;
    const int bb = block_bytes(type, elems);
    const size_t raw_bytes = (size_t)rows * (cols / elems) * bb;
    memset(w, 0, sizeof *w);
    w->type = type;
    w->rows = rows;
    w->cols = cols;
    w->qs = pool.get<uint8_t>(l.qs, 0x7f);
    w->qh = l.qh ? pool.get<uint8_t>(l.qh, 0x7f) : nullptr;
    w->meta = l.meta ? pool.get<uint8_t>(l.meta, 0x7f) : nullptr;
    w->d = l.d ? pool.get<uint16_t>(l.d / 2, 0x7f) : nullptr;
    w->bytes = l.qs + l.qh + l.meta + l.d;
    w->units = mu_cu_units(type, cols);
    if (!w->qs) return mu_fail(-8, "cudaMalloc failed");
    if (type == MU_TYPE_F32 || type == MU_TYPE_F16 || type == MU_TYPE_BF16) {
        TCK(cudaMemcpy((void *)w->qs, raw, raw_bytes, cudaMemcpyHostToDevice));
    } else {
        uint8_t *stage = pool.up((const uint8_t *)raw, raw_bytes);
        TCK(mu_cu_repack(w, stage, 0, rows, 0, 0));
    }
    TCK(cudaDeviceSynchronize());
    return 0;
}

/* Input activations in both forms; quantized on the device for the fast lane. */
int make_act(Pool &pool, const float *x, int64_t n, int lane, mu_cu_act *a, int8_t *xq, float *xds) {
    float *dx = pool.up(x, (size_t)n);
    int8_t *q = pool.get<int8_t>((size_t)n, 0x7f);
    float *ds = pool.get<float>((size_t)n / 8, 0xff);
    a->x = dx;
    a->q = q;
    a->ds = ds;
    TCK(quantize_rows(dx, q, ds, n, 1, 0));
    TCK(cudaDeviceSynchronize());
    if (xq) TCK(cudaMemcpy(xq, q, (size_t)n, cudaMemcpyDeviceToHost));
    if (xds) TCK(cudaMemcpy(xds, ds, (size_t)n / 8 * sizeof(float), cudaMemcpyDeviceToHost));
    (void)lane;
    return 0;
}

template <class T>
int down(T *h, const T *d, size_t n) {
    if (!h) return 0;
    TCK(cudaMemcpy(h, d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return 0;
}

mu_cu_recs single_rec(Pool &pool, int T, int n_rot, const std::vector<uint8_t> &host, int64_t stride) {
    mu_cu_recs r;
    r.base = pool.up(host.data(), host.size());
    r.stride = stride;
    r.n_layer = 1;
    r.n_rot = n_rot;
    r.n_bases = 1;
    (void)T;
    return r;
}

/* x [n] as parts [parts][n] on the device that sum to x in order: parts
 * 1.. pseudo-random of x's scale, part 0 the rest (a matvec's batch parts) */
float *split_up(Pool &pool, const float *x, size_t n, int parts, uint32_t seed) {
    if (parts <= 1) return pool.up(x, n);
    std::vector<float> h((size_t)parts * n);
    for (size_t i = 0; i < n; i++) {
        float rest = x[i];
        for (int p = 1; p < parts; p++) {
            seed = seed * 1664525u + 1013904223u;
            const float r = ((float)(seed >> 8) * (1.0f / 16777216.0f) - 0.5f) * (fabsf(x[i]) + 0.25f);
            h[(size_t)p * n + i] = r;
            rest -= r;
        }
        h[i] = rest;
    }
    return pool.up(h.data(), h.size());
}

} // namespace

extern "C" void mu_cuda_test_clusters(int on) { g_x.clusters = on != 0; }

extern "C" void mu_cuda_test_routes(int grid_cap, int flat, int cut, int pair) {
    g_x.mv_grid_cap = grid_cap;
    g_x.mv_flat = flat;
    g_x.mv_cut = cut;
    g_x.mv_pair = pair != 0;
}

#define RCK(x)              \
    do {                    \
        int rc_ = (x);      \
        if (rc_) return rc_; \
    } while (0)

/* A producer's packed inputs for the tensor-core batch (xp, cu_mmf_in.cuh)
 * against mu_cu_mmf_pack of its f32 output x [T][K]: the value slots bit
 * for bit, the sub-block sums (f32 sums in another order, rounded to f16)
 * within an f16 rounding. The tokens past T of the last tile are not the
 * producer's to write. */
static int check_xp(const float *x, int64_t K, int T, const void *xp) {
    Pool pool;
    const size_t halves = (size_t)mu_gpu_mmf_halves((uint64_t)K, (uint64_t)T);
    uint16_t *ref = pool.get<uint16_t>(halves, 0xff);
    if (!ref) return mu_fail(-8, "cudaMalloc failed");
    TCK(mu_cu_mmf_pack(x, K, K, T, ref, &g_x));
    TCK(cudaDeviceSynchronize());
    std::vector<uint16_t> got(halves), want(halves);
    RCK(down(got.data(), (const uint16_t *)xp, halves));
    RCK(down(want.data(), ref, halves));
    const int64_t NS = (K / 256 + 1) / 2, per_tile = NS * 33 * 32;
    for (size_t i = 0; i < halves; i++) {
        const int64_t j = (int64_t)i / 4, lane = j % 32, slot = j / 32 % 33, tok = j / per_tile * 8 + lane / 4;
        if (tok >= T) continue;
        const float g = __half2float(__ushort_as_half(got[i])), w = __half2float(__ushort_as_half(want[i]));
        const bool ok = slot < 32 ? got[i] == want[i] : fabsf(g - w) <= 1e-3f * fabsf(w) + 1e-4f;
        if (!ok)
            return mu_fail(-9, "packed inputs: token %lld, span %lld, slot %lld, lane %lld: %.6g, packing gives %.6g",
                           (long long)tok, (long long)(j / (33 * 32) % NS), (long long)slot, (long long)lane,
                           (double)g, (double)w);
    }
    return 0;
}

extern "C" int mu_cuda_test_matvec(int nseg, const uint32_t *types, const void *const *raws, const int64_t *rows,
                                   int64_t cols, const float *x, int lane, float *y, int8_t *xq, float *xds,
                                   int batch_parts) {
    Pool pool;
    mu_cu_mv a;
    memset(&a, 0, sizeof a);
    a.lane = lane;
    a.epi = MU_CU_EPI_STORE;
    a.batch_parts = batch_parts;
    const int np = batch_parts > 1 ? batch_parts : 1;
    RCK(make_act(pool, x, cols, lane, &a.act, xq, xds));
    int64_t total = 0;
    for (int i = 0; i < nseg; i++) {
        RCK(make_weight(pool, types[i], raws[i], rows[i], cols, &a.seg[i].w));
        a.seg[i].y = pool.get<float>((size_t)rows[i] * np, 0xff);
        total += rows[i];
    }
    a.nseg = nseg;
    TCK(mu_cu_matvec(&a, &g_x));
    TCK(cudaDeviceSynchronize());
    int64_t off = 0;
    for (int i = 0; i < nseg; i++) {
        std::vector<float> yp((size_t)rows[i] * np);
        RCK(down(yp.data(), a.seg[i].y, yp.size()));
        for (int64_t r = 0; r < rows[i]; r++) { /* the parts in order, as the consumers add them */
            float v = yp[(size_t)r];
            for (int p = 1; p < np; p++) v += yp[(size_t)p * rows[i] + r];
            y[off + r] = v;
        }
        off += rows[i];
    }
    (void)total;
    if (lane != MU_CU_LANE_FAST || np > 1) return 0;
    /* quantizing x while staging (the int8 input poisoned) gives the same bits */
    mu_cu_mv b = a;
    b.quant_input = 1;
    b.act.q = pool.get<int8_t>((size_t)cols, 0x5a);
    b.act.ds = pool.get<float>((size_t)cols / 8, 0x7f);
    TCK(mu_cu_matvec(&b, &g_x));
    TCK(cudaDeviceSynchronize());
    std::vector<float> yv((size_t)total);
    off = 0;
    for (int i = 0; i < nseg; i++) {
        RCK(down(yv.data() + off, a.seg[i].y, (size_t)rows[i]));
        off += rows[i];
    }
    for (int64_t i = 0; i < total; i++)
        if (memcmp(&yv[(size_t)i], &y[i], sizeof(float)))
            return mu_fail(-9, "matvec quantizing its input: row %lld %.9g vs %.9g", (long long)i, (double)yv[(size_t)i],
                           (double)y[i]);
    return 0;
}

extern "C" int mu_cuda_test_matvec_rows_fast(int nseg, uint32_t type, const void *const *raws, const int64_t *rows,
                                             int64_t cols, const float *x, int nrows, float *y, int8_t *xq,
                                             float *xds) {
    Pool pool;
    const size_t n = (size_t)nrows * (size_t)cols;
    float *dx = pool.up(x, n);
    int8_t *q = pool.get<int8_t>(n, 0x7f);
    float *ds = pool.get<float>(n / 8, 0xff);
    if (!dx || !q || !ds) return mu_fail(-8, "cudaMalloc failed");
    TCK(quantize_rows(dx, q, ds, cols, nrows, 0));
    TCK(cudaDeviceSynchronize());
    RCK(down(xq, q, n));
    RCK(down(xds, ds, n / 8));
    mu_cu_mvr a;
    memset(&a, 0, sizeof a);
    a.nseg = nseg;
    a.ldx = cols;
    a.nrows = nrows;
    int64_t total = 0;
    for (int i = 0; i < nseg; i++) total += rows[i];
    for (int run = 0; run < 2; run++) { /* the int8 input as written, then x quantized while staged */
        a.act.x = run ? dx : nullptr;
        a.act.q = run ? nullptr : q;
        a.act.ds = run ? nullptr : ds;
        for (int i = 0; i < nseg; i++) {
            if (!run) RCK(make_weight(pool, type, raws[i], rows[i], cols, &a.seg[i].w));
            a.seg[i].y = pool.get<float>((size_t)nrows * rows[i], 0xff);
            a.seg[i].ldy = rows[i];
        }
        TCK(mu_cu_matvec_rows_fast(&a, &g_x));
        TCK(cudaDeviceSynchronize());
        std::vector<float> yr((size_t)nrows * total);
        int64_t off = 0;
        for (int i = 0; i < nseg; i++) {
            std::vector<float> ys((size_t)nrows * rows[i]);
            RCK(down(ys.data(), a.seg[i].y, ys.size()));
            for (int j = 0; j < nrows; j++)
                memcpy(&yr[(size_t)j * total + off], &ys[(size_t)j * rows[i]], sizeof(float) * rows[i]);
            off += rows[i];
        }
        if (!run) {
            memcpy(y, yr.data(), sizeof(float) * yr.size());
            continue;
        }
        for (size_t i = 0; i < yr.size(); i++)
            if (memcmp(&yr[i], &y[i], sizeof(float)))
                return mu_fail(-9, "B-row matvec quantizing its input: row %zu of %d, %.9g vs %.9g", i / total, nrows,
                               (double)yr[i], (double)y[i]);
    }
    return 0;
}

extern "C" int mu_cuda_test_mmf(int nseg, uint32_t type, const void *const *raws, const int64_t *rows, int64_t cols,
                                const float *x, int T, bool split, int warps, int tiles, float *y) {
    Pool pool;
    const size_t n = (size_t)T * (size_t)cols;
    int64_t total = 0;
    for (int s = 0; s < nseg; s++) total += rows[s];
    float *dx = pool.up(x, n);
    float *dy = pool.get<float>((size_t)T * total, 0xff);
    const int64_t part_cap = 2 << 20, counter_cap = 1 << 16; /* pieces of row groups over the blocks' ranges */
    float *part = pool.get<float>((size_t)part_cap, 0xff);
    unsigned *counters = pool.get<unsigned>((size_t)counter_cap, 0);
    uint16_t *xp = pool.get<uint16_t>((size_t)mu_gpu_mmf_halves((uint64_t)cols, (uint64_t)T), 0xff);
    if (!dx || !dy || !part || !counters || !xp) return mu_fail(-8, "cudaMalloc failed");
    mu_cu_mvr a;
    memset(&a, 0, sizeof a);
    for (int64_t s = 0, off = 0; s < nseg; off += rows[s], s++) {
        RCK(make_weight(pool, type, raws[s], rows[s], cols, &a.seg[s].w));
        a.seg[s].y = dy + off;
        a.seg[s].ldy = total;
    }
    a.nseg = nseg;
    a.ldx = cols;
    a.nrows = T;
    a.part = split ? part : NULL;
    a.part_cap = part_cap;
    a.counters = counters;
    a.counter_cap = counter_cap;
    mu_cu_exec ex = g_x;
    ex.mmf_wide = warps == 8 ? MU_CU_ROUTE_ALWAYS : MU_CU_ROUTE_NEVER;
    ex.mmf_tiles = tiles;
    TCK(mu_cu_mmf_pack(dx, cols, cols, T, xp, &ex));
    a.xp = xp;
    TCK(mu_cu_mmf_set(&a, &ex));
    TCK(cudaDeviceSynchronize());
    RCK(down(y, dy, (size_t)T * total));
    return 0;
}

extern "C" int mu_cuda_test_dequant(uint32_t type, const void *raw, int64_t rows, int64_t cols, bool to_f16,
                                    float *out) {
    Pool pool;
    mu_cu_weight w;
    RCK(make_weight(pool, type, raw, rows, cols, &w));
    const size_t n = (size_t)rows * cols;
    if (to_f16) {
        uint16_t *d = pool.get<uint16_t>(n, 0xff);
        TCK(mu_cu_dequant(&w, 0, rows, d, true, 0));
        TCK(cudaDeviceSynchronize());
        std::vector<uint16_t> h(n);
        RCK(down(h.data(), d, n));
        for (size_t i = 0; i < n; i++) out[i] = __half2float(__ushort_as_half(h[i]));
    } else {
        float *d = pool.get<float>(n, 0xff);
        TCK(mu_cu_dequant(&w, 0, rows, d, false, 0));
        TCK(cudaDeviceSynchronize());
        RCK(down(out, d, n));
    }
    return 0;
}

extern "C" int mu_cuda_test_gateup(uint32_t type, const void *gate, const void *up, int64_t F, int64_t cols,
                                   const float *x, int lane, float *out_x, int8_t *xq, float *xds) {
    Pool pool;
    mu_cu_mv a;
    memset(&a, 0, sizeof a);
    a.lane = lane;
    a.epi = MU_CU_EPI_GATEUP;
    RCK(make_act(pool, x, cols, lane, &a.act, xq, xds));
    RCK(make_weight(pool, type, gate, F, cols, &a.seg[0].w));
    RCK(make_weight(pool, type, up, F, cols, &a.seg[1].w));
    a.nseg = 2;
    a.seg[0].y = pool.get<float>((size_t)F, 0xff);
    a.seg[1].y = pool.get<float>((size_t)F, 0xff);
    TCK(mu_cu_matvec(&a, &g_x));
    TCK(cudaDeviceSynchronize());
    RCK(down(out_x, a.seg[0].y, (size_t)F));
    return 0;
}

extern "C" int mu_cuda_test_matvec_resnorm(uint32_t type, const void *raw, int64_t n, int64_t cols, const float *x,
                                           int lane, const float *w_post, float eps_post, const float *h_in,
                                           const float *w_next, float eps_next, float *y, float *h_out, float *a_out,
                                           int8_t *q_out, float *ds_out, int8_t *xq, float *xds) {
    Pool pool;
    mu_cu_mv a;
    memset(&a, 0, sizeof a);
    a.lane = lane;
    a.epi = MU_CU_EPI_RESNORM;
    RCK(make_act(pool, x, cols, lane, &a.act, xq, xds));
    RCK(make_weight(pool, type, raw, n, cols, &a.seg[0].w));
    a.seg[0].y = pool.get<float>((size_t)n * 8, 0xff); /* up to 8 partial sums (split long rows) */
    a.nseg = 1;
    a.counter = pool.get<unsigned>(1, 0);
    a.rn.branch = a.seg[0].y;
    a.rn.w_post = w_post ? pool.up(w_post, (size_t)n) : nullptr;
    a.rn.eps_post = eps_post;
    a.rn.h = pool.up(h_in, (size_t)n);
    a.rn.w_next = w_next ? pool.up(w_next, (size_t)n) : nullptr;
    a.rn.eps_next = eps_next;
    a.rn.n = (int)n;
    a.rn.stride = n;
    a.rn.out.x = pool.get<float>((size_t)n, 0xff);
    a.rn.out.q = pool.get<int8_t>((size_t)n, 0x7f);
    a.rn.out.ds = pool.get<float>((size_t)n / 8, 0xff);
    /* run twice: the counter must come back to zero for the next launch */
    for (int rep = 0; rep < 2; rep++) {
        if (rep) TCK(cudaMemcpy(a.rn.h, h_in, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
        TCK(mu_cu_matvec(&a, &g_x));
        TCK(cudaDeviceSynchronize());
    }
    /* the parts the kernel used (as mu_cu_matvec picks them), summed in order */
    const int parts = mu_cu_mv_parts(type, cols);
    std::vector<float> yp((size_t)n * parts);
    RCK(down(yp.data(), a.seg[0].y, (size_t)n * parts));
    for (int64_t i = 0; i < n; i++) {
        float v = yp[i];
        for (int p = 1; p < parts; p++) v += yp[(size_t)p * n + i];
        y[i] = v;
    }
    RCK(down(h_out, a.rn.h, (size_t)n));
    RCK(down(a_out, a.rn.out.x, (size_t)n));
    RCK(down(q_out, a.rn.out.q, (size_t)n));
    RCK(down(ds_out, a.rn.out.ds, (size_t)n / 8));
    return 0;
}

extern "C" int mu_cuda_test_embed(uint32_t type, const void *raw, int64_t V, int64_t E, const int32_t *tokens, int T,
                                  bool embd_norm, const float *w_next, float eps, float *h_out, float *a_out) {
    Pool pool;
    mu_cu_weight w;
    RCK(make_weight(pool, type, raw, V, E, &w));
    const int64_t stride = mu_cu_rec_bytes(1, 1, 2);
    std::vector<uint8_t> host((size_t)(stride * T), 0);
    for (int t = 0; t < T; t++) ((mu_cu_rec_hdr *)(host.data() + t * stride))->token = tokens[t];
    mu_cu_recs recs = single_rec(pool, T, 2, host, stride);
    mu_cu_resnorm rn;
    memset(&rn, 0, sizeof rn);
    rn.h = pool.get<float>((size_t)(T * E), 0xff);
    rn.w_next = w_next ? pool.up(w_next, (size_t)E) : nullptr;
    rn.eps_next = eps;
    rn.embd_norm = embd_norm;
    rn.n = (int)E;
    rn.stride = E;
    rn.out.x = pool.get<float>((size_t)(T * E), 0xff);
    const bool pack = E % 256 == 0 && E <= MU_CU_TAIL_MAXN; /* (also the tensor-core batch's packed inputs) */
    if (pack) {
        rn.out.xp = pool.get<uint16_t>((size_t)mu_gpu_mmf_halves((uint64_t)E, (uint64_t)T), 0xff);
        rn.out.xp_nb = (int)(E / 256);
    }
    unsigned long long *best = pool.get<unsigned long long>(1, 0xff);
    TCK(mu_cu_embed(&w, recs, T, rn, best, &g_x));
    TCK(cudaDeviceSynchronize());
    if (pack) RCK(check_xp(rn.out.x, E, T, rn.out.xp));
    unsigned long long hb = 1;
    RCK(down(&hb, best, 1));
    if (hb != 0ull) return mu_fail(-8, "embed did not reset the selection slot");
    RCK(down(h_out, rn.h, (size_t)(T * E)));
    RCK(down(a_out, rn.out.x, (size_t)(T * E)));
    return 0;
}

extern "C" int mu_cuda_test_swiglu_pack(int64_t n, int T, const float *g, const float *u, float *out) {
    Pool pool;
    float *dg = pool.up(g, (size_t)(n * T));
    const float *du = pool.up(u, (size_t)(n * T));
    uint16_t *xp = pool.get<uint16_t>((size_t)mu_gpu_mmf_halves((uint64_t)n, (uint64_t)T), 0xff);
    if (!dg || !du || !xp) return mu_fail(-8, "cudaMalloc failed");
    TCK(mu_cu_swiglu_rows(dg, du, nullptr, n, T, xp, &g_x));
    TCK(cudaDeviceSynchronize());
    RCK(check_xp(dg, n, T, xp));
    RCK(down(out, dg, (size_t)(n * T)));
    return 0;
}

extern "C" int mu_cuda_test_rows_top(float *x, int64_t n, int T, const int *bias_off, const int32_t *bias_ids,
                                     const float *bias_vals, int k, float *vals, int32_t *ids) {
    Pool pool;
    float *dx = pool.up(x, (size_t)(n * T));
    const int nb = bias_off ? bias_off[T] : 0;
    const int *doff = bias_off ? pool.up(bias_off, (size_t)T + 1) : nullptr;
    const int32_t *dids = nb ? pool.up(bias_ids, (size_t)nb) : nullptr;
    const float *dvals = nb ? pool.up(bias_vals, (size_t)nb) : nullptr;
    float *dv = pool.get<float>((size_t)T * k, 0xff);
    int32_t *di = pool.get<int32_t>((size_t)T * k, 0xff);
    if (!dx || !dv || !di || (bias_off && !doff) || (nb && (!dids || !dvals))) return mu_fail(-8, "cudaMalloc failed");
    TCK(mu_cu_rows_top(dx, n, T, doff, dids, dvals, k, dv, di, 0));
    TCK(cudaDeviceSynchronize());
    RCK(down(vals, dv, (size_t)T * k));
    RCK(down(ids, di, (size_t)T * k));
    RCK(down(x, dx, (size_t)(n * T)));
    return 0;
}

extern "C" int mu_cuda_test_logits(uint32_t type, const void *raw, int64_t V, int64_t cols, const float *x, int lane,
                                   float scale, float softcap, float temperature, uint32_t seed, int pos,
                                   float *logits, int32_t *chosen) {
    Pool pool;
    mu_cu_mv a;
    memset(&a, 0, sizeof a);
    a.lane = lane;
    a.epi = MU_CU_EPI_LOGITS;
    RCK(make_act(pool, x, cols, lane, &a.act, nullptr, nullptr));
    RCK(make_weight(pool, type, raw, V, cols, &a.seg[0].w));
    a.seg[0].y = pool.get<float>((size_t)V, 0xff);
    a.nseg = 1;
    a.lg.scale = scale;
    a.lg.softcap = softcap;
    a.lg.best = pool.get<unsigned long long>(1, 0);
    mu_cu_rec_hdr hdr = {0, pos, temperature, seed};
    a.lg.hdr = pool.up(&hdr, 1);
    TCK(mu_cu_matvec(&a, &g_x));
    TCK(cudaDeviceSynchronize());
    unsigned long long hb = 0;
    RCK(down(&hb, a.lg.best, 1));
    *chosen = (int32_t)(0xFFFFFFFFu - (uint32_t)(hb & 0xFFFFFFFFull));
    RCK(down(logits, a.seg[0].y, (size_t)V));
    return 0;
}

static int planes_up(Pool &pool, const float *h, size_t n, bool f32, void **d) {
    if (f32) {
        *d = h ? (void *)pool.up(h, n) : (void *)pool.get<float>(n, 0);
        return *d ? 0 : mu_fail(-8, "alloc");
    }
    std::vector<uint16_t> tmp(n, 0);
    if (h)
        for (size_t i = 0; i < n; i++) tmp[i] = __half_as_ushort(__float2half_rn(h[i]));
    *d = pool.up(tmp.data(), n);
    return *d ? 0 : mu_fail(-8, "alloc");
}

static int planes_down(const void *d, size_t n, bool f32, float *h) {
    if (f32) return down(h, (const float *)d, n);
    std::vector<uint16_t> tmp(n);
    RCK(down(tmp.data(), (const uint16_t *)d, n));
    for (size_t i = 0; i < n; i++) h[i] = __half2float(__ushort_as_half(tmp[i]));
    return 0;
}

extern "C" int mu_cuda_test_qkv_post(const mu_cuda_test_qkv *t) {
    Pool pool;
    const int T = t->T, H = t->n_head, Hk = t->n_head_kv;
    const int64_t stride = mu_cu_rec_bytes(1, 1, t->n_rot);
    std::vector<uint8_t> host((size_t)(stride * T), 0);
    for (int i = 0; i < T; i++) {
        uint8_t *rec = host.data() + i * stride;
        ((mu_cu_rec_hdr *)rec)->pos = i;
        ((mu_cu_rec_layer *)(rec + sizeof(mu_cu_rec_hdr)))->slot = t->slots[i];
        memcpy(rec + sizeof(mu_cu_rec_hdr) + sizeof(mu_cu_rec_layer), t->cs + (size_t)i * t->n_rot,
               sizeof(float) * t->n_rot);
    }
    mu_cu_qkv_post a;
    memset(&a, 0, sizeof a);
    a.T = T;
    a.layer = 0;
    a.n_head = H;
    a.n_head_kv = Hk;
    a.head_dim = 128;
    a.n_rot = t->n_rot;
    a.neox = t->neox;
    a.use_rope = t->use_rope;
    if (t->parts > 1 && T != 1) return mu_fail(-2, "qkv_post test: parts need T = 1");
    a.parts = t->parts;
    a.q = split_up(pool, t->q, (size_t)T * H * 128, t->parts, 11u);
    a.k = split_up(pool, t->k, (size_t)T * Hk * 128, t->parts, 12u);
    a.v = split_up(pool, t->v, (size_t)T * Hk * 128, t->parts, 13u);
    a.q_stride = H * 128;
    a.kv_stride = Hk * 128;
    a.q_norm = t->q_norm ? pool.up(t->q_norm, 128) : nullptr;
    a.k_norm = t->k_norm ? pool.up(t->k_norm, 128) : nullptr;
    a.eps = t->eps;
    a.qn = pool.get<float>((size_t)T * H * 128, 0xff);
    const size_t pn = (size_t)t->capacity * Hk * 128;
    RCK(planes_up(pool, nullptr, pn, t->kv_f32, &a.kc));
    RCK(planes_up(pool, nullptr, pn, t->kv_f32, &a.vc));
    a.kv_f32 = t->kv_f32;
    a.recs = single_rec(pool, T, t->n_rot, host, stride);
    TCK(mu_cu_qkv_post_launch(&a, &g_x));
    TCK(cudaDeviceSynchronize());
    RCK(down(t->qn, a.qn, (size_t)T * H * 128));
    RCK(planes_down(a.kc, pn, t->kv_f32, t->kc));
    RCK(planes_down(a.vc, pn, t->kv_f32, t->vc));
    return 0;
}

extern "C" int mu_cuda_test_attention(const mu_cuda_test_attn *t) {
    Pool pool;
    const int T = t->T, H = t->n_head, Hk = t->n_head_kv;
    const int64_t stride = mu_cu_rec_bytes(1, 1, 2);
    std::vector<uint8_t> host((size_t)(stride * T), 0);
    for (int i = 0; i < T; i++) {
        mu_cu_rec_layer *l = (mu_cu_rec_layer *)(host.data() + i * stride + sizeof(mu_cu_rec_hdr));
        l->n_visible = t->n_visible[i];
        l->phys_first = t->phys_first[i];
        l->route = t->route[i];
    }
    mu_cu_attn a;
    memset(&a, 0, sizeof a);
    a.T = T;
    a.n_head = H;
    a.n_head_kv = Hk;
    a.head_dim = 128;
    a.kv_f32 = t->kv_f32;
    a.capacity = t->capacity;
    const size_t pn = (size_t)t->capacity * Hk * 128;
    RCK(planes_up(pool, t->kc, pn, t->kv_f32, &a.kc));
    RCK(planes_up(pool, t->vc, pn, t->kv_f32, &a.vc));
    a.q = pool.up(t->q, (size_t)T * H * 128);
    a.scale_log2 = t->scale * 1.4426950408889634f;
    a.split_cap = t->split_cap;
    const size_t parts = (size_t)T * H * t->split_cap;
    a.part_m = pool.get<float>(parts, 0xff);
    a.part_l = pool.get<float>(parts, 0xff);
    a.part_o = pool.get<float>(parts * 128, 0xff);
    a.recs = single_rec(pool, T, 2, host, stride);
    TCK(mu_cu_attention(&a, t->use_mma != 0, &g_x));
    mu_cu_reduce r;
    memset(&r, 0, sizeof r);
    r.T = T;
    r.n_head = H;
    r.head_dim = 128;
    r.split_cap = t->split_cap;
    r.part_m = a.part_m;
    r.part_l = a.part_l;
    r.part_o = a.part_o;
    if (t->gate_parts > 1 && T != 1) return mu_fail(-2, "attention test: gate parts need T = 1");
    r.gate = t->gate ? split_up(pool, t->gate, (size_t)T * H * 128, t->gate_parts, 14u) : nullptr;
    r.gate_stride = H * 128;
    r.gate_parts = t->gate_parts;
    r.out.x = pool.get<float>((size_t)T * H * 128, 0xff);
    r.out.q = t->out_q ? pool.get<int8_t>((size_t)T * H * 128, 0x7f) : nullptr;
    r.out.ds = t->out_q ? pool.get<float>((size_t)T * H * 16, 0xff) : nullptr;
    r.out_stride = H * 128;
    r.recs = a.recs;
    const bool pack = H * 128 % 256 == 0; /* (also the tensor-core batch's packed inputs) */
    if (pack) {
        r.out.xp = pool.get<uint16_t>((size_t)mu_gpu_mmf_halves((uint64_t)H * 128, (uint64_t)T), 0xff);
        r.out.xp_nb = H * 128 / 256;
    }
    TCK(mu_cu_attn_reduce(&r, &g_x));
    TCK(cudaDeviceSynchronize());
    if (pack) RCK(check_xp(r.out.x, H * 128, T, r.out.xp));
    RCK(down(t->out, r.out.x, (size_t)T * H * 128));
    if (t->out_q) {
        RCK(down(t->out_q, r.out.q, (size_t)T * H * 128));
        RCK(down(t->out_ds, r.out.ds, (size_t)T * H * 16));
    }
    return 0;
}

/* ---- the K-quant layout on the CPU (no GPU needed) -------------------------------------
 * Repacks random blocks as the upload does, then runs every lane-block's
 * loads (as kq_load reads them) through the lanes' dequantization (must be
 * bit-exact with the CPU's), the fast-lane dot (int8 activations) and the
 * exact-lane dot (f32), against references computed from the CPU's
 * dequantized row. */
namespace {

/* functors for the lanes' callbacks (host and device callable) */
struct PutAt {
    float *out;
    __host__ __device__ void operator()(int e, float v) const { out[e] = v; }
};
struct XAt {
    const float *x;
    __host__ __device__ float operator()(int i) const { return x[i]; }
};

template <uint32_t T>
KqLane<kq_u4> host_lane(const uint8_t *qs, const uint8_t *qh, const uint8_t *meta, const uint16_t *d, int b, int nb,
                        int c0) {
    KqLane<kq_u4> L;
    memset(&L, 0, sizeof L);
    for (int i = 0; i < 4; i++) memcpy(&L.q[i], qs + kq_qs_off(b, c0, i, nb), 16);
    if (T == MU_TYPE_Q6_K) {
        memcpy(&L.m, meta + 16 * b + 8 * c0, 8);
        memcpy(&L.h[0], qh + kq_qh6_off(b, c0, 0, nb), 16);
        memcpy(&L.h[1], qh + kq_qh6_off(b, c0, 1, nb), 16);
        L.d = d[b];
    } else {
        memcpy(&L.m, meta + 16 * b, 16);
        if (T == MU_TYPE_Q5_K) memcpy(&L.h[0], qh + 32 * b + 16 * c0, 16);
    }
    return L;
}

/* The tiles (cu_kq.cuh): every 16-byte unit of a row of nb blocks is one
 * lane's load (no overlap, no gap), and load i of a warp batch (one group)
 * reads one contiguous span. */
int selftest_tiles(int nb, int loads, char *msg, size_t cap) {
    std::vector<int> seen((size_t)nb * 2 * loads, 0);
    for (int b0 = 0; b0 < nb; b0 += 16) {
        const int nbb = nb - b0 < 16 ? nb - b0 : 16;
        for (int i = 0; i < loads; i++) {
            const uint32_t first = kq_tile_off(b0, 0, i, nb, loads);
            for (int p = 0; p < nbb; p++)
                for (int c0 = 0; c0 < 2; c0++) {
                    const uint32_t off = kq_tile_off(b0 + p, c0, i, nb, loads);
                    if (off % 16 || off / 16 >= seen.size())
                        return snprintf(msg, cap, "tile offset %u outside a row of %d blocks", off, nb), 1;
                    seen[off / 16]++;
                    if (off != first + 32 * p + 16 * c0)
                        return snprintf(msg, cap, "%d blocks: load %d of block %d is not in its batch's span", nb, i,
                                        b0 + p), 1;
                }
        }
    }
    for (size_t u = 0; u < seen.size(); u++)
        if (seen[u] != 1) return snprintf(msg, cap, "%d blocks: unit %zu loaded %d times", nb, u, seen[u]), 1;
    return 0;
}

template <uint32_t T>
int selftest_type(uint64_t *rng, int nb, char *msg, size_t cap) {
    const int cols = 256 * nb;
    const int bb = T == MU_TYPE_Q4_K ? 144 : (T == MU_TYPE_Q5_K ? 176 : 210);
    std::vector<uint8_t> raw((size_t)nb * bb), qs((size_t)nb * 128), qh((size_t)nb * 64 + 16), meta((size_t)nb * 16);
    std::vector<uint16_t> d((size_t)nb);
    std::vector<float> ref(cols), out(cols), x(cols), dx(cols / 16);
    std::vector<int8_t> xq(cols);
    if (mu_random_blocks(T, raw.data(), cols, rng, 0.05f) != 0) return snprintf(msg, cap, "random blocks"), 1;
    mu_dequant_row(T, raw.data(), ref.data(), cols);
    for (int b = 0; b < nb; b++) kq_repack_block(T, raw.data() + (size_t)b * bb, b, nb, qs.data(), qh.data(), meta.data(), d.data());
    for (int i = 0; i < cols; i++) {
        out[i] = NAN;
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        xq[i] = (int8_t)((int)((*rng >> 33) % 255) - 127);
        x[i] = (float)((int)((*rng >> 20) % 2001) - 1000) * 1e-3f;
    }
    for (int g = 0; g < cols / 16; g++) dx[g] = 0.001f + 0.0001f * (float)(g % 7);
    double fast = 0, exact = 0, rfast = 0, rexact = 0, mag_f = 0, mag_e = 0;
    for (int i = 0; i < cols; i++) {
        const double xt = (double)dx[i / 16] * xq[i];
        rfast += (double)ref[i] * xt, mag_f += fabs((double)ref[i] * xt);
        rexact += (double)ref[i] * x[i], mag_e += fabs((double)ref[i] * x[i]);
    }
    for (int b = 0; b < nb; b++)
        for (int c0 = 0; c0 < 2; c0++) {
            const KqLane<kq_u4> L = host_lane<T>(qs.data(), qh.data(), meta.data(), d.data(), b, nb, c0);
            kq_dequant<T>(L, c0, PutAt{out.data() + 256 * b});
            kq_act a;
            memset(&a, 0, sizeof a);
            for (int cc = 0; cc < 2; cc++) {
                const int X = c0 + 2 * cc;
                for (int t = 0; t < 4; t++) {
                    const int g = 16 * b + 4 * X + t;
                    memcpy(&a.xa[cc][t], xq.data() + 16 * g, 16);
                    a.dx[4 * cc + t] = dx[g];
                    int s = 0;
                    for (int i = 0; i < 16; i++) s += xq[16 * g + i];
                    a.asum[4 * cc + t] = s;
                }
                for (int s2 = 0; s2 < 2; s2++) {
                    float S = 0;
                    for (int t = 2 * s2; t < 2 * s2 + 2; t++) S += dx[16 * b + 4 * X + t] * (float)a.asum[4 * cc + t];
                    a.S[2 * cc + s2] = S;
                }
            }
            fast += kq_dot_fast<T>(L, c0, a);
            exact += kq_dot_exact<T>(L, c0, XAt{x.data() + 256 * b});
        }
    int bad = 0;
    for (int i = 0; i < cols; i++) bad += !(out[i] == ref[i]);
    if (bad) return snprintf(msg, cap, "%s: %d of %d dequantized values differ from the CPU's", mu_type_name(T), bad, cols), 1;
    if (!(fabs(fast - rfast) <= 2e-5 * mag_f + 1e-6))
        return snprintf(msg, cap, "%s: fast-lane dot %.9g, reference %.9g", mu_type_name(T), fast, rfast), 1;
    if (!(fabs(exact - rexact) <= 2e-5 * mag_e + 1e-6))
        return snprintf(msg, cap, "%s: exact-lane dot %.9g, reference %.9g", mu_type_name(T), exact, rexact), 1;
    return 0;
}

} // namespace

extern "C" int mu_cuda_selftest_kq(char *msg, size_t cap) {
    /* rows of one block, of groups short and full, and ragged last groups */
    static const int widths[] = {1, 3, 15, 16, 17, 26, 32, 39, 78};
    uint64_t rng = 0x1234567ull;
    for (int nb : widths) {
        if (selftest_tiles(nb, 4, msg, cap) || selftest_tiles(nb, 2, msg, cap)) return 1;
        for (int rep = 0; rep < 4; rep++) {
            if (selftest_type<MU_TYPE_Q4_K>(&rng, nb, msg, cap)) return 1;
            if (selftest_type<MU_TYPE_Q5_K>(&rng, nb, msg, cap)) return 1;
            if (selftest_type<MU_TYPE_Q6_K>(&rng, nb, msg, cap)) return 1;
        }
    }
    return 0;
}
