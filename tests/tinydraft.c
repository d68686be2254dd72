#include "tinydraft.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "testlib.h"

td_opts td_defaults(void) {
    td_opts o;
    memset(&o, 0, sizeof o);
    o.n_embd = 64, o.n_head = 4, o.n_head_kv = 2, o.head_dim = 16, o.n_ff = 96, o.n_layer = 2;
    o.window = 8, o.ctx = 128, o.vocab = 50;
    o.n_target_layers = 3;
    o.target_layers[0] = 1, o.target_layers[1] = 2, o.target_layers[2] = 3;
    o.block_size = 6;
    o.mask_token = 49;
    o.seed = 11;
    return o;
}

typedef struct dplan {
    char name[64];
    int64_t ne0, ne1;
    int kind; /* 0 weight, 1 norm ~1, 2 i64 d2t */
} dplan;

static bool omitted(const td_opts *o, const char *key) { return o->omit_key && !strcmp(o->omit_key, key); }

uint8_t *td_build(const td_opts *o, size_t *size) {
    gguf_writer *w = gguf_writer_new();
    gguf_writer_add_str(w, "general.architecture", o->arch ? o->arch : "dflash");
#define U32(k, v) \
    if (!omitted(o, k)) gguf_writer_add_u32(w, k, (uint32_t)(v))
    U32("dflash.context_length", o->ctx);
    U32("dflash.embedding_length", o->n_embd);
    U32("dflash.block_count", o->n_layer);
    U32("dflash.feed_forward_length", o->n_ff);
    U32("dflash.attention.head_count", o->n_head);
    U32("dflash.attention.head_count_kv", o->n_head_kv);
    U32("dflash.attention.key_length", o->head_dim);
    U32("dflash.attention.value_length", o->head_dim);
    U32("dflash.block_size", o->block_size);
    U32("tokenizer.ggml.mask_token_id", o->mask_token);
#undef U32
    if (!omitted(o, "dflash.attention.layer_norm_rms_epsilon"))
        gguf_writer_add_f32(w, "dflash.attention.layer_norm_rms_epsilon", 1e-6f);
    gguf_writer_add_f32(w, "dflash.rope.freq_base", 10000.0f);
    if (o->window > 0) {
        gguf_writer_add_u32(w, "dflash.attention.sliding_window", (uint32_t)o->window);
        bool *pat = calloc((size_t)o->n_layer, 1);
        for (int l = 0; l < o->n_layer; l++) pat[l] = l % 2 == 0; /* sliding, full, ... */
        if (!omitted(o, "dflash.attention.sliding_window_pattern"))
            gguf_writer_add_arr(w, "dflash.attention.sliding_window_pattern", GGUF_TYPE_BOOL, pat, (uint64_t)o->n_layer);
        free(pat);
    }
    if (!omitted(o, "dflash.target_layers"))
        gguf_writer_add_arr(w, "dflash.target_layers", GGUF_TYPE_INT32, o->target_layers, (uint64_t)o->n_target_layers);

    const int64_t E = o->n_embd, Q = (int64_t)o->n_head * o->head_dim, KV = (int64_t)o->n_head_kv * o->head_dim;
    dplan plan[16 + 16 * 16];
    int n = 0;
#define P(nm, a, b, kd)                                            \
    do {                                                            \
        snprintf(plan[n].name, sizeof plan[n].name, "%s", nm);      \
        plan[n].ne0 = a, plan[n].ne1 = b, plan[n].kind = kd;        \
        n++;                                                        \
    } while (0)
    const int head_rows = o->d2t_rows > 0 ? o->d2t_rows : o->vocab;
    if (o->own_head || o->d2t_rows > 0) P("output.weight", E, head_rows, 0);
    if (o->own_head) P("token_embd.weight", E, o->vocab, 0);
    if (o->d2t_rows > 0) P("d2t", o->d2t_rows, 1, 2);
    P("fc.weight", (int64_t)o->n_target_layers * E, E, 0);
    P("enc.output_norm.weight", E, 1, 1);
    P("output_norm.weight", E, 1, 1);
    if (o->extra_tensor) P(o->extra_tensor, 4, 1, 1);
    for (int l = 0; l < o->n_layer; l++) {
        char nm[64];
#define L(s) (snprintf(nm, sizeof nm, "blk.%d." s, l), nm)
        P(L("attn_norm.weight"), E, 1, 1);
        P(L("attn_q.weight"), E, Q, 0);
        P(L("attn_k.weight"), E, KV, 0);
        P(L("attn_v.weight"), E, KV, 0);
        P(L("attn_output.weight"), Q, E, 0);
        P(L("attn_q_norm.weight"), o->head_dim, 1, 1);
        P(L("attn_k_norm.weight"), o->head_dim, 1, 1);
        P(L("ffn_norm.weight"), E, 1, 1);
        P(L("ffn_gate.weight"), E, o->n_ff, 0);
        P(L("ffn_up.weight"), E, o->n_ff, 0);
        P(L("ffn_down.weight"), o->n_ff, E, 0);
#undef L
    }
#undef P
    int kept[sizeof plan / sizeof plan[0]], n_kept = 0;
    for (int i = 0; i < n; i++) {
        if (o->omit_tensor && !strcmp(o->omit_tensor, plan[i].name)) continue;
        int64_t ne[2] = {plan[i].ne0, plan[i].ne1};
        gguf_writer_add_tensor(w, plan[i].name, plan[i].kind == 2 ? MU_TYPE_I64 : MU_TYPE_F32, plan[i].ne1 == 1 ? 1 : 2,
                               ne);
        kept[n_kept++] = i;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    gguf_writer_begin(w, fp);
    uint64_t rng = o->seed;
    for (int ki = 0; ki < n_kept; ki++) {
        const dplan *t = &plan[kept[ki]];
        const int64_t count = t->ne0 * t->ne1;
        if (t->kind == 2) { /* d2t: every other target id, a valid map */
            int64_t *ids = malloc(sizeof(int64_t) * (size_t)count);
            for (int64_t j = 0; j < count; j++) ids[j] = (j * 2) % o->vocab;
            gguf_writer_write_tensor(w, ki, ids);
            free(ids);
            continue;
        }
        float *v = malloc(sizeof(float) * (size_t)count);
        for (int64_t j = 0; j < count; j++)
            v[j] = t->kind == 0 ? tl_rand_normal(&rng) / sqrtf((float)t->ne0) : 1.0f + 0.1f * tl_rand_normal(&rng);
        gguf_writer_write_tensor(w, ki, v);
        free(v);
    }
    gguf_writer_finish(w);
    fclose(fp);
    gguf_writer_free(w);
    *size = len;
    return (uint8_t *)buf;
}
