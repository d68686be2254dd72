/* model.c — hyperparameters and tensor binding for `muse-glimmer` and
 * `llama`. Defaults follow llama.cpp (spec §2.2): a missing softcap means
 * 30, a missing sliding_window_pattern means every layer is full attention
 * (loudly warned), rope.freq_base defaults to 10000. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "quant/quant.h"
#include "util/error.h"

/* Upper bounds that keep a hostile header from asking for absurd memory. */
#define MAX_EMBD (1 << 17)
#define MAX_LAYERS 4096
#define MAX_HEADS 4096
#define MAX_HEAD_DIM 4096
#define MAX_FF (1 << 21)
#define MAX_VOCAB (1 << 24)

typedef struct key_reader {
    const gguf_file *f;
    const char *arch;
    int rc; /* first error */
} key_reader;

static const char *akey(const key_reader *k, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", k->arch, suffix);
    return buf;
}

/* Reads <arch>.<suffix> as u32 into *v; required keys fail when absent. */
static bool get_u32(key_reader *k, const char *suffix, uint32_t *v, bool required) {
    char key[160];
    akey(k, suffix, key, sizeof key);
    const gguf_kv *kv = gguf_find(k->f, key);
    if (kv && kv->type == GGUF_TYPE_ARRAY) {
        /* Per-layer arrays (llama.cpp's get_key_or_arr): accept when uniform. */
        if (kv->arr_count == 0 || kv->arr_type == GGUF_TYPE_STRING) goto bad;
        int64_t first = gguf_arr_int(kv, 0);
        for (uint64_t i = 1; i < kv->arr_count; i++) {
            if (gguf_arr_int(kv, i) != first) {
                if (!k->rc)
                    k->rc = mu_fail(MUSER_EUNSUPPORTED, "%s: '%s' varies per layer, which Muser does not support",
                                    k->f->path, key);
                return false;
            }
        }
        if (first < 0 || first > UINT32_MAX) goto bad;
        *v = (uint32_t)first;
        return true;
    }
    int rc = gguf_get_u32(k->f, key, v);
    if (rc == 1) return true;
    if (rc < 0) {
        if (!k->rc) k->rc = rc;
        return false;
    }
    if (required && !k->rc) k->rc = mu_fail(MUSER_EFORMAT, "%s: required metadata '%s' is missing", k->f->path, key);
    return false;
bad:
    if (!k->rc) k->rc = mu_fail(MUSER_EFORMAT, "%s: metadata '%s' has an invalid value", k->f->path, key);
    return false;
}

static bool get_f32(key_reader *k, const char *suffix, float *v, bool required) {
    char key[160];
    akey(k, suffix, key, sizeof key);
    int rc = gguf_get_f32(k->f, key, v);
    if (rc == 1) {
        if (!isfinite(*v)) {
            if (!k->rc) k->rc = mu_fail(MUSER_EFORMAT, "%s: metadata '%s' is not finite", k->f->path, key);
            return false;
        }
        return true;
    }
    if (rc < 0) {
        if (!k->rc) k->rc = rc;
        return false;
    }
    if (required && !k->rc) k->rc = mu_fail(MUSER_EFORMAT, "%s: required metadata '%s' is missing", k->f->path, key);
    return false;
}

static int check_range(const gguf_file *f, const char *what, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
        return mu_fail(MUSER_EFORMAT, "%s: %s = %lld is out of range [%lld, %lld]", f->path, what, (long long)v,
                       (long long)lo, (long long)hi);
    return 0;
}

/* Sliding-window pattern: scalar period P (layer l is SWA iff l % P < P-1,
 * P = 0: all SWA) or a bool array with one entry per layer. */
static int read_swa_pattern(key_reader *k, mu_model *m) {
    mu_hparams *hp = &m->hp;
    char key[160];
    akey(k, "attention.sliding_window_pattern", key, sizeof key);
    const gguf_kv *kv = gguf_find(k->f, key);
    if (!kv) {
        mu_warn("%s has no '%s': every layer is treated as full attention without RoPE, as llama.cpp does. "
                "For Muse Glimmer this is almost certainly WRONG (the model expects [sliding x3, full] x13); "
                "regenerate the file with the pattern.",
                k->f->path, key);
        for (int l = 0; l < hp->n_layer; l++) m->layers[l].is_swa = false;
        return 0;
    }
    if (kv->type == GGUF_TYPE_ARRAY) {
        if (kv->arr_type == GGUF_TYPE_STRING || kv->arr_type == GGUF_TYPE_FLOAT32 ||
            kv->arr_type == GGUF_TYPE_FLOAT64)
            return mu_fail(MUSER_EFORMAT, "%s: '%s' must be a bool array or an integer", k->f->path, key);
        if (kv->arr_count != (uint64_t)hp->n_layer)
            return mu_fail(MUSER_EFORMAT, "%s: '%s' has %llu entries but the model has %d layers", k->f->path, key,
                           (unsigned long long)kv->arr_count, hp->n_layer);
        for (int l = 0; l < hp->n_layer; l++) m->layers[l].is_swa = gguf_arr_int(kv, (uint64_t)l) != 0;
        return 0;
    }
    uint32_t period;
    int rc = gguf_get_u32(k->f, key, &period);
    if (rc < 0) return rc;
    for (int l = 0; l < hp->n_layer; l++)
        m->layers[l].is_swa = period == 0 || (uint32_t)l % period < period - 1;
    return 0;
}

/* Binds a tensor, checking its shape; optional tensors may be absent. */
int mu_model_bind_weight(const gguf_file *f, const char *name, int64_t cols, int64_t rows, bool optional,
                         mu_weight *w) {
    memset(w, 0, sizeof *w);
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) {
        if (optional) return 0;
        return mu_fail(MUSER_EFORMAT, "%s: tensor '%s' is missing", f->path, name);
    }
    int want_dims = rows == 1 ? 1 : 2;
    bool ok = t->ne[0] == cols && t->ne[1] == rows && t->ne[2] == 1 && t->ne[3] == 1 &&
              (int)t->n_dims >= want_dims;
    if (!ok)
        return mu_fail(MUSER_EFORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                       f->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)cols, (long long)rows);
    const mu_type_traits *tr = mu_type_get(t->type);
    if (!tr || !tr->dequant_row)
        return mu_fail(MUSER_EUNSUPPORTED, "%s: tensor '%s' has type %s, which Muser cannot compute with", f->path,
                       name, mu_type_name(t->type));
    w->data = t->data;
    w->type = t->type;
    w->cols = cols;
    w->rows = rows;
    w->row_bytes = mu_row_bytes(t->type, cols);
    w->name = t->name;
    return 0;
}

/* Binds a 1-D norm and dequantizes it to a malloc'd f32 array. */
int mu_model_bind_norm(const gguf_file *f, const char *name, int64_t n, bool optional, float **out) {
    mu_weight w;
    *out = NULL;
    int rc = mu_model_bind_weight(f, name, n, 1, optional, &w);
    if (rc || !w.data) return rc;
    float *v = malloc((size_t)n * sizeof(float));
    if (!v) return mu_fail(MUSER_ENOMEM, "out of memory");
    mu_dequant_row(w.type, w.data, v, n);
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) {
            free(v);
            return mu_fail(MUSER_EFORMAT, "%s: tensor '%s' holds a non-finite value at %lld", f->path, name,
                           (long long)i);
        }
    }
    *out = v;
    return 0;
}

static int read_hparams(const gguf_file *f, mu_model *m, key_reader *k) {
    mu_hparams *hp = &m->hp;
    uint32_t v;
    hp->n_ctx_train = get_u32(k, "context_length", &v, true) ? (int)(v > (1u << 30) ? (1u << 30) : v) : 0;
    hp->n_embd = get_u32(k, "embedding_length", &v, true) ? (int)(v > MAX_EMBD ? MAX_EMBD + 1 : v) : 0;
    hp->n_layer = get_u32(k, "block_count", &v, true) ? (int)(v > MAX_LAYERS ? MAX_LAYERS + 1 : v) : 0;
    hp->n_ff = get_u32(k, "feed_forward_length", &v, true) ? (int)(v > MAX_FF ? MAX_FF + 1 : v) : 0;
    hp->n_head = get_u32(k, "attention.head_count", &v, true) ? (int)(v > MAX_HEADS ? MAX_HEADS + 1 : v) : 0;
    if (k->rc) return k->rc;
    hp->n_head_kv = hp->n_head;
    if (get_u32(k, "attention.head_count_kv", &v, false)) hp->n_head_kv = (int)(v > MAX_HEADS ? MAX_HEADS + 1 : v);
    int rc;
    if ((rc = check_range(f, "context_length", hp->n_ctx_train, 1, 1 << 30))) return rc;
    if ((rc = check_range(f, "embedding_length", hp->n_embd, 1, MAX_EMBD))) return rc;
    if ((rc = check_range(f, "block_count", hp->n_layer, 1, MAX_LAYERS))) return rc;
    if ((rc = check_range(f, "feed_forward_length", hp->n_ff, 1, MAX_FF))) return rc;
    if ((rc = check_range(f, "attention.head_count", hp->n_head, 1, MAX_HEADS))) return rc;
    if ((rc = check_range(f, "attention.head_count_kv", hp->n_head_kv, 1, hp->n_head))) return rc;
    if (hp->n_head % hp->n_head_kv)
        return mu_fail(MUSER_EFORMAT, "%s: head_count %d is not a multiple of head_count_kv %d", f->path, hp->n_head,
                       hp->n_head_kv);
    uint32_t kl = (uint32_t)(hp->n_embd / hp->n_head), vl = kl;
    get_u32(k, "attention.key_length", &kl, false);
    get_u32(k, "attention.value_length", &vl, false);
    if (k->rc) return k->rc;
    if (kl != vl)
        return mu_fail(MUSER_EUNSUPPORTED, "%s: key_length %u differs from value_length %u", f->path, kl, vl);
    hp->head_dim = (int)(kl > MAX_HEAD_DIM ? MAX_HEAD_DIM + 1 : kl);
    if ((rc = check_range(f, "attention.key_length", hp->head_dim, 2, MAX_HEAD_DIM))) return rc;
    uint32_t n_rot = (uint32_t)hp->head_dim;
    get_u32(k, "rope.dimension_count", &n_rot, false);
    if (n_rot > (uint32_t)hp->head_dim || n_rot % 2)
        return mu_fail(MUSER_EFORMAT, "%s: rope.dimension_count %u must be even and at most %d", f->path, n_rot,
                       hp->head_dim);
    hp->n_rot = (int)n_rot;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);

    float base = 10000.0f;
    get_f32(k, "rope.freq_base", &base, false);
    hp->rope_freq_scale = 1.0f;
    char key[160];
    gguf_str st;
    if (gguf_get_str(f, akey(k, "rope.scaling.type", key, sizeof key), &st) == 1 && !gguf_str_eq(st, "none") &&
        !gguf_str_eq(st, "linear")) {
        char tn[32];
        return mu_fail(MUSER_EUNSUPPORTED, "%s: rope scaling '%s' is not supported (only none and linear)", f->path,
                       gguf_str_copy(st, tn, sizeof tn));
    }
    float factor = 0;
    if (get_f32(k, "rope.scaling.factor", &factor, false) && factor > 0) hp->rope_freq_scale = 1.0f / factor;
    get_f32(k, "attention.layer_norm_rms_epsilon", &hp->rms_eps, true);
    if (k->rc) return k->rc;
    if (!(hp->rms_eps > 0 && hp->rms_eps < 1))
        return mu_fail(MUSER_EFORMAT, "%s: layer_norm_rms_epsilon %g is out of range", f->path, hp->rms_eps);

    m->layers = calloc((size_t)hp->n_layer, sizeof(mu_layer));
    if (!m->layers) return mu_fail(MUSER_ENOMEM, "out of memory");
    hp->rope_type = MU_ROPE_NORM;
    hp->logit_scale = 1.0f;
    hp->softcap = 0.0f;

    if (hp->arch == MU_ARCH_MUSE_GLIMMER) {
        uint32_t swa = 0;
        get_u32(k, "attention.sliding_window", &swa, true);
        if (k->rc) return k->rc;
        if ((rc = check_range(f, "attention.sliding_window", swa, 1, 1 << 30))) return rc;
        hp->n_swa = (int)swa;
        hp->softcap = 30.0f; /* llama.cpp's default when the key is absent */
        get_f32(k, "final_logit_softcapping", &hp->softcap, false);
        get_f32(k, "logit_scale", &hp->logit_scale, true);
        float base_swa = base;
        get_f32(k, "rope.freq_base_swa", &base_swa, false);
        if (k->rc) return k->rc;
        if ((rc = read_swa_pattern(k, m))) return rc;
        for (int l = 0; l < hp->n_layer; l++) {
            m->layers[l].use_rope = m->layers[l].is_swa; /* NoPE on full layers */
            m->layers[l].rope_base = base_swa;
        }
        hp->post_norm_eps = 1e-8f;
        hp->embd_norm = hp->attn_gate = hp->qk_norm = hp->post_norms = true;
    } else if (hp->arch == MU_ARCH_DFLASH) {
        /* llama.cpp's dflash: one RoPE (NEOX) on every layer; the sliding
         * window is optional and its pattern, when present, a bool array. */
        hp->rope_type = MU_ROPE_NEOX;
        hp->qk_norm = true;
        uint32_t swa = 0;
        if (get_u32(k, "attention.sliding_window", &swa, false) && swa > 0) {
            if ((rc = check_range(f, "attention.sliding_window", swa, 1, 1 << 30))) return rc;
            hp->n_swa = (int)swa;
            const gguf_kv *pat = gguf_find(f, akey(k, "attention.sliding_window_pattern", key, sizeof key));
            if (!pat || pat->type != GGUF_TYPE_ARRAY)
                return mu_fail(MUSER_EFORMAT, "%s: '%s' (a bool array) is required with a sliding window", f->path,
                               key);
            if ((rc = read_swa_pattern(k, m))) return rc;
        }
        if (k->rc) return k->rc;
        for (int l = 0; l < hp->n_layer; l++) {
            m->layers[l].use_rope = true;
            m->layers[l].rope_base = base;
        }
    } else {
        for (int l = 0; l < hp->n_layer; l++) {
            m->layers[l].use_rope = true;
            m->layers[l].rope_base = base;
        }
    }
    if (!(base > 0)) return mu_fail(MUSER_EFORMAT, "%s: rope.freq_base must be positive", f->path);
    return 0;
}

static int bind_layers(const gguf_file *f, mu_model *m);

static int bind_tensors(const gguf_file *f, mu_model *m) {
    mu_hparams *hp = &m->hp;
    const gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    if (!te) return mu_fail(MUSER_EFORMAT, "%s: tensor 'token_embd.weight' is missing", f->path);
    if (te->ne[1] < 1 || te->ne[1] > MAX_VOCAB)
        return mu_fail(MUSER_EFORMAT, "%s: token_embd.weight has %lld rows (vocabulary size out of range)", f->path,
                       (long long)te->ne[1]);
    hp->n_vocab = (int)te->ne[1];
    char key[160];
    snprintf(key, sizeof key, "%s.vocab_size", m->arch_name);
    uint32_t vs;
    if (gguf_get_u32(f, key, &vs) == 1 && vs != (uint32_t)hp->n_vocab)
        return mu_fail(MUSER_EFORMAT, "%s: %s = %u but token_embd.weight has %d rows", f->path, key, vs, hp->n_vocab);

    const int64_t E = hp->n_embd;
    int rc = mu_model_bind_weight(f, "token_embd.weight", E, hp->n_vocab, false, &m->tok_embd);
    if (!rc) rc = mu_model_bind_norm(f, "output_norm.weight", E, false, &m->output_norm);
    if (!rc) rc = mu_model_bind_weight(f, "output.weight", E, hp->n_vocab, hp->arch == MU_ARCH_LLAMA, &m->output);
    if (rc) return rc;
    if (!m->output.data) m->output = m->tok_embd; /* tied embeddings */
    if (gguf_find_tensor(f, "rope_freqs.weight")) {
        if ((rc = mu_model_bind_norm(f, "rope_freqs.weight", hp->n_rot / 2, false, &m->rope_freq_factors))) return rc;
    }

    return bind_layers(f, m);
}

static int bind_layers(const gguf_file *f, mu_model *m) {
    const mu_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, KV = (int64_t)hp->n_head_kv * hp->head_dim;
    int rc = 0;
    for (int l = 0; l < hp->n_layer && !rc; l++) {
        mu_layer *L = &m->layers[l];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, l), n)
        const bool mg = hp->arch == MU_ARCH_MUSE_GLIMMER, qk = mg || hp->arch == MU_ARCH_DFLASH;
        rc = mu_model_bind_norm(f, NAME("attn_norm.weight"), E, false, &L->attn_norm);
        if (!rc) rc = mu_model_bind_weight(f, NAME("attn_q.weight"), E, Q, false, &L->wq);
        if (!rc) rc = mu_model_bind_weight(f, NAME("attn_k.weight"), E, KV, false, &L->wk);
        if (!rc) rc = mu_model_bind_weight(f, NAME("attn_v.weight"), E, KV, false, &L->wv);
        if (!rc) rc = mu_model_bind_weight(f, NAME("attn_output.weight"), Q, E, false, &L->wo);
        if (!rc && mg) rc = mu_model_bind_weight(f, NAME("attn_gate.weight"), E, Q, false, &L->wgate);
        if (!rc && qk) rc = mu_model_bind_norm(f, NAME("attn_q_norm.weight"), hp->head_dim, false, &L->q_norm);
        if (!rc && qk) rc = mu_model_bind_norm(f, NAME("attn_k_norm.weight"), hp->head_dim, false, &L->k_norm);
        if (!rc && mg) rc = mu_model_bind_norm(f, NAME("post_attention_norm.weight"), E, false, &L->post_attn_norm);
        if (!rc) rc = mu_model_bind_norm(f, NAME("ffn_norm.weight"), E, false, &L->ffn_norm);
        if (!rc) rc = mu_model_bind_weight(f, NAME("ffn_gate.weight"), E, hp->n_ff, false, &L->ffn_gate);
        if (!rc) rc = mu_model_bind_weight(f, NAME("ffn_up.weight"), E, hp->n_ff, false, &L->ffn_up);
        if (!rc) rc = mu_model_bind_weight(f, NAME("ffn_down.weight"), hp->n_ff, E, false, &L->ffn_down);
        if (!rc && mg) rc = mu_model_bind_norm(f, NAME("post_ffw_norm.weight"), E, false, &L->post_ffn_norm);
        if (!rc && hp->arch == MU_ARCH_LLAMA && gguf_find_tensor(f, NAME("attn_q.bias")))
            rc = mu_fail(MUSER_EUNSUPPORTED, "%s: attention biases are not supported", f->path);
#undef NAME
    }
    return rc;
}

int mu_model_bind(gguf_file *file, mu_model *m) {
    memset(m, 0, sizeof *m);
    m->file = file;
    gguf_str arch;
    int rc = gguf_get_str(file, "general.architecture", &arch);
    if (rc < 0) return rc;
    if (rc == 0) return mu_fail(MUSER_EFORMAT, "%s: 'general.architecture' is missing", file->path);
    gguf_str_copy(arch, m->arch_name, sizeof m->arch_name);
    if (gguf_str_eq(arch, "muse-glimmer")) m->hp.arch = MU_ARCH_MUSE_GLIMMER;
    else if (gguf_str_eq(arch, "llama")) m->hp.arch = MU_ARCH_LLAMA;
    else if (gguf_str_eq(arch, "dflash"))
        return mu_fail(MUSER_EUNSUPPORTED,
                       "%s is a DFlash drafter (architecture 'dflash'): pass it with --draft beside its target model",
                       file->path);
    else {
        char a[64];
        return mu_fail(MUSER_EUNSUPPORTED, "%s: unknown architecture '%s' (supported: muse-glimmer, llama)",
                       file->path, gguf_str_copy(arch, a, sizeof a));
    }
    gguf_str name;
    if (gguf_get_str(file, "general.name", &name) == 1) gguf_str_copy(name, m->name, sizeof m->name);

    key_reader k = {file, m->arch_name, 0};
    rc = read_hparams(file, m, &k);
    if (!rc) rc = bind_tensors(file, m);
    if (rc) {
        mu_model_unbind(m);
        return rc;
    }
    m->weight_bytes_per_token = mu_model_weight_bytes_per_token(m);
    return 0;
}

int mu_model_bind_drafter(gguf_file *file, int n_vocab_target, int n_vocab_head, mu_model *m) {
    memset(m, 0, sizeof *m);
    m->file = file;
    m->hp.arch = MU_ARCH_DFLASH;
    snprintf(m->arch_name, sizeof m->arch_name, "dflash");
    gguf_str name;
    if (gguf_get_str(file, "general.name", &name) == 1) gguf_str_copy(name, m->name, sizeof m->name);
    key_reader k = {file, m->arch_name, 0};
    int rc = read_hparams(file, m, &k);
    if (!rc) {
        const int64_t E = m->hp.n_embd;
        m->hp.n_vocab = n_vocab_head;
        rc = mu_model_bind_weight(file, "token_embd.weight", E, n_vocab_target, true, &m->tok_embd);
        if (!rc) rc = mu_model_bind_weight(file, "output.weight", E, n_vocab_head, true, &m->output);
        if (!rc) rc = mu_model_bind_norm(file, "output_norm.weight", E, false, &m->output_norm);
        if (!rc) rc = bind_layers(file, m);
    }
    if (rc) mu_model_unbind(m);
    return rc;
}

static pthread_mutex_t g_view_lock = PTHREAD_MUTEX_INITIALIZER;

const mu_model *mu_model_layer_view(const mu_model *m, int l0, int l1) {
    if (m->whole) return mu_model_layer_view(m->whole, m->layer0 + l0, m->layer0 + l1); /* (a view of a view) */
    if (l0 < 0 || l1 > m->hp.n_layer || l0 >= l1) {
        mu_fail(MUSER_EINVAL, "layers [%d, %d) are not a range of the model's %d", l0, l1, m->hp.n_layer);
        return NULL;
    }
    if (l0 == 0 && l1 == m->hp.n_layer) return m;
    mu_model *views_of = (mu_model *)m; /* (the list is m's cache: its content never changes) */
    pthread_mutex_lock(&g_view_lock);
    mu_model *v = views_of->views;
    while (v && !(v->layer0 == l0 && v->hp.n_layer == l1 - l0)) v = v->next_view;
    if (!v && (v = malloc(sizeof *v))) {
        *v = *m;
        v->whole = m;
        v->layer0 = l0;
        v->hp.n_layer = l1 - l0;
        v->layers = m->layers + l0;
        v->views = NULL;
        if (l0 > 0) memset(&v->tok_embd, 0, sizeof v->tok_embd);
        if (l1 < m->hp.n_layer) {
            memset(&v->output, 0, sizeof v->output);
            v->output_norm = NULL;
        }
        v->weight_bytes_per_token = mu_model_weight_bytes_per_token(v);
        v->next_view = views_of->views;
        views_of->views = v;
    }
    pthread_mutex_unlock(&g_view_lock);
    if (!v) mu_fail(MUSER_ENOMEM, "out of memory");
    return v;
}

void mu_model_unbind(mu_model *m) {
    for (mu_model *v = m->views, *next; v; v = next) { /* (they share m's layers and norms) */
        next = v->next_view;
        free(v);
    }
    m->views = NULL;
    if (m->layers) {
        for (int l = 0; l < m->hp.n_layer; l++) {
            mu_layer *L = &m->layers[l];
            free(L->attn_norm);
            free(L->q_norm);
            free(L->k_norm);
            free(L->post_attn_norm);
            free(L->ffn_norm);
            free(L->post_ffn_norm);
        }
        free(m->layers);
        m->layers = NULL;
    }
    free(m->output_norm);
    m->output_norm = NULL;
    free(m->rope_freq_factors);
    m->rope_freq_factors = NULL;
}

static uint64_t wbytes(const mu_weight *w) { return w->data ? (uint64_t)w->rows * w->row_bytes : 0; }

uint64_t mu_model_weight_bytes_per_token(const mu_model *m) {
    const mu_hparams *hp = &m->hp;
    uint64_t b = m->tok_embd.row_bytes + wbytes(&m->output) + (m->output_norm ? 4ull * (uint64_t)hp->n_embd : 0);
    for (int l = 0; l < hp->n_layer; l++) {
        const mu_layer *L = &m->layers[l];
        b += wbytes(&L->wq) + wbytes(&L->wk) + wbytes(&L->wv) + wbytes(&L->wgate) + wbytes(&L->wo);
        b += wbytes(&L->ffn_gate) + wbytes(&L->ffn_up) + wbytes(&L->ffn_down);
        int norms = 2 + (L->post_attn_norm ? 1 : 0) + (L->post_ffn_norm ? 1 : 0);
        b += 4ull * (uint64_t)hp->n_embd * (uint64_t)norms;
        if (L->q_norm) b += 8ull * (uint64_t)hp->head_dim;
    }
    return b;
}

uint64_t mu_model_kv_bytes_per_token(const mu_model *m, int64_t pos, int kv_elem_bytes) {
    const mu_hparams *hp = &m->hp;
    uint64_t row = 2ull * (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim * (uint64_t)kv_elem_bytes;
    uint64_t b = 0;
    for (int l = 0; l < hp->n_layer; l++) b += row * (uint64_t)mu_layer_visible(hp, &m->layers[l], pos);
    return b;
}

int mu_model_report_depths(const mu_model *m, int64_t out[MU_MODEL_DEPTHS_MAX]) {
    static const int64_t standard[] = {0, 512, 2048, 8192, 32768, 131072};
    const int64_t ctx = m->hp.n_ctx_train;
    int n = 0;
    for (size_t i = 0; i < sizeof standard / sizeof standard[0] && standard[i] < ctx; i++) out[n++] = standard[i];
    if (ctx - 1 > out[n - 1] && ctx <= standard[sizeof standard / sizeof standard[0] - 1]) out[n++] = ctx - 1;
    return n;
}
