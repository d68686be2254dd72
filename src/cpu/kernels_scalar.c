/* kernels_scalar.c — the scalar reference kernels. Plain loops whose only
 * job is to be obviously right; the SIMD kernels are tested against them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/ops.h"

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
/* The integer-view formats (kernels.h). */
F32_WRAPPER(Q4_1)
F32_WRAPPER(Q5_0)
F32_WRAPPER(Q5_1)
F32_WRAPPER(IQ4_NL)
F32_WRAPPER(IQ4_XS)
F32_WRAPPER(Q2_K)
F32_WRAPPER(Q3_K)

static void matvec_f32_F32(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) {
    for (int64_t r = 0; r < nr; r++) {
        const float *row = (const float *)((const uint8_t *)w + (uint64_t)r * rb);
        float sum = 0.0f;
        for (int64_t j = 0; j < n; j++) sum += row[j] * x[j];
        y[r] = sum;
    }
}

/* ---- fast lane: integer dot products against int8 activations ----------
 * Activations are fast-lane rows (kernels.h): int8 in groups of 16, scale
 * d[g] per group, ds[g] = d[g] * sum(qs of g). Per group: an exact integer
 * dot product (with the weight's integer sub-scale folded in), times the
 * group's activation scale; per block, times the weight's block scale. */

/* Q4_K/Q5_K: sub-block j (32 weights) = groups 2j, 2j+1; the min term is
 * dmin * m_j * (ds[2j] + ds[2j+1]). */
static void matvec_q8_k4(uint32_t type, const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {
    const int64_t nb = n / MU_QK_K;
    const int8_t *aq = xq;
    const float *ad = mu_act_d(xq, n), *ads = mu_act_ds(xq, n);
    const bool q5 = type == MU_TYPE_Q5_K;
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *row = (const uint8_t *)w + (uint64_t)r * rb;
        float sum = 0.0f;
        for (int64_t i = 0; i < nb; i++) {
            const mu_block_q4_K *b4 = (const mu_block_q4_K *)row + i;
            const mu_block_q5_K *b5 = (const mu_block_q5_K *)row + i;
            const uint8_t *qs = q5 ? b5->qs : b4->qs, *scales = q5 ? b5->scales : b4->scales;
            const uint16_t d16 = q5 ? b5->d : b4->d, dmin16 = q5 ? b5->dmin : b4->dmin;
            float isum = 0.0f, summ = 0.0f;
            for (int j = 0; j < 8; j++) {
                uint8_t sc, m;
                mu_get_scale_min_k4(j, scales, &sc, &m);
                for (int h = 0; h < 2; h++) {
                    int32_t s = 0;
                    for (int l = 16 * h; l < 16 * h + 16; l++) {
                        int v = j & 1 ? qs[32 * (j / 2) + l] >> 4 : qs[32 * (j / 2) + l] & 0xF;
                        if (q5) v |= ((b5->qh[l] >> j) & 1) << 4;
                        s += v * aq[i * MU_QK_K + 32 * j + l];
                    }
                    isum += ad[16 * i + 2 * j + h] * (float)(sc * s);
                }
                summ += (float)m * (ads[16 * i + 2 * j] + ads[16 * i + 2 * j + 1]);
            }
            sum += mu_f16_to_f32(d16) * isum - mu_f16_to_f32(dmin16) * summ;
        }
        y[r] = sum;
    }
}

static void matvec_q8_Q4_K(const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {
    matvec_q8_k4(MU_TYPE_Q4_K, w, rb, nr, xq, n, y);
}
static void matvec_q8_Q5_K(const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {
    matvec_q8_k4(MU_TYPE_Q5_K, w, rb, nr, xq, n, y);
}

/* Q6_K: sixteen groups of 16 with signed int8 scales; values are taken as
 * unsigned 0..63 and the -32 goes through ds:
 *   sum (q-32)*a*sc*da = sum q*a*sc*da - 32*sc*ds. */
static void matvec_q8_Q6_K(const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {
    const int64_t nb = n / MU_QK_K;
    const int8_t *aq = xq;
    const float *ad = mu_act_d(xq, n), *ads = mu_act_ds(xq, n);
    for (int64_t r = 0; r < nr; r++) {
        const mu_block_q6_K *b = (const mu_block_q6_K *)((const uint8_t *)w + (uint64_t)r * rb);
        float sum = 0.0f;
        for (int64_t i = 0; i < nb; i++) {
            uint8_t q6[256];
            for (int h = 0; h < 2; h++) {
                const uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
                uint8_t *o = q6 + 128 * h;
                for (int l = 0; l < 32; l++) {
                    o[l] = (uint8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
                    o[l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
                    o[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
                    o[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
                }
            }
            float isum = 0.0f, corr = 0.0f;
            for (int g = 0; g < 16; g++) {
                int32_t s = 0;
                for (int l = 0; l < 16; l++) s += q6[16 * g + l] * aq[i * MU_QK_K + 16 * g + l];
                isum += ad[16 * i + g] * (float)(b[i].scales[g] * s);
                corr += (float)b[i].scales[g] * ads[16 * i + g];
            }
            sum += mu_f16_to_f32(b[i].d) * (isum - 32.0f * corr);
        }
        y[r] = sum;
    }
}

/* The formats with an integer view (quant.h): per group of 16, the exact
 * integer dot product times the weight scale and the activation scale,
 * plus the offset times ds (the group's activation sum). */
static void matvec_q8_ints(uint32_t type, const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n,
                           float *y) {
    const mu_type_traits *tr = mu_type_get(type);
    const int be = tr->block_elems, groups = be / MU_ACT_GROUP;
    const int8_t *aq = xq;
    const float *ad = mu_act_d(xq, n), *ads = mu_act_ds(xq, n);
    mu_int_block ib;
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *row = (const uint8_t *)w + (uint64_t)r * rb;
        float sum = 0.0f;
        for (int64_t i = 0; i < n / be; i++) {
            tr->int_block(row + i * tr->block_bytes, &ib);
            for (int g = 0; g < groups; g++) {
                const int64_t ag = i * groups + g;
                int32_t s = 0;
                for (int l = 0; l < MU_ACT_GROUP; l++) s += ib.q[MU_ACT_GROUP * g + l] * aq[MU_ACT_GROUP * ag + l];
                sum += ib.scale[g] * (ad[ag] * (float)s);
                if (tr->int_offset) sum += ib.offset[g] * ads[ag];
            }
        }
        y[r] = sum;
    }
}

#define Q8_INTS_WRAPPER(T)                                                                                     \
    static void matvec_q8_##T(const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {  \
        matvec_q8_ints(MU_TYPE_##T, w, rb, nr, xq, n, y);                                                      \
    }
Q8_INTS_WRAPPER(Q8_0)
Q8_INTS_WRAPPER(Q4_0)
Q8_INTS_WRAPPER(Q4_1)
Q8_INTS_WRAPPER(Q5_0)
Q8_INTS_WRAPPER(Q5_1)
Q8_INTS_WRAPPER(IQ4_NL)
Q8_INTS_WRAPPER(IQ4_XS)
Q8_INTS_WRAPPER(Q2_K)
Q8_INTS_WRAPPER(Q3_K)

/* The fast-lane quantizer (kernels.h): per group of 16, iscale = 127/amax,
 * q = nearest-even(x * iscale) (lrintf in the default rounding mode, as
 * cvtps2dq does), d = 1/iscale, ds = d * sum(q). */
static void quantize_act(const float *x, void *dst, int64_t n) {
    int8_t *qs = dst;
    float *d = (float *)mu_act_d(dst, n), *ds = (float *)mu_act_ds(dst, n);
    for (int64_t g = 0; g < n / MU_ACT_GROUP; g++) {
        const float *xg = x + g * MU_ACT_GROUP;
        float amax = 0.0f;
        for (int i = 0; i < MU_ACT_GROUP; i++) amax = fmaxf(amax, fabsf(xg[i]));
        if (amax == 0.0f) {
            memset(qs + g * MU_ACT_GROUP, 0, MU_ACT_GROUP);
            d[g] = ds[g] = 0.0f;
            continue;
        }
        const float iscale = 127.0f / amax;
        int sum = 0;
        for (int i = 0; i < MU_ACT_GROUP; i++) {
            long q = lrintf(xg[i] * iscale);
            q = q > 127 ? 127 : q < -127 ? -127 : q;
            qs[g * MU_ACT_GROUP + i] = (int8_t)q;
            sum += (int)q;
        }
        d[g] = 1.0f / iscale;
        ds[g] = d[g] * (float)sum;
    }
}

/* The K-quant prefill layout (kernels.h). */
void mu_act_kq_permute(const void *src, void *dst, int64_t n) {
    const int8_t *qs = src;
    int8_t *qd = dst;
    const float *d = mu_act_d(src, n), *ds = mu_act_ds(src, n);
    float *dd = (float *)mu_act_d(dst, n), *dds = (float *)mu_act_ds(dst, n);
    const int64_t nb = n / MU_QK_K, groups = n / MU_ACT_GROUP;
    for (int64_t b = 0; b < nb; b++)
        for (int l = 0; l < 16; l++) {
            const int g = 4 * (l % 4) + l / 4;
            for (int c = 0; c < 4; c++) memcpy(qd + 256 * b + 64 * c + 4 * l, qs + 256 * b + 16 * g + 4 * c, 4);
            dd[16 * b + l] = d[16 * b + g];
            dds[16 * b + l] = ds[16 * b + g];
        }
    memcpy(qd + 256 * nb, qs + 256 * nb, (size_t)(n - 256 * nb));
    for (int64_t g = 16 * nb; g < groups; g++) dd[g] = d[g], dds[g] = ds[g];
}

void mu_act_kd_pack_row(const void *src, int64_t t, int64_t T, int64_t n, void *dst) {
    const int8_t *qs = src;
    const float *d = mu_act_d(src, n), *ds = mu_act_ds(src, n);
    for (int64_t b = 0; b < n / MU_QK_K; b++) {
        uint8_t *rec = (uint8_t *)dst + (uint64_t)(b * T + t) * MU_KD_REC;
        float dd[16], dds[16];
        int32_t bias[16];
        for (int l = 0; l < 16; l++) {
            const int g = 4 * (l % 4) + l / 4;
            for (int c = 0; c < 4; c++) memcpy(rec + 64 * c + 4 * l, qs + 256 * b + 16 * g + 4 * c, 4);
            dd[l] = d[16 * b + g];
            dds[l] = ds[16 * b + g];
            int32_t sum = 0;
            for (int i = 0; i < 16; i++) sum += qs[256 * b + 16 * g + i];
            bias[l] = -32 * sum;
        }
        memcpy(rec + 256, dd, sizeof dd);
        memcpy(rec + 320, dds, sizeof dds);
        memcpy(rec + 384, bias, sizeof bias);
    }
}

void mu_act_kd_pack(const void *src, uint64_t xb, int64_t T, int64_t n, void *dst) {
    for (int64_t t = 0; t < T; t++) mu_act_kd_pack_row((const uint8_t *)src + (uint64_t)t * xb, t, T, n, dst);
}

/* ---- prefill: one matvec per token -------------------------------------- */

static void matmul_f32_ref(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, int64_t T, float *y,
                           int64_t ldy, mu_matvec_f32_fn mv) {
    for (int64_t t = 0; t < T; t++) mv(w, rb, nr, x + t * n, n, y + t * ldy);
}
/* Rows in tiles of 16 that stay in cache across the tokens (this is also
 * the tables' batched decode, matvec_q8_rows, where no ISA has its own). */
static void matmul_q8_ref(const void *w, uint64_t rb, int64_t nr, const void *xq, uint64_t xb, int64_t n, int64_t T,
                          float *y, int64_t ldy, mu_matvec_q8_fn mv) {
    for (int64_t r0 = 0; r0 < nr; r0 += 16)
        for (int64_t t = 0; t < T; t++)
            mv((const uint8_t *)w + (uint64_t)r0 * rb, rb, nr - r0 < 16 ? nr - r0 : 16,
               (const uint8_t *)xq + (uint64_t)t * xb, n, y + t * ldy + r0);
}

#define MATMUL_WRAPPERS(T)                                                                                      \
    static void matmul_f32_##T(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, int64_t nt, \
                               float *y, int64_t ldy) {                                                       \
        matmul_f32_ref(w, rb, nr, x, n, nt, y, ldy, matvec_f32_##T);                                          \
    }
#define MATMUL_Q8_WRAPPERS(T)                                                                                   \
    static void matmul_q8_##T(const void *w, uint64_t rb, int64_t nr, const void *xq, uint64_t xb, int64_t n,  \
                              int64_t nt, float *y, int64_t ldy) {                                            \
        matmul_q8_ref(w, rb, nr, xq, xb, n, nt, y, ldy, matvec_q8_##T);                                       \
    }
MATMUL_WRAPPERS(F32)
MATMUL_WRAPPERS(F16)
MATMUL_WRAPPERS(BF16)
MATMUL_WRAPPERS(Q8_0)
MATMUL_WRAPPERS(Q4_0)
MATMUL_WRAPPERS(Q4_K)
MATMUL_WRAPPERS(Q5_K)
MATMUL_WRAPPERS(Q6_K)
MATMUL_WRAPPERS(Q4_1)
MATMUL_WRAPPERS(Q5_0)
MATMUL_WRAPPERS(Q5_1)
MATMUL_WRAPPERS(IQ4_NL)
MATMUL_WRAPPERS(IQ4_XS)
MATMUL_WRAPPERS(Q2_K)
MATMUL_WRAPPERS(Q3_K)
MATMUL_Q8_WRAPPERS(Q8_0)
MATMUL_Q8_WRAPPERS(Q4_0)
MATMUL_Q8_WRAPPERS(Q4_K)
MATMUL_Q8_WRAPPERS(Q5_K)
MATMUL_Q8_WRAPPERS(Q6_K)
MATMUL_Q8_WRAPPERS(Q4_1)
MATMUL_Q8_WRAPPERS(Q5_0)
MATMUL_Q8_WRAPPERS(Q5_1)
MATMUL_Q8_WRAPPERS(IQ4_NL)
MATMUL_Q8_WRAPPERS(IQ4_XS)
MATMUL_Q8_WRAPPERS(Q2_K)
MATMUL_Q8_WRAPPERS(Q3_K)

/* ---- attention helpers ------------------------------------------------ */

static void cvt_f16(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = mu_f16_to_f32(src[i]);
}

static void attn_scores(const float *q, int nq, const float *k, int64_t ldk, int nrows, int hd, float scale, float *s,
                        int lds) {
    for (int h = 0; h < nq; h++)
        for (int r = 0; r < nrows; r++) {
            float sum = 0.0f;
            for (int e = 0; e < hd; e++) sum += q[(int64_t)h * hd + e] * k[r * ldk + e];
            s[(int64_t)h * lds + r] = sum * scale;
        }
}

static void attn_pv(const float *p, int nq, int ldp, const float *v, int64_t ldv, int nrows, int hd, float *acc) {
    for (int h = 0; h < nq; h++)
        for (int r = 0; r < nrows; r++) {
            const float w = p[(int64_t)h * ldp + r];
            for (int e = 0; e < hd; e++) acc[(int64_t)h * hd + e] += w * v[r * ldv + e];
        }
}

static float exp_sum(float *x, int64_t n, float sub) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += x[i] = expf(x[i] - sub);
    return sum;
}

static void silu_mul(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
static void sigmoid_mul(float *o, const float *g, int64_t n) {
    for (int64_t i = 0; i < n; i++) o[i] = o[i] / (1.0f + expf(-g[i]));
}

static void softcap(float *x, int64_t n, float scale, float cap) { mu_logits_finish(x, n, scale, cap); }

static uint64_t stream_read(const void *p, size_t n) {
    const uint64_t *w = p;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= n / 8; i += 4) {
        s0 ^= w[i];
        s1 ^= w[i + 1];
        s2 ^= w[i + 2];
        s3 ^= w[i + 3];
    }
    return s0 ^ s1 ^ s2 ^ s3;
}

static mu_cpu_kernels scalar_table;

const mu_cpu_kernels *mu_cpu_kernels_scalar(void) {
    mu_cpu_kernels *k = &scalar_table;
    if (k->isa) return k;
    MU_KERNELS_SET_FORMATS(k);
    MU_KERNELS_SET_INT_FORMATS(k);
    MU_KERNELS_SET_HELPERS(k);
    k->isa = "scalar";
    return k;
}

bool mu_cpu_fast_type(uint32_t weight_type) {
    switch (weight_type) {
    case MU_TYPE_Q4_K: case MU_TYPE_Q5_K: case MU_TYPE_Q6_K: return true;
    default: return mu_type_get(weight_type) && mu_type_get(weight_type)->int_block; /* the integer-view formats */
    }
}

static bool cpu_has(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool bw = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    if (!strcmp(isa, "avx2")) return avx2;
    if (!strcmp(isa, "avx512bw")) return bw;
    if (!strcmp(isa, "avx512")) return bw && __builtin_cpu_supports("avx512vnni");
#elif defined(__aarch64__)
    if (!strcmp(isa, "neon")) return true; /* Advanced SIMD is part of AArch64 */
#endif
    return !strcmp(isa, "scalar");
}

static const mu_cpu_kernels *table_for(const char *isa) {
    if (!cpu_has(isa)) return NULL;
    if (!strcmp(isa, "scalar")) return mu_cpu_kernels_scalar();
    if (!strcmp(isa, "avx2")) return mu_cpu_kernels_avx2();
    if (!strcmp(isa, "avx512bw")) return mu_cpu_kernels_avx512bw();
    if (!strcmp(isa, "avx512")) return mu_cpu_kernels_avx512();
    if (!strcmp(isa, "neon")) return mu_cpu_kernels_neon();
    return NULL;
}

/* Best last. */
static const char *const isa_order[] = {"scalar", "neon", "avx2", "avx512bw", "avx512"};

int mu_cpu_kernels_all(const mu_cpu_kernels **out, int cap) {
    int n = 0;
    for (size_t i = 0; i < sizeof isa_order / sizeof isa_order[0]; i++) {
        const mu_cpu_kernels *k = table_for(isa_order[i]);
        if (k && n < cap) out[n++] = k;
    }
    return n;
}

const mu_cpu_kernels *mu_cpu_kernels_get(const char *isa) {
    if (!isa || !*isa) isa = getenv("MUSER_ISA");
    if (isa && *isa) return table_for(isa);
    const mu_cpu_kernels *all[8];
    int n = mu_cpu_kernels_all(all, 8);
    return all[n - 1]; /* scalar is always there */
}

/* Tables of the ISAs this build does not compile (the per-ISA files define
 * theirs where the target has them). */
#if !(defined(__x86_64__) || defined(__i386__))
const mu_cpu_kernels *mu_cpu_kernels_avx2(void) { return NULL; }
const mu_cpu_kernels *mu_cpu_kernels_avx512bw(void) { return NULL; }
const mu_cpu_kernels *mu_cpu_kernels_avx512(void) { return NULL; }
#endif
#if !defined(__aarch64__)
const mu_cpu_kernels *mu_cpu_kernels_neon(void) { return NULL; }
#endif
