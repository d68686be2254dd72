/* vocab.h — the tokenizer vocabulary read from tokenizer.ggml.* metadata
 * (the model owns one; muser.h's text functions use it).
 *
 * Two algorithms, chosen by tokenizer.ggml.model:
 *   "gpt2"  byte-level BPE: special-token partition, regex pre-tokenizer
 *           (per tokenizer.ggml.pre), merges by rank over raw bytes.
 *   "llama" SentencePiece-style: special-token partition, space -> U+2581,
 *           optional space prefix, bigram merging by score, <0xXX> byte
 *           fallback.
 * Semantics follow llama.cpp (src/llama-vocab.cpp) except where a comment
 * says otherwise (each deviation is commented where it happens).
 *
 * The files, lowest first; each calls only files listed before it:
 *   utf8, hashmap, pair_heap.h  leaves
 *   tok_buffers   one tokenization's output ids, scratch and piece cache
 *   vocab_internal.h  the vocabulary's layout (data only)
 *   special       special tokens: the trie, the partition of a text
 *   spm           SentencePiece bigram merging of a fragment
 *   bpe           the merge table (built from the merges) and the merge loop
 *   pretokenize   the regex pre-tokenizers; every piece goes to bpe
 *   tokenize      mu_vocab_tokenize: partition, then spm, or pretokenize
 *   vocab         loading: reads the metadata and calls the algorithms'
 *                 constructors (mu_bpe_load_merges, mu_pretok_compile,
 *                 mu_special_build); no algorithm calls into it
 *   detok         the text functions of muser.h
 */
#ifndef MU_VOCAB_H
#define MU_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

struct mu_vocab;

typedef enum mu_vocab_kind {
    MU_VOCAB_BPE = 1, /* tokenizer.ggml.model = "gpt2"  */
    MU_VOCAB_SPM = 2, /* tokenizer.ggml.model = "llama" */
} mu_vocab_kind;

/* Token attributes, from tokenizer.ggml.token_type plus load-time fixes. */
enum mu_token_attr {
    MU_TOKEN_UNDEFINED = 0,
    MU_TOKEN_UNKNOWN = 1 << 0,
    MU_TOKEN_UNUSED = 1 << 1,
    MU_TOKEN_NORMAL = 1 << 2,
    MU_TOKEN_CONTROL = 1 << 3,
    MU_TOKEN_USER_DEFINED = 1 << 4,
    MU_TOKEN_BYTE = 1 << 5,
    MU_TOKEN_LSTRIP = 1 << 6, /* a match eats whitespace on its left  */
    MU_TOKEN_RSTRIP = 1 << 7, /* a match eats whitespace on its right */
};

/* Special ids; -1 when the vocabulary has none. */
typedef struct mu_vocab_specials {
    int32_t bos, eos, eot, eom, unk, pad, sep;
} mu_vocab_specials;

/* Loads the vocabulary. A file without tokenizer metadata gives *out = NULL
 * and success (such a model can run on token ids only). n_vocab is the
 * model's embedding row count, which the vocabulary must not exceed. */
int mu_vocab_load(const gguf_file *f, int n_vocab, struct mu_vocab **out);
void mu_vocab_free(struct mu_vocab *v);

/* Tokenizes text (any bytes). Writes at most cap ids and returns the full
 * count, or a negative status. Thread-safe: a vocabulary is read-only. */
int mu_vocab_tokenize(const struct mu_vocab *v, const char *text, size_t len, bool add_bos, bool parse_special,
                      int32_t *out, int cap);

/* The bytes a token stands for: *bytes points into the vocabulary. Control
 * and unknown tokens give their text only with show_special; user-defined
 * tokens always give their text. Returns the length, or -1 for an id out
 * of range. */
int mu_vocab_piece(const struct mu_vocab *v, int32_t id, bool show_special, const char **bytes);

int mu_vocab_n_tokens(const struct mu_vocab *v);
mu_vocab_kind mu_vocab_get_kind(const struct mu_vocab *v);
const char *mu_vocab_pre_name(const struct mu_vocab *v); /* "llama4", ... ("" for SPM) */
const mu_vocab_specials *mu_vocab_get_specials(const struct mu_vocab *v);
bool mu_vocab_get_add_bos(const struct mu_vocab *v);
bool mu_vocab_get_add_eos(const struct mu_vocab *v);
bool mu_vocab_get_add_space_prefix(const struct mu_vocab *v);
bool mu_vocab_is_eog(const struct mu_vocab *v, int32_t id);
/* The end-of-generation ids, ascending. */
int mu_vocab_eog_ids(const struct mu_vocab *v, const int32_t **ids);
uint32_t mu_vocab_attr(const struct mu_vocab *v, int32_t id); /* 0 when out of range */
/* The token's text as the file stores it (GPT-2 spelling for BPE). */
const char *mu_vocab_text(const struct mu_vocab *v, int32_t id, size_t *len);
/* The id whose stored text is exactly s[0..n), or -1 (linear scan: for
 * setup code, e.g. finding "<|eot|>"). */
int32_t mu_vocab_find_text(const struct mu_vocab *v, const char *s, size_t n);

#endif
