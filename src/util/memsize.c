/* memsize.c — the GPU options' values as people write them (memsize.h). */
#include "util/memsize.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "muser.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

bool mu_parse_mem_size(const char *s, uint64_t *out) {
    *out = 0;
    if (!s || !*s || isspace((unsigned char)*s) || *s == '-' || *s == '+') return false;
    char *end = NULL;
    const double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v <= 0) return false;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = 1024.0, end++; break;
    case 'M': mul = 1024.0 * 1024, end++; break;
    case 'G': mul = GIB, end++; break;
    case 'T': mul = GIB * 1024, end++; break;
    default: break;
    }
    if (mul > 1 && (end[0] == 'i' || end[0] == 'I') && (end[1] == 'B' || end[1] == 'b')) end += 2;
    else if (mul > 1 && (end[0] == 'B' || end[0] == 'b')) end++;
    if (*end) return false;
    const double bytes = v * mul;
    if (bytes < 1 || bytes > 1.8e19) return false;
    *out = (uint64_t)bytes;
    return true;
}

bool mu_parse_gpu_layers(const char *s, int *out) {
    if (!s) return false;
    if (!strcmp(s, "all")) return *out = MUSER_GPU_LAYERS_ALL, true;
    if (!strcmp(s, "auto")) return *out = MUSER_GPU_LAYERS_AUTO, true;
    if (!isdigit((unsigned char)*s)) return false;
    char *end = NULL;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno || *end || v > (1L << 30)) return false;
    *out = (int)v;
    return true;
}
