/* Phase 6, finalize: trajectory.svg, manifest.json and report.md, then the deployment is read
 * back exactly as `tessera run DEPLOY_DIR` reads it (model, threads, tiles from the manifest)
 * and generates: the gate is that generation runs, twice identically, and the report is
 * complete. */
#ifndef TS_DEPLOY_FINALIZE_H
#define TS_DEPLOY_FINALIZE_H
#include <jansson.h>
#include <stdio.h>

#include "deploy/manifest.h"

ts_status ts_phase6_run(const ts_model *m, const char *out_dir, json_t *reports[TS_N_PHASES], int threads, int forced,
                        const json_t *diag, FILE *out, ts_error *err);

#endif
