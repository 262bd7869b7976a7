/* Element-wise row work of a layer (cpu_steps.c), vectorized where the variant allows. */
#ifndef TS_TARGET_CPU_ROWS_H
#define TS_TARGET_CPU_ROWS_H

/* g[i] <- silu(g[i]) * u[i] = g / (1 + exp(-g)) * u for i in [0, n), in FP32 with an exp within
 * 1 ulp (the scalar variant: expf): within 3 ulp of the exact value (test_cpu_rows: 2.31 at
 * worst); g below -88 (where it underflows) gives -0 * u. The avx2 and avx512bf16 variants
 * (AVX2 + FMA). */
void ts_cpu_silu_mul_avx2(float *g, const float *u, int n);

#endif
