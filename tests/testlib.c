#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tl_passed, tl_failed;

int tl_finish(const char *name) {
    printf("%s: %d passed, %d failed\n", name, tl_passed, tl_failed);
    return tl_failed ? 1 : 0;
}

const char *tl_test_data(const char *rel, char *buf, size_t cap) {
    const char *dir = getenv("MUSER_TEST_DATA");
    snprintf(buf, cap, "%s/%s", dir && *dir ? dir : MUSER_TEST_DATA, rel);
    return buf;
}

const char *tl_shared(const char *rel, char *buf, size_t cap) {
    const char *dir = getenv("MUSER_DATA_DIR");
    if (!dir || !*dir) dir = MUSER_DEFAULT_DATA_DIR;
    snprintf(buf, cap, "%s/%s", dir, rel);
    return access(buf, R_OK) == 0 ? buf : NULL;
}

void tl_skip(const char *why) {
    printf("\n**************** SKIPPED: %s ****************\n\n", why);
    fflush(stdout);
    exit(77);
}

uint64_t tl_rand_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float tl_rand_uniform(uint64_t *s) { return (float)((tl_rand_u64(s) >> 40) * (1.0 / 16777216.0)); }

float tl_rand_normal(uint64_t *s) {
    double u1 = ((tl_rand_u64(s) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (tl_rand_u64(s) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void *tl_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        if (size) *size = (size_t)n;
    }
    return buf;
}

int *tl_read_tokens(const char *path, int *n) {
    char *text = tl_read_file(path, NULL);
    if (!text) return NULL;
    int cap = 512, count = 0;
    int *ids = malloc(sizeof(int) * cap);
    for (char *p = text, *end; ids && *p; p = end) {
        long v = strtol(p, &end, 10);
        if (end == p) {
            if (!*++end) break;
            continue;
        }
        if (count == cap) {
            int *grown = realloc(ids, sizeof(int) * (size_t)(cap *= 2));
            if (!grown) free(ids);
            ids = grown;
            if (!ids) break;
        }
        ids[count++] = (int)v;
    }
    free(text);
    *n = count;
    return ids;
}


static const float *g_rank_x;
static int rank_cmp(const void *a, const void *b) {
    const int i = *(const int *)a, j = *(const int *)b;
    const float u = isnan(g_rank_x[i]) ? -INFINITY : g_rank_x[i], v = isnan(g_rank_x[j]) ? -INFINITY : g_rank_x[j];
    if (u != v) return u > v ? -1 : 1;
    return i - j;
}

void tl_rank_order(const float *x, int n, int *order) {
    for (int i = 0; i < n; i++) order[i] = i;
    g_rank_x = x;
    qsort(order, (size_t)n, sizeof(int), rank_cmp);
}
