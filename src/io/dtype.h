/* Element types of weight files and their conversions to FP32. BF16 is the upper half of an
 * IEEE float32; F16 is IEEE half. Q8_0 and Q4_0 are GGUF's 32-element blocks (an F16 scale d,
 * then 32 signed bytes, or 16 bytes of 4-bit codes: element j < 16 is the low nibble of byte j,
 * element j + 16 its high nibble, value (code - 8) * d). Loads go through memcpy so unaligned
 * views are never UB. */
#ifndef TS_IO_DTYPE_H
#define TS_IO_DTYPE_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum ts_dtype {
    TS_DTYPE_F32 = 0,
    TS_DTYPE_F16 = 1,
    TS_DTYPE_BF16 = 2,
    TS_DTYPE_Q8_0 = 3,
    TS_DTYPE_Q4_0 = 4,
    TS_DTYPE_COUNT
} ts_dtype;

#define TS_QBLOCK 32 /* elements per Q8_0 / Q4_0 block */

/* Bytes per element of a plain type; 0 for block types (use ts_dtype_row_bytes). */
size_t ts_dtype_size(ts_dtype t);
/* Elements per block: 1 for plain types, TS_QBLOCK for Q8_0 / Q4_0. */
int ts_dtype_block(ts_dtype t);
/* Bytes of n elements (n a multiple of the block size), or 0 when n is not. */
size_t ts_dtype_bytes(ts_dtype t, uint64_t n);
const char *ts_dtype_name(ts_dtype t); /* "F32", "F16", "BF16", "Q8_0", "Q4_0" */
/* Parses a safetensors dtype string (plain types only); returns -1 for anything else. */
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

/* Converts n elements starting at element index `first` of a raw buffer to float32; for block
 * types any element range is allowed (the blocks holding it are decoded). */
void ts_dtype_to_f32(ts_dtype t, const void *base, size_t first, size_t n, float *out);

#endif
