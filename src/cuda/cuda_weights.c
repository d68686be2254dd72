/* cuda_weights.c — the weights on the GPU: each matrix's repacked streams
 * (cu_shared.h) in one allocation, uploaded from the file through pinned
 * double buffers and repacked on the device; the norms as f32; the fast
 * lane's optional f16 copies for prefill; and the registry that lets a
 * model's sessions on one GPU share one upload.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda_internal.h"
#include "model/dflash.h"
#include "quant/quant.h"
#include "util/clock.h"
#include "util/progress.h"

#define STAGE_BYTES (64u << 20) /* each of the upload's two pinned stages */

/* ---- the registry: weights shared by the sessions of one model on one GPU ----
 * The first single-GPU session of a model uploads the weights (and the
 * fast lane's f16 prefill cache when it fits) and publishes them here;
 * later sessions of the same model on the same GPU take a reference and
 * upload nothing; the last one to go frees them. Each session keeps its
 * own KV cache, activations, step records and graphs. Tensor-parallel
 * ranks (model views of their own) do not share. */
static pthread_mutex_t g_wlock = PTHREAD_MUTEX_INITIALIZER;
static cu_weights *g_weights;

cu_weights *cuda_weights_acquire(const mu_model *m, int device) {
    pthread_mutex_lock(&g_wlock);
    cu_weights *e = g_weights;
    while (e && !(e->m == m && e->device == device)) e = e->next;
    if (e) e->refs++;
    pthread_mutex_unlock(&g_wlock);
    return e;
}

int mu_cuda_weight_refs(const mu_model *m, int device) {
    pthread_mutex_lock(&g_wlock);
    const cu_weights *e = g_weights;
    while (e && !(e->m == m && e->device == device)) e = e->next;
    int n = e ? e->refs : 0;
    pthread_mutex_unlock(&g_wlock);
    return n;
}

bool cuda_weights_resident(const mu_model *m, int device, bool *f16_cache) {
    pthread_mutex_lock(&g_wlock);
    const cu_weights *e = g_weights;
    while (e && !(e->m == m && e->device == device)) e = e->next;
    *f16_cache = e && e->f16bytes > 0;
    pthread_mutex_unlock(&g_wlock);
    return e != NULL;
}

void cuda_weights_ref(cu_weights *w) {
    pthread_mutex_lock(&g_wlock);
    w->refs++;
    pthread_mutex_unlock(&g_wlock);
}

void cuda_weights_publish(cu_weights *w) {
    pthread_mutex_lock(&g_wlock);
    w->shared = true;
    w->next = g_weights;
    g_weights = w;
    pthread_mutex_unlock(&g_wlock);
}

/* Drops a reference; the last one frees the device memory. */
void cuda_weights_close(cu_weights *e) {
    if (!e) return;
    pthread_mutex_lock(&g_wlock);
    bool last = --e->refs == 0;
    if (last && e->shared) {
        cu_weights **pp = &g_weights;
        while (*pp && *pp != e) pp = &(*pp)->next;
        if (*pp) *pp = e->next;
    }
    pthread_mutex_unlock(&g_wlock);
    if (!last) return;
    cudaSetDevice(e->device);
    for (int l = 0; e->layers && l < e->m->hp.n_layer; l++) {
        cu_layer *D = &e->layers[l];
        float *norms[] = {D->attn_norm, D->q_norm, D->k_norm, D->post_attn_norm, D->ffn_norm, D->post_ffn_norm};
        for (size_t i = 0; i < sizeof norms / sizeof norms[0]; i++)
            if (norms[i]) cudaFree(norms[i]);
    }
    if (e->wmem) cudaFree(e->wmem);
    if (e->f16mem) cudaFree(e->f16mem);
    cuda_ledger_release(e->device, e->held_bytes);
    if (e->output_norm) cudaFree(e->output_norm);
    if (e->enc_norm) cudaFree(e->enc_norm);
    cu_weights *borrowed = e->borrowed;
    free(e->layers);
    free(e);
    cuda_weights_close(borrowed); /* a drafter's reference on its target's weights */
}

/* ---- upload ---------------------------------------------------------------------------- */

static uint64_t align256(uint64_t x) { return (x + 255) & ~(uint64_t)255; }

uint64_t cuda_weight_dev_bytes(const mu_weight *w) {
    mu_cu_layout l;
    if (!w->data || !mu_cu_weight_layout(w->type, w->rows, w->cols, &l)) return 0;
    return align256(l.qs) + align256(l.qh) + align256(l.meta) + align256(l.d);
}

/* The target's device copy of w when w is the target's embedding or LM
 * head and b a drafter borrowing them (the same file bytes: the drafter's
 * model holds the target's views), else NULL. */
static const mu_cu_weight *borrowed_view(const cuda_backend *b, const mu_weight *w) {
    const cu_weights *t = b->share;
    if (!t || !w->data) return NULL;
    if (w->data == t->m->tok_embd.data && w->type == t->m->tok_embd.type) return &t->tok_embd;
    if (w->data == t->m->output.data && w->type == t->m->output.type) return &t->output;
    return NULL;
}

bool cuda_weight_borrowed(const cuda_backend *b, const mu_weight *w) { return borrowed_view(b, w) != NULL; }

/* Places a weight's streams at *cursor and advances it. */
static void weight_place(const mu_weight *w, uint8_t **cursor, mu_cu_weight *out) {
    memset(out, 0, sizeof *out);
    if (!w->data) return;
    mu_cu_layout l;
    mu_cu_weight_layout(w->type, w->rows, w->cols, &l);
    out->type = w->type;
    out->rows = w->rows;
    out->cols = w->cols;
    uint8_t *c = *cursor;
    out->qs = c, c += align256(l.qs);
    out->qh = l.qh ? c : NULL, c += align256(l.qh);
    out->meta = l.meta ? c : NULL, c += align256(l.meta);
    out->d = l.d ? (const uint16_t *)c : NULL, c += align256(l.d);
    out->bytes = l.qs + l.qh + l.meta + l.d;
    out->units = mu_cu_units(w->type, w->cols);
    *cursor = c;
}

typedef struct uploader {
    cudaStream_t stream;
    int fd;
    const uint8_t *file_base;
    uint8_t *pin[2];
    void *dstage[2];
    cudaEvent_t ev[2];
    int turn;
    uint64_t done, total;
    mu_progress bar;
} uploader;

/* Reads bytes of the mapped file into a pinned buffer: pread when the file
 * can be opened (no page faults on the mapping), else a memcpy. */
static int read_host(uploader *u, const void *src, uint8_t *dst, size_t n) {
    if (u->fd >= 0) {
        off_t off = (off_t)((const uint8_t *)src - u->file_base);
        size_t got = 0;
        while (got < n) {
            ssize_t r = pread(u->fd, dst + got, n - got, off + (off_t)got);
            if (r <= 0) {
                if (r < 0 && errno == EINTR) continue;
                break;
            }
            got += (size_t)r;
        }
        if (got == n) return 0;
    }
    memcpy(dst, src, n);
    return 0;
}

/* A weight's rows from the file to the device, repacked. A column slice
 * (tensor parallel) keeps its parent's row stride: its rows are read with
 * that stride and the repack (or a 2-D copy) gathers the slice. */
static int upload_one(uploader *u, const mu_weight *w, const mu_cu_weight *dw) {
    if (!w->data) return 0;
    const cudaStream_t s = u->stream;
    const bool is_float = w->type == MU_TYPE_F32 || w->type == MU_TYPE_F16 || w->type == MU_TYPE_BF16;
    const uint64_t slice = mu_row_bytes(w->type, w->cols); /* bytes of one row of this weight */
    int64_t rows_per = (int64_t)(STAGE_BYTES / w->row_bytes);
    if (rows_per < 1) return mu_fail(MUSER_EUNSUPPORTED, "%s: a row of %llu bytes exceeds the upload stage", w->name,
                                     (unsigned long long)w->row_bytes);
    for (int64_t r0 = 0; r0 < w->rows; r0 += rows_per) {
        const int64_t nr = w->rows - r0 < rows_per ? w->rows - r0 : rows_per;
        const size_t bytes = (size_t)(nr - 1) * w->row_bytes + slice;
        const int k = u->turn;
        u->turn ^= 1;
        CU_CHECK(cudaEventSynchronize(u->ev[k]));
        RC(read_host(u, (const uint8_t *)w->data + (uint64_t)r0 * w->row_bytes, u->pin[k], bytes));
        if (is_float) {
            CU_CHECK(cudaMemcpy2DAsync((uint8_t *)dw->qs + (uint64_t)r0 * slice, slice, u->pin[k], w->row_bytes, slice,
                                       (size_t)nr, cudaMemcpyHostToDevice, s));
        } else {
            CU_CHECK(cudaMemcpyAsync(u->dstage[k], u->pin[k], bytes, cudaMemcpyHostToDevice, s));
            CU_CHECK(mu_cu_repack(dw, u->dstage[k], r0, nr, (int64_t)w->row_bytes, s));
        }
        CU_CHECK(cudaEventRecord(u->ev[k], s));
        u->done += (uint64_t)nr * slice;
        mu_progress_update(&u->bar, u->done);
    }
    return 0;
}

static int upload_norm(const float *src, int64_t n, float **dst) {
    *dst = NULL;
    if (!src) return 0;
    RC(cuda_dalloc((void **)dst, (size_t)n * sizeof(float), "norm weights"));
    CU_CHECK(cudaMemcpy(*dst, src, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    return 0;
}

static int upload_weights(cuda_backend *b, cu_weights *w) {
    const mu_model *m = b->m;
    const mu_hparams *hp = &m->hp;
    /* the whole matrices outside the layers: the embedding and the head
     * (not when borrowed from the target), a drafter's fc */
    const mu_weight *outer[3] = {borrowed_view(b, &m->tok_embd) ? NULL : &m->tok_embd,
                                 borrowed_view(b, &m->output) ? NULL : &m->output, b->draft ? &b->draft->fc : NULL};
    mu_cu_weight *outer_dev[3] = {&w->tok_embd, &w->output, &w->fc};
    uint64_t total = 0, file_bytes = 0;
    for (int i = 0; i < 3; i++)
        if (outer[i]) total += cuda_weight_dev_bytes(outer[i]), file_bytes += outer[i]->rows * outer[i]->row_bytes;
    /* (row_bytes is the file's stride; a column slice reads a part of each row) */
    for (int l = 0; l < hp->n_layer; l++) {
        const mu_layer *L = &m->layers[l];
#define ADD(x) total += cuda_weight_dev_bytes(&L->x), file_bytes += L->x.data ? (uint64_t)L->x.rows * mu_row_bytes(L->x.type, L->x.cols) : 0;
        LAYER_MATS(ADD)
#undef ADD
    }
    RC(cuda_dalloc(&w->wmem, total, "weights"));
    w->wbytes = total;
    uint8_t *cur = w->wmem;
    for (int i = 0; i < 3; i++)
        if (outer[i]) weight_place(outer[i], &cur, outer_dev[i]);
    if (!outer[0]) w->tok_embd = *borrowed_view(b, &m->tok_embd);
    if (!outer[1]) w->output = *borrowed_view(b, &m->output);
    for (int l = 0; l < hp->n_layer; l++) {
        const mu_layer *L = &m->layers[l];
        cu_layer *D = &w->layers[l];
#define PLACE(x) weight_place(&L->x, &cur, &D->x);
        LAYER_MATS(PLACE)
#undef PLACE
    }

    uploader u;
    memset(&u, 0, sizeof u);
    u.stream = b->exec.stream;
    u.fd = open(m->file->path, O_RDONLY);
    u.file_base = m->file->base;
    u.total = file_bytes;
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        if (cudaHostAlloc((void **)&u.pin[k], STAGE_BYTES, cudaHostAllocDefault) != cudaSuccess ||
            cudaMalloc(&u.dstage[k], STAGE_BYTES) != cudaSuccess || cudaEventCreate(&u.ev[k]) != cudaSuccess)
            rc = mu_fail(MUSER_EBACKEND, "cannot allocate the upload staging buffers");
    }
    mu_progress_begin(&u.bar, stderr, "cuda: uploading weights", file_bytes);
    const double t0 = mu_now_seconds();
    for (int i = 0; i < 3 && !rc; i++)
        if (outer[i]) rc = upload_one(&u, outer[i], outer_dev[i]);
    for (int l = 0; l < hp->n_layer && !rc; l++) {
        const mu_layer *L = &m->layers[l];
        cu_layer *D = &w->layers[l];
#define UP(x) if (!rc) rc = upload_one(&u, &L->x, &D->x);
        LAYER_MATS(UP)
#undef UP
    }
    if (!rc && cudaStreamSynchronize(b->exec.stream) != cudaSuccess)
        rc = mu_fail(MUSER_EBACKEND, "weight upload failed: %s", cudaGetErrorString(cudaGetLastError()));
    const double secs = mu_now_seconds() - t0;
    mu_progress_end(&u.bar);
    for (int k = 0; k < 2; k++) {
        if (u.pin[k]) cudaFreeHost(u.pin[k]);
        if (u.dstage[k]) cudaFree(u.dstage[k]);
        if (u.ev[k]) cudaEventDestroy(u.ev[k]);
    }
    if (u.fd >= 0) close(u.fd);
    if (rc) return rc;
    mu_info("cuda: uploaded %.2f GB of weights in %.2f s (%.2f GB/s)", file_bytes / 1e9, secs,
            file_bytes / 1e9 / (secs + 1e-9));

    /* norms (f32, dequantized at load) */
    for (int l = 0; l < hp->n_layer; l++) {
        const mu_layer *L = &m->layers[l];
        cu_layer *D = &w->layers[l];
        RC(upload_norm(L->attn_norm, hp->n_embd, &D->attn_norm));
        RC(upload_norm(L->q_norm, hp->head_dim, &D->q_norm));
        RC(upload_norm(L->k_norm, hp->head_dim, &D->k_norm));
        RC(upload_norm(L->post_attn_norm, hp->n_embd, &D->post_attn_norm));
        RC(upload_norm(L->ffn_norm, hp->n_embd, &D->ffn_norm));
        RC(upload_norm(L->post_ffn_norm, hp->n_embd, &D->post_ffn_norm));
    }
    RC(upload_norm(m->output_norm, hp->n_embd, &w->output_norm));
    if (b->draft) RC(upload_norm(b->draft->enc_norm, hp->n_embd, &w->enc_norm));
    return 0;
}


int cuda_weights_upload(cuda_backend *b) {
    cu_weights *w = calloc(1, sizeof *w);
    if (!w) return mu_fail(MUSER_ENOMEM, "out of memory");
    w->m = b->m;
    w->device = b->device;
    w->refs = 1;
    w->held_bytes = b->weights_held; /* (the ledger's count goes with the weights from here) */
    b->weights_held = 0;
    w->layers = calloc((size_t)b->m->hp.n_layer, sizeof(cu_layer));
    b->w = w; /* (freed with the session on failure) */
    if (!w->layers) return mu_fail(MUSER_ENOMEM, "out of memory");
    if (b->share && (borrowed_view(b, &b->m->tok_embd) || borrowed_view(b, &b->m->output))) {
        cuda_weights_ref(b->share); /* the target's weights live as long as the drafter's */
        w->borrowed = b->share;
    }
    return upload_weights(b, w);
}

/* Dequantized f16 copies of every matrix for the fast lane's prefill GEMMs
 * (when the plan has room): a chunk then pays for GEMMs only. */
static uint64_t f16_bytes(const mu_cu_weight *w) { return w->qs ? align256((uint64_t)w->rows * w->cols * 2) : 0; }

int cuda_prefill_cache(cuda_backend *b) {
    cu_weights *w = b->w;
    const mu_hparams *hp = &b->m->hp;
    /* a borrowed head is the target's (with the target's copy, if any) */
    const bool own_head = !(w->borrowed && w->output.qs == w->borrowed->output.qs);
    uint64_t total = (own_head ? f16_bytes(&w->output) : 0) + f16_bytes(&w->fc);
    for (int l = 0; l < hp->n_layer; l++) {
        cu_layer *D = &w->layers[l];
#define ADD(x) total += f16_bytes(&D->x);
        LAYER_MATS(ADD)
#undef ADD
    }
    /* built where the session's memory plan has room for it (cuda_plan.c:
     * asked for, or fitting with 3 GB to spare under --gpu-mem) */
    if (!b->plan.f16_cache) return 0;
    if (total != b->plan.f16_cache || cuda_dalloc(&w->f16mem, total, "the prefill weight cache")) {
        mu_clear_error(); /* (the GEMMs dequantize tiles instead, in the cache's room) */
        return 0;
    }
    w->f16bytes = total;
    uint8_t *cur = w->f16mem;
    mu_cu_weight **all = malloc(sizeof(mu_cu_weight *) * (size_t)(2 + 8 * hp->n_layer));
    if (!all) return mu_fail(MUSER_ENOMEM, "out of memory");
    int n = 0;
    if (own_head) all[n++] = &w->output;
    all[n++] = &w->fc; /* (a drafter's; absent elsewhere: skipped below) */
    for (int l = 0; l < hp->n_layer; l++) {
        cu_layer *D = &w->layers[l];
#define COLLECT(x) all[n++] = &D->x;
        LAYER_MATS(COLLECT)
#undef COLLECT
    }
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < n && e == cudaSuccess; i++) {
        mu_cu_weight *x = all[i];
        if (!x->qs) continue;
        x->f16 = (const uint16_t *)cur;
        e = mu_cu_dequant(x, 0, x->rows, cur, true, b->exec.stream);
        cur += f16_bytes(x);
    }
    free(all);
    CU_CHECK(e);
    CU_CHECK(cudaStreamSynchronize(b->exec.stream));
    mu_info("cuda: prefill weight cache: %.2f GB of f16 weights", total / 1e9);
    return 0;
}

