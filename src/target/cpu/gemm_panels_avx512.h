/* The blocking of the AVX-512 prefill GEMMs (gemm_avx512.c), shared with the quantized prefill
 * kernel of gemm_q_avx512.c: a panel of 64 W rows x one K block is packed once into an
 * L1-resident buffer, then register tiles of up to 6 x rows run against it. What a kernel
 * brings is a panel_ops: how a K block of x is prepared, how a panel is packed, and the tiles.
 * Every output is the same computation whatever tile, thread split or S it falls in: per K
 * block a running sum from zero, then added to y. Include only from files compiled with
 * -mavx512f. */
#ifndef TS_TARGET_CPU_GEMM_PANELS_AVX512_H
#define TS_TARGET_CPU_GEMM_PANELS_AVX512_H
#include "target/cpu/gemm.h"

#ifndef TS_GEMM512_KB
#define TS_GEMM512_KB 256 /* K positions per block: a 64 x 128-pair panel is 32 KiB */
/* The BF16-panel prefill on Q8_0 / Q4_0 weights (gemm_avx512.c), one of the kernels
 * ts_cpu_gemm_q_prefill_avx512 (gemm_q_avx512.c) runs. */
void ts_cpu_gemm_q_bf16_avx512(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                               int n0, int n1);

#endif
#define TS_PANEL_N 64 /* W rows per panel: four 16-lane vectors */
#define TS_PANEL_MR 6 /* most x rows per register tile */
/* 4-byte words of the panel buffer (32 KiB) and of one x row of a prepared block: the row
 * stride is not a multiple of 4 KiB (L1/L2 set aliasing of rows 4 KiB apart) */
#define TS_PANEL_WORDS (TS_GEMM512_KB / 2 * TS_PANEL_N)
#define TS_PANEL_LDB (TS_GEMM512_KB / 2 + 16)

/* y (ms rows, ldy apart; 64 columns) (+)= the tile's sums: x rows of the prepared block (ldb
 * words apart) against the panel P over np panel steps; first: store instead of add. */
typedef void (*ts_panel_fn)(float *y, int ldy, const void *x, int ldb, const void *P, int np, int first);

typedef struct ts_panel_ops {
    int kb;  /* K positions per block (the panel and x block fit TS_PANEL_WORDS / TS_PANEL_LDB) */
    int per; /* K positions per panel step (np = kb / per) */
    /* x rows [0, S) of packed FP32 x, positions [k0, k0 + kb), prepared at row stride
     * TS_PANEL_LDB words */
    void (*x_block)(void *xb, const float *xp, int ldx, int S, int k0, int kb);
    /* W rows [n, n + nv) over positions [k0, k0 + kb) into P; rows nv..63 contribute zero */
    void (*pack)(void *P, const void *W, int K, int n, int nv, int k0, int kb);
    ts_panel_fn tiles[TS_PANEL_MR + 1]; /* [ms]: a tile of ms x rows */
    ts_dtype dt;                        /* of W (for its row bytes: the prefetch of the next panel) */
} ts_panel_ops;

/* y[s * ldy + n] = the product for s in [0, S), n in [n0, n1) (gemm.h's contract). */
void ts_cpu_gemm_panels_avx512(const ts_panel_ops *o, float *y, int ldy, const float *xp, int ldx, const void *W,
                               int K, int S, int n0, int n1);

/* The BF16-panel prefill on Q8_0 / Q4_0 weights (gemm_avx512.c), one of the kernels
 * ts_cpu_gemm_q_prefill_avx512 (gemm_q_avx512.c) runs. */
void ts_cpu_gemm_q_bf16_avx512(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                               int n0, int n1);

#endif
