/* AVX-512 VNNI kernels on Q8_0 / Q4_0 weights in place (gemm.h). Decode: one weight block (32
 * codes) sign-extended to 32 int16 in a zmm and multiplied with the 16-bit x by vpdpwssd (pairs
 * summed into int32 lanes, exact), converted and scaled by d_w * d_x in FP32. vpdpwssd rather
 * than the byte form vpdpbusd: the byte form needs 8-bit x (4e-3 rel_l2 against the oracle) or
 * two passes over a split x, and the GEMV is bound by reading W, not by these instructions.
 * Prefill: the FP32 panel kernel of gemm_avx512.c on exactly dequantized W. Compiled with
 * -mavx512vnni besides the avx512bf16 flags (CMakeLists.txt); used only when CPUID has it. */
#include <immintrin.h>
#include <stdlib.h>

#include "target/cpu/gemm.h"

#ifndef TS_GEMMQ512_PREFETCH
#define TS_GEMMQ512_PREFETCH 1024 /* bytes ahead in the weight stream */
#endif

/* The same bits as ts_cpu_quantize_x_scalar: max |x| per 32-block, d and 1/d by the same IEEE
 * divisions, x * (1/d) rounded to nearest even. */
static void quantize_x(ts_gemm_qx qx, const float *xp, int K) {
    const __m512i perm = _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
    for (int b = 0; b < K; b += TS_QBLOCK) {
        __m512 v0 = _mm512_permutexvar_ps(perm, _mm512_loadu_ps(xp + b));
        __m512 v1 = _mm512_permutexvar_ps(perm, _mm512_loadu_ps(xp + b + 16));
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        float d = amax / 32767.0f, id = amax > 0 ? 32767.0f / amax : 0.0f;
        qx.d[b / TS_QBLOCK] = d;
        __m512 vid = _mm512_set1_ps(id);
        _mm256_storeu_si256((__m256i *)(qx.q + b), _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(v0, vid))));
        _mm256_storeu_si256((__m256i *)(qx.q + b + 16),
                            _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(v1, vid))));
    }
}

static inline float f16(const uint8_t *p) {
    uint16_t h;
    __builtin_memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* The 32 weights of one block as int16 in natural order. */
static inline __attribute__((always_inline)) __m512i block_w16(const uint8_t *blk, ts_dtype dt) {
    if (dt == TS_DTYPE_Q8_0) return _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(blk + 2)));
    const __m128i m4 = _mm_set1_epi8(15);
    __m128i v = _mm_loadu_si128((const __m128i *)(blk + 2));
    __m256i c = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
    return _mm512_cvtepi8_epi16(_mm256_sub_epi8(c, _mm256_set1_epi8(8)));
}

static inline __attribute__((always_inline)) float row_dot(const uint8_t *row, ts_dtype dt, size_t bb,
                                                           ts_gemm_qx qx, int nb) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    const __m512i z = _mm512_setzero_si512();
    int b = 0;
    for (; b + 2 <= nb; b += 2) {
        const uint8_t *p0 = row + (size_t)b * bb, *p1 = p0 + bb;
        _mm_prefetch((const char *)p0 + TS_GEMMQ512_PREFETCH, _MM_HINT_T0);
        const int16_t *x = qx.q + (size_t)b * TS_QBLOCK;
        __m512i s0 = _mm512_dpwssd_epi32(z, block_w16(p0, dt), _mm512_loadu_si512(x));
        __m512i s1 = _mm512_dpwssd_epi32(z, block_w16(p1, dt), _mm512_loadu_si512(x + TS_QBLOCK));
        a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_set1_ps(f16(p0) * qx.d[b]), a0);
        a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_set1_ps(f16(p1) * qx.d[b + 1]), a1);
    }
    if (b < nb) {
        const uint8_t *p0 = row + (size_t)b * bb;
        __m512i s0 = _mm512_dpwssd_epi32(z, block_w16(p0, dt), _mm512_loadu_si512(qx.q + (size_t)b * TS_QBLOCK));
        a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_set1_ps(f16(p0) * qx.d[b]), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

/* One loop per type with the type a constant, so row_dot is specialized for it. */
static void gemv_rows(float *y, ts_gemm_qx qx, const uint8_t *W, ts_dtype dt, int K, int n0, int n1) {
    size_t rb = ts_gemm_row_bytes(dt, K);
    if (dt == TS_DTYPE_Q8_0)
        for (int n = n0; n < n1; n++) y[n] = row_dot(W + (size_t)n * rb, TS_DTYPE_Q8_0, 2 + TS_QBLOCK, qx, K / TS_QBLOCK);
    else
        for (int n = n0; n < n1; n++)
            y[n] = row_dot(W + (size_t)n * rb, TS_DTYPE_Q4_0, 2 + TS_QBLOCK / 2, qx, K / TS_QBLOCK);
}

void ts_cpu_gemm_q_avx512(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                          int n0, int n1, ts_gemm_tile tile) {
    (void)tile;
    if (n0 >= n1 || S < 1) return;
    if (S >= 2) {
        ts_cpu_gemm_q_panels_avx512(y, ldy, xp, ldx, W, dt, K, S, n0, n1);
        return;
    }
    ts_cpu_gemm_q_decode(y, xp, W, dt, K, n0, n1, quantize_x, gemv_rows);
}
