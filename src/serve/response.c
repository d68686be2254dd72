/* response.c — OpenAI response shapes, SSE framing, stop strings, and the
 * output of one generation (see response.h). */
#include "serve/response.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FINGERPRINT "muser-" MUSER_VERSION

void srv_json_put(mu_buf *b, cJSON *obj) {
    char *s = obj ? cJSON_PrintUnformatted(obj) : NULL;
    if (s) mu_buf_puts(b, s);
    else b->oom = true;
    free(s);
    cJSON_Delete(obj);
}

void srv_error_json(mu_buf *b, const srv_error *e) {
    cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(err, "message", e->message);
    cJSON_AddStringToObject(err, "type", e->type ? e->type : "invalid_request_error");
    if (e->param[0]) cJSON_AddStringToObject(err, "param", e->param);
    else cJSON_AddNullToObject(err, "param");
    if (e->code) cJSON_AddStringToObject(err, "code", e->code);
    else cJSON_AddNullToObject(err, "code");
    srv_json_put(b, root);
}

void srv_sse_put(mu_buf *b, cJSON *obj) {
    mu_buf_puts(b, "data: ");
    srv_json_put(b, obj);
    mu_buf_puts(b, "\n\n");
}

void srv_make_id(char *out, size_t cap, const char *prefix) {
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static atomic_uint_fast64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^
                 (atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull) ^ (uint64_t)(uintptr_t)pthread_self();
    size_t n = (size_t)snprintf(out, cap, "%s", prefix);
    for (int i = 0; i < 24 && n + 1 < cap; i++) {
        x += 0x9E3779B97F4A7C15ull; /* splitmix64 */
        uint64_t z = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        out[n++] = alphabet[z % (sizeof alphabet - 1)];
    }
    out[n] = 0;
}

/* ---- stop strings ------------------------------------------------------------ */

void srv_stopper_init(srv_stopper *st, char *const *stops, int n) {
    memset(st, 0, sizeof *st);
    st->stops = stops;
    st->n_stops = n;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(stops[i]);
        if (len > st->longest) st->longest = len;
    }
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of a stop string. */
static size_t partial_stop_suffix(const srv_stopper *st, const char *s, size_t n) {
    size_t best = 0;
    for (int i = 0; i < st->n_stops; i++) {
        size_t len = strlen(st->stops[i]);
        size_t k = len - 1 < n ? len - 1 : n;
        for (; k > best; k--)
            if (memcmp(s + n - k, st->stops[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

void srv_stopper_push(srv_stopper *st, const char *text, size_t len, mu_buf *out) {
    if (st->matched || len == 0) return;
    if (st->n_stops == 0) {
        mu_buf_put(out, text, len);
        return;
    }
    mu_buf_put(&st->held, text, len);
    const char *h = st->held.data;
    size_t n = st->held.len;
    if (!h) return; /* out of memory: the held text is lost, as the buffer says */
    const char *first = NULL;
    for (int i = 0; i < st->n_stops; i++) {
        const char *at = strstr(h, st->stops[i]); /* detokenized text holds no NUL */
        if (at && (!first || at < first)) first = at;
    }
    if (first) {
        mu_buf_put(out, h, (size_t)(first - h));
        st->matched = true;
        st->held.len = 0;
        return;
    }
    size_t keep = partial_stop_suffix(st, h, n);
    mu_buf_put(out, h, n - keep);
    memmove(st->held.data, h + n - keep, keep);
    st->held.len = keep;
    st->held.data[keep] = 0;
}

void srv_stopper_flush(srv_stopper *st, mu_buf *out) {
    if (!st->matched && st->held.len) mu_buf_put(out, st->held.data, st->held.len);
    st->held.len = 0;
}

void srv_stopper_free(srv_stopper *st) { mu_buf_free(&st->held); }

/* ---- chunks and bodies -------------------------------------------------------- */

static cJSON *response_base(const srv_output *o, const char *object) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "id", o->id);
    cJSON_AddStringToObject(r, "object", object);
    cJSON_AddNumberToObject(r, "created", (double)o->created);
    cJSON_AddStringToObject(r, "model", o->model_id);
    cJSON_AddStringToObject(r, "system_fingerprint", FINGERPRINT);
    return r;
}

/* A chat chunk with one choice; returns the choice's delta to fill. */
static cJSON *chat_chunk(const srv_output *o, cJSON **chunk, const char *finish_reason) {
    *chunk = response_base(o, "chat.completion.chunk");
    cJSON *choice = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(*chunk, "choices"), choice);
    cJSON_AddNumberToObject(choice, "index", 0);
    cJSON *delta = cJSON_AddObjectToObject(choice, "delta");
    cJSON_AddNullToObject(choice, "logprobs");
    if (finish_reason) cJSON_AddStringToObject(choice, "finish_reason", finish_reason);
    else cJSON_AddNullToObject(choice, "finish_reason");
    return delta;
}

static cJSON *tool_call_json(const muser_chat_tool_call *c, int index, bool with_index) {
    char id[40];
    srv_make_id(id, sizeof id, "call_");
    cJSON *t = cJSON_CreateObject();
    if (with_index) cJSON_AddNumberToObject(t, "index", index);
    cJSON_AddStringToObject(t, "id", id);
    cJSON_AddStringToObject(t, "type", "function");
    cJSON *fn = cJSON_AddObjectToObject(t, "function");
    cJSON_AddStringToObject(fn, "name", c->name);
    cJSON_AddStringToObject(fn, "arguments", c->arguments);
    return t;
}

static void add_string_n(cJSON *obj, const char *key, const char *s, size_t n) {
    char *copy = malloc(n + 1);
    if (!copy) return;
    memcpy(copy, s, n);
    copy[n] = 0;
    cJSON_AddStringToObject(obj, key, copy);
    free(copy);
}

/* Streams what one parser delta made visible. */
static void stream_chat_delta(srv_output *o, const muser_chat_delta *d, mu_buf *sse) {
    int calls = 0;
    for (int i = 0; i < d->n_calls; i++) calls += d->calls[i].complete;
    if (!d->reasoning_len && !d->content_len && !calls) return;
    cJSON *chunk;
    cJSON *delta = chat_chunk(o, &chunk, NULL);
    if (d->reasoning_len) add_string_n(delta, "reasoning_content", d->reasoning, d->reasoning_len);
    if (d->content_len) add_string_n(delta, "content", d->content, d->content_len);
    if (calls) {
        cJSON *arr = cJSON_AddArrayToObject(delta, "tool_calls");
        for (int i = 0; i < d->n_calls; i++)
            if (d->calls[i].complete) cJSON_AddItemToArray(arr, tool_call_json(&d->calls[i], o->n_calls_sent++, true));
    }
    srv_sse_put(sse, chunk);
}

static void send_role(srv_output *o, mu_buf *sse) {
    if (o->role_sent || !o->req->stream || o->req->kind != SRV_CHAT) return;
    o->role_sent = true;
    cJSON *chunk;
    cJSON *delta = chat_chunk(o, &chunk, NULL);
    cJSON_AddStringToObject(delta, "role", "assistant");
    cJSON_AddStringToObject(delta, "content", "");
    srv_sse_put(sse, chunk);
}

static void completion_chunk(const srv_output *o, const char *text, size_t n, const char *finish_reason,
                             mu_buf *sse) {
    cJSON *chunk = response_base(o, "text_completion");
    cJSON *choice = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(chunk, "choices"), choice);
    add_string_n(choice, "text", text, n);
    cJSON_AddNumberToObject(choice, "index", 0);
    cJSON_AddNullToObject(choice, "logprobs");
    if (finish_reason) cJSON_AddStringToObject(choice, "finish_reason", finish_reason);
    else cJSON_AddNullToObject(choice, "finish_reason");
    srv_sse_put(sse, chunk);
}

int srv_output_init(srv_output *o, const srv_request *req, const char *id, const char *model_id, int64_t created) {
    memset(o, 0, sizeof *o);
    o->req = req;
    o->id = id;
    o->model_id = model_id;
    o->created = created;
    srv_stopper_init(&o->stopper, req->stop, req->n_stop);
    if (req->kind == SRV_CHAT) {
        if (muser_chat_parser_new(req->tools_json, &o->parser) != MUSER_OK) return -1;
        /* The forced call header is prompt text the parser must see first. */
        if (req->forced_prefix)
            muser_chat_parser_feed(o->parser, req->forced_prefix, strlen(req->forced_prefix), NULL);
    }
    return 0;
}

/* Visible text after stop filtering goes to the parser or the completion. */
static void show(srv_output *o, const char *text, size_t n, mu_buf *sse) {
    if (o->req->kind == SRV_CHAT) {
        muser_chat_delta d;
        muser_chat_parser_feed(o->parser, text, n, &d);
        if (o->req->stream) stream_chat_delta(o, &d, sse);
    } else if (o->req->stream) {
        if (n) completion_chunk(o, text, n, NULL, sse);
    } else {
        mu_buf_put(&o->text, text, n);
    }
}

bool srv_output_push(srv_output *o, const char *text, mu_buf *sse) {
    send_role(o, sse);
    mu_buf shown = {0};
    srv_stopper_push(&o->stopper, text, strlen(text), &shown);
    if (shown.len) show(o, shown.data, shown.len, sse);
    mu_buf_free(&shown);
    return o->stopper.matched;
}

static void usage_json(cJSON *parent, int prompt_tokens, int cached_tokens, int completion_tokens) {
    cJSON *u = cJSON_AddObjectToObject(parent, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", prompt_tokens + completion_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens", cached_tokens);
}

void srv_output_finish(srv_output *o, srv_finish why, int prompt_tokens, int cached_tokens, int completion_tokens,
                       mu_buf *out) {
    const srv_request *r = o->req;
    send_role(o, out);
    mu_buf rest = {0};
    srv_stopper_flush(&o->stopper, &rest);
    if (rest.len) show(o, rest.data, rest.len, out);
    mu_buf_free(&rest);

    muser_chat_result res = {0};
    int n_calls = 0;
    if (r->kind == SRV_CHAT) {
        muser_chat_delta d;
        muser_chat_parser_finish(o->parser, &d, &res);
        if (r->stream) stream_chat_delta(o, &d, out);
        for (int i = 0; i < res.n_calls; i++) n_calls += res.calls[i].complete;
    }
    const char *reason = why == SRV_FINISH_LENGTH ? "length" : n_calls ? "tool_calls" : "stop";

    if (r->stream) {
        if (r->kind == SRV_CHAT) {
            cJSON *chunk;
            chat_chunk(o, &chunk, reason);
            srv_sse_put(out, chunk);
        } else {
            completion_chunk(o, "", 0, reason, out);
        }
        if (r->include_usage) {
            cJSON *chunk = response_base(o, r->kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion");
            cJSON_AddArrayToObject(chunk, "choices");
            usage_json(chunk, prompt_tokens, cached_tokens, completion_tokens);
            srv_sse_put(out, chunk);
        }
        mu_buf_puts(out, "data: [DONE]\n\n");
        return;
    }

    cJSON *body = response_base(o, r->kind == SRV_CHAT ? "chat.completion" : "text_completion");
    cJSON *choice = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(body, "choices"), choice);
    cJSON_AddNumberToObject(choice, "index", 0);
    if (r->kind == SRV_CHAT) {
        cJSON *msg = cJSON_AddObjectToObject(choice, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        if (res.content[0] || !n_calls) cJSON_AddStringToObject(msg, "content", res.content);
        else cJSON_AddNullToObject(msg, "content");
        if (res.reasoning[0]) cJSON_AddStringToObject(msg, "reasoning_content", res.reasoning);
        if (n_calls) {
            cJSON *arr = cJSON_AddArrayToObject(msg, "tool_calls");
            for (int i = 0; i < res.n_calls; i++)
                if (res.calls[i].complete) cJSON_AddItemToArray(arr, tool_call_json(&res.calls[i], i, false));
        }
    } else {
        cJSON_AddStringToObject(choice, "text", o->text.data ? o->text.data : "");
    }
    cJSON_AddNullToObject(choice, "logprobs");
    cJSON_AddStringToObject(choice, "finish_reason", reason);
    usage_json(body, prompt_tokens, cached_tokens, completion_tokens);
    srv_json_put(out, body);
}

void srv_output_free(srv_output *o) {
    srv_stopper_free(&o->stopper);
    muser_chat_parser_free(o->parser);
    mu_buf_free(&o->text);
    memset(o, 0, sizeof *o);
}
