/* kernel_ref.c — the kernel tests' random data and CPU references
 * (kernel_ref.h). */
#include "kernel_ref.h"

#include <math.h>
#include <stdlib.h>

#include "muser.h"
#include "quant/quant.h"
#include "testlib.h"

uint64_t kref_rng = 0x5eed1234abcdULL;

void rand_vec(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = tl_rand_normal(&kref_rng) * scale;
}

void *rand_weight(uint32_t type, int64_t rows, int64_t cols) {
    const uint64_t bytes = mu_row_bytes(type, cols) * (uint64_t)rows;
    void *w = malloc(bytes);
    CHECK(mu_random_blocks(type, w, rows * cols, &kref_rng, 1.0f / sqrtf((float)cols)) == 0);
    return w;
}

bool finite_all(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

double xt(const int8_t *xq, const float *xds, int64_t i) { return (double)xds[(i / 16) * 2] * xq[i]; }

double ref_row(uint32_t type, const void *row, int64_t cols, const float *x, const int8_t *xq, const float *xds,
               int lane, double *tol) {
    float *w = malloc(sizeof(float) * (size_t)cols);
    mu_dequant_row(type, row, w, cols);
    const bool fast = lane == 1 && type != MU_TYPE_F32 && type != MU_TYPE_F16 && type != MU_TYPE_BF16;
    double s = 0.0, mag = 0.0;
    for (int64_t i = 0; i < cols; i++) {
        const double xv = fast ? xt(xq, xds, i) : (double)x[i];
        s += (double)w[i] * xv;
        mag += fabs((double)w[i] * xv);
    }
    free(w);
    *tol = 3e-5 * mag + 1e-6;
    return s;
}

void check_q8(const char *what, const float *x, const int8_t *q, const float *ds, int64_t n) {
    int bad = 0;
    for (int64_t g = 0; g < n / 16 && bad < 5; g++) {
        float amax = 0.f;
        for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(x[g * 16 + i]));
        const float d = amax / 127.0f;
        double sq = 0.0; /* the sum is d * sum(q) over the 16 */
        for (int i = 0; i < 16; i++) sq += q[g * 16 + i];
        if (fabs(ds[g * 2] - d) > 1e-6 * d + 1e-30 || fabs(ds[g * 2 + 1] - d * sq) > 1e-6 * d * 2032 + 1e-30) bad++;
        for (int i = 0; i < 16; i++)
            if (fabs((double)x[g * 16 + i] - (double)d * q[g * 16 + i]) > 0.5001 * d + 1e-30) bad++;
    }
    CHECKF(bad == 0, "%s: int8 blocks differ from the rule (%d bad)", what, bad);
}

const uint32_t all_types[] = {MU_TYPE_Q4_K,   MU_TYPE_Q5_K,   MU_TYPE_Q6_K, MU_TYPE_Q8_0, MU_TYPE_Q4_0,
                                     MU_TYPE_F16,    MU_TYPE_BF16,   MU_TYPE_F32,  MU_TYPE_Q4_1, MU_TYPE_Q5_0,
                                     MU_TYPE_Q5_1,   MU_TYPE_IQ4_NL, MU_TYPE_IQ4_XS, MU_TYPE_Q2_K, MU_TYPE_Q3_K};
const int N_TYPES = (int)(sizeof all_types / sizeof all_types[0]);

bool is_kquant(uint32_t t) { return t == MU_TYPE_Q4_K || t == MU_TYPE_Q5_K || t == MU_TYPE_Q6_K; }

int rows_off(int nseg, const uint32_t *types, void *const *ws, const int64_t *rows, int64_t cols, const float *x,
             const int8_t *xq, const float *xds, int lane, const float *y, double *worst) {
    int bad = 0;
    int64_t off = 0;
    for (int i = 0; i < nseg; i++) {
        for (int64_t r = 0; r < rows[i]; r++) {
            double tol;
            const double ref = ref_row(types[i], (const uint8_t *)ws[i] + r * mu_row_bytes(types[i], cols), cols, x, xq,
                                       xds, lane, &tol);
            const double err = fabs(y[off + r] - ref);
            if (!(err <= tol)) bad++;
            if (worst && err / tol > *worst) *worst = err / tol;
        }
        off += rows[i];
    }
    return bad;
}

