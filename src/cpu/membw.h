/* membw.h — the machine's memory read bandwidth, measured the way decode
 * reads weights: several threads streaming disjoint parts of a buffer much
 * larger than the caches, with the fastest load kernel this CPU has.
 *
 * On a shared machine the bandwidth left to us moves by a factor of two
 * or more from minute to minute, so a probe keeps its buffer and threads
 * and can be run again right next to the measurement it is compared with. */
#ifndef MU_MEMBW_H
#define MU_MEMBW_H

#include <stddef.h>

typedef struct mu_membw_probe mu_membw_probe;

/* Allocates and writes `bytes` (rounded down to whole 4 KiB pages) and
 * starts n_threads threads. NULL (message set) on failure. */
mu_membw_probe *mu_membw_probe_new(int n_threads, size_t bytes);
void mu_membw_probe_free(mu_membw_probe *p);
/* Streams the buffer `passes` times; gb_s[i] = 1e9 bytes per second of
 * pass i. */
void mu_membw_probe_run(mu_membw_probe *p, int passes, double *gb_s);
size_t mu_membw_probe_bytes(const mu_membw_probe *p);
const char *mu_membw_probe_isa(const mu_membw_probe *p);

/* Median and maximum of n values (n >= 1); sorts v. */
double mu_median(double *v, int n);
double mu_max(const double *v, int n);

#endif
