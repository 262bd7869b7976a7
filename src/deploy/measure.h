/* The measurement harness: how fast a plan of the cpu target runs, timed the same way wherever
 * a speed is reported (`tessera bench`, the trajectories of phases 4-5, the weight-placement
 * probe's sessions, the evaluator's re-measurement). A measurement opens a new session of the
 * plan (cold: creation and the first forward), then times warm trials and keeps their mean and
 * sample standard deviation. Bytes per decoded token and FLOPs per prefill are defined here
 * once, so every bandwidth or peak fraction divides the same numerator. */
#ifndef TS_DEPLOY_MEASURE_H
#define TS_DEPLOY_MEASURE_H
#include <jansson.h>
#include <stdio.h>

#include "model/model.h"
#include "target/cpu/cpu_target.h"
#include "target/cpu/probe.h"

/* A warm trial repeats its run (one prefill, or D decoded tokens from the same context) until
 * it has lasted this long and reports the time of one run: a tiny model's sub-millisecond run
 * timed alone is mostly thread wake-up and timer noise, which no later re-measurement could
 * reproduce; runs of full-size models last longer than this, so they are timed one by one. */
#define TS_MEASURE_MIN_TRIAL_MS 20.0

typedef struct ts_measure_opts {
    int threads;               /* the resolved thread count (never 0) */
    int trials;                /* timed warm trials, >= 1 */
    unsigned disable;          /* TS_OPT_* optimizations switched off; 0: the full plan */
    const json_t *tiles;       /* autotuned tiles (a phase-4 report's or manifest's), or NULL */
    int release_source;        /* with copied weights: drop the mapped pages (bench, run) */
    const ts_cpu_fault *fault; /* debug fault, or NULL */
    int probe_each_trial;      /* decode: a read probe on the session's own threads before every warm
                                * trial and after the last (ts_measurement.probe_fraction) */
    int step_timing;           /* decode: where a token's time goes, step by step (ts_measurement.steps) */
} ts_measure_opts;

typedef struct ts_measurement {
    double create_ms;          /* session creation (weights bound or copied, tiles applied) */
    double cold_ms;            /* prefill: creation + the first forward; decode: the first run
                                * after the context's prefill (creation not included) */
    double mean_ms, sd_ms;     /* time of one run in a warm trial (see TS_MEASURE_MIN_TRIAL_MS) */
    double rate, rate_sd;      /* tokens per second per trial */
    double *samples;           /* the trials' tokens per second (trials entries; caller frees) */
    int trials;
    int dpl;                   /* dispatches per layer of the plan */
    double dispatches_per_run; /* parallel regions counted per warm forward (prefill) or token (decode) */
    size_t copied;             /* bytes of weights copied or converted at load */
    json_t *profile;           /* where the warm time goes, per dispatch (caller decrefs) */
    json_t *steps;             /* decode with step_timing: per step and the LM head, ms a token (its
                                * span, ts_cpu_step_time; the slowest and the fastest thread's work),
                                * bytes read a token and their GB/s over the span; else NULL */
    double anon_huge_mb;       /* this process's anonymous memory in huge pages while the session
                                * lived (copied weights in THP; -1 where not readable) */
    double file_pmd_mb;        /* this process's file pages mapped 2 MiB at a time then (weights
                                * read from the mmap in large folios, io/mmap.c; -1 likewise) */
    /* Decode with probe_each_trial: ts_measure_probe_fraction of the trials and their probes,
     * and the probes' lowest and highest GB/s; 0 without. A host whose bandwidth moves by 2x
     * within seconds is judged against the moments each trial ran, not against its best moment
     * of the whole run. The probe evicts the last-level cache before each trial: a model that
     * fits in it decodes its first token of a trial from memory. */
    double probe_fraction, probe_min_gbs, probe_max_gbs;
    double rss_peak_mb; /* decode: VmHWM before any probe buffer (-1 where unreadable) */
} ts_measurement;

/* Warm prefill of P tokens. Threads, trials, P, C and D must be >= 1 (TS_ERR_ARG). */
ts_status ts_measure_prefill(const ts_model *m, const ts_measure_opts *o, int P, ts_measurement *r, ts_error *err);
/* Greedy decode of D tokens after a C-token context, each trial from the same context (the KV
 * cache truncated back to C); cold: the first run right after the context's prefill. */
ts_status ts_measure_decode(const ts_model *m, const ts_measure_opts *o, int C, int D, ts_measurement *r,
                            ts_error *err);
/* Batched greedy decode (continuous batching, ts_cpu_decode_batch): B sequences, each with its
 * own C-token context, decode D tokens together, each trial from the same contexts; rate is
 * the aggregate tokens per second of all B (B x D tokens per run). 1 <= B <= TS_CPU_BATCH_MAX. */
ts_status ts_measure_decode_batch(const ts_model *m, const ts_measure_opts *o, int C, int D, int B, ts_measurement *r,
                                  ts_error *err);
void ts_measurement_free(ts_measurement *r);
/* 1 when a measurement can be used as data: `trials` samples, each finite and positive, finite
 * positive cold and mean times and rate, finite standard deviations. Phases 4-5 gate on it (a
 * timer or harness bug shows here, whatever the --trials option said). */
int ts_measurement_valid(const ts_measurement *r, int trials);

/* Mean and sample standard deviation. */
void ts_measure_stats(const double *x, int n, double *mean, double *sd);
/* Median of n values (the mean of the middle two for even n); NaN when n < 1 or out of memory. */
double ts_measure_median(const double *x, int n);
/* The median over trials of each trial's GB/s (bytes_per_token x rates[i] tokens/s) over the mean
 * of probes[i] and probes[i + 1] (GB/s read just before and just after trial i; trials + 1
 * entries); *lo / *hi the lowest and highest probe. 0 when trials < 1. */
double ts_measure_probe_fraction(const double *rates, const double *probes, int trials, double bytes_per_token,
                                 double *lo, double *hi);
/* Bytes a decode step reads: every weight matrix once (BF16, or Q8_0 / Q4_0 as stored) and the
 * KV cache up to ctx (FP32, or F16 for --kv-cache f16). */
double ts_measure_decode_bytes(const ts_model *m, double ctx);
/* FLOPs of a prefill of S tokens: the weight GEMMs, causal attention, and the one-row LM head. */
double ts_measure_prefill_flops(const ts_config *c, int S);
/* This machine's peaks now (FMA throughput of the kernel's instruction, streaming read
 * bandwidth), on a pool of `threads` threads. */
ts_status ts_measure_peaks(const ts_model *m, int threads, int trials, ts_peaks *pk, ts_error *err);

/* A measurement as JSON: cold/warm times and rate under rate_key ("prefill_tok_s" or
 * "decode_tok_s", its sd under the matching "_sd" key), dispatches, copied bytes, samples. */
json_t *ts_measurement_json(const ts_measurement *r, const char *rate_key);
/* The profile as an aligned table. */
void ts_measure_print_profile(FILE *out, const json_t *profile);

#endif
