/* cmd_bench.c — `muser bench`: decode speed at several KV depths, prefill
 * speed, bytes per token from the file's real tensor types, achieved GB/s
 * and its share of the machine's measured read bandwidth; --profile shows
 * where a token's time goes, per op family.
 *
 * Depths are reached without a prefill: a backend hook fills the KV planes
 * with random finite rows (as if that many tokens had been decoded), so
 * depth 131072 takes seconds, not hours. The output says so.
 *
 * Every timed number is a median over repeats; tokens are timed one by one.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpu/membw.h"
#include "cpu/pool.h"
#include "engine/engine.h"
#include "tools/args.h"
#include "tools/bench.h"
#include "tools/commands.h"
#include "tools/tool_util.h"
#include "util/clock.h"
#include "util/error.h"

#define MAX_DEPTHS 32
#define MEMBW_MIB 1024 /* default probe buffer: far beyond any L3 */
#define MEMBW_PASSES MU_BENCH_MEMBW_PASSES /* right before each depth */
#define PREFILL_REPS 3

static void usage(FILE *out) {
    fprintf(out,
            "usage: muser bench -m MODEL [options]\n"
            "       muser bench --membw [-t N] [--json] [--membw-mib MIB]\n"
            "Decode tok/s at each KV depth (the median over -n tokens), bytes read per token (the file's\n"
            "tensor types plus the KV read at that depth), achieved GB/s and its share of the machine's\n"
            "read bandwidth (measured every run right before each depth, since a shared machine's\n"
            "bandwidth drifts; with --backend cuda the GPU's device-to-device copy bandwidth instead),\n"
            "and prefill tok/s. Depths are filled with random finite K/V, no prefill. Markdown on stdout.\n"
            "--parallel: B sessions decode together, one row each per step, for each width B (1 to %d) at\n"
            "each depth (default 0): step time, tok/s in all, GB/s and share; --rounds R runs the widths\n"
            "in turn R times (default 1) and takes the median of all steps.\n\n"
            "  %-28s GGUF model (required but with --membw)\n"
            "  %-28s KV depths (default: those of 0,512,2048,8192,32768,131072\n"
            "  %-28s inside the model's context, then its last position)\n"
            "  %-28s timed decode tokens per depth (default: 16)\n"
            "  %-28s prefill tokens; 0: skip (default: 512, at most the context)\n"
            "  %-28s one JSON object instead of Markdown\n"
            "  %-28s tok/s against depth, drawn with gnuplot (default: none)\n"
            "  %-28s a table per op family: where a token's time goes\n"
            "  %-28s the memory bandwidth alone, no model\n"
            "  %-28s bandwidth probe buffer, %d passes (default: %d)\n"
            "  %-28s B sessions decoding together, per width (default: none)\n"
            "  %-28s rounds of the widths, alternating (default: 1)\n"
            "  %-28s speculative decoding with this DFlash drafter: the plain and the speculative\n"
            "  %-28s step at each depth (default: 0), tok/s at each accepted length, and the\n"
            "  %-28s accepted length observed over a greedy generation\n"
            "  %-28s tokens drafted per step (default: the drafter's block size - 1)\n"
            "  %-28s tokens of the observed generation (default: 128)\n",
            MU_BENCH_WIDTH_MAX, "-m, --model FILE", "--depths D,D,...", "", "-n, --n-gen N", "-p, --pp, --n-prompt N", "--json",
            "--plot FILE.png", "--profile", "--membw", "--membw-mib MIB", MEMBW_PASSES, MEMBW_MIB,
            "--parallel B,B,...", "--rounds R", "--draft, -md FILE", "", "", "--draft-max N", "--observe N");
    mu_tool_session_help(out, "cpu|cuda", NULL);
}

typedef struct bench {
    const char *model_path, *plot;
    long depths[MAX_DEPTHS];
    int n_depths, n_gen, pp, membw_mib;
    int widths[MU_BENCH_MAX_WIDTHS], n_widths, rounds; /* --parallel, --rounds */
    bool json, profile, membw_only, depths_given;
    const char *draft_path;    /* --draft: the speculative mode (bench_spec.c) */
    int draft_max, observe;
    muser_session_params sp;
} bench;

typedef struct depth_result {
    long depth, measured_depth;
    double tok_s, ms, bytes, gb_s, share, membw;
    mu_prof_entry prof[MU_PROF_COUNT];
    double prof_token_ms;
} depth_result;

void mu_bench_memory_info(uint64_t *total, uint64_t *avail) {
    *total = *avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) *total = kb * 1024;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) *avail = kb * 1024;
    }
    fclose(f);
}

void mu_bench_cpu_name(char *out, size_t cap) {
    snprintf(out, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && c) {
            c += 2;
            c[strcspn(c, "\n")] = 0;
            snprintf(out, cap, "%s", c);
            break;
        }
    }
    fclose(f);
}

static const char *family_name(int f, char *buf, size_t cap) {
    switch (f) {
    case MU_PROF_ATTN: return "attention (KV read)";
    case MU_PROF_ELEMWISE: return "norms, RoPE, gates, SwiGLU, KV store";
    case MU_PROF_QUANT: return "activation quantization";
    case MU_PROF_LM_HEAD: return "LM head (output matmul)";
    case MU_PROF_EMBED: return "embedding row";
    default: snprintf(buf, cap, "matmul %s", mu_type_name((uint32_t)f)); return buf;
    }
}

static int parse(bench *b, int argc, char **argv) {
    memset(b, 0, sizeof *b);
    b->n_depths = 0; /* the model's report depths */
    b->n_gen = 16;
    b->pp = -1; /* 512, at most the context */
    b->membw_mib = MEMBW_MIB;
    b->sp = muser_session_default_params();
    b->sp.backend = MUSER_BACKEND_CPU;
    b->sp.n_threads = mu_cpu_count();
    mu_args a = {argc, 1, argv, "bench"};
    for (; a.i < argc; a.i++) {
        if (mu_arg_is(&a, "-h", "--help")) {
            usage(stdout);
            return -1;
        } else if (mu_arg_is(&a, "-m", "--model")) {
            if (!mu_arg_str(&a, &b->model_path)) return 2;
        } else if (mu_arg_is(&a, NULL, "--depths")) {
            if (!mu_arg_int_list(&a, b->depths, MAX_DEPTHS, &b->n_depths)) return 2;
            b->depths_given = true;
        } else if (mu_arg_is(&a, NULL, "--parallel")) {
            if (!mu_bench_parse_widths(&a, b->widths, MU_BENCH_MAX_WIDTHS, &b->n_widths)) return 2;
        } else if (mu_arg_is(&a, "-md", "--draft")) {
            if (!mu_arg_str(&a, &b->draft_path)) return 2;
        } else if (mu_arg_is(&a, NULL, "--draft-max")) {
            if (!mu_arg_int(&a, 1, 255, &b->draft_max)) return 2;
        } else if (mu_arg_is(&a, NULL, "--observe")) {
            if (!mu_arg_int(&a, 1, 100000, &b->observe)) return 2;
        } else if (mu_arg_is(&a, NULL, "--rounds")) {
            if (!mu_arg_int(&a, 1, 64, &b->rounds)) return 2;
        } else if (mu_arg_is(&a, "-n", "--n-gen")) {
            if (!mu_arg_int(&a, 1, 100000, &b->n_gen)) return 2;
        } else if (mu_arg_is(&a, "-p", "--pp") || mu_arg_is(&a, NULL, "--n-prompt")) {
            if (!mu_arg_int(&a, 0, 1 << 20, &b->pp)) return 2;
        } else if (mu_arg_is(&a, "-c", "--ctx-size") || mu_arg_is(&a, "-b", "--batch-size") ||
                   mu_arg_is(&a, NULL, "--ctx") || mu_arg_is(&a, NULL, "--batch")) {
            fprintf(stderr, "muser bench: %s is not a bench option: the context follows --depths, the prefill "
                            "step --pp\n", a.argv[a.i]);
            return 2;
        } else if (mu_arg_is(&a, NULL, "--json")) {
            b->json = true;
        } else if (mu_arg_is(&a, NULL, "--profile")) {
            b->profile = true;
        } else if (mu_arg_is(&a, NULL, "--membw")) {
            b->membw_only = true;
        } else if (mu_arg_is(&a, NULL, "--membw-mib")) {
            if (!mu_arg_int(&a, 1, 1 << 20, &b->membw_mib)) return 2;
        } else if (mu_arg_is(&a, NULL, "--plot")) {
            if (!mu_arg_str(&a, &b->plot)) return 2;
        } else if (!mu_tool_session_option(&a, &b->sp)) {
            return 2;
        }
    }
    if (!b->membw_only && !mu_arg_require("bench", b->model_path, "-m MODEL (or --membw)")) return 2;
    return 0;
}

/* Fails (1) when the file cannot fit in memory: decode reads every weight
 * once per token, so a model the page cache cannot hold would be read from
 * disk for every token and the numbers would measure the disk. */
int mu_bench_check_memory(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "muser bench: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    uint64_t total, avail;
    mu_bench_memory_info(&total, &avail);
    const double gb = 1e9;
    if (total && (uint64_t)st.st_size > total) {
        fprintf(stderr,
                "muser bench: %s is %.2f GB but this machine has %.2f GB of memory: decode reads every weight "
                "once per token, so the file would be read from disk for every token. Benchmark a smaller file "
                "(muser synth --layers N).\n",
                path, (double)st.st_size / gb, (double)total / gb);
        return 1;
    }
    if (avail && (uint64_t)st.st_size > avail)
        fprintf(stderr,
                "muser bench: warning: %s (%.2f GB) is larger than the memory available now (%.2f GB); other "
                "programs' pages will be evicted, and the first tokens may read from disk\n",
                path, (double)st.st_size / gb, (double)avail / gb);
    return 0;
}

/* Tokens as a generation loop decodes them: each step chooses the next
 * token (greedy; on the device where the backend can) and feeds it back. */
static bool decode_tokens(muser_session *s, int n, muser_token tok, double *ms) {
    for (int i = 0; i < n; i++) {
        const double t0 = mu_now_seconds();
        muser_token next = 0;
        if (mu_session_decode_select(s, tok, 0.0f, 0, false, &next) != 0) return false;
        if (ms) ms[i] = 1e3 * (mu_now_seconds() - t0);
        tok = next;
    }
    return true;
}

/* The ceiling for each depth: the backend's own (a GPU's device-to-device
 * copy) when it has one, else the host's read bandwidth, MEMBW_PASSES
 * passes right before the depth. */
int mu_bench_measure_ceiling(muser_session *s, mu_membw_probe *probe, double *bw) {
    mu_backend *be = mu_session_backend_of(s);
    if (be->ops->membw) {
        const char *what = NULL;
        for (int i = 0; i < MEMBW_PASSES; i++)
            if (be->ops->membw(be, &bw[i], &what) != 0) return 1;
        return 0;
    }
    mu_membw_probe_run(probe, MEMBW_PASSES, bw);
    return 0;
}

static int run_depth(muser_session *s, const mu_model *m, const bench *b, long depth, long measured,
                     mu_membw_probe *probe, double *all_bw, depth_result *r) {
    memset(r, 0, sizeof *r);
    r->depth = depth;
    r->measured_depth = measured;
    double bw[MEMBW_PASSES];
    if (mu_bench_measure_ceiling(s, probe, bw)) return 1;
    memcpy(all_bw, bw, sizeof bw);
    const double membw = mu_median(bw, MEMBW_PASSES);
    r->membw = membw;
    const muser_token tok = 1000 % m->hp.n_vocab;
    if (mu_session_fill_kv(s, (int)measured, (uint64_t)measured + 1) != 0) return 1;
    if (!decode_tokens(s, 1, tok, NULL)) return 1; /* warm-up: caches, pages, pool */
    double *ms = malloc(sizeof(double) * (size_t)b->n_gen);
    if (!decode_tokens(s, b->n_gen, tok, ms)) {
        free(ms);
        return 1;
    }
    r->ms = mu_median(ms, b->n_gen);
    free(ms);
    r->tok_s = 1e3 / r->ms;
    const int kv_elem = b->sp.kv_type == MUSER_KV_F32 ? 4 : 2;
    r->bytes = (double)(mu_model_weight_bytes_per_token(m) + mu_model_kv_bytes_per_token(m, measured, kv_elem));
    r->gb_s = r->bytes * r->tok_s / 1e9;
    r->share = membw > 0 ? r->gb_s / membw : 0;
    if (b->profile) {
        /* a separate pass, so the timers do not touch the numbers above */
        if (mu_session_fill_kv(s, (int)measured, (uint64_t)measured + 1) != 0) return 1;
        const mu_prof_entry *e = mu_session_profile(s, true);
        if (!e) {
            fprintf(stderr, "muser bench: this backend has no profiler (or it was built with MUSER_PROFILE=0)\n");
            return 1;
        }
        const double t0 = mu_now_seconds();
        const bool ok = decode_tokens(s, b->n_gen, tok, NULL);
        r->prof_token_ms = 1e3 * (mu_now_seconds() - t0) / b->n_gen;
        memcpy(r->prof, e, sizeof r->prof);
        mu_session_profile(s, false);
        if (!ok) return 1;
    }
    return 0;
}

/* prof (when not NULL): one more prefill with the timers on, its entries
 * and wall time. */
static int run_prefill(muser_session *s, const mu_model *m, int pp, double *tok_s, mu_prof_entry *prof,
                       double *prof_ms) {
    muser_token *toks = malloc(sizeof(muser_token) * (size_t)pp);
    uint64_t st = 7;
    for (int i = 0; i < pp; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (muser_token)((st >> 33) % (uint64_t)m->hp.n_vocab);
    }
    double t[PREFILL_REPS];
    int rc = 0;
    muser_session_reset(s);
    if (muser_session_feed(s, toks, pp < 16 ? pp : 16, false) != 0) rc = 1; /* warm-up */
    for (int r = 0; r < PREFILL_REPS && !rc; r++) {
        muser_session_reset(s);
        const double t0 = mu_now_seconds();
        if (muser_session_feed(s, toks, pp, false) != 0) rc = 1;
        t[r] = mu_now_seconds() - t0;
    }
    if (prof && !rc) {
        muser_session_reset(s);
        const mu_prof_entry *e = mu_session_profile(s, true);
        if (e) {
            const double t0 = mu_now_seconds();
            if (muser_session_feed(s, toks, pp, false) != 0) rc = 1;
            *prof_ms = 1e3 * (mu_now_seconds() - t0);
            memcpy(prof, e, sizeof(mu_prof_entry) * MU_PROF_COUNT);
            mu_session_profile(s, false);
        }
    }
    free(toks);
    if (!rc) *tok_s = pp / mu_median(t, PREFILL_REPS);
    return rc;
}

/* One profile table: entries summed over n_gen runs of total_ms each. */
static void print_prof_table(muser_session *s, const mu_prof_entry *prof, int n_gen, double total_ms,
                             const char *unit) {
    mu_backend *be = mu_session_backend_of(s);
    printf("| op family | calls | bytes | ms | GB/s | share of the %s |\n|---|---:|---:|---:|---:|---:|\n", unit);
    double timed = 0;
    for (int f = 0; f < MU_PROF_COUNT; f++) {
        const mu_prof_entry *e = &prof[f];
        if (!e->calls) continue;
        char buf[64];
        const double ms = (double)e->ns / 1e6 / n_gen, bytes = (double)e->bytes / n_gen;
        timed += ms;
        const char *name = be->ops->profile_name ? be->ops->profile_name(be, f) : NULL;
        printf("| %s | %.0f | ", name ? name : family_name(f, buf, sizeof buf), (double)e->calls / n_gen);
        if (bytes > 0) printf("%.1f MB | %.2f | %.1f | ", bytes / 1e6, ms, bytes / (ms * 1e6));
        else printf("- | %.2f | - | ", ms);
        printf("%.1f%% |\n", 100 * ms / total_ms);
    }
    printf("| other (session, logits copy, dispatch) | | | %.2f | | %.1f%% |\n", total_ms - timed,
           100 * (total_ms - timed) / total_ms);
}

static void print_profile(muser_session *s, const depth_result *r, int n_gen) {
    printf("\n### Profile at depth %ld (per token, mean of %d token%s; %.1f ms per token with the timers on)\n\n",
           r->measured_depth, n_gen, mu_plural_s(n_gen), r->prof_token_ms);
    print_prof_table(s, r->prof, n_gen, r->prof_token_ms, "token");
}

static int plot(const char *path, const depth_result *r, int n, const char *title) {
    char data[] = "/tmp/muser-bench-XXXXXX";
    int fd = mkstemp(data);
    if (fd < 0) {
        fprintf(stderr, "muser bench: cannot write the plot data: %s\n", strerror(errno));
        return 1;
    }
    FILE *f = fdopen(fd, "w");
    for (int i = 0; i < n; i++) fprintf(f, "%ld %.4f\n", r[i].measured_depth, r[i].tok_s);
    fclose(f);
    FILE *g = popen("gnuplot 2>&1", "w");
    if (!g) {
        fprintf(stderr, "muser bench: cannot run gnuplot (install gnuplot-nox): %s\n", strerror(errno));
        unlink(data);
        return 1;
    }
    fprintf(g,
            "set terminal pngcairo size 900,540\nset output '%s'\nset title \"%s\" noenhanced\n"
            "set xlabel 'KV depth (tokens)'\nset ylabel 'decode tok/s'\nset logscale x 2\nset grid\n"
            "set yrange [0:*]\nset key off\n"
            "plot '%s' using ($1 < 1 ? 1 : $1):2 with linespoints lw 2 pt 7\n",
            path, title, data);
    const int st = pclose(g);
    unlink(data);
    if (st != 0) {
        fprintf(stderr, "muser bench: gnuplot failed (exit %d); is gnuplot installed?\n", st);
        return 1;
    }
    return 0;
}

static void print_json(const bench *b, const depth_result *r, int n, int pp, double pp_tok_s, double membw,
                       const char *isa) {
    cJSON *o = cJSON_CreateObject();
    cJSON *dec = cJSON_AddArrayToObject(o, "decode");
    for (int i = 0; i < n; i++) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddNumberToObject(d, "depth", (double)r[i].measured_depth);
        cJSON_AddNumberToObject(d, "tok_s", r[i].tok_s);
        cJSON_AddNumberToObject(d, "ms_per_token", r[i].ms);
        cJSON_AddNumberToObject(d, "bytes_per_token", r[i].bytes);
        cJSON_AddNumberToObject(d, "gb_s", r[i].gb_s);
        cJSON_AddNumberToObject(d, "bw_share", r[i].share);
        cJSON_AddNumberToObject(d, "membw_gb_s", r[i].membw);
        cJSON_AddItemToArray(dec, d);
    }
    cJSON *pf = cJSON_AddObjectToObject(o, "prefill");
    cJSON_AddNumberToObject(pf, "tokens", pp);
    cJSON_AddNumberToObject(pf, "tok_s", pp_tok_s);
    cJSON_AddNumberToObject(o, "membw_gb_s", membw);
    cJSON_AddNumberToObject(o, "threads", b->sp.n_threads);
    cJSON_AddStringToObject(o, "lane", b->sp.lane == MUSER_LANE_FAST ? "fast" : "exact");
    cJSON_AddStringToObject(o, "isa", isa);
    char *s = cJSON_PrintUnformatted(o);
    printf("%s\n", s);
    free(s);
    cJSON_Delete(o);
}

/* --parallel: the batch-width ladder (bench_parallel.c). */
static int bench_parallel(const bench *b) {
    if (!b->n_widths || b->profile || b->plot || b->membw_only) {
        fprintf(stderr, "muser bench: %s\n",
                !b->n_widths ? "--rounds needs --parallel" : "--parallel does not take --profile, --plot or --membw");
        return 2;
    }
    static const long depth0 = 0;
    mu_bench_parallel p = {.model_path = b->model_path, .sp = b->sp, .n_widths = b->n_widths,
                           .depths = b->depths_given ? b->depths : &depth0, .n_depths = b->depths_given ? b->n_depths : 1,
                           .n_gen = b->n_gen, .rounds = b->rounds ? b->rounds : 1, .membw_mib = b->membw_mib,
                           .json = b->json};
    memcpy(p.widths, b->widths, sizeof p.widths);
    return mu_bench_parallel_run(&p);
}

/* --draft: speculative decoding (bench_spec.c). */
static int bench_spec(const bench *b) {
    if (b->json || b->profile || b->plot || b->membw_only) {
        fprintf(stderr, "muser bench: --draft does not take --json, --profile, --plot or --membw\n");
        return 2;
    }
    static const long depth0 = 0;
    mu_bench_spec p = {.model_path = b->model_path, .draft_path = b->draft_path, .sp = b->sp,
                       .draft_max = b->draft_max, .depths = b->depths_given ? b->depths : &depth0,
                       .n_depths = b->depths_given ? b->n_depths : 1, .n_gen = b->n_gen,
                       .observe = b->observe ? b->observe : 128};
    return mu_bench_spec_run(&p);
}

int cmd_bench(int argc, char **argv) {
    bench b;
    int rc = parse(&b, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    if (b.n_widths || b.rounds) return bench_parallel(&b);
    if (b.draft_path) return bench_spec(&b);
    if (!b.membw_only && mu_bench_check_memory(b.model_path)) return 1;

    muser_model *model = NULL;
    const mu_model *m = NULL;
    long measured[MAX_DEPTHS] = {0};
    if (!b.membw_only) {
        if (muser_model_load(b.model_path, &model) != 0) {
            fprintf(stderr, "muser bench: %s\n", muser_last_error());
            return 1;
        }
        m = model;
        if (b.n_depths == 0) {
            int64_t d[MU_MODEL_DEPTHS_MAX];
            b.n_depths = mu_model_report_depths(m, d);
            for (int i = 0; i < b.n_depths; i++) b.depths[i] = (long)d[i];
        }
        if (b.pp < 0) b.pp = m->hp.n_ctx_train < 512 ? m->hp.n_ctx_train : 512;
        /* A depth d needs d + 1 + n positions (warm-up and timed tokens). A
         * depth beyond the context is an error; one at its end is measured
         * n + 1 positions earlier, and the output says so. */
        const long ctx = m->hp.n_ctx_train;
        for (int i = 0; i < b.n_depths; i++) {
            if (b.depths[i] > ctx) {
                fprintf(stderr, "muser bench: depth %ld is beyond the model's context of %ld positions\n",
                        b.depths[i], ctx);
                muser_model_free(model);
                return 2;
            }
            measured[i] = b.depths[i] + 1 + b.n_gen <= ctx ? b.depths[i] : ctx - 1 - b.n_gen;
            if (measured[i] < 0) {
                fprintf(stderr, "muser bench: -n %d does not fit in the model's context of %ld positions\n",
                        b.n_gen, ctx);
                muser_model_free(model);
                return 2;
            }
        }
        if (b.pp > ctx) {
            fprintf(stderr, "muser bench: --pp %d is beyond the model's context of %ld positions\n", b.pp, ctx);
            muser_model_free(model);
            return 2;
        }
    }

    mu_membw_probe *probe = mu_membw_probe_new(b.sp.n_threads, (size_t)b.membw_mib << 20);
    if (!probe) {
        fprintf(stderr, "muser bench: %s\n", muser_last_error());
        muser_model_free(model);
        return 1;
    }
    if (b.membw_only && !b.model_path) {
        double bw[3 * MEMBW_PASSES];
        mu_membw_probe_run(probe, 3 * MEMBW_PASSES, bw);
        const double best = mu_max(bw, 3 * MEMBW_PASSES), med = mu_median(bw, 3 * MEMBW_PASSES);
        if (b.json)
            printf("{\"membw_gb_s\": %.4f, \"best_gb_s\": %.4f, \"threads\": %d, \"bytes\": %zu, \"passes\": %d}\n",
                   med, best, b.sp.n_threads, mu_membw_probe_bytes(probe), 3 * MEMBW_PASSES);
        else
            printf("memory read bandwidth: %.2f GB/s (median of %d passes over %.2f GiB, %d thread%s, %s loads; "
                   "best %.2f GB/s)\n",
                   med, 3 * MEMBW_PASSES, (double)mu_membw_probe_bytes(probe) / (1 << 30), b.sp.n_threads,
                   mu_plural_s(b.sp.n_threads), mu_membw_probe_isa(probe), best);
        mu_membw_probe_free(probe);
        return 0;
    }
    double region_us;
    {
        mu_pool *pool = mu_pool_new(b.sp.n_threads);
        region_us = pool ? mu_pool_region_cost_us(pool, 4000) : 0;
        mu_pool_free(pool);
    }

    /* one session for everything: context for the deepest depth (and a
     * second pass when profiling), one prefill chunk of --pp tokens */
    long max_depth = 0;
    for (int i = 0; i < b.n_depths; i++) max_depth = measured[i] > max_depth ? measured[i] : max_depth;
    long need = max_depth + 1 + b.n_gen;
    if (b.pp > need) need = b.pp;
    b.sp.n_ctx = (int)need;
    b.sp.n_batch = b.pp > 0 ? (b.pp < 2048 ? b.pp : 2048) : 1;
    muser_session *s = NULL;
    if (muser_session_new(model, &b.sp, &s) != 0) {
        fprintf(stderr, "muser bench: %s\n", muser_last_error());
        mu_membw_probe_free(probe);
        muser_model_free(model);
        return 1;
    }
    b.sp.lane = muser_session_lane(s); /* (auto resolved) */
    const char *isa = getenv("MUSER_ISA") && *getenv("MUSER_ISA") ? getenv("MUSER_ISA") : mu_membw_probe_isa(probe);
    depth_result res[MAX_DEPTHS];
    double all_bw[MAX_DEPTHS * MEMBW_PASSES];
    rc = 0;
    for (int i = 0; i < b.n_depths && !rc; i++) {
        rc = run_depth(s, m, &b, b.depths[i], measured[i], probe, all_bw + i * MEMBW_PASSES, &res[i]);
        if (rc) fprintf(stderr, "muser bench: depth %ld: %s\n", b.depths[i], muser_last_error());
    }
    double pp_tok_s = 0, pp_prof_ms = 0;
    mu_prof_entry pp_prof[MU_PROF_COUNT];
    memset(pp_prof, 0, sizeof pp_prof);
    if (!rc && b.pp > 0) {
        rc = run_prefill(s, m, b.pp, &pp_tok_s, b.profile ? pp_prof : NULL, &pp_prof_ms);
        if (rc) fprintf(stderr, "muser bench: prefill: %s\n", muser_last_error());
    }
    mu_membw_probe_free(probe);
    if (rc) {
        muser_session_free(s);
        muser_model_free(model);
        return 1;
    }
    const int n_bw = b.n_depths * MEMBW_PASSES;
    const double bw_best = mu_max(all_bw, n_bw), bw_median = mu_median(all_bw, n_bw);

    if (b.json) {
        print_json(&b, res, b.n_depths, b.pp, pp_tok_s, bw_median, isa);
    } else {
        char cpu[256];
        mu_bench_cpu_name(cpu, sizeof cpu);
        uint64_t total, avail;
        mu_bench_memory_info(&total, &avail);
        const char *base = strrchr(b.model_path, '/') ? strrchr(b.model_path, '/') + 1 : b.model_path;
        printf("# muser bench: %s\n\n", base);
        printf("- machine: %s, %d core%s online, %.1f GiB RAM; kernels: %s; %d thread%s\n", cpu, mu_cpu_count(),
               mu_plural_s(mu_cpu_count()), (double)total / (1 << 30), isa, b.sp.n_threads,
               mu_plural_s(b.sp.n_threads));
        printf("- model: %s, %d layer%s, %.3f GB of weights read per decoded token (the file's tensor types)\n",
               m->arch_name, m->hp.n_layer, mu_plural_s(m->hp.n_layer),
               (double)mu_model_weight_bytes_per_token(m) / 1e9);
        printf("- lane %s, KV %s, backend %s\n", b.sp.lane == MUSER_LANE_FAST ? "fast" : "exact",
               b.sp.kv_type == MUSER_KV_F32 ? "f32" : "f16", mu_tool_backend_name(muser_session_backend(s)));
        mu_backend *be = mu_session_backend_of(s);
        if (be->ops->describe) printf("- device: %s\n", be->ops->describe(be));
        if (be->ops->membw) {
            const char *what = "the backend's bandwidth";
            double one;
            be->ops->membw(be, &one, &what);
            printf("- ceiling: %s, %.1f GB/s (median of the %d measurements, %d right before each depth; best "
                   "%.1f); each depth's share uses those right before it\n",
                   what, bw_median, n_bw, MEMBW_PASSES, bw_best);
        } else {
            printf("- memory read bandwidth: %.2f GB/s (median of %d passes over %d MiB with %d thread%s, %d right "
                   "before each depth; best %.2f); each depth's share uses the passes right before it\n",
                   bw_median, n_bw, b.membw_mib, b.sp.n_threads, mu_plural_s(b.sp.n_threads), MEMBW_PASSES, bw_best);
            printf("- one parallel region (dispatch + barrier) costs %.2f us with %d thread%s; decode runs about %d "
                   "per token\n",
                   region_us, b.sp.n_threads, mu_plural_s(b.sp.n_threads), 5 * m->hp.n_layer + 1);
        }
        printf("- each depth is reached by filling the KV cache with random finite K/V (no prefill), then "
               "decoding 1 warm-up and %d timed tokens (median)\n\n",
               b.n_gen);
        printf("| depth | tok/s | ms/token | bytes/token | GB/s | %s | share |\n",
               be->ops->membw ? "ceiling" : "read bandwidth");
        printf("|---:|---:|---:|---:|---:|---:|---:|\n");
        for (int i = 0; i < b.n_depths; i++) {
            printf("| %ld", res[i].measured_depth);
            if (res[i].measured_depth != res[i].depth) printf(" (asked %ld)", res[i].depth);
            printf(" | %.2f | %.1f | %.3f GB | %.1f | %.1f | %.0f%% |\n", res[i].tok_s, res[i].ms, res[i].bytes / 1e9,
                   res[i].gb_s, res[i].membw, 100 * res[i].share);
        }
        if (b.pp > 0)
            printf("\nprefill: %d token%s at %.1f tok/s (median of %d)\n", b.pp, mu_plural_s(b.pp), pp_tok_s,
                   PREFILL_REPS);
        if (b.profile)
            for (int i = 0; i < b.n_depths; i++) print_profile(s, &res[i], b.n_gen);
        if (b.profile && b.pp > 0 && pp_prof_ms > 0) {
            printf("\n### Profile of the prefill (%d tokens in one chunk; %.1f ms with the timers on, %.1f tok/s)\n\n",
                   b.pp, pp_prof_ms, b.pp / (pp_prof_ms / 1e3));
            print_prof_table(s, pp_prof, 1, pp_prof_ms, "prefill");
        }
    }
    if (b.plot) {
        char title[256];
        snprintf(title, sizeof title, "muser decode, %s lane, %d thread%s",
                 b.sp.lane == MUSER_LANE_FAST ? "fast" : "exact", b.sp.n_threads, mu_plural_s(b.sp.n_threads));
        rc = plot(b.plot, res, b.n_depths, title);
    }
    muser_session_free(s);
    muser_model_free(model);
    return rc;
}
