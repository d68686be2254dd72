/* sample.c — token selection: penalties, then top-k, top-p, min-p,
 * temperature, and a draw from the remaining distribution (llama.cpp's
 * default order). Greedy (temperature <= 0) is argmax after penalties,
 * ties to the lowest id. The random stream is xoshiro256** seeded from the
 * user's seed, so the same seed gives the same text. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model/model.h"
#include "muser.h"
#include "sample/sample.h"
#include "util/error.h"

typedef struct cand {
    float logit;
    int32_t id;
} cand;

struct muser_sampler {
    muser_sampler_params p;
    int n_vocab;
    cand *c;          /* [n_vocab] working candidates             */
    int32_t *history; /* ring of the last repeat_last_n tokens     */
    int hist_len, hist_pos;
    uint16_t *counts; /* [n_vocab] occurrences within the window   */
    uint64_t s[4];    /* xoshiro256** state                        */
};

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(muser_sampler *s) {
    uint64_t *q = s->s, r = rotl(q[1] * 5, 7) * 9, t = q[1] << 17;
    q[2] ^= q[0], q[3] ^= q[1], q[1] ^= q[2], q[0] ^= q[3], q[2] ^= t, q[3] = rotl(q[3], 45);
    return r;
}

static double next_unit(muser_sampler *s) { return (next_u64(s) >> 11) * (1.0 / 9007199254740992.0); }

muser_sampler_params muser_sampler_default_params(const muser_model *model) {
    muser_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 0.8f, p.top_k = 40, p.top_p = 0.95f, p.min_p = 0.05f;
    p.repeat_penalty = 1.0f, p.repeat_last_n = 64;
    p.seed = 0xC0FFEE;
    if (model && model->hp.arch == MU_ARCH_MUSE_GLIMMER) {
        /* Muse Glimmer's model card: temperature 1.0, top-p 0.95, top-k 64. */
        p.temperature = 1.0f, p.top_k = 64, p.top_p = 0.95f, p.min_p = 0.0f;
    }
    return p;
}

uint64_t muser_seed_random(void) {
    uint32_t v;
    if (getentropy(&v, sizeof v) == 0) return v;
    struct timespec ts; /* no entropy source: the clock, mixed */
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid();
    return splitmix(&x) >> 32;
}

void muser_sampler_reset(muser_sampler *s) {
    s->hist_len = s->hist_pos = 0;
    if (s->counts) memset(s->counts, 0, sizeof(uint16_t) * (size_t)s->n_vocab);
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->s[i] = splitmix(&x);
}

muser_sampler *muser_sampler_new(const muser_sampler_params *p, int n_vocab) {
    if (!p || n_vocab <= 0) {
        mu_fail(MUSER_EINVAL, "sampler: bad parameters");
        return NULL;
    }
    if (!isfinite(p->temperature) || !isfinite(p->top_p) || !isfinite(p->min_p) || !(p->repeat_penalty > 0) ||
        p->repeat_last_n < 0 || !isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty)) {
        mu_fail(MUSER_EINVAL, "sampler: temperature, top-p, min-p and penalties must be finite (repeat penalty > 0)");
        return NULL;
    }
    muser_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->c = malloc(sizeof(cand) * (size_t)n_vocab);
    if (p->repeat_last_n > 0) {
        s->history = malloc(sizeof(int32_t) * (size_t)p->repeat_last_n);
        s->counts = calloc((size_t)n_vocab, sizeof(uint16_t));
    }
    if (!s->c || (p->repeat_last_n > 0 && (!s->history || !s->counts))) {
        muser_sampler_free(s);
        mu_fail(MUSER_ENOMEM, "sampler: out of memory");
        return NULL;
    }
    muser_sampler_reset(s);
    return s;
}

void muser_sampler_free(muser_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->history);
    free(s->counts);
    free(s);
}

void muser_sampler_accept(muser_sampler *s, muser_token t) {
    if (!s->history || t < 0 || t >= s->n_vocab) return;
    const int n = s->p.repeat_last_n;
    if (s->hist_len == n) s->counts[s->history[s->hist_pos]]--;
    else s->hist_len++;
    s->history[s->hist_pos] = t;
    s->hist_pos = (s->hist_pos + 1) % n;
    if (s->counts[t] < UINT16_MAX) s->counts[t]++;
}

static bool penalties_on(const muser_sampler_params *p) {
    return p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
}

static int cmp_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id - y->id;
}

/* true when x ranks before y (cmp_desc's order: larger logit, then lower id) */
static inline bool ranks_before(const cand *x, const cand *y) {
    return x->logit > y->logit || (x->logit == y->logit && x->id < y->id);
}

/* Sifts h[i] down a heap of n whose root is the lowest-ranked candidate. */
static void worst_heap_down(cand *h, int n, int i) {
    const cand v = h[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && ranks_before(&h[c], &h[c + 1])) c++; /* the lower-ranked child */
        if (!ranks_before(&v, &h[c])) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

/* Moves the k highest-ranked candidates to the front (unordered), k < n, and
 * the rest behind them, in one pass: c[0..k) is kept as a heap whose root is the lowest of them, and
 * a later candidate replaces the root only when it ranks above it (rare
 * after the first few thousand), so this is O(n) compares. The set is the
 * one a full sort would put first (ties broken by id). */
static void select_top(cand *c, int n, int k) {
    for (int i = k / 2 - 1; i >= 0; i--) worst_heap_down(c, k, i);
    for (int i = k; i < n; i++) {
        if (!ranks_before(&c[i], &c[0])) continue;
        const cand out = c[0]; /* swapped, not dropped: c stays a permutation */
        c[0] = c[i];
        c[i] = out;
        worst_heap_down(c, k, 0);
    }
}

/* The distribution a draw chooses from: the candidates left in s->c[0..n)
 * and their unnormalized probabilities w[0..n) (malloc'd, *w_out); greedy
 * leaves the argmax alone, weight 1. Returns n; 0 when out of memory (then
 * s->c[0] is the best candidate). */
/* The top k of the raw logits (no penalties) straight into c[0..k), in one
 * pass over them: a logit enters only when it ranks above the heap's
 * lowest (a later id never wins a tie), so most cost one compare and
 * nothing is written for them. The same set as select_top over every
 * candidate; NaN counts as -inf. */
static void top_k_of_logits(cand *c, const float *logits, int V, int k) {
    for (int i = 0; i < k; i++) {
        c[i].logit = isnan(logits[i]) ? -INFINITY : logits[i];
        c[i].id = i;
    }
    for (int i = k / 2 - 1; i >= 0; i--) worst_heap_down(c, k, i);
    float low = c[0].logit;
    for (int i = k; i < V; i++) {
        if (!(logits[i] > low)) continue; /* (NaN too) */
        c[0].logit = logits[i];
        c[0].id = i;
        worst_heap_down(c, k, 0);
        low = c[0].logit;
    }
}

static int finish(muser_sampler *s, int n, double **w_out);

/* greedy's distribution: the argmax c[0] alone, weight 1 */
static int greedy_only(double **w_out) {
    double *w = malloc(sizeof(double));
    if (!w) return 0;
    w[0] = 1.0;
    *w_out = w;
    return 1;
}

/* Whether the sampler's draws depend only on the raw logits' top
 * candidates (no penalties): their number, else 0. */
static int top_only(const muser_sampler *s) {
    const muser_sampler_params *p = &s->p;
    if (s->counts && penalties_on(p)) return 0;
    if (p->temperature <= 0.0f) return 1;
    return p->top_k > 0 && p->top_k < s->n_vocab ? p->top_k : 0;
}

static int distribution(muser_sampler *s, const float *logits, double **w_out) {
    const muser_sampler_params *p = &s->p;
    const int V = s->n_vocab;
    cand *c = s->c;
    int n = V;
    *w_out = NULL;
    const bool raw = !(s->counts && penalties_on(p));
    if (raw && p->temperature > 0.0f && p->top_k > 0 && p->top_k < V) {
        top_k_of_logits(c, logits, V, p->top_k);
        n = p->top_k;
        /* in rank order, so that what follows adds them in an order that
         * does not depend on how they were found (mu_sampler_sample_top) */
        qsort(c, (size_t)n, sizeof(cand), cmp_desc);
    } else {
        for (int i = 0; i < V; i++) {
            float l = logits[i];
            if (!raw && s->counts[i]) {
                l = l > 0 ? l / p->repeat_penalty : l * p->repeat_penalty;
                l -= (float)s->counts[i] * p->frequency_penalty + p->presence_penalty;
            }
            if (isnan(l)) l = -INFINITY;
            c[i].logit = l;
            c[i].id = i;
        }
        if (p->temperature <= 0.0f) {
            int best = 0;
            for (int i = 1; i < V; i++)
                if (c[i].logit > c[best].logit) best = i;
            c[0] = c[best];
            return greedy_only(w_out);
        }
        if (p->top_k > 0 && p->top_k < n) {
            select_top(c, n, p->top_k);
            n = p->top_k;
        } else if (n > 1024) {
            /* Without top-k, drop candidates whose probability is below
             * exp(-40) of the best before sorting: they cannot matter. */
            float mx0 = -INFINITY;
            for (int i = 0; i < n; i++) mx0 = c[i].logit > mx0 ? c[i].logit : mx0;
            const float floor_logit = mx0 - 40.0f * (p->temperature > 1.0f ? p->temperature : 1.0f);
            int m = 0;
            for (int i = 0; i < n; i++)
                if (c[i].logit >= floor_logit) c[m++] = c[i];
            n = m;
        }
    }
    return finish(s, n, w_out);
}

/* The distribution over the candidates c[0..n): top-p, min-p, then the
 * temperature's weights (*w_out, malloc'd). Returns the candidates kept. */
static int finish(muser_sampler *s, int n, double **w_out) {
    const muser_sampler_params *p = &s->p;
    cand *c = s->c;
    /* probabilities at temperature 1 for top-p / min-p, as llama.cpp:
     * exp(l - max) / sum over every candidate. Only the prefix up to
     * the cut needs sorting: sort the best m (m growing 4x) until a cut
     * falls inside it; without cuts, everything. */
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = c[i].logit > mx ? c[i].logit : mx;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)c[i].logit - mx);
    const bool cuts = p->top_p < 1.0f || p->min_p > 0.0f;
    for (int m = cuts && n > 256 ? 256 : n;; m = m > n / 4 ? n : 4 * m) {
        if (m < n) select_top(c, n, m);
        qsort(c, (size_t)m, sizeof(cand), cmp_desc);
        int keep = m;
        bool cut = false;
        if (p->top_p < 1.0f) {
            double cum = 0.0;
            for (int i = 0; i < m; i++) {
                cum += exp((double)c[i].logit - mx) / sum;
                if (cum >= p->top_p) {
                    keep = i + 1, cut = true;
                    break;
                }
            }
        }
        if (p->min_p > 0.0f) {
            int k = 1; /* the best has probability 1 relative to itself */
            while (k < keep && exp((double)c[k].logit - mx) >= p->min_p) k++;
            if (k < keep) keep = k, cut = true;
        }
        if (cut || m == n) {
            n = keep;
            break;
        }
    }
    double *w = malloc(sizeof(double) * (size_t)n);
    if (!w) return 0;
    /* temperature */
    for (int i = 0; i < n; i++) w[i] = exp(((double)c[i].logit - mx) / p->temperature);
    *w_out = w;
    return n;
}

/* A draw from candidates c[0..n) with weights w, skipping index `skip`
 * (-1: none) whose weight is left out of the total. */
static muser_token draw(muser_sampler *s, const double *w, int n, int skip) {
    const cand *c = s->c;
    double total = 0.0;
    for (int i = 0; i < n; i++)
        if (i != skip) total += w[i];
    double r = next_unit(s) * total, acc = 0.0;
    muser_token chosen = c[n - 1 == skip && n > 1 ? n - 2 : n - 1].id;
    for (int i = 0; i < n; i++) {
        if (i == skip) continue;
        acc += w[i];
        if (r < acc) {
            chosen = c[i].id;
            break;
        }
    }
    return chosen;
}

/* The token of a distribution over s->c[0..n) with weights w (freed
 * here): the best candidate when greedy or out of memory (n 0), else a
 * draw; the sampler remembers it. */
static muser_token choose(muser_sampler *s, int n, double *w) {
    const muser_token chosen = n == 0 ? s->c[0].id : n == 1 && s->p.temperature <= 0.0f ? s->c[0].id : draw(s, w, n, -1);
    free(w);
    muser_sampler_accept(s, chosen);
    return chosen;
}

int muser_sampler_top_candidates(const muser_sampler *s) { return top_only(s); }

void mu_top_logits(const float *logits, int V, int k, float *vals, muser_token *ids) {
    cand c[MUSER_TOP_MAX];
    top_k_of_logits(c, logits, V, k);
    for (int i = 0; i < k; i++) vals[i] = c[i].logit, ids[i] = c[i].id;
}

muser_token muser_sampler_sample_top(muser_sampler *s, const float *top_logits, const muser_token *top_ids, int n) {
    const int k = top_only(s);
    if (k < 1 || n < k) {
        mu_fail(MUSER_EINVAL, "sampler: %d candidates where its draws need %d of the full logits", n, k);
        return -1;
    }
    cand *c = s->c;
    for (int i = 0; i < n; i++) {
        c[i].logit = isnan(top_logits[i]) ? -INFINITY : top_logits[i];
        c[i].id = top_ids[i];
    }
    qsort(c, (size_t)n, sizeof(cand), cmp_desc);
    double *w = NULL;
    const int m = s->p.temperature <= 0.0f ? greedy_only(&w) : finish(s, k, &w);
    return choose(s, m, w);
}

muser_token muser_sampler_sample(muser_sampler *s, const float *logits) {
    double *w = NULL;
    const int n = distribution(s, logits, &w);
    return choose(s, n, w);
}

muser_token mu_sampler_verify(muser_sampler *s, const float *logits, muser_token draft, bool *accepted) {
    double *w = NULL;
    const int n = distribution(s, logits, &w);
    muser_token chosen;
    *accepted = false;
    if (n == 0) {
        chosen = s->c[0].id;
    } else if (s->p.temperature <= 0.0f) {
        chosen = s->c[0].id; /* greedy: the draft stands when it is the argmax */
    } else {
        /* Standard speculative rejection sampling with a point-mass draft
         * q = delta(draft): accept with probability min(1, p(d) / q(d)) =
         * p(d); otherwise draw from the residual max(p - q, 0), which is p
         * without the draft, renormalized. Each token t then comes out with
         * probability p(d) [t = d] + (1 - p(d)) p(t) / (1 - p(d)) [t != d] = p(t). */
        int at = -1;
        double total = 0.0;
        for (int i = 0; i < n; i++) {
            total += w[i];
            if (s->c[i].id == draft) at = i;
        }
        if (at >= 0 && next_unit(s) * total < w[at]) chosen = draft;
        else chosen = n == 1 && at == 0 ? draft : draw(s, w, n, at);
    }
    free(w);
    *accepted = chosen == draft;
    muser_sampler_accept(s, chosen);
    return chosen;
}
