/* AVX2 probe kernels: independent FMA chains (enough to cover latency x ports), and a
 * 4-accumulator streaming sum. */
#include <immintrin.h>

#include "target/cpu/probe.h"

double ts_probe_fma_avx2(long iters) {
    __m256 a[12], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
    __m256 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
    float out[8];
    _mm256_storeu_ps(out, s);
    /* The result feeds the return value so the loop cannot be removed. */
    return (double)iters * 12 * 8 * 2 + (out[0] == 12345.0f);
}

double ts_probe_read_avx2(const void *buf, size_t bytes) {
    const __m256i *p = buf;
    size_t n = bytes / 32;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 = _mm256_add_epi64(s0, _mm256_load_si256(p + i));
        s1 = _mm256_add_epi64(s1, _mm256_load_si256(p + i + 1));
        s2 = _mm256_add_epi64(s2, _mm256_load_si256(p + i + 2));
        s3 = _mm256_add_epi64(s3, _mm256_load_si256(p + i + 3));
    }
    s0 = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
    unsigned long long out[4]; /* unsigned: the sum of arbitrary bytes wraps instead of being UB */
    _mm256_storeu_si256((__m256i *)out, s0);
    return (double)((out[0] + out[1] + out[2] + out[3]) & 0xffff);
}
