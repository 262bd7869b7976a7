/* What the AVX-512 VNNI kernels on Q8_0 / Q4_0 weights share across their three files:
 * gemm_q_avx512.c (x quantized, the decode on the stored and lane orders, the few-row prefill on
 * the lane orders, every entry point), gemm_q_t16_avx512.c (the tile order's decode and few-row
 * prefill) and gemm_q_panels_avx512.c (the integer prefill panels). Include only from files
 * compiled with gemm_q_avx512.c's flags (CMakeLists.txt). */
#ifndef TS_TARGET_CPU_GEMM_Q_AVX512_H
#define TS_TARGET_CPU_GEMM_Q_AVX512_H
#include <immintrin.h>
#include <stdint.h>

#include "io/dtype.h"
#include "target/cpu/gemm.h"

/* Blocks per group of the decode kernels: 16 blocks' sums in one vector, the lane order's group
 * (gemm.h) */
#define TS_Q_GROUP 16
/* I16's K block (positions): the FP32 sums restart here in the I16 panels and in every kernel
 * that gives their bits (the few-row prefills, the AMX tiles) */
#define TS_Q16_KB 128
#define TS_I16_KB_BLOCKS (TS_Q16_KB / TS_QBLOCK) /* the same in blocks: a group holds 4 */
_Static_assert(TS_Q_GROUP % TS_I16_KB_BLOCKS == 0, "a group's blocks are whole I16 K blocks");

/* Q4_0's high nibbles as bytes 0..15 (m4: 15 in every byte), in one instruction where the core
 * has GFNI (gf): an affine map over GF(2) per byte, bits 4-7 to bits 0-3 (matrix rows 0x10, 0x20,
 * 0x40, 0x80 for result bits 0-3), instead of a shift and a mask. Inline assembly, so no function
 * needs a GFNI target and the files run unchanged on AVX-512 cores without it (Cooper Lake),
 * which take the shift. */
static inline __attribute__((always_inline)) __m512i ts_q4_high_nibbles(__m512i q, __m512i m4, int gf) {
    if (!gf) return _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
    __m512i r;
    __asm__("vgf2p8affineqb $0, %2, %1, %0" : "=v"(r) : "v"(q), "v"(_mm512_set1_epi64(0x1020408000000000LL)));
    return r;
}

/* Tile-order Q8_0 / Q4_0 (t16: TS_DTYPE_Q8_0T16, TS_DTYPE_Q4_0T16), gemm_q_t16_avx512.c: the
 * single decode's rows [n0, n1) (a ts_gemm_q_rows_fn for that type), the batched decode's (a
 * ts_gemm_q_rows_batch_fn), and a prefill of S >= 2 rows by kernel k (AMX on the tiles as they
 * lie, a few rows each code vector against every x row, the other kinds on each group put back in
 * stored order). */
void ts_cpu_gemv_rows_t16_avx512(float *y, ts_gemm_qx qx, const uint8_t *W, ts_dtype t16, int K, int n0, int n1);
void ts_cpu_gemv_rows_batch_t16_avx512(float *y, int ldy, const ts_gemm_qx *qx, int S, const uint8_t *W, ts_dtype t16,
                                       int K, int n0, int n1);
void ts_cpu_gemm_q_prefill_t16_avx512(ts_q_prefill k, float *y, int ldy, const float *xp, int ldx, const uint8_t *W,
                                      ts_dtype t16, int K, int S, int n0, int n1);

/* The integer prefill panels, gemm_q_panels_avx512.c: I16 (decode's 16-bit x, vpdpwssd on the
 * codes widened to int16; stored, lane and tile orders, the last for n0 and n1 multiples of 16)
 * and the experimental I8 (8-bit x, vpdpbusd; stored and lane orders). */
void ts_cpu_q_prefill_i16_avx512(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                                 int n0, int n1);
void ts_cpu_q_prefill_i8_avx512(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                                int n0, int n1);
#endif
