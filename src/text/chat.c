/* chat.c — renders the Muse Glimmer chat template (muse-glimmer.jinja) in C.
 *
 * Each function below mirrors one macro or branch of the template; the
 * comments quote the jinja condition they implement, because byte-exact
 * agreement depends on Python's truthiness and printing rules.
 */
#include "text/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/error.h"

static const char *const DEFAULT_BOS = "<|begin_of_text|>";
static const char *const DEFAULT_CUTOFF = "2026-01-04";

typedef struct render_ctx {
    mu_buf out;
    const cJSON *messages;
    const cJSON *tools; /* NULL when falsy ({% if tools %} fails) */
    const chat_render_opts *opts;
} render_ctx;

static const cJSON *obj_get(const cJSON *o, const char *key) {
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

static const char *nonempty(const char *s, const char *fallback) { return s && *s ? s : fallback; }

/* ---- render_content -------------------------------------------------------- */

/* {% if content is string %}...{% elif content is not none %}{% for part in content %} */
static int render_content(mu_buf *b, const cJSON *content, const char *what) {
    if (!content || cJSON_IsNull(content)) return MUSER_OK;
    if (cJSON_IsString(content)) {
        mu_buf_puts(b, content->valuestring);
        return MUSER_OK;
    }
    /* iterating an object yields its keys, which have no 'type': nothing */
    if (cJSON_IsObject(content)) return MUSER_OK;
    if (!cJSON_IsArray(content))
        return mu_fail(MUSER_EINVAL, "%s: content must be a string, an array of parts or null",
                       what);
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        /* non-object parts have no 'type' and are skipped, as in jinja */
        const cJSON *type = obj_get(part, "type");
        if (!cJSON_IsString(type)) continue;
        if (strcmp(type->valuestring, "image") == 0) {
            mu_buf_puts(b, "<|patch|>");
        } else if (strcmp(type->valuestring, "video") == 0) {
            mu_buf_puts(b, "<|video|>");
        } else if (strcmp(type->valuestring, "text") == 0) {
            const cJSON *text = obj_get(part, "text");
            if (!text) continue; /* undefined prints as "" */
            if (!chat_json_py_str(b, text))
                return mu_fail(MUSER_EINVAL, "%s: a text part's \"text\" must not be an array or object",
                               what);
        }
    }
    return MUSER_OK;
}

/* ---- render_atem -------------------------------------------------------------- */

/* Arguments must be a mapping. We also accept a JSON string holding an
 * object, since OpenAI clients send arguments that way (the template
 * raises on strings). *owned is set when the object was parsed here. */
static int tool_call_arguments(const cJSON *fn, const char *name, const cJSON **args,
                               cJSON **owned) {
    const cJSON *a = obj_get(fn, "arguments");
    *owned = NULL;
    if (cJSON_IsObject(a)) {
        *args = a;
        return MUSER_OK;
    }
    if (cJSON_IsString(a)) {
        cJSON *parsed = NULL;
        if (chat_json_parse(a->valuestring, strlen(a->valuestring), &parsed) != MUSER_OK)
            return mu_fail_context(MUSER_EINVAL,
                                   "tool call '%s': arguments string is not valid JSON: ", name);
        if (!cJSON_IsObject(parsed)) {
            cJSON_Delete(parsed);
            return mu_fail(MUSER_EINVAL,
                           "tool call '%s': arguments must be a JSON object (got a string holding "
                           "another JSON value)",
                           name);
        }
        *args = *owned = parsed;
        return MUSER_OK;
    }
    return mu_fail(MUSER_EINVAL,
                   "tool call '%s': function.arguments must be a JSON object (or a string "
                   "holding one)",
                   name);
}

/* The value inside <atem:parameter>: booleans and null as JSON words,
 * mappings and lists via tojson, strings raw, numbers via str(). */
static void render_atem_value(mu_buf *b, const cJSON *v) {
    if (cJSON_IsBool(v)) {
        mu_buf_puts(b, cJSON_IsTrue(v) ? "true" : "false");
    } else if (cJSON_IsNull(v)) {
        mu_buf_puts(b, "null");
    } else if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        chat_json_dump(b, v, true);
    } else {
        chat_json_py_str(b, v);
    }
}

static void render_atem(mu_buf *b, const char *name, const cJSON *args) {
    mu_buf_puts(b, "<atem:function_calls>\n<atem:invoke name=\"");
    mu_buf_puts(b, name);
    mu_buf_puts(b, "\">\n");
    const cJSON *kv;
    cJSON_ArrayForEach(kv, args) {
        mu_buf_puts(b, "<atem:parameter name=\"");
        mu_buf_puts(b, kv->string);
        mu_buf_puts(b, "\">");
        render_atem_value(b, kv);
        mu_buf_puts(b, "</atem:parameter>\n");
    }
    mu_buf_puts(b, "</atem:invoke>\n</atem:function_calls>");
}

/* ---- tools ---------------------------------------------------------------------- */

/* {% set fn = tool.function if tool.function is defined else tool %} */
static int tool_function(const cJSON *tool, int i, const cJSON **fn, const char **name) {
    const cJSON *f = obj_get(tool, "function");
    if (!f) f = tool;
    const cJSON *n = obj_get(f, "name");
    if (!cJSON_IsString(n))
        return mu_fail(MUSER_EINVAL, "tools[%d]: missing function name (a string)", i);
    *fn = f;
    *name = n->valuestring;
    return MUSER_OK;
}

/* Namespaces are name.split('.')[0], in first-seen order. Returns a
 * malloc'd array of malloc'd strings. */
static int tool_namespaces(const cJSON *tools, char ***out, int *n_out) {
    int cap = cJSON_GetArraySize(tools), n = 0;
    char **ns = calloc((size_t)(cap ? cap : 1), sizeof *ns);
    if (!ns) return mu_fail(MUSER_ENOMEM, "out of memory rendering tools");
    const cJSON *tool;
    int i = 0;
    cJSON_ArrayForEach(tool, tools) {
        const cJSON *fn;
        const char *name;
        int rc = tool_function(tool, i++, &fn, &name);
        if (rc) {
            for (int k = 0; k < n; k++) free(ns[k]);
            free(ns);
            return rc;
        }
        size_t len = strcspn(name, ".");
        bool seen = false;
        for (int k = 0; k < n && !seen; k++) seen = strlen(ns[k]) == len && memcmp(ns[k], name, len) == 0;
        if (seen) continue;
        ns[n] = malloc(len + 1);
        if (!ns[n]) {
            for (int k = 0; k < n; k++) free(ns[k]);
            free(ns);
            return mu_fail(MUSER_ENOMEM, "out of memory rendering tools");
        }
        memcpy(ns[n], name, len);
        ns[n][len] = 0;
        n++;
    }
    *out = ns;
    *n_out = n;
    return MUSER_OK;
}

static void free_namespaces(char **ns, int n) {
    for (int i = 0; i < n; i++) free(ns[i]);
    free(ns);
}

static void put_json_str(mu_buf *b, const char *s) {
    cJSON tmp = {0};
    tmp.type = cJSON_String;
    tmp.valuestring = (char *)s;
    chat_json_dump(b, &tmp, true);
}

static int render_tool_defs(render_ctx *c) {
    mu_buf *b = &c->out;
    mu_buf_puts(b,
        "In this environment you have access to a set of tools you can use to answer the user's question.\n\n"
        "You can invoke a function by writing a \"<atem:function_calls>\" block like the following:\n"
        "<atem:function_calls>\n<atem:invoke name=\"$FUNCTION_NAME\">\n"
        "<atem:parameter name=\"$PARAMETER_NAME\">$PARAMETER_VALUE</atem:parameter>\n...\n"
        "</atem:invoke>\n</atem:function_calls>\n\n"
        "String and scalar parameters should be specified as is, while lists and objects should use "
        "JSON format. Note that spaces for string values are not stripped. The output is not expected "
        "to be valid XML and is parsed with regular expressions.\n"
        "Here are the functions available in JSONSchema format:\n"
        "// Tool metadata\n");
    char **ns;
    int n_ns;
    int rc = tool_namespaces(c->tools, &ns, &n_ns);
    if (rc) return rc;
    const cJSON *nd = c->opts->tool_namespace_descriptions;
    for (int i = 0; i < n_ns; i++) {
        /* '{"name": ' + (tns | tojson) + ', "description": ' + ((nd[tns] if tns in nd else '') | tojson) + '}\n' */
        mu_buf_puts(b, "{\"name\": ");
        put_json_str(b, ns[i]);
        mu_buf_puts(b, ", \"description\": ");
        const cJSON *d = obj_get(nd, ns[i]);
        if (d) {
            chat_json_dump(b, d, true);
        } else {
            mu_buf_puts(b, "\"\"");
        }
        mu_buf_puts(b, "}\n");
    }
    free_namespaces(ns, n_ns);
    mu_buf_puts(b, "// Function schemas");
    const cJSON *tool;
    int i = 0;
    cJSON_ArrayForEach(tool, c->tools) {
        const cJSON *fn;
        const char *name;
        if ((rc = tool_function(tool, i++, &fn, &name))) return rc;
        mu_buf_puts(b, "\n{\"name\": ");
        put_json_str(b, name);
        mu_buf_puts(b, ", \"description\": ");
        const cJSON *desc = obj_get(fn, "description");
        if (desc) {
            chat_json_dump(b, desc, true);
        } else {
            mu_buf_puts(b, "\"\""); /* llama.cpp's normalisation; jinja would raise */
        }
        mu_buf_puts(b, ", \"parameters\": ");
        const cJSON *params = obj_get(fn, "parameters");
        if (params) {
            chat_json_dump(b, params, true);
        } else {
            mu_buf_puts(b, "{}");
        }
        mu_buf_putc(b, '}');
    }
    mu_buf_puts(b,
        "\n\nHere's an example of how to call a function in the tool set:\n"
        "(If the tool namespace is not specified, invoke the function directly as "
        "`example_function_name` rather than `example_tool_name.example_function_name`)\n\n"
        "to=example_tool_name.example_function_name\n\n"
        "<atem:function_calls>\n<atem:invoke name=\"example_tool_name.example_function_name\">\n"
        "<atem:parameter name=\"example_parameter_1\">value_1</atem:parameter>\n"
        "<atem:parameter name=\"example_parameter_2\">This is the value for the second parameter\n"
        "that can span\n\"multiple\" lines\n</atem:parameter>\n"
        "</atem:invoke>\n</atem:function_calls>");
    return MUSER_OK;
}

static void render_reasoning(render_ctx *c) {
    mu_buf_puts(&c->out, "Reasoning strength: ");
    mu_buf_puts(&c->out, nonempty(c->opts->reasoning_strength, "high"));
    mu_buf_putc(&c->out, '.');
}

/* '# Valid recipients: "self", "<ns>.*"..., "user".' */
static int render_system_meta(render_ctx *c) {
    mu_buf *b = &c->out;
    mu_buf_puts(b, "# Valid recipients: \"self\"");
    if (c->tools) {
        char **ns;
        int n_ns;
        int rc = tool_namespaces(c->tools, &ns, &n_ns);
        if (rc) return rc;
        for (int i = 0; i < n_ns; i++) {
            mu_buf_puts(b, ", \"");
            mu_buf_puts(b, ns[i]);
            mu_buf_puts(b, ".*\"");
        }
        free_namespaces(ns, n_ns);
    }
    mu_buf_puts(b, ", \"user\".");
    return MUSER_OK;
}

/* The part of a system block after the text: tools, recipients, <|eot|>. */
static int render_system_tail(render_ctx *c) {
    int rc;
    if (c->tools) {
        mu_buf_puts(&c->out, "\n\n");
        if ((rc = render_tool_defs(c))) return rc;
    }
    mu_buf_puts(&c->out, "\n\n");
    if ((rc = render_system_meta(c))) return rc;
    mu_buf_puts(&c->out, "<|eot|>");
    return MUSER_OK;
}

/* ---- system ------------------------------------------------------------------------ */

static void render_default_system(render_ctx *c) {
    mu_buf *b = &c->out;
    mu_buf_puts(b, "<|start|>system<|message|>You are a helpful AI assistant.");
    mu_buf_puts(b, "\nKnowledge cutoff: ");
    mu_buf_puts(b, nonempty(c->opts->knowledge_cutoff, DEFAULT_CUTOFF));
    mu_buf_puts(b, ".\nCurrent date: ");
    if (c->opts->current_date && *c->opts->current_date) {
        mu_buf_puts(b, c->opts->current_date);
    } else {
        /* strftime_now('%Y-%m-%d'), as llama.cpp and HF define it */
        char today[32] = "";
        time_t now = time(NULL);
        struct tm tm;
        if (localtime_r(&now, &tm)) strftime(today, sizeof today, "%Y-%m-%d", &tm);
        mu_buf_puts(b, today);
    }
    mu_buf_puts(b, ".\n\n");
    render_reasoning(c);
}

/* Python str.replace(old, new) over all occurrences. */
static char *replace_all(const char *s, const char *old, const char *rep) {
    mu_buf b = {0};
    size_t n_old = strlen(old);
    const char *p;
    while ((p = strstr(s, old))) {
        mu_buf_put(&b, s, (size_t)(p - s));
        mu_buf_puts(&b, rep);
        s = p + n_old;
    }
    mu_buf_puts(&b, s);
    return mu_buf_take(&b);
}

/* 'needle' in (text | lower), for an ASCII lower-case needle. Python's
 * lower() maps no non-ASCII character to a lone letter of "reasoning
 * strength" (only U+212A KELVIN to 'k', and U+0130 to 'i' plus a combining
 * dot, which cannot complete a match), so ASCII folding is exact here. */
static bool contains_ascii_nocase(const char *text, const char *needle) {
    size_t n = strlen(needle);
    for (const char *p = text; *p; p++) {
        size_t i = 0;
        while (i < n && p[i]) {
            char ch = p[i];
            if (ch >= 'A' && ch <= 'Z') ch = (char)(ch - 'A' + 'a');
            if (ch != needle[i]) break;
            i++;
        }
        if (i == n) return true;
    }
    return false;
}

static int render_system(render_ctx *c, const cJSON *msg, int idx) {
    mu_buf text = {0};
    char what[48];
    snprintf(what, sizeof what, "messages[%d] (system)", idx);
    int rc = render_content(&text, obj_get(msg, "content"), what);
    char *sys = rc ? NULL : mu_buf_take(&text);
    mu_buf_free(&text);
    if (rc) return rc;
    if (!sys) return mu_fail(MUSER_ENOMEM, "out of memory rendering the system message");
    /* "Reasoning effort" -> "Reasoning strength" in the template's four casings */
    static const char *const pairs[4][2] = {
        {"Reasoning effort", "Reasoning strength"},
        {"Reasoning Effort", "Reasoning Strength"},
        {"reasoning effort", "reasoning strength"},
        {"REASONING EFFORT", "REASONING STRENGTH"},
    };
    for (int i = 0; i < 4 && sys; i++) {
        char *next = replace_all(sys, pairs[i][0], pairs[i][1]);
        free(sys);
        sys = next;
    }
    if (!sys) return mu_fail(MUSER_ENOMEM, "out of memory rendering the system message");
    mu_buf_puts(&c->out, "<|start|>system<|message|>");
    mu_buf_puts(&c->out, sys);
    if (!contains_ascii_nocase(sys, "reasoning strength")) {
        mu_buf_puts(&c->out, "\n\n");
        render_reasoning(c);
    }
    free(sys);
    return render_system_tail(c);
}

/* ---- tool results ------------------------------------------------------------------- */

/* Python == between JSON values (1 == 1.0 == True; containers deep). */
static bool py_equal(const cJSON *a, const cJSON *b) {
    bool a_num = cJSON_IsNumber(a) || cJSON_IsBool(a), b_num = cJSON_IsNumber(b) || cJSON_IsBool(b);
    if (a_num && b_num) {
        double x = cJSON_IsBool(a) ? (cJSON_IsTrue(a) ? 1 : 0) : a->valuedouble;
        double y = cJSON_IsBool(b) ? (cJSON_IsTrue(b) ? 1 : 0) : b->valuedouble;
        return x == y;
    }
    if (cJSON_IsString(a) && cJSON_IsString(b)) return strcmp(a->valuestring, b->valuestring) == 0;
    if (cJSON_IsNull(a) && cJSON_IsNull(b)) return true;
    if (cJSON_IsArray(a) && cJSON_IsArray(b)) {
        const cJSON *x = a->child, *y = b->child;
        for (; x && y; x = x->next, y = y->next)
            if (!py_equal(x, y)) return false;
        return !x && !y;
    }
    if (cJSON_IsObject(a) && cJSON_IsObject(b)) {
        if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b)) return false;
        const cJSON *x;
        cJSON_ArrayForEach(x, a) {
            const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
            if (!y || !py_equal(x, y)) return false;
        }
        return true;
    }
    return false;
}

/* name, else the name of the call whose id is tool_call_id (last match in
 * the whole conversation), else tool_call_id itself, else "". */
static int tool_result_name(render_ctx *c, const cJSON *msg, int idx, const char **out) {
    const cJSON *name = obj_get(msg, "name");
    if (chat_json_truthy(name)) {
        if (!cJSON_IsString(name))
            return mu_fail(MUSER_EINVAL, "messages[%d] (tool): name must be a string", idx);
        *out = name->valuestring;
        return MUSER_OK;
    }
    const cJSON *tcid = obj_get(msg, "tool_call_id");
    /* rns.name = tcid if tcid else '' */
    const cJSON *found = chat_json_truthy(tcid) ? tcid : NULL;
    bool have_id = tcid && !cJSON_IsNull(tcid), matched = false;
    const cJSON *m;
    cJSON_ArrayForEach(m, c->messages) {
        const cJSON *calls = obj_get(m, "tool_calls");
        if (!have_id || !chat_json_truthy(calls) || !cJSON_IsArray(calls)) continue;
        const cJSON *tc;
        cJSON_ArrayForEach(tc, calls) {
            const cJSON *id = obj_get(tc, "id");
            if (id && py_equal(id, tcid)) {
                found = obj_get(obj_get(tc, "function"), "name");
                matched = true;
            }
        }
    }
    if (!found && !matched) {
        *out = "";
        return MUSER_OK;
    }
    if (!cJSON_IsString(found))
        return mu_fail(MUSER_EINVAL,
                       "messages[%d] (tool): no usable tool name (name, or a string function "
                       "name of the call matching tool_call_id)",
                       idx);
    *out = found->valuestring;
    return MUSER_OK;
}

static int render_tool_result(render_ctx *c, const cJSON *msg, int idx) {
    const char *tname = "";
    int rc = tool_result_name(c, msg, idx, &tname);
    if (rc) return rc;
    mu_buf *b = &c->out;
    mu_buf_puts(b, "<|start|>tool ");
    mu_buf_puts(b, tname);
    mu_buf_puts(b, "<|message|><tool_output name=\"");
    mu_buf_puts(b, tname);
    mu_buf_puts(b, "\">\n");
    char what[48];
    snprintf(what, sizeof what, "messages[%d] (tool)", idx);
    if ((rc = render_content(b, obj_get(msg, "content"), what))) return rc;
    mu_buf_puts(b, "\n</tool_output><|eot|>");
    return MUSER_OK;
}

/* ---- assistant ------------------------------------------------------------------------ */

static int render_tool_calls(render_ctx *c, const cJSON *calls, int idx, const char *end_token) {
    if (!cJSON_IsArray(calls))
        return mu_fail(MUSER_EINVAL, "messages[%d] (assistant): tool_calls must be an array", idx);
    mu_buf *b = &c->out;
    const cJSON *tc;
    int k = 0;
    cJSON_ArrayForEach(tc, calls) {
        const cJSON *fn = obj_get(tc, "function");
        const cJSON *name = obj_get(fn, "name");
        if (!cJSON_IsString(name))
            return mu_fail(MUSER_EINVAL,
                           "messages[%d].tool_calls[%d]: missing function.name (a string)", idx, k);
        const cJSON *args;
        cJSON *owned;
        int rc = tool_call_arguments(fn, name->valuestring, &args, &owned);
        if (rc) return mu_fail_context(rc, "messages[%d].tool_calls[%d]: ", idx, k);
        mu_buf_puts(b, "<|start|>assistant to=");
        mu_buf_puts(b, name->valuestring);
        mu_buf_puts(b, "<|message|>");
        render_atem(b, name->valuestring, args);
        cJSON_Delete(owned);
        mu_buf_puts(b, tc->next ? "<|eom|>" : end_token);
        k++;
    }
    return MUSER_OK;
}

static int render_assistant(render_ctx *c, const cJSON *msg, int idx, const char *end_token) {
    mu_buf *b = &c->out;
    const cJSON *reasoning = obj_get(msg, "reasoning_content");
    if (chat_json_truthy(reasoning)) {
        if (!cJSON_IsString(reasoning))
            return mu_fail(MUSER_EINVAL, "messages[%d] (assistant): reasoning_content must be a string",
                           idx);
        mu_buf_puts(b, "<|start|>assistant to=self<|message|>");
        mu_buf_puts(b, reasoning->valuestring);
        mu_buf_puts(b, "<|eom|>");
    }
    const cJSON *calls = obj_get(msg, "tool_calls");
    if (chat_json_truthy(calls)) return render_tool_calls(c, calls, idx, end_token);

    /* recipient = message.get('recipient') or 'user' */
    const cJSON *rec = obj_get(msg, "recipient");
    const char *recipient = "user";
    if (chat_json_truthy(rec)) {
        if (!cJSON_IsString(rec))
            return mu_fail(MUSER_EINVAL, "messages[%d] (assistant): recipient must be a string", idx);
        recipient = rec->valuestring;
    }
    /* end_turn defaults to (recipient == 'user') when absent or null */
    const cJSON *et = obj_get(msg, "end_turn");
    bool end_turn = (!et || cJSON_IsNull(et)) ? strcmp(recipient, "user") == 0 : chat_json_truthy(et);
    mu_buf_puts(b, "<|start|>assistant to=");
    mu_buf_puts(b, recipient);
    mu_buf_puts(b, "<|message|>");
    char what[48];
    snprintf(what, sizeof what, "messages[%d] (assistant)", idx);
    int rc = render_content(b, obj_get(msg, "content"), what);
    if (rc) return rc;
    mu_buf_puts(b, end_turn ? "<|eot|>" : "<|eom|>");
    return MUSER_OK;
}

/* ---- the template body ----------------------------------------------------------------- */

static const char *message_role(const cJSON *m) {
    const cJSON *r = obj_get(m, "role");
    return cJSON_IsString(r) ? r->valuestring : NULL;
}

static int check_messages(const cJSON *messages, bool *has_system) {
    if (!cJSON_IsArray(messages)) return mu_fail(MUSER_EINVAL, "chat: messages must be a JSON array");
    *has_system = false;
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, messages) {
        if (!cJSON_IsObject(m)) return mu_fail(MUSER_EINVAL, "messages[%d]: not an object", i);
        const char *role = message_role(m);
        if (!role) return mu_fail(MUSER_EINVAL, "messages[%d]: missing role (a string)", i);
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
            strcmp(role, "tool"))
            return mu_fail(MUSER_EINVAL,
                           "messages[%d]: unknown role '%s' (system, user, assistant or tool)", i,
                           role);
        if (strcmp(role, "system") == 0) *has_system = true;
        i++;
    }
    return MUSER_OK;
}

int chat_render(const cJSON *messages, const cJSON *tools, const chat_render_opts *opts,
                char **out) {
    *out = NULL;
    static const chat_render_opts defaults = {0};
    render_ctx c = {.messages = messages, .opts = opts ? opts : &defaults};
    bool has_system = false;
    int rc = check_messages(messages, &has_system);
    if (rc) return rc;
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools))
        return mu_fail(MUSER_EINVAL, "chat: tools must be a JSON array");
    c.tools = chat_json_truthy(tools) ? tools : NULL;
    const cJSON *nd = c.opts->tool_namespace_descriptions;
    if (nd && !cJSON_IsObject(nd))
        return mu_fail(MUSER_EINVAL, "chat: tool_namespace_descriptions must be a JSON object");

    mu_buf_puts(&c.out, c.opts->bos_token ? c.opts->bos_token : DEFAULT_BOS);
    if (!has_system) {
        render_default_system(&c);
        rc = render_system_tail(&c);
    }
    const cJSON *m;
    int i = 0;
    for (m = messages->child; m && !rc; m = m->next, i++) {
        const char *role = message_role(m);
        if (strcmp(role, "system") == 0) {
            rc = render_system(&c, m, i);
        } else if (strcmp(role, "user") == 0) {
            mu_buf_puts(&c.out, "<|start|>user<|message|>");
            char what[48];
            snprintf(what, sizeof what, "messages[%d] (user)", i);
            rc = render_content(&c.out, obj_get(m, "content"), what);
            mu_buf_puts(&c.out, "<|eot|>");
        } else if (strcmp(role, "tool") == 0) {
            rc = render_tool_result(&c, m, i);
        } else {
            /* <|eom|> when the next message has the same role */
            const char *next_role = m->next ? message_role(m->next) : NULL;
            const char *end_token = next_role && strcmp(next_role, role) == 0 ? "<|eom|>" : "<|eot|>";
            rc = render_assistant(&c, m, i, end_token);
        }
    }
    if (!rc && c.opts->add_generation_prompt) mu_buf_puts(&c.out, "<|start|>assistant");
    if (rc) {
        mu_buf_free(&c.out);
        return rc;
    }
    *out = mu_buf_take(&c.out);
    if (!*out) return mu_fail(MUSER_ENOMEM, "out of memory rendering the chat prompt");
    return MUSER_OK;
}

/* ---- public API ---------------------------------------------------------------------------- */

int muser_chat_render(const char *messages_json, const char *tools_json,
                      const muser_chat_options *opt, char **out) {
    if (!out) return mu_fail(MUSER_EINVAL, "muser_chat_render: out is NULL");
    *out = NULL;
    if (!messages_json) return mu_fail(MUSER_EINVAL, "muser_chat_render: messages_json is NULL");
    cJSON *msgs = NULL, *tools = NULL, *nd = NULL;
    int rc = chat_json_parse(messages_json, strlen(messages_json), &msgs);
    if (rc) return mu_fail_context(rc, "chat messages: ");
    /* a whole request object is accepted too: its "messages" and "tools" */
    const cJSON *messages = msgs, *tools_node = NULL;
    if (cJSON_IsObject(msgs)) {
        messages = obj_get(msgs, "messages");
        tools_node = obj_get(msgs, "tools");
        if (!messages) {
            cJSON_Delete(msgs);
            return mu_fail(MUSER_EINVAL, "chat: the request object has no \"messages\"");
        }
    }
    if (tools_json && !rc) {
        rc = chat_json_parse(tools_json, strlen(tools_json), &tools);
        if (rc) mu_fail_context(rc, "chat tools: ");
        tools_node = tools;
    }
    chat_render_opts o = {0};
    if (opt) {
        o.add_generation_prompt = opt->add_generation_prompt;
        o.reasoning_strength = opt->reasoning_strength;
        o.current_date = opt->current_date;
        o.knowledge_cutoff = opt->knowledge_cutoff;
        o.bos_token = opt->bos_token;
        if (!rc && opt->tool_namespace_descriptions) {
            rc = chat_json_parse(opt->tool_namespace_descriptions,
                                 strlen(opt->tool_namespace_descriptions), &nd);
            if (rc) mu_fail_context(rc, "chat tool_namespace_descriptions: ");
            o.tool_namespace_descriptions = nd;
        }
    }
    if (!rc) rc = chat_render(messages, tools_node, &o, out);
    cJSON_Delete(msgs);
    cJSON_Delete(tools);
    cJSON_Delete(nd);
    return rc;
}
