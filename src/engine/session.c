/* session.c — the public model and session API (include/muser.h): loading,
 * backend selection, and feeding tokens in chunks of n_batch. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "cpu/pool.h"
#include "text/vocab.h"
#include "util/error.h"

struct muser_session {
    const mu_model *model;
    mu_session_config cfg;
    muser_backend backend_kind;
    mu_backend *backend;
    int pos;
    float *logits;     /* [logit_rows][n_vocab] */
    int logit_rows, logit_cap;
};

int muser_model_load(const char *path, muser_model **out) {
    *out = NULL;
    gguf_file *f = NULL;
    int rc = gguf_open(path, &f);
    if (rc) return rc;
    mu_model *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(f);
        return mu_fail(MUSER_ENOMEM, "out of memory");
    }
    rc = mu_model_bind(f, m);
    if (!rc) rc = mu_vocab_load(f, m->hp.n_vocab, &m->vocab);
    if (rc) {
        mu_model_unbind(m);
        free(m);
        gguf_close(f);
        return rc;
    }
    *out = m;
    return 0;
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
    p.lane = MUSER_LANE_EXACT;
    p.kv_type = MUSER_KV_F16;
    return p;
}

int muser_session_new(const muser_model *model, const muser_session_params *params, muser_session **out) {
    *out = NULL;
    muser_session_params p = params ? *params : muser_session_default_params();
    const mu_hparams *hp = &model->hp;
    mu_session_config cfg;
    memset(&cfg, 0, sizeof cfg);
    if (p.n_ctx < 0 || p.n_batch < 0 || p.n_threads < 0)
        return mu_fail(MUSER_EINVAL, "context, batch and thread counts must not be negative");
    cfg.n_ctx = p.n_ctx ? p.n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if (cfg.n_ctx > hp->n_ctx_train)
        return mu_fail(MUSER_EINVAL, "context %d exceeds the model's trained context %d", cfg.n_ctx, hp->n_ctx_train);
    cfg.n_batch = p.n_batch ? p.n_batch : 512;
    if (cfg.n_batch > cfg.n_ctx) cfg.n_batch = cfg.n_ctx;
    cfg.n_threads = p.n_threads ? p.n_threads : mu_cpu_count();
    cfg.lane = p.lane;
    cfg.kv_type = p.kv_type;
    cfg.gpus = p.gpus;
    if (p.lane != MUSER_LANE_EXACT && p.lane != MUSER_LANE_FAST) return mu_fail(MUSER_EINVAL, "unknown lane");
    if (p.kv_type != MUSER_KV_F16 && p.kv_type != MUSER_KV_F32) return mu_fail(MUSER_EINVAL, "unknown KV type");

    muser_session *s = calloc(1, sizeof *s);
    if (!s) return mu_fail(MUSER_ENOMEM, "out of memory");
    s->model = model;
    s->cfg = cfg;
    int rc;
    switch (p.backend) {
    case MUSER_BACKEND_CPU: rc = mu_cpu_backend_new(model, &cfg, &s->backend); break;
    case MUSER_BACKEND_REF: rc = mu_ref_backend_new(model, &cfg, &s->backend); break;
    case MUSER_BACKEND_CUDA: rc = mu_cuda_backend_new(model, &cfg, &s->backend); break;
    case MUSER_BACKEND_AUTO:
        rc = mu_cuda_backend_new(model, &cfg, &s->backend);
        if (rc == 0) {
            p.backend = MUSER_BACKEND_CUDA;
        } else {
            mu_info("no usable GPU (%s); running on the CPU", muser_last_error());
            p.backend = MUSER_BACKEND_CPU;
            rc = mu_cpu_backend_new(model, &cfg, &s->backend);
        }
        break;
    default: rc = mu_fail(MUSER_EINVAL, "unknown backend %d", (int)p.backend);
    }
    if (rc) {
        free(s);
        return rc;
    }
    s->backend_kind = p.backend;
    *out = s;
    return 0;
}

void muser_session_free(muser_session *s) {
    if (!s) return;
    if (s->backend) s->backend->ops->free(s->backend);
    free(s->logits);
    free(s);
}

muser_backend muser_session_backend(const muser_session *s) { return s->backend_kind; }

int muser_session_feed(muser_session *s, const muser_token *tokens, int n, bool all_logits) {
    const int V = s->model->hp.n_vocab;
    if (n <= 0) return mu_fail(MUSER_EINVAL, "nothing to feed");
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return mu_fail(MUSER_ERANGE, "token id %d at index %d is outside the vocabulary [0, %d)", tokens[i], i, V);
    if ((int64_t)s->pos + n > s->cfg.n_ctx)
        return mu_fail(MUSER_ECONTEXT, "context is full: %d tokens held + %d new > context size %d", s->pos, n,
                       s->cfg.n_ctx);
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
        if (rc) {
            /* Roll back so a failed feed leaves the session as it was. */
            if (s->backend->ops->truncate(s->backend, start) != 0) s->backend->ops->reset(s->backend), s->pos = 0;
            else s->pos = start;
            s->logit_rows = 0;
            return rc;
        }
        s->pos += chunk;
        done += chunk;
    }
    s->logit_rows = rows;
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
    s->backend->ops->reset(s->backend);
    s->pos = 0;
    s->logit_rows = 0;
}

int muser_session_truncate(muser_session *s, int pos) {
    if (pos < 0 || pos > s->pos) return mu_fail(MUSER_ERANGE, "cannot truncate to %d (session holds %d)", pos, s->pos);
    if (pos == s->pos) return 0;
    int rc = s->backend->ops->truncate(s->backend, pos);
    if (rc) return rc;
    s->pos = pos;
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
    return 0;
}

const mu_prof_entry *mu_session_profile(muser_session *s, bool on) {
    return s->backend->ops->profile ? s->backend->ops->profile(s->backend, on) : NULL;
}

const mu_model *mu_session_model(const muser_session *s) { return s->model; }
const mu_session_config *mu_session_config_of(const muser_session *s) { return &s->cfg; }
