/* The cpu target's BF16 GEMM/GEMV, every variant this machine supports, against the ref
 * matmul at the real shapes of all nine seed models: decode (S = 1, every output row) and
 * prefill (S = 128, three 64-row windows of N with the full K, the dimension the kernel
 * loops over). Outputs and inputs are pre-filled with NaN outside the valid region. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "deploy/gates.h"
#include "io/dtype.h"
#include "model/synth.h"
#include "target/cpu/cpu_target.h"
#include "target/cpu/gemm.h"
#include "target/ref/ref_kernels.h"
#include "tharness.h"

static uint64_t rng = 0x1234567;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static uint16_t *g_w;
static size_t g_w_len;
static int g_nr; /* nonzero: W rows per decode tile instead of the default (the autotuner's candidates) */
/* The avx512bf16 variant has two prefill kernels, one chosen per core (gemm.h); both are
 * checked here whichever this machine would choose. */
static ts_gemm_fn g_fn;
static const char *g_name;
static ts_gemm_fn fn_for(ts_cpu_variant v) { return g_fn ? g_fn : ts_cpu_gemm_for(v); }
static const char *name_of(ts_cpu_variant v) { return g_name ? g_name : ts_cpu_variant_name(v); }

/* Checks y[:, n0:n1] = x @ W^T for one (S, N, K) with the given variant. K need not be a
 * multiple of 16: the kernel then runs as a session runs it (gemm.h), on W copied with rows
 * ts_gemm_kpad(K) apart and zero-padded, x packed with a zero pad; NaN lies beyond the pad. */
static void check_shape(ts_cpu_variant v, const char *what, int S, int N, int K, int n0, int n1) {
    int Kp = ts_gemm_kpad(K), ldx = Kp + 16, ldy = N;
    float *x = malloc(sizeof(float) * (size_t)S * ldx), *xp = malloc(sizeof(float) * (size_t)S * ldx);
    float *y = malloc(sizeof(float) * (size_t)S * ldy);
    float *ref = malloc(sizeof(float) * (size_t)S * (n1 - n0)), *got = malloc(sizeof(float) * (size_t)S * (n1 - n0));
    float *row = malloc(sizeof(float) * TS_REF_ROW_SCRATCH(K));
    for (size_t i = 0; i < (size_t)S * ldx; i++) x[i] = xp[i] = NAN;
    /* The avx512bf16 prefill kernel rounds x to BF16 (by design, gemm_avx512.c); given
     * BF16-exact x it must match the oracle to FP32 rounding like every other kernel. */
    int bf16_x = fn_for(v) == ts_cpu_gemm_bf16_avx512_dp && S >= 2;
    for (int s = 0; s < S; s++) {
        for (int k = 0; k < K; k++) {
            float f = frand();
            x[(size_t)s * ldx + k] = bf16_x ? ts_bf16_to_f32(ts_f32_to_bf16(f)) : f;
        }
        ts_cpu_pack_row(xp + (size_t)s * ldx, x + (size_t)s * ldx, K);
    }
    for (size_t i = 0; i < (size_t)S * ldy; i++) y[i] = NAN;
    uint16_t *wpad = NULL;
    if (Kp != K) {
        wpad = malloc(sizeof(uint16_t) * (size_t)N * Kp);
        ts_cpu_pad_bf16(wpad, g_w, N, K);
    }
    ts_tensor W = {0};
    W.dtype = TS_DTYPE_BF16;
    W.data = g_w + (size_t)n0 * K;
    /* ref on the window: rows n0..n1 of W */
    float *xd = malloc(sizeof(float) * (size_t)S * K);
    for (int s = 0; s < S; s++) memcpy(xd + (size_t)s * K, x + (size_t)s * ldx, sizeof(float) * K);
    ts_ref_matmul(ref, xd, &W, NULL, S, n1 - n0, K, row);
    ts_gemm_tile t = ts_cpu_gemm_default_tile(S, N, K);
    if (g_nr) t.nr = g_nr;
    fn_for(v)(y, ldy, xp, ldx, wpad ? wpad : g_w, Kp, S, n0, n1, t);
    int outside_written = 0;
    for (int s = 0; s < S; s++)
        for (int n = 0; n < N; n++) {
            float val = y[(size_t)s * ldy + n];
            if (n >= n0 && n < n1) got[(size_t)s * (n1 - n0) + (n - n0)] = val;
            else if (!isnan(val)) outside_written++;
        }
    ts_metrics m;
    ts_metrics_compute(got, ref, S, n1 - n0, &m);
    const ts_threshold *tr = ts_threshold_find("phase1", "rel_l2"), *tp = ts_threshold_find("phase1", "pearson");
    int pass = ts_threshold_pass(tr, m.rel_l2) && ts_threshold_pass(tp, m.pearson) && m.nonfinite == 0 &&
               m.rel_l2 <= 1e-5 && !outside_written;
    printf("  %-10s %-26s S=%-4d N=%-6d K=%-5d rows [%d,%d)  rel_l2 %.2e  pearson %.9f  %s\n",
           name_of(v), what, S, N, K, n0, n1, m.rel_l2, m.pearson, pass ? "ok" : "FAIL");
    CHECK(pass, "%s %s S=%d N=%d K=%d: rel_l2 %.3e pearson %.9f nonfinite %lld outside %d",
          name_of(v), what, S, N, K, m.rel_l2, m.pearson, (long long)m.nonfinite, outside_written);
    free(x), free(xp), free(y), free(ref), free(got), free(row), free(xd), free(wpad);
}

/* The prefill kernel's result for an output does not depend on how the rows of x or of W are
 * split between calls: S = 40 in one call equals 2 + 3 + 12 + 23 rows in four (a prompt
 * prefilled in pieces), 2 + 3 + ... + 8 + 5, 16 + 9 + 15 and 10 + 11 + 19 (every size the
 * AVX-512 few-row prefill takes, gemm_few_avx512.c: 2-16 rows, sets of 8 and 1-8, against the
 * panels of 19, 23 or 40 rows), and any n-range split (thread shares) is bit-identical. */
static void check_splits(ts_cpu_variant v, int N, int K) {
    int S = 40, Kp = ts_gemm_kpad(K), ldx = Kp + 16;
    uint16_t *w = g_w;
    if (Kp != K) {
        w = malloc(sizeof(uint16_t) * (size_t)N * Kp);
        ts_cpu_pad_bf16(w, g_w, N, K);
    }
    float *x = malloc(sizeof(float) * (size_t)S * ldx), *xp = malloc(sizeof(float) * (size_t)S * ldx);
    float *a = malloc(sizeof(float) * (size_t)S * N), *b = malloc(sizeof(float) * (size_t)S * N);
    for (int s = 0; s < S; s++) {
        for (int k = 0; k < K; k++) x[(size_t)s * ldx + k] = frand();
        ts_cpu_pack_row(xp + (size_t)s * ldx, x + (size_t)s * ldx, K);
    }
    ts_gemm_fn f = fn_for(v);
    f(a, N, xp, ldx, w, Kp, S, 0, N, ts_cpu_gemm_default_tile(S, N, K));
    static const int parts[4][9] = {
        {0, 2, 5, 17, 40, -1}, {0, 2, 5, 9, 14, 20, 27, 35, 40}, {0, 16, 25, 40, -1}, {0, 10, 21, 40, -1}};
    int same_rows = 1;
    for (int p = 0; p < 4; p++) {
        memset(b, 0, sizeof(float) * (size_t)S * N);
        for (int i = 0; i + 1 < 9 && parts[p][i + 1] > 0; i++) {
            int r = parts[p][i + 1] - parts[p][i];
            f(b + (size_t)parts[p][i] * N, N, xp + (size_t)parts[p][i] * ldx, ldx, w, Kp, r, 0, N,
              ts_cpu_gemm_default_tile(r, N, K));
        }
        same_rows &= !memcmp(a, b, sizeof(float) * (size_t)S * N);
    }
    /* column shares of the whole call, and of a 6-row one (cut inside 16-row groups) */
    int cuts[] = {0, 5, 37, 64, 100, N};
    for (int i = 0; i + 1 < 6; i++)
        f(b, N, xp, ldx, w, Kp, S, cuts[i], cuts[i + 1], ts_cpu_gemm_default_tile(S, N, K));
    int same_cols = !memcmp(a, b, sizeof(float) * (size_t)S * N);
    for (int i = 0; i + 1 < 6; i++)
        f(b, N, xp, ldx, w, Kp, 6, cuts[i], cuts[i + 1], ts_cpu_gemm_default_tile(6, N, K));
    same_cols &= !memcmp(a, b, sizeof(float) * (size_t)6 * N);
    printf("  %-10s splits N=%d K=%d: rows 40 = 2 + 3 + 12 + 23, 2 + 3 + ... + 8 + 5, 16 + 9 + 15, 10 + 11 + 19 %s, column shares %s\n",
           name_of(v), N, K, same_rows ? "bit-identical" : "DIFFER", same_cols ? "bit-identical" : "DIFFER");
    CHECK(same_rows && same_cols, "%s: split results differ (rows %d, columns %d)", name_of(v),
          same_rows, same_cols);
    free(x), free(xp), free(a), free(b);
    if (w != g_w) free(w);
}

static void check_model(ts_cpu_variant v, const char *preset) {
    ts_config c;
    ts_error err;
    if (ts_synth_preset_config(preset, 0, &c, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    int H = c.n_embd, Q = c.n_heads * c.head_dim, KV = c.n_kv_heads * c.head_dim, F = c.n_ff, V = c.n_vocab;
    struct {
        const char *name;
        int N, K;
    } shapes[] = {{"q_proj", Q, H}, {"k_proj/v_proj", KV, H}, {"o_proj", H, Q},
                  {"gate_proj/up_proj", F, H}, {"down_proj", H, F}, {"lm_head", V, H}};
    printf("%s\n", preset);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int N = shapes[i].N, K = shapes[i].K;
        CHECK((size_t)N * K <= g_w_len, "weight buffer too small");
        if ((size_t)N * K > g_w_len) continue;
        /* decode: every row (the scalar variant samples, it is slow at full size) */
        if (v == TS_CPU_SCALAR) check_shape(v, shapes[i].name, 1, N, K, N / 2 - 37, N / 2 + 29);
        else check_shape(v, shapes[i].name, 1, N, K, 0, N);
        if (!strcmp(shapes[i].name, "lm_head")) continue; /* prefill computes the last position only */
        /* prefill windows: start, middle (odd offsets), end */
        int w = N < 64 ? N : 64;
        check_shape(v, shapes[i].name, 128, N, K, 0, w);
        check_shape(v, shapes[i].name, 128, N, K, N / 2 - 13, N / 2 - 13 + (w < N / 2 ? w : N / 2));
        check_shape(v, shapes[i].name, 128, N, K, N - w + (w > 3 ? 3 : 0), N);
    }
    /* small prefills (every tile remainder) and a full chunk, on the FFN shapes */
    static const int small_s[] = {2, 3, 4, 5, 7, 8, 13, 256};
    for (size_t i = 0; i < sizeof small_s / sizeof small_s[0]; i++) {
        int S = small_s[i], N = c.n_ff, K = c.n_embd, w = S == 256 ? 48 : 100;
        check_shape(v, "gate_proj/up_proj", S, N, K, N / 3 + 1, N / 3 + 1 + w);
        check_shape(v, "down_proj", S, K, N, K - w, K);
    }
    check_splits(v, 160, c.n_embd);
    /* the autotuner's other decode tiles, 2 and 4 W rows at a time (odd N: every remainder) */
    for (g_nr = 2; g_nr <= 4; g_nr += 2) check_shape(v, g_nr == 2 ? "decode tile nr=2" : "decode tile nr=4", 1, KV + 3, H, 0, KV + 3);
    g_nr = 0;
}

/* K not a multiple of 32 or of a K block: the vector kernels' 16-position tails. */
static void check_tails(ts_cpu_variant v) {
    static const int ks[] = {16, 80, 272, 528};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        for (int S = 1; S <= 64; S = S * 4 + 1) check_shape(v, "K tail", S, 70, ks[i], 0, 70);
}

/* K and N that are not multiples of 16, as real models have them (stories260K's intermediate
 * 172; heads x head_dim such as 40; hidden sizes 8 + 16k), at decode, every prefill tile
 * remainder and a full chunk, K below and above one K block (256 packed positions), N below
 * one panel, between panels, and odd. */
static void check_odd(ts_cpu_variant v) {
    static const struct {
        int N, K;
    } shapes[] = {{64, 172}, {172, 64}, {3, 172}, {172, 40}, {40, 8}, {8, 40}, {69, 8 + 16 * 17},
                  {172, 8 + 16 * 20}, {35, 1000}, {21, 2050}, {3, 3}};
    static const int ss[] = {1, 2, 3, 5, 7, 8, 13, 40, 128};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (size_t j = 0; j < sizeof ss / sizeof ss[0]; j++) {
            int N = shapes[i].N, K = shapes[i].K, S = ss[j];
            check_shape(v, "odd K/N", S, N, K, 0, N);
            if (N > 8) check_shape(v, "odd K/N window", S, N, K, N / 3 + 1, N - 2);
        }
    for (g_nr = 2; g_nr <= 4; g_nr += 2) check_shape(v, g_nr == 2 ? "odd decode nr=2" : "odd decode nr=4", 1, 67, 172, 0, 67);
    g_nr = 0;
    check_splits(v, 160, 172);
    check_splits(v, 172, 40);
    check_splits(v, 160, 264); /* padded to 272: a 16-position tail in a second K block */
}

/* The two avx512bf16 decode GEMVs (gemm.h), each whatever this core picks, as GEMM entry
 * points that run one GEMV per row of x. */
static void gemv_f32_rows(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K, int S, int n0, int n1,
                          ts_gemm_tile t) {
    (void)t;
    for (int s = 0; s < S; s++) ts_cpu_gemv_f32_avx512(y + (size_t)s * ldy, xp + (size_t)s * ldx, W, K, n0, n1);
}
static void gemv_bf16x3_rows(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K, int S, int n0,
                             int n1, ts_gemm_tile t) {
    for (int s = 0; s < S; s++) ts_cpu_gemv_bf16x3_avx512(y + (size_t)s * ldy, xp + (size_t)s * ldx, W, K, n0, n1, t.nr);
}

/* Decode only (S = 1): every output row of every GEMM shape of the seed models, K tails, odd
 * K and N, windows, and the autotuner's nr = 2 and 4 (which only the vdpbf16ps GEMV uses). */
static void check_decode_kernel(ts_cpu_variant v) {
    static const int ks[] = {16, 48, 80, 272, 528};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) check_shape(v, "K tail", 1, 70, ks[i], 0, 70);
    static const struct {
        int N, K;
    } odd[] = {{64, 172}, {172, 64}, {3, 172}, {172, 40}, {40, 8}, {69, 8 + 16 * 17}, {35, 1000}, {21, 2050}, {3, 3}};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        check_shape(v, "odd K/N", 1, odd[i].N, odd[i].K, 0, odd[i].N);
        if (odd[i].N > 8) check_shape(v, "odd K/N window", 1, odd[i].N, odd[i].K, odd[i].N / 3 + 1, odd[i].N - 2);
    }
    for (int i = 0; ts_synth_preset_name(i); i++) {
        const char *preset = ts_synth_preset_name(i);
        ts_config c;
        ts_error err;
        if (strstr(preset, "-tiny") || ts_synth_preset_config(preset, 0, &c, &err)) continue;
        int H = c.n_embd, Q = c.n_heads * c.head_dim, KV = c.n_kv_heads * c.head_dim, F = c.n_ff, V = c.n_vocab;
        int shapes[6][2] = {{Q, H}, {KV, H}, {H, Q}, {F, H}, {H, F}, {V, H}};
        printf("%s\n", preset);
        for (int j = 0; j < 6; j++) check_shape(v, "decode", 1, shapes[j][0], shapes[j][1], 0, shapes[j][0]);
        for (g_nr = 2; g_nr <= 4; g_nr += 2) check_shape(v, g_nr == 2 ? "decode nr=2" : "decode nr=4", 1, KV + 3, H, 0, KV + 3);
        g_nr = 0;
    }
}

/* ts_cpu_matmul (phase 1's entry: natural-order x, W as stored) at odd K against the oracle,
 * and the pack/unpack round trip with its zero pad. */
static void check_matmul_api(void) {
    static const int ks[] = {172, 40, 8, 16, 24};
    ts_error err;
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        int K = ks[i], Kp = ts_gemm_kpad(K), N = 37;
        float src[272], packed[272], back[272];
        for (int k = 0; k < K; k++) src[k] = frand();
        for (int k = 0; k < 272; k++) packed[k] = back[k] = NAN;
        ts_cpu_pack_row(packed, src, K);
        ts_cpu_unpack_row(back, packed, K);
        int pad_zero = 1;
        for (int k = K; k < Kp; k++) {
            /* natural position k lands at packed (k - b) / 2 (+ 8 when odd) of its block b */
            int b = k / 16 * 16, pk = b + (k - b) / 2 + ((k - b) & 1) * 8;
            pad_zero &= packed[pk] == 0.0f;
        }
        CHECK(!memcmp(src, back, sizeof(float) * (size_t)K) && pad_zero && isnan(packed[Kp]) && isnan(back[K]),
              "pack/unpack K=%d: round trip or zero pad wrong", K);
        for (int S = 1; S <= 130; S += 129) {
            float *x = malloc(sizeof(float) * (size_t)S * K), *y = malloc(sizeof(float) * (size_t)S * N),
                  *ref = malloc(sizeof(float) * (size_t)S * N), *row = malloc(sizeof(float) * TS_REF_ROW_SCRATCH(K));
            for (size_t q = 0; q < (size_t)S * K; q++) x[q] = frand();
            for (size_t q = 0; q < (size_t)S * N; q++) y[q] = NAN;
            ts_tensor W = {0};
            W.dtype = TS_DTYPE_BF16;
            W.data = g_w;
            ts_ref_matmul(ref, x, &W, NULL, S, N, K, row);
            ts_status st = ts_cpu_matmul(x, S, g_w, N, K, y, &err);
            ts_metrics m;
            ts_metrics_compute(y, ref, S, N, &m);
            /* the avx512bf16 _dp prefill rounds x to BF16: the phase-1 gate, not FP32 rounding */
            int pass = st == TS_OK && m.nonfinite == 0 && ts_threshold_pass(ts_threshold_find("phase1", "rel_l2"), m.rel_l2) &&
                       ts_threshold_pass(ts_threshold_find("phase1", "pearson"), m.pearson);
            printf("  ts_cpu_matmul S=%-3d N=%d K=%-3d rel_l2 %.2e  %s\n", S, N, K, m.rel_l2, pass ? "ok" : "FAIL");
            CHECK(pass, "ts_cpu_matmul S=%d N=%d K=%d: status %d rel_l2 %.3e nonfinite %lld", S, N, K, (int)st, m.rel_l2,
                  (long long)m.nonfinite);
            free(x), free(y), free(ref), free(row);
        }
    }
}

int main(void) {
    /* One random BF16 buffer as large as the biggest weight (an lm_head), reused for every
     * shape as its leading N x K block. */
    for (int i = 0; ts_synth_preset_name(i); i++) {
        ts_config c;
        ts_error err;
        if (ts_synth_preset_config(ts_synth_preset_name(i), 0, &c, &err) == TS_OK &&
            (size_t)c.n_vocab * c.n_embd > g_w_len)
            g_w_len = (size_t)c.n_vocab * c.n_embd;
    }
    g_w = malloc(sizeof(uint16_t) * g_w_len);
    if (!g_w) return 1;
    for (size_t i = 0; i < g_w_len; i++) g_w[i] = ts_f32_to_bf16(frand() * 0.05f);
    for (int v = 0; v < TS_CPU_VARIANT_COUNT; v++) {
        if (!ts_cpu_variant_supported((ts_cpu_variant)v)) {
            th_isa_gap(ts_cpu_variant_name((ts_cpu_variant)v), "kernel variant");
            continue;
        }
        int kernels = v == TS_CPU_AVX512BF16 ? 2 : 1;
        for (int k = 0; k < kernels; k++) {
            if (v == TS_CPU_AVX512BF16) {
                g_fn = k == 0 ? ts_cpu_gemm_bf16_avx512_dp : ts_cpu_gemm_f32_avx512;
                g_name = k == 0 ? "avx512/dp" : "avx512/f32";
                printf("avx512bf16 prefill kernel %s (this core uses %s)\n", g_name,
                       ts_cpu_avx512_prefill_f32() ? "f32" : "dp");
            }
            check_tails((ts_cpu_variant)v);
            check_odd((ts_cpu_variant)v);
            for (int i = 0; ts_synth_preset_name(i); i++)
                if (!strstr(ts_synth_preset_name(i), "-tiny")) check_model((ts_cpu_variant)v, ts_synth_preset_name(i));
        }
        if (v == TS_CPU_AVX512BF16)
            for (int k = 0; k < 2; k++) {
                g_fn = k == 0 ? gemv_f32_rows : gemv_bf16x3_rows;
                g_name = k == 0 ? "gemv/f32" : "gemv/bf16x3";
                printf("avx512bf16 decode GEMV %s (this core uses %s)\n", g_name, ts_cpu_avx512_decode_f32() ? "f32" : "bf16x3");
                check_decode_kernel((ts_cpu_variant)v);
            }
        g_fn = NULL, g_name = NULL;
    }
    check_matmul_api();
    free(g_w);
    return th_finish("test_cpu_gemm");
}
