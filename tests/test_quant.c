/* test_quant.c — block formats: the traits table, row sizes, f16/bf16
 * conversions, hand-built blocks of every computable format, quantization
 * error bounds, special inputs and synthetic blocks.
 *
 * Expected values are computed here independently of src/quant: block
 * bytes are written by hand from the layouts in spec section 7, and the
 * conversions are checked against double-precision references.
 */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "muser.h"
#include "quant/quant.h"
#include "testlib.h"

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static bool same_bits(float a, float b) { return float_bits(a) == float_bits(b); }

/* ==== traits table ====================================================== */

/* Sizes from ggml-common.h, written out by hand. */
static const struct {
    uint32_t id;
    const char *name;
    int elems, bytes;
} ggml_types[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},      {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},      {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},   {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},   {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},        {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},   {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
    {40, "NVFP4", 64, 36},    {41, "Q1_0", 128, 18},    {42, "Q2_0", 64, 18},
};
static const uint32_t removed_ids[] = {4, 5, 31, 32, 33, 36, 37, 38};
static const uint32_t computable_ids[] = {
    MU_TYPE_F32,  MU_TYPE_F16,  MU_TYPE_Q4_0, MU_TYPE_Q4_1, MU_TYPE_Q5_0,   MU_TYPE_Q5_1,   MU_TYPE_Q8_0, MU_TYPE_Q8_1,
    MU_TYPE_Q2_K, MU_TYPE_Q3_K, MU_TYPE_Q4_K, MU_TYPE_Q5_K, MU_TYPE_Q6_K,   MU_TYPE_Q8_K,   MU_TYPE_BF16,
    MU_TYPE_IQ4_NL, MU_TYPE_IQ4_XS};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static bool is_computable(uint32_t id) {
    for (size_t i = 0; i < COUNT(computable_ids); i++)
        if (computable_ids[i] == id) return true;
    return false;
}

static void test_traits(void) {
    CHECK(COUNT(ggml_types) + COUNT(removed_ids) == MU_TYPE_COUNT);
    for (size_t i = 0; i < COUNT(ggml_types); i++) {
        const mu_type_traits *t = mu_type_get(ggml_types[i].id);
        CHECKF(t != NULL, "id %u", ggml_types[i].id);
        if (!t) continue;
        CHECKF(strcmp(t->name, ggml_types[i].name) == 0, "id %u: %s", ggml_types[i].id, t->name);
        CHECKF(t->block_elems == ggml_types[i].elems && t->block_bytes == ggml_types[i].bytes, "%s: %d/%d",
               t->name, t->block_elems, t->block_bytes);
        CHECKF((t->dequant_row != NULL) == is_computable(ggml_types[i].id), "%s dequant", t->name);
        CHECKF((t->quant_row != NULL) == is_computable(ggml_types[i].id), "%s quant", t->name);
        CHECK(strcmp(mu_type_name(ggml_types[i].id), ggml_types[i].name) == 0);
        CHECK(mu_type_from_name(ggml_types[i].name) == (int)ggml_types[i].id);
    }
    for (size_t i = 0; i < COUNT(removed_ids); i++) {
        CHECKF(mu_type_get(removed_ids[i]) == NULL, "removed id %u", removed_ids[i]);
        CHECK(strcmp(mu_type_name(removed_ids[i]), "?") == 0);
        CHECK(mu_row_bytes(removed_ids[i], 32) == 0);
    }
    CHECK(mu_type_get(MU_TYPE_COUNT) == NULL);
    CHECK(mu_type_get(UINT32_MAX) == NULL);
    CHECK(strcmp(mu_type_name(43), "?") == 0);

    /* ggml's own type_name spelling is lower case with a capital K */
    CHECK(mu_type_from_name("q4_K") == MU_TYPE_Q4_K);
    CHECK(mu_type_from_name("q4_k") == MU_TYPE_Q4_K);
    CHECK(mu_type_from_name("iq2_xxs") == MU_TYPE_IQ2_XXS);
    CHECK(mu_type_from_name("Bf16") == MU_TYPE_BF16);
    CHECK(mu_type_from_name("mxfp4") == MU_TYPE_MXFP4);
    CHECK(mu_type_from_name("f32") == MU_TYPE_F32);
    CHECK(mu_type_from_name("Q4_2") == -1);
    CHECK(mu_type_from_name("Q4") == -1);
    CHECK(mu_type_from_name("Q4_K ") == -1);
    CHECK(mu_type_from_name("Q4_KM") == -1);
    CHECK(mu_type_from_name("") == -1);
    CHECK(mu_type_from_name("?") == -1);
    CHECK(mu_type_from_name(NULL) == -1);

    /* the structs in the header match the table */
    CHECK(sizeof(mu_block_q4_0) == 18 && sizeof(mu_block_q8_0) == 34 && sizeof(mu_block_q8_1) == 36);
    CHECK(offsetof(mu_block_q4_K, scales) == 4 && offsetof(mu_block_q4_K, qs) == 16);
    CHECK(offsetof(mu_block_q5_K, qh) == 16 && offsetof(mu_block_q5_K, qs) == 48);
    CHECK(offsetof(mu_block_q6_K, qh) == 128 && offsetof(mu_block_q6_K, scales) == 192 &&
          offsetof(mu_block_q6_K, d) == 208);
    CHECK(offsetof(mu_block_q8_K, qs) == 4 && offsetof(mu_block_q8_K, bsums) == 260);
}

static void test_row_bytes(void) {
    CHECK(mu_row_bytes(MU_TYPE_Q4_K, 256) == 144);
    CHECK(mu_row_bytes(MU_TYPE_Q4_K, 6656) == 26 * 144);
    CHECK(mu_row_bytes(MU_TYPE_Q6_K, 19968) == 78 * 210);
    CHECK(mu_row_bytes(MU_TYPE_Q8_0, 4128) == 129 * 34);
    CHECK(mu_row_bytes(MU_TYPE_MXFP4, 64) == 34);
    CHECK(mu_row_bytes(MU_TYPE_NVFP4, 128) == 72);
    CHECK(mu_row_bytes(MU_TYPE_Q1_0, 128) == 18);
    CHECK(mu_row_bytes(MU_TYPE_F32, 7) == 28);
    CHECK(mu_row_bytes(MU_TYPE_F64, 3) == 24);
    CHECK(mu_row_bytes(MU_TYPE_Q4_K, 0) == 0);
    CHECK(mu_row_bytes(MU_TYPE_Q4_K, 255) == 0);
    CHECK(mu_row_bytes(MU_TYPE_Q4_K, 257) == 0);
    CHECK(mu_row_bytes(MU_TYPE_Q4_K, 128) == 0);
    CHECK(mu_row_bytes(MU_TYPE_Q4_K, -256) == 0);
    CHECK(mu_row_bytes(MU_TYPE_Q8_0, 33) == 0);
    CHECK(mu_row_bytes(MU_TYPE_F32, -1) == 0);
    CHECK(mu_row_bytes(MU_TYPE_COUNT, 256) == 0);
    CHECK(mu_row_bytes(UINT32_MAX, 256) == 0);
    CHECK(mu_row_bytes(4, 32) == 0);

    /* the largest rows: exact when the count fits, 0 when it would wrap */
    const int64_t two61 = (int64_t)1 << 61;
    CHECK(mu_row_bytes(MU_TYPE_F64, two61 - 1) == UINT64_MAX - 7);
    CHECK(mu_row_bytes(MU_TYPE_F64, two61) == 0);
    CHECK(mu_row_bytes(MU_TYPE_I64, INT64_MAX) == 0);
    CHECK(mu_row_bytes(MU_TYPE_F32, INT64_MAX) == 0);
    CHECK(mu_row_bytes(MU_TYPE_F32, two61 * 2 - 1) == UINT64_MAX - 3);
    CHECK(mu_row_bytes(MU_TYPE_F16, INT64_MAX) == UINT64_MAX - 1);
    CHECK(mu_row_bytes(MU_TYPE_I8, INT64_MAX) == (uint64_t)INT64_MAX);
    const int64_t max_k = INT64_MAX - INT64_MAX % 256; /* 2^55 - 1 blocks */
    CHECK(mu_row_bytes(MU_TYPE_Q8_K, max_k) == (((uint64_t)1 << 55) - 1) * 292);
    CHECK(mu_row_bytes(MU_TYPE_Q4_K, max_k) == (((uint64_t)1 << 55) - 1) * 144);
    CHECK(mu_row_bytes(MU_TYPE_Q8_K, INT64_MAX) == 0); /* not a multiple */
}

/* ==== f16 / bf16 ========================================================= */

/* The value of a half, from its definition. */
static double half_value(uint16_t h) {
    const int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
    double magnitude = exponent == 0 ? ldexp(mantissa, -24) : ldexp(1024 + mantissa, exponent - 25);
    return sign ? -magnitude : magnitude;
}

/* Nearest half to a finite float, ties to even, by exact double arithmetic. */
static uint16_t reference_f32_to_f16(float f) {
    const uint16_t sign = signbit(f) ? 0x8000 : 0;
    double v = fabs((double)f);
    if (v >= 65520.0) return sign | 0x7C00;
    int e2;
    frexp(v, &e2); /* v = m * 2^e2, m in [0.5, 1) */
    int quantum_exp = v < ldexp(1, -14) ? -24 : e2 - 11;
    double units = ldexp(v, -quantum_exp); /* exact: v has 24 significant bits */
    double rounded = floor(units);
    double rest = units - rounded;
    if (rest > 0.5 || (rest == 0.5 && fmod(rounded, 2) != 0)) rounded += 1;
    double value = ldexp(rounded, quantum_exp);
    if (value == 0) return sign;
    /* encode a representable value */
    if (value < ldexp(1, -14)) return (uint16_t)(sign | (uint16_t)ldexp(value, 24));
    frexp(value, &e2);
    int exponent = e2 - 1 + 15;
    int mantissa = (int)(ldexp(value, -(e2 - 1)) * 1024) - 1024;
    return (uint16_t)(sign | exponent << 10 | mantissa);
}

static void test_f16(void) {
    /* every pattern: the value is right and f16 -> f32 -> f16 is the identity */
    int wrong_value = 0, not_identity = 0, nan_lost = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mu_f16_to_f32((uint16_t)h);
        bool is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF);
        if (is_nan) {
            if (!isnan(f) || !isnan(mu_f16_to_f32(mu_f32_to_f16(f)))) nan_lost++;
            continue;
        }
        bool is_inf = (h & 0x7FFF) == 0x7C00;
        if (is_inf ? !(isinf(f) && (f < 0) == (h >> 15)) : (double)f != half_value((uint16_t)h)) wrong_value++;
        if ((signbit(f) != 0) != (h >> 15 != 0)) wrong_value++;
        if (mu_f32_to_f16(f) != h) not_identity++;
    }
    CHECKF(wrong_value == 0, "%d wrong f16 values", wrong_value);
    CHECKF(not_identity == 0, "%d f16 round trips changed", not_identity);
    CHECKF(nan_lost == 0, "%d NaNs lost", nan_lost);

    /* every midpoint between neighbouring halves goes to the even one, and
     * one f32 ulp either side goes to the nearer one */
    int bad_ties = 0;
    for (uint16_t h = 0; h < 0x7BFF; h++) {
        for (int negative = 0; negative < 2; negative++) {
            const uint16_t sign = negative ? 0x8000 : 0;
            double lo = half_value(h), hi = half_value((uint16_t)(h + 1));
            float mid = (float)((lo + hi) / 2); /* exact: 12 significant bits */
            if (negative) mid = -mid;
            uint16_t even = (h & 1) ? (uint16_t)(h + 1) : h;
            if (mu_f32_to_f16(mid) != (sign | even)) bad_ties++;
            if (mu_f32_to_f16(nextafterf(mid, 0)) != (sign | h)) bad_ties++;
            if (mu_f32_to_f16(nextafterf(mid, negative ? -INFINITY : INFINITY)) != (sign | (h + 1))) bad_ties++;
        }
    }
    CHECKF(bad_ties == 0, "%d f32 -> f16 roundings near midpoints wrong", bad_ties);

    /* a spread of f32 patterns against the double reference */
    int mismatches = 0;
    uint32_t first = 0;
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 65521) {
        float f = bits_float((uint32_t)u);
        if (isnan(f)) continue;
        if (mu_f32_to_f16(f) != reference_f32_to_f16(f) && mismatches++ == 0) first = (uint32_t)u;
    }
    CHECKF(mismatches == 0, "%d f32 -> f16 mismatches, first 0x%08x", mismatches, first);

    /* hand values */
    CHECK(mu_f32_to_f16(1.0f) == 0x3C00);
    CHECK(mu_f32_to_f16(-2.0f) == 0xC000);
    CHECK(mu_f32_to_f16(0.5f) == 0x3800);
    CHECK(mu_f32_to_f16(0.1f) == 0x2E66);
    CHECK(mu_f32_to_f16(1.0f / 3.0f) == 0x3555);
    CHECK(mu_f32_to_f16(3.14159265f) == 0x4248);
    CHECK(mu_f32_to_f16(0.0f) == 0x0000);
    CHECK(mu_f32_to_f16(-0.0f) == 0x8000);
    CHECK(mu_f32_to_f16(65504.0f) == 0x7BFF);
    CHECK(mu_f32_to_f16(nextafterf(65520.0f, 0)) == 0x7BFF);
    CHECK(mu_f32_to_f16(65520.0f) == 0x7C00); /* overflow gives inf, as F16C */
    CHECK(mu_f32_to_f16(-65520.0f) == 0xFC00);
    CHECK(mu_f32_to_f16(1e10f) == 0x7C00);
    CHECK(mu_f32_to_f16(FLT_MAX) == 0x7C00);
    CHECK(mu_f32_to_f16(INFINITY) == 0x7C00);
    CHECK(mu_f32_to_f16(-INFINITY) == 0xFC00);
    CHECK(mu_f32_to_f16(0x1p-14f) == 0x0400);               /* least normal */
    CHECK(mu_f32_to_f16(0x1p-24f) == 0x0001);               /* least subnormal */
    CHECK(mu_f32_to_f16(0x1p-25f) == 0x0000);               /* tie: to even 0 */
    CHECK(mu_f32_to_f16(nextafterf(0x1p-25f, 1)) == 0x0001);
    CHECK(mu_f32_to_f16(0x1.8p-24f) == 0x0002);             /* 1.5 units: tie to 2 */
    CHECK(mu_f32_to_f16(0x1.4p-23f) == 0x0002);             /* 2.5 units: tie to 2 */
    CHECK(mu_f32_to_f16(0x1p-14f - 0x1p-25f) == 0x0400);    /* 1023.5 units: tie to 1024 */
    CHECK(mu_f32_to_f16(-0x1p-24f) == 0x8001);
    CHECK(mu_f32_to_f16(1e-45f) == 0x0000);                 /* f32 subnormal */
    CHECK(mu_f32_to_f16(-1e-45f) == 0x8000);
    CHECK(mu_f32_to_f16(1.0f + 0x1p-11f) == 0x3C00);        /* tie at 1: to even */
    CHECK(mu_f32_to_f16(1.0f + 0x1.8p-10f) == 0x3C02);      /* tie: to even 2 */

    uint16_t nan_half = mu_f32_to_f16(NAN);
    CHECK((nan_half & 0x7C00) == 0x7C00 && (nan_half & 0x3FF) != 0);
    uint16_t low_payload = mu_f32_to_f16(bits_float(0x7F800001)); /* payload below the kept bits */
    CHECK((low_payload & 0x7C00) == 0x7C00 && (low_payload & 0x3FF) != 0);
    CHECK(mu_f32_to_f16(bits_float(0xFFC00000)) >> 15 == 1);

    CHECK(mu_f16_to_f32(0x3C00) == 1.0f);
    CHECK(mu_f16_to_f32(0xC000) == -2.0f);
    CHECK(mu_f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(mu_f16_to_f32(0x03FF) == 1023 * 0x1p-24f);
    CHECK(mu_f16_to_f32(0x7BFF) == 65504.0f);
    CHECK(mu_f16_to_f32(0xFC00) == -INFINITY);
    CHECK(isnan(mu_f16_to_f32(0x7E00)));
    CHECK(isnan(mu_f16_to_f32(0x7C01)));
    CHECK(same_bits(mu_f16_to_f32(0x8000), -0.0f));
}

/* Nearest bf16 to a finite float, ties to even, by comparing neighbours. */
static uint16_t reference_f32_to_bf16(float f) {
    uint32_t u = float_bits(f);
    uint16_t down = (uint16_t)(u >> 16), up = (uint16_t)(down + 1);
    double x = fabs((double)f);
    double lo = fabs((double)bits_float((uint32_t)down << 16));
    if ((up & 0x7F80) == 0x7F80 && (up & 0x7F)) return down; /* cannot happen for finite f */
    double hi = (up & 0x7FFF) == 0x7F80 ? ldexp(1, 128) : fabs((double)bits_float((uint32_t)up << 16));
    if (x - lo < hi - x) return down;
    if (x - lo > hi - x) return up;
    return (down & 1) ? up : down;
}

static void test_bf16(void) {
    int not_identity = 0, nan_lost = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mu_bf16_to_f32((uint16_t)h);
        if (float_bits(f) != h << 16) not_identity++;
        if (isnan(f)) {
            if (!isnan(mu_bf16_to_f32(mu_f32_to_bf16(f)))) nan_lost++;
        } else if (mu_f32_to_bf16(f) != h) {
            not_identity++;
        }
    }
    CHECKF(not_identity == 0, "%d bf16 round trips changed", not_identity);
    CHECK(nan_lost == 0);

    int mismatches = 0;
    uint32_t first = 0;
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 65519) {
        float f = bits_float((uint32_t)u);
        if (isnan(f)) continue;
        if (mu_f32_to_bf16(f) != reference_f32_to_bf16(f) && mismatches++ == 0) first = (uint32_t)u;
    }
    CHECKF(mismatches == 0, "%d f32 -> bf16 mismatches, first 0x%08x", mismatches, first);

    CHECK(mu_f32_to_bf16(1.0f) == 0x3F80);
    CHECK(mu_f32_to_bf16(-3.0f) == 0xC040);
    CHECK(mu_f32_to_bf16(1.0f + 0x1p-8f) == 0x3F80);           /* tie: to even */
    CHECK(mu_f32_to_bf16(1.0f + 0x1.8p-7f) == 0x3F82);         /* tie: to even */
    CHECK(mu_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-23f) == 0x3F81); /* above the tie */
    CHECK(mu_f32_to_bf16(FLT_MAX) == 0x7F80);                  /* rounds up to inf */
    CHECK(mu_f32_to_bf16(bits_float(0x7F7F7FFF)) == 0x7F7F);
    CHECK(mu_f32_to_bf16(-INFINITY) == 0xFF80);
    CHECK(mu_f32_to_bf16(bits_float(0x00010000)) == 0x0001);   /* subnormals are kept */
    CHECK(mu_f32_to_bf16(bits_float(0x00008000)) == 0x0000);
    CHECK(mu_f32_to_bf16(bits_float(0x00018000)) == 0x0002);
    CHECK(mu_f32_to_bf16(-0.0f) == 0x8000);
    uint16_t nan_low = mu_f32_to_bf16(bits_float(0x7F800001)); /* truncation alone would give inf */
    CHECK((nan_low & 0x7F80) == 0x7F80 && (nan_low & 0x7F) != 0);
    CHECK(mu_f32_to_bf16(bits_float(0xFFC00000)) >> 15 == 1);
    CHECK(mu_bf16_to_f32(0x3F80) == 1.0f);
    CHECK(mu_bf16_to_f32(0xC040) == -3.0f);
}

/* ==== hand-built blocks ================================================== */

static void put_half(uint8_t *p, uint16_t h) {
    p[0] = (uint8_t)(h & 0xFF);
    p[1] = (uint8_t)(h >> 8);
}

static void test_plain_rows(void) {
    const uint8_t f16_bytes[] = {0x00, 0x3C, 0x00, 0xC0, 0x01, 0x00, 0xFF, 0x7B, 0x00, 0x80, 0x00, 0x7C};
    float y[6];
    CHECK(mu_dequant_row(MU_TYPE_F16, f16_bytes, y, 6) == MUSER_OK);
    CHECK(y[0] == 1.0f && y[1] == -2.0f && y[2] == 0x1p-24f && y[3] == 65504.0f);
    CHECK(same_bits(y[4], -0.0f) && y[5] == INFINITY);

    const uint8_t bf16_bytes[] = {0x80, 0x3F, 0x40, 0xC0, 0x01, 0x00, 0x49, 0x40};
    CHECK(mu_dequant_row(MU_TYPE_BF16, bf16_bytes, y, 4) == MUSER_OK);
    CHECK(y[0] == 1.0f && y[1] == -3.0f && y[2] == bits_float(0x00010000) && y[3] == 3.140625f);

    const float x[3] = {1.5f, -0.1f, 1e-30f};
    uint8_t bytes[12];
    float back[3];
    CHECK(mu_quant_row(MU_TYPE_F32, x, bytes, 3) == MUSER_OK);
    CHECK(mu_dequant_row(MU_TYPE_F32, bytes, back, 3) == MUSER_OK);
    CHECK(memcmp(back, x, sizeof x) == 0);
    CHECK(mu_quant_row(MU_TYPE_F16, x, bytes, 3) == MUSER_OK);
    CHECK(bytes[0] == 0x00 && bytes[1] == 0x3E && bytes[2] == 0x66 && bytes[3] == 0xAE && bytes[4] == 0 && bytes[5] == 0);
    CHECK(mu_quant_row(MU_TYPE_BF16, x, bytes, 3) == MUSER_OK);
    CHECK(bytes[0] == 0xC0 && bytes[1] == 0x3F && bytes[2] == 0xCD && bytes[3] == 0xBD);
}

static void test_q4_0_block(void) {
    uint8_t block[18];
    put_half(block, 0x3800); /* d = 0.5 */
    for (int j = 0; j < 16; j++) block[2 + j] = (uint8_t)(j | (15 - j) << 4);
    float y[32];
    mu_dequant_row_q4_0(block, y, 32);
    int wrong = 0;
    for (int j = 0; j < 16; j++) {
        if (y[j] != (j - 8) * 0.5f) wrong++;
        if (y[j + 16] != (7 - j) * 0.5f) wrong++;
    }
    CHECKF(wrong == 0, "%d q4_0 values", wrong);
    CHECK(y[0] == -4.0f && y[15] == 3.5f && y[16] == 3.5f && y[31] == -4.0f);

    /* the quantizer's rule: d = max/-8 with max the signed value of largest |x| */
    float x[32] = {0};
    x[3] = -4.0f; /* d = 0.5 */
    x[5] = 4.0f;  /* 4/0.5 = 8 -> q = -8 -> clamps at 15 */
    x[20] = 0.25f;
    x[21] = 0.75f; /* x/d + 8.5 = 9.0 and 10.0 */
    mu_quant_row_q4_0(x, block, 32);
    CHECK(block[0] == 0x00 && block[1] == 0x38);
    CHECK((block[2 + 3] & 15) == 0 && (block[2 + 5] & 15) == 0x0F && (block[2 + 0] & 15) == 8);
    CHECK((block[2 + 4] >> 4) == 9 && (block[2 + 5] >> 4) == 10);
}

static void test_q8_0_block(void) {
    uint8_t block[34];
    put_half(block, 0x3400); /* d = 0.25 */
    for (int j = 0; j < 32; j++) block[2 + j] = (uint8_t)(int8_t)(j * 8 - 128 + (j == 31 ? 7 : 0));
    float y[32];
    mu_dequant_row_q8_0(block, y, 32);
    int wrong = 0;
    for (int j = 0; j < 32; j++)
        if (y[j] != (float)(int8_t)block[2 + j] * 0.25f) wrong++;
    CHECK(wrong == 0);
    CHECK(y[0] == -32.0f && y[16] == 0.0f && y[31] == 31.75f);

    uint8_t q81[36];
    put_half(q81, 0x4000); /* d = 2 */
    put_half(q81 + 2, 0x5140);
    for (int j = 0; j < 32; j++) q81[4 + j] = (uint8_t)(int8_t)(j - 16);
    mu_dequant_row_q8_1(q81, y, 32);
    CHECK(y[0] == -32.0f && y[16] == 0.0f && y[31] == 30.0f);

    /* rule: d = amax/127, q = roundf(x/d): with amax = 127, d = 1 and halves round away from 0 */
    float x[32] = {0};
    x[0] = 127.0f;
    x[1] = 2.5f;
    x[2] = -2.5f;
    x[3] = 0.49f;
    x[4] = -126.5f;
    mu_quant_row_q8_0(x, block, 32);
    CHECK(block[0] == 0x00 && block[1] == 0x3C);
    CHECK((int8_t)block[2] == 127 && (int8_t)block[3] == 3 && (int8_t)block[4] == -3 && block[5] == 0 &&
          (int8_t)block[6] == -127);
    mu_quant_row_q8_1(x, q81, 32);
    CHECK(q81[0] == 0x00 && q81[1] == 0x3C);
    CHECK(mu_f16_to_f32((uint16_t)(q81[2] | q81[3] << 8)) == 0.0f); /* 127 + 3 - 3 - 127 */
    CHECK(memcmp(q81 + 4, block + 2, 32) == 0);
}

/* Eight (scale, min) pairs and the 12 bytes that pack them, worked out by
 * hand from the layout (j >= 4 take their top two bits from bytes 0..7). */
static const uint8_t k4_sc[8] = {1, 2, 3, 4, 37, 16, 63, 0};
static const uint8_t k4_m[8] = {5, 6, 7, 8, 58, 33, 0, 63};
static const uint8_t k4_packed[12] = {0x81, 0x42, 0xC3, 0x04, 0xC5, 0x86, 0x07, 0xC8, 0xA5, 0x10, 0x0F, 0xF0};

static void test_scale_min_k4(void) {
    int wrong = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        mu_get_scale_min_k4(j, k4_packed, &sc, &m);
        if (sc != k4_sc[j] || m != k4_m[j]) wrong++;
    }
    CHECKF(wrong == 0, "%d scale/min pairs", wrong);
}

/* qs pattern shared by the Q4_K and Q5_K hand blocks */
static uint8_t k4_nibbles(int c, int l) { return (uint8_t)((l & 15) | ((7 * l + c) & 15) << 4); }

static void test_q4_K_block(void) {
    uint8_t block[144];
    put_half(block, 0x3400);     /* d = 0.25 */
    put_half(block + 2, 0x3000); /* dmin = 0.125 */
    memcpy(block + 4, k4_packed, 12);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) block[16 + 32 * c + l] = k4_nibbles(c, l);
    float y[256];
    mu_dequant_row_q4_K(block, y, 256);
    int wrong = 0;
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            const int lo = 2 * c, hi = 2 * c + 1; /* sub-blocks of the low and high nibbles */
            float want_lo = 0.25f * k4_sc[lo] * (float)(l & 15) - 0.125f * k4_m[lo];
            float want_hi = 0.25f * k4_sc[hi] * (float)((7 * l + c) & 15) - 0.125f * k4_m[hi];
            if (y[64 * c + l] != want_lo) wrong++;
            if (y[64 * c + 32 + l] != want_hi) wrong++;
        }
    }
    CHECKF(wrong == 0, "%d q4_K values", wrong);
    /* spot values: sub-block 4 (sc 37, m 58) at q = 3; sub-block 7 (sc 0, m 63) */
    CHECK(y[128 + 3] == 0.25f * 37 * 3 - 0.125f * 58);
    CHECK(y[224 + 5] == -0.125f * 63);
}

static void test_q5_K_block(void) {
    uint8_t block[176];
    put_half(block, 0x3400);
    put_half(block + 2, 0x3000);
    memcpy(block + 4, k4_packed, 12);
    for (int l = 0; l < 32; l++) block[16 + l] = (uint8_t)(l * 37 + 11);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) block[48 + 32 * c + l] = k4_nibbles(c, l);
    float y[256];
    mu_dequant_row_q5_K(block, y, 256);
    int wrong = 0;
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            const uint8_t qh = block[16 + l];
            const int q_lo = (l & 15) + ((qh >> (2 * c)) & 1) * 16;
            const int q_hi = ((7 * l + c) & 15) + ((qh >> (2 * c + 1)) & 1) * 16;
            float want_lo = 0.25f * k4_sc[2 * c] * (float)q_lo - 0.125f * k4_m[2 * c];
            float want_hi = 0.25f * k4_sc[2 * c + 1] * (float)q_hi - 0.125f * k4_m[2 * c + 1];
            if (y[64 * c + l] != want_lo) wrong++;
            if (y[64 * c + 32 + l] != want_hi) wrong++;
        }
    }
    CHECKF(wrong == 0, "%d q5_K values", wrong);
    /* spot: qh[0] = 11 = 0b00001011: weight 0 (bit 0) and 32 (bit 1) and 96
     * (bit 3) get +16, weight 64 (bit 2) does not */
    CHECK(y[0] == 0.25f * 1 * 16 - 0.125f * 5);
    CHECK(y[32] == 0.25f * 2 * (0 + 16) - 0.125f * 6);
    CHECK(y[64] == 0.25f * 3 * 0 - 0.125f * 7);
    CHECK(y[96] == 0.25f * 4 * (1 + 16) - 0.125f * 8);
}

static void test_q6_K_block(void) {
    uint8_t block[210];
    const int8_t scales[16] = {-128, -1, 1, 127, -64, 3, 5, -7, 9, 11, -13, 15, 100, -100, 2, 64};
    for (int i = 0; i < 128; i++) block[i] = (uint8_t)(i * 29 + 3);
    for (int i = 0; i < 64; i++) block[128 + i] = (uint8_t)(i * 53 + 17);
    memcpy(block + 192, scales, 16);
    put_half(block + 208, 0x3800); /* d = 0.5, stored last */
    float y[256];
    mu_dequant_row_q6_K(block, y, 256);
    int wrong = 0;
    for (int h = 0; h < 2; h++) {
        for (int k = 0; k < 4; k++) {
            for (int l = 0; l < 32; l++) {
                const uint8_t ql = block[64 * h + l + 32 * (k & 1)];
                const int low = (k < 2 ? ql : ql >> 4) & 15;
                const int high = (block[128 + 32 * h + l] >> (2 * k)) & 3;
                const int e = 128 * h + 32 * k + l;
                float want = 0.5f * (float)scales[e / 16] * (float)((low | high << 4) - 32);
                if (y[e] != want) wrong++;
            }
        }
    }
    CHECKF(wrong == 0, "%d q6_K values", wrong);
    /* spot: weight 0: ql[0] = 3, qh[128] = 17 = 0b00010001 -> q = 3 | 1<<4 = 19 */
    CHECK(y[0] == 0.5f * -128 * (19 - 32));
    /* weight 64 (group 4, scale -64): ql[0] >> 4 = 0, (17 >> 4) & 3 = 1 -> q = 16 */
    CHECK(y[64] == 0.5f * -64 * (16 - 32));
    /* weight 128+97 (second half, k = 3, l = 1, group 14): ql[64+33], qh[128+32+1] */
    {
        const int low = block[64 + 33] >> 4, high = (block[128 + 33] >> 6) & 3;
        CHECK(y[225] == 0.5f * 2 * (float)((low | high << 4) - 32));
    }
}

static void test_q8_K_block(void) {
    mu_block_q8_K block;
    block.d = -0.5f;
    for (int j = 0; j < 256; j++) block.qs[j] = (int8_t)(j % 255 - 127);
    float y[256];
    mu_dequant_row_q8_K(&block, y, 256);
    int wrong = 0;
    for (int j = 0; j < 256; j++)
        if (y[j] != -0.5f * (float)(j % 255 - 127)) wrong++;
    CHECK(wrong == 0);

    /* the spec's rule with max = -127: iscale = 1, so q = nearest-even(x) */
    float x[256] = {0};
    x[0] = -127.0f;
    x[1] = 62.5f;  /* tie: 62 */
    x[2] = 63.5f;  /* tie: 64 */
    x[3] = -0.5f;  /* tie: 0 */
    x[4] = 1.5f;   /* 2 */
    x[5] = 2.5f;   /* 2 */
    x[6] = -1.5f;  /* -2 */
    x[7] = 126.6f; /* 127 */
    x[17] = 5.0f;
    x[255] = -3.0f;
    mu_quant_row_q8_K(x, &block, 256);
    CHECK(block.d == 1.0f);
    CHECK(block.qs[0] == -127 && block.qs[1] == 62 && block.qs[2] == 64 && block.qs[3] == 0);
    CHECK(block.qs[4] == 2 && block.qs[5] == 2 && block.qs[6] == -2 && block.qs[7] == 127);
    CHECK(block.bsums[0] == -127 + 62 + 64 + 0 + 2 + 2 - 2 + 127);
    CHECK(block.bsums[1] == 5 && block.bsums[15] == -3);
    for (int g = 2; g < 15; g++) CHECK(block.bsums[g] == 0);

    /* a positive max flips the sign: d = -1, q = -x */
    x[0] = 127.0f;
    mu_quant_row_q8_K(x, &block, 256);
    CHECK(block.d == -1.0f && block.qs[0] == -127 && block.qs[1] == -62 && block.qs[17] == -5);

    /* all zeros: d = 0 and every q and bsum 0, whatever the buffer held */
    memset(x, 0, sizeof x);
    memset(&block, 0xAA, sizeof block);
    mu_quant_row_q8_K(x, &block, 256);
    int stale = block.d != 0.0f;
    for (int j = 0; j < 256; j++) stale += block.qs[j] != 0;
    for (int g = 0; g < 16; g++) stale += block.bsums[g] != 0;
    CHECK(stale == 0);

    /* ties of |x|: the first element decides the sign */
    memset(x, 0, sizeof x);
    x[10] = -2.0f;
    x[20] = 2.0f;
    mu_quant_row_q8_K(x, &block, 256);
    CHECK(block.d > 0 && block.qs[10] == -127 && block.qs[20] == 127);
}

/* ggml's float formulas on random blocks: d1 = d*sc and m1 = dmin*m, then
 * d1*q - m1 (Q4_K), and (d*sc)*q (Q6_K). The products are exact in f32
 * (11-bit halves times small integers), so Q4_K's one rounding is the
 * subtraction; Q6_K's order shows in the sign of zero: (d*sc)*0 is -0 when
 * d*sc < 0, d*(sc*0) is +0. volatile keeps this file from fusing anything. */
static void test_operation_order(void) {
    uint64_t state = 99;
    int k4_wrong = 0, q6_wrong = 0, q6_order_visible = 0;
    for (int trial = 0; trial < 64; trial++) {
        uint8_t block[176];
        for (size_t i = 0; i < sizeof block; i++) block[i] = (uint8_t)tl_rand_u64(&state);
        put_half(block, (uint16_t)(0x2000 + tl_rand_u64(&state) % 0x1800));
        put_half(block + 2, (uint16_t)(0x2000 + tl_rand_u64(&state) % 0x1800));
        float y[256];
        mu_dequant_row_q4_K(block, y, 256);
        const float d = mu_f16_to_f32((uint16_t)(block[0] | block[1] << 8));
        const float dmin = mu_f16_to_f32((uint16_t)(block[2] | block[3] << 8));
        for (int e = 0; e < 256; e++) {
            const int sub = e / 32, c = e / 64, l = e % 32;
            uint8_t sc, m;
            mu_get_scale_min_k4(sub, block + 4, &sc, &m);
            const uint8_t byte = block[16 + 32 * c + l];
            const int q = (sub & 1) ? byte >> 4 : byte & 15;
            volatile float d1 = d * (float)sc, m1 = dmin * (float)m, prod = d1 * (float)q;
            volatile float want = prod - m1;
            if (!same_bits(y[e], want)) k4_wrong++;
        }
        uint8_t q6[210];
        for (size_t i = 0; i < sizeof q6; i++) q6[i] = (uint8_t)tl_rand_u64(&state);
        put_half(q6 + 208, (uint16_t)(0x2000 + tl_rand_u64(&state) % 0x1800));
        mu_dequant_row_q6_K(q6, y, 256);
        const float d6 = mu_f16_to_f32((uint16_t)(q6[208] | q6[209] << 8));
        for (int e = 0; e < 256; e++) {
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            const uint8_t ql = q6[64 * h + l + 32 * (k & 1)];
            const int q = (((k < 2 ? ql : ql >> 4) & 15) | ((q6[128 + 32 * h + l] >> (2 * k)) & 3) << 4) - 32;
            const int8_t sc = (int8_t)q6[192 + e / 16];
            volatile float dsc = d6 * (float)sc, want = dsc * (float)q;
            volatile float scq = (float)(sc * q), other = d6 * scq;
            if (!same_bits(y[e], want)) q6_wrong++;
            if (!same_bits(want, other)) q6_order_visible++;
        }
    }
    CHECKF(k4_wrong == 0, "%d q4_K values not in ggml's order", k4_wrong);
    CHECKF(q6_wrong == 0, "%d q6_K values not in ggml's order", q6_wrong);
    /* the data must be able to tell the orders apart, or the test proves nothing */
    CHECKF(q6_order_visible > 20, "only %d values tell the q6_K orders apart", q6_order_visible);
}

/* ==== quantize -> dequantize ============================================= */

static double relative_rms_error(uint32_t type, const float *x, int64_t n, float *y) {
    void *blocks = calloc(1, mu_row_bytes(type, n));
    CHECK(mu_quant_row(type, x, blocks, n) == MUSER_OK);
    CHECK(mu_dequant_row(type, blocks, y, n) == MUSER_OK);
    free(blocks);
    double error = 0, signal = 0;
    for (int64_t i = 0; i < n; i++) {
        error += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        signal += (double)x[i] * x[i];
    }
    return signal > 0 ? sqrt(error / signal) : sqrt(error);
}

/* Bounds sit a few percent above the worst of 20 seeds of Muser's
 * quantizers on N(0,1) data; rows of 256..512 vary more than long ones.
 * ggml's reference quantizers measure Q4_K 0.0714, Q5_K 0.0362,
 * Q6_K 0.0178 on long Gaussian rows; Muser's 0.0700, 0.0346, 0.0172.
 * Q4_0, Q8_0, Q8_1 and Q8_K follow ggml's rules, so they match exactly. */
static const struct {
    uint32_t type;
    double short_bound, long_bound; /* rows below / from 4096 elements */
} error_bounds[] = {
    {MU_TYPE_F16, 0.000275, 0.000216}, {MU_TYPE_BF16, 0.00207, 0.00174}, {MU_TYPE_Q4_0, 0.1145, 0.0887},
    {MU_TYPE_Q8_0, 0.0077, 0.00552},   {MU_TYPE_Q8_1, 0.0077, 0.00552},  {MU_TYPE_Q4_K, 0.0760, 0.0719},
    {MU_TYPE_Q5_K, 0.0378, 0.0355},    {MU_TYPE_Q6_K, 0.0193, 0.0176},   {MU_TYPE_Q8_K, 0.0088, 0.00737},
};

static void test_error_bounds(void) {
    const int64_t lengths[] = {32, 96, 256, 512, 4128, 6656, 19968};
    float *x = malloc(sizeof(float) * 19968), *y = malloc(sizeof(float) * 19968);
    for (size_t t = 0; t < COUNT(error_bounds); t++) {
        const uint32_t type = error_bounds[t].type;
        for (size_t li = 0; li < COUNT(lengths); li++) {
            const int64_t n = lengths[li];
            if (n % mu_type_get(type)->block_elems) continue;
            uint64_t state = 7 * n + type;
            for (int64_t i = 0; i < n; i++) x[i] = tl_rand_normal(&state);
            double error = relative_rms_error(type, x, n, y);
            double bound = n < 4096 ? error_bounds[t].short_bound : error_bounds[t].long_bound;
            CHECKF(error < bound, "%s n=%lld: relative RMS error %.5f >= %.5f", mu_type_name(type), (long long)n, error,
                   bound);
            if (n == 19968 || (n == 4128 && mu_type_get(type)->block_elems == 32 && type != MU_TYPE_F16))
                printf("  %-5s n=%-6lld relative RMS error %.6f\n", mu_type_name(type), (long long)n, error);
        }
    }

    /* per element: Q8_0 and Q8_K are within half a step of x */
    uint64_t state = 5;
    for (int i = 0; i < 4096; i++) x[i] = tl_rand_normal(&state) * (i % 300 == 0 ? 30.0f : 1.0f);
    mu_block_q8_0 q8[128];
    mu_quant_row_q8_0(x, q8, 4096);
    mu_dequant_row_q8_0(q8, y, 4096);
    int outside = 0;
    for (int i = 0; i < 4096; i++) {
        /* q was rounded against the f32 d; y uses its f16: up to 127 times that difference more */
        float d = mu_f16_to_f32(q8[i / 32].d), amax = 0;
        for (int j = i / 32 * 32; j < i / 32 * 32 + 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        if (fabsf(y[i] - x[i]) > 0.5f * d + 127 * fabsf(d - amax / 127) + 1e-6f) outside++;
    }
    CHECKF(outside == 0, "%d q8_0 values beyond half a step", outside);
    mu_block_q8_K q8k[16];
    mu_quant_row_q8_K(x, q8k, 4096);
    mu_dequant_row_q8_K(q8k, y, 4096);
    outside = 0;
    for (int i = 0; i < 4096; i++)
        if (fabsf(y[i] - x[i]) > 0.5f * fabsf(q8k[i / 256].d) * 1.0001f) outside++;
    CHECKF(outside == 0, "%d q8_K values beyond half a step", outside);
    free(x);
    free(y);
}

/* Squared error of one sub-block of 32 (Q4_K/Q5_K) for a given integer
 * scale and min, each weight on its nearest level. */
static float k4_sub_block_error(const float *x, float d, float dmin, int sc, int m, int nmax) {
    const float d1 = d * (float)sc, m1 = dmin * (float)m;
    float error = 0;
    for (int i = 0; i < 32; i++) {
        float best = INFINITY;
        for (int q = 0; q <= nmax; q++) best = fminf(best, fabsf(d1 * (float)q - m1 - x[i]));
        error += best * best;
    }
    return error;
}

static float q6_group_error(const float *x, float d, int sc) {
    const float d1 = d * (float)sc;
    float error = 0;
    for (int i = 0; i < 16; i++) {
        float best = INFINITY;
        for (int q = -32; q <= 31; q++) best = fminf(best, fabsf(d1 * (float)q - x[i]));
        error += best * best;
    }
    return error;
}

/* The K-quant searches end at a local optimum: every weight sits on its
 * nearest level, and no neighbouring integer scale (or min) of a
 * sub-block gives a smaller error. Read back from the bytes. */
static void test_k_quant_choices(void) {
    enum { N = 2048 };
    static float x[N], y[N];
    uint64_t state = 31;
    for (int i = 0; i < N; i++) x[i] = tl_rand_normal(&state) + (i / 512 == 1 ? 0.7f : 0.0f);

    for (int nmax = 15; nmax <= 31; nmax += 16) {
        const uint32_t type = nmax == 15 ? MU_TYPE_Q4_K : MU_TYPE_Q5_K;
        uint8_t *blocks = malloc(mu_row_bytes(type, N));
        mu_quant_row(type, x, blocks, N);
        mu_dequant_row(type, blocks, y, N);
        int not_nearest = 0, improvable = 0;
        for (int b = 0; b < N / 256; b++) {
            const uint8_t *block = blocks + (size_t)b * (size_t)mu_type_get(type)->block_bytes;
            const float d = mu_f16_to_f32((uint16_t)(block[0] | block[1] << 8));
            const float dmin = mu_f16_to_f32((uint16_t)(block[2] | block[3] << 8));
            for (int j = 0; j < 8; j++) {
                uint8_t sc, m;
                mu_get_scale_min_k4(j, block + 4, &sc, &m);
                const float *xj = x + 256 * b + 32 * j, *yj = y + 256 * b + 32 * j;
                float chosen = 0;
                for (int i = 0; i < 32; i++) chosen += (yj[i] - xj[i]) * (yj[i] - xj[i]);
                if (chosen > k4_sub_block_error(xj, d, dmin, sc, m, nmax) * 1.0001f + 1e-12f) not_nearest++;
                for (int dsc = -1; dsc <= 1; dsc++)
                    for (int dm = -1; dm <= 1; dm++) {
                        if (sc + dsc < 0 || sc + dsc > 63 || m + dm < 0 || m + dm > 63) continue;
                        if (k4_sub_block_error(xj, d, dmin, sc + dsc, m + dm, nmax) < chosen * 0.9999f) improvable++;
                    }
            }
        }
        CHECKF(not_nearest == 0, "%s: %d sub-blocks off their nearest levels", mu_type_name(type), not_nearest);
        CHECKF(improvable == 0, "%s: %d sub-blocks improvable by a neighbouring scale/min", mu_type_name(type),
               improvable);
        free(blocks);
    }

    static mu_block_q6_K q6[N / 256];
    mu_quant_row_q6_K(x, q6, N);
    mu_dequant_row_q6_K(q6, y, N);
    int not_nearest = 0, improvable = 0;
    for (int b = 0; b < N / 256; b++) {
        const float d = mu_f16_to_f32(q6[b].d);
        for (int g = 0; g < 16; g++) {
            const int sc = q6[b].scales[g];
            const float *xg = x + 256 * b + 16 * g, *yg = y + 256 * b + 16 * g;
            float chosen = 0;
            for (int i = 0; i < 16; i++) chosen += (yg[i] - xg[i]) * (yg[i] - xg[i]);
            if (chosen > q6_group_error(xg, d, sc) * 1.0001f + 1e-12f) not_nearest++;
            for (int dsc = -1; dsc <= 1; dsc += 2)
                if (sc + dsc >= -128 && sc + dsc <= 127 && q6_group_error(xg, d, sc + dsc) < chosen * 0.9999f)
                    improvable++;
        }
    }
    CHECKF(not_nearest == 0, "q6_K: %d groups off their nearest levels", not_nearest);
    CHECKF(improvable == 0, "q6_K: %d groups improvable by a neighbouring scale", improvable);
}

/* Q4_0, Q8_0, Q8_1 and Q8_K quantizers against their rules, recomputed
 * here with other rounding functions (lrintf for nearest-even). */
static void test_reference_rules(void) {
    enum { N = 2048 };
    static float x[N];
    uint64_t state = 11;
    for (int i = 0; i < N; i++) x[i] = tl_rand_normal(&state) * (i % 97 == 0 ? 8.0f : 1.0f);

    static mu_block_q8_K q8k[N / 256];
    mu_quant_row_q8_K(x, q8k, N);
    int wrong = 0;
    for (int b = 0; b < N / 256; b++) {
        const float *xb = x + 256 * b;
        float max = 0;
        for (int j = 0; j < 256; j++)
            if (fabsf(xb[j]) > fabsf(max)) max = xb[j];
        const float iscale = -127.0f / max;
        if (q8k[b].d != 1.0f / iscale) wrong++;
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) {
                long q = lrintf(iscale * xb[16 * g + j]);
                if (q > 127) q = 127;
                if (q8k[b].qs[16 * g + j] != q) wrong++;
                sum += (int)q;
            }
            if (q8k[b].bsums[g] != sum) wrong++;
        }
    }
    CHECKF(wrong == 0, "%d q8_K fields differ from the rule", wrong);

    static mu_block_q8_0 q8[N / 32];
    static mu_block_q8_1 q81[N / 32];
    static mu_block_q4_0 q4[N / 32];
    mu_quant_row_q8_0(x, q8, N);
    mu_quant_row_q8_1(x, q81, N);
    mu_quant_row_q4_0(x, q4, N);
    wrong = 0;
    for (int b = 0; b < N / 32; b++) {
        const float *xb = x + 32 * b;
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++)
            if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]), max = xb[j];
        const float d = amax / 127.0f, id = 1.0f / d;
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            int q = (int)roundf(xb[j] * id);
            if (q8[b].qs[j] != q || q81[b].qs[j] != q) wrong++;
            sum += q;
        }
        if (q8[b].d != mu_f32_to_f16(d) || q81[b].d != mu_f32_to_f16(d)) wrong++;
        if (q81[b].s != mu_f32_to_f16((float)sum * d)) wrong++;
        const float d4 = max / -8.0f, id4 = 1.0f / d4;
        if (q4[b].d != mu_f32_to_f16(d4)) wrong++;
        for (int j = 0; j < 32; j++) {
            volatile float scaled = xb[j] * id4; /* no fused multiply-add here */
            int q = (int)(scaled + 8.5f);
            if (q > 15) q = 15;
            int got = j < 16 ? q4[b].qs[j] & 15 : q4[b].qs[j - 16] >> 4;
            if (got != q) wrong++;
        }
    }
    CHECKF(wrong == 0, "%d q8_0/q8_1/q4_0 fields differ from the rules", wrong);
}

static int count_nonfinite(const float *y, int64_t n) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += !isfinite(y[i]);
    return bad;
}

/* Relative RMS bounds for rows of 512: all values negative (-|N(0,1)| - 0.5;
 * Q4_0 wastes its positive levels there), and N(0,1) scaled by 1e-3 (f16
 * super-scales near the subnormals). A few percent above the measured. */
static const struct {
    uint32_t type;
    double negative, small;
} special_bounds[] = {
    {MU_TYPE_F32, 0, 0},          {MU_TYPE_F16, 0.00023, 0.00024}, {MU_TYPE_BF16, 0.0019, 0.0018},
    {MU_TYPE_Q4_0, 0.075, 0.090}, {MU_TYPE_Q8_0, 0.0046, 0.0058},  {MU_TYPE_Q8_1, 0.0049, 0.0053},
    {MU_TYPE_Q4_K, 0.029, 0.076}, {MU_TYPE_Q5_K, 0.0142, 0.038},   {MU_TYPE_Q6_K, 0.0142, 0.0173},
    {MU_TYPE_Q8_K, 0.0051, 0.0076},
    {MU_TYPE_Q4_1, 0.031, 0.083}, {MU_TYPE_Q5_0, 0.038, 0.0435},  {MU_TYPE_Q5_1, 0.0157, 0.042},
    {MU_TYPE_Q2_K, 0.111, 0.279}, {MU_TYPE_Q3_K, 0.113, 0.148},   {MU_TYPE_IQ4_NL, 0.0686, 0.0776},
    {MU_TYPE_IQ4_XS, 0.0704, 0.0743},
};

static void test_special_inputs(void) {
    enum { N = 512 };
    float x[N], y[N];
    CHECK(COUNT(special_bounds) == COUNT(computable_ids));
    for (size_t t = 0; t < COUNT(special_bounds); t++) {
        const uint32_t type = special_bounds[t].type;
        const char *name = mu_type_name(type);
        void *blocks = malloc(mu_row_bytes(type, N));

        /* all zeros: exact zeros back */
        memset(x, 0, sizeof x);
        mu_quant_row(type, x, blocks, N);
        mu_dequant_row(type, blocks, y, N);
        int nonzero = 0;
        for (int i = 0; i < N; i++) nonzero += y[i] != 0.0f;
        CHECKF(nonzero == 0, "%s: zeros give %d nonzero values", name, nonzero);

        /* one spike, positive and negative: kept to 1%, zeros stay (near) zero */
        for (int sign = -1; sign <= 1; sign += 2) {
            memset(x, 0, sizeof x);
            x[300] = 5.0f * (float)sign;
            mu_quant_row(type, x, blocks, N);
            mu_dequant_row(type, blocks, y, N);
            CHECKF(fabsf(y[300] - x[300]) <= 0.05f, "%s spike %g -> %g", name, x[300], y[300]);
            float worst = 0;
            for (int i = 0; i < N; i++)
                if (i != 300) worst = fmaxf(worst, fabsf(y[i]));
            /* the IQ4 tables have no 0 level: a zero becomes the nearest, +-d */
            const bool zero_level = type != MU_TYPE_IQ4_NL && type != MU_TYPE_IQ4_XS;
            CHECKF(worst <= (sign > 0 && zero_level ? 0.0f : 0.1f), "%s: zeros beside a spike of %g become %g", name,
                   x[300], worst);
        }

        /* negative-dominated rows: all values below zero */
        uint64_t state = 21 + type;
        for (int i = 0; i < N; i++) x[i] = -fabsf(tl_rand_normal(&state)) - 0.5f;
        double error = relative_rms_error(type, x, N, y);
        CHECKF(error <= special_bounds[t].negative, "%s: all-negative row error %.5f", name, error);

        /* constant rows */
        for (int i = 0; i < N; i++) x[i] = -3.0f;
        error = relative_rms_error(type, x, N, y);
        CHECKF(error < 0.002, "%s: constant row error %.5f", name, error);

        /* tiny values: f16 scales lose precision in the subnormals, but the
         * result stays finite and no worse than returning zeros */
        for (int i = 0; i < N; i++) x[i] = tl_rand_normal(&state) * 1e-6f;
        error = relative_rms_error(type, x, N, y);
        CHECKF(count_nonfinite(y, N) == 0 && error <= 1.0, "%s: tiny values error %.4f", name, error);
        /* Q8_K's f32 scale makes it scale-invariant */
        if (type == MU_TYPE_Q8_K) CHECKF(error < 0.0091, "q8_K tiny values error %.5f", error);
        for (int i = 0; i < N; i++) x[i] = tl_rand_normal(&state) * 1e-3f;
        error = relative_rms_error(type, x, N, y);
        CHECKF(error <= special_bounds[t].small, "%s: values ~1e-3 error %.5f", name, error);

        /* huge values: the f16 scales saturate instead of becoming inf */
        if (type != MU_TYPE_F16) {
            for (int i = 0; i < N; i++) x[i] = tl_rand_normal(&state) * 1e9f;
            relative_rms_error(type, x, N, y);
            CHECKF(count_nonfinite(y, N) == 0, "%s: huge values give non-finite output", name);
        }
        free(blocks);
    }
}

static void test_dispatch(void) {
    float x[256] = {0}, y[256];
    uint8_t blocks[292] = {0};
    CHECK(mu_dequant_row(MU_TYPE_IQ2_XXS, blocks, y, 256) == MUSER_EUNSUPPORTED);
    CHECK(strstr(muser_last_error(), "IQ2_XXS") != NULL);
    CHECK(mu_quant_row(MU_TYPE_IQ3_S, x, blocks, 256) == MUSER_EUNSUPPORTED);
    CHECK(mu_dequant_row(4, blocks, y, 256) == MUSER_EINVAL);
    CHECK(mu_dequant_row(MU_TYPE_COUNT, blocks, y, 256) == MUSER_EINVAL);
    CHECK(mu_dequant_row(MU_TYPE_Q4_K, blocks, y, 100) == MUSER_EINVAL);
    CHECK(mu_quant_row(MU_TYPE_Q8_0, x, blocks, 33) == MUSER_EINVAL);
    CHECK(mu_quant_row(MU_TYPE_Q8_0, x, blocks, -32) == MUSER_EINVAL);
    for (int i = 0; i < 32; i++) x[i] = (float)i - 10.5f;
    CHECK(mu_quant_row(MU_TYPE_Q8_0, x, blocks, 32) == MUSER_OK);
    float direct[32];
    mu_dequant_row_q8_0(blocks, direct, 32);
    CHECK(mu_dequant_row(MU_TYPE_Q8_0, blocks, y, 32) == MUSER_OK);
    CHECK(memcmp(direct, y, sizeof direct) == 0);
    CHECK(mu_dequant_row(MU_TYPE_Q4_K, blocks, y, 0) == MUSER_OK);
}

/* ==== synthetic blocks =================================================== */

static const uint32_t random_types[] = {MU_TYPE_F32,  MU_TYPE_F16,  MU_TYPE_BF16, MU_TYPE_Q4_0, MU_TYPE_Q8_0,
                                        MU_TYPE_Q8_1, MU_TYPE_Q4_K, MU_TYPE_Q5_K, MU_TYPE_Q6_K, MU_TYPE_Q8_K,
                                        MU_TYPE_Q4_1, MU_TYPE_Q5_0, MU_TYPE_Q5_1, MU_TYPE_Q2_K, MU_TYPE_Q3_K,
                                        MU_TYPE_IQ4_NL, MU_TYPE_IQ4_XS};

static bool finite_half(uint16_t h) { return (h & 0x7C00) != 0x7C00; }

/* Every half in a block is finite, and the int8 quants avoid -128. */
static int invalid_fields(uint32_t type, const uint8_t *blocks, int64_t n_blocks) {
    int bad = 0;
    const size_t size = (size_t)mu_type_get(type)->block_bytes;
    for (int64_t b = 0; b < n_blocks; b++) {
        const uint8_t *p = blocks + (size_t)b * size;
        uint16_t h0 = (uint16_t)(p[0] | p[1] << 8), h1 = (uint16_t)(p[2] | p[3] << 8);
        switch (type) {
        case MU_TYPE_Q4_0: bad += !finite_half(h0); break;
        case MU_TYPE_Q8_0:
            bad += !finite_half(h0);
            for (int j = 0; j < 32; j++) bad += (int8_t)p[2 + j] == -128;
            break;
        case MU_TYPE_Q8_1: {
            bad += !finite_half(h0) || !finite_half(h1);
            int sum = 0;
            for (int j = 0; j < 32; j++) bad += (int8_t)p[4 + j] == -128, sum += (int8_t)p[4 + j];
            bad += h1 != mu_f32_to_f16(mu_f16_to_f32(h0) * (float)sum);
            break;
        }
        case MU_TYPE_Q4_K:
        case MU_TYPE_Q5_K:
            /* scales and mins make sense: positive d and dmin, min ~ 7.5 or 15.5 steps */
            bad += !finite_half(h0) || !finite_half(h1) || mu_f16_to_f32(h0) <= 0 || mu_f16_to_f32(h1) <= 0;
            break;
        case MU_TYPE_Q6_K: {
            uint16_t d = (uint16_t)(p[208] | p[209] << 8);
            bad += !finite_half(d);
            break;
        }
        case MU_TYPE_Q8_K: {
            const mu_block_q8_K *k = (const mu_block_q8_K *)p;
            bad += !isfinite(k->d);
            for (int g = 0; g < 16; g++) {
                int sum = 0;
                for (int j = 0; j < 16; j++) sum += k->qs[16 * g + j], bad += k->qs[16 * g + j] == -128;
                bad += k->bsums[g] != sum;
            }
            break;
        }
        default: break;
        }
    }
    return bad;
}

static void test_random_blocks(void) {
    const int64_t n = 256 * 256;
    float *y = malloc(sizeof(float) * n);
    uint8_t *blocks = malloc(mu_row_bytes(MU_TYPE_F32, n));
    uint8_t *again = malloc(mu_row_bytes(MU_TYPE_F32, n));
    const float scales[] = {1.0f, 0.02f};
    for (size_t t = 0; t < COUNT(random_types); t++) {
        const uint32_t type = random_types[t];
        const char *name = mu_type_name(type);
        const uint64_t bytes = mu_row_bytes(type, n);
        for (size_t s = 0; s < COUNT(scales); s++) {
            uint64_t state = 1234 + t, state_again = 1234 + t;
            CHECK(mu_random_blocks(type, blocks, n, &state, scales[s]) == MUSER_OK);
            CHECK(state != 1234 + t);
            CHECK(mu_dequant_row(type, blocks, y, n) == MUSER_OK);
            double sum = 0, sum2 = 0;
            for (int64_t i = 0; i < n; i++) sum += y[i], sum2 += (double)y[i] * y[i];
            const double mean = sum / (double)n, std = sqrt(sum2 / (double)n - mean * mean);
            CHECKF(count_nonfinite(y, n) == 0, "%s: non-finite random values", name);
            CHECKF(fabs(mean) < 0.03 * scales[s], "%s: mean %g at scale %g", name, mean, scales[s]);
            CHECKF(fabs(std / scales[s] - 1) < 0.1, "%s: std %g at scale %g", name, std, scales[s]);
            CHECKF(invalid_fields(type, blocks, n / mu_type_get(type)->block_elems) == 0, "%s: invalid fields", name);
            /* the same seed gives the same bytes, another seed others */
            CHECK(mu_random_blocks(type, again, n, &state_again, scales[s]) == MUSER_OK);
            CHECK(memcmp(blocks, again, bytes) == 0 && state == state_again);
            CHECK(mu_random_blocks(type, again, n, &state_again, scales[s]) == MUSER_OK);
            CHECK(memcmp(blocks, again, bytes) != 0);
        }
        /* a huge scale saturates the halves instead of making them inf */
        uint64_t state = 77;
        CHECK(mu_random_blocks(type, blocks, n, &state, 1e9f) == MUSER_OK);
        CHECK(mu_dequant_row(type, blocks, y, n) == MUSER_OK);
        CHECKF(type == MU_TYPE_F16 || count_nonfinite(y, n) == 0, "%s: huge scale gives non-finite values", name);
    }
    uint64_t state = 1;
    CHECK(mu_random_blocks(MU_TYPE_IQ2_XXS, blocks, 256, &state, 1.0f) == MUSER_EUNSUPPORTED);
    CHECK(mu_random_blocks(MU_TYPE_Q4_K, blocks, 100, &state, 1.0f) == MUSER_EINVAL);
    CHECK(mu_random_blocks(MU_TYPE_Q4_K, blocks, 256, &state, NAN) == MUSER_EINVAL);
    CHECK(mu_random_blocks(MU_TYPE_Q4_K, blocks, 256, &state, -1.0f) == MUSER_EINVAL);
    CHECK(mu_random_blocks(MU_TYPE_Q4_K, blocks, 256, &state, INFINITY) == MUSER_EINVAL);
    CHECK(mu_random_blocks(5, blocks, 256, &state, 1.0f) == MUSER_EINVAL);
    free(y);
    free(blocks);
    free(again);

    /* throughput, for information: the synth tool writes ~17 GB with this */
    const int64_t big = 256 * 65536; /* 16.8M weights, 9.4 MB of Q4_K */
    uint8_t *out = malloc(mu_row_bytes(MU_TYPE_Q4_K, big));
    memset(out, 0, mu_row_bytes(MU_TYPE_Q4_K, big)); /* time the writing, not the page faults */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(mu_random_blocks(MU_TYPE_Q4_K, out, big, &state, 0.02f) == MUSER_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("  random Q4_K blocks: %.0f MB/s\n", (double)mu_row_bytes(MU_TYPE_Q4_K, big) / seconds / 1e6);
    free(out);
}

int main(void) {
    test_traits();
    test_row_bytes();
    test_f16();
    test_bf16();
    test_plain_rows();
    test_q4_0_block();
    test_q8_0_block();
    test_scale_min_k4();
    test_q4_K_block();
    test_q5_K_block();
    test_q6_K_block();
    test_q8_K_block();
    test_operation_order();
    test_error_bounds();
    test_k_quant_choices();
    test_reference_rules();
    test_special_inputs();
    test_dispatch();
    test_random_blocks();
    return tl_finish("quant");
}
