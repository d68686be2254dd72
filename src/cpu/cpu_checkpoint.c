/* cpu_checkpoint.c — ring checkpoints for prompt caching on the CPU: the
 * blob format is the engine's (engine/checkpoint.c); this file only moves
 * the rings' K and V rows between host caches and the blob. */
#include <string.h>

#include "cpu/cpu_internal.h"
#include "engine/engine.h"

static int copy_rows(void *ctx, int layer, bool to_blob, uint8_t *k_blob, uint8_t *v_blob, size_t n) {
    cpu_backend *b = ctx;
    if (to_blob) {
        memcpy(k_blob, b->kcache[layer], n);
        memcpy(v_blob, b->vcache[layer], n);
    } else {
        memcpy(b->kcache[layer], k_blob, n);
        memcpy(b->vcache[layer], v_blob, n);
    }
    return 0;
}

int mu_cpu_checkpoint_save(mu_backend *base, void **out, size_t *size) {
    cpu_backend *b = (cpu_backend *)base;
    return mu_ckpt_save(b->m, b->planes, b->kv_row_bytes, copy_rows, b, out, size);
}

int mu_cpu_checkpoint_restore(mu_backend *base, const void *blob, size_t size, int pos) {
    cpu_backend *b = (cpu_backend *)base;
    return mu_ckpt_restore(b->m, b->planes, b->kv_row_bytes, copy_rows, b, blob, size, pos);
}
