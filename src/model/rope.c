#include "model/rope.h"

#include <math.h>

void mu_rope_table(const mu_hparams *hp, float base, const float *freq_factors, int64_t pos, float *cs) {
    const float theta_scale = powf(base, -2.0f / (float)hp->n_rot);
    float theta = (float)pos;
    for (int i = 0; i < hp->n_rot / 2; i++) {
        const float ff = freq_factors ? freq_factors[i] : 1.0f;
        const float t = hp->rope_freq_scale * (theta / ff);
        cs[2 * i] = cosf(t);
        cs[2 * i + 1] = sinf(t);
        theta *= theta_scale;
    }
}
