/* The exp every vector exp uses (attn_avx512.c for softmax, rows_avx2.c for SiLU, the sampler's
 * sums in runtime/sample.c): n = round(x / ln 2), r = x - n ln 2 with ln 2 in two parts (the first
 * exact in few bits, so n * it is exact), then the degree-7 Taylor polynomial of e^r in Horner
 * order, highest coefficient first, and 2^n. One table, so the kernels stay one algorithm (the
 * sampler's SSE2 copy rounds without FMA, so its last bits may differ). */
#ifndef TS_CORE_EXP_POLY_H
#define TS_CORE_EXP_POLY_H

#define TS_EXP_LOG2E 1.44269504088896341f
#define TS_EXP_LN2_HI 0.693359375f
#define TS_EXP_LN2_LO (-2.12194440e-4f)
#define TS_EXP_DEGREE 7
static const float ts_exp_taylor[TS_EXP_DEGREE + 1] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24,
                                                      1.0f / 6,    0.5f,        1.0f,        1.0f};

#endif
