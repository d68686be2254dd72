/* sched.h — jobs, slots and the one inference worker.
 *
 * Threads: the HTTP threads (one per connection) parse, validate and
 * tokenize a request, then enqueue it as a job; one worker thread owns
 * every session (slot) and runs all inference. The worker writes a job's
 * response bytes (SSE events, or the whole JSON body) into the job's
 * buffer and signals; the connection's thread copies them to the socket.
 * A job is shared by the two sides through a reference count.
 *
 * Each worker step runs one decode step for every slot that is generating,
 * as one muser_batch_decode call (one pass over the weights), plus one
 * prefill chunk of one slot that is reading its prompt, so a long prompt
 * neither stalls the streams in flight nor delays a cancel for long.
 */
#ifndef MU_SERVE_SCHED_H
#define MU_SERVE_SCHED_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "muser.h"
#include "serve/request.h"
#include "util/buf.h"

typedef struct srv_job {
    srv_request req;
    muser_token *prompt; /* [n_prompt] */
    int n_prompt;
    char id[48];         /* chatcmpl-... / cmpl-...                  */
    int64_t created;     /* unix seconds                            */
    double enqueued_at;  /* monotonic seconds                       */
    /* Shared between the HTTP thread and the worker, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    mu_buf out;        /* response bytes not yet taken by the HTTP side */
    bool done;           /* no more bytes will come                 */
    int status;          /* HTTP status of a non-streaming response */
    int refs;
    atomic_bool cancelled; /* the client went away: stop and free the slot */
    atomic_int generated;  /* tokens generated so far (the request log)    */
    struct srv_job *next;  /* queue link (scheduler lock)               */
} srv_job;

typedef struct srv_sched srv_sched;

typedef struct srv_sched_config {
    const muser_model *model;
    muser_session_params session; /* for every slot */
    int n_slots;                  /* --parallel                         */
    int queue_cap;                /* waiting jobs before 429            */
    int n_checkpoints;            /* ring checkpoints per slot          */
    const char *model_id;         /* "model" in responses               */
    const muser_drafter *drafter; /* --draft: speculative decoding, or NULL */
    int draft_max;                /* --draft-max (0: the drafter's block - 1) */
} srv_sched_config;

int srv_sched_new(const srv_sched_config *cfg, srv_sched **out);
/* Ends every job (503 "shutting down"), joins the worker; later submits
 * get 503. The HTTP threads may still hold jobs: stop them, then free. */
void srv_sched_stop(srv_sched *s);
void srv_sched_free(srv_sched *s);
/* The context size of the slots. */
int srv_sched_n_ctx(const srv_sched *s);

/* A new job for req (taken over) and its prompt (taken over), one
 * reference held by the caller. */
srv_job *srv_job_new(srv_request *req, muser_token *prompt, int n_prompt);
void srv_job_release(srv_job *j);

/* Enqueues the job (the scheduler takes its own reference). Returns false
 * when the queue is full (answer 429) or the server is stopping. */
bool srv_sched_submit(srv_sched *s, srv_job *j, srv_error *e);
/* The client is gone: a queued job leaves the queue, a running one stops
 * at the worker's next step and frees its slot. */
void srv_sched_cancel(srv_sched *s, srv_job *j);

/* ---- metrics ---------------------------------------------------------------- */

typedef struct srv_metrics {
    atomic_uint_fast64_t requests[8];      /* by srv_route below             */
    atomic_uint_fast64_t errors_4xx, errors_5xx, rejected_429;
    atomic_uint_fast64_t jobs_finished, jobs_cancelled;
    atomic_uint_fast64_t prompt_tokens;    /* prompt tokens of finished jobs  */
    atomic_uint_fast64_t cached_tokens;    /* of which reused from a slot's cache */
    atomic_uint_fast64_t prefill_tokens;   /* tokens actually prefilled        */
    atomic_uint_fast64_t generated_tokens;
    atomic_uint_fast64_t decode_steps, decode_rows;
    atomic_uint_fast64_t prefill_ns, decode_ns;
    atomic_uint_fast64_t spec_steps, spec_drafted, spec_accepted; /* --draft */
} srv_metrics;

enum srv_route { SRV_ROUTE_CHAT, SRV_ROUTE_COMPLETION, SRV_ROUTE_MODELS, SRV_ROUTE_HEALTH, SRV_ROUTE_METRICS,
                 SRV_ROUTE_TOKENIZE, SRV_ROUTE_DETOKENIZE, SRV_ROUTE_TEMPLATE };

srv_metrics *srv_sched_metrics(srv_sched *s);

typedef struct srv_sched_status {
    int n_slots, busy_slots, queued;
    double decode_tps_recent; /* generated tokens per second over the last 10 s */
} srv_sched_status;
void srv_sched_get_status(srv_sched *s, srv_sched_status *st);

#endif
