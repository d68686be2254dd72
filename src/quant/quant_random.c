/* quant_random.c — random but valid blocks, written directly (no search),
 * for synthetic models of full size.
 *
 * The quants are uniform random bits, so each block is uniform over its
 * levels; the scales are chosen so the dequantized values have mean ~0
 * and standard deviation ~scale:
 *   - a uniform integer on 0..L-1 has mean (L-1)/2 and standard deviation
 *     sqrt((L^2-1)/12): 4.61 for 16 levels, 9.23 for 32, 18.47 for 64;
 *   - K-quant sub-block scales are drawn from 40..55 (mean ~48) and the
 *     min of Q4_K/Q5_K cancels the level mean: dmin = d*(L-1)/2, m = sc;
 *   - signed formats get a random sign on d (or on Q6_K's group scales),
 *     which cancels the -0.5 offset of the asymmetric level ranges;
 *   - int8 quants never take -128 (the quantizers never produce it, and
 *     sign tricks in SIMD dot products assume |q| <= 127).
 *   - Q4_1/Q5_1 cancel the level mean with m = -d*(L-1)/2, Q2_K with
 *     dmin = d*1.5 and m = sc; the IQ4 levels (mu_iq4_levels) have
 *     standard deviation 67.2 and a random sign on d; Q3_K and IQ4_XS draw
 *     signed sub-scales of magnitude 8..23 (mean 15.5).
 * Every half is finite: the scale is checked and d saturates at 65504.
 * Any other format with a quantizer quantizes uniform random floats, which
 * is slower but equally valid.
 */
#include "quant/quant_impl.h"

#include <math.h>

#include "util/error.h"

/* splitmix64: one multiply-xorshift round per 64 random bits. */
static inline uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill_random(void *dst, size_t bytes, uint64_t *state) {
    uint8_t *p = dst;
    for (; bytes >= 8; bytes -= 8, p += 8) {
        uint64_t r = next_random(state);
        memcpy(p, &r, 8);
    }
    if (bytes) {
        uint64_t r = next_random(state);
        memcpy(p, &r, bytes);
    }
}

static void avoid_minus_128(int8_t *q, int n) {
    for (int i = 0; i < n; i++) q[i] = q[i] == -128 ? -127 : q[i];
}

/* Uniform in [0.875, 1.125): varies the scale from block to block, as in
 * real weights, while keeping the overall standard deviation ~scale. */
static inline float jitter(uint64_t bits) { return 0.875f + (float)(bits >> 40) * (0.25f / 16777216.0f); }

/* Plain floats, uniform on [-sqrt(3), sqrt(3)) * scale (std = scale). */
static void random_floats(float *dst, int64_t n, uint64_t *state, float scale) {
    const float unit = 1.7320508f * scale * 0x1p-31f;
    for (int64_t i = 0; i < n; i += 2) {
        uint64_t r = next_random(state);
        dst[i] = (float)(int32_t)(uint32_t)r * unit;
        if (i + 1 < n) dst[i + 1] = (float)(int32_t)(uint32_t)(r >> 32) * unit;
    }
}

/* Mean sub-block scale and the level deviation of each K-quant. */
#define SUB_SCALE_MEAN 47.5f
#define SUB_SCALE_DRAW(bits) (uint8_t)(40 + ((bits) & 15))

static void random_k4_header(uint16_t *d_out, uint16_t *dmin_out, uint8_t packed[12], uint64_t *state, float scale,
                             float level_std, float level_mean) {
    uint64_t r = next_random(state);
    const float d = scale / (level_std * SUB_SCALE_MEAN) * jitter(r);
    *d_out = mu_float_to_half_saturated(d);
    *dmin_out = mu_float_to_half_saturated(mu_half_to_float(*d_out) * level_mean);
    uint8_t sc[8];
    for (int j = 0; j < 8; j++) sc[j] = SUB_SCALE_DRAW(r >> (4 * j));
    /* m = sc, so dmin*m = d*sc*level_mean cancels the levels' mean */
    mu_pack_scales_k4(packed, sc, sc);
}

int mu_random_blocks(uint32_t type, void *dst, int64_t n, uint64_t *rng_state, float scale) {
    const mu_type_traits *traits = mu_type_get(type);
    if (!traits) return mu_fail(MUSER_EINVAL, "invalid tensor type id %u", type);
    if (n < 0 || n % traits->block_elems != 0)
        return mu_fail(MUSER_EINVAL, "%lld elements is not a whole number of %s blocks", (long long)n, traits->name);
    if (!(scale >= 0.0f) || !isfinite(scale)) return mu_fail(MUSER_EINVAL, "random blocks: bad scale %g", scale);
    const int64_t blocks = n / traits->block_elems;

    switch (type) {
    case MU_TYPE_F32:
        random_floats(dst, n, rng_state, scale);
        return MUSER_OK;
    case MU_TYPE_F16:
    case MU_TYPE_BF16: {
        float chunk[256];
        uint16_t *out = dst;
        for (int64_t i = 0; i < n; i += 256) {
            const int count = n - i < 256 ? (int)(n - i) : 256;
            random_floats(chunk, count, rng_state, scale);
            for (int j = 0; j < count; j++)
                out[i + j] = type == MU_TYPE_F16 ? mu_float_to_half(chunk[j]) : mu_float_to_bfloat(chunk[j]);
        }
        return MUSER_OK;
    }
    case MU_TYPE_Q4_0: {
        mu_block_q4_0 *out = dst;
        for (int64_t b = 0; b < blocks; b++) {
            uint64_t r = next_random(rng_state);
            const float d = scale / 4.61f * jitter(r);
            out[b].d = mu_float_to_half_saturated(r & 1 ? -d : d);
            fill_random(out[b].qs, sizeof out[b].qs, rng_state);
        }
        return MUSER_OK;
    }
    case MU_TYPE_Q8_0:
    case MU_TYPE_Q8_1: {
        /* uniform int8 on -127..127: standard deviation 73.6 */
        for (int64_t b = 0; b < blocks; b++) {
            uint64_t r = next_random(rng_state);
            const uint16_t d = mu_float_to_half_saturated(scale / 73.6f * jitter(r));
            int8_t *qs;
            if (type == MU_TYPE_Q8_0) {
                mu_block_q8_0 *block = (mu_block_q8_0 *)dst + b;
                block->d = d;
                qs = block->qs;
            } else {
                mu_block_q8_1 *block = (mu_block_q8_1 *)dst + b;
                block->d = d;
                qs = block->qs;
            }
            fill_random(qs, 32, rng_state);
            avoid_minus_128(qs, 32);
            if (type == MU_TYPE_Q8_1) {
                int sum = 0;
                for (int j = 0; j < 32; j++) sum += qs[j];
                ((mu_block_q8_1 *)dst)[b].s = mu_float_to_half_saturated(mu_half_to_float(d) * (float)sum);
            }
        }
        return MUSER_OK;
    }
    case MU_TYPE_Q8_K: {
        mu_block_q8_K *out = dst;
        for (int64_t b = 0; b < blocks; b++) {
            uint64_t r = next_random(rng_state);
            out[b].d = scale / 73.6f * jitter(r) * (r & 1 ? -1.0f : 1.0f);
            fill_random(out[b].qs, sizeof out[b].qs, rng_state);
            avoid_minus_128(out[b].qs, MU_QK_K);
            mu_q8_K_fill_bsums(&out[b]);
        }
        return MUSER_OK;
    }
    case MU_TYPE_Q4_K: {
        mu_block_q4_K *out = dst;
        for (int64_t b = 0; b < blocks; b++) {
            random_k4_header(&out[b].d, &out[b].dmin, out[b].scales, rng_state, scale, 4.61f, 7.5f);
            fill_random(out[b].qs, sizeof out[b].qs, rng_state);
        }
        return MUSER_OK;
    }
    case MU_TYPE_Q5_K: {
        mu_block_q5_K *out = dst;
        for (int64_t b = 0; b < blocks; b++) {
            random_k4_header(&out[b].d, &out[b].dmin, out[b].scales, rng_state, scale, 9.23f, 15.5f);
            fill_random(out[b].qh, sizeof out[b].qh, rng_state);
            fill_random(out[b].qs, sizeof out[b].qs, rng_state);
        }
        return MUSER_OK;
    }
    case MU_TYPE_Q6_K: {
        mu_block_q6_K *out = dst;
        for (int64_t b = 0; b < blocks; b++) {
            uint64_t r = next_random(rng_state);
            out[b].d = mu_float_to_half_saturated(scale / (18.47f * SUB_SCALE_MEAN) * jitter(r));
            uint64_t draws = next_random(rng_state), signs = next_random(rng_state);
            for (int g = 0; g < 16; g++) {
                const int sc = SUB_SCALE_DRAW(draws >> (4 * g));
                out[b].scales[g] = (int8_t)(signs >> g & 1 ? -sc : sc);
            }
            fill_random(out[b].ql, sizeof out[b].ql, rng_state);
            fill_random(out[b].qh, sizeof out[b].qh, rng_state);
        }
        return MUSER_OK;
    }
    case MU_TYPE_Q4_1:
    case MU_TYPE_Q5_1: {
        const bool five = type == MU_TYPE_Q5_1;
        for (int64_t b = 0; b < blocks; b++) {
            const float d = scale / (five ? 9.23f : 4.61f) * jitter(next_random(rng_state));
            const uint16_t dh = mu_float_to_half_saturated(d);
            const uint16_t mh = mu_float_to_half_saturated(-mu_half_to_float(dh) * (five ? 15.5f : 7.5f));
            if (five) {
                mu_block_q5_1 *out = (mu_block_q5_1 *)dst + b;
                out->d = dh, out->m = mh;
                fill_random(out->qh, sizeof out->qh, rng_state);
                fill_random(out->qs, sizeof out->qs, rng_state);
            } else {
                mu_block_q4_1 *out = (mu_block_q4_1 *)dst + b;
                out->d = dh, out->m = mh;
                fill_random(out->qs, sizeof out->qs, rng_state);
            }
        }
        return MUSER_OK;
    }
    case MU_TYPE_Q5_0: {
        mu_block_q5_0 *out = dst;
        for (int64_t b = 0; b < blocks; b++) {
            uint64_t r = next_random(rng_state);
            const float d = scale / 9.23f * jitter(r);
            out[b].d = mu_float_to_half_saturated(r & 1 ? -d : d);
            fill_random(out[b].qh, sizeof out[b].qh, rng_state);
            fill_random(out[b].qs, sizeof out[b].qs, rng_state);
        }
        return MUSER_OK;
    }
    case MU_TYPE_IQ4_NL: {
        mu_block_iq4_nl *out = dst;
        for (int64_t b = 0; b < blocks; b++) {
            uint64_t r = next_random(rng_state);
            const float d = scale / 67.2f * jitter(r);
            out[b].d = mu_float_to_half_saturated(r & 1 ? -d : d);
            fill_random(out[b].qs, sizeof out[b].qs, rng_state);
        }
        return MUSER_OK;
    }
    case MU_TYPE_IQ4_XS: {
        mu_block_iq4_xs *out = dst;
        for (int64_t b = 0; b < blocks; b++) {
            uint64_t r = next_random(rng_state);
            out[b].d = mu_float_to_half_saturated(scale / (67.2f * 15.5f) * jitter(r));
            int ls[8];
            for (int j = 0; j < 8; j++) ls[j] = 32 + (r >> (32 + j) & 1 ? -1 : 1) * (8 + (int)(r >> (4 * j) & 15));
            mu_pack_scales_iq4_xs(&out[b].scales_h, out[b].scales_l, ls);
            fill_random(out[b].qs, sizeof out[b].qs, rng_state);
        }
        return MUSER_OK;
    }
    case MU_TYPE_Q2_K: {
        mu_block_q2_K *out = dst;
        for (int64_t b = 0; b < blocks; b++) {
            uint64_t r = next_random(rng_state);
            /* levels 0..3: mean 1.5, standard deviation 1.118; sc in 8..15 (mean 11.5) */
            const uint16_t dh = mu_float_to_half_saturated(scale / (1.118f * 11.5f) * jitter(r));
            out[b].d = dh;
            out[b].dmin = mu_float_to_half_saturated(mu_half_to_float(dh) * 1.5f);
            const uint64_t draws = next_random(rng_state);
            for (int g = 0; g < 16; g++) {
                const int sc = 8 + (int)(draws >> (3 * g) & 7);
                out[b].scales[g] = (uint8_t)(sc | sc << 4);
            }
            fill_random(out[b].qs, sizeof out[b].qs, rng_state);
        }
        return MUSER_OK;
    }
    case MU_TYPE_Q3_K: {
        mu_block_q3_K *out = dst;
        for (int64_t b = 0; b < blocks; b++) {
            uint64_t r = next_random(rng_state);
            /* levels -4..3: standard deviation 2.29 */
            out[b].d = mu_float_to_half_saturated(scale / (2.29f * 15.5f) * jitter(r));
            const uint64_t draws = next_random(rng_state);
            int u[16];
            for (int g = 0; g < 16; g++) u[g] = 32 + (r >> (24 + g) & 1 ? -1 : 1) * (8 + (int)(draws >> (4 * g) & 15));
            mu_pack_scales_q3(out[b].scales, u);
            fill_random(out[b].hmask, sizeof out[b].hmask, rng_state);
            fill_random(out[b].qs, sizeof out[b].qs, rng_state);
        }
        return MUSER_OK;
    }
    default: {
        if (!traits->quant_row)
            return mu_fail(MUSER_EUNSUPPORTED, "random blocks of type %s are not supported", traits->name);
        float chunk[256]; /* a whole number of blocks of every format */
        uint8_t *out = dst;
        for (int64_t i = 0; i < n; i += 256) {
            const int64_t count = n - i < 256 ? n - i : 256;
            random_floats(chunk, count, rng_state, scale);
            traits->quant_row(chunk, out, count);
            out += mu_row_bytes(type, count);
        }
        return MUSER_OK;
    }
    }
}
