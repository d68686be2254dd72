/* request.c — parsing and validation of OpenAI request bodies.
 *
 * Policy: a field we know with a value we cannot honour (n > 1, logprobs,
 * a JSON response format, tool_choice "required" over several tools) is a
 * 400 naming the field; a field we do not know is ignored, as llama-server
 * does, since clients add vendor extras freely.
 */
#include "serve/request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "text/utf8.h"

static int vfail(srv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt,
                 va_list ap) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    return -1;
}

int srv_fail(srv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(e, status, type, code, param, fmt, ap);
    va_end(ap);
    return -1;
}

int srv_bad_param(srv_error *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(e, 400, "invalid_request_error", NULL, param, fmt, ap);
    va_end(ap);
    return -1;
}

static int unsupported(srv_error *e, const char *param, const char *what) {
    return srv_fail(e, 400, "invalid_request_error", "unsupported_parameter", param, "%s", what);
}

/* ---- typed fields --------------------------------------------------------------- */

static const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNull(v) ? NULL : v;
}

int srv_get_bool(const cJSON *obj, const char *key, bool *out, srv_error *e) {
    const cJSON *v = field(obj, key);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return srv_bad_param(e, key, "'%s' must be a boolean (true or false)", key);
    *out = cJSON_IsTrue(v);
    return 0;
}

int srv_get_string(const cJSON *obj, const char *key, const char **out, srv_error *e) {
    const cJSON *v = field(obj, key);
    if (!v) return 0;
    if (!cJSON_IsString(v)) return srv_bad_param(e, key, "'%s' must be a string", key);
    *out = v->valuestring;
    return 0;
}

static int get_number(const cJSON *obj, const char *key, double lo, double hi, double *out, bool *given,
                      srv_error *e) {
    const cJSON *v = field(obj, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return srv_bad_param(e, key, "'%s' must be a number", key);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return srv_bad_param(e, key, "'%s' is %g; it must be between %g and %g", key, v->valuedouble, lo, hi);
    *out = v->valuedouble;
    if (given) *given = true;
    return 0;
}

static bool is_integer(const cJSON *v) {
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble) &&
           fabs(v->valuedouble) < 9007199254740992.0;
}

static int get_int(const cJSON *obj, const char *key, double lo, double hi, double *out, bool *given,
                   srv_error *e) {
    const cJSON *v = field(obj, key);
    if (!v) return 0;
    if (!is_integer(v)) return srv_bad_param(e, key, "'%s' must be an integer", key);
    if (v->valuedouble < lo || v->valuedouble > hi) /* (integers printed whole, not as 2.14748e+09) */
        return srv_bad_param(e, key, "'%s' is %.0f; it must be between %.0f and %.0f", key, v->valuedouble, lo, hi);
    return get_number(obj, key, lo, hi, out, given, e);
}

/* ---- bodies ------------------------------------------------------------------------- */

int srv_parse_body(const char *body, size_t len, cJSON **root, srv_error *e) {
    *root = NULL;
    if (len == 0) return srv_bad_param(e, NULL, "the request body is empty; send a JSON object");
    if (!mu_utf8_valid(body, len))
        return srv_fail(e, 400, "invalid_request_error", "invalid_utf8", NULL,
                        "the request body is not valid UTF-8");
    if (chat_json_parse(body, len, root) != MUSER_OK)
        return srv_fail(e, 400, "invalid_request_error", "invalid_json", NULL,
                        "the request body is not valid JSON: %s", muser_last_error());
    if (!cJSON_IsObject(*root)) {
        cJSON_Delete(*root);
        *root = NULL;
        return srv_fail(e, 400, "invalid_request_error", "invalid_json", NULL,
                        "the request body must be a JSON object");
    }
    return 0;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

static int oom(srv_error *e) { return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory"); }

/* Fields shared by both endpoints: model, streaming, limits, sampling, stop,
 * logit_bias, n, and the test hook. */
static int parse_common(const cJSON *root, const srv_parse_opts *o, srv_request *r, srv_error *e) {
    const char *model = NULL;
    if (srv_get_string(root, "model", &model, e)) return -1;
    if (model && !(r->model = dup_str(model))) return oom(e);
    if (srv_get_bool(root, "stream", &r->stream, e)) return -1;
    const cJSON *so = field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return srv_bad_param(e, "stream_options", "'stream_options' must be an object");
        if (srv_get_bool(so, "include_usage", &r->include_usage, e)) return -1;
    }

    double v = -1;
    r->max_tokens = -1;
    if (get_int(root, "max_tokens", 1, 2147483647.0, &v, NULL, e)) return -1;
    if (v >= 1) r->max_tokens = (int)v;
    v = -1;
    if (get_int(root, "max_completion_tokens", 1, 2147483647.0, &v, NULL, e)) return -1;
    if (v >= 1) r->max_tokens = (int)v; /* the newer name wins */

    muser_sampler_params *p = &r->sampling;
    *p = o->defaults;
    double x;
    bool given = false;
    x = p->temperature;
    if (get_number(root, "temperature", 0, 2, &x, NULL, e)) return -1;
    p->temperature = (float)x;
    x = p->top_p;
    if (get_number(root, "top_p", 0, 1, &x, NULL, e)) return -1;
    p->top_p = (float)x;
    x = p->top_k;
    if (get_int(root, "top_k", 0, 2147483647.0, &x, NULL, e)) return -1;
    p->top_k = (int)x;
    x = p->min_p;
    if (get_number(root, "min_p", 0, 1, &x, NULL, e)) return -1;
    p->min_p = (float)x;
    x = p->presence_penalty;
    if (get_number(root, "presence_penalty", -2, 2, &x, NULL, e)) return -1;
    p->presence_penalty = (float)x;
    x = p->frequency_penalty;
    if (get_number(root, "frequency_penalty", -2, 2, &x, NULL, e)) return -1;
    p->frequency_penalty = (float)x;
    x = p->repeat_penalty;
    if (get_number(root, "repeat_penalty", 0.01, 10, &x, NULL, e)) return -1;
    p->repeat_penalty = (float)x;
    x = p->repeat_last_n;
    if (get_int(root, "repeat_last_n", 0, 65536, &x, NULL, e)) return -1;
    p->repeat_last_n = (int)x;
    x = 0;
    r->seed_given = o->seed_fixed;
    if (get_int(root, "seed", -9007199254740991.0, 9007199254740991.0, &x, &given, e)) return -1;
    if (given) {
        p->seed = (uint64_t)(int64_t)x;
        r->seed_given = true;
    }

    const cJSON *stop = field(root, "stop");
    if (cJSON_IsString(stop)) {
        if (stop->valuestring[0] && !(r->stop[r->n_stop++] = dup_str(stop->valuestring))) return oom(e);
    } else if (cJSON_IsArray(stop)) {
        const cJSON *s;
        cJSON_ArrayForEach(s, stop) {
            if (!cJSON_IsString(s)) return srv_bad_param(e, "stop", "'stop' must be a string or an array of strings");
            if (!s->valuestring[0]) continue;
            if (r->n_stop == SRV_MAX_STOP)
                return srv_bad_param(e, "stop", "'stop' has more than %d strings", SRV_MAX_STOP);
            if (!(r->stop[r->n_stop++] = dup_str(s->valuestring))) return oom(e);
        }
    } else if (stop) {
        return srv_bad_param(e, "stop", "'stop' must be a string or an array of strings");
    }

    const cJSON *bias = field(root, "logit_bias");
    if (bias) {
        if (!cJSON_IsObject(bias))
            return srv_bad_param(e, "logit_bias", "'logit_bias' must be an object mapping token ids to numbers");
        int n = cJSON_GetArraySize(bias);
        r->bias_ids = malloc(sizeof(muser_token) * (size_t)(n ? n : 1));
        r->bias = malloc(sizeof(float) * (size_t)(n ? n : 1));
        if (!r->bias_ids || !r->bias) return oom(e);
        const cJSON *b;
        cJSON_ArrayForEach(b, bias) {
            char *end = NULL;
            long id = strtol(b->string, &end, 10);
            if (!b->string[0] || *end || id < 0 || id > 2147483647L)
                return srv_bad_param(e, "logit_bias", "logit_bias key '%.40s' is not a token id", b->string);
            if (!cJSON_IsNumber(b) || !(b->valuedouble >= -100 && b->valuedouble <= 100))
                return srv_bad_param(e, "logit_bias", "logit_bias values must be numbers from -100 to 100");
            r->bias_ids[r->n_bias] = (muser_token)id;
            r->bias[r->n_bias++] = (float)b->valuedouble;
        }
    }

    x = 1;
    if (get_int(root, "n", 1, 2147483647.0, &x, NULL, e)) return -1;
    if (x != 1) return unsupported(e, "n", "'n' must be 1: this server generates one choice per request");

    const cJSON *script = field(root, "muser_test_script");
    if (script) {
        if (!o->test_hooks)
            return srv_bad_param(e, "muser_test_script",
                                 "'muser_test_script' is a test hook; start the server with --test-hooks to use it");
        if (!cJSON_IsString(script)) return srv_bad_param(e, "muser_test_script", "'muser_test_script' must be a string");
        if (!(r->test_script = dup_str(script->valuestring))) return oom(e);
    }
    return 0;
}

/* ---- chat ---------------------------------------------------------------------------- */

/* Names that fit in an ATEM tag and a recipient header. */
static bool valid_tool_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 128) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                  c == '-' || c == '.' || c == ':';
        if (!ok) return false;
    }
    return true;
}

static const char *tool_name(const cJSON *tool) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(fn, "name");
    return cJSON_IsString(n) ? n->valuestring : NULL;
}

static int check_tools(const cJSON *tools, srv_error *e) {
    if (!cJSON_IsArray(tools)) return srv_bad_param(e, "tools", "'tools' must be an array of tool objects");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        char param[40];
        snprintf(param, sizeof param, "tools[%d]", i);
        if (!cJSON_IsObject(t)) return srv_bad_param(e, param, "%s must be an object", param);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "function")))
            return unsupported(e, param, "only tools of type \"function\" are supported");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!cJSON_IsObject(fn)) return srv_bad_param(e, param, "%s.function must be an object", param);
        const char *name = tool_name(t);
        if (!name || !valid_tool_name(name))
            return srv_bad_param(e, param,
                                 "%s.function.name must be 1-128 characters of letters, digits, '_', '-', '.' or ':'",
                                 param);
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params))
            return srv_bad_param(e, param, "%s.function.parameters must be a JSON schema object", param);
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
        if (desc && !cJSON_IsNull(desc) && !cJSON_IsString(desc))
            return srv_bad_param(e, param, "%s.function.description must be a string", param);
        i++;
    }
    return 0;
}

/* The reasoning strength from reasoning_effort or
 * chat_template_kwargs.reasoning_strength; NULL: the template's default. */
static int reasoning_strength(const cJSON *root, const char **out, srv_error *e) {
    static const char *const levels[] = {"low", "medium", "high", "xhigh"};
    const char *effort = NULL, *param = "reasoning_effort";
    if (srv_get_string(root, "reasoning_effort", &effort, e)) return -1;
    const cJSON *kw = field(root, "chat_template_kwargs");
    if (kw && !cJSON_IsObject(kw))
        return srv_bad_param(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    const char *strength = NULL;
    if (kw && srv_get_string(kw, "reasoning_strength", &strength, e)) return -1;
    if (strength) {
        effort = strength;
        param = "chat_template_kwargs.reasoning_strength";
    }
    *out = NULL;
    if (!effort) return 0;
    if (!strcmp(effort, "minimal")) { /* the template has no off switch: its least is low */
        *out = "low";
        return 0;
    }
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++)
        if (!strcmp(effort, levels[i])) {
            *out = levels[i];
            return 0;
        }
    return srv_fail(e, 400, "invalid_request_error", "unsupported_value", param,
                    "'%s' is \"%.40s\"; Muse Glimmer takes low, medium, high or xhigh (minimal means low; reasoning "
                    "cannot be switched off)", param, effort);
}

static int render(const cJSON *root, const cJSON *tools, const srv_parse_opts *o, char **prompt, srv_error *e) {
    const cJSON *messages = field(root, "messages");
    if (!messages) return srv_bad_param(e, "messages", "'messages' is required");
    if (!cJSON_IsArray(messages) || cJSON_GetArraySize(messages) == 0)
        return srv_bad_param(e, "messages", "'messages' must be a non-empty array of message objects");
    chat_render_opts ro = {.add_generation_prompt = true, .current_date = o->current_date};
    if (reasoning_strength(root, &ro.reasoning_strength, e)) return -1;
    if (chat_render(messages, tools, &ro, prompt) != MUSER_OK)
        return srv_bad_param(e, "messages", "%s", muser_last_error());
    return 0;
}

int srv_render_messages(const cJSON *root, const srv_parse_opts *o, char **prompt, srv_error *e) {
    *prompt = NULL;
    if (!o->chat_format)
        return srv_bad_param(e, NULL, "this model has no Muse Glimmer chat format; there is no template to apply");
    const cJSON *tools = field(root, "tools");
    if (tools && check_tools(tools, e)) return -1;
    return render(root, tools && cJSON_GetArraySize(tools) ? tools : NULL, o, prompt, e);
}

/* tool_choice: which tools the prompt offers, and a forced call. */
static int tool_choice(const cJSON *root, const cJSON *tools, const cJSON **offered, const char **forced,
                       srv_error *e) {
    *offered = tools;
    *forced = NULL;
    const cJSON *tc = field(root, "tool_choice");
    if (!tc) return 0;
    int n_tools = tools ? cJSON_GetArraySize(tools) : 0;
    if (cJSON_IsString(tc)) {
        if (!strcmp(tc->valuestring, "auto")) return 0;
        if (!strcmp(tc->valuestring, "none")) {
            *offered = NULL;
            return 0;
        }
        if (!strcmp(tc->valuestring, "required")) {
            if (n_tools == 1) {
                *forced = tool_name(cJSON_GetArrayItem(tools, 0));
                return 0;
            }
            if (n_tools == 0) return srv_bad_param(e, "tool_choice", "tool_choice \"required\" needs 'tools'");
            return unsupported(e, "tool_choice",
                               "tool_choice \"required\" with several tools is not supported (no constrained "
                               "sampling); name the function: {\"type\": \"function\", \"function\": {\"name\": ...}}");
        }
        return srv_bad_param(e, "tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or a function");
    }
    const cJSON *fn = cJSON_IsObject(tc) ? cJSON_GetObjectItemCaseSensitive(tc, "function") : NULL;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    if (!cJSON_IsString(name))
        return srv_bad_param(e, "tool_choice",
                             "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                             "\"function\": {\"name\": NAME}}");
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const char *tn = tool_name(t);
        if (tn && !strcmp(tn, name->valuestring)) {
            *forced = tn;
            return 0;
        }
    }
    return srv_bad_param(e, "tool_choice", "tool_choice names \"%.64s\", which is not in 'tools'", name->valuestring);
}

int srv_parse_chat(const char *body, size_t len, const srv_parse_opts *o, srv_request *r, srv_error *e) {
    memset(r, 0, sizeof *r);
    r->kind = SRV_CHAT;
    cJSON *root = NULL;
    if (srv_parse_body(body, len, &root, e)) return -1;
    int rc = -1;
    char *prompt = NULL;
    if (!o->chat_format) {
        srv_fail(e, 400, "invalid_request_error", "unsupported_model", NULL,
                 "this model has no Muse Glimmer chat format, so /v1/chat/completions cannot serve it; use "
                 "/v1/completions with a plain prompt");
        goto out;
    }
    if (parse_common(root, o, r, e)) goto out;
    bool logprobs = false;
    if (srv_get_bool(root, "logprobs", &logprobs, e)) goto out;
    double top_logprobs = 0;
    if (get_int(root, "top_logprobs", 0, 20, &top_logprobs, NULL, e)) goto out;
    if (logprobs || top_logprobs > 0) {
        unsupported(e, logprobs ? "logprobs" : "top_logprobs", "logprobs are not supported by this server");
        goto out;
    }
    bool parallel = true;
    if (srv_get_bool(root, "parallel_tool_calls", &parallel, e)) goto out;
    const cJSON *rf = field(root, "response_format");
    if (rf) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
        if (!cJSON_IsObject(rf) || !cJSON_IsString(type)) {
            srv_bad_param(e, "response_format", "'response_format' must be an object with a \"type\"");
            goto out;
        }
        if (strcmp(type->valuestring, "text")) {
            unsupported(e, "response_format",
                        "only response_format {\"type\": \"text\"} is supported (no constrained sampling)");
            goto out;
        }
    }
    const cJSON *tools = field(root, "tools");
    if (tools && check_tools(tools, e)) goto out;
    if (tools && cJSON_GetArraySize(tools) == 0) tools = NULL;
    const cJSON *offered = NULL;
    const char *forced = NULL;
    if (tool_choice(root, tools, &offered, &forced, e)) goto out;
    if (render(root, offered, o, &prompt, e)) goto out;
    if (offered && !(r->tools_json = cJSON_PrintUnformatted(offered))) {
        oom(e);
        goto out;
    }
    if (forced) {
        /* The call's header and opening tags become part of the prompt; the
         * parser reads them first, so the output continues inside the call. */
        mu_buf b = {0};
        mu_buf_puts(&b, " to=");
        mu_buf_puts(&b, forced);
        mu_buf_puts(&b, "<|message|><atem:function_calls>\n<atem:invoke name=\"");
        mu_buf_puts(&b, forced);
        mu_buf_puts(&b, "\">\n");
        r->forced_prefix = mu_buf_take(&b);
        mu_buf_puts(&b, prompt);
        mu_buf_puts(&b, r->forced_prefix ? r->forced_prefix : "");
        free(prompt);
        prompt = mu_buf_take(&b);
        if (!r->forced_prefix || !prompt) {
            oom(e);
            goto out;
        }
    }
    r->prompt_text = prompt;
    prompt = NULL;
    rc = 0;
out:
    free(prompt);
    cJSON_Delete(root);
    if (rc) srv_request_free(r);
    return rc;
}

/* ---- completions ------------------------------------------------------------------------ */

static int completion_prompt(const cJSON *root, srv_request *r, srv_error *e) {
    const cJSON *p = field(root, "prompt");
    if (!p) return srv_bad_param(e, "prompt", "'prompt' is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && !cJSON_IsNumber(p->child)) p = p->child;
    if (cJSON_IsString(p)) {
        r->prompt_text = dup_str(p->valuestring);
        return r->prompt_text ? 0 : oom(e);
    }
    if (!cJSON_IsArray(p))
        return srv_bad_param(e, "prompt", "'prompt' must be a string, an array of token ids, or an array of one of those");
    int n = cJSON_GetArraySize(p);
    if (n == 0) return srv_bad_param(e, "prompt", "'prompt' is empty");
    r->prompt_ids = malloc(sizeof(muser_token) * (size_t)n);
    if (!r->prompt_ids) return oom(e);
    const cJSON *t;
    cJSON_ArrayForEach(t, p) {
        if (cJSON_IsString(t) || cJSON_IsArray(t))
            return unsupported(e, "prompt", "several prompts in one request are not supported; send one per request");
        if (!is_integer(t) || t->valuedouble < 0 || t->valuedouble > 2147483647.0)
            return srv_bad_param(e, "prompt", "'prompt' token ids must be non-negative integers");
        r->prompt_ids[r->n_prompt_ids++] = (muser_token)t->valuedouble;
    }
    return 0;
}

int srv_parse_completion(const char *body, size_t len, const srv_parse_opts *o, srv_request *r, srv_error *e) {
    memset(r, 0, sizeof *r);
    r->kind = SRV_COMPLETION;
    cJSON *root = NULL;
    if (srv_parse_body(body, len, &root, e)) return -1;
    int rc = -1;
    if (parse_common(root, o, r, e)) goto out;
    bool echo = false;
    if (srv_get_bool(root, "echo", &echo, e)) goto out;
    if (echo) {
        unsupported(e, "echo", "'echo' is not supported");
        goto out;
    }
    double x = 1;
    if (get_int(root, "best_of", 1, 2147483647.0, &x, NULL, e)) goto out;
    if (x != 1) {
        unsupported(e, "best_of", "'best_of' must be 1");
        goto out;
    }
    x = 0;
    if (get_int(root, "logprobs", 0, 20, &x, NULL, e)) goto out;
    if (x > 0) {
        unsupported(e, "logprobs", "logprobs are not supported by this server");
        goto out;
    }
    const char *suffix = NULL;
    if (srv_get_string(root, "suffix", &suffix, e)) goto out;
    if (suffix && *suffix) {
        unsupported(e, "suffix", "'suffix' (insertion) is not supported");
        goto out;
    }
    if (completion_prompt(root, r, e)) goto out;
    rc = 0;
out:
    cJSON_Delete(root);
    if (rc) srv_request_free(r);
    return rc;
}

void srv_request_free(srv_request *r) {
    if (!r) return;
    free(r->model);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->bias_ids);
    free(r->bias);
    free(r->prompt_text);
    free(r->prompt_ids);
    free(r->tools_json);
    free(r->forced_prefix);
    free(r->test_script);
    memset(r, 0, sizeof *r);
}

/* ---- tokens ---------------------------------------------------------------------------------- */

int srv_request_tokenize(const muser_model *model, const srv_request *r, int n_ctx, muser_token **out, int *n,
                         srv_error *e) {
    *out = NULL;
    *n = 0;
    const int V = muser_vocab_size(model);
    for (int i = 0; i < r->n_bias; i++)
        if (r->bias_ids[i] >= V)
            return srv_bad_param(e, "logit_bias", "logit_bias names token %d; the vocabulary has %d tokens",
                                 r->bias_ids[i], V);
    muser_token *t = NULL;
    int k = 0;
    if (r->prompt_ids) {
        for (int i = 0; i < r->n_prompt_ids; i++)
            if (r->prompt_ids[i] >= V)
                return srv_bad_param(e, "prompt", "prompt token %d is outside the vocabulary (%d tokens)",
                                     r->prompt_ids[i], V);
        k = r->n_prompt_ids;
        t = malloc(sizeof(muser_token) * (size_t)k);
        if (!t) return oom(e);
        memcpy(t, r->prompt_ids, sizeof(muser_token) * (size_t)k);
    } else {
        /* Chat prompts carry their BOS as text; completion prompts get the model's. */
        bool bos = r->kind == SRV_COMPLETION && muser_vocab_add_bos(model);
        const char *text = r->prompt_text ? r->prompt_text : "";
        size_t len = strlen(text);
        k = muser_tokenize(model, text, len, bos, true, NULL, 0);
        if (k < 0) return srv_bad_param(e, "prompt", "the prompt cannot be tokenized: %s", muser_last_error());
        t = malloc(sizeof(muser_token) * (size_t)(k ? k : 1));
        if (!t) return oom(e);
        if (k) muser_tokenize(model, text, len, bos, true, t, k);
    }
    if (k == 0) {
        free(t);
        return srv_bad_param(e, r->kind == SRV_CHAT ? "messages" : "prompt", "the prompt is empty");
    }
    if (k >= n_ctx) {
        free(t);
        return srv_fail(e, 400, "invalid_request_error", "context_length_exceeded",
                        r->kind == SRV_CHAT ? "messages" : "prompt",
                        "the prompt has %d tokens but the context holds %d, and at least one more is needed for the "
                        "answer; shorten the prompt or start the server with a larger -c",
                        k, n_ctx);
    }
    *out = t;
    *n = k;
    return 0;
}
