/* Q8_0 / Q4_0 blocks read into AVX-512 registers, shared by the VNNI kernels (gemm_q_avx512.c)
 * and the AMX prefill (gemm_q_amx.c), which must see the same codes and scales bit for bit.
 * A block: an F16 scale, then 32 int8 codes (Q8_0) or 16 bytes of 4-bit codes, low nibbles
 * positions 0..15, high nibbles 16..31, weight = code - 8 (Q4_0). Include only from files
 * compiled with -mavx512f -mavx512bw -mf16c. */
#ifndef TS_TARGET_CPU_GEMM_Q_BLOCKS_AVX512_H
#define TS_TARGET_CPU_GEMM_Q_BLOCKS_AVX512_H
#include <immintrin.h>
#include <stdint.h>

#include "io/dtype.h"
#include "target/cpu/gemm.h"
#include "target/cpu/transpose_avx512.h"

/* the block's scale d_w, exactly */
static inline float f16(const uint8_t *p) {
    uint16_t h;
    __builtin_memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Q4_0's 16 code bytes to its 32 weights as int8 (code - 8), natural order */
static inline __attribute__((always_inline)) __m256i ts_q4_w8(__m128i v) {
    const __m128i m4 = _mm_set1_epi8(15);
    __m256i c = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
    return _mm256_sub_epi8(c, _mm256_set1_epi8(8));
}

/* The 32 weights of one block as int16 in natural order. */
static inline __attribute__((always_inline)) __m512i block_w16(const uint8_t *blk, ts_dtype dt) {
    if (dt == TS_DTYPE_Q8_0) return _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(blk + 2)));
    return _mm512_cvtepi8_epi16(ts_q4_w8(_mm_loadu_si128((const __m128i *)(blk + 2))));
}

/* Where block b of a row keeps its scale and its 16 or 32 code bytes: a stored block, or a
 * block of a row in 16-block lane order (gemm.h), whose code dwords lie 64 bytes apart in its
 * group. The prefill packs read either through this, so they need no second copy. */
typedef struct ts_qblk {
    const uint8_t *scale, *codes;
    int stride; /* bytes from one code dword to the next: 4 (stored) or 64 (lane order) */
} ts_qblk;

static inline __attribute__((always_inline)) ts_qblk ts_qblk_at(const uint8_t *row, int K, int b, ts_dtype dt) {
    size_t bb = ts_x16_stored(dt) == TS_DTYPE_Q8_0 ? 2 + TS_QBLOCK : 2 + TS_QBLOCK / 2;
    if (!ts_dtype_is_x16(dt) || b >= K / TS_QBLOCK / 16 * 16) {
        const uint8_t *p = row + (size_t)b * bb;
        return (ts_qblk){p, p + 2, 4};
    }
    const uint8_t *g = row + (size_t)(b / 16) * 16 * bb;
    int lane = ts_x16_lane(dt, b % 16);
    return (ts_qblk){g + 2 * lane, g + 32 + 4 * lane, 64};
}

/* code bytes [16 h, 16 h + 16) of the block (Q4_0: h = 0, its 16 bytes) */
static inline __attribute__((always_inline)) __m128i ts_qblk_codes16(ts_qblk q, int h) {
    if (q.stride == 4) return _mm_loadu_si128((const __m128i *)(q.codes + 16 * h));
    return _mm_i32gather_epi32((const int *)(q.codes + 256 * h), _mm_setr_epi32(0, 64, 128, 192), 1);
}
/* Q8_0's 32 code bytes */
static inline __attribute__((always_inline)) __m256i ts_qblk_codes32(ts_qblk q) {
    if (q.stride == 4) return _mm256_loadu_si256((const __m256i *)q.codes);
    return _mm256_i32gather_epi32((const int *)q.codes, _mm256_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448), 1);
}
/* the 32 codes as int8 (Q4_0: code - 8), natural order; st the stored type */
static inline __attribute__((always_inline)) __m256i ts_qblk_w8(ts_qblk q, ts_dtype st) {
    if (st == TS_DTYPE_Q8_0) return ts_qblk_codes32(q);
    return ts_q4_w8(ts_qblk_codes16(q, 0));
}

/* Blocks [b0, b0 + 4) of a row in 16-block lane order, b0 % 4 == 0 and all four inside the
 * row's whole groups, their scales and codes put back in block order: scales to sc (4 x 2
 * bytes), codes to co (block j at co + 16 j for Q4_0, co + 32 j for Q8_0). A few loads and
 * shuffles for the four, where reading each block through ts_qblk_at takes a gather: the I8
 * prefill packs stage each row's blocks so, and the I16 ones where they cannot take a whole
 * group at a time (q16_pack_group, gemm_q_panels_avx512.c). The AMX packs read a lane-order row's whole groups by transposes
 * (gemm_q_amx.c, pack_group_x16), its tail and stored rows block by block. */
/* Q4_0: the 16 code bytes of blocks b0 + j in 128-bit lane j (lanes = blocks: 16 bytes of each
 * code vector, a 4 x 4 dword transpose) */
static inline __attribute__((always_inline)) __m512i ts_x16_q4_codes4(const uint8_t *row, int b0) {
    const uint8_t *g = row + (size_t)(b0 / 16) * 16 * (2 + TS_QBLOCK / 2) + 32 + 16 * ((b0 % 16) / 4);
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)g));
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(g + 64)), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(g + 128)), 2);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(g + 192)), 3);
    /* dword 4m + j (code dword m of block j) to 4j + m */
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), z);
}
/* Q4_0: the scales of blocks b0 .. b0 + 3 (lanes = blocks: side by side) */
static inline __attribute__((always_inline)) const uint8_t *ts_x16_q4_scales4(const uint8_t *row, int b0) {
    return row + (size_t)(b0 / 16) * 16 * (2 + TS_QBLOCK / 2) + 2 * (b0 % 16);
}

static inline __attribute__((always_inline)) void ts_x16_unlane4(ts_dtype x16, const uint8_t *row, int b0, uint8_t *sc,
                                                                 uint8_t *co) {
    if (x16 == TS_DTYPE_Q4_0X16) {
        _mm512_storeu_si512(co, ts_x16_q4_codes4(row, b0));
        __builtin_memcpy(sc, ts_x16_q4_scales4(row, b0), 8);
        return;
    }
    /* Q8_0: block 4a + c of the group (a = (b0 % 16) / 4) is in lane 4c + a: dwords a, 4 + a,
     * 8 + a, 12 + a of each of the 8 code vectors */
    const uint8_t *g = row + (size_t)(b0 / 16) * 16 * (2 + TS_QBLOCK);
    int a = (b0 % 16) / 4;
    const __m512i pick = _mm512_add_epi32(_mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28),
                                          _mm512_set1_epi32(a));
    __m256i p[4]; /* p[h]: vectors 2h, 2h + 1, blocks 0..3 each */
    for (int h = 0; h < 4; h++)
        p[h] = _mm512_castsi512_si256(_mm512_permutex2var_epi32(_mm512_loadu_si512(g + 32 + 128 * h), pick,
                                                                _mm512_loadu_si512(g + 32 + 128 * h + 64)));
    /* z0 dword 4j + c: vector j, block c (j < 4); z1 the same for vectors 4..7 */
    __m512i z0 = _mm512_inserti64x4(_mm512_castsi256_si512(p[0]), p[1], 1);
    __m512i z1 = _mm512_inserti64x4(_mm512_castsi256_si512(p[2]), p[3], 1);
    const __m512i o01 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
    const __m512i o23 = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
    _mm512_storeu_si512(co, _mm512_permutex2var_epi32(z0, o01, z1));
    _mm512_storeu_si512(co + 64, _mm512_permutex2var_epi32(z0, o23, z1));
    for (int c = 0; c < 4; c++) __builtin_memcpy(sc + 2 * c, g + 2 * (4 * c + a), 2);
}

/* A whole 16-block group of 16 lane-order rows (nrow of them from gp, the group's first byte in
 * the first row, rows rb apart; the others zero) by columns, as both whole-group packs (the AMX
 * tiles', gemm_q_amx.c; the I16 panels', gemm_q_panels_avx512.c) read it: m < 0 the scales as floats,
 * r[L] the 16 rows' scale of lane L's block; else code vector m, r[L] dword m of lane L's block in
 * the 16 rows (Q8_0: codes 4m..4m+3; Q4_0: those in the low nibbles, 16 + 4m.. in the high ones).
 * One 16 x 16 dword transpose each. */
static inline __attribute__((always_inline)) void ts_x16_group_cols(const uint8_t *gp, size_t rb, int nrow, int m,
                                                                    __m512i r[16]) {
    for (int i = 0; i < 16; i++) {
        const uint8_t *p = gp + (size_t)i * rb;
        r[i] = i >= nrow ? _mm512_setzero_si512()
               : m < 0   ? _mm512_castps_si512(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)))
                         : _mm512_loadu_si512(p + 32 + 64 * m);
    }
    ts_transpose16_epi32(r);
}
/* Q4_0 code bytes' low (high = 0) or high nibbles as int8 weights (code - 8), 64 at a time */
static inline __attribute__((always_inline)) __m512i ts_q4_w8_512(__m512i v, int high) {
    const __m512i m4 = _mm512_set1_epi8(15);
    return _mm512_sub_epi8(_mm512_and_si512(high ? _mm512_srli_epi16(v, 4) : v, m4), _mm512_set1_epi8(8));
}

/* ts_qblk of blocks [b0, b0 + n) of a row (n <= 4, b0 % 4 == 0), four in lane order staged in
 * st (8 + 128 bytes) by ts_x16_unlane4, others where they lie. */
static inline __attribute__((always_inline)) void ts_qblk_run(const uint8_t *row, int K, int b0, int n, ts_dtype dt,
                                                              uint8_t *st, ts_qblk *q) {
    if (ts_dtype_is_x16(dt) && n == 4 && b0 + 4 <= K / TS_QBLOCK / 16 * 16) {
        int cb = ts_x16_stored(dt) == TS_DTYPE_Q8_0 ? TS_QBLOCK : TS_QBLOCK / 2;
        ts_x16_unlane4(dt, row, b0, st, st + 8);
        for (int j = 0; j < 4; j++) q[j] = (ts_qblk){st + 2 * j, st + 8 + cb * j, 4};
        return;
    }
    for (int j = 0; j < n; j++) q[j] = ts_qblk_at(row, K, b0 + j, dt);
}

#endif
