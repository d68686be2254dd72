/* http.c — libmicrohttpd glue: routes, bodies, streaming, errors (serve.h).
 *
 * Thread-per-connection mode: a connection's thread may block in the
 * handler (non-streaming) or in the content reader (streaming) while the
 * worker generates. Both waits wake every 200 ms to look at the socket, so
 * a client that hangs up is noticed even while no bytes are flowing, and
 * its job is cancelled at once.
 */
#define _GNU_SOURCE /* POLLRDHUP */
#include "serve/serve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve/request.h"
#include "serve/response.h"
#include "serve/sched.h"
#include "text/utf8.h"
#include "util/clock.h"
#include "util/error.h"

struct srv_server {
    srv_config cfg;
    srv_parse_opts parse_opts;
    srv_sched *sched;
    struct MHD_Daemon *daemon;
    int port;
    int64_t created;
    double started_at;
    atomic_int in_flight; /* requests between their first byte and their last */
};

/* What the request log line names. */
typedef struct req_log {
    char method[8], path[96];
    double t0;                     /* monotonic seconds at the headers */
    int prompt_tokens, completion_tokens; /* -1: not a generation  */
} req_log;

/* One request's state across the handler calls. */
typedef struct conn_req {
    mu_buf body;
    bool too_large;
    bool streamed; /* the stream's end logs the request, not on_completed */
    req_log log;
} conn_req;

/* One line per request on stderr unless --quiet: method, path, status,
 * tokens in and out, milliseconds. */
static void log_request(const srv_server *srv, const req_log *l, int status, const char *note) {
    if (srv->cfg.quiet) return;
    const double ms = 1e3 * (mu_now_seconds() - l->t0);
    if (l->prompt_tokens >= 0)
        fprintf(stderr, "muser serve: %s %s %d, %d prompt + %d completion tokens, %.0f ms%s\n", l->method, l->path,
                status, l->prompt_tokens, l->completion_tokens, ms, note);
    else
        fprintf(stderr, "muser serve: %s %s %d, %.0f ms%s\n", l->method, l->path, status, ms, note);
}

/* ---- replies ----------------------------------------------------------------------- */

static void free_buffer(void *p) { free(p); }

static enum MHD_Result send_bytes(struct MHD_Connection *c, int status, const char *type, char *data, size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, data, free_buffer);
    if (!r) {
        free(data);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 429) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

/* Sends b's bytes (taken over) as JSON. */
static enum MHD_Result send_json(struct MHD_Connection *c, int status, mu_buf *b) {
    if (b->oom) {
        mu_buf_free(b);
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                                  "\"code\":null}}";
        char *copy = strdup(oom);
        return copy ? send_bytes(c, 500, "application/json", copy, strlen(copy)) : MHD_NO;
    }
    size_t len = b->len;
    char *data = mu_buf_take(b);
    return data ? send_bytes(c, status, "application/json", data, len) : MHD_NO;
}

static enum MHD_Result send_error(srv_server *srv, struct MHD_Connection *c, const srv_error *e) {
    srv_metrics *m = srv_sched_metrics(srv->sched);
    if (e->status == 429) atomic_fetch_add(&m->rejected_429, 1);
    else if (e->status >= 500) atomic_fetch_add(&m->errors_5xx, 1);
    else atomic_fetch_add(&m->errors_4xx, 1);
    mu_buf b = {0};
    srv_error_json(&b, e);
    return send_json(c, e->status, &b);
}

/* ---- waiting for the worker ------------------------------------------------------------- */

static int connection_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* The peer closed or reset the connection. */
static bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Waits (job lock held) until the job has bytes past `taken` or is done.
 * Returns false if the client went away meanwhile. */
static bool wait_for_output(srv_job *j, size_t taken, int fd) {
    while (j->out.len == taken && !j->done) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_nsec += 200 * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;
        if (pthread_cond_timedwait(&j->cv, &j->mu, &deadline) == ETIMEDOUT && client_gone(fd)) return false;
    }
    return true;
}

typedef struct stream_ctx {
    srv_server *srv;
    srv_job *job;
    size_t taken; /* bytes of job->out already sent */
    int fd;
    req_log log;  /* (the request's own state is gone when the stream ends) */
} stream_ctx;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ctx *sc = cls;
    srv_job *j = sc->job;
    pthread_mutex_lock(&j->mu);
    if (!wait_for_output(j, sc->taken, sc->fd)) {
        pthread_mutex_unlock(&j->mu);
        return MHD_CONTENT_READER_END_WITH_ERROR; /* the free callback cancels the job */
    }
    size_t avail = j->out.len - sc->taken;
    if (avail == 0) {
        pthread_mutex_unlock(&j->mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = avail < max ? avail : max;
    memcpy(buf, j->out.data + sc->taken, n);
    sc->taken += n;
    if (sc->taken == j->out.len) sc->taken = j->out.len = 0; /* all sent: reuse the buffer */
    pthread_mutex_unlock(&j->mu);
    return (ssize_t)n;
}

/* MHD is done with the stream: finished, or the connection died. */
static void stream_free(void *cls) {
    stream_ctx *sc = cls;
    pthread_mutex_lock(&sc->job->mu);
    bool done = sc->job->done;
    pthread_mutex_unlock(&sc->job->mu);
    if (!done) srv_sched_cancel(sc->srv->sched, sc->job);
    sc->log.completion_tokens = atomic_load(&sc->job->generated);
    log_request(sc->srv, &sc->log, 200, done ? "" : " (stopped: the client went away)");
    srv_job_release(sc->job);
    free(sc);
}

/* Parses, tokenizes, enqueues, and answers (streaming or not). */
static enum MHD_Result handle_generation(srv_server *srv, struct MHD_Connection *c, conn_req *cr, srv_kind kind) {
    srv_request r;
    srv_error e;
    const char *body = cr->body.data ? cr->body.data : "";
    int rc = kind == SRV_CHAT ? srv_parse_chat(body, cr->body.len, &srv->parse_opts, &r, &e)
                              : srv_parse_completion(body, cr->body.len, &srv->parse_opts, &r, &e);
    if (rc) return send_error(srv, c, &e);
    if (r.model && strcmp(r.model, srv->cfg.model_id) != 0 &&
        !(srv->cfg.model_path && strcmp(r.model, srv->cfg.model_path) == 0)) {
        srv_fail(&e, 404, "invalid_request_error", "model_not_found", "model",
                 "the model '%.200s' does not exist here; this server serves '%.200s' (GET /v1/models)", r.model,
                 srv->cfg.model_id);
        srv_request_free(&r);
        return send_error(srv, c, &e);
    }
    muser_token *prompt = NULL;
    int n_prompt = 0;
    if (srv_request_tokenize(srv->cfg.model, &r, srv_sched_n_ctx(srv->sched), &prompt, &n_prompt, &e)) {
        srv_request_free(&r);
        return send_error(srv, c, &e);
    }
    srv_job *j = srv_job_new(&r, prompt, n_prompt);
    if (!j) {
        srv_request_free(&r);
        free(prompt);
        srv_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        return send_error(srv, c, &e);
    }
    if (!srv_sched_submit(srv->sched, j, &e)) {
        srv_job_release(j);
        return send_error(srv, c, &e);
    }
    int fd = connection_fd(c);
    cr->log.prompt_tokens = n_prompt;
    if (j->req.stream) {
        stream_ctx *sc = calloc(1, sizeof *sc);
        struct MHD_Response *resp =
            sc ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, sc, stream_free) : NULL;
        if (!resp) {
            free(sc);
            srv_sched_cancel(srv->sched, j);
            srv_job_release(j);
            return MHD_NO;
        }
        *sc = (stream_ctx){srv, j, 0, fd, cr->log};
        cr->streamed = true;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp); /* the free callback releases the job */
        return ok;
    }
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        if (!wait_for_output(j, j->out.len, fd)) {
            pthread_mutex_unlock(&j->mu);
            srv_sched_cancel(srv->sched, j);
            srv_job_release(j);
            return MHD_NO; /* nobody to answer */
        }
    }
    mu_buf out = j->out;
    memset(&j->out, 0, sizeof j->out);
    int status = j->status;
    cr->log.completion_tokens = atomic_load(&j->generated);
    pthread_mutex_unlock(&j->mu);
    srv_job_release(j);
    return send_json(c, status, &out);
}

/* ---- utility endpoints ---------------------------------------------------------------------- */

static enum MHD_Result handle_models(srv_server *srv, struct MHD_Connection *c) {
    muser_model_info info;
    muser_model_get_info(srv->cfg.model, &info);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "data"), m);
    cJSON_AddStringToObject(m, "id", srv->cfg.model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)srv->created);
    cJSON_AddStringToObject(m, "owned_by", "muser");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddStringToObject(meta, "arch", info.arch);
    cJSON_AddStringToObject(meta, "name", info.name);
    cJSON_AddNumberToObject(meta, "n_vocab", info.n_vocab);
    cJSON_AddNumberToObject(meta, "n_ctx_train", info.n_ctx_train);
    cJSON_AddNumberToObject(meta, "n_ctx", srv_sched_n_ctx(srv->sched));
    cJSON_AddNumberToObject(meta, "n_embd", info.n_embd);
    cJSON_AddNumberToObject(meta, "size", (double)info.file_bytes);
    mu_buf b = {0};
    srv_json_put(&b, root);
    return send_json(c, 200, &b);
}

static enum MHD_Result handle_health(srv_server *srv, struct MHD_Connection *c) {
    srv_sched_status st;
    srv_sched_get_status(srv->sched, &st);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "status", "ok");
    cJSON_AddNumberToObject(root, "slots_idle", st.n_slots - st.busy_slots);
    cJSON_AddNumberToObject(root, "slots_processing", st.busy_slots);
    cJSON_AddNumberToObject(root, "requests_waiting", st.queued);
    mu_buf b = {0};
    srv_json_put(&b, root);
    return send_json(c, 200, &b);
}

static void metric(mu_buf *b, const char *name, const char *type, const char *help, double value) {
    char line[512];
    snprintf(line, sizeof line, "# HELP muser_%s %s\n# TYPE muser_%s %s\nmuser_%s %.17g\n", name, help, name, type,
             name, value);
    mu_buf_puts(b, line);
}

static enum MHD_Result handle_metrics(srv_server *srv, struct MHD_Connection *c) {
    srv_metrics *m = srv_sched_metrics(srv->sched);
    srv_sched_status st;
    srv_sched_get_status(srv->sched, &st);
    mu_buf b = {0};
    static const char *const routes[] = {"chat_completions", "completions", "models", "health", "metrics",
                                         "tokenize", "detokenize", "apply_template"};
    mu_buf_puts(&b, "# HELP muser_requests_total HTTP requests by endpoint.\n# TYPE muser_requests_total counter\n");
    for (int i = 0; i < 8; i++) {
        char line[128];
        snprintf(line, sizeof line, "muser_requests_total{endpoint=\"%s\"} %llu\n", routes[i],
                 (unsigned long long)atomic_load(&m->requests[i]));
        mu_buf_puts(&b, line);
    }
    metric(&b, "requests_client_errors_total", "counter", "Requests answered with a 4xx status other than 429.",
           (double)atomic_load(&m->errors_4xx));
    metric(&b, "requests_server_errors_total", "counter", "Requests answered with a 5xx status.",
           (double)atomic_load(&m->errors_5xx));
    metric(&b, "requests_rejected_total", "counter", "Requests refused with 429 because the queue was full.",
           (double)atomic_load(&m->rejected_429));
    metric(&b, "generations_finished_total", "counter", "Generations that ran to their end.",
           (double)atomic_load(&m->jobs_finished));
    metric(&b, "generations_cancelled_total", "counter", "Generations stopped because the client went away.",
           (double)atomic_load(&m->jobs_cancelled));
    metric(&b, "prompt_tokens_total", "counter", "Prompt tokens of finished generations (tokens in).",
           (double)atomic_load(&m->prompt_tokens));
    metric(&b, "prompt_tokens_cached_total", "counter", "Prompt tokens reused from a slot's cache, not prefilled.",
           (double)atomic_load(&m->cached_tokens));
    metric(&b, "prompt_tokens_prefilled_total", "counter", "Prompt tokens run through the model.",
           (double)atomic_load(&m->prefill_tokens));
    metric(&b, "completion_tokens_total", "counter", "Generated tokens (tokens out).",
           (double)atomic_load(&m->generated_tokens));
    metric(&b, "prefill_seconds_total", "counter", "Time the worker spent prefilling.",
           (double)atomic_load(&m->prefill_ns) * 1e-9);
    metric(&b, "decode_seconds_total", "counter", "Time the worker spent in batched decode steps.",
           (double)atomic_load(&m->decode_ns) * 1e-9);
    metric(&b, "decode_steps_total", "counter", "Batched decode steps (one pass over the weights each).",
           (double)atomic_load(&m->decode_steps));
    metric(&b, "decode_rows_total", "counter", "Sequences decoded, summed over steps (rows / steps = mean batch).",
           (double)atomic_load(&m->decode_rows));
    {
        /* --draft: speculative decoding */
        const double steps = (double)atomic_load(&m->spec_steps), acc = (double)atomic_load(&m->spec_accepted);
        metric(&b, "spec_steps_total", "counter", "Speculative steps (draft + verify + commit) with drafted tokens.",
               steps);
        metric(&b, "spec_drafted_tokens_total", "counter", "Tokens the drafter proposed.",
               (double)atomic_load(&m->spec_drafted));
        metric(&b, "spec_accepted_tokens_total", "counter", "Drafted tokens the model agreed with.", acc);
        metric(&b, "spec_mean_accepted_length", "gauge",
               "Tokens committed per speculative step, the model's own included ((accepted + steps) / steps).",
               steps > 0 ? (acc + steps) / steps : 0.0);
    }
    metric(&b, "decode_tokens_per_second", "gauge", "Generated tokens per second over the last 10 seconds.",
           st.decode_tps_recent);
    metric(&b, "queue_depth", "gauge", "Requests waiting for a slot.", st.queued);
    metric(&b, "sessions_active", "gauge", "Slots serving a request.", st.busy_slots);
    metric(&b, "slots", "gauge", "Slots (--parallel).", st.n_slots);
    metric(&b, "uptime_seconds", "gauge", "Seconds since the server started.", mu_now_seconds() - srv->started_at);
    size_t len = b.len;
    char *data = b.oom ? NULL : mu_buf_take(&b);
    mu_buf_free(&b);
    if (!data) return MHD_NO;
    return send_bytes(c, 200, "text/plain; version=0.0.4; charset=utf-8", data, len);
}

/* A token's piece: a string when it is valid UTF-8, else its bytes. */
static cJSON *piece_json(const muser_model *m, muser_token t) {
    char small[64];
    int n = muser_token_to_bytes(m, t, true, small, sizeof small);
    char *p = n > 0 && n <= (int)sizeof small ? small : malloc((size_t)(n > 0 ? n : 1));
    if (!p) return cJSON_CreateNull();
    if (p != small && n > 0) muser_token_to_bytes(m, t, true, p, n);
    if (n < 0) n = 0;
    cJSON *v;
    if (mu_utf8_valid(p, (size_t)n) && !memchr(p, 0, (size_t)n)) {
        char *s = malloc((size_t)n + 1);
        if (s) {
            memcpy(s, p, (size_t)n);
            s[n] = 0;
        }
        v = s ? cJSON_CreateString(s) : cJSON_CreateNull();
        free(s);
    } else {
        v = cJSON_CreateArray();
        for (int i = 0; i < n; i++) cJSON_AddItemToArray(v, cJSON_CreateNumber((uint8_t)p[i]));
    }
    if (p != small) free(p);
    return v;
}

static enum MHD_Result handle_tokenize(srv_server *srv, struct MHD_Connection *c, conn_req *cr) {
    srv_error e;
    cJSON *root = NULL;
    if (srv_parse_body(cr->body.data ? cr->body.data : "", cr->body.len, &root, &e)) return send_error(srv, c, &e);
    const char *content = NULL;
    bool add_special = false, parse_special = true, with_pieces = false;
    if (srv_get_string(root, "content", &content, &e) || srv_get_bool(root, "add_special", &add_special, &e) ||
        srv_get_bool(root, "parse_special", &parse_special, &e) ||
        srv_get_bool(root, "with_pieces", &with_pieces, &e)) {
        cJSON_Delete(root);
        return send_error(srv, c, &e);
    }
    if (!content) {
        cJSON_Delete(root);
        srv_bad_param(&e, "content", "'content' (the text to tokenize) is required");
        return send_error(srv, c, &e);
    }
    const muser_model *m = srv->cfg.model;
    size_t len = strlen(content);
    bool bos = add_special && muser_vocab_add_bos(m);
    int n = muser_tokenize(m, content, len, bos, parse_special, NULL, 0);
    muser_token *t = malloc(sizeof(muser_token) * (size_t)(n > 0 ? n : 1));
    if (n < 0 || !t) {
        cJSON_Delete(root);
        free(t);
        srv_fail(&e, n < 0 ? 400 : 500, n < 0 ? "invalid_request_error" : "server_error", NULL, "content",
                 "cannot tokenize: %s", muser_last_error());
        return send_error(srv, c, &e);
    }
    if (n) muser_tokenize(m, content, len, bos, parse_special, t, n);
    cJSON_Delete(root);
    cJSON *out = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(out, "tokens");
    for (int i = 0; i < n; i++) {
        if (!with_pieces) {
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(t[i]));
            continue;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", t[i]);
        cJSON_AddItemToObject(o, "piece", piece_json(m, t[i]));
        cJSON_AddItemToArray(arr, o);
    }
    free(t);
    mu_buf b = {0};
    srv_json_put(&b, out);
    return send_json(c, 200, &b);
}

static enum MHD_Result handle_detokenize(srv_server *srv, struct MHD_Connection *c, conn_req *cr) {
    srv_error e;
    cJSON *root = NULL;
    if (srv_parse_body(cr->body.data ? cr->body.data : "", cr->body.len, &root, &e)) return send_error(srv, c, &e);
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    const int V = muser_vocab_size(srv->cfg.model);
    int bad = !cJSON_IsArray(tokens);
    const cJSON *t;
    cJSON_ArrayForEach(t, tokens) {
        if (!cJSON_IsNumber(t) || t->valuedouble != (double)(int)t->valuedouble || t->valuedouble < 0 ||
            t->valuedouble >= V)
            bad = 1;
    }
    if (bad) {
        cJSON_Delete(root);
        srv_bad_param(&e, "tokens", "'tokens' must be an array of token ids from 0 to %d", V - 1);
        return send_error(srv, c, &e);
    }
    muser_detok *d = muser_detok_new(srv->cfg.model, true);
    mu_buf text = {0};
    cJSON_ArrayForEach(t, tokens) mu_buf_puts(&text, muser_detok_push(d, (muser_token)t->valuedouble));
    mu_buf_puts(&text, muser_detok_flush(d));
    muser_detok_free(d);
    cJSON_Delete(root);
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "content", text.data ? text.data : "");
    mu_buf_free(&text);
    mu_buf b = {0};
    srv_json_put(&b, out);
    return send_json(c, 200, &b);
}

static enum MHD_Result handle_template(srv_server *srv, struct MHD_Connection *c, conn_req *cr) {
    srv_error e;
    cJSON *root = NULL;
    if (srv_parse_body(cr->body.data ? cr->body.data : "", cr->body.len, &root, &e)) return send_error(srv, c, &e);
    char *prompt = NULL;
    int rc = srv_render_messages(root, &srv->parse_opts, &prompt, &e);
    cJSON_Delete(root);
    if (rc) return send_error(srv, c, &e);
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "prompt", prompt);
    free(prompt);
    mu_buf b = {0};
    srv_json_put(&b, out);
    return send_json(c, 200, &b);
}

/* ---- routing ------------------------------------------------------------------------------------ */

typedef struct route {
    const char *path, *method;
    enum srv_route id;
} route;

static const route routes[] = {
    {"/v1/chat/completions", "POST", SRV_ROUTE_CHAT}, {"/chat/completions", "POST", SRV_ROUTE_CHAT},
    {"/v1/completions", "POST", SRV_ROUTE_COMPLETION}, {"/completions", "POST", SRV_ROUTE_COMPLETION},
    {"/v1/models", "GET", SRV_ROUTE_MODELS}, {"/models", "GET", SRV_ROUTE_MODELS},
    {"/health", "GET", SRV_ROUTE_HEALTH}, {"/v1/health", "GET", SRV_ROUTE_HEALTH},
    {"/metrics", "GET", SRV_ROUTE_METRICS}, {"/tokenize", "POST", SRV_ROUTE_TOKENIZE},
    {"/detokenize", "POST", SRV_ROUTE_DETOKENIZE}, {"/apply-template", "POST", SRV_ROUTE_TEMPLATE},
};

static bool authorized(const srv_server *srv, struct MHD_Connection *c) {
    if (!srv->cfg.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    return h && strncasecmp(h, "Bearer ", 7) == 0 && strcmp(h + 7, srv->cfg.api_key) == 0;
}

static enum MHD_Result dispatch(srv_server *srv, struct MHD_Connection *c, const char *url, const char *method,
                                conn_req *cr) {
    srv_error e;
    const route *r = NULL;
    bool path_known = false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(url, routes[i].path)) continue;
        path_known = true;
        bool head_of_get = !strcmp(method, "HEAD") && !strcmp(routes[i].method, "GET");
        if (!strcmp(method, routes[i].method) || head_of_get) r = &routes[i];
    }
    if (!r && path_known) {
        const char *allowed = NULL;
        for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
            if (!strcmp(url, routes[i].path)) allowed = routes[i].method;
        srv_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s is not allowed on %s; use %s",
                 method, url, allowed);
        mu_buf b = {0};
        srv_error_json(&b, &e);
        atomic_fetch_add(&srv_sched_metrics(srv->sched)->errors_4xx, 1);
        size_t len = b.len;
        char *data = mu_buf_take(&b);
        struct MHD_Response *resp = data ? MHD_create_response_from_buffer_with_free_callback(len, data, free_buffer)
                                         : NULL;
        if (!resp) {
            free(data);
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allowed);
        enum MHD_Result ok = MHD_queue_response(c, 405, resp);
        MHD_destroy_response(resp);
        return ok;
    }
    if (!r) {
        srv_fail(&e, 404, "invalid_request_error", "not_found", NULL, "invalid URL (%s %s)", method, url);
        return send_error(srv, c, &e);
    }
    atomic_fetch_add(&srv_sched_metrics(srv->sched)->requests[r->id], 1);
    if (r->id != SRV_ROUTE_HEALTH && r->id != SRV_ROUTE_METRICS && !authorized(srv, c)) {
        srv_fail(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                 "missing or wrong API key: send the header 'Authorization: Bearer KEY'");
        return send_error(srv, c, &e);
    }
    if (cr->too_large) {
        srv_fail(&e, 413, "invalid_request_error", "request_too_large", NULL,
                 "the request body is larger than %zu bytes (the server's --max-body)", srv->cfg.max_body);
        return send_error(srv, c, &e);
    }
    switch (r->id) {
    case SRV_ROUTE_CHAT: return handle_generation(srv, c, cr, SRV_CHAT);
    case SRV_ROUTE_COMPLETION: return handle_generation(srv, c, cr, SRV_COMPLETION);
    case SRV_ROUTE_MODELS: return handle_models(srv, c);
    case SRV_ROUTE_HEALTH: return handle_health(srv, c);
    case SRV_ROUTE_METRICS: return handle_metrics(srv, c);
    case SRV_ROUTE_TOKENIZE: return handle_tokenize(srv, c, cr);
    case SRV_ROUTE_DETOKENIZE: return handle_detokenize(srv, c, cr);
    case SRV_ROUTE_TEMPLATE: return handle_template(srv, c, cr);
    }
    return MHD_NO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **req_cls) {
    (void)version;
    srv_server *srv = cls;
    conn_req *cr = *req_cls;
    if (!cr) { /* headers only: set up, then MHD delivers the body */
        cr = calloc(1, sizeof *cr);
        if (!cr) return MHD_NO;
        *req_cls = cr;
        atomic_fetch_add(&srv->in_flight, 1);
        snprintf(cr->log.method, sizeof cr->log.method, "%s", method);
        snprintf(cr->log.path, sizeof cr->log.path, "%s", url);
        cr->log.t0 = mu_now_seconds();
        cr->log.prompt_tokens = -1;
        const char *len = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (len && strtoull(len, NULL, 10) > srv->cfg.max_body) cr->too_large = true;
        return MHD_YES;
    }
    if (*upload_data_size) {
        /* An oversized body is read and dropped, so the client gets its 413. */
        if (!cr->too_large && cr->body.len + *upload_data_size > srv->cfg.max_body) {
            cr->too_large = true;
            mu_buf_free(&cr->body);
        }
        if (!cr->too_large) mu_buf_put(&cr->body, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (cr->body.oom) {
        srv_error e;
        srv_fail(&e, 500, "server_error", NULL, NULL, "out of memory reading the request");
        return send_error(srv, c, &e);
    }
    return dispatch(srv, c, url, method, cr);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls, enum MHD_RequestTerminationCode toe) {
    srv_server *srv = cls;
    conn_req *cr = *req_cls;
    if (!cr) return;
    if (!cr->streamed) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS);
        log_request(srv, &cr->log, ci ? (int)ci->http_status : 0,
                    toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (not delivered: the connection ended)");
    }
    atomic_fetch_sub(&srv->in_flight, 1);
    mu_buf_free(&cr->body);
    free(cr);
    *req_cls = NULL;
}

/* ---- lifecycle ------------------------------------------------------------------------------------ */

int srv_server_start(const srv_config *cfg, srv_server **out) {
    *out = NULL;
    srv_server *srv = calloc(1, sizeof *srv);
    if (!srv) return mu_fail(MUSER_ENOMEM, "out of memory");
    srv->cfg = *cfg;
    srv->created = (int64_t)time(NULL);
    srv->started_at = mu_now_seconds();
    muser_model_info info;
    muser_model_get_info(cfg->model, &info);
    srv->parse_opts.defaults = cfg->sampling;
    srv->parse_opts.seed_fixed = cfg->seed_fixed;
    srv->parse_opts.chat_format = strcmp(info.arch, "muse-glimmer") == 0;
    srv->parse_opts.test_hooks = cfg->test_hooks;

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", cfg->port);
    int gai = getaddrinfo(cfg->host, port, &hints, &ai);
    if (gai != 0) {
        free(srv);
        return mu_fail(MUSER_EINVAL, "cannot resolve --host %s: %s", cfg->host, gai_strerror(gai));
    }

    srv_sched_config sc = {cfg->model,     cfg->session,    cfg->n_slots,  cfg->queue_cap, cfg->n_checkpoints,
                           cfg->model_id,  cfg->drafter,    cfg->draft_max};
    int rc = srv_sched_new(&sc, &srv->sched);
    if (rc) {
        freeaddrinfo(ai);
        free(srv);
        return rc;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    srv->daemon = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR,
                                   ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
                                   MHD_OPTION_CONNECTION_LIMIT, 1000u, MHD_OPTION_CONNECTION_TIMEOUT, 600u,
                                   MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!srv->daemon) {
        srv_sched_free(srv->sched);
        free(srv);
        return mu_fail(MUSER_EIO, "cannot listen on %s port %d (in use, or not an address of this machine?)",
                       cfg->host, cfg->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = di ? di->port : cfg->port;
    *out = srv;
    return 0;
}

int srv_server_port(const srv_server *s) { return s->port; }

void srv_server_stop(srv_server *srv) {
    if (!srv) return;
    MHD_socket listen = MHD_quiesce_daemon(srv->daemon);
    srv_sched_stop(srv->sched); /* every job ends, so blocked connection threads return */
    /* Let the last answers (503s, stream ends) reach their clients before
     * the connections are closed, for up to 3 s. */
    for (int i = 0; i < 300 && atomic_load(&srv->in_flight) > 0; i++) nanosleep(&(struct timespec){0, 10000000L}, NULL);
    MHD_stop_daemon(srv->daemon); /* joins the connection threads */
    if (listen != MHD_INVALID_SOCKET) close(listen);
    srv_sched_free(srv->sched);
    free(srv);
}
