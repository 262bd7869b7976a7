/* Every step of one layer alone on the oracle's inputs, cpu against ref (oracle
 * substitution): the oracle runs the layer step by step; before each step the cpu target gets
 * the oracle's buffers and runs only that step, and its output is compared with the oracle's
 * under the phase-1 kernel gate. Used by phase 1 (every step at the model's prefill and
 * decode shapes) and by diagnosis (at the failing layer). */
#ifndef TS_DEPLOY_STEPS_CHECK_H
#define TS_DEPLOY_STEPS_CHECK_H
#include <jansson.h>
#include <stdio.h>

#include "model/model.h"
#include "target/cpu/cpu_target.h"

typedef struct ts_steps_result {
    int first_bad; /* first step failing the gate, -1 when none */
    int first_nan; /* first step with a NaN/Inf output, -1 when none */
    double worst_rel_l2, worst_pearson;
    long long nonfinite;
} ts_steps_result;

/* x_in (S, n_embd): the layer's input rows at positions pos0..; positions before pos0 must be
 * in both targets' caches (run the same layer with pos0 = 0 first). r and cp need max_seq >=
 * pos0 + S. Appends one JSON row per step to rows; prints a table to out (may be NULL). */
ts_status ts_steps_check(const ts_model *m, ts_ref *r, ts_cpu *cp, int layer, const float *x_in, int S, int pos0,
                         FILE *out, json_t *rows, ts_steps_result *res, ts_error *err);

#endif
