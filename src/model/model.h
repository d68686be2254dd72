/* model.h — architectures: hyperparameters from GGUF metadata (with
 * llama.cpp's defaults), tensor binding with shape checks, and the
 * bytes-per-token accounting.
 *
 * Shapes use ggml order: a 2-D weight {cols, rows} has `cols` = input
 * length (contiguous, quantized along it) and `rows` = outputs;
 * y[r] = dot(row r, x).
 */
#ifndef MU_MODEL_H
#define MU_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "muser.h"

typedef enum mu_arch {
    MU_ARCH_MUSE_GLIMMER = 0,
    MU_ARCH_LLAMA = 1,
    MU_ARCH_DFLASH = 2, /* a DFlash drafter (model/dflash.h): bound only beside its target */
} mu_arch;

/* RoPE pairing: NORM rotates (2i, 2i+1); NEOX rotates (i, i + n_rot/2). */
typedef enum mu_rope_type { MU_ROPE_NORM = 0, MU_ROPE_NEOX = 2 } mu_rope_type;

/* A weight matrix: a view into the mapped file. */
typedef struct mu_weight {
    const void *data;   /* rows * row_bytes bytes                         */
    uint32_t type;      /* enum mu_type                                   */
    int64_t cols;       /* ne[0]: input length                            */
    int64_t rows;       /* ne[1]: output length                           */
    uint64_t row_bytes;
    const char *name;   /* the tensor's name in the file                  */
} mu_weight;

typedef struct mu_layer {
    bool is_swa;             /* sliding-window layer                      */
    bool use_rope;           /* muse-glimmer: SWA layers only (NoPE full) */
    float rope_base;         /* theta base for this layer                 */
    /* norms, dequantized to f32 at load                                  */
    float *attn_norm;        /* [n_embd]                                  */
    float *q_norm, *k_norm;  /* [head_dim]; NULL when the arch has none   */
    float *post_attn_norm;   /* [n_embd]; NULL when none                  */
    float *ffn_norm;         /* [n_embd]                                  */
    float *post_ffn_norm;    /* [n_embd]; NULL when none                  */
    /* projections                                                        */
    mu_weight wq;            /* {n_embd, n_head*head_dim}                 */
    mu_weight wk, wv;        /* {n_embd, n_head_kv*head_dim}              */
    mu_weight wgate;         /* {n_embd, n_head*head_dim}; data NULL if none */
    mu_weight wo;            /* {n_head*head_dim, n_embd}                 */
    mu_weight ffn_gate, ffn_up; /* {n_embd, n_ff}                         */
    mu_weight ffn_down;      /* {n_ff, n_embd}                            */
} mu_layer;

typedef struct mu_hparams {
    mu_arch arch;
    int n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    int n_ctx_train;
    int n_swa;               /* window (keys visible incl. the current one); 0: none */
    int n_rot;               /* rotated dims per head                      */
    mu_rope_type rope_type;
    float rope_freq_scale;   /* 1 / linear scaling factor                  */
    float rms_eps;           /* pre-norms, QK-norm, embedding, final norm  */
    float post_norm_eps;     /* muse-glimmer post-norms: 1e-8 (hard-coded) */
    bool embd_norm;          /* weightless RMS norm of the embedding       */
    bool attn_gate;          /* sigmoid output gate before Wo              */
    bool qk_norm, post_norms;
    float logit_scale;       /* 1 when none                                */
    float softcap;           /* 0 when off                                 */
    float attn_scale;        /* 1/sqrt(head_dim)                           */
} mu_hparams;

struct mu_vocab;

struct muser_model {
    gguf_file *file;
    mu_hparams hp;
    char arch_name[32];
    char name[128];
    mu_weight tok_embd;      /* {n_embd, n_vocab}                          */
    float *output_norm;      /* [n_embd]                                   */
    mu_weight output;        /* {n_embd, n_vocab}                          */
    float *rope_freq_factors;/* [n_rot/2] or NULL (llama3-style rope_freqs) */
    mu_layer *layers;
    struct mu_vocab *vocab;  /* NULL for files without a tokenizer         */
    uint64_t weight_bytes_per_token;
    /* a layer view (mu_model_layer_view): layers [layer0, layer0 + n_layer)
     * of `whole`, sharing its weights; whole is NULL for a bound model */
    const struct muser_model *whole;
    int layer0;
    struct muser_model *views; /* the views made of this model, freed with it */
    struct muser_model *next_view;
};
typedef struct muser_model mu_model;

/* Parses hparams and binds tensors. Does not load the vocabulary. Refuses
 * a DFlash drafter (general.architecture = dflash), which needs its target. */
int mu_model_bind(gguf_file *file, mu_model *m);
/* Binds a DFlash drafter's decoder (model/dflash.c): hyperparameters from
 * the dflash.* keys (NEOX RoPE on every layer, optional sliding window with
 * a per-layer bool pattern, weighted QK-norms, no gate or post-norms), the
 * layers, output_norm, and token_embd / output when the file has its own
 * (else their data stays NULL for the caller to share the target's).
 * n_vocab_target sizes token_embd; n_vocab_head sizes output. */
int mu_model_bind_drafter(gguf_file *file, int n_vocab_target, int n_vocab_head, mu_model *m);
/* Shape-checked views for the loaders (optional: absent leaves w->data NULL). */
int mu_model_bind_weight(const gguf_file *f, const char *name, int64_t cols, int64_t rows, bool optional,
                         mu_weight *w);
/* A 1-D tensor dequantized into a malloc'd f32 array (finite values only). */
int mu_model_bind_norm(const gguf_file *f, const char *name, int64_t n, bool optional, float **out);
void mu_model_unbind(mu_model *m);

/* A view of layers [l0, l1) of m (0 <= l0 < l1 <= n_layer), for a split
 * of the layers between two backends (backends_split.c): the same weights
 * and settings, hp.n_layer = l1 - l0; the embedding only when l0 = 0, the
 * final norm and the head only when l1 = n_layer (else their data NULL).
 * m itself for [0, n_layer). Made once and kept by m (freed by
 * mu_model_unbind), so a view's address names it: the CUDA backend shares
 * one upload among the sessions of a view as of a model. NULL (with the
 * error) for a bad range or out of memory. */
const mu_model *mu_model_layer_view(const mu_model *m, int l0, int l1);
/* Whether the chunks of a backend on m start from the embedding, and end
 * with the final norm and the head (a bound model: both; a layer view:
 * the first view of a split the embedding, the last the head). */
static inline bool mu_model_embeds(const mu_model *m) { return !m->whole || m->layer0 == 0; }
static inline bool mu_model_heads(const mu_model *m) {
    return !m->whole || m->layer0 + m->hp.n_layer == m->whole->hp.n_layer;
}

/* Bytes of weights streamed to decode one token: every projection, the
 * output matrix, the norms, and one embedding row. */
uint64_t mu_model_weight_bytes_per_token(const mu_model *m);
/* KV bytes read by one decoded token at position `pos` (0-based), for a
 * cache element size of kv_elem_bytes (2 for F16, 4 for F32). */
uint64_t mu_model_kv_bytes_per_token(const mu_model *m, int64_t pos, int kv_elem_bytes);

/* The KV depths reports show (bench's default, inspect's table): those of
 * 0, 512, 2K, 8K, 32K, 128K inside the model's context, then its last
 * position (context - 1) up to a context of 128K. Returns the count. */
#define MU_MODEL_DEPTHS_MAX 7
int mu_model_report_depths(const mu_model *m, int64_t out[MU_MODEL_DEPTHS_MAX]);

/* Rows of the K (and V) plane of a layer that a token at pos can see. */
static inline int64_t mu_layer_visible(const mu_hparams *hp, const mu_layer *l, int64_t pos) {
    int64_t n = pos + 1;
    return (l->is_swa && hp->n_swa > 0 && n > hp->n_swa) ? hp->n_swa : n;
}

#endif
