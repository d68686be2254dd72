/* pretokenize.h — the regex pre-tokenizers of byte-level BPE vocabularies:
 * the loader finds and compiles one; tokenizing splits each text fragment
 * with it and hands every piece to BPE. */
#ifndef MU_PRETOKENIZE_H
#define MU_PRETOKENIZE_H

#include <stdbool.h>

#include "text/tok_buffers.h"
#include "text/vocab_internal.h"

/* A pre-tokenizer: regexes applied in turn (each splits the pieces of the
 * previous one; text between matches stays a piece of its own). */
typedef struct mu_pretok_def {
    const char *name;                       /* canonical name              */
    const char *regex[MU_PRETOK_MAX_REGEX]; /* PCRE2 syntax, NULL-ended    */
    bool ignore_merges;                     /* a piece that is a token is emitted whole */
    bool add_bos_default;                   /* before add_bos_token is read */
} mu_pretok_def;

const mu_pretok_def *mu_pretok_find(const char *name);
const char *mu_pretok_known_names(void);
/* The pattern with \s and \S spelled as Unicode White_Space (malloc'd, or
 * NULL). Exposed for tests. */
char *mu_pretok_adapt_whitespace(const char *pattern);
/* Compiles v->pretok's regexes into v->regex; release frees them. */
int mu_pretok_compile(struct mu_vocab *v);
void mu_pretok_release(struct mu_vocab *v);

/* Regex match state of one tokenization, made on demand. */
typedef struct mu_pretok_scratch {
    void *match_data[MU_PRETOK_MAX_REGEX]; /* pcre2_match_data *, one per regex level */
    void *match_ctx; /* pcre2_match_context * with a large JIT stack */
    void *jit_stack;
} mu_pretok_scratch;
void mu_pretok_scratch_free(mu_pretok_scratch *ps);

/* The pre-tokenizer over one text fragment, then BPE on every piece. */
int mu_pretok_fragment(const struct mu_vocab *v, const char *s, size_t n, mu_pretok_scratch *ps, mu_tok_scratch *scratch,
                       mu_tok_out *out);

#endif
