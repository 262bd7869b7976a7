/* Phase 1: every GEMM/GEMV shape of the model through the cpu target's kernel against the
 * oracle, and every step of the step list alone on the oracle's inputs, at prefill and decode
 * shapes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "deploy/gates.h"
#include "deploy/phases.h"
#include "deploy/steps_check.h"
#include "io/dtype.h"
#include "target/ref/ref_kernels.h"

/* One GEMM shape: the optimized kernel over all of N against the oracle on a window of rows
 * (all rows for decode). Returns the metrics; *ms: time per call, one thread. */
static ts_status kernel_case(const ts_tensor *W, int S, int N, int K, ts_metrics *mt, double *ms,
                             ts_error *err) {
    int n0 = S == 1 ? 0 : (N > 64 ? N / 2 - 32 : 0), n1 = S == 1 ? N : (N > 64 ? n0 + 64 : N);
    size_t nx = (size_t)S * K;
    float *x = malloc(sizeof(float) * nx);
    float *y = malloc(sizeof(float) * (size_t)S * N), *ref = malloc(sizeof(float) * (size_t)S * (n1 - n0));
    float *got = malloc(sizeof(float) * (size_t)S * (n1 - n0)), *row = malloc(sizeof(float) * TS_REF_ROW_SCRATCH(K));
    uint16_t *wb = NULL;
    const uint16_t *w = W->data;
    ts_status s = TS_OK;
    if (!x || !y || !ref || !got || !row) {
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
    for (size_t i = 0; i < nx; i++) x[i] = ts_phase_frand(&seed);
    for (size_t i = 0; i < (size_t)S * N; i++) y[i] = NAN;
    ts_tensor win = *W;
    win.data = (const uint8_t *)W->data + (size_t)n0 * K * ts_dtype_size(W->dtype);
    ts_ref_matmul(ref, x, &win, NULL, S, n1 - n0, K, row);
    double a = ts_now_s();
    if ((s = ts_cpu_matmul(x, S, w, N, K, y, err))) goto done;
    *ms = (ts_now_s() - a) * 1e3;
    int64_t unwritten = 0;
    for (int r = 0; r < S; r++) {
        for (int n = 0; n < N; n++) unwritten += isnan(y[(size_t)r * N + n]);
        memcpy(got + (size_t)r * (n1 - n0), y + (size_t)r * N + n0, sizeof(float) * (size_t)(n1 - n0));
    }
    ts_metrics_compute(got, ref, S, n1 - n0, mt);
    mt->nonfinite += unwritten; /* an output the kernel never wrote counts as a failure */
done:
    free(x), free(y), free(ref), free(got), free(row), free(wb);
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
    *report = ts_phase_finish(rep, gates, 1, pass, out);
    return pass ? TS_OK : ts_fail(err, TS_ERR_GATE, "phase 1 gate failed (see the table)");
}

