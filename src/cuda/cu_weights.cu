/* cu_weights.cu — the weights on the device: each format's stream layout,
 * the repacking of the file's blocks into those streams at upload, and
 * dequantization to f16 or f32 (prefill GEMMs, tests).
 */
#include "cuda/cu_units.cuh"

/* ---- layouts and repacking -------------------------------------------------------- */

extern "C" bool mu_cu_weight_layout(uint32_t type, int64_t rows, int64_t cols, mu_cu_layout *o) {
    o->qs = o->qh = o->meta = o->d = 0;
    const uint64_t r = (uint64_t)rows;
    switch (type) {
    case MU_TYPE_Q4_K:
        if (cols % 256) return false;
        o->qs = r * (cols / 256) * 128;
        o->meta = r * (cols / 256) * 16;
        return true;
    case MU_TYPE_Q5_K:
        if (cols % 256) return false;
        o->qs = r * (cols / 256) * 128;
        o->qh = r * (cols / 256) * 32;
        o->meta = r * (cols / 256) * 16;
        return true;
    case MU_TYPE_Q6_K:
        if (cols % 256) return false;
        o->qs = r * (cols / 256) * 128;
        o->qh = r * (cols / 256) * 64;
        o->meta = r * (cols / 256) * 16;
        o->d = r * (cols / 256) * 2;
        return true;
    case MU_TYPE_Q8_0:
        if (cols % 32) return false;
        o->qs = r * cols;
        o->d = r * (cols / 32) * 2;
        return true;
    case MU_TYPE_Q4_0:
        if (cols % 32) return false;
        o->qs = r * (cols / 32) * 16;
        o->d = r * (cols / 32) * 2;
        return true;
    case MU_TYPE_F32: if (cols % 4) return false; o->qs = r * cols * 4; return true;
    case MU_TYPE_F16:
    case MU_TYPE_BF16: if (cols % 8) return false; o->qs = r * cols * 2; return true;
    default: {
        const IvGeom g = iv_geom(type);
        if (!g.block_elems || cols % g.block_elems) return false;
        const uint64_t nb = r * (uint64_t)(cols / g.block_elems);
        o->qs = nb * (uint64_t)(g.block_elems / g.unit_elems) * 16;
        o->qh = nb * (uint64_t)g.qh, o->meta = nb * (uint64_t)g.meta, o->d = nb * (uint64_t)g.dh * 2;
        return true;
    }
    }
}

extern "C" int32_t mu_cu_units(uint32_t type, int64_t cols) {
    switch (type) {
    case MU_TYPE_Q4_K: case MU_TYPE_Q5_K: case MU_TYPE_Q6_K: return (int32_t)(cols / 256 * 8);
    case MU_TYPE_Q8_0: return (int32_t)(cols / 16);
    case MU_TYPE_Q4_0: return (int32_t)(cols / 32);
    case MU_TYPE_F32: return (int32_t)(cols / 4);
    case MU_TYPE_F16: case MU_TYPE_BF16: return (int32_t)(cols / 8);
    default: return iv_geom(type).unit_elems ? (int32_t)(cols / iv_geom(type).unit_elems) : 0;
    }
}

/* An integer-view block (file layout, quant.h) into the streams of
 * cu_device.cuh's TIv; gb: its index among the weight's blocks. */
__device__ void iv_repack_block(uint32_t type, const uint8_t *src, int64_t gb, uint8_t *qs, uint8_t *qh, uint8_t *meta,
                                uint16_t *d) {
    const IvGeom g = iv_geom(type);
    const int qs_bytes = g.block_elems / g.unit_elems * 16;
    auto half_at = [&](int at) { return (uint16_t)(src[at] | (src[at + 1] << 8)); };
    int qs_at = 0;
    switch (type) {
    case MU_TYPE_Q4_1: d[2 * gb] = half_at(0), d[2 * gb + 1] = half_at(2), qs_at = 4; break;
    case MU_TYPE_Q5_0:
        d[gb] = half_at(0), qs_at = 6;
        for (int k = 0; k < 4; k++) qh[gb * 4 + k] = src[2 + k];
        break;
    case MU_TYPE_Q5_1:
        d[2 * gb] = half_at(0), d[2 * gb + 1] = half_at(2), qs_at = 8;
        for (int k = 0; k < 4; k++) qh[gb * 4 + k] = src[4 + k];
        break;
    case MU_TYPE_IQ4_NL: d[gb] = half_at(0), qs_at = 2; break;
    case MU_TYPE_IQ4_XS: { /* d, scales_h, scales_l[4], qs[128] */
        d[gb] = half_at(0), qs_at = 8;
        const int sh = half_at(2);
        for (int j = 0; j < 8; j++)
            meta[gb * 8 + j] = (uint8_t)(((src[4 + j / 2] >> (4 * (j % 2))) & 15) | ((sh >> (2 * j)) & 3) << 4);
        break;
    }
    case MU_TYPE_Q2_K: /* scales[16], qs[64], d, dmin */
        d[2 * gb] = half_at(80), d[2 * gb + 1] = half_at(82), qs_at = 16;
        for (int q = 0; q < 4; q++)
            for (int j = 0; j < 4; j++) meta[gb * 16 + 4 * q + j] = src[8 * (q >> 1) + 2 * j + (q & 1)];
        break;
    case MU_TYPE_Q3_K: { /* hmask[32], qs[64], scales[12], d */
        d[gb] = half_at(108), qs_at = 32;
        for (int q = 0; q < 4; q++) { /* the unit's hmask bits (cu_device.cuh) */
            uint64_t bits = 0;
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 16; l++)
                    bits |= (uint64_t)((src[16 * (q & 1) + l] >> (4 * (q >> 1) + j)) & 1) << (16 * j + l);
            for (int k = 0; k < 8; k++) qh[gb * 32 + 8 * q + k] = (uint8_t)(bits >> (8 * k));
        }
        const uint8_t *sc = src + 96;
        for (int q = 0; q < 4; q++)
            for (int j = 0; j < 4; j++) {
                const int gr = 8 * (q >> 1) + 2 * j + (q & 1);
                const int low = gr < 8 ? sc[gr] & 15 : sc[gr - 8] >> 4;
                meta[gb * 16 + 4 * q + j] = (uint8_t)(low | ((sc[8 + gr % 4] >> (2 * (gr / 4))) & 3) << 4);
            }
        break;
    }
    default: return;
    }
    for (int k = 0; k < qs_bytes; k++) qs[gb * qs_bytes + k] = src[qs_at + k];
}

/* One thread per block of the file's layout: bytes move to their streams.
 * src_stride: bytes between the rows in raw (a column slice of a wider
 * matrix keeps its parent's row stride). */
__global__ void repack_kernel(mu_cu_weight w, const uint8_t *raw, int64_t r0, int64_t nrows, int64_t src_stride) {
    int bpr = 0, bb = 0;
    switch (w.type) {
    case MU_TYPE_Q4_K: bpr = (int)(w.cols / 256), bb = 144; break;
    case MU_TYPE_Q5_K: bpr = (int)(w.cols / 256), bb = 176; break;
    case MU_TYPE_Q6_K: bpr = (int)(w.cols / 256), bb = 210; break;
    case MU_TYPE_Q8_0: bpr = (int)(w.cols / 32), bb = 34; break;
    case MU_TYPE_Q4_0: bpr = (int)(w.cols / 32), bb = 18; break;
    default:
        if (!iv_geom(w.type).block_elems) return;
        bpr = (int)(w.cols / iv_geom(w.type).block_elems), bb = iv_geom(w.type).block_bytes;
        break;
    }
    if (src_stride <= 0) src_stride = (int64_t)bpr * bb;
    const int64_t total = nrows * bpr;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t rr = i / bpr, b = i % bpr, gb = (r0 + rr) * bpr + b; /* global block index */
        const uint8_t *src = raw + rr * src_stride + b * bb;
        uint8_t *qs = (uint8_t *)w.qs, *qh = (uint8_t *)w.qh, *meta = (uint8_t *)w.meta;
        uint16_t *d = (uint16_t *)w.d;
        const int64_t rb = gb - b; /* the row's first block */
        switch (w.type) {
        case MU_TYPE_Q4_K:
            kq_repack_block(w.type, src, (int)b, bpr, qs + rb * 128, nullptr, meta + rb * 16, nullptr);
            break;
        case MU_TYPE_Q5_K:
            kq_repack_block(w.type, src, (int)b, bpr, qs + rb * 128, qh + rb * 32, meta + rb * 16, nullptr);
            break;
        case MU_TYPE_Q6_K:
            kq_repack_block(w.type, src, (int)b, bpr, qs + rb * 128, qh + rb * 64, meta + rb * 16, d + rb);
            break;
        case MU_TYPE_Q8_0:
            d[gb] = (uint16_t)(src[0] | (src[1] << 8));
            for (int k = 0; k < 32; k++) qs[gb * 32 + k] = src[2 + k];
            break;
        case MU_TYPE_Q4_0:
            d[gb] = (uint16_t)(src[0] | (src[1] << 8));
            for (int k = 0; k < 16; k++) qs[gb * 16 + k] = src[2 + k];
            break;
        default: iv_repack_block(w.type, src, gb, qs, qh, meta, d); break;
        }
    }
}

extern "C" cudaError_t mu_cu_repack(const mu_cu_weight *w, const void *raw, int64_t r0, int64_t nrows,
                                    int64_t src_stride, cudaStream_t s) {
    repack_kernel<<<1024, 256, 0, s>>>(*w, (const uint8_t *)raw, r0, nrows, src_stride);
    return cudaGetLastError();
}

/* Dequantization runs in spans: a block's threads dequantize a span of
 * items (a K-quant block of 256 weights, two threads each; a unit, one
 * thread) into shared memory, each item's words followed by a pad word, so
 * that the threads of a warp, each on its own item, store to distinct banks;
 * then the block writes the span, contiguous in dst (rows of cols one after
 * another), in coalesced 4-byte stores. (Each thread storing its own values
 * scattered 2-byte stores over 32 lines an instruction; unpadded, they hit
 * one bank 32 times: prefill without the f16 cache spent most of its time
 * in either.) */
#define DQ_SPAN_BYTES 32768
#define DQ_SPAN_WORDS (DQ_SPAN_BYTES / 4 + 64) /* the span and its pad words */

/* n_items items of wpi words (a power of two), each followed by pad words
 * in the span, to dst */
template <class O>
__device__ void dq_span_store(const uint32_t *sw, O *dst, int64_t first_el, int n_items, int wpi, int pad) {
    uint32_t *out = reinterpret_cast<uint32_t *>(dst + first_el);
    const int lg = __ffs(wpi) - 1, nw = n_items << lg;
    for (int w = threadIdx.x; w < nw; w += blockDim.x) out[w] = sw[(w >> lg) * (wpi + pad) + (w & (wpi - 1))];
}

/* Whether a unit's decoder writes only its own elements (u * E .. u * E +
 * E - 1 of the row), so items can sit apart in the span. Q2_K's and Q3_K's
 * units each write elements across their 256-weight block: their spans hold
 * whole blocks unpadded. */
template <class TT>
struct DqOwnElements {
    static constexpr bool value = true;
};
template <>
struct DqOwnElements<TIv<MU_TYPE_Q2_K>> {
    static constexpr bool value = false;
};
template <>
struct DqOwnElements<TIv<MU_TYPE_Q3_K>> {
    static constexpr bool value = false;
};

template <uint32_t TYPE, class O>
__device__ void kq_dequant_rows(const mu_cu_weight &w, int64_t r0, int64_t nrows, O *dst, uint32_t *sw) {
    constexpr int WPB = 256 * (int)sizeof(O) / 4;                 /* words a block */
    constexpr int NBLK = DQ_SPAN_BYTES / (256 * (int)sizeof(O));  /* blocks a span */
    const int64_t nb = w.cols >> 8, total = nrows * nb;
    const int t = threadIdx.x, slot = t % NBLK, c0 = t / NBLK; /* a warp: 32 blocks, one half each */
    for (int64_t g0 = blockIdx.x * (int64_t)NBLK; g0 < total; g0 += (int64_t)gridDim.x * NBLK) {
        const int64_t g = g0 + slot;
        if (t < 2 * NBLK && g < total) {
            KqLane<uint4> L;
            kq_load<TYPE>(L, w, r0 + g / nb, (int)(g % nb), c0);
            O *out = reinterpret_cast<O *>(sw + slot * (WPB + 1));
            kq_dequant<TYPE>(L, c0, [&](int e, float v) { put(out, e, v); });
        }
        __syncthreads();
        const int n = total - g0 < NBLK ? (int)(total - g0) : NBLK;
        dq_span_store(sw, dst, g0 * 256, n, WPB, 1);
        __syncthreads();
    }
}

template <class TT, class O>
__device__ void dequant_units(const mu_cu_weight &w, int64_t r0, int64_t nrows, O *dst, uint32_t *sw) {
    const int64_t upr = TT::units(w.cols), total = nrows * upr;
    const int E = (int)(w.cols / upr), wpi = E * (int)sizeof(O) / 4; /* elements and words a unit */
    constexpr int pad = DqOwnElements<TT>::value ? 1 : 0;
    /* unpadded: DQ_SPAN_BYTES / 4 / wpi items (a power of two: whole blocks) */
    int items = pad ? DQ_SPAN_WORDS / (wpi + 1) : DQ_SPAN_BYTES / 4 / wpi;
    if (items > (int)blockDim.x) items = (int)blockDim.x;
    for (int64_t i0 = blockIdx.x * (int64_t)items; i0 < total; i0 += (int64_t)gridDim.x * items) {
        const int64_t i = i0 + threadIdx.x;
        if ((int)threadIdx.x < items && i < total) {
            const int64_t rr = i / upr;
            const int u = (int)(i % upr);
            const RowCtx rc = TT::row(w, r0 + rr);
            const uint4 v = ld_stream(TT::ptr(rc, u));
            /* the decoder writes element u * E + k of its row: placed at this item's slot */
            TT::dequant(rc, u, v, reinterpret_cast<O *>(sw + threadIdx.x * (wpi + pad)) - (int64_t)u * E);
        }
        __syncthreads();
        const int n = total - i0 < items ? (int)(total - i0) : items;
        dq_span_store(sw, dst, i0 * E, n, wpi, pad);
        __syncthreads();
    }
}

template <class O>
__global__ void __launch_bounds__(256) dequant_kernel(const __grid_constant__ mu_cu_weight w, int64_t r0,
                                                      int64_t nrows, O *dst) {
    __shared__ uint32_t sbuf[DQ_SPAN_WORDS]; /* the span's items, a pad word after each */
    switch (w.type) {
    case MU_TYPE_Q4_K: kq_dequant_rows<MU_TYPE_Q4_K, O>(w, r0, nrows, dst, sbuf); break;
    case MU_TYPE_Q5_K: kq_dequant_rows<MU_TYPE_Q5_K, O>(w, r0, nrows, dst, sbuf); break;
    case MU_TYPE_Q6_K: kq_dequant_rows<MU_TYPE_Q6_K, O>(w, r0, nrows, dst, sbuf); break;
    default: MU_CU_DISPATCH_UNITS(w.type, (dequant_units<TT, O>(w, r0, nrows, dst, sbuf)));
    }
}

extern "C" cudaError_t mu_cu_dequant(const mu_cu_weight *w, int64_t r0, int64_t nrows, void *dst, bool to_f16,
                                     cudaStream_t s) {
    if (to_f16) dequant_kernel<uint16_t><<<2048, 256, 0, s>>>(*w, r0, nrows, (uint16_t *)dst);
    else dequant_kernel<float><<<2048, 256, 0, s>>>(*w, r0, nrows, (float *)dst);
    return cudaGetLastError();
}

