/* Performance claims, checked rather than re-measured only: the claim rule (eval_internal.h),
 * the recorded statistics against their samples, and the re-measurement of every claim in the
 * manifest, retried while other processes hold the CPU. */
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

double ts_eval_table(const char *metric) { return ts_threshold_find("phase7", metric)->value; }

int ts_eval_claim_verdict(ts_eval_stat claim, ts_eval_stat got, int higher_is_better, ts_eval_band *b) {
    double c = claim.mean, g = got.mean, share = ts_eval_table("perf_claim_sd_share"), floor = ts_eval_table("perf_floor");
    memset(b, 0, sizeof *b);
    if (!isfinite(c) || c <= 0 || !isfinite(g) || g <= 0 || !(claim.sd >= 0) || !(got.sd >= 0)) return TS_EVAL_FAIL;
    /* An sd beyond the cap (or infinite) counts as the cap: a wide recorded spread cannot buy room. */
    double s1 = claim.sd < share * c ? claim.sd : share * c, s2 = isfinite(got.sd) ? got.sd : 0;
    int n1 = claim.n > 1 ? claim.n : 1, n2 = got.n > 1 ? got.n : 1;
    b->sd_used = s1;
    b->band = ts_eval_table("perf_rel_dev") * c + ts_eval_table("perf_sigma") * sqrt(s1 * s1 / n1 + s2 * s2 / n2);
    if (higher_is_better) {
        b->bound = c - b->band;
        b->floor_bound = floor * c;
        return g < b->floor_bound ? TS_EVAL_FAIL : g < b->bound ? TS_EVAL_WARN : TS_EVAL_OK;
    }
    b->bound = c + b->band;
    b->floor_bound = c / floor;
    return g > b->floor_bound ? TS_EVAL_FAIL : g > b->bound ? TS_EVAL_WARN : TS_EVAL_OK;
}

double ts_eval_num(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* mean and sd recorded at mkey/skey against those of x[0..n); 0 when they agree. */
static int agree(const json_t *row, const char *mkey, const char *skey, const double *x, int n, char *why, size_t len) {
    if (!mkey) return 0;
    double mean, sd, tol = ts_eval_table("recorded_rel_err"), rm = ts_eval_num(row, mkey), rs = skey ? ts_eval_num(row, skey) : 0;
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

const ts_eval_kind ts_eval_kinds[2] = {
    {"prefill", "tokens", "ttft_ms_mean", "ttft_ms_sd", "prefill_tok_s", "ms", "ttft", "warm_ms_mean", "warm_ms_sd", 0},
    {"decode", "context", "decode_tok_s", "decode_tok_s_sd", "decode_tok_s", "tok/s", "contexts", "decode_tok_s",
     "decode_tok_s_sd", 1},
};

void ts_eval_label(const ts_eval_kind *kd, int size, char *buf, size_t len) {
    if (kd->higher) snprintf(buf, len, "decode at context %d", size);
    else snprintf(buf, len, "TTFT at %d tokens", size);
}

const json_t *ts_eval_find_size(const json_t *rows, const char *size_key, json_int_t size) {
    size_t i;
    const json_t *r;
    json_array_foreach(rows, i, r) if (json_integer_value(json_object_get(r, size_key)) == size) return r;
    return NULL;
}

ts_eval_stat ts_eval_claim_stat(const ts_eval_kind *kd, const json_t *row, int trials) {
    int n = (int)json_array_size(json_object_get(row, "samples_tok_s"));
    ts_eval_stat s = {ts_eval_num(row, kd->mean_key), ts_eval_num(row, kd->sd_key), n ? n : trials};
    /* No recorded sd: none claimed, so none widens the band (the mean alone is judged). */
    if (!json_object_get(row, kd->sd_key)) s.sd = 0;
    return s;
}

/* What the manifest claims against the phase report it was copied from and its own samples;
 * 0 when both agree. */
static int claim_recorded(ts_eval_checks *k, const ts_eval_kind *kd, const json_t *row, const json_t *rep, int phase,
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
    const json_t *r = ts_eval_find_size(json_object_get(rep, kd->rep_rows), kd->size_key,
                                json_integer_value(json_object_get(row, kd->size_key)));
    if (!r || ts_eval_num(r, kd->rep_mean) != ts_eval_num(row, kd->mean_key) || ts_eval_num(r, kd->rep_sd) != ts_eval_num(row, kd->sd_key) ||
        (json_object_get(row, "samples_tok_s") &&
         !json_equal(json_object_get(r, "samples_tok_s"), json_object_get(row, "samples_tok_s")))) {
        ts_eval_note(k, TS_EVAL_FAIL, "%s: the manifest claims %.6g +- %.6g %s, phase%d.json measured %s", what,
                     ts_eval_num(row, kd->mean_key), ts_eval_num(row, kd->sd_key), kd->unit, phase,
                     r ? "other numbers" : "no such row");
        return 1;
    }
    if (!n && !json_array_size(json_object_get(r, "samples_tok_s")))
        ts_eval_note(k, TS_EVAL_WARN, "%s: no recorded samples (older tessera?): the claimed sd is taken as written, "
                     "up to its cap", what);
    return 0;
}

static void say_claim(ts_eval_checks *k, int level, const char *what, const char *vs, ts_eval_stat c, ts_eval_stat g,
                      const ts_eval_band *b, const ts_eval_kind *kd, int attempts, const char *busy) {
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
                     dir, b->bound, 100 * ts_eval_table("perf_floor"), dir, b->floor_bound, busy);
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

/* Every measurement of the final plan in phases 4-5 is claimed, with the same tokens per
 * decode trial: a slow size left out of the manifest would go unchecked. */
static void claims_complete(ts_eval_checks *k, const json_t *perf, const json_t *p4, const json_t *p5) {
    const json_t *rep[2] = {p4, p5};
    for (int kind = 0; kind < 2; kind++) {
        const ts_eval_kind *kd = &ts_eval_kinds[kind];
        size_t i;
        const json_t *r;
        json_array_foreach(json_object_get(rep[kind], kd->rep_rows), i, r) {
            json_int_t size = json_integer_value(json_object_get(r, kd->size_key));
            if (ts_eval_find_size(json_object_get(perf, kd->rows), kd->size_key, size)) continue;
            char what[64];
            ts_eval_label(kd, (int)size, what, sizeof what);
            ts_eval_note(k, TS_EVAL_FAIL, "%s: measured in phase%d.json, but the manifest does not claim it", what, 4 + kind);
        }
    }
    const json_t *d = json_object_get(perf, "decode_tokens_per_trial");
    if (p5 && !json_equal(d, json_object_get(p5, "decode_tokens")))
        ts_eval_note(k, TS_EVAL_FAIL, "performance: %lld decode tokens per trial in the manifest, %lld in phase5.json",
                     (long long)json_integer_value(d), (long long)json_integer_value(json_object_get(p5, "decode_tokens")));
}

void ts_eval_remeasure(ts_eval_checks *k, const ts_model *m, const json_t *man, int threads, int same_kernels,
                       const json_t *p4, const json_t *p5, json_t *got) {
    const json_t *perf = json_object_get(man, "performance"), *target = json_object_get(man, "target");
    const json_t *tiles = json_object_get(target, "tiles");
    int trials = (int)json_integer_value(json_object_get(perf, "trials")), copy;
    int attempts = (int)ts_eval_table("perf_attempts"), busy_attempts = (int)ts_eval_table("perf_busy_attempts");
    double busy_share = ts_eval_table("perf_busy_share");
    if (trials < 5) trials = 5;
    if (trials > 1000) trials = 1000; /* an edited manifest does not buy hours of re-measurement */
    ts_error e;
    if (ts_placement_parse(json_object_get(target, "weights"), "manifest.json: target.weights", &copy, &e)) {
        ts_eval_note(k, TS_EVAL_FAIL, "%s", e.msg);
        return;
    }
    ts_measure_opts mo = {.threads = threads, .trials = trials, .disable = ts_placement_mask(copy),
                          .tiles = json_is_array(tiles) ? tiles : NULL};
    json_int_t d = json_integer_value(json_object_get(perf, "decode_tokens_per_trial"));
    int D = d > 0 && d <= (1 << 16) ? (int)d : 0;
    claims_complete(k, perf, p4, p5);
    for (int kind = 0; kind < 2; kind++) {
        const ts_eval_kind *kd = &ts_eval_kinds[kind];
        size_t i;
        const json_t *r;
        json_array_foreach(json_object_get(perf, kd->rows), i, r) {
            json_int_t sz = json_integer_value(json_object_get(r, kd->size_key));
            int size = sz > 0 && sz <= (1 << 20) ? (int)sz : 0;
            char what[64];
            ts_eval_label(kd, size, what, sizeof what);
            if (size < 1 || (kd->higher && D < 1)) {
                ts_eval_note(k, TS_EVAL_FAIL, "%s: malformed claim (size or tokens per trial)", what);
                continue;
            }
            claim_recorded(k, kd, r, kd->higher ? p5 : p4, kd->higher ? 5 : 4, kd->higher ? D : size, what);
            ts_eval_stat c = ts_eval_claim_stat(kd, r, trials), best = {NAN, NAN, 0};
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
                    best.n = 0; /* one line for this claim: the failure */
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
            } else if (level != TS_EVAL_OK && quiet < attempts)
                /* Excused only when the machine was never quiet for all the attempts: a claim that
                 * failed perf_attempts quiet re-measurements is not reproduced, whatever else ran. */
                snprintf(busy, sizeof busy, "; other processes used up to %.0f%% of this machine's CPU time meanwhile "
                         "(%d of %d attempts quiet): run `tessera eval` again on an idle machine", 100 * other_max, quiet,
                         tries);
            say_claim(k, level, what, "claimed", c, best, &bb, kd, tries, busy);
            json_array_append_new(got, json_pack("{s:s, s:i, s:o, s:o, s:i, s:i, s:f, s:b}", "kind", kd->rows, "size", size,
                                                 "mean", ts_json_number(best.mean), "sd", ts_json_number(best.sd), "n",
                                                 best.n, "attempts", tries, "others_cpu_share_max", other_max,
                                                 "same_kernels", same_kernels));
        }
    }
}
