/* test_quant_formats.c — the formats beyond the Muse Glimmer mixes: Q4_1,
 * Q5_0, Q5_1 (32-element blocks), Q2_K, Q3_K (K-quants in groups of 16),
 * IQ4_NL and IQ4_XS (a fixed table of 16 levels).
 *
 * Each format has a decoder written here from its layout (spec section 7,
 * ggml-common.h), in ggml's float order, that src/quant must match bit for
 * bit on random bytes; hand blocks pin spot values; the fixed-rule
 * quantizers (Q4_1, Q5_0, Q5_1) are recomputed from their rules; the
 * search quantizers must end at local optima and stay under measured
 * error bounds.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "muser.h"
#include "quant/quant.h"
#include "testlib.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static bool same_bits(float a, float b) { return float_bits(a) == float_bits(b); }

static uint16_t get_half(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static void put_half(uint8_t *p, uint16_t h) {
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}
static float half_at(const uint8_t *p) { return mu_f16_to_f32(get_half(p)); }

/* ggml's kvalues_iq4nl, written out again here */
static const int iq4_table[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* ==== independent decoders (one block each, ggml's order) ================ */

/* Q4_1 and Q5_1: q*d + m; Q5_0: (q - 16)*d. The fifth bit of weight j is
 * bit j of the little-endian u32 qh. */
static void decode_q4_1(const uint8_t *b, float *y) {
    const float d = half_at(b), m = half_at(b + 2);
    for (int j = 0; j < 32; j++) {
        const int q = j < 16 ? b[4 + j] & 15 : b[4 + j - 16] >> 4;
        volatile float prod = (float)q * d;
        y[j] = prod + m;
    }
}

static int fifth_bit(const uint8_t *qh, int j) { return qh[j / 8] >> (j % 8) & 1; }

static void decode_q5_0(const uint8_t *b, float *y) {
    const float d = half_at(b);
    for (int j = 0; j < 32; j++) {
        const int low = j < 16 ? b[6 + j] & 15 : b[6 + j - 16] >> 4;
        y[j] = (float)((low | fifth_bit(b + 2, j) << 4) - 16) * d;
    }
}

static void decode_q5_1(const uint8_t *b, float *y) {
    const float d = half_at(b), m = half_at(b + 2);
    for (int j = 0; j < 32; j++) {
        const int low = j < 16 ? b[8 + j] & 15 : b[8 + j - 16] >> 4;
        volatile float prod = (float)(low | fifth_bit(b + 4, j) << 4) * d;
        y[j] = prod + m;
    }
}

/* Q2_K: scales[16] at 0, qs[64] at 16, d at 80, dmin at 82. Weight e in
 * half h = e/128, pass s = e%128/32, lane l = e%32: bits 2s of qs[32h + l];
 * group e/16. y = (d*sc)*q - (dmin*m). */
static void decode_q2_K(const uint8_t *b, float *y) {
    const float d = half_at(b + 80), dmin = half_at(b + 82);
    for (int e = 0; e < 256; e++) {
        const int h = e / 128, s = e % 128 / 32, l = e % 32, g = e / 16;
        const int q = b[16 + 32 * h + l] >> 2 * s & 3;
        volatile float d1 = d * (float)(b[g] & 15), m1 = dmin * (float)(b[g] >> 4), prod = d1 * (float)q;
        y[e] = prod - m1;
    }
}

/* Q3_K: hmask[32] at 0, qs[64] at 32, scales[12] at 96, d at 108. The
 * 6-bit scale u_g: low 4 bits = scales[g] & 15 (g < 8) or scales[g-8] >> 4,
 * high 2 bits = scales[8 + g%4] >> 2*(g/4). y = (d*(u_g-32))*q with q the
 * 2 low bits minus 4 unless the hmask bit 4h+s of byte l is set. */
static void decode_q3_K(const uint8_t *b, float *y) {
    const float d = half_at(b + 108);
    for (int e = 0; e < 256; e++) {
        const int h = e / 128, s = e % 128 / 32, l = e % 32, g = e / 16;
        const uint8_t *sc = b + 96;
        const int u = (g < 8 ? sc[g] & 15 : sc[g - 8] >> 4) | (sc[8 + g % 4] >> 2 * (g / 4) & 3) << 4;
        const int q = (b[32 + 32 * h + l] >> 2 * s & 3) - ((b[l] >> (4 * h + s) & 1) ? 0 : 4);
        volatile float d1 = d * (float)(u - 32);
        y[e] = d1 * (float)q;
    }
}

static void decode_iq4_nl(const uint8_t *b, float *y) {
    const float d = half_at(b);
    for (int j = 0; j < 32; j++) y[j] = d * (float)iq4_table[j < 16 ? b[2 + j] & 15 : b[2 + j - 16] >> 4];
}

/* IQ4_XS: d at 0, scales_h (u16) at 2, scales_l[4] at 4, qs[128] at 8.
 * y = (d*(ls-32))*level. The products are exact in f32 (11 x 6 x 7 bits),
 * so the order shows only in the sign of zero: ls = 32 with a negative
 * level gives -0 (d > 0), where d*((ls-32)*level) gives +0. Q3_K alike. */
static void decode_iq4_xs(const uint8_t *b, float *y) {
    const float d = half_at(b);
    const int scales_h = get_half(b + 2);
    for (int e = 0; e < 256; e++) {
        const int j = e / 32, i = e % 32;
        const int ls = (b[4 + j / 2] >> 4 * (j % 2) & 15) | (scales_h >> 2 * j & 3) << 4;
        const uint8_t byte = b[8 + 16 * j + i % 16];
        volatile float dl = d * (float)(ls - 32);
        y[e] = dl * (float)iq4_table[i < 16 ? byte & 15 : byte >> 4];
    }
}

typedef void (*decode_fn)(const uint8_t *block, float *y);

/* Each format with its decoder and the offsets of its f16 fields. */
static const struct {
    uint32_t type;
    decode_fn decode;
    int halves[2]; /* -1: none */
} formats[] = {
    {MU_TYPE_Q4_1, decode_q4_1, {0, 2}},     {MU_TYPE_Q5_0, decode_q5_0, {0, -1}},
    {MU_TYPE_Q5_1, decode_q5_1, {0, 2}},     {MU_TYPE_Q2_K, decode_q2_K, {80, 82}},
    {MU_TYPE_Q3_K, decode_q3_K, {108, -1}},  {MU_TYPE_IQ4_NL, decode_iq4_nl, {0, -1}},
    {MU_TYPE_IQ4_XS, decode_iq4_xs, {0, -1}},
};

/* Random blocks (finite f16 scales of either sign, a wide exponent range)
 * decode bit for bit as the layout says. */
static void test_random_bytes(void) {
    enum { BLOCKS = 96 };
    uint64_t state = 2024;
    for (size_t f = 0; f < COUNT(formats); f++) {
        const mu_type_traits *tr = mu_type_get(formats[f].type);
        CHECK(tr && tr->dequant_row && tr->quant_row);
        const int64_t n = (int64_t)BLOCKS * tr->block_elems;
        uint8_t *blocks = malloc(mu_row_bytes(formats[f].type, n));
        float *y = malloc(sizeof(float) * (size_t)n), want[256];
        for (int b = 0; b < BLOCKS; b++) {
            uint8_t *p = blocks + (size_t)b * (size_t)tr->block_bytes;
            for (int i = 0; i < tr->block_bytes; i++) p[i] = (uint8_t)tl_rand_u64(&state);
            for (int k = 0; k < 2; k++)
                if (formats[f].halves[k] >= 0)
                    put_half(p + formats[f].halves[k],
                             (uint16_t)((0x0400 + tl_rand_u64(&state) % 0x7000) | (tl_rand_u64(&state) & 0x8000)));
        }
        CHECK(mu_dequant_row(formats[f].type, blocks, y, n) == MUSER_OK);
        int wrong = 0, nonzero = 0, negative_zeros = 0;
        for (int b = 0; b < BLOCKS; b++) {
            formats[f].decode(blocks + (size_t)b * (size_t)tr->block_bytes, want);
            for (int i = 0; i < tr->block_elems; i++) {
                wrong += !same_bits(y[b * tr->block_elems + i], want[i]);
                nonzero += want[i] != 0;
                negative_zeros += want[i] == 0 && signbit(want[i]);
            }
        }
        CHECKF(wrong == 0, "%s: %d values differ from the layout", tr->name, wrong);
        CHECKF(nonzero > n / 2, "%s: only %d of %lld values are nonzero", tr->name, nonzero, (long long)n);
        /* where the order shows at all, the data must exercise it */
        if (formats[f].type == MU_TYPE_Q3_K || formats[f].type == MU_TYPE_IQ4_XS)
            CHECKF(negative_zeros > 10, "%s: only %d values tell the orders apart", tr->name, negative_zeros);
        free(blocks);
        free(y);
    }
}

/* ==== hand blocks ======================================================== */

static void test_hand_blocks(void) {
    float y[256];
    /* Q4_1: d = 0.5, m = -3: byte j = j | (15-j) << 4 */
    uint8_t q41[20];
    put_half(q41, 0x3800);
    put_half(q41 + 2, 0xC200);
    for (int j = 0; j < 16; j++) q41[4 + j] = (uint8_t)(j | (15 - j) << 4);
    mu_dequant_row_q4_1(q41, y, 32);
    CHECK(y[0] == -3.0f && y[15] == 4.5f && y[16] == 4.5f && y[31] == -3.0f && y[6] == 0.0f);

    /* Q5_0: d = 0.25; qh = 0x80000001: weights 0 and 31 get their fifth bit */
    uint8_t q50[22] = {0};
    put_half(q50, 0x3400);
    q50[2] = 0x01;
    q50[5] = 0x80;
    q50[6 + 0] = 0x03;  /* weight 0: 3 | 16 -> 19 - 16 = 3;  weight 16: 0 - 16 */
    q50[6 + 15] = 0xF0; /* weight 15: 0 - 16;  weight 31: 15 | 16 -> 31 - 16 = 15 */
    mu_dequant_row_q5_0(q50, y, 32);
    CHECK(y[0] == 0.75f && y[16] == -4.0f && y[15] == -4.0f && y[31] == 3.75f && y[1] == -4.0f);

    /* Q5_1: d = 1, m = 0.5; qh bit 20 -> weight 20 = (qs[4] >> 4 = 2) | 16 = 18 */
    uint8_t q51[24] = {0};
    put_half(q51, 0x3C00);
    put_half(q51 + 2, 0x3800);
    q51[4 + 2] = 0x10;
    q51[8 + 4] = 0x27;
    mu_dequant_row_q5_1(q51, y, 32);
    CHECK(y[4] == 7.5f && y[20] == 18.5f && y[0] == 0.5f);

    /* Q2_K: d = 0.5, dmin = 0.25; group 5 (weights 80..95: half 0, pass 2,
     * lanes 16..31) has scale 3, min 2; qs[16+16] = 0b00110000 -> q = 3 */
    uint8_t q2[84] = {0};
    q2[5] = 0x23;
    q2[16 + 16] = 0x30;
    put_half(q2 + 80, 0x3800);
    put_half(q2 + 82, 0x3400);
    mu_dequant_row_q2_K(q2, y, 256);
    CHECK(y[80] == 0.5f * 3 * 3 - 0.25f * 2 && y[81] == -0.5f && y[79] == 0.0f && y[16] == 0.0f);

    /* Q3_K: d = 0.5; group 9 (weights 144..159: half 1, pass 0, lanes
     * 16..31): u = (scales[1] >> 4 = 5) | (scales[9] >> 4 & 3 = 2) << 4 = 37,
     * so d1 = 2.5; weight 144 has low bits 3 (qs[32+32+16]) and its hmask bit
     * 4 (byte 16) set: q = 3; weight 145 has neither: q = -4 */
    uint8_t q3[110] = {0};
    q3[16] = 0x10;
    q3[32 + 32 + 16] = 0x03;
    q3[96 + 1] = 0x50;
    q3[96 + 9] = 0x20;
    put_half(q3 + 108, 0x3800);
    mu_dequant_row_q3_K(q3, y, 256);
    CHECK(y[144] == 7.5f && y[145] == -10.0f);
    CHECK(y[0] == 0.5f * -32 * -4); /* u = 0: scale -32, q = -4 */

    /* IQ4_NL: d = 2: byte 0 = 0xF0 -> weight 0 level -127, weight 16 level 113 */
    uint8_t nl[18] = {0};
    put_half(nl, 0x4000);
    nl[2] = 0xF0;
    nl[3] = 0x98;
    mu_dequant_row_iq4_nl(nl, y, 32);
    CHECK(y[0] == -254.0f && y[16] == 226.0f && y[1] == 2.0f && y[17] == 26.0f && y[2] == -254.0f);

    /* IQ4_XS: d = 0.5; sub-block 3: ls = (scales_l[1] >> 4 = 0xA) | (scales_h
     * >> 6 & 3 = 2) << 4 = 42 -> dl = 5; its first byte 0x7F: weight 96 level
     * 113, weight 112 level -10 */
    uint8_t xs[136] = {0};
    put_half(xs, 0x3800);
    put_half(xs + 2, 0x0080);
    xs[4 + 1] = 0xA0;
    xs[8 + 48] = 0x7F;
    mu_dequant_row_iq4_xs(xs, y, 256);
    CHECK(y[96] == 565.0f && y[112] == -50.0f && y[97] == 5.0f * -127);
    CHECK(y[0] == 0.5f * -32 * -127); /* ls = 0 */
}

/* ==== quantizers =========================================================== */

/* Q4_1, Q5_0 and Q5_1 against their rules, recomputed here. */
static void test_reference_rules(void) {
    enum { N = 2048 };
    static float x[N];
    uint64_t state = 12;
    for (int i = 0; i < N; i++) x[i] = tl_rand_normal(&state) * (i % 89 == 0 ? 6.0f : 1.0f) + (i / 512 == 2 ? 2.0f : 0);
    static mu_block_q4_1 q41[N / 32];
    static mu_block_q5_0 q50[N / 32];
    static mu_block_q5_1 q51[N / 32];
    CHECK(mu_quant_row(MU_TYPE_Q4_1, x, q41, N) == MUSER_OK);
    CHECK(mu_quant_row(MU_TYPE_Q5_0, x, q50, N) == MUSER_OK);
    CHECK(mu_quant_row(MU_TYPE_Q5_1, x, q51, N) == MUSER_OK);
    int wrong = 0;
    for (int b = 0; b < N / 32; b++) {
        const float *xb = x + 32 * b;
        float lo = xb[0], hi = xb[0], amax = 0, max = 0;
        for (int j = 0; j < 32; j++) {
            lo = fminf(lo, xb[j]), hi = fmaxf(hi, xb[j]);
            if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]), max = xb[j];
        }
        const float d4 = (hi - lo) / 15, d5 = (hi - lo) / 31, d0 = max / -16;
        wrong += q41[b].d != mu_f32_to_f16(d4) || q41[b].m != mu_f32_to_f16(lo);
        wrong += q51[b].d != mu_f32_to_f16(d5) || q51[b].m != mu_f32_to_f16(lo);
        wrong += q50[b].d != mu_f32_to_f16(d0);
        const uint32_t qh0 = (uint32_t)q50[b].qh[0] | (uint32_t)q50[b].qh[1] << 8 | (uint32_t)q50[b].qh[2] << 16 |
                             (uint32_t)q50[b].qh[3] << 24;
        const uint32_t qh1 = (uint32_t)q51[b].qh[0] | (uint32_t)q51[b].qh[1] << 8 | (uint32_t)q51[b].qh[2] << 16 |
                             (uint32_t)q51[b].qh[3] << 24;
        for (int j = 0; j < 32; j++) {
            volatile float s4 = (xb[j] - lo) * (1.0f / d4), s5 = (xb[j] - lo) * (1.0f / d5), s0 = xb[j] * (1.0f / d0);
            int want4 = (int)(s4 + 0.5f), want5 = (int)(s5 + 0.5f), want0 = (int)(s0 + 16.5f);
            want4 = want4 > 15 ? 15 : want4;
            want5 = want5 > 31 ? 31 : want5;
            want0 = want0 > 31 ? 31 : want0;
            const int byte = j % 16, shift = j < 16 ? 0 : 4;
            wrong += (q41[b].qs[byte] >> shift & 15) != want4;
            wrong += ((q51[b].qs[byte] >> shift & 15) | (int)(qh1 >> j & 1) << 4) != want5;
            wrong += ((q50[b].qs[byte] >> shift & 15) | (int)(qh0 >> j & 1) << 4) != want0;
        }
    }
    CHECKF(wrong == 0, "%d q4_1/q5_0/q5_1 fields differ from the rules", wrong);
}

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
    return sqrt(error / signal);
}

/* A few percent above the worst of the lengths below on N(0,1) rows. For
 * scale: Q4_0 measures 0.089 and Q4_K 0.070 on the same rows
 * (test_quant). */
static const struct {
    uint32_t type;
    double bound;
} error_bounds[] = {
    {MU_TYPE_Q4_1, 0.0815}, {MU_TYPE_Q5_0, 0.0443},   {MU_TYPE_Q5_1, 0.0389},   {MU_TYPE_Q2_K, 0.272},
    {MU_TYPE_Q3_K, 0.149},  {MU_TYPE_IQ4_NL, 0.0805}, {MU_TYPE_IQ4_XS, 0.0764},
};

static void test_error_bounds(void) {
    const int64_t lengths[] = {256, 4096, 19968};
    float *x = malloc(sizeof(float) * 19968), *y = malloc(sizeof(float) * 19968);
    for (size_t t = 0; t < COUNT(error_bounds); t++) {
        const uint32_t type = error_bounds[t].type;
        for (size_t li = 0; li < COUNT(lengths); li++) {
            const int64_t n = lengths[li];
            uint64_t state = 3 * n + type;
            for (int64_t i = 0; i < n; i++) x[i] = tl_rand_normal(&state);
            const double error = relative_rms_error(type, x, n, y);
            CHECKF(error < error_bounds[t].bound, "%s n=%lld: relative RMS error %.5f >= %.5f", mu_type_name(type),
                   (long long)n, error, error_bounds[t].bound);
            if (n == 19968) printf("  %-6s n=%-6lld relative RMS error %.6f\n", mu_type_name(type), (long long)n, error);
        }
    }
    free(x);
    free(y);
}

/* Squared error of n weights against the values v(q) for q in 0..levels-1,
 * each weight on its nearest value. */
static float nearest_error(const float *x, int n, const float *values, int levels) {
    float error = 0;
    for (int i = 0; i < n; i++) {
        float best = INFINITY;
        for (int q = 0; q < levels; q++) best = fminf(best, fabsf(values[q] - x[i]));
        error += best * best;
    }
    return error;
}

static float chosen_error(const float *x, const float *y, int n) {
    float error = 0;
    for (int i = 0; i < n; i++) error += (y[i] - x[i]) * (y[i] - x[i]);
    return error;
}

/* The searches end at local optima: every weight sits on its nearest
 * value, and no neighbouring integer scale (or min) of a group does
 * better. Read back from the bytes. */
static void test_search_choices(void) {
    enum { N = 2048 };
    static float x[N], y[N];
    uint64_t state = 41;
    for (int i = 0; i < N; i++) x[i] = tl_rand_normal(&state) + (i / 512 == 1 ? 0.7f : 0.0f);
    int off[3] = {0}, improvable[3] = {0};

    /* Q2_K: (d*sc)*q - dmin*m, sc and m in 0..15, q in 0..3 */
    static mu_block_q2_K q2[N / 256];
    mu_quant_row_q2_K(x, q2, N);
    mu_dequant_row_q2_K(q2, y, N);
    for (int b = 0; b < N / 256; b++) {
        const float d = mu_f16_to_f32(q2[b].d), dmin = mu_f16_to_f32(q2[b].dmin);
        for (int g = 0; g < 16; g++) {
            const float *xg = x + 256 * b + 16 * g;
            const int sc = q2[b].scales[g] & 15, m = q2[b].scales[g] >> 4;
            const float chosen = chosen_error(xg, y + 256 * b + 16 * g, 16);
            for (int ds = -1; ds <= 1; ds++)
                for (int dm = -1; dm <= 1; dm++) {
                    if (sc + ds < 0 || sc + ds > 15 || m + dm < 0 || m + dm > 15) continue;
                    float values[4];
                    for (int q = 0; q < 4; q++) values[q] = d * (float)(sc + ds) * (float)q - dmin * (float)(m + dm);
                    const float error = nearest_error(xg, 16, values, 4);
                    if (ds == 0 && dm == 0) off[0] += chosen > error * 1.0001f + 1e-12f;
                    else improvable[0] += error < chosen * 0.9999f;
                }
        }
    }

    /* Q3_K: (d*sc)*q, sc in -32..31, q in -4..3 */
    static mu_block_q3_K q3[N / 256];
    mu_quant_row_q3_K(x, q3, N);
    mu_dequant_row_q3_K(q3, y, N);
    for (int b = 0; b < N / 256; b++) {
        const float d = mu_f16_to_f32(q3[b].d);
        for (int g = 0; g < 16; g++) {
            const uint8_t *s = q3[b].scales;
            const int sc = ((g < 8 ? s[g] & 15 : s[g - 8] >> 4) | (s[8 + g % 4] >> 2 * (g / 4) & 3) << 4) - 32;
            const float *xg = x + 256 * b + 16 * g;
            const float chosen = chosen_error(xg, y + 256 * b + 16 * g, 16);
            for (int ds = -1; ds <= 1; ds++) {
                if (sc + ds < -32 || sc + ds > 31) continue;
                float values[8];
                for (int q = 0; q < 8; q++) values[q] = d * (float)(sc + ds) * (float)(q - 4);
                const float error = nearest_error(xg, 16, values, 8);
                if (ds == 0) off[1] += chosen > error * 1.0001f + 1e-12f;
                else improvable[1] += error < chosen * 0.9999f;
            }
        }
    }

    /* IQ4_XS: (d*(ls-32))*level, ls in 0..63 */
    static mu_block_iq4_xs xs[N / 256];
    mu_quant_row_iq4_xs(x, xs, N);
    mu_dequant_row_iq4_xs(xs, y, N);
    for (int b = 0; b < N / 256; b++) {
        const float d = mu_f16_to_f32(xs[b].d);
        for (int j = 0; j < 8; j++) {
            const int sc = ((xs[b].scales_l[j / 2] >> 4 * (j % 2) & 15) | (xs[b].scales_h >> 2 * j & 3) << 4) - 32;
            const float *xj = x + 256 * b + 32 * j;
            const float chosen = chosen_error(xj, y + 256 * b + 32 * j, 32);
            for (int ds = -1; ds <= 1; ds++) {
                if (sc + ds < -32 || sc + ds > 31) continue;
                float values[16];
                for (int q = 0; q < 16; q++) values[q] = d * (float)(sc + ds) * (float)iq4_table[q];
                const float error = nearest_error(xj, 32, values, 16);
                if (ds == 0) off[2] += chosen > error * 1.0001f + 1e-12f;
                else improvable[2] += error < chosen * 0.9999f;
            }
        }
    }
    const char *names[3] = {"Q2_K", "Q3_K", "IQ4_XS"};
    for (int t = 0; t < 3; t++) {
        CHECKF(off[t] == 0, "%s: %d groups off their nearest levels", names[t], off[t]);
        CHECKF(improvable[t] == 0, "%s: %d groups improvable by a neighbouring scale", names[t], improvable[t]);
    }

    /* IQ4_NL: every weight on its nearest level of the stored d */
    static mu_block_iq4_nl nl[N / 32];
    mu_quant_row_iq4_nl(x, nl, N);
    mu_dequant_row_iq4_nl(nl, y, N);
    int nl_off = 0;
    for (int b = 0; b < N / 32; b++) {
        float values[16];
        for (int q = 0; q < 16; q++) values[q] = mu_f16_to_f32(nl[b].d) * (float)iq4_table[q];
        nl_off += chosen_error(x + 32 * b, y + 32 * b, 32) > nearest_error(x + 32 * b, 32, values, 16) * 1.0001f + 1e-12f;
    }
    CHECKF(nl_off == 0, "IQ4_NL: %d blocks off their nearest levels", nl_off);
}

/* quantize(dequantize(q)) == q: the bytes of a quantized row are a fixed
 * point for the rule quantizers whose values land exactly on their levels
 * (affine rows of Q4_1 and Q5_1 with exact f16 steps). */
static void test_fixed_points(void) {
    float x[64], y[64];
    for (int i = 0; i < 64; i++) x[i] = -2.0f + 0.25f * (float)(i * 7 % 16); /* min -2, step 0.25, 16 levels */
    mu_block_q4_1 a[2], b[2];
    mu_quant_row_q4_1(x, a, 64);
    mu_dequant_row_q4_1(a, y, 64);
    CHECK(memcmp(x, y, sizeof x) == 0);
    mu_quant_row_q4_1(y, b, 64);
    CHECK(memcmp(a, b, sizeof a) == 0);
    for (int i = 0; i < 64; i++) x[i] = 1.0f + 0.5f * (float)(i * 11 % 32);
    mu_block_q5_1 c[2], e[2];
    mu_quant_row_q5_1(x, c, 64);
    mu_dequant_row_q5_1(c, y, 64);
    CHECK(memcmp(x, y, sizeof x) == 0);
    mu_quant_row_q5_1(y, e, 64);
    CHECK(memcmp(c, e, sizeof c) == 0);
}

int main(void) {
    test_random_bytes();
    test_hand_blocks();
    test_reference_rules();
    test_error_bounds();
    test_search_choices();
    test_fixed_points();
    return tl_finish("quant_formats");
}
