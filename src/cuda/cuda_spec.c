/* cuda_spec.c — the target's side of speculative decoding on one GPU
 * (docs/dflash.md): the hidden-state capture and tentative positions.
 *
 * Capture: a chunk's rows run the prefill path (cuda_prefill.c), whose
 * residual stream h [T][E] holds layer l's input right after the tail
 * that ends layer l - 1 (the embedding for layer 0); each captured layer's
 * rows are copied from there to the host rows [T][n_cap][E] on the step's
 * stream, so they are complete when the step's synchronization returns.
 * A one-row chunk with the capture on takes the same path (cuda_forward),
 * since the decode graph keeps h in two alternating buffers.
 *
 * Tentative positions: engine/tentative.c decides which ring rows a verify
 * block overwrites; they are kept on the device (d_tent, at the offsets of
 * the engine's row store) by device-to-device copies on the step's stream,
 * ordered before the block and after it without a synchronization per
 * layer: the checkpoint mover's pageable copies and per-layer syncs cost
 * about 2 ms a step on the 30B's 39 sliding layers once their rings are
 * full (2 x 39 layers, begin and keep).
 */
#include "cuda/cuda_internal.h"

int cuda_capture(cuda_backend *b, int layer, int T) {
    const size_t row = sizeof(float) * (size_t)b->E;
    for (int k = 0; k < b->n_cap; k++) {
        if (b->cap_layers[k] != layer) continue;
        /* rows t of h -> cap_rows[t][k] (a 2-D copy: the host rows are n_cap rows apart) */
        CU_CHECK(cudaMemcpy2DAsync(b->cap_rows + (size_t)k * (size_t)b->E, row * (size_t)b->n_cap, b->wk->h, row, row,
                                   (size_t)T, cudaMemcpyDeviceToHost, b->exec.stream));
    }
    return 0;
}

int cuda_set_capture(mu_backend *base, const int *layers, int n, float *rows) {
    cuda_backend *b = (cuda_backend *)base;
    RC(mu_capture_check(b->m, layers, n));
    b->cap_layers = n ? layers : NULL;
    b->n_cap = n;
    b->cap_rows = n ? rows : NULL;
    return 0;
}

/* The engine's row mover for tentative rows: k_blob / v_blob point into
 * tentative.rows (host), whose offsets place the rows in d_tent. */
static int tentative_copy_rows(void *ctx, int layer, bool to_blob, int64_t slot0, int64_t n, uint8_t *k_blob,
                               uint8_t *v_blob) {
    cuda_backend *b = ctx;
    const size_t row = (size_t)b->KVD * b->kv_elem, off = (size_t)slot0 * row, bytes = (size_t)n * row;
    uint8_t *k = (uint8_t *)b->kc[layer] + off, *v = (uint8_t *)b->vc[layer] + off;
    uint8_t *dk = b->d_tent + (k_blob - b->tentative.rows), *dv = b->d_tent + (v_blob - b->tentative.rows);
    const cudaStream_t st = b->exec.stream;
    CU_CHECK(cudaMemcpyAsync(to_blob ? dk : k, to_blob ? k : dk, bytes, cudaMemcpyDeviceToDevice, st));
    CU_CHECK(cudaMemcpyAsync(to_blob ? dv : v, to_blob ? v : dv, bytes, cudaMemcpyDeviceToDevice, st));
    return 0;
}

int cuda_tentative_begin(mu_backend *base, int n) {
    cuda_backend *b = (cuda_backend *)base;
    RC(cuda_use_device(b));
    /* d_tent as large as the row store will be (mu_tentative_begin grows it to n rows a layer) */
    const size_t row = (size_t)b->KVD * b->kv_elem;
    const int rows = n > b->tentative.cap_rows ? n : b->tentative.cap_rows;
    const size_t need = (size_t)b->m->hp.n_layer * 2 * (size_t)(rows > 0 ? rows : 1) * row;
    if (need > b->d_tent_bytes) {
        if (b->d_tent) cudaFree(b->d_tent); /* (synchronizes: no copy of the last step is left on it) */
        b->d_tent = NULL;
        b->d_tent_bytes = 0;
        RC(cuda_dalloc((void **)&b->d_tent, need, "the tentative rows"));
        b->d_tent_bytes = need;
    }
    /* the copies run on the step's stream before the block's appends: no synchronization */
    return mu_tentative_begin(&b->tentative, b->m, b->planes, row, n, tentative_copy_rows, b);
}

int cuda_tentative_keep(mu_backend *base, int n_keep) {
    cuda_backend *b = (cuda_backend *)base;
    RC(cuda_use_device(b));
    RC(mu_tentative_keep(&b->tentative, b->m, b->planes, (size_t)b->KVD * b->kv_elem, n_keep, tentative_copy_rows, b));
    return cuda_sync_checked(b); /* the planes are whole when this returns (one synchronization, not one a layer) */
}
