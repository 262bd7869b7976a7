/* Measurements of this machine's own peaks, taken in the same run as a benchmark so every
 * performance number can be quoted as a fraction of what the hardware did at that moment. */
#ifndef TS_TARGET_CPU_PROBE_H
#define TS_TARGET_CPU_PROBE_H
#include "target/cpu/cpu_features.h"
#include "core/pool.h"

typedef struct ts_peaks {
    double flops_gflops;    /* multiply-add throughput of the instruction the GEMM uses */
    const char *flops_instr; /* its name */
    double read_gbs;        /* streaming read bandwidth: the best of the patterns below */
    /* Each read pattern (all pool threads, each a contiguous share, best of the trials), over
     * 4 KiB pages (as a mapped weight file is read) and over 2 MiB transparent huge pages (as
     * copied weights are, where the kernel grants them): a plain load stream, and the decode
     * GEMV this variant runs (its loads, prefetches and arithmetic) over the buffer as a
     * (rows, 2048) BF16 matrix. No decode can read its weights faster than the best of them. */
    double read_stream_4k_gbs, read_stream_2m_gbs, read_gemv_4k_gbs, read_gemv_2m_gbs;
    const char *read_best;  /* which of the four read_gbs is */
    double huge_share;      /* share of the 2 MiB buffer the kernel backed with huge pages */
} ts_peaks;

/* Runs both probes on every pool thread (best of `trials`). */
void ts_probe_peaks(ts_pool *pool, ts_cpu_variant v, int trials, ts_peaks *out);
/* acc <- the better of acc and p, figure by figure: a peak probed at several moments of a run
 * (a shared host's memory bandwidth moves by 2x within seconds) is the best of them. */
void ts_peaks_max(ts_peaks *acc, const ts_peaks *p);

/* One read pattern's buffer, to be read again and again: a probe between the tokens of a decode
 * (tools/sbs_inproc --token-probe) follows a host whose bandwidth moves within seconds.
 * bytes of anonymous memory aligned to 2 MiB, advised huge (or not), every page faulted in.
 * NULL when out of memory. */
typedef struct ts_read_probe ts_read_probe;
ts_read_probe *ts_read_probe_new(ts_pool *pool, ts_cpu_variant v, size_t bytes, int huge);
/* One pass over the buffer on every pool thread: GB/s of a plain load stream (gemv 0) or of
 * this variant's decode GEMV over it as a (rows, 2048) BF16 matrix (gemv 1). */
double ts_read_probe_run(ts_read_probe *p, int gemv);
/* share of the buffer the kernel backed with 2 MiB pages */
double ts_read_probe_huge_share(const ts_read_probe *p);
void ts_read_probe_free(ts_read_probe *p);
/* the four patterns of ts_peaks, in the order stream 4 KiB, GEMV 4 KiB, stream 2 MiB, GEMV 2 MiB */
extern const char *const ts_read_probe_names[4];

/* Per-thread kernels (exposed for the variant files). */
double ts_probe_fma_avx2(long iters); /* returns flops done */
double ts_probe_dpbf16_avx512(long iters); /* returns flops done */
double ts_probe_fma_avx512(long iters);   /* returns flops done */
double ts_probe_read_avx2(const void *buf, size_t bytes); /* returns a checksum */
double ts_probe_read_avx512(const void *buf, size_t bytes); /* zmm loads, prefetch as the GEMV */

#endif
