/* GEMM/GEMV on BF16 weights used in place: y (S, N) = x (S, K) @ W^T, W (N, K) row-major BF16,
 * FP32 activations and accumulation. Activations are packed once per dispatch into blocks of
 * 16 where the 8 even-indexed elements precede the 8 odd-indexed ones: a BF16 pair (2i, 2i+1)
 * in a 32-bit lane then becomes two FP32 vectors with one shift and one mask, no shuffles. */
#ifndef TS_TARGET_CPU_GEMM_H
#define TS_TARGET_CPU_GEMM_H
#include <stdint.h>

#include "target/cpu/cpu_features.h"

#define TS_GEMM_KBLOCK 16

/* dst (K) <- src (K) in the packed order; K % 16 == 0. */
void ts_cpu_pack_row(float *dst, const float *src, int K);
/* The inverse: dst (K) in natural order <- packed src (K). */
void ts_cpu_unpack_row(float *dst, const float *src, int K);

/* Register-tile shape of the vector kernel: rows of x by rows of W. The AVX2 kernel uses it
 * only for S == 1 (decode); for S >= 2 it runs its fixed panel kernel and ignores the tile. */
typedef struct ts_gemm_tile {
    int ms; /* x rows per tile: 1, 2 or 3 */
    int nr; /* W rows per tile: 2 or 4 */
    int sb; /* x rows per cache block */
} ts_gemm_tile;

/* y[s*ldy + n] = sum_k x[s][k] * W[n][k] for s in [0, S), n in [n0, n1).
 * xp: packed activations, row stride ldx floats; K % 16 == 0. */
typedef void (*ts_gemm_fn)(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K,
                           int S, int n0, int n1, ts_gemm_tile tile);

void ts_cpu_gemm_bf16_scalar(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K,
                             int S, int n0, int n1, ts_gemm_tile tile);
void ts_cpu_gemm_bf16_avx2(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K,
                           int S, int n0, int n1, ts_gemm_tile tile);
/* vdpbf16ps: S == 1 uses tile.nr W rows at a time (1, 2 or 4); S >= 2 ignores the tile. */
void ts_cpu_gemm_bf16_avx512(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K,
                             int S, int n0, int n1, ts_gemm_tile tile);

ts_gemm_fn ts_cpu_gemm_for(ts_cpu_variant v);
/* A default tile for (S, N, K) before any autotuning. */
ts_gemm_tile ts_cpu_gemm_default_tile(int S, int N, int K);

#endif
