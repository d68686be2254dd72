/* chat_json.c — JSON the way Python sees it, for the chat template.
 *
 * The template prints argument values with str() and nested values with
 * json.dumps, so the distinction Python keeps between 1 and 1.0 (and exact
 * big integers) shows up in the prompt. cJSON stores only a double, so we
 * parse with cJSON and then attach each number's source text to its node.
 */
#include "text/chat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

/* ---- parsing ------------------------------------------------------------------ */

/* Length of a strict JSON number at s (RFC 8259), or 0. */
static size_t strict_number_len(const char *s, size_t n) {
    size_t i = 0;
    if (i < n && s[i] == '-') i++;
    if (i >= n) return 0;
    if (s[i] == '0') {
        i++;
    } else if (s[i] >= '1' && s[i] <= '9') {
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    } else {
        return 0;
    }
    if (i < n && s[i] == '.') {
        i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return 0;
    }
    return i;
}

typedef struct number_lexemes {
    const char *text;
    size_t len, pos; /* scan position in text */
} number_lexemes;

/* Finds the next number token outside strings; returns its start or NULL,
 * with its extent (the run of number characters cJSON would look at). */
static const char *next_number(number_lexemes *nl, size_t *n) {
    const char *t = nl->text;
    while (nl->pos < nl->len) {
        char c = t[nl->pos];
        if (c == '"') {
            nl->pos++;
            while (nl->pos < nl->len && t[nl->pos] != '"') nl->pos += t[nl->pos] == '\\' ? 2 : 1;
            nl->pos++;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t start = nl->pos;
            while (nl->pos < nl->len && strchr("+-0123456789.eE", t[nl->pos]) && t[nl->pos])
                nl->pos++;
            *n = nl->pos - start;
            return t + start;
        } else {
            nl->pos++;
        }
    }
    return NULL;
}

/* Attaches source text to every number node in document order (cJSON keeps
 * children in document order, duplicates included). */
static int attach_lexemes(cJSON *v, number_lexemes *nl) {
    if (cJSON_IsNumber(v)) {
        size_t n = 0;
        const char *s = next_number(nl, &n);
        if (!s) return mu_fail(MUSER_EINVAL, "JSON: internal number scan mismatch");
        if (strict_number_len(s, n) != n)
            return mu_fail(MUSER_EINVAL, "malformed JSON number '%.*s' at byte %zu",
                           (int)(n > 40 ? 40 : n), s, (size_t)(s - nl->text));
        char *lex = cJSON_malloc(n + 1);
        if (!lex) return mu_fail(MUSER_ENOMEM, "out of memory parsing JSON");
        memcpy(lex, s, n);
        lex[n] = 0;
        v->valuestring = lex;
        return MUSER_OK;
    }
    for (cJSON *c = v->child; c; c = c->next) {
        int rc = attach_lexemes(c, nl);
        if (rc) return rc;
    }
    return MUSER_OK;
}

/* Python dicts keep one entry per key: the last value, at the first key's
 * position. */
static void dedupe_keys(cJSON *v) {
    for (cJSON *c = v->child; c; c = c->next) dedupe_keys(c);
    if (!cJSON_IsObject(v)) return;
    for (cJSON *first = v->child; first; first = first->next) {
        cJSON *c = first->next;
        while (c) {
            cJSON *next = c->next;
            if (c->string && first->string && strcmp(c->string, first->string) == 0) {
                /* the later node (same key) takes the first one's place */
                cJSON_DetachItemViaPointer(v, c);
                cJSON_ReplaceItemViaPointer(v, first, c);
                first = c;
            }
            c = next;
        }
    }
}

/* Byte offset of a \u0000 escape inside a string, or -1: cJSON strings end
 * at NUL, so such text would silently lose its tail. */
static long nul_escape_at(const char *t, size_t n) {
    bool in_string = false;
    for (size_t i = 0; i < n; i++) {
        if (!in_string) {
            in_string = t[i] == '"';
        } else if (t[i] == '"') {
            in_string = false;
        } else if (t[i] == '\\' && i + 1 < n) {
            if (t[i + 1] == 'u' && i + 6 <= n && memcmp(t + i + 2, "0000", 4) == 0) return (long)i;
            i++;
        }
    }
    return -1;
}

int chat_json_parse(const char *text, size_t len, cJSON **out) {
    *out = NULL;
    if (!text) return mu_fail(MUSER_EINVAL, "JSON: no text");
    char *copy = malloc(len + 1); /* cJSON wants a terminator inside the length */
    if (!copy) return mu_fail(MUSER_ENOMEM, "out of memory parsing JSON");
    memcpy(copy, text, len);
    copy[len] = 0;
    if (memchr(text, 0, len)) {
        free(copy);
        return mu_fail(MUSER_EINVAL, "malformed JSON: NUL byte in the text");
    }
    long nul = nul_escape_at(copy, len);
    if (nul >= 0) {
        free(copy);
        return mu_fail(MUSER_EINVAL, "unsupported JSON: \\u0000 in a string at byte %ld", nul);
    }
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(copy, len + 1, &end, 1);
    if (!v) {
        size_t at = end ? (size_t)(end - copy) : 0;
        free(copy);
        return mu_fail(MUSER_EINVAL, "malformed JSON at byte %zu", at);
    }
    number_lexemes nl = {copy, len, 0};
    int rc = attach_lexemes(v, &nl);
    free(copy);
    if (rc) {
        cJSON_Delete(v);
        return rc;
    }
    dedupe_keys(v);
    *out = v;
    return MUSER_OK;
}

/* ---- printing ----------------------------------------------------------------- */

/* repr() of a finite, non-zero double: the shortest digits that read back
 * to the same value, in fixed notation for decimal exponents -4 < e < 16
 * (with ".0" when integral) and as d.ddde±XX otherwise. */
static void put_float_repr(mu_buf *b, double x) {
    if (x == 0) {
        mu_buf_puts(b, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    /* tmp: [-]d[.ddd]e[+-]XX */
    const char *p = tmp;
    if (*p == '-') {
        mu_buf_putc(b, '-');
        p++;
    }
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int exp10 = atoi(p + 1);
    int decpt = exp10 + 1; /* digits[0] sits just left of the point at decpt 1 */
    if (decpt <= -4 || decpt > 16) {
        mu_buf_putc(b, digits[0]);
        if (nd > 1) {
            mu_buf_putc(b, '.');
            mu_buf_put(b, digits + 1, (size_t)nd - 1);
        }
        char e[16];
        snprintf(e, sizeof e, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        mu_buf_puts(b, e);
    } else if (decpt <= 0) {
        mu_buf_puts(b, "0.");
        for (int i = 0; i < -decpt; i++) mu_buf_putc(b, '0');
        mu_buf_put(b, digits, (size_t)nd);
    } else if (decpt >= nd) {
        mu_buf_put(b, digits, (size_t)nd);
        for (int i = nd; i < decpt; i++) mu_buf_putc(b, '0');
        mu_buf_puts(b, ".0");
    } else {
        mu_buf_put(b, digits, (size_t)decpt);
        mu_buf_putc(b, '.');
        mu_buf_put(b, digits + decpt, (size_t)(nd - decpt));
    }
}

/* A number as Python prints it; json_mode spells overflow as JSON does. */
static void put_number(mu_buf *b, const cJSON *v, bool json_mode) {
    const char *lex = v->valuestring;
    bool is_int;
    if (lex) {
        is_int = !strpbrk(lex, ".eE");
    } else {
        is_int = v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e16;
    }
    if (is_int) {
        if (lex) {
            /* Python ints are exact; only "-0" changes (to 0) */
            const char *digits = lex[0] == '-' ? lex + 1 : lex;
            if (strcmp(digits, "0") == 0) {
                mu_buf_putc(b, '0');
            } else {
                mu_buf_puts(b, lex);
            }
        } else {
            char tmp[32];
            snprintf(tmp, sizeof tmp, "%.0f", v->valuedouble == 0 ? 0.0 : v->valuedouble);
            mu_buf_puts(b, tmp);
        }
        return;
    }
    double x = lex ? strtod(lex, NULL) : v->valuedouble;
    if (isnan(x)) {
        mu_buf_puts(b, json_mode ? "NaN" : "nan");
    } else if (isinf(x)) {
        if (x < 0) mu_buf_putc(b, '-');
        mu_buf_puts(b, json_mode ? "Infinity" : "inf");
    } else {
        put_float_repr(b, x);
    }
}

/* A JSON string literal as json.dumps(ensure_ascii=False) writes it. */
static void put_json_string(mu_buf *b, const char *s) {
    mu_buf_putc(b, '"');
    const char *run = s;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        mu_buf_put(b, run, (size_t)(p - run));
        run = p + 1;
        switch (c) {
        case '"': mu_buf_puts(b, "\\\""); break;
        case '\\': mu_buf_puts(b, "\\\\"); break;
        case '\n': mu_buf_puts(b, "\\n"); break;
        case '\r': mu_buf_puts(b, "\\r"); break;
        case '\t': mu_buf_puts(b, "\\t"); break;
        case '\b': mu_buf_puts(b, "\\b"); break;
        case '\f': mu_buf_puts(b, "\\f"); break;
        default: {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", c);
            mu_buf_puts(b, esc);
        }
        }
    }
    mu_buf_puts(b, run);
    mu_buf_putc(b, '"');
}

/* False for a float that overflows a double (1e999) or is not a number;
 * integers keep their exact text. */
static bool number_is_finite(const cJSON *v) {
    const char *lex = v->valuestring;
    if (lex && !strpbrk(lex, ".eE")) return true;
    return isfinite(lex ? strtod(lex, NULL) : v->valuedouble);
}

void chat_json_dump(mu_buf *b, const cJSON *v, bool python_style) {
    const char *item_sep = python_style ? ", " : ",";
    const char *key_sep = python_style ? ": " : ":";
    if (!v || cJSON_IsNull(v)) {
        mu_buf_puts(b, "null");
    } else if (cJSON_IsTrue(v)) {
        mu_buf_puts(b, "true");
    } else if (cJSON_IsFalse(v)) {
        mu_buf_puts(b, "false");
    } else if (cJSON_IsNumber(v)) {
        if (python_style || number_is_finite(v)) put_number(b, v, true);
        else mu_buf_puts(b, "null"); /* strict JSON has no Infinity (as JSON.stringify writes it) */
    } else if (cJSON_IsString(v)) {
        put_json_string(b, v->valuestring ? v->valuestring : "");
    } else if (cJSON_IsArray(v)) {
        mu_buf_putc(b, '[');
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child) mu_buf_puts(b, item_sep);
            chat_json_dump(b, c, python_style);
        }
        mu_buf_putc(b, ']');
    } else if (cJSON_IsObject(v)) {
        mu_buf_putc(b, '{');
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child) mu_buf_puts(b, item_sep);
            put_json_string(b, c->string ? c->string : "");
            mu_buf_puts(b, key_sep);
            chat_json_dump(b, c, python_style);
        }
        mu_buf_putc(b, '}');
    } else if (cJSON_IsRaw(v) && v->valuestring) {
        mu_buf_puts(b, v->valuestring);
    } else {
        mu_buf_puts(b, "null");
    }
}

bool chat_json_py_str(mu_buf *b, const cJSON *v) {
    if (!v || cJSON_IsNull(v)) {
        mu_buf_puts(b, "None");
    } else if (cJSON_IsTrue(v)) {
        mu_buf_puts(b, "True");
    } else if (cJSON_IsFalse(v)) {
        mu_buf_puts(b, "False");
    } else if (cJSON_IsNumber(v)) {
        put_number(b, v, false);
    } else if (cJSON_IsString(v)) {
        mu_buf_puts(b, v->valuestring ? v->valuestring : "");
    } else {
        return false;
    }
    return true;
}

bool chat_json_truthy(const cJSON *v) {
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return false;
    if (cJSON_IsTrue(v)) return true;
    if (cJSON_IsNumber(v)) {
        if (v->valuestring) return strtod(v->valuestring, NULL) != 0;
        return v->valuedouble != 0;
    }
    if (cJSON_IsString(v)) return v->valuestring && v->valuestring[0];
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) return v->child != NULL;
    return true;
}
