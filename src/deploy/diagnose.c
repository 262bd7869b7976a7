/* Diagnosis: find the first layer that diverges, then the step inside it, then where a NaN
 * starts. Each step runs alone on the oracle's inputs, so an error upstream cannot be blamed
 * on a correct kernel downstream. */
#include "deploy/diagnose.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "deploy/gates.h"
#include "deploy/steps_check.h"

#define DIAG_S 32

static int fails_block(const ts_metrics *m, int head_dim) {
    return m->nonfinite > 0 || !ts_threshold_pass(ts_threshold_find("phase2", "cosine"), m->cosine) ||
           !ts_threshold_pass(ts_phase2_row_cosine(head_dim), m->min_row_cosine);
}

static int64_t count_nonfinite(const float *p, size_t n) {
    int64_t k = 0;
    for (size_t i = 0; i < n; i++) k += !isfinite(p[i]);
    return k;
}

static json_t *metrics_json(const ts_metrics *m) {
    return json_pack("{s:o, s:o, s:o, s:o, s:I}", "cosine", ts_json_number(m->cosine), "min_row_cosine",
                     ts_json_number(m->min_row_cosine), "rel_l2", ts_json_number(m->rel_l2), "max_abs",
                     ts_json_number(m->max_abs), "nonfinite", (json_int_t)m->nonfinite);
}

ts_status ts_diagnose(const ts_model *m, const ts_cpu_opts *co, FILE *out, json_t **report, ts_error *err) {
    const ts_config *c = ts_model_config(m);
    int S = DIAG_S, H = c->n_embd, L = c->n_layers, V = c->n_vocab;
    int32_t toks[DIAG_S];
    for (int i = 0; i < S; i++) toks[i] = (int32_t)(((uint64_t)i * 2654435761u + 101) % (uint64_t)V);
    if (c->bos_id >= 0) toks[0] = c->bos_id;
    size_t nh = (size_t)(L + 1) * S * H;
    float *hr = malloc(sizeof(float) * nh), *hc = malloc(sizeof(float) * nh);
    float *lr = malloc(sizeof(float) * V), *lc = malloc(sizeof(float) * V);
    ts_ref *r = NULL;
    ts_cpu *cp = NULL;
    json_t *rep = json_object(), *layers = json_array(), *steps = json_array();
    ts_status s = TS_OK;
    *report = NULL;
    if (!hr || !hc || !lr || !lc) {
        s = ts_fail(err, TS_ERR_NOMEM, "diagnosis: out of memory");
        goto done;
    }
    if ((s = ts_ref_new(m, S, &r, err)) || (s = ts_ref_set_threads(r, co->n_threads, err)) ||
        (s = ts_cpu_new(m, S, co, &cp, err)))
        goto done;
    if (out) fprintf(out, "diagnosis: cpu target against the oracle on a %d-token prompt, layer by layer\n", S);
    if ((s = ts_ref_forward(r, toks, S, lr, 0, hr, err)) || (s = ts_cpu_forward(cp, toks, S, lc, 0, hc, err))) goto done;
    int failing = -1, nan_layer = -1;
    if (out) fprintf(out, "    %-7s %12s %14s %11s %9s\n", "layer", "cosine", "min_row_cos", "rel_l2", "nonfinite");
    for (int l = 0; l < L; l++) {
        ts_metrics mt;
        const float *a = hc + (size_t)(l + 1) * S * H, *b = hr + (size_t)(l + 1) * S * H;
        ts_metrics_compute(a, b, S, H, &mt);
        mt.nonfinite = count_nonfinite(a, (size_t)S * H);
        int bad = fails_block(&mt, c->head_dim);
        if (bad && failing < 0) failing = l;
        if (mt.nonfinite && nan_layer < 0) nan_layer = l;
        if (out)
            fprintf(out, "    %-7d %12.7f %14.7f %11.3e %9lld%s\n", l, mt.cosine, mt.min_row_cosine, mt.rel_l2,
                    (long long)mt.nonfinite, l == failing ? "   <- first failing layer" : "");
        json_t *row = metrics_json(&mt);
        json_object_set_new(row, "layer", json_integer(l));
        json_array_append_new(layers, row);
    }
    ts_metrics lm;
    ts_metrics_compute(lc, lr, 1, V, &lm);
    lm.nonfinite = count_nonfinite(lc, (size_t)V);
    json_object_set_new(rep, "logits", metrics_json(&lm));
    char summary[768];
    ts_steps_result res = {-1, -1, 0, 1, 0};
    int step_layer = -1;
    /* The step table runs at the first failing layer; when every layer output passes (a
     * fault can hide in one model's numbers), layer after layer until a step fails alone. */
    for (int l = failing >= 0 ? failing : 0; l < (failing >= 0 ? failing + 1 : L); l++) {
        ts_ref *r2 = NULL;
        if ((s = ts_ref_new(m, S, &r2, err)) || (s = ts_ref_set_threads(r2, co->n_threads, err))) goto done;
        if (out)
            fprintf(out, "  layer %d, each step alone on the oracle's inputs (gate: phase-1 kernel thresholds):\n"
                         "    %-10s %-48s %11s %13s %9s\n", l, "step", "shape", "rel_l2", "pearson", "nonfinite");
        json_array_clear(steps);
        s = ts_steps_check(m, r2, cp, l, hr + (size_t)l * S * H, S, 0, out, steps, &res, err);
        ts_ref_free(r2);
        if (s) goto done;
        step_layer = l;
        if (res.first_bad >= 0) break;
    }
    int bad_step = res.first_bad, nan_step = res.first_nan;
    if (bad_step >= 0) {
        char shape[128];
        ts_step_shape((ts_step)bad_step, c, S, shape, sizeof shape);
        const json_t *row = NULL, *v;
        size_t i;
        json_array_foreach(steps, i, v) if (!strcmp(json_string_value(json_object_get(v, "step")),
                                                   ts_step_name((ts_step)bad_step))) row = v;
        snprintf(summary, sizeof summary,
                 "layer %d, step %s (%s): alone on the oracle's inputs it gives rel_l2 %.3e, Pearson %.7f, "
                 "%lld non-finite values (gate: rel_l2 <= %g, Pearson >= %g, no NaN/Inf)%s",
                 step_layer, ts_step_name((ts_step)bad_step), shape, json_number_value(json_object_get(row, "rel_l2")),
                 json_number_value(json_object_get(row, "pearson")),
                 (long long)json_integer_value(json_object_get(row, "nonfinite")),
                 ts_threshold_find("phase1", "rel_l2")->value, ts_threshold_find("phase1", "pearson")->value,
                 failing < 0 ? "; every layer's output still passed the block thresholds on this prompt" : "");
        failing = step_layer;
    } else if (failing >= 0) {
        snprintf(summary, sizeof summary,
                 "layer %d diverges (see the layer table) but every step passes alone on the oracle's inputs: "
                 "look at what the steps share in the fused dispatches (buffer reuse, barriers, thread split)",
                 failing);
    } else if (lm.nonfinite > 0 || !ts_threshold_pass(ts_threshold_find("phase1", "rel_l2"), lm.rel_l2)) {
        snprintf(summary, sizeof summary,
                 "every layer and every step match; the last position's logits do not (rel_l2 %.3e, %lld "
                 "non-finite): final_norm or lm_head", lm.rel_l2, (long long)lm.nonfinite);
    } else {
        snprintf(summary, sizeof summary, "no divergence on the diagnosis prompt: every layer, every step and the "
                                          "logits pass");
        json_array_clear(steps);
    }
    if (out) fprintf(out, "diagnosis: %s\n", summary);
    json_object_set_new(rep, "summary", json_string(summary));
    json_object_set_new(rep, "prompt_tokens", json_integer(S));
    json_object_set_new(rep, "failing_layer", failing >= 0 ? json_integer(failing) : json_null());
    json_object_set_new(rep, "failing_step", bad_step >= 0 ? json_string(ts_step_name((ts_step)bad_step)) : json_null());
    json_t *nan = json_null();
    if (nan_layer >= 0)
        nan = json_pack("{s:i, s:o}", "layer", nan_layer, "step",
                        nan_step >= 0 && nan_layer == failing ? json_string(ts_step_name((ts_step)nan_step)) : json_null());
    json_object_set_new(rep, "nan_origin", nan);
    if (out && nan_layer >= 0)
        fprintf(out, "diagnosis: first NaN/Inf in the output of layer %d%s%s\n", nan_layer,
                nan_step >= 0 && nan_layer == failing ? ", produced by step " : "",
                nan_step >= 0 && nan_layer == failing ? ts_step_name((ts_step)nan_step) : "");
    json_object_set_new(rep, "layers", layers), layers = NULL;
    json_object_set_new(rep, "steps", steps), steps = NULL;
    *report = rep, rep = NULL;
done:
    json_decref(rep), json_decref(layers), json_decref(steps);
    ts_ref_free(r);
    ts_cpu_free(cp);
    free(hr), free(hc), free(lr), free(lc);
    return s;
}

void ts_diagnosis_markdown(const json_t *d, FILE *md) {
    fprintf(md, "\n## Diagnosis\n\n%s\n", json_string_value(json_object_get(d, "summary")));
    const json_t *steps = json_object_get(d, "steps"), *v;
    size_t i;
    if (json_array_size(steps)) {
        fprintf(md, "\nSteps of layer %lld alone on the oracle's inputs:\n\n| step | shape | rel_l2 | cosine | "
                    "non-finite | pass |\n|---|---|---|---|---|---|\n",
                (long long)json_integer_value(json_object_get(d, "failing_layer")));
        json_array_foreach(steps, i, v)
            fprintf(md, "| %s | %s | %.3e | %.7f | %lld | %s |\n", json_string_value(json_object_get(v, "step")),
                    json_string_value(json_object_get(v, "shape")), json_number_value(json_object_get(v, "rel_l2")),
                    json_number_value(json_object_get(v, "cosine")),
                    (long long)json_integer_value(json_object_get(v, "nonfinite")),
                    json_is_true(json_object_get(v, "pass")) ? "yes" : "**no**");
    }
    fprintf(md, "\nPer-layer output against the oracle:\n\n| layer | cosine | min row cosine | rel_l2 | non-finite |\n"
                "|---|---|---|---|---|\n");
    json_array_foreach(json_object_get(d, "layers"), i, v)
        fprintf(md, "| %lld | %.7f | %.7f | %.3e | %lld |\n", (long long)json_integer_value(json_object_get(v, "layer")),
                json_number_value(json_object_get(v, "cosine")), json_number_value(json_object_get(v, "min_row_cosine")),
                json_number_value(json_object_get(v, "rel_l2")), (long long)json_integer_value(json_object_get(v, "nonfinite")));
}
