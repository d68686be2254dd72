/* test_batch.c — muser_batch_decode: one decode step for several sessions
 * at different positions (sliding rings wrapped or not) must give each
 * session the logits a one-token feed of its own gives, step after step
 * (up to float summation order: n-row matmul kernels may add in another
 * order than one-row ones), with the same top token;
 * more sessions than the leader's n_batch run in chunks; a chunk the
 * backend refuses (MUSER_EUNSUPPORTED: too few rows, rows it cannot mix —
 * the CUDA backend does both) is fed row by row, whatever its place; bad
 * calls fail before changing anything; muser_batch_decode_greedy chooses what
 * the host's argmax of muser_batch_decode's logits chooses, refused chunks
 * and one row included. mu_session_decode_select without a
 * device-side choice picks through the sampler. In the fast lane on K-quant
 * weights, steps of up to 8 rows give every row exactly (bit for bit) its
 * one-row logits, and so do steps of up to 64 where the kernel table has
 * the packed decode kernels (AVX-512); elsewhere wider steps run the
 * prefill kernels, whose other summation order can move an activation
 * across an int8 rounding step, so they are held to the lane's contract
 * instead: logits within a few such steps, and the same top token wherever
 * the one-row margin is wider. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "engine/engine.h"
#include "muser.h"
#include "fixture.h"
#include "testlib.h"
#include "tinymodel.h"

enum { MAX_ROWS = 7, STEPS = 12 };

/* A backend that refuses some chunks: fewer than refuse_below rows, or the
 * chunk led by refuse_leader (the CPU backend's ops otherwise). */
static struct {
    bool on;
    const mu_backend_ops *inner;
    mu_backend_ops ops;
    int refuse_below, refusals;
    const mu_backend *refuse_leader;
} g_wrap;

static int refusing_batch(mu_backend *const *rows, const muser_token *tokens, const int *pos, int n,
                          float *const *logits) {
    if (n < g_wrap.refuse_below || rows[0] == g_wrap.refuse_leader) {
        g_wrap.refusals++;
        return MUSER_EUNSUPPORTED;
    }
    return g_wrap.inner->forward_batch(rows, tokens, pos, n, logits);
}

static void wrap_backend(muser_session *s) {
    mu_backend *b = mu_session_backend_of(s);
    g_wrap.inner = b->ops;
    g_wrap.ops = *b->ops;
    g_wrap.ops.forward_batch = refusing_batch;
    b->ops = &g_wrap.ops;
}

static muser_session *new_session(const muser_model *m, muser_kv_type kv, int threads) {
    muser_session_params sp = muser_session_default_params();
    sp.backend = MUSER_BACKEND_CPU;
    sp.kv_type = kv;
    sp.n_ctx = 96;
    sp.n_batch = 3; /* rings of window + 2 rows; 7 rows run as 3 + 3 + 1 */
    sp.n_threads = threads;
    muser_session *s = NULL;
    int rc = muser_session_new(m, &sp, &s);
    CHECKF(rc == 0, "%s", muser_last_error());
    /* the default lane (auto) is exact on the CPU */
    if (s) CHECK(muser_session_lane(s) == MUSER_LANE_EXACT);
    return s;
}

/* Batched sessions against twins fed one token at a time. */
static void batch_vs_single(const muser_model *m, int V, int n, muser_kv_type kv, int threads) {
    muser_session *batch[MAX_ROWS], *single[MAX_ROWS];
    uint64_t rng = 1234 + (uint64_t)n;
    for (int i = 0; i < n; i++) {
        batch[i] = new_session(m, kv, threads);
        single[i] = new_session(m, kv, threads);
        /* prompts of different lengths: some rings wrap (window 8), some do not */
        int len = 1 + 5 * i;
        muser_token prompt[64];
        for (int k = 0; k < len; k++) prompt[k] = (muser_token)(tl_rand_u64(&rng) % (uint64_t)V);
        CHECK(muser_session_feed(batch[i], prompt, len, false) == 0);
        CHECK(muser_session_feed(single[i], prompt, len, false) == 0);
        if (g_wrap.on) wrap_backend(batch[i]);
    }
    if (g_wrap.on && n > 3) g_wrap.refuse_leader = mu_session_backend_of(batch[3]); /* the middle chunk */
    double worst = 0;
    int top1_diff = 0;
    for (int step = 0; step < STEPS; step++) {
        muser_token tokens[MAX_ROWS];
        if (tl_batch_step(batch, single, n, V, &rng, tokens, step) != 0) break;
        for (int i = 0; i < n; i++) {
            CHECK(muser_session_tokens(batch[i])[muser_session_pos(batch[i]) - 1] == tokens[i]);
            const float *a = muser_session_logits(batch[i]), *b = muser_session_logits(single[i]);
            int top_a = 0, top_b = 0;
            for (int v = 0; v < V; v++) {
                double d = a[v] > b[v] ? a[v] - b[v] : b[v] - a[v];
                if (d > worst) worst = d;
                if (a[v] > a[top_a]) top_a = v;
                if (b[v] > b[top_b]) top_b = v;
            }
            top1_diff += top_a != top_b;
        }
    }
    /* Logits here have a spread of several units; 1e-3 is summation order. */
    CHECKF(worst <= 1e-3 && top1_diff == 0, "rows %d, kv %s, %d threads: max |batched - single| = %.3g, %d top-1 changes",
           n, kv == MUSER_KV_F16 ? "f16" : "f32", threads, worst, top1_diff);
    printf("rows %d, kv %s, %d threads: max |batched - single| = %.3g\n", n, kv == MUSER_KV_F16 ? "f16" : "f32",
           threads, worst);
    for (int i = 0; i < n; i++) {
        muser_session_free(batch[i]);
        muser_session_free(single[i]);
    }
}

/* muser_batch_decode_greedy against muser_batch_decode + the host's argmax
 * (the CPU has no device-side choice: the engine scans each row): every
 * choice the same, one row (fed through decode_select), a batch, and with
 * the refusing wrapper on, chunks fed row by row. */
static const muser_token g_one_token = 1;

static void greedy_choices(const muser_model *m, int V, int n) {
    muser_session *with_logits[MAX_ROWS], *greedy[MAX_ROWS];
    uint64_t rng = 777 + (uint64_t)n;
    for (int i = 0; i < n; i++) {
        with_logits[i] = new_session(m, MUSER_KV_F32, 2);
        greedy[i] = new_session(m, MUSER_KV_F32, 2);
        muser_token prompt[64];
        const int len = 2 + 3 * i;
        for (int k = 0; k < len; k++) prompt[k] = (muser_token)(tl_rand_u64(&rng) % (uint64_t)V);
        CHECK(muser_session_feed(with_logits[i], prompt, len, false) == 0);
        CHECK(muser_session_feed(greedy[i], prompt, len, false) == 0);
        if (g_wrap.on) wrap_backend(greedy[i]);
    }
    const int differ = tl_greedy_twins(with_logits, greedy, n, V, 6, &rng);
    CHECKF(differ == 0, "rows %d: %d greedy choices differ from the host's argmax", n, differ);
    const int ks[] = {1, 8, V}; /* top logits after a bias (the whole vocabulary too) */
    for (size_t q = 0; q < sizeof ks / sizeof ks[0]; q++) {
        const int k = ks[q], top_differ = tl_top_twins(with_logits, greedy, n, V, k, 3, &rng);
        CHECKF(top_differ == 0, "rows %d, top %d: %d rows' top logits differ from a full sort's", n, k, top_differ);
    }
    float vals[2];
    muser_token ids[2];
    CHECK(muser_batch_decode_top(greedy, &g_one_token, 1, NULL, 0, vals, ids) == MUSER_EINVAL);
    CHECK(muser_batch_decode_top(greedy, &g_one_token, 1, NULL, MUSER_TOP_MAX + 1, vals, ids) == MUSER_EINVAL);
    const muser_token bad_id = V;
    const float one = 1.0f;
    const muser_logit_bias bad = {&bad_id, &one, 1};
    CHECK(muser_batch_decode_top(greedy, &g_one_token, 1, &bad, 1, vals, ids) == MUSER_ERANGE);
    muser_token t = 1, none;
    CHECK(muser_batch_decode_greedy(greedy, &t, 1, NULL) == MUSER_EINVAL);
    CHECK(muser_batch_decode_greedy(greedy, &t, 0, &none) == MUSER_EINVAL);
    for (int i = 0; i < n; i++) {
        muser_session_free(with_logits[i]);
        muser_session_free(greedy[i]);
    }
}

static void bad_calls(const muser_model *m, int V) {
    muser_session *a = new_session(m, MUSER_KV_F32, 1), *b = new_session(m, MUSER_KV_F32, 1);
    muser_token t0 = 1;
    CHECK(muser_session_feed(a, &t0, 1, false) == 0);
    muser_session *rows[2] = {a, a};
    muser_token tokens[2] = {1, 2};
    CHECK(muser_batch_decode(rows, tokens, 2) == MUSER_EINVAL); /* repeated */
    rows[1] = b;
    tokens[1] = V;
    CHECK(muser_batch_decode(rows, tokens, 2) == MUSER_ERANGE);
    CHECK(muser_session_pos(a) == 1 && muser_session_pos(b) == 0);
    CHECK(muser_batch_decode(rows, tokens, 0) == MUSER_EINVAL);
    /* a full session */
    muser_token fill[95] = {0};
    CHECK(muser_session_feed(b, fill, 95, false) == 0);
    tokens[1] = 3;
    CHECK(muser_batch_decode(rows, tokens, 2) == 0); /* b takes its last position */
    CHECK(muser_batch_decode(rows, tokens, 2) == MUSER_ECONTEXT);
    CHECK(muser_session_pos(a) == 2 && muser_session_pos(b) == 96);
    muser_session_free(a);
    muser_session_free(b);

    /* rows the backend cannot mix (KV types differ) are fed one by one */
    muser_session *f16 = new_session(m, MUSER_KV_F16, 1), *f32 = new_session(m, MUSER_KV_F32, 1);
    muser_session *twin = new_session(m, MUSER_KV_F16, 1);
    muser_session *mixed[2] = {f16, f32};
    muser_token pair[2] = {4, 5};
    CHECK(muser_batch_decode(mixed, pair, 2) == 0);
    CHECK(muser_session_pos(f16) == 1 && muser_session_pos(f32) == 1);
    CHECK(muser_session_feed(twin, &pair[0], 1, false) == 0);
    CHECK(memcmp(muser_session_logits(f16), muser_session_logits(twin), sizeof(float) * (size_t)V) == 0);
    muser_session_free(f16);
    muser_session_free(f32);
    muser_session_free(twin);
}

/* mu_session_decode_select on a backend without its own (the CPU): greedy
 * is the argmax of a plain feed's logits, which it keeps; a temperature
 * draws through the sampler, the same tokens for the same seed; a NaN
 * temperature fails before the session moves. */
static void decode_select_on_host(const muser_model *m, int V) {
    muser_session *s = new_session(m, MUSER_KV_F32, 1), *fed = new_session(m, MUSER_KV_F32, 1);
    muser_token tok = 3;
    for (int step = 0; step < STEPS; step++) {
        muser_token next = -1;
        CHECK(mu_session_decode_select(s, tok, 0.0f, 0, true, &next) == 0);
        CHECK(muser_session_feed(fed, &tok, 1, false) == 0);
        const float *l = muser_session_logits(fed);
        int top = 0;
        for (int v = 1; v < V; v++)
            if (l[v] > l[top]) top = v;
        CHECKF(next == top, "step %d: greedy chose %d, the logits' argmax is %d", step, next, top);
        CHECK(muser_session_logits(s) && memcmp(muser_session_logits(s), l, sizeof(float) * (size_t)V) == 0);
        tok = next;
    }
    CHECK(muser_session_pos(s) == STEPS);
    muser_session_free(s);
    muser_session_free(fed);

    /* at temperature 50 the draw is close to uniform over the 50 tokens, so
     * it cannot follow the argmax for 12 steps (chance about 1e-20) */
    muser_token runs[2][STEPS];
    int off_greedy = 0;
    for (int r = 0; r < 2; r++) {
        muser_session *t = new_session(m, MUSER_KV_F32, 1);
        tok = 3;
        for (int step = 0; step < STEPS; step++) {
            CHECK(mu_session_decode_select(t, tok, 50.0f, 42, true, &runs[r][step]) == 0);
            CHECK(runs[r][step] >= 0 && runs[r][step] < V);
            const float *l = muser_session_logits(t);
            int top = 0;
            for (int v = 1; v < V; v++)
                if (l[v] > l[top]) top = v;
            off_greedy += r == 0 && runs[r][step] != top;
            tok = runs[r][step];
        }
        if (r == 0) {
            muser_token unchanged = -1;
            CHECK(mu_session_decode_select(t, tok, NAN, 42, false, &unchanged) == MUSER_EINVAL);
            CHECK(muser_session_pos(t) == STEPS && unchanged == -1);
        }
        muser_session_free(t);
    }
    CHECK(memcmp(runs[0], runs[1], sizeof runs[0]) == 0);
    CHECKF(off_greedy > 0, "temperature 50 chose the argmax at all %d steps", STEPS);
}

/* Fast lane, K-quant weights: n sessions in one batch (one chunk) against
 * one-row twins. Logits span about +-20 (the softcap); one int8 step of an
 * activation moves them by about 0.05. */
#define FAST_WORST 0.25
static void fast_lane_rows(const muser_model *m, int V, int n) {
    enum { MAX_FAST = 17 };
    muser_session *batch[MAX_FAST], *single[MAX_FAST];
    muser_session_params sp = muser_session_default_params();
    sp.backend = MUSER_BACKEND_CPU;
    sp.lane = MUSER_LANE_FAST;
    sp.n_ctx = 64;
    sp.n_threads = 2;
    uint64_t rng = 99 + (uint64_t)n;
    for (int i = 0; i < n; i++) {
        sp.n_batch = i == 0 ? MAX_FAST : 1; /* the leader holds every row of a step */
        batch[i] = tl_session((muser_model *)m, &sp, "batched");
        single[i] = tl_session((muser_model *)m, &sp, "single");
        if (!batch[i] || !single[i]) return;
        const int len = 1 + 3 * i; /* different positions; rings of window 8 wrap for some */
        muser_token prompt[64];
        for (int k = 0; k < len; k++) prompt[k] = (muser_token)(tl_rand_u64(&rng) % (uint64_t)V);
        CHECK(muser_session_feed(batch[i], prompt, len, false) == 0);
        CHECK(muser_session_feed(single[i], prompt, len, false) == 0);
    }
    double worst = 0;
    int differ = 0, top1_diff = 0;
    for (int step = 0; step < 6; step++) {
        muser_token tokens[MAX_FAST];
        if (tl_batch_step(batch, single, n, V, &rng, tokens, step) != 0) break;
        for (int i = 0; i < n; i++) {
            const float *a = muser_session_logits(batch[i]), *b = muser_session_logits(single[i]);
            differ += memcmp(a, b, sizeof(float) * (size_t)V) != 0;
            int top_a = 0, top_b = 0;
            for (int v = 0; v < V; v++) {
                const double d = fabs((double)a[v] - b[v]);
                if (d > worst) worst = d;
                if (a[v] > a[top_a]) top_a = v;
                if (b[v] > b[top_b]) top_b = v;
            }
            top1_diff += top_a != top_b && b[top_b] - b[top_a] > FAST_WORST; /* a decisive change */
        }
    }
    const mu_cpu_kernels *k = mu_cpu_kernels_get(NULL);
    const bool packed = k->matvec_q8_kd[MU_TYPE_Q4_K] && k->matvec_q8_kd[MU_TYPE_Q6_K];
    if (n <= 8 || packed) CHECKF(differ == 0, "fast lane, %d rows: %d rows' logits differ from their one-row decode", n, differ);
    CHECKF(worst <= FAST_WORST && top1_diff == 0, "fast lane, %d rows: max |batched - single| = %.3g, %d decisive top-1 changes", n,
           worst, top1_diff);
    printf("fast lane, %d rows: max |batched - single| = %.3g (%d rows not bit-identical)\n", n, worst, differ);
    for (int i = 0; i < n; i++) {
        muser_session_free(batch[i]);
        muser_session_free(single[i]);
    }
}

int main(void) {
    tm_opts o = tm_defaults();
    o.n_layer = 4; /* sliding and full layers */
    size_t size;
    uint8_t *buf = tm_build(&o, &size);
    const char *path = tm_write_temp(buf, size, "batch");
    free(buf);
    muser_model *m = NULL;
    if (muser_model_load(path, &m) != 0) {
        CHECKF(0, "%s", muser_last_error());
        return tl_finish("batch");
    }
    for (int n = 1; n <= MAX_ROWS; n += 2) batch_vs_single(m, o.vocab, n, MUSER_KV_F32, 2);
    batch_vs_single(m, o.vocab, 4, MUSER_KV_F16, 1);
    batch_vs_single(m, o.vocab, 6, MUSER_KV_F16, 2);
    bad_calls(m, o.vocab);
    decode_select_on_host(m, o.vocab);
    greedy_choices(m, o.vocab, 1);
    greedy_choices(m, o.vocab, 5);
    /* chunks of 3 + 3 + 1 rows: the last (too few) and the middle (its leader) refused */
    g_wrap.on = true;
    g_wrap.refuse_below = 2;
    batch_vs_single(m, o.vocab, 7, MUSER_KV_F32, 2);
    CHECKF(g_wrap.refusals == 2 * STEPS, "%d chunks refused, expected %d", g_wrap.refusals, 2 * STEPS);
    g_wrap.refusals = 0;
    g_wrap.refuse_leader = NULL;
    greedy_choices(m, o.vocab, 7);
    CHECKF(g_wrap.refusals > 0, "no chunk of the greedy steps was refused");
    g_wrap.on = false;
    muser_model_free(m);
    remove(path);

    /* K-quant weights (rows of 256 columns and more) for the fast lane */
    static const uint32_t kquants[] = {MU_TYPE_Q4_K, MU_TYPE_Q6_K};
    for (size_t q = 0; q < sizeof kquants / sizeof kquants[0]; q++) {
        tm_opts k = tm_defaults();
        k.n_embd = 256, k.head_dim = 64, k.n_ff = 512, k.weight_type = kquants[q];
        buf = tm_build(&k, &size);
        path = tm_write_temp(buf, size, "batchq");
        free(buf);
        if (muser_model_load(path, &m) != 0) {
            CHECKF(0, "%s", muser_last_error());
            continue;
        }
        static const int widths[] = {2, 5, 8, 9, 16, 17};
        for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) fast_lane_rows(m, k.vocab, widths[w]);
        muser_model_free(m);
        remove(path);
    }
    return tl_finish("batch");
}
