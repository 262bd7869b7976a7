/* Thread pool with spin-then-sleep workers and a sense-reversing barrier. Spinning falls back
 * to sched_yield so oversubscribed runs (tests in parallel, a busy host) still progress. */
#define _GNU_SOURCE /* cpu_set_t, pthread_attr_setaffinity_np */
#include "core/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
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
    int pinned;           /* thread i held on cpus[i] (workers always, the caller inside ts_pool_enter) */
    int cpus[TS_POOL_MAX_THREADS];
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

/* Why pin: on a 2-vCPU VM (Zen 5, Linux 6.18) a worker woken after the pool had slept (a pause
 * of 10 ms or more between forwards: a chat turn, a server request, a probe) was placed on the
 * CPU its waker ran on in about half of the wakes, and the region then ran on one core, at half
 * the speed, until the load balancer moved it: a 256 MiB read of two threads measured 40 GB/s
 * in those wakes and 51-90 in the others; pinned, never. Pinned when the pool has exactly as
 * many threads as its creating thread may use CPUs (every thread needs a CPU of its own then);
 * TESSERA_PIN_THREADS=0 never pins, =1 pins whenever there are CPUs enough. */
static int pin_cpus(int n, int *cpus) {
    const char *env = getenv("TESSERA_PIN_THREADS");
    if (env && !strcmp(env, "0")) return 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    int have = CPU_COUNT(&set);
    if (have < n || (have != n && !(env && !strcmp(env, "1")))) return 0;
    for (int c = 0, i = 0; c < CPU_SETSIZE && i < n; c++)
        if (CPU_ISSET(c, &set)) cpus[i++] = c;
    return 1;
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
    p->pinned = n > 1 && pin_cpus(n, p->cpus);
    for (int i = 1; i < n; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) {
            ts_pool_free(p);
            return ts_fail(err, TS_ERR_NOMEM, "out of memory");
        }
        wa->p = p;
        wa->ith = i;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        if (p->pinned) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(p->cpus[i], &one);
            pthread_attr_setaffinity_np(&attr, sizeof one, &one);
        }
        int rc = pthread_create(&p->threads[i], &attr, worker, wa);
        pthread_attr_destroy(&attr);
        if (rc != 0 && p->pinned) { /* a CPU refused (a cpuset changed under us): unpinned, as before */
            cpu_set_t all; /* the workers already made get the creator's CPUs back */
            if (sched_getaffinity(0, sizeof all, &all) == 0)
                for (int k = 1; k < i; k++) pthread_setaffinity_np(p->threads[k], sizeof all, &all);
            p->pinned = 0;
            rc = pthread_create(&p->threads[i], NULL, worker, wa);
        }
        if (rc != 0) {
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
int ts_pool_pinned(const ts_pool *p) { return p->pinned; }

/* The caller's own mask while it is held (per thread: a thread enters one pool at a time). */
static __thread cpu_set_t tl_saved;
static __thread const ts_pool *tl_pool;

int ts_pool_enter(ts_pool *p) {
    if (!p->pinned || tl_pool) return 0;
    cpu_set_t one;
    if (pthread_getaffinity_np(pthread_self(), sizeof tl_saved, &tl_saved) != 0) return 0;
    CPU_ZERO(&one);
    CPU_SET(p->cpus[0], &one);
    if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) != 0) return 0;
    tl_pool = p;
    return 1;
}

void ts_pool_leave(ts_pool *p, int entered) {
    if (!entered || tl_pool != p) return;
    /* the mask the thread had a moment ago: only a cpuset shrunk meanwhile could refuse it, and
     * the kernel then moves the thread itself */
    pthread_setaffinity_np(pthread_self(), sizeof tl_saved, &tl_saved);
    tl_pool = NULL;
}
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
