/* AVX2 attention row: q.k dot products, softmax, and the p*v accumulation over head_dim (a
 * multiple of 8 on every supported model; the tail is handled anyway), inlined into one call
 * per (position, head) rather than two indirect calls per cached key. */
#include <immintrin.h>

#include <math.h>

#include "target/cpu/attn.h"

static inline float dot(const float *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s0 = _mm256_add_ps(s0, s1);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    float r = _mm_cvtss_f32(s);
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

static inline void axpy(float *y, float a, const float *x, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

void ts_cpu_attn_row_avx2(float *out, const float *q, const float *k, const float *v, int n_ctx,
                          int stride, int hd, float scale, float *scores) {
    for (int j = 0; j < n_ctx; j++) scores[j] = dot(q, k + (size_t)j * stride, hd) * scale;
    ts_cpu_softmax(scores, n_ctx);
    for (int i = 0; i < hd; i++) out[i] = 0;
    for (int j = 0; j < n_ctx; j++) axpy(out, scores[j], v + (size_t)j * stride, hd);
}

/* Dots of 8 query rows with one key row, reduced together: one transpose-add tree for the 8
 * results instead of 8 separate horizontal sums. n % 8 == 0. */
static inline __m256 dot8(const float *q, int q_stride, const float *kj, int n) {
    __m256 a[8];
    for (int t = 0; t < 8; t++) a[t] = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) {
        __m256 kv = _mm256_loadu_ps(kj + i);
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) a[t] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)t * q_stride + i), kv, a[t]);
    }
    __m256 h0 = _mm256_hadd_ps(a[0], a[1]), h1 = _mm256_hadd_ps(a[2], a[3]);
    __m256 h2 = _mm256_hadd_ps(a[4], a[5]), h3 = _mm256_hadd_ps(a[6], a[7]);
    __m256 h01 = _mm256_hadd_ps(h0, h1), h23 = _mm256_hadd_ps(h2, h3);
    return _mm256_add_ps(_mm256_permute2f128_ps(h01, h23, 0x20), _mm256_permute2f128_ps(h01, h23, 0x31));
}

/* One query row's dot with the arithmetic dot8 gives each of its rows (one accumulator, the
 * same reduction tree), so a row's scores do not depend on whether it fell in a group of 8 or
 * in the tile's remainder: prefill is split-invariant (tests/test_cpu_prefix.c). n % 8 == 0. */
static inline float dot1(const float *q, const float *kj, int n) {
    __m256 a = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(kj + i), a);
    float e[8];
    _mm256_storeu_ps(e, a);
    return ((e[0] + e[1]) + (e[2] + e[3])) + ((e[4] + e[5]) + (e[6] + e[7]));
}

void ts_cpu_attn_tile_avx2(float *out, int out_stride, const float *q, int q_stride, const float *k,
                           const float *v, int n_ctx0, int T, int stride, int hd, float scale,
                           float *scores) {
    int n_all = n_ctx0 + T - 1; /* keys the last row sees */
    for (int j = 0; j < n_all; j++) {
        const float *kj = k + (size_t)j * stride;
        int t0 = j - n_ctx0 + 1 > 0 ? j - n_ctx0 + 1 : 0; /* first row that may see key j */
        int t = t0;
        if (hd % 8 == 0)
            for (; t + 8 <= T; t += 8) {
                float d[8];
                _mm256_storeu_ps(d, _mm256_mul_ps(dot8(q + (size_t)t * q_stride, q_stride, kj, hd), _mm256_set1_ps(scale)));
                for (int u = 0; u < 8; u++) scores[(size_t)(t + u) * n_all + j] = d[u];
            }
        if (hd % 8 == 0)
            for (; t < T; t++) scores[(size_t)t * n_all + j] = dot1(q + (size_t)t * q_stride, kj, hd) * scale;
        for (; t < T; t++) scores[(size_t)t * n_all + j] = dot(q + (size_t)t * q_stride, kj, hd) * scale;
    }
    for (int t = 0; t < T; t++) {
        float *sc = scores + (size_t)t * n_all;
        int n = n_ctx0 + t;
        ts_cpu_softmax(sc, n);
        for (int j = n; j < n_all; j++) sc[j] = 0; /* causal mask */
        float *o = out + (size_t)t * out_stride;
        for (int i = 0; i < hd; i++) o[i] = 0;
    }
    for (int j = 0; j < n_all; j++) {
        const float *vj = v + (size_t)j * stride;
        int t0 = j - n_ctx0 + 1 > 0 ? j - n_ctx0 + 1 : 0;
        for (int t = t0; t < T; t++) axpy(out + (size_t)t * out_stride, scores[(size_t)t * n_all + j], vj, hd);
    }
}
