/* session_internal.h — the session's state, shared by the files of the
 * engine that implement the public session API (session.c, spec.c). */
#ifndef MU_SESSION_INTERNAL_H
#define MU_SESSION_INTERNAL_H

#include "engine/engine.h"

struct mu_spec;

struct muser_session {
    const mu_model *model;
    mu_session_config cfg;
    muser_backend backend_kind;
    mu_backend *backend;
    int pos;
    float *logits;     /* [logit_rows][n_vocab] */
    int logit_rows, logit_cap;
    muser_token *history; /* [n_ctx] the tokens held */
    /* ring checkpoints, most recent first */
    struct checkpoint {
        int pos;
        muser_token *tokens; /* [pos] */
        float *logits;       /* [n_vocab] after the last token, or NULL */
        void *blob;
        size_t size;
    } *ckpt;
    int n_ckpt, max_ckpt;
    /* mu_session_decode_select on a backend without decode_select: the
     * sampler picks from the logits (made on first use, made again when
     * the temperature or the seed changes) */
    muser_sampler *host_sampler;
    float host_temperature;
    uint64_t host_seed;
    struct mu_spec *spec; /* the attached drafter's state, or NULL (spec.c) */
};

/* spec.c's hooks into the session's life: after a feed of n tokens at
 * pos0 (the drafter takes the captured hidden states), after a rewind to
 * pos (the drafter follows), and on free. */
int mu_spec_after_feed(muser_session *s, int pos0, int n);
void mu_spec_rewind(muser_session *s, int pos);
/* bench: the drafter's cache filled to depth with random rows, as the target's */
int mu_spec_fill_kv(muser_session *s, int depth, uint64_t seed);
void mu_spec_free(struct mu_spec *sp);

#endif
