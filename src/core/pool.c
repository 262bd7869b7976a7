/* Thread pool with spin-then-sleep workers and a sense-reversing barrier. Spinning falls back
 * to sched_yield so oversubscribed runs (tests in parallel, a busy host) still progress. */
#include "core/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/error.h"

#define SPIN_BEFORE_YIELD 4000
#define YIELDS_BEFORE_SLEEP 2000

struct ts_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_long gen;      /* bumped once per region */
    atomic_int pending;   /* workers still running the current region */
    atomic_int sleepers;  /* workers blocked on cv */
    atomic_int stop;
    ts_pool_fn fn;
    void *ctx;
    /* barrier */
    atomic_int bar_count;
    atomic_int bar_phase;
    long regions;
};

typedef struct worker_arg {
    ts_pool *p;
    int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker(void *arg) {
    worker_arg *wa = arg;
    ts_pool *p = wa->p;
    int ith = wa->ith;
    free(wa);
    long seen = 0;
    for (;;) {
        long g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (atomic_load(&p->stop)) return NULL;
            if (++spins < SPIN_BEFORE_YIELD) cpu_relax();
            else if (spins < SPIN_BEFORE_YIELD + YIELDS_BEFORE_SLEEP) sched_yield();
            else {
                pthread_mutex_lock(&p->mu);
                atomic_fetch_add(&p->sleepers, 1);
                while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                    pthread_cond_wait(&p->cv, &p->mu);
                atomic_fetch_sub(&p->sleepers, 1);
                pthread_mutex_unlock(&p->mu);
                spins = 0;
            }
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        p->fn(p->ctx, ith, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
}

ts_status ts_pool_new(int n, ts_pool **out, ts_error *err) {
    *out = NULL;
    if (n < 1 || n > TS_POOL_MAX_THREADS)
        return ts_fail(err, TS_ERR_ARG, "thread count %d outside [1, %d]", n, TS_POOL_MAX_THREADS);
    ts_pool *p = calloc(1, sizeof *p);
    if (!p) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    p->n = n;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc((size_t)n, sizeof *p->threads);
    if (!p->threads) {
        ts_pool_free(p);
        return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    }
    for (int i = 1; i < n; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) {
            ts_pool_free(p);
            return ts_fail(err, TS_ERR_NOMEM, "out of memory");
        }
        wa->p = p;
        wa->ith = i;
        if (pthread_create(&p->threads[i], NULL, worker, wa) != 0) {
            free(wa);
            ts_pool_free(p);
            return ts_fail(err, TS_ERR_NOMEM, "cannot create worker thread %d", i);
        }
    }
    *out = p;
    return TS_OK;
}

void ts_pool_free(ts_pool *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; p->threads && i < p->n; i++)
        if (p->threads[i]) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}

int ts_pool_size(const ts_pool *p) { return p->n; }
long ts_pool_regions(const ts_pool *p) { return p->regions; }

void ts_pool_run(ts_pool *p, ts_pool_fn fn, void *ctx) {
    p->regions++;
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->pending, p->n - 1);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: pairs with the sleepers check below */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ctx, 0, p->n);
    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0)
        if (++spins < SPIN_BEFORE_YIELD) cpu_relax();
        else sched_yield();
}

void ts_pool_barrier(ts_pool *p) {
    if (p->n == 1) return;
    int phase = atomic_load_explicit(&p->bar_phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&p->bar_count, 1, memory_order_acq_rel) == p->n - 1) {
        atomic_store_explicit(&p->bar_count, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->bar_phase, 1, memory_order_release);
        return;
    }
    int spins = 0;
    while (atomic_load_explicit(&p->bar_phase, memory_order_acquire) == phase)
        if (++spins < SPIN_BEFORE_YIELD) cpu_relax();
        else sched_yield();
}

int ts_pool_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)(n < TS_POOL_MAX_THREADS ? n : TS_POOL_MAX_THREADS) : 1;
}

int ts_pool_resolve_threads(int requested) { return requested > 0 ? requested : ts_pool_default_threads(); }
