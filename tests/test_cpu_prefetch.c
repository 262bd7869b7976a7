/* The per-process choice of decode prefetch distances (target/cpu/prefetch.h): the decision
 * rule on given sums, and the three AVX-512 decode GEMVs (BF16 widened to FP32, Q8_0, Q4_0) under
 * every candidate at the seed models' shapes: prefetching may change timing, never a bit, so each
 * candidate's outputs must equal candidate 0's exactly and the scalar kernel's to FP32 rounding
 * (a distance misused as a load offset, or a candidate reading past its rows, fails here). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "target/cpu/cpu_target.h"
#include "target/cpu/gemm.h"
#include "target/cpu/prefetch.h"
#include "tharness.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float frand(void) { return (float)(urand() * (1.0 / 4294967296.0)) * 2.0f - 1.0f; }

static void test_decide(void) {
    const uint64_t G = (uint64_t)1 << 30;
    uint64_t by[3] = {5 * G, 5 * G, 5 * G}, cy[3] = {1000, 800, 900};
    CHECK(ts_pf_decide(by, cy, 3, 4 * G, 0) == 1, "the most bytes per cycle wins");
    by[2] = 3 * G;
    CHECK(ts_pf_decide(by, cy, 3, 4 * G, 0) == -1, "a candidate short of the minimum: still measuring");
    CHECK(ts_pf_decide(by, cy, 3, 4 * G, 4) == 1, "a dropped candidate short of the minimum does not hold the choice");
    CHECK(ts_pf_decide(by, cy, 3, 4 * G, 6) == 0, "a dropped candidate is never chosen (1 has the best rate)");
    uint64_t by2[3] = {8 * G, 4 * G, 6 * G}, cy2[3] = {800, 500, 550};
    CHECK(ts_pf_decide(by2, cy2, 3, 4 * G, 0) == 2, "rates, not sums: 8/800 < 6/550");
    uint64_t cy3[3] = {800, 0, 600};
    CHECK(ts_pf_decide(by2, cy3, 3, 4 * G, 0) == -1, "no cycles recorded: no choice");
    /* the early drop: rates 1.0, 0.84, 0.86 of the best at 0.85 */
    const uint64_t M = (uint64_t)1 << 20;
    uint64_t by4[3] = {600 * M, 600 * M, 600 * M}, cy4[3] = {1000, 1191, 1163};
    CHECK(ts_pf_drop(by4, cy4, 3, 512 * M, 0.85) == 2, "below 0.85 of the best: dropped (mask %u)",
          ts_pf_drop(by4, cy4, 3, 512 * M, 0.85));
    by4[2] = 500 * M;
    CHECK(ts_pf_drop(by4, cy4, 3, 512 * M, 0.85) == 0, "no drop before every candidate has read the minimum");
    uint64_t by5[3] = {600 * M, 600 * M, 600 * M}, cy5[3] = {1000, 1000, 1000};
    CHECK(ts_pf_drop(by5, cy5, 3, 512 * M, 0.85) == 0, "equal rates: none dropped");
    /* which candidate a slice runs: itself unless dropped, else the next kept one */
    static const int kept[8][3] = {{0, 1, 2}, {1, 1, 2}, {0, 2, 2}, {2, 2, 2}, {0, 1, 0}, {1, 1, 1}, {0, 0, 0}, {0, 1, 2}};
    for (unsigned m = 0; m < 7; m++)
        for (int c = 0; c < 3; c++)
            CHECK(ts_pf_kept(c, m, 3) == kept[m][c], "slice %d with mask %u runs %d, expected %d", c, m, ts_pf_kept(c, m, 3),
                  kept[m][c]);
    CHECK(ts_pf_kept(1, 7, 3) == 1, "every candidate dropped (never happens): the slice's own");
    for (int c = 0; c < TS_PF_CANDS; c++) {
        ts_pf p = ts_pf_candidate(TS_PF_BF16, c);
        CHECK(p.l1 >= 0 && p.l2 >= 0 && (p.l1 || p.l2) && p.l1 % 64 == 0 && p.l2 % 64 == 0,
              "candidate %d: %d / %d bytes ahead", c, p.l1, p.l2);
    }
}

static double rel_l2(const float *a, const float *b, int n) {
    double e = 0, r = 0;
    for (int i = 0; i < n; i++) e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), r += (double)b[i] * b[i];
    return sqrt(e / (r > 0 ? r : 1));
}

/* One kind at one shape: every candidate against candidate 0 (bitwise) and the scalar kernel. */
static void check_kind(ts_pf_kind kind, int N, int K) {
    ts_dtype dt = kind == TS_PF_Q8     ? TS_DTYPE_Q8_0
                  : kind == TS_PF_Q4   ? TS_DTYPE_Q4_0
                  : kind == TS_PF_Q8X16 ? TS_DTYPE_Q8_0X16
                  : kind == TS_PF_Q4X16 ? TS_DTYPE_Q4_0X16
                  : kind == TS_PF_Q8T16 ? TS_DTYPE_Q8_0T16
                  : kind == TS_PF_Q4T16 ? TS_DTYPE_Q4_0T16
                                        : TS_DTYPE_BF16;
    size_t rb = ts_gemm_row_bytes(dt, K);
    uint8_t *W = malloc(rb * (size_t)N), *stored = NULL;
    float *x = malloc(sizeof(float) * (size_t)K), *xp = malloc(sizeof(float) * (size_t)K);
    float *y[TS_PF_CANDS], *ys = malloc(sizeof(float) * (size_t)N);
    for (size_t i = 0; i < rb * (size_t)N; i++) W[i] = (uint8_t)urand();
    if (dt != TS_DTYPE_BF16) { /* finite F16 scales 2^-10 .. 2^-5 at each block's start */
        size_t bb = rb / (size_t)(K / TS_QBLOCK);
        for (size_t b = 0; b < (size_t)N * (size_t)(K / TS_QBLOCK); b++) {
            uint16_t h = (uint16_t)((5 + urand() % 6) << 10 | (urand() & 1023));
            memcpy(W + b * bb, &h, 2);
        }
        if (ts_dtype_is_x16(dt) || ts_dtype_is_t16(dt)) { /* lane or tile order; W keeps them stored for the scalar kernel */
            uint8_t *l = malloc(rb * (size_t)N);
            if (ts_dtype_is_t16(dt)) ts_t16_repack_groups(ts_x16_stored(dt), l, W, K, 0, N / 16);
            else ts_x16_repack_rows(ts_x16_stored(dt), l, W, K, 0, N);
            stored = W, W = l;
        }
    } else { /* BF16 with exponents near 1: finite products */
        uint16_t *w = (uint16_t *)W;
        for (size_t i = 0; i < (size_t)N * (size_t)K; i++) w[i] = (uint16_t)(0x3c00 + urand() % 0x600 + (urand() & 1) * 0x8000);
    }
    for (int k = 0; k < K; k++) x[k] = frand();
    ts_cpu_pack_row(xp, x, K);
    ts_gemm_tile t1 = ts_cpu_gemm_default_tile(1, N, K);
    for (int c = 0; c < TS_PF_CANDS; c++) {
        y[c] = malloc(sizeof(float) * (size_t)N);
        ts_pf_set(kind, c);
        if (dt == TS_DTYPE_BF16) ts_cpu_gemv_f32_avx512(y[c], xp, (const uint16_t *)W, K, 0, N);
        else ts_cpu_gemm_q_avx512(y[c], N, xp, K, W, dt, K, 1, 0, N, t1);
    }
    if (dt == TS_DTYPE_BF16) ts_cpu_gemm_bf16_scalar(ys, N, xp, K, (const uint16_t *)W, K, 1, 0, N, t1);
    else ts_cpu_gemm_q_scalar(ys, N, xp, K, stored ? stored : W, ts_x16_stored(dt), K, 1, 0, N, t1);
    for (int c = 1; c < TS_PF_CANDS; c++)
        CHECK(!memcmp(y[c], y[0], sizeof(float) * (size_t)N), "kind %d, %d x %d: candidate %d (%s) changed bits", kind,
              N, K, c, ts_pf_candidate_name(kind, c));
    double e = rel_l2(y[0], ys, N);
    CHECK(e < (dt == TS_DTYPE_BF16 ? 1e-5 : 1e-4), "kind %d, %d x %d: rel_l2 %.3g against the scalar kernel", kind, N, K,
          e);
    for (int c = 0; c < TS_PF_CANDS; c++) free(y[c]);
    free(W), free(stored), free(x), free(xp), free(ys);
}

/* Batched decode is timed too (a server decodes only through it, and must reach a choice):
 * before any choice, a batched call of 256 KiB or more per thread adds its bytes to the
 * candidate its time slice ran. Runs before anything fixes a candidate. Q8_0 as stored, and in
 * tile order (the random bytes need no repacking: only the timing is checked). */
static void test_batch_timed(ts_dtype dt, ts_pf_kind kind) {
    const int N = 1024, K = 1024, S = 2;
    size_t rb = ts_gemm_row_bytes(dt, K), bb = rb / (size_t)(K / TS_QBLOCK);
    uint8_t *W = malloc(rb * (size_t)N);
    float *x = malloc(sizeof(float) * (size_t)S * K), *y = malloc(sizeof(float) * (size_t)S * N);
    for (size_t i = 0; i < rb * (size_t)N; i++) W[i] = (uint8_t)urand();
    for (size_t b = 0; b < (size_t)N * (size_t)(K / TS_QBLOCK); b++) W[b * bb] = 0, W[b * bb + 1] = 0x20;
    for (int i = 0; i < S * K; i++) x[i] = frand();
    ts_pf_report before, after;
    ts_pf_get_report(kind, &before);
    ts_cpu_gemv_batch_q_avx512(y, N, x, K, W, dt, K, S, 0, N, ts_cpu_gemm_default_tile(S, N, K));
    ts_pf_get_report(kind, &after);
    double added = 0;
    for (int c = 0; c < TS_PF_CANDS; c++) added += after.gbytes[c] - before.gbytes[c];
    CHECK(before.chosen < 0 && fabs(added * 1e9 - (double)rb * N) < 1, "%s: a batched call of %zu bytes added %.0f timed bytes",
          dt == TS_DTYPE_Q8_0T16 ? "Q8_0 in tile order" : dt == TS_DTYPE_Q4_0T16 ? "Q4_0 in tile order" : "Q8_0",
          rb * (size_t)N, added * 1e9);
    free(W), free(x), free(y);
}

int main(void) {
    test_decide();
    if (!ts_cpu_variant_supported(TS_CPU_AVX512BF16)) {
        th_isa_gap("AVX-512 BF16", "AVX-512 decode GEMVs under each prefetch candidate");
        return th_finish("test_cpu_prefetch");
    }
    /* the seed models' decode shapes (N rows of K): q/k/v and gate/up rows of K = 1024 or 2048,
     * o and down rows of K = 2048, 3072 or 8192 */
    static const int shapes[][2] = {{96, 1024}, {64, 2048}, {48, 3072}, {24, 8192}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) check_kind(TS_PF_BF16, shapes[i][0], shapes[i][1]);
    if (!ts_cpu_features_get()->avx512vnni) {
        th_isa_gap("AVX-512 VNNI", "AVX-512 Q8_0/Q4_0 decode GEMVs under each prefetch candidate");
        return th_finish("test_cpu_prefetch");
    }
    if (!getenv("TESSERA_PREFETCH"))
        test_batch_timed(TS_DTYPE_Q8_0, TS_PF_Q8), test_batch_timed(TS_DTYPE_Q8_0T16, TS_PF_Q8T16),
            test_batch_timed(TS_DTYPE_Q4_0T16, TS_PF_Q4T16);
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        check_kind(TS_PF_Q8, shapes[i][0], shapes[i][1]);
        check_kind(TS_PF_Q4, shapes[i][0], shapes[i][1]);
        check_kind(TS_PF_Q8X16, shapes[i][0], shapes[i][1]);
        check_kind(TS_PF_Q4X16, shapes[i][0], shapes[i][1]);
        if (shapes[i][0] % 16 == 0 && shapes[i][1] % 512 == 0) /* whole 16-row and 16-block groups only */
            check_kind(TS_PF_Q8T16, shapes[i][0], shapes[i][1]), check_kind(TS_PF_Q4T16, shapes[i][0], shapes[i][1]);
    }
    check_kind(TS_PF_Q8T16, 32, 8192); /* the down projection's K in whole groups */
    check_kind(TS_PF_Q4T16, 32, 8192);
    return th_finish("test_cpu_prefetch");
}
