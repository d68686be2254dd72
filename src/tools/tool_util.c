#include "tools/tool_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cpu/pool.h"
#include "model/mix.h"
#include "quant/quant.h"
#include "text/utf8.h"
#include "util/memsize.h"

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
    if (mu_arg_is(a, "-t", "--threads")) return mu_arg_threads(a, &sp->n_threads);
    if (mu_arg_is(a, "-c", "--ctx-size") || mu_arg_is(a, NULL, "--ctx")) return mu_arg_int(a, 1, 1 << 30, &sp->n_ctx);
    if (mu_arg_is(a, "-b", "--batch-size") || mu_arg_is(a, NULL, "--batch"))
        return mu_arg_int(a, 1, 1 << 16, &sp->n_batch);
    if (mu_arg_is(a, NULL, "--gpus")) return mu_arg_int(a, 1, 64, &sp->gpus);
    if (mu_arg_is(a, NULL, "--gpu-mem")) {
        if (!mu_arg_str(a, &v)) return false;
        if (!mu_parse_mem_size(v, &sp->gpu_mem)) {
            fprintf(stderr, "muser %s: --gpu-mem takes a size such as 24G, 20480M or 23.5GiB (binary units), not '%s'\n",
                    a->cmd, v);
            return false;
        }
        return true;
    }
    if (mu_arg_is(a, "-ngl", "--gpu-layers") || mu_arg_is(a, NULL, "--n-gpu-layers")) {
        const char *opt = a->argv[a->i];
        if (!mu_arg_str(a, &v)) return false;
        if (!mu_parse_gpu_layers(v, &sp->gpu_layers)) {
            fprintf(stderr, "muser %s: %s takes a number of layers (0 or more), all or auto, not '%s'\n", a->cmd, opt,
                    v);
            return false;
        }
        return true;
    }
    mu_arg_unknown(a);
    return false;
}

void mu_tool_session_help(FILE *out, const char *backends, const char *ctx_default) {
    char opt[64];
    snprintf(opt, sizeof opt, "--backend %s", backends);
    fprintf(out, "session:\n  %-28s where the model runs (default: %s)\n", opt,
            !strncmp(backends, "auto", 4) ? "auto: CUDA if usable, else CPU" : "cpu");
    fprintf(out, "  %-28s exact: f32 activations into every dot product; fast: int8\n"
                 "  %-28s (default: auto: fast on CUDA, exact on the CPU)\n", "--lane auto|exact|fast", "");
    fprintf(out, "  %-28s KV cache type (default: f16)\n", "--kv f16|f32");
    if (ctx_default) {
        fprintf(out, "  %-28s context in tokens (default: %s)\n", "-c, --ctx-size N", ctx_default);
        fprintf(out, "  %-28s prompt tokens per prefill step (default: 512)\n", "-b, --batch-size N");
    }
    fprintf(out, "  %-28s CPU threads, at most one per core (default: the %d cores online)\n", "-t, --threads N",
            mu_cpu_count());
    fprintf(out, "  %-28s CUDA: the model split over N GPUs of this host, tensor parallel\n"
                 "  %-28s through NCCL (default: 1)\n", "--gpus N", "");
    fprintf(out, "  %-28s CUDA: the most Muser allocates on each GPU, e.g. 24G (binary\n"
                 "  %-28s units; default: what the GPU has free); a plan that does not\n"
                 "  %-28s fit says what would (a shorter context, f16 KV, a smaller batch)\n",
            "--gpu-mem SIZE", "", "");
    fprintf(out, "  %-28s CUDA: the first N layers on the GPU, the rest and the output head\n"
                 "  %-28s on the CPU in the same step; 0: all on the CPU; auto: the most\n"
                 "  %-28s that fit under --gpu-mem (default: all)\n",
            "-ngl, --gpu-layers N|auto", "", "");
}

void *mu_tool_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "muser: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "muser: cannot read %s: it is a directory\n", path);
        fclose(f);
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
        if (!nb) free(buf);
        buf = nb;
    }
    const bool failed = ferror(f);
    const int err = errno;
    fclose(f);
    if (!buf || failed) {
        fprintf(stderr, "muser: cannot read %s: %s\n", path, buf ? strerror(err) : "out of memory");
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *size = n;
    return buf;
}

bool mu_tool_utf8_ok(const char *cmd, const char *what, const char *text, size_t len) {
    for (size_t i = 0, n; i < len; i += n) {
        uint32_t cp;
        if (mu_utf8_next((const uint8_t *)text + i, len - i, &n, &cp) != MU_UTF8_VALID) {
            fprintf(stderr, "muser %s: %s is not valid UTF-8 (byte %zu is 0x%02x); convert it first, e.g. with iconv\n",
                    cmd, what, i, (unsigned)(uint8_t)text[i]);
            return false;
        }
    }
    return true;
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

uint32_t mu_tool_mix_type(const char *cmd, int mix, const char *name, const char *rule_name, int n_dims,
                          int64_t row_len, int n_layer) {
    uint32_t wanted;
    const uint32_t t = mu_mix_tensor_type((mu_mix)mix, rule_name, n_dims, row_len, n_layer, &wanted);
    if (t != wanted) {
        const mu_type_traits *w = mu_type_get(wanted);
        fprintf(stderr, "muser %s: %s is %s, not %s: its rows of %lld are not a multiple of %s's %d-value blocks%s\n",
                cmd, name, mu_type_name(t), w->name, (long long)row_len, w->name, w->block_elems,
                t == MU_TYPE_Q8_0 || wanted == MU_TYPE_Q8_0 ? "" : " (nor of Q8_0's 32)");
    }
    return t;
}

void mu_tool_type_summary(const uint32_t *types, uint64_t n, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = 0;
    for (uint32_t t = 0; t < MU_TYPE_COUNT; t++) {
        uint64_t count = 0;
        for (uint64_t i = 0; i < n; i++) count += types[i] == t;
        if (count && len < cap)
            len += (size_t)snprintf(buf + len, cap - len, "%s%s %llu", len ? ", " : "", mu_type_name(t),
                                    (unsigned long long)count);
    }
}
