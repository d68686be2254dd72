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
    chat_buf b = {0};
    chat_json_dump(&b, v, true);
    char *s = chat_buf_take(&b);
    CHECKF(s && strcmp(s, "[1, 2.5, 1e+20, 0, 3, 1e-07]") == 0, "got %s", s ? s : "(null)");
    free(s);
    chat_json_dump(&b, v, false);
    s = chat_buf_take(&b);
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

int main(void) {
    test_recorded_conversations();
    test_render_api();
    test_string_arguments();
    test_plain_cjson_numbers();
    test_render_errors();
    return tl_finish("chat");
}
