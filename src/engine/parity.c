#include "engine/parity.h"

#include <math.h>
#include <string.h>

/* The answer of the plain scan `if (x[i] > x[best]) best = i` (the first
 * largest; NaN never wins, a NaN at 0 stays), in two passes without its
 * chain through the index (which runs a cycle-bound load-compare-select per
 * element: 11 ms for the 15 rows of a 202048-token vocabulary a
 * speculative step drafts, 0.5 ms so): the largest value in 8 independent
 * lanes, then its first index (-0 == +0, as for the scan). */
int mu_argmax(const float *x, int n) {
    if (n < 2 || x[0] != x[0]) return 0;
    float m[8];
    for (int k = 0; k < 8; k++) m[k] = x[0];
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) m[k] = x[i + k] > m[k] ? x[i + k] : m[k];
    float best = m[0];
    for (int k = 1; k < 8; k++) best = m[k] > best ? m[k] : best;
    for (; i < n; i++) best = x[i] > best ? x[i] : best;
    for (i = 0; i < n; i++)
        if (x[i] == best) return i;
    return 0;
}

/* log-sum-exp in double */
static double lse(const float *x, int n) {
    double m = -INFINITY;
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    double s = 0.0;
    for (int i = 0; i < n; i++) s += exp((double)x[i] - m);
    return m + log(s);
}

void mu_parity_compare(const float *ref, const float *ours, int positions, int n_vocab, mu_parity *out) {
    memset(out, 0, sizeof *out);
    out->positions = positions;
    double sq = 0.0;
    int agree = 0, agree_decisive = 0;
    for (int p = 0; p < positions; p++) {
        const float *r = ref + (int64_t)p * n_vocab, *o = ours + (int64_t)p * n_vocab;
        for (int i = 0; i < n_vocab; i++) {
            double d = fabs((double)o[i] - (double)r[i]);
            if (!(d <= out->max_abs)) out->max_abs = d; /* NaN propagates as max */
            sq += d * d;
        }
        double lr = lse(r, n_vocab), lo = lse(o, n_vocab), kl = 0.0;
        for (int i = 0; i < n_vocab; i++) {
            double pr = exp((double)r[i] - lr);
            kl += pr * (((double)r[i] - lr) - ((double)o[i] - lo));
        }
        if (kl < 0) kl = 0; /* rounding */
        out->mean_kl += kl;
        if (!(kl <= out->max_kl)) out->max_kl = kl;
        int tr = mu_argmax(r, n_vocab), to = mu_argmax(o, n_vocab);
        float second = -INFINITY;
        for (int i = 0; i < n_vocab; i++)
            if (i != tr && r[i] > second) second = r[i];
        int decisive = (double)r[tr] - (double)second >= MU_DECISIVE_MARGIN;
        agree += tr == to;
        if (decisive) {
            out->decisive++;
            agree_decisive += tr == to;
        }
    }
    int64_t n = (int64_t)positions * n_vocab;
    out->rms = n ? sqrt(sq / (double)n) : 0.0;
    out->mean_kl = positions ? out->mean_kl / positions : 0.0;
    out->top1 = positions ? (double)agree / positions : 0.0;
    out->top1_decisive = out->decisive ? (double)agree_decisive / out->decisive : 1.0;
}
