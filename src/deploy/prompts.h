/* The test prompts of phases 3-5 and the evaluator. On a model with a tokenizer they are real
 * text (prompts.c: a fixed table of prose, code, dialogue, numbers and a dozen languages), so
 * the oracle's decisive / competitive positions are those of ordinary input on a trained
 * model; without one, seeded random token ids. Where the tokenizer comes from is
 * ts_phase_model_tokenizer (phases.h). */
#ifndef TS_DEPLOY_PROMPTS_H
#define TS_DEPLOY_PROMPTS_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "tok/tokenizer.h"

#define TS_PROMPT_TEXTS 22

typedef struct ts_prompt_set {
    int text;                   /* 1: the built-in texts through the model's tokenizer; 0: random ids */
    char why[480];              /* random ids: why (no tokenizer, ids beyond the vocabulary, ...) */
    const ts_config *c;         /* borrowed */
    ts_tok *tok;                /* text only */
    int32_t *ids[TS_PROMPT_TEXTS]; /* each text as the tokenizer encodes it (BOS first when it adds one) */
    int n_ids[TS_PROMPT_TEXTS];
    char fingerprint[17];       /* FNV-1a over every text's ids: the evaluator re-tokenizes and compares */
} ts_prompt_set;

/* Text when the model has a tokenizer whose vocabulary fits the model's and which encodes every
 * text inside it, else random ids with the reason in p->why (never an error for that: only
 * out of memory is). force_random: random ids whatever the model has, for this reason (the
 * evaluator following a deployment that ran on random ids). */
ts_status ts_prompts_open(const ts_model *m, const char *force_random, ts_prompt_set *p, ts_error *err);
void ts_prompts_close(ts_prompt_set *p);
/* Text i of the table (0 <= i < TS_PROMPT_TEXTS) and its name, for tests and tools. */
const char *ts_prompt_text(int i, const char **name);

/* Prompt k of n tokens: phase 3's prompts are k 0-5, its lockstep prompts 100-107, phase 5's
 * 300-307, each group on texts of its own; seed 0 is deploy's set, the evaluator's seed rotates
 * the texts (random ids: ts_phase_prompt_tokens(c, seed, k)). The prompt is the text's first
 * n tokens; a text shorter than n is joined with the next ones and encoded again. name (len
 * bytes): the text(s), "random ids", or why this prompt fell back to random ids. */
void ts_prompts_get(const ts_prompt_set *p, uint64_t seed, int k, int32_t *t, int n, char *name, size_t len);

/* The report's "prompt_source": {"kind": "text", "vocab", "bos" (the id prepended, or null),
 * "texts", "fingerprint"} or {"kind": "random ids", "why"}. */
json_t *ts_prompts_json(const ts_prompt_set *p);

/* How many positions, prompts, greedy steps and lockstep runs fell in each class of the
 * phase-3 rule: decisive (the oracle's top-1 probability > decisive_prob) or competitive. A
 * prompt or run counts in the class of most of its positions (a tie: competitive). */
typedef struct ts_prompt_classes {
    int positions[2], prompts[2];  /* [0] competitive, [1] decisive */
    int steps[2], runs[2];         /* lockstep: the oracle's greedy picks, and runs */
    int divergences[2];            /* lockstep: the class of the position where a run diverged */
    int has_positions, has_lockstep;
} ts_prompt_classes;

void ts_prompt_classes_prompt(ts_prompt_classes *c, int n, int decisive);
/* diverged: -1 none, else the class (0/1) of the position where the run diverged. */
void ts_prompt_classes_run(ts_prompt_classes *c, int steps, int decisive, int diverged);
/* {"decisive_prob", "positions": {"decisive", "competitive"}, "prompts": {...}, "lockstep_steps",
 * "lockstep_runs", "lockstep_divergences"}: the parts the phase measured. */
json_t *ts_prompt_classes_json(const ts_prompt_classes *c);
/* One line for the text report, e.g. "positions 120 decisive / 72 competitive, prompts 4 / 2". */
void ts_prompt_classes_line(const ts_prompt_classes *c, char *buf, size_t len);

#endif
