/* kernels_avx2.c — the x86 kernels of kernels_x86.h built for
 * AVX2 + FMA + F16C (each 512-bit vector of the vocabulary is a pair of ymm registers). */
#if defined(__x86_64__) || defined(__i386__)
#include "cpu/kernels_x86.h"

const mu_cpu_kernels *mu_cpu_kernels_avx2(void) {
    static mu_cpu_kernels table;
    if (!table.isa) x86_fill_table(&table, "avx2");
    return &table;
}
#else
typedef int mu_no_avx2; /* not an x86 target */
#endif
