/* AVX2 kernels on Q8_0 / Q4_0 weights in place (gemm.h). Decode: x quantized to 16-bit per
 * 32-block, each weight block sign-extended to 16 bits and multiplied with vpmaddwd (exact
 * int32 pairs: a lane sums 4 products, |sum| <= 4 * 128 * 32767 < 2^24, so its conversion to
 * FP32 is exact too), scaled by d_w * d_x and accumulated in FP32. Prefill: the FP32 panel
 * kernel of gemm_avx2.c on exactly dequantized W. Compiled with -mavx2 -mfma -mf16c. */
#include <immintrin.h>
#include <stdlib.h>

#include "target/cpu/gemm.h"

#ifndef TS_GEMMQ_PREFETCH
#define TS_GEMMQ_PREFETCH 1024 /* bytes ahead in the weight stream */
#endif

void ts_cpu_quantize_x_avx2(ts_gemm_qx qx, const float *xp, int K) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int b = 0; b < K; b += TS_QBLOCK) {
        /* packed: e0 o0 (positions b..b+15 even, odd), e1 o1 (b+16..b+31) */
        __m256 v[4] = {_mm256_loadu_ps(xp + b), _mm256_loadu_ps(xp + b + 8), _mm256_loadu_ps(xp + b + 16),
                       _mm256_loadu_ps(xp + b + 24)};
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float amax = _mm_cvtss_f32(h), d = amax / 32767.0f, id = amax > 0 ? 32767.0f / amax : 0.0f;
        qx.d[b / TS_QBLOCK] = d;
        __m256 vid = _mm256_set1_ps(id);
        for (int half = 0; half < 2; half++) {
            __m256i qe = _mm256_cvtps_epi32(_mm256_mul_ps(v[2 * half], vid));
            __m256i qo = _mm256_cvtps_epi32(_mm256_mul_ps(v[2 * half + 1], vid));
            /* per 128-bit lane: (e0 o0 e1 o1) then (e2 o2 e3 o3): natural order after packing */
            __m256i n = _mm256_packs_epi32(_mm256_unpacklo_epi32(qe, qo), _mm256_unpackhi_epi32(qe, qo));
            _mm256_storeu_si256((__m256i *)(qx.q + b + 16 * half), n);
        }
    }
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float f16(const uint8_t *p) {
    uint16_t h;
    __builtin_memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* The 32 weights of one block as two vectors of 16 int16 (elements 0-15, 16-31). */
static inline __attribute__((always_inline)) void block_w16(const uint8_t *blk, ts_dtype dt, __m256i *w0,
                                                           __m256i *w1) {
    if (dt == TS_DTYPE_Q8_0) {
        *w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 2)));
        *w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 18)));
        return;
    }
    const __m128i m4 = _mm_set1_epi8(15), c8 = _mm_set1_epi8(8);
    __m128i v = _mm_loadu_si128((const __m128i *)(blk + 2));
    *w0 = _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_and_si128(v, m4), c8));
    *w1 = _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), m4), c8));
}

/* One W row against G quantized x rows (qx[0..G)): per row the accumulator pair a0, a1 over
 * pairs of blocks, each block's codes widened once for the G rows. The one-row GEMV is the
 * G = 1 instance and a batched decode the others: a row sees the same operations in the same
 * order either way (bit-identical). */
static inline __attribute__((always_inline)) void rows_dot(float *out, const uint8_t *row, ts_dtype dt, size_t bb,
                                                           const ts_gemm_qx *qx, int nb, int G) {
    __m256 a0[3], a1[3];
#pragma GCC unroll 3
    for (int g = 0; g < G; g++) a0[g] = a1[g] = _mm256_setzero_ps();
    int b = 0;
    for (; b + 2 <= nb; b += 2) {
        const uint8_t *p0 = row + (size_t)b * bb, *p1 = p0 + bb;
        _mm_prefetch((const char *)p0 + TS_GEMMQ_PREFETCH, _MM_HINT_T0);
        __m256i w0, w1, v0, v1;
        block_w16(p0, dt, &w0, &w1);
        block_w16(p1, dt, &v0, &v1);
        float d0 = f16(p0), d1 = f16(p1);
#pragma GCC unroll 3
        for (int g = 0; g < G; g++) {
            const __m256i *x = (const __m256i *)(qx[g].q + (size_t)b * TS_QBLOCK);
            __m256i s0 = _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256(x)),
                                          _mm256_madd_epi16(w1, _mm256_loadu_si256(x + 1)));
            __m256i s1 = _mm256_add_epi32(_mm256_madd_epi16(v0, _mm256_loadu_si256(x + 2)),
                                          _mm256_madd_epi16(v1, _mm256_loadu_si256(x + 3)));
            a0[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_set1_ps(d0 * qx[g].d[b]), a0[g]);
            a1[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_set1_ps(d1 * qx[g].d[b + 1]), a1[g]);
        }
    }
    if (b < nb) {
        const uint8_t *p0 = row + (size_t)b * bb;
        __m256i w0, w1;
        block_w16(p0, dt, &w0, &w1);
        float d0 = f16(p0);
#pragma GCC unroll 3
        for (int g = 0; g < G; g++) {
            const __m256i *x = (const __m256i *)(qx[g].q + (size_t)b * TS_QBLOCK);
            __m256i s0 = _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256(x)),
                                          _mm256_madd_epi16(w1, _mm256_loadu_si256(x + 1)));
            a0[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_set1_ps(d0 * qx[g].d[b]), a0[g]);
        }
    }
#pragma GCC unroll 3
    for (int g = 0; g < G; g++) out[g] = hsum(_mm256_add_ps(a0[g], a1[g]));
}

static inline __attribute__((always_inline)) float row_dot(const uint8_t *row, ts_dtype dt, size_t bb,
                                                           ts_gemm_qx qx, int nb) {
    float r;
    rows_dot(&r, row, dt, bb, &qx, nb, 1);
    return r;
}

/* Batched decode: per W row the x rows in groups of up to 3, the row read from memory once. */
static void gemv_rows_batch(float *y, int ldy, const ts_gemm_qx *qx, int S, const uint8_t *W, ts_dtype dt, int K,
                            int n0, int n1) {
    size_t rb = ts_gemm_row_bytes(dt, K);
    int nb = K / TS_QBLOCK;
    float out[3];
    for (int n = n0; n < n1; n++) {
        const uint8_t *row = W + (size_t)n * rb;
        for (int s = 0; s < S; s += 3) {
            int G = S - s < 3 ? S - s : 3;
            /* the type and G constants, so each combination is its own specialized loop */
            if (dt == TS_DTYPE_Q8_0) {
                if (G == 3) rows_dot(out, row, TS_DTYPE_Q8_0, 2 + TS_QBLOCK, qx + s, nb, 3);
                else if (G == 2) rows_dot(out, row, TS_DTYPE_Q8_0, 2 + TS_QBLOCK, qx + s, nb, 2);
                else rows_dot(out, row, TS_DTYPE_Q8_0, 2 + TS_QBLOCK, qx + s, nb, 1);
            } else {
                if (G == 3) rows_dot(out, row, TS_DTYPE_Q4_0, 2 + TS_QBLOCK / 2, qx + s, nb, 3);
                else if (G == 2) rows_dot(out, row, TS_DTYPE_Q4_0, 2 + TS_QBLOCK / 2, qx + s, nb, 2);
                else rows_dot(out, row, TS_DTYPE_Q4_0, 2 + TS_QBLOCK / 2, qx + s, nb, 1);
            }
            for (int g = 0; g < G; g++) y[(size_t)(s + g) * ldy + n] = out[g];
        }
    }
}

void ts_cpu_gemv_batch_q_avx2(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                              int n0, int n1, ts_gemm_tile tile) {
    (void)tile;
    ts_cpu_gemm_q_decode_batch(y, ldy, xp, ldx, W, dt, K, S, n0, n1, ts_cpu_quantize_x_avx2, gemv_rows_batch);
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

void ts_cpu_gemm_q_avx2(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                        int n0, int n1, ts_gemm_tile tile) {
    (void)tile;
    if (n0 >= n1 || S < 1) return;
    if (S >= 2) {
        ts_cpu_gemm_q_panels_avx2(y, ldy, xp, ldx, W, dt, K, S, n0, n1);
        return;
    }
    ts_cpu_gemm_q_decode(y, xp, W, dt, K, n0, n1, ts_cpu_quantize_x_avx2, gemv_rows);
}
