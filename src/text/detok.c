/* detok.c — the public text API (muser.h): tokenize, vocabulary queries,
 * token bytes, and the streaming detokenizer.
 *
 * Streaming detokenizer contract:
 *   - muser_detok_push appends a token's bytes and returns only whole,
 *     well-formed UTF-8: a sequence cut short at the end is held back
 *     until the next token completes it;
 *   - bytes that can never become well-formed (a stray continuation byte,
 *     0xC0/0xC1/0xF5..0xFF, a sequence broken by the next byte) come out
 *     at once as U+FFFD, one per maximal ill-formed subpart (the Unicode
 *     recommendation), so one bad byte never stalls the stream;
 *   - muser_detok_flush turns a held-back incomplete sequence into U+FFFD;
 *   - the output is therefore always valid UTF-8;
 *   - SentencePiece vocabularies with add_space_prefix: the first text of
 *     the stream loses one leading space (the prefix the tokenizer added),
 *     whether or not a BOS comes first, as SentencePiece and llama2.c
 *     decode. (llama.cpp's llama_detokenize strips it only when the first
 *     token is not BOS.) A detokenizer is made for the start of a text:
 *     to continue one, push its earlier tokens first.
 */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "muser.h"
#include "text/utf8.h"
#include "text/vocab.h"
#include "util/error.h"

static int no_vocab(void) { return mu_fail(MUSER_EUNSUPPORTED, "the model has no tokenizer (no tokenizer.ggml.* metadata)"); }

int muser_tokenize(const muser_model *model, const char *text, size_t len, bool add_bos, bool parse_special,
                   muser_token *out, int cap) {
    if (!model) return mu_fail(MUSER_EINVAL, "tokenize: model is NULL");
    if (!model->vocab) return no_vocab();
    return mu_vocab_tokenize(model->vocab, text, len, add_bos, parse_special, out, cap);
}

bool muser_vocab_add_bos(const muser_model *m) { return m && m->vocab && mu_vocab_get_add_bos(m->vocab); }

muser_token muser_vocab_bos(const muser_model *m) {
    return (m && m->vocab) ? mu_vocab_get_specials(m->vocab)->bos : -1;
}

muser_token muser_vocab_eos(const muser_model *m) {
    return (m && m->vocab) ? mu_vocab_get_specials(m->vocab)->eos : -1;
}

bool muser_vocab_is_eog(const muser_model *m, muser_token t) { return m && m->vocab && mu_vocab_is_eog(m->vocab, t); }

int muser_vocab_size(const muser_model *m) { return (m && m->vocab) ? mu_vocab_n_tokens(m->vocab) : 0; }

int muser_token_to_bytes(const muser_model *m, muser_token t, bool show_special, char *buf, int cap) {
    if (!m) return mu_fail(MUSER_EINVAL, "token_to_bytes: model is NULL");
    if (!m->vocab) return no_vocab();
    const char *bytes;
    int n = mu_vocab_piece(m->vocab, t, show_special, &bytes);
    if (n < 0) return mu_fail(MUSER_ERANGE, "token id %d is outside the vocabulary [0, %d)", t, mu_vocab_n_tokens(m->vocab));
    if (n <= cap && n > 0) memcpy(buf, bytes, (size_t)n);
    return n;
}

/* ---- streaming detokenizer ------------------------------------------------ */

struct muser_detok {
    const struct mu_vocab *vocab;
    bool show_special;
    bool strip_leading_space; /* SPM: until the first text comes out */
    char held[4];             /* an incomplete UTF-8 sequence         */
    size_t n_held;
    char *out;                /* the string the last call returned    */
    size_t out_cap;
};

muser_detok *muser_detok_new(const muser_model *model, bool show_special) {
    if (!model || !model->vocab) {
        if (model) no_vocab();
        else mu_fail(MUSER_EINVAL, "detok: model is NULL");
        return NULL;
    }
    muser_detok *d = calloc(1, sizeof *d);
    if (!d) {
        mu_fail(MUSER_ENOMEM, "out of memory");
        return NULL;
    }
    d->vocab = model->vocab;
    d->show_special = show_special;
    d->strip_leading_space = mu_vocab_get_kind(model->vocab) == MU_VOCAB_SPM && mu_vocab_get_add_space_prefix(model->vocab);
    return d;
}

void muser_detok_free(muser_detok *d) {
    if (!d) return;
    free(d->out);
    free(d);
}

static bool reserve(muser_detok *d, size_t need) {
    if (need <= d->out_cap) return true;
    size_t cap = d->out_cap ? d->out_cap : 64;
    while (cap < need) cap *= 2;
    char *p = realloc(d->out, cap);
    if (!p) return false;
    d->out = p;
    d->out_cap = cap;
    return true;
}

static const char replacement_char[3] = {'\xEF', '\xBF', '\xBD'};

/* Copies the well-formed part of held+bytes to d->out (ill-formed parts as
 * U+FFFD) and keeps a trailing incomplete sequence in d->held. */
static const char *emit(muser_detok *d, const char *bytes, size_t n, bool final) {
    size_t total = d->n_held + n;
    /* Worst case: every byte becomes U+FFFD (3 bytes). */
    char small[64];
    char *in = total <= sizeof small ? small : malloc(total);
    if (!in || !reserve(d, 3 * total + 1)) {
        if (in != small) free(in);
        mu_fail(MUSER_ENOMEM, "out of memory");
        return ""; /* callers print the result: never hand them NULL */
    }
    memcpy(in, d->held, d->n_held);
    if (n) memcpy(in + d->n_held, bytes, n);
    d->n_held = 0;
    size_t o = 0;
    for (size_t i = 0; i < total;) {
        size_t len;
        uint32_t cp;
        mu_utf8_kind k = mu_utf8_next((const uint8_t *)in + i, total - i, &len, &cp);
        if (k == MU_UTF8_VALID) {
            memcpy(d->out + o, in + i, len);
            o += len;
        } else if (k == MU_UTF8_INCOMPLETE && !final) {
            memcpy(d->held, in + i, len);
            d->n_held = len;
        } else {
            memcpy(d->out + o, replacement_char, 3);
            o += 3;
        }
        i += len;
    }
    d->out[o] = 0;
    if (in != small) free(in);
    return d->out;
}

const char *muser_detok_push(muser_detok *d, muser_token t) {
    if (!d) return "";
    const char *bytes;
    int n = mu_vocab_piece(d->vocab, t, d->show_special, &bytes);
    if (n < 0) {
        mu_fail(MUSER_ERANGE, "token id %d is outside the vocabulary", t);
        n = 0; /* an unknown id adds nothing; the stream goes on */
    }
    if (n > 0 && d->strip_leading_space) {
        d->strip_leading_space = false;
        if (bytes[0] == ' ') {
            bytes++;
            n--;
        }
    }
    return emit(d, bytes, (size_t)n, false);
}

const char *muser_detok_flush(muser_detok *d) { return d ? emit(d, NULL, 0, true) : ""; }
