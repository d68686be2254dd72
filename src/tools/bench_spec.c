/* bench_spec.c — `muser bench --draft FILE`: speculative decoding with a
 * DFlash drafter, measured.
 *
 * At each KV depth (the target's and the drafter's caches filled with
 * random finite rows, no prefill), the plain one-token step and the
 * speculative step (draft + verify + commit, draft-max tokens drafted) are
 * timed n times each, median. A step's cost hardly depends on how many
 * drafts the target accepts (the verify chunk is the same size), so the
 * table gives tok/s at each accepted length L = 1 .. draft-max + 1 (tokens
 * committed per step, the target's own included) as L / step time, against
 * the plain step. Then a greedy generation from a fixed prompt shows the
 * accepted length actually observed with this drafter and model, and the
 * tok/s it gives.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "tools/bench.h"
#include "tools/tool_util.h"
#include "util/clock.h"
#include "util/error.h"

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The observed run's prompt: text when the model has a tokenizer, else a
 * fixed pseudo-random sequence. */
static int observe_prompt(const muser_model *m, int n_vocab, muser_token *out, int cap) {
    static const char text[] =
        "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined "
        "movable metal type, oil-based ink and a wooden screw press. Within fifty years, presses were at work in "
        "more than two hundred European cities, and the price of books fell sharply. Explain, step by step, why";
    int n = muser_tokenize(m, text, sizeof text - 1, muser_vocab_add_bos(m), false, out, cap);
    if (n > 0 && n <= cap) return n;
    uint64_t x = 0x5EED;
    for (n = 0; n < 64 && n < cap; n++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        out[n] = (muser_token)((x >> 33) % (uint64_t)n_vocab);
    }
    return n;
}

typedef struct spec_depth {
    long depth;
    double plain_ms, step_ms, draft_ms, verify_ms;
} spec_depth;

static int time_depth(muser_session *s, const mu_bench_spec *p, int n_vocab, int draft_max, long depth,
                      spec_depth *r) {
    const int n = p->n_gen;
    double *plain = malloc(sizeof(double) * (size_t)n), *step = malloc(sizeof(double) * (size_t)n);
    double *draft = malloc(sizeof(double) * (size_t)n), *verify = malloc(sizeof(double) * (size_t)n);
    muser_token out[256], tok = (muser_token)(depth % n_vocab);
    int rc = !plain || !step || !draft || !verify;
    if (!rc) rc = mu_session_fill_kv(s, (int)depth, 0xB5EEDull + (uint64_t)depth);
    for (int i = -1; i < n && !rc; i++) { /* i = -1: a warm-up of each */
        /* the plain step as plain decoding runs it (on CUDA the decode
         * graph, which a feed with the drafter's capture on would not take) */
        muser_token next;
        double t0 = mu_now_seconds();
        rc = mu_session_decode_select(s, tok, 0.0f, 0, false, &next);
        const double t_plain = mu_now_seconds() - t0;
        if (!rc) rc = muser_session_truncate(s, (int)depth);
        muser_spec_stats a, b;
        muser_session_spec_stats(s, &a);
        int got = 0;
        t0 = mu_now_seconds();
        if (!rc) rc = muser_session_spec_step(s, tok, NULL, draft_max + 1, out, &got);
        const double t_step = mu_now_seconds() - t0;
        muser_session_spec_stats(s, &b);
        if (!rc) rc = muser_session_truncate(s, (int)depth);
        if (i < 0) continue;
        plain[i] = 1e3 * t_plain, step[i] = 1e3 * t_step;
        draft[i] = 1e3 * (b.draft_seconds - a.draft_seconds), verify[i] = 1e3 * (b.verify_seconds - a.verify_seconds);
    }
    if (rc) fprintf(stderr, "muser bench: depth %ld: %s\n", depth, muser_last_error());
    else {
        r->depth = depth;
        r->plain_ms = median(plain, n), r->step_ms = median(step, n);
        r->draft_ms = median(draft, n), r->verify_ms = median(verify, n);
    }
    free(plain), free(step), free(draft), free(verify);
    return rc;
}

int mu_bench_spec_run(const mu_bench_spec *p) {
    if (mu_bench_check_memory(p->model_path)) return 1;
    muser_model *m = NULL;
    muser_drafter *d = NULL;
    muser_session *s = NULL;
    int status = 1;
    if (muser_model_load(p->model_path, &m) || muser_drafter_load(p->draft_path, m, &d)) {
        fprintf(stderr, "muser bench: %s\n", muser_last_error());
        goto out;
    }
    muser_model_info info;
    muser_model_get_info(m, &info);
    muser_drafter_info di;
    muser_drafter_get_info(d, &di);
    const int draft_max = p->draft_max ? p->draft_max : di.block_size - 1;
    long max_depth = 0;
    for (int i = 0; i < p->n_depths; i++) max_depth = p->depths[i] > max_depth ? p->depths[i] : max_depth;
    muser_session_params sp = p->sp;
    long ctx = max_depth + draft_max + 2;
    if (ctx < 512 + p->observe + draft_max + 2) ctx = 512 + p->observe + draft_max + 2;
    sp.n_ctx = (int)(ctx < info.n_ctx_train ? ctx : info.n_ctx_train);
    if (max_depth + draft_max + 2 > sp.n_ctx) {
        fprintf(stderr, "muser bench: depth %ld and %d drafted tokens exceed the model's context of %d\n", max_depth,
                draft_max, info.n_ctx_train);
        goto out;
    }
    if (muser_session_new(m, &sp, &s) || muser_session_set_drafter(s, d, draft_max)) {
        fprintf(stderr, "muser bench: %s\n", muser_last_error());
        goto out;
    }
    printf("## speculative decoding: %s with the drafter %s\n\n", p->model_path, p->draft_path);
    printf("drafter: %d layers, block %d, %d drafted per step (--draft-max), target layers read: %d; %d thread%s\n\n",
           di.n_layer, di.block_size, draft_max, di.n_target_layers, sp.n_threads, mu_plural_s(sp.n_threads));
    printf("| depth | plain ms/token | plain tok/s | step ms (draft + verify + commit) | draft ms | verify ms |\n");
    printf("|---:|---:|---:|---:|---:|---:|\n");
    spec_depth *r = calloc((size_t)p->n_depths, sizeof *r);
    for (int i = 0; i < p->n_depths; i++) {
        if (time_depth(s, p, info.n_vocab, draft_max, p->depths[i], &r[i])) goto out_r;
        printf("| %ld | %.2f | %.2f | %.2f | %.2f | %.2f |\n", r[i].depth, r[i].plain_ms, 1e3 / r[i].plain_ms,
               r[i].step_ms, r[i].draft_ms, r[i].verify_ms);
        fflush(stdout);
    }
    printf("\ntok/s at each accepted length L (tokens committed per step, the target's own included), from the "
           "measured step; in brackets, against plain decoding\n\n| L |");
    for (int i = 0; i < p->n_depths; i++) printf(" depth %ld |", r[i].depth);
    printf("\n|---:|");
    for (int i = 0; i < p->n_depths; i++) printf("---:|");
    printf("\n");
    for (int L = 1; L <= draft_max + 1; L++) {
        printf("| %d |", L);
        for (int i = 0; i < p->n_depths; i++)
            printf(" %.2f (%.2fx) |", L * 1e3 / r[i].step_ms, L * r[i].plain_ms / r[i].step_ms);
        printf("\n");
    }
    {
        /* observed: a greedy generation from a fixed prompt */
        muser_token prompt[512], out[256];
        const int np = observe_prompt(m, info.n_vocab, prompt, 512);
        muser_session_reset(s);
        muser_spec_stats a, b;
        int rc = muser_session_feed(s, prompt, np, false);
        muser_session_spec_stats(s, &a);
        const double t0 = mu_now_seconds();
        const float *l = rc ? NULL : muser_session_logits(s);
        muser_token t = 0;
        for (int v = 1; l && v < info.n_vocab; v++) t = l[v] > l[t] ? v : t;
        int made = 0;
        while (!rc && made < p->observe) {
            int got = 0;
            const int left = p->observe - made;
            rc = muser_session_spec_step(s, t, NULL, left < 256 ? left : 256, out, &got);
            made += got;
            t = out[got > 0 ? got - 1 : 0];
        }
        const double secs = mu_now_seconds() - t0;
        muser_session_spec_stats(s, &b);
        if (rc) {
            fprintf(stderr, "muser bench: observed run: %s\n", muser_last_error());
            goto out_r;
        }
        const double steps = (double)(b.steps - a.steps), acc = (double)(b.accepted - a.accepted);
        printf("\nobserved: %d tokens greedy after a %d-token prompt: %.0f steps, %.0f of %.0f drafts accepted, "
               "mean accepted length %.2f, %.2f tok/s (plain at depth %ld: %.2f tok/s)\n",
               made, np, steps, acc, (double)(b.drafted - a.drafted), steps ? (acc + steps) / steps : 0.0,
               made / secs, r[0].depth, 1e3 / r[0].plain_ms);
    }
    status = 0;
out_r:
    free(r);
out:
    muser_session_free(s);
    muser_drafter_free(d);
    muser_model_free(m);
    return status;
}
