/* Phase 2: one early and one late layer alone (prefill, then a decode step), cpu against the
 * oracle on the same inputs; the seed moves the layers, so the evaluator checks others. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "deploy/gates.h"
#include "deploy/phases.h"
#include "target/ref/ref_kernels.h"

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
    *report = ts_phase_finish(rep, gates, 2, pass, out);
    return pass ? TS_OK : ts_fail(err, TS_ERR_GATE, "phase 2 gate failed (see the table)");
}

