#include "tools/gen_common.h"

#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/tool_util.h"
#include "util/error.h"

enum { F_TEMP, F_TOPK, F_TOPP, F_MINP, F_REP, F_REPN, F_PRES, F_FREQ, F_SEED };

void mu_gen_opts_init(mu_gen_opts *o) {
    memset(o, 0, sizeof *o);
    o->sp = muser_session_default_params();
}

void mu_gen_help_model(FILE *out) {
    fprintf(out, "  %-28s GGUF model (default: the bundled stories260K, or $MUSER_MODEL)\n", "-m, --model FILE");
}

void mu_gen_help(FILE *out, const char *backends, const char *seed_default) {
    fprintf(out,
            "sampling (defaults from the model: Muse Glimmer T 1.0, top-k 64, top-p 0.95, min-p 0;\n"
            "          other models T 0.8, top-k 40, top-p 0.95, min-p 0.05):\n"
            "  %-28s temperature; 0: greedy\n"
            "  %-28s keep the K likeliest tokens; 0: all\n"
            "  %-28s keep the likeliest tokens holding P of the probability; 1: all\n"
            "  %-28s drop tokens less likely than P times the likeliest; 0: none\n"
            "  %-28s penalize the tokens of the last N by R (default: 1, off)\n"
            "  %-28s tokens the penalties look back on (default: 64)\n"
            "  %-28s (default: 0, off)\n"
            "  %-28s (default: 0, off)\n"
            "  %-28s the sampler's seed (default: %s)\n",
            "--temp T", "--top-k K", "--top-p P", "--min-p P", "--repeat-penalty R", "--repeat-last-n N",
            "--presence-penalty P", "--frequency-penalty P", "-s, --seed S", seed_default);
    mu_tool_session_help(out, backends, "the model's, at most 4096");
    fprintf(out, "  %-28s the backend's line on stderr (CUDA: the GPU, Hopper's or the\n"
                 "  %-28s portable paths, the GPU memory held, the settings)\n", "--verbose", "");
}

void mu_gen_describe(const mu_gen_opts *o, const muser_session *s) {
    if (!o->verbose) return;
    const char *d = muser_session_describe(s);
    fprintf(stderr, "muser: backend %s%s%s\n", muser_session_backend(s) == MUSER_BACKEND_CUDA ? "cuda"
                                                 : muser_session_backend(s) == MUSER_BACKEND_REF ? "ref" : "cpu",
            d ? ": " : "", d ? d : "");
}

bool mu_gen_option(mu_args *a, mu_gen_opts *o) {
    muser_sampler_params *f = &o->flags;
    if (mu_arg_is(a, "-m", "--model")) return mu_arg_str(a, &o->model_path);
    if (mu_arg_is(a, NULL, "--verbose")) return (o->verbose = true);
    if (mu_arg_is(a, NULL, "--temp")) return (o->samp_set[F_TEMP] = mu_arg_float(a, 0, 100, &f->temperature));
    if (mu_arg_is(a, NULL, "--top-k")) return (o->samp_set[F_TOPK] = mu_arg_int(a, 0, INT_MAX, &f->top_k));
    if (mu_arg_is(a, NULL, "--top-p")) return (o->samp_set[F_TOPP] = mu_arg_float(a, 0, 1, &f->top_p));
    if (mu_arg_is(a, NULL, "--min-p")) return (o->samp_set[F_MINP] = mu_arg_float(a, 0, 1, &f->min_p));
    if (mu_arg_is(a, NULL, "--repeat-penalty"))
        return (o->samp_set[F_REP] = mu_arg_float(a, 1e-3, 100, &f->repeat_penalty));
    if (mu_arg_is(a, NULL, "--repeat-last-n"))
        return (o->samp_set[F_REPN] = mu_arg_int(a, 0, 1 << 20, &f->repeat_last_n));
    if (mu_arg_is(a, NULL, "--presence-penalty"))
        return (o->samp_set[F_PRES] = mu_arg_float(a, -100, 100, &f->presence_penalty));
    if (mu_arg_is(a, NULL, "--frequency-penalty"))
        return (o->samp_set[F_FREQ] = mu_arg_float(a, -100, 100, &f->frequency_penalty));
    if (mu_arg_is(a, "-s", "--seed")) return (o->samp_set[F_SEED] = mu_arg_u64(a, &f->seed));
    if (mu_arg_is(a, "-md", "--draft")) return mu_arg_str(a, &o->draft_path);
    if (mu_arg_is(a, NULL, "--draft-max")) return mu_arg_int(a, 1, 255, &o->draft_max);
    return mu_tool_session_option(a, &o->sp);
}

/* The bundled model: $MUSER_MODEL, else models/stories260K next to the
 * executable's tree (build/muser -> ../models), else ./models. */
static const char *bundled_model(char *buf, size_t cap) {
    const char *env = getenv("MUSER_MODEL");
    if (env && *env) return env;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        const char *rel[] = {"/../models/stories260K/stories260K.gguf", "/../share/muser/stories260K.gguf",
                             "/models/stories260K/stories260K.gguf"};
        for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
            snprintf(buf, cap, "%s%s", exe, rel[i]);
            if (access(buf, R_OK) == 0) return buf;
        }
    }
    snprintf(buf, cap, "models/stories260K/stories260K.gguf");
    return buf;
}

int mu_gen_load(mu_gen_opts *o, muser_model **model) {
    char buf[4200];
    const char *path = o->model_path ? o->model_path : bundled_model(buf, sizeof buf);
    int rc = muser_model_load(path, model);
    if (rc) {
        fprintf(stderr, "muser: %s\n", muser_last_error());
        if (!o->model_path) fprintf(stderr, "muser: (the bundled model was looked up; pass -m MODEL)\n");
        return rc;
    }
    o->samp = muser_sampler_default_params(*model);
    const muser_sampler_params *f = &o->flags;
    muser_sampler_params *p = &o->samp;
    if (o->samp_set[F_TEMP]) p->temperature = f->temperature;
    if (o->samp_set[F_TOPK]) p->top_k = f->top_k;
    if (o->samp_set[F_TOPP]) p->top_p = f->top_p;
    if (o->samp_set[F_MINP]) p->min_p = f->min_p;
    if (o->samp_set[F_REP]) p->repeat_penalty = f->repeat_penalty;
    if (o->samp_set[F_REPN]) p->repeat_last_n = f->repeat_last_n;
    if (o->samp_set[F_PRES]) p->presence_penalty = f->presence_penalty;
    if (o->samp_set[F_FREQ]) p->frequency_penalty = f->frequency_penalty;
    o->seed_random = !o->samp_set[F_SEED];
    p->seed = o->seed_random ? muser_seed_random() : f->seed;
    return 0;
}

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

void mu_gen_catch_sigint(bool once) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = once ? SA_RESETHAND : 0;
    sigaction(SIGINT, &sa, NULL);
}

bool mu_gen_interrupted(void) { return interrupted != 0; }
void mu_gen_clear_interrupt(void) { interrupted = 0; }

void mu_gen_print_stats(const mu_gen_stats *st, FILE *out) {
    double pp = st->prompt_s > 0 ? st->prompt_tokens / st->prompt_s : 0;
    double tg = st->gen_s > 0 ? st->gen_tokens / st->gen_s : 0;
    double gbs = st->gen_s > 0 ? st->bytes / st->gen_s / 1e9 : 0;
    fprintf(out,
            "\nprompt: %d token%s, %.2f tok/s | decode: %d token%s, %.2f tok/s, %.2f ms/token, %.2f GB/s | seed %llu\n",
            st->prompt_tokens, mu_plural_s(st->prompt_tokens), pp, st->gen_tokens, mu_plural_s(st->gen_tokens), tg,
            st->gen_tokens ? 1e3 * st->gen_s / st->gen_tokens : 0.0, gbs, (unsigned long long)st->seed);
}

void mu_gen_draft_help(FILE *out) {
    fprintf(out,
            "speculative decoding (the output stays the model's own: token for token at --temp 0):\n"
            "  %-28s a DFlash drafter GGUF for the model (llama.cpp's draft-dflash; -md is its alias)\n"
            "  %-28s tokens drafted per step (default: the drafter's block size - 1)\n",
            "--draft, -md FILE", "--draft-max N");
}

int mu_gen_attach_drafter(const char *cmd, const mu_gen_opts *o, const muser_model *model, muser_session *s,
                          muser_drafter **d) {
    *d = NULL;
    if (!o->draft_path) return 0;
    int rc = muser_drafter_load(o->draft_path, model, d);
    if (!rc) rc = muser_session_set_drafter(s, *d, o->draft_max);
    if (rc) {
        fprintf(stderr, "muser %s: %s\n", cmd, muser_last_error());
        muser_drafter_free(*d);
        *d = NULL;
    }
    return rc;
}

void mu_gen_print_spec_stats(const muser_session *s, FILE *out) {
    muser_spec_stats st;
    muser_session_spec_stats(s, &st);
    if (!st.steps) return;
    fprintf(out, "draft: %llu step%s, %llu drafted, %llu accepted (%.1f%%), mean accepted length %.2f | draft %.2f s, "
                 "verify %.2f s\n",
            (unsigned long long)st.steps, mu_plural_s((int)st.steps), (unsigned long long)st.drafted,
            (unsigned long long)st.accepted, st.drafted ? 100.0 * (double)st.accepted / (double)st.drafted : 0.0,
            (double)(st.accepted + st.steps) / (double)st.steps, st.draft_seconds, st.verify_seconds);
}
