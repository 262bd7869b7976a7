/* Phase 5, decode: the optimization trajectory, tok/s and GB/s of the final plan at each
 * context against this machine's read peak, and the final plan's greedy lockstep against the
 * oracle. */
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "deploy/gates.h"
#include "deploy/phases.h"
#include "deploy/placement.h"
#include "deploy/plan_choice.h"
#include "deploy/tiles.h"

/* Greedy lockstep of the final plan against the oracle: the phase-3 rule at the first
 * divergence, as many runs and tokens as phase 3 (fewer tokens when max_position_embeddings
 * leaves no room), on prompts of their own (text when the model has a tokenizer). */
static ts_status lockstep(const ts_model *m, const ts_perf_opts *o, const json_t *tiles, int copy, int *violations,
                          int *gen_out, json_t *out_rows, json_t **source, ts_prompt_classes *cls, ts_error *err) {
    enum { R = TS_LOCKSTEP_RUNS };
    const ts_config *c = ts_model_config(m);
    ts_cpu *cp = NULL;
    ts_cpu_opts co = {.n_threads = o->threads, .force_variant = -1, .disable = ts_placement_mask(copy), .fault = o->fault};
    int32_t toks[R * TS_LOCKSTEP_PROMPT];
    char names[R][320];
    ts_lockstep_run runs[R];
    int n0 = c->max_pos - 1 < TS_LOCKSTEP_PROMPT ? c->max_pos - 1 : TS_LOCKSTEP_PROMPT, gen = TS_LOCKSTEP_GEN;
    if (n0 < 1) n0 = 1;
    if (gen > c->max_pos - n0) gen = c->max_pos - n0;
    *gen_out = gen;
    *violations = 0;
    ts_prompt_set own;
    const ts_prompt_set *ps;
    ts_status s = ts_phase_prompts(m, o->prompts, &own, &ps, err);
    if (!s) *source = ts_prompts_json(ps);
    if (!s && o->out && !ps->text) fprintf(o->out, "  lockstep prompts: random token ids: %s\n", ps->why);
    for (int k = 0; k < R && !s; k++) ts_prompts_get(ps, 0, 300 + k, toks + k * n0, n0, names[k], sizeof names[k]);
    ts_prompts_close(&own);
    if (s || gen < 1) return s; /* a one-position model has nothing to generate */
    s = ts_cpu_new(m, n0 + gen + 1, &co, &cp, err);
    if (!s && tiles) s = ts_tiles_apply(cp, tiles, err);
    if (!s) s = ts_phase_lockstep(m, o->threads, cp, R, toks, n0, gen, runs, err);
    for (int k = 0; k < R && !s; k++) {
        const ts_lockstep_run *q = &runs[k];
        *violations += q->violation;
        ts_prompt_classes_run(cls, q->steps, q->decisive, q->diverged);
        if (o->out)
            fprintf(o->out, "  lockstep %d (final plan vs oracle, %s): %2d of %d greedy tokens identical%s; the oracle's "
                            "picks %d decisive, %d competitive\n", k, names[k], q->same, gen,
                    q->same < gen ? (q->violation ? ", diverged outside top-5" : ", then a top-5 divergence") : "",
                    q->decisive, q->steps - q->decisive);
        json_t *row = json_pack("{s:i, s:i, s:b, s:s, s:i, s:i}", "identical_tokens", q->same, "tokens", gen, "violation",
                                q->violation, "text", names[k], "decisive_steps", q->decisive, "competitive_steps",
                                q->steps - q->decisive);
        if (q->diverged >= 0) json_object_set_new(row, "diverged_at", json_string(q->diverged ? "decisive" : "competitive"));
        json_array_append_new(out_rows, row);
    }
    ts_cpu_free(cp);
    return s;
}

ts_status ts_phase5_run(const ts_model *m, const ts_perf_opts *o, const json_t *phase4, json_t **report,
                        ts_error *err) {
    const ts_config *c = ts_model_config(m);
    FILE *out = o->out;
    const json_t *tiles = phase4 ? json_object_get(phase4, "tiles") : NULL;
    int D = o->decode_tokens, C0 = 128;
    if (C0 + D > c->max_pos) C0 = c->max_pos - D > 1 ? c->max_pos - D : 1;
    json_t *rep = json_object(), *rows = json_array(), *ctxs = json_array(), *gates = json_array(), *lock = json_array();
    json_t *base_prof = NULL, *final_prof = NULL;
    ts_measurement fin = {0};
    *report = NULL;
    ts_status s = TS_OK;
    int copy = 0; /* phase 4's weight placement */
    if (out)
        fprintf(out, "phase 5 (decode): optimization trajectory, %d greedy tokens after %d, %d warm trials each%s\n", D, C0,
                o->trials, tiles ? "" : " (no phase-4 report: default tiles)");
    if (phase4) s = ts_placement_parse(json_object_get(json_object_get(phase4, "placement"), "weights"),
                                       "phase4.json: placement.weights", &copy, err);
    if (!s && copy && !ts_placement_copy_fits(m)) { /* phase 4 ran with more memory free */
        copy = 0;
        if (out) fprintf(out, "  phase 4 chose copied weights, but a copy no longer fits in 70%% of RAM: the mmap\n");
    }
    /* The final plan by measurement: phase 4's unless another complete plan is faster beyond the
     * noise band; everything below (trajectory's last row, contexts, lockstep) runs the pick. */
    json_t *choice = NULL;
    int tuned = 0, forced = 0;
    if (phase4) {
        const char *why = json_string_value(json_object_get(json_object_get(phase4, "placement"), "why"));
        forced = why && strstr(why, "--weights") != NULL;
    }
    if (!s) s = ts_plan_choose(m, o, tiles, copy, forced, C0, &choice, &copy, &tuned, err);
    if (!s && !tuned) tiles = NULL;
    int invalid = 0; /* timed rows whose numbers cannot be data (ts_measurement_valid) */
    if (!s) s = ts_perf_trajectory(m, o, 5, tiles, copy, C0, rows, &base_prof, &final_prof, &fin, &invalid, err);
    /* Peaks of this machine now, for the bandwidth fraction. */
    ts_peaks pk = {0};
    if (!s) s = ts_measure_peaks(m, o->threads, 2, &pk, err);
    if (!s && out) /* the pages the final plan read its weights from (docs/loading.md) */
        fprintf(out, copy ? "  weights copied at load, %.0f MB of them in transparent huge pages\n"
                          : "  weights read from the mmap, %.0f MB of them mapped in 2 MiB pages\n",
                copy ? fin.anon_huge_mb : fin.file_pmd_mb);
    for (int i = 0; i < o->n_sizes && !s; i++) {
        int C = o->sizes[i];
        if (C + D > c->max_pos) {
            if (out) fprintf(out, "  decode at context %d skipped: beyond max_position_embeddings %d\n", C, c->max_pos);
            continue;
        }
        ts_measurement r = fin; /* the trajectory's final row is this plan at C0: not run twice */
        ts_measure_opts mo = {.threads = o->threads, .trials = o->trials, .disable = ts_placement_mask(copy),
                              .tiles = tiles, .fault = o->fault};
        if (C != C0 && (s = ts_measure_decode(m, &mo, C, D, &r, err))) break;
        double gbs = ts_measure_decode_bytes(m, C + D / 2.0) * r.rate / 1e9;
        if (out)
            fprintf(out, "  decode at context %5d: %8.2f tok/s +- %.2f, %.2f GB/s (%.0f%% of the %.1f GB/s read peak)\n", C,
                    r.rate, r.rate_sd, gbs, 100 * gbs / pk.read_gbs, pk.read_gbs);
        int valid = ts_measurement_valid(&r, o->trials);
        invalid += !valid;
        json_t *row = ts_measurement_json(&r, "decode_tok_s");
        json_object_set_new(row, "context", json_integer(C));
        json_object_set_new(row, "valid", json_boolean(valid));
        json_object_set_new(row, "gb_s", json_real(gbs));
        json_object_set_new(row, "bandwidth_fraction", json_real(gbs / pk.read_gbs));
        json_array_append_new(ctxs, row);
        if (r.samples != fin.samples) ts_measurement_free(&r);
    }
    int viol = 0, gen = 0, pass = 1;
    double t_lock = ts_now_s();
    json_t *source = NULL;
    ts_prompt_classes cls = {0};
    if (!s) s = lockstep(m, o, tiles, copy, &viol, &gen, lock, &source, &cls, err);
    t_lock = ts_now_s() - t_lock;
    if (!s) {
        if (out) {
            char line[320];
            ts_prompt_classes_line(&cls, line, sizeof line);
            fprintf(out, "  lockstep %s\n", line);
            fprintf(out, "  where decode time goes, final plan (per token):\n");
            ts_measure_print_profile(out, final_prof);
            fprintf(out, "  gate: %d greedy lockstep runs of %d tokens against the oracle (%.1f s); timed rows (%d trials "
                         "each) with a finite positive sample per trial:\n", TS_LOCKSTEP_RUNS, gen, t_lock, o->trials);
        }
        json_array_append_new(gates, ts_gate_row("phase5", "lockstep_violations", viol, out, &pass));
        json_array_append_new(gates, ts_gate_row("phase5", "invalid_measurements", invalid, out, &pass));
        json_array_append_new(gates, ts_gate_row("phase5", "plan_deficit", ts_plan_deficit(choice), out, &pass));
    }
    ts_measurement_free(&fin);
    if (s) {
        json_decref(rep), json_decref(rows), json_decref(ctxs), json_decref(gates), json_decref(lock);
        json_decref(base_prof), json_decref(final_prof), json_decref(source), json_decref(choice);
        return s;
    }
    json_object_set_new(rep, "context", json_integer(C0));
    json_object_set_new(rep, "weights", json_string(copy ? "copy" : "mmap"));
    json_object_set_new(rep, "tiles", json_string(tuned ? "tuned" : "default"));
    json_object_set_new(rep, "plan_choice", choice);
    json_object_set_new(rep, "decode_tokens", json_integer(D));
    json_object_set_new(rep, "trials", json_integer(o->trials));
    json_object_set_new(rep, "threads", json_integer(o->threads));
    json_object_set_new(rep, "peak_read_gbs", json_real(pk.read_gbs));
    json_object_set_new(rep, "trajectory", rows);
    json_object_set_new(rep, "contexts", ctxs);
    json_object_set_new(rep, "prompt_source", source);
    json_object_set_new(rep, "lockstep", lock);
    json_object_set_new(rep, "classes", ts_prompt_classes_json(&cls));
    json_object_set_new(rep, "lockstep_s", json_real(t_lock));
    json_object_set_new(rep, "profile_baseline", base_prof);
    json_object_set_new(rep, "profile_final", final_prof);
    *report = ts_phase_finish(rep, gates, 5, pass, out);
    return pass ? TS_OK : ts_fail(err, TS_ERR_GATE, "phase 5 gate failed (see the table)");
}
