/* Phase 5's choice of the final decode plan (plan_choice.h). */
#include "deploy/plan_choice.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/error.h"
#include "deploy/gates.h"
#include "deploy/measure.h"
#include "deploy/placement.h"
#include "deploy/tiles.h"

enum { NCAND = 4 };
/* Candidate k: weights copied when k & 1, phase 4's tiles when k & 2. */
static const char *k_names[NCAND] = {"weights from the mmap, default tiles", "weights copied to huge pages, default tiles",
                                     "weights from the mmap, phase-4 autotuned tiles",
                                     "weights copied to huge pages, phase-4 autotuned tiles"};

/* How much faster a is than b: rounds where a was faster, median of the per-round ratios. */
static void versus(const double *a, const double *b, int n, int *wins, double *med) {
    double r[TS_PLAN_ROUNDS];
    *wins = 0;
    for (int i = 0; i < n; i++) {
        r[i] = b[i] > 0 ? a[i] / b[i] : NAN;
        *wins += a[i] > b[i];
    }
    *med = ts_measure_median(r, n);
}

/* a beats b beyond the noise band: faster in all rounds but at most one, by more than band. */
static int beats(const double *a, const double *b, int n, double band, double *med) {
    int wins;
    versus(a, b, n, &wins, med);
    return wins >= n - 1 && *med - 1 > band;
}

double ts_plan_deficit(const json_t *rep) {
    const json_t *cands = json_object_get(rep, "candidates");
    json_int_t chosen = json_integer_value(json_object_get(rep, "chosen"));
    size_t n = json_array_size(cands);
    int rounds = (int)json_integer_value(json_object_get(rep, "rounds"));
    if (!json_is_integer(json_object_get(rep, "chosen")) || chosen < 0 || (size_t)chosen >= n || rounds < 2 ||
        rounds > TS_PLAN_ROUNDS)
        return NAN;
    double rate[NCAND][TS_PLAN_ROUNDS];
    if (n > NCAND) return NAN;
    for (size_t k = 0; k < n; k++) {
        const json_t *r = json_object_get(json_array_get(cands, k), "rates_tok_s");
        if (json_array_size(r) != (size_t)rounds) return NAN;
        for (int i = 0; i < rounds; i++) {
            const json_t *v = json_array_get(r, (size_t)i);
            rate[k][i] = json_is_number(v) ? json_number_value(v) : NAN;
            if (!(rate[k][i] > 0) || !isfinite(rate[k][i])) return NAN;
        }
    }
    double worst = 0;
    for (size_t k = 0; k < n; k++) {
        if (k == (size_t)chosen) continue;
        int wins;
        double med;
        versus(rate[k], rate[chosen], rounds, &wins, &med);
        /* the choice's own rule (beats() and a higher median): the gate fails only a shipped
         * plan the choice should have left, never a pick among plans the noise cannot tell apart */
        if (wins >= rounds - 1 && ts_measure_median(rate[k], rounds) > ts_measure_median(rate[chosen], rounds) &&
            med - 1 > worst)
            worst = med - 1;
    }
    return worst;
}

/* One round of candidate k: D greedy tokens from the ctx-token context, in tok/s. */
static ts_status round_rate(ts_cpu *cp, const json_t *tiles, const float *lg0, float *lg, int V, int ctx, int D, int slow,
                            double *rate, ts_error *err) {
    ts_cpu_tiles_clear(cp);
    ts_status s = tiles ? ts_tiles_apply(cp, tiles, err) : TS_OK;
    ts_cpu_truncate(cp, ctx);
    memcpy(lg, lg0, sizeof(float) * (size_t)V);
    double a = ts_now_s();
    for (int g = 0; g < D && !s; g++) {
        int32_t t = ts_argmax(lg, V);
        s = ts_cpu_forward(cp, &t, 1, lg, 0, NULL, err);
        if (slow) nanosleep(&(struct timespec){0, 30 * 1000 * 1000}, NULL);
    }
    double dt = ts_now_s() - a;
    *rate = dt > 0 ? D / dt : 0;
    return s;
}

ts_status ts_plan_choose(const ts_model *m, const ts_perf_opts *o, const json_t *tiles, int copy4, int forced, int ctx,
                         json_t **report, int *copy, int *tuned, ts_error *err) {
    const ts_config *c = ts_model_config(m);
    int V = c->n_vocab, D = o->decode_tokens > 0 ? o->decode_tokens : 8, R = TS_PLAN_ROUNDS;
    int has_tiles = json_is_array(tiles) && json_array_size(tiles) > 0, fits = ts_placement_copy_fits(m);
    double band = ts_threshold_find("phase5", "plan_deficit")->value;
    *report = NULL;
    *copy = copy4, *tuned = has_tiles;
    int avail[NCAND], idx[NCAND], n = 0, def = -1; /* idx: report position -> candidate */
    for (int k = 0; k < NCAND; k++) {
        int kc = k & 1, kt = (k & 2) != 0;
        avail[k] = (!kt || has_tiles) && (!kc || fits) && (!forced || kc == copy4);
        if (avail[k]) {
            if (kc == copy4 && kt == has_tiles) def = n;
            idx[n++] = k;
        }
    }
    if (def < 0) { /* phase 4 chose a copy that no longer fits: its tiles from the mmap */
        for (int i = 0; i < n; i++)
            if ((idx[i] & 2) == (has_tiles ? 2 : 0) && !(idx[i] & 1)) def = i;
        if (def < 0) def = 0;
    }
    ts_cpu *cp[2] = {NULL, NULL}; /* [0] borrows the mmap, [1] copies */
    float *lg0[2] = {NULL, NULL}, *lg = malloc(sizeof(float) * (size_t)V);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)ctx);
    double rate[NCAND][TS_PLAN_ROUNDS] = {{0}};
    ts_status s = lg && toks ? TS_OK : ts_fail(err, TS_ERR_NOMEM, "phase 5: out of memory");
    if (!s) ts_phase_prompt_tokens(c, 11, 300, toks, ctx);
    for (int p = 0; p < 2 && !s; p++) {
        int need = 0;
        for (int i = 0; i < n; i++) need |= (idx[i] & 1) == p;
        if (!need) continue;
        ts_cpu_opts co = {.n_threads = o->threads, .force_variant = -1, .disable = ts_placement_mask(p), .fault = o->fault};
        lg0[p] = malloc(sizeof(float) * (size_t)V);
        if (!lg0[p]) s = ts_fail(err, TS_ERR_NOMEM, "phase 5: out of memory");
        if (!s) s = ts_cpu_new(m, ctx + D, &co, &cp[p], err);
        if (!s) s = ts_cpu_forward(cp[p], toks, ctx, lg0[p], 0, NULL, err);
    }
    /* Round -1 warms every candidate up; the order rotates from round to round. */
    for (int r = -1; r < R && !s; r++)
        for (int q = 0; q < n && !s; q++) {
            int i = (q + (r < 0 ? 0 : r)) % n, k = idx[i];
            double x;
            s = round_rate(cp[k & 1], (k & 2) ? tiles : NULL, lg0[k & 1], lg, V, ctx, D, o->debug_slow_plan == k + 1, &x,
                           err);
            if (!s && r >= 0) rate[i][r] = x;
        }
    ts_cpu_free(cp[0]), ts_cpu_free(cp[1]);
    free(lg0[0]), free(lg0[1]), free(lg), free(toks);
    if (s) return s;
    /* From phase 4's plan, move to whichever beats the current plan beyond the band by the
     * largest median ratio, as long as one does (each move raises the median rate, so it ends). */
    int cur = def;
    char why[512];
    snprintf(why, sizeof why, "phase 4's plan: no other plan faster in %d of %d rounds by more than %.0f%%", R - 1, R,
             100 * band);
    for (int step = 0; step < n; step++) {
        int best = -1;
        double best_med = 0, med;
        for (int i = 0; i < n; i++)
            if (i != cur && beats(rate[i], rate[cur], R, band, &med) && med > best_med &&
                ts_measure_median(rate[i], R) > ts_measure_median(rate[cur], R))
                best = i, best_med = med;
        if (best < 0) break;
        snprintf(why, sizeof why, "faster than %s%s by %.1f%% (median of the per-round ratios) in at least %d of %d rounds",
                 cur == def ? "phase 4's plan, " : "", k_names[idx[cur]], 100 * (best_med - 1), R - 1, R);
        cur = best;
    }
    *copy = idx[cur] & 1, *tuned = (idx[cur] & 2) != 0;
    json_t *cands = json_array();
    for (int i = 0; i < n; i++) {
        json_t *rs = json_array();
        for (int r = 0; r < R; r++) json_array_append_new(rs, json_real(rate[i][r]));
        json_array_append_new(cands, json_pack("{s:s, s:s, s:s, s:o, s:f, s:b}", "plan", k_names[idx[i]], "weights",
                                               (idx[i] & 1) ? "copy" : "mmap", "tiles", (idx[i] & 2) ? "tuned" : "default",
                                               "rates_tok_s", rs, "median_tok_s", ts_measure_median(rate[i], R), "phase4_plan",
                                               i == def));
    }
    *report = json_pack("{s:o, s:i, s:i, s:i, s:i, s:s, s:s, s:f, s:s, s:s}", "candidates", cands, "chosen", cur, "rounds",
                        R, "tokens_per_round", D, "context", ctx, "weights", *copy ? "copy" : "mmap", "tiles",
                        *tuned ? "tuned" : "default", "band", band, "why", why, "rule",
                        "phase 4's plan unless another is faster in all rounds but at most one by more than the band "
                        "(median of the per-round ratios; phase5/plan_deficit), repeated from the new plan");
    if (o->debug_slow_plan > 0)
        json_object_set_new(*report, "debug_slowed", json_string(k_names[(o->debug_slow_plan - 1) % NCAND]));
    if (o->out) {
        fprintf(o->out, "  final plan by measurement (%d rounds of %d tokens after %d, alternating):\n", R, D, ctx);
        for (int i = 0; i < n; i++)
            fprintf(o->out, "    %-55s median %8.2f tok/s%s\n", k_names[idx[i]], ts_measure_median(rate[i], R),
                    i == cur ? "  <- shipped" : i == def ? "  (phase 4's plan)" : "");
        fprintf(o->out, "    chosen: %s (%s)\n", k_names[idx[cur]], why);
    }
    return TS_OK;
}
