/* cuda_absent.c — the CUDA entry point of a build without nvcc. */
#ifndef MUSER_HAVE_CUDA
#include "engine/engine.h"
#include "util/error.h"

int mu_cuda_backend_new(const mu_model *m, const mu_session_config *cfg, mu_backend **out) {
    (void)m;
    (void)cfg;
    *out = NULL;
    return mu_fail(MUSER_EBACKEND, "this build of Muser has no CUDA backend (nvcc was not found at build time)");
}
#endif
