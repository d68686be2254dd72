/* cmd_run.c — `muser run`: complete a prompt, streaming text while it
 * decodes; prompt and decode speed (tok/s, GB/s) go to stderr at the end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/commands.h"
#include "tools/gen_common.h"
#include "tools/tool_util.h"
#include "util/clock.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: muser run [-m MODEL] [-p TEXT | -f FILE] [-n N] [--no-bos] [--show-special] [options]\n"
            "Completes the prompt and streams the text. Without -m it runs the bundled model\n"
            "(stories260K); without a prompt it starts from BOS. -n: tokens to generate (default 256;\n"
            "-1 = until end of generation or a full context). Special tokens in the prompt are parsed.\n%s",
            mu_gen_sampling_help());
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
    char *file_text = NULL;
    if (prompt_file) {
        size_t size;
        file_text = mu_tool_read_file(prompt_file, &size);
        if (!file_text) return 1;
        prompt = file_text;
    }
    muser_model *model = NULL;
    if (mu_gen_load(&o, &model) != 0) {
        free(file_text);
        return 1;
    }
    int rc = 1;
    muser_session *s = NULL;
    muser_sampler *smp = NULL;
    muser_detok *dt = NULL;
    muser_token *toks = NULL;
    if (!prompt) prompt = "";
    const size_t plen = strlen(prompt);
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
    /* Echo the prompt through the detokenizer so the continuation joins it. */
    for (int i = 0; i < n; i++) {
        muser_sampler_accept(smp, toks[i]);
        if (i == 0 && bos && toks[0] == muser_vocab_bos(model)) continue;
        fputs(muser_detok_push(dt, toks[i]), stdout);
    }
    fflush(stdout);

    mu_gen_stats st = {n, 0, 0, 0, 0};
    double t0 = mu_now_seconds();
    if (muser_session_feed(s, toks, n, false) != 0) {
        fprintf(stderr, "\nmuser run: %s\n", muser_last_error());
        goto out;
    }
    st.prompt_s = mu_now_seconds() - t0;
    t0 = mu_now_seconds();
    for (int i = 0; n_predict < 0 || i < n_predict; i++) {
        muser_token t = muser_sampler_sample(smp, muser_session_logits(s));
        if (muser_vocab_is_eog(model, t)) break;
        fputs(muser_detok_push(dt, t), stdout);
        fflush(stdout);
        st.gen_tokens++;
        if (muser_session_pos(s) >= muser_session_n_ctx(s)) {
            fprintf(stderr, "\nmuser run: the context is full (%d tokens)\n", muser_session_n_ctx(s));
            break;
        }
        st.bytes += (double)muser_session_bytes_per_token(s);
        if (muser_session_feed(s, &t, 1, false) != 0) {
            fprintf(stderr, "\nmuser run: %s\n", muser_last_error());
            goto out;
        }
    }
    st.gen_s = mu_now_seconds() - t0;
    fputs(muser_detok_flush(dt), stdout);
    fputc('\n', stdout);
    fflush(stdout);
    mu_gen_print_stats(&st, stderr);
    rc = 0;
out:
    muser_detok_free(dt);
    muser_sampler_free(smp);
    muser_session_free(s);
    muser_model_free(model);
    free(toks);
    free(file_text);
    return rc;
}
