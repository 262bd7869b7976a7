/* Prefill on Q8_0 / Q4_0 weights with AMX-INT8 tiles, bit-identical to the I16 kernel
 * (gemm_q_panels_avx512.c), which computes each output as:
 *   x quantized per 32-block to 16 bits (ts_cpu_quantize_x_avx512), per block the exact int32
 *   dot of those codes with the block's int8 codes, s; per K block of 128 positions an FP32
 *   sum from zero, acc = fma(float(s), d_w * d_x, acc) block after block; then y = acc (the
 *   first K block) or y + acc.
 * AMX has no 16-bit integer product, so x = 256 h + l is split in bytes (h = x >> 8 signed,
 * l = x & 255 unsigned): tdpbssd gives sum(h * w), tdpbusd sum(l * w), and 256 * the first +
 * the second is s exactly (|s| < 2^27, no overflow, no saturation). The scaling and summing
 * are I16's instructions in I16's order, so every output has I16's bits (the test compares
 * them bit for bit) and the decode kernels' block sums: the gates and the oracle bound are
 * I16's. The per-block scales forbid summing blocks in the tiles: one tile step is one block
 * (m <= 16 x rows x 32 W rows x 32 positions), and the int32 sums go through memory to AVX-512 for
 * the scaling, which bounds the kernel (docs/performance.md).
 *
 * Tiles: tmm0-3 the sums (h and l against W rows 0-15, then 16-31), tmm4/5 x's h and l bytes
 * (m rows x 32 bytes, m <= 16 the step's x rows), tmm6/7 W codes of rows 0-15 / 16-31 in the tiles' 4-byte groups
 * (8 rows of 16 W rows x 4 positions). Compiled with -mamx-tile -mamx-int8 besides the
 * avx512 flags (CMakeLists.txt); run only where ts_cpu_amx_usable(). */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "target/cpu/cpu_features.h"
#include "target/cpu/gemm.h"
#include "target/cpu/gemm_q_avx512.h"
#include "target/cpu/gemm_q_blocks_avx512.h"
#include "target/cpu/transpose_avx512.h"

#define AMX_KC 1024           /* positions of x prepared at once: 16 rows of h and l fill 32 KiB */
#define AMX_KB TS_Q16_KB       /* the I16 kernel's K block: the FP32 sums restart here */
#define AMX_LDA (AMX_KC + 64) /* bytes between prepared x rows: not a multiple of 4 KiB */
#define AMX_NB (AMX_KC / TS_QBLOCK)
#define AMX_WBLK 1024 /* bytes of W codes per block: two B tiles of 512 */

typedef struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

/* The tile shapes above with m x rows (tmm0-5: m rows, m <= 16); per thread (tile configuration
 * is thread state). A step of fewer x rows than 16 loads, multiplies and stores only those: with
 * 16-row tiles over zero rows, 8192 x 2048 Q8_0 at 6-9 rows took 7-10% longer (one thread, session 35). */
static void amx_configure(int m) {
    amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 4; t++) c.rows[t] = (uint8_t)m, c.colsb[t] = 64;
    c.rows[4] = c.rows[5] = (uint8_t)m, c.colsb[4] = c.colsb[5] = TS_QBLOCK;
    c.rows[6] = c.rows[7] = TS_QBLOCK / 4, c.colsb[6] = c.colsb[7] = 64;
    _tile_loadconfig(&c);
}

/* x rows [0, S) over positions [k0, k0 + kc): the I16 kernel's 16-bit codes, split into h and
 * l bytes (rows lda apart), and the block scales d_x (rows dnb apart); h, l, dx where position
 * k0 goes. */
static void prepare_x(uint8_t *h, uint8_t *l, float *dx, size_t lda, int dnb, const float *xp, int ldx, int S, int k0,
                      int kc) {
    int16_t q[AMX_KC] __attribute__((aligned(64)));
    for (int s = 0; s < S; s++) {
        uint8_t *hs = h + (size_t)s * lda, *ls = l + (size_t)s * lda;
        ts_cpu_quantize_x_avx512((ts_gemm_qx){q, dx + (size_t)s * dnb}, xp + (size_t)s * ldx + k0, kc);
        for (int k = 0; k < kc; k += TS_QBLOCK) {
            __m512i v = _mm512_load_si512(q + k);
            _mm256_storeu_si256((__m256i *)(hs + k), _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
            _mm256_storeu_si256((__m256i *)(ls + k), _mm512_cvtepi16_epi8(v));
        }
    }
}

/* Whole 16-block group g of 16 lane-order rows (nrow of them from row0, rb apart; the others
 * zero) into the tiles of amx_pack_unit (B: the group's first block, t's half; dw likewise):
 * code vector m of a group holds dword m of every block, one block a lane (gemm.h), so one
 * 16 x 16 dword transpose of the 16 rows' vector m gives tile row m (Q4_0: m and m + 4, the low
 * and high nibbles) of all 16 blocks, and one of their scale vectors the 16 blocks' d_w. Reading
 * each block through ts_qblk_at instead took a gather per block and row: a 16- or 32-token
 * prefill was mostly this packing (8192 x 2048 Q8_0, one thread, session 34: 3.5 ms at 16 rows,
 * 1.2 of it with the packing left out). Same tiles, so the same bits. */
static void pack_group_x16(uint8_t *B, float *dw, const uint8_t *row0, size_t rb, int nrow, int g, int q8) {
    const size_t gb = 16 * (q8 ? 2 + TS_QBLOCK : 2 + TS_QBLOCK / 2);
    const ts_dtype x16 = q8 ? TS_DTYPE_Q8_0X16 : TS_DTYPE_Q4_0X16;
    const uint8_t *gp = row0 + (size_t)g * gb;
    __m512i r[16];
    ts_x16_group_cols(gp, rb, nrow, -1, r);
    for (int L = 0; L < 16; L++)
        _mm512_storeu_si512(dw + (size_t)ts_x16_lane(x16, L) * 32, r[L]);
    for (int m = 0; m < (q8 ? 8 : 4); m++) {
        ts_x16_group_cols(gp, rb, nrow, m, r);
        for (int L = 0; L < 16; L++) {
            uint8_t *o = B + (size_t)ts_x16_lane(x16, L) * AMX_WBLK + 64 * m;
            if (q8) {
                _mm512_store_si512(o, r[L]);
                continue;
            }
            /* Q4_0: positions 4m.. are low nibbles, 16 + 4m.. high ones */
            _mm512_store_si512(o, ts_q4_w8_512(r[L], 0));
            _mm512_store_si512(o + 256, ts_q4_w8_512(r[L], 1));
        }
    }
}

/* W rows [n, n + nv) (nv <= 32; rows past nv zero), blocks [b0, b0 + nblk): per block two B
 * tiles (rows n.. and n + 16..; tile row r = 16 W rows x positions 4r..4r+3) and the 32 scales
 * d_w. Lane-order rows: their whole groups by pack_group_x16 (b0 % 16 == 0: K chunks of
 * AMX_KC), the rest, and stored rows, two blocks per 16 x 16-dword transpose, as the I8 panels
 * pack them, each block read through ts_qblk_at; both give the same tiles. In units (amx_pack):
 * per 16 rows each whole group, then the rest. */
typedef struct amx_pack {
    uint8_t *B;
    float *dw;
    const uint8_t *W; /* TS_DTYPE_Q4_0T16: the step's first block of its first group */
    ts_dtype dt;
    size_t gbytes; /* TS_DTYPE_Q4_0T16: bytes from one group to the next */
    int K, n, nv, b0, nblk;
    int fast;         /* the blocks in whole groups, a multiple of 16 */
    int per, units;   /* units per 16 rows, in all */
    int done, steps, step; /* units packed; the tile steps they are spread over, those run */
} amx_pack;

static amx_pack amx_pack_of(uint8_t *B, float *dw, const uint8_t *W, ts_dtype dt, int K, int n, int nv, int b0, int nblk) {
    int whole = ts_dtype_is_x16(dt) ? K / TS_QBLOCK / 16 * 16 : 0; /* blocks in whole groups */
    amx_pack p = {.B = B, .dw = dw, .W = W, .dt = dt, .K = K, .n = n, .nv = nv, .b0 = b0, .nblk = nblk};
    p.fast = whole > b0 ? (whole < b0 + nblk ? whole : b0 + nblk) - b0 : 0;
    p.per = p.fast / 16 + (p.fast < nblk);
    p.units = nv > 0 ? 2 * p.per : 0;
    return p;
}

/* Q4_0 in tile order: nblk blocks of one group (g: its first block) as the Q8_0 tile order's B
 * tiles in B (512 bytes a block): vector m (positions 4m..4m+3) = the low nibbles of stored
 * vector m (m < 4) or the high nibbles of vector m - 4, minus 8, as int8 (the weights) */
static void t16_q4_tiles(uint8_t *B, const uint8_t *g, int nblk) {
    for (int b = 0; b < nblk; b++) {
        const uint8_t *p = g + (size_t)b * TS_T16_GROUP_BLOCK_Q4 + 32;
        for (int m = 0; m < 4; m++) {
            __m512i q = _mm512_loadu_si512(p + 64 * m);
            _mm512_store_si512(B + 512 * (size_t)b + 64 * m, ts_q4_w8_512(q, 0));
            _mm512_store_si512(B + 512 * (size_t)b + 256 + 64 * m, ts_q4_w8_512(q, 1));
        }
    }
}

/* A tile-order Q4_0 step's split (t16_q4_tiles) as a pack: units of 4 blocks of a group, the
 * second group's tiles nblk blocks after the first's in B (a lone last group: one) */
static amx_pack amx_pack_t16_q4(uint8_t *B, const uint8_t *g0, size_t gbytes, int groups, int nblk) {
    amx_pack p = {.B = B, .W = g0, .dt = TS_DTYPE_Q4_0T16, .gbytes = gbytes, .nblk = nblk};
    p.per = (nblk + 3) / 4;
    p.units = groups * p.per;
    return p;
}

static void amx_pack_unit(const amx_pack *p, int u) {
    if (p->dt == TS_DTYPE_Q4_0T16) {
        int t = u / p->per, b = 4 * (u % p->per), n = p->nblk - b < 4 ? p->nblk - b : 4;
        t16_q4_tiles(p->B + ((size_t)t * p->nblk + (size_t)b) * 512,
                     p->W + (size_t)t * p->gbytes + (size_t)b * TS_T16_GROUP_BLOCK_Q4, n);
        return;
    }
    size_t rb = ts_gemm_row_bytes(p->dt, p->K);
    ts_dtype st = ts_x16_stored(p->dt);
    int t = u / p->per, i = u % p->per, K = p->K, b0 = p->b0, nblk = p->nblk, n = p->n;
    int nrow = p->nv - 16 * t < 0 ? 0 : (p->nv - 16 * t > 16 ? 16 : p->nv - 16 * t);
    uint8_t *B = p->B;
    float *dw = p->dw;
    if (i < p->fast / 16) {
        int g = b0 / 16 + i;
        pack_group_x16(B + (size_t)i * 16 * AMX_WBLK + (size_t)t * (AMX_WBLK / 2), dw + (size_t)i * 16 * 32 + 16 * t,
                       p->W + (size_t)(n + 16 * t) * rb, rb, nrow, g, st == TS_DTYPE_Q8_0);
        return;
    }
    for (int b = p->fast; b < nblk; b += 2) {
        int two = b + 1 < nblk;
        __m512i r[16];
        for (int j = 0; j < 16; j++) {
            const uint8_t *row = p->W + (size_t)(n + 16 * t + j) * rb;
            __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
            float d0 = 0.0f, d1 = 0.0f;
            if (j < nrow) {
                ts_qblk q = ts_qblk_at(row, K, b0 + b, p->dt);
                lo = ts_qblk_w8(q, st), d0 = f16(q.scale);
                if (two) {
                    q = ts_qblk_at(row, K, b0 + b + 1, p->dt);
                    hi = ts_qblk_w8(q, st), d1 = f16(q.scale);
                }
            }
            r[j] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            dw[(size_t)b * 32 + 16 * t + j] = d0;
            if (two) dw[(size_t)(b + 1) * 32 + 16 * t + j] = d1;
        }
        ts_transpose16_epi32(r); /* r[q]: positions 4q..4q+3 of the 16 rows; r[8 + q]: next block */
        for (int e = 0; e < 1 + two; e++) {
            uint8_t *o = B + (size_t)(b + e) * AMX_WBLK + (size_t)t * (AMX_WBLK / 2);
            for (int q = 0; q < TS_QBLOCK / 4; q++) _mm512_store_si512(o + 64 * q, r[8 * e + q]);
        }
    }
}

/* the units due after one more of the tile steps they are spread over */
static inline void amx_pack_slice(amx_pack *p) {
    for (int want = p->steps ? (int)((long)p->units * ++p->step / p->steps) : p->units; p->done < want && p->done < p->units; p->done++)
        amx_pack_unit(p, p->done);
}
static void amx_pack_rest(amx_pack *p) {
    for (; p->done < p->units; p->done++) amx_pack_unit(p, p->done);
}

/* The int32 sums of nblk blocks (4 tiles each, as stored) scaled and summed into y rows
 * [0, ms) x the columns whose bits are set in cols (bit c: column c of 32) in I16's order (d_x
 * rows dnb apart); first: y = the sum, else y + the sum. */
static inline void scale_rows(float *y, int ldy, const int32_t *C, int nblk, const float *dw, const float *dx, int dnb,
                              int ms, uint32_t cols, int first) {
    const __mmask16 m0 = (__mmask16)cols, m1 = (__mmask16)(cols >> 16);
    for (int m = 0; m < ms; m++) {
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        for (int b = 0; b < nblk; b++) {
            const int32_t *c = C + (size_t)b * 4 * 256 + 16 * m;
            __m512 d = _mm512_set1_ps(dx[(size_t)m * dnb + b]);
            __m512i s0 = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c), 8), _mm512_load_si512(c + 256));
            __m512i s1 = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c + 512), 8), _mm512_load_si512(c + 768));
            a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(_mm512_loadu_ps(dw + 32 * b), d), a0);
            a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(_mm512_loadu_ps(dw + 32 * b + 16), d), a1);
        }
        float *yr = y + (size_t)m * ldy;
        if (first) {
            _mm512_mask_storeu_ps(yr, m0, a0);
            _mm512_mask_storeu_ps(yr + 16, m1, a1);
        } else {
            _mm512_mask_storeu_ps(yr, m0, _mm512_add_ps(_mm512_maskz_loadu_ps(m0, yr), a0));
            _mm512_mask_storeu_ps(yr + 16, m1, _mm512_add_ps(_mm512_maskz_loadu_ps(m1, yr + 16), a1));
        }
    }
}

/* W lines of a coming step (its rows' bytes of its K chunk: the step after next, whose pack runs
 * during the next step's tiles) requested into L2 a slice at a time while this step's tiles run: the packs read W from DRAM, and without this a prefill of 16-128 rows
 * streamed W and computed by turns. Spread over the step's tile steps, since a burst of the ~550
 * requests at the step's start (or L1 as the target) measured no gain; spread, a 16-token prompt
 * ran 0.98-1.10x as fast on Llama-3.2-1B Q8_0, 1.36-1.44x on its Q4_0 and 1.21-1.38x on
 * Qwen3-0.6B Q4_0 (session 34, tessera bench, alternating). With x whole (the steps of a row
 * block are its chunks), leaving the requests to the hardware's prefetch was 2-10% slower on
 * Llama-3.2-1B Q8_0 and 11-21% on Q4_0 at 12-32 tokens (session 35). */
typedef struct amx_pf {
    const char *line; /* the next line to request */
    size_t rb, left;  /* bytes between rows; lines left in the current row */
    size_t lines, total, done, want, per, rem, extra; /* lines a row, in all, requested, due */
    int steps, points; /* slices in all; per tile step (amx_pf_points) */
} amx_pf;

/* Slices of the requests per tile step, by its whole lines (total / tile steps, rounded down):
 * 4 from 9 lines, 2 at 6-8, else one. One slice per tile step issued a 16-row step's 17 lines
 * (8192 x 2048 Q8_0) in one burst, and the packs still waited on DRAM (probably: each request
 * holds one of the core's few L1 miss buffers until its line arrives, so the pack's own loads
 * queued behind a burst; the tiles and the pack took about the sum of their times alone). One
 * thread from DRAM, 16 rows, 2.76-3.09 -> 2.55-2.95 ms in four slices (W in L2: 2.0), 2048 x
 * 8192 2.55-2.82 -> 2.36-2.66, Q4_0 (9 lines) 2.21-2.31 -> 2.05-2.13 (two slices: 2.16-2.18); 12
 * rows alike; 32 rows (Q8_0: 8 lines) 4.07-4.43 -> 3.93-4.00 in two slices (four: 3.81-4.11);
 * Q4_0 at 32 rows (4 lines) and Q8_0 at 64 (4) no faster, up to 4% slower, in two. Whole
 * model, Llama-3.2-1B Q8_0 over llama.cpp, both ways in the same rounds (tools/sbs_prefill.py,
 * 3 rounds): 12 / 16 / 24 / 32 tokens 1.10 / 0.87 / 1.12 / 1.03 -> 1.14 / 0.96 / 1.23 / 1.09
 * (session 37). */
static inline int amx_pf_points(size_t total, int tile_steps) {
    size_t per = total / (size_t)tile_steps;
    return per > 8 ? 4 : per > 5 ? 2 : 1;
}

/* nrows runs of `lines` lines from `line`, rb bytes apart, over tile_steps tile steps */
static void amx_pf_init(amx_pf *p, const void *line, size_t rb, size_t lines, int nrows, int tile_steps) {
    p->rb = rb, p->lines = lines, p->left = p->lines, p->line = line;
    p->total = nrows > 0 ? (size_t)nrows * p->lines : 0, p->done = p->want = 0;
    p->points = amx_pf_points(p->total, tile_steps);
    /* due after slice i: floor(total * i / steps), kept by a quotient and a running remainder */
    const int steps = tile_steps * p->points;
    p->steps = steps, p->per = p->total / (size_t)steps, p->extra = p->total % (size_t)steps, p->rem = 0;
}
static void amx_pf_begin(amx_pf *p, const uint8_t *W, ts_dtype dt, int K, int r0, int nrows, int k0, int kc,
                         int tile_steps) {
    size_t rb = ts_gemm_row_bytes(dt, K), bb = rb / (size_t)(K / TS_QBLOCK);
    amx_pf_init(p, W + (size_t)r0 * rb + (size_t)(k0 / TS_QBLOCK) * bb, rb, ((size_t)(kc / TS_QBLOCK) * bb + 63) / 64,
                nrows, tile_steps);
}

/* No division per request or per step: computing each line's row and column by a division
 * took about a quarter of a 16-row step with W in L2 (512 x 2048 Q8_0: 0.135 ms, 0.114 without
 * the requests; session 36). */
static inline void amx_pf_slice(amx_pf *p) {
    p->want += p->per;
    if ((p->rem += p->extra) >= (size_t)p->steps) p->rem -= (size_t)p->steps, p->want++;
    for (; p->done < p->want; p->done++) {
        _mm_prefetch(p->line, _MM_HINT_T1);
        p->line += 64;
        if (--p->left == 0) p->line = p->line - 64 * p->lines + p->rb, p->left = p->lines; /* the next row */
    }
}

/* The prepared x: h and l rows lda bytes apart, d_x rows dnb apart; positions from k0 */
typedef struct amx_x {
    uint8_t *h, *l;
    float *d;
    size_t lda;
    int dnb, k0;
} amx_x;

/* A step's W tiles: block i of the step's K chunk has rows 0-15 at b0 + i * bs, rows 16-31 at
 * b1 + i * bs (64 bytes a tile row); its 32 scales at dw + 32 i. */
typedef struct amx_w {
    const uint8_t *b0, *b1;
    size_t bs;
    const float *dw;
} amx_w;

/* One step: W rows [n, n + 32) over K chunk [k0, k0 + kc), tiles in w, against all S x rows,
 * into y's columns n + c for the bits c of cols; per tile step pf->points slices of pf (W lines
 * two steps on) and one of nx (the next step's pack). *rows: the x rows the tiles are configured
 * for (0: none yet). */
static void amx_step(float *y, int ldy, const amx_x *x, amx_w w, int32_t *C, int S, int n, uint32_t cols, int k0,
                     int kc, amx_pf *pf, amx_pack *nx, int *rows) {
    const size_t xo = (size_t)(k0 - x->k0);
    /* the short last row tile first when the tiles are configured for it (from the step before),
     * so a step with S % 16 rows left over reconfigures once, not twice (the order of the row
     * tiles changes no output): Llama-3.2-1B Q8_0 20 tokens 111-118 -> 108.5 ms, 40 tokens 2%
     * (session 35) */
    const int nm = (S + 15) / 16, rot = *rows != 16 && S % 16 ? nm - 1 : 0;
    for (int mi = 0; mi < nm; mi++) {
        int m0 = 16 * ((mi + rot) % nm);
        int ms = S - m0 < 16 ? S - m0 : 16;
        if (ms != *rows) amx_configure(ms), *rows = ms;
        const uint8_t *xh = x->h + (size_t)m0 * x->lda + xo, *xl = x->l + (size_t)m0 * x->lda + xo;
        for (int kb = 0; kb < kc; kb += AMX_KB) {
            int nblk = (kc - kb < AMX_KB ? kc - kb : AMX_KB) / TS_QBLOCK, b0 = kb / TS_QBLOCK;
            for (int b = 0; b < nblk; b++) {
                int32_t *c = C + (size_t)b * 4 * 256;
                amx_pf_slice(pf);
                _tile_loadd(4, xh + (size_t)kb + (size_t)b * TS_QBLOCK, x->lda);
                _tile_loadd(5, xl + (size_t)kb + (size_t)b * TS_QBLOCK, x->lda);
                _tile_loadd(6, w.b0 + (size_t)(b0 + b) * w.bs, 64);
                _tile_loadd(7, w.b1 + (size_t)(b0 + b) * w.bs, 64);
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                if (pf->points == 4) amx_pf_slice(pf);
                _tile_dpbssd(0, 4, 6);
                _tile_dpbusd(1, 5, 6);
                _tile_dpbssd(2, 4, 7);
                _tile_dpbusd(3, 5, 7);
                if (pf->points >= 2) amx_pf_slice(pf);
                _tile_stored(0, c, 64);
                _tile_stored(1, c + 256, 64);
                _tile_stored(2, c + 512, 64);
                _tile_stored(3, c + 768, 64);
                amx_pack_slice(nx);
                if (pf->points == 4) amx_pf_slice(pf);
            }
            scale_rows(y + (size_t)m0 * ldy + n, ldy, C, nblk, w.dw + (size_t)b0 * 32,
                       x->d + (size_t)m0 * x->dnb + (size_t)(xo / TS_QBLOCK) + b0, x->dnb, ms, cols, k0 + kb == 0);
        }
    }
}

/* x of all K at once where S * K is at most this (its h, l and d_x: 2.1 bytes a position and row,
 * 1.1 MiB here, in L2): then the steps run W row block after row block, each block's chunks in
 * K order, so W is read as one forward stream; else chunk after chunk, each over all row blocks
 * (x prepared a chunk at a time), which reads every W row in K / AMX_KC separate pieces. Each
 * output's K blocks come in the same order either way (the same bits). Llama-3.2-1B Q8_0, 2
 * threads: a 12-token prompt took 117-119 ms by chunks and 97-98 whole, 16 tokens 127-129 and
 * 106-107, 32 157-161 and 144-148; Qwen3-0.6B Q8_0 1-5% faster, the Q4_0 files the same
 * (session 35). */
#define AMX_WHOLE_X (1 << 19)

/* Step i of a call (W rows [n, n + nv) over K chunk [k0, k0 + kc)) in its order; nv = 0 past
 * the last. */
typedef struct amx_at {
    int n, nv, k0, kc;
} amx_at;
static amx_at amx_step_at(int i, int whole, int n0, int n1, int K) {
    int nblocks = (n1 - n0 + 31) / 32, nchunks = (K + AMX_KC - 1) / AMX_KC;
    amx_at a = {n0, 0, 0, 0};
    if (i >= nblocks * nchunks) return a;
    int bi = whole ? i / nchunks : i % nblocks, ci = whole ? i % nchunks : i / nblocks;
    a.n = n0 + 32 * bi, a.nv = n1 - a.n < 32 ? n1 - a.n : 32;
    a.k0 = ci * AMX_KC, a.kc = K - a.k0 < AMX_KC ? K - a.k0 : AMX_KC;
    return a;
}

void ts_cpu_gemm_q_amx(float *y, int ldy, const float *xp, int ldx, const void *Wv, ts_dtype dt, int K, int S, int n0,
                       int n1) {
    if (n0 >= n1 || S < 1) return;
    const int whole = (long)S * K <= AMX_WHOLE_X;
    amx_x x = {.lda = whole ? (size_t)K + 64 : AMX_LDA, .dnb = whole ? K / TS_QBLOCK : AMX_NB};
    /* h and l of every x row, then their scales (aligned_alloc wants a multiple of 64 bytes) */
    size_t xbytes = ((size_t)S * (2 * x.lda + sizeof(float) * (size_t)x.dnb) + 63) & ~(size_t)63;
    x.h = ts_cpu_amx_usable() ? aligned_alloc(64, xbytes) : NULL;
    if (!x.h) {
        ts_cpu_gemm_q_prefill_avx512(TS_Q_PREFILL_I16, y, ldy, xp, ldx, Wv, dt, K, S, n0, n1);
        return;
    }
    x.l = x.h + (size_t)S * x.lda;
    x.d = (float *)(x.l + (size_t)S * x.lda);
    /* two packs: the step's, and the next one's, packed a slice per tile step, so that the packing
     * (AVX-512) and the tiles (AMX) overlap, and W requested two steps ahead for it. Packing each
     * step whole before its tiles instead: Llama-3.2-1B Q4_0 2-4% slower at 12-32 tokens, Q8_0
     * the same (session 35). */
    uint8_t B[2][AMX_NB * AMX_WBLK] __attribute__((aligned(64)));
    float dw[2][AMX_NB * 32] __attribute__((aligned(64)));
    int32_t C[AMX_KB / TS_QBLOCK * 4 * 256] __attribute__((aligned(64)));
    const uint8_t *W = Wv;
    const int tiles = (S + 15) / 16; /* tile steps per block */
    if (whole)
        for (int k0 = 0; k0 < K; k0 += AMX_KC) {
            int kc = K - k0 < AMX_KC ? K - k0 : AMX_KC;
            prepare_x(x.h + k0, x.l + k0, x.d + k0 / TS_QBLOCK, x.lda, x.dnb, xp, ldx, S, k0, kc);
        }
    amx_at cur = amx_step_at(0, whole, n0, n1, K);
    amx_pack pk = amx_pack_of(B[0], dw[0], W, dt, K, cur.n, cur.nv, cur.k0 / TS_QBLOCK, cur.kc / TS_QBLOCK);
    amx_pack_rest(&pk);
    int rows = 0;
    for (int i = 0; cur.nv; i++) {
        if (!whole && (i == 0 || cur.n == n0)) { /* a chunk's first step */
            prepare_x(x.h, x.l, x.d, x.lda, x.dnb, xp, ldx, S, cur.k0, cur.kc);
            x.k0 = cur.k0;
        }
        amx_at nx = amx_step_at(i + 1, whole, n0, n1, K), pa = amx_step_at(i + 2, whole, n0, n1, K);
        int steps = tiles * (cur.kc / TS_QBLOCK);
        amx_pf pf;
        amx_pf_begin(&pf, W, dt, K, pa.n, pa.nv, pa.k0, pa.kc, steps);
        amx_pack np = amx_pack_of(B[(i + 1) & 1], dw[(i + 1) & 1], W, dt, K, nx.n, nx.nv, nx.k0 / TS_QBLOCK, nx.kc / TS_QBLOCK);
        np.steps = steps;
        amx_w w = {B[i & 1], B[i & 1] + AMX_WBLK / 2, AMX_WBLK, dw[i & 1]};
        uint32_t cols = cur.nv >= 32 ? 0xffffffffu : (1u << cur.nv) - 1;
        amx_step(y, ldy, &x, w, C, S, cur.n, cols, cur.k0, cur.kc, &pf, &np, &rows);
        amx_pack_rest(&np);
        cur = nx;
    }
    _tile_release(); /* the tile state back to its init state: smaller context switches */
    free(x.h);
}

/* ---- Tile-order Q8_0 and Q4_0 (gemm.h, TS_DTYPE_Q8_0T16 / _Q4_0T16): the tiles load W from
 * the matrix ----
 * The same steps and arithmetic as above (so I16's bits): a step is the two 16-row groups of a
 * 32-row block over one K chunk, its B tiles the groups' blocks as they lie (Q8_0: no pack;
 * Q4_0: the nibbles split into int8 tiles, t16_q4_tiles, the next step's a slice per tile step
 * of this one), and the scales of the chunk converted to FP32 before it. One 8192 x 2048 matrix, one thread, W from
 * DRAM (a scratch copy, session 38): 16 rows 2.85 -> 2.25 ms against the lane order's packs, 8
 * rows 2.42 -> 1.89, 4 rows 2.27 -> 1.73, 32 rows 4.13 -> 3.42; 2048 x 8192 at 16 rows 2.69 -> 2.40.
 * x goes whole where S * K <= AMX_WHOLE_X, else in passes of AMX_WHOLE_X / K rows (rounded down
 * to 16, at least 16), each over all of W. */
static void t16_scales(float *dw, const uint8_t *g0, const uint8_t *g1, int nblk, size_t gb) {
    for (int b = 0; b < nblk; b++) {
        const size_t o = (size_t)b * gb;
        _mm512_store_ps(dw + 32 * b, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g0 + o))));
        _mm512_store_ps(dw + 32 * b + 16, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g1 + o))));
    }
}

/* Step i of a tile-order call: row block i / nchunks (groups g = glo + 2 (i / nchunks) and, where
 * g + 1 < ghi, the next), K chunk i % nchunks ([k0, k0 + kc)); its first group's bytes of the
 * chunk at p */
typedef struct t16_at {
    int64_t g;
    int k0, kc, groups;
    const uint8_t *p;
} t16_at;
static t16_at t16_step_at(const uint8_t *W, size_t gbytes, size_t gb, int64_t glo, int64_t ghi, int nchunks, int K,
                          int64_t i) {
    t16_at a = {glo + 2 * (i / nchunks), (int)(i % nchunks) * AMX_KC, 0, 0, NULL};
    a.kc = K - a.k0 < AMX_KC ? K - a.k0 : AMX_KC;
    a.groups = a.g + 1 < ghi ? 2 : 1;
    a.p = W + (size_t)a.g * gbytes + (size_t)(a.k0 / TS_QBLOCK) * gb;
    return a;
}

int ts_cpu_gemm_q_amx_t16(float *y, int ldy, const float *xp, int ldx, const void *Wv, ts_dtype t16, int K, int S,
                          int n0, int n1) {
    if (n0 >= n1 || S < 1) return 1;
    if (!ts_cpu_amx_usable()) return 0;
    const uint8_t *W = Wv;
    const int q4 = t16 == TS_DTYPE_Q4_0T16;
    const size_t gbytes = 16 * ts_gemm_row_bytes(t16, K), gb = ts_t16_group_block(t16);
    const int nb = K / TS_QBLOCK, nchunks = (K + AMX_KC - 1) / AMX_KC;
    const int SP = (long)S * K <= AMX_WHOLE_X ? S : (AMX_WHOLE_X / K) / 16 * 16 > 16 ? (AMX_WHOLE_X / K) / 16 * 16 : 16;
    amx_x x = {.lda = (size_t)K + 64, .dnb = nb};
    size_t xbytes = ((size_t)SP * (2 * x.lda + sizeof(float) * (size_t)x.dnb) + 63) & ~(size_t)63;
    x.h = aligned_alloc(64, xbytes);
    if (!x.h) return 0;
    x.l = x.h + (size_t)SP * x.lda;
    x.d = (float *)(x.l + (size_t)SP * x.lda);
    float dw[AMX_NB * 32] __attribute__((aligned(64)));
    int32_t C[AMX_KB / TS_QBLOCK * 4 * 256] __attribute__((aligned(64)));
    /* Q4_0: a step's two groups' tiles, and the next step's, split while this one's tiles run */
    uint8_t B4[2][2 * AMX_NB * 512] __attribute__((aligned(64)));
    const int64_t glo = n0 / 16, ghi = (n1 + 15) / 16, nblocks = (ghi - glo + 1) / 2;
    amx_pack none = {0};
    int rows = 0;
    for (int s0 = 0; s0 < S; s0 += SP) {
        const int ss = S - s0 < SP ? S - s0 : SP, tiles = (ss + 15) / 16;
        const float *xs = xp + (size_t)s0 * ldx;
        float *ys = y + (size_t)s0 * ldy;
        for (int k0 = 0; k0 < K; k0 += AMX_KC)
            prepare_x(x.h + k0, x.l + k0, x.d + k0 / TS_QBLOCK, x.lda, x.dnb, xs, ldx, ss, k0,
                      K - k0 < AMX_KC ? K - k0 : AMX_KC);
        /* the steps in t16_step_at's order; Q4_0: step 0's split first, each next one's a slice per
         * tile step of the one before */
        const int64_t nsteps = nblocks * nchunks;
        amx_pack next = none;
        if (q4) {
            t16_at a = t16_step_at(W, gbytes, gb, glo, ghi, nchunks, K, 0);
            next = amx_pack_t16_q4(B4[0], a.p, gbytes, a.groups, a.kc / TS_QBLOCK);
            amx_pack_rest(&next);
        }
        for (int64_t i = 0; i < nsteps; i++) {
            const t16_at a = t16_step_at(W, gbytes, gb, glo, ghi, nchunks, K, i);
            const int64_t g = a.g;
            const int k0 = a.k0, kc = a.kc, nblk = kc / TS_QBLOCK;
            const uint8_t *g0 = a.p;
            const uint8_t *g1 = a.groups == 2 ? g0 + gbytes : g0; /* a lone last group: its tiles twice, half kept */
            const int64_t base = 16 * g;
            const int lo = (int)((n0 > base ? n0 : base) - base), hi = (int)((n1 < base + 32 ? n1 : base + 32) - base);
            const uint32_t cols = (hi >= 32 ? 0xffffffffu : (1u << hi) - 1) & ~((1u << lo) - 1);
            /* the lines of step i + 2: its groups' bytes of its chunk, one run per group */
            amx_pf pf;
            const t16_at pa = i + 2 < nsteps ? t16_step_at(W, gbytes, gb, glo, ghi, nchunks, K, i + 2)
                                             : (t16_at){0, 0, 0, 0, W}; /* none */
            amx_pf_init(&pf, pa.p, gbytes, ((size_t)(pa.kc / TS_QBLOCK) * gb + 63) / 64, pa.groups, tiles * nblk);
            t16_scales(dw, g0, g1, nblk, gb);
            /* Q8_0's tiles as they lie; Q4_0's split from the nibbles, 512 bytes a block */
            const uint8_t *B = B4[i & 1];
            amx_w w = q4 ? (amx_w){B, g1 != g0 ? B + (size_t)nblk * 512 : B, 512, dw}
                         : (amx_w){g0 + 32, g1 + 32, TS_T16_GROUP_BLOCK, dw};
            next = none;
            if (q4 && i + 1 < nsteps) {
                t16_at na = t16_step_at(W, gbytes, gb, glo, ghi, nchunks, K, i + 1);
                next = amx_pack_t16_q4(B4[(i + 1) & 1], na.p, gbytes, na.groups, na.kc / TS_QBLOCK);
                next.steps = tiles * nblk;
            }
            amx_step(ys, ldy, &x, w, C, ss, (int)base, cols, k0, kc, &pf, &next, &rows); /* x.k0 = 0: x is whole */
            amx_pack_rest(&next);
        }
    }
    _tile_release();
    free(x.h);
    return 1;
}
