/* Phase 4, prefill: tiles autotuned per GEMM shape, the weight placement probed, the
 * optimization trajectory, TTFT of the final plan at each size, and the gates: the final plan
 * keeps the oracle's answers on the phase-3 prompts, and every timed row is usable data. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "deploy/gates.h"
#include "deploy/phases.h"
#include "deploy/placement.h"
#include "deploy/tiles.h"

ts_status ts_phase4_run(const ts_model *m, const ts_perf_opts *o, json_t **report, ts_error *err) {
    const ts_config *c = ts_model_config(m);
    FILE *out = o->out;
    int P = o->prefill < c->max_pos ? o->prefill : c->max_pos;
    json_t *rep = json_object(), *rows = json_array(), *ttft = json_array(), *gates = json_array();
    json_t *tiles = NULL, *base_prof = NULL, *final_prof = NULL;
    ts_measurement fin = {0};
    ts_status s = TS_OK;
    *report = NULL;
    /* Autotune in a session of its own, so the trajectory's tuned row loads tiles exactly as
     * `tessera run DEPLOY_DIR` does from the manifest. */
    ts_cpu *cp = NULL;
    ts_cpu_opts co = {.n_threads = o->threads, .force_variant = -1, .fault = o->fault};
    double a = ts_now_s() * 1e3;
    if (out) fprintf(out, "phase 4 (prefill): autotuning GEMM tiles at S=%d and decode\n", P);
    if (!(s = ts_cpu_new(m, P, &co, &cp, err)) && !(s = ts_cpu_autotune(cp, P, ts_threshold_find("phase1", "rel_l2")->value, out, err))) tiles = ts_tiles_json(cp);
    ts_cpu_free(cp);
    double tune_ms = ts_now_s() * 1e3 - a;
    /* The weight placement of the final plan: everything after this measures that plan. */
    json_t *placement = NULL;
    int copy = 0;
    if (!s && o->weights < 0) s = ts_placement_probe(m, o->threads, o->fault, tiles, out, &placement, &copy, err);
    else if (!s) {
        copy = o->weights && ts_placement_copy_fits(m);
        const char *why = copy == o->weights ? "chosen with --weights" : "--weights copy, but a copy exceeds 70% of RAM";
        placement = json_pack("{s:s, s:s}", "weights", copy ? "copy" : "mmap", "why", why);
        if (out) fprintf(out, "  weight placement: %s (%s)\n", copy ? "copy" : "mmap", why);
    }
    if (!s) ts_placement_note_copies(m, placement, out);
    unsigned place = ts_placement_mask(copy);
    co.disable = place;
    if (!s && out)
        fprintf(out, "phase 4: optimization trajectory, prefill of %d tokens, %d warm trials each\n", P, o->trials);
    int invalid = 0; /* timed rows whose numbers cannot be data (ts_measurement_valid) */
    if (!s) s = ts_perf_trajectory(m, o, 4, tiles, copy, P, rows, &base_prof, &final_prof, &fin, &invalid, err);
    /* TTFT of the final plan at each size: a new session each time (cold), then warm trials. */
    for (int i = 0; i < o->n_sizes && !s; i++) {
        int S = o->sizes[i];
        if (S > c->max_pos) {
            if (out) fprintf(out, "  TTFT at %d tokens skipped: beyond max_position_embeddings %d\n", S, c->max_pos);
            continue;
        }
        ts_measurement r = fin; /* at the trajectory's size the final row is this measurement: not run twice */
        ts_measure_opts mo = {.threads = o->threads, .trials = o->trials, .disable = place, .tiles = tiles,
                              .fault = o->fault};
        if (S != P && (s = ts_measure_prefill(m, &mo, S, &r, err))) break;
        if (out)
            fprintf(out, "  TTFT %5d tokens: cold %9.1f ms, warm %9.2f ms +- %.2f (%.2f tok/s)\n", S, r.cold_ms, r.mean_ms,
                    r.sd_ms, r.rate);
        int valid = ts_measurement_valid(&r, o->trials);
        invalid += !valid;
        json_t *row = ts_measurement_json(&r, "prefill_tok_s");
        json_object_set_new(row, "tokens", json_integer(S));
        json_object_set_new(row, "valid", json_boolean(valid));
        json_array_append_new(ttft, row);
        if (r.samples != fin.samples) ts_measurement_free(&r);
    }
    /* Gate: the final plan (tuned tiles, chosen placement) keeps the oracle's answers on the
     * phase-3 prompts under the phase-3 rules. The last DEC tokens of each prompt go through
     * one-row decode steps: tiles change only one-row GEMMs (for S >= 2 the panel kernel has no
     * tile choice), so prefills alone would leave them untested. */
    enum { DEC = 4 };
    int violations = 0, positions = 0;
    double t_gate = ts_now_s();
    json_t *oprompts = json_array(), *source = NULL;
    ts_prompt_classes cls = {0};
    if (!s) {
        ts_prompt_set own;
        const ts_prompt_set *ps;
        char name[320];
        ts_ref *r = NULL;
        ts_cpu *fp = NULL;
        int V = c->n_vocab;
        float *la = malloc(sizeof(float) * TS_PHASE_PROMPT_MAX * (size_t)V);
        float *lb = malloc(sizeof(float) * TS_PHASE_PROMPT_MAX * (size_t)V);
        int32_t toks[TS_PHASE_PROMPT_MAX];
        s = ts_phase_prompts(m, o->prompts, &own, &ps, err);
        if (!s && (!la || !lb)) s = ts_fail(err, TS_ERR_NOMEM, "phase 4: out of memory");
        if (!s) s = ts_ref_new(m, TS_PHASE_PROMPT_MAX, &r, err);
        if (!s) s = ts_ref_set_threads(r, o->threads, err);
        if (!s) s = ts_cpu_new(m, TS_PHASE_PROMPT_MAX, &co, &fp, err);
        if (!s) s = ts_tiles_apply(fp, tiles, err);
        if (!s && out)
            fprintf(out, "  final plan against the oracle on the phase-3 prompts (%s; the last %d tokens of each as "
                         "decode steps):\n", ps->text ? "text" : "random ids", DEC);
        for (int k = 0; k < TS_PHASE_PROMPTS && !s; k++) {
            int n = ts_phase_prompt_lens[k] < c->max_pos ? ts_phase_prompt_lens[k] : c->max_pos;
            int pre = n > DEC ? n - DEC : 1, dec = 0;
            ts_prompts_get(ps, 0, k, toks, n, name, sizeof name);
            ts_ref_reset(r), ts_cpu_reset(fp);
            if ((s = ts_ref_forward(r, toks, n, la, 1, NULL, err)) || (s = ts_cpu_forward(fp, toks, pre, lb, 1, NULL, err)))
                break;
            for (int p = pre; p < n && !s; p++) s = ts_cpu_forward(fp, &toks[p], 1, lb + (size_t)p * V, 0, NULL, err);
            if (s) break;
            int viol = ts_phase_position_violations(la, lb, n, V, &dec);
            violations += viol, positions += n;
            ts_prompt_classes_prompt(&cls, n, dec);
            if (out)
                fprintf(out, "    prompt %d: %2d tokens (%s), %2d decisive, %2d competitive, violations %d\n", k, n, name,
                        dec, n - dec, viol);
            json_array_append_new(oprompts, json_pack("{s:i, s:s, s:i, s:i, s:i}", "tokens", n, "text", name, "decisive",
                                                      dec, "competitive", n - dec, "violations", viol));
        }
        if (!s) source = ts_prompts_json(ps);
        ts_prompts_close(&own);
        ts_ref_free(r);
        ts_cpu_free(fp);
        free(la), free(lb);
    }
    t_gate = ts_now_s() - t_gate;
    int pass = 1;
    if (!s) {
        if (out) {
            char line[320];
            ts_prompt_classes_line(&cls, line, sizeof line);
            fprintf(out, "  oracle check %s\n", line);
            fprintf(out, "  where prefill time goes, final plan (per %d-token forward):\n", P);
            ts_measure_print_profile(out, final_prof);
            fprintf(out, "  gate: the final plan against the oracle (%d positions, %.1f s); timed rows (%d trials "
                         "each) with a finite positive sample per trial:\n", positions, t_gate, o->trials);
        }
        json_array_append_new(gates, ts_gate_row("phase4", "position_violations", violations, out, &pass));
        json_array_append_new(gates, ts_gate_row("phase4", "invalid_measurements", invalid, out, &pass));
    }
    ts_measurement_free(&fin);
    if (s) {
        json_decref(rep), json_decref(rows), json_decref(ttft), json_decref(gates), json_decref(tiles);
        json_decref(base_prof), json_decref(final_prof), json_decref(placement), json_decref(oprompts), json_decref(source);
        return s;
    }
    json_object_set_new(rep, "prefill_tokens", json_integer(P));
    json_object_set_new(rep, "trials", json_integer(o->trials));
    json_object_set_new(rep, "threads", json_integer(o->threads));
    json_object_set_new(rep, "autotune_ms", json_real(tune_ms));
    json_object_set_new(rep, "oracle_check_s", json_real(t_gate));
    json_object_set_new(rep, "oracle_positions", json_integer(positions));
    json_object_set_new(rep, "prompt_source", source);
    json_object_set_new(rep, "oracle_prompts", oprompts);
    json_object_set_new(rep, "classes", ts_prompt_classes_json(&cls));
    json_object_set_new(rep, "tiles", tiles);
    json_object_set_new(rep, "placement", placement);
    json_object_set_new(rep, "trajectory", rows);
    json_object_set_new(rep, "ttft", ttft);
    json_object_set_new(rep, "profile_baseline", base_prof);
    json_object_set_new(rep, "profile_final", final_prof);
    *report = ts_phase_finish(rep, gates, 4, pass, out);
    return pass ? TS_OK : ts_fail(err, TS_ERR_GATE, "phase 4 gate failed (see the table)");
}
