/* AVX2+FMA GEMM on BF16 weights. Compiled with -mavx2 -mfma (see CMakeLists.txt) and called
 * only when CPUID reports both. A tile keeps ms x nr accumulators of 8 partial sums; each
 * 16-element step loads one 32-byte BF16 chunk per W row and splits it into even/odd FP32
 * vectors (shift / mask), matching the packed activations. */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

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

/* Decode: stream W row after row, four independent accumulator pairs per row so the FMA
 * latency is hidden, prefetching ahead of the single sequential stream. Written for G rows of
 * x (rows ldx apart) against one W row: the one-row GEMV is the G = 1 instance and a batched
 * decode the others; each 32-byte W chunk is loaded and widened once for the G rows, and every
 * row's accumulators see the operations they see alone, in the same order (bit-identical). */
static inline __attribute__((always_inline)) void xrows_dot(float *out, const float *x, size_t ldx, const uint16_t *w,
                                                            int K, int G) {
    __m256 a[3][4];
#pragma GCC unroll 3
    for (int g = 0; g < G; g++) a[g][0] = a[g][1] = a[g][2] = a[g][3] = _mm256_setzero_ps();
    int b = 0;
    for (; b + 32 <= K; b += 32) {
        __m256 e0, o0, e1, o1;
        _mm_prefetch((const char *)(w + b) + TS_GEMM_PREFETCH, _MM_HINT_T0);
        bf16x16(w + b, &e0, &o0);
        bf16x16(w + b + 16, &e1, &o1);
#pragma GCC unroll 3
        for (int g = 0; g < G; g++) {
            const float *xg = x + (size_t)g * ldx + b;
            a[g][0] = _mm256_fmadd_ps(_mm256_loadu_ps(xg), e0, a[g][0]);
            a[g][1] = _mm256_fmadd_ps(_mm256_loadu_ps(xg + 8), o0, a[g][1]);
            a[g][2] = _mm256_fmadd_ps(_mm256_loadu_ps(xg + 16), e1, a[g][2]);
            a[g][3] = _mm256_fmadd_ps(_mm256_loadu_ps(xg + 24), o1, a[g][3]);
        }
    }
    for (; b < K; b += 16) {
        __m256 e0, o0;
        bf16x16(w + b, &e0, &o0);
#pragma GCC unroll 3
        for (int g = 0; g < G; g++) {
            const float *xg = x + (size_t)g * ldx + b;
            a[g][0] = _mm256_fmadd_ps(_mm256_loadu_ps(xg), e0, a[g][0]);
            a[g][1] = _mm256_fmadd_ps(_mm256_loadu_ps(xg + 8), o0, a[g][1]);
        }
    }
#pragma GCC unroll 3
    for (int g = 0; g < G; g++) out[g] = hsum(_mm256_add_ps(_mm256_add_ps(a[g][0], a[g][1]), _mm256_add_ps(a[g][2], a[g][3])));
}

static void gemv_rows(float *y, const float *x, const uint16_t *W, int K, int n0, int n1) {
    for (int n = n0; n < n1; n++) xrows_dot(&y[n], x, 0, W + (size_t)n * K, K, 1);
}

static void xrows_1(float *o, const float *x, size_t ldx, const uint16_t *w, int K) { xrows_dot(o, x, ldx, w, K, 1); }
static void xrows_2(float *o, const float *x, size_t ldx, const uint16_t *w, int K) { xrows_dot(o, x, ldx, w, K, 2); }
static void xrows_3(float *o, const float *x, size_t ldx, const uint16_t *w, int K) { xrows_dot(o, x, ldx, w, K, 3); }
static void (*const k_xrows[4])(float *, const float *, size_t, const uint16_t *, int) = {0, xrows_1, xrows_2, xrows_3};

/* ---- Prefill: FP32 weight panels and a broadcast (outer-product) micro-kernel ----
 *
 * For S >= 2 the dot-product tiles above would redo the BF16 -> FP32 conversion of every W
 * chunk for each group of x rows and finish with horizontal sums. Instead a panel of 16 W
 * rows by KB packed positions is converted once into an L1-resident FP32 buffer, transposed
 * so that each packed position holds the 16 rows' values contiguously, and reused by all S
 * rows: a 6 x 16 tile keeps 12 accumulators (6 x rows by two vectors of 8 W rows) and each
 * step broadcasts one x value per row against two panel vectors; outputs are whole y vectors.
 * K is blocked by KB. Each output is the same FP32 computation whatever S, n0/n1, the loop
 * order or the tile it falls in: per K block a running FMA sum in packed order from zero,
 * added to y. So a prompt prefilled in pieces equals one call, and any split of N across
 * threads is bit-identical. Only S == 1 (decode) keeps the tiles / GEMV above.
 * No weight repacking: W is read in place, converted panel by panel. Per call: a 32 KiB panel
 * buffer on the stack and, for S > TS_GEMM_SMALL_S, an x block copy of S x (KB + 16) floats
 * (<= 272 KiB at S = 256) on the heap. */
#ifndef TS_GEMM_PANEL_MIN_S
#define TS_GEMM_PANEL_MIN_S 2 /* fewer rows: the tiles above (a different summation order) */
#endif
#ifndef TS_GEMM_KB
#define TS_GEMM_KB 256 /* packed positions per K block: a 16 KiB panel */
#endif
#define PANEL_N 16
#define PANEL_MR 6

static inline void transpose8(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* 16 weights of row `row` at natural positions [k, k + 16) as FP32 even / odd vectors (the
 * packed order): BF16 widened, Q8_0 / Q4_0 dequantized exactly (d * q in FP32, as the oracle). */
static inline void w16_eo(const void *W, ts_dtype dt, int K, size_t row, int k, __m256 *e, __m256 *o) {
    if (dt == TS_DTYPE_BF16) {
        bf16x16((const uint16_t *)W + row * (size_t)K + k, e, o);
        return;
    }
    const uint8_t *blk = (const uint8_t *)W + row * ts_gemm_row_bytes(dt, K) +
                         (size_t)(k / TS_QBLOCK) * (dt == TS_DTYPE_Q8_0 ? 2 + TS_QBLOCK : 2 + TS_QBLOCK / 2);
    int half = k % TS_QBLOCK != 0;
    __m128i c;
    if (dt == TS_DTYPE_Q8_0) c = _mm_loadu_si128((const __m128i *)(blk + 2 + 16 * half));
    else {
        __m128i v = _mm_loadu_si128((const __m128i *)(blk + 2));
        if (half) v = _mm_srli_epi16(v, 4);
        c = _mm_sub_epi8(_mm_and_si128(v, _mm_set1_epi8(15)), _mm_set1_epi8(8));
    }
    uint16_t h;
    memcpy(&h, blk, 2);
    __m256 d = _mm256_set1_ps(_cvtsh_ss(h));
    __m256i q = _mm256_cvtepi8_epi16(c); /* pair i of 16-bit codes in 32-bit lane i */
    *e = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(q, 16), 16)), d);
    *o = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srai_epi32(q, 16)), d);
}

/* P[p * 16 + j] = W[n + j][k of packed position k0 + p] for p in [0, kb), j in [0, 16); rows
 * j >= nv are zero. kb % 16 == 0. */
static void pack_panel(float *P, const void *W, ts_dtype dt, int K, int n, int nv, int k0, int kb) {
    for (int g = 0; g < PANEL_N; g += 8) {
        size_t rows[8];
        int nrow = nv - g < 0 ? 0 : (nv - g > 8 ? 8 : nv - g);
        for (int r = 0; r < 8; r++) rows[r] = (size_t)(n + g + (r < nrow ? r : 0));
        for (int b = 0; b < kb; b += 16) {
            __m256 e[8], o[8];
            for (int r = 0; r < 8; r++) {
                if (r < nrow) w16_eo(W, dt, K, rows[r], k0 + b, &e[r], &o[r]);
                else e[r] = o[r] = _mm256_setzero_ps();
            }
            transpose8(e);
            transpose8(o);
            float *d = P + (size_t)b * PANEL_N + g;
            for (int i = 0; i < 8; i++) {
                _mm256_store_ps(d + (size_t)i * PANEL_N, e[i]);
                _mm256_store_ps(d + (size_t)(8 + i) * PANEL_N, o[i]);
            }
        }
    }
}

/* y[i][0..8 NV) (+)= sum_p x[i][p] * P[p][0..8 NV) for i < MS (= instead of += on the first K
 * block). Each block's sum starts from zero and is added to y at the end: a sum over K in
 * blocks of TS_GEMM_KB has a rounding error closer to the 8-way partial sums of the GEMV than
 * one running sum over all of K would. NV = 2: one panel; NV = 4: two panels (the second at P + pstride), for small MS,
 * whose 2 MS accumulators alone would leave the FMA latency exposed. */
static inline __attribute__((always_inline)) void panel_tile(float *y, int ldy, const float *x, int ldx,
                                                             const float *P, int pstride, int kb, int MS,
                                                             int NV, int first) {
    __m256 acc[PANEL_MR][4];
#pragma GCC unroll 6
    for (int i = 0; i < MS; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) acc[i][j] = _mm256_setzero_ps();
    const float *x0 = x, *x1 = x0 + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx, *x4 = x3 + ldx, *x5 = x4 + ldx;
    const float *P1 = P + pstride;
#pragma GCC unroll 4
    for (int p = 0; p < kb; p++) {
        __m256 w0 = _mm256_load_ps(P + (size_t)p * PANEL_N), w1 = _mm256_load_ps(P + (size_t)p * PANEL_N + 8);
        __m256 w2 = w0, w3 = w1, b;
        if (NV == 4) w2 = _mm256_load_ps(P1 + (size_t)p * PANEL_N), w3 = _mm256_load_ps(P1 + (size_t)p * PANEL_N + 8);
#define STEP(I, XI)                                                                                \
    if (MS > I) {                                                                                  \
        b = _mm256_broadcast_ss(XI + p);                                                           \
        acc[I][0] = _mm256_fmadd_ps(b, w0, acc[I][0]);                                             \
        acc[I][1] = _mm256_fmadd_ps(b, w1, acc[I][1]);                                             \
        if (NV == 4) {                                                                             \
            acc[I][2] = _mm256_fmadd_ps(b, w2, acc[I][2]);                                         \
            acc[I][3] = _mm256_fmadd_ps(b, w3, acc[I][3]);                                         \
        }                                                                                          \
    }
        STEP(0, x0) STEP(1, x1) STEP(2, x2) STEP(3, x3) STEP(4, x4) STEP(5, x5)
#undef STEP
    }
#pragma GCC unroll 6
    for (int i = 0; i < MS; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) {
            float *d = y + (size_t)i * ldy + 8 * j;
            _mm256_storeu_ps(d, first ? acc[i][j] : _mm256_add_ps(_mm256_loadu_ps(d), acc[i][j]));
        }
}

#define PANEL_FN(MS, NV)                                                                           \
    static void panel_##MS##x##NV(float *y, int ldy, const float *x, int ldx, const float *P,      \
                                  int pstride, int kb, int first) {                                \
        if (first) panel_tile(y, ldy, x, ldx, P, pstride, kb, MS, NV, 1);                          \
        else panel_tile(y, ldy, x, ldx, P, pstride, kb, MS, NV, 0);                                \
    }
PANEL_FN(1, 2)
PANEL_FN(2, 2)
PANEL_FN(3, 2)
PANEL_FN(4, 2)
PANEL_FN(5, 2)
PANEL_FN(6, 2)
PANEL_FN(1, 4)
PANEL_FN(2, 4)
PANEL_FN(3, 4)
#undef PANEL_FN

typedef void (*panel_fn)(float *, int, const float *, int, const float *, int, int, int);
static const panel_fn k_panels[2][PANEL_MR + 1] = {
    {0, panel_1x2, panel_2x2, panel_3x2, panel_4x2, panel_5x2, panel_6x2},
    {0, panel_1x4, panel_2x4, panel_3x4, 0, 0, 0},
};

/* All S rows against one packed panel (wide = 0: W rows [n, n + nv), nv <= 16) or two (wide =
 * 1: nv <= 32, the second panel at P + PANEL_N * TS_GEMM_KB) over packed positions
 * [k0, k0 + kb); x points at column k0. Along the way it prefetches the W rows of what comes
 * next: rows [pn, pn + pnv) at position pk (none when pk >= K). */
static void panel_rows(float *y, int ldy, const float *x, int ldx, const float *P, const void *W, ts_dtype dt,
                       int K, int S, int n, int nv, int k0, int kb, int wide, int pn, int pnv, int pk) {
    float edge[PANEL_MR * 2 * PANEL_N]; /* a partial panel's tile goes through this */
    int first = k0 == 0, width = wide ? 2 * PANEL_N : PANEL_N, mr = wide ? 3 : PANEL_MR;
    /* pnv rows of kb weights (kb / 32 cache lines each in BF16), spread over the tiles */
    size_t rb = ts_gemm_row_bytes(dt, K);
    int pl = (int)(((size_t)kb * rb / (size_t)K + 63) / 64), ptot = pk < K ? pnv * pl : 0, ntiles = (S + mr - 1) / mr;
    int pstep = (ptot + ntiles - 1) / ntiles, prow = 0, pline = 0;
    for (int s = 0, ms; s < S; s += ms) {
        int left = S - s;
        ms = left < mr ? left : mr;
        if (!wide && (left == 7 || left == 8)) ms = 4; /* 4 + 3 or 4 + 4, not 6 + 1 or 6 + 2 */
        for (int q = 0; q < pstep && prow < pnv; q++) {
            _mm_prefetch((const char *)W + (size_t)(pn + prow) * rb + (size_t)pk * rb / (size_t)K + 64 * pline,
                         _MM_HINT_T0);
            if (++pline == pl) pline = 0, prow++;
        }
        float *ys = y + (size_t)s * ldy + n;
        const float *xs = x + (size_t)s * ldx;
        /* the next tile's y rows (partial sums from the previous K block) */
        if (!first)
            for (int i = ms; i < 2 * ms && s + i < S; i++) {
                _mm_prefetch((const char *)(ys + (size_t)i * ldy), _MM_HINT_T0);
                _mm_prefetch((const char *)(ys + (size_t)i * ldy + width - 1), _MM_HINT_T0);
            }
        if (nv == width) {
            k_panels[wide][ms](ys, ldy, xs, ldx, P, PANEL_N * TS_GEMM_KB, kb, first);
            continue;
        }
        for (int i = 0; i < ms; i++)
            for (int j = 0; j < width; j++) edge[i * width + j] = j < nv && !first ? ys[(size_t)i * ldy + j] : 0;
        k_panels[wide][ms](edge, width, xs, ldx, P, PANEL_N * TS_GEMM_KB, kb, first);
        for (int i = 0; i < ms; i++)
            for (int j = 0; j < nv; j++) ys[(size_t)i * ldy + j] = edge[i * width + j];
    }
}

#ifndef TS_GEMM_SMALL_S
#define TS_GEMM_SMALL_S 16 /* up to this many rows: panels outer */
#endif
#ifndef TS_GEMM_WIDE_S
#define TS_GEMM_WIDE_S 3 /* up to this many rows: two panels per pass */
#endif

static void gemm_panels(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                        int n0, int n1) {
    float P[2 * PANEL_N * TS_GEMM_KB] __attribute__((aligned(64)));
    if (S <= TS_GEMM_SMALL_S) {
        /* Few rows: panels outer, so each panel's W rows are read start to end while its y
         * tile stays in L1; x (S x K) is small. */
        int wide = S <= TS_GEMM_WIDE_S, width = wide ? 2 * PANEL_N : PANEL_N;
        for (int n = n0; n < n1; n += width) {
            int nv = n1 - n < width ? n1 - n : width;
            for (int k0 = 0; k0 < K; k0 += TS_GEMM_KB) {
                int kb = K - k0 < TS_GEMM_KB ? K - k0 : TS_GEMM_KB;
                int pn = n, pk = k0 + TS_GEMM_KB;
                if (pk >= K) pn = n + width, pk = pn < n1 ? 0 : K;
                int pnv = n1 - pn < width ? n1 - pn : width;
                pack_panel(P, W, dt, K, n, nv, k0, kb);
                if (wide) pack_panel(P + PANEL_N * TS_GEMM_KB, W, dt, K, n + PANEL_N, nv - PANEL_N, k0, kb);
                panel_rows(y, ldy, xp + k0, ldx, P, W, dt, K, S, n, nv, k0, kb, wide, pn, pnv, pk);
            }
        }
        return;
    }
    /* K blocks outer: the x block (S x KB) stays in L2 across all panels. It is copied to a
     * buffer first: activation rows are often 4 KiB multiples apart, which maps the whole block
     * onto a fraction of the L2 sets; the copy's row stride (KB + 16 floats) does not. Without
     * the buffer (allocation failure) the kernel reads x in place, only slower. */
    int ldb = TS_GEMM_KB + 16;
    float *xb = aligned_alloc(64, sizeof(float) * (size_t)S * ldb);
    for (int k0 = 0; k0 < K; k0 += TS_GEMM_KB) {
        int kb = K - k0 < TS_GEMM_KB ? K - k0 : TS_GEMM_KB;
        const float *xs = xp + k0;
        int lds = ldx;
        if (xb) {
            for (int s = 0; s < S; s++) memcpy(xb + (size_t)s * ldb, xp + (size_t)s * ldx + k0, sizeof(float) * kb);
            xs = xb, lds = ldb;
        }
        for (int n = n0; n < n1; n += PANEL_N) {
            int nv = n1 - n < PANEL_N ? n1 - n : PANEL_N;
            int pn = n + PANEL_N, pk = k0;
            if (pn >= n1) pn = n0, pk = k0 + TS_GEMM_KB;
            int pnv = n1 - pn < PANEL_N ? n1 - pn : PANEL_N;
            pack_panel(P, W, dt, K, n, nv, k0, kb);
            panel_rows(y, ldy, xs, lds, P, W, dt, K, S, n, nv, k0, kb, 0, pn, pnv, pk);
        }
    }
    free(xb);
}

static void tiles(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K, int S, int n0, int n1,
                  ts_gemm_tile t);

void ts_cpu_gemm_bf16_avx2(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K,
                           int S, int n0, int n1, ts_gemm_tile t) {
    if (S == 1 && t.nr <= 1) {
        gemv_rows(y, xp, W, K, n0, n1);
        return;
    }
    if (S >= TS_GEMM_PANEL_MIN_S) {
        gemm_panels(y, ldy, xp, ldx, W, TS_DTYPE_BF16, K, S, n0, n1);
        return;
    }
    tiles(y, ldy, xp, ldx, W, K, S, n0, n1, t);
}

/* The register tiles for S rows (the S = 1 decode with a tile of nr >= 2, or a batch of such
 * decodes): an output's accumulator sees the same operations whatever ms and nr, so a row's
 * result is the same in any tile and any batch. */
static void tiles(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K, int S, int n0, int n1,
                  ts_gemm_tile t) {
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

/* Batched decode: S rows, each as the S = 1 path computes it (the GEMV, or the tiles when the
 * tile has nr >= 2), each W row read from memory once: per W row the x rows in groups of up to
 * 3 (12 accumulators, 4 widened W vectors: the 16 ymm registers). */
void ts_cpu_gemv_batch_bf16_avx2(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K, int S, int n0,
                                 int n1, ts_gemm_tile t) {
    if (t.nr > 1) {
        t.ms = t.nr >= 4 ? 2 : 3; /* any ms and sb give the same outputs: the largest tile that */
        t.sb = S;                 /* fits, and all rows in one block (one pass over W) */
        tiles(y, ldy, xp, ldx, W, K, S, n0, n1, t);
        return;
    }
    float out[3];
    for (int n = n0; n < n1; n++) {
        const uint16_t *w = W + (size_t)n * K;
        for (int s = 0; s < S; s += 3) {
            int G = S - s < 3 ? S - s : 3;
            k_xrows[G](out, xp + (size_t)s * ldx, (size_t)ldx, w, K);
            for (int g = 0; g < G; g++) y[(size_t)(s + g) * ldy + n] = out[g];
        }
    }
}

void ts_cpu_gemm_q_panels_avx2(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K,
                               int S, int n0, int n1) {
    if (n0 < n1 && S >= 1) gemm_panels(y, ldy, xp, ldx, W, dt, K, S, n0, n1);
}
