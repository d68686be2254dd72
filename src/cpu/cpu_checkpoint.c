/* cpu_checkpoint.c — ring checkpoints for prompt caching on the CPU: the
 * blob format is the engine's (engine/checkpoint.c); this file only moves
 * the rings' K and V rows between host caches and the blob. */
#include <string.h>

#include "cpu/cpu_internal.h"
#include "engine/engine.h"

int mu_cpu_copy_rows(void *ctx, int layer, bool to_blob, int64_t slot0, int64_t n, uint8_t *k_blob, uint8_t *v_blob) {
    cpu_backend *b = ctx;
    const size_t off = (size_t)slot0 * b->kv_row_bytes, bytes = (size_t)n * b->kv_row_bytes;
    uint8_t *k = (uint8_t *)b->kcache[layer] + off, *v = (uint8_t *)b->vcache[layer] + off;
    if (to_blob) {
        memcpy(k_blob, k, bytes);
        memcpy(v_blob, v, bytes);
    } else {
        memcpy(k, k_blob, bytes);
        memcpy(v, v_blob, bytes);
    }
    return 0;
}

int mu_cpu_checkpoint_save(mu_backend *base, void **out, size_t *size) {
    cpu_backend *b = (cpu_backend *)base;
    return mu_ckpt_save(b->m, b->planes, b->kv_row_bytes, mu_cpu_copy_rows, b, out, size);
}

int mu_cpu_checkpoint_restore(mu_backend *base, const void *blob, size_t size, int pos) {
    cpu_backend *b = (cpu_backend *)base;
    return mu_ckpt_restore(b->m, b->planes, b->kv_row_bytes, mu_cpu_copy_rows, b, blob, size, pos);
}
