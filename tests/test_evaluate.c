/* The evaluator's claim rule and its re-derivation of recorded statistics: the edges of the
 * noise band and the floor for rates and times, an inflated recorded sd that must not buy
 * room past the floor, malformed numbers, and a measurement row against its samples; and its
 * audit of the recorded thresholds against the built-in table. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "deploy/eval_internal.h"
#include "deploy/gates.h"
#include "tharness.h"

static int verdict(double c, double sc, int nc, double g, double sg, int ng, int higher, ts_eval_band *b) {
    ts_eval_stat claim = {c, sc, nc}, got = {g, sg, ng};
    return ts_eval_claim_verdict(claim, got, higher, b);
}

/* fails of ts_eval_audit_thresholds on a manifest with the built-in table less those whose
 * metric starts with `drop`, and model.quant / model.kv_cache as given (NULL: absent) */
static int audit_fails(const char *drop, const char *quant, const char *kv) {
    int n;
    const ts_threshold *t = ts_thresholds(&n);
    json_t *man = json_object(), *arr = json_array(), *model = json_object();
    for (int i = 0; i < n; i++)
        if (!drop || strncmp(t[i].metric, drop, strlen(drop)))
            json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:f}", "phase", t[i].phase, "metric", t[i].metric, "op",
                                                 t[i].op == TS_GATE_GE ? ">=" : "<=", "value", t[i].value));
    json_object_set_new(man, "thresholds", arr);
    json_object_set_new(model, "quant", quant ? json_string(quant) : json_null());
    if (kv) json_object_set_new(model, "kv_cache", json_string(kv));
    json_object_set_new(man, "model", model);
    FILE *md = fopen("/dev/null", "w");
    ts_eval_checks k = {md, NULL, 0, 0, json_array()};
    ts_eval_audit_thresholds(&k, man);
    fclose(md);
    json_decref(k.rows), json_decref(man);
    return k.fails;
}

/* The threshold audit: every built-in threshold must be in the manifest, except those of an
 * option the deployment did not take (a manifest from before --kv-cache or --quant existed). */
static void check_threshold_audit(void) {
    CHECK(audit_fails(NULL, NULL, NULL) == 0, "the whole table: no fail");
    CHECK(audit_fails("rel_l2", NULL, NULL) > 0, "rel_l2 absent: a fail");
    CHECK(audit_fails("kv_f16_", NULL, NULL) == 0, "kv_f16_* absent, no kv_cache recorded (an older deployment): no fail");
    CHECK(audit_fails("kv_f16_", NULL, "f32") == 0, "kv_f16_* absent, FP32 cache: no fail");
    CHECK(audit_fails("kv_f16_", NULL, "f16") > 0, "kv_f16_* absent, F16 cache: a fail");
    CHECK(audit_fails("quant_q4_0_", "Q8_0", NULL) == 0, "quant_q4_0_* absent on a Q8_0 deployment: no fail");
    CHECK(audit_fails("quant_q8_0_", "Q8_0", NULL) > 0, "quant_q8_0_* absent on a Q8_0 deployment: a fail");
    CHECK(audit_fails("quant_", NULL, "f32") == 0, "quant_* absent, weights as stored: no fail");
}

int main(void) {
    ts_eval_band b;
    /* The constants the rule documents (eval_internal.h, gates.c). */
    CHECK(ts_threshold_find("phase7", "perf_sigma")->value == 3 && ts_threshold_find("phase7", "perf_rel_dev")->value == 0.10 &&
              ts_threshold_find("phase7", "perf_floor")->value == 0.75 &&
              ts_threshold_find("phase7", "perf_claim_sd_share")->value == 0.25,
          "phase-7 constants");
    /* Rates: claim 100 +- 2 tok/s over 5 trials, re-measured sd 2 over 5:
     * band = 10 + 3 * sqrt(0.8 + 0.8) = 13.795, so OK down to 86.205, WARN down to 75, FAIL below. */
    double bound = 100 - (10 + 3 * sqrt(1.6));
    CHECK(verdict(100, 2, 5, 100, 2, 5, 1, &b) == TS_EVAL_OK && fabs(b.bound - bound) < 1e-9, "bound %g", b.bound);
    CHECK(verdict(100, 2, 5, bound + 0.01, 2, 5, 1, &b) == TS_EVAL_OK, "just inside the band");
    CHECK(verdict(100, 2, 5, bound - 0.01, 2, 5, 1, &b) == TS_EVAL_WARN, "just outside the band");
    CHECK(verdict(100, 2, 5, 75, 2, 5, 1, &b) == TS_EVAL_WARN && b.floor_bound == 75, "at the floor");
    CHECK(verdict(100, 2, 5, 74.99, 2, 5, 1, &b) == TS_EVAL_FAIL, "below the floor");
    CHECK(verdict(100, 2, 5, 10, 1, 5, 1, &b) == TS_EVAL_FAIL, "a 10x inflated claim");
    CHECK(verdict(100, 2, 5, 50, 1, 5, 1, &b) == TS_EVAL_FAIL, "a 2x inflated claim");
    CHECK(verdict(100, 2, 5, 1000, 2, 5, 1, &b) == TS_EVAL_OK, "faster than claimed is fine");
    /* A wide re-measured spread widens the band (noise), never past the floor. */
    CHECK(verdict(100, 2, 5, 80, 20, 5, 1, &b) == TS_EVAL_OK, "noisy re-measurement inside its band");
    CHECK(verdict(100, 2, 5, 70, 200, 5, 1, &b) == TS_EVAL_FAIL, "noise cannot excuse the floor");
    /* An inflated recorded sd is counted at 25% of the claim: it can turn a WARN into an OK,
     * never a FAIL into anything else. */
    CHECK(verdict(100, 2, 5, 80, 1, 5, 1, &b) == TS_EVAL_WARN, "80%% of a claim with a small sd");
    CHECK(verdict(100, 1000, 5, 80, 1, 5, 1, &b) == TS_EVAL_OK && b.sd_used == 25, "capped sd: sd_used %g", b.sd_used);
    CHECK(verdict(100, 1000, 5, 74, 1, 5, 1, &b) == TS_EVAL_FAIL, "capped sd cannot pass the floor");
    CHECK(verdict(100, INFINITY, 5, 74, 1, 5, 1, &b) == TS_EVAL_FAIL && b.sd_used == 25, "infinite sd counts as the cap");
    /* One trial each widens the band (bound 100 - 10 - 3 sqrt(8) = 81.5) where five narrow it
     * (100 - 10 - 3 sqrt(1.6) = 86.2): 84 is inside the first, outside the second. */
    CHECK(verdict(100, 2, 1, 84, 2, 1, 1, &b) == TS_EVAL_OK, "one trial each: the band in standard errors");
    CHECK(verdict(100, 2, 5, 84, 2, 5, 1, &b) == TS_EVAL_WARN, "five trials each: a narrower band");
    /* Times (ms, lower is better): claim 10 +- 0.2 ms: OK up to 10 + 1 + 3 * sqrt(0.016),
     * FAIL beyond 10 / 0.75. */
    double tb = 10 + 1 + 3 * sqrt(0.016);
    CHECK(verdict(10, 0.2, 5, tb - 0.01, 0.2, 5, 0, &b) == TS_EVAL_OK && fabs(b.bound - tb) < 1e-9, "time bound %g", b.bound);
    CHECK(verdict(10, 0.2, 5, tb + 0.01, 0.2, 5, 0, &b) == TS_EVAL_WARN, "time just outside the band");
    CHECK(verdict(10, 0.2, 5, 13.33, 0.2, 5, 0, &b) == TS_EVAL_WARN && fabs(b.floor_bound - 10 / 0.75) < 1e-12, "time floor");
    CHECK(verdict(10, 0.2, 5, 13.34, 0.2, 5, 0, &b) == TS_EVAL_FAIL, "time beyond the floor");
    CHECK(verdict(10, 0.2, 5, 1, 0.1, 5, 0, &b) == TS_EVAL_OK, "a faster TTFT is fine");
    /* Malformed numbers fail. */
    CHECK(verdict(0, 1, 5, 10, 1, 5, 1, &b) == TS_EVAL_FAIL, "zero claim");
    CHECK(verdict(NAN, 1, 5, 10, 1, 5, 1, &b) == TS_EVAL_FAIL, "NaN claim");
    CHECK(verdict(10, 1, 5, NAN, 1, 5, 1, &b) == TS_EVAL_FAIL, "NaN measurement");
    CHECK(verdict(10, -1, 5, 10, 1, 5, 1, &b) == TS_EVAL_FAIL, "negative sd");
    CHECK(verdict(10, NAN, 5, 10, 1, 5, 0, &b) == TS_EVAL_FAIL, "NaN sd");

    /* A measurement row against its samples: 4 tokens per trial at 100 and 200 tok/s are 40
     * and 20 ms. */
    json_t *row = json_pack("{s:f, s:f, s:f, s:f, s:[f, f]}", "decode_tok_s", 150.0, "decode_tok_s_sd", sqrt(5000.0),
                            "warm_ms_mean", 30.0, "warm_ms_sd", sqrt(200.0), "samples_tok_s", 100.0, 200.0);
    char why[320];
    int n;
    CHECK(ts_eval_row_stats(row, "decode_tok_s", 4, &n, why, sizeof why) == 0 && n == 2, "consistent row: %s", why);
    json_object_set_new(row, "decode_tok_s", json_real(1500));
    CHECK(ts_eval_row_stats(row, "decode_tok_s", 4, &n, why, sizeof why) == 1 && strstr(why, "decode_tok_s 1500"),
          "an edited mean: %s", why);
    json_object_set_new(row, "decode_tok_s", json_real(150));
    json_object_set_new(row, "warm_ms_sd", json_real(1));
    CHECK(ts_eval_row_stats(row, "decode_tok_s", 4, &n, why, sizeof why) == 1 && strstr(why, "warm_ms_mean"),
          "an edited time sd: %s", why);
    json_object_set_new(row, "warm_ms_sd", json_real(sqrt(200.0)));
    json_array_set_new(json_object_get(row, "samples_tok_s"), 1, json_real(0));
    CHECK(ts_eval_row_stats(row, "decode_tok_s", 4, &n, why, sizeof why) == 1 && strstr(why, "samples_tok_s[1]"),
          "a zero sample: %s", why);
    json_object_del(row, "samples_tok_s");
    CHECK(ts_eval_row_stats(row, "decode_tok_s", 4, &n, why, sizeof why) == 0 && n == 0, "a row without samples");
    json_decref(row);
    check_threshold_audit();
    return th_finish("test_evaluate");
}
