/* bench.h — `muser bench`'s pieces shared by its modes: the depth ladder
 * (cmd_bench.c) and the batch-width ladder, --parallel (bench_parallel.c). */
#ifndef MU_BENCH_H
#define MU_BENCH_H

#include <stdbool.h>
#include <stddef.h>

#include "cpu/membw.h"
#include "muser.h"
#include "tools/args.h"

#define MU_BENCH_MEMBW_PASSES 5 /* bandwidth passes right before each measurement */
#define MU_BENCH_MAX_WIDTHS 16
#define MU_BENCH_WIDTH_MAX 256

/* Fails (1, message printed) when the file cannot fit in memory. */
int mu_bench_check_memory(const char *path);
/* MemTotal and MemAvailable in bytes (0 when unknown). */
void mu_bench_memory_info(uint64_t *total, uint64_t *avail);
void mu_bench_cpu_name(char *out, size_t cap);
/* MU_BENCH_MEMBW_PASSES measurements of the ceiling into bw: the backend's
 * own (a GPU's copy bandwidth) when it has one, else the host's read
 * bandwidth through probe. */
int mu_bench_measure_ceiling(muser_session *s, mu_membw_probe *probe, double *bw);

/* --parallel: B sessions decoding together, one row each per step. */
typedef struct mu_bench_parallel {
    const char *model_path;
    muser_session_params sp;
    int widths[MU_BENCH_MAX_WIDTHS], n_widths;
    const long *depths;
    int n_depths;
    int n_gen;  /* timed steps per width and round */
    int rounds; /* the widths run in turn this many times */
    int membw_mib;
    bool json;
} mu_bench_parallel;

/* Parses the value of --parallel: comma-separated widths, 1 to
 * MU_BENCH_WIDTH_MAX each. */
bool mu_bench_parse_widths(mu_args *a, int *out, int cap, int *n);
/* Runs the ladder and prints it (Markdown, or one JSON object with a
 * "parallel" array). Returns the exit status. */
int mu_bench_parallel_run(const mu_bench_parallel *p);

/* --draft: speculative decoding with a DFlash drafter (bench_spec.c). */
typedef struct mu_bench_spec {
    const char *model_path, *draft_path;
    muser_session_params sp;
    int draft_max;      /* 0: the drafter's block size - 1 */
    const long *depths;
    int n_depths;
    int n_gen;          /* timed steps per depth                      */
    int observe;        /* tokens of the observed greedy generation   */
} mu_bench_spec;
/* Times the plain and the speculative step at each depth, prints tok/s at
 * each accepted length and the accepted length observed. Exit status. */
int mu_bench_spec_run(const mu_bench_spec *p);

#endif
