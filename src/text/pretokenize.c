/* pretokenize.c — the regex pre-tokenizers of byte-level BPE vocabularies.
 *
 * tokenizer.ggml.pre names a pre-tokenizer; each is one or more regexes
 * applied in turn: every regex splits each piece left by the previous one
 * into its matches and the text between them (which stays a piece too),
 * as llama.cpp's unicode_regex_split does. We run the patterns as the
 * upstream tokenizers wrote them (tiktoken's and Hugging Face's), with
 * PCRE2 in UTF + UCP mode, rather than llama.cpp's ASCII-adapted forms: for
 * Muse Glimmer the reference is tiktoken, and llama.cpp's adaptation
 * splits combining marks off Khmer letters where tiktoken does not.
 *
 * Whitespace: Rust's regex (tiktoken) and Oniguruma (Hugging Face) take \s
 * as the Unicode White_Space property. PCRE2's \s also matches U+180E,
 * which is not White_Space, so \s and \S are spelled out as that set
 * (WS below) before compiling.
 *
 * Invalid UTF-8 input: PCRE2_MATCH_INVALID_UTF makes ill-formed bytes match
 * nothing, so they end up in the between-matches pieces and go through BPE
 * as raw bytes. (llama.cpp instead replaces each invalid byte with U+FFFD;
 * keeping the bytes makes decode(encode(x)) == x hold for any input.)
 */
#include "text/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "text/bpe.h"
#include "util/error.h"

/* Unicode White_Space, as a character-class body. */
#define WS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* The patterns, exactly as the upstream tokenizers write them. */

/* GPT-2 (also the second stage of starcoder and of the default). */
#define GPT2_RE "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"

/* tiktoken's o200k-style pattern (Llama 4, Muse Glimmer): an optional
 * non-letter, then upper-then-lower letter runs in which marks (\p{M})
 * count as letters, with contractions; numbers in groups of up to three;
 * punctuation runs with trailing newlines or '/'; newline runs; whitespace.
 * The test suite checks it against cases-specials.json's "pattern". */
#define O200K_RE                                                                                           \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"              \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"              \
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*" \
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* Llama 3 (tokenizer.json; llama.cpp runs a hand-written equivalent). */
#define LLAMA3_RE                                                                                          \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* ignore_merges for llama4: tiktoken emits a piece that is a token as that
 * token before merging (llama.cpp merges it). The test suite checks that
 * every Muse Glimmer token merges back to itself, so both give the same
 * ids there; the lookup is also the fast path. */
static const mu_pretok_def pretok_defs[] = {
    {"llama4", {O200K_RE, NULL}, true, false},
    {"llama-bpe", {LLAMA3_RE, NULL}, true, true},
    {"gpt-2", {GPT2_RE, NULL}, false, false},
    {"starcoder", {"\\p{N}", GPT2_RE, NULL}, false, false},
    /* llama.cpp's fallback for BPE files without (or with "default") pre */
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2_RE, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false},
};

/* Names llama.cpp maps to the same pre-tokenizer type and flags. */
static const struct {
    const char *alias, *canonical;
} pretok_aliases[] = {
    {"gpt-4o", "llama4"},
    {"llama3", "llama-bpe"},
    {"llama-v3", "llama-bpe"},
};

const mu_pretok_def *mu_pretok_find(const char *name) {
    for (size_t i = 0; i < sizeof pretok_aliases / sizeof pretok_aliases[0]; i++)
        if (!strcmp(name, pretok_aliases[i].alias)) name = pretok_aliases[i].canonical;
    for (size_t i = 0; i < sizeof pretok_defs / sizeof pretok_defs[0]; i++)
        if (!strcmp(name, pretok_defs[i].name)) return &pretok_defs[i];
    return NULL;
}

const char *mu_pretok_known_names(void) {
    return "llama4 (alias gpt-4o), llama-bpe (aliases llama3, llama-v3), gpt-2, starcoder, default";
}

char *mu_pretok_adapt_whitespace(const char *src) {
    size_t n = strlen(src), cap = n * (sizeof WS + 4) + 1, o = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = src[i];
        if (c == '\\' && i + 1 < n) {
            char e = src[++i];
            const char *rep = NULL;
            if (e == 's') rep = in_class ? WS : "[" WS "]";
            else if (e == 'S' && !in_class) rep = "[^" WS "]";
            else if (e == 'S') {
                free(out); /* a negated set inside a class cannot be spelled out */
                return NULL;
            }
            if (rep) {
                size_t k = strlen(rep);
                memcpy(out + o, rep, k);
                o += k;
            } else {
                out[o++] = c;
                out[o++] = e;
            }
            continue;
        }
        if (c == '[' && !in_class) in_class = true;
        else if (c == ']' && in_class) in_class = false;
        out[o++] = c;
    }
    out[o] = 0;
    return out;
}

int mu_pretok_compile(struct mu_vocab *v) {
    v->n_regex = 0;
    for (int i = 0; i < MU_PRETOK_MAX_REGEX && v->pretok->regex[i]; i++) {
        int err;
        PCRE2_SIZE err_off;
        char *pattern = mu_pretok_adapt_whitespace(v->pretok->regex[i]);
        if (!pattern) {
            mu_pretok_release(v);
            return mu_fail(MUSER_ENOMEM, "out of memory compiling the pre-tokenizer");
        }
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, NULL);
        free(pattern);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            mu_pretok_release(v);
            return mu_fail(MUSER_EUNSUPPORTED, "pre-tokenizer '%s': regex %d does not compile at offset %zu: %s",
                           v->pretok->name, i, (size_t)err_off, (const char *)msg);
        }
        /* JIT is an optimisation: without it PCRE2 interprets the pattern. */
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        v->regex[v->n_regex++] = re;
    }
    return 0;
}

void mu_pretok_release(struct mu_vocab *v) {
    for (int i = 0; i < v->n_regex; i++) pcre2_code_free(v->regex[i]);
    v->n_regex = 0;
}

void mu_pretok_scratch_free(mu_pretok_scratch *ps) {
    for (int i = 0; i < MU_PRETOK_MAX_REGEX; i++) pcre2_match_data_free(ps->match_data[i]);
    pcre2_match_context_free(ps->match_ctx);
    pcre2_jit_stack_free(ps->jit_stack);
    memset(ps, 0, sizeof *ps);
}

/* Runs regex `level` over s[0..n) from offset `from`. Returns 1 with the
 * match in [*m0, *m1), 0 for no match, or a negative status. */
static int find_match(const struct mu_vocab *v, int level, const char *s, size_t n, size_t from, mu_pretok_scratch *ps,
                      size_t *m0, size_t *m1) {
    pcre2_code *re = v->regex[level];
    if (!ps->match_data[level]) {
        ps->match_data[level] = pcre2_match_data_create_from_pattern(re, NULL);
        if (!ps->match_data[level]) return mu_fail(MUSER_ENOMEM, "out of memory for regex matching");
    }
    pcre2_match_data *md = ps->match_data[level];
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, 0, md, ps->match_ctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !ps->jit_stack) {
        /* Very long runs (e.g. megabytes of spaces) outgrow the default
         * 32 KiB JIT stack; retry once with a large one. */
        ps->jit_stack = pcre2_jit_stack_create(64 * 1024, 256 * 1024 * 1024, NULL);
        ps->match_ctx = pcre2_match_context_create(NULL);
        if (!ps->jit_stack || !ps->match_ctx) return mu_fail(MUSER_ENOMEM, "out of memory for regex matching");
        pcre2_jit_stack_assign(ps->match_ctx, NULL, ps->jit_stack);
        rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, 0, md, ps->match_ctx);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return mu_fail(MUSER_EINVAL, "pre-tokenizer '%s' failed on a %zu-byte piece: %s", v->pretok->name, n,
                       (const char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *m0 = ov[0];
    *m1 = ov[1];
    return 1;
}

static int split_level(const struct mu_vocab *v, int level, const char *s, size_t n, mu_pretok_scratch *ps,
                       mu_tok_scratch *sc, mu_tok_out *out) {
    if (n == 0) return 0;
    if (level == v->n_regex) return mu_bpe_piece(v, s, n, sc, out);
    size_t pos = 0;
    while (pos < n) {
        size_t m0, m1;
        int rc = find_match(v, level, s, n, pos, ps, &m0, &m1);
        if (rc < 0) return rc;
        if (rc == 0) break;
        if (m1 == m0) {
            /* None of our patterns matches the empty string; be safe anyway. */
            if (m0 >= n) break;
            size_t next = m0 + 1;
            while (next < n && ((uint8_t)s[next] & 0xC0) == 0x80) next++;
            rc = split_level(v, level + 1, s + pos, next - pos, ps, sc, out);
            if (rc) return rc;
            pos = next;
            continue;
        }
        if (m0 > pos && (rc = split_level(v, level + 1, s + pos, m0 - pos, ps, sc, out))) return rc;
        if ((rc = split_level(v, level + 1, s + m0, m1 - m0, ps, sc, out))) return rc;
        pos = m1;
    }
    return split_level(v, level + 1, s + pos, n - pos, ps, sc, out);
}

int mu_pretok_fragment(const struct mu_vocab *v, const char *s, size_t n, mu_pretok_scratch *ps, mu_tok_scratch *sc,
                       mu_tok_out *out) {
    return split_level(v, 0, s, n, ps, sc, out);
}
