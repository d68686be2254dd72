/* ref_ops.c — the float64 reference's operations, shared by the reference
 * forward (ref_backend.c) and the drafter's reference (ref_draft.c). */
#include <math.h>

#include "quant/quant.h"
#include "ref/ref_ops.h"

/* y[r] = sum_j W[r][j] * x[j] in double. */
void mu_ref_matvec(float *row, const mu_weight *w, const double *x, double *y) {
    for (int64_t r = 0; r < w->rows; r++) {
        mu_dequant_row(w->type, (const uint8_t *)w->data + (uint64_t)r * w->row_bytes, row, w->cols);
        double s = 0.0;
        for (int64_t j = 0; j < w->cols; j++) s += (double)row[j] * x[j];
        y[r] = s;
    }
}

void mu_ref_rmsnorm(const double *x, const float *w, double *y, int64_t n, double eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    double scale = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale * (w ? (double)w[i] : 1.0);
}

void mu_ref_rope(const mu_hparams *hp, double base, const float *ff, int64_t pos, double *v, int n_heads) {
    const int half = hp->n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        double *x = v + (int64_t)h * hp->head_dim;
        for (int i = 0; i < half; i++) {
            double theta = (double)pos * pow(base, -2.0 * i / hp->n_rot) * hp->rope_freq_scale;
            if (ff) theta /= ff[i];
            int a = hp->rope_type == MU_ROPE_NEOX ? i : 2 * i;
            int c = hp->rope_type == MU_ROPE_NEOX ? i + half : 2 * i + 1;
            double x0 = x[a], x1 = x[c];
            x[a] = x0 * cos(theta) - x1 * sin(theta);
            x[c] = x0 * sin(theta) + x1 * cos(theta);
        }
    }
}

