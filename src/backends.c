/* backends.c — muser_session_new: the session's settings resolved by the
 * engine, the backend picked and opened here (from the parameters and the
 * machine), then handed to the engine's session. */
#include "backends.h"

#include <stdatomic.h>
#include <stdio.h>

#include "cpu/pool.h"
#include "util/error.h"

#ifndef MUSER_HAVE_CUDA
/* The CUDA entry point of a build without nvcc. */
int mu_cuda_backend_new(const mu_model *m, const mu_session_config *cfg, mu_backend **out) {
    (void)m;
    (void)cfg;
    *out = NULL;
    return mu_fail(MUSER_EBACKEND, "this build of Muser has no CUDA backend (nvcc was not found at build time)");
}
int mu_cuda_drafter_new(const struct muser_drafter *d, const mu_session_config *cfg, mu_backend *target,
                        mu_backend **out) {
    (void)d;
    (void)cfg;
    (void)target;
    *out = NULL;
    return mu_fail(MUSER_EBACKEND, "this build of Muser has no CUDA backend (nvcc was not found at build time)");
}
int mu_cuda_fit_layers(const mu_model *m, const mu_session_config *cfg, int *n) {
    (void)m;
    (void)cfg;
    *n = 0;
    return mu_fail(MUSER_EBACKEND, "this build of Muser has no CUDA backend (nvcc was not found at build time)");
}
#endif

/* The CUDA backend with p's --gpu-layers: all of them (and the head) on
 * the GPU, none (the CPU backend: *kind becomes CPU), or a split; auto
 * asks the memory plan how many fit. */
static int open_cuda(const mu_model *m, const muser_session_params *p, mu_session_config *cfg, muser_backend *kind,
                     mu_backend **out) {
    const int L = m->hp.n_layer;
    int n = p->gpu_layers;
    if (n == MUSER_GPU_LAYERS_AUTO) {
        int rc = mu_cuda_fit_layers(m, cfg, &n);
        if (rc) return rc;
        mu_info("cuda: --gpu-layers auto: %d of %d layers%s fit on the GPU%s", n, L, n == L ? " and the head" : "",
                n == 0 ? "; running on the CPU" : "");
    }
    if (n == MUSER_GPU_LAYERS_ALL || n >= L) return mu_cuda_backend_new(m, cfg, out);
    if (n == 0) { /* (llama.cpp's -ngl 0; the lane stays the one the GPU session would take) */
        *kind = MUSER_BACKEND_CPU;
        return mu_cpu_backend_new(m, cfg, out);
    }
    return mu_split_backend_new(m, cfg, n, MUSER_BACKEND_CUDA, MUSER_BACKEND_CPU, out);
}

/* Opens one backend; an AUTO lane becomes fast on the GPU (the speed lane
 * there, also for the layers a --gpu-layers split leaves to the CPU) and
 * exact elsewhere. *kind: the backend opened. */
static int open_kind(muser_backend *kind, const muser_session_params *p, const mu_model *m, mu_session_config *cfg,
                     mu_backend **out) {
    const muser_lane lane = p->lane;
    cfg->lane = lane != MUSER_LANE_AUTO ? lane : *kind == MUSER_BACKEND_CUDA ? MUSER_LANE_FAST : MUSER_LANE_EXACT;
    switch (*kind) {
    case MUSER_BACKEND_CPU: return mu_cpu_backend_new(m, cfg, out);
    case MUSER_BACKEND_REF: return mu_ref_backend_new(m, cfg, out);
    case MUSER_BACKEND_CUDA: return open_cuda(m, p, cfg, kind, out);
    default: return mu_fail(MUSER_EINVAL, "unknown backend %d", (int)*kind);
    }
}

/* The backend p asks for; auto: CUDA when a GPU is usable, else the CPU
 * with a notice. *kind receives the backend opened. */
static int open_backend(const mu_model *m, const muser_session_params *p, mu_session_config *cfg,
                        muser_backend *kind, mu_backend **out) {
    *kind = p->backend;
    if (p->backend != MUSER_BACKEND_AUTO) return open_kind(kind, p, m, cfg, out);
#ifdef MUSER_HAVE_CUDA
    *kind = MUSER_BACKEND_CUDA;
    int rc = open_kind(kind, p, m, cfg, out);
    if (rc == 0 || p->gpus > 0) return rc; /* asked for GPUs by count: the CUDA backend's error stands */
    { /* said once per process, not once per session (serve opens one per slot) */
        static atomic_flag said = ATOMIC_FLAG_INIT;
        if (!atomic_flag_test_and_set(&said)) mu_info("no usable GPU (%s); running on the CPU", muser_last_error());
    }
#else
    if (p->gpus > 0) return mu_fail(MUSER_EUNSUPPORTED, "--gpus %d: this build has no CUDA backend", p->gpus);
#endif
    *kind = MUSER_BACKEND_CPU;
    return open_kind(kind, p, m, cfg, out);
}

int muser_session_new(const muser_model *model, const muser_session_params *params, muser_session **out) {
    *out = NULL;
    const muser_session_params p = params ? *params : muser_session_default_params();
    mu_session_config cfg;
    int rc = mu_session_config_resolve(model, &p, &cfg);
    if (rc) return rc;
    if (cfg.n_threads == 0) cfg.n_threads = mu_cpu_count();
    /* asking for GPUs by count never falls back to the CPU quietly */
    if (p.gpus > 0 && (p.backend == MUSER_BACKEND_CPU || p.backend == MUSER_BACKEND_REF))
        return mu_fail(MUSER_EINVAL, "--gpus %d splits the model over GPUs and needs --backend cuda (or auto), not %s",
                       p.gpus, p.backend == MUSER_BACKEND_CPU ? "cpu" : "ref");
    if (p.gpu_layers != MUSER_GPU_LAYERS_ALL) {
        char what[32];
        if (p.gpu_layers == MUSER_GPU_LAYERS_AUTO) snprintf(what, sizeof what, "auto");
        else snprintf(what, sizeof what, "%d", p.gpu_layers);
        if (p.backend == MUSER_BACKEND_CPU || p.backend == MUSER_BACKEND_REF)
            return mu_fail(MUSER_EINVAL,
                           "--gpu-layers %s says how many layers run on the GPU and needs --backend cuda (or auto), "
                           "not %s", what, p.backend == MUSER_BACKEND_CPU ? "cpu" : "ref");
        if (p.gpus > 0)
            return mu_fail(MUSER_EINVAL,
                           "--gpu-layers %s does not combine with --gpus %d: tensor parallel keeps every layer on "
                           "the GPUs", what, p.gpus);
    }
    muser_backend kind;
    mu_backend *b = NULL;
    rc = open_backend(model, &p, &cfg, &kind, &b);
    if (rc) return rc;
    return mu_session_open(model, &cfg, kind, b, out);
}

int mu_backend_open_drafter(muser_backend kind, const struct muser_drafter *d, const mu_session_config *cfg,
                            mu_backend *target, mu_backend **out) {
    *out = NULL;
    if (mu_backend_is_split(target))
        return mu_fail(MUSER_EUNSUPPORTED, "speculative decoding (--draft) does not run with the layers split between "
                                           "the GPU and the CPU (--gpu-layers below the layer count): put every layer "
                                           "on the GPU or run on the CPU");
    switch (kind) {
    case MUSER_BACKEND_CPU: return mu_cpu_drafter_new(d, cfg, out);
    case MUSER_BACKEND_CUDA: return mu_cuda_drafter_new(d, cfg, target, out);
    case MUSER_BACKEND_REF:
        return mu_fail(MUSER_EUNSUPPORTED, "the reference backend does not run drafters (its drafter oracle is "
                                           "src/ref/ref_draft.c, for tests)");
    default: return mu_fail(MUSER_EINVAL, "unknown backend %d", (int)kind);
    }
}
