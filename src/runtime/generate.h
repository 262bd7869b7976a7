/* The generation loop: prompt ids -> prefill on the cpu target -> sample -> decode step,
 * streaming text through the tokenizer's UTF-8-safe stream decoder and the stop-string
 * filter. All buffers (logits, sampler, stream, stop filter, token list) are allocated once
 * in ts_gen_new; a run allocates nothing per token. */
#ifndef TS_RUNTIME_GENERATE_H
#define TS_RUNTIME_GENERATE_H
#include "model/model.h"
#include "runtime/sample.h"
#include "target/cpu/cpu_target.h"
#include "tok/tokenizer.h"

typedef enum ts_gen_stop {
    TS_GEN_STOP_EOS = 0, /* an end-of-sequence id was sampled (not emitted, not in the cache) */
    TS_GEN_STOP_STRING,  /* a stop string appeared in the text (it is not emitted) */
    TS_GEN_STOP_MAX,     /* max_tokens generated */
    TS_GEN_STOP_CTX,     /* the KV cache is full */
} ts_gen_stop;

const char *ts_gen_stop_name(ts_gen_stop r);

typedef struct ts_gen_opts {
    int max_tokens; /* >= 1 */
    int n_ctx;      /* the KV capacity the cpu session was created with */
    ts_sample_opts sample;
    const char *const *stop; /* n_stop stop strings (copied) */
    int n_stop;
    const int32_t *extra_eos; /* ids that end generation besides config's and tokenizer's eos */
    int n_extra_eos;
    ts_text_fn on_text; /* text pieces as they complete; may be NULL */
    void *user;
    /* Prompt-lookup speculative decoding (ts_gen_draft below): at most this many drafted
     * tokens verified per step (0: off; at most TS_GEN_LOOKUP_MAX), drafted from the longest
     * suffix of lookup_ngram down to lookup_min tokens (0: TS_GEN_LOOKUP_NGRAM, _MIN) that
     * occurred before. */
    int lookup;
    int lookup_ngram;
    int lookup_min;
    /* Log-probabilities (OpenAI's logprobs): when on_token is set, every kept token's
     * log-probability under the model's own distribution (the log-softmax of the raw logits,
     * before the repetition penalty, temperature and filters; rows past the tokenizer excluded),
     * with the top_logprobs (<= TS_LOGPROB_TOP_MAX) most likely tokens, goes to on_token before
     * the token's text goes to on_text. The sampling itself is unchanged. */
    void (*on_token)(void *user, const ts_logprob *lp);
    int top_logprobs;
} ts_gen_opts;

#define TS_GEN_LOOKUP_MAX (TS_CPU_BATCH_MAX - 1)
#define TS_GEN_LOOKUP_NGRAM 3
/* A one-token match drafts often and is rarely right: on this machine a verify row costs about
 * a third of a decode step (docs/serve.md), so the default wants two. */
#define TS_GEN_LOOKUP_MIN 2

typedef struct ts_gen_result {
    int n_prompt;    /* tokens prefilled by this run */
    int n_gen;       /* tokens sampled and kept (the stopping EOS is not counted) */
    double prompt_s; /* prefill wall time */
    double gen_s;    /* wall time from the end of prefill to the end of the run */
    ts_gen_stop stop;
    int n_steps;     /* decode forward passes after the prefill */
    int n_drafted, n_accepted; /* prompt lookup: tokens drafted and verified, and accepted */
} ts_gen_result;

typedef struct ts_gen ts_gen;

/* c, m, t are borrowed and must outlive the generator; t's vocabulary must fit the model's.
 * c may be NULL for a generator driven from outside (ts_gen_begin/next/end below). */
ts_status ts_gen_new(ts_cpu *c, const ts_model *m, const ts_tok *t, const ts_gen_opts *o,
                     ts_gen **out, ts_error *err);
void ts_gen_free(ts_gen *g);
/* Appends prompt[0..n) to the cache (after whatever it holds) and generates. The sampler's
 * penalty context is every token of the cache. A prompt that does not fit the cache is
 * TS_ERR_ARG. */
ts_status ts_gen_run(ts_gen *g, const int32_t *prompt, int n, ts_gen_result *res, ts_error *err);
/* Tokens sampled by the last run (borrowed): the kept ones, then the stopping EOS if any
 * (*n_total counts it). All kept ones but the last are in the KV cache: a caller that goes on
 * (chat) passes the last kept one at the head of its next prompt. */
const int32_t *ts_gen_tokens(const ts_gen *g, int *n_kept, int *n_total);
/* Empties the KV cache and the sampler's context. */
void ts_gen_reset(ts_gen *g);

/* ---- generation driven from outside ----
 * The server runs the model for many generators at once (one batched decode step over all of
 * them), so it cannot call ts_gen_run; it drives the same per-token logic ts_gen_run is made
 * of. ts_gen_begin takes the prompt (the sampler's penalty context; text streams restart), then
 * each ts_gen_next takes the logits of the sequence's last position: it samples, checks EOS,
 * streams the token's text through the stop filter (on_text), then max tokens and the context.
 * *done == 0: *id must be appended to the sequence and its logits passed next; *done == 1: the
 * generation is over for *why, and ts_gen_end flushes the text held back and returns the final
 * reason (a stop string can still complete in the flushed tail). */
void ts_gen_begin(ts_gen *g, const int32_t *prompt, int n);
/* logits (n_vocab, modified); n_past: positions the sequence's cache holds now. */
ts_status ts_gen_next(ts_gen *g, float *logits, int n_past, int32_t *id, int *done, ts_gen_stop *why,
                      ts_error *err);
ts_gen_stop ts_gen_end(ts_gen *g, ts_gen_stop why);

/* ---- prompt-lookup speculative decoding ----
 * Draft tokens come from the text itself: the longest suffix (ngram_max down to ngram_min
 * tokens) of ctx[0..n) that also occurs earlier in ctx; the tokens that followed its latest
 * earlier occurrence (up to max_draft) go into out. Returns how many (0: no match). */
int ts_lookup_draft(const int32_t *ctx, int n, int ngram_min, int ngram_max, int max_draft, int32_t *out);
/* The draft after the generator's context (the prompt given to ts_gen_begin, then every token
 * sampled; the last one is the token about to be appended), at most min(max_draft, the
 * current draft length, the tokens max_tokens still allows after the next one). The draft
 * length starts at the options' lookup, becomes what the last verify accepted
 * (at least 1) after a rejection and doubles (up to lookup) after a draft accepted whole. 0
 * when lookup is off. */
int ts_gen_draft(ts_gen *g, int max_draft, int32_t *out);
/* The verify step: the sequence got k = 1 + n_draft rows in one pass (ts_cpu_decode_run: the
 * token about to be appended, then draft[0..n_draft)); logits (k, n_vocab), row j exactly the
 * logits a single decode of that row's token would give. Row j goes through ts_gen_next (with
 * n_past0 + j + 1 positions, n_past0 the positions before the pass) while the previous row's
 * sampled token equals the token row j was given: the same calls, on the same logits, that
 * plain decoding makes, so the output (text, stops, sampler state) is plain decoding's, for
 * greedy and seeded sampling alike. *n_used: rows consumed (accepted drafts + 1): the sequence
 * keeps n_past0 + *n_used positions (truncate the rest); *id, *done, *why as ts_gen_next for
 * the last row consumed. */
ts_status ts_gen_next_run(ts_gen *g, float *logits, const int32_t *draft, int n_draft, int n_past0, int32_t *id,
                          int *n_used, int *done, ts_gen_stop *why, ts_error *err);

#endif
