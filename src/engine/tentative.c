/* tentative.c — positions that may be taken back (speculative decoding).
 *
 * A verify step appends a whole drafted block to the target's KV planes
 * before it knows how much of it is right. Cutting a growing plane back is
 * a truncate; a full sliding ring is harder: each append overwrote the
 * ring's oldest row, so the rows the rejected appends overwrote are saved
 * first and put back after. The planes then equal, row for row, what
 * appending only the kept positions would have made: rejected positions
 * leave no trace. One implementation for every backend: the backend moves
 * rows through the checkpoint callback (engine.h, mu_ckpt_copy). */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "util/error.h"

/* Rows the next n appends evict from p (a growing plane never evicts). */
static int64_t evictions(const mu_kv_plane *p, int64_t n) {
    if (!p->ring) return 0;
    int64_t e = p->len + n - p->capacity;
    if (e < 0) e = 0;
    return e < p->len ? e : p->len;
}

/* Moves saved rows [i0, i1) of layer l (the oldest rows of the saved
 * plane, i = 0 the oldest) between the cache and the buffer, one physical
 * run at a time. */
static int move_rows(mu_tentative *t, int l, bool to_blob, int64_t i0, int64_t i1, size_t row_bytes, mu_ckpt_copy copy,
                     void *ctx) {
    const mu_kv_plane *p = &t->saved[l];
    uint8_t *k = t->rows + ((size_t)l * (size_t)t->cap_rows * 2) * row_bytes, *v = k + (size_t)t->cap_rows * row_bytes;
    while (i0 < i1) {
        const int64_t slot = (p->origin_physical + i0) % p->capacity;
        int64_t run = p->capacity - slot;
        if (run > i1 - i0) run = i1 - i0;
        int rc = copy(ctx, l, to_blob, slot, run, k + (size_t)i0 * row_bytes, v + (size_t)i0 * row_bytes);
        if (rc) return rc;
        i0 += run;
    }
    return 0;
}

int mu_tentative_begin(mu_tentative *t, const mu_model *m, const mu_kv_plane *planes, size_t row_bytes, int n,
                       mu_ckpt_copy copy, void *ctx) {
    const int L = m->hp.n_layer;
    t->active = false;
    if (n < 1) return mu_fail(MUSER_EINVAL, "tentative: nothing to guard");
    if (!t->saved && !(t->saved = calloc((size_t)L, sizeof(mu_kv_plane))))
        return mu_fail(MUSER_ENOMEM, "out of memory");
    if (n > t->cap_rows) {
        /* [n_layer][K rows n | V rows n][row_bytes] */
        uint8_t *r = realloc(t->rows, (size_t)L * 2 * (size_t)n * row_bytes);
        if (!r) return mu_fail(MUSER_ENOMEM, "out of memory for the tentative rows");
        t->rows = r;
        t->cap_rows = n;
    }
    memcpy(t->saved, planes, sizeof(mu_kv_plane) * (size_t)L);
    for (int l = 0; l < L; l++) {
        int rc = move_rows(t, l, true, 0, evictions(&planes[l], n), row_bytes, copy, ctx);
        if (rc) return rc;
    }
    t->n = n;
    t->active = true;
    return 0;
}

int mu_tentative_keep(mu_tentative *t, const mu_model *m, mu_kv_plane *planes, size_t row_bytes, int n_keep,
                      mu_ckpt_copy copy, void *ctx) {
    if (!t->active) return mu_fail(MUSER_EINVAL, "tentative: no guarded positions to keep");
    if (n_keep < 0 || n_keep > t->n) return mu_fail(MUSER_ERANGE, "tentative: keep %d of %d", n_keep, t->n);
    t->active = false;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const mu_kv_plane *saved = &t->saved[l];
        /* the planes' rows hold every appended position; only the bookkeeping
         * and the overwritten old rows need putting back */
        planes[l] = *saved;
        for (int i = 0; i < n_keep; i++)
            if (mu_kv_append(&planes[l]) < 0) return mu_fail(MUSER_ECONTEXT, "layer %d: KV plane is full", l);
        /* the rows the rejected appends overwrote: held again, as the
         * bookkeeping (saved + n_keep appends) already says */
        int rc = move_rows(t, l, false, evictions(saved, n_keep), evictions(saved, t->n), row_bytes, copy, ctx);
        if (rc) return rc;
    }
    return 0;
}

void mu_tentative_free(mu_tentative *t) {
    free(t->saved);
    free(t->rows);
    memset(t, 0, sizeof *t);
}
