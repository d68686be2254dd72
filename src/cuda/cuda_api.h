/* cuda_api.h — internal entry points of the CUDA backend beyond the backend
 * boundary, for the benchmark and the tests (never for the CLI or server,
 * which go through include/muser.h). Only in builds with MUSER_HAVE_CUDA. */
#ifndef MU_CUDA_API_H
#define MU_CUDA_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/cuda_features.h"
#include "cuda/cuda_plan.h"
#include "cuda/cuda_tuning.h"
#include "engine/engine.h"

/* 0 when a usable GPU is present; otherwise a status with the reason in
 * muser_last_error(). */
int mu_cuda_probe(void);

/* One line: the device, its memory, and the backend's settings. */
const char *mu_cuda_describe(const mu_backend *b);

/* Decodes `token` at `pos` and chooses the next token on the device
 * (greedy when temperature <= 0, else a softmax sample with that
 * temperature, seeded); copies the logits only when `logits` is not NULL. */
int mu_cuda_decode_select(mu_backend *b, muser_token token, int pos, float temperature, uint64_t seed,
                          float *logits, muser_token *next);

/* Benchmark support: makes every KV plane hold `depth` positions of random
 * rows (rings wrapped as after a real prefill of that length), so decode
 * can be timed at that depth without prefilling it. */
int mu_cuda_set_synthetic_depth(mu_backend *b, int64_t depth, uint64_t seed);

/* Device-to-device copy bandwidth of `bytes` per copy, counting bytes read
 * plus bytes written (GB/s), the median of `reps` copies. */
int mu_cuda_copy_bandwidth(size_t bytes, int reps, double *gbps);

/* Kernel launches per decoded token (the design variable). */
int mu_cuda_launches_per_token(const mu_backend *b);
/* Weight bytes on the device that one decoded token streams. */
uint64_t mu_cuda_weight_bytes(const mu_backend *b);

/* The session's settings (cuda_tuning.h); setting them recaptures its
 * graphs (tests, the lab's A/B). Not for a tensor-parallel backend. */
void mu_cuda_get_tuning(const mu_backend *b, mu_cuda_tuning *t);
void mu_cuda_set_tuning(mu_backend *b, const mu_cuda_tuning *t);

/* The session's route set: Hopper's features in use, or the portable
 * paths (cuda_features.h). */
void mu_cuda_get_features(const mu_backend *b, mu_cuda_features *f);
/* The longest span the decode attention runs in clusters (0: the cluster
 * route is off: no clusters on this device, or the setting is 0). */
int mu_cuda_attn_cluster_rows(const mu_backend *b);

/* The session's matvec launches so far that could run with paired staging
 * (tuning.pair_staging), and those that did (tests: that the route ran). */
void mu_cuda_pair_launches(const mu_backend *b, long long *eligible, long long *paired);

/* The memory plan of a session holding the first n of m's layers on GPU
 * 0 (n = n_layer: all and the head) under cfg's settings, against what it
 * may take there now (--gpu-layers: cuda_plan.h; tests). */
int mu_cuda_plan_layers(const mu_model *m, const mu_session_config *cfg, int n, mu_gpu_plan *plan);

/* Sessions holding a reference to the single-GPU weights of m on device
 * (0: none resident); the sessions of one model share one upload. */
int mu_cuda_weight_refs(const mu_model *m, int device);

#endif
