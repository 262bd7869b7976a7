/* Peak probes run on the engine's own thread pool: FMA throughput (the instruction the GEMM
 * kernels use) and streaming read bandwidth over a buffer far larger than the caches. */
#include "target/cpu/probe.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/clock.h"
#include "target/cpu/gemm.h"

typedef struct probe_ctx {
    ts_cpu_variant v;
    int f32; /* avx512bf16 with the FP32 prefill kernel */
    long iters;
    const uint8_t *buf;
    size_t bytes;
    double flops[256];
    double sink[256];
} probe_ctx;

static double fma_scalar(long iters) {
    float a[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 8; i++) a[i] = a[i] * 0.999999f + 1e-7f;
    return (double)iters * 8 * 2 + (a[0] == 12345.0f);
}

static void fma_job(void *p, int ith, int nth) {
    probe_ctx *c = p;
    (void)nth;
    c->flops[ith] = c->v >= TS_CPU_AVX512BF16 ? (c->f32 ? ts_probe_fma_avx512(c->iters) : ts_probe_dpbf16_avx512(c->iters))
                    : c->v >= TS_CPU_AVX2      ? ts_probe_fma_avx2(c->iters)
                                               : fma_scalar(c->iters);
}

static void read_job(void *p, int ith, int nth) {
    probe_ctx *c = p;
    size_t per = (c->bytes / (size_t)nth) & ~(size_t)127, off = per * (size_t)ith;
    if (c->v >= TS_CPU_AVX2) c->sink[ith] = ts_probe_read_avx2(c->buf + off, per);
    else {
        const uint64_t *q = (const uint64_t *)(c->buf + off);
        uint64_t s = 0;
        for (size_t i = 0; i < per / 8; i++) s += q[i];
        c->sink[ith] = (double)s;
    }
}

void ts_probe_peaks(ts_pool *pool, ts_cpu_variant v, int trials, ts_peaks *out) {
    probe_ctx *c = calloc(1, sizeof *c);
    int nth = ts_pool_size(pool);
    out->flops_gflops = out->read_gbs = 0;
    /* the instruction the prefill GEMM of this variant uses on this core (gemm.h) */
    int f32 = v >= TS_CPU_AVX512BF16 && ts_cpu_avx512_prefill_f32();
    out->flops_instr = v >= TS_CPU_AVX512BF16 ? (f32 ? "vfmadd231ps zmm (FP32 FMA)" : "vdpbf16ps zmm (BF16 pairs, FP32 accumulate)")
                       : v >= TS_CPU_AVX2     ? "vfmadd231ps ymm (FP32 FMA)"
                                              : "scalar FP32 multiply-add";
    if (!c) return;
    c->v = v;
    c->f32 = f32;
    c->iters = v >= TS_CPU_AVX2 ? 20000000 : 4000000;
    for (int t = 0; t < trials; t++) {
        double a = ts_now_s();
        ts_pool_run(pool, fma_job, c);
        double dt = ts_now_s() - a, f = 0;
        for (int i = 0; i < nth; i++) f += c->flops[i];
        if (f / dt / 1e9 > out->flops_gflops) out->flops_gflops = f / dt / 1e9;
    }
    c->bytes = (size_t)1 << 30;
    uint8_t *buf = aligned_alloc(64, c->bytes);
    if (buf) {
        memset(buf, 1, c->bytes); /* fault every page in before timing */
        c->buf = buf;
        for (int t = 0; t < trials; t++) {
            double a = ts_now_s();
            ts_pool_run(pool, read_job, c);
            double dt = ts_now_s() - a;
            size_t done = ((c->bytes / (size_t)nth) & ~(size_t)127) * (size_t)nth;
            if (done / dt / 1e9 > out->read_gbs) out->read_gbs = (double)done / dt / 1e9;
        }
        free(buf);
    }
    free(c);
}
