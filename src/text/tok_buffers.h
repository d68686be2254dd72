/* tok_buffers.h — the memory of one tokenization, shared by the algorithms
 * (bpe.c, spm.c, pretokenize.c) and their driver (tokenize.c): the output
 * ids, growable scratch buffers and the piece cache. It calls nothing of
 * the tokenizer. Per call, so tokenizing stays thread-safe. */
#ifndef MU_TOK_BUFFERS_H
#define MU_TOK_BUFFERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* Long texts repeat their words: a direct-mapped cache of piece -> ids
 * spares most of the merge work. BPE is a pure function of the piece, so
 * the cache cannot change a result. */
#define MU_PIECE_CACHE_SLOTS 8192
#define MU_PIECE_CACHE_KEY 22
#define MU_PIECE_CACHE_IDS 6
typedef struct mu_piece_cache {
    struct mu_piece_cache_slot {
        uint8_t len, n_ids; /* len 0: empty */
        char key[MU_PIECE_CACHE_KEY];
        int32_t ids[MU_PIECE_CACHE_IDS];
    } slot[MU_PIECE_CACHE_SLOTS];
} mu_piece_cache;

/* Emits the ids cached for the piece s[0..n) and returns true; false when
 * it is not cached. */
bool mu_piece_cache_emit(const mu_piece_cache *c, const char *s, size_t n, mu_tok_out *out);
/* Remembers ids[0..n_ids) as the piece's ids, where a slot can hold them
 * (pieces of 2 to MU_PIECE_CACHE_KEY bytes, up to MU_PIECE_CACHE_IDS ids). */
void mu_piece_cache_put(mu_piece_cache *c, const char *s, size_t n, const int32_t *ids, int n_ids);

/* Scratch memory of one tokenization. */
typedef struct mu_tok_scratch {
    void *buf; /* symbols of the piece being merged */
    size_t cap;
    void *heap; /* its queue of candidate pairs */
    size_t heap_cap;
    void *text; /* SPM: the escaped fragment */
    size_t text_cap;
    mu_piece_cache *cache; /* BPE results of short pieces (long texts only), or NULL */
} mu_tok_scratch;

/* Grows a scratch buffer to at least need bytes (doubling). */
int mu_tok_grow(void **buf, size_t *cap, size_t need);
void mu_tok_scratch_free(mu_tok_scratch *s);

#endif
