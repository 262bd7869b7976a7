/* ref_dot.h's lanes written with AVX2 intrinsics (the vector-extension source compiles to split
 * 128-bit conversions here). Lane l of accumulator j sums elements i + 4j + l, exactly as in
 * ts_ref_dot_lanes, and the final sums run in the same order; FMA rounds once, but a float
 * times a float is exact in double, so it equals the separate multiply and add. Called only
 * when CPUID reports AVX2 and FMA; tests/test_ref_kernels.c checks bit-identity. */
#include <immintrin.h>

#include "target/ref/ref_dot.h"

double ts_ref_dot_avx2(const float *a, const float *b, int n) {
    __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(a + i)), _mm256_cvtps_pd(_mm_loadu_ps(b + i)), s0);
        s1 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(a + i + 4)), _mm256_cvtps_pd(_mm_loadu_ps(b + i + 4)), s1);
        s2 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(a + i + 8)), _mm256_cvtps_pd(_mm_loadu_ps(b + i + 8)), s2);
        s3 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(a + i + 12)), _mm256_cvtps_pd(_mm_loadu_ps(b + i + 12)), s3);
    }
    double tail = 0;
    for (; i < n; i++) tail += (double)a[i] * b[i];
    double t[4];
    _mm256_storeu_pd(t, _mm256_add_pd(_mm256_add_pd(s0, s1), _mm256_add_pd(s2, s3)));
    return ((t[0] + t[1]) + (t[2] + t[3])) + tail;
}
