/* fuzz_atem.c — libFuzzer target for the streaming chat parser (ATEM,
 * src/text/atem.c): model output as the server feeds it, token by token.
 *
 * Input: byte 0 picks the request's tools (none, or one of three schema
 * sets that type the call arguments), byte 1 seeds the chunk sizes, the
 * rest is the generated text. The text is parsed three times: in one feed,
 * one byte per feed, and in random chunks (empty feeds included). Each run
 * must give what its deltas added up to, and all three the same reasoning,
 * answer, calls and truncation: the result may not depend on how the
 * stream was split. For valid UTF-8 text every delta is valid UTF-8 and
 * every call's arguments are a JSON object that dumps back to itself.
 * After finish, feeding changes nothing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "text/utf8.h"
#include "util/error.h"

static const char *const TOOL_SETS[] = {
    NULL,
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}}}}]",
    "[{\"type\":\"function\",\"function\":{\"name\":\"rec\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"s\":{\"type\":\"string\"},\"i\":{\"type\":\"integer\"},\"f\":{\"type\":\"number\"},\"b\":{\"type\":"
    "\"boolean\"},\"o\":{\"type\":\"object\"},\"a\":{\"type\":\"array\"},\"z\":{\"type\":\"null\"},"
    "\"n\":{\"type\":[\"integer\",\"null\"]},\"sn\":{\"type\":[\"string\",\"number\"]},\"u\":{\"type\":7}}}}}]",
    "[{\"type\":\"function\",\"function\":{\"name\":\"fs.read\",\"parameters\":{\"properties\":{\"path\":"
    "{\"type\":\"string\"},\"lines\":{\"type\":\"array\"}}}}},{\"name\":\"bare\"},{\"function\":{\"name\":7}}]",
};
#define N_TOOL_SETS (sizeof TOOL_SETS / sizeof *TOOL_SETS)

static cJSON *tools[N_TOOL_SETS];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (size_t i = 0; i < N_TOOL_SETS; i++)
        if (TOOL_SETS[i] && chat_json_parse(TOOL_SETS[i], strlen(TOOL_SETS[i]), &tools[i]) != 0) abort();
    return 0;
}

/* What one run saw: the deltas added up, and the final result. */
typedef struct parse_run {
    mu_buf reasoning, content; /* from the deltas */
    int delta_calls;
    mu_buf calls; /* the result's calls, one line each: name, arguments, complete */
    char *res_reasoning, *res_content;
    bool truncated;
} parse_run;

static void run_free(parse_run *r) {
    mu_buf_free(&r->reasoning);
    mu_buf_free(&r->content);
    mu_buf_free(&r->calls);
    free(r->res_reasoning);
    free(r->res_content);
}

/* Arguments must be a compact JSON object, stable through parse and dump. */
static void check_arguments(const char *args) {
    cJSON *v = NULL;
    if (chat_json_parse(args, strlen(args), &v) != 0 || !cJSON_IsObject(v)) abort();
    mu_buf b = {0};
    chat_json_dump(&b, v, false);
    if (!b.data || strcmp(b.data, args) != 0) abort();
    mu_buf_free(&b);
    cJSON_Delete(v);
}

static void take_delta(parse_run *r, const chat_delta *d, bool utf8) {
    if (utf8 && (!mu_utf8_valid(d->reasoning, d->reasoning_len) || !mu_utf8_valid(d->content, d->content_len)))
        abort();
    mu_buf_put(&r->reasoning, d->reasoning, d->reasoning_len);
    mu_buf_put(&r->content, d->content, d->content_len);
    if (d->n_calls < 0 || (d->n_calls > 0 && !d->calls)) abort();
    r->delta_calls += d->n_calls;
}

/* The result's text is a C string: it ends at a NUL byte of the output,
 * where the deltas (with lengths) go on. */
static bool adds_up(const mu_buf *deltas, const char *result) {
    size_t n = deltas->len ? strnlen(deltas->data, deltas->len) : 0;
    return strlen(result) == n && memcmp(deltas->data ? deltas->data : "", result, n) == 0;
}

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* chunk: 0 all at once, 1 byte by byte, else random sizes from seed. */
static void parse(const cJSON *t, const char *text, size_t n, int chunk, uint64_t seed, bool utf8, parse_run *r) {
    memset(r, 0, sizeof *r);
    chat_parser *p = NULL;
    if (chat_parser_new(t, &p) != 0) abort();
    chat_delta d;
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t at = 0; at < n || (chunk == 0 && at == 0);) {
        size_t len = chunk == 0 ? n : chunk == 1 ? 1 : (size_t)(next(&s) % 9); /* 0: an empty feed */
        if (len > n - at) len = n - at;
        if (chat_parser_feed(p, text + at, len, &d) != 0) abort();
        take_delta(r, &d, utf8);
        at += len;
        if (chunk == 0) break;
    }
    chat_result res;
    if (chat_parser_finish(p, &d, &res) != 0) abort();
    take_delta(r, &d, utf8);
    if (res.n_calls != r->delta_calls || (res.n_calls && !res.calls)) abort();
    for (int i = 0; i < res.n_calls; i++) {
        const chat_tool_call *c = &res.calls[i];
        if (!c->name || !c->arguments) abort();
        if (utf8) check_arguments(c->arguments);
        mu_buf_puts(&r->calls, c->name);
        mu_buf_putc(&r->calls, '\n');
        mu_buf_puts(&r->calls, c->arguments);
        mu_buf_puts(&r->calls, c->complete ? "\n+\n" : "\n-\n");
    }
    r->res_reasoning = strdup(res.reasoning);
    r->res_content = strdup(res.content);
    r->truncated = res.truncated;
    /* the deltas add up to the result */
    if (!adds_up(&r->reasoning, r->res_reasoning) || !adds_up(&r->content, r->res_content)) abort();
    /* the stream is over: more text and a second finish change nothing */
    if (chat_parser_feed(p, "x<|eot|>", 8, &d) != 0 || d.reasoning_len || d.content_len || d.n_calls) abort();
    if (chat_parser_finish(p, &d, &res) != 0 || d.reasoning_len || d.content_len || d.n_calls ||
        res.n_calls != r->delta_calls || strcmp(res.content, r->res_content) != 0)
        abort();
    chat_parser_free(p);
    if (r->reasoning.oom || r->content.oom || r->calls.oom || !r->res_reasoning || !r->res_content) abort();
}

static bool same_buf(const mu_buf *a, const mu_buf *b) {
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

static void expect_same(const parse_run *a, const parse_run *b) {
    if (strcmp(a->res_reasoning, b->res_reasoning) || strcmp(a->res_content, b->res_content) ||
        !same_buf(&a->reasoning, &b->reasoning) || !same_buf(&a->content, &b->content) ||
        !same_buf(&a->calls, &b->calls) || a->truncated != b->truncated)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const cJSON *t = tools[data[0] % N_TOOL_SETS];
    size_t n = size - 2;
    char *text = malloc(n ? n : 1); /* exact size, so overreads are caught */
    if (!text) return 0;
    memcpy(text, data + 2, n);
    const bool utf8 = mu_utf8_valid(text, n);
    parse_run whole, bytes, chunks;
    parse(t, text, n, 0, 0, utf8, &whole);
    parse(t, text, n, 1, 0, utf8, &bytes);
    parse(t, text, n, 2, data[1], utf8, &chunks);
    expect_same(&whole, &bytes);
    expect_same(&whole, &chunks);
    run_free(&whole);
    run_free(&bytes);
    run_free(&chunks);
    free(text);
    return 0;
}
