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

int mu_ckpt_save(const mu_model *m, const mu_kv_plane *planes, size_t row_bytes, mu_ckpt_copy copy, void *ctx,
                 void **out, size_t *size) {
    const int L = m->hp.n_layer;
    size_t total = sizeof(ckpt_header);
    for (int l = 0; l < L; l++) {
        total += sizeof(mu_kv_plane);
        if (planes[l].ring) total += 2 * (size_t)planes[l].capacity * row_bytes;
    }
    uint8_t *blob = malloc(total), *p = blob;
    if (!blob) return mu_fail(MUSER_ENOMEM, "out of memory for a KV checkpoint (%zu bytes)", total);
    ckpt_header h = {CKPT_MAGIC, (uint32_t)L, row_bytes};
    memcpy(p, &h, sizeof h), p += sizeof h;
    for (int l = 0; l < L; l++) {
        memcpy(p, &planes[l], sizeof(mu_kv_plane)), p += sizeof(mu_kv_plane);
        if (!planes[l].ring) continue;
        const size_t n = (size_t)planes[l].capacity * row_bytes;
        int rc = copy(ctx, l, true, p, p + n, n);
        if (rc) {
            free(blob);
            return rc;
        }
        p += 2 * n;
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
        if (saved.ring != g->ring || saved.capacity != g->capacity)
            return mu_fail(MUSER_EINVAL, "KV checkpoint does not belong to this session (layer %d)", l);
        const size_t rows = saved.ring ? 2 * (size_t)saved.capacity * row_bytes : 0;
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
        const size_t n = (size_t)saved.capacity * row_bytes;
        int rc = copy(ctx, l, false, (uint8_t *)p, (uint8_t *)p + n, n);
        if (rc) return rc;
        p += 2 * n;
        planes[l] = saved;
    }
    return 0;
}
