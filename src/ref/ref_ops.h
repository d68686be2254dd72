/* ref_ops.h — the float64 reference's operations (plain loops, weights
 * dequantized exactly to f32 and multiplied in double). */
#ifndef MU_REF_OPS_H
#define MU_REF_OPS_H

#include "model/model.h"

/* y[r] = sum_j W[r][j] * x[j]; row: scratch of w->cols floats. */
void mu_ref_matvec(float *row, const mu_weight *w, const double *x, double *y);
/* y = x / sqrt(mean(x^2) + eps) * w (w NULL: no weight); y may be x. */
void mu_ref_rmsnorm(const double *x, const float *w, double *y, int64_t n, double eps);
/* RoPE of n_heads heads of v at pos (hp's pairing, n_rot, scale), angles in double. */
void mu_ref_rope(const mu_hparams *hp, double base, const float *ff, int64_t pos, double *v, int n_heads);

#endif
