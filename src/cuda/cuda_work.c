/* cuda_work.c — the work buffers of a session's steps that grow with its
 * chunk (activations of T rows, split-K partials, the chunk's logits
 * (cuda_logit_rows_reserve), the dequantized tiles), held once by the
 * one-GPU sessions of a model with the same chunk, context split and lane:
 * the sessions of `muser serve --parallel N` would each hold about 1.2 GB
 * of them on the 30B, though the server's worker runs one session's call
 * at a time and nothing in them outlives a call. The sessions that share
 * them also share their stream (and the cuBLAS handle bound to it), so
 * their steps are ordered on the GPU as well as on the host. Each session
 * keeps its KV cache, step records, one-row buffers and graphs.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h"

static pthread_mutex_t g_work_lock = PTHREAD_MUTEX_INITIALIZER;

cu_work *cuda_work_find(const cuda_backend *b, int64_t parts, size_t wtmp_bytes) {
    if (!b->w || b->tp) return NULL;
    pthread_mutex_lock(&g_work_lock);
    cu_work *k = b->w->work;
    if (k && !(k->T_max == b->T_max && k->parts == parts && k->wtmp_bytes == wtmp_bytes && k->fast == b->fast))
        k = NULL;
    if (k) k->refs++;
    pthread_mutex_unlock(&g_work_lock);
    return k;
}

int cuda_work_create(cuda_backend *b, uint64_t held_bytes) {
    cu_work *k = calloc(1, sizeof *k);
    if (!k) return mu_fail(MUSER_ENOMEM, "out of memory");
    k->refs = 1;
    k->T_max = b->T_max;
    k->fast = b->fast;
    k->device = b->device;
    k->held_bytes = held_bytes;
    k->cublas = b->cublas;
    b->wk = k; /* (from here on released with b) */
    CU_CHECK(cudaStreamCreateWithFlags(&k->stream, cudaStreamNonBlocking));
    if (b->cublas->create(&k->blas) != CUBLAS_STATUS_SUCCESS) {
        k->blas = NULL;
        return mu_fail(MUSER_EBACKEND, "cannot initialize cuBLAS");
    }
    b->cublas->set_stream(k->blas, k->stream);
    return 0;
}

int cuda_work_alloc(cuda_backend *b, int64_t parts) {
    cu_work *k = b->wk;
    const uint64_t T = (uint64_t)b->T_max;
    const uint64_t T8 = T > 8 ? T : 8; /* decode: up to 8 partial sums of the split ffn down */
    const uint64_t Tp = T > MU_CU_BATCH_PARTS_MAX ? T : MU_CU_BATCH_PARTS_MAX; /* decode: q, k, v, gate in parts */
    const uint64_t QF = (uint64_t)(b->Q > b->F ? b->Q : b->F);
    k->parts = parts;
    int rc = 0;
#define DA(ptr, n, sz) \
    if (!rc) rc = cuda_dalloc((void **)&k->ptr, (size_t)(n) * (sz), "work buffers")
    DA(h, T * b->E, 4);
    DA(ax, T * b->E, 4);
    DA(aq, T * b->E, 1);
    DA(ads, T * b->E / 8, 4);
    DA(q, Tp * b->Q, 4);
    DA(g, Tp * b->Q, 4);
    DA(k, Tp * b->KVD, 4);
    DA(v, Tp * b->KVD, 4);
    DA(qn, T * b->Q, 4);
    DA(o, T * b->Q, 4);
    DA(bq, T * QF, 1);
    DA(bds, T * QF / 8, 4);
    DA(tc_part, CUDA_TC_PART, 4);
    DA(tc_count, CUDA_TC_COUNT, 4);
    if (!rc && cudaMemsetAsync(k->tc_count, 0, sizeof(unsigned int) * CUDA_TC_COUNT, k->stream) != cudaSuccess)
        rc = mu_fail(MUSER_EBACKEND, "cuda: cannot clear the tensor-core batch's counters");
    k->mmf_x_halves = mu_gpu_mmf_halves((uint64_t)b->E > QF ? (uint64_t)b->E : QF, T);
    DA(mmf_x, k->mmf_x_halves, 2);
    DA(t, T8 * b->E, 4);
    DA(ff, T * b->F, 4);
    DA(fu, T * b->F, 4);
    DA(a16, T * b->E, 2);
    DA(o16, T * b->Q, 2);
    DA(f16b, T * b->F, 2);
    DA(part_m, parts, 4);
    DA(part_l, parts, 4);
    DA(part_o, parts * 128, 4);
#undef DA
    return rc;
}

size_t cuda_work_tiles(const cuda_backend *b, const mu_gpu_plan *plan) {
    /* none where every matrix has its f16 copy; else the plan's tiles (also
     * where a planned cache could not be allocated: its room) */
    return b->fast && b->w && b->w->f16bytes && !b->draft ? 0 : (size_t)plan->tiles;
}

int cuda_work_alloc_tiles(cuda_backend *b, size_t wtmp_bytes) {
    b->wk->wtmp_bytes = wtmp_bytes;
    return wtmp_bytes ? cuda_dalloc(&b->wk->wtmp, wtmp_bytes, "dequantization buffer") : 0;
}

void cuda_work_offer(cuda_backend *b) {
    if (!b->w || !b->w->shared || b->tp) return;
    pthread_mutex_lock(&g_work_lock);
    if (!b->w->work && !b->wk->w) {
        b->w->work = b->wk;
        b->wk->w = b->w;
    }
    pthread_mutex_unlock(&g_work_lock);
}

void cuda_work_release(cuda_backend *b) {
    cu_work *k = b->wk;
    b->wk = NULL;
    if (!k) return;
    pthread_mutex_lock(&g_work_lock);
    const bool last = --k->refs == 0;
    if (last && k->w) k->w->work = NULL;
    pthread_mutex_unlock(&g_work_lock);
    if (!last) return;
    cudaSetDevice(k->device);
    if (k->stream) cudaStreamSynchronize(k->stream);
    void *dev[] = {k->h,  k->ax,  k->aq,  k->ads, k->q,      k->g,      k->k,      k->v,      k->qn,         k->o,
                   k->bq, k->bds, k->tc_part, k->tc_count, k->mmf_x, k->t, k->ff, k->fu, k->a16, k->o16, k->f16b,
                   k->part_m, k->part_l, k->part_o, k->logits_all, k->wtmp};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) cudaFree(dev[i]);
    if (k->blas) k->cublas->destroy(k->blas);
    if (k->stream) cudaStreamDestroy(k->stream);
    cuda_ledger_release(k->device, k->held_bytes);
    free(k);
}
