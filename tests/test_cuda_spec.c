/* test_cuda_spec.c — speculative decoding with a DFlash drafter on CUDA
 * (docs/dflash.md), on the nano parity fixture as the target and a random
 * drafter of head_dim 128 built in memory (tinydraft, F32 weights):
 *
 *   capture: the CUDA target's captured layer inputs (a chunk, and one row)
 *     against the CPU backend's, exact lane, f32 KV;
 *   drafter: the CUDA drafter's block logits against the CPU drafter's
 *     given the same fixed random features, after injections past the
 *     sliding window (its ring wraps), after a block's rows were cut off
 *     and more injected, and after a restart (a truncate its ring cannot
 *     follow): exact lane + f32 KV (max |d| <= 1e-3 of the largest logit)
 *     and fast lane + f16 KV (<= 3e-2); the drafter borrows the target's
 *     embedding and head (one more reference, no upload of its own);
 *   rollback: tentative_begin, a verify chunk over a wrapped f16 ring,
 *     tentative_keep(k) for k = 0 and 3: the planes' bookkeeping is that of
 *     k appends and every held row, read back from the device, is bit for
 *     bit the row before the block (older positions) or the block's own;
 *   greedy identity: speculative greedy on CUDA (random drafter: nearly all
 *     drafts rejected over wrapped rings; and the hook proposing the
 *     target's own future tokens: every draft accepted) against plain CUDA
 *     greedy decoding (the decode graph), a 60-token prompt past the window
 *     of 32 and 80 tokens. A verify chunk sums in another order than the
 *     one-row graph, so a difference is accepted only at a near tie of the
 *     plain run (exact lane: margin < 2e-3; fast lane, f16 GEMMs against
 *     int8 matvecs: margin < 0.1, reported);
 *   tensor parallel (--gpus 1) refuses a drafter with a message;
 *   the rows' greedy choices on the device (forward_argmax: the drafter's
 *     guesses and a greedy verify block) equal mu_argmax of the same rows:
 *     ties inside and across the kernel's slices, NaN, -0 and +0, -inf,
 *     rows of 1 to 202048 values.
 *
 * Without a GPU (or nvcc at build time) it exits 77 (skipped). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "muser.h"
#include "testlib.h"

#ifdef MUSER_HAVE_CUDA
#include "backends.h"
#include "cuda/cuda_api.h"
#include "cuda/cuda_internal.h"
#include "engine/engine.h"
#include "engine/parity.h"
#include "gguf/gguf.h"
#include "model/dflash.h"
#include "tinydraft.h"

enum { N_PROMPT = 60, N_GEN = 80 };

static muser_token argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* A random drafter for the target m: head_dim 128 (the CUDA attention's),
 * the target's window, block 16, target layers spread over its layers. */
static mu_drafter *make_drafter(muser_model *m, uint8_t **img) {
    muser_model_info info;
    muser_model_get_info(m, &info);
    td_opts o = td_defaults();
    o.n_embd = info.n_embd, o.vocab = info.n_vocab, o.mask_token = info.n_vocab - 1;
    o.n_head = 2, o.n_head_kv = 1, o.head_dim = 128, o.n_ff = 256, o.window = info.sliding_window;
    o.ctx = info.n_ctx_train, o.block_size = 16;
    for (int k = 0; k < 3; k++) o.target_layers[k] = (k + 1) * (info.n_layer - 1) / 3;
    size_t size;
    *img = td_build(&o, &size);
    gguf_file *f = NULL;
    mu_drafter *d = NULL;
    CHECKF(*img && gguf_open_memory(*img, size, "cuda-spec-drafter", &f) == 0 && mu_drafter_from_gguf(f, m, &d) == 0,
           "drafter: %s", muser_last_error());
    return d;
}

static muser_session *target_session(muser_model *m, muser_backend kind, muser_lane lane, muser_kv_type kv,
                                     int n_ctx, int n_batch) {
    muser_session_params sp = muser_session_default_params();
    sp.backend = kind, sp.lane = lane, sp.kv_type = kv, sp.n_ctx = n_ctx, sp.n_batch = n_batch, sp.n_threads = 2;
    return tl_session(m, &sp, kind == MUSER_BACKEND_CUDA ? "cuda session" : "cpu session");
}

/* max |a - b| over n values, relative to max(1, max |b|) */
static double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0, scale = 1;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)b[i]));
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d / scale;
}

/* ---- capture ---------------------------------------------------------------------- */
static void test_capture(muser_model *m, const mu_drafter *d, const int *tokens) {
    const int E = d->m.hp.n_embd, nc = d->n_target_layers, T = 20;
    float *rows[2];
    for (int k = 0; k < 2; k++) {
        muser_session *s = target_session(m, k ? MUSER_BACKEND_CUDA : MUSER_BACKEND_CPU, MUSER_LANE_EXACT,
                                          MUSER_KV_F32, 256, 32);
        rows[k] = calloc((size_t)(T + 1) * nc * E, sizeof(float));
        if (!s) continue;
        mu_backend *b = mu_session_backend_of(s);
        float *l = malloc(sizeof(float) * 1000 * 64);
        CHECK(b->ops->set_capture(b, d->target_layers, nc, rows[k]) == 0);
        CHECK(b->ops->forward(b, tokens, T, 0, false, l) == 0);
        /* one row: the CUDA target takes the chunk path while capturing */
        CHECK(b->ops->set_capture(b, d->target_layers, nc, rows[k] + (size_t)T * nc * E) == 0);
        CHECK(b->ops->forward(b, tokens + T, 1, T, false, l) == 0);
        free(l);
        muser_session_free(s);
    }
    const double r = rel_diff(rows[1], rows[0], (size_t)(T + 1) * nc * E);
    printf("capture: %d layer inputs of %d + 1 rows, CUDA against the CPU: max rel %.3g\n", nc, T, r);
    CHECKF(r <= 1e-3, "capture differs from the CPU's by %.3g", r);
    free(rows[0]), free(rows[1]);
}

/* ---- the drafter's logits ------------------------------------------------------------ */
typedef struct drafter_pair {
    mu_backend *cpu, *cuda;
    const mu_drafter *d;
    int V;
} drafter_pair;

static void inject_both(drafter_pair *p, const float *feat, int n, int pos0) {
    CHECKF(p->cpu->ops->draft_inject(p->cpu, feat, n, pos0) == 0, "cpu inject: %s", muser_last_error());
    CHECKF(p->cuda->ops->draft_inject(p->cuda, feat, n, pos0) == 0, "cuda inject: %s", muser_last_error());
}

/* One block at P on both; the worst relative difference of its logits. */
static double block_both(drafter_pair *p, muser_token last, int n, int P, int *top1_agree) {
    muser_token block[16];
    block[0] = last;
    for (int i = 1; i < n; i++) block[i] = p->d->mask_token;
    float *a = malloc(sizeof(float) * (size_t)n * p->V), *b = malloc(sizeof(float) * (size_t)n * p->V);
    CHECKF(p->cpu->ops->forward(p->cpu, block, n, P, true, a) == 0, "cpu block: %s", muser_last_error());
    CHECKF(p->cuda->ops->forward(p->cuda, block, n, P, true, b) == 0, "cuda block: %s", muser_last_error());
    CHECK(p->cpu->ops->truncate(p->cpu, P) == 0 && p->cuda->ops->truncate(p->cuda, P) == 0);
    *top1_agree = 0;
    for (int i = 0; i < n; i++) *top1_agree += argmax(a + (size_t)i * p->V, p->V) == argmax(b + (size_t)i * p->V, p->V);
    const double r = rel_diff(b, a, (size_t)n * p->V);
    free(a), free(b);
    return r;
}

static void test_drafter(muser_model *m, const mu_drafter *d, muser_lane lane, muser_kv_type kv, double tol) {
    const char *name = lane == MUSER_LANE_FAST ? "fast lane, f16 KV" : "exact lane, f32 KV";
    muser_session *ts = target_session(m, MUSER_BACKEND_CUDA, lane, kv, 256, 16);
    if (!ts) return;
    const mu_session_config cfg = *mu_session_config_of(ts);
    const int refs = mu_cuda_weight_refs((const mu_model *)m, 0);
    drafter_pair p = {NULL, NULL, d, d->m.hp.n_vocab};
    mu_session_config ccfg = cfg;
    ccfg.n_threads = 2;
    ccfg.lane = MUSER_LANE_EXACT; /* the CPU side: the reference */
    CHECKF(mu_cpu_drafter_new(d, &ccfg, &p.cpu) == 0, "cpu drafter: %s", muser_last_error());
    CHECKF(mu_cuda_drafter_new(d, &cfg, mu_session_backend_of(ts), &p.cuda) == 0, "cuda drafter: %s",
           muser_last_error());
    if (p.cpu && p.cuda) {
        CHECKF(mu_cuda_weight_refs((const mu_model *)m, 0) == refs + 1,
               "the drafter should hold one more reference on the target's weights (%d -> %d)", refs,
               mu_cuda_weight_refs((const mu_model *)m, 0));
        const int W = d->n_target_layers * d->m.hp.n_embd, P = 70;
        float *feat = malloc(sizeof(float) * (size_t)(P + 8) * W);
        uint64_t rng = 77;
        for (size_t i = 0; i < (size_t)(P + 8) * W; i++) feat[i] = (float)(tl_rand_u64(&rng) % 2001) / 1000.0f - 1.0f;
        /* past the window (32): the sliding ring (32 + 16 - 1 rows) wraps */
        for (int done = 0; done < P; done += 23) inject_both(&p, feat + (size_t)done * W, P - done < 23 ? P - done : 23, done);
        int agree;
        double r = block_both(&p, 5, 16, P, &agree);
        printf("drafter %s: 16-row block after %d injected: max rel %.3g, top-1 %d/16\n", name, P, r, agree);
        CHECKF(r <= tol, "drafter %s: block logits differ from the CPU's by %.3g", name, r);
        /* the block's rows were cut off; 5 more positions, a 4-row block */
        inject_both(&p, feat + (size_t)P * W, 5, P);
        r = block_both(&p, 17, 4, P + 5, &agree);
        printf("drafter %s: 4-row block after cutting a block off and 5 more: max rel %.3g, top-1 %d/4\n", name, r,
               agree);
        CHECKF(r <= tol, "drafter %s: second block differs by %.3g", name, r);
        /* a rewind the ring cannot follow: both restart empty at 10 */
        CHECK(p.cpu->ops->truncate(p.cpu, 10) == 0 && p.cuda->ops->truncate(p.cuda, 10) == 0);
        inject_both(&p, feat, 3, 10);
        r = block_both(&p, 9, 8, 13, &agree);
        printf("drafter %s: after a restart at 10: max rel %.3g, top-1 %d/8\n", name, r, agree);
        CHECKF(r <= tol, "drafter %s: after a restart, differs by %.3g", name, r);
        free(feat);
    }
    if (p.cuda) p.cuda->ops->free(p.cuda);
    if (p.cpu) p.cpu->ops->free(p.cpu);
    CHECK(mu_cuda_weight_refs((const mu_model *)m, 0) == refs);
    muser_session_free(ts);
}

/* ---- rollback ----------------------------------------------------------------------- */
/* Every plane's K and V, whole capacity, from the device: [L][2][capacity rows]. */
static uint8_t *read_planes(cuda_backend *b) {
    const size_t row = (size_t)b->KVD * b->kv_elem;
    size_t total = 0;
    for (int l = 0; l < b->m->hp.n_layer; l++) total += 2 * (size_t)b->planes[l].capacity * row;
    uint8_t *out = malloc(total), *p = out;
    for (int l = 0; l < b->m->hp.n_layer; l++) {
        const size_t bytes = (size_t)b->planes[l].capacity * row;
        CHECK(cudaMemcpy(p, b->kc[l], bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
        CHECK(cudaMemcpy(p + bytes, b->vc[l], bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
        p += 2 * bytes;
    }
    return out;
}

static void test_rollback(muser_model *m, const int *tokens) {
    for (int keep = 0; keep <= 3; keep += 3) {
        muser_session *s = target_session(m, MUSER_BACKEND_CUDA, MUSER_LANE_FAST, MUSER_KV_F16, 256, 8);
        if (!s) return;
        cuda_backend *b = cuda_backend_of(mu_session_backend_of(s));
        CHECK(b != NULL);
        if (!b) return;
        const int P = 50, n = 8, L = b->m->hp.n_layer;
        CHECK(muser_session_feed(s, tokens, P, false) == 0); /* past the window of 32: rings wrapped */
        mu_kv_plane *saved = malloc(sizeof(mu_kv_plane) * (size_t)L);
        memcpy(saved, b->planes, sizeof(mu_kv_plane) * (size_t)L);
        uint8_t *before = read_planes(b);
        float *l = malloc(sizeof(float) * (size_t)n * 1000);
        CHECK(b->base.ops->tentative_begin(&b->base, n) == 0);
        CHECK(b->base.ops->forward(&b->base, tokens + P, n, P, true, l) == 0);
        uint8_t *block = read_planes(b);
        CHECK(b->base.ops->tentative_keep(&b->base, keep) == 0);
        uint8_t *after = read_planes(b);
        const size_t row = (size_t)b->KVD * b->kv_elem;
        int bad_rows = 0, bad_planes = 0, rings = 0;
        size_t off = 0;
        for (int li = 0; li < L; li++) {
            mu_kv_plane want = saved[li];
            for (int i = 0; i < keep; i++) mu_kv_append(&want);
            bad_planes += memcmp(&want, &b->planes[li], sizeof want) != 0;
            rings += want.ring;
            const size_t bytes = (size_t)want.capacity * row;
            for (int64_t pos = want.origin_logical; pos < want.origin_logical + want.len; pos++) {
                const int64_t slot = mu_kv_physical(&want, pos);
                const uint8_t *ref = pos < P ? before : block;
                for (int kv = 0; kv < 2; kv++) {
                    const size_t o = off + (size_t)kv * bytes + (size_t)slot * row;
                    bad_rows += memcmp(after + o, ref + o, row) != 0;
                }
            }
            off += 2 * bytes;
        }
        CHECKF(bad_planes == 0 && bad_rows == 0, "keep %d of %d: %d planes' bookkeeping and %d rows differ", keep, n,
               bad_planes, bad_rows);
        printf("rollback: keep %d of a %d-row verify chunk over %d wrapped rings: planes bit-identical\n", keep, n,
               rings);
        free(saved), free(before), free(block), free(after), free(l);
        muser_session_free(s);
    }
}

/* ---- greedy identity ---------------------------------------------------------------- */
typedef struct oracle {
    const muser_token *seq;
    int len;
} oracle;

/* (a near tie flipped by the chunk path shows in the final comparison,
 * which allows it, not here) */
static int propose_future(void *ctx, int pos, muser_token last, int n, muser_token *drafts) {
    oracle *o = ctx;
    (void)last;
    for (int i = 0; i < n; i++) drafts[i] = pos + 1 + i < o->len ? o->seq[pos + 1 + i] : 0;
    return 0;
}

static void test_greedy(muser_model *m, const mu_drafter *d, const int *prompt, muser_lane lane, muser_kv_type kv) {
    const char *name = lane == MUSER_LANE_FAST ? "fast lane, f16 KV" : "exact lane, f32 KV";
    const double near_tie = lane == MUSER_LANE_FAST ? 0.1 : 2e-3;
    const int total = N_PROMPT + N_GEN, V = d->m.hp.n_vocab;
    muser_token seq[N_PROMPT + N_GEN];
    float margin[N_PROMPT + N_GEN];
    memcpy(seq, prompt, sizeof(muser_token) * N_PROMPT);
    muser_session *s = target_session(m, MUSER_BACKEND_CUDA, lane, kv, total + 32, 32);
    if (!s) return;
    CHECK(muser_session_feed(s, seq, N_PROMPT, false) == 0);
    for (int i = N_PROMPT; i < total; i++) { /* plain: one row at a time through the decode graph */
        const float *l = muser_session_logits(s);
        seq[i] = argmax(l, V);
        float second = -INFINITY;
        for (int v = 0; v < V; v++)
            if (v != seq[i] && l[v] > second) second = l[v];
        margin[i] = l[seq[i]] - second;
        if (i + 1 < total) CHECK(muser_session_feed(s, &seq[i], 1, false) == 0);
    }
    muser_session_free(s);
    const int batches[] = {16, 32}, dmax[] = {3, 0};
    for (int c = 0; c < 3; c++) {
        const bool hook = c == 2;
        s = target_session(m, MUSER_BACKEND_CUDA, lane, kv, total + 32, hook ? 16 : batches[c]);
        if (!s) return;
        CHECKF(muser_session_set_drafter(s, d, hook ? 7 : dmax[c]) == 0, "set_drafter: %s", muser_last_error());
        oracle orc = {seq, total};
        if (hook) mu_session_set_draft_override(s, propose_future, &orc);
        CHECK(muser_session_feed(s, seq, N_PROMPT, false) == 0);
        muser_token out[N_GEN];
        int n = 0;
        out[n++] = argmax(muser_session_logits(s), V);
        while (n < N_GEN) {
            int got = 0;
            const int rc = muser_session_spec_step(s, out[n - 1], NULL, N_GEN - n, out + n, &got);
            CHECKF(rc == 0, "spec step: %s", muser_last_error());
            if (rc) break;
            n += got;
        }
        int first_diff = -1;
        for (int i = 0; i < n && first_diff < 0; i++)
            if (out[i] != seq[N_PROMPT + i]) first_diff = i;
        muser_spec_stats st;
        muser_session_spec_stats(s, &st);
        const double mg = first_diff < 0 ? 0.0 : (double)margin[N_PROMPT + first_diff];
        printf("greedy %s, %s, batch %d: %llu steps, %llu drafted, %llu accepted; %s (margin %.3g)\n", name,
               hook ? "own future tokens" : "random drafter", hook ? 16 : batches[c], (unsigned long long)st.steps,
               (unsigned long long)st.drafted, (unsigned long long)st.accepted,
               first_diff < 0 ? "identical to plain" : "differs at a near tie", mg);
        CHECKF(n == N_GEN && (first_diff < 0 || mg < near_tie),
               "greedy %s, %s: speculative differs from plain at token %d (margin %.3g)", name,
               hook ? "own future tokens" : "random drafter", first_diff, mg);
        if (hook && first_diff < 0) CHECK(st.accepted == st.drafted && st.drafted > 0);
        muser_session_free(s);
    }
}

/* Tensor parallel (--gpus 1: the NCCL path over one GPU) refuses a drafter
 * by name; skipped where NCCL cannot be loaded. */
static void test_tp_refuses(muser_model *m, const mu_drafter *d) {
    muser_session_params sp = muser_session_default_params();
    sp.backend = MUSER_BACKEND_CUDA, sp.gpus = 1, sp.n_ctx = 256;
    muser_session *s = NULL;
    if (muser_session_new(m, &sp, &s) != 0) {
        printf("tensor parallel: no session (%s): refusal not checked\n", muser_last_error());
        return;
    }
    const int rc = muser_session_set_drafter(s, d, 0);
    CHECKF(rc == MUSER_EUNSUPPORTED && strstr(muser_last_error(), "cannot verify drafts"),
           "tensor parallel with a drafter: rc %d, %s", rc, muser_last_error());
    printf("tensor parallel refuses a drafter: %s\n", muser_last_error());
    muser_session_free(s);
}

/* ---- the rows' greedy choices on the device ------------------------------------------ */
static void test_rows_argmax(void) {
    static const int64_t widths[] = {1, 5, 16, 17, 50, 1000, 20011, 202048};
    enum { T = 16 };
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        const int64_t n = widths[w];
        float *x = malloc(sizeof(float) * (size_t)(T * n));
        uint64_t rng = 0xA11CEull + (uint64_t)n;
        for (int64_t i = 0; i < T * n; i++) x[i] = (float)(tl_rand_u64(&rng) % 4001) * 1e-3f - 2.0f;
        for (int t = 0; t < T; t++) {
            float *r = x + t * n;
            const int64_t a = (int64_t)(tl_rand_u64(&rng) % (uint64_t)n), c = n - 1 - a;
            switch (t) {
            case 1: r[a] = 3.0f, r[c] = 3.0f; break;          /* a tie, often across slices: the lower */
            case 2: r[0] = NAN, r[a] = 3.0f; break;           /* a NaN at 0 stays */
            case 3: for (int64_t i = 0; i < n; i++) r[i] = NAN; break;
            case 4: for (int64_t i = 0; i < n; i++) r[i] = -INFINITY; break;
            case 5: for (int64_t i = 0; i < n; i++) r[i] = -1.0f;
                r[c] = 0.0f, r[a] = -0.0f; break;           /* -0 == +0: the lower */
            case 6: r[a] = NAN, r[c] = 2.5f; break;           /* NaN elsewhere never wins */
            case 7: r[n - 1] = 9.0f; break;                   /* the last value */
            case 8: r[a] = INFINITY; break;
            default: break;
            }
        }
        float *dx = NULL;
        void *part = NULL;
        int32_t *dids = NULL, ids[T];
        CHECK(cudaMalloc((void **)&dx, sizeof(float) * (size_t)(T * n)) == cudaSuccess);
        CHECK(cudaMalloc(&part, sizeof(unsigned long long) * MU_CU_ARGMAX_SPLITS * T) == cudaSuccess);
        CHECK(cudaMalloc((void **)&dids, sizeof ids) == cudaSuccess);
        if (dx && part && dids) {
            CHECK(cudaMemcpy(dx, x, sizeof(float) * (size_t)(T * n), cudaMemcpyHostToDevice) == cudaSuccess);
            CHECK(mu_cu_rows_argmax(dx, n, T, part, dids, 0) == cudaSuccess);
            CHECK(cudaMemcpy(ids, dids, sizeof ids, cudaMemcpyDeviceToHost) == cudaSuccess);
            for (int t = 0; t < T; t++)
                CHECKF(ids[t] == mu_argmax(x + t * n, (int)n), "rows of %lld, row %d: device %d, mu_argmax %d",
                       (long long)n, t, ids[t], mu_argmax(x + t * n, (int)n));
        }
        cudaFree(dx), cudaFree(part), cudaFree(dids);
        free(x);
    }
}

static void test_fixture(const char *rel, bool local) {
    tl_fixture fx;
    if (!tl_fixture_load(rel, local, &fx)) return;
    uint8_t *img = NULL;
    mu_drafter *d = make_drafter(fx.model, &img);
    CHECK(fx.n >= N_PROMPT + 9);
    if (d && fx.n >= N_PROMPT + 9) {
        printf("%s:\n", rel);
        test_capture(fx.model, d, fx.tokens);
        test_drafter(fx.model, d, MUSER_LANE_EXACT, MUSER_KV_F32, 1e-3);
        test_drafter(fx.model, d, MUSER_LANE_FAST, MUSER_KV_F16, 3e-2);
        test_rollback(fx.model, fx.tokens);
        test_greedy(fx.model, d, fx.tokens, MUSER_LANE_EXACT, MUSER_KV_F32);
        test_greedy(fx.model, d, fx.tokens, MUSER_LANE_FAST, MUSER_KV_F16);
        test_tp_refuses(fx.model, d);
    }
    mu_drafter_free(d);
    free(img);
    tl_fixture_free(&fx);
}

int main(void) {
    if (mu_cuda_probe() != 0) {
        char why[600];
        snprintf(why, sizeof why, "no usable GPU: %s", muser_last_error());
        tl_skip(why);
    }
    test_rows_argmax();
    test_fixture("fixtures/nano/nano-Q4_K_M", true);
    test_fixture("fixtures/nano/nano-Q8_0", true);
    return tl_finish("cuda_spec");
}

#else
int main(void) { tl_skip("this build has no CUDA backend (nvcc was not found at build time)"); }
#endif
