/* cuda_features.h — which of Hopper's features a GPU's sessions use: the
 * route set chosen once per device from the device's properties, the code
 * the driver loaded for it, and the one switch that forces the portable
 * paths (MUSER_CUDA_PORTABLE=1). C, no CUDA headers: the tests include it.
 *
 *   clusters  thread-block clusters and distributed shared memory (the
 *             paired staging of the matvec, the decode attention in
 *             clusters); off: every block stages alone, spans past the
 *             one-block limit take the split-K route
 *   pdl       programmatic dependent launch; off: plain stream order
 *
 * Each is on only where the device has it (compute capability 9.0 or
 * newer, cluster launch reported), the loaded kernels were compiled for
 * it (their PTX target is compute_90 or newer: the compute_80 PTX that a
 * newer GPU JIT-compiles has none of these instructions) and the portable
 * paths are not forced. A route that needs a feature is never launched
 * without it (cu_device.cuh's launch helpers check again).
 */
#ifndef MU_CUDA_FEATURES_H
#define MU_CUDA_FEATURES_H

#include <stdbool.h>
#include <stddef.h>

typedef struct mu_cuda_features {
    int cc;               /* the device's compute capability, 10 major + minor (86: sm_86) */
    int code_arch;        /* the PTX target of the loaded kernels, the same form (80, 90, 120) */
    bool forced_portable; /* MUSER_CUDA_PORTABLE=1                                    */
    bool clusters;        /* thread-block clusters may be launched                     */
    bool pdl;             /* programmatic dependent launch may be set on launches      */
} mu_cuda_features;

/* Whether MUSER_CUDA_PORTABLE forces the portable paths: unset, empty or
 * "0" no, "1" yes; anything else MUSER_EINVAL with a message. The one
 * place that reads the variable. */
int mu_cuda_portable_forced(bool *on);

/* The features of `device` (made current). 0, or a status with the reason
 * in muser_last_error() (no such device, a bad MUSER_CUDA_PORTABLE). */
int mu_cuda_features_detect(int device, mu_cuda_features *out);

/* One line for logs and `muser bench`, e.g. "Hopper paths (clusters,
 * programmatic dependent launch)" or "portable paths (forced by
 * MUSER_CUDA_PORTABLE=1): no clusters, no programmatic dependent launch". */
void mu_cuda_features_format(const mu_cuda_features *f, char *out, size_t cap);

#endif
