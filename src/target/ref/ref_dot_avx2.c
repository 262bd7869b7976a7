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

/* ts_ref_dot2_lanes: x widened once for both columns; lane l of accumulator j of column k sums
 * elements i + 4j + l, the final sums in the same order. */
void ts_ref_dot2_avx2(const float *x, const double *r0, const double *r1, int n, double out[2]) {
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256d x0 = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), x1 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
        __m256d x2 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 8)), x3 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 12));
        a0 = _mm256_fmadd_pd(x0, _mm256_loadu_pd(r0 + i), a0);
        b0 = _mm256_fmadd_pd(x0, _mm256_loadu_pd(r1 + i), b0);
        a1 = _mm256_fmadd_pd(x1, _mm256_loadu_pd(r0 + i + 4), a1);
        b1 = _mm256_fmadd_pd(x1, _mm256_loadu_pd(r1 + i + 4), b1);
        a2 = _mm256_fmadd_pd(x2, _mm256_loadu_pd(r0 + i + 8), a2);
        b2 = _mm256_fmadd_pd(x2, _mm256_loadu_pd(r1 + i + 8), b2);
        a3 = _mm256_fmadd_pd(x3, _mm256_loadu_pd(r0 + i + 12), a3);
        b3 = _mm256_fmadd_pd(x3, _mm256_loadu_pd(r1 + i + 12), b3);
    }
    double ta = 0, tb = 0;
    for (; i < n; i++) ta += (double)x[i] * r0[i], tb += (double)x[i] * r1[i];
    double t[4];
    _mm256_storeu_pd(t, _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)));
    out[0] = ((t[0] + t[1]) + (t[2] + t[3])) + ta;
    _mm256_storeu_pd(t, _mm256_add_pd(_mm256_add_pd(b0, b1), _mm256_add_pd(b2, b3)));
    out[1] = ((t[0] + t[1]) + (t[2] + t[3])) + tb;
}
