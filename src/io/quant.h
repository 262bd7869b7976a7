/* Round-to-nearest quantizers for GGUF's Q8_0 and Q4_0 blocks (layouts in io/dtype.h). They
 * reproduce ggml's reference quantizers (quantize_row_q8_0_ref / quantize_row_q4_0_ref), which
 * llama-quantize uses for these two types when no importance matrix is given, bit for bit: the
 * same scale choice, the same float operations in the same order, the scale rounded to F16 to
 * nearest even. That makes a file quantized here byte-identical to llama.cpp's. */
#ifndef TS_IO_QUANT_H
#define TS_IO_QUANT_H
#include <stdint.h>

#include "io/dtype.h"

/* IEEE half, rounded to nearest even (F16C's _cvtss_sh(x, 0)); NaN stays a quiet NaN,
 * magnitudes from 65520 up become infinity. */
uint16_t ts_f32_to_f16(float f);
/* What an F16 KV cache stores for f (--kv-cache f16): ts_f32_to_f16 of f saturated at +-65504,
 * the largest half, rather than infinity (a key past it would turn its scores into NaN);
 * NaN stays NaN. The oracle and every cpu variant round their K and V rows this way. */
static inline uint16_t ts_f32_to_f16_sat(float f) {
    return ts_f32_to_f16(f > 65504.0f ? 65504.0f : f < -65504.0f ? -65504.0f : f);
}

typedef enum ts_quant_result {
    TS_QUANT_OK = 0,
    TS_QUANT_NONFINITE, /* *bad: index of the first NaN / Inf input */
    TS_QUANT_RANGE,     /* *bad: first element of a block whose scale overflows F16 */
} ts_quant_result;

/* Quantizes n floats (n a multiple of TS_QBLOCK) into ts_dtype_bytes(t, n) bytes at out;
 * t is TS_DTYPE_Q8_0 or TS_DTYPE_Q4_0. Inputs are checked first: on anything but TS_QUANT_OK
 * nothing useful is in out. */
ts_quant_result ts_quant_row(ts_dtype t, const float *x, int64_t n, void *out, int64_t *bad);

/* Parses "q8_0" / "q4_0" (either case); -1 for anything else. */
int ts_quant_parse(const char *s);

#endif
