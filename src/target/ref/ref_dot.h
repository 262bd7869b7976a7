/* The oracle's dot product: FP32 inputs, double accumulation in 16 independent lanes, the lanes
 * summed in a fixed order at the end. A float times a float is exact in double, so the only
 * rounding is in the sums, and that order is fixed here, not by the ISA: the AVX2 twin in
 * ref_dot_avx2.c gives bit-identical results (tests/test_ref_kernels.c checks it).
 * The lanes exist for speed only: one long chain of dependent double adds made the oracle the
 * slowest part of a deployment. */
#ifndef TS_TARGET_REF_DOT_H
#define TS_TARGET_REF_DOT_H
#include <string.h>

typedef double ts_ref_v4d __attribute__((vector_size(32)));
typedef float ts_ref_v4f __attribute__((vector_size(16)));

static inline double ts_ref_dot_lanes(const float *a, const float *b, int n) {
    ts_ref_v4d s[4] = {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 4; j++) {
            ts_ref_v4f x, y;
            memcpy(&x, a + i + 4 * j, sizeof x);
            memcpy(&y, b + i + 4 * j, sizeof y);
            s[j] += __builtin_convertvector(x, ts_ref_v4d) * __builtin_convertvector(y, ts_ref_v4d);
        }
    double tail = 0;
    for (; i < n; i++) tail += (double)a[i] * b[i];
    ts_ref_v4d t = (s[0] + s[1]) + (s[2] + s[3]);
    return ((t[0] + t[1]) + (t[2] + t[3])) + tail;
}

/* This source, and its AVX2 twin; ts_ref_dot picks one from CPUID. */
double ts_ref_dot_generic(const float *a, const float *b, int n);
double ts_ref_dot_avx2(const float *a, const float *b, int n);

#endif
