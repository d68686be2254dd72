/* test_parity.c — logits of every fixture model, in decode and prefill mode,
 * against llama.cpp's exact f32 reference (M.exact.f32):
 *   CPU engine, exact lane, F32 KV: max |delta| <= 5e-4, RMS <= 5e-5, decisive
 *     top-1 100% (a post-norm eps of 1e-5 instead of 1e-8 already fails);
 *   CPU engine, default F16 KV: mean KL no larger than llama.cpp's own
 *     default run (M.decode.f32) against the same file, computed here;
 *   float64 reference backend: max <= 2e-4, RMS <= 2e-5;
 *   CPU engine, fast lane (int8 activations as llama.cpp's CPU backend), F16
 *     KV: mean KL no larger than llama.cpp's own (M.decode.f32) against the
 *     same file, and decisive top-1 100%.
 * Also the greedy continuation after the 160 tokens (M.exact.greedy.txt),
 * up to the first step whose reference margin is below 0.5. */
#include <stdlib.h>
#include <string.h>

#include "engine/parity.h"
#include "muser.h"
#include "fixture.h"
#include "testlib.h"

typedef struct fixture {
    const char *rel; /* path without extension, relative to the data dir */
    bool local;      /* in tests/data (else the shared data dir)        */
    bool quick;      /* also run under MUSER_TEST_QUICK (sanitizer builds) */
} fixture;

/* Sanitizer builds are ~20x slower: MUSER_TEST_QUICK=1 keeps two fixtures
 * and runs the float64 reference in one mode only. */
static bool quick;

static const fixture fixtures[] = {
    {"fixtures/nano/nano-Q4_K_M", true, false},
    {"fixtures/nano/nano-Q8_0", true, true},
    {"fixtures/nano/nano-f32", false, false},
    {"fixtures/nano/nano-Q6_K", false, false},
    {"fixtures/micro/micro-Q4_K_M", false, true},
};

static const char *fixture_path(const fixture *f, const char *suffix, char *buf, size_t cap) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s%s", f->rel, suffix);
    if (f->local) return tl_test_data(rel, buf, cap);
    return tl_shared(rel, buf, cap);
}

/* Runs the tokens through a session and returns [n][V] logits. */
static float *run(muser_model *m, const int *tokens, int n, muser_backend backend, muser_kv_type kv, bool prefill,
                  muser_lane lane) {
    muser_session_params sp = muser_session_default_params();
    sp.backend = backend;
    sp.kv_type = kv;
    sp.lane = lane;
    sp.n_ctx = 512;
    sp.n_batch = 64; /* several chunks: rings must hold window + chunk - 1 */
    muser_session *s = NULL;
    if (muser_session_new(m, &sp, &s) != 0) {
        fprintf(stderr, "session: %s\n", muser_last_error());
        return NULL;
    }
    muser_model_info info;
    muser_model_get_info(m, &info);
    const int V = info.n_vocab;
    float *out = tl_run_logits(s, tokens, n, V, prefill);
    muser_session_free(s);
    return out;
}

/* Greedy continuation in the exact setting against M.exact.greedy.txt. The
 * reference's own tokens are fed (teacher forcing), so the timelines never
 * part; our argmax must match at every step whose reference margin is at
 * least 0.5, and our top-1 logit must be close at every step. */
static void check_greedy(muser_model *m, const fixture *f, const int *tokens, int n, int V) {
    char buf[512];
    const char *path = fixture_path(f, ".exact.greedy.txt", buf, sizeof buf);
    char *text = path ? tl_read_file(path, NULL) : NULL;
    if (!text) return;
    muser_session_params sp = muser_session_default_params();
    sp.backend = MUSER_BACKEND_CPU;
    sp.kv_type = MUSER_KV_F32;
    sp.n_ctx = 512;
    muser_session *s = NULL;
    CHECK(muser_session_new(m, &sp, &s) == 0);
    CHECK(muser_session_feed(s, tokens, n, false) == 0);
    int steps = 0, decisive = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        int id;
        double top1, top2;
        if (sscanf(line, "%d %lf %lf", &id, &top1, &top2) != 3) break;
        const float *lg = muser_session_logits(s);
        int ours = mu_argmax(lg, V);
        steps++;
        CHECKF(fabs(lg[id] - top1) <= 5e-4, "%s greedy step %d: logit of %d is %.6f, reference %.6f", f->rel, steps,
               id, lg[id], top1);
        if (top1 - top2 >= MU_DECISIVE_MARGIN) {
            decisive++;
            CHECKF(ours == id, "%s greedy step %d: ours %d, reference %d", f->rel, steps, ours, id);
        }
        CHECK(muser_session_feed(s, &id, 1, false) == 0);
    }
    printf("  %-28s greedy: %d steps teacher-forced, %d decisive\n", f->rel, steps, decisive);
    CHECK(steps == 32);
    muser_session_free(s);
    free(text);
}

static void test_fixture(const fixture *f) {
    tl_fixture fx;
    if (!tl_fixture_load(f->rel, f->local, &fx)) return;
    muser_model *m = fx.model;
    const int V = fx.V, n = fx.n;
    const int *tokens = fx.tokens;
    const float *exact = fx.exact, *llama = fx.llama;
    CHECK(n == 160);

    mu_parity llama_vs_exact;
    mu_parity_compare(exact, llama, n, V, &llama_vs_exact);
    for (int mode = 0; mode < 2; mode++) {
        const bool prefill = mode == 1;
        const char *mname = prefill ? "prefill" : "decode";
        mu_parity r;
        float *ours = run(m, tokens, n, MUSER_BACKEND_CPU, MUSER_KV_F32, prefill, MUSER_LANE_EXACT);
        mu_parity_compare(exact, ours, n, V, &r);
        printf("  %-28s %-7s cpu  kv f32: max %.3g rms %.3g meanKL %.3g top1 %.3f decisive %.3f\n", f->rel, mname,
               r.max_abs, r.rms, r.mean_kl, r.top1, r.top1_decisive);
        CHECKF(r.max_abs <= 5e-4, "%s %s: max |delta| %.3g > 5e-4", f->rel, mname, r.max_abs);
        CHECKF(r.rms <= 5e-5, "%s %s: rms %.3g > 5e-5", f->rel, mname, r.rms);
        CHECKF(r.top1_decisive == 1.0, "%s %s: decisive top-1 %.4f", f->rel, mname, r.top1_decisive);
        free(ours);

        ours = run(m, tokens, n, MUSER_BACKEND_CPU, MUSER_KV_F16, prefill, MUSER_LANE_EXACT);
        mu_parity_compare(exact, ours, n, V, &r);
        printf("  %-28s %-7s cpu  kv f16: max %.3g rms %.3g meanKL %.3g (llama.cpp %.3g)\n", f->rel, mname, r.max_abs,
               r.rms, r.mean_kl, llama_vs_exact.mean_kl);
        CHECKF(r.mean_kl <= llama_vs_exact.mean_kl, "%s %s: mean KL %.3g > llama.cpp's %.3g", f->rel, mname, r.mean_kl,
               llama_vs_exact.mean_kl);
        CHECK(r.top1_decisive == 1.0);
        free(ours);

        ours = run(m, tokens, n, MUSER_BACKEND_CPU, MUSER_KV_F16, prefill, MUSER_LANE_FAST);
        mu_parity_compare(exact, ours, n, V, &r);
        printf("  %-28s %-7s fast kv f16: max %.3g rms %.3g meanKL %.3g (llama.cpp %.3g) decisive %.3f\n", f->rel,
               mname, r.max_abs, r.rms, r.mean_kl, llama_vs_exact.mean_kl, r.top1_decisive);
        CHECKF(r.mean_kl <= llama_vs_exact.mean_kl, "%s %s fast lane: mean KL %.3g > llama.cpp's %.3g", f->rel, mname,
               r.mean_kl, llama_vs_exact.mean_kl);
        CHECKF(r.top1_decisive == 1.0, "%s %s fast lane: decisive top-1 %.4f", f->rel, mname, r.top1_decisive);
        free(ours);

        /* The reference runs token by token in both modes; quick runs keep one. */
        if (quick && (!prefill || !f->local)) continue;
        ours = run(m, tokens, n, MUSER_BACKEND_REF, MUSER_KV_F32, prefill, MUSER_LANE_EXACT);
        mu_parity_compare(exact, ours, n, V, &r);
        printf("  %-28s %-7s ref  kv f32: max %.3g rms %.3g\n", f->rel, mname, r.max_abs, r.rms);
        CHECKF(r.max_abs <= 2e-4, "%s %s ref: max %.3g > 2e-4", f->rel, mname, r.max_abs);
        CHECKF(r.rms <= 2e-5, "%s %s ref: rms %.3g > 2e-5", f->rel, mname, r.rms);
        free(ours);

    }
    check_greedy(m, f, tokens, n, V);
    tl_fixture_free(&fx);
}

int main(void) {
    const char *q = getenv("MUSER_TEST_QUICK");
    quick = q && *q && strcmp(q, "0") != 0;
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++)
        if (!quick || fixtures[i].quick) test_fixture(&fixtures[i]);
    return tl_finish("parity");
}
