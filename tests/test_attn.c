/* test_attn.c — the CPU prefill attention's tiles (cpu_attn.c): a chunk's
 * tokens share each converted K/V block, yet every token's output must be
 * bit for bit what it gets alone. For chunks of 1, 3, 16, 17 and 33 tokens
 * at depths that wrap the sliding-window rings several times, F16 and F32
 * planes, one and two threads, each layer's attention output (random
 * queries) is compared with:
 *   - each token as a one-token decode step at its position (one thread:
 *     split-K over a single worker folds the same blocks in the same order
 *     and its merge is exact), causal;
 *   - the same chunk in tiles of one token (the per-token computation),
 *     causal and bidirectional (a drafter's block);
 * with the tile chosen per chunk and fixed to 2, 3, 5 and 16 tokens. */
#include <stdlib.h>
#include <string.h>

#include "backends.h"
#include "cpu/cpu_internal.h"
#include "fixture.h"
#include "muser.h"
#include "testlib.h"
#include "tinymodel.h"

enum { N_BATCH = 40 };

static const int chunk_sizes[] = {1, 3, 16, 17, 33};
static const int tiles[] = {0, 2, 3, 5, 16}; /* 0: chosen per chunk */

static uint64_t rng = 2026;

/* b's planes and cache rows made those of src (same model and config). */
static void copy_planes(cpu_backend *b, const cpu_backend *src) {
    for (int l = 0; l < b->m->hp.n_layer; l++) {
        b->planes[l] = src->planes[l];
        const size_t bytes = (size_t)src->planes[l].capacity * src->kv_row_bytes;
        memcpy(b->kcache[l], src->kcache[l], bytes);
        memcpy(b->vcache[l], src->vcache[l], bytes);
    }
}

/* Chunk [pos0, pos0 + T) of every layer of one (already fed) and two
 * (its copy) threads; returns the number of mismatching outputs. */
static int check_chunk(cpu_backend *one, cpu_backend *two, int T, int pos0, bool bidirectional, const char *tag) {
    const mu_hparams *hp = &one->m->hp;
    const int64_t Q = (int64_t)hp->n_head * hp->head_dim;
    float *q = malloc(sizeof(float) * (size_t)(T * Q)), *want = malloc(sizeof(float) * (size_t)(T * Q)),
          *got = malloc(sizeof(float) * (size_t)(T * Q));
    int bad = 0;
    copy_planes(two, one);
    for (int l = 0; l < hp->n_layer; l++) {
        for (int64_t i = 0; i < T * Q; i++) q[i] = tl_rand_normal(&rng) * 2.0f;
        one->bidirectional = two->bidirectional = bidirectional;
        if (bidirectional) {
            one->attn_tile = 1;
            CHECK(mu_cpu_attention(one, l, T, pos0, q, want) == 0);
        } else {
            for (int t = 0; t < T; t++) CHECK(mu_cpu_attention(one, l, 1, pos0 + t, q + t * Q, want + t * Q) == 0);
            if (T > 1) { /* tiles of one: the per-token computation */
                one->attn_tile = 1;
                CHECK(mu_cpu_attention(one, l, T, pos0, q, got) == 0);
                CHECKF(memcmp(got, want, sizeof(float) * (size_t)(T * Q)) == 0,
                       "%s layer %d, %d tokens at %d: tiles of one differ from decode", tag, l, T, pos0);
            }
        }
        if (T == 1) continue; /* one token decodes */
        for (size_t ti = 0; ti < sizeof tiles / sizeof tiles[0]; ti++)
            for (int th = 0; th < 2; th++) {
                cpu_backend *b = th ? two : one;
                b->attn_tile = tiles[ti];
                memset(got, 0xff, sizeof(float) * (size_t)(T * Q));
                CHECK(mu_cpu_attention(b, l, T, pos0, q, got) == 0);
                int tok_bad = 0;
                for (int t = 0; t < T; t++) tok_bad += memcmp(got + t * Q, want + t * Q, sizeof(float) * (size_t)Q) != 0;
                CHECKF(tok_bad == 0, "%s layer %d, %d tokens at %d%s, tile %d, %d thread(s): %d tokens differ", tag, l,
                       T, pos0, bidirectional ? " (bidirectional)" : "", tiles[ti], th + 1, tok_bad);
                bad += tok_bad;
            }
        one->attn_tile = two->attn_tile = 0;
    }
    one->bidirectional = two->bidirectional = false;
    free(q), free(want), free(got);
    return bad;
}

static void test_model(const muser_model *m, int n_ctx, const char *name) {
    const int V = m->hp.n_vocab;
    for (int kv = 0; kv < 2; kv++) {
        mu_session_config cfg = {.n_ctx = n_ctx, .n_batch = N_BATCH, .n_threads = 1, .lane = MUSER_LANE_EXACT,
                                 .kv_type = kv ? MUSER_KV_F32 : MUSER_KV_F16};
        mu_backend *a = NULL, *c = NULL;
        CHECK(mu_cpu_backend_new(m, &cfg, &a) == 0);
        cfg.n_threads = 2;
        CHECK(mu_cpu_backend_new(m, &cfg, &c) == 0);
        if (!a || !c) return;
        float *logits = malloc(sizeof(float) * (size_t)V);
        muser_token toks[N_BATCH];
        int pos = 0, chunks = 0, bad = 0;
        for (int i = 0; pos + chunk_sizes[i % 5] <= n_ctx; i++) {
            const int T = chunk_sizes[i % 5];
            for (int t = 0; t < T; t++) toks[t] = (muser_token)(tl_rand_u64(&rng) % (uint64_t)V);
            CHECK(a->ops->forward(a, toks, T, pos, false, logits) == 0);
            char tag[96];
            snprintf(tag, sizeof tag, "%s kv %s", name, kv ? "f32" : "f16");
            bad += check_chunk((cpu_backend *)a, (cpu_backend *)c, T, pos, false, tag);
            bad += check_chunk((cpu_backend *)a, (cpu_backend *)c, T, pos, true, tag);
            pos += T, chunks++;
        }
        printf("  %-22s kv %s: %d chunks up to position %d, %d layers: %s\n", name, kv ? "f32" : "f16", chunks, pos,
               m->hp.n_layer, bad ? "MISMATCH" : "every token bit-identical");
        a->ops->free(a), c->ops->free(c);
        free(logits);
    }
}

int main(void) {
    /* window 8, two KV heads of head_dim 16, context 128 */
    tm_opts o = tm_defaults();
    muser_model *tiny = tm_load(&o, "attn-tiny");
    CHECK(tiny != NULL);
    if (tiny) test_model(tiny, 128, "tiny (window 8)");
    muser_model_free(tiny);
    /* the nano fixture: window 32, one KV head of head_dim 128 */
    tl_fixture fx;
    if (tl_fixture_load("fixtures/nano/nano-Q8_0", true, &fx)) {
        test_model(fx.model, 300, "nano (window 32)");
        tl_fixture_free(&fx);
    }
    return tl_finish("attn");
}
