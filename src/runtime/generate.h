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
} ts_gen_opts;

typedef struct ts_gen_result {
    int n_prompt;    /* tokens prefilled by this run */
    int n_gen;       /* tokens sampled and kept (the stopping EOS is not counted) */
    double prompt_s; /* prefill wall time */
    double gen_s;    /* wall time from the end of prefill to the end of the run */
    ts_gen_stop stop;
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

#endif
