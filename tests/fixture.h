/* fixture.h — parity fixtures for the tests (tests/fixture.c). */
#ifndef MU_TEST_FIXTURE_H
#define MU_TEST_FIXTURE_H

#include <stdbool.h>

#include "testlib.h"

/* A parity fixture: REL.gguf with the tokens.txt beside it, REL.exact.f32
 * (the float reference) and REL.decode.f32 (llama.cpp's default run),
 * each [n][V] little-endian f32. */
typedef struct muser_model muser_model;
typedef struct tl_fixture {
    muser_model *model;
    int *tokens;
    int n, V;
    float *exact, *llama;
} tl_fixture;
/* Loads REL from tests/data (local; MUSER_TEST_DATA overrides the folder)
 * or from the shared data dir. Prints a loud SKIPPED line and returns false
 * when a file is absent; CHECK-fails and returns false when one is bad. */
bool tl_fixture_load(const char *rel, bool local, tl_fixture *fx);
void tl_fixture_free(tl_fixture *fx);

typedef struct muser_session muser_session;
typedef struct muser_session_params muser_session_params;
/* A new session of m with sp; NULL (a failed check naming `what` and the
 * engine's error) when it cannot be made. */
muser_session *tl_session(muser_model *m, const muser_session_params *sp, const char *what);

/* Runs n tokens through the session, as one chunk (prefill) or one by one,
 * and returns every position's logits [n][V] (malloc'd). */
float *tl_run_logits(muser_session *s, const int *tokens, int n, int V, bool prefill);

/* One step of the batch-vs-one-by-one tests: n random tokens (into
 * tokens[n]) decoded as one batched step of `batch`, then fed one by one to
 * the twins in `single`, whose positions must agree. Returns the batched
 * step's status (CHECK-failed when not 0). */
int tl_batch_step(muser_session **batch, muser_session **single, int n, int V, uint64_t *rng, int32_t *tokens,
                  int step);

/* Greedy steps of twin sets of n sessions from the same tokens: `logits`
 * through muser_batch_decode and the host's mu_argmax of each row, `greedy`
 * through muser_batch_decode_greedy (whose sessions must advance alike); both
 * go on with the host's choices. Returns the rows
 * (of steps x n) whose choices differ, or -1 when a step failed. */
int tl_greedy_twins(muser_session **logits, muser_session **greedy, int n, int V, int steps, uint64_t *rng);

/* As tl_greedy_twins for muser_batch_decode_top: each row gets a random
 * bias (a repeated id among them) and its k top logits must be, value for
 * value, those a full sort of the host's biased logits puts first. */
int tl_top_twins(muser_session **logits, muser_session **top, int n, int V, int k, int steps, uint64_t *rng);
/* Whether vals/ids [k] (any order) are the first k of x in rank order
 * (order: tl_rank_order's), values to the bit with NaN as -inf. */
bool tl_same_top(const float *x, const int *order, const float *vals, const int32_t *ids, int k);

#endif
