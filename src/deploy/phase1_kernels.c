/* Phase 1: every GEMM of the model through the cpu target's kernel against the oracle over all
 * its output columns, at the row counts the measured prefills run (their chunks) in the first
 * and last layer and at decode in every layer; then every step of the step list alone on the
 * oracle's inputs in the first and last layer, chunk by chunk through each measured prefill
 * and one decode row after it. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/pool.h"
#include "deploy/gates.h"
#include "deploy/phases.h"
#include "deploy/steps_check.h"
#include "io/dtype.h"
#include "target/ref/ref_kernels.h"

/* The deployment's prefill sizes (phase 4's trajectory and TTFT sizes). */
#define TS_PHASE1_MAX_SIZES (TS_PERF_MAX_SIZES + 1)

/* The oracle's matmul split by output column over the pool (each output is computed by the
 * same code whatever the split, ref_kernels.h): at full size it is most of this phase. */
typedef struct ref_job {
    float *out;
    const float *x;
    const ts_tensor *W;
    int S, N, K;
    float *rows; /* per thread: TS_REF_ROW_SCRATCH(K) floats */
} ref_job;

static void ref_part(void *ctx, int ith, int nth) {
    const ref_job *j = ctx;
    int n0 = (int)((long)j->N * ith / nth), n1 = (int)((long)j->N * (ith + 1) / nth);
    ts_ref_matmul_cols(j->out, j->x, j->W, NULL, j->S, j->N, j->K, n0, n1, j->rows + (size_t)ith * TS_REF_ROW_SCRATCH(j->K));
}

/* One weight matrix as one GEMM of a step: its columns [col0, col0 + N) of the step's `width`
 * output columns (q, k and v are parts of qkv; gate and up both of gate_up), for the fault. */
typedef struct gemm_case {
    const char *name;
    size_t field; /* offsetof the weight in ts_layer_w */
    ts_step step; /* TS_N_STEPS: the LM head (no step, no layer) */
    int col0, width;
} gemm_case;

static const ts_tensor *case_weight(const ts_model *m, const gemm_case *g, int l) {
    if (g->step == TS_N_STEPS) return m->lm_head;
    return *(const ts_tensor *const *)((const char *)&m->layers[l] + g->field);
}

/* One GEMM: the optimized kernel against the oracle over all S rows and N columns on seeded
 * random activations. *ms: the kernel's time per call, one thread. */
static ts_status kernel_case(const ts_tensor *W, const gemm_case *g, int layer, int S, uint64_t seed, ts_pool *pool,
                             const ts_cpu_fault *fault, ts_metrics *mt, double *ms, ts_error *err) {
    int N = (int)W->shape[0], K = (int)W->shape[1], nth = ts_pool_size(pool);
    size_t ny = (size_t)S * N;
    float *x = malloc(sizeof(float) * (size_t)S * K), *y = malloc(sizeof(float) * ny), *ref = malloc(sizeof(float) * ny);
    float *rows = malloc(sizeof(float) * TS_REF_ROW_SCRATCH(K) * (size_t)nth);
    uint16_t *wb = NULL;
    const uint16_t *w = W->data;
    ts_status s = TS_OK;
    if (!x || !y || !ref || !rows) {
        s = ts_fail(err, TS_ERR_NOMEM, "phase 1: out of memory for %s at %d rows", W->name, S);
        goto done;
    }
    int quant = (W->dtype == TS_DTYPE_Q8_0 || W->dtype == TS_DTYPE_Q4_0) && K % TS_QBLOCK == 0;
    if (W->dtype != TS_DTYPE_BF16 && !quant) { /* the cpu target runs a BF16 copy of such weights */
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
    uint64_t st = 0x9e3779b97f4a7c15ull ^ (uint64_t)N * 31 ^ (uint64_t)K ^ (uint64_t)S << 40 ^ (uint64_t)layer << 24 ^
                  seed * 0xbf58476d1ce4e5b9ull;
    for (size_t i = 0; i < (size_t)S * K; i++) x[i] = ts_phase_frand(&st);
    for (size_t i = 0; i < ny; i++) y[i] = NAN;
    ref_job j = {ref, x, W, S, N, K, rows};
    ts_pool_run(pool, ref_part, &j);
    double a = ts_now_s();
    /* quantized weights: read in place by the quantized kernels, as a session does */
    if ((s = quant ? ts_cpu_matmul_q(x, S, W->data, W->dtype, N, K, y, err) : ts_cpu_matmul(x, S, w, N, K, y, err)))
        goto done;
    *ms = (ts_now_s() - a) * 1e3;
    if (g->step != TS_N_STEPS) ts_cpu_fault_apply(fault, g->step, layer, y, S, N, g->col0, N, g->width);
    ts_metrics_compute(y, ref, S, N, mt); /* an output the kernel never wrote stays NaN: non-finite */
done:
    free(x), free(y), free(ref), free(rows), free(wb);
    return s;
}

/* The prefill sizes phase 1 covers: the deployment's (or phase 4's defaults), capped at
 * max_position_embeddings, without repeats. */
static int prefill_sizes(const ts_phase_opts *o, const ts_config *c, int *sz) {
    ts_perf_opts d;
    ts_perf_defaults(&d, 4);
    const int *in = o->n_prefill_sizes > 0 ? o->prefill_sizes : d.sizes;
    int n_in = o->n_prefill_sizes > 0 ? o->n_prefill_sizes : d.n_sizes, n = 0;
    for (int i = 0; i < n_in && n < TS_PHASE1_MAX_SIZES; i++) {
        int P = in[i] < c->max_pos ? in[i] : c->max_pos, seen = 0;
        for (int k = 0; k < n; k++) seen |= sz[k] == P;
        if (P >= 1 && !seen) sz[n++] = P;
    }
    return n;
}

/* The distinct row counts the GEMMs of those prefills run: each prompt goes through in chunks
 * of TS_CPU_PREFILL_CHUNK rows, the last one shorter. Ascending. */
static int gemm_rows(const int *sz, int n, int *rows) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        int cand[2] = {sz[i] < TS_CPU_PREFILL_CHUNK ? sz[i] : TS_CPU_PREFILL_CHUNK, sz[i] % TS_CPU_PREFILL_CHUNK};
        for (int c = 0; c < 2; c++) {
            int seen = cand[c] < 2; /* one row is decode's shape, checked on its own */
            for (int j = 0; j < k; j++) seen |= rows[j] == cand[c];
            if (!seen) rows[k++] = cand[c];
        }
    }
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && rows[j - 1] > rows[j]; j--) {
            int t = rows[j];
            rows[j] = rows[j - 1], rows[j - 1] = t;
        }
    return k;
}

typedef struct worst {
    double rel, p, bad;
} worst;

static void worst_add(worst *w, const ts_metrics *mt) {
    w->rel = ts_worst_max(w->rel, mt->rel_l2);
    w->p = ts_worst_min(w->p, mt->pearson);
    w->bad += (double)mt->nonfinite;
}

/* Every GEMM at every row count in the first and last layer, then at one row in every layer;
 * the LM head at one row only (prefill computes the last token's logits alone). */
static ts_status gemm_table(const ts_model *m, const ts_phase_opts *o, const int *rows, int n_rows, ts_pool *pool,
                            json_t *out_rows, worst *w, ts_error *err) {
    const ts_config *c = ts_model_config(m);
    FILE *out = o->out;
    int H = c->n_embd, Q = c->n_heads * c->head_dim, KV = c->n_kv_heads * c->head_dim, L = c->n_layers;
    const gemm_case cases[] = {
        {"q_proj", offsetof(ts_layer_w, wq), TS_STEP_QKV, 0, Q + 2 * KV},
        {"k_proj", offsetof(ts_layer_w, wk), TS_STEP_QKV, Q, Q + 2 * KV},
        {"v_proj", offsetof(ts_layer_w, wv), TS_STEP_QKV, Q + KV, Q + 2 * KV},
        {"o_proj", offsetof(ts_layer_w, wo), TS_STEP_O_PROJ, 0, H},
        {"gate_proj", offsetof(ts_layer_w, w_gate), TS_STEP_GATE_UP, 0, c->n_ff},
        {"up_proj", offsetof(ts_layer_w, w_up), TS_STEP_GATE_UP, 0, c->n_ff},
        {"down_proj", offsetof(ts_layer_w, w_down), TS_STEP_DOWN, 0, H},
        {"lm_head", 0, TS_N_STEPS, 0, c->n_vocab}};
    int ends[2] = {0, L - 1}, n_ends = L > 1 ? 2 : 1;
    char ends_txt[32], all_txt[32];
    snprintf(ends_txt, sizeof ends_txt, L > 1 ? "%d,%d" : "%d", 0, L - 1);
    snprintf(all_txt, sizeof all_txt, "all %d", L);
    if (out)
        fprintf(out, "  every GEMM over all its output columns (worst over the layers; ms: one call, one thread):\n"
                     "  %-10s %5s %-7s %7s %6s %11s %13s %6s %10s\n",
                "step", "S", "layers", "N", "K", "rel_l2", "pearson", "worst", "ms/call");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const gemm_case *g = &cases[i];
        int lm = g->step == TS_N_STEPS;
        for (int r = lm ? n_rows : 0; r <= n_rows; r++) {
            int S = r < n_rows ? rows[r] : 1, nl = lm ? 1 : S > 1 ? n_ends : L;
            ts_metrics acc = {0};
            worst ws = {0, 1, 0};
            int worst_layer = 0, N = 0, K = 0;
            double ms = 0;
            json_t *layers = json_array();
            for (int li = 0; li < nl; li++) {
                int l = S > 1 ? ends[li] : li;
                const ts_tensor *W = case_weight(m, g, l);
                double t = 0;
                ts_status s = kernel_case(W, g, l, S, o->seed, pool, o->fault, &acc, &t, err);
                if (s) {
                    json_decref(layers);
                    return s;
                }
                N = (int)W->shape[0], K = (int)W->shape[1];
                if (li == 0) ms = t;
                if (isnan(acc.rel_l2) || acc.rel_l2 > ws.rel || acc.nonfinite) worst_layer = l;
                worst_add(&ws, &acc);
                if (!lm) json_array_append_new(layers, json_integer(l));
            }
            worst_add(w, &(ts_metrics){.rel_l2 = ws.rel, .pearson = ws.p, .nonfinite = (int64_t)ws.bad});
            int ok = !ws.bad && ts_threshold_pass(ts_threshold_find("phase1", "rel_l2"), ws.rel) &&
                     ts_threshold_pass(ts_threshold_find("phase1", "pearson"), ws.p);
            if (out)
                fprintf(out, "  %-10s %5d %-7s %7d %6d %11.3e %13.9f %6d %10.3f%s\n", g->name, S,
                        lm ? "-" : S > 1 ? ends_txt : all_txt, N, K, ws.rel, ws.p, worst_layer, ms, ok ? "" : "   <- FAILS");
            json_t *row = json_pack("{s:s, s:i, s:i, s:i, s:o, s:o, s:I, s:f, s:b}", "step", g->name, "S", S, "N", N, "K",
                                    K, "rel_l2", ts_json_number(ws.rel), "pearson", ts_json_number(ws.p), "nonfinite",
                                    (json_int_t)ws.bad, "ms", ms, "pass", ok);
            if (lm) json_decref(layers);
            else {
                json_object_set_new(row, "layers", layers);
                json_object_set_new(row, "worst_layer", json_integer(worst_layer));
            }
            json_array_append_new(out_rows, row);
        }
    }
    return TS_OK;
}

/* One run of the step check: layer l, S rows at position p0 of a P-token prefill (S = 1 at
 * p0 = P: the decode row after it); its rows get pos0 and prefill. */
static ts_status steps_run(const ts_model *m, ts_ref *r, ts_cpu *cp, const float *x, int l, int p0, int S, int P,
                           FILE *table, FILE *out, json_t *steps, worst *w, ts_error *err) {
    int H = ts_model_config(m)->n_embd;
    ts_steps_result res;
    size_t n0 = json_array_size(steps);
    ts_status s = ts_steps_check(m, r, cp, l, x + (size_t)p0 * H, S, p0, table, steps, &res, err);
    if (s) return s;
    for (size_t k = n0; k < json_array_size(steps); k++) {
        json_object_set_new(json_array_get(steps, k), "pos0", json_integer(p0));
        json_object_set_new(json_array_get(steps, k), "prefill", json_integer(P));
    }
    worst_add(w, &(ts_metrics){.rel_l2 = res.worst_rel_l2, .pearson = res.worst_pearson, .nonfinite = res.nonfinite});
    if (!table && out)
        fprintf(out, "    layer %2d, %3d row%s at position %5d (prefill %d%s): worst rel_l2 %.3e, pearson %.9f, "
                     "nonfinite %lld%s%s\n", l, S, S == 1 ? "" : "s", p0, P, S == 1 ? ", decode" : "", res.worst_rel_l2, res.worst_pearson,
                (long long)res.nonfinite, res.first_bad >= 0 ? "   <- FAILS at " : "",
                res.first_bad >= 0 ? ts_step_name((ts_step)res.first_bad) : "");
    return TS_OK;
}

/* Every step alone on the oracle's inputs in the first and last layer: each prefill size chunk
 * by chunk from position 0 (as ts_cpu_forward runs it), then one decode row at the position
 * after it. The first prefill's table is printed whole, every other run as one line. */
static ts_status steps_table(const ts_model *m, const ts_phase_opts *o, const int *sz, int n_sz, json_t *steps,
                             worst *w, ts_error *err) {
    const ts_config *c = ts_model_config(m);
    FILE *out = o->out;
    int H = c->n_embd, L = c->n_layers, maxP = 1;
    for (int i = 0; i < n_sz; i++) maxP = sz[i] > maxP ? sz[i] : maxP;
    if (maxP + 1 > c->max_pos) maxP = c->max_pos > 1 ? c->max_pos - 1 : 1; /* room for the decode row */
    ts_ref *r = NULL;
    ts_cpu *cp = NULL;
    ts_cpu_opts co = {.n_threads = o->threads, .force_variant = -1, .fault = o->fault};
    float *x = malloc(sizeof(float) * (size_t)(maxP + 1) * H);
    ts_status s = x ? TS_OK : ts_fail(err, TS_ERR_NOMEM, "phase 1: out of memory");
    if (!s) s = ts_ref_new(m, maxP + 1, &r, err);
    if (!s) s = ts_ref_set_threads(r, o->threads, err);
    if (!s) s = ts_cpu_new(m, maxP + 1, &co, &cp, err);
    for (int t = 0; t <= maxP && !s; t++)
        ts_ref_embed(x + (size_t)t * H, m->embed,
                     (int)(((uint64_t)t * 2246822519u + 3 + o->seed * 31) % (uint64_t)c->n_vocab), H);
    if (!s && out)
        fprintf(out, "  every step alone on the oracle's inputs in layers 0 and %d, each prefill in chunks of at most %d "
                     "rows, then one decode row:\n    %-10s %-48s %11s %13s %9s\n", L - 1, TS_CPU_PREFILL_CHUNK, "step",
                "shape", "rel_l2", "pearson", "nonfinite");
    for (int li = 0; li < (L > 1 ? 2 : 1) && !s; li++) {
        int l = li ? L - 1 : 0;
        for (int i = 0; i < n_sz && !s; i++) {
            int P = sz[i] < maxP ? sz[i] : maxP;
            FILE *table = li == 0 && i == 0 ? out : NULL;
            for (int p0 = 0; p0 < P && !s; p0 += TS_CPU_PREFILL_CHUNK)
                s = steps_run(m, r, cp, x, l, p0, P - p0 < TS_CPU_PREFILL_CHUNK ? P - p0 : TS_CPU_PREFILL_CHUNK, P, table,
                              out, steps, w, err);
            if (!s) s = steps_run(m, r, cp, x, l, P, 1, P, table, out, steps, w, err);
        }
    }
    ts_ref_free(r);
    ts_cpu_free(cp);
    free(x);
    return s;
}

ts_status ts_phase1_run(const ts_model *m, const ts_phase_opts *o, json_t **report, ts_error *err) {
    const ts_config *c = ts_model_config(m);
    FILE *out = o->out;
    int sz[TS_PHASE1_MAX_SIZES], rows[2 * TS_PHASE1_MAX_SIZES];
    int n_sz = prefill_sizes(o, c, sz), n_rows = gemm_rows(sz, n_sz, rows);
    json_t *rep = json_object(), *kernels = json_array(), *gates = json_array(), *steps = json_array();
    json_t *jsz = json_array(), *jrows = json_array();
    worst w = {0, 1, 0};
    ts_pool *pool = NULL;
    if (out) {
        fprintf(out, "phase 1 (kernels, %s): prefills of", ts_cpu_variant_name(ts_cpu_best_variant()));
        for (int i = 0; i < n_sz; i++) fprintf(out, " %d", sz[i]);
        fprintf(out, " tokens (GEMMs of");
        for (int i = 0; i < n_rows; i++) fprintf(out, " %d", rows[i]);
        fprintf(out, " rows) and decode (1 row)\n");
    }
    for (int i = 0; i < n_sz; i++) json_array_append_new(jsz, json_integer(sz[i]));
    for (int i = 0; i < n_rows; i++) json_array_append_new(jrows, json_integer(rows[i]));
    double t0 = ts_now_s();
    ts_status s = ts_pool_new(o->threads, &pool, err);
    if (!s) s = gemm_table(m, o, rows, n_rows, pool, kernels, &w, err);
    ts_pool_free(pool);
    double t1 = ts_now_s();
    if (!s) s = steps_table(m, o, sz, n_sz, steps, &w, err);
    double t2 = ts_now_s();
    if (s) {
        json_decref(rep), json_decref(kernels), json_decref(gates), json_decref(steps), json_decref(jsz);
        json_decref(jrows);
        return s;
    }
    int pass = 1;
    if (out)
        fprintf(out, "  (GEMMs %.1f s, steps %.1f s)\n  gate (worst over all GEMMs, layers, shapes and steps):\n", t1 - t0,
                t2 - t1);
    json_object_set_new(rep, "gemm_s", json_real(t1 - t0));
    json_object_set_new(rep, "steps_s", json_real(t2 - t1));
    json_array_append_new(gates, ts_gate_row("phase1", "rel_l2", w.rel, out, &pass));
    json_array_append_new(gates, ts_gate_row("phase1", "pearson", w.p, out, &pass));
    json_array_append_new(gates, ts_gate_row("phase1", "nonfinite", w.bad, out, &pass));
    json_object_set_new(rep, "prefill_sizes", jsz);
    json_object_set_new(rep, "gemm_rows", jrows);
    json_object_set_new(rep, "kernels", kernels);
    json_object_set_new(rep, "steps", steps);
    *report = ts_phase_finish(rep, gates, 1, pass, out);
    return pass ? TS_OK : ts_fail(err, TS_ERR_GATE, "phase 1 gate failed (see the table)");
}
