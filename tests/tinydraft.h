/* tinydraft.h — small random DFlash drafter GGUF files in memory for the
 * tests, beside a tinymodel target, with knobs to break them. */
#ifndef MU_TINYDRAFT_H
#define MU_TINYDRAFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct td_opts {
    int n_embd, n_head, n_head_kv, head_dim, n_ff, n_layer, window, ctx, vocab;
    int n_target_layers;
    int target_layers[8];
    int block_size;
    int mask_token;
    const char *omit_key;    /* full metadata key to leave out                 */
    const char *omit_tensor; /* full tensor name to leave out                  */
    const char *extra_tensor;/* a 1-D tensor to add (e.g. a DSpark head's)     */
    const char *arch;        /* general.architecture (default "dflash")        */
    bool own_head;           /* the file carries token_embd and output itself  */
    int d2t_rows;            /* > 0: a reduced draft vocabulary of this many rows */
    uint64_t seed;
} td_opts;

/* A 2-layer drafter (layer 0 sliding, layer 1 full) over the tinymodel
 * defaults' geometry (n_embd 64, vocab 50), target layers {1, 2, 3},
 * block 6, mask token vocab - 1. */
td_opts td_defaults(void);
/* Returns a malloc'd GGUF image; NULL on failure. */
uint8_t *td_build(const td_opts *o, size_t *size);

#endif
