/* Phases 4-5: the optimization trajectory of the cpu plan, prefill and decode. */
#include "deploy/perf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "deploy/gates.h"
#include "deploy/phases.h"
#include "deploy/placement.h"
#include "target/cpu/probe.h"
#include "core/clock.h"

typedef struct traj_step {
    const char *name;
    unsigned disable;
    int tuned;             /* the final plan: phase 4's autotuned tiles and weight placement */
    const char *name_copy; /* its name when the placement probe chose the copy */
} traj_step;

/* Cumulative: each row turns on one more optimization. The baseline runs one dispatch per
 * step, attention one query row at a time, copies of the weights, the LM head over every row
 * and default tiles. */
static const traj_step k_prefill[] = {
    {"baseline: unfused, row attention, copied weights, all-row LM head", TS_OPT_ALL, 0, NULL},
    {"+ fused dispatches (3 per layer)", TS_OPT_ALL & ~TS_OPT_FUSED, 0, NULL},
    {"+ tiled prefill attention", TS_OPT_GEMV | TS_OPT_ZERO_COPY | TS_OPT_LAST_LOGITS, 0, NULL},
    {"+ last-token LM head (one streaming GEMV row)", TS_OPT_ZERO_COPY, 0, NULL},
    /* The tuned tiles join this last row instead of a row of their own: for S >= 2 the panel
     * kernel has no tile choice, so such a row measured the same kernels twice (only the
     * one-row LM head can take a tuned tile). */
    {"+ zero-copy weights (from the mmap), tuned tiles", 0, 1, "+ autotuned tiles, weights copied to huge pages (probe's pick)"},
};
static const traj_step k_decode[] = {
    {"baseline: unfused, GEMM tile for one row, copied weights", TS_OPT_ALL, 0, NULL},
    {"+ fused dispatches (3 per layer)", TS_OPT_ALL & ~TS_OPT_FUSED, 0, NULL},
    {"+ streaming GEMV", TS_OPT_ZERO_COPY, 0, NULL},
    {"+ zero-copy weights (borrowed from the mmap)", 0, 0, NULL},
    {"+ phase-4 autotuned tiles", 0, 1, "+ phase-4 autotuned tiles, weights copied to huge pages"},
};

typedef struct measure {
    double create_ms, cold_ms, mean_ms, sd_ms, rate, rate_sd;
    int dpl;
    size_t copied;
    json_t *profile;
} measure;

void ts_perf_stats(const double *x, int n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = n ? s / n : NAN;
    for (int i = 0; i < n; i++) q += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

void ts_perf_defaults(ts_perf_opts *o, int phase) {
    memset(o, 0, sizeof *o);
    o->trials = 5;
    o->prefill = 128;
    /* 8 tokens a trial (16 before): phases 5 and 7 time every decode trial, and 16 tokens
     * kept the 1.7B deployments over their 15-minute goal. Each row still has >= 5 trials
     * with their standard deviation, which phase 7's 3-sigma check uses. */
    o->decode_tokens = 8;
    o->weights = -1;
    o->n_sizes = 2;
    o->sizes[0] = 128;
    o->sizes[1] = phase == 4 ? 512 : 1024;
}

ts_status ts_perf_tiles_parse(const json_t *tiles, const char *where, ts_cpu_tile_rec *out, int max, int *n,
                              ts_error *err) {
    *n = 0;
    if (!tiles || json_is_string(tiles)) return TS_OK; /* "defaults (phase 4 did not run)" */
    if (!json_is_array(tiles)) return ts_fail(err, TS_ERR_FORMAT, "%s: expected an array of tiles", where);
    size_t i;
    const json_t *t;
    json_array_foreach(tiles, i, t) {
        static const char *keys[6] = {"bucket", "n", "k", "ms", "nr", "sb"};
        int v[6];
        for (int k = 0; k < 6; k++) {
            const json_t *x = json_object_get(t, keys[k]);
            if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > 1 << 24)
                return ts_fail(err, TS_ERR_FORMAT, "%s[%zu].%s: expected a non-negative integer", where, i, keys[k]);
            v[k] = (int)json_integer_value(x);
        }
        if (*n == max) return ts_fail(err, TS_ERR_FORMAT, "%s: more than %d tiles", where, max);
        out[(*n)++] = (ts_cpu_tile_rec){v[0], v[1], v[2], v[3], v[4], v[5], json_number_value(json_object_get(t, "gflops"))};
    }
    return TS_OK;
}

ts_status ts_perf_apply_tiles(ts_cpu *c, const json_t *tiles, ts_error *err) {
    ts_cpu_tile_rec r[64];
    int n;
    ts_status s = ts_perf_tiles_parse(tiles, "tiles", r, 64, &n, err);
    return s ? s : ts_cpu_tiles_set(c, r, n, err);
}

static json_t *tiles_json(const ts_cpu *c) {
    ts_cpu_tile_rec r[64];
    int n = ts_cpu_tiles_get(c, r, 64);
    json_t *a = json_array();
    for (int i = 0; i < n && i < 64; i++)
        json_array_append_new(a, json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:f}", "bucket", r[i].bucket, "n", r[i].n,
                                           "k", r[i].k, "ms", r[i].ms, "nr", r[i].nr, "sb", r[i].sb, "gflops",
                                           r[i].gflops));
    return a;
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

static void prompt(const ts_config *c, int32_t *t, int n) {
    ts_phase_prompt_tokens(c, 7, 200, t, n);
}

/* A prefill of P tokens with a plan: new session (cold: creation + first forward), then warm
 * trials. tiles: JSON tiles to apply, or NULL. */
static ts_status prefill_case(const ts_model *m, const ts_perf_opts *o, unsigned disable, const json_t *tiles, int P,
                              measure *r, ts_error *err) {
    const ts_config *c = ts_model_config(m);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)P);
    float *lg = malloc(sizeof(float) * (size_t)c->n_vocab);
    double *t = malloc(sizeof(double) * (size_t)o->trials);
    ts_cpu *cp = NULL;
    ts_cpu_opts co = {.n_threads = o->threads, .force_variant = -1, .disable = disable, .fault = o->fault};
    ts_status s = toks && lg && t ? TS_OK : ts_fail(err, TS_ERR_NOMEM, "phase 4: out of memory");
    memset(r, 0, sizeof *r);
    if (!s) prompt(c, toks, P);
    double a = ts_now_s() * 1e3;
    if (!s) s = ts_cpu_new(m, P, &co, &cp, err);
    if (!s && tiles) s = ts_perf_apply_tiles(cp, tiles, err);
    r->create_ms = ts_now_s() * 1e3 - a;
    if (!s) s = ts_cpu_forward(cp, toks, P, lg, 0, NULL, err);
    r->cold_ms = ts_now_s() * 1e3 - a;
    if (!s) ts_cpu_profile_reset(cp);
    for (int i = 0; i < o->trials && !s; i++) {
        ts_cpu_reset(cp);
        double b = ts_now_s() * 1e3;
        s = ts_cpu_forward(cp, toks, P, lg, 0, NULL, err);
        t[i] = ts_now_s() * 1e3 - b;
    }
    if (!s) {
        ts_perf_stats(t, o->trials, &r->mean_ms, &r->sd_ms);
        for (int i = 0; i < o->trials; i++) t[i] = P / (t[i] / 1e3);
        ts_perf_stats(t, o->trials, &r->rate, &r->rate_sd);
        r->dpl = ts_cpu_dispatches_per_layer(cp);
        r->copied = ts_cpu_converted_bytes(cp);
        r->profile = profile_json(cp, o->trials);
    }
    ts_cpu_free(cp);
    free(toks), free(lg), free(t);
    return s;
}

/* Greedy decode of D tokens after a C-token context, repeated from the same context (the KV
 * cache truncated back to C). cold_ms: the first run right after the session's prefill. */
static ts_status decode_case(const ts_model *m, const ts_perf_opts *o, unsigned disable, const json_t *tiles, int C,
                             measure *r, ts_error *err) {
    const ts_config *c = ts_model_config(m);
    int D = o->decode_tokens;
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)C);
    float *lg = malloc(sizeof(float) * (size_t)c->n_vocab), *lg0 = malloc(sizeof(float) * (size_t)c->n_vocab);
    double *t = malloc(sizeof(double) * (size_t)o->trials);
    ts_cpu *cp = NULL;
    ts_cpu_opts co = {.n_threads = o->threads, .force_variant = -1, .disable = disable, .fault = o->fault};
    ts_status s = toks && lg && lg0 && t ? TS_OK : ts_fail(err, TS_ERR_NOMEM, "phase 5: out of memory");
    memset(r, 0, sizeof *r);
    if (!s) prompt(c, toks, C);
    double a = ts_now_s() * 1e3;
    if (!s) s = ts_cpu_new(m, C + D, &co, &cp, err);
    if (!s && tiles) s = ts_perf_apply_tiles(cp, tiles, err);
    r->create_ms = ts_now_s() * 1e3 - a;
    if (!s) s = ts_cpu_forward(cp, toks, C, lg0, 0, NULL, err);
    for (int i = -1; i < o->trials && !s; i++) {
        if (i == 0) ts_cpu_profile_reset(cp);
        ts_cpu_truncate(cp, C);
        memcpy(lg, lg0, sizeof(float) * (size_t)c->n_vocab);
        double b = ts_now_s() * 1e3;
        for (int g = 0; g < D && !s; g++) {
            int32_t tok = ts_argmax(lg, c->n_vocab);
            s = ts_cpu_forward(cp, &tok, 1, lg, 0, NULL, err);
        }
        if (i < 0) r->cold_ms = ts_now_s() * 1e3 - b;
        else t[i] = ts_now_s() * 1e3 - b;
    }
    if (!s) {
        ts_perf_stats(t, o->trials, &r->mean_ms, &r->sd_ms);
        for (int i = 0; i < o->trials; i++) t[i] = D / (t[i] / 1e3);
        ts_perf_stats(t, o->trials, &r->rate, &r->rate_sd);
        r->dpl = ts_cpu_dispatches_per_layer(cp);
        r->copied = ts_cpu_converted_bytes(cp);
        r->profile = profile_json(cp, o->trials * D);
    }
    ts_cpu_free(cp);
    free(toks), free(lg), free(lg0), free(t);
    return s;
}

static json_t *measure_json(const measure *r, const char *rate_key) {
    return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:i, s:I}", "create_ms", r->create_ms, "cold_ms", r->cold_ms,
                     "warm_ms_mean", r->mean_ms, "warm_ms_sd", r->sd_ms, rate_key, r->rate,
                     rate_key[0] == 'p' ? "prefill_tok_s_sd" : "decode_tok_s_sd", r->rate_sd, "dispatches_per_layer",
                     r->dpl, "weights_copied_bytes", (json_int_t)r->copied);
}

static void print_profile(FILE *out, const json_t *prof) {
    size_t i;
    const json_t *p;
    json_array_foreach(prof, i, p)
        fprintf(out, "      %-20s %8.1f calls %10.3f ms %6.1f%%\n", json_string_value(json_object_get(p, "dispatch")),
                json_number_value(json_object_get(p, "calls_per_run")),
                json_number_value(json_object_get(p, "ms_per_run")), 100 * json_number_value(json_object_get(p, "share")));
}

/* Runs the trajectory rows; tiles and the chosen placement (copy) for the final row. *last: the
 * final row's measurement (the deployed plan at this size), which the TTFT and context tables
 * reuse. */
static ts_status trajectory(const ts_model *m, const ts_perf_opts *o, int phase, const json_t *tiles, int copy, int size,
                            json_t *rows, json_t **base_profile, json_t **final_profile, measure *last, ts_error *err) {
    const traj_step *steps = phase == 4 ? k_prefill : k_decode;
    int n = phase == 4 ? (int)(sizeof k_prefill / sizeof *k_prefill) : (int)(sizeof k_decode / sizeof *k_decode);
    const char *key = phase == 4 ? "prefill_tok_s" : "decode_tok_s";
    /* The copying baseline doubles the weights' memory; beyond a share of RAM it is skipped. */
    int fits = ts_placement_copy_fits(m);
    ts_status s = TS_OK;
    for (int i = 0; i < n && !s; i++) {
        unsigned d = steps[i].tuned ? ts_placement_mask(copy) : steps[i].disable;
        const char *name = steps[i].tuned && copy ? steps[i].name_copy : steps[i].name;
        if (!fits) d &= ~(unsigned)TS_OPT_ZERO_COPY;
        measure r;
        s = phase == 4 ? prefill_case(m, o, d, steps[i].tuned ? tiles : NULL, size, &r, err)
                       : decode_case(m, o, d, steps[i].tuned ? tiles : NULL, size, &r, err);
        if (s) break;
        if (o->out)
            fprintf(o->out, "  %-62.62s cold %9.1f ms  warm %9.2f ms +- %7.2f  %8.2f tok/s  %d/layer\n", name,
                    r.cold_ms, r.mean_ms, r.sd_ms, r.rate, r.dpl);
        json_t *row = measure_json(&r, key);
        json_object_set_new(row, "step", json_string(name));
        json_object_set_new(row, "disabled_mask", json_integer((json_int_t)d));
        if (!fits && (steps[i].disable & TS_OPT_ZERO_COPY))
            json_object_set_new(row, "note", json_string("copying skipped: two copies of the weights exceed 70% of RAM"));
        json_array_append_new(rows, row);
        if (i == 0) *base_profile = r.profile;
        else if (i == n - 1) *final_profile = r.profile;
        else json_decref(r.profile);
        if (i == n - 1) *last = r, last->profile = NULL;
    }
    return s;
}

ts_status ts_phase4_run(const ts_model *m, const ts_perf_opts *o, json_t **report, ts_error *err) {
    const ts_config *c = ts_model_config(m);
    FILE *out = o->out;
    int P = o->prefill < c->max_pos ? o->prefill : c->max_pos;
    json_t *rep = json_object(), *rows = json_array(), *ttft = json_array(), *gates = json_array();
    json_t *tiles = NULL, *base_prof = NULL, *final_prof = NULL;
    measure fin = {0};
    ts_status s = TS_OK;
    *report = NULL;
    /* Autotune in a session of its own, so the trajectory's tuned row loads tiles exactly as
     * `tessera run DEPLOY_DIR` does from the manifest. */
    ts_cpu *cp = NULL;
    ts_cpu_opts co = {.n_threads = o->threads, .force_variant = -1, .fault = o->fault};
    double a = ts_now_s() * 1e3;
    if (out) fprintf(out, "phase 4 (prefill): autotuning GEMM tiles at S=%d and decode\n", P);
    if (!(s = ts_cpu_new(m, P, &co, &cp, err)) && !(s = ts_cpu_autotune(cp, P, out, err))) tiles = tiles_json(cp);
    ts_cpu_free(cp);
    double tune_ms = ts_now_s() * 1e3 - a;
    /* The weight placement of the final plan: everything after this measures that plan. */
    json_t *placement = NULL;
    int copy = 0;
    if (!s && o->weights < 0) s = ts_placement_probe(m, o->threads, o->fault, tiles, out, &placement, &copy, err);
    else if (!s) {
        copy = o->weights && ts_placement_copy_fits(m);
        const char *why = copy == o->weights ? "chosen with --weights" : "--weights copy, but a copy exceeds 70% of RAM";
        placement = json_pack("{s:s, s:s}", "weights", copy ? "copy" : "mmap", "why", why);
        if (out) fprintf(out, "  weight placement: %s (%s)\n", copy ? "copy" : "mmap", why);
    }
    unsigned place = ts_placement_mask(copy);
    co.disable = place;
    if (!s && out)
        fprintf(out, "phase 4: optimization trajectory, prefill of %d tokens, %d warm trials each\n", P, o->trials);
    if (!s) s = trajectory(m, o, 4, tiles, copy, P, rows, &base_prof, &final_prof, &fin, err);
    /* TTFT of the final plan at each size: a new session each time (cold), then warm trials. */
    for (int i = 0; i < o->n_sizes && !s; i++) {
        int S = o->sizes[i];
        if (S > c->max_pos) {
            if (out) fprintf(out, "  TTFT at %d tokens skipped: beyond max_position_embeddings %d\n", S, c->max_pos);
            continue;
        }
        measure r = fin; /* at the trajectory's size the final row is this measurement: not run twice */
        if (S != P && (s = prefill_case(m, o, place, tiles, S, &r, err))) break;
        json_decref(r.profile);
        if (out)
            fprintf(out, "  TTFT %5d tokens: cold %9.1f ms, warm %9.2f ms +- %.2f (%.2f tok/s)\n", S, r.cold_ms, r.mean_ms,
                    r.sd_ms, r.rate);
        json_t *row = measure_json(&r, "prefill_tok_s");
        json_object_set_new(row, "tokens", json_integer(S));
        json_array_append_new(ttft, row);
    }
    /* Gate: the tuned plan keeps the default plan's top-1 (decisive positions) and mutual
     * top-5 elsewhere on the phase-3 prompt set. The last DEC tokens of each prompt go through
     * one-row decode steps: tiles only change one-row GEMMs (for S >= 2 the panel kernel has no
     * tile choice), so a comparison of prefills alone would compare the same kernels. */
    enum { DEC = 4 };
    int changes = 0, positions = 0;
    if (!s) {
        static const int lens[6] = {8, 16, 24, 32, 48, 64};
        ts_cpu *ref = NULL, *tuned = NULL;
        int V = c->n_vocab, topk = (int)ts_threshold_find("phase3", "mutual_top_k")->value;
        double pmin = ts_threshold_find("phase3", "decisive_prob")->value;
        float *la = malloc(sizeof(float) * 64 * (size_t)V), *lb = malloc(sizeof(float) * 64 * (size_t)V);
        int32_t toks[64];
        if (!la || !lb) s = ts_fail(err, TS_ERR_NOMEM, "phase 4: out of memory");
        /* The default plan reads the mmap whatever the placement (the same bits either way):
         * a second copy beside the tuned session's would need three times the weights. */
        ts_cpu_opts co_ref = co;
        co_ref.disable = 0;
        if (!s) s = ts_cpu_new(m, 64, &co_ref, &ref, err);
        if (!s) s = ts_cpu_new(m, 64, &co, &tuned, err);
        if (!s) s = ts_perf_apply_tiles(tuned, tiles, err);
        for (int k = 0; k < 6 && !s; k++) {
            int n = lens[k] < c->max_pos ? lens[k] : c->max_pos, pre = n > DEC ? n - DEC : 1;
            ts_phase_prompt_tokens(c, 0, k, toks, n);
            ts_cpu_reset(ref), ts_cpu_reset(tuned);
            if ((s = ts_cpu_forward(ref, toks, pre, la, 1, NULL, err)) ||
                (s = ts_cpu_forward(tuned, toks, pre, lb, 1, NULL, err)))
                break;
            for (int p = pre; p < n && !s; p++) {
                size_t off = (size_t)p * V;
                if (!(s = ts_cpu_forward(ref, &toks[p], 1, la + off, 0, NULL, err)))
                    s = ts_cpu_forward(tuned, &toks[p], 1, lb + off, 0, NULL, err);
            }
            for (int p = 0; p < n && !s; p++, positions++) {
                const float *x = la + (size_t)p * V, *y = lb + (size_t)p * V;
                int tx = ts_argmax(x, V), ty = ts_argmax(y, V);
                if (!isfinite(y[ty])) changes++;
                else if (ts_softmax_prob(x, V, tx) > pmin) changes += tx != ty;
                else changes += ts_rank_of(x, V, ty) >= topk || ts_rank_of(y, V, tx) >= topk;
            }
        }
        ts_cpu_free(ref), ts_cpu_free(tuned);
        free(la), free(lb);
    }
    int pass = 1;
    if (!s) {
        if (out) {
            fprintf(out, "  where prefill time goes, final plan (per %d-token forward):\n", P);
            print_profile(out, final_prof);
            fprintf(out, "  tuned plan against the default plan on the phase-3 prompts (%d positions, the last %d of each "
                         "prompt as decode steps):\n", positions, DEC);
        }
        json_array_append_new(gates, ts_gate_row("phase4", "top1_changes", changes, out, &pass));
        json_array_append_new(gates, ts_gate_row("phase4", "trials", o->trials, out, &pass));
    }
    if (s) {
        json_decref(rep), json_decref(rows), json_decref(ttft), json_decref(gates), json_decref(tiles);
        json_decref(base_prof), json_decref(final_prof), json_decref(placement);
        return s;
    }
    json_object_set_new(rep, "phase", json_integer(4));
    json_object_set_new(rep, "prefill_tokens", json_integer(P));
    json_object_set_new(rep, "trials", json_integer(o->trials));
    json_object_set_new(rep, "threads", json_integer(o->threads));
    json_object_set_new(rep, "autotune_ms", json_real(tune_ms));
    json_object_set_new(rep, "tiles", tiles);
    json_object_set_new(rep, "placement", placement);
    json_object_set_new(rep, "trajectory", rows);
    json_object_set_new(rep, "ttft", ttft);
    json_object_set_new(rep, "profile_baseline", base_prof);
    json_object_set_new(rep, "profile_final", final_prof);
    json_object_set_new(rep, "gates", gates);
    json_object_set_new(rep, "pass", json_boolean(pass));
    if (out) fprintf(out, "phase 4: %s\n", pass ? "PASS" : "FAIL");
    *report = rep;
    return pass ? TS_OK : ts_fail(err, TS_ERR_GATE, "phase 4 gate failed (see the table)");
}

/* Bytes a decode step reads: every weight matrix once, and the KV cache up to ctx. */
static double bytes_per_token(const ts_config *c, double ctx) {
    double H = c->n_embd, Q = (double)c->n_heads * c->head_dim, KV = (double)c->n_kv_heads * c->head_dim;
    double mats = (double)c->n_layers * (H * Q + 2 * H * KV + Q * H + 3.0 * H * c->n_ff) + (double)c->n_vocab * H;
    return 2 * mats + (double)c->n_layers * ctx * 2 * KV * 4;
}

/* Greedy lockstep of the final plan against the oracle (phase-3 rule at the first divergence). */
static ts_status lockstep(const ts_model *m, const ts_perf_opts *o, const json_t *tiles, int copy, int runs, int gen,
                          int *violations, json_t *out_rows, ts_error *err) {
    enum { MAX_RUNS = 8 };
    const ts_config *c = ts_model_config(m);
    ts_cpu *cp = NULL;
    ts_cpu_opts co = {.n_threads = o->threads, .force_variant = -1, .disable = ts_placement_mask(copy), .fault = o->fault};
    int32_t toks[MAX_RUNS * 8];
    int same[MAX_RUNS], viol[MAX_RUNS];
    int n0 = c->max_pos < 8 ? c->max_pos : 8;
    if (gen > c->max_pos - n0) gen = c->max_pos - n0;
    if (runs > MAX_RUNS) runs = MAX_RUNS;
    for (int k = 0; k < runs; k++) ts_phase_prompt_tokens(c, 5, 300 + k, toks + k * n0, n0);
    ts_status s = ts_cpu_new(m, n0 + gen + 1, &co, &cp, err);
    if (!s && tiles) s = ts_perf_apply_tiles(cp, tiles, err);
    if (!s) s = ts_phase_lockstep(m, o->threads, cp, runs, toks, n0, gen, same, viol, err);
    *violations = 0;
    for (int k = 0; k < runs && !s; k++) {
        *violations += viol[k];
        if (o->out)
            fprintf(o->out, "  lockstep %d (final plan vs oracle): %d of %d greedy tokens identical%s\n", k, same[k], gen,
                    viol[k] ? ", diverged outside top-5" : "");
        json_array_append_new(out_rows,
                              json_pack("{s:i, s:i, s:b}", "identical_tokens", same[k], "tokens", gen, "violation", viol[k]));
    }
    ts_cpu_free(cp);
    return s;
}

ts_status ts_phase5_run(const ts_model *m, const ts_perf_opts *o, const json_t *phase4, json_t **report,
                        ts_error *err) {
    const ts_config *c = ts_model_config(m);
    FILE *out = o->out;
    const json_t *tiles = phase4 ? json_object_get(phase4, "tiles") : NULL;
    int D = o->decode_tokens, C0 = 128;
    if (C0 + D > c->max_pos) C0 = c->max_pos - D > 1 ? c->max_pos - D : 1;
    json_t *rep = json_object(), *rows = json_array(), *ctxs = json_array(), *gates = json_array(), *lock = json_array();
    json_t *base_prof = NULL, *final_prof = NULL;
    measure fin = {0};
    *report = NULL;
    ts_status s = TS_OK;
    int copy = 0; /* phase 4's weight placement */
    if (out)
        fprintf(out, "phase 5 (decode): optimization trajectory, %d greedy tokens after %d, %d warm trials each%s\n", D, C0,
                o->trials, tiles ? "" : " (no phase-4 report: default tiles)");
    if (phase4) s = ts_placement_parse(json_object_get(json_object_get(phase4, "placement"), "weights"),
                                       "phase4.json: placement.weights", &copy, err);
    if (!s && copy && !ts_placement_copy_fits(m)) { /* phase 4 ran with more memory free */
        copy = 0;
        if (out) fprintf(out, "  phase 4 chose copied weights, but a copy no longer fits in 70%% of RAM: the mmap\n");
    }
    if (!s) s = trajectory(m, o, 5, tiles, copy, C0, rows, &base_prof, &final_prof, &fin, err);
    /* Peaks of this machine now, for the bandwidth fraction. */
    ts_peaks pk = {0};
    if (!s) {
        ts_cpu *cp = NULL;
        ts_cpu_opts co = {.n_threads = o->threads, .force_variant = -1};
        if (!(s = ts_cpu_new(m, 1, &co, &cp, err))) ts_probe_peaks(ts_cpu_pool(cp), ts_cpu_variant_of(cp), 2, &pk);
        ts_cpu_free(cp);
    }
    for (int i = 0; i < o->n_sizes && !s; i++) {
        int C = o->sizes[i];
        if (C + D > c->max_pos) {
            if (out) fprintf(out, "  decode at context %d skipped: beyond max_position_embeddings %d\n", C, c->max_pos);
            continue;
        }
        measure r = fin; /* the trajectory's final row is this plan at C0: not run twice */
        if (C != C0 && (s = decode_case(m, o, ts_placement_mask(copy), tiles, C, &r, err))) break;
        json_decref(r.profile);
        double gbs = bytes_per_token(c, C + D / 2.0) * r.rate / 1e9;
        if (out)
            fprintf(out, "  decode at context %5d: %8.2f tok/s +- %.2f, %.2f GB/s (%.0f%% of the %.1f GB/s read peak)\n", C,
                    r.rate, r.rate_sd, gbs, 100 * gbs / pk.read_gbs, pk.read_gbs);
        json_t *row = measure_json(&r, "decode_tok_s");
        json_object_set_new(row, "context", json_integer(C));
        json_object_set_new(row, "gb_s", json_real(gbs));
        json_object_set_new(row, "bandwidth_fraction", json_real(gbs / pk.read_gbs));
        json_array_append_new(ctxs, row);
    }
    int viol = 0, pass = 1;
    if (!s) s = lockstep(m, o, tiles, copy, 2, 16, &viol, lock, err);
    if (!s) {
        if (out) {
            fprintf(out, "  where decode time goes, final plan (per token):\n");
            print_profile(out, final_prof);
        }
        json_array_append_new(gates, ts_gate_row("phase5", "lockstep_violations", viol, out, &pass));
        json_array_append_new(gates, ts_gate_row("phase5", "trials", o->trials, out, &pass));
    }
    if (s) {
        json_decref(rep), json_decref(rows), json_decref(ctxs), json_decref(gates), json_decref(lock);
        json_decref(base_prof), json_decref(final_prof);
        return s;
    }
    json_object_set_new(rep, "phase", json_integer(5));
    json_object_set_new(rep, "context", json_integer(C0));
    json_object_set_new(rep, "weights", json_string(copy ? "copy" : "mmap"));
    json_object_set_new(rep, "decode_tokens", json_integer(D));
    json_object_set_new(rep, "trials", json_integer(o->trials));
    json_object_set_new(rep, "threads", json_integer(o->threads));
    json_object_set_new(rep, "peak_read_gbs", json_real(pk.read_gbs));
    json_object_set_new(rep, "trajectory", rows);
    json_object_set_new(rep, "contexts", ctxs);
    json_object_set_new(rep, "lockstep", lock);
    json_object_set_new(rep, "profile_baseline", base_prof);
    json_object_set_new(rep, "profile_final", final_prof);
    json_object_set_new(rep, "gates", gates);
    json_object_set_new(rep, "pass", json_boolean(pass));
    if (out) fprintf(out, "phase 5: %s\n", pass ? "PASS" : "FAIL");
    *report = rep;
    return pass ? TS_OK : ts_fail(err, TS_ERR_GATE, "phase 5 gate failed (see the table)");
}

ts_status ts_perf_prefill(const ts_model *m, int threads, const json_t *tiles, int copy, int P, int trials,
                          double *mean_ms, double *sd_ms, ts_error *err) {
    ts_perf_opts o;
    ts_perf_defaults(&o, 4);
    o.threads = threads, o.trials = trials;
    measure r;
    ts_status s = prefill_case(m, &o, ts_placement_mask(copy), json_is_array(tiles) ? tiles : NULL, P, &r, err);
    if (!s) *mean_ms = r.mean_ms, *sd_ms = r.sd_ms;
    json_decref(r.profile);
    return s;
}

ts_status ts_perf_decode(const ts_model *m, int threads, const json_t *tiles, int copy, int C, int D, int trials,
                         double *tok_s, double *sd, ts_error *err) {
    ts_perf_opts o;
    ts_perf_defaults(&o, 5);
    o.threads = threads, o.trials = trials, o.decode_tokens = D;
    measure r;
    ts_status s = decode_case(m, &o, ts_placement_mask(copy), json_is_array(tiles) ? tiles : NULL, C, &r, err);
    if (!s) *tok_s = r.rate, *sd = r.rate_sd;
    json_decref(r.profile);
    return s;
}
