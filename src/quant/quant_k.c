/* quant_k.c — scalar reference rows for the K-quants Q2_K, Q3_K, Q4_K,
 * Q5_K and Q6_K.
 *
 * Dequantization is written in ggml's float operation order (for Q4_K:
 * d1 = d*sc and m1 = dmin*m as floats, then d1*q - m1), so it matches
 * ggml's dequantize_row_* bit for bit. (The products are exact in f32:
 * 11-bit halves times small integers; the one rounding is Q4_K/Q5_K's
 * subtraction, and Q6_K's order shows only in the sign of a zero.)
 *
 * Quantization is Muser's own search, in the same spirit as ggml's
 * reference: fit each sub-block on its own (least squares over a sweep of
 * candidate steps, then a few rounds of reassigning levels), set the
 * super-block scales from the largest fits, then walk each sub-block's
 * integer scale (and min) from the rounded ratio to a local optimum of the
 * exact error of the dequantized values. The fits are unweighted: they
 * minimise the plain squared error. On N(0,1) rows the relative RMS error
 * is Q4_K 0.0700, Q5_K 0.0346, Q6_K 0.0172 (ggml's reference quantizers:
 * 0.0714, 0.0362, 0.0178). Q2_K and Q3_K are the same searches on groups
 * of 16 (Q2_K: the affine fit of Q4_K with 2-bit levels and 4-bit scales;
 * Q3_K: Q6_K's signed fit with levels -4..3 and 6-bit scales).
 */
#include "quant/quant_impl.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ==== Q2_K / Q4_K / Q5_K: sub-blocks with an unsigned scale and min ====== */

/* Least-squares a, b for x ~ a*L + b with the format's constraints b <= 0
 * (it can only subtract a min) and a >= 0. Returns the squared error. */
static float solve_affine(const float *x, const uint8_t *levels, int n, float *a_out, float *b_out) {
    double sum_l = 0, sum_ll = 0, sum_x = 0, sum_lx = 0;
    for (int i = 0; i < n; i++) {
        sum_l += levels[i];
        sum_ll += (double)levels[i] * levels[i];
        sum_x += x[i];
        sum_lx += (double)levels[i] * x[i];
    }
    double det = n * sum_ll - sum_l * sum_l;
    double a = 0, b = sum_x / n;
    if (det > 0) {
        a = (n * sum_lx - sum_l * sum_x) / det;
        b = (sum_ll * sum_x - sum_l * sum_lx) / det;
    }
    if (b > 0) { /* the best line needs a positive offset: pin it at 0 */
        b = 0;
        a = sum_ll > 0 ? sum_lx / sum_ll : 0;
    }
    if (a < 0) {
        a = 0;
        b = fmin(sum_x / n, 0);
    }
    float error = 0;
    for (int i = 0; i < n; i++) {
        float diff = (float)a * levels[i] + (float)b - x[i];
        error += diff * diff;
    }
    *a_out = (float)a;
    *b_out = (float)b;
    return error;
}

/* Fits one sub-block: x ~ scale*L - min with L in 0..nmax, scale >= 0 and
 * min >= 0. Sweeps the step (x range / t for t around nmax), solves each
 * candidate's levels by least squares, then refines the best by
 * reassigning levels to the nearest one until the error stops falling. */
static void fit_sub_block(const float *x, int n, int nmax, float *scale, float *min) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
    }
    lo = fminf(lo, 0.0f);
    if (!(hi > lo)) { /* constant (<= 0) or empty range */
        *scale = 0;
        *min = -lo;
        return;
    }
    uint8_t levels[32];
    float best_error = FLT_MAX, best_a = 0, best_b = lo;
    for (int step = -10; step <= 10; step++) {
        const float iscale = ((float)nmax + 0.1f * (float)step) / (hi - lo);
        for (int i = 0; i < n; i++) levels[i] = (uint8_t)clamp_int(mu_nearest_int(iscale * (x[i] - lo)), 0, nmax);
        float a, b, error = solve_affine(x, levels, n, &a, &b);
        if (error < best_error) {
            best_error = error;
            best_a = a;
            best_b = b;
        }
    }
    for (int round = 0; round < 4 && best_a > 0; round++) {
        const float inverse = 1.0f / best_a;
        for (int i = 0; i < n; i++)
            levels[i] = (uint8_t)clamp_int(mu_nearest_int((x[i] - best_b) * inverse), 0, nmax);
        float a, b, error = solve_affine(x, levels, n, &a, &b);
        if (!(error < best_error)) break;
        best_error = error;
        best_a = a;
        best_b = b;
    }
    *scale = best_a;
    *min = -best_b;
}

/* Squared error of a sub-block of n for integer scale sc and min m, with
 * each weight on its nearest level, computed exactly as the dequantizer
 * computes values. Writes those levels. */
static float affine_error(const float *x, int n, int nmax, float d, float dmin, int sc, int m, uint8_t *levels) {
    const float d1 = d * (float)sc, m1 = dmin * (float)m;
    const float inverse = d1 > 0 ? 1.0f / d1 : 0.0f;
    float error = 0;
    for (int i = 0; i < n; i++) {
        int q = clamp_int(mu_nearest_int((x[i] + m1) * inverse), 0, nmax);
        float diff = d1 * (float)q - m1 - x[i];
        levels[i] = (uint8_t)q;
        error += diff * diff;
    }
    return error;
}

/* Chooses the integer scale and min (0..smax) of one sub-block of n against
 * the stored super-scales d and dmin: starts from the rounded ratios and
 * moves to the best of the eight neighbouring (sc, m) pairs until none is
 * better, so the result is a local optimum of the exact error. Writes the
 * levels. */
static void choose_scale_min(const float *x, int n, int nmax, int smax, float d, float dmin, float scale, float min,
                             uint8_t *sc_out, uint8_t *m_out, uint8_t *levels) {
    int best_sc = d > 0 ? clamp_int(mu_nearest_int(scale / d), 0, smax) : 0;
    int best_m = dmin > 0 ? clamp_int(mu_nearest_int(min / dmin), 0, smax) : 0;
    float best_error = affine_error(x, n, nmax, d, dmin, best_sc, best_m, levels);
    for (bool moved = true; moved;) {
        moved = false;
        const int center_sc = best_sc, center_m = best_m;
        for (int sc = center_sc - 1; sc <= center_sc + 1; sc++) {
            for (int m = center_m - 1; m <= center_m + 1; m++) {
                if (sc < 0 || sc > smax || m < 0 || m > smax || (sc == center_sc && m == center_m)) continue;
                uint8_t candidate[32];
                float error = affine_error(x, n, nmax, d, dmin, sc, m, candidate);
                if (error < best_error) {
                    best_error = error;
                    best_sc = sc;
                    best_m = m;
                    memcpy(levels, candidate, (size_t)n);
                    moved = true;
                }
            }
        }
    }
    *sc_out = (uint8_t)best_sc;
    *m_out = (uint8_t)best_m;
}

/* Quantizes one 256-element super-block in sub-blocks of n (32: Q4_K and
 * Q5_K, 16: Q2_K) to levels 0..nmax, integer scales and mins 0..smax, and
 * the f16 super-scales d and dmin. */
static void quantize_super_block_affine(const float *x, int n, int nmax, int smax, uint16_t *d_out,
                                        uint16_t *dmin_out, uint8_t *sc, uint8_t *m, uint8_t levels[256]) {
    float scales[16], mins[16], max_scale = 0, max_min = 0;
    const int count = MU_QK_K / n;
    for (int j = 0; j < count; j++) {
        fit_sub_block(x + n * j, n, nmax, &scales[j], &mins[j]);
        max_scale = fmaxf(max_scale, scales[j]);
        max_min = fmaxf(max_min, mins[j]);
    }
    *d_out = mu_half_at_least(max_scale / (float)smax);
    *dmin_out = mu_half_at_least(max_min / (float)smax);
    const float d = mu_half_to_float(*d_out), dmin = mu_half_to_float(*dmin_out);
    for (int j = 0; j < count; j++)
        choose_scale_min(x + n * j, n, nmax, smax, d, dmin, scales[j], mins[j], &sc[j], &m[j], levels + n * j);
}

/* Q4_K's and Q5_K's header: eight 6-bit (scale, min) pairs. */
static void quantize_super_block_k4(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out, uint8_t packed[12],
                                    uint8_t levels[256]) {
    uint8_t sc[8], m[8];
    quantize_super_block_affine(x, 32, nmax, 63, d_out, dmin_out, sc, m, levels);
    mu_pack_scales_k4(packed, sc, m);
}

/* ---- Q2_K ------------------------------------------------------------------
 *   offset 0   scales[16] group g: scale = low nibble, min = high nibble
 *   offset 16  qs[64]     half h (128 weights) = bytes 32h..32h+31; weight
 *                         128h + 32s + l takes bits 2s..2s+1 of qs[32h + l]
 *   offset 80  d, dmin    f16, f16
 *   y = (d*sc)*q - (dmin*m), q in 0..3
 */
/* y = d1*q - m1 is d1*q + (-m1) exactly. */
void mu_int_block_q2_K(const void *block, mu_int_block *out) {
    const mu_block_q2_K *b = block;
    const float d = mu_half_to_float(b->d), dmin = mu_half_to_float(b->dmin);
    for (int g = 0; g < 16; g++) { /* one scale and min per group */
        const uint8_t packed = b->scales[g];
        out->scale[g] = d * (float)(packed & 0x0F);
        out->offset[g] = -(dmin * (float)(packed >> 4));
    }
    for (int w = 0; w < MU_QK_K; w++) out->q[w] = (int8_t)(b->qs[32 * (w / 128) + w % 32] >> 2 * (w % 128 / 32) & 3);
}

void mu_dequant_row_q2_K(const void *src, float *dst, int64_t n) {
    mu_dequant_via_ints(mu_int_block_q2_K, true, MU_QK_K, sizeof(mu_block_q2_K), src, dst, n);
}

void mu_quant_row_q2_K(const float *src, void *dst, int64_t n) {
    mu_block_q2_K *blocks = dst;
    for (int64_t b = 0; b < n / MU_QK_K; b++, src += MU_QK_K) {
        uint8_t levels[MU_QK_K], sc[16], m[16];
        quantize_super_block_affine(src, 16, 3, 15, &blocks[b].d, &blocks[b].dmin, sc, m, levels);
        for (int g = 0; g < 16; g++) blocks[b].scales[g] = (uint8_t)(sc[g] | m[g] << 4);
        memset(blocks[b].qs, 0, sizeof blocks[b].qs);
        for (int w = 0; w < MU_QK_K; w++) blocks[b].qs[32 * (w / 128) + w % 32] |= (uint8_t)(levels[w] << 2 * (w % 128 / 32));
    }
}

/* ---- Q4_K ------------------------------------------------------------------
 *   offset 0   d, dmin    f16, f16
 *   offset 4   scales[12] eight 6-bit (sc, m) pairs, see mu_pack_scales_k4
 *   offset 16  qs[128]    chunk c (64 weights) = bytes 32c..32c+31:
 *                         low nibbles: sub-block 2c, high nibbles: 2c+1
 *   y = (d*sc)*q - (dmin*m), q in 0..15
 */
void mu_dequant_row_q4_K(const void *src, float *dst, int64_t n) {
    const mu_block_q4_K *blocks = src;
    for (int64_t b = 0; b < n / MU_QK_K; b++) {
        const float d = mu_half_to_float(blocks[b].d), dmin = mu_half_to_float(blocks[b].dmin);
        const uint8_t *q = blocks[b].qs;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc, m;
            mu_get_scale_min_k4(2 * c, blocks[b].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            mu_get_scale_min_k4(2 * c + 1, blocks[b].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *dst++ = d1 * (float)(q[l] & 0x0F) - m1;
            for (int l = 0; l < 32; l++) *dst++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

void mu_quant_row_q4_K(const float *src, void *dst, int64_t n) {
    mu_block_q4_K *blocks = dst;
    for (int64_t b = 0; b < n / MU_QK_K; b++, src += MU_QK_K) {
        uint8_t levels[MU_QK_K];
        quantize_super_block_k4(src, 15, &blocks[b].d, &blocks[b].dmin, blocks[b].scales, levels);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                blocks[b].qs[32 * c + l] = (uint8_t)(levels[64 * c + l] | levels[64 * c + 32 + l] << 4);
    }
}

/* ---- Q5_K ------------------------------------------------------------------
 *   offset 0   d, dmin    f16, f16
 *   offset 4   scales[12] as Q4_K
 *   offset 16  qh[32]     fifth bits: weight 64c+l -> bit 2c of qh[l],
 *                         weight 64c+32+l -> bit 2c+1 of qh[l]
 *   offset 48  qs[128]    low 4 bits, as Q4_K's qs
 *   y = (d*sc)*q - (dmin*m), q in 0..31
 */
void mu_dequant_row_q5_K(const void *src, float *dst, int64_t n) {
    const mu_block_q5_K *blocks = src;
    for (int64_t b = 0; b < n / MU_QK_K; b++) {
        const float d = mu_half_to_float(blocks[b].d), dmin = mu_half_to_float(blocks[b].dmin);
        const uint8_t *q = blocks[b].qs, *qh = blocks[b].qh;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc, m;
            mu_get_scale_min_k4(2 * c, blocks[b].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            mu_get_scale_min_k4(2 * c + 1, blocks[b].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            const uint8_t low_bit = (uint8_t)(1u << (2 * c)), high_bit = (uint8_t)(2u << (2 * c));
            for (int l = 0; l < 32; l++) *dst++ = d1 * (float)((q[l] & 0x0F) + (qh[l] & low_bit ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *dst++ = d2 * (float)((q[l] >> 4) + (qh[l] & high_bit ? 16 : 0)) - m2;
        }
    }
}

void mu_quant_row_q5_K(const float *src, void *dst, int64_t n) {
    mu_block_q5_K *blocks = dst;
    for (int64_t b = 0; b < n / MU_QK_K; b++, src += MU_QK_K) {
        uint8_t levels[MU_QK_K];
        quantize_super_block_k4(src, 31, &blocks[b].d, &blocks[b].dmin, blocks[b].scales, levels);
        memset(blocks[b].qh, 0, sizeof blocks[b].qh);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const uint8_t lo = levels[64 * c + l], hi = levels[64 * c + 32 + l];
                blocks[b].qs[32 * c + l] = (uint8_t)((lo & 15) | (hi & 15) << 4);
                blocks[b].qh[l] |= (uint8_t)((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
            }
        }
    }
}

/* ==== Q3_K / Q6_K: sixteen groups of 16 with a signed integer scale ====== */

/* Fits one group: x ~ s*L with L in lmin..lmax = -lmin-1 (s of either
 * sign). Sweeps the step that maps the largest |x| onto the lmin end (the
 * end with no positive counterpart), keeps the least-squares s of the best
 * candidate, then reassigns levels to the nearest until the error stops
 * falling. */
static float fit_group_signed(const float *x, int lmin, int lmax) {
    const float max = mu_signed_absmax(x, 16);
    if (max == 0) return 0;
    float best_score = -1, best_scale = 0;
    for (int step = -10; step <= 10; step++) {
        const float iscale = -((float)-lmin + 0.1f * (float)step) / max;
        double sum_lx = 0, sum_ll = 0;
        for (int i = 0; i < 16; i++) {
            int l = clamp_int(mu_nearest_int(iscale * x[i]), lmin, lmax);
            sum_lx += (double)l * x[i];
            sum_ll += (double)l * l;
        }
        mu_keep_better_fit(sum_lx, sum_ll, &best_score, &best_scale);
    }
    for (int round = 0; round < 4 && best_scale != 0; round++) {
        const float inverse = 1.0f / best_scale;
        double sum_lx = 0, sum_ll = 0;
        for (int i = 0; i < 16; i++) {
            int l = clamp_int(mu_nearest_int(x[i] * inverse), lmin, lmax);
            sum_lx += (double)l * x[i];
            sum_ll += (double)l * l;
        }
        if (!mu_keep_better_fit(sum_lx, sum_ll, &best_score, &best_scale)) break;
    }
    return best_scale;
}

/* Squared error of a group of 16 for the integer scale sc, each weight on
 * its nearest level in lmin..lmax; writes the levels (q - lmin). */
static float signed_error(const float *x, float d, int sc, int lmin, int lmax, uint8_t *levels) {
    const float d1 = d * (float)sc;
    const float inverse = d1 != 0 ? 1.0f / d1 : 0.0f;
    float error = 0;
    for (int i = 0; i < 16; i++) {
        int q = clamp_int(mu_nearest_int(x[i] * inverse), lmin, lmax);
        float diff = d1 * (float)q - x[i];
        levels[i] = (uint8_t)(q - lmin);
        error += diff * diff;
    }
    return error;
}

/* Quantizes a 256-element super-block in sixteen groups of 16 to levels
 * lmin..lmax (stored as q - lmin) with integer scales smin..smax = -smin-1
 * and one signed f16 super-scale. Returns false for an all-zero block
 * (nothing written but zeros). */
static bool quantize_super_block_signed(const float *x, int lmin, int lmax, int smin, int smax, uint16_t *d_out,
                                        int sc_out[16], uint8_t levels[256]) {
    float scales[16], max_scale = 0;
    for (int g = 0; g < 16; g++) {
        scales[g] = fit_group_signed(x + 16 * g, lmin, lmax);
        if (fabsf(scales[g]) > fabsf(max_scale)) max_scale = scales[g];
    }
    *d_out = 0;
    memset(sc_out, 0, 16 * sizeof *sc_out);
    memset(levels, (uint8_t)-lmin, 256);
    if (max_scale == 0) return false;
    /* the largest scale goes to smin, the end with no positive counterpart */
    const float d_wanted = max_scale / (float)smin;
    *d_out = mu_half_at_least(fabsf(d_wanted));
    if (d_wanted < 0) *d_out |= 0x8000;
    const float d = mu_half_to_float(*d_out);
    if (d == 0) return false;
    for (int g = 0; g < 16; g++) {
        const float *xg = x + 16 * g;
        int best_sc = clamp_int(mu_nearest_int(scales[g] / d), smin, smax);
        float best_error = signed_error(xg, d, best_sc, lmin, lmax, levels + 16 * g);
        for (bool moved = true; moved;) { /* walk to a local optimum */
            moved = false;
            const int center = best_sc;
            for (int sc = center - 1; sc <= center + 1; sc += 2) {
                if (sc < smin || sc > smax) continue;
                uint8_t candidate[16];
                float error = signed_error(xg, d, sc, lmin, lmax, candidate);
                if (error < best_error) {
                    best_error = error;
                    best_sc = sc;
                    memcpy(levels + 16 * g, candidate, sizeof candidate);
                    moved = true;
                }
            }
        }
        sc_out[g] = best_sc;
    }
    return true;
}

/* ---- Q3_K ------------------------------------------------------------------
 *   offset 0    hmask[32]  third bits: weight 128h + 32s + l -> bit 4h+s of hmask[l]
 *   offset 32   qs[64]     low 2 bits, as Q2_K's qs
 *   offset 96   scales[12] sixteen 6-bit scales u_g: low 4 bits in byte g
 *                          (g < 8) or the high nibble of byte g-8, high 2
 *                          bits at bit 2*(g/4) of byte 8 + g%4
 *   offset 108  d          f16
 *   y = (d*(u_g - 32)) * q, q = low2 - (third bit ? 0 : 4), in -4..3
 */
static int q3_scale(const uint8_t s[12], int g) {
    const int low = g < 8 ? s[g] & 0x0F : s[g - 8] >> 4;
    return low | (s[8 + g % 4] >> 2 * (g / 4) & 3) << 4;
}

void mu_int_block_q3_K(const void *block, mu_int_block *out) {
    const mu_block_q3_K *b = block;
    const float d = mu_half_to_float(b->d);
    for (int g = 0; g < 16; g++) out->scale[g] = d * (float)(q3_scale(b->scales, g) - 32);
    for (int w = 0; w < MU_QK_K; w++) {
        const int l = w % 32, shift = w % 128 / 32, high = 4 * (w / 128) + shift;
        out->q[w] = (int8_t)((b->qs[32 * (w / 128) + l] >> 2 * shift & 3) - (b->hmask[l] >> high & 1 ? 0 : 4));
    }
}

void mu_dequant_row_q3_K(const void *src, float *dst, int64_t n) {
    mu_dequant_via_ints(mu_int_block_q3_K, false, MU_QK_K, sizeof(mu_block_q3_K), src, dst, n);
}

void mu_quant_row_q3_K(const float *src, void *dst, int64_t n) {
    mu_block_q3_K *blocks = dst;
    for (int64_t b = 0; b < n / MU_QK_K; b++, src += MU_QK_K) {
        mu_block_q3_K *out = &blocks[b];
        uint8_t levels[MU_QK_K]; /* q + 4, in 0..7 */
        int sc[16];
        memset(out, 0, sizeof *out);
        quantize_super_block_signed(src, -4, 3, -32, 31, &out->d, sc, levels);
        int u[16];
        for (int g = 0; g < 16; g++) u[g] = sc[g] + 32;
        mu_pack_scales_q3(out->scales, u);
        for (int w = 0; w < MU_QK_K; w++) {
            const int l = w % 32, shift = w % 128 / 32;
            out->qs[32 * (w / 128) + l] |= (uint8_t)((levels[w] & 3) << 2 * shift);
            out->hmask[l] |= (uint8_t)((levels[w] >> 2) << (4 * (w / 128) + shift));
        }
    }
}

/* ---- Q6_K ------------------------------------------------------------------
 *   offset 0    ql[128]    low 4 bits;  offset 128  qh[64]  high 2 bits
 *   offset 192  scales[16] int8, one per 16-weight group in output order
 *   offset 208  d          f16 (last)
 *   Half h (128 weights) uses ql' = ql + 64h, qh' = qh + 32h; for l in
 *   0..31 the weight 128h + 32k + l (k = 0..3) takes
 *     low 4 bits:  k=0 ql'[l] & 15, k=1 ql'[l+32] & 15, k=2 ql'[l] >> 4, k=3 ql'[l+32] >> 4
 *     high 2 bits: (qh'[l] >> 2k) & 3
 *   y = (d*sc)*(q - 32), q in 0..63
 */
void mu_dequant_row_q6_K(const void *src, float *dst, int64_t n) {
    const mu_block_q6_K *blocks = src;
    for (int64_t b = 0; b < n / MU_QK_K; b++) {
        const float d = mu_half_to_float(blocks[b].d);
        for (int h = 0; h < 2; h++, dst += 128) {
            const uint8_t *ql = blocks[b].ql + 64 * h, *qh = blocks[b].qh + 32 * h;
            const int8_t *sc = blocks[b].scales + 8 * h;
            for (int l = 0; l < 32; l++) {
                const int g = l / 16;
                const int q0 = ((ql[l] & 0x0F) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q1 = ((ql[l + 32] & 0x0F) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q2 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q3 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                dst[l] = d * (float)sc[g] * (float)q0;
                dst[l + 32] = d * (float)sc[g + 2] * (float)q1;
                dst[l + 64] = d * (float)sc[g + 4] * (float)q2;
                dst[l + 96] = d * (float)sc[g + 6] * (float)q3;
            }
        }
    }
}

void mu_quant_row_q6_K(const float *src, void *dst, int64_t n) {
    mu_block_q6_K *blocks = dst;
    for (int64_t b = 0; b < n / MU_QK_K; b++, src += MU_QK_K) {
        mu_block_q6_K *out = &blocks[b];
        uint8_t levels[MU_QK_K]; /* q + 32, in 0..63 */
        int sc[16];
        memset(out, 0, sizeof *out);
        if (!quantize_super_block_signed(src, -32, 31, -128, 127, &out->d, sc, levels)) continue;
        for (int g = 0; g < 16; g++) out->scales[g] = (int8_t)sc[g];
        for (int h = 0; h < 2; h++) {
            const uint8_t *q = levels + 128 * h;
            uint8_t *ql = out->ql + 64 * h, *qh = out->qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((q[l] & 15) | (q[l + 64] & 15) << 4);
                ql[l + 32] = (uint8_t)((q[l + 32] & 15) | (q[l + 96] & 15) << 4);
                qh[l] = (uint8_t)(q[l] >> 4 | (q[l + 32] >> 4) << 2 | (q[l + 64] >> 4) << 4 | (q[l + 96] >> 4) << 6);
            }
        }
    }
}
