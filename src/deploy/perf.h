/* Phases 4 and 5: the optimization trajectory. Each phase times the cpu plan with its
 * optimizations switched on one after another (the unfused, copying baseline first, autotuned
 * tiles last), cold (a new session, weights bound, first forward) and warm (>= 5 trials, mean
 * and standard deviation), then the final plan at the requested sizes, with the time per
 * dispatch. Phase 4 is prefill (TTFT), autotunes the tiles and picks the weight placement
 * (placement.h); phase 5 is decode (tok/s, GB/s) with the tiles and placement phase 4 chose. */
#ifndef TS_DEPLOY_PERF_H
#define TS_DEPLOY_PERF_H
#include <jansson.h>
#include <stdio.h>

#include "model/model.h"
#include "target/cpu/cpu_target.h"

#define TS_PERF_MAX_SIZES 8

typedef struct ts_perf_opts {
    FILE *out;
    int threads;
    int trials;                         /* warm trials per measurement, >= 5 */
    int prefill;                        /* prompt length of the prefill trajectory */
    int sizes[TS_PERF_MAX_SIZES];       /* phase 4: TTFT prompt lengths; phase 5: decode contexts */
    int n_sizes;
    int decode_tokens;                  /* tokens per decode trial */
    int weights;                        /* phase 4's placement: -1 probe, 0 mmap, 1 copy (--weights) */
    const ts_cpu_fault *fault;
} ts_perf_opts;

/* Defaults: 5 trials, trajectory at 128 tokens, TTFT at 128 and 512, decode contexts 128 and
 * 1024 with 8 tokens per trial (phase 5 replaces sizes). */
void ts_perf_defaults(ts_perf_opts *o, int phase);

ts_status ts_phase4_run(const ts_model *m, const ts_perf_opts *o, json_t **report, ts_error *err);
/* phase4: its report (for the tiles), or NULL to run with default tiles. */
ts_status ts_phase5_run(const ts_model *m, const ts_perf_opts *o, const json_t *phase4, json_t **report,
                        ts_error *err);
/* Tiles of a phase-4 report or a manifest's target.tiles (a string there means defaults: no
 * tiles); errors name `where` and the field. */
ts_status ts_perf_tiles_parse(const json_t *tiles, const char *where, ts_cpu_tile_rec *out, int max, int *n,
                              ts_error *err);
/* The same, applied to a session (which checks the values against the model). */
ts_status ts_perf_apply_tiles(ts_cpu *c, const json_t *tiles, ts_error *err);

/* Re-measurement for the evaluator, with the deployed plan (tiles: a manifest's
 * target.tiles or NULL; copy: its weight placement): warm prefill time of P tokens, and decode
 * tok/s of D tokens after a C-token context, each over `trials` runs (mean and standard
 * deviation). */
ts_status ts_perf_prefill(const ts_model *m, int threads, const json_t *tiles, int copy, int P, int trials,
                          double *mean_ms, double *sd_ms, ts_error *err);
ts_status ts_perf_decode(const ts_model *m, int threads, const json_t *tiles, int copy, int C, int D, int trials,
                         double *tok_s, double *sd, ts_error *err);

/* Mean and sample standard deviation. */
void ts_perf_stats(const double *x, int n, double *mean, double *sd);

#endif
