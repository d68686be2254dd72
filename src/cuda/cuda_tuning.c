/* cuda_tuning.c — the tuning table's defaults, and its fields by name. */
#include "cuda/cuda_tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cu_shared.h"
#include "util/error.h"

const mu_cuda_tuning mu_cuda_tuning_default = {
    .graph = 1,
    .pdl = 1,
    .mma_attention = 1,
    .mv_blocks_per_sm = 0,
    .attn_one_block = 64,
    .attn_cluster = 512,
    .norm_in = 1,
    .batch_parts = 1,
    .flat_gateup = MU_CU_ROUTE_AUTO,
    .cut_rows = MU_CU_ROUTE_AUTO,
    .pair_staging = 1,
    .batch_min_fast = 2,
    .batch_min_exact = 6,
    .batch_exact_rows = 0,
    .batch_fast_rows = 2,
    .batch_mmq = 1,
    .batch_mmf_wide = MU_CU_ROUTE_AUTO,
    .prefill_mmf_rows = 64,
    .prefill_cache = 0,
    .tp_symmetric = 1,
    .tp_fused = 1,
};

typedef struct field {
    const char *name;
    size_t offset;
    int min, max;
} field;

#define F(name, lo, hi) {#name, offsetof(mu_cuda_tuning, name), lo, hi}
static const field fields[] = {
    F(graph, 0, 1),
    F(pdl, 0, 1),
    F(mma_attention, 0, 1),
    F(mv_blocks_per_sm, 0, 64),
    F(attn_one_block, 0, 512),
    F(attn_cluster, 0, 1024),
    F(norm_in, 0, 1),
    F(batch_parts, 0, 1),
    F(flat_gateup, MU_CU_ROUTE_AUTO, MU_CU_ROUTE_ALWAYS),
    F(cut_rows, MU_CU_ROUTE_AUTO, MU_CU_ROUTE_ALWAYS),
    F(pair_staging, 0, 1),
    F(batch_min_fast, 0, 1 << 20),
    F(batch_min_exact, 0, 1 << 20),
    F(batch_exact_rows, 0, 1),
    F(batch_fast_rows, 0, 1 << 20),
    F(batch_mmq, 0, 1),
    F(batch_mmf_wide, MU_CU_ROUTE_AUTO, MU_CU_ROUTE_ALWAYS),
    F(prefill_mmf_rows, 0, 64),
    F(prefill_cache, -1, 1),
    F(tp_symmetric, 0, 1),
    F(tp_fused, 0, 1),
};
#undef F
#define N_FIELDS (sizeof fields / sizeof fields[0])

static int *field_at(mu_cuda_tuning *t, const field *f) { return (int *)((char *)t + f->offset); }

int mu_cuda_tuning_parse(mu_cuda_tuning *t, const char *spec) {
    mu_cuda_tuning out = *t;
    const char *p = spec;
    while (p && *p) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (len == 0) {
            p = end ? end + 1 : NULL;
            continue;
        }
        if (!eq) return mu_fail(MUSER_EINVAL, "MUSER_CUDA_TUNE: '%.*s' is not name=value", (int)len, p);
        const field *f = NULL;
        for (size_t i = 0; i < N_FIELDS && !f; i++)
            if (strlen(fields[i].name) == (size_t)(eq - p) && !strncmp(fields[i].name, p, (size_t)(eq - p)))
                f = &fields[i];
        if (!f) return mu_fail(MUSER_EINVAL, "MUSER_CUDA_TUNE: no setting named '%.*s'", (int)(eq - p), p);
        char num[32];
        const size_t vlen = len - (size_t)(eq + 1 - p);
        if (vlen == 0 || vlen >= sizeof num) return mu_fail(MUSER_EINVAL, "MUSER_CUDA_TUNE: %s needs a number", f->name);
        memcpy(num, eq + 1, vlen);
        num[vlen] = 0;
        char *stop = NULL;
        const long v = strtol(num, &stop, 10);
        if (*stop || v < f->min || v > f->max)
            return mu_fail(MUSER_EINVAL, "MUSER_CUDA_TUNE: %s=%s is not an integer in %d..%d", f->name, num, f->min,
                           f->max);
        *field_at(&out, f) = (int)v;
        p = end ? end + 1 : NULL;
    }
    *t = out;
    return 0;
}

int mu_cuda_tuning_from_env(mu_cuda_tuning *t) {
    *t = mu_cuda_tuning_default;
    const char *e = getenv("MUSER_CUDA_TUNE");
    return e ? mu_cuda_tuning_parse(t, e) : 0;
}

void mu_cuda_tuning_format(const mu_cuda_tuning *t, char *out, size_t cap) {
    size_t n = 0;
    if (cap) out[0] = 0;
    for (size_t i = 0; i < N_FIELDS && n < cap; i++) {
        const int r = snprintf(out + n, cap - n, "%s%s=%d", i ? " " : "", fields[i].name,
                               *field_at((mu_cuda_tuning *)t, &fields[i]));
        if (r < 0) break;
        n += (size_t)r;
    }
}
