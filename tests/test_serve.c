/* test_serve.c — request parsing and validation, stop strings, and the
 * OpenAI response shapes of the server, without sockets. Chat prompts are
 * rendered with the real template; tokenization uses the nano vocabulary. */
#include <stdlib.h>
#include <string.h>

#include "serve/request.h"
#include "serve/response.h"
#include "serve/sample_pool.h"
#include "sample/sample.h"
#include "testlib.h"

static srv_parse_opts opts(bool chat) {
    srv_parse_opts o = {.chat_format = chat, .test_hooks = false, .current_date = "2026-01-01"};
    o.defaults = muser_sampler_default_params(NULL);
    return o;
}

static int chat(const char *body, srv_request *r, srv_error *e) {
    srv_parse_opts o = opts(true);
    return srv_parse_chat(body, strlen(body), &o, r, e);
}

/* A body that must fail with this status and param. */
static void expect_chat_error(const char *body, int status, const char *param) {
    srv_request r;
    srv_error e;
    int rc = chat(body, &r, &e);
    CHECKF(rc != 0, "accepted: %s", body);
    if (rc == 0) {
        srv_request_free(&r);
        return;
    }
    CHECKF(e.status == status, "%s: status %d (want %d): %s", body, e.status, status, e.message);
    CHECKF(!param || strcmp(e.param, param) == 0, "%s: param '%s' (want '%s')", body, e.param, param);
    CHECKF(e.message[0] && e.type, "%s: no message", body);
}

static void test_chat_fields(void) {
    srv_request r;
    srv_error e;
    const char *body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true},\"max_tokens\":5,\"max_completion_tokens\":7,"
                       "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":3,\"min_p\":0.1,\"seed\":-1,"
                       "\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,\"stop\":[\"a\",\"\",\"bc\"],"
                       "\"logit_bias\":{\"12\":-100,\"7\":2.5},\"user\":\"ignored\",\"unknown_field\":{}}";
    CHECK(chat(body, &r, &e) == 0);
    CHECK(r.kind == SRV_CHAT && r.stream && r.include_usage);
    CHECK(r.model && !strcmp(r.model, "m"));
    CHECK(r.max_tokens == 7); /* max_completion_tokens wins */
    CHECK_NEAR(r.sampling.temperature, 0.5, 1e-6);
    CHECK_NEAR(r.sampling.top_p, 0.9, 1e-6);
    CHECK(r.sampling.top_k == 3);
    CHECK_NEAR(r.sampling.min_p, 0.1, 1e-6);
    CHECK(r.seed_given && r.sampling.seed == UINT64_MAX);
    CHECK(r.n_stop == 2 && !strcmp(r.stop[0], "a") && !strcmp(r.stop[1], "bc"));
    CHECK(r.n_bias == 2 && r.bias_ids[0] == 12 && r.bias[0] == -100.0f && r.bias_ids[1] == 7);
    CHECK(r.prompt_text && strstr(r.prompt_text, "<|start|>user<|message|>hi<|eot|><|start|>assistant"));
    CHECK(!r.tools_json && !r.forced_prefix && !r.test_script);
    srv_request_free(&r);

    /* defaults: the model's sampling, no limit */
    CHECK(chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r, &e) == 0);
    CHECK(r.max_tokens == -1 && !r.stream && !r.seed_given && !r.model);
    CHECK(r.sampling.top_k == muser_sampler_default_params(NULL).top_k);
    srv_request_free(&r);

    /* the one-string stop and null fields */
    CHECK(chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":\"\\n\",\"temperature\":null}", &r, &e) == 0);
    CHECK(r.n_stop == 1 && !strcmp(r.stop[0], "\n"));
    srv_request_free(&r);
}

static void test_chat_errors(void) {
    const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char body[512];
#define WITH(extra) (snprintf(body, sizeof body, "{%s,%s}", m, extra), body)
    expect_chat_error("", 400, NULL);
    expect_chat_error("{", 400, NULL);
    expect_chat_error("[]", 400, NULL);
    expect_chat_error("{\"messages\": 1}", 400, "messages");
    expect_chat_error("{}", 400, "messages");
    expect_chat_error("{\"messages\": []}", 400, "messages");
    expect_chat_error("{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", 400, "messages");
    expect_chat_error(WITH("\"temperature\":\"hot\""), 400, "temperature");
    expect_chat_error(WITH("\"temperature\":2.5"), 400, "temperature");
    expect_chat_error(WITH("\"top_p\":-0.1"), 400, "top_p");
    expect_chat_error(WITH("\"top_k\":1.5"), 400, "top_k");
    expect_chat_error(WITH("\"max_tokens\":0"), 400, "max_tokens");
    expect_chat_error(WITH("\"max_tokens\":\"5\""), 400, "max_tokens");
    { /* integer ranges read as integers, not 2.14748e+09 */
        srv_request r;
        srv_error e;
        CHECK(chat(WITH("\"max_tokens\":3000000000"), &r, &e) != 0);
        CHECKF(strstr(e.message, "is 3000000000; it must be between 1 and 2147483647"), "%s", e.message);
    }
    expect_chat_error(WITH("\"stream\":1"), 400, "stream");
    expect_chat_error(WITH("\"stream_options\":true"), 400, "stream_options");
    expect_chat_error(WITH("\"stop\":5"), 400, "stop");
    expect_chat_error(WITH("\"stop\":[\"a\",3]"), 400, "stop");
    expect_chat_error(WITH("\"seed\":1e300"), 400, "seed");
    expect_chat_error(WITH("\"logit_bias\":{\"-3\":1}"), 400, "logit_bias");
    expect_chat_error(WITH("\"logit_bias\":{\"3\":500}"), 400, "logit_bias");
    expect_chat_error(WITH("\"n\":2"), 400, "n");
    expect_chat_error(WITH("\"logprobs\":true"), 400, "logprobs");
    expect_chat_error(WITH("\"top_logprobs\":2"), 400, "top_logprobs");
    expect_chat_error(WITH("\"response_format\":{\"type\":\"json_object\"}"), 400, "response_format");
    expect_chat_error(WITH("\"reasoning_effort\":\"none\""), 400, "reasoning_effort");
    expect_chat_error(WITH("\"chat_template_kwargs\":{\"reasoning_strength\":\"max\"}"), 400,
                      "chat_template_kwargs.reasoning_strength");
    expect_chat_error(WITH("\"muser_test_script\":\"x\""), 400, "muser_test_script"); /* hooks are off */
    expect_chat_error(WITH("\"tools\":{}"), 400, "tools");
    expect_chat_error(WITH("\"tools\":[{\"type\":\"retrieval\"}]"), 400, "tools[0]");
    expect_chat_error(WITH("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]"), 400, "tools[0]");
    expect_chat_error(WITH("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]"), 400,
                      "tools[0]");
    expect_chat_error(WITH("\"tool_choice\":\"required\""), 400, "tool_choice");
    expect_chat_error(WITH("\"tool_choice\":\"sometimes\""), 400, "tool_choice");
    expect_chat_error(WITH("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                           "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}"),
                      400, "tool_choice");
#undef WITH
    /* invalid UTF-8 is named as such */
    srv_request r;
    srv_error e;
    const char bad_utf8[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}";
    CHECK(chat(bad_utf8, &r, &e) != 0 && e.code && !strcmp(e.code, "invalid_utf8"));
    /* a model without the chat format refuses chat */
    srv_parse_opts plain = opts(false);
    const char *ok = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    CHECK(srv_parse_chat(ok, strlen(ok), &plain, &r, &e) != 0 && e.status == 400 && e.code &&
          !strcmp(e.code, "unsupported_model"));
}

static void test_tools(void) {
    srv_request r;
    srv_error e;
    const char *tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
                        "{\"type\":\"object\",\"properties\":{\"temp\":{\"type\":\"number\"}}}}},"
                        "{\"type\":\"function\",\"function\":{\"name\":\"ns.other\"}}]";
    char body[1024];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s}", tools);
    CHECK(chat(body, &r, &e) == 0);
    CHECK(r.tools_json && strstr(r.tools_json, "get_weather"));
    CHECK(strstr(r.prompt_text, "get_weather") != NULL);
    CHECK(!r.forced_prefix);
    srv_request_free(&r);

    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"tool_choice\":\"none\"}", tools);
    CHECK(chat(body, &r, &e) == 0);
    CHECK(!r.tools_json && !strstr(r.prompt_text, "get_weather"));
    srv_request_free(&r);

    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,"
             "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}}",
             tools);
    CHECK(chat(body, &r, &e) == 0);
    CHECK(r.forced_prefix && !strcmp(r.forced_prefix, " to=get_weather<|message|><atem:function_calls>\n"
                                                      "<atem:invoke name=\"get_weather\">\n"));
    size_t n = strlen(r.prompt_text), k = strlen(r.forced_prefix);
    CHECK(n > k && !strcmp(r.prompt_text + n - k, r.forced_prefix)); /* the prompt ends with the forced header */
    srv_request_free(&r);

    /* history with a tool call whose arguments are a JSON string, and the tool's answer */
    const char *history =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":null,"
        "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "\"arguments\":\"{\\\"temp\\\": 1.0}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"name\":"
        "\"get_weather\",\"content\":\"sunny\"}]}";
    CHECK(chat(history, &r, &e) == 0);
    CHECK(r.prompt_text && strstr(r.prompt_text, "<atem:parameter name=\"temp\">1.0</atem:parameter>"));
    srv_request_free(&r);
}

static void test_reasoning(void) {
    srv_request r;
    srv_error e;
    struct { const char *effort, *line; } cases[] = {
        {"low", "Reasoning strength: low."}, {"medium", "Reasoning strength: medium."},
        {"high", "Reasoning strength: high."}, {"xhigh", "Reasoning strength: xhigh."},
        {"minimal", "Reasoning strength: low."},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"%s\"}",
                 cases[i].effort);
        CHECK(chat(body, &r, &e) == 0);
        CHECKF(r.prompt_text && strstr(r.prompt_text, cases[i].line), "%s", cases[i].effort);
        srv_request_free(&r);
    }
    const char *kw = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"low\","
                     "\"chat_template_kwargs\":{\"reasoning_strength\":\"xhigh\"}}";
    CHECK(chat(kw, &r, &e) == 0 && strstr(r.prompt_text, "Reasoning strength: xhigh."));
    srv_request_free(&r);
}

static void test_completions(void) {
    srv_parse_opts o = opts(false);
    srv_request r;
    srv_error e;
    const char *a = "{\"prompt\":\"Once\",\"max_tokens\":3}";
    CHECK(srv_parse_completion(a, strlen(a), &o, &r, &e) == 0);
    CHECK(r.kind == SRV_COMPLETION && !strcmp(r.prompt_text, "Once") && r.max_tokens == 3);
    srv_request_free(&r);
    const char *b = "{\"prompt\":[1,2,3]}";
    CHECK(srv_parse_completion(b, strlen(b), &o, &r, &e) == 0);
    CHECK(r.n_prompt_ids == 3 && r.prompt_ids[2] == 3 && !r.prompt_text);
    srv_request_free(&r);
    const char *c = "{\"prompt\":[\"one\"]}";
    CHECK(srv_parse_completion(c, strlen(c), &o, &r, &e) == 0 && !strcmp(r.prompt_text, "one"));
    srv_request_free(&r);
    const char *bad[] = {"{}", "{\"prompt\":5}", "{\"prompt\":[]}", "{\"prompt\":[\"a\",\"b\"]}",
                         "{\"prompt\":[1,-2]}", "{\"prompt\":[1.5]}", "{\"prompt\":\"a\",\"echo\":true}",
                         "{\"prompt\":\"a\",\"best_of\":2}", "{\"prompt\":\"a\",\"logprobs\":2}",
                         "{\"prompt\":\"a\",\"suffix\":\"b\"}", "{\"prompt\":\"a\",\"n\":3}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = srv_parse_completion(bad[i], strlen(bad[i]), &o, &r, &e);
        CHECKF(rc != 0 && e.status == 400, "accepted: %s", bad[i]);
        if (rc == 0) srv_request_free(&r);
    }
}

static void test_tokenize(void) {
    char path[4096];
    muser_model *m = NULL;
    if (muser_model_load_vocab(tl_test_data("vocab/nano-vocab.gguf", path, sizeof path), &m) != 0) {
        CHECKF(0, "nano vocabulary: %s", muser_last_error());
        return;
    }
    srv_request r;
    srv_error e;
    CHECK(chat("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &r, &e) == 0);
    muser_token *t = NULL;
    int n = 0;
    CHECK(srv_request_tokenize(m, &r, 100000, &t, &n, &e) == 0);
    CHECK(n > 10 && t[0] == muser_vocab_bos(m)); /* the template's BOS text became BOS */
    int bos_count = 0;
    for (int i = 0; i < n; i++) bos_count += t[i] == muser_vocab_bos(m);
    CHECK(bos_count == 1);
    free(t);
    /* the context bound: the prompt plus one generated token must fit */
    CHECK(srv_request_tokenize(m, &r, n, &t, &n, &e) != 0 && e.code && !strcmp(e.code, "context_length_exceeded"));
    srv_request_free(&r);

    srv_parse_opts o = opts(false);
    const char *ids = "{\"prompt\":[1,2,99999]}";
    CHECK(srv_parse_completion(ids, strlen(ids), &o, &r, &e) == 0);
    CHECK(srv_request_tokenize(m, &r, 1000, &t, &n, &e) != 0 && e.status == 400 && !strcmp(e.param, "prompt"));
    srv_request_free(&r);
    const char *bias = "{\"prompt\":\"a\",\"logit_bias\":{\"99999\":1}}";
    CHECK(srv_parse_completion(bias, strlen(bias), &o, &r, &e) == 0);
    CHECK(srv_request_tokenize(m, &r, 1000, &t, &n, &e) != 0 && !strcmp(e.param, "logit_bias"));
    srv_request_free(&r);
    muser_model_free(m);
}

/* Pushes pieces through a stopper and returns what was shown. */
static char *run_stopper(char *const *stops, int n_stops, const char *const *pieces, int n, bool *matched) {
    srv_stopper st;
    srv_stopper_init(&st, stops, n_stops);
    mu_buf out = {0};
    for (int i = 0; i < n; i++) srv_stopper_push(&st, pieces[i], strlen(pieces[i]), &out);
    srv_stopper_flush(&st, &out);
    *matched = st.matched;
    srv_stopper_free(&st);
    return mu_buf_take(&out);
}

static void test_stopper(void) {
    char *stops[] = {"STOP", "ab"};
    bool matched;
    const char *p1[] = {"hello S", "TO", "P world"};
    char *s = run_stopper(stops, 2, p1, 3, &matched);
    CHECK(matched && !strcmp(s, "hello "));
    free(s);
    const char *p2[] = {"a", "xa", "a", "b", "c"};
    s = run_stopper(stops, 2, p2, 5, &matched);
    CHECK(matched && !strcmp(s, "axa"));
    free(s);
    const char *p3[] = {"no stop here, but ends with S", "T"};
    s = run_stopper(stops, 2, p3, 2, &matched);
    CHECK(!matched && !strcmp(s, "no stop here, but ends with ST")); /* held text comes out at the end */
    free(s);
    const char *p4[] = {"plain"};
    s = run_stopper(NULL, 0, p4, 1, &matched);
    CHECK(!matched && !strcmp(s, "plain"));
    free(s);
}

static void test_error_shape(void) {
    srv_error e;
    srv_fail(&e, 404, "invalid_request_error", "model_not_found", "model", "no \"%s\"", "x");
    mu_buf b = {0};
    srv_error_json(&b, &e);
    CHECK(!strcmp(b.data, "{\"error\":{\"message\":\"no \\\"x\\\"\",\"type\":\"invalid_request_error\",\"param\":"
                          "\"model\",\"code\":\"model_not_found\"}}"));
    mu_buf_free(&b);
    srv_bad_param(&e, NULL, "plain");
    srv_error_json(&b, &e);
    CHECK(strstr(b.data, "\"param\":null,\"code\":null") != NULL);
    mu_buf_free(&b);
}

/* A non-streaming chat output: reasoning, answer and a call, typed by the tools. */
static void test_output(void) {
    srv_request r;
    memset(&r, 0, sizeof r);
    r.kind = SRV_CHAT;
    r.tools_json = strdup("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                          "\"properties\":{\"n\":{\"type\":\"integer\"}}}}}]");
    srv_output o;
    CHECK(srv_output_init(&o, &r, "chatcmpl-1", "model-x", 7) == 0);
    mu_buf out = {0};
    const char *pieces[] = {" to=self<|message|>think<|eom|><|start|>assistant to=f<|message|><atem:function_calls>\n",
                            "<atem:invoke name=\"f\">\n<atem:parameter name=\"n\">4</atem:parameter>\n",
                            "</atem:invoke>\n</atem:function_calls>"};
    for (int i = 0; i < 3; i++) CHECK(!srv_output_push(&o, pieces[i], &out));
    CHECK(out.len == 0); /* nothing is written before the end when not streaming */
    srv_output_finish(&o, SRV_FINISH_STOP, 10, 4, 20, &out);
    cJSON *v = cJSON_Parse(out.data);
    CHECK(v != NULL);
    const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItem(v, "choices"), 0);
    const cJSON *msg = cJSON_GetObjectItem(choice, "message");
    CHECK(!strcmp(cJSON_GetObjectItem(choice, "finish_reason")->valuestring, "tool_calls"));
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(msg, "content")));
    CHECK(!strcmp(cJSON_GetObjectItem(msg, "reasoning_content")->valuestring, "think"));
    const cJSON *call = cJSON_GetArrayItem(cJSON_GetObjectItem(msg, "tool_calls"), 0);
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(call, "function"), "arguments")->valuestring, "{\"n\":4}"));
    CHECK(!strncmp(cJSON_GetObjectItem(call, "id")->valuestring, "call_", 5));
    const cJSON *usage = cJSON_GetObjectItem(v, "usage");
    CHECK(cJSON_GetObjectItem(usage, "total_tokens")->valueint == 30);
    CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(usage, "prompt_tokens_details"), "cached_tokens")->valueint == 4);
    CHECK(!strcmp(cJSON_GetObjectItem(v, "model")->valuestring, "model-x"));
    cJSON_Delete(v);
    mu_buf_free(&out);
    srv_output_free(&o);
    srv_request_free(&r);

    /* streaming completions end with a finish chunk, usage, and [DONE] */
    memset(&r, 0, sizeof r);
    r.kind = SRV_COMPLETION;
    r.stream = r.include_usage = true;
    CHECK(srv_output_init(&o, &r, "cmpl-1", "m", 1) == 0);
    srv_output_push(&o, "abc", &out);
    srv_output_finish(&o, SRV_FINISH_LENGTH, 1, 0, 1, &out);
    CHECK(!strncmp(out.data, "data: {", 7));
    CHECK(strstr(out.data, "\"text\":\"abc\"") && strstr(out.data, "\"finish_reason\":\"length\""));
    CHECK(strstr(out.data, "\"usage\":{") && strstr(out.data, "data: [DONE]\n\n"));
    mu_buf_free(&out);
    srv_output_free(&o);
    srv_request_free(&r);
}

/* The pool draws every job as a twin sampler (same seed) drawing alone
 * would, bias included, with 0, 1 and 3 helpers, over several steps (the
 * samplers' penalty windows advance); every fourth job (a top-k sampler
 * without penalties) from only its top logits after its bias. */
static void test_sample_pool(void) {
    enum { V = 1000, N = 37, STEPS = 4 };
    static float logits[N][V], biased[V], top_vals[N][MUSER_TOP_MAX];
    static muser_token top_ids[N][MUSER_TOP_MAX];
    static const muser_token ids[2] = {5, 900};
    static const float bias[2] = {-100.0f, 3.0f};
    const int helper_counts[] = {0, 1, 3};
    for (size_t h = 0; h < sizeof helper_counts / sizeof helper_counts[0]; h++) {
        srv_sample_pool *pool = NULL;
        CHECK(srv_sample_pool_new(helper_counts[h], V, &pool) == 0 && pool);
        muser_sampler *a[N], *b[N];
        srv_sample_job jobs[N];
        for (int i = 0; i < N; i++) {
            muser_sampler_params sp = muser_sampler_default_params(NULL);
            sp.seed = 1000 + (uint64_t)i;
            sp.repeat_penalty = i % 4 == 2 ? 1.0f : 1.1f;
            a[i] = muser_sampler_new(&sp, V);
            b[i] = muser_sampler_new(&sp, V);
        }
        int same = 0, drawn = 0;
        for (int step = 0; step < STEPS; step++) {
            uint32_t x = 12345u + (uint32_t)step * 7919u;
            for (int i = 0; i < N; i++)
                for (int v = 0; v < V; v++) {
                    x = x * 1664525u + 1013904223u;
                    logits[i][v] = (float)(x >> 8) / (float)(1u << 24) * 8.0f - 4.0f;
                }
            for (int i = 0; i < N; i++) {
                const int n_bias = i % 3 == 0 ? 2 : 0;
                jobs[i] = (srv_sample_job){.sampler = a[i], .logits = logits[i], .bias_ids = ids, .bias = bias,
                                           .n_bias = n_bias, .out = -1};
                if (i % 4 != 2) continue;
                const int k = muser_sampler_top_candidates(a[i]);
                CHECK(k >= 1 && k <= MUSER_TOP_MAX);
                memcpy(biased, logits[i], sizeof biased);
                for (int j = 0; j < n_bias; j++) biased[ids[j]] += bias[j];
                mu_top_logits(biased, V, k, top_vals[i], top_ids[i]);
                jobs[i] = (srv_sample_job){.sampler = a[i], .top_logits = top_vals[i], .top_ids = top_ids[i],
                                           .n_top = k, .out = -1};
            }
            srv_sample_pool_run(pool, jobs, N);
            for (int i = 0; i < N; i++) {
                const float *l = logits[i];
                if (i % 3 == 0) {
                    memcpy(biased, l, sizeof biased);
                    biased[ids[0]] += bias[0];
                    biased[ids[1]] += bias[1];
                    l = biased;
                }
                const muser_token want = muser_sampler_sample(b[i], l);
                same += jobs[i].out == want;
                drawn++;
                if (i % 3 == 0) CHECK(jobs[i].out != ids[0]);
            }
        }
        CHECKF(same == drawn, "sample pool, %d helpers: %d of %d draws as drawn alone", helper_counts[h], same, drawn);
        for (int i = 0; i < N; i++) muser_sampler_free(a[i]), muser_sampler_free(b[i]);
        srv_sample_pool_free(pool);
    }
}

int main(void) {
    test_chat_fields();
    test_chat_errors();
    test_tools();
    test_reasoning();
    test_completions();
    test_tokenize();
    test_stopper();
    test_error_shape();
    test_output();
    test_sample_pool();
    return tl_finish("serve");
}
