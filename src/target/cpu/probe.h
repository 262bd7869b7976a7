/* Measurements of this machine's own peaks, taken in the same run as a benchmark so every
 * performance number can be quoted as a fraction of what the hardware did at that moment. */
#ifndef TS_TARGET_CPU_PROBE_H
#define TS_TARGET_CPU_PROBE_H
#include "target/cpu/cpu_features.h"
#include "core/pool.h"

typedef struct ts_peaks {
    double flops_gflops;    /* multiply-add throughput of the instruction the GEMM uses */
    const char *flops_instr; /* its name */
    double read_gbs;        /* streaming read bandwidth */
} ts_peaks;

/* Runs both probes on every pool thread (best of `trials`). */
void ts_probe_peaks(ts_pool *pool, ts_cpu_variant v, int trials, ts_peaks *out);

/* Per-thread kernels (exposed for the variant files). */
double ts_probe_fma_avx2(long iters); /* returns flops done */
double ts_probe_dpbf16_avx512(long iters); /* returns flops done */
double ts_probe_fma_avx512(long iters);   /* returns flops done */
double ts_probe_read_avx2(const void *buf, size_t bytes); /* returns a checksum */

#endif
