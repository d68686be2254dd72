/* test_cuda_tp.c — tensor parallel (--gpus N) against the single-GPU
 * backend on a fixture: the same tokens decoded by both, logits within the
 * core thresholds (max |d| <= 5e-4, RMS <= 5e-5, decisive top-1 100%) and
 * the same device-side choices, in both lanes; a prompt fed as one chunk
 * (decoded token by token on the ranks) gives the same logits too.
 *
 *   test_cuda_tp N    (N = 1: the NCCL path over a communicator of size 1;
 *                      N = 2: two GPUs, skipped loudly (77) with fewer)
 *
 * Without a GPU, or in a build without NCCL, it prints a loud SKIPPED line
 * and exits 77. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "muser.h"
#include "testlib.h"

#if defined(MUSER_HAVE_CUDA) && defined(MUSER_HAVE_NCCL)
#include <cuda_runtime_api.h>

#include "cuda/cuda_api.h"
#include "engine/engine.h"
#include "engine/parity.h"

/* Logits of n tokens decoded one by one, and each step's device choice. */
static float *decode_all(muser_model *m, int gpus, muser_lane lane, muser_kv_type kv, const int *tokens, int n, int V,
                         muser_token *chosen) {
    muser_session_params sp = muser_session_default_params();
    sp.backend = MUSER_BACKEND_CUDA;
    sp.lane = lane;
    sp.kv_type = kv;
    sp.n_ctx = 256;
    sp.n_batch = 64;
    sp.gpus = gpus;
    muser_session *s = NULL;
    if (muser_session_new(m, &sp, &s) != 0) {
        CHECKF(0, "session (--gpus %d): %s", gpus, muser_last_error());
        return NULL;
    }
    float *out = malloc(sizeof(float) * (size_t)n * V);
    for (int i = 0; i < n; i++) {
        CHECK(mu_session_decode_select(s, tokens[i], 0.0f, 0, true, &chosen[i]) == 0);
        memcpy(out + (size_t)i * V, muser_session_logits(s), sizeof(float) * V);
    }
    muser_session_free(s);
    return out;
}

/* The same tokens fed as one chunk with every position's logits. */
static float *feed_all(muser_model *m, int gpus, muser_lane lane, muser_kv_type kv, const int *tokens, int n, int V) {
    muser_session_params sp = muser_session_default_params();
    sp.backend = MUSER_BACKEND_CUDA;
    sp.lane = lane;
    sp.kv_type = kv;
    sp.n_ctx = 256;
    sp.n_batch = 64;
    sp.gpus = gpus;
    muser_session *s = NULL;
    if (muser_session_new(m, &sp, &s) != 0) {
        CHECKF(0, "session (--gpus %d): %s", gpus, muser_last_error());
        return NULL;
    }
    float *out = malloc(sizeof(float) * (size_t)n * V);
    CHECK(muser_session_feed(s, (const muser_token *)tokens, n, true) == 0);
    for (int i = 0; i < n; i++) memcpy(out + (size_t)i * V, muser_session_logits_at(s, i), sizeof(float) * V);
    muser_session_free(s);
    return out;
}

static void compare(const char *what, const float *ref, const float *got, int n, int V) {
    mu_parity r;
    mu_parity_compare(ref, got, n, V, &r);
    printf("  %-40s max %.3g rms %.3g meanKL %.3g decisive %.3f\n", what, r.max_abs, r.rms, r.mean_kl, r.top1_decisive);
    CHECKF(r.max_abs <= 5e-4, "%s: max |delta| %.3g > 5e-4", what, r.max_abs);
    CHECKF(r.rms <= 5e-5, "%s: rms %.3g > 5e-5", what, r.rms);
    CHECKF(r.top1_decisive == 1.0, "%s: decisive top-1 %.4f", what, r.top1_decisive);
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
    char path[512];
    const char *dir = getenv("MUSER_TEST_DATA");
    snprintf(path, sizeof path, "%s/fixtures/nano/nano-Q4_K_M.gguf", dir && *dir ? dir : MUSER_TEST_DATA);
    muser_model *m = NULL;
    CHECKF(muser_model_load(path, &m) == 0, "%s: %s", path, muser_last_error());
    if (!m) return tl_finish("cuda_tp");
    muser_model_info info;
    muser_model_get_info(m, &info);
    const int V = info.n_vocab, n = 40;
    int tokens[64];
    for (int i = 0; i < n; i++) tokens[i] = (int)((i * 7919u + 13u) % (unsigned)V);
    printf("tensor parallel over %d GPU%s vs the single-GPU backend (nano-Q4_K_M, %d tokens):\n", gpus,
           gpus == 1 ? "" : "s", n);
    for (int li = 0; li < 2; li++) {
        const muser_lane lane = li ? MUSER_LANE_FAST : MUSER_LANE_EXACT;
        const muser_kv_type kv = li ? MUSER_KV_F16 : MUSER_KV_F32;
        muser_token c1[64], cn[64];
        float *one = decode_all(m, 0, lane, kv, tokens, n, V, c1);
        float *tp = decode_all(m, gpus, lane, kv, tokens, n, V, cn);
        if (one && tp) {
            char what[96];
            snprintf(what, sizeof what, "%s lane, decode", li ? "fast" : "exact");
            compare(what, one, tp, n, V);
            int diff = 0;
            for (int i = 0; i < n; i++) diff += c1[i] != cn[i];
            CHECKF(diff == 0, "%s lane: the device chose differently at %d of %d steps", li ? "fast" : "exact", diff, n);
            float *fed = feed_all(m, gpus, lane, kv, tokens, n, V);
            if (fed) {
                snprintf(what, sizeof what, "%s lane, one chunk (token by token)", li ? "fast" : "exact");
                compare(what, one, fed, n, V);
                free(fed);
            }
        }
        free(one);
        free(tp);
    }
    muser_model_free(m);
    return tl_finish("cuda_tp");
}

#else
int main(void) { tl_skip("this build has no CUDA backend with NCCL (nvcc or nccl.h was not found at build time)"); }
#endif
