/* What the evaluator's files share (phase7_evaluate.c runs the checks in order, eval_audit.c
 * audits what the deployment recorded, eval_perf.c judges performance claims, eval_baseline.c
 * compares with a baseline deployment): the list of checks every result goes to, and the
 * claim rule. */
#ifndef TS_DEPLOY_EVAL_INTERNAL_H
#define TS_DEPLOY_EVAL_INTERNAL_H
#include <jansson.h>
#include <stdio.h>

#include "deploy/phases.h"

enum { TS_EVAL_OK = 0, TS_EVAL_WARN = 1, TS_EVAL_FAIL = 2 };

typedef struct ts_eval_checks {
    FILE *md, *out;
    int fails, warns;
    json_t *rows; /* every check, for phase7.json */
} ts_eval_checks;

/* One check: a line (OK / WARN / FAIL + the numbers) in evaluation.md, phase7.json and out. */
void ts_eval_note(ts_eval_checks *k, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- the claim rule (eval_perf.c), a pure function of its numbers and the phase-7 rows of
 * the threshold table ----
 * A claim is one-sided: a deployment must not claim more speed than it has; being faster is
 * fine. With c the claimed mean, s1 its recorded sd counted at most perf_claim_sd_share * c,
 * g the re-measured mean and s2 its sd, over n1 and n2 trials:
 *   band  = perf_rel_dev * c + perf_sigma * sqrt(s1^2/n1 + s2^2/n2)
 *   rates (tok/s, higher is better): OK when g >= c - band, FAIL when g < perf_floor * c,
 *     WARN in between (slower than claimed beyond the noise, above the floor);
 *   times (ms, lower is better): OK when g <= c + band, FAIL when g > c / perf_floor, WARN
 *     in between.
 * The floor binds whatever the spread, so an inflated sd can only turn a WARN into an OK. */
typedef struct ts_eval_stat {
    double mean, sd;
    int n; /* trials */
} ts_eval_stat;

typedef struct ts_eval_band {
    double sd_used;     /* the claim's sd as counted (capped) */
    double band;        /* the noise band around the claim */
    double bound;       /* OK up to here: c - band (rates) or c + band (times) */
    double floor_bound; /* FAIL beyond here: floor * c (rates) or c / floor (times) */
} ts_eval_band;

/* TS_EVAL_OK / WARN / FAIL; a claim or measurement that is not a positive finite number FAILs. */
int ts_eval_claim_verdict(ts_eval_stat claim, ts_eval_stat got, int higher_is_better, ts_eval_band *b);

/* The recorded statistics of one measurement row (ts_measurement_json: warm_ms_mean/sd, the
 * rate under rate_key and its _sd) against its samples_tok_s, tokens per trial given; 0 when
 * they agree, else 1 with why filled. n_out: the number of samples (0 when the row has none). */
int ts_eval_row_stats(const json_t *row, const char *rate_key, double tokens, int *n_out, char *why, size_t len);

/* The value of the threshold table's phase-7 row `metric`. */
double ts_eval_table(const char *metric);
/* o[key] as a number; NaN when absent or not a number. */
double ts_eval_num(const json_t *o, const char *key);

/* One kind of claim: TTFT (ms, lower is better) or decode (tok/s); ts_eval_kinds[0] and [1]. */
typedef struct ts_eval_kind {
    const char *rows, *size_key, *mean_key, *sd_key, *rate_key, *unit; /* manifest.performance keys, unit */
    const char *rep_rows, *rep_mean, *rep_sd;                           /* the phase report's row keys */
    int higher;                                                         /* higher is better (a rate) */
} ts_eval_kind;
extern const ts_eval_kind ts_eval_kinds[2];
/* "TTFT at 128 tokens", "decode at context 1024" */
void ts_eval_label(const ts_eval_kind *kd, int size, char *buf, size_t len);
/* The row of rows whose size_key is size, or NULL. */
const json_t *ts_eval_find_size(const json_t *rows, const char *size_key, json_int_t size);
/* A claim's statistics; n from its samples, else the manifest's trial count. */
ts_eval_stat ts_eval_claim_stat(const ts_eval_kind *kd, const json_t *row, int trials);

/* ---- eval_audit.c ---- */
/* The manifest's thresholds against the built-in table: a loosened or missing one FAILs. */
void ts_eval_audit_thresholds(ts_eval_checks *k, const json_t *man);
/* The recorded gates of phases 0-6: each row's pass against its numbers and the built-in
 * threshold, the manifest's copy against DIR/phaseN.json, and what each report can say about
 * itself (samples against means, lockstep runs against the violation count, phase 0's worst
 * values against its sequences). reports[p]: the phase reports read (caller decrefs). */
void ts_eval_recorded_gates(ts_eval_checks *k, const json_t *man, const char *dir, json_t *reports[TS_N_PHASES]);

/* ---- eval_perf.c and eval_baseline.c ---- */
/* Re-measures every claim in the manifest (up to perf_attempts times while it is not
 * reproduced) and judges it; appends {kind, size, mean, sd, n, ...} of each re-measurement to
 * got. same_kernels: this process runs the kernels the claims were measured with (when not,
 * a claim not reproduced is a warning: the numbers are not comparable). p4, p5: the phase
 * reports (may be NULL), whose rows the manifest's claims must match. */
void ts_eval_remeasure(ts_eval_checks *k, const ts_model *m, const json_t *man, int threads, int same_kernels,
                       const json_t *p4, const json_t *p5, json_t *got);
/* The same model (config and weight-file sha256) in both manifests; TS_ERR_ARG otherwise. */
ts_status ts_eval_same_model(const json_t *man, const json_t *base, const char *base_dir, ts_error *err);
/* Gates and claims of this deployment against a baseline's manifest; the comparison tables go
 * to tab (markdown) and a summary object is returned (caller decrefs). */
json_t *ts_eval_baseline(ts_eval_checks *k, const json_t *man, const json_t *base, const char *base_dir,
                         const json_t *got, FILE *tab);

#endif
