/* kernels_avx512bw.c — the x86 kernels of kernels_x86.h built for
 * AVX-512 F/BW/VL/DQ without VNNI (dpwssd as madd + add) for AVX-512 CPUs that lack VNNI. */
#if defined(__x86_64__) || defined(__i386__)
#include "cpu/kernels_x86.h"

const mu_cpu_kernels *mu_cpu_kernels_avx512bw(void) {
    static mu_cpu_kernels table;
    if (!table.isa) x86_fill_table(&table, "avx512bw");
    return &table;
}
#else
typedef int mu_no_avx512bw; /* not an x86 target */
#endif
