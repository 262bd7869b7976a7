/* Peak probes run on the engine's own thread pool: FMA throughput (the instruction the GEMM
 * kernels use) and read bandwidth over buffers far larger than the caches, by every pattern
 * and page size a decode reads its weights with (probe.h), the best of them being the peak. */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE, MAP_ANONYMOUS */
#include "target/cpu/probe.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>

#include "core/clock.h"
#include "core/procfs.h"
#include "target/cpu/gemm.h"

typedef struct probe_ctx {
    ts_cpu_variant v;
    int f32; /* avx512bf16 with the FP32 prefill kernel */
    long iters;
    double flops[256];
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

#define GEMV_K 2048 /* the read buffer seen as (rows, 2048) BF16 weights: a seed model's hidden size */

struct ts_read_probe {
    ts_pool *pool;
    ts_cpu_variant v;
    uint8_t *buf;
    size_t bytes, mapped;
    void *base;
    int gemv;          /* read_job: the decode GEMV over buf instead of a plain load stream */
    ts_gemm_fn gemm;   /* the variant's GEMM, whose S = 1 path is its decode GEMV */
    float *xp;         /* activations, GEMV_K */
    float *y;          /* one output per GEMV row */
    double huge_share;
    double sink[TS_POOL_MAX_THREADS];
};

static void read_job(void *p, int ith, int nth) {
    ts_read_probe *c = p;
    if (c->gemv) { /* rows split over threads as the cpu target splits a GEMM's columns */
        int rows = (int)(c->bytes / (2 * GEMV_K)), n0 = (int)((long)rows * ith / nth), n1 = (int)((long)rows * (ith + 1) / nth);
        c->gemm(c->y, rows, c->xp, GEMV_K, (const uint16_t *)c->buf, GEMV_K, 1, n0, n1, ts_cpu_gemm_default_tile(1, rows, GEMV_K));
        c->sink[ith] = c->y[n0];
        return;
    }
    size_t per = (c->bytes / (size_t)nth) & ~(size_t)127, off = per * (size_t)ith;
    if (c->v >= TS_CPU_AVX512BF16) c->sink[ith] = ts_probe_read_avx512(c->buf + off, per);
    else if (c->v >= TS_CPU_AVX2) c->sink[ith] = ts_probe_read_avx2(c->buf + off, per);
    else {
        const uint64_t *q = (const uint64_t *)(c->buf + off);
        uint64_t s = 0;
        for (size_t i = 0; i < per / 8; i++) s += q[i];
        c->sink[ith] = (double)s;
    }
}

ts_read_probe *ts_read_probe_new(ts_pool *pool, ts_cpu_variant v, size_t bytes, int huge) {
    ts_read_probe *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->pool = pool, c->v = v, c->gemm = ts_cpu_gemm_for(v);
    c->bytes = bytes / (2 * GEMV_K) * (2 * GEMV_K);
    size_t align = (size_t)2 << 20;
    c->mapped = c->bytes + align;
    long huge0 = ts_proc_kb("/proc/self/smaps_rollup", "AnonHugePages:");
    void *m = mmap(NULL, c->mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    c->xp = aligned_alloc(64, sizeof(float) * GEMV_K);
    c->y = malloc(sizeof(float) * (c->bytes / (2 * GEMV_K)));
    if (m == MAP_FAILED || !c->xp || !c->y || c->bytes == 0) {
        if (m != MAP_FAILED) munmap(m, c->mapped);
        free(c->xp), free(c->y), free(c);
        return NULL;
    }
    c->base = m;
    c->buf = (uint8_t *)(((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1));
#ifdef MADV_HUGEPAGE
    madvise(c->buf, c->bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#else
    (void)huge;
#endif
    memset(c->buf, 0x3c, c->bytes); /* BF16 0x3c3c, about 0.0115: finite products for the GEMV pattern */
    long huge1 = ts_proc_kb("/proc/self/smaps_rollup", "AnonHugePages:");
    c->huge_share = huge0 >= 0 && huge1 >= 0 ? (double)(huge1 - huge0) * 1024 / (double)c->bytes : 0;
    if (c->huge_share > 1) c->huge_share = 1;
    if (c->huge_share < 0) c->huge_share = 0;
    for (int k = 0; k < GEMV_K; k++) c->xp[k] = (float)(k % 7) * 0.125f - 0.375f;
    return c;
}

double ts_read_probe_run(ts_read_probe *c, int gemv) {
    int nth = ts_pool_size(c->pool);
    c->gemv = gemv;
    int pinned = ts_pool_enter(c->pool); /* every thread on its own CPU, as in a forward */
    double a = ts_now_s();
    ts_pool_run(c->pool, read_job, c);
    double dt = ts_now_s() - a;
    ts_pool_leave(c->pool, pinned);
    /* the bytes the pattern read: the stream's per-thread shares, or every GEMV row */
    size_t done = gemv ? c->bytes : ((c->bytes / (size_t)nth) & ~(size_t)127) * (size_t)nth;
    return dt > 0 ? (double)done / dt / 1e9 : 0;
}

double ts_read_probe_huge_share(const ts_read_probe *c) { return c->huge_share; }

void ts_read_probe_free(ts_read_probe *c) {
    if (!c) return;
    munmap(c->base, c->mapped);
    free(c->xp), free(c->y), free(c);
}

void ts_probe_peaks(ts_pool *pool, ts_cpu_variant v, int trials, ts_peaks *out) {
    probe_ctx *c = calloc(1, sizeof *c);
    int nth = ts_pool_size(pool);
    out->flops_gflops = out->read_gbs = 0;
    out->read_stream_4k_gbs = out->read_stream_2m_gbs = out->read_gemv_4k_gbs = out->read_gemv_2m_gbs = 0;
    out->read_best = "none";
    out->huge_share = 0;
    /* the instruction the prefill GEMM of this variant uses on this core (gemm.h) */
    int f32 = v >= TS_CPU_AVX512BF16 && ts_cpu_avx512_prefill_f32();
    out->flops_instr = v >= TS_CPU_AVX512BF16 ? (f32 ? "vfmadd231ps zmm (FP32 FMA)" : "vdpbf16ps zmm (BF16 pairs, FP32 accumulate)")
                       : v >= TS_CPU_AVX2     ? "vfmadd231ps ymm (FP32 FMA)"
                                              : "scalar FP32 multiply-add";
    if (!c) return;
    c->v = v;
    c->f32 = f32;
    c->iters = v >= TS_CPU_AVX2 ? 20000000 : 4000000;
    int pinned = ts_pool_enter(pool);
    for (int t = 0; t < trials; t++) {
        double a = ts_now_s();
        ts_pool_run(pool, fma_job, c);
        double dt = ts_now_s() - a, f = 0;
        for (int i = 0; i < nth; i++) f += c->flops[i];
        if (f / dt / 1e9 > out->flops_gflops) out->flops_gflops = f / dt / 1e9;
    }
    ts_pool_leave(pool, pinned);
    free(c);
    /* Read peak: two 512 MiB buffers (far beyond any L3), 4 KiB and 2 MiB pages, each read
     * by a plain stream and by the decode GEMV, alternating, best of the trials. */
    ts_read_probe *buf[2] = {ts_read_probe_new(pool, v, (size_t)512 << 20, 0), NULL};
    buf[1] = ts_read_probe_new(pool, v, (size_t)512 << 20, 1);
    out->huge_share = buf[1] ? ts_read_probe_huge_share(buf[1]) : 0;
    double *res[4] = {&out->read_stream_4k_gbs, &out->read_gemv_4k_gbs, &out->read_stream_2m_gbs, &out->read_gemv_2m_gbs};
    for (int t = 0; t < trials; t++)
        for (int q = 0; q < 4; q++) {
            if (!buf[q / 2]) continue;
            double g = ts_read_probe_run(buf[q / 2], q & 1);
            if (g > *res[q]) *res[q] = g;
        }
    out->read_best = ts_read_probe_names[0];
    for (int q = 0; q < 4; q++)
        if (*res[q] > out->read_gbs) out->read_gbs = *res[q], out->read_best = ts_read_probe_names[q];
    ts_read_probe_free(buf[0]);
    ts_read_probe_free(buf[1]);
}

const char *const ts_read_probe_names[4] = {"load stream, 4 KiB pages", "decode GEMV, 4 KiB pages",
                                            "load stream, 2 MiB pages", "decode GEMV, 2 MiB pages"};

void ts_peaks_max(ts_peaks *acc, const ts_peaks *p) {
    if (p->flops_gflops > acc->flops_gflops) acc->flops_gflops = p->flops_gflops, acc->flops_instr = p->flops_instr;
    if (p->read_gbs > acc->read_gbs) acc->read_gbs = p->read_gbs, acc->read_best = p->read_best;
    if (p->read_stream_4k_gbs > acc->read_stream_4k_gbs) acc->read_stream_4k_gbs = p->read_stream_4k_gbs;
    if (p->read_stream_2m_gbs > acc->read_stream_2m_gbs) acc->read_stream_2m_gbs = p->read_stream_2m_gbs;
    if (p->read_gemv_4k_gbs > acc->read_gemv_4k_gbs) acc->read_gemv_4k_gbs = p->read_gemv_4k_gbs;
    if (p->read_gemv_2m_gbs > acc->read_gemv_2m_gbs) acc->read_gemv_2m_gbs = p->read_gemv_2m_gbs;
    if (p->huge_share > acc->huge_share) acc->huge_share = p->huge_share;
}
