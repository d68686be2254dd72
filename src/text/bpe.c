/* bpe.c — byte-level BPE: the merge table and the merge loop.
 *
 * Everything works on raw bytes: token texts and merges are decoded from
 * the GPT-2 spelling once at load. A merge "A B" (rank = its index in
 * tokenizer.ggml.merges) becomes (symbol(A), symbol(B)) -> (rank,
 * symbol(AB)) in a hash map, where a symbol is the token id of a byte
 * string, or a virtual id (>= n_tokens) for a string that merges build
 * but that is not a token (llama.cpp merges by text, so such strings can
 * appear; they come out as their byte tokens at the end).
 *
 * The merge loop is llama.cpp's: repeatedly merge the adjacent pair with
 * the lowest rank, leftmost first on ties, until no adjacent pair has a
 * rank. A binary heap with lazy deletion makes it O(n log n) per piece, so
 * megabyte-long pieces (runs of spaces, minified code) stay fast.
 */
#include <stdlib.h>
#include <string.h>

#include "text/bpe.h"

#include "text/pair_heap.h"
#include "text/utf8.h"
#include "util/error.h"

typedef struct merge_entry {
    union {
        struct {
            uint32_t off;         /* left bytes then right bytes, in the temp arena */
            uint32_t left_len, right_len;
        } text;                   /* passes 1 to 3                   */
        struct {
            int32_t left, right;  /* symbols of the parts            */
        } sym;                    /* pass 4                          */
    };
    uint32_t hash;                /* of left+right, then of left     */
    uint32_t right_hash;
    int32_t result;               /* symbol of left+right, or -1: unusable merge */
} merge_entry;

/* How far ahead bulk lookups prefetch: enough to overlap a few misses. */
#define PREFETCH_AHEAD 8

/* The symbol of a byte string: token, else virtual, else -1. */
static int32_t symbol_of(const struct mu_vocab *v, const mu_strmap *virt, const char *arena, const char *s, size_t n,
                         uint32_t h) {
    int32_t id = mu_strmap_get_hashed(&v->token_map, v->key_arena, s, n, h);
    return id >= 0 ? id : mu_strmap_get_hashed(virt, arena, s, n, h);
}

/* Loading is bound by cache misses in the hash tables (1.3 million lookups
 * and 440,000 inserts for Muse Glimmer), so each pass hashes first and
 * prefetches PREFETCH_AHEAD entries ahead of the one it resolves. */
int mu_bpe_load_merges(struct mu_vocab *v, const gguf_kv *kv) {
    if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_STRING)
        return mu_fail(MUSER_EFORMAT, "tokenizer.ggml.merges must be an array of strings");
    if (kv->arr_count > INT32_MAX / 2) return mu_fail(MUSER_EFORMAT, "tokenizer.ggml.merges has too many entries");
    const size_t n_merges = (size_t)kv->arr_count;
    uint64_t total = 256;
    for (size_t i = 0; i < n_merges; i++) total += kv->arr_strs[i].len;
    if (total >= UINT32_MAX) return mu_fail(MUSER_EFORMAT, "tokenizer.ggml.merges holds more than 4 GiB of text");

    merge_entry *me = mu_big_alloc((n_merges ? n_merges : 1) * sizeof *me, false);
    char *arena = mu_big_alloc(total, false);
    mu_strmap virt = {0};
    int rc = (!me || !arena) ? mu_fail(MUSER_ENOMEM, "out of memory loading merges") : mu_strmap_init(&virt, 4096);
    if (rc) goto done;

    /* Single bytes first: every byte is a symbol even without a token. */
    int32_t next_virtual = v->n_tokens;
    for (int b = 0; b < 256; b++) {
        arena[b] = (char)b;
        int32_t id = mu_strmap_get(&v->token_map, v->key_arena, arena + b, 1);
        v->byte_token[b] = id;
        if (id < 0) {
            id = next_virtual++;
            if ((rc = mu_strmap_put(&virt, arena, (uint32_t)b, 1, id))) goto done;
        }
        v->byte_symbol[b] = id;
    }

    /* Pass 1: decode every merge "A B" into raw bytes A|B. */
    uint64_t used = 256;
    size_t n_unusable = 0;
    for (size_t i = 0; i < n_merges; i++) {
        const gguf_str m = kv->arr_strs[i];
        me[i].result = -1;
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        if (!sp) {
            rc = mu_fail(MUSER_EFORMAT, "tokenizer.ggml.merges[%zu] has no space between its two parts", i);
            goto done;
        }
        size_t llen = (size_t)(sp - m.ptr), rlen = m.len - llen - 1;
        long l = mu_gpt2_decode(m.ptr, llen, arena + used);
        long r = l < 0 ? -1 : mu_gpt2_decode(sp + 1, rlen, arena + used + (size_t)l);
        if (l <= 0 || r <= 0) {
            n_unusable++; /* a part outside the byte alphabet can never be built */
            continue;
        }
        me[i].text.off = (uint32_t)used;
        me[i].text.left_len = (uint32_t)l;
        me[i].text.right_len = (uint32_t)r;
        me[i].hash = mu_hash_bytes(arena + used, (size_t)(l + r));
        me[i].result = 0; /* usable */
        used += (uint64_t)(l + r);
    }

    /* Pass 2: give every result a symbol (a token, or a new virtual id). */
    for (size_t i = 0; i < n_merges; i++) {
        if (i + PREFETCH_AHEAD < n_merges && me[i + PREFETCH_AHEAD].result == 0)
            mu_strmap_prefetch(&v->token_map, me[i + PREFETCH_AHEAD].hash);
        if (me[i].result < 0) continue;
        const char *p = arena + me[i].text.off;
        uint32_t len = me[i].text.left_len + me[i].text.right_len;
        int32_t sym = symbol_of(v, &virt, arena, p, len, me[i].hash);
        if (sym < 0) {
            if (next_virtual == INT32_MAX) {
                rc = mu_fail(MUSER_EFORMAT, "too many merges");
                goto done;
            }
            sym = next_virtual++;
            if ((rc = mu_strmap_put_hashed(&virt, arena, me[i].text.off, len, me[i].hash, sym))) goto done;
        }
        me[i].result = sym;
        /* Hash the parts now, for pass 3. */
        me[i].hash = mu_hash_bytes(p, me[i].text.left_len);
        me[i].right_hash = mu_hash_bytes(p + me[i].text.left_len, me[i].text.right_len);
    }

    /* Pass 3: the symbols of the parts. */
    for (size_t i = 0; i < n_merges; i++) {
        if (i + PREFETCH_AHEAD < n_merges && me[i + PREFETCH_AHEAD].result >= 0) {
            mu_strmap_prefetch(&v->token_map, me[i + PREFETCH_AHEAD].hash);
            mu_strmap_prefetch(&v->token_map, me[i + PREFETCH_AHEAD].right_hash);
        }
        if (me[i].result < 0) continue;
        const char *p = arena + me[i].text.off;
        int32_t left = symbol_of(v, &virt, arena, p, me[i].text.left_len, me[i].hash);
        int32_t right = symbol_of(v, &virt, arena, p + me[i].text.left_len, me[i].text.right_len, me[i].right_hash);
        if (left < 0 || right < 0) {
            n_unusable++; /* a part no merge builds: it never appears */
            me[i].result = -1;
            continue;
        }
        /* a merge of two single bytes: its slot in byte_merge, plus one */
        me[i].hash = me[i].text.left_len == 1 && me[i].text.right_len == 1
                         ? 1 + 256u * (uint8_t)p[0] + (uint8_t)p[1] : 0;
        me[i].sym.left = left;
        me[i].sym.right = right;
    }

    /* Pass 4: the pair table (rank = index in the list). */
    if ((rc = mu_pairmap_init(&v->merges, n_merges))) goto done;
    for (size_t i = 0; i < n_merges; i++) {
        if (i + PREFETCH_AHEAD < n_merges && me[i + PREFETCH_AHEAD].result >= 0)
            mu_pairmap_prefetch(&v->merges, me[i + PREFETCH_AHEAD].sym.left, me[i + PREFETCH_AHEAD].sym.right);
        if (me[i].result >= 0) mu_pairmap_put_lowest(&v->merges, me[i].sym.left, me[i].sym.right, (int32_t)i, me[i].result);
    }
    /* The byte-pair table: what the pair table says for two single bytes,
     * the lowest rank first (distinct bytes have distinct symbols, and a
     * longer part never has a byte's symbol). */
    v->byte_merge = calloc(256 * 256, sizeof *v->byte_merge);
    if (!v->byte_merge) {
        rc = mu_fail(MUSER_ENOMEM, "out of memory loading merges");
        goto done;
    }
    for (size_t i = 0; i < n_merges; i++) {
        struct mu_byte_merge *b = me[i].result >= 0 && me[i].hash ? &v->byte_merge[me[i].hash - 1] : NULL;
        if (b && !b->rank_plus_1) *b = (struct mu_byte_merge){(int32_t)i + 1, me[i].result};
    }
    if (n_unusable) mu_info("tokenizer: %zu of %zu merges can never apply and were skipped", n_unusable, n_merges);
done:
    mu_strmap_free(&virt);
    free(arena);
    free(me);
    return rc;
}

typedef struct bpe_symbol {
    int32_t sym;          /* token or virtual id                      */
    int32_t prev, next;   /* neighbours in the piece, -1 at the ends  */
    uint32_t start, len;  /* bytes of the piece it covers; len 0: merged away */
} bpe_symbol;

typedef struct bpe_pair {
    int32_t rank, left, right;   /* symbol indexes in the piece        */
    int32_t left_sym, right_sym; /* what they were when queued         */
    int32_t result;
} bpe_pair;

static inline bool pair_before(const bpe_pair *a, const bpe_pair *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

MU_PAIR_HEAP(heap, bpe_pair, pair_before)

static void queue_pair(const struct mu_vocab *v, const char *text, const bpe_symbol *s, int32_t left, bpe_pair *h,
                       size_t *nh) {
    if (left < 0) return;
    int32_t right = s[left].next;
    if (right < 0) return;
    int32_t rank, result;
    if (s[left].len == 1 && s[right].len == 1) {
        const struct mu_byte_merge *b = &v->byte_merge[256 * (uint8_t)text[s[left].start] + (uint8_t)text[s[right].start]];
        rank = b->rank_plus_1 - 1;
        result = b->result;
    } else {
        const mu_pairmap_slot *m = mu_pairmap_get(&v->merges, s[left].sym, s[right].sym);
        rank = m ? m->rank : -1;
        result = m ? m->result : -1;
    }
    if (rank < 0) return;
    bpe_pair p = {rank, left, right, s[left].sym, s[right].sym, result};
    heap_push(h, nh, p);
}


int mu_bpe_piece(const struct mu_vocab *v, const char *s, size_t n, mu_tok_scratch *sc, mu_tok_out *out) {
    if (v->ignore_merges || n == 1) {
        int32_t id = mu_strmap_get(&v->token_map, v->key_arena, s, n);
        if (id >= 0) {
            mu_tok_emit(out, id);
            return 0;
        }
    }
    if (sc->cache && mu_piece_cache_emit(sc->cache, s, n, out)) return 0;
    const int first = out->n;
    int rc = mu_bpe_merge_only(v, s, n, sc, out);
    /* Remember it if every id was written (ids past cap are only counted). */
    if (!rc && sc->cache && out->n <= out->cap) mu_piece_cache_put(sc->cache, s, n, out->ids + first, out->n - first);
    return rc;
}

int mu_bpe_merge_only(const struct mu_vocab *v, const char *s, size_t n, mu_tok_scratch *sc, mu_tok_out *out) {
    if (n == 0) return 0;
    if (n > INT32_MAX / 4) return mu_fail(MUSER_EINVAL, "a pre-tokenized piece of %zu bytes is too long", n);
    int rc = mu_tok_grow(&sc->buf, &sc->cap, n * sizeof(bpe_symbol));
    if (!rc) rc = mu_tok_grow(&sc->heap, &sc->heap_cap, 3 * n * sizeof(bpe_pair));
    if (rc) return rc;
    bpe_symbol *sym = sc->buf;
    bpe_pair *heap = sc->heap;
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        sym[i].sym = v->byte_symbol[(uint8_t)s[i]];
        sym[i].prev = (int32_t)i - 1;
        sym[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
        sym[i].start = (uint32_t)i;
        sym[i].len = 1;
    }
    for (size_t i = 0; i + 1 < n; i++) queue_pair(v, s, sym, (int32_t)i, heap, &nh);
    while (nh) {
        bpe_pair p = heap_pop(heap, &nh);
        bpe_symbol *l = &sym[p.left], *r = &sym[p.right];
        /* Skip entries made stale by earlier merges. */
        if (!l->len || !r->len || l->next != p.right || l->sym != p.left_sym || r->sym != p.right_sym) continue;
        l->sym = p.result;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = p.left;
        queue_pair(v, s, sym, l->prev, heap, &nh);
        queue_pair(v, s, sym, p.left, heap, &nh);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next) {
        if (sym[i].sym < v->n_tokens) {
            mu_tok_emit(out, sym[i].sym);
            continue;
        }
        /* Not a token: its bytes, each as its byte token (if it has one). */
        for (uint32_t k = 0; k < sym[i].len; k++) {
            int32_t b = v->byte_token[(uint8_t)s[sym[i].start + k]];
            if (b >= 0) mu_tok_emit(out, b);
        }
    }
    return 0;
}
