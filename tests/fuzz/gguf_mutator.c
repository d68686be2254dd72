/* gguf_mutator.c — a structure-aware libFuzzer mutator for GGUF model files.
 *
 * Byte-level mutation of a GGUF file mostly breaks the container (lengths,
 * counts, offsets), so the model loader behind it is rarely reached. Here an
 * input that parses is taken apart and written again with one change to its
 * metadata or tensor infos: a value set to a boundary or a word the loader
 * knows (architectures, tokenizer models, pre-tokenizers, special-token
 * texts), an array element changed or the array cut short, a key removed,
 * renamed, retyped or added, a tensor reshaped, retyped, renamed, removed or
 * added. Tensor data follows its tensor (cut or padded with random bytes),
 * so the result is a well-formed container that reaches binding, the
 * vocabulary and the forward pass. One call in four, and for inputs that do
 * not parse, libFuzzer's own byte mutations run instead (they also cover
 * truncation and container damage). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "util/error.h"

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

/* ---- words the loader knows --------------------------------------------- */

static const char *const words[] = {
    "muse-glimmer", "llama", "gemma3", "", "gpt2", "no_vocab", "none", "bert", "llama4", "gpt-4o", "llama-bpe",
    "llama3", "llama-v3", "gpt-2", "starcoder", "default", "qwen2", "linear", "yarn", "phi-3 mini", "Phi3",
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<s>", "<unk>", "<|eom_id|>", "<|end_of_text|>", "<|begin_of_text|>",
    "<|tool_response>", "<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", "<|eot|>", "<|eom|>",
    "<|fim_pad|>", "<|fim_repo|>", "<|file_sep|>", "<PAD>", "<0x0A>", "<0xff>", "<0xZZ>", "\xe2\x96\x81",
    "\xe2\x96\x81the", "\xc4\xa0", "\xc4\xa0t", "t h", "\xc4\xa0 t", "a b c", " ", "\xff\xfe", "\xc3",
    "dflash", "eagle3",
};

static const char *const arch_suffixes[] = {
    "context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
    "attention.head_count_kv", "attention.key_length", "attention.value_length", "rope.dimension_count",
    "rope.freq_base", "rope.scaling.type", "rope.scaling.factor", "attention.layer_norm_rms_epsilon",
    "attention.sliding_window", "final_logit_softcapping", "logit_scale", "rope.freq_base_swa",
    "attention.sliding_window_pattern", "vocab_size", "target_layers", "block_size", "hyper_connection.count",
};

static const char *const global_keys[] = {
    "general.architecture", "general.name", "general.alignment", "tokenizer.ggml.model", "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores", "tokenizer.ggml.merges",
    "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id", "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
    "tokenizer.ggml.padding_token_id", "tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id",
    "tokenizer.ggml.fim_sep_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
    "tokenizer.ggml.add_space_prefix", "tokenizer.chat_template", "tokenizer.ggml.mask_token_id",
};

static const char *const tensor_names[] = {
    "token_embd.weight", "output_norm.weight", "output.weight", "rope_freqs.weight", "attn_norm.weight",
    "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "attn_gate.weight",
    "attn_q_norm.weight", "attn_k_norm.weight", "post_attention_norm.weight", "ffn_norm.weight",
    "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight", "post_ffw_norm.weight", "attn_q.bias",
    "fc.weight", "fc.scale", "enc.output_norm.weight", "d2t", "markov_w1.weight",
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- randomness (seeded by libFuzzer, so mutations replay) --------------- */

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint32_t pick(uint64_t *s, uint32_t n) { return (uint32_t)(rng_next(s) % n); }

static uint64_t interesting_int(uint64_t *s, uint64_t old) {
    static const uint64_t v[] = {0, 1, 2, 3, 4, 7, 8, 16, 31, 32, 64, 255, 256, 4096, 65535, 65536, 0x7FFFFFFF,
                                 0x80000000u, 0xFFFFFFFFu, 0x100000000ull, UINT64_MAX, UINT64_MAX - 1};
    switch (pick(s, 4)) {
    case 0: return v[pick(s, COUNT(v))];
    case 1: return old + 1;
    case 2: return old - 1;
    default: return old * 2 + pick(s, 2);
    }
}

static double interesting_float(uint64_t *s, double old) {
    static const double v[] = {0.0, -0.0, 1.0, -1.0, 1e-30, 1e30, 0.5, 1e-5, 1e-8, 10000.0, 1e38, 3.5e38};
    switch (pick(s, 5)) {
    case 0: return v[pick(s, COUNT(v))];
    case 1: return NAN;
    case 2: return pick(s, 2) ? INFINITY : -INFINITY;
    case 3: return old * 2;
    default: return -old;
    }
}

/* ---- owned scratch, freed after each mutation ---------------------------- */

typedef struct scratch {
    void *p[64];
    int n;
} scratch;

static void *keep(scratch *sc, void *p) {
    if (p && sc->n < (int)COUNT(sc->p)) sc->p[sc->n++] = p;
    else free(p), p = NULL;
    return p;
}

static void scratch_free(scratch *sc) {
    for (int i = 0; i < sc->n; i++) free(sc->p[i]);
    sc->n = 0;
}

static gguf_str new_str(scratch *sc, const char *s, size_t n) {
    char *c = keep(sc, malloc(n + 1));
    if (!c) return (gguf_str){"", 0};
    memcpy(c, s, n);
    return (gguf_str){c, n};
}

/* A string changed: a known word, or libFuzzer's mutation of the old one. */
static gguf_str mutate_str(scratch *sc, uint64_t *s, gguf_str old) {
    if (pick(s, 2) || old.len == 0) {
        const char *w = words[pick(s, COUNT(words))];
        return new_str(sc, w, strlen(w));
    }
    size_t cap = old.len + 16;
    uint8_t *b = keep(sc, malloc(cap));
    if (!b) return old;
    memcpy(b, old.ptr, old.len);
    size_t n = LLVMFuzzerMutate(b, old.len, cap);
    return (gguf_str){(const char *)b, n};
}

/* ---- the file taken apart ------------------------------------------------- */

typedef struct tinfo {
    char name[96];
    uint32_t type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    const uint8_t *data; /* the old bytes (may be shorter than the new size) */
    uint64_t n_data;
} tinfo;

typedef struct model_parts {
    gguf_kv kv[256];
    int n_kv;
    tinfo t[192];
    int n_t;
    uint32_t alignment;
    char arch[32];
} model_parts;

static bool take_apart(const gguf_file *f, model_parts *m) {
    if (f->n_kv > COUNT(m->kv) - 1 || f->n_tensors > COUNT(m->t) - 1) return false;
    m->n_kv = (int)f->n_kv;
    memcpy(m->kv, f->kv, sizeof(gguf_kv) * f->n_kv);
    m->n_t = (int)f->n_tensors;
    for (int i = 0; i < m->n_t; i++) {
        const gguf_tensor *g = &f->tensors[i];
        tinfo *t = &m->t[i];
        snprintf(t->name, sizeof t->name, "%s", g->name);
        t->type = g->type;
        t->n_dims = (int)g->n_dims;
        memcpy(t->ne, g->ne, sizeof t->ne);
        t->data = g->data;
        t->n_data = g->n_bytes;
    }
    m->alignment = (uint32_t)f->alignment;
    gguf_str a;
    snprintf(m->arch, sizeof m->arch, "llama");
    if (gguf_get_str(f, "general.architecture", &a) == 1) gguf_str_copy(a, m->arch, sizeof m->arch);
    mu_clear_error();
    return true;
}

/* ---- mutations of metadata ------------------------------------------------- */

static void mutate_scalar(scratch *sc, uint64_t *s, gguf_kv *kv) {
    switch (kv->type) {
    case GGUF_TYPE_STRING: kv->v.str = mutate_str(sc, s, kv->v.str); break;
    case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64: kv->v.f64 = interesting_float(s, kv->v.f64); break;
    case GGUF_TYPE_BOOL: kv->v.b = !kv->v.b; break;
    default: kv->v.u64 = interesting_int(s, kv->v.u64); break;
    }
}

/* One element changed, the array cut short, or an element repeated. */
static void mutate_array(scratch *sc, uint64_t *s, gguf_kv *kv) {
    uint64_t n = kv->arr_count;
    uint32_t op = n ? pick(s, 4) : 3;
    if (op == 1) { /* cut short */
        kv->arr_count = n ? pick(s, (uint32_t)(n < 0xFFFFFFFFu ? n : 0xFFFFFFFFu)) : 0;
        return;
    }
    uint64_t at = n ? rng_next(s) % n : 0;
    uint64_t count = op == 2 ? n + 1 : op == 3 ? n + 1 + pick(s, 4) : n;
    if (kv->arr_type == GGUF_TYPE_STRING) {
        gguf_str *v = keep(sc, malloc(sizeof(gguf_str) * (size_t)count));
        if (!v) return;
        for (uint64_t i = 0; i < count; i++)
            v[i] = i < n ? kv->arr_strs[i] : n ? kv->arr_strs[at] : new_str(sc, "x", 1);
        if (op == 0 || op == 3) v[op == 0 ? at : count - 1] = mutate_str(sc, s, v[op == 0 ? at : count - 1]);
        kv->arr_strs = v;
    } else {
        size_t es = gguf_value_type_size(kv->arr_type);
        if (!es) return;
        uint8_t *v = keep(sc, calloc((size_t)count, es));
        if (!v) return;
        if (n) memcpy(v, kv->arr_data, (size_t)(n * es));
        if (n && op >= 2) memcpy(v + n * es, kv->arr_data + at * es, es);
        uint8_t *e = v + (op == 0 ? at : count - 1) * es;
        if (kv->arr_type == GGUF_TYPE_FLOAT32) {
            float x;
            memcpy(&x, e, 4);
            x = (float)interesting_float(s, x);
            memcpy(e, &x, 4);
        } else if (kv->arr_type == GGUF_TYPE_FLOAT64) {
            double x;
            memcpy(&x, e, 8);
            x = interesting_float(s, x);
            memcpy(e, &x, 8);
        } else {
            uint64_t x = 0;
            memcpy(&x, e, es);
            x = interesting_int(s, x);
            memcpy(e, &x, es);
        }
        kv->arr_data = v;
    }
    kv->arr_count = count;
}

static gguf_str known_key(scratch *sc, uint64_t *s, const char *arch) {
    char k[160];
    if (pick(s, 2)) snprintf(k, sizeof k, "%s.%s", arch, arch_suffixes[pick(s, COUNT(arch_suffixes))]);
    else snprintf(k, sizeof k, "%s", global_keys[pick(s, COUNT(global_keys))]);
    return new_str(sc, k, strlen(k));
}

/* A fresh value of a random type. */
static void random_value(scratch *sc, uint64_t *s, gguf_kv *kv) {
    static const uint32_t types[] = {GGUF_TYPE_UINT32, GGUF_TYPE_INT32, GGUF_TYPE_UINT8, GGUF_TYPE_INT64,
                                     GGUF_TYPE_FLOAT32, GGUF_TYPE_FLOAT64, GGUF_TYPE_BOOL, GGUF_TYPE_STRING,
                                     GGUF_TYPE_ARRAY};
    kv->type = types[pick(s, COUNT(types))];
    kv->v.u64 = 0;
    kv->arr_strs = NULL;
    kv->arr_data = NULL;
    if (kv->type == GGUF_TYPE_ARRAY) {
        static const uint32_t elems[] = {GGUF_TYPE_BOOL, GGUF_TYPE_INT32, GGUF_TYPE_UINT32, GGUF_TYPE_FLOAT32,
                                         GGUF_TYPE_STRING};
        kv->arr_type = elems[pick(s, COUNT(elems))];
        kv->arr_count = 0;
        mutate_array(sc, s, kv); /* 1 to 4 elements */
        return;
    }
    if (kv->type == GGUF_TYPE_STRING) kv->v.str = (gguf_str){"", 0};
    mutate_scalar(sc, s, kv);
}

/* Another type for the same value (u32 -> i64, f32 -> f64, scalar -> array). */
static void retype(scratch *sc, uint64_t *s, gguf_kv *kv) {
    static const uint32_t ints[] = {GGUF_TYPE_UINT8, GGUF_TYPE_INT8, GGUF_TYPE_UINT16, GGUF_TYPE_INT16,
                                    GGUF_TYPE_UINT32, GGUF_TYPE_INT32, GGUF_TYPE_UINT64, GGUF_TYPE_INT64};
    if (kv->type == GGUF_TYPE_ARRAY || kv->type == GGUF_TYPE_STRING || pick(s, 4) == 0) {
        random_value(sc, s, kv);
    } else if (kv->type == GGUF_TYPE_FLOAT32 || kv->type == GGUF_TYPE_FLOAT64) {
        kv->type = kv->type == GGUF_TYPE_FLOAT32 ? GGUF_TYPE_FLOAT64 : GGUF_TYPE_FLOAT32;
    } else {
        kv->type = ints[pick(s, COUNT(ints))];
    }
}

static void mutate_kv(scratch *sc, uint64_t *s, model_parts *m) {
    uint32_t op = m->n_kv ? pick(s, 7) : 5;
    gguf_kv *kv = m->n_kv ? &m->kv[pick(s, (uint32_t)m->n_kv)] : NULL;
    switch (op) {
    case 0: case 1: /* change the value */
        if (kv->type == GGUF_TYPE_ARRAY) mutate_array(sc, s, kv);
        else mutate_scalar(sc, s, kv);
        break;
    case 2: /* remove */
        *kv = m->kv[--m->n_kv];
        break;
    case 3: kv->key = known_key(sc, s, m->arch); break; /* rename */
    case 4: retype(sc, s, kv); break;
    default: { /* add a known key with a new value, or copy a value to it */
        gguf_kv *nk = &m->kv[m->n_kv++];
        if (kv && pick(s, 2)) *nk = *kv;
        else random_value(sc, s, nk);
        nk->key = known_key(sc, s, m->arch);
        break;
    }
    }
}

/* ---- mutations of tensor infos ---------------------------------------------- */

static void mutate_tensor(uint64_t *s, model_parts *m) {
    uint32_t op = m->n_t ? pick(s, 6) : 5;
    tinfo *t = m->n_t ? &m->t[pick(s, (uint32_t)m->n_t)] : NULL;
    switch (op) {
    case 0: { /* one dimension changed */
        int d = (int)pick(s, GGUF_MAX_DIMS);
        int64_t v = t->ne[d];
        static const int64_t to[] = {1, 2, 16, 32, 256};
        uint32_t k = pick(s, 5);
        t->ne[d] = k == 0 ? v + 1 : k == 1 ? v - 1 : k == 2 ? v * 2 : k == 3 ? v / 2 : to[pick(s, COUNT(to))];
        if (d >= t->n_dims) t->n_dims = d + 1;
        break;
    }
    case 1: t->type = pick(s, MU_TYPE_COUNT); break;
    case 2: { /* renamed (to a known name, in some layer) */
        const char *n = tensor_names[pick(s, COUNT(tensor_names))];
        if (strncmp(n, "token", 5) && strncmp(n, "output", 6) && strncmp(n, "rope", 4))
            snprintf(t->name, sizeof t->name, "blk.%u.%s", pick(s, 3), n);
        else
            snprintf(t->name, sizeof t->name, "%s", n);
        break;
    }
    case 3: *t = m->t[--m->n_t]; break; /* removed */
    case 4: t->n_dims = 1 + (int)pick(s, GGUF_MAX_DIMS); break;
    default: { /* added: a copy of another, renamed */
        tinfo *nt = &m->t[m->n_t++];
        if (t) *nt = *t;
        else *nt = (tinfo){.type = MU_TYPE_F32, .n_dims = 1, .ne = {8, 1, 1, 1}};
        snprintf(nt->name, sizeof nt->name, "blk.%u.%s", pick(s, 3), tensor_names[pick(s, COUNT(tensor_names))]);
        break;
    }
    }
}

/* ---- putting it back together --------------------------------------------------- */

/* Writes m as a GGUF file; the malloc'd image in *out. */
static int write_parts(const model_parts *m, uint64_t *s, uint8_t **out, size_t *len) {
    *out = NULL;
    *len = 0;
    gguf_writer *w = gguf_writer_new();
    if (!w) return -1;
    gguf_writer_set_alignment(w, m->alignment);
    int rc = 0;
    for (int i = 0; i < m->n_kv && !rc; i++) rc = gguf_writer_copy_kv(w, &m->kv[i]) < 0;
    for (int i = 0; i < m->n_t && !rc; i++) rc = gguf_writer_add_tensor(w, m->t[i].name, m->t[i].type, m->t[i].n_dims, m->t[i].ne) < 0;
    char *buf = NULL;
    size_t n = 0;
    FILE *fp = rc ? NULL : open_memstream(&buf, &n);
    if (fp) rc = gguf_writer_begin(w, fp) != 0;
    for (int i = 0; fp && !rc && i < m->n_t; i++) {
        uint64_t need = gguf_writer_tensor_bytes(w, i);
        if (need > (1u << 20)) {
            rc = 1; /* the fuzzer's inputs stay small */
            break;
        }
        uint8_t *d = malloc(need ? (size_t)need : 1);
        if (!d) {
            rc = 1;
            break;
        }
        uint64_t have = m->t[i].n_data < need ? m->t[i].n_data : need;
        if (have) memcpy(d, m->t[i].data, (size_t)have);
        for (uint64_t j = have; j < need; j++) d[j] = (uint8_t)rng_next(s);
        rc = gguf_writer_write_tensor(w, i, d) != 0;
        free(d);
    }
    if (fp && !rc) rc = gguf_writer_finish(w) != 0;
    if (fp) fclose(fp);
    gguf_writer_free(w);
    mu_clear_error();
    if (rc) {
        free(buf);
        return -1;
    }
    *out = (uint8_t *)buf;
    *len = n;
    return 0;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    uint64_t s = seed;
    if (pick(&s, 4) == 0) return LLVMFuzzerMutate(data, size, max_size);
    gguf_file *f = NULL;
    static model_parts m;
    if (gguf_open_memory(data, size, "mutator", &f) != 0 || !take_apart(f, &m)) {
        gguf_close(f);
        mu_clear_error();
        return LLVMFuzzerMutate(data, size, max_size);
    }
    scratch sc = {{0}, 0};
    if (pick(&s, 4) == 0) mutate_tensor(&s, &m);
    else mutate_kv(&sc, &s, &m);
    uint8_t *img = NULL;
    size_t n = 0;
    int rc = write_parts(&m, &s, &img, &n);
    scratch_free(&sc);
    gguf_close(f); /* after writing: the parts point into data */
    if (rc || n > max_size) {
        free(img);
        return LLVMFuzzerMutate(data, size, max_size);
    }
    memcpy(data, img, n);
    free(img);
    return n;
}
