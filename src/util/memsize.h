/* memsize.h — sizes of memory as people write them on a command line. */
#ifndef MU_MEMSIZE_H
#define MU_MEMSIZE_H

#include <stdbool.h>
#include <stdint.h>

/* "24G", "24GiB", "24GB", "20480M", "1.5T", "123456" (bytes): binary
 * units (K = 1024, G = 1024^3), as GPU memory is sized. false for anything
 * else, zero or negative. */
bool mu_parse_mem_size(const char *s, uint64_t *out);

#endif
