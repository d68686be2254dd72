/* bench_parallel.c — `muser bench --parallel 1,2,4,...`: B sessions of one
 * model decoding together (muser_batch_decode_greedy: muser_batch_decode with
 * each row's greedy choice), one row each per step (llama-batched-bench's
 * -npl), for each width B and KV depth.
 *
 * Every session of a width is filled to the depth with random finite K/V
 * (the KV fill hook, no prefill), then one warm-up step and n timed steps
 * run; the widths take turns, round after round, so that a shared
 * machine's drift reaches all of them alike. A step reads the weights once
 * and each row's KV, so bytes per step = weight bytes per token + B x KV
 * bytes at the depth. The step is timed whole, the next tokens' choice
 * included: a GPU makes it where the logits are and copies B ids back (as
 * the one-row step's decode_select does), the CPU scans each row's logits.
 * Beside the wall time, the process's CPU time per step: on a shared
 * machine, the work a step took whatever the preemption.
 *
 * Every session is opened alike (a batch of the widest width), as a
 * server's slots are: sessions of different batches can hold sliding
 * rings of different sizes, which a GPU's batched attention cannot share.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "cpu/pool.h"
#include "engine/engine.h"
#include "tools/bench.h"
#include "tools/tool_util.h"
#include "util/clock.h"

bool mu_bench_parse_widths(mu_args *a, int *out, int cap, int *n) {
    const char *opt = a->argv[a->i], *s;
    if (!mu_arg_str(a, &s)) return false;
    const char *all = s;
    *n = 0;
    do {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || (*end && *end != ',') || v < 1 || v > MU_BENCH_WIDTH_MAX || *n >= cap) {
            fprintf(stderr,
                    "muser bench: %s takes up to %d comma-separated batch widths, each a whole number from 1 to %d "
                    "(sessions decoding together; got '%s')\n",
                    opt, cap, MU_BENCH_WIDTH_MAX, all);
            return false;
        }
        out[(*n)++] = (int)v;
        s = *end ? end + 1 : end;
    } while (*s);
    return true;
}

#define MAX_ROUNDS 64

typedef struct width_result {
    long depth;
    int rows;
    double *ms, *cpu_ms; /* every timed step of every round: wall, process CPU */
    int n_ms;
    double bw[MAX_ROUNDS * MU_BENCH_MEMBW_PASSES]; /* ceilings measured right before it, all rounds */
    int n_bw;
    double step_ms, step_cpu_ms, vs_one, tok_s, bytes, gb_s, membw, share;
} width_result;

/* CPU time of the process (all threads), seconds. */
static double process_cpu_seconds(void) {
    struct rusage u;
    if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

/* One width at one depth: fill, one warm-up step, n timed steps. */
static int run_width(muser_session *const *s, int rows, long depth, int n_gen, int n_vocab, muser_token *tok,
                     muser_token *next, double *ms, double *cpu_ms) {
    for (int i = 0; i < rows; i++) {
        if (mu_session_fill_kv(s[i], (int)depth, (uint64_t)depth * 1000003u + (uint64_t)i + 1) != 0) return 1;
        tok[i] = (muser_token)((1000 + 17 * i) % n_vocab);
    }
    for (int step = -1; step < n_gen; step++) {
        const double t0 = mu_now_seconds(), c0 = process_cpu_seconds();
        if (muser_batch_decode_greedy(s, tok, rows, next) != 0) return 1;
        if (step >= 0) {
            ms[step] = 1e3 * (mu_now_seconds() - t0);
            cpu_ms[step] = 1e3 * (process_cpu_seconds() - c0);
        }
        memcpy(tok, next, sizeof(muser_token) * (size_t)rows);
    }
    return 0;
}

/* Fails (1) when maxw sessions' KV at the deepest depth cannot fit in the
 * host's memory next to the file (the CPU backends keep KV in host memory). */
static int check_kv_memory(const mu_bench_parallel *p, const mu_model *m, int maxw, long positions) {
    struct stat st;
    if (stat(p->model_path, &st) != 0) return 0;
    uint64_t total, avail;
    mu_bench_memory_info(&total, &avail);
    const int kv_elem = p->sp.kv_type == MUSER_KV_F32 ? 4 : 2;
    const double kv = (double)maxw * (double)mu_model_kv_bytes_per_token(m, positions, kv_elem);
    if (total && (double)st.st_size + kv > (double)total) {
        fprintf(stderr,
                "muser bench: %d sessions at %ld positions hold %.2f GB of KV, which with the %.2f GB file exceeds "
                "this machine's %.2f GB of memory; ask for fewer sessions or a smaller depth\n",
                maxw, positions, kv / 1e9, (double)st.st_size / 1e9, (double)total / 1e9);
        return 1;
    }
    return 0;
}

static void summarize(width_result *r, const width_result *one, const mu_model *m, int kv_elem) {
    r->step_ms = mu_median(r->ms, r->n_ms);
    r->step_cpu_ms = mu_median(r->cpu_ms, r->n_ms);
    r->tok_s = r->rows * 1e3 / r->step_ms;
    r->bytes = (double)mu_model_weight_bytes_per_token(m) +
               (double)r->rows * (double)mu_model_kv_bytes_per_token(m, r->depth, kv_elem);
    r->gb_s = r->bytes / (r->step_ms * 1e6);
    r->membw = mu_median(r->bw, r->n_bw);
    r->share = r->membw > 0 ? r->gb_s / r->membw : 0;
    r->vs_one = one ? r->step_ms / mu_median(one->ms, one->n_ms) : 0;
}

static void print_json(const mu_bench_parallel *p, muser_session *s, const width_result *res, int n, const char *isa) {
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "parallel");
    double *bw_all = malloc(sizeof(double) * (size_t)n);
    int n_all = 0;
    for (int i = 0; i < n; i++) {
        const width_result *r = &res[i];
        cJSON *d = cJSON_CreateObject();
        cJSON_AddNumberToObject(d, "depth", (double)r->depth);
        cJSON_AddNumberToObject(d, "rows", r->rows);
        cJSON_AddNumberToObject(d, "step_ms", r->step_ms);
        cJSON_AddNumberToObject(d, "step_cpu_ms", r->step_cpu_ms);
        if (r->vs_one > 0) cJSON_AddNumberToObject(d, "vs_one_row", r->vs_one);
        cJSON_AddNumberToObject(d, "tok_s", r->tok_s);
        cJSON_AddNumberToObject(d, "bytes_per_step", r->bytes);
        cJSON_AddNumberToObject(d, "gb_s", r->gb_s);
        cJSON_AddNumberToObject(d, "bw_share", r->share);
        cJSON_AddNumberToObject(d, "membw_gb_s", r->membw);
        cJSON_AddNumberToObject(d, "steps", r->n_ms);
        cJSON_AddItemToArray(arr, d);
        if (bw_all) bw_all[n_all++] = r->membw;
    }
    cJSON_AddNumberToObject(o, "membw_gb_s", n_all ? mu_median(bw_all, n_all) : 0);
    free(bw_all);
    cJSON_AddNumberToObject(o, "threads", p->sp.n_threads);
    cJSON_AddNumberToObject(o, "rounds", p->rounds);
    cJSON_AddStringToObject(o, "lane", muser_session_lane(s) == MUSER_LANE_FAST ? "fast" : "exact");
    cJSON_AddStringToObject(o, "backend", mu_tool_backend_name(muser_session_backend(s)));
    cJSON_AddStringToObject(o, "isa", isa);
    char *t = cJSON_PrintUnformatted(o);
    printf("%s\n", t);
    free(t);
    cJSON_Delete(o);
}

static void print_markdown(const mu_bench_parallel *p, muser_session *s, const mu_model *m, const width_result *res,
                           int n, const char *isa) {
    char cpu[256];
    mu_bench_cpu_name(cpu, sizeof cpu);
    uint64_t total, avail;
    mu_bench_memory_info(&total, &avail);
    mu_backend *be = mu_session_backend_of(s);
    const char *base = strrchr(p->model_path, '/') ? strrchr(p->model_path, '/') + 1 : p->model_path;
    printf("# muser bench --parallel: %s\n\n", base);
    printf("- machine: %s, %d cores online, %.1f GiB RAM; kernels: %s; %d threads\n", cpu, mu_cpu_count(),
           (double)total / (1 << 30), isa, p->sp.n_threads);
    printf("- model: %s, %d layers, %.3f GB of weights read per step (the file's tensor types)\n", m->arch_name,
           m->hp.n_layer, (double)mu_model_weight_bytes_per_token(m) / 1e9);
    printf("- lane %s, KV %s, backend %s\n", muser_session_lane(s) == MUSER_LANE_FAST ? "fast" : "exact",
           p->sp.kv_type == MUSER_KV_F32 ? "f32" : "f16", mu_tool_backend_name(muser_session_backend(s)));
    if (be->ops->describe) printf("- device: %s\n", be->ops->describe(be));
    printf("- B sessions decode together (muser_batch_decode with greedy choices where the logits are, one row each per step); each is filled to the depth "
           "with random finite K/V (no prefill), then 1 warm-up and %d timed steps; the widths take turns, %d "
           "round%s; step time is the median of all timed steps\n",
           p->n_gen, p->rounds, p->rounds == 1 ? "" : "s");
    printf("- CPU ms: the process's CPU time per step, all threads (median), the work of a step whatever the "
           "preemption on a shared machine\n");
    printf("- bytes per step: the weights once + B x the KV at the depth; share: of the %s measured (%d passes) "
           "right before each width\n\n",
           be->ops->membw ? "backend's ceiling" : "host's read bandwidth", MU_BENCH_MEMBW_PASSES);
    printf("| depth | B | step ms | x one-row step | CPU ms | tok/s | bytes/step | GB/s | %s | share |\n",
           be->ops->membw ? "ceiling" : "read bandwidth");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < n; i++) {
        const width_result *r = &res[i];
        printf("| %ld | %d | %.2f | ", r->depth, r->rows, r->step_ms);
        if (r->vs_one > 0) printf("%.2f | ", r->vs_one);
        else printf("- | ");
        printf("%.1f | ", r->step_cpu_ms);
        printf("%.1f | %.3f GB | %.1f | %.1f | %.0f%% |\n", r->tok_s, r->bytes / 1e9, r->gb_s, r->membw,
               100 * r->share);
    }
}

/* Sessions 0..maxw-1 on model m; the first is the step's leader. All
 * alike, as a server's slots are (the batch is capped by the context): a
 * sliding layer's ring holds window + batch - 1 rows, and rings of
 * different sizes cannot share the step's one attention launch. */
static int open_sessions(const mu_bench_parallel *p, const muser_model *model, int maxw, long positions,
                         muser_session **s) {
    muser_session_params sp = p->sp;
    sp.n_ctx = positions > maxw ? (int)positions : maxw;
    sp.n_batch = maxw;
    for (int i = 0; i < maxw; i++) {
        if (muser_session_new(model, &sp, &s[i]) != 0) {
            fprintf(stderr, "muser bench: session %d of %d: %s\n", i + 1, maxw, muser_last_error());
            return 1;
        }
    }
    return 0;
}

int mu_bench_parallel_run(const mu_bench_parallel *p) {
    if (p->rounds < 1 || p->rounds > MAX_ROUNDS) {
        fprintf(stderr, "muser bench: --rounds must be from 1 to %d\n", MAX_ROUNDS);
        return 2;
    }
    if (mu_bench_check_memory(p->model_path)) return 1;
    muser_model *model = NULL;
    if (muser_model_load(p->model_path, &model) != 0) {
        fprintf(stderr, "muser bench: %s\n", muser_last_error());
        return 1;
    }
    const mu_model *m = model;
    const long ctx = m->hp.n_ctx_train;
    long max_depth = 0;
    for (int d = 0; d < p->n_depths; d++) {
        if (p->depths[d] + 1 + p->n_gen > ctx) {
            fprintf(stderr,
                    "muser bench: depth %ld and 1 + %d decoded positions do not fit in the model's context of %ld "
                    "positions\n",
                    p->depths[d], p->n_gen, ctx);
            muser_model_free(model);
            return 2;
        }
        if (p->depths[d] > max_depth) max_depth = p->depths[d];
    }
    const long positions = max_depth + 1 + p->n_gen;
    int maxw = 0;
    for (int w = 0; w < p->n_widths; w++) maxw = p->widths[w] > maxw ? p->widths[w] : maxw;

    const int n_res = p->n_depths * p->n_widths;
    width_result *res = calloc((size_t)n_res, sizeof *res);
    muser_session **s = calloc((size_t)maxw, sizeof *s);
    muser_token *tok = malloc(sizeof(muser_token) * 2 * (size_t)maxw); /* [2][maxw]: this step's, the next */
    mu_membw_probe *probe = NULL;
    int rc = !res || !s || !tok;
    if (rc) fprintf(stderr, "muser bench: out of memory\n");
    for (int i = 0; i < n_res && !rc; i++) {
        res[i].depth = p->depths[i / p->n_widths];
        res[i].rows = p->widths[i % p->n_widths];
        res[i].ms = malloc(sizeof(double) * (size_t)p->n_gen * (size_t)p->rounds);
        res[i].cpu_ms = malloc(sizeof(double) * (size_t)p->n_gen * (size_t)p->rounds);
        if (!res[i].ms || !res[i].cpu_ms) rc = 1, fprintf(stderr, "muser bench: out of memory\n");
    }
    if (!rc) rc = open_sessions(p, model, maxw, positions, s);
    const muser_backend kind = rc ? MUSER_BACKEND_CPU : muser_session_backend(s[0]);
    if (!rc && kind != MUSER_BACKEND_CUDA) rc = check_kv_memory(p, m, maxw, positions);
    if (!rc && !mu_session_backend_of(s[0])->ops->membw) {
        probe = mu_membw_probe_new(p->sp.n_threads, (size_t)p->membw_mib << 20);
        if (!probe) rc = 1, fprintf(stderr, "muser bench: %s\n", muser_last_error());
    }
    const int kv_elem = p->sp.kv_type == MUSER_KV_F32 ? 4 : 2;
    for (int d = 0; d < p->n_depths && !rc; d++)
        for (int round = 0; round < p->rounds && !rc; round++)
            for (int w = 0; w < p->n_widths && !rc; w++) {
                width_result *r = &res[d * p->n_widths + w];
                rc = mu_bench_measure_ceiling(s[0], probe, r->bw + r->n_bw);
                if (rc) {
                    fprintf(stderr, "muser bench: bandwidth: %s\n", muser_last_error());
                    break;
                }
                r->n_bw += MU_BENCH_MEMBW_PASSES;
                rc = run_width(s, r->rows, r->depth, p->n_gen, m->hp.n_vocab, tok, tok + maxw, r->ms + r->n_ms,
                               r->cpu_ms + r->n_ms);
                if (rc) fprintf(stderr, "muser bench: %d sessions at depth %ld: %s\n", r->rows, r->depth,
                                muser_last_error());
                r->n_ms += p->n_gen;
            }
    if (!rc) {
        for (int d = 0; d < p->n_depths; d++) {
            const width_result *one = NULL;
            for (int w = 0; w < p->n_widths; w++)
                if (res[d * p->n_widths + w].rows == 1) one = &res[d * p->n_widths + w];
            for (int w = 0; w < p->n_widths; w++) summarize(&res[d * p->n_widths + w], one, m, kv_elem);
        }
        const char *isa = probe ? mu_membw_probe_isa(probe) : "-";
        if (p->json) print_json(p, s[0], res, n_res, isa);
        else print_markdown(p, s[0], m, res, n_res, isa);
    }
    mu_membw_probe_free(probe);
    for (int i = 0; s && i < maxw; i++) muser_session_free(s[i]);
    for (int i = 0; res && i < n_res; i++) free(res[i].ms), free(res[i].cpu_ms);
    free(res);
    free(s);
    free(tok);
    muser_model_free(model);
    return rc;
}
