#include "text/tok_buffers.h"

#include <stdlib.h>
#include <string.h>

#include "text/hashmap.h"
#include "util/error.h"

static bool cacheable(size_t n) { return n >= 2 && n <= MU_PIECE_CACHE_KEY; }

bool mu_piece_cache_emit(const mu_piece_cache *c, const char *s, size_t n, mu_tok_out *out) {
    if (!cacheable(n)) return false;
    const struct mu_piece_cache_slot *slot = &c->slot[mu_hash_bytes(s, n) % MU_PIECE_CACHE_SLOTS];
    if (slot->len != n || memcmp(slot->key, s, n) != 0) return false;
    for (int i = 0; i < slot->n_ids; i++) mu_tok_emit(out, slot->ids[i]);
    return true;
}

void mu_piece_cache_put(mu_piece_cache *c, const char *s, size_t n, const int32_t *ids, int n_ids) {
    if (!cacheable(n) || n_ids > MU_PIECE_CACHE_IDS) return;
    struct mu_piece_cache_slot *slot = &c->slot[mu_hash_bytes(s, n) % MU_PIECE_CACHE_SLOTS];
    slot->len = (uint8_t)n;
    slot->n_ids = (uint8_t)n_ids;
    memcpy(slot->key, s, n);
    if (n_ids) memcpy(slot->ids, ids, (size_t)n_ids * sizeof *ids);
}

int mu_tok_grow(void **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 4096;
    while (c < need) c *= 2;
    void *p = realloc(*buf, c);
    if (!p) return mu_fail(MUSER_ENOMEM, "out of memory tokenizing");
    *buf = p;
    *cap = c;
    return 0;
}

void mu_tok_scratch_free(mu_tok_scratch *s) {
    free(s->buf);
    free(s->heap);
    free(s->text);
    free(s->cache);
    memset(s, 0, sizeof *s);
}
