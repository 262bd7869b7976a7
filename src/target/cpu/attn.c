/* Attention pieces shared by every variant: the softmax over one row of scores, and the
 * scalar attention row (the portable fallback). */
#include <math.h>
#include <stddef.h>

#include "target/cpu/attn.h"

void ts_cpu_softmax(float *sc, int n) {
    float mx = -INFINITY;
    for (int j = 0; j < n; j++)
        if (sc[j] > mx) mx = sc[j];
    double sum = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = expf(sc[j] - mx);
        sum += sc[j];
    }
    float inv = (float)(1.0 / sum);
    for (int j = 0; j < n; j++) sc[j] *= inv;
}

/* a . (the cache row at element kb), n elements */
static float dot_scalar(const float *a, const void *k, size_t kb, int n, int f16) {
    float s[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += a[i + j] * ts_kv_get(k, kb + i + j, f16);
    for (; i < n; i++) s[0] += a[i] * ts_kv_get(k, kb + i, f16);
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

void ts_cpu_attn_row_scalar(float *out, const float *q, const void *k, const void *v, int n_ctx,
                            int stride, int hd, float scale, float *scores, int f16) {
    for (int j = 0; j < n_ctx; j++) scores[j] = dot_scalar(q, k, ts_kv_idx(j, stride, hd), hd, f16) * scale;
    ts_cpu_softmax(scores, n_ctx);
    for (int i = 0; i < hd; i++) out[i] = 0;
    for (int j = 0; j < n_ctx; j++) {
        size_t vb = ts_kv_idx(j, stride, hd);
        for (int i = 0; i < hd; i++) out[i] += scores[j] * ts_kv_get(v, vb + i, f16);
    }
}

