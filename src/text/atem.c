/* atem.c — parses Muse Glimmer output (ATEM protocol) into reasoning, answer
 * and tool calls, incrementally.
 *
 * After the prompt's `<|start|>assistant` the model writes messages of the
 * form ` to=RECIPIENT<|message|>BODY`, each ended by <|eom|> (more follows:
 * `<|start|>assistant to=...`) or <|eot|> / <|end_of_text|> (turn over).
 * RECIPIENT "self" is reasoning, "user" the visible answer, anything else a
 * tool whose body is an <atem:function_calls> block (spec §6).
 *
 * The parser is a state machine over a buffer of unconsumed text. Each step
 * acts only on what is already decidable, so the result does not depend on
 * how the text was split into chunks; text is held back only while it could
 * still be the start of a tag.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "util/error.h"

enum parser_state {
    ST_HEADER,    /* expecting [<|start|>][assistant] to=R<|message|>   */
    ST_REASONING, /* body of a to=self message                           */
    ST_CONTENT,   /* body of a to=user message (or one with no header)   */
    ST_TOOL,      /* body of a message to a tool                         */
    ST_DONE,      /* after <|eot|> / <|end_of_text|>: the turn is over   */
};

struct chat_parser {
    cJSON *tools;
    enum parser_state state;
    mu_buf pending; /* input not yet consumed, from pending_pos on */
    size_t pending_pos;
    mu_buf reasoning, content;     /* everything emitted so far */
    mu_buf d_reasoning, d_content; /* emitted by the current call */
    chat_tool_call *calls;
    int n_calls, cap_calls, first_new_call;
    /* the current tool message */
    char *recipient;
    mu_buf tool_body;
    size_t tool_scan_pos; /* invokes before this offset are parsed */
    /* where the searches for the next invoke's open and close tags resume:
     * a message streamed token by token is not rescanned from the start */
    size_t tool_open_from, tool_close_from;
    int tool_invokes;     /* invokes seen in this message */
    bool finished, truncated, oom;
    chat_result result;
};

static const char OPEN_CALLS[] = "<atem:function_calls>";
static const char CLOSE_CALLS[] = "</atem:function_calls>";
static const char OPEN_INVOKE[] = "<atem:invoke";
static const char CLOSE_INVOKE[] = "</atem:invoke>";
static const char OPEN_PARAM[] = "<atem:parameter";
static const char CLOSE_PARAM[] = "</atem:parameter>";

/* ---- small text helpers ----------------------------------------------------- */

/* First occurrence of needle in hay[0..n) (NUL bytes allowed), or NULL. */
static const char *find(const char *hay, size_t n, const char *needle) {
    size_t m = strlen(needle);
    if (m > n) return NULL;
    for (size_t i = 0; i + m <= n; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, m) == 0) return hay + i;
    return NULL;
}

/* s[0..n) is a proper prefix of lit (more input could complete it). */
static bool is_partial(const char *s, size_t n, const char *lit) {
    size_t m = strlen(lit);
    return n < m && memcmp(s, lit, n) == 0;
}

static bool starts_with(const char *s, size_t n, const char *lit) {
    size_t m = strlen(lit);
    return n >= m && memcmp(s, lit, m) == 0;
}

/* A special token `<|name|>` (a name of 1 to 62 letters, digits or '_')
 * at s: its length; 0 if s cannot start one; -1 if s[0..n) is a proper
 * prefix of one. The answer for a text never changes as more text arrives,
 * so it does not depend on where the stream was split. */
static int special_token_at(const char *s, size_t n) {
    enum { MAX_NAME = 62 };
    if (n == 0 || s[0] != '<') return 0;
    if (n == 1) return -1;
    if (s[1] != '|') return 0;
    size_t i = 2;
    while (i < n && i - 2 < MAX_NAME && (isalnum((unsigned char)s[i]) || s[i] == '_')) i++;
    if (i == n) return -1;
    if (i == 2 || s[i] != '|') return 0; /* also a name too long */
    if (i + 1 == n) return -1;
    return s[i + 1] == '>' ? (int)(i + 2) : 0;
}

/* Length of the longest prefix of s[0..n) that ends on a whole UTF-8
 * sequence (an incomplete trailing sequence is held for the next feed). */
static size_t utf8_whole_len(const char *s, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xC0) == 0x80) continue; /* continuation byte */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

static char *dup_range(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static void trim(const char **s, size_t *n) {
    while (*n && isspace((unsigned char)**s)) (*s)++, (*n)--;
    while (*n && isspace((unsigned char)(*s)[*n - 1])) (*n)--;
}

/* ---- emitting ------------------------------------------------------------------ */

static void emit_text(chat_parser *p, enum parser_state kind, const char *s, size_t n) {
    if (!n) return;
    mu_buf *total = kind == ST_REASONING ? &p->reasoning : &p->content;
    mu_buf *delta = kind == ST_REASONING ? &p->d_reasoning : &p->d_content;
    mu_buf_put(total, s, n);
    mu_buf_put(delta, s, n);
}

static void add_call(chat_parser *p, char *name, char *arguments, bool complete) {
    if (!name || !arguments || p->oom) {
        free(name);
        free(arguments);
        p->oom = true;
        return;
    }
    if (p->n_calls == p->cap_calls) {
        int cap = p->cap_calls ? p->cap_calls * 2 : 4;
        chat_tool_call *c = realloc(p->calls, (size_t)cap * sizeof *c);
        if (!c) {
            free(name);
            free(arguments);
            p->oom = true;
            return;
        }
        p->calls = c;
        p->cap_calls = cap;
    }
    p->calls[p->n_calls++] = (chat_tool_call){name, arguments, complete};
}

/* ---- typing arguments ------------------------------------------------------------ */

/* The function schema of a tool named name (exact, else by the part after
 * the namespace), or NULL. */
static const cJSON *tool_parameters(const chat_parser *p, const char *name) {
    const cJSON *tool, *suffix_match = NULL;
    cJSON_ArrayForEach(tool, p->tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
        if (!cJSON_IsObject(fn)) fn = tool;
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(n)) continue;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        if (strcmp(n->valuestring, name) == 0) return params;
        const char *dot = strrchr(n->valuestring, '.');
        if (dot && strcmp(dot + 1, name) == 0 && !suffix_match) suffix_match = params;
    }
    return suffix_match;
}

/* Parses s as one JSON value; NULL unless it parses completely. */
static cJSON *parse_json_value(const char *s, size_t n) {
    cJSON *v = NULL;
    if (n == 0 || chat_json_parse(s, n, &v) != MUSER_OK) {
        mu_clear_error();
        return NULL;
    }
    return v;
}

/* Converts raw text to one schema type; NULL when it does not fit. */
static cJSON *convert_to_type(const char *type, const char *raw, size_t n) {
    const char *t = raw;
    size_t tn = n;
    trim(&t, &tn);
    if (strcmp(type, "string") == 0) {
        char *s = dup_range(raw, n);
        cJSON *v = s ? cJSON_CreateString(s) : NULL;
        free(s);
        return v;
    }
    if (strcmp(type, "null") == 0) return tn == 4 && memcmp(t, "null", 4) == 0 ? cJSON_CreateNull() : NULL;
    if (strcmp(type, "boolean") == 0) {
        if (tn == 4 && memcmp(t, "true", 4) == 0) return cJSON_CreateTrue();
        if (tn == 5 && memcmp(t, "false", 5) == 0) return cJSON_CreateFalse();
        return NULL;
    }
    bool want_number = strcmp(type, "integer") == 0 || strcmp(type, "number") == 0;
    bool want_object = strcmp(type, "object") == 0, want_array = strcmp(type, "array") == 0;
    if (!want_number && !want_object && !want_array) return NULL;
    cJSON *v = parse_json_value(t, tn);
    if (v && ((want_number && cJSON_IsNumber(v)) || (want_object && cJSON_IsObject(v)) ||
              (want_array && cJSON_IsArray(v))))
        return v;
    cJSON_Delete(v);
    return NULL;
}

/* A parameter value typed by its schema property (NULL: no schema). */
static cJSON *typed_value(const cJSON *prop, const char *raw, size_t n) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(prop, "type");
    cJSON *v = NULL;
    if (cJSON_IsString(type)) {
        v = convert_to_type(type->valuestring, raw, n);
    } else if (cJSON_IsArray(type)) {
        /* e.g. ["integer", "null"]: the first type the text fits */
        const cJSON *t;
        cJSON_ArrayForEach(t, type) {
            if (cJSON_IsString(t) && (v = convert_to_type(t->valuestring, raw, n))) break;
        }
    } else {
        /* no declared type: JSON when it is a non-string JSON value */
        const char *t = raw;
        size_t tn = n;
        trim(&t, &tn);
        v = parse_json_value(t, tn);
        if (v && cJSON_IsString(v)) {
            cJSON_Delete(v);
            v = NULL;
        }
    }
    return v ? v : convert_to_type("string", raw, n);
}

/* ---- ATEM invokes --------------------------------------------------------------- */

/* Reads name="..." (or '...') in a tag that starts at s and ends at the
 * first '>'. Returns the tag's length (through '>'), 0 if unterminated. */
static size_t read_tag_name(const char *s, size_t n, const char **name, size_t *name_len) {
    const char *gt = memchr(s, '>', n);
    if (!gt) return 0;
    size_t tag_len = (size_t)(gt - s) + 1;
    *name = NULL;
    *name_len = 0;
    const char *attr = find(s, tag_len, "name=");
    if (attr && attr + 5 < gt && (attr[5] == '"' || attr[5] == '\'')) {
        const char *start = attr + 6;
        const char *end = memchr(start, attr[5], (size_t)(gt - start));
        if (end) {
            *name = start;
            *name_len = (size_t)(end - start);
        }
    }
    return tag_len;
}

/* Parses one invoke (s points at "<atem:invoke", n reaches its close tag or
 * the end of what we have) and records the call. */
static void parse_invoke(chat_parser *p, const char *s, size_t n, bool complete) {
    const char *name;
    size_t name_len;
    size_t tag = read_tag_name(s, n, &name, &name_len);
    if (!tag) return; /* cut off inside the opening tag: nothing usable */
    if (!name) {
        name = p->recipient ? p->recipient : "";
        name_len = strlen(name);
    }
    char *fname = dup_range(name, name_len);
    if (!fname) {
        p->oom = true;
        return;
    }
    const cJSON *params = tool_parameters(p, fname);
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties");
    cJSON *args = cJSON_CreateObject();
    size_t i = tag;
    while (args && i < n) {
        const char *open = find(s + i, n - i, OPEN_PARAM);
        if (!open) break;
        size_t at = (size_t)(open - s);
        const char *key;
        size_t key_len;
        size_t ptag = read_tag_name(open, n - at, &key, &key_len);
        if (!ptag || !key) break;
        const char *value = open + ptag;
        const char *close = find(value, n - (size_t)(value - s), CLOSE_PARAM);
        if (!close) break; /* value cut off: dropped */
        char *k = dup_range(key, key_len);
        cJSON *v = k ? typed_value(cJSON_GetObjectItemCaseSensitive(props, k), value,
                                   (size_t)(close - value))
                     : NULL;
        if (!k || !v) {
            free(k);
            cJSON_Delete(v);
            p->oom = true;
            break;
        }
        /* a repeated name keeps its first position and the last value */
        if (cJSON_GetObjectItemCaseSensitive(args, k)) {
            cJSON_ReplaceItemInObjectCaseSensitive(args, k, v);
        } else {
            cJSON_AddItemToObject(args, k, v);
        }
        free(k);
        i = (size_t)(close - s) + strlen(CLOSE_PARAM);
    }
    mu_buf b = {0};
    if (args) chat_json_dump(&b, args, false);
    cJSON_Delete(args);
    add_call(p, fname, args ? mu_buf_take(&b) : NULL, complete);
    mu_buf_free(&b);
}

/* After find(needle) failed on body[from..n): where a later search of the
 * grown body must start (a match may still end in new text). */
static size_t resume_point(size_t from, size_t n, const char *needle) {
    size_t keep = strlen(needle) - 1;
    return n - from > keep ? n - keep : from;
}

/* Parses the invokes of the current tool message that are complete; at the
 * end of the message also a cut-off one, or a plain JSON object body. */
static void scan_tool_body(chat_parser *p, bool end_of_message) {
    const char *body = p->tool_body.data;
    size_t n = p->tool_body.len;
    while (p->tool_scan_pos < n) {
        size_t from = p->tool_open_from > p->tool_scan_pos ? p->tool_open_from : p->tool_scan_pos;
        const char *open = find(body + from, n - from, OPEN_INVOKE);
        if (!open) {
            p->tool_open_from = resume_point(from, n, OPEN_INVOKE);
            break;
        }
        size_t at = (size_t)(open - body);
        p->tool_open_from = at;
        from = p->tool_close_from > at ? p->tool_close_from : at;
        const char *close = find(body + from, n - from, CLOSE_INVOKE);
        if (close) {
            parse_invoke(p, open, (size_t)(close - open), true);
            p->tool_invokes++;
            p->tool_scan_pos = (size_t)(close - body) + strlen(CLOSE_INVOKE);
            continue;
        }
        p->tool_close_from = resume_point(from, n, CLOSE_INVOKE);
        if (end_of_message) {
            parse_invoke(p, open, n - at, false);
            p->tool_invokes++;
            p->truncated = true;
            p->tool_scan_pos = n;
        }
        break;
    }
    if (!end_of_message) return;
    if (find(body ? body : "", n, OPEN_CALLS) && !find(body, n, CLOSE_CALLS)) p->truncated = true;
    if (p->tool_invokes == 0 && p->recipient && *p->recipient) {
        /* a tool message without ATEM: accept a bare JSON object as the arguments */
        const char *t = body ? body : "";
        size_t tn = n;
        trim(&t, &tn);
        cJSON *v = parse_json_value(t, tn);
        if (cJSON_IsObject(v)) {
            mu_buf b = {0};
            chat_json_dump(&b, v, false);
            add_call(p, dup_range(p->recipient, strlen(p->recipient)), mu_buf_take(&b), true);
            mu_buf_free(&b);
        }
        cJSON_Delete(v);
    }
}

static void begin_tool_message(chat_parser *p, const char *recipient, size_t n) {
    free(p->recipient);
    p->recipient = dup_range(recipient, n);
    if (!p->recipient) p->oom = true;
    mu_buf_free(&p->tool_body);
    p->tool_scan_pos = p->tool_open_from = p->tool_close_from = 0;
    p->tool_invokes = 0;
    p->state = ST_TOOL;
}

static void end_tool_message(chat_parser *p) {
    scan_tool_body(p, true);
    mu_buf_free(&p->tool_body);
    free(p->recipient);
    p->recipient = NULL;
}

/* ---- the state machine ------------------------------------------------------------ */

/* Header: [<|start|>][assistant] [to=RECIPIENT] <|message|>, with spaces
 * around the parts. Returns 1 (matched: *used bytes, recipient span),
 * 0 (need more text), -1 (not a header; *used = the leading
 * <|start|>assistant part, to be skipped). */
static int match_header(const char *s, size_t n, size_t *used, size_t *rec, size_t *rec_len) {
    size_t i = 0;
    *used = 0;
    *rec = *rec_len = 0;
    static const char *const optional[2] = {"<|start|>", "assistant"};
    for (int k = 0; k < 2; k++) {
        if (starts_with(s + i, n - i, optional[k])) {
            i += strlen(optional[k]);
        } else if (is_partial(s + i, n - i, optional[k])) {
            return 0;
        }
    }
    /* a bare "assistant" may be answer text; skip it only after <|start|> */
    *used = starts_with(s, n, "<|start|>") ? i : 0;
    while (i < n && isspace((unsigned char)s[i])) i++;
    if (i == n) return 0;
    if (starts_with(s + i, n - i, "to=")) {
        i += 3;
        *rec = i;
        while (i < n && !isspace((unsigned char)s[i]) && s[i] != '<') {
            if (i - *rec >= 256) return -1;
            i++;
        }
        *rec_len = i - *rec;
        while (i < n && isspace((unsigned char)s[i])) i++;
        if (i == n) return 0;
    } else if (is_partial(s + i, n - i, "to=")) {
        return 0;
    }
    if (starts_with(s + i, n - i, "<|message|>")) {
        *used = i + strlen("<|message|>");
        return 1;
    }
    return is_partial(s + i, n - i, "<|message|>") ? 0 : -1;
}

/* One step; returns false when nothing more can be done with the text. */
static bool step(chat_parser *p, bool final) {
    size_t n = p->pending.len - p->pending_pos;
    if (n == 0 || p->oom) return false; /* (pending.data is NULL until text arrives) */
    const char *s = p->pending.data + p->pending_pos;

    switch (p->state) {
    case ST_DONE:
        p->pending_pos += n; /* nothing after the end of the turn counts */
        return false;

    case ST_HEADER: {
        size_t used, rec, rec_len;
        int m = match_header(s, n, &used, &rec, &rec_len);
        if (m == 0) {
            if (!final) return false;
            /* cut off inside a header: protocol text, never content */
            const char *t = s;
            size_t tn = n;
            trim(&t, &tn);
            if (tn) p->truncated = true;
            p->pending_pos += n;
            return false;
        }
        if (m < 0) {
            /* no header: treat what follows as answer text */
            p->pending_pos += used;
            p->state = ST_CONTENT;
            return true;
        }
        const char *r = s + rec;
        p->pending_pos += used;
        if (rec_len == 4 && memcmp(r, "self", 4) == 0) {
            p->state = ST_REASONING;
        } else if (rec_len == 0 || (rec_len == 4 && memcmp(r, "user", 4) == 0)) {
            p->state = ST_CONTENT;
        } else {
            begin_tool_message(p, r, rec_len);
        }
        return true;
    }

    case ST_REASONING:
    case ST_CONTENT: {
        enum parser_state kind = p->state;
        for (size_t i = 0; i < n; i++) {
            if (s[i] != '<') continue;
            int tok = special_token_at(s + i, n - i);
            bool calls_tag = kind == ST_CONTENT && starts_with(s + i, n - i, OPEN_CALLS);
            bool partial_calls = kind == ST_CONTENT && is_partial(s + i, n - i, OPEN_CALLS);
            if (tok < 0 || partial_calls) {
                if (!final) {
                    emit_text(p, kind, s, i); /* hold back the possible tag */
                    p->pending_pos += i;
                    return false;
                }
                /* at the end: a lone special-token prefix is text (special
                 * tokens arrive whole); a cut ATEM tag is dropped */
                size_t keep = partial_calls && n - i >= 2 ? i : n;
                emit_text(p, kind, s, keep);
                if (keep < n) p->truncated = true;
                p->pending_pos += n;
                return false;
            }
            if (calls_tag) {
                /* the answer ran straight into a tool call */
                emit_text(p, kind, s, i);
                p->pending_pos += i;
                begin_tool_message(p, "", 0);
                return true;
            }
            if (tok == 0) continue;
            emit_text(p, kind, s, i);
            p->pending_pos += i;
            const char *t = s + i;
            if (starts_with(t, (size_t)tok, "<|start|>")) {
                p->state = ST_HEADER; /* the header consumes <|start|> */
            } else {
                p->pending_pos += (size_t)tok;
                if (starts_with(t, (size_t)tok, "<|eom|>")) {
                    p->state = ST_HEADER;
                } else if (starts_with(t, (size_t)tok, "<|eot|>") ||
                           starts_with(t, (size_t)tok, "<|end_of_text|>")) {
                    p->state = ST_DONE;
                } /* any other special token is dropped from the text */
            }
            return true;
        }
        size_t keep = final ? n : utf8_whole_len(s, n);
        emit_text(p, kind, s, keep);
        p->pending_pos += keep;
        return false;
    }

    case ST_TOOL: {
        for (size_t i = 0; i < n; i++) {
            if (s[i] != '<') continue;
            int tok = special_token_at(s + i, n - i);
            if (tok < 0 && !final) {
                mu_buf_put(&p->tool_body, s, i);
                p->pending_pos += i;
                scan_tool_body(p, false);
                return false;
            }
            if (tok <= 0) continue;
            mu_buf_put(&p->tool_body, s, i);
            p->pending_pos += i;
            const char *t = s + i;
            bool is_start = starts_with(t, (size_t)tok, "<|start|>");
            bool is_eom = starts_with(t, (size_t)tok, "<|eom|>");
            bool is_end = starts_with(t, (size_t)tok, "<|eot|>") || starts_with(t, (size_t)tok, "<|end_of_text|>");
            if (!is_start) p->pending_pos += (size_t)tok;
            if (is_start || is_eom || is_end) {
                end_tool_message(p);
                p->state = is_end ? ST_DONE : ST_HEADER;
            }
            return true;
        }
        mu_buf_put(&p->tool_body, s, n);
        p->pending_pos += n;
        scan_tool_body(p, false);
        return false;
    }
    }
    return false;
}

static void run(chat_parser *p, bool final) {
    while (step(p, final)) {
    }
    /* drop consumed text now and then so pending stays small */
    if (p->pending_pos > 4096 && p->pending_pos * 2 > p->pending.len) {
        size_t rest = p->pending.len - p->pending_pos;
        memmove(p->pending.data, p->pending.data + p->pending_pos, rest);
        p->pending.len = rest;
        p->pending.data[rest] = 0;
        p->pending_pos = 0;
    }
}

static void fill_delta(chat_parser *p, chat_delta *d) {
    if (!d) return;
    d->reasoning = p->d_reasoning.data ? p->d_reasoning.data : "";
    d->reasoning_len = p->d_reasoning.len;
    d->content = p->d_content.data ? p->d_content.data : "";
    d->content_len = p->d_content.len;
    d->n_calls = p->n_calls - p->first_new_call;
    d->calls = d->n_calls ? p->calls + p->first_new_call : NULL; /* no arithmetic on a NULL array */
}

static void begin_call(chat_parser *p) {
    p->d_reasoning.len = 0;
    p->d_content.len = 0;
    if (p->d_reasoning.data) p->d_reasoning.data[0] = 0;
    if (p->d_content.data) p->d_content.data[0] = 0;
    p->first_new_call = p->n_calls;
}

static bool buffers_oom(const chat_parser *p) {
    return p->oom || p->pending.oom || p->reasoning.oom || p->content.oom || p->d_reasoning.oom ||
           p->d_content.oom || p->tool_body.oom;
}

/* ---- API ------------------------------------------------------------------------------ */

int chat_parser_new(const cJSON *tools, chat_parser **out) {
    *out = NULL;
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools))
        return mu_fail(MUSER_EINVAL, "chat parser: tools must be a JSON array");
    chat_parser *p = calloc(1, sizeof *p);
    if (!p) return mu_fail(MUSER_ENOMEM, "out of memory creating the chat parser");
    if (cJSON_IsArray(tools)) {
        p->tools = cJSON_Duplicate(tools, 1);
        if (!p->tools) {
            free(p);
            return mu_fail(MUSER_ENOMEM, "out of memory creating the chat parser");
        }
    }
    p->state = ST_HEADER;
    *out = p;
    return MUSER_OK;
}

int chat_parser_feed(chat_parser *p, const char *text, size_t len, chat_delta *delta) {
    if (!p) return mu_fail(MUSER_EINVAL, "chat parser: NULL parser");
    begin_call(p);
    if (!p->finished && len) {
        mu_buf_put(&p->pending, text, len);
        run(p, false);
    }
    fill_delta(p, delta);
    if (buffers_oom(p)) return mu_fail(MUSER_ENOMEM, "out of memory parsing model output");
    return MUSER_OK;
}

int chat_parser_finish(chat_parser *p, chat_delta *delta, chat_result *result) {
    if (!p) return mu_fail(MUSER_EINVAL, "chat parser: NULL parser");
    begin_call(p);
    if (!p->finished) {
        run(p, true);
        if (p->state == ST_TOOL) end_tool_message(p);
        p->state = ST_DONE;
        p->finished = true;
    }
    fill_delta(p, delta);
    if (buffers_oom(p)) return mu_fail(MUSER_ENOMEM, "out of memory parsing model output");
    if (result) {
        result->reasoning = p->reasoning.data ? p->reasoning.data : "";
        result->content = p->content.data ? p->content.data : "";
        result->calls = p->calls;
        result->n_calls = p->n_calls;
        result->truncated = p->truncated;
    }
    return MUSER_OK;
}

void chat_parser_free(chat_parser *p) {
    if (!p) return;
    cJSON_Delete(p->tools);
    mu_buf_free(&p->pending);
    mu_buf_free(&p->reasoning);
    mu_buf_free(&p->content);
    mu_buf_free(&p->d_reasoning);
    mu_buf_free(&p->d_content);
    mu_buf_free(&p->tool_body);
    for (int i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    free(p->recipient);
    free(p);
}

/* ---- public wrappers (muser.h) -------------------------------------------- */

struct muser_chat_parser {
    chat_parser *p;
};

int muser_chat_parser_new(const char *tools_json, muser_chat_parser **out) {
    *out = NULL;
    cJSON *tools = NULL;
    if (tools_json && *tools_json) {
        int rc = chat_json_parse(tools_json, strlen(tools_json), &tools);
        if (rc) return rc;
    }
    muser_chat_parser *w = calloc(1, sizeof *w);
    int rc = w ? chat_parser_new(tools, &w->p) : mu_fail(MUSER_ENOMEM, "out of memory");
    cJSON_Delete(tools);
    if (rc) {
        free(w);
        return rc;
    }
    *out = w;
    return 0;
}

int muser_chat_parser_feed(muser_chat_parser *p, const char *text, size_t len, muser_chat_delta *delta) {
    return chat_parser_feed(p->p, text, len, delta);
}

int muser_chat_parser_finish(muser_chat_parser *p, muser_chat_delta *delta, muser_chat_result *result) {
    return chat_parser_finish(p->p, delta, result);
}

void muser_chat_parser_free(muser_chat_parser *p) {
    if (!p) return;
    chat_parser_free(p->p);
    free(p);
}
