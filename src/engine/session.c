/* session.c — the public model and session API (include/muser.h): loading,
 * sessions around a backend opened above (backends.c), and feeding tokens
 * in chunks of n_batch. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/session_internal.h"
#include "text/vocab.h"
#include "util/error.h"



static void drop_checkpoint(struct checkpoint *c) {
    free(c->tokens);
    free(c->logits);
    free(c->blob);
    memset(c, 0, sizeof *c);
}

static int load_full(gguf_file *f, mu_model *m) {
    int rc = mu_model_bind(f, m);
    if (!rc) rc = mu_vocab_load(f, m->hp.n_vocab, &m->vocab);
    if (rc) mu_model_unbind(m);
    return rc;
}

static int load_vocab_only(gguf_file *f, mu_model *m) {
    m->file = f;
    gguf_str s;
    if (gguf_get_str(f, "general.architecture", &s) == 1) gguf_str_copy(s, m->arch_name, sizeof m->arch_name);
    if (gguf_get_str(f, "general.name", &s) == 1) gguf_str_copy(s, m->name, sizeof m->name);
    /* A file with weights bounds the vocabulary by its embedding rows. */
    const gguf_tensor *embd = gguf_find_tensor(f, "token_embd.weight");
    int bound = (embd && embd->n_dims == 2 && embd->ne[1] > 0 && embd->ne[1] <= INT32_MAX) ? (int)embd->ne[1] : 0;
    int rc = mu_vocab_load(f, bound, &m->vocab);
    if (!rc && !m->vocab)
        rc = mu_fail(MUSER_EFORMAT, "%s: the file has no tokenizer (tokenizer.ggml.* metadata)", f->path);
    if (rc) return rc;
    m->hp.n_vocab = bound ? bound : mu_vocab_n_tokens(m->vocab);
    return 0; /* layers stay NULL: the mark of a tokenizer-only model */
}

int mu_model_from_gguf(gguf_file *f, bool vocab_only, muser_model **out) {
    *out = NULL;
    mu_model *m = calloc(1, sizeof *m);
    int rc = m ? (vocab_only ? load_vocab_only(f, m) : load_full(f, m)) : mu_fail(MUSER_ENOMEM, "out of memory");
    if (rc) {
        free(m);
        gguf_close(f);
        return rc;
    }
    *out = m;
    return 0;
}

int muser_model_load(const char *path, muser_model **out) {
    *out = NULL;
    gguf_file *f = NULL;
    int rc = gguf_open(path, &f);
    return rc ? rc : mu_model_from_gguf(f, false, out);
}

int muser_model_load_vocab(const char *path, muser_model **out) {
    *out = NULL;
    gguf_file *f = NULL;
    int rc = gguf_open(path, &f);
    return rc ? rc : mu_model_from_gguf(f, true, out);
}

void muser_model_free(muser_model *m) {
    if (!m) return;
    mu_vocab_free(m->vocab);
    mu_model_unbind(m);
    gguf_close(m->file);
    free(m);
}

void muser_model_get_info(const muser_model *m, muser_model_info *info) {
    const mu_hparams *hp = &m->hp;
    memset(info, 0, sizeof *info);
    info->arch = m->arch_name;
    info->name = m->name;
    info->n_vocab = hp->n_vocab;
    info->n_embd = hp->n_embd;
    info->n_layer = hp->n_layer;
    info->n_head = hp->n_head;
    info->n_head_kv = hp->n_head_kv;
    info->head_dim = hp->head_dim;
    info->n_ff = hp->n_ff;
    info->n_ctx_train = hp->n_ctx_train;
    info->sliding_window = hp->n_swa;
    info->file_bytes = m->file->size;
    info->weight_bytes_per_token = m->weight_bytes_per_token;
}

muser_session_params muser_session_default_params(void) {
    muser_session_params p;
    memset(&p, 0, sizeof p);
    p.backend = MUSER_BACKEND_AUTO;
    p.lane = MUSER_LANE_AUTO;
    p.kv_type = MUSER_KV_F16;
    p.gpu_layers = MUSER_GPU_LAYERS_ALL;
    return p;
}

int mu_session_config_resolve(const mu_model *model, const muser_session_params *p, mu_session_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    if (!model) return mu_fail(MUSER_EINVAL, "session: model is NULL");
    if (!model->layers)
        return mu_fail(MUSER_EINVAL, "the model was loaded with muser_model_load_vocab (tokenizer only) and cannot run; "
                                     "load it with muser_model_load");
    const mu_hparams *hp = &model->hp;
    if (p->n_ctx < 0 || p->n_batch < 0 || p->n_threads < 0)
        return mu_fail(MUSER_EINVAL, "context, batch and thread counts must not be negative");
    cfg->n_ctx = p->n_ctx ? p->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if (cfg->n_ctx > hp->n_ctx_train)
        return mu_fail(MUSER_EINVAL, "context %d exceeds the model's trained context %d", cfg->n_ctx, hp->n_ctx_train);
    cfg->n_batch = p->n_batch ? p->n_batch : 512;
    if (cfg->n_batch > cfg->n_ctx) cfg->n_batch = cfg->n_ctx;
    cfg->n_threads = p->n_threads;
    cfg->lane = p->lane;
    cfg->kv_type = p->kv_type;
    cfg->gpus = p->gpus;
    cfg->gpu_mem = p->gpu_mem;
    if (p->lane != MUSER_LANE_EXACT && p->lane != MUSER_LANE_FAST && p->lane != MUSER_LANE_AUTO)
        return mu_fail(MUSER_EINVAL, "unknown lane");
    if (p->kv_type != MUSER_KV_F16 && p->kv_type != MUSER_KV_F32) return mu_fail(MUSER_EINVAL, "unknown KV type");
    if (p->gpus < 0) return mu_fail(MUSER_EINVAL, "--gpus must be at least 1");
    if (p->gpu_layers < 0 && p->gpu_layers != MUSER_GPU_LAYERS_ALL && p->gpu_layers != MUSER_GPU_LAYERS_AUTO)
        return mu_fail(MUSER_EINVAL, "--gpu-layers takes a number of layers (0 or more), all or auto, not %d",
                       p->gpu_layers);
    return 0;
}

int mu_session_open(const mu_model *model, const mu_session_config *cfg, muser_backend kind, mu_backend *backend,
                    muser_session **out) {
    *out = NULL;
    muser_session *s = calloc(1, sizeof *s);
    if (s) s->history = malloc(sizeof(muser_token) * (size_t)cfg->n_ctx);
    if (!s || !s->history) {
        free(s);
        backend->ops->free(backend);
        return mu_fail(MUSER_ENOMEM, "out of memory");
    }
    s->model = model;
    s->cfg = *cfg;
    s->backend_kind = kind;
    s->backend = backend;
    *out = s;
    return 0;
}

void muser_session_free(muser_session *s) {
    if (!s) return;
    mu_spec_free(s->spec);
    if (s->backend) s->backend->ops->free(s->backend);
    for (int i = 0; i < s->n_ckpt; i++) drop_checkpoint(&s->ckpt[i]);
    free(s->ckpt);
    free(s->logits);
    free(s->history);
    muser_sampler_free(s->host_sampler);
    free(s);
}

muser_backend muser_session_backend(const muser_session *s) { return s->backend_kind; }

const char *muser_session_describe(const muser_session *s) {
    return s->backend->ops->describe ? s->backend->ops->describe(s->backend) : NULL;
}
muser_lane muser_session_lane(const muser_session *s) { return s->cfg.lane; }

int muser_session_feed(muser_session *s, const muser_token *tokens, int n, bool all_logits) {
    const int V = s->model->hp.n_vocab;
    if (n <= 0) return mu_fail(MUSER_EINVAL, "nothing to feed");
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return mu_fail(MUSER_ERANGE, "token id %d at index %d is outside the vocabulary [0, %d)", tokens[i], i, V);
    if ((int64_t)s->pos + n > s->cfg.n_ctx)
        return mu_fail(MUSER_ECONTEXT, "context is full: %d token%s held + %d new > context size %d", s->pos,
                       mu_plural_s(s->pos), n, s->cfg.n_ctx);
    int rows = all_logits ? n : 1;
    if (rows > s->logit_cap) {
        float *l = realloc(s->logits, (size_t)rows * (size_t)V * sizeof(float));
        if (!l) return mu_fail(MUSER_ENOMEM, "out of memory for logits");
        s->logits = l;
        s->logit_cap = rows;
    }
    const int start = s->pos;
    for (int done = 0; done < n;) {
        int chunk = n - done < s->cfg.n_batch ? n - done : s->cfg.n_batch;
        float *dst = all_logits ? s->logits + (size_t)done * V : s->logits;
        /* Without all_logits only the last chunk's last row is wanted; the
         * backend still writes a row for earlier chunks (cheap: one head). */
        int rc = s->backend->ops->forward(s->backend, tokens + done, chunk, s->pos, all_logits, dst);
        if (!rc && s->spec) rc = mu_spec_after_feed(s, s->pos, chunk); /* the drafter takes the hidden states */
        if (rc) {
            /* Roll back so a failed feed leaves the session as it was. */
            if (s->backend->ops->truncate(s->backend, start) != 0) s->backend->ops->reset(s->backend), s->pos = 0;
            else s->pos = start;
            s->logit_rows = 0;
            mu_spec_rewind(s, s->pos);
            return rc;
        }
        memcpy(s->history + s->pos, tokens + done, sizeof(muser_token) * (size_t)chunk);
        s->pos += chunk;
        done += chunk;
    }
    s->logit_rows = rows;
    return 0;
}

/* The sampler for host-side selection: greedy at temperature <= 0, else
 * a plain softmax draw at that temperature (no top-k/p, no penalties). */
static int host_sampler_for(muser_session *s, float temperature, uint64_t seed) {
    if (s->host_sampler && s->host_temperature == temperature && s->host_seed == seed) return 0;
    if (!isfinite(temperature)) return mu_fail(MUSER_EINVAL, "decode: the temperature must be a finite number");
    const muser_sampler_params p = {.temperature = temperature, .top_p = 1.0f, .repeat_penalty = 1.0f, .seed = seed};
    muser_sampler *smp = muser_sampler_new(&p, s->model->hp.n_vocab);
    if (!smp) return mu_fail(MUSER_ENOMEM, "out of memory for the sampler");
    muser_sampler_free(s->host_sampler);
    s->host_sampler = smp;
    s->host_temperature = temperature;
    s->host_seed = seed;
    return 0;
}

int mu_session_decode_select(muser_session *s, muser_token token, float temperature, uint64_t seed, bool keep_logits,
                             muser_token *next) {
    const int V = s->model->hp.n_vocab;
    const mu_backend_ops *ops = s->backend->ops;
    if (!s->backend->decode_select) {
        int rc = host_sampler_for(s, temperature, seed);
        if (!rc) rc = muser_session_feed(s, &token, 1, false);
        if (rc) return rc;
        *next = muser_sampler_sample(s->host_sampler, muser_session_logits(s));
        return 0;
    }
    if (token < 0 || token >= V) return mu_fail(MUSER_ERANGE, "token id %d is outside the vocabulary [0, %d)", token, V);
    if ((int64_t)s->pos + 1 > s->cfg.n_ctx)
        return mu_fail(MUSER_ECONTEXT, "context is full: %d token%s held + 1 new > context size %d", s->pos,
                       mu_plural_s(s->pos), s->cfg.n_ctx);
    if (keep_logits && s->logit_cap < 1) {
        float *l = realloc(s->logits, (size_t)V * sizeof(float));
        if (!l) return mu_fail(MUSER_ENOMEM, "out of memory for logits");
        s->logits = l;
        s->logit_cap = 1;
    }
    const int start = s->pos;
    int rc = s->backend->decode_select(s->backend, token, s->pos, temperature, seed, keep_logits ? s->logits : NULL, next);
    if (rc) {
        if (ops->truncate(s->backend, start) != 0) ops->reset(s->backend), s->pos = 0;
        s->logit_rows = 0;
        mu_spec_rewind(s, s->pos);
        return rc;
    }
    s->history[s->pos] = token;
    s->pos++;
    s->logit_rows = keep_logits ? 1 : 0;
    return 0;
}

const float *muser_session_logits(const muser_session *s) {
    if (s->logit_rows == 0) return NULL;
    return s->logits + (size_t)(s->logit_rows - 1) * s->model->hp.n_vocab;
}

const float *muser_session_logits_at(const muser_session *s, int i) {
    if (i < 0 || i >= s->logit_rows) return NULL;
    return s->logits + (size_t)i * s->model->hp.n_vocab;
}

int muser_session_pos(const muser_session *s) { return s->pos; }
int muser_session_n_ctx(const muser_session *s) { return s->cfg.n_ctx; }

void muser_session_reset(muser_session *s) {
    /* Checkpoints need the growing planes' prefix, which a reset discards. */
    for (int i = 0; i < s->n_ckpt; i++) drop_checkpoint(&s->ckpt[i]);
    s->n_ckpt = 0;
    s->backend->ops->reset(s->backend);
    s->pos = 0;
    mu_spec_rewind(s, 0);
    s->logit_rows = 0;
}

int muser_session_truncate(muser_session *s, int pos) {
    if (pos < 0 || pos > s->pos) return mu_fail(MUSER_ERANGE, "cannot truncate to %d (session holds %d)", pos, s->pos);
    if (pos == s->pos) return 0;
    int rc = s->backend->ops->truncate(s->backend, pos);
    if (rc) return rc;
    s->pos = pos;
    mu_spec_rewind(s, pos);
    s->logit_rows = 0;
    return 0;
}

int mu_session_fill_kv(muser_session *s, int depth, uint64_t seed) {
    if (!s->backend->ops->fill_kv)
        return mu_fail(MUSER_EUNSUPPORTED, "the %s backend cannot fill its KV cache directly", s->backend->ops->name);
    if (depth < 0 || depth > s->cfg.n_ctx)
        return mu_fail(MUSER_ERANGE, "depth %d is outside the session's context of %d", depth, s->cfg.n_ctx);
    muser_session_reset(s);
    int rc = s->backend->ops->fill_kv(s->backend, depth, seed);
    if (rc) {
        muser_session_reset(s);
        return rc;
    }
    s->pos = depth;
    return mu_spec_fill_kv(s, depth, seed);
}

const mu_prof_entry *mu_session_profile(muser_session *s, bool on) {
    return s->backend->ops->profile ? s->backend->ops->profile(s->backend, on) : NULL;
}

const mu_model *mu_session_model(const muser_session *s) { return s->model; }
mu_backend *mu_session_backend_of(muser_session *s) { return s->backend; }
const mu_session_config *mu_session_config_of(const muser_session *s) { return &s->cfg; }

void muser_session_set_checkpoints(muser_session *s, int max) {
    if (max < 0) max = 0;
    while (s->n_ckpt > max) drop_checkpoint(&s->ckpt[--s->n_ckpt]);
    struct checkpoint *c = realloc(s->ckpt, sizeof *c * (size_t)(max ? max : 1));
    if (!c) return;
    s->ckpt = c;
    s->max_ckpt = max;
}

static bool has_rings(const muser_session *s) {
    for (int l = 0; l < s->model->hp.n_layer; l++)
        if (s->model->layers[l].is_swa && s->model->hp.n_swa > 0) return true;
    return false;
}

/* Restores the newest checkpoint whose tokens are a prefix of both the
 * session's history and the new prompt tokens[0..n), and that leaves at
 * least one token to feed unless it also saved the logits. Returns its
 * position, or -1. */
static int restore_checkpoint(muser_session *s, const muser_token *tokens, int n) {
    const size_t V = (size_t)s->model->hp.n_vocab;
    for (int i = 0; i < s->n_ckpt; i++) {
        struct checkpoint *c = &s->ckpt[i];
        if (c->pos > n || c->pos > s->pos || (c->pos == n && !c->logits)) continue;
        if (memcmp(c->tokens, tokens, sizeof(muser_token) * (size_t)c->pos) != 0) continue;
        if (memcmp(c->tokens, s->history, sizeof(muser_token) * (size_t)c->pos) != 0) continue;
        if (s->backend->ops->checkpoint_restore(s->backend, c->blob, c->size, c->pos) != 0) continue;
        s->pos = c->pos;
        s->logit_rows = 0;
        mu_spec_rewind(s, c->pos);
        if (c->pos == n) {
            memcpy(s->logits, c->logits, sizeof(float) * V);
            s->logit_rows = 1;
        }
        return c->pos;
    }
    return -1;
}

static void save_checkpoint(muser_session *s) {
    if (!s->max_ckpt || !s->backend->ops->checkpoint_save || !has_rings(s)) return;
    const size_t V = (size_t)s->model->hp.n_vocab;
    struct checkpoint c = {s->pos, malloc(sizeof(muser_token) * (size_t)(s->pos ? s->pos : 1)), NULL, NULL, 0};
    if (!c.tokens || s->backend->ops->checkpoint_save(s->backend, &c.blob, &c.size) != 0) {
        drop_checkpoint(&c);
        return;
    }
    memcpy(c.tokens, s->history, sizeof(muser_token) * (size_t)s->pos);
    const float *last = muser_session_logits(s);
    if (last && (c.logits = malloc(sizeof(float) * V))) memcpy(c.logits, last, sizeof(float) * V);
    if (s->n_ckpt == s->max_ckpt) drop_checkpoint(&s->ckpt[--s->n_ckpt]);
    memmove(s->ckpt + 1, s->ckpt, sizeof *s->ckpt * (size_t)s->n_ckpt);
    s->ckpt[0] = c;
    s->n_ckpt++;
}

int muser_session_sync_begin(muser_session *s, const muser_token *tokens, int n, int *kept) {
    *kept = 0;
    if (n <= 0) return mu_fail(MUSER_EINVAL, "empty prompt");
    if (n > s->cfg.n_ctx)
        return mu_fail(MUSER_ECONTEXT, "the prompt has %d tokens but the context holds %d", n, s->cfg.n_ctx);
    int common = 0;
    while (common < s->pos && common < n && s->history[common] == tokens[common]) common++;
    if (common == n && s->pos == n && s->logit_rows > 0) { /* already there, logits included */
        *kept = n;
        return 0;
    }
    /* Logits are needed for the last prompt token: re-feed it if it is held. */
    int keep = common == n ? n - 1 : common;
    if (keep < s->pos && muser_session_truncate(s, keep) != 0) {
        /* A ring cannot rewind that far: the newest usable checkpoint, else start over. */
        int at = restore_checkpoint(s, tokens, n);
        if (at < 0) {
            muser_session_reset(s);
            at = 0;
        }
        keep = at;
    }
    *kept = keep;
    return 0;
}

void muser_session_sync_end(muser_session *s) { save_checkpoint(s); }

int muser_session_sync(muser_session *s, const muser_token *tokens, int n, int *reused) {
    int keep = 0;
    int rc = muser_session_sync_begin(s, tokens, n, &keep);
    if (reused) *reused = keep;
    if (rc || keep == n) return rc;
    rc = muser_session_feed(s, tokens + keep, n - keep, false);
    if (rc == 0) muser_session_sync_end(s);
    return rc;
}

const muser_token *muser_session_tokens(const muser_session *s) { return s->history; }

uint64_t muser_session_bytes_per_token(const muser_session *s) {
    int elem = s->cfg.kv_type == MUSER_KV_F32 ? 4 : 2;
    return s->model->weight_bytes_per_token + mu_model_kv_bytes_per_token(s->model, s->pos, elem);
}

const char *muser_model_meta_str(const muser_model *model, const char *key, size_t *len) {
    gguf_str v;
    if (gguf_get_str(model->file, key, &v) != 1) return NULL;
    if (len) *len = (size_t)v.len;
    return v.ptr;
}

