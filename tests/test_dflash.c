/* test_dflash.c — the DFlash drafter: loading and its errors, the CPU
 * drafter's logits against the float64 reference (given fixed random
 * target features), the target's hidden-state capture, and tentative
 * positions (a rejected block leaves the KV planes, rings included, as
 * they were). The speculative loop itself: test_spec.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends.h"
#include "cpu/cpu_internal.h"
#include "cpu/ops.h"
#include "model/dflash.h"
#include "muser.h"
#include "quant/quant.h"
#include "ref/ref_draft.h"
#include "testlib.h"
#include "tinydraft.h"
#include "tinymodel.h"

static muser_model *target_model(const char *tag) {
    tm_opts o = tm_defaults();
    muser_model *m = tm_load(&o, tag);
    CHECK(m != NULL);
    return m;
}

/* Loads a drafter image; on success *buf_out keeps the image alive. */
static int load_drafter(const td_opts *o, const muser_model *target, mu_drafter **d, uint8_t **buf_out) {
    size_t size;
    uint8_t *buf = td_build(o, &size);
    gguf_file *f = NULL;
    int rc = gguf_open_memory(buf, size, "drafter.gguf", &f);
    if (!rc) rc = mu_drafter_from_gguf(f, target, d);
    if (rc) free(buf), buf = NULL;
    *buf_out = buf;
    return rc;
}

static void expect_error(const td_opts *o, const muser_model *target, const char *needle) {
    mu_drafter *d = NULL;
    uint8_t *buf = NULL;
    int rc = load_drafter(o, target, &d, &buf);
    CHECKF(rc != 0 && strstr(muser_last_error(), needle), "expected an error naming '%s', got rc %d: %s", needle, rc,
           muser_last_error());
    mu_drafter_free(d);
    free(buf);
}

static void test_loader(const muser_model *target) {
    td_opts o = td_defaults();
    mu_drafter *d = NULL;
    uint8_t *buf = NULL;
    CHECKF(load_drafter(&o, target, &d, &buf) == 0, "%s", muser_last_error());
    if (d) {
        CHECK(d->n_target_layers == 3 && d->target_layers[2] == 3 && d->block_size == 6 && d->mask_token == 49);
        CHECK(d->m.hp.n_layer == 2 && d->m.layers[0].is_swa && !d->m.layers[1].is_swa && d->m.hp.n_swa == 8);
        CHECK(d->m.hp.rope_type == MU_ROPE_NEOX && d->m.layers[1].use_rope);
        CHECK(d->m.tok_embd.data == target->tok_embd.data && d->m.output.data == target->output.data);
        muser_drafter_info info;
        muser_drafter_get_info(d, &info);
        CHECK(info.block_size == 6 && info.n_target_layers == 3 && info.target_layers[0] == 1);
    }
    mu_drafter_free(d);
    free(buf);

    o = td_defaults(), o.n_embd = 32, o.n_head = 2;
    expect_error(&o, target, "hidden size 32 differs from the target's 64");
    o = td_defaults(), o.target_layers[1] = 4;
    expect_error(&o, target, "dflash.target_layers[1] = 4 is out of range");
    o = td_defaults(), o.target_layers[0] = -1;
    expect_error(&o, target, "out of range");
    o = td_defaults(), o.omit_key = "dflash.target_layers";
    expect_error(&o, target, "'dflash.target_layers' is missing");
    o = td_defaults(), o.omit_key = "dflash.block_size"; /* llama.cpp's default: 16 */
    CHECK(load_drafter(&o, target, &d, &buf) == 0 && d->block_size == 16);
    mu_drafter_free(d), d = NULL;
    free(buf), buf = NULL;
    o = td_defaults(), o.omit_key = "tokenizer.ggml.mask_token_id";
    expect_error(&o, target, "'tokenizer.ggml.mask_token_id' is missing");
    o = td_defaults(), o.omit_key = "dflash.attention.layer_norm_rms_epsilon";
    expect_error(&o, target, "layer_norm_rms_epsilon' is missing");
    o = td_defaults(), o.omit_key = "dflash.attention.sliding_window_pattern";
    expect_error(&o, target, "sliding_window_pattern' (a bool array) is required");
    o = td_defaults(), o.mask_token = 50;
    expect_error(&o, target, "mask token 50 is outside");
    o = td_defaults(), o.block_size = 1;
    expect_error(&o, target, "block_size = 1 is out of range");
    o = td_defaults(), o.omit_tensor = "enc.output_norm.weight";
    expect_error(&o, target, "'enc.output_norm.weight' is missing");
    o = td_defaults(), o.omit_tensor = "fc.weight";
    expect_error(&o, target, "'fc.weight' is missing");
    o = td_defaults(), o.omit_tensor = "blk.1.attn_k_norm.weight";
    expect_error(&o, target, "'blk.1.attn_k_norm.weight' is missing");
    o = td_defaults(), o.extra_tensor = "markov_w1.weight";
    expect_error(&o, target, "DSpark");
    o = td_defaults(), o.extra_tensor = "hc_head_fn.weight";
    expect_error(&o, target, "DeepSeek-V4");
    o = td_defaults(), o.arch = "eagle3";
    expect_error(&o, target, "architecture 'eagle3' is not a drafter");

    /* the main loader refuses a drafter by name */
    o = td_defaults();
    size_t size;
    uint8_t *img = td_build(&o, &size);
    const char *path = tm_write_temp(img, size, "drafter-as-model");
    muser_model *m = NULL;
    CHECK(muser_model_load(path, &m) != 0 && strstr(muser_last_error(), "is a DFlash drafter"));
    remove(path);
    free(img);
}

/* Max |cpu - ref| over n rows of V, relative to the largest |ref| (>= 1). */
static double worst_rel(const float *cpu, const double *ref, size_t count) {
    double worst = 0, scale = 1;
    for (size_t i = 0; i < count; i++) scale = fmax(scale, fabs(ref[i]));
    for (size_t i = 0; i < count; i++) worst = fmax(worst, fabs((double)cpu[i] - ref[i]));
    return worst / scale;
}

/* The CPU drafter's block logits after P injected positions against the
 * reference, for a context longer than the sliding window (the ring wraps:
 * capacity window + n_batch - 1 = 15). */
static void test_drafter_vs_ref(const muser_model *target, muser_kv_type kv, const td_opts *o, double tol) {
    mu_drafter *d = NULL;
    uint8_t *buf = NULL;
    if (load_drafter(o, target, &d, &buf) != 0) {
        CHECKF(0, "%s", muser_last_error());
        return;
    }
    mu_session_config cfg = {.n_ctx = 128, .n_batch = 8, .n_threads = 2, .lane = MUSER_LANE_EXACT, .kv_type = kv};
    mu_backend *b = NULL;
    CHECKF(mu_cpu_drafter_new(d, &cfg, &b) == 0, "%s", muser_last_error());
    const int P = 21, n = 6, W = d->n_target_layers * d->m.hp.n_embd, V = d->m.hp.n_vocab;
    float *feat = malloc(sizeof(float) * (size_t)P * W);
    uint64_t rng = 99;
    for (int i = 0; i < P * W; i++) feat[i] = 2.0f * tl_rand_normal(&rng); /* hidden states are not unit-scaled */
    muser_token block[6] = {17, d->mask_token, d->mask_token, d->mask_token, d->mask_token, d->mask_token};
    float *logits = malloc(sizeof(float) * (size_t)n * V), *again = malloc(sizeof(float) * (size_t)n * V);
    double *ref = malloc(sizeof(double) * (size_t)n * V);
    CHECK(mu_ref_draft_logits(d, feat, P, block, n, ref) == 0);
    if (b) {
        CHECKF(b->ops->draft_inject(b, feat, P, 0) == 0, "%s", muser_last_error());
        CHECKF(b->ops->forward(b, block, n, P, true, logits) == 0, "%s", muser_last_error());
        const double w = worst_rel(logits, ref, (size_t)n * V);
        CHECKF(w <= tol, "kv %s, d2t %d: drafter logits vs float64 reference: max rel diff %.3g > %.3g",
               kv == MUSER_KV_F16 ? "f16" : "f32", o->d2t_rows, w, tol);
        /* the block's own K/V rows go: the same pass again gives the same logits */
        CHECK(b->ops->truncate(b, P) == 0);
        CHECK(b->ops->forward(b, block, n, P, true, again) == 0);
        CHECK(memcmp(logits, again, sizeof(float) * (size_t)n * V) == 0);
        b->ops->free(b);
    }
    free(feat), free(logits), free(again), free(ref);
    mu_drafter_free(d);
    free(buf);
}

/* The target's capture: the input of layer 0 is the normed embedding,
 * and a chunk's rows equal those of token-by-token feeds. */
static void test_capture(const muser_model *target) {
    mu_session_config cfg = {.n_ctx = 64, .n_batch = 16, .n_threads = 2, .lane = MUSER_LANE_EXACT,
                             .kv_type = MUSER_KV_F32};
    mu_backend *chunk = NULL, *single = NULL;
    CHECK(mu_cpu_backend_new(target, &cfg, &chunk) == 0 && mu_cpu_backend_new(target, &cfg, &single) == 0);
    if (!chunk || !single) return;
    const int layers[2] = {0, 2}, T = 12, E = target->hp.n_embd, V = target->hp.n_vocab;
    float *rows = malloc(sizeof(float) * (size_t)T * 2 * E), *one = malloc(sizeof(float) * 2 * (size_t)E);
    float *logits = malloc(sizeof(float) * (size_t)T * V), *emb = malloc(sizeof(float) * (size_t)E);
    muser_token toks[12];
    uint64_t rng = 5;
    for (int t = 0; t < T; t++) toks[t] = (muser_token)(tl_rand_u64(&rng) % (uint64_t)V);
    CHECK(chunk->ops->set_capture(chunk, layers, 2, rows) == 0);
    CHECK(single->ops->set_capture(single, layers, 2, one) == 0);
    CHECK(chunk->ops->forward(chunk, toks, T, 0, false, logits) == 0);
    double worst0 = 0, worst2 = 0;
    for (int t = 0; t < T; t++) {
        CHECK(single->ops->forward(single, &toks[t], 1, t, false, logits) == 0);
        mu_dequant_row(target->tok_embd.type, (const uint8_t *)target->tok_embd.data + (size_t)toks[t] * target->tok_embd.row_bytes,
                       emb, E);
        mu_rmsnorm(emb, NULL, emb, E, target->hp.rms_eps);
        for (int e = 0; e < E; e++) {
            worst0 = fmax(worst0, fabs(rows[((size_t)t * 2) * E + e] - emb[e]));
            worst2 = fmax(worst2, fabs(rows[((size_t)t * 2 + 1) * E + e] - one[E + e]));
        }
    }
    CHECKF(worst0 == 0, "layer 0 input vs the normed embedding: %.3g", worst0);
    CHECKF(worst2 < 1e-4, "layer 2 input, chunk vs one by one: %.3g", worst2);
    CHECK(chunk->ops->set_capture(chunk, layers, 0, NULL) == 0);
    const int bad = 9;
    CHECK(chunk->ops->set_capture(chunk, &bad, 1, rows) == MUSER_ERANGE);
    chunk->ops->free(chunk), single->ops->free(single);
    free(rows), free(one), free(logits), free(emb);
}

static bool planes_equal(const cpu_backend *a, const cpu_backend *b, bool rows) {
    for (int l = 0; l < a->m->hp.n_layer; l++) {
        const mu_kv_plane *p = &a->planes[l], *q = &b->planes[l];
        if (p->origin_logical != q->origin_logical || p->origin_physical != q->origin_physical || p->len != q->len)
            return false;
        if (!rows) continue;
        for (int64_t i = 0; i < p->len; i++) {
            const int64_t slot = (p->origin_physical + i) % p->capacity;
            const size_t off = (size_t)slot * a->kv_row_bytes;
            if (memcmp((uint8_t *)a->kcache[l] + off, (uint8_t *)b->kcache[l] + off, a->kv_row_bytes) ||
                memcmp((uint8_t *)a->vcache[l] + off, (uint8_t *)b->vcache[l] + off, a->kv_row_bytes))
                return false;
        }
    }
    return true;
}

/* A verify block taken back (keep 0) leaves the planes bit for bit as they
 * were, full rings included; keeping k leaves the bookkeeping of k appends
 * and the old rows the rejected appends overwrote back in place. */
static void test_tentative(const muser_model *target) {
    mu_session_config cfg = {.n_ctx = 100, .n_batch = 8, .n_threads = 2, .lane = MUSER_LANE_EXACT,
                             .kv_type = MUSER_KV_F16};
    mu_backend *a = NULL, *b = NULL, *c = NULL;
    CHECK(mu_cpu_backend_new(target, &cfg, &a) == 0 && mu_cpu_backend_new(target, &cfg, &b) == 0 &&
          mu_cpu_backend_new(target, &cfg, &c) == 0);
    if (!a || !b || !c) return;
    const int V = target->hp.n_vocab;
    float *logits = malloc(sizeof(float) * 8 * (size_t)V);
    uint64_t rng = 3;
    muser_token toks[40], block[7];
    for (int t = 0; t < 40; t++) toks[t] = (muser_token)(tl_rand_u64(&rng) % (uint64_t)V);
    for (int t = 0; t < 7; t++) block[t] = (muser_token)(tl_rand_u64(&rng) % (uint64_t)V);
    /* 30 positions: the rings (capacity 8 + 8 - 1 = 15) are full and wrapped */
    for (int t = 0; t < 30; t++) {
        CHECK(a->ops->forward(a, &toks[t], 1, t, false, logits) == 0);
        CHECK(b->ops->forward(b, &toks[t], 1, t, false, logits) == 0);
        CHECK(c->ops->forward(c, &toks[t], 1, t, false, logits) == 0);
    }
    for (int round = 0; round < 3; round++) {
        CHECK(b->ops->tentative_begin(b, 7) == 0);
        CHECK(b->ops->forward(b, block, 7, 30, true, logits) == 0);
        CHECK(!planes_equal((cpu_backend *)a, (cpu_backend *)b, true));
        CHECK(b->ops->tentative_keep(b, 0) == 0);
        CHECKF(planes_equal((cpu_backend *)a, (cpu_backend *)b, true), "round %d: keep 0 left a trace", round);
    }
    /* keep 3 of 7: the same bookkeeping as appending 3, old rows restored */
    CHECK(b->ops->tentative_begin(b, 7) == 0);
    CHECK(b->ops->forward(b, block, 7, 30, true, logits) == 0);
    CHECK(b->ops->tentative_keep(b, 3) == 0);
    CHECK(c->ops->forward(c, block, 3, 30, true, logits) == 0);
    CHECK(planes_equal((cpu_backend *)b, (cpu_backend *)c, false));
    bool old_rows = true;
    const cpu_backend *cb = (const cpu_backend *)c, *bb = (const cpu_backend *)b;
    for (int l = 0; l < target->hp.n_layer; l++) {
        const mu_kv_plane *p = &cb->planes[l];
        for (int64_t pos = p->origin_logical; pos < 30; pos++) {
            const size_t off = (size_t)mu_kv_physical(p, pos) * cb->kv_row_bytes;
            old_rows = old_rows && !memcmp((uint8_t *)cb->kcache[l] + off, (uint8_t *)bb->kcache[l] + off, cb->kv_row_bytes) &&
                       !memcmp((uint8_t *)cb->vcache[l] + off, (uint8_t *)bb->vcache[l] + off, cb->kv_row_bytes);
        }
    }
    CHECK(old_rows);
    CHECK(b->ops->tentative_keep(b, 1) != 0); /* nothing guarded any more */
    a->ops->free(a), b->ops->free(b), c->ops->free(c);
    free(logits);
}

int main(void) {
    muser_model *target = target_model("dflash-target");
    if (!target) return tl_finish("dflash");
    test_loader(target);
    td_opts o = td_defaults();
    test_drafter_vs_ref(target, MUSER_KV_F32, &o, 1e-4);
    test_drafter_vs_ref(target, MUSER_KV_F16, &o, 2e-2);
    o.own_head = true, o.d2t_rows = 20; /* a reduced draft vocabulary with its own head */
    test_drafter_vs_ref(target, MUSER_KV_F32, &o, 1e-4);
    o = td_defaults(), o.window = 0; /* no sliding window: every layer full */
    test_drafter_vs_ref(target, MUSER_KV_F32, &o, 1e-4);
    test_capture(target);
    test_tentative(target);
    muser_model_free(target);
    return tl_finish("dflash");
}
