/* kernels_avx512.c — the x86 kernels of kernels_x86.h built for
 * AVX-512 F/BW/VL/DQ with VNNI (vpdpwssd, vpdpbusd). */
#if defined(__x86_64__) || defined(__i386__)
#include "cpu/kernels_x86.h"

const mu_cpu_kernels *mu_cpu_kernels_avx512(void) {
    static mu_cpu_kernels table;
    if (!table.isa) x86_fill_table(&table, "avx512");
    return &table;
}
#else
typedef int mu_no_avx512; /* not an x86 target */
#endif
