#include "cpu/ops.h"

#include <math.h>

void mu_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    if (w) {
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
    } else {
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
    }
}

void mu_rope_apply(const mu_hparams *hp, const float *cs, float *x, int n_heads) {
    const int half = hp->n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (int64_t)h * hp->head_dim;
        for (int i = 0; i < half; i++) {
            /* NORM pairs (2i, 2i+1); NEOX pairs (i, i + n_rot/2). */
            const int a = hp->rope_type == MU_ROPE_NEOX ? i : 2 * i;
            const int b = hp->rope_type == MU_ROPE_NEOX ? i + half : 2 * i + 1;
            const float c = cs[2 * i], s = cs[2 * i + 1];
            const float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

void mu_logits_finish(float *logits, int64_t n, float scale, float softcap) {
    if (softcap != 0.0f) {
        const float inv = 1.0f / softcap;
        for (int64_t i = 0; i < n; i++) logits[i] = tanhf(logits[i] * scale * inv) * softcap;
    } else if (scale != 1.0f) {
        for (int64_t i = 0; i < n; i++) logits[i] *= scale;
    }
}
