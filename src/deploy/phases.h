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

/* R greedy lockstep runs of the cpu target against the oracle from prompts (R x n tokens), up
 * to gen tokens each: same[k] identical tokens, then violation[k] when the first divergence
 * breaks the phase-3 rule (each argmax in the other's top-k) or the cpu logits are not finite.
 * The oracle's greedy runs go first, all R together (ts_ref_decode_batch: the weights are read
 * once per step for every run, on `threads` threads); the cpu then follows each run. At a
 * divergence the oracle's logits there are recomputed by a prefill of its run so far
 * (bit-identical to its decode), so only its tokens are kept. */
ts_status ts_phase_lockstep(const ts_model *m, int threads, ts_cpu *cp, int R, const int32_t *prompts, int n, int gen,
                            int *same, int *violation, ts_error *err);

#endif
