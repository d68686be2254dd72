/* mix.h — quantization mixes: which type each tensor gets. One place for
 * the rules `muser synth` and `muser quantize` share. */
#ifndef MU_MIX_H
#define MU_MIX_H

#include <stdint.h>

typedef enum mu_mix {
    MU_MIX_F32,
    MU_MIX_F16,
    MU_MIX_BF16,
    MU_MIX_Q8_0,
    MU_MIX_Q4_0,
    MU_MIX_Q4_K,     /* Q4_K everywhere ("Q4_K_S"-like, without the extra bits) */
    MU_MIX_Q5_K,
    MU_MIX_Q6_K,
    MU_MIX_Q4_K_M,   /* llama.cpp's Q4_K_M rule                              */
    MU_MIX_Q5_K_M,   /* llama.cpp's Q5_K_M rule                              */
    MU_MIX_META_17GB,/* Meta's official 17 GB file: Q4_K_M with a Q5_K output */
    /* one type everywhere (the output too) */
    MU_MIX_Q4_1,
    MU_MIX_Q5_0,
    MU_MIX_Q5_1,
    MU_MIX_Q2_K,
    MU_MIX_Q3_K,     /* "Q3_K_S"-like */
    MU_MIX_IQ4_NL,
    MU_MIX_IQ4_XS,
    MU_MIX_Q3_K_M,   /* llama.cpp's Q3_K_M rule                              */
} mu_mix;

/* Parses "q4_k_m", "meta-17gb", ... ; -1 if unknown. */
int mu_mix_from_name(const char *name);
const char *mu_mix_name(mu_mix mix);
/* general.file_type llama.cpp writes for the mix. */
uint32_t mu_mix_file_type(mu_mix mix);

/* llama.cpp's "use more bits" layer rule for attn_v / ffn_down. */
int mu_mix_more_bits(int layer, int n_layer);

/* Type of a tensor (by GGUF name) under a mix. 1-D tensors (norms) stay
 * F32. Row lengths that are not a multiple of the chosen block fall back to
 * Q8_0 (multiple of 32) or F16 (F32 in the f32 mix); *wanted (may be NULL)
 * receives the type the rule chose, so callers can say what fell back. */
uint32_t mu_mix_tensor_type(mu_mix mix, const char *name, int n_dims, int64_t row_len, int n_layer,
                            uint32_t *wanted);

#endif
