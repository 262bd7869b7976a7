/* Phase 6: write the deployment's files and prove the directory runs. */
#include "deploy/manifest.h"
#include "deploy/phases.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "deploy/deployment.h"
#include "deploy/gates.h"
#include "deploy/trajectory_svg.h"
#include "io/mmap.h"

#define GEN 16

/* Greedy generation through the deployment's own plan; out: the tokens. */
static ts_status generate(const ts_model *m, const ts_deployment *d, int32_t *out, ts_error *err) {
    const ts_config *c = ts_model_config(m);
    int n0 = c->max_pos < 8 ? c->max_pos : 8, gen = GEN < c->max_pos - n0 ? GEN : c->max_pos - n0;
    int32_t toks[8];
    ts_phase_prompt_tokens(c, 11, 400, toks, n0);
    ts_cpu *cp = NULL;
    ts_cpu_opts co = {.n_threads = d->threads, .force_variant = -1, .disable = d->copy_weights ? TS_OPT_ZERO_COPY : 0};
    float *lg = malloc(sizeof(float) * (size_t)c->n_vocab);
    ts_status s = lg ? TS_OK : ts_fail(err, TS_ERR_NOMEM, "phase 6: out of memory");
    if (!s) s = ts_cpu_new(m, n0 + gen, &co, &cp, err);
    if (!s) s = ts_cpu_tiles_set(cp, d->tiles, d->n_tiles, err);
    if (!s) s = ts_cpu_forward(cp, toks, n0, lg, 0, NULL, err);
    for (int i = 0; i < GEN; i++) out[i] = -1;
    for (int i = 0; i < gen && !s; i++) {
        out[i] = ts_argmax(lg, c->n_vocab);
        if (!isfinite(lg[out[i]])) s = ts_fail(err, TS_ERR_VALUE, "phase 6: non-finite logits at token %d", i);
        else if (i + 1 < gen) s = ts_cpu_forward(cp, &out[i], 1, lg, 0, NULL, err);
    }
    ts_cpu_free(cp);
    free(lg);
    return s;
}

static int report_complete(const char *out_dir, json_t *reports[TS_N_PHASES], char *missing, size_t len) {
    char *p = ts_path_join(out_dir, "report.md");
    char *txt = NULL;
    size_t n = 0;
    ts_error e;
    int ok = p && ts_file_read_all(p, (size_t)1 << 26, &txt, &n, &e) == TS_OK;
    free(p);
    missing[0] = 0;
    if (!ok) {
        snprintf(missing, len, "report.md unreadable");
        return 0;
    }
    const char *need[4] = {"## Gates", reports[4] ? "### Prefill trajectory" : NULL, reports[5] ? "### Decode trajectory" : NULL,
                           reports[4] ? "Where prefill time goes" : NULL};
    for (int i = 0; i < 4; i++)
        if (need[i] && !strstr(txt, need[i])) {
            snprintf(missing, len, "report.md lacks \"%s\"", need[i]);
            ok = 0;
        }
    free(txt);
    return ok;
}

ts_status ts_phase6_run(const ts_model *m, const char *out_dir, json_t *reports[TS_N_PHASES], int threads, int forced,
                        const json_t *diag, FILE *out, ts_error *err) {
    ts_status s = TS_OK;
    json_t *rep = json_object(), *gates = json_array();
    if (out) fprintf(out, "phase 6 (finalize): %s\n", out_dir);
    if (reports[4] || reports[5]) {
        char *svg = ts_path_join(out_dir, "trajectory.svg");
        const char *base = strrchr(m->dir, '/');
        s = svg ? ts_trajectory_svg(reports[4], reports[5], base && base[1] ? base + 1 : m->dir, svg, err)
                : ts_fail(err, TS_ERR_NOMEM, "out of memory");
        if (!s && out) fprintf(out, "  chart: %s\n", svg);
        free(svg);
    }
    json_decref(reports[6]);
    reports[6] = NULL;
    if (!s) s = ts_manifest_write(m, out_dir, reports, threads, forced, diag, err);
    ts_deployment d;
    int32_t a[GEN], b[GEN];
    int runs = 0, same = 0;
    if (!s) s = ts_deployment_load(out_dir, &d, err);
    if (!s && !(s = generate(m, &d, a, err)) && !(s = generate(m, &d, b, err))) {
        runs = 1;
        same = memcmp(a, b, sizeof a) == 0;
    }
    if (s == TS_ERR_VALUE) s = TS_OK; /* non-finite output is a failed gate, not an error */
    if (s) {
        json_decref(rep), json_decref(gates);
        return s;
    }
    if (out) {
        fprintf(out, "  the deployment read back from manifest.json (%d threads, %d tiles, weights %s) generated %d greedy "
                     "tokens twice: %s\n", d.threads, d.n_tiles, d.copy_weights ? "copied" : "from the mmap", GEN,
                runs ? (same ? "identical" : "DIFFERENT") : "FAILED");
    }
    char missing[128];
    int complete = report_complete(out_dir, reports, missing, sizeof missing);
    if (out && !complete) fprintf(out, "  %s\n", missing);
    int pass = 1;
    json_array_append_new(gates, ts_gate_row("phase6", "generation_runs", runs && same, out, &pass));
    json_array_append_new(gates, ts_gate_row("phase6", "report_complete", complete, out, &pass));
    json_object_set_new(rep, "phase", json_integer(6));
    json_object_set_new(rep, "tiles_loaded", json_integer(d.n_tiles));
    json_object_set_new(rep, "gates", gates);
    json_object_set_new(rep, "pass", json_boolean(pass));
    reports[6] = rep;
    if (out) fprintf(out, "phase 6: %s\n", pass ? "PASS" : "FAIL");
    /* Once more, now with phase 6's own gates on record. */
    if ((s = ts_manifest_write(m, out_dir, reports, threads, forced, diag, err))) return s;
    return pass ? TS_OK : ts_fail(err, TS_ERR_GATE, "phase 6 gate failed: %s", complete ? "generation" : missing);
}
