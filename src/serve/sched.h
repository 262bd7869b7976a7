/* The scheduler of `tessera serve`: one thread owns the model's cpu session and runs every
 * request on it. Requests wait in a bounded queue; up to `parallel` of them hold a slot (a KV
 * sequence of their own). Each step prefills up to a budget of prompt tokens (prefill_chunk) of
 * the slots still prefilling, oldest first, then runs one batched decode step over every
 * generating slot, so a long prompt holds the others' token streams up one chunk at a time, not
 * for its whole prefill. Each slot samples its next token with its own seeded
 * sampler, and streams the text to the request (runtime/generate.h drives sampling, EOS, stop
 * strings and limits, exactly as `tessera run` does). A cancelled request (its client went
 * away) leaves its slot at the next step. With lookup, a slot whose recent tokens occurred
 * before in its prompt or reply also gets drafted tokens: its rows in the same step are its
 * next token then the drafts (ts_cpu_decode_multi), the accepted ones are those plain decoding
 * would have produced (ts_gen_next_run), and the rejected rows are truncated away. */
#ifndef TS_SERVE_SCHED_H
#define TS_SERVE_SCHED_H
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "runtime/sample.h"
#include "serve/metrics.h"
#include "target/cpu/cpu_target.h"
#include "tok/tokenizer.h"

typedef struct ts_sched_opts {
    int parallel;  /* slots: sequences generating together */
    int max_queue; /* requests waiting for a slot beyond those; more are refused */
    int n_ctx;     /* positions per slot (the cpu session's max_seq) */
    int lookup;       /* prompt-lookup speculative decoding: drafted tokens per slot and step (0: off) */
    int lookup_ngram; /* longest suffix matched (0: TS_GEN_LOOKUP_NGRAM) */
    int lookup_min;   /* shortest suffix matched (0: TS_GEN_LOOKUP_MIN) */
    uint64_t cache_bytes; /* the prefix cache's bound (KV of kept prompts); 0: no cache */
    int prefill_chunk;    /* prompt tokens prefilled per step, all slots together (0 or >= 2; a piece
                           * may be 1 longer, never 1 row: below); 0: every admitted prompt whole */
} ts_sched_opts;

typedef struct ts_sched ts_sched;

/* c, m, t are borrowed and must outlive the scheduler; eos: ids that end a reply besides the
 * model's and the tokenizer's (the chat template's end of turn). Allocates every slot's KV
 * sequence up front and starts the thread. */
ts_status ts_sched_new(ts_cpu *c, const ts_model *m, const ts_tok *t, const int32_t *eos, int n_eos,
                       const ts_sched_opts *o, ts_smetrics *metrics, ts_sched **out, ts_error *err);
/* Refuses new requests, lets the queued and active ones finish, and returns when they have. */
void ts_sched_drain(ts_sched *s);
/* Drains, stops the thread and frees. */
void ts_sched_free(ts_sched *s);
/* Slots the scheduler really runs (parallel may be capped by what the target offers). */
int ts_sched_slots(const ts_sched *s);
/* The next piece of a prompt with rest >= 1 tokens left to prefill, given budget tokens left in
 * this step (budget < 0: no limit): 0 (wait for the next step) or a length that never leaves a
 * piece of 1 row, which would run the decode arithmetic (docs/serve.md, prefix cache): rest
 * itself when it fits, else at most budget and leaving >= 2, or rest when budget 2 would leave 1
 * (the budget is exceeded by one row). A whole prompt of 1 token is its one piece, as alone. */
int ts_sched_piece(int rest, int budget);

/* One request, shared by the connection that made it and the scheduler (reference counted). */
typedef struct ts_sreq ts_sreq;

typedef struct ts_sreq_params {
    const int32_t *prompt; /* copied */
    int n_prompt;          /* 1..n_ctx */
    int max_tokens;        /* >= 1 (0: the prompt alone, no generation); the context caps it further */
    ts_sample_opts sample;
    const char *const *stop; /* copied */
    int n_stop;
    /* Log-probabilities (ts_sreq_wait's tokens): -1 none, else each generated token's with that
     * many alternatives (<= TS_LOGPROB_TOP_MAX); echo_logprobs likewise for the prompt's tokens
     * (the first has none), which makes prefill compute the logits of every position (in pieces,
     * without the prefix cache: the sampled text is the same). */
    int logprobs, echo_logprobs;
    int prompt_bos; /* prompt[0] is a BOS the tokenizer added: no text in the prompt (offsets) */
} ts_sreq_params;

/* One token's log-probabilities, as ts_sreq_wait hands them over. */
typedef struct ts_sreq_token {
    ts_logprob lp;
    int offset, len; /* the token's text: byte offset in the prompt (prompt tokens) or the reply, length */
    int prompt;      /* 1: a prompt token (echo_logprobs) */
} ts_sreq_token;

/* Makes the request's generator (sampler, stop filter) from the scheduler's model. */
ts_status ts_sreq_new(ts_sched *s, const ts_sreq_params *p, ts_sreq **out, ts_error *err);
/* Queues it: 0, or 1 when the queue is full, 2 when the server is shutting down (the request
 * stays the caller's). */
int ts_sched_submit(ts_sched *s, ts_sreq *r);
/* Waits up to timeout_ms for text or the end. Moves the text produced since the last call
 * into *text (malloc'd, or NULL when none; *len) and returns 1 once the request is over and
 * all its text has been taken, else 0. toks (may be NULL when the request asked for no
 * log-probabilities): the tokens whose text is in what was taken so far, in order (malloc'd or
 * NULL; *n_toks): the prompt's first, all at once; a generated token once all of its text was
 * handed over, or at the end unless a stop string cut the text before it. */
int ts_sreq_wait(ts_sreq *r, int timeout_ms, char **text, size_t *len, ts_sreq_token **toks, int *n_toks);
/* The client is gone: the slot is freed at the next step; no more text is produced. */
void ts_sreq_cancel(ts_sreq *r);
/* The connection's reference; the request is freed when the scheduler has let go too. */
void ts_sreq_release(ts_sreq *r);

typedef struct ts_sreq_result {
    int n_prompt, n_gen;
    int n_cached; /* prompt tokens whose KV came from the prefix cache */
    int n_drafted, n_accepted; /* prompt lookup: tokens drafted and verified, and accepted */
    int n_pieces;        /* calls its prompt's prefill took (prefill_chunk); 0 when it never began */
    int n_steps_between; /* decode steps of other requests run between its first and last piece */
    int by_length; /* max_tokens or the context ended it (finish_reason "length") */
    int failed;    /* the target failed (message in error) */
    char error[TS_ERROR_LEN];
} ts_sreq_result;
/* Once ts_sreq_wait returned 1. */
void ts_sreq_result_get(ts_sreq *r, ts_sreq_result *out);

#endif
