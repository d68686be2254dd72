#include "tinymodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "testlib.h"

tm_opts tm_defaults(void) {
    tm_opts o;
    memset(&o, 0, sizeof o);
    o.arch = "muse-glimmer";
    o.n_embd = 64, o.n_head = 4, o.n_head_kv = 2, o.head_dim = 16, o.n_ff = 96, o.n_layer = 4;
    o.window = 8, o.ctx = 128, o.vocab = 50;
    o.softcap = 20.0f;
    o.weight_type = MU_TYPE_F32;
    o.seed = 7;
    return o;
}

typedef struct tplan {
    char name[64];
    int64_t ne0, ne1;
    int kind; /* 0 weight, 1 norm ~1, 2 const */
    float value;
} tplan;

static void key(char *buf, size_t cap, const tm_opts *o, const char *suffix) {
    snprintf(buf, cap, "%s.%s", o->arch, suffix);
}

static bool omitted(const tm_opts *o, const char *suffix) { return o->omit_key && !strcmp(o->omit_key, suffix); }

/* True for the tensor whose shape the test corrupts ("attn_q.weight" names
 * that tensor in every layer; global names match exactly). */
static bool is_bad(const tm_opts *o, const char *name) {
    if (!o->bad_shape) return false;
    const char *base = name;
    if (!strncmp(name, "blk.", 4)) {
        const char *dot = strchr(name + 4, '.');
        base = dot ? dot + 1 : name;
    }
    return !strcmp(base, o->bad_shape);
}

uint8_t *tm_build(const tm_opts *o, size_t *size) {
    const bool mg = !strcmp(o->arch, "muse-glimmer");
    gguf_writer *w = gguf_writer_new();
    char k[128];
    gguf_writer_add_str(w, "general.architecture", o->arch);
#define U32(sfx, v)                                   \
    if (!omitted(o, sfx)) {                           \
        key(k, sizeof k, o, sfx);                     \
        gguf_writer_add_u32(w, k, (uint32_t)(v));     \
    }
#define F32(sfx, v)                                   \
    if (!omitted(o, sfx)) {                           \
        key(k, sizeof k, o, sfx);                     \
        gguf_writer_add_f32(w, k, (float)(v));        \
    }
    U32("context_length", o->ctx);
    U32("embedding_length", o->n_embd);
    U32("block_count", o->n_layer);
    U32("feed_forward_length", o->n_ff);
    U32("attention.head_count", o->n_head);
    U32("attention.head_count_kv", o->n_head_kv);
    U32("attention.key_length", o->head_dim);
    U32("attention.value_length", o->head_dim);
    F32("attention.layer_norm_rms_epsilon", 1e-5);
    F32("rope.freq_base", 10000.0);
    if (mg) {
        U32("attention.sliding_window", o->window);
        F32("logit_scale", 0.19611613513818404);
        if (o->softcap >= 0) F32("final_logit_softcapping", o->softcap);
        if (o->rope_base_swa > 0) F32("rope.freq_base_swa", o->rope_base_swa);
        key(k, sizeof k, o, "attention.sliding_window_pattern");
        if (o->pattern == 0 || o->pattern == -2) {
            int n = o->pattern == -2 ? o->n_layer + 1 : o->n_layer;
            bool *p = malloc((size_t)n);
            for (int l = 0; l < n; l++) p[l] = l % 4 != 3;
            gguf_writer_add_arr(w, k, GGUF_TYPE_BOOL, p, (uint64_t)n);
            free(p);
        } else if (o->pattern > 0) {
            gguf_writer_add_u32(w, k, (uint32_t)o->pattern);
        }
    }
#undef U32
#undef F32

    const int64_t E = o->n_embd, Q = (int64_t)o->n_head * o->head_dim, KV = (int64_t)o->n_head_kv * o->head_dim;
    tplan plan[8 + 16 * 64];
    int n = 0;
#define P(nm, a, b, kd, v)                                                   \
    do {                                                                      \
        snprintf(plan[n].name, sizeof plan[n].name, "%s", nm);                \
        plan[n].ne0 = a, plan[n].ne1 = b, plan[n].kind = kd, plan[n].value = v; \
        n++;                                                                  \
    } while (0)
    P("token_embd.weight", E, o->vocab, 0, 0.5f);
    P("output_norm.weight", E, 1, 1, 0);
    if (!o->tied_output) P("output.weight", E, o->vocab, 0, 0.5f);
    for (int l = 0; l < o->n_layer; l++) {
        char nm[64];
#define L(s) (snprintf(nm, sizeof nm, "blk.%d." s, l), nm)
        P(L("attn_norm.weight"), E, 1, 1, 0);
        P(L("attn_q.weight"), E, Q, 0, 0);
        P(L("attn_k.weight"), E, KV, 0, 0);
        P(L("attn_v.weight"), E, KV, 0, 0);
        P(L("attn_output.weight"), Q, E, 0, 0);
        if (mg) {
            P(L("attn_q_norm.weight"), o->head_dim, 1, 2, 3.87f);
            P(L("attn_k_norm.weight"), o->head_dim, 1, 2, 1.0f);
            P(L("attn_gate.weight"), E, Q, 0, 0);
            P(L("post_attention_norm.weight"), E, 1, 1, 0);
            P(L("post_ffw_norm.weight"), E, 1, 1, 0);
        }
        P(L("ffn_norm.weight"), E, 1, 1, 0);
        P(L("ffn_gate.weight"), E, o->n_ff, 0, 0);
        P(L("ffn_up.weight"), E, o->n_ff, 0, 0);
        P(L("ffn_down.weight"), o->n_ff, E, 0, 0);
#undef L
    }
#undef P
    uint32_t types[sizeof plan / sizeof plan[0]];
    int kept[sizeof plan / sizeof plan[0]], n_kept = 0;
    for (int i = 0; i < n; i++) {
        if (o->omit_tensor && !strcmp(o->omit_tensor, plan[i].name)) continue;
        int64_t ne[2] = {plan[i].ne0, plan[i].ne1};
        if (is_bad(o, plan[i].name)) ne[1] += 1;
        types[i] = plan[i].kind == 0 ? o->weight_type : MU_TYPE_F32;
        gguf_writer_add_tensor(w, plan[i].name, types[i], plan[i].ne1 == 1 && ne[1] == 1 ? 1 : 2, ne);
        kept[n_kept++] = i;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    gguf_writer_begin(w, fp);
    uint64_t rng = o->seed;
    for (int ki = 0; ki < n_kept; ki++) {
        const tplan *t = &plan[kept[ki]];
        int64_t ne1 = t->ne1 + (is_bad(o, t->name) ? 1 : 0);
        int64_t count = t->ne0 * ne1;
        float *v = malloc(sizeof(float) * (size_t)count);
        for (int64_t j = 0; j < count; j++) {
            if (t->kind == 0) v[j] = tl_rand_normal(&rng) / sqrtf((float)t->ne0) * (t->value > 0 ? t->value * 8 : 1);
            else if (t->kind == 1) v[j] = 1.0f + 0.1f * tl_rand_normal(&rng);
            else v[j] = t->value;
        }
        uint32_t ty = types[kept[ki]];
        uint64_t rb = mu_row_bytes(ty, t->ne0);
        uint8_t *q = malloc((size_t)(rb * (uint64_t)ne1));
        for (int64_t r = 0; r < ne1; r++) mu_quant_row(ty, v + r * t->ne0, q + (uint64_t)r * rb, t->ne0);
        gguf_writer_write_tensor(w, ki, q);
        free(q);
        free(v);
    }
    gguf_writer_finish(w);
    fclose(fp);
    gguf_writer_free(w);
    *size = len;
    return (uint8_t *)buf;
}

const char *tm_write_temp(const uint8_t *buf, size_t size, const char *tag) {
    static char path[256];
    snprintf(path, sizeof path, "/tmp/muser-test-%d-%s.gguf", (int)getpid(), tag);
    FILE *f = fopen(path, "wb");
    if (!f) return NULL;
    fwrite(buf, 1, size, f);
    fclose(f);
    return path;
}
