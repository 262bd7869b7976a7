/* The eight phases of a deployment, one source file each (phase0_oracle.c ... phase7_evaluate.c),
 * each closed by its gate from gates.h, and what they share: seeded inputs, the greedy
 * lockstep against the oracle, and the optimization trajectory of phases 4-5. The driver that
 * runs them in order is deploy.h. */
#ifndef TS_DEPLOY_PHASES_H
#define TS_DEPLOY_PHASES_H
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "deploy/measure.h"
#include "deploy/phase0.h"
#include "deploy/prompts.h"
#include "model/model.h"
#include "target/cpu/cpu_target.h"

#define TS_N_PHASES 8

/* ---- phases 1-3: kernels, blocks, model ---- */
typedef struct ts_phase_opts {
    FILE *out;                 /* human-readable tables, or NULL */
    int threads;               /* the resolved thread count (never 0) */
    uint64_t seed;             /* 0: the canonical inputs; the evaluator uses others */
    const ts_cpu_fault *fault; /* debug: a fault injected into one cpu step, or NULL */
    const int *prefill_sizes;  /* phase 1: the prompt lengths the deployment measures (phase 4's
                                * trajectory and TTFT sizes); none: phase 4's defaults */
    int n_prefill_sizes;       /* at most TS_PERF_MAX_SIZES + 1 are used */
    const ts_prompt_set *prompts; /* phase 3's prompts; NULL: the phase opens the model's own */
} ts_phase_opts;

/* Each returns TS_ERR_GATE when its gate fails (*report is still set), other errors as they
 * come; *report: the phaseN.json object, caller decrefs.
 * 1: every GEMM over all its columns at the row counts of every measured prefill (layers 0 and
 *    last) and at decode (every layer), and every step alone in layers 0 and last through each
 *    prefill and a decode row;
 * 2: one early and one late layer alone (prefill then a decode step);
 * 3: the whole model on token prompts plus greedy lockstep runs. */
ts_status ts_phase1_run(const ts_model *m, const ts_phase_opts *o, json_t **report, ts_error *err);
ts_status ts_phase2_run(const ts_model *m, const ts_phase_opts *o, json_t **report, ts_error *err);
ts_status ts_phase3_run(const ts_model *m, const ts_phase_opts *o, json_t **report, ts_error *err);
/* For a model quantized at load (m->quantized >= 0): the oracle on it against the oracle on the
 * weights as stored, on phase 3's prompts; appends the quant_* gate rows and rep.quantization.
 * For an F16 KV cache (m->kv_type): the oracle with it against the oracle with an FP32 cache;
 * the kv_f16_* rows and rep.kv_cache_agreement. Does nothing for other models. */
ts_status ts_phase_precision_agreement(const ts_model *m, const ts_prompt_set *ps, const ts_phase_opts *o,
                                       json_t *rep, json_t *gates, int *pass, ts_error *err);

/* ---- phases 4-5: the optimization trajectory ----
 * Each times the cpu plan with its optimizations switched on one after another (the unfused,
 * copying baseline first, autotuned tiles last), cold and warm, then the final plan at the
 * requested sizes, with the time per dispatch. Phase 4 is prefill (TTFT), autotunes the tiles
 * and picks the weight placement (placement.h), and holds the final plan to the oracle on the
 * phase-3 prompts; phase 5 is decode (tok/s, GB/s) with the tiles and placement phase 4 chose,
 * and the final plan's greedy lockstep runs against the oracle. Both gate that every timed row
 * is usable data (ts_measurement_valid). */
#define TS_PERF_MAX_SIZES 8

typedef struct ts_perf_opts {
    FILE *out;
    int threads;                  /* the resolved thread count (never 0) */
    int trials;                   /* warm trials per measurement, >= 5 */
    int prefill;                  /* prompt length of the prefill trajectory */
    int sizes[TS_PERF_MAX_SIZES]; /* phase 4: TTFT prompt lengths; phase 5: decode contexts */
    int n_sizes;
    int decode_tokens;            /* tokens per decode trial */
    int weights;                  /* phase 4's placement: -1 probe, 0 mmap, 1 copy (--weights) */
    const ts_cpu_fault *fault;
    const ts_prompt_set *prompts; /* the oracle checks' prompts; NULL: the phase opens the model's own */
    int debug_slow_plan;          /* tests: 0 none, k: phase 5 candidate plan k - 1 slowed down (plan_choice.h) */
} ts_perf_opts;

/* Defaults: 5 trials, trajectory at 128 tokens, TTFT at 128 and 512, decode contexts 128 and
 * 1024 with 8 tokens per trial (phase 5 replaces sizes). */
void ts_perf_defaults(ts_perf_opts *o, int phase);

ts_status ts_phase4_run(const ts_model *m, const ts_perf_opts *o, json_t **report, ts_error *err);
/* phase4: its report (for the tiles and placement), or NULL to run with default tiles. */
ts_status ts_phase5_run(const ts_model *m, const ts_perf_opts *o, const json_t *phase4, json_t **report,
                        ts_error *err);

/* The trajectory of phase 4 (prefill of `size` tokens) or 5 (decode after a `size`-token
 * context): one row per plan into rows; the final row uses tiles and the placement (copy).
 * *last: the final row's measurement (caller frees), *base/final_profile its first and last
 * rows' profiles (caller decrefs); *invalid is increased by the rows that fail
 * ts_measurement_valid (each row says "valid"). */
ts_status ts_perf_trajectory(const ts_model *m, const ts_perf_opts *o, int phase, const json_t *tiles, int copy,
                             int size, json_t *rows, json_t **base_profile, json_t **final_profile,
                             ts_measurement *last, int *invalid, ts_error *err);

/* ---- phase 6: finalize ----
 * trajectory.svg, manifest.json and report.md, then the deployment is read back exactly as
 * `tessera run DEPLOY_DIR` reads it and generates: the gate is that generation runs, twice
 * identically, and the report is complete. threads: the resolved count. */
ts_status ts_phase6_run(const ts_model *m, const char *out_dir, json_t *reports[TS_N_PHASES], int threads, int forced,
                        const json_t *diag, FILE *out, ts_error *err);

/* ---- phase 7: the independent evaluator (`tessera eval DEPLOY_DIR`) ----
 * Trusts only manifest.json and the model files: re-hashes the weights, audits the thresholds
 * against the built-in table, re-derives the gates of phases 1-3 on other inputs, checks that
 * greedy output is byte-identical across two runs, re-measures the performance claims, and
 * writes evaluation.md and phase7.json with a verdict. The recorded gates of phases 0-6 are
 * checked against their numbers and phase reports; a claim the re-measurement cannot
 * reproduce (the rule in eval_internal.h) fails; with a baseline, gates and claims are
 * compared with that earlier deployment of the same model. */
typedef enum ts_verdict { TS_VERDICT_PASS = 0, TS_VERDICT_WARN = 1, TS_VERDICT_FAIL = 2 } ts_verdict;

typedef struct ts_eval_opts {
    FILE *out;
    int threads;   /* the resolved thread count (never 0) */
    uint64_t seed; /* inputs for the re-derived gates; never 0 (0 is deploy's canonical set) */
    const char *baseline; /* an earlier deployment of the same model to compare with, or NULL */
} ts_eval_opts;

/* Returns TS_OK with *verdict set whenever the evaluation itself could run (a FAIL verdict is
 * a result, not an error); other statuses when it could not (unreadable manifest, ...). */
ts_status ts_evaluate(const char *deploy_dir, const ts_eval_opts *o, ts_verdict *verdict, ts_error *err);

/* ---- shared by the phases ---- */
/* The phase-3 test set, which phases 4-5 hold their final plans to as well: prompts (text
 * through the model's tokenizer, else random ids: prompts.h) of these lengths, every position compared (ts_phase_position_violations), and greedy lockstep
 * runs of TS_LOCKSTEP_GEN tokens from TS_LOCKSTEP_PROMPT-token prompts (ts_phase_lockstep). */
#define TS_PHASE_PROMPTS 6
#define TS_PHASE_PROMPT_MAX 64
extern const int ts_phase_prompt_lens[TS_PHASE_PROMPTS];
#define TS_LOCKSTEP_RUNS 8
#define TS_LOCKSTEP_PROMPT 8
#define TS_LOCKSTEP_GEN 32

/* Prompt k of the built-in token-id prompt set for a seed (BOS first when the model has one):
 * the random ids of models without a tokenizer (prompts.h), and the timing inputs. */
void ts_phase_prompt_tokens(const ts_config *c, uint64_t seed, int k, int32_t *t, int n);
/* The model's tokenizer, the one place the phases get it from (caller frees *out with
 * ts_tok_free): TS_OK with *out = NULL when the model has none; an error when it has one that
 * does not load. */
ts_status ts_phase_model_tokenizer(const ts_model *m, ts_tok **out, ts_error *err);
/* The prompt set of opts (borrowed into *use), or the model's own opened into *own. */
ts_status ts_phase_prompts(const ts_model *m, const ts_prompt_set *given, ts_prompt_set *own,
                           const ts_prompt_set **use, ts_error *err);
/* Uniform in [-1, 1) from a xorshift state (phase 1's random activations). */
float ts_phase_frand(uint64_t *s);
/* Sets phase, gates and pass on a report, prints the verdict line; returns rep. */
json_t *ts_phase_finish(json_t *rep, json_t *gates, int phase, int pass, FILE *out);

/* The phase-3 rule at n positions of logits (n, V), oracle lr against cpu lc: a decisive
 * position (oracle top-1 probability > decisive_prob) keeps the oracle's top-1, any other has
 * each side's top-1 in the other's top-k, and no cpu logit is NaN/Inf. Returns the positions
 * that break it; *decisive (may be NULL): the decisive positions. */
int ts_phase_position_violations(const float *lr, const float *lc, int n, int V, int *decisive);

/* One greedy lockstep run (ts_phase_lockstep). */
typedef struct ts_lockstep_run {
    int same;      /* identical greedy tokens */
    int violation; /* the first divergence broke the phase-3 rule, or the cpu logits were not finite */
    int steps;     /* the oracle's greedy picks (gen) */
    int decisive;  /* of those, made where its top-1 probability > decisive_prob */
    int diverged;  /* -1: no divergence; else 1 (decisive) or 0 (competitive): the oracle's position there */
} ts_lockstep_run;

/* R greedy lockstep runs of the cpu target against the oracle from prompts (R x n tokens), up
 * to gen tokens each: identical tokens, then a violation when the first divergence breaks the
 * phase-3 rule (each argmax in the other's top-k) or the cpu logits are not finite. The
 * oracle's greedy runs go first, all R together (ts_ref_decode_batch: the weights are read
 * once per step for every run, on `threads` threads); the cpu then follows each run. At a
 * divergence the oracle's logits there are recomputed by a prefill of its run so far
 * (bit-identical to its decode), so only its tokens are kept. */
ts_status ts_phase_lockstep(const ts_model *m, int threads, ts_cpu *cp, int R, const int32_t *prompts, int n, int gen,
                            ts_lockstep_run *runs, ts_error *err);

#endif
