/* AVX-512 VNNI kernels on Q8_0 / Q4_0 weights in place (gemm.h). Decode: 16 blocks at a time,
 * the codes as bytes straight into vpdpbusd against the 16-bit x split into bytes, the 16 exact
 * block sums reduced into one vector and scaled by one FMA (the "Decode" section below); the
 * first form, one vpdpwssd per block on codes widened to int16 and a scalar scale per block, is
 * left for the last nb % 16 blocks of a row. Prefill: the few-row kernel on the lane orders here;
 * the I16 / I8 panels in gemm_q_panels_avx512.c, the tile order's kernels in
 * gemm_q_t16_avx512.c, AMX in gemm_q_amx.c; this file's entry points choose among them and the
 * other kernels gemm.h lists. Compiled with -mavx512vnni besides the avx512bf16 flags
 * (CMakeLists.txt); used only when CPUID has it. */
#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "target/cpu/cpu_features.h"
#include "target/cpu/gemm.h"
#include "target/cpu/gemm_panels_avx512.h"
#include "target/cpu/gemm_q_avx512.h"
#include "target/cpu/gemm_q_blocks_avx512.h"
#include "target/cpu/prefetch.h"
#include "target/cpu/transpose_avx512.h"

/* Bytes ahead in the weight stream (into L1, into L2): chosen per process among prefetch.c's
 * candidates (Q8_0 and lane-order Q4_0 since session 28 from farther ones, measured on Zen 5:
 * prefetch.c). The first candidates were tuned on the Intel Xeon with AMX (2 threads, alternating rounds):
 * Q8_0 2048 into L1 (1024 was 6-10% slower, 512 12% slower still, 3072-4096 no faster); the L2
 * prefetch 4096 ahead took Qwen3-0.6B Q4_0 from 67-68 tok/s to 72-75 (3072: 70-71, 6144: 72-73;
 * the same into L1 only had been slower, NTA halved it), Q8_0 44.8-46.4 from 42.5-43.4,
 * Llama-3.2-1B Q8_0 22.8-23.3 from 21.6-22.0 (8192: no gain). Q4_0's lane-per-block kernel wants
 * the L1 prefetch nearer: 512 ahead decoded Llama-3.2-1B Q4_0 at 43.3-44.1 tok/s where 2048 gave
 * 40.7-41.3; 256, 512 and 768 alike (43.0-44.3); Qwen3-0.6B 79.7-82.4 at 768 vs 77.9-78.6 at 2048. */

/* The same bits as ts_cpu_quantize_x_scalar: max |x| per 32-block, d and 1/d by the same IEEE
 * divisions, x * (1/d) rounded to nearest even. */
void ts_cpu_quantize_x_avx512(ts_gemm_qx qx, const float *xp, int K) {
    const __m512i perm = _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
    for (int b = 0; b < K; b += TS_QBLOCK) {
        __m512 v0 = _mm512_permutexvar_ps(perm, _mm512_loadu_ps(xp + b));
        __m512 v1 = _mm512_permutexvar_ps(perm, _mm512_loadu_ps(xp + b + 16));
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        float d = amax / 32767.0f, id = amax > 0 ? 32767.0f / amax : 0.0f;
        qx.d[b / TS_QBLOCK] = d;
        __m512 vid = _mm512_set1_ps(id);
        _mm256_storeu_si256((__m256i *)(qx.q + b), _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(v0, vid))));
        _mm256_storeu_si256((__m256i *)(qx.q + b + 16),
                            _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(v1, vid))));
    }
}

/* ---- Decode, 16 blocks at a time: the codes as bytes straight into vpdpbusd. The 16-bit x is
 * split into bytes, q = 256 * hi + lo (hi signed, lo unsigned). vpdpbusd multiplies an unsigned
 * by a signed byte, so:
 * - Q4_0, c the codes 0..15 (weight c - 8): sum((c - 8) q) = 256 sum(c hi) + sum(lo c) - 8 sum(q),
 *   c unsigned against hi, lo unsigned against c (0..15 is a valid signed byte);
 * - Q8_0, c the signed codes: sum(c q) = 256 sum((c + 128) hi) + sum(lo c) - 32768 sum(hi),
 *   c + 128 (c ^ 0x80) unsigned against hi, lo unsigned against c.
 * The last term is precomputed per block from x. Every step is exact int32 (|256 sum((c + 128)
 * hi)| <= 256 * 32 * 255 * 128 < 2^28), so each block's dot is exactly the one vpdpwssd forms on
 * the int16 codes; then per 16 blocks one conversion and one FMA by the 16 scales d_w * d_x in
 * lane order, so results differ from a per-block vpdpwssd form only in FP32 rounding (rel 1.4e-7
 * measured for Q4_0). A row's bits do not depend on which rows a call computes (column splits
 * stay bit-identical), nor on how many x rows a batched decode runs beside it.
 * Q4_0 (the form since session 22; the pair form before it decoded 21 GB/s from L2 on one Intel
 * Xeon core, this one 29-30): each dword lane of the 8 code vectors of a group is one block
 * (vector j, lane i = block i's codes at positions 4j..4j+3: the low nibbles of its code dword j
 * for j < 4, the high nibbles of dword j - 4 for j >= 4), so the 16 vpdpbusd run as 4 chains
 * straight into the 16 block sums, no lane reduction. The codes get there by one vpermt2d per
 * 4 blocks (the 72 bytes read as two overlapping 64-byte loads, at bytes 2 and 8, where every
 * block's 16 code bytes are dword-aligned) and a 4 x 4 transpose of 128-bit lanes; the scales
 * by one gather; x is laid out the same way once per call (q4_x_group). The lane-order kernels
 * (rows_dot_x16 and the batched ones) since session 33: the high nibbles by one GFNI affine map
 * where the core has it (ts_q4_high_nibbles), and per row one chain for the high bytes and one for
 * the low, the low one starting from the correction term (stored negated, ncorr), so a row's
 * group ends in a shift, an add, the conversion and the FMA. On the Intel Xeon with AMX that took
 * Qwen3-0.6B Q4_0 from 77-81 to 83-86 tok/s and Llama-3.2-1B from 39-40 to 40-42 (the chains
 * alone: 78-82 and 40-42; docs/performance.md, session 33); session 22 had found GFNI alone
 * within the noise on the four-chain form.
 * Q8_0: x per pair of blocks (b, b + 1) is 64 bytes of hi (and of lo) in natural order [b 0..31,
 * b+1 0..31] (two 32-byte code loads), the 16 block sums reduced by an add/unpack tree. Q8_0
 * had been one vpdpwssd per block on sign-extended codes plus a scalar scale per block: about
 * twice the instructions per byte. */
#define QG TS_Q_GROUP /* blocks per group */
typedef struct qgx {
    const uint8_t *hi, *lo; /* K bytes each, laid out as above, whole groups only */
    const int32_t *ncorr;   /* minus the correction term per block, in the group's lane order: the
                             * low-byte sums start from it */
    const float *d;         /* d_x per block, in the group's lane order */
} qgx;

/* Lane i of a group's block sums holds block i (Q4_0), block 4 * (i % 4) + i / 4 (Q8_0, the
 * unpack tree below). */
static inline int qg_lane_block(int i) { return 4 * (i % 4) + i / 4; }

/* Q4_0's x of a group, hi (or lo) bytes of its 16 blocks in natural order in nat (32 per
 * block), to 8 vectors: dword i of vector j holds block i's positions 4j..4j+3, the x of code
 * dword j % 4 of that block, low nibbles (j < 4) or high (j >= 4). */
static const int32_t q4_x_off[16] __attribute__((aligned(64))) = {0,   32,  64,  96,  128, 160, 192, 224,
                                                                 256, 288, 320, 352, 384, 416, 448, 480};
/* Q8_0 in lane order (gemm.h): lane i holds block 4 (i % 4) + i / 4, the stored Q8_0 kernel's
 * lanes, so both give the same bits */
static const int32_t q8x16_x_off[16] __attribute__((aligned(64))) = {0,  128, 256, 384, 32,  160, 288, 416,
                                                                    64, 192, 320, 448, 96,  224, 352, 480};
static inline void q4_x_group(uint8_t *dst, const uint8_t *nat, const int32_t *offs) {
    const __m512i off = _mm512_load_si512(offs);
    for (int j = 0; j < 8; j++) _mm512_storeu_si512(dst + 64 * j, _mm512_i32gather_epi32(off, nat + 4 * j, 1));
}

/* dt: Q4_0 (either form), Q8_0 (stored) or TS_DTYPE_Q8_0X16: the last lays x out as Q4_0's
 * (one block per dword lane) in its own lanes, with Q8_0's correction terms */
static void qg_prepare(qgx *o, uint8_t *hi, uint8_t *lo, int32_t *ncorr, float *d, ts_gemm_qx qx, int ng, ts_dtype dt) {
    const __m512i ones = _mm512_set1_epi16(1);
    const int lanes = dt != TS_DTYPE_Q8_0, q8 = dt != TS_DTYPE_Q4_0;
    const int32_t *offs = q8 ? q8x16_x_off : q4_x_off;
    uint8_t nh[QG * TS_QBLOCK] __attribute__((aligned(64))), nl[QG * TS_QBLOCK] __attribute__((aligned(64)));
    for (int g = 0; g < ng; g++) {
        for (int pr = 0; pr < QG / 2; pr++) {
            size_t b = (size_t)g * QG + 2 * pr;
            __m512i x0 = _mm512_loadu_si512(qx.q + b * TS_QBLOCK), x1 = _mm512_loadu_si512(qx.q + (b + 1) * TS_QBLOCK);
            __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_srai_epi16(x0, 8))),
                                           _mm512_cvtepi16_epi8(_mm512_srai_epi16(x1, 8)), 1);
            __m512i l = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(x0)), _mm512_cvtepi16_epi8(x1), 1);
            if (lanes) { /* natural order for the group, then its vectors */
                _mm512_store_si512(nh + 64 * pr, h);
                _mm512_store_si512(nl + 64 * pr, l);
                continue;
            }
            _mm512_storeu_si512(hi + b * TS_QBLOCK, h);
            _mm512_storeu_si512(lo + b * TS_QBLOCK, l);
        }
        if (lanes) {
            q4_x_group(hi + (size_t)g * QG * TS_QBLOCK, nh, offs);
            q4_x_group(lo + (size_t)g * QG * TS_QBLOCK, nl, offs);
        }
        for (int i = 0; i < QG; i++) {
            size_t b = (size_t)g * QG + (q8 ? qg_lane_block(i) : i);
            __m512i x = _mm512_loadu_si512(qx.q + b * TS_QBLOCK);
            ncorr[g * QG + i] = q8 ? -32768 * _mm512_reduce_add_epi32(_mm512_madd_epi16(_mm512_srai_epi16(x, 8), ones))
                                  : -8 * _mm512_reduce_add_epi32(_mm512_madd_epi16(x, ones));
            d[g * QG + i] = qx.d[b];
        }
    }
    o->hi = hi, o->lo = lo, o->ncorr = ncorr, o->d = d;
}

/* vpermt2d indices of a unit's codes (blocks k = 0..3 at bytes 18k of the unit; block k's codes
 * at 18k + 2) from the 64 bytes at unit byte 2 (A: blocks 0 and 2 at dwords 0 and 9) and the 64
 * at byte 8 (B: blocks 1 and 3 at dwords 3 and 12, indices 16 on): dword i = 4m + k is block
 * k's code dword m. Both loads stay inside the unit. */
static const int32_t q4_code_idx[16] __attribute__((aligned(64))) = {0, 19, 9, 28, 1, 20, 10, 29,
                                                                    2, 21, 11, 30, 3, 22, 12, 31};
/* Byte offsets of the 16 Q4_0 blocks of a group (a gather of their scales, in block order).
 * The gather stays although it costs about a quarter of the kernel on a matrix in L2 (Zen 5, one
 * core: 34.5 GB/s, 47-48 with the scales not read): the same scales taken from the code loads by
 * vpermt2w plus four 2-byte loads read 41.6-41.9 GB/s from L2 but 3-7% fewer bytes per cycle in
 * the 2-thread decode from DRAM, measured in one process (docs/performance.md, session 25). */
static const int32_t q4_scale_off[16] __attribute__((aligned(64))) = {0,   18,  36,  54,  72,  90,  108, 126,
                                                                     144, 162, 180, 198, 216, 234, 252, 270};
/* Byte offsets of the 16 Q8_0 blocks of a group in lane order (a gather of their scales). */
static const int32_t q8_scale_off[16] __attribute__((aligned(64))) = {0,   136, 272, 408, 34,  170, 306, 442,
                                                                     68,  204, 340, 476, 102, 238, 374, 510};

/* A row's dot in two parts: per W group of 16 blocks its codes in 8 vectors (laid out as x
 * above) and the 16 scales in lane order; per x row the 16 exact block dots (16 vpdpbusd; Q8_0
 * then the add/unpack tree), corrected, scaled and accumulated. A batched decode runs the first
 * once per group for all its x rows. */
typedef struct qgw {
    __m512i c[8]; /* the group's codes (Q4_0 0..15, Q8_0 signed; Q8_0 one pair of blocks each) */
    __m512 dw;    /* the 16 F16 scales d_w in lane order */
} qgw;

static inline __attribute__((always_inline)) void qg_group_w(qgw *o, const uint8_t *p, ts_dtype dt, ts_pf pf) {
    if (dt == TS_DTYPE_Q8_0X16) { /* in lane order (gemm.h): 8 loads, no gather */
        ts_pf_lines(p, pf, 9); /* the group's 544 bytes */
        o->dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        for (int j = 0; j < 8; j++) o->c[j] = _mm512_loadu_si512(p + 32 + 64 * j);
        return;
    }
    if (dt == TS_DTYPE_Q8_0) {
        const size_t bb = 2 + TS_QBLOCK;
        ts_pf_lines(p, pf, 9); /* the group's 544 bytes */
        for (int j = 0; j < 8; j++) {
            const uint8_t *p0 = p + 2 * (size_t)j * bb;
            o->c[j] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p0 + 2))),
                                         _mm256_loadu_si256((const __m256i *)(p0 + bb + 2)), 1);
        }
        /* 4 bytes at each block's start, the low 2 its F16 scale */
        __m512i sc = _mm512_i32gather_epi32(_mm512_load_si512(q8_scale_off), p, 1);
        o->dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(sc));
        return;
    }
    const __m512i idx = _mm512_load_si512(q4_code_idx), m4 = _mm512_set1_epi8(15);
    ts_pf_lines(p, pf, 5); /* the group's 288 bytes */
    if (dt == TS_DTYPE_Q4_0X16) { /* already in lane order (gemm.h): 4 loads, no gather */
        o->dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        for (int m = 0; m < 4; m++) {
            __m512i q = _mm512_loadu_si512(p + 32 + 64 * m);
            o->c[m] = _mm512_and_si512(q, m4);
            o->c[4 + m] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        }
        return;
    }
    __m512i pu[4];
    for (int u = 0; u < 4; u++)
        pu[u] = _mm512_permutex2var_epi32(_mm512_loadu_si512(p + 72 * u + 2), idx, _mm512_loadu_si512(p + 72 * u + 8));
    /* 4 x 4 transpose of 128-bit lanes: lane u of q[m] = lane m of pu[u], so dword i of q[m] is
     * block i's code dword m */
    __m512i t0 = _mm512_shuffle_i32x4(pu[0], pu[1], _MM_SHUFFLE(1, 0, 1, 0));
    __m512i t1 = _mm512_shuffle_i32x4(pu[0], pu[1], _MM_SHUFFLE(3, 2, 3, 2));
    __m512i t2 = _mm512_shuffle_i32x4(pu[2], pu[3], _MM_SHUFFLE(1, 0, 1, 0));
    __m512i t3 = _mm512_shuffle_i32x4(pu[2], pu[3], _MM_SHUFFLE(3, 2, 3, 2));
    __m512i q[4] = {_mm512_shuffle_i32x4(t0, t2, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_i32x4(t0, t2, _MM_SHUFFLE(3, 1, 3, 1)),
                    _mm512_shuffle_i32x4(t1, t3, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_i32x4(t1, t3, _MM_SHUFFLE(3, 1, 3, 1))};
    for (int m = 0; m < 4; m++) {
        o->c[m] = _mm512_and_si512(q[m], m4);
        o->c[4 + m] = _mm512_and_si512(_mm512_srli_epi16(q[m], 4), m4);
    }
    __m512i sc = _mm512_i32gather_epi32(_mm512_load_si512(q4_scale_off), p, 1);
    o->dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(sc));
}

/* acc + the group's 16 block dots with x (blocks b.. of x4), scaled */
static inline __attribute__((always_inline)) __m512 qg_group_x(__m512 acc, const qgw *w, const qgx *x4, int b,
                                                               ts_dtype dt) {
    const uint8_t *xh = x4->hi + (size_t)b * TS_QBLOCK, *xl = x4->lo + (size_t)b * TS_QBLOCK;
    __m512i t;
    if (dt == TS_DTYPE_Q8_0X16) {
        /* every dword lane is one block, as Q4_0 below; the codes + 128 against the high bytes */
        const __m512i flip = _mm512_set1_epi8((char)0x80), z = _mm512_setzero_si512();
        __m512i h0 = z, h1 = z, l0 = z, l1 = z;
        for (int j = 0; j < 4; j++) {
            h0 = _mm512_dpbusd_epi32(h0, _mm512_xor_si512(w->c[j], flip), _mm512_loadu_si512(xh + 64 * j));
            h1 = _mm512_dpbusd_epi32(h1, _mm512_xor_si512(w->c[4 + j], flip), _mm512_loadu_si512(xh + 256 + 64 * j));
            l0 = _mm512_dpbusd_epi32(l0, _mm512_loadu_si512(xl + 64 * j), w->c[j]);
            l1 = _mm512_dpbusd_epi32(l1, _mm512_loadu_si512(xl + 256 + 64 * j), w->c[4 + j]);
        }
        t = _mm512_add_epi32(_mm512_slli_epi32(_mm512_add_epi32(h0, h1), 8), _mm512_add_epi32(l0, l1));
    } else if (dt != TS_DTYPE_Q8_0) {
        /* every dword lane is one block: 4 chains of 4 (hi and lo bytes, low and high nibbles) */
        const __m512i z = _mm512_setzero_si512();
        __m512i h0 = z, h1 = z, l0 = z, l1 = z;
        for (int j = 0; j < 4; j++) {
            h0 = _mm512_dpbusd_epi32(h0, w->c[j], _mm512_loadu_si512(xh + 64 * j));
            h1 = _mm512_dpbusd_epi32(h1, w->c[4 + j], _mm512_loadu_si512(xh + 256 + 64 * j));
            l0 = _mm512_dpbusd_epi32(l0, _mm512_loadu_si512(xl + 64 * j), w->c[j]);
            l1 = _mm512_dpbusd_epi32(l1, _mm512_loadu_si512(xl + 256 + 64 * j), w->c[4 + j]);
        }
        t = _mm512_add_epi32(_mm512_slli_epi32(_mm512_add_epi32(h0, h1), 8), _mm512_add_epi32(l0, l1));
    } else {
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        __m512i v[8];
        for (int j = 0; j < 8; j++) {
            __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_xor_si512(w->c[j], flip),
                                            _mm512_loadu_si512(xh + 64 * j));
            v[j] = _mm512_dpbusd_epi32(_mm512_slli_epi32(s, 8), _mm512_loadu_si512(xl + 64 * j), w->c[j]);
        }
        /* 128-bit lanes: u[i] lane k = block 4i + k (4 partial sums); v's 128-bit lanes hold
         * blocks [b, b, b + 1, b + 1] of its pair */
        __m512i u[4];
        for (int i = 0; i < 4; i++)
            u[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_i32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
        __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(u[0], u[1]), _mm512_unpackhi_epi32(u[0], u[1]));
        __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(u[2], u[3]), _mm512_unpackhi_epi32(u[2], u[3]));
        t = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
    }
    t = _mm512_add_epi32(t, _mm512_loadu_si512(x4->ncorr + b));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(w->dw, _mm512_loadu_ps(x4->d + b)), acc);
}

/* the last nb % 16 blocks, one at a time (vpdpwssd on the codes widened to int16) */
static inline __attribute__((always_inline)) __m512 qg_tail(__m512 acc, const uint8_t *row, ts_gemm_qx qx, int b,
                                                            int nb, ts_dtype dt) {
    dt = ts_x16_stored(dt); /* the tail is stored as in the file */
    const size_t bb = ts_x16_stored(dt) == TS_DTYPE_Q8_0 ? 2 + TS_QBLOCK : 2 + TS_QBLOCK / 2;
    const __m512i z = _mm512_setzero_si512();
    for (; b < nb; b++) {
        const uint8_t *p0 = row + (size_t)b * bb;
        __m512i s0 = _mm512_dpwssd_epi32(z, block_w16(p0, dt), _mm512_loadu_si512(qx.q + (size_t)b * TS_QBLOCK));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_set1_ps(f16(p0) * qx.d[b]), acc);
    }
    return acc;
}

static inline __attribute__((always_inline)) float row_dot_g(const uint8_t *row, ts_gemm_qx qx, const qgx *x4,
                                                              int nb, ts_dtype dt, ts_pf pf) {
    const size_t bb = ts_x16_stored(dt) == TS_DTYPE_Q8_0 ? 2 + TS_QBLOCK : 2 + TS_QBLOCK / 2;
    __m512 acc = _mm512_setzero_ps();
    int ng = nb / QG, b = 0;
    for (int g = 0; g < ng; g++, b += QG) {
        qgw w;
        qg_group_w(&w, row + (size_t)b * bb, dt, pf);
        acc = qg_group_x(acc, &w, x4, b, dt);
    }
    return _mm512_reduce_add_ps(qg_tail(acc, row, qx, b, nb, dt));
}

/* Code vectors j of a lane-form group (p: the group's first code byte, after its 32 bytes of
 * scales), each loaded once: c0 / c1 for the products with the low bytes of x, u0 / u1 for those
 * with the high bytes (Q8_0: the codes + 128, as qg_group_x); flip and m4 are the caller's
 * constants, gf as ts_q4_high_nibbles. A macro: an inline function that also folded the block sums
 * cost the four-row kernel 10-15% (19 -> 21-22 cycles per group with prefetch), this form nothing. */
#define X16_CODES(p, j, q8, gf, c0, c1, u0, u1)                                                            \
    do {                                                                                                    \
        if (q8) {                                                                                           \
            c0 = _mm512_loadu_si512((p) + 64 * (j)), c1 = _mm512_loadu_si512((p) + 256 + 64 * (j));          \
            __asm__("" : "+v"(c0), "+v"(c1)); /* one load each, not one per use */                          \
            u0 = _mm512_xor_si512(c0, flip), u1 = _mm512_xor_si512(c1, flip);                               \
        } else {                                                                                            \
            __m512i q_ = _mm512_loadu_si512((p) + 64 * (j));                                                 \
            __asm__("" : "+v"(q_));                                                                         \
            u0 = c0 = _mm512_and_si512(q_, m4);                                                             \
            u1 = c1 = ts_q4_high_nibbles(q_, m4, gf);                                                          \
        }                                                                                                   \
    } while (0)

/* The lane forms (Q8_0X16, Q4_0X16), R rows against the same x: per 64 bytes of codes one load
 * per row (Q4_0: split into its two code vectors in registers; Q8_0: two loads, one per code
 * vector), and each x vector loaded once for all
 * R rows. qg_group_w holds a group's 8 code vectors, which the compiler left in memory and
 * loaded twice (once per use): on Zen 5 that kernel ran 16.5-17.7 cycles per Q4_0 group from
 * L1/L2, bound by loads, this one 11.4-13.4 for four rows (one core, 4.2 GHz; one row alone is no
 * faster, 15.4-19.2: it takes only a share's last rows, or rows too long for four). Per row the
 * same exact int32 block sums as qg_group_x (wrapping integer adds, so their grouping does not
 * matter) and the same FP32 steps in the same order, so every row has row_dot_g's bits. The
 * prefetch runs over the R consecutive rows' bytes as one linear stream:
 * at group g the lines of R groups from pf bytes past byte g * R * (group bytes) of the block.
 * That front reaches row r's group g in time only while r * (row bytes) <= pf, so the caller
 * takes R rows only while (R - 1) * (row bytes) fits in the farther distance (x16_rows). */
static inline __attribute__((always_inline)) void rows_dot_x16(float *y, const uint8_t *W, size_t rb, int R,
                                                                ts_gemm_qx qx, const qgx *x4, int nb, ts_dtype dt,
                                                                int gf, ts_pf pf) {
    const int q8 = dt == TS_DTYPE_Q8_0X16;
    const size_t bb = q8 ? 2 + TS_QBLOCK : 2 + TS_QBLOCK / 2, gb = QG * bb;
    const __m512i m4 = _mm512_set1_epi8(15), flip = _mm512_set1_epi8((char)0x80), z = _mm512_setzero_si512();
    __m512 acc[4];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    int ng = nb / QG, b = 0;
    for (int g = 0; g < ng; g++, b += QG) {
        const uint8_t *xh = x4->hi + (size_t)b * TS_QBLOCK, *xl = x4->lo + (size_t)b * TS_QBLOCK;
        ts_pf_lines(W + (size_t)g * gb * (size_t)R, pf, (int)((gb * (size_t)R + 63) / 64));
        /* one chain per row for the high bytes and one for the low, the low one starting from the
         * correction: 2 adds and a subtraction fewer per row and group than four chains from zero
         * (R rows keep 2R chains in flight, and the next group's are independent) */
        __m512i ih[4], il[4];
        const __m512i ncorr = _mm512_loadu_si512(x4->ncorr + b);
        for (int r = 0; r < R; r++) ih[r] = z, il[r] = ncorr;
        for (int j = 0; j < 4; j++) {
            __m512i xh0 = _mm512_loadu_si512(xh + 64 * j), xh1 = _mm512_loadu_si512(xh + 256 + 64 * j);
            __m512i xl0 = _mm512_loadu_si512(xl + 64 * j), xl1 = _mm512_loadu_si512(xl + 256 + 64 * j);
            for (int r = 0; r < R; r++) {
                const uint8_t *p = W + (size_t)r * rb + (size_t)b * bb + 32;
                __m512i c0, c1, u0, u1;
                X16_CODES(p, j, q8, gf, c0, c1, u0, u1);
                ih[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(ih[r], u0, xh0), u1, xh1);
                il[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(il[r], xl0, c0), xl1, c1);
            }
        }
        const __m512 dx = _mm512_loadu_ps(x4->d + b);
        for (int r = 0; r < R; r++) {
            __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(W + (size_t)r * rb + (size_t)b * bb)));
            __m512i t = _mm512_add_epi32(_mm512_slli_epi32(ih[r], 8), il[r]);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dw, dx), acc[r]);
        }
    }
    for (int r = 0; r < R; r++) y[r] = _mm512_reduce_add_ps(qg_tail(acc[r], W + (size_t)r * rb, qx, b, nb, dt));
}

/* ---- Prefill of a few rows on the lane forms, with I16's bits and no panel ----
 * A few-row I16 call is mostly packing: every call widens and transposes each W block into its
 * panel, so a 2-4 token prompt on Qwen3-0.6B Q4_0 took as long as 3-3.5 decode steps. I16's
 * arithmetic per (x row, W row) is: per K block of TS_Q16_KB positions (4 blocks; the last may have
 * fewer) acc = 0, then per block in order acc = fma((float)isum, d_w * d_x, acc), where isum is
 * the block's exact int32 dot; then y = acc for the first K block and y + acc for each next one
 * (qint_tile in gemm_q_panels_avx512.c, ts_panel_store). Here the exact block sums come from the
 * decode's vpdpbusd chains on the codes as they lie (row_dot_x16_xs's loop), 16 at once, lane =
 * block; then the same FP32 steps in the same order: a group's 16 blocks are its 4 K blocks (groups and K blocks both
 * start at multiples of 512 and 128 positions), Q8_0's lane 4c + a holds step c of K block a, so
 * one 128-bit FMA per step runs the 4 K blocks side by side (Q4_0's lanes are permuted to that
 * order first), and the 4 sums go into y in order. The row's last nb % 16 blocks, stored as in
 * the file, one block at a time (vpdpwssd, as qg_tail). Same bits as I16 (and so AMX), which is
 * what lets the rows each kind takes (i16_small_rows, amx_rows_x16) be chosen by speed alone:
 * test_cpu_gemm_q compares it with I16 on the stored rows (2-11 rows, a column share, K with
 * whole groups, tails and a last K block of 1-3 blocks), test_cpu_prefix a copied model's
 * prompts prefilled in pieces with the prompt in one call. The
 * group loop is row_dot_x16_xs's (its i16 form); i16_rows_batch drives it. */
static inline __attribute__((always_inline)) float i16_tail(float yv, const uint8_t *row, ts_gemm_qx qx, int b, int nb,
                                                            ts_dtype st) {
    const size_t bb = st == TS_DTYPE_Q8_0 ? 2 + TS_QBLOCK : 2 + TS_QBLOCK / 2;
    const __m512i z = _mm512_setzero_si512();
    for (; b < nb; b += TS_I16_KB_BLOCKS) { /* one K block */
        __m128 acc = _mm_setzero_ps();
        for (int k = b; k < nb && k < b + TS_I16_KB_BLOCKS; k++) {
            const uint8_t *p0 = row + (size_t)k * bb;
            int isum = _mm512_reduce_add_epi32(_mm512_dpwssd_epi32(z, block_w16(p0, st), _mm512_loadu_si512(qx.q + (size_t)k * TS_QBLOCK)));
            acc = _mm_fmadd_ss(_mm_set_ss((float)isum), _mm_set_ss(f16(p0) * qx.d[k]), acc);
        }
        yv = b ? yv + _mm_cvtss_f32(acc) : _mm_cvtss_f32(acc);
    }
    return yv;
}

/* A group's 4 K blocks into the running sums of X <= 4 x rows (yv: lane x row x's; g == 0: the
 * row's first group) in I16's order, from the exact block sums (ih << 8) + il and the scales dw,
 * dx in the form's lane order. Per row: per step c (Q8_0's 128-bit lane c: step c of the 4 K
 * blocks; Q4_0's lanes permuted to that order first) acc = fma(sum, d_w * d_x, acc) from zero,
 * then the 4 K blocks' sums added in order. The 4 rows' 128-bit lanes are transposed so that one
 * 512-bit FMA runs a step for all 4 and one 128-bit add a K block: per element the same FP32
 * operations in the same order as a row at a time (extracting each lane), which took about twice
 * the operations, most of them shuffles, and ~14% of the few-row prefill's time (session 35). */
static inline __attribute__((always_inline)) __m128 i16_group(__m128 yv, int g, const __m512i *ih, const __m512i *il,
                                                                 __m512 dw, const qgx *x4, int b, int X, int q8) {
    const __m512i steps = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m512 sv[4], mv[4];
    for (int x = 0; x < 4; x++) {
        if (x >= X) {
            sv[x] = mv[x] = _mm512_setzero_ps();
            continue;
        }
        sv[x] = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(ih[x], 8), il[x]));
        mv[x] = _mm512_mul_ps(dw, _mm512_loadu_ps(x4[x].d + b));
        if (!q8) sv[x] = _mm512_permutexvar_ps(steps, sv[x]), mv[x] = _mm512_permutexvar_ps(steps, mv[x]);
    }
    /* T[c], M[c]: 128-bit lane x = row x's lane c (step c of its 4 K blocks) */
    __m512 T[4], M[4];
    {
        __m512 a = _mm512_shuffle_f32x4(sv[0], sv[1], 0x44), c = _mm512_shuffle_f32x4(sv[2], sv[3], 0x44);
        __m512 e = _mm512_shuffle_f32x4(sv[0], sv[1], 0xEE), f = _mm512_shuffle_f32x4(sv[2], sv[3], 0xEE);
        T[0] = _mm512_shuffle_f32x4(a, c, 0x88), T[1] = _mm512_shuffle_f32x4(a, c, 0xDD);
        T[2] = _mm512_shuffle_f32x4(e, f, 0x88), T[3] = _mm512_shuffle_f32x4(e, f, 0xDD);
        a = _mm512_shuffle_f32x4(mv[0], mv[1], 0x44), c = _mm512_shuffle_f32x4(mv[2], mv[3], 0x44);
        e = _mm512_shuffle_f32x4(mv[0], mv[1], 0xEE), f = _mm512_shuffle_f32x4(mv[2], mv[3], 0xEE);
        M[0] = _mm512_shuffle_f32x4(a, c, 0x88), M[1] = _mm512_shuffle_f32x4(a, c, 0xDD);
        M[2] = _mm512_shuffle_f32x4(e, f, 0x88), M[3] = _mm512_shuffle_f32x4(e, f, 0xDD);
    }
    __m512 acc = _mm512_fmadd_ps(T[0], M[0], _mm512_setzero_ps());
    acc = _mm512_fmadd_ps(T[1], M[1], acc);
    acc = _mm512_fmadd_ps(T[2], M[2], acc);
    acc = _mm512_fmadd_ps(T[3], M[3], acc);
    /* element 4x + a (row x, K block a) to 4a + x: 128-bit lane a = K block a of the 4 rows */
    const __m512 k = _mm512_permutexvar_ps(steps, acc);
    __m128 v = _mm512_castps512_ps128(k); /* the first K block stores, the others add, in order */
    if (g) v = _mm_add_ps(yv, v);
    v = _mm_add_ps(v, _mm512_extractf32x4_ps(k, 1));
    v = _mm_add_ps(v, _mm512_extractf32x4_ps(k, 2));
    return _mm_add_ps(v, _mm512_extractf32x4_ps(k, 3));
}

/* The batched decode on the lane forms: one W row against X x rows (X <= 4), its code vectors
 * loaded and split once per 64 bytes for all X (rows_dot_x16's operations per x row, so each
 * output has the single decode's bits). i16 (a constant): the few-row prefill's sums instead
 * (i16_group, i16_tail: I16's bits). */
static inline __attribute__((always_inline)) void row_dot_x16_xs_g(float *y, size_t ldy, const uint8_t *row,
                                                                    const ts_gemm_qx *qx, const qgx *x4, int X, int nb,
                                                                    ts_dtype dt, int gf, int i16, ts_pf pf, int g0,
                                                                    int g1) {
    const int q8 = dt == TS_DTYPE_Q8_0X16;
    const size_t bb = q8 ? 2 + TS_QBLOCK : 2 + TS_QBLOCK / 2;
    const __m512i m4 = _mm512_set1_epi8(15), flip = _mm512_set1_epi8((char)0x80), z = _mm512_setzero_si512();
    __m512 acc[4];
    float y0[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    /* i16 from a later group on: y holds the sum so far (stored exactly as a float) */
    for (int x = 0; x < X; x++) acc[x] = _mm512_setzero_ps(), y0[x] = g0 && i16 ? y[(size_t)x * ldy] : 0.0f;
    __m128 yv = _mm_loadu_ps(y0); /* i16: lane x the x row's running sum */
    int ng = nb / QG, b = g0 * QG;
    for (int g = g0; g < g1; g++, b += QG) {
        const uint8_t *p = row + (size_t)b * bb;
        ts_pf_lines(p, pf, (int)((QG * bb + 63) / 64));
        __m512i ih[4], il[4]; /* the chains of rows_dot_x16 */
        for (int x = 0; x < X; x++) ih[x] = z, il[x] = _mm512_loadu_si512(x4[x].ncorr + b);
        for (int j = 0; j < 4; j++) {
            __m512i c0, c1, u0, u1;
            X16_CODES(p + 32, j, q8, gf, c0, c1, u0, u1);
            for (int x = 0; x < X; x++) {
                const uint8_t *xh = x4[x].hi + (size_t)b * TS_QBLOCK + 64 * j, *xl = x4[x].lo + (size_t)b * TS_QBLOCK + 64 * j;
                ih[x] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(ih[x], u0, _mm512_loadu_si512(xh)), u1,
                                            _mm512_loadu_si512(xh + 256));
                il[x] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(il[x], _mm512_loadu_si512(xl), c0),
                                            _mm512_loadu_si512(xl + 256), c1);
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        if (i16) {
            yv = i16_group(yv, g, ih, il, dw, x4, b, X, q8);
            continue;
        }
        for (int x = 0; x < X; x++) {
            __m512i t = _mm512_add_epi32(_mm512_slli_epi32(ih[x], 8), il[x]);
            acc[x] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dw, _mm512_loadu_ps(x4[x].d + b)), acc[x]);
        }
    }
    _mm_storeu_ps(y0, yv);
    for (int x = 0; x < X; x++)
        y[(size_t)x * ldy] = i16 ? (g1 < ng ? y0[x] : i16_tail(y0[x], row, qx[x], b, nb, ts_x16_stored(dt)))
                                 : _mm512_reduce_add_ps(qg_tail(acc[x], row, qx[x], b, nb, dt));
}
/* The whole row. (Groups [g0, g1) only in the i16 form: its y after the last group of a range
 * is the running FP32 sum, which the next range continues, and the tail comes with g1 = ng.) */
static inline __attribute__((always_inline)) void row_dot_x16_xs(float *y, size_t ldy, const uint8_t *row,
                                                                  const ts_gemm_qx *qx, const qgx *x4, int X, int nb,
                                                                  ts_dtype dt, int gf, int i16, ts_pf pf) {
    row_dot_x16_xs_g(y, ldy, row, qx, x4, X, nb, dt, gf, i16, pf, 0, nb / QG);
}
/* The same for X = min(xs, 4) x rows, X made a constant (the accumulators stay in registers). */
static inline __attribute__((always_inline)) void row_dot_x16_upto4(float *y, size_t ldy, const uint8_t *row,
                                                                     const ts_gemm_qx *qx, const qgx *x4, int xs, int nb,
                                                                     ts_dtype dt, int gf, int i16, ts_pf pf, int g0,
                                                                     int g1) {
    switch (xs < 4 ? xs : 4) {
    case 1: row_dot_x16_xs_g(y, ldy, row, qx, x4, 1, nb, dt, gf, i16, pf, g0, g1); break;
    case 2: row_dot_x16_xs_g(y, ldy, row, qx, x4, 2, nb, dt, gf, i16, pf, g0, g1); break;
    case 3: row_dot_x16_xs_g(y, ldy, row, qx, x4, 3, nb, dt, gf, i16, pf, g0, g1); break;
    default: row_dot_x16_xs_g(y, ldy, row, qx, x4, 4, nb, dt, gf, i16, pf, g0, g1); break;
    }
}

/* Two W rows by two x rows (a batched decode): per 64 bytes one code load per W row and one x
 * load per x vector serve two products each. From L1/L2 on one Zen 5 core, cycles per W group
 * and x row against the group-at-a-time batch kernel: 2 x rows 18.0 against 21.2, 4 16.3 / 17.8,
 * 8 16.0 / 20.6 (the array accumulators of 5-8 rows). The int32 block sums of each (W row, x row) pair
 * accumulate its high and low halves in one chain each; integer sums are exact, so t is the
 * single decode's, and the FP32 steps are its own: each output has the single decode's bits. */
static inline __attribute__((always_inline)) void tile_x16_2x2(float *y, size_t ldy, const uint8_t *W, size_t rb,
                                                                const ts_gemm_qx *qx, const qgx *x4, int nb,
                                                                ts_dtype dt, int gf, ts_pf pf) {
    const int q8 = dt == TS_DTYPE_Q8_0X16;
    const size_t bb = q8 ? 2 + TS_QBLOCK : 2 + TS_QBLOCK / 2, gb = QG * bb;
    const __m512i m4 = _mm512_set1_epi8(15), flip = _mm512_set1_epi8((char)0x80), z = _mm512_setzero_si512();
    __m512 acc[2][2];
    for (int r = 0; r < 2; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    int ng = nb / QG, b = 0;
    for (int g = 0; g < ng; g++, b += QG) {
        ts_pf_lines(W + (size_t)g * gb * 2, pf, (int)((gb * 2 + 63) / 64));
        __m512i ih[2][2], il[2][2];
        for (int x = 0; x < 2; x++) {
            const __m512i ncorr = _mm512_loadu_si512(x4[x].ncorr + b); /* the low chains start from it */
            ih[0][x] = ih[1][x] = z, il[0][x] = il[1][x] = ncorr;
        }
        for (int j = 0; j < 4; j++) {
            __m512i xh0[2], xh1[2], xl0[2], xl1[2];
            for (int x = 0; x < 2; x++) {
                const uint8_t *xh = x4[x].hi + (size_t)b * TS_QBLOCK + 64 * j, *xl = x4[x].lo + (size_t)b * TS_QBLOCK + 64 * j;
                xh0[x] = _mm512_loadu_si512(xh), xh1[x] = _mm512_loadu_si512(xh + 256);
                xl0[x] = _mm512_loadu_si512(xl), xl1[x] = _mm512_loadu_si512(xl + 256);
            }
            for (int r = 0; r < 2; r++) {
                const uint8_t *p = W + (size_t)r * rb + (size_t)b * bb + 32;
                __m512i c0, c1, u0, u1;
                X16_CODES(p, j, q8, gf, c0, c1, u0, u1);
                for (int x = 0; x < 2; x++) {
                    ih[r][x] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(ih[r][x], u0, xh0[x]), u1, xh1[x]);
                    il[r][x] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(il[r][x], xl0[x], c0), xl1[x], c1);
                }
            }
        }
        for (int r = 0; r < 2; r++) {
            __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(W + (size_t)r * rb + (size_t)b * bb)));
            for (int x = 0; x < 2; x++) {
                __m512i t = _mm512_add_epi32(_mm512_slli_epi32(ih[r][x], 8), il[r][x]);
                acc[r][x] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dw, _mm512_loadu_ps(x4[x].d + b)), acc[r][x]);
            }
        }
    }
    for (int r = 0; r < 2; r++)
        for (int x = 0; x < 2; x++)
            y[(size_t)x * ldy + r] = _mm512_reduce_add_ps(qg_tail(acc[r][x], W + (size_t)r * rb, qx[x], b, nb, dt));
}

/* Rows a lane-form kernel takes at a time: 4, 2 or 1, the most whose linear prefetch front
 * (rows_dot_x16) still reaches the last row's first group in time; 4 without a prefetch (the
 * matrix is in cache then). Llama-3.2-1B's down projection (K = 8192): Q4_0 4 rows at 24 KiB into
 * L2, 2 at 8 KiB into L1; Q8_0 1 row at 8 KiB. */
static inline int x16_rows(size_t rb, ts_pf pf) {
    size_t d = (size_t)(pf.l1 > pf.l2 ? pf.l1 : pf.l2);
    return !d || 3 * rb <= d ? 4 : rb <= d ? 2 : 1;
}

static inline ts_pf_kind pf_kind(ts_dtype dt) {
    return dt == TS_DTYPE_Q8_0      ? TS_PF_Q8
           : dt == TS_DTYPE_Q8_0X16 ? TS_PF_Q8X16
           : dt == TS_DTYPE_Q4_0X16 ? TS_PF_Q4X16
           : dt == TS_DTYPE_Q8_0T16 ? TS_PF_Q8T16
           : dt == TS_DTYPE_Q4_0T16 ? TS_PF_Q4T16
                                    : TS_PF_Q4;
}
/* the layout of the prepared x (qg_prepare): Q4_0's for both Q4_0 forms */
static inline ts_dtype x_kind(ts_dtype dt) { return dt == TS_DTYPE_Q4_0X16 ? TS_DTYPE_Q4_0 : dt; }

static inline __attribute__((always_inline)) void gemv_rows_g(float *y, ts_gemm_qx qx, const uint8_t *W, int K,
                                                              int n0, int n1, ts_dtype dt, int gf) {
    int nb = K / TS_QBLOCK, ng = nb / QG;
    size_t rb = ts_gemm_row_bytes(dt, K), kg = (size_t)ng * QG * TS_QBLOCK;
    uint8_t sbuf[2 * TS_GEMM_QX_MAX] __attribute__((aligned(64)));
    int32_t sncorr[TS_GEMM_QX_MAX / TS_QBLOCK];
    float sd[TS_GEMM_QX_MAX / TS_QBLOCK];
    uint8_t *buf = sbuf;
    int32_t *ncorr = sncorr;
    float *d = sd;
    void *heap = NULL;
    if (K > TS_GEMM_QX_MAX) {
        heap = malloc(2 * kg + (sizeof(int32_t) + sizeof(float)) * (size_t)nb);
        if (!heap) return; /* as ts_cpu_gemm_q_decode */
        buf = heap, ncorr = (int32_t *)(buf + 2 * kg), d = (float *)(ncorr + nb);
    }
    qgx x4;
    qg_prepare(&x4, buf, buf + kg, ncorr, d, qx, ng, x_kind(dt));
    ts_pf_kind kind = pf_kind(dt);
    uint64_t bytes = (uint64_t)(n1 - n0) * rb, t0;
    int c = ts_pf_begin(kind, bytes, &t0);
    ts_pf pf = ts_pf_candidate(kind, c);
    int n = n0;
    if (ts_dtype_is_x16(dt)) { /* four rows at a time (x16_rows), the last 0-3 by two and one */
        int R = x16_rows(rb, pf);
        if (R == 4)
            for (; n + 4 <= n1; n += 4) rows_dot_x16(y + n, W + (size_t)n * rb, rb, 4, qx, &x4, nb, dt, gf, pf);
        if (R >= 2)
            for (; n + 2 <= n1; n += 2) rows_dot_x16(y + n, W + (size_t)n * rb, rb, 2, qx, &x4, nb, dt, gf, pf);
        for (; n < n1; n++) rows_dot_x16(y + n, W + (size_t)n * rb, rb, 1, qx, &x4, nb, dt, gf, pf);
    }
    for (; n < n1; n++) y[n] = row_dot_g(W + (size_t)n * rb, qx, &x4, nb, dt, pf);
    ts_pf_end(kind, c, t0, bytes);
    free(heap);
}

/* Batched: x of every row prepared once (qg_prepare; on the stack while they fit). The lane forms
 * then run tile_x16_2x2 / row_dot_x16_xs; the stored forms per W row and 16-block group the codes
 * and scales once, and every x row's dots against them, the accumulators of all rows in a small
 * array (same values as in registers). */
#define QG_BATCH_STACK 65536 /* bytes of hi + lo for all rows */
/* x of rows [0, S) prepared (qg_prepare) into sbuf (sbytes) while they fit, else into one
 * allocation returned in *heap (the caller frees it); 0 when that allocation fails. */
static int qg_prepare_rows(qgx *x4, const ts_gemm_qx *qx, int S, int K, ts_dtype dt, uint8_t *sbuf, size_t sbytes,
                           void **heap) {
    int nb = K / TS_QBLOCK, ng = nb / QG;
    size_t kg = (size_t)ng * QG * TS_QBLOCK, per = 2 * kg, aux = (sizeof(int32_t) + sizeof(float)) * (size_t)nb;
    uint8_t *buf = sbuf;
    *heap = NULL;
    if ((size_t)S * (per + aux) > sbytes) {
        *heap = malloc((size_t)S * (per + aux));
        if (!*heap) return 0;
        buf = *heap;
    }
    for (int s = 0; s < S; s++) {
        uint8_t *p = buf + (size_t)s * (per + aux);
        int32_t *ncorr = (int32_t *)(p + per);
        qg_prepare(&x4[s], p, p + kg, ncorr, (float *)(ncorr + nb), qx[s], ng, x_kind(dt));
    }
    return 1;
}

/* The few-row prefill's loop (lane forms): W rows in blocks of FR_ROWS, each block's K in ranges
 * of FR_GROUPS groups (2048 positions), per range the x rows 4 at a time against every row of the
 * block. So the x that a range reads (4 rows: 16 KiB) and the block's codes of the range stay in
 * L1 whatever K is: one W row against all of x at once had x fall out of L1 at K = 8192 (8 x
 * rows: 128 KiB of x per W row), where the few-row kernel was no faster than the panels at 8 rows.
 * W comes in as fr_spread says. A row's sums run in I16's order across the ranges
 * (row_dot_x16_xs_g), so the bits do not depend on the blocking. */
#define FR_ROWS 8
#define FR_GROUPS 4
#define FR_X_L1 20480 /* S * K above which the blocks run: x (2K bytes a row) past 40 KiB */
/* How the few-row prefill requests W. Q8_0: into L2 as it computes, with each group of the first
 * x rows the same group FR_ROWS rows on (the next block's row, in i16_blocks). Q4_0: a row's lines
 * in one burst as the row (its first range) starts, the decode's distances (pf). Q8_0 that way
 * left W's reads and the products taking turns: Llama-3.2-1B Q8_0, 2 threads, a 4-token prompt
 * took 82-83 ms so and 72 spread, 8 tokens 108.5-109 and 97-102 (4 to 32 rows ahead, or into L1,
 * measured the same: the spreading counts). Q4_0 has half the bytes a group and was 2-5% slower
 * spread at 6-8 tokens, whatever the distances (Llama-3.2-1B, Qwen3-0.6B; session 35). */
static inline ts_pf fr_spread(ts_dtype dt, size_t rb) {
    return dt == TS_DTYPE_Q8_0X16 ? (ts_pf){0, (int)(FR_ROWS * rb)} : (ts_pf){0, 0};
}
static inline __attribute__((always_inline)) void i16_blocks(float *y, int ldy, const ts_gemm_qx *qx, const qgx *x4,
                                                              int S, const uint8_t *W, size_t rb, int nb, int n0,
                                                              int n1, ts_dtype dt, int gf, ts_pf pf) {
    const ts_pf none = {0, 0}, spread = fr_spread(dt, rb);
    int ng = nb / QG;
    for (int n = n0; n < n1; n += FR_ROWS) {
        int nr = n1 - n < FR_ROWS ? n1 - n : FR_ROWS;
        const uint8_t *blk = W + (size_t)n * rb;
        for (int g0 = 0;; g0 += FR_GROUPS) {
            int g1 = ng - g0 <= FR_GROUPS ? ng : g0 + FR_GROUPS;
            for (int s = 0; s < S; s += 4)
                for (int r = 0; r < nr; r++) {
                    float *ys = y + (size_t)s * ldy + n + r;
                    const uint8_t *row = blk + (size_t)r * rb;
                    if (!s && !g0 && !spread.l2) ts_pf_lines(row, pf, (int)((rb + 63) / 64));
                    row_dot_x16_upto4(ys, (size_t)ldy, row, qx + s, x4 + s, S - s, nb, dt, gf, 1, s ? none : spread, g0,
                                      g1);
                }
            if (g1 >= ng) break;
        }
    }
}

/* i16 (a constant; lane forms only): the few-row prefill (row_dot_x16_xs's i16 form), untimed */
static inline __attribute__((always_inline)) void gemv_rows_batch_g(float *y, int ldy, const ts_gemm_qx *qx, int S,
                                                                    const uint8_t *W, int K, int n0, int n1,
                                                                    ts_dtype dt, int gf, int i16) {
    int nb = K / TS_QBLOCK, ng = nb / QG;
    size_t rb = ts_gemm_row_bytes(dt, K);
    uint8_t sbuf[QG_BATCH_STACK] __attribute__((aligned(64)));
    void *heap;
    qgx x4[TS_GEMM_BATCH_MAX];
    if (!qg_prepare_rows(x4, qx, S, K, dt, sbuf, sizeof sbuf, &heap)) return; /* as ts_cpu_gemm_q_decode */
    __m512 acc[TS_GEMM_BATCH_MAX];
    const size_t bb = ts_x16_stored(dt) == TS_DTYPE_Q8_0 ? 2 + TS_QBLOCK : 2 + TS_QBLOCK / 2;
    /* timed as the single decode is: a server decodes only through here, and its process must
     * make the prefetch choice too (the candidates see the same mix of S, as they take turns by
     * time slices); a prefill call is not a decode sample */
    ts_pf_kind kind = pf_kind(dt);
    uint64_t bytes = (uint64_t)(n1 - n0) * rb, t0;
    int c = ts_pf_begin(kind, i16 ? 0 : bytes, &t0);
    ts_pf pf = ts_pf_candidate(kind, c);
    int n = n0;
    if (ts_dtype_is_x16(dt)) {
        const ts_pf none = {0, 0};
        int pairs = !i16 && S >= 2 && x16_rows(rb, pf) >= 2; /* the tile's prefetch front, as rows_dot_x16's */
        for (; n + 2 <= n1 && pairs; n += 2) /* pairs of W rows by pairs of x rows, an odd x row alone */
            for (int s = 0; s < S; s += 2) {
                float *ys = y + (size_t)s * ldy + n;
                const uint8_t *row = W + (size_t)n * rb;
                ts_pf p = s ? none : pf;
                if (s + 2 <= S) tile_x16_2x2(ys, (size_t)ldy, row, rb, qx + s, x4 + s, nb, dt, gf, p);
                else
                    for (int r = 0; r < 2; r++)
                        row_dot_x16_xs(ys + r, (size_t)ldy, row + (size_t)r * rb, qx + s, x4 + s, 1, nb, dt, gf, 0, none);
            }
        if (i16 && (long)S * K > FR_X_L1) { /* x outgrows L1 */
            i16_blocks(y, ldy, qx, x4, S, W, rb, nb, n, n1, dt, gf, pf);
            n = n1;
        }
        const ts_pf spread = i16 ? fr_spread(dt, rb) : none;
        for (; n < n1; n++) /* up to 4 x rows at a time (the W row stays in L1 for the next 4) */
            for (int s = 0; s < S; s += 4) {
                float *ys = y + (size_t)s * ldy + n;
                const uint8_t *row = W + (size_t)n * rb;
                if (i16 && !s && spread.l2) { /* fr_spread */
                    row_dot_x16_upto4(ys, (size_t)ldy, row, qx + s, x4 + s, S - s, nb, dt, gf, i16, spread, 0, nb / QG);
                    continue;
                }
                if (i16 && !s) ts_pf_lines(row, pf, (int)((rb + 63) / 64));
                row_dot_x16_upto4(ys, (size_t)ldy, row, qx + s, x4 + s, S - s, nb, dt, gf, i16, s || i16 ? none : pf, 0,
                                  nb / QG);
            }
    }
    for (; n < n1; n++) {
        const uint8_t *row = W + (size_t)n * rb;
        for (int s = 0; s < S; s++) acc[s] = _mm512_setzero_ps();
        int b = 0;
        for (int g = 0; g < ng; g++, b += QG) {
            qgw w;
            qg_group_w(&w, row + (size_t)b * bb, dt, pf);
            for (int s = 0; s < S; s++) acc[s] = qg_group_x(acc[s], &w, &x4[s], b, dt);
        }
        for (int s = 0; s < S; s++)
            y[(size_t)s * ldy + n] = _mm512_reduce_add_ps(qg_tail(acc[s], row, qx[s], b, nb, dt));
    }
    ts_pf_end(kind, c, t0, bytes);
    free(heap);
}

/* GFNI for Q4_0's high nibbles (ts_q4_high_nibbles): CPUID's answer unless a test turned it off.
 * Measured on the Intel Xeon with AMX, Q4_0 in lane order, with this file's two-chain sums
 * (docs/performance.md, session 33). */
static _Atomic int g_gfni = -1;
int ts_cpu_q_gfni(void) {
    int v = atomic_load_explicit(&g_gfni, memory_order_relaxed);
    if (v < 0) { /* CPUID's answer, unless ts_cpu_q_gfni_set got there first */
        int unset = -1;
        atomic_compare_exchange_strong(&g_gfni, &unset, ts_cpu_features_get()->gfni);
        v = atomic_load(&g_gfni);
    }
    return v;
}
int ts_cpu_q_gfni_set(int on) {
    int was = ts_cpu_q_gfni();
    atomic_store(&g_gfni, on && ts_cpu_features_get()->gfni);
    return was;
}

/* One function per type (and for Q4_0 in lane order, per nibble split) with the type a constant,
 * so the kernels are specialized for it. */
static void gemv_rows_batch(float *y, int ldy, const ts_gemm_qx *qx, int S, const uint8_t *W, ts_dtype dt, int K,
                            int n0, int n1) {
    if (ts_dtype_is_t16(dt)) {
        ts_cpu_gemv_rows_batch_t16_avx512(y, ldy, qx, S, W, dt, K, n0, n1);
        return;
    }
/* 2-4 rows with S a constant too: their accumulators stay in registers */
#define QG_BATCH(DT, GF)                                                                               \
    switch (S) {                                                                                       \
    case 2: gemv_rows_batch_g(y, ldy, qx, 2, W, K, n0, n1, DT, GF, 0); return;                            \
    case 3: gemv_rows_batch_g(y, ldy, qx, 3, W, K, n0, n1, DT, GF, 0); return;                            \
    case 4: gemv_rows_batch_g(y, ldy, qx, 4, W, K, n0, n1, DT, GF, 0); return;                            \
    default: gemv_rows_batch_g(y, ldy, qx, S, W, K, n0, n1, DT, GF, 0); return;                           \
    }
    if (dt == TS_DTYPE_Q8_0) QG_BATCH(TS_DTYPE_Q8_0, 0)
    else if (dt == TS_DTYPE_Q8_0X16) QG_BATCH(TS_DTYPE_Q8_0X16, 0)
    else if (dt == TS_DTYPE_Q4_0X16 && ts_cpu_q_gfni()) QG_BATCH(TS_DTYPE_Q4_0X16, 1)
    else if (dt == TS_DTYPE_Q4_0X16) QG_BATCH(TS_DTYPE_Q4_0X16, 0)
    else QG_BATCH(TS_DTYPE_Q4_0, 0)
#undef QG_BATCH
}

static void gemv_rows(float *y, ts_gemm_qx qx, const uint8_t *W, ts_dtype dt, int K, int n0, int n1) {
    if (ts_dtype_is_t16(dt)) ts_cpu_gemv_rows_t16_avx512(y, qx, W, dt, K, n0, n1);
    else if (dt == TS_DTYPE_Q8_0) gemv_rows_g(y, qx, W, K, n0, n1, TS_DTYPE_Q8_0, 0);
    else if (dt == TS_DTYPE_Q8_0X16) gemv_rows_g(y, qx, W, K, n0, n1, TS_DTYPE_Q8_0X16, 0);
    else if (dt == TS_DTYPE_Q4_0X16 && ts_cpu_q_gfni()) gemv_rows_g(y, qx, W, K, n0, n1, TS_DTYPE_Q4_0X16, 1);
    else if (dt == TS_DTYPE_Q4_0X16) gemv_rows_g(y, qx, W, K, n0, n1, TS_DTYPE_Q4_0X16, 0);
    else gemv_rows_g(y, qx, W, K, n0, n1, TS_DTYPE_Q4_0, 0);
}

void ts_cpu_gemv_batch_q_avx512(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                                int n0, int n1, ts_gemm_tile tile) {
    (void)tile;
    /* one row: the single decode's kernel, the same bits (its accumulator stays in a register;
     * the batch kernel's per-row array cost a batch of one 10-25% per GEMV, Qwen3-0.6B Q4_0 on
     * Zen 5: 164 against 186-190 tok/s) */
    if (S == 1) ts_cpu_gemm_q_decode(y, xp, W, dt, K, n0, n1, ts_cpu_quantize_x_avx512, gemv_rows);
    else ts_cpu_gemm_q_decode_batch(y, ldy, xp, ldx, W, dt, K, S, n0, n1, ts_cpu_quantize_x_avx512, gemv_rows_batch);
}

/* the few-row prefill (gemv_rows_batch_g's i16 form) per type and nibble split */
static void i16_rows_batch(float *y, int ldy, const ts_gemm_qx *qx, int S, const uint8_t *W, ts_dtype dt, int K, int n0,
                           int n1) {
    if (dt == TS_DTYPE_Q8_0X16) gemv_rows_batch_g(y, ldy, qx, S, W, K, n0, n1, TS_DTYPE_Q8_0X16, 0, 1);
    else if (ts_cpu_q_gfni()) gemv_rows_batch_g(y, ldy, qx, S, W, K, n0, n1, TS_DTYPE_Q4_0X16, 1, 1);
    else gemv_rows_batch_g(y, ldy, qx, S, W, K, n0, n1, TS_DTYPE_Q4_0X16, 0, 1);
}

/* Whether a lane-form prefill of S rows takes i16_rows_batch instead of the I16 panels (the AMX
 * kind asks amx_rows_x16 first). Measured on the Intel Xeon with AMX, one thread, one
 * matrix, against the path before (a7be749: I16 panels below 12 rows, AMX from 12), ms:
 * 8192 x 2048 Q8_0 0.82 vs 2.60 at 2 rows, 1.99 vs 3.71 at 8, 2.99 vs 4.10 at 11 (AMX at 12:
 * 3.32); Q4_0 0.62 vs 1.88, 1.95 vs 2.91, 2.70 vs 3.32. Where x outgrows L1 the rows run in
 * blocks (i16_blocks, session 34). Since session 35 (a group's FP32 steps for 4 x rows at once)
 * the few-row kernel beats the panels below 16 rows at every seed shape and both types (one
 * thread, W from DRAM, ms few-row vs panels, Q4_0 at 9 / 12 / 14 rows: 8192 x 2048 2.17 vs 3.79,
 * 2.93 vs 4.49, 3.44 vs 4.59; 2048 x 8192 2.74 vs 3.37, 3.31 vs 4.05, 3.86 vs 4.40; 3072 x 1024
 * 0.41 vs 0.70, 0.49 vs 0.81, 0.59 vs 0.86; 1024 x 3072 0.50 vs 0.68, 0.76 vs 0.78, but 0.88 vs
 * 0.82 at 14; Q8_0 at 12-14 rows 0.83-3.92 vs 0.94-5.41, 1024 x 3072 even at 14), and at 16 rows
 * the two split the shapes. In the model, the I16 kind (TESSERA_Q_PREFILL=i16, what runs without
 * AMX): Llama-3.2-1B Q4_0 9 / 12 / 14 tokens 79.6 / 128.7 / 139 -> 69.8 / 105.2 / 121 ms,
 * Qwen3-0.6B Q4_0 34.2 / 58.8 / 66.8 -> 33.7 / 43.8 / 53.0. (Session 34 had kept Q4_0 on the
 * panels from 9 rows at K = 8192, 3.10 vs 3.04 ms then.) */
static int i16_small_rows(int S) { return S < TS_I16_PANELS_MIN_S_X16; }

/* Whether the AMX kind runs S lane-order rows on the tiles rather than the few-row kernel (or
 * the I16 panels). Since its packs transpose whole groups (gemm_q_amx.c, session 34) AMX costs
 * about the same from 4 to 16 rows; against the few-row kernel, one thread, one matrix, ms (Intel
 * Xeon, session 34): 8192 x 2048 Q8_0 1.95 vs 1.94 at 8 rows, 2.07 vs 2.28 at 9, 2.13 vs 2.89 at
 * 11; 2048 x 8192 Q8_0 1.98 vs 1.78 at 4, 2.05 vs 2.48 at 6; 4096 x 4096 Q8_0 2.11 vs 1.94 at 6,
 * 2.21 vs 3.06 at 8; 1024 x 3072 Q4_0 0.30 vs 0.27 at 6, 0.31 vs 0.39 at 8; 3072 x 1024 Q4_0 0.31
 * vs 0.35 at 8, Q8_0 0.36 vs 0.35. */
static int amx_rows_x16(int S, int K) {
    return S >= 9 || (S >= 7 && (long)S * K >= 24576) || (S >= 6 && (long)S * K >= 49152);
}

void ts_cpu_gemm_q_prefill_avx512(ts_q_prefill k, float *y, int ldy, const float *xp, int ldx, const void *W,
                                  ts_dtype dt, int K, int S, int n0, int n1) {
    if (n0 >= n1 || S < 1) return;
    if (ts_dtype_is_t16(dt)) {
        ts_cpu_gemm_q_prefill_t16_avx512(k, y, ldy, xp, ldx, W, dt, K, S, n0, n1);
        return;
    }
    /* I16's bits (I16 itself or AMX) for lane-order rows: the tiles, else for a few rows the
     * few-row kernel */
    if (k == TS_Q_PREFILL_AMX && ts_dtype_is_x16(dt) && amx_rows_x16(S, K)) {
        ts_cpu_gemm_q_amx(y, ldy, xp, ldx, W, dt, K, S, n0, n1);
        return;
    }
    if ((k == TS_Q_PREFILL_I16 || k == TS_Q_PREFILL_AMX) && ts_dtype_is_x16(dt) && i16_small_rows(S)) {
        ts_cpu_gemm_q_decode_batch(y, ldy, xp, ldx, W, dt, K, S, n0, n1, ts_cpu_quantize_x_avx512, i16_rows_batch);
        return;
    }
    switch (k) {
    case TS_Q_PREFILL_BF16: ts_cpu_gemm_q_bf16_avx512(y, ldy, xp, ldx, W, dt, K, S, n0, n1); break;
    case TS_Q_PREFILL_I8: ts_cpu_q_prefill_i8_avx512(y, ldy, xp, ldx, W, dt, K, S, n0, n1); break;
    case TS_Q_PREFILL_I16: ts_cpu_q_prefill_i16_avx512(y, ldy, xp, ldx, W, dt, K, S, n0, n1); break;
    case TS_Q_PREFILL_AMX: /* the same bits either way (gemm_q_amx.c); stored rows: I16 below 32 rows (gemm.h) */
        if (!ts_dtype_is_x16(dt) && S >= TS_AMX_MIN_S) ts_cpu_gemm_q_amx(y, ldy, xp, ldx, W, dt, K, S, n0, n1);
        else ts_cpu_q_prefill_i16_avx512(y, ldy, xp, ldx, W, dt, K, S, n0, n1);
        break;
    default: ts_cpu_gemm_q_panels_avx512(y, ldy, xp, ldx, W, dt, K, S, n0, n1); break;
    }
}

static const char *const k_q_prefill_names[TS_Q_PREFILL_COUNT] = {"f32", "bf16", "i8", "i16", "amx"};
const char *ts_q_prefill_name(ts_q_prefill k) { return (unsigned)k < TS_Q_PREFILL_COUNT ? k_q_prefill_names[k] : "?"; }

static ts_q_prefill g_q_prefill;

/* AMX where this process may use it (I16's bits on tiles, gemm_q_amx.c), else I16, unless asked
 * otherwise. Of the two kernels that keep prefill as exact as decode (F32: W
 * dequantized exactly, rel_l2 ~2e-7; I16: decode's own 16-bit x, ~1.5e-5), I16 does twice the
 * multiply-adds per instruction (vpdpwssd) and ran a 512-token prefill 1.13-1.19x faster than F32
 * on the Intel Xeon of docs/performance.md. A fixed rule, not a timing: timing the two on one
 * small problem at start-up picked differently in two processes of one deployment (they are
 * close there), so phase 7 re-measured another kernel than phase 4 had claimed with. BF16
 * (~2e-3: a quantized model's prefill would differ from its decode 20-30x beyond
 * test_cpu_forward's bound) and I8 (8-bit activations, llama.cpp's arithmetic, over the phase-1
 * gate with outlier channels) run only when asked for. */
static void choose_q_prefill(void) {
    const char *e = getenv("TESSERA_Q_PREFILL");
    g_q_prefill = ts_cpu_amx_usable() ? TS_Q_PREFILL_AMX : TS_Q_PREFILL_I16;
    for (int k = 0; e && k < TS_Q_PREFILL_COUNT; k++)
        if (!strcmp(e, k_q_prefill_names[k])) g_q_prefill = (ts_q_prefill)k;
    if (g_q_prefill == TS_Q_PREFILL_AMX && !ts_cpu_amx_usable()) g_q_prefill = TS_Q_PREFILL_I16; /* asked, not here */
}

ts_q_prefill ts_cpu_avx512_q_prefill(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, choose_q_prefill);
    return g_q_prefill;
}

void ts_cpu_gemm_q_avx512(float *y, int ldy, const float *xp, int ldx, const void *W, ts_dtype dt, int K, int S,
                          int n0, int n1, ts_gemm_tile tile) {
    (void)tile;
    if (n0 >= n1 || S < 1) return;
    if (S >= 2) {
        ts_cpu_gemm_q_prefill_avx512(ts_cpu_avx512_q_prefill(), y, ldy, xp, ldx, W, dt, K, S, n0, n1);
        return;
    }
    ts_cpu_gemm_q_decode(y, xp, W, dt, K, n0, n1, ts_cpu_quantize_x_avx512, gemv_rows);
}
