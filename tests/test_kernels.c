/* test_kernels.c — every SIMD kernel table this machine can run, kernel by
 * kernel, against the scalar reference (kernels_scalar.c), on random data
 * (never all zero) at every size class:
 *
 *   lengths: 1, 2, 3, ... blocks up to beyond 6656 and 19968 columns (and
 *            past the exact lane's 20480-column segment);
 *   rows:    1..17 (not multiples of any unroll), and tiles of 48/192 rows;
 *   tokens:  1..17 for the prefill matmuls (ragged against the 8-token tiles),
 *            and the K-quant prefill kernels on permuted activations;
 *            1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17 for batched decode
 *            (matvec_q8_rows), which must also give every token exactly,
 *            bit for bit, the numbers of the same table's matvec_q8;
 *            the packed decode kernels (matvec_q8_kd) at 1, 2, 3, 4, 5, 7,
 *            8, 9, 15, 16, 17, 31, 33, 64 and 70 tokens, every token bit
 *            for bit its own one-token call, whatever the rows of the call;
 *   both lanes; unaligned activation pointers; output strides wider than the
 *   rows (and a guard that nothing outside is written).
 *
 * Error budgets (named below) are relative to the magnitude of the terms
 * a kernel sums, M = sum_i (|scale*q_i| + |offset_i|) * |x_i|, because the
 * SIMD kernels sum the same terms in another order (and the K-quant ones
 * factor the scale and the offset out of the sum):
 *   exact lane:      |simd - ref| <= EXACT_K * eps * sqrt(n) * M
 *   fast lane:       |simd - ref| <= FAST_K  * eps * sqrt(n) * M over the
 *                    dequantized activations (integer dot products are
 *                    exact; only the float block sums move)
 *   activation quantizer, f16 conversion: bit-identical
 *   attention:       scores and P.V as the exact lane; exp within EXP_REL
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "quant/quant.h"
#include "testlib.h"

#define EXACT_K 4.0  /* matvec/matmul, f32 activations */
#define FAST_K 4.0   /* matvec/matmul, int8 activations */
#define ATTN_K 4.0   /* attention scores and P.V */
#define EXP_REL 1e-6 /* exp, silu, sigmoid: relative error (about 8 ulp) */
#define SOFTCAP_ABS 4e-6 /* logits (cap 20): tanh via exp loses relative precision near 0 */
#define EXP_ABS 1e-30 /* where exp over- or underflows (silu(-120): -0 vs -4e-37) */

static uint64_t rng = 12345;
static bool quick; /* MUSER_TEST_QUICK: lengths up to 6656 only (emulated runs) */

static const uint32_t weight_types[] = {MU_TYPE_F32,  MU_TYPE_F16,  MU_TYPE_BF16,   MU_TYPE_Q8_0,  MU_TYPE_Q4_0,
                                        MU_TYPE_Q4_K, MU_TYPE_Q5_K, MU_TYPE_Q6_K,   MU_TYPE_Q4_1,  MU_TYPE_Q5_0,
                                        MU_TYPE_Q5_1, MU_TYPE_Q2_K, MU_TYPE_Q3_K,   MU_TYPE_IQ4_NL, MU_TYPE_IQ4_XS};

static float *random_floats(int64_t n, float scale) {
    float *x = malloc(sizeof(float) * (size_t)(n + 16));
    for (int64_t i = 0; i < n + 16; i++) x[i] = tl_rand_normal(&rng) * scale;
    x[tl_rand_u64(&rng) % (uint64_t)n] = 4.0f * scale; /* an outlier, as activations have */
    return x;
}

static void *random_rows(uint32_t type, int64_t rows, int64_t n, uint64_t *rb) {
    *rb = mu_row_bytes(type, n);
    void *w = malloc(*rb * (uint64_t)rows + 64);
    CHECK(mu_random_blocks(type, w, n * rows, &rng, 0.05f) == 0);
    return w;
}

/* Per-element term magnitudes |scale*q| + |offset| of one row (see the
 * header), from dequantizing copies of the row with one part switched off. */
static void term_magnitudes(uint32_t type, const void *row, int64_t n, float *mag) {
    const mu_type_traits *tr = mu_type_get(type);
    const int64_t nb = n / tr->block_elems;
    if (tr->int_block) { /* the integer view's two terms */
        mu_int_block ib;
        for (int64_t i = 0; i < nb; i++) {
            tr->int_block((const uint8_t *)row + i * tr->block_bytes, &ib);
            for (int j = 0; j < tr->block_elems; j++)
                mag[i * tr->block_elems + j] = fabsf(ib.scale[j / 16] * (float)ib.q[j]) + (tr->int_offset ? fabsf(ib.offset[j / 16]) : 0.0f);
        }
        return;
    }
    const uint64_t bytes = mu_row_bytes(type, n);
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    float *fa = malloc(sizeof(float) * (size_t)n), *fb = malloc(sizeof(float) * (size_t)n);
    memcpy(a, row, bytes);
    memcpy(b, row, bytes);
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *ba = a + i * tr->block_bytes, *bb = b + i * tr->block_bytes;
        if (type == MU_TYPE_Q4_K || type == MU_TYPE_Q5_K) {
            memset(ba + 2, 0, 2); /* a: dmin = 0, the scale part */
            memset(bb, 0, 2);     /* b: d = 0, the min part */
        } else if (type == MU_TYPE_Q6_K) {
            memset(bb, 0, 128 + 64); /* b: q = 0 everywhere: w = -32*d*sc */
        } else {
            memset(bb, 0, (size_t)tr->block_bytes); /* no offset term */
        }
    }
    mu_dequant_row(type, a, fa, n);
    mu_dequant_row(type, b, fb, n);
    for (int64_t i = 0; i < n; i++) mag[i] = fabsf(fa[i]) + (type == MU_TYPE_Q4_K || type == MU_TYPE_Q5_K || type == MU_TYPE_Q6_K ? fabsf(fb[i]) : 0.0f);
    free(a), free(b), free(fa), free(fb);
}

static double row_magnitude(uint32_t type, const void *row, const float *x, int64_t n) {
    float *mag = malloc(sizeof(float) * (size_t)n);
    term_magnitudes(type, row, n, mag);
    double m = 0;
    for (int64_t i = 0; i < n; i++) m += (double)mag[i] * fabs((double)x[i]);
    free(mag);
    return m;
}

static double budget(double k, int64_t n, double magnitude) {
    return k * FLT_EPSILON * sqrt((double)n) * magnitude + 1e-30;
}

/* The activation vector as the kernel sees it: f32, or the dequantized
 * fast-lane row (d[g] * qs[i]). */
static void lane_view(bool fast, const float *x, const void *xq, int64_t n, float *out) {
    if (!fast) {
        memcpy(out, x, sizeof(float) * (size_t)n);
        return;
    }
    const int8_t *qs = xq;
    const float *d = mu_act_d(xq, n);
    for (int64_t i = 0; i < n; i++) out[i] = d[i / MU_ACT_GROUP] * (float)qs[i];
}

/* ---- matvec and matmul, both lanes ------------------------------------- */

static int64_t blocks_for(uint32_t type, int64_t want_elems) {
    const int be = mu_type_get(type)->block_elems;
    return (want_elems + be - 1) / be * be;
}

typedef struct case_ctx {
    const mu_cpu_kernels *ref, *k;
    uint32_t type;
    int lane; /* 0 exact, 1 fast */
} case_ctx;

/* The packed decode kernel on T rows (packed 64-byte aligned, as the
 * backend packs them) into y; returns how many outputs differ from the
 * token's own one-token call, or from a call on the rows from 3 on (a
 * row's numbers never depend on the rows of the call). */
static int kd_run_and_check(const case_ctx *c, const void *w, uint64_t rb, int64_t rows, const uint8_t *xq, uint64_t xb,
                            int64_t n, int64_t T, float *y, int64_t ldy) {
    const size_t bytes = (size_t)(mu_act_kd_bytes(n) * (uint64_t)T + 63) / 64 * 64;
    uint8_t *xd = aligned_alloc(64, bytes), *one_xd = aligned_alloc(64, (mu_act_kd_bytes(n) + 63) / 64 * 64);
    float *one = malloc(sizeof(float) * (size_t)rows), *part = malloc(sizeof(float) * (size_t)(rows * T + 1));
    mu_act_kd_pack(xq, xb, T, n, xd);
    c->k->matvec_q8_kd[c->type](w, rb, rows, xd, n, T, y, ldy);
    int bad = 0;
    for (int64_t t = 0; t < T; t++) {
        mu_act_kd_pack(xq + t * xb, xb, 1, n, one_xd);
        c->k->matvec_q8_kd[c->type](w, rb, rows, one_xd, n, 1, one, rows);
        for (int64_t r = 0; r < rows; r++)
            if (memcmp(&one[r], &y[t * ldy + r], sizeof(float)) != 0 && bad++ < 3)
                fprintf(stderr, "  %s %s n=%lld rows=%lld T=%lld: kd y[%lld][%lld] = %.9g, its one-token call %.9g\n", c->k->isa,
                        mu_type_name(c->type), (long long)n, (long long)rows, (long long)T, (long long)t, (long long)r,
                        y[t * ldy + r], one[r]);
    }
    if (rows > 3) {
        c->k->matvec_q8_kd[c->type]((const uint8_t *)w + 3 * rb, rb, rows - 3, xd, n, T, part, rows - 3);
        for (int64_t t = 0; t < T; t++)
            for (int64_t r = 3; r < rows; r++)
                if (memcmp(&part[t * (rows - 3) + r - 3], &y[t * ldy + r], sizeof(float)) != 0 && bad++ < 3)
                    fprintf(stderr, "  %s %s n=%lld rows=%lld T=%lld: kd y[%lld][%lld] differs on the rows from 3\n", c->k->isa,
                            mu_type_name(c->type), (long long)n, (long long)rows, (long long)T, (long long)t, (long long)r);
    }
    free(xd), free(one_xd), free(one), free(part);
    return bad;
}

/* One (n, rows, T) case: T token rows, output stride ldy >= rows. */
static void check_case(const case_ctx *c, int64_t n, int64_t rows, int64_t T) {
    const bool fast = c->lane != 0;
    uint64_t rb;
    void *w = random_rows(c->type, rows, n, &rb);
    float *xbuf = random_floats(n * T + 1, 1.0f), *x = xbuf + 1; /* unaligned */
    const uint64_t xb = fast ? mu_act_row_bytes(n) : 0;
    uint8_t *xq = fast ? malloc(xb * (uint64_t)T + 64) : NULL;
    for (int64_t t = 0; t < T && xq; t++) c->ref->quantize_act(x + t * n, xq + t * xb, n);
    const int64_t ldy = rows + 3;
    const size_t ylen = (size_t)(ldy * T + 8);
    float *y_ref = malloc(sizeof(float) * ylen), *y = malloc(sizeof(float) * ylen);
    for (size_t i = 0; i < ylen; i++) y_ref[i] = y[i] = -777.0f; /* guard value */
    if (T == 1) {
        if (c->lane) {
            c->ref->matvec_q8[c->type](w, rb, rows, xq, n, y_ref);
            c->k->matvec_q8[c->type](w, rb, rows, xq, n, y);
        } else {
            c->ref->matvec_f32[c->type](w, rb, rows, x, n, y_ref);
            c->k->matvec_f32[c->type](w, rb, rows, x, n, y);
        }
    } else {
        if (c->lane) {
            c->ref->matmul_q8[c->type](w, rb, rows, xq, xb, n, T, y_ref, ldy);
            c->k->matmul_q8[c->type](w, rb, rows, xq, xb, n, T, y, ldy);
        } else {
            c->ref->matmul_f32[c->type](w, rb, rows, x, n, T, y_ref, ldy);
            c->k->matmul_f32[c->type](w, rb, rows, x, n, T, y, ldy);
        }
    }
    /* the K-quant prefill kernel on the permuted rows, against the same reference */
    float *y_kp = NULL;
    if (fast && T > 1 && c->k->matmul_q8_kp[c->type]) {
        uint8_t *xqp = malloc(xb * (uint64_t)T + 64);
        for (int64_t t = 0; t < T; t++) mu_act_kq_permute(xq + t * xb, xqp + t * xb, n);
        y_kp = malloc(sizeof(float) * ylen);
        for (size_t i = 0; i < ylen; i++) y_kp[i] = -777.0f;
        c->k->matmul_q8_kp[c->type](w, rb, rows, xqp, xb, n, T, y_kp, ldy);
        free(xqp);
    }
    /* the packed decode kernel: each token alone through it, bit for bit */
    float *y_kd = NULL;
    int kd_inexact = 0;
    if (fast && c->k->matvec_q8_kd[c->type]) {
        y_kd = malloc(sizeof(float) * ylen);
        for (size_t i = 0; i < ylen; i++) y_kd[i] = -777.0f;
        kd_inexact = kd_run_and_check(c, w, rb, rows, xq, xb, n, T, y_kd, ldy);
    }
    CHECKF(kd_inexact == 0, "%s %s n=%lld rows=%lld T=%lld: %d packed-decode rows differ from their one-token call",
           c->k->isa, mu_type_name(c->type), (long long)n, (long long)rows, (long long)T, kd_inexact);
    /* batched decode: each token alone through matvec_q8, bit for bit */
    float *y_rows = NULL;
    int inexact = 0;
    if (fast) {
        CHECKF(c->k->matvec_q8_rows[c->type] != NULL, "%s %s: no batched decode kernel", c->k->isa,
               mu_type_name(c->type));
        if (!c->k->matvec_q8_rows[c->type]) goto done;
        y_rows = malloc(sizeof(float) * ylen);
        for (size_t i = 0; i < ylen; i++) y_rows[i] = -777.0f;
        c->k->matvec_q8_rows[c->type](w, rb, rows, xq, xb, n, T, y_rows, ldy);
        float *one = malloc(sizeof(float) * (size_t)rows);
        for (int64_t t = 0; t < T; t++) {
            c->k->matvec_q8[c->type](w, rb, rows, xq + t * xb, n, one);
            for (int64_t r = 0; r < rows; r++)
                if (memcmp(&one[r], &y_rows[t * ldy + r], sizeof(float)) != 0 && inexact++ < 3)
                    fprintf(stderr, "  %s %s n=%lld rows=%lld T=%lld: batched y[%lld][%lld] = %.9g, its matvec %.9g\n",
                            c->k->isa, mu_type_name(c->type), (long long)n, (long long)rows, (long long)T, (long long)t,
                            (long long)r, y_rows[t * ldy + r], one[r]);
        }
        free(one);
    }
    CHECKF(inexact == 0, "%s %s n=%lld rows=%lld T=%lld: %d batched rows differ from their own matvec", c->k->isa,
           mu_type_name(c->type), (long long)n, (long long)rows, (long long)T, inexact);
    float *view = malloc(sizeof(float) * (size_t)n);
    float *mag = malloc(sizeof(float) * (size_t)(n * rows)); /* each row's term magnitudes, once */
    for (int64_t r = 0; r < rows; r++) term_magnitudes(c->type, (const uint8_t *)w + r * rb, n, mag + r * n);
    int bad = 0;
    const float *outs[4] = {y, y_kp, y_rows, y_kd};
    static const char *const out_names[4] = {"", " (kp)", " (batched)", " (kd)"};
    for (int pass = 0; pass < 4; pass++) {
        const float *yo = outs[pass];
        if (!yo) continue;
        for (int64_t t = 0; t < T; t++) {
            lane_view(fast, x + t * n, xq ? xq + t * xb : NULL, n, view);
            for (int64_t r = 0; r < rows; r++) {
                double m = 0;
                for (int64_t i = 0; i < n; i++) m += (double)mag[r * n + i] * fabs((double)view[i]);
                const double tol = budget(c->lane ? FAST_K : EXACT_K, n, m);
                const double d = fabs((double)yo[t * ldy + r] - (double)y_ref[t * ldy + r]);
                if (!(d <= tol) && bad++ < 3)
                    fprintf(stderr, "  %s %s %s%s n=%lld rows=%lld T=%lld: y[%lld][%lld] = %.9g, ref %.9g (|d| %.3g > %.3g)\n",
                            c->k->isa, mu_type_name(c->type), c->lane ? "fast" : "exact", out_names[pass], (long long)n, (long long)rows,
                            (long long)T, (long long)t, (long long)r, yo[t * ldy + r], y_ref[t * ldy + r], d, tol);
            }
            for (int64_t r = rows; r < ldy; r++)
                if (yo[t * ldy + r] != -777.0f && bad++ < 3) fprintf(stderr, "  wrote outside the rows at [%lld][%lld]\n", (long long)t, (long long)r);
        }
    }
    CHECKF(bad == 0, "%s %s %s n=%lld rows=%lld T=%lld: %d mismatches", c->k->isa, mu_type_name(c->type),
           c->lane ? "fast" : "exact", (long long)n, (long long)rows, (long long)T, bad);
    free(view), free(mag);
done:
    free(w), free(xbuf), free(xq), free(y_ref), free(y), free(y_kp), free(y_rows), free(y_kd);
}

static void test_matvecs(const mu_cpu_kernels *ref, const mu_cpu_kernels *k) {
    /* lengths in units of the weight's block: 1, 2, 3 ... and the model widths */
    static const int64_t lengths[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33, 256, 6656, 19968, 20736, 41216};
    for (size_t ti = 0; ti < sizeof weight_types / sizeof weight_types[0]; ti++) {
        const uint32_t type = weight_types[ti];
        const int be = mu_type_get(type)->block_elems;
        for (int lane = 0; lane < 2; lane++) {
            if (lane && !ref->matvec_q8[type]) {
                CHECKF(!k->matvec_q8[type], "%s %s: fast lane without a scalar reference", k->isa, mu_type_name(type));
                continue;
            }
            CHECKF(k->matvec_q8[type] != NULL || !lane, "%s %s: no fast-lane kernel", k->isa, mu_type_name(type));
            case_ctx c = {ref, k, type, lane};
            for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
                /* small lengths count blocks; the model widths count elements */
                const int64_t n = lengths[li] < 256 ? lengths[li] * be : blocks_for(type, lengths[li]);
                if (n > 50000 || (quick && n > 7000)) continue;
                const bool big = n > 4096;
                for (int64_t rows = 1; rows <= 17; rows += big ? 8 : 1) check_case(&c, n, rows, 1);
                /* prefill: ragged token counts against the 8-token tiles */
                static const int64_t tokens[] = {2, 3, 7, 8, 9, 13, 17};
                for (size_t t = 0; t < sizeof tokens / sizeof tokens[0]; t++) {
                    if (big && tokens[t] != 9) continue;
                    check_case(&c, n, big ? 5 : 17, tokens[t]);
                }
                /* row tiles of the exact matmul (48 rows x 4) and beyond */
                if (n <= 1024) check_case(&c, n, 200, 9);
                /* batched decode (every fast case above checks it too): the token
                 * counts the cases above leave out; long rows cross the decode segments */
                if (lane) {
                    static const int64_t batch[] = {4, 5, 15, 16};
                    for (size_t t = 0; t < sizeof batch / sizeof batch[0]; t++)
                        if (!big || batch[t] == 16) check_case(&c, n, big ? 3 : 19, batch[t]);
                }
                /* the packed decode kernel (every case above checks it too): the
                 * widest steps it serves and past its 64-token pass, on ragged
                 * rows; the lengths cross its column segments (5 blocks at 16
                 * tokens, 2 at 33) */
                if (lane && k->matvec_q8_kd[type] && (n <= 17 * be || n == blocks_for(type, 6656))) {
                    static const int64_t kd_tokens[] = {31, 33, 64, 70};
                    for (size_t t = 0; t < sizeof kd_tokens / sizeof kd_tokens[0]; t++)
                        if (!big || kd_tokens[t] <= 33) check_case(&c, n, big ? 5 : 21, kd_tokens[t]);
                }
            }
        }
    }
}

/* ---- the scalar fast lane against float64 --------------------------------
 * The reference the SIMD kernels are held to is itself held to the float64
 * dot product of the dequantized weights with the dequantized activations
 * (the integer dot products are exact; only the float sums round). */
static void test_fast_reference(void) {
    const mu_cpu_kernels *ref = mu_cpu_kernels_scalar();
    static const int64_t lengths[] = {256, 512, 6656};
    for (size_t ti = 0; ti < sizeof weight_types / sizeof weight_types[0]; ti++) {
        const uint32_t type = weight_types[ti];
        CHECKF(!ref->matvec_q8[type] == !mu_cpu_fast_type(type), "%s: mu_cpu_fast_type disagrees with the table",
               mu_type_name(type));
        if (!ref->matvec_q8[type]) continue;
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
            const int64_t n = lengths[li], rows = 7;
            uint64_t rb;
            void *w = random_rows(type, rows, n, &rb);
            float *x = random_floats(n, 1.0f), *wf = malloc(sizeof(float) * (size_t)n), *view = malloc(sizeof(float) * (size_t)n);
            uint8_t *xq = malloc(mu_act_row_bytes(n));
            ref->quantize_act(x, xq, n);
            lane_view(true, x, xq, n, view);
            float y[7];
            ref->matvec_q8[type](w, rb, rows, xq, n, y);
            int bad = 0;
            for (int64_t r = 0; r < rows; r++) {
                const uint8_t *row = (const uint8_t *)w + r * rb;
                mu_dequant_row(type, row, wf, n);
                double dot = 0;
                for (int64_t i = 0; i < n; i++) dot += (double)wf[i] * (double)view[i];
                const double tol = budget(FAST_K, n, row_magnitude(type, row, view, n));
                if (!(fabs(dot - (double)y[r]) <= tol) && bad++ < 3)
                    fprintf(stderr, "  scalar %s fast n=%lld row %lld: %.9g, float64 %.9g (|d| %.3g > %.3g)\n",
                            mu_type_name(type), (long long)n, (long long)r, y[r], dot, fabs(dot - (double)y[r]), tol);
            }
            CHECKF(bad == 0, "scalar %s fast lane n=%lld: %d rows off the float64 dot product", mu_type_name(type), (long long)n, bad);
            free(w), free(x), free(wf), free(view), free(xq);
        }
    }
}

/* ---- the activation quantizer: bit-identical -------------------------- */

static void test_quantizer(const mu_cpu_kernels *ref, const mu_cpu_kernels *k) {
    static const int64_t lengths[] = {16, 32, 48, 256, 6656, 19968, 20736};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        const int64_t n = lengths[i];
        float *x = random_floats(n, 3.0f);
        x[0] = 50.0f; /* exact halves: 50 * 127/50 ... and ties */
        x[1] = 0.5f * 50.0f / 127.0f;
        if (n >= 48) memset(x + 16, 0, sizeof(float) * 16); /* an all-zero group */
        const uint64_t bytes = mu_act_row_bytes(n);
        uint8_t *a = malloc(bytes), *b = malloc(bytes);
        memset(a, 0xAB, bytes);
        memset(b, 0xCD, bytes);
        ref->quantize_act(x, a, n);
        k->quantize_act(x, b, n);
        CHECKF(memcmp(a, b, bytes) == 0, "%s quantize_act n=%lld differs from the scalar bytes", k->isa, (long long)n);
        /* and it is a faithful int8 code: |x - d*q| <= d/2 */
        int bad = 0;
        const float *d = mu_act_d(a, n);
        for (int64_t j = 0; j < n; j++)
            bad += !(fabsf(x[j] - d[j / 16] * (float)((int8_t *)a)[j]) <= 0.5f * d[j / 16] * 1.0001f + 1e-30f);
        CHECKF(bad == 0, "quantize_act n=%lld: %d elements off by more than half a step", (long long)n, bad);
        free(a), free(b), free(x);
    }
    /* Non-finite activations (a hostile file's weights) give scales that
     * say so, never undefined behaviour (the sanitizer suite runs this on
     * every ISA: gcc's AVX-512 lane sum overflowed on them). */
    float x[64], row[64];
    for (int j = 0; j < 64; j++) x[j] = j % 3 == 0 ? NAN : j % 3 == 1 ? INFINITY : -INFINITY;
    k->quantize_act(x, row, 64);
    for (int g = 0; g < 4; g++) CHECKF(!isfinite(mu_act_d(row, 64)[g]), "%s: group %d has a finite scale", k->isa, g);
}

/* ---- attention helpers -------------------------------------------------- */

static void test_attention(const mu_cpu_kernels *ref, const mu_cpu_kernels *k) {
    static const int hds[] = {128, 64, 16, 80, 7};
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
        const int hd = hds[hi];
        for (int nq = 1; nq <= 17; nq += 3) {
            for (int nrows = 1; nrows <= 33; nrows += 8) {
                const int64_t ld = hd + 5; /* row stride wider than a head */
                float *q = random_floats((int64_t)nq * hd, 1.0f), *kv = random_floats(nrows * ld, 1.0f);
                const int lds = nrows + 2;
                float *s0 = calloc((size_t)(nq * lds), sizeof(float)), *s1 = calloc((size_t)(nq * lds), sizeof(float));
                ref->attn_scores(q, nq, kv, ld, nrows, hd, 0.125f, s0, lds);
                k->attn_scores(q, nq, kv, ld, nrows, hd, 0.125f, s1, lds);
                int bad = 0;
                for (int h = 0; h < nq; h++)
                    for (int r = 0; r < nrows; r++) {
                        double m = 0;
                        for (int e = 0; e < hd; e++) m += fabs((double)q[h * hd + e] * kv[r * ld + e]) * 0.125;
                        bad += !(fabs((double)s0[h * lds + r] - s1[h * lds + r]) <= budget(ATTN_K, hd, m));
                    }
                CHECKF(bad == 0, "%s attn_scores hd=%d nq=%d rows=%d: %d mismatches", k->isa, hd, nq, nrows, bad);
                /* P.V into a non-zero accumulator */
                float *p = random_floats(nq * lds, 1.0f), *acc0 = random_floats((int64_t)nq * hd, 1.0f);
                float *acc1 = malloc(sizeof(float) * (size_t)nq * hd);
                memcpy(acc1, acc0, sizeof(float) * (size_t)nq * hd);
                float *acc_in = malloc(sizeof(float) * (size_t)nq * hd);
                memcpy(acc_in, acc0, sizeof(float) * (size_t)nq * hd);
                ref->attn_pv(p, nq, lds, kv, ld, nrows, hd, acc0);
                k->attn_pv(p, nq, lds, kv, ld, nrows, hd, acc1);
                bad = 0;
                for (int h = 0; h < nq; h++)
                    for (int e = 0; e < hd; e++) {
                        double m = fabs((double)acc_in[h * hd + e]);
                        for (int r = 0; r < nrows; r++) m += fabs((double)p[h * lds + r] * kv[r * ld + e]);
                        bad += !(fabs((double)acc0[h * hd + e] - acc1[h * hd + e]) <= budget(ATTN_K, nrows + 1, m));
                    }
                CHECKF(bad == 0, "%s attn_pv hd=%d nq=%d rows=%d: %d mismatches", k->isa, hd, nq, nrows, bad);
                free(q), free(kv), free(s0), free(s1), free(p), free(acc0), free(acc1), free(acc_in);
            }
        }
    }
    /* f16 -> f32: bit-identical, every length 1..40 and a long row */
    for (int n = 1; n <= 300; n += n < 40 ? 1 : 259) {
        uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
        for (int i = 0; i < n; i++) h[i] = mu_f32_to_f16(tl_rand_normal(&rng) * 10.0f);
        h[0] = 0x0001; /* a subnormal */
        float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
        ref->cvt_f16(h, a, n);
        k->cvt_f16(h, b, n);
        CHECKF(memcmp(a, b, sizeof(float) * (size_t)n) == 0, "%s cvt_f16 n=%d", k->isa, n);
        free(h), free(a), free(b);
    }
    /* exp_sum over the range softmax sees (x - max <= 0), deep negatives included */
    for (int n = 1; n <= 100; n += 11) {
        float *x0 = malloc(sizeof(float) * (size_t)n), *x1 = malloc(sizeof(float) * (size_t)n);
        for (int i = 0; i < n; i++) x0[i] = x1[i] = -fabsf(tl_rand_normal(&rng)) * (i % 7 == 6 ? 60.0f : 4.0f);
        const float s0 = ref->exp_sum(x0, n, 0.5f), s1 = k->exp_sum(x1, n, 0.5f);
        int bad = 0;
        for (int i = 0; i < n; i++) bad += !(fabsf(x0[i] - x1[i]) <= EXP_REL * fabsf(x0[i]) + EXP_ABS);
        CHECKF(bad == 0, "%s exp_sum n=%d: %d elements off", k->isa, n, bad);
        CHECKF(fabsf(s0 - s1) <= EXP_REL * s0 * 2, "%s exp_sum n=%d: sum %.9g vs %.9g", k->isa, n, s1, s0);
        free(x0), free(x1);
    }
}

/* ---- elementwise ------------------------------------------------------- */

static void test_elementwise(const mu_cpu_kernels *ref, const mu_cpu_kernels *k) {
    for (int n = 1; n <= 20000; n = n < 40 ? n + 1 : n * 7) {
        float *g = random_floats(n, 6.0f), *u = random_floats(n, 1.0f);
        g[0] = -120.0f; /* exp(-x) overflows in the reference: silu -> -0 */
        float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
        memcpy(a, g, sizeof(float) * (size_t)n);
        memcpy(b, g, sizeof(float) * (size_t)n);
        ref->silu_mul(a, u, n);
        k->silu_mul(b, u, n);
        int bad = 0;
        for (int i = 0; i < n; i++) bad += !(fabsf(a[i] - b[i]) <= EXP_REL * fabsf(a[i]) + EXP_ABS);
        CHECKF(bad == 0, "%s silu_mul n=%d: %d off", k->isa, n, bad);
        memcpy(a, u, sizeof(float) * (size_t)n);
        memcpy(b, u, sizeof(float) * (size_t)n);
        ref->sigmoid_mul(a, g, n);
        k->sigmoid_mul(b, g, n);
        bad = 0;
        for (int i = 0; i < n; i++) bad += !(fabsf(a[i] - b[i]) <= EXP_REL * fabsf(a[i]) + EXP_ABS);
        CHECKF(bad == 0, "%s sigmoid_mul n=%d: %d off", k->isa, n, bad);
        free(g), free(u), free(a), free(b);
    }
    /* softcap: logits up to +-200 through cap * tanh(x * scale / cap) */
    for (int n = 1; n <= 202048; n = n < 40 ? n + 1 : n * 9) {
        float *a = random_floats(n, 60.0f), *b = malloc(sizeof(float) * (size_t)n);
        memcpy(b, a, sizeof(float) * (size_t)n);
        ref->softcap(a, n, 0.1961161345f, 20.0f);
        k->softcap(b, n, 0.1961161345f, 20.0f);
        int bad = 0;
        for (int i = 0; i < n; i++) bad += !(fabsf(a[i] - b[i]) <= SOFTCAP_ABS);
        CHECKF(bad == 0, "%s softcap n=%d: %d off", k->isa, n, bad);
        free(a), free(b);
    }
    /* the bandwidth probe reads what it is given (its value is ISA-defined) */
    uint8_t *buf = calloc(4096, 1);
    CHECK(k->stream_read(buf, 4096) == 0);
    buf[4095] = 1;
    CHECK(k->stream_read(buf, 4096) != 0);
    free(buf);
}

/* ---- the K-quant prefill layout: a permutation, its own inverse; the ------
 * decode pack: the same values, block by block and token by token */

static void test_kq_permute(void) {
    static const int64_t lengths[] = {16, 256, 272, 512, 6656};
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        const int64_t n = lengths[li];
        const uint64_t xb = mu_act_row_bytes(n);
        float *x = random_floats(n, 1.0f);
        uint8_t *a = malloc(xb), *p = malloc(xb), *back = malloc(xb);
        mu_cpu_kernels_scalar()->quantize_act(x, a, n);
        mu_act_kq_permute(a, p, n);
        mu_act_kq_permute(p, back, n);
        CHECKF(memcmp(a, back, xb) == 0, "kq permute n=%lld: not its own inverse", (long long)n);
        /* spot check: block 0, lane L = 1 (G = 4), unit 2, byte 3 */
        if (n >= 256) {
            CHECKF(((const int8_t *)p)[64 * 2 + 4 * 1 + 3] == ((const int8_t *)a)[16 * 4 + 4 * 2 + 3], "kq permute n=%lld: layout",
                   (long long)n);
            CHECKF(mu_act_d(p, n)[1] == mu_act_d(a, n)[4] && mu_act_ds(p, n)[1] == mu_act_ds(a, n)[4],
                   "kq permute n=%lld: scales", (long long)n);
        }
        free(x), free(a), free(p), free(back);
    }
    /* the decode pack: token t's record of block b is block b of its permuted row */
    for (size_t li = 1; li < sizeof lengths / sizeof lengths[0]; li++) {
        const int64_t n = lengths[li] / 256 * 256, T = 3;
        if (n != lengths[li]) continue;
        const uint64_t xb = mu_act_row_bytes(n);
        float *x = random_floats(n * T, 1.0f);
        uint8_t *rows = malloc(xb * T), *p = malloc(xb), *d = malloc(mu_act_kd_bytes(n) * T);
        for (int64_t t = 0; t < T; t++) mu_cpu_kernels_scalar()->quantize_act(x + t * n, rows + t * xb, n);
        mu_act_kd_pack(rows, xb, T, n, d);
        int bad = 0;
        for (int64_t t = 0; t < T; t++) {
            mu_act_kq_permute(rows + t * xb, p, n);
            for (int64_t b = 0; b < n / 256; b++) {
                const uint8_t *rec = d + (b * T + t) * MU_KD_REC;
                bad += memcmp(rec, p + 256 * b, 256) != 0;
                bad += memcmp(rec + 256, mu_act_d(p, n) + 16 * b, 64) != 0;
                bad += memcmp(rec + 320, mu_act_ds(p, n) + 16 * b, 64) != 0;
                for (int l = 0; l < 16; l++) { /* -32 * the sum of the lane's group */
                    int32_t sum = 0, got;
                    for (int i = 0; i < 16; i++) sum += ((const int8_t *)p)[256 * b + 64 * (i / 4) + 4 * l + i % 4];
                    memcpy(&got, rec + 384 + 4 * l, 4);
                    bad += got != -32 * sum;
                }
            }
        }
        CHECKF(bad == 0, "kd pack n=%lld: %d records differ from the permuted rows", (long long)n, bad);
        free(x), free(rows), free(p), free(d);
    }
}

int main(void) {
    const char *q = getenv("MUSER_TEST_QUICK");
    quick = q && *q && strcmp(q, "0") != 0;
    const mu_cpu_kernels *all[8];
    const int n = mu_cpu_kernels_all(all, 8);
    const mu_cpu_kernels *ref = mu_cpu_kernels_scalar();
    printf("kernel tables on this machine:");
    for (int i = 0; i < n; i++) printf(" %s", all[i]->isa);
    printf("\n");
    CHECK(n >= 1 && all[0] == ref);
    for (int i = 0; i < n; i++) {
        if (all[i] == ref) {
            /* the reference's own batched decode: its matvec per token */
            static const uint32_t fast_types[] = {MU_TYPE_Q4_K, MU_TYPE_Q6_K, MU_TYPE_Q8_0, MU_TYPE_IQ4_XS};
            for (size_t ti = 0; ti < sizeof fast_types / sizeof fast_types[0]; ti++) {
                const case_ctx c = {ref, ref, fast_types[ti], 1};
                for (int64_t T = 1; T <= 17; T += 4) check_case(&c, blocks_for(fast_types[ti], 6656), 19, T);
            }
            continue;
        }
        const int before = tl_failed;
        test_quantizer(ref, all[i]);
        test_attention(ref, all[i]);
        test_elementwise(ref, all[i]);
        test_matvecs(ref, all[i]);
        printf("  %-9s %s\n", all[i]->isa, tl_failed == before ? "ok" : "FAILED");
    }
    test_kq_permute();
    test_fast_reference();
    /* the scalar table against itself: a smoke test of the harness */
    test_elementwise(ref, ref);
    return tl_finish("kernels");
}
