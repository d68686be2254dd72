/* cmd_quantize.c — `muser quantize IN OUT TYPE`: converts an f32/f16/bf16
 * GGUF to another format or mix (model/mix.h), streaming row blocks through
 * the thread pool so large files never sit in memory. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/pool.h"
#include "gguf/gguf.h"
#include "model/mix.h"
#include "quant/quant.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/tool_util.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/progress.h"

typedef struct convert_job {
    const gguf_tensor *t;
    uint32_t out_type;
    int64_t row0, nrows;
    uint8_t *out;
    float *scratch; /* [threads][ne0] */
    int failed;
} convert_job;

static void convert_worker(void *ctx, int ith, int nth) {
    convert_job *j = ctx;
    const int64_t n = j->t->ne[0];
    const uint64_t in_rb = mu_row_bytes(j->t->type, n), out_rb = mu_row_bytes(j->out_type, n);
    float *row = j->scratch + (size_t)ith * (size_t)n;
    for (int64_t r = ith; r < j->nrows; r += nth) {
        const uint8_t *src = (const uint8_t *)j->t->data + (uint64_t)(j->row0 + r) * in_rb;
        if (mu_dequant_row(j->t->type, src, row, n) != 0 || mu_quant_row(j->out_type, row, j->out + (uint64_t)r * out_rb, n) != 0)
            j->failed = 1;
    }
}

static void usage(FILE *out) {
    fprintf(out, "usage: muser quantize [options] IN.gguf OUT.gguf TYPE [THREADS]\n"
                 "Converts an f32/f16/bf16 GGUF. TYPE: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k\n"
                 "q6_k iq4_nl iq4_xs (that type everywhere), or a mix: q3_k_m q4_k_m q5_k_m (llama.cpp's rules).\n"
                 "1-D tensors (norms) stay f32; a tensor whose rows do not fit TYPE's blocks becomes Q8_0 or\n"
                 "F16, and is named on stderr. THREADS, as llama-quantize takes it, is -t.\n\n"
                 "  %-28s threads (default: the %d cores online)\n",
            "-t, --threads N", mu_cpu_count());
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[4] = {0};
    int n_pos = 0, threads = 0;
    mu_args args = {argc, 1, argv, "quantize"};
    for (; args.i < argc; args.i++) {
        if (mu_arg_is(&args, "-h", "--help")) {
            usage(stdout);
            return 0;
        } else if (mu_arg_is(&args, "-t", "--threads")) {
            if (!mu_arg_threads(&args, &threads)) return 2;
        } else if (mu_arg_positional(&args) && n_pos < 4) {
            pos[n_pos++] = argv[args.i];
        } else {
            mu_arg_unknown(&args);
            return 2;
        }
    }
    if (n_pos < 3) {
        static const char *const names[] = {"IN.gguf", "OUT.gguf", "TYPE"};
        mu_arg_require("quantize", NULL, names[n_pos]);
        return 2;
    }
    if (n_pos == 4 && !mu_threads_value("quantize", "THREADS", pos[3], &threads)) return 2; /* llama-quantize's */
    int mix = mu_mix_from_name(pos[2]);
    if (mix < 0 || mix == MU_MIX_META_17GB) {
        fprintf(stderr, "muser quantize: unknown type '%s'\n", pos[2]);
        usage(stderr);
        return 2;
    }
    if (!strcmp(pos[0], pos[1])) {
        fprintf(stderr, "muser quantize: input and output must differ\n");
        return 2;
    }
    gguf_file *f = NULL;
    if (gguf_open(pos[0], &f) != 0) {
        fprintf(stderr, "muser quantize: %s\n", muser_last_error());
        return 1;
    }
    int rc = 1;
    gguf_writer *w = gguf_writer_new();
    FILE *fp = NULL;
    mu_pool *pool = NULL;
    uint8_t *buf = NULL;
    float *scratch = NULL;
    uint32_t *types = calloc(f->n_tensors ? f->n_tensors : 1, sizeof(uint32_t));

    /* Layer count for the per-layer rules, and tied embeddings. */
    gguf_str arch;
    int n_layer = 0;
    if (gguf_get_str(f, "general.architecture", &arch) == 1) {
        char key[96], a[64];
        snprintf(key, sizeof key, "%s.block_count", gguf_str_copy(arch, a, sizeof a));
        uint32_t bc;
        if (gguf_get_u32(f, key, &bc) == 1) n_layer = (int)bc;
    }
    const bool tied = gguf_find_tensor(f, "output.weight") == NULL;
    int64_t widest = 1;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (t->type != MU_TYPE_F32 && t->type != MU_TYPE_F16 && t->type != MU_TYPE_BF16) {
            fprintf(stderr, "muser quantize: %s: tensor '%s' is %s; quantize converts f32, f16 and bf16 files\n",
                    pos[0], t->name, mu_type_name(t->type));
            goto out;
        }
        /* With tied embeddings, token_embd doubles as the output matrix. */
        const char *rule_name = tied && !strcmp(t->name, "token_embd.weight") ? "output.weight" : t->name;
        int dims = t->n_dims;
        while (dims > 1 && t->ne[dims - 1] == 1) dims--;
        types[i] = mu_tool_mix_type("quantize", mix, t->name, rule_name, dims, t->ne[0], n_layer);
        if (t->ne[0] > widest) widest = t->ne[0];
    }
    for (uint64_t i = 0; i < f->n_kv; i++) {
        if (gguf_str_eq(f->kv[i].key, "general.file_type") || gguf_str_eq(f->kv[i].key, "general.alignment")) continue;
        gguf_writer_copy_kv(w, &f->kv[i]);
    }
    gguf_writer_add_u32(w, "general.file_type", mu_mix_file_type((mu_mix)mix));
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (gguf_writer_add_tensor(w, t->name, types[i], (int)t->n_dims, t->ne) < 0) goto fail;
    }
    fp = fopen(pos[1], "wb");
    if (!fp) {
        fprintf(stderr, "muser quantize: cannot create %s: %s\n", pos[1], strerror(errno));
        goto out;
    }
    pool = mu_pool_new(threads ? threads : mu_cpu_count());
    const uint64_t chunk = 64ull << 20;
    buf = malloc(chunk + (1 << 20));
    scratch = malloc(sizeof(float) * (size_t)widest * (size_t)mu_pool_size(pool));
    if (!pool || !buf || !scratch) goto fail;
    if (gguf_writer_begin(w, fp) != 0) goto fail;
    const double t0 = mu_now_seconds();
    mu_progress bar;
    mu_progress_begin(&bar, stderr, "quantize", gguf_writer_total_bytes(w));
    uint64_t done = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        const int64_t rows = (int64_t)(t->n_elements / (uint64_t)t->ne[0]);
        const uint64_t orb = mu_row_bytes(types[i], t->ne[0]);
        int64_t per = (int64_t)(chunk / orb);
        if (per < 1) per = 1;
        for (int64_t r0 = 0; r0 < rows; r0 += per) {
            convert_job j = {t, types[i], r0, rows - r0 < per ? rows - r0 : per, buf, scratch, 0};
            mu_pool_run(pool, convert_worker, &j);
            if (j.failed) goto fail;
            if (gguf_writer_write_data(w, buf, (uint64_t)j.nrows * orb) != 0) goto fail;
            done += (uint64_t)j.nrows * orb;
            mu_progress_update(&bar, done);
        }
        if (gguf_writer_end_tensor(w) != 0) goto fail;
    }
    if (gguf_writer_finish(w) != 0) goto fail;
    mu_progress_end(&bar);
    if (fclose(fp) != 0) {
        fp = NULL;
        goto fail;
    }
    fp = NULL;
    char summary[512];
    mu_tool_type_summary(types, f->n_tensors, summary, sizeof summary);
    fprintf(stderr, "quantize: wrote %s (%s; tensors: %s; %.3f GB) in %.1f s\n", pos[1], mu_mix_name((mu_mix)mix),
            summary, gguf_writer_total_bytes(w) / 1e9, mu_now_seconds() - t0);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "muser quantize: %s\n", muser_last_error());
    if (fp) fclose(fp);
    fp = NULL;
    unlink(pos[1]);
out:
    if (fp) fclose(fp);
    free(types);
    free(buf);
    free(scratch);
    mu_pool_free(pool);
    gguf_writer_free(w);
    gguf_close(f);
    return rc;
}
