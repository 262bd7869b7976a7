/* Phase 0, the oracle: load and validate every tensor, run the ref target on canonical
 * inputs, and (given HF golden logits) apply the phase-0 gate. */
#ifndef TS_DEPLOY_PHASE0_H
#define TS_DEPLOY_PHASE0_H
#include <jansson.h>
#include <stdio.h>

#include "tessera.h"

typedef struct ts_phase0_opts {
    const char *golden; /* golden.json, or NULL to look for MODEL/golden/golden.json */
    FILE *out;          /* human-readable table, or NULL */
    int threads;        /* oracle threads; 0 = all cores */
} ts_phase0_opts;

/* Runs phase 0. *report receives the phase0.json object (caller decrefs) whenever the model
 * could be examined; returns TS_ERR_GATE when a gate fails, other errors as they come. */
ts_status ts_phase0_run(const char *model_dir, const ts_phase0_opts *o, json_t **report,
                        ts_error *err);

#endif
