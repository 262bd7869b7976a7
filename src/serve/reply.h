/* One choice as it becomes a response: the reply's text as the scheduler hands it over, with
 * its tokens' log-probabilities, the prompt echoed before it (completions' echo), and the tool
 * calls parsed out of it (chat with tools). Streamed as chunks while it grows, or written whole
 * at the end. No sockets, no model: http.c moves what ts_sreq_wait returns in here and sends
 * what comes out. */
#ifndef TS_SERVE_REPLY_H
#define TS_SERVE_REPLY_H
#include <stddef.h>

#include "serve/api.h"
#include "serve/sched.h"
#include "serve/toolcall.h"
#include "tok/tokenizer.h"

typedef struct ts_reply_opts {
    ts_api_meta meta; /* copied */
    int stream, include_usage;
    int logprobs;       /* -1: none, else the request's alternatives per token */
    const char *echo;   /* completions: the prompt's text, returned before the reply (copied); NULL: none */
    size_t echo_len;
    int echo_logprobs;  /* the prompt's tokens come first among the tokens handed over */
    /* chat: the tool-call format to parse the reply for (NONE: none). Streamed, text that could
     * be the start of a call is held back (ts_toolcall_safe) and the calls go out at the end,
     * each in one chunk with all its arguments. */
    ts_toolcall_format tools;
    int parallel_tool_calls; /* 0: the first call only */
} ts_reply_opts;

typedef struct ts_reply ts_reply;

/* One server-sent event's JSON (malloc'd: the callee frees it; NULL: out of memory). */
typedef void (*ts_reply_emit_fn)(void *user, char *json);

/* t is borrowed (the tokens' text). NULL when out of memory. */
ts_reply *ts_reply_new(const ts_reply_opts *o, const ts_tok *t);
void ts_reply_free(ts_reply *r);
/* Streaming: the chunks due before any text (chat: the role). */
void ts_reply_begin(ts_reply *r, ts_reply_emit_fn emit, void *user);
/* What ts_sreq_wait handed over; streaming: the chunks due now go to emit. -1: out of memory. */
int ts_reply_add(ts_reply *r, const char *text, size_t len, const ts_sreq_token *toks, int n, ts_reply_emit_fn emit,
                 void *user);
/* The end of a generation that did not fail. Streaming: the last chunks (what was held back,
 * finish_reason, the usage when asked for) go to emit and NULL is returned; otherwise the
 * whole response body (NULL: out of memory). */
char *ts_reply_end(ts_reply *r, const ts_api_usage *u, int by_length, ts_reply_emit_fn emit, void *user);

#endif
