/* Q8_0 / Q4_0 quantizers, written after ggml's reference ones so that the bytes agree. Every
 * detail below is one that changes bytes: the scale is computed in float from the block's
 * absolute maximum (Q8_0: amax / 127) or from its signed extreme (Q4_0: the first element of
 * largest magnitude, divided by -8, so that extreme maps to code 0); the inverse scale is taken
 * from the float scale, not from its F16 rounding; Q8_0 rounds half away from zero (roundf),
 * Q4_0 adds 8.5 and truncates. This file is compiled without FMA contraction (C11 mode, no
 * -mfma), so x * id + 8.5f stays two roundings as in ggml's reference build. */
#include "io/quant.h"

#include <math.h>
#include <string.h>
#include <strings.h>

uint16_t ts_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u; /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u; /* >= 65520 (65504 + half an ulp): infinity */
    uint32_t e = a >> 23;                       /* biased float exponent */
    uint32_t m, shift;
    uint16_t base;
    if (e >= 113) { /* a normal half: drop 13 mantissa bits */
        m = a & 0x7fffffu;
        shift = 13;
        base = (uint16_t)((e - 112) << 10);
    } else { /* a subnormal half (unit 2^-24) or zero */
        m = e ? (a & 0x7fffffu) | 0x800000u : 0;
        shift = 126 - e;
        if (shift > 31) return sign;
        base = 0;
    }
    uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++; /* a carry into the exponent is right */
    return sign | (uint16_t)(base + h);
}

static void block_q8_0(const float *x, uint8_t *out) {
    float amax = 0.0f;
    for (int j = 0; j < TS_QBLOCK; j++) {
        float v = fabsf(x[j]);
        amax = amax > v ? amax : v;
    }
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t h = ts_f32_to_f16(d);
    memcpy(out, &h, 2);
    for (int j = 0; j < TS_QBLOCK; j++) out[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
}

static void block_q4_0(const float *x, uint8_t *out) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < TS_QBLOCK; j++)
        if (amax < fabsf(x[j])) { /* strict: the first of equal magnitudes decides the sign */
            amax = fabsf(x[j]);
            max = x[j];
        }
    const float d = max / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t h = ts_f32_to_f16(d);
    memcpy(out, &h, 2);
    for (int j = 0; j < TS_QBLOCK / 2; j++) {
        const float x0 = x[j] * id, x1 = x[TS_QBLOCK / 2 + j] * id;
        int q0 = (int)(x0 + 8.5f), q1 = (int)(x1 + 8.5f);
        q0 = q0 < 15 ? q0 : 15;
        q1 = q1 < 15 ? q1 : 15;
        out[2 + j] = (uint8_t)(q0 | (q1 << 4));
    }
}

ts_quant_result ts_quant_row(ts_dtype t, const float *x, int64_t n, void *out, int64_t *bad) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            *bad = i;
            return TS_QUANT_NONFINITE;
        }
    const size_t bs = ts_dtype_bytes(t, TS_QBLOCK);
    uint8_t *o = out;
    for (int64_t b = 0; b < n / TS_QBLOCK; b++) {
        const float *xb = x + b * TS_QBLOCK;
        if (t == TS_DTYPE_Q8_0) block_q8_0(xb, o + (size_t)b * bs);
        else block_q4_0(xb, o + (size_t)b * bs);
        uint16_t h;
        memcpy(&h, o + (size_t)b * bs, 2);
        if ((h & 0x7c00u) == 0x7c00u) {
            *bad = b * TS_QBLOCK;
            return TS_QUANT_RANGE;
        }
    }
    return TS_QUANT_OK;
}

int ts_quant_parse(const char *s) {
    if (!s) return -1;
    if (!strcasecmp(s, "q8_0")) return TS_DTYPE_Q8_0;
    if (!strcasecmp(s, "q4_0")) return TS_DTYPE_Q4_0;
    return -1;
}
