/* sample_pool.c — the slots of a step sampled on several threads
 * (sample_pool.h), over the engine's persistent thread pool (cpu/pool.h):
 * a step hands out its jobs through an atomic index, so a thread that
 * finishes early takes the next slot. Each thread applies logit_bias in
 * its own copy of the logits. */
#include "serve/sample_pool.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/pool.h"

struct srv_sample_pool {
    mu_pool *threads; /* the caller and its helpers                  */
    int n_vocab;
    float **biased; /* [n_biased = helpers + 1][n_vocab], by thread  */
    int n_biased;
    srv_sample_job *jobs; /* the step being drawn                    */
    int n_jobs;
    atomic_int next; /* the next job to take                        */
};

static void draw_one(srv_sample_job *j, float *biased, int n_vocab) {
    if (j->top_logits) {
        j->out = muser_sampler_sample_top(j->sampler, j->top_logits, j->top_ids, j->n_top);
        return;
    }
    const float *logits = j->logits;
    if (j->n_bias) {
        memcpy(biased, logits, sizeof(float) * (size_t)n_vocab);
        for (int i = 0; i < j->n_bias; i++) biased[j->bias_ids[i]] += j->bias[i];
        logits = biased;
    }
    j->out = muser_sampler_sample(j->sampler, logits);
}

static void take_jobs(void *ctx, int ith, int nth) {
    srv_sample_pool *p = ctx;
    (void)nth;
    for (int i; (i = atomic_fetch_add(&p->next, 1)) < p->n_jobs;) draw_one(&p->jobs[i], p->biased[ith], p->n_vocab);
}

void srv_sample_pool_free(srv_sample_pool *p) {
    if (!p) return;
    if (p->threads) mu_pool_free(p->threads);
    for (int i = 0; p->biased && i < p->n_biased; i++) free(p->biased[i]);
    free(p->biased);
    free(p);
}

int srv_sample_pool_new(int helpers, int n_vocab, srv_sample_pool **out) {
    *out = NULL;
    srv_sample_pool *p = calloc(1, sizeof *p);
    if (!p) return MUSER_ENOMEM;
    p->n_vocab = n_vocab;
    p->threads = mu_pool_new(helpers > 0 ? helpers + 1 : 1);
    p->biased = calloc((size_t)(helpers > 0 ? helpers : 0) + 1, sizeof *p->biased);
    p->n_biased = p->biased ? (helpers > 0 ? helpers : 0) + 1 : 0;
    bool ok = p->threads && p->biased;
    for (int i = 0; ok && i < p->n_biased; i++) ok = (p->biased[i] = malloc(sizeof(float) * (size_t)n_vocab)) != NULL;
    if (!ok) {
        srv_sample_pool_free(p);
        return MUSER_ENOMEM;
    }
    *out = p;
    return 0;
}

void srv_sample_pool_run(srv_sample_pool *p, srv_sample_job *jobs, int n) {
    p->jobs = jobs;
    p->n_jobs = n;
    atomic_store(&p->next, 0);
    if (n < 2 || mu_pool_size(p->threads) == 1) take_jobs(p, 0, 1);
    else mu_pool_run(p->threads, take_jobs, p);
}
