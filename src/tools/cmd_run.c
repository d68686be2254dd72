/* cmd_run.c — `muser run`: complete a prompt, streaming text while it
 * decodes; prompt and decode speed (tok/s, GB/s) and the seed go to stderr
 * at the end, also after Ctrl-C. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/commands.h"
#include "tools/gen_common.h"
#include "tools/tool_util.h"
#include "util/clock.h"
#include "util/error.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: muser run [options]\n"
            "Completes the prompt and streams the text; prompt and decode speed and the seed go to\n"
            "stderr at the end. Ctrl-C stops the generation (the timings still print; exit status 130).\n\n");
    mu_gen_help_model(out);
    fprintf(out,
            "  %-28s the prompt; control tokens in it are parsed (default: none, from BOS)\n"
            "  %-28s read the prompt from FILE (not with -p)\n"
            "  %-28s tokens to generate; -1: to an end or a full context (default: 256)\n"
            "  %-28s add no BOS token (default: as the model's file says)\n"
            "  %-28s print control tokens' text (default: hidden)\n",
            "-p, --prompt TEXT", "-f, --file FILE", "-n, --n-predict N", "--no-bos", "--show-special");
    mu_gen_draft_help(out);
    mu_gen_help(out, "auto|cpu|cuda|ref", "random, printed at the end");
}

int cmd_run(int argc, char **argv) {
    mu_gen_opts o;
    mu_gen_opts_init(&o);
    const char *prompt = NULL, *prompt_file = NULL;
    int n_predict = 256;
    bool add_bos = true, show_special = false;
    mu_args a = {argc, 1, argv, "run"};
    for (; a.i < argc; a.i++) {
        if (mu_arg_is(&a, "-h", "--help")) {
            usage(stdout);
            return 0;
        } else if (mu_arg_is(&a, "-p", "--prompt")) {
            if (!mu_arg_str(&a, &prompt)) return 2;
        } else if (mu_arg_is(&a, "-f", "--file")) {
            if (!mu_arg_str(&a, &prompt_file)) return 2;
        } else if (mu_arg_is(&a, "-n", "--n-predict")) {
            if (!mu_arg_int(&a, -1, 1 << 30, &n_predict)) return 2;
        } else if (mu_arg_is(&a, NULL, "--no-bos")) {
            add_bos = false;
        } else if (mu_arg_is(&a, NULL, "--show-special")) {
            show_special = true;
        } else if (!mu_gen_option(&a, &o)) {
            return 2;
        }
    }
    if (prompt && prompt_file) {
        fprintf(stderr, "muser run: give the prompt with -p or with -f, not both\n");
        return 2;
    }
    char *file_text = NULL;
    size_t plen = prompt ? strlen(prompt) : 0;
    if (prompt_file) {
        file_text = mu_tool_read_file(prompt_file, &plen);
        if (!file_text) return 1;
        prompt = file_text;
    }
    if (!mu_tool_utf8_ok("run", prompt_file ? prompt_file : "the prompt", prompt ? prompt : "", plen)) {
        free(file_text);
        return 1;
    }
    muser_model *model = NULL;
    if (mu_gen_load(&o, &model) != 0) {
        free(file_text);
        return 1;
    }
    int rc = 1;
    muser_session *s = NULL;
    muser_drafter *drafter = NULL;
    muser_sampler *smp = NULL;
    muser_detok *dt = NULL;
    muser_token *toks = NULL;
    if (!prompt) prompt = "";
    const bool bos = add_bos && muser_vocab_add_bos(model);
    int n = muser_tokenize(model, prompt, plen, bos, true, NULL, 0);
    if (n < 0) {
        fprintf(stderr, "muser run: %s\n", muser_last_error());
        goto out;
    }
    toks = malloc(sizeof(muser_token) * (size_t)(n > 0 ? n : 1));
    muser_tokenize(model, prompt, plen, bos, true, toks, n);
    if (n == 0) {
        fprintf(stderr, "muser run: the prompt is empty and the model adds no BOS; give a prompt with -p\n");
        goto out;
    }
    if (muser_session_new(model, &o.sp, &s) != 0) {
        fprintf(stderr, "muser run: %s\n", muser_last_error());
        goto out;
    }
    mu_gen_describe(&o, s);
    if (mu_gen_attach_drafter("run", &o, model, s, &drafter) != 0) goto out;
    if (n > muser_session_n_ctx(s)) {
        fprintf(stderr, "muser run: the prompt has %d tokens but the context holds %d (use -c)\n", n,
                muser_session_n_ctx(s));
        goto out;
    }
    muser_model_info info;
    muser_model_get_info(model, &info);
    smp = muser_sampler_new(&o.samp, info.n_vocab);
    dt = muser_detok_new(model, show_special);
    if (!smp || !dt) {
        fprintf(stderr, "muser run: %s\n", muser_last_error());
        goto out;
    }
    mu_gen_catch_sigint(true);
    /* Echo the prompt through the detokenizer so the continuation joins it. */
    for (int i = 0; i < n; i++) {
        muser_sampler_accept(smp, toks[i]);
        if (i == 0 && bos && toks[0] == muser_vocab_bos(model)) continue;
        fputs(muser_detok_push(dt, toks[i]), stdout);
    }
    fflush(stdout);

    mu_gen_stats st = {n, 0, 0, 0, 0, o.samp.seed};
    double t0 = mu_now_seconds();
    if (muser_session_feed(s, toks, n, false) != 0) {
        fprintf(stderr, "\nmuser run: %s\n", muser_last_error());
        goto out;
    }
    st.prompt_s = mu_now_seconds() - t0;
    t0 = mu_now_seconds();
    /* t: the token chosen after the session's last position. A plain step
     * feeds it and samples one more; a speculative step (with --draft)
     * feeds it with the drafted block and may bring several. */
    muser_token t = muser_sampler_sample(smp, muser_session_logits(s)), more[256];
    int n_more = 0, next = 0;
    while ((n_predict < 0 || st.gen_tokens < n_predict) && !mu_gen_interrupted()) {
        if (muser_vocab_is_eog(model, t)) break;
        fputs(muser_detok_push(dt, t), stdout);
        fflush(stdout);
        st.gen_tokens++;
        if (next < n_more) { /* the rest of the last speculative step */
            t = more[next++];
            continue;
        }
        if (n_predict >= 0 && st.gen_tokens >= n_predict) break;
        if (muser_session_pos(s) >= muser_session_n_ctx(s)) {
            fprintf(stderr, "\nmuser run: the context is full (%d token%s)\n", muser_session_n_ctx(s),
                    mu_plural_s(muser_session_n_ctx(s)));
            break;
        }
        st.bytes += (double)muser_session_bytes_per_token(s);
        const int left = n_predict < 0 ? 256 : n_predict - st.gen_tokens;
        if (muser_session_spec_step(s, t, smp, left < 256 ? left : 256, more, &n_more) != 0) {
            fprintf(stderr, "\nmuser run: %s\n", muser_last_error());
            goto out;
        }
        t = more[0], next = 1;
    }
    st.gen_s = mu_now_seconds() - t0;
    fputs(muser_detok_flush(dt), stdout);
    fputc('\n', stdout);
    fflush(stdout);
    if (mu_gen_interrupted()) fprintf(stderr, "\nmuser run: interrupted");
    mu_gen_print_stats(&st, stderr);
    mu_gen_print_spec_stats(s, stderr);
    rc = mu_gen_interrupted() ? 128 + SIGINT : 0;
out:
    muser_detok_free(dt);
    muser_sampler_free(smp);
    muser_session_free(s);
    muser_drafter_free(drafter);
    muser_model_free(model);
    free(toks);
    free(file_text);
    return rc;
}
