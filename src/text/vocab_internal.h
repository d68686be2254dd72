/* vocab_internal.h — the vocabulary's layout, shared by the files of text/
 * (loading, pre-tokenizer, BPE, SPM, special tokens, pieces). */
#ifndef MU_VOCAB_INTERNAL_H
#define MU_VOCAB_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/hashmap.h"
#include "text/vocab.h"

#define MU_PRETOK_MAX_REGEX 4

/* A pre-tokenizer: regexes applied in turn (each splits the pieces of the
 * previous one; text between matches stays a piece of its own). */
typedef struct mu_pretok_def {
    const char *name;                      /* canonical name              */
    const char *regex[MU_PRETOK_MAX_REGEX]; /* PCRE2 syntax, NULL-ended    */
    bool ignore_merges;                    /* a piece that is a token is emitted whole */
    bool add_bos_default;                  /* before add_bos_token is read */
} mu_pretok_def;

/* One node of the special-token trie (first-child / next-sibling). */
typedef struct mu_trie_node {
    int32_t first_child, next_sibling;
    int32_t token;  /* id ending here, or -1 */
    uint8_t byte;
} mu_trie_node;

struct mu_vocab {
    mu_vocab_kind kind;
    int n_tokens;
    char pre_name[64];

    /* Stored token texts: text_arena[text_off[i] .. + text_len[i]). */
    char *text_arena;
    uint64_t *text_off;
    uint32_t *text_len;
    /* Pieces (the bytes a token stands for, special tokens included). */
    char *piece_arena;
    uint64_t *piece_off;
    uint32_t *piece_len;
    uint16_t *attr;     /* enum mu_token_attr                                 */
    float *score;       /* SPM merge scores                                   */

    /* Text -> id. BPE: keys are raw bytes (the GPT-2 spelling decoded), in
     * key_arena; SPM: keys are the stored texts, in text_arena. */
    mu_strmap token_map;
    char *key_arena;

    /* BPE merges over "symbols": token ids, plus virtual ids >= n_tokens for
     * byte strings that merges build but that are not tokens. */
    mu_pairmap merges;
    int32_t byte_symbol[256]; /* symbol of each single byte                  */
    /* The merge of every byte pair, [256 * first + second] (rank_plus_1 0:
     * none, so a zeroed table is empty): most lookups are of byte pairs,
     * and this table stays in cache. */
    struct mu_byte_merge { int32_t rank_plus_1, result; } *byte_merge;
    int32_t byte_token[256];  /* token of each byte, or -1 (BPE and SPM)     */
    const mu_pretok_def *pretok;
    void *regex[MU_PRETOK_MAX_REGEX]; /* compiled pcre2_code *              */
    int n_regex;
    bool ignore_merges;

    /* Special-token matching: the trie holds every control, user-defined
     * and unknown token; order[id] is its priority (longest text first). */
    mu_trie_node *trie;
    int n_trie;
    int32_t root_child[256]; /* trie node of each first byte, or -1        */
    int32_t *special_order;  /* [n_tokens]                                 */
    size_t max_special_len;

    mu_vocab_specials sp;
    bool add_bos, add_eos, add_space_prefix;
    int32_t *eog;  /* ascending */
    int n_eog;
};

/* pretokenize.c */
const mu_pretok_def *mu_pretok_find(const char *name);
const char *mu_pretok_known_names(void);
/* The pattern with \s and \S spelled as Unicode White_Space (malloc'd, or
 * NULL). Exposed for tests. */
char *mu_pretok_adapt_whitespace(const char *pattern);
int mu_pretok_compile(struct mu_vocab *v);
void mu_pretok_release(struct mu_vocab *v);

/* bpe.c */
int mu_bpe_load_merges(struct mu_vocab *v, const gguf_kv *merges);

/* special.c */
int mu_special_build(struct mu_vocab *v);

/* The output of a tokenization: ids beyond cap are counted, not written. */
typedef struct mu_tok_out {
    int32_t *ids;
    int cap;
    int n;
} mu_tok_out;

static inline void mu_tok_emit(mu_tok_out *o, int32_t id) {
    if (o->n < o->cap) o->ids[o->n] = id;
    o->n++;
}

/* Scratch memory of one tokenization (per call, so calls are thread-safe). */
typedef struct mu_tok_scratch {
    void *buf;
    size_t cap;
    void *heap;
    size_t heap_cap;
    void *text;      /* SPM: the escaped fragment */
    size_t text_cap;
    void *match_data[MU_PRETOK_MAX_REGEX]; /* pcre2_match_data *, one per regex level */
    void *match_ctx;  /* pcre2_match_context * with a large JIT stack, made on demand */
    void *jit_stack;
    struct mu_piece_cache *cache; /* BPE results of short pieces (long texts only) */
} mu_tok_scratch;

/* Long texts repeat their words: a direct-mapped cache of piece -> ids
 * spares most of the merge work. BPE is a pure function of the piece, so
 * the cache cannot change a result. */
#define MU_PIECE_CACHE_SLOTS 8192
#define MU_PIECE_CACHE_KEY 22
#define MU_PIECE_CACHE_IDS 6
struct mu_piece_cache {
    struct mu_piece_cache_slot {
        uint8_t len, n_ids; /* len 0: empty */
        char key[MU_PIECE_CACHE_KEY];
        int32_t ids[MU_PIECE_CACHE_IDS];
    } slot[MU_PIECE_CACHE_SLOTS];
};

void mu_tok_scratch_free(mu_tok_scratch *s);
/* Grows a scratch buffer to at least need bytes (doubling). */
int mu_tok_grow(void **buf, size_t *cap, size_t need);
/* BPE over one pre-tokenized piece of raw bytes. */
int mu_bpe_piece(const struct mu_vocab *v, const char *s, size_t n, mu_tok_scratch *scratch, mu_tok_out *out);
/* The merge loop alone (no whole-piece lookup, no cache). */
int mu_bpe_merge_only(const struct mu_vocab *v, const char *s, size_t n, mu_tok_scratch *scratch, mu_tok_out *out);
/* The pre-tokenizer over one text fragment, then BPE on every piece. */
int mu_bpe_fragment(const struct mu_vocab *v, const char *s, size_t n, mu_tok_scratch *scratch, mu_tok_out *out);
/* SPM over one text fragment (escapes spaces, adds the prefix space). */
int mu_spm_fragment(const struct mu_vocab *v, const char *s, size_t n, bool add_prefix_space, mu_tok_scratch *scratch,
                    mu_tok_out *out);

/* A text fragment or a matched special token, in text order. */
typedef struct mu_fragment {
    size_t off, len; /* raw text (token < 0)                     */
    int32_t token;   /* special token id, or -1 for raw text      */
} mu_fragment;

/* Splits text at special tokens as llama.cpp does (longest tokens first,
 * leftmost occurrences, LSTRIP/RSTRIP). Returns the fragment count and a
 * malloc'd array in *frags, or a negative status. */
int mu_special_partition(const struct mu_vocab *v, const char *text, size_t len, bool parse_special,
                         mu_fragment **frags);

#endif
