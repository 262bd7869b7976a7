/* Phase 5's choice of the final decode plan by measurement. The candidates are the complete
 * plans a deployment can ship: weights read from the mmap or copied into huge pages, with the
 * default GEMM tiles or phase 4's autotuned ones. Each runs in its own session; they decode the
 * same greedy tokens from the same context in alternating rounds (the order rotating, after a
 * warm-up round), so a drift of a shared machine's speed favours none. Phase 4's plan is kept
 * unless another is faster beyond the noise band: faster in all rounds but at most one, by more
 * than the phase5/plan_deficit threshold (median of the per-round ratios). The same numbers
 * give the gate: the deficit of the shipped plan against every measured alternative. */
#ifndef TS_DEPLOY_PLAN_CHOICE_H
#define TS_DEPLOY_PLAN_CHOICE_H
#include <jansson.h>

#include "deploy/phases.h"

enum { TS_PLAN_ROUNDS = 5 };

/* tiles: phase 4's (NULL: only the default tiles are a candidate); copy4: phase 4's placement;
 * forced: the placement was given (--weights), so only it is a candidate. *report: the
 * candidates with their per-round rates, the choice and why (caller decrefs); *copy and *tuned:
 * the chosen plan. o->debug_slow_plan k >= 1 slows candidate k - 1 by 30 ms a token (tests). */
ts_status ts_plan_choose(const ts_model *m, const ts_perf_opts *o, const json_t *tiles, int copy4, int forced, int ctx,
                         json_t **report, int *copy, int *tuned, ts_error *err);

/* The gate metric, recomputed from a report's rounds: the largest median ratio - 1 of any
 * candidate faster than the chosen one in all rounds but at most one (0 when none is). NaN
 * when the report is malformed. */
double ts_plan_deficit(const json_t *report);

#endif
