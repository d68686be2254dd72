/* test_tp.c — the tensor-parallel plan, checked on the CPU: Muse Glimmer's
 * geometry splits 1/2/4/8/16 ways and refuses the rest with a reason; every
 * head, FFN column and vocabulary row is owned exactly once; and the sliced
 * weight views compute exactly what the whole matrices compute (row slices
 * equal, column-slice partial sums add up to the full product). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/kernels.h"
#include "engine/tp.h"
#include "muser.h"
#include "quant/quant.h"
#include "testlib.h"
#include "tinymodel.h"

static const uint8_t dummy[1];

/* A weightless model with Muse Glimmer 30B's geometry and Meta's mix. */
static void fake_muse_glimmer(mu_model *m, mu_layer *layers) {
    memset(m, 0, sizeof *m);
    mu_hparams *hp = &m->hp;
    hp->arch = MU_ARCH_MUSE_GLIMMER;
    hp->n_vocab = 202048, hp->n_embd = 6656, hp->n_layer = 52, hp->n_head = 32, hp->n_head_kv = 2;
    hp->head_dim = 128, hp->n_ff = 19968;
    m->layers = layers;
    mu_weight w = {dummy, MU_TYPE_Q4_K, 6656, 1, 0, "w"};
    w.row_bytes = mu_row_bytes(MU_TYPE_Q4_K, 6656);
    m->tok_embd = w, m->tok_embd.rows = hp->n_vocab;
    m->output = w, m->output.type = MU_TYPE_Q5_K, m->output.rows = hp->n_vocab;
    for (int l = 0; l < 52; l++) {
        mu_layer *L = &layers[l];
        memset(L, 0, sizeof *L);
        L->wq = L->wgate = w, L->wq.rows = L->wgate.rows = 4096;
        L->wk = L->wv = w, L->wk.rows = L->wv.rows = 256;
        L->wo = w, L->wo.cols = 4096, L->wo.rows = 6656;
        L->ffn_gate = L->ffn_up = w, L->ffn_gate.rows = L->ffn_up.rows = 19968;
        L->ffn_down = w, L->ffn_down.cols = 19968, L->ffn_down.rows = 6656;
        if (l % 2) L->ffn_down.type = L->wv.type = MU_TYPE_Q6_K;
    }
}

static void test_plans(void) {
    static mu_layer layers[52];
    mu_model m;
    fake_muse_glimmer(&m, layers);
    mu_tp_shard sh[MU_TP_MAX_RANKS];
    const int ok_counts[] = {1, 2, 4, 8, 16};
    for (size_t i = 0; i < sizeof ok_counts / sizeof ok_counts[0]; i++) {
        int n = ok_counts[i];
        int rc = mu_tp_plan(&m, n, sh);
        CHECKF(rc == 0, "n=%d: %s", n, muser_last_error());
        if (rc) continue;
        int heads[32] = {0};
        int64_t ff = 0, voc = 0;
        uint64_t bytes = 0, max_bytes = 0;
        for (int r = 0; r < n; r++) {
            for (int h = sh[r].head0; h < sh[r].head0 + sh[r].n_heads; h++) heads[h]++;
            /* every query head's KV head is among the rank's KV heads */
            for (int h = sh[r].head0; h < sh[r].head0 + sh[r].n_heads; h++) {
                int kv = h / 16;
                CHECK(kv >= sh[r].kv_head0 && kv < sh[r].kv_head0 + sh[r].n_kv_heads);
            }
            CHECK(sh[r].ff0 == ff && sh[r].n_ff % 256 == 0 && sh[r].n_ff > 0);
            ff += sh[r].n_ff;
            CHECK(sh[r].vocab0 == voc);
            voc += sh[r].n_vocab;
            CHECK(((int64_t)sh[r].n_heads * 128) % 256 == 0);
            bytes += sh[r].weight_bytes;
            if (sh[r].weight_bytes > max_bytes) max_bytes = sh[r].weight_bytes;
        }
        for (int h = 0; h < 32; h++) CHECK(heads[h] == 1);
        CHECK(ff == 19968 && voc == 202048);
        /* Each rank streams about 1/n of the weights (K/V rows replicate when a
         * KV group spans ranks; the ffn split may be uneven by one block). */
        mu_tp_shard one;
        mu_tp_plan(&m, 1, &one);
        double ratio = (double)max_bytes * n / (double)one.weight_bytes;
        CHECKF(ratio < 1.10, "n=%d: the largest rank streams %.3f of its share", n, ratio);
        printf("  %2d GPUs: largest rank %.3f GB of %.3f GB per token (%.3fx its even share)\n", n, max_bytes / 1e9,
               one.weight_bytes / 1e9, ratio);
    }
    mu_tp_plan(&m, 2, sh);
    CHECK(sh[0].kv_head0 == 0 && sh[0].n_kv_heads == 1 && sh[1].kv_head0 == 1 && sh[1].n_kv_heads == 1);
    CHECK(sh[0].n_ff == 9984 && sh[1].ff0 == 9984);
    mu_tp_plan(&m, 4, sh);
    CHECK(sh[1].kv_head0 == 0 && sh[2].kv_head0 == 1 && sh[3].n_kv_heads == 1);
    CHECK(sh[0].n_ff == 20 * 256 && sh[3].n_ff == 19 * 256);
    CHECK(mu_tp_plan(&m, 3, sh) == MUSER_EUNSUPPORTED);
    CHECK(mu_tp_plan(&m, 32, sh) == MUSER_EUNSUPPORTED);
    CHECK(strstr(muser_last_error(), "blocks") != NULL);
    CHECK(mu_tp_plan(&m, 0, sh) == MUSER_EINVAL);
    CHECK(mu_tp_plan(&m, 65, sh) == MUSER_EINVAL);
}

/* Sliced views compute what the whole matrices compute. */
static void test_sliced_math(void) {
    tm_opts o = tm_defaults();
    o.n_embd = 256, o.n_head = 4, o.n_head_kv = 2, o.head_dim = 128, o.n_ff = 768, o.vocab = 64;
    o.weight_type = MU_TYPE_Q4_K;
    muser_model *mm = tm_load(&o, "tp");
    CHECK(mm != NULL);
    const mu_model *m = mm;
    const mu_cpu_kernels *k = mu_cpu_kernels_scalar();
    mu_tp_shard sh[2];
    CHECK(mu_tp_plan(m, 2, sh) == 0);
    const mu_layer *L = &m->layers[0];
    uint64_t rng = 11;
    float x[768], full[768], part[768], sum[768];
    for (int i = 0; i < 768; i++) x[i] = tl_rand_normal(&rng);

    /* ffn_down: column slices over the FFN, partial sums add up */
    k->matvec_f32[L->ffn_down.type](L->ffn_down.data, L->ffn_down.row_bytes, 256, x, 768, full);
    memset(sum, 0, sizeof sum);
    for (int r = 0; r < 2; r++) {
        mu_weight v = mu_weight_cols(&L->ffn_down, sh[r].ff0, sh[r].n_ff);
        k->matvec_f32[v.type](v.data, v.row_bytes, v.rows, x + sh[r].ff0, v.cols, part);
        for (int i = 0; i < 256; i++) sum[i] += part[i];
    }
    double err = 0;
    for (int i = 0; i < 256; i++) err = fmax(err, fabs(sum[i] - full[i]));
    CHECKF(err < 1e-4, "ffn_down split error %.3g", err);

    /* Wo: column slices by heads */
    k->matvec_f32[L->wo.type](L->wo.data, L->wo.row_bytes, 256, x, 512, full);
    memset(sum, 0, sizeof sum);
    for (int r = 0; r < 2; r++) {
        int64_t c0 = (int64_t)sh[r].head0 * 128, nc = (int64_t)sh[r].n_heads * 128;
        mu_weight v = mu_weight_cols(&L->wo, c0, nc);
        k->matvec_f32[v.type](v.data, v.row_bytes, v.rows, x + c0, v.cols, part);
        for (int i = 0; i < 256; i++) sum[i] += part[i];
    }
    err = 0;
    for (int i = 0; i < 256; i++) err = fmax(err, fabs(sum[i] - full[i]));
    CHECKF(err < 1e-4, "Wo split error %.3g", err);

    /* ffn_gate and Wq: row slices are exact */
    k->matvec_f32[L->ffn_gate.type](L->ffn_gate.data, L->ffn_gate.row_bytes, 768, x, 256, full);
    for (int r = 0; r < 2; r++) {
        mu_weight v = mu_weight_rows(&L->ffn_gate, sh[r].ff0, sh[r].n_ff);
        k->matvec_f32[v.type](v.data, v.row_bytes, v.rows, x, 256, part);
        CHECK(memcmp(part, full + sh[r].ff0, sizeof(float) * (size_t)sh[r].n_ff) == 0);
    }
    muser_model_free(mm);
}

int main(void) {
    test_plans();
    test_sliced_math();
    return tl_finish("tp");
}
