/* vocab_internal.h — the vocabulary's layout, data only, shared by the
 * files of text/ (loading, pre-tokenizer, BPE, SPM, special tokens,
 * pieces); each algorithm's functions are in its own header (vocab.h says
 * in which order they call each other). */
#ifndef MU_VOCAB_INTERNAL_H
#define MU_VOCAB_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/hashmap.h"
#include "text/vocab.h"

/* Regexes of one pre-tokenizer, at most. */
#define MU_PRETOK_MAX_REGEX 4

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
    const struct mu_pretok_def *pretok; /* pretokenize.h */
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

#endif
