/* hashmap.h — the two lookups the tokenizers live on: byte string -> id
 * (token text) and (left id, right id) -> merge (BPE ranks). Both are open
 * addressing with linear probing in power-of-two tables kept at most half
 * full, built once at load and then only read (safe to share across
 * threads).
 */
#ifndef MU_HASHMAP_H
#define MU_HASHMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Keys are byte ranges of an arena the caller owns and passes to every call
 * (so the arena may be reallocated while the map is built). */
typedef struct mu_strmap_slot {
    uint32_t hash;  /* 0: empty slot                        */
    uint32_t len;
    uint32_t off;   /* key bytes: arena[off .. off+len)     */
    int32_t value;
} mu_strmap_slot;   /* 16 bytes: the tables are cache-bound */

typedef struct mu_strmap {
    mu_strmap_slot *slots;
    size_t mask;    /* capacity - 1                          */
    size_t count;
} mu_strmap;

int mu_strmap_init(mu_strmap *m, size_t expected);
void mu_strmap_free(mu_strmap *m);
/* Inserts or replaces (the last value for a key wins, as token lists that
 * repeat a text resolve to the later id). Arenas are below 4 GiB (callers
 * check). Returns 0 or MUSER_ENOMEM. */
int mu_strmap_put(mu_strmap *m, const char *arena, uint32_t off, uint32_t len, int32_t value);
/* The value for key s[0..n), or -1. */
int32_t mu_strmap_get(const mu_strmap *m, const char *arena, const char *s, size_t n);
/* The same with h = mu_hash_bytes(s, n) known, and a prefetch of h's slot:
 * bulk loads hash ahead and prefetch so that cache misses overlap. */
int32_t mu_strmap_get_hashed(const mu_strmap *m, const char *arena, const char *s, size_t n, uint32_t h);
int mu_strmap_put_hashed(mu_strmap *m, const char *arena, uint32_t off, uint32_t len, uint32_t h, int32_t value);
static inline void mu_strmap_prefetch(const mu_strmap *m, uint32_t h) { __builtin_prefetch(&m->slots[h & m->mask]); }

typedef struct mu_pairmap_slot {
    uint64_t key;   /* (left + 1) << 32 | (right + 1); 0: empty */
    int32_t rank;
    int32_t result;
} mu_pairmap_slot;

typedef struct mu_pairmap {
    mu_pairmap_slot *slots;
    size_t mask;
    size_t count;
} mu_pairmap;

int mu_pairmap_init(mu_pairmap *m, size_t expected);
void mu_pairmap_free(mu_pairmap *m);
/* Inserts, or keeps the lower rank if the pair is present (the first of
 * repeated merges wins). Ids are >= 0 and < INT32_MAX. */
void mu_pairmap_put_lowest(mu_pairmap *m, int32_t left, int32_t right, int32_t rank, int32_t result);
static inline size_t mu_pairmap_index(const mu_pairmap *m, int32_t left, int32_t right) {
    uint64_t key = ((uint64_t)(uint32_t)(left + 1) << 32) | (uint32_t)(right + 1);
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & m->mask;
}
static inline void mu_pairmap_prefetch(const mu_pairmap *m, int32_t left, int32_t right) {
    __builtin_prefetch(&m->slots[mu_pairmap_index(m, left, right)], 1);
}

/* The slot for the pair, or NULL. */
static inline const mu_pairmap_slot *mu_pairmap_get(const mu_pairmap *m, int32_t left, int32_t right) {
    uint64_t key = ((uint64_t)(uint32_t)(left + 1) << 32) | (uint32_t)(right + 1);
    size_t i = mu_pairmap_index(m, left, right);
    for (;;) {
        const mu_pairmap_slot *s = &m->slots[i];
        if (s->key == key) return s;
        if (s->key == 0) return NULL;
        i = (i + 1) & m->mask;
    }
}

uint32_t mu_hash_bytes(const char *s, size_t n);

/* malloc (zero: calloc) that asks for huge pages for blocks of 4 MB or
 * more; release with free(). */
void *mu_big_alloc(size_t bytes, bool zero);

#endif
