/* cuda_tuning.h — the CUDA backend's chosen settings, one table: a line per
 * field, what it is and what it measured (one H200 unless said, same-call
 * A/B at depth 0, tok/s a token; the lab log has the tables).
 *
 * Each session copies the defaults when it is created, so sessions never
 * share settings through globals. MUSER_CUDA_TUNE="name=value,..." sets
 * fields by name (A/B runs without a rebuild; README); `muser bench` and
 * --verbose print the settings in use.
 */
#ifndef MU_CUDA_TUNING_H
#define MU_CUDA_TUNING_H

#include <stddef.h>

typedef struct mu_cuda_tuning {
    int graph;            /* the decode step replayed as one CUDA graph per route (0: op by op every token) */
    int pdl;              /* programmatic dependent launch: a kernel streams its weights while its predecessor drains */
    int mma_attention;    /* split-K attention on tensor cores for f16 KV (0: the f32 path) */
    int mv_blocks_per_sm; /* matvec blocks per SM, 0: as many as fit (+1.5-1.8% against fewer: more bytes in flight) */
    int attn_one_block;   /* decode spans up to this many rows (0..512): each layer's attention in one launch, a
                             block per head (64, with clusters above: spans of 41-73 rows 192.1 against 191.5 with a
                             limit of 32, spans of 73-105 rows 191.1 against 188.8 with a limit of 128) */
    int attn_cluster;     /* longer spans up to this many rows (0..1024): one launch of ceil(rows / 128) blocks a head
                             in a cluster (512: 189.3 against the split route's 182.8 at depth 200; clusters of eight
                             lose everywhere, 169.1 against 182.4 at depth 900); past it the split route */
    int norm_in;          /* decode: each residual/norm boundary formed by its consumer launches in every block,
                             instead of the producer's last block running a tail (+2.4% at depth 0, +1.3% at 32768) */
    int batch_parts;      /* decode: qkv + gate row-dots in parts of one batch where that takes a quarter fewer
                             rounds (a rank of two: 4 -> 3 rounds, +2.0%; one GPU 6 -> 5, -0.5%: not taken) */
    int flat_gateup;      /* gate/up in flat batches across rows, MU_CU_ROUTE_*: auto where a warp streams an eighth
                             fewer batches (a rank of two +2.2%; one GPU, 20 -> 18 batches, equal: not taken) */
    int cut_rows;         /* STORE launches in ranges cut inside rows, MU_CU_ROUTE_*: auto where a warp streams
                             fewer batches (qkv + gate of the 30B: 4 batches a warp, not 6: +1.9% at depth 0) */
    int pair_staging;     /* down's quantizing staging shared by cluster pairs (+1.1% at depths 0 and 2048) */
    int batch_min_fast;   /* batched decode from this many rows, fast lane (its f16 GEMM step beats one-by-one
                             decode from 2 rows; docs/benchmarks-server.md) */
    int batch_min_exact;  /* the same, exact lane (its f32 GEMM step, ~0.57 s on the 30B, from ~5 rows of 0.115 s) */
    int batch_exact_rows; /* exact lane: batched decode through the B-row matvec over the quantized weights instead
                             of the GEMMs (0: as slow per row as one-by-one decode on the 30B, bound by its f32
                             activation loads) */
    int batch_fast_rows;  /* fast lane: batched steps of up to this many rows through the B-row matvec over the
                             quantized weights (int8 inputs staged per row; 0: never), more on tensor cores or GEMMs
                             (one H100, 30B, step ms B-row / f16 tensor cores: 2 rows 9.53 / 11.81, 3 rows 12.09 /
                             11.92, 4 rows 12.06 / 12.13) */
    int batch_mmq;        /* fast lane, no f16 cache: batched steps above batch_fast_rows on the f16 tensor cores
                             over the quantized K-quant weights (cu_mmf.cu; other types through the B-row matvec)
                             instead of GEMMs over weights dequantized every step. (An int8 tensor-core batch lost at
                             every width from 2 to 128 rows: one H100, 30B, 16 rows 30.09 ms against 17.05, 64 rows
                             107.6 against 72.2, 128 rows 184.3 against 140.6) */
    int batch_mmf_wide;   /* f16 tensor-core batch: blocks of 8 warps instead of 4, each 16 weight rows over the same
                             staged inputs (auto: above 32 rows; one H100, 30B, step ms 4 / 8 warps: 8 rows 13.37 /
                             14.95, 16 rows 15.77 / 17.27, 32 rows 21.25 / 21.69, 64 rows 38.97 / 35.17) */
    int prefill_mmf_rows; /* fast lane, no f16 copy: prefill chunks (verify blocks) of up to this many rows on the
                             f16 tensor-core batch over the quantized weights instead of GEMMs over tiles dequantized
                             per matrix (one H100, 30B, tok/s: 32 rows 2184.7 against 649.2, 64 rows 2781.5 against
                             1275.6) */
    int prefill_cache;    /* fast lane: f16 copies of every matrix (3.3x the quantized bytes) for the prefill and
                             batched GEMMs; 0 never, -1 where they fit with 3 GB to spare, 1 always (refuses to
                             start where they do not fit). One H100, 30B: pp512 8,757 tok/s with them, 6,169
                             without (53 GB less GPU memory) */
    int tp_symmetric;     /* tensor parallel: the all-reduce buffers in NCCL symmetric windows (2 x H200: 9.0 ->
                             8.0 us an all-reduce) */
    int tp_fused;         /* tensor parallel: the layers' all-reduces fused into the Wo and down tails over NCCL's
                             load/store mapping (else NCCL's all-reduce and a tail launch between the parts) */
} mu_cuda_tuning;

/* The defaults above. */
extern const mu_cuda_tuning mu_cuda_tuning_default;

/* The defaults with MUSER_CUDA_TUNE applied; MUSER_EINVAL (message set)
 * for a name it does not know or a value out of its field's range. */
int mu_cuda_tuning_from_env(mu_cuda_tuning *t);
/* Applies "name=value,name=value" to t (the same checks). */
int mu_cuda_tuning_parse(mu_cuda_tuning *t, const char *spec);
/* Every field as "name=value" separated by spaces, into out (cap bytes). */
void mu_cuda_tuning_format(const mu_cuda_tuning *t, char *out, size_t cap);

#endif
