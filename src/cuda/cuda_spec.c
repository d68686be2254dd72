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
 * Tentative positions: engine/tentative.c over the checkpoint row mover,
 * which copies the ring rows a verify block overwrites to the host and back.
 */
#include "cuda/cuda_internal.h"

int cuda_capture(cuda_backend *b, int layer, int T) {
    const size_t row = sizeof(float) * (size_t)b->E;
    for (int k = 0; k < b->n_cap; k++) {
        if (b->cap_layers[k] != layer) continue;
        /* rows t of h -> cap_rows[t][k] (a 2-D copy: the host rows are n_cap rows apart) */
        CU_CHECK(cudaMemcpy2DAsync(b->cap_rows + (size_t)k * (size_t)b->E, row * (size_t)b->n_cap, b->h, row, row,
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

int cuda_tentative_begin(mu_backend *base, int n) {
    cuda_backend *b = (cuda_backend *)base;
    RC(cuda_use_device(b));
    /* the rows are read while no step is in flight: every path synchronizes before it returns */
    return mu_tentative_begin(&b->tentative, b->m, b->planes, (size_t)b->KVD * b->kv_elem, n, cuda_ckpt_copy_rows, b);
}

int cuda_tentative_keep(mu_backend *base, int n_keep) {
    cuda_backend *b = (cuda_backend *)base;
    RC(cuda_use_device(b));
    return mu_tentative_keep(&b->tentative, b->m, b->planes, (size_t)b->KVD * b->kv_elem, n_keep, cuda_ckpt_copy_rows,
                             b);
}
