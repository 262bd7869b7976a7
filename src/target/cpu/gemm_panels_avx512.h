/* The blocking of the AVX-512 prefill GEMMs (gemm_avx512.c), shared with the quantized prefill
 * kernels of gemm_q_panels_avx512.c: a panel of 64 W rows x one K block is packed once into an
 * L1-resident buffer, then register tiles of up to 6 x rows run against it. What a kernel
 * brings is a panel_ops: how a K block of x is prepared, how a panel is packed, and the tiles.
 * Every output is the same computation whatever tile, thread split or S it falls in: per K
 * block a running sum from zero, then added to y. Include only from files compiled with
 * -mavx512f. */
#ifndef TS_TARGET_CPU_GEMM_PANELS_AVX512_H
#define TS_TARGET_CPU_GEMM_PANELS_AVX512_H
#include <immintrin.h>

#include "target/cpu/gemm.h"

#ifndef TS_GEMM512_KB
#define TS_GEMM512_KB 256 /* K positions per block: a 64 x 128-pair panel is 32 KiB */
#endif
/* K positions per block of the FP32 panels (one FP32 weight per position: the same 32 KiB) */
#define TS_GEMM512_KB_F32 (TS_GEMM512_KB / 2)
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
    /* optional, for W in 16-block lane order (whose K block of a row is spread over its whole
     * group): W rows [n, n + nv) over the whole group g (positions [512 g, 512 g + 512)) at once,
     * the panel of K block j at P4 + j * TS_PANEL_SLOT, as pack would have made them one by one */
    void (*pack_group)(void *P4, const void *W, int K, int n, int nv, int g);
} ts_panel_ops;
/* 4-byte words between the panels pack_group makes (one panel's room, and a line more) */
#define TS_PANEL_SLOT (TS_PANEL_WORDS + 16)

/* The ops of a quantized W by its type: stored Q8_0, Q4_0, or either in lane order. */
static inline const ts_panel_ops *q_ops(ts_dtype dt, const ts_panel_ops *q8, const ts_panel_ops *q4,
                                        const ts_panel_ops *q8x16, const ts_panel_ops *q4x16) {
    return dt == TS_DTYPE_Q8_0 ? q8 : dt == TS_DTYPE_Q8_0X16 ? q8x16 : dt == TS_DTYPE_Q4_0X16 ? q4x16 : q4;
}

/* A tile's MS x 64 sums into y (ldy apart): stored (first K block) or added. */
static inline __attribute__((always_inline)) void ts_panel_store(float *y, int ldy, __m512 (*acc)[4], int MS,
                                                                 int first) {
#pragma GCC unroll 6
    for (int i = 0; i < MS; i++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            float *d = y + (size_t)i * ldy + 16 * j;
            _mm512_storeu_ps(d, first ? acc[i][j] : _mm512_add_ps(_mm512_loadu_ps(d), acc[i][j]));
        }
}

/* The six tiles (pfx##_t1 .. pfx##_t6, listed by TS_PANEL_TILE_LIST(pfx)) of a kernel whose
 * always-inline TILE(y, ldy, x, ldb, P, np, MS, first) keeps up to 3 x rows in registers:
 * 1-3 rows as one call with MS and first constant, 4-6 as two of them (3 + 1..3 rows). */
#define TS_PANEL_TILE_MS(pfx, TILE, MS)                                                                    \
    static void pfx##_tile_##MS(float *y, int ldy, const uint32_t *x, int ldb, const uint32_t *P, int np, \
                                int first) {                                                              \
        if (first) TILE(y, ldy, x, ldb, P, np, MS, 1);                                                    \
        else TILE(y, ldy, x, ldb, P, np, MS, 0);                                                          \
    }
#define TS_PANEL_TILE_ONE(pfx, N)                                                                          \
    static void pfx##_t##N(float *y, int ldy, const void *x, int ldb, const void *P, int np, int first) { \
        pfx##_tile_##N(y, ldy, x, ldb, P, np, first);                                                     \
    }
#define TS_PANEL_TILE_TWO(pfx, N, A, B)                                                                    \
    static void pfx##_t##N(float *y, int ldy, const void *x, int ldb, const void *P, int np, int first) { \
        pfx##_tile_##A(y, ldy, x, ldb, P, np, first);                                                     \
        pfx##_tile_##B(y + A * (size_t)ldy, ldy, (const uint32_t *)x + A * (size_t)ldb, ldb, P, np, first); \
    }
#define TS_PANEL_TILES_3ROW(pfx, TILE)                                                                     \
    TS_PANEL_TILE_MS(pfx, TILE, 1)                                                                         \
    TS_PANEL_TILE_MS(pfx, TILE, 2)                                                                         \
    TS_PANEL_TILE_MS(pfx, TILE, 3)                                                                         \
    TS_PANEL_TILE_ONE(pfx, 1)                                                                              \
    TS_PANEL_TILE_ONE(pfx, 2)                                                                              \
    TS_PANEL_TILE_ONE(pfx, 3)                                                                              \
    TS_PANEL_TILE_TWO(pfx, 4, 2, 2)                                                                        \
    TS_PANEL_TILE_TWO(pfx, 5, 3, 2)                                                                        \
    TS_PANEL_TILE_TWO(pfx, 6, 3, 3)
#define TS_PANEL_TILE_LIST(pfx) {0, pfx##_t1, pfx##_t2, pfx##_t3, pfx##_t4, pfx##_t5, pfx##_t6}

/* y[s * ldy + n] = the product for s in [0, S), n in [n0, n1) (gemm.h's contract). */
void ts_cpu_gemm_panels_avx512(const ts_panel_ops *o, float *y, int ldy, const float *xp, int ldx, const void *W,
                               int K, int S, int n0, int n1);

/* d[0..n) <- BF16(x) for n positions of packed FP32 x, in natural order (n % 16 == 0); with
 * parts = 3 also the remainders at d + kp and d + 2 kp (gemm_avx512.c). */
void ts_cpu_x_to_bf16_avx512(uint16_t *d, int kp, int parts, const float *xp, int n);
/* From 2 up to this many x rows, the BF16-weight prefill runs without panels, with their bits
 * (gemm_few_avx512.c): dp the vdpbf16ps kind, else the FP32 one. 0 where S is outside [2,
 * TS_GEMM512_FEW_MAX] or x's memory is not there (the caller runs the panels then). */
#define TS_GEMM512_FEW_MAX 16
int ts_cpu_gemm_few_avx512(int dp, float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K, int S,
                           int n0, int n1);
/* The BF16-panel prefill on Q8_0 / Q4_0 weights (gemm_avx512.c), one of the kernels
 * ts_cpu_gemm_q_prefill_avx512 (gemm_q_avx512.c) runs. */
void ts_cpu_gemm_q_bf16_avx512(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                               int n0, int n1);

#endif
