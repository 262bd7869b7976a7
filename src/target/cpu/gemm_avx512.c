/* AVX-512 BF16 GEMM on BF16 weights: vdpbf16ps multiplies BF16 pairs and accumulates in FP32,
 * so the weights need no conversion at all. Compiled with -mavx512f/bw/vl/bf16 (CMakeLists.txt)
 * and called only when CPUID and XCR0 report them.
 *
 * The activations arrive packed for the AVX2 kernel (FP32, 16-blocks of 8 even then 8 odd
 * elements) and are rounded here to BF16 in natural order, so that a 32-bit lane holds the
 * pair (2i, 2i+1) exactly as a weight row does:
 * - decode (S == 1) is bound by reading W, not by arithmetic, so x is split into three BF16
 *   parts (high, remainder, what is left) and each W chunk is multiplied with all three: x
 *   keeps its 24 mantissa bits and the GEMV is as accurate as the FP32 kernels (two parts
 *   measured 2e-6 rel_l2, enough for the gates but 10x the FP32 kernels, which showed as
 *   1e-5-level differences between decode and an FP32 prefill).
 * - prefill (S >= 2), the _dp kernel, is bound by vdpbf16ps throughput, so x is rounded once
 *   to BF16 (8 mantissa bits, the precision llama.cpp's BF16 path also uses); phase 1-3 gates
 *   measure it. The _f32 kernel (for cores where FP32 FMA is faster) widens W instead.
 *
 * Prefill packs a panel of 64 W rows by KB positions into an L1-resident buffer where each
 * 32-bit pair position holds the 64 rows' pairs contiguously (a 16 x 16 dword transpose per
 * block; no conversion), then a 6 x 64 register tile (24 accumulators) broadcasts one x pair
 * per row against four panel vectors. As in the AVX2 kernel each output is the same
 * computation whatever tile, thread split or S it falls in: per K block a running sum in pair
 * order from zero, added to y. */
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "target/cpu/gemm.h"
#include "target/cpu/gemm_panels_avx512.h"
#include "target/cpu/gemm_q_blocks_avx512.h"
#include "target/cpu/probe.h"
#include "target/cpu/transpose_avx512.h"

#ifndef TS_GEMM512_PREFETCH
#define TS_GEMM512_PREFETCH 2048 /* bytes ahead in the decode stream */
#endif
#ifndef TS_GEMM512_SMALL_S
#define TS_GEMM512_SMALL_S 16 /* up to this many rows: panels outer, x converted per panel (without the memory for all of x) */
#endif
#define PN TS_PANEL_N
#define MR TS_PANEL_MR
#define LDB TS_PANEL_LDB

typedef union {
    __m512i i;
    __m512bh h;
} v512;

static inline __m512 bf16_to_f32(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

static inline __m256i f32_to_bf16(__m512 v) {
    union {
        __m256bh h;
        __m256i i;
    } u = {.h = _mm512_cvtneps_pbh(v)};
    return u.i;
}

/* d[0..n) <- BF16(x) for n positions of packed FP32 x, in natural order; with parts = 3 also
 * d[kp..kp+n) <- BF16(x - that) and d[2kp..2kp+n) <- BF16 of what is still left, so that the
 * three BF16 parts sum to x within 2^-24 relative. n % 16 == 0. */
void ts_cpu_x_to_bf16_avx512(uint16_t *d, int kp, int parts, const float *xp, int n) {
    const __m512i perm = _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
    for (int b = 0; b < n; b += 16) {
        __m512 v = _mm512_permutexvar_ps(perm, _mm512_loadu_ps(xp + b));
        for (int p = 0; p < parts; p++) {
            __m256i h = f32_to_bf16(v);
            _mm256_storeu_si256((__m256i *)(d + (size_t)p * kp + b), h);
            v = _mm512_sub_ps(v, bf16_to_f32(h));
        }
    }
}

static inline __m512 dp(__m512 acc, __m512i a, __m512i b) {
    v512 x = {.i = a}, y = {.i = b};
    return _mm512_dpbf16_ps(acc, x.h, y.h);
}

/* ---- Decode: NR rows of W streamed together against x in three BF16 parts ---- */
static inline __attribute__((always_inline)) void gemv_tile(float *y, const uint16_t *x, int kp, const uint16_t *w,
                                                            int K, int NR) {
    const uint16_t *xh = x, *xl = x + kp, *xm = x + 2 * (size_t)kp;
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int j = 0; j < NR; j++)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) acc[j][q] = _mm512_setzero_ps();
    int b = 0;
    for (; b + 64 <= K; b += 64) {
        __m512i h0 = _mm512_loadu_si512(xh + b), l0 = _mm512_loadu_si512(xl + b), m0 = _mm512_loadu_si512(xm + b);
        __m512i h1 = _mm512_loadu_si512(xh + b + 32), l1 = _mm512_loadu_si512(xl + b + 32);
        __m512i m1 = _mm512_loadu_si512(xm + b + 32);
#pragma GCC unroll 4
        for (int j = 0; j < NR; j++) {
            const uint16_t *r = w + (size_t)j * K + b;
            _mm_prefetch((const char *)r + TS_GEMM512_PREFETCH, _MM_HINT_T0); /* both lines of the 128 B */
            _mm_prefetch((const char *)r + TS_GEMM512_PREFETCH + 64, _MM_HINT_T0);
            __m512i w0 = _mm512_loadu_si512(r), w1 = _mm512_loadu_si512(r + 32);
            acc[j][0] = dp(acc[j][0], w0, h0);
            acc[j][1] = dp(dp(acc[j][1], w0, m0), w0, l0);
            acc[j][2] = dp(acc[j][2], w1, h1);
            acc[j][3] = dp(dp(acc[j][3], w1, m1), w1, l1);
        }
    }
    for (; b < K; b += 32) { /* 32 or 16 positions left (K % 16 == 0) */
        __mmask32 m = K - b >= 32 ? 0xffffffffu : 0xffffu;
        __m512i h = _mm512_maskz_loadu_epi16(m, xh + b), l = _mm512_maskz_loadu_epi16(m, xl + b);
        __m512i mm = _mm512_maskz_loadu_epi16(m, xm + b);
#pragma GCC unroll 4
        for (int j = 0; j < NR; j++) {
            __m512i wv = _mm512_maskz_loadu_epi16(m, w + (size_t)j * K + b);
            acc[j][0] = dp(acc[j][0], wv, h);
            acc[j][1] = dp(dp(acc[j][1], wv, mm), wv, l);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NR; j++)
        y[j] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[j][0], acc[j][2]),
                                                  _mm512_add_ps(acc[j][1], acc[j][3])));
}

/* One W row against G rows of x (three BF16 parts each, rows ldx apart): per row the operations
 * of gemv_tile above for one W row, in the same order, the W chunks loaded once for the G rows.
 * The one-row GEMV is its G = 1 instance and a batched decode (ts_cpu_gemv_batch_bf16_avx512)
 * the others, so a row's result does not depend on the batch (and gemv_tile's NR rows of W do
 * not change a row's operations either). */
static inline __attribute__((always_inline)) void gemv_xrows(float *y, const uint16_t *x, size_t ldx, int kp,
                                                             const uint16_t *w, int K, int G) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) acc[g][q] = _mm512_setzero_ps();
    int b = 0;
    for (; b + 64 <= K; b += 64) {
        _mm_prefetch((const char *)(w + b) + TS_GEMM512_PREFETCH, _MM_HINT_T0); /* both lines of the 128 B */
        _mm_prefetch((const char *)(w + b) + TS_GEMM512_PREFETCH + 64, _MM_HINT_T0);
        __m512i w0 = _mm512_loadu_si512(w + b), w1 = _mm512_loadu_si512(w + b + 32);
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            const uint16_t *xh = x + (size_t)g * ldx, *xl = xh + kp, *xm = xh + 2 * (size_t)kp;
            __m512i h0 = _mm512_loadu_si512(xh + b), l0 = _mm512_loadu_si512(xl + b), m0 = _mm512_loadu_si512(xm + b);
            __m512i h1 = _mm512_loadu_si512(xh + b + 32), l1 = _mm512_loadu_si512(xl + b + 32);
            __m512i m1 = _mm512_loadu_si512(xm + b + 32);
            acc[g][0] = dp(acc[g][0], w0, h0);
            acc[g][1] = dp(dp(acc[g][1], w0, m0), w0, l0);
            acc[g][2] = dp(acc[g][2], w1, h1);
            acc[g][3] = dp(dp(acc[g][3], w1, m1), w1, l1);
        }
    }
    for (; b < K; b += 32) { /* 32 or 16 positions left (K % 16 == 0) */
        __mmask32 m = K - b >= 32 ? 0xffffffffu : 0xffffu;
        __m512i wv = _mm512_maskz_loadu_epi16(m, w + b);
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            const uint16_t *xh = x + (size_t)g * ldx, *xl = xh + kp, *xm = xh + 2 * (size_t)kp;
            __m512i h = _mm512_maskz_loadu_epi16(m, xh + b), l = _mm512_maskz_loadu_epi16(m, xl + b);
            __m512i mm = _mm512_maskz_loadu_epi16(m, xm + b);
            acc[g][0] = dp(acc[g][0], wv, h);
            acc[g][1] = dp(dp(acc[g][1], wv, mm), wv, l);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
        y[g] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[g][0], acc[g][2]),
                                                  _mm512_add_ps(acc[g][1], acc[g][3])));
}

static void gemv_1(float *y, const uint16_t *x, int kp, const uint16_t *w, int K) { gemv_xrows(y, x, 0, kp, w, K, 1); }
static void gemv_x2(float *y, const uint16_t *x, size_t ldx, int kp, const uint16_t *w, int K) { gemv_xrows(y, x, ldx, kp, w, K, 2); }
static void gemv_x3(float *y, const uint16_t *x, size_t ldx, int kp, const uint16_t *w, int K) { gemv_xrows(y, x, ldx, kp, w, K, 3); }
static void gemv_x4(float *y, const uint16_t *x, size_t ldx, int kp, const uint16_t *w, int K) { gemv_xrows(y, x, ldx, kp, w, K, 4); }
static void gemv_x1(float *y, const uint16_t *x, size_t ldx, int kp, const uint16_t *w, int K) { gemv_xrows(y, x, ldx, kp, w, K, 1); }
static void (*const k_gemv_x[5])(float *, const uint16_t *, size_t, int, const uint16_t *, int) = {
    0, gemv_x1, gemv_x2, gemv_x3, gemv_x4};
static void gemv_2(float *y, const uint16_t *x, int kp, const uint16_t *w, int K) { gemv_tile(y, x, kp, w, K, 2); }
static void gemv_4(float *y, const uint16_t *x, int kp, const uint16_t *w, int K) { gemv_tile(y, x, kp, w, K, 4); }

#define GEMV_STACK_K 16384

void ts_cpu_gemv_bf16x3_avx512(float *y, const float *xp, const uint16_t *W, int K, int n0, int n1, int nr) {
    uint16_t sx[3 * GEMV_STACK_K] __attribute__((aligned(64)));
    int kp = (K + 31) & ~31;
    uint16_t *x = sx, *heap = NULL;
    if (K > GEMV_STACK_K) { /* longer rows than any seed model: one allocation per call */
        heap = aligned_alloc(64, sizeof(uint16_t) * 3 * (size_t)kp);
        if (!heap) {
            ts_cpu_gemm_bf16_scalar(y, 1, xp, K, W, K, 1, n0, n1, (ts_gemm_tile){1, 1, 1});
            return;
        }
        x = heap;
    }
    ts_cpu_x_to_bf16_avx512(x, kp, 3, xp, K);
    int n = n0;
    if (nr >= 4)
        for (; n + 4 <= n1; n += 4) gemv_4(y + n, x, kp, W + (size_t)n * K, K);
    if (nr >= 2)
        for (; n + 2 <= n1; n += 2) gemv_2(y + n, x, kp, W + (size_t)n * K, K);
    for (; n < n1; n++) gemv_1(y + n, x, kp, W + (size_t)n * K, K);
    free(heap);
}

/* Batched decode, vdpbf16ps GEMV: each of the S rows split into its three BF16 parts once (on
 * the stack up to BATCH_STACK halves, else one allocation per call), then per W row the x rows
 * in groups of up to 4 (16 accumulators), the W row read from memory once. */
#define BATCH_STACK (3 * 32768) /* 192 KiB: e.g. 4 rows of K = 8192 */
static void gemv_batch_bf16x3(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K, int S, int n0,
                              int n1, int nr) {
    int kp = (K + 31) & ~31;
    size_t ld = 3 * (size_t)kp;
    uint16_t sx[BATCH_STACK] __attribute__((aligned(64)));
    uint16_t *x = sx, *heap = NULL;
    float out[4];
    if ((size_t)S * ld > BATCH_STACK) {
        heap = aligned_alloc(64, sizeof(uint16_t) * (size_t)S * ld);
        if (!heap) { /* the rows one by one, as their single decodes */
            for (int s = 0; s < S; s++)
                ts_cpu_gemv_bf16x3_avx512(y + (size_t)s * ldy, xp + (size_t)s * ldx, W, K, n0, n1, nr);
            return;
        }
        x = heap;
    }
    for (int s = 0; s < S; s++) ts_cpu_x_to_bf16_avx512(x + (size_t)s * ld, kp, 3, xp + (size_t)s * ldx, K);
    for (int n = n0; n < n1; n++) {
        const uint16_t *w = W + (size_t)n * K;
        for (int s = 0; s < S; s += 4) {
            int G = S - s < 4 ? S - s : 4;
            k_gemv_x[G](out, x + (size_t)s * ld, ld, kp, w, K);
            for (int g = 0; g < G; g++) y[(size_t)(s + g) * ldy + n] = out[g];
        }
    }
    free(heap);
}

void ts_cpu_gemv_batch_bf16_avx512(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K, int S,
                                   int n0, int n1, ts_gemm_tile t) {
    if (n0 >= n1 || S < 1) return;
    if (ts_cpu_avx512_decode_f32()) ts_cpu_gemv_batch_f32_avx512(y, ldy, xp, ldx, W, K, S, n0, n1);
    else gemv_batch_bf16x3(y, ldy, xp, ldx, W, K, S, n0, n1, t.nr);
}

/* ---- Prefill: BF16 pair panels and a broadcast micro-kernel ---- */

/* P[p * 64 + j] = pair p of W row n + j over positions [k0, k0 + kb): rows j >= nv are zero.
 * kb % 16 == 0; a final 16-position block fills 8 pairs (the rest of its 16 are zero). */
static void pack_panel(void *Pv, const void *Wv, int K, int n, int nv, int k0, int kb) {
    uint32_t *P = Pv;
    const uint16_t *W = Wv;
    for (int g = 0; g < PN; g += 16) {
        int nrow = nv - g < 0 ? 0 : (nv - g > 16 ? 16 : nv - g);
        for (int b = 0; b < kb; b += 32) {
            __mmask32 m = kb - b >= 32 ? 0xffffffffu : 0xffffu;
            __m512i r[16];
            for (int i = 0; i < 16; i++)
                r[i] = i < nrow ? _mm512_maskz_loadu_epi16(m, W + (size_t)(n + g + i) * K + k0 + b)
                                : _mm512_setzero_si512();
            ts_transpose16_epi32(r);
            uint32_t *d = P + (size_t)(b / 2) * PN + g;
            for (int p = 0; p < 16; p++) _mm512_store_si512(d + (size_t)p * PN, r[p]);
        }
    }
}

static inline __attribute__((always_inline)) void panel_tile(float *y, int ldy, const uint32_t *x, int ldb,
                                                             const uint32_t *P, int np, int MS, int first) {
    __m512 acc[MR][4];
#pragma GCC unroll 6
    for (int i = 0; i < MS; i++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) acc[i][j] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int p = 0; p < np; p++) {
        const uint32_t *pp = P + (size_t)p * PN;
        __m512i w0 = _mm512_load_si512(pp), w1 = _mm512_load_si512(pp + 16);
        __m512i w2 = _mm512_load_si512(pp + 32), w3 = _mm512_load_si512(pp + 48);
#pragma GCC unroll 6
        for (int i = 0; i < MS; i++) {
            __m512i b = _mm512_set1_epi32((int)x[(size_t)i * ldb + p]);
            acc[i][0] = dp(acc[i][0], b, w0);
            acc[i][1] = dp(acc[i][1], b, w1);
            acc[i][2] = dp(acc[i][2], b, w2);
            acc[i][3] = dp(acc[i][3], b, w3);
        }
    }
    ts_panel_store(y, ldy, acc, MS, first);
}

/* The FP32 form (ts_cpu_gemm_f32_avx512): P holds one FP32 weight per row and position. */
static inline __attribute__((always_inline)) void panel_tile_f32(float *y, int ldy, const float *x, int ldb,
                                                                 const float *P, int np, int MS, int first) {
    __m512 acc[MR][4];
#pragma GCC unroll 6
    for (int i = 0; i < MS; i++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) acc[i][j] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int p = 0; p < np; p++) {
        const float *pp = P + (size_t)p * PN;
        __m512 w0 = _mm512_load_ps(pp), w1 = _mm512_load_ps(pp + 16);
        __m512 w2 = _mm512_load_ps(pp + 32), w3 = _mm512_load_ps(pp + 48);
#pragma GCC unroll 6
        for (int i = 0; i < MS; i++) {
            __m512 b = _mm512_set1_ps(x[(size_t)i * ldb + p]);
            acc[i][0] = _mm512_fmadd_ps(b, w0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(b, w1, acc[i][1]);
            acc[i][2] = _mm512_fmadd_ps(b, w2, acc[i][2]);
            acc[i][3] = _mm512_fmadd_ps(b, w3, acc[i][3]);
        }
    }
    ts_panel_store(y, ldy, acc, MS, first);
}

#define PANEL_FN(MS)                                                                               \
    static void panel_##MS(float *y, int ldy, const void *x, int ldb, const void *P, int np, int first) { \
        if (first) panel_tile(y, ldy, x, ldb, P, np, MS, 1);                                       \
        else panel_tile(y, ldy, x, ldb, P, np, MS, 0);                                             \
    }                                                                                              \
    static void panel_f32_##MS(float *y, int ldy, const void *x, int ldb, const void *P, int np, int first) { \
        if (first) panel_tile_f32(y, ldy, x, ldb, P, np, MS, 1);                                   \
        else panel_tile_f32(y, ldy, x, ldb, P, np, MS, 0);                                         \
    }
PANEL_FN(1)
PANEL_FN(2)
PANEL_FN(3)
PANEL_FN(4)
PANEL_FN(5)
PANEL_FN(6)
#undef PANEL_FN

/* x rows [0, S) of packed FP32 x, positions [k0, k0 + kb), to BF16 pairs (row stride LDB). */
static void x_block(void *xb, const float *xp, int ldx, int S, int k0, int kb) {
    for (int s = 0; s < S; s++)
        ts_cpu_x_to_bf16_avx512((uint16_t *)((uint32_t *)xb + (size_t)s * LDB), 0, 1, xp + (size_t)s * ldx + k0, kb);
}

/* The same rows copied as FP32 (packed order kept): the copy's row stride is what matters,
 * activation rows 4 KiB multiples apart would map the block onto a fraction of the L2 sets. */
static void x_block_f32(void *xb, const float *xp, int ldx, int S, int k0, int kb) {
    for (int s = 0; s < S; s++) memcpy((float *)xb + (size_t)s * LDB, xp + (size_t)s * ldx + k0, sizeof(float) * kb);
}

/* 16 weights of row `row` at natural positions [k, k + 16) in FP32: BF16 widened, Q8_0 / Q4_0
 * dequantized exactly (d * q in FP32, as the oracle). */
static inline __m512i w16_f32(const void *W, ts_dtype dt, int K, size_t row, int k) {
    if (dt == TS_DTYPE_BF16)
        return _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)W +
                                                                                             row * (size_t)K + k))),
                                 16);
    /* stored or in 16-block lane order (gemm.h) */
    ts_qblk q = ts_qblk_at((const uint8_t *)W + row * ts_gemm_row_bytes(dt, K), K, k / TS_QBLOCK, dt);
    int half = k % TS_QBLOCK != 0;
    __m128i c;
    if (ts_x16_stored(dt) == TS_DTYPE_Q8_0) c = ts_qblk_codes16(q, half);
    else {
        __m128i v = ts_qblk_codes16(q, 0);
        if (half) v = _mm_srli_epi16(v, 4);
        c = _mm_sub_epi8(_mm_and_si128(v, _mm_set1_epi8(15)), _mm_set1_epi8(8));
    }
    return _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c)), _mm512_set1_ps(f16(q.scale))));
}

/* P[p * 64 + j] = W[n + j][k] in FP32 for the packed positions p of [k0, k0 + kb) (in each
 * 16-block the 8 even positions, then the 8 odd, as the activations are packed); rows j >= nv
 * are zero. kb % 16 == 0. */
static inline __attribute__((always_inline)) void pack_panel_f32_dt(void *Pv, const void *W, ts_dtype dt, int K,
                                                                    int n, int nv, int k0, int kb) {
    float *P = Pv;
    for (int g = 0; g < PN; g += 16) {
        int nrow = nv - g < 0 ? 0 : (nv - g > 16 ? 16 : nv - g);
        for (int b = 0; b < kb; b += 16) {
            __m512i r[16];
            for (int i = 0; i < 16; i++)
                r[i] = i < nrow ? w16_f32(W, dt, K, (size_t)(n + g + i), k0 + b) : _mm512_setzero_si512();
            ts_transpose16_epi32(r); /* r[c]: natural position c of the 16 rows */
            float *d = P + (size_t)b * PN + g;
            for (int c = 0; c < 16; c++) _mm512_store_ps(d + (size_t)((c & 1) ? 8 + c / 2 : c / 2) * PN, _mm512_castsi512_ps(r[c]));
        }
    }
}
static void pack_panel_f32(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    pack_panel_f32_dt(P, W, TS_DTYPE_BF16, K, n, nv, k0, kb);
}
static void pack_panel_q8(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    pack_panel_f32_dt(P, W, TS_DTYPE_Q8_0, K, n, nv, k0, kb);
}
static void pack_panel_q4(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    pack_panel_f32_dt(P, W, TS_DTYPE_Q4_0, K, n, nv, k0, kb);
}

/* The vdpbf16ps panel (pack_panel's layout) of Q8_0 / Q4_0 rows: each weight dequantized
 * exactly (d * q in FP32, w16_f32) and rounded to BF16 to nearest even, two 16-position halves
 * of a block per 32-position step. kb % 32 == 0. */
static inline __attribute__((always_inline)) void pack_panel_dq_bf16(void *Pv, const void *W, ts_dtype dt, int K,
                                                                    int n, int nv, int k0, int kb) {
    uint32_t *P = Pv;
    for (int g = 0; g < PN; g += 16) {
        int nrow = nv - g < 0 ? 0 : (nv - g > 16 ? 16 : nv - g);
        for (int b = 0; b < kb; b += 32) {
            __m512i r[16];
            for (int i = 0; i < 16; i++) {
                if (i >= nrow) {
                    r[i] = _mm512_setzero_si512();
                    continue;
                }
                __m512 lo = _mm512_castsi512_ps(w16_f32(W, dt, K, (size_t)(n + g + i), k0 + b));
                __m512 hi = _mm512_castsi512_ps(w16_f32(W, dt, K, (size_t)(n + g + i), k0 + b + 16));
                v512 u = {.h = _mm512_cvtne2ps_pbh(hi, lo)}; /* lo in the low 16 halves: natural order */
                r[i] = u.i;
            }
            ts_transpose16_epi32(r);
            uint32_t *d = P + (size_t)(b / 2) * PN + g;
            for (int p = 0; p < 16; p++) _mm512_store_si512(d + (size_t)p * PN, r[p]);
        }
    }
}
static void pack_panel_q8_bf16(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    pack_panel_dq_bf16(P, W, TS_DTYPE_Q8_0, K, n, nv, k0, kb);
}
static void pack_panel_q4_bf16(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    pack_panel_dq_bf16(P, W, TS_DTYPE_Q4_0, K, n, nv, k0, kb);
}
static void pack_panel_q8x16(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    pack_panel_f32_dt(P, W, TS_DTYPE_Q8_0X16, K, n, nv, k0, kb);
}
static void pack_panel_q4x16(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    pack_panel_f32_dt(P, W, TS_DTYPE_Q4_0X16, K, n, nv, k0, kb);
}
static void pack_panel_q8x16_bf16(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    pack_panel_dq_bf16(P, W, TS_DTYPE_Q8_0X16, K, n, nv, k0, kb);
}
static void pack_panel_q4x16_bf16(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    pack_panel_dq_bf16(P, W, TS_DTYPE_Q4_0X16, K, n, nv, k0, kb);
}

static const ts_panel_ops k_bf16 = {TS_GEMM512_KB, 2, x_block, pack_panel,
                                 {0, panel_1, panel_2, panel_3, panel_4, panel_5, panel_6}, TS_DTYPE_BF16, NULL};
#define F32_TILES {0, panel_f32_1, panel_f32_2, panel_f32_3, panel_f32_4, panel_f32_5, panel_f32_6}
static const ts_panel_ops k_f32 = {TS_GEMM512_KB_F32, 1, x_block_f32, pack_panel_f32, F32_TILES, TS_DTYPE_BF16, NULL};
static const ts_panel_ops k_q8 = {TS_GEMM512_KB_F32, 1, x_block_f32, pack_panel_q8, F32_TILES, TS_DTYPE_Q8_0, NULL};
static const ts_panel_ops k_q4 = {TS_GEMM512_KB_F32, 1, x_block_f32, pack_panel_q4, F32_TILES, TS_DTYPE_Q4_0, NULL};
static const ts_panel_ops k_q8x16 = {TS_GEMM512_KB_F32, 1, x_block_f32, pack_panel_q8x16, F32_TILES, TS_DTYPE_Q8_0X16, NULL};
static const ts_panel_ops k_q4x16 = {TS_GEMM512_KB_F32, 1, x_block_f32, pack_panel_q4x16, F32_TILES, TS_DTYPE_Q4_0X16, NULL};
#define BF16_TILES {0, panel_1, panel_2, panel_3, panel_4, panel_5, panel_6}
static const ts_panel_ops k_q8_bf16 = {TS_GEMM512_KB, 2, x_block, pack_panel_q8_bf16, BF16_TILES, TS_DTYPE_Q8_0, NULL};
static const ts_panel_ops k_q4_bf16 = {TS_GEMM512_KB, 2, x_block, pack_panel_q4_bf16, BF16_TILES, TS_DTYPE_Q4_0, NULL};
static const ts_panel_ops k_q8x16_bf16 = {TS_GEMM512_KB, 2, x_block, pack_panel_q8x16_bf16, BF16_TILES,
                                          TS_DTYPE_Q8_0X16, NULL};
static const ts_panel_ops k_q4x16_bf16 = {TS_GEMM512_KB, 2, x_block, pack_panel_q4x16_bf16, BF16_TILES,
                                          TS_DTYPE_Q4_0X16, NULL};
#undef BF16_TILES
#undef F32_TILES

/* x rows [0, S) of a block (row stride LDB 4-byte elements) against one packed panel of W
 * rows [n, n + nv) over positions [k0, k0 + kb). While it runs it prefetches the W rows of the
 * next panel: rows [pn, pn + pnv) at position pk (none when pk >= K). */
static void panel_rows(const ts_panel_ops *o, float *y, int ldy, const uint32_t *xb, const void *P, const void *W,
                       int K, int S, int n, int nv, int k0, int kb, int pn, int pnv, int pk) {
    float edge[MR * PN];
    size_t rb = ts_gemm_row_bytes(o->dt, K); /* bytes per W row; kb positions: kb * rb / K bytes */
    size_t poff = (size_t)pk * rb / (size_t)K; /* where they start in the row */
    int first = k0 == 0, np = kb / o->per, pl = (int)(((size_t)kb * rb / (size_t)K + 63) / 64);
    if (ts_dtype_is_x16(o->dt) && pk < K / (16 * TS_QBLOCK) * (16 * TS_QBLOCK)) {
        /* in 16-block lane order a K block's blocks are spread over their whole group (gemm.h):
         * the group's lines, one more as groups are not line-aligned */
        size_t gb = 16 * rb / (size_t)(K / TS_QBLOCK);
        poff = (size_t)(pk / (16 * TS_QBLOCK)) * gb, pl = (int)((gb + 63) / 64) + 1;
        /* only at a group's first K block: the prefetch instructions of all four cost more than
         * they saved (a 4-row prefill 1.22-1.24x the stored time with them, 0.96-0.97x without;
         * 64-256 rows 1.06-1.08x and 0.97-1.03x) */
        if (pk % (16 * TS_QBLOCK)) pl = 0;
    }
    /* the next panel's rows (stride rb), or in tile order its groups, whose K block lies together */
    const char *pw = (const char *)W + (size_t)pn * rb;
    size_t pstride = rb;
    int prows = pnv;
    if (ts_dtype_is_t16(o->dt)) {
        size_t gb = ts_t16_group_block(o->dt);
        pstride = 16 * rb, prows = (pnv + 15) / 16, pw = (const char *)W + (size_t)(pn / 16) * pstride;
        poff = (size_t)(pk / TS_QBLOCK) * gb, pl = (int)(((size_t)(kb / TS_QBLOCK) * gb + 63) / 64);
    }
    int ptot = pk < K ? prows * pl : 0, ntiles = (S + MR - 1) / MR;
    int pstep = (ptot + ntiles - 1) / ntiles, prow = 0, pline = 0;
    for (int s = 0, ms; s < S; s += ms) {
        int left = S - s;
        ms = left < MR ? left : MR;
        if (left == 7 || left == 8) ms = 4; /* 4 + 3 or 4 + 4, not 6 + 1 or 6 + 2 */
        for (int q = 0; q < pstep && prow < prows; q++) {
            _mm_prefetch(pw + (size_t)prow * pstride + poff + 64 * pline, _MM_HINT_T0);
            if (++pline == pl) pline = 0, prow++;
        }
        float *ys = y + (size_t)s * ldy + n;
        const uint32_t *xs = xb + (size_t)s * LDB;
        if (nv == PN) {
            o->tiles[ms](ys, ldy, xs, LDB, P, np, first);
            continue;
        }
        for (int i = 0; i < ms; i++)
            for (int j = 0; j < PN; j++) edge[i * PN + j] = j < nv && !first ? ys[(size_t)i * ldy + j] : 0;
        o->tiles[ms](edge, PN, xs, LDB, P, np, first);
        for (int i = 0; i < ms; i++)
            for (int j = 0; j < nv; j++) ys[(size_t)i * ldy + j] = edge[i * PN + j];
    }
}

/* Panels outer, each over all of K before the next, so W streams forward while each panel's y
 * tile stays in L1. x: xall, every K block prepared once (S x LDB words a block), or NULL: each
 * block prepared again per panel (S <= 16; without the memory for xall). P4: room for a whole
 * group's panels (group_panels) where the ops pack one at once, else NULL. */
static void gemm_rows(const ts_panel_ops *o, float *y, int ldy, const float *xp, int ldx, const void *W, int K, int S,
                      int n0, int n1, uint32_t *P, const uint32_t *xall, uint32_t *P4) {
    uint32_t xb[TS_GEMM512_SMALL_S * LDB] __attribute__((aligned(64)));
    const int G = 16 * TS_QBLOCK, gk = P4 ? K / G * G : 0; /* positions packed a whole group at a time */
    for (int n = n0; n < n1; n += PN) {
        int nv = n1 - n < PN ? n1 - n : PN;
        for (int k0 = 0; k0 < K; k0 += o->kb) {
            int kb = K - k0 < o->kb ? K - k0 : o->kb;
            int pn = n, pk = k0 + o->kb;
            if (pk >= K) pn = n + PN, pk = pn < n1 ? 0 : K;
            int pnv = n1 - pn < PN ? n1 - pn : PN;
            const uint32_t *x = xall ? xall + (size_t)(k0 / o->kb) * (size_t)S * LDB : xb;
            if (!xall) o->x_block(xb, xp, ldx, S, k0, kb);
            const uint32_t *Pk = P;
            if (k0 < gk) {
                if (k0 % G == 0) o->pack_group(P4, W, K, n, nv, k0 / G);
                Pk = P4 + (size_t)(k0 % G / o->kb) * TS_PANEL_SLOT;
            } else
                o->pack(P, W, K, n, nv, k0, kb);
            panel_rows(o, y, ldy, x, Pk, W, K, S, n, nv, k0, kb, pn, pnv, pk);
        }
    }
}

/* Room for the panels of a whole 16-block group where the ops pack one at once (NULL: pack
 * them one by one). */
static uint32_t *group_panels(const ts_panel_ops *o, int K) {
    const int G = 16 * TS_QBLOCK;
    if (!o->pack_group || K < G || G % o->kb) return NULL;
    return aligned_alloc(64, sizeof(uint32_t) * TS_PANEL_SLOT * (size_t)(G / o->kb));
}

/* x of all K prepared once, and the panels outer, where S * K is at most this (x: 2.25-4.5 bytes
 * a position and row, 1.2-2.4 MiB here); else K blocks outer, the x block (S x KB) kept in L2
 * across all panels, which reads each W row in K / KB pieces; below 17 rows without the memory
 * for x, the x blocks per panel. Each output's K blocks run in the same order either way (the
 * same bits). Against x prepared per panel (<= 16 rows) or K blocks outer, Llama-3.2-1B, 2
 * threads (session 35): BF16 8 / 16 / 32 / 64 tokens 156 / 202-204 / 344-346 / 536-550 ->
 * 150-152 / 188-190 / 260-266 / 445-464 ms; Q8_0 (stored) on the I16 kernel (no AMX) 16 / 32 /
 * 64 tokens 170-172 / 245 / 380-383 -> 138-147 / 216 / 329-342; Q4_0 144-147 / 237-246 /
 * 397-403 -> 125-130 / 193-203 / 320-329. */
#define TS_GEMM512_WHOLE_X (1L << 19)

void ts_cpu_gemm_panels_avx512(const ts_panel_ops *o, float *y, int ldy, const float *xp, int ldx, const void *W,
                               int K, int S, int n0, int n1) {
    uint32_t P[TS_PANEL_WORDS] __attribute__((aligned(64)));
    int nkb = (K + o->kb - 1) / o->kb;
    uint32_t *xall = (long)S * K <= TS_GEMM512_WHOLE_X
                         ? aligned_alloc(64, sizeof(uint32_t) * (size_t)S * LDB * (size_t)nkb)
                         : NULL;
    if (xall) {
        for (int k0 = 0; k0 < K; k0 += o->kb)
            o->x_block(xall + (size_t)(k0 / o->kb) * (size_t)S * LDB, xp, ldx, S, k0, K - k0 < o->kb ? K - k0 : o->kb);
        uint32_t *P4 = group_panels(o, K);
        gemm_rows(o, y, ldy, xp, ldx, W, K, S, n0, n1, P, xall, P4);
        free(P4);
        free(xall);
        return;
    }
    uint32_t *xb = S > TS_GEMM512_SMALL_S ? aligned_alloc(64, sizeof(uint32_t) * (size_t)S * LDB) : NULL;
    if (!xb) { /* few rows, or no memory for the x block: 16 rows at a time */
        uint32_t *P4 = group_panels(o, K);
        for (int s = 0; s < S; s += TS_GEMM512_SMALL_S) {
            int ss = S - s < TS_GEMM512_SMALL_S ? S - s : TS_GEMM512_SMALL_S;
            gemm_rows(o, y + (size_t)s * ldy, ldy, xp + (size_t)s * ldx, ldx, W, K, ss, n0, n1, P, NULL, P4);
        }
        free(P4);
        return;
    }
    /* K blocks outer: the x block (S x KB) stays in L2 across all panels. Where the ops pack a
     * whole group at once, a group's K blocks at a time (their x blocks together), each panel's
     * group packed once and run over them in K order (the same order per output): Llama-3.2-1B
     * Q8_0 in lane order at 512 tokens (I16) went from 0.90-0.91x the stored order's tok/s to
     * 1.03-1.04x (session 36). */
    const int G = 16 * TS_QBLOCK, nk = G / o->kb, gk = K / G * G;
    uint32_t *P4 = group_panels(o, K), *xg = P4 ? aligned_alloc(64, sizeof(uint32_t) * (size_t)S * LDB * (size_t)nk) : NULL;
    for (int g0 = 0; xg && g0 < gk; g0 += G) {
        for (int j = 0; j < nk; j++) o->x_block(xg + (size_t)j * S * LDB, xp, ldx, S, g0 + j * o->kb, o->kb);
        for (int n = n0; n < n1; n += PN) {
            int nv = n1 - n < PN ? n1 - n : PN;
            int pn = n + PN, pk = g0; /* the next panel's group, requested with the first K block */
            if (pn >= n1) pn = n0, pk = g0 + G < K ? g0 + G : K;
            int pnv = n1 - pn < PN ? n1 - pn : PN;
            o->pack_group(P4, W, K, n, nv, g0 / G);
            for (int j = 0; j < nk; j++)
                panel_rows(o, y, ldy, xg + (size_t)j * S * LDB, P4 + (size_t)j * TS_PANEL_SLOT, W, K, S, n, nv,
                           g0 + j * o->kb, o->kb, pn, pnv, j ? K : pk);
        }
    }
    for (int k0 = xg ? gk : 0; k0 < K; k0 += o->kb) {
        int kb = K - k0 < o->kb ? K - k0 : o->kb;
        o->x_block(xb, xp, ldx, S, k0, kb);
        for (int n = n0; n < n1; n += PN) {
            int nv = n1 - n < PN ? n1 - n : PN;
            int pn = n + PN, pk = k0;
            if (pn >= n1) pn = n0, pk = k0 + o->kb;
            int pnv = n1 - pn < PN ? n1 - pn : PN;
            o->pack(P, W, K, n, nv, k0, kb);
            panel_rows(o, y, ldy, xb, P, W, K, S, n, nv, k0, kb, pn, pnv, pk);
        }
    }
    free(P4), free(xg);
    free(xb);
}

/* Decode: the GEMV this core runs faster (gemv_avx512.c). */
static void decode_gemv(float *y, const float *xp, const uint16_t *W, int K, int n0, int n1, int nr) {
    if (ts_cpu_avx512_decode_f32()) ts_cpu_gemv_f32_avx512(y, xp, W, K, n0, n1);
    else ts_cpu_gemv_bf16x3_avx512(y, xp, W, K, n0, n1, nr);
}

/* gemm.h; the variable exists for side-by-side measurement (the two paths give the same bits) */
static int g_few_max;
static void choose_few_max(void) {
    const char *e = getenv("TESSERA_FEW_ROWS");
    char *end;
    long v = e ? strtol(e, &end, 10) : -1;
    g_few_max = e && *e && !*end && v >= 0 && v <= TS_GEMM512_FEW_MAX ? (int)v : TS_GEMM512_FEW_MAX;
}
int ts_cpu_avx512_few_rows(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, choose_few_max);
    return g_few_max;
}

void ts_cpu_gemm_bf16_avx512_dp(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K, int S, int n0,
                                int n1, ts_gemm_tile t) {
    if (n0 >= n1 || S < 1) return;
    if (S == 1) decode_gemv(y, xp, W, K, n0, n1, t.nr);
    else if (S > ts_cpu_avx512_few_rows() || !ts_cpu_gemm_few_avx512(1, y, ldy, xp, ldx, W, K, S, n0, n1))
        ts_cpu_gemm_panels_avx512(&k_bf16, y, ldy, xp, ldx, W, K, S, n0, n1);
}

void ts_cpu_gemm_f32_avx512(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K, int S, int n0,
                            int n1, ts_gemm_tile t) {
    if (n0 >= n1 || S < 1) return;
    if (S == 1) decode_gemv(y, xp, W, K, n0, n1, t.nr);
    else if (S > ts_cpu_avx512_few_rows() || !ts_cpu_gemm_few_avx512(0, y, ldy, xp, ldx, W, K, S, n0, n1))
        ts_cpu_gemm_panels_avx512(&k_f32, y, ldy, xp, ldx, W, K, S, n0, n1);
}

void ts_cpu_gemm_q_panels_avx512(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K,
                                 int S, int n0, int n1) {
    if (n0 < n1 && S >= 1)
        ts_cpu_gemm_panels_avx512(q_ops(dt, &k_q8, &k_q4, &k_q8x16, &k_q4x16), y, ldy, xp, ldx, W, K, S, n0, n1);
}

void ts_cpu_gemm_q_bf16_avx512(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                               int n0, int n1) {
    if (n0 < n1 && S >= 1)
        ts_cpu_gemm_panels_avx512(q_ops(dt, &k_q8_bf16, &k_q4_bf16, &k_q8x16_bf16, &k_q4x16_bf16), y, ldy, xp, ldx, W, K, S, n0, n1);
}

static int g_prefill_f32;

static void choose_prefill(void) {
    const char *e = getenv("TESSERA_AVX512_PREFILL");
    if (e && (!strcmp(e, "bf16") || !strcmp(e, "f32"))) {
        g_prefill_f32 = !strcmp(e, "f32");
        return;
    }
    double best_dp = 1e30, best_fma = 1e30;
    for (int r = 0; r < 3; r++) { /* alternating, best of 3: 40k instructions each */
        struct timespec a, b, c;
        clock_gettime(CLOCK_MONOTONIC, &a);
        double f_dp = ts_probe_dpbf16_avx512(4000);
        clock_gettime(CLOCK_MONOTONIC, &b);
        double f_fma = ts_probe_fma_avx512(4000);
        clock_gettime(CLOCK_MONOTONIC, &c);
        double t_dp = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
        double t_fma = (double)(c.tv_sec - b.tv_sec) + 1e-9 * (double)(c.tv_nsec - b.tv_nsec);
        if (t_dp / f_dp < best_dp) best_dp = t_dp / f_dp; /* seconds per flop */
        if (t_fma / f_fma < best_fma) best_fma = t_fma / f_fma;
    }
    g_prefill_f32 = best_dp * 1.25 <= best_fma ? 0 : 1;
}

int ts_cpu_avx512_prefill_f32(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, choose_prefill);
    return g_prefill_f32;
}
