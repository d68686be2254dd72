/* cuda_backend.c — the CUDA backend: weights resident on one GPU, the KV
 * cache resident, the decode token step captured as one CUDA graph.
 *
 * Decode (one token), per layer (spec §0):
 *   matvec {q,k,v,gate} over the normed input (one launch, one row space)
 *   -> QK-norm + RoPE + KV append -> split-K attention -> merge + divide +
 *   sigmoid gate (+ int8 blocks for Wo) -> matvec Wo whose last block runs
 *   post-norm + residual + ffn pre-norm -> matvec gate/up with SwiGLU and
 *   int8 blocks fused -> matvec down whose last block runs post-norm +
 *   residual + the next pre-norm. Then the LM head with logit scale,
 *   soft-cap and the device-side token choice. 7 launches per layer.
 * Prefill (a chunk of T tokens): the same graph with cuBLAS GEMMs on
 * dequantized f16 (fast lane) or f32 (exact lane) weights.
 *
 * The host keeps the KV ring bookkeeping (kv/) and the route decisions
 * (engine/route.c); per token it uploads one record: token id, position,
 * each layer's append slot and route, and the RoPE cos/sin tables.
 */
#ifdef MUSER_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model/rope.h"
#include "cuda/cu_shared.h"
#include "cuda/cuda_api.h"
#include "engine/engine.h"
#include "quant/quant.h"
#include "util/error.h"

#define CU_CHECK(call)                                                                                          \
    do {                                                                                                        \
        cudaError_t e_ = (call);                                                                                \
        if (e_ != cudaSuccess)                                                                                  \
            return mu_fail(MUSER_EBACKEND, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
    } while (0)

#define BLAS_CHECK(call)                                                                                   \
    do {                                                                                                   \
        cublasStatus_t s_ = (call);                                                                        \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                   \
            return mu_fail(MUSER_EBACKEND, "%s:%d: %s: cuBLAS status %d", __FILE__, __LINE__, #call, (int)s_); \
    } while (0)

#define RC(call)              \
    do {                      \
        int rc_ = (call);     \
        if (rc_) return rc_;  \
    } while (0)

#define STAGE_BYTES (64u << 20)
#define SPLIT_CAP_MAX 128
#define SPLIT_CAP_PREFILL 8

typedef struct cu_layer {
    mu_cu_weight wq, wk, wv, wgate, wo, ffn_gate, ffn_up, ffn_down;
    float *attn_norm, *q_norm, *k_norm, *post_attn_norm, *ffn_norm, *post_ffn_norm;
    int base_index;
} cu_layer;

enum { PF_EMBED, PF_QKVG, PF_QKPOST, PF_ATTN, PF_REDUCE, PF_WO, PF_GATEUP, PF_DOWN, PF_HEAD, PF_ALLREDUCE, PF_COUNT };
static const char *pf_names[PF_COUNT] = {"embed+norm",
                                         "qkv+gate matvec",
                                         "qk-norm+rope+kv",
                                         "attention (split-K; short spans: one launch, clustered)",
                                         "attn reduce+gate",
                                         "wo (+resnorm tail)",
                                         "ffn gate/up+swiglu",
                                         "ffn down (+resnorm tail)",
                                         "lm head+select",
                                         "all-reduce+resnorm (TP)"};

/* Event marks between op families of one decode step (profiling). */
#define PROF_MAX_EV (4 + 12 * 1024)
typedef struct prof_state {
    bool on;
    cudaEvent_t ev[PROF_MAX_EV];
    int fam[PROF_MAX_EV];
    int n;
} prof_state;

typedef struct cu_weights cu_weights;

enum { ROUTE_SPLIT = 0, ROUTE_SHORT = 1, ROUTE_CLUSTER = 2, N_ROUTES = 3 };

typedef struct cuda_backend {
    mu_backend base;
    const mu_model *m;
    mu_session_config cfg;
    int device;
    char desc[640];
    cudaStream_t stream;
    cublasHandle_t blas;
    bool fast, kv_f32, use_mma, use_graph, use_pdl;
    int mv_occupancy; /* matvec blocks per SM (0: as many as fit) */
    int T_max, split_dec, split_pre;
    int64_t E, Q, KVD, F, V;
    /* weights (wsh: shared with the model's other sessions on this GPU; the
     * fields below then alias the shared upload) */
    cu_weights *wsh;
    void *wmem, *f16mem;
    uint64_t wbytes, f16bytes, token_bytes;
    mu_cu_weight tok_embd, output;
    cu_layer *layers;
    float *output_norm;
    int n_bases;
    float bases[8];
    /* KV */
    mu_kv_plane *planes;
    void **kc, **vc;
    size_t kv_elem;
    /* step records */
    int64_t rec_stride;
    uint8_t *h_rec, *d_rec;
    /* activations */
    float *h, *ax, *q, *k, *v, *g, *qn, *o, *t, *ff, *fu;
    int8_t *aq, *oq, *fq;
    float *ads, *ods, *fds;
    /* decode: the ffn input has its own buffers (the attention input's are
     * rewritten by the down tail while the next layer's kernels launch) */
    float *ax2, *ads2;
    int8_t *aq2;
    /* decode with norm-in staging (norm_in): the residual alternates
     * between h and h2 (boundary k reads one and writes the other) */
    float *h2;
    bool norm_in;
    /* decode: qkv + gate row-dots in batch parts where that takes fewer
     * rounds (mu_cu_mv_batch_parts; MUSER_CUDA_BATCH_PARTS=0: whole rows) */
    bool batch_parts;
    uint16_t *a16, *o16, *f16b;
    float *part_m, *part_l, *part_o;
    float *logits;          /* [V]: the decode step's (fixed: the graph holds it) */
    float *logits_all;      /* [logit_rows][V]: prefill with all_logits        */
    int64_t logit_rows;
    unsigned long long *d_best, *h_best;
    unsigned int *counters, *group_count;
    float *h_logits;
    void *wtmp;
    size_t wtmp_bytes;
    /* decode attention of spans up to attn_short rows in one launch of a
     * block per head (mu_cu_attn_decode; MUSER_CUDA_ATTN_SHORT, 0: off), up
     * to attn_cluster_rows in one launch of a cluster of attn_cluster blocks
     * per head (MUSER_CUDA_ATTN_CLUSTER, 0: off), and the route of the step
     * fill_records prepared: ROUTE_SHORT or ROUTE_CLUSTER when every layer's
     * span fits, else ROUTE_SPLIT (QK-norm/RoPE/append, split-K, reducer) */
    int attn_short, attn_cluster_rows, attn_cluster;
    /* the one-block route's attention formed in Wo's staging instead of a
     * launch of its own (mu_cu_mv.attn_in; MUSER_CUDA_ATTN_WO, 0: off),
     * where the model allows it (attn_in_wo) */
    int attn_wo; /* (default off: measured slower) */
    int smem_optin; /* shared memory a block may opt in to */
    int route;
    /* graph: one per route */
    cudaGraphExec_t graph[N_ROUTES];
    bool graph_ready[N_ROUTES], graph_broken;
    /* tensor parallel: a rank's Wo and down write partial sums, summed over
     * the ranks in their own tails (xr, the fused all-reduce) or by NCCL
     * between the parts of the step, then a residual/norm tail launch */
    bool tp;
    /* the fused all-reduce (xr.n >= 1, tensor parallel with NCCL's LSA
     * mapping): Wo writes t, down t2 (two buffers: a rank still reading a
     * peer's t after their meeting cannot see it overwritten before their
     * next one), and the RESNORM tail of each sums every rank's copy, read
     * at lsa_t / lsa_t2 + rank * xr.stride, after the ranks meet */
    mu_cu_xrank xr;
    float *t2;
    const float *lsa_t, *lsa_t2;
    int64_t vocab0; /* global index of this rank's first LM-head row */
    int batch_min;  /* batched decode from this many rows (0: never) */
    bool batch_mv;  /* exact lane: batched decode through B-row matvecs, not the GEMMs */
    /* muser bench --profile: op by op with events, accumulated per family */
    prof_state *prof;
    mu_prof_entry prof_acc[MU_PROF_COUNT];
} cuda_backend;

/* ---- weights shared by the sessions of one model on one GPU ----------------------------
 * The first single-GPU session of a model uploads the weights (and the fast
 * lane's f16 prefill cache when it fits) and publishes them here; later
 * sessions of the same model on the same GPU take a reference and upload
 * nothing; the last one to go frees them. Each session keeps its own KV
 * cache, activations, step records and graph. Tensor-parallel ranks (model
 * views of their own) do not share. */
struct cu_weights {
    const mu_model *m;
    int device, refs;
    void *wmem, *f16mem;
    uint64_t wbytes, f16bytes;
    mu_cu_weight tok_embd, output;
    cu_layer *layers; /* matrices and norms */
    float *output_norm;
    cu_weights *next;
};
static pthread_mutex_t g_wlock = PTHREAD_MUTEX_INITIALIZER;
static cu_weights *g_weights;

/* A reference to m's weights on device, or NULL when none are resident. */
static cu_weights *weights_acquire(const mu_model *m, int device) {
    pthread_mutex_lock(&g_wlock);
    cu_weights *e = g_weights;
    while (e && !(e->m == m && e->device == device)) e = e->next;
    if (e) e->refs++;
    pthread_mutex_unlock(&g_wlock);
    return e;
}

/* Sessions holding a reference to the weights of m on device (tests). */
int mu_cuda_weight_refs(const mu_model *m, int device) {
    pthread_mutex_lock(&g_wlock);
    const cu_weights *e = g_weights;
    while (e && !(e->m == m && e->device == device)) e = e->next;
    int n = e ? e->refs : 0;
    pthread_mutex_unlock(&g_wlock);
    return n;
}

/* Drops a reference; the last one frees the device memory. */
static void weights_release(cu_weights *e) {
    pthread_mutex_lock(&g_wlock);
    bool last = --e->refs == 0;
    if (last) {
        cu_weights **pp = &g_weights;
        while (*pp && *pp != e) pp = &(*pp)->next;
        if (*pp) *pp = e->next;
    }
    pthread_mutex_unlock(&g_wlock);
    if (!last) return;
    cudaSetDevice(e->device);
    for (int l = 0; l < e->m->hp.n_layer; l++) {
        cu_layer *D = &e->layers[l];
        float *norms[] = {D->attn_norm, D->q_norm, D->k_norm, D->post_attn_norm, D->ffn_norm, D->post_ffn_norm};
        for (size_t i = 0; i < sizeof norms / sizeof norms[0]; i++)
            if (norms[i]) cudaFree(norms[i]);
    }
    if (e->wmem) cudaFree(e->wmem);
    if (e->f16mem) cudaFree(e->f16mem);
    if (e->output_norm) cudaFree(e->output_norm);
    free(e->layers);
    free(e);
}

/* ---- small helpers ----------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int env_int(const char *name, int dflt) {
    const char *e = getenv(name);
    if (!e || !*e) return dflt;
    return atoi(e);
}

/* Decode attention in one launch of a block per head up to this span
 * (mu_cu_attn_decode). Measured on one H200 (b0f2d89, one call, two
 * rounds, spans d+1..d+25 at depth d, tok/s with the limit at 256 / 128):
 * depth 104 187.9 / 187.3 (that span crosses 128), 136 181.6 / 182.1, 200
 * 176.9 / 182.0; below 128 rows the one block beats the split route (depth
 * 72: 188.1 against 182.9). Against the cluster route (below; spans
 * d+1..d+33, limit 128 / 64 / 32): depth 40 192.7 / 192.1 / 191.5, 72 188.8
 * / 191.1 / 191.2, 104 188.4 / 190.9 / 191.1: clusters of four from 65. */
#define MU_CUDA_ATTN_SHORT_DEFAULT 64
static int attn_short_clamp(int n) { return n <= 0 ? 0 : n > MU_CU_ATTN_SHORT_MAX ? MU_CU_ATTN_SHORT_MAX : n; }

/* The cluster route (decode spans past MUSER_CUDA_ATTN_SHORT, up to this
 * many rows, in one launch of ceil(limit / 128) blocks a head; at most
 * MU_CU_ATTN_CLUSTER_MAX x 128 rows). Measured on one H200 (one call, two
 * rounds, spans d+1..d+33 at depth d, tok/s; split route / limit 256 (2
 * blocks) / 512 (4) / 1024 (8)): depth 200 182.8 / 185.3 / 189.3 / 179.9,
 * 450 183.2 / 183.1 / 184.5 / 177.8, 900 182.4 / - / - / 169.1: four blocks
 * a head win up to 512 rows; clusters of eight lose everywhere. */
#define MU_CUDA_ATTN_CLUSTER_DEFAULT 512
static int attn_cluster_clamp(int n) {
    return n <= 0 ? 0 : n > MU_CU_ATTN_CLUSTER_MAX * 128 ? MU_CU_ATTN_CLUSTER_MAX * 128 : n;
}
static int attn_cluster_blocks(int rows) { return rows <= 128 ? 2 : (rows + 127) / 128; }

static bool is_kq_type(uint32_t t) { return t == MU_TYPE_Q4_K || t == MU_TYPE_Q5_K || t == MU_TYPE_Q6_K; }

static int dalloc(void **p, size_t bytes, const char *what) {
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

/* Publishes a new session's uploaded weights for the model's later sessions. */
static int weights_publish(cuda_backend *b) {
    cu_weights *e = calloc(1, sizeof *e);
    if (!e) return mu_fail(MUSER_ENOMEM, "out of memory");
    e->m = b->m;
    e->device = b->device;
    e->refs = 1;
    e->wmem = b->wmem, e->wbytes = b->wbytes;
    e->f16mem = b->f16mem, e->f16bytes = b->f16bytes;
    e->tok_embd = b->tok_embd, e->output = b->output;
    e->layers = b->layers;
    e->output_norm = b->output_norm;
    pthread_mutex_lock(&g_wlock);
    e->next = g_weights;
    g_weights = e;
    pthread_mutex_unlock(&g_wlock);
    b->wsh = e;
    return 0;
}

/* A session's view of shared weights (b->wsh). */
static void weights_adopt(cuda_backend *b) {
    const cu_weights *e = b->wsh;
    b->wmem = e->wmem, b->wbytes = e->wbytes;
    b->f16mem = e->f16mem, b->f16bytes = e->f16bytes;
    b->tok_embd = e->tok_embd, b->output = e->output;
    b->layers = e->layers;
    b->output_norm = e->output_norm;
}

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
    if (prop.major < 9)
        return mu_fail(MUSER_EBACKEND, "GPU 0 (%s) has compute capability %d.%d; this build needs 9.0 (Hopper) or newer",
                       prop.name, prop.major, prop.minor);
    return 0;
}

/* ---- weights: layout, upload, repack ---------------------------------------------------------- */

static uint64_t align256(uint64_t x) { return (x + 255) & ~(uint64_t)255; }

static uint64_t weight_dev_bytes(const mu_weight *w) {
    mu_cu_layout l;
    if (!w->data || !mu_cu_weight_layout(w->type, w->rows, w->cols, &l)) return 0;
    return align256(l.qs) + align256(l.qh) + align256(l.meta) + align256(l.d);
}

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
    cuda_backend *b;
    int fd;
    const uint8_t *file_base;
    uint8_t *pin[2];
    void *dstage[2];
    cudaEvent_t ev[2];
    int turn;
    uint64_t done, total;
    double t0, last;
    bool show;
} uploader;

static void upload_progress(uploader *u, bool final) {
    double now = now_s();
    if (!u->show || (!final && now - u->last < 0.25)) return;
    u->last = now;
    fprintf(stderr, "\rcuda: uploading weights %6.2f / %.2f GB (%3.0f%%) %6.2f GB/s", u->done / 1e9, u->total / 1e9,
            u->total ? 100.0 * u->done / u->total : 100.0, u->done / 1e9 / (now - u->t0 + 1e-9));
    if (final) fputc('\n', stderr);
}

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
    const cudaStream_t s = u->b->stream;
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
        upload_progress(u, false);
    }
    return 0;
}

static int upload_norm(const float *src, int64_t n, float **dst) {
    *dst = NULL;
    if (!src) return 0;
    RC(dalloc((void **)dst, (size_t)n * sizeof(float), "norm weights"));
    CU_CHECK(cudaMemcpy(*dst, src, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    return 0;
}

#define LAYER_MATS(L, X) X(wq) X(wk) X(wv) X(wgate) X(wo) X(ffn_gate) X(ffn_up) X(ffn_down)

static int upload_weights(cuda_backend *b) {
    const mu_model *m = b->m;
    const mu_hparams *hp = &m->hp;
    uint64_t total = weight_dev_bytes(&m->tok_embd) + weight_dev_bytes(&m->output);
    uint64_t file_bytes = m->tok_embd.rows * m->tok_embd.row_bytes + m->output.rows * m->output.row_bytes;
    /* (row_bytes is the file's stride; a column slice reads a part of each row) */
    for (int l = 0; l < hp->n_layer; l++) {
        const mu_layer *L = &m->layers[l];
#define ADD(x) total += weight_dev_bytes(&L->x), file_bytes += L->x.data ? (uint64_t)L->x.rows * mu_row_bytes(L->x.type, L->x.cols) : 0;
        LAYER_MATS(L, ADD)
#undef ADD
    }
    RC(dalloc(&b->wmem, total, "weights"));
    b->wbytes = total;
    uint8_t *cur = b->wmem;
    weight_place(&m->tok_embd, &cur, &b->tok_embd);
    weight_place(&m->output, &cur, &b->output);
    for (int l = 0; l < hp->n_layer; l++) {
        const mu_layer *L = &m->layers[l];
        cu_layer *D = &b->layers[l];
#define PLACE(x) weight_place(&L->x, &cur, &D->x);
        LAYER_MATS(L, PLACE)
#undef PLACE
    }

    uploader u;
    memset(&u, 0, sizeof u);
    u.b = b;
    u.fd = open(m->file->path, O_RDONLY);
    u.file_base = m->file->base;
    u.total = file_bytes;
    u.show = file_bytes >= (256u << 20) && !getenv("MUSER_QUIET");
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        if (cudaHostAlloc((void **)&u.pin[k], STAGE_BYTES, cudaHostAllocDefault) != cudaSuccess ||
            cudaMalloc(&u.dstage[k], STAGE_BYTES) != cudaSuccess || cudaEventCreate(&u.ev[k]) != cudaSuccess)
            rc = mu_fail(MUSER_EBACKEND, "cannot allocate the upload staging buffers");
    }
    u.t0 = now_s();
    if (!rc) rc = upload_one(&u, &m->tok_embd, &b->tok_embd);
    if (!rc) rc = upload_one(&u, &m->output, &b->output);
    for (int l = 0; l < hp->n_layer && !rc; l++) {
        const mu_layer *L = &m->layers[l];
        cu_layer *D = &b->layers[l];
#define UP(x) if (!rc) rc = upload_one(&u, &L->x, &D->x);
        LAYER_MATS(L, UP)
#undef UP
    }
    if (!rc && cudaStreamSynchronize(b->stream) != cudaSuccess)
        rc = mu_fail(MUSER_EBACKEND, "weight upload failed: %s", cudaGetErrorString(cudaGetLastError()));
    double secs = now_s() - u.t0;
    upload_progress(&u, true);
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
        cu_layer *D = &b->layers[l];
        RC(upload_norm(L->attn_norm, hp->n_embd, &D->attn_norm));
        RC(upload_norm(L->q_norm, hp->head_dim, &D->q_norm));
        RC(upload_norm(L->k_norm, hp->head_dim, &D->k_norm));
        RC(upload_norm(L->post_attn_norm, hp->n_embd, &D->post_attn_norm));
        RC(upload_norm(L->ffn_norm, hp->n_embd, &D->ffn_norm));
        RC(upload_norm(L->post_ffn_norm, hp->n_embd, &D->post_ffn_norm));
    }
    RC(upload_norm(m->output_norm, hp->n_embd, &b->output_norm));
    return 0;
}

/* Dequantized f16 copies of every matrix for the fast lane's prefill GEMMs
 * (when they fit): a chunk then pays for GEMMs only. */
static uint64_t f16_bytes(const mu_cu_weight *w) { return w->qs ? align256((uint64_t)w->rows * w->cols * 2) : 0; }

static int build_prefill_cache(cuda_backend *b) {
    const mu_hparams *hp = &b->m->hp;
    uint64_t total = f16_bytes(&b->output);
    for (int l = 0; l < hp->n_layer; l++) {
        cu_layer *D = &b->layers[l];
#define ADD(x) total += f16_bytes(&D->x);
        LAYER_MATS(D, ADD)
#undef ADD
    }
    size_t free_b = 0, total_b = 0;
    CU_CHECK(cudaMemGetInfo(&free_b, &total_b));
    int want = env_int("MUSER_CUDA_PREFILL_CACHE", -1);
    if (want == 0 || (want < 0 && (double)total > (double)free_b - 3e9)) return 0;
    if (dalloc(&b->f16mem, total, "the prefill weight cache")) {
        mu_clear_error();
        return 0;
    }
    b->f16bytes = total;
    uint8_t *cur = b->f16mem;
    mu_cu_weight **all = malloc(sizeof(mu_cu_weight *) * (size_t)(1 + 8 * hp->n_layer));
    if (!all) return mu_fail(MUSER_ENOMEM, "out of memory");
    int n = 0;
    all[n++] = &b->output;
    for (int l = 0; l < hp->n_layer; l++) {
        cu_layer *D = &b->layers[l];
#define COLLECT(x) all[n++] = &D->x;
        LAYER_MATS(D, COLLECT)
#undef COLLECT
    }
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < n && e == cudaSuccess; i++) {
        mu_cu_weight *w = all[i];
        if (!w->qs) continue;
        w->f16 = (const uint16_t *)cur;
        e = mu_cu_dequant(w, 0, w->rows, cur, true, b->stream);
        cur += f16_bytes(w);
    }
    free(all);
    CU_CHECK(e);
    CU_CHECK(cudaStreamSynchronize(b->stream));
    mu_info("cuda: prefill weight cache: %.2f GB of f16 weights", total / 1e9);
    return 0;
}

/* ---- step records ---------------------------------------------------------------------- */

static mu_cu_recs recs_of(const cuda_backend *b) {
    mu_cu_recs r;
    r.base = b->d_rec;
    r.stride = b->rec_stride;
    r.n_layer = b->m->hp.n_layer;
    r.n_rot = b->m->hp.n_rot;
    r.n_bases = b->n_bases;
    return r;
}

/* Appends the T positions to every plane, decides every (token, layer)
 * route and fills the host records. The planes are restored on failure. */
static int fill_records(cuda_backend *b, const muser_token *tokens, int T, int pos0, float temperature, uint64_t seed) {
    const mu_model *m = b->m;
    const mu_hparams *hp = &m->hp;
    const int L = hp->n_layer;
    mu_kv_plane *backup = malloc(sizeof(mu_kv_plane) * (size_t)L);
    if (!backup) return mu_fail(MUSER_ENOMEM, "out of memory");
    memcpy(backup, b->planes, sizeof(mu_kv_plane) * (size_t)L);
    int rc = 0;
    int64_t widest = 0; /* the widest span of the step */
    for (int l = 0; l < L && !rc; l++) {
        for (int t = 0; t < T; t++) {
            int64_t slot = mu_kv_append(&b->planes[l]);
            if (slot < 0) {
                rc = mu_fail(MUSER_ECONTEXT, "layer %d: KV plane is full", l);
                break;
            }
            mu_cu_rec_layer *rl = (mu_cu_rec_layer *)(b->h_rec + (int64_t)t * b->rec_stride + sizeof(mu_cu_rec_hdr)) + l;
            rl->slot = (int32_t)slot;
        }
    }
    for (int t = 0; t < T && !rc; t++) {
        uint8_t *rec = b->h_rec + (int64_t)t * b->rec_stride;
        mu_cu_rec_hdr *hdr = (mu_cu_rec_hdr *)rec;
        const int64_t pos = (int64_t)pos0 + t;
        hdr->token = tokens[t];
        hdr->pos = (int32_t)pos;
        hdr->temperature = temperature;
        hdr->seed = (uint32_t)(seed ^ (seed >> 32));
        mu_cu_rec_layer *rl = (mu_cu_rec_layer *)(rec + sizeof(mu_cu_rec_hdr));
        for (int l = 0; l < L; l++) {
            mu_route_decision d;
            int64_t n_vis = mu_layer_visible(hp, &m->layers[l], pos);
            if (!mu_attn_route_select(&b->planes[l], pos, n_vis, l, &d)) {
                rc = mu_fail(MUSER_EINVAL, "layer %d: the KV plane does not hold positions %lld..%lld", l,
                             (long long)(pos - n_vis + 1), (long long)pos);
                break;
            }
            rl[l].n_visible = (int32_t)d.n_visible;
            if (d.n_visible > widest) widest = d.n_visible;
            rl[l].phys_first = (int32_t)d.phys_first;
            rl[l].route = d.route == MU_ROUTE_CONTIGUOUS ? MU_CU_ROUTE_CONTIGUOUS : MU_CU_ROUTE_ORIGIN;
        }
        float *cs = (float *)(rec + sizeof(mu_cu_rec_hdr) + (size_t)L * sizeof(mu_cu_rec_layer));
        for (int i = 0; i < b->n_bases; i++)
            mu_rope_table(hp, b->bases[i], m->rope_freq_factors, pos, cs + (size_t)i * hp->n_rot);
    }
    if (rc) memcpy(b->planes, backup, sizeof(mu_kv_plane) * (size_t)L);
    free(backup);
    b->route = T != 1                                                       ? ROUTE_SPLIT
               : b->attn_short > 0 && widest <= b->attn_short               ? ROUTE_SHORT
               : b->attn_cluster_rows > 0 && widest <= b->attn_cluster_rows ? ROUTE_CLUSTER
                                                                            : ROUTE_SPLIT;
    return rc;
}

/* ---- the op sequence ------------------------------------------------------------------------ */

static mu_cu_act act_of(const float *x, const int8_t *q, const float *ds) {
    mu_cu_act a = {x, q, ds};
    return a;
}

static mu_cu_resnorm resnorm_of(const cuda_backend *b, const float *branch, const float *w_post, const float *w_next,
                                bool f16) {
    const mu_hparams *hp = &b->m->hp;
    mu_cu_resnorm rn;
    memset(&rn, 0, sizeof rn);
    rn.branch = branch;
    rn.w_post = w_post;
    rn.eps_post = hp->post_norm_eps;
    rn.h = b->h;
    rn.w_next = w_next;
    rn.eps_next = hp->rms_eps;
    rn.n = (int)b->E;
    rn.stride = b->E;
    rn.out.x = b->ax;
    rn.out.q = b->fast ? b->aq : NULL;
    rn.out.ds = b->fast ? b->ads : NULL;
    rn.out.h = f16 ? b->a16 : NULL;
    return rn;
}

static int prof_mark(cuda_backend *b, prof_state *p, int family) {
    if (!p || !p->on) return 0;
    if (p->n >= (int)(sizeof p->ev / sizeof p->ev[0])) return 0;
    CU_CHECK(cudaEventRecord(p->ev[p->n], b->stream));
    p->fam[p->n++] = family;
    return 0;
}

static mu_cu_qkv_post qkv_post_of(const cuda_backend *b, int l, int T) {
    const mu_hparams *hp = &b->m->hp;
    const mu_layer *L = &b->m->layers[l];
    const cu_layer *D = &b->layers[l];
    mu_cu_qkv_post a;
    memset(&a, 0, sizeof a);
    a.T = T;
    a.layer = l;
    a.n_head = hp->n_head;
    a.n_head_kv = hp->n_head_kv;
    a.head_dim = hp->head_dim;
    a.n_rot = hp->n_rot;
    a.neox = hp->rope_type == MU_ROPE_NEOX;
    a.use_rope = L->use_rope;
    a.base_index = D->base_index;
    a.q = b->q;
    a.k = b->k;
    a.v = b->v;
    a.q_stride = b->Q;
    a.kv_stride = b->KVD;
    a.q_norm = D->q_norm;
    a.k_norm = D->k_norm;
    a.eps = hp->rms_eps;
    a.qn = b->qn;
    a.kc = b->kc[l];
    a.vc = b->vc[l];
    a.kv_f32 = b->kv_f32;
    a.recs = recs_of(b);
    return a;
}

/* The split-K attention's and the reducer's arguments (attention_at). */
static void attn_structs(const cuda_backend *b, const cuda_backend *kv, int l, int T, int64_t row, mu_cu_recs recs,
                         int cap, bool f16_out, bool quant_out, int gate_parts, mu_cu_attn *ap, mu_cu_reduce *rp) {
    const mu_hparams *hp = &b->m->hp;
    const int64_t off = row * b->Q;
    mu_cu_attn a;
    memset(&a, 0, sizeof a);
    a.T = T;
    a.layer = l;
    a.n_head = hp->n_head;
    a.n_head_kv = hp->n_head_kv;
    a.head_dim = hp->head_dim;
    a.kv_f32 = b->kv_f32;
    a.capacity = kv->planes[l].capacity;
    a.kc = kv->kc[l];
    a.vc = kv->vc[l];
    a.q = b->qn + off;
    a.scale_log2 = hp->attn_scale * 1.4426950408889634f;
    a.split_cap = cap;
    a.part_m = b->part_m;
    a.part_l = b->part_l;
    a.part_o = b->part_o;
    a.recs = recs;

    mu_cu_reduce r;
    memset(&r, 0, sizeof r);
    r.T = T;
    r.n_head = hp->n_head;
    r.head_dim = hp->head_dim;
    r.split_cap = cap;
    r.layer = l;
    r.part_m = b->part_m;
    r.part_l = b->part_l;
    r.part_o = b->part_o;
    r.gate = b->layers[l].wgate.qs ? b->g + off : NULL;
    r.gate_stride = b->Q;
    r.gate_parts = gate_parts;
    r.out.x = b->o + off;
    r.out.q = quant_out ? b->oq : NULL;
    r.out.ds = quant_out ? b->ods : NULL;
    r.out.h = f16_out ? b->o16 + off : NULL;
    r.out_stride = b->Q;
    r.recs = recs;
    *ap = a;
    *rp = r;
}

/* The decode step's attention in one launch (the short and cluster
 * routes), or formed in Wo's staging (the short route). */
static mu_cu_attn_decode attn_decode_of(const cuda_backend *b, int l, const mu_cu_qkv_post *qp, bool quant_out) {
    mu_cu_attn_decode d;
    memset(&d, 0, sizeof d);
    attn_structs(b, b, l, 1, 0, recs_of(b), b->split_dec, false, quant_out, qp->parts, &d.at, &d.rd);
    d.qp = *qp;
    const bool cluster = b->route == ROUTE_CLUSTER;
    d.short_max = cluster ? b->attn_cluster_rows : b->attn_short;
    d.cluster = cluster ? b->attn_cluster : 1;
    return d;
}

/* Whether layer l's short-route attention is formed in Wo's staging: the
 * fast lane's tensor-core arithmetic over f16 KV, Wo a K-quant STORE of a
 * norm-in boundary (one GPU), tiles that fit shared memory. Off unless
 * MUSER_CUDA_ATTN_WO=1: measured on one H200 (same call, depth 0) 174.5
 * tok/s against 191.8 with the attention's own launch. Leaving its parts
 * out (timing flags, results wrong): no staging at all 203.4, without the
 * heads' norm/rope 185.0, without the scores/softmax/P V 181.4, without
 * both 192.3: the launch it saves is worth about 5%, but its serial phases
 * in 1024-thread blocks cost about 16 us a layer (docs/cuda-notes.md,
 * version 20). */
static bool attn_in_wo(const cuda_backend *b, int l) {
    const mu_hparams *hp = &b->m->hp;
    const mu_cu_weight *wo = &b->layers[l].wo;
    if (!b->attn_wo || !b->fast || b->kv_f32 || !b->use_mma || !b->norm_in || b->tp || hp->head_dim != 128 ||
        hp->n_head_kv < 1 || hp->n_head_kv > 32 || hp->n_head % hp->n_head_kv || hp->n_head / hp->n_head_kv > 16 ||
        hp->n_rot > 128 ||
        b->attn_short < 1 || b->attn_short > MU_CU_ATTN_IN_MAX || !is_kq_type(wo->type) || wo->cols != b->Q)
        return false;
    const size_t need = mu_cu_attn_in_launch_smem(wo->cols, hp->n_head, hp->n_head_kv, b->attn_short);
    return need + 4096 <= (size_t)b->smem_optin; /* (the kernel's static shared memory) */
}

/* Split-K attention of T query rows starting at row `row` of b's
 * activations over kv's cache of layer l (kv is b itself, or the session
 * of that row in a batched step), then the merge + gate into o (o16; the
 * int8 copy when quant_out). fused (decode, the short and cluster
 * routes): the QK-norm/RoPE/append of the token and the whole attention
 * in one launch (mu_cu_attn_decode_launch). */
static int attention_at(cuda_backend *b, const cuda_backend *kv, int l, int T, int64_t row, mu_cu_recs recs, int cap,
                        prof_state *p, bool f16_out, bool quant_out, const mu_cu_qkv_post *fused, int gate_parts) {
    mu_cu_attn a;
    mu_cu_reduce r;
    attn_structs(b, kv, l, T, row, recs, cap, f16_out, quant_out, gate_parts, &a, &r);
    if (fused) { /* the whole short span in one launch */
        const mu_cu_attn_decode d = attn_decode_of(b, l, fused, quant_out);
        RC(prof_mark(b, p, PF_ATTN));
        CU_CHECK(mu_cu_attn_decode_launch(&d, b->stream));
        return 0;
    }
    RC(prof_mark(b, p, PF_ATTN));
    CU_CHECK(mu_cu_attention(&a, b->use_mma && !b->kv_f32, b->stream));
    RC(prof_mark(b, p, PF_REDUCE));
    CU_CHECK(mu_cu_attn_reduce(&r, b->stream));
    return 0;
}

static int run_attention(cuda_backend *b, int l, int T, prof_state *p, bool f16_out, int gate_parts) {
    return attention_at(b, b, l, T, 0, recs_of(b), T == 1 ? b->split_dec : b->split_pre, p, f16_out,
                        T == 1 && b->fast, NULL, gate_parts);
}

static void mv_init(mu_cu_mv *a, const cuda_backend *b, int epi, mu_cu_act act) {
    memset(a, 0, sizeof *a);
    a->lane = b->fast ? MU_CU_LANE_FAST : MU_CU_LANE_EXACT;
    a->epi = epi;
    a->act = act;
    a->even_rounds = b->tp; /* (measured: see launch_mv) */
}

static void mv_seg(mu_cu_mv *a, const mu_cu_weight *w, float *y) {
    if (!w->qs) return;
    a->seg[a->nseg].w = *w;
    a->seg[a->nseg].y = y;
    a->nseg++;
}

/* The input of boundary k's consumer (norm-in staging): k = 2l is layer
 * l's Wo, 2l + 1 its ffn down; the residual is read from one buffer and
 * (keep) written to the other; the branch is the producer's parts in t. */
static mu_cu_norm_in nin_of(const cuda_backend *b, int k, const mu_cu_weight *producer, const float *w_post,
                            const float *w_next, bool keep) {
    const mu_hparams *hp = &b->m->hp;
    mu_cu_norm_in ni;
    memset(&ni, 0, sizeof ni);
    ni.h = k % 2 ? b->h2 : b->h;
    ni.h_out = keep ? (k % 2 ? b->h : b->h2) : NULL;
    ni.branch = b->t;
    ni.parts = mu_cu_mv_parts(producer->type, producer->cols);
    ni.part_stride = producer->rows;
    ni.w_post = w_post;
    ni.eps_post = hp->post_norm_eps;
    ni.w_next = w_next;
    ni.eps_next = hp->rms_eps;
    return ni;
}

/* The LM head over one normed row (index row of ax/aq), choosing a token;
 * decode: the step's, which forms its input from the last boundary when
 * norm_in. */
static int run_head_matvec(cuda_backend *b, int row, bool decode, prof_state *p) {
    const mu_hparams *hp = &b->m->hp;
    const int64_t off = (int64_t)row * b->E;
    mu_cu_mv a;
    mv_init(&a, b, MU_CU_EPI_LOGITS,
            act_of(b->ax + off, b->fast ? b->aq + off : NULL, b->fast ? b->ads + off / 16 * 2 : NULL));
    mv_seg(&a, &b->output, b->logits);
    if (decode && b->norm_in) {
        const cu_layer *P = &b->layers[hp->n_layer - 1];
        a.nin = nin_of(b, 2 * hp->n_layer - 1, &P->ffn_down, P->post_ffn_norm, b->output_norm, false);
    }
    a.logit_scale = hp->logit_scale;
    a.softcap = hp->softcap;
    a.best = b->d_best;
    a.vocab0 = b->vocab0; /* global token ids in the device choice (tensor parallel) */
    a.hdr = (const mu_cu_rec_hdr *)(b->d_rec + (int64_t)row * b->rec_stride);
    RC(prof_mark(b, p, PF_HEAD));
    CU_CHECK(mu_cu_matvec(&a, b->stream));
    return 0;
}

/* The decode step (T = 1) in parts: part 0 = embedding and layer 0 up to
 * Wo; part 2l+1 = layer l's FFN; part 2l+2 = layer l+1 up to Wo; part 2L =
 * the LM head. A single GPU runs all parts back to back with the tails
 * fused into Wo and down. So does a tensor-parallel rank with the fused
 * all-reduce (the tails sum the ranks' partial outputs); without it, Wo
 * and down write partial sums, NCCL all-reduces them between the parts,
 * and the next part starts with the residual/norm tail. */
static int decode_parts(const cuda_backend *b) { return 2 * b->m->hp.n_layer + 1; }

/* The fused all-reduce (tensor parallel over NCCL's LSA mapping): the
 * RESNORM tail meets the other ranks and sums every rank's branch in rank
 * order (the same bits on every rank), read at lsa (rank 0's copy). */
static void rank_sum(const cuda_backend *b, mu_cu_resnorm *rn, const float *lsa) {
    if (b->xr.n < 2) return;
    rn->branch = lsa;
    rn->branch_parts = b->xr.n;
    rn->part_stride = b->xr.stride; /* (floats and flags are both 4 bytes) */
    rn->xr = b->xr;
}

/* Layer l up to Wo (its output in t, or the tail fused). */
static int enqueue_attn_block(cuda_backend *b, int l, prof_state *p) {
    const cudaStream_t s = b->stream;
    const cu_layer *D = &b->layers[l];
    const mu_cu_act in_a = act_of(b->ax, b->fast ? b->aq : NULL, b->fast ? b->ads : NULL);
    mu_cu_mv a;
    mv_init(&a, b, MU_CU_EPI_STORE, in_a);
    mv_seg(&a, &D->wq, b->q);
    mv_seg(&a, &D->wk, b->k);
    mv_seg(&a, &D->wv, b->v);
    mv_seg(&a, &D->wgate, b->g);
    if (b->norm_in && l > 0) {
        const cu_layer *P = &b->layers[l - 1];
        a.nin = nin_of(b, 2 * l - 1, &P->ffn_down, P->post_ffn_norm, D->attn_norm, true);
    }
    /* rows in parts of one batch where that takes fewer rounds (the
     * attention's QK-norm/RoPE and gate reads sum them) */
    a.batch_parts = b->batch_parts ? mu_cu_mv_batch_parts(&a) : 1;
    RC(prof_mark(b, p, PF_QKVG));
    CU_CHECK(mu_cu_matvec(&a, s));
    /* (fusing this into the matvec's epilogue was measured 2.5% slower:
     * a fence and an atomic per q/k row) */
    mu_cu_qkv_post qp = qkv_post_of(b, l, 1);
    qp.parts = a.batch_parts;
    const bool skip = mu_cu_get_matvec_lab() & MU_CU_LAB_SKIP_ATTN; /* (timing experiments leave these out) */
    const bool in_wo = !skip && b->route == ROUTE_SHORT && attn_in_wo(b, l);
    if (in_wo) {
        /* formed by Wo's blocks below */
    } else if (!skip && (b->route == ROUTE_SHORT || b->route == ROUTE_CLUSTER)) {
        RC(attention_at(b, b, l, 1, 0, recs_of(b), b->split_dec, p, false, b->fast, &qp, qp.parts));
    } else if (!skip) {
        RC(prof_mark(b, p, PF_QKPOST));
        CU_CHECK(mu_cu_qkv_post_launch(&qp, s));
        RC(run_attention(b, l, 1, p, false, qp.parts));
    }

    mv_init(&a, b, (b->tp && !b->xr.n) || b->norm_in ? MU_CU_EPI_STORE : MU_CU_EPI_RESNORM,
            act_of(b->o, b->fast ? b->oq : NULL, b->fast ? b->ods : NULL));
    mv_seg(&a, &D->wo, b->t);
    if (in_wo) {
        a.attn_in = 1;
        a.ad = attn_decode_of(b, l, &qp, false);
    }
    if (b->norm_in) { /* the parts in t; gate/up forms its input from them */
        a.split_parts = 1;
        RC(prof_mark(b, p, PF_WO));
        CU_CHECK(mu_cu_matvec(&a, s));
        return 0;
    }
    a.rn = resnorm_of(b, b->t, D->post_attn_norm, D->ffn_norm, false);
    rank_sum(b, &a.rn, b->lsa_t);
    a.rn.out.x = b->ax2;
    a.rn.out.q = b->fast ? b->aq2 : NULL;
    a.rn.out.ds = b->fast ? b->ads2 : NULL;
    a.counter = b->counters + 2 * l;
    RC(prof_mark(b, p, PF_WO));
    CU_CHECK(mu_cu_matvec(&a, s));
    return 0;
}

/* Layer l's FFN (down's output in t, or the tail fused). */
static int enqueue_ffn_block(cuda_backend *b, int l, prof_state *p) {
    const cudaStream_t s = b->stream;
    const mu_hparams *hp = &b->m->hp;
    const cu_layer *D = &b->layers[l];
    mu_cu_mv a;
    mv_init(&a, b, MU_CU_EPI_GATEUP, act_of(b->ax2, b->fast ? b->aq2 : NULL, b->fast ? b->ads2 : NULL));
    mv_seg(&a, &D->ffn_gate, b->ff);
    mv_seg(&a, &D->ffn_up, b->fu);
    if (b->norm_in) a.nin = nin_of(b, 2 * l, &D->wo, D->post_attn_norm, D->ffn_norm, true);
    /* the int8 groups of the products: made by the down launch while it
     * stages its input (default), or by gate/up's last writer of each group */
    const bool epi_q = b->fast && (mu_cu_get_matvec_lab() & MU_CU_LAB_EPI_GROUP_QUANT);
    a.gu.x = b->ff;
    a.gu.q = epi_q ? b->fq : NULL;
    a.gu.ds = epi_q ? b->fds : NULL;
    a.group_count = b->group_count;
    RC(prof_mark(b, p, PF_GATEUP));
    CU_CHECK(mu_cu_matvec(&a, s));

    mv_init(&a, b, (b->tp && !b->xr.n) || b->norm_in ? MU_CU_EPI_STORE : MU_CU_EPI_RESNORM,
            act_of(b->ff, b->fast ? b->fq : NULL, b->fast ? b->fds : NULL));
    float *y = b->xr.n ? b->t2 : b->t;
    mv_seg(&a, &D->ffn_down, y);
    a.quant_input = b->fast && !epi_q;
    if (b->norm_in) { /* the parts in t; the next qkv (or the LM head) forms its input from them */
        a.split_parts = 1;
        RC(prof_mark(b, p, PF_DOWN));
        CU_CHECK(mu_cu_matvec(&a, s));
        return 0;
    }
    const float *next = l + 1 < hp->n_layer ? b->layers[l + 1].attn_norm : b->output_norm;
    a.rn = resnorm_of(b, y, D->post_ffn_norm, next, false);
    rank_sum(b, &a.rn, b->lsa_t2);
    a.counter = b->counters + 2 * l + 1;
    RC(prof_mark(b, p, PF_DOWN));
    CU_CHECK(mu_cu_matvec(&a, s));
    return 0;
}

/* The residual/norm tail after an all-reduce (tensor parallel). */
static int enqueue_tp_tail(cuda_backend *b, int part, prof_state *p) {
    const mu_hparams *hp = &b->m->hp;
    mu_cu_resnorm rn;
    if ((part - 1) % 2 == 0) { /* after Wo of layer l: into the FFN's input */
        const int l = (part - 1) / 2;
        rn = resnorm_of(b, b->t, b->layers[l].post_attn_norm, b->layers[l].ffn_norm, false);
        rn.out.x = b->ax2;
        rn.out.q = b->fast ? b->aq2 : NULL;
        rn.out.ds = b->fast ? b->ads2 : NULL;
    } else { /* after down of layer l */
        const int l = (part - 2) / 2;
        const float *next = l + 1 < hp->n_layer ? b->layers[l + 1].attn_norm : b->output_norm;
        /* (a rank's down is a STORE launch: one part, whole rows) */
        rn = resnorm_of(b, b->t, b->layers[l].post_ffn_norm, next, false);
    }
    /* (timed with the all-reduce: its mark is set before the NCCL call) */
    CU_CHECK(mu_cu_resnorm_rows(rn, 1, b->stream));
    return 0;
}

static int enqueue_decode_part(cuda_backend *b, int part, prof_state *p) {
    const int L = b->m->hp.n_layer;
    if (part == 0) {
        CU_CHECK(cudaMemcpyAsync(b->d_rec, b->h_rec, (size_t)b->rec_stride, cudaMemcpyHostToDevice, b->stream));
        mu_cu_resnorm rn = resnorm_of(b, NULL, NULL, b->layers[0].attn_norm, false);
        rn.embd_norm = b->m->hp.embd_norm;
        RC(prof_mark(b, p, PF_EMBED));
        CU_CHECK(mu_cu_embed(&b->tok_embd, recs_of(b), 1, rn, b->d_best, b->stream));
        return enqueue_attn_block(b, 0, p);
    }
    if (b->tp && !b->xr.n) RC(enqueue_tp_tail(b, part, p));
    if (part % 2 == 1) return enqueue_ffn_block(b, (part - 1) / 2, p);
    if (part < 2 * L) return enqueue_attn_block(b, part / 2, p);
    RC(run_head_matvec(b, 0, true, p));
    RC(prof_mark(b, p, PF_COUNT));
    return 0;
}

/* The host's copy of the chosen token (after the step; TP: after the max). */
static int enqueue_best_copy(cuda_backend *b) {
    CU_CHECK(cudaMemcpyAsync(b->h_best, b->d_best, sizeof(unsigned long long), cudaMemcpyDeviceToHost, b->stream));
    return 0;
}

/* Enqueues one decode step of a single GPU on the stream. */
static int enqueue_decode(cuda_backend *b, prof_state *p) {
    for (int part = 0; part < decode_parts(b); part++) RC(enqueue_decode_part(b, part, p));
    return enqueue_best_copy(b);
}

int mu_cuda_launches_per_token(const mu_backend *base) {
    const cuda_backend *b = (const cuda_backend *)base;
    return 2 + (7 + (b->tp ? 2 : 0)) * b->m->hp.n_layer; /* + embedding, LM head */
}

uint64_t mu_cuda_weight_bytes(const mu_backend *base) {
    const cuda_backend *b = (const cuda_backend *)base;
    return b->token_bytes;
}

/* Bytes each profile family reads per decoded token at position pos. */
static void prof_bytes(const cuda_backend *b, int pos, double *fb) {
    const mu_hparams *hp = &b->m->hp;
    for (int f = 0; f < PF_COUNT; f++) fb[f] = 0;
    fb[PF_EMBED] = (double)b->m->tok_embd.row_bytes;
    fb[PF_HEAD] = (double)b->output.bytes;
    for (int l = 0; l < hp->n_layer; l++) {
        const cu_layer *D = &b->layers[l];
        fb[PF_QKVG] += (double)(D->wq.bytes + D->wk.bytes + D->wv.bytes + D->wgate.bytes);
        fb[PF_WO] += (double)D->wo.bytes;
        fb[PF_GATEUP] += (double)(D->ffn_gate.bytes + D->ffn_up.bytes);
        fb[PF_DOWN] += (double)D->ffn_down.bytes;
        fb[PF_ATTN] += 2.0 * (double)mu_layer_visible(hp, &b->m->layers[l], pos) * (double)b->KVD * (double)b->kv_elem;
    }
}

/* After a profiled step: event times per family into the accumulators. */
static int prof_collect(cuda_backend *b, int pos) {
    prof_state *ps = b->prof;
    double fb[PF_COUNT];
    prof_bytes(b, pos, fb);
    bool seen[PF_COUNT] = {false};
    for (int i = 0; i + 1 < ps->n; i++) {
        if (ps->fam[i] >= PF_COUNT) continue; /* an end mark: nothing ran from it */
        float ms = 0.f;
        CU_CHECK(cudaEventElapsedTime(&ms, ps->ev[i], ps->ev[i + 1]));
        mu_prof_entry *e = &b->prof_acc[ps->fam[i]];
        e->ns += (uint64_t)(ms * 1e6);
        e->calls++;
        if (!seen[ps->fam[i]]) e->bytes += (uint64_t)fb[ps->fam[i]], seen[ps->fam[i]] = true;
    }
    return 0;
}

/* Runs the decode step: the captured graph when possible, else op by op
 * (always op by op with events while profiling). */
static int run_decode(cuda_backend *b) {
    if (b->prof && b->prof->on) {
        b->prof->n = 0;
        return enqueue_decode(b, b->prof);
    }
    const int r = b->route;
    if (b->use_graph && !b->graph_broken) {
        if (!b->graph_ready[r]) {
            cudaGraph_t graph = NULL;
            int rc = 0;
            CU_CHECK(cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal));
            rc = enqueue_decode(b, NULL);
            cudaError_t e = cudaStreamEndCapture(b->stream, &graph);
            if (!rc && e == cudaSuccess) e = cudaGraphInstantiate(&b->graph[r], graph, 0);
            if (graph) cudaGraphDestroy(graph);
            if (rc || e != cudaSuccess) {
                mu_warn("cuda: capturing the token step as a graph failed (%s); launching op by op",
                        rc ? muser_last_error() : cudaGetErrorString(e));
                (void)cudaGetLastError();
                b->graph_broken = true;
            } else {
                b->graph_ready[r] = true;
            }
        }
        if (b->graph_ready[r]) {
            CU_CHECK(cudaGraphLaunch(b->graph[r], b->stream));
            return 0;
        }
    }
    return enqueue_decode(b, NULL);
}

/* ---- prefill ----------------------------------------------------------------------------- */

/* Y[T][ldy] (columns r0 .. r0+nrows) = A[T][cols] . W[r0 .. r0+nrows)^T */
static int gemm(cuda_backend *b, const mu_cu_weight *w, int64_t r0, int64_t nrows, const void *A, float *Y, int64_t ldy,
                int T) {
    const float one = 1.0f, zero = 0.0f;
    const int64_t cols = w->cols;
    if (b->fast) {
        const void *W;
        if (w->f16) {
            W = w->f16 + r0 * cols;
        } else {
            CU_CHECK(mu_cu_dequant(w, r0, nrows, b->wtmp, true, b->stream));
            W = b->wtmp;
        }
        BLAS_CHECK(cublasGemmEx(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nrows, T, (int)cols, &one, W, CUDA_R_16F,
                                (int)cols, A, CUDA_R_16F, (int)cols, &zero, Y, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
    } else {
        CU_CHECK(mu_cu_dequant(w, r0, nrows, b->wtmp, false, b->stream));
        BLAS_CHECK(cublasGemmEx(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nrows, T, (int)cols, &one, b->wtmp, CUDA_R_32F,
                                (int)cols, A, CUDA_R_32F, (int)cols, &zero, Y, CUDA_R_32F, (int)ldy,
                                CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
    }
    return 0;
}

/* A whole matrix, in row tiles that fit the dequantization buffer. */
static int gemm_all(cuda_backend *b, const mu_cu_weight *w, const void *A, float *Y, int64_t ldy, int T) {
    if (!w->qs) return 0;
    const size_t elem = b->fast ? 2 : 4;
    int64_t tile = (b->fast && w->f16) ? w->rows : (int64_t)(b->wtmp_bytes / ((size_t)w->cols * elem));
    if (tile < 1) return mu_fail(MUSER_EBACKEND, "dequantization buffer too small");
    for (int64_t r0 = 0; r0 < w->rows; r0 += tile) {
        int64_t n = w->rows - r0 < tile ? w->rows - r0 : tile;
        RC(gemm(b, w, r0, n, A, Y + r0, ldy, T));
    }
    return 0;
}

/* logits_all holds at least T rows (grown, never shrunk). */
static int logit_rows_reserve(cuda_backend *b, int T) {
    if (b->logit_rows >= T) return 0;
    if (b->logits_all) cudaFree(b->logits_all);
    b->logits_all = NULL;
    b->logit_rows = 0;
    RC(dalloc((void **)&b->logits_all, (size_t)T * b->V * sizeof(float), "logits"));
    b->logit_rows = T;
    return 0;
}

/* A prefill chunk (T > 1) in the decode step's parts: part 0 = embedding
 * and layer 0 up to Wo; part 2l+1 = the tail after Wo, then layer l's FFN;
 * part 2l+2 = the tail after down, then layer l+1 up to Wo, or the LM head
 * after the last layer. Each gemm into t writes the whole sum on one GPU
 * and a partial sum on a tensor-parallel rank, all-reduced between the
 * parts; every part after the first starts with the residual/norm tail. */
static int enqueue_prefill_part(cuda_backend *b, int part, int T, bool all_logits) {
    const mu_hparams *hp = &b->m->hp;
    const int L = hp->n_layer;
    const cudaStream_t s = b->stream;
    const bool f = b->fast;
    const void *A = f ? (const void *)b->a16 : (const void *)b->ax;
    if (part == 0) {
        CU_CHECK(cudaMemcpyAsync(b->d_rec, b->h_rec, (size_t)b->rec_stride * T, cudaMemcpyHostToDevice, s));
        mu_cu_resnorm rn = resnorm_of(b, NULL, NULL, b->layers[0].attn_norm, f);
        rn.embd_norm = hp->embd_norm;
        CU_CHECK(mu_cu_embed(&b->tok_embd, recs_of(b), T, rn, b->d_best, s));
    } else if (part % 2 == 1) { /* after Wo of layer l: its FFN */
        const int l = (part - 1) / 2;
        const cu_layer *D = &b->layers[l];
        CU_CHECK(mu_cu_resnorm_rows(resnorm_of(b, b->t, D->post_attn_norm, D->ffn_norm, f), T, s));
        RC(gemm_all(b, &D->ffn_gate, A, b->ff, b->F, T));
        RC(gemm_all(b, &D->ffn_up, A, b->fu, b->F, T));
        CU_CHECK(mu_cu_swiglu_rows(b->ff, b->fu, f ? b->f16b : NULL, b->F, T, s));
        return gemm_all(b, &D->ffn_down, f ? (const void *)b->f16b : (const void *)b->ff, b->t, b->E, T);
    } else { /* after down of layer l */
        const int l = (part - 2) / 2;
        const float *next = l + 1 < L ? b->layers[l + 1].attn_norm : b->output_norm;
        CU_CHECK(mu_cu_resnorm_rows(resnorm_of(b, b->t, b->layers[l].post_ffn_norm, next, f), T, s));
    }
    if (part == 2 * L) { /* the LM head */
        if (!all_logits) return run_head_matvec(b, T - 1, false, NULL);
        RC(logit_rows_reserve(b, T));
        RC(gemm_all(b, &b->output, A, b->logits_all, b->V, T));
        CU_CHECK(mu_cu_logits_finish(b->logits_all, (int64_t)T * b->V, hp->logit_scale, hp->softcap, s));
        return 0;
    }
    const int l = part / 2;
    const cu_layer *D = &b->layers[l];
    RC(gemm_all(b, &D->wq, A, b->q, b->Q, T));
    RC(gemm_all(b, &D->wk, A, b->k, b->KVD, T));
    RC(gemm_all(b, &D->wv, A, b->v, b->KVD, T));
    RC(gemm_all(b, &D->wgate, A, b->g, b->Q, T));
    mu_cu_qkv_post qp = qkv_post_of(b, l, T);
    CU_CHECK(mu_cu_qkv_post_launch(&qp, s));
    RC(run_attention(b, l, T, NULL, f, 1));
    return gemm_all(b, &D->wo, f ? (const void *)b->o16 : (const void *)b->o, b->t, b->E, T);
}

static int run_prefill(cuda_backend *b, int T, bool all_logits) {
    for (int part = 0; part < decode_parts(b); part++) RC(enqueue_prefill_part(b, part, T, all_logits));
    return 0;
}

/* ---- batched decode ------------------------------------------------------------------
 * One token for each of T sessions sharing the weights, on b's stream and
 * activations (b: the leader, rows[0]); b->h_rec holds row i's record,
 * filled by row i's session (its KV slot, routes and position). The
 * matrices run once for all rows, attention per row over its session's KV
 * cache. Kept apart from run_prefill on purpose (same op order). */

/* Y = A . W^T for T rows: through the GEMMs, or (mv: the exact lane with
 * MUSER_CUDA_BATCH_MV=1) the B-row matvec over the quantized weights (A
 * f32, [T][cols]). The B-row matvec reads the weights once, but the exact
 * lane's matvec is bound by its f32 activation loads, not by DRAM: measured
 * as slow per row as one-by-one decode on the 30B, so the GEMMs are the
 * default. */
static int mm_all(cuda_backend *b, bool mv, const mu_cu_weight *w, const void *A, float *Y, int64_t ldy, int T) {
    if (!mv) return gemm_all(b, w, A, Y, ldy, T);
    if (!w->qs) return 0;
    CU_CHECK(mu_cu_matvec_rows(w, (const float *)A, w->cols, Y, ldy, T, b->stream));
    return 0;
}

/* Row i of a batched step, layer l: QK-norm + RoPE + KV append into kv's
 * cache, split-K attention over it, merge + gate into row i of o (o16). */
static int batch_attention_row(cuda_backend *b, cuda_backend *kv, int i, int l, bool f16_out) {
    mu_cu_recs recs = recs_of(b);
    recs.base += (int64_t)i * b->rec_stride;
    mu_cu_qkv_post qp = qkv_post_of(b, l, 1);
    qp.q = b->q + (int64_t)i * b->Q;
    qp.k = b->k + (int64_t)i * b->KVD;
    qp.v = b->v + (int64_t)i * b->KVD;
    qp.qn = b->qn + (int64_t)i * b->Q;
    qp.kc = kv->kc[l];
    qp.vc = kv->vc[l];
    qp.recs = recs;
    CU_CHECK(mu_cu_qkv_post_launch(&qp, b->stream));
    return attention_at(b, kv, l, 1, i, recs, b->split_dec, NULL, f16_out, false, NULL, 1);
}

/* The batched step; logits of row i in row i of logits_all. */
static int run_batch(cuda_backend *b, cuda_backend *const *rows, int T) {
    const mu_hparams *hp = &b->m->hp;
    const cudaStream_t s = b->stream;
    const bool f = b->fast;
    const bool mv = !f && b->batch_mv;
    CU_CHECK(cudaMemcpyAsync(b->d_rec, b->h_rec, (size_t)b->rec_stride * T, cudaMemcpyHostToDevice, s));
    mu_cu_resnorm rn = resnorm_of(b, NULL, NULL, b->layers[0].attn_norm, f);
    rn.embd_norm = hp->embd_norm;
    CU_CHECK(mu_cu_embed(&b->tok_embd, recs_of(b), T, rn, b->d_best, s));
    const void *A = f ? (const void *)b->a16 : (const void *)b->ax;
    for (int l = 0; l < hp->n_layer; l++) {
        const cu_layer *D = &b->layers[l];
        RC(mm_all(b, mv, &D->wq, A, b->q, b->Q, T));
        RC(mm_all(b, mv, &D->wk, A, b->k, b->KVD, T));
        RC(mm_all(b, mv, &D->wv, A, b->v, b->KVD, T));
        RC(mm_all(b, mv, &D->wgate, A, b->g, b->Q, T));
        for (int i = 0; i < T; i++) RC(batch_attention_row(b, rows[i], i, l, f));
        RC(mm_all(b, mv, &D->wo, f ? (const void *)b->o16 : (const void *)b->o, b->t, b->E, T));
        CU_CHECK(mu_cu_resnorm_rows(resnorm_of(b, b->t, D->post_attn_norm, D->ffn_norm, f), T, s));
        RC(mm_all(b, mv, &D->ffn_gate, A, b->ff, b->F, T));
        RC(mm_all(b, mv, &D->ffn_up, A, b->fu, b->F, T));
        CU_CHECK(mu_cu_swiglu_rows(b->ff, b->fu, f ? b->f16b : NULL, b->F, T, s));
        RC(mm_all(b, mv, &D->ffn_down, f ? (const void *)b->f16b : (const void *)b->ff, b->t, b->E, T));
        const float *next = l + 1 < hp->n_layer ? b->layers[l + 1].attn_norm : b->output_norm;
        CU_CHECK(mu_cu_resnorm_rows(resnorm_of(b, b->t, D->post_ffn_norm, next, f), T, s));
    }
    RC(logit_rows_reserve(b, T));
    RC(mm_all(b, mv, &b->output, A, b->logits_all, b->V, T));
    CU_CHECK(mu_cu_logits_finish(b->logits_all, (int64_t)T * b->V, hp->logit_scale, hp->softcap, s));
    return 0;
}

/* ---- the backend interface ------------------------------------------------------------------ */

/* rows of b->V logits into dst, dst_stride apart (a rank's slice of the vocabulary) */
static int copy_logits_strided(cuda_backend *b, const float *src, int rows, float *dst, size_t dst_stride) {
    const size_t bytes = (size_t)b->V * sizeof(float);
    for (int r = 0; r < rows; r++) {
        CU_CHECK(cudaMemcpyAsync(b->h_logits, src + (size_t)r * b->V, bytes, cudaMemcpyDeviceToHost, b->stream));
        CU_CHECK(cudaStreamSynchronize(b->stream));
        memcpy(dst + (size_t)r * dst_stride, b->h_logits, bytes);
    }
    return 0;
}

static int copy_logits(cuda_backend *b, const float *src, int rows, float *dst) {
    return copy_logits_strided(b, src, rows, dst, (size_t)b->V);
}

static int sync_checked(cuda_backend *b) {
    cudaError_t e = cudaStreamSynchronize(b->stream);
    if (e != cudaSuccess)
        return mu_fail(MUSER_EBACKEND, "CUDA step failed%s: %s",
                       b->xr.n > 1 ? " (tensor parallel: a rank also stops when the other ranks do not reach "
                                     "the fused all-reduce within 20 s, so the first error may be another GPU's)"
                                   : "",
                       cudaGetErrorString(e));
    return 0;
}

/* Makes the backend's GPU current: every entry point that touches the
 * device starts here (one process can drive sessions on several GPUs:
 * tensor-parallel ranks leave another one current). */
static int use_device(const cuda_backend *b) {
    CU_CHECK(cudaSetDevice(b->device));
    return 0;
}

static int cuda_forward(mu_backend *base, const muser_token *tokens, int T, int pos0, bool all_logits, float *logits) {
    cuda_backend *b = (cuda_backend *)base;
    RC(use_device(b));
    if (T < 1 || T > b->T_max) return mu_fail(MUSER_EINVAL, "chunk of %d tokens (batch %d)", T, b->T_max);
    RC(fill_records(b, tokens, T, pos0, 0.0f, 0));
    if (T == 1) {
        RC(run_decode(b));
        RC(sync_checked(b));
        if (b->prof && b->prof->on) RC(prof_collect(b, pos0));
        return copy_logits(b, b->logits, 1, logits);
    }
    RC(run_prefill(b, T, all_logits));
    RC(sync_checked(b));
    return all_logits ? copy_logits(b, b->logits_all, T, logits) : copy_logits(b, b->logits, 1, logits);
}

int mu_cuda_decode_select(mu_backend *base, muser_token token, int pos, float temperature, uint64_t seed,
                          float *logits, muser_token *next) {
    cuda_backend *b = (cuda_backend *)base;
    RC(use_device(b));
    RC(fill_records(b, &token, 1, pos, temperature, seed));
    RC(run_decode(b));
    RC(sync_checked(b));
    if (b->prof && b->prof->on) RC(prof_collect(b, pos));
    const unsigned long long best = *b->h_best;
    *next = (muser_token)(0xFFFFFFFFu - (uint32_t)(best & 0xFFFFFFFFull));
    if (logits) RC(copy_logits(b, b->logits, 1, logits));
    return 0;
}

/* Batched decode (mu_backend_ops.forward_batch): one token for each of n
 * sessions of the model sharing its weights, on rows[0]'s stream and
 * activations. Each row's session appends its position to its own planes
 * and decides its own routes (its record is copied into the leader's
 * records); the matrices run once for all rows through the prefill GEMMs
 * (fast lane: the f16 weight cache when it fits; exact lane: f32
 * dequantization per matrix), attention per row over the row's own KV
 * cache. Rows that cannot be mixed, or fewer than MUSER_CUDA_BATCH_MIN
 * (default: 2 fast lane, 6 exact lane; 0: never), answer MUSER_EUNSUPPORTED
 * before anything changes: the engine then feeds them one by one through
 * the decode graph. */
static int cuda_forward_batch(mu_backend *const *rows_in, const muser_token *tokens, const int *pos, int n,
                              float *const *logits) {
    cuda_backend *const *rows = (cuda_backend *const *)rows_in;
    cuda_backend *b = rows[0];
    if (b->batch_min <= 0 || n < b->batch_min || n > b->T_max)
        return mu_fail(MUSER_EUNSUPPORTED, "cuda: batch of %d rows not batched", n);
    for (int i = 0; i < n; i++) {
        const cuda_backend *r = rows[i];
        if (r->base.ops != b->base.ops || !r->wsh || r->wsh != b->wsh || r->fast != b->fast ||
            r->kv_f32 != b->kv_f32 || r->use_mma != b->use_mma || r->split_dec != b->split_dec ||
            r->rec_stride != b->rec_stride)
            return mu_fail(MUSER_EUNSUPPORTED, "cuda: rows of different weights or settings are not batched");
    }
    RC(use_device(b));
    for (int i = 0; i < n; i++) {
        cuda_backend *r = rows[i];
        RC(fill_records(r, &tokens[i], 1, pos[i], 0.0f, 0));
        if (r != b) memcpy(b->h_rec + (int64_t)i * b->rec_stride, r->h_rec, (size_t)b->rec_stride);
    }
    RC(run_batch(b, rows, n));
    RC(sync_checked(b));
    for (int i = 0; i < n; i++) RC(copy_logits(b, b->logits_all + (size_t)i * b->V, 1, logits[i]));
    return 0;
}

static int cuda_select(mu_backend *base, muser_token token, int pos, float temperature, uint64_t seed,
                       float *logits, muser_token *next) {
    return mu_cuda_decode_select(base, token, pos, temperature, seed, logits, next);
}

static int cuda_truncate(mu_backend *base, int pos) {
    cuda_backend *b = (cuda_backend *)base;
    return mu_planes_truncate(b->m, b->planes, pos);
}

static void cuda_reset(mu_backend *base) {
    cuda_backend *b = (cuda_backend *)base;
    for (int l = 0; l < b->m->hp.n_layer; l++) mu_kv_plane_reset(&b->planes[l]);
}

static void cuda_free(mu_backend *base) {
    cuda_backend *b = (cuda_backend *)base;
    if (!b) return;
    cudaSetDevice(b->device);
    if (b->stream) cudaStreamSynchronize(b->stream);
    for (int r = 0; r < N_ROUTES; r++)
        if (b->graph[r]) cudaGraphExecDestroy(b->graph[r]);
    if (b->wsh) { /* the weights go with their last session */
        weights_release(b->wsh);
        b->wsh = NULL;
        b->layers = NULL;
        b->wmem = b->f16mem = NULL;
        b->output_norm = NULL;
    }
    if (b->prof) {
        for (int i = 0; i < PROF_MAX_EV; i++)
            if (b->prof->ev[i]) cudaEventDestroy(b->prof->ev[i]);
        free(b->prof);
    }
    if (b->layers) {
        for (int l = 0; l < b->m->hp.n_layer; l++) {
            cu_layer *D = &b->layers[l];
            cudaFree(D->attn_norm);
            cudaFree(D->q_norm);
            cudaFree(D->k_norm);
            cudaFree(D->post_attn_norm);
            cudaFree(D->ffn_norm);
            cudaFree(D->post_ffn_norm);
        }
    }
    if (b->kc)
        for (int l = 0; l < b->m->hp.n_layer; l++) {
            cudaFree(b->kc[l]);
            cudaFree(b->vc[l]);
        }
    void *dev[] = {b->wmem, b->f16mem, b->output_norm, b->d_rec, b->h, b->ax, b->q, b->k, b->v, b->g, b->qn, b->o,
                   b->t, b->ff, b->fu, b->aq, b->oq, b->fq, b->ads, b->ods, b->fds, b->a16, b->o16, b->f16b,
                   b->part_m, b->part_l, b->part_o, b->logits, b->logits_all, b->d_best, b->counters, b->group_count, b->wtmp, b->ax2, b->aq2, b->ads2, b->h2};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) cudaFree(dev[i]);
    if (b->h_rec) cudaFreeHost(b->h_rec);
    if (b->h_best) cudaFreeHost(b->h_best);
    if (b->h_logits) cudaFreeHost(b->h_logits);
    if (b->blas) cublasDestroy(b->blas);
    if (b->stream) cudaStreamDestroy(b->stream);
    free(b->layers);
    free(b->planes);
    free(b->kc);
    free(b->vc);
    free(b);
}

/* ---- ring checkpoints (prompt caching) -----------------------------------------------------
 * The engine's blob format (engine/checkpoint.c); the rings' rows are
 * copied between the device and the blob. */
static int ckpt_copy_rows(void *ctx, int layer, bool to_blob, int64_t slot0, int64_t n, uint8_t *k_blob,
                          uint8_t *v_blob) {
    cuda_backend *b = ctx;
    const size_t row = (size_t)b->KVD * b->kv_elem, off = (size_t)slot0 * row, bytes = (size_t)n * row;
    uint8_t *k = (uint8_t *)b->kc[layer] + off, *v = (uint8_t *)b->vc[layer] + off;
    if (to_blob) {
        CU_CHECK(cudaMemcpy(k_blob, k, bytes, cudaMemcpyDeviceToHost));
        CU_CHECK(cudaMemcpy(v_blob, v, bytes, cudaMemcpyDeviceToHost));
    } else {
        CU_CHECK(cudaMemcpy(k, k_blob, bytes, cudaMemcpyHostToDevice));
        CU_CHECK(cudaMemcpy(v, v_blob, bytes, cudaMemcpyHostToDevice));
    }
    return 0;
}

static int cuda_checkpoint_save(mu_backend *base, void **out, size_t *size) {
    cuda_backend *b = (cuda_backend *)base;
    RC(use_device(b));
    return mu_ckpt_save(b->m, b->planes, (size_t)b->KVD * b->kv_elem, ckpt_copy_rows, b, out, size);
}

static int cuda_checkpoint_restore(mu_backend *base, const void *blob, size_t size, int pos) {
    cuda_backend *b = (cuda_backend *)base;
    RC(use_device(b));
    return mu_ckpt_restore(b->m, b->planes, (size_t)b->KVD * b->kv_elem, ckpt_copy_rows, b, blob, size, pos);
}

static int cuda_fill_kv(mu_backend *base, int depth, uint64_t seed);
static const mu_prof_entry *cuda_profile(mu_backend *base, bool on);
static const char *cuda_profile_name(mu_backend *base, int family);
static int cuda_membw(mu_backend *base, double *gbps, const char **what);
static const char *cuda_describe_op(mu_backend *base);

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
};

/* What the backend cannot run, as a message; NULL when it can. */
static int check_model(const mu_model *m) {
    const mu_hparams *hp = &m->hp;
    if (hp->head_dim != 128)
        return mu_fail(MUSER_EUNSUPPORTED, "the CUDA backend supports head_dim 128 (this model: %d)", hp->head_dim);
    if (hp->n_head_kv < 1 || hp->n_head % hp->n_head_kv || hp->n_head / hp->n_head_kv > 16)
        return mu_fail(MUSER_EUNSUPPORTED, "the CUDA backend supports up to 16 query heads per KV head (%d / %d)",
                       hp->n_head, hp->n_head_kv);
    if (hp->n_embd % 32 || hp->n_ff % 32 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return mu_fail(MUSER_EUNSUPPORTED, "the CUDA backend needs n_embd and n_ff multiples of 32");
    const mu_weight *all[2] = {&m->tok_embd, &m->output};
    for (int i = 0; i < 2; i++) {
        mu_cu_layout lay;
        if (!mu_cu_weight_layout(all[i]->type, all[i]->rows, all[i]->cols, &lay))
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

/* One GPU's backend. tp: a tensor-parallel rank (m is its shard: heads,
 * FFN slice and LM-head rows; vocab0 its first vocabulary row), which
 * decodes only (no prefill weight cache). */
/* Whether the decode step can form each boundary's input in its consumer
 * (mu_cu_norm_in): the fast lane on one GPU (a rank's boundaries are the
 * ranks' meetings, in the producer) with every consumer a K-quant launch:
 * q, k, v, gate, ffn gate/up and the LM head. */
static bool is_kq(uint32_t t) { return t == MU_TYPE_Q4_K || t == MU_TYPE_Q5_K || t == MU_TYPE_Q6_K; }
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

static int rank_new(const mu_model *m, const mu_session_config *cfg, int device, bool tp, int64_t vocab0,
                    cuda_backend **out) {
    *out = NULL;
    RC(check_model(m));
    const mu_hparams *hp = &m->hp;
    cuda_backend *b = calloc(1, sizeof *b);
    if (!b) return mu_fail(MUSER_ENOMEM, "out of memory");
    b->base.ops = &cuda_ops;
    b->base.decode_select = cuda_select;
    b->m = m;
    b->cfg = *cfg;
    b->fast = cfg->lane == MUSER_LANE_FAST;
    b->kv_f32 = cfg->kv_type == MUSER_KV_F32 || env_int("MUSER_KV_F32", 0) != 0;
    b->use_mma = env_int("MUSER_CUDA_MMA", 1) != 0;
    b->use_graph = env_int("MUSER_CUDA_GRAPH", 1) != 0;
    b->use_pdl = env_int("MUSER_CUDA_PDL", 1) != 0;
    mu_cu_set_pdl(b->use_pdl);
    b->mv_occupancy = env_int("MUSER_CUDA_MV_OCCUPANCY", 0);
    mu_cu_set_matvec_occupancy(b->mv_occupancy);
    b->attn_short = attn_short_clamp(env_int("MUSER_CUDA_ATTN_SHORT", MU_CUDA_ATTN_SHORT_DEFAULT));
    b->attn_cluster_rows = attn_cluster_clamp(env_int("MUSER_CUDA_ATTN_CLUSTER", MU_CUDA_ATTN_CLUSTER_DEFAULT));
    b->attn_cluster = attn_cluster_blocks(b->attn_cluster_rows);
    b->attn_wo = env_int("MUSER_CUDA_ATTN_WO", 0) != 0; /* (off: measured slower, see attn_in_wo) */
    b->T_max = cfg->n_batch;
    b->E = hp->n_embd;
    b->Q = (int64_t)hp->n_head * hp->head_dim;
    b->KVD = (int64_t)hp->n_head_kv * hp->head_dim;
    b->F = hp->n_ff;
    b->V = hp->n_vocab;
    b->token_bytes = m->weight_bytes_per_token;
    b->device = device;
    b->tp = tp;
    b->vocab0 = vocab0;
    b->norm_in = norm_in_fits(m, b->fast, tp) && env_int("MUSER_CUDA_NORM_IN", 1) != 0;
    b->batch_parts = env_int("MUSER_CUDA_BATCH_PARTS", 1) != 0;
    /* measured on the 30B (docs/benchmarks-server.md): the fast lane's f16
     * GEMM step beats one-by-one decode from 2 rows; the exact lane's f32
     * GEMM step (~0.57 s) only from ~5 rows of 0.115 s */
    b->batch_min = env_int("MUSER_CUDA_BATCH_MIN", b->fast ? 2 : 6);
    b->batch_mv = env_int("MUSER_CUDA_BATCH_MV", 0) != 0;
    /* single GPU: the model's weights may already be resident (shared) */
    if (!tp) b->wsh = weights_acquire(m, device);
    int rc = 0;
#define TRY(x)               \
    do {                     \
        if (!rc) rc = (x);   \
    } while (0)
    TRY(cudaSetDevice(device) == cudaSuccess ? 0 : mu_fail(MUSER_EBACKEND, "cannot select GPU %d", device));
    struct cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    TRY(cudaGetDeviceProperties(&prop, device) == cudaSuccess ? 0
                                                              : mu_fail(MUSER_EBACKEND, "cannot query GPU %d", device));
    b->smem_optin = (int)prop.sharedMemPerBlockOptin;
    TRY(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking) == cudaSuccess
            ? 0 : mu_fail(MUSER_EBACKEND, "cannot create a CUDA stream"));
    TRY(cublasCreate(&b->blas) == CUBLAS_STATUS_SUCCESS ? 0 : mu_fail(MUSER_EBACKEND, "cannot initialize cuBLAS"));
    if (!rc) cublasSetStream(b->blas, b->stream);

    /* memory check before any large allocation */
    b->kv_elem = b->kv_f32 ? 4 : 2;
    uint64_t kv_bytes = 0, wdev = weight_dev_bytes(&m->tok_embd) + weight_dev_bytes(&m->output);
    for (int l = 0; l < hp->n_layer; l++) {
        const mu_layer *L = &m->layers[l];
        bool ring = L->is_swa && hp->n_swa > 0 && (int64_t)hp->n_swa + cfg->n_batch - 1 < cfg->n_ctx;
        int64_t cap = ring ? (int64_t)hp->n_swa + cfg->n_batch - 1 : cfg->n_ctx;
        kv_bytes += 2ull * (uint64_t)cap * (uint64_t)b->KVD * b->kv_elem;
#define ADD(x) wdev += weight_dev_bytes(&L->x);
        LAYER_MATS(L, ADD)
#undef ADD
    }
    if (b->wsh) wdev = 0; /* already resident */
    const uint64_t T = (uint64_t)b->T_max;
    int64_t widest = b->E > b->Q ? b->E : b->Q;
    if (b->F > widest) widest = b->F;
    b->split_dec = (int)((cfg->n_ctx + 127) / 128);
    if (b->split_dec > SPLIT_CAP_MAX) b->split_dec = SPLIT_CAP_MAX;
    if (b->split_dec < 1) b->split_dec = 1;
    b->split_pre = b->split_dec < SPLIT_CAP_PREFILL ? b->split_dec : SPLIT_CAP_PREFILL;
    int64_t parts = (int64_t)hp->n_head * b->split_dec;
    if ((int64_t)T * hp->n_head * b->split_pre > parts) parts = (int64_t)T * hp->n_head * b->split_pre;
    uint64_t max_elems = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        const mu_layer *L = &m->layers[l];
#define MAXE(x) if (L->x.data && (uint64_t)(L->x.rows * L->x.cols) > max_elems) max_elems = (uint64_t)(L->x.rows * L->x.cols);
        LAYER_MATS(L, MAXE)
#undef MAXE
    }
    b->wtmp_bytes = (size_t)(b->fast ? 2 : 4) * (size_t)max_elems;
    if (b->wtmp_bytes < (64u << 20)) b->wtmp_bytes = 64u << 20;
    (void)widest;
    const uint64_t act_bytes = T * 4 * (uint64_t)(3 * b->E + 4 * b->Q + 2 * b->KVD + 2 * b->F) +
                               T * 2 * (uint64_t)(b->E + b->Q + b->F) + T * (uint64_t)b->E * 2 +
                               (uint64_t)parts * (2 + 128) * 4 + (uint64_t)b->V * 4 + b->wtmp_bytes;
    size_t free_b = 0, total_b = 0;
    if (!rc && cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) rc = mu_fail(MUSER_EBACKEND, "cannot query GPU memory");
    const uint64_t need = wdev + kv_bytes + act_bytes + (256u << 20);
    if (!rc && need > free_b)
        rc = mu_fail(MUSER_EBACKEND,
                     "too little GPU memory: the model needs %.2f GB (weights %.2f, KV %.2f, buffers %.2f), GPU %d (%s) "
                     "has %.2f GB free",
                     need / 1e9, wdev / 1e9, kv_bytes / 1e9, act_bytes / 1e9, device, prop.name, free_b / 1e9);

    b->layers = b->wsh ? b->wsh->layers : calloc((size_t)hp->n_layer, sizeof(cu_layer));
    b->planes = calloc((size_t)hp->n_layer, sizeof(mu_kv_plane));
    b->kc = calloc((size_t)hp->n_layer, sizeof(void *));
    b->vc = calloc((size_t)hp->n_layer, sizeof(void *));
    if (!rc && (!b->layers || !b->planes || !b->kc || !b->vc)) rc = mu_fail(MUSER_ENOMEM, "out of memory");

    /* RoPE bases: one cos/sin table per distinct base */
    for (int l = 0; l < hp->n_layer && !rc; l++) {
        const mu_layer *L = &m->layers[l];
        if (!L->use_rope) continue;
        int i = 0;
        while (i < b->n_bases && b->bases[i] != L->rope_base) i++;
        if (i == b->n_bases) {
            if (b->n_bases == 8) {
                rc = mu_fail(MUSER_EUNSUPPORTED, "more than 8 distinct RoPE bases");
                break;
            }
            b->bases[b->n_bases++] = L->rope_base;
        }
        if (!b->wsh) b->layers[l].base_index = i; /* (shared: set alike by the first session) */
    }

    if (b->wsh) weights_adopt(b);
    else TRY(upload_weights(b));

    /* KV planes: as the CPU (rings of window + chunk - 1 rows, growing planes of n_ctx) */
    for (int l = 0; l < hp->n_layer && !rc; l++) {
        const mu_layer *L = &m->layers[l];
        bool ring = L->is_swa && hp->n_swa > 0 && (int64_t)hp->n_swa + cfg->n_batch - 1 < cfg->n_ctx;
        int64_t cap = ring ? (int64_t)hp->n_swa + cfg->n_batch - 1 : cfg->n_ctx;
        mu_kv_plane_init(&b->planes[l], ring, cap);
        size_t bytes = (size_t)cap * (size_t)b->KVD * b->kv_elem;
        TRY(dalloc(&b->kc[l], bytes, "the KV cache"));
        TRY(dalloc(&b->vc[l], bytes, "the KV cache"));
        if (!rc) {
            cudaMemsetAsync(b->kc[l], 0, bytes, b->stream);
            cudaMemsetAsync(b->vc[l], 0, bytes, b->stream);
        }
    }

    /* step records and activations */
    b->rec_stride = mu_cu_rec_bytes(hp->n_layer, b->n_bases > 0 ? b->n_bases : 1, hp->n_rot);
    if (!rc && cudaHostAlloc((void **)&b->h_rec, (size_t)b->rec_stride * T, cudaHostAllocDefault) != cudaSuccess)
        rc = mu_fail(MUSER_EBACKEND, "cannot allocate pinned host memory");
    if (!rc) memset(b->h_rec, 0, (size_t)b->rec_stride * T);
    TRY(dalloc((void **)&b->d_rec, (size_t)b->rec_stride * T, "step records"));
#define DA(ptr, n, sz) TRY(dalloc((void **)&b->ptr, (size_t)(n) * (sz), "activations"))
    DA(h, T * b->E, 4);
    DA(ax, T * b->E, 4);
    DA(t, (T > 8 ? T : 8) * b->E, 4); /* decode: up to 8 partial sums of the split ffn down */
    const uint64_t Tp = T > MU_CU_BATCH_PARTS_MAX ? T : MU_CU_BATCH_PARTS_MAX; /* decode: q, k, v, gate in parts */
    DA(q, Tp * b->Q, 4);
    DA(g, Tp * b->Q, 4);
    DA(qn, T * b->Q, 4);
    DA(o, T * b->Q, 4);
    DA(k, Tp * b->KVD, 4);
    DA(v, Tp * b->KVD, 4);
    DA(ff, T * b->F, 4);
    DA(fu, T * b->F, 4);
    DA(aq, T * b->E, 1);
    DA(ads, T * b->E / 8, 4);
    DA(ax2, b->E, 4);
    DA(h2, b->E, 4);
    DA(aq2, b->E, 1);
    DA(ads2, b->E / 8, 4);
    DA(oq, b->Q, 1);
    DA(ods, b->Q / 8, 4);
    DA(fq, b->F, 1);
    DA(fds, b->F / 8, 4);
    DA(a16, T * b->E, 2);
    DA(o16, T * b->Q, 2);
    DA(f16b, T * b->F, 2);
    DA(part_m, parts, 4);
    DA(part_l, parts, 4);
    DA(part_o, parts * 128, 4);
    DA(logits, b->V, 4);
    DA(d_best, 1, 8);
    DA(counters, 2 * hp->n_layer, 4);
    DA(group_count, b->F / 16, 4);
#undef DA
    b->logit_rows = 0;
    if (!rc) cudaMemsetAsync(b->counters, 0, sizeof(unsigned) * 2 * hp->n_layer, b->stream);
    if (!rc) cudaMemsetAsync(b->group_count, 0, sizeof(unsigned) * (size_t)(b->F / 16), b->stream);
    if (!rc && (cudaHostAlloc((void **)&b->h_best, 8, cudaHostAllocDefault) != cudaSuccess ||
                cudaHostAlloc((void **)&b->h_logits, (size_t)b->V * 4, cudaHostAllocDefault) != cudaSuccess))
        rc = mu_fail(MUSER_EBACKEND, "cannot allocate pinned host memory");
    if (!rc && b->fast && !b->wsh) rc = build_prefill_cache(b);
    if (!rc && !(b->fast && b->f16bytes)) TRY(dalloc(&b->wtmp, b->wtmp_bytes, "dequantization buffer"));
    if (!rc && b->fast && b->f16bytes) b->wtmp_bytes = 0; /* every matrix has its f16 copy */
    if (!rc) rc = sync_checked(b);
    if (!rc && !tp && !b->wsh) rc = weights_publish(b);
#undef TRY
    if (rc) {
        cuda_free(&b->base);
        return rc;
    }
    char clusters[48] = "no clusters";
    if (b->attn_cluster_rows > 0)
        snprintf(clusters, sizeof clusters, "%d in clusters of %d blocks", b->attn_cluster_rows, b->attn_cluster);
    snprintf(b->desc, sizeof b->desc,
             "%.200s, %.1f GB, cc %d.%d, %d SMs; lane %s, KV %s, attention %s, graph %s, PDL %s, matvec blocks/SM %d, "
             "prefill cache %s, weights %s, one-launch decode attention up to %d rows%s (%s), "
             "decode norms %s, "
             "qkv row-dots %s",
             prop.name, prop.totalGlobalMem / 1e9, prop.major, prop.minor, prop.multiProcessorCount,
             b->fast ? "fast" : "exact", b->kv_f32 ? "f32" : "f16",
             b->use_mma && !b->kv_f32 ? "tensor cores" : "f32", b->use_graph ? "on" : "off", b->use_pdl ? "on" : "off",
             b->mv_occupancy, b->f16bytes ? "on" : "off", tp ? "this rank's" : "shared by the model's sessions",
             b->attn_short, attn_in_wo(b, 0) ? ", formed in Wo's staging" : "", clusters,
             b->norm_in ? "formed by their consumers" : "in the producers' tails",
             b->batch_parts && b->fast ? "in batch parts where fewer rounds" : "whole");
    *out = b;
    return 0;
}

#ifdef MUSER_HAVE_NCCL
static int tp_new(const mu_model *m, const mu_session_config *cfg, mu_backend **out);
#endif

int mu_cuda_backend_new(const mu_model *m, const mu_session_config *cfg, mu_backend **out) {
    *out = NULL;
    RC(mu_cuda_probe());
    if (cfg->gpus >= 1) {
#ifdef MUSER_HAVE_NCCL
        return tp_new(m, cfg, out);
#else
        return mu_fail(MUSER_EUNSUPPORTED, "--gpus %d: this build has no NCCL (nccl.h was not found at build time)",
                       cfg->gpus);
#endif
    }
    cuda_backend *b = NULL;
    RC(rank_new(m, cfg, 0, false, 0, &b));
    *out = &b->base;
    return 0;
}

const char *mu_cuda_describe(const mu_backend *base) { return ((const cuda_backend *)base)->desc; }

void mu_cuda_set_options(mu_backend *base, int use_graph, int use_pdl, int use_mma, int mv_occupancy) {
    cuda_backend *b = (cuda_backend *)base;
    if (use_graph >= 0) b->use_graph = use_graph;
    if (use_pdl >= 0) {
        b->use_pdl = use_pdl;
        mu_cu_set_pdl(use_pdl);
    }
    if (use_mma >= 0) b->use_mma = use_mma;
    if (mv_occupancy >= 0) {
        b->mv_occupancy = mv_occupancy;
        mu_cu_set_matvec_occupancy(mv_occupancy);
    }
    /* a new capture picks up the options */
    for (int r = 0; r < N_ROUTES; r++) {
        if (b->graph[r]) cudaGraphExecDestroy(b->graph[r]);
        b->graph[r] = NULL;
        b->graph_ready[r] = false;
    }
    b->graph_broken = false;
}

void mu_cuda_set_attn_short(mu_backend *base, int rows) {
    cuda_backend *b = (cuda_backend *)base;
    b->attn_short = attn_short_clamp(rows);
    mu_cuda_set_options(base, -1, -1, -1, -1); /* recapture */
}

int mu_cuda_attn_short(const mu_backend *base) { return ((const cuda_backend *)base)->attn_short; }

/* ---- benchmark support ---------------------------------------------------------------------- */

int mu_cuda_set_synthetic_depth(mu_backend *base, int64_t depth, uint64_t seed) {
    cuda_backend *b = (cuda_backend *)base;
    RC(use_device(b));
    const mu_hparams *hp = &b->m->hp;
    for (int l = 0; l < hp->n_layer; l++) {
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
        size_t n = (size_t)p->capacity * (size_t)b->KVD;
        CU_CHECK(mu_cu_fill_random(b->kc[l], (int64_t)n, b->kv_f32, seed * 131 + (uint64_t)l * 2, 1.0f, b->stream));
        CU_CHECK(mu_cu_fill_random(b->vc[l], (int64_t)n, b->kv_f32, seed * 131 + (uint64_t)l * 2 + 1, 1.0f, b->stream));
    }
    return sync_checked(b);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int mu_cuda_copy_bandwidth(size_t bytes, int reps, double *gbps) {
    void *src = NULL, *dst = NULL;
    RC(dalloc(&src, bytes, "the copy benchmark"));
    if (dalloc(&dst, bytes, "the copy benchmark")) {
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

/* ---- muser bench hooks ------------------------------------------------------------------ */

static int cuda_fill_kv(mu_backend *base, int depth, uint64_t seed) {
    return mu_cuda_set_synthetic_depth(base, depth, seed);
}

/* Profiling runs the decode step op by op with an event between op
 * families (no graph: PDL overlap and launch gaps show up in the times). */
static const mu_prof_entry *cuda_profile(mu_backend *base, bool on) {
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

static const char *cuda_profile_name(mu_backend *base, int family) {
    (void)base;
    return family >= 0 && family < PF_COUNT ? pf_names[family] : NULL;
}

static int cuda_membw(mu_backend *base, double *gbps, const char **what) {
    RC(use_device((const cuda_backend *)base));
    *what = "device-to-device copy, bytes read + written (2 GB per copy, median of 20)";
    return mu_cuda_copy_bandwidth((size_t)2 << 30, 20, gbps);
}

static const char *cuda_describe_op(mu_backend *base) { return mu_cuda_describe(base); }

/* ---- tensor parallel over NCCL (--gpus N) ------------------------------------------------
 * One process, one thread, one stream per GPU. Each rank is a cuda_backend
 * over its shard of the model (engine/tp.h: its query heads and the KV
 * heads they read, a slice of the FFN, rows of the LM head), built from
 * views of the file's tensors. The decode step runs part by part on every
 * rank; the partial outputs of Wo and of ffn down are summed over the
 * ranks inside those launches' residual/norm tails (tp_fuse), or, where
 * that is unavailable, by an NCCL all-reduce between the parts followed by
 * a tail launch on each rank; after the LM head one all-reduce (max) of
 * the packed (logit, ~index) keys chooses the token. The whole step is captured as one CUDA graph per GPU with the
 * NCCL calls inside; a failed capture falls back to launching op by op.
 * With N = 1 the same code runs over a communicator of size 1. A chunk of
 * several tokens runs the prefill parts (tensor-core gemms) on every rank
 * with an all-reduce of the chunk's rows between them.
 *
 * NCCL is loaded at run time (dlopen): a build with nccl.h runs on machines
 * without the library, where only --gpus fails, with a clear message. */
#ifdef MUSER_HAVE_NCCL
#include <dlfcn.h>
#include <nccl.h>

#include "engine/tp.h"

/* ncclTeam_t of nccl_device/core.h (NCCL 2.28+), declared here for C */
typedef struct nccl_team {
    int nRanks, rank, stride;
} nccl_team;

typedef struct nccl_api {
    void *lib;
    ncclResult_t (*CommInitAll)(ncclComm_t *, int, const int *);
    ncclResult_t (*CommDestroy)(ncclComm_t);
    ncclResult_t (*AllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*GroupStart)(void);
    ncclResult_t (*GroupEnd)(void);
    const char *(*GetErrorString)(ncclResult_t);
    ncclResult_t (*GetVersion)(int *);
    /* NCCL 2.27+: symmetric windows (NULL when the library lacks them) */
    ncclResult_t (*MemAlloc)(void **, size_t);
    ncclResult_t (*MemFree)(void *);
    ncclResult_t (*WindowRegister)(ncclComm_t, void *, size_t, ncclWindow_t *, int);
    ncclResult_t (*WindowDeregister)(ncclComm_t, ncclWindow_t);
    /* NCCL 2.28+: the load/store-accessible team of a communicator */
    nccl_team (*TeamLsa)(ncclComm_t);
} nccl_api;
static nccl_api g_nccl;

#define NCCL_CHECK(call)                                                                                     \
    do {                                                                                                     \
        ncclResult_t r_ = (call);                                                                            \
        if (r_ != ncclSuccess)                                                                               \
            return mu_fail(MUSER_EBACKEND, "%s:%d: %s: %s", __FILE__, __LINE__, #call, g_nccl.GetErrorString(r_)); \
    } while (0)

static int nccl_load(void) {
    if (g_nccl.lib) return 0;
    const char *names[3] = {getenv("MUSER_NCCL_LIB"), "libnccl.so.2", "libnccl.so"};
    void *lib = NULL;
    for (int i = 0; i < 3 && !lib; i++)
        if (names[i] && *names[i]) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return mu_fail(MUSER_EBACKEND, "--gpus needs NCCL, and libnccl.so.2 could not be loaded (%s); put its folder in "
                                       "LD_LIBRARY_PATH or name the file in MUSER_NCCL_LIB",
                       dlerror());
    nccl_api a;
    memset(&a, 0, sizeof a);
    a.lib = lib;
    *(void **)&a.CommInitAll = dlsym(lib, "ncclCommInitAll");
    *(void **)&a.CommDestroy = dlsym(lib, "ncclCommDestroy");
    *(void **)&a.AllReduce = dlsym(lib, "ncclAllReduce");
    *(void **)&a.GroupStart = dlsym(lib, "ncclGroupStart");
    *(void **)&a.GroupEnd = dlsym(lib, "ncclGroupEnd");
    *(void **)&a.GetErrorString = dlsym(lib, "ncclGetErrorString");
    *(void **)&a.GetVersion = dlsym(lib, "ncclGetVersion");
    *(void **)&a.MemAlloc = dlsym(lib, "ncclMemAlloc");
    *(void **)&a.MemFree = dlsym(lib, "ncclMemFree");
    *(void **)&a.WindowRegister = dlsym(lib, "ncclCommWindowRegister");
    *(void **)&a.WindowDeregister = dlsym(lib, "ncclCommWindowDeregister");
    *(void **)&a.TeamLsa = dlsym(lib, "ncclTeamLsa");
    if (!a.CommInitAll || !a.CommDestroy || !a.AllReduce || !a.GroupStart || !a.GroupEnd || !a.GetErrorString ||
        !a.GetVersion) {
        dlclose(lib);
        return mu_fail(MUSER_EBACKEND, "the NCCL library found lacks the functions Muser calls");
    }
    g_nccl = a;
    return 0;
}

typedef struct tp_backend {
    mu_backend base;
    const mu_model *m;
    int n;
    cuda_backend *r[MU_TP_MAX_RANKS];
    mu_model view[MU_TP_MAX_RANKS];
    ncclComm_t comm[MU_TP_MAX_RANKS];
    /* each rank's partial sums (its t) in a symmetric NCCL window, which
     * selects NCCL's low-latency symmetric all-reduce kernels */
    void *sym_buf[MU_TP_MAX_RANKS];
    ncclWindow_t win[MU_TP_MAX_RANKS];
    bool symmetric;
    /* the layers' all-reduces fused into the RESNORM tails (tp_fuse) */
    bool fused;
    uint32_t *epoch[MU_TP_MAX_RANKS];
    char fuse_note[160];
    cudaGraphExec_t graph[N_ROUTES][MU_TP_MAX_RANKS]; /* per route (the ranks' steps share it) */
    bool use_graph, graph_ready[N_ROUTES], graph_broken, prof_on;
    bool skip_reduce; /* MUSER_TP_SKIP_ALLREDUCE=1: timing lab only, wrong logits */
    char desc[768];
    char membw_what[256];
} tp_backend;

/* Rank r's shard as a model: views of the file's tensors, its shapes. */
static int tp_view(const mu_model *m, const mu_tp_shard *sh, mu_model *v) {
    const mu_hparams *hp = &m->hp;
    const int64_t hd = hp->head_dim;
    *v = *m;
    v->layers = calloc((size_t)hp->n_layer, sizeof(mu_layer));
    if (!v->layers) return mu_fail(MUSER_ENOMEM, "out of memory");
    for (int l = 0; l < hp->n_layer; l++) {
        const mu_layer *L = &m->layers[l];
        mu_layer *V = &v->layers[l];
        *V = *L;
#define ROWS(x, r0, n) if (L->x.data) V->x = mu_weight_rows(&L->x, r0, n);
#define COLS(x, c0, n) if (L->x.data) V->x = mu_weight_cols(&L->x, c0, n);
        ROWS(wq, sh->head0 * hd, sh->n_heads * hd)
        ROWS(wgate, sh->head0 * hd, sh->n_heads * hd)
        ROWS(wk, sh->kv_head0 * hd, sh->n_kv_heads * hd)
        ROWS(wv, sh->kv_head0 * hd, sh->n_kv_heads * hd)
        COLS(wo, sh->head0 * hd, sh->n_heads * hd)
        ROWS(ffn_gate, sh->ff0, sh->n_ff)
        ROWS(ffn_up, sh->ff0, sh->n_ff)
        COLS(ffn_down, sh->ff0, sh->n_ff)
#undef ROWS
#undef COLS
    }
    v->output = mu_weight_rows(&m->output, sh->vocab0, sh->n_vocab);
    v->hp.n_head = sh->n_heads;
    v->hp.n_head_kv = sh->n_kv_heads;
    v->hp.n_ff = (int)sh->n_ff;
    v->hp.n_vocab = (int)sh->n_vocab;
    v->weight_bytes_per_token = sh->weight_bytes;
    return 0;
}

/* The step on every rank, part by part, with the all-reduces between. */
static int tp_enqueue(tp_backend *t) {
    const int parts = decode_parts(t->r[0]);
    for (int part = 0; part < parts; part++) {
        for (int i = 0; i < t->n; i++) {
            cuda_backend *r = t->r[i];
            RC(use_device(r));
            RC(enqueue_decode_part(r, part, t->prof_on ? r->prof : NULL));
            RC(prof_mark(r, t->prof_on ? r->prof : NULL, PF_ALLREDUCE));
        }
        if ((t->skip_reduce || t->fused) && part + 1 < parts) continue; /* (fused: in the tails) */
        NCCL_CHECK(g_nccl.GroupStart());
        for (int i = 0; i < t->n; i++) {
            cuda_backend *r = t->r[i];
            if (part + 1 < parts)
                NCCL_CHECK(g_nccl.AllReduce(r->t, r->t, (size_t)r->E, ncclFloat32, ncclSum, t->comm[i], r->stream));
            else /* the packed (logit, ~index) keys: the largest wins everywhere */
                NCCL_CHECK(g_nccl.AllReduce(r->d_best, r->d_best, 1, ncclUint64, ncclMax, t->comm[i], r->stream));
        }
        NCCL_CHECK(g_nccl.GroupEnd());
    }
    for (int i = 0; i < t->n; i++) {
        RC(use_device(t->r[i]));
        RC(prof_mark(t->r[i], t->prof_on ? t->r[i]->prof : NULL, PF_COUNT));
        RC(enqueue_best_copy(t->r[i]));
    }
    return 0;
}

static int tp_capture(tp_backend *t, int route) {
    cudaGraphExec_t *graph = t->graph[route];
    int rc = 0;
    int begun = 0;
    for (int i = 0; i < t->n && !rc; i++) {
        RC(use_device(t->r[i]));
        const cudaError_t eb = cudaStreamBeginCapture(t->r[i]->stream, cudaStreamCaptureModeRelaxed);
        if (eb != cudaSuccess)
            rc = mu_fail(MUSER_EBACKEND, "cudaStreamBeginCapture (GPU %d): %s", t->r[i]->device, cudaGetErrorString(eb));
        else begun++;
    }
    if (!rc) rc = tp_enqueue(t);
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < begun; i++) {
        cudaGraph_t g = NULL;
        cudaSetDevice(t->r[i]->device);
        cudaError_t ei = cudaStreamEndCapture(t->r[i]->stream, &g);
        if (ei == cudaSuccess && !rc && e == cudaSuccess) ei = cudaGraphInstantiate(&graph[i], g, 0);
        if (ei != cudaSuccess && e == cudaSuccess) e = ei;
        if (g) cudaGraphDestroy(g);
    }
    if (rc || e != cudaSuccess) {
        mu_warn("cuda: capturing the tensor-parallel step as graphs failed (%s); launching op by op",
                rc ? muser_last_error() : cudaGetErrorString(e));
        (void)cudaGetLastError();
        for (int i = 0; i < t->n; i++)
            if (graph[i]) cudaGraphExecDestroy(graph[i]), graph[i] = NULL;
        t->graph_broken = true;
        return 0;
    }
    t->graph_ready[route] = true;
    return 0;
}

/* One token on every rank; the chosen token in rank 0's h_best. */
static int tp_step(tp_backend *t, muser_token token, int pos, float temperature, uint64_t seed) {
    for (int i = 0; i < t->n; i++) {
        RC(use_device(t->r[i]));
        RC(fill_records(t->r[i], &token, 1, pos, temperature, seed));
        if (t->prof_on) t->r[i]->prof->n = 0;
    }
    const int route = t->r[0]->route; /* the ranks see the same spans */
    if (t->use_graph && !t->prof_on && !t->graph_broken && !t->graph_ready[route]) RC(tp_capture(t, route));
    if (t->use_graph && !t->prof_on && t->graph_ready[route]) {
        for (int i = 0; i < t->n; i++) {
            RC(use_device(t->r[i]));
            CU_CHECK(cudaGraphLaunch(t->graph[route][i], t->r[i]->stream));
        }
    } else {
        RC(tp_enqueue(t));
    }
    for (int i = 0; i < t->n; i++) {
        RC(use_device(t->r[i]));
        RC(sync_checked(t->r[i]));
        if (t->prof_on) RC(prof_collect(t->r[i], pos));
    }
    return 0;
}

static int tp_logits(tp_backend *t, float *dst) {
    for (int i = 0; i < t->n; i++) {
        RC(use_device(t->r[i]));
        RC(copy_logits(t->r[i], t->r[i]->logits, 1, dst + t->r[i]->vocab0));
    }
    return 0;
}

static int tp_select(mu_backend *base, muser_token token, int pos, float temperature, uint64_t seed, float *logits,
                     muser_token *next) {
    tp_backend *t = (tp_backend *)base;
    RC(tp_step(t, token, pos, temperature, seed));
    const unsigned long long best = *t->r[0]->h_best;
    *next = (muser_token)(0xFFFFFFFFu - (uint32_t)(best & 0xFFFFFFFFull));
    if (logits) RC(tp_logits(t, logits));
    return 0;
}

/* A chunk of T > 1 tokens: the prefill parts on every rank with an
 * all-reduce of the T rows of partial sums between them. */
static int tp_prefill(tp_backend *t, const muser_token *tokens, int T, int pos0, bool all_logits, float *logits) {
    const size_t V = (size_t)t->m->hp.n_vocab;
    for (int i = 0; i < t->n; i++) {
        RC(use_device(t->r[i]));
        RC(fill_records(t->r[i], tokens, T, pos0, 0.0f, 0));
    }
    const int parts = decode_parts(t->r[0]);
    for (int part = 0; part < parts; part++) {
        for (int i = 0; i < t->n; i++) {
            RC(use_device(t->r[i]));
            RC(enqueue_prefill_part(t->r[i], part, T, all_logits));
        }
        if (part + 1 == parts && all_logits) break; /* each rank holds its slice of every row */
        NCCL_CHECK(g_nccl.GroupStart());
        for (int i = 0; i < t->n; i++) {
            cuda_backend *r = t->r[i];
            if (part + 1 < parts)
                NCCL_CHECK(g_nccl.AllReduce(r->t, r->t, (size_t)T * (size_t)r->E, ncclFloat32, ncclSum, t->comm[i],
                                            r->stream));
            else
                NCCL_CHECK(g_nccl.AllReduce(r->d_best, r->d_best, 1, ncclUint64, ncclMax, t->comm[i], r->stream));
        }
        NCCL_CHECK(g_nccl.GroupEnd());
    }
    for (int i = 0; i < t->n; i++) {
        cuda_backend *r = t->r[i];
        RC(use_device(r));
        RC(sync_checked(r));
        if (all_logits) RC(copy_logits_strided(r, r->logits_all, T, logits + r->vocab0, V));
        else RC(copy_logits(r, r->logits, 1, logits + r->vocab0));
    }
    return 0;
}

static int tp_forward(mu_backend *base, const muser_token *tokens, int T, int pos0, bool all_logits, float *logits) {
    tp_backend *t = (tp_backend *)base;
    if (T < 1 || T > t->r[0]->T_max) return mu_fail(MUSER_EINVAL, "chunk of %d tokens (batch %d)", T, t->r[0]->T_max);
    if (T > 1) return tp_prefill(t, tokens, T, pos0, all_logits, logits);
    RC(tp_step(t, tokens[0], pos0, 0.0f, 0));
    return tp_logits(t, logits);
}

static int tp_truncate(mu_backend *base, int pos) {
    tp_backend *t = (tp_backend *)base;
    for (int i = 0; i < t->n; i++) RC(cuda_truncate(&t->r[i]->base, pos));
    return 0;
}

static void tp_reset(mu_backend *base) {
    tp_backend *t = (tp_backend *)base;
    for (int i = 0; i < t->n; i++) cuda_reset(&t->r[i]->base);
}

static void tp_free(mu_backend *base) {
    tp_backend *t = (tp_backend *)base;
    if (!t) return;
    for (int i = 0; i < t->n; i++) {
        if (!t->r[i]) continue;
        cudaSetDevice(t->r[i]->device);
        for (int r = 0; r < N_ROUTES; r++)
            if (t->graph[r][i]) cudaGraphExecDestroy(t->graph[r][i]);
        if (t->epoch[i]) cudaFree(t->epoch[i]);
        if (t->sym_buf[i]) {
            cudaStreamSynchronize(t->r[i]->stream);
            if (t->win[i]) g_nccl.WindowDeregister(t->comm[i], t->win[i]);
            g_nccl.MemFree(t->sym_buf[i]);
            t->r[i]->t = NULL; /* it was sym_buf */
        }
        if (t->comm[i]) g_nccl.CommDestroy(t->comm[i]);
        cuda_free(&t->r[i]->base);
    }
    for (int i = 0; i < t->n; i++) free(t->view[i].layers);
    free(t);
}

static int tp_fill_kv(mu_backend *base, int depth, uint64_t seed) {
    tp_backend *t = (tp_backend *)base;
    for (int i = 0; i < t->n; i++) {
        RC(use_device(t->r[i]));
        RC(mu_cuda_set_synthetic_depth(&t->r[i]->base, depth, seed + (uint64_t)i));
    }
    return 0;
}

/* Per-family times of rank 0 (the ranks run in lockstep). */
static const mu_prof_entry *tp_profile(mu_backend *base, bool on) {
    tp_backend *t = (tp_backend *)base;
    const mu_prof_entry *e = NULL;
    for (int i = 0; i < t->n; i++) {
        if (use_device(t->r[i])) return NULL;
        const mu_prof_entry *ei = cuda_profile(&t->r[i]->base, on);
        if (!ei) return NULL;
        if (i == 0) e = ei;
    }
    t->prof_on = on;
    return e;
}

/* The ceiling of a split step: every GPU streams its own shard, so the
 * sum of the GPUs' copy rates (GPU 0's, measured, times N: the GPUs of a
 * host are alike). */
static int tp_membw(mu_backend *base, double *gbps, const char **what) {
    tp_backend *t = (tp_backend *)base;
    RC(use_device(t->r[0]));
    RC(cuda_membw(&t->r[0]->base, gbps, what));
    *gbps *= t->n;
    snprintf(t->membw_what, sizeof t->membw_what, "%d x GPU 0's %s", t->n, *what);
    *what = t->membw_what;
    return 0;
}

static const char *tp_describe(mu_backend *base) { return ((tp_backend *)base)->desc; }

static const mu_backend_ops tp_ops = {
    .name = "cuda",
    .forward = tp_forward,
    .truncate = tp_truncate,
    .reset = tp_reset,
    .free = tp_free,
    .fill_kv = tp_fill_kv,
    .profile = tp_profile,
    .profile_name = cuda_profile_name,
    .membw = tp_membw,
    .describe = tp_describe,
};

/* A rank's symmetric window: t (as cudaMalloc'd: T_max or 8 rows), then
 * the second decode buffer t2, then the inbox of the fused all-reduce. */
static size_t tp_window_bytes(const cuda_backend *r, size_t *off_t2, size_t *off_inbox) {
    const int T = r->T_max;
    const size_t t_bytes = ((size_t)(T > 8 ? T : 8) * (size_t)r->E * sizeof(float) + 255) & ~(size_t)255;
    const size_t t2_bytes = ((size_t)r->E * sizeof(float) + 255) & ~(size_t)255;
    if (off_t2) *off_t2 = t_bytes;
    if (off_inbox) *off_inbox = t_bytes + t2_bytes;
    return t_bytes + t2_bytes + MU_CU_XRANK_MAX * sizeof(uint32_t);
}

/* Moves every rank's partial-sum buffer t into a symmetric NCCL window
 * (ncclMemAlloc + ncclCommWindowRegister, NCCL 2.27 or later), so the
 * all-reduces on it run NCCL's symmetric kernels (measured on 2 x H200:
 * 9.0 -> 8.0 us per all-reduce). MUSER_TP_SYMMETRIC=0 keeps plain buffers;
 * so does a library or machine without them (with a notice), and a single
 * rank (nothing to reduce; its first step faulted with an illegal address
 * on H200 with NCCL 2.28.3). */
static int tp_symmetric(tp_backend *t) {
    int ver = 0;
    g_nccl.GetVersion(&ver);
    if (t->n < 2 || env_int("MUSER_TP_SYMMETRIC", 1) == 0 || ver < 22700 || !g_nccl.MemAlloc || !g_nccl.MemFree ||
        !g_nccl.WindowRegister || !g_nccl.WindowDeregister)
        return 0;
    const size_t bytes = tp_window_bytes(t->r[0], NULL, NULL);
    ncclResult_t r = ncclSuccess;
    for (int i = 0; i < t->n && r == ncclSuccess; i++) {
        RC(use_device(t->r[i]));
        r = g_nccl.MemAlloc(&t->sym_buf[i], bytes);
    }
    if (r == ncclSuccess) {
        r = g_nccl.GroupStart();
        for (int i = 0; i < t->n && r == ncclSuccess; i++) {
            RC(use_device(t->r[i]));
            r = g_nccl.WindowRegister(t->comm[i], t->sym_buf[i], bytes, &t->win[i], NCCL_WIN_COLL_SYMMETRIC);
        }
        const ncclResult_t e = g_nccl.GroupEnd();
        if (r == ncclSuccess) r = e;
    }
    if (r != ncclSuccess) {
        mu_warn("cuda: NCCL symmetric windows unavailable (%s); all-reduces use plain buffers", g_nccl.GetErrorString(r));
        for (int i = 0; i < t->n; i++) {
            cudaSetDevice(t->r[i]->device);
            if (t->win[i]) g_nccl.WindowDeregister(t->comm[i], t->win[i]);
            if (t->sym_buf[i]) g_nccl.MemFree(t->sym_buf[i]);
            t->win[i] = NULL;
            t->sym_buf[i] = NULL;
        }
        return 0;
    }
    for (int i = 0; i < t->n; i++) {
        RC(use_device(t->r[i]));
        CU_CHECK(cudaMemset(t->sym_buf[i], 0, bytes));
        cudaFree(t->r[i]->t);
        t->r[i]->t = (float *)t->sym_buf[i];
    }
    t->symmetric = true;
    return 0;
}

/* The layers' all-reduces fused into the RESNORM tails of Wo and down
 * (MUSER_TP_FUSED=0: off): instead of a STORE launch, an NCCL all-reduce
 * and a tail launch per all-reduce, the last block of each rank's launch
 * meets the other ranks (flags in the symmetric windows) and sums every
 * rank's partial output, read through NCCL's LSA mapping of the windows
 * (NCCL 2.28+; every rank in the communicator's LSA team, i.e. GPUs that
 * reach each other's memory, as over NVLink). Otherwise, or when the
 * mapping is unavailable, NCCL's all-reduce runs between the parts. */
static int tp_fuse(tp_backend *t) {
    int ver = 0;
    g_nccl.GetVersion(&ver);
    const char *why = NULL;
    if (env_int("MUSER_TP_FUSED", 1) == 0) why = "MUSER_TP_FUSED=0";
    else if (t->n < 2) why = "one GPU";
    else if (t->skip_reduce) why = "MUSER_TP_SKIP_ALLREDUCE=1";
    else if (!t->symmetric) why = "no symmetric windows";
    else if (ver < 22800 || !g_nccl.TeamLsa) why = "NCCL older than 2.28";
    else if (t->n > MU_CU_XRANK_MAX) why = "too many GPUs";
    for (int i = 0; i < t->n && !why; i++) {
        const nccl_team lsa = g_nccl.TeamLsa(t->comm[i]);
        if (lsa.nRanks != t->n || lsa.rank != i) why = "not every GPU reaches the others' memory (LSA team)";
    }
    size_t off_t2 = 0, off_inbox = 0;
    tp_window_bytes(t->r[0], &off_t2, &off_inbox);
    void *lsa[MU_TP_MAX_RANKS][MU_CU_XRANK_MAX];
    for (int i = 0; i < t->n && !why; i++) {
        RC(use_device(t->r[i]));
        const cudaError_t e = mu_cu_lsa_pointers(t->win[i], 0, t->n, lsa[i], t->r[i]->stream);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            why = e == cudaErrorNotSupported ? "built without nccl_device.h" : "the LSA mapping could not be read";
            break;
        }
        /* rank p's copy at lsa[i][0] + p * stride, as NCCL lays the mapping out */
        const int64_t stride = t->n > 1 ? (const char *)lsa[i][1] - (const char *)lsa[i][0] : 0;
        for (int p = 0; p < t->n && !why; p++)
            if ((const char *)lsa[i][p] != (const char *)lsa[i][0] + (int64_t)p * stride || stride % 256)
                why = "an LSA mapping without a constant stride";
    }
    if (why) {
        snprintf(t->fuse_note, sizeof t->fuse_note, "all-reduces by NCCL (fused tails off: %s)", why);
        return 0;
    }
    for (int i = 0; i < t->n; i++) {
        cuda_backend *r = t->r[i];
        RC(use_device(r));
        CU_CHECK(cudaMalloc((void **)&t->epoch[i], sizeof(uint32_t)));
        CU_CHECK(cudaMemset(t->epoch[i], 0, sizeof(uint32_t)));
        const char *base = (const char *)lsa[i][0];
        const int64_t stride = t->n > 1 ? (const char *)lsa[i][1] - base : 0;
        r->t2 = (float *)((char *)t->sym_buf[i] + off_t2);
        r->lsa_t = (const float *)base;
        r->lsa_t2 = (const float *)(base + off_t2);
        r->xr.n = t->n;
        r->xr.rank = i;
        r->xr.inbox0 = (uint32_t *)(base + off_inbox);
        r->xr.stride = stride / (int64_t)sizeof(uint32_t);
        r->xr.epoch = t->epoch[i];
    }
    t->fused = true;
    snprintf(t->fuse_note, sizeof t->fuse_note, "all-reduces fused into the residual/norm tails (LSA)");
    return 0;
}

static int tp_new(const mu_model *m, const mu_session_config *cfg, mu_backend **out) {
    const int n = cfg->gpus;
    int present = 0;
    CU_CHECK(cudaGetDeviceCount(&present));
    if (n > present)
        return mu_fail(MUSER_EBACKEND, "--gpus %d: only %d GPU%s present", n, present, present == 1 ? " is" : "s are");
    mu_tp_shard shards[MU_TP_MAX_RANKS];
    RC(mu_tp_plan(m, n, shards));
    RC(nccl_load());
    /* NVLink multicast (NVLS) can take GPUs that others share out of
     * service: it stays off in every run unless the caller set it */
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    tp_backend *t = calloc(1, sizeof *t);
    if (!t) return mu_fail(MUSER_ENOMEM, "out of memory");
    t->base.ops = &tp_ops;
    t->base.decode_select = tp_select;
    t->m = m;
    t->use_graph = env_int("MUSER_CUDA_GRAPH", 1) != 0;
    t->skip_reduce = env_int("MUSER_TP_SKIP_ALLREDUCE", 0) != 0;
    if (t->skip_reduce)
        mu_warn("cuda: MUSER_TP_SKIP_ALLREDUCE=1: the layers' all-reduces are left out to time them; the logits are wrong");
    int rc = 0;
    int devs[MU_TP_MAX_RANKS];
    for (int i = 0; i < n; i++) devs[i] = i;
    for (int i = 0; i < n && !rc; i++) {
        rc = tp_view(m, &shards[i], &t->view[i]);
        t->n = i + 1;
        if (!rc) rc = rank_new(&t->view[i], cfg, i, true, shards[i].vocab0, &t->r[i]);
    }
    if (!rc) {
        ncclResult_t r = g_nccl.CommInitAll(t->comm, n, devs);
        if (r != ncclSuccess) rc = mu_fail(MUSER_EBACKEND, "NCCL: ncclCommInitAll over %d GPUs: %s", n, g_nccl.GetErrorString(r));
    }
    if (!rc) rc = tp_symmetric(t);
    if (!rc) rc = tp_fuse(t);
    if (rc) {
        tp_free(&t->base);
        return rc;
    }
    int ver = 0;
    g_nccl.GetVersion(&ver);
    snprintf(t->desc, sizeof t->desc,
             "%d x [%.300s], tensor parallel over NCCL %d, %s, %s (%.1f GB of weights per GPU per token)", n,
             t->r[0]->desc, ver, t->symmetric ? "symmetric windows" : "plain buffers", t->fuse_note,
             (double)shards[0].weight_bytes / 1e9);
    *out = &t->base;
    return 0;
}
#endif /* MUSER_HAVE_NCCL */

#endif /* MUSER_HAVE_CUDA */
