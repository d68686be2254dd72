/* spec.c — speculative decoding with a DFlash drafter (docs/dflash.md).
 *
 * The drafter's cache follows the target's timeline position for position:
 * every chunk the target computes (prompt chunks through
 * muser_session_feed, verify steps here) also captures the target's hidden
 * states at the drafter's layers, and the positions the session keeps are
 * injected into the drafter's cache. A step:
 *
 *   draft   the drafter's one non-causal pass over [last, mask x n] at
 *           positions P .. P+n; the argmax at block row i is the guess for
 *           position P+i (its block K/V rows are then dropped)
 *   verify  the target's one n+1 row chunk [last, d_1 .. d_n] at P .. P+n,
 *           logits for every row, its ring rows guarded (tentative_begin)
 *   commit  row i's choice (greedy, or rejection sampling against d_{i+1})
 *           is taken while it equals the draft; the first that differs, or
 *           row n's, is the target's own token and ends the step; the
 *           planes keep last and the accepted drafts (tentative_keep), the
 *           drafter takes those rows' hidden states.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends.h"
#include "engine/parity.h"
#include "engine/session_internal.h"
#include "model/dflash.h"
#include "sample/sample.h"
#include "util/clock.h"
#include "util/error.h"

typedef struct mu_spec {
    const mu_drafter *d;
    mu_backend *draft;        /* the drafter's backend                                     */
    int draft_max;            /* tokens drafted per step                                    */
    int pos;                  /* positions whose hidden states the drafter's cache holds  */
    float *features;          /* [n_batch][n_target_layers][n_embd] the target's captured rows */
    float *draft_logits;      /* [draft_max + 1][drafter head rows]                        */
    muser_token *block;       /* [draft_max + 1] the block fed to the drafter, then the target */
    mu_draft_override_fn override; /* tests: proposals instead of the drafter's, or NULL */
    void *override_ctx;
    muser_spec_stats stats;
} mu_spec;

void mu_spec_free(mu_spec *sp) {
    if (!sp) return;
    if (sp->draft) sp->draft->ops->free(sp->draft);
    free(sp->features);
    free(sp->draft_logits);
    free(sp->block);
    free(sp);
}

int muser_drafter_load(const char *path, const muser_model *target, muser_drafter **out) {
    return mu_drafter_load(path, target, out);
}

void muser_drafter_free(muser_drafter *d) { mu_drafter_free(d); }

void muser_drafter_get_info(const muser_drafter *d, muser_drafter_info *info) {
    memset(info, 0, sizeof *info);
    info->n_layer = d->m.hp.n_layer;
    info->n_embd = d->m.hp.n_embd;
    info->block_size = d->block_size;
    info->n_target_layers = d->n_target_layers;
    info->target_layers = d->target_layers;
    info->mask_token = d->mask_token;
    info->sliding_window = d->m.hp.n_swa;
}

int muser_session_set_drafter(muser_session *s, const muser_drafter *d, int draft_max) {
    const mu_backend_ops *ops = s->backend->ops;
    if (!d) {
        if (s->spec && ops->set_capture) ops->set_capture(s->backend, NULL, 0, NULL);
        mu_spec_free(s->spec);
        s->spec = NULL;
        return 0;
    }
    if (s->spec) return mu_fail(MUSER_EINVAL, "the session already has a drafter");
    if (s->pos != 0) return mu_fail(MUSER_EINVAL, "attach a drafter to an empty session (this one holds %d tokens)", s->pos);
    if (d->m.hp.n_embd != s->model->hp.n_embd || d->fc.cols != (int64_t)d->n_target_layers * s->model->hp.n_embd)
        return mu_fail(MUSER_EINVAL, "the drafter was loaded for another target model");
    for (int k = 0; k < d->n_target_layers; k++)
        if (d->target_layers[k] >= s->model->hp.n_layer)
            return mu_fail(MUSER_EINVAL, "the drafter was loaded for another target model");
    if (draft_max < 0 || draft_max > d->block_size - 1)
        return mu_fail(MUSER_EINVAL, "--draft-max %d: the drafter's block of %d drafts 1 to %d tokens", draft_max,
                       d->block_size, d->block_size - 1);
    if (!draft_max) draft_max = d->block_size - 1;
    if (draft_max > s->cfg.n_batch - 1) draft_max = s->cfg.n_batch - 1; /* a verify step is one chunk */
    if (draft_max < 1) return mu_fail(MUSER_EINVAL, "a batch of %d leaves no room for drafted tokens", s->cfg.n_batch);
    if (mu_backend_is_split(s->backend)) { /* (opening a drafter beside it refuses, with the reason) */
        mu_backend *none = NULL;
        return mu_backend_open_drafter(s->backend_kind, d, &s->cfg, s->backend, &none);
    }
    if (!ops->set_capture || !ops->tentative_begin || !ops->tentative_keep)
        return mu_fail(MUSER_EUNSUPPORTED,
                       "the %s backend cannot verify drafts yet in this configuration (no hidden-state capture or "
                       "tentative positions); speculative decoding runs on the CPU and on one GPU",
                       ops->name);
    mu_spec *sp = calloc(1, sizeof *sp);
    if (!sp) return mu_fail(MUSER_ENOMEM, "out of memory");
    sp->d = d;
    sp->draft_max = draft_max;
    int rc = mu_backend_open_drafter(s->backend_kind, d, &s->cfg, s->backend, &sp->draft);
    const size_t E = (size_t)s->model->hp.n_embd;
    if (!rc) {
        sp->features = malloc(sizeof(float) * (size_t)s->cfg.n_batch * (size_t)d->n_target_layers * E);
        sp->draft_logits = malloc(sizeof(float) * (size_t)(draft_max + 1) * (size_t)d->m.hp.n_vocab);
        sp->block = malloc(sizeof(muser_token) * (size_t)(draft_max + 1));
        if (!sp->features || !sp->draft_logits || !sp->block) rc = mu_fail(MUSER_ENOMEM, "out of memory for the drafter");
    }
    if (!rc) rc = ops->set_capture(s->backend, d->target_layers, d->n_target_layers, sp->features);
    if (rc) {
        mu_spec_free(sp);
        return rc;
    }
    s->spec = sp;
    return 0;
}

void mu_session_set_draft_override(muser_session *s, mu_draft_override_fn fn, void *ctx) {
    if (!s->spec) return;
    s->spec->override = fn;
    s->spec->override_ctx = ctx;
}

void muser_session_spec_stats(const muser_session *s, muser_spec_stats *st) {
    if (s->spec) *st = s->spec->stats;
    else memset(st, 0, sizeof *st);
}

/* The captured rows of the chunk just computed, n of them at pos0, into
 * the drafter's cache. */
static int inject(muser_session *s, int pos0, int n) {
    mu_spec *sp = s->spec;
    if (pos0 != sp->pos) mu_spec_rewind(s, pos0); /* never expected: resynchronize */
    const double t0 = mu_now_seconds();
    int rc = sp->draft->ops->draft_inject(sp->draft, sp->features, n, pos0);
    sp->stats.draft_seconds += mu_now_seconds() - t0;
    if (rc) return rc;
    sp->pos = pos0 + n;
    return 0;
}

int mu_spec_after_feed(muser_session *s, int pos0, int n) { return s->spec ? inject(s, pos0, n) : 0; }

void mu_spec_rewind(muser_session *s, int pos) {
    mu_spec *sp = s->spec;
    if (!sp) return;
    sp->draft->ops->truncate(sp->draft, pos); /* a drafter's truncate restarts rather than fail */
    sp->pos = pos;
}

int mu_spec_fill_kv(muser_session *s, int depth, uint64_t seed) {
    mu_spec *sp = s->spec;
    if (!sp) return 0;
    sp->pos = depth;
    if (!sp->draft->ops->fill_kv) {
        mu_spec_rewind(s, depth);
        return 0;
    }
    return sp->draft->ops->fill_kv(sp->draft, depth, seed ^ 0xD1A5ull);
}

/* n guesses for positions P+1 .. P+n after last (at P). */
static int draft_block(muser_session *s, muser_token last, int n, muser_token *drafts) {
    mu_spec *sp = s->spec;
    const int P = s->pos;
    if (sp->override) return sp->override(sp->override_ctx, P, last, n, drafts);
    const mu_drafter *d = sp->d;
    const int V = d->m.hp.n_vocab;
    sp->block[0] = last;
    for (int i = 1; i <= n; i++) sp->block[i] = d->mask_token;
    const double t0 = mu_now_seconds();
    int rc = sp->draft->ops->forward(sp->draft, sp->block, n + 1, P, true, sp->draft_logits);
    sp->draft->ops->truncate(sp->draft, P); /* the block's own K/V rows go */
    sp->stats.draft_seconds += mu_now_seconds() - t0;
    if (rc) return rc;
    for (int i = 1; i <= n; i++) {
        const muser_token a = mu_argmax(sp->draft_logits + (size_t)i * V, V);
        drafts[i - 1] = d->d2t ? d->d2t[a] : a;
    }
    return 0;
}

/* A plain step: feed last, choose the next token. */
static int plain_step(muser_session *s, muser_token last, muser_sampler *smp, muser_token *out, int *n_out) {
    int rc = muser_session_feed(s, &last, 1, false);
    if (rc) return rc;
    const float *l = muser_session_logits(s);
    out[0] = smp ? muser_sampler_sample(smp, l) : mu_argmax(l, s->model->hp.n_vocab);
    *n_out = 1;
    return 0;
}

int muser_session_spec_step(muser_session *s, muser_token last, muser_sampler *smp, int max_new, muser_token *out,
                            int *n_out) {
    *n_out = 0;
    const int V = s->model->hp.n_vocab, P = s->pos;
    if (max_new < 1) return mu_fail(MUSER_EINVAL, "spec step: max_new must be at least 1");
    if (last < 0 || last >= V) return mu_fail(MUSER_ERANGE, "token id %d is outside the vocabulary [0, %d)", last, V);
    mu_spec *sp = s->spec;
    int n = sp ? sp->draft_max : 0;
    if (n > max_new - 1) n = max_new - 1;
    if (n > s->cfg.n_ctx - P - 1) n = s->cfg.n_ctx - P - 1; /* last and the drafts must fit */
    if (n < 1) return plain_step(s, last, smp, out, n_out);

    muser_token *drafts = out; /* the accepted drafts end up where they were guessed */
    int rc = draft_block(s, last, n, drafts);
    if (rc) return rc;

    /* verify: one chunk of n + 1 rows, every row's logits */
    if (s->logit_cap < n + 1) {
        float *l = realloc(s->logits, sizeof(float) * (size_t)(n + 1) * (size_t)V);
        if (!l) return mu_fail(MUSER_ENOMEM, "out of memory for logits");
        s->logits = l;
        s->logit_cap = n + 1;
    }
    sp->block[0] = last;
    memcpy(sp->block + 1, drafts, sizeof(muser_token) * (size_t)n);
    const mu_backend_ops *ops = s->backend->ops;
    const double t0 = mu_now_seconds();
    rc = ops->tentative_begin(s->backend, n + 1);
    if (!rc) {
        rc = ops->forward(s->backend, sp->block, n + 1, P, true, s->logits);
        if (rc) ops->tentative_keep(s->backend, 0);
    }
    s->logit_rows = 0;
    if (rc) return rc;

    /* commit the longest agreeing prefix and the target's own token */
    int k = 0;
    muser_token next;
    for (;; k++) {
        const float *row = s->logits + (size_t)k * V;
        bool agrees = false;
        if (k == n) next = smp ? muser_sampler_sample(smp, row) : mu_argmax(row, V);
        else if (smp) next = mu_sampler_verify(smp, row, drafts[k], &agrees);
        else agrees = (next = mu_argmax(row, V)) == drafts[k];
        if (!agrees) break;
    }
    rc = ops->tentative_keep(s->backend, k + 1);
    sp->stats.verify_seconds += mu_now_seconds() - t0;
    if (rc) {
        /* the planes are in doubt: back to before the step */
        if (ops->truncate(s->backend, P) != 0) ops->reset(s->backend), s->pos = 0;
        mu_spec_rewind(s, s->pos);
        return rc;
    }
    memcpy(s->history + P, sp->block, sizeof(muser_token) * (size_t)(k + 1));
    s->pos = P + k + 1;
    memmove(s->logits, s->logits + (size_t)k * V, sizeof(float) * (size_t)V);
    s->logit_rows = 1;
    out[k] = next;
    *n_out = k + 1;
    sp->stats.steps++;
    sp->stats.drafted += (uint64_t)n;
    sp->stats.accepted += (uint64_t)k;
    return inject(s, P, k + 1);
}
