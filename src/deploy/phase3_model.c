/* Phase 3: the whole model on token prompts (decisive positions keep the oracle's top-1,
 * others mutual top-5) and greedy lockstep runs against the oracle. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "deploy/gates.h"
#include "deploy/phases.h"

#define P3_PROMPTS TS_PHASE_PROMPTS
#define P3_LOCKSTEP TS_LOCKSTEP_RUNS
#define P3_GEN TS_LOCKSTEP_GEN
#define P3_LEN TS_LOCKSTEP_PROMPT

ts_status ts_phase3_run(const ts_model *m, const ts_phase_opts *o, json_t **report, ts_error *err) {
    const int *lens = ts_phase_prompt_lens;
    const ts_config *c = ts_model_config(m);
    FILE *out = o->out;
    int V = c->n_vocab, maxlen = TS_PHASE_PROMPT_MAX + P3_GEN;
    ts_ref *r = NULL;
    ts_cpu *cp = NULL;
    ts_cpu_opts co = {.n_threads = o->threads, .force_variant = -1, .fault = o->fault};
    float *lr = malloc(sizeof(float) * TS_PHASE_PROMPT_MAX * (size_t)V);
    float *lc = malloc(sizeof(float) * TS_PHASE_PROMPT_MAX * (size_t)V);
    int32_t toks[TS_PHASE_PROMPT_MAX];
    json_t *rep = json_object(), *prompts = json_array(), *runs = json_array(), *gates = json_array();
    ts_status s = TS_OK;
    int violations = 0, decisive = 0, positions = 0, lock_viol = 0;
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
        viol = ts_phase_position_violations(lr, lc, n, V, &dec);
        ts_metrics mt;
        ts_metrics_compute(lc, lr, n, V, &mt);
        violations += viol, decisive += dec, positions += n;
        if (out)
            fprintf(out, "  prompt %d: %2d tokens, %2d decisive, violations %d, logits cosine %.7f\n", k, n, dec, viol,
                    mt.cosine);
        json_array_append_new(prompts, json_pack("{s:i, s:i, s:i, s:o}", "tokens", n, "decisive", dec,
                                                 "violations", viol, "cosine", ts_json_number(mt.cosine)));
    }
    int32_t lp[P3_LOCKSTEP * P3_LEN];
    int same[P3_LOCKSTEP], lv[P3_LOCKSTEP];
    for (int k = 0; k < P3_LOCKSTEP; k++) ts_phase_prompt_tokens(c, o->seed, 100 + k, lp + k * P3_LEN, P3_LEN);
    if (!s) s = ts_phase_lockstep(m, o->threads, cp, P3_LOCKSTEP, lp, P3_LEN, P3_GEN, same, lv, err);
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
    *report = ts_phase_finish(rep, gates, 3, pass, out);
    return pass ? TS_OK : ts_fail(err, TS_ERR_GATE, "phase 3 gate failed (see the table)");
}
