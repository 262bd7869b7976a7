/* GEMM/GEMV on BF16 weights used in place: y (S, N) = x (S, K) @ W^T, W (N, K) row-major BF16,
 * FP32 activations and accumulation. Activations are packed once per dispatch into blocks of
 * 16 where the 8 even-indexed elements precede the 8 odd-indexed ones: a BF16 pair (2i, 2i+1)
 * in a 32-bit lane then becomes two FP32 vectors with one shift and one mask, no shuffles. */
#ifndef TS_TARGET_CPU_GEMM_H
#define TS_TARGET_CPU_GEMM_H
#include <stdint.h>

#include "io/dtype.h"
#include "target/cpu/cpu_features.h"

#define TS_GEMM_KBLOCK 16

/* Any K: the kernels below only ever see K rounded up to whole blocks (ts_gemm_kpad). The
 * cpu target lays out every weight copy it makes and every packed activation buffer with that
 * padded row stride, the pad zero in both, so a padded product adds only exact zeros: the
 * kernels stay one loop over whole 16-element blocks (no masked tails in each of the six
 * inner loops, no second code path to test), and a model whose K is already a multiple of 16
 * (all but a few) runs exactly as before, its BF16 weights still used in place. The price is
 * paid only by matrices whose K is not: they are copied once at load (ts_cpu_new). */
static inline int ts_gemm_kpad(int K) { return (K + TS_GEMM_KBLOCK - 1) / TS_GEMM_KBLOCK * TS_GEMM_KBLOCK; }

/* dst (ts_gemm_kpad(K)) <- src (K) in the packed order, the pad after the last element zero. */
void ts_cpu_pack_row(float *dst, const float *src, int K);
/* The inverse: dst (K) in natural order <- packed src (ts_gemm_kpad(K)). */
void ts_cpu_unpack_row(float *dst, const float *src, int K);
/* dst (N, ts_gemm_kpad(K)) <- W (N, K) BF16, each row's pad zero. */
void ts_cpu_pad_bf16(uint16_t *dst, const uint16_t *W, int N, int K);

/* Register-tile shape of the vector kernel: rows of x by rows of W. The AVX2 kernel uses it
 * only for S == 1 (decode); for S >= 2 it runs its fixed panel kernel and ignores the tile. */
typedef struct ts_gemm_tile {
    int ms; /* x rows per tile: 1, 2 or 3 */
    int nr; /* W rows per tile: 2 or 4 */
    int sb; /* x rows per cache block */
} ts_gemm_tile;

/* y[s*ldy + n] = sum_k x[s][k] * W[n][k] for s in [0, S), n in [n0, n1).
 * xp: packed activations, row stride ldx floats; W rows K apart; K % 16 == 0 (a padded K,
 * see ts_gemm_kpad). */
typedef void (*ts_gemm_fn)(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K,
                           int S, int n0, int n1, ts_gemm_tile tile);

void ts_cpu_gemm_bf16_scalar(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K,
                             int S, int n0, int n1, ts_gemm_tile tile);
void ts_cpu_gemm_bf16_avx2(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K,
                           int S, int n0, int n1, ts_gemm_tile tile);
/* The avx512bf16 variant has one decode GEMV (vdpbf16ps over BF16 hi + lo activations, tile.nr
 * W rows at a time: 1, 2 or 4) and two prefill kernels (S >= 2, tile ignored): _dp multiplies
 * BF16-rounded activations with vdpbf16ps, _f32 widens the weights into an FP32 panel and
 * uses vfmadd231ps zmm with FP32 activations. */
void ts_cpu_gemm_bf16_avx512_dp(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K,
                                int S, int n0, int n1, ts_gemm_tile tile);
void ts_cpu_gemm_f32_avx512(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K,
                            int S, int n0, int n1, ts_gemm_tile tile);
/* Which of the two this core runs faster, measured once per process (about a millisecond):
 * 1 = _f32 (cores where vdpbf16ps runs at half the FP32 FMA rate, e.g. Intel Xeons with
 * AVX-512 BF16), 0 = _dp (e.g. Zen 4, where it runs at twice). FP32 is kept unless vdpbf16ps
 * is at least 1.25x faster: it is the more accurate of the two. TESSERA_AVX512_PREFILL=bf16 or
 * f32 overrides (side-by-side measurements, tests of both). */
int ts_cpu_avx512_prefill_f32(void);
/* Most x rows the AVX-512 BF16-weight prefill runs without panels (gemm_few_avx512.c), same bits:
 * 16, or TESSERA_FEW_ROWS (0..16; 0 = the panels always). */
int ts_cpu_avx512_few_rows(void);

/* The two avx512bf16 decode GEMVs (S == 1; xp packed, K % 16 == 0), which both prefill
 * entry points above run for one row: _bf16x3 multiplies x split into three BF16 parts with
 * vdpbf16ps (nr W rows at a time: 1, 2 or 4), _f32 widens W to FP32 and uses vfmadd231ps zmm
 * (gemv_avx512.c). ts_cpu_avx512_decode_f32 says which one this core runs, chosen once per
 * process by timing both on an L2-resident matrix (1 = _f32, kept unless _bf16x3 is at least
 * 1.1x faster); TESSERA_AVX512_DECODE=bf16|f32 overrides. */
void ts_cpu_gemv_bf16x3_avx512(float *y, const float *xp, const uint16_t *W, int K, int n0, int n1, int nr);
void ts_cpu_gemv_f32_avx512(float *y, const float *xp, const uint16_t *W, int K, int n0, int n1);
int ts_cpu_avx512_decode_f32(void);

ts_gemm_fn ts_cpu_gemm_for(ts_cpu_variant v);

/* ---- Batched decode (continuous batching): the same signature, but the S rows are S
 * independent decode rows, each computed exactly as the variant's S == 1 GEMV (with that tile)
 * computes one row, bit for bit, while each W row is read from memory once for all of them
 * (the rows are looped inside the W stream, in groups that fit the registers). */
#define TS_GEMM_BATCH_MAX 32 /* rows of a batched decode: TS_CPU_BATCH_MAX (cpu_target.h) */
ts_gemm_fn ts_cpu_gemv_batch_for(ts_cpu_variant v);
void ts_cpu_gemv_batch_bf16_avx2(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K, int S, int n0,
                                 int n1, ts_gemm_tile tile);
void ts_cpu_gemv_batch_f32_avx512(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K, int S,
                                  int n0, int n1);
void ts_cpu_gemv_batch_bf16_avx512(float *y, int ldy, const float *xp, int ldx, const uint16_t *W, int K, int S,
                                   int n0, int n1, ts_gemm_tile tile);

/* ---- Quantized weights (Q8_0, Q4_0) used in place: W (N, K) is N rows of K / 32 GGUF blocks
 * (io/dtype.h), K % 32 == 0, rows ts_gemm_row_bytes(dt, K) apart. Same contract as ts_gemm_fn
 * otherwise (xp packed, rows ldx apart, y[s * ldy + n] for n in [n0, n1)).
 * - Decode (S == 1) is bound by reading W: x is quantized once per call to 16-bit integers per
 *   32-block (ts_gemm_qx: q = round(x * 32767 / amax), an FP32 scale per block), and each
 *   block's dot product is exact in int32 (|q_w| <= 128: 32 * 128 * 32767 < 2^31), scaled by
 *   d_w * d_x in FP32. 16 bits, not llama.cpp's 8: rel_l2 about 2e-5 against the oracle
 *   instead of about 4e-3 (docs/cpu-target.md), at the same speed on a memory-bound GEMV.
 *   The scalar, AVX2 (vpmaddwd) and AVX-512 VNNI (vpdpbusd on x split into bytes, 16 blocks
 *   per scaling) kernels quantize x to the same bits.
 * - Prefill (S >= 2): W is dequantized exactly (d * q in FP32, as the oracle does) into the
 *   FP32 panels of the vector prefill kernels, x stays FP32: exact up to FP32 rounding. */
typedef void (*ts_gemm_q_fn)(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                             int n0, int n1, ts_gemm_tile tile);

/* Q8_0 / Q4_0 rows in 16-block lane order, the cpu target's own copies for the AVX-512 VNNI
 * kernels (never in a file): per group of 16 blocks the 16 F16 scales (32 bytes), then the codes
 * as 64-byte vectors, dword i of the m-th = code bytes 4m..4m+3 of the block in lane i (4
 * vectors for Q4_0, 8 for Q8_0); a row's last K/32 % 16 blocks as stored. Lane i holds block i
 * (Q4_0) or block 4 (i % 4) + i / 4 (Q8_0: the lanes the stored form's kernel sums its blocks
 * in, so both forms give the same bits). The same bytes per group and row as stored: the decode
 * GEMV loads a group as it lies, where the stored form needs a gather of the scales and shuffles
 * of the codes (gemm_q_avx512.c); the I16/I8/FP32 packs put each block back first, the AMX packs
 * transpose whole groups into their tiles, and the few-row prefill reads the codes as they lie. */
#define TS_DTYPE_Q4_0X16 ((ts_dtype)(TS_DTYPE_COUNT + 1))
#define TS_DTYPE_Q8_0X16 ((ts_dtype)(TS_DTYPE_COUNT + 2))
static inline int ts_dtype_is_x16(ts_dtype dt) { return dt == TS_DTYPE_Q4_0X16 || dt == TS_DTYPE_Q8_0X16; }
/* Q8_0 / Q4_0 matrices in tile order (the cpu target's copies where the prefill runs AMX or I16,
 * N % 16 == 0, K % 512 == 0; ts_cpu_t16_wanted): rows in groups of 16, group G in the bytes of
 * rows 16G..16G+15, per block b of the K / 32 the 16 rows' F16 scales (32 bytes) then the code
 * vectors of 64 bytes, the m-th = code dword m of the 16 rows (8 for Q8_0: positions 4m..4m+3,
 * an AMX B tile as it lies; 4 for Q4_0: code bytes 4m..4m+3, whose low nibbles are positions
 * 4m..4m+3 and high nibbles 16 + 4m..). So the prefill loads W from the matrix (Q4_0: splits the
 * nibbles) instead of transposing lane-order rows into tiles per call (gemm_q_amx.c), and the
 * decode broadcasts x's dwords against 16 rows at once. Rows are not contiguous: `W + n * row
 * bytes` is no row here; kernels take a whole group and keep the rows of [n0, n1). */
#define TS_DTYPE_Q8_0T16 ((ts_dtype)(TS_DTYPE_COUNT + 3))
#define TS_DTYPE_Q4_0T16 ((ts_dtype)(TS_DTYPE_COUNT + 4))
static inline int ts_dtype_is_t16(ts_dtype dt) { return dt == TS_DTYPE_Q8_0T16 || dt == TS_DTYPE_Q4_0T16; }
#define TS_T16_GROUP_BLOCK (32 + 16 * TS_QBLOCK) /* bytes of one block of a 16-row Q8_0 group */
#define TS_T16_GROUP_BLOCK_Q4 (32 + 16 * TS_QBLOCK / 2) /* of a Q4_0 group */
/* the stored type of a lane-order or tile-order type (others: themselves) */
static inline ts_dtype ts_x16_stored(ts_dtype dt) {
    return dt == TS_DTYPE_Q4_0X16 || dt == TS_DTYPE_Q4_0T16   ? TS_DTYPE_Q4_0
           : dt == TS_DTYPE_Q8_0X16 || dt == TS_DTYPE_Q8_0T16 ? TS_DTYPE_Q8_0
                                                              : dt;
}
/* the tile order of a stored type (Q8_0, Q4_0) */
static inline ts_dtype ts_t16_of(ts_dtype dt) { return dt == TS_DTYPE_Q8_0 ? TS_DTYPE_Q8_0T16 : TS_DTYPE_Q4_0T16; }
/* bytes of one block of a 16-row group of a tile-order (or stored) type */
static inline size_t ts_t16_group_block(ts_dtype dt) {
    return ts_x16_stored(dt) == TS_DTYPE_Q8_0 ? TS_T16_GROUP_BLOCK : TS_T16_GROUP_BLOCK_Q4;
}
/* the lane of block k (0..15) of a group: self-inverse, so also the block of lane k */
static inline int ts_x16_lane(ts_dtype dt, int k) { return ts_x16_stored(dt) == TS_DTYPE_Q8_0 ? 4 * (k % 4) + k / 4 : k; }

static inline size_t ts_gemm_row_bytes(ts_dtype dt, int K) {
    switch (ts_x16_stored(dt)) {
    case TS_DTYPE_Q8_0: return (size_t)K / TS_QBLOCK * (2 + TS_QBLOCK);
    case TS_DTYPE_Q4_0: return (size_t)K / TS_QBLOCK * (2 + TS_QBLOCK / 2);
    case TS_DTYPE_F32: return (size_t)K * 4;
    default: return (size_t)K * 2;
    }
}
static inline int ts_dtype_is_quant(ts_dtype dt) { return dt == TS_DTYPE_Q8_0 || dt == TS_DTYPE_Q4_0; }

/* Whether a session of variant v copies its matrices of stored type dt (Q8_0, Q4_0) into
 * 16-block lane order (gemm_q.c). */
int ts_cpu_x16_wanted(ts_cpu_variant v, ts_dtype dt);
/* Rows [r0, r1) of a matrix of stored type dt (Q8_0, Q4_0; K columns) from src to dst in
 * 16-block lane order. */
void ts_x16_repack_rows(ts_dtype dt, uint8_t *dst, const uint8_t *src, int K, int64_t r0, int64_t r1);
/* Block b of a row in lane order x16 (TS_DTYPE_Q*_0X16), put back as stored in out (18 or 34 bytes). */
void ts_x16_block(ts_dtype x16, const uint8_t *row, int K, int b, uint8_t *out);
/* A row in lane order dequantized to K floats (as ts_dtype_to_f32 does a stored row). */
void ts_x16_row_to_f32(ts_dtype x16, const uint8_t *row, int K, float *out);

/* Whether a session of variant v copies a Q8_0 / Q4_0 matrix (N x K) into tile order (gemm_q.c). */
int ts_cpu_t16_wanted(ts_cpu_variant v, ts_dtype dt, int64_t N, int64_t K);
/* Groups [g0, g1) (16 rows each) of a stored matrix of type dt (Q8_0, Q4_0) from src to dst in
 * tile order. */
void ts_t16_repack_groups(ts_dtype dt, uint8_t *dst, const uint8_t *src, int K, int64_t g0, int64_t g1);
/* Group g of a tile-order matrix W (type t16) put back as 16 stored rows (16 x row bytes) in out. */
void ts_t16_group_stored(ts_dtype t16, const uint8_t *W, int K, int64_t g, uint8_t *out);
/* Row n of a tile-order matrix W (type t16) dequantized to K floats. */
void ts_t16_row_to_f32(ts_dtype t16, const uint8_t *W, int K, int64_t n, float *out);

/* x quantized for the decode kernels: q (K) in natural order, d (K / 32) scales. */
typedef struct ts_gemm_qx {
    int16_t *q;
    float *d;
} ts_gemm_qx;
#define TS_GEMM_QX_MAX 32768 /* K up to this: the quantized x lives on the stack */
/* From packed FP32 x (K % 32 == 0); the vector variants write the same bits. */
void ts_cpu_quantize_x_scalar(ts_gemm_qx qx, const float *xp, int K);
void ts_cpu_quantize_x_avx2(ts_gemm_qx qx, const float *xp, int K);
void ts_cpu_quantize_x_avx512(ts_gemm_qx qx, const float *xp, int K);
/* The decode (S == 1) frame every variant shares: x quantized once by `quant` into a stack
 * buffer (the heap past TS_GEMM_QX_MAX), then `rows` computes y[n0, n1). */
typedef void (*ts_gemm_q_quant_fn)(ts_gemm_qx qx, const float *xp, int K);
typedef void (*ts_gemm_q_rows_fn)(float *y, ts_gemm_qx qx, const uint8_t *W, ts_dtype dt, int K, int n0, int n1);
void ts_cpu_gemm_q_decode(float *y, const float *xp, const void *W, ts_dtype dt, int K, int n0, int n1,
                          ts_gemm_q_quant_fn quant, ts_gemm_q_rows_fn rows);

/* The batched decode frame: each of the S rows quantized by `quant` as above (qx[s]; on the
 * stack while they fit, else one allocation per call), then `rows` computes y[s * ldy + n] for
 * every row s and n in [n0, n1), reading each W row once for all S rows. */
typedef void (*ts_gemm_q_rows_batch_fn)(float *y, int ldy, const ts_gemm_qx *qx, int S, const uint8_t *W, ts_dtype dt,
                                        int K, int n0, int n1);
void ts_cpu_gemm_q_decode_batch(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                                int n0, int n1, ts_gemm_q_quant_fn quant, ts_gemm_q_rows_batch_fn rows);
void ts_cpu_gemv_batch_q_scalar(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                                int n0, int n1, ts_gemm_tile tile);
void ts_cpu_gemv_batch_q_avx2(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                              int n0, int n1, ts_gemm_tile tile);
void ts_cpu_gemv_batch_q_avx512(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                                int n0, int n1, ts_gemm_tile tile);

void ts_cpu_gemm_q_scalar(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                          int n0, int n1, ts_gemm_tile tile);
void ts_cpu_gemm_q_avx2(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                        int n0, int n1, ts_gemm_tile tile);
/* AVX-512 VNNI decode, AVX-512 FP32 panels for prefill (the avx512bf16 variant on a CPU with
 * avx512_vnni; without it that variant runs the AVX2 kernel). */
void ts_cpu_gemm_q_avx512(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                          int n0, int n1, ts_gemm_tile tile);
/* The AVX-512 decode of Q4_0 in lane order splits the high nibbles with GFNI where CPUID has
 * it (same bits either way). Tests turn it off (on = 0) to run the shift-and-mask form as well;
 * returns the previous setting. Not for use while another thread decodes. */
int ts_cpu_q_gfni_set(int on);
int ts_cpu_q_gfni(void); /* 1 while that split runs */
/* The FP32-panel prefill on dequantized weights, S >= 1 (the vector variants' S >= 2 path
 * before the AVX-512 kernels below; still AVX2's, and AVX-512's where FP32 FMA is the faster
 * instruction). */
void ts_cpu_gemm_q_panels_avx2(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K,
                               int S, int n0, int n1);
void ts_cpu_gemm_q_panels_avx512(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K,
                                 int S, int n0, int n1);
/* The AVX-512 prefill kernels on Q8_0 / Q4_0 (S >= 1; the avx512bf16 variant runs one of them
 * for S >= 2, docs/cpu-target.md "Quantized weights"), all on the panel blocking of
 * gemm_panels_avx512.h, all per-row arithmetic (a row's result does not depend on the rows or
 * columns around it):
 * - F32: W dequantized exactly into FP32 panels, FP32 x, vfmadd231ps (rel_l2 ~2e-7);
 * - BF16: W dequantized exactly, then rounded to BF16 pairs; x rounded to BF16; vdpbf16ps
 *   (gemm_avx512.c; rel_l2 ~2e-3, the BF16 _dp kernel's arithmetic);
 * - I8: x quantized per 32-block to 8 bits (llama.cpp's Q8_0 activations), int8 codes of W,
 *   vpdpbusd, block sums scaled in FP32 (rel_l2 ~4e-3 on uniform x; ~1.2e-2 when a few
 *   channels are 30x larger);
 * - I16: x quantized per 32-block to 16 bits exactly as the decode kernels do, codes of W
 *   widened to int16, vpdpwssd (rel_l2 ~1.5e-5, the decode GEMV's exact block sums);
 * - AMX: I16's arithmetic on AMX tiles (gemm_q_amx.c): the same int32 block sums, scaled and
 *   summed in the same order, so bit-identical to I16; only where ts_cpu_amx_usable() (else
 *   it runs I16). Not on the panel blocking: 16 x rows x 32 W rows per tile step. */
typedef enum ts_q_prefill {
    TS_Q_PREFILL_F32,
    TS_Q_PREFILL_BF16,
    TS_Q_PREFILL_I8,
    TS_Q_PREFILL_I16,
    TS_Q_PREFILL_AMX,
    TS_Q_PREFILL_COUNT
} ts_q_prefill;
void ts_cpu_gemm_q_prefill_avx512(ts_q_prefill k, float *y, int ldy, const float *xp, int ldx, const void *W,
                                  ts_dtype dt, int K, int S, int n0, int n1);
/* The one the avx512bf16 variant runs, chosen once per process (see the .c for the rule);
 * TESSERA_Q_PREFILL=f32|bf16|i8|i16|amx overrides (side-by-side measurements, tests). */
ts_q_prefill ts_cpu_avx512_q_prefill(void);
const char *ts_q_prefill_name(ts_q_prefill k);
/* The AMX kernel itself (S >= 1, any n0 < n1); I16 where AMX is not usable or memory for the
 * prepared x is short. The `amx` prefill runs it on stored rows from TS_AMX_MIN_S rows, I16
 * below (lane-order rows: TS_I16_PANELS_MIN_S_X16 below); measured before session 34 (padded to
 * 16-row tiles and repacking W per call, AMX was 0.6x I16 at 2 rows, 0.97x at 16, 1.09x at 32,
 * 1.25x at 64, Qwen3-0.6B Q8_0 on the Intel Xeon with AMX). */
#define TS_AMX_MIN_S 32
/* Rows in 16-block lane order: the I16 kind runs the few-row kernel of gemm_q_avx512.c below this
 * many rows, its panels from here on (12 until session 35, and Q4_0 from 9 rows only while
 * rows * K <= 49152; i16_small_rows says what was measured). The AMX kind
 * takes the tiles from 9 rows (from 6-7 where rows * K is large; amx_rows_x16 in gemm_q_avx512.c,
 * since session 34, when its packs stopped reading block by block) and the few-row kernel below.
 * History: the I16 packs put each Q8_0 block back from its group (ts_x16_unlane4), which made a
 * 16-token prefill 0.80-0.91x of the stored order's, where the AMX packs ran it 1.04-1.10x
 * (session 32, docs/performance.md). Bits are I16's whatever runs. */
#define TS_I16_PANELS_MIN_S_X16 16
void ts_cpu_gemm_q_amx(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S, int n0,
                       int n1);
/* The same on a tile-order matrix (t16: TS_DTYPE_Q8_0T16, TS_DTYPE_Q4_0T16), S >= 1, I16's bits;
 * returns 0 (nothing written) where AMX is not usable or memory for the prepared x is short. */
int ts_cpu_gemm_q_amx_t16(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype t16, int K, int S,
                          int n0, int n1);
ts_gemm_q_fn ts_cpu_gemm_q_for(ts_cpu_variant v);
/* The batched decode for Q8_0 / Q4_0 (as ts_cpu_gemv_batch_for: each row as the S == 1 path). */
ts_gemm_q_fn ts_cpu_gemv_batch_q_for(ts_cpu_variant v);
/* A default tile for (S, N, K) before any autotuning. */
ts_gemm_tile ts_cpu_gemm_default_tile(int S, int N, int K);

#endif
