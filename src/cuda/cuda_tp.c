/* cuda_tp.c — tensor parallel over NCCL (--gpus N), a backend of its own.
 *
 * One process, one thread, one stream per GPU. Each rank is a cuda_backend
 * over its shard of the model (engine/tp.h: its query heads and the KV
 * heads they read, a slice of the FFN, rows of the LM head), built from
 * views of the file's tensors. The decode step runs part by part on every
 * rank; the partial outputs of Wo and of ffn down are summed over the
 * ranks inside those launches' residual/norm tails (tp_fuse), or, where
 * that is unavailable, by an NCCL all-reduce between the parts followed by
 * a tail launch on each rank; after the LM head one all-reduce (max) of
 * the packed (logit, ~index) keys chooses the token. The whole step is
 * captured as one CUDA graph per GPU with the NCCL calls inside; a failed capture falls back to launching op by op.
 * With N = 1 the same code runs over a communicator of size 1. A chunk of
 * several tokens runs the prefill parts (tensor-core gemms) on every rank
 * with an all-reduce of the chunk's rows between them.
 *
 * NCCL is loaded at run time (dlopen): a build with nccl.h runs on machines
 * without the library, where only --gpus fails, with a clear message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_api.h"
#include "cuda/cuda_internal.h"

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
    bool graph_ready[N_ROUTES], graph_broken, prof_on;
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
    const int parts = cuda_decode_parts(t->r[0]);
    for (int part = 0; part < parts; part++) {
        for (int i = 0; i < t->n; i++) {
            cuda_backend *r = t->r[i];
            RC(cuda_use_device(r));
            RC(cuda_decode_part(r, part, t->prof_on ? r->prof : NULL));
            RC(cuda_prof_mark(r, t->prof_on ? r->prof : NULL, PF_ALLREDUCE));
        }
        if (t->fused && part + 1 < parts) continue; /* (fused: in the tails) */
        NCCL_CHECK(g_nccl.GroupStart());
        for (int i = 0; i < t->n; i++) {
            cuda_backend *r = t->r[i];
            if (part + 1 < parts)
                NCCL_CHECK(g_nccl.AllReduce(r->wk->t, r->wk->t, (size_t)r->E, ncclFloat32, ncclSum, t->comm[i],
                                            r->exec.stream));
            else /* the packed (logit, ~index) keys: the largest wins everywhere */
                NCCL_CHECK(g_nccl.AllReduce(r->d_best, r->d_best, 1, ncclUint64, ncclMax, t->comm[i], r->exec.stream));
        }
        NCCL_CHECK(g_nccl.GroupEnd());
    }
    for (int i = 0; i < t->n; i++) {
        RC(cuda_use_device(t->r[i]));
        RC(cuda_prof_mark(t->r[i], t->prof_on ? t->r[i]->prof : NULL, PF_COUNT));
        RC(cuda_best_copy(t->r[i]));
    }
    return 0;
}

static int tp_capture(tp_backend *t, int route) {
    cudaGraphExec_t *graph = t->graph[route];
    int rc = 0;
    int begun = 0;
    for (int i = 0; i < t->n && !rc; i++) {
        RC(cuda_use_device(t->r[i]));
        const cudaError_t eb = cudaStreamBeginCapture(t->r[i]->exec.stream, cudaStreamCaptureModeRelaxed);
        if (eb != cudaSuccess)
            rc = mu_fail(MUSER_EBACKEND, "cudaStreamBeginCapture (GPU %d): %s", t->r[i]->device, cudaGetErrorString(eb));
        else begun++;
    }
    if (!rc) rc = tp_enqueue(t);
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < begun; i++) {
        cudaGraph_t g = NULL;
        cudaSetDevice(t->r[i]->device);
        cudaError_t ei = cudaStreamEndCapture(t->r[i]->exec.stream, &g);
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
        RC(cuda_use_device(t->r[i]));
        RC(cuda_fill_records(t->r[i], &token, 1, pos, temperature, seed));
        if (t->prof_on) t->r[i]->prof->n = 0;
    }
    const int route = t->r[0]->route; /* the ranks see the same spans */
    const bool graph = t->r[0]->tune.graph && !t->prof_on;
    if (graph && !t->graph_broken && !t->graph_ready[route]) RC(tp_capture(t, route));
    if (graph && t->graph_ready[route]) {
        for (int i = 0; i < t->n; i++) {
            RC(cuda_use_device(t->r[i]));
            CU_CHECK(cudaGraphLaunch(t->graph[route][i], t->r[i]->exec.stream));
        }
    } else {
        RC(tp_enqueue(t));
    }
    for (int i = 0; i < t->n; i++) {
        RC(cuda_use_device(t->r[i]));
        RC(cuda_sync_checked(t->r[i]));
        if (t->prof_on) RC(cuda_prof_collect(t->r[i], pos));
    }
    return 0;
}

static int tp_logits(tp_backend *t, float *dst) {
    for (int i = 0; i < t->n; i++) {
        RC(cuda_use_device(t->r[i]));
        RC(cuda_copy_logits(t->r[i], t->r[i]->logits, 1, dst + t->r[i]->vocab0, (size_t)t->r[i]->V));
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
        RC(cuda_use_device(t->r[i]));
        RC(cuda_fill_records(t->r[i], tokens, T, pos0, 0.0f, 0));
    }
    const int parts = cuda_decode_parts(t->r[0]);
    for (int part = 0; part < parts; part++) {
        for (int i = 0; i < t->n; i++) {
            RC(cuda_use_device(t->r[i]));
            RC(cuda_prefill_part(t->r[i], part, T, all_logits));
        }
        if (part + 1 == parts && all_logits) break; /* each rank holds its slice of every row */
        NCCL_CHECK(g_nccl.GroupStart());
        for (int i = 0; i < t->n; i++) {
            cuda_backend *r = t->r[i];
            if (part + 1 < parts)
                NCCL_CHECK(g_nccl.AllReduce(r->wk->t, r->wk->t, (size_t)T * (size_t)r->E, ncclFloat32, ncclSum,
                                            t->comm[i], r->exec.stream));
            else
                NCCL_CHECK(g_nccl.AllReduce(r->d_best, r->d_best, 1, ncclUint64, ncclMax, t->comm[i], r->exec.stream));
        }
        NCCL_CHECK(g_nccl.GroupEnd());
    }
    for (int i = 0; i < t->n; i++) {
        cuda_backend *r = t->r[i];
        RC(cuda_use_device(r));
        RC(cuda_sync_checked(r));
        if (all_logits) RC(cuda_copy_logits(r, r->wk->logits_all, T, logits + r->vocab0, V));
        else RC(cuda_copy_logits(r, r->logits, 1, logits + r->vocab0, V));
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
            cudaStreamSynchronize(t->r[i]->exec.stream);
            if (t->win[i]) g_nccl.WindowDeregister(t->comm[i], t->win[i]);
            g_nccl.MemFree(t->sym_buf[i]);
            t->r[i]->wk->t = NULL; /* it was sym_buf */
        }
        if (t->comm[i]) g_nccl.CommDestroy(t->comm[i]);
        cuda_rank_free(t->r[i]);
    }
    for (int i = 0; i < t->n; i++) free(t->view[i].layers);
    free(t);
}

static int tp_fill_kv(mu_backend *base, int depth, uint64_t seed) {
    tp_backend *t = (tp_backend *)base;
    for (int i = 0; i < t->n; i++) {
        RC(cuda_use_device(t->r[i]));
        RC(mu_cuda_set_synthetic_depth(&t->r[i]->base, depth, seed + (uint64_t)i));
    }
    return 0;
}

/* Per-family times of rank 0 (the ranks run in lockstep). */
static const mu_prof_entry *tp_profile(mu_backend *base, bool on) {
    tp_backend *t = (tp_backend *)base;
    const mu_prof_entry *e = NULL;
    for (int i = 0; i < t->n; i++) {
        if (cuda_use_device(t->r[i])) return NULL;
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
    RC(cuda_use_device(t->r[0]));
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
 * 9.0 -> 8.0 us per all-reduce). tuning.tp_symmetric = 0 keeps plain buffers;
 * so does a library or machine without them (with a notice), and a single
 * rank (nothing to reduce; its first step faulted with an illegal address
 * on H200 with NCCL 2.28.3). */
static int tp_symmetric(tp_backend *t) {
    int ver = 0;
    g_nccl.GetVersion(&ver);
    if (t->n < 2 || !t->r[0]->tune.tp_symmetric || ver < 22700 || !g_nccl.MemAlloc || !g_nccl.MemFree ||
        !g_nccl.WindowRegister || !g_nccl.WindowDeregister)
        return 0;
    const size_t bytes = tp_window_bytes(t->r[0], NULL, NULL);
    ncclResult_t r = ncclSuccess;
    for (int i = 0; i < t->n && r == ncclSuccess; i++) {
        RC(cuda_use_device(t->r[i]));
        r = g_nccl.MemAlloc(&t->sym_buf[i], bytes);
    }
    if (r == ncclSuccess) {
        r = g_nccl.GroupStart();
        for (int i = 0; i < t->n && r == ncclSuccess; i++) {
            RC(cuda_use_device(t->r[i]));
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
        RC(cuda_use_device(t->r[i]));
        CU_CHECK(cudaMemset(t->sym_buf[i], 0, bytes));
        cudaFree(t->r[i]->wk->t);
        t->r[i]->wk->t = (float *)t->sym_buf[i];
    }
    t->symmetric = true;
    return 0;
}

/* The layers' all-reduces fused into the RESNORM tails of Wo and down
 * (tuning.tp_fused = 0: off): instead of a STORE launch, an NCCL all-reduce
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
    if (!t->r[0]->tune.tp_fused) why = "tp_fused=0";
    else if (t->n < 2) why = "one GPU";
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
        RC(cuda_use_device(t->r[i]));
        const cudaError_t e = mu_cu_lsa_pointers(t->win[i], 0, t->n, lsa[i], t->r[i]->exec.stream);
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
        RC(cuda_use_device(r));
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

int cuda_tp_new(const mu_model *m, const mu_session_config *cfg, mu_backend **out) {
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
    int rc = 0;
    int devs[MU_TP_MAX_RANKS];
    for (int i = 0; i < n; i++) devs[i] = i;
    for (int i = 0; i < n && !rc; i++) {
        rc = tp_view(m, &shards[i], &t->view[i]);
        t->n = i + 1;
        if (!rc) rc = cuda_rank_new(&t->view[i], cfg, i, true, shards[i].vocab0, &t->r[i]);
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
#else
int cuda_tp_new(const mu_model *m, const mu_session_config *cfg, mu_backend **out) {
    (void)m;
    *out = NULL;
    return mu_fail(MUSER_EUNSUPPORTED, "--gpus %d: this build has no NCCL (nccl.h was not found at build time)",
                   cfg->gpus);
}
#endif /* MUSER_HAVE_NCCL */
