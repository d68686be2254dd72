/* checkpoint.c — ring checkpoints for prompt caching, one blob format for
 * every backend. A sliding ring forgets positions older than its window, so
 * rewinding a session to an earlier prompt would otherwise force a full
 * re-prefill. A checkpoint is a copy of every ring (plane bookkeeping plus
 * its K and V rows); growing planes are not copied: they still hold the
 * prefix and are cut back on restore. The backend moves the rows (host
 * memory or device memory) through a callback. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "util/error.h"

typedef struct ckpt_header {
    uint32_t magic, n_layer;
    uint64_t row_bytes;
} ckpt_header;

#define CKPT_MAGIC 0x4b50434du /* "MCPK" */

/* The physical runs of a ring's held rows: [origin_physical, ...) up to
 * the end of the buffer, then from slot 0 when the rows wrap. */
static int held_runs(const mu_kv_plane *p, int64_t first[2], int64_t count[2]) {
    const int64_t to_end = p->capacity - p->origin_physical;
    first[0] = p->origin_physical;
    count[0] = p->len < to_end ? p->len : to_end;
    first[1] = 0;
    count[1] = p->len - count[0];
    return count[1] > 0 ? 2 : 1;
}

static bool plane_sane(const mu_kv_plane *p) {
    return p->capacity > 0 && p->len >= 0 && p->len <= p->capacity && p->origin_physical >= 0 &&
           p->origin_physical < p->capacity && p->origin_logical >= 0;
}

int mu_ckpt_save(const mu_model *m, const mu_kv_plane *planes, size_t row_bytes, mu_ckpt_copy copy, void *ctx,
                 void **out, size_t *size) {
    const int L = m->hp.n_layer;
    size_t total = sizeof(ckpt_header);
    for (int l = 0; l < L; l++) {
        total += sizeof(mu_kv_plane);
        if (planes[l].ring) total += 2 * (size_t)planes[l].len * row_bytes;
    }
    uint8_t *blob = malloc(total), *p = blob;
    if (!blob) return mu_fail(MUSER_ENOMEM, "out of memory for a KV checkpoint (%zu bytes)", total);
    ckpt_header h = {CKPT_MAGIC, (uint32_t)L, row_bytes};
    memcpy(p, &h, sizeof h), p += sizeof h;
    for (int l = 0; l < L; l++) {
        const mu_kv_plane *g = &planes[l];
        memcpy(p, g, sizeof(mu_kv_plane)), p += sizeof(mu_kv_plane);
        if (!g->ring) continue;
        int64_t first[2], count[2];
        const int runs = held_runs(g, first, count);
        for (int r = 0; r < runs; r++) {
            const size_t n = (size_t)count[r] * row_bytes;
            int rc = copy(ctx, l, true, first[r], count[r], p, p + n);
            if (rc) {
                free(blob);
                return rc;
            }
            p += 2 * n;
        }
    }
    *out = blob;
    *size = total;
    return 0;
}

int mu_ckpt_restore(const mu_model *m, mu_kv_plane *planes, size_t row_bytes, mu_ckpt_copy copy, void *ctx,
                    const void *blob, size_t size, int pos) {
    const int L = m->hp.n_layer;
    ckpt_header h;
    if (size < sizeof h) return mu_fail(MUSER_EINVAL, "bad KV checkpoint");
    memcpy(&h, blob, sizeof h);
    if (h.magic != CKPT_MAGIC || h.n_layer != (uint32_t)L || h.row_bytes != row_bytes)
        return mu_fail(MUSER_EINVAL, "KV checkpoint does not belong to this session");
    /* Validate everything before changing anything. */
    size_t need = sizeof h;
    const uint8_t *p = (const uint8_t *)blob + sizeof h;
    for (int l = 0; l < L; l++) {
        const mu_kv_plane *g = &planes[l];
        if (!g->ring && g->origin_logical + g->len < pos)
            return mu_fail(MUSER_EINVAL, "KV checkpoint at %d: layer %d holds only %lld positions", pos, l,
                           (long long)(g->origin_logical + g->len));
        mu_kv_plane saved;
        if (size < need + sizeof saved) return mu_fail(MUSER_EINVAL, "KV checkpoint is truncated");
        memcpy(&saved, p, sizeof saved);
        if (saved.ring != g->ring || saved.capacity != g->capacity || (saved.ring && !plane_sane(&saved)))
            return mu_fail(MUSER_EINVAL, "KV checkpoint does not belong to this session (layer %d)", l);
        const size_t rows = saved.ring ? 2 * (size_t)saved.len * row_bytes : 0;
        need += sizeof saved + rows;
        p += sizeof saved + rows;
        if (size < need) return mu_fail(MUSER_EINVAL, "KV checkpoint is truncated");
    }
    p = (const uint8_t *)blob + sizeof h;
    for (int l = 0; l < L; l++) {
        mu_kv_plane saved;
        memcpy(&saved, p, sizeof saved), p += sizeof saved;
        if (!saved.ring) {
            mu_kv_truncate(&planes[l], pos);
            continue;
        }
        int64_t first[2], count[2];
        const int runs = held_runs(&saved, first, count);
        for (int r = 0; r < runs; r++) {
            const size_t n = (size_t)count[r] * row_bytes;
            int rc = copy(ctx, l, false, first[r], count[r], (uint8_t *)p, (uint8_t *)p + n);
            if (rc) return rc;
            p += 2 * n;
        }
        planes[l] = saved;
    }
    return 0;
}
