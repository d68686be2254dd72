/* test_gpu_plan.c — the CUDA session's GPU memory plan (cuda_plan.c), its
 * arithmetic and its advice, with no GPU: the 30B's geometry with the
 * Meta mix, and a small model. Also the --gpu-mem size parser. */
#include <stdio.h>
#include <string.h>

#include "cuda/cuda_plan.h"
#include "testlib.h"
#include "util/memsize.h"

#define GIB 1073741824ull

/* Muse Glimmer 30B (muser synth --preset 30b): 52 layers, 3 of 4 sliding
 * (window 2048), 32 query heads over 2 KV heads of 128. Its weights with
 * the Meta mix: the file's 16.75 GB taken whole, an upper bound on the
 * device streams (the same bytes, each stream padded to 256). */
static mu_gpu_plan_in glimmer_30b(int n_ctx, uint64_t available) {
    mu_gpu_plan_in in;
    memset(&in, 0, sizeof in);
    in.E = 6656, in.Q = 32 * 128, in.KVD = 2 * 128, in.F = 19968, in.V = 202048;
    in.n_layer = 52, in.n_head = 32, in.n_swa_layers = 39, in.n_swa = 2048;
    in.rec_bytes = 4096;
    in.weight_bytes = 16750000000ull;
    in.norm_bytes = 52ull * 4 * 6656 * 4 + 52ull * 2 * 512 + 6656 * 4;
    in.f16_cache_bytes = 60000000000ull; /* ~30 G parameters as f16 */
    in.max_matrix_elems = 19968ull * 6656;
    in.n_ctx = n_ctx, in.n_batch = 512;
    in.fast = true, in.prefill_cache = -1;
    in.available = available;
    return in;
}

static void test_glimmer_caps(void) {
    mu_gpu_plan p;
    /* the two points: -c 32768 under 24 GiB, -c 8192 under 20 GiB */
    mu_gpu_plan_in in = glimmer_30b(32768, 24 * GIB);
    mu_gpu_plan_make(&in, &p);
    char line[256];
    mu_gpu_plan_format(&p, line, sizeof line);
    printf("30B meta mix, -c 32768, 24 GiB: %s\n", line);
    CHECKF(p.fits, "-c 32768 needs %.2f GiB, more than 24", p.total / (double)GIB);
    CHECKF(p.f16_cache == 0 && p.wtmp > 0, "the 60 GB f16 cache planned under a 24 GiB cap");
    in = glimmer_30b(8192, 20 * GIB);
    mu_gpu_plan_make(&in, &p);
    mu_gpu_plan_format(&p, line, sizeof line);
    printf("30B meta mix, -c 8192, 20 GiB: %s\n", line);
    CHECKF(p.fits, "-c 8192 needs %.2f GiB, more than 20", p.total / (double)GIB);
    /* the whole trained context at f32 KV does not fit 18 GiB: the advice
     * names a context that fits, and f16 KV */
    in = glimmer_30b(131072, 18 * GIB);
    in.kv_f32 = true;
    mu_gpu_plan_make(&in, &p);
    CHECK(!p.fits);
    char msg[1024];
    mu_gpu_plan_explain(&in, &p, 18 * GIB, 79 * GIB, 0, msg, sizeof msg);
    printf("131072 f32 under 18 GiB: %s\n", msg);
    CHECKF(strstr(msg, "not enough GPU memory") && strstr(msg, "--gpu-mem 18.00 GiB") && strstr(msg, "-c "),
           "message: %s", msg);
    int ctx = 0;
    const char *c = strstr(msg, "-c ");
    CHECK(c && sscanf(c, "-c %d", &ctx) == 1);
    mu_gpu_plan_in t = in;
    t.n_ctx = ctx;
    mu_gpu_plan_make(&t, &p);
    CHECKF(p.fits && ctx >= 1024 && ctx % 1024 == 0, "the advised -c %d does not fit", ctx);
    t.n_ctx = ctx + 1024;
    mu_gpu_plan_make(&t, &p);
    CHECKF(!p.fits, "-c %d fits too: the advice is not the largest", ctx + 1024);
    /* weights alone too large: no context helps, and the message says so */
    in = glimmer_30b(4096, 12 * GIB);
    mu_gpu_plan_make(&in, &p);
    CHECK(!p.fits);
    mu_gpu_plan_explain(&in, &p, 0, 12 * GIB, 0, msg, sizeof msg);
    printf("12 GiB free: %s\n", msg);
    CHECKF(strstr(msg, "no context fits") && strstr(msg, "GPU 0 has 12.00 GiB free"), "message: %s", msg);
}

static void test_arithmetic(void) {
    mu_gpu_plan p;
    /* KV: full layers hold the context, sliding ones a ring of window +
     * batch - 1 rows once that is shorter; K and V, 2 bytes a value */
    mu_gpu_plan_in in = glimmer_30b(32768, 80 * GIB);
    mu_gpu_plan_make(&in, &p);
    CHECK(p.kv_rows_full == 32768 && p.kv_rows_swa == 2048 + 511);
    CHECK(p.kv == 13ull * 32768 * 1024 + 39ull * 2559 * 1024);
    in.kv_f32 = true;
    mu_gpu_plan q;
    mu_gpu_plan_make(&in, &q);
    CHECK(q.kv == 2 * p.kv);
    in = glimmer_30b(2048, 80 * GIB); /* the ring would be longer than the context */
    mu_gpu_plan_make(&in, &p);
    CHECK(p.kv_rows_swa == 2048 && p.kv == 52ull * 2048 * 1024);
    /* split-K runs: ceil(ctx / 128), at most 128; prefill at most 8 */
    CHECK(p.split_dec == 16 && p.split_pre == 8 && p.parts == 512ll * 32 * 8);
    /* the f16 cache where it fits with 3 GB to spare (then no dequant tiles) */
    in = glimmer_30b(4096, 80 * GIB);
    mu_gpu_plan_make(&in, &p);
    CHECK(p.f16_cache == in.f16_cache_bytes && p.wtmp == 0 && p.fits);
    in.prefill_cache = 0;
    mu_gpu_plan_make(&in, &q);
    CHECK(q.f16_cache == 0 && q.wtmp == 2 * in.max_matrix_elems && p.tiles == q.wtmp);
    in.prefill_cache = -1, in.available = (uint64_t)(p.total + 2e9); /* less than 3 GB spare */
    mu_gpu_plan_make(&in, &q);
    CHECK(q.f16_cache == 0 && q.fits);
    in.fast = false; /* the exact lane: f32 tiles, no cache */
    mu_gpu_plan_make(&in, &q);
    CHECK(q.f16_cache == 0 && q.wtmp == 4 * in.max_matrix_elems);
    /* a later session of the model: the weights are resident */
    in = glimmer_30b(4096, 80 * GIB);
    in.weight_bytes = in.norm_bytes = 0;
    in.cache_resident = true;
    mu_gpu_plan_make(&in, &p);
    CHECK(p.weights == 0 && p.f16_cache == 0 && p.wtmp == 0);
    CHECK(p.total == p.kv + p.buffers + p.logits + p.reserve);
    /* the buffers grow with the chunk */
    in.n_batch = 64;
    mu_gpu_plan_make(&in, &q);
    CHECK(q.buffers < p.buffers && q.logits == (64ull * 202048 * 4 + 255) / 256 * 256);
    /* the total is the parts' sum */
    in = glimmer_30b(32768, 24 * GIB);
    mu_gpu_plan_make(&in, &p);
    CHECK(p.total == p.weights + p.f16_cache + p.kv + p.buffers + p.logits + p.reserve);
}

static void test_sizes(void) {
    const struct {
        const char *s;
        uint64_t v;
    } ok[] = {{"24G", 24 * GIB}, {"24GiB", 24 * GIB}, {"24gb", 24 * GIB}, {"20480M", 20 * GIB},
              {"1.5T", 1536 * GIB}, {"123456", 123456}, {"512K", 512 * 1024}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 0;
        CHECKF(mu_parse_mem_size(ok[i].s, &v) && v == ok[i].v, "'%s' -> %llu", ok[i].s, (unsigned long long)v);
    }
    const char *bad[] = {"", "G", "24X", "-1G", "0", "24 G", " 24G", "24GG", "nan", "inf", "24Gi"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 7;
        CHECKF(!mu_parse_mem_size(bad[i], &v), "'%s' was taken as %llu", bad[i], (unsigned long long)v);
    }
}

int main(void) {
    test_glimmer_caps();
    test_arithmetic();
    test_sizes();
    return tl_finish("gpu_plan");
}
