/* kernel_ref.h — the CUDA kernel tests' random data and CPU references
 * (tests/test_cuda.c and the test files beside it). */
#ifndef MU_KERNEL_REF_H
#define MU_KERNEL_REF_H

#include <stdbool.h>
#include <stdint.h>

/* the tests' random stream */
extern uint64_t kref_rng;
/* the weight formats the kernels read, and their count */
extern const uint32_t all_types[];
extern const int N_TYPES;

/* x[i] ~ normal * scale */
void rand_vec(float *x, int64_t n, float scale);
/* rows x cols of random blocks of type (file layout; free() it) */
void *rand_weight(uint32_t type, int64_t rows, int64_t cols);
bool finite_all(const float *x, int64_t n);
bool is_kquant(uint32_t t);
/* x~: the dequantized int8 activation the fast lane multiplies with */
double xt(const int8_t *xq, const float *xds, int64_t i);
/* Reference dot of one row, as the lane computes it: exact uses x, fast
 * uses x~ (the K-quant min terms take d * sum(q) of the same blocks, so
 * the fast lane is exactly sum(w * x~)). tol: a bound for f32 rounding. */
double ref_row(uint32_t type, const void *row, int64_t cols, const float *x, const int8_t *xq, const float *xds,
               int lane, double *tol);
/* The int8 groups of 16 of x as the kernels must write them (CHECKs). */
void check_q8(const char *what, const float *x, const int8_t *q, const float *ds, int64_t n);
/* Rows of a multi-matrix launch's output y (the matrices' rows one after
 * another) that miss the reference's tolerance; *worst (if set): the
 * largest error over its tolerance. */
int rows_off(int nseg, const uint32_t *types, void *const *ws, const int64_t *rows, int64_t cols, const float *x,
             const int8_t *xq, const float *xds, int lane, const float *y, double *worst);

#endif
