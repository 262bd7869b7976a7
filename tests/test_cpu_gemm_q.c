/* The cpu target's Q8_0 / Q4_0 kernels (gemm.h), every variant this machine supports, against
 * the oracle's matmul on the same blocks (it dequantizes them exactly): decode (S = 1, every
 * output row) and prefill at the seed models' shapes (K = 1024, 2048, 3072, 8192; the LM head,
 * N = 151936, at S = 3) and at small odd N; column splits bit-identical; outputs outside
 * [n0, n1) untouched (NaN). On AVX-512 VNNI every prefill kernel (gemm.h ts_q_prefill) is
 * checked whichever the machine picks, also on activations with outlier channels. Also prints
 * what 8-bit activations (llama.cpp's Q8_0 x) would cost at the same shapes: why the decode
 * kernels quantize x to 16 bits. (A file of its own so ctest runs it beside the BF16 one.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "deploy/gates.h"
#include "io/dtype.h"
#include "target/cpu/cpu_target.h"
#include "target/cpu/gemm.h"
#include "target/ref/ref_kernels.h"
#include "tharness.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float frand(void) { return (float)(urand() * (1.0 / 4294967296.0)) * 2.0f - 1.0f; }

/* Random blocks: F16 scales 2^-10 .. 2^-5 (mantissa random), codes over their whole range
 * (Q8_0 including -128, which GGUF writers avoid but a file may hold). */
static uint8_t *random_q(ts_dtype dt, int N, int K) {
    size_t rb = ts_gemm_row_bytes(dt, K), bb = rb / (size_t)(K / TS_QBLOCK);
    uint8_t *w = malloc(rb * (size_t)N);
    for (size_t b = 0; b < (size_t)N * (size_t)(K / TS_QBLOCK); b++) {
        uint8_t *blk = w + b * bb;
        uint16_t h = (uint16_t)((5 + urand() % 6) << 10 | (urand() & 1023) | (urand() & 1) << 15);
        memcpy(blk, &h, 2);
        for (size_t j = 2; j < bb; j++) blk[j] = (uint8_t)urand();
    }
    return w;
}

static ts_tensor tensor_of(const uint8_t *w, ts_dtype dt) {
    ts_tensor t = {0};
    t.dtype = dt;
    t.data = w;
    return t;
}

/* The bound of each prefill kernel against the oracle (gemm.h), from what its arithmetic
 * rounds, measured at every shape below (the printed rel_l2):
 * - f32: FP32 rounding only, 1e-5 like every FP32 kernel (measured 2-3e-7);
 * - i16: 16-bit x per 32-block, the decode kernels' 1e-4 (measured 1.1-2.3e-5);
 * - bf16: x and the dequantized W each rounded to BF16 (2^-9 relative per element, whatever
 *   the distribution): measured 1.9-2.6e-3 (the BF16 _dp kernel: 1.5e-3 with BF16 W exact),
 *   bound 5e-3, half the phase-1 gate;
 * - i8: 8-bit x per 32-block, the phase-1 gate itself, 1e-2 (measured 2.8-5e-3 on uniform x).
 * Outlier activations (one channel in 256 at 30x, as real hidden states have) are bounded by the
 * same numbers except i8, whose error there (measured 1.1-1.3e-2) is printed, not gated. */
static double prefill_bound(ts_q_prefill k) {
    static const double b[TS_Q_PREFILL_COUNT] = {1e-5, 5e-3, 1e-2, 1e-4, 1e-4}; /* amx: i16's bits */
    return b[k];
}

/* y[:, n0:n1] of fn against the oracle within `bound` (decode: 16-bit x, gemm.h, 1e-4). x
 * uniform in [-1, 1], with outliers: every 256th channel 30x. gate: also the phase-1 gate. */
static double check_shape_x(ts_gemm_q_fn fn, const char *name, ts_dtype dt, const uint8_t *w, int S, int N, int K,
                            int n0, int n1, double bound, int outliers, int gate) {
    int ldx = K + 16, ldy = N, nw = n1 - n0;
    float *x = malloc(sizeof(float) * (size_t)S * K), *xp = malloc(sizeof(float) * (size_t)S * ldx);
    float *y = malloc(sizeof(float) * (size_t)S * ldy), *ref = malloc(sizeof(float) * (size_t)S * nw);
    float *got = malloc(sizeof(float) * (size_t)S * nw), *row = malloc(sizeof(float) * TS_REF_ROW_SCRATCH(K));
    for (size_t i = 0; i < (size_t)S * ldx; i++) xp[i] = NAN;
    for (int s = 0; s < S; s++) {
        for (int k = 0; k < K; k++) x[(size_t)s * K + k] = frand() * (outliers && k % 256 == 7 ? 30.0f : 1.0f);
        ts_cpu_pack_row(xp + (size_t)s * ldx, x + (size_t)s * K, K);
    }
    for (size_t i = 0; i < (size_t)S * ldy; i++) y[i] = NAN;
    ts_tensor W = tensor_of(w + (size_t)n0 * ts_gemm_row_bytes(dt, K), dt);
    ts_ref_matmul(ref, x, &W, NULL, S, nw, K, row);
    fn(y, ldy, xp, ldx, w, dt, K, S, n0, n1, ts_cpu_gemm_default_tile(S, N, K));
    int outside = 0;
    for (int s = 0; s < S; s++)
        for (int n = 0; n < N; n++) {
            float v = y[(size_t)s * ldy + n];
            if (n >= n0 && n < n1) got[(size_t)s * nw + n - n0] = v;
            else outside += !isnan(v);
        }
    ts_metrics m;
    ts_metrics_compute(got, ref, S, nw, &m);
    int pass = m.nonfinite == 0 && (bound <= 0 || m.rel_l2 <= bound) && !outside &&
               (!gate || (ts_threshold_pass(ts_threshold_find("phase1", "rel_l2"), m.rel_l2) &&
                          ts_threshold_pass(ts_threshold_find("phase1", "pearson"), m.pearson)));
    printf("  %-16s %-4s S=%-4d N=%-6d K=%-5d rows [%d,%d)%s  rel_l2 %.2e  %s\n", name, ts_dtype_name(dt), S, N, K, n0,
           n1, outliers ? " x with outliers" : "", m.rel_l2, pass ? (bound > 0 ? "ok" : "(not gated)") : "FAIL");
    CHECK(pass, "%s %s S=%d N=%d K=%d [%d,%d)%s: rel_l2 %.3e (bound %g) nonfinite %lld outside %d", name,
          ts_dtype_name(dt), S, N, K, n0, n1, outliers ? " outliers" : "", m.rel_l2, bound, (long long)m.nonfinite,
          outside);
    free(x), free(xp), free(y), free(ref), free(got), free(row);
    return m.rel_l2;
}

static void check_shape(ts_gemm_q_fn fn, const char *name, ts_dtype dt, const uint8_t *w, int S, int N, int K, int n0,
                        int n1, double prefill) {
    check_shape_x(fn, name, dt, w, S, N, K, n0, n1, S == 1 ? 1e-4 : prefill, 0, 1);
}

/* Each AVX-512 prefill kernel as a ts_gemm_q_fn (S >= 1 all through the kernel). */
#define PREFILL_FN(K, E)                                                                                       \
    static void prefill_##K(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int Kd, int S, \
                            int n0, int n1, ts_gemm_tile t) {                                                  \
        (void)t;                                                                                               \
        ts_cpu_gemm_q_prefill_avx512(E, y, ldy, xp, ldx, W, dt, Kd, S, n0, n1);                                \
    }
PREFILL_FN(f32, TS_Q_PREFILL_F32)
PREFILL_FN(bf16, TS_Q_PREFILL_BF16)
PREFILL_FN(i8, TS_Q_PREFILL_I8)
PREFILL_FN(i16, TS_Q_PREFILL_I16)
#undef PREFILL_FN
/* the AMX kernel itself at every S (the dispatch may leave small S to I16) */
static void prefill_amx(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S, int n0,
                        int n1, ts_gemm_tile t) {
    (void)t;
    ts_cpu_gemm_q_amx(y, ldy, xp, ldx, W, dt, K, S, n0, n1);
}
static const ts_gemm_q_fn k_prefill[TS_Q_PREFILL_COUNT] = {prefill_f32, prefill_bf16, prefill_i8, prefill_i16,
                                                           prefill_amx};

/* Any split of the columns (thread shares) gives the same bits, decode and prefill. */
static void check_splits(ts_gemm_q_fn fn, const char *name, ts_dtype dt, int S, int N, int K) {
    uint8_t *w = random_q(dt, N, K);
    float *xp = malloc(sizeof(float) * (size_t)S * K), *x = malloc(sizeof(float) * K);
    float *a = malloc(sizeof(float) * (size_t)S * N), *b = malloc(sizeof(float) * (size_t)S * N);
    for (int s = 0; s < S; s++) {
        for (int k = 0; k < K; k++) x[k] = frand();
        ts_cpu_pack_row(xp + (size_t)s * K, x, K);
    }
    ts_gemm_tile t = ts_cpu_gemm_default_tile(S, N, K);
    fn(a, N, xp, K, w, dt, K, S, 0, N, t);
    int cuts[] = {0, 5, 37, 64, 100, N};
    for (int i = 0; i + 1 < 6; i++) fn(b, N, xp, K, w, dt, K, S, cuts[i], cuts[i + 1], t);
    int same = !memcmp(a, b, sizeof(float) * (size_t)S * N);
    printf("  %-8s %-4s splits S=%d N=%d K=%d: column shares %s\n", name, ts_dtype_name(dt), S, N, K,
           same ? "bit-identical" : "DIFFER");
    CHECK(same, "%s %s S=%d: column splits differ", name, ts_dtype_name(dt), S);
    free(w), free(xp), free(x), free(a), free(b);
}

/* Decode (S = 1) against the scalar kernel on the same x: both form the same exact int32 block
 * sums and the same d_w * d_x, so only the FP32 summation order differs (measured ~1e-7); a
 * correction term or a scale in the wrong lane shows as 1e-5 and more, which the oracle's bound
 * (1e-4, set by the 16-bit x) would not catch. */
static void check_decode_vs_scalar(ts_gemm_q_fn fn, const char *name, ts_dtype dt, int N, int K) {
    /* its own draws: the other checks keep the data they were written against (the prefill
     * checks at N = 3, K = 32 judge rel_l2 over 6 outputs, which some draws push past the bounds) */
    uint64_t saved = rng;
    rng = 0x2545f4914f6cdd1dull ^ (uint64_t)(N * 131 + K);
    uint8_t *w = random_q(dt, N, K);
    float *x = malloc(sizeof(float) * K), *xp = malloc(sizeof(float) * K);
    float *a = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N);
    for (int k = 0; k < K; k++) x[k] = frand() * (k % 256 == 7 ? 30.0f : 1.0f);
    ts_cpu_pack_row(xp, x, K);
    ts_gemm_tile t = ts_cpu_gemm_default_tile(1, N, K);
    fn(a, N, xp, K, w, dt, K, 1, 0, N, t);
    ts_cpu_gemm_q_scalar(b, N, xp, K, w, dt, K, 1, 0, N, t);
    ts_metrics m;
    ts_metrics_compute(a, b, 1, N, &m);
    printf("  %-16s %-4s decode N=%-5d K=%-5d against the scalar kernel: rel_l2 %.2e\n", name, ts_dtype_name(dt), N, K,
           m.rel_l2);
    CHECK(m.nonfinite == 0 && m.rel_l2 <= 1e-6, "%s %s decode N=%d K=%d: rel_l2 %.3e against the scalar kernel", name,
          ts_dtype_name(dt), N, K, m.rel_l2);
    free(w), free(x), free(xp), free(a), free(b);
    rng = saved;
}

/* The same variant's x quantizer against the scalar one: the same bits (gemm.h). */
static void check_quantizer(void) {
    int K = 2048;
    float *x = malloc(sizeof(float) * K), *xp = malloc(sizeof(float) * K);
    int16_t *q0 = malloc(sizeof(int16_t) * K), *q1 = malloc(sizeof(int16_t) * K);
    float d0[2048 / TS_QBLOCK], d1[2048 / TS_QBLOCK];
    for (int k = 0; k < K; k++) x[k] = frand() * (k % 97 == 0 ? 40.0f : 1.0f) * (k >= 64 && k < 96 ? 0.0f : 1.0f);
    ts_cpu_pack_row(xp, x, K);
    ts_cpu_quantize_x_scalar((ts_gemm_qx){q0, d0}, xp, K);
    int ok = 1;
    for (int k = 0; k < K; k++) ok &= fabsf(q0[k] * d0[k / TS_QBLOCK] - x[k]) <= d0[k / TS_QBLOCK] * 0.51f; /* + x * (1/d) rounding */
    CHECK(ok && d0[2] == 0.0f, "scalar x quantizer: an element off by more than half a step");
    if (ts_cpu_variant_supported(TS_CPU_AVX2)) {
        ts_cpu_quantize_x_avx2((ts_gemm_qx){q1, d1}, xp, K);
        CHECK(!memcmp(q0, q1, sizeof(int16_t) * K) && !memcmp(d0, d1, sizeof d0), "AVX2 x quantizer differs from scalar");
    }
    if (ts_cpu_variant_supported(TS_CPU_AVX512BF16) && ts_cpu_features_get()->avx512vnni) {
        ts_cpu_quantize_x_avx512((ts_gemm_qx){q1, d1}, xp, K);
        CHECK(!memcmp(q0, q1, sizeof(int16_t) * K) && !memcmp(d0, d1, sizeof d0), "AVX-512 x quantizer differs from scalar");
    }
    printf("  x quantizer: within half a step of x, AVX2 and AVX-512 bit-identical to scalar\n");
    free(x), free(xp), free(q0), free(q1);
}

/* What 8-bit activations (one F32 scale per 32-block, q = round(x * 127 / amax), as llama.cpp
 * quantizes x for Q8_0 / Q4_0 dot products) would cost against the oracle, computed exactly
 * in double otherwise; and the same with 16 bits. Informational: the reason for 16. */
static double act_error(ts_dtype dt, int N, int K, int levels, int outliers) {
    uint8_t *w = random_q(dt, N, K);
    float *x = malloc(sizeof(float) * K), *wr = malloc(sizeof(float) * K);
    double *xq = malloc(sizeof(double) * K), num = 0, den = 0;
    for (int k = 0; k < K; k++) x[k] = frand() * (outliers && k % 256 == 7 ? 30.0f : 1.0f);
    for (int b = 0; b < K; b += TS_QBLOCK) {
        float amax = 0;
        for (int k = b; k < b + TS_QBLOCK; k++) amax = fmaxf(amax, fabsf(x[k]));
        double d = amax / levels;
        for (int k = b; k < b + TS_QBLOCK; k++) xq[k] = d > 0 ? nearbyint(x[k] / d) * d : 0;
    }
    for (int n = 0; n < N; n++) {
        ts_dtype_to_f32(dt, w, (size_t)n * K, (size_t)K, wr);
        double e = 0, r = 0;
        for (int k = 0; k < K; k++) e += (double)wr[k] * xq[k], r += (double)wr[k] * x[k];
        num += (e - r) * (e - r), den += r * r;
    }
    free(w), free(x), free(wr), free(xq);
    return sqrt(num / den);
}

/* One prefill kernel (or a variant's own choice) over the shapes: real ones at S = 128 (two
 * windows), 5 and 2; the small and odd ones at every small S; column splits. */
static void check_prefill(ts_gemm_q_fn fn, const char *name, ts_dtype dt, double bound) {
    static const struct {
        int N, K;
    } real[] = {{3072, 1024}, {1024, 2048}, {2048, 2048}, {8192, 2048}, {1024, 3072}, {2048, 8192}};
    for (size_t i = 0; i < sizeof real / sizeof real[0]; i++) {
        int N = real[i].N, K = real[i].K;
        uint8_t *w = random_q(dt, N, K);
        check_shape(fn, name, dt, w, 128, N, K, 0, 64, bound);
        check_shape(fn, name, dt, w, 128, N, K, N / 2 - 13, N / 2 + 51, bound);
        check_shape(fn, name, dt, w, 5, N, K, N - 61, N, bound);
        check_shape(fn, name, dt, w, 2, N, K, N / 3 + 1, N / 3 + 101, bound);
        free(w);
    }
    /* small and odd N and K (one block, two, an odd count), every small S */
    static const struct {
        int N, K;
    } odd[] = {{3, 32}, {37, 64}, {67, 96}, {5, 2080}, {70, 288}};
    static const int ss[] = {2, 3, 7, 13, 40};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        uint8_t *w = random_q(dt, odd[i].N, odd[i].K);
        for (size_t j = 0; j < sizeof ss / sizeof ss[0]; j++) {
            check_shape(fn, name, dt, w, ss[j], odd[i].N, odd[i].K, 0, odd[i].N, bound);
            if (odd[i].N > 8) check_shape(fn, name, dt, w, ss[j], odd[i].N, odd[i].K, 1, odd[i].N - 2, bound);
        }
        free(w);
    }
    check_splits(fn, name, dt, 40, 160, 288);
    check_splits(fn, name, dt, 7, 200, 1024);
}

/* AMX against I16 bit for bit: y over all S x N (NaN outside [n0, n1) in both), on the stored
 * rows w, and (r not NULL) AMX on the same rows in 16-block lane order r against them too: the
 * packs read either layout. */
static void check_amx_bits(ts_dtype dt, const uint8_t *w, const uint8_t *r, int S, int N, int K, int n0, int n1) {
    int ldx = K + 16;
    float *xp = malloc(sizeof(float) * (size_t)S * ldx), *x = malloc(sizeof(float) * K);
    float *a = malloc(sizeof(float) * (size_t)S * N), *b = malloc(sizeof(float) * (size_t)S * N);
    for (int s = 0; s < S; s++) {
        for (int k = 0; k < K; k++) x[k] = frand() * (k % 256 == 7 ? 30.0f : 1.0f) * (k >= 64 && k < 96 ? 0.0f : 1.0f);
        ts_cpu_pack_row(xp + (size_t)s * ldx, x, K);
    }
    for (size_t i = 0; i < (size_t)S * N; i++) a[i] = b[i] = NAN;
    prefill_i16(a, N, xp, ldx, w, dt, K, S, n0, n1, (ts_gemm_tile){0});
    prefill_amx(b, N, xp, ldx, w, dt, K, S, n0, n1, (ts_gemm_tile){0});
    int same = !memcmp(a, b, sizeof(float) * (size_t)S * N), lanes = 1;
    if (r) {
        ts_dtype x16 = dt == TS_DTYPE_Q8_0 ? TS_DTYPE_Q8_0X16 : TS_DTYPE_Q4_0X16;
        for (size_t i = 0; i < (size_t)S * N; i++) b[i] = NAN;
        prefill_amx(b, N, xp, ldx, r, x16, K, S, n0, n1, (ts_gemm_tile){0});
        lanes = !memcmp(a, b, sizeof(float) * (size_t)S * N);
        CHECK(lanes, "amx %s S=%d N=%d K=%d [%d,%d): on the lane order differs from i16 on stored rows",
              ts_dtype_name(dt), S, N, K, n0, n1);
    }
    printf("  amx %-4s S=%-4d N=%-6d K=%-5d rows [%d,%d): %s i16%s\n", ts_dtype_name(dt), S, N, K, n0, n1,
           same ? "bit-identical to" : "DIFFERS from", !r ? "" : lanes ? " (lane order too)" : " (lane order DIFFERS)");
    CHECK(same, "amx %s S=%d N=%d K=%d [%d,%d): differs from i16", ts_dtype_name(dt), S, N, K, n0, n1);
    free(xp), free(x), free(a), free(b);
}

/* Q8_0 and Q4_0 in tile order (gemm.h, TS_DTYPE_Q8_0T16 / _Q4_0T16; chosen where the prefill runs
 * AMX or I16): the layout round-trips group by group and row by row, and the decode, the batched
 * decode and every prefill kind (AMX where usable: its few-row kernel below 7 rows, its tiles as
 * they lie from there, x in passes at S = 300; I16: its few-row kernel below 16 rows, its panels
 * packed from the tiles; the other kinds, and shares that start or end inside a group, through
 * each group put back) give the stored rows' bits, for all rows and for shares that start and end
 * inside a 16-row group or leave a lone last group; Q4_0 with and without GFNI's nibble split. */
static void check_t16(ts_dtype st) {
    const ts_dtype tt = ts_t16_of(st);
    static const struct {
        int N, K;
    } shapes[] = {{2048, 2048}, {1024, 3072}, {16, 512}, {48, 1024}, {64, 8192}, {80, 4608}};
    static const int Ss[] = {1, 2, 3, 5, 6, 7, 8, 13, 16, 17, 32, 40, 128, 300}; /* 6 | 7: few-row | tiles */
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int N = shapes[i].N, K = shapes[i].K;
        size_t rb = ts_gemm_row_bytes(st, K);
        CHECK(ts_gemm_row_bytes(tt, K) == rb, "row bytes differ");
        uint8_t *w = random_q(st, N, K), *t = malloc(rb * (size_t)N), *back = malloc(16 * rb);
        ts_t16_repack_groups(st, t, w, K, 0, N / 16);
        int groups_ok = 1, rows_ok = 1;
        float *a = malloc(sizeof(float) * K), *b = malloc(sizeof(float) * K);
        for (int g = 0; g < N / 16; g++) {
            ts_t16_group_stored(tt, t, K, g, back);
            groups_ok &= !memcmp(back, w + (size_t)g * 16 * rb, 16 * rb);
        }
        for (int n = 0; n < N; n++) {
            ts_t16_row_to_f32(tt, t, K, n, a);
            ts_dtype_to_f32(st, w, (size_t)n * K, (size_t)K, b);
            rows_ok &= !memcmp(a, b, sizeof(float) * K);
        }
        CHECK(groups_ok, "N=%d K=%d: a group of the tile order is not the stored rows", N, K);
        CHECK(rows_ok, "N=%d K=%d: a row of the tile order dequantizes differently", N, K);
        free(a), free(b), free(back);
        int same_all = 1;
        for (size_t si = 0; si < sizeof Ss / sizeof Ss[0]; si++) {
            int S = Ss[si];
            if ((N >= 1024 && S != 1 && S != 2 && S != 17) || (S == 300 && N != 80)) continue; /* big shapes: three S */
            float *xp = malloc(sizeof(float) * (size_t)S * K), *x = malloc(sizeof(float) * K);
            float *y0 = malloc(sizeof(float) * (size_t)S * N), *y1 = malloc(sizeof(float) * (size_t)S * N);
            for (int s = 0; s < S; s++) {
                for (int k = 0; k < K; k++) x[k] = frand() * (k % 256 == 7 ? 30.0f : 1.0f);
                ts_cpu_pack_row(xp + (size_t)s * K, x, K);
            }
            ts_gemm_tile tl = ts_cpu_gemm_default_tile(S, N, K);
            /* all rows; a share inside groups at both ends; the last 16 rows alone (a lone group) */
            const int cuts[3][2] = {{0, N}, {N > 16 ? 5 : 3, N - 3}, {N - 16, N}};
            for (int c = 0; c < 3; c++) {
                int a0 = cuts[c][0], a1 = cuts[c][1];
                /* kind -1: decode, or the batched decode up to its TS_GEMM_BATCH_MAX rows */
                for (int kind = S <= TS_GEMM_BATCH_MAX ? -1 : 0; kind < (S >= 2 ? TS_Q_PREFILL_COUNT : 0); kind++) {
                    for (size_t e = 0; e < (size_t)S * N; e++) y0[e] = y1[e] = -7.0f;
                    if (kind < 0) { /* the variant's path: decode, or the batched decode for S > 1 */
                        ts_cpu_gemv_batch_q_avx512(y0, N, xp, K, w, st, K, S, a0, a1, tl);
                        ts_cpu_gemv_batch_q_avx512(y1, N, xp, K, t, tt, K, S, a0, a1, tl);
                    } else {
                        ts_cpu_gemm_q_prefill_avx512((ts_q_prefill)kind, y0, N, xp, K, w, st, K, S, a0, a1);
                        ts_cpu_gemm_q_prefill_avx512((ts_q_prefill)kind, y1, N, xp, K, t, tt, K, S, a0, a1);
                    }
                    int same = !memcmp(y0, y1, sizeof(float) * (size_t)S * N), kept = 1;
                    for (int s = 0; s < S; s++)
                        for (int n = 0; n < N; n++)
                            if (n < a0 || n >= a1) kept &= y1[(size_t)s * N + n] == -7.0f;
                    CHECK(same, "N=%d K=%d S=%d rows [%d,%d) %s: tile order differs from stored", N, K, S, a0, a1,
                          kind < 0 ? (S == 1 ? "decode" : "batched decode") : ts_q_prefill_name((ts_q_prefill)kind));
                    CHECK(kept, "N=%d K=%d S=%d rows [%d,%d) %s: tile order wrote outside its rows", N, K, S, a0, a1,
                          kind < 0 ? "decode" : ts_q_prefill_name((ts_q_prefill)kind));
                    same_all &= same && kept;
                }
            }
            free(xp), free(x), free(y0), free(y1);
        }
        printf("  avx512 %s in tile order N=%-5d K=%-5d: groups %s, rows %s, decode and every kernel %s\n",
               st == TS_DTYPE_Q8_0 ? "q8_0" : ts_cpu_q_gfni() ? "q4_0 (GFNI)" : "q4_0", N, K,
               groups_ok ? "round-trip" : "DIFFER", rows_ok ? "dequantize alike" : "DIFFER",
               same_all ? "bit-identical to stored" : "DIFFER");
        free(w), free(t);
    }
}

/* `test_cpu_gemm_q amx`: the AMX prefill (a ctest of its own, skipped where AMX is not
 * usable; the tile order's AMX kernel runs in the default mode's check_t16). Bit-identical to I16 at the shapes check_prefill uses and more S (one and several
 * 16-row tiles, K past one prepared chunk, K blocks cut short, column windows cut inside a
 * 32-row tile; x prepared whole and, at S = 128-140 with K = 4192 and 8192, a chunk at a
 * time), so I16's oracle checks of the default mode hold for it; then the oracle at the seed
 * shapes, with outlier channels, on the LM head, and column splits. (The odd shapes' few
 * outputs are not re-drawn against the oracle here: their rel_l2 over 6-20 values is I16's,
 * checked at its own draws.) */
static int amx_main(void) {
    if (!ts_cpu_amx_usable()) {
        th_isa_gap("AMX-INT8 (or the kernel's permission)", "AMX prefill kernel");
        return th_finish("test_cpu_gemm_q amx");
    }
    static const ts_dtype dts[] = {TS_DTYPE_Q8_0, TS_DTYPE_Q4_0};
    static const struct {
        int N, K;
    } shapes[] = {{3072, 1024}, {1024, 2048}, {2048, 2048}, {8192, 2048}, {1024, 3072}, {2048, 8192},
                  {3, 32},      {37, 64},     {67, 96},     {5, 2080},    {70, 288},
                  /* whole 16-block groups and a tail of 9, 2 and 2 blocks (the lane order keeps
                   * a tail as stored) */
                  {45, 800},    {33, 1600},   {40, 1088},
                  /* K chunks of AMX_KC with whole groups and a tail: 4192 = 1024 x 4 + 3 blocks;
                   * 2624: 2 chunks, the second 1 group + 2 blocks (gemm_q_amx.c, amx_pack_unit);
                   * at S = 128 and 140 x goes a chunk at a time (AMX_WHOLE_X) over 3 row blocks,
                   * the last short, and a short last chunk */
                  {19, 4192},   {21, 2624},   {70, 4192}};
    static const int ss[] = {1, 2, 3, 5, 7, 13, 15, 16, 17, 40, 128, 140};
    for (size_t d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            int N = shapes[i].N, K = shapes[i].K;
            uint8_t *w = random_q(dts[d], N, K), *r = malloc(ts_gemm_row_bytes(dts[d], K) * (size_t)N);
            ts_x16_repack_rows(dts[d], r, w, K, 0, N);
            for (size_t j = 0; j < sizeof ss / sizeof ss[0]; j++) {
                if (N >= 1024 && ss[j] != 2 && ss[j] != 17 && ss[j] != 128) continue; /* big shapes: three S */
                check_amx_bits(dts[d], w, r, ss[j], N, K, 0, N);
                if (N > 8) check_amx_bits(dts[d], w, r, ss[j], N, K, N / 3 + 1, N - 2);
            }
            free(r);
            if (N >= 1024) { /* the oracle, as check_prefill */
                check_shape(prefill_amx, "avx512 amx", dts[d], w, 128, N, K, 0, 64, prefill_bound(TS_Q_PREFILL_AMX));
                check_shape(prefill_amx, "avx512 amx", dts[d], w, 128, N, K, N / 2 - 13, N / 2 + 51,
                            prefill_bound(TS_Q_PREFILL_AMX));
                check_shape(prefill_amx, "avx512 amx", dts[d], w, 5, N, K, N - 61, N, prefill_bound(TS_Q_PREFILL_AMX));
            }
            free(w);
        }
    for (size_t d = 0; d < 2; d++) {
        uint8_t *w = random_q(dts[d], 2048, 2048);
        check_shape_x(prefill_amx, "avx512 amx", dts[d], w, 64, 2048, 2048, 0, 256, prefill_bound(TS_Q_PREFILL_AMX), 1, 1);
        free(w);
        w = random_q(dts[d], 151936, 1024);
        check_shape(prefill_amx, "avx512 amx", dts[d], w, 3, 151936, 1024, 0, 151936, prefill_bound(TS_Q_PREFILL_AMX));
        free(w);
        check_splits(prefill_amx, "avx512 amx", dts[d], 40, 160, 288);
        check_splits(prefill_amx, "avx512 amx", dts[d], 7, 200, 1024);
    }
    return th_finish("test_cpu_gemm_q amx");
}

/* Q8_0 / Q4_0 in 16-block lane order (gemm.h, the cpu target's copies for these kernels): the
 * layout round-trips block by block and row by row, and every AVX-512 kernel on it (decode,
 * batched decode, each prefill kernel, column shares) gives the bits it gives on the stored rows. */
static void check_x16(ts_dtype dt) {
    ts_dtype x16 = dt == TS_DTYPE_Q8_0 ? TS_DTYPE_Q8_0X16 : TS_DTYPE_Q4_0X16;
    uint64_t saved = rng; /* its own draws: the checks after it keep the data they were written against */
    rng = 0x51afd7ed558ccd3dull;
    static const struct {
        int N, K;
    } shapes[] = {{2048, 2048}, {1024, 3072}, {37, 2080}, {70, 288}, {5, 512}, {3, 32}, {45, 800}, {40, 1088},
                  {64, 1024}, {24, 8192}, {9, 608}, {13, 4192}, {11, 2624}, {80, 4192}};
    /* {80, 4192} at S = 128: the panels' K blocks outer over two panels (the second of 16 rows),
     * a group at a time, then the tail. From {64, 1024}: the few-row prefill at Qwen3's K, at Llama's down projection (4 K ranges),
     * a last K block of 3, 2 K ranges with a tail of 3 blocks, and a last range of one group with
     * a tail of 2 (gemm_q_avx512.c, i16_blocks) */
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int N = shapes[i].N, K = shapes[i].K, nb = K / TS_QBLOCK;
        size_t rb = ts_gemm_row_bytes(dt, K), bb = rb / (size_t)nb;
        CHECK(ts_gemm_row_bytes(x16, K) == rb, "row bytes differ");
        uint8_t *w = random_q(dt, N, K), *r = malloc(rb * (size_t)N);
        ts_x16_repack_rows(dt, r, w, K, 0, N);
        int blocks_ok = 1, rows_ok = 1;
        float *a = malloc(sizeof(float) * K), *b = malloc(sizeof(float) * K);
        for (int n = 0; n < N; n++) {
            for (int k = 0; k < nb; k++) {
                uint8_t blk[2 + TS_QBLOCK];
                ts_x16_block(x16, r + (size_t)n * rb, K, k, blk);
                blocks_ok &= !memcmp(blk, w + (size_t)n * rb + (size_t)k * bb, bb);
            }
            ts_x16_row_to_f32(x16, r + (size_t)n * rb, K, a);
            ts_dtype_to_f32(dt, w, (size_t)n * K, (size_t)K, b);
            rows_ok &= !memcmp(a, b, sizeof(float) * K);
        }
        CHECK(blocks_ok, "N=%d K=%d: a block of the lane order is not the stored block", N, K);
        CHECK(rows_ok, "N=%d K=%d: a row of the lane order dequantizes differently", N, K);
        free(a), free(b);
        /* 5, 8, 17, 32: the batched decode's pairs of x rows with an odd one, and its chunks of 4 x
         * rows (an odd last W row); 32 = TS_GEMM_BATCH_MAX */
        /* 2-14: the few-row prefill (gemm_q_avx512.c) where the kind and rule give it those rows
         * (the I16 kind below 16 rows), from 6-9 the AMX kind's tiles (amx_rows_x16) */
        /* 128 where S * K > 2^19 (K = 4192, 8192: small N): the panels' K blocks outer
         * (gemm_avx512.c), for lane order a group's K blocks at a time, with and without a tail */
        static const int Ss[] = {1, 2, 3, 5, 6, 8, 11, 14, 17, 32, 64, 128};
        int same_all = 1;
        for (size_t si = 0; si < sizeof Ss / sizeof Ss[0]; si++) {
            int S = Ss[si];
            if (S == 128 && (long)S * K <= (1L << 19)) continue;
            float *xp = malloc(sizeof(float) * (size_t)S * K), *x = malloc(sizeof(float) * K);
            float *y0 = malloc(sizeof(float) * (size_t)S * N), *y1 = malloc(sizeof(float) * (size_t)S * N);
            for (int s = 0; s < S; s++) {
                for (int k = 0; k < K; k++) x[k] = frand() * (k % 256 == 7 ? 30.0f : 1.0f);
                ts_cpu_pack_row(xp + (size_t)s * K, x, K);
            }
            ts_gemm_tile t = ts_cpu_gemm_default_tile(S, N, K);
            int n0 = N > 8 ? 1 : 0, n1 = N > 8 ? N - 2 : N; /* a column share too */
            /* the variant's own path: decode at S = 1, its prefill kernel above */
            for (int cut = 0; cut < 2; cut++) {
                int a0 = cut ? n0 : 0, a1 = cut ? n1 : N;
                memset(y0, 0, sizeof(float) * (size_t)S * N), memset(y1, 0, sizeof(float) * (size_t)S * N);
                ts_cpu_gemm_q_avx512(y0, N, xp, K, w, dt, K, S, a0, a1, t);
                ts_cpu_gemm_q_avx512(y1, N, xp, K, r, x16, K, S, a0, a1, t);
                int same = !memcmp(y0, y1, sizeof(float) * (size_t)S * N);
                CHECK(same, "N=%d K=%d S=%d cols [%d,%d): lane order differs from stored", N, K, S, a0, a1);
                same_all &= same;
            }
            /* every prefill kernel (AMX: its tiles where this machine has them, else I16), and
             * the batched decode */
            for (int k = 0; k < TS_Q_PREFILL_COUNT && S >= 2; k++)
                for (int cut = 0; cut < 2; cut++) { /* all rows, then a share (the few-row blocks start at its first row) */
                    int a0 = cut ? n0 : 0, a1 = cut ? n1 : N;
                    memset(y0, 0, sizeof(float) * (size_t)S * N), memset(y1, 0, sizeof(float) * (size_t)S * N);
                    ts_cpu_gemm_q_prefill_avx512((ts_q_prefill)k, y0, N, xp, K, w, dt, K, S, a0, a1);
                    ts_cpu_gemm_q_prefill_avx512((ts_q_prefill)k, y1, N, xp, K, r, x16, K, S, a0, a1);
                    int same = !memcmp(y0, y1, sizeof(float) * (size_t)S * N);
                    CHECK(same, "N=%d K=%d S=%d cols [%d,%d) prefill %s: lane order differs from stored", N, K, S, a0, a1,
                          ts_q_prefill_name((ts_q_prefill)k));
                    same_all &= same;
                }
            for (int cut = 0; cut < 2 && S <= TS_GEMM_BATCH_MAX; cut++) { /* all rows, then a share */
                int a0 = cut ? n0 : 0, a1 = cut ? n1 : N;
                for (size_t e = 0; e < (size_t)S * N; e++) y0[e] = y1[e] = -7.0f; /* outside the share: untouched */
                ts_cpu_gemv_batch_q_avx512(y0, N, xp, K, w, dt, K, S, a0, a1, t);
                ts_cpu_gemv_batch_q_avx512(y1, N, xp, K, r, x16, K, S, a0, a1, t);
                int same = !memcmp(y0, y1, sizeof(float) * (size_t)S * N), kept = 1;
                for (int s = 0; s < S; s++)
                    for (int n = 0; n < N; n++)
                        if (n < a0 || n >= a1) kept &= y1[(size_t)s * N + n] == -7.0f;
                CHECK(same, "N=%d K=%d S=%d rows [%d,%d) batched decode: lane order differs from stored", N, K, S, a0, a1);
                CHECK(kept, "N=%d K=%d S=%d rows [%d,%d) batched decode wrote outside its rows", N, K, S, a0, a1);
                same_all &= same && kept;
            }
            free(xp), free(x), free(y0), free(y1);
        }
        printf("  avx512 %s in 16-block lane order%s N=%-5d K=%-5d: blocks %s, rows %s, every kernel %s\n", ts_dtype_name(dt),
               dt != TS_DTYPE_Q4_0 ? "" : ts_cpu_q_gfni() ? " (GFNI nibbles)" : " (shifted nibbles)", N, K,
               blocks_ok ? "round-trip" : "DIFFER", rows_ok ? "dequantize alike" : "DIFFER",
               same_all ? "bit-identical to stored" : "DIFFERS");
        free(w), free(r);
    }
    rng = saved;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "amx")) return amx_main();
    static const struct {
        int N, K;
    } real[] = {{2048, 2048}, {8192, 2048}, {2048, 8192}};
    static const ts_dtype dts[] = {TS_DTYPE_Q8_0, TS_DTYPE_Q4_0};
    printf("activation quantization alone against exact FP32 x (GEMV rel_l2 over the first 256 rows):\n");
    for (int i = 0; i < 3; i++)
        for (int o = 0; o < 2; o++)
            printf("  Q8_0 N=%-5d K=%-5d x %-22s 8-bit %.2e  16-bit %.2e\n", real[i].N, real[i].K,
                   o ? "uniform, 1/256 at 30x" : "uniform [-1, 1]", act_error(TS_DTYPE_Q8_0, 256, real[i].K, 127, o),
                   act_error(TS_DTYPE_Q8_0, 256, real[i].K, 32767, o));
    check_quantizer();
    for (int v = 0; v < TS_CPU_VARIANT_COUNT; v++) {
        if (!ts_cpu_variant_supported((ts_cpu_variant)v)) {
            th_isa_gap(ts_cpu_variant_name((ts_cpu_variant)v), "kernel variant");
            continue;
        }
        ts_gemm_q_fn fn = ts_cpu_gemm_q_for((ts_cpu_variant)v);
        const char *name = ts_cpu_variant_name((ts_cpu_variant)v);
        /* the variant's own prefill: FP32 on dequantized W, or on AVX-512 VNNI the kernel it picks */
        double bound = fn == ts_cpu_gemm_q_avx512 ? prefill_bound(ts_cpu_avx512_q_prefill()) : 1e-5;
        printf("%s: %s\n", name, ts_cpu_gemm_q_name((ts_cpu_variant)v));
        for (size_t d = 0; d < 2; d++) {
            ts_dtype dt = dts[d];
            /* decode: every row at three real shapes (the scalar variant samples a window: it is slow) */
            for (size_t i = 0; i < sizeof real / sizeof real[0]; i++) {
                int N = real[i].N, K = real[i].K;
                uint8_t *w = random_q(dt, N, K);
                if (v == TS_CPU_SCALAR) check_shape(fn, name, dt, w, 1, N, K, N / 2 - 37, N / 2 + 29, bound);
                else check_shape(fn, name, dt, w, 1, N, K, 0, N, bound);
                free(w);
            }
            static const struct {
                int N, K;
            } odd[] = {{3, 32}, {37, 64}, {67, 96}, {5, 2080}, {70, 288}};
            for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
                uint8_t *w = random_q(dt, odd[i].N, odd[i].K);
                check_shape(fn, name, dt, w, 1, odd[i].N, odd[i].K, 0, odd[i].N, bound);
                if (odd[i].N > 8) check_shape(fn, name, dt, w, 1, odd[i].N, odd[i].K, 1, odd[i].N - 2, bound);
                free(w);
            }
            check_splits(fn, name, dt, 1, 160, 2048);
            if (v != TS_CPU_SCALAR) {
                check_decode_vs_scalar(fn, name, dt, 2048, 2048);
                check_decode_vs_scalar(fn, name, dt, 1024, 3072);
                check_decode_vs_scalar(fn, name, dt, 37, 2080); /* 4 groups of 16 blocks and one more */
            }
            check_prefill(fn, name, dt, bound);
        }
        if (fn != ts_cpu_gemm_q_avx512) continue;
        check_x16(TS_DTYPE_Q4_0); /* its high nibbles by GFNI where the CPU has it */
        if (ts_cpu_q_gfni()) { /* and the shift-and-mask form AVX-512 cores without GFNI run */
            ts_cpu_q_gfni_set(0);
            check_x16(TS_DTYPE_Q4_0);
            ts_cpu_q_gfni_set(1);
            CHECK(ts_cpu_q_gfni(), "GFNI split not restored");
        } else printf("  Q4_0 lane order: no GFNI on this CPU, only the shift-and-mask split ran\n");
        check_x16(TS_DTYPE_Q8_0);
        /* the tile order, taken where the prefill runs AMX or I16: every prefill kind (AMX's where
         * it is usable, else its fallback, I16's panels) */
        check_t16(TS_DTYPE_Q8_0);
        check_t16(TS_DTYPE_Q4_0);
        if (ts_cpu_q_gfni()) { /* Q4_0's other nibble split too */
            ts_cpu_q_gfni_set(0);
            check_t16(TS_DTYPE_Q4_0);
            ts_cpu_q_gfni_set(1);
        }
        /* every AVX-512 prefill kernel, whichever this machine picks (AMX: `test_cpu_gemm_q amx`) */
        for (int k = 0; k < TS_Q_PREFILL_COUNT; k++) {
            if (k == TS_Q_PREFILL_AMX) continue;
            char kname[32];
            snprintf(kname, sizeof kname, "avx512 %s", ts_q_prefill_name((ts_q_prefill)k));
            for (size_t d = 0; d < 2; d++) {
                ts_dtype dt = dts[d];
                if (k != (int)ts_cpu_avx512_q_prefill()) check_prefill(k_prefill[k], kname, dt, prefill_bound((ts_q_prefill)k));
                /* outlier channels: bounded as above except i8 (printed) */
                uint8_t *w = random_q(dt, 2048, 2048);
                check_shape_x(k_prefill[k], kname, dt, w, 64, 2048, 2048, 0, 256,
                              k == TS_Q_PREFILL_I8 ? 0 : prefill_bound((ts_q_prefill)k), 1, k != TS_Q_PREFILL_I8);
                free(w);
                /* the LM head (Qwen3's vocabulary, K = 1024) at a few rows, every column */
                w = random_q(dt, 151936, 1024);
                check_shape(k_prefill[k], kname, dt, w, 3, 151936, 1024, 0, 151936, prefill_bound((ts_q_prefill)k));
                free(w);
            }
        }
    }
    return th_finish("test_cpu_gemm_q");
}
