/* test_split.c — --gpu-layers without a GPU: the layer views of a model,
 * the split backend (backends_split.c) with the CPU on both sides, and the
 * session options.
 *
 * The split's machinery is the same whichever backends run its sides: the
 * residual rows crossing between them, each side's KV planes, rewinds,
 * ring checkpoints, batched rows. With the CPU on both sides every split
 * runs the same kernels over the same rows in the same order as one CPU
 * session, so its logits must equal the CPU's bit for bit, at every split
 * N = 1 .. L-1 of the fixtures, in decode and prefill, in both lanes
 * (test_cuda_split holds the GPU/CPU split to the CUDA parity thresholds).
 * Also: batched decode of split sessions (the sides batched, and row by
 * row when sessions of different splits share a step) against plain CPU
 * sessions; truncate + refeed; a ring checkpoint restored after the rings
 * moved on; -ngl's parsing and its errors (with --backend cpu or ref,
 * with --gpus, bad values); -ngl 0 with --backend cuda running on the CPU
 * without touching a GPU; --draft refused beside a split. */
#include <stdlib.h>
#include <string.h>

#include "backends.h"
#include "engine/engine.h"
#include "fixture.h"
#include "muser.h"
#include "testlib.h"
#include "tinydraft.h"
#include "tinymodel.h"
#include "util/memsize.h"

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static muser_session_params params(muser_lane lane) {
    muser_session_params sp = muser_session_default_params();
    sp.backend = MUSER_BACKEND_CPU;
    sp.lane = lane;
    sp.n_ctx = 512;
    sp.n_batch = 64;
    sp.n_threads = 2;
    return sp;
}

/* A session whose layers [0, n) run on one CPU backend and the rest on
 * another. */
static muser_session *split_session(muser_model *m, const muser_session_params *sp, int n) {
    mu_session_config cfg;
    if (mu_session_config_resolve(m, sp, &cfg) != 0) {
        CHECKF(0, "config: %s", muser_last_error());
        return NULL;
    }
    if (cfg.lane == MUSER_LANE_AUTO) cfg.lane = MUSER_LANE_EXACT;
    if (!cfg.n_threads) cfg.n_threads = 2;
    mu_backend *b = NULL;
    muser_session *s = NULL;
    int rc = mu_split_backend_new(m, &cfg, n, MUSER_BACKEND_CPU, MUSER_BACKEND_CPU, &b);
    if (!rc) rc = mu_session_open(m, &cfg, MUSER_BACKEND_CPU, b, &s);
    CHECKF(rc == 0, "split at %d: %s", n, muser_last_error());
    return s;
}

/* ---- layer views -------------------------------------------------------------------------- */

static void test_views(const muser_model *m) {
    const int L = m->hp.n_layer;
    CHECK(mu_model_layer_view(m, 0, L) == m);
    CHECK(mu_model_embeds(m) && mu_model_heads(m));
    for (int n = 1; n < L; n++) {
        const mu_model *a = mu_model_layer_view(m, 0, n), *b = mu_model_layer_view(m, n, L);
        CHECK(a && b && a != b);
        if (!a || !b) continue;
        CHECK(mu_model_layer_view(m, 0, n) == a); /* made once: its address names it */
        CHECK(a->hp.n_layer == n && b->hp.n_layer == L - n && a->layers == m->layers && b->layers == m->layers + n);
        CHECK(mu_model_embeds(a) && !mu_model_heads(a) && !mu_model_embeds(b) && mu_model_heads(b));
        CHECK(a->tok_embd.data && !a->output.data && !a->output_norm);
        CHECK(!b->tok_embd.data && b->output.data && b->output_norm);
        /* the two sides stream the whole model's weights between them */
        CHECKF(a->weight_bytes_per_token + b->weight_bytes_per_token == m->weight_bytes_per_token,
               "views at %d: %llu + %llu != %llu", n, (unsigned long long)a->weight_bytes_per_token,
               (unsigned long long)b->weight_bytes_per_token, (unsigned long long)m->weight_bytes_per_token);
        /* a view of a view is a view of the model */
        CHECK(mu_model_layer_view(b, 0, 1) == mu_model_layer_view(m, n, n + 1));
    }
    CHECK(mu_model_layer_view(m, 2, 2) == NULL && mu_model_layer_view(m, 0, L + 1) == NULL);
    printf("  layer views: every split of %d layers, made once, embedding and head where they belong\n", L);
}

/* ---- parity: a CPU/CPU split against one CPU session -------------------------------------- */

static void test_parity(const char *rel) {
    tl_fixture fx;
    if (!tl_fixture_load(rel, true, &fx)) return;
    muser_model *m = fx.model;
    const int L = m->hp.n_layer, V = fx.V, n = fx.n;
    test_views(m);
    for (int lane = 0; lane < 2; lane++) {
        const muser_session_params sp = params(lane ? MUSER_LANE_FAST : MUSER_LANE_EXACT);
        for (int mode = 0; mode < 2; mode++) {
            muser_session *s = tl_session(m, &sp, "cpu session");
            float *whole = s ? tl_run_logits(s, fx.tokens, n, V, mode == 1) : NULL;
            muser_session_free(s);
            double worst = 0;
            for (int k = 1; k < L && whole; k++) {
                s = split_session(m, &sp, k);
                if (!s) continue;
                float *split = tl_run_logits(s, fx.tokens, n, V, mode == 1);
                const double d = max_abs_diff(split, whole, (size_t)n * V);
                CHECKF(d == 0.0, "%s %s %s, split at %d: max |d| %.3g against one CPU session", rel,
                       mode ? "prefill" : "decode", lane ? "fast" : "exact", k, d);
                worst = fmax(worst, d);
                free(split);
                muser_session_free(s);
            }
            printf("  %-28s %-7s %-5s every split 1..%d == one CPU session (max |d| %.3g)\n", rel,
                   mode ? "prefill" : "decode", lane ? "fast" : "exact", L - 1, worst);
            free(whole);
        }
    }
    tl_fixture_free(&fx);
}

/* ---- rewinds, checkpoints, batched rows ----------------------------------------------------- */

/* A ring checkpoint at 40, then 80 positions on (the rings wrap past 40),
 * then back to 40 + 1: a plain rewind cannot reach back, the checkpoint
 * can. The logits of the last position (kept: 40 positions). */
static int checkpoint_walk(muser_session *s, const int *tokens, float *out, int V) {
    muser_session_set_checkpoints(s, 2);
    int reused = -1;
    CHECK(muser_session_sync(s, tokens, 40, &reused) == 0);
    CHECK(muser_session_sync(s, tokens, 120, &reused) == 0 && reused == 40);
    CHECK(muser_session_truncate(s, 40) != 0);
    CHECK(muser_session_sync(s, tokens, 41, &reused) == 0);
    if (muser_session_logits(s)) memcpy(out, muser_session_logits(s), sizeof(float) * (size_t)V);
    return reused;
}

/* Truncate and refeed: the same logits. A ring checkpoint restored after
 * the rings moved on: what one CPU session gets the same way. */
static void test_rewinds(muser_model *m, const int *tokens, int n, int V) {
    const muser_session_params sp = params(MUSER_LANE_EXACT);
    float *want = calloc((size_t)V, sizeof(float)), *got = calloc((size_t)V, sizeof(float));
    muser_session *plain = tl_session(m, &sp, "cpu session");
    if (plain) {
        CHECK(muser_session_feed(plain, tokens, n, false) == 0);
        CHECK(checkpoint_walk(plain, tokens, want, V) == 40);
        muser_session_free(plain);
    }
    for (int k = 1; k < m->hp.n_layer; k += 3) {
        muser_session *s = split_session(m, &sp, k);
        if (!s) break;
        float *a = tl_run_logits(s, tokens, n, V, false);
        const int cut = n - 5; /* within the rings' reach (window 32, batch 64) */
        CHECK(muser_session_truncate(s, cut) == 0);
        double d = 0;
        for (int i = cut; i < n; i++) {
            CHECK(muser_session_feed(s, tokens + i, 1, false) == 0);
            d = fmax(d, max_abs_diff(muser_session_logits(s), a + (size_t)i * V, (size_t)V));
        }
        CHECKF(d == 0.0, "split at %d: truncate + refeed differs by %.3g", k, d);
        const int reused = checkpoint_walk(s, tokens, got, V);
        CHECKF(reused == 40, "split at %d: the checkpoint at 40 was not used (kept %d)", k, reused);
        d = max_abs_diff(got, want, (size_t)V);
        CHECKF(d == 0.0, "split at %d: after the checkpoint, position 40 differs from the CPU's by %.3g", k, d);
        free(a);
        muser_session_free(s);
    }
    free(want), free(got);
    printf("  truncate + refeed, and a ring checkpoint restored past the rings' reach: identical logits\n");
}

/* n sessions decoding together: splits at the same layer (each side
 * batched), then at different layers (row by row), against plain CPU
 * sessions batched alike. */
static void test_batch(muser_model *m, const int *tokens, int V) {
    enum { ROWS = 4, STEPS = 6 };
    const muser_session_params sp = params(MUSER_LANE_FAST);
    for (int mixed = 0; mixed < 2; mixed++) {
        muser_session *split[ROWS], *plain[ROWS];
        for (int i = 0; i < ROWS; i++) {
            split[i] = split_session(m, &sp, mixed ? 1 + i : 3);
            plain[i] = tl_session(m, &sp, "cpu session");
            if (!split[i] || !plain[i]) return;
            /* prompts of different lengths: rows at different positions */
            CHECK(muser_session_feed(split[i], tokens, 10 + 20 * i, false) == 0);
            CHECK(muser_session_feed(plain[i], tokens, 10 + 20 * i, false) == 0);
        }
        double d = 0;
        for (int step = 0; step < STEPS; step++) {
            muser_token next[ROWS];
            for (int i = 0; i < ROWS; i++) next[i] = (muser_token)((step * 31 + i * 7) % V);
            CHECK(muser_batch_decode(split, next, ROWS) == 0);
            CHECK(muser_batch_decode(plain, next, ROWS) == 0);
            for (int i = 0; i < ROWS; i++) {
                CHECK(muser_session_pos(split[i]) == muser_session_pos(plain[i]));
                d = fmax(d, max_abs_diff(muser_session_logits(split[i]), muser_session_logits(plain[i]), (size_t)V));
            }
        }
        CHECKF(d == 0.0, "batched decode of %s splits differs from plain CPU sessions by %.3g",
               mixed ? "different" : "equal", d);
        for (int i = 0; i < ROWS; i++) muser_session_free(split[i]), muser_session_free(plain[i]);
    }
    printf("  batched decode: splits at one layer (sides batched) and at four (row by row) == CPU sessions\n");
}

static void test_machinery(void) {
    tl_fixture fx;
    if (!tl_fixture_load("fixtures/nano/nano-Q4_K_M", true, &fx)) return;
    test_rewinds(fx.model, fx.tokens, fx.n, fx.V);
    test_batch(fx.model, fx.tokens, fx.V);
    tl_fixture_free(&fx);
}

/* ---- options and their errors ------------------------------------------------------------------ */

static void test_parse(void) {
    const struct {
        const char *s;
        int v;
    } ok[] = {{"0", 0}, {"1", 1}, {"24", 24}, {"999", 999}, {"all", MUSER_GPU_LAYERS_ALL},
              {"auto", MUSER_GPU_LAYERS_AUTO}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int v = 12345;
        CHECKF(mu_parse_gpu_layers(ok[i].s, &v) && v == ok[i].v, "'%s' -> %d", ok[i].s, v);
    }
    const char *bad[] = {"", "-1", "+3", "1.5", "x", "3x", " 3", "3 ", "Auto", "ALL", "99999999999", NULL};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int v = 12345;
        CHECKF(!mu_parse_gpu_layers(bad[i], &v) && v == 12345, "'%s' was taken as %d", bad[i] ? bad[i] : "(null)", v);
    }
    printf("  --gpu-layers values: counts, all, auto; signs, fractions, spaces and words refused\n");
}

static void expect_refusal(muser_model *m, const muser_session_params *sp, int code, const char *words,
                           const char *what) {
    muser_session *s = NULL;
    const int rc = muser_session_new(m, sp, &s);
    CHECKF(rc == code && !s && strstr(muser_last_error(), words), "%s: status %d, '%s'", what, rc,
           muser_last_error());
    muser_session_free(s);
}

static void test_options(void) {
    tm_opts o = tm_defaults();
    size_t size = 0;
    uint8_t *img = tm_build(&o, &size);
    muser_model *m = NULL;
    const char *path = img ? tm_write_temp(img, size, "split") : NULL;
    CHECK(path && muser_model_load(path, &m) == 0);
    if (path) remove(path); /* (the model maps it: the name can go) */
    free(img);
    if (!m) return;
    muser_session_params sp = muser_session_default_params();
    CHECK(sp.gpu_layers == MUSER_GPU_LAYERS_ALL);
    sp.n_ctx = 64;
    sp.gpu_layers = 2;
    sp.backend = MUSER_BACKEND_CPU;
    expect_refusal(m, &sp, MUSER_EINVAL, "needs --backend cuda", "-ngl 2 --backend cpu");
    sp.backend = MUSER_BACKEND_REF;
    expect_refusal(m, &sp, MUSER_EINVAL, "not ref", "-ngl 2 --backend ref");
    sp.backend = MUSER_BACKEND_CUDA;
    sp.gpus = 2;
    expect_refusal(m, &sp, MUSER_EINVAL, "does not combine with --gpus", "-ngl 2 --gpus 2");
    sp.gpus = 0;
    sp.gpu_layers = -7;
    expect_refusal(m, &sp, MUSER_EINVAL, "--gpu-layers takes", "-ngl -7");
    sp.gpu_layers = MUSER_GPU_LAYERS_AUTO;
    sp.backend = MUSER_BACKEND_CPU;
    expect_refusal(m, &sp, MUSER_EINVAL, "--gpu-layers auto", "-ngl auto --backend cpu");
    /* -ngl 0: every layer on the CPU, no GPU needed; the lane the GPU session would take */
    sp.backend = MUSER_BACKEND_CUDA;
    sp.gpu_layers = 0;
    muser_session *s = tl_session(m, &sp, "-ngl 0 --backend cuda");
    if (s) {
        CHECK(muser_session_backend(s) == MUSER_BACKEND_CPU && muser_session_lane(s) == MUSER_LANE_FAST);
        const muser_token t[3] = {1, 2, 3};
        CHECK(muser_session_feed(s, t, 3, false) == 0);
        muser_session_free(s);
    }
#ifndef MUSER_HAVE_CUDA
    /* a split needs the CUDA backend: a build without it says so */
    sp.gpu_layers = 1;
    expect_refusal(m, &sp, MUSER_EBACKEND, "no CUDA backend", "-ngl 1 without CUDA");
    sp.gpu_layers = MUSER_GPU_LAYERS_AUTO;
    expect_refusal(m, &sp, MUSER_EBACKEND, "no CUDA backend", "-ngl auto without CUDA");
#endif
    /* a drafter beside a split: refused with the reason */
    td_opts d = td_defaults();
    uint8_t *dimg = td_build(&d, &size);
    muser_drafter *dr = NULL;
    path = dimg ? tm_write_temp(dimg, size, "split-draft") : NULL;
    CHECK(path && muser_drafter_load(path, m, &dr) == 0);
    if (path) remove(path); /* (loaded: the name can go) */
    free(dimg);
    sp.backend = MUSER_BACKEND_CPU;
    sp.gpu_layers = MUSER_GPU_LAYERS_ALL;
    s = dr ? split_session(m, &sp, 2) : NULL;
    if (s) {
        const int rc = muser_session_set_drafter(s, dr, 0);
        CHECKF(rc == MUSER_EUNSUPPORTED && strstr(muser_last_error(), "split between the GPU and the CPU"),
               "a drafter beside a split: %d '%s'", rc, muser_last_error());
        muser_session_free(s);
    }
    muser_drafter_free(dr);
    muser_model_free(m);
    printf("  options: -ngl refused with --backend cpu/ref, with --gpus, below 0; -ngl 0 runs on the CPU; "
           "--draft refused beside a split\n");
}

int main(void) {
    printf("options:\n");
    test_parse();
    test_options();
    printf("a split with the CPU on both sides:\n");
    test_parity("fixtures/nano/nano-Q4_K_M");
    test_parity("fixtures/nano/nano-Q8_0");
    test_machinery();
    return tl_finish("split");
}
