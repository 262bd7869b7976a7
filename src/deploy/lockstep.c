/* The cpu target against the oracle under the phase-3 rules (phases 3, 4, 5 and the
 * evaluator): position by position on the same tokens, and greedy lockstep runs whose first
 * divergence must keep each side's pick in the other's top-k. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "deploy/gates.h"
#include "deploy/phases.h"

int ts_phase_position_violations(const float *lr, const float *lc, int n, int V, int *decisive) {
    double pmin = ts_threshold_find("phase3", "decisive_prob")->value;
    int topk = (int)ts_threshold_find("phase3", "mutual_top_k")->value, viol = 0, dec = 0;
    for (int p = 0; p < n; p++) {
        const float *a = lr + (size_t)p * V, *b = lc + (size_t)p * V;
        int finite = 1;
        for (int v = 0; v < V && finite; v++) finite = isfinite(b[v]); /* a NaN hides from argmax and rank */
        int ta = ts_argmax(a, V), tb = ts_argmax(b, V), bad;
        if (ts_softmax_prob(a, V, ta) > pmin) {
            dec++;
            bad = ta != tb;
        } else {
            bad = ts_rank_of(a, V, tb) >= topk || ts_rank_of(b, V, ta) >= topk;
        }
        viol += bad || !finite;
    }
    if (decisive) *decisive = dec;
    return viol;
}

ts_status ts_phase_lockstep(const ts_model *m, int threads, ts_cpu *cp, int R, const int32_t *prompts, int n, int gen,
                            ts_lockstep_run *runs, ts_error *err) {
    const ts_config *c = ts_model_config(m);
    int V = c->n_vocab, topk = (int)ts_threshold_find("phase3", "mutual_top_k")->value;
    double pmin = ts_threshold_find("phase3", "decisive_prob")->value;
    ts_ref **rs = calloc((size_t)R, sizeof *rs);
    int32_t *ta = malloc(sizeof(int32_t) * (size_t)R * (size_t)gen), *step = malloc(sizeof(int32_t) * (size_t)R);
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)(n + gen));
    float *la = malloc(sizeof(float) * (size_t)R * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    char *dec = malloc((size_t)R * (size_t)gen); /* the oracle's pick at (run, step) was decisive */
    ts_status s = rs && ta && step && seq && la && b && dec ? TS_OK : ts_fail(err, TS_ERR_NOMEM, "lockstep: out of memory");
    for (int k = 0; k < R && !s; k++) s = ts_ref_new(m, n + gen, &rs[k], err);
    if (!s) s = ts_ref_set_threads(rs[0], threads, err);
    /* The oracle's greedy runs, all R together: the prompts token by token, then its own picks. */
    for (int t = 0; t < n + gen - 1 && !s; t++) {
        for (int k = 0; k < R; k++) step[k] = t < n ? prompts[(size_t)k * n + t] : ta[(size_t)k * gen + t - n];
        s = ts_ref_decode_batch(rs, R, step, la, err);
        if (!s && t >= n - 1)
            for (int k = 0; k < R; k++) {
                const float *l = la + (size_t)k * V;
                size_t at = (size_t)k * gen + (size_t)(t - n + 1);
                ta[at] = ts_argmax(l, V);
                dec[at] = ts_softmax_prob(l, V, ta[at]) > pmin;
            }
    }
    /* The cpu target follows each run. */
    for (int k = 0; k < R && !s; k++) {
        const int32_t *want = ta + (size_t)k * gen;
        ts_lockstep_run *r = &runs[k];
        *r = (ts_lockstep_run){.steps = gen, .diverged = -1};
        for (int t = 0; t < gen; t++) r->decisive += dec[(size_t)k * gen + t];
        ts_cpu_reset(cp);
        if ((s = ts_cpu_forward(cp, prompts + (size_t)k * n, n, b, 0, NULL, err))) break;
        for (int t = 0; t < gen; t++) {
            int32_t tb = ts_argmax(b, V);
            int finite = 1;
            for (int v = 0; v < V && finite; v++) finite = isfinite(b[v]);
            if (!finite || tb != want[t]) r->diverged = dec[(size_t)k * gen + t];
            if (!finite) {
                r->violation = 1;
                break;
            }
            if (tb != want[t]) {
                /* The oracle's logits here: its run so far as one prefill (bit-identical to its
                 * decode), so only its tokens had to be kept. */
                memcpy(seq, prompts + (size_t)k * n, sizeof(int32_t) * (size_t)n);
                memcpy(seq + n, want, sizeof(int32_t) * (size_t)t);
                ts_ref_reset(rs[0]);
                if (!(s = ts_ref_forward(rs[0], seq, n + t, la, 0, NULL, err)))
                    r->violation = ts_rank_of(la, V, tb) >= topk || ts_rank_of(b, V, want[t]) >= topk;
                break;
            }
            r->same++;
            if (t + 1 < gen && (s = ts_cpu_forward(cp, &tb, 1, b, 0, NULL, err))) break;
        }
    }
    for (int k = 0; rs && k < R; k++) ts_ref_free(rs[k]);
    free(rs), free(ta), free(step), free(seq), free(la), free(b), free(dec);
    return s;
}
