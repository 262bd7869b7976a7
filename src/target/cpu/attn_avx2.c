/* AVX2 attention row: q.k dot products, softmax, and the p*v accumulation over head_dim (a
 * multiple of 8 on every supported model; the tail is handled anyway), inlined into one call
 * per (position, head) rather than two indirect calls per cached key. */
#include <immintrin.h>

#include <math.h>

#include "io/quant.h"
#include "target/cpu/attn.h"

#define INL static inline __attribute__((always_inline))

/* 8 cache elements from element i on, as FP32 (attn.h: an F16 cache widened exactly) */
INL __m256 ld8(const void *p, size_t i, int f16) {
    return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)))
               : _mm256_loadu_ps((const float *)p + i);
}

/* a . (the cache row at element b) */
INL float dot(const float *a, const void *k, size_t b, int n, int f16) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), ld8(k, b + i, f16), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), ld8(k, b + i + 8, f16), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), ld8(k, b + i, f16), s0);
    s0 = _mm256_add_ps(s0, s1);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    float r = _mm_cvtss_f32(s);
    for (; i < n; i++) r += a[i] * ts_kv_get(k, b + i, f16);
    return r;
}

/* y += a * (the cache row at element b) */
INL void axpy(float *y, float a, const void *v, size_t b, int n, int f16) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, ld8(v, b + i, f16), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * ts_kv_get(v, b + i, f16);
}

void ts_cpu_kv_f16_rows_avx2(uint16_t *dst, const float *src, int n, int ld, int hd) {
    const __m256 hi = _mm256_set1_ps(65504.0f), lo = _mm256_set1_ps(-65504.0f);
    for (int r = 0; r < n; r++) {
        const float *x = src + (size_t)r * ld;
        uint16_t *y = dst + (size_t)r * hd;
        int i = 0;
        for (; i + 8 <= hd; i += 8) { /* the constant first: min/max return the second operand, x, on NaN */
            __m256 c = _mm256_max_ps(lo, _mm256_min_ps(hi, _mm256_loadu_ps(x + i)));
            _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
        for (; i < hd; i++) y[i] = ts_f32_to_f16_sat(x[i]);
    }
}

/* s0 + s1 of dot()'s two accumulators for 4 keys at once (q loaded once per block for the 4
 * of them), before the horizontal sum: rows k, k + n, k + 2n, k + 3n (4 rows of one block of
 * the cache). hd % 8 == 0. */
INL void dot4_acc(const float *q, const void *k, size_t kb, int n, __m256 r[4], int f16) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    size_t k0 = kb, k1 = kb + n, k2 = kb + 2 * (size_t)n, k3 = kb + 3 * (size_t)n;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 x = _mm256_loadu_ps(q + i), y = _mm256_loadu_ps(q + i + 8);
        a0 = _mm256_fmadd_ps(x, ld8(k, k0 + i, f16), a0);
        b0 = _mm256_fmadd_ps(y, ld8(k, k0 + i + 8, f16), b0);
        a1 = _mm256_fmadd_ps(x, ld8(k, k1 + i, f16), a1);
        b1 = _mm256_fmadd_ps(y, ld8(k, k1 + i + 8, f16), b1);
        a2 = _mm256_fmadd_ps(x, ld8(k, k2 + i, f16), a2);
        b2 = _mm256_fmadd_ps(y, ld8(k, k2 + i + 8, f16), b2);
        a3 = _mm256_fmadd_ps(x, ld8(k, k3 + i, f16), a3);
        b3 = _mm256_fmadd_ps(y, ld8(k, k3 + i + 8, f16), b3);
    }
    if (i + 8 <= n) {
        __m256 x = _mm256_loadu_ps(q + i);
        a0 = _mm256_fmadd_ps(x, ld8(k, k0 + i, f16), a0);
        a1 = _mm256_fmadd_ps(x, ld8(k, k1 + i, f16), a1);
        a2 = _mm256_fmadd_ps(x, ld8(k, k2 + i, f16), a2);
        a3 = _mm256_fmadd_ps(x, ld8(k, k3 + i, f16), a3);
    }
    r[0] = _mm256_add_ps(a0, b0), r[1] = _mm256_add_ps(a1, b1);
    r[2] = _mm256_add_ps(a2, b2), r[3] = _mm256_add_ps(a3, b3);
}

/* dot()'s reduction tree (lo + hi halves, then elements 0+2 and 1+3, then those two) applied
 * to 4 vectors at once; per lane: [ (0+2) (1+3) of the 1st/3rd vector | of the 2nd/4th ]. */
INL __m256 tree4(const __m256 r[4]) {
    __m256 x = _mm256_add_ps(_mm256_permute2f128_ps(r[0], r[1], 0x20), _mm256_permute2f128_ps(r[0], r[1], 0x31));
    __m256 y = _mm256_add_ps(_mm256_permute2f128_ps(r[2], r[3], 0x20), _mm256_permute2f128_ps(r[2], r[3], 0x31));
    return _mm256_add_ps(_mm256_shuffle_ps(x, y, _MM_SHUFFLE(1, 0, 1, 0)), _mm256_shuffle_ps(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
}

/* Scores of one query row over keys [j0, j1), 8 keys at a time with the arithmetic dot() gives
 * each (so a score does not depend on the blocking), the rest one by one. */
INL void scores_row(float *sc, const float *q, const void *k, int j0, int j1, int stride, int hd, float scale, int f16) {
    int j = j0;
    if (hd % 8 == 0) {
        const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        const __m256 vs = _mm256_set1_ps(scale);
        for (; j + 8 <= j1; j += 8) {
            __m256 r[4];
            /* j % 8 == 0 (blocks of GROUP_KEYS from 0): the 8 rows lie in one cache block */
            dot4_acc(q, k, ts_kv_idx(j, stride, hd), hd, r, f16);
            __m256 z0 = tree4(r);
            dot4_acc(q, k, ts_kv_idx(j + 4, stride, hd), hd, r, f16);
            __m256 z1 = tree4(r);
            /* hadd: per lane [key0 key2 key4 key6 | key1 key3 key5 key7] */
            __m256 d = _mm256_permutevar8x32_ps(_mm256_hadd_ps(z0, z1), perm);
            _mm256_storeu_ps(sc + j, _mm256_mul_ps(d, vs));
        }
    }
    for (; j < j1; j++) sc[j] = dot(q, k, ts_kv_idx(j, stride, hd), hd, f16) * scale;
}

/* out[0, hd) (+)= sum over keys [j0, j1) of p_j v_j, in key order with one fma per element and
 * key as axpy() did, 64 output floats held in registers at a time. first: out starts at 0. */
INL void pv_row(float *out, const float *p, const void *v, int j0, int j1, int stride, int hd, int first, int f16) {
    int i = 0;
    for (; i + 64 <= hd; i += 64) {
        __m256 o[8];
        for (int u = 0; u < 8; u++) o[u] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(out + i + 8 * u);
        for (int t = j0; t < j1; t++) {
            size_t vj = ts_kv_idx(t, stride, hd) + i;
            __m256 pt = _mm256_broadcast_ss(p + t);
#pragma GCC unroll 8
            for (int u = 0; u < 8; u++) o[u] = _mm256_fmadd_ps(pt, ld8(v, vj + 8 * u, f16), o[u]);
        }
        for (int u = 0; u < 8; u++) _mm256_storeu_ps(out + i + 8 * u, o[u]);
    }
    for (; i + 8 <= hd; i += 8) {
        __m256 o = first ? _mm256_setzero_ps() : _mm256_loadu_ps(out + i);
        for (int t = j0; t < j1; t++) o = _mm256_fmadd_ps(_mm256_broadcast_ss(p + t), ld8(v, ts_kv_idx(t, stride, hd) + i, f16), o);
        _mm256_storeu_ps(out + i, o);
    }
    for (; i < hd; i++) {
        float o = first ? 0.0f : out[i];
        for (int t = j0; t < j1; t++) o += p[t] * ts_kv_get(v, ts_kv_idx(t, stride, hd) + i, f16);
        out[i] = o;
    }
}

/* Keys per block of the grouped row: a block of K (or V) rows stays in L1 while every head of
 * the group reads it. */
#define GROUP_KEYS 32

/* Decode reads the cache from DRAM, so both loops prefetch into L1 the rows KEYS_AHEAD_BYTES
 * (keys) and VALUES_AHEAD_BYTES (values) ahead, rounded up to whole blocks of GROUP_KEYS rows.
 * Without them, Qwen3-0.6B Q4_0 on this variant (2 threads, F16 cache, Zen 5, one process,
 * alternating rounds) took 1.17 (context 128) to 1.22 (4096) times the attention time, 1.13 at
 * 4096 of the token; prefetching into L2 as well, 32 / 24 KiB ahead, was no faster
 * (docs/performance.md, session 31). */
#define KEYS_AHEAD_BYTES 8192
#define VALUES_AHEAD_BYTES 4096
_Static_assert(TS_KV_BLOCK % GROUP_KEYS == 0, "a block of keys is one run of the cache");

/* rows [j, j + GROUP_KEYS) of a cache, those below n, into L1 */
INL void prefetch_block(const void *c, int j, int n, int stride, int hd, int f16) {
    if (j >= n) return;
    int rows = n - j < GROUP_KEYS ? n - j : GROUP_KEYS;
    const char *p = (const char *)c + ts_kv_idx(j, stride, hd) * (f16 ? 2 : 4);
    int bytes = rows * hd * (f16 ? 2 : 4);
    for (int o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}

INL void group_t(float *out, const float *q, const void *k, const void *v, int n_ctx, int stride, int hd, float scale,
                 float *scores, int G, int f16) {
    const int blk = GROUP_KEYS * hd * (f16 ? 2 : 4); /* bytes of a block of rows */
    const int ka = (KEYS_AHEAD_BYTES + blk - 1) / blk * GROUP_KEYS, va = (VALUES_AHEAD_BYTES + blk - 1) / blk * GROUP_KEYS;
    for (int j = 0; j < ka; j += GROUP_KEYS) prefetch_block(k, j, n_ctx, stride, hd, f16);
    for (int j = 0; j < n_ctx; j += GROUP_KEYS) {
        int j1 = j + GROUP_KEYS < n_ctx ? j + GROUP_KEYS : n_ctx;
        prefetch_block(k, j + ka, n_ctx, stride, hd, f16);
        for (int h = 0; h < G; h++)
            scores_row(scores + (size_t)h * n_ctx, q + (size_t)h * hd, k, j, j1, stride, hd, scale, f16);
    }
    for (int h = 0; h < G; h++) ts_cpu_softmax(scores + (size_t)h * n_ctx, n_ctx);
    for (int j = 0; j < va; j += GROUP_KEYS) prefetch_block(v, j, n_ctx, stride, hd, f16);
    for (int j = 0; j < n_ctx; j += GROUP_KEYS) {
        int j1 = j + GROUP_KEYS < n_ctx ? j + GROUP_KEYS : n_ctx;
        prefetch_block(v, j + va, n_ctx, stride, hd, f16);
        for (int h = 0; h < G; h++) pv_row(out + (size_t)h * hd, scores + (size_t)h * n_ctx, v, j, j1, stride, hd, j == 0, f16);
    }
}

/* the cache type a constant in each copy */
void ts_cpu_attn_group_avx2(float *out, const float *q, const void *k, const void *v, int n_ctx, int stride,
                            int hd, float scale, float *scores, int G, int f16) {
    if (f16) group_t(out, q, k, v, n_ctx, stride, hd, scale, scores, G, 1);
    else group_t(out, q, k, v, n_ctx, stride, hd, scale, scores, G, 0);
}

/* One query row: the grouped form with a group of one, the same arithmetic per head. */
void ts_cpu_attn_row_avx2(float *out, const float *q, const void *k, const void *v, int n_ctx,
                          int stride, int hd, float scale, float *scores, int f16) {
    ts_cpu_attn_group_avx2(out, q, k, v, n_ctx, stride, hd, scale, scores, 1, f16);
}

/* Dots of 8 query rows with one key row, reduced together: one transpose-add tree for the 8
 * results instead of 8 separate horizontal sums. n % 8 == 0. */
INL __m256 dot8(const float *q, int q_stride, const void *k, size_t kj, int n, int f16) {
    __m256 a[8];
    for (int t = 0; t < 8; t++) a[t] = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) {
        __m256 kv = ld8(k, kj + i, f16);
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
INL float dot1(const float *q, const void *k, size_t kj, int n, int f16) {
    __m256 a = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), ld8(k, kj + i, f16), a);
    float e[8];
    _mm256_storeu_ps(e, a);
    return ((e[0] + e[1]) + (e[2] + e[3])) + ((e[4] + e[5]) + (e[6] + e[7]));
}

INL void tile_t(float *out, int out_stride, const float *q, int q_stride, const void *k, const void *v, int n_ctx0,
                int T, int stride, int hd, float scale, float *scores, int f16) {
    int n_all = n_ctx0 + T - 1; /* keys the last row sees */
    for (int j = 0; j < n_all; j++) {
        size_t kj = ts_kv_idx(j, stride, hd);
        int t0 = j - n_ctx0 + 1 > 0 ? j - n_ctx0 + 1 : 0; /* first row that may see key j */
        int t = t0;
        if (hd % 8 == 0)
            for (; t + 8 <= T; t += 8) {
                float d[8];
                _mm256_storeu_ps(d, _mm256_mul_ps(dot8(q + (size_t)t * q_stride, q_stride, k, kj, hd, f16), _mm256_set1_ps(scale)));
                for (int u = 0; u < 8; u++) scores[(size_t)(t + u) * n_all + j] = d[u];
            }
        if (hd % 8 == 0)
            for (; t < T; t++) scores[(size_t)t * n_all + j] = dot1(q + (size_t)t * q_stride, k, kj, hd, f16) * scale;
        for (; t < T; t++) scores[(size_t)t * n_all + j] = dot(q + (size_t)t * q_stride, k, kj, hd, f16) * scale;
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
        size_t vj = ts_kv_idx(j, stride, hd);
        int t0 = j - n_ctx0 + 1 > 0 ? j - n_ctx0 + 1 : 0;
        for (int t = t0; t < T; t++) axpy(out + (size_t)t * out_stride, scores[(size_t)t * n_all + j], v, vj, hd, f16);
    }
}

void ts_cpu_attn_tile_avx2(float *out, int out_stride, const float *q, int q_stride, const void *k,
                           const void *v, int n_ctx0, int T, int stride, int hd, float scale,
                           float *scores, int f16) {
    if (f16) tile_t(out, out_stride, q, q_stride, k, v, n_ctx0, T, stride, hd, scale, scores, 1);
    else tile_t(out, out_stride, q, q_stride, k, v, n_ctx0, T, stride, hd, scale, scores, 0);
}
