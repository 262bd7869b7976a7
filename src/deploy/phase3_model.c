/* Phase 3: the whole model on token prompts (decisive positions keep the oracle's top-1,
 * others mutual top-5) and greedy lockstep runs against the oracle; the prompts are text when
 * the model has a tokenizer (prompts.h), and the report counts each class. */
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
    ts_prompt_set own;
    const ts_prompt_set *ps;
    ts_prompt_classes cls = {0};
    char name[320];
    ts_status s = ts_phase_prompts(m, o->prompts, &own, &ps, err);
    int violations = 0, decisive = 0, positions = 0, lock_viol = 0;
    if (!s && (!lr || !lc)) s = ts_fail(err, TS_ERR_NOMEM, "phase 3: out of memory");
    if (!s) s = ts_ref_new(m, maxlen, &r, err);
    if (!s) s = ts_ref_set_threads(r, o->threads, err);
    if (!s) s = ts_cpu_new(m, maxlen, &co, &cp, err);
    if (out && !s) {
        fprintf(out, "phase 3 (model): %d %s prompts (all positions) and %d greedy lockstep runs of %d tokens\n",
                P3_PROMPTS, ps->text ? "text" : "random-id", P3_LOCKSTEP, P3_GEN);
        if (!ps->text) fprintf(out, "  random token ids: %s\n", ps->why);
    }
    for (int k = 0; k < P3_PROMPTS && !s; k++) {
        int n = lens[k], dec = 0, viol = 0;
        ts_prompts_get(ps, o->seed, k, toks, n, name, sizeof name);
        ts_ref_reset(r);
        ts_cpu_reset(cp);
        if ((s = ts_ref_forward(r, toks, n, lr, 1, NULL, err)) || (s = ts_cpu_forward(cp, toks, n, lc, 1, NULL, err))) break;
        viol = ts_phase_position_violations(lr, lc, n, V, &dec);
        ts_metrics mt;
        ts_metrics_compute(lc, lr, n, V, &mt);
        violations += viol, decisive += dec, positions += n;
        ts_prompt_classes_prompt(&cls, n, dec);
        if (out)
            fprintf(out, "  prompt %d: %2d tokens (%s), %2d decisive, %2d competitive, violations %d, logits cosine %.7f\n",
                    k, n, name, dec, n - dec, viol, mt.cosine);
        json_array_append_new(prompts, json_pack("{s:i, s:s, s:i, s:i, s:i, s:o}", "tokens", n, "text", name, "decisive",
                                                 dec, "competitive", n - dec, "violations", viol, "cosine",
                                                 ts_json_number(mt.cosine)));
    }
    int32_t lp[P3_LOCKSTEP * P3_LEN];
    char lnames[P3_LOCKSTEP][sizeof name];
    ts_lockstep_run lrun[P3_LOCKSTEP];
    for (int k = 0; k < P3_LOCKSTEP && !s; k++)
        ts_prompts_get(ps, o->seed, 100 + k, lp + k * P3_LEN, P3_LEN, lnames[k], sizeof lnames[k]);
    if (!s) s = ts_phase_lockstep(m, o->threads, cp, P3_LOCKSTEP, lp, P3_LEN, P3_GEN, lrun, err);
    for (int k = 0; k < P3_LOCKSTEP && !s; k++) {
        const ts_lockstep_run *q = &lrun[k];
        lock_viol += q->violation;
        ts_prompt_classes_run(&cls, q->steps, q->decisive, q->diverged);
        if (out)
            fprintf(out, "  lockstep %d (%s): %2d identical greedy tokens%s; the oracle's picks %d decisive, %d competitive\n",
                    k, lnames[k], q->same, q->same < P3_GEN ? (q->violation ? ", diverged outside top-5" : ", then a top-5 divergence") : "",
                    q->decisive, q->steps - q->decisive);
        json_t *row = json_pack("{s:i, s:b, s:s, s:i, s:i}", "identical_tokens", q->same, "violation", q->violation,
                                "text", lnames[k], "decisive_steps", q->decisive, "competitive_steps",
                                q->steps - q->decisive);
        if (q->diverged >= 0) json_object_set_new(row, "diverged_at", json_string(q->diverged ? "decisive" : "competitive"));
        json_array_append_new(runs, row);
    }
    int pass = 1;
    if (!s) {
        char line[320];
        ts_prompt_classes_line(&cls, line, sizeof line);
        if (out) fprintf(out, "  %s\n", line);
        json_array_append_new(gates, ts_gate_row("phase3", "position_violations", violations, out, &pass));
        json_array_append_new(gates, ts_gate_row("phase3", "lockstep_violations", lock_viol, out, &pass));
        s = ts_phase_precision_agreement(m, ps, o, rep, gates, &pass, err);
    }
    ts_ref_free(r);
    ts_cpu_free(cp);
    free(lr), free(lc);
    if (s) {
        ts_prompts_close(&own);
        json_decref(rep), json_decref(prompts), json_decref(runs), json_decref(gates);
        return s;
    }
    json_object_set_new(rep, "prompt_source", ts_prompts_json(ps));
    json_object_set_new(rep, "classes", ts_prompt_classes_json(&cls));
    ts_prompts_close(&own);
    json_object_set_new(rep, "positions", json_integer(positions));
    json_object_set_new(rep, "decisive_positions", json_integer(decisive));
    json_object_set_new(rep, "prompts", prompts);
    json_object_set_new(rep, "lockstep", runs);
    *report = ts_phase_finish(rep, gates, 3, pass, out);
    return pass ? TS_OK : ts_fail(err, TS_ERR_GATE, "phase 3 gate failed (see the table)");
}
