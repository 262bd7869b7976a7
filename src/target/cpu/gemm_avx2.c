/* AVX2+FMA GEMM on BF16 weights. Compiled with -mavx2 -mfma (see CMakeLists.txt) and called
 * only when CPUID reports both. A tile keeps ms x nr accumulators of 8 partial sums; each
 * 16-element step loads one 32-byte BF16 chunk per W row and splits it into even/odd FP32
 * vectors (shift / mask), matching the packed activations. */
#include <immintrin.h>

#include "target/cpu/gemm.h"

#ifndef TS_GEMM_PREFETCH
#define TS_GEMM_PREFETCH 2048 /* bytes ahead */
#endif

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline void bf16x16(const uint16_t *p, __m256 *even, __m256 *odd) {
    __m256i w = _mm256_loadu_si256((const __m256i *)p);
    *even = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    *odd = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u)));
}

/* One tile: MS rows of x (ms <= 3) against NR rows of W (nr <= 4). Written once for the
 * largest shape; the compiler drops the unused accumulators for each constant instantiation. */
static inline __attribute__((always_inline)) void tile(float *y, int ldy, const float *x, int ldx,
                                                       const uint16_t *W, int K, int ms, int nr) {
    /* Fully unrolled so the accumulators stay in registers (without the pragmas GCC keeps
     * them on the stack and the kernel runs at ~60% of the FMA peak). */
    __m256 acc[3][4];
#pragma GCC unroll 3
    for (int i = 0; i < 3; i++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) acc[i][j] = _mm256_setzero_ps();
    for (int b = 0; b < K; b += 16) {
        __m256 xe[3], xo[3];
#pragma GCC unroll 3
        for (int i = 0; i < ms; i++) {
            xe[i] = _mm256_loadu_ps(x + (size_t)i * ldx + b);
            xo[i] = _mm256_loadu_ps(x + (size_t)i * ldx + b + 8);
        }
#pragma GCC unroll 4
        for (int j = 0; j < nr; j++) {
            __m256 we, wo;
            bf16x16(W + (size_t)j * K + b, &we, &wo);
#pragma GCC unroll 3
            for (int i = 0; i < ms; i++) {
                acc[i][j] = _mm256_fmadd_ps(xe[i], we, acc[i][j]);
                acc[i][j] = _mm256_fmadd_ps(xo[i], wo, acc[i][j]);
            }
        }
    }
#pragma GCC unroll 3
    for (int i = 0; i < ms; i++)
#pragma GCC unroll 4
        for (int j = 0; j < nr; j++) y[(size_t)i * ldy + j] = hsum(acc[i][j]);
}

#define TILE_FN(MS, NR)                                                                            \
    static void tile_##MS##x##NR(float *y, int ldy, const float *x, int ldx, const uint16_t *W,    \
                                 int K) {                                                          \
        tile(y, ldy, x, ldx, W, K, MS, NR);                                                        \
    }
TILE_FN(1, 1)
TILE_FN(2, 1)
TILE_FN(3, 1)
TILE_FN(1, 2)
TILE_FN(2, 2)
TILE_FN(3, 2)
TILE_FN(1, 4)
TILE_FN(2, 4)
TILE_FN(3, 4)
#undef TILE_FN

typedef void (*tile_fn)(float *, int, const float *, int, const uint16_t *, int);
static const tile_fn k_tiles[4][5] = {
    {0},
    {0, tile_1x1, tile_1x2, 0, tile_1x4},
    {0, tile_2x1, tile_2x2, 0, tile_2x4},
    {0, tile_3x1, tile_3x2, 0, tile_3x4},
};

/* Decode (one row of x): stream W row after row, four independent accumulator pairs per row
 * so the FMA latency is hidden, prefetching ahead of the single sequential stream. */
static void gemv_rows(float *y, const float *x, const uint16_t *W, int K, int n0, int n1) {
    for (int n = n0; n < n1; n++) {
        const uint16_t *w = W + (size_t)n * K;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int b = 0;
        for (; b + 32 <= K; b += 32) {
            __m256 e0, o0, e1, o1;
            _mm_prefetch((const char *)(w + b) + TS_GEMM_PREFETCH, _MM_HINT_T0);
            bf16x16(w + b, &e0, &o0);
            bf16x16(w + b + 16, &e1, &o1);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + b), e0, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + b + 8), o0, a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + b + 16), e1, a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + b + 24), o1, a3);
        }
        for (; b < K; b += 16) {
            __m256 e0, o0;
            bf16x16(w + b, &e0, &o0);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + b), e0, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + b + 8), o0, a1);
        }
        y[n] = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    }
}

void ts_cpu_gemm_bf16_avx2(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K,
                           int S, int n0, int n1, ts_gemm_tile t) {
    if (S == 1 && t.nr <= 1) {
        gemv_rows(y, xp, W, K, n0, n1);
        return;
    }
    int ms = t.ms < 1 ? 1 : (t.ms > 3 ? 3 : t.ms);
    int nr = t.nr >= 4 ? 4 : (t.nr >= 2 ? 2 : 1);
    int sb = t.sb < ms ? ms : t.sb;
    for (int s0 = 0; s0 < S; s0 += sb) {
        int s1 = s0 + sb < S ? s0 + sb : S;
        int n = n0;
        for (; n + nr <= n1; n += nr) {
            const uint16_t *w = W + (size_t)n * K;
            int s = s0;
            for (; s + ms <= s1; s += ms)
                k_tiles[ms][nr](y + (size_t)s * ldy + n, ldy, xp + (size_t)s * ldx, ldx, w, K);
            for (; s < s1; s++) k_tiles[1][nr](y + (size_t)s * ldy + n, ldy, xp + (size_t)s * ldx, ldx, w, K);
        }
        for (; n < n1; n++) {
            const uint16_t *w = W + (size_t)n * K;
            int s = s0;
            for (; s + ms <= s1; s += ms)
                k_tiles[ms][1](y + (size_t)s * ldy + n, ldy, xp + (size_t)s * ldx, ldx, w, K);
            for (; s < s1; s++) k_tiles[1][1](y + (size_t)s * ldy + n, ldy, xp + (size_t)s * ldx, ldx, w, K);
        }
    }
}
