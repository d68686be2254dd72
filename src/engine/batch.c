/* batch.c — one decode step for several sessions of a model
 * (muser_batch_decode), and its forms that hand back only what a choice
 * needs: each row's greedy token (muser_batch_decode_greedy) or its top
 * logits after a bias (muser_batch_decode_top). A backend that has the
 * op finds those where the logits are (a GPU copies ids, not rows of
 * logits); otherwise the host takes them from each row's logits.
 */
#include <math.h>
#include <stdlib.h>

#include "engine/engine.h"
#include "engine/parity.h"
#include "engine/session_internal.h"
#include "sample/sample.h"
#include "util/error.h"

/* What a step hands back besides the sessions' new positions: nothing
 * (k 0: every session keeps its logits), or per row the k top logits
 * after its bias (vals, ids [n][k]); greedy: k 1, no bias, no vals. */
typedef struct pick {
    const muser_logit_bias *bias; /* [n] or NULL */
    int k;
    float *vals;       /* [n][k] or NULL (greedy) */
    muser_token *ids;  /* [n][k] */
} pick;

static bool plain_greedy(const pick *pk) { return pk->k == 1 && !pk->bias && !pk->vals; }

/* Row i's pick from its logits, on the host; a bias is added to them in
 * place (after a pick they are not the caller's to read, as on a GPU).
 * Returns whether it changed them. */
static bool pick_on_host(const pick *pk, int i, float *logits, int n_vocab) {
    if (plain_greedy(pk)) {
        pk->ids[i] = mu_argmax(logits, n_vocab);
        return false;
    }
    const muser_logit_bias *b = pk->bias ? &pk->bias[i] : NULL;
    const bool biased = b && b->n > 0;
    for (int j = 0; biased && j < b->n; j++) logits[b->ids[j]] += b->values[j];
    mu_top_logits(logits, n_vocab, pk->k, pk->vals + (size_t)i * pk->k, pk->ids + (size_t)i * pk->k);
    return biased;
}

/* pk's view of rows [done, done + n) */
static pick pick_from(const pick *pk, int done) {
    pick p = *pk;
    if (p.bias) p.bias += done;
    if (p.vals) p.vals += (size_t)done * p.k;
    p.ids += (size_t)done * p.k;
    return p;
}

/* The batch as n one-token feeds (a plain greedy pick through the
 * backend's decode_select where it has one); on failure the fed ones step
 * back. */
static int decode_one_by_one(muser_session *const *sessions, const muser_token *tokens, int n, const pick *pk) {
    for (int i = 0; i < n; i++) {
        muser_session *s = sessions[i];
        /* (a session with a drafter feeds: its feeds capture the drafter's inputs) */
        const bool select = pk && plain_greedy(pk) && !s->spec;
        int rc = select ? mu_session_decode_select(s, tokens[i], 0.0f, 0, false, &pk->ids[i])
                        : muser_session_feed(s, &tokens[i], 1, false);
        if (rc) {
            for (int j = 0; j < i; j++) muser_session_truncate(sessions[j], sessions[j]->pos - 1);
            return rc;
        }
        const int V = s->model->hp.n_vocab;
        if (pk && !select && pick_on_host(pk, i, s->logits + (size_t)(s->logit_rows - 1) * V, V)) s->logit_rows = 0;
    }
    return 0;
}

/* One chunk of a batch: rows mixed through the backend (with a pick, made
 * where the logits are when the backend has the op, else by the host from
 * them), or one by one where it says MUSER_EUNSUPPORTED. */
static int batch_chunk(const mu_backend_ops *ops, mu_backend *const *rows, const muser_token *tokens, const int *pos,
                       int n, float *const *dst, int n_vocab, const pick *pk) {
    const bool greedy_op = pk && plain_greedy(pk) && ops->forward_batch_greedy;
    const bool top_op = pk && !greedy_op && pk->vals && ops->forward_batch_top;
    int rc = greedy_op ? ops->forward_batch_greedy(rows, tokens, pos, n, pk->ids)
             : top_op  ? ops->forward_batch_top(rows, tokens, pos, n, pk->bias, pk->k, pk->vals, pk->ids)
                       : ops->forward_batch(rows, tokens, pos, n, dst);
    if (rc == MUSER_EUNSUPPORTED) {
        /* rows the backend does not mix (or too few to gain from it): this
         * chunk's rows one by one; the backend changed nothing before saying so */
        mu_clear_error();
        rc = 0;
        for (int i = 0; i < n && !rc; i++) {
            mu_backend *r = rows[i];
            if (pk && plain_greedy(pk) && r->decode_select) {
                rc = r->decode_select(r, tokens[i], pos[i], 0.0f, 0, NULL, &pk->ids[i]);
                continue;
            }
            rc = r->ops->forward(r, &tokens[i], 1, pos[i], false, dst[i]);
            if (!rc && pk) pick_on_host(pk, i, dst[i], n_vocab);
        }
        return rc;
    }
    for (int i = 0; i < n && pk && !greedy_op && !top_op && !rc; i++) pick_on_host(pk, i, dst[i], n_vocab);
    return rc;
}

static int batch_decode(muser_session *const *sessions, const muser_token *tokens, int n, const pick *pk) {
    if (n <= 0 || !sessions || !tokens) return mu_fail(MUSER_EINVAL, "batch decode: nothing to decode");
    for (int i = 0; i < n; i++) {
        const muser_session *s = sessions[i];
        if (!s) return mu_fail(MUSER_EINVAL, "batch decode: session %d is NULL", i);
        if (s->model != sessions[0]->model)
            return mu_fail(MUSER_EINVAL, "batch decode: session %d runs another model", i);
        for (int j = 0; j < i; j++)
            if (sessions[j] == s) return mu_fail(MUSER_EINVAL, "batch decode: session %d repeats session %d", i, j);
        if (tokens[i] < 0 || tokens[i] >= s->model->hp.n_vocab)
            return mu_fail(MUSER_ERANGE, "batch decode: token id %d for session %d is outside the vocabulary [0, %d)",
                           tokens[i], i, s->model->hp.n_vocab);
        if (s->pos >= s->cfg.n_ctx)
            return mu_fail(MUSER_ECONTEXT, "batch decode: session %d is full (%d tokens)", i, s->pos);
        const muser_logit_bias *b = pk && pk->bias ? &pk->bias[i] : NULL;
        for (int j = 0; b && j < b->n; j++)
            if (b->ids[j] < 0 || b->ids[j] >= s->model->hp.n_vocab || !isfinite(b->values[j]))
                return mu_fail(MUSER_ERANGE, "batch decode: session %d's bias %d (id %d, %g) is not a finite value "
                               "for an id of the vocabulary", i, j, b->ids[j], (double)b->values[j]);
    }
    const mu_backend_ops *ops = sessions[0]->backend->ops;
    /* a session with a drafter needs its hidden states, which only its own feeds capture */
    bool batched = ops->forward_batch != NULL && n > 1;
    for (int i = 0; i < n && batched; i++) batched = sessions[i]->spec == NULL;
    for (int i = 0; i < n && batched; i++) batched = sessions[i]->backend->ops == ops;
    if (!batched) return decode_one_by_one(sessions, tokens, n, pk);
    const size_t V = (size_t)sessions[0]->model->hp.n_vocab;
    for (int i = 0; i < n; i++) {
        muser_session *s = sessions[i];
        if (s->logit_cap < 1) {
            float *l = malloc(V * sizeof(float));
            if (!l) return mu_fail(MUSER_ENOMEM, "out of memory for logits");
            free(s->logits);
            s->logits = l;
            s->logit_cap = 1;
        }
    }
    /* Per-row arguments, in chunks the leader's activations can hold. */
    mu_backend **rows = malloc(sizeof(mu_backend *) * (size_t)n);
    int *pos = malloc(sizeof(int) * (size_t)n);
    float **dst = malloc(sizeof(float *) * (size_t)n);
    if (!rows || !pos || !dst) {
        free(rows), free(pos), free(dst);
        return mu_fail(MUSER_ENOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        rows[i] = sessions[i]->backend;
        pos[i] = sessions[i]->pos;
        dst[i] = sessions[i]->logits;
    }
    int rc = 0;
    for (int done = 0; done < n && !rc;) {
        const int cap = sessions[done]->cfg.n_batch;
        const int chunk = n - done < cap ? n - done : cap;
        const pick part = pk ? pick_from(pk, done) : (pick){0};
        rc = batch_chunk(ops, rows + done, tokens + done, pos + done, chunk, dst + done, (int)V, pk ? &part : NULL);
        if (rc) {
            /* Every row goes back to where it was; KV rows of a half-done step are cut. */
            for (int i = 0; i < n; i++) {
                muser_session *s = sessions[i];
                s->pos = pos[i];
                if (s->backend->ops->truncate(s->backend, s->pos) != 0) s->backend->ops->reset(s->backend), s->pos = 0;
                s->logit_rows = 0;
            }
            break;
        }
        for (int i = done; i < done + chunk; i++) {
            muser_session *s = sessions[i];
            s->history[s->pos++] = tokens[i];
            s->logit_rows = pk ? 0 : 1;
        }
        done += chunk;
    }
    free(rows), free(pos), free(dst);
    return rc;
}

int muser_batch_decode(muser_session *const *sessions, const muser_token *tokens, int n) {
    return batch_decode(sessions, tokens, n, NULL);
}

int muser_batch_decode_greedy(muser_session *const *sessions, const muser_token *tokens, int n, muser_token *next) {
    if (!next || next == tokens) return mu_fail(MUSER_EINVAL, "batch decode: nowhere to put the choices");
    const pick pk = {NULL, 1, NULL, next};
    return batch_decode(sessions, tokens, n, &pk);
}

int muser_batch_decode_top(muser_session *const *sessions, const muser_token *tokens, int n,
                           const muser_logit_bias *bias, int k, float *top_logits, muser_token *top_ids) {
    if (!top_logits || !top_ids || top_ids == tokens)
        return mu_fail(MUSER_EINVAL, "batch decode: nowhere to put the top logits");
    if (k < 1 || k > MUSER_TOP_MAX) return mu_fail(MUSER_EINVAL, "batch decode: %d top logits (1 to %d)", k, MUSER_TOP_MAX);
    if (n > 0 && sessions && sessions[0] && k > sessions[0]->model->hp.n_vocab)
        return mu_fail(MUSER_EINVAL, "batch decode: %d top logits of a vocabulary of %d", k,
                       sessions[0]->model->hp.n_vocab);
    const pick pk = {bias, k, top_logits, top_ids};
    return batch_decode(sessions, tokens, n, &pk);
}
