/* Phases 1-3 of `tessera deploy` on the cpu target. Every comparison is against the ref
 * target on the same inputs; thresholds come from the one table in gates.c and are printed
 * next to the measured values. */
#include "deploy/phases.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "deploy/gates.h"
#include "deploy/steps_check.h"
#include "io/dtype.h"
#include "target/cpu/cpu_target.h"
#include "target/cpu/gemm.h"
#include "target/ref/ref_kernels.h"
#include "core/clock.h"

static float frand(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2 - 1);
}

static json_t *finish(json_t *rep, json_t *gates, int phase, int pass, FILE *out) {
    json_object_set_new(rep, "phase", json_integer(phase));
    json_object_set_new(rep, "gates", gates);
    json_object_set_new(rep, "pass", json_boolean(pass));
    if (out) fprintf(out, "phase %d: %s\n", phase, pass ? "PASS" : "FAIL");
    return rep;
}

/* ---------------- phase 1: kernels at the model's shapes ---------------- */

/* One GEMM shape: the optimized kernel over all of N against the oracle on a window of rows
 * (all rows for decode). Returns the metrics; *ms: time per call, one thread. */
static ts_status kernel_case(const ts_tensor *W, int S, int N, int K, ts_metrics *mt, double *ms,
                             ts_error *err) {
    int n0 = S == 1 ? 0 : (N > 64 ? N / 2 - 32 : 0), n1 = S == 1 ? N : (N > 64 ? n0 + 64 : N);
    size_t nx = (size_t)S * K;
    float *x = malloc(sizeof(float) * nx), *xp = malloc(sizeof(float) * nx);
    float *y = malloc(sizeof(float) * (size_t)S * N), *ref = malloc(sizeof(float) * (size_t)S * (n1 - n0));
    float *got = malloc(sizeof(float) * (size_t)S * (n1 - n0)), *row = malloc(sizeof(float) * TS_REF_ROW_SCRATCH(K));
    uint16_t *wb = NULL;
    const uint16_t *w = W->data;
    ts_status s = TS_OK;
    if (!x || !xp || !y || !ref || !got || !row) {
        s = ts_fail(err, TS_ERR_NOMEM, "phase 1: out of memory for %s", W->name);
        goto done;
    }
    if (W->dtype != TS_DTYPE_BF16) { /* the cpu target runs a BF16 copy of such weights */
        wb = malloc(sizeof(uint16_t) * (size_t)N * K);
        if (!wb) {
            s = ts_fail(err, TS_ERR_NOMEM, "phase 1: out of memory for %s", W->name);
            goto done;
        }
        for (size_t i = 0; i < (size_t)N * K; i++) {
            float f;
            ts_dtype_to_f32(W->dtype, W->data, i, 1, &f);
            wb[i] = ts_f32_to_bf16(f);
        }
        w = wb;
    }
    uint64_t seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)N * 31 ^ (uint64_t)K;
    for (size_t i = 0; i < nx; i++) x[i] = frand(&seed);
    for (int r = 0; r < S; r++) ts_cpu_pack_row(xp + (size_t)r * K, x + (size_t)r * K, K);
    for (size_t i = 0; i < (size_t)S * N; i++) y[i] = NAN;
    ts_tensor win = *W;
    win.data = (const uint8_t *)W->data + (size_t)n0 * K * ts_dtype_size(W->dtype);
    ts_ref_matmul(ref, x, &win, NULL, S, n1 - n0, K, row);
    ts_gemm_fn gemm = ts_cpu_gemm_for(ts_cpu_best_variant());
    ts_gemm_tile t = ts_cpu_gemm_default_tile(S, N, K);
    double a = ts_now_s();
    gemm(y, N, xp, K, w, K, S, 0, N, t);
    *ms = (ts_now_s() - a) * 1e3;
    int64_t unwritten = 0;
    for (int r = 0; r < S; r++) {
        for (int n = 0; n < N; n++) unwritten += isnan(y[(size_t)r * N + n]);
        memcpy(got + (size_t)r * (n1 - n0), y + (size_t)r * N + n0, sizeof(float) * (size_t)(n1 - n0));
    }
    ts_metrics_compute(got, ref, S, n1 - n0, mt);
    mt->nonfinite += unwritten; /* an output the kernel never wrote counts as a failure */
done:
    free(x), free(xp), free(y), free(ref), free(got), free(row), free(wb);
    return s;
}

ts_status ts_phase1_run(const ts_model *m, const ts_phase_opts *o, json_t **report, ts_error *err) {
    const ts_layer_w *L = &m->layers[0];
    FILE *out = o->out;
    const struct {
        const char *step;
        const ts_tensor *w;
    } k[] = {{"q_proj", L->wq}, {"k_proj", L->wk}, {"v_proj", L->wv}, {"o_proj", L->wo},
             {"gate_proj", L->w_gate}, {"up_proj", L->w_up}, {"down_proj", L->w_down}, {"lm_head", m->lm_head}};
    json_t *rep = json_object(), *rows = json_array(), *gates = json_array();
    double worst_rel = 0, worst_p = 1, bad = 0;
    if (out)
        fprintf(out, "phase 1 (kernels, %s): every GEMM/GEMV shape, prefill (128 rows) and decode (1 row)\n"
                     "  %-10s %5s %7s %6s %11s %13s %10s\n", ts_cpu_variant_name(ts_cpu_best_variant()),
                "step", "S", "N", "K", "rel_l2", "pearson", "ms/call");
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        int N = (int)k[i].w->shape[0], K = (int)k[i].w->shape[1];
        for (int pass = 0; pass < 2; pass++) {
            int S = pass ? 1 : 128;
            if (S > 1 && !strcmp(k[i].step, "lm_head")) continue; /* prefill computes one row */
            ts_metrics mt;
            double ms = 0;
            ts_status s = kernel_case(k[i].w, S, N, K, &mt, &ms, err);
            if (s) {
                json_decref(rep), json_decref(rows), json_decref(gates);
                return s;
            }
            worst_rel = ts_worst_max(worst_rel, mt.rel_l2);
            worst_p = ts_worst_min(worst_p, mt.pearson);
            bad += (double)mt.nonfinite;
            if (out)
                fprintf(out, "  %-10s %5d %7d %6d %11.3e %13.9f %10.3f\n", k[i].step, S, N, K, mt.rel_l2,
                        mt.pearson, ms);
            json_array_append_new(rows, json_pack("{s:s, s:i, s:i, s:i, s:o, s:o, s:I, s:f}", "step", k[i].step,
                                                  "S", S, "N", N, "K", K, "rel_l2", ts_json_number(mt.rel_l2),
                                                  "pearson", ts_json_number(mt.pearson), "nonfinite",
                                                  (json_int_t)mt.nonfinite, "ms", ms));
        }
    }
    /* Every step of the step list alone on the oracle's inputs: layer 0 at the prefill shape,
     * then one decode row over that context. */
    json_t *steps = json_array();
    {
        const ts_config *c = ts_model_config(m);
        int S = 128, H = c->n_embd;
        ts_ref *r = NULL;
        ts_cpu *cp = NULL;
        ts_cpu_opts co = {.n_threads = o->threads, .force_variant = -1, .fault = o->fault};
        float *x = malloc(sizeof(float) * (size_t)(S + 1) * H);
        ts_status s = x ? TS_OK : ts_fail(err, TS_ERR_NOMEM, "phase 1: out of memory");
        if (!s) s = ts_ref_new(m, S + 1, &r, err);
        if (!s) s = ts_ref_set_threads(r, o->threads, err);
        if (!s) s = ts_cpu_new(m, S + 1, &co, &cp, err);
        if (!s && out)
            fprintf(out, "  every step alone on the oracle's inputs, layer 0 (prefill %d rows, then decode 1 row):\n"
                         "    %-10s %-48s %11s %13s %9s\n", S, "step", "shape", "rel_l2", "pearson", "nonfinite");
        for (int t = 0; t <= S && !s; t++)
            ts_ref_embed(x + (size_t)t * H, m->embed,
                         (int)(((uint64_t)t * 2246822519u + 3 + o->seed * 31) % (uint64_t)c->n_vocab), H);
        for (int pass = 0; pass < 2 && !s; pass++) {
            ts_steps_result res;
            s = ts_steps_check(m, r, cp, 0, x + (pass ? (size_t)S * H : 0), pass ? 1 : S, pass ? S : 0, out, steps,
                               &res, err);
            worst_rel = ts_worst_max(worst_rel, res.worst_rel_l2);
            worst_p = ts_worst_min(worst_p, res.worst_pearson);
            bad += (double)res.nonfinite;
        }
        ts_ref_free(r);
        ts_cpu_free(cp);
        free(x);
        if (s) {
            json_decref(rep), json_decref(rows), json_decref(gates), json_decref(steps);
            return s;
        }
    }
    json_object_set_new(rep, "steps", steps);
    int pass = 1;
    if (out) fprintf(out, "  gate (worst over all shapes and steps):\n");
    json_array_append_new(gates, ts_gate_row("phase1", "rel_l2", worst_rel, out, &pass));
    json_array_append_new(gates, ts_gate_row("phase1", "pearson", worst_p, out, &pass));
    json_array_append_new(gates, ts_gate_row("phase1", "nonfinite", bad, out, &pass));
    json_object_set_new(rep, "kernels", rows);
    *report = finish(rep, gates, 1, pass, out);
    return pass ? TS_OK : ts_fail(err, TS_ERR_GATE, "phase 1 gate failed (see the table)");
}

/* ---------------- phase 2: one early and one late block ---------------- */

#define P2_S 128

ts_status ts_phase2_run(const ts_model *m, const ts_phase_opts *o, json_t **report, ts_error *err) {
    const ts_config *c = ts_model_config(m);
    FILE *out = o->out;
    int H = c->n_embd, S = P2_S, nl = c->n_layers > 1 ? 2 : 1;
    /* The seed moves the blocks too: the evaluator checks other layers than deploy did. */
    int layers[2] = {(int)(o->seed % (uint64_t)(c->n_layers > 2 ? 2 : 1)),
                     c->n_layers - 1 - (int)(o->seed % (uint64_t)(c->n_layers > 3 ? 2 : 1))};
    ts_ref *r = NULL;
    ts_cpu *cp = NULL;
    ts_cpu_opts co = {.n_threads = o->threads, .force_variant = -1, .fault = o->fault};
    float *xr = malloc(sizeof(float) * (size_t)(S + 1) * H), *xc = malloc(sizeof(float) * (size_t)(S + 1) * H);
    json_t *rep = json_object(), *rows = json_array(), *gates = json_array();
    ts_status s = TS_OK;
    double worst_cos = 1, worst_row = 1;
    if (!xr || !xc) s = ts_fail(err, TS_ERR_NOMEM, "phase 2: out of memory");
    if (!s) s = ts_ref_new(m, S + 1, &r, err);
    if (!s) s = ts_ref_set_threads(r, o->threads, err);
    if (!s) s = ts_cpu_new(m, S + 1, &co, &cp, err);
    if (out && !s)
        fprintf(out, "phase 2 (blocks): layers alone on the embeddings of %d tokens, then one decode step\n", S);
    for (int li = 0; li < nl && !s; li++) {
        int l = layers[li];
        /* Inputs: the embedding rows of a fixed prompt (identical for both targets). */
        for (int t = 0; t <= S; t++)
            ts_ref_embed(xr + (size_t)t * H, m->embed,
                         (int)(((uint64_t)t * 2654435761u + 17 + o->seed * 7919) % (uint64_t)c->n_vocab), H);
        memcpy(xc, xr, sizeof(float) * (size_t)(S + 1) * H);
        ts_metrics pre, dec;
        if ((s = ts_ref_layer(r, l, xr, S, 0, err)) || (s = ts_cpu_layer(cp, l, xc, S, 0, err))) break;
        ts_metrics_compute(xc, xr, S, H, &pre);
        float *nr = xr + (size_t)S * H, *nc = xc + (size_t)S * H;
        if ((s = ts_ref_layer(r, l, nr, 1, S, err)) || (s = ts_cpu_layer(cp, l, nc, 1, S, err))) break;
        ts_metrics_compute(nc, nr, 1, H, &dec);
        worst_cos = ts_worst_min(ts_worst_min(worst_cos, pre.cosine), dec.cosine);
        worst_row = ts_worst_min(worst_row, pre.min_row_cosine);
        if (pre.nonfinite || dec.nonfinite) worst_cos = worst_row = NAN; /* sticky from here on */
        if (out)
            fprintf(out, "  layer %3d: prefill cosine %.7f, per-position min %.7f, rel_l2 %.2e; decode cosine %.7f\n", l,
                    pre.cosine, pre.min_row_cosine, pre.rel_l2, dec.cosine);
        json_array_append_new(rows, json_pack("{s:i, s:o, s:o, s:o, s:o}", "layer", l, "cosine",
                                              ts_json_number(pre.cosine), "min_row_cosine",
                                              ts_json_number(pre.min_row_cosine), "rel_l2", ts_json_number(pre.rel_l2),
                                              "decode_cosine", ts_json_number(dec.cosine)));
    }
    int pass = 1;
    if (!s) {
        char rowmetric[64];
        snprintf(rowmetric, sizeof rowmetric, "%s", ts_phase2_row_cosine(c->head_dim)->metric);
        json_array_append_new(gates, ts_gate_row("phase2", "cosine", worst_cos, out, &pass));
        json_array_append_new(gates, ts_gate_row("phase2", rowmetric, worst_row, out, &pass));
    }
    ts_ref_free(r);
    ts_cpu_free(cp);
    free(xr), free(xc);
    if (s && s != TS_ERR_GATE) {
        json_decref(rep), json_decref(rows), json_decref(gates);
        return s;
    }
    json_object_set_new(rep, "blocks", rows);
    *report = finish(rep, gates, 2, pass, out);
    return pass ? TS_OK : ts_fail(err, TS_ERR_GATE, "phase 2 gate failed (see the table)");
}

/* ---------------- phase 3: whole model ---------------- */

#define P3_PROMPTS 6
#define P3_LOCKSTEP 8
#define P3_GEN 32

ts_status ts_phase_lockstep(const ts_model *m, int threads, ts_cpu *cp, int R, const int32_t *prompts, int n, int gen,
                            int *same, int *violation, ts_error *err) {
    const ts_config *c = ts_model_config(m);
    int V = c->n_vocab, topk = (int)ts_threshold_find("phase3", "mutual_top_k")->value;
    ts_ref **rs = calloc((size_t)R, sizeof *rs);
    int32_t *ta = malloc(sizeof(int32_t) * (size_t)R * (size_t)gen), *step = malloc(sizeof(int32_t) * (size_t)R);
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)(n + gen));
    float *la = malloc(sizeof(float) * (size_t)R * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    ts_status s = rs && ta && step && seq && la && b ? TS_OK : ts_fail(err, TS_ERR_NOMEM, "lockstep: out of memory");
    for (int k = 0; k < R && !s; k++) s = ts_ref_new(m, n + gen, &rs[k], err);
    if (!s) s = ts_ref_set_threads(rs[0], threads, err);
    /* The oracle's greedy runs, all R together: the prompts token by token, then its own picks. */
    for (int t = 0; t < n + gen - 1 && !s; t++) {
        for (int k = 0; k < R; k++) step[k] = t < n ? prompts[(size_t)k * n + t] : ta[(size_t)k * gen + t - n];
        s = ts_ref_decode_batch(rs, R, step, la, err);
        if (!s && t >= n - 1)
            for (int k = 0; k < R; k++) ta[(size_t)k * gen + t - n + 1] = ts_argmax(la + (size_t)k * V, V);
    }
    /* The cpu target follows each run. */
    for (int k = 0; k < R && !s; k++) {
        const int32_t *want = ta + (size_t)k * gen;
        same[k] = violation[k] = 0;
        ts_cpu_reset(cp);
        if ((s = ts_cpu_forward(cp, prompts + (size_t)k * n, n, b, 0, NULL, err))) break;
        for (int t = 0; t < gen; t++) {
            int32_t tb = ts_argmax(b, V);
            int finite = 1;
            for (int v = 0; v < V && finite; v++) finite = isfinite(b[v]);
            if (!finite) {
                violation[k] = 1;
                break;
            }
            if (tb != want[t]) {
                /* The oracle's logits here: its run so far as one prefill (bit-identical to its
                 * decode), so only its tokens had to be kept. */
                memcpy(seq, prompts + (size_t)k * n, sizeof(int32_t) * (size_t)n);
                memcpy(seq + n, want, sizeof(int32_t) * (size_t)t);
                ts_ref_reset(rs[0]);
                if (!(s = ts_ref_forward(rs[0], seq, n + t, la, 0, NULL, err)))
                    violation[k] = ts_rank_of(la, V, tb) >= topk || ts_rank_of(b, V, want[t]) >= topk;
                break;
            }
            same[k]++;
            if (t + 1 < gen && (s = ts_cpu_forward(cp, &tb, 1, b, 0, NULL, err))) break;
        }
    }
    for (int k = 0; rs && k < R; k++) ts_ref_free(rs[k]);
    free(rs), free(ta), free(step), free(seq), free(la), free(b);
    return s;
}

void ts_phase_prompt_tokens(const ts_config *c, uint64_t seed, int k, int32_t *t, int n) {
    uint64_t s = 0xabcdef12345ull + (uint64_t)k * 7919 + seed * 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)((s >> 33) % (uint64_t)c->n_vocab);
    }
    if (c->bos_id >= 0) t[0] = c->bos_id;
}

ts_status ts_phase3_run(const ts_model *m, const ts_phase_opts *o, json_t **report, ts_error *err) {
    static const int lens[P3_PROMPTS] = {8, 16, 24, 32, 48, 64};
    const ts_config *c = ts_model_config(m);
    FILE *out = o->out;
    int V = c->n_vocab, maxlen = 64 + P3_GEN;
    ts_ref *r = NULL;
    ts_cpu *cp = NULL;
    ts_cpu_opts co = {.n_threads = o->threads, .force_variant = -1, .fault = o->fault};
    float *lr = malloc(sizeof(float) * 64 * (size_t)V), *lc = malloc(sizeof(float) * 64 * (size_t)V);
    int32_t toks[64];
    json_t *rep = json_object(), *prompts = json_array(), *runs = json_array(), *gates = json_array();
    ts_status s = TS_OK;
    int violations = 0, decisive = 0, positions = 0, lock_viol = 0;
    double pmin = ts_threshold_find("phase3", "decisive_prob")->value;
    int topk = (int)ts_threshold_find("phase3", "mutual_top_k")->value;
    if (!lr || !lc) s = ts_fail(err, TS_ERR_NOMEM, "phase 3: out of memory");
    if (!s) s = ts_ref_new(m, maxlen, &r, err);
    if (!s) s = ts_ref_set_threads(r, o->threads, err);
    if (!s) s = ts_cpu_new(m, maxlen, &co, &cp, err);
    if (out && !s)
        fprintf(out, "phase 3 (model): %d token prompts (all positions) and %d greedy lockstep runs of %d tokens\n",
                P3_PROMPTS, P3_LOCKSTEP, P3_GEN);
    for (int k = 0; k < P3_PROMPTS && !s; k++) {
        int n = lens[k], dec = 0, viol = 0;
        ts_phase_prompt_tokens(c, o->seed, k, toks, n);
        ts_ref_reset(r);
        ts_cpu_reset(cp);
        if ((s = ts_ref_forward(r, toks, n, lr, 1, NULL, err)) || (s = ts_cpu_forward(cp, toks, n, lc, 1, NULL, err))) break;
        for (int p = 0; p < n; p++) {
            const float *a = lr + (size_t)p * V, *b = lc + (size_t)p * V;
            int ta = ts_argmax(a, V), tb = ts_argmax(b, V);
            int bad = 0;
            if (ts_softmax_prob(a, V, ta) > pmin) {
                dec++;
                bad = ta != tb;
            } else {
                bad = ts_rank_of(a, V, tb) >= topk || ts_rank_of(b, V, ta) >= topk;
            }
            viol += bad || !isfinite(b[tb]);
        }
        ts_metrics mt;
        ts_metrics_compute(lc, lr, n, V, &mt);
        for (int p = 0; p < n; p++) /* a NaN hides from argmax and rank: count such rows */
            for (int v = 0; v < V; v++)
                if (!isfinite(lc[(size_t)p * V + v])) {
                    viol++;
                    break;
                }
        violations += viol, decisive += dec, positions += n;
        if (out)
            fprintf(out, "  prompt %d: %2d tokens, %2d decisive, violations %d, logits cosine %.7f\n", k, n, dec, viol,
                    mt.cosine);
        json_array_append_new(prompts, json_pack("{s:i, s:i, s:i, s:o}", "tokens", n, "decisive", dec,
                                                 "violations", viol, "cosine", ts_json_number(mt.cosine)));
    }
    int32_t lp[P3_LOCKSTEP * 8];
    int same[P3_LOCKSTEP], lv[P3_LOCKSTEP];
    for (int k = 0; k < P3_LOCKSTEP; k++) ts_phase_prompt_tokens(c, o->seed, 100 + k, lp + k * 8, 8);
    if (!s) s = ts_phase_lockstep(m, o->threads, cp, P3_LOCKSTEP, lp, 8, P3_GEN, same, lv, err);
    for (int k = 0; k < P3_LOCKSTEP && !s; k++) {
        lock_viol += lv[k];
        if (out) fprintf(out, "  lockstep %d: %2d identical greedy tokens%s\n", k, same[k],
                         same[k] < P3_GEN ? (lv[k] ? ", diverged outside top-5" : ", then a top-5 divergence") : "");
        json_array_append_new(runs, json_pack("{s:i, s:b}", "identical_tokens", same[k], "violation", lv[k]));
    }
    int pass = 1;
    if (!s) {
        json_array_append_new(gates, ts_gate_row("phase3", "position_violations", violations, out, &pass));
        json_array_append_new(gates, ts_gate_row("phase3", "lockstep_violations", lock_viol, out, &pass));
    }
    ts_ref_free(r);
    ts_cpu_free(cp);
    free(lr), free(lc);
    if (s) {
        json_decref(rep), json_decref(prompts), json_decref(runs), json_decref(gates);
        return s;
    }
    json_object_set_new(rep, "positions", json_integer(positions));
    json_object_set_new(rep, "decisive_positions", json_integer(decisive));
    json_object_set_new(rep, "prompts", prompts);
    json_object_set_new(rep, "lockstep", runs);
    *report = finish(rep, gates, 3, pass, out);
    return pass ? TS_OK : ts_fail(err, TS_ERR_GATE, "phase 3 gate failed (see the table)");
}
