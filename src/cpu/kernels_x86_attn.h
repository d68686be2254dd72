/* kernels_x86_attn.h — the attention helpers; part of kernels_x86.h,
 * included from it (it uses that file's vocabulary and helpers). */
#ifndef MU_KERNELS_X86_H
#error "include cpu/kernels_x86.h"
#endif

/* =====================================================================
 * Attention helpers. */

static void cvt_f16(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) vf_store(dst + i, vf_from_f16(src + i));
    for (; i < n; i++) dst[i] = f16f(src[i]);
}

MU_INLINE float dot_f32(const float *a, const float *b, int n) {
    vf s0 = vf_zero(), s1 = vf_zero();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = vf_fma(vf_load(a + i), vf_load(b + i), s0);
        s1 = vf_fma(vf_load(a + i + 16), vf_load(b + i + 16), s1);
    }
    for (; i + 16 <= n; i += 16) s0 = vf_fma(vf_load(a + i), vf_load(b + i), s0);
    float sum = vf_hsum(vf_add(s0, s1));
    for (; i < n; i++) sum += a[i] * b[i];
    return sum;
}

/* Four query heads per pass over a row, so each loaded K vector serves
 * four dot products. */
static void attn_scores(const float *q, int nq, const float *k, int64_t ldk, int nrows, int hd, float scale, float *s,
                        int lds) {
    int h = 0;
    if (hd % 16 == 0)
        for (; h + 4 <= nq; h += 4) {
            const float *q0 = q + (int64_t)h * hd;
            for (int r = 0; r < nrows; r++) {
                const float *kr = k + r * ldk;
                vf a0 = vf_zero(), a1 = vf_zero(), a2 = vf_zero(), a3 = vf_zero();
                for (int e = 0; e < hd; e += 16) {
                    const vf kv = vf_load(kr + e);
                    a0 = vf_fma(vf_load(q0 + e), kv, a0);
                    a1 = vf_fma(vf_load(q0 + hd + e), kv, a1);
                    a2 = vf_fma(vf_load(q0 + 2 * hd + e), kv, a2);
                    a3 = vf_fma(vf_load(q0 + 3 * hd + e), kv, a3);
                }
                s[(int64_t)h * lds + r] = vf_hsum(a0) * scale;
                s[(int64_t)(h + 1) * lds + r] = vf_hsum(a1) * scale;
                s[(int64_t)(h + 2) * lds + r] = vf_hsum(a2) * scale;
                s[(int64_t)(h + 3) * lds + r] = vf_hsum(a3) * scale;
            }
        }
    for (; h < nq; h++)
        for (int r = 0; r < nrows; r++) s[(int64_t)h * lds + r] = dot_f32(q + (int64_t)h * hd, k + r * ldk, hd) * scale;
}

/* Per head, 64 output lanes at a time stay in registers across the rows. */
static void attn_pv(const float *p, int nq, int ldp, const float *v, int64_t ldv, int nrows, int hd, float *acc) {
    for (int h = 0; h < nq; h++) {
        const float *ph = p + (int64_t)h * ldp;
        float *out = acc + (int64_t)h * hd;
        int e = 0;
        for (; e + 64 <= hd; e += 64) {
            vf o0 = vf_load(out + e), o1 = vf_load(out + e + 16), o2 = vf_load(out + e + 32), o3 = vf_load(out + e + 48);
            for (int r = 0; r < nrows; r++) {
                const vf w = vf_bcast(ph + r);
                const float *vr = v + r * ldv + e;
                o0 = vf_fma(w, vf_load(vr), o0);
                o1 = vf_fma(w, vf_load(vr + 16), o1);
                o2 = vf_fma(w, vf_load(vr + 32), o2);
                o3 = vf_fma(w, vf_load(vr + 48), o3);
            }
            vf_store(out + e, o0);
            vf_store(out + e + 16, o1);
            vf_store(out + e + 32, o2);
            vf_store(out + e + 48, o3);
        }
        for (; e + 16 <= hd; e += 16) {
            vf o = vf_load(out + e);
            for (int r = 0; r < nrows; r++) o = vf_fma(vf_bcast(ph + r), vf_load(v + r * ldv + e), o);
            vf_store(out + e, o);
        }
        for (; e < hd; e++)
            for (int r = 0; r < nrows; r++) out[e] += ph[r] * v[r * ldv + e];
    }
}

/* exp(x) = 2^k * e^r with k = round(x / ln 2) and |r| <= ln2/2 (Cody-Waite
 * split of ln 2), e^r by its degree-6 Taylor polynomial (relative error
 * below 2e-7 on that interval). Below -87.3 (under FLT_MIN) the result is
 * 0; above 88.7 it stays at exp(88.7) (finite). */
MU_INLINE vf vf_exp(vf x) {
    x = vf_min(x, vf_set1(88.7f));
    const vf k = vf_round_nearest(vf_mul(x, vf_set1(1.44269504088896341f)));
    vf r = vf_fma(k, vf_set1(-0.693359375f), x);
    r = vf_fma(k, vf_set1(2.12194440e-4f), r);
    vf p = vf_set1(1.0f / 720.0f);
    p = vf_fma(p, r, vf_set1(1.0f / 120.0f));
    p = vf_fma(p, r, vf_set1(1.0f / 24.0f));
    p = vf_fma(p, r, vf_set1(1.0f / 6.0f));
    p = vf_fma(p, r, vf_set1(0.5f));
    p = vf_fma(p, r, vf_set1(1.0f));
    p = vf_fma(p, r, vf_set1(1.0f));
    const vf lim = vf_set1(-87.3f);
    return vf_zero_below(vf_scale2(p, vf_max(k, vf_set1(-126.0f))), x, lim);
}

static float exp_sum(float *x, int64_t n, float sub) {
    const vf s = vf_set1(sub);
    vf acc = vf_zero();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const vf e = vf_exp(vf_sub(vf_load(x + i), s));
        vf_store(x + i, e);
        acc = vf_add(acc, e);
    }
    float sum = vf_hsum(acc);
    for (; i < n; i++) sum += x[i] = expf(x[i] - sub);
    return sum;
}

/* g = silu(g) * u = g / (1 + exp(-g)) * u */
static void silu_mul(float *g, const float *u, int64_t n) {
    const vf one = vf_set1(1.0f), zero = vf_zero();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const vf x = vf_load(g + i);
        vf_store(g + i, vf_mul(vf_div(x, vf_add(one, vf_exp(vf_sub(zero, x)))), vf_load(u + i)));
    }
    for (; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* o = o * sigmoid(g) = o / (1 + exp(-g)) */
static void sigmoid_mul(float *o, const float *g, int64_t n) {
    const vf one = vf_set1(1.0f), zero = vf_zero();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        vf_store(o + i, vf_div(vf_load(o + i), vf_add(one, vf_exp(vf_sub(zero, vf_load(g + i))))));
    for (; i < n; i++) o[i] = o[i] / (1.0f + expf(-g[i]));
}

/* x = cap * tanh(x * scale / cap), with tanh(y) = sign(y) * (1 - 2 / (exp(2|y|) + 1))
 * (absolute error about 1e-7 * cap); x * scale when cap is 0. */
static void softcap(float *x, int64_t n, float scale, float cap) {
    if (cap == 0.0f) {
        for (int64_t i = 0; i < n; i++) x[i] *= scale;
        return;
    }
    const vf in = vf_set1(2.0f * scale / cap), c = vf_set1(cap), one = vf_set1(1.0f), two = vf_set1(2.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const vf v = vf_load(x + i), y2 = vf_mul(vf_abs(v), in);
        const vf t = vf_sub(one, vf_div(two, vf_add(vf_exp(y2), one)));
        /* restore the sign of x (scale and cap are positive) */
        const vf r = vf_mul(t, c);
        vf_store(x + i, vf_sub(r, vf_mul(vf_add(r, r), vf_negative_mask(v))));
    }
    for (; i < n; i++) x[i] = tanhf(x[i] * scale / cap) * cap;
}

/* Streams n bytes (a multiple of 256) through the loads; returns a value
 * that depends on every byte so nothing is optimized away. */
static uint64_t stream_read(const void *p, size_t n) {
    vi s0 = vi_zero(), s1 = vi_zero(), s2 = vi_zero(), s3 = vi_zero();
    const uint8_t *c = p;
    for (size_t i = 0; i + 256 <= n; i += 256) {
        s0 = vi_xor(s0, vi_load(c + i));
        s1 = vi_xor(s1, vi_load(c + i + 64));
        s2 = vi_xor(s2, vi_load(c + i + 128));
        s3 = vi_xor(s3, vi_load(c + i + 192));
    }
    return (uint64_t)(uint32_t)vi_hsum32(vi_xor(vi_xor(s0, s1), vi_xor(s2, s3)));
}

