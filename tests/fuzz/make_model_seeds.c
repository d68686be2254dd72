/* make_model_seeds.c — writes the seeds of fuzz_model into a directory:
 * tiny models (3 to 12 KB, from the tests' tinymodel builder) of each
 * architecture, tokenizer type and several weight types, and one truncated
 * file. Every complete model is checked to load, so the seeds start the
 * fuzzer past the loader. Usage: make_model_seeds DIR
 * (cmake --build build-fuzz --target make_model_seeds). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "quant/quant.h"
#include "model/dflash.h"
#include "tinydraft.h"
#include "tinymodel.h"

typedef struct seed {
    const char *name;
    const char *arch, *tokenizer, *pre;
    int n_embd, n_head, n_head_kv, head_dim, n_ff, n_layer, vocab;
    uint32_t weight_type;
    int pattern;
    float softcap;
    bool tied;
} seed;

static const seed seeds[] = {
    {"glimmer-bpe-f32", "muse-glimmer", "gpt2", "llama4", 8, 2, 1, 4, 16, 2, 24, MU_TYPE_F32, 0, 20.0f, false},
    {"glimmer-bpe-q8_0", "muse-glimmer", "gpt2", "gpt-4o", 32, 2, 1, 16, 32, 1, 20, MU_TYPE_Q8_0, 2, -1.0f, false},
    {"glimmer-bpe-q5_0-nopre", "muse-glimmer", "gpt2", NULL, 32, 2, 2, 16, 32, 1, 20, MU_TYPE_Q5_0, -1, 30.0f,
     false},
    {"llama-spm-f16", "llama", "llama", NULL, 8, 2, 2, 4, 16, 2, 20, MU_TYPE_F16, 0, 0.0f, true},
    {"llama-bpe-q4_0", "llama", "gpt2", "llama-bpe", 32, 2, 1, 16, 32, 1, 24, MU_TYPE_Q4_0, 0, 0.0f, false},
    {"llama-bpe-iq4_nl", "llama", "gpt2", "gpt-2", 32, 2, 1, 16, 32, 1, 20, MU_TYPE_IQ4_NL, 0, 0.0f, true},
    {"llama-bpe-q4_1", "llama", "gpt2", "starcoder", 32, 1, 1, 32, 32, 1, 20, MU_TYPE_Q4_1, 0, 0.0f, true},
    {"llama-spm-q5_1", "llama", "llama", NULL, 32, 2, 1, 16, 32, 1, 20, MU_TYPE_Q5_1, 0, 0.0f, true},
    {"llama-bpe-bf16-default", "llama", "gpt2", "default", 8, 2, 1, 4, 8, 1, 20, MU_TYPE_BF16, 0, 0.0f, true},
};

static int write_file(const char *dir, const char *name, const uint8_t *buf, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n) {
        fprintf(stderr, "make_model_seeds: cannot write %s\n", path);
        if (f) fclose(f);
        return 1;
    }
    fclose(f);
    printf("%-28s %6zu bytes\n", name, n);
    return 0;
}

/* The image must load as a model with a tokenizer. */
static int check_loads(const char *name, const uint8_t *buf, size_t n) {
    gguf_file *f = NULL;
    muser_model *m = NULL;
    int rc = gguf_open_memory(buf, n, name, &f);
    if (!rc) rc = mu_model_from_gguf(f, false, &m);
    if (!rc && muser_vocab_size(m) == 0) rc = -1;
    if (rc) fprintf(stderr, "make_model_seeds: %s does not load: %s\n", name, muser_last_error());
    muser_model_free(m);
    return rc != 0;
}

/* Drafters for fuzz_model's tiny target (n_embd 16, 3 layers, vocabulary
 * 24): plain, with a reduced vocabulary and its own head, without a window.
 * Each must load against that target. */
static int write_drafters(const char *dir) {
    tm_opts to = tm_defaults();
    to.n_embd = 16, to.n_head = 2, to.n_head_kv = 1, to.head_dim = 8, to.n_ff = 16, to.n_layer = 3;
    to.window = 4, to.ctx = 32, to.vocab = 24;
    size_t tn = 0;
    uint8_t *timg = tm_build(&to, &tn);
    gguf_file *tf = NULL;
    muser_model *target = NULL;
    if (!timg || gguf_open_memory(timg, tn, "target", &tf) || mu_model_from_gguf(tf, false, &target)) {
        fprintf(stderr, "make_model_seeds: the drafters' target does not load: %s\n", muser_last_error());
        free(timg);
        return 1;
    }
    int bad = 0;
    for (int v = 0; v < 3; v++) {
        td_opts o = td_defaults();
        o.n_embd = 16, o.n_head = 2, o.n_head_kv = 1, o.head_dim = 8, o.n_ff = 16, o.ctx = 32, o.vocab = 24;
        o.target_layers[0] = 0, o.target_layers[1] = 1, o.target_layers[2] = 2;
        o.block_size = 4, o.mask_token = 23, o.seed = 2000 + (uint64_t)v;
        if (v == 1) o.own_head = true, o.d2t_rows = 10;
        if (v == 2) o.window = 0, o.n_target_layers = 2;
        static const char *const names[] = {"dflash-f32", "dflash-d2t", "dflash-nowindow"};
        size_t n = 0;
        uint8_t *buf = td_build(&o, &n);
        gguf_file *f = NULL;
        mu_drafter *d = NULL;
        if (!buf || gguf_open_memory(buf, n, names[v], &f) || mu_drafter_from_gguf(f, target, &d)) {
            fprintf(stderr, "make_model_seeds: %s does not load: %s\n", names[v], muser_last_error());
            bad = 1;
        } else {
            bad |= write_file(dir, names[v], buf, n);
        }
        mu_drafter_free(d);
        free(buf);
    }
    muser_model_free(target);
    free(timg);
    return bad;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_model_seeds DIR\n");
        return 2;
    }
    int bad = 0;
    for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) {
        const seed *s = &seeds[i];
        tm_opts o = tm_defaults();
        o.arch = s->arch, o.tokenizer = s->tokenizer, o.pre = s->pre;
        o.n_embd = s->n_embd, o.n_head = s->n_head, o.n_head_kv = s->n_head_kv, o.head_dim = s->head_dim;
        o.n_ff = s->n_ff, o.n_layer = s->n_layer, o.vocab = s->vocab, o.ctx = 64, o.window = 4;
        o.weight_type = s->weight_type, o.pattern = s->pattern, o.softcap = s->softcap, o.tied_output = s->tied;
        o.seed = 1000 + i;
        size_t n = 0;
        uint8_t *buf = tm_build(&o, &n);
        if (!buf) {
            fprintf(stderr, "make_model_seeds: %s: build failed\n", s->name);
            return 1;
        }
        bad |= check_loads(s->name, buf, n);
        bad |= write_file(argv[1], s->name, buf, n);
        if (i == 0) bad |= write_file(argv[1], "glimmer-bpe-f32-truncated", buf, n / 2);
        free(buf);
    }
    bad |= write_drafters(argv[1]);
    return bad;
}
