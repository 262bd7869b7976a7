/* Software prefetch distances of the AVX-512 decode GEMVs (BF16 widened to FP32, Q8_0, Q4_0),
 * chosen per process by measuring them on the decode itself.
 *
 * Why measured, not fixed: the best distances differ per core. On the Intel Xeon (AMX, model
 * 167) a stream prefetched both near into L1 and far into L2 decoded 5-10% faster than either
 * alone; on AMD Zen 5 that pair was the slowest of the settings tried (Q8_0: 10.4 bytes per cycle
 * against 12.0 for the L2 prefetch alone, docs/performance.md). Prefetching changes no result,
 * only timing, so the candidates can be tried inside a run: while measuring, each GEMV call
 * takes the candidate of the current time slice (2^22 time-stamp-counter cycles, a few ms), so
 * all candidates see the same swings of a shared machine; bytes and cycles are summed per
 * candidate, and once each has read TS_PF_MIN_BYTES the one with the most bytes per cycle is
 * kept for the rest of the process. A candidate clearly slower than the best once each has read
 * TS_PF_DROP_BYTES is dropped early (its slices run the others): on the Intel Xeon the Q4_0
 * lane-order kernel read 0.80 of the best rate at one of its three candidates, so until the
 * choice (about 60 Qwen3-0.6B tokens) a third of its calls ran 20% slower. TESSERA_PREFETCH=0|1|2
 * fixes a candidate instead. */
#ifndef TS_TARGET_CPU_PREFETCH_H
#define TS_TARGET_CPU_PREFETCH_H
#include <stddef.h>
#include <stdint.h>

/* TS_PF_Q8X16 / _Q4X16: Q8_0 / Q4_0 in 16-block lane order (gemm.h), whose lighter kernels want
 * their own distances; TS_PF_Q8T16 / _Q4T16: Q8_0 / Q4_0 in tile order (16 rows read as one stream) */
typedef enum {
    TS_PF_BF16 = 0,
    TS_PF_Q8 = 1,
    TS_PF_Q4 = 2,
    TS_PF_Q8X16 = 3,
    TS_PF_Q4X16 = 4,
    TS_PF_Q8T16 = 5,
    TS_PF_Q4T16 = 6,
    TS_PF_KINDS = 7
} ts_pf_kind;
enum { TS_PF_CANDS = 3 };

/* Bytes ahead of the row being read: into L1 (prefetcht0) and into L2 (prefetcht1); 0 = none. */
typedef struct ts_pf {
    int l1, l2;
} ts_pf;

/* Bytes each candidate must read before the choice (the three: about 0.3 s of decode at 40 GB/s). */
#define TS_PF_MIN_BYTES ((uint64_t)4 << 30)
/* Bytes each must read before the early drop, and the fraction of the best rate below which a
 * candidate is dropped then (ts_pf_drop). */
#define TS_PF_DROP_BYTES ((uint64_t)512 << 20)
#define TS_PF_DROP_BELOW 0.85
/* Calls reading more than this per thread are not timed (a call must fit in a time slice). */
#define TS_PF_MAX_CALL_BYTES ((uint64_t)32 << 20)
/* Calls reading less are neither timed nor rotated (candidate 0, or the first kept one after it
 * when 0 was dropped, until the choice): their W is
 * often in cache, and a tiny model's many short calls should not pay for the clock and the
 * shared counters. */
#define TS_PF_MIN_CALL_BYTES ((uint64_t)256 << 10)

/* The `lines` 64-byte lines from p, pf.l1 bytes ahead into L1 and pf.l2 ahead into L2 (a zero
 * distance: that prefetch left out). Locality 3 / 2 are prefetcht0 / prefetcht1 on x86. */
static inline __attribute__((always_inline)) void ts_pf_lines(const void *p, ts_pf pf, int lines) {
    const char *c = (const char *)p;
    if (pf.l1)
        for (int l = 0; l < lines; l++) __builtin_prefetch(c + pf.l1 + 64 * l, 0, 3);
    if (pf.l2)
        for (int l = 0; l < lines; l++) __builtin_prefetch(c + pf.l2 + 64 * l, 0, 2);
}

/* Candidate c of a kind (c in [0, TS_PF_CANDS)); prefetch.c says where each was measured. */
ts_pf ts_pf_candidate(ts_pf_kind k, int c);
const char *ts_pf_candidate_name(ts_pf_kind k, int c);

/* A decode GEMV call: the candidate to run (*t0 the start time when the call is timed, else 0),
 * then ts_pf_end with the bytes of W it read. Thread-safe, lock-free. */
int ts_pf_begin(ts_pf_kind k, uint64_t bytes, uint64_t *t0);
void ts_pf_end(ts_pf_kind k, int c, uint64_t t0, uint64_t bytes);

/* The choice from sums: the candidate with the most bytes per cycle among those not in the
 * `dropped` bit mask, or -1 while any of them has read fewer than min_bytes. Pure (tested
 * directly), as ts_pf_drop. */
int ts_pf_decide(const uint64_t *bytes, const uint64_t *cycles, int n, uint64_t min_bytes, unsigned dropped);
/* The early drop: once every candidate has read min_bytes, the bit mask of those whose bytes per
 * cycle are below `below` times the best's (never the best); 0 before that. Applied once per
 * kind, at the first call that finds every candidate past min_bytes. */
unsigned ts_pf_drop(const uint64_t *bytes, const uint64_t *cycles, int n, uint64_t min_bytes, double below);
/* The candidate a call runs for slice candidate c: c, or the next one (cyclically) not in the
 * `dropped` mask; c itself when every one is dropped (the drop never does that). */
int ts_pf_kept(int c, unsigned dropped, int n);

/* Fixes kind k's candidate (c in [0, TS_PF_CANDS)) for the rest of the process: tests that run
 * every candidate. */
void ts_pf_set(ts_pf_kind k, int c);
/* Replaces candidate c of kind k by pf and fixes it as ts_pf_set does: for tools/gemv_sweep.c,
 * which times distances that are not candidates; never called by the library itself. Only while
 * no GEMV runs (the table is read without synchronization); the candidate keeps its old name. */
void ts_pf_override(ts_pf_kind k, int c, ts_pf pf);

/* Where a kind stands: the choice (-1 while measuring), the candidates dropped early (bit mask)
 * and the bytes per cycle measured. */
typedef struct ts_pf_report {
    int chosen, forced;
    unsigned dropped;
    double bytes_per_cycle[TS_PF_CANDS];
    double gbytes[TS_PF_CANDS];
} ts_pf_report;
void ts_pf_get_report(ts_pf_kind k, ts_pf_report *out);
/* One line for bench output: "Q4_0: L2 only (9.6 B/cycle; near L1 + L2 8.7, far L1 9.5)". */
void ts_pf_describe(ts_pf_kind k, char *buf, size_t n);

#endif
