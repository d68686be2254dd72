/* quant.c — the traits table of every ggml type id, names, row sizes, the
 * half-precision conversions and the row dispatchers.
 *
 * Block sizes are ggml's (ggml-common.h); a GGUF reader validates tensor
 * byte counts against them, so every defined id is here even when Muser
 * cannot compute with it. Ids ggml removed (4, 5, 31-33, 36-38) have no
 * entry: their block_elems is 0 and mu_type_get returns NULL.
 */
#include "quant/quant_impl.h"

#include <ctype.h>

#include "util/error.h"

/* every field of a type's traits, so no initializer leaves one implicit */
#define COMPUTE(fmt) mu_dequant_row_##fmt, mu_quant_row_##fmt, NULL, false
#define SIZE_ONLY NULL, NULL, NULL, false
/* with the integer view (quant.h); offset: whether it has offsets */
#define COMPUTE_INTS(fmt, offset) mu_dequant_row_##fmt, mu_quant_row_##fmt, mu_int_block_##fmt, offset

static const mu_type_traits type_traits[MU_TYPE_COUNT] = {
    /*               name        elems  bytes                                   */
    [MU_TYPE_F32] = {"F32", 1, 4, COMPUTE(f32)},
    [MU_TYPE_F16] = {"F16", 1, 2, COMPUTE(f16)},
    [MU_TYPE_Q4_0] = {"Q4_0", 32, 18, COMPUTE_INTS(q4_0, false)},    /* d, qs[16]                  */
    [MU_TYPE_Q4_1] = {"Q4_1", 32, 20, COMPUTE_INTS(q4_1, true)},    /* d, m, qs[16]               */
    [MU_TYPE_Q5_0] = {"Q5_0", 32, 22, COMPUTE_INTS(q5_0, false)},    /* d, qh[4], qs[16]           */
    [MU_TYPE_Q5_1] = {"Q5_1", 32, 24, COMPUTE_INTS(q5_1, true)},    /* d, m, qh[4], qs[16]        */
    [MU_TYPE_Q8_0] = {"Q8_0", 32, 34, COMPUTE_INTS(q8_0, false)},    /* d, qs[32]                  */
    [MU_TYPE_Q8_1] = {"Q8_1", 32, 36, COMPUTE(q8_1)},    /* d, s, qs[32]               */
    [MU_TYPE_Q2_K] = {"Q2_K", 256, 84, COMPUTE_INTS(q2_K, true)},   /* scales[16], qs[64], d, dmin */
    [MU_TYPE_Q3_K] = {"Q3_K", 256, 110, COMPUTE_INTS(q3_K, false)},  /* hmask[32], qs[64], scales[12], d */
    [MU_TYPE_Q4_K] = {"Q4_K", 256, 144, COMPUTE(q4_K)},
    [MU_TYPE_Q5_K] = {"Q5_K", 256, 176, COMPUTE(q5_K)},
    [MU_TYPE_Q6_K] = {"Q6_K", 256, 210, COMPUTE(q6_K)},
    [MU_TYPE_Q8_K] = {"Q8_K", 256, 292, COMPUTE(q8_K)},
    [MU_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66, SIZE_ONLY}, /* d, qs[32] u16              */
    [MU_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74, SIZE_ONLY},   /* d, qs[32] u16, scales[8]   */
    [MU_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98, SIZE_ONLY}, /* d, qs[96]                  */
    [MU_TYPE_IQ1_S] = {"IQ1_S", 256, 50, SIZE_ONLY},     /* d, qs[32], qh[8] u16       */
    [MU_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18, COMPUTE_INTS(iq4_nl, false)}, /* d, qs[16]                  */
    [MU_TYPE_IQ3_S] = {"IQ3_S", 256, 110, SIZE_ONLY},    /* d, qs[64], qh[8], signs[32], scales[4] */
    [MU_TYPE_IQ2_S] = {"IQ2_S", 256, 82, SIZE_ONLY},     /* d, qs[64], qh[8], scales[8] */
    [MU_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136, COMPUTE_INTS(iq4_xs, false)},/* d, scales_h, scales_l[4], qs[128] */
    [MU_TYPE_I8] = {"I8", 1, 1, SIZE_ONLY},
    [MU_TYPE_I16] = {"I16", 1, 2, SIZE_ONLY},
    [MU_TYPE_I32] = {"I32", 1, 4, SIZE_ONLY},
    [MU_TYPE_I64] = {"I64", 1, 8, SIZE_ONLY},
    [MU_TYPE_F64] = {"F64", 1, 8, SIZE_ONLY},
    [MU_TYPE_IQ1_M] = {"IQ1_M", 256, 56, SIZE_ONLY},     /* qs[32], qh[16], scales[8]  */
    [MU_TYPE_BF16] = {"BF16", 1, 2, COMPUTE(bf16)},
    [MU_TYPE_TQ1_0] = {"TQ1_0", 256, 54, SIZE_ONLY},     /* qs[48], qh[4], d           */
    [MU_TYPE_TQ2_0] = {"TQ2_0", 256, 66, SIZE_ONLY},     /* qs[64], d                  */
    [MU_TYPE_MXFP4] = {"MXFP4", 32, 17, SIZE_ONLY},      /* e (E8M0), qs[16]           */
    [MU_TYPE_NVFP4] = {"NVFP4", 64, 36, SIZE_ONLY},      /* d[4] (UE4M3), qs[32]       */
    [MU_TYPE_Q1_0] = {"Q1_0", 128, 18, SIZE_ONLY},       /* d, qs[16]                  */
    [MU_TYPE_Q2_0] = {"Q2_0", 64, 18, SIZE_ONLY},        /* d, qs[16]                  */
};

const mu_type_traits *mu_type_get(uint32_t type) {
    if (type >= MU_TYPE_COUNT || type_traits[type].block_elems == 0) return NULL;
    return &type_traits[type];
}

const char *mu_type_name(uint32_t type) {
    const mu_type_traits *traits = mu_type_get(type);
    return traits ? traits->name : "?";
}

static bool equal_ignoring_case(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return false;
    return *a == *b;
}

int mu_type_from_name(const char *name) {
    if (!name) return -1;
    for (uint32_t type = 0; type < MU_TYPE_COUNT; type++) {
        const mu_type_traits *traits = mu_type_get(type);
        if (traits && equal_ignoring_case(name, traits->name)) return (int)type;
    }
    return -1;
}

uint64_t mu_row_bytes(uint32_t type, int64_t n) {
    const mu_type_traits *traits = mu_type_get(type);
    if (!traits || n < 0 || n % traits->block_elems != 0) return 0;
    uint64_t blocks = (uint64_t)n / (uint64_t)traits->block_elems;
    if (blocks > UINT64_MAX / (uint64_t)traits->block_bytes) return 0;
    return blocks * (uint64_t)traits->block_bytes;
}

float mu_f16_to_f32(uint16_t h) { return mu_half_to_float(h); }
uint16_t mu_f32_to_f16(float f) { return mu_float_to_half(f); }
float mu_bf16_to_f32(uint16_t h) { return mu_bfloat_to_float(h); }
uint16_t mu_f32_to_bf16(float f) { return mu_float_to_bfloat(f); }

/* The checks shared by the dispatchers; MUSER_OK when the row can go. */
static int check_row(uint32_t type, int64_t n, bool quantize) {
    const mu_type_traits *traits = mu_type_get(type);
    if (!traits) return mu_fail(MUSER_EINVAL, "invalid tensor type id %u", type);
    if (quantize ? traits->quant_row == NULL : traits->dequant_row == NULL)
        return mu_fail(MUSER_EUNSUPPORTED, "cannot %s type %s", quantize ? "quantize to" : "dequantize",
                       traits->name);
    if (n < 0 || n % traits->block_elems != 0)
        return mu_fail(MUSER_EINVAL, "row of %lld elements is not a whole number of %s blocks (%d)",
                       (long long)n, traits->name, traits->block_elems);
    return MUSER_OK;
}

int mu_dequant_row(uint32_t type, const void *src, float *dst, int64_t n) {
    int status = check_row(type, n, false);
    if (status != MUSER_OK) return status;
    type_traits[type].dequant_row(src, dst, n);
    return MUSER_OK;
}

int mu_quant_row(uint32_t type, const float *src, void *dst, int64_t n) {
    int status = check_row(type, n, true);
    if (status != MUSER_OK) return status;
    type_traits[type].quant_row(src, dst, n);
    return MUSER_OK;
}
