/* Prefill attention tiles against the scalar attention row, per variant the CPU supports, at
 * the seed models' head dims (64, 128) and the tiny ones' (16, 32): causal lengths from 1 to a
 * few hundred cached positions, full and partial tiles, strided q/k/v as in the session's
 * buffers; rel_l2 <= 2e-6 (both tiles measure <= 4.6e-7; a 0.2% error in one exp coefficient
 * measures 6e-6). Output rows outside the tile stay untouched; a NaN in a visible key reaches exactly
 * the rows that see it. Every check runs twice: on an FP32 cache, and on an F16 cache
 * (--kv-cache f16) against the scalar row on the FP32 widening of the same halves, so the F16
 * loads are judged by the FP32 oracle path. The F16 store (F16C) is checked bit for bit against
 * the scalar rounding the oracle uses, edge values included. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "deploy/gates.h"
#include "io/quant.h"
#include "target/cpu/attn.h"
#include "target/cpu/cpu_features.h"
#include "tharness.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
}

static double g_worst, g_worst512;
static int g_groups512;
static int g_f16; /* the kernels read an F16 cache */

/* n random cache values: raw is what the kernels read (floats, or halves when g_f16), wide the
 * same values as floats for the scalar oracle row. */
static void make_cache(size_t n, void **raw, float **wide) {
    *wide = malloc(sizeof(float) * n);
    *raw = g_f16 ? malloc(sizeof(uint16_t) * n) : (void *)*wide;
    for (size_t i = 0; i < n; i++) {
        float x = frand();
        if (g_f16) {
            uint16_t h = ts_f32_to_f16_sat(x);
            ((uint16_t *)*raw)[i] = h;
            x = ts_f16_to_f32(h);
        }
        (*wide)[i] = x;
    }
}
static void free_cache(void *raw, float *wide) {
    if (raw != (void *)wide) free(raw);
    free(wide);
}
static void set_nan(void *raw, float *wide, size_t i) {
    wide[i] = NAN;
    if (g_f16) ((uint16_t *)raw)[i] = 0x7e00;
}

typedef void (*tile_fn)(float *, int, const float *, int, const void *, const void *, int, int, int, int, float,
                        float *, int);

static void check(const char *name, tile_fn tile, int hd, int n_ctx0, int T) {
    /* the cache as the session lays it out (attn.h): blocks of TS_KV_BLOCK rows hd apart, here
     * with another head's block and a pad between blocks */
    int n_all = n_ctx0 + T - 1, stride = 2 * TS_KV_BLOCK * hd + 16, q_stride = 3 * hd + 16, out_stride = hd + 32;
    size_t nkv = (size_t)((n_all + TS_KV_BLOCK - 1) / TS_KV_BLOCK) * stride;
    void *kr, *vr;
    float *k, *v;
    make_cache(nkv, &kr, &k);
    make_cache(nkv, &vr, &v);
    float *q = malloc(sizeof(float) * (size_t)T * q_stride);
    float *out = malloc(sizeof(float) * (size_t)(T + 1) * out_stride), *want = malloc(sizeof(float) * (size_t)T * hd);
    float *sc = malloc(sizeof(float) * (size_t)TS_ATTN_TILE * (size_t)(n_all + 16)), *row = malloc(sizeof(float) * (size_t)n_all);
    for (size_t i = 0; i < (size_t)T * q_stride; i++) q[i] = 3 * frand(); /* peaked softmax rows too */
    for (size_t i = 0; i < (size_t)TS_ATTN_TILE * (size_t)(n_all + 16); i++) sc[i] = NAN;
    for (size_t i = 0; i < (size_t)(T + 1) * out_stride; i++) out[i] = NAN;
    float scale = 1.0f / sqrtf((float)hd);
    for (int t = 0; t < T; t++)
        ts_cpu_attn_row_scalar(want + (size_t)t * hd, q + (size_t)t * q_stride, k, v, n_ctx0 + t, stride, hd, scale, row, 0);
    tile(out, out_stride, q, q_stride, kr, vr, n_ctx0, T, stride, hd, scale, sc, g_f16);
    float *got = malloc(sizeof(float) * (size_t)T * hd);
    int outside = 0;
    for (int t = 0; t <= T; t++)
        for (int i = 0; i < out_stride; i++) {
            float x = out[(size_t)t * out_stride + i];
            if (t < T && i < hd) got[(size_t)t * hd + i] = x;
            else if (!isnan(x)) outside++;
        }
    ts_metrics m;
    ts_metrics_compute(got, want, T, hd, &m);
    if (m.rel_l2 > g_worst) g_worst = m.rel_l2;
    CHECK(m.rel_l2 <= 2e-6 && m.nonfinite == 0 && !outside,
          "%s%s hd=%d n_ctx0=%d T=%d: rel_l2 %.3e nonfinite %lld outside %d", name, g_f16 ? " f16" : "", hd, n_ctx0, T,
          m.rel_l2, (long long)m.nonfinite, outside);
    if (g_f16) { /* the F16 loads widen exactly: the tile on the widened FP32 cache gives the same bits */
        float *o32 = malloc(sizeof(float) * (size_t)(T + 1) * out_stride);
        memcpy(o32, out, sizeof(float) * (size_t)(T + 1) * out_stride);
        tile(o32, out_stride, q, q_stride, k, v, n_ctx0, T, stride, hd, scale, sc, 0);
        CHECK(!memcmp(o32, out, sizeof(float) * (size_t)(T + 1) * out_stride), "%s f16 hd=%d n_ctx0=%d T=%d: != on FP32",
              name, hd, n_ctx0, T);
        free(o32);
    }
    /* A NaN in key position p reaches the rows that see it (n_ctx0 + t > p) and only those. */
    int p = n_ctx0 + T / 2 - 1;
    set_nan(kr, k, (size_t)(p / TS_KV_BLOCK) * stride + (size_t)(p % TS_KV_BLOCK) * hd + 1);
    tile(out, out_stride, q, q_stride, kr, vr, n_ctx0, T, stride, hd, scale, sc, g_f16);
    int wrong = 0;
    for (int t = 0; t < T; t++) {
        int sees = n_ctx0 + t > p, nan = 0;
        for (int i = 0; i < hd; i++) nan |= isnan(out[(size_t)t * out_stride + i]);
        wrong += sees != nan;
    }
    CHECK(!wrong, "%s%s hd=%d n_ctx0=%d T=%d: NaN key at %d: %d rows wrong", name, g_f16 ? " f16" : "", hd, n_ctx0, T, p,
          wrong);
    free_cache(kr, k), free_cache(vr, v), free(q), free(out), free(want), free(sc), free(row), free(got);
}

/* Decode rows (attn_row) at the real shapes: head_dim 128 and 64, n_kv_heads 8 with GQA groups
 * 2 (Qwen3-0.6B's 16/8) and 4 (Llama's 32/8), the cache laid out as the session does
 * [block][n_kv_heads][TS_KV_BLOCK][hd] and q [n_heads * hd]; every head of the row against the
 * scalar row, contexts 1..4096 (whole and partial blocks of 8 keys and of the cache). */
static void check_row(const char *name, ts_attn_row_fn row, int hd, int group, int n_ctx) {
    int n_kv = 8, nh = n_kv * group, stride = TS_KV_BLOCK * n_kv * hd;
    size_t nkv = (size_t)((n_ctx + TS_KV_BLOCK - 1) / TS_KV_BLOCK) * stride;
    void *kr, *vr;
    float *k, *v;
    make_cache(nkv, &kr, &k);
    make_cache(nkv, &vr, &v);
    size_t es = g_f16 ? sizeof(uint16_t) : sizeof(float);
    const char *kc = kr, *vc = vr; /* element e of the raw caches at byte e * es */
    float *q = malloc(sizeof(float) * (size_t)nh * hd), *got = malloc(sizeof(float) * (size_t)nh * hd);
    float *want = malloc(sizeof(float) * (size_t)nh * hd), *sc = malloc(sizeof(float) * (size_t)n_ctx);
    for (int i = 0; i < nh * hd; i++) q[i] = 3 * frand();
    float scale = 1.0f / sqrtf((float)hd);
    for (int h = 0; h < nh; h++) {
        int g = h / group;
        size_t e = (size_t)g * TS_KV_BLOCK * hd;
        ts_cpu_attn_row_scalar(want + (size_t)h * hd, q + (size_t)h * hd, k + e, v + e, n_ctx, stride, hd, scale, sc, 0);
        row(got + (size_t)h * hd, q + (size_t)h * hd, kc + e * es, vc + e * es, n_ctx, stride, hd, scale, sc, g_f16);
    }
    ts_metrics m;
    ts_metrics_compute(got, want, nh, hd, &m);
    if (m.rel_l2 > g_worst) g_worst = m.rel_l2;
    CHECK(m.rel_l2 <= 2e-6 && m.nonfinite == 0, "%s%s hd=%d group=%d n_ctx=%d: rel_l2 %.3e nonfinite %lld", name,
          g_f16 ? " f16" : "", hd, group, n_ctx, m.rel_l2, (long long)m.nonfinite);
    /* The grouped call (all q heads of a kv head at once) gives each head exactly the row's result. */
    float *grp = malloc(sizeof(float) * (size_t)nh * hd), *gsc = malloc(sizeof(float) * (size_t)group * n_ctx);
    for (int g = 0; g < n_kv; g++)
        ts_cpu_attn_group_avx2(grp + (size_t)g * group * hd, q + (size_t)g * group * hd, kc + (size_t)g * TS_KV_BLOCK * hd * es,
                               vc + (size_t)g * TS_KV_BLOCK * hd * es, n_ctx, stride, hd, scale, gsc, group, g_f16);
    CHECK(!memcmp(grp, got, sizeof(float) * (size_t)nh * hd), "%s%s hd=%d group=%d n_ctx=%d: grouped != row", name,
          g_f16 ? " f16" : "", hd, group, n_ctx);
    if (g_f16) { /* the scalar row's F16 loads widen exactly too */
        float *w1 = malloc(sizeof(float) * (size_t)hd);
        ts_cpu_attn_row_scalar(w1, q, kc, vc, n_ctx, stride, hd, scale, sc, 1);
        CHECK(!memcmp(w1, want, sizeof(float) * (size_t)hd), "scalar row f16 hd=%d n_ctx=%d: != on FP32", hd, n_ctx);
        free(w1);
    }
    if (g_f16) { /* the F16 loads widen exactly: the same kernel on the widened FP32 cache gives the same bits */
        for (int g = 0; g < n_kv; g++)
            ts_cpu_attn_group_avx2(grp + (size_t)g * group * hd, q + (size_t)g * group * hd, k + (size_t)g * TS_KV_BLOCK * hd,
                                   v + (size_t)g * TS_KV_BLOCK * hd, n_ctx, stride, hd, scale, gsc, group, 0);
        CHECK(!memcmp(grp, got, sizeof(float) * (size_t)nh * hd), "avx2 group f16 hd=%d group=%d n_ctx=%d: != on FP32", hd,
              group, n_ctx);
    }
    free(grp), free(gsc);
    if (ts_cpu_variant_supported(TS_CPU_AVX512BF16) && ts_cpu_attn_tile_avx512_ok(hd)) {
        /* the AVX-512 group kernel: its own arithmetic, judged against the scalar row like the
         * others; its scores rows are n_ctx rounded up to 16 apart */
        int ns = (n_ctx + 15) & ~15;
        float *w = malloc(sizeof(float) * (size_t)nh * hd), *wsc = malloc(sizeof(float) * (size_t)group * ns);
        for (int g = 0; g < n_kv; g++)
            ts_cpu_attn_group_avx512(w + (size_t)g * group * hd, q + (size_t)g * group * hd, kc + (size_t)g * TS_KV_BLOCK * hd * es,
                                     vc + (size_t)g * TS_KV_BLOCK * hd * es, n_ctx, stride, hd, scale, wsc, group, g_f16);
        ts_metrics_compute(w, want, nh, hd, &m);
        if (m.rel_l2 > g_worst512) g_worst512 = m.rel_l2;
        CHECK(m.rel_l2 <= 2e-6 && m.nonfinite == 0, "avx512 group%s hd=%d group=%d n_ctx=%d: rel_l2 %.3e nonfinite %lld",
              g_f16 ? " f16" : "", hd, group, n_ctx, m.rel_l2, (long long)m.nonfinite);
        if (g_f16) { /* bit-identical to itself on the widened FP32 cache */
            float *w32 = malloc(sizeof(float) * (size_t)nh * hd);
            for (int g = 0; g < n_kv; g++)
                ts_cpu_attn_group_avx512(w32 + (size_t)g * group * hd, q + (size_t)g * group * hd, k + (size_t)g * TS_KV_BLOCK * hd,
                                         v + (size_t)g * TS_KV_BLOCK * hd, n_ctx, stride, hd, scale, wsc, group, 0);
            CHECK(!memcmp(w32, w, sizeof(float) * (size_t)nh * hd), "avx512 group f16 hd=%d group=%d n_ctx=%d: != on FP32",
                  hd, group, n_ctx);
            free(w32);
        }
        g_groups512++;
        free(w), free(wsc);
    }
    free_cache(kr, k), free_cache(vr, v), free(q), free(got), free(want), free(sc);
}

/* The F16C store against the scalar rounding the oracle uses (ts_f32_to_f16_sat): edge values
 * (ties, the largest half and just past it, saturation, subnormals, signed zero, NaN) and a
 * sweep of random bit patterns. */
static void check_store(void) {
    enum { N = 1 << 16 };
    static float x[N];
    static uint16_t got[N];
    const float edge[] = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, 70000.0f, -1e9f, INFINITY, -INFINITY,
                          NAN, 6.0e-8f, 2.9e-8f, 3.0e-8f, 6.1e-5f, 1.00048828125f, 1.000732421875f, -2049.0f, 2051.0f};
    int ne = (int)(sizeof edge / sizeof edge[0]);
    for (int i = 0; i < N; i++) {
        if (i < ne) x[i] = edge[i];
        else {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            uint32_t u = (uint32_t)(rng >> 32);
            /* odd i: float exponents 100..163, i.e. half subnormals, normals and past 65504 */
            if (i % 2) u = (u & 0x807fffffu) | ((100u + ((u >> 23) & 63u)) << 23);
            memcpy(&x[i], &u, sizeof u);
        }
    }
    ts_cpu_kv_f16_rows_avx2(got, x, N / 64, 64, 64);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        uint16_t w = ts_f32_to_f16_sat(x[i]);
        int both_nan = (w & 0x7c00) == 0x7c00 && (w & 0x3ff) && (got[i] & 0x7c00) == 0x7c00 && (got[i] & 0x3ff);
        if (got[i] != w && !both_nan && bad++ < 5) printf("f16 store: x=%a got %04x want %04x\n", (double)x[i], got[i], w);
    }
    CHECK(!bad, "f16 store: %d of %d values differ from the scalar rounding", bad, N);
    CHECK(ts_f32_to_f16_sat(1e6f) == 0x7bff && ts_f32_to_f16_sat(-1e6f) == 0xfbff && ts_f32_to_f16_sat(65504.0f) == 0x7bff,
          "f16 store saturates at the largest half");
    printf("f16 store: %d values bit-identical to the scalar rounding\n", N);
}

static void run_all(void) {
    if (ts_cpu_variant_supported(TS_CPU_AVX2)) {
        static const int rctx[] = {1, 2, 7, 8, 9, 15, 16, 17, 136, 1000, 4096}, rhd[] = {128, 64, 32},
                         rgroup[] = {2, 4, 1, 3, 8, 12};
        int n = 0;
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 6; b++)
                for (size_t c = 0; c < sizeof rctx / sizeof rctx[0]; c++, n++)
                    check_row("avx2 row", ts_cpu_attn_row_avx2, rhd[a], rgroup[b], rctx[c]);
        printf("%s avx2 row: %d shapes checked against the scalar row, worst rel_l2 %.2e\n", g_f16 ? "F16" : "FP32", n,
               g_worst);
        if (g_groups512)
            printf("%s avx512 group: %d shapes checked against the scalar row, worst rel_l2 %.2e\n", g_f16 ? "F16" : "FP32",
                   g_groups512, g_worst512);
        else
            th_isa_gap(ts_cpu_variant_name(TS_CPU_AVX512BF16), "avx512 group");
        g_worst = 0;
    } else
        th_isa_gap(ts_cpu_variant_name(TS_CPU_AVX2), "avx2 row");
    static const int hds[] = {16, 32, 64, 128}, ctxs[] = {1, 17, 300, 600}, ts[] = {TS_ATTN_TILE, 5, 1};
    struct {
        const char *name;
        tile_fn fn;
        ts_cpu_variant v;
    } tiles[] = {{"avx2 tile", ts_cpu_attn_tile_avx2, TS_CPU_AVX2}, {"avx512 tile", ts_cpu_attn_tile_avx512, TS_CPU_AVX512BF16}};
    for (size_t f = 0; f < sizeof tiles / sizeof tiles[0]; f++) {
        if (!ts_cpu_variant_supported(tiles[f].v)) {
            th_isa_gap(ts_cpu_variant_name(tiles[f].v), tiles[f].name);
            continue;
        }
        int n = 0;
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++)
                for (int c = 0; c < 3; c++, n++) check(tiles[f].name, tiles[f].fn, hds[a], ctxs[b], ts[c]);
        printf("%s %s: %d shapes checked against the scalar row, worst rel_l2 %.2e\n", g_f16 ? "F16" : "FP32",
               tiles[f].name, n, g_worst);
        g_worst = 0;
    }
    g_worst512 = 0, g_groups512 = 0;
}

int main(void) {
    run_all();
    g_f16 = 1;
    run_all();
    if (ts_cpu_variant_supported(TS_CPU_AVX2)) check_store();
    else th_isa_gap(ts_cpu_variant_name(TS_CPU_AVX2), "f16 store");
    CHECK(ts_cpu_attn_tile_avx512_ok(128) && ts_cpu_attn_tile_avx512_ok(64) && !ts_cpu_attn_tile_avx512_ok(96) &&
              !ts_cpu_attn_tile_avx512_ok(8),
          "head dims the AVX-512 tile accepts");
    return th_finish("test_cpu_attn");
}
