/* pool.c — see pool.h.
 *
 * One 64-bit word publishes a job and counts who joins it:
 *
 *   state = generation << 32 | closed << 31 | participants (workers joined)
 *
 * The caller writes fn/ctx, resets `finished`, then stores a new generation
 * (release). A worker that sees a new generation joins with a CAS that
 * fails if the generation moved on or the job is closed, runs fn, and bumps
 * `finished`. An elastic job's caller closes it (fetch_or) after its own
 * call and waits for `finished` to reach the participants counted at that
 * moment; a plain job is never closed and waits for all n - 1 workers.
 * Waiting spins briefly (pause) and then sleeps on a condition variable.
 */
#include "cpu/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/error.h"

/* About 100 us of pause before a waiting thread sleeps: longer than the gap
 * between the regions of a token, short enough not to burn a core that
 * another process on a shared machine wants. */
#define SPIN_ITERS 4000

#define CLOSED (1ull << 31)
#define COUNT_MASK (CLOSED - 1)

struct mu_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done_cv;
    _Alignas(64) _Atomic uint64_t state; /* generation | closed | participants */
    _Alignas(64) atomic_int finished;    /* participants done with this job  */
    _Alignas(64) atomic_int sleeping;    /* workers blocked on `wake`         */
    atomic_int caller_sleeping;          /* the caller is blocked on done_cv  */
    atomic_int stop;
    uint32_t generation;                 /* the caller's copy                 */
    mu_pool_fn fn;
    void *ctx;
};

typedef struct worker_arg {
    mu_pool *p;
    int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    sched_yield();
#endif
}

static inline uint32_t gen_of(uint64_t s) { return (uint32_t)(s >> 32); }

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    mu_pool *p = wa->p;
    const int ith = wa->ith;
    free(wa);
    uint32_t seen = 0;
    for (;;) {
        int spins = 0;
        while (gen_of(atomic_load_explicit(&p->state, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&p->stop, memory_order_acquire)) {
            if (++spins < SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleeping, 1);
            while (gen_of(atomic_load(&p->state)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->sleeping, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
        seen = gen_of(s);
        /* join this generation unless it closed (or already moved on) */
        bool joined = false;
        while (gen_of(s) == seen && !(s & CLOSED)) {
            if (atomic_compare_exchange_weak_explicit(&p->state, &s, s + 1, memory_order_acq_rel,
                                                      memory_order_acquire)) {
                joined = true;
                break;
            }
        }
        if (!joined) continue;
        p->fn(p->ctx, ith, p->n);
        atomic_fetch_add(&p->finished, 1); /* seq_cst: ordered before reading caller_sleeping */
        if (atomic_load(&p->caller_sleeping)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

mu_pool *mu_pool_new(int n_threads) {
    if (n_threads < 1) {
        mu_fail(MUSER_EINVAL, "thread count must be at least 1 (got %d)", n_threads);
        return NULL;
    }
    mu_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        wa->p = p;
        wa->ith = i;
        if (pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n = i;
            mu_pool_free(p);
            mu_fail(MUSER_ENOMEM, "cannot start thread %d", i);
            return NULL;
        }
    }
    return p;
}

void mu_pool_free(mu_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done_cv);
    free(p);
}

int mu_pool_size(const mu_pool *p) { return p->n; }

static void run(mu_pool *p, mu_pool_fn fn, void *ctx, bool elastic) {
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->finished, 0, memory_order_relaxed);
    p->generation++;
    atomic_store(&p->state, (uint64_t)p->generation << 32); /* seq_cst: ordered before reading `sleeping` */
    if (atomic_load(&p->sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ctx, 0, p->n);
    const int expect = elastic ? (int)(atomic_fetch_or(&p->state, CLOSED) & COUNT_MASK) : p->n - 1;
    int spins = 0;
    while (atomic_load_explicit(&p->finished, memory_order_acquire) < expect) {
        if (++spins < SPIN_ITERS) {
            cpu_relax();
            continue;
        }
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_sleeping, 1);
        while (atomic_load(&p->finished) < expect) pthread_cond_wait(&p->done_cv, &p->mu);
        atomic_store(&p->caller_sleeping, 0);
        pthread_mutex_unlock(&p->mu);
    }
}

void mu_pool_run(mu_pool *p, mu_pool_fn fn, void *ctx) { run(p, fn, ctx, false); }
void mu_pool_run_elastic(mu_pool *p, mu_pool_fn fn, void *ctx) { run(p, fn, ctx, true); }

static void empty_region(void *ctx, int ith, int nth) {
    (void)ctx, (void)ith, (void)nth;
}

double mu_pool_region_cost_us(mu_pool *p, int regions) {
    mu_pool_run(p, empty_region, NULL); /* wake the workers */
    const uint64_t t0 = mu_now_ns();
    for (int i = 0; i < regions; i++) mu_pool_run_elastic(p, empty_region, NULL);
    return (double)(mu_now_ns() - t0) * 1e-3 / regions;
}

int mu_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}
