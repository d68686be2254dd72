/* test_cuda.c — the CUDA backend against CPU references.
 *
 * Part 1, kernels: every kernel family on random data (never zeros), with
 * device outputs poisoned before the launch so unwritten elements show up:
 * matvec in both lanes for every weight format (alone and as a
 * concatenated row space), dequantization, gate/up + SwiGLU + int8 blocks,
 * the residual/norm tail, the embedding, the LM head with device-side
 * selection, QK-norm + RoPE + KV append, and split-K attention (tensor-core
 * and f32 paths, contiguous and wrapped rings, several depths).
 *
 * Part 2, parity on the fixtures (tests/data; more when MUSER_DATA_DIR has
 * the shared set), in decode and prefill mode, with the core thresholds:
 *   exact lane + f32 KV vs M.exact.f32: max |d| <= 5e-4, RMS <= 5e-5,
 *     decisive top-1 100%;
 *   exact lane + f16 KV, and fast lane + f16 KV: mean KL no larger than
 *     llama.cpp's own (M.decode.f32 against M.exact.f32);
 * plus graph replay == op-by-op launches, device selection == argmax of
 * the logits, each row's top k after a bias == a full sort's, and
 * truncation.
 *
 * Without a GPU (or without nvcc at build time) it prints a loud SKIPPED
 * line and exits 77. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "muser.h"
#include "fixture.h"
#include "testlib.h"

#ifdef MUSER_HAVE_CUDA
#include "cpu/ops.h"
#include "backends.h"
#include "cuda/cu_shared.h"
#include "cuda/cuda_api.h"
#include "cuda/cuda_test.h"
#include "kernel_ref.h"
#include "rows_test.h"
#include "engine/engine.h"
#include "engine/parity.h"
#include "quant/quant.h"

static int g_cap; /* the matvec grid's cap in the kernel tests (0: every SM) */
static bool g_clusters; /* the route set has clusters (else the portable paths: never a cluster launch) */

/* the routes of the kernel tests' matvec launches, on the current grid cap */
static void routes(int flat, int cut) { mu_cuda_test_routes(g_cap, flat, cut, 1); }

/* A STORE launch of nseg K-quant matrices (fast lane, input quantized)
 * against the reference: as the launch chooses, with ranges cut inside
 * rows forced and with whole rows per warp, on a grid of at most cap
 * blocks (0: every SM). */
static void check_cut_case(int nseg, const uint32_t *types, const int64_t *rows, int64_t cols, int cap) {
    void *ws[4];
    int64_t total = 0;
    for (int i = 0; i < nseg; i++) ws[i] = rand_weight(types[i], rows[i], cols), total += rows[i];
    float *x = malloc(sizeof(float) * cols), *y = malloc(sizeof(float) * (size_t)total);
    int8_t *xq = malloc(cols);
    float *xds = malloc(sizeof(float) * cols / 8);
    rand_vec(x, cols, 1.5f);
    const int cut_run[3] = {MU_CU_ROUTE_AUTO, MU_CU_ROUTE_ALWAYS, MU_CU_ROUTE_NEVER};
    const char *name_run[3] = {"as chosen", "cut ranges", "whole rows"};
    for (int run = 0; run < 3; run++) {
        mu_cuda_test_routes(cap, MU_CU_ROUTE_AUTO, cut_run[run], 1);
        for (int64_t i = 0; i < total; i++) y[i] = NAN; /* a row left unwritten fails */
        int rc = mu_cuda_test_matvec(nseg, types, (const void *const *)ws, rows, cols, x, 1, y, xq, xds, 0);
        CHECKF(rc == 0, "%d-matrix matvec, %lld rows x %lld: %s", nseg, (long long)total, (long long)cols,
               muser_last_error());
        double worst = 0;
        const int bad = rc == 0 ? rows_off(nseg, types, ws, rows, cols, x, xq, xds, 1, y, &worst) : 0;
        CHECKF(bad == 0, "%d-matrix matvec, %lld rows x %lld, grid cap %d, fast lane, %s: %d rows off (worst %.2f x tol)",
               nseg, (long long)total, (long long)cols, cap, name_run[run], bad, worst);
    }
    mu_cuda_test_routes(0, MU_CU_ROUTE_AUTO, MU_CU_ROUTE_AUTO, 1);
    for (int i = 0; i < nseg; i++) free(ws[i]);
    free(x), free(y), free(xq), free(xds);
}

static void test_matvec_cut(void) {
    /* the 30B's qkv + gate (8704 rows of 26 blocks, v in Q6_K); ragged
     * segments; rows of 78 blocks; then on a few blocks, so each warp's
     * range crosses many rows: rows of one batch (16 blocks), of a batch
     * and a block (17), two types */
    const uint32_t qkvg_t[4] = {MU_TYPE_Q4_K, MU_TYPE_Q4_K, MU_TYPE_Q6_K, MU_TYPE_Q4_K};
    const int64_t qkvg[4] = {4096, 256, 256, 4096}, ragged[4] = {3001, 130, 131, 1137}, wide[4] = {2500, 64, 64, 2117};
    check_cut_case(4, qkvg_t, qkvg, 6656, 0);
    check_cut_case(4, qkvg_t, ragged, 6656, 0);
    check_cut_case(4, qkvg_t, wide, 19968, 0);
    const uint32_t one_t[1] = {MU_TYPE_Q4_K}, q6_t[1] = {MU_TYPE_Q6_K}, two_t[2] = {MU_TYPE_Q5_K, MU_TYPE_Q4_K};
    const int64_t one[1] = {1000}, q6[1] = {333}, two[2] = {300, 200};
    check_cut_case(1, one_t, one, 4096, 5);
    check_cut_case(1, q6_t, q6, 4352, 3);
    check_cut_case(2, two_t, two, 6656, 4);
    printf("  matvec, ranges cut inside rows: 6 shapes (the 30B's qkv + gate among them), as chosen, forced, off\n");
}

static void test_matvec(void) {
    /* sizes: the 30B's input widths (6656, 19968, 4096) and a small one */
    const int64_t cols_list[] = {256, 4096, 6656, 19968};
    for (int ti = 0; ti < N_TYPES; ti++) {
        for (int ci = 0; ci < 4; ci++) {
            const uint32_t type = all_types[ti];
            const int64_t cols = cols_list[ci], rows = 77;
            void *w = rand_weight(type, rows, cols);
            float *x = malloc(sizeof(float) * (size_t)cols), *y = malloc(sizeof(float) * rows);
            int8_t *xq = malloc((size_t)cols);
            float *xds = malloc(sizeof(float) * (size_t)cols / 8);
            rand_vec(x, cols, 1.0f);
            for (int lane = 0; lane < 2; lane++) {
                const void *raws[1] = {w};
                const int64_t nr[1] = {rows};
                /* fast-lane K-quant rows of more than one batch: also in parts of one batch */
                const int batches = (int)((cols / 256 + 15) / 16);
                const int runs = lane == 1 && is_kquant(type) && batches > 1 ? 2 : 1;
                for (int run = 0; run < runs; run++) {
                    const int bp = run ? batches : 0;
                    int rc = mu_cuda_test_matvec(1, &type, raws, nr, cols, x, lane, y, xq, xds, bp);
                    CHECKF(rc == 0, "matvec %s: %s", mu_type_name(type), muser_last_error());
                    if (rc) continue;
                    if (lane == 1) check_q8("matvec input", x, xq, xds, cols);
                    double worst = 0;
                    const int bad = rows_off(1, &type, &w, nr, cols, x, xq, xds, lane, y, &worst);
                    CHECKF(bad == 0, "matvec %s cols %lld lane %s (%d batch parts): %d of %lld rows off (worst %.2f x tol)",
                           mu_type_name(type), (long long)cols, lane ? "fast" : "exact", bp, bad, (long long)rows, worst);
                }
            }
            free(w), free(x), free(y), free(xq), free(xds);
        }
    }
    /* one launch over q, k, v, gate with mixed formats (as Meta's mix: V in
     * Q6_K), rows of 26 blocks (the 30B's width): whole, and in two batch parts */
    const int64_t cols = 6656;
    const uint32_t types[4] = {MU_TYPE_Q4_K, MU_TYPE_Q4_K, MU_TYPE_Q6_K, MU_TYPE_Q5_K};
    const int64_t rows[4] = {256, 40, 40, 256};
    void *ws[4];
    int64_t total = 0;
    for (int i = 0; i < 4; i++) ws[i] = rand_weight(types[i], rows[i], cols), total += rows[i];
    float *x = malloc(sizeof(float) * cols), *y = malloc(sizeof(float) * (size_t)total);
    int8_t *xq = malloc(cols);
    float *xds = malloc(sizeof(float) * cols / 8);
    rand_vec(x, cols, 2.0f);
    for (int run = 0; run < 3; run++) {
        const int lane = run ? 1 : 0, bp = run == 2 ? 2 : 0;
        int rc = mu_cuda_test_matvec(4, types, (const void *const *)ws, rows, cols, x, lane, y, xq, xds, bp);
        CHECKF(rc == 0, "qkvg matvec: %s", muser_last_error());
        const int bad = rows_off(4, types, ws, rows, cols, x, xq, xds, lane, y, NULL);
        CHECKF(bad == 0, "qkvg matvec lane %d (%d batch parts): %d rows off", lane, bp, bad);
    }
    for (int i = 0; i < 4; i++) free(ws[i]);
    free(x), free(y), free(xq), free(xds);
    printf("  matvec: %d formats x 4 widths x 2 lanes (K-quant rows past one batch also in batch parts), and a "
           "4-matrix row space\n", N_TYPES);
}

static void test_dequant(void) {
    /* one partial span, and many spans (dequant_kernel writes spans of 32 KB) */
    static const int64_t shapes[2][2] = {{9, 512}, {301, 1024}};
    for (int ti = 0; ti < 2 * N_TYPES; ti++) {
        const uint32_t type = all_types[ti % N_TYPES];
        const int64_t rows = shapes[ti / N_TYPES][0], cols = shapes[ti / N_TYPES][1];
        void *w = rand_weight(type, rows, cols);
        float *ref = malloc(sizeof(float) * rows * cols), *out = malloc(sizeof(float) * rows * cols);
        for (int64_t r = 0; r < rows; r++) mu_dequant_row(type, (const uint8_t *)w + r * mu_row_bytes(type, cols), ref + r * cols, cols);
        for (int f16 = 0; f16 < 2; f16++) {
            CHECK(mu_cuda_test_dequant(type, w, rows, cols, f16, out) == 0);
            int bad = 0;
            for (int64_t i = 0; i < rows * cols; i++) {
                const float want = f16 ? mu_f16_to_f32(mu_f32_to_f16(ref[i])) : ref[i];
                if (!(out[i] == want)) bad++;
            }
            CHECKF(bad == 0, "dequant %s to %s: %d of %lld values differ", mu_type_name(type), f16 ? "f16" : "f32", bad,
                   (long long)(rows * cols));
        }
        free(w), free(ref), free(out);
    }
    printf("  dequant: %d formats to f32 and f16, 9 x 512 and 301 x 1024, bit-exact\n", N_TYPES);
}

static void test_gateup(void) {
    /* shapes: short rows; rows of 17 blocks (a batch and one block) and of
     * the 30B's 26 with more row pairs than an H200's 4224 warps, so flat
     * batches run across rows within each warp's range; each fast-lane
     * K-quant case as the launch chooses, with whole rows per warp and with
     * flat batches forced */
    static const int64_t shapes[3][2] = {{160, 512}, {160, 4352}, {3 * 4224 + 80, 6656}};
    /* (unit formats on the short shape only: one of each decoder family) */
    static const uint32_t types[] = {MU_TYPE_Q4_K, MU_TYPE_Q5_K, MU_TYPE_Q6_K, MU_TYPE_Q8_0,
                                     MU_TYPE_Q4_1, MU_TYPE_IQ4_XS, MU_TYPE_Q3_K, MU_TYPE_Q2_K};
    const int nt = (int)(sizeof types / sizeof types[0]);
    for (int c = 0; c < 3 * nt; c++) {
        const int si = c / nt, ti = c % nt;
        const int64_t F = shapes[si][0], cols = shapes[si][1];
        const uint32_t type = types[ti];
        if (si > 0 && !is_kquant(type)) continue;
        void *wg = rand_weight(type, F, cols), *wu = rand_weight(type, F, cols);
        float *x = malloc(sizeof(float) * cols), *out = malloc(sizeof(float) * F);
        float *xds = malloc(sizeof(float) * cols / 8);
        int8_t *xq = malloc(cols);
        rand_vec(x, cols, 3.0f);
        for (int run = 0; run < 4; run++) {
            const int lane = run ? 1 : 0;
            if (run >= 2 && !is_kquant(type)) continue;
            const int flat = run == 2 ? MU_CU_ROUTE_NEVER : run == 3 ? MU_CU_ROUTE_ALWAYS : MU_CU_ROUTE_AUTO;
            routes(flat, MU_CU_ROUTE_AUTO);
            for (int64_t r = 0; r < F; r++) out[r] = NAN; /* a row left unwritten fails */
            int rc = mu_cuda_test_gateup(type, wg, wu, F, cols, x, lane, out, xq, xds);
            routes(MU_CU_ROUTE_AUTO, MU_CU_ROUTE_AUTO);
            CHECKF(rc == 0, "gateup: %s", muser_last_error());
            int bad = 0;
            for (int64_t r = 0; r < F; r++) {
                double tg, tu;
                const size_t rb = mu_row_bytes(type, cols);
                const double g = ref_row(type, (const uint8_t *)wg + r * rb, cols, x, xq, xds, lane, &tg);
                const double u = ref_row(type, (const uint8_t *)wu + r * rb, cols, x, xq, xds, lane, &tu);
                const double sg = g / (1.0 + exp(-g)), ref = sg * u;
                const double tol = tg * fabs(u) * 1.2 + tu * fabs(sg) + 1e-6 * fabs(ref) + 1e-7;
                if (!(fabs(out[r] - ref) <= tol)) bad++;
            }
            CHECKF(bad == 0, "gateup %s cols %lld lane %d%s: %d of %lld off", mu_type_name(type), (long long)cols, lane,
                   run == 2 ? " (whole rows)" : run == 3 ? " (flat)" : "", bad, (long long)F);
        }
        free(wg), free(wu), free(x), free(out), free(xds), free(xq);
    }
    printf("  gate/up + SwiGLU (fast lane: flat batches across rows and whole rows)\n");
}

/* rmsnorm in double with the CPU's order of float operations at the end */
static void ref_norm(const double *x, const float *w, double *y, int64_t n, double eps) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
    const double r = 1.0 / sqrt(s / n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * r * (w ? w[i] : 1.0);
}

static double rel_err(const float *a, const double *b, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    return sqrt(num / (den + 1e-300));
}

static void test_resnorm_cols(int64_t cols);
static void test_resnorm(void) {
    test_resnorm_cols(512);
    test_resnorm_cols(19968); /* split in parts like the 30B's ffn down */
}

static void test_resnorm_cols(int64_t cols) {
    const int64_t n = 640;
    const uint32_t type = MU_TYPE_Q4_K;
    void *w = rand_weight(type, n, cols);
    float *x = malloc(sizeof(float) * cols), *wp = malloc(sizeof(float) * n), *wn = malloc(sizeof(float) * n);
    float *h = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n), *ho = malloc(sizeof(float) * n);
    float *ao = malloc(sizeof(float) * n), *ads = malloc(sizeof(float) * n / 8), *xds = malloc(sizeof(float) * cols / 8);
    int8_t *aq = malloc(n), *xq = malloc(cols);
    double *hr = malloc(sizeof(double) * n), *ar = malloc(sizeof(double) * n), *tr = malloc(sizeof(double) * n);
    rand_vec(x, cols, 1.0f);
    rand_vec(h, n, 2.0f);
    for (int64_t i = 0; i < n; i++)
        wp[i] = 0.25f * (1.0f + 0.1f * tl_rand_normal(&kref_rng)), wn[i] = 1.0f + 0.1f * tl_rand_normal(&kref_rng);
    for (int with_post = 0; with_post < 2; with_post++) {
        int rc = mu_cuda_test_matvec_resnorm(type, w, n, cols, x, 1, with_post ? wp : NULL, 1e-8f, h, wn, 1e-5f, y, ho,
                                             ao, aq, ads, xq, xds);
        CHECKF(rc == 0, "matvec + resnorm: %s", muser_last_error());
        const int bad = rows_off(1, &type, &w, &n, cols, x, xq, xds, 1, y, NULL);
        CHECKF(bad == 0, "matvec + resnorm: %d rows of y off", bad);
        /* the tail, from the kernel's own y */
        for (int64_t i = 0; i < n; i++) tr[i] = y[i];
        if (with_post) ref_norm(tr, wp, tr, n, 1e-8);
        for (int64_t i = 0; i < n; i++) hr[i] = (double)h[i] + tr[i];
        ref_norm(hr, wn, ar, n, 1e-5);
        const double eh = rel_err(ho, hr, n), ea = rel_err(ao, ar, n);
        CHECKF(eh < 2e-6 && ea < 2e-6, "resnorm tail (post %d): h rel err %.3g, out rel err %.3g", with_post, eh, ea);
        check_q8("resnorm output", ao, aq, ads, n);
    }
    printf("  matvec + last-block residual/norm tail (counter reused)\n");
    free(w), free(x), free(wp), free(wn), free(h), free(y), free(ho), free(ao), free(ads), free(xds), free(aq), free(xq);
    free(hr), free(ar), free(tr);
}

static void test_embed(void) {
    const int64_t V = 50, E = 512;
    const int T = 5;
    const int32_t tokens[5] = {3, 49, 0, 17, 3};
    static const uint32_t types[] = {MU_TYPE_Q4_K, MU_TYPE_Q6_K, MU_TYPE_F32, MU_TYPE_Q3_K, MU_TYPE_IQ4_NL};
    for (int ti = 0; ti < (int)(sizeof types / sizeof types[0]); ti++) {
        const uint32_t type = types[ti];
        void *w = rand_weight(type, V, E);
        float *wn = malloc(sizeof(float) * E), *h = malloc(sizeof(float) * T * E), *a = malloc(sizeof(float) * T * E);
        float *row = malloc(sizeof(float) * E);
        double *hr = malloc(sizeof(double) * E), *ar = malloc(sizeof(double) * E);
        for (int64_t i = 0; i < E; i++) wn[i] = 1.0f + 0.1f * tl_rand_normal(&kref_rng);
        for (int en = 0; en < 2; en++) {
            CHECKF(mu_cuda_test_embed(type, w, V, E, tokens, T, en, wn, 1e-5f, h, a) == 0, "embed: %s", muser_last_error());
            double worst = 0;
            for (int t = 0; t < T; t++) {
                mu_dequant_row(type, (const uint8_t *)w + tokens[t] * mu_row_bytes(type, E), row, E);
                for (int64_t i = 0; i < E; i++) hr[i] = row[i];
                if (en) ref_norm(hr, NULL, hr, E, 1e-5);
                ref_norm(hr, wn, ar, E, 1e-5);
                double e1 = rel_err(h + t * E, hr, E), e2 = rel_err(a + t * E, ar, E);
                worst = fmax(worst, fmax(e1, e2));
            }
            CHECKF(worst < 2e-6, "embed %s norm %d: rel err %.3g", mu_type_name(type), en, worst);
        }
        free(w), free(wn), free(h), free(a), free(row), free(hr), free(ar);
    }
    printf("  embedding rows + norms\n");
}

/* SwiGLU with the tensor-core batch's packed inputs: rows of an even and an
 * odd count of K-blocks (the missing block of the last span zero), tokens
 * in part of a tile and over several */
static void test_swiglu_pack(void) {
    const int64_t ns[] = {512, 768, 19968};
    const int Ts[] = {1, 5, 9};
    for (int c = 0; c < 3; c++) {
        const int64_t n = ns[c], total = n * Ts[c];
        float *g = malloc(sizeof(float) * total), *u = malloc(sizeof(float) * total), *o = malloc(sizeof(float) * total);
        for (int64_t i = 0; i < total; i++) g[i] = 2.0f * tl_rand_normal(&kref_rng), u[i] = tl_rand_normal(&kref_rng);
        CHECKF(mu_cuda_test_swiglu_pack(n, Ts[c], g, u, o) == 0, "swiglu, %lld x %d tokens: %s", (long long)n, Ts[c],
               muser_last_error());
        int bad = 0;
        for (int64_t i = 0; i < total; i++) {
            const double r = (double)g[i] / (1.0 + exp(-(double)g[i])) * (double)u[i];
            if (!(fabs(o[i] - r) <= 1e-5 * (1.0 + fabs(r)))) bad++;
        }
        CHECKF(bad == 0, "swiglu, %lld x %d tokens: %d values off", (long long)n, Ts[c], bad);
        free(g), free(u), free(o);
    }
    printf("  SwiGLU + packed inputs of the tensor-core batch (even and odd K-block counts)\n");
}

/* mu_cu_rows_top against a full sort on the host: rows of random values
 * with many ties, NaNs, -0 and +0, infinities; a bias (a repeated id);
 * k from 1 to MU_CU_TOP_MAX and the whole row. */
static void test_rows_top(void) {
    const int64_t ns[] = {1, 300, 5000, 202048};
    const int ks[] = {1, 2, 64, 255, 256};
    int cases = 0;
    for (int c = 0; c < 4; c++)
        for (int q = 0; q < 5; q++) {
            const int64_t n = ns[c];
            const int k = ks[q] > n ? (int)n : ks[q], T = 3;
            float *x = malloc(sizeof(float) * (size_t)(n * T)), *vals = malloc(sizeof(float) * (size_t)T * k);
            int32_t *ids = malloc(sizeof(int32_t) * (size_t)T * k);
            int *order = malloc(sizeof(int) * (size_t)n);
            for (int64_t i = 0; i < n * T; i++) {
                const uint64_t r = tl_rand_u64(&kref_rng) % 100;
                x[i] = r < 3 ? NAN : r < 5 ? -0.0f : r < 7 ? 0.0f : r < 8 ? -INFINITY : r < 9 ? INFINITY
                                                                 : (float)(int)(3.0f * tl_rand_normal(&kref_rng)) * 0.25f;
            }
            const int bias_off[4] = {0, 3, 3, 5};
            const int32_t bias_ids[5] = {0, (int32_t)(n / 2), 0, (int32_t)(n - 1), (int32_t)(n / 3)};
            const float bias_vals[5] = {2.5f, -1.0f, 0.75f, 40.0f, -3.0f};
            CHECKF(mu_cuda_test_rows_top(x, n, T, bias_off, bias_ids, bias_vals, k, vals, ids) == 0, "rows top: %s",
                   muser_last_error());
            int bad = 0;
            for (int t = 0; t < T; t++) {
                const float *row = x + (int64_t)t * n; /* (the bias is in it now) */
                tl_rank_order(row, (int)n, order);
                bad += !tl_same_top(row, order, vals + t * k, ids + t * k, k);
            }
            CHECKF(bad == 0, "rows top, n %lld, k %d: %d of %d rows differ from a full sort", (long long)n, k, bad, T);
            cases++;
            free(x), free(vals), free(ids), free(order);
        }
    printf("  each row's top k after a bias (%d cases: ties, NaN, -0/+0, infinities)\n", cases);
}

static void test_logits(void) {
    const int64_t V = 3001, cols = 512;
    for (int ti = 0; ti < 2; ti++) {
        const uint32_t type = ti == 0 ? MU_TYPE_Q5_K : MU_TYPE_Q6_K;
        void *w = rand_weight(type, V, cols);
        float *x = malloc(sizeof(float) * cols), *lg = malloc(sizeof(float) * V), *xds = malloc(sizeof(float) * cols / 8);
        int8_t *xq = malloc(cols);
        rand_vec(x, cols, 30.0f);
        /* the fast lane's int8 blocks, for the reference */
        float ytmp;
        const void *raws[1] = {w};
        const int64_t one = 1;
        mu_cuda_test_matvec(1, &type, raws, &one, cols, x, 1, &ytmp, xq, xds, 0);
        for (int lane = 0; lane < 2; lane++) {
            int32_t chosen = -1;
            const float scale = 0.1961161345f, cap = 20.0f;
            CHECKF(mu_cuda_test_logits(type, w, V, cols, x, lane, scale, cap, 0.0f, 1, 7, lg, &chosen) == 0, "logits: %s",
                   muser_last_error());
            int bad = 0;
            for (int64_t r = 0; r < V; r++) {
                double tol;
                const double y = ref_row(type, (const uint8_t *)w + r * mu_row_bytes(type, cols), cols, x, xq, xds, lane, &tol);
                const double ref = cap * tanh(y * scale / cap);
                if (!(fabs(lg[r] - ref) <= tol * scale + 2e-6 * cap)) bad++;
            }
            CHECKF(bad == 0, "logits %s lane %d: %d of %lld off", mu_type_name(type), lane, bad, (long long)V);
            CHECKF(chosen == mu_argmax(lg, (int)V), "device argmax %d, host argmax of its logits %d", chosen,
                   mu_argmax(lg, (int)V));
            /* sampling: valid ids, a near-zero temperature is greedy, and seeds vary the choice */
            int32_t s1 = -1, s2 = -1, s3 = -1;
            mu_cuda_test_logits(type, w, V, cols, x, lane, scale, cap, 1e-4f, 5, 7, lg, &s1);
            CHECKF(s1 == chosen, "temperature 1e-4 chose %d, argmax %d", s1, chosen);
            int distinct = 0;
            int32_t prev = -2;
            for (uint32_t seed = 0; seed < 8; seed++) {
                mu_cuda_test_logits(type, w, V, cols, x, lane, scale, cap, 50.0f, seed, 7, lg, &s2);
                CHECK(s2 >= 0 && s2 < V);
                distinct += s2 != prev;
                prev = s2;
            }
            mu_cuda_test_logits(type, w, V, cols, x, lane, scale, cap, 50.0f, 3, 8, lg, &s3);
            CHECKF(distinct >= 4, "temperature 50: only %d changes over 8 seeds", distinct);
        }
        free(w), free(x), free(lg), free(xds), free(xq);
    }
    printf("  LM head: scale + soft-cap, greedy and sampled device selection\n");
}

static void test_qkv_post(void) {
    const int H = 8, Hk = 2;
    const int64_t cap = 11;
    for (int variant = 0; variant < 6; variant++) {
        /* variants 4, 5: one token with q, k, v in a matvec's batch parts */
        const int T = variant < 4 ? 3 : 1, parts = variant < 4 ? 1 : variant - 2;
        const bool kv_f32 = variant & 1, neox = variant & 2;
        const int n_rot = neox ? 96 : 128;
        mu_hparams hp;
        memset(&hp, 0, sizeof hp);
        hp.head_dim = 128;
        hp.n_rot = n_rot;
        hp.rope_type = neox ? MU_ROPE_NEOX : MU_ROPE_NORM;
        hp.rope_freq_scale = 1.0f;
        float *q = malloc(sizeof(float) * T * H * 128), *k = malloc(sizeof(float) * T * Hk * 128);
        float *v = malloc(sizeof(float) * T * Hk * 128), *qn = malloc(sizeof(float) * T * H * 128);
        float *kc = malloc(sizeof(float) * cap * Hk * 128), *vc = malloc(sizeof(float) * cap * Hk * 128);
        float qnw[128], knw[128], *cs = malloc(sizeof(float) * T * n_rot);
        rand_vec(q, T * H * 128, 2.0f);
        rand_vec(k, T * Hk * 128, 2.0f);
        rand_vec(v, T * Hk * 128, 1.0f);
        for (int i = 0; i < 128; i++)
            qnw[i] = 3.87f + 0.1f * tl_rand_normal(&kref_rng), knw[i] = 1.0f + 0.1f * tl_rand_normal(&kref_rng);
        const int32_t slots[3] = {10, 0, 4};
        for (int t = 0; t < T; t++) mu_rope_table(&hp, 500000.0f, NULL, 100 + 37 * t, cs + t * n_rot);
        mu_cuda_test_qkv a = {T, H, Hk, n_rot, neox, 1, kv_f32, cap, q, k, v, qnw, knw, 1e-5f, cs, slots, parts, qn, kc, vc};
        CHECKF(mu_cuda_test_qkv_post(&a) == 0, "qkv_post: %s", muser_last_error());
        double worst = 0;
        int bad_rows = 0;
        for (int t = 0; t < T; t++) {
            float tmp[128];
            for (int h = 0; h < H + Hk; h++) {
                const bool isq = h < H;
                memcpy(tmp, isq ? q + (t * H + h) * 128 : k + (t * Hk + h - H) * 128, sizeof tmp);
                mu_rmsnorm(tmp, isq ? qnw : knw, tmp, 128, 1e-5f);
                mu_rope_apply(&hp, cs + t * n_rot, tmp, 1);
                const float *got = isq ? qn + (t * H + h) * 128 : kc + ((int64_t)slots[t] * Hk + h - H) * 128;
                for (int d = 0; d < 128; d++) {
                    const float want = isq || kv_f32 ? tmp[d] : mu_f16_to_f32(mu_f32_to_f16(tmp[d]));
                    /* relative to the head's scale (rms ~ the norm weight) */
                    const double e = fabs(got[d] - want) / (fabs(want) + 0.1);
                    worst = fmax(worst, kv_f32 || isq ? e : e * 0.01);
                }
                if (!isq) {
                    const float *vg = vc + ((int64_t)slots[t] * Hk + h - H) * 128, *vw = v + (t * Hk + h - H) * 128;
                    for (int d = 0; d < 128; d++)
                        /* (parts: the splits' sum rounds within a few ulps of the value's scale) */
                        if (fabs(vg[d] - vw[d]) > (kv_f32 ? (parts > 1 ? 1e-6 * (fabs(vw[d]) + 0.25) : 0)
                                                          : 1e-3 * fabs(vw[d]) + 1e-6))
                            bad_rows++;
                }
            }
        }
        for (int64_t s = 0; s < cap; s++) {
            if (s == 10 || s == 0 || s == 4) continue;
            for (int i = 0; i < Hk * 128; i++)
                if (kc[s * Hk * 128 + i] != 0.f || vc[s * Hk * 128 + i] != 0.f) bad_rows++;
        }
        CHECKF(worst < 1e-5 && bad_rows == 0, "qkv_post (kv %s, %s, %d parts): worst rel %.3g, %d bad values",
               kv_f32 ? "f32" : "f16", neox ? "neox" : "norm", parts, worst, bad_rows);
        free(q), free(k), free(v), free(qn), free(kc), free(vc), free(cs);
    }
    printf("  QK-norm + RoPE (NORM, NEOX) + KV append, and from batch parts\n");
}

/* Attention in double over the visible rows of a plane. */
static void ref_attention(const mu_cuda_test_attn *a, int t, double *out) {
    const int per = a->n_head / a->n_head_kv, kvd = a->n_head_kv * 128;
    const int64_t n = a->n_visible[t];
    double *s = malloc(sizeof(double) * (size_t)n);
    for (int h = 0; h < a->n_head; h++) {
        const int g = h / per;
        const float *q = a->q + ((int64_t)t * a->n_head + h) * 128;
        double mx = -INFINITY;
        for (int64_t i = 0; i < n; i++) {
            int64_t slot = a->phys_first[t] + i;
            if (slot >= a->capacity) slot -= a->capacity;
            const float *k = a->kc + slot * kvd + g * 128;
            double d = 0;
            for (int e = 0; e < 128; e++) d += (double)q[e] * k[e];
            s[i] = d * a->scale;
            mx = fmax(mx, s[i]);
        }
        double sum = 0;
        for (int64_t i = 0; i < n; i++) sum += (s[i] = exp(s[i] - mx));
        for (int e = 0; e < 128; e++) {
            double o = 0;
            for (int64_t i = 0; i < n; i++) {
                int64_t slot = a->phys_first[t] + i;
                if (slot >= a->capacity) slot -= a->capacity;
                o += s[i] * a->vc[slot * kvd + g * 128 + e];
            }
            o /= sum;
            if (a->gate) o *= 1.0 / (1.0 + exp(-(double)a->gate[((int64_t)t * a->n_head + h) * 128 + e]));
            out[((int64_t)t * a->n_head + h) * 128 + e] = o;
        }
    }
    free(s);
}

static void test_attention(void) {
    typedef struct { int H, Hk; int64_t cap; int T; int64_t n[3], first[3]; int route[3]; int split_cap; } acase;
    const acase cases[] = {
        {32, 2, 4096, 1, {1}, {0}, {0}, 32},             /* first token                          */
        {32, 2, 4096, 1, {17}, {0}, {0}, 32},            /* a partial block                      */
        {32, 2, 4096, 1, {300}, {5}, {0}, 32},           /* contiguous, several splits           */
        {32, 2, 2559, 1, {2048}, {1000}, {1}, 32},       /* wrapped SWA ring (explicit origin)   */
        {32, 2, 8192, 1, {5000}, {0}, {0}, 128},         /* growing plane, many splits           */
        {4, 1, 95, 3, {30, 31, 32}, {80, 80, 80}, {1, 1, 1}, 8}, /* nano-like: 4 heads per KV, wraps */
        {32, 2, 600, 3, {200, 201, 202}, {0, 0, 0}, {0, 0, 0}, 8}, /* prefill chunk                 */
    };
    int n_cases = (int)(sizeof cases / sizeof cases[0]);
    for (int ci = 0; ci < n_cases; ci++) {
        const acase *c = &cases[ci];
        const int kvd = c->Hk * 128;
        float *q = malloc(sizeof(float) * c->T * c->H * 128), *kc = malloc(sizeof(float) * c->cap * kvd);
        float *vc = malloc(sizeof(float) * c->cap * kvd), *gate = malloc(sizeof(float) * c->T * c->H * 128);
        float *out = malloc(sizeof(float) * c->T * c->H * 128), *ods = malloc(sizeof(float) * c->H * 16);
        int8_t *oq = malloc(c->H * 128);
        double *ref = malloc(sizeof(double) * c->T * c->H * 128);
        rand_vec(q, c->T * c->H * 128, 1.0f);
        /* qk-normed magnitudes: q ~ 3.87 per dim */
        for (int64_t i = 0; i < c->T * c->H * 128; i++) q[i] *= 3.87f;
        rand_vec(gate, c->T * c->H * 128, 1.0f);
        int32_t nv[3], pf[3], rt[3];
        for (int t = 0; t < c->T; t++) nv[t] = (int32_t)c->n[t], pf[t] = (int32_t)c->first[t], rt[t] = c->route[t];
        for (int path = 0; path < 3; path++) {
            /* 0: f32 KV (f32 path), 1: f16 KV on the f32 path, 2: f16 KV on tensor cores */
            const int kv_f32 = path == 0, use_mma = path == 2;
            rand_vec(kc, c->cap * kvd, 1.0f);
            rand_vec(vc, c->cap * kvd, 1.0f);
            if (!kv_f32)
                for (int64_t i = 0; i < c->cap * kvd; i++)
                    kc[i] = mu_f16_to_f32(mu_f32_to_f16(kc[i])), vc[i] = mu_f16_to_f32(mu_f32_to_f16(vc[i]));
            /* case 3: the gate in a matvec's batch parts */
            mu_cuda_test_attn a = {c->T, c->H, c->Hk, kv_f32, use_mma, c->split_cap, c->cap, q, kc, vc, nv, pf, rt,
                                   0.08838834764831845f, ci % 2 ? gate : NULL, ci == 3 ? 2 : 1, out,
                                   c->T == 1 ? oq : NULL, ods};
            int rc = mu_cuda_test_attention(&a);
            CHECKF(rc == 0, "attention: %s", muser_last_error());
            if (rc) continue;
            for (int t = 0; t < c->T; t++) ref_attention(&a, t, ref);
            double worst = 0;
            for (int64_t i = 0; i < c->T * c->H * 128; i++) worst = fmax(worst, fabs(out[i] - ref[i]));
            const double tol = use_mma ? 2e-3 : 2e-5;
            CHECKF(finite_all(out, c->T * c->H * 128) && worst <= tol,
                   "attention case %d path %d (n %lld, %s): max |d| %.3g > %.1g", ci, path, (long long)c->n[0],
                   c->route[0] ? "origin" : "contiguous", worst, tol);
            if (c->T == 1) check_q8("attention output", out, oq, ods, c->H * 128);
        }
        free(q), free(kc), free(vc), free(gate), free(out), free(ods), free(oq), free(ref);
    }
    printf("  split-K attention: %d cases x (f32 KV, f16 KV f32 path, f16 KV tensor cores)\n", n_cases);
}

/* ---- part 2: parity on the fixtures ------------------------------------------------------- */

typedef struct run_opts {
    muser_lane lane;
    muser_kv_type kv;
    bool prefill;
} run_opts;

/* max |a - b| over count logits (the bit-identity checks want 0) */
static double max_abs_diff(const float *a, const float *b, size_t count) {
    double d = 0;
    for (size_t i = 0; i < count; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static float *run_cuda(muser_model *m, const int *tokens, int n, run_opts o, int V) {
    muser_session_params sp = muser_session_default_params();
    sp.backend = MUSER_BACKEND_CUDA;
    sp.kv_type = o.kv;
    sp.lane = o.lane;
    sp.n_ctx = 512;
    sp.n_batch = 64;
    muser_session *s = tl_session(m, &sp, "cuda session");
    if (!s) return NULL;
    float *out = tl_run_logits(s, tokens, n, V, o.prefill);
    muser_session_free(s);
    return out;
}

/* Decode-path invariants on one model: graph == op by op == no PDL, the
 * device choice == argmax of the logits, and truncate + refeed. */
static void check_decode_paths(muser_model *m, const int *tokens, int n, int V, const char *name) {
    for (int lane = 0; lane < 2; lane++) {
        muser_session_params sp = muser_session_default_params();
        sp.backend = MUSER_BACKEND_CUDA;
        sp.lane = lane ? MUSER_LANE_FAST : MUSER_LANE_EXACT;
        sp.n_ctx = 512;
        sp.n_batch = 64;
        muser_session *s = tl_session(m, &sp, "session");
        if (!s) return;
        float *a = malloc(sizeof(float) * (size_t)n * V);
        int mismatch_sel = 0;
        for (int i = 0; i < n; i++) {
            muser_token next = -1;
            CHECK(mu_session_decode_select(s, tokens[i], 0.0f, 0, true, &next) == 0);
            memcpy(a + (size_t)i * V, muser_session_logits(s), sizeof(float) * V);
            mismatch_sel += next != mu_argmax(a + (size_t)i * V, V);
        }
        CHECKF(mismatch_sel == 0, "%s lane %d: device choice differs from the logits' argmax at %d steps", name, lane,
               mismatch_sel);
        /* truncate to 2/3 and feed the rest again: identical logits */
        const int cut = n * 2 / 3;
        CHECK(muser_session_truncate(s, cut) == 0);
        double dmax = 0;
        for (int i = cut; i < n; i++) {
            CHECK(muser_session_feed(s, tokens + i, 1, false) == 0);
            const float *l = muser_session_logits(s);
            dmax = fmax(dmax, max_abs_diff(l, a + (size_t)i * V, (size_t)V));
        }
        CHECKF(dmax == 0.0, "%s lane %d: truncate + refeed differs by %.3g", name, lane, dmax);
        muser_session_free(s);
        /* the same steps op by op without PDL: bit-identical */
        setenv("MUSER_CUDA_TUNE", "graph=0,pdl=0", 1);
        CHECK(muser_session_new(m, &sp, &s) == 0);
        dmax = 0;
        for (int i = 0; i < n && s; i++) {
            CHECK(muser_session_feed(s, tokens + i, 1, false) == 0);
            const float *l = muser_session_logits(s);
            dmax = fmax(dmax, max_abs_diff(l, a + (size_t)i * V, (size_t)V));
        }
        CHECKF(dmax == 0.0, "%s lane %d: graph+PDL and op-by-op differ by %.3g", name, lane, dmax);
        muser_session_free(s);
        unsetenv("MUSER_CUDA_TUNE");
        free(a);
    }
    printf("  %-28s decode: graph == op by op, device choice == argmax, truncate ok\n", name);
}

/* Ring checkpoint through the backend: save after `cut` tokens, decode past
 * the ring window, restore, decode the same tokens again: identical logits. */
static void check_checkpoint(muser_model *m, const int *tokens, int n, int V, const char *name) {
    mu_session_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_ctx = 512;
    cfg.n_batch = 8;
    cfg.n_threads = 1;
    cfg.lane = MUSER_LANE_FAST;
    cfg.kv_type = MUSER_KV_F16;
    mu_backend *b = NULL;
    if (mu_cuda_backend_new(m, &cfg, &b) != 0) {
        CHECKF(0, "backend: %s", muser_last_error());
        return;
    }
    const int cut = n / 3;
    float *a = malloc(sizeof(float) * (size_t)n * V), *l = malloc(sizeof(float) * V);
    for (int i = 0; i < cut; i++) CHECK(b->ops->forward(b, tokens + i, 1, i, false, l) == 0);
    void *blob = NULL;
    size_t size = 0;
    CHECK(b->ops->checkpoint_save(b, &blob, &size) == 0);
    for (int i = cut; i < n; i++) CHECK(b->ops->forward(b, tokens + i, 1, i, false, a + (size_t)i * V) == 0);
    /* the rings have moved past cut: a plain truncate must refuse, the checkpoint must not */
    CHECK(b->ops->checkpoint_restore(b, blob, size, cut) == 0);
    double dmax = 0;
    for (int i = cut; i < n; i++) {
        CHECK(b->ops->forward(b, tokens + i, 1, i, false, l) == 0);
        dmax = fmax(dmax, max_abs_diff(l, a + (size_t)i * V, (size_t)V));
    }
    CHECKF(dmax == 0.0, "%s: checkpoint restore + refeed differs by %.3g", name, dmax);
    printf("  %-28s ring checkpoint: save at %d, restore after %d, refeed identical\n", name, cut, n);
    free(blob), free(a), free(l);
    b->ops->free(b);
}

/* Fast-lane decode with each boundary's input formed by its consumer (the
 * default where every consumer is a K-quant launch) against the producers'
 * tails (norm_in=0): the same arithmetic in the same order with
 * the same 1024-thread sums, so bit-identical logits. */
static void check_norm_in(muser_model *m, const int *tokens, int n, int V, const char *name) {
    muser_session_params sp = muser_session_default_params();
    sp.backend = MUSER_BACKEND_CUDA;
    sp.lane = MUSER_LANE_FAST;
    sp.n_ctx = 512;
    muser_session *s = tl_session(m, &sp, "session");
    if (!s) return;
    mu_backend *be = mu_session_backend_of(s);
    const bool on = strstr(be->ops->describe(be), "decode norms formed by their consumers") != NULL;
    muser_session_free(s);
    if (!on) {
        printf("  %-28s decode norms stay in the producers' tails (a consumer is not a K-quant launch)\n", name);
        return;
    }
    float *with = run_cuda(m, tokens, n, (run_opts){MUSER_LANE_FAST, MUSER_KV_F16, false}, V);
    setenv("MUSER_CUDA_TUNE", "norm_in=0", 1);
    float *without = run_cuda(m, tokens, n, (run_opts){MUSER_LANE_FAST, MUSER_KV_F16, false}, V);
    unsetenv("MUSER_CUDA_TUNE");
    if (with && without) {
        const double dmax = max_abs_diff(with, without, (size_t)n * V);
        CHECKF(dmax == 0.0, "%s: decode norms formed by the consumers differ from the tails' by %.3g", name, dmax);
        printf("  %-28s decode norms formed by their consumers == the producers' tails (max |d| %.3g)\n", name, dmax);
    }
    free(with), free(without);
}

/* Fast-lane decode with down's quantizing staging shared by cluster pairs
 * (the default on GPUs with clusters: each block quantizes half of the
 * groups into both blocks' shared memory) against every block quantizing
 * all (pair_staging=0): the same groups, so bit-identical logits. The
 * paired route must have run wherever a launch could take it. */
static void check_pair_staging(muser_model *m, const int *tokens, int n, int V, const char *name) {
    setenv("MUSER_CUDA_TUNE", "pair_staging=0", 1);
    float *alone = run_cuda(m, tokens, n, (run_opts){MUSER_LANE_FAST, MUSER_KV_F16, false}, V);
    unsetenv("MUSER_CUDA_TUNE");
    muser_session_params sp = muser_session_default_params();
    sp.backend = MUSER_BACKEND_CUDA;
    sp.lane = MUSER_LANE_FAST;
    sp.n_ctx = 512;
    sp.n_batch = 64;
    muser_session *s = tl_session(m, &sp, "cuda session");
    float *paired = s ? tl_run_logits(s, tokens, n, V, false) : NULL;
    long long eligible = 0, launches = 0;
    if (s) mu_cuda_pair_launches(mu_session_backend_of(s), &eligible, &launches);
    if (s) muser_session_free(s);
    if (alone && paired) {
        const double dmax = max_abs_diff(alone, paired, (size_t)n * V);
        CHECKF(launches > 0 || eligible == 0, "%s: none of %lld quantizing launches ran with paired staging", name,
               eligible);
        CHECKF(g_clusters || (launches == 0 && eligible == 0),
               "%s: %lld of %lld launches paired without clusters (the route must fail closed)", name, launches,
               eligible);
        CHECKF(dmax == 0.0, "%s: paired staging differs from each block quantizing all by %.3g", name, dmax);
        printf("  %-28s decode staging paired (%lld of %lld launches) == each block quantizing all (max |d| %.3g)\n",
               name, launches, eligible, dmax);
    }
    free(alone), free(paired);
}

static void test_fixture(const char *rel, bool local) {
    tl_fixture fx;
    if (!tl_fixture_load(rel, local, &fx)) return;
    muser_model *m = fx.model;
    const int V = fx.V, n = fx.n;
    int *tokens = fx.tokens;
    const float *exact = fx.exact, *llama = fx.llama;
    CHECK(n == 160);
    mu_parity llama_vs_exact;
    mu_parity_compare(exact, llama, n, V, &llama_vs_exact);
    for (int mode = 0; mode < 2; mode++) {
        const bool prefill = mode == 1;
        const char *mname = prefill ? "prefill" : "decode";
        mu_parity r;
        float *ours = run_cuda(m, tokens, n, (run_opts){MUSER_LANE_EXACT, MUSER_KV_F32, prefill}, V);
        if (ours) {
            mu_parity_compare(exact, ours, n, V, &r);
            printf("  %-28s %-7s exact kv f32: max %.3g rms %.3g meanKL %.3g decisive %.3f\n", rel, mname, r.max_abs,
                   r.rms, r.mean_kl, r.top1_decisive);
            CHECKF(r.max_abs <= 5e-4, "%s %s exact: max |delta| %.3g > 5e-4", rel, mname, r.max_abs);
            CHECKF(r.rms <= 5e-5, "%s %s exact: rms %.3g > 5e-5", rel, mname, r.rms);
            CHECKF(r.top1_decisive == 1.0, "%s %s exact: decisive top-1 %.4f", rel, mname, r.top1_decisive);
            free(ours);
        }
        for (int lane = 0; lane < 2; lane++) {
            ours = run_cuda(m, tokens, n, (run_opts){lane ? MUSER_LANE_FAST : MUSER_LANE_EXACT, MUSER_KV_F16, prefill}, V);
            if (!ours) continue;
            mu_parity_compare(exact, ours, n, V, &r);
            printf("  %-28s %-7s %-5s kv f16: max %.3g rms %.3g meanKL %.3g (llama.cpp %.3g) decisive %.3f\n", rel, mname,
                   lane ? "fast" : "exact", r.max_abs, r.rms, r.mean_kl, llama_vs_exact.mean_kl, r.top1_decisive);
            CHECKF(r.mean_kl <= llama_vs_exact.mean_kl, "%s %s %s f16: mean KL %.3g > llama.cpp's %.3g", rel, mname,
                   lane ? "fast" : "exact", r.mean_kl, llama_vs_exact.mean_kl);
            CHECKF(r.top1_decisive == 1.0, "%s %s %s f16: decisive top-1 %.4f", rel, mname, lane ? "fast" : "exact",
                   r.top1_decisive);
            free(ours);
        }
    }
    /* decode attention: one launch for spans up to attn_one_block rows (the
     * default above), the three launches always (0), a session that crosses
     * from one to the other at 16 rows, and one launch for every step (256:
     * the fixtures are shorter); the cluster route off (below) */
    const char *shorts[] = {"0", "16", "256"};
    for (int si = 0; si < 3; si++) {
        char tune[64];
        snprintf(tune, sizeof tune, "attn_one_block=%s,attn_cluster=0", shorts[si]);
        setenv("MUSER_CUDA_TUNE", tune, 1);
        float *ours = run_cuda(m, tokens, n, (run_opts){MUSER_LANE_EXACT, MUSER_KV_F32, false}, V);
        unsetenv("MUSER_CUDA_TUNE");
        if (!ours) continue;
        mu_parity r;
        mu_parity_compare(exact, ours, n, V, &r);
        printf("  %-28s decode  exact kv f32, one-launch attention up to %s rows: max %.3g rms %.3g\n", rel,
               shorts[si], r.max_abs, r.rms);
        CHECKF(r.max_abs <= 5e-4 && r.rms <= 5e-5 && r.top1_decisive == 1.0,
               "%s decode exact, attention short %s: max %.3g rms %.3g decisive %.4f", rel, shorts[si], r.max_abs,
               r.rms, r.top1_decisive);
        free(ours);
    }
    /* the cluster route: spans past the one-block limit in clusters of
     * blocks per head (C = ceil(limit / 128)): 2 blocks of up to 80 rows, 3
     * of ragged runs, and 8 crossing over from one block at 16 rows; f32 KV
     * against the exact reference, f16 KV in the fast lane against
     * llama.cpp's KL */
    const char *clusters[][2] = {{"0", "160"}, {"0", "384"}, {"16", "1024"}};
    for (int ci = 0; ci < 3; ci++) {
        for (int lane = 0; lane < 2; lane++) {
            char tune[64];
            snprintf(tune, sizeof tune, "attn_one_block=%s,attn_cluster=%s", clusters[ci][0], clusters[ci][1]);
            setenv("MUSER_CUDA_TUNE", tune, 1);
            if (lane == 0) { /* the backend took the setting (the parity below proves the route's arithmetic) */
                muser_session_params sp = muser_session_default_params();
                sp.backend = MUSER_BACKEND_CUDA;
                sp.n_ctx = 512;
                muser_session *s = tl_session(m, &sp, "session");
                if (s) {
                    mu_cuda_tuning t;
                    mu_cuda_get_tuning(mu_session_backend_of(s), &t);
                    CHECKF(t.attn_cluster == atoi(clusters[ci][1]) && t.attn_one_block == atoi(clusters[ci][0]),
                           "cluster route: the session's tuning is %d / %d, not %s", t.attn_one_block, t.attn_cluster,
                           tune);
                    /* without clusters the setting stays asked but the route is off (the split route runs) */
                    const int rows = mu_cuda_attn_cluster_rows(mu_session_backend_of(s));
                    CHECKF(g_clusters ? rows == atoi(clusters[ci][1]) : rows == 0,
                           "cluster route: %d rows in clusters with%s clusters", rows, g_clusters ? "" : "out");
                    muser_session_free(s);
                }
            }
            float *ours = run_cuda(m, tokens, n,
                                   (run_opts){lane ? MUSER_LANE_FAST : MUSER_LANE_EXACT,
                                              lane ? MUSER_KV_F16 : MUSER_KV_F32, false},
                                   V);
            unsetenv("MUSER_CUDA_TUNE");
            if (!ours) continue;
            mu_parity r;
            mu_parity_compare(exact, ours, n, V, &r);
            printf("  %-28s decode  %s, one block up to %s rows, clusters up to %s: max %.3g rms %.3g meanKL %.3g\n",
                   rel, lane ? "fast kv f16" : "exact kv f32", clusters[ci][0], clusters[ci][1], r.max_abs, r.rms,
                   r.mean_kl);
            if (lane)
                CHECKF(r.mean_kl <= llama_vs_exact.mean_kl && r.top1_decisive == 1.0,
                       "%s decode fast, clusters %s: mean KL %.3g (llama.cpp %.3g) decisive %.4f", rel,
                       clusters[ci][1], r.mean_kl, llama_vs_exact.mean_kl, r.top1_decisive);
            else
                CHECKF(r.max_abs <= 5e-4 && r.rms <= 5e-5 && r.top1_decisive == 1.0,
                       "%s decode exact, clusters %s: max %.3g rms %.3g decisive %.4f", rel, clusters[ci][1],
                       r.max_abs, r.rms, r.top1_decisive);
            free(ours);
        }
    }
    check_norm_in(m, tokens, n, V, rel);
    check_pair_staging(m, tokens, n, V, rel);
    check_decode_paths(m, tokens, 48, V, rel);
    check_checkpoint(m, tokens, 120, V, rel);
    tl_fixture_free(&fx);
}

int main(void) {
    /* the K-quant layout and lane arithmetic need no GPU */
    char msg[256] = "";
    const int kq = mu_cuda_selftest_kq(msg, sizeof msg);
    CHECKF(kq == 0, "K-quant layout on the CPU: %s", msg);
    if (!kq) printf("K-quant layout and lane arithmetic on the CPU: Q4_K, Q5_K, Q6_K agree with the CPU dequantization\n");
    if (mu_cuda_probe() != 0) {
        if (kq) return tl_finish("cuda");
        char why[600];
        snprintf(why, sizeof why, "no usable GPU: %s", muser_last_error());
        tl_skip(why);
    }
    /* the route set: Hopper's features where the GPU has them, the
     * portable paths elsewhere or under MUSER_CUDA_PORTABLE=1 (ctest runs
     * this suite both ways: cuda and cuda_portable) */
    mu_cuda_features feat;
    CHECKF(mu_cuda_features_detect(0, &feat) == 0, "features: %s", muser_last_error());
    char feat_line[160];
    mu_cuda_features_format(&feat, feat_line, sizeof feat_line);
    printf("route set: %s\n", feat_line);
    if (feat.forced_portable) CHECKF(!feat.clusters && !feat.pdl, "portable paths forced, yet %s", feat_line);
#ifdef MUSER_TEST_BUILT_SM90
    /* a build with sm_90 code on a Hopper GPU must take Hopper's paths (a
     * wrong reading of the loaded code's target would quietly lose them) */
    if (feat.cc / 10 == 9 && !feat.forced_portable)
        CHECKF(feat.clusters && feat.pdl && feat.code_arch == 90, "sm_90 code on a Hopper GPU, yet %s", feat_line);
#endif
    g_clusters = feat.clusters;
    mu_cuda_test_clusters(feat.clusters);
    printf("kernels against CPU references:\n");
    for (int variant = 0; variant < 2; variant++) {
        /* the matvec family with a grid as large as the rows need, then with
         * one block (16 or 32 warps) so each warp streams several rows back
         * to back */
        g_cap = variant;
        routes(MU_CU_ROUTE_AUTO, MU_CU_ROUTE_AUTO);
        printf(" matvec grid %s:\n", g_cap ? "capped at 1 block" : "uncapped");
        test_matvec();
        test_matvec_rows_fast();
        test_mmf();
        test_gateup();
        test_resnorm();
        test_rows_top();
        test_logits();
    }
    g_cap = 0;
    routes(MU_CU_ROUTE_AUTO, MU_CU_ROUTE_AUTO);
    test_matvec_cut();
    test_dequant();
    test_embed();
    test_swiglu_pack();
    test_qkv_post();
    test_attention();
    printf("parity on the fixtures:\n");
    test_fixture("fixtures/nano/nano-Q4_K_M", true);
    test_fixture("fixtures/nano/nano-Q8_0", true);
    test_fixture("fixtures/nano/nano-Q6_K", false);
    test_fixture("fixtures/micro/micro-Q4_K_M", false);
    test_fixture("fixtures/nano/nano-f32", false);
    return tl_finish("cuda");
}

#else
int main(void) { tl_skip("this build has no CUDA backend (nvcc was not found at build time)"); }
#endif
