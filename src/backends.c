/* backends.c — muser_session_new: the session's settings resolved by the
 * engine, the backend picked and opened here (from the parameters and the
 * machine), then handed to the engine's session. */
#include "backends.h"

#include <stdatomic.h>

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
#endif

/* Opens one backend; an AUTO lane becomes fast on the GPU (the speed lane
 * there) and exact elsewhere. */
static int open_kind(muser_backend kind, muser_lane lane, const mu_model *m, mu_session_config *cfg,
                     mu_backend **out) {
    cfg->lane = lane != MUSER_LANE_AUTO ? lane : kind == MUSER_BACKEND_CUDA ? MUSER_LANE_FAST : MUSER_LANE_EXACT;
    switch (kind) {
    case MUSER_BACKEND_CPU: return mu_cpu_backend_new(m, cfg, out);
    case MUSER_BACKEND_REF: return mu_ref_backend_new(m, cfg, out);
    case MUSER_BACKEND_CUDA: return mu_cuda_backend_new(m, cfg, out);
    default: return mu_fail(MUSER_EINVAL, "unknown backend %d", (int)kind);
    }
}

/* The backend p asks for; auto: CUDA when a GPU is usable, else the CPU
 * with a notice. *kind receives the backend opened. */
static int open_backend(const mu_model *m, const muser_session_params *p, mu_session_config *cfg,
                        muser_backend *kind, mu_backend **out) {
    *kind = p->backend;
    if (p->backend != MUSER_BACKEND_AUTO) return open_kind(p->backend, p->lane, m, cfg, out);
#ifdef MUSER_HAVE_CUDA
    *kind = MUSER_BACKEND_CUDA;
    int rc = open_kind(MUSER_BACKEND_CUDA, p->lane, m, cfg, out);
    if (rc == 0 || p->gpus > 0) return rc; /* asked for GPUs by count: the CUDA backend's error stands */
    { /* said once per process, not once per session (serve opens one per slot) */
        static atomic_flag said = ATOMIC_FLAG_INIT;
        if (!atomic_flag_test_and_set(&said)) mu_info("no usable GPU (%s); running on the CPU", muser_last_error());
    }
#else
    if (p->gpus > 0) return mu_fail(MUSER_EUNSUPPORTED, "--gpus %d: this build has no CUDA backend", p->gpus);
#endif
    *kind = MUSER_BACKEND_CPU;
    return open_kind(MUSER_BACKEND_CPU, p->lane, m, cfg, out);
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
    muser_backend kind;
    mu_backend *b = NULL;
    rc = open_backend(model, &p, &cfg, &kind, &b);
    if (rc) return rc;
    return mu_session_open(model, &cfg, kind, b, out);
}

int mu_backend_open_drafter(muser_backend kind, const struct muser_drafter *d, const mu_session_config *cfg,
                            mu_backend *target, mu_backend **out) {
    *out = NULL;
    switch (kind) {
    case MUSER_BACKEND_CPU: return mu_cpu_drafter_new(d, cfg, out);
    case MUSER_BACKEND_CUDA: return mu_cuda_drafter_new(d, cfg, target, out);
    case MUSER_BACKEND_REF:
        return mu_fail(MUSER_EUNSUPPORTED, "the reference backend does not run drafters (its drafter oracle is "
                                           "src/ref/ref_draft.c, for tests)");
    default: return mu_fail(MUSER_EINVAL, "unknown backend %d", (int)kind);
    }
}
