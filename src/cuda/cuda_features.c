/* cuda_features.c — the route set of a device: Hopper's features where the
 * device and the loaded code have them, the portable paths elsewhere or
 * when forced (cuda_features.h). */
#include "cuda/cuda_features.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda/cu_shared.h"
#include "util/error.h"

int mu_cuda_portable_forced(bool *on) {
    *on = false;
    const char *v = getenv("MUSER_CUDA_PORTABLE");
    if (!v || !*v || !strcmp(v, "0")) return 0;
    if (!strcmp(v, "1")) {
        *on = true;
        return 0;
    }
    return mu_fail(MUSER_EINVAL, "MUSER_CUDA_PORTABLE=%.40s: use 1 (force the portable paths) or 0", v);
}

int mu_cuda_features_detect(int device, mu_cuda_features *out) {
    memset(out, 0, sizeof *out);
    if (mu_cuda_portable_forced(&out->forced_portable)) return MUSER_EINVAL;
    cudaError_t e = cudaSetDevice(device);
    int major = 0, minor = 0, cluster_launch = 0, ptx = 0;
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, device);
    if (e == cudaSuccess) e = mu_cu_code_arch(&ptx);
    if (e != cudaSuccess)
        return mu_fail(MUSER_EBACKEND, "cannot query GPU %d's features: %s", device, cudaGetErrorString(e));
    out->cc = 10 * major + minor;
    out->code_arch = ptx;
    const bool hopper = out->cc >= 90 && out->code_arch >= 90 && !out->forced_portable;
    out->clusters = hopper && cluster_launch;
    out->pdl = hopper;
    return 0;
}

void mu_cuda_features_format(const mu_cuda_features *f, char *out, size_t cap) {
    char why[96];
    if (f->forced_portable) snprintf(why, sizeof why, "forced by MUSER_CUDA_PORTABLE=1");
    else if (f->cc < 90) snprintf(why, sizeof why, "compute capability %d.%d", f->cc / 10, f->cc % 10);
    else if (f->code_arch < 90) snprintf(why, sizeof why, "the loaded code is compute_%d PTX", f->code_arch);
    else snprintf(why, sizeof why, "the device reports no cluster launch");
    if (f->clusters && f->pdl) snprintf(out, cap, "Hopper paths (clusters, programmatic dependent launch; code for compute_%d)",
                                        f->code_arch);
    else
        snprintf(out, cap, "portable paths (%s): %s, %s; code for compute_%d", why, f->clusters ? "clusters" : "no clusters",
                 f->pdl ? "programmatic dependent launch" : "no programmatic dependent launch", f->code_arch);
}
