/* membw.c — see membw.h. The buffer is written once before timing so every
 * page is real memory; each pass gives each thread a contiguous share (one
 * sequential stream per thread, like a matmul set's claims). */
#include "cpu/membw.h"

#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/pool.h"
#include "util/clock.h"
#include "util/error.h"

struct mu_membw_probe {
    uint8_t *buf;
    size_t bytes;
    const mu_cpu_kernels *k;
    mu_pool *pool;
    uint64_t sink[64];
};

static void stream_worker(void *vctx, int ith, int nth) {
    mu_membw_probe *p = vctx;
    const size_t pages = p->bytes / 4096;
    const size_t p0 = pages * (size_t)ith / (size_t)nth, p1 = pages * (size_t)(ith + 1) / (size_t)nth;
    p->sink[ith % 64] ^= p->k->stream_read(p->buf + p0 * 4096, (p1 - p0) * 4096);
}

mu_membw_probe *mu_membw_probe_new(int n_threads, size_t bytes) {
    bytes = bytes / 4096 * 4096;
    if (bytes == 0) {
        mu_fail(MUSER_EINVAL, "membw: nothing to measure");
        return NULL;
    }
    const mu_cpu_kernels *k = mu_cpu_kernels_get(NULL);
    if (!k) {
        mu_fail(MUSER_EUNSUPPORTED, "MUSER_ISA names an instruction set this CPU or build cannot run");
        return NULL;
    }
    mu_membw_probe *p = calloc(1, sizeof *p);
    if (p) p->buf = aligned_alloc(4096, bytes);
    if (!p || !p->buf) {
        free(p);
        mu_fail(MUSER_ENOMEM, "membw: cannot allocate %zu bytes", bytes);
        return NULL;
    }
    for (size_t i = 0; i < bytes; i += 4096) memset(p->buf + i, (int)(i >> 12), 4096);
    p->bytes = bytes;
    p->k = k;
    p->pool = mu_pool_new(n_threads);
    if (!p->pool) {
        free(p->buf);
        free(p);
        return NULL;
    }
    mu_pool_run(p->pool, stream_worker, p); /* warm-up: threads awake, pages mapped */
    return p;
}

void mu_membw_probe_free(mu_membw_probe *p) {
    if (!p) return;
    mu_pool_free(p->pool);
    free(p->buf);
    free(p);
}

void mu_membw_probe_run(mu_membw_probe *p, int passes, double *gb_s) {
    for (int i = 0; i < passes; i++) {
        const double t0 = mu_now_seconds();
        mu_pool_run(p->pool, stream_worker, p);
        gb_s[i] = (double)p->bytes / (mu_now_seconds() - t0) / 1e9;
    }
}

size_t mu_membw_probe_bytes(const mu_membw_probe *p) { return p->bytes; }
const char *mu_membw_probe_isa(const mu_membw_probe *p) { return p->k->isa; }

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double mu_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mu_max(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}
