/* fixture.c — parity fixtures (model, tokens, references) and running
 * tokens through a session, for the CPU, CUDA and tensor-parallel parity
 * tests. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/parity.h"
#include "fixture.h"
#include "muser.h"

bool tl_fixture_load(const char *rel, bool local, tl_fixture *fx) {
    memset(fx, 0, sizeof *fx);
    const char *sfx[4] = {".gguf", "/tokens.txt", ".exact.f32", ".decode.f32"};
    char paths[4][600];
    for (int i = 0; i < 4; i++) {
        char r[400];
        if (i == 1) snprintf(r, sizeof r, "%.*s%s", (int)(strrchr(rel, '/') - rel), rel, sfx[i]);
        else snprintf(r, sizeof r, "%s%s", rel, sfx[i]);
        const char *p = local ? tl_test_data(r, paths[i], sizeof paths[i]) : tl_shared(r, paths[i], sizeof paths[i]);
        if (!p || access(p, R_OK) != 0) {
            printf("\n**************** SKIPPED: %s (fixture file %s not found; set MUSER_TEST_DATA / MUSER_DATA_DIR) "
                   "****************\n\n",
                   rel, r);
            return false;
        }
    }
    CHECKF(muser_model_load(paths[0], &fx->model) == 0, "%s: %s", paths[0], muser_last_error());
    if (!fx->model) return false;
    muser_model_info info;
    muser_model_get_info(fx->model, &info);
    fx->V = info.n_vocab;
    fx->tokens = tl_read_tokens(paths[1], &fx->n);
    size_t es = 0, ds = 0;
    fx->exact = tl_read_file(paths[2], &es);
    fx->llama = tl_read_file(paths[3], &ds);
    const bool ok = fx->tokens && fx->n > 0 && fx->exact && fx->llama && es == (size_t)fx->n * fx->V * 4 && ds == es;
    CHECKF(ok, "%s: tokens and references disagree in size", rel);
    if (!ok) tl_fixture_free(fx);
    return ok;
}

void tl_fixture_free(tl_fixture *fx) {
    muser_model_free(fx->model);
    free(fx->tokens);
    free(fx->exact);
    free(fx->llama);
    memset(fx, 0, sizeof *fx);
}

int tl_batch_step(muser_session **batch, muser_session **single, int n, int V, uint64_t *rng, int32_t *tokens,
                  int step) {
    for (int i = 0; i < n; i++) tokens[i] = (muser_token)(tl_rand_u64(rng) % (uint64_t)V);
    const int rc = muser_batch_decode(batch, tokens, n);
    CHECKF(rc == 0, "step %d: %s", step, muser_last_error());
    if (rc) return rc;
    for (int i = 0; i < n; i++) {
        CHECK(muser_session_feed(single[i], &tokens[i], 1, false) == 0);
        CHECK(muser_session_pos(batch[i]) == muser_session_pos(single[i]));
    }
    return 0;
}

int tl_greedy_twins(muser_session **logits, muser_session **greedy, int n, int V, int steps, uint64_t *rng) {
    muser_token tokens[64], host[64], chosen[64];
    if (n < 1 || n > 64) return -1;
    for (int i = 0; i < n; i++) tokens[i] = (muser_token)(tl_rand_u64(rng) % (uint64_t)V);
    int differ = 0;
    for (int step = 0; step < steps; step++) {
        int rc = muser_batch_decode(logits, tokens, n);
        CHECKF(rc == 0, "greedy twins, step %d (logits): %s", step, muser_last_error());
        if (rc) return -1;
        rc = muser_batch_decode_greedy(greedy, tokens, n, chosen);
        CHECKF(rc == 0, "greedy twins, step %d (greedy): %s", step, muser_last_error());
        if (rc) return -1;
        for (int i = 0; i < n; i++) {
            host[i] = mu_argmax(muser_session_logits(logits[i]), V);
            differ += host[i] != chosen[i];
            CHECK(muser_session_pos(greedy[i]) == muser_session_pos(logits[i]));
            CHECK(muser_session_tokens(greedy[i])[muser_session_pos(greedy[i]) - 1] == tokens[i]);
        }
        memcpy(tokens, host, sizeof(muser_token) * (size_t)n);
    }
    return differ;
}

bool tl_same_top(const float *x, const int *order, const float *vals, const muser_token *ids, int k) {
    for (int j = 0; j < k; j++) { /* every one of the first k, its value to the bit (NaN as -inf) */
        const float want = isnan(x[order[j]]) ? -INFINITY : x[order[j]];
        int q = 0;
        while (q < k && ids[q] != order[j]) q++;
        if (q == k || memcmp(&vals[q], &want, sizeof(float)) != 0) return false;
    }
    return true;
}

int tl_top_twins(muser_session **logits, muser_session **top, int n, int V, int k, int steps, uint64_t *rng) {
    enum { NB = 4 };
    if (n < 1 || n > 64 || k < 1 || k > MUSER_TOP_MAX) return -1;
    muser_token tokens[64], chosen[64], bias_ids[64][NB];
    float bias_v[64][NB];
    muser_logit_bias bias[64];
    float *vals = malloc(sizeof(float) * (size_t)n * k), *biased = malloc(sizeof(float) * (size_t)V);
    muser_token *ids = malloc(sizeof(muser_token) * (size_t)n * k);
    int *order = malloc(sizeof(int) * (size_t)V), differ = 0;
    if (!vals || !biased || !ids || !order) return -1;
    for (int i = 0; i < n; i++) tokens[i] = (muser_token)(tl_rand_u64(rng) % (uint64_t)V);
    for (int step = 0; step < steps && differ >= 0; step++) {
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < NB; j++) {
                bias_ids[i][j] = (muser_token)(tl_rand_u64(rng) % (uint64_t)V);
                bias_v[i][j] = (float)(tl_rand_u64(rng) % 41) - 20.0f;
            }
            bias_ids[i][NB - 1] = bias_ids[i][0]; /* one id biased twice */
            bias[i] = (muser_logit_bias){bias_ids[i], bias_v[i], step % 3 == 2 ? 0 : NB};
        }
        int rc = muser_batch_decode(logits, tokens, n);
        CHECKF(rc == 0, "top twins, step %d (logits): %s", step, muser_last_error());
        if (!rc) rc = muser_batch_decode_top(top, tokens, n, bias, k, vals, ids);
        CHECKF(rc == 0, "top twins, step %d (top): %s", step, muser_last_error());
        if (rc) differ = -1;
        for (int i = 0; i < n && differ >= 0; i++) {
            memcpy(biased, muser_session_logits(logits[i]), sizeof(float) * (size_t)V);
            for (int j = 0; j < bias[i].n; j++) biased[bias[i].ids[j]] += bias[i].values[j];
            tl_rank_order(biased, V, order);
            differ += !tl_same_top(biased, order, vals + (size_t)i * k, ids + (size_t)i * k, k);
            chosen[i] = order[0];
            CHECK(muser_session_pos(top[i]) == muser_session_pos(logits[i]));
        }
        memcpy(tokens, chosen, sizeof(muser_token) * (size_t)n);
    }
    free(vals), free(biased), free(ids), free(order);
    return differ;
}

muser_session *tl_session(muser_model *m, const muser_session_params *sp, const char *what) {
    muser_session *s = NULL;
    if (muser_session_new(m, sp, &s) != 0) {
        CHECKF(0, "%s: %s", what, muser_last_error());
        return NULL;
    }
    return s;
}

float *tl_run_logits(muser_session *s, const int *tokens, int n, int V, bool prefill) {
    float *out = malloc(sizeof(float) * (size_t)n * V);
    if (!out) return NULL;
    if (prefill) {
        CHECK(muser_session_feed(s, tokens, n, true) == 0);
        for (int i = 0; i < n; i++) memcpy(out + (size_t)i * V, muser_session_logits_at(s, i), sizeof(float) * V);
    } else {
        for (int i = 0; i < n; i++) {
            CHECK(muser_session_feed(s, tokens + i, 1, false) == 0);
            memcpy(out + (size_t)i * V, muser_session_logits(s), sizeof(float) * V);
        }
    }
    return out;
}
