/* Phase 0, the oracle: load and validate every tensor, run the ref target on canonical
 * inputs, and (given HF golden logits, or an interpreter to make them with tools/hf_golden.py)
 * apply the phase-0 gate. Without goldens the verdict is "not compared": no failure, but no
 * passed gate either (manifest.h, ts_phase_verdict). */
#ifndef TS_DEPLOY_PHASE0_H
#define TS_DEPLOY_PHASE0_H
#include <jansson.h>
#include <stdio.h>

#include "tessera.h"

typedef struct ts_phase0_opts {
    const char *golden;     /* golden.json, or NULL to look for MODEL/golden/golden.json */
    FILE *out;              /* human-readable table, or NULL */
    int threads;            /* oracle threads; 0 = all cores */
    const char *hf_python;  /* --hf-python: make the goldens with transformers under this interpreter */
    const char *hf_script;  /* --hf-script, or NULL to find tools/hf_golden.py (hf_golden.h) */
    const char *deploy_dir; /* with hf_python: the goldens go to DEPLOY_DIR/golden/ */
} ts_phase0_opts;

/* Runs phase 0. *report receives the phase0.json object (caller decrefs) whenever the model
 * could be examined; its "verdict" is "PASS", "FAIL" or "not compared" (no goldens: "pass" is
 * null). Returns TS_OK for PASS and not compared, TS_ERR_GATE when a gate fails, other errors
 * as they come (a failing --hf-python run is TS_ERR_IO). golden and hf_python exclude each
 * other (TS_ERR_ARG). */
ts_status ts_phase0_run(const char *model_dir, const ts_phase0_opts *o, json_t **report,
                        ts_error *err);

#endif
