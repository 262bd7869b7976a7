/* Quantized weights (Q8_0, Q4_0) in place: the activation quantizer every decode kernel shares,
 * the scalar kernels (the portable fallback and the reference the vector kernels are tested
 * against besides the oracle), and the table of kernels per variant. gemm.h says why x is
 * quantized to 16 bits and why prefill dequantizes W exactly instead. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/dtype.h"
#include "target/cpu/cpu_target.h"
#include "target/cpu/gemm.h"

/* Natural position k of a 16-block lies at this packed index (ts_cpu_pack_row). */
static inline int packed_index(int k) {
    int b = k & ~15, r = k & 15;
    return b + (r >> 1) + (r & 1) * 8;
}

void ts_cpu_quantize_x_scalar(ts_gemm_qx qx, const float *xp, int K) {
    for (int b = 0; b < K; b += TS_QBLOCK) {
        float amax = 0;
        for (int k = b; k < b + TS_QBLOCK; k++) amax = fmaxf(amax, fabsf(xp[packed_index(k)]));
        /* the vector quantizers form d and 1/d with the same two IEEE divisions, and round
         * x * (1/d) to nearest even as cvtps2dq does: bit-identical q */
        float d = amax / 32767.0f, id = amax > 0 ? 32767.0f / amax : 0.0f;
        qx.d[b / TS_QBLOCK] = d;
        for (int k = b; k < b + TS_QBLOCK; k++) qx.q[k] = (int16_t)lrintf(xp[packed_index(k)] * id);
    }
}

/* Weight codes of one block as int8 in natural order (Q4_0: code - 8). */
static inline void block_codes(const uint8_t *blk, ts_dtype dt, int8_t *w) {
    if (dt == TS_DTYPE_Q8_0) {
        memcpy(w, blk + 2, TS_QBLOCK);
        return;
    }
    for (int j = 0; j < TS_QBLOCK / 2; j++) {
        w[j] = (int8_t)((blk[2 + j] & 15) - 8);
        w[j + TS_QBLOCK / 2] = (int8_t)((blk[2 + j] >> 4) - 8);
    }
}

static inline float block_scale(const uint8_t *blk) {
    uint16_t h;
    memcpy(&h, blk, 2);
    return ts_f16_to_f32(h);
}

static inline float row_dot_scalar(const uint8_t *row, ts_dtype dt, size_t bb, const ts_gemm_qx *qx, int K) {
    float acc = 0;
    for (int b = 0; b < K / TS_QBLOCK; b++) {
        int8_t w[TS_QBLOCK];
        block_codes(row + (size_t)b * bb, dt, w);
        int32_t s = 0;
        for (int j = 0; j < TS_QBLOCK; j++) s += (int32_t)w[j] * qx->q[b * TS_QBLOCK + j];
        acc += block_scale(row + (size_t)b * bb) * qx->d[b] * (float)s;
    }
    return acc;
}

static void gemv_scalar(float *y, ts_gemm_qx qx, const uint8_t *W, ts_dtype dt, int K, int n0, int n1) {
    size_t rb = ts_gemm_row_bytes(dt, K), bb = rb / (size_t)(K / TS_QBLOCK);
    for (int n = n0; n < n1; n++) y[n] = row_dot_scalar(W + (size_t)n * rb, dt, bb, &qx, K);
}

/* Batched: each W row once from memory, then from L1 for every x row (the scalar fallback). */
static void gemv_scalar_batch(float *y, int ldy, const ts_gemm_qx *qx, int S, const uint8_t *W, ts_dtype dt, int K,
                              int n0, int n1) {
    size_t rb = ts_gemm_row_bytes(dt, K), bb = rb / (size_t)(K / TS_QBLOCK);
    for (int n = n0; n < n1; n++)
        for (int s = 0; s < S; s++) y[(size_t)s * ldy + n] = row_dot_scalar(W + (size_t)n * rb, dt, bb, &qx[s], K);
}

void ts_cpu_gemv_batch_q_scalar(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                                int n0, int n1, ts_gemm_tile tile) {
    (void)tile;
    ts_cpu_gemm_q_decode_batch(y, ldy, xp, ldx, W, dt, K, S, n0, n1, ts_cpu_quantize_x_scalar, gemv_scalar_batch);
}

#define QX_BATCH_STACK 65536 /* int16 of quantized x for all rows on the stack: 128 KiB */
void ts_cpu_gemm_q_decode_batch(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                                int n0, int n1, ts_gemm_q_quant_fn quant, ts_gemm_q_rows_batch_fn rows) {
    if (n0 >= n1 || S < 1) return;
    int16_t sq[QX_BATCH_STACK] __attribute__((aligned(64)));
    float sd[QX_BATCH_STACK / TS_QBLOCK];
    ts_gemm_qx qx[TS_GEMM_BATCH_MAX];
    int16_t *q = sq;
    float *d = sd;
    void *heap = NULL;
    if (S > TS_GEMM_BATCH_MAX) return; /* the session never asks for more (cpu_target.h) */
    if ((size_t)S * (size_t)K > QX_BATCH_STACK) {
        /* the codes, then one scale per block of every row */
        heap = malloc(sizeof(int16_t) * (size_t)S * (size_t)K + sizeof(float) * (size_t)S * (size_t)(K / TS_QBLOCK));
        if (!heap) return; /* as ts_cpu_gemm_q_decode */
        q = heap, d = (float *)(q + (size_t)S * K);
    }
    for (int s = 0; s < S; s++) {
        qx[s] = (ts_gemm_qx){q + (size_t)s * K, d + (size_t)s * (K / TS_QBLOCK)};
        quant(qx[s], xp + (size_t)s * ldx, K);
    }
    rows(y, ldy, qx, S, W, dt, K, n0, n1);
    free(heap);
}

/* Prefill: each W row dequantized once to FP32 and used by every x row, packed order as the
 * BF16 scalar kernel sums. */
static void gemm_rows_scalar(float *y, int ldy, const float *xp, int ldx, const uint8_t *W, ts_dtype dt, int K,
                             int S, int n0, int n1) {
    float *w = malloc(sizeof(float) * (size_t)K);
    if (!w) return; /* cannot happen for a model that loaded; outputs stay as they were */
    for (int n = n0; n < n1; n++) {
        ts_dtype_to_f32(dt, W, (size_t)n * (size_t)K, (size_t)K, w);
        for (int s = 0; s < S; s++) {
            const float *x = xp + (size_t)s * ldx;
            float acc[8] = {0};
            for (int b = 0; b < K; b += TS_GEMM_KBLOCK)
                for (int i = 0; i < 8; i++) acc[i] += x[b + i] * w[b + 2 * i] + x[b + 8 + i] * w[b + 2 * i + 1];
            y[(size_t)s * ldy + n] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        }
    }
    free(w);
}

void ts_cpu_gemm_q_scalar(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                          int n0, int n1, ts_gemm_tile tile) {
    (void)tile;
    if (n0 >= n1 || S < 1) return;
    if (S >= 2) {
        gemm_rows_scalar(y, ldy, xp, ldx, W, dt, K, S, n0, n1);
        return;
    }
    ts_cpu_gemm_q_decode(y, xp, W, dt, K, n0, n1, ts_cpu_quantize_x_scalar, gemv_scalar);
}

void ts_cpu_gemm_q_decode(float *y, const float *xp, const void *W, ts_dtype dt, int K, int n0, int n1,
                          ts_gemm_q_quant_fn quant, ts_gemm_q_rows_fn rows) {
    int16_t sq[TS_GEMM_QX_MAX] __attribute__((aligned(64)));
    float sd[TS_GEMM_QX_MAX / TS_QBLOCK];
    ts_gemm_qx qx = {sq, sd};
    void *heap = NULL;
    if (K > TS_GEMM_QX_MAX) { /* longer rows than any seed model */
        heap = malloc((sizeof(int16_t) + sizeof(float)) * (size_t)K);
        if (!heap) return; /* cannot happen for a model that loaded; outputs stay as they were */
        qx.q = heap, qx.d = (float *)((int16_t *)heap + K);
    }
    quant(qx, xp, K);
    rows(y, qx, W, dt, K, n0, n1);
    free(heap);
}

/* ---- Q8_0 / Q4_0 in 16-block lane order (gemm.h, TS_DTYPE_Q*_0X16) ---- */

static ts_dtype x16_of(ts_dtype dt) { return dt == TS_DTYPE_Q8_0 ? TS_DTYPE_Q8_0X16 : TS_DTYPE_Q4_0X16; }

void ts_x16_repack_rows(ts_dtype dt, uint8_t *dst, const uint8_t *src, int K, int64_t r0, int64_t r1) {
    size_t rb = ts_gemm_row_bytes(dt, K), bb = rb / (size_t)(K / TS_QBLOCK), gb = 16 * bb;
    int ng = K / TS_QBLOCK / 16, cw = (int)(bb - 2) / 4; /* code dwords per block */
    ts_dtype x16 = x16_of(dt);
    for (int64_t n = r0; n < r1; n++) {
        const uint8_t *s = src + (size_t)n * rb;
        uint8_t *d = dst + (size_t)n * rb;
        for (int g = 0; g < ng; g++, s += gb, d += gb)
            for (int i = 0; i < 16; i++) {
                const uint8_t *blk = s + bb * (size_t)ts_x16_lane(x16, i); /* the block of lane i */
                memcpy(d + 2 * i, blk, 2);
                for (int m = 0; m < cw; m++) memcpy(d + 32 + 64 * m + 4 * i, blk + 2 + 4 * m, 4);
            }
        memcpy(d, s, rb - (size_t)ng * gb); /* the tail blocks as stored */
    }
}

void ts_x16_block(ts_dtype x16, const uint8_t *row, int K, int b, uint8_t *out) {
    ts_dtype dt = ts_x16_stored(x16);
    size_t bb = ts_gemm_row_bytes(dt, K) / (size_t)(K / TS_QBLOCK);
    int ng = K / TS_QBLOCK / 16, cw = (int)(bb - 2) / 4;
    if (b >= 16 * ng) {
        memcpy(out, row + (size_t)b * bb, bb);
        return;
    }
    const uint8_t *g = row + (size_t)(b / 16) * 16 * bb;
    int i = ts_x16_lane(x16, b % 16);
    memcpy(out, g + 2 * i, 2);
    for (int m = 0; m < cw; m++) memcpy(out + 2 + 4 * m, g + 32 + 64 * m + 4 * i, 4);
}

void ts_x16_row_to_f32(ts_dtype x16, const uint8_t *row, int K, float *out) {
    uint8_t blk[2 + TS_QBLOCK];
    for (int b = 0; b < K / TS_QBLOCK; b++) {
        ts_x16_block(x16, row, K, b, blk);
        ts_dtype_to_f32(ts_x16_stored(x16), blk, 0, TS_QBLOCK, out + (size_t)b * TS_QBLOCK);
    }
}

/* Only for the AVX-512 VNNI kernels (the others read stored blocks). Q4_0 always. Q8_0 where
 * the prefill runs AMX or I16 (the default kinds; the F32, BF16 and I8 panels must put every
 * block back): on the Intel Xeon with AMX its lane order decoded 1.08-1.11x the tok/s of the
 * stored order (Llama-3.2-1B, Qwen3-0.6B; docs/performance.md, session 32), on the Zen 5 VM no
 * faster and no slower (1.751x vs 1.734x our BF16, 1.823x vs 1.828x); the AMX and I16 packs read
 * whole groups by transposes, and below 16 rows (9 with AMX, 6-7 at large K) the few-row kernel
 * reads the lane order as it lies,
 * which the stored order has no kernel for: without AMX (the I16 kind, what a Zen 4 runs; measured
 * on the Xeon with TESSERA_Q_PREFILL=i16, session 36) 2-8-token prompts ran 1.27-1.98x the stored
 * order's tok/s, 12 tokens 1.0-1.35x, and 16-512 tokens 0.96-1.15x, once the I16 panels pack a
 * whole group at a time (one K block at a time, 0.84-1.08x). Stored until session 36 on cores
 * without AMX, when the I16 packs put each block back through memory (1.1-1.5x slower at S =
 * 2-256 on the Zen 5 VM) and the few-row kernel did not yet exist. TESSERA_Q_LAYOUT=stored keeps
 * every file's layout, =lanes takes Q8_0 for every kind (read at each session's creation, so one
 * process can compare). Where the prefill runs AMX, Q8_0 / Q4_0 matrices of whole 16-row and
 * 16-block groups take the tile order instead (ts_cpu_t16_wanted, below; cpu_forward.c asks it
 * first). */
int ts_cpu_x16_wanted(ts_cpu_variant v, ts_dtype dt) {
    const char *e = getenv("TESSERA_Q_LAYOUT");
    if (dt != TS_DTYPE_Q8_0 && dt != TS_DTYPE_Q4_0) return 0;
    if (e && !strcmp(e, "stored")) return 0;
    if (ts_cpu_gemm_q_for(v) != ts_cpu_gemm_q_avx512) return 0;
    ts_q_prefill k = ts_cpu_avx512_q_prefill();
    return dt == TS_DTYPE_Q4_0 || (e && !strcmp(e, "lanes")) || k == TS_Q_PREFILL_AMX || k == TS_Q_PREFILL_I16;
}

/* ---- Q8_0 / Q4_0 in tile order (gemm.h, TS_DTYPE_Q8_0T16, TS_DTYPE_Q4_0T16) ---- */

/* Where the prefill runs AMX or I16, for Q8_0 / Q4_0 matrices of whole 16-row groups and whole
 * 16-block groups (the decode on it gives the lane order's bits, whose blocks past the last whole
 * group are stored apart); TESSERA_Q_LAYOUT=lanes or =stored none. Measured on the Intel Xeon with AMX
 * (docs/performance.md): Q8_0 prefill on the tiles as they lie 1.02-1.40x the lane order's per
 * matrix at 2-16 rows, the model's 4-32-token prompts 1.07-1.28x (session 38); since session 40's
 * decode (gemm_q_t16_avx512.c) the tile order also decodes faster, K = 1024 / 2048 / 8192 0.94 /
 * 0.99 / 0.98 of the read probe against the lane order's 0.89 / 0.84-0.88 / 0.84-0.86
 * (gemv_sweep), so K = 1024 (Qwen3-0.6B) takes it too: 4-128-token prompts 1.32-1.42x ->
 * 1.30-1.50x llama.cpp, decode 48.2-48.7 -> 50.6-52.6 tok/s. Q4_0: see gemm_q_t16_avx512.c. The
 * I16 kind (cores without AMX; measured with TESSERA_Q_PREFILL=i16) has the tiles' few-row kernel
 * and I16 panels packed from the tiles: Llama-3.2-1B Q4_0 / Q8_0 decode 1.10-1.14x / 1.17x the
 * lane order's tok/s, 4-16-token prompts 1.02-1.18x, 128-512 tokens 0.95-1.00x. */
int ts_cpu_t16_wanted(ts_cpu_variant v, ts_dtype dt, int64_t N, int64_t K) {
    const char *e = getenv("TESSERA_Q_LAYOUT");
    if ((dt != TS_DTYPE_Q8_0 && dt != TS_DTYPE_Q4_0) || N % 16 || K % 512 || K > TS_GEMM_QX_MAX) return 0;
    if (e && (!strcmp(e, "lanes") || !strcmp(e, "stored"))) return 0;
    ts_q_prefill k = ts_cpu_avx512_q_prefill();
    return ts_cpu_gemm_q_for(v) == ts_cpu_gemm_q_avx512 && (k == TS_Q_PREFILL_AMX || k == TS_Q_PREFILL_I16);
}

/* Row j's stored block (34 or 18 bytes: dt the stored type) into / out of the 16-row record p of
 * one block */
static void t16_put(ts_dtype dt, uint8_t *p, int j, const uint8_t *blk) {
    memcpy(p + 2 * j, blk, 2);
    for (int m = 0; m < (dt == TS_DTYPE_Q8_0 ? TS_QBLOCK : TS_QBLOCK / 2) / 4; m++)
        memcpy(p + 32 + 64 * m + 4 * j, blk + 2 + 4 * m, 4);
}
static void t16_get(ts_dtype dt, const uint8_t *p, int j, uint8_t *blk) {
    memcpy(blk, p + 2 * j, 2);
    for (int m = 0; m < (dt == TS_DTYPE_Q8_0 ? TS_QBLOCK : TS_QBLOCK / 2) / 4; m++)
        memcpy(blk + 2 + 4 * m, p + 32 + 64 * m + 4 * j, 4);
}

void ts_t16_repack_groups(ts_dtype dt, uint8_t *dst, const uint8_t *src, int K, int64_t g0, int64_t g1) {
    const size_t rb = ts_gemm_row_bytes(dt, K), bb = rb / (size_t)(K / TS_QBLOCK), gb = ts_t16_group_block(dt);
    for (int64_t g = g0; g < g1; g++)
        for (int b = 0; b < K / TS_QBLOCK; b++)
            for (int j = 0; j < 16; j++)
                t16_put(dt, dst + (size_t)g * 16 * rb + (size_t)b * gb, j, src + (size_t)(16 * g + j) * rb + (size_t)b * bb);
}

void ts_t16_group_stored(ts_dtype t16, const uint8_t *W, int K, int64_t g, uint8_t *out) {
    const ts_dtype dt = ts_x16_stored(t16);
    const size_t rb = ts_gemm_row_bytes(dt, K), bb = rb / (size_t)(K / TS_QBLOCK), gb = ts_t16_group_block(dt);
    for (int b = 0; b < K / TS_QBLOCK; b++)
        for (int j = 0; j < 16; j++)
            t16_get(dt, W + (size_t)g * 16 * rb + (size_t)b * gb, j, out + (size_t)j * rb + (size_t)b * bb);
}

void ts_t16_row_to_f32(ts_dtype t16, const uint8_t *W, int K, int64_t n, float *out) {
    const ts_dtype dt = ts_x16_stored(t16);
    const size_t rb = ts_gemm_row_bytes(dt, K), gb = ts_t16_group_block(dt);
    uint8_t blk[2 + TS_QBLOCK];
    for (int b = 0; b < K / TS_QBLOCK; b++) {
        t16_get(dt, W + (size_t)(n / 16) * 16 * rb + (size_t)b * gb, (int)(n % 16), blk);
        ts_dtype_to_f32(dt, blk, 0, TS_QBLOCK, out + (size_t)b * TS_QBLOCK);
    }
}

ts_gemm_q_fn ts_cpu_gemm_q_for(ts_cpu_variant v) {
    if (v >= TS_CPU_AVX512BF16 && ts_cpu_features_get()->avx512vnni) {
        (void)ts_cpu_avx512_q_prefill(); /* chosen here, at session creation, before any thread runs a GEMM */
        return ts_cpu_gemm_q_avx512;
    }
    return v >= TS_CPU_AVX2 ? ts_cpu_gemm_q_avx2 : ts_cpu_gemm_q_scalar;
}

const char *ts_cpu_gemm_q_name(ts_cpu_variant v) {
    ts_gemm_q_fn f = ts_cpu_gemm_q_for(v);
    if (f == ts_cpu_gemm_q_avx512) {
        static const char *const pre[] = {
            "FP32 FMA zmm on W dequantized exactly", "vdpbf16ps zmm on W dequantized to BF16, BF16-rounded x",
            "vpdpbusd zmm on W codes, x quantized to 8 bits per 32-block",
            "vpdpwssd zmm on W codes, x quantized to 16 bits per 32-block",
            "AMX tdpbssd/tdpbusd tiles on W codes (tile-order rows from 7 rows, lane-order from 6-9, stored from 32; fewer rows vpdpbusd or vpdpwssd, same bits), x quantized to 16 bits per 32-block and split in bytes"};
        static char name[TS_Q_PREFILL_COUNT][384];
        ts_q_prefill k = ts_cpu_avx512_q_prefill();
        snprintf(name[k], sizeof name[k],
                 "decode vpdpbusd zmm on byte-split 16-bit x, 16 blocks per scaling, AVX-512 VNNI%s; prefill %s",
                 ts_cpu_q_gfni() ? " (Q4_0 nibbles split by GFNI)" : "", pre[k]);
        return name[k];
    }
    if (f == ts_cpu_gemm_q_avx2) return "decode vpmaddwd ymm on 16-bit x, prefill FP32 FMA ymm on dequantized W";
    return "scalar: decode int32 dot on 16-bit x, prefill FP32 on dequantized W";
}
