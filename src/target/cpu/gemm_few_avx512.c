/* The AVX-512 prefill of a few x rows on BF16 weights, with the panel kernels' bits
 * (gemm_avx512.c, both kinds) and no panel.
 *
 * A panel call packs every W row it reads into an L1 buffer (a 16 x 16 transpose per 16 rows
 * and 32 positions, and for the FP32 kind a widening and a second buffer pass) and then runs
 * its tiles; with 2-8 x rows the packing is most of the work, so a 2-4 token prompt on
 * Llama-3.2-1B BF16 took 1.35-1.5 decode steps where reading W once takes one (0.82-0.86x
 * llama.cpp side by side on an Intel Xeon, session 39). Here the same transpose is done in
 * registers per 16 W rows and 32 positions: 16 vectors, vector p holding BF16 pair p of the 16
 * rows (the panel's layout), multiplied into every x row's accumulator, straight away for 2-4 x
 * rows, through a K block's pairs on the stack (at most 8 KiB) for 5-16. Each output is the panel's
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
/* x rows whose accumulators are in registers at a time: 8 beside the weight vector and the
 * broadcasts; more rows run in sets of 8 over the same weights. */
#define FEW_SET 8
/* few_rows gathers a K block's pairs in TS_GEMM512_KB / 2 vectors, 16 per 32 positions */
_Static_assert(TS_GEMM512_KB % 32 == 0, "the few-row kernel's pair buffer needs K blocks of whole 32-position chunks");

typedef union {
    __m512i i;
    __m512bh h;
    __m512 f;
} fv512;

/* XS (a constant) x rows' accumulators through 8 pairs v of the 16 W rows (x at xg: BF16 pairs
 * or packed FP32 from the pairs' first position, rows ldb apart). Each accumulator is one
 * output per lane whose running sum takes the panel's steps in order: the pairs in order (dp);
 * the 8 even positions (low halves widened), then the 8 odd (FP32). */
static inline __attribute__((always_inline)) void few_pairs8(__m512 *acc, const __m512i *v, const void *xg,
                                                             size_t ldb, int XS, int dp) {
    if (dp) {
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) {
            fv512 w = {.i = v[q]};
#pragma GCC unroll 8
            for (int s = 0; s < XS; s++) {
                fv512 xv = {.i = _mm512_set1_epi32((int)((const uint32_t *)xg)[(size_t)s * ldb + q])};
                acc[s] = _mm512_dpbf16_ps(acc[s], xv.h, w.h);
            }
        }
        return;
    }
    const __m512i odd = _mm512_set1_epi32((int)0xffff0000u);
#pragma GCC unroll 16
    for (int q = 0; q < 16; q++) {
        __m512 w = _mm512_castsi512_ps(q < 8 ? _mm512_slli_epi32(v[q], 16) : _mm512_and_si512(v[q - 8], odd));
#pragma GCC unroll 8
        for (int s = 0; s < XS; s++)
            acc[s] = _mm512_fmadd_ps(_mm512_set1_ps(((const float *)xg)[(size_t)s * ldb + q]), w, acc[s]);
    }
}

/* A K block's sums of XS x rows into y's rows (rows: the W rows that exist): stored (first
 * block) or added, as the panels' store. */
static inline __attribute__((always_inline)) void few_store(float *y, int ldy, __mmask16 rows, int first,
                                                            const __m512 *acc, int XS) {
#pragma GCC unroll 8
    for (int s = 0; s < XS; s++) {
        float *d = y + (size_t)s * ldy;
        _mm512_mask_storeu_ps(d, rows, first ? acc[s] : _mm512_add_ps(_mm512_maskz_loadu_ps(rows, d), acc[s]));
    }
}

/* Loads 16 W rows (those below nv; a zero mask reads nothing) at positions [b, b + 32) (16 where
 * m says so) and transposes them: r[p] = pair p of the 16 rows, the panel's layout. */
static inline __attribute__((always_inline)) void few_load16(__m512i *r, const uint16_t *w0, int K, int nv, int b,
                                                             __mmask32 m) {
    for (int i = 0; i < 16; i++) {
        const uint16_t *p = w0 + (size_t)i * K + b;
        __builtin_prefetch((const char *)p + FEW_PF_L1, 0, 3);
        r[i] = _mm512_maskz_loadu_epi16(i < nv ? m : 0, p);
    }
    ts_transpose16_epi32(r);
}

/* One set of XS x rows against a K block's transposed pairs rm (ng 8-pair groups), from zero,
 * into y. Compiled once per XS and kind (k_set, out of line; the K loop stays in few_rows), so
 * the object stays small: with the whole call inlined per x row count up to 16, gcc took over
 * 5 minutes and clang over 10 to compile this file under ASan. */
static inline __attribute__((always_inline)) void few_set(float *y, int ldy, __mmask16 rows, int first,
                                                          const __m512i *rm, int ng, const void *x, size_t ldb,
                                                          int XS, int dp) {
    __m512 acc[FEW_SET];
#pragma GCC unroll 8
    for (int s = 0; s < XS; s++) acc[s] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        __m512i v[8];
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) v[q] = _mm512_load_si512(rm + 8 * g + q);
        few_pairs8(acc, v, dp ? (const void *)((const uint32_t *)x + 8 * g) : (const void *)((const float *)x + 16 * g),
                   ldb, XS, dp);
    }
    few_store(y, ldy, rows, first, acc, XS);
}

/* 2-4 x rows (XS a constant), all of a call: the pairs straight from the transpose into the
 * accumulators, which stay in registers over a K block (7-12% faster at 2-4 rows than through
 * rm and few_set, Llama-3.2-1B BF16; compiles in seconds for these three counts). */
static inline __attribute__((always_inline)) void few_direct(float *y, int ldy, const void *x, size_t ldb,
                                                             const uint16_t *W, int K, int n0, int n1, int XS,
                                                             int dp) {
    const int kb = dp ? TS_GEMM512_KB : TS_GEMM512_KB_F32;
    for (int n = n0; n < n1; n += 16) {
        const int nv = n1 - n < 16 ? n1 - n : 16;
        const uint16_t *w0 = W + (size_t)n * K;
        for (int k0 = 0; k0 < K; k0 += kb) {
            const int ke = K - k0 < kb ? K : k0 + kb;
            __m512 acc[4];
#pragma GCC unroll 4
            for (int s = 0; s < XS; s++) acc[s] = _mm512_setzero_ps();
            for (int b = k0; b < ke; b += 32) {
                const int full = ke - b >= 32; /* else 16 positions: 8 pairs */
                __m512i r[16];
                few_load16(r, w0, K, nv, b, full ? 0xffffffffu : 0xffffu);
                /* x from position b, and from b + 16 for the second 8 pairs */
                const void *xg0 = dp ? (const void *)((const uint32_t *)x + b / 2) : (const void *)((const float *)x + b);
                const void *xg1 = dp ? (const void *)((const uint32_t *)xg0 + 8) : (const void *)((const float *)xg0 + 16);
                few_pairs8(acc, r, xg0, ldb, XS, dp);
                if (full) few_pairs8(acc, r + 8, xg1, ldb, XS, dp);
            }
            few_store(y + n, ldy, (__mmask16)((1u << nv) - 1), k0 == 0, acc, XS);
        }
    }
}
#define FEW_DIRECT_FN(XS)                                                                                  \
    static void direct_##XS(float *y, int ldy, const void *x, size_t ldb, const uint16_t *W, int K, int n0, \
                            int n1, int dp) {                                                              \
        if (dp) few_direct(y, ldy, x, ldb, W, K, n0, n1, XS, 1);                                           \
        else few_direct(y, ldy, x, ldb, W, K, n0, n1, XS, 0);                                              \
    }
FEW_DIRECT_FN(2)
FEW_DIRECT_FN(3)
FEW_DIRECT_FN(4)
#undef FEW_DIRECT_FN
#define FEW_DIRECT_MAX 4
static void (*const k_direct[FEW_DIRECT_MAX + 1])(float *, int, const void *, size_t, const uint16_t *, int, int, int,
                                                  int) = {0, 0, direct_2, direct_3, direct_4};

typedef void (*few_set_fn)(float *y, int ldy, __mmask16 rows, int first, const __m512i *rm, int ng, const void *x,
                           size_t ldb);
#define FEW_SET_FN(XS)                                                                                     \
    static void set_dp_##XS(float *y, int ldy, __mmask16 rows, int first, const __m512i *rm, int ng,       \
                            const void *x, size_t ldb) {                                                   \
        few_set(y, ldy, rows, first, rm, ng, x, ldb, XS, 1);                                               \
    }                                                                                                      \
    static void set_f32_##XS(float *y, int ldy, __mmask16 rows, int first, const __m512i *rm, int ng,      \
                             const void *x, size_t ldb) {                                                  \
        few_set(y, ldy, rows, first, rm, ng, x, ldb, XS, 0);                                               \
    }
FEW_SET_FN(1)
FEW_SET_FN(2)
FEW_SET_FN(3)
FEW_SET_FN(4)
FEW_SET_FN(5)
FEW_SET_FN(6)
FEW_SET_FN(7)
FEW_SET_FN(8)
#undef FEW_SET_FN
static const few_set_fn k_set[2][FEW_SET + 1] = {
    {0, set_f32_1, set_f32_2, set_f32_3, set_f32_4, set_f32_5, set_f32_6, set_f32_7, set_f32_8},
    {0, set_dp_1, set_dp_2, set_dp_3, set_dp_4, set_dp_5, set_dp_6, set_dp_7, set_dp_8}};

/* W rows [n0, n1) against S x rows, 16 W rows at a time over all of K, in K blocks of kb
 * positions (the kind's panel block). dp: x as BF16 pairs (row stride ldb pairs), vdpbf16ps;
 * else FP32 FMA on x packed (row stride ldb floats). Per 32 positions the 16 rows are loaded
 * and transposed (vector p: pair p of the 16 rows, the panel's layout, 1 KiB), a K block's
 * pairs (at most 8 KiB) gathered in rm; then each set of up to 8 x rows runs over them (from 5
 * rows; 2-4 run few_direct). */
static void few_rows(float *y, int ldy, const void *x, size_t ldb, const uint16_t *W, int K, int S, int n0, int n1,
                     int dp) {
    if (S <= FEW_DIRECT_MAX) {
        k_direct[S](y, ldy, x, ldb, W, K, n0, n1, dp);
        return;
    }
    const int kb = dp ? TS_GEMM512_KB : TS_GEMM512_KB_F32;
    __m512i rm[TS_GEMM512_KB / 2];
    for (int n = n0; n < n1; n += 16) {
        const int nv = n1 - n < 16 ? n1 - n : 16;
        const __mmask16 rows = (__mmask16)((1u << nv) - 1);
        const uint16_t *w0 = W + (size_t)n * K;
        for (int k0 = 0; k0 < K; k0 += kb) {
            const int ke = K - k0 < kb ? K : k0 + kb;
            for (int b = k0; b < ke; b += 32) {
                __m512i r[16];
                few_load16(r, w0, K, nv, b, ke - b >= 32 ? 0xffffffffu : 0xffffu);
                for (int p = 0; p < 16; p++) _mm512_store_si512(rm + (b - k0) / 2 + p, r[p]);
            }
            for (int s0 = 0; s0 < S; s0 += FEW_SET) {
                const int xs = S - s0 < FEW_SET ? S - s0 : FEW_SET;
                const void *xr = dp ? (const void *)((const uint32_t *)x + (size_t)s0 * ldb + k0 / 2)
                                    : (const void *)((const float *)x + (size_t)s0 * ldb + k0);
                k_set[dp][xs](y + (size_t)s0 * ldy + n, ldy, rows, k0 == 0, rm, (ke - k0) / 16, xr, ldb);
            }
        }
    }
}

int ts_cpu_gemm_few_avx512(int dp, float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K, int S,
                           int n0, int n1) {
    if (S < 2 || S > TS_GEMM512_FEW_MAX) return 0;
    if (!dp) {
        few_rows(y, ldy, xp, (size_t)ldx, W, K, S, n0, n1, 0);
        return 1;
    }
    /* x rounded to BF16 pairs once per call, as the panels' x blocks (natural order) */
    size_t ldb = ((size_t)K / 2 + 15) / 16 * 16; /* pairs */
    if (ldb % 1024 == 0) ldb += 16;                /* rows not 4 KiB multiples apart (L1 sets) */
    uint32_t *xb = aligned_alloc(64, sizeof(uint32_t) * ldb * (size_t)S);
    if (!xb) return 0;
    for (int s = 0; s < S; s++)
        ts_cpu_x_to_bf16_avx512((uint16_t *)(xb + (size_t)s * ldb), 0, 1, xp + (size_t)s * ldx, K);
    few_rows(y, ldy, xb, ldb, W, K, S, n0, n1, 1);
    free(xb);
    return 1;
}
