/* serve.h — the OpenAI-compatible HTTP server behind `muser serve`.
 *
 * libmicrohttpd runs one thread per connection, so a connection's thread
 * may block while it waits for the inference worker (sched.h): it parses
 * and validates the request, enqueues a job, then copies the job's bytes to
 * the socket as the worker produces them. Endpoints: POST
 * /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
 * GET /metrics, and llama-server's POST /tokenize, /detokenize and
 * /apply-template.
 */
#ifndef MU_SERVE_H
#define MU_SERVE_H

#include <stdbool.h>
#include <stddef.h>

#include "muser.h"

typedef struct srv_config {
    const char *host;       /* address to bind: "127.0.0.1" (default), "0.0.0.0", "::1", ... */
    int port;               /* 0: any free port                                   */
    const muser_model *model;
    const char *model_id;   /* "id" in /v1/models and "model" in responses        */
    const char *model_path; /* also accepted as the request's "model"             */
    muser_session_params session;
    muser_sampler_params sampling; /* defaults for requests that leave a field out */
    bool seed_fixed;        /* sampling.seed too (--seed); else a random seed each */
    int n_slots;            /* concurrent sessions (--parallel)                   */
    int queue_cap;          /* requests that may wait for a slot before 429      */
    int n_checkpoints;      /* ring checkpoints per slot                          */
    size_t max_body;        /* larger request bodies get 413                      */
    const char *api_key;    /* NULL: no authentication                            */
    bool test_hooks;        /* accept the "muser_test_script" request field       */
    bool quiet;             /* no log line per request on stderr                 */
    const muser_drafter *drafter; /* --draft: speculative decoding, or NULL       */
    int draft_max;          /* --draft-max (0: the drafter's block - 1)           */
} srv_config;

typedef struct srv_server srv_server;

/* Binds, creates the slots and starts the threads. */
int srv_server_start(const srv_config *cfg, srv_server **out);
int srv_server_port(const srv_server *s);
/* Stops accepting, ends running requests (503), joins every thread, frees. */
void srv_server_stop(srv_server *s);

#endif
