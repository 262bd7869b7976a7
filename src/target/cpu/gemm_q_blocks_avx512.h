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

/* the block's scale d_w, exactly */
static inline float f16(const uint8_t *p) {
    uint16_t h;
    __builtin_memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* The 32 weights of one block as int16 in natural order. */
static inline __attribute__((always_inline)) __m512i block_w16(const uint8_t *blk, ts_dtype dt) {
    if (dt == TS_DTYPE_Q8_0) return _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(blk + 2)));
    const __m128i m4 = _mm_set1_epi8(15);
    __m128i v = _mm_loadu_si128((const __m128i *)(blk + 2));
    __m256i c = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
    return _mm512_cvtepi8_epi16(_mm256_sub_epi8(c, _mm256_set1_epi8(8)));
}

/* the 32 codes of a block as int8 (Q4_0: code - 8) */
static inline __attribute__((always_inline)) __m256i block_w8(const uint8_t *blk, ts_dtype dt) {
    if (dt == TS_DTYPE_Q8_0) return _mm256_loadu_si256((const __m256i *)(blk + 2));
    const __m128i m4 = _mm_set1_epi8(15);
    __m128i v = _mm_loadu_si128((const __m128i *)(blk + 2));
    __m256i c = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
    return _mm256_sub_epi8(c, _mm256_set1_epi8(8));
}

#endif
