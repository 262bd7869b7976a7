/* The oracle's own kernels: the dot product's AVX2 twin is bit-identical to the plain C lanes
 * and accurate to double rounding, and so is the two-column form the matmul uses; splitting matmuls over threads does not change a bit of
 * the logits; prefill with all logits equals token-by-token decode bit for bit (one code path
 * for both, the LM head batched per chunk or not), and so does a decode step of several
 * sessions at once. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "target/ref/ref_dot.h"
#include "target/ref/ref_kernels.h"
#include "tharness.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    /* mixed magnitudes and signs: cancellation is where summation order shows */
    double u = (double)(rng >> 11) / 9007199254740992.0;
    int e = (int)(rng >> 5) % 24 - 12;
    return (float)(ldexp(u - 0.5, e));
}

static void check_dot(void) {
    static const int ns[] = {0, 1, 3, 15, 16, 17, 31, 33, 64, 100, 1024, 1027, 2048, 8192, 8195};
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        int n = ns[k];
        float *a = malloc(sizeof(float) * (n + 1)), *b = malloc(sizeof(float) * (n + 1));
        long double exact = 0, mag = 0;
        for (int i = 0; i < n; i++) {
            a[i] = frand(), b[i] = frand();
            exact += (long double)a[i] * b[i];
            mag += fabsl((long double)a[i] * b[i]);
        }
        double g = ts_ref_dot_generic(a, b, n), d = ts_ref_dot(a, b, n);
        CHECK(memcmp(&g, &d, sizeof g) == 0, "n=%d: ts_ref_dot %.17g != generic %.17g", n, d, g);
        if (avx2) {
            double v = ts_ref_dot_avx2(a, b, n);
            CHECK(memcmp(&g, &v, sizeof g) == 0, "n=%d: avx2 %.17g != generic %.17g", n, v, g);
        }
        CHECK(fabsl((long double)g - exact) <= 1e-14L * (mag + 1e-300L), "n=%d: %.17g vs exact %.17Lg", n, g, exact);
        /* The matmul's two-column form: weight rows widened to double, one shared x. Each of its
         * outputs must be the single dot's bits, whichever twin runs. */
        float *c = malloc(sizeof(float) * (n + 1));
        double *bd = malloc(sizeof(double) * (n + 1)), *cd = malloc(sizeof(double) * (n + 1));
        for (int i = 0; i < n; i++) c[i] = frand(), bd[i] = b[i], cd[i] = c[i];
        double want[2] = {g, ts_ref_dot_generic(a, c, n)}, got[3][2];
        ts_ref_dot2_generic(a, bd, cd, n, got[0]);
        ts_ref_dot2(a, bd, cd, n, got[1]);
        if (avx2) ts_ref_dot2_avx2(a, bd, cd, n, got[2]);
        for (int v = 0; v < (avx2 ? 3 : 2); v++)
            for (int o = 0; o < 2; o++)
                CHECK(memcmp(&got[v][o], &want[o], sizeof(double)) == 0, "n=%d: dot2 variant %d column %d: %.17g != %.17g",
                      n, v, o, got[v][o], want[o]);
        free(c), free(bd), free(cd);
        free(a), free(b);
    }
    if (!avx2) printf("AVX2+FMA not available: only the generic dot was checked\n");
}

static void forward(const ts_model *m, int threads, const int32_t *t, int n, float *out, int stepwise) {
    ts_error err;
    ts_ref *r = NULL;
    CHECK(ts_ref_new(m, n, &r, &err) == TS_OK, "%s", err.msg);
    if (!r) return;
    CHECK(ts_ref_set_threads(r, threads, &err) == TS_OK, "%s", err.msg);
    size_t V = (size_t)ts_model_n_vocab(m);
    if (stepwise)
        for (int i = 0; i < n; i++) CHECK(ts_ref_forward(r, t + i, 1, out + i * V, 0, NULL, &err) == TS_OK, "%s", err.msg);
    else
        CHECK(ts_ref_forward(r, t, n, out, 1, NULL, &err) == TS_OK, "%s", err.msg);
    ts_ref_free(r);
}

static void check_threads(const char *preset) {
    const char *dir = th_tmpdir(preset);
    ts_error err;
    ts_model *m = NULL;
    CHECK(ts_synth_write(preset, dir, &(ts_synth_opts){3, 0, 0, NULL, NULL}, &err) == TS_OK, "%s", err.msg);
    CHECK(ts_model_open(dir, &m, &err) == TS_OK, "%s: %s", preset, err.msg);
    if (!m) return;
    enum { N = 70 }; /* more than one 64-token chunk */
    int32_t t[N];
    size_t V = (size_t)ts_model_n_vocab(m);
    for (int i = 0; i < N; i++) t[i] = (int32_t)((i * 7919u + 5) % V);
    float *one = malloc(sizeof(float) * N * V), *got = malloc(sizeof(float) * N * V);
    forward(m, 1, t, N, one, 0);
    static const int ths[] = {2, 3, 5};
    for (int k = 0; k < 3; k++) {
        forward(m, ths[k], t, N, got, 0);
        CHECK(memcmp(one, got, sizeof(float) * N * V) == 0, "%s: %d threads change the logits", preset, ths[k]);
    }
    forward(m, 2, t, N, got, 1);
    CHECK(memcmp(one, got, sizeof(float) * N * V) == 0, "%s: token-by-token decode differs from prefill", preset);
    /* Three sessions decoded together equal each decoded alone, bit for bit. */
    enum { B = 3, P = 5, G = 4 };
    ts_ref *rs[B] = {0}, *alone = NULL;
    float *lb = malloc(sizeof(float) * B * V), *l1 = malloc(sizeof(float) * V);
    int32_t seq[B][P + G], step[B];
    for (int k = 0; k < B; k++) {
        CHECK(ts_ref_new(m, P + G, &rs[k], &err) == TS_OK, "%s", err.msg);
        for (int i = 0; i < P + G; i++) seq[k][i] = (int32_t)((k * 131u + i * 17u + 1) % V);
    }
    CHECK(ts_ref_set_threads(rs[0], 2, &err) == TS_OK, "%s", err.msg);
    CHECK(ts_ref_new(m, P + G, &alone, &err) == TS_OK, "%s", err.msg);
    int same = 1;
    for (int i = 0; i < P + G && rs[B - 1] && alone; i++) {
        for (int k = 0; k < B; k++) step[k] = seq[k][i];
        CHECK(ts_ref_decode_batch(rs, B, step, lb, &err) == TS_OK, "%s", err.msg);
        for (int k = 0; k < B; k++) { /* session alone: the prefix as one prefill */
            ts_ref_reset(alone);
            CHECK(ts_ref_forward(alone, seq[k], i + 1, l1, 0, NULL, &err) == TS_OK, "%s", err.msg);
            same &= !memcmp(l1, lb + (size_t)k * V, sizeof(float) * V);
        }
    }
    CHECK(same, "%s: batched decode differs from each session alone", preset);
    CHECK(ts_ref_n_past(rs[0]) == P + G, "batch advanced session 0 to %d", ts_ref_n_past(rs[0]));
    ts_ref *dup[2] = {rs[0], rs[0]};
    CHECK(ts_ref_decode_batch(dup, 2, step, lb, &err) == TS_ERR_ARG && strstr(err.msg, "also session"), "%s", err.msg);
    CHECK(ts_ref_decode_batch(rs, 1, step, lb, &err) == TS_ERR_ARG, "decode past the cache accepted");
    CHECK(ts_ref_decode_batch(rs, 0, step, lb, &err) == TS_ERR_ARG, "an empty batch accepted");
    for (int k = 0; k < B; k++) ts_ref_free(rs[k]);
    ts_ref_free(alone);
    free(lb), free(l1);

    ts_ref *r = NULL;
    CHECK(ts_ref_new(m, 4, &r, &err) == TS_OK, "%s", err.msg);
    CHECK(ts_ref_set_threads(r, -1, &err) == TS_ERR_ARG && strstr(err.msg, "threads"), "-1 threads: %s", err.msg);
    CHECK(ts_ref_set_threads(r, 1000, &err) == TS_ERR_ARG, "1000 threads accepted");
    CHECK(ts_ref_set_threads(r, 0, &err) == TS_OK, "0 (all cores): %s", err.msg);
    ts_ref_free(r);
    free(one), free(got);
    ts_model_close(m);
}

int main(void) {
    check_dot();
    check_threads("qwen3-0.6b-tiny");
    check_threads("llama-3.2-1b-tiny");
    return th_finish("ref_kernels");
}
