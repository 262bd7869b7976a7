/* Comparison metrics (core/metrics.h): double accumulation, NaN kept visible. */
#include "core/metrics.h"

#include <math.h>
#include <string.h>

/* The first index of the largest value (NaN never larger; x[0] NaN: 0), in two passes: the
 * maximum in 8 partial maxima the compiler vectorizes, then its first position. One pass that
 * carried the index was a chain of dependent compares: 90 us a token over a 151936-entry
 * vocabulary in `tessera bench`'s decode loop (42 us now), while the other threads wait. */
int ts_argmax(const float *x, int n) {
    if (n < 1 || x[0] != x[0]) return 0;
    float m[8];
    for (int j = 0; j < 8; j++) m[j] = x[0];
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    for (; i < n; i++) m[0] = x[i] > m[0] ? x[i] : m[0];
    float best = m[0];
    for (int j = 1; j < 8; j++) best = m[j] > best ? m[j] : best;
    for (i = 0; i < n; i++)
        if (x[i] == best) return i;
    return 0;
}

int ts_rank_of(const float *x, int n, int id) {
    int r = 0;
    for (int i = 0; i < n; i++) r += x[i] > x[id];
    return r;
}

double ts_softmax_prob(const float *x, int n, int id) {
    double mx = x[ts_argmax(x, n)], sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)x[i] - mx);
    return exp((double)x[id] - mx) / sum;
}

double ts_worst_min(double worst, double v) { return isnan(worst) || isnan(v) ? NAN : fmin(worst, v); }
double ts_worst_max(double worst, double v) { return isnan(worst) || isnan(v) ? NAN : fmax(worst, v); }

double ts_metric_value(const ts_metrics *m, const char *metric) {
    if (strcmp(metric, "max_abs") == 0) return m->max_abs;
    if (strcmp(metric, "rel_l2") == 0) return m->rel_l2;
    if (strcmp(metric, "pearson") == 0) return m->pearson;
    if (strcmp(metric, "cosine") == 0) return m->cosine;
    if (strcmp(metric, "min_row_cosine") == 0) return m->min_row_cosine;
    if (strcmp(metric, "nonfinite") == 0) return (double)m->nonfinite;
    if (strcmp(metric, "top1_frac") == 0) return m->rows ? (double)m->top1_match / m->rows : NAN;
    return NAN;
}

/* num / sqrt(x * y), the shape of cosine and Pearson: NaN in, NaN out; a zero-norm side
 * counts as agreement only when both are zero. */
static double normalized(double num, double x, double y) {
    if (isnan(num) || isnan(x) || isnan(y)) return NAN;
    if (x > 0 && y > 0) return num / sqrt(x * y);
    return x == y ? 1.0 : 0.0;
}

void ts_metrics_compute(const float *a, const float *b, int rows, int cols, ts_metrics *m) {
    memset(m, 0, sizeof *m);
    m->rows = rows;
    m->min_row_cosine = INFINITY;
    double sd = 0, sb = 0, sa = 0, sab = 0, ma = 0, mb = 0;
    size_t n = (size_t)rows * (size_t)cols;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) m->nonfinite++;
        ma += a[i];
        mb += b[i];
    }
    ma /= (double)n;
    mb /= (double)n;
    double cov = 0, va = 0, vb = 0;
    for (int r = 0; r < rows; r++) {
        const float *ar = a + (size_t)r * cols, *br = b + (size_t)r * cols;
        double rab = 0, ra = 0, rb = 0;
        for (int c = 0; c < cols; c++) {
            double x = ar[c], y = br[c], d = x - y;
            if (fabs(d) > m->max_abs || isnan(d)) m->max_abs = isnan(d) ? INFINITY : fabs(d);
            sd += d * d;
            sb += y * y;
            sa += x * x;
            sab += x * y;
            rab += x * y;
            ra += x * x;
            rb += y * y;
            cov += (x - ma) * (y - mb);
            va += (x - ma) * (x - ma);
            vb += (y - mb) * (y - mb);
        }
        double rc = normalized(rab, ra, rb);
        m->min_row_cosine = ts_worst_min(m->min_row_cosine, rc);
        if (ts_argmax(ar, cols) == ts_argmax(br, cols)) m->top1_match++;
    }
    m->rel_l2 = sb > 0 ? sqrt(sd / sb) : sqrt(sd);
    m->cosine = normalized(sab, sa, sb);
    m->pearson = normalized(cov, va, vb);
    if (m->nonfinite) {
        m->rel_l2 = m->pearson = m->cosine = m->min_row_cosine = NAN;
    }
}
