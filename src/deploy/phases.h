/* Deployment phases 1-3 for the cpu target, each closed by its gate from gates.c:
 * 1 every GEMM/GEMV shape of the model, and every step alone, at prefill and decode shapes,
 * 2 one early and one late layer alone (prefill then a decode step),
 * 3 the whole model on built-in token prompts plus greedy lockstep runs. */
#ifndef TS_DEPLOY_PHASES_H
#define TS_DEPLOY_PHASES_H
#include <jansson.h>
#include <stdio.h>

#include "model/model.h"
#include "target/cpu/cpu_target.h"

typedef struct ts_phase_opts {
    FILE *out;   /* human-readable tables, or NULL */
    int threads;   /* cpu target threads; 0 = all cores */
    uint64_t seed; /* 0: the canonical inputs; the evaluator uses others */
    const ts_cpu_fault *fault; /* debug: a fault injected into one cpu step, or NULL */
} ts_phase_opts;

/* Each returns TS_ERR_GATE when its gate fails (*report is still set), other errors as they
 * come; *report: the phaseN.json object, caller decrefs. */
ts_status ts_phase1_run(const ts_model *m, const ts_phase_opts *o, json_t **report, ts_error *err);
ts_status ts_phase2_run(const ts_model *m, const ts_phase_opts *o, json_t **report, ts_error *err);
ts_status ts_phase3_run(const ts_model *m, const ts_phase_opts *o, json_t **report, ts_error *err);

/* Prompt k of the built-in token-id prompt set for a seed (BOS first when the model has one). */
void ts_phase_prompt_tokens(const ts_config *c, uint64_t seed, int k, int32_t *t, int n);

/* One greedy lockstep run of the cpu target against the oracle from prompt (n tokens), up to
 * gen tokens: *same identical tokens, then *violation when the first divergence breaks the
 * phase-3 rule (each argmax in the other's top-k) or the cpu logits are not finite. a, b:
 * scratch logits of V floats. */
ts_status ts_phase_lockstep(ts_ref *r, ts_cpu *cp, int V, const int32_t *prompt, int n, int gen, float *a,
                            float *b, int *same, int *violation, ts_error *err);

#endif
