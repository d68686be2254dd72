/* cuda_plan.h — the GPU memory plan of a CUDA session, made before
 * anything is uploaded: every device allocation the session will hold
 * (weights, the f16 prefill cache, the KV cache, the work buffers, the
 * logits of a whole chunk), compared with what it may take: the smaller
 * of --gpu-mem less what Muser already holds on the GPU, and what the GPU
 * has free. A pure function of the model's geometry and the session's
 * settings (plain C, in every build: `muser inspect` and the unit test
 * need no GPU). cuda_backend.c allocates exactly what it plans.
 */
#ifndef MU_CUDA_PLAN_H
#define MU_CUDA_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the plan is made from. The weight sizes are the device streams'
 * (cuda_weight_dev_bytes); weights 0: already resident (a later session
 * of the model on the GPU shares them). */
typedef struct mu_gpu_plan_in {
    /* geometry: E = n_embd, Q = n_head x head_dim, KVD = n_head_kv x head_dim, F = n_ff, V = n_vocab */
    int64_t E, Q, KVD, F, V;
    int n_layer, n_head;
    int n_swa_layers, n_swa;      /* sliding-window layers and their window (0: none) */
    int64_t rec_bytes;            /* one row's step record                             */
    uint64_t weight_bytes;        /* every matrix's device streams (0: resident)       */
    uint64_t norm_bytes;          /* the f32 norm weights (0: resident)                */
    uint64_t f16_cache_bytes;     /* f16 copies of every matrix (the prefill cache)    */
    uint64_t max_matrix_elems;    /* the largest matrix of a layer                     */
    /* settings */
    int n_ctx, n_batch;
    bool kv_f32, fast;
    int prefill_cache;            /* tuning: -1 where it fits with 3 GB to spare, 0 never, 1 always */
    bool cache_resident;          /* the shared weights already carry their f16 copies */
    bool head;                    /* the session ends with the head (false: the first side
                                     of a --gpu-layers split, no logits on the GPU)    */
    uint64_t available;           /* bytes the session may take (min(cap - held, free)) */
    bool work_shared;             /* the work buffers of this chunk and setting, the chunk's
                                     logits and the reserve's shared part are another
                                     session's of the model (cuda_work.c)             */
} mu_gpu_plan_in;

/* The split-K runs of the decode and prefill attention (sizes part_*). */
#define MU_GPU_PLAN_SPLIT_MAX 128
#define MU_GPU_PLAN_SPLIT_PREFILL 8

/* Halves of the f16 tensor-core batch's packed inputs (cu_mmf.cu) for T
 * rows of K columns: tiles of 8 rows x spans of two 256-column blocks x 33
 * slots of 32 lanes x 4. */
static inline uint64_t mu_gpu_mmf_halves(uint64_t K, uint64_t T) {
    return (T + 7) / 8 * (((K + 255) / 256 + 1) / 2) * 33 * 32 * 4;
}

typedef struct mu_gpu_plan {
    uint64_t weights;    /* streams + norms uploaded by this session (0: shared)  */
    uint64_t f16_cache;  /* the prefill cache this session builds (0: none)       */
    uint64_t kv;         /* K and V planes of every layer                         */
    uint64_t buffers;    /* activations, records, split-K parts, dequant tiles    */
    uint64_t logits;     /* logits of a whole chunk (prefill with all logits, batched decode) */
    uint64_t reserve;    /* cuBLAS workspace, upload staging, graphs (a session sharing
                            the work: its graphs)                                   */
    uint64_t work;       /* of buffers + logits + reserve: the shareable work the session
                            creates, carried by it (0: work_shared)                  */
    bool work_shared;
    uint64_t total;
    uint64_t wtmp;       /* of buffers: the dequantized weight tiles (0 with the f16 cache) */
    uint64_t tiles;      /* the tiles' size without the cache (a planned cache that cannot be
                            allocated leaves its room to them)                      */
    int64_t parts;       /* split-K runs held (part_m, part_l, part_o)             */
    int split_dec, split_pre;
    int64_t kv_rows_full, kv_rows_swa; /* rows of a full layer's plane, a sliding one's */
    bool fits;           /* total <= available                                     */
} mu_gpu_plan;

/* The reserve beyond the planned buffers: cuBLAS's workspace, the upload's
 * two 64 MB device stages, the graphs. */
#define MU_GPU_PLAN_RESERVE (256ull << 20)
/* ... of a session whose work is shared: its graphs. */
#define MU_GPU_PLAN_SESSION_RESERVE (32ull << 20)

void mu_gpu_plan_make(const mu_gpu_plan_in *in, mu_gpu_plan *out);

/* The geometry and weight sizes of a model (a tensor-parallel shard, the
 * layer view of a --gpu-layers split too): every field above `n_ctx`, and
 * head (a view without the head: false); the settings are the caller's.
 * weight_bytes gives one matrix's device bytes (the CUDA backend's exact
 * layout, or mu_gpu_weight_bytes_bound without one); rec_bytes one row's
 * step record. */
struct muser_model;
struct mu_weight;
typedef uint64_t (*mu_gpu_weight_bytes_fn)(const struct mu_weight *w);
void mu_gpu_plan_geometry(const struct muser_model *m, mu_gpu_weight_bytes_fn weight_bytes, int64_t rec_bytes,
                          mu_gpu_plan_in *in);
/* A matrix's device bytes at most, from the file: the streams are its
 * blocks' bytes moved apart (cu_shared.h), each padded to 256. */
uint64_t mu_gpu_weight_bytes_bound(const struct mu_weight *w);

/* How many of a model's n_layer layers fit (--gpu-layers auto, and the
 * advice of a plan that does not fit): layers_in(ctx, n, in) fills the
 * plan input of the first n layers, 1 <= n <= n_layer (n_layer: the head
 * too), settings and available included. The largest n whose plan fits,
 * with that plan in *plan (NULL: not wanted); 0 when not even one layer
 * fits. */
typedef void (*mu_gpu_layers_fn)(void *ctx, int n, mu_gpu_plan_in *in);
int mu_gpu_plan_fit_layers(int n_layer, mu_gpu_layers_fn layers_in, void *ctx, mu_gpu_plan *plan);

/* layers_in over a model (ctx: a mu_gpu_layers_model): the geometry of
 * its layer view [0, n) (model/model.h; rec_bytes: that view's step
 * record), the settings and `available` copied from `settings`, its
 * weights counted as resident where resident(view) says so (NULL:
 * never; *f16_cache: they carry their f16 copies). */
typedef struct mu_gpu_layers_model {
    const struct muser_model *m;
    mu_gpu_weight_bytes_fn weight_bytes;
    int64_t (*rec_bytes)(const struct muser_model *view);
    bool (*resident)(const struct muser_model *view, void *ctx, bool *f16_cache);
    void *resident_ctx;
    const mu_gpu_plan_in *settings;
} mu_gpu_layers_model;
void mu_gpu_plan_model_layers(void *ctx, int n, mu_gpu_plan_in *in);

/* The one error of a plan that does not fit: what it needs, item by item,
 * what is available, and what would fit (a shorter context, f16 KV, a
 * smaller batch; fit_layers > 0 of n_layer_all: that many layers on the
 * GPU, the rest on the CPU), written into msg. cap_bytes, free_bytes,
 * device: for the message (cap 0: no --gpu-mem given). fit_layers < 0:
 * no such advice (tensor parallel, a drafter). */
void mu_gpu_plan_explain(const mu_gpu_plan_in *in, const mu_gpu_plan *p, uint64_t cap_bytes, uint64_t free_bytes,
                         int device, int fit_layers, int n_layer_all, char *msg, size_t cap);

/* One line: what the plan holds, e.g. for `muser serve` and `muser bench`. */
void mu_gpu_plan_format(const mu_gpu_plan *p, char *out, size_t cap);

#endif
