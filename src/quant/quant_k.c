/* quant_k.c — scalar reference rows for the K-quants Q4_K, Q5_K, Q6_K.
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
 * 0.0714, 0.0362, 0.0178).
 */
#include "quant/quant_impl.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The least f16 >= v for a super-scale v >= 0, saturated at 65504 rather
 * than inf. Rounding up keeps the largest sub-block scale within its
 * integer range even where f16 is coarse (subnormal super-scales). */
static uint16_t half_at_least(float v) {
    if (!(v < MU_MAX_HALF)) return mu_float_to_half(MU_MAX_HALF);
    uint16_t h = mu_float_to_half(v);
    if (mu_half_to_float(h) < v) h++;
    return h;
}

/* ==== Q4_K / Q5_K: eight sub-blocks of 32 with a 6-bit scale and min ====== */

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

/* Squared error of a sub-block of 32 for integer scale sc and min m, with
 * each weight on its nearest level, computed exactly as the dequantizer
 * computes values. Writes those levels. */
static float k4_error(const float *x, int nmax, float d, float dmin, int sc, int m, uint8_t *levels) {
    const float d1 = d * (float)sc, m1 = dmin * (float)m;
    const float inverse = d1 > 0 ? 1.0f / d1 : 0.0f;
    float error = 0;
    for (int i = 0; i < 32; i++) {
        int q = clamp_int(mu_nearest_int((x[i] + m1) * inverse), 0, nmax);
        float diff = d1 * (float)q - m1 - x[i];
        levels[i] = (uint8_t)q;
        error += diff * diff;
    }
    return error;
}

/* Chooses the 6-bit scale and min of one sub-block against the stored
 * super-scales d and dmin: starts from the rounded ratios and moves to the
 * best of the eight neighbouring (sc, m) pairs until none is better, so
 * the result is a local optimum of the exact error. Writes the levels. */
static void choose_scale_min(const float *x, int nmax, float d, float dmin, float scale, float min, uint8_t *sc_out,
                             uint8_t *m_out, uint8_t *levels) {
    int best_sc = d > 0 ? clamp_int(mu_nearest_int(scale / d), 0, 63) : 0;
    int best_m = dmin > 0 ? clamp_int(mu_nearest_int(min / dmin), 0, 63) : 0;
    float best_error = k4_error(x, nmax, d, dmin, best_sc, best_m, levels);
    for (bool moved = true; moved;) {
        moved = false;
        const int center_sc = best_sc, center_m = best_m;
        for (int sc = center_sc - 1; sc <= center_sc + 1; sc++) {
            for (int m = center_m - 1; m <= center_m + 1; m++) {
                if (sc < 0 || sc > 63 || m < 0 || m > 63 || (sc == center_sc && m == center_m)) continue;
                uint8_t candidate[32];
                float error = k4_error(x, nmax, d, dmin, sc, m, candidate);
                if (error < best_error) {
                    best_error = error;
                    best_sc = sc;
                    best_m = m;
                    memcpy(levels, candidate, sizeof candidate);
                    moved = true;
                }
            }
        }
    }
    *sc_out = (uint8_t)best_sc;
    *m_out = (uint8_t)best_m;
}

/* Quantizes one 256-element super-block to levels 0..nmax (15 or 31) and
 * the header shared by Q4_K and Q5_K. */
static void quantize_super_block_k4(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out, uint8_t packed[12],
                                    uint8_t levels[256]) {
    float scales[8], mins[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        fit_sub_block(x + 32 * j, 32, nmax, &scales[j], &mins[j]);
        max_scale = fmaxf(max_scale, scales[j]);
        max_min = fmaxf(max_min, mins[j]);
    }
    *d_out = half_at_least(max_scale / 63.0f);
    *dmin_out = half_at_least(max_min / 63.0f);
    const float d = mu_half_to_float(*d_out), dmin = mu_half_to_float(*dmin_out);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++)
        choose_scale_min(x + 32 * j, nmax, d, dmin, scales[j], mins[j], &sc[j], &m[j], levels + 32 * j);
    mu_pack_scales_k4(packed, sc, m);
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

/* ==== Q6_K: sixteen groups of 16 with a signed 8-bit scale ================ */

/* Fits one group: x ~ s*L with L in -32..31 (s of either sign). Sweeps the
 * step that maps the largest |x| onto the -32 end (the end with no +32
 * counterpart), keeps the least-squares s of the best candidate, then
 * reassigns levels to the nearest until the error stops falling. */
static float fit_group_q6(const float *x) {
    const float max = mu_signed_absmax(x, 16);
    if (max == 0) return 0;
    float best_score = -1, best_scale = 0;
    /* for a fixed level set the error is sum x^2 - (sum xL)^2 / sum L^2 */
    for (int step = -10; step <= 10; step++) {
        const float iscale = -(32.0f + 0.1f * (float)step) / max;
        double sum_lx = 0, sum_ll = 0;
        for (int i = 0; i < 16; i++) {
            int l = clamp_int(mu_nearest_int(iscale * x[i]), -32, 31);
            sum_lx += (double)l * x[i];
            sum_ll += (double)l * l;
        }
        if (sum_ll > 0 && sum_lx * sum_lx / sum_ll > best_score) {
            best_score = sum_lx * sum_lx / sum_ll;
            best_scale = (float)(sum_lx / sum_ll);
        }
    }
    for (int round = 0; round < 4 && best_scale != 0; round++) {
        const float inverse = 1.0f / best_scale;
        double sum_lx = 0, sum_ll = 0;
        for (int i = 0; i < 16; i++) {
            int l = clamp_int(mu_nearest_int(x[i] * inverse), -32, 31);
            sum_lx += (double)l * x[i];
            sum_ll += (double)l * l;
        }
        if (!(sum_ll > 0 && sum_lx * sum_lx / sum_ll > best_score)) break;
        best_score = sum_lx * sum_lx / sum_ll;
        best_scale = (float)(sum_lx / sum_ll);
    }
    return best_scale;
}

/* Squared error of a group of 16 for the integer scale sc, each weight on
 * its nearest level; writes the levels (q + 32). */
static float q6_error(const float *x, float d, int sc, uint8_t *levels) {
    const float d1 = d * (float)sc;
    const float inverse = d1 != 0 ? 1.0f / d1 : 0.0f;
    float error = 0;
    for (int i = 0; i < 16; i++) {
        int q = clamp_int(mu_nearest_int(x[i] * inverse), -32, 31);
        float diff = d1 * (float)q - x[i];
        levels[i] = (uint8_t)(q + 32);
        error += diff * diff;
    }
    return error;
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
        float scales[16], max_scale = 0;
        for (int g = 0; g < 16; g++) {
            scales[g] = fit_group_q6(src + 16 * g);
            if (fabsf(scales[g]) > fabsf(max_scale)) max_scale = scales[g];
        }
        memset(out, 0, sizeof *out);
        if (max_scale == 0) continue;
        /* the largest scale goes to -128, the int8 end with no +128 */
        const float d_wanted = max_scale / -128.0f;
        out->d = half_at_least(fabsf(d_wanted));
        if (d_wanted < 0) out->d |= 0x8000;
        const float d = mu_half_to_float(out->d);
        if (d == 0) continue;

        uint8_t levels[MU_QK_K]; /* q + 32, in 0..63 */
        for (int g = 0; g < 16; g++) {
            const float *x = src + 16 * g;
            int best_sc = clamp_int(mu_nearest_int(scales[g] / d), -128, 127);
            float best_error = q6_error(x, d, best_sc, levels + 16 * g);
            for (bool moved = true; moved;) { /* walk to a local optimum */
                moved = false;
                const int center = best_sc;
                for (int sc = center - 1; sc <= center + 1; sc += 2) {
                    if (sc < -128 || sc > 127) continue;
                    uint8_t candidate[16];
                    float error = q6_error(x, d, sc, candidate);
                    if (error < best_error) {
                        best_error = error;
                        best_sc = sc;
                        memcpy(levels + 16 * g, candidate, sizeof candidate);
                        moved = true;
                    }
                }
            }
            out->scales[g] = (int8_t)best_sc;
        }
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
