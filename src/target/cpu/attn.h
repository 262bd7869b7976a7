/* Row kernels used by the cpu target's attention dispatch, per variant. */
#ifndef TS_TARGET_CPU_ATTN_H
#define TS_TARGET_CPU_ATTN_H
#include <stddef.h>
#include <stdint.h>

#include "io/dtype.h"
#include "target/cpu/cpu_features.h"

/* A head's cached rows come in blocks of TS_KV_BLOCK positions, `stride` elements between
 * blocks, hd elements between the rows of a block (the cpu target's KV layout, cpu_internal.h;
 * contiguous rows are the case stride == TS_KV_BLOCK * hd). Every kernel below reads row j
 * there. The elements are FP32, or IEEE half when the kernel's last argument f16 is 1 (`tessera
 * --kv-cache f16`): half the bytes a long-context decode reads, widened exactly to FP32 on load,
 * so every kernel's arithmetic is the FP32 one on the rounded values. */
#ifndef TS_KV_BLOCK
#define TS_KV_BLOCK 512
#endif
_Static_assert(TS_KV_BLOCK % 8 == 0, "the decode kernels read 8 consecutive keys from one block");
static inline size_t ts_kv_idx(int j, int stride, int hd) {
    return (size_t)(j / TS_KV_BLOCK) * (size_t)stride + (size_t)(j % TS_KV_BLOCK) * (size_t)hd;
}
/* Element i of a cache of either type. */
static inline float ts_kv_get(const void *base, size_t i, int f16) {
    return f16 ? ts_f16_to_f32(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}


/* One query row of one head over n_ctx cached positions: out (hd) = softmax(q.k_j * scale) v_j.
 * k, v point at the head's row 0, `stride` as above; scores is scratch of n_ctx floats. */
typedef void (*ts_attn_row_fn)(float *out, const float *q, const void *k, const void *v, int n_ctx,
                               int stride, int hd, float scale, float *scores, int f16);

/* In place: sc (n) <- softmax(sc). */
void ts_cpu_softmax(float *sc, int n);

void ts_cpu_attn_row_scalar(float *out, const float *q, const void *k, const void *v, int n_ctx,
                            int stride, int hd, float scale, float *scores, int f16);
void ts_cpu_attn_row_avx2(float *out, const float *q, const void *k, const void *v, int n_ctx,
                          int stride, int hd, float scale, float *scores, int f16);

/* G query heads that share one kv head (a GQA group), q and out G x hd contiguous: each head's
 * result is bit-identical to ts_cpu_attn_row_avx2's for it, but each cached K and V row is read
 * from memory once for the group. scores: G x n_ctx. */
void ts_cpu_attn_group_avx2(float *out, const float *q, const void *k, const void *v, int n_ctx, int stride,
                            int hd, float scale, float *scores, int G, int f16);

/* T consecutive query rows of one head (prefill): row t attends positions 0..n_ctx0 + t - 1.
 * Each cached key and value row is read once for the whole tile instead of once per query,
 * which is what bounds prefill attention (the cache does not fit in L2).
 * out: row t at out + t * out_stride; q: row t at q + t * q_stride; scores: T x (n_ctx0 + T - 1). */
#define TS_ATTN_TILE 16
void ts_cpu_attn_tile_avx2(float *out, int out_stride, const float *q, int q_stride, const void *k,
                           const void *v, int n_ctx0, int T, int stride, int hd, float scale,
                           float *scores, int f16);

/* The same with AVX-512 (attn_avx512.c) for head_dim 16, 32, 64 or 128 (_ok says which);
 * score rows are (n_ctx0 + T - 1) rounded up to 16 floats apart: scores holds
 * T x (n_ctx0 + T + 15). */
int ts_cpu_attn_tile_avx512_ok(int hd);
void ts_cpu_attn_tile_avx512(float *out, int out_stride, const float *q, int q_stride, const void *k,
                             const void *v, int n_ctx0, int T, int stride, int hd, float scale,
                             float *scores, int f16);

/* The decode group (ts_cpu_attn_group_avx2's contract) with AVX-512 for the head dims the tile
 * accepts: each cached row still read once for the group, 16-wide, the scores of 8 keys reduced
 * together, the tile's vectorized softmax. scores: G rows of n_ctx rounded up to 16 floats. Its
 * own arithmetic (not bit-identical to the AVX2 group's), the same for a row alone or in a batch. */
void ts_cpu_attn_group_avx512(float *out, const float *q, const void *k, const void *v, int n_ctx, int stride,
                              int hd, float scale, float *scores, int G, int f16);

/* n rows of hd FP32 values (src, ld floats apart) into an F16 cache row run (dst, hd apart),
 * each value as ts_f32_to_f16_sat (io/quant.h) gives it: the store of the AVX2 and AVX-512 variants (F16C). */
void ts_cpu_kv_f16_rows_avx2(uint16_t *dst, const float *src, int n, int ld, int hd);

#endif
