/* test_model.c — architecture binding: llama.cpp's defaults, the sliding
 * window pattern in both encodings, clear errors for missing keys, bad
 * shapes and unsupported types; session-level bad input (token ids out of
 * range, context overflow) leaving the session unchanged; the CPU engine
 * against the float64 reference on small random models of both arches. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/parity.h"
#include "model/model.h"
#include "muser.h"
#include "quant/quant.h"
#include "testlib.h"
#include "tinymodel.h"

/* Binds a model built from opts; returns the status, fills m on success. */
static int bind(const tm_opts *o, gguf_file **f, mu_model *m, uint8_t **buf) {
    size_t size;
    *buf = tm_build(o, &size);
    int rc = gguf_open_memory(*buf, size, "tiny", f);
    if (rc) return rc;
    rc = mu_model_bind(*f, m);
    return rc;
}

static void release(gguf_file *f, mu_model *m, uint8_t *buf, int rc) {
    if (rc == 0) mu_model_unbind(m);
    gguf_close(f);
    free(buf);
}

static void expect_error(tm_opts o, int status, const char *needle) {
    gguf_file *f = NULL;
    mu_model m;
    uint8_t *buf;
    int rc = bind(&o, &f, &m, &buf);
    CHECKF(rc == status, "expected status %d, got %d (%s)", status, rc, muser_last_error());
    CHECKF(strstr(muser_last_error(), needle) != NULL, "message '%s' lacks '%s'", muser_last_error(), needle);
    release(f, &m, buf, rc);
}

static void test_defaults_and_pattern(void) {
    tm_opts o = tm_defaults();
    gguf_file *f;
    mu_model m;
    uint8_t *buf;
    int rc = bind(&o, &f, &m, &buf);
    CHECKF(rc == 0, "%s", muser_last_error());
    if (!rc) {
        CHECK(m.hp.softcap == 20.0f && m.hp.n_swa == 8 && m.hp.head_dim == 16 && m.hp.n_rot == 16);
        CHECK(m.hp.post_norm_eps == 1e-8f && m.hp.embd_norm && m.hp.attn_gate);
        for (int l = 0; l < 4; l++) CHECK(m.layers[l].is_swa == (l % 4 != 3) && m.layers[l].use_rope == m.layers[l].is_swa);
        CHECK(m.hp.n_vocab == 50);
    }
    release(f, &m, buf, rc);

    o.softcap = -1; /* absent: llama.cpp's default is 30, not off */
    rc = bind(&o, &f, &m, &buf);
    CHECK(rc == 0 && m.hp.softcap == 30.0f);
    release(f, &m, buf, rc);

    o = tm_defaults();
    o.n_layer = 8;
    o.pattern = 4; /* scalar period */
    rc = bind(&o, &f, &m, &buf);
    CHECK(rc == 0);
    if (!rc)
        for (int l = 0; l < 8; l++) CHECK(m.layers[l].is_swa == (l % 4 < 3));
    release(f, &m, buf, rc);

    o.pattern = 2;
    rc = bind(&o, &f, &m, &buf);
    if (!rc)
        for (int l = 0; l < 8; l++) CHECK(m.layers[l].is_swa == (l % 2 == 0));
    release(f, &m, buf, rc);

    o.pattern = -1; /* absent: every layer full attention, loudly warned */
    rc = bind(&o, &f, &m, &buf);
    CHECK(rc == 0);
    if (!rc)
        for (int l = 0; l < 8; l++) CHECK(!m.layers[l].is_swa && !m.layers[l].use_rope);
    release(f, &m, buf, rc);

    o = tm_defaults();
    o.pattern = -2;
    expect_error(o, MUSER_EFORMAT, "sliding_window_pattern");

    o = tm_defaults();
    o.rope_base_swa = 1234.0f;
    rc = bind(&o, &f, &m, &buf);
    CHECK(rc == 0 && m.layers[0].rope_base == 1234.0f);
    release(f, &m, buf, rc);
}

static void test_errors(void) {
    const char *required[] = {"context_length", "embedding_length", "block_count", "attention.head_count",
                              "attention.layer_norm_rms_epsilon", "attention.sliding_window", "logit_scale",
                              "feed_forward_length"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        tm_opts o = tm_defaults();
        o.omit_key = required[i];
        expect_error(o, MUSER_EFORMAT, required[i]);
    }
    tm_opts o = tm_defaults();
    o.bad_shape = "attn_q.weight";
    expect_error(o, MUSER_EFORMAT, "blk.0.attn_q.weight");
    o.bad_shape = "post_ffw_norm.weight";
    expect_error(o, MUSER_EFORMAT, "post_ffw_norm");
    o.bad_shape = "output.weight";
    expect_error(o, MUSER_EFORMAT, "output.weight");
    o = tm_defaults();
    o.omit_tensor = "blk.2.attn_gate.weight";
    expect_error(o, MUSER_EFORMAT, "blk.2.attn_gate.weight");
    o = tm_defaults();
    o.arch = "gpt-j";
    expect_error(o, MUSER_EUNSUPPORTED, "unknown architecture 'gpt-j'");
    o = tm_defaults();
    o.n_head_kv = 3;
    expect_error(o, MUSER_EFORMAT, "multiple");
    o = tm_defaults();
    o.omit_key = "attention.key_length"; /* default n_embd/n_head = 16 here: still fine */
    {
        gguf_file *f;
        mu_model m;
        uint8_t *buf;
        int rc = bind(&o, &f, &m, &buf);
        CHECK(rc == 0);
        release(f, &m, buf, rc);
    }
    o = tm_defaults();
    o.head_dim = 8; /* tensors use 8; key says 8; n_embd/n_head = 16 irrelevant */
    {
        gguf_file *f;
        mu_model m;
        uint8_t *buf;
        int rc = bind(&o, &f, &m, &buf);
        CHECKF(rc == 0, "%s", muser_last_error());
        release(f, &m, buf, rc);
    }
}

/* An IQ2_XXS tensor is valid GGUF but not computable: clear error naming it. */
static void test_unsupported_type(void) {
    tm_opts o = tm_defaults();
    o.n_embd = 256, o.n_ff = 256, o.head_dim = 64;
    o.weight_type = MU_TYPE_Q4_K;
    gguf_file *f;
    mu_model m;
    uint8_t *buf;
    int rc = bind(&o, &f, &m, &buf);
    CHECKF(rc == 0, "%s", muser_last_error());
    release(f, &m, buf, rc);
    /* Patch the first 2-D tensor's type id in the image to IQ2_XXS (same block
     * geometry in elements, different bytes: the reader then fails on size
     * or the model on type; both must be clear). */
    size_t size;
    buf = tm_build(&o, &size);
    rc = gguf_open_memory(buf, size, "tiny", &f);
    CHECK(rc == 0);
    uint64_t at = f->tensors[0].info_offset + 8 + strlen(f->tensors[0].name) + 4 + 8 * f->tensors[0].n_dims;
    gguf_close(f);
    uint32_t iq = MU_TYPE_IQ2_XXS; /* 256 elems per block, 66 bytes: smaller than Q4_K, stays in the file */
    memcpy(buf + at, &iq, 4);
    rc = gguf_open_memory(buf, size, "tiny", &f);
    CHECKF(rc == 0, "%s", muser_last_error());
    if (!rc) {
        rc = mu_model_bind(f, &m);
        CHECK(rc == MUSER_EUNSUPPORTED);
        CHECK(strstr(muser_last_error(), "token_embd.weight") && strstr(muser_last_error(), "IQ2_XXS"));
        if (!rc) mu_model_unbind(&m);
    }
    gguf_close(f);
    free(buf);
}

/* CPU engine vs float64 reference on random tiny models, and bad input. */
static void engine_vs_ref(tm_opts o, const char *tag) {
    size_t size;
    uint8_t *buf = tm_build(&o, &size);
    const char *path = tm_write_temp(buf, size, tag);
    free(buf);
    muser_model *m = NULL;
    int rc = muser_model_load(path, &m);
    CHECKF(rc == 0, "%s", muser_last_error());
    if (rc) return;
    const int n = 40, V = o.vocab;
    muser_token toks[40];
    uint64_t rng = 99;
    for (int i = 0; i < n; i++) toks[i] = (muser_token)(tl_rand_u64(&rng) % (uint64_t)V);
    float *ref = malloc(sizeof(float) * n * V), *ours = malloc(sizeof(float) * n * V);
    for (int pass = 0; pass < 2; pass++) {
        muser_session_params sp = muser_session_default_params();
        sp.backend = pass ? MUSER_BACKEND_CPU : MUSER_BACKEND_REF;
        sp.kv_type = MUSER_KV_F32;
        sp.n_ctx = 64;
        sp.n_batch = 5; /* ragged chunks, rings of window + 4 */
        sp.n_threads = 2;
        muser_session *s = NULL;
        CHECK(muser_session_new(m, &sp, &s) == 0);
        CHECK(muser_session_feed(s, toks, n, true) == 0);
        for (int i = 0; i < n; i++) memcpy((pass ? ours : ref) + i * V, muser_session_logits_at(s, i), sizeof(float) * V);
        if (pass) {
            /* Bad input leaves the session unchanged. */
            muser_token bad[2] = {1, V};
            CHECK(muser_session_feed(s, bad, 2, false) == MUSER_ERANGE);
            CHECK(strstr(muser_last_error(), "outside the vocabulary") != NULL);
            muser_token neg = -1;
            CHECK(muser_session_feed(s, &neg, 1, false) == MUSER_ERANGE);
            CHECK(muser_session_pos(s) == n);
            muser_token many[25] = {0};
            CHECK(muser_session_feed(s, many, 25, false) == MUSER_ECONTEXT);
            CHECK(strstr(muser_last_error(), "context") != NULL);
            CHECK(muser_session_pos(s) == n);
            CHECK(muser_session_feed(s, many, 24, false) == 0); /* exactly fills the context */
            CHECK(muser_session_feed(s, many, 1, false) == MUSER_ECONTEXT);
        }
        muser_session_free(s);
    }
    mu_parity r;
    mu_parity_compare(ref, ours, n, V, &r);
    printf("  %-12s cpu vs float64: max %.3g rms %.3g top1 %.3f\n", tag, r.max_abs, r.rms, r.top1);
    CHECKF(r.max_abs <= 2e-4 && r.rms <= 2e-5, "%s: max %.3g rms %.3g", tag, r.max_abs, r.rms);
    free(ref);
    free(ours);
    muser_model_free(m);
    unlink(path);
}

/* Prompt caching: a prompt that extends an earlier one reuses the session;
 * when the sliding rings have moved on, a ring checkpoint avoids a full
 * re-prefill; the logits equal a fresh session's bit for bit. */
static void test_sync_and_checkpoints(void) {
    tm_opts o = tm_defaults();
    muser_model *m = tm_load(&o, "ckpt");
    CHECK(m != NULL);
    muser_session_params sp = muser_session_default_params();
    sp.backend = MUSER_BACKEND_CPU;
    sp.n_ctx = 64, sp.n_batch = 5, sp.n_threads = 1; /* rings of 8 + 4 rows */
    muser_token a[45];
    uint64_t rng = 3;
    for (int i = 0; i < 45; i++) a[i] = (muser_token)(tl_rand_u64(&rng) % 50);
    muser_session *s = NULL, *fresh = NULL;
    CHECK(muser_session_new(m, &sp, &s) == 0 && muser_session_new(m, &sp, &fresh) == 0);
    muser_session_set_checkpoints(s, 2);
    int reused = -1;
    CHECK(muser_session_sync(s, a, 30, &reused) == 0 && reused == 0);
    CHECK(muser_session_feed(s, a + 30, 10, false) == 0); /* "generation" moves the rings on */
    /* A new prompt sharing 30 tokens: the rings no longer hold position 23. */
    muser_token b[35];
    memcpy(b, a, sizeof(muser_token) * 30);
    for (int i = 30; i < 35; i++) b[i] = (muser_token)((a[i] + 7) % 50);
    CHECK(muser_session_sync(s, b, 35, &reused) == 0);
    CHECKF(reused == 30, "reused %d tokens, want 30 (checkpoint)", reused);
    CHECK(muser_session_sync(fresh, b, 35, NULL) == 0);
    CHECK(memcmp(muser_session_logits(s), muser_session_logits(fresh), sizeof(float) * 50) == 0);
    /* Extending the current timeline reuses everything. */
    CHECK(muser_session_sync(s, a, 30, &reused) == 0); /* back to A: its checkpoint, logits included */
    CHECK(reused == 30);
    CHECK(muser_session_sync(fresh, a, 30, NULL) == 0);
    CHECK(memcmp(muser_session_logits(s), muser_session_logits(fresh), sizeof(float) * 50) == 0);
    muser_token c[31];
    memcpy(c, a, sizeof(muser_token) * 30);
    c[30] = 5;
    CHECK(muser_session_sync(s, c, 31, &reused) == 0 && reused == 30);
    CHECK(muser_session_sync(fresh, c, 31, NULL) == 0);
    CHECK(memcmp(muser_session_logits(s), muser_session_logits(fresh), sizeof(float) * 50) == 0);
    /* Without checkpoints the same rewind falls back to a full re-prefill. */
    muser_session_set_checkpoints(s, 0);
    CHECK(muser_session_feed(s, a + 31, 12, false) == 0);
    CHECK(muser_session_sync(s, b, 35, &reused) == 0 && reused == 0);
    CHECK(muser_session_sync(fresh, b, 35, NULL) == 0);
    CHECK(memcmp(muser_session_logits(s), muser_session_logits(fresh), sizeof(float) * 50) == 0);
    /* A blob that is cut short or belongs to another session is refused
     * before anything changes. */
    mu_backend *be = mu_session_backend_of(s);
    void *blob = NULL;
    size_t bsize = 0;
    CHECK(be->ops->checkpoint_save(be, &blob, &bsize) == 0 && blob && bsize > 64);
    if (blob) {
        const int pos = 35;
        CHECK(be->ops->checkpoint_restore(be, blob, bsize - 1, pos) == MUSER_EINVAL);
        CHECK(be->ops->checkpoint_restore(be, blob, 20, pos) == MUSER_EINVAL);
        ((uint8_t *)blob)[0] ^= 1;
        CHECK(be->ops->checkpoint_restore(be, blob, bsize, pos) == MUSER_EINVAL);
        ((uint8_t *)blob)[0] ^= 1;
        CHECK(be->ops->checkpoint_restore(be, blob, bsize, pos) == 0);
        free(blob);
    }
    muser_session_free(s);
    muser_session_free(fresh);
    muser_model_free(m);
}

int main(void) {
    test_sync_and_checkpoints();
    test_defaults_and_pattern();
    test_errors();
    test_unsupported_type();
    engine_vs_ref(tm_defaults(), "muse-glimmer");
    tm_opts o = tm_defaults();
    o.arch = "llama";
    o.tied_output = true;
    engine_vs_ref(o, "llama");
    o = tm_defaults();
    o.n_embd = 256, o.n_ff = 512, o.head_dim = 64, o.vocab = 64;
    o.weight_type = MU_TYPE_Q4_K;
    engine_vs_ref(o, "mg-q4k");
    o.weight_type = MU_TYPE_Q6_K;
    engine_vs_ref(o, "mg-q6k");
    o.weight_type = MU_TYPE_Q5_K;
    engine_vs_ref(o, "mg-q5k");
    o.weight_type = MU_TYPE_Q8_0;
    engine_vs_ref(o, "mg-q8_0");
    o.weight_type = MU_TYPE_Q4_0;
    engine_vs_ref(o, "mg-q4_0");
    o.weight_type = MU_TYPE_F16;
    engine_vs_ref(o, "mg-f16");
    o.weight_type = MU_TYPE_BF16;
    engine_vs_ref(o, "mg-bf16");
    /* the exact-only formats */
    static const struct { uint32_t type; const char *tag; } exact_only[] = {
        {MU_TYPE_Q4_1, "mg-q4_1"}, {MU_TYPE_Q5_0, "mg-q5_0"},     {MU_TYPE_Q5_1, "mg-q5_1"},     {MU_TYPE_Q2_K, "mg-q2_k"},
        {MU_TYPE_Q3_K, "mg-q3_k"}, {MU_TYPE_IQ4_NL, "mg-iq4_nl"}, {MU_TYPE_IQ4_XS, "mg-iq4_xs"},
    };
    for (size_t i = 0; i < sizeof exact_only / sizeof exact_only[0]; i++) {
        o.weight_type = exact_only[i].type;
        engine_vs_ref(o, exact_only[i].tag);
    }
    return tl_finish("model");
}
