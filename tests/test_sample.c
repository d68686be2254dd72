/* test_sample.c — samplers: greedy, determinism per seed, the sampled
 * distribution, top-k / top-p / min-p cut-offs, penalties, bad logits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "muser.h"
#include "testlib.h"

static muser_sampler_params base(void) {
    muser_sampler_params p = muser_sampler_default_params(NULL);
    p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f, p.repeat_penalty = 1.0f;
    p.temperature = 1.0f;
    p.seed = 1234;
    return p;
}

static void test_greedy(void) {
    float l[6] = {0.1f, 3.0f, -2.0f, 3.0f, NAN, 1.0f};
    muser_sampler_params p = base();
    p.temperature = 0.0f;
    muser_sampler *s = muser_sampler_new(&p, 6);
    CHECK(muser_sampler_sample(s, l) == 1); /* tie -> lowest id; NaN ignored */
    muser_sampler_free(s);
    p.temperature = 5.0f;
    p.top_k = 1;
    s = muser_sampler_new(&p, 6);
    for (int i = 0; i < 50; i++) CHECK(muser_sampler_sample(s, l) == 1);
    muser_sampler_free(s);
}

static void test_determinism_and_distribution(void) {
    enum { V = 1000 };
    float *l = malloc(sizeof(float) * V);
    uint64_t rng = 5;
    for (int i = 0; i < V; i++) l[i] = 2.0f * tl_rand_normal(&rng);
    muser_sampler_params p = base();
    muser_sampler *a = muser_sampler_new(&p, V), *b = muser_sampler_new(&p, V);
    p.seed = 999;
    muser_sampler *c = muser_sampler_new(&p, V);
    int same_ab = 0, same_ac = 0;
    for (int i = 0; i < 200; i++) {
        muser_token x = muser_sampler_sample(a, l), y = muser_sampler_sample(b, l), z = muser_sampler_sample(c, l);
        same_ab += x == y;
        same_ac += x == z;
    }
    CHECK(same_ab == 200);
    CHECK(same_ac < 100);
    muser_sampler_reset(a);
    muser_sampler_reset(b);
    CHECK(muser_sampler_sample(a, l) == muser_sampler_sample(b, l));
    muser_sampler_free(a);
    muser_sampler_free(b);
    muser_sampler_free(c);
    free(l);

    /* p(1) = 2/3 with logits {0, ln 2}; at T = 0.5 it is 4/5. */
    float two[2] = {0.0f, logf(2.0f)};
    for (int t = 0; t < 2; t++) {
        p = base();
        p.temperature = t ? 0.5f : 1.0f;
        muser_sampler *s = muser_sampler_new(&p, 2);
        int ones = 0, N = 30000;
        for (int i = 0; i < N; i++) ones += muser_sampler_sample(s, two) == 1;
        double want = t ? 0.8 : 2.0 / 3.0, sd = sqrt(want * (1 - want) / N);
        CHECKF(fabs((double)ones / N - want) < 5 * sd, "T=%g: %.4f vs %.4f", p.temperature, (double)ones / N, want);
        muser_sampler_free(s);
    }
}

static void test_cutoffs(void) {
    /* probabilities proportional to 8,4,2,1,1 (logits ln of them) */
    float l[5] = {logf(8), logf(4), logf(2), 0, 0};
    muser_sampler_params p = base();
    p.top_p = 0.7f; /* 8/16 = 0.5 < 0.7 <= 12/16: keeps ids 0, 1 */
    muser_sampler *s = muser_sampler_new(&p, 5);
    int seen[5] = {0};
    for (int i = 0; i < 3000; i++) seen[muser_sampler_sample(s, l)]++;
    CHECK(seen[0] > 0 && seen[1] > 0 && seen[2] == 0 && seen[3] == 0 && seen[4] == 0);
    muser_sampler_free(s);
    p = base();
    p.min_p = 0.2f; /* keeps p >= 0.2 * p_max: ids 0 (1.0), 1 (0.5), 2 (0.25) */
    s = muser_sampler_new(&p, 5);
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < 3000; i++) seen[muser_sampler_sample(s, l)]++;
    CHECK(seen[2] > 0 && seen[3] == 0 && seen[4] == 0);
    muser_sampler_free(s);
    p = base();
    p.top_k = 2;
    s = muser_sampler_new(&p, 5);
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < 3000; i++) seen[muser_sampler_sample(s, l)]++;
    CHECK(seen[0] > 0 && seen[1] > 0 && seen[2] + seen[3] + seen[4] == 0);
    muser_sampler_free(s);
}

/* top-k over a large vocabulary with many ties: only the k best (ties
 * broken by the lower id) are ever drawn, and with a flat temperature each
 * of them is. */
static void test_top_k_large(void) {
    enum { V = 5000, K = 37 };
    float *l = malloc(sizeof(float) * V);
    uint64_t rng = 11;
    for (int i = 0; i < V; i++) l[i] = (float)(tl_rand_u64(&rng) % 200) / 10.0f; /* many equal values */
    /* the reference set: rank every id by (logit desc, id asc) */
    int *order = malloc(sizeof(int) * V);
    for (int i = 0; i < V; i++) order[i] = i;
    for (int i = 0; i < K; i++) /* selection of the K best, plainly */
        for (int j = i + 1; j < V; j++) {
            const int a = order[i], b = order[j];
            if (l[b] > l[a] || (l[b] == l[a] && b < a)) order[i] = b, order[j] = a;
        }
    bool *in = calloc(V, sizeof(bool));
    for (int i = 0; i < K; i++) in[order[i]] = true;
    muser_sampler_params p = base();
    p.top_k = K;
    p.temperature = 1000.0f; /* nearly flat over the kept K */
    muser_sampler *s = muser_sampler_new(&p, V);
    int *seen = calloc(V, sizeof(int));
    for (int i = 0; i < 20000; i++) seen[muser_sampler_sample(s, l)]++;
    int outside = 0, missing = 0;
    for (int i = 0; i < V; i++) outside += seen[i] && !in[i], missing += in[i] && !seen[i];
    CHECKF(outside == 0 && missing == 0, "top-k %d: %d drawn outside the best, %d of the best never drawn", K, outside,
           missing);
    muser_sampler_free(s);
    free(seen), free(in), free(order), free(l);
}

/* top-p without top-k over a vocabulary whose nucleus is deep (the sampler
 * sorts a growing prefix until the cut falls inside it): draws stay inside
 * the nucleus, and nearly all of it is drawn. */
static void test_top_p_deep(void) {
    enum { V = 5000 };
    float *l = malloc(sizeof(float) * V);
    int *order = malloc(sizeof(int) * V);
    uint64_t rng = 5;
    for (int i = 0; i < V; i++) l[i] = 3.0f * tl_rand_uniform(&rng), order[i] = i;
    /* the reference nucleus: sort by (logit desc, id asc), cut at 0.9 */
    for (int i = 1; i < V; i++) { /* insertion sort: plain and sure */
        const int v = order[i];
        int j = i;
        while (j > 0 && (l[order[j - 1]] < l[v] || (l[order[j - 1]] == l[v] && order[j - 1] > v))) order[j] = order[j - 1], j--;
        order[j] = v;
    }
    double sum = 0, cum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)l[i] - l[order[0]]);
    bool *in = calloc(V, sizeof(bool));
    int size = 0;
    for (int i = 0; i < V; i++) {
        in[order[i]] = true, size++;
        cum += exp((double)l[order[i]] - l[order[0]]) / sum;
        if (cum >= 0.9) break;
    }
    CHECK(size > 1024); /* deep enough to need several rounds */
    muser_sampler_params p = base();
    p.top_p = 0.9f;
    muser_sampler *s = muser_sampler_new(&p, V);
    int *seen = calloc(V, sizeof(int));
    for (int i = 0; i < 60000; i++) seen[muser_sampler_sample(s, l)]++;
    int outside = 0, missing = 0;
    for (int i = 0; i < V; i++) outside += seen[i] && !in[i], missing += in[i] && !seen[i];
    CHECKF(outside == 0 && missing * 4 < size, "top-p 0.9 over %d: %d drawn outside the nucleus of %d, %d never drawn",
           V, outside, size, missing);
    muser_sampler_free(s);
    free(seen), free(in), free(order), free(l);
}

static void test_penalties(void) {
    float l[3] = {2.0f, 1.5f, -1.0f};
    muser_sampler_params p = base();
    p.temperature = 0.0f;
    p.repeat_penalty = 2.0f; /* 2.0 -> 1.0 once seen: id 1 wins */
    muser_sampler *s = muser_sampler_new(&p, 3);
    CHECK(muser_sampler_sample(s, l) == 0);
    CHECK(muser_sampler_sample(s, l) == 1);
    muser_sampler_free(s);
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.6f;
    s = muser_sampler_new(&p, 3);
    muser_sampler_accept(s, 0);
    CHECK(muser_sampler_sample(s, l) == 1); /* 2.0 - 0.6 < 1.5 */
    muser_sampler_free(s);
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.2f;
    s = muser_sampler_new(&p, 3);
    muser_sampler_accept(s, 0);
    CHECK(muser_sampler_sample(s, l) == 0); /* 2.0 - 0.2 > 1.5 */
    muser_sampler_accept(s, 0);
    muser_sampler_accept(s, 0);              /* now seen 4 times: 2.0 - 0.8 < 1.5 */
    CHECK(muser_sampler_sample(s, l) == 1);
    muser_sampler_free(s);
    p = base();
    p.temperature = 0.0f;
    p.repeat_penalty = 3.0f;
    p.repeat_last_n = 2; /* the window forgets */
    s = muser_sampler_new(&p, 3);
    muser_sampler_accept(s, 0);
    CHECK(muser_sampler_sample(s, l) == 1);
    muser_sampler_accept(s, 2);
    muser_sampler_accept(s, 2); /* 0 has left the 2-token window */
    CHECK(muser_sampler_sample(s, l) == 0);
    muser_sampler_free(s);
}

static void test_bad_params(void) {
    muser_sampler_params p = base();
    p.temperature = NAN;
    CHECK(muser_sampler_new(&p, 10) == NULL);
    p = base();
    p.repeat_penalty = 0.0f;
    CHECK(muser_sampler_new(&p, 10) == NULL);
    p = base();
    CHECK(muser_sampler_new(&p, 0) == NULL);
    float inf[3] = {-INFINITY, -INFINITY, -INFINITY};
    muser_sampler *s = muser_sampler_new(&p, 3);
    muser_token t = muser_sampler_sample(s, inf);
    CHECK(t >= 0 && t < 3);
    muser_sampler_free(s);
}

/* muser_sampler_sample_top from the top n (n >= the sampler's
 * candidates, handed over in a scrambled order) chooses what
 * muser_sampler_sample chooses from the full logits, draw after draw, for
 * greedy and top-k samplers with top-p / min-p on logits with ties and
 * NaNs; samplers that need the full logits say 0 and refuse. */
static void test_sample_top(void) {
    enum { V = 3000, STEPS = 40 };
    float *l = malloc(sizeof(float) * V), vals[300];
    int *order = malloc(sizeof(int) * V);
    muser_token ids[300];
    uint64_t rng = 77;
    const struct { float t; int k; float top_p, min_p; } cases[] = {
        {0.0f, 0, 1.0f, 0.0f}, {1.0f, 64, 0.95f, 0.0f}, {0.7f, 40, 0.9f, 0.05f}, {1.5f, 1, 1.0f, 0.0f},
        {1.0f, 256, 1.0f, 0.0f}, {0.0f, 64, 0.95f, 0.0f},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        muser_sampler_params p = base();
        p.temperature = cases[ci].t, p.top_k = cases[ci].k, p.top_p = cases[ci].top_p, p.min_p = cases[ci].min_p;
        p.seed = 100 + ci;
        muser_sampler *full = muser_sampler_new(&p, V), *top = muser_sampler_new(&p, V);
        const int k = muser_sampler_top_candidates(top);
        CHECK(k == (cases[ci].t <= 0.0f ? 1 : cases[ci].k));
        int differ = 0;
        for (int step = 0; step < STEPS; step++) {
            for (int i = 0; i < V; i++) l[i] = (float)(int)(4.0f * tl_rand_normal(&rng)) * 0.5f; /* many ties */
            l[tl_rand_u64(&rng) % V] = NAN;
            tl_rank_order(l, V, order);
            const int n = k + (int)(tl_rand_u64(&rng) % 8);
            for (int i = 0; i < n; i++) { /* handed over back to front */
                ids[i] = order[n - 1 - i];
                vals[i] = l[ids[i]];
            }
            differ += muser_sampler_sample(full, l) != muser_sampler_sample_top(top, vals, ids, n);
        }
        CHECKF(differ == 0, "case %zu: %d of %d draws from the top candidates differ", ci, differ, STEPS);
        CHECK(muser_sampler_sample_top(top, vals, ids, k - 1) == -1);
        muser_sampler_free(full);
        muser_sampler_free(top);
    }
    muser_sampler_params p = base();
    p.top_k = 0; /* no top-k: every logit counts */
    muser_sampler *s = muser_sampler_new(&p, V);
    CHECK(muser_sampler_top_candidates(s) == 0);
    muser_sampler_free(s);
    p = base();
    p.temperature = 0.0f, p.repeat_penalty = 1.3f; /* penalties: the full logits */
    s = muser_sampler_new(&p, V);
    CHECK(muser_sampler_top_candidates(s) == 0);
    muser_sampler_free(s);
    free(l);
    free(order);
}

int main(void) {
    test_greedy();
    test_sample_top();
    test_determinism_and_distribution();
    test_cutoffs();
    test_top_k_large();
    test_top_p_deep();
    test_penalties();
    test_bad_params();
    return tl_finish("sample");
}
