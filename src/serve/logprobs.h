/* OpenAI's "logprobs" objects, from the scheduler's per-token log-probabilities
 * (ts_sreq_token): chat's {"content": [{token, logprob, bytes, top_logprobs}], "refusal": null}
 * and the completions' {tokens, token_logprobs, top_logprobs, text_offset}. A token is written
 * as the text it decodes to (U+FFFD where it cuts a character; "bytes" has its exact bytes). */
#ifndef TS_SERVE_LOGPROBS_H
#define TS_SERVE_LOGPROBS_H
#include <jansson.h>
#include <stddef.h>

#include "serve/sched.h"
#include "tok/tokenizer.h"

/* Chat: {"content": [...], "refusal": null} for toks[0..n) (each with its lp.n_top
 * alternatives). NULL when out of memory. */
json_t *ts_api_logprobs_chat(const ts_tok *t, const ts_sreq_token *toks, int n);

/* Where completions' text_offset counts from: characters (code points) of the choice's text,
 * as Python indexes it; the text so far and a cursor that only moves forward. */
typedef struct ts_api_offsets {
    size_t byte, chars; /* chars = the characters in text[0..byte) */
} ts_api_offsets;

/* Completions: {"tokens", "token_logprobs", "top_logprobs" (a {token: logprob} dict each, with
 * the lp.n_top most likely and the token itself; null for a token without one), "text_offset"}.
 * text[0..len): the choice's text so far (an echoed prompt, then the reply) for the offsets;
 * reply: where the reply starts in it (a prompt token's offset counts from 0, a generated
 * one's from reply). NULL when out of memory. */
json_t *ts_api_logprobs_completion(const ts_tok *t, const ts_sreq_token *toks, int n, const char *text,
                                   size_t len, size_t reply, ts_api_offsets *cur);

#endif
