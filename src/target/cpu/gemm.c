/* Activation packing, the scalar GEMM (the portable fallback and the reference layout for the
 * vector kernels), and the variant table. */
#include "target/cpu/gemm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/dtype.h"
#include "target/cpu/cpu_target.h"

void ts_cpu_pack_row(float *dst, const float *src, int K) {
    int full = K - K % TS_GEMM_KBLOCK;
    for (int b = 0; b < full; b += TS_GEMM_KBLOCK)
        for (int i = 0; i < 8; i++) {
            dst[b + i] = src[b + 2 * i];
            dst[b + 8 + i] = src[b + 2 * i + 1];
        }
    if (full == K) return;
    float blk[TS_GEMM_KBLOCK] = {0}; /* the last, partial block, zero-padded */
    memcpy(blk, src + full, sizeof(float) * (size_t)(K - full));
    for (int i = 0; i < 8; i++) {
        dst[full + i] = blk[2 * i];
        dst[full + 8 + i] = blk[2 * i + 1];
    }
}

void ts_cpu_unpack_row(float *dst, const float *src, int K) {
    int full = K - K % TS_GEMM_KBLOCK;
    for (int b = 0; b < full; b += TS_GEMM_KBLOCK)
        for (int i = 0; i < 8; i++) {
            dst[b + 2 * i] = src[b + i];
            dst[b + 2 * i + 1] = src[b + 8 + i];
        }
    for (int k = full; k < K; k++) dst[k] = src[full + (k - full) / 2 + ((k - full) & 1) * 8];
}

void ts_cpu_pad_bf16(uint16_t *dst, const uint16_t *W, int N, int K) {
    int Kp = ts_gemm_kpad(K);
    for (int n = 0; n < N; n++) {
        memcpy(dst + (size_t)n * Kp, W + (size_t)n * K, sizeof(uint16_t) * (size_t)K);
        memset(dst + (size_t)n * Kp + K, 0, sizeof(uint16_t) * (size_t)(Kp - K));
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
    /* the per-core and per-process choices made here, at session creation, before any thread
     * runs a GEMM */
    if (v >= TS_CPU_AVX512BF16) (void)ts_cpu_avx512_decode_f32(), (void)ts_cpu_avx512_few_rows();
    if (v >= TS_CPU_AVX512BF16) return ts_cpu_avx512_prefill_f32() ? ts_cpu_gemm_f32_avx512 : ts_cpu_gemm_bf16_avx512_dp;
    return v >= TS_CPU_AVX2 ? ts_cpu_gemm_bf16_avx2 : ts_cpu_gemm_bf16_scalar;
}

/* The AVX-512 prefill's name: its kind, and the rows it runs without panels (a process's
 * choices, fixed once made). */
static char name_avx512_prefill[128];
static void avx512_prefill_name(void) {
    const char *kind = ts_cpu_avx512_prefill_f32() ? "FP32 FMA zmm, FP32 activations"
                                                   : "vdpbf16ps zmm, BF16-rounded activations";
    int few = ts_cpu_avx512_few_rows();
    if (few >= 2) snprintf(name_avx512_prefill, sizeof name_avx512_prefill, "%s (2-%d rows without panels)", kind, few);
    else snprintf(name_avx512_prefill, sizeof name_avx512_prefill, "%s", kind);
}

const char *ts_cpu_prefill_kernel_name(ts_cpu_variant v) {
    if (v >= TS_CPU_AVX512BF16) {
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        pthread_once(&once, avx512_prefill_name);
        return name_avx512_prefill;
    }
    return v >= TS_CPU_AVX2 ? "FP32 FMA ymm, FP32 activations" : "scalar FP32";
}

const char *ts_cpu_decode_kernel_name(ts_cpu_variant v) {
    if (v >= TS_CPU_AVX512BF16)
        return ts_cpu_avx512_decode_f32() ? "FP32 FMA zmm GEMV, BF16 weights widened in registers"
                                          : "vdpbf16ps zmm GEMV, activations in three BF16 parts";
    return v >= TS_CPU_AVX2 ? "FP32 FMA ymm GEMV" : "scalar FP32";
}

ts_gemm_tile ts_cpu_gemm_default_tile(int S, int N, int K) {
    (void)N;
    ts_gemm_tile t = {S >= 2 ? 2 : 1, S >= 2 ? 4 : 1, 64}; /* S = 1: row-streaming GEMV */
    if (K >= 4096) t.sb = 32; /* keep the x block within L2 for long rows */
    return t;
}

ts_status ts_cpu_matmul(const float *x, int S, const uint16_t *W, int N, int K, float *y, ts_error *err) {
    if (S < 1 || N < 1 || K < 1)
        return ts_fail(err, TS_ERR_ARG, "cpu matmul: S %d, N %d, K %d (each must be at least 1)", S, N, K);
    int Kp = ts_gemm_kpad(K);
    float *xp = malloc(sizeof(float) * (size_t)S * Kp);
    /* W as a session lays it out: a zero-padded copy when K is not a multiple of 16 */
    uint16_t *wp = Kp != K ? malloc(sizeof(uint16_t) * (size_t)N * Kp) : NULL;
    if (!xp || (Kp != K && !wp)) {
        free(xp), free(wp);
        return ts_fail(err, TS_ERR_NOMEM, "cpu matmul: out of memory for %d x %d activations", S, K);
    }
    if (wp) ts_cpu_pad_bf16(wp, W, N, K);
    for (int r = 0; r < S; r++) ts_cpu_pack_row(xp + (size_t)r * Kp, x + (size_t)r * K, K);
    ts_cpu_gemm_for(ts_cpu_best_variant())(y, N, xp, Kp, wp ? wp : W, Kp, S, 0, N, ts_cpu_gemm_default_tile(S, N, K));
    free(xp), free(wp);
    return TS_OK;
}

ts_status ts_cpu_matmul_q(const float *x, int S, const void *W, ts_dtype dt, int N, int K, float *y, ts_error *err) {
    if (S < 1 || N < 1 || K < 1 || K % TS_QBLOCK || !ts_dtype_is_quant(dt))
        return ts_fail(err, TS_ERR_ARG, "cpu matmul: S %d, N %d, K %d, %s (a Q8_0 / Q4_0 matrix needs K %% 32 == 0)", S,
                       N, K, ts_dtype_name(dt));
    float *xp = malloc(sizeof(float) * (size_t)S * K);
    if (!xp) return ts_fail(err, TS_ERR_NOMEM, "cpu matmul: out of memory for %d x %d activations", S, K);
    for (int r = 0; r < S; r++) ts_cpu_pack_row(xp + (size_t)r * K, x + (size_t)r * K, K);
    ts_cpu_gemm_q_for(ts_cpu_best_variant())(y, N, xp, K, W, dt, K, S, 0, N, ts_cpu_gemm_default_tile(S, N, K));
    free(xp);
    return TS_OK;
}
