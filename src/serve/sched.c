/* sched.c — the job queue, the slots, and the inference worker (sched.h).
 *
 * A slot is one muser_session with ring checkpoints on. It keeps the
 * tokens of its last conversation after the job ends, so a request is sent
 * to the free slot whose tokens share the longest prefix with its prompt
 * (ties: the least recently used), and muser_session_sync_begin keeps that
 * prefix: a second turn prefills only what is new.
 */
#include "serve/sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/pool.h"
#include "serve/response.h"
#include "serve/sample_pool.h"
#include "util/clock.h"

enum slot_state {
    SLOT_IDLE,    /* no job; the session keeps its tokens for reuse   */
    SLOT_NEW,     /* admitted, not started                            */
    SLOT_PREFILL, /* reading the prompt, a chunk per worker step      */
    SLOT_DECODE,  /* `next` waits to be fed in the next batched step  */
};

typedef struct srv_slot {
    int index;
    muser_session *session;
    srv_job *job;
    enum slot_state state;
    uint64_t last_used, admitted; /* scheduler ticks                  */
    int kept;                     /* prompt tokens reused from the cache */
    int fed;                      /* prompt tokens held so far        */
    int generated;
    muser_token next;
    muser_sampler *sampler;
    muser_detok *detok;
    srv_output output;
    muser_token *script; /* test hook: tokens that replace sampling */
    int n_script, script_pos;
    bool drafter_on;     /* the session has the server's drafter (--draft) */
} srv_slot;

#define RECENT_SECONDS 10

struct srv_sched {
    srv_sched_config cfg;
    int n_vocab, n_ctx, prefill_chunk;
    srv_slot *slots;
    pthread_t worker;
    bool worker_started;
    pthread_mutex_t mu; /* guards the fields below and slot->job/state changes seen by others */
    pthread_cond_t wake;
    srv_job *queue_head, *queue_tail;
    int queued, busy;
    bool stopping;
    uint64_t tick;
    int64_t recent_sec[RECENT_SECONDS + 1]; /* per-second generated-token buckets */
    uint64_t recent_tokens[RECENT_SECONDS + 1];
    /* worker only */
    srv_sample_pool *sampling;     /* the step's slots drawn on several threads */
    srv_sample_job *sample_jobs;   /* [n_slots] */
    muser_session **batch_sessions;
    muser_token *batch_tokens;
    muser_token *batch_next; /* [n_slots] the greedy batch's choices */
    muser_logit_bias *batch_bias; /* [n_slots] the top batch's logit_bias per slot */
    float *top_vals;       /* [n_slots][MUSER_TOP_MAX] the top batch's candidates: logits after the bias */
    muser_token *top_ids;  /* [n_slots][MUSER_TOP_MAX] ... and their ids */
    srv_slot **batch_slots;
    srv_metrics metrics;
};

/* ---- jobs -------------------------------------------------------------------------------- */

srv_job *srv_job_new(srv_request *req, muser_token *prompt, int n_prompt) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->req = *req;
    memset(req, 0, sizeof *req);
    j->prompt = prompt;
    j->n_prompt = n_prompt;
    j->created = (int64_t)time(NULL);
    j->enqueued_at = mu_now_seconds();
    j->status = 200;
    j->refs = 1;
    srv_make_id(j->id, sizeof j->id, j->req.kind == SRV_CHAT ? "chatcmpl-" : "cmpl-");
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    return j;
}

void srv_job_release(srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    srv_request_free(&j->req);
    free(j->prompt);
    mu_buf_free(&j->out);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* Hands bytes to the HTTP side; done: nothing more will come. */
static void deliver(srv_job *j, mu_buf *bytes, bool done, int status) {
    pthread_mutex_lock(&j->mu);
    if (bytes && bytes->len) mu_buf_put(&j->out, bytes->data, bytes->len);
    if (done) {
        j->done = true;
        j->status = status;
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (bytes) mu_buf_free(bytes);
}

/* Ends a job that never ran (queue full at shutdown) or failed. */
static void deliver_error(srv_job *j, const srv_error *e) {
    mu_buf b = {0};
    if (j->req.stream) {
        mu_buf_puts(&b, "data: ");
        srv_error_json(&b, e);
        mu_buf_puts(&b, "\n\n");
    } else {
        srv_error_json(&b, e);
    }
    deliver(j, &b, true, e->status);
}

/* ---- queue --------------------------------------------------------------------------------- */

bool srv_sched_submit(srv_sched *s, srv_job *j, srv_error *e) {
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        srv_fail(e, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
        return false;
    }
    int free_slots = s->cfg.n_slots - s->busy;
    if (s->queued - free_slots >= s->cfg.queue_cap) {
        int queued = s->queued;
        pthread_mutex_unlock(&s->mu);
        srv_fail(e, 429, "rate_limit_error", "queue_full", NULL,
                 "the server is busy: %d slot%s generating and %d request%s waiting; retry later", s->cfg.n_slots,
                 s->cfg.n_slots == 1 ? " is" : "s are", queued, queued == 1 ? " is" : "s are");
        return false;
    }
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    j->next = NULL;
    if (s->queue_tail) s->queue_tail->next = j;
    else s->queue_head = j;
    s->queue_tail = j;
    s->queued++;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    return true;
}

/* Removes j from the queue (lock held); true if it was there. */
static bool unqueue(srv_sched *s, srv_job *j) {
    srv_job **link = &s->queue_head, *prev = NULL;
    while (*link && *link != j) {
        prev = *link;
        link = &(*link)->next;
    }
    if (!*link) return false;
    *link = j->next;
    if (s->queue_tail == j) s->queue_tail = prev;
    s->queued--;
    return true;
}

void srv_sched_cancel(srv_sched *s, srv_job *j) {
    atomic_store(&j->cancelled, true);
    pthread_mutex_lock(&s->mu);
    bool was_queued = unqueue(s, j);
    pthread_cond_signal(&s->wake); /* the worker drops a running job at its next step */
    pthread_mutex_unlock(&s->mu);
    if (was_queued) {
        atomic_fetch_add(&s->metrics.jobs_cancelled, 1);
        deliver(j, NULL, true, 499);
        srv_job_release(j); /* the scheduler's reference */
    }
}

/* ---- slots ------------------------------------------------------------------------------------ */

static int common_prefix(const muser_token *a, int na, const muser_token *b, int nb) {
    int n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* Moves queued jobs into free slots (lock held): the slot sharing the
 * longest prefix with the prompt, ties to the least recently used. */
static void admit(srv_sched *s) {
    while (s->queue_head && s->busy < s->cfg.n_slots) {
        srv_job *j = s->queue_head;
        unqueue(s, j);
        srv_slot *best = NULL;
        int best_common = -1;
        for (int i = 0; i < s->cfg.n_slots; i++) {
            srv_slot *sl = &s->slots[i];
            if (sl->job) continue;
            int c = common_prefix(muser_session_tokens(sl->session), muser_session_pos(sl->session), j->prompt,
                                  j->n_prompt);
            if (c > best_common || (c == best_common && sl->last_used < best->last_used)) {
                best = sl;
                best_common = c;
            }
        }
        best->job = j;
        best->state = SLOT_NEW;
        best->admitted = ++s->tick;
        s->busy++;
    }
}

static void release_slot(srv_sched *s, srv_slot *sl) {
    srv_job *j = sl->job;
    muser_sampler_free(sl->sampler);
    muser_detok_free(sl->detok);
    srv_output_free(&sl->output);
    free(sl->script);
    sl->sampler = NULL;
    sl->detok = NULL;
    sl->script = NULL;
    sl->n_script = sl->script_pos = 0;
    pthread_mutex_lock(&s->mu);
    sl->job = NULL;
    sl->state = SLOT_IDLE;
    sl->last_used = ++s->tick;
    s->busy--;
    pthread_mutex_unlock(&s->mu);
    srv_job_release(j);
}

static void fail_slot(srv_sched *s, srv_slot *sl, int status, const char *type, const char *fmt, const char *detail) {
    srv_error e;
    srv_fail(&e, status, type, NULL, NULL, fmt, detail);
    deliver_error(sl->job, &e);
    atomic_fetch_add(status >= 500 ? &s->metrics.errors_5xx : &s->metrics.errors_4xx, 1);
    /* A failed feed may leave the session anywhere: start it afresh. */
    muser_session_reset(sl->session);
    release_slot(s, sl);
}

static void count_recent(srv_sched *s, uint64_t tokens) {
    int64_t sec = (int64_t)mu_now_seconds();
    int b = (int)(sec % (RECENT_SECONDS + 1));
    pthread_mutex_lock(&s->mu);
    if (s->recent_sec[b] != sec) {
        s->recent_sec[b] = sec;
        s->recent_tokens[b] = 0;
    }
    s->recent_tokens[b] += tokens;
    pthread_mutex_unlock(&s->mu);
}

/* Ends the output, hands the rest to the client, frees the slot. */
static void finish(srv_sched *s, srv_slot *sl, srv_finish why) {
    mu_buf out = {0};
    if (!sl->output.stopper.matched) {
        const char *rest = muser_detok_flush(sl->detok);
        if (rest && *rest) srv_output_push(&sl->output, rest, &out);
    }
    srv_output_finish(&sl->output, why, sl->job->n_prompt, sl->kept, sl->generated, &out);
    /* Count before the client can read the answer and then the metrics. */
    atomic_fetch_add(&s->metrics.jobs_finished, 1);
    atomic_fetch_add(&s->metrics.prompt_tokens, (uint64_t)sl->job->n_prompt);
    atomic_fetch_add(&s->metrics.cached_tokens, (uint64_t)sl->kept);
    if (out.oom) {
        srv_error e;
        srv_fail(&e, 500, "server_error", NULL, NULL, "out of memory writing the response");
        mu_buf_free(&out);
        deliver_error(sl->job, &e);
    } else {
        deliver(sl->job, &out, true, 200);
    }
    release_slot(s, sl);
}

static void show_token(srv_sched *s, srv_slot *sl, muser_token t);

/* The session holds fresh logits: choose the next token and show it. */
/* The slot's sampling job: its logits and its request's logit_bias. */
static srv_sample_job sample_job(srv_slot *sl) {
    const srv_request *r = &sl->job->req;
    return (srv_sample_job){.sampler = sl->sampler, .logits = muser_session_logits(sl->session),
                            .bias_ids = r->bias_ids, .bias = r->bias, .n_bias = r->n_bias};
}

/* The slot's next token: its test script's, else `drawn` (its sampling
 * job's result). */
static void next_token(srv_sched *s, srv_slot *sl, muser_token drawn) {
    muser_token t = drawn;
    if (sl->script) {
        if (sl->script_pos == sl->n_script) {
            finish(s, sl, SRV_FINISH_STOP); /* the scripted output ends as an end-of-generation token would */
            return;
        }
        t = sl->script[sl->script_pos++];
    }
    show_token(s, sl, t);
}

/* t is the slot's next token: the end, or text for the client and the
 * token the next step feeds. */
static void show_token(srv_sched *s, srv_slot *sl, muser_token t) {
    const srv_request *r = &sl->job->req;
    if (muser_vocab_is_eog(s->cfg.model, t)) {
        finish(s, sl, SRV_FINISH_STOP);
        return;
    }
    sl->generated++;
    atomic_store(&sl->job->generated, sl->generated);
    mu_buf sse = {0};
    bool stopped = srv_output_push(&sl->output, muser_detok_push(sl->detok, t), &sse);
    if (sse.len) deliver(sl->job, &sse, false, 0);
    mu_buf_free(&sse);
    if (stopped) finish(s, sl, SRV_FINISH_STOP);
    else if ((r->max_tokens >= 0 && sl->generated >= r->max_tokens) || muser_session_pos(sl->session) >= s->n_ctx)
        finish(s, sl, SRV_FINISH_LENGTH);
    else {
        sl->next = t;
        sl->state = SLOT_DECODE;
    }
}

static void prompt_done(srv_sched *s, srv_slot *sl) {
    atomic_fetch_add(&s->metrics.prefill_tokens, (uint64_t)(sl->job->n_prompt - sl->kept));
    srv_sample_job j = {0};
    if (!sl->script) {
        j = sample_job(sl);
        srv_sample_pool_run(s->sampling, &j, 1);
    }
    next_token(s, sl, j.out);
}

static void start_job(srv_sched *s, srv_slot *sl) {
    srv_job *j = sl->job;
    srv_request *r = &j->req;
    muser_sampler_params sp = r->sampling;
    if (!r->seed_given) sp.seed = muser_seed_random();
    sl->sampler = muser_sampler_new(&sp, s->n_vocab);
    sl->detok = muser_detok_new(s->cfg.model, r->kind == SRV_CHAT); /* chat: tags must reach the parser */
    if (!sl->sampler || !sl->detok ||
        srv_output_init(&sl->output, r, j->id, s->cfg.model_id, j->created) != 0) {
        fail_slot(s, sl, 500, "server_error", "cannot start the generation: %s", muser_last_error());
        return;
    }
    sl->generated = 0;
    if (r->test_script) {
        const char *text = r->test_script;
        int n = muser_tokenize(s->cfg.model, text, strlen(text), false, true, NULL, 0);
        sl->script = malloc(sizeof(muser_token) * (size_t)(n > 0 ? n : 1));
        if (n < 0 || !sl->script) {
            fail_slot(s, sl, 500, "server_error", "cannot tokenize the test script: %s", muser_last_error());
            return;
        }
        sl->n_script = muser_tokenize(s->cfg.model, text, strlen(text), false, true, sl->script, n);
        sl->script_pos = 0;
    }
    int kept = 0;
    if (muser_session_sync_begin(sl->session, j->prompt, j->n_prompt, &kept) != MUSER_OK) {
        fail_slot(s, sl, 500, "server_error", "cannot place the prompt: %s", muser_last_error());
        return;
    }
    sl->kept = sl->fed = kept;
    if (kept == j->n_prompt) prompt_done(s, sl);
    else sl->state = SLOT_PREFILL;
}

static void prefill_step(srv_sched *s, srv_slot *sl) {
    srv_job *j = sl->job;
    int n = j->n_prompt - sl->fed;
    if (n > s->prefill_chunk) n = s->prefill_chunk;
    uint64_t t0 = mu_now_ns();
    int rc = muser_session_feed(sl->session, j->prompt + sl->fed, n, false);
    atomic_fetch_add(&s->metrics.prefill_ns, mu_now_ns() - t0);
    if (rc != MUSER_OK) {
        fail_slot(s, sl, 500, "server_error", "prefill failed: %s", muser_last_error());
        return;
    }
    sl->fed += n;
    if (sl->fed == j->n_prompt) {
        muser_session_sync_end(sl->session);
        prompt_done(s, sl);
    }
}

/* A speculative step for a slot with a drafter (--draft): its session
 * drafts, verifies and commits; every token it brings is shown in turn
 * until the output ends. Requests the sampler alone cannot serve (logit
 * biases, test scripts) take the plain batched step. */
static bool spec_slot(const srv_slot *sl) { return sl->drafter_on && !sl->script && sl->job->req.n_bias == 0; }

static void spec_step(srv_sched *s, srv_slot *sl) {
    const srv_request *r = &sl->job->req;
    muser_token out[256];
    int got = 0, max_new = 256;
    if (r->max_tokens >= 0 && r->max_tokens - sl->generated < max_new) max_new = r->max_tokens - sl->generated;
    muser_spec_stats a, b;
    muser_session_spec_stats(sl->session, &a);
    const uint64_t t0 = mu_now_ns();
    int rc = muser_session_spec_step(sl->session, sl->next, sl->sampler, max_new > 0 ? max_new : 1, out, &got);
    atomic_fetch_add(&s->metrics.decode_ns, mu_now_ns() - t0);
    if (rc != MUSER_OK) {
        fail_slot(s, sl, 500, "server_error", "decode failed: %s", muser_last_error());
        return;
    }
    muser_session_spec_stats(sl->session, &b);
    atomic_fetch_add(&s->metrics.spec_steps, b.steps - a.steps);
    atomic_fetch_add(&s->metrics.spec_drafted, b.drafted - a.drafted);
    atomic_fetch_add(&s->metrics.spec_accepted, b.accepted - a.accepted);
    atomic_fetch_add(&s->metrics.decode_steps, 1);
    atomic_fetch_add(&s->metrics.decode_rows, 1);
    atomic_fetch_add(&s->metrics.generated_tokens, (uint64_t)got);
    count_recent(s, (uint64_t)got);
    for (int i = 0; i < got && sl->job && sl->state == SLOT_DECODE; i++) show_token(s, sl, out[i]);
}

/* Whether the slot's next token is the plain argmax of its logits (greedy,
 * no penalties, no logit_bias; a test script ignores them): a batch of only
 * such slots has its choices made where the logits are. */
static bool plain_greedy(const srv_slot *sl) {
    const srv_request *r = &sl->job->req;
    const muser_sampler_params *p = &r->sampling;
    return sl->script || (p->temperature <= 0.0f && r->n_bias == 0 && p->repeat_penalty == 1.0f &&
                          p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f);
}

/* How many of its top logits the slot's next token depends on (a test
 * script: the choice is ignored, one will do); 0: its full logits. */
static int top_needed(const srv_slot *sl) { return sl->script ? 1 : muser_sampler_top_candidates(sl->sampler); }

/* The step's sampling jobs, every slot's token drawn before any slot's
 * text goes out; with top lists (k of them a slot, the bias already in
 * them) in place of the sessions' logits when top_k > 0. */
static void draw_step(srv_sched *s, int n, int top_k) {
    int drawn = 0;
    for (int i = 0; i < n; i++) {
        srv_slot *sl = s->batch_slots[i];
        if (sl->script) continue;
        s->sample_jobs[drawn++] = top_k > 0 ? (srv_sample_job){.sampler = sl->sampler,
                                                                .top_logits = s->top_vals + (size_t)i * top_k,
                                                                .top_ids = s->top_ids + (size_t)i * top_k,
                                                                .n_top = top_k}
                                            : sample_job(sl);
    }
    srv_sample_pool_run(s->sampling, s->sample_jobs, drawn);
    for (int i = 0, k = 0; i < n; i++) {
        srv_slot *sl = s->batch_slots[i];
        const muser_token t = sl->script ? 0 : s->sample_jobs[k++].out;
        if (t < 0) fail_slot(s, sl, 500, "server_error", "sampling failed: %s", "too few top logits for its draw");
        else next_token(s, sl, t);
    }
}

/* One decode step for every generating slot, as one batch: the choices
 * of an all-greedy batch made where the logits are, a batch whose every
 * draw depends only on its top logits (top-k sampling without penalties)
 * handed those back, any other the sessions' full logits. */
static void decode_step(srv_sched *s) {
    int n = 0;
    for (int i = 0; i < s->cfg.n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->job && sl->state == SLOT_DECODE && spec_slot(sl)) {
            spec_step(s, sl);
            continue;
        }
        if (sl->job && sl->state == SLOT_DECODE) {
            s->batch_slots[n] = sl;
            s->batch_sessions[n] = sl->session;
            s->batch_tokens[n] = sl->next;
            n++;
        }
    }
    if (n == 0) return;
    bool greedy = true;
    for (int i = 0; i < n && greedy; i++) greedy = plain_greedy(s->batch_slots[i]);
    int top_k = 0; /* the most top logits a slot needs; 0: some slot needs its full logits */
    for (int i = 0; i < n && !greedy; i++) {
        const int k = top_needed(s->batch_slots[i]);
        if (k < 1 || k > MUSER_TOP_MAX) {
            top_k = 0;
            break;
        }
        if (k > top_k) top_k = k;
    }
    for (int i = 0; i < n && top_k > 0; i++) {
        const srv_request *r = &s->batch_slots[i]->job->req;
        s->batch_bias[i] = (muser_logit_bias){r->bias_ids, r->bias, r->n_bias};
    }
    uint64_t t0 = mu_now_ns();
    int rc = greedy    ? muser_batch_decode_greedy(s->batch_sessions, s->batch_tokens, n, s->batch_next)
             : top_k ? muser_batch_decode_top(s->batch_sessions, s->batch_tokens, n, s->batch_bias, top_k,
                                                s->top_vals, s->top_ids)
                       : muser_batch_decode(s->batch_sessions, s->batch_tokens, n);
    atomic_fetch_add(&s->metrics.decode_ns, mu_now_ns() - t0);
    if (rc != MUSER_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", muser_last_error());
        for (int i = 0; i < n; i++) fail_slot(s, s->batch_slots[i], 500, "server_error", "decode failed: %s", msg);
        return;
    }
    atomic_fetch_add(&s->metrics.decode_steps, 1);
    atomic_fetch_add(&s->metrics.decode_rows, (uint64_t)n);
    atomic_fetch_add(&s->metrics.generated_tokens, (uint64_t)n);
    count_recent(s, (uint64_t)n);
    if (greedy) { /* (the sampler still hears each choice, as its own draw would) */
        for (int i = 0; i < n; i++) {
            srv_slot *sl = s->batch_slots[i];
            if (!sl->script) muser_sampler_accept(sl->sampler, s->batch_next[i]);
        }
        for (int i = 0; i < n; i++) next_token(s, s->batch_slots[i], s->batch_next[i]);
        return;
    }
    draw_step(s, n, top_k);
}

static void step(srv_sched *s, bool stopping) {
    for (int i = 0; i < s->cfg.n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (!sl->job) continue;
        if (stopping) {
            fail_slot(s, sl, 503, "server_error", "%s", "the server is shutting down");
        } else if (atomic_load(&sl->job->cancelled)) {
            atomic_fetch_add(&s->metrics.jobs_cancelled, 1);
            deliver(sl->job, NULL, true, 499);
            release_slot(s, sl);
        } else if (sl->state == SLOT_NEW) {
            start_job(s, sl);
        }
    }
    decode_step(s);
    /* One prefill chunk per step, oldest admission first. */
    srv_slot *oldest = NULL;
    for (int i = 0; i < s->cfg.n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->job && sl->state == SLOT_PREFILL && (!oldest || sl->admitted < oldest->admitted)) oldest = sl;
    }
    if (oldest) prefill_step(s, oldest);
}

static void *worker_main(void *arg) {
    srv_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->stopping) {
            /* Queued jobs never start; running ones end in step(). */
            while (s->queue_head) {
                srv_job *j = s->queue_head;
                unqueue(s, j);
                pthread_mutex_unlock(&s->mu);
                srv_error e;
                srv_fail(&e, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
                deliver_error(j, &e);
                srv_job_release(j);
                pthread_mutex_lock(&s->mu);
            }
            if (s->busy == 0) break;
        } else {
            admit(s);
        }
        if (s->busy == 0) {
            pthread_cond_wait(&s->wake, &s->mu);
            continue;
        }
        bool stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        step(s, stopping);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- lifecycle ------------------------------------------------------------------------------------ */

int srv_sched_new(const srv_sched_config *cfg, srv_sched **out) {
    *out = NULL;
    srv_sched *s = calloc(1, sizeof *s);
    if (!s) return MUSER_ENOMEM;
    s->cfg = *cfg;
    s->n_vocab = muser_vocab_size(cfg->model);
    s->prefill_chunk = cfg->session.n_batch > 0 ? cfg->session.n_batch : 512;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    s->slots = calloc((size_t)cfg->n_slots, sizeof *s->slots);
    s->sample_jobs = calloc((size_t)cfg->n_slots, sizeof *s->sample_jobs);
    s->batch_sessions = calloc((size_t)cfg->n_slots, sizeof *s->batch_sessions);
    s->batch_tokens = calloc((size_t)cfg->n_slots, sizeof *s->batch_tokens);
    s->batch_next = calloc((size_t)cfg->n_slots, sizeof *s->batch_next);
    s->batch_slots = calloc((size_t)cfg->n_slots, sizeof *s->batch_slots);
    s->batch_bias = calloc((size_t)cfg->n_slots, sizeof *s->batch_bias);
    s->top_vals = calloc((size_t)cfg->n_slots * MUSER_TOP_MAX, sizeof *s->top_vals);
    s->top_ids = calloc((size_t)cfg->n_slots * MUSER_TOP_MAX, sizeof *s->top_ids);
    int rc = (s->slots && s->sample_jobs && s->batch_sessions && s->batch_tokens && s->batch_next && s->batch_slots &&
              s->batch_bias && s->top_vals && s->top_ids)
                 ? 0
                 : MUSER_ENOMEM;
    if (!rc) { /* a helper per further slot, up to the cores but one (the worker samples too) and 7 */
        int helpers = cfg->n_slots - 1;
        if (helpers > mu_cpu_count() - 1) helpers = mu_cpu_count() - 1;
        if (helpers > 7) helpers = 7;
        rc = srv_sample_pool_new(helpers, s->n_vocab, &s->sampling);
    }
    for (int i = 0; i < cfg->n_slots && !rc; i++) {
        s->slots[i].index = i;
        rc = muser_session_new(cfg->model, &cfg->session, &s->slots[i].session);
        if (!rc) muser_session_set_checkpoints(s->slots[i].session, cfg->n_checkpoints);
        if (!rc && cfg->drafter) rc = muser_session_set_drafter(s->slots[i].session, cfg->drafter, cfg->draft_max);
        s->slots[i].drafter_on = !rc && cfg->drafter;
    }
    if (!rc) s->n_ctx = muser_session_n_ctx(s->slots[0].session);
    if (!rc && pthread_create(&s->worker, NULL, worker_main, s) != 0) rc = MUSER_ENOMEM;
    s->worker_started = rc == 0;
    if (rc) {
        srv_sched_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void srv_sched_stop(srv_sched *s) {
    if (!s->worker_started) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->worker, NULL);
    s->worker_started = false;
}

void srv_sched_free(srv_sched *s) {
    if (!s) return;
    srv_sched_stop(s);
    for (int i = 0; s->slots && i < s->cfg.n_slots; i++) muser_session_free(s->slots[i].session);
    free(s->slots);
    srv_sample_pool_free(s->sampling);
    free(s->sample_jobs);
    free(s->batch_sessions);
    free(s->batch_tokens);
    free(s->batch_next);
    free(s->batch_slots);
    free(s->batch_bias);
    free(s->top_vals);
    free(s->top_ids);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    free(s);
}

int srv_sched_n_ctx(const srv_sched *s) { return s->n_ctx; }

srv_metrics *srv_sched_metrics(srv_sched *s) { return &s->metrics; }

void srv_sched_get_status(srv_sched *s, srv_sched_status *st) {
    pthread_mutex_lock(&s->mu);
    st->n_slots = s->cfg.n_slots;
    st->busy_slots = s->busy;
    st->queued = s->queued;
    int64_t sec = (int64_t)mu_now_seconds();
    uint64_t tokens = 0;
    for (int b = 0; b <= RECENT_SECONDS; b++)
        if (s->recent_sec[b] < sec && s->recent_sec[b] >= sec - RECENT_SECONDS) tokens += s->recent_tokens[b];
    pthread_mutex_unlock(&s->mu);
    st->decode_tps_recent = (double)tokens / RECENT_SECONDS;
}
