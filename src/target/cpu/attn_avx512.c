/* AVX-512 prefill attention tile (FP32): the same contract as ts_cpu_attn_tile_avx2, written as
 * three small matrix products so the FMA units, not loads and stores, set the pace:
 * - scores: 16 keys at a time are transposed (16 x 16 blocks) so that one vector holds one
 *   head dimension of 16 keys; each of the 16 query rows then accumulates q[t][i] (broadcast)
 *   times that vector: 16 scores per row per block, no horizontal sums.
 * - softmax: vectorized per row with an exp accurate to about 1 ulp (range reduction by
 *   ln 2, degree-7 polynomial, vscalefps); causal and tail positions become exact zeros.
 * - values: R rows of the output (24 accumulators: R x hd/16) stay in registers while every
 *   cached value row is read once per group and multiplied by each row's probability.
 * head_dim 16, 32, 64 or 128; the caller uses the AVX2 tile otherwise. The score rows are
 * (n_all + 15) / 16 * 16 floats apart, which the session's scratch provides. */
#include <immintrin.h>
#include <math.h>

#include "target/cpu/attn.h"
#include "core/exp_poly.h"
#include "target/cpu/transpose_avx512.h"

#define INL static inline __attribute__((always_inline))

/* 16 cache elements from element i on, as FP32 (attn.h: an F16 cache widened exactly) */
INL __m512 ld16(const void *p, size_t i, int f16) {
    return f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i)))
               : _mm512_loadu_ps((const float *)p + i);
}

/* exp(x) for x <= 0 (scores minus their maximum); NaN stays NaN. */
static inline __m512 exp512(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(-88.0f), x); /* second operand wins on NaN */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(TS_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(TS_EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(TS_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(ts_exp_taylor[0]);
    for (int i = 1; i <= TS_EXP_DEGREE; i++) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ts_exp_taylor[i]));
    return _mm512_scalef_ps(p, n);
}

static inline __mmask16 first(int n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }

/* sc[0, n) <- softmax, sc[n, ns) <- 0; ns % 16 == 0, n >= 1. */
static void softmax_row(float *sc, int n, int ns) {
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < n; j += 16) mx = _mm512_mask_max_ps(mx, first(n - j), mx, _mm512_loadu_ps(sc + j));
    __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx)), sum = _mm512_setzero_ps();
    int j = 0;
    for (; j < n; j += 16) {
        __m512 e = _mm512_maskz_mov_ps(first(n - j), exp512(_mm512_sub_ps(_mm512_loadu_ps(sc + j), m)));
        _mm512_storeu_ps(sc + j, e);
        sum = _mm512_add_ps(sum, e);
    }
    for (; j < ns; j += 16) _mm512_storeu_ps(sc + j, _mm512_setzero_ps());
    __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (j = 0; j < n; j += 16) _mm512_storeu_ps(sc + j, _mm512_mul_ps(_mm512_loadu_ps(sc + j), inv));
}

/* Scores of 16 query rows (rows >= T repeat row 0, their results are unused) against keys
 * [j0, j0 + 16) (keys >= n_all read as zero). */
INL void score_block(float *sc, int ns, const float *q, int q_stride, int T, const void *k, int stride, int j0,
                     int n_all, int hd, float scale, int f16) {
    __m512 kt[128];
    for (int i0 = 0; i0 < hd; i0 += 16) {
        __m512i r[16];
        for (int t = 0; t < 16; t++)
            r[t] = j0 + t < n_all ? _mm512_castps_si512(ld16(k, ts_kv_idx(j0 + t, stride, hd) + i0, f16)) : _mm512_setzero_si512();
        ts_transpose16_epi32(r);
        for (int c = 0; c < 16; c++) kt[i0 + c] = _mm512_castsi512_ps(r[c]);
    }
    const float *qr[16];
    for (int t = 0; t < 16; t++) qr[t] = q + (size_t)(t < T ? t : 0) * q_stride;
    __m512 acc[16];
#pragma GCC unroll 16
    for (int t = 0; t < 16; t++) acc[t] = _mm512_setzero_ps();
    for (int i = 0; i < hd; i++) {
        __m512 kv = kt[i];
#pragma GCC unroll 16
        for (int t = 0; t < 16; t++) acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(qr[t][i]), kv, acc[t]);
    }
    __m512 s = _mm512_set1_ps(scale);
    for (int t = 0; t < T; t++) _mm512_storeu_ps(sc + (size_t)t * ns + j0, _mm512_mul_ps(acc[t], s));
}

/* out rows [t0, t0 + R) (rows >= T not stored) = sum over keys j < n_all of p[t][j] v[j], with
 * NV = hd / 16 vectors per row; R * NV <= 24 accumulators. pf_rows > 0: row j + pf_rows (below
 * n_all) is prefetched into L2 as row j is read (decode, dec_pv). */
INL void pv_group(float *out, int out_stride, const float *p, int ns, const void *v, size_t v0, int stride, int hd,
                  int n_all, int t0, int T, int R, int NV, int f16, int pf_rows) {
    const int rowb = hd * (f16 ? 2 : 4);
    __m512 acc[16][8];
    const float *pr[16];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
        pr[r] = p + (size_t)(t0 + r < T ? t0 + r : t0) * ns;
#pragma GCC unroll 8
        for (int c = 0; c < NV; c++) acc[r][c] = _mm512_setzero_ps();
    }
    for (int j = 0; j < n_all; j++) {
        size_t vj = v0 + ts_kv_idx(j, stride, hd);
        if (pf_rows && j + pf_rows < n_all) { /* row j + pf_rows into L2 (dec_pv) */
            const char *r = (const char *)v + ts_kv_idx(j + pf_rows, stride, hd) * (f16 ? 2 : 4);
            for (int o = 0; o < rowb; o += 64) _mm_prefetch(r + o, _MM_HINT_T1);
        }
        __m512 vv[8];
#pragma GCC unroll 8
        for (int c = 0; c < NV; c++) vv[c] = ld16(v, vj + 16 * c, f16);
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
            __m512 b = _mm512_set1_ps(pr[r][j]);
#pragma GCC unroll 8
            for (int c = 0; c < NV; c++) acc[r][c] = _mm512_fmadd_ps(b, vv[c], acc[r][c]);
        }
    }
    for (int r = 0; r < R && t0 + r < T; r++)
        for (int c = 0; c < NV; c++) _mm512_storeu_ps(out + (size_t)(t0 + r) * out_stride + 16 * c, acc[r][c]);
}

#define PV_FN(NV, R, F16, NAME)                                                                        \
    static void NAME(float *out, int out_stride, const float *p, int ns, const void *v, int stride, int n_all, int T) { \
        for (int t0 = 0; t0 < T; t0 += R) pv_group(out, out_stride, p, ns, v, 0, stride, 16 * NV, n_all, t0, T, R, NV, F16, 0); \
    }
PV_FN(1, 16, 0, pv_1)
PV_FN(2, 12, 0, pv_2)
PV_FN(4, 6, 0, pv_4)
PV_FN(8, 3, 0, pv_8)
PV_FN(1, 16, 1, pv_1h)
PV_FN(2, 12, 1, pv_2h)
PV_FN(4, 6, 1, pv_4h)
PV_FN(8, 3, 1, pv_8h)
#undef PV_FN

int ts_cpu_attn_tile_avx512_ok(int hd) { return hd == 16 || hd == 32 || hd == 64 || hd == 128; }

static void score_blocks_f32(float *sc, int ns, const float *q, int q_stride, int T, const void *k, int stride,
                             int n_all, int hd, float scale) {
    for (int j0 = 0; j0 < n_all; j0 += 16) score_block(sc, ns, q, q_stride, T, k, stride, j0, n_all, hd, scale, 0);
}
static void score_blocks_f16(float *sc, int ns, const float *q, int q_stride, int T, const void *k, int stride,
                             int n_all, int hd, float scale) {
    for (int j0 = 0; j0 < n_all; j0 += 16) score_block(sc, ns, q, q_stride, T, k, stride, j0, n_all, hd, scale, 1);
}

void ts_cpu_attn_tile_avx512(float *out, int out_stride, const float *q, int q_stride, const void *k,
                             const void *v, int n_ctx0, int T, int stride, int hd, float scale, float *scores, int f16) {
    int n_all = n_ctx0 + T - 1, ns = (n_all + 15) & ~15;
    (f16 ? score_blocks_f16 : score_blocks_f32)(scores, ns, q, q_stride, T, k, stride, n_all, hd, scale);
    for (int t = 0; t < T; t++) softmax_row(scores + (size_t)t * ns, n_ctx0 + t, ns);
    switch (hd) {
    case 16: (f16 ? pv_1h : pv_1)(out, out_stride, scores, ns, v, stride, n_all, T); break;
    case 32: (f16 ? pv_2h : pv_2)(out, out_stride, scores, ns, v, stride, n_all, T); break;
    case 64: (f16 ? pv_4h : pv_4)(out, out_stride, scores, ns, v, stride, n_all, T); break;
    default: (f16 ? pv_8h : pv_8)(out, out_stride, scores, ns, v, stride, n_all, T); break;
    }
}

/* ---- Decode: the G q heads of one kv head (a GQA group) against its n cached rows. Each cached
 * key and value row is read once for the whole group: scores per block of 8 keys, every head
 * dotting the same 8 rows (16 accumulators for 2 heads, the block re-read from L1 for the next 2),
 * then reduced 8 at a time by one transpose-add tree; the vectorized softmax above; values by
 * pv_group with all G heads as its rows, over column slices small enough that G x slice stays in
 * registers. Against the AVX2 group kernel, which also reads each row once for the group: full-width
 * vectors, a vectorized exp, one reduction tree per 8 keys instead of a horizontal sum per key
 * (test_cpu_attn checks it against the scalar row). */

/* lane i = the sum of v[i]'s 16 lanes */
static inline __m256 hsum8(const __m512 v[8]) {
    __m512 w[4], x[2];
    for (int i = 0; i < 4; i++) /* 256-bit halves added: [v2i | v2i+1] as 8-lane partials */
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int j = 0; j < 2; j++) /* 128-bit lane m of x[j]: v[4j + m] as 4-lane partials */
        x[j] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * j], w[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(w[2 * j], w[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    __m512 y = _mm512_add_ps(_mm512_unpacklo_ps(x[0], x[1]), _mm512_unpackhi_ps(x[0], x[1]));
    __m512 z = _mm512_add_ps(y, _mm512_permute_ps(y, _MM_SHUFFLE(1, 0, 3, 2))); /* lane m: v[m], v[m + 4], .. */
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(idx, z));
}

/* Decode reads the cache from DRAM (the weights streamed since the layer's last token evicted it),
 * where the hardware prefetchers alone fed one core about 15 GB/s (Zen 5, 128 keys of head_dim 128
 * in F16 per group call: 4.1-4.5 us from DRAM against 0.74 with the rows in L1/L2). So the score
 * loop prefetches the keys KEYS_AHEAD_BYTES ahead into L1 (16 KiB: 3.1-3.3 us; 8 KiB 3.2-3.4, 32
 * KiB 3.5-3.7) and KEYS_AHEAD_L2_BYTES ahead into L2, and dec_pv the values VALUES_AHEAD_L2_BYTES
 * ahead into L2 as it reads them; a group whose values are at most VALUES_SCORES_L2_BYTES has
 * them taken into L2 by the score loop as well, block by block, for dec_pv right after.
 * Until session 31 that last rule had held up to 512 KiB of values, and no other value or far key
 * was prefetched: against it these decode Qwen3-0.6B Q4_0 (2 threads, F16 cache, Zen 5, one
 * process, alternating rounds) with 0.76-0.84 of the attention time at context 1024 (0.89-0.94 of
 * the token), 0.74 at 512 and 0.86-0.93 at 4096 (0.90-0.97), Llama-3.2-1B Q4_0 0.74 and 0.80; at
 * 128 within 2% either way (docs/performance.md, session 31). */
#define KEYS_AHEAD_BYTES 16384
#define KEYS_AHEAD_L2_BYTES 32768
#define VALUES_AHEAD_L2_BYTES 24576
#define VALUES_SCORES_L2_BYTES 65536
/* rows [j, j + rows) of a cache, rows <= 8 (one run: TS_KV_BLOCK % 8 == 0), element idx on, into
 * L1 or L2 */
INL void prefetch_rows(const void *c, size_t idx, int rows, int NV, int f16, int l2) {
    const char *p = (const char *)c + idx * (f16 ? 2 : 4);
    int bytes = rows * NV * 16 * (f16 ? 2 : 4);
    for (int o = 0; o < bytes; o += 64)
        if (l2) _mm_prefetch(p + o, _MM_HINT_T1);
        else _mm_prefetch(p + o, _MM_HINT_T0);
}

/* sc[h * ns + j] = scale * q_h . k_j for the G heads and keys [0, n); NV = hd / 16. Writes whole
 * blocks of 8 (up to n rounded up to 8, <= ns), reading (and prefetching) no key or value row at
 * or past n. */
INL void dec_scores(float *sc, int ns, const float *q, int G, const void *k, const void *v, int stride, int n, int NV,
                    float scale, int f16) {
    const __m512 z = _mm512_setzero_ps();
    const __m256 s = _mm256_set1_ps(scale);
    const int row_bytes = NV * 16 * (f16 ? 2 : 4), ahead = (KEYS_AHEAD_BYTES / row_bytes + 7) & ~7;
    const int far = (KEYS_AHEAD_L2_BYTES / row_bytes + 7) & ~7, v_l2 = (long)n * row_bytes <= VALUES_SCORES_L2_BYTES;
    for (int j = 0; j < ahead && j < n; j += 8)
        prefetch_rows(k, ts_kv_idx(j, stride, NV * 16), n - j < 8 ? n - j : 8, NV, f16, 0);
    for (int j = 0; j < n; j += 8) {
        /* j % 8 == 0 and TS_KV_BLOCK % 8 == 0: the 8 rows are consecutive rows of one block */
        int nk = n - j < 8 ? n - j : 8;
        size_t kb = ts_kv_idx(j, stride, NV * 16);
        if (j + ahead < n)
            prefetch_rows(k, ts_kv_idx(j + ahead, stride, NV * 16), n - j - ahead < 8 ? n - j - ahead : 8, NV, f16, 0);
        if (j + far < n)
            prefetch_rows(k, ts_kv_idx(j + far, stride, NV * 16), n - j - far < 8 ? n - j - far : 8, NV, f16, 1);
        if (v_l2) prefetch_rows(v, kb, nk, NV, f16, 1);
        for (int h = 0; h < G; h += 2) {
            const float *q0 = q + (size_t)h * NV * 16, *q1 = h + 1 < G ? q0 + NV * 16 : q0;
            __m512 a0[8], a1[8];
#pragma GCC unroll 8
            for (int t = 0; t < 8; t++) a0[t] = a1[t] = z;
            for (int c = 0; c < NV; c++) {
                __m512 x0 = _mm512_loadu_ps(q0 + 16 * c), x1 = _mm512_loadu_ps(q1 + 16 * c);
#pragma GCC unroll 8
                for (int t = 0; t < 8; t++) {
                    __m512 kv = t < nk ? ld16(k, kb + (size_t)t * NV * 16 + 16 * c, f16) : z;
                    a0[t] = _mm512_fmadd_ps(x0, kv, a0[t]);
                    a1[t] = _mm512_fmadd_ps(x1, kv, a1[t]);
                }
            }
            _mm256_storeu_ps(sc + (size_t)h * ns + j, _mm256_mul_ps(hsum8(a0), s));
            if (h + 1 < G) _mm256_storeu_ps(sc + (size_t)(h + 1) * ns + j, _mm256_mul_ps(hsum8(a1), s));
        }
    }
}

/* out (G x hd) = p (G rows ns apart) . v over keys [0, n): column slices of S vectors, all G heads
 * at once, G x S accumulators (at most 16). The shapes of real models (head_dim 64 or 128, groups
 * up to 8) get pv_group with constant arguments, so the accumulators stay in registers; any other
 * shape one head and one vector at a time. */
INL void dec_pv(float *out, const float *p, int ns, const void *v, int stride, int n, int NV, int G, int f16) {
    int cap = G <= 2 ? 8 : G <= 4 ? 4 : G <= 8 ? 2 : 1, S = NV < cap ? NV : cap;
    int pf = VALUES_AHEAD_L2_BYTES / (NV * 16 * (f16 ? 2 : 4)); /* rows ahead, prefetched by the first slice */
#define PV_CASE(GG, SS)                                                                                  \
    if (G == GG && S == SS) {                                                                            \
        for (int c = 0; c < NV; c += SS) pv_group(out + 16 * c, NV * 16, p, ns, v, 16 * c, stride, NV * 16, n, 0, GG, GG, SS, f16, c ? 0 : pf); \
        return;                                                                                          \
    }
    PV_CASE(1, 8) PV_CASE(1, 4) PV_CASE(2, 8) PV_CASE(2, 4) PV_CASE(3, 4) PV_CASE(4, 4)
    PV_CASE(5, 2) PV_CASE(6, 2) PV_CASE(7, 2) PV_CASE(8, 2)
#undef PV_CASE
    for (int h = 0; h < G; h++)
        for (int c = 0; c < NV; c++)
            pv_group(out + (size_t)h * NV * 16 + 16 * c, NV * 16, p + (size_t)h * ns, ns, v, 16 * c, stride, NV * 16, n, 0, 1,
                     1, 1, f16, h || c ? 0 : pf);
}

INL void group_t(float *out, const float *q, const void *k, const void *v, int n_ctx, int stride, int hd, float scale,
                 float *scores, int G, int f16) {
    int NV = hd / 16, ns = (n_ctx + 15) & ~15;
    switch (NV) { /* constant NV for the score loop */
    case 1: dec_scores(scores, ns, q, G, k, v, stride, n_ctx, 1, scale, f16); break;
    case 2: dec_scores(scores, ns, q, G, k, v, stride, n_ctx, 2, scale, f16); break;
    case 4: dec_scores(scores, ns, q, G, k, v, stride, n_ctx, 4, scale, f16); break;
    default: dec_scores(scores, ns, q, G, k, v, stride, n_ctx, 8, scale, f16); break;
    }
    for (int h = 0; h < G; h++) softmax_row(scores + (size_t)h * ns, n_ctx, ns);
    dec_pv(out, scores, ns, v, stride, n_ctx, NV, G, f16);
}

/* the cache type a constant in each copy */
void ts_cpu_attn_group_avx512(float *out, const float *q, const void *k, const void *v, int n_ctx, int stride,
                              int hd, float scale, float *scores, int G, int f16) {
    if (f16) group_t(out, q, k, v, n_ctx, stride, hd, scale, scores, G, 1);
    else group_t(out, q, k, v, n_ctx, stride, hd, scale, scores, G, 0);
}
