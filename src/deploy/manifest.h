/* Phase 6 (finalize, partial): manifest.json and report.md of a deployment directory from
 * the phase reports that ran (prefill/decode trajectories and tiles from phases 4-5), plus the
 * diagnosis when a gate failed (diag may be NULL). */
#ifndef TS_DEPLOY_MANIFEST_H
#define TS_DEPLOY_MANIFEST_H
#include <jansson.h>

#include "deploy/phases.h"
#include "model/model.h"


/* reports[p]: phase p's report object or NULL when it did not run (borrowed). threads: the
 * cpu target's thread count. forced: a gate failed and --force ran the later phases anyway. */
ts_status ts_manifest_write(const ts_model *m, const char *out_dir, json_t *const reports[TS_N_PHASES],
                            int threads, int forced, const json_t *diag, ts_error *err);

#endif
