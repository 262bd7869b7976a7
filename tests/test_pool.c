/* The thread pool: regions and barriers on real threads, and the pinning of its threads to CPUs
 * (core/pool.c): which CPU each thread runs on inside a pinned region, the caller's own mask put
 * back after ts_pool_leave, TESSERA_PIN_THREADS=0/1 and the automatic choice. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/pool.h"
#include "tharness.h"

typedef struct job {
    ts_pool *p;
    atomic_int sum;
    int order_ok;
    int phase[TS_POOL_MAX_THREADS];
    int cpu[TS_POOL_MAX_THREADS];      /* sched_getcpu() inside the region */
    int n_allowed[TS_POOL_MAX_THREADS]; /* CPUs in the thread's mask */
    int first[TS_POOL_MAX_THREADS];     /* the lowest CPU of its mask */
} job;

static void region(void *ctx, int ith, int nth) {
    job *j = ctx;
    atomic_fetch_add(&j->sum, ith + 1);
    j->phase[ith] = 1;
    ts_pool_barrier(j->p);
    for (int i = 0; i < nth; i++) /* after the barrier every thread has written its phase */
        if (j->phase[i] != 1) j->order_ok = 0;
    ts_pool_barrier(j->p);
    cpu_set_t m;
    pthread_getaffinity_np(pthread_self(), sizeof m, &m);
    j->n_allowed[ith] = CPU_COUNT(&m);
    j->first[ith] = -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &m)) {
            j->first[ith] = c;
            break;
        }
    j->cpu[ith] = sched_getcpu();
}

static void run_region(ts_pool *p, job *j) {
    memset(j, 0, sizeof *j);
    j->p = p;
    j->order_ok = 1;
    ts_pool_run(p, region, j);
}

static ts_pool *make_pool(int n, const char *pin_env) {
    if (pin_env) setenv("TESSERA_PIN_THREADS", pin_env, 1);
    else unsetenv("TESSERA_PIN_THREADS");
    ts_pool *p = NULL;
    ts_error e;
    CHECK(ts_pool_new(n, &p, &e) == TS_OK, "ts_pool_new(%d): %s", n, e.msg);
    return p;
}

static int mask_equal(const cpu_set_t *a) {
    cpu_set_t now;
    pthread_getaffinity_np(pthread_self(), sizeof now, &now);
    return CPU_EQUAL(a, &now);
}

int main(void) {
    cpu_set_t mine;
    CHECK(pthread_getaffinity_np(pthread_self(), sizeof mine, &mine) == 0, "getaffinity");
    int have = CPU_COUNT(&mine);

    /* regions and barriers, unpinned, more threads than CPUs too */
    for (int n = 1; n <= 4; n++) {
        ts_pool *p = make_pool(n, "0");
        if (!p) continue;
        CHECK(!ts_pool_pinned(p), "TESSERA_PIN_THREADS=0 pinned a pool of %d", n);
        CHECK(ts_pool_enter(p) == 0, "enter pinned an unpinned pool");
        for (int r = 0; r < 50; r++) {
            job j;
            run_region(p, &j);
            CHECK(atomic_load(&j.sum) == n * (n + 1) / 2, "region sum %d with %d threads", atomic_load(&j.sum), n);
            CHECK(j.order_ok, "a thread passed the barrier before all had arrived (%d threads)", n);
        }
        CHECK(mask_equal(&mine), "an unpinned pool changed the caller's mask");
        ts_pool_free(p);
    }
    /* one thread is never pinned; more threads than CPUs neither, even when asked */
    ts_pool *p1 = make_pool(1, "1");
    if (p1) {
        CHECK(!ts_pool_pinned(p1), "a pool of one thread was pinned");
        ts_pool_free(p1);
    }
    ts_pool *pm = have < TS_POOL_MAX_THREADS ? make_pool(have + 1, "1") : NULL;
    if (pm) {
        CHECK(!ts_pool_pinned(pm), "%d threads on %d CPUs were pinned", have + 1, have);
        ts_pool_free(pm);
    }

    if (have < 2) th_skip("this process may use %d CPU: pinning needs two", have);

    /* automatic: pinned with exactly as many threads as CPUs, not with fewer */
    ts_pool *pa = make_pool(have, NULL);
    if (pa) {
        CHECK(ts_pool_pinned(pa), "%d threads on %d CPUs were not pinned by default", have, have);
        ts_pool_free(pa);
    }
    ts_pool *pf = make_pool(have - 1, NULL);
    if (pf) {
        CHECK(!ts_pool_pinned(pf), "%d threads on %d CPUs pinned by default", have - 1, have);
        ts_pool_free(pf);
    }

    /* pinned: inside enter/leave thread i runs on the i-th CPU of the caller's mask, alone */
    int n = have < 4 ? have : 4;
    ts_pool *p = make_pool(n, "1");
    if (p) {
        CHECK(ts_pool_pinned(p), "TESSERA_PIN_THREADS=1 did not pin %d threads on %d CPUs", n, have);
        int expect[TS_POOL_MAX_THREADS];
        for (int c = 0, i = 0; c < CPU_SETSIZE && i < n; c++)
            if (CPU_ISSET(c, &mine)) expect[i++] = c;
        for (int round = 0; round < 3; round++) {
            int entered = ts_pool_enter(p);
            CHECK(entered == 1, "enter did not pin the caller");
            CHECK(ts_pool_enter(p) == 0, "a nested enter pinned again");
            job j;
            run_region(p, &j);
            for (int i = 0; i < n; i++) {
                CHECK(j.n_allowed[i] == 1 && j.first[i] == expect[i], "thread %d: mask of %d CPUs from %d, expected {%d}",
                      i, j.n_allowed[i], j.first[i], expect[i]);
                CHECK(j.cpu[i] == expect[i], "thread %d ran on CPU %d, pinned to %d", i, j.cpu[i], expect[i]);
            }
            ts_pool_leave(p, entered);
            CHECK(mask_equal(&mine), "leave did not give the caller its own mask back");
            /* outside enter the workers stay pinned and the caller is free */
            run_region(p, &j);
            CHECK(j.n_allowed[0] == have, "caller outside enter held to %d CPUs", j.n_allowed[0]);
            for (int i = 1; i < n; i++) CHECK(j.n_allowed[i] == 1 && j.first[i] == expect[i], "worker %d unpinned", i);
        }
        ts_pool_leave(p, 0); /* leave without an enter changes nothing */
        CHECK(mask_equal(&mine), "leave(0) changed the caller's mask");
        ts_pool_free(p);
    }
    return th_finish("pool");
}
