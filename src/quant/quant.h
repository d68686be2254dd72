/* quant.h — block formats: the traits table, block layouts, and the scalar
 * reference dequantize/quantize of a row.
 *
 * Type ids are ggml's (they are what GGUF files store). Every type ggml
 * defines is in the traits table with its block size, so the GGUF reader can
 * validate any file; `dequant_row` is NULL for types Muser cannot compute
 * with. Rows are along ne[0]; a row of n elements takes
 * n / block_elems * block_bytes bytes (n must be a multiple of block_elems).
 */
#ifndef MU_QUANT_H
#define MU_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum mu_type {
    MU_TYPE_F32 = 0,
    MU_TYPE_F16 = 1,
    MU_TYPE_Q4_0 = 2,
    MU_TYPE_Q4_1 = 3,
    MU_TYPE_Q5_0 = 6,
    MU_TYPE_Q5_1 = 7,
    MU_TYPE_Q8_0 = 8,
    MU_TYPE_Q8_1 = 9,
    MU_TYPE_Q2_K = 10,
    MU_TYPE_Q3_K = 11,
    MU_TYPE_Q4_K = 12,
    MU_TYPE_Q5_K = 13,
    MU_TYPE_Q6_K = 14,
    MU_TYPE_Q8_K = 15,
    MU_TYPE_IQ2_XXS = 16,
    MU_TYPE_IQ2_XS = 17,
    MU_TYPE_IQ3_XXS = 18,
    MU_TYPE_IQ1_S = 19,
    MU_TYPE_IQ4_NL = 20,
    MU_TYPE_IQ3_S = 21,
    MU_TYPE_IQ2_S = 22,
    MU_TYPE_IQ4_XS = 23,
    MU_TYPE_I8 = 24,
    MU_TYPE_I16 = 25,
    MU_TYPE_I32 = 26,
    MU_TYPE_I64 = 27,
    MU_TYPE_F64 = 28,
    MU_TYPE_IQ1_M = 29,
    MU_TYPE_BF16 = 30,
    MU_TYPE_TQ1_0 = 34,
    MU_TYPE_TQ2_0 = 35,
    MU_TYPE_MXFP4 = 39,
    MU_TYPE_NVFP4 = 40,
    MU_TYPE_Q1_0 = 41,
    MU_TYPE_Q2_0 = 42,
    MU_TYPE_COUNT = 43,
};

#define MU_QK_K 256
#define MU_QK8_0 32
#define MU_QK4_0 32
#define MU_QK8_1 32

typedef void (*mu_dequant_row_fn)(const void *src, float *dst, int64_t n);
typedef void (*mu_quant_row_fn)(const float *src, void *dst, int64_t n);

/* The integer view of one block of the formats whose weights are a scale
 * times a small integer plus an offset, both per group of 16 (Q4_0, Q8_0,
 * Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K):
 *     y[i] = scale[g] * q[i] + offset[g],   g = i / 16,  q[i] an int8
 * evaluated in f32 exactly so (or scale[g] * q[i] alone for a format
 * without offsets): this is how their dequantizers compute, in ggml's
 * order, and the integers are what the fast lane multiplies with int8
 * activations. Entries past the block's size are left as they were. */
typedef struct mu_int_block {
    int8_t q[MU_QK_K];
    float scale[MU_QK_K / 16], offset[MU_QK_K / 16];
} mu_int_block;
typedef void (*mu_int_block_fn)(const void *block, mu_int_block *out);

typedef struct mu_type_traits {
    const char *name;          /* "Q4_K", as ggml spells it            */
    int block_elems;           /* 0 for ids ggml removed               */
    int block_bytes;
    mu_dequant_row_fn dequant_row; /* NULL: Muser cannot compute with it */
    mu_quant_row_fn quant_row;     /* NULL: Muser cannot produce it      */
    mu_int_block_fn int_block;     /* NULL: no integer view (see above)  */
    bool int_offset;               /* the integer view has offsets       */
} mu_type_traits;

/* Traits of a type id, or NULL for an id that is not a valid ggml type. */
const mu_type_traits *mu_type_get(uint32_t type);
const char *mu_type_name(uint32_t type); /* "?" for invalid ids */
/* Parses "q4_k", "Q8_0", "f16", ... (case-insensitive); -1 if unknown. */
int mu_type_from_name(const char *name);

/* Bytes of a row of n elements; 0 if n is negative or not a multiple of
 * the block, the type is invalid, or the count does not fit in 64 bits (it
 * never wraps: every n < 2^61 of a valid type gives the true count). */
uint64_t mu_row_bytes(uint32_t type, int64_t n);

/* ---- half precision -------------------------------------------------- */
float mu_f16_to_f32(uint16_t h);
uint16_t mu_f32_to_f16(float f); /* round to nearest even, like F16C */
float mu_bf16_to_f32(uint16_t h);
uint16_t mu_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */

/* ---- block layouts (little-endian, packed, as ggml-common.h) ---------- */

/* Q4_0: 32 weights, 4.5 bpw. y[j] = d*((qs[j]&15)-8), y[j+16] = d*((qs[j]>>4)-8) */
typedef struct { uint16_t d; uint8_t qs[16]; } mu_block_q4_0;
/* Q8_0: 32 weights, 8.5 bpw. y = d*q */
typedef struct { uint16_t d; int8_t qs[32]; } mu_block_q8_0;
/* Q4_1: 32 weights, 5 bpw. Nibbles as Q4_0; y = d*q + m, q in 0..15 */
typedef struct { uint16_t d, m; uint8_t qs[16]; } mu_block_q4_1;
/* Q5_0: 32 weights, 5.5 bpw. Low 4 bits as Q4_0's nibbles; bit j of qh
 * (little-endian u32) is the fifth bit of weight j. y = d*(q - 16) */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } mu_block_q5_0;
/* Q5_1: Q5_0's bits with a min: y = d*q + m, q in 0..31 */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } mu_block_q5_1;
/* IQ4_NL: 32 weights, 4.5 bpw. Nibbles as Q4_0 index a fixed table of 16
 * levels (mu_iq4_levels); y = d*level */
typedef struct { uint16_t d; uint8_t qs[16]; } mu_block_iq4_nl;
/* IQ4_XS: 256 weights in 8 sub-blocks of 32, 4.25 bpw. Sub-block j has the
 * 6-bit scale ls = (scales_l[j/2] >> 4*(j%2) & 15) | (scales_h >> 2j & 3) << 4,
 * and its 16 bytes qs[16j..] hold its nibbles as IQ4_NL's; y = d*(ls-32)*level */
typedef struct { uint16_t d, scales_h; uint8_t scales_l[4]; uint8_t qs[128]; } mu_block_iq4_xs;
/* Q2_K: 256 weights in 16 groups of 16, 2.625 bpw. scales[g]: low nibble
 * the group's scale, high nibble its min. Half h (128 weights) uses bytes
 * qs[32h..32h+31]; weight 128h + 32s + l takes bits 2s of qs[32h + l].
 * y = (d*sc)*q - (dmin*m), q in 0..3 */
typedef struct { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; } mu_block_q2_K;
/* Q3_K: 256 weights in 16 groups of 16, 3.4375 bpw. The low 2 bits of q as
 * Q2_K's qs; weight 128h + 32s + l has its third bit in bit 4h+s of
 * hmask[l]. Sixteen 6-bit scales u_g: low 4 bits in scales[g] (g < 8) or
 * scales[g-8] >> 4, high 2 bits scales[8 + g%4] >> 2*(g/4). y = d*(u_g-32)*q
 * with q = low2 - (third bit ? 0 : 4), in -4..3 */
typedef struct { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; } mu_block_q3_K;
/* Q4_K: 256 weights in 8 sub-blocks of 32, 4.5 bpw.
 *   d, dmin: f16 super-scales; scales[12]: eight 6-bit (scale, min) pairs:
 *     j < 4:  sc = s[j] & 63,                      m = s[j+4] & 63
 *     j >= 4: sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4,
 *             m  = (s[j+4] >> 4) | (s[j]   >> 6) << 4
 *   qs[128]: chunk c (64 weights) uses bytes 32c..32c+31: low nibbles are
 *   sub-block 2c, high nibbles sub-block 2c+1. y = d*sc*q - dmin*m */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } mu_block_q4_K;
/* Q5_K: Q4_K plus a fifth bit: qh[l] bit 2c for the low-nibble weight l of
 * chunk c, bit 2c+1 for the high one. 5.5 bpw. */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } mu_block_q5_K;
/* Q6_K: 256 weights in 16 groups of 16, 6.5625 bpw. ql: low 4 bits,
 * qh: high 2 bits, scales: int8 per group, d last. q in 0..63, y = d*sc*(q-32) */
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } mu_block_q6_K;
/* Q8_K: activation format for K-quant dot products. d is f32;
 * bsums[g] = sum of qs over the 16-element group g. */
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } mu_block_q8_K;
/* Q8_1: activation format of 32-element blocks (llama.cpp's CUDA matvecs).
 * d: f16 scale, s: f16 d*sum(qs) (this CPU reference; CUDA stores the sum
 * of the float inputs instead). y = d*q */
typedef struct { uint16_t d, s; int8_t qs[32]; } mu_block_q8_1;

_Static_assert(sizeof(mu_block_q4_0) == 18, "q4_0 size");
_Static_assert(sizeof(mu_block_q8_0) == 34, "q8_0 size");
_Static_assert(sizeof(mu_block_q4_K) == 144, "q4_K size");
_Static_assert(sizeof(mu_block_q5_K) == 176, "q5_K size");
_Static_assert(sizeof(mu_block_q6_K) == 210, "q6_K size");
_Static_assert(sizeof(mu_block_q8_K) == 292, "q8_K size");
_Static_assert(sizeof(mu_block_q8_1) == 36, "q8_1 size");
_Static_assert(sizeof(mu_block_q4_1) == 20, "q4_1 size");
_Static_assert(sizeof(mu_block_q5_0) == 22, "q5_0 size");
_Static_assert(sizeof(mu_block_q5_1) == 24, "q5_1 size");
_Static_assert(sizeof(mu_block_iq4_nl) == 18, "iq4_nl size");
_Static_assert(sizeof(mu_block_iq4_xs) == 136, "iq4_xs size");
_Static_assert(sizeof(mu_block_q2_K) == 84, "q2_K size");
_Static_assert(sizeof(mu_block_q3_K) == 110, "q3_K size");

/* IQ4_NL's and IQ4_XS's 16 levels (ggml's kvalues_iq4nl), ascending. */
extern const int8_t mu_iq4_levels[16];

/* Unpacks the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block. */
static inline void mu_get_scale_min_k4(int j, const uint8_t *s, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Dequantizes a whole row of any computable type (dispatch on traits).
 * Returns MUSER_OK, or MUSER_EUNSUPPORTED / MUSER_EINVAL (message set). */
int mu_dequant_row(uint32_t type, const void *src, float *dst, int64_t n);
/* Quantizes a row of n floats into blocks of `type`; same returns. */
int mu_quant_row(uint32_t type, const float *src, void *dst, int64_t n);

/* ---- per-format scalar references (n: a multiple of the block) -------- *
 * Dequantization follows ggml's float operation order exactly, so results
 * are bit-identical to ggml's dequantize_row_*. Quantizers: Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0, Q8_1 and Q8_K follow ggml's reference rules bit for bit (except that a block
 * scale beyond the f16 range saturates at 65504 where ggml would store inf);
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS use Muser's own
 * least-squares searches (same formats). */
void mu_dequant_row_f32(const void *src, float *dst, int64_t n);
void mu_dequant_row_f16(const void *src, float *dst, int64_t n);
void mu_dequant_row_bf16(const void *src, float *dst, int64_t n);
void mu_dequant_row_q4_0(const void *src, float *dst, int64_t n);
void mu_dequant_row_q8_0(const void *src, float *dst, int64_t n);
void mu_dequant_row_q8_1(const void *src, float *dst, int64_t n);
void mu_dequant_row_q4_K(const void *src, float *dst, int64_t n);
void mu_dequant_row_q5_K(const void *src, float *dst, int64_t n);
void mu_dequant_row_q6_K(const void *src, float *dst, int64_t n);
void mu_dequant_row_q8_K(const void *src, float *dst, int64_t n);
void mu_dequant_row_q4_1(const void *src, float *dst, int64_t n);
void mu_dequant_row_q5_0(const void *src, float *dst, int64_t n);
void mu_dequant_row_q5_1(const void *src, float *dst, int64_t n);
void mu_dequant_row_iq4_nl(const void *src, float *dst, int64_t n);
void mu_dequant_row_iq4_xs(const void *src, float *dst, int64_t n);
void mu_dequant_row_q2_K(const void *src, float *dst, int64_t n);
void mu_dequant_row_q3_K(const void *src, float *dst, int64_t n);

void mu_quant_row_f32(const float *src, void *dst, int64_t n);
void mu_quant_row_f16(const float *src, void *dst, int64_t n);
void mu_quant_row_bf16(const float *src, void *dst, int64_t n);
/* d = max/-8 (max: the signed value of largest |x|), q = min(15, floor(x*(1/d) + 8.5)) */
void mu_quant_row_q4_0(const float *src, void *dst, int64_t n);
/* d = amax/127, q = roundf(x * (1/d)) */
void mu_quant_row_q8_0(const float *src, void *dst, int64_t n);
/* as Q8_0, plus s = f16(d * sum(q)) */
void mu_quant_row_q8_1(const float *src, void *dst, int64_t n);
void mu_quant_row_q4_K(const float *src, void *dst, int64_t n);
void mu_quant_row_q5_K(const float *src, void *dst, int64_t n);
void mu_quant_row_q6_K(const float *src, void *dst, int64_t n);
/* Spec 7: max = the signed x of largest |x| (first wins), iscale = -127/max,
 * q = min(127, nearest_even(iscale*x)), d = 1/iscale, bsums per 16. */
void mu_quant_row_q8_K(const float *src, void *dst, int64_t n);
/* min/max of the block: d = (max-min)/15, m = min, q = min(15, trunc((x-min)/d + 0.5)) */
void mu_quant_row_q4_1(const float *src, void *dst, int64_t n);
/* d = max/-16 (max signed, as Q4_0), q = min(31, floor(x/d + 16.5)) */
void mu_quant_row_q5_0(const float *src, void *dst, int64_t n);
/* as Q4_1 with d = (max-min)/31, q in 0..31 */
void mu_quant_row_q5_1(const float *src, void *dst, int64_t n);
/* Muser's own searches (ggml's reference quantizers for these use
 * importance searches of their own; the formats are the same). */
void mu_quant_row_iq4_nl(const float *src, void *dst, int64_t n);
void mu_quant_row_iq4_xs(const float *src, void *dst, int64_t n);
void mu_quant_row_q2_K(const float *src, void *dst, int64_t n);
void mu_quant_row_q3_K(const float *src, void *dst, int64_t n);

/* Integer views (mu_int_block above) of one block. */
void mu_int_block_q4_0(const void *block, mu_int_block *out);
void mu_int_block_q8_0(const void *block, mu_int_block *out);
void mu_int_block_q4_1(const void *block, mu_int_block *out);
void mu_int_block_q5_0(const void *block, mu_int_block *out);
void mu_int_block_q5_1(const void *block, mu_int_block *out);
void mu_int_block_iq4_nl(const void *block, mu_int_block *out);
void mu_int_block_iq4_xs(const void *block, mu_int_block *out);
void mu_int_block_q2_K(const void *block, mu_int_block *out);
void mu_int_block_q3_K(const void *block, mu_int_block *out);

/* ---- synthetic weights -------------------------------------------------- *
 * Writes n elements of random but valid, well-scaled blocks of `type`
 * directly (no quantization search; for writing large synthetic models
 * fast). Dequantized values have mean ~0 and standard deviation ~scale;
 * halves are always finite. rng_state is any seed, advanced in place.
 * Types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K,
 * Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS; any other type with a quantizer goes
 * through it (slower). Returns
 * MUSER_OK, or MUSER_EUNSUPPORTED / MUSER_EINVAL with nothing written. */
int mu_random_blocks(uint32_t type, void *dst, int64_t n, uint64_t *rng_state, float scale);

#endif
