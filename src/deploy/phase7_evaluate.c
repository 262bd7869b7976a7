/* The evaluator. Every check appends a line (OK / WARN / FAIL + reason) to evaluation.md;
 * the verdict is FAIL if any check failed, PASS-with-warnings if any warned. */
#include "deploy/phases.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/pool.h"
#include "deploy/gates.h"
#include "deploy/manifest.h"
#include "deploy/tiles.h"
#include "deploy/placement.h"
#include "io/json.h"
#include "io/mmap.h"
#include "io/sha256.h"
#include "target/cpu/cpu_target.h"

typedef struct checks {
    FILE *md, *out;
    int fails, warns;
    json_t *rows; /* every check, for phase7.json */
} checks;

static void note(checks *k, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note(checks *k, int level, const char *fmt, ...) {
    static const char *tag[] = {"OK", "WARN", "FAIL"};
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (level == 1) k->warns++;
    if (level == 2) k->fails++;
    fprintf(k->md, "| %s | %s |\n", tag[level], msg);
    json_array_append_new(k->rows, json_pack("{s:s, s:s}", "result", tag[level], "check", msg));
    if (k->out) fprintf(k->out, "  %-4s %s\n", tag[level], msg);
}

/* The kernels this process runs against those the deployment was measured with: another
 * variant (a different CPU) or another AVX-512 prefill kernel (the per-core probe, gemm.h)
 * changes the numbers phase 7 re-measures, so it is said before them. */
static void check_kernels(checks *k, const json_t *man) {
    const json_t *t = json_object_get(man, "target");
    const char *var = json_string_value(json_object_get(t, "variant"));
    const char *pk = json_string_value(json_object_get(t, "prefill_kernel"));
    ts_cpu_variant v = ts_cpu_best_variant();
    const char *now_var = ts_cpu_variant_name(v), *now_pk = ts_cpu_prefill_kernel_name(v);
    if (var && strcmp(var, now_var))
        note(k, 1, "this CPU runs the %s kernels; the deployment was measured with %s", now_var, var);
    else if (pk && strcmp(pk, now_pk))
        note(k, 1, "this process's prefill GEMM is %s; the deployment was measured with %s", now_pk, pk);
    else note(k, 0, "kernels as deployed: %s%s%s", now_var, pk ? ", prefill " : "", pk ? pk : "");
}

static void check_hashes(checks *k, const json_t *model, const char *dir) {
    char hex[65];
    ts_error e;
    char *cfg = ts_path_join(dir, "config.json");
    const char *want = json_string_value(json_object_get(model, "config_sha256"));
    if (!want) note(k, 2, "manifest has no config_sha256");
    else if (ts_sha256_file(cfg, hex, &e)) note(k, 2, "%s", e.msg);
    else if (strcmp(hex, want)) note(k, 2, "%s changed since deployment: sha256 %.16s..., manifest says %.16s...", cfg, hex, want);
    else note(k, 0, "config.json sha256 matches the manifest");
    free(cfg);
    size_t i;
    json_t *w;
    int n = 0;
    json_array_foreach(json_object_get(model, "weights"), i, w) {
        const char *file = json_string_value(json_object_get(w, "file"));
        const char *sha = json_string_value(json_object_get(w, "sha256"));
        if (!file || !sha || strchr(file, '/')) {
            note(k, 2, "manifest weights[%zu] is malformed", i);
            continue;
        }
        char *p = ts_path_join(dir, file);
        if (ts_sha256_file(p, hex, &e)) note(k, 2, "%s", e.msg);
        else if (strcmp(hex, sha)) note(k, 2, "%s changed since deployment: sha256 %.16s..., manifest says %.16s...", p, hex, sha);
        else n++;
        free(p);
    }
    if (n && n == (int)i) note(k, 0, "%d weight file(s): sha256 match the manifest", n);
    else if (!i) note(k, 2, "manifest lists no weight files");
}

/* A threshold in the manifest looser than the built-in table is a FAIL; missing ones warn. */
static void audit_thresholds(checks *k, const json_t *man) {
    int n, bad = 0, missing = 0;
    const ts_threshold *t = ts_thresholds(&n);
    const json_t *arr = json_object_get(man, "thresholds");
    for (int i = 0; i < n; i++) {
        size_t j;
        json_t *x;
        int found = 0;
        json_array_foreach(arr, j, x) {
            if (strcmp(json_string_value(json_object_get(x, "phase")) ?: "", t[i].phase) ||
                strcmp(json_string_value(json_object_get(x, "metric")) ?: "", t[i].metric))
                continue;
            found = 1;
            double v = json_number_value(json_object_get(x, "value"));
            int looser = t[i].op == TS_GATE_GE ? v < t[i].value : v > t[i].value;
            if (looser) {
                bad++;
                note(k, 2, "threshold %s/%s loosened: manifest %g, built-in %s %g", t[i].phase, t[i].metric, v,
                     t[i].op == TS_GATE_GE ? ">=" : "<=", t[i].value);
            }
        }
        missing += !found;
    }
    if (missing) note(k, 1, "%d built-in thresholds are absent from the manifest (older tessera?)", missing);
    if (!bad) note(k, 0, "thresholds: none looser than the built-in table (%d checked)", n);
}

static void recorded_gates(checks *k, const json_t *man) {
    const char *key;
    json_t *v;
    int n = 0;
    json_object_foreach((json_t *)json_object_get(man, "gates"), key, v) {
        n++;
        ts_phase_verdict pv = ts_phase_verdict_of(v);
        if (pv == TS_PHASE_FAIL) note(k, 2, "deployment recorded a failed gate in %s", key);
        else if (pv == TS_PHASE_NOT_COMPARED && !strcmp(key, "phase0"))
            note(k, 1, "phase 0 not compared with Hugging Face transformers (no golden logits): the oracle every gate "
                       "is measured against is unverified; `tessera deploy MODEL --phases 0 --hf-python PYTHON` "
                       "compares it");
        else if (pv == TS_PHASE_NOT_COMPARED) note(k, 1, "%s not compared: its gate had nothing to compare with", key);
    }
    if (json_is_true(json_object_get(man, "forced"))) note(k, 2, "deployment ran with --force");
    if (!n) note(k, 2, "manifest records no gates");
    else note(k, 0, "%d recorded phase gates read", n);
}

/* Greedy generation twice from fresh sessions of the deployed plan (its tiles and weight
 * placement) must give the same ids. */
static void determinism(checks *k, const ts_model *m, const json_t *man, int threads, uint64_t seed) {
    const json_t *target = json_object_get(man, "target");
    int copy;
    ts_error pe;
    if (ts_placement_parse(json_object_get(target, "weights"), "manifest.json: target.weights", &copy, &pe)) {
        note(k, 2, "%s", pe.msg);
        return;
    }
    enum { P = 8, G = 32 };
    const ts_config *c = ts_model_config(m);
    int32_t runs[2][P + G];
    ts_error e;
    float *lg = malloc(sizeof(float) * (size_t)c->n_vocab);
    for (int r = 0; r < 2 && lg; r++) {
        ts_cpu *cp;
        ts_cpu_opts o = {.n_threads = threads, .force_variant = -1, .disable = ts_placement_mask(copy)};
        if (ts_cpu_new(m, P + G, &o, &cp, &e) ||
            ts_tiles_apply(cp, json_object_get(target, "tiles"), &e)) {
            ts_cpu_free(cp);
            note(k, 2, "%s", e.msg);
            free(lg);
            return;
        }
        for (int i = 0; i < P; i++) runs[r][i] = (int32_t)((seed * 131 + (uint64_t)i * 977) % (uint64_t)c->n_vocab);
        ts_status s = ts_cpu_forward(cp, runs[r], P, lg, 0, NULL, &e);
        for (int g = 0; g < G && !s; g++) {
            runs[r][P + g] = ts_argmax(lg, c->n_vocab);
            if (g + 1 < G) s = ts_cpu_forward(cp, &runs[r][P + g], 1, lg, 0, NULL, &e);
        }
        ts_cpu_free(cp);
        if (s) {
            note(k, 2, "%s", e.msg);
            free(lg);
            return;
        }
    }
    free(lg);
    if (memcmp(runs[0], runs[1], sizeof runs[0]) == 0) note(k, 0, "greedy output byte-identical across two runs (%d tokens)", G);
    else note(k, 2, "greedy output differs between two runs: the target is not deterministic");
}

/* One claim against its re-measurement: flagged (a warning; the host's speed varies) when
 * it is off by more than the table's share or more than its sigma bound. */
static void judge(checks *k, const char *what, double claim, double claim_sd, double got, double got_sd, const char *unit) {
    double dev = fabs(got - claim) / claim, sig = claim_sd > 0 ? fabs(got - claim) / claim_sd : INFINITY;
    const ts_threshold *tr = ts_threshold_find("phase7", "perf_rel_dev"), *ts = ts_threshold_find("phase7", "perf_sigma");
    int ok = ts_threshold_pass(tr, dev) && ts_threshold_pass(ts, sig);
    note(k, ok ? 0 : 1, "%s: claimed %.2f +- %.2f %s, re-measured %.2f +- %.2f (%+.1f%%, %.1f sigma; flagged beyond "
         "%.0f%% or %g sigma)", what, claim, claim_sd, unit, got, got_sd, 100 * (got - claim) / claim, sig,
         100 * tr->value, ts->value);
}

static void remeasure(checks *k, const ts_model *m, const json_t *man, int threads) {
    const json_t *perf = json_object_get(man, "performance"), *target = json_object_get(man, "target");
    const json_t *tiles = json_object_get(target, "tiles"), *r;
    int trials = (int)json_integer_value(json_object_get(perf, "trials"));
    if (trials < 5) trials = 5;
    size_t i;
    ts_error e;
    int copy;
    if (ts_placement_parse(json_object_get(target, "weights"), "manifest.json: target.weights", &copy, &e)) {
        note(k, 2, "%s", e.msg);
        return;
    }
    ts_measure_opts mo = {.threads = threads, .trials = trials, .disable = ts_placement_mask(copy),
                          .tiles = json_is_array(tiles) ? tiles : NULL};
    json_array_foreach(json_object_get(perf, "prefill"), i, r) {
        int P = (int)json_integer_value(json_object_get(r, "tokens"));
        ts_measurement got;
        char what[64];
        snprintf(what, sizeof what, "TTFT at %d tokens", P);
        if (P < 1 || ts_measure_prefill(m, &mo, P, &got, &e)) {
            note(k, 2, "%s could not be re-measured: %s", what, P < 1 ? "malformed claim" : e.msg);
            continue;
        }
        judge(k, what, json_number_value(json_object_get(r, "ttft_ms_mean")),
              json_number_value(json_object_get(r, "ttft_ms_sd")), got.mean_ms, got.sd_ms, "ms");
        ts_measurement_free(&got);
    }
    int D = (int)json_integer_value(json_object_get(perf, "decode_tokens_per_trial"));
    json_array_foreach(json_object_get(perf, "decode"), i, r) {
        int C = (int)json_integer_value(json_object_get(r, "context"));
        ts_measurement got;
        char what[64];
        snprintf(what, sizeof what, "decode at context %d", C);
        if (C < 1 || D < 1 || ts_measure_decode(m, &mo, C, D, &got, &e)) {
            note(k, 2, "%s could not be re-measured: %s", what, C < 1 || D < 1 ? "malformed claim" : e.msg);
            continue;
        }
        judge(k, what, json_number_value(json_object_get(r, "decode_tok_s")),
              json_number_value(json_object_get(r, "decode_tok_s_sd")), got.rate, got.rate_sd, "tok/s");
        ts_measurement_free(&got);
    }
}

ts_status ts_evaluate(const char *dir, const ts_eval_opts *o, ts_verdict *verdict, ts_error *err) {
    char *mpath = ts_path_join(dir, "manifest.json"), *epath = ts_path_join(dir, "evaluation.md");
    json_t *man = NULL;
    ts_status s = ts_json_load_file(mpath, 64u << 20, &man, err);
    free(mpath);
    if (s) {
        free(epath);
        return s;
    }
    const json_t *model = json_object_get(man, "model");
    const char *mdir = json_string_value(json_object_get(model, "dir"));
    FILE *md = fopen(epath, "w");
    if (!md || !mdir) {
        if (md) fclose(md);
        json_decref(man);
        s = ts_fail(err, mdir ? TS_ERR_IO : TS_ERR_FORMAT, "%s: %s", dir,
                    mdir ? "cannot write evaluation.md" : "manifest.json has no model.dir");
        free(epath);
        return s;
    }
    checks k = {md, o->out, 0, 0, json_array()};
    /* The thread count, resolved once: --threads, else the deployment's, else every core. */
    long long rec = json_integer_value(json_object_get(json_object_get(man, "target"), "threads"));
    int threads = o->threads > 0 ? o->threads : rec > 0 && rec <= 1024 ? (int)rec : ts_pool_default_threads();
    fprintf(md, "# Evaluation of %s\n\nmodel %s, evaluation seed %llu, tessera %s\n\n| result | check |\n|---|---|\n",
            dir, mdir, (unsigned long long)o->seed, ts_version());
    if (o->out) fprintf(o->out, "phase 7 (evaluate): %s (model %s, seed %llu)\n", dir, mdir, (unsigned long long)o->seed);
    check_hashes(&k, model, mdir);
    check_kernels(&k, man);
    audit_thresholds(&k, man);
    recorded_gates(&k, man);
    ts_model *m = NULL;
    ts_error e;
    if (ts_model_open(mdir, &m, &e) || ts_model_check_values(m, &e)) {
        note(&k, 2, "%s", e.msg);
    } else {
        ts_phase_opts po = {.out = NULL, .threads = threads, .seed = o->seed};
        ts_status (*run[3])(const ts_model *, const ts_phase_opts *, json_t **, ts_error *) = {
            ts_phase1_run, ts_phase2_run, ts_phase3_run};
        for (int p = 0; p < 3; p++) {
            json_t *rep = NULL;
            ts_status ps = run[p](m, &po, &rep, &e);
            if (ps == TS_OK) note(&k, 0, "phase %d gate re-derived on new inputs: pass", p + 1);
            else if (ps == TS_ERR_GATE) note(&k, 2, "phase %d gate re-derived on new inputs: FAIL", p + 1);
            else note(&k, 2, "phase %d could not run: %s", p + 1, e.msg);
            json_decref(rep);
        }
        determinism(&k, m, man, threads, o->seed);
        if (json_is_object(json_object_get(man, "performance"))) remeasure(&k, m, man, threads);
    }
    if (!json_is_object(json_object_get(man, "performance")))
        note(&k, 1, "no performance claims to re-measure (phases 4-5 not run)");
    ts_model_close(m);
    *verdict = k.fails ? TS_VERDICT_FAIL : (k.warns ? TS_VERDICT_WARN : TS_VERDICT_PASS);
    static const char *names[] = {"PASS", "PASS-with-warnings", "FAIL"};
    fprintf(md, "\n**Verdict: %s** (%d failed, %d warnings)\n", names[*verdict], k.fails, k.warns);
    if (o->out) fprintf(o->out, "verdict: %s (%d failed, %d warnings); %s\n", names[*verdict], k.fails, k.warns, epath);
    fclose(md);
    free(epath);
    json_t *rep = json_pack("{s:i, s:s, s:b, s:i, s:i, s:I, s:o}", "phase", 7, "verdict", names[*verdict], "pass",
                            *verdict != TS_VERDICT_FAIL, "failed", k.fails, "warnings", k.warns, "seed",
                            (json_int_t)o->seed, "checks", k.rows);
    json_object_set_new(rep, "gates", json_pack("[{s:s, s:i, s:s, s:i, s:b}]", "metric", "failed_checks", "measured",
                                                k.fails, "op", "<=", "threshold", 0, "pass", k.fails == 0));
    char *jpath = ts_path_join(dir, "phase7.json");
    if (!jpath || json_dump_file(rep, jpath, JSON_INDENT(2)))
        if (o->out) fprintf(o->out, "warning: cannot write %s/phase7.json\n", dir);
    free(jpath);
    json_decref(rep);
    json_decref(man);
    return TS_OK;
}
