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

/* Two dots sharing one activation row x, against two weight rows already widened to double
 * (r0, r1): out[k] is bit for bit ts_ref_dot_lanes(x, (float) rk, n), since widening a float
 * is exact. Why: widening each weight once per matmul column instead of once per activation
 * row, and widening x once for both columns, was the oracle's cost. */
static inline void ts_ref_dot2_lanes(const float *x, const double *r0, const double *r1, int n, double out[2]) {
    ts_ref_v4d s[2][4] = {{{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}},
                          {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}}};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 4; j++) {
            ts_ref_v4f xv;
            ts_ref_v4d a, b;
            memcpy(&xv, x + i + 4 * j, sizeof xv);
            memcpy(&a, r0 + i + 4 * j, sizeof a);
            memcpy(&b, r1 + i + 4 * j, sizeof b);
            ts_ref_v4d xd = __builtin_convertvector(xv, ts_ref_v4d);
            s[0][j] += xd * a;
            s[1][j] += xd * b;
        }
    double tail[2] = {0, 0};
    for (; i < n; i++) tail[0] += (double)x[i] * r0[i], tail[1] += (double)x[i] * r1[i];
    for (int k = 0; k < 2; k++) {
        ts_ref_v4d t = (s[k][0] + s[k][1]) + (s[k][2] + s[k][3]);
        out[k] = ((t[0] + t[1]) + (t[2] + t[3])) + tail[k];
    }
}

/* This source, and its AVX2 twins; ts_ref_dot and ts_ref_dot2 pick one from CPUID. */
double ts_ref_dot_generic(const float *a, const float *b, int n);
double ts_ref_dot_avx2(const float *a, const float *b, int n);
void ts_ref_dot2_generic(const float *x, const double *r0, const double *r1, int n, double out[2]);
void ts_ref_dot2_avx2(const float *x, const double *r0, const double *r1, int n, double out[2]);
void ts_ref_dot2(const float *x, const double *r0, const double *r1, int n, double out[2]);

#endif
