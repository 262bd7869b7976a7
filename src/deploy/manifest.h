/* Phase 6 (finalize, partial): manifest.json and report.md of a deployment directory from
 * the phase reports that ran (prefill/decode trajectories and tiles from phases 4-5), plus the
 * diagnosis when a gate failed (diag may be NULL). */
#ifndef TS_DEPLOY_MANIFEST_H
#define TS_DEPLOY_MANIFEST_H
#include <jansson.h>

#include "deploy/phases.h"
#include "model/model.h"


/* A phase's verdict. NOT_COMPARED: its checks ran clean but the comparison that makes it a
 * gate had nothing to compare with (phase 0 without Hugging Face golden logits). It is not a
 * failure (later phases run, deploy exits 0) and not a passed gate (all_gates_passed is false,
 * eval warns). */
typedef enum ts_phase_verdict { TS_PHASE_PASS, TS_PHASE_FAIL, TS_PHASE_NOT_COMPARED } ts_phase_verdict;

/* The verdict of a phase report or of a manifest's gates entry: its "verdict" string ("PASS",
 * "FAIL", "not compared") when present, else its "pass" boolean (reports before verdicts).
 * Anything else is FAIL. */
ts_phase_verdict ts_phase_verdict_of(const json_t *report);
const char *ts_phase_verdict_name(ts_phase_verdict v);

/* reports[p]: phase p's report object or NULL when it did not run (borrowed). threads: the
 * cpu target's thread count. forced: a gate failed and --force ran the later phases anyway. */
ts_status ts_manifest_write(const ts_model *m, const char *out_dir, json_t *const reports[TS_N_PHASES],
                            int threads, int forced, const json_t *diag, ts_error *err);

#endif
