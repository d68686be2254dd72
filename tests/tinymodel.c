#include "tinymodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "muser.h"
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

/* A small vocabulary of exactly o->vocab tokens: the protocol's special
 * tokens, a few words with merges (gpt2) or scores (llama), then filler. */
static void add_tokenizer(gguf_writer *w, const tm_opts *o) {
    const bool bpe = !strcmp(o->tokenizer, "gpt2");
    static const char *const bpe_base[] = {
        "<|begin_of_text|>", "<|end_of_text|>", "<|start|>", "<|message|>", "<|eom|>", "<|eot|>",
        "\xc4\xa0", "t", "h", "e", "a", "\xc4\xa0t", "he", "\xc4\xa0the", "<", "|", ">", "x"};
    static const char *const spm_base[] = {"<unk>", "<s>", "</s>", "<0x0A>", "<0x20>", "\xe2\x96\x81",
                                           "\xe2\x96\x81the", "t", "h", "e", "a", "<|eot_id|>"};
    const char *const *base = bpe ? bpe_base : spm_base;
    const int n_base = bpe ? (int)(sizeof bpe_base / sizeof *bpe_base) : (int)(sizeof spm_base / sizeof *spm_base);
    const int n = o->vocab;
    char (*filler)[16] = calloc((size_t)n, sizeof *filler);
    const char **texts = calloc((size_t)n, sizeof *texts);
    int32_t *types = calloc((size_t)n, sizeof *types);
    float *scores = calloc((size_t)n, sizeof *scores);
    for (int i = 0; i < n; i++) {
        if (i < n_base) {
            texts[i] = base[i];
        } else {
            snprintf(filler[i], sizeof filler[i], bpe ? "w%d" : "\xe2\x96\x81w%d", i);
            texts[i] = filler[i];
        }
        /* llama.cpp's token types: 1 normal, 3 control, 6 byte */
        size_t len = strlen(texts[i]);
        bool tag = len > 2 && texts[i][0] == '<' && texts[i][len - 1] == '>';
        types[i] = !tag ? 1 : strncmp(texts[i], "<0x", 3) ? 3 : 6;
        scores[i] = -(float)i;
    }
    gguf_writer_add_str(w, "tokenizer.ggml.model", o->tokenizer);
    if (bpe && o->pre) gguf_writer_add_str(w, "tokenizer.ggml.pre", o->pre);
    gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", texts, NULL, (uint64_t)n);
    gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)n);
    if (bpe) {
        static const char *const merges[] = {"\xc4\xa0 t", "h e", "\xc4\xa0t he"};
        gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 3);
        gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 0);
        gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 5);
        gguf_writer_add_u32(w, "tokenizer.ggml.eom_token_id", 4);
    } else {
        gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, (uint64_t)n);
        gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true);
    }
    free(filler);
    free(texts);
    free(types);
    free(scores);
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
    if (o->tokenizer) add_tokenizer(w, o);

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

muser_model *tm_load(const tm_opts *o, const char *tag) {
    size_t size = 0;
    uint8_t *buf = tm_build(o, &size);
    const char *path = buf ? tm_write_temp(buf, size, tag) : NULL;
    free(buf);
    muser_model *m = NULL;
    if (path && muser_model_load(path, &m) != 0) m = NULL;
    if (path) remove(path);
    return m;
}
