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
    float mx = -INFINITY;
    for (int j = 0; j < n_ctx; j++) {
        scores[j] = dot(q, k + (size_t)j * stride, hd) * scale;
        if (scores[j] > mx) mx = scores[j];
    }
    double sum = 0;
    for (int j = 0; j < n_ctx; j++) {
        scores[j] = expf(scores[j] - mx);
        sum += scores[j];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < hd; i++) out[i] = 0;
    for (int j = 0; j < n_ctx; j++) axpy(out, scores[j] * inv, v + (size_t)j * stride, hd);
}
