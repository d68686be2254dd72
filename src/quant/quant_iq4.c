/* quant_iq4.c — scalar reference rows for IQ4_NL and IQ4_XS, the 4-bit
 * formats whose nibbles index a fixed non-uniform table of 16 levels
 * instead of standing for integers.
 *
 * Dequantization follows ggml's order (y = d*level; IQ4_XS: dl = d*(ls-32)
 * first, then dl*level), bit for bit. The quantizers are Muser's own: per
 * block of 32, sweep candidate steps that map the largest |x| onto either
 * end of the table, give each weight its nearest level, keep the
 * least-squares scale of the best candidate and reassign until the error
 * stops falling; IQ4_XS then takes its f16 super-scale from the largest
 * fit and walks each 6-bit sub-scale to a local optimum of the exact error
 * (as the K-quants do).
 */
#include "quant/quant_impl.h"

#include <stdbool.h>

const int8_t mu_iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Index of the level nearest to v (in level units): a binary search over
 * the midpoints of the sorted table. NaN gives level 0's side. */
static int nearest_level(float v) {
    int lo = 0, hi = 15;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        const float midpoint = 0.5f * (float)(mu_iq4_levels[mid] + mu_iq4_levels[mid + 1]);
        if (v > midpoint) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Least-squares fit of one block of 32: x ~ s*level[idx]. Returns s (of
 * either sign; 0 for an all-zero block). */
static float fit_block(const float *x) {
    const float max = mu_signed_absmax(x, 32);
    if (max == 0) return 0;
    float best_score = -1, best_scale = 0;
    for (int end = 0; end < 2; end++) {
        const float target = end ? (float)mu_iq4_levels[0] : (float)mu_iq4_levels[15];
        for (int step = -8; step <= 8; step++) {
            const float inverse = target * (1.0f + 0.025f * (float)step) / max;
            double sum_lx = 0, sum_ll = 0;
            for (int i = 0; i < 32; i++) {
                const int level = mu_iq4_levels[nearest_level(x[i] * inverse)];
                sum_lx += (double)level * x[i];
                sum_ll += (double)level * level;
            }
            mu_keep_better_fit(sum_lx, sum_ll, &best_score, &best_scale);
        }
    }
    for (int round = 0; round < 4 && best_scale != 0; round++) {
        const float inverse = 1.0f / best_scale;
        double sum_lx = 0, sum_ll = 0;
        for (int i = 0; i < 32; i++) {
            const int level = mu_iq4_levels[nearest_level(x[i] * inverse)];
            sum_lx += (double)level * x[i];
            sum_ll += (double)level * level;
        }
        if (!mu_keep_better_fit(sum_lx, sum_ll, &best_score, &best_scale)) break;
    }
    return best_scale;
}

/* Squared error of a block of 32 at the stored scale dl (as the
 * dequantizer computes values), each weight on its nearest level; writes
 * the level indices. */
static float block_error(const float *x, float dl, uint8_t idx[32]) {
    const float inverse = dl != 0 ? 1.0f / dl : 0.0f;
    float error = 0;
    for (int i = 0; i < 32; i++) {
        idx[i] = (uint8_t)nearest_level(x[i] * inverse);
        const float diff = dl * (float)mu_iq4_levels[idx[i]] - x[i];
        error += diff * diff;
    }
    return error;
}

/* Nibbles of one block of 32 as Q4_0 packs them: byte j = idx[j] | idx[j+16] << 4. */
static void pack_nibbles(const uint8_t idx[32], uint8_t qs[16]) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(idx[j] | idx[j + 16] << 4);
}

/* ---- IQ4_NL ----------------------------------------------------------------
 *   offset 0  d       f16
 *   offset 2  qs[16]  byte j: low nibble indexes weight j, high nibble j+16
 *   y = d * mu_iq4_levels[index]
 */
/* The levels of 32 weights packed as IQ4_NL's nibbles. */
static void level_values(const uint8_t qs[16], int8_t *q) {
    for (int j = 0; j < 16; j++) {
        q[j] = mu_iq4_levels[qs[j] & 0x0F];
        q[j + 16] = mu_iq4_levels[qs[j] >> 4];
    }
}

void mu_int_block_iq4_nl(const void *block, mu_int_block *out) {
    const mu_block_iq4_nl *b = block;
    level_values(b->qs, out->q);
    out->scale[0] = out->scale[1] = mu_half_to_float(b->d);
}

void mu_dequant_row_iq4_nl(const void *src, float *dst, int64_t n) {
    mu_dequant_via_ints(mu_int_block_iq4_nl, false, 32, sizeof(mu_block_iq4_nl), src, dst, n);
}

void mu_quant_row_iq4_nl(const float *src, void *dst, int64_t n) {
    mu_block_iq4_nl *blocks = dst;
    for (int64_t b = 0; b < n / 32; b++, src += 32) {
        blocks[b].d = mu_float_to_half_saturated(fit_block(src));
        uint8_t idx[32];
        block_error(src, mu_half_to_float(blocks[b].d), idx);
        pack_nibbles(idx, blocks[b].qs);
    }
}

/* ---- IQ4_XS ----------------------------------------------------------------
 *   offset 0  d            f16
 *   offset 2  scales_h     u16: bits 2j..2j+1 are the high 2 bits of ls_j
 *   offset 4  scales_l[4]  byte j/2, nibble j%2: the low 4 bits of ls_j
 *   offset 8  qs[128]      sub-block j (32 weights): bytes 16j..16j+15, as IQ4_NL
 *   y = (d*(ls_j - 32)) * mu_iq4_levels[index]
 */
void mu_int_block_iq4_xs(const void *block, mu_int_block *out) {
    const mu_block_iq4_xs *b = block;
    const float d = mu_half_to_float(b->d);
    for (int j = 0; j < 8; j++) {
        const int ls = (b->scales_l[j / 2] >> 4 * (j % 2) & 0x0F) | (b->scales_h >> 2 * j & 3) << 4;
        out->scale[2 * j] = out->scale[2 * j + 1] = d * (float)(ls - 32);
        level_values(b->qs + 16 * j, out->q + 32 * j);
    }
}

void mu_dequant_row_iq4_xs(const void *src, float *dst, int64_t n) {
    mu_dequant_via_ints(mu_int_block_iq4_xs, false, MU_QK_K, sizeof(mu_block_iq4_xs), src, dst, n);
}

void mu_quant_row_iq4_xs(const float *src, void *dst, int64_t n) {
    mu_block_iq4_xs *blocks = dst;
    for (int64_t b = 0; b < n / MU_QK_K; b++, src += MU_QK_K) {
        mu_block_iq4_xs *out = &blocks[b];
        float scales[8], max_scale = 0;
        for (int j = 0; j < 8; j++) {
            scales[j] = fit_block(src + 32 * j);
            if (fabsf(scales[j]) > fabsf(max_scale)) max_scale = scales[j];
        }
        memset(out, 0, sizeof *out);
        /* the largest scale goes to -32, the end with no +32 */
        const float d_wanted = max_scale / -32.0f;
        out->d = mu_half_at_least(fabsf(d_wanted));
        if (d_wanted < 0) out->d |= 0x8000;
        const float d = mu_half_to_float(out->d);
        int ls[8];
        for (int j = 0; j < 8; j++) {
            const float *x = src + 32 * j;
            uint8_t idx[32];
            int best_sc = d != 0 ? mu_nearest_int(scales[j] / d) : 0;
            best_sc = best_sc < -32 ? -32 : best_sc > 31 ? 31 : best_sc;
            float best_error = block_error(x, d * (float)best_sc, idx);
            for (bool moved = true; moved;) { /* walk to a local optimum */
                moved = false;
                const int center = best_sc;
                for (int sc = center - 1; sc <= center + 1; sc += 2) {
                    if (sc < -32 || sc > 31) continue;
                    uint8_t candidate[32];
                    const float error = block_error(x, d * (float)sc, candidate);
                    if (error < best_error) {
                        best_error = error;
                        best_sc = sc;
                        memcpy(idx, candidate, sizeof candidate);
                        moved = true;
                    }
                }
            }
            ls[j] = best_sc + 32;
            pack_nibbles(idx, out->qs + 16 * j);
        }
        mu_pack_scales_iq4_xs(&out->scales_h, out->scales_l, ls);
    }
}
