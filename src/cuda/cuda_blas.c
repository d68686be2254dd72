/* cuda_blas.c — cuBLAS through dlopen (cuda_blas.h). */
#include "cuda/cuda_blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>

#include "util/error.h"

static mu_cublas g_blas;
static int g_state; /* 0: not tried, 1: loaded, -1: failed */
static char g_why[256];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

#ifndef MUSER_CUBLAS_DIR
#define MUSER_CUBLAS_DIR "" /* (the CUDA toolkit's library folder at build time) */
#endif

static void load(void) {
    /* the loader's search path first, then where the build found the toolkit */
    const char *names[] = {"libcublas.so.13", "libcublas.so", MUSER_CUBLAS_DIR "/libcublas.so.13"};
    void *lib = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++)
        if (names[i][0] != '/' || MUSER_CUBLAS_DIR[0]) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(g_why, sizeof g_why, "%s", e ? e : "not found");
        g_state = -1;
        return;
    }
    mu_cublas b;
    *(void **)&b.create = dlsym(lib, "cublasCreate_v2");
    *(void **)&b.destroy = dlsym(lib, "cublasDestroy_v2");
    *(void **)&b.set_stream = dlsym(lib, "cublasSetStream_v2");
    *(void **)&b.gemm_ex = dlsym(lib, "cublasGemmEx");
    if (!b.create || !b.destroy || !b.set_stream || !b.gemm_ex) {
        snprintf(g_why, sizeof g_why, "the cuBLAS library found lacks the functions Muser calls");
        dlclose(lib);
        g_state = -1;
        return;
    }
    g_blas = b;
    g_state = 1;
}

int mu_cublas_load(const mu_cublas **out) {
    pthread_mutex_lock(&g_lock);
    if (g_state == 0) load();
    const int state = g_state;
    pthread_mutex_unlock(&g_lock);
    *out = state == 1 ? &g_blas : NULL;
    if (state == 1) return 0;
    return mu_fail(MUSER_EBACKEND,
                   "the CUDA backend needs cuBLAS 13 (libcublas.so.13), which could not be loaded (%s); put the CUDA "
                   "toolkit's library folder in LD_LIBRARY_PATH",
                   g_why);
}
