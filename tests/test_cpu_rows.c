/* The vectorized silu * up (rows_avx2.c) against the oracle's double-precision formula: every
 * value of a sweep over the gate's whole useful range (|g| up to 100, where exp(-g) saturates) and
 * random gate/up pairs at Qwen3-0.6B's and Llama-3.2-1B's shares of n_ff (1536, 4096) and odd
 * lengths, so the masked tail runs. Within 3 ulp of the float result, or 1e-30 absolute where the
 * true value underflows (below -88 the kernel gives -0 * u). A share's values do not depend on
 * where it starts, NaN stays NaN, infinities and 1e38 give -0 * u or g * u, and nothing past n is
 * written. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "target/cpu/cpu_features.h"
#include "target/cpu/rows.h"
#include "tharness.h"

static double ulps(float got, double want) {
    float w = (float)want;
    if (got == w) return 0;
    if (fabs(want) < 1e-30) return fabs(got) < 1e-30 ? 0 : INFINITY;
    return fabs((double)got - want) / (nextafterf(fabsf(w), INFINITY) - fabsf(w));
}

static double oracle(float g, float u) { return (double)g / (1.0 + exp(-(double)g)) * u; }

static uint64_t rng = 0x243f6a8885a308d3ull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
}

int main(void) {
    if (!ts_cpu_variant_supported(TS_CPU_AVX2)) {
        th_isa_gap(ts_cpu_variant_name(TS_CPU_AVX2), "silu * up");
        return th_finish("test_cpu_rows");
    }
    enum { N = 20001 };
    static float g[N + 8], u[N + 8], g0[N];
    double worst = 0;
    /* the sweep: g from -100 to 100, u = 1 */
    for (int i = 0; i < N; i++) g[i] = g0[i] = -100.0f + 200.0f * (float)i / (N - 1), u[i] = 1.0f;
    g[N] = 7.0f; /* past the end: must stay */
    ts_cpu_silu_mul_avx2(g, u, N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        double e = ulps(g[i], oracle(g0[i], 1.0f));
        worst = e > worst ? e : worst;
        if (e > 3 && bad++ < 5) CHECK(0, "silu(%.6g): %.9g, expected %.9g (%.1f ulp)", (double)g0[i], (double)g[i], oracle(g0[i], 1.0f), e);
    }
    CHECK(!bad, "sweep: %d of %d values beyond 3 ulp", bad, N);
    CHECK(g[N] == 7.0f, "a value past n was written");
    /* random pairs at the models' shares and odd lengths, in pieces starting anywhere */
    static const int lens[] = {1536, 4096, 1, 7, 9, 31, 1000};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        int n = lens[k];
        for (int i = 0; i < n; i++) g0[i] = 12 * frand(), u[i] = 4 * frand();
        memcpy(g, g0, sizeof(float) * (size_t)n);
        ts_cpu_silu_mul_avx2(g, u, n);
        static float h[N];
        memcpy(h, g0, sizeof(float) * (size_t)n);
        for (int a = 0; a < n;) { /* the same values from uneven pieces */
            int len = 1 + (a * 7 + 3) % 37;
            if (a + len > n) len = n - a;
            ts_cpu_silu_mul_avx2(h + a, u + a, len);
            a += len;
        }
        int off = 0, far = 0;
        for (int i = 0; i < n; i++) {
            double e = ulps(g[i], oracle(g0[i], u[i]));
            worst = e > worst ? e : worst;
            far += e > 3;
            off += memcmp(&g[i], &h[i], sizeof(float)) != 0;
        }
        CHECK(!far, "n %d: %d values beyond 3 ulp", n, far);
        CHECK(!off, "n %d: %d values differ when computed in pieces", n, off);
    }
    g[0] = NAN, g[1] = 1.0f, u[0] = u[1] = 1.0f;
    ts_cpu_silu_mul_avx2(g, u, 2);
    CHECK(isnan(g[0]) && fabsf(g[1] - 0.7310586f) < 1e-6f, "NaN gate: %g %g", (double)g[0], (double)g[1]);
    /* far outside the clamp of exp's argument: a huge negative gate underflows to -0 * u, a huge
     * positive one is g * u */
    float big[5] = {-1e38f, -INFINITY, 1e30f, INFINITY, -88.5f}, bu[5] = {2, 2, 2, 2, 2};
    ts_cpu_silu_mul_avx2(big, bu, 5);
    CHECK(big[0] == 0 && signbit(big[0]) && big[1] == 0 && signbit(big[1]), "huge negative gates: %g %g",
          (double)big[0], (double)big[1]);
    CHECK(big[2] == 2e30f && big[3] == INFINITY && big[4] == 0, "huge positive gates: %g %g %g", (double)big[2],
          (double)big[3], (double)big[4]);
    printf("silu * up: worst %.2f ulp against the double-precision formula\n", worst);
    return th_finish("test_cpu_rows");
}
