/* AVX-512 BF16 probe: independent vdpbf16ps chains, enough to cover its latency on every port
 * that executes it. Each instruction is 16 lanes x 2 multiply-adds = 64 flops. */
#include <immintrin.h>

#include "target/cpu/probe.h"

double ts_probe_dpbf16_avx512(long iters) {
    union {
        __m512i i;
        __m512bh h;
    } a = {.i = _mm512_set1_epi32(0x3f803f80)}, b = {.i = _mm512_set1_epi32(0x33d633d6)}; /* 1.0, 1e-7 */
    __m512 acc[12];
    for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 12; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a.h, b.h);
    __m512 s = acc[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, acc[i]);
    /* The result feeds the return value so the loop cannot be removed. */
    return (double)iters * 12 * 64 + (_mm512_reduce_add_ps(s) == 12345.0f);
}

double ts_probe_fma_avx512(long iters) {
    __m512 a[12], m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], m, c);
    __m512 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, a[i]);
    return (double)iters * 12 * 32 + (_mm512_reduce_add_ps(s) == 12345.0f);
}

/* Loads as the decode GEMV issues them: 128-byte steps, both lines prefetched 2 KiB ahead. */
double ts_probe_read_avx512(const void *buf, size_t bytes) {
    const char *p = buf, *e = p + (bytes & ~(size_t)127);
    __m512i s0 = _mm512_setzero_si512(), s1 = s0;
    for (; p < e; p += 128) {
        _mm_prefetch(p + 2048, _MM_HINT_T0);
        _mm_prefetch(p + 2048 + 64, _MM_HINT_T0);
        /* xor, not add: the sum of arbitrary bytes as int64 overflows (UB in the reduction) */
        s0 = _mm512_xor_si512(s0, _mm512_load_si512(p));
        s1 = _mm512_xor_si512(s1, _mm512_load_si512(p + 64));
    }
    return (double)(_mm512_reduce_or_epi64(_mm512_xor_si512(s0, s1)) & 0xffff);
}
