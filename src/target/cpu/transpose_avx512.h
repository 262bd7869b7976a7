/* 16 x 16 transpose of 32-bit elements in AVX-512 registers, shared by the AVX-512 GEMM (BF16
 * pair columns of a weight panel) and the AVX-512 attention tile (one head dimension of 16
 * keys per vector). Include only from files compiled with -mavx512f. */
#ifndef TS_TARGET_CPU_TRANSPOSE_AVX512_H
#define TS_TARGET_CPU_TRANSPOSE_AVX512_H
#include <immintrin.h>

/* r[i] <- column i of the 16 x 16 matrix whose rows are r[0..15]. */
static inline void ts_transpose16_epi32(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int k = 0; k < 8; k++) {
        t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
    }
    /* u[4k + c], 128-bit lane L: rows 4k..4k+3 of column 4L + c */
    for (int k = 0; k < 4; k++) {
        u[4 * k] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
        u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
        u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
        u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
    }
    for (int c = 0; c < 4; c++) {
        __m512i p = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44), q = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee);
        __m512i s = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44), v = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
        r[c] = _mm512_shuffle_i32x4(p, s, 0x88);
        r[4 + c] = _mm512_shuffle_i32x4(p, s, 0xdd);
        r[8 + c] = _mm512_shuffle_i32x4(q, v, 0x88);
        r[12 + c] = _mm512_shuffle_i32x4(q, v, 0xdd);
    }
}

#endif
