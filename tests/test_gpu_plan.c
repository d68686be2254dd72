/* test_gpu_plan.c — the CUDA session's GPU memory plan (cuda_plan.c), its
 * arithmetic and its advice, with no GPU: the 30B's geometry with the
 * Meta mix, and a small model. The plan of the first N layers of a
 * --gpu-layers split (no head, no logits), the most layers that fit under
 * a cap (auto) and the advice naming them; the same over a model's layer
 * views, with weights already resident counted once. Also the --gpu-mem
 * size parser. */
#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "cuda/cuda_plan.h"
#include "model/model.h"
#include "testlib.h"
#include "tinymodel.h"
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
    in.fast = true, in.prefill_cache = -1, in.head = true;
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
    mu_gpu_plan_explain(&in, &p, 18 * GIB, 79 * GIB, 0, -1, 52, msg, sizeof msg);
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
    mu_gpu_plan_explain(&in, &p, 0, 12 * GIB, 0, -1, 52, msg, sizeof msg);
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

/* ---- --gpu-layers: the plan of the first n layers ---------------------------------------------- */

/* The 30B above cut to its first n layers: the embedding always, each
 * layer a 52nd of the rest, the head (output matrix, ~1.1 GB at Q6_K)
 * only with every layer; 3 of 4 layers sliding (the last of each 4 full). */
#define GL_HEAD 1100000000ull
#define GL_EMBD 1100000000ull
static void glimmer_layers(void *ctx, int n, mu_gpu_plan_in *in) {
    const uint64_t available = *(const uint64_t *)ctx;
    *in = glimmer_30b(32768, available);
    const uint64_t per = (16750000000ull - GL_HEAD - GL_EMBD) / 52;
    in->n_layer = n;
    in->n_swa_layers = n - n / 4;
    in->head = n == 52;
    in->weight_bytes = GL_EMBD + (uint64_t)n * per + (in->head ? GL_HEAD : 0);
    in->f16_cache_bytes = in->f16_cache_bytes / 52 * (uint64_t)n;
}

static void test_layers_30b(void) {
    mu_gpu_plan p, q;
    uint64_t avail = 80 * GIB;
    /* all 52 are the whole plan: the head and the logits with them */
    mu_gpu_plan_in in, whole = glimmer_30b(32768, avail);
    glimmer_layers(&avail, 52, &in);
    mu_gpu_plan_make(&in, &p);
    CHECK(p.logits == (512ull * 202048 * 4 + 255) / 256 * 256);
    CHECK(mu_gpu_plan_fit_layers(52, glimmer_layers, &avail, &q) == 52 && q.total == p.total);
    (void)whole;
    /* fewer: no head, no logits; every layer adds its weights and KV rows */
    uint64_t last = 0;
    for (int n = 1; n <= 52; n++) {
        glimmer_layers(&avail, n, &in);
        mu_gpu_plan_make(&in, &q);
        CHECKF(q.total > last, "%d layers: %.3f GiB, no more than %d layers'", n, q.total / (double)GIB, n - 1);
        CHECK(n == 52 || q.logits == 0);
        last = q.total;
    }
    /* under 12 GiB at -c 32768: the most that fit, and no more */
    avail = 12 * GIB;
    const int k = mu_gpu_plan_fit_layers(52, glimmer_layers, &avail, &p);
    CHECKF(k > 0 && k < 52 && p.fits, "%d layers fit 12 GiB", k);
    glimmer_layers(&avail, k + 1, &in);
    mu_gpu_plan_make(&in, &q);
    CHECKF(!q.fits, "%d layers fit too", k + 1);
    printf("30B meta mix, -c 32768, 12 GiB: %d of 52 layers fit (%.2f GiB)\n", k, p.total / (double)GIB);
    /* the advice of the whole plan names them */
    glimmer_layers(&avail, 52, &in);
    mu_gpu_plan_make(&in, &q);
    char msg[1400], want[96];
    mu_gpu_plan_explain(&in, &q, 12 * GIB, 79 * GIB, 0, k, 52, msg, sizeof msg);
    snprintf(want, sizeof want, "-ngl %d (%d of the 52 layers on the GPU", k, k);
    printf("all 52 under 12 GiB: %s\n", msg);
    CHECKF(strstr(msg, want) != NULL, "message: %s", msg);
    /* the weights alone do not fit, some layers do: the layers are the advice */
    avail = 3 * GIB;
    const int k3 = mu_gpu_plan_fit_layers(52, glimmer_layers, &avail, NULL);
    glimmer_layers(&avail, 52, &in);
    mu_gpu_plan_make(&in, &q);
    mu_gpu_plan_explain(&in, &q, 3 * GIB, 79 * GIB, 0, k3, 52, msg, sizeof msg);
    snprintf(want, sizeof want, "What would fit: -ngl %d (", k3);
    CHECKF(k3 > 0 && k3 < k && strstr(msg, want), "3 GiB: %d layers; message: %s", k3, msg);
    /* nothing fits: no layer advice, the old message */
    avail = GIB / 8;
    CHECK(mu_gpu_plan_fit_layers(52, glimmer_layers, &avail, NULL) == 0);
    mu_gpu_plan_explain(&in, &q, GIB / 8, 79 * GIB, 0, 0, 52, msg, sizeof msg);
    CHECKF(!strstr(msg, "-ngl") && strstr(msg, "no context fits"), "message: %s", msg);
}

/* resident(view): the first `n` layers' view is resident (a session holds it) */
typedef struct resident_probe {
    const mu_model *view;
    int asked;
} resident_probe;
static bool probe_resident(const mu_model *view, void *ctx, bool *f16) {
    resident_probe *r = ctx;
    r->asked++;
    *f16 = false;
    return view == r->view;
}
static int64_t rec_bound(const mu_model *v) { return 64 + 16 * (int64_t)v->hp.n_layer + 32 * (int64_t)v->hp.n_rot; }

static void test_layers_model(void) {
    tm_opts o = tm_defaults();
    o.n_layer = 6;
    size_t size = 0;
    uint8_t *img = tm_build(&o, &size);
    muser_model *m = NULL;
    const char *path = img ? tm_write_temp(img, size, "gpu_plan") : NULL;
    CHECK(path && muser_model_load(path, &m) == 0);
    if (path) remove(path); /* (the model maps it: the name can go) */
    free(img);
    if (!m) return;
    const int L = m->hp.n_layer;
    mu_gpu_plan_in whole, in, prev;
    memset(&prev, 0, sizeof prev);
    mu_gpu_plan_geometry(m, mu_gpu_weight_bytes_bound, 4096, &whole);
    CHECK(whole.head && whole.n_layer == L);
    /* the views' geometry: a layer's matrices and norms at a time, the head with the last */
    for (int n = 1; n <= L; n++) {
        const mu_model *v = mu_model_layer_view(m, 0, n);
        CHECK(v != NULL);
        if (!v) break;
        mu_gpu_plan_geometry(v, mu_gpu_weight_bytes_bound, 4096, &in);
        CHECK(in.n_layer == n && in.head == (n == L));
        if (n > 1) {
            const mu_layer *ly = &m->layers[n - 1];
            const mu_weight *mats[] = {&ly->wq, &ly->wk, &ly->wv, &ly->wgate, &ly->wo, &ly->ffn_gate, &ly->ffn_up,
                                       &ly->ffn_down};
            uint64_t add = 0;
            for (size_t i = 0; i < 8; i++) add += mu_gpu_weight_bytes_bound(mats[i]);
            if (n == L) add += mu_gpu_weight_bytes_bound(&m->output);
            CHECKF(in.weight_bytes - prev.weight_bytes == add, "layer %d adds %llu bytes, not %llu", n - 1,
                   (unsigned long long)(in.weight_bytes - prev.weight_bytes), (unsigned long long)add);
            CHECK(in.n_swa_layers >= prev.n_swa_layers && in.n_swa_layers <= prev.n_swa_layers + 1);
        }
        prev = in;
    }
    CHECK(prev.weight_bytes == whole.weight_bytes && prev.norm_bytes == whole.norm_bytes);
    /* auto over the model: under each plan's own total exactly that many layers fit */
    mu_gpu_plan_in settings = whole;
    settings.n_ctx = 1024, settings.n_batch = 64, settings.fast = true, settings.prefill_cache = 0;
    resident_probe probe = {NULL, 0};
    mu_gpu_layers_model c = {m, mu_gpu_weight_bytes_bound, rec_bound, probe_resident, &probe, &settings};
    mu_gpu_plan plans[16];
    for (int n = 1; n <= L; n++) {
        settings.available = UINT64_MAX / 2;
        mu_gpu_plan_model_layers(&c, n, &in);
        mu_gpu_plan_make(&in, &plans[n]);
        CHECK(in.head == (n == L) && (n == L || plans[n].logits == 0));
    }
    for (int n = 1; n <= L; n++) {
        settings.available = plans[n].total;
        CHECKF(mu_gpu_plan_fit_layers(L, mu_gpu_plan_model_layers, &c, NULL) == n, "under %d layers' plan", n);
    }
    settings.available = plans[1].total - 1;
    CHECK(mu_gpu_plan_fit_layers(L, mu_gpu_plan_model_layers, &c, NULL) == 0);
    CHECK(probe.asked > 0);
    /* a view already resident counts its weights once: it fits where its
     * plan less the weights does */
    probe.view = mu_model_layer_view(m, 0, 3);
    settings.available = plans[3].total - plans[3].weights;
    CHECK(mu_gpu_plan_fit_layers(L, mu_gpu_plan_model_layers, &c, NULL) >= 3);
    printf("views of a %d-layer model: each layer's weights once, the head with the last; auto under every plan's "
           "total picks that plan's layers\n", L);
    muser_model_free(m);
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

/* --parallel 16 -c 4096: the first session uploads the weights and makes
 * the work buffers; the 15 others share both and add their KV caches, their
 * one-row buffers and graphs. The bound: file + 16 x KV + 3 GB. */
static void test_parallel_sessions(void) {
    mu_gpu_plan_in in = glimmer_30b(4096, 80 * GIB);
    in.prefill_cache = 0;
    mu_gpu_plan first, later;
    mu_gpu_plan_make(&in, &first);
    CHECK(!first.work_shared && first.work > 0 && first.work < first.total);
    mu_gpu_plan_in l = in;
    l.weight_bytes = l.norm_bytes = 0, l.work_shared = true;
    mu_gpu_plan_make(&l, &later);
    char line[320];
    mu_gpu_plan_format(&later, line, sizeof line);
    printf("30B meta mix, -c 4096, a later session of --parallel: %s\n", line);
    CHECK(later.work_shared && later.work == 0 && later.logits == 0 && later.wtmp == first.wtmp);
    CHECKF(later.kv == first.kv, "KV %llu vs %llu", (unsigned long long)later.kv, (unsigned long long)first.kv);
    /* what a later session holds is what the first holds beyond the weights and the work it carries */
    CHECKF(first.total - first.weights - first.work == later.total, "%llu vs %llu",
           (unsigned long long)(first.total - first.weights - first.work), (unsigned long long)later.total);
    CHECKF(later.buffers < (16u << 20) && later.reserve < (64u << 20), "a later session's own buffers %.1f MiB",
           later.buffers / 1048576.0);
    const uint64_t all16 = first.total + 15 * later.total, bound = in.weight_bytes + 16 * first.kv + 3 * GIB;
    printf("--parallel 16 -c 4096: %.2f GiB (bound %.2f)\n", all16 / (double)GIB, bound / (double)GIB);
    CHECKF(all16 <= bound, "--parallel 16 holds %.2f GiB, more than file + 16 x KV + 3 GiB = %.2f",
           all16 / (double)GIB, bound / (double)GIB);
}

int main(void) {
    test_glimmer_caps();
    test_arithmetic();
    test_layers_30b();
    test_layers_model();
    test_sizes();
    test_parallel_sessions();
    return tl_finish("gpu_plan");
}
