/* cuda_test.h — single-kernel entry points for tests/test_cuda.c (built
 * from tests/cuda/cu_test.cu into the CUDA tests only): each one
 * takes host arrays, runs one kernel (or one fused pair) on the GPU and
 * copies every output back, so the test can compare with a CPU reference.
 * Output buffers on the device are poisoned (NaN / 0x7f bytes) before the
 * kernel runs, so an element the kernel never wrote shows up. Weights are
 * given in the file's block layout and repacked as at upload. All return 0
 * or a MUSER_EBACKEND status with the message set. */
#ifndef MU_CUDA_TEST_H
#define MU_CUDA_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The matvec routes of the calls below (mu_cu_exec): blocks in all (0:
 * every SM), gate/up in flat batches and STORE in cut ranges
 * (MU_CU_ROUTE_AUTO / _NEVER / _ALWAYS), paired staging (0: off). */
void mu_cuda_test_routes(int grid_cap, int flat, int cut, int pair);
/* Whether the calls below may launch clusters (the paired staging): as
 * the device's route set says (mu_cuda_features; off by default). */
void mu_cuda_test_clusters(int on);

/* The K-quant GPU layout and lane arithmetic run on the CPU (cu_kq.cuh):
 * 0 when they agree with the CPU's dequantization; else 1 and msg says
 * what differs. Needs no GPU. */
int mu_cuda_selftest_kq(char *msg, size_t cap);

/* Concatenated-row matvec (one launch) over nseg matrices of the same
 * column count. Fast lane: x is quantized on the device first; the int8
 * blocks used are copied to xq/xds ([cols], [cols/16][2]). batch_parts > 1
 * (fast-lane K-quants): the row-dots in that many parts of one batch
 * (mu_cu_mv.batch_parts), summed here in order into y. */
int mu_cuda_test_matvec(int nseg, const uint32_t *types, const void *const *raws, const int64_t *rows, int64_t cols,
                        const float *x, int lane, float *y, int8_t *xq, float *xds, int batch_parts);
/* The fast lane's B-row matvec (batched decode): nrows inputs x
 * ([nrows][cols]) quantized on the device (copied to xq, xds), one launch
 * set over nseg matrices of one type; y [nrows][total rows]. Also runs it
 * quantizing x while staging: a bit that differs is an error. */
int mu_cuda_test_matvec_rows_fast(int nseg, uint32_t type, const void *const *raws, const int64_t *rows, int64_t cols,
                                  const float *x, int nrows, float *y, int8_t *xq, float *xds);
/* The f16 tensor-core batch over nseg matrices of one type (split: K split
 * over more warps where the grid is small): T inputs x ([T][cols]) packed
 * as f16 for mu_cu_mmf_set; y [T][total rows]. */
int mu_cuda_test_mmf(int nseg, uint32_t type, const void *const *raws, const int64_t *rows, int64_t cols,
                     const float *x, int T, bool split, int warps, int tiles, float *y);
int mu_cuda_test_dequant(uint32_t type, const void *raw, int64_t rows, int64_t cols, bool to_f16, float *out);
/* gate/up matvec with fused SwiGLU. */
int mu_cuda_test_gateup(uint32_t type, const void *gate, const void *up, int64_t F, int64_t cols, const float *x,
                        int lane, float *out_x, int8_t *xq, float *xds);
/* matvec whose last block runs the residual + norm tail (n = rows). */
int mu_cuda_test_matvec_resnorm(uint32_t type, const void *raw, int64_t n, int64_t cols, const float *x, int lane,
                                const float *w_post, float eps_post, const float *h_in, const float *w_next,
                                float eps_next, float *y, float *h_out, float *a_out, int8_t *q_out, float *ds_out,
                                int8_t *xq, float *xds);
/* embedding rows + optional weightless norm + pre-norm, T tokens. */
int mu_cuda_test_embed(uint32_t type, const void *raw, int64_t V, int64_t E, const int32_t *tokens, int T,
                       bool embd_norm, const float *w_next, float eps, float *h_out, float *a_out);
/* SwiGLU of T rows of n (g, u) into out, also into the tensor-core batch's
 * packed inputs (checked against its packing pass). */
int mu_cuda_test_swiglu_pack(int64_t n, int T, const float *g, const float *u, float *out);
/* The k top values of T rows of n after their bias (mu_cu_rows_top):
 * x [T][n] (in place: x plus the bias comes back), bias_off [T + 1] or
 * NULL, vals, ids [T][k]. */
int mu_cuda_test_rows_top(float *x, int64_t n, int T, const int *bias_off, const int32_t *bias_ids,
                          const float *bias_vals, int k, float *vals, int32_t *ids);
/* LM head: logits (scale, soft-cap) and the device-side choice. */
int mu_cuda_test_logits(uint32_t type, const void *raw, int64_t V, int64_t cols, const float *x, int lane, float scale,
                        float softcap, float temperature, uint32_t seed, int pos, float *logits, int32_t *chosen);

typedef struct mu_cuda_test_qkv {
    int T, n_head, n_head_kv, n_rot, neox, use_rope, kv_f32;
    int64_t capacity;
    const float *q, *k, *v;        /* [T][n_head*128], [T][n_head_kv*128] */
    const float *q_norm, *k_norm;  /* [128] or NULL */
    float eps;
    const float *cs;               /* [T][n_rot] cos/sin pairs             */
    const int32_t *slots;          /* [T]                                  */
    int parts;                     /* T = 1: q, k, v uploaded in this many parts (random
                                      splits that sum to the values; 0, 1: whole) */
    float *qn;                     /* out [T][n_head*128]                  */
    float *kc, *vc;                /* out planes [capacity][n_head_kv*128] */
} mu_cuda_test_qkv;
int mu_cuda_test_qkv_post(const mu_cuda_test_qkv *a);

typedef struct mu_cuda_test_attn {
    int T, n_head, n_head_kv, kv_f32, use_mma, split_cap;
    int64_t capacity;
    const float *q;                /* [T][n_head][128]                      */
    const float *kc, *vc;          /* planes [capacity][n_head_kv*128]; f16-exact values when !kv_f32 */
    const int32_t *n_visible, *phys_first, *route; /* [T]                  */
    float scale;
    const float *gate;             /* [T][n_head*128] or NULL               */
    int gate_parts;                /* T = 1: the gate uploaded in parts (as mu_cuda_test_qkv.parts) */
    float *out;                    /* [T][n_head*128]                       */
    int8_t *out_q;                 /* T == 1: int8 blocks of out, or NULL   */
    float *out_ds;
} mu_cuda_test_attn;
int mu_cuda_test_attention(const mu_cuda_test_attn *a);


#ifdef __cplusplus
}
#endif
#endif
