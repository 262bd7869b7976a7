/* Automatic diagnosis after a failed gate (DESIGN.md): the per-layer cosine of the cpu target
 * against the oracle on one prompt, then, at the first layer that breaks the phase-2 block
 * thresholds, every step run alone on the oracle's inputs (oracle substitution) against the
 * oracle's output, then the origin of any NaN/Inf. The report names the step, its shape and
 * the numbers. */
#ifndef TS_DEPLOY_DIAGNOSE_H
#define TS_DEPLOY_DIAGNOSE_H
#include <jansson.h>
#include <stdio.h>

#include "model/model.h"
#include "target/cpu/cpu_target.h"

/* co: the cpu options the failing phase ran with (threads, fault). *report: the
 * diagnosis.json object (caller decrefs) with "summary", "layers", "steps", "failing_layer",
 * "failing_step", "nan_origin". Returns TS_OK when the diagnosis itself ran. */
ts_status ts_diagnose(const ts_model *m, const ts_cpu_opts *co, FILE *out, json_t **report, ts_error *err);

/* Markdown section for report.md from a diagnosis object. */
void ts_diagnosis_markdown(const json_t *diag, FILE *md);

#endif
