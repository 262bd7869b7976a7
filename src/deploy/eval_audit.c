/* The evaluator's audit of what a deployment recorded: its thresholds against the built-in
 * table, and the gates of phases 0-6 against their own numbers, the phase reports they were
 * copied from, and the rows each report summarizes. Nothing here re-runs a model. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "deploy/eval_internal.h"
#include "deploy/gates.h"
#include "deploy/manifest.h"
#include "deploy/plan_choice.h"
#include "io/json.h"
#include "io/mmap.h"

static const char *op_name(const ts_threshold *t) { return t->op == TS_GATE_GE ? ">=" : "<="; }

static const char *str(const json_t *o, const char *key) {
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

/* Whether the deployment took the threshold's option (gates.h): one it did not take has no gate
 * to hold, and a manifest from before the option existed lacks its rows (check_rows still holds
 * any such row it records to the built-in value). */
static int applies(const ts_threshold *t, const json_t *man) {
    const json_t *model = json_object_get(man, "model");
    return !t->option || !strcmp(str(model, "quant"), t->option) || !strcmp(str(model, "kv_cache"), t->option);
}

void ts_eval_audit_thresholds(ts_eval_checks *k, const json_t *man) {
    int n, bad = 0, missing = 0;
    char names[600] = "";
    const ts_threshold *t = ts_thresholds(&n);
    const json_t *arr = json_object_get(man, "thresholds");
    for (int i = 0; i < n; i++) {
        size_t j;
        const json_t *x, *found = NULL;
        json_array_foreach(arr, j, x)
            if (!strcmp(str(x, "phase"), t[i].phase) && !strcmp(str(x, "metric"), t[i].metric)) found = x;
        if (!found && !applies(&t[i], man)) continue;
        if (!found) {
            size_t l = strlen(names);
            if (l + 40 < sizeof names) snprintf(names + l, sizeof names - l, "%s%s/%s", missing ? ", " : "", t[i].phase, t[i].metric);
            missing++;
            continue;
        }
        double v = ts_eval_num(found, "value");
        int looser = t[i].op == TS_GATE_GE ? !(v >= t[i].value) : !(v <= t[i].value);
        if (looser || strcmp(str(found, "op"), op_name(&t[i]))) {
            bad++;
            ts_eval_note(k, TS_EVAL_FAIL, "threshold %s/%s loosened: manifest %s %g, built-in %s %g", t[i].phase, t[i].metric,
                         str(found, "op"), v, op_name(&t[i]), t[i].value);
        }
    }
    /* A deployment that does not say which thresholds it was held to cannot be audited. */
    if (missing)
        ts_eval_note(k, TS_EVAL_FAIL, "%d built-in threshold(s) absent from the manifest: %s", missing, names);
    if (!bad && !missing)
        ts_eval_note(k, TS_EVAL_OK, "thresholds: all %d built-in thresholds present, none looser than the table", n);
}

/* Each recorded gate row against the built-in threshold and its own measured value; returns
 * the pass the numbers give for the whole phase. */
static int check_rows(ts_eval_checks *k, const char *phase, const json_t *gates, int *rows) {
    size_t i;
    const json_t *g;
    int all = 1;
    if (!json_array_size(gates)) {
        ts_eval_note(k, TS_EVAL_FAIL, "%s records no gate rows", phase);
        return 0;
    }
    json_array_foreach(gates, i, g) {
        const char *metric = str(g, "metric");
        const ts_threshold *t = ts_threshold_find(phase, metric);
        (*rows)++;
        if (!t) {
            ts_eval_note(k, TS_EVAL_FAIL, "%s gate row %zu: metric \"%s\" has no built-in threshold", phase, i, metric);
            all = 0;
            continue;
        }
        double v = ts_eval_num(g, "measured"), thr = ts_eval_num(g, "threshold"); /* measured null: NaN/Inf, which fails */
        int pass = ts_threshold_pass(t, v), said = json_is_true(json_object_get(g, "pass"));
        all &= pass;
        if (thr != t->value || strcmp(str(g, "op"), op_name(t)))
            ts_eval_note(k, TS_EVAL_FAIL, "%s %s: recorded against %s %g, the built-in threshold is %s %g", phase, metric,
                         str(g, "op"), thr, op_name(t), t->value);
        if (said != pass)
            ts_eval_note(k, TS_EVAL_FAIL, "%s %s: recorded gate contradicts its numbers: measured %.9g %s %g is %s, "
                         "recorded pass: %s", phase, metric, v, op_name(t), t->value, pass ? "a pass" : "a FAIL",
                         said ? "true" : "false");
    }
    return all;
}

static double gate_value(const json_t *gates, const char *metric, int *found) {
    size_t i;
    const json_t *g;
    json_array_foreach(gates, i, g) if (!strcmp(str(g, "metric"), metric)) {
        *found = 1;
        return ts_eval_num(g, "measured");
    }
    *found = 0;
    return NAN;
}

/* A recorded summary value against the one recomputed from the report's rows. */
static void summary(ts_eval_checks *k, const char *phase, const json_t *gates, const char *metric, double want,
                    const char *from) {
    int found;
    double v = gate_value(gates, metric, &found), tol = ts_eval_table("recorded_rel_err");
    if (!found) ts_eval_note(k, TS_EVAL_FAIL, "%s records no %s gate", phase, metric);
    else if (!(isnan(v) && isnan(want)) && !(fabs(v - want) <= tol * fmax(1, fabs(want))))
        ts_eval_note(k, TS_EVAL_FAIL, "%s %s: recorded %.9g, its %s give %.9g", phase, metric, v, from, want);
}

/* The sum of an integer or boolean field over an array of rows. */
static double sum_of(const json_t *rows, const char *key) {
    size_t i;
    const json_t *r;
    double s = 0;
    json_array_foreach(rows, i, r) {
        const json_t *v = json_object_get(r, key);
        s += json_is_boolean(v) ? json_is_true(v) : json_is_number(v) ? json_number_value(v) : NAN;
    }
    return s;
}

static void phase0_rows(ts_eval_checks *k, const json_t *rep) {
    const json_t *gates = json_object_get(rep, "gates"), *seqs = json_object_get(rep, "sequences"), *s;
    if (!json_array_size(seqs)) {
        ts_eval_note(k, TS_EVAL_FAIL, "phase0.json records no sequences");
        return;
    }
    summary(k, "phase0", gates, "nonfinite", sum_of(seqs, "nonfinite"), "sequences' non-finite counts");
    int found;
    if (!json_is_true(json_object_get(rep, "hf_compared"))) {
        gate_value(gates, "pearson", &found);
        if (found) ts_eval_note(k, TS_EVAL_FAIL, "phase0 records an HF comparison gate, but hf_compared is not true");
        if (ts_phase_verdict_of(rep) == TS_PHASE_PASS)
            ts_eval_note(k, TS_EVAL_FAIL, "phase0 says PASS without a comparison with Hugging Face (hf_compared is not true)");
        return;
    }
    if (ts_phase_verdict_of(rep) == TS_PHASE_NOT_COMPARED)
        ts_eval_note(k, TS_EVAL_FAIL, "phase0 says not compared, but hf_compared is true");
    double top1 = 1, p = 1, rel = 0;
    size_t i;
    json_array_foreach(seqs, i, s) {
        double n = ts_eval_num(s, "n_tokens");
        top1 = ts_worst_min(top1, ts_eval_num(s, "top1_match") / n);
        p = ts_worst_min(p, ts_eval_num(s, "pearson"));
        rel = ts_worst_max(rel, ts_eval_num(s, "rel_l2"));
    }
    summary(k, "phase0", gates, "top1_frac", top1, "sequences' top-1 matches");
    summary(k, "phase0", gates, "pearson", p, "sequences' Pearson values");
    summary(k, "phase0", gates, "rel_l2", rel, "sequences' rel_l2 values");
}

/* A phase 4/5 report's measurements: trial counts and each row's statistics against its samples. */
static void perf_rows(ts_eval_checks *k, const char *phase, const json_t *rep, const char *list, const char *size_key,
                      double tokens, const char *rate_key) {
    int trials = (int)json_integer_value(json_object_get(rep, "trials"));
    size_t i;
    const json_t *r;
    const json_t *rows[2] = {json_object_get(rep, "trajectory"), json_object_get(rep, list)};
    for (int a = 0; a < 2; a++) json_array_foreach(rows[a], i, r) {
        char why[320];
        int n;
        double t = a == 1 && size_key && !strcmp(size_key, "tokens") ? ts_eval_num(r, "tokens") : tokens;
        if (ts_eval_row_stats(r, rate_key, t, &n, why, sizeof why))
            ts_eval_note(k, TS_EVAL_FAIL, "%s %s[%zu]: %s", phase, a ? list : "trajectory", i, why);
        else if (n && n != trials)
            ts_eval_note(k, TS_EVAL_FAIL, "%s %s[%zu]: %d samples, the report says %d trials", phase, a ? list : "trajectory",
                         i, n, trials);
    }
    int found;
    gate_value(json_object_get(rep, "gates"), "trials", &found); /* older reports gate the trial count */
    if (found) summary(k, phase, json_object_get(rep, "gates"), "trials", trials, "report's trial count");
}

static void lockstep_rows(ts_eval_checks *k, const char *phase, const json_t *rep) {
    const json_t *runs = json_object_get(rep, "lockstep"), *r;
    size_t i;
    if (!json_array_size(runs)) ts_eval_note(k, TS_EVAL_FAIL, "%s.json records no lockstep runs", phase);
    summary(k, phase, json_object_get(rep, "gates"), "lockstep_violations", sum_of(runs, "violation"), "lockstep runs");
    json_array_foreach(runs, i, r) {
        const json_t *n = json_object_get(r, "tokens");
        if (n && ts_eval_num(r, "identical_tokens") > ts_eval_num(r, "tokens"))
            ts_eval_note(k, TS_EVAL_FAIL, "%s lockstep[%zu]: %g identical tokens of %g", phase, i, ts_eval_num(r, "identical_tokens"),
                         ts_eval_num(r, "tokens"));
    }
}

/* A report's class counts (prompts.h) against the rows they summarize, recounted by the code
 * that counted them: the position prompts' decisive/competitive positions, the lockstep runs'
 * greedy steps and divergences. Reports from before the counts have none to check. */
static int count_of(const json_t *r, const char *key) { /* a tampered row: -1, never UB */
    double v = ts_eval_num(r, key);
    return isfinite(v) && fabs(v) < 1e9 ? (int)v : -1;
}

static void class_rows(ts_eval_checks *k, const char *phase, const json_t *rep, const char *prompt_rows) {
    const json_t *cls = json_object_get(rep, "classes"), *r;
    if (!cls) return;
    ts_prompt_classes want = {0};
    size_t i;
    json_array_foreach(prompt_rows ? json_object_get(rep, prompt_rows) : NULL, i, r)
        ts_prompt_classes_prompt(&want, count_of(r, "decisive") + count_of(r, "competitive"), count_of(r, "decisive"));
    json_array_foreach(json_object_get(rep, "lockstep"), i, r) {
        const char *at = str(r, "diverged_at");
        int dec = count_of(r, "decisive_steps");
        ts_prompt_classes_run(&want, dec + count_of(r, "competitive_steps"), dec,
                              !*at ? -1 : !strcmp(at, "decisive"));
    }
    json_t *got = ts_prompt_classes_json(&want);
    const char *groups[5] = {"positions", "prompts", "lockstep_steps", "lockstep_runs", "lockstep_divergences"};
    for (int g = 0; g < 5; g++) {
        const json_t *a = json_object_get(cls, groups[g]), *b = json_object_get(got, groups[g]);
        if (!a) continue;
        if (!b || !json_equal(a, b))
            ts_eval_note(k, TS_EVAL_FAIL, "%s classes.%s: recorded %g decisive / %g competitive, its rows give %g / %g",
                         phase, groups[g], ts_eval_num(a, "decisive"), ts_eval_num(a, "competitive"),
                         ts_eval_num(b, "decisive"), ts_eval_num(b, "competitive"));
    }
    json_decref(got);
}

/* Phase 5's choice of the final decode plan (plan_choice.h): the gate recomputed from the
 * candidates' rounds, the shipped plan the one the report, the manifest and the choice name. */
static void plan_rows(ts_eval_checks *k, const json_t *man, const json_t *rep) {
    const json_t *pc = json_object_get(rep, "plan_choice"), *gates = json_object_get(rep, "gates");
    int found;
    gate_value(gates, "plan_deficit", &found);
    if (!pc) {
        if (found) ts_eval_note(k, TS_EVAL_FAIL, "phase5 records a plan_deficit gate but no plan_choice to derive it from");
        return;
    }
    summary(k, "phase5", gates, "plan_deficit", ts_plan_deficit(pc), "plan_choice rounds");
    const json_t *ch = json_array_get(json_object_get(pc, "candidates"), (size_t)json_integer_value(json_object_get(pc, "chosen")));
    const json_t *target = json_object_get(man, "target");
    const char *w = str(ch, "weights"), *t = str(ch, "tiles"), *mw = str(target, "weights");
    if (strcmp(w, str(pc, "weights")) || strcmp(t, str(pc, "tiles")) || strcmp(w, str(rep, "weights")) ||
        strcmp(t, str(rep, "tiles")) || strcmp(w, *mw ? mw : "mmap") ||
        (!strcmp(t, "default")) == json_is_array(json_object_get(target, "tiles")))
        ts_eval_note(k, TS_EVAL_FAIL, "phase5 plan_choice: the chosen candidate (weights %s, %s tiles) is not the plan "
                     "phase5.json (weights %s, %s tiles) and the manifest (weights %s) ship", w, t, str(rep, "weights"),
                     str(rep, "tiles"), *mw ? mw : "mmap");
}

void ts_eval_recorded_gates(ts_eval_checks *k, const json_t *man, const char *dir, json_t *reports[TS_N_PHASES]) {
    const json_t *gates = json_object_get(man, "gates");
    int fails0 = k->fails, rows = 0, all = 1, n = 0;
    char absent[64] = "";
    if (json_is_true(json_object_get(man, "forced"))) ts_eval_note(k, TS_EVAL_FAIL, "deployment ran with --force");
    for (int p = 0; p < 7; p++) {
        char phase[16], file[32];
        snprintf(phase, sizeof phase, "phase%d", p);
        snprintf(file, sizeof file, "phase%d.json", p);
        const json_t *v = json_object_get(gates, phase);
        if (!v) {
            size_t l = strlen(absent);
            snprintf(absent + l, sizeof absent - l, "%s%d", l ? ", " : "", p);
            continue;
        }
        n++;
        /* "not compared" (phase 0 without goldens): every row it has passes, yet it is no pass. */
        ts_phase_verdict pv = ts_phase_verdict_of(v);
        all &= pv == TS_PHASE_PASS;
        if (pv == TS_PHASE_FAIL) ts_eval_note(k, TS_EVAL_FAIL, "deployment recorded a failed gate in %s", phase);
        else if (pv == TS_PHASE_NOT_COMPARED && p == 0)
            ts_eval_note(k, TS_EVAL_WARN, "phase 0 not compared with Hugging Face transformers (no golden logits): the "
                         "oracle every gate is measured against is unverified; `tessera deploy MODEL --phases 0 "
                         "--hf-python PYTHON` compares it");
        else if (pv == TS_PHASE_NOT_COMPARED)
            ts_eval_note(k, TS_EVAL_FAIL, "%s is recorded as not compared: only phase 0 can be", phase);
        if (check_rows(k, phase, json_object_get(v, "gates"), &rows) != (pv != TS_PHASE_FAIL))
            ts_eval_note(k, TS_EVAL_FAIL, "%s: recorded verdict %s, its gate rows say otherwise", phase,
                         ts_phase_verdict_name(pv));
        /* The phase report the manifest copied: present, and saying the same. */
        char *path = ts_path_join(dir, file);
        ts_error e;
        json_t *rep = NULL;
        if (!path || !ts_file_exists(path)) ts_eval_note(k, TS_EVAL_FAIL, "%s: the manifest records it, but %s is missing", phase, file);
        else if (ts_json_load_file(path, 256u << 20, &rep, &e)) ts_eval_note(k, TS_EVAL_FAIL, "%s", e.msg);
        free(path);
        if (!rep) continue;
        reports[p] = rep;
        if (!json_equal(json_object_get(rep, "gates"), json_object_get(v, "gates")) || ts_phase_verdict_of(rep) != pv)
            ts_eval_note(k, TS_EVAL_FAIL, "%s: the manifest's gates differ from %s", phase, file);
        if (p == 0) phase0_rows(k, rep);
        if (p == 3) {
            summary(k, phase, json_object_get(rep, "gates"), "position_violations",
                    sum_of(json_object_get(rep, "prompts"), "violations"), "prompts");
            summary(k, phase, json_object_get(rep, "gates"), "lockstep_violations",
                    sum_of(json_object_get(rep, "lockstep"), "violation"), "lockstep runs");
            class_rows(k, phase, rep, "prompts");
        }
        if (p == 4) {
            perf_rows(k, phase, rep, "ttft", "tokens", ts_eval_num(rep, "prefill_tokens"), "prefill_tok_s");
            class_rows(k, phase, rep, "oracle_prompts");
        }
        if (p == 5) {
            plan_rows(k, man, rep);
            perf_rows(k, phase, rep, "contexts", NULL, ts_eval_num(rep, "decode_tokens"), "decode_tok_s");
            lockstep_rows(k, phase, rep);
            class_rows(k, phase, rep, NULL);
        }
    }
    if (!n) ts_eval_note(k, TS_EVAL_FAIL, "manifest records no gates");
    else if (absent[0]) ts_eval_note(k, TS_EVAL_WARN, "the manifest records no gates of phase(s) %s", absent);
    if (json_is_true(json_object_get(man, "all_gates_passed")) && !all)
        ts_eval_note(k, TS_EVAL_FAIL, "manifest says all_gates_passed, but a phase recorded a failure");
    if (n && k->fails == fails0)
        ts_eval_note(k, TS_EVAL_OK, "recorded gates: %d phases, %d rows agree with their numbers, the built-in thresholds, "
                     "their phase reports and the rows those summarize", n, rows);
}
