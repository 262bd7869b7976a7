/* Phase 7, the independent evaluator (`tessera eval DEPLOY_DIR`): trusts only manifest.json
 * and the model files. Re-hashes the weights, audits the thresholds against the built-in
 * table, re-derives the gates of phases 1-3 on other inputs, checks that greedy output is
 * byte-identical across two runs, and writes evaluation.md with a verdict. */
#ifndef TS_DEPLOY_EVALUATE_H
#define TS_DEPLOY_EVALUATE_H
#include <stdint.h>
#include <stdio.h>

#include "tessera.h"

typedef enum ts_verdict { TS_VERDICT_PASS = 0, TS_VERDICT_WARN = 1, TS_VERDICT_FAIL = 2 } ts_verdict;

typedef struct ts_eval_opts {
    FILE *out;
    int threads;
    uint64_t seed; /* inputs for the re-derived gates; never 0 (0 is deploy's canonical set) */
} ts_eval_opts;

/* Returns TS_OK with *verdict set whenever the evaluation itself could run (a FAIL verdict is
 * a result, not an error); other statuses when it could not (unreadable manifest, ...). */
ts_status ts_evaluate(const char *deploy_dir, const ts_eval_opts *o, ts_verdict *verdict, ts_error *err);

#endif
