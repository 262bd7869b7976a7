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
#include "target/cpu/transpose_avx512.h"

/* exp(x) for x <= 0 (scores minus their maximum); NaN stays NaN. */
static inline __m512 exp512(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(-88.0f), x); /* second operand wins on NaN */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
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
static void score_block(float *sc, int ns, const float *q, int q_stride, int T, const float *k, int stride, int j0,
                        int n_all, int hd, float scale) {
    __m512 kt[128];
    for (int i0 = 0; i0 < hd; i0 += 16) {
        __m512i r[16];
        for (int t = 0; t < 16; t++)
            r[t] = j0 + t < n_all ? _mm512_loadu_si512(k + (size_t)(j0 + t) * stride + i0) : _mm512_setzero_si512();
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
 * NV = hd / 16 vectors per row; R * NV <= 24 accumulators. */
static inline __attribute__((always_inline)) void pv_group(float *out, int out_stride, const float *p, int ns,
                                                           const float *v, int stride, int n_all, int t0, int T,
                                                           int R, int NV) {
    __m512 acc[16][8];
    const float *pr[16];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
        pr[r] = p + (size_t)(t0 + r < T ? t0 + r : t0) * ns;
#pragma GCC unroll 8
        for (int c = 0; c < NV; c++) acc[r][c] = _mm512_setzero_ps();
    }
    for (int j = 0; j < n_all; j++) {
        const float *vj = v + (size_t)j * stride;
        __m512 vv[8];
#pragma GCC unroll 8
        for (int c = 0; c < NV; c++) vv[c] = _mm512_loadu_ps(vj + 16 * c);
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

#define PV_FN(NV, R)                                                                               \
    static void pv_##NV(float *out, int out_stride, const float *p, int ns, const float *v, int stride, \
                        int n_all, int T) {                                                        \
        for (int t0 = 0; t0 < T; t0 += R) pv_group(out, out_stride, p, ns, v, stride, n_all, t0, T, R, NV); \
    }
PV_FN(1, 16)
PV_FN(2, 12)
PV_FN(4, 6)
PV_FN(8, 3)
#undef PV_FN

int ts_cpu_attn_tile_avx512_ok(int hd) { return hd == 16 || hd == 32 || hd == 64 || hd == 128; }

void ts_cpu_attn_tile_avx512(float *out, int out_stride, const float *q, int q_stride, const float *k,
                             const float *v, int n_ctx0, int T, int stride, int hd, float scale, float *scores) {
    int n_all = n_ctx0 + T - 1, ns = (n_all + 15) & ~15;
    for (int j0 = 0; j0 < n_all; j0 += 16) score_block(scores, ns, q, q_stride, T, k, stride, j0, n_all, hd, scale);
    for (int t = 0; t < T; t++) softmax_row(scores + (size_t)t * ns, n_ctx0 + t, ns);
    switch (hd) {
    case 16: pv_1(out, out_stride, scores, ns, v, stride, n_all, T); break;
    case 32: pv_2(out, out_stride, scores, ns, v, stride, n_all, T); break;
    case 64: pv_4(out, out_stride, scores, ns, v, stride, n_all, T); break;
    default: pv_8(out, out_stride, scores, ns, v, stride, n_all, T); break;
    }
}
