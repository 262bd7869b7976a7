/* Token sampling and stop conditions for the generation loop: the logits processors of HF
 * `generate` (repetition penalty, temperature, top-k, top-p, min-p, in that order), a seeded
 * per-sampler random stream, and a stop-string filter that holds back text which could still
 * become a stop string. Buffers are sized once at creation: nothing is allocated per token. */
#ifndef TS_RUNTIME_SAMPLE_H
#define TS_RUNTIME_SAMPLE_H
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"

typedef struct ts_sample_opts {
    float temp;           /* <= 0: greedy (argmax after the repetition penalty) */
    int top_k;            /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off */
    float repeat_penalty; /* 1: off; HF semantics over every token of the context */
    uint64_t seed;
} ts_sample_opts;

/* llama.cpp-like defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, no penalty, seed 0. */
void ts_sample_opts_default(ts_sample_opts *o);

typedef struct ts_sampler ts_sampler;

ts_status ts_sampler_new(int n_vocab, const ts_sample_opts *o, ts_sampler **out, ts_error *err);
void ts_sampler_free(ts_sampler *s);
/* Forgets the context (penalty set) and restarts the random stream from the seed. */
void ts_sampler_reset(ts_sampler *s);
/* Records a token as part of the context (prompt or generated) for the repetition penalty. */
void ts_sampler_accept(ts_sampler *s, int32_t id);
/* Picks the next token from n_vocab logits; logits are modified in place (penalized, scaled). */
int32_t ts_sampler_sample(ts_sampler *s, float *logits);
/* The filtered, renormalized distribution of the last non-greedy ts_sampler_sample: *ids and
 * *probs (borrowed, valid until the next call) in descending probability. Returns the count. */
int ts_sampler_candidates(const ts_sampler *s, const int32_t **ids, const float **probs);

/* ---- log-probabilities (OpenAI's logprobs) ---- */
#define TS_LOGPROB_TOP_MAX 20

typedef struct ts_logprob {
    int32_t id;
    float logprob; /* log softmax(logits)[id]; NaN: none (the first token of an echoed prompt) */
    int n_top;
    int32_t top_id[TS_LOGPROB_TOP_MAX]; /* the n_top most likely tokens, descending (ties: lower id first) */
    float top_lp[TS_LOGPROB_TOP_MAX];
} ts_logprob;

/* The log-softmax of logits[0..n) at id, and the k (<= TS_LOGPROB_TOP_MAX) most likely tokens
 * in out. Reads logits only (NaN counts as -inf, and -inf tokens are never among the top);
 * the exponentials are summed in double. */
void ts_logprobs(const float *logits, int n, int32_t id, int k, ts_logprob *out);

/* ---- stop strings on decoded text ---- */
typedef struct ts_stopper ts_stopper;
/* Called with text that is certain not to be part of a stop string. */
typedef void (*ts_text_fn)(void *user, const char *text, size_t len);

/* stops: n UTF-8 strings (copied; empty ones are ignored). */
ts_status ts_stopper_new(const char *const *stops, int n, ts_text_fn emit, void *user,
                         ts_stopper **out, ts_error *err);
void ts_stopper_free(ts_stopper *s);
void ts_stopper_reset(ts_stopper *s);
/* Adds a piece of text; emits what is safe. Returns 1 once a stop string has appeared (the
 * text before it is emitted, the stop string and anything after it are not), else 0. */
int ts_stopper_feed(ts_stopper *s, const char *text, size_t len);
/* End of generation without a stop: emits the held-back text. */
void ts_stopper_flush(ts_stopper *s);

#endif
