/* Step-by-step comparison of the cpu target with the oracle on the oracle's inputs. */
#include "deploy/steps_check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "deploy/gates.h"
#include "target/ref/ref_steps.h"

/* One copy of every buffer of the step list for S rows, in one allocation. */
typedef struct state_buf {
    float *mem;
    size_t n;
    ts_step_state st;
} state_buf;

static int state_new(state_buf *b, const ts_config *c, int S) {
    size_t H = (size_t)c->n_embd, Q = (size_t)c->n_heads * c->head_dim, KV = (size_t)c->n_kv_heads * c->head_dim;
    b->n = (size_t)S * (2 * H + 2 * Q + 2 * KV + (size_t)c->n_ff);
    b->mem = calloc(b->n, sizeof(float));
    if (!b->mem) return -1;
    float *p = b->mem;
    b->st.x = p, p += S * H;
    b->st.xn = p, p += S * H;
    b->st.q = p, p += S * Q;
    b->st.k = p, p += S * KV;
    b->st.v = p, p += S * KV;
    b->st.att = p, p += S * Q;
    b->st.h = p;
    return 0;
}

/* The buffers a step writes: up to three (qkv writes q, k and v). */
static int step_outputs(ts_step s, const ts_step_state *st, const ts_config *c, const float *out[3], int cols[3]) {
    int Q = c->n_heads * c->head_dim, KV = c->n_kv_heads * c->head_dim;
    switch (s) {
    case TS_STEP_ATTN_NORM:
    case TS_STEP_FFN_NORM: out[0] = st->xn, cols[0] = c->n_embd; return 1;
    case TS_STEP_QKV: out[2] = st->v, cols[2] = KV; /* fall through */
    case TS_STEP_QK_NORM:
    case TS_STEP_ROPE: out[0] = st->q, cols[0] = Q, out[1] = st->k, cols[1] = KV; return s == TS_STEP_QKV ? 3 : 2;
    case TS_STEP_ATTENTION: out[0] = st->att, cols[0] = Q; return 1;
    case TS_STEP_GATE_UP: out[0] = st->h, cols[0] = c->n_ff; return 1;
    default: out[0] = st->x, cols[0] = c->n_embd; return 1;
    }
}

/* The worst of two metric sets: the buffer with the larger error (NaN dominates), every
 * non-finite value counted, the lower Pearson kept. */
static void worse(ts_metrics *acc, const ts_metrics *m) {
    int64_t nf = acc->nonfinite + m->nonfinite;
    double p = ts_worst_min(acc->pearson, m->pearson);
    if (isnan(m->rel_l2) || m->rel_l2 > acc->rel_l2) *acc = *m;
    acc->nonfinite = nf;
    acc->pearson = p;
}

ts_status ts_steps_check(const ts_model *m, ts_ref *r, ts_cpu *cp, int l, const float *x_in, int S, int pos0,
                         FILE *out, json_t *rows, ts_steps_result *res, ts_error *err) {
    const ts_config *c = ts_model_config(m);
    state_buf before, after, mine;
    ts_status s = TS_OK;
    res->first_bad = res->first_nan = -1;
    res->worst_rel_l2 = 0, res->worst_pearson = 1, res->nonfinite = 0;
    before.mem = after.mem = mine.mem = NULL;
    if (state_new(&before, c, S) || state_new(&after, c, S) || state_new(&mine, c, S)) {
        s = ts_fail(err, TS_ERR_NOMEM, "step check: out of memory for %d rows", S);
        goto done;
    }
    memcpy(after.st.x, x_in, sizeof(float) * (size_t)S * c->n_embd);
    const ts_threshold *t_rel = ts_threshold_find("phase1", "rel_l2"), *t_p = ts_threshold_find("phase1", "pearson");
    for (int k = 0; k < TS_N_STEPS; k++) {
        ts_step step = (ts_step)k;
        if (step == TS_STEP_QK_NORM && !c->qk_norm) continue;
        memcpy(before.mem, after.mem, sizeof(float) * before.n);
        if ((s = ts_ref_step(r, l, step, &after.st, S, pos0, err))) goto done;
        memcpy(mine.mem, before.mem, sizeof(float) * before.n);
        if ((s = ts_cpu_step(cp, l, step, &mine.st, S, pos0, err))) goto done;
        const float *want[3], *got[3];
        int cols[3];
        int n = step_outputs(step, &after.st, c, want, cols);
        step_outputs(step, &mine.st, c, got, cols);
        ts_metrics mt;
        ts_metrics_compute(got[0], want[0], S, cols[0], &mt);
        for (int i = 1; i < n; i++) {
            ts_metrics mi;
            ts_metrics_compute(got[i], want[i], S, cols[i], &mi);
            worse(&mt, &mi);
        }
        int bad = mt.nonfinite > 0 || !ts_threshold_pass(t_rel, mt.rel_l2) || !ts_threshold_pass(t_p, mt.pearson);
        if (bad && res->first_bad < 0) res->first_bad = k;
        if (mt.nonfinite && res->first_nan < 0) res->first_nan = k;
        res->worst_rel_l2 = ts_worst_max(res->worst_rel_l2, mt.rel_l2);
        res->worst_pearson = ts_worst_min(res->worst_pearson, mt.pearson);
        res->nonfinite += mt.nonfinite;
        char shape[128];
        ts_step_shape(step, c, S, shape, sizeof shape);
        if (out)
            fprintf(out, "    %-10s %-48s %11.3e %13.9f %9lld%s\n", ts_step_name(step), shape, mt.rel_l2, mt.pearson,
                    (long long)mt.nonfinite, bad ? "   <- FAILS" : "");
        if (rows)
            json_array_append_new(rows, json_pack("{s:s, s:s, s:i, s:i, s:o, s:o, s:o, s:I, s:b}", "step",
                                                  ts_step_name(step), "shape", shape, "layer", l, "S", S, "rel_l2",
                                                  ts_json_number(mt.rel_l2), "pearson", ts_json_number(mt.pearson),
                                                  "cosine", ts_json_number(mt.cosine), "nonfinite",
                                                  (json_int_t)mt.nonfinite, "pass", !bad));
    }
done:
    free(before.mem), free(after.mem), free(mine.mem);
    return s;
}
