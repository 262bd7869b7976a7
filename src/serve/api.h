/* The OpenAI wire format of `tessera serve`: request bodies of /v1/chat/completions and
 * /v1/completions parsed and checked into a ts_api_request (every bad field named, with the
 * value expected), and the JSON of responses, stream chunks, /v1/models and error bodies.
 * Pure functions of their inputs: no model, no sockets (the fuzz target drives ts_api_parse). */
#ifndef TS_SERVE_API_H
#define TS_SERVE_API_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/sample.h"
#include "tessera.h"

#define TS_API_MAX_STOP 16
#define TS_API_MAX_TOP_LOGPROBS 20 /* chat's top_logprobs, as OpenAI */
#define TS_API_MAX_LOGPROBS 5      /* completions' logprobs, as OpenAI */

typedef enum ts_api_kind {
    TS_API_CHAT = 0,   /* POST /v1/chat/completions */
    TS_API_COMPLETION, /* POST /v1/completions */
} ts_api_kind;

/* An error as OpenAI reports it: {"error": {"message", "type", "param", "code"}} and the
 * HTTP status it goes with. */
typedef struct ts_api_error {
    int status;
    const char *type; /* "invalid_request_error", "authentication_error", ... */
    const char *code; /* NULL: null */
    char param[64];   /* the request field at fault; "" when none */
    char message[TS_ERROR_LEN];
} ts_api_error;

/* Fills e and returns -1 (so a failure path is one line). param may be NULL. */
int ts_api_fail(ts_api_error *e, int status, const char *type, const char *param, const char *code,
                const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;
/* The error body (malloc'd, NUL-terminated; NULL when out of memory). */
char *ts_api_error_json(const ts_api_error *e);

typedef struct ts_api_request {
    ts_api_kind kind;
    json_t *root; /* the parsed body (owned); the pointers below borrow from it */
    const char *model;            /* NULL when absent */
    const char *prompt;           /* completions */
    const json_t *messages;       /* chat: a non-empty array of objects with a string "role" */
    const json_t *tools;          /* chat: an array, or NULL */
    int tool_calls;               /* chat: parse tool calls out of the reply (tools given, tool_choice not "none") */
    int parallel_tool_calls;      /* 0: at most one call is returned */
    const json_t *template_vars;  /* chat: chat_template_kwargs (an object), or NULL */
    int stream, include_usage;
    int max_tokens;               /* -1: not given (the server caps it by the context); 0 only with echo */
    ts_sample_opts sample;        /* the server's defaults where the request says nothing */
    int seed_given;
    const char *stop[TS_API_MAX_STOP];
    int n_stop;
    /* log-probabilities: -1 none, else the alternatives per token (chat: logprobs true with
     * top_logprobs 0..20; completions: logprobs 0..5) */
    int logprobs;
    int echo; /* completions: the prompt comes back before the reply (with logprobs, its tokens' too) */
} ts_api_request;

/* Parses and checks a body. defaults: the sampling options of fields the request omits;
 * max_tokens_limit: a larger max_tokens is refused (0: no limit). Returns 0, or -1 with e
 * set (status 400: malformed JSON with line and column, or the field and what it expects).
 * Unknown fields are ignored, as OpenAI's clients send more than a server needs. */
int ts_api_parse(ts_api_kind kind, const char *body, size_t len, const ts_sample_opts *defaults,
                 int max_tokens_limit, ts_api_request *r, ts_api_error *e);
void ts_api_request_free(ts_api_request *r);

typedef struct ts_api_usage {
    int prompt_tokens, completion_tokens;
    int cached_tokens; /* prompt tokens served from the prefix cache (prompt_tokens_details) */
} ts_api_usage;

/* What a response names: its id ("chatcmpl-..." / "cmpl-..."), the model and the creation time. */
typedef struct ts_api_meta {
    ts_api_kind kind;
    const char *id;
    const char *model;
    int64_t created;
} ts_api_meta;

/* What a choice carries besides its text (every field may be NULL / 0). */
typedef struct ts_api_extra {
    const json_t *logprobs;   /* the choice's "logprobs" (borrowed; NULL: null) */
    const json_t *tool_calls; /* chat: message.tool_calls, or a chunk's delta.tool_calls (borrowed) */
    int content_null;         /* chat: "content": null (a reply that is only tool calls) */
} ts_api_extra;

/* The whole response of a non-streamed request (chat.completion or text_completion); x may be NULL. */
char *ts_api_response_json(const ts_api_meta *m, const char *text, size_t len, const char *finish_reason,
                           const ts_api_usage *u, const ts_api_extra *x);
/* One stream chunk (chat.completion.chunk or text_completion): text (may be empty), first
 * (chat: the delta carries the role), finish_reason (NULL while generating), u (non-NULL: a
 * usage-only chunk with no choices, as OpenAI sends last with stream_options.include_usage;
 * text and finish_reason are then ignored). with_usage_null: the chunk says "usage": null
 * (OpenAI does when include_usage is set). */
char *ts_api_chunk_json(const ts_api_meta *m, const char *text, size_t len, int first, const char *finish_reason,
                        const ts_api_usage *u, int with_usage_null, const ts_api_extra *x);
/* GET /v1/models: one model. */
char *ts_api_models_json(const char *model, int64_t created);

/* "stop" / "length" for a generation's end. */
const char *ts_api_finish_reason(int stopped_by_length);
/* A JSON string of possibly invalid UTF-8 (bytes that form no character become U+FFFD). */
json_t *ts_api_str_json(const char *s, size_t len);

#endif
