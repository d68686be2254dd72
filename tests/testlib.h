/* testlib.h — a minimal test harness: CHECK macros that count, a summary
 * line "N passed, M failed", and helpers for test data and random inputs. */
#ifndef MU_TESTLIB_H
#define MU_TESTLIB_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

extern int tl_passed, tl_failed;

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (cond) {                                                                     \
            tl_passed++;                                                                \
        } else {                                                                        \
            tl_failed++;                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);    \
        }                                                                               \
    } while (0)

#define CHECKF(cond, ...)                                                               \
    do {                                                                                \
        if (cond) {                                                                     \
            tl_passed++;                                                                \
        } else {                                                                        \
            tl_failed++;                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                               \
            fputc('\n', stderr);                                                        \
        }                                                                               \
    } while (0)

#define CHECK_NEAR(a, b, tol) \
    CHECKF(fabs((double)(a) - (double)(b)) <= (tol), "%.9g vs %.9g (tol %.3g)", (double)(a), (double)(b), (double)(tol))

/* Prints the summary and returns the process exit code. */
int tl_finish(const char *name);

/* Path of a file in tests/data (static buffer, one at a time per call site). */
const char *tl_test_data(const char *rel, char *buf, size_t cap);
/* Path under the shared data dir (MUSER_DATA_DIR, else the build's
 * default); NULL if the file is missing. */
const char *tl_shared(const char *rel, char *buf, size_t cap);
/* Prints a loud SKIPPED line and exits 77. */
void tl_skip(const char *why) __attribute__((noreturn));

/* Deterministic random numbers for tests (splitmix64). */
uint64_t tl_rand_u64(uint64_t *state);
float tl_rand_uniform(uint64_t *state);  /* [0,1) */
float tl_rand_normal(uint64_t *state);   /* N(0,1) */
/* order[0..n) = the ids 0..n-1 of x ranked as the samplers rank logits:
 * by value (NaN as -inf), then lower id. */
void tl_rank_order(const float *x, int n, int *order);

/* Reads a whole file (malloc'd); NULL on failure. */
void *tl_read_file(const char *path, size_t *size);
/* Reads a fixture's tokens.txt (integers separated by anything else);
 * malloc'd, count in *n; NULL on failure. */
int *tl_read_tokens(const char *path, int *n);


#endif
