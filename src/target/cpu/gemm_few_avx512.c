/* The AVX-512 prefill of a few x rows on BF16 weights, with the panel kernels' bits
 * (gemm_avx512.c, both kinds) and no panel.
 *
 * A panel call packs every W row it reads into an L1 buffer (a 16 x 16 transpose per 16 rows
 * and 32 positions, and for the FP32 kind a widening and a second buffer pass) and then runs
 * its tiles; with 2-8 x rows the packing is most of the work, so a 2-4 token prompt on
 * Llama-3.2-1B BF16 took 1.35-1.5 decode steps where reading W once takes one (0.84-0.86x
 * llama.cpp side by side on an Intel Xeon, session 39). Here the same transpose stays in registers and is consumed at once:
 * per 16 W rows and 32 positions, 16 vectors, vector p holding BF16 pair p of the 16 rows (the
 * panel's layout), each multiplied into every x row's accumulator. Each output is the panel's
 * computation step by step: per K block a running sum from zero over the block's positions in
 * the panel's order (vdpbf16ps: the pairs in order, x rounded to BF16; FP32: in each 16-block
 * the 8 even positions, then the 8 odd, x as packed), then stored (first block) or added to y.
 * So a row's result is the same in a prompt of 3 tokens as in one of 300 (the prefix cache
 * relies on it; test_cpu_gemm and test_cpu_prefix compare them bit for bit). */
#include <immintrin.h>
#include <stdlib.h>

#include "target/cpu/gemm.h"
#include "target/cpu/gemm_panels_avx512.h"
#include "target/cpu/transpose_avx512.h"

/* W rows are read 16 at a time, each its own stream: each row's line this many bytes ahead is
 * requested into L1, one request per row and 32 positions. Requests into L2 as well (1-2 KiB
 * ahead) made 2-8 token prompts 10-20% slower (docs/performance.md, session 39). */
#define FEW_PF_L1 384
/* x rows whose accumulators are in registers at a time: 8 beside the 16 pair vectors. From 9
 * rows the pair vectors are run twice, once per set, the other set's accumulators in memory
 * (the compiler's spills). */
#define FEW_HALF 8

typedef union {
    __m512i i;
    __m512bh h;
} fv512;

/* 16 W rows [n, n + nv) against X x rows (X a constant) over all of K, in K blocks of kb
 * positions (the kind's panel block). dp: x as BF16 pairs (xb, row stride ldb pairs),
 * vdpbf16ps; else FP32 FMA on x packed (xp, row stride ldb floats). */
static inline __attribute__((always_inline)) void few_group(float *y, int ldy, const void *x, size_t ldb,
                                                            const uint16_t *W, int K, int n, int nv, int X,
                                                            int dp, int kb) {
    const __mmask16 rows = (__mmask16)((1u << nv) - 1);
    const __m512i odd = _mm512_set1_epi32((int)0xffff0000u);
    const uint16_t *w0 = W + (size_t)n * K;
    for (int k0 = 0; k0 < K; k0 += kb) {
        int ke = K - k0 < kb ? K : k0 + kb;
        __m512 acc[TS_GEMM512_FEW_MAX];
#pragma GCC unroll 16
        for (int s = 0; s < X; s++) acc[s] = _mm512_setzero_ps();
        for (int b = k0; b < ke; b += 32) {
            const int full = ke - b >= 32; /* else 16 positions (K % 16 == 0): 8 pairs */
            const __mmask32 m = full ? 0xffffffffu : 0xffffu;
            __m512i r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) {
                const uint16_t *p = w0 + (size_t)i * K + b;
                if (i < nv) {
                    __builtin_prefetch((const char *)p + FEW_PF_L1, 0, 3);
                    r[i] = _mm512_maskz_loadu_epi16(m, p);
                } else r[i] = _mm512_setzero_si512();
            }
            ts_transpose16_epi32(r); /* r[p]: pair p (positions b + 2p, b + 2p + 1) of the 16 rows */
#pragma GCC unroll 2
            for (int s0 = 0; s0 < X; s0 += FEW_HALF) { /* x rows in sets of up to 8 (registers) */
                const int s1 = X - s0 < FEW_HALF ? X : s0 + FEW_HALF;
                if (dp) {
                    const uint32_t *xs = (const uint32_t *)x + b / 2;
#pragma GCC unroll 16
                    for (int p = 0; p < 16; p++) {
                        if (p == 8 && !full) break;
                        fv512 w = {.i = r[p]};
#pragma GCC unroll 8
                        for (int s = s0; s < s1; s++) {
                            fv512 xv = {.i = _mm512_set1_epi32((int)xs[(size_t)s * ldb + p])};
                            acc[s] = _mm512_dpbf16_ps(acc[s], xv.h, w.h);
                        }
                    }
                    continue;
                }
                const float *xs = (const float *)x + b;
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) { /* each 16-block: even positions (low halves), then odd */
                    if (h == 1 && !full) break;
#pragma GCC unroll 16
                    for (int q = 0; q < 16; q++) {
                        __m512i v = r[8 * h + q % 8];
                        __m512 w = _mm512_castsi512_ps(q < 8 ? _mm512_slli_epi32(v, 16) : _mm512_and_si512(v, odd));
#pragma GCC unroll 8
                        for (int s = s0; s < s1; s++)
                            acc[s] = _mm512_fmadd_ps(_mm512_set1_ps(xs[(size_t)s * ldb + 16 * h + q]), w, acc[s]);
                    }
                }
            }
        }
#pragma GCC unroll 16
        for (int s = 0; s < X; s++) {
            float *d = y + (size_t)s * ldy + n;
            __m512 v = k0 ? _mm512_add_ps(_mm512_maskz_loadu_ps(rows, d), acc[s]) : acc[s];
            _mm512_mask_storeu_ps(d, rows, v);
        }
    }
}

#define FEW_FN(X)                                                                                          \
    static void few_##X(float *y, int ldy, const void *x, size_t ldb, const uint16_t *W, int K, int n0,   \
                        int n1, int dp) {                                                                  \
        for (int n = n0; n < n1; n += 16) {                                                                \
            int nv = n1 - n < 16 ? n1 - n : 16;                                                            \
            if (dp) few_group(y, ldy, x, ldb, W, K, n, nv, X, 1, TS_GEMM512_KB);                           \
            else few_group(y, ldy, x, ldb, W, K, n, nv, X, 0, TS_GEMM512_KB_F32);                           \
        }                                                                                                  \
    }
FEW_FN(2)
FEW_FN(3)
FEW_FN(4)
FEW_FN(5)
FEW_FN(6)
FEW_FN(7)
FEW_FN(8)
FEW_FN(9)
FEW_FN(10)
FEW_FN(11)
FEW_FN(12)
FEW_FN(13)
FEW_FN(14)
FEW_FN(15)
FEW_FN(16)
#undef FEW_FN
static void (*const k_few[TS_GEMM512_FEW_MAX + 1])(float *, int, const void *, size_t, const uint16_t *, int, int,
                                                    int, int) = {0,      0,      few_2,  few_3,  few_4,  few_5,
                                                                 few_6,  few_7,  few_8,  few_9,  few_10, few_11,
                                                                 few_12, few_13, few_14, few_15, few_16};

int ts_cpu_gemm_few_avx512(int dp, float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K, int S,
                           int n0, int n1) {
    if (S < 2 || S > TS_GEMM512_FEW_MAX) return 0;
    if (!dp) {
        k_few[S](y, ldy, xp, (size_t)ldx, W, K, n0, n1, 0);
        return 1;
    }
    /* x rounded to BF16 pairs once per call, as the panels' x blocks (natural order) */
    size_t ldb = ((size_t)K / 2 + 15) / 16 * 16; /* pairs */
    if (ldb % 1024 == 0) ldb += 16;                /* rows not 4 KiB multiples apart (L1 sets) */
    uint32_t *xb = aligned_alloc(64, sizeof(uint32_t) * ldb * (size_t)S);
    if (!xb) return 0;
    for (int s = 0; s < S; s++) ts_cpu_x_to_bf16_avx512((uint16_t *)(xb + (size_t)s * ldb), 0, 1, xp + (size_t)s * ldx, K);
    k_few[S](y, ldy, xb, ldb, W, K, n0, n1, 1);
    free(xb);
    return 1;
}
