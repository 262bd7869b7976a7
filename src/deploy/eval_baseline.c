/* The comparison with an earlier deployment of the same model (`tessera eval DIR --baseline
 * OTHER`): each gate value against the baseline's (headroom to the threshold), each claim and
 * its re-measurement against the baseline's claim (the claim rule), as tables in evaluation.md. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "deploy/eval_internal.h"
#include "deploy/gates.h"

static const char *str(const json_t *o, const char *key) {
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "?";
}

static int same_weights(const json_t *a, const json_t *b) {
    if (json_array_size(a) != json_array_size(b) || !json_array_size(a)) return 0;
    size_t i, j;
    const json_t *x, *y;
    json_array_foreach(a, i, x) {
        int found = 0;
        json_array_foreach(b, j, y) found |= json_equal(json_object_get(x, "file"), json_object_get(y, "file")) &&
                                             json_equal(json_object_get(x, "sha256"), json_object_get(y, "sha256"));
        if (!found) return 0;
    }
    return 1;
}

ts_status ts_eval_same_model(const json_t *man, const json_t *base, const char *base_dir, ts_error *err) {
    const json_t *a = json_object_get(man, "model"), *b = json_object_get(base, "model");
    const char *ca = json_string_value(json_object_get(a, "config_sha256"));
    const char *cb = json_string_value(json_object_get(b, "config_sha256"));
    if (!ca || !cb || strcmp(ca, cb))
        return ts_fail(err, TS_ERR_ARG, "--baseline %s is a deployment of another model: config.json sha256 %.16s... "
                       "there, %.16s... here", base_dir, cb ? cb : "(none)", ca ? ca : "(none)");
    if (!same_weights(json_object_get(a, "weights"), json_object_get(b, "weights")))
        return ts_fail(err, TS_ERR_ARG, "--baseline %s is a deployment of another model: the same config.json, but "
                       "other weight files (name or sha256)", base_dir);
    return TS_OK;
}

/* Room a measured gate value leaves to its threshold (negative: the gate fails). */
static double headroom(const ts_threshold *t, double v) { return t->op == TS_GATE_GE ? v - t->value : t->value - v; }

static void baseline_gates(ts_eval_checks *k, const json_t *man, const json_t *base, FILE *tab, json_t *out) {
    double share = ts_eval_table("baseline_headroom_loss");
    int n = 0, worse = 0;
    fprintf(tab, "\n### Gates (a gate may lose at most %.0f%% of the baseline's headroom to its threshold)\n\n"
                 "| gate | baseline | this deployment | threshold | result |\n|---|---|---|---|---|\n", 100 * share);
    const char *phase;
    const json_t *v;
    json_object_foreach((json_t *)json_object_get(man, "gates"), phase, v) {
        const json_t *bp = json_object_get(json_object_get(base, "gates"), phase), *g, *bg;
        size_t i, j;
        json_array_foreach(json_object_get(v, "gates"), i, g) {
            const char *metric = json_string_value(json_object_get(g, "metric"));
            const ts_threshold *t = metric ? ts_threshold_find(phase, metric) : NULL;
            if (!t) continue; /* unknown rows fail the audit */
            const json_t *match = NULL;
            json_array_foreach(json_object_get(bp, "gates"), j, bg)
                if (json_equal(json_object_get(bg, "metric"), json_object_get(g, "metric"))) match = bg;
            double now = ts_eval_num(g, "measured"), was = match ? ts_eval_num(match, "measured") : NAN;
            double hn = headroom(t, now), hb = headroom(t, was);
            int level = !match ? TS_EVAL_WARN : !(hn >= 0) || (hb > 0 && hb - hn > share * hb) ? TS_EVAL_FAIL : TS_EVAL_OK;
            const char *op = t->op == TS_GATE_GE ? ">=" : "<=";
            n++;
            fprintf(tab, "| %s %s | %.9g | %.9g | %s %g | %s |\n", phase, metric, was, now, op, t->value,
                    level == TS_EVAL_OK ? "ok" : level == TS_EVAL_WARN ? "not in the baseline" : "**regressed**");
            json_array_append_new(out, json_pack("{s:s, s:s, s:o, s:o, s:s}", "phase", phase, "metric", metric, "baseline",
                                                 ts_json_number(was), "this", ts_json_number(now), "result",
                                                 level == TS_EVAL_OK ? "ok" : level == TS_EVAL_WARN ? "not compared" : "regressed"));
            if (level == TS_EVAL_FAIL) {
                worse++;
                ts_eval_note(k, level, "baseline: %s %s regressed: %.9g in the baseline, %.9g here (threshold %s %g; "
                             "headroom %.3g -> %.3g, at most %.0f%% may be lost)", phase, metric, was, now, op, t->value,
                             hb, hn, 100 * share);
            } else if (level == TS_EVAL_WARN)
                ts_eval_note(k, level, "baseline: %s %s is not in the baseline's gates: not compared", phase, metric);
        }
    }
    /* A gate the baseline had and this deployment lacks is a check that stopped running. */
    json_object_foreach((json_t *)json_object_get(base, "gates"), phase, v) {
        const json_t *mine = json_object_get(json_object_get(man, "gates"), phase), *bg, *g;
        size_t i, j;
        json_array_foreach(json_object_get(v, "gates"), i, bg) {
            int found = 0;
            json_array_foreach(json_object_get(mine, "gates"), j, g)
                found |= json_equal(json_object_get(bg, "metric"), json_object_get(g, "metric"));
            if (found) continue;
            fprintf(tab, "| %s %s | %.9g | - | | not in this deployment |\n", phase, str(bg, "metric"), ts_eval_num(bg, "measured"));
            ts_eval_note(k, TS_EVAL_WARN, "baseline: %s %s was a gate of the baseline, not of this deployment", phase,
                         str(bg, "metric"));
        }
    }
    if (!worse) ts_eval_note(k, TS_EVAL_OK, "baseline: %d gate values, none regressed beyond the headroom rule", n);
}

static void baseline_perf(ts_eval_checks *k, const json_t *man, const json_t *base, const json_t *got, FILE *tab,
                          json_t *out) {
    const json_t *pa = json_object_get(man, "performance"), *pb = json_object_get(base, "performance");
    int ta = (int)json_integer_value(json_object_get(pa, "trials")), tb = (int)json_integer_value(json_object_get(pb, "trials"));
    const json_t *tha = json_object_get(json_object_get(man, "target"), "threads");
    const json_t *thb = json_object_get(json_object_get(base, "target"), "threads");
    if (!json_equal(tha, thb))
        ts_eval_note(k, TS_EVAL_WARN, "baseline: measured with %lld threads, this deployment with %lld: the speeds "
                     "compare different plans", (long long)json_integer_value(thb), (long long)json_integer_value(tha));
    const json_t *ka = json_object_get(man, "target"), *kb = json_object_get(base, "target");
    int same_target = json_equal(json_object_get(ka, "variant"), json_object_get(kb, "variant")) &&
                      json_equal(json_object_get(ka, "prefill_kernel"), json_object_get(kb, "prefill_kernel"));
    if (!same_target)
        ts_eval_note(k, TS_EVAL_WARN, "baseline: measured with the %s kernels (prefill %s), this deployment with %s "
                     "(prefill %s): a slower claim is a warning", str(kb, "variant"), str(kb, "prefill_kernel"),
                     str(ka, "variant"), str(ka, "prefill_kernel"));
    fprintf(tab, "\n### Performance (the claim rule, with the baseline's claim as the claim)\n\n"
                 "| claim | baseline claim | this claim | re-measured now | result |\n|---|---|---|---|---|\n");
    for (int kind = 0; kind < 2; kind++) {
        const ts_eval_kind *kd = &ts_eval_kinds[kind];
        size_t i;
        const json_t *r;
        json_array_foreach(json_object_get(pb, kd->rows), i, r) {
            json_int_t size = json_integer_value(json_object_get(r, kd->size_key));
            char what[64];
            ts_eval_label(kd, (int)size, what, sizeof what);
            const json_t *mine = ts_eval_find_size(json_object_get(pa, kd->rows), kd->size_key, size), *g = NULL, *x;
            size_t j;
            json_array_foreach(got, j, x)
                if (!strcmp(json_string_value(json_object_get(x, "kind")), kd->rows) &&
                    json_integer_value(json_object_get(x, "size")) == size) g = x;
            if (!mine) {
                ts_eval_note(k, TS_EVAL_WARN, "baseline: claims %s; this deployment does not", what);
                fprintf(tab, "| %s | %.4g %s | - | - | not compared |\n", what, ts_eval_num(r, kd->mean_key), kd->unit);
                continue;
            }
            ts_eval_stat sb = ts_eval_claim_stat(kd, r, tb), sa = ts_eval_claim_stat(kd, mine, ta), sg = {NAN, NAN, 0};
            if (g) sg = (ts_eval_stat){ts_eval_num(g, "mean"), ts_eval_num(g, "sd"), (int)json_integer_value(json_object_get(g, "n"))};
            ts_eval_band b1, b2;
            int l1 = ts_eval_claim_verdict(sb, sa, kd->higher, &b1), l2 = g ? ts_eval_claim_verdict(sb, sg, kd->higher, &b2) : TS_EVAL_OK;
            /* Speeds of other kernels are not comparable: a regression between them is a warning. */
            if (!same_target && l1 == TS_EVAL_FAIL) l1 = TS_EVAL_WARN;
            if (g && !json_is_true(json_object_get(g, "same_kernels")) && l2 == TS_EVAL_FAIL) l2 = TS_EVAL_WARN;
            int level = l1 > l2 ? l1 : l2;
            static const char *res[] = {"ok", "slower beyond the band", "regressed beyond the floor"};
            static const char *cell[] = {"ok", "slower beyond the band", "**regressed** beyond the floor"};
            char now[64] = "-";
            if (g) snprintf(now, sizeof now, "%.4g +- %.3g", sg.mean, sg.sd);
            fprintf(tab, "| %s | %.4g +- %.3g %s | %.4g +- %.3g | %s | %s |\n", what, sb.mean, sb.sd, kd->unit, sa.mean,
                    sa.sd, now, cell[level]);
            json_array_append_new(out, json_pack("{s:s, s:I, s:o, s:o, s:o, s:s}", "kind", kd->rows, "size", size,
                                                 "baseline", ts_json_number(sb.mean), "this_claim", ts_json_number(sa.mean),
                                                 "remeasured", ts_json_number(sg.mean), "result", res[level]));
            const ts_eval_band *bw = l1 >= l2 ? &b1 : &b2;
            if (level == TS_EVAL_OK)
                ts_eval_note(k, level, "baseline: %s: baseline claims %.4g %s, this deployment %.4g, re-measured %.4g: "
                             "no regression beyond the band (%s %.4g)", what, sb.mean, kd->unit, sa.mean, sg.mean,
                             kd->higher ? ">=" : "<=", b1.bound);
            else {
                /* As for the claim itself: a re-measurement while others held the CPU says so. */
                double other = g ? ts_eval_num(g, "others_cpu_share_max") : 0;
                char busy[200] = "";
                if (l2 != TS_EVAL_OK && other > ts_eval_table("perf_busy_share"))
                    snprintf(busy, sizeof busy, "; other processes used up to %.0f%% of this machine's CPU time while it "
                             "was re-measured: run `tessera eval` again on an idle machine", 100 * other);
                ts_eval_note(k, level, "baseline: %s: baseline claims %.4g %s, this deployment claims %.4g (%s) and "
                             "re-measures %.4g (%s): %s (band %s %.4g, floor %s %.4g)%s", what, sb.mean, kd->unit, sa.mean,
                             res[l1], sg.mean, res[l2],
                             level == TS_EVAL_FAIL ? "a regression" : "slower than the baseline beyond the band, within the floor",
                             kd->higher ? ">=" : "<=", bw->bound, kd->higher ? ">=" : "<=", bw->floor_bound, busy);
            }
        }
    }
}

json_t *ts_eval_baseline(ts_eval_checks *k, const json_t *man, const json_t *base, const char *base_dir,
                         const json_t *got, FILE *tab) {
    json_t *gates = json_array(), *perf = json_array();
    fprintf(tab, "\n## Against the baseline %s\n\ncreated %s by tessera %s\n", base_dir,
            json_string_value(json_object_get(base, "created")) ?: "?",
            json_string_value(json_object_get(base, "tessera_version")) ?: "?");
    baseline_gates(k, man, base, tab, gates);
    baseline_perf(k, man, base, got, tab, perf);
    return json_pack("{s:s, s:o, s:o}", "dir", base_dir, "gates", gates, "performance", perf);
}
