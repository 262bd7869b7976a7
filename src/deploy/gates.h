/* Numerical gates: the metrics that compare a target's output with the oracle's, and the one
 * table of thresholds every phase reads (printed next to the measured values). */
#ifndef TS_DEPLOY_GATES_H
#define TS_DEPLOY_GATES_H
#include <stdint.h>
#include <stdio.h>

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

typedef enum ts_gate_op { TS_GATE_GE, TS_GATE_LE } ts_gate_op;

typedef struct ts_threshold {
    const char *phase;  /* "phase0", ... */
    const char *metric; /* "pearson", "rel_l2", "top1_frac", "nonfinite" */
    ts_gate_op op;
    double value;
} ts_threshold;

/* The built-in table; n_out receives its length. */
const ts_threshold *ts_thresholds(int *n_out);
/* Threshold for (phase, metric); NULL when the table has none. */
const ts_threshold *ts_threshold_find(const char *phase, const char *metric);
int ts_threshold_pass(const ts_threshold *t, double measured);
/* The phase-2 per-position cosine floor for a head_dim (64 / 128 / 256 buckets). */
const ts_threshold *ts_phase2_row_cosine(int head_dim);
/* Checks measured against the table's (phase, metric) threshold, prints one aligned table
 * line to out (may be NULL), clears *all_pass on failure and returns the row as JSON
 * (a json_t *, returned as void * so this header needs no jansson). */
void *ts_gate_row(const char *phase, const char *metric, double measured, FILE *out, int *all_pass);
/* Running worst values where a NaN, once seen, stays (fmin/fmax alone would drop it). */
double ts_worst_min(double worst, double v);
double ts_worst_max(double worst, double v);
/* A JSON number, or null for NaN/Inf (jansson refuses non-finite reals); a json_t *. */
void *ts_json_number(double v);
/* Measured value of a named metric from a ts_metrics. */
double ts_metric_value(const ts_metrics *m, const char *metric);

#endif
