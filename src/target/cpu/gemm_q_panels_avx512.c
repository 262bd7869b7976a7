/* AVX-512 integer prefill panels on Q8_0 / Q4_0 weights (stored or in lane order): I16, x
 * quantized to 16 bits as the decode quantizes it against the codes widened to int16
 * (vpdpwssd), and the experimental I8 (8-bit x, llama.cpp's activations, vpdpbusd), both on the
 * panel blocking of gemm_panels_avx512.h. Compiled with gemm_q_avx512.c's flags
 * (CMakeLists.txt); used only when CPUID has AVX-512 VNNI. */
#include <immintrin.h>
#include <string.h>

#include "target/cpu/gemm.h"
#include "target/cpu/gemm_panels_avx512.h"
#include "target/cpu/gemm_q_avx512.h"
#include "target/cpu/gemm_q_blocks_avx512.h"
#include "target/cpu/transpose_avx512.h"

/* ---- Prefill: 16-bit x against 16-bit W panels with vpdpwssd ----
 * The blocking of gemm_avx512.c (ts_cpu_gemm_panels_avx512): per K block of Q16_KB positions
 * each x row is quantized exactly as the decode kernels quantize it (quantize_x: int16 codes
 * per 32-block and an FP32 scale), and a panel of 64 W rows holds their codes sign-extended to
 * int16, pair (2i, 2i + 1) of the 64 rows in one 64-dword step (a 16 x 16 dword transpose per
 * 16 rows and block), followed by the 64 FP32 scales of each block. A tile of up to 3 x rows x
 * 64 W rows keeps 12 int32 accumulators: per pair of positions one broadcast x dword per row
 * and four vpdpwssd zmm (32 products each, exact); at the end of each 32-block every sum is
 * converted and added in FP32 as sum * (d_w * d_x), as in the decode kernels, to 12 FP32
 * accumulators. So a row's block dots are the decode GEMV's exact int32 sums, and the result
 * differs from decode only in the FP32 summation order; every output is the same computation
 * whatever tile, S or thread split (the framework's per-K-block running sum). */
#define Q16_KB TS_Q16_KB /* a panel is 16 KiB of codes + 1 KiB of scales */
#define Q16_MR 3

/* Codes of x rows [0, S), positions [k0, k0 + kb), at row stride TS_PANEL_LDB dwords: kb int16
 * (kb / 2 dwords), then the kb / 32 FP32 scales. */
static void q16_x_block(void *xb, const float *xp, int ldx, int S, int k0, int kb) {
    for (int s = 0; s < S; s++) {
        uint32_t *r = (uint32_t *)xb + (size_t)s * TS_PANEL_LDB;
        ts_cpu_quantize_x_avx512((ts_gemm_qx){(int16_t *)r, (float *)(r + kb / 2)}, xp + (size_t)s * ldx + k0, kb);
    }
}

/* One panel. Lane-order rows come here only for their tail blocks and where the panels cannot
 * take a whole group at a time (q16_pack_group, below): each row's 4 blocks put back through the
 * stage (ts_qblk_run), which the I8 packs share. */
static inline __attribute__((always_inline)) void q16_pack(void *Pv, const void *Wv, ts_dtype dt, int K, int n,
                                                            int nv, int k0, int kb) {
    uint32_t *P = Pv;
    float *dw = (float *)(P + (size_t)kb / 2 * TS_PANEL_N);
    const uint8_t *W = Wv;
    size_t rb = ts_gemm_row_bytes(dt, K);
    uint8_t stage[16][8 + 4 * TS_QBLOCK] __attribute__((aligned(64)));
    ts_qblk qb[16][4];
    for (int g = 0; g < TS_PANEL_N; g += 16) {
        int nrow = nv - g < 0 ? 0 : (nv - g > 16 ? 16 : nv - g);
        for (int b4 = 0; b4 < kb; b4 += 4 * TS_QBLOCK) { /* 4 blocks of each row found (staged) at once */
            int nb4 = (kb - b4) / TS_QBLOCK < 4 ? (kb - b4) / TS_QBLOCK : 4;
            for (int i = 0; i < nrow; i++)
                ts_qblk_run(W + (size_t)(n + g + i) * rb, K, (k0 + b4) / TS_QBLOCK, nb4, dt, stage[i], qb[i]);
            for (int j = 0; j < nb4; j++) {
                int b = b4 + j * TS_QBLOCK;
                __m512i r[16];
                float *d = dw + (size_t)(b / TS_QBLOCK) * TS_PANEL_N + g;
                for (int i = 0; i < 16; i++) {
                    r[i] = i < nrow ? _mm512_cvtepi8_epi16(ts_qblk_w8(qb[i][j], ts_x16_stored(dt))) : _mm512_setzero_si512();
                    d[i] = i < nrow ? f16(qb[i][j].scale) : 0.0f;
                }
                ts_transpose16_epi32(r); /* r[p]: pair p of the 16 rows */
                uint32_t *o = P + (size_t)(b / 2) * TS_PANEL_N + g;
                for (int p = 0; p < 16; p++) _mm512_store_si512(o + (size_t)p * TS_PANEL_N, r[p]);
            }
        }
    }
}
static void q16_pack_q8(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    q16_pack(P, W, TS_DTYPE_Q8_0, K, n, nv, k0, kb);
}
static void q16_pack_q4(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    q16_pack(P, W, TS_DTYPE_Q4_0, K, n, nv, k0, kb);
}
static void q16_pack_q8x16(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    q16_pack(P, W, TS_DTYPE_Q8_0X16, K, n, nv, k0, kb);
}
static void q16_pack_q4x16(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    q16_pack(P, W, TS_DTYPE_Q4_0X16, K, n, nv, k0, kb);
}

/* The four I16 panels of a whole group of lane-order rows at once (ts_panel_ops.pack_group): per
 * 16 rows, code vector m of the 16 rows by one 16 x 16 dword transpose (ts_x16_group_cols)
 * gives dword m of every block for the 16 rows (Q8_0: codes 4m..4m+3; Q4_0: those in the low nibbles, 16 + 4m.. in the
 * high ones), which widened to int16 are the block's pairs 2m and 2m + 1 (Q4_0: and 8 + 2m, 9 +
 * 2m; one vpermt2d each); the scale vectors likewise. Where a panel of 4 blocks at a time put
 * each row's blocks back first (8 lane permutes a row per panel, as ts_x16_unlane4, the group's
 * code vectors read once per panel; from registers, not the stage) and then transposed every
 * block at 16 bits, 16 Q8_0 rows of 8192 x 2048 took 1.12-1.18x the stored order's time from
 * DRAM and 1.05-1.06x from L2 (512 rows; 1.23x and 1.15x through the stage), a group at a time
 * 0.99-1.00x and 0.86-0.88x (one thread, session 36); Q4_0 files on the I16 kind ran 16-token
 * prompts 1.09-1.18x as fast by groups as by panels (its 4 blocks from registers), 32-512 tokens
 * 0.99-1.10x (tessera bench, alternating). The same panels, so the same bits. */
static inline __attribute__((always_inline)) void q16_pack_group(uint32_t *P4, const uint8_t *W, int K, int n, int nv,
                                                                  int g, int q8) {
    const ts_dtype x16 = q8 ? TS_DTYPE_Q8_0X16 : TS_DTYPE_Q4_0X16;
    const size_t rb = ts_gemm_row_bytes(x16, K), gb = 16 * (q8 ? 2 + TS_QBLOCK : 2 + TS_QBLOCK / 2);
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int h = 0; h < TS_PANEL_N; h += 16) {
        int nrow = nv - h < 0 ? 0 : (nv - h > 16 ? 16 : nv - h);
        const uint8_t *gp = W + (size_t)(n + h) * rb + (size_t)g * gb;
        __m512i r[16];
        ts_x16_group_cols(gp, rb, nrow, -1, r);
        for (int L = 0; L < 16; L++) {
            int b = ts_x16_lane(x16, L); /* lane L holds block b (the mapping is its own inverse) */
            float *d = (float *)(P4 + (size_t)(b / 4) * TS_PANEL_SLOT + Q16_KB / 2 * TS_PANEL_N);
            _mm512_store_si512(d + (size_t)(b % 4) * TS_PANEL_N + h, r[L]);
        }
        for (int m = 0; m < (q8 ? 8 : 4); m++) {
            ts_x16_group_cols(gp, rb, nrow, m, r);
            for (int L = 0; L < 16; L++) {
                int b = ts_x16_lane(x16, L);
                uint32_t *o = P4 + (size_t)(b / 4) * TS_PANEL_SLOT + (size_t)((b % 4) * (TS_QBLOCK / 2) + 2 * m) * TS_PANEL_N + h;
                for (int e = 0; e < (q8 ? 1 : 2); e++) { /* Q4_0: the low nibbles (pairs 2m..), the high (8 + 2m..) */
                    __m512i c = q8 ? r[L] : ts_q4_w8_512(r[L], e);
                    __m512i lo = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(c));       /* rows 0-7 */
                    __m512i hi = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(c, 1)); /* rows 8-15 */
                    _mm512_store_si512(o + (size_t)e * 8 * TS_PANEL_N, _mm512_permutex2var_epi32(lo, ev, hi));
                    _mm512_store_si512(o + (size_t)e * 8 * TS_PANEL_N + TS_PANEL_N, _mm512_permutex2var_epi32(lo, od, hi));
                }
            }
        }
    }
}
static void q16_pack_group_q8x16(void *P4, const void *W, int K, int n, int nv, int g) {
    q16_pack_group(P4, W, K, n, nv, g, 1);
}
static void q16_pack_group_q4x16(void *P4, const void *W, int K, int n, int nv, int g) {
    q16_pack_group(P4, W, K, n, nv, g, 0);
}

/* ms (<= Q16_MR) x rows of the block against the panel, per 32-position block an integer dot
 * product then scaled in FP32. I8 (constant): the 8-bit form (8 vpdpbusd steps of 4 positions a
 * block, the sums starting from the block's offset correction stored after the scales), else the
 * 16-bit one (16 vpdpwssd steps of 2 positions, from zero). np panel steps = np / (I8 ? 8 : 16)
 * blocks; the block scales of W follow the panel, those of x follow each x row. */
static inline __attribute__((always_inline)) void qint_tile(float *y, int ldy, const uint32_t *x, int ldb,
                                                             const uint32_t *P, int np, int MS, int first, int I8) {
    const int steps = I8 ? 8 : 16, nblk = np / steps;
    const float *dw = (const float *)(P + (size_t)np * TS_PANEL_N);
    const __m512i *corr = (const __m512i *)(dw + (size_t)nblk * TS_PANEL_N);
    __m512 acc[Q16_MR][4];
#pragma GCC unroll 3
    for (int i = 0; i < MS; i++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) acc[i][j] = _mm512_setzero_ps();
    for (int blk = 0; blk < nblk; blk++) {
        __m512i s[Q16_MR][4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m512i c = I8 ? _mm512_load_si512(corr + (size_t)blk * 4 + j) : _mm512_setzero_si512();
#pragma GCC unroll 3
            for (int i = 0; i < MS; i++) s[i][j] = c;
        }
        const uint32_t *pp = P + (size_t)blk * steps * TS_PANEL_N;
#pragma GCC unroll 2
        for (int q = 0; q < steps; q++, pp += TS_PANEL_N) {
            __m512i w[4] = {_mm512_load_si512(pp), _mm512_load_si512(pp + 16), _mm512_load_si512(pp + 32),
                            _mm512_load_si512(pp + 48)};
#pragma GCC unroll 3
            for (int i = 0; i < MS; i++) {
                __m512i b = _mm512_set1_epi32((int)x[(size_t)i * ldb + blk * steps + q]);
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++)
                    s[i][j] = I8 ? _mm512_dpbusd_epi32(s[i][j], b, w[j]) : _mm512_dpwssd_epi32(s[i][j], w[j], b);
            }
        }
#pragma GCC unroll 3
        for (int i = 0; i < MS; i++) {
            __m512 dx = _mm512_set1_ps(((const float *)(x + (size_t)i * ldb + np))[blk]);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i][j]),
                                            _mm512_mul_ps(_mm512_loadu_ps(dw + (size_t)blk * TS_PANEL_N + 16 * j), dx),
                                            acc[i][j]);
        }
    }
    ts_panel_store(y, ldy, acc, MS, first);
}
#define q16_tile(y, ldy, x, ldb, P, np, MS, first) qint_tile(y, ldy, x, ldb, P, np, MS, first, 0)
#define q8x_tile(y, ldy, x, ldb, P, np, MS, first) qint_tile(y, ldy, x, ldb, P, np, MS, first, 1)

/* Tiles of 1-3 rows; 4-6 as two of them (the framework's tiles go up to 6 rows). */
TS_PANEL_TILES_3ROW(q16, q16_tile)

static const ts_panel_ops k_q8_i16 = {Q16_KB, 2, q16_x_block, q16_pack_q8,
                                      TS_PANEL_TILE_LIST(q16), TS_DTYPE_Q8_0, NULL};
static const ts_panel_ops k_q4_i16 = {Q16_KB, 2, q16_x_block, q16_pack_q4,
                                      TS_PANEL_TILE_LIST(q16), TS_DTYPE_Q4_0, NULL};
static const ts_panel_ops k_q4x16_i16 = {Q16_KB, 2, q16_x_block, q16_pack_q4x16,
                                      TS_PANEL_TILE_LIST(q16), TS_DTYPE_Q4_0X16, q16_pack_group_q4x16};
static const ts_panel_ops k_q8x16_i16 = {Q16_KB, 2, q16_x_block, q16_pack_q8x16,
                                      TS_PANEL_TILE_LIST(q16), TS_DTYPE_Q8_0X16, q16_pack_group_q8x16};

/* The I16 panels of tile-order rows (gemm.h; n % 16 == 0 and rows past nv in whole groups of
 * 16, as ts_cpu_gemm_q_prefill_t16_avx512 calls them): a block's code vector m is already dword
 * m of its 16 rows, what q16_pack_group gets by a transpose from the lane order, so each is
 * widened to int16 and split into its two pairs as there (Q4_0: its low and high nibbles first);
 * the scales are the block's 16 F16 as they lie. The same panels, so the same bits. */
static inline __attribute__((always_inline)) void q16_pack_t16(void *Pv, const void *Wv, ts_dtype t16, int K, int n,
                                                                int nv, int k0, int kb) {
    const int q8 = t16 == TS_DTYPE_Q8_0T16;
    uint32_t *P = Pv;
    float *dw = (float *)(P + (size_t)kb / 2 * TS_PANEL_N);
    const size_t gbytes = 16 * ts_gemm_row_bytes(t16, K), gb = ts_t16_group_block(t16);
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int h = 0; h < TS_PANEL_N; h += 16)
        for (int j = 0; j < kb / TS_QBLOCK; j++) {
            float *d = dw + (size_t)j * TS_PANEL_N + h;
            uint32_t *o = P + (size_t)j * (TS_QBLOCK / 2) * TS_PANEL_N + h;
            if (h >= nv) { /* a panel's missing rows contribute zero */
                _mm512_store_ps(d, _mm512_setzero_ps());
                for (int p = 0; p < TS_QBLOCK / 2; p++) _mm512_store_si512(o + (size_t)p * TS_PANEL_N, _mm512_setzero_si512());
                continue;
            }
            const uint8_t *blk = (const uint8_t *)Wv + (size_t)((n + h) / 16) * gbytes + (size_t)(k0 / TS_QBLOCK + j) * gb;
            _mm512_store_ps(d, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk)));
            for (int m = 0; m < (q8 ? 8 : 4); m++) {
                const __m512i v = _mm512_loadu_si512(blk + 32 + 64 * m);
                for (int e = 0; e < (q8 ? 1 : 2); e++) { /* Q4_0: the low nibbles (pairs 2m..), the high (8 + 2m..) */
                    __m512i c = q8 ? v : ts_q4_w8_512(v, e);
                    __m512i lo = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(c));       /* rows 0-7 */
                    __m512i hi = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(c, 1)); /* rows 8-15 */
                    uint32_t *op = o + (size_t)(2 * m + 8 * e) * TS_PANEL_N;
                    _mm512_store_si512(op, _mm512_permutex2var_epi32(lo, ev, hi));
                    _mm512_store_si512(op + TS_PANEL_N, _mm512_permutex2var_epi32(lo, od, hi));
                }
            }
        }
}
static void q16_pack_q8t16(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    q16_pack_t16(P, W, TS_DTYPE_Q8_0T16, K, n, nv, k0, kb);
}
static void q16_pack_q4t16(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    q16_pack_t16(P, W, TS_DTYPE_Q4_0T16, K, n, nv, k0, kb);
}
/* a whole group's four panels (ts_panel_ops.pack_group): the same panels one K block after the other */
static void q16_pack_group_q8t16(void *P4, const void *W, int K, int n, int nv, int g) {
    for (int j = 0; j < 16 * TS_QBLOCK / Q16_KB; j++)
        q16_pack_t16((uint32_t *)P4 + (size_t)j * TS_PANEL_SLOT, W, TS_DTYPE_Q8_0T16, K, n, nv,
                     16 * TS_QBLOCK * g + Q16_KB * j, Q16_KB);
}
static void q16_pack_group_q4t16(void *P4, const void *W, int K, int n, int nv, int g) {
    for (int j = 0; j < 16 * TS_QBLOCK / Q16_KB; j++)
        q16_pack_t16((uint32_t *)P4 + (size_t)j * TS_PANEL_SLOT, W, TS_DTYPE_Q4_0T16, K, n, nv,
                     16 * TS_QBLOCK * g + Q16_KB * j, Q16_KB);
}
static const ts_panel_ops k_q8t16_i16 = {Q16_KB, 2, q16_x_block, q16_pack_q8t16,
                                         TS_PANEL_TILE_LIST(q16), TS_DTYPE_Q8_0T16, q16_pack_group_q8t16};
static const ts_panel_ops k_q4t16_i16 = {Q16_KB, 2, q16_x_block, q16_pack_q4t16,
                                         TS_PANEL_TILE_LIST(q16), TS_DTYPE_Q4_0T16, q16_pack_group_q4t16};


/* ---- Prefill, experimental: 8-bit x (llama.cpp's Q8_0 activations) with vpdpbusd ----
 * x per 32-block to q = round(x * 127 / amax), stored as q + 128 (unsigned); panels of int8
 * codes, a dword = 4 consecutive positions of one row, and per block the FP32 scales and
 * -128 * sum(codes) (the offset's correction, the int32 accumulators' start value). */
#define Q8X_KB 256

static void q8x_row(uint8_t *q, float *d, const float *xp, int K) {
    const __m512i perm = _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
    for (int b = 0; b < K; b += TS_QBLOCK) {
        __m512 v0 = _mm512_permutexvar_ps(perm, _mm512_loadu_ps(xp + b));
        __m512 v1 = _mm512_permutexvar_ps(perm, _mm512_loadu_ps(xp + b + 16));
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        float id = amax > 0 ? 127.0f / amax : 0.0f;
        d[b / TS_QBLOCK] = amax / 127.0f;
        __m512 vid = _mm512_set1_ps(id);
        const __m128i off = _mm_set1_epi8((char)0x80);
        _mm_storeu_si128((__m128i *)(q + b), _mm_xor_si128(off, _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, vid)))));
        _mm_storeu_si128((__m128i *)(q + b + 16),
                         _mm_xor_si128(off, _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, vid)))));
    }
}

static void q8x_x_block(void *xb, const float *xp, int ldx, int S, int k0, int kb) {
    for (int s = 0; s < S; s++) {
        uint32_t *r = (uint32_t *)xb + (size_t)s * TS_PANEL_LDB;
        q8x_row((uint8_t *)r, (float *)(r + kb / 4), xp + (size_t)s * ldx + k0, kb);
    }
}

static inline __attribute__((always_inline)) void q8x_pack(void *Pv, const void *Wv, ts_dtype dt, int K, int n, int nv,
                                                            int k0, int kb) {
    uint32_t *P = Pv;
    int nblk = kb / TS_QBLOCK;
    float *dw = (float *)(P + (size_t)kb / 4 * TS_PANEL_N);
    int32_t *corr = (int32_t *)(dw + (size_t)nblk * TS_PANEL_N);
    const uint8_t *W = Wv;
    size_t rb = ts_gemm_row_bytes(dt, K);
    const ts_dtype st = ts_x16_stored(dt);
    const __m512i ones = _mm512_set1_epi8(1);
    uint8_t stage[16][8 + 4 * TS_QBLOCK] __attribute__((aligned(64)));
    ts_qblk qb[16][4];
    for (int g = 0; g < TS_PANEL_N; g += 16) {
        int nrow = nv - g < 0 ? 0 : (nv - g > 16 ? 16 : nv - g);
        for (int b = 0; b < nblk; b += 2) { /* two blocks per 64-byte row: 16 quads */
            int two = b + 1 < nblk;
            if (b % 4 == 0) /* 4 blocks of each row found (staged) at once */
                for (int i = 0; i < nrow; i++)
                    ts_qblk_run(W + (size_t)(n + g + i) * rb, K, k0 / TS_QBLOCK + b, nblk - b < 4 ? nblk - b : 4, dt,
                                stage[i], qb[i]);
            __m512i r[16];
            for (int i = 0; i < 16; i++) {
                ts_qblk q0 = i < nrow ? qb[i][b % 4] : (ts_qblk){0}, q1 = i < nrow && two ? qb[i][b % 4 + 1] : q0;
                __m256i lo = i < nrow ? ts_qblk_w8(q0, st) : _mm256_setzero_si256();
                __m256i hi = i < nrow && two ? ts_qblk_w8(q1, st) : _mm256_setzero_si256();
                r[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
                dw[(size_t)b * TS_PANEL_N + g + i] = i < nrow ? f16(q0.scale) : 0.0f;
                if (two) dw[(size_t)(b + 1) * TS_PANEL_N + g + i] = i < nrow ? f16(q1.scale) : 0.0f;
            }
            ts_transpose16_epi32(r); /* r[q]: quad q of the 16 rows (8..15: the second block) */
            for (int h = 0; h < 1 + two; h++) {
                __m512i sum = _mm512_setzero_si512();
                uint32_t *o = P + (size_t)(b + h) * 8 * TS_PANEL_N + g;
                for (int q = 0; q < 8; q++) {
                    _mm512_store_si512(o + (size_t)q * TS_PANEL_N, r[8 * h + q]);
                    sum = _mm512_dpbusd_epi32(sum, ones, r[8 * h + q]);
                }
                _mm512_storeu_si512(corr + (size_t)(b + h) * TS_PANEL_N + g, _mm512_slli_epi32(_mm512_sub_epi32(_mm512_setzero_si512(), sum), 7));
            }
        }
    }
}
static void q8x_pack_q8(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    q8x_pack(P, W, TS_DTYPE_Q8_0, K, n, nv, k0, kb);
}
static void q8x_pack_q4(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    q8x_pack(P, W, TS_DTYPE_Q4_0, K, n, nv, k0, kb);
}
static void q8x_pack_q8x16(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    q8x_pack(P, W, TS_DTYPE_Q8_0X16, K, n, nv, k0, kb);
}
static void q8x_pack_q4x16(void *P, const void *W, int K, int n, int nv, int k0, int kb) {
    q8x_pack(P, W, TS_DTYPE_Q4_0X16, K, n, nv, k0, kb);
}

TS_PANEL_TILES_3ROW(q8x, q8x_tile)
static const ts_panel_ops k_q8_i8 = {Q8X_KB, 4, q8x_x_block, q8x_pack_q8,
                                     TS_PANEL_TILE_LIST(q8x), TS_DTYPE_Q8_0, NULL};
static const ts_panel_ops k_q4_i8 = {Q8X_KB, 4, q8x_x_block, q8x_pack_q4,
                                     TS_PANEL_TILE_LIST(q8x), TS_DTYPE_Q4_0, NULL};
static const ts_panel_ops k_q4x16_i8 = {Q8X_KB, 4, q8x_x_block, q8x_pack_q4x16,
                                     TS_PANEL_TILE_LIST(q8x), TS_DTYPE_Q4_0X16, NULL};
static const ts_panel_ops k_q8x16_i8 = {Q8X_KB, 4, q8x_x_block, q8x_pack_q8x16,
                                     TS_PANEL_TILE_LIST(q8x), TS_DTYPE_Q8_0X16, NULL};

void ts_cpu_q_prefill_i16_avx512(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                                 int n0, int n1) {
    const ts_panel_ops *o = dt == TS_DTYPE_Q8_0T16   ? &k_q8t16_i16
                            : dt == TS_DTYPE_Q4_0T16 ? &k_q4t16_i16
                                                     : q_ops(dt, &k_q8_i16, &k_q4_i16, &k_q8x16_i16, &k_q4x16_i16);
    ts_cpu_gemm_panels_avx512(o, y, ldy, xp, ldx, W, K, S, n0, n1);
}
void ts_cpu_q_prefill_i8_avx512(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                                int n0, int n1) {
    ts_cpu_gemm_panels_avx512(q_ops(dt, &k_q8_i8, &k_q4_i8, &k_q8x16_i8, &k_q4x16_i8), y, ldy, xp, ldx, W, K, S, n0, n1);
}
