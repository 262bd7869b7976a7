/* The AVX-512 decode GEMVs over matrices far larger than the caches, each at prefetch distances
 * given on the command line, interleaved with a read probe, all in one process: which distances
 * stream a weight type fastest on this machine, as a fraction of the bandwidth measured seconds
 * before. A host whose memory bandwidth moves by 2x within seconds (docs/performance.md) can only
 * be compared this way; prefetch.c's candidates were chosen from this tool's output.
 *   build/gemv_sweep [--threads N] [--k K] [--mib M] [--rounds R] TYPE:L1:L2 ...
 * TYPE: bf16, q8_0, q4_0, q8_0x16, q4_0x16 (the 16-block lane order of gemm.h), q8_0t16, q4_0t16 (the tile order);
 * L1 / L2: bytes ahead into L1 / L2 (0: none). Each round prints the probe's GB/s (plain loads, 2
 * MiB pages) and each setting's; the last line the median of each over the probe's. The weights
 * are random codes with small scales (the kernels' speed does not depend on the values); x is
 * fixed. Not part of `make test`. */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/clock.h"
#include "core/pool.h"
#include "deploy/measure.h"
#include "target/cpu/cpu_features.h"
#include "target/cpu/gemm.h"
#include "target/cpu/prefetch.h"
#include "target/cpu/probe.h"

#define MAX_SPECS 32
#define MAX_ROUNDS 200

typedef struct spec {
    const char *text;
    ts_dtype dt;
    ts_pf_kind kind;
    ts_pf pf;
    uint8_t *W;   /* mats matrices of N rows, rb bytes each */
    size_t rb;
    double gbs[MAX_ROUNDS];
} spec;

typedef struct run_ctx {
    const spec *s;
    int N, K, mats;
    const float *xp;
    float *y;
    ts_pool *pool;
} run_ctx;

static const struct {
    const char *name;
    ts_dtype dt;
    ts_pf_kind kind;
} k_types[] = {
    {"bf16", TS_DTYPE_BF16, TS_PF_BF16},          {"q8_0", TS_DTYPE_Q8_0, TS_PF_Q8},
    {"q4_0", TS_DTYPE_Q4_0, TS_PF_Q4},            {"q8_0x16", TS_DTYPE_Q8_0X16, TS_PF_Q8X16},
    {"q4_0x16", TS_DTYPE_Q4_0X16, TS_PF_Q4X16}, {"q8_0t16", TS_DTYPE_Q8_0T16, TS_PF_Q8T16},
    {"q4_0t16", TS_DTYPE_Q4_0T16, TS_PF_Q4T16},
};

static void run(void *ctx, int ith, int nth) {
    const run_ctx *r = ctx;
    /* shares of whole 16-row groups (N is a multiple of 16): every type reads whole tile-order groups */
    int n0 = (int)((long)(r->N / 16) * ith / nth) * 16, n1 = (int)((long)(r->N / 16) * (ith + 1) / nth) * 16;
    ts_gemm_tile t = ts_cpu_gemm_default_tile(1, r->N, r->K);
    for (int m = 0; m < r->mats; m++) {
        const uint8_t *W = r->s->W + (size_t)m * r->N * r->s->rb;
        if (r->s->dt == TS_DTYPE_BF16)
            ts_cpu_gemm_for(TS_CPU_AVX512BF16)(r->y, r->N, r->xp, r->K, (const uint16_t *)W, r->K, 1, n0, n1, t);
        else ts_cpu_gemm_q_for(TS_CPU_AVX512BF16)(r->y, r->N, r->xp, r->K, W, r->s->dt, r->K, 1, n0, n1, t);
        ts_pool_barrier(r->pool); /* as a forward pass: every matrix a stage */
    }
}

static uint8_t *huge_buffer(size_t bytes) {
    size_t r = (bytes + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
    uint8_t *p = aligned_alloc((size_t)2 << 20, r);
    if (!p) return NULL;
    madvise(p, r, MADV_HUGEPAGE);
    return p;
}

/* random codes; quantized blocks get an F16 scale of 2^-7 at each block's start */
static int fill(spec *s, int N, int K, int mats) {
    ts_dtype stored = ts_x16_stored(s->dt);
    s->rb = s->dt == TS_DTYPE_BF16 ? (size_t)K * 2 : ts_gemm_row_bytes(stored, K);
    size_t bytes = s->rb * (size_t)N * (size_t)mats;
    uint8_t *W = huge_buffer(bytes);
    if (!W) return 0;
    uint32_t st = 0x9e3779b9u;
    for (size_t i = 0; i < bytes; i++) st = st * 1664525u + 1013904223u, W[i] = (uint8_t)(st >> 24);
    if (s->dt == TS_DTYPE_BF16)
        for (size_t i = 0; i < bytes / 2; i++) ((uint16_t *)W)[i] &= 0xbfff; /* finite */
    else {
        size_t bb = s->rb / (size_t)(K / TS_QBLOCK);
        for (size_t i = 0; i < bytes; i += bb) W[i] = 0, W[i + 1] = 0x20;
    }
    if (ts_dtype_is_x16(s->dt) || ts_dtype_is_t16(s->dt)) {
        uint8_t *L = huge_buffer(bytes);
        if (!L) {
            free(W);
            return 0;
        }
        if (ts_dtype_is_t16(s->dt)) ts_t16_repack_groups(stored, L, W, K, 0, (int64_t)N * mats / 16);
        else ts_x16_repack_rows(s->dt, L, W, K, 0, (int64_t)N * mats);
        free(W);
        W = L;
    }
    s->W = W;
    return 1;
}

static int usage(void) {
    fprintf(stderr, "usage: gemv_sweep [--threads N] [--k K] [--mib M] [--rounds R] TYPE:L1:L2 ...\n"
                    "  TYPE bf16|q8_0|q4_0|q8_0x16|q4_0x16|q8_0t16|q4_0t16; L1, L2 bytes ahead (multiples of 64, 0 = none)\n");
    return 2;
}

int main(int argc, char **argv) {
    int threads = 0, K = 1024, mib = 320, rounds = 5, ns = 0;
    spec *specs = calloc(MAX_SPECS, sizeof(spec));
    if (!specs) return 1;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--threads")) threads = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--k")) K = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--mib")) mib = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--rounds")) rounds = atoi(argv[++i]);
        else if (argv[i][0] == '-' || ns == MAX_SPECS) return usage();
        else {
            spec *s = &specs[ns];
            char type[16];
            int l1, l2, t = -1;
            if (sscanf(argv[i], "%15[^:]:%d:%d", type, &l1, &l2) != 3 || l1 < 0 || l2 < 0 || l1 % 64 || l2 % 64)
                return usage();
            for (size_t j = 0; j < sizeof k_types / sizeof *k_types; j++)
                if (!strcmp(type, k_types[j].name)) t = (int)j;
            if (t < 0) return usage();
            s->text = argv[i], s->dt = k_types[t].dt, s->kind = k_types[t].kind, s->pf = (ts_pf){l1, l2};
            ns++;
        }
    }
    if (!ns || K < 512 || K % 512 || mib < 16 || rounds < 1 || rounds > MAX_ROUNDS) return usage();
    if (!ts_cpu_variant_supported(TS_CPU_AVX512BF16) || !ts_cpu_features_get()->avx512vnni) {
        fprintf(stderr, "gemv_sweep: the prefetch distances belong to the AVX-512 (VNNI) decode kernels; this CPU has none\n");
        return 1;
    }
    for (int i = 0; i < ns; i++)
        if (specs[i].dt == TS_DTYPE_BF16 && !ts_cpu_avx512_decode_f32()) {
            fprintf(stderr, "gemv_sweep: this core decodes BF16 with the vdpbf16ps GEMV, which has no prefetch "
                            "distances; the bf16 settings all time the same kernel\n");
            break;
        }
    ts_pool *pool;
    ts_error err;
    if (ts_pool_new(ts_pool_resolve_threads(threads), &pool, &err) != TS_OK) {
        fprintf(stderr, "gemv_sweep: %s\n", err.msg);
        return 1;
    }
    /* N rows of K per matrix (about 3 MiB of Q8_0, as a seed model's gate projection), as many
     * matrices as make `mib` MiB of Q8_0: every type reads the same weights' count */
    int N = 3 * 1024 * 1024 / (K / TS_QBLOCK * 34) / 16 * 16; /* whole 16-row groups (the tile order) */
    int mats = (int)((size_t)mib * 1024 * 1024 / ((size_t)N * (K / TS_QBLOCK) * 34));
    if (mats < 1) mats = 1;
    for (int i = 0; i < ns; i++)
        if (!fill(&specs[i], N, K, mats)) {
            fprintf(stderr, "gemv_sweep: out of memory for %s\n", specs[i].text);
            return 1;
        }
    float *x = malloc(sizeof(float) * (size_t)K), *xp = malloc(sizeof(float) * (size_t)K), *y = malloc(sizeof(float) * (size_t)N);
    ts_read_probe *probe = ts_read_probe_new(pool, TS_CPU_AVX512BF16, (size_t)256 << 20, 1);
    if (!x || !xp || !y || !probe) {
        fprintf(stderr, "gemv_sweep: out of memory\n");
        return 1;
    }
    for (int k = 0; k < K; k++) x[k] = (float)((k * 7919) % 1000) / 500.0f - 1.0f;
    ts_cpu_pack_row(xp, x, K);
    printf("gemv_sweep: %d threads%s, K %d, %d matrices of %d rows, rounds %d\n", ts_pool_size(pool),
           ts_pool_pinned(pool) ? " (pinned)" : "", K, mats, N, rounds);
    double probe_gbs[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
        int e = ts_pool_enter(pool);
        probe_gbs[r] = ts_read_probe_run(probe, 0);
        ts_pool_leave(pool, e);
        printf("probe %5.1f |", probe_gbs[r]);
        for (int j = 0; j < ns; j++) { /* the order rotates: no setting always runs first after the probe */
            spec *s = &specs[(j + r) % ns];
            ts_pf_override(s->kind, 0, s->pf);
            run_ctx c = {s, N, K, mats, xp, y, pool};
            e = ts_pool_enter(pool);
            double t0 = ts_now_s();
            ts_pool_run(pool, run, &c);
            double dt = ts_now_s() - t0;
            ts_pool_leave(pool, e);
            s->gbs[r] = (double)s->rb * N * mats / dt / 1e9;
            printf(" %s %5.1f", s->text, s->gbs[r]);
        }
        printf("\n");
        fflush(stdout);
    }
    printf("median over %d rounds: probe %.1f GB/s |", rounds, ts_measure_median(probe_gbs, rounds));
    for (int i = 0; i < ns; i++) {
        double f[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++) f[r] = specs[i].gbs[r] / probe_gbs[r];
        printf(" %s %.1f (%.2f of its round's probe)", specs[i].text, ts_measure_median(specs[i].gbs, rounds),
               ts_measure_median(f, rounds));
    }
    printf("\n");
    return 0;
}
