/* rope.h — the RoPE angle table, shared by the backends (the CPU rotates
 * with it; CUDA uploads it per token). The angles follow llama.cpp's CPU
 * backend, for parity: theta_i comes from repeated float multiplication by
 * base^(-2/n_rot), not from a power per dimension. */
#ifndef MU_ROPE_H
#define MU_ROPE_H

#include <stdint.h>

#include "model/model.h"

/* cos/sin table for one position: cs[2i] = cos(theta_i), cs[2i+1] = sin,
 * i < n_rot/2; freq_factors (NULL: none) divide theta_i. */
void mu_rope_table(const mu_hparams *hp, float base, const float *freq_factors, int64_t pos, float *cs);

#endif
