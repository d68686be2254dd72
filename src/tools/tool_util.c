#include "tools/tool_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *mu_tool_backend_name(muser_backend b) {
    switch (b) {
    case MUSER_BACKEND_CPU: return "cpu";
    case MUSER_BACKEND_REF: return "ref";
    case MUSER_BACKEND_CUDA: return "cuda";
    default: return "auto";
    }
}

bool mu_tool_session_option(mu_args *a, muser_session_params *sp) {
    const char *v;
    if (mu_arg_is(a, NULL, "--backend")) {
        if (!mu_arg_str(a, &v)) return false;
        if (!strcmp(v, "cpu")) sp->backend = MUSER_BACKEND_CPU;
        else if (!strcmp(v, "ref")) sp->backend = MUSER_BACKEND_REF;
        else if (!strcmp(v, "cuda")) sp->backend = MUSER_BACKEND_CUDA;
        else if (!strcmp(v, "auto")) sp->backend = MUSER_BACKEND_AUTO;
        else {
            fprintf(stderr, "muser %s: --backend must be auto, cpu, cuda or ref\n", a->cmd);
            return false;
        }
        return true;
    }
    if (mu_arg_is(a, NULL, "--lane")) {
        if (!mu_arg_str(a, &v)) return false;
        if (!strcmp(v, "exact")) sp->lane = MUSER_LANE_EXACT;
        else if (!strcmp(v, "fast")) sp->lane = MUSER_LANE_FAST;
        else if (!strcmp(v, "auto")) sp->lane = MUSER_LANE_AUTO;
        else {
            fprintf(stderr, "muser %s: --lane must be auto, exact or fast\n", a->cmd);
            return false;
        }
        return true;
    }
    if (mu_arg_is(a, NULL, "--kv")) {
        if (!mu_arg_str(a, &v)) return false;
        if (!strcmp(v, "f16")) sp->kv_type = MUSER_KV_F16;
        else if (!strcmp(v, "f32")) sp->kv_type = MUSER_KV_F32;
        else {
            fprintf(stderr, "muser %s: --kv must be f16 or f32\n", a->cmd);
            return false;
        }
        return true;
    }
    if (mu_arg_is(a, "-t", "--threads")) return mu_arg_int(a, 1, 1024, &sp->n_threads);
    if (mu_arg_is(a, "-c", "--ctx")) return mu_arg_int(a, 1, 1 << 30, &sp->n_ctx);
    if (mu_arg_is(a, "-b", "--batch")) return mu_arg_int(a, 1, 1 << 16, &sp->n_batch);
    if (mu_arg_is(a, NULL, "--gpus")) return mu_arg_int(a, 1, 64, &sp->gpus);
    mu_arg_unknown(a);
    return false;
}

void *mu_tool_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "muser: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (!buf) break;
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (n < cap) break;
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
        }
        buf = nb;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        fprintf(stderr, "muser: cannot read %s\n", path);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *size = n;
    return buf;
}

muser_token *mu_tool_read_token_file(const char *path, int *n) {
    size_t size;
    char *text = mu_tool_read_file(path, &size);
    if (!text) return NULL;
    int cap = 256, count = 0;
    muser_token *ids = malloc(sizeof(muser_token) * (size_t)cap);
    char *p = text;
    for (;;) {
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == ',') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 0x7fffffff) {
            fprintf(stderr, "muser: %s: invalid token id near byte %ld\n", path, (long)(p - text));
            free(ids);
            free(text);
            return NULL;
        }
        if (count == cap) {
            cap *= 2;
            ids = realloc(ids, sizeof(muser_token) * (size_t)cap);
        }
        ids[count++] = (muser_token)v;
        p = end;
    }
    free(text);
    if (count == 0) {
        fprintf(stderr, "muser: %s holds no token ids\n", path);
        free(ids);
        return NULL;
    }
    *n = count;
    return ids;
}
