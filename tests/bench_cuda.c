/* bench_cuda.c — the CUDA backend's A/B lab: decode at one depth under
 * launch and kernel variants, in one process, so that variants are
 * compared in the same run (run-to-run drift on a shared machine is of the
 * size of the effects). The benchmark proper is `muser bench --backend cuda`.
 *
 *   bench_cuda -m MODEL [--lane fast|exact] [--depth D] [--gen N] [--quick [--alt FLAGS]]
 *   bench_cuda -m MODEL --stamps [--depth D]   (where the residual/norm tails' time goes)
 *   bench_cuda -m MODEL --stage-stamps [--depth D] [--alt FLAGS]   (each matvec
 *                         launch's phases in one token: wait, staging, streaming)
 *   bench_cuda --chain   (no model: what a launch boundary costs a streaming
 *                         chain, against a grid barrier in one launch)
 *   bench_cuda --chain-rows (the same chain read with a matvec's addressing)
 *   bench_cuda --chain-stage (the chain with the staging's dependent L2 rounds,
 *                         and batches copied into shared memory during them)
 *
 * --quick times the default and one variant only, twice, alternating: the
 * lab flags FLAGS (MU_CU_LAB_*; default: short K-quant rows not packed).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/cu_shared.h"
#include "cuda/cuda_api.h"
#include "cuda/cuda_test.h"
#include "engine/engine.h"
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

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static int cmp_u64(const void *a, const void *b) {
    const unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}
/* the median of x[0..n), n >= 1 (x is left sorted) */
static double median_of(double *x, int n) {
    qsort(x, (size_t)n, sizeof x[0], cmp_double);
    return x[n / 2];
}
/* a stage-stamp launch kind (EPI * 4 + QI) as the tables name it */
static const char *kind_label(int k) {
    static const char *label[4][4] = {{"store, int8 copied", "store, quantized", "store, norm-in", "store, ?"},
                                      {"gate/up, int8 copied", "gate/up, quantized", "gate/up, norm-in", "gate/up, ?"},
                                      {"resnorm, int8 copied", "resnorm, quantized", "resnorm, norm-in", "resnorm, ?"},
                                      {"logits, int8 copied", "logits, quantized", "logits, norm-in", "logits, ?"}};
    return label[(k / 4) & 3][k % 4];
}

/* --stamps: the tails' clock stamps over a few tokens, medians per part
 * count (1: Wo, more: ffn down's parts or the ranks). */
static int run_stamps(mu_backend *b, int64_t depth, unsigned extra) {
    enum { MAXR = 1024, C = MU_CU_TAIL_STAMP_COLS };
    static unsigned long long rows[MAXR][C], col[MAXR];
    double ms = 0;
    mu_cu_set_matvec_lab(MU_CU_LAB_TAIL_STAMPS | extra);
    mu_cuda_set_options(b, -1, -1, -1, -1); /* recapture with the flag */
    if (time_decode(b, depth, 1, &ms) != 0 || mu_cu_lab_tail_stamps(&rows[0][0], 0) < 0) return 1; /* (clears) */
    if (time_decode(b, depth, 3, &ms) != 0) return 1;
    const int n = mu_cu_lab_tail_stamps(&rows[0][0], MAXR);
    mu_cu_set_matvec_lab(0);
    if (n < 0) return 1;
    static const char *what[] = {"handshake (fence, counter)", "meeting (tensor parallel)", "loads + first sum",
                                 "second sum", "stores"};
    printf("tails stamped: %d (depth %lld, lab flags %u)\n| parts | segment | median SM cycles |\n|---:|---|---:|\n", n,
           (long long)depth, extra);
    for (unsigned long long parts = 1; parts <= 8; parts++) {
        int m = 0;
        for (int i = 0; i < n; i++) m += rows[i][0] == parts;
        if (!m) continue;
        for (int seg = 0; seg < 6; seg++) {
            int k = 0;
            for (int i = 0; i < n; i++)
                if (rows[i][0] == parts)
                    col[k++] = seg < 5 ? rows[i][seg + 2] - rows[i][seg + 1] : rows[i][8] - rows[i][7];
            qsort(col, (size_t)k, sizeof col[0], cmp_u64);
            printf("| %llu | %s | %llu |\n", parts, seg < 5 ? what[seg] : "tail body, globaltimer ns", col[k / 2]);
        }
    }
    return 0;
}

/* Is a block's lateness its SM's? Per launch kind and SM, the median over
 * the kind's launches of (the block's end - the launch's median end), us,
 * taken over the even and the odd launches apart: their correlation over
 * the SMs says whether the same SMs are late every time. */
enum { SM_MAX = 256 };
static double pearson(const double *x, const double *y, int n) {
    double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
    for (int i = 0; i < n; i++) mx += x[i], my += y[i];
    mx /= n, my /= n;
    for (int i = 0; i < n; i++) sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx), syy += (y[i] - my) * (y[i] - my);
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : 0.0;
}
static void print_sm_lateness(unsigned long long (*rows)[MU_CU_STAGE_STAMP_COLS],
                              unsigned long long (*blocks)[MU_CU_STAGE_BLOCKS_MAX][3], int n) {
    enum { NK = 16, MAXR = 1024, HALF = 2, PER = 64 }; /* (PER: a kind's launches in one token, at most) */
    static double late[NK][HALF + 1][SM_MAX][PER], blate[NK][2][MU_CU_STAGE_BLOCKS_MAX][PER];
    static int cnt[NK][HALF + 1][SM_MAX], bcnt[NK][2][MU_CU_STAGE_BLOCKS_MAX];
    static double prof[NK][HALF + 1][SM_MAX], span[NK][SM_MAX][PER];
    static int nspan[NK][SM_MAX];
    memset(nspan, 0, sizeof nspan);
    memset(bcnt, 0, sizeof bcnt);
    int nk[NK] = {0}, same_map[NK] = {0}, first[NK];
    for (int k = 0; k < NK; k++) first[k] = -1;
    /* the same block -> SM map in every launch of a kind? */
    for (int i = 0; i < n && i < MAXR; i++) {
        if (!rows[i][0] || rows[i][0] > NK) continue;
        const int k = (int)rows[i][0] - 1;
        if (first[k] < 0) first[k] = i;
        bool same = true;
        for (int bl = 0; bl < MU_CU_STAGE_BLOCKS_MAX; bl++)
            if (blocks[i][bl][2] != blocks[first[k]][bl][2]) same = false;
        same_map[k] += same;
    }
    for (int i = 0; i < n && i < MAXR; i++) {
        if (!rows[i][0] || rows[i][0] > NK) continue;
        const int k = (int)rows[i][0] - 1, h = nk[k]++ & 1;
        double e[MU_CU_STAGE_BLOCKS_MAX];
        int m = 0;
        for (int bl = 0; bl < MU_CU_STAGE_BLOCKS_MAX; bl++)
            if (blocks[i][bl][1] && blocks[i][bl][2]) e[m++] = (double)blocks[i][bl][1];
        if (m < 2) continue;
        const double e_med = median_of(e, m);
        for (int bl = 0; bl < MU_CU_STAGE_BLOCKS_MAX; bl++) {
            if (!blocks[i][bl][1] || !blocks[i][bl][2]) continue;
            const int sm = (int)blocks[i][bl][2] - 1;
            if (sm >= SM_MAX) continue;
            const double v = ((double)blocks[i][bl][1] - e_med) / 1e3;
            if (nspan[k][sm] < PER) span[k][sm][nspan[k][sm]++] = (double)(blocks[i][bl][1] - blocks[i][bl][0]) / 1e3;
            if (cnt[k][h][sm] < PER) late[k][h][sm][cnt[k][h][sm]++] = v;
            if (cnt[k][HALF][sm] < PER) late[k][HALF][sm][cnt[k][HALF][sm]++] = v;
            if (bcnt[k][h][bl] < PER) blate[k][h][bl][bcnt[k][h][bl]++] = v; /* the same, by block index */
        }
    }
    printf("\nper-SM lateness (block end - launch median end, us; medians per SM over the kind's launches)\n"
           "| launch kind | SMs | same block->SM map as the first launch | even/odd correlation by SM | by block "
           "index | SM medians: min | p10 | p90 | max |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int k = 0; k < NK; k++) {
        if (nk[k] < 4) continue;
        double x[SM_MAX], y[SM_MAX], all[SM_MAX];
        int ns = 0;
        for (int sm = 0; sm < SM_MAX; sm++) {
            for (int hh = 0; hh <= HALF; hh++) {
                prof[k][hh][sm] = 0;
                if (!cnt[k][hh][sm]) continue;
                prof[k][hh][sm] = median_of(late[k][hh][sm], cnt[k][hh][sm]);
            }
            if (cnt[k][0][sm] && cnt[k][1][sm]) x[ns] = prof[k][0][sm], y[ns] = prof[k][1][sm], all[ns++] = prof[k][HALF][sm];
        }
        if (ns < 2) continue;
        const double r = pearson(x, y, ns);
        double bx[MU_CU_STAGE_BLOCKS_MAX], by[MU_CU_STAGE_BLOCKS_MAX];
        int nb = 0;
        for (int bl = 0; bl < MU_CU_STAGE_BLOCKS_MAX; bl++) {
            if (!bcnt[k][0][bl] || !bcnt[k][1][bl]) continue;
            bx[nb] = median_of(blate[k][0][bl], bcnt[k][0][bl]), by[nb++] = median_of(blate[k][1][bl], bcnt[k][1][bl]);
        }
        const double rb = nb >= 2 ? pearson(bx, by, nb) : 0.0;
        qsort(all, (size_t)ns, sizeof all[0], cmp_double);
        printf("| %s | %d | %d of %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", kind_label(k), ns, same_map[k], nk[k], r, rb, all[0], all[ns / 10], all[ns * 9 / 10],
               all[ns - 1]);
    }
    /* the kinds against each other (all launches) */
    printf("\ncorrelation of the per-SM profiles between kinds:\n");
    for (int k = 0; k < NK; k++)
        for (int j = k + 1; j < NK; j++) {
            if (nk[k] < 4 || nk[j] < 4) continue;
            double x[SM_MAX], y[SM_MAX];
            int ns = 0;
            for (int sm = 0; sm < SM_MAX; sm++)
                if (cnt[k][HALF][sm] && cnt[j][HALF][sm]) x[ns] = prof[k][HALF][sm], y[ns++] = prof[j][HALF][sm];
            if (ns >= 2)
                printf("  %s vs %s: %.2f\n", kind_label(k), kind_label(j), pearson(x, y, ns));
        }
    /* each SM's median own span: equal across SMs when no SM is slow every time */
    printf("\nper-SM median own span (us) over the kind's launches: min / p10 / median / p90 / max\n");
    for (int k = 0; k < NK; k++) {
        if (nk[k] < 4) continue;
        double med[SM_MAX];
        int ns = 0;
        for (int sm = 0; sm < SM_MAX; sm++) {
            if (!nspan[k][sm]) continue;
            med[ns++] = median_of(span[k][sm], nspan[k][sm]);
        }
        if (ns < 1) continue;
        qsort(med, (size_t)ns, sizeof med[0], cmp_double);
        printf("  %s: %.2f / %.2f / %.2f / %.2f / %.2f\n", kind_label(k), med[0],
               med[ns / 10], med[ns / 2], med[ns * 9 / 10], med[ns - 1]);
    }
}

/* The blocks' spans of each launch kind (--stage-stamps): the blocks' ends
 * after the launch's first release (first, 10th percentile, median, 90th,
 * last), how far apart the blocks were released, and a block's own span
 * (its end after its own release); medians over the kind's launches, us. */
enum { SPAN_COLS = 9 };
static void print_block_spans(unsigned long long (*rows)[MU_CU_STAGE_STAMP_COLS],
                              unsigned long long (*blocks)[MU_CU_STAGE_BLOCKS_MAX][3], int n) {
    enum { NK = 16, MAXR = 1024 };
    static double col[NK][SPAN_COLS][MAXR];
    int cnt[NK] = {0};
    for (int i = 0; i < n && i < MAXR; i++) {
        if (!rows[i][0] || rows[i][0] > NK) continue;
        const int k = (int)rows[i][0] - 1;
        double end[MU_CU_STAGE_BLOCKS_MAX], own[MU_CU_STAGE_BLOCKS_MAX];
        unsigned long long r0 = ~0ull, r1 = 0;
        int nb = 0;
        for (int bl = 0; bl < MU_CU_STAGE_BLOCKS_MAX; bl++)
            if (blocks[i][bl][0] && blocks[i][bl][1]) {
                if (blocks[i][bl][0] < r0) r0 = blocks[i][bl][0];
                if (blocks[i][bl][0] > r1) r1 = blocks[i][bl][0];
            }
        for (int bl = 0; bl < MU_CU_STAGE_BLOCKS_MAX; bl++)
            if (blocks[i][bl][0] && blocks[i][bl][1]) {
                end[nb] = (double)(blocks[i][bl][1] - r0) / 1e3;
                own[nb++] = (double)(blocks[i][bl][1] - blocks[i][bl][0]) / 1e3;
            }
        if (nb < 1) continue;
        qsort(end, (size_t)nb, sizeof end[0], cmp_double);
        qsort(own, (size_t)nb, sizeof own[0], cmp_double);
        const double v[SPAN_COLS] = {end[0],  end[nb / 10],     end[nb / 2], end[nb * 9 / 10], end[nb - 1],
                                     own[0], own[nb / 2], own[nb - 1], (double)(r1 - r0) / 1e3};
        for (int j = 0; j < SPAN_COLS; j++) col[k][j][cnt[k]] = v[j];
        cnt[k]++;
    }
    printf("\nblocks' spans, us after the launch's first release (medians over the launches)\n"
           "| launch kind | n | first end | p10 | median | p90 | last end | own span min | median | max | releases "
           "spread |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int k = 0; k < NK; k++) {
        if (!cnt[k]) continue;
        printf("| %s | %d |", kind_label(k), cnt[k]);
        for (int j = 0; j < SPAN_COLS; j++) {
            qsort(col[k][j], (size_t)cnt[k], sizeof(double), cmp_double);
            printf(" %.2f |", col[k][j][cnt[k] / 2]);
        }
        printf("\n");
    }
    print_sm_lateness(rows, blocks, n);
}

/* --stage-stamps: each matvec launch of one token, globaltimer phases
 * (mu_cu_lab_stage_stamps), medians and sums per launch kind. */
static int run_stage_stamps(mu_backend *b, int64_t depth, unsigned extra) {
    enum { MAXR = 1024, C = MU_CU_STAGE_STAMP_COLS, NK = 16, NS = 14 };
    static unsigned long long rows[MAXR][C], blocks[MAXR][MU_CU_STAGE_BLOCKS_MAX][3];
    static double seg[NK][NS][MAXR];
    int cnt[NK] = {0};
    double ms = 0;
    if (mu_cu_lab_stage_stamps_begin() != 0) {
        fprintf(stderr, "bench_cuda: --stage-stamps needs a build with -DMUSER_LAB_STAMPS=ON\n");
        return 1;
    }
    mu_cu_set_matvec_lab(MU_CU_LAB_STAGE_STAMPS | extra);
    mu_cuda_set_options(b, -1, -1, -1, -1); /* recapture with the flag: the launches' rows fixed */
    muser_token next = 0;
    int n = -1;
    if (time_decode(b, depth, 1, &ms) == 0 && mu_cu_lab_stage_stamps(NULL, 0) >= 0 && /* (clears) */
        mu_cuda_decode_select(b, 1000, (int)depth + 4, 0.0f, 0, NULL, &next) == 0 &&   /* one token */
        mu_cu_lab_block_stamps(&blocks[0][0][0], MAXR) == MAXR)
        n = mu_cu_lab_stage_stamps(&rows[0][0], MAXR);
    mu_cu_set_matvec_lab(0);
    if (n < 0) return 1;
    static const char *what[NS] = {"previous matvec's end -> wait released", "resident before the release",
                                   "release -> first block sum (norm-in)", "release -> second block sum",
                                   "release -> first block staged", "release -> last block staged",
                                   "last staged -> last warp's end", "release -> last warp's end",
                                   "release -> last block released", "release -> first warp's branch loaded",
                                   "release -> last warp's branch loaded", "release -> last warp's h' formed",
                                   "release -> last warp's input quantized", "release -> last warp's records built"};
    unsigned long long prev_end = 0;
    int launches = 0;
    for (int i = 0; i < n; i++) {
        const unsigned long long *r = rows[i];
        if (!r[0] || r[0] > NK) continue; /* (a launch that did not run in this token) */
        const int k = (int)r[0] - 1;
        const double w = (double)~r[2];
        const double v[NS] = {prev_end ? w - (double)prev_end : 0.0, w - (double)~r[1], r[4] ? (double)r[4] - w : 0.0,
                              r[5] ? (double)r[5] - w : 0.0,       (double)~r[8] - w, (double)r[6] - w,
                              (double)r[7] - (double)r[6],         (double)r[7] - w,
                              (double)r[3] - w,                    r[10] ? (double)~r[10] - w : 0.0,
                              r[9] ? (double)r[9] - w : 0.0,       r[11] ? (double)r[11] - w : 0.0,
                              r[12] ? (double)r[12] - w : 0.0,     r[13] ? (double)r[13] - w : 0.0};
        for (int j = 0; j < NS; j++) seg[k][j][cnt[k]] = v[j] / 1e3;
        cnt[k]++, launches++;
        prev_end = r[7];
    }
    printf("stage stamps: %d matvec launches in one token at depth %lld (lab flags %u), us\n", launches,
           (long long)depth, extra);
    printf("| launch kind | n | segment | median | sum over the token |\n|---|---:|---|---:|---:|\n");
    for (int k = 0; k < NK; k++) {
        if (!cnt[k]) continue;
        for (int j = 0; j < NS; j++) {
            double sum = 0;
            for (int i = 0; i < cnt[k]; i++) sum += seg[k][j][i];
            qsort(seg[k][j], (size_t)cnt[k], sizeof(double), cmp_double);
            printf("| %s | %d | %s | %.2f | %.1f |\n", kind_label(k), cnt[k],
                   what[j], seg[k][j][cnt[k] / 2], sum);
        }
    }
    print_block_spans(rows, blocks, n);
    return 0;
}

int main(int argc, char **argv) {
    const char *model_path = NULL;
    muser_lane lane = MUSER_LANE_FAST;
    int gen = 32;
    int64_t depth = 0;
    bool quick = false, stamps = false, stage_stamps = false, alt_set = false;
    unsigned alt = MU_CU_LAB_NO_PACK;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") && v) model_path = v, i++;
        else if (!strcmp(a, "--lane") && v) lane = !strcmp(v, "exact") ? MUSER_LANE_EXACT : MUSER_LANE_FAST, i++;
        else if (!strcmp(a, "--depth") && v) depth = atoll(v), i++;
        else if (!strcmp(a, "--gen") && v) gen = atoi(v), i++;
        else if (!strcmp(a, "--quick")) quick = true;
        else if (!strcmp(a, "--chain")) return run_chain();
        else if (!strcmp(a, "--chain-rows")) return run_chain_rows();
        else if (!strcmp(a, "--chain-stage")) return run_chain_stage();
        else if (!strcmp(a, "--stamps")) stamps = true;
        else if (!strcmp(a, "--stage-stamps")) stage_stamps = true;
        else if (!strcmp(a, "--alt") && v) alt = (unsigned)strtoul(v, NULL, 0), alt_set = true, i++;
        else {
            fprintf(stderr, "usage: bench_cuda -m MODEL [--lane fast|exact] [--depth D] [--gen N] [--quick] [--stamps | "
                            "--stage-stamps] [--alt FLAGS] | --chain | --chain-rows\n");
            return 2;
        }
    }
    if (!model_path || gen < 1) {
        fprintf(stderr, "usage: bench_cuda -m MODEL [--lane fast|exact] [--depth D] [--gen N] [--quick [--alt FLAGS]] | --chain\n");
        return 2;
    }
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
    setenv("MUSER_CUDA_PREFILL_CACHE", "0", 1); /* decode only */
    if (mu_cuda_backend_new(m, &cfg, &b) != 0) {
        fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
        return 1;
    }
    printf("backend: %s\n", mu_cuda_describe(b));
    if (stamps || stage_stamps) {
        const int rc = stamps ? run_stamps(b, depth, alt_set ? alt : 0u) : run_stage_stamps(b, depth, alt_set ? alt : 0u);
        if (rc) fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
        b->ops->free(b);
        muser_model_free(m);
        return rc;
    }
    const double gb = (double)mu_cuda_weight_bytes(b) / 1e9;
    /* blocks/SM (0: all that fit), PDL, graph, prefetch level before the wait,
     * lab flags (parts of the matvec left out: timing only, wrong logits),
     * one-launch decode attention up to N rows (-1: the session's); the
     * default first and last */
    static const int var[][6] = {{0, 1, 1, 0, 0, -1},
                                 {0, 1, 1, 0, 0, 0},
                                 {0, 1, 1, 0, 0, 64},
                                 {0, 1, 1, 0, 0, 512},
                                 {0, 1, 1, 0, MU_CU_LAB_SKIP_ATTN, -1},
                                 {0, 1, 1, 0, MU_CU_LAB_NO_TAIL, -1},
                                 {0, 1, 1, 0, MU_CU_LAB_NO_STAGE, -1},
                                 {0, 0, 1, 0, 0, -1},
                                 {0, 1, 1, 0, MU_CU_LAB_NO_PACK, -1},
                                 {0, 1, 1, 0, 0, 0},
                                 {0, 1, 1, 0, 0, -1}};
    const int session_short = mu_cuda_attn_short(b);
    printf("\nA/B at depth %lld (median of %d tokens each; rows that leave a part out time the kernels without it, their "
           "logits are wrong):\n"
           "| matvec blocks/SM | PDL | graph | prefetch level before wait | left out / variant | one-launch attention "
           "up to | tok/s | ms/token | weight GB/s |\n"
           "|---:|---|---|---|---|---:|---:|---:|---:|\n",
           (long long)depth, gen);
    /* quick: the default (row 0) and row 0 with the lab flags alt, twice */
    const size_t n_all = sizeof var / sizeof var[0], n_var = quick ? 4 : n_all;
    for (size_t qi = 0; qi < n_var; qi++) {
        const size_t vi = quick ? 0 : qi;
        const unsigned f = quick && (qi & 1) ? alt : (unsigned)var[vi][4];
        mu_cuda_set_options(b, var[vi][2], var[vi][1], -1, var[vi][0]);
        mu_cu_set_matvec_prefetch(var[vi][3]);
        mu_cu_set_matvec_lab(f);
        mu_cuda_set_attn_short(b, var[vi][5] >= 0 ? var[vi][5] : session_short);
        double ms = 0;
        if (time_decode(b, depth, gen, &ms) != 0) {
            fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
            return 1;
        }
        char what[160] = "";
        if (!f) strcat(what, "-");
        if (f & MU_CU_LAB_NO_GROUP_QUANT) strcat(what, "no int8 groups ");
        if (f & MU_CU_LAB_NO_TAIL) strcat(what, "no tail ");
        if (f & MU_CU_LAB_NO_STAGE) strcat(what, "no staging ");
        if (f & MU_CU_LAB_EPI_GROUP_QUANT) strcat(what, "int8 groups in gate/up ");
        if (f & MU_CU_LAB_SKIP_ATTN) strcat(what, "no qk-post/attention/reduce ");
        if (f & MU_CU_LAB_NO_TAIL_PREFETCH) strcat(what, "no L2 prefetch for the tail ");
        if (f & MU_CU_LAB_NO_PACK) strcat(what, "short K-quant rows not packed ");
        if (f & MU_CU_LAB_EVEN_ROUNDS) strcat(what, "fewest warps that keep the rounds ");
        char shortv[32];
        if (var[vi][5] >= 0) snprintf(shortv, sizeof shortv, "%d", var[vi][5]);
        else snprintf(shortv, sizeof shortv, "%d (session's)", session_short);
        printf("| %s | %s | %s | %d | %s | %s | %.1f | %.3f | %.0f |\n", var[vi][0] ? "1" : "all",
               var[vi][1] ? "on" : "off", var[vi][2] ? "on" : "off", var[vi][3], what, shortv, 1e3 / ms, ms,
               gb / (ms * 1e-3));
        fflush(stdout);
    }
    mu_cu_set_matvec_lab(0);
    b->ops->free(b);
    muser_model_free(m);
    return 0;
}
