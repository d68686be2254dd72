/* kernels_x86_kq.h — the K-quant kernels (fast lane, its prefill, exact lane); part of kernels_x86.h,
 * included from it (it uses that file's vocabulary and helpers). */
#ifndef MU_KERNELS_X86_H
#error "include cpu/kernels_x86.h"
#endif

/* =====================================================================
 * Fast lane, K-quants: unpacked block (4 units of 64 unsigned values, their
 * 16-bit scale vectors, 16 mins for the bsums term, and the two f32 block
 * scales). */

typedef struct kq_block {
    vi q[4], sc[4];
    __m256i mins; /* 16 x s16: the weight of bsums[g] in the min term */
    float d, dmin;
} kq_block;

enum { KQ_Q4_K, KQ_Q5_K, KQ_Q6_K };

MU_INLINE void kq_unpack_k4(const uint8_t *scales, __m128i *sc16, __m256i *mins) {
    uint64_t sc, m;
    k4_scales(scales, &sc, &m);
    *sc16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc));
    const __m128i mm = _mm_cvtsi64_si128((long long)m);
    *mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mm, mm)); /* m_j covers bsums 2j and 2j+1 */
}

/* Unit c of Q4_K/Q5_K: chunk c's low nibbles (sub-block 2c) then its high
 * nibbles (sub-block 2c+1): 64 consecutive weights, matching 64
 * consecutive activations. */
MU_INLINE void kq_unpack(int fmt, const void *blk, kq_block *u) {
    const vi m0F = vi_set1_8(0x0F);
    if (fmt == KQ_Q4_K || fmt == KQ_Q5_K) {
        const mu_block_q4_K *b4 = blk;
        const mu_block_q5_K *b5 = blk;
        const uint8_t *qs = fmt == KQ_Q4_K ? b4->qs : b5->qs;
        __m128i sc16;
        kq_unpack_k4(fmt == KQ_Q4_K ? b4->scales : b5->scales, &sc16, &u->mins);
        vi hbits = fmt == KQ_Q5_K ? vi_bcast32(b5->qh) : vi_zero();
        MU_UNROLL(4)
        for (int c = 0; c < 4; c++) {
            vi q = vi_and(vi_srl16_halves(vi_bcast32(qs + 32 * c), 0, 4), m0F);
            if (fmt == KQ_Q5_K) {
                /* bit 2c (low half) and 2c+1 (high half) of qh moved to bit 4 */
                const int lo = 2 * c, hi = 2 * c + 1;
                vi h = lo <= 3 ? vi_sll16_halves(hbits, 4 - lo, 4 - hi) : vi_srl16_halves(hbits, lo - 4, hi - 4);
                q = vi_or(q, vi_and(h, vi_set1_8(0x10)));
            }
            u->q[c] = q;
            u->sc[c] = vi_spread16x2(sc16, 2 * c, 2 * c + 1);
        }
        u->d = f16f(b4->d); /* d and dmin sit at the same offsets in both */
        u->dmin = f16f(b4->dmin);
    } else {
        const mu_block_q6_K *b = blk;
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        const vi m30 = vi_set1_8(0x30);
        MU_UNROLL(2)
        for (int h = 0; h < 2; h++) {
            const vi ql = vi_load(b->ql + 64 * h), qh = vi_bcast32(b->qh + 32 * h);
            /* elements 128h + 0..63: low nibbles with qh bits 0-1 / 2-3 */
            u->q[2 * h] = vi_or(vi_and(ql, m0F), vi_and(vi_sll16_halves(qh, 4, 2), m30));
            /* elements 128h + 64..127: high nibbles with qh bits 4-5 / 6-7 */
            u->q[2 * h + 1] = vi_or(vi_and(vi_srl16_halves(ql, 4, 4), m0F), vi_and(vi_srl16_halves(qh, 0, 2), m30));
            u->sc[2 * h] = vi_spread8x4(sc16, 8 * h);
            u->sc[2 * h + 1] = vi_spread8x4(sc16, 8 * h + 4);
        }
        u->mins = _mm256_slli_epi16(sc16, 5); /* sum (q-32)*a*sc = sum q*a*sc - 32*sc*bsum */
        u->d = u->dmin = f16f(b->d);
    }
}

MU_INLINE uint64_t kq_block_bytes(int fmt) {
    return fmt == KQ_Q4_K ? sizeof(mu_block_q4_K) : fmt == KQ_Q5_K ? sizeof(mu_block_q5_K) : sizeof(mu_block_q6_K);
}

/* The activation side of a tile: nt token rows (fast-lane rows, kernels.h)
 * and the column segment the tile covers. */
typedef struct kq_tokens {
    const uint8_t *a0; /* token 0's row */
    uint64_t stride;   /* bytes between token rows */
    int64_t n;         /* row length */
    int64_t b0, nb;    /* the column segment: first block, blocks */
} kq_tokens;

/* A register tile of one weight row x nt tokens: out[t] = row . token t.
 * Each weight block is unpacked once for all nt tokens. nt is a
 * compile-time constant at every call, so acc[] lives in registers.
 * (Measured on Zen 5: one row x 4 tokens beats 1x8, 2x4 and 2x8, which
 * spill or overflow L1 with the tokens' activations.) */
MU_INLINE void kq_tile(int fmt, const uint8_t *row, const kq_tokens *tk, int nt, float *out) {
    const uint64_t bb = kq_block_bytes(fmt);
    vf acc[KQ_NT];
    MU_UNROLL(8)
    for (int t = 0; t < nt; t++) acc[t] = vf_zero();
    for (int64_t i = 0; i < tk->nb; i++) {
        const uint8_t *blk = row + (uint64_t)i * bb;
        prefetch_span(blk, bb);
        kq_block u;
        kq_unpack(fmt, blk, &u);
        const vf d = vf_set1(u.d), mins = vf_mul(vf_from_i32(vi_from_s16x16(u.mins)), vf_set1(u.dmin));
        MU_UNROLL(8)
        for (int t = 0; t < nt; t++) {
            const uint8_t *arow = tk->a0 + (uint64_t)t * tk->stride;
            const int8_t *aq = (const int8_t *)arow + (tk->b0 + i) * MU_QK_K;
            /* the block's 16 group scales; unit c's lanes take groups 4c..4c+3 */
            const vf dv = vf_load(mu_act_d(arow, tk->n) + 16 * (tk->b0 + i));
            vf p = vf_zero();
            MU_UNROLL(4)
            for (int c = 0; c < 4; c++) {
                const vi isum = vi_dpwssd(vi_zero(), vi_maddubs(u.q[c], vi_load(aq + 64 * c)), u.sc[c]);
                p = vf_fma(vf_from_i32(isum), vf_spread4x4(dv, 4 * c), p);
            }
            /* d * sum(isum * da) - sum_g mins_g * ds_g */
            acc[t] = vf_fma(p, d, acc[t]);
            acc[t] = vf_sub(acc[t], vf_mul(mins, vf_load(mu_act_ds(arow, tk->n) + 16 * (tk->b0 + i))));
        }
    }
    MU_UNROLL(8)
    for (int t = 0; t < nt; t++) out[t] = vf_hsum(acc[t]);
}

/* Rows [r0, r1) against the nt tokens of tk; y is token-major (y[t*ldy +
 * r]); add: accumulate into it (a later column segment). */
MU_INLINE void kq_rows(int fmt, const uint8_t *w, uint64_t rb, int64_t r0, int64_t r1, const kq_tokens *tk, int nt,
                       float *y, int64_t ldy, bool add) {
    float out[KQ_NT];
    for (int64_t r = r0; r < r1; r++) {
        kq_tile(fmt, w + (uint64_t)r * rb, tk, nt, out);
        for (int t = 0; t < nt; t++) y[t * ldy + r] = add ? y[t * ldy + r] + out[t] : out[t];
    }
}

/* Decode, batched decode and prefill alike. Rows go in tiles that stay in
 * L2 while every token tile of KQ_NT runs over them (a ragged token tail in
 * one smaller tile). Columns go in segments of seg blocks: in prefill
 * short ones, so a token tile's activations stay in L1 across the rows (16
 * blocks x 4 tokens = 17 KiB); in decode long ones, so each row streams
 * from memory in one run. A token's numbers depend on the segments only,
 * never on its tile, so with the decode segments every row of a batch gets
 * exactly its one-row matvec. */
#define KQ_SEG_PREFILL 16
#define KQ_SEG_DECODE 96

MU_INLINE void kq_matmul(int fmt, const void *w, uint64_t rb, int64_t nr, const void *xq, uint64_t xb, int64_t n,
                         int64_t T, float *y, int64_t ldy, int64_t seg) {
    const int64_t nb_all = n / MU_QK_K, bb = (int64_t)kq_block_bytes(fmt);
    int64_t rows_tile = (int64_t)((384u << 10) / (rb ? rb : 1));
    if (rows_tile < 4) rows_tile = 4;
    for (int64_t b0 = 0; b0 < nb_all; b0 += seg) {
        const int64_t nb = nb_all - b0 < seg ? nb_all - b0 : seg;
        const uint8_t *wseg = (const uint8_t *)w + b0 * bb;
        for (int64_t r0 = 0; r0 < nr; r0 += rows_tile) {
            const int64_t r1 = r0 + rows_tile < nr ? r0 + rows_tile : nr;
            for (int64_t t = 0; t < T;) {
                const int nt = T - t >= KQ_NT ? KQ_NT : (int)(T - t);
                const kq_tokens tk = {(const uint8_t *)xq + (uint64_t)t * xb, xb, n, b0, nb};
                float *yt = y + t * ldy;
                /* nt a compile-time constant in every call, so the tile's sums stay in registers */
                if (nt == KQ_NT) kq_rows(fmt, wseg, rb, r0, r1, &tk, KQ_NT, yt, ldy, b0 > 0);
#if KQ_NT > 3
                else if (nt == 3) kq_rows(fmt, wseg, rb, r0, r1, &tk, 3, yt, ldy, b0 > 0);
#endif
#if KQ_NT > 2
                else if (nt == 2) kq_rows(fmt, wseg, rb, r0, r1, &tk, 2, yt, ldy, b0 > 0);
#endif
                else kq_rows(fmt, wseg, rb, r0, r1, &tk, 1, yt, ldy, b0 > 0);
                t += nt;
            }
        }
    }
}

#define FAST_KQUANT(fmt, id)                                                                                     \
    static void matvec_q8_##fmt(const void *w, uint64_t rb, int64_t nr, const void *xq, int64_t n, float *y) {   \
        kq_matmul(id, w, rb, nr, xq, 0, n, 1, y, nr, KQ_SEG_DECODE);                                           \
    }                                                                                                          \
    static void matmul_q8_##fmt(const void *w, uint64_t rb, int64_t nr, const void *xq, uint64_t xb, int64_t n, \
                                int64_t T, float *y, int64_t ldy) {                                            \
        kq_matmul(id, w, rb, nr, xq, xb, n, T, y, ldy, T >= KQ_NT ? KQ_SEG_PREFILL : KQ_SEG_DECODE);           \
    }                                                                                                          \
    static void matvec_q8_rows_##fmt(const void *w, uint64_t rb, int64_t nr, const void *xq, uint64_t xb,      \
                                     int64_t n, int64_t T, float *y, int64_t ldy) {                            \
        kq_matmul(id, w, rb, nr, xq, xb, n, T, y, ldy, KQ_SEG_DECODE);                                         \
    }
FAST_KQUANT(Q4_K, KQ_Q4_K)
FAST_KQUANT(Q5_K, KQ_Q5_K)
FAST_KQUANT(Q6_K, KQ_Q6_K)

/* ---- fast-lane prefill, K-quants, on permuted activations (AVX-512) -----
 * The activations come in the layout of mu_act_kq_permute (kernels.h).
 * The block's natural units V_c (lane i of V_c: the 16 weights of group
 * 4c + i, dword k of it: weights 16(4c+i) + 4k..+3) are transposed 4x4 in
 * dwords within each 128-bit lane, giving U_k with dword L = weights
 * 16G(L) + 4k..+3 (G as in kernels.h): the order of the permuted
 * activations. Dword lane L of every U_k then lies in activation group
 * G(L) and in one weight scale group, so per block and token
 *     isum = sum_k dpbusd(U_k, a'_k)          (16 exact group dot products)
 *     acc += (float(isum) * da') * scw  -  mw * ds'
 * with scw = d * (the group's integer scale) and mw = dmin * (its min), or
 * 32 * d * scale for Q6_K, both permuted by G once per block. Four vector
 * ops per 64 products plus four per block and token, against about six
 * per 64 in kq_tile; the transpose and scales are paid once per tile of
 * KP_NT tokens. */
#if MU_X86_512
#ifndef KP_NT
#define KP_NT 8
#endif
#ifndef KP_SEG
#define KP_SEG 8 /* blocks per column segment: 8 tokens x 8 blocks x 384 B of activations in L1 */
#endif

typedef struct kp_block {
    vi q[4];
    vf scw, mw;
} kp_block;

MU_INLINE void kp_unpack(int fmt, const void *blk, kp_block *u) {
    kq_block k;
    kq_unpack(fmt, blk, &k);
    const vi t0 = vi_unpacklo32(k.q[0], k.q[1]), t1 = vi_unpackhi32(k.q[0], k.q[1]);
    const vi t2 = vi_unpacklo32(k.q[2], k.q[3]), t3 = vi_unpackhi32(k.q[2], k.q[3]);
    u->q[0] = vi_unpacklo64(t0, t2);
    u->q[1] = vi_unpackhi64(t0, t2);
    u->q[2] = vi_unpacklo64(t1, t3);
    u->q[3] = vi_unpackhi64(t1, t3);
    if (fmt == KQ_Q6_K) {
        const mu_block_q6_K *b = blk;
        const __m128i g = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15); /* G(L) */
        u->scw = vf_mul(vf_from_s8_128(_mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)b->scales), g)), vf_set1(k.d));
        u->mw = vf_mul(u->scw, vf_set1(32.0f));
    } else {
        /* scales and mins sit at the same offsets in Q4_K and Q5_K */
        uint64_t sc, m;
        k4_scales(((const mu_block_q4_K *)blk)->scales, &sc, &m);
        const __m128i sub = _mm_setr_epi8(0, 2, 4, 6, 0, 2, 4, 6, 1, 3, 5, 7, 1, 3, 5, 7); /* G(L) / 2 */
        u->scw = vf_mul(vf_from_u8_128(_mm_shuffle_epi8(_mm_cvtsi64_si128((long long)sc), sub)), vf_set1(k.d));
        u->mw = vf_mul(vf_from_u8_128(_mm_shuffle_epi8(_mm_cvtsi64_si128((long long)m), sub)), vf_set1(k.dmin));
    }
}

/* One weight row x nt tokens (nt a compile-time constant at each call). */
MU_INLINE void kp_tile(int fmt, const uint8_t *row, const kq_tokens *tk, int nt, float *out) {
    const uint64_t bb = kq_block_bytes(fmt);
    vf acc[KP_NT]; /* every loop over the tokens is unrolled, so acc stays in registers */
    MU_UNROLL(16)
    for (int t = 0; t < nt; t++) acc[t] = vf_zero();
    /* token t's bytes lie t*stride past token 0's: one base pointer per
     * array, advanced per block, and nt - 1 loop-invariant offsets */
    const uint64_t st = tk->stride;
    const uint8_t *aq = tk->a0 + tk->b0 * MU_QK_K;
    const uint8_t *ad = (const uint8_t *)(mu_act_d(tk->a0, tk->n) + 16 * tk->b0);
    const uint8_t *ads = (const uint8_t *)(mu_act_ds(tk->a0, tk->n) + 16 * tk->b0);
    for (int64_t i = 0; i < tk->nb; i++, aq += MU_QK_K, ad += 64, ads += 64) {
        const uint8_t *blk = row + (uint64_t)i * bb;
        prefetch_span(blk, bb);
        kp_block u;
        kp_unpack(fmt, blk, &u);
        /* unit-major: the eight tokens' integer sums advance together
         * (measured 4% over token-major chains of four dependent vpdpbusd) */
        vi s[KP_NT];
        MU_UNROLL(4)
        for (int c = 0; c < 4; c++)
            MU_UNROLL(16)
            for (int t = 0; t < nt; t++)
                s[t] = vi_dpbusd(c ? s[t] : vi_zero(), u.q[c], vi_load(aq + (uint64_t)t * st + 64 * c));
        MU_UNROLL(16)
        for (int t = 0; t < nt; t++) {
            const vf p = vf_mul(vf_from_i32(s[t]), vf_load((const float *)(ad + (uint64_t)t * st)));
            acc[t] = vf_fma(p, u.scw, acc[t]);
            acc[t] = vf_fnmadd(u.mw, vf_load((const float *)(ads + (uint64_t)t * st)), acc[t]);
        }
    }
    MU_UNROLL(16)
    for (int t = 0; t < nt; t++) out[t] = vf_hsum(acc[t]);
}

MU_INLINE void kp_rows(int fmt, const uint8_t *w, uint64_t rb, int64_t r0, int64_t r1, const kq_tokens *tk, int nt,
                       float *y, int64_t ldy, bool add) {
    float out[KP_NT];
    for (int64_t r = r0; r < r1; r++) {
        kp_tile(fmt, w + (uint64_t)r * rb, tk, nt, out);
        MU_UNROLL(16)
        for (int t = 0; t < nt; t++) y[t * ldy + r] = add ? y[t * ldy + r] + out[t] : out[t];
    }
}

/* As kq_matmul: column segments of KP_SEG blocks, row tiles that stay in
 * L2, token tiles of KP_NT (a ragged tail in fours, then singly). */
MU_INLINE void kp_matmul(int fmt, const void *w, uint64_t rb, int64_t nr, const void *xq, uint64_t xb, int64_t n,
                         int64_t T, float *y, int64_t ldy) {
    const int64_t nb_all = n / MU_QK_K, bb = (int64_t)kq_block_bytes(fmt);
    int64_t rows_tile = (int64_t)((384u << 10) / (rb ? rb : 1));
    if (rows_tile < 4) rows_tile = 4;
    for (int64_t b0 = 0; b0 < nb_all; b0 += KP_SEG) {
        const int64_t nb = nb_all - b0 < KP_SEG ? nb_all - b0 : KP_SEG;
        const uint8_t *wseg = (const uint8_t *)w + b0 * bb;
        for (int64_t r0 = 0; r0 < nr; r0 += rows_tile) {
            const int64_t r1 = r0 + rows_tile < nr ? r0 + rows_tile : nr;
            for (int64_t t = 0; t < T;) {
                const int nt = T - t >= KP_NT ? KP_NT : T - t >= 4 ? 4 : 1;
                const kq_tokens tk = {(const uint8_t *)xq + (uint64_t)t * xb, xb, n, b0, nb};
                if (nt == KP_NT) kp_rows(fmt, wseg, rb, r0, r1, &tk, KP_NT, y + t * ldy, ldy, b0 > 0);
                else if (nt == 4) kp_rows(fmt, wseg, rb, r0, r1, &tk, 4, y + t * ldy, ldy, b0 > 0);
                else kp_rows(fmt, wseg, rb, r0, r1, &tk, 1, y + t * ldy, ldy, b0 > 0);
                t += nt;
            }
        }
    }
}

#define FAST_KQUANT_KP(fmt, id)                                                                                  \
    static void matmul_q8_kp_##fmt(const void *w, uint64_t rb, int64_t nr, const void *xq, uint64_t xb,         \
                                   int64_t n, int64_t T, float *y, int64_t ldy) {                               \
        kp_matmul(id, w, rb, nr, xq, xb, n, T, y, ldy);                                                         \
    }
FAST_KQUANT_KP(Q4_K, KQ_Q4_K)
FAST_KQUANT_KP(Q5_K, KQ_Q5_K)
FAST_KQUANT_KP(Q6_K, KQ_Q6_K)

/* ---- decode and batched decode, K-quants, on packed activations (AVX-512)
 * The activations come packed by mu_act_kd_pack (kernels.h): per block,
 * token t's record at a fixed offset t * MU_KD_REC, in the order of the
 * K-quant prefill layout. A block is unpacked once, straight into that
 * order (kd_unpack: U_k, dword lane L = weights 16G(L) + 4k..+3, as
 * kp_unpack's transpose gives it), and applied to a register tile of up
 * to KD_NT tokens:
 *     isum = sum_k dpbusd(U_k, a'_k)                   (exact group sums)
 *     acc += (float(isum) * da') * scw  -  mw * ds'
 * Seven ops per token and block on Zen 5's two multiply pipes (the four
 * dpbusd, mul, fma, fnmadd; the convert runs beside them). Q6_K's -32
 * offset comes as an integer instead: isum starts from b' = -32 * the
 * group's sum of a', so isum = sum (q - 32) * a exactly and its term is
 *     acc += (float(isum) * da') * scw                 (six ops)
 *
 * Every (weight row, token) sums its blocks in order into one 16-lane
 * accumulator and adds the lanes at the end, whatever T, the token tile or
 * the column segments: a token's numbers are those of its one-row decode.
 * Tiles: KD_ROWS weight rows; columns in segments whose activations (the
 * token tile's records) stay in L1 across the rows, the accumulators kept
 * between segments in acc[]; within a segment, each token tile over the
 * tile's rows. With one segment (few tokens) a row streams from memory
 * in one run with the usual prefetch; with several, the next row tile is
 * prefetched a line at a time as the blocks go, into L2, or from
 * KD_NEAR_NT tokens on into L1, with the next row's segment too (its
 * first block has no block before it to hide its load). Measured on Zen 5
 * from memory: at 16 and 32 tokens 4-9% faster than prefetching each tile
 * at once, which stalls on the misses in flight (12% of the time in the
 * prefetch loop at 16 rows), and that 10-15% faster than into L2; at 4 and
 * 8 tokens into L2 is as fast or faster. */
#ifndef KD_NT
#define KD_NT 16 /* tokens per register tile */
#endif
#ifndef KD_ROWS
#define KD_ROWS 16 /* weight rows per tile */
#endif
#ifndef KD_SEG_BYTES
/* activation bytes of a segment, one token tile (Zen 5: 3-9% faster than
 * 32 KiB at 4 to 16 tokens; 16 KiB no better) */
#define KD_SEG_BYTES (24u << 10)
#endif
#ifndef KD_NEAR_NT
#define KD_NEAR_NT 12 /* token tiles from which the prefetch goes into L1 */
#endif
#define KD_MAX_T 64 /* tokens per pass over the weights (larger T: several passes) */

typedef struct kd_block {
    vi q[4];
    vf scw, mw;
} kd_block;

/* dword lanes L of the block's 128 bytes of low/high nibbles (Q4_K, Q5_K:
 * qs; Q6_K: ql) for U_k: index i[L] + k into the 32 dwords, the high
 * nibble in the lanes of hi_lanes */
MU_INLINE vi kd_nibbles(const uint8_t *q128, __m512i idx, int k, __mmask16 hi_lanes) {
    vi v = _mm512_permutex2var_epi32(vi_load(q128), _mm512_add_epi32(idx, _mm512_set1_epi32(k)), vi_load(q128 + 64));
    return _mm512_mask_srli_epi32(v, hi_lanes, v, 4);
}

/* the extra bits of U_k moved to their place (bit 4 in every byte for
 * Q5_K, bits 4-5 for Q6_K): dword idx[L] + k of the bit planes, rotated */
MU_INLINE vi kd_high_bits(vi planes, __m512i idx, int k, __m512i rot) {
    return _mm512_rolv_epi32(_mm512_permutexvar_epi32(_mm512_add_epi32(idx, _mm512_set1_epi32(k)), planes), rot);
}

MU_INLINE void kd_unpack(int fmt, const void *blk, kd_block *u) {
    const vi m0F = vi_set1_8(0x0F);
    if (fmt == KQ_Q4_K || fmt == KQ_Q5_K) {
        const mu_block_q4_K *b4 = blk;
        const mu_block_q5_K *b5 = blk;
        const uint8_t *qs = fmt == KQ_Q4_K ? b4->qs : b5->qs;
        /* lanes 0-7: the low nibbles of chunk L%4, bytes 16(L/4) + 4k..; lanes 8-15: their high nibbles */
        const __m512i idx = _mm512_setr_epi32(0, 8, 16, 24, 4, 12, 20, 28, 0, 8, 16, 24, 4, 12, 20, 28);
        if (fmt == KQ_Q5_K) {
            /* qh byte l, bit j: the fifth bit of weight 32j + l; lane L is in sub-block 2(L%4) + L/8 */
            const __m512i hidx = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4);
            const __m512i rot = _mm512_setr_epi32(4, 2, 0, 30, 4, 2, 0, 30, 3, 1, 31, 29, 3, 1, 31, 29);
            const vi planes = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b5->qh));
            MU_UNROLL(4)
            for (int k = 0; k < 4; k++)
                u->q[k] = vi_or(vi_and(kd_nibbles(qs, idx, k, 0xFF00), m0F),
                                vi_and(kd_high_bits(planes, hidx, k, rot), vi_set1_8(0x10)));
        } else {
            MU_UNROLL(4)
            for (int k = 0; k < 4; k++) u->q[k] = vi_and(kd_nibbles(qs, idx, k, 0xFF00), m0F);
        }
        /* scales and mins sit at the same offsets in Q4_K and Q5_K; lane L takes sub-block 2(L%4) + L/8 */
        uint64_t sc, m;
        k4_scales(b4->scales, &sc, &m);
        const __m128i sub = _mm_setr_epi8(0, 2, 4, 6, 0, 2, 4, 6, 1, 3, 5, 7, 1, 3, 5, 7);
        u->scw = vf_mul(vf_from_u8_128(_mm_shuffle_epi8(_mm_cvtsi64_si128((long long)sc), sub)), vf_set1(f16f(b4->d)));
        u->mw = vf_mul(vf_from_u8_128(_mm_shuffle_epi8(_mm_cvtsi64_si128((long long)m), sub)), vf_set1(f16f(b4->dmin)));
    } else {
        const mu_block_q6_K *b = blk;
        /* ql: lane L in half (L/2)%2, quarter 2(L%2) + L/8: the low nibbles of even lanes, the high of odd ones */
        const __m512i idx = _mm512_setr_epi32(0, 0, 16, 16, 4, 4, 20, 20, 8, 8, 24, 24, 12, 12, 28, 28);
        const __m512i hidx = _mm512_setr_epi32(0, 0, 8, 8, 4, 4, 12, 12, 0, 0, 8, 8, 4, 4, 12, 12);
        const __m512i rot = _mm512_setr_epi32(4, 0, 4, 0, 4, 0, 4, 0, 2, 30, 2, 30, 2, 30, 2, 30);
        const vi planes = vi_load(b->qh), m30 = vi_set1_8(0x30);
        MU_UNROLL(4)
        for (int k = 0; k < 4; k++)
            u->q[k] = vi_or(vi_and(kd_nibbles(b->ql, idx, k, 0xAAAA), m0F), vi_and(kd_high_bits(planes, hidx, k, rot), m30));
        const __m128i g = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15); /* G(L) */
        u->scw = vf_mul(vf_from_s8_128(_mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)b->scales), g)), vf_set1(f16f(b->d)));
        u->mw = vf_zero(); /* the offset is in the dot products (b') */
    }
}

/* Prefetch of the next row tile while a tile runs in several segments:
 * `want` advances with the bytes of the blocks done, `next` follows it one
 * tile ahead (near: into L1, the first tile too, as the first block
 * asks). */
typedef struct kd_pf {
    const uint8_t *next, *want, *end;
    bool near;
} kd_pf;

MU_INLINE void kd_prefetch(kd_pf *p, uint64_t bytes) {
    p->want += bytes;
    for (; p->next < p->want && p->next < p->end; p->next += 64) {
        if (p->near) _mm_prefetch((const char *)p->next, _MM_HINT_T0);
        else _mm_prefetch((const char *)p->next, _MM_HINT_T1);
    }
}

/* One weight row's column segment of nbs blocks x nt tokens (nt a
 * compile-time constant at every call, so the sums live in registers):
 * x: token 0's record of the first block, xstep bytes per block. acc: the
 * nt accumulators between segments; last: the lanes go to y[t * ldy]. */
MU_INLINE void kd_tile(int fmt, const uint8_t *row, const uint8_t *x, uint64_t xstep, int64_t nbs, int nt, float *acc_io,
                       bool first, bool last, float *y, int64_t ldy, kd_pf *pf, uint64_t rb) {
    const uint64_t bb = kq_block_bytes(fmt);
    vf acc[KD_NT];
    MU_UNROLL(16)
    for (int t = 0; t < nt; t++) acc[t] = first ? vf_zero() : vf_load(acc_io + 16 * t);
    /* the next block is unpacked while this one runs (3-4% on Zen 5: its
     * loads are issued a block earlier) */
    kd_block next;
    if (pf && pf->near) /* the next row's segment */
        for (uint64_t o = 0; o < (uint64_t)nbs * bb; o += 64) _mm_prefetch((const char *)row + rb + o, _MM_HINT_T0);
    kd_unpack(fmt, row, &next);
    for (int64_t i = 0; i < nbs; i++, x += xstep) {
        const uint8_t *blk = row + (uint64_t)i * bb;
        if (pf) kd_prefetch(pf, bb);
        else prefetch_span(blk, bb);
        const kd_block u = next;
        if (i + 1 < nbs) kd_unpack(fmt, blk + bb, &next);
        MU_UNROLL(16)
        for (int t = 0; t < nt; t++) {
            const uint8_t *a = x + t * MU_KD_REC;
            vi s = vi_dpbusd(fmt == KQ_Q6_K ? vi_load(a + 384) : vi_zero(), u.q[0], vi_load(a));
            s = vi_dpbusd(s, u.q[1], vi_load(a + 64));
            s = vi_dpbusd(s, u.q[2], vi_load(a + 128));
            s = vi_dpbusd(s, u.q[3], vi_load(a + 192));
            const vf p = vf_mul(vf_from_i32(s), vf_load((const float *)(a + 256)));
            acc[t] = vf_fma(p, u.scw, acc[t]);
            if (fmt != KQ_Q6_K) acc[t] = vf_fnmadd(u.mw, vf_load((const float *)(a + 320)), acc[t]);
        }
    }
    if (last) {
        MU_UNROLL(16)
        for (int t = 0; t < nt; t++) y[t * ldy] = vf_hsum(acc[t]);
    } else {
        MU_UNROLL(16)
        for (int t = 0; t < nt; t++) vf_store(acc_io + 16 * t, acc[t]);
    }
}

#define KD_CASE(N)                                                                                               \
    case N:                                                                                                    \
        kd_tile(fmt, row, x, xstep, nbs, N, acc_io, first, last, y, ldy, pf, rb);                                  \
        break;

MU_INLINE void kd_tile_any(int fmt, const uint8_t *row, const uint8_t *x, uint64_t xstep, int64_t nbs, int nt,
                           float *acc_io, bool first, bool last, float *y, int64_t ldy, kd_pf *pf, uint64_t rb) {
    switch (nt) {
        KD_CASE(1) KD_CASE(2) KD_CASE(3) KD_CASE(4) KD_CASE(5) KD_CASE(6) KD_CASE(7) KD_CASE(8)
        KD_CASE(9) KD_CASE(10) KD_CASE(11) KD_CASE(12) KD_CASE(13) KD_CASE(14) KD_CASE(15) KD_CASE(16)
        default: break;
    }
}

/* Tokens [t0, t0 + T) of a pack of T_all (at most KD_MAX_T). */
MU_INLINE void kd_pass(int fmt, const uint8_t *w, uint64_t rb, int64_t nr, const uint8_t *xd, int64_t n, int64_t T_all,
                       int64_t t0, int64_t T, float *y, int64_t ldy) {
    const int64_t nb = n / MU_QK_K;
    const uint64_t bb = kq_block_bytes(fmt), xstep = (uint64_t)T_all * MU_KD_REC;
    /* token tiles of at most KD_NT, as even as can be */
    const int64_t tiles = (T + KD_NT - 1) / KD_NT, nt_max = (T + tiles - 1) / tiles;
    int64_t seg = (int64_t)(KD_SEG_BYTES / ((uint64_t)nt_max * MU_KD_REC));
    if (seg < 1) seg = 1;
    if (seg > nb) seg = nb;
    _Alignas(64) float acc[KD_ROWS * KD_MAX_T * 16];
    const uint64_t tile_bytes = (uint64_t)KD_ROWS * rb;
    const bool near = nt_max >= KD_NEAR_NT;
    kd_pf pf = {near ? w : w + tile_bytes, w + tile_bytes, w + (uint64_t)nr * rb, near};
    for (int64_t r0 = 0; r0 < nr; r0 += KD_ROWS) {
        const int64_t rows = nr - r0 < KD_ROWS ? nr - r0 : KD_ROWS;
        const uint8_t *wt = w + (uint64_t)r0 * rb;
        for (int64_t b0 = 0; b0 < nb; b0 += seg) {
            const int64_t nbs = nb - b0 < seg ? nb - b0 : seg;
            const bool first = b0 == 0, last = b0 + nbs == nb;
            for (int64_t t = 0, tile = 0; t < T; tile++) {
                const int nt = (int)(T / tiles + (tile < T % tiles));
                const uint8_t *x = xd + ((uint64_t)b0 * (uint64_t)T_all + (uint64_t)(t0 + t)) * MU_KD_REC;
                for (int64_t r = 0; r < rows; r++)
                    kd_tile_any(fmt, wt + (uint64_t)r * rb + (uint64_t)b0 * bb, x, xstep, nbs, nt, acc + (r * T + t) * 16,
                                first, last, y + t * ldy + r0 + r, ldy, seg < nb && t == 0 ? &pf : NULL, rb);
                t += nt;
            }
        }
    }
}

MU_INLINE void kd_matvec(int fmt, const void *w, uint64_t rb, int64_t nr, const void *xd, int64_t n, int64_t T, float *y,
                         int64_t ldy) {
    for (int64_t t0 = 0; t0 < T; t0 += KD_MAX_T)
        kd_pass(fmt, w, rb, nr, xd, n, T, t0, T - t0 < KD_MAX_T ? T - t0 : KD_MAX_T, y + t0 * ldy, ldy);
}

#define FAST_KQUANT_KD(fmt, id)                                                                                  \
    static void matvec_q8_kd_##fmt(const void *w, uint64_t rb, int64_t nr, const void *xd, int64_t n, int64_t T, \
                                   float *y, int64_t ldy) {                                                     \
        kd_matvec(id, w, rb, nr, xd, n, T, y, ldy);                                                             \
    }
FAST_KQUANT_KD(Q4_K, KQ_Q4_K)
FAST_KQUANT_KD(Q5_K, KQ_Q5_K)
FAST_KQUANT_KD(Q6_K, KQ_Q6_K)
#endif

/* ---- exact lane, K-quants: the same units against f32 activations ------
 * Byte j of unit u is the value of weight 64u + j. Dword lane k of a unit
 * holds bytes 4k..4k+3, so (unit >> 8b) & 255 gives 16 weights 64u + 4k + b
 * (k = 0..15) as int32 lanes with no shuffle. The activations are permuted
 * to match once per call and column segment: xp[64u + 16b + k] = x[64u +
 * 4k + b]. Lane k of unit u lies in 32-group 2u + k/8 and 16-group
 * 4u + k/4, so the block's scales are spread per unit; the K-quant "min"
 * (or Q6_K's -32) term uses the sums of x over each group (xs16, xs32):
 *     y = sum_u scales_u . sum_b q_b * xp_b  +  sum_groups offset_g * xsum_g
 */
#define XSEG 20480 /* columns per segment: 80 KiB of permuted x on the stack */

typedef struct xprep {
    float xp[XSEG];
    float xs16[XSEG / 16], xs32[XSEG / 32];
} xprep;

static void xprep_fill(const float *x, int64_t n, xprep *p) {
    for (int64_t u = 0; u < n / 64; u++)
        MU_UNROLL(4)
        for (int b = 0; b < 4; b++) vf_store(p->xp + 64 * u + 16 * b, vf_stride4(x + 64 * u, b));
    for (int64_t g = 0; g < n / 16; g++) {
        float s = 0.0f;
        for (int i = 0; i < 16; i++) s += x[16 * g + i];
        p->xs16[g] = s;
    }
    for (int64_t g = 0; g < n / 32; g++) p->xs32[g] = p->xs16[2 * g] + p->xs16[2 * g + 1];
}

/* sum over b of (unit's byte b of each dword) * xp_b, as 16 lanes */
MU_INLINE vf unit_dot_f32(vi q, const float *xp) {
    const vi ff = vi_set1_32(0xFF);
    vf p0 = vf_mul(vf_from_i32(vi_and(q, ff)), vf_load(xp));
    vf p1 = vf_mul(vf_from_i32(vi_and(vi_srli32(q, 8), ff)), vf_load(xp + 16));
    p0 = vf_fma(vf_from_i32(vi_and(vi_srli32(q, 16), ff)), vf_load(xp + 32), p0);
    p1 = vf_fma(vf_from_i32(vi_srli32(q, 24)), vf_load(xp + 48), p1);
    return vf_add(p0, p1);
}

MU_INLINE void kq_exact_rows(int fmt, const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) {
    xprep p;
    const uint64_t bb = kq_block_bytes(fmt);
    for (int64_t c0 = 0; c0 < n; c0 += XSEG) {
        const int64_t cn = n - c0 < XSEG ? n - c0 : XSEG, nb = cn / MU_QK_K;
        xprep_fill(x + c0, cn, &p);
        for (int64_t r = 0; r < nr; r++) {
            const uint8_t *row = (const uint8_t *)w + (uint64_t)r * rb + (uint64_t)(c0 / MU_QK_K) * bb;
            vf acc0 = vf_zero(), acc1 = vf_zero(), accm = vf_zero();
            __m256 accm8 = _mm256_setzero_ps();
            for (int64_t i = 0; i < nb; i++) {
                const void *blk = row + i * bb;
                prefetch_span(blk, bb);
                kq_block u;
                kq_unpack(fmt, blk, &u);
                const float *xp = p.xp + i * MU_QK_K;
                if (fmt == KQ_Q6_K) {
                    const vf s16 = vf_mul(vf_from_i32(vi_from_s8x16(((const mu_block_q6_K *)blk)->scales)), vf_set1(u.d));
                    MU_UNROLL(4)
                    for (int c = 0; c < 4; c++) {
                        const vf t = vf_mul(unit_dot_f32(u.q[c], xp + 64 * c), vf_spread4x4(s16, 4 * c));
                        if (c & 1) acc1 = vf_add(acc1, t);
                        else acc0 = vf_add(acc0, t);
                    }
                    accm = vf_fma(vf_mul(s16, vf_set1(-32.0f)), vf_load(p.xs16 + 16 * i), accm);
                } else {
                    uint64_t sc, m;
                    k4_scales(fmt == KQ_Q4_K ? ((const mu_block_q4_K *)blk)->scales : ((const mu_block_q5_K *)blk)->scales,
                              &sc, &m);
                    const __m256 s8 = u8x8_times(sc, u.d);
                    MU_UNROLL(4)
                    for (int c = 0; c < 4; c++) {
                        const vf sp = vf_spread8x2(s8, 2 * c, 2 * c + 1);
                        if (c & 1) acc1 = vf_fma(unit_dot_f32(u.q[c], xp + 64 * c), sp, acc1);
                        else acc0 = vf_fma(unit_dot_f32(u.q[c], xp + 64 * c), sp, acc0);
                    }
                    accm8 = _mm256_fmadd_ps(u8x8_times(m, -u.dmin), _mm256_loadu_ps(p.xs32 + 8 * i), accm8);
                }
            }
            const float sum = vf_hsum(vf_add(vf_add(acc0, acc1), accm)) + hsum256(accm8);
            y[r] = c0 ? y[r] + sum : sum;
        }
    }
}

#define EXACT_KQUANT_MATVEC(fmt, id)                                                                            \
    static void matvec_f32_##fmt(const void *w, uint64_t rb, int64_t nr, const float *x, int64_t n, float *y) { \
        kq_exact_rows(id, w, rb, nr, x, n, y);                                                                \
    }
EXACT_KQUANT_MATVEC(Q4_K, KQ_Q4_K)
EXACT_KQUANT_MATVEC(Q5_K, KQ_Q5_K)
EXACT_KQUANT_MATVEC(Q6_K, KQ_Q6_K)

/* Prefill for the matvec-only formats: rows in tiles of 16 that stay in
 * L1/L2 across the tokens. */
#define MATMUL_Q8_BY_ROW_TILES(fmt)                                                                              \
    static void matmul_q8_##fmt(const void *w, uint64_t rb, int64_t nr, const void *xq, uint64_t xb, int64_t n, \
                                int64_t T, float *y, int64_t ldy) {                                            \
        for (int64_t r0 = 0; r0 < nr; r0 += 16)                                                                \
            for (int64_t t = 0; t < T; t++)                                                                    \
                matvec_q8_##fmt((const uint8_t *)w + (uint64_t)r0 * rb, rb, nr - r0 < 16 ? nr - r0 : 16,      \
                                (const uint8_t *)xq + (uint64_t)t * xb, n, y + t * ldy + r0);                  \
    }

