/* A persistent thread pool: one parallel region per dispatch. Workers spin briefly for the
 * next region (dispatches come back to back during a forward pass), then sleep, so an idle
 * engine costs no CPU. Inside a region, ts_pool_barrier separates the dispatch's phases. */
#ifndef TS_CORE_POOL_H
#define TS_CORE_POOL_H
#include "tessera.h"

typedef struct ts_pool ts_pool;
/* Work item: called on every thread with ith in [0, nth). */
typedef void (*ts_pool_fn)(void *ctx, int ith, int nth);

/* The thread count when none is asked for: every online core. Callers resolve a requested 0
 * through this once and pass and record the real number from then on. */
int ts_pool_default_threads(void);
/* The most threads a pool runs; more cores than that gain nothing on these models. */
#define TS_POOL_MAX_THREADS 256
/* requested > 0: itself; otherwise ts_pool_default_threads(). */
int ts_pool_resolve_threads(int requested);

ts_status ts_pool_new(int n_threads, ts_pool **out, ts_error *err);
void ts_pool_free(ts_pool *p);
int ts_pool_size(const ts_pool *p);
/* Runs fn on all threads (the caller is thread 0) and returns when all have finished. */
void ts_pool_run(ts_pool *p, ts_pool_fn fn, void *ctx);
/* All threads of the current region wait here for each other. */
void ts_pool_barrier(ts_pool *p);
/* Whether the threads are pinned, thread i to the i-th CPU the process may use (pool.c says
 * when and why; TESSERA_PIN_THREADS=0 never, =1 whenever there are CPUs enough). Workers are
 * pinned for their life. The caller is the pool's thread 0 only while it runs regions, so it
 * is pinned only between ts_pool_enter and ts_pool_leave (a forward pass), its own mask put
 * back after: threads it creates later must not inherit one CPU. */
int ts_pool_pinned(const ts_pool *p);
/* Returns whether it pinned the calling thread (pass that to ts_pool_leave); 0 when the pool
 * is not pinned or this thread is already inside ts_pool_enter. */
int ts_pool_enter(ts_pool *p);
void ts_pool_leave(ts_pool *p, int entered);
/* Number of regions run so far (dispatch counting). */
long ts_pool_regions(const ts_pool *p);

#endif
