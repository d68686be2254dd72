/* cmd_chat.c — `muser chat`: an interactive chat in Muse Glimmer's format.
 * Each turn re-renders the conversation with the native template renderer;
 * the session keeps the tokens it already holds (muser_session_sync), so a
 * turn prefills only what is new. Reasoning (to=self) is shown dimmed or
 * hidden; Ctrl-C stops the current answer, not the program. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools/commands.h"
#include "tools/gen_common.h"
#include "tools/tool_util.h"
#include "util/clock.h"

/* FNV-1a of the chat template this build renders natively (llama.cpp's
 * models/templates/muse-glimmer.jinja, 9992 bytes, sha256 cfc67e5f...). */
#define KNOWN_TEMPLATE_FNV 0x67bbcd170ca4388eull

static uint64_t fnv1a(const char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 0x100000001b3ull;
    return h;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: muser chat [options]\n"
            "An interactive chat in the Muse Glimmer chat format. Commands: /reset (forget the\n"
            "conversation), /exit (or end of input). Ctrl-C stops the current answer.\n\n");
    mu_gen_help_model(out);
    fprintf(out,
            "  %-28s system message (default: none)\n"
            "  %-28s reasoning strength (default: high, as the template)\n"
            "  %-28s show no reasoning (default: shown dimmed)\n"
            "  %-28s most tokens per answer; -1: no limit (default: -1)\n",
            "-sys, --system TEXT", "--reasoning low|medium|high|xhigh", "--hide-reasoning", "-n, --n-predict N");
    mu_gen_draft_help(out);
    mu_gen_help(out, "auto|cpu|cuda|ref", "random, printed at the start");
}

/* Tokenizes the rendered conversation; the template's BOS text parses to BOS. */
static muser_token *tokenize_prompt(const muser_model *m, const char *text, int *n) {
    int k = muser_tokenize(m, text, strlen(text), false, true, NULL, 0);
    if (k <= 0) return NULL;
    muser_token *t = malloc(sizeof(muser_token) * (size_t)k);
    if (t) muser_tokenize(m, text, strlen(text), false, true, t, k);
    *n = k;
    return t;
}

int cmd_chat(int argc, char **argv) {
    mu_gen_opts o;
    mu_gen_opts_init(&o);
    const char *system = NULL, *reasoning = NULL;
    bool hide_reasoning = false;
    int max_answer = -1;
    mu_args a = {argc, 1, argv, "chat"};
    for (; a.i < argc; a.i++) {
        if (mu_arg_is(&a, "-h", "--help")) {
            usage(stdout);
            return 0;
        } else if (mu_arg_is(&a, "-sys", "--system") || mu_arg_is(&a, NULL, "--system-prompt")) {
            if (!mu_arg_str(&a, &system)) return 2;
        } else if (mu_arg_is(&a, NULL, "--reasoning")) {
            if (!mu_arg_str(&a, &reasoning)) return 2;
            if (strcmp(reasoning, "low") && strcmp(reasoning, "medium") && strcmp(reasoning, "high") &&
                strcmp(reasoning, "xhigh")) {
                fprintf(stderr, "muser chat: --reasoning must be low, medium, high or xhigh\n");
                return 2;
            }
        } else if (mu_arg_is(&a, NULL, "--hide-reasoning")) {
            hide_reasoning = true;
        } else if (mu_arg_is(&a, "-n", "--n-predict")) {
            if (!mu_arg_int(&a, -1, 1 << 30, &max_answer)) return 2;
        } else if (!mu_gen_option(&a, &o)) {
            return 2;
        }
    }
    muser_model *model = NULL;
    if (mu_gen_load(&o, &model) != 0) return 1;
    muser_model_info info;
    muser_model_get_info(model, &info);
    if (strcmp(info.arch, "muse-glimmer") != 0) {
        fprintf(stderr, "muser chat: %s is a '%s' model; chat speaks the Muse Glimmer format only (use muser run)\n",
                o.model_path ? o.model_path : "the bundled model", info.arch);
        muser_model_free(model);
        return 1;
    }
    size_t tlen = 0;
    const char *tmpl = muser_model_meta_str(model, "tokenizer.chat_template", &tlen);
    if (tmpl && fnv1a(tmpl, tlen) != KNOWN_TEMPLATE_FNV)
        fprintf(stderr, "muser chat: note: the file's embedded chat template (%zu bytes) differs from the one Muser "
                        "renders natively; using Muser's rendering\n", tlen);

    int rc = 1;
    muser_session *s = NULL;
    muser_drafter *drafter = NULL;
    muser_sampler *smp = muser_sampler_new(&o.samp, info.n_vocab);
    cJSON *history = cJSON_CreateArray();
    char *line = NULL;
    size_t line_cap = 0;
    if (!smp || muser_session_new(model, &o.sp, &s) != 0) {
        fprintf(stderr, "muser chat: %s\n", muser_last_error());
        goto out;
    }
    mu_gen_describe(&o, s);
    if (mu_gen_attach_drafter("chat", &o, model, s, &drafter) != 0) goto out;
    muser_session_set_checkpoints(s, 2); /* a rewound turn need not re-prefill the sliding rings */
    if (system) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", system);
        cJSON_AddItemToArray(history, m);
    }
    mu_gen_catch_sigint(false);
    const bool tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    char today[16];
    time_t now = time(NULL);
    strftime(today, sizeof today, "%Y-%m-%d", localtime(&now));
    fprintf(stderr, "muser chat: %s, context %d tokens, seed %llu. /reset, /exit, Ctrl-C stops an answer.\n",
            info.name, muser_session_n_ctx(s), (unsigned long long)o.samp.seed);

    for (;;) {
        if (tty) fputs("\n> ", stdout);
        fflush(stdout);
        mu_gen_clear_interrupt();
        errno = 0;
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0) {
            if (errno == EINTR) {
                clearerr(stdin);
                fputs("\n(use /exit to quit)", stdout);
                continue;
            }
            break; /* end of input */
        }
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            while (cJSON_GetArraySize(history) > (system ? 1 : 0)) cJSON_DeleteItemFromArray(history, cJSON_GetArraySize(history) - 1);
            muser_session_reset(s);
            muser_sampler_reset(smp);
            puts("(conversation cleared)");
            continue;
        }
        if (got == 0 || !mu_tool_utf8_ok("chat", "the line", line, (size_t)got)) continue;
        cJSON *um = cJSON_CreateObject();
        cJSON_AddStringToObject(um, "role", "user");
        cJSON_AddStringToObject(um, "content", line);
        cJSON_AddItemToArray(history, um);

        char *hist = cJSON_PrintUnformatted(history), *prompt = NULL;
        muser_chat_options co = {.add_generation_prompt = true, .reasoning_strength = reasoning, .current_date = today};
        int r = muser_chat_render(hist, NULL, &co, &prompt);
        free(hist);
        int n = 0;
        muser_token *toks = r == 0 ? tokenize_prompt(model, prompt, &n) : NULL;
        free(prompt);
        if (!toks) {
            fprintf(stderr, "muser chat: %s\n", muser_last_error());
            cJSON_DeleteItemFromArray(history, cJSON_GetArraySize(history) - 1);
            continue;
        }
        if (n >= muser_session_n_ctx(s)) {
            fprintf(stderr, "muser chat: the context is full (%d tokens needed, %d held); /reset to start over\n", n,
                    muser_session_n_ctx(s));
            cJSON_DeleteItemFromArray(history, cJSON_GetArraySize(history) - 1);
            free(toks);
            continue;
        }
        mu_gen_stats st = {0};
        st.seed = o.samp.seed;
        double t0 = mu_now_seconds();
        int reused = 0;
        if (muser_session_sync(s, toks, n, &reused) != 0) {
            fprintf(stderr, "muser chat: %s\n", muser_last_error());
            free(toks);
            goto out;
        }
        st.prompt_tokens = n - reused;
        st.prompt_s = mu_now_seconds() - t0;
        free(toks);

        muser_chat_parser *parser = NULL;
        muser_detok *dt = muser_detok_new(model, true);
        muser_chat_parser_new(NULL, &parser);
        bool in_reasoning = false, full = false;
        muser_chat_delta d;
        t0 = mu_now_seconds();
        /* t: the token chosen after the session's last position; a step
         * feeds it and brings the next (several with --draft) */
        muser_token t = muser_sampler_sample(smp, muser_session_logits(s)), more[256];
        int n_more = 0, next = 0;
        for (int i = 0; (max_answer < 0 || i < max_answer) && !mu_gen_interrupted(); i++) {
            if (i > 0 && next < n_more) {
                t = more[next++];
            } else if (i > 0) {
                if (muser_session_pos(s) >= muser_session_n_ctx(s)) {
                    full = true;
                    break;
                }
                st.bytes += (double)muser_session_bytes_per_token(s);
                const int left = max_answer < 0 || max_answer - i > 256 ? 256 : max_answer - i;
                if (muser_session_spec_step(s, t, smp, left, more, &n_more) != 0) {
                    fprintf(stderr, "\nmuser chat: %s\n", muser_last_error());
                    break;
                }
                t = more[0], next = 1;
            }
            if (muser_vocab_is_eog(model, t)) break;
            const char *piece = muser_detok_push(dt, t);
            st.gen_tokens++;
            muser_chat_parser_feed(parser, piece, strlen(piece), &d);
            if (d.reasoning_len && !hide_reasoning) {
                if (!in_reasoning) fputs(tty ? "\x1b[2m" : "[reasoning] ", stdout);
                in_reasoning = true;
                fwrite(d.reasoning, 1, d.reasoning_len, stdout);
            }
            if (d.content_len) {
                if (in_reasoning) fputs(tty ? "\x1b[0m\n" : "\n", stdout);
                in_reasoning = false;
                fwrite(d.content, 1, d.content_len, stdout);
            }
            fflush(stdout);
        }
        st.gen_s = mu_now_seconds() - t0;
        const char *rest = muser_detok_flush(dt);
        muser_chat_parser_feed(parser, rest, strlen(rest), NULL);
        muser_chat_result res;
        muser_chat_parser_finish(parser, &d, &res);
        if (d.content_len) fwrite(d.content, 1, d.content_len, stdout);
        if (in_reasoning && tty) fputs("\x1b[0m", stdout);
        putchar('\n');
        if (mu_gen_interrupted()) fputs("(stopped)\n", stdout);
        if (full) fprintf(stderr, "muser chat: the context is full (%d tokens); /reset to start over\n", muser_session_n_ctx(s));
        cJSON *am = cJSON_CreateObject();
        cJSON_AddStringToObject(am, "role", "assistant");
        cJSON_AddStringToObject(am, "content", res.content);
        if (res.reasoning[0]) cJSON_AddStringToObject(am, "reasoning_content", res.reasoning);
        cJSON_AddItemToArray(history, am);
        muser_chat_parser_free(parser);
        muser_detok_free(dt);
        if (tty) mu_gen_print_stats(&st, stderr);
    }
    mu_gen_print_spec_stats(s, stderr);
    rc = 0;
out:
    free(line);
    cJSON_Delete(history);
    muser_sampler_free(smp);
    muser_session_free(s);
    muser_drafter_free(drafter);
    muser_model_free(model);
    return rc;
}
