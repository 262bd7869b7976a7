/* Row kernels used by the cpu target's attention dispatch, per variant. */
#ifndef TS_TARGET_CPU_ATTN_H
#define TS_TARGET_CPU_ATTN_H
#include "target/cpu/cpu_features.h"

typedef float (*ts_dot_fn)(const float *a, const float *b, int n);
typedef void (*ts_axpy_fn)(float *y, float a, const float *x, int n); /* y += a * x */

float ts_cpu_dot_scalar(const float *a, const float *b, int n);
void ts_cpu_axpy_scalar(float *y, float a, const float *x, int n);
float ts_cpu_dot_avx2(const float *a, const float *b, int n);
void ts_cpu_axpy_avx2(float *y, float a, const float *x, int n);

#endif
