/* dtype names, sizes and FP32 conversions (scalar: these are the oracle's loads). */
#include "io/dtype.h"

#include <math.h>

static const struct {
    const char *name;
    size_t size;
} k_dtypes[TS_DTYPE_COUNT] = {
    [TS_DTYPE_F32] = {"F32", 4},
    [TS_DTYPE_F16] = {"F16", 2},
    [TS_DTYPE_BF16] = {"BF16", 2},
};

size_t ts_dtype_size(ts_dtype t) { return (unsigned)t < TS_DTYPE_COUNT ? k_dtypes[t].size : 0; }
const char *ts_dtype_name(ts_dtype t) {
    return (unsigned)t < TS_DTYPE_COUNT ? k_dtypes[t].name : "?";
}

int ts_dtype_parse(const char *s) {
    for (int i = 0; i < TS_DTYPE_COUNT; i++)
        if (strcmp(s, k_dtypes[i].name) == 0) return i;
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
    default:
        break;
    }
}
