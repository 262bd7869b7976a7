/* Performance claims, checked rather than re-measured only: the claim rule (eval_internal.h),
 * the re-measurement of every claim in the manifest, and the comparison with an earlier
 * deployment of the same model (`tessera eval DIR --baseline OTHER`). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "deploy/eval_internal.h"
#include "deploy/gates.h"
#include "deploy/placement.h"

static double table(const char *metric) { return ts_threshold_find("phase7", metric)->value; }

int ts_eval_claim_verdict(ts_eval_stat claim, ts_eval_stat got, int higher_is_better, ts_eval_band *b) {
    double c = claim.mean, g = got.mean, share = table("perf_claim_sd_share"), floor = table("perf_floor");
    memset(b, 0, sizeof *b);
    if (!isfinite(c) || c <= 0 || !isfinite(g) || g <= 0 || !(claim.sd >= 0) || !(got.sd >= 0)) return TS_EVAL_FAIL;
    /* An sd beyond the cap (or infinite) counts as the cap: a wide recorded spread cannot buy room. */
    double s1 = claim.sd < share * c ? claim.sd : share * c, s2 = isfinite(got.sd) ? got.sd : 0;
    int n1 = claim.n > 1 ? claim.n : 1, n2 = got.n > 1 ? got.n : 1;
    b->sd_used = s1;
    b->band = table("perf_rel_dev") * c + table("perf_sigma") * sqrt(s1 * s1 / n1 + s2 * s2 / n2);
    if (higher_is_better) {
        b->bound = c - b->band;
        b->floor_bound = floor * c;
        return g < b->floor_bound ? TS_EVAL_FAIL : g < b->bound ? TS_EVAL_WARN : TS_EVAL_OK;
    }
    b->bound = c + b->band;
    b->floor_bound = c / floor;
    return g > b->floor_bound ? TS_EVAL_FAIL : g > b->bound ? TS_EVAL_WARN : TS_EVAL_OK;
}

static const char *str(const json_t *o, const char *key) {
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "?";
}

static double num(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* mean and sd recorded at mkey/skey against those of x[0..n); 0 when they agree. */
static int agree(const json_t *row, const char *mkey, const char *skey, const double *x, int n, char *why, size_t len) {
    if (!mkey) return 0;
    double mean, sd, tol = table("recorded_rel_err"), rm = num(row, mkey), rs = skey ? num(row, skey) : 0;
    ts_measure_stats(x, n, &mean, &sd);
    double scale = fabs(mean) > 0 ? fabs(mean) : 1;
    if (fabs(rm - mean) <= tol * scale && (!skey || fabs(rs - sd) <= tol * scale)) return 0; /* NaN compares false */
    snprintf(why, len, "recorded %s %.6g%s%s%.6g, its %d samples give %.6g and %.6g", mkey, rm, skey ? " and " : "",
             skey ? skey : "", skey ? rs : 0.0, n, mean, sd);
    return 1;
}

int ts_eval_row_stats(const json_t *row, const char *rate_key, double tokens, int *n_out, char *why, size_t len) {
    const json_t *smp = json_object_get(row, "samples_tok_s");
    int n = (int)json_array_size(smp);
    *n_out = n;
    if (!n) return 0;
    double *rate = malloc(sizeof(double) * (size_t)n), *ms = malloc(sizeof(double) * (size_t)n);
    int bad = !rate || !ms;
    if (bad) snprintf(why, len, "out of memory");
    for (int i = 0; i < n && !bad; i++) {
        rate[i] = json_number_value(json_array_get(smp, (size_t)i));
        if (!json_is_number(json_array_get(smp, (size_t)i)) || !(rate[i] > 0)) {
            snprintf(why, len, "samples_tok_s[%d] is not a positive number", i);
            bad = 1;
        }
        ms[i] = tokens * 1e3 / rate[i];
    }
    char sd_key[64];
    snprintf(sd_key, sizeof sd_key, "%s_sd", rate_key ? rate_key : "");
    if (!bad && rate_key) bad = agree(row, rate_key, json_object_get(row, sd_key) ? sd_key : NULL, rate, n, why, len);
    /* The time statistics are kept under one of two names: a phase report's rows and the manifest's TTFT claims. */
    const char *mk = json_object_get(row, "warm_ms_mean") ? "warm_ms_mean" : json_object_get(row, "ttft_ms_mean") ? "ttft_ms_mean" : NULL;
    if (!bad && mk) bad = agree(row, mk, strcmp(mk, "warm_ms_mean") ? "ttft_ms_sd" : "warm_ms_sd", ms, n, why, len);
    free(rate), free(ms);
    return bad;
}

/* One kind of claim: TTFT (ms, lower is better) or decode (tok/s). */
typedef struct claim_kind {
    const char *rows, *size_key, *mean_key, *sd_key, *rate_key, *unit; /* manifest keys, unit */
    const char *rep_rows, *rep_mean, *rep_sd;                        /* the phase report's row keys */
    int higher;
} claim_kind;

static const claim_kind k_kinds[2] = {
    {"prefill", "tokens", "ttft_ms_mean", "ttft_ms_sd", "prefill_tok_s", "ms", "ttft", "warm_ms_mean", "warm_ms_sd", 0},
    {"decode", "context", "decode_tok_s", "decode_tok_s_sd", "decode_tok_s", "tok/s", "contexts", "decode_tok_s",
     "decode_tok_s_sd", 1},
};

/* "TTFT at 128 tokens", "decode at context 1024" */
static void label(const claim_kind *kd, int size, char *buf, size_t len) {
    if (kd->higher) snprintf(buf, len, "decode at context %d", size);
    else snprintf(buf, len, "TTFT at %d tokens", size);
}

static const json_t *find_size(const json_t *rows, const char *size_key, json_int_t size) {
    size_t i;
    const json_t *r;
    json_array_foreach(rows, i, r) if (json_integer_value(json_object_get(r, size_key)) == size) return r;
    return NULL;
}

/* The claim's statistics; n from its samples, else the manifest's trial count. */
static ts_eval_stat claim_stat(const claim_kind *kd, const json_t *row, int trials) {
    int n = (int)json_array_size(json_object_get(row, "samples_tok_s"));
    ts_eval_stat s = {num(row, kd->mean_key), num(row, kd->sd_key), n ? n : trials};
    return s;
}

/* What the manifest claims against the phase report it was copied from and its own samples;
 * 0 when both agree. */
static int claim_recorded(ts_eval_checks *k, const claim_kind *kd, const json_t *row, const json_t *rep, int phase,
                          double tokens, const char *what) {
    char why[320];
    int n;
    if (ts_eval_row_stats(row, kd->rate_key, tokens, &n, why, sizeof why)) {
        ts_eval_note(k, TS_EVAL_FAIL, "%s: the manifest's claim disagrees with its samples: %s", what, why);
        return 1;
    }
    if (!rep) {
        ts_eval_note(k, TS_EVAL_FAIL, "%s: the manifest claims it, but phase%d.json (the measurement) is not recorded", what,
                     phase);
        return 1;
    }
    const json_t *r = find_size(json_object_get(rep, kd->rep_rows), kd->size_key,
                                json_integer_value(json_object_get(row, kd->size_key)));
    if (!r || num(r, kd->rep_mean) != num(row, kd->mean_key) || num(r, kd->rep_sd) != num(row, kd->sd_key) ||
        (json_object_get(row, "samples_tok_s") &&
         !json_equal(json_object_get(r, "samples_tok_s"), json_object_get(row, "samples_tok_s")))) {
        ts_eval_note(k, TS_EVAL_FAIL, "%s: the manifest claims %.6g +- %.6g %s, phase%d.json measured %s", what,
                     num(row, kd->mean_key), num(row, kd->sd_key), kd->unit, phase,
                     r ? "other numbers" : "no such row");
        return 1;
    }
    if (!n && !json_array_size(json_object_get(r, "samples_tok_s")))
        ts_eval_note(k, TS_EVAL_WARN, "%s: no recorded samples (older tessera?): the claimed sd is taken as written, "
                     "up to its cap", what);
    return 0;
}

static void say_claim(ts_eval_checks *k, int level, const char *what, const char *vs, ts_eval_stat c, ts_eval_stat g,
                      const ts_eval_band *b, const claim_kind *kd, int attempts, const char *busy) {
    const char *dir = kd->higher ? ">=" : "<=";
    char tries[48] = "";
    if (attempts > 1) snprintf(tries, sizeof tries, ", the best of %d attempts", attempts);
    double pct = 100 * (g.mean - c.mean) / c.mean;
    if (level == TS_EVAL_OK)
        ts_eval_note(k, level, "%s: %s %.4g +- %.3g %s (n=%d), re-measured %.4g +- %.3g (n=%d%s, %+.1f%%): within the "
                     "noise band (%s %.4g)", what, vs, c.mean, c.sd, kd->unit, c.n, g.mean, g.sd, g.n, tries, pct, dir,
                     b->bound);
    else
        ts_eval_note(k, level, "%s: %s %.4g +- %.3g %s (n=%d, sd counted %.3g), re-measured %.4g +- %.3g (n=%d%s, "
                     "%+.1f%%): %s (band: %s %.4g; floor %.0f%% of the claimed speed: %s %.4g)%s", what, vs, c.mean, c.sd,
                     kd->unit, c.n, b->sd_used, g.mean, g.sd, g.n, tries, pct,
                     level == TS_EVAL_FAIL ? "NOT REPRODUCED, beyond the floor"
                                           : "slower than claimed beyond the noise band, within the floor",
                     dir, b->bound, 100 * table("perf_floor"), dir, b->floor_bound, busy);
}

/* How busy the machine is around an attempt: the CPU time all cores spent on other processes
 * (from /proc/stat, less this process's own) as a share of all cores' time. */
typedef struct load_sample {
    double wall, self, busy; /* seconds */
    int ok;
} load_sample;

static load_sample load_now(void) {
    load_sample l = {ts_now_s(), 0, 0, 0};
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    l.self = (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = {0};
    if (f && fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                    &v[7]) == 8) {
        l.busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)sysconf(_SC_CLK_TCK);
        l.ok = 1;
    }
    if (f) fclose(f);
    return l;
}

/* The share since l0; the window is stretched to 0.1 s (the clock ticks of /proc/stat are
 * coarse), so a short attempt is judged by the load just after it. 0 when unknown. */
static double others_share(const load_sample *l0) {
    double left = 0.1 - (ts_now_s() - l0->wall);
    if (left > 0) {
        struct timespec ts = {0, (long)(left * 1e9)};
        nanosleep(&ts, NULL);
    }
    load_sample l1 = load_now();
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (!l0->ok || !l1.ok || cpus < 1) return 0;
    double share = ((l1.busy - l0->busy) - (l1.self - l0->self)) / ((l1.wall - l0->wall) * (double)cpus);
    return share < 0 ? 0 : share > 1 ? 1 : share;
}

void ts_eval_remeasure(ts_eval_checks *k, const ts_model *m, const json_t *man, int threads, int same_kernels,
                       const json_t *p4, const json_t *p5, json_t *got) {
    const json_t *perf = json_object_get(man, "performance"), *target = json_object_get(man, "target");
    const json_t *tiles = json_object_get(target, "tiles");
    int trials = (int)json_integer_value(json_object_get(perf, "trials")), copy;
    int attempts = (int)table("perf_attempts"), busy_attempts = (int)table("perf_busy_attempts");
    double busy_share = table("perf_busy_share");
    if (trials < 5) trials = 5;
    ts_error e;
    if (ts_placement_parse(json_object_get(target, "weights"), "manifest.json: target.weights", &copy, &e)) {
        ts_eval_note(k, TS_EVAL_FAIL, "%s", e.msg);
        return;
    }
    ts_measure_opts mo = {.threads = threads, .trials = trials, .disable = ts_placement_mask(copy),
                          .tiles = json_is_array(tiles) ? tiles : NULL};
    int D = (int)json_integer_value(json_object_get(perf, "decode_tokens_per_trial"));
    for (int kind = 0; kind < 2; kind++) {
        const claim_kind *kd = &k_kinds[kind];
        size_t i;
        const json_t *r;
        json_array_foreach(json_object_get(perf, kd->rows), i, r) {
            int size = (int)json_integer_value(json_object_get(r, kd->size_key));
            char what[64];
            label(kd, size, what, sizeof what);
            if (size < 1 || (kd->higher && D < 1)) {
                ts_eval_note(k, TS_EVAL_FAIL, "%s: malformed claim (size or tokens per trial)", what);
                continue;
            }
            claim_recorded(k, kd, r, kd->higher ? p5 : p4, kd->higher ? 5 : 4, kd->higher ? D : size, what);
            ts_eval_stat c = claim_stat(kd, r, trials), best = {NAN, NAN, 0};
            ts_eval_band b, bb = {0};
            int level = TS_EVAL_FAIL, tries = 0, quiet = 0;
            double other_max = 0;
            /* Re-measured while not reproduced: up to perf_attempts times on a quiet machine; an
             * attempt during which other processes held the CPU does not count, up to
             * perf_busy_attempts in all. The fastest attempt is kept (noise only slows). */
            while (level != TS_EVAL_OK && quiet < attempts && tries < busy_attempts) {
                ts_measurement mm;
                load_sample l0 = load_now();
                ts_status s = kd->higher ? ts_measure_decode(m, &mo, size, D, &mm, &e) : ts_measure_prefill(m, &mo, size, &mm, &e);
                if (s) {
                    ts_eval_note(k, TS_EVAL_FAIL, "%s could not be re-measured: %s", what, e.msg);
                    break;
                }
                double other = others_share(&l0);
                quiet += !(other > busy_share);
                other_max = fmax(other_max, other);
                ts_eval_stat g = {kd->higher ? mm.rate : mm.mean_ms, kd->higher ? mm.rate_sd : mm.sd_ms, mm.trials};
                ts_measurement_free(&mm);
                int lv = ts_eval_claim_verdict(c, g, kd->higher, &b);
                if (!tries++ || lv < level || (lv == level && (kd->higher ? g.mean > best.mean : g.mean < best.mean)))
                    level = lv, best = g, bb = b;
            }
            if (!best.n) continue;
            char busy[240] = "";
            if (level != TS_EVAL_OK && !same_kernels) {
                level = TS_EVAL_WARN;
                snprintf(busy, sizeof busy, "; this process runs other kernels than the claim was measured with: "
                         "not comparable, a warning");
            } else if (level != TS_EVAL_OK && other_max > busy_share)
                snprintf(busy, sizeof busy, "; other processes used up to %.0f%% of this machine's CPU time meanwhile "
                         "(%d of %d attempts quiet): run `tessera eval` again on an idle machine", 100 * other_max, quiet,
                         tries);
            say_claim(k, level, what, "claimed", c, best, &bb, kd, tries, busy);
            json_array_append_new(got, json_pack("{s:s, s:i, s:f, s:f, s:i, s:i, s:f, s:b}", "kind", kd->rows, "size", size,
                                                 "mean", best.mean, "sd", best.sd, "n", best.n, "attempts", tries,
                                                 "others_cpu_share_max", other_max, "same_kernels", same_kernels));
        }
    }
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
    double share = table("baseline_headroom_loss");
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
            if (!t || !strcmp(metric, "trials")) continue; /* unknown rows fail the audit; trials are a setting */
            const json_t *match = NULL;
            json_array_foreach(json_object_get(bp, "gates"), j, bg)
                if (json_equal(json_object_get(bg, "metric"), json_object_get(g, "metric"))) match = bg;
            double now = num(g, "measured"), was = match ? num(match, "measured") : NAN;
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
        const claim_kind *kd = &k_kinds[kind];
        size_t i;
        const json_t *r;
        json_array_foreach(json_object_get(pb, kd->rows), i, r) {
            json_int_t size = json_integer_value(json_object_get(r, kd->size_key));
            char what[64];
            label(kd, (int)size, what, sizeof what);
            const json_t *mine = find_size(json_object_get(pa, kd->rows), kd->size_key, size), *g = NULL, *x;
            size_t j;
            json_array_foreach(got, j, x)
                if (!strcmp(json_string_value(json_object_get(x, "kind")), kd->rows) &&
                    json_integer_value(json_object_get(x, "size")) == size) g = x;
            if (!mine) {
                ts_eval_note(k, TS_EVAL_WARN, "baseline: claims %s; this deployment does not", what);
                fprintf(tab, "| %s | %.4g %s | - | - | not compared |\n", what, num(r, kd->mean_key), kd->unit);
                continue;
            }
            ts_eval_stat sb = claim_stat(kd, r, tb), sa = claim_stat(kd, mine, ta), sg = {NAN, NAN, 0};
            if (g) sg = (ts_eval_stat){num(g, "mean"), num(g, "sd"), (int)json_integer_value(json_object_get(g, "n"))};
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
            json_array_append_new(out, json_pack("{s:s, s:I, s:f, s:f, s:o, s:s}", "kind", kd->rows, "size", size,
                                                 "baseline", sb.mean, "this_claim", sa.mean, "remeasured",
                                                 ts_json_number(sg.mean), "result", res[level]));
            const ts_eval_band *bw = l1 >= l2 ? &b1 : &b2;
            if (level == TS_EVAL_OK)
                ts_eval_note(k, level, "baseline: %s: baseline claims %.4g %s, this deployment %.4g, re-measured %.4g: "
                             "no regression beyond the band (%s %.4g)", what, sb.mean, kd->unit, sa.mean, sg.mean,
                             kd->higher ? ">=" : "<=", b1.bound);
            else {
                /* As for the claim itself: a re-measurement while others held the CPU says so. */
                double other = g ? num(g, "others_cpu_share_max") : 0;
                char busy[200] = "";
                if (l2 != TS_EVAL_OK && other > table("perf_busy_share"))
                    snprintf(busy, sizeof busy, "; other processes used up to %.0f%% of this machine's CPU time while it "
                             "was re-measured: run `tessera eval` again on an idle machine", 100 * other);
                ts_eval_note(k, level, "baseline: %s: baseline claims %.4g %s, this deployment claims %.4g (%s) and "
                             "re-measures %.4g (%s): %s (band %s %.4g, floor %s %.4g)%s", what, sb.mean, kd->unit, sa.mean,
                             res[l1], sg.mean, res[l2], level == TS_EVAL_FAIL ? "a regression" : "slower than the baseline",
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
