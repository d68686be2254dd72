/* lab.h — the streaming-chain probe of lab_chain.cu (bench_cuda --chain*). */
#ifndef MU_CUDA_LAB_H
#define MU_CUDA_LAB_H

#ifdef __cplusplus
extern "C" {
#endif

/* Timing probe (bench_cuda --chain; cu_lab.cu): segs streaming segments of
 * seg_mb[s % 4] MB each (distinct regions, 16-byte loads, nb per lane per
 * warp batch; the first batch in registers before the wait and depth more
 * in shared memory by cp.async), work x 4 multiply-adds per batch, stage_us
 * of latency in every block after the wait and tail_us in the last block
 * (the matvec's serial parts). ms per chain, median of reps: [0] one launch
 * per segment in a graph with PDL, [1] the same without PDL; persistent:
 * also [2] one launch without barriers (the streaming floor), [3] with a
 * grid barrier between segments, [4] the barrier with each warp's first
 * loads of the next segment issued before it (no stage/tail, depth 0). */
typedef struct mu_cuda_lab_chain_cfg {
    double seg_mb[4];
    int segs, nb, depth, work, reps, persistent;
    double stage_us, tail_us;
    int pattern;        /* 0: contiguous batches; 1-5: a matvec's rows (cu_lab.cu, lab_rows_kernel) */
    int batch_blocks;   /* pattern > 0: blocks per batch (16 or 13) */
    int row_blocks[4];  /* pattern > 0: blocks per row of each segment (0: 26) */
    int stage_rounds;   /* != 0: the staging as max(0, that) many dependent L2 rounds with block sums (lab_stage_kernel);
                           depth: batches copied into shared memory during it */
    int paced;          /* stage_rounds > 0: the copies one per round (1) or all after the wait (0) */
    int stage_mode;     /* what a round is (cu_lab.cu, LabChain.stage_mode) */
    int mode_arg;       /* stage_mode 6: batches each waiting warp prefetches into L2; 11: the vectors' replicas */
} mu_cuda_lab_chain_cfg;
typedef struct mu_cuda_lab_chain_result {
    double ms[5];
    double gb; /* bytes streamed per chain */
    int sms;
} mu_cuda_lab_chain_result;
int mu_cuda_lab_chain(const mu_cuda_lab_chain_cfg *cfg, mu_cuda_lab_chain_result *out);

#ifdef __cplusplus
}
#endif
#endif
