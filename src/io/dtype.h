/* Element types of weight files and their conversions to FP32. BF16 is the upper half of an
 * IEEE float32; F16 is IEEE half. Loads go through memcpy so unaligned views are never UB. */
#ifndef TS_IO_DTYPE_H
#define TS_IO_DTYPE_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum ts_dtype {
    TS_DTYPE_F32 = 0,
    TS_DTYPE_F16 = 1,
    TS_DTYPE_BF16 = 2,
    TS_DTYPE_COUNT
} ts_dtype;

size_t ts_dtype_size(ts_dtype t);
const char *ts_dtype_name(ts_dtype t); /* safetensors spelling: "F32", "F16", "BF16" */
/* Parses a safetensors dtype string; returns -1 for anything else. */
int ts_dtype_parse(const char *s);

static inline float ts_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest even; NaN stays NaN (quiet). */
static inline uint16_t ts_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float ts_f16_to_f32(uint16_t h);

/* Converts n elements starting at element index `first` of a raw buffer to float32. */
void ts_dtype_to_f32(ts_dtype t, const void *base, size_t first, size_t n, float *out);

#endif
