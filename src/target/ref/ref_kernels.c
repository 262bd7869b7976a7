/* FP32 reference kernels. Weights are converted row by row from their stored dtype; sums are
 * accumulated in double so the oracle's own rounding is far below any gate threshold. */
#include "target/ref/ref_kernels.h"

#include <math.h>
#include <stdint.h>

#include "target/ref/ref_dot.h"

void ts_ref_rmsnorm(float *out, const float *x, const ts_tensor *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) {
        float wi;
        ts_dtype_to_f32(w->dtype, w->data, (size_t)i, 1, &wi);
        out[i] = wi * (x[i] * r);
    }
}

double ts_ref_dot_generic(const float *a, const float *b, int n) { return ts_ref_dot_lanes(a, b, n); }

double ts_ref_dot(const float *a, const float *b, int n) {
#if defined(__x86_64__) || defined(__i386__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return ts_ref_dot_avx2(a, b, n);
#endif
    return ts_ref_dot_generic(a, b, n);
}

void ts_ref_dot2_generic(const float *x, const double *r0, const double *r1, int n, double out[2]) {
    ts_ref_dot2_lanes(x, r0, r1, n, out);
}

void ts_ref_dot2(const float *x, const double *r0, const double *r1, int n, double out[2]) {
#if defined(__x86_64__) || defined(__i386__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        ts_ref_dot2_avx2(x, r0, r1, n, out);
        return;
    }
#endif
    ts_ref_dot2_generic(x, r0, r1, n, out);
}

/* Weight row n of W widened to double (through f, K floats). */
static void row_to_double(const ts_tensor *W, int n, int K, float *f, double *d) {
    ts_dtype_to_f32(W->dtype, W->data, (size_t)n * (size_t)K, (size_t)K, f);
    for (int i = 0; i < K; i++) d[i] = f[i];
}

/* Two output columns at a time: their weight rows widened to double once, then every
 * activation row dotted with both. Each output is still one ts_ref_dot_lanes sum, so the
 * pairing (and so the split of columns between threads) does not change any bit. Widening
 * costs a pass over the row, so it pays only with many activation rows: below
 * TS_REF_PAIR_MIN_ROWS the row is converted to float and dotted one column at a time
 * (qwen3-1.7b, 2 threads: 1-16 tokens 2-45% faster that way, 64 tokens 15% slower). */
void ts_ref_matmul_cols(float *out, const float *x, const ts_tensor *W, const ts_tensor *b, int S, int N,
                        int K, int n0, int n1, float *row) {
    if (S < TS_REF_PAIR_MIN_ROWS) {
        for (int n = n0; n < n1; n++) {
            ts_dtype_to_f32(W->dtype, W->data, (size_t)n * (size_t)K, (size_t)K, row);
            float bias = 0;
            if (b) ts_dtype_to_f32(b->dtype, b->data, (size_t)n, 1, &bias);
            for (int s = 0; s < S; s++)
                out[(size_t)s * N + n] = (float)ts_ref_dot(x + (size_t)s * K, row, K) + bias;
        }
        return;
    }
    double *d0 = (double *)(((uintptr_t)row + 7) & ~(uintptr_t)7), *d1 = d0 + K;
    float *f = (float *)(d1 + K);
    for (int n = n0; n < n1; n += 2) {
        int two = n + 1 < n1;
        row_to_double(W, n, K, f, d0);
        if (two) row_to_double(W, n + 1, K, f, d1);
        float bias[2] = {0, 0};
        if (b) ts_dtype_to_f32(b->dtype, b->data, (size_t)n, two ? 2 : 1, bias);
        for (int s = 0; s < S; s++) {
            double o[2];
            ts_ref_dot2(x + (size_t)s * K, d0, two ? d1 : d0, K, o);
            out[(size_t)s * N + n] = (float)o[0] + bias[0];
            if (two) out[(size_t)s * N + n + 1] = (float)o[1] + bias[1];
        }
    }
}

void ts_ref_matmul(float *out, const float *x, const ts_tensor *W, const ts_tensor *b, int S, int N,
                   int K, float *row) {
    ts_ref_matmul_cols(out, x, W, b, S, N, K, 0, N, row);
}

void ts_ref_embed(float *out, const ts_tensor *E, int id, int n_embd) {
    ts_dtype_to_f32(E->dtype, E->data, (size_t)id * (size_t)n_embd, (size_t)n_embd, out);
}

void ts_ref_rope_freqs(float *inv_freq, const ts_config *c) {
    const double pi = 3.14159265358979323846;
    int head_dim = c->head_dim, orig_max_pos = c->rope_orig_max_pos;
    double theta = c->rope_theta, factor = c->rope_llama3 ? c->rope_factor : 0, low = c->rope_low_freq_factor,
           high = c->rope_high_freq_factor;
    for (int i = 0; i < head_dim / 2; i++) {
        double f = 1.0 / pow(theta, (double)(2 * i) / head_dim);
        if (c->rope_freq_div) f /= c->rope_freq_div[i];
        if (factor > 0) {
            /* llama3: long wavelengths are slowed by `factor`, short ones kept, and the band
             * between is interpolated smoothly. */
            double wavelen = 2 * pi / f;
            double low_wl = orig_max_pos / low, high_wl = orig_max_pos / high;
            if (wavelen > low_wl) f = f / factor;
            else if (wavelen >= high_wl) {
                double smooth = (orig_max_pos / wavelen - low) / (high - low);
                f = (1 - smooth) * f / factor + smooth * f;
            }
        }
        inv_freq[i] = (float)f;
    }
}

void ts_ref_rope(float *x, int n_heads, int head_dim, int pos, const float *inv_freq) {
    int half = head_dim / 2;
    for (int i = 0; i < half; i++) {
        /* The angle is rounded to float first, as transformers computes it in float32. */
        float angle = (float)pos * inv_freq[i];
        float c = (float)cos((double)angle), s = (float)sin((double)angle);
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)h * head_dim;
            float x0 = v[i], x1 = v[i + half];
            v[i] = x0 * c - x1 * s;
            v[i + half] = x1 * c + x0 * s;
        }
    }
}

void ts_ref_attention(float *out, const float *q, const float *k, const float *v, int n_ctx,
                      int n_heads, int n_kv, int hd, int kv_stride, float *scores) {
    int group = n_heads / n_kv;
    double scale = 1.0 / sqrt((double)hd);
    for (int h = 0; h < n_heads; h++) {
        const float *qh = q + (size_t)h * hd;
        int g = h / group;
        double mx = -INFINITY;
        for (int j = 0; j < n_ctx; j++) {
            const float *kj = k + (size_t)j * kv_stride + (size_t)g * hd;
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)qh[i] * kj[i];
            scores[j] = (float)(d * scale);
            if (scores[j] > mx) mx = scores[j];
        }
        double sum = 0;
        for (int j = 0; j < n_ctx; j++) sum += exp(scores[j] - mx);
        for (int j = 0; j < n_ctx; j++) scores[j] = (float)(exp(scores[j] - mx) / sum);
        float *oh = out + (size_t)h * hd;
        for (int i = 0; i < hd; i++) {
            double acc = 0;
            for (int j = 0; j < n_ctx; j++)
                acc += (double)scores[j] * v[(size_t)j * kv_stride + (size_t)g * hd + i];
            oh[i] = (float)acc;
        }
    }
}

void ts_ref_silu_mul(float *out, const float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        double g = gate[i];
        out[i] = (float)(g / (1.0 + exp(-g)) * up[i]);
    }
}
