/* hashmap.c — string and pair maps for the tokenizers (see hashmap.h). */
#include "text/hashmap.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "util/error.h"

/* Big blocks (Muse Glimmer's tables are 8 and 16 MB) ask for transparent
 * huge pages: with 4 KiB pages, first-touch page faults cost as much as
 * the inserts themselves. */
void *mu_big_alloc(size_t bytes, bool zero) {
    const size_t huge = 2u << 20;
    if (bytes < 2 * huge) return zero ? calloc(1, bytes) : malloc(bytes ? bytes : 1);
    void *p = NULL;
    if (posix_memalign(&p, huge, bytes) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes, MADV_HUGEPAGE); /* advice only: fine if refused */
#endif
    if (zero) memset(p, 0, bytes);
    return p;
}

static void *table_alloc(size_t bytes) { return mu_big_alloc(bytes, true); }

static size_t capacity_for(size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2) cap <<= 1;
    return cap;
}

/* 64-bit FNV-1a folded to 32 bits; never 0 (0 marks an empty slot). */
uint32_t mu_hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    uint32_t r = (uint32_t)(h >> 32);
    return r ? r : 1;
}

int mu_strmap_init(mu_strmap *m, size_t expected) {
    size_t cap = capacity_for(expected);
    m->slots = table_alloc(cap * sizeof *m->slots);
    m->mask = cap - 1;
    m->count = 0;
    return m->slots ? 0 : mu_fail(MUSER_ENOMEM, "out of memory for a token table");
}

void mu_strmap_free(mu_strmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static int strmap_grow(mu_strmap *m) {
    size_t cap = (m->mask + 1) * 2;
    mu_strmap_slot *slots = table_alloc(cap * sizeof *slots);
    if (!slots) return mu_fail(MUSER_ENOMEM, "out of memory for a token table");
    for (size_t i = 0; i <= m->mask; i++) {
        mu_strmap_slot s = m->slots[i];
        if (!s.hash) continue;
        size_t j = s.hash & (cap - 1);
        while (slots[j].hash) j = (j + 1) & (cap - 1);
        slots[j] = s;
    }
    free(m->slots);
    m->slots = slots;
    m->mask = cap - 1;
    return 0;
}

int mu_strmap_put(mu_strmap *m, const char *arena, uint32_t off, uint32_t len, int32_t value) {
    return mu_strmap_put_hashed(m, arena, off, len, mu_hash_bytes(arena + off, len), value);
}

int mu_strmap_put_hashed(mu_strmap *m, const char *arena, uint32_t off, uint32_t len, uint32_t h, int32_t value) {
    if ((m->count + 1) * 2 > m->mask + 1) {
        int rc = strmap_grow(m);
        if (rc) return rc;
    }
    const char *key = arena + off;
    size_t i = h & m->mask;
    for (;;) {
        mu_strmap_slot *s = &m->slots[i];
        if (!s->hash) {
            s->hash = h;
            s->len = len;
            s->off = off;
            s->value = value;
            m->count++;
            return 0;
        }
        if (s->hash == h && s->len == len && memcmp(arena + s->off, key, len) == 0) {
            s->value = value;
            return 0;
        }
        i = (i + 1) & m->mask;
    }
}

int32_t mu_strmap_get(const mu_strmap *m, const char *arena, const char *s, size_t n) {
    return m->slots ? mu_strmap_get_hashed(m, arena, s, n, mu_hash_bytes(s, n)) : -1;
}

int32_t mu_strmap_get_hashed(const mu_strmap *m, const char *arena, const char *s, size_t n, uint32_t h) {
    size_t i = h & m->mask;
    for (;;) {
        const mu_strmap_slot *e = &m->slots[i];
        if (!e->hash) return -1;
        if (e->hash == h && e->len == n && memcmp(arena + e->off, s, n) == 0) return e->value;
        i = (i + 1) & m->mask;
    }
}

int mu_pairmap_init(mu_pairmap *m, size_t expected) {
    size_t cap = capacity_for(expected);
    m->slots = table_alloc(cap * sizeof *m->slots);
    if (!m->slots) return mu_fail(MUSER_ENOMEM, "out of memory for the merge table");
    m->mask = cap - 1;
    m->count = 0;
    return 0;
}

void mu_pairmap_free(mu_pairmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

void mu_pairmap_put_lowest(mu_pairmap *m, int32_t left, int32_t right, int32_t rank, int32_t result) {
    /* The table is sized for every merge up front (init with the count). */
    uint64_t key = ((uint64_t)(uint32_t)(left + 1) << 32) | (uint32_t)(right + 1);
    size_t i = mu_pairmap_index(m, left, right);
    for (;;) {
        mu_pairmap_slot *s = &m->slots[i];
        if (s->key == key) {
            if (rank < s->rank) {
                s->rank = rank;
                s->result = result;
            }
            return;
        }
        if (s->key == 0) {
            s->key = key;
            s->rank = rank;
            s->result = result;
            m->count++;
            return;
        }
        i = (i + 1) & m->mask;
    }
}
