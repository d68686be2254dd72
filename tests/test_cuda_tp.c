/* test_cuda_tp.c — tensor parallel (--gpus N) against the single-GPU
 * backend on a fixture: the same tokens decoded by both, logits within the
 * core thresholds: in the exact lane max |d| <= 5e-4, RMS <= 5e-5 and the
 * same decisive top-1, against the one-GPU run and the fixture's float
 * reference; in the fast lane a mean KL against the float reference no
 * larger than llama.cpp's. The device's greedy choice is the largest logit;
 * a prompt fed as one chunk (decoded token by token on the ranks) meets the
 * same bounds. Both ways of summing the ranks' partial outputs are held to
 * them: the all-reduces fused into the residual/norm tails (the default
 * where the GPUs reach each other's memory; required when CUDA reports peer
 * access between GPUs 0 and 1) and NCCL's all-reduce (tuning tp_fused=0).
 *
 *   test_cuda_tp N    (N = 1: the NCCL path over a communicator of size 1;
 *                      N = 2, 4: that many GPUs, skipped loudly (77) with
 *                      fewer; a model whose heads do not split N ways (the
 *                      fixture over 4) must be refused with that reason)
 *
 * Without a GPU, or in a build without NCCL, it prints a loud SKIPPED line
 * and exits 77. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "muser.h"
#include "fixture.h"
#include "testlib.h"
#include "tinymodel.h"

#if defined(MUSER_HAVE_CUDA) && defined(MUSER_HAVE_NCCL)
#include <cuda_runtime_api.h>

#include "cuda/cuda_api.h"
#include "engine/engine.h"
#include "engine/parity.h"
#include "engine/tp.h"
#include "util/error.h"

/* A CUDA session over gpus GPUs (0: the single-GPU backend). */
static muser_session *new_session(muser_model *m, int gpus, muser_lane lane, muser_kv_type kv) {
    muser_session_params sp = muser_session_default_params();
    sp.backend = MUSER_BACKEND_CUDA;
    sp.lane = lane;
    sp.kv_type = kv;
    sp.n_ctx = 256;
    sp.n_batch = 64;
    sp.gpus = gpus;
    char what[32];
    snprintf(what, sizeof what, "session (--gpus %d)", gpus);
    return tl_session(m, &sp, what);
}

/* Whether the model's heads and blocks allow a split over gpus GPUs (the
 * plan the sessions use); when they do not, a session must refuse with
 * that reason, a clear error. */
static bool splits(muser_model *m, int gpus, const char *name) {
    mu_tp_shard sh[MU_TP_MAX_RANKS];
    if (mu_tp_plan(m, gpus, sh) == 0) return true;
    char why[300];
    snprintf(why, sizeof why, "%s", muser_last_error());
    muser_session_params sp = muser_session_default_params();
    sp.backend = MUSER_BACKEND_CUDA;
    sp.gpus = gpus;
    sp.n_ctx = 64;
    muser_session *s = NULL;
    const int rc = muser_session_new(m, &sp, &s);
    CHECKF(rc != 0 && strstr(muser_last_error(), why), "%s over %d GPUs: a session should refuse (%s), got: %s", name,
           gpus, why, rc ? muser_last_error() : "a session");
    if (s) muser_session_free(s);
    printf("  %s cannot be split over %d GPUs (%s): refused with that error; its parity SKIPPED\n", name, gpus, why);
    return false;
}

/* Whether a tensor-parallel session sums in its tails (its description). */
static bool session_fused(muser_session *s) {
    mu_backend *be = mu_session_backend_of(s);
    const char *d = be && be->ops->describe ? be->ops->describe(be) : "";
    return strstr(d, "fused into the residual/norm tails") != NULL;
}

/* The mode asked for (tp_fused) is the mode a session over gpus GPUs
 * runs, where the GPUs can reach each other's memory; one GPU never fuses
 * (nothing to reduce). */
static void check_mode(muser_model *m, int gpus, bool fused) {
    int peer = 0;
    if (gpus > 1) cudaDeviceCanAccessPeer(&peer, 0, 1);
    muser_session_params sp = muser_session_default_params();
    sp.backend = MUSER_BACKEND_CUDA;
    sp.gpus = gpus;
    sp.n_ctx = 64;
    char what[32];
    snprintf(what, sizeof what, "session (--gpus %d)", gpus);
    muser_session *s = tl_session(m, &sp, what);
    if (!s) return;
    mu_backend *be = mu_session_backend_of(s);
    printf("  %s\n", be->ops->describe(be));
    const bool got = session_fused(s);
    if (fused && peer) CHECKF(got, "GPUs 0 and 1 reach each other's memory, yet the tails are not fused");
    if (!fused) CHECKF(!got, "tp_fused=0, yet the tails are fused");
    if (gpus == 1) CHECKF(!got, "one GPU, yet the tails are fused");
    if (fused && !peer && gpus > 1) printf("  (no peer access between GPUs 0 and 1: NCCL's all-reduce runs)\n");
    muser_session_free(s);
}

/* Logits of n tokens decoded one by one, and each step's device choice. */
static float *decode_all(muser_model *m, int gpus, muser_lane lane, muser_kv_type kv, const int *tokens, int n, int V,
                         muser_token *chosen) {
    muser_session *s = new_session(m, gpus, lane, kv);
    if (!s) return NULL;
    float *out = malloc(sizeof(float) * (size_t)n * V);
    for (int i = 0; i < n; i++) {
        const int rc = mu_session_decode_select(s, tokens[i], 0.0f, 0, true, &chosen[i]);
        CHECKF(rc == 0, "decode step %d (--gpus %d): %s", i, gpus, muser_last_error());
        if (rc != 0) {
            free(out);
            out = NULL;
            break;
        }
        memcpy(out + (size_t)i * V, muser_session_logits(s), sizeof(float) * V);
    }
    muser_session_free(s);
    return out;
}

/* The same tokens fed as one chunk with every position's logits. */
static float *feed_all(muser_model *m, int gpus, muser_lane lane, muser_kv_type kv, const int *tokens, int n, int V) {
    muser_session *s = new_session(m, gpus, lane, kv);
    if (!s) return NULL;
    float *out = malloc(sizeof(float) * (size_t)n * V);
    const int rc = muser_session_feed(s, (const muser_token *)tokens, n, true);
    CHECKF(rc == 0, "feeding %d tokens (--gpus %d): %s", n, gpus, muser_last_error());
    if (rc != 0) {
        free(out);
        muser_session_free(s);
        return NULL;
    }
    for (int i = 0; i < n; i++) memcpy(out + (size_t)i * V, muser_session_logits_at(s, i), sizeof(float) * V);
    muser_session_free(s);
    return out;
}

/* The core thresholds (exact lane): max |d| <= 5e-4, RMS <= 5e-5, decisive top-1. */
static void check_exact(const char *what, const float *ref, const float *got, int n, int V) {
    mu_parity r;
    mu_parity_compare(ref, got, n, V, &r);
    printf("  %-44s max %.3g rms %.3g meanKL %.3g decisive %.3f\n", what, r.max_abs, r.rms, r.mean_kl, r.top1_decisive);
    CHECKF(r.max_abs <= 5e-4, "%s: max |delta| %.3g > 5e-4", what, r.max_abs);
    CHECKF(r.rms <= 5e-5, "%s: rms %.3g > 5e-5", what, r.rms);
    CHECKF(r.top1_decisive == 1.0, "%s: decisive top-1 %.4f", what, r.top1_decisive);
}

/* The fast lane's bound: against the float reference, a mean KL no larger
 * than llama.cpp's own, and the same decisive top-1. (Split and unsplit
 * fast lanes round different partial sums to int8, so they are compared
 * through the reference, not bit for bit.) */
static void check_fast(const char *what, const float *ref, const float *llama, const float *got, int n, int V) {
    mu_parity r, l;
    mu_parity_compare(ref, got, n, V, &r);
    mu_parity_compare(ref, llama, n, V, &l);
    printf("  %-44s max %.3g rms %.3g meanKL %.3g (llama.cpp %.3g) decisive %.3f\n", what, r.max_abs, r.rms, r.mean_kl,
           l.mean_kl, r.top1_decisive);
    CHECKF(r.mean_kl <= l.mean_kl, "%s: mean KL %.3g > llama.cpp's %.3g", what, r.mean_kl, l.mean_kl);
    CHECKF(r.top1_decisive == 1.0, "%s: decisive top-1 %.4f", what, r.top1_decisive);
}

/* The device's greedy choice is the largest of the logits it returned. */
static void check_choices(const char *what, const float *logits, const muser_token *chosen, int n, int V) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * V;
        float best = x[0];
        for (int v = 1; v < V; v++) best = x[v] > best ? x[v] : best;
        bad += chosen[i] < 0 || chosen[i] >= V || x[chosen[i]] != best;
    }
    CHECKF(bad == 0, "%s: the device's choice is not the largest logit at %d of %d steps", what, bad, n);
}

/* An FFN wide enough that one GPU splits each down row into parts (the
 * single-GPU down launch sums several partial rows in its tail) while a
 * rank's down launch writes whole rows, and 2 heads per GPU (a rank's
 * output projection: one 256-element block per row, packed 16 rows to a
 * batch; two KV heads over 4 GPUs: each shared by two ranks): a prompt fed
 * as one chunk, then decoded steps, split vs one GPU in the exact lane at
 * the core bounds. */
static void wide_ffn(int gpus) {
    tm_opts o = tm_defaults();
    o.n_embd = 256, o.n_head = gpus > 2 ? 2 * gpus : 4, o.n_head_kv = 2, o.head_dim = 128, o.n_ff = 17408, o.n_layer = 2;
    o.window = 16, o.ctx = 256, o.vocab = 300;
    o.weight_type = 12; /* Q4_K */
    size_t size = 0;
    uint8_t *buf = tm_build(&o, &size);
    const char *path = tm_write_temp(buf, size, "tp-wide");
    free(buf);
    muser_model *m = NULL;
    CHECKF(muser_model_load(path, &m) == 0, "%s", muser_last_error());
    if (!m) return;
    CHECKF(splits(m, gpus, "the wide-FFN model"), "the wide-FFN model should split over %d GPUs", gpus);
    muser_session *one = new_session(m, 0, MUSER_LANE_EXACT, MUSER_KV_F32);
    muser_session *tp = new_session(m, gpus, MUSER_LANE_EXACT, MUSER_KV_F32);
    uint64_t rng = 99;
    muser_token toks[32];
    for (int i = 0; i < 32; i++) toks[i] = (muser_token)(tl_rand_u64(&rng) % (uint64_t)o.vocab);
    double worst = 0;
    if (one && tp) {
        CHECKF(muser_session_feed(one, toks, 12, false) == 0, "one GPU, 12-token chunk: %s", muser_last_error());
        CHECKF(muser_session_feed(tp, toks, 12, false) == 0, "%d GPUs, 12-token chunk: %s", gpus, muser_last_error());
        for (int i = 12; i < 32; i++) {
            CHECKF(muser_session_feed(one, &toks[i], 1, false) == 0, "one GPU, step %d: %s", i, muser_last_error());
            CHECKF(muser_session_feed(tp, &toks[i], 1, false) == 0, "%d GPUs, step %d: %s", gpus, i, muser_last_error());
            const float *a = muser_session_logits(one), *b = muser_session_logits(tp);
            for (int v = 0; v < o.vocab; v++) worst = fmax(worst, fabs((double)a[v] - (double)b[v]));
        }
        printf("  wide FFN (n_ff %d, %d heads, Q4_K), chunk then 20 decoded steps, %s: split vs one GPU max |d| %.3g\n",
               o.n_ff, o.n_head, session_fused(tp) ? "fused all-reduce" : "NCCL all-reduce", worst);
        CHECKF(worst <= 5e-4, "wide FFN: split vs one GPU max |d| %.3g > 5e-4", worst);
    }
    muser_session_free(one);
    muser_session_free(tp);
    muser_model_free(m);
    unlink(path);
}

/* The fixture's tokens over gpus GPUs against one GPU and the references,
 * in both lanes, with the ranks' sums fused into the tails or by NCCL;
 * route: decode attention as by default (spans this short run in one
 * launch of a block per head), ATTN_SPLIT by the split-K launches at every
 * span (attn_one_block=0, attn_cluster=0), ATTN_CLUSTER
 * in clusters of blocks past 8 rows. */
enum { ATTN_DEFAULT, ATTN_SPLIT, ATTN_CLUSTER };
static void fixture_parity(const tl_fixture *fx, int gpus, bool fused, int route) {
    const bool split_route = route == ATTN_SPLIT;
    muser_model *m = fx->model;
    const int *tokens = fx->tokens;
    const float *exact = fx->exact, *llama = fx->llama;
    const int V = fx->V, n = fx->n < 48 ? fx->n : 48;
    char tune[96];
    snprintf(tune, sizeof tune, "tp_fused=%d%s", fused ? 1 : 0,
             split_route ? ",attn_one_block=0,attn_cluster=0"
             : route == ATTN_CLUSTER ? ",attn_one_block=8,attn_cluster=512" : "");
    setenv("MUSER_CUDA_TUNE", tune, 1);
    check_mode(m, gpus, fused);
    for (int li = 0; li < 2; li++) {
        const bool fast = li == 1;
        const muser_lane lane = fast ? MUSER_LANE_FAST : MUSER_LANE_EXACT;
        const muser_kv_type kv = fast ? MUSER_KV_F16 : MUSER_KV_F32;
        char ln[64];
        snprintf(ln, sizeof ln, "%s, %s%s", fast ? "fast lane, kv f16" : "exact lane, kv f32",
                 fused ? "fused all-reduce" : "NCCL all-reduce",
                 split_route ? ", split-K attention" : route == ATTN_CLUSTER ? ", attention in clusters" : "");
        muser_token c1[64], cn[64];
        float *one = decode_all(m, 0, lane, kv, tokens, n, V, c1);
        float *tp = decode_all(m, gpus, lane, kv, tokens, n, V, cn);
        float *fed = tp ? feed_all(m, gpus, lane, kv, tokens, n, V) : NULL;
        char what[128];
        if (one && tp && fed) {
            snprintf(what, sizeof what, "%s: split vs one GPU", ln);
            if (!fast) check_exact(what, one, tp, n, V);
            snprintf(what, sizeof what, "%s: split decode vs float", ln);
            if (fast) check_fast(what, exact, llama, tp, n, V);
            else check_exact(what, exact, tp, n, V);
            snprintf(what, sizeof what, "%s: split chunk vs float", ln);
            if (fast) check_fast(what, exact, llama, fed, n, V);
            else check_exact(what, exact, fed, n, V);
            snprintf(what, sizeof what, "%s: split choices", ln);
            check_choices(what, tp, cn, n, V);
            snprintf(what, sizeof what, "%s: one-GPU choices", ln);
            check_choices(what, one, c1, n, V);
        }
        free(one);
        free(tp);
        free(fed);
    }
    unsetenv("MUSER_CUDA_TUNE");
}

int main(int argc, char **argv) {
    const int gpus = argc > 1 ? atoi(argv[1]) : 1;
    if (mu_cuda_probe() != 0) {
        char why[600];
        snprintf(why, sizeof why, "no usable GPU: %s", muser_last_error());
        tl_skip(why);
    }
    int present = 0;
    if (cudaGetDeviceCount(&present) != cudaSuccess || present < gpus) {
        char why[200];
        snprintf(why, sizeof why, "tensor parallel over %d GPUs needs %d GPUs; %d present", gpus, gpus, present);
        tl_skip(why);
    }
    tl_fixture fx;
    if (!tl_fixture_load("fixtures/nano/nano-Q4_K_M", true, &fx)) return tl_finish("cuda_tp");
    CHECK(fx.n >= 48);
    printf("tensor parallel over %d GPU%s (nano-Q4_K_M, %d tokens of the fixture):\n", gpus, gpus == 1 ? "" : "s",
           fx.n < 48 ? fx.n : 48);
    if (splits(fx.model, gpus, "nano-Q4_K_M")) {
        for (int route = ATTN_DEFAULT; route <= ATTN_CLUSTER; route++) {
            fixture_parity(&fx, gpus, true, route);
            fixture_parity(&fx, gpus, false, route);
        }
    }
    tl_fixture_free(&fx);
    for (int fused = 1; fused >= 0; fused--) {
        setenv("MUSER_CUDA_TUNE", fused ? "tp_fused=1" : "tp_fused=0", 1);
        wide_ffn(gpus);
    }
    unsetenv("MUSER_CUDA_TUNE");
    return tl_finish("cuda_tp");
}

#else
int main(void) { tl_skip("this build has no CUDA backend with NCCL (nvcc or nccl.h was not found at build time)"); }
#endif
