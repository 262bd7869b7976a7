/* Numerical gates: the one table of thresholds every phase reads (printed next to the measured
 * values), applied to the metrics of core/metrics.h. */
#ifndef TS_DEPLOY_GATES_H
#define TS_DEPLOY_GATES_H
#include <stdint.h>
#include <stdio.h>

#include "core/metrics.h"


typedef enum ts_gate_op { TS_GATE_GE, TS_GATE_LE } ts_gate_op;

typedef struct ts_threshold {
    const char *phase;  /* "phase0", ... */
    const char *metric; /* "pearson", "rel_l2", "top1_frac", "nonfinite" */
    ts_gate_op op;
    double value;
    /* NULL: every deployment is held to it; else only one that took this option, as the
     * manifest's model records it: "Q8_0" / "Q4_0" (model.quant), "f16" (model.kv_cache) */
    const char *option;
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
/* A JSON number, or null for NaN/Inf (jansson refuses non-finite reals); a json_t *. */
void *ts_json_number(double v);

#endif
