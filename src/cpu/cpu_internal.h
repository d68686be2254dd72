/* cpu_internal.h — state of the CPU backend (shared by its files and tests). */
#ifndef MU_CPU_INTERNAL_H
#define MU_CPU_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/kernels.h"
#include "cpu/pool.h"
#include "engine/engine.h"
#include "util/clock.h"

/* ---- profiling ---------------------------------------------------------
 * Per op family: wall time on the calling thread (regions included),
 * calls and bytes. Off unless a session turns it on; with MUSER_PROFILE=0
 * at build time the timers compile to nothing. */
#ifndef MUSER_PROFILE
#define MUSER_PROFILE 1
#endif

typedef struct cpu_prof {
    bool on;
    mu_prof_entry e[MU_PROF_COUNT];
} cpu_prof;

#if MUSER_PROFILE
#define PROF_BEGIN(b) uint64_t prof_t0_ = (b)->prof.on ? mu_now_ns() : 0
#define PROF_END(b, fam, calls_, bytes_)                                                   \
    do {                                                                                   \
        if ((b)->prof.on) {                                                                \
            mu_prof_entry *pe_ = &(b)->prof.e[(fam)];                                      \
            pe_->ns += mu_now_ns() - prof_t0_;                                        \
            pe_->calls += (calls_);                                                        \
            pe_->bytes += (bytes_);                                                        \
        }                                                                                  \
    } while (0)
#else
#define PROF_BEGIN(b) (void)0
#define PROF_END(b, fam, calls_, bytes_) (void)0
#endif

typedef struct cpu_backend {
    mu_backend base;
    const mu_model *m;
    mu_session_config cfg;
    const mu_cpu_kernels *k;
    mu_pool *pool;
    cpu_prof prof;
    int kv_dim;              /* n_head_kv * head_dim                          */
    size_t kv_row_bytes;     /* one K (or V) row in the cache                 */
    mu_kv_plane *planes;     /* [n_layer]                                     */
    void **kcache, **vcache; /* [n_layer] -> [capacity][kv_dim] F16 or F32   */
    mu_route_decision route; /* decode: the current layer's route            */
    /* activations for one chunk of T <= n_batch tokens (token-major)         */
    void *arena;
    float *x;                /* [T][n_embd] residual stream                   */
    float *a;                /* [T][n_embd] normed input                      */
    float *q, *g, *o;        /* [T][n_head*head_dim]                          */
    float *k_cur, *v_cur;    /* [T][kv_dim]                                   */
    float *t;                /* [T][n_embd] branch output                     */
    float *ff_g, *ff_u;      /* [T][n_ff]                                     */
    float *rope_cs;          /* [T][n_rot] cos/sin pairs                      */
    int64_t *slots;          /* [T] KV slots of the chunk's tokens            */
    int slots_pos0;          /* position of token 0 of the chunk              */
    float *part_m, *part_s;  /* [threads][n_head] split-K partial max and sum */
    float *part_o;           /* [threads][n_head][head_dim] partial values    */
    float *attn_scratch;     /* [threads][attn_scratch_floats] K, V rows, scores, a prefill tile's triples */
    size_t attn_scratch_floats;
    int attn_tile;           /* tests: tokens per prefill attention tile (0: chosen per chunk) */
    uint8_t *xq;             /* fast lane: [T] quantized input rows (kernels.h) */
    uint8_t *xqp;            /* the same rows in the K-quant prefill layout     */
    float *batch_logits;     /* batched decode: [rows][n_vocab], grown on use */
    int batch_logits_rows;
    float *kept_logits;      /* forward_argmax: [rows][n_vocab] of the last chunk, grown on use */
    int kept_cap, kept_rows;
    /* speculative decoding (cpu_spec.c)                                     */
    const int *cap_layers;   /* [n_cap] target layers whose inputs are captured */
    int n_cap;
    float *cap_rows;         /* [T][n_cap][n_embd] the caller's capture rows    */
    mu_tentative tentative;  /* ring rows a verify step may have to put back    */
    float *hidden;           /* a split's side (set_hidden): [T][n_embd] the residual stream
                                entering its first layer, or leaving its last */
    const struct muser_drafter *draft; /* drafter backends: fc and its norm; NULL otherwise */
    bool bidirectional;      /* drafter backends: a chunk's tokens see each other */
} cpu_backend;

/* ---- matmul sets (cpu_matmul.c) -------------------------------------------
 * y_j[t][r] = dot(W_j row r, x[t]) for every job j of a set, all reading
 * the same input: one parallel region over the concatenated rows,
 * scheduled by bytes. */
typedef struct mm_job {
    const mu_weight *w;
    float *y; /* [T][w->rows] */
} mm_job;

void mu_cpu_matmul_set(cpu_backend *b, const mm_job *jobs, int n_jobs, const float *x, int T, int prof_family);

/* ---- attention (cpu_attn.c) ------------------------------------------------
 * Causal, or (b->bidirectional) every query of the chunk also sees the
 * chunk's later tokens: a drafter's noise block. */
int mu_cpu_attention(cpu_backend *b, int layer, int T, int pos0, const float *q, float *o);
size_t mu_cpu_attn_scratch_floats(const mu_hparams *hp);

/* ---- shared steps of the forward pass (cpu_backend.c) ----------------------- */
typedef void (*mu_cpu_token_fn)(cpu_backend *b, int layer, int t);
/* fn for tokens 0..T-1, in one parallel region when the chunk is large. */
void mu_cpu_for_tokens(cpu_backend *b, int layer, int T, mu_cpu_token_fn fn);
/* The K and V rows of one token into a cache slot, in the cache's type. */
void mu_cpu_store_kv(cpu_backend *b, int layer, int64_t slot, const float *k, const float *v);
/* Opens a backend on m; extra_cols widens the quantized-input rows for a
 * matmul wider than the model's own (a drafter's fc). */
int mu_cpu_backend_open(const mu_model *m, const mu_session_config *cfg, int64_t extra_cols, mu_backend **out);

/* ---- speculative decoding (cpu_spec.c) --------------------------------------- */
/* Copies the inputs of the captured layers at layer l for tokens 0..T-1. */
void mu_cpu_capture(cpu_backend *b, int layer, int T);
int mu_cpu_set_capture(mu_backend *b, const int *layers, int n, float *rows);
int mu_cpu_tentative_begin(mu_backend *b, int n);
int mu_cpu_tentative_keep(mu_backend *b, int n_keep);
int mu_cpu_draft_inject(mu_backend *b, const float *features, int n, int pos0);

/* Ring checkpoints (cpu_checkpoint.c); copy_rows is their row mover, which
 * the tentative positions share. */
int mu_cpu_copy_rows(void *ctx, int layer, bool to_blob, int64_t slot0, int64_t n, uint8_t *k_blob, uint8_t *v_blob);
int mu_cpu_checkpoint_save(mu_backend *b, void **blob, size_t *size);
int mu_cpu_checkpoint_restore(mu_backend *b, const void *blob, size_t size, int pos);

#endif
