/* Diagnosis names the step that is wrong: a fault injected into each step of the cpu target in
 * turn (sign flips, then a NaN) must be found at its layer and named, with nothing reported
 * when no fault is injected. */
#include <jansson.h>
#include <string.h>

#include "deploy/diagnose.h"
#include "tharness.h"

static json_t *diagnose(const ts_model *m, const ts_cpu_fault *f) {
    ts_cpu_opts o = {.n_threads = 2, .force_variant = -1, .fault = f};
    json_t *rep = NULL;
    ts_error err;
    CHECK(ts_diagnose(m, &o, NULL, &rep, &err) == TS_OK, "%s", err.msg);
    return rep;
}

static const char *str(const json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "(null)";
}

int main(void) {
    const char *tmp = th_tmpdir("diagnose");
    static const char *presets[] = {"qwen3-0.6b-tiny", "llama-3.2-1b-tiny"};
    for (int p = 0; p < 2; p++) {
        char dir[1200];
        ts_error err;
        snprintf(dir, sizeof dir, "%s/%s", tmp, presets[p]);
        ts_model *m = NULL;
        if (ts_synth_write(presets[p], dir, &(ts_synth_opts){3, 0, 0, NULL, NULL}, &err) || ts_model_open(dir, &m, &err)) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        const ts_config *c = ts_model_config(m);
        json_t *d = diagnose(m, NULL);
        CHECK(d && json_is_null(json_object_get(d, "failing_step")) && json_is_null(json_object_get(d, "failing_layer")),
              "%s without a fault: %s", presets[p], d ? str(d, "summary") : "");
        json_decref(d);
        for (int k = 0; k < TS_N_STEPS; k++) {
            if (k == TS_STEP_QK_NORM && !c->qk_norm) continue;
            int layer = k % c->n_layers; /* faults in one layer: the diagnosis must find it */
            ts_cpu_fault f = {(ts_step)k, 0, layer, 0};
            d = diagnose(m, &f);
            if (!d) continue;
            CHECK(!strcmp(str(d, "failing_step"), ts_step_name((ts_step)k)) &&
                      json_integer_value(json_object_get(d, "failing_layer")) == layer,
                  "%s: fault in %s at layer %d, diagnosis says: %s", presets[p], ts_step_name((ts_step)k), layer,
                  str(d, "summary"));
            CHECK(strstr(str(d, "summary"), ts_step_name((ts_step)k)) != NULL, "summary names the step: %s",
                  str(d, "summary"));
            printf("  %-18s fault %-10s@%d -> %s\n", presets[p], ts_step_name((ts_step)k), layer, str(d, "summary"));
            json_decref(d);
        }
        static const ts_step nan_steps[] = {TS_STEP_ROPE, TS_STEP_DOWN};
        for (int i = 0; i < 2; i++) {
            ts_cpu_fault f = {nan_steps[i], 1, c->n_layers - 1, 0};
            d = diagnose(m, &f);
            if (!d) continue;
            json_t *nan = json_object_get(d, "nan_origin");
            CHECK(json_is_object(nan) && json_integer_value(json_object_get(nan, "layer")) == c->n_layers - 1 &&
                      !strcmp(str(nan, "step"), ts_step_name(nan_steps[i])),
                  "%s: NaN injected in %s, origin reported: %s", presets[p], ts_step_name(nan_steps[i]),
                  json_dumps(nan, 0));
            json_decref(d);
        }
        ts_model_close(m);
    }
    return th_finish("test_diagnose");
}
