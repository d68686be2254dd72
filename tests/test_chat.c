/* test_chat.c — the Muse Glimmer chat format: rendering against strings that
 * python3-jinja2 produced from the spec template (tests/data/chat), render
 * errors, and the ATEM output parser (all at once and streamed). */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testlib.h"
#include "text/chat.h"

/* ---- rendering the recorded conversations --------------------------------- */

static const char *str_field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Renders one tests/data/chat/NAME.json and compares with NAME.expected. */
static void check_conversation(const char *dir, const char *name) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    size_t n_in = 0, n_exp = 0;
    char *in = tl_read_file(path, &n_in);
    snprintf(path, sizeof path, "%s/%s.expected", dir, name);
    char *expected = tl_read_file(path, &n_exp);
    CHECKF(in && expected, "%s: missing input or expected file", name);
    if (!in || !expected) {
        free(in);
        free(expected);
        return;
    }
    cJSON *req = NULL;
    int rc = chat_json_parse(in, n_in, &req);
    CHECKF(rc == MUSER_OK, "%s: parse: %s", name, muser_last_error());
    chat_render_opts o = {0};
    o.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "add_generation_prompt"));
    o.reasoning_strength = str_field(req, "reasoning_strength");
    o.current_date = str_field(req, "current_date");
    o.knowledge_cutoff = str_field(req, "knowledge_cutoff");
    o.bos_token = str_field(req, "bos_token");
    o.tool_namespace_descriptions = cJSON_GetObjectItemCaseSensitive(req, "tool_namespace_descriptions");
    char *out = NULL;
    rc = chat_render(cJSON_GetObjectItemCaseSensitive(req, "messages"),
                     cJSON_GetObjectItemCaseSensitive(req, "tools"), &o, &out);
    CHECKF(rc == MUSER_OK, "%s: render: %s", name, muser_last_error());
    if (out) {
        size_t n_out = strlen(out);
        size_t i = 0;
        while (i < n_out && i < n_exp && out[i] == expected[i]) i++;
        CHECKF(n_out == n_exp && i == n_exp, "%s: differs at byte %zu (got %zu bytes, want %zu)\n got: %.80s\nwant: %.80s",
               name, i, n_out, n_exp, out + (i < n_out ? i : n_out), expected + (i < n_exp ? i : n_exp));
    }
    free(out);
    cJSON_Delete(req);
    free(in);
    free(expected);
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void test_recorded_conversations(void) {
    char dir[1024];
    tl_test_data("chat", dir, sizeof dir);
    DIR *d = opendir(dir);
    CHECKF(d != NULL, "cannot open %s", dir);
    if (!d) return;
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        size_t len = strlen(e->d_name);
        if (len > 5 && strcmp(e->d_name + len - 5, ".json") == 0) {
            names[n] = strdup(e->d_name);
            names[n][len - 5] = 0;
            n++;
        }
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_names);
    CHECKF(n >= 24, "only %d recorded conversations", n);
    for (int i = 0; i < n; i++) {
        check_conversation(dir, names[i]);
        free(names[i]);
    }
}

/* ---- render: API, extensions and errors ---------------------------------- */

static char *render_text(const char *messages, const char *tools, const muser_chat_options *o, int *rc) {
    char *out = NULL;
    *rc = muser_chat_render(messages, tools, o, &out);
    return out;
}

static void test_render_api(void) {
    muser_chat_options o = {.current_date = "2026-08-20", .add_generation_prompt = true};
    int rc;
    char *a = render_text("[{\"role\":\"user\",\"content\":\"hi\"}]", NULL, &o, &rc);
    CHECK(rc == MUSER_OK && a);
    const char *want = "<|begin_of_text|><|start|>system<|message|>You are a helpful AI assistant.\n"
                       "Knowledge cutoff: 2026-01-04.\nCurrent date: 2026-08-20.\n\n"
                       "Reasoning strength: high.\n\n# Valid recipients: \"self\", \"user\".<|eot|>"
                       "<|start|>user<|message|>hi<|eot|><|start|>assistant";
    CHECKF(a && strcmp(a, want) == 0, "got %s", a ? a : "(null)");
    /* a whole request object gives the same text */
    char *b = render_text("{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", NULL, &o, &rc);
    CHECK(rc == MUSER_OK && a && b && strcmp(a, b) == 0);
    free(a);
    free(b);

    /* no current_date: today's local date, as strftime_now gives it */
    char today[32], line[64];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(today, sizeof today, "%Y-%m-%d", &tm);
    snprintf(line, sizeof line, "Current date: %s.\n", today);
    a = render_text("[{\"role\":\"user\",\"content\":\"hi\"}]", NULL, NULL, &rc);
    CHECKF(rc == MUSER_OK && a && strstr(a, line), "want '%s' in %s", line, a ? a : "(null)");
    CHECK(a && strstr(a, "<|start|>assistant") == NULL); /* opt NULL: no generation prompt */
    free(a);

    /* options reach the template */
    muser_chat_options o2 = {.current_date = "2030-01-02", .knowledge_cutoff = "2029-09-09",
                             .reasoning_strength = "xhigh", .bos_token = "<BOS>",
                             .tool_namespace_descriptions = "{\"ns\": \"The NS\"}"};
    a = render_text("[{\"role\":\"user\",\"content\":\"q\"}]",
                    "[{\"type\":\"function\",\"function\":{\"name\":\"ns.f\",\"description\":\"d\",\"parameters\":{}}}]",
                    &o2, &rc);
    CHECK(rc == MUSER_OK && a);
    CHECK(a && strncmp(a, "<BOS><|start|>system", 20) == 0);
    CHECK(a && strstr(a, "Knowledge cutoff: 2029-09-09.\nCurrent date: 2030-01-02.\n\nReasoning strength: xhigh."));
    CHECK(a && strstr(a, "{\"name\": \"ns\", \"description\": \"The NS\"}\n"));
    CHECK(a && strstr(a, "# Valid recipients: \"self\", \"ns.*\", \"user\"."));
    free(a);
}

/* OpenAI clients send arguments as a JSON string; it must render exactly
 * like the same object. */
static void test_string_arguments(void) {
    const char *as_object =
        "[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"1\","
        "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1.0,\"b\":\"s\\n\","
        "\"c\":[1,{\"d\":null}],\"e\":true}}}]}]";
    const char *as_string =
        "[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"1\","
        "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1.0, \\\"b\\\": "
        "\\\"s\\\\n\\\", \\\"c\\\": [1, {\\\"d\\\": null}], \\\"e\\\": true}\"}}]}]";
    muser_chat_options o = {.current_date = "2026-08-20"};
    int rc1, rc2;
    char *a = render_text(as_object, NULL, &o, &rc1);
    char *b = render_text(as_string, NULL, &o, &rc2);
    CHECKF(rc1 == MUSER_OK && rc2 == MUSER_OK, "%s", muser_last_error());
    CHECK(a && b && strcmp(a, b) == 0);
    CHECK(a && strstr(a, "<atem:parameter name=\"a\">1.0</atem:parameter>\n"
                         "<atem:parameter name=\"b\">s\n</atem:parameter>\n"
                         "<atem:parameter name=\"c\">[1, {\"d\": null}]</atem:parameter>\n"
                         "<atem:parameter name=\"e\">true</atem:parameter>\n"));
    free(a);
    free(b);
}

/* Trees built by plain cJSON_Parse carry no number text: integral values
 * print as ints, others as Python floats. */
static void test_plain_cjson_numbers(void) {
    cJSON *v = cJSON_Parse("[1.0, 2.5, 1e20, -0.0, 3, 1e-7]");
    mu_buf b = {0};
    chat_json_dump(&b, v, true);
    char *s = mu_buf_take(&b);
    CHECKF(s && strcmp(s, "[1, 2.5, 1e+20, 0, 3, 1e-07]") == 0, "got %s", s ? s : "(null)");
    free(s);
    chat_json_dump(&b, v, false);
    s = mu_buf_take(&b);
    CHECKF(s && strcmp(s, "[1,2.5,1e+20,0,3,1e-07]") == 0, "got %s", s ? s : "(null)");
    free(s);
    cJSON_Delete(v);
}

static void expect_render_error(const char *messages, const char *tools, const char *needle) {
    muser_chat_options o = {.current_date = "2026-08-20",
                            .tool_namespace_descriptions = NULL};
    char *out = (char *)1;
    int rc = muser_chat_render(messages, tools, &o, &out);
    CHECKF(rc == MUSER_EINVAL, "rc %d for %s", rc, messages);
    CHECKF(out == NULL, "output set on error for %s", messages);
    CHECKF(strstr(muser_last_error(), needle) != NULL, "message '%s' lacks '%s'", muser_last_error(), needle);
}

static void test_render_errors(void) {
    expect_render_error("[{\"role\":\"user\",\"content\":\"x\"", NULL, "malformed JSON");
    expect_render_error("[{\"role\":\"user\",\"content\":01}]", NULL, "malformed JSON number");
    expect_render_error("{\"role\":\"user\"}", NULL, "no \"messages\"");
    expect_render_error("[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]", NULL, "\\u0000");
    expect_render_error("\"hello\"", NULL, "must be a JSON array");
    expect_render_error("[{\"content\":\"x\"}]", NULL, "missing role");
    expect_render_error("[{\"role\":5,\"content\":\"x\"}]", NULL, "missing role");
    expect_render_error("[{\"role\":\"developer\",\"content\":\"x\"}]", NULL, "unknown role 'developer'");
    expect_render_error("[\"user\"]", NULL, "not an object");
    expect_render_error("[{\"role\":\"user\",\"content\":5}]", NULL, "content must be");
    expect_render_error("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":[1]}]}]", NULL,
                        "must not be an array");
    const char *pre = "[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"tool_calls\":[{\"function\":";
    char m[512];
    snprintf(m, sizeof m, "%s{\"name\":\"f\",\"arguments\":[1,2]}}]}]", pre);
    expect_render_error(m, NULL, "must be a JSON object");
    snprintf(m, sizeof m, "%s{\"name\":\"f\",\"arguments\":42}}]}]", pre);
    expect_render_error(m, NULL, "must be a JSON object");
    snprintf(m, sizeof m, "%s{\"name\":\"f\"}}]}]", pre);
    expect_render_error(m, NULL, "must be a JSON object");
    snprintf(m, sizeof m, "%s{\"name\":\"f\",\"arguments\":\"[1, 2]\"}}]}]", pre);
    expect_render_error(m, NULL, "must be a JSON object");
    snprintf(m, sizeof m, "%s{\"name\":\"f\",\"arguments\":\"{not json\"}}]}]", pre);
    expect_render_error(m, NULL, "not valid JSON");
    snprintf(m, sizeof m, "%s{\"arguments\":{}}}]}]", pre);
    expect_render_error(m, NULL, "missing function.name");
    expect_render_error("[{\"role\":\"assistant\",\"tool_calls\":{\"a\":1}}]", NULL, "tool_calls must be an array");
    expect_render_error("[{\"role\":\"assistant\",\"reasoning_content\":7,\"content\":\"x\"}]", NULL,
                        "reasoning_content must be a string");
    expect_render_error("[{\"role\":\"assistant\",\"recipient\":[\"a\"],\"content\":\"x\"}]", NULL,
                        "recipient must be a string");
    expect_render_error("[{\"role\":\"tool\",\"name\":3,\"content\":\"x\"}]", NULL, "name must be a string");
    expect_render_error("[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"k\",\"function\":{\"arguments\":{}}}]},"
                        "{\"role\":\"tool\",\"tool_call_id\":\"k\",\"content\":\"x\"}]",
                        NULL, "missing function.name");
    expect_render_error("[{\"role\":\"user\",\"content\":\"x\"}]", "{\"name\":\"f\"}", "tools must be a JSON array");
    expect_render_error("[{\"role\":\"user\",\"content\":\"x\"}]", "[{\"description\":\"no name\"}]", "missing function name");
    expect_render_error("[{\"role\":\"user\",\"content\":\"x\"}]", "[{\"type\":\"function\",\"function\":null}]",
                        "missing function name");
    expect_render_error("[{\"role\":\"user\",\"content\":\"x\"}]", "[1,", "malformed JSON");
    muser_chat_options o = {.tool_namespace_descriptions = "[\"not an object\"]"};
    char *out = NULL;
    int rc = muser_chat_render("[{\"role\":\"user\",\"content\":\"x\"}]", "[{\"name\":\"f\"}]", &o, &out);
    CHECK(rc == MUSER_EINVAL && out == NULL && strstr(muser_last_error(), "tool_namespace_descriptions"));
    CHECK(muser_chat_render(NULL, NULL, NULL, &out) == MUSER_EINVAL);
    CHECK(muser_chat_render("[]", NULL, NULL, NULL) == MUSER_EINVAL);
}

/* ---- output parser ------------------------------------------------------------ */

typedef struct parsed {
    char *reasoning, *content;
    int n_calls;
    char *names[8], *args[8];
    bool complete[8];
    bool truncated;
    bool deltas_whole_utf8; /* every text delta ended on a whole UTF-8 sequence */
} parsed;

static void parsed_free(parsed *r) {
    free(r->reasoning);
    free(r->content);
    for (int i = 0; i < r->n_calls && i < 8; i++) {
        free(r->names[i]);
        free(r->args[i]);
    }
    memset(r, 0, sizeof *r);
}

static bool ends_whole_utf8(const char *s, size_t n) {
    size_t i = n;
    int cont = 0;
    while (i > 0 && cont < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--, cont++;
    if (i == 0) return cont == 0;
    unsigned char c = (unsigned char)s[i - 1];
    int need = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    return need == cont;
}

/* Parses text fed in chunks of `chunk` bytes (0: all at once). Text comes
 * from the deltas; calls from both the deltas and the result, which must
 * agree. */
static parsed parse_text(const char *text, const char *tools_json, size_t chunk) {
    parsed r = {0};
    r.deltas_whole_utf8 = true;
    cJSON *tools = NULL;
    if (tools_json) CHECK(chat_json_parse(tools_json, strlen(tools_json), &tools) == MUSER_OK);
    chat_parser *p = NULL;
    CHECK(chat_parser_new(tools, &p) == MUSER_OK);
    cJSON_Delete(tools);
    if (!p) return r;
    mu_buf reasoning = {0}, content = {0};
    int delta_calls = 0;
    size_t n = strlen(text), step = chunk ? chunk : n;
    chat_delta d;
    for (size_t at = 0; at < n; at += step) {
        size_t len = n - at < step ? n - at : step;
        CHECK(chat_parser_feed(p, text + at, len, &d) == MUSER_OK);
        mu_buf_put(&reasoning, d.reasoning, d.reasoning_len);
        mu_buf_put(&content, d.content, d.content_len);
        if (!ends_whole_utf8(d.content, d.content_len) || !ends_whole_utf8(d.reasoning, d.reasoning_len))
            r.deltas_whole_utf8 = false;
        delta_calls += d.n_calls;
    }
    chat_result res;
    CHECK(chat_parser_finish(p, &d, &res) == MUSER_OK);
    mu_buf_put(&reasoning, d.reasoning, d.reasoning_len);
    mu_buf_put(&content, d.content, d.content_len);
    delta_calls += d.n_calls;
    r.reasoning = mu_buf_take(&reasoning);
    r.content = mu_buf_take(&content);
    CHECKF(strcmp(r.reasoning, res.reasoning) == 0, "reasoning deltas '%s' vs result '%s'", r.reasoning, res.reasoning);
    CHECKF(strcmp(r.content, res.content) == 0, "content deltas '%s' vs result '%s'", r.content, res.content);
    CHECK(delta_calls == res.n_calls);
    r.n_calls = res.n_calls;
    for (int i = 0; i < res.n_calls && i < 8; i++) {
        r.names[i] = strdup(res.calls[i].name);
        r.args[i] = strdup(res.calls[i].arguments);
        r.complete[i] = res.calls[i].complete;
    }
    r.truncated = res.truncated;
    chat_parser_free(p);
    return r;
}

/* Checks text parsed all at once and fed in chunks of 1, 2, 3 and 7 bytes. */
static void expect_parse(const char *text, const char *tools, const char *reasoning, const char *content,
                         int n_calls, const char *const *names, const char *const *args, bool truncated) {
    static const size_t chunks[] = {0, 1, 2, 3, 7};
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
        parsed r = parse_text(text, tools, chunks[c]);
        CHECKF(r.reasoning && strcmp(r.reasoning, reasoning) == 0, "chunk %zu: reasoning '%s', want '%s' in: %s",
               chunks[c], r.reasoning, reasoning, text);
        CHECKF(r.content && strcmp(r.content, content) == 0, "chunk %zu: content '%s', want '%s' in: %s", chunks[c],
               r.content, content, text);
        CHECKF(r.n_calls == n_calls, "chunk %zu: %d calls, want %d in: %s", chunks[c], r.n_calls, n_calls, text);
        for (int i = 0; i < n_calls && i < r.n_calls; i++) {
            CHECKF(strcmp(r.names[i], names[i]) == 0, "call %d name '%s', want '%s'", i, r.names[i], names[i]);
            CHECKF(strcmp(r.args[i], args[i]) == 0, "call %d arguments '%s', want '%s'", i, r.args[i], args[i]);
        }
        CHECKF(r.truncated == truncated, "chunk %zu: truncated %d, want %d in: %s", chunks[c], r.truncated, truncated,
               text);
        CHECKF(r.deltas_whole_utf8, "chunk %zu: a delta split a UTF-8 sequence", chunks[c]);
        parsed_free(&r);
    }
}

#define NO_CALLS 0, NULL, NULL
#define CALLS(n, ...) n, (const char *const[]){__VA_ARGS__}

static const char *const WEATHER_TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"w\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}}}}]";

#define CALL_TEXT(name, params)                                                                          \
    " to=" name "<|message|><atem:function_calls>\n<atem:invoke name=\"" name "\">\n" params              \
    "</atem:invoke>\n</atem:function_calls>"
#define PARAM(k, v) "<atem:parameter name=\"" k "\">" v "</atem:parameter>\n"

static void test_parse_basic(void) {
    expect_parse(" to=self<|message|>The user greets me.<|eom|><|start|>assistant to=user<|message|>Hello!<|eot|>",
                 NULL, "The user greets me.", "Hello!", NO_CALLS, false);
    expect_parse(" to=user<|message|>Just the answer.<|eot|>", NULL, "", "Just the answer.", NO_CALLS, false);
    /* generation stopped at EOG without its text, and at end of text */
    expect_parse(" to=user<|message|>No end token", NULL, "", "No end token", NO_CALLS, false);
    expect_parse(" to=user<|message|>Bye<|end_of_text|>", NULL, "", "Bye", NO_CALLS, false);
    /* several reasoning blocks, then the answer */
    expect_parse(" to=self<|message|>a<|eom|><|start|>assistant to=self<|message|>b<|eom|>"
                 "<|start|>assistant to=user<|message|>c<|eot|>",
                 NULL, "ab", "c", NO_CALLS, false);
    /* text after the end of the turn is not part of it */
    expect_parse(" to=user<|message|>done<|eot|><|start|>assistant to=user<|message|>more", NULL, "", "done",
                 NO_CALLS, false);
    /* no header at all: the text is the answer */
    expect_parse("Plain answer<|eot|>", NULL, "", "Plain answer", NO_CALLS, false);
    expect_parse("assistant is a word<|eot|>", NULL, "", "assistant is a word", NO_CALLS, false);
    expect_parse("<|start|>assistant to=user<|message|>repeated start<|eot|>", NULL, "", "repeated start", NO_CALLS,
                 false);
    /* unknown special tokens never reach the answer */
    expect_parse(" to=user<|message|>a<|reserved_special_token_7|>b<|message|>c<|eot|>", NULL, "", "abc", NO_CALLS,
                 false);
    /* unicode, one byte at a time, never split in a delta */
    expect_parse(" to=self<|message|>Überlegung 🤔<|eom|><|start|>assistant to=user<|message|>日本語 👋🏽 é<|eot|>",
                 NULL, "Überlegung 🤔", "日本語 👋🏽 é", NO_CALLS, false);
}

static void test_parse_tag_lookalikes(void) {
    /* "<|st" that turns out to be text is emitted, not swallowed */
    expect_parse(" to=user<|message|>Use <|st and go on<|eot|>", NULL, "", "Use <|st and go on", NO_CALLS, false);
    expect_parse(" to=user<|message|>ends with <|st", NULL, "", "ends with <|st", NO_CALLS, false);
    expect_parse(" to=user<|message|>a <|story without end|> b", NULL, "", "a <|story without end|> b", NO_CALLS,
                 false);
    expect_parse(" to=user<|message|>x < y and a<b, <atem:not a call><|eot|>", NULL, "",
                 "x < y and a<b, <atem:not a call>", NO_CALLS, false);
    expect_parse(" to=user<|message|>a lone <", NULL, "", "a lone <", NO_CALLS, false);
    /* the longest special-token name (62) is dropped and one longer kept, however the stream is split */
#define NAME62 "m123456789012345678901234567890123456789012345678901234567890H"
    expect_parse(" to=user<|message|>a<|" NAME62 "|>b<|eot|>", NULL, "", "ab", NO_CALLS, false);
    expect_parse(" to=user<|message|>a<|" NAME62 "x|>b<|eot|>", NULL, "", "a<|" NAME62 "x|>b", NO_CALLS, false);
#undef NAME62
    /* while streaming, a possible tag is held back and then released */
    chat_parser *p = NULL;
    CHECK(chat_parser_new(NULL, &p) == MUSER_OK);
    chat_delta d;
    const char *a = " to=user<|message|>abc<|st";
    CHECK(chat_parser_feed(p, a, strlen(a), &d) == MUSER_OK);
    CHECKF(d.content_len == 3 && memcmp(d.content, "abc", 3) == 0, "got '%.*s'", (int)d.content_len, d.content);
    CHECK(chat_parser_feed(p, "ory", 3, &d) == MUSER_OK);
    CHECK(d.content_len == 0); /* still could be <|story|> */
    CHECK(chat_parser_feed(p, " x", 2, &d) == MUSER_OK);
    CHECKF(d.content_len == 9 && memcmp(d.content, "<|story x", 9) == 0, "got '%.*s'", (int)d.content_len, d.content);
    CHECK(chat_parser_feed(p, "<|eot|>", 7, &d) == MUSER_OK);
    CHECK(d.content_len == 0);
    chat_result r;
    CHECK(chat_parser_finish(p, &d, &r) == MUSER_OK);
    CHECK(strcmp(r.content, "abc<|story x") == 0 && r.n_calls == 0 && !r.truncated);
    chat_parser_free(p);
}

static void test_parse_tool_calls(void) {
    /* tool call only */
    expect_parse(CALL_TEXT("get_weather", PARAM("city", "Paris")) "<|eot|>", WEATHER_TOOLS, "", "",
                 CALLS(1, "get_weather"), (const char *const[]){"{\"city\":\"Paris\"}"}, false);
    /* reasoning, answer, then a tool call after <|eom|> (inform then act) */
    expect_parse(" to=self<|message|>Need weather.<|eom|><|start|>assistant to=user<|message|>Let me check.<|eom|>"
                 "<|start|>assistant" CALL_TEXT("get_weather", PARAM("city", "Oslo") PARAM("days", "3")) "<|eot|>",
                 WEATHER_TOOLS, "Need weather.", "Let me check.", CALLS(1, "get_weather"),
                 (const char *const[]){"{\"city\":\"Oslo\",\"days\":3}"}, false);
    /* parallel calls chained with <|eom|><|start|>assistant, and two invokes in one block */
    expect_parse(CALL_TEXT("get_weather", PARAM("city", "Paris")) "<|eom|><|start|>assistant"
                 CALL_TEXT("get_weather", PARAM("city", "Tokyo")) "<|eom|><|start|>assistant to=get_weather<|message|>"
                 "<atem:function_calls>\n<atem:invoke name=\"get_weather\">\n" PARAM("city", "Rome")
                 "</atem:invoke>\n<atem:invoke name=\"get_weather\">\n" PARAM("city", "Lima")
                 "</atem:invoke>\n</atem:function_calls><|eot|>",
                 WEATHER_TOOLS, "", "", CALLS(4, "get_weather", "get_weather", "get_weather", "get_weather"),
                 (const char *const[]){"{\"city\":\"Paris\"}", "{\"city\":\"Tokyo\"}", "{\"city\":\"Rome\"}",
                                       "{\"city\":\"Lima\"}"},
                 false);
    /* the answer runs straight into the block without <|eom|>: no tag in the answer */
    expect_parse(" to=user<|message|>Checking.<atem:function_calls>\n<atem:invoke name=\"get_weather\">\n"
                 PARAM("city", "Nice") "</atem:invoke>\n</atem:function_calls><|eot|>",
                 WEATHER_TOOLS, "", "Checking.", CALLS(1, "get_weather"),
                 (const char *const[]){"{\"city\":\"Nice\"}"}, false);
    /* a tool message whose body is a bare JSON object */
    expect_parse(" to=get_weather<|message|>{\"city\": \"Bern\", \"days\": 2}<|eot|>", WEATHER_TOOLS, "", "",
                 CALLS(1, "get_weather"), (const char *const[]){"{\"city\":\"Bern\",\"days\":2}"}, false);
    /* invoke without a name attribute: the recipient names it; namespaced tool */
    expect_parse(" to=fs.read<|message|><atem:function_calls>\n<atem:invoke>\n" PARAM("path", "a.txt")
                 "</atem:invoke>\n</atem:function_calls>",
                 NULL, "", "", CALLS(1, "fs.read"), (const char *const[]){"{\"path\":\"a.txt\"}"}, false);
    /* a call with no parameters; a repeated parameter keeps the last value */
    expect_parse(CALL_TEXT("now", "") "<|eom|><|start|>assistant" CALL_TEXT("f", PARAM("a", "1") PARAM("b", "2") PARAM("a", "3")),
                 NULL, "", "", CALLS(2, "now", "f"), (const char *const[]){"{}", "{\"a\":3,\"b\":2}"}, false);
}

static void test_parse_typed_arguments(void) {
    const char *tools =
        "[{\"type\":\"function\",\"function\":{\"name\":\"rec\",\"parameters\":{\"type\":\"object\",\"properties\":{"
        "\"s\":{\"type\":\"string\"},\"digits\":{\"type\":\"string\"},\"i\":{\"type\":\"integer\"},"
        "\"f\":{\"type\":\"number\"},\"b\":{\"type\":\"boolean\"},\"o\":{\"type\":\"object\"},"
        "\"a\":{\"type\":\"array\"},\"n\":{\"type\":[\"integer\",\"null\"]},\"bad\":{\"type\":\"integer\"},"
        "\"badobj\":{\"type\":\"object\"},\"sn\":{\"type\":[\"string\",\"number\"]},\"any\":{\"description\":\"x\"}}}}}]";
    const char *text = CALL_TEXT("rec", PARAM("s", " two\nlines \"q\" ") PARAM("digits", "007") PARAM("i", " 42\n")
                       PARAM("f", "1.50") PARAM("b", "false") PARAM("o", "{\"k\": [1, 2.0, null]}")
                       PARAM("a", "[\"x\", {\"y\": 1e3}]") PARAM("n", "null") PARAM("bad", "forty")
                       PARAM("badobj", "[1]") PARAM("sn", "12") PARAM("any", "3.0")) "<|eot|>";
    expect_parse(text, tools, "", "", CALLS(1, "rec"),
                 (const char *const[]){"{\"s\":\" two\\nlines \\\"q\\\" \",\"digits\":\"007\",\"i\":42,\"f\":1.5,"
                                       "\"b\":false,\"o\":{\"k\":[1,2.0,null]},\"a\":[\"x\",{\"y\":1000.0}],\"n\":null,"
                                       "\"bad\":\"forty\",\"badobj\":\"[1]\",\"sn\":\"12\",\"any\":3.0}"},
                 false);
    /* without a schema: JSON values other than strings take their type */
    const char *untyped = CALL_TEXT("g", PARAM("n", "42") PARAM("t", "true") PARAM("z", "null") PARAM("l", "[1, \"a\"]")
                          PARAM("o", "{\"a\": {}}") PARAM("s", "hello world") PARAM("q", "\"quoted\"")
                          PARAM("e", "") PARAM("u", "Grüße 👋")) "<|eot|>";
    expect_parse(untyped, NULL, "", "", CALLS(1, "g"),
                 (const char *const[]){"{\"n\":42,\"t\":true,\"z\":null,\"l\":[1,\"a\"],\"o\":{\"a\":{}},"
                                       "\"s\":\"hello world\",\"q\":\"\\\"quoted\\\"\",\"e\":\"\",\"u\":\"Grüße 👋\"}"},
                 false);
    /* arguments are strict JSON: a float beyond double range is null */
    expect_parse(CALL_TEXT("g", PARAM("big", "1e999") PARAM("l", "[-2E400, 1]")) "<|eot|>", NULL, "", "",
                 CALLS(1, "g"), (const char *const[]){"{\"big\":null,\"l\":[null,1]}"}, false);
}

static void test_parse_truncated(void) {
    /* stopped inside a parameter value: the call is reported, incomplete */
    const char *cut = " to=user<|message|>One moment.<|eom|><|start|>assistant to=get_weather<|message|>"
                      "<atem:function_calls>\n<atem:invoke name=\"get_weather\">\n" PARAM("days", "2")
                      "<atem:parameter name=\"city\">Par";
    expect_parse(cut, WEATHER_TOOLS, "", "One moment.", CALLS(1, "get_weather"),
                 (const char *const[]){"{\"days\":2}"}, true);
    parsed r = parse_text(cut, WEATHER_TOOLS, 1);
    CHECK(r.n_calls == 1 && !r.complete[0]);
    parsed_free(&r);
    /* stopped inside the opening invoke tag, inside the header, inside the answer's ATEM tag */
    expect_parse(CALL_TEXT("get_weather", PARAM("city", "Oslo")) "<|eom|><|start|>assistant to=get_weather<|message|>"
                 "<atem:function_calls>\n<atem:invo",
                 WEATHER_TOOLS, "", "", CALLS(1, "get_weather"), (const char *const[]){"{\"city\":\"Oslo\"}"}, true);
    expect_parse(" to=self<|message|>hmm<|eom|><|start|>assistant to=us", NULL, "hmm", "", NO_CALLS, true);
    expect_parse(" to=user<|message|>Sure.<atem:function_ca", NULL, "", "Sure.", NO_CALLS, true);
    expect_parse(" to=self<|message|>cut mid-reasoning", NULL, "cut mid-reasoning", "", NO_CALLS, false);
    expect_parse("", NULL, "", "", NO_CALLS, false);
    expect_parse(" to=", NULL, "", "", NO_CALLS, true);
    /* a block whose invokes all closed but whose end tag never came */
    expect_parse(" to=f<|message|><atem:function_calls>\n<atem:invoke name=\"f\">\n" PARAM("x", "1") "</atem:invoke>\n",
                 NULL, "", "", CALLS(1, "f"), (const char *const[]){"{\"x\":1}"}, true);
}

/* What the renderer writes for an assistant tool call parses back to the
 * same arguments. */
static void test_render_parse_round_trip(void) {
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"rec\",\"description\":\"d\",\"parameters\":{"
                        "\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\"},\"i\":{\"type\":\"integer\"},"
                        "\"f\":{\"type\":\"number\"},\"b\":{\"type\":\"boolean\"},\"o\":{\"type\":\"object\"},"
                        "\"a\":{\"type\":\"array\"}}}}}]";
    const char *msgs = "[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"tool_calls\":[{\"function\":"
                       "{\"name\":\"rec\",\"arguments\":{\"s\":\"multi\\nline \\\"text\\\" ü\",\"i\":-7,\"f\":2.5,"
                       "\"b\":true,\"o\":{\"k\":[1,null,\"v\"]},\"a\":[1.0,\"two\"]}}}]}]";
    muser_chat_options o = {.current_date = "2026-08-20"};
    char *out = NULL;
    CHECK(muser_chat_render(msgs, tools, &o, &out) == MUSER_OK);
    const char *gen = out ? strstr(out, "<|start|>assistant to=rec") : NULL;
    CHECK(gen != NULL);
    if (gen) {
        gen += strlen("<|start|>assistant");
        expect_parse(gen, tools, "", "", CALLS(1, "rec"),
                     (const char *const[]){"{\"s\":\"multi\\nline \\\"text\\\" ü\",\"i\":-7,\"f\":2.5,\"b\":true,"
                                           "\"o\":{\"k\":[1,null,\"v\"]},\"a\":[1.0,\"two\"]}"},
                     false);
    }
    free(out);
}

static void test_parser_api(void) {
    chat_parser *p = NULL;
    cJSON *bad = cJSON_CreateObject();
    CHECK(chat_parser_new(bad, &p) == MUSER_EINVAL && p == NULL);
    cJSON_Delete(bad);
    CHECK(chat_parser_feed(NULL, "x", 1, NULL) == MUSER_EINVAL);
    CHECK(chat_parser_new(NULL, &p) == MUSER_OK);
    CHECK(chat_parser_feed(p, " to=user<|message|>hi", 21, NULL) == MUSER_OK);
    chat_result r;
    CHECK(chat_parser_finish(p, NULL, &r) == MUSER_OK && strcmp(r.content, "hi") == 0);
    /* feeds after finish are ignored; finish again gives the same result */
    CHECK(chat_parser_feed(p, " more", 5, NULL) == MUSER_OK);
    CHECK(chat_parser_finish(p, NULL, &r) == MUSER_OK && strcmp(r.content, "hi") == 0);
    chat_parser_free(p);
    chat_parser_free(NULL);
}

static bool parsed_equal(const parsed *a, const parsed *b) {
    if (strcmp(a->reasoning, b->reasoning) || strcmp(a->content, b->content) || a->n_calls != b->n_calls ||
        a->truncated != b->truncated)
        return false;
    for (int i = 0; i < a->n_calls && i < 8; i++)
        if (strcmp(a->names[i], b->names[i]) || strcmp(a->args[i], b->args[i]) || a->complete[i] != b->complete[i])
            return false;
    return true;
}

/* Random sequences of protocol pieces: the parse must not depend on how
 * the text is split (and must not crash on any of it). */
static void test_parse_split_invariance(void) {
    static const char *const pieces[] = {
        " to=", "self", "user", "get_weather", "<|message|>", "<|eom|>", "<|eot|>", "<|start|>", "assistant",
        "<atem:function_calls>", "</atem:function_calls>", "<atem:invoke name=\"get_weather\">", "</atem:invoke>",
        "<atem:parameter name=\"city\">", "<atem:parameter name=\"days\">", "</atem:parameter>", "\n", "hello",
        "<", "|", ">", "<|st", "é", "👋", "42", "{\"a\": 1}", " ", "<atem:", "<|end_of_text|>", "<|x|>"};
    const int n_pieces = (int)(sizeof pieces / sizeof *pieces);
    uint64_t rng = 12345;
    int mismatches = 0;
    for (int iter = 0; iter < 1500; iter++) {
        mu_buf b = {0};
        int len = 1 + (int)(tl_rand_u64(&rng) % 24);
        /* most runs start like a real output */
        if (tl_rand_u64(&rng) % 4) mu_buf_puts(&b, tl_rand_u64(&rng) % 2 ? " to=user<|message|>" : " to=get_weather<|message|>");
        for (int i = 0; i < len; i++) mu_buf_puts(&b, pieces[tl_rand_u64(&rng) % (uint64_t)n_pieces]);
        char *text = mu_buf_take(&b);
        size_t chunk = 1 + (size_t)(tl_rand_u64(&rng) % 5);
        parsed whole = parse_text(text, WEATHER_TOOLS, 0);
        parsed bytes = parse_text(text, WEATHER_TOOLS, 1);
        parsed pieces_ = parse_text(text, WEATHER_TOOLS, chunk);
        if (!parsed_equal(&whole, &bytes) || !parsed_equal(&whole, &pieces_)) {
            if (mismatches++ < 5) fprintf(stderr, "split changes the parse of: %s\n", text);
        }
        CHECK(whole.deltas_whole_utf8 && bytes.deltas_whole_utf8 && pieces_.deltas_whole_utf8);
        /* the answer never shows protocol tags */
        CHECKF(!strstr(whole.content, "<|message|>") && !strstr(whole.content, "<|eom|>") &&
                   !strstr(whole.content, "<atem:function_calls>") && !strstr(whole.content, "<|start|>"),
               "tag in content '%s' from: %s", whole.content, text);
        parsed_free(&whole);
        parsed_free(&bytes);
        parsed_free(&pieces_);
        free(text);
    }
    CHECKF(mismatches == 0, "%d texts parse differently when split", mismatches);
}

int main(void) {
    test_parse_split_invariance();
    test_parse_basic();
    test_parse_tag_lookalikes();
    test_parse_tool_calls();
    test_parse_typed_arguments();
    test_parse_truncated();
    test_render_parse_round_trip();
    test_parser_api();
    test_recorded_conversations();
    test_render_api();
    test_string_arguments();
    test_plain_cjson_numbers();
    test_render_errors();
    return tl_finish("chat");
}
