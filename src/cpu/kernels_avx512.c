/* kernels_avx512.c — avx512 kernels (filled by the CPU-speed work; until then the
 * table is not offered and dispatch falls back to the scalar reference). */
#include "cpu/kernels.h"

const mu_cpu_kernels *mu_cpu_kernels_avx512(void) { return NULL; }
