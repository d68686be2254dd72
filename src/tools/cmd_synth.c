/* cmd_synth.c — `muser synth`: synthetic Muse Glimmer models in the real
 * format, with random but well-scaled weights and a valid BPE vocabulary.
 *
 * Scales (as the fixtures): projections N(0, 1/sqrt(fan_in)); token_embd
 * N(0, 0.02); output scaled so pre-softcap logits have a standard deviation
 * near 4; attn/ffn/output norms 1 + N(0, 0.1); post-norms 0.25 * (1 + N(0,
 * 0.1)); attn_q_norm 3.87 and attn_k_norm 1 (the folded QK scale).
 *
 * Small presets quantize f32 weights properly; the 30b preset writes random
 * valid blocks directly (no quantization search), in parallel, streaming to
 * disk, so Meta's 17 GB mix takes minutes (with a progress line).
 */
#include <errno.h>
#include <math.h>
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

typedef struct preset {
    const char *name;
    int n_embd, n_head, n_head_kv, head_dim, n_ff, n_layer, window, ctx, vocab;
} preset;

static const preset presets[] = {
    {"nano", 256, 4, 1, 128, 768, 8, 32, 1024, 1000},
    {"micro", 512, 32, 2, 128, 1024, 4, 64, 2048, 1000},
    {"30b", 6656, 32, 2, 128, 19968, 52, 2048, 131072, 202048},
};

/* DFlash drafters (--draft) for each preset: Meta's geometry for 30b
 * (Muse-Glimmer-30B-assistant: 5 sliding layers, 32 / 8 heads, block 16,
 * mask token 201818, target layer inputs 2, 14, 26, 38, 50), small ones
 * for the nano and micro fixtures. */
typedef struct draft_preset {
    const char *name;
    int n_layer, n_head, n_head_kv, head_dim, n_ff, window, block;
    int n_target_layers, target_layers[5];
} draft_preset;

static const draft_preset draft_presets[] = {
    /* head_dim 128, as Meta's: the CUDA backend's attention needs it */
    {"nano", 2, 2, 1, 128, 512, 32, 16, 3, {1, 4, 7}},
    {"micro", 2, 4, 2, 128, 1024, 64, 16, 3, {1, 2, 3}},
    {"30b", 5, 32, 8, 128, 19968, 2048, 16, 5, {2, 14, 26, 38, 50}},
};

#define LOGIT_SCALE 0.19611613513818404
#define QK_SCALE 3.87f

/* ---- deterministic randomness: one stream per (seed, tensor, row) ------- */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t next_u64(uint64_t *s) { return mix64(*s += 0x9E3779B97F4A7C15ull); }

static float next_normal(uint64_t *s) {
    double u1 = ((next_u64(s) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (next_u64(s) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* ---- the synthetic vocabulary ------------------------------------------- */

/* GPT-2's byte -> unicode code point map, UTF-8 encoded into out. */
static int byte_token_text(int b, char *out) {
    int cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
        cp = b;
    } else {
        int n = 0; /* rank of b among the unmapped bytes */
        for (int i = 0; i < b; i++)
            if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255))) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

typedef struct vocab {
    int n, n_merges;
    char **tokens;
    int32_t *types;
    char **merges;
    int bos, eos, eot, eom, pad;
} vocab;

static void vocab_free(vocab *v) {
    for (int i = 0; i < v->n; i++) free(v->tokens[i]);
    for (int i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
}

/* 256 byte tokens, then merges building 2- and 3-character printable
 * strings (each merge joins two existing tokens into a new one), then the
 * control tokens. Muse Glimmer's ids are used for the specials when the
 * vocabulary is full size. */
static int vocab_make(vocab *v, int n_vocab) {
    memset(v, 0, sizeof *v);
    int n_special = n_vocab >= 8192 ? 2048 : 10;
    int n_normal = n_vocab - n_special;
    if (n_normal < 256) return mu_fail(MUSER_EINVAL, "vocabulary of %d is too small", n_vocab);
    v->n = n_vocab;
    v->tokens = calloc((size_t)n_vocab, sizeof(char *));
    v->types = calloc((size_t)n_vocab, sizeof(int32_t));
    v->merges = calloc((size_t)n_normal, sizeof(char *));
    char bt[256][3];
    for (int b = 0; b < 256; b++) {
        int k = byte_token_text(b, bt[b]);
        bt[b][k] = 0;
        v->tokens[b] = strdup(bt[b]);
        v->types[b] = 1;
    }
    /* characters 32..126 (space spelled as its byte token) */
    int id = 256;
    for (int c1 = 32; c1 <= 126 && id < n_normal; c1++)
        for (int c2 = 32; c2 <= 126 && id < n_normal; c2++) {
            char t[16], m[16];
            snprintf(t, sizeof t, "%s%s", bt[c1], bt[c2]);
            snprintf(m, sizeof m, "%s %s", bt[c1], bt[c2]);
            v->tokens[id] = strdup(t);
            v->types[id++] = 1;
            v->merges[v->n_merges++] = strdup(m);
        }
    for (int c1 = 32; c1 <= 126 && id < n_normal; c1++)
        for (int c2 = 32; c2 <= 126 && id < n_normal; c2++)
            for (int c3 = 32; c3 <= 126 && id < n_normal; c3++) {
                char t[16], m[16];
                snprintf(t, sizeof t, "%s%s%s", bt[c1], bt[c2], bt[c3]);
                snprintf(m, sizeof m, "%s%s %s", bt[c1], bt[c2], bt[c3]);
                v->tokens[id] = strdup(t);
                v->types[id++] = 1;
                v->merges[v->n_merges++] = strdup(m);
            }
    if (id < n_normal) return mu_fail(MUSER_EINVAL, "vocabulary of %d is too large for the synthetic merges", n_vocab);
    const int base = n_normal;
    if (n_special == 10) {
        static const char *names[10] = {"<|begin_of_text|>", "<|end_of_text|>", "<|start|>", "<|message|>",
                                        "<|eom|>", "<|image|>", "<|patch|>", "<|video|>", "<|eot|>", "<|pad|>"};
        for (int i = 0; i < 10; i++) v->tokens[base + i] = strdup(names[i]);
        v->bos = base, v->eos = base + 1, v->eom = base + 4, v->eot = base + 8, v->pad = base + 9;
    } else {
        static const struct { int off; const char *name; } known[] = {
            {0, "<|begin_of_text|>"}, {1, "<|end_of_text|>"},   {7, "<|eom|>"},          {8, "<|eot|>"},
            {18, "<|finetune_right_pad|>"}, {22, "<|start|>"},  {23, "<|message|>"},     {80, "<|image_start|>"},
            {81, "<|image_end|>"},    {82, "<|vid_start|>"},     {83, "<|vid_end|>"},     {87, "<|vid_frame_separator|>"},
            {90, "<|image|>"},        {91, "<|video|>"},         {92, "<|patch|>"},
        };
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) v->tokens[base + known[i].off] = strdup(known[i].name);
        for (int i = 0; i < n_special; i++)
            if (!v->tokens[base + i]) {
                char t[64];
                snprintf(t, sizeof t, "<|reserved_special_token_%d|>", i);
                v->tokens[base + i] = strdup(t);
            }
        v->bos = base, v->eos = base + 1, v->eom = base + 7, v->eot = base + 8, v->pad = base + 18;
    }
    for (int i = 0; i < n_special; i++) v->types[base + i] = 3; /* control */
    return 0;
}

static int add_vocab_kvs(gguf_writer *w, const vocab *v) {
    int rc = gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    if (!rc) rc = gguf_writer_add_str(w, "tokenizer.ggml.pre", "llama4");
    if (!rc) rc = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, NULL, (uint64_t)v->n);
    if (!rc) rc = gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->types, (uint64_t)v->n);
    if (!rc) rc = gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, NULL, (uint64_t)v->n_merges);
    if (!rc) rc = gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos);
    if (!rc) rc = gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    if (!rc) rc = gguf_writer_add_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)v->eot);
    if (!rc) rc = gguf_writer_add_u32(w, "tokenizer.ggml.eom_token_id", (uint32_t)v->eom);
    if (!rc) rc = gguf_writer_add_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->pad);
    if (!rc) rc = gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true);
    if (!rc) rc = gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", false);
    return rc;
}

/* ---- tensors ----------------------------------------------------------------- */

typedef enum init_kind { INIT_NORMAL, INIT_NORM_ONE, INIT_NORM_POST, INIT_CONST } init_kind;

typedef struct tensor_plan {
    char name[64];
    int n_dims;
    int64_t ne[2];
    uint32_t type;
    init_kind init;
    float scale; /* std for INIT_NORMAL, value for INIT_CONST */
} tensor_plan;

typedef struct synth_job {
    const tensor_plan *t;
    uint64_t seed;
    int64_t row0, nrows;
    uint8_t *out;
    uint64_t row_bytes;
    bool random_blocks;
    float *scratch; /* [threads][ne0] */
} synth_job;

static void fill_row(const tensor_plan *t, uint64_t *rng, float *row) {
    for (int64_t i = 0; i < t->ne[0]; i++) {
        switch (t->init) {
        case INIT_NORMAL: row[i] = t->scale * next_normal(rng); break;
        case INIT_NORM_ONE: row[i] = 1.0f + 0.1f * next_normal(rng); break;
        case INIT_NORM_POST: row[i] = 0.25f * (1.0f + 0.1f * next_normal(rng)); break;
        case INIT_CONST: row[i] = t->scale; break;
        }
    }
}

static void synth_worker(void *ctx, int ith, int nth) {
    synth_job *j = ctx;
    float *row = j->scratch + (size_t)ith * (size_t)j->t->ne[0];
    const mu_type_traits *tr = mu_type_get(j->t->type);
    for (int64_t r = (int64_t)ith; r < j->nrows; r += nth) {
        uint64_t rng = mix64(j->seed ^ mix64((uint64_t)(j->row0 + r) + 0x51ed27u));
        uint8_t *dst = j->out + (uint64_t)r * j->row_bytes;
        if (j->random_blocks && j->t->init == INIT_NORMAL && mu_type_get(j->t->type)->block_elems > 1) {
            mu_random_blocks(j->t->type, dst, j->t->ne[0], &rng, j->t->scale);
        } else {
            fill_row(j->t, &rng, row);
            tr->quant_row(row, dst, j->t->ne[0]);
        }
    }
}

/* One tensor of a plan; the mix chooses its type. */
static void plan_tensor(tensor_plan *t, const char *name, int n_dims, int64_t cols, int64_t rows, init_kind init,
                        float scale, int mix, int n_layer) {
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims, t->ne[0] = cols, t->ne[1] = rows, t->init = init, t->scale = scale;
    t->type = mu_tool_mix_type("synth", mix, t->name, t->name, n_dims, cols, n_layer);
}

/* Muse Glimmer's metadata into w and its tensor plan (llama.cpp's order). */
static tensor_plan *plan_model(gguf_writer *w, const preset *pp, int mix, int *n_out) {
    const preset p = *pp;
    char name[96];
    snprintf(name, sizeof name, "Muse-Glimmer-synth-%s-%s", p.name, mu_mix_name((mu_mix)mix));
    gguf_writer_add_str(w, "general.architecture", "muse-glimmer");
    gguf_writer_add_str(w, "general.name", name);
    gguf_writer_add_u32(w, "general.file_type", mu_mix_file_type((mu_mix)mix));
    gguf_writer_add_u32(w, "general.quantization_version", 2);
    gguf_writer_add_u32(w, "muse-glimmer.block_count", (uint32_t)p.n_layer);
    gguf_writer_add_u32(w, "muse-glimmer.context_length", (uint32_t)p.ctx);
    gguf_writer_add_u32(w, "muse-glimmer.embedding_length", (uint32_t)p.n_embd);
    gguf_writer_add_u32(w, "muse-glimmer.feed_forward_length", (uint32_t)p.n_ff);
    gguf_writer_add_u32(w, "muse-glimmer.attention.head_count", (uint32_t)p.n_head);
    gguf_writer_add_u32(w, "muse-glimmer.attention.head_count_kv", (uint32_t)p.n_head_kv);
    gguf_writer_add_u32(w, "muse-glimmer.attention.key_length", (uint32_t)p.head_dim);
    gguf_writer_add_u32(w, "muse-glimmer.attention.value_length", (uint32_t)p.head_dim);
    gguf_writer_add_f32(w, "muse-glimmer.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_writer_add_u32(w, "muse-glimmer.attention.sliding_window", (uint32_t)p.window);
    bool *pattern = malloc((size_t)p.n_layer);
    for (int l = 0; l < p.n_layer; l++) pattern[l] = l % 4 != 3;
    gguf_writer_add_arr(w, "muse-glimmer.attention.sliding_window_pattern", GGUF_TYPE_BOOL, pattern, (uint64_t)p.n_layer);
    free(pattern);
    gguf_writer_add_f32(w, "muse-glimmer.rope.freq_base", 500000.0f);
    gguf_writer_add_f32(w, "muse-glimmer.logit_scale", (float)LOGIT_SCALE);
    gguf_writer_add_f32(w, "muse-glimmer.final_logit_softcapping", 20.0f);
    gguf_writer_add_u32(w, "muse-glimmer.vocab_size", (uint32_t)p.vocab);
    const int64_t E = p.n_embd, Q = (int64_t)p.n_head * p.head_dim, KV = (int64_t)p.n_head_kv * p.head_dim;
    int n_plan = 3 + 14 * p.n_layer, k = 0;
    tensor_plan *plan = calloc((size_t)n_plan, sizeof *plan);
#define PLAN(nm, d, c, r, ini, sc) plan_tensor(&plan[k++], nm, d, c, r, ini, sc, mix, p.n_layer)
    PLAN("token_embd.weight", 2, E, p.vocab, INIT_NORMAL, 0.02f);
    PLAN("output_norm.weight", 1, E, 1, INIT_NORM_ONE, 0);
    PLAN("output.weight", 2, E, p.vocab, INIT_NORMAL, (float)(4.0 / (LOGIT_SCALE * sqrt((double)E))));
    for (int l = 0; l < p.n_layer; l++) {
        char n[64];
#define L(s) (snprintf(n, sizeof n, "blk.%d." s, l), n)
        PLAN(L("attn_norm.weight"), 1, E, 1, INIT_NORM_ONE, 0);
        PLAN(L("attn_q.weight"), 2, E, Q, INIT_NORMAL, (float)(1.0 / sqrt((double)E)));
        PLAN(L("attn_k.weight"), 2, E, KV, INIT_NORMAL, (float)(1.0 / sqrt((double)E)));
        PLAN(L("attn_v.weight"), 2, E, KV, INIT_NORMAL, (float)(1.0 / sqrt((double)E)));
        PLAN(L("attn_q_norm.weight"), 1, p.head_dim, 1, INIT_CONST, QK_SCALE);
        PLAN(L("attn_k_norm.weight"), 1, p.head_dim, 1, INIT_CONST, 1.0f);
        PLAN(L("attn_gate.weight"), 2, E, Q, INIT_NORMAL, (float)(1.0 / sqrt((double)E)));
        PLAN(L("attn_output.weight"), 2, Q, E, INIT_NORMAL, (float)(1.0 / sqrt((double)Q)));
        PLAN(L("post_attention_norm.weight"), 1, E, 1, INIT_NORM_POST, 0);
        PLAN(L("ffn_norm.weight"), 1, E, 1, INIT_NORM_ONE, 0);
        PLAN(L("ffn_gate.weight"), 2, E, p.n_ff, INIT_NORMAL, (float)(1.0 / sqrt((double)E)));
        PLAN(L("ffn_up.weight"), 2, E, p.n_ff, INIT_NORMAL, (float)(1.0 / sqrt((double)E)));
        PLAN(L("ffn_down.weight"), 2, p.n_ff, E, INIT_NORMAL, (float)(1.0 / sqrt((double)p.n_ff)));
        PLAN(L("post_ffw_norm.weight"), 1, E, 1, INIT_NORM_POST, 0);
#undef L
    }
#undef PLAN
    *n_out = n_plan;
    return plan;
}

/* A DFlash drafter's metadata (llama.cpp's `dflash` keys) and tensor plan,
 * for a target of preset p. */
static tensor_plan *plan_drafter(gguf_writer *w, const preset *p, int preset_layers, const draft_preset *dp, int mix,
                                 int *n_out) {
    const int n_layer = dp->n_layer;
    char name[96];
    snprintf(name, sizeof name, "Muse-Glimmer-synth-%s-dflash-%s", p->name, mu_mix_name((mu_mix)mix));
    gguf_writer_add_str(w, "general.architecture", "dflash");
    gguf_writer_add_str(w, "general.name", name);
    gguf_writer_add_u32(w, "general.file_type", mu_mix_file_type((mu_mix)mix));
    gguf_writer_add_u32(w, "general.quantization_version", 2);
    gguf_writer_add_u32(w, "dflash.block_count", (uint32_t)n_layer);
    gguf_writer_add_u32(w, "dflash.context_length", (uint32_t)p->ctx);
    gguf_writer_add_u32(w, "dflash.embedding_length", (uint32_t)p->n_embd);
    gguf_writer_add_u32(w, "dflash.feed_forward_length", (uint32_t)dp->n_ff);
    gguf_writer_add_u32(w, "dflash.attention.head_count", (uint32_t)dp->n_head);
    gguf_writer_add_u32(w, "dflash.attention.head_count_kv", (uint32_t)dp->n_head_kv);
    gguf_writer_add_u32(w, "dflash.attention.key_length", (uint32_t)dp->head_dim);
    gguf_writer_add_u32(w, "dflash.attention.value_length", (uint32_t)dp->head_dim);
    gguf_writer_add_f32(w, "dflash.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_writer_add_f32(w, "dflash.rope.freq_base", 500000.0f);
    gguf_writer_add_u32(w, "dflash.attention.sliding_window", (uint32_t)dp->window);
    bool *pattern = malloc((size_t)n_layer);
    for (int l = 0; l < n_layer; l++) pattern[l] = true; /* Meta's drafter: every layer slides */
    gguf_writer_add_arr(w, "dflash.attention.sliding_window_pattern", GGUF_TYPE_BOOL, pattern, (uint64_t)n_layer);
    free(pattern);
    gguf_writer_add_u32(w, "dflash.block_size", (uint32_t)dp->block);
    int32_t tl[5];
    /* the preset's layers, spread over a target made with --layers N */
    for (int i = 0; i < dp->n_target_layers; i++) tl[i] = (int32_t)((int64_t)dp->target_layers[i] * p->n_layer / preset_layers);
    gguf_writer_add_arr(w, "dflash.target_layers", GGUF_TYPE_INT32, tl, (uint64_t)dp->n_target_layers);
    /* Meta's mask token is 201818 in the full vocabulary; else the last (control) token */
    gguf_writer_add_u32(w, "tokenizer.ggml.mask_token_id", p->vocab == 202048 ? 201818u : (uint32_t)(p->vocab - 1));

    const int64_t E = p->n_embd, Q = (int64_t)dp->n_head * dp->head_dim, KV = (int64_t)dp->n_head_kv * dp->head_dim;
    const int64_t W = (int64_t)dp->n_target_layers * E;
    int n_plan = 3 + 11 * n_layer, k = 0;
    tensor_plan *plan = calloc((size_t)n_plan, sizeof *plan);
#define PLAN(nm, d, c, r, ini, sc) plan_tensor(&plan[k++], nm, d, c, r, ini, sc, mix, n_layer)
    PLAN("fc.weight", 2, W, E, INIT_NORMAL, (float)(1.0 / sqrt((double)W)));
    PLAN("enc.output_norm.weight", 1, E, 1, INIT_NORM_ONE, 0);
    PLAN("output_norm.weight", 1, E, 1, INIT_NORM_ONE, 0);
    for (int l = 0; l < n_layer; l++) {
        char n[64];
#define L(s) (snprintf(n, sizeof n, "blk.%d." s, l), n)
        PLAN(L("attn_norm.weight"), 1, E, 1, INIT_NORM_ONE, 0);
        PLAN(L("attn_q.weight"), 2, E, Q, INIT_NORMAL, (float)(1.0 / sqrt((double)E)));
        PLAN(L("attn_k.weight"), 2, E, KV, INIT_NORMAL, (float)(1.0 / sqrt((double)E)));
        PLAN(L("attn_v.weight"), 2, E, KV, INIT_NORMAL, (float)(1.0 / sqrt((double)E)));
        PLAN(L("attn_output.weight"), 2, Q, E, INIT_NORMAL, (float)(1.0 / sqrt((double)Q)));
        PLAN(L("attn_q_norm.weight"), 1, dp->head_dim, 1, INIT_NORM_ONE, 0);
        PLAN(L("attn_k_norm.weight"), 1, dp->head_dim, 1, INIT_NORM_ONE, 0);
        PLAN(L("ffn_norm.weight"), 1, E, 1, INIT_NORM_ONE, 0);
        PLAN(L("ffn_gate.weight"), 2, E, dp->n_ff, INIT_NORMAL, (float)(1.0 / sqrt((double)E)));
        PLAN(L("ffn_up.weight"), 2, E, dp->n_ff, INIT_NORMAL, (float)(1.0 / sqrt((double)E)));
        PLAN(L("ffn_down.weight"), 2, dp->n_ff, E, INIT_NORMAL, (float)(1.0 / sqrt((double)dp->n_ff)));
#undef L
    }
#undef PLAN
    *n_out = n_plan;
    return plan;
}

static void usage(FILE *out) {
    fprintf(out, "usage: muser synth --preset nano|micro|30b [--draft] [options] -o FILE\n"
                 "Writes a synthetic Muse Glimmer model: random, well-scaled weights; a valid BPE vocabulary,\n"
                 "or the tokenizer of VOCAB.gguf.\n\n"
                 "  %-28s the shape (required): nano (8 layers, n_embd 256), micro (4, 512),\n"
                 "  %-28s 30b (52, 6656: Muse Glimmer 30B's)\n"
                 "  %-28s the output file (required)\n"
                 "  %-28s f32 f16 bf16 q8_0 ... q4_k_m ..., every TYPE and mix of muser quantize,\n"
                 "  %-28s or meta-17gb: Meta's official 17 GB mix (default: f32; f16 for the\n"
                 "  %-28s 30b drafter, whose 2.56 B weights Meta ships in 16 bits: 5.1 GB)\n"
                 "  %-28s layer count (default: the preset's)\n"
                 "  %-28s the trained context written in the file (default: the preset's:\n"
                 "  %-28s nano 1024, micro 2048, 30b 131072)\n"
                 "  %-28s the weights' random stream (default: 1)\n"
                 "  %-28s take the tokenizer (and vocabulary size) of this GGUF\n"
                 "  %-28s threads (default: the %d cores online)\n"
                 "  %-28s write a DFlash drafter for the preset instead (30b: the geometry of Meta's\n"
                 "  %-28s Muse-Glimmer-30B-assistant; nano, micro: small ones for those models);\n"
                 "  %-28s --layers then gives the target's layer count, over which its reads spread\n",
            "--preset NAME", "", "-o, --output FILE", "--mix MIX", "", "", "--layers N", "--ctx N", "", "--seed S",
            "--vocab VOCAB.gguf", "-t, --threads N", mu_cpu_count(), "--draft", "", "");
}

int cmd_synth(int argc, char **argv) {
    const char *preset_name = NULL, *mix_name = NULL, *out_path = NULL, *vocab_path = NULL;
    int layers = 0, threads = 0, ctx = 0;
    bool draft = false;
    uint64_t seed = 1;
    mu_args a = {argc, 1, argv, "synth"};
    for (; a.i < argc; a.i++) {
        if (mu_arg_is(&a, "-h", "--help")) {
            usage(stdout);
            return 0;
        } else if (mu_arg_is(&a, NULL, "--preset")) {
            if (!mu_arg_str(&a, &preset_name)) return 2;
        } else if (mu_arg_is(&a, NULL, "--mix")) {
            if (!mu_arg_str(&a, &mix_name)) return 2;
        } else if (mu_arg_is(&a, "-o", "--output")) {
            if (!mu_arg_str(&a, &out_path)) return 2;
        } else if (mu_arg_is(&a, NULL, "--vocab")) {
            if (!mu_arg_str(&a, &vocab_path)) return 2;
        } else if (mu_arg_is(&a, NULL, "--layers")) {
            if (!mu_arg_int(&a, 1, 4096, &layers)) return 2;
        } else if (mu_arg_is(&a, NULL, "--ctx")) { /* trained context: room for long tool prompts in tests */
            if (!mu_arg_int(&a, 16, 1 << 20, &ctx)) return 2;
        } else if (mu_arg_is(&a, "-s", "--seed")) {
            if (!mu_arg_u64(&a, &seed)) return 2;
        } else if (mu_arg_is(&a, "-t", "--threads")) {
            if (!mu_arg_threads(&a, &threads)) return 2;
        } else if (mu_arg_is(&a, NULL, "--draft")) {
            draft = true;
        } else {
            mu_arg_unknown(&a);
            return 2;
        }
    }
    if (!mu_arg_require("synth", preset_name, "--preset nano|micro|30b") ||
        !mu_arg_require("synth", out_path, "-o FILE"))
        return 2;
    const preset *pr = NULL;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(presets[i].name, preset_name)) pr = &presets[i];
    if (!pr) {
        fprintf(stderr, "muser synth: unknown preset '%s' (nano, micro, 30b)\n", preset_name);
        return 2;
    }
    /* Meta's drafter (Muse-Glimmer-30B-assistant) is a 16-bit file of 5.1 GB: its
     * geometry in f32 would be twice that, and twice the bytes a draft reads */
    if (!mix_name) mix_name = draft && !strcmp(pr->name, "30b") ? "f16" : "f32";
    int mix = mu_mix_from_name(mix_name);
    if (mix < 0) {
        fprintf(stderr, "muser synth: unknown mix '%s'\n", mix_name);
        return 2;
    }
    preset p = *pr;
    if (layers) p.n_layer = layers; /* with --draft: the target's, whose layers the drafter reads */
    if (ctx) p.ctx = ctx;
    const bool big = !strcmp(p.name, "30b");

    /* Vocabulary: synthetic, or copied from a GGUF. */
    gguf_file *vf = NULL;
    vocab voc;
    memset(&voc, 0, sizeof voc);
    if (vocab_path) {
        if (gguf_open(vocab_path, &vf) != 0) {
            fprintf(stderr, "muser synth: %s\n", muser_last_error());
            return 1;
        }
        const gguf_kv *tk = gguf_find(vf, "tokenizer.ggml.tokens");
        if (!tk || tk->type != GGUF_TYPE_ARRAY || tk->arr_type != GGUF_TYPE_STRING) {
            fprintf(stderr, "muser synth: %s has no tokenizer.ggml.tokens\n", vocab_path);
            gguf_close(vf);
            return 1;
        }
        p.vocab = (int)tk->arr_count;
    } else if (vocab_make(&voc, p.vocab) != 0) {
        fprintf(stderr, "muser synth: %s\n", muser_last_error());
        vocab_free(&voc);
        return 1;
    }

    gguf_writer *w = gguf_writer_new();
    int n_plan = 0;
    tensor_plan *plan = NULL;
    const draft_preset *dp = NULL;
    for (size_t i = 0; draft && i < sizeof draft_presets / sizeof draft_presets[0]; i++)
        if (!strcmp(draft_presets[i].name, pr->name)) dp = &draft_presets[i];
    if (draft) plan = plan_drafter(w, &p, pr->n_layer, dp, mix, &n_plan);
    else plan = plan_model(w, &p, mix, &n_plan);
    if (vf) {
        for (uint64_t i = 0; i < vf->n_kv; i++)
            if (vf->kv[i].key.len > 10 && !memcmp(vf->kv[i].key.ptr, "tokenizer.", 10)) gguf_writer_copy_kv(w, &vf->kv[i]);
    } else {
        add_vocab_kvs(w, &voc);
    }

    const int64_t E = p.n_embd, Q = draft ? (int64_t)dp->n_head * dp->head_dim : (int64_t)p.n_head * p.head_dim;
    const int64_t F = draft ? dp->n_ff : p.n_ff;
    const int n_layer_written = draft ? dp->n_layer : p.n_layer;
    for (int i = 0; i < n_plan; i++) gguf_writer_add_tensor(w, plan[i].name, plan[i].type, plan[i].n_dims, plan[i].ne);

    int rc = 1;
    FILE *fp = fopen(out_path, "wb");
    mu_pool *pool = mu_pool_new(threads ? threads : mu_cpu_count());
    uint8_t *buf = NULL;
    float *scratch = NULL;
    if (!fp) {
        fprintf(stderr, "muser synth: cannot create %s: %s\n", out_path, strerror(errno));
        goto out;
    }
    if (gguf_writer_begin(w, fp) != 0) goto fail;
    const uint64_t total = gguf_writer_total_bytes(w);
    const uint64_t chunk_bytes = 64ull << 20;
    buf = malloc(chunk_bytes + (1 << 20));
    /* a row of any tensor: the widest of them (n_embd, Wo's input, n_ff, a drafter's fc) */
    int64_t widest = E > Q ? E : Q;
    if (F > widest) widest = F;
    for (int i = 0; i < n_plan; i++) widest = plan[i].ne[0] > widest ? plan[i].ne[0] : widest;
    scratch = malloc(sizeof(float) * (size_t)mu_pool_size(pool) * (size_t)widest);
    const double t0 = mu_now_seconds();
    uint64_t done = 0;
    mu_progress bar;
    mu_progress_begin(&bar, stderr, "synth", total);
    for (int i = 0; i < n_plan; i++) {
        const tensor_plan *t = &plan[i];
        const uint64_t rb = mu_row_bytes(t->type, t->ne[0]);
        int64_t rows_per_chunk = (int64_t)(chunk_bytes / rb);
        if (rows_per_chunk < 1) rows_per_chunk = 1;
        for (int64_t r0 = 0; r0 < t->ne[1]; r0 += rows_per_chunk) {
            int64_t nr = t->ne[1] - r0 < rows_per_chunk ? t->ne[1] - r0 : rows_per_chunk;
            synth_job j = {t, mix64(seed * 0x9E3779B97F4A7C15ull + (uint64_t)i), r0, nr, buf, rb, big, scratch};
            mu_pool_run(pool, synth_worker, &j);
            if (gguf_writer_write_data(w, buf, (uint64_t)nr * rb) != 0) goto fail;
            done += (uint64_t)nr * rb;
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
    uint32_t *types = malloc(sizeof(uint32_t) * (size_t)n_plan);
    char summary[512] = "";
    if (types) {
        for (int i = 0; i < n_plan; i++) types[i] = plan[i].type;
        mu_tool_type_summary(types, (uint64_t)n_plan, summary, sizeof summary);
        free(types);
    }
    fprintf(stderr, "synth: wrote %s (%.3f GB, %d layer%s, mix %s; tensors: %s) in %.1f s\n", out_path, total / 1e9,
            n_layer_written, mu_plural_s(n_layer_written), mu_mix_name((mu_mix)mix), summary, mu_now_seconds() - t0);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "muser synth: %s\n", muser_last_error());
    if (fp) fclose(fp);
    fp = NULL;
    unlink(out_path);
out:
    if (fp) fclose(fp);
    free(buf);
    free(scratch);
    free(plan);
    mu_pool_free(pool);
    gguf_writer_free(w);
    vocab_free(&voc);
    gguf_close(vf);
    return rc;
}
