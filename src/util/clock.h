/* clock.h — the monotonic clock, for timings, profiles and uptime (never
 * the time of day). */
#ifndef MU_CLOCK_H
#define MU_CLOCK_H

#include <stdint.h>

uint64_t mu_now_ns(void);
double mu_now_seconds(void);

#endif
