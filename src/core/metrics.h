/* Comparison metrics of an output under test against a reference (double accumulation):
 * what every gate measures, and what the cpu target's autotuner checks a candidate tile with.
 * In core/ because targets and deploy both use them; the thresholds live in deploy/gates.h. */
#ifndef TS_CORE_METRICS_H
#define TS_CORE_METRICS_H
#include <stdint.h>

typedef struct ts_metrics {
    double max_abs;        /* max |a - b| */
    double rel_l2;         /* |a - b| / |b| */
    double pearson;        /* correlation over all elements */
    double cosine;         /* whole-tensor cosine */
    double min_row_cosine; /* worst per-position cosine */
    int64_t nonfinite;     /* NaN/Inf count in a (the output under test) */
    int top1_match;        /* rows whose argmax agrees */
    int rows;
} ts_metrics;

/* a: output under test, b: reference; both (rows, cols) row-major. */
void ts_metrics_compute(const float *a, const float *b, int rows, int cols, ts_metrics *m);
int ts_argmax(const float *x, int n);
/* How many entries are strictly larger than x[id] (0 = top-1). */
int ts_rank_of(const float *x, int n, int id);
double ts_softmax_prob(const float *x, int n, int id);
/* Running worst values where a NaN, once seen, stays (fmin/fmax alone would drop it). */
double ts_worst_min(double worst, double v);
double ts_worst_max(double worst, double v);
/* Measured value of a named metric from a ts_metrics. */
double ts_metric_value(const ts_metrics *m, const char *metric);

#endif
