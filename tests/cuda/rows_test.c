/* rows_test.c — the fast lane's B-row matvec (batched decode) against the
 * CPU reference, every row of every launch: each weight format it takes,
 * row counts on both sides of one launch (1, 2, 5, 16, then 19 and 17 in
 * launches dealt evenly), one matrix and a row space of several, inputs
 * wide enough that fewer rows fit one launch's shared memory. */
#include <math.h>
#include <stdlib.h>

#include "cuda/cuda_test.h"
#include "kernel_ref.h"
#include "muser.h"
#include "quant/quant.h"
#include "rows_test.h"
#include "testlib.h"

static void check_case(int nseg, uint32_t type, const int64_t *rows, int64_t cols, int nrows) {
    void *ws[4];
    int64_t total = 0;
    for (int i = 0; i < nseg; i++) ws[i] = rand_weight(type, rows[i], cols), total += rows[i];
    float *x = malloc(sizeof(float) * (size_t)(cols * nrows)), *y = malloc(sizeof(float) * (size_t)(total * nrows));
    int8_t *xq = malloc((size_t)(cols * nrows));
    float *xds = malloc(sizeof(float) * (size_t)(cols * nrows) / 8);
    for (int j = 0; j < nrows; j++) rand_vec(x + j * cols, cols, 0.5f + 0.5f * (float)j); /* scales differ by row */
    for (int64_t i = 0; i < total * nrows; i++) y[i] = 0.0f;
    const int rc = mu_cuda_test_matvec_rows_fast(nseg, type, (const void *const *)ws, rows, cols, x, nrows, y, xq, xds);
    CHECKF(rc == 0, "B-row matvec %s, %d rows x %lld: %s", mu_type_name(type), nrows, (long long)cols,
           muser_last_error());
    int bad = 0;
    double worst = 0;
    for (int j = 0; rc == 0 && j < nrows; j++) {
        check_q8("B-row matvec input", x + j * cols, xq + j * cols, xds + j * cols / 8, cols);
        bad += rows_off(nseg, (const uint32_t[]){type, type, type, type}, ws, rows, cols, x + j * cols, xq + j * cols,
                        xds + j * cols / 8, 1, y + j * total, &worst);
    }
    CHECKF(bad == 0, "B-row matvec %s, %d matrices of %lld rows in all x %lld, %d input rows: %d row-dots off "
           "(worst %.2f x tol)", mu_type_name(type), nseg, (long long)total, (long long)cols, nrows, bad, worst);
    for (int i = 0; i < nseg; i++) free(ws[i]);
    free(x), free(y), free(xq), free(xds);
}

/* the f16 tensor-core batch: every token's row-dots against the reference
 * (the inputs rounded to f16, the weights' one f16 rounding each in the
 * tolerance) */
static void check_mmf_as(int nseg, uint32_t type, const int64_t *rows, int64_t cols, int T, bool split, int warps,
                         int tiles) {
    void *ws[4];
    int64_t total = 0;
    for (int i = 0; i < nseg; i++) ws[i] = rand_weight(type, rows[i], cols), total += rows[i];
    float *x = malloc(sizeof(float) * (size_t)(cols * T)), *y = malloc(sizeof(float) * (size_t)(total * T));
    for (int t = 0; t < T; t++) rand_vec(x + t * cols, cols, 0.5f + 0.25f * (float)(t % 7));
    for (int64_t i = 0; i < total * T; i++) y[i] = NAN; /* (every output written: NaN fails below) */
    const int rc = mu_cuda_test_mmf(nseg, type, (const void *const *)ws, rows, cols, x, T, split, warps, tiles, y);
    CHECKF(rc == 0, "mmf %s, %d tokens x %lld, %d warps, tiles %d: %s", mu_type_name(type), T, (long long)cols, warps,
           tiles, muser_last_error());
    int bad = 0;
    double worst = 0;
    for (int t = 0; rc == 0 && t < T; t++) {
        float *xh = x + t * cols;
        for (int64_t i = 0; i < cols; i++) xh[i] = mu_f16_to_f32(mu_f32_to_f16(xh[i]));
        for (int64_t off = 0, i = 0; i < nseg; off += rows[i], i++)
            for (int64_t r = 0; r < rows[i]; r++) {
                double tol;
                const double ref = ref_row(type, (const uint8_t *)ws[i] + r * mu_row_bytes(type, cols), cols, xh,
                                           NULL, NULL, 0, &tol);
                tol *= 33.0; /* 1e-3 of the magnitude */
                const double err = fabs(y[t * total + off + r] - ref);
                if (!(err <= tol)) bad++;
                if (err / tol > worst) worst = err / tol;
            }
    }
    CHECKF(bad == 0,
           "mmf %s, %d matrices of %lld rows in all x %lld, %d tokens%s, %d warps, tiles %d: %d row-dots off (worst "
           "%.2f x tol)",
           mu_type_name(type), nseg, (long long)total, (long long)cols, T, split ? ", K split" : "", warps, tiles, bad,
           worst);
    if (T == 64 && nseg == 1 && warps == 4 && tiles == 0 && worst > 0)
        printf("    mmf %s, 64 tokens: worst error %.3f x tol\n", mu_type_name(type), worst);
    for (int i = 0; i < nseg; i++) free(ws[i]);
    free(x), free(y);
}

/* every block shape the batch launches: 4 or 8 warps, the tiles of 8
 * tokens by the token count or one a block (many block columns) */
static void check_mmf(int nseg, uint32_t type, const int64_t *rows, int64_t cols, int T, bool split) {
    check_mmf_as(nseg, type, rows, cols, T, split, 4, 0);
    check_mmf_as(nseg, type, rows, cols, T, split, 8, 0);
    check_mmf_as(nseg, type, rows, cols, T, split, 8, 1);
}

void test_mmf(void) {
    const uint32_t types[3] = {MU_TYPE_Q4_K, MU_TYPE_Q5_K, MU_TYPE_Q6_K};
    const int tokens[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 512};
    for (int ti = 0; ti < 3; ti++) {
        for (size_t k = 0; k < sizeof tokens / sizeof tokens[0]; k++)
            check_mmf(1, types[ti], (const int64_t[]){77}, 512, tokens[k], false);
        /* an odd count of K-blocks (spans of two: a half span) */
        check_mmf(1, types[ti], (const int64_t[]){77}, 768, 9, false);
        check_mmf(1, types[ti], (const int64_t[]){77}, 1280, 33, true);
        /* the 30B's width: 26 K-blocks, whole and split */
        check_mmf(1, types[ti], (const int64_t[]){130}, 6656, 16, false);
        check_mmf(1, types[ti], (const int64_t[]){130}, 6656, 16, true);
        /* a row space of four (q, k, v, gate): ragged segments, warps past the end; K split 5 ways */
        check_mmf(4, types[ti], (const int64_t[]){40, 16, 9, 77}, 768, 5, false);
        check_mmf(4, types[ti], (const int64_t[]){40, 16, 9, 77}, 2560, 19, true);
        check_mmf(4, types[ti], (const int64_t[]){40, 16, 9, 77}, 2560, 3, true);
    }
    printf("  mmf (f16 tensor cores): Q4_K, Q5_K, Q6_K x 1-512 tokens, odd K-block counts, ragged row blocks, row "
           "spaces of 4 matrices, K split; blocks of 4 and 8 warps\n");
}

void test_matvec_rows_fast(void) {
    int types = 0;
    for (int ti = 0; ti < N_TYPES; ti++) {
        const uint32_t type = all_types[ti];
        if (type == MU_TYPE_F32 || type == MU_TYPE_F16 || type == MU_TYPE_BF16) continue; /* (the GEMMs take them) */
        types++;
        const int64_t rows[1] = {77};
        const int counts[] = {1, 2, 5, 16, 19};
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) check_case(1, type, rows, 512, counts[k]);
    }
    /* the 30B's widths: q, k, v, gate's row space of 26-block rows (ragged
     * segments); down's 78-block rows, whose staged inputs (quantized while
     * staged) fit six to a launch: 17 rows in three launches */
    const int64_t qkvg[4] = {301, 40, 41, 257}, down[1] = {203};
    check_case(4, MU_TYPE_Q4_K, qkvg, 6656, 16);
    check_case(4, MU_TYPE_Q6_K, qkvg, 6656, 3);
    check_case(1, MU_TYPE_Q6_K, down, 19968, 17);
    check_case(1, MU_TYPE_Q8_0, down, 19968, 6);
    printf("  B-row matvec, fast lane: %d formats x 1, 2, 5, 16, 19 rows; 4-matrix row spaces and 78-block rows\n",
           types);
}
