/* kernels_scalar.c — the scalar reference kernels. Plain loops whose only
 * job is to be obviously right; the SIMD kernels are tested against them. */
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"

/* ---- exact lane: dequantize a block, then multiply in f32 ------------- */

static void matvec_f32_generic(uint32_t type, const void *w, uint64_t row_bytes, int64_t nrows, const float *x,
                               int64_t n, float *y) {
    const mu_type_traits *tr = mu_type_get(type);
    const int64_t be = tr->block_elems, bb = tr->block_bytes;
    /* Dequantize 256 elements (or one block) at a time. */
    const int64_t chunk = be >= 256 ? be : 256 / be * be;
    float buf[256];
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *row = (const uint8_t *)w + (uint64_t)r * row_bytes;
        float sum = 0.0f;
        for (int64_t i = 0; i < n; i += chunk) {
            int64_t m = n - i < chunk ? n - i : chunk;
            tr->dequant_row(row + i / be * bb, buf, m);
            for (int64_t j = 0; j < m; j++) sum += buf[j] * x[i + j];
        }
        y[r] = sum;
    }
}

#define F32_WRAPPER(T)                                                                                     \
    static void matvec_f32_##T(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) { \
        matvec_f32_generic(MU_TYPE_##T, w, rb, nr, x, n, y);                                               \
    }
F32_WRAPPER(F16)
F32_WRAPPER(BF16)
F32_WRAPPER(Q8_0)
F32_WRAPPER(Q4_0)
F32_WRAPPER(Q4_K)
F32_WRAPPER(Q5_K)
F32_WRAPPER(Q6_K)

static void matvec_f32_F32(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) {
    for (int64_t r = 0; r < nr; r++) {
        const float *row = (const float *)((const uint8_t *)w + (uint64_t)r * rb);
        float sum = 0.0f;
        for (int64_t j = 0; j < n; j++) sum += row[j] * x[j];
        y[r] = sum;
    }
}

/* ---- fast lane: integer dot products against Q8 activations ----------- */

/* Q4_K x Q8_K: per sub-block j (32 weights), sum(q4*q8) scaled by the 6-bit
 * scale; the min term uses the activation group sums (bsums). */
static void matvec_q8_Q4_K(const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {
    const int64_t nb = n / MU_QK_K;
    const mu_block_q8_K *a = xq;
    for (int64_t r = 0; r < nr; r++) {
        const mu_block_q4_K *b = (const mu_block_q4_K *)((const uint8_t *)w + (uint64_t)r * rb);
        float sum = 0.0f;
        for (int64_t i = 0; i < nb; i++) {
            int32_t sumi = 0, summ = 0;
            for (int j = 0; j < 8; j++) {
                uint8_t sc, m;
                mu_get_scale_min_k4(j, b[i].scales, &sc, &m);
                const uint8_t *q = b[i].qs + 32 * (j / 2);
                const int8_t *q8 = a[i].qs + 32 * j;
                int32_t s = 0;
                for (int l = 0; l < 32; l++) s += (j & 1 ? q[l] >> 4 : q[l] & 0xF) * q8[l];
                sumi += sc * s;
                summ += m * (a[i].bsums[2 * j] + a[i].bsums[2 * j + 1]);
            }
            sum += mu_f16_to_f32(b[i].d) * a[i].d * (float)sumi - mu_f16_to_f32(b[i].dmin) * a[i].d * (float)summ;
        }
        y[r] = sum;
    }
}

static void matvec_q8_Q5_K(const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {
    const int64_t nb = n / MU_QK_K;
    const mu_block_q8_K *a = xq;
    for (int64_t r = 0; r < nr; r++) {
        const mu_block_q5_K *b = (const mu_block_q5_K *)((const uint8_t *)w + (uint64_t)r * rb);
        float sum = 0.0f;
        for (int64_t i = 0; i < nb; i++) {
            int32_t sumi = 0, summ = 0;
            for (int j = 0; j < 8; j++) {
                uint8_t sc, m;
                mu_get_scale_min_k4(j, b[i].scales, &sc, &m);
                const uint8_t *q = b[i].qs + 32 * (j / 2);
                const int8_t *q8 = a[i].qs + 32 * j;
                int32_t s = 0;
                for (int l = 0; l < 32; l++) {
                    int v = (j & 1 ? q[l] >> 4 : q[l] & 0xF) | (((b[i].qh[l] >> j) & 1) << 4);
                    s += v * q8[l];
                }
                sumi += sc * s;
                summ += m * (a[i].bsums[2 * j] + a[i].bsums[2 * j + 1]);
            }
            sum += mu_f16_to_f32(b[i].d) * a[i].d * (float)sumi - mu_f16_to_f32(b[i].dmin) * a[i].d * (float)summ;
        }
        y[r] = sum;
    }
}

/* Q6_K x Q8_K: sixteen groups of 16 with signed int8 scales, values q-32. */
static void matvec_q8_Q6_K(const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {
    const int64_t nb = n / MU_QK_K;
    const mu_block_q8_K *a = xq;
    for (int64_t r = 0; r < nr; r++) {
        const mu_block_q6_K *b = (const mu_block_q6_K *)((const uint8_t *)w + (uint64_t)r * rb);
        float sum = 0.0f;
        for (int64_t i = 0; i < nb; i++) {
            int8_t q6[256];
            for (int h = 0; h < 2; h++) {
                const uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
                int8_t *o = q6 + 128 * h;
                for (int l = 0; l < 32; l++) {
                    o[l] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
                    o[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
                    o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                    o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
                }
            }
            int32_t sumi = 0;
            for (int g = 0; g < 16; g++) {
                int32_t s = 0;
                for (int l = 0; l < 16; l++) s += q6[16 * g + l] * a[i].qs[16 * g + l];
                sumi += b[i].scales[g] * s;
            }
            sum += mu_f16_to_f32(b[i].d) * a[i].d * (float)sumi;
        }
        y[r] = sum;
    }
}

static void matvec_q8_Q8_0(const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {
    const int64_t nb = n / 32;
    const mu_block_q8_0 *a = xq;
    for (int64_t r = 0; r < nr; r++) {
        const mu_block_q8_0 *b = (const mu_block_q8_0 *)((const uint8_t *)w + (uint64_t)r * rb);
        float sum = 0.0f;
        for (int64_t i = 0; i < nb; i++) {
            int32_t s = 0;
            for (int l = 0; l < 32; l++) s += b[i].qs[l] * a[i].qs[l];
            sum += mu_f16_to_f32(b[i].d) * mu_f16_to_f32(a[i].d) * (float)s;
        }
        y[r] = sum;
    }
}

static void matvec_q8_Q4_0(const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {
    const int64_t nb = n / 32;
    const mu_block_q8_0 *a = xq;
    for (int64_t r = 0; r < nr; r++) {
        const mu_block_q4_0 *b = (const mu_block_q4_0 *)((const uint8_t *)w + (uint64_t)r * rb);
        float sum = 0.0f;
        for (int64_t i = 0; i < nb; i++) {
            int32_t s = 0;
            for (int l = 0; l < 16; l++) {
                s += ((b[i].qs[l] & 0xF) - 8) * a[i].qs[l];
                s += ((b[i].qs[l] >> 4) - 8) * a[i].qs[l + 16];
            }
            sum += mu_f16_to_f32(b[i].d) * mu_f16_to_f32(a[i].d) * (float)s;
        }
        y[r] = sum;
    }
}

static void quantize_q8_K(const float *x, void *dst, int64_t n) {
    mu_type_get(MU_TYPE_Q8_K)->quant_row(x, dst, n);
}
static void quantize_q8_0(const float *x, void *dst, int64_t n) {
    mu_type_get(MU_TYPE_Q8_0)->quant_row(x, dst, n);
}

/* ---- attention helpers ------------------------------------------------ */

static float dot_f32(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
static float dot_f16_f32(const uint16_t *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += mu_f16_to_f32(a[i]) * b[i];
    return s;
}
static void axpy_f32(float a, const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}
static void axpy_f16(float a, const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * mu_f16_to_f32(x[i]);
}

static mu_cpu_kernels scalar_table;

const mu_cpu_kernels *mu_cpu_kernels_scalar(void) {
    mu_cpu_kernels *k = &scalar_table;
    if (k->isa) return k;
    k->matvec_f32[MU_TYPE_F32] = matvec_f32_F32;
    k->matvec_f32[MU_TYPE_F16] = matvec_f32_F16;
    k->matvec_f32[MU_TYPE_BF16] = matvec_f32_BF16;
    k->matvec_f32[MU_TYPE_Q8_0] = matvec_f32_Q8_0;
    k->matvec_f32[MU_TYPE_Q4_0] = matvec_f32_Q4_0;
    k->matvec_f32[MU_TYPE_Q4_K] = matvec_f32_Q4_K;
    k->matvec_f32[MU_TYPE_Q5_K] = matvec_f32_Q5_K;
    k->matvec_f32[MU_TYPE_Q6_K] = matvec_f32_Q6_K;
    k->matvec_q8[MU_TYPE_Q8_0] = matvec_q8_Q8_0;
    k->matvec_q8[MU_TYPE_Q4_0] = matvec_q8_Q4_0;
    k->matvec_q8[MU_TYPE_Q4_K] = matvec_q8_Q4_K;
    k->matvec_q8[MU_TYPE_Q5_K] = matvec_q8_Q5_K;
    k->matvec_q8[MU_TYPE_Q6_K] = matvec_q8_Q6_K;
    k->quantize_q8_K = quantize_q8_K;
    k->quantize_q8_0 = quantize_q8_0;
    k->dot_f32 = dot_f32;
    k->dot_f16_f32 = dot_f16_f32;
    k->axpy_f32 = axpy_f32;
    k->axpy_f16 = axpy_f16;
    k->isa = "scalar";
    return k;
}

uint32_t mu_cpu_act_type(uint32_t weight_type) {
    switch (weight_type) {
    case MU_TYPE_Q4_K: case MU_TYPE_Q5_K: case MU_TYPE_Q6_K: return MU_TYPE_Q8_K;
    case MU_TYPE_Q8_0: case MU_TYPE_Q4_0: return MU_TYPE_Q8_0;
    default: return MU_TYPE_F32;
    }
}

static bool cpu_has(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (!strcmp(isa, "avx2")) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (!strcmp(isa, "avx512"))
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
               __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return !strcmp(isa, "scalar");
}

const mu_cpu_kernels *mu_cpu_kernels_get(const char *isa) {
    if (!isa || !*isa) isa = getenv("MUSER_ISA");
    if (isa && *isa) {
        if (!cpu_has(isa)) return NULL;
        if (!strcmp(isa, "scalar")) return mu_cpu_kernels_scalar();
        if (!strcmp(isa, "avx2")) return mu_cpu_kernels_avx2();
        if (!strcmp(isa, "avx512")) return mu_cpu_kernels_avx512();
        return NULL;
    }
    const mu_cpu_kernels *k = NULL;
    if (cpu_has("avx512")) k = mu_cpu_kernels_avx512();
    if (!k && cpu_has("avx2")) k = mu_cpu_kernels_avx2();
    return k ? k : mu_cpu_kernels_scalar();
}
