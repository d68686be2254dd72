/* kernels_avx2.c — avx2 kernels (filled by the CPU-speed work; until then the
 * table is not offered and dispatch falls back to the scalar reference). */
#include "cpu/kernels.h"

const mu_cpu_kernels *mu_cpu_kernels_avx2(void) { return NULL; }
