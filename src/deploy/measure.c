/* The measurement harness (measure.h): one way to time a plan, shared by bench, phases 4-5,
 * the placement probe and the evaluator. */
#include "deploy/measure.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/procfs.h"
#include "core/metrics.h"
#include "deploy/gates.h"
#include "deploy/phases.h"
#include "deploy/tiles.h"

void ts_measure_stats(const double *x, int n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = n ? s / n : NAN;
    for (int i = 0; i < n; i++) q += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ts_measure_median(const double *x, int n) {
    double *t = n > 0 ? malloc(sizeof(double) * (size_t)n) : NULL;
    if (!t) return NAN;
    memcpy(t, x, sizeof(double) * (size_t)n);
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    double m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return m;
}

static double matrix_params(const ts_config *c) {
    double H = c->n_embd, Q = (double)c->n_heads * c->head_dim, KV = (double)c->n_kv_heads * c->head_dim;
    return (double)c->n_layers * (H * Q + 2 * H * KV + Q * H + 3.0 * H * c->n_ff);
}

/* Bytes the cpu target reads for a matrix: Q8_0 / Q4_0 blocks as stored, anything else as BF16. */
static double mat_read_bytes(const ts_tensor *t) {
    if (!t) return 0;
    if ((t->dtype == TS_DTYPE_Q8_0 || t->dtype == TS_DTYPE_Q4_0) && t->shape[1] % TS_QBLOCK == 0) return (double)t->nbytes;
    return 2.0 * (double)t->numel;
}

double ts_measure_decode_bytes(const ts_model *m, double ctx) {
    const ts_config *c = ts_model_config(m);
    double KV = (double)c->n_kv_heads * c->head_dim, w = mat_read_bytes(m->lm_head);
    for (int l = 0; l < c->n_layers; l++) {
        const ts_layer_w *L = &m->layers[l];
        w += mat_read_bytes(L->wq) + mat_read_bytes(L->wk) + mat_read_bytes(L->wv) + mat_read_bytes(L->wo) +
             mat_read_bytes(L->w_gate) + mat_read_bytes(L->w_up) + mat_read_bytes(L->w_down);
    }
    return w + (double)c->n_layers * ctx * 2 * KV * ts_kv_cache_elem_bytes(m->kv_type);
}

/* Bytes a decode token reads in one step over all layers (the matrices as mat_read_bytes counts
 * them, attention the cache at context ctx), the LM head for TS_N_STEPS; 0 for the others. */
static double step_read_bytes(const ts_model *m, int step, double ctx) {
    const ts_config *c = ts_model_config(m);
    if (step == TS_N_STEPS) return mat_read_bytes(m->lm_head);
    if (step == TS_STEP_ATTENTION)
        return (double)c->n_layers * ctx * 2 * c->n_kv_heads * c->head_dim * ts_kv_cache_elem_bytes(m->kv_type);
    double w = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const ts_layer_w *L = &m->layers[l];
        switch (step) {
        case TS_STEP_QKV: w += mat_read_bytes(L->wq) + mat_read_bytes(L->wk) + mat_read_bytes(L->wv); break;
        case TS_STEP_O_PROJ: w += mat_read_bytes(L->wo); break;
        case TS_STEP_GATE_UP: w += mat_read_bytes(L->w_gate) + mat_read_bytes(L->w_up); break;
        case TS_STEP_DOWN: w += mat_read_bytes(L->w_down); break;
        default: break;
        }
    }
    return w;
}

/* span: the step's wall time; gbs over it */
static json_t *step_row(const char *name, double span_ms, double max_ms, double min_ms, double bytes) {
    return json_pack("{s:s, s:f, s:f, s:f, s:f, s:f}", "step", name, "ms_per_token", span_ms, "slowest_thread_ms_per_token",
                     max_ms, "fastest_thread_ms_per_token", min_ms, "bytes_per_token", bytes,
                     "gbs", bytes > 0 && span_ms > 0 ? bytes / (span_ms * 1e-3) / 1e9 : 0.0);
}

/* ts_measurement.steps of a decode of `tokens` warm tokens at context ctx. The LM head is a region
 * of its own: its row is the region's time (its work and the sync at its end) in all three. */
static json_t *steps_json(const ts_model *m, const ts_cpu *cp, double tokens, double ctx) {
    ts_cpu_step_time t[TS_N_STEPS];
    int n = ts_cpu_step_times(cp, t, TS_N_STEPS);
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, step_row(ts_step_name(t[i].step), t[i].span_s * 1e3 / tokens, t[i].work_max_s * 1e3 / tokens,
                                          t[i].work_min_s * 1e3 / tokens, step_read_bytes(m, t[i].step, ctx)));
    ts_cpu_prof p[16];
    int np = ts_cpu_profile(cp, p, 16);
    for (int i = 0; i < np; i++)
        if (!strcmp(p[i].name, "lm_head"))
            json_array_append_new(a, step_row("lm_head", p[i].ms / tokens, p[i].ms / tokens, p[i].ms / tokens,
                                              step_read_bytes(m, TS_N_STEPS, ctx)));
    return a;
}

double ts_measure_prefill_flops(const ts_config *c, int S) {
    double attn = (double)c->n_layers * 4 * c->n_heads * c->head_dim * (double)S * (S + 1) / 2;
    return 2 * matrix_params(c) * S + attn + 2.0 * c->n_vocab * c->n_embd;
}

ts_status ts_measure_peaks(const ts_model *m, int threads, int trials, ts_peaks *pk, ts_error *err) {
    ts_cpu *cp = NULL;
    ts_cpu_opts co = {.n_threads = threads, .force_variant = -1};
    memset(pk, 0, sizeof *pk);
    ts_status s = ts_cpu_new(m, 1, &co, &cp, err);
    if (!s) ts_probe_peaks(ts_cpu_pool(cp), ts_cpu_variant_of(cp), trials, pk);
    ts_cpu_free(cp);
    return s;
}

static json_t *profile_json(const ts_cpu *c, int per) {
    ts_cpu_prof p[16];
    int n = ts_cpu_profile(c, p, 16);
    double total = 0;
    for (int i = 0; i < n; i++) total += p[i].ms;
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_pack("{s:s, s:f, s:f, s:f}", "dispatch", p[i].name, "calls_per_run",
                                           (double)p[i].calls / per, "ms_per_run", p[i].ms / per, "share",
                                           total > 0 ? p[i].ms / total : 0.0));
    return a;
}

/* A new session of the plan with room for max_seq positions; r->create_ms its cost. */
static ts_status open_plan(const ts_model *m, const ts_measure_opts *o, int max_seq, ts_cpu **cp, ts_measurement *r,
                           ts_error *err) {
    ts_cpu_opts co = {.n_threads = o->threads, .force_variant = -1, .disable = o->disable,
                      .release_source = o->release_source, .fault = o->fault};
    double a = ts_now_s() * 1e3;
    ts_status s = ts_cpu_new(m, max_seq, &co, cp, err);
    if (!s) s = ts_tiles_apply(*cp, o->tiles, err);
    r->create_ms = ts_now_s() * 1e3 - a;
    return s;
}

/* This process's anonymous huge pages and file pages mapped 2 MiB at a time, in MiB (-1 where
 * unreadable), from one read of smaps_rollup. */
static void huge_mb(double *anon, double *file) {
    static const char *const keys[2] = {"AnonHugePages:", "FilePmdMapped:"};
    long kb[2];
    ts_proc_kbs("/proc/self/smaps_rollup", keys, kb, 2);
    *anon = kb[0] < 0 ? -1 : (double)kb[0] / 1024;
    *file = kb[1] < 0 ? -1 : (double)kb[1] / 1024;
}

/* Fills the statistics from r->samples, which hold each trial's milliseconds on entry and
 * its tokens per second (tokens per trial / time) on return. */
static void finish(ts_measurement *r, const ts_cpu *cp, int tokens, int profile_per, long dispatches) {
    r->dispatches_per_run = (double)dispatches / profile_per;
    ts_measure_stats(r->samples, r->trials, &r->mean_ms, &r->sd_ms);
    for (int i = 0; i < r->trials; i++) r->samples[i] = tokens / (r->samples[i] / 1e3);
    ts_measure_stats(r->samples, r->trials, &r->rate, &r->rate_sd);
    r->dpl = ts_cpu_dispatches_per_layer(cp);
    r->copied = ts_cpu_converted_bytes(cp);
    r->profile = profile_json(cp, profile_per);
    huge_mb(&r->anon_huge_mb, &r->file_pmd_mb); /* the session still holds its weights */
}

/* The read probe between decode trials: 256 MiB (far past the caches, about 3-5 ms here), in 2
 * MiB pages as copied weights are, the plain load stream (the GEMV pattern would run the BF16
 * decode GEMV, whose calls of 32 MiB or less per thread feed its prefetch choice, prefetch.h). */
#define PROBE_BYTES ((size_t)256 << 20)
static double probe_now(ts_read_probe *p, const ts_cpu *cp, long *regions) {
    long d = ts_cpu_dispatches(cp);
    double g = ts_read_probe_run(p, 0);
    *regions += ts_cpu_dispatches(cp) - d;
    return g;
}

double ts_measure_probe_fraction(const double *rates, const double *probes, int trials, double bytes_per_token,
                                 double *lo, double *hi) {
    double *f = malloc(sizeof(double) * (size_t)(trials > 0 ? trials : 1));
    *lo = *hi = trials > 0 ? probes[0] : 0;
    if (!f || trials < 1) {
        free(f);
        return 0;
    }
    for (int i = 0; i < trials; i++) {
        double around = 0.5 * (probes[i] + probes[i + 1]);
        f[i] = around > 0 ? bytes_per_token * rates[i] / 1e9 / around : 0;
        if (probes[i + 1] < *lo) *lo = probes[i + 1];
        if (probes[i + 1] > *hi) *hi = probes[i + 1];
    }
    double med = ts_measure_median(f, trials);
    free(f);
    return isnan(med) ? 0 : med;
}

static ts_status begin(const ts_measure_opts *o, ts_measurement *r, ts_error *err) {
    memset(r, 0, sizeof *r);
    if (o->threads < 1 || o->trials < 1)
        return ts_fail(err, TS_ERR_ARG, "measurement: threads %d and trials %d must both be >= 1", o->threads, o->trials);
    r->trials = o->trials;
    r->samples = calloc((size_t)o->trials, sizeof(double));
    return r->samples ? TS_OK : ts_fail(err, TS_ERR_NOMEM, "measurement: out of memory");
}

ts_status ts_measure_prefill(const ts_model *m, const ts_measure_opts *o, int P, ts_measurement *r, ts_error *err) {
    const ts_config *c = ts_model_config(m);
    ts_status s = begin(o, r, err);
    if (s) return s;
    if (P < 1) {
        ts_measurement_free(r);
        return ts_fail(err, TS_ERR_ARG, "measurement: a prefill of %d tokens (must be >= 1)", P);
    }
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)P);
    float *lg = malloc(sizeof(float) * (size_t)c->n_vocab);
    ts_cpu *cp = NULL;
    if (!toks || !lg) s = ts_fail(err, TS_ERR_NOMEM, "measurement: out of memory for a %d-token prefill", P);
    if (!s) ts_phase_prompt_tokens(c, 7, 200, toks, P);
    double a = ts_now_s() * 1e3;
    if (!s) s = open_plan(m, o, P, &cp, r, err);
    if (!s) s = ts_cpu_forward(cp, toks, P, lg, 0, NULL, err);
    r->cold_ms = ts_now_s() * 1e3 - a;
    if (!s) ts_cpu_profile_reset(cp);
    long d0 = cp ? ts_cpu_dispatches(cp) : 0;
    int runs = 0;
    for (int i = 0; i < o->trials && !s; i++) {
        double b = ts_now_s() * 1e3, dt = 0;
        int k = 0;
        do {
            ts_cpu_reset(cp);
            s = ts_cpu_forward(cp, toks, P, lg, 0, NULL, err);
            k++;
        } while (!s && (dt = ts_now_s() * 1e3 - b) < TS_MEASURE_MIN_TRIAL_MS);
        r->samples[i] = dt / k;
        runs += k;
    }
    if (!s) finish(r, cp, P, runs, ts_cpu_dispatches(cp) - d0);
    ts_cpu_free(cp);
    free(toks), free(lg);
    if (s) ts_measurement_free(r);
    return s;
}

ts_status ts_measure_decode(const ts_model *m, const ts_measure_opts *o, int C, int D, ts_measurement *r,
                            ts_error *err) {
    const ts_config *c = ts_model_config(m);
    ts_status s = begin(o, r, err);
    if (s) return s;
    if (C < 1 || D < 1) {
        ts_measurement_free(r);
        return ts_fail(err, TS_ERR_ARG, "measurement: %d decoded tokens after a %d-token context (both must be >= 1)",
                       D, C);
    }
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)C);
    float *lg = malloc(sizeof(float) * (size_t)c->n_vocab), *lg0 = malloc(sizeof(float) * (size_t)c->n_vocab);
    ts_cpu *cp = NULL;
    if (!toks || !lg || !lg0) s = ts_fail(err, TS_ERR_NOMEM, "measurement: out of memory for a %d-token context", C);
    if (!s) ts_phase_prompt_tokens(c, 7, 200, toks, C);
    if (!s) s = open_plan(m, o, C + D, &cp, r, err);
    if (!s && o->step_timing) s = ts_cpu_step_timing(cp, err);
    if (!s) s = ts_cpu_forward(cp, toks, C, lg0, 0, NULL, err);
    ts_read_probe *probe = NULL;
    double *pg = NULL; /* pg[i]: the probe just before warm trial i; pg[trials]: the one after the last */
    long hwm = ts_proc_kb("/proc/self/status", "VmHWM:"); /* the session's peak, before the probe's buffer */
    r->rss_peak_mb = hwm >= 0 ? hwm / 1024.0 : -1;
    if (!s && o->probe_each_trial) {
        probe = ts_read_probe_new(ts_cpu_pool(cp), ts_cpu_variant_of(cp), PROBE_BYTES, 1);
        pg = calloc((size_t)o->trials + 1, sizeof(double));
        if (!probe || !pg) s = ts_fail(err, TS_ERR_NOMEM, "measurement: out of memory for the read probe");
    }
    long d0 = 0, dp = 0; /* dp: the probes' own regions on the session's pool, not counted */
    int runs = 0;
    for (int i = -1; i < o->trials && !s; i++) {
        if (i == 0) ts_cpu_profile_reset(cp), ts_cpu_step_timing_reset(cp), d0 = ts_cpu_dispatches(cp);
        if (i >= 0 && probe) pg[i] = probe_now(probe, cp, &dp);
        double b = ts_now_s() * 1e3, dt = 0;
        int k = 0;
        do { /* the cold run (i < 0) is one run; warm trials last at least the minimum */
            ts_cpu_truncate(cp, C);
            memcpy(lg, lg0, sizeof(float) * (size_t)c->n_vocab);
            for (int g = 0; g < D && !s; g++) {
                int32_t tok = ts_argmax(lg, c->n_vocab);
                s = ts_cpu_forward(cp, &tok, 1, lg, 0, NULL, err);
            }
            k++;
        } while (!s && (dt = ts_now_s() * 1e3 - b) < TS_MEASURE_MIN_TRIAL_MS && i >= 0);
        if (i < 0) r->cold_ms = ts_now_s() * 1e3 - b;
        else r->samples[i] = dt / k, runs += k;
    }
    if (!s && probe) pg[o->trials] = probe_now(probe, cp, &dp);
    ts_read_probe_free(probe); /* before finish: its huge pages are not the weights' */
    if (!s) finish(r, cp, D, runs * D, ts_cpu_dispatches(cp) - d0 - dp);
    if (!s && o->step_timing) r->steps = steps_json(m, cp, (double)runs * D, C + D / 2.0);
    if (!s && pg)
        r->probe_fraction = ts_measure_probe_fraction(r->samples, pg, r->trials, ts_measure_decode_bytes(m, C + D / 2.0),
                                                      &r->probe_min_gbs, &r->probe_max_gbs);
    free(pg);
    ts_cpu_free(cp);
    free(toks), free(lg), free(lg0);
    if (s) ts_measurement_free(r);
    return s;
}

ts_status ts_measure_decode_batch(const ts_model *m, const ts_measure_opts *o, int C, int D, int B, ts_measurement *r,
                                  ts_error *err) {
    const ts_config *c = ts_model_config(m);
    ts_status s = begin(o, r, err);
    if (s) return s;
    if (C < 1 || D < 1 || B < 1 || B > TS_CPU_BATCH_MAX) {
        ts_measurement_free(r);
        return ts_fail(err, TS_ERR_ARG,
                       "measurement: %d sequences (1 to %d) decoding %d tokens after %d-token contexts (both >= 1)", B,
                       TS_CPU_BATCH_MAX, D, C);
    }
    size_t V = (size_t)c->n_vocab;
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)C), *next = malloc(sizeof(int32_t) * (size_t)B);
    float *lg = malloc(sizeof(float) * V * (size_t)B), *lg0 = malloc(sizeof(float) * V * (size_t)B);
    ts_cpu_seq *seqs[TS_CPU_BATCH_MAX] = {0};
    ts_cpu *cp = NULL;
    if (!toks || !next || !lg || !lg0) s = ts_fail(err, TS_ERR_NOMEM, "measurement: out of memory for %d contexts", B);
    /* the session's own cache stays unused: its size only sets the prefill chunk (>= B rows) */
    if (!s) s = open_plan(m, o, C + D > B ? C + D : B, &cp, r, err);
    for (int b = 0; b < B && !s; b++) { /* a different context per sequence */
        ts_phase_prompt_tokens(c, 7 + (uint64_t)b, 200, toks, C);
        s = ts_cpu_seq_new(cp, C + D, &seqs[b], err);
        if (!s) s = ts_cpu_forward_seq(cp, seqs[b], toks, C, lg0 + (size_t)b * V, 0, err);
    }
    long d0 = 0;
    int runs = 0;
    for (int i = -1; i < o->trials && !s; i++) {
        if (i == 0) ts_cpu_profile_reset(cp), d0 = ts_cpu_dispatches(cp);
        double b0 = ts_now_s() * 1e3, dt = 0;
        int k = 0;
        do { /* as ts_measure_decode: a cold run, then warm trials of at least the minimum */
            for (int b = 0; b < B; b++) ts_cpu_seq_truncate(seqs[b], C);
            memcpy(lg, lg0, sizeof(float) * V * (size_t)B);
            for (int g = 0; g < D && !s; g++) {
                for (int b = 0; b < B; b++) next[b] = ts_argmax(lg + (size_t)b * V, c->n_vocab);
                s = ts_cpu_decode_batch(cp, seqs, next, B, lg, err);
            }
            k++;
        } while (!s && (dt = ts_now_s() * 1e3 - b0) < TS_MEASURE_MIN_TRIAL_MS && i >= 0);
        if (i < 0) r->cold_ms = ts_now_s() * 1e3 - b0;
        else r->samples[i] = dt / k, runs += k;
    }
    if (!s) finish(r, cp, B * D, runs * D, ts_cpu_dispatches(cp) - d0);
    for (int b = 0; b < B; b++) ts_cpu_seq_free(seqs[b]);
    ts_cpu_free(cp);
    free(toks), free(next), free(lg), free(lg0);
    if (s) ts_measurement_free(r);
    return s;
}

void ts_measurement_free(ts_measurement *r) {
    free(r->samples);
    json_decref(r->profile);
    json_decref(r->steps);
    r->samples = NULL;
    r->profile = NULL;
    r->steps = NULL;
}

int ts_measurement_valid(const ts_measurement *r, int trials) {
    if (!r->samples || r->trials != trials || trials < 1) return 0;
    for (int i = 0; i < r->trials; i++)
        if (!isfinite(r->samples[i]) || r->samples[i] <= 0) return 0;
    return isfinite(r->cold_ms) && r->cold_ms > 0 && isfinite(r->mean_ms) && r->mean_ms > 0 && isfinite(r->sd_ms) &&
           r->sd_ms >= 0 && isfinite(r->rate) && r->rate > 0 && isfinite(r->rate_sd) && r->rate_sd >= 0;
}

json_t *ts_measurement_json(const ts_measurement *r, const char *rate_key) {
    char sd_key[64];
    snprintf(sd_key, sizeof sd_key, "%s_sd", rate_key);
    json_t *samples = json_array();
    /* non-finite values as null (jansson has no NaN), so a broken row still shows what broke */
    for (int i = 0; r->samples && i < r->trials; i++) json_array_append_new(samples, ts_json_number(r->samples[i]));
    /* the pages the weights sat in while measured: a copy in THP (anon_huge_mb) or the file's
     * page cache mapped 2 MiB at a time (file_pmd_mb; 4 KiB folios read 5-8% slower) */
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:i, s:I, s:o, s:o}", "create_ms", ts_json_number(r->create_ms),
                     "cold_ms", ts_json_number(r->cold_ms), "warm_ms_mean", ts_json_number(r->mean_ms), "warm_ms_sd",
                     ts_json_number(r->sd_ms), rate_key, ts_json_number(r->rate), sd_key, ts_json_number(r->rate_sd),
                     "samples_tok_s", samples, "dispatches_per_layer", r->dpl, "weights_copied_bytes",
                     (json_int_t)r->copied, "anon_huge_mb", ts_json_number(r->anon_huge_mb), "file_pmd_mb",
                     ts_json_number(r->file_pmd_mb));
}

void ts_measure_print_profile(FILE *out, const json_t *prof) {
    size_t i;
    const json_t *p;
    json_array_foreach(prof, i, p)
        fprintf(out, "      %-20s %8.1f calls %10.3f ms %6.1f%%\n", json_string_value(json_object_get(p, "dispatch")),
                json_number_value(json_object_get(p, "calls_per_run")),
                json_number_value(json_object_get(p, "ms_per_run")), 100 * json_number_value(json_object_get(p, "share")));
}
