/* backends_split.c — one session's layers on two backends (-ngl N,
 * --gpu-layers N): the embedding and layers [0, N) on the first (the GPU),
 * layers [N, L) and the head on the second (the CPU), in the same token
 * step. Each side is a backend opened on a layer view of the model
 * (mu_model_layer_view) and holds the KV planes of its own layers; the
 * residual stream of a chunk crosses once, through host rows both sides
 * were given (set_hidden), and the next token goes back in the next
 * step's records:
 *
 *   tokens ─► first: embedding, layers [0, N) ─► rows [T][E] ─► second: layers [N, L), norm, head ─► logits
 *
 * Every step the session takes (a prefill chunk, one decoded token, a
 * batched row of several sessions) runs the first side, then the second.
 * Rewinds and ring checkpoints go to both; the order of a rewind is chosen
 * so that a refusal (a sliding ring that no longer holds what the position
 * needs) comes before either side has changed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends.h"
#include "util/error.h"

typedef struct split_backend {
    mu_backend base;
    const mu_model *m;   /* the whole model                                        */
    mu_backend *side[2]; /* [0]: the embedding and layers [0, n_first); [1]: the rest and the head */
    const mu_model *view[2];
    int n_first;
    int64_t E;
    float *rows;         /* [n_batch][E] the residual stream crossing from side 0 to side 1 */
    char desc[1536];
} split_backend;

static const char *kind_name(muser_backend k) {
    return k == MUSER_BACKEND_CUDA ? "the GPU" : k == MUSER_BACKEND_CPU ? "the CPU" : "the reference backend";
}

static bool has_rings(const mu_model *m) {
    for (int l = 0; l < m->hp.n_layer; l++)
        if (m->layers[l].is_swa && m->hp.n_swa > 0) return true;
    return false;
}

static int split_forward(mu_backend *base, const muser_token *tokens, int T, int pos0, bool all_logits,
                         float *logits) {
    split_backend *s = (split_backend *)base;
    int rc = s->side[0]->ops->forward(s->side[0], tokens, T, pos0, false, NULL);
    if (!rc) rc = s->side[1]->ops->forward(s->side[1], tokens, T, pos0, all_logits, logits);
    return rc;
}

/* A side that may refuse (it has sliding rings) goes first: a refusal then
 * leaves both unchanged. Both sides' rings have the same capacity and
 * history, so when both have rings they answer alike. */
static int split_truncate(mu_backend *base, int pos) {
    split_backend *s = (split_backend *)base;
    const int first = has_rings(s->view[0]) ? 0 : 1;
    int rc = s->side[first]->ops->truncate(s->side[first], pos);
    if (!rc) rc = s->side[!first]->ops->truncate(s->side[!first], pos);
    return rc;
}

static void split_reset(mu_backend *base) {
    split_backend *s = (split_backend *)base;
    for (int k = 0; k < 2; k++) s->side[k]->ops->reset(s->side[k]);
}

static void split_free(mu_backend *base) {
    split_backend *s = (split_backend *)base;
    if (!s) return;
    for (int k = 0; k < 2; k++)
        if (s->side[k]) s->side[k]->ops->free(s->side[k]);
    free(s->rows);
    free(s);
}

static int split_fill_kv(mu_backend *base, int depth, uint64_t seed) {
    split_backend *s = (split_backend *)base;
    for (int k = 0; k < 2; k++) {
        if (!s->side[k]->ops->fill_kv)
            return mu_fail(MUSER_EUNSUPPORTED, "the %s backend cannot fill its KV cache directly",
                           s->side[k]->ops->name);
        int rc = s->side[k]->ops->fill_kv(s->side[k], depth, seed + (uint64_t)k * 7919);
        if (rc) return rc;
    }
    return 0;
}

static const char *split_describe(mu_backend *base) { return ((split_backend *)base)->desc; }

/* ---- ring checkpoints: the two sides' blobs one after the other ---------------------------
 * [uint64 size0][uint64 size1][blob0][blob1] */
static int split_checkpoint_save(mu_backend *base, void **out, size_t *size) {
    split_backend *s = (split_backend *)base;
    void *blob[2] = {NULL, NULL};
    size_t n[2] = {0, 0};
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) rc = s->side[k]->ops->checkpoint_save(s->side[k], &blob[k], &n[k]);
    uint8_t *all = rc ? NULL : malloc(16 + n[0] + n[1]);
    if (!rc && !all) rc = mu_fail(MUSER_ENOMEM, "out of memory for a checkpoint");
    if (!rc) {
        const uint64_t hdr[2] = {n[0], n[1]};
        memcpy(all, hdr, 16);
        memcpy(all + 16, blob[0], n[0]);
        memcpy(all + 16 + n[0], blob[1], n[1]);
        *out = all;
        *size = 16 + n[0] + n[1];
    }
    free(blob[0]);
    free(blob[1]);
    return rc;
}

static int split_checkpoint_restore(mu_backend *base, const void *blob, size_t size, int pos) {
    split_backend *s = (split_backend *)base;
    uint64_t hdr[2];
    if (size < 16) return mu_fail(MUSER_EINVAL, "checkpoint: a split's blob of %zu bytes", size);
    memcpy(hdr, blob, 16);
    if (hdr[0] > size - 16 || hdr[1] != size - 16 - hdr[0])
        return mu_fail(MUSER_EINVAL, "checkpoint: the split's blob sizes do not add up");
    const uint8_t *b = (const uint8_t *)blob + 16;
    /* (each side checks its blob whole before it changes anything; the
     * engine falls back to another checkpoint, or a reset, on failure) */
    const int first = has_rings(s->view[0]) ? 0 : 1;
    int rc = s->side[first]->ops->checkpoint_restore(s->side[first], first ? b + hdr[0] : b, hdr[first], pos);
    if (!rc) rc = s->side[!first]->ops->checkpoint_restore(s->side[!first], first ? b : b + hdr[0], hdr[!first], pos);
    return rc;
}

/* ---- batched decode ---------------------------------------------------------------------------
 * Side k of every row: batched where that side's backend mixes the rows
 * (its forward_batch; side 0's rows land in the leader's crossing rows,
 * side 1 reads them there), else row by row through each row's own
 * crossing rows. A side answering MUSER_EUNSUPPORTED has changed nothing. */
static int side_batch(split_backend *const *rows, int k, mu_backend **sides, const muser_token *tokens,
                      const int *pos, int n, float *const *logits) {
    split_backend *lead = rows[0];
    const size_t E = (size_t)lead->E;
    const mu_backend_ops *ops = sides[0]->ops;
    bool mixed = ops->forward_batch != NULL && n > 1;
    for (int i = 1; i < n && mixed; i++) mixed = sides[i]->ops == ops;
    if (mixed) {
        int rc = ops->forward_batch(sides, tokens, pos, n, logits);
        if (rc != MUSER_EUNSUPPORTED) return rc;
        mu_clear_error();
    }
    for (int i = 0; i < n; i++) {
        split_backend *r = rows[i];
        if (k == 1 && i > 0) memcpy(r->rows, lead->rows + i * E, sizeof(float) * E);
        int rc = sides[i]->ops->forward(sides[i], &tokens[i], 1, pos[i], false, logits[i]);
        if (rc) return rc;
        if (k == 0 && i > 0) memcpy(lead->rows + i * E, r->rows, sizeof(float) * E);
    }
    return 0;
}

static int split_forward_batch(mu_backend *const *rows_in, const muser_token *tokens, const int *pos, int n,
                               float *const *logits) {
    split_backend *const *rows = (split_backend *const *)rows_in;
    const split_backend *lead = rows[0];
    for (int i = 1; i < n; i++)
        if (rows[i]->m != lead->m)
            return mu_fail(MUSER_EUNSUPPORTED, "batched rows of a split need one model");
    mu_backend **sides = malloc(sizeof(mu_backend *) * 2 * (size_t)n);
    float **none = calloc((size_t)n, sizeof(float *)); /* side 0 writes no logits */
    int rc = sides && none ? 0 : mu_fail(MUSER_ENOMEM, "out of memory");
    for (int i = 0; i < n && !rc; i++) sides[i] = rows[i]->side[0], sides[n + i] = rows[i]->side[1];
    if (!rc) rc = side_batch(rows, 0, sides, tokens, pos, n, none);
    if (!rc) rc = side_batch(rows, 1, sides + n, tokens, pos, n, logits);
    free(sides);
    free(none);
    return rc;
}

static const mu_backend_ops split_ops = {
    .name = "split",
    .forward = split_forward,
    .truncate = split_truncate,
    .reset = split_reset,
    .free = split_free,
    .fill_kv = split_fill_kv,
    .describe = split_describe,
    .checkpoint_save = split_checkpoint_save,
    .checkpoint_restore = split_checkpoint_restore,
    .forward_batch = split_forward_batch,
    /* no capture or tentative positions: speculative decoding refuses a
     * split (mu_backend_open_drafter says so) */
};

bool mu_backend_is_split(const mu_backend *b) { return b && b->ops == &split_ops; }

static int open_side(muser_backend kind, const mu_model *view, const mu_session_config *cfg, mu_backend **out) {
    switch (kind) {
    case MUSER_BACKEND_CPU: return mu_cpu_backend_new(view, cfg, out);
    case MUSER_BACKEND_CUDA: return mu_cuda_backend_new(view, cfg, out);
    default: *out = NULL; return mu_fail(MUSER_EINVAL, "a split's side runs on the CPU or on CUDA");
    }
}

int mu_split_backend_new(const mu_model *m, const mu_session_config *cfg, int n_first, muser_backend first,
                         muser_backend second, mu_backend **out) {
    *out = NULL;
    const int L = m->hp.n_layer;
    if (n_first < 1 || n_first >= L)
        return mu_fail(MUSER_EINVAL, "a split keeps 1 to %d of the %d layers on its first backend, not %d", L - 1, L,
                       n_first);
    split_backend *s = calloc(1, sizeof *s);
    if (!s) return mu_fail(MUSER_ENOMEM, "out of memory");
    s->base.ops = &split_ops;
    s->m = m;
    s->n_first = n_first;
    s->E = m->hp.n_embd;
    s->view[0] = mu_model_layer_view(m, 0, n_first);
    s->view[1] = mu_model_layer_view(m, n_first, L);
    s->rows = malloc(sizeof(float) * (size_t)cfg->n_batch * (size_t)s->E);
    int rc = !s->view[0] || !s->view[1] ? MUSER_ENOMEM : !s->rows ? mu_fail(MUSER_ENOMEM, "out of memory") : 0;
    const muser_backend kinds[2] = {first, second};
    for (int k = 0; k < 2 && !rc; k++) {
        rc = open_side(kinds[k], s->view[k], cfg, &s->side[k]);
        if (!rc && !s->side[k]->ops->set_hidden)
            rc = mu_fail(MUSER_EUNSUPPORTED, "the %s backend cannot run one side of a split", s->side[k]->ops->name);
        if (!rc) rc = s->side[k]->ops->set_hidden(s->side[k], s->rows);
    }
    if (!rc && (!s->side[0]->ops->checkpoint_save || !s->side[1]->ops->checkpoint_save ||
                !s->side[0]->ops->checkpoint_restore || !s->side[1]->ops->checkpoint_restore))
        rc = mu_fail(MUSER_EUNSUPPORTED, "a split's sides must both keep ring checkpoints");
    if (rc) {
        split_free(&s->base);
        return rc;
    }
    const char *d0 = s->side[0]->ops->describe ? s->side[0]->ops->describe(s->side[0]) : NULL;
    const char *d1 = s->side[1]->ops->describe ? s->side[1]->ops->describe(s->side[1]) : NULL;
    int n = snprintf(s->desc, sizeof s->desc,
                     "layers split: the embedding and layers 0-%d on %s, layers %d-%d and the output head on %s "
                     "(-ngl %d of %d; %d thread%s on the CPU)",
                     n_first - 1, kind_name(first), n_first, L - 1, kind_name(second), n_first, L, cfg->n_threads,
                     mu_plural_s(cfg->n_threads));
    if (d0 && n > 0 && (size_t)n < sizeof s->desc)
        n += snprintf(s->desc + n, sizeof s->desc - (size_t)n, "; %s: %s", kind_name(first) + 4, d0);
    if (d1 && n > 0 && (size_t)n < sizeof s->desc)
        snprintf(s->desc + n, sizeof s->desc - (size_t)n, "; %s: %s", kind_name(second) + 4, d1);
    *out = &s->base;
    return 0;
}
