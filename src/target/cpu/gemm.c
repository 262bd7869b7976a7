/* Activation packing, the scalar GEMM (the portable fallback and the reference layout for the
 * vector kernels), and the variant table. */
#include "target/cpu/gemm.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/dtype.h"
#include "target/cpu/cpu_target.h"

void ts_cpu_pack_row(float *dst, const float *src, int K) {
    for (int b = 0; b < K; b += TS_GEMM_KBLOCK)
        for (int i = 0; i < 8; i++) {
            dst[b + i] = src[b + 2 * i];
            dst[b + 8 + i] = src[b + 2 * i + 1];
        }
}

void ts_cpu_unpack_row(float *dst, const float *src, int K) {
    for (int b = 0; b < K; b += TS_GEMM_KBLOCK)
        for (int i = 0; i < 8; i++) {
            dst[b + 2 * i] = src[b + i];
            dst[b + 2 * i + 1] = src[b + 8 + i];
        }
}

void ts_cpu_gemm_bf16_scalar(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K,
                             int S, int n0, int n1, ts_gemm_tile tile) {
    (void)tile;
    for (int n = n0; n < n1; n++) {
        const uint16_t *w = W + (size_t)n * K;
        for (int s = 0; s < S; s++) {
            const float *x = xp + (size_t)s * ldx;
            float acc[8] = {0};
            for (int b = 0; b < K; b += TS_GEMM_KBLOCK)
                for (int i = 0; i < 8; i++)
                    acc[i] += x[b + i] * ts_bf16_to_f32(w[b + 2 * i]) +
                              x[b + 8 + i] * ts_bf16_to_f32(w[b + 2 * i + 1]);
            y[(size_t)s * ldy + n] =
                ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        }
    }
}

ts_gemm_fn ts_cpu_gemm_for(ts_cpu_variant v) {
    if (v >= TS_CPU_AVX512BF16) return ts_cpu_avx512_prefill_f32() ? ts_cpu_gemm_f32_avx512 : ts_cpu_gemm_bf16_avx512_dp;
    return v >= TS_CPU_AVX2 ? ts_cpu_gemm_bf16_avx2 : ts_cpu_gemm_bf16_scalar;
}

const char *ts_cpu_prefill_kernel_name(ts_cpu_variant v) {
    if (v >= TS_CPU_AVX512BF16)
        return ts_cpu_avx512_prefill_f32() ? "FP32 FMA zmm, FP32 activations" : "vdpbf16ps zmm, BF16-rounded activations";
    return v >= TS_CPU_AVX2 ? "FP32 FMA ymm, FP32 activations" : "scalar FP32";
}

ts_gemm_tile ts_cpu_gemm_default_tile(int S, int N, int K) {
    (void)N;
    ts_gemm_tile t = {S >= 2 ? 2 : 1, S >= 2 ? 4 : 1, 64}; /* S = 1: row-streaming GEMV */
    if (K >= 4096) t.sb = 32; /* keep the x block within L2 for long rows */
    return t;
}

ts_status ts_cpu_matmul(const float *x, int S, const uint16_t *W, int N, int K, float *y, ts_error *err) {
    if (S < 1 || N < 1 || K < TS_GEMM_KBLOCK || K % TS_GEMM_KBLOCK)
        return ts_fail(err, TS_ERR_ARG, "cpu matmul: S %d, N %d, K %d (K must be a multiple of %d)", S, N, K,
                       TS_GEMM_KBLOCK);
    float *xp = malloc(sizeof(float) * (size_t)S * K);
    if (!xp) return ts_fail(err, TS_ERR_NOMEM, "cpu matmul: out of memory for %d x %d activations", S, K);
    for (int r = 0; r < S; r++) ts_cpu_pack_row(xp + (size_t)r * K, x + (size_t)r * K, K);
    ts_cpu_gemm_for(ts_cpu_best_variant())(y, N, xp, K, W, K, S, 0, N, ts_cpu_gemm_default_tile(S, N, K));
    free(xp);
    return TS_OK;
}
