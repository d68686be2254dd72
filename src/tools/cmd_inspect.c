/* cmd_inspect.c — `muser inspect MODEL`: metadata, tensors, layer kinds,
 * the bytes one decoded token reads, and the GPU memory each context needs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_plan.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/quant.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "util/error.h"

static void print_str(gguf_str s, size_t max) {
    putchar('"');
    for (uint64_t i = 0; i < s.len && i < max; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 32) printf("\\x%02x", c);
        else putchar(c);
    }
    if (s.len > max) printf("...(%llu bytes)", (unsigned long long)s.len);
    putchar('"');
}

static void print_scalar(uint32_t type, const gguf_kv *kv) {
    switch (type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
        printf("%llu", (unsigned long long)kv->v.u64);
        break;
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
        printf("%lld", (long long)kv->v.i64);
        break;
    case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64: printf("%.10g", kv->v.f64); break;
    case GGUF_TYPE_BOOL: fputs(kv->v.b ? "true" : "false", stdout); break;
    case GGUF_TYPE_STRING: print_str(kv->v.str, 120); break;
    }
}

static void print_kv(const gguf_kv *kv) {
    printf("  %-48.*s ", (int)(kv->key.len > 200 ? 200 : kv->key.len), kv->key.ptr);
    if (kv->type != GGUF_TYPE_ARRAY) {
        printf("%-7s ", gguf_type_name(kv->type));
        print_scalar(kv->type, kv);
        putchar('\n');
        return;
    }
    printf("%s[%llu] ", gguf_type_name(kv->arr_type), (unsigned long long)kv->arr_count);
    uint64_t show = kv->arr_count < 8 ? kv->arr_count : 8;
    putchar('[');
    for (uint64_t i = 0; i < show; i++) {
        if (i) fputs(", ", stdout);
        if (kv->arr_type == GGUF_TYPE_STRING) print_str(kv->arr_strs[i], 24);
        else if (kv->arr_type == GGUF_TYPE_FLOAT32 || kv->arr_type == GGUF_TYPE_FLOAT64)
            printf("%.6g", gguf_arr_float(kv, i));
        else if (kv->arr_type == GGUF_TYPE_BOOL) fputs(gguf_arr_int(kv, i) ? "true" : "false", stdout);
        else printf("%lld", (long long)gguf_arr_int(kv, i));
    }
    if (show < kv->arr_count) fputs(", ...", stdout);
    puts("]");
}

static const char *human(double b, char *buf, size_t cap) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) b /= 1024, i++;
    snprintf(buf, cap, i ? "%.2f %s" : "%.0f %s", b, u[i]);
    return buf;
}

/* What a CUDA session plans to hold on the GPU at each context
 * (cuda_plan.c), for choosing -c and --gpu-mem: the weights bounded by
 * the file's bytes, the fast lane, chunks of 512, no f16 prefill cache
 * (that is built only where it fits with 3 GB to spare). */
static void print_gpu_memory(const mu_model *m) {
    const mu_hparams *hp = &m->hp;
    mu_gpu_plan_in in;
    memset(&in, 0, sizeof in);
    /* a step record: a header, a line per layer, up to 8 RoPE tables (a bound) */
    mu_gpu_plan_geometry(m, mu_gpu_weight_bytes_bound, 64 + 16 * (int64_t)hp->n_layer + 32 * (int64_t)hp->n_rot,
                         &in);
    in.fast = true, in.prefill_cache = 0, in.available = UINT64_MAX;
    const double gib = 1073741824.0;
    mu_gpu_plan p;
    in.n_ctx = 1, in.n_batch = 1;
    mu_gpu_plan_make(&in, &p);
    printf("\n## GPU memory (CUDA)\n\nWhat a session plans on the GPU (weights %.2f GiB; fast lane, -b 512, no f16 "
           "prefill cache); --gpu-mem must be at least the total (GiB). Each further session of the model (`serve "
           "--parallel`) shares the weights and work buffers and adds the last column (f16 KV).\n\n| context | KV f16 "
           "| total | KV f32 | total | further session |\n|---|---|---|---|---|---|\n",
           p.weights / gib);
    /* the usual contexts up to the trained one, and the trained one */
    const int usual[] = {2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144};
    int ctxs[10], n = 0;
    for (size_t i = 0; i < sizeof usual / sizeof usual[0]; i++)
        if (usual[i] < hp->n_ctx_train) ctxs[n++] = usual[i];
    ctxs[n++] = hp->n_ctx_train;
    for (int i = 0; i < n; i++) {
        const int ctx = ctxs[i];
        in.n_ctx = ctx, in.n_batch = ctx < 512 ? ctx : 512;
        in.kv_f32 = false;
        mu_gpu_plan_make(&in, &p);
        printf("| %d | %.2f | %.2f |", ctx, p.kv / gib, p.total / gib);
        in.kv_f32 = true;
        mu_gpu_plan_make(&in, &p);
        printf(" %.2f | %.2f |", p.kv / gib, p.total / gib);
        mu_gpu_plan_in later = in;
        later.kv_f32 = false, later.weight_bytes = later.norm_bytes = 0, later.work_shared = true;
        mu_gpu_plan_make(&later, &p);
        printf(" %.2f |\n", p.total / gib);
    }
}

static void usage(FILE *out) {
    fprintf(out, "usage: muser inspect [-m] MODEL [--all]\n"
                 "Prints the metadata, the tensor table (types, shapes, bytes), the layer kinds and the\n"
                 "bytes read per decoded token at depths up to the model's context.\n\n"
                 "  %-28s the GGUF file (required)\n"
                 "  %-28s list every tensor (default: the globals and layer 0)\n",
            "[-m, --model] FILE", "--all");
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool all_tensors = false;
    mu_args a = {argc, 1, argv, "inspect"};
    for (; a.i < argc; a.i++) {
        if (mu_arg_is(&a, "-h", "--help")) {
            usage(stdout);
            return 0;
        } else if (mu_arg_is(&a, NULL, "--all")) {
            all_tensors = true;
        } else if (mu_arg_is(&a, "-m", "--model") && !path) {
            if (!mu_arg_str(&a, &path)) return 2;
        } else if (mu_arg_positional(&a) && !path) {
            path = argv[a.i];
        } else {
            mu_arg_unknown(&a);
            return 2;
        }
    }
    if (!mu_arg_require("inspect", path, "a MODEL file")) return 2;
    gguf_file *f = NULL;
    if (gguf_open(path, &f) != 0) {
        fprintf(stderr, "muser inspect: %s\n", muser_last_error());
        return 1;
    }
    char b1[32], b2[32];
    printf("# %s\n\nGGUF v%u, %s, %llu metadata entries, %llu tensors, alignment %llu\n\n## Metadata\n", path,
           f->version, human((double)f->size, b1, sizeof b1), (unsigned long long)f->n_kv,
           (unsigned long long)f->n_tensors, (unsigned long long)f->alignment);
    for (uint64_t i = 0; i < f->n_kv; i++) print_kv(&f->kv[i]);

    /* Tensor table, with a per-type summary. */
    uint64_t type_count[MU_TYPE_COUNT] = {0}, type_bytes[MU_TYPE_COUNT] = {0};
    printf("\n## Tensors\n\n| name | type | shape | bytes |\n|---|---|---|---|\n");
    uint64_t shown = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        type_count[t->type]++;
        type_bytes[t->type] += t->n_bytes;
        bool layer0_or_global = strncmp(t->name, "blk.", 4) != 0 || strncmp(t->name, "blk.0.", 6) == 0;
        if (!all_tensors && !layer0_or_global) continue;
        shown++;
        printf("| %s | %s | [%lld", t->name, mu_type_name(t->type), (long long)t->ne[0]);
        for (uint32_t d = 1; d < t->n_dims; d++) printf(", %lld", (long long)t->ne[d]);
        printf("] | %llu |\n", (unsigned long long)t->n_bytes);
    }
    if (shown < f->n_tensors)
        printf("\n(%llu more tensors in later layers; --all lists them)\n", (unsigned long long)(f->n_tensors - shown));
    printf("\n| type | tensors | bytes |\n|---|---|---|\n");
    for (int t = 0; t < MU_TYPE_COUNT; t++)
        if (type_count[t])
            printf("| %s | %llu | %s |\n", mu_type_name((uint32_t)t), (unsigned long long)type_count[t],
                   human((double)type_bytes[t], b1, sizeof b1));

    /* Architecture view (needs a bindable model). */
    mu_model m;
    if (mu_model_bind(f, &m) != 0) {
        printf("\n(not a runnable model: %s)\n", muser_last_error());
        gguf_close(f);
        return 0;
    }
    const mu_hparams *hp = &m.hp;
    printf("\n## Architecture: %s\n\n", m.arch_name);
    printf("n_vocab %d, n_embd %d, n_layer %d, n_head %d, n_head_kv %d, head_dim %d, n_ff %d, n_ctx_train %d\n",
           hp->n_vocab, hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff, hp->n_ctx_train);
    int n_swa = 0;
    double swa_rope_base = 0;
    for (int l = 0; l < hp->n_layer; l++)
        if (m.layers[l].is_swa && hp->n_swa > 0) n_swa++, swa_rope_base = m.layers[l].rope_base;
    printf("rms_eps %g, rope n_rot %d (%s pairs), logit_scale %.10g, softcap %g, ", hp->rms_eps, hp->n_rot,
           hp->rope_type == MU_ROPE_NEOX ? "NEOX" : "NORM", hp->logit_scale, hp->softcap);
    if (n_swa) printf("sliding window %d\n", hp->n_swa);
    else printf("no sliding-window layers\n");
    printf("\nlayer kinds: ");
    for (int l = 0; l < hp->n_layer; l++) printf("%s%s", l ? " " : "", m.layers[l].is_swa && hp->n_swa > 0 ? "S" : "F");
    printf("\n(");
    if (n_swa) printf("S = sliding window %d with RoPE base %g; ", hp->n_swa, swa_rope_base);
    printf("F = full attention%s) -- %d sliding, %d full\n",
           hp->arch == MU_ARCH_MUSE_GLIMMER ? " without RoPE (NoPE)" : " with RoPE", n_swa, hp->n_layer - n_swa);
    uint64_t w = m.weight_bytes_per_token;
    printf("\n## Bytes read per decoded token\n\nweights: %llu (%s)\n", (unsigned long long)w,
           human((double)w, b1, sizeof b1));
    int64_t depths[MU_MODEL_DEPTHS_MAX];
    const int n_depths = mu_model_report_depths(&m, depths);
    printf("\n| depth | KV bytes (F16) | total |\n|---|---|---|\n");
    for (int i = 0; i < n_depths; i++) {
        uint64_t kv = mu_model_kv_bytes_per_token(&m, depths[i], 2);
        printf("| %lld | %s | %s |\n", (long long)depths[i], human((double)kv, b1, sizeof b1),
               human((double)(w + kv), b2, sizeof b2));
    }
    print_gpu_memory(&m);
    mu_model_unbind(&m);
    gguf_close(f);
    return 0;
}
