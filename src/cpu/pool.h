/* pool.h — a persistent thread pool. mu_pool_run(fn) runs fn(ctx, i, n) on
 * every thread (the caller is thread 0) and returns when all are done.
 * Workers spin briefly on a generation counter before sleeping, so the
 * hundreds of parallel regions per token cost microseconds, not syscalls.
 *
 * mu_pool_run_elastic(fn) is the form the forward pass uses: fn runs on the
 * caller and on each worker that arrives before the caller has returned
 * from its own call; the region ends when those participants are done. A
 * worker that another process keeps off its core is not waited for, so fn
 * must let any set of threads that includes the caller finish the work:
 * it claims its work from a shared counter, and per-thread state indexed
 * by ith must be prepared before the region (a thread may not run). */
#ifndef MU_POOL_H
#define MU_POOL_H

typedef void (*mu_pool_fn)(void *ctx, int ith, int nth);
typedef struct mu_pool mu_pool;

/* n_threads >= 1; returns NULL (with an error set) on failure. */
mu_pool *mu_pool_new(int n_threads);
void mu_pool_free(mu_pool *p);
int mu_pool_size(const mu_pool *p);
void mu_pool_run(mu_pool *p, mu_pool_fn fn, void *ctx);
void mu_pool_run_elastic(mu_pool *p, mu_pool_fn fn, void *ctx);

/* Mean wall time of one empty elastic region (dispatch + end), in
 * microseconds, over `regions` back-to-back runs. */
double mu_pool_region_cost_us(mu_pool *p, int regions);

/* Number of online CPUs (at least 1). */
int mu_cpu_count(void);

#endif
