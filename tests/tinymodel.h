/* tinymodel.h — builds small random muse-glimmer / llama GGUF files in
 * memory for tests, with knobs to omit keys, change shapes or types. */
#ifndef MU_TINYMODEL_H
#define MU_TINYMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tm_opts {
    const char *arch;          /* "muse-glimmer" (default) or "llama"        */
    int n_embd, n_head, n_head_kv, head_dim, n_ff, n_layer, window, ctx, vocab;
    const char *omit_key;      /* a metadata key (without the arch prefix) to leave out */
    int pattern;               /* 0: bool array; >0: scalar period; -1: absent; -2: array of wrong length */
    float softcap;             /* < 0: key absent                            */
    const char *bad_shape;     /* tensor name (without "blk.N.") whose ne[1] is off by one */
    const char *omit_tensor;   /* full tensor name to leave out              */
    uint32_t weight_type;      /* type of 2-D weights (default F32)          */
    bool tied_output;          /* llama: no output.weight                    */
    float rope_base_swa;       /* > 0: write rope.freq_base_swa              */
    const char *tokenizer;     /* NULL: none; "gpt2" (byte-level BPE) or "llama"
                                  (SentencePiece): `vocab` tokens, the chat
                                  format's special tokens among them          */
    const char *pre;           /* gpt2: tokenizer.ggml.pre (NULL: absent)    */
    uint64_t seed;
} tm_opts;

tm_opts tm_defaults(void);
/* Returns a malloc'd GGUF image; NULL on failure. */
uint8_t *tm_build(const tm_opts *o, size_t *size);
/* Writes the image to a temporary file; returns its path (static buffer). */
const char *tm_write_temp(const uint8_t *buf, size_t size, const char *tag);
/* Builds o's model, loads it from a temporary file (removed after) and
 * returns it; NULL when that fails (muser_last_error says why). */
struct muser_model *tm_load(const tm_opts *o, const char *tag);

#endif
