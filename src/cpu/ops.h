/* ops.h — small elementwise CPU ops shared by the CPU forward pass. The
 * arithmetic follows llama.cpp's CPU backend where it matters for parity:
 * RMS norms sum squares in double and scale in float; the RoPE angles are
 * model/rope.h's table. */
#ifndef MU_CPU_OPS_H
#define MU_CPU_OPS_H

#include <stdint.h>

#include "model/model.h"
#include "model/rope.h"

/* y = x / sqrt(mean(x^2) + eps) * w  (w may be NULL: no weight). y may be x. */
void mu_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps);

/* Rotates the first n_rot dims of each of n_heads vectors of head_dim. */
void mu_rope_apply(const mu_hparams *hp, const float *cs, float *x, int n_heads);

static inline float mu_silu(float x) { return x / (1.0f + __builtin_expf(-x)); }
static inline float mu_sigmoid(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }

/* logits = cap * tanh(scale * logits / cap) (cap 0: scale only). */
void mu_logits_finish(float *logits, int64_t n, float scale, float softcap);

#endif
