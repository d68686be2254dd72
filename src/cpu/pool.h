/* pool.h — a persistent thread pool. mu_pool_run(fn) runs fn(ctx, i, n) on
 * every thread (the caller is thread 0) and returns when all are done.
 * Workers spin briefly on a generation counter before sleeping, so the
 * hundreds of parallel regions per token cost microseconds, not syscalls. */
#ifndef MU_POOL_H
#define MU_POOL_H

typedef void (*mu_pool_fn)(void *ctx, int ith, int nth);
typedef struct mu_pool mu_pool;

/* n_threads >= 1; returns NULL (with an error set) on failure. */
mu_pool *mu_pool_new(int n_threads);
void mu_pool_free(mu_pool *p);
int mu_pool_size(const mu_pool *p);
void mu_pool_run(mu_pool *p, mu_pool_fn fn, void *ctx);

/* Number of online CPUs (at least 1). */
int mu_cpu_count(void);

#endif
