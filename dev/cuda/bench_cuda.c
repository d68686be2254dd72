/* bench_cuda.c — the CUDA backend's A/B lab (dev/, not the product):
 * decode at one depth under settings of the tuning table, in one process
 * and alternating, so that variants are compared in the same run (run-to-
 * run drift on a shared machine is of the size of the effects); and the
 * streaming-chain probes of lab_chain.cu. The benchmark proper is
 * `muser bench --backend cuda`.
 *
 *   bench_cuda -m MODEL [--lane fast|exact] [--depth D] [--gen N] [--rounds R] [--ab SPEC]...
 *       each --ab SPEC is a variant ("name=value,...", cuda_tuning.h) timed
 *       against the defaults, R rounds alternating; without --ab, a fixed set
 *   bench_cuda --chain   (no model: what a launch boundary costs a streaming
 *                         chain, against a grid barrier in one launch)
 *   bench_cuda --chain-rows (the same chain read with a matvec's addressing)
 *   bench_cuda --chain-stage (the chain with the staging's dependent L2 rounds,
 *                         and batches copied into shared memory during them)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends.h"
#include "cuda/cuda_api.h"
#include "engine/engine.h"
#include "lab.h"
#include "muser.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Median ms per token of n greedy steps (after 3 warm-up steps) at depth. */
static int time_decode(mu_backend *b, int64_t depth, int n, double *ms) {
    if (mu_cuda_set_synthetic_depth(b, depth, 5) != 0) return 1;
    double *t = malloc(sizeof(double) * (size_t)n);
    muser_token tok = 1000, next = 0;
    int pos = (int)depth;
    for (int i = 0; i < n + 3; i++, pos++) {
        const double t0 = now_s();
        if (mu_cuda_decode_select(b, tok, pos, 0.0f, 0, NULL, &next) != 0) {
            free(t);
            return 1;
        }
        if (i >= 3) t[i - 3] = (now_s() - t0) * 1e3;
        tok = next;
    }
    for (int i = 1; i < n; i++) /* insertion sort: n is small */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            const double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    *ms = t[n / 2];
    free(t);
    return 0;
}

/* --chain: a decode layer's streaming shape (qkv, Wo, gate/up, down of the
 * 30B's fast lane, MB) as a chain of launches: bytes in flight per warp
 * (loads per lane, batches ahead in shared memory), arithmetic per batch
 * and the matvec's serial parts varied; then one persistent launch with
 * and without grid barriers. */
static int run_chain(void) {
    static const double layer30[4] = {33, 15.5, 150, 109}, rank2[4] = {17, 8, 75, 55};
    static const int kernels[][2] = {{4, 0}, {4, 1}, {4, 2}, {4, 3}, {5, 0}, {5, 1}, {5, 2}, {8, 0}, {8, 1}};
    if (mu_cuda_probe() != 0) {
        fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
        return 1;
    }
    printf("| shape | loads/lane | batches ahead (smem) | work | stage+tail us | ms PDL | ms no PDL | GB/s PDL |\n"
           "|---|---:|---:|---:|---|---:|---:|---:|\n");
    for (int sh = 0; sh < 2; sh++)
        for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++)
            for (int work = 0; work <= 40; work += 40)
                for (int ser = 0; ser < 2; ser++) {
                    if (sh == 1 && (kernels[k][0] != 5 || work == 0)) continue;
                    mu_cuda_lab_chain_cfg cfg = {{0}, 52, kernels[k][0], kernels[k][1], work, 7, 0, 0, 0, 0, 0, {0}, 0, 0, 0, 0};
                    memcpy(cfg.seg_mb, sh ? rank2 : layer30, sizeof cfg.seg_mb);
                    if (ser) cfg.stage_us = 1.4, cfg.tail_us = 4.0;
                    mu_cuda_lab_chain_result r;
                    if (mu_cuda_lab_chain(&cfg, &r) != 0) {
                        fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
                        return 1;
                    }
                    printf("| %s | %d | %d | %d | %s | %.3f | %.3f | %.0f |\n", sh ? "rank of 2" : "30B layer x13",
                           cfg.nb, cfg.depth, work, ser ? "1.4+4.0" : "0", r.ms[0], r.ms[1],
                           r.gb / (r.ms[0] * 1e-3));
                    fflush(stdout);
                }
    static const char *names[5] = {"graph, launch per segment, PDL", "graph, launch per segment, no PDL",
                                   "one launch, no barrier (floor)", "one launch, grid barriers",
                                   "one launch, barriers, next loads before each"};
    printf("\n| loads/lane | work | variant | ms | GB/s | us per boundary over the floor |\n|---:|---:|---|---:|---:|---:|\n");
    for (int work = 0; work <= 40; work += 40) {
        mu_cuda_lab_chain_cfg cfg = {{0}, 52, 8, 0, work, 7, 1, 0, 0, 0, 0, {0}, 0, 0, 0, 0};
        memcpy(cfg.seg_mb, layer30, sizeof cfg.seg_mb);
        mu_cuda_lab_chain_result r;
        if (mu_cuda_lab_chain(&cfg, &r) != 0) {
            fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
            return 1;
        }
        for (int v = 0; v < 5; v++)
            printf("| 8 | %d | %s | %.3f | %.0f | %.2f |\n", work, names[v], r.ms[v], r.gb / (r.ms[v] * 1e-3),
                   (r.ms[v] - r.ms[2]) * 1e3 / (cfg.segs - 1));
    }
    return 0;
}

/* --chain-stage: the layer chain with the staging as a chain of dependent
 * L2 rounds and block sums (cu_lab.cu, lab_stage_kernel), and the warps'
 * next batches copied into shared memory during it, all at once or one per
 * round: does streaming during the chain hide it or slow it as much? */
static int run_chain_stage(void) {
    static const double layer30[4] = {33, 15.5, 150, 109};
    static const struct {
        int nb, rounds, depth, paced, mode, arg;
    } v[] = {{5, 0, 0, 0, 0, 0}, {5, 3, 0, 0, 0, 0}, {5, 6, 0, 0, 0, 0}, {5, 6, 1, 0, 0, 0}, {5, 6, 2, 0, 0, 0}, {5, 6, 1, 1, 0, 0},
             {5, 6, 2, 1, 0, 0}, {4, 6, 3, 0, 0, 0}, {4, 6, 3, 1, 0, 0}, {5, 3, 1, 1, 0, 0}, {5, 3, 2, 1, 0, 0}, {5, 0, 2, 0, 0, 0},
             {5, 6, 0, 0, 1, 0}, {5, 6, 0, 0, 2, 0}, {5, 6, 0, 0, 3, 0}, {5, 12, 0, 0, 1, 0}, {5, 12, 0, 0, 2, 0}, {5, 12, 0, 0, 3, 0},
             {5, 3, 0, 0, 4, 0}, {5, 6, 0, 0, 4, 0}, {5, 3, 0, 0, 5, 0}, {5, 6, 0, 0, 5, 0}, {5, 2, 0, 0, 4, 0}, {5, 2, 0, 0, 5, 0},
             {5, 6, 0, 0, 6, 0}, {5, 6, 1, 0, 6, 0}, {5, 6, 2, 0, 6, 0}, {5, 6, 0, 0, 6, 1}, {5, 6, 0, 0, 6, 2},
             {5, 6, 0, 0, 6, 4}, {5, 6, 1, 0, 6, 2}, {5, 3, 0, 0, 6, 0}, {5, 3, 1, 0, 6, 0}, {5, 3, 0, 0, 6, 2},
             {5, 3, 0, 0, 0, 0}, {5, 6, 0, 0, 0, 0}, {5, 0, 0, 0, 0, 0},
             {5, 6, 0, 0, 1, 0}, {5, 6, 0, 0, 7, 0}, {5, 6, 0, 0, 8, 0}, {5, 6, 0, 0, 9, 0}, {5, 6, 0, 0, 10, 0},
             {5, 12, 0, 0, 7, 0}, {5, 12, 0, 0, 8, 0}, {5, 12, 0, 0, 9, 0}, {5, 12, 0, 0, 10, 0}, {5, 3, 0, 0, 10, 0},
             {5, 6, 0, 0, 11, 1}, {5, 6, 0, 0, 11, 2}, {5, 6, 0, 0, 11, 4}, {5, 6, 0, 0, 11, 8}, {5, 6, 0, 0, 11, 16},
             {5, 6, 0, 0, 11, 132}, {5, 6, 0, 0, 0, 0}};
    static const char *modes[12] = {"load + block sum", "block sum alone", "load + warp sum", "load + warp sum, warp 0",
                                   "all rounds' loads as bulk copies at the wait + warp sum",
                                   "the same, multicast in pairs",
                                   "load + block sum in the first block to arrive alone, the others wait on its flag, "
                                   "then copy its 8 KB image",
                                   "the engine's block_sum alone (no load)", "its two barriers alone",
                                   "its two warp sums alone",
                                   "load + block sum in warps 0-7 alone (4 loads a thread, named barriers)",
                                   "load + block sum, block b reading replica b % R of the vectors (R in the mode arg column)"};
    if (mu_cuda_probe() != 0) {
        fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
        return 1;
    }
    double floor_ms = 0;
    printf("| loads/lane | staging rounds | a round | batches copied during it | copies "
           "| mode arg (6: batches into L2 while waiting; 11: replicas) | ms PDL | GB/s | us per boundary over no staging |\n|---:|---:|---|---:|---|---:|---:|---:|---:|\n");
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
        mu_cuda_lab_chain_cfg cfg = {{0}, 52, v[k].nb, v[k].depth, 40, 7, 0, 0, 0, 0, 0, {0}, 0, v[k].paced, v[k].mode, 0};
        memcpy(cfg.seg_mb, layer30, sizeof cfg.seg_mb);
        cfg.stage_rounds = v[k].rounds > 0 ? v[k].rounds : -1; /* (-1: the staging kernel with no rounds) */
        cfg.mode_arg = v[k].arg;
        mu_cuda_lab_chain_result r;
        if (mu_cuda_lab_chain(&cfg, &r) != 0) {
            fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
            return 1;
        }
        if (k == 0) floor_ms = r.ms[0];
        printf("| %d | %d | %s | %d | %s | %d | %.3f | %.0f | %.2f |\n", v[k].nb, v[k].rounds, modes[v[k].mode],
               v[k].depth, v[k].depth ? (v[k].paced ? "one per round" : "all after the wait") : "-", v[k].arg, r.ms[0],
               r.gb / (r.ms[0] * 1e-3), (r.ms[0] - floor_ms) * 1e3 / (cfg.segs - 1));
        fflush(stdout);
    }
    return 0;
}

/* --chain-rows: the same layer chain read with a matvec's addressing (rows of
 * 26 blocks, 16 for Wo; batches of 16 or 13 blocks; the nibble layouts and
 * the scale stream of cu_lab.cu's lab_rows_kernel) against contiguous
 * batches of the same five loads per lane. */
static int run_chain_rows(void) {
    static const double layer30[4] = {33, 15.5, 150, 109};
    static const struct {
        int pattern, batch;
        const char *name;
    } v[] = {{0, 0, "contiguous batches"},
             {1, 16, "rows, engine layout, scales apart, batches of 16"},
             {2, 16, "rows, tiled nibbles, scales apart, batches of 16"},
             {3, 16, "rows, engine nibbles, scales in the block, batches of 16"},
             {4, 16, "rows, tiled, pipelined at half a batch, batches of 16"},
             {5, 16, "rows, tiled, double-buffered, batches of 16"},
             {1, 13, "rows, engine layout, scales apart, batches of 13"},
             {2, 13, "rows, tiled nibbles, scales apart, batches of 13"}};
    if (mu_cuda_probe() != 0) {
        fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
        return 1;
    }
    printf("| addressing | work | ms PDL | ms no PDL | GB/s PDL |\n|---|---:|---:|---:|---:|\n");
    for (int work = 0; work <= 40; work += 20)
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
            mu_cuda_lab_chain_cfg cfg = {{0}, 52, 5, 0, work, 7, 0, 0, 0, v[k].pattern, v[k].batch, {26, 16, 26, 26}, 0, 0, 0, 0};
            memcpy(cfg.seg_mb, layer30, sizeof cfg.seg_mb);
            mu_cuda_lab_chain_result r;
            if (mu_cuda_lab_chain(&cfg, &r) != 0) {
                fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
                return 1;
            }
            printf("| %s | %d | %.3f | %.3f | %.0f |\n", v[k].name, work, r.ms[0], r.ms[1], r.gb / (r.ms[0] * 1e-3));
            fflush(stdout);
        }
    return 0;
}


int main(int argc, char **argv) {
    enum { MAXV = 32 };
    const char *model_path = NULL, *spec[MAXV];
    int n_spec = 0, gen = 32, rounds = 2;
    muser_lane lane = MUSER_LANE_FAST;
    int64_t depth = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") && v) model_path = v, i++;
        else if (!strcmp(a, "--lane") && v) lane = !strcmp(v, "exact") ? MUSER_LANE_EXACT : MUSER_LANE_FAST, i++;
        else if (!strcmp(a, "--depth") && v) depth = atoll(v), i++;
        else if (!strcmp(a, "--gen") && v) gen = atoi(v), i++;
        else if (!strcmp(a, "--rounds") && v) rounds = atoi(v), i++;
        else if (!strcmp(a, "--ab") && v && n_spec < MAXV) spec[n_spec++] = v, i++;
        else if (!strcmp(a, "--chain")) return run_chain();
        else if (!strcmp(a, "--chain-rows")) return run_chain_rows();
        else if (!strcmp(a, "--chain-stage")) return run_chain_stage();
        else {
            fprintf(stderr, "usage: bench_cuda -m MODEL [--lane fast|exact] [--depth D] [--gen N] [--rounds R] "
                            "[--ab name=value,...]... | --chain | --chain-rows | --chain-stage\n");
            return 2;
        }
    }
    if (!model_path || gen < 1 || rounds < 1) {
        fprintf(stderr, "bench_cuda: -m MODEL is required (and --gen, --rounds at least 1)\n");
        return 2;
    }
    static const char *fixed[] = {"graph=0", "pdl=0", "attn_one_block=0", "attn_cluster=0", "norm_in=0",
                                  "cut_rows=1", "flat_gateup=1", "pair_staging=0", "mv_blocks_per_sm=1"};
    if (!n_spec)
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) spec[n_spec++] = fixed[i];
    muser_model *m = NULL;
    if (mu_cuda_probe() != 0 || muser_model_load(model_path, &m) != 0) {
        fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
        return 1;
    }
    mu_session_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_ctx = (int)depth + gen + 8;
    cfg.n_batch = 1;
    cfg.n_threads = 1;
    cfg.lane = lane;
    cfg.kv_type = MUSER_KV_F16;
    mu_backend *b = NULL;
    if (mu_cuda_backend_new(m, &cfg, &b) != 0) {
        fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
        return 1;
    }
    printf("backend: %s\n", mu_cuda_describe(b));
    const double gb = (double)mu_cuda_weight_bytes(b) / 1e9;
    mu_cuda_tuning base;
    mu_cuda_get_tuning(b, &base);
    printf("\nA/B at depth %lld, %d rounds alternating (median of %d tokens each):\n"
           "| variant | tok/s per round | ms/token (last) | weight GB/s (last) |\n|---|---|---:|---:|\n",
           (long long)depth, rounds, gen);
    for (int v = -1; v < n_spec; v++) {
        char line[512] = "";
        double ms = 0;
        for (int r = 0; r < rounds; r++) {
            for (int pass = 0; pass < 2; pass++) { /* the defaults, then the variant: alternating */
                mu_cuda_tuning t = base;
                if (pass && v >= 0 && mu_cuda_tuning_parse(&t, spec[v]) != 0) {
                    fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
                    return 1;
                }
                if ((v < 0) != (pass == 0)) continue; /* row -1: the defaults alone */
                mu_cuda_set_tuning(b, &t);
                if (time_decode(b, depth, gen, &ms) != 0) {
                    fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
                    return 1;
                }
                snprintf(line + strlen(line), sizeof line - strlen(line), "%s%.2f", r ? " / " : "", 1e3 / ms);
            }
        }
        printf("| %s | %s | %.3f | %.0f |\n", v < 0 ? "defaults" : spec[v], line, ms, gb / (ms * 1e-3));
        fflush(stdout);
    }
    b->ops->free(b);
    muser_model_free(m);
    return 0;
}
