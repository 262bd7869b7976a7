/* Element-wise row work of a layer in AVX2 + FMA, for the avx2 and avx512bf16 variants alike (one
 * code, so both variants compute the same bits). In decode these run between two GEMVs while the
 * memory idles: scalar expf over a thread's 1536 gate values took 2.7 us a layer on Zen 5, 1.4%
 * of a Qwen3-0.6B Q4_0 token in a fast period, this loop about a tenth of it. */
#include <immintrin.h>

#include "core/exp_poly.h"
#include "target/cpu/rows.h"

/* exp(x) as exp_poly.h computes it, within 0.92 ulp over [-87, 88] (a scratch sweep in steps of
 * 1e-4): x clamped to [-87, 88] (so 2^n stays a normal float: exp(88) < FLT_MAX, exp(-87) >
 * FLT_MIN), 2^n put in the exponent bits. NaN stays NaN (min/max return their second operand, x,
 * on NaN). */
static inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(TS_EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(TS_EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(TS_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(ts_exp_taylor[0]);
    for (int i = 1; i <= TS_EXP_DEGREE; i++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ts_exp_taylor[i]));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* Lanes [0, n) of 8 set (n < 8: the tail, loaded and stored masked). */
static inline __m256i lanes(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

void ts_cpu_silu_mul_avx2(float *g, const float *u, int n) {
    const __m256 one = _mm256_set1_ps(1.0f), below = _mm256_set1_ps(-88.0f), nzero = _mm256_set1_ps(-0.0f);
    for (int i = 0; i < n; i += 8) {
        /* every element the same operations, the tail too: a value does not depend on where a
         * thread's share begins */
        __m256i m = lanes(n - i);
        __m256 gv = _mm256_maskload_ps(g + i, m), uv = _mm256_maskload_ps(u + i, m);
        __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv));
        __m256 r = _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), uv);
        /* below -88 the true silu underflows (|g| e^g < 1e-36): -0 * u, not g / e^88 * u, which
         * the clamp in exp8 would give for a huge negative g */
        r = _mm256_blendv_ps(r, _mm256_mul_ps(nzero, uv), _mm256_cmp_ps(gv, below, _CMP_LT_OQ));
        _mm256_maskstore_ps(g + i, m, r);
    }
}
