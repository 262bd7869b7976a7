/* dtype names, sizes and FP32 conversions (scalar: these are the oracle's loads). */
#include "io/dtype.h"

#include <math.h>

static const struct {
    const char *name;
    size_t size;       /* bytes per block */
    int block;         /* elements per block */
    int safetensors;   /* a safetensors dtype string */
} k_dtypes[TS_DTYPE_COUNT] = {
    [TS_DTYPE_F32] = {"F32", 4, 1, 1},
    [TS_DTYPE_F16] = {"F16", 2, 1, 1},
    [TS_DTYPE_BF16] = {"BF16", 2, 1, 1},
    [TS_DTYPE_Q8_0] = {"Q8_0", 2 + TS_QBLOCK, TS_QBLOCK, 0},
    [TS_DTYPE_Q4_0] = {"Q4_0", 2 + TS_QBLOCK / 2, TS_QBLOCK, 0},
};

size_t ts_dtype_size(ts_dtype t) {
    return (unsigned)t < TS_DTYPE_COUNT && k_dtypes[t].block == 1 ? k_dtypes[t].size : 0;
}
int ts_dtype_block(ts_dtype t) { return (unsigned)t < TS_DTYPE_COUNT ? k_dtypes[t].block : 1; }
size_t ts_dtype_bytes(ts_dtype t, uint64_t n) {
    if ((unsigned)t >= TS_DTYPE_COUNT || n % (uint64_t)k_dtypes[t].block) return 0;
    return (size_t)(n / (uint64_t)k_dtypes[t].block) * k_dtypes[t].size;
}
const char *ts_dtype_name(ts_dtype t) {
    return (unsigned)t < TS_DTYPE_COUNT ? k_dtypes[t].name : "?";
}

int ts_dtype_parse(const char *s) {
    for (int i = 0; i < TS_DTYPE_COUNT; i++)
        if (k_dtypes[i].safetensors && strcmp(s, k_dtypes[i].name) == 0) return i;
    return -1;
}

float ts_f16_to_f32(uint16_t h) {
    int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float v;
    if (exp == 0) v = ldexpf((float)man, -24); /* subnormal or zero */
    else if (exp == 31) v = man ? NAN : INFINITY;
    else v = ldexpf((float)(man | 0x400), exp - 25);
    return sign ? -v : v;
}

void ts_dtype_to_f32(ts_dtype t, const void *base, size_t first, size_t n, float *out) {
    const uint8_t *p = (const uint8_t *)base;
    switch (t) {
    case TS_DTYPE_F32:
        memcpy(out, p + first * 4, n * 4);
        break;
    case TS_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + (first + i) * 2, 2);
            out[i] = ts_bf16_to_f32(h);
        }
        break;
    case TS_DTYPE_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + (first + i) * 2, 2);
            out[i] = ts_f16_to_f32(h);
        }
        break;
    case TS_DTYPE_Q8_0:
    case TS_DTYPE_Q4_0: {
        size_t bs = k_dtypes[t].size;
        for (size_t i = 0; i < n; i++) {
            size_t e = first + i, b = e / TS_QBLOCK, j = e % TS_QBLOCK;
            const uint8_t *blk = p + b * bs;
            uint16_t h;
            memcpy(&h, blk, 2);
            int q;
            if (t == TS_DTYPE_Q8_0) q = (int8_t)blk[2 + j];
            else q = (j < TS_QBLOCK / 2 ? (blk[2 + j] & 15) : (blk[2 + j - TS_QBLOCK / 2] >> 4)) - 8;
            /* the product in float, as llama.cpp's dequantizer forms it */
            out[i] = ts_f16_to_f32(h) * (float)q;
        }
        break;
    }
    default:
        break;
    }
}
