/* cuda_internal.h — the CUDA backend's session state and what its host
 * files share (C; the kernels' side is cu_shared.h, cu_matvec.h, cu_attn.h).
 *
 *   cuda_backend.c  creating a session: its memory plan and buffers, the
 *                   backend interface (forward, select, truncate, free,
 *                   checkpoints), bench hooks
 *   cuda_weights.c  the weights on the GPU: upload and repacking, the
 *                   prefill cache, the registry that shares them between a
 *                   model's sessions
 *   cuda_step.c     the step records and the op arguments every path shares
 *   cuda_decode.c   the one-token step as a graph per attention route
 *   cuda_prefill.c  a chunk of T tokens through GEMMs
 *   cuda_batch.c    one token for each of several sessions
 *   cuda_tp.c       tensor parallel over NCCL, a backend of its own
 *   cuda_tuning.c   the settings table
 *   cuda_blas.c     cuBLAS, loaded on first use
 */
#ifndef MU_CUDA_INTERNAL_H
#define MU_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

#include "cuda/cu_attn.h"
#include "cuda/cu_matvec.h"
#include "cuda/cu_shared.h"
#include "cuda/cuda_blas.h"
#include "cuda/cuda_features.h"
#include "cuda/cuda_plan.h"
#include "cuda/cuda_tuning.h"
#include "engine/engine.h"
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

#define RC(call)             \
    do {                     \
        int rc_ = (call);    \
        if (rc_) return rc_; \
    } while (0)

/* The eight matrices of a layer, for X-macros. */
#define LAYER_MATS(X) X(wq) X(wk) X(wv) X(wgate) X(wo) X(ffn_gate) X(ffn_up) X(ffn_down)

typedef struct cu_layer {
    mu_cu_weight wq, wk, wv, wgate, wo, ffn_gate, ffn_up, ffn_down;
    float *attn_norm, *q_norm, *k_norm, *post_attn_norm, *ffn_norm, *post_ffn_norm; /* f32, [n_embd] or [head_dim] */
    int base_index; /* the layer's RoPE table among the step record's */
} cu_layer;

/* A model's weights on one GPU (cuda_weights.c): shared by the model's
 * single-GPU sessions there, private to a tensor-parallel rank. */
typedef struct cu_weights {
    const mu_model *m;
    int device, refs;
    bool shared;              /* in the registry (one-GPU sessions)         */
    void *wmem, *f16mem;      /* the quantized streams; the f16 prefill copies (or NULL) */
    uint64_t wbytes, f16bytes;
    mu_cu_weight tok_embd, output;
    cu_layer *layers;         /* [n_layer] */
    float *output_norm;       /* [n_embd]  */
    /* a DFlash drafter's weights: fc [n_embd rows][n_target_layers x n_embd
     * cols] and the fused row's norm; tok_embd / output are the target's
     * (borrowed: a reference on the target's weights, no second upload)
     * unless the drafter's file has its own */
    mu_cu_weight fc;
    float *enc_norm;          /* [n_embd] or NULL */
    struct cu_weights *borrowed;
    int fast_rows;            /* the fast B-row matvec takes every matrix: 0 not yet asked, 1 yes, 2 no */
    uint64_t held_bytes;      /* what the GPU memory ledger counts for them (cuda_memory.c) */
    struct cu_work *work;     /* the work buffers its sessions share (cuda_work.c), or NULL */
    struct cu_weights *next;
} cu_weights;

/* Decode attention routes: each has its own graph. */
enum { ROUTE_SPLIT = 0, ROUTE_SHORT = 1, ROUTE_CLUSTER = 2, N_ROUTES = 3 };

/* Batched steps a session keeps captured (cuda_batch.c): the latest row
 * counts it led. */
#define CUDA_BATCH_GRAPHS 4
typedef struct {
    int T;                 /* rows (0: empty)                                     */
    const float *logits;   /* the chunk logits it writes (a larger chunk moves them) */
    cudaGraphExec_t exec;
    uint64_t used;         /* the step that last ran it                           */
} batch_graph;

/* Op families of `muser bench --profile` (cuda_decode.c names them). */
enum { PF_EMBED, PF_QKVG, PF_QKPOST, PF_ATTN, PF_REDUCE, PF_WO, PF_GATEUP, PF_DOWN, PF_HEAD, PF_ALLREDUCE, PF_COUNT };

/* Event marks between op families of one decode step (profiling). */
#define PROF_MAX_EV (4 + 12 * 1024)
typedef struct prof_state {
    bool on;
    cudaEvent_t ev[PROF_MAX_EV];
    int fam[PROF_MAX_EV];
    int n;
} prof_state;

#define SPLIT_CAP_MAX 128   /* split-K runs per (token, KV head) in decode, at most */
#define SPLIT_CAP_PREFILL 8 /* ... in a prefill chunk */

/* One GPU's session (or a tensor-parallel rank). T: rows of a chunk at most
 * (T_max, the session's batch); E = n_embd, Q = n_head x head_dim, KVD =
 * n_head_kv x head_dim, F = n_ff, V = n_vocab; L = n_layer. Activations are
 * f32 unless said. */
/* floats of partial sums for the tensor-core batch's K splits (decode-size
 * batches: 4 splits of q, k, v and the gate of the 30B over 32 rows need 1.1 M) */
#define CUDA_TC_PART (2 << 20)
#define CUDA_TC_COUNT (1 << 18) /* the tensor-core batch's counters (row groups x tile columns) */

/* The work buffers of a session's steps that grow with its chunk (T rows),
 * with the stream and cuBLAS handle they are used on: held once by all the
 * one-GPU sessions of a model with the same chunk, context split and lane
 * (cuda_work.c), which take turns on the one stream. Nothing in them lives
 * from one call to the next. E, Q, KVD, F, V: cuda_backend's. */
typedef struct cu_work {
    int refs;
    int T_max;            /* the key: chunk rows, split-K runs held, dequant tile bytes, lane */
    int64_t parts;
    size_t wtmp_bytes;    /* (wtmp's size)                                         */
    bool fast;
    uint64_t held_bytes;  /* what the GPU memory ledger counts for them */
    int device;
    struct cu_weights *w; /* the weights whose sessions take it (NULL: not offered) */
    cudaStream_t stream;
    cublasHandle_t blas;
    const mu_cublas *cublas;
    float *h;             /* [T][E] the residual stream                           */
    float *ax;            /* [T][E] the normed input of the next matrices         */
    int8_t *aq;           /* [T][E] its int8 groups (fast lane)                   */
    float *ads;           /* [T][E/16][2] their d and d * sum(q)                  */
    float *q, *g;         /* [max(T, 8)][Q] raw query, gate projections (decode: in batch parts) */
    float *k, *v;         /* [max(T, 8)][KVD] raw key, value projections          */
    float *qn;            /* [T][Q] queries after QK-norm + RoPE                   */
    float *o;             /* [T][Q] the gated attention output                     */
    int8_t *bq;           /* [T][max(Q, F)] batched steps on tensor cores: the int8 groups of
                             Wo's and down's inputs                                   */
    float *bds;           /* [T][max(Q, F)/16][2]                                    */
    float *tc_part;       /* [CUDA_TC_PART] the tensor-core batch's pieces of row groups (cu_tc_rows.cuh) */
    unsigned int *tc_count; /* [CUDA_TC_COUNT] their counters: zero between launches */
    void *mmf_x;          /* mu_gpu_mmf_halves(max(E, Q, F), T) f16: the f16 tensor-core batch's packed inputs */
    uint64_t mmf_x_halves; /* their room */
    float *t;             /* [max(T, 8)][E] branch outputs (Wo, down) before the residual add; decode: up to 8
                             partial sums */
    float *ff;            /* [T][F] the gate projection, then silu(gate) x up      */
    float *fu;            /* [T][F] the up projection (prefill, batched decode)     */
    uint16_t *a16, *o16, *f16b; /* [T][E], [T][Q], [T][F] f16 GEMM inputs (fast lane) */
    float *part_m, *part_l; /* [parts] split-K runs' max and sum (parts = max(n_head x split_dec,
                               T x n_head x split_pre)) */
    float *part_o;        /* [parts][128] their unnormalized outputs               */
    float *logits_all;    /* [logit_rows][V] prefill with all logits, batched decode (grown on first use) */
    int64_t logit_rows;
    void *wtmp;           /* dequantized weight tiles for GEMMs without the f16 cache */
} cu_work;

typedef struct cuda_backend {
    mu_backend base;
    const mu_model *m;
    mu_session_config cfg;
    mu_cuda_tuning tune;  /* this session's settings                           */
    mu_cuda_features feat; /* the device's route set (Hopper's features, or portable) */
    mu_gpu_plan plan;     /* its GPU memory, planned before anything was allocated */
    uint64_t held_bytes;  /* the ledger's count for this session (KV, buffers, logits, reserve) */
    uint64_t weights_held; /* ... for the weights it uploads, until they carry it (cu_weights.held_bytes) */
    mu_cu_exec exec;      /* its stream and launch settings, given to every kernel */
    long long pair_counts[2]; /* matvec launches that could pair, and did (exec.pair_counts) */
    int device;
    char desc[1024];
    const mu_cublas *cublas; /* the loaded library (cuda_blas.h) */
    cublasHandle_t blas;
    bool fast, kv_f32;    /* the fast lane (int8 activations); f32 KV            */
    bool tp;              /* a tensor-parallel rank (m is its shard)              */
    bool norm_in;         /* decode: the boundaries formed by their consumers     */
    int T_max, split_dec, split_pre;
    int64_t E, Q, KVD, F, V;
    uint64_t token_bytes; /* weight bytes one decoded token streams              */
    int smem_optin;       /* shared memory a block may opt in to                  */
    /* weights */
    cu_weights *w;
    int n_bases;
    float bases[8];       /* the distinct RoPE bases (a cos/sin table each)       */
    /* KV: per layer a plane of capacity rows of KVD values (f16, or f32 when kv_f32) */
    mu_kv_plane *planes;  /* [L] the host's ring bookkeeping                      */
    void **kc, **vc;      /* [L] -> [capacity][KVD]                               */
    size_t kv_elem;       /* bytes per KV value                                   */
    /* step records: one per row, rec_stride bytes (cu_shared.h) */
    int64_t rec_stride;
    uint8_t *h_rec, *d_rec; /* [T][rec_stride], pinned host and device            */
    void **h_planes, **d_planes; /* [L][2][T] batched steps: row i's K and V planes of layer l
                                    (its session's), pinned host and device    */
    int64_t n_parts;      /* the split-K partials part_m, part_l, part_o hold      */
    /* activations: the chunk-sized ones in wk (shared by the model's sessions
     * of one setting), the one-row ones here */
    cu_work *wk;
    float *h2;            /* [E] decode, norm_in: the residual's other buffer (boundary k reads one, writes the other) */
    float *ax2;           /* [E] decode: the FFN's input, apart from the attention's (rewritten by down's tail
                             while the next layer's kernels launch) */
    int8_t *aq2;          /* [E]                                                  */
    float *ads2;          /* [E/16][2]                                            */
    int8_t *oq;           /* [Q] its int8 groups (decode, fast lane: Wo's input)   */
    float *ods;           /* [Q/16][2]                                             */
    float *t2;            /* [E] down's branch output, tensor parallel with the fused all-reduce */
    float *logits;        /* [V] the decode step's (fixed: the graph holds it)     */
    float *h_logits;      /* [2][V] pinned host halves the logits cross through     */
    cudaEvent_t logits_ready[2]; /* ... each half's copy done                        */
    unsigned long long *d_best, *h_best; /* the device's token choice: packed (key, ~index) */
    void *d_argmax;       /* forward_argmax: [T_max][MU_CU_ARGMAX_SPLITS] u64 slice keys, then [T_max] int32
                             choices (allocated on first use)                        */
    void *d_top;          /* forward_batch_top: [T_max][MU_CU_TOP_MAX] f32 values, then as many int32 ids
                             (allocated on first use)                                */
    void *d_bias;         /* ... the rows' logit bias: [T + 1] offsets, ids, values  */
    size_t d_bias_bytes;  /* its room                                                */
    unsigned int *counters; /* [2 L] RESNORM launches' last-block counters (zero between launches) */
    /* decode attention: spans up to attn_short rows in one launch of a block
     * per head, up to attn_cluster_rows in clusters of attn_cluster blocks;
     * route: what cuda_fill_records chose for the step */
    int attn_short, attn_cluster_rows, attn_cluster;
    int route;
    cudaGraphExec_t graph[N_ROUTES];
    bool graph_ready[N_ROUTES], graph_broken;
    batch_graph batch_graphs[CUDA_BATCH_GRAPHS];
    uint64_t batch_steps;
    int batch_prev_T;     /* the rows of the step this session led last */
    bool batch_graph_broken;
    /* tensor parallel: the fused all-reduce (xr.n >= 2): Wo writes t, down
     * t2 (a rank still reading a peer's t after their meeting cannot see it
     * overwritten before their next one), and the RESNORM tail of each sums
     * every rank's copy, read at lsa_t / lsa_t2 + rank x xr.stride */
    mu_cu_xrank xr;
    const float *lsa_t, *lsa_t2;
    int64_t vocab0;       /* global index of this rank's first LM-head row         */
    /* muser bench --profile: op by op with events, accumulated per family */
    prof_state *prof;
    mu_prof_entry prof_acc[MU_PROF_COUNT];
    /* speculative decoding, target side (cuda_spec.c): the layers whose
     * inputs each chunk row also writes to cap_rows (host, [T][n_cap][E]),
     * and the ring rows a verify block may have to put back */
    const int *cap_layers;
    int n_cap;
    float *cap_rows;
    mu_tentative tentative;
    uint8_t *d_tent;      /* the tentative rows on the device, laid out as tentative.rows */
    size_t d_tent_bytes;
    /* a DFlash drafter's backend (cuda_draft.c): its chunks are non-causal
     * (every row of a block sees the whole block); share: the target's
     * weights while the drafter's upload borrows from them */
    const struct muser_drafter *draft;
    bool bidirectional;
    cu_weights *share;
    void *d_feat;         /* [T][n_target_layers x E] target features on the device: f16 (fast lane) or f32 */
    void *h_feat;         /* [T][n_target_layers x E] their pinned staging, same type */
    /* the first side of a --gpu-layers split (m a layer view without the
     * head, mu_model_heads false): a chunk ends with the residual stream h
     * after its last layer copied to these host rows (set_hidden), not with
     * the head */
    float *hidden;        /* [T][E] host                                           */
} cuda_backend;

/* cuda_work.c: the work buffers, stream and cuBLAS handle of b's steps.
 * Find: a compatible work of b's resident weights (T_max, parts,
 * wtmp_bytes, lane), with a reference taken, or NULL. Create: a new one
 * holding held_bytes of the ledger, with its stream and handle (buffers
 * come with cuda_work_alloc). Offer: from now on b's weights offer it to
 * later sessions. Release: drops b's reference; the last frees it. */
cu_work *cuda_work_find(const cuda_backend *b, int64_t parts, size_t wtmp_bytes);
int cuda_work_create(cuda_backend *b, uint64_t held_bytes);
int cuda_work_alloc(cuda_backend *b, int64_t parts);
/* the dequantized tiles' bytes b's work holds (0: every matrix has its f16 copy) */
size_t cuda_work_tiles(const cuda_backend *b, const mu_gpu_plan *plan);
int cuda_work_alloc_tiles(cuda_backend *b, size_t wtmp_bytes);
void cuda_work_offer(cuda_backend *b);
void cuda_work_release(cuda_backend *b);

/* cuda_backend.c */
int cuda_rank_new(const mu_model *m, const mu_session_config *cfg, int device, bool tp, int64_t vocab0,
                  cuda_backend **out);
void cuda_rank_free(cuda_backend *b);
int cuda_use_device(const cuda_backend *b);
int cuda_sync_checked(cuda_backend *b);
int cuda_copy_logits(cuda_backend *b, const float *src, int rows, float *dst, size_t dst_stride);
/* ids[t] = the greedy choice of logit row t of rows [T][V] (mu_argmax's),
 * chosen on the device: only the T ids cross to the host. Synchronizes. */
int cuda_rows_argmax(cuda_backend *b, const float *rows, int T, muser_token *ids);
/* The k top logits of each of T rows (in place: plus its bias) on the
 * device, into host vals, ids [T][k] (muser_batch_decode_top's). */
int cuda_rows_top(cuda_backend *b, float *rows, int T, const muser_logit_bias *bias, int k, float *vals,
                  muser_token *ids);
/* A split's first side: the residual stream of the chunk's T rows (h) into
 * the host rows set_hidden gave. */
int cuda_copy_hidden(cuda_backend *b, int T);
int cuda_truncate(mu_backend *base, int pos);
/* The checkpoint row mover (mu_ckpt_copy): K and V rows of a layer's
 * physical slots between the device and host buffers. */
int cuda_ckpt_copy_rows(void *ctx, int layer, bool to_blob, int64_t slot0, int64_t n, uint8_t *k_blob,
                        uint8_t *v_blob);
/* b as a one-GPU CUDA session (the target of a drafter), or NULL. */
cuda_backend *cuda_backend_of(mu_backend *b);
/* A DFlash drafter's rank beside a one-GPU target session (cuda_draft.c
 * gives it its interface). */
int cuda_drafter_rank_new(const struct muser_drafter *d, const mu_session_config *cfg, cuda_backend *target,
                          cuda_backend **out);
void cuda_reset(mu_backend *base);
const mu_prof_entry *cuda_profile(mu_backend *base, bool on);
const char *cuda_profile_name(mu_backend *base, int family);
int cuda_membw(mu_backend *base, double *gbps, const char **what);
int cuda_dalloc(void **p, size_t bytes, const char *what);
/* Applies a new tuning to a session (its graphs are captured anew). */
void cuda_apply_tuning(cuda_backend *b, const mu_cuda_tuning *t);

/* cuda_memory.c */
/* The session's GPU memory plan (b: geometry, lane, KV type, resident
 * weights; cfg: context, batch, --gpu-mem), checked against the cap less
 * what Muser's sessions hold and the GPU's free memory: 0 and the plan
 * taken into the ledger, or one error saying what it needs and what
 * would fit. */
int cuda_plan_session(cuda_backend *b, const mu_session_config *cfg, const struct cudaDeviceProp *prop,
                      mu_gpu_plan *plan);
/* The distinct RoPE bases of m's layers, in order of first use, into
 * bases (a cos/sin table each in the step record); -1 past 8. */
int cuda_rope_bases(const mu_model *m, float bases[8]);
/* Gives bytes back to the ledger of GPU device. */
void cuda_ledger_release(int device, uint64_t bytes);

/* cuda_weights.c */
uint64_t cuda_weight_dev_bytes(const mu_weight *w);
/* Takes one more reference on w (a drafter borrowing the target's). */
void cuda_weights_ref(cu_weights *w);
/* Whether w (a matrix of b->m) is one of b->share's (the target's
 * embedding or LM head, which a drafter reads without an upload). */
bool cuda_weight_borrowed(const cuda_backend *b, const mu_weight *w);
/* Whether m's weights are resident on device (shared), without taking a
 * reference; *f16_cache: with their f16 copies. */
bool cuda_weights_resident(const mu_model *m, int device, bool *f16_cache);
/* A reference to m's weights resident on device (shared), or NULL. */
cu_weights *cuda_weights_acquire(const mu_model *m, int device);
/* Uploads b->m's weights into a new b->w (one reference, not shared). */
int cuda_weights_upload(cuda_backend *b);
/* Shares b's new upload with the model's later sessions on its GPU. */
void cuda_weights_publish(cu_weights *w);
/* Drops a reference; the last one frees the device memory. */
void cuda_weights_close(cu_weights *w);
/* The fast lane's f16 copies for prefill (tuning.prefill_cache). */
int cuda_prefill_cache(cuda_backend *b);

/* cuda_step.c */
mu_cu_recs cuda_recs(const cuda_backend *b);
int cuda_fill_records(cuda_backend *b, const muser_token *tokens, int T, int pos0, float temperature, uint64_t seed);
mu_cu_act cuda_act(const float *x, const int8_t *q, const float *ds);
mu_cu_resnorm cuda_resnorm(const cuda_backend *b, const float *branch, const float *w_post, const float *w_next,
                           bool f16);
/* A tail's rows also into the tensor-core batch's packed inputs (when pack). */
void cuda_resnorm_pack(mu_cu_resnorm *rn, const cuda_backend *b, bool pack);
mu_cu_qkv_post cuda_qkv_post(const cuda_backend *b, int l, int T);
mu_cu_attn_decode cuda_attn_decode(const cuda_backend *b, int l, const mu_cu_qkv_post *qp, bool quant_out);
int cuda_attention(cuda_backend *b, const cuda_backend *kv, int l, int T, int64_t row, mu_cu_recs recs, int cap,
                   prof_state *p, bool f16_out, bool quant_out, const mu_cu_qkv_post *fused, int gate_parts, bool pack);
int cuda_attention_rows(cuda_backend *b, int l, int T, int cap, bool f16_out, bool pack, void *const *kc_rows,
                        void *const *vc_rows);
void cuda_mv_init(mu_cu_mv *a, const cuda_backend *b, int epi, mu_cu_act act);
void cuda_mv_seg(mu_cu_mv *a, const mu_cu_weight *w, float *y);
int cuda_head_matvec(cuda_backend *b, int row, bool decode, prof_state *p);
int cuda_prof_mark(cuda_backend *b, prof_state *p, int family);

/* cuda_decode.c: the step in parts (part 0: embedding and layer 0 up to
 * Wo; 2l + 1: layer l's FFN; 2l + 2: layer l + 1 up to Wo; 2L: the LM
 * head), so tensor parallel can reduce between them */
int cuda_decode_parts(const cuda_backend *b);
int cuda_decode_part(cuda_backend *b, int part, prof_state *p);
int cuda_best_copy(cuda_backend *b);
int cuda_decode_run(cuda_backend *b);
int cuda_prof_collect(cuda_backend *b, int pos);

/* cuda_prefill.c */
/* Y[T][ldy] = A[T][cols] . W^T through cuBLAS (f16 A in the fast lane, f32 in the exact) */
int cuda_gemm_all(cuda_backend *b, const mu_cu_weight *w, const void *A, float *Y, int64_t ldy, int T);
/* Y_k = A . W_k^T for the n matrices of one input (a short chunk on the
 * f16 tensor-core batch: the input packed once, or by its producer when
 * packed, a launch per weight type) */
int cuda_gemm_set(cuda_backend *b, const mu_cu_weight *const *ws, float *const *ys, const int64_t *ldy, int n,
                  const void *A, int T, bool packed);
int cuda_prefill_part(cuda_backend *b, int part, int T, bool all_logits);
int cuda_prefill_run(cuda_backend *b, int T, bool all_logits);
int cuda_logit_rows_reserve(cuda_backend *b, int T);

/* cuda_spec.c: the target's side of speculative decoding */
/* Copies the residual stream of the chunk's T rows (h, the input of layer
 * `layer`) into the capture rows when that layer is captured. */
int cuda_capture(cuda_backend *b, int layer, int T);
int cuda_set_capture(mu_backend *base, const int *layers, int n, float *rows);
int cuda_tentative_begin(mu_backend *base, int n);
int cuda_tentative_keep(mu_backend *base, int n_keep);

/* cuda_batch.c */
/* The matrices ws[k..n) of ws[k]'s type and column count not yet done,
 * as r's segments (one launch of a kernel that takes a row space of
 * segments); marks them done. */
void cuda_mvr_take(mu_cu_mvr *r, const mu_cu_weight *const *ws, float *const *ys, const int64_t *ldy, int n, int k,
                   bool *done);
/* What enqueue(b, arg) launches on b's stream, captured as a graph (*out);
 * false where the capture failed (warned: `what` names the step). */
bool cuda_graph_capture(cuda_backend *b, int (*enqueue)(cuda_backend *, void *), void *arg, const char *what,
                        cudaGraphExec_t *out);
int cuda_forward_batch(mu_backend *const *rows, const muser_token *tokens, const int *pos, int n,
                       float *const *logits);
int cuda_forward_batch_greedy(mu_backend *const *rows, const muser_token *tokens, const int *pos, int n,
                              muser_token *next);
int cuda_forward_batch_top(mu_backend *const *rows, const muser_token *tokens, const int *pos, int n,
                           const muser_logit_bias *bias, int k, float *vals, muser_token *ids);
void cuda_batch_graphs_free(cuda_backend *b);

/* cuda_tp.c */
int cuda_tp_new(const mu_model *m, const mu_session_config *cfg, mu_backend **out);

#endif
