/* dflash.h — a DFlash block-diffusion drafter bound beside its target
 * (docs/dflash.md has the format and the semantics).
 *
 * The drafter reads the target's hidden states at a few layers (the inputs
 * of layers target_layers[k]), fuses them per position through `fc` and an
 * RMS norm into one n_embd row g, and turns each g into K/V rows of its own
 * cache (K = rope(k_norm(Wk g)), V = Wv g, at the position of the token
 * that produced them). A draft is one non-causal pass over the block
 * [last token, mask x (block - 1)] through its decoder layers, then the
 * target's LM head: the argmax at block row i is the draft of position
 * last + i.
 */
#ifndef MU_DFLASH_H
#define MU_DFLASH_H

#include "model/model.h"

#define MU_DRAFT_MAX_TARGET_LAYERS 16

struct muser_drafter {
    gguf_file *file;
    mu_model m;               /* the decoder: layers, output_norm; tok_embd / output are
                                 the target's views unless the file has its own      */
    int n_target_layers;
    int target_layers[MU_DRAFT_MAX_TARGET_LAYERS]; /* target layer-input indices, file order */
    int block_size;           /* trained block: last token + block_size - 1 masks      */
    muser_token mask_token;   /* tokenizer.ggml.mask_token_id                          */
    mu_weight fc;             /* {n_target_layers * n_embd, n_embd}                    */
    float fc_scale;           /* fc.scale, 1 when absent                               */
    float *enc_norm;          /* [n_embd] enc.output_norm                              */
    int32_t *d2t;             /* [m.hp.n_vocab] target id of each draft-head row, or NULL
                                 (the head is the target's full vocabulary)             */
};
typedef struct muser_drafter mu_drafter;

/* Opens path and binds it as a drafter of target: checks the hidden size,
 * the vocabulary, the target layers (each in [0, target's layers)), the
 * block size and the mask token; refuses DSpark heads and DeepSeek-V4
 * backbones by name. */
int mu_drafter_load(const char *path, const mu_model *target, mu_drafter **out);
/* The same over an opened file, which the drafter then owns (closed on failure). */
int mu_drafter_from_gguf(gguf_file *f, const mu_model *target, mu_drafter **out);
void mu_drafter_free(mu_drafter *d);

#endif
