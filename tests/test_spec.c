/* test_spec.c — speculative decoding with a DFlash drafter: the output is
 * the target's. Greedy: token for token the text of plain decoding, over
 * prompts and generations longer than the sliding windows (a random
 * drafter is rejected almost always: rings wrap under rejected blocks);
 * a hook proposing the target's own future tokens has every draft
 * accepted (full-block commits). Sampling: the rejection step reproduces
 * the sampler's distribution (chi-square over many seeds, on fixed logits
 * and through a session), and the same seed gives the same text. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/parity.h"
#include "gguf/gguf.h"
#include "model/dflash.h"
#include "muser.h"
#include "sample/sample.h"
#include "testlib.h"
#include "tinydraft.h"
#include "tinymodel.h"

enum { PROMPT = 11, GEN = 90, MAXLEN = PROMPT + GEN + 16 };

static muser_model *load_target(void) {
    tm_opts o = tm_defaults(); /* window 8, context 128, vocab 50 */
    muser_model *m = tm_load(&o, "spec-target");
    CHECK(m != NULL);
    return m;
}

static int n_vocab(const muser_model *m) {
    muser_model_info info;
    muser_model_get_info(m, &info);
    return info.n_vocab;
}

static muser_session *session(const muser_model *m, int n_batch) {
    muser_session_params sp = muser_session_default_params();
    sp.backend = MUSER_BACKEND_CPU;
    sp.n_ctx = 128;
    sp.n_batch = n_batch;
    sp.n_threads = 2;
    muser_session *s = NULL;
    CHECKF(muser_session_new(m, &sp, &s) == 0, "%s", muser_last_error());
    return s;
}

static muser_token argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Plain greedy: seq[0..PROMPT) is the prompt; fills seq[PROMPT..PROMPT+GEN). */
static void plain_greedy(const muser_model *m, muser_token *seq, float *margin) {
    muser_session *s = session(m, 8);
    const int V = n_vocab(m);
    CHECK(muser_session_feed(s, seq, PROMPT, false) == 0);
    for (int i = PROMPT; i < PROMPT + GEN; i++) {
        const float *l = muser_session_logits(s);
        seq[i] = argmax(l, V);
        float second = -INFINITY;
        for (int v = 0; v < V; v++)
            if (v != seq[i] && l[v] > second) second = l[v];
        margin[i] = l[seq[i]] - second;
        if (i + 1 < PROMPT + GEN) CHECK(muser_session_feed(s, &seq[i], 1, false) == 0);
    }
    muser_session_free(s);
}

/* Speculative generation of GEN tokens after the prompt into out. */
static void spec_generate(muser_session *s, const muser_token *prompt, muser_sampler *smp, muser_token *out) {
    const int V = n_vocab(mu_session_model(s));
    CHECK(muser_session_feed(s, prompt, PROMPT, false) == 0);
    const float *l = muser_session_logits(s);
    int n = 0;
    out[n++] = smp ? muser_sampler_sample(smp, l) : argmax(l, V);
    while (n < GEN) {
        int got = 0;
        int rc = muser_session_spec_step(s, out[n - 1], smp, GEN - n, out + n, &got);
        CHECKF(rc == 0, "%s", muser_last_error());
        if (rc) return;
        n += got;
    }
}

typedef struct oracle {
    const muser_token *seq; /* the plain greedy text, prompt included */
    int len;
    int calls;
} oracle;

/* Proposes the target's own future tokens: every draft should be accepted. */
static int propose_future(void *ctx, int pos, muser_token last, int n, muser_token *drafts) {
    oracle *o = ctx;
    o->calls++;
    CHECK(o->seq[pos] == last);
    for (int i = 0; i < n; i++) drafts[i] = pos + 1 + i < o->len ? o->seq[pos + 1 + i] : 0;
    return 0;
}

static void test_greedy(const muser_model *m, const muser_drafter *d) {
    muser_token seq[MAXLEN];
    float margin[MAXLEN];
    uint64_t rng = 21;
    const int V = n_vocab(m);
    for (int i = 0; i < PROMPT; i++) seq[i] = (muser_token)(tl_rand_u64(&rng) % (uint64_t)V);
    plain_greedy(m, seq, margin);
    const int draft_max[] = {1, 3, 5, 0}, batches[] = {8, 16};
    for (size_t bi = 0; bi < 2; bi++)
        for (size_t di = 0; di < 4; di++) {
            muser_session *s = session(m, batches[bi]);
            CHECKF(muser_session_set_drafter(s, d, draft_max[di]) == 0, "%s", muser_last_error());
            muser_token out[GEN];
            spec_generate(s, seq, NULL, out);
            int first_diff = -1;
            for (int i = 0; i < GEN && first_diff < 0; i++)
                if (out[i] != seq[PROMPT + i]) first_diff = i;
            /* Row-chunk kernels may sum in another order than one-row ones
             * (test_batch.c): only a near tie could flip. */
            CHECKF(first_diff < 0 || margin[PROMPT + first_diff] < 1e-3f,
                   "n_batch %d, draft-max %d: speculative greedy differs from plain at token %d (margin %.3g)",
                   batches[bi], draft_max[di], first_diff, first_diff < 0 ? 0.0 : (double)margin[PROMPT + first_diff]);
            muser_spec_stats st;
            muser_session_spec_stats(s, &st);
            CHECK(st.steps > 0 && st.drafted >= st.steps && st.accepted <= st.drafted);
            printf("greedy, n_batch %d, draft-max %d: %llu steps, %llu drafted, %llu accepted; %s\n", batches[bi],
                   draft_max[di], (unsigned long long)st.steps, (unsigned long long)st.drafted,
                   (unsigned long long)st.accepted, first_diff < 0 ? "identical" : "differs at a near tie");
            muser_session_free(s);
        }

    /* the hook: every draft accepted, full blocks committed */
    for (int dm = 1; dm <= 5; dm += 4) {
        muser_session *s = session(m, 8);
        CHECK(muser_session_set_drafter(s, d, dm) == 0);
        oracle o = {seq, PROMPT + GEN, 0};
        mu_session_set_draft_override(s, propose_future, &o);
        muser_token out[GEN];
        spec_generate(s, seq, NULL, out);
        CHECK(memcmp(out, seq + PROMPT, sizeof out) == 0);
        muser_spec_stats st;
        muser_session_spec_stats(s, &st);
        CHECKF(st.accepted == st.drafted && st.steps == (uint64_t)o.calls && st.drafted > 0,
               "draft-max %d: %llu of %llu drafts accepted", dm, (unsigned long long)st.accepted,
               (unsigned long long)st.drafted);
        /* steps of dm + 1 tokens each, but the last (capped by GEN) */
        CHECK(st.steps <= (uint64_t)((GEN - 1 + dm) / (dm + 1)) + 1);
        /* the session holds exactly the text: a plain feed goes on from it */
        CHECK(muser_session_pos(s) == PROMPT + GEN - 1);
        CHECK(memcmp(muser_session_tokens(s), seq, sizeof(muser_token) * (size_t)(PROMPT + GEN - 1)) == 0);
        muser_session_free(s);
    }
}

/* The chi-square statistic of counts against probabilities p (cells with
 * p = 0 must stay empty). */
static double chi_square(const int *counts, const double *p, int n, int total, int *dof) {
    double x2 = 0;
    *dof = -1;
    for (int i = 0; i < n; i++) {
        if (p[i] == 0) {
            if (counts[i]) return INFINITY;
            continue;
        }
        const double e = p[i] * total;
        x2 += (counts[i] - e) * (counts[i] - e) / e;
        (*dof)++;
    }
    return x2;
}

/* Upper 0.1% points of chi-square for 1..9 degrees of freedom. */
static const double CHI2_999[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88};

/* The sampler's exact distribution over V = 8 fixed logits: temperature,
 * top-k 6, top-p 0.9 (computed independently of sample.c). */
static void exact_distribution(const float *l, const muser_sampler_params *sp, double *p) {
    int order[8];
    for (int i = 0; i < 8; i++) order[i] = i;
    for (int i = 0; i < 8; i++)
        for (int j = i + 1; j < 8; j++)
            if (l[order[j]] > l[order[i]]) {
                int t = order[i];
                order[i] = order[j], order[j] = t;
            }
    const int k = sp->top_k;
    double z = 0;
    for (int i = 0; i < k; i++) z += exp((double)l[order[i]] - l[order[0]]);
    int keep = k;
    double cum = 0;
    for (int i = 0; i < k; i++) {
        cum += exp((double)l[order[i]] - l[order[0]]) / z;
        if (cum >= sp->top_p) {
            keep = i + 1;
            break;
        }
    }
    double zt = 0;
    memset(p, 0, sizeof(double) * 8);
    for (int i = 0; i < keep; i++) zt += p[order[i]] = exp(((double)l[order[i]] - l[order[0]]) / sp->temperature);
    for (int i = 0; i < 8; i++) p[i] /= zt;
}

static void test_rejection_distribution(void) {
    const float logits[8] = {1.2f, 0.3f, -0.4f, 2.0f, 0.9f, -1.5f, 1.6f, 0.1f};
    muser_sampler_params sp = muser_sampler_default_params(NULL);
    sp.temperature = 0.8f, sp.top_k = 6, sp.top_p = 0.9f, sp.min_p = 0.0f, sp.repeat_penalty = 1.0f;
    double p[8];
    exact_distribution(logits, &sp, p);
    const muser_token drafts[] = {3, 0, 4, 5}; /* the likeliest, two others, one outside the kept set */
    enum { DRAWS = 20000 };
    for (size_t di = 0; di < sizeof drafts / sizeof *drafts; di++) {
        int counts[8] = {0}, accepted = 0;
        for (int seed = 0; seed < DRAWS; seed++) {
            sp.seed = (uint64_t)seed * 7919u + di;
            muser_sampler *smp = muser_sampler_new(&sp, 8);
            bool acc;
            const muser_token t = mu_sampler_verify(smp, logits, drafts[di], &acc);
            counts[t]++;
            accepted += acc;
            CHECK(acc == (t == drafts[di]));
            muser_sampler_free(smp);
        }
        int dof;
        const double x2 = chi_square(counts, p, 8, DRAWS, &dof);
        CHECKF(dof >= 1 && x2 < CHI2_999[dof], "draft %d: chi-square %.2f with %d degrees of freedom", drafts[di], x2,
               dof);
        /* acceptance is the draft's probability */
        CHECKF(fabs((double)accepted / DRAWS - p[drafts[di]]) < 0.02, "draft %d accepted %.3f, p %.3f", drafts[di],
               (double)accepted / DRAWS, p[drafts[di]]);
        printf("rejection sampling, draft %d: chi-square %.2f (%d dof), accepted %.3f (p %.3f)\n", drafts[di], x2, dof,
               (double)accepted / DRAWS, p[drafts[di]]);
    }
}

/* Fixed proposals: the token after the prompt's last, whatever the seed. */
static int propose_fixed(void *ctx, int pos, muser_token last, int n, muser_token *drafts) {
    (void)pos, (void)last;
    for (int i = 0; i < n; i++) drafts[i] = *(const muser_token *)ctx;
    return 0;
}

/* Through a session: the second generated token (the first verified one)
 * follows the target's distribution after the first, over many seeds. */
static void test_session_distribution(const muser_model *m, const muser_drafter *d) {
    const int V = n_vocab(m);
    muser_token prompt[PROMPT];
    uint64_t rng = 8;
    for (int i = 0; i < PROMPT; i++) prompt[i] = (muser_token)(tl_rand_u64(&rng) % (uint64_t)V);
    muser_sampler_params sp = muser_sampler_default_params(NULL);
    sp.temperature = 1.0f, sp.top_k = 6, sp.top_p = 1.0f, sp.min_p = 0.0f;
    /* the exact distribution after prompt + first: the sampler's own over
     * the target's logits, estimated as exactly as the cut allows: top-6 at T 1 */
    muser_session *s = session(m, 8);
    CHECK(muser_session_set_drafter(s, d, 3) == 0);
    CHECK(muser_session_feed(s, prompt, PROMPT, false) == 0);
    const muser_token first = argmax(muser_session_logits(s), V);
    CHECK(muser_session_feed(s, &first, 1, false) == 0);
    const float *l = muser_session_logits(s);
    double *p = calloc((size_t)V, sizeof(double));
    int order[64];
    for (int i = 0; i < V; i++) order[i] = i;
    for (int i = 0; i < 6; i++)
        for (int j = i + 1; j < V; j++)
            if (l[order[j]] > l[order[i]]) {
                int t = order[i];
                order[i] = order[j], order[j] = t;
            }
    double z = 0;
    for (int i = 0; i < 6; i++) z += p[order[i]] = exp((double)l[order[i]] - l[order[0]]);
    for (int i = 0; i < V; i++) p[i] /= z;
    const muser_token fixed = order[1]; /* a plausible but not the likeliest guess */
    mu_session_set_draft_override(s, propose_fixed, (void *)&fixed);
    enum { RUNS = 3000 };
    int *counts = calloc((size_t)V, sizeof(int));
    for (int seed = 0; seed < RUNS; seed++) {
        CHECK(muser_session_truncate(s, PROMPT) == 0);
        sp.seed = (uint64_t)seed;
        muser_sampler *smp = muser_sampler_new(&sp, V);
        muser_token out[4];
        int got = 0;
        CHECK(muser_session_spec_step(s, first, smp, 4, out, &got) == 0 && got >= 1);
        counts[out[0]]++;
        muser_sampler_free(smp);
    }
    int dof;
    const double x2 = chi_square(counts, p, V, RUNS, &dof);
    CHECKF(dof >= 1 && dof <= 9 && x2 < CHI2_999[dof], "session: chi-square %.2f with %d degrees of freedom", x2, dof);
    printf("through a session: chi-square %.2f (%d dof) over %d seeds\n", x2, dof, RUNS);
    free(counts), free(p);
    muser_session_free(s);

    /* same seed, same text; and a full run with sampling stays in bounds */
    muser_token a[GEN], b[GEN];
    for (int r = 0; r < 2; r++) {
        muser_session *t = session(m, 8);
        CHECK(muser_session_set_drafter(t, d, 5) == 0);
        sp.seed = 1234;
        muser_sampler *smp = muser_sampler_new(&sp, V);
        spec_generate(t, prompt, smp, r ? b : a);
        muser_sampler_free(smp);
        muser_session_free(t);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
}

/* The parity fixtures (Muse Glimmer geometry, Q4_K_M, windows of 32 and
 * 64): a prompt from their tokens longer than the window, 80 greedy tokens
 * plain and speculative with a random drafter (rejections over wrapped
 * rings), then with the target's own future tokens proposed (full blocks). */
static void test_fixture(const char *gguf, const char *tokens_txt, bool local, int n_prompt, int n_layer_target) {
    char p1[1024], p2[1024];
    const char *mpath = local ? tl_test_data(gguf, p1, sizeof p1) : tl_shared(gguf, p1, sizeof p1);
    const char *tpath = local ? tl_test_data(tokens_txt, p2, sizeof p2) : tl_shared(tokens_txt, p2, sizeof p2);
    if (!mpath || !tpath) {
        printf("\n**************** SKIPPED: %s (set MUSER_DATA_DIR) ****************\n\n", gguf);
        return;
    }
    int n_tok = 0;
    int *toks = tl_read_tokens(tpath, &n_tok);
    muser_model *m = NULL;
    CHECKF(toks && n_tok >= n_prompt && muser_model_load(mpath, &m) == 0, "%s: %s", gguf, muser_last_error());
    if (!m || !toks || n_tok < n_prompt) {
        free(toks);
        muser_model_free(m);
        return;
    }
    muser_model_info info;
    muser_model_get_info(m, &info);
    td_opts o = td_defaults();
    o.n_embd = info.n_embd, o.vocab = info.n_vocab, o.mask_token = info.n_vocab - 1;
    o.n_head = 4, o.n_head_kv = 2, o.head_dim = 32, o.n_ff = 128, o.window = info.sliding_window, o.ctx = info.n_ctx_train;
    o.block_size = 16;
    for (int k = 0; k < 3; k++) o.target_layers[k] = (k + 1) * (n_layer_target - 1) / 3;
    size_t size;
    uint8_t *img = td_build(&o, &size);
    gguf_file *f = NULL;
    mu_drafter *d = NULL;
    CHECKF(gguf_open_memory(img, size, "fixture-drafter", &f) == 0 && mu_drafter_from_gguf(f, m, &d) == 0, "%s",
           muser_last_error());
    enum { GEN_FX = 80 };
    const int total = n_prompt + GEN_FX;
    muser_token *seq = malloc(sizeof(muser_token) * (size_t)total);
    memcpy(seq, toks, sizeof(muser_token) * (size_t)n_prompt);
    muser_session_params sp = muser_session_default_params();
    sp.backend = MUSER_BACKEND_CPU, sp.n_ctx = total + 32, sp.n_batch = 32, sp.n_threads = 2;
    muser_session *s = NULL;
    CHECK(muser_session_new(m, &sp, &s) == 0 && muser_session_feed(s, seq, n_prompt, false) == 0);
    for (int i = n_prompt; i < total && s; i++) {
        seq[i] = argmax(muser_session_logits(s), info.n_vocab);
        if (i + 1 < total) CHECK(muser_session_feed(s, &seq[i], 1, false) == 0);
    }
    muser_session_free(s);
    for (int hook = 0; hook < 2 && d; hook++) {
        s = NULL;
        CHECK(muser_session_new(m, &sp, &s) == 0 && muser_session_set_drafter(s, d, hook ? 7 : 0) == 0);
        oracle orc = {seq, total, 0};
        if (hook) mu_session_set_draft_override(s, propose_future, &orc);
        CHECK(muser_session_feed(s, seq, n_prompt, false) == 0);
        muser_token out[GEN_FX], t = argmax(muser_session_logits(s), info.n_vocab);
        int n = 0;
        out[n++] = t;
        while (n < GEN_FX) {
            int got = 0;
            if (muser_session_spec_step(s, out[n - 1], NULL, GEN_FX - n, out + n, &got) != 0) break;
            n += got;
        }
        CHECKF(n == GEN_FX && memcmp(out, seq + n_prompt, sizeof out) == 0, "%s, %s: speculative greedy differs",
               gguf, hook ? "own future tokens" : "random drafter");
        muser_spec_stats st;
        muser_session_spec_stats(s, &st);
        if (hook) CHECK(st.accepted == st.drafted && st.drafted > 0);
        printf("%s, %s: %llu steps, %llu drafted, %llu accepted\n", gguf, hook ? "own future tokens" : "random drafter",
               (unsigned long long)st.steps, (unsigned long long)st.drafted, (unsigned long long)st.accepted);
        muser_session_free(s);
    }
    mu_drafter_free(d);
    free(img), free(seq), free(toks);
    muser_model_free(m);
}

static void test_bad_calls(const muser_model *m, const muser_drafter *d) {
    muser_session *s = session(m, 8);
    CHECK(muser_session_set_drafter(s, d, 6) == MUSER_EINVAL && strstr(muser_last_error(), "1 to 5"));
    muser_token t = 3;
    CHECK(muser_session_feed(s, &t, 1, false) == 0);
    CHECK(muser_session_set_drafter(s, d, 2) == MUSER_EINVAL && strstr(muser_last_error(), "empty session"));
    muser_session_reset(s);
    CHECK(muser_session_set_drafter(s, d, 2) == 0);
    CHECK(muser_session_set_drafter(s, d, 2) == MUSER_EINVAL);
    muser_token out[4];
    int got = 0;
    CHECK(muser_session_spec_step(s, 99, NULL, 4, out, &got) == MUSER_ERANGE && got == 0);
    CHECK(muser_session_spec_step(s, 1, NULL, 0, out, &got) == MUSER_EINVAL);
    /* near the end of the context the step drafts less, then none */
    muser_token fill[120];
    for (int i = 0; i < 120; i++) fill[i] = (muser_token)(i % 40);
    CHECK(muser_session_feed(s, fill, 120, false) == 0);
    CHECK(muser_session_spec_step(s, 1, NULL, 4, out, &got) == 0 && got >= 1 && muser_session_pos(s) <= 128);
    while (muser_session_pos(s) < 128) CHECK(muser_session_spec_step(s, 1, NULL, 4, out, &got) == 0);
    CHECK(muser_session_pos(s) == 128);
    CHECK(muser_session_spec_step(s, 1, NULL, 4, out, &got) == MUSER_ECONTEXT);
    CHECK(muser_session_truncate(s, 127) == 0); /* one position left: a plain step */
    CHECK(muser_session_spec_step(s, 1, NULL, 4, out, &got) == 0 && got == 1 && muser_session_pos(s) == 128);
    CHECK(muser_session_set_drafter(s, NULL, 0) == 0);
    muser_session_free(s);
}

/* mu_argmax (the step's greedy choice, two passes) answers as the plain
 * scan: the first largest, NaN never wins, a NaN at 0 stays, -0 == +0. */
static void test_argmax(void) {
    uint64_t x = 0xA5A5ull;
    int bad = 0;
    for (int t = 0; t < 100000 && !bad; t++) {
        float y[45];
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const int n = 1 + (int)((x >> 33) % 45);
        for (int i = 0; i < n; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            const int r = (int)((x >> 33) % 12);
            y[i] = r == 0 ? NAN : r == 1 ? -0.0f : r == 2 ? 0.0f : r == 3 ? -INFINITY : r == 4 ? INFINITY
                                                                                          : (float)(r % 5) - 2.0f;
        }
        bad = mu_argmax(y, n) != argmax(y, n);
        CHECKF(!bad, "case %d: mu_argmax %d, the scan %d (n %d)", t, mu_argmax(y, n), argmax(y, n), n);
    }
    enum { V = 202048 };
    float *row = malloc(sizeof(float) * V);
    if (!row) return;
    for (int i = 0; i < V; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        row[i] = (float)((x >> 40) % 20000) * 1e-3f - 10.0f;
    }
    CHECK(mu_argmax(row, V) == argmax(row, V));
    row[V - 3] = 11.0f, row[V - 2] = 11.0f;
    CHECK(mu_argmax(row, V) == V - 3 && argmax(row, V) == V - 3);
    free(row);
}

int main(void) {
    test_argmax();
    muser_model *m = load_target();
    if (!m) return tl_finish("spec");
    td_opts o = td_defaults();
    size_t size;
    uint8_t *img = td_build(&o, &size);
    gguf_file *f = NULL;
    mu_drafter *d = NULL;
    CHECK(gguf_open_memory(img, size, "drafter.gguf", &f) == 0 && mu_drafter_from_gguf(f, m, &d) == 0);
    if (d) {
        test_greedy(m, d);
        test_session_distribution(m, d);
        test_bad_calls(m, d);
    }
    test_rejection_distribution();
    test_fixture("fixtures/nano/nano-Q4_K_M.gguf", "fixtures/nano/tokens.txt", true, 60, 8);
    test_fixture("fixtures/micro/micro-Q4_K_M.gguf", "fixtures/micro/tokens.txt", false, 100, 4);
    muser_drafter_free(d);
    free(img);
    muser_model_free(m);
    return tl_finish("spec");
}
