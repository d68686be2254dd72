/* cpu_checkpoint.c — ring checkpoints for prompt caching. A sliding ring
 * forgets positions older than its window, so rewinding a session to an
 * earlier prompt would otherwise force a full re-prefill. A checkpoint is a
 * copy of every ring (plane bookkeeping plus its K and V rows); growing
 * planes are not copied: they still hold the prefix and are cut back. */
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "util/error.h"

typedef struct blob_header {
    uint32_t magic, n_layer;
    uint64_t row_bytes;
} blob_header;

#define CKPT_MAGIC 0x4b50434du /* "MCPK" */

int mu_cpu_checkpoint_save(mu_backend *base, void **out, size_t *size) {
    cpu_backend *b = (cpu_backend *)base;
    const int L = b->m->hp.n_layer;
    size_t total = sizeof(blob_header);
    for (int l = 0; l < L; l++) {
        total += sizeof(mu_kv_plane);
        if (b->planes[l].ring) total += 2 * (size_t)b->planes[l].capacity * b->kv_row_bytes;
    }
    uint8_t *blob = malloc(total), *p = blob;
    if (!blob) return mu_fail(MUSER_ENOMEM, "out of memory for a KV checkpoint (%zu bytes)", total);
    blob_header h = {CKPT_MAGIC, (uint32_t)L, b->kv_row_bytes};
    memcpy(p, &h, sizeof h), p += sizeof h;
    for (int l = 0; l < L; l++) {
        memcpy(p, &b->planes[l], sizeof(mu_kv_plane)), p += sizeof(mu_kv_plane);
        if (!b->planes[l].ring) continue;
        size_t n = (size_t)b->planes[l].capacity * b->kv_row_bytes;
        memcpy(p, b->kcache[l], n), p += n;
        memcpy(p, b->vcache[l], n), p += n;
    }
    *out = blob;
    *size = total;
    return 0;
}

int mu_cpu_checkpoint_restore(mu_backend *base, const void *blob, size_t size, int pos) {
    cpu_backend *b = (cpu_backend *)base;
    const int L = b->m->hp.n_layer;
    blob_header h;
    if (size < sizeof h) return mu_fail(MUSER_EINVAL, "bad KV checkpoint");
    memcpy(&h, blob, sizeof h);
    if (h.magic != CKPT_MAGIC || h.n_layer != (uint32_t)L || h.row_bytes != b->kv_row_bytes)
        return mu_fail(MUSER_EINVAL, "KV checkpoint does not belong to this session");
    /* Validate everything before changing anything. */
    for (int l = 0; l < L; l++) {
        const mu_kv_plane *g = &b->planes[l];
        if (!g->ring && g->origin_logical + g->len < pos)
            return mu_fail(MUSER_EINVAL, "KV checkpoint at %d: layer %d holds only %lld positions", pos, l,
                           (long long)(g->origin_logical + g->len));
    }
    const uint8_t *p = (const uint8_t *)blob + sizeof h;
    for (int l = 0; l < L; l++) {
        mu_kv_plane saved;
        memcpy(&saved, p, sizeof saved), p += sizeof saved;
        if (!saved.ring) {
            mu_kv_truncate(&b->planes[l], pos);
            continue;
        }
        size_t n = (size_t)saved.capacity * b->kv_row_bytes;
        memcpy(b->kcache[l], p, n), p += n;
        memcpy(b->vcache[l], p, n), p += n;
        b->planes[l] = saved;
    }
    return 0;
}
