/* cuda_backend.c — the CUDA backend of one GPU: a session's creation (what
 * it can run, its memory plan, its buffers), the backend interface the
 * engine calls, and the benchmark's hooks.
 *
 * The weights are resident (cuda_weights.c), shared by the model's
 * sessions on the GPU; each session keeps its KV cache, activations, step
 * records and graphs. The host keeps the KV ring bookkeeping (kv/) and the
 * route decisions (engine/route.c); per token it uploads one record
 * (cuda_step.c). Decode runs as a CUDA graph (cuda_decode.c), prefill
 * through GEMMs (cuda_prefill.c), several sessions' tokens as one batch
 * (cuda_batch.c); several GPUs are a backend of their own (cuda_tp.c).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends.h"
#include "cuda/cuda_api.h"
#include "cuda/cuda_internal.h"
#include "model/dflash.h"
#include "quant/quant.h"

int mu_cuda_probe(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver)
        return mu_fail(MUSER_EBACKEND,
                       "no NVIDIA driver found, or it is older than this build's CUDA runtime %d.%d (update the driver)",
                       CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) return mu_fail(MUSER_EBACKEND, "no CUDA GPU found");
    if (e != cudaSuccess) return mu_fail(MUSER_EBACKEND, "CUDA is not usable: %s", cudaGetErrorString(e));
    struct cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, 0);
    if (e != cudaSuccess) return mu_fail(MUSER_EBACKEND, "cannot query GPU 0: %s", cudaGetErrorString(e));
    if (prop.major < 8)
        return mu_fail(MUSER_EBACKEND, "GPU 0 (%s) has compute capability %d.%d; the CUDA backend needs 8.0 (Ampere) "
                       "or newer", prop.name, prop.major, prop.minor);
    return 0;
}

int cuda_dalloc(void **p, size_t bytes, const char *what) {
    *p = NULL;
    if (bytes == 0) return 0;
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        *p = NULL;
        return mu_fail(MUSER_EBACKEND, "cannot allocate %.2f GB of GPU memory for %s: %s", bytes / 1e9, what,
                       cudaGetErrorString(e));
    }
    return 0;
}

/* Makes the backend's GPU current: every entry point that touches the
 * device starts here (one process can drive sessions on several GPUs:
 * tensor-parallel ranks leave another one current). */
int cuda_use_device(const cuda_backend *b) {
    CU_CHECK(cudaSetDevice(b->device));
    return 0;
}

int cuda_sync_checked(cuda_backend *b) {
    cudaError_t e = cudaStreamSynchronize(b->exec.stream);
    if (e != cudaSuccess)
        return mu_fail(MUSER_EBACKEND, "CUDA step failed%s: %s",
                       b->xr.n > 1 ? " (tensor parallel: a rank also stops when the other ranks do not reach "
                                     "the fused all-reduce within 20 s, so the first error may be another GPU's)"
                                   : "",
                       cudaGetErrorString(e));
    return 0;
}

/* rows of b->V logits into dst, dst_stride apart (a rank's slice of the vocabulary) */
/* Row r crosses into pinned half r % 2 while the host copies row r - 1 out
 * of the other half: the bus and the host's copy overlap. */
int cuda_copy_logits(cuda_backend *b, const float *src, int rows, float *dst, size_t dst_stride) {
    const size_t V = (size_t)b->V, bytes = V * sizeof(float);
    const cudaStream_t st = b->exec.stream;
    for (int r = 0; r <= rows; r++) {
        if (r < rows) { /* (half r % 2 was last read by the host's copy of row r - 2, done) */
            CU_CHECK(cudaMemcpyAsync(b->h_logits + (size_t)(r & 1) * V, src + (size_t)r * V, bytes,
                                     cudaMemcpyDeviceToHost, st));
            CU_CHECK(cudaEventRecord(b->logits_ready[r & 1], st));
        }
        if (r > 0) {
            const int h = (r - 1) & 1;
            CU_CHECK(cudaEventSynchronize(b->logits_ready[h]));
            memcpy(dst + (size_t)(r - 1) * dst_stride, b->h_logits + (size_t)h * V, bytes);
        }
    }
    return 0;
}

int cuda_rows_argmax(cuda_backend *b, const float *rows, int T, muser_token *ids) {
    const size_t keys = sizeof(unsigned long long) * MU_CU_ARGMAX_SPLITS * (size_t)b->T_max;
    if (T < 1 || T > b->T_max) return mu_fail(MUSER_EINVAL, "greedy choices of %d rows (batch %d)", T, b->T_max);
    if (!b->d_argmax) RC(cuda_dalloc(&b->d_argmax, keys + sizeof(int32_t) * (size_t)b->T_max, "the rows' choices"));
    int32_t *d_ids = (int32_t *)((uint8_t *)b->d_argmax + keys);
    CU_CHECK(mu_cu_rows_argmax(rows, b->V, T, (unsigned long long *)b->d_argmax, d_ids, b->exec.stream));
    CU_CHECK(cudaMemcpyAsync(ids, d_ids, sizeof(int32_t) * (size_t)T, cudaMemcpyDeviceToHost, b->exec.stream));
    return cuda_sync_checked(b);
}

int cuda_copy_hidden(cuda_backend *b, int T) {
    if (!b->hidden) return mu_fail(MUSER_EINVAL, "cuda: a split's side without its crossing rows (set_hidden)");
    CU_CHECK(cudaMemcpyAsync(b->hidden, b->wk->h, (size_t)T * (size_t)b->E * sizeof(float), cudaMemcpyDeviceToHost,
                             b->exec.stream));
    CU_CHECK(cudaStreamSynchronize(b->exec.stream));
    return 0;
}

/* ---- the backend interface -------------------------------------------------------------- */

static int cuda_forward(mu_backend *base, const muser_token *tokens, int T, int pos0, bool all_logits, float *logits) {
    cuda_backend *b = (cuda_backend *)base;
    const size_t V = (size_t)b->V;
    const bool head = mu_model_heads(b->m);
    RC(cuda_use_device(b));
    if (T < 1 || T > b->T_max) return mu_fail(MUSER_EINVAL, "chunk of %d tokens (batch %d)", T, b->T_max);
    RC(cuda_fill_records(b, tokens, T, pos0, 0.0f, 0));
    if (T == 1 && !b->n_cap) { /* (a captured row takes the chunk path: cuda_spec.c) */
        RC(cuda_decode_run(b));
        RC(cuda_sync_checked(b));
        if (b->prof && b->prof->on) RC(cuda_prof_collect(b, pos0));
        return head ? cuda_copy_logits(b, b->logits, 1, logits, V) : cuda_copy_hidden(b, 1);
    }
    RC(cuda_prefill_run(b, T, all_logits));
    RC(cuda_sync_checked(b));
    if (!head) return cuda_copy_hidden(b, T);
    return all_logits ? cuda_copy_logits(b, b->wk->logits_all, T, logits, V)
                      : cuda_copy_logits(b, b->logits, 1, logits, V);
}

/* A chunk whose rows' greedy choices are made where the logits are (a
 * greedy verify step): T ids cross to the host instead of T x V logits. */
static int cuda_forward_argmax(mu_backend *base, const muser_token *tokens, int T, int pos0, muser_token *ids) {
    cuda_backend *b = (cuda_backend *)base;
    RC(cuda_use_device(b));
    if (!mu_model_heads(b->m)) return mu_fail(MUSER_EUNSUPPORTED, "cuda: a split's first side has no logits");
    if (T < 1 || T > b->T_max) return mu_fail(MUSER_EINVAL, "chunk of %d tokens (batch %d)", T, b->T_max);
    RC(cuda_fill_records(b, tokens, T, pos0, 0.0f, 0));
    RC(cuda_prefill_run(b, T, true)); /* (one row too: the chunk path, which keeps every row's logits) */
    return cuda_rows_argmax(b, b->wk->logits_all, T, ids);
}

_Static_assert(MU_CU_TOP_MAX == MUSER_TOP_MAX, "the device's top and the API's agree");

int cuda_rows_top(cuda_backend *b, float *rows, int T, const muser_logit_bias *bias, int k, float *vals,
                  muser_token *ids) {
    if (T < 1 || T > b->T_max || k < 1 || k > MU_CU_TOP_MAX || k > b->V)
        return mu_fail(MUSER_EINVAL, "top %d logits of %d rows (batch %d, vocabulary %lld)", k, T, b->T_max,
                       (long long)b->V);
    const size_t pairs = (size_t)b->T_max * MU_CU_TOP_MAX;
    if (!b->d_top) RC(cuda_dalloc(&b->d_top, pairs * (sizeof(float) + sizeof(int32_t)), "the rows' top logits"));
    float *d_vals = (float *)b->d_top;
    int32_t *d_ids = (int32_t *)(d_vals + pairs);
    /* the rows' bias: offsets [T + 1], then ids, then values */
    int n_bias = 0;
    for (int t = 0; bias && t < T; t++) n_bias += bias[t].n > 0 ? bias[t].n : 0;
    const int *d_off = NULL;
    if (n_bias > 0) {
        const size_t bytes = sizeof(int) * (size_t)(T + 1) + (sizeof(int32_t) + sizeof(float)) * (size_t)n_bias;
        if (bytes > b->d_bias_bytes) {
            if (b->d_bias) cudaFree(b->d_bias);
            b->d_bias = NULL;
            b->d_bias_bytes = 0;
            RC(cuda_dalloc(&b->d_bias, bytes, "the rows' logit bias"));
            b->d_bias_bytes = bytes;
        }
        int *h = malloc(bytes);
        if (!h) return mu_fail(MUSER_ENOMEM, "out of memory for the rows' logit bias");
        int32_t *h_ids = (int32_t *)(h + T + 1);
        float *h_vals = (float *)(h_ids + n_bias);
        int at = 0;
        for (int t = 0; t < T; t++) {
            h[t] = at;
            for (int j = 0; j < bias[t].n; j++, at++) h_ids[at] = bias[t].ids[j], h_vals[at] = bias[t].values[j];
        }
        h[T] = at;
        const cudaError_t e = cudaMemcpyAsync(b->d_bias, h, bytes, cudaMemcpyHostToDevice, b->exec.stream);
        free(h); /* (a copy from pageable memory has staged it on return) */
        CU_CHECK(e);
        d_off = (const int *)b->d_bias;
    }
    const int32_t *d_bias_ids = d_off ? (const int32_t *)(d_off + T + 1) : NULL;
    const float *d_bias_vals = d_off ? (const float *)(d_bias_ids + n_bias) : NULL;
    CU_CHECK(mu_cu_rows_top(rows, b->V, T, d_off, d_bias_ids, d_bias_vals, k, d_vals, d_ids, b->exec.stream));
    CU_CHECK(cudaMemcpyAsync(vals, d_vals, sizeof(float) * (size_t)T * k, cudaMemcpyDeviceToHost, b->exec.stream));
    CU_CHECK(cudaMemcpyAsync(ids, d_ids, sizeof(int32_t) * (size_t)T * k, cudaMemcpyDeviceToHost, b->exec.stream));
    return cuda_sync_checked(b);
}

/* Row t of the last forward_argmax's logits. */
static int cuda_logits_row(mu_backend *base, int t, float *logits) {
    cuda_backend *b = (cuda_backend *)base;
    RC(cuda_use_device(b));
    if (t < 0 || t >= b->wk->logit_rows)
        return mu_fail(MUSER_ERANGE, "logit row %d of %lld", t, (long long)b->wk->logit_rows);
    return cuda_copy_logits(b, b->wk->logits_all + (size_t)t * (size_t)b->V, 1, logits, (size_t)b->V);
}

static int cuda_set_hidden(mu_backend *base, float *rows) {
    cuda_backend *b = (cuda_backend *)base;
    if (!mu_model_embeds(b->m))
        return mu_fail(MUSER_EUNSUPPORTED, "cuda: a split's later side (layers from %d on) runs on the CPU",
                       b->m->layer0);
    b->hidden = rows;
    return 0;
}

int mu_cuda_decode_select(mu_backend *base, muser_token token, int pos, float temperature, uint64_t seed,
                          float *logits, muser_token *next) {
    cuda_backend *b = (cuda_backend *)base;
    RC(cuda_use_device(b));
    RC(cuda_fill_records(b, &token, 1, pos, temperature, seed));
    RC(cuda_decode_run(b));
    RC(cuda_sync_checked(b));
    if (b->prof && b->prof->on) RC(cuda_prof_collect(b, pos));
    const unsigned long long best = *b->h_best;
    *next = (muser_token)(0xFFFFFFFFu - (uint32_t)(best & 0xFFFFFFFFull));
    if (logits) RC(cuda_copy_logits(b, b->logits, 1, logits, (size_t)b->V));
    return 0;
}

int cuda_truncate(mu_backend *base, int pos) {
    cuda_backend *b = (cuda_backend *)base;
    return mu_planes_truncate(b->m, b->planes, pos);
}

void cuda_reset(mu_backend *base) {
    cuda_backend *b = (cuda_backend *)base;
    for (int l = 0; l < b->m->hp.n_layer; l++) mu_kv_plane_reset(&b->planes[l]);
}

void cuda_rank_free(cuda_backend *b) {
    if (!b) return;
    cudaSetDevice(b->device);
    if (b->exec.stream) cudaStreamSynchronize(b->exec.stream);
    for (int r = 0; r < N_ROUTES; r++)
        if (b->graph[r]) cudaGraphExecDestroy(b->graph[r]);
    cuda_batch_graphs_free(b);
    if (b->prof) {
        for (int i = 0; i < PROF_MAX_EV; i++)
            if (b->prof->ev[i]) cudaEventDestroy(b->prof->ev[i]);
        free(b->prof);
    }
    if (b->kc)
        for (int l = 0; l < b->m->hp.n_layer; l++) {
            cudaFree(b->kc[l]);
            cudaFree(b->vc[l]);
        }
    void *dev[] = {b->d_rec,  b->h2,      b->ax2,    b->aq2,     b->ads2,     b->oq,      b->ods,  b->logits,
                   b->d_best, b->counters, b->d_planes, b->d_feat, b->d_argmax, b->d_tent, b->d_top, b->d_bias};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) cudaFree(dev[i]);
    if (b->h_rec) cudaFreeHost(b->h_rec);
    if (b->h_planes) cudaFreeHost(b->h_planes);
    if (b->h_best) cudaFreeHost(b->h_best);
    if (b->h_logits) cudaFreeHost(b->h_logits);
    for (int i = 0; i < 2; i++)
        if (b->logits_ready[i]) cudaEventDestroy(b->logits_ready[i]);
    if (b->h_feat) cudaFreeHost(b->h_feat);
    mu_tentative_free(&b->tentative);
    cuda_work_release(b);     /* (with its stream and cuBLAS handle, by the last of its sessions) */
    cuda_weights_close(b->w); /* (shared weights go with their last session) */
    cuda_ledger_release(b->device, b->held_bytes + b->weights_held);
    free(b->planes);
    free(b->kc);
    free(b->vc);
    free(b);
}

static void cuda_free(mu_backend *base) { cuda_rank_free((cuda_backend *)base); }

static int cuda_select(mu_backend *base, muser_token token, int pos, float temperature, uint64_t seed, float *logits,
                       muser_token *next) {
    return mu_cuda_decode_select(base, token, pos, temperature, seed, logits, next);
}

/* ---- ring checkpoints (prompt caching, tentative positions) ---------------------------------
 * The engine's blob format (engine/checkpoint.c); the rings' rows are
 * copied between the device and the blob on the session's stream (a
 * non-blocking one, which the legacy stream's copies would not order
 * against), complete when this returns. */
int cuda_ckpt_copy_rows(void *ctx, int layer, bool to_blob, int64_t slot0, int64_t n, uint8_t *k_blob,
                        uint8_t *v_blob) {
    cuda_backend *b = ctx;
    const size_t row = (size_t)b->KVD * b->kv_elem, off = (size_t)slot0 * row, bytes = (size_t)n * row;
    uint8_t *k = (uint8_t *)b->kc[layer] + off, *v = (uint8_t *)b->vc[layer] + off;
    const cudaStream_t st = b->exec.stream;
    if (to_blob) {
        CU_CHECK(cudaMemcpyAsync(k_blob, k, bytes, cudaMemcpyDeviceToHost, st));
        CU_CHECK(cudaMemcpyAsync(v_blob, v, bytes, cudaMemcpyDeviceToHost, st));
    } else {
        CU_CHECK(cudaMemcpyAsync(k, k_blob, bytes, cudaMemcpyHostToDevice, st));
        CU_CHECK(cudaMemcpyAsync(v, v_blob, bytes, cudaMemcpyHostToDevice, st));
    }
    CU_CHECK(cudaStreamSynchronize(st));
    return 0;
}

static int cuda_checkpoint_save(mu_backend *base, void **out, size_t *size) {
    cuda_backend *b = (cuda_backend *)base;
    RC(cuda_use_device(b));
    return mu_ckpt_save(b->m, b->planes, (size_t)b->KVD * b->kv_elem, cuda_ckpt_copy_rows, b, out, size);
}

static int cuda_checkpoint_restore(mu_backend *base, const void *blob, size_t size, int pos) {
    cuda_backend *b = (cuda_backend *)base;
    RC(cuda_use_device(b));
    return mu_ckpt_restore(b->m, b->planes, (size_t)b->KVD * b->kv_elem, cuda_ckpt_copy_rows, b, blob, size, pos);
}

/* ---- muser bench hooks ------------------------------------------------------------------ */

int mu_cuda_set_synthetic_depth(mu_backend *base, int64_t depth, uint64_t seed) {
    cuda_backend *b = (cuda_backend *)base;
    RC(cuda_use_device(b));
    for (int l = 0; l < b->m->hp.n_layer; l++) {
        mu_kv_plane *p = &b->planes[l];
        mu_kv_plane_reset(p);
        if (!p->ring && depth > p->capacity)
            return mu_fail(MUSER_ECONTEXT, "depth %lld exceeds the context %lld", (long long)depth,
                           (long long)p->capacity);
        int64_t held = depth < p->capacity ? depth : p->capacity;
        /* as after `depth` appends: a full ring has wrapped depth % capacity times over */
        p->len = held;
        p->origin_logical = depth - held;
        p->origin_physical = p->ring ? (depth - held) % p->capacity : 0;
        const int64_t n = p->capacity * b->KVD;
        CU_CHECK(mu_cu_fill_random(b->kc[l], n, b->kv_f32, seed * 131 + (uint64_t)l * 2, 1.0f, b->exec.stream));
        CU_CHECK(mu_cu_fill_random(b->vc[l], n, b->kv_f32, seed * 131 + (uint64_t)l * 2 + 1, 1.0f, b->exec.stream));
    }
    return cuda_sync_checked(b);
}

static int cuda_fill_kv(mu_backend *base, int depth, uint64_t seed) {
    return mu_cuda_set_synthetic_depth(base, depth, seed);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int mu_cuda_copy_bandwidth(size_t bytes, int reps, double *gbps) {
    void *src = NULL, *dst = NULL;
    RC(cuda_dalloc(&src, bytes, "the copy benchmark"));
    if (cuda_dalloc(&dst, bytes, "the copy benchmark")) {
        cudaFree(src);
        return MUSER_EBACKEND;
    }
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    CU_CHECK(mu_cu_fill_random(src, (int64_t)(bytes / 4), true, 7, 1.0f, 0));
    double *t = calloc((size_t)reps + 2, sizeof(double));
    for (int i = 0; i < reps + 2; i++) {
        cudaEventRecord(e0, 0);
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        float ms = 0.f;
        cudaEventElapsedTime(&ms, e0, e1);
        t[i] = ms;
    }
    qsort(t + 2, (size_t)reps, sizeof(double), cmp_double); /* the first two are warm-up */
    *gbps = 2.0 * (double)bytes / (t[2 + reps / 2] * 1e-3) / 1e9;
    free(t);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(src);
    cudaFree(dst);
    CU_CHECK(cudaGetLastError());
    return 0;
}

/* Profiling runs the decode step op by op with an event between op
 * families (no graph: PDL overlap and launch gaps show up in the times). */
const mu_prof_entry *cuda_profile(mu_backend *base, bool on) {
    cuda_backend *b = (cuda_backend *)base;
    if (on) {
        if (!b->prof) {
            prof_state *ps = calloc(1, sizeof *ps);
            if (!ps) return NULL;
            const int n_ev = 12 * b->m->hp.n_layer + 8 < PROF_MAX_EV ? 12 * b->m->hp.n_layer + 8 : PROF_MAX_EV;
            for (int i = 0; i < n_ev; i++)
                if (cudaEventCreate(&ps->ev[i]) != cudaSuccess) {
                    for (int j = 0; j < i; j++) cudaEventDestroy(ps->ev[j]);
                    free(ps);
                    return NULL;
                }
            b->prof = ps;
        }
        memset(b->prof_acc, 0, sizeof b->prof_acc);
    }
    if (b->prof) b->prof->on = on;
    return b->prof_acc;
}

int cuda_membw(mu_backend *base, double *gbps, const char **what) {
    RC(cuda_use_device((const cuda_backend *)base));
    *what = "device-to-device copy, bytes read + written (2 GB per copy, median of 20)";
    return mu_cuda_copy_bandwidth((size_t)2 << 30, 20, gbps);
}

const char *mu_cuda_describe(const mu_backend *base) { return ((const cuda_backend *)base)->desc; }

static const char *cuda_describe_op(mu_backend *base) { return mu_cuda_describe(base); }

static const mu_backend_ops cuda_ops = {
    .name = "cuda",
    .forward = cuda_forward,
    .truncate = cuda_truncate,
    .reset = cuda_reset,
    .free = cuda_free,
    .checkpoint_save = cuda_checkpoint_save,
    .checkpoint_restore = cuda_checkpoint_restore,
    .fill_kv = cuda_fill_kv,
    .profile = cuda_profile,
    .profile_name = cuda_profile_name,
    .membw = cuda_membw,
    .describe = cuda_describe_op,
    .forward_batch = cuda_forward_batch,
    .forward_batch_greedy = cuda_forward_batch_greedy,
    .forward_batch_top = cuda_forward_batch_top,
    .set_capture = cuda_set_capture,
    .tentative_begin = cuda_tentative_begin,
    .tentative_keep = cuda_tentative_keep,
    .forward_argmax = cuda_forward_argmax,
    .logits_row = cuda_logits_row,
    .set_hidden = cuda_set_hidden,
};

cuda_backend *cuda_backend_of(mu_backend *base) { return base && base->ops == &cuda_ops ? (cuda_backend *)base : NULL; }

/* ---- a session's creation ------------------------------------------------------------------- */

/* What the backend cannot run, as a message; 0 when it can. */
static int check_model(const mu_model *m) {
    const mu_hparams *hp = &m->hp;
    if (hp->head_dim != 128)
        return mu_fail(MUSER_EUNSUPPORTED, "the CUDA backend supports head_dim 128 (this model: %d)", hp->head_dim);
    if (hp->n_head_kv < 1 || hp->n_head % hp->n_head_kv || hp->n_head / hp->n_head_kv > 16)
        return mu_fail(MUSER_EUNSUPPORTED, "the CUDA backend supports up to 16 query heads per KV head (%d / %d)",
                       hp->n_head, hp->n_head_kv);
    if (hp->n_embd % 32 || hp->n_ff % 32 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return mu_fail(MUSER_EUNSUPPORTED, "the CUDA backend needs n_embd and n_ff multiples of 32");
    if (!mu_model_embeds(m))
        return mu_fail(MUSER_EUNSUPPORTED, "the CUDA backend runs the first layers of a split (from the embedding), "
                                           "not layers %d-%d", m->layer0, m->layer0 + hp->n_layer - 1);
    const mu_weight *all[2] = {&m->tok_embd, &m->output};
    for (int i = 0; i < 2; i++) {
        mu_cu_layout lay;
        if (all[i]->data && !mu_cu_weight_layout(all[i]->type, all[i]->rows, all[i]->cols, &lay))
            return mu_fail(MUSER_EUNSUPPORTED, "%s: type %s is not supported by the CUDA backend", all[i]->name,
                           mu_type_name(all[i]->type));
    }
    for (int l = 0; l < hp->n_layer; l++) {
        const mu_layer *L = &m->layers[l];
        const mu_weight *ws[8] = {&L->wq, &L->wk, &L->wv, &L->wgate, &L->wo, &L->ffn_gate, &L->ffn_up, &L->ffn_down};
        for (int i = 0; i < 8; i++) {
            mu_cu_layout lay;
            if (ws[i]->data && !mu_cu_weight_layout(ws[i]->type, ws[i]->rows, ws[i]->cols, &lay))
                return mu_fail(MUSER_EUNSUPPORTED, "%s: type %s is not supported by the CUDA backend", ws[i]->name,
                               mu_type_name(ws[i]->type));
        }
    }
    return 0;
}

static bool is_kq(uint32_t t) { return t == MU_TYPE_Q4_K || t == MU_TYPE_Q5_K || t == MU_TYPE_Q6_K; }

/* Whether the decode step can form each boundary's input in its consumer
 * (mu_cu_norm_in): the fast lane on one GPU (a rank's boundaries are the
 * ranks' meetings, in the producer) with every consumer a K-quant launch:
 * q, k, v, gate, ffn gate/up and the LM head. */
static bool norm_in_fits(const mu_model *m, bool fast, bool tp) {
    if (!fast || tp || !is_kq(m->output.type)) return false;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const mu_layer *L = &m->layers[l];
        if (!is_kq(L->wq.type) || !is_kq(L->wk.type) || !is_kq(L->wv.type) || !is_kq(L->ffn_gate.type) ||
            !is_kq(L->ffn_up.type) || (L->wgate.data && !is_kq(L->wgate.type)))
            return false;
    }
    return true;
}

/* A layer's KV plane: a ring of window + chunk - 1 rows for sliding layers
 * (when shorter than the context), else the whole context (as the CPU). */
static int64_t kv_capacity(const mu_model *m, const mu_layer *L, const mu_session_config *cfg, bool *ring) {
    const mu_hparams *hp = &m->hp;
    *ring = L->is_swa && hp->n_swa > 0 && (int64_t)hp->n_swa + cfg->n_batch - 1 < cfg->n_ctx;
    return *ring ? (int64_t)hp->n_swa + cfg->n_batch - 1 : cfg->n_ctx;
}

/* The launches' settings, the decode attention's limits and the graphs'
 * reset, from t. A setting whose route needs a feature is taken only
 * where the device's route set has it (b->feat): the table keeps what was
 * asked, the launches get what runs (pdl, pair_staging and attn_cluster
 * are Hopper's). */
void cuda_apply_tuning(cuda_backend *b, const mu_cuda_tuning *t) {
    b->tune = *t;
    b->exec.pdl = t->pdl && b->feat.pdl;
    b->exec.clusters = b->feat.clusters;
    b->exec.mv_blocks_per_sm = t->mv_blocks_per_sm;
    b->exec.mmf_wide = t->batch_mmf_wide;
    b->exec.mv_flat = t->flat_gateup;
    b->exec.mv_cut = t->cut_rows;
    b->exec.mv_pair = t->pair_staging && b->feat.clusters;
    b->attn_short = t->attn_one_block < 0 ? 0 : t->attn_one_block > MU_CU_ATTN_SHORT_MAX ? MU_CU_ATTN_SHORT_MAX
                                                                                        : t->attn_one_block;
    const int most = MU_CU_ATTN_CLUSTER_MAX * 128;
    b->attn_cluster_rows = !b->feat.clusters || t->attn_cluster < 0 ? 0 : t->attn_cluster > most ? most : t->attn_cluster;
    b->attn_cluster = b->attn_cluster_rows <= 128 ? 2 : (b->attn_cluster_rows + 127) / 128;
    /* (a split's first side ends with the residual stream itself, which the
     * producers' tails leave in h) */
    b->norm_in = norm_in_fits(b->m, b->fast, b->tp) && t->norm_in && mu_model_heads(b->m);
    for (int r = 0; r < N_ROUTES; r++) { /* a new capture picks the settings up */
        if (b->graph[r]) cudaGraphExecDestroy(b->graph[r]);
        b->graph[r] = NULL;
        b->graph_ready[r] = false;
    }
    b->graph_broken = false;
    cuda_batch_graphs_free(b);
}

void mu_cuda_get_tuning(const mu_backend *base, mu_cuda_tuning *t) { *t = ((const cuda_backend *)base)->tune; }

void mu_cuda_get_features(const mu_backend *base, mu_cuda_features *f) { *f = ((const cuda_backend *)base)->feat; }

int mu_cuda_attn_cluster_rows(const mu_backend *base) { return ((const cuda_backend *)base)->attn_cluster_rows; }

void mu_cuda_set_tuning(mu_backend *base, const mu_cuda_tuning *t) { cuda_apply_tuning((cuda_backend *)base, t); }

void mu_cuda_pair_launches(const mu_backend *base, long long *eligible, long long *paired) {
    const cuda_backend *b = (const cuda_backend *)base;
    *eligible = b->pair_counts[0];
    *paired = b->pair_counts[1];
}

/* One line: the device, what the session holds on it, the settings in use. */
static void describe(cuda_backend *b, const struct cudaDeviceProp *prop) {
    char tune[512], feat[160], cap[48] = "", layers[64] = "";
    mu_cuda_tuning_format(&b->tune, tune, sizeof tune);
    mu_cuda_features_format(&b->feat, feat, sizeof feat);
    if (b->cfg.gpu_mem) snprintf(cap, sizeof cap, " (--gpu-mem %.2f GiB)", b->cfg.gpu_mem / 1073741824.0);
    if (!mu_model_heads(b->m))
        snprintf(layers, sizeof layers, "layers 0-%d of %d, no head; ", b->m->hp.n_layer - 1, b->m->whole->hp.n_layer);
    snprintf(b->desc, sizeof b->desc,
             "%.120s, %.1f GB, cc %d.%d, %d SMs; %s; %slane %s, KV %s, decode norms %s; GPU memory%s: weights %.2f GB "
             "(%s), f16 prefill cache %.2f GB, KV %.2f GB, buffers %.2f GB, logits %.2f GB; tuning: %.400s",
             prop->name, prop->totalGlobalMem / 1e9, prop->major, prop->minor, prop->multiProcessorCount, feat, layers,
             b->fast ? "fast" : "exact", b->kv_f32 ? "f32" : "f16",
             b->norm_in ? "formed by their consumers" : "in the producers' tails", cap, b->w->wbytes / 1e9,
             b->tp ? "this rank's" : "shared by the model's sessions", b->w->f16bytes / 1e9, b->plan.kv / 1e9,
             b->plan.buffers / 1e9, b->plan.logits / 1e9, tune);
}

/* The session's own buffers (the chunk-sized ones are its work's: cuda_work.c). */
static int alloc_activations(cuda_backend *b) {
    const uint64_t T = (uint64_t)b->T_max, L = (uint64_t)b->m->hp.n_layer;
    int rc = 0;
#define DA(ptr, n, sz) \
    if (!rc) rc = cuda_dalloc((void **)&b->ptr, (size_t)(n) * (sz), "activations")
    DA(h2, b->E, 4);
    DA(ax2, b->E, 4);
    DA(aq2, b->E, 1);
    DA(ads2, b->E / 8, 4);
    DA(oq, b->Q, 1);
    DA(ods, b->Q / 8, 4);
    DA(logits, b->V, 4);
    DA(d_best, 1, 8);
    DA(counters, 2 * L, 4);
    DA(d_rec, T * (uint64_t)b->rec_stride, 1);
    DA(d_planes, L * 2 * T, sizeof(void *));
#undef DA
    if (rc) return rc;
    CU_CHECK(cudaMemsetAsync(b->counters, 0, sizeof(unsigned) * 2 * L, b->exec.stream));
    if (cudaHostAlloc((void **)&b->h_rec, (size_t)b->rec_stride * T, cudaHostAllocDefault) != cudaSuccess ||
        cudaHostAlloc((void **)&b->h_best, 8, cudaHostAllocDefault) != cudaSuccess ||
        cudaHostAlloc((void **)&b->h_planes, sizeof(void *) * L * 2 * T, cudaHostAllocDefault) != cudaSuccess ||
        cudaHostAlloc((void **)&b->h_logits, (size_t)b->V * 4 * 2, cudaHostAllocDefault) != cudaSuccess)
        return mu_fail(MUSER_EBACKEND, "cannot allocate pinned host memory");
    memset(b->h_rec, 0, (size_t)b->rec_stride * T);
    for (int i = 0; i < 2; i++) CU_CHECK(cudaEventCreateWithFlags(&b->logits_ready[i], cudaEventDisableTiming));
    return 0;
}

/* The session's device state: stream, memory plan, weights (resident or
 * uploaded), KV planes, buffers. */
static int rank_init(cuda_backend *b, const mu_session_config *cfg, int device) {
    const mu_model *m = b->m;
    const mu_hparams *hp = &m->hp;
    CU_CHECK(cudaSetDevice(device));
    struct cudaDeviceProp prop;
    CU_CHECK(cudaGetDeviceProperties(&prop, device));
    b->smem_optin = (int)prop.sharedMemPerBlockOptin;
    { /* the route set, said once per GPU and process (serve opens a session per slot) */
        static atomic_ullong said;
        const unsigned long long bit = 1ull << (device & 63);
        if (!(atomic_fetch_or(&said, bit) & bit)) {
            char feat[160];
            mu_cuda_features_format(&b->feat, feat, sizeof feat);
            mu_info("cuda: GPU %d (%s, compute capability %d.%d): %s", device, prop.name, prop.major, prop.minor, feat);
        }
    }
    RC(mu_cublas_load(&b->cublas));

    /* RoPE bases: one cos/sin table per distinct base (the step record's size) */
    b->n_bases = cuda_rope_bases(m, b->bases);
    if (b->n_bases < 0) return mu_fail(MUSER_EUNSUPPORTED, "more than 8 distinct RoPE bases");
    /* the memory plan, before any allocation of size: every buffer below
     * is what it planned */
    b->kv_elem = b->kv_f32 ? 4 : 2;
    RC(cuda_plan_session(b, cfg, &prop, &b->plan)); /* (b->wk: a shared work where it found one) */
    if (!b->wk) RC(cuda_work_create(b, b->plan.work));
    b->exec.stream = b->wk->stream;
    b->blas = b->wk->blas;
    b->split_dec = b->plan.split_dec;
    b->split_pre = b->plan.split_pre;
    const int64_t parts = b->plan.parts;
    b->n_parts = parts;

    b->planes = calloc((size_t)hp->n_layer, sizeof(mu_kv_plane));
    b->kc = calloc((size_t)hp->n_layer, sizeof(void *));
    b->vc = calloc((size_t)hp->n_layer, sizeof(void *));
    if (!b->planes || !b->kc || !b->vc) return mu_fail(MUSER_ENOMEM, "out of memory");

    const bool uploaded = !b->w;
    if (uploaded) {
        RC(cuda_weights_upload(b));
        for (int l = 0; l < hp->n_layer; l++) { /* (shared weights: set alike by the first session) */
            int i = 0;
            while (m->layers[l].use_rope && i < b->n_bases && b->bases[i] != m->layers[l].rope_base) i++;
            b->w->layers[l].base_index = m->layers[l].use_rope ? i : 0;
        }
    }

    uint64_t kv_bytes = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        bool ring;
        const int64_t cap = kv_capacity(m, &m->layers[l], cfg, &ring);
        mu_kv_plane_init(&b->planes[l], ring, cap);
        const size_t bytes = (size_t)cap * (size_t)b->KVD * b->kv_elem;
        kv_bytes += 2 * (uint64_t)bytes;
        if (kv_bytes > b->plan.kv) /* (the plan and the planes disagree: take nothing it did not count) */
            return mu_fail(MUSER_EBACKEND, "layer %d's KV plane (%lld rows) is larger than the memory plan's", l,
                           (long long)cap);
        RC(cuda_dalloc(&b->kc[l], bytes, "the KV cache"));
        RC(cuda_dalloc(&b->vc[l], bytes, "the KV cache"));
        CU_CHECK(cudaMemsetAsync(b->kc[l], 0, bytes, b->exec.stream));
        CU_CHECK(cudaMemsetAsync(b->vc[l], 0, bytes, b->exec.stream));
    }

    b->rec_stride = mu_cu_rec_bytes(hp->n_layer, b->n_bases > 0 ? b->n_bases : 1, hp->n_rot);
    RC(alloc_activations(b));
    if (!b->plan.work_shared) RC(cuda_work_alloc(b, parts));
    if (b->fast && uploaded) RC(cuda_prefill_cache(b));
    if (!b->plan.work_shared) RC(cuda_work_alloc_tiles(b, cuda_work_tiles(b, &b->plan)));
    RC(cuda_sync_checked(b));
    if (uploaded && !b->tp) cuda_weights_publish(b->w);
    if (!b->plan.work_shared) cuda_work_offer(b);
    describe(b, &prop);
    if (!b->tp) {
        char held[256];
        mu_gpu_plan_format(&b->plan, held, sizeof held);
        mu_info("cuda: GPU %d memory of this session: %s", device, held);
    }
    return 0;
}

/* One GPU's backend. tp: a tensor-parallel rank (m is its shard: heads,
 * FFN slice and LM-head rows; vocab0 its first vocabulary row). d: a
 * DFlash drafter (m = its decoder) beside the one-GPU session target. */
static int rank_new(const mu_model *m, const mu_session_config *cfg, int device, bool tp, int64_t vocab0,
                    const struct muser_drafter *d, cuda_backend *target, cuda_backend **out) {
    *out = NULL;
    RC(check_model(m));
    mu_cuda_tuning tune;
    RC(mu_cuda_tuning_from_env(&tune));
    const mu_hparams *hp = &m->hp;
    cuda_backend *b = calloc(1, sizeof *b);
    if (!b) return mu_fail(MUSER_ENOMEM, "out of memory");
    b->base.ops = &cuda_ops;
    b->base.decode_select = cuda_select;
    b->m = m;
    b->cfg = *cfg;
    b->fast = cfg->lane == MUSER_LANE_FAST;
    b->kv_f32 = cfg->kv_type == MUSER_KV_F32;
    b->tp = tp;
    b->vocab0 = vocab0;
    b->device = device;
    b->T_max = cfg->n_batch;
    b->E = hp->n_embd;
    b->Q = (int64_t)hp->n_head * hp->head_dim;
    b->KVD = (int64_t)hp->n_head_kv * hp->head_dim;
    b->F = hp->n_ff;
    b->V = hp->n_vocab;
    b->token_bytes = m->weight_bytes_per_token;
    b->exec.pair_counts = b->pair_counts;
    b->draft = d;
    b->bidirectional = d != NULL;
    b->share = target ? target->w : NULL;
    int rc = mu_cuda_features_detect(device, &b->feat);
    if (rc) {
        free(b);
        return rc;
    }
    cuda_apply_tuning(b, &tune);
    /* one GPU: the model's weights may already be resident (shared) */
    if (!tp) b->w = cuda_weights_acquire(m, device);
    rc = rank_init(b, cfg, device);
    b->share = NULL; /* (the upload took its reference: cu_weights.borrowed) */
    if (rc) {
        cuda_rank_free(b);
        return rc;
    }
    *out = b;
    return 0;
}

int cuda_rank_new(const mu_model *m, const mu_session_config *cfg, int device, bool tp, int64_t vocab0,
                  cuda_backend **out) {
    return rank_new(m, cfg, device, tp, vocab0, NULL, NULL, out);
}

int cuda_drafter_rank_new(const struct muser_drafter *d, const mu_session_config *cfg, cuda_backend *target,
                          cuda_backend **out) {
    return rank_new(&d->m, cfg, target->device, false, 0, d, target, out);
}

int mu_cuda_backend_new(const mu_model *m, const mu_session_config *cfg, mu_backend **out) {
    *out = NULL;
    RC(mu_cuda_probe());
    if (cfg->gpus >= 1) return cuda_tp_new(m, cfg, out);
    cuda_backend *b = NULL;
    RC(cuda_rank_new(m, cfg, 0, false, 0, &b));
    *out = &b->base;
    return 0;
}
