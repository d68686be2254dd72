/* sample_pool.h — the next token of every slot of a batched step, drawn on
 * several threads. Sampling a slot reads its own logits and changes only
 * its own sampler, so the slots are independent; over a 202,048-token
 * vocabulary each takes about 0.1 ms, which a step of 64 slots would
 * otherwise spend one after another on the worker thread. A slot whose
 * draw needs only its top logits (a GPU found them) takes those instead. */
#ifndef MUSER_SERVE_SAMPLE_POOL_H
#define MUSER_SERVE_SAMPLE_POOL_H

#include "muser.h"

typedef struct srv_sample_job {
    muser_sampler *sampler;
    const float *logits;         /* [n_vocab] the slot's logits            */
    const float *top_logits;     /* or [n_top] its top logits after its bias */
    const muser_token *top_ids;  /* [n_top] ... and their ids                */
    int n_top;
    const muser_token *bias_ids; /* logit_bias: ids and values added first */
    const float *bias;
    int n_bias;
    muser_token out; /* the drawn token                               */
} srv_sample_job;

typedef struct srv_sample_pool srv_sample_pool;

/* A pool of `helpers` threads (0: the caller samples alone) over a
 * vocabulary of n_vocab. */
int srv_sample_pool_new(int helpers, int n_vocab, srv_sample_pool **out);
/* Draws jobs[i].out for every i < n; the caller takes a share and returns
 * when all are drawn (each job's result as if drawn alone). */
void srv_sample_pool_run(srv_sample_pool *p, srv_sample_job *jobs, int n);
void srv_sample_pool_free(srv_sample_pool *p);

#endif
