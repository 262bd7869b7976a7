/* The per-process choice of decode prefetch distances (prefetch.h). */
#include "target/cpu/prefetch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

/* Per kind, three candidates (bytes ahead into L1, into L2). BF16 and Q4_0 as stored: 0 the
 * Xeon's tuned pair (gemv_avx512.c, gemm_q_avx512.c give the measurements), 1 the L2 prefetch
 * alone, 2 the L1 prefetch alone but farther; on Zen 5 candidates 1 and 2 read 3-16% more bytes
 * per cycle than 0 (docs/performance.md, "AMD Zen 5").
 * Q8_0 (both forms) and Q4_0 in lane order prefetch much farther: on Zen 5 (2 threads, 2 MiB
 * pages, a 256 MiB read probe before every round, all settings interleaved in one process,
 * docs/performance.md session 28) the host's fast periods (probe 75-82 GB/s) read Q8_0 at 68-71
 * GB/s with 3072 into L1 (the old choice), 59-62 with 2048 / 4096 (kept as a candidate: the Xeon's
 * pair, where 8192 was no faster) and 74-87 with 8192, Q4_0 in lane order at 56-59 with 768 / 4096
 * (the old candidate 0) and 76-85 with 6144 / 24576; in its slow periods (probe 44-52) every
 * distance read within 5% of every other.
 * The tile orders: on the Intel Xeon (AMX, model 167; tools/gemv_sweep, 2 threads, 512 MiB, medians
 * of 5-6 rounds as fractions of each round's probe, session 42) Q4_0 read at K = 1024 / 2048 /
 * 3072 / 8192 0.93-0.94 / 0.91 / 0.96 / 0.90 with 3072 into L1 and 6144 into L2, against 0.88 /
 * 0.85 / 0.91 / 0.86 with 2048 / 4096 (the first candidate before) and 0.82 / 0.82 / 0.87 / 0.84
 * with 4096 / 16384 (the third before); farther L2 distances read less (32768: 0.81 at K = 1024).
 * Q8_0 read within 3% either way at 3072 / 6144 and 2048 / 4096 (0.92-0.97 against 0.93-0.98). */
static ts_pf k_cand[TS_PF_KINDS][TS_PF_CANDS] = { /* written only by ts_pf_override */
    {{1024, 3072}, {0, 4096}, {2048, 0}},        /* BF16 weights widened to FP32 */
    {{8192, 0}, {6144, 0}, {2048, 4096}},        /* Q8_0 (the last: the Xeon's tuned pair) */
    {{768, 4096}, {0, 4096}, {3072, 0}},         /* Q4_0 */
    {{8192, 0}, {6144, 0}, {2048, 4096}},        /* Q8_0 in 16-block lane order: Q8_0's */
    {{6144, 24576}, {8192, 0}, {16384, 32768}},  /* Q4_0 in 16-block lane order */
    {{2048, 4096}, {8192, 0}, {3072, 6144}},     /* Q8_0 in tile order (the first: best in a scratch copy, session 38) */
    {{3072, 6144}, {8192, 0}, {2048, 4096}},     /* Q4_0 in tile order (the first: best on the Xeon, session 42) */
};
/* what each candidate of each kind does, from its distances (k_cand) */
static const char *k_names[TS_PF_KINDS][TS_PF_CANDS] = {
    {"near L1 + L2", "L2 only", "far L1 only"},
    {"L1 8 KiB ahead", "L1 6 KiB ahead", "near L1 + L2"},
    {"near L1 + L2", "L2 only", "far L1 only"},
    {"L1 8 KiB ahead", "L1 6 KiB ahead", "near L1 + L2"},
    {"L1 6 KiB + L2 24 KiB ahead", "L1 8 KiB ahead", "L1 16 KiB + L2 32 KiB ahead"},
    {"near L1 + L2", "L1 8 KiB ahead", "L1 3 KiB + L2 6 KiB ahead"},
    {"L1 3 KiB + L2 6 KiB ahead", "L1 8 KiB ahead", "near L1 + L2"},
};

#define PF_DROP_CHECKED 0x80000000u

typedef struct pf_state {
    _Atomic int chosen;        /* -1 while measuring */
    _Atomic unsigned dropped;  /* candidates dropped early (ts_pf_drop; their slices run the next
                                * one), PF_DROP_CHECKED once the rule has been applied */
    _Atomic uint64_t bytes[TS_PF_CANDS], cycles[TS_PF_CANDS];
} pf_state;

static pf_state g_pf[TS_PF_KINDS];
static int g_forced = -1;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void pf_init_once(void) {
    const char *e = getenv("TESSERA_PREFETCH");
    if (e && e[0] >= '0' && e[0] < '0' + TS_PF_CANDS && !e[1]) g_forced = e[0] - '0';
    else if (e && *e)
        fprintf(stderr, "tessera: TESSERA_PREFETCH=%s ignored (expected 0, 1 or 2); the prefetch distances are measured\n",
                e);
    for (int k = 0; k < TS_PF_KINDS; k++) atomic_store(&g_pf[k].chosen, g_forced);
}
static void pf_init(void) { pthread_once(&g_once, pf_init_once); }

static uint64_t ticks(void) {
#if defined(__x86_64__) || defined(__i386__)
    return __rdtsc();
#else
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
#endif
}

ts_pf ts_pf_candidate(ts_pf_kind k, int c) { return k_cand[k][c]; }
const char *ts_pf_candidate_name(ts_pf_kind k, int c) {
    return (unsigned)k < TS_PF_KINDS && c >= 0 && c < TS_PF_CANDS ? k_names[k][c] : "?";
}

static int slice_of(uint64_t t) { return (int)((t >> 22) % TS_PF_CANDS); }

int ts_pf_begin(ts_pf_kind k, uint64_t bytes, uint64_t *t0) {
    pf_init();
    *t0 = 0;
    int c = atomic_load_explicit(&g_pf[k].chosen, memory_order_relaxed);
    if (c >= 0) return c;
    unsigned dropped = atomic_load_explicit(&g_pf[k].dropped, memory_order_relaxed);
    if (bytes < TS_PF_MIN_CALL_BYTES) c = 0; /* untimed: candidate 0, or the next kept one */
    else {
        uint64_t t = ticks();
        if (bytes <= TS_PF_MAX_CALL_BYTES) *t0 = t;
        c = slice_of(t);
    }
    return ts_pf_kept(c, dropped & ~PF_DROP_CHECKED, TS_PF_CANDS);
}

int ts_pf_kept(int c, unsigned dropped, int n) {
    for (int i = 0; i < n; i++)
        if (!(dropped >> (c + i) % n & 1)) return (c + i) % n;
    return c;
}

void ts_pf_end(ts_pf_kind k, int c, uint64_t t0, uint64_t bytes) {
    if (!t0) return;
    uint64_t dt = ticks() - t0;
    pf_state *s = &g_pf[k];
    atomic_fetch_add_explicit(&s->bytes[c], bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->cycles[c], dt, memory_order_relaxed);
    uint64_t by[TS_PF_CANDS], cy[TS_PF_CANDS];
    for (int i = 0; i < TS_PF_CANDS; i++) {
        by[i] = atomic_load_explicit(&s->bytes[i], memory_order_relaxed);
        cy[i] = atomic_load_explicit(&s->cycles[i], memory_order_relaxed);
    }
    unsigned dropped = atomic_load_explicit(&s->dropped, memory_order_relaxed);
    /* once, when every candidate has read TS_PF_DROP_BYTES: a rule applied again and again until
     * some noisy moment dropped one would drop more often than the threshold says */
    if (!(dropped & PF_DROP_CHECKED) && ts_pf_decide(by, cy, TS_PF_CANDS, TS_PF_DROP_BYTES, 0) >= 0) {
        unsigned d = ts_pf_drop(by, cy, TS_PF_CANDS, TS_PF_DROP_BYTES, TS_PF_DROP_BELOW) | PF_DROP_CHECKED, unset = 0;
        atomic_compare_exchange_strong(&s->dropped, &unset, d);
        dropped = atomic_load_explicit(&s->dropped, memory_order_relaxed);
    }
    int best = ts_pf_decide(by, cy, TS_PF_CANDS, TS_PF_MIN_BYTES, dropped & ~PF_DROP_CHECKED);
    int expect = -1;
    if (best >= 0) atomic_compare_exchange_strong(&s->chosen, &expect, best);
}

int ts_pf_decide(const uint64_t *bytes, const uint64_t *cycles, int n, uint64_t min_bytes, unsigned dropped) {
    int best = -1;
    double rate = 0;
    for (int i = 0; i < n; i++) {
        if (dropped >> i & 1) continue;
        if (bytes[i] < min_bytes || !cycles[i]) return -1;
        double r = (double)bytes[i] / (double)cycles[i];
        if (best < 0 || r > rate) best = i, rate = r;
    }
    return best;
}

unsigned ts_pf_drop(const uint64_t *bytes, const uint64_t *cycles, int n, uint64_t min_bytes, double below) {
    double best = 0;
    for (int i = 0; i < n; i++) {
        if (bytes[i] < min_bytes || !cycles[i]) return 0;
        double r = (double)bytes[i] / (double)cycles[i];
        if (r > best) best = r;
    }
    unsigned m = 0;
    for (int i = 0; i < n; i++)
        if ((double)bytes[i] / (double)cycles[i] < below * best) m |= 1u << i;
    return m;
}

void ts_pf_set(ts_pf_kind k, int c) {
    pf_init();
    if (c >= 0 && c < TS_PF_CANDS) atomic_store(&g_pf[k].chosen, c);
}

void ts_pf_override(ts_pf_kind k, int c, ts_pf pf) {
    if ((unsigned)k >= TS_PF_KINDS || c < 0 || c >= TS_PF_CANDS) return;
    k_cand[k][c] = pf;
    ts_pf_set(k, c);
}

void ts_pf_get_report(ts_pf_kind k, ts_pf_report *out) {
    pf_init();
    memset(out, 0, sizeof *out);
    out->chosen = atomic_load(&g_pf[k].chosen);
    out->forced = g_forced >= 0;
    out->dropped = atomic_load(&g_pf[k].dropped) & ~PF_DROP_CHECKED;
    for (int i = 0; i < TS_PF_CANDS; i++) {
        uint64_t by = atomic_load(&g_pf[k].bytes[i]), cy = atomic_load(&g_pf[k].cycles[i]);
        out->bytes_per_cycle[i] = cy ? (double)by / (double)cy : 0;
        out->gbytes[i] = (double)by / 1e9;
    }
}

void ts_pf_describe(ts_pf_kind k, char *buf, size_t n) {
    ts_pf_report r;
    ts_pf_get_report(k, &r);
    if (r.forced) {
        snprintf(buf, n, "%s (TESSERA_PREFETCH)", ts_pf_candidate_name(k, r.chosen));
        return;
    }
    int w = snprintf(buf, n, "%s (bytes per cycle:", r.chosen >= 0 ? ts_pf_candidate_name(k, r.chosen) : "still measuring");
    for (int i = 0; i < TS_PF_CANDS && w >= 0 && (size_t)w < n; i++)
        w += snprintf(buf + w, n - (size_t)w, "%s %s %.2f over %.1f GB%s", i ? ";" : "", k_names[k][i],
                      r.bytes_per_cycle[i], r.gbytes[i], r.dropped >> i & 1 ? ", dropped early" : "");
    if (w >= 0 && (size_t)w < n) snprintf(buf + w, n - (size_t)w, ")");
}
