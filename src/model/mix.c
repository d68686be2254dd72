#include "model/mix.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "quant/quant.h"

static const struct {
    const char *name;
    uint32_t file_type;
} mixes[] = {
    [MU_MIX_F32] = {"f32", 0},        [MU_MIX_F16] = {"f16", 1},       [MU_MIX_BF16] = {"bf16", 32},
    [MU_MIX_Q8_0] = {"q8_0", 7},      [MU_MIX_Q4_0] = {"q4_0", 2},     [MU_MIX_Q4_K] = {"q4_k", 14},
    [MU_MIX_Q5_K] = {"q5_k", 16},     [MU_MIX_Q6_K] = {"q6_k", 18},    [MU_MIX_Q4_K_M] = {"q4_k_m", 15},
    [MU_MIX_Q5_K_M] = {"q5_k_m", 17}, [MU_MIX_META_17GB] = {"meta-17gb", 15},
    [MU_MIX_Q4_1] = {"q4_1", 3},      [MU_MIX_Q5_0] = {"q5_0", 8},     [MU_MIX_Q5_1] = {"q5_1", 9},
    [MU_MIX_Q2_K] = {"q2_k", 10},     [MU_MIX_Q3_K] = {"q3_k", 11},    [MU_MIX_IQ4_NL] = {"iq4_nl", 25},
    [MU_MIX_IQ4_XS] = {"iq4_xs", 30}, [MU_MIX_Q3_K_M] = {"q3_k_m", 12},
};

int mu_mix_from_name(const char *name) {
    for (size_t i = 0; i < sizeof mixes / sizeof mixes[0]; i++)
        if (!strcasecmp(name, mixes[i].name)) return (int)i;
    return -1;
}

const char *mu_mix_name(mu_mix mix) { return mixes[mix].name; }
uint32_t mu_mix_file_type(mu_mix mix) { return mixes[mix].file_type; }

int mu_mix_more_bits(int layer, int n_layer) {
    return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

static uint32_t base_type(mu_mix mix) {
    switch (mix) {
    case MU_MIX_F32: return MU_TYPE_F32;
    case MU_MIX_F16: return MU_TYPE_F16;
    case MU_MIX_BF16: return MU_TYPE_BF16;
    case MU_MIX_Q8_0: return MU_TYPE_Q8_0;
    case MU_MIX_Q4_0: return MU_TYPE_Q4_0;
    case MU_MIX_Q5_K: case MU_MIX_Q5_K_M: return MU_TYPE_Q5_K;
    case MU_MIX_Q6_K: return MU_TYPE_Q6_K;
    case MU_MIX_Q4_1: return MU_TYPE_Q4_1;
    case MU_MIX_Q5_0: return MU_TYPE_Q5_0;
    case MU_MIX_Q5_1: return MU_TYPE_Q5_1;
    case MU_MIX_Q2_K: return MU_TYPE_Q2_K;
    case MU_MIX_Q3_K: case MU_MIX_Q3_K_M: return MU_TYPE_Q3_K;
    case MU_MIX_IQ4_NL: return MU_TYPE_IQ4_NL;
    case MU_MIX_IQ4_XS: return MU_TYPE_IQ4_XS;
    default: return MU_TYPE_Q4_K;
    }
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

uint32_t mu_mix_tensor_type(mu_mix mix, const char *name, int n_dims, int64_t row_len, int n_layer,
                            uint32_t *wanted) {
    if (wanted) *wanted = MU_TYPE_F32;
    if (n_dims < 2) return MU_TYPE_F32;
    uint32_t t = base_type(mix);
    int layer = -1;
    if (sscanf(name, "blk.%d.", &layer) != 1) layer = -1;
    const int k_mix = mix == MU_MIX_Q4_K_M || mix == MU_MIX_Q5_K_M || mix == MU_MIX_META_17GB;
    if (!strcmp(name, "output.weight")) {
        if (mix == MU_MIX_META_17GB) t = MU_TYPE_Q5_K;
        else if (k_mix || mix == MU_MIX_Q4_K || mix == MU_MIX_Q5_K) t = MU_TYPE_Q6_K;
    } else if (k_mix && layer >= 0 && (ends_with(name, ".attn_v.weight") || ends_with(name, ".ffn_down.weight"))) {
        if (mu_mix_more_bits(layer, n_layer)) t = MU_TYPE_Q6_K;
    }
    if (mix == MU_MIX_Q3_K_M) { /* llama.cpp's rule for a dense model */
        if (!strcmp(name, "output.weight")) t = MU_TYPE_Q6_K;
        else if (layer >= 0 && ends_with(name, ".attn_v.weight")) t = layer < 2 ? MU_TYPE_Q5_K : MU_TYPE_Q4_K;
        else if (layer >= 0 && ends_with(name, ".ffn_down.weight")) t = layer < n_layer / 16 ? MU_TYPE_Q5_K : MU_TYPE_Q4_K;
        else if (layer >= 0 && ends_with(name, ".attn_output.weight")) t = MU_TYPE_Q4_K;
    }
    if (wanted) *wanted = t;
    const mu_type_traits *tr = mu_type_get(t);
    if (row_len % tr->block_elems) t = row_len % 32 == 0 ? MU_TYPE_Q8_0 : MU_TYPE_F16;
    if (t == MU_TYPE_F16 && (mix == MU_MIX_F32)) t = MU_TYPE_F32;
    return t;
}
