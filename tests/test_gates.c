/* Gate metrics and the threshold table: values on hand-computed inputs, and NaN handling —
 * a NaN anywhere must fail a gate, never be averaged or min'd away. */
#include <math.h>
#include <string.h>

#include "deploy/gates.h"
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
    double e = exp(2.0) / (1 + exp(1.0) + 2 * exp(2.0));
    CHECK(fabs(ts_softmax_prob(l, 4, 1) - e) < 1e-9, "softmax prob");
    return th_finish("test_gates");
}
