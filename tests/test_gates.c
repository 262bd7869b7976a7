/* Gate metrics and the threshold table: values on hand-computed inputs, and NaN handling —
 * a NaN anywhere must fail a gate, never be averaged or min'd away; the phase-3 position rule
 * and the validity check of timed measurements that phases 4-5 gate on. */
#include <math.h>
#include <string.h>

#include "deploy/gates.h"
#include "deploy/measure.h"
#include "deploy/phases.h"
#include "tharness.h"

int main(void) {
    /* Identical rows: perfect metrics. */
    float a[6] = {1, 2, 3, -1, 0.5f, 2}, b[6];
    memcpy(b, a, sizeof a);
    ts_metrics m;
    ts_metrics_compute(a, b, 2, 3, &m);
    CHECK(m.rel_l2 == 0 && fabs(m.cosine - 1) < 1e-12 && fabs(m.pearson - 1) < 1e-12 && m.top1_match == 2,
          "identical: rel_l2 %g cosine %g", m.rel_l2, m.cosine);
    /* Hand-computed: a = b + (0.1 on one element): rel_l2 = 0.1 / |b|. */
    a[1] += 0.1f;
    ts_metrics_compute(a, b, 2, 3, &m);
    double nb = sqrt(1 + 4 + 9 + 1 + 0.25 + 4);
    CHECK(fabs(m.rel_l2 - 0.1 / nb) < 1e-6, "rel_l2 %.8f expected %.8f", m.rel_l2, 0.1 / nb);
    CHECK(fabs(m.max_abs - 0.1) < 1e-6, "max_abs %g", m.max_abs);
    /* NaN in the output under test: every summary metric becomes NaN and fails its gate. */
    a[4] = NAN;
    ts_metrics_compute(a, b, 2, 3, &m);
    CHECK(m.nonfinite == 1 && isnan(m.rel_l2) && isnan(m.pearson) && isnan(m.min_row_cosine), "NaN output");
    CHECK(!ts_threshold_pass(ts_threshold_find("phase1", "rel_l2"), m.rel_l2), "NaN rel_l2 must fail");
    CHECK(!ts_threshold_pass(ts_threshold_find("phase1", "pearson"), m.pearson), "NaN pearson must fail");
    /* NaN in the reference's first row must survive a later finite row. */
    float c[6] = {1, 2, 3, 4, 5, 6}, d[6] = {NAN, 2, 3, 4, 5, 6};
    ts_metrics_compute(c, d, 2, 3, &m);
    CHECK(isnan(m.min_row_cosine), "min_row_cosine lost a NaN row: %g", m.min_row_cosine);
    /* Running worst values keep a NaN once seen. */
    CHECK(isnan(ts_worst_min(NAN, 0.5)) && isnan(ts_worst_min(0.5, NAN)) && ts_worst_min(0.7, 0.5) == 0.5,
          "ts_worst_min");
    CHECK(isnan(ts_worst_max(NAN, 0.5)) && ts_worst_max(0.1, 0.5) == 0.5, "ts_worst_max");
    /* Threshold direction and the table's DESIGN.md values. */
    const ts_threshold *p0 = ts_threshold_find("phase0", "pearson"), *r0 = ts_threshold_find("phase0", "rel_l2");
    CHECK(p0 && p0->op == TS_GATE_GE && p0->value == 0.99999, "phase0 pearson threshold");
    CHECK(r0 && r0->op == TS_GATE_LE && r0->value == 1e-4, "phase0 rel_l2 threshold");
    CHECK(ts_threshold_pass(r0, 1e-4) && !ts_threshold_pass(r0, 1.0001e-4), "<= boundary");
    CHECK(ts_phase2_row_cosine(64)->value == 0.99 && ts_phase2_row_cosine(128)->value == 0.98 &&
              ts_phase2_row_cosine(256)->value == 0.97,
          "phase-2 per-position floors by head_dim");
    /* Rank and softmax helpers. */
    float l[4] = {0, 2, 1, 2};
    CHECK(ts_argmax(l, 4) == 1 && ts_rank_of(l, 4, 2) == 2 && ts_rank_of(l, 4, 3) == 0, "argmax/rank");
    { /* argmax against the one-pass definition: the first index of the largest, NaN never
       * larger, a NaN first entry wins; lengths around the 8-wide pass and its tail */
        static float v[203];
        uint32_t r = 12345;
        for (int n = 1; n <= 203; n += 7)
            for (int kind = 0; kind < 6; kind++) {
                for (int i = 0; i < n; i++) {
                    r = r * 1664525u + 1013904223u;
                    v[i] = kind == 1 ? (float)(r >> 29) - 3.0f : (float)(int32_t)r / 2147483648.0f;
                }
                if (kind == 2) v[n / 2] = NAN;
                if (kind == 3) v[0] = NAN;
                if (kind == 4) v[n - 1] = 2.0f, v[n > 1 ? n - 2 : 0] = -0.0f;
                if (kind == 5) /* a tie of -0 and +0 at the maximum */
                    for (int i = 0; i < n; i++) v[i] = i == n / 2 ? -0.0f : i == n - 1 ? 0.0f : -1.0f - (float)i;
                int want = 0;
                for (int i = 1; i < n; i++)
                    if (v[i] > v[want]) want = i;
                CHECK(ts_argmax(v, n) == want, "argmax n %d kind %d: %d, expected %d", n, kind, ts_argmax(v, n), want);
            }
    }
    double e = exp(2.0) / (1 + exp(1.0) + 2 * exp(2.0));
    CHECK(fabs(ts_softmax_prob(l, 4, 1) - e) < 1e-9, "softmax prob");
    /* Phases 4-5 gate on measured things only: no row tests an option value (the old
     * `trials >= 5`), and phase 4 holds its final plan to the oracle, not to another cpu plan. */
    int nt;
    const ts_threshold *tab = ts_thresholds(&nt);
    for (int i = 0; i < nt; i++)
        CHECK(strcmp(tab[i].metric, "trials") && strcmp(tab[i].metric, "top1_changes"), "%s %s still in the table",
              tab[i].phase, tab[i].metric);
    CHECK(ts_threshold_find("phase4", "position_violations") && ts_threshold_find("phase4", "invalid_measurements") &&
              ts_threshold_find("phase5", "lockstep_violations") && ts_threshold_find("phase5", "invalid_measurements"),
          "phase 4-5 rows");
    /* The phase-3 position rule on 3 positions of a 6-word vocabulary. */
    {
        float lr[3][6] = {{9, 0, 0, 0, 0, 0},  /* decisive: top-1 is 0 */
                          {1, 1.1f, 1.2f, 0, 0, 0}, /* competitive: top-1 is 2 */
                          {1, 1.1f, 1.2f, 0, 0, 0}};
        float lc[3][6] = {{0, 9, 0, 0, 0, 0},  /* another top-1 at a decisive position */
                          {1, 1.3f, 1.2f, 0, 0, 0}, /* another top-1, each in the other's top-5 */
                          {1, 1.1f, 1.2f, 0, 0, 0}};
        int dec = -1;
        CHECK(ts_phase_position_violations(&lr[0][0], &lc[0][0], 3, 6, &dec) == 1 && dec == 1, "position rule");
        lc[2][4] = NAN; /* a NaN hides from argmax and rank: still a violation */
        CHECK(ts_phase_position_violations(&lr[0][0], &lc[0][0], 3, 6, NULL) == 2, "NaN row");
        lc[0][0] = 10, lc[2][4] = 0;
        CHECK(ts_phase_position_violations(&lr[0][0], &lc[0][0], 3, 6, NULL) == 0, "all kept");
    }
    /* A timed measurement is data only with a finite positive sample per requested trial. */
    {
        double smp[5] = {100, 110, 90, 105, 95};
        ts_measurement r = {.cold_ms = 12, .mean_ms = 2, .sd_ms = 0.1, .rate = 100, .rate_sd = 8, .samples = smp,
                            .trials = 5};
        CHECK(ts_measurement_valid(&r, 5), "valid measurement");
        CHECK(!ts_measurement_valid(&r, 6), "fewer trials than asked");
        smp[3] = INFINITY; /* a zero-length trial */
        CHECK(!ts_measurement_valid(&r, 5), "infinite sample");
        smp[3] = 0;
        CHECK(!ts_measurement_valid(&r, 5), "zero sample");
        smp[3] = 105, r.sd_ms = NAN;
        CHECK(!ts_measurement_valid(&r, 5), "NaN sd");
        r.sd_ms = 0.1, r.cold_ms = 0;
        CHECK(!ts_measurement_valid(&r, 5), "no cold time");
        r.cold_ms = 12, r.samples = NULL;
        CHECK(!ts_measurement_valid(&r, 5), "no samples");
    }
    return th_finish("test_gates");
}
