/* AVX-512 VNNI kernels on Q8_0 and Q4_0 in tile order (gemm.h, TS_DTYPE_Q8_0T16 / _Q4_0T16): the
 * single and batched decode and the few-row prefill (the AMX tiles read the same layouts,
 * gemm_q_amx.c). Every result has the stored and lane orders' bits (gemm_q_avx512.c). Compiled
 * with gemm_q_avx512.c's flags (CMakeLists.txt); used only when CPUID has AVX-512 VNNI. */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "target/cpu/gemm.h"
#include "target/cpu/gemm_q_avx512.h"
#include "target/cpu/prefetch.h"

/* ---- Decode on tile-order Q8_0 and Q4_0 (gemm.h, TS_DTYPE_Q8_0T16 / _Q4_0T16) ----
 * 16 rows at once, lane = row: per block, each code vector (dword m of the 16 rows) against x's
 * dword m broadcast, in the lane order's two chains (high bytes of x against the codes flipped
 * to unsigned, low bytes against the codes, the low chain from the correction term), so each
 * block's int32 sum is exact, as there. The FP32 steps are the lane order's too: a row's block j
 * of each group goes to the accumulator of the lane that holds block j there (ts_x16_lane), with
 * the same fma of sum * (d_w * d_x) group after group, and the 16 accumulators are summed in
 * _mm512_reduce_add_ps's tree (GCC's: lanes i and i + 8, then i and i + 4, then 0 + 2 and 1 + 3,
 * then those two): every row has the lane order's bits, which are the stored order's
 * (test_cpu_gemm_q compares all three). Two groups a pass, block by block (t16_pair): x's dwords
 * broadcast once for both groups, 8 code vectors of each against them, one request per code
 * vector at the distances of TS_PF_Q8T16 (prefetch.c; chosen per process), the accumulators in
 * memory (touched once a block). On the Intel Xeon with AMX, two threads from DRAM
 * (tools/gemv_sweep, 1 GiB, fractions of the read probe in the same rounds, session 40): K = 1024
 * / 2048 / 8192 0.94 / 0.99 / 0.98-0.99 against the lane order's 0.89-0.90 / 0.84-0.88 /
 * 0.84-0.86; one group a pass 0.82 / 0.96 / 0.93. The form before (a quarter of 4 blocks of each
 * group in turn, the x dwords loaded per group, the quarter's 34 requests spread over its 8 code
 * vectors by a computed count) compiled to a loop that copied its 8 accumulators every step and
 * read 0.79 / 0.82 / 0.87 in the same runs.
 * Q4_0 (session 40) is the same computation on 8 code vectors made from the block's 4 stored ones
 * (t16_code: low nibbles = positions 4m.., high nibbles = 16 + 4m..), the codes 0..15 unsigned
 * against both bytes of x and its correction -8 sum(x), lane = block, so the lane order's Q4_0
 * bits; one group a pass. The same runs: K = 1024 / 2048 / 8192 0.93 / 0.90 / 0.84-0.85 of the
 * probe against the lane order's 0.78 / 0.77 / 0.72, whose four rows a pass each read their own
 * x vectors and 64-byte code loads from four places. */
typedef struct t16x {
    const uint8_t *hi, *lo;
    const int32_t *ncorr;
    const float *d;
} t16x;

/* x's high and low bytes in natural order, and per block the correction's negation: Q8_0
 * -32768 sum(hi) (its codes go in + 128 against the high bytes), Q4_0 -8 sum(x) (its codes are
 * the weights + 8), as the lane order's (gemm_q_avx512.c) */
static void t16_prepare(uint8_t *hi, uint8_t *lo, int32_t *ncorr, ts_gemm_qx qx, int nb, int q4) {
    const __m512i ones = _mm512_set1_epi16(1);
    for (int b = 0; b < nb; b++) {
        __m512i v = _mm512_loadu_si512(qx.q + (size_t)b * TS_QBLOCK), h = _mm512_srai_epi16(v, 8);
        _mm256_storeu_si256((__m256i *)(hi + (size_t)b * TS_QBLOCK), _mm512_cvtepi16_epi8(h));
        _mm256_storeu_si256((__m256i *)(lo + (size_t)b * TS_QBLOCK), _mm512_cvtepi16_epi8(v));
        ncorr[b] = q4 ? -8 * _mm512_reduce_add_epi32(_mm512_madd_epi16(v, ones))
                      : -32768 * _mm512_reduce_add_epi32(_mm512_madd_epi16(h, ones));
    }
}

/* A block's code vector m (0..7) of a 16-row group for the products, dword i = row i's codes at
 * positions 4m..4m+3: Q8_0 (q4 = 0) the stored vector m (w; u = w + 128, unsigned, for the high
 * bytes of x); Q4_0 the low nibbles of stored vector m (m < 4) or the high nibbles of vector
 * m - 4 (positions 16 + 4 (m - 4) = 4m), 0..15, so u = w. Either way the block's two chains are
 * the same 16 vpdpbusd against x's dwords m = 0..7. q: the stored vector m % 4 (Q4_0) or m (Q8_0). */
static inline __attribute__((always_inline)) void t16_code(__m512i q, int m, int q4, int gf, __m512i *w, __m512i *u) {
    if (!q4) {
        *w = q, *u = _mm512_xor_si512(q, _mm512_set1_epi8((char)0x80));
        return;
    }
    const __m512i m4 = _mm512_set1_epi8(15);
    *w = *u = m < 4 ? _mm512_and_si512(q, m4) : ts_q4_high_nibbles(q, m4, gf);
}

/* Blocks b and b + 1 (b even) of R (a constant, 1 or 2) 16-row groups gbytes apart, whose
 * block b starts at p (q4, gf constants: Q4_0 and its nibble split, else Q8_0): per block the code
 * vectors of each group against x's dwords broadcast once for the R groups, then the block's
 * FP32 step into its lane accumulator (accm[r], 16 vectors per group, in memory). A pair of
 * blocks is 17 lines (Q8_0) or 9 (Q4_0); groups start on a line (nb is even where the tile order
 * is used); each stored code vector requests one line, and the first block one more, at the
 * distances of TS_PF_Q8T16 / _Q4T16. */
static inline __attribute__((always_inline)) void t16_pair(float (*accm)[16 * 16], const uint8_t *p, size_t gbytes,
                                                           int R, int b, const t16x *x, ts_pf pf, int q4, int gf) {
    const int nv = q4 ? TS_QBLOCK / 8 : TS_QBLOCK / 4; /* stored code vectors a block */
    const size_t gb = ts_t16_group_block(q4 ? TS_DTYPE_Q4_0 : TS_DTYPE_Q8_0);
    for (int v = 0; v < 2; v++) {
        const int bb = b + v;
        __m512i ih[2], il[2];
        for (int r = 0; r < R; r++) ih[r] = _mm512_setzero_si512(), il[r] = _mm512_set1_epi32(x->ncorr[bb]);
        for (int sv = 0; sv < nv; sv++) {
            __m512i q[2];
            for (int r = 0; r < R; r++) {
                ts_pf_lines(p + (size_t)r * gbytes + 64 * ((nv + 1) * v + sv), pf, 1);
                q[r] = _mm512_loadu_si512(p + (size_t)r * gbytes + (size_t)v * gb + 32 + 64 * sv);
            }
            for (int m = sv; m < TS_QBLOCK / 4; m += nv) { /* Q4_0: the low nibbles, then the high */
                const size_t k = (size_t)bb * TS_QBLOCK + 4 * (size_t)m;
                int32_t h, lo;
                memcpy(&h, x->hi + k, 4), memcpy(&lo, x->lo + k, 4);
                const __m512i hb = _mm512_set1_epi32(h), lb = _mm512_set1_epi32(lo);
                for (int r = 0; r < R; r++) {
                    __m512i w, u;
                    t16_code(q[r], m, q4, gf, &w, &u);
                    ih[r] = _mm512_dpbusd_epi32(ih[r], u, hb);
                    il[r] = _mm512_dpbusd_epi32(il[r], lb, w);
                }
            }
        }
        const int lane = ts_x16_lane(q4 ? TS_DTYPE_Q4_0X16 : TS_DTYPE_Q8_0X16, bb % TS_Q_GROUP);
        const __m512 dx = _mm512_set1_ps(x->d[bb]);
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = p + (size_t)r * gbytes + (size_t)v * gb;
            if (!v) ts_pf_lines(p + (size_t)r * gbytes + 64 * nv, pf, 1);
            __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
            __m512i t = _mm512_add_epi32(_mm512_slli_epi32(ih[r], 8), il[r]);
            float *a = accm[r] + 16 * lane;
            _mm512_store_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dw, dx), _mm512_load_ps(a)));
        }
    }
}

/* The 16 rows' sums of their 16 lane accumulators a (overwritten), in _mm512_reduce_add_ps's tree
 * (lanes i and i + 8, then i and i + 4, then 0 + 2 and 1 + 3, then those two) */
static inline __attribute__((always_inline)) __m512 t16_tree(__m512 *a) {
    for (int i = 0; i < 8; i++) a[i] = _mm512_add_ps(a[i + 8], a[i]);
    for (int i = 0; i < 4; i++) a[i] = _mm512_add_ps(a[i + 4], a[i]);
    return _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
}

/* R (a constant, 1 or 2) 16-row groups gbytes apart, block pair after block pair */
static inline __attribute__((always_inline)) void t16_groups(float *y, const uint8_t *G, size_t gbytes, int R, int nb,
                                                             const t16x *x, ts_pf pf, int q4, int gf) {
    const size_t gb = ts_t16_group_block(q4 ? TS_DTYPE_Q4_0 : TS_DTYPE_Q8_0);
    float accm[2][16 * 16] __attribute__((aligned(64)));
    for (int r = 0; r < R; r++)
        for (int i = 0; i < 16; i++) _mm512_store_ps(accm[r] + 16 * i, _mm512_setzero_ps());
    for (int b = 0; b < nb; b += 2) t16_pair(accm, G + (size_t)b * gb, gbytes, R, b, x, pf, q4, gf);
    for (int r = 0; r < R; r++) {
        __m512 acc[16];
        for (int i = 0; i < 16; i++) acc[i] = _mm512_load_ps(accm[r] + 16 * i);
        _mm512_storeu_ps(y + 16 * r, t16_tree(acc));
    }
}

/* Rows [n0, n1): Q8_0 two whole groups a pass where it can, Q4_0 one (two read 0.82 of the probe
 * at K = 2048 against one's 0.88 in a scratch copy, session 40); a group the share starts or ends
 * inside computes all 16 rows and keeps its own. */
static inline __attribute__((always_inline)) void t16_rows(float *y, const t16x *x, const uint8_t *W, int K, int n0,
                                                           int n1, ts_pf pf, int q4, int gf) {
    const int nb = K / TS_QBLOCK, R = q4 ? 1 : 2;
    const size_t gbytes = 16 * ts_gemm_row_bytes(q4 ? TS_DTYPE_Q4_0 : TS_DTYPE_Q8_0, K);
    for (int g = n0 / 16; 16 * g < n1; g++) {
        const uint8_t *G = W + (size_t)g * gbytes;
        if (R == 2 && 16 * g >= n0 && 16 * g + 32 <= n1) { /* two whole groups */
            t16_groups(y + 16 * g, G, gbytes, 2, nb, x, pf, q4, gf);
            g++;
            continue;
        }
        if (16 * g >= n0 && 16 * g + 16 <= n1) {
            t16_groups(y + 16 * g, G, 0, 1, nb, x, pf, q4, gf);
            continue;
        }
        float t[16];
        t16_groups(t, G, 0, 1, nb, x, pf, q4, gf);
        for (int j = 0; j < 16; j++)
            if (16 * g + j >= n0 && 16 * g + j < n1) y[16 * g + j] = t[j];
    }
}

/* K % 512 == 0, as the tile order is made (ts_cpu_t16_wanted): whole groups of 16 blocks, so
 * block pairs and the lane accumulators' order hold */
void ts_cpu_gemv_rows_t16_avx512(float *y, ts_gemm_qx qx, const uint8_t *W, ts_dtype t16, int K, int n0, int n1) {
    const int nb = K / TS_QBLOCK, q4 = t16 == TS_DTYPE_Q4_0T16;
    const size_t gbytes = 16 * ts_gemm_row_bytes(t16, K);
    uint8_t sbuf[2 * TS_GEMM_QX_MAX] __attribute__((aligned(64)));
    int32_t sncorr[TS_GEMM_QX_MAX / TS_QBLOCK];
    uint8_t *buf = sbuf;
    int32_t *ncorr = sncorr;
    void *heap = NULL;
    if (K > TS_GEMM_QX_MAX) {
        heap = malloc(2 * (size_t)K + sizeof(int32_t) * (size_t)nb);
        if (!heap) return; /* as ts_cpu_gemm_q_decode */
        buf = heap, ncorr = (int32_t *)(buf + 2 * (size_t)K);
    }
    t16_prepare(buf, buf + K, ncorr, qx, nb, q4);
    const t16x x = {buf, buf + K, ncorr, qx.d};
    const ts_pf_kind kind = q4 ? TS_PF_Q4T16 : TS_PF_Q8T16;
    const uint64_t bytes = (uint64_t)((n1 + 15) / 16 - n0 / 16) * gbytes;
    uint64_t t0;
    const int c = ts_pf_begin(kind, bytes, &t0);
    const ts_pf pf = ts_pf_candidate(kind, c);
    if (!q4) t16_rows(y, &x, W, K, n0, n1, pf, 0, 0);
    else if (ts_cpu_q_gfni()) t16_rows(y, &x, W, K, n0, n1, pf, 1, 1);
    else t16_rows(y, &x, W, K, n0, n1, pf, 1, 0);
    ts_pf_end(kind, c, t0, bytes);
    free(heap);
}

/* Several x rows against the tile order (the batched decode, and the few-row prefill below the
 * AMX tiles): per block of a 16-row group the 8 code vectors loaded (and flipped) once into
 * registers, then every x row's two chains against them, so a group is read from memory once per
 * call whatever S. Each x row's state lives in a small array (same values as in registers).
 * i16 (a constant): I16's FP32 order (per K block of 4 blocks an FP32 sum from zero, then y = it
 * or y + it: the few-row prefill, the AMX kind's bits); else the single decode's (t16_pair's
 * accumulator per lane, t16_groups' tree): each row of a batched decode has its decode's bits. */
typedef struct t16rows {
    t16x x[TS_GEMM_BATCH_MAX];
    uint8_t *buf;
} t16rows;

static int t16_rows_prepare(t16rows *r, const ts_gemm_qx *qx, int S, int K, int q4) {
    const int nb = K / TS_QBLOCK;
    const size_t per = 2 * (size_t)K + sizeof(int32_t) * (size_t)nb;
    r->buf = malloc(per * (size_t)S);
    if (!r->buf) return 0;
    for (int s = 0; s < S; s++) {
        uint8_t *p = r->buf + per * (size_t)s;
        t16_prepare(p, p + K, (int32_t *)(p + 2 * (size_t)K), qx[s], nb, q4);
        r->x[s] = (t16x){p, p + K, (const int32_t *)(p + 2 * (size_t)K), qx[s].d};
    }
    return 1;
}

static inline __attribute__((always_inline)) void t16_rows_g(float *y, int ldy, const t16rows *r, int S,
                                                             const uint8_t *W, int K, int n0, int n1, int i16, int q4,
                                                             int gf) {
    const int nb = K / TS_QBLOCK, nv = q4 ? TS_QBLOCK / 8 : TS_QBLOCK / 4;
    const size_t gbytes = 16 * ts_gemm_row_bytes(q4 ? TS_DTYPE_Q4_0 : TS_DTYPE_Q8_0, K);
    const size_t gb = ts_t16_group_block(q4 ? TS_DTYPE_Q4_0 : TS_DTYPE_Q8_0);
    const ts_pf_kind kind = q4 ? TS_PF_Q4T16 : TS_PF_Q8T16;
    /* the batched decode's calls are timed for the per-process choice of distances, as the
     * lane order's (a server decodes only through them); the few-row prefill's are not */
    const uint64_t bytes = i16 ? 0 : (uint64_t)((n1 + 15) / 16 - n0 / 16) * gbytes;
    uint64_t t0;
    const int c = ts_pf_begin(kind, bytes, &t0);
    const ts_pf pf = ts_pf_candidate(kind, c);
    /* decode: 16 lane accumulators per row; i16: the K block's sum and y per row */
    __m512 st[TS_GEMM_BATCH_MAX][16];
    for (int g = n0 / 16; 16 * g < n1; g++) {
        const uint8_t *G = W + (size_t)g * gbytes;
        for (int s = 0; s < S; s++)
            for (int i = 0; i < (i16 ? 2 : 16); i++) st[s][i] = _mm512_setzero_ps();
        for (int b = 0; b < nb; b++) {
            const uint8_t *blk = G + (size_t)b * gb;
            ts_pf_lines(blk, pf, (int)((gb + 63) / 64));
            __m512i q[TS_QBLOCK / 4], w[TS_QBLOCK / 4], u[TS_QBLOCK / 4];
            for (int m = 0; m < nv; m++) q[m] = _mm512_loadu_si512(blk + 32 + 64 * m); /* each stored vector once */
            for (int m = 0; m < TS_QBLOCK / 4; m++) t16_code(q[m % nv], m, q4, gf, &w[m], &u[m]);
            const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
            const int j = b % TS_Q_GROUP, lane = ts_x16_lane(q4 ? TS_DTYPE_Q4_0X16 : TS_DTYPE_Q8_0X16, j);
            for (int s = 0; s < S; s++) {
                const t16x *x = &r->x[s];
                __m512i ih = _mm512_setzero_si512(), il = _mm512_set1_epi32(x->ncorr[b]);
                for (int m = 0; m < TS_QBLOCK / 4; m++) {
                    const size_t k = (size_t)b * TS_QBLOCK + 4 * (size_t)m;
                    int32_t h, lo;
                    memcpy(&h, x->hi + k, 4), memcpy(&lo, x->lo + k, 4);
                    ih = _mm512_dpbusd_epi32(ih, u[m], _mm512_set1_epi32(h));
                    il = _mm512_dpbusd_epi32(il, _mm512_set1_epi32(lo), w[m]);
                }
                const __m512 t = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(ih, 8), il));
                const __m512 mv = _mm512_mul_ps(dw, _mm512_set1_ps(x->d[b]));
                if (!i16) {
                    st[s][lane] = _mm512_fmadd_ps(t, mv, st[s][lane]);
                    continue;
                }
                /* st[s][0]: the K block's sum (from zero at its first block), st[s][1]: y */
                st[s][0] = _mm512_fmadd_ps(t, mv, b % TS_I16_KB_BLOCKS ? st[s][0] : _mm512_setzero_ps());
                if (b % TS_I16_KB_BLOCKS == TS_I16_KB_BLOCKS - 1)
                    st[s][1] = b < TS_I16_KB_BLOCKS ? st[s][0] : _mm512_add_ps(st[s][1], st[s][0]);
            }
        }
        for (int s = 0; s < S; s++) {
            float t[16];
            _mm512_storeu_ps(t, i16 ? st[s][1] : t16_tree(st[s]));
            for (int i = 0; i < 16; i++)
                if (16 * g + i >= n0 && 16 * g + i < n1) y[(size_t)s * ldy + 16 * g + i] = t[i];
        }
    }
    ts_pf_end(kind, c, t0, bytes);
}

/* t16_rows_g per type and nibble split (the type, the split and i16 constants) */
static void t16_rows_all(float *y, int ldy, const t16rows *r, int S, const uint8_t *W, ts_dtype t16, int K, int n0,
                         int n1, int i16) {
    if (t16 == TS_DTYPE_Q8_0T16) {
        if (i16) t16_rows_g(y, ldy, r, S, W, K, n0, n1, 1, 0, 0);
        else t16_rows_g(y, ldy, r, S, W, K, n0, n1, 0, 0, 0);
    } else if (ts_cpu_q_gfni()) {
        if (i16) t16_rows_g(y, ldy, r, S, W, K, n0, n1, 1, 1, 1);
        else t16_rows_g(y, ldy, r, S, W, K, n0, n1, 0, 1, 1);
    } else {
        if (i16) t16_rows_g(y, ldy, r, S, W, K, n0, n1, 1, 1, 0);
        else t16_rows_g(y, ldy, r, S, W, K, n0, n1, 0, 1, 0);
    }
}

/* The batched decode. Llama-3.2-1B Q8_0 (tessera bench --batch 1,4,8), tile order against lane
 * order: 4 sequences 58.7 vs 58.3 tok/s together, 8 sequences 91.8 vs 75.6 (the single decode run
 * per x row and group from L2: 4 sequences 41; each group put back in stored order: 18.7). */
void ts_cpu_gemv_rows_batch_t16_avx512(float *y, int ldy, const ts_gemm_qx *qx, int S, const uint8_t *W, ts_dtype t16,
                                       int K, int n0, int n1) {
    t16rows r;
    if (!t16_rows_prepare(&r, qx, S, K, t16 == TS_DTYPE_Q4_0T16)) return; /* as ts_cpu_gemm_q_decode_batch */
    t16_rows_all(y, ldy, &r, S, W, t16, K, n0, n1, 0);
    free(r.buf);
}
/* The few-row prefill on the tile order (I16's bits) */
static void t16_rows_i16(float *y, int ldy, const ts_gemm_qx *qx, int S, const uint8_t *W, ts_dtype t16, int K, int n0,
                         int n1) {
    t16rows r;
    if (!t16_rows_prepare(&r, qx, S, K, t16 == TS_DTYPE_Q4_0T16)) return;
    t16_rows_all(y, ldy, &r, S, W, t16, K, n0, n1, 1);
    free(r.buf);
}

/* Rows from which the AMX kind runs a tile-order prefill on the tiles, below them t16_rows_i16.
 * One matrix, one thread, W from DRAM, ms (session 38), few-row vs tiles: 8192 x 2048 at 2 / 4 /
 * 6 / 7 rows 1.23 / 1.55 / 1.76 / 1.99 vs 1.64 / 1.74 / 1.83 / 1.87; against the lane order's
 * kernels (its few-row kernel below 9 rows, 6-7 at large K) the tile order ran 8192 x 2048 1.02-1.15x
 * as fast at 2-7 rows, 1.25-1.40x at 8-16; 2048 x 8192 1.16-1.26x; 2048 x 2048 1.04-1.34x; 3072 x
 * 1024 1.09-1.26x. */
#define T16_AMX_MIN_S 7

/* What has no tile-order kernel (the F32, BF16 and I8 kinds, shares that start or end inside a
 * group) runs on each 16-row group put back in stored order: the stored rows' bits, which the
 * tile order's own kernels give too. */
static void t16_by_groups(ts_q_prefill k, float *y, int ldy, const float *xp, int ldx, const uint8_t *W, ts_dtype t16,
                          int K, int S, int n0, int n1) {
    const size_t rb = ts_gemm_row_bytes(t16, K);
    uint8_t *buf = malloc(16 * rb);
    if (!buf) return; /* cannot happen for a model that loaded; outputs stay as they were */
    for (int g = n0 / 16; 16 * g < n1; g++) {
        int a = (n0 > 16 * g ? n0 : 16 * g) - 16 * g, b = (n1 < 16 * g + 16 ? n1 : 16 * g + 16) - 16 * g;
        ts_t16_group_stored(t16, W, K, g, buf);
        ts_cpu_gemm_q_prefill_avx512(k, y + 16 * g, ldy, xp, ldx, buf, ts_x16_stored(t16), K, S, a, b);
    }
    free(buf);
}

void ts_cpu_gemm_q_prefill_t16_avx512(ts_q_prefill k, float *y, int ldy, const float *xp, int ldx, const uint8_t *W,
                                      ts_dtype t16, int K, int S, int n0, int n1) {
    /* the few-row kernel below the AMX tiles, or below the I16 panels as the lane order's (gemm.h) */
    const int few = k == TS_Q_PREFILL_AMX ? T16_AMX_MIN_S : k == TS_Q_PREFILL_I16 ? TS_I16_PANELS_MIN_S_X16 : 0;
    if (S < few && S <= TS_GEMM_BATCH_MAX) {
        ts_cpu_gemm_q_decode_batch(y, ldy, xp, ldx, W, t16, K, S, n0, n1, ts_cpu_quantize_x_avx512, t16_rows_i16);
        return;
    }
    if (k == TS_Q_PREFILL_AMX && ts_cpu_gemm_q_amx_t16(y, ldy, xp, ldx, W, t16, K, S, n0, n1)) return;
    /* I16's panels (AMX's bits; also where AMX had no memory for x) on whole groups */
    if ((k == TS_Q_PREFILL_I16 || k == TS_Q_PREFILL_AMX) && n0 % 16 == 0 && n1 % 16 == 0)
        ts_cpu_q_prefill_i16_avx512(y, ldy, xp, ldx, W, t16, K, S, n0, n1);
    else t16_by_groups(k, y, ldy, xp, ldx, W, t16, K, S, n0, n1);
}
