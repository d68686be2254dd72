/* cmd_serve.c — `muser serve`: the OpenAI-compatible HTTP server.
 * Options here; the server itself is src/serve/. The main thread only waits
 * for SIGINT or SIGTERM (blocked in every other thread), then shuts down in
 * order so that nothing leaks. */
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve.h"
#include "tools/commands.h"
#include "tools/gen_common.h"
#include "tools/tool_util.h"
#include "util/error.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: muser serve [options]\n"
            "An OpenAI-compatible HTTP server: POST /v1/chat/completions, POST /v1/completions, GET /v1/models,\n"
            "GET /health, GET /metrics, POST /tokenize, POST /detokenize, POST /apply-template.\n"
            "Without -m the bundled model is served (completions and tokenization only). The sampling\n"
            "options set the defaults that requests override; without --seed each request draws a\n"
            "random one.\n\n");
    mu_gen_help_model(out);
    fprintf(out,
            "  %-28s address to bind; 0.0.0.0 exposes the server (default: 127.0.0.1)\n"
            "  %-28s TCP port; 0 picks a free one, printed at start (default: 8080)\n"
            "  %-28s concurrent sessions (slots), decoded in one batch (default: 4)\n"
            "  %-28s requests that may wait for a slot before 429 (default: 64)\n"
            "  %-28s larger request bodies get 413 (default: 8388608)\n"
            "  %-28s require 'Authorization: Bearer KEY' (not on /health,\n"
            "  %-28s /metrics) (default: none)\n"
            "  %-28s the model's id in /v1/models and responses (default: the file name)\n"
            "  %-28s ring checkpoints per slot for prompt caching (default: 4)\n"
            "  %-28s no log line per request (default: one on stderr: method,\n"
            "  %-28s path, status, prompt and completion tokens, ms)\n"
            "  %-28s TESTS ONLY: accept the request field \"muser_test_script\"\n"
            "  %-28s (text whose tokens replace sampling) (default: off)\n",
            "--host ADDR", "--port N", "-np, --parallel N", "--queue N", "--max-body BYTES", "--api-key KEY", "",
            "-a, --alias NAME", "--checkpoints N", "-q, --quiet", "", "--test-hooks", "");
    mu_gen_draft_help(out);
    mu_gen_help(out, "auto|cpu|cuda", "random for each request");
}

/* The file name without directories and ".gguf". */
static void model_id_from_path(const char *path, char *out, size_t cap) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".gguf") == 0) n -= 5;
    snprintf(out, cap, "%.*s", (int)n, base);
}

int cmd_serve(int argc, char **argv) {
    mu_gen_opts o;
    mu_gen_opts_init(&o);
    srv_config cfg = {.host = "127.0.0.1", .port = 8080, .n_slots = 4, .queue_cap = 64, .n_checkpoints = 4,
                      .max_body = 8u << 20};
    const char *alias = NULL;
    mu_args a = {argc, 1, argv, "serve"};
    for (; a.i < argc; a.i++) {
        int v;
        if (mu_arg_is(&a, "-h", "--help")) {
            usage(stdout);
            return 0;
        } else if (mu_arg_is(&a, NULL, "--host")) {
            if (!mu_arg_str(&a, &cfg.host)) return 2;
        } else if (mu_arg_is(&a, NULL, "--port")) {
            if (!mu_arg_int(&a, 0, 65535, &cfg.port)) return 2;
        } else if (mu_arg_is(&a, "-np", "--parallel")) {
            if (!mu_arg_int(&a, 1, 256, &cfg.n_slots)) return 2;
        } else if (mu_arg_is(&a, NULL, "--queue")) {
            if (!mu_arg_int(&a, 0, 1 << 20, &cfg.queue_cap)) return 2;
        } else if (mu_arg_is(&a, NULL, "--max-body")) {
            if (!mu_arg_int(&a, 1024, INT_MAX, &v)) return 2;
            cfg.max_body = (size_t)v;
        } else if (mu_arg_is(&a, NULL, "--api-key")) {
            if (!mu_arg_str(&a, &cfg.api_key)) return 2;
        } else if (mu_arg_is(&a, "-a", "--alias")) {
            if (!mu_arg_str(&a, &alias)) return 2;
        } else if (mu_arg_is(&a, NULL, "--checkpoints")) {
            if (!mu_arg_int(&a, 0, 64, &cfg.n_checkpoints)) return 2;
        } else if (mu_arg_is(&a, "-q", "--quiet")) {
            cfg.quiet = true;
        } else if (mu_arg_is(&a, NULL, "--test-hooks")) {
            cfg.test_hooks = true;
        } else if (!mu_gen_option(&a, &o)) {
            return 2;
        }
    }
    if (o.sp.backend == MUSER_BACKEND_REF) {
        fprintf(stderr, "muser serve: --backend must be auto, cpu or cuda\n");
        return 2;
    }
    muser_model *model = NULL;
    if (mu_gen_load(&o, &model) != 0) return 1;
    char id[256];
    model_id_from_path(o.model_path ? o.model_path : "stories260K.gguf", id, sizeof id);
    cfg.model = model;
    cfg.model_id = alias ? alias : id;
    cfg.model_path = o.model_path;
    cfg.session = o.sp;
    cfg.sampling = o.samp;
    cfg.seed_fixed = !o.seed_random;
    muser_drafter *drafter = NULL;
    if (o.draft_path) {
        if (muser_drafter_load(o.draft_path, model, &drafter) != 0) {
            fprintf(stderr, "muser serve: %s\n", muser_last_error());
            muser_model_free(model);
            return 1;
        }
        cfg.drafter = drafter;
        cfg.draft_max = o.draft_max;
    }

    /* Signals go to the main thread only: block them before any thread starts. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    srv_server *srv = NULL;
    if (srv_server_start(&cfg, &srv) != 0) {
        fprintf(stderr, "muser serve: %s\n", muser_last_error());
        muser_drafter_free(drafter);
        muser_model_free(model);
        return 1;
    }
    muser_model_info info;
    muser_model_get_info(model, &info);
    bool v6 = strchr(cfg.host, ':') != NULL;
    fprintf(stderr, "muser serve: %s (%s), %d slot%s; listening on http://%s%s%s:%d\n", cfg.model_id, info.arch,
            cfg.n_slots, mu_plural_s(cfg.n_slots), v6 ? "[" : "", cfg.host, v6 ? "]" : "", srv_server_port(srv));
    fflush(stderr);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    fprintf(stderr, "muser serve: %s, shutting down\n", sig == SIGINT ? "interrupted" : "terminated");
    srv_server_stop(srv);
    muser_drafter_free(drafter);
    muser_model_free(model);
    return 0;
}
