/* bench_cuda.c — decode and prefill speed of the CUDA backend, with the
 * device-to-device copy bandwidth measured in the same run as the ceiling.
 * A stand-in for `muser bench --backend cuda` until that command exists.
 *
 *   bench_cuda -m MODEL [--lane fast|exact] [--kv f16|f32] [--depths 0,512,...]
 *              [--gen N] [--pp N] [--profile] [--check N] [--copy-gb G]
 *
 * Decode at depth d: the KV planes are filled with d positions of random
 * rows (rings wrapped as after a real prefill), then N tokens are decoded,
 * each one's successor chosen on the device (greedy) and read back by the
 * host, as a generation loop does. Bytes per token = weights streamed +
 * KV rows read at that depth. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/pool.h"
#include "cuda/cu_shared.h"
#include "cuda/cuda_api.h"
#include "engine/engine.h"
#include "engine/parity.h"
#include "muser.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(void) {
    fprintf(stderr, "usage: bench_cuda -m MODEL [--lane fast|exact] [--kv f16|f32] [--depths 0,512,...] [--gen N]\n"
                    "                  [--pp N] [--profile] [--ab] [--check N] [--copy-gb G]\n"
                    "--ab: decode at depth 0 under each launch/kernel variant (rows per warp, PDL, graph)\n");
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *depth_list = "0,512,2048,8192,32768,131072";
    muser_lane lane = MUSER_LANE_FAST;
    muser_kv_type kv = MUSER_KV_F16;
    int gen = 64, pp = 512, check = 0;
    bool profile = false, ab = false;
    double copy_gb = 4.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") && v) model_path = v, i++;
        else if (!strcmp(a, "--lane") && v) lane = !strcmp(v, "exact") ? MUSER_LANE_EXACT : MUSER_LANE_FAST, i++;
        else if (!strcmp(a, "--kv") && v) kv = !strcmp(v, "f32") ? MUSER_KV_F32 : MUSER_KV_F16, i++;
        else if (!strcmp(a, "--depths") && v) depth_list = v, i++;
        else if (!strcmp(a, "--gen") && v) gen = atoi(v), i++;
        else if (!strcmp(a, "--pp") && v) pp = atoi(v), i++;
        else if (!strcmp(a, "--check") && v) check = atoi(v), i++;
        else if (!strcmp(a, "--copy-gb") && v) copy_gb = atof(v), i++;
        else if (!strcmp(a, "--profile")) profile = true;
        else if (!strcmp(a, "--ab")) ab = true;
        else {
            usage();
            return 2;
        }
    }
    if (!model_path) {
        usage();
        return 2;
    }
    int64_t depths[16];
    int n_depths = 0;
    for (const char *p = depth_list; *p && n_depths < 16;) {
        char *end;
        depths[n_depths++] = strtoll(p, &end, 10);
        p = *end == ',' ? end + 1 : end;
        if (end == p && *p) break;
    }
    int64_t max_depth = 0;
    for (int i = 0; i < n_depths; i++) max_depth = depths[i] > max_depth ? depths[i] : max_depth;

    if (mu_cuda_probe() != 0) {
        fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
        return 1;
    }
    double copy_bw = 0;
    if (mu_cuda_copy_bandwidth((size_t)(copy_gb * 1e9 / 2), 20, &copy_bw) != 0) {
        fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
        return 1;
    }
    printf("device-to-device copy: %.0f GB/s (read + write, %.1f GB copied per run, median of 20)\n", copy_bw,
           copy_gb / 2);

    double t0 = now_s();
    muser_model *m = NULL;
    if (muser_model_load(model_path, &m) != 0) {
        fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
        return 1;
    }
    const mu_hparams *hp = &m->hp;
    mu_session_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_ctx = (int)(max_depth + gen + 8 > pp ? max_depth + gen + 8 : pp);
    cfg.n_batch = pp > 0 ? pp : 512;
    cfg.n_threads = 1;
    cfg.lane = lane;
    cfg.kv_type = kv;
    mu_backend *b = NULL;
    if (mu_cuda_backend_new(m, &cfg, &b) != 0) {
        fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
        return 1;
    }
    printf("model: %s, %d layers, %.3f GB of weights per token; backend ready in %.1f s\n", m->name, hp->n_layer,
           m->weight_bytes_per_token / 1e9, now_s() - t0);
    printf("backend: %s\n", mu_cuda_describe(b));
    printf("launches per decoded token: %d\n", mu_cuda_launches_per_token(b));
    const int V = hp->n_vocab;
    uint64_t seed = 12345;
    muser_token *toks = malloc(sizeof(muser_token) * (size_t)(pp > 64 ? pp : 64));
    for (int i = 0; i < (pp > 64 ? pp : 64); i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (muser_token)((seed >> 33) % (uint64_t)(V < 200000 ? V : 200000));
    }

    /* optional cross-check against the CPU backend (exact lane, f32 KV) */
    if (check > 0) {
        mu_session_config cc = cfg;
        cc.n_ctx = check + 1;
        cc.n_batch = 1;
        cc.n_threads = 0;
        cc.lane = MUSER_LANE_EXACT;
        cc.kv_type = MUSER_KV_F32;
        mu_backend *cpu = NULL;
        cc.n_threads = mu_cpu_count();
        if (mu_cpu_backend_new(m, &cc, &cpu) == 0) {
            float *lc = malloc(sizeof(float) * V), *lg = malloc(sizeof(float) * V);
            b->ops->reset(b);
            double t1 = now_s();
            mu_parity pr;
            for (int i = 0; i < check; i++) {
                cpu->ops->forward(cpu, &toks[i], 1, i, false, lc);
                b->ops->forward(b, &toks[i], 1, i, false, lg);
                mu_parity_compare(lc, lg, 1, V, &pr);
                printf("check vs CPU exact, position %d: max |d| %.3g, KL %.3g, top-1 %s\n", i, pr.max_abs, pr.mean_kl,
                       pr.top1 == 1.0 ? "same" : "DIFFERENT");
            }
            printf("check took %.1f s\n", now_s() - t1);
            free(lc), free(lg);
            cpu->ops->free(cpu);
        } else {
            printf("check skipped: %s\n", muser_last_error());
        }
    }

    double tok_s[16] = {0}, gbs[16] = {0}, bytes_tok[16] = {0};
    const int kvb = kv == MUSER_KV_F32 ? 4 : 2;
    for (int di = 0; di < n_depths; di++) {
        const int64_t d = depths[di];
        if (mu_cuda_set_synthetic_depth(b, d, 99 + (uint64_t)di) != 0) {
            fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
            return 1;
        }
        muser_token tok = toks[0], next = 0;
        int pos = (int)d;
        for (int w = 0; w < 3; w++, pos++) {
            if (mu_cuda_decode_select(b, tok, pos, 0.0f, 0, NULL, &next) != 0) {
                fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
                return 1;
            }
            tok = next;
        }
        double t1 = now_s();
        double kvbytes = 0;
        for (int i = 0; i < gen; i++, pos++) {
            kvbytes += (double)mu_model_kv_bytes_per_token(m, pos, kvb);
            if (mu_cuda_decode_select(b, tok, pos, 0.0f, 0, NULL, &next) != 0) {
                fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
                return 1;
            }
            tok = next;
        }
        const double secs = now_s() - t1;
        tok_s[di] = gen / secs;
        bytes_tok[di] = (double)m->weight_bytes_per_token + kvbytes / gen;
        gbs[di] = bytes_tok[di] * tok_s[di] / 1e9;
        printf("decode depth %6lld: %7.1f tok/s  %6.3f ms/token  %6.2f GB/token  %6.0f GB/s  %5.1f%% of copy\n",
               (long long)d, tok_s[di], 1e3 / tok_s[di], bytes_tok[di] / 1e9, gbs[di], 100.0 * gbs[di] / copy_bw);
        fflush(stdout);
    }

    if (ab) {
        /* variants: matvec blocks per SM (0: all that fit), PDL, graph, side-stream prefetch; the default last */
        /* blocks/SM, PDL, graph, prefetch level, int8 input staged in shared memory */
        static const int var[][5] = {{0, 1, 1, 1, 0}, {0, 1, 1, 2, 1}, {0, 1, 1, 0, 1}, {2, 1, 1, 1, 1},
                                     {0, 0, 1, 1, 1}, {0, 0, 0, 1, 1}, {0, 1, 1, 1, 1}};
        printf("\nA/B at depth 0 (%d tokens each):\n| matvec blocks/SM | PDL | graph | prefetch | int8 input | tok/s | "
               "ms/token |\n|---:|---|---|---|---|---:|---:|\n", gen);
        for (size_t vi = 0; vi < sizeof var / sizeof var[0]; vi++) {
            mu_cuda_set_options(b, var[vi][2], var[vi][1], -1, var[vi][0]);
            mu_cu_set_matvec_prefetch(var[vi][3]);

            mu_cuda_set_synthetic_depth(b, 0, 5);
            muser_token tok = toks[0], next = 0;
            int pos = 0;
            double t1 = 0;
            for (int i = 0; i < gen + 3; i++, pos++) {
                if (i == 3) t1 = now_s();
                if (mu_cuda_decode_select(b, tok, pos, 0.0f, 0, NULL, &next) != 0) {
                    fprintf(stderr, "bench_cuda: %s\n", muser_last_error());
                    return 1;
                }
                tok = next;
            }
            const double ts = gen / (now_s() - t1);
            printf("| %s | %s | %s | %s | %s | %.1f | %.3f |\n", var[vi][0] ? (var[vi][0] == 1 ? "1" : "2") : "all",
                   var[vi][1] ? "on" : "off", var[vi][2] ? "on" : "off",
                   var[vi][3] == 2 ? "L1+L2 rows" : var[vi][3] ? "L1 side" : "off", var[vi][4] ? "shared" : "L1", ts,
                   1e3 / ts);
            fflush(stdout);
        }
    }

    double pp_tok_s = 0;
    if (pp > 1) {
        float *lg = malloc(sizeof(float) * V);
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            b->ops->reset(b);
            double t1 = now_s();
            if (b->ops->forward(b, toks, pp, 0, false, lg) != 0) {
                fprintf(stderr, "bench_cuda: pp: %s\n", muser_last_error());
                return 1;
            }
            double s = now_s() - t1;
            if (rep > 0 && s < best) best = s; /* the first run warms cuBLAS up */
        }
        pp_tok_s = pp / best;
        printf("prefill pp%d: %.0f tok/s (%.1f ms per chunk, best of 2 after a warm-up)\n", pp, pp_tok_s, best * 1e3);
        free(lg);
    }

    if (profile) {
        for (int pi = 0; pi < 2; pi++) {
            const int64_t d = pi == 0 ? 0 : max_depth;
            if (pi == 1 && max_depth == 0) break;
            mu_cuda_set_synthetic_depth(b, d, 7);
            mu_cuda_prof rows[MU_CUDA_PROF_MAX];
            int nr = 0;
            if (mu_cuda_profile_decode(b, toks[1], (int)d, 5, rows, &nr) != 0) {
                fprintf(stderr, "bench_cuda: profile: %s\n", muser_last_error());
                return 1;
            }
            double total_ms = 0, total_b = 0;
            int total_l = 0;
            for (int i = 0; i < nr; i++) total_ms += rows[i].ms, total_b += rows[i].bytes, total_l += rows[i].launches;
            printf("\n--profile, decode at depth %lld, op by op with events (no graph, no PDL):\n", (long long)d);
            printf("| op family | launches/token | MB/token | us/token | GB/s | share |\n|---|---:|---:|---:|---:|---:|\n");
            for (int i = 0; i < nr; i++)
                printf("| %s | %d | %.1f | %.1f | %.0f | %.1f%% |\n", rows[i].family, rows[i].launches,
                       rows[i].bytes / 1e6, rows[i].ms * 1e3, rows[i].ms > 0 ? rows[i].bytes / (rows[i].ms * 1e-3) / 1e9 : 0,
                       100.0 * rows[i].ms / total_ms);
            printf("| total | %d | %.1f | %.1f | %.0f | 100%% |\n", total_l, total_b / 1e6, total_ms * 1e3,
                   total_b / (total_ms * 1e-3) / 1e9);
        }
    }

    /* the short table, last */
    printf("\n| test | tok/s | GB/token | GB/s | %% of copy %.0f GB/s |\n|---|---:|---:|---:|---:|\n", copy_bw);
    for (int di = 0; di < n_depths; di++)
        printf("| tg%d @ d%lld | %.1f | %.2f | %.0f | %.1f%% |\n", gen, (long long)depths[di], tok_s[di],
               bytes_tok[di] / 1e9, gbs[di], 100.0 * gbs[di] / copy_bw);
    if (pp > 1) printf("| pp%d | %.0f | | | |\n", pp, pp_tok_s);
    const double target0 = 0.9 * copy_bw * 1e9 / (double)m->weight_bytes_per_token;
    if (n_depths > 0 && depths[0] == 0) {
        printf("targets: depth 0 >= %.1f tok/s (90%% of copy): %s; ", target0, tok_s[0] >= target0 ? "met" : "missed");
        for (int di = 0; di < n_depths; di++)
            if (depths[di] == 131072)
                printf("depth 131072 >= 85%% of depth 0: %.1f%% %s; ", 100.0 * tok_s[di] / tok_s[0],
                       tok_s[di] >= 0.85 * tok_s[0] ? "met" : "missed");
    }
    if (pp > 1) printf("pp%d >= 5800 tok/s: %s\n", pp, pp_tok_s >= 5800 ? "met" : "missed");
    else printf("\n");
    b->ops->free(b);
    muser_model_free(m);
    free(toks);
    return 0;
}
