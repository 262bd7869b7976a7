/* A choice's text is kept whole (an echoed prompt, then the reply): the response is written
 * from it at the end, completions' text_offset counts its characters, and the tool calls are
 * parsed from it. Streamed, each chunk carries the text handed over since the last one (less
 * what could still become a tool call) and the log-probabilities of the tokens whose text that
 * completes. */
#include "serve/reply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/logprobs.h"

struct ts_reply {
    ts_reply_opts o;
    char id[64], model[256];
    const ts_tok *tok;
    char *text; /* the echoed prompt, then the reply */
    size_t len, cap, reply_at;
    ts_sreq_token *toks; /* not streamed: all; streamed: those not sent yet */
    int n_toks, cap_toks;
    size_t sent;   /* streamed with tools: the reply's bytes sent as content */
    int echo_due;  /* streamed: the echo chunk is still to be sent */
    int sent_role; /* streamed chat: the first chunk (with the role) went */
    ts_api_offsets cur;
    int oom;
};

static int put_text(ts_reply *r, const char *s, size_t n) {
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 1024;
        while (cap < r->len + n + 1) cap *= 2;
        char *p = realloc(r->text, cap);
        if (!p) return -1;
        r->text = p;
        r->cap = cap;
    }
    if (n) memcpy(r->text + r->len, s, n);
    r->len += n;
    r->text[r->len] = 0;
    return 0;
}

static int put_toks(ts_reply *r, const ts_sreq_token *t, int n) {
    if (r->n_toks + n > r->cap_toks) {
        int cap = r->cap_toks ? r->cap_toks * 2 : 64;
        while (cap < r->n_toks + n) cap *= 2;
        ts_sreq_token *p = realloc(r->toks, sizeof *p * (size_t)cap);
        if (!p) return -1;
        r->toks = p;
        r->cap_toks = cap;
    }
    if (n) memcpy(r->toks + r->n_toks, t, sizeof *t * (size_t)n);
    r->n_toks += n;
    return 0;
}

ts_reply *ts_reply_new(const ts_reply_opts *o, const ts_tok *t) {
    ts_reply *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->o = *o;
    snprintf(r->id, sizeof r->id, "%s", o->meta.id);
    snprintf(r->model, sizeof r->model, "%s", o->meta.model);
    r->o.meta.id = r->id;
    r->o.meta.model = r->model;
    r->o.echo = NULL;
    r->tok = t;
    if (put_text(r, o->echo ? o->echo : "", o->echo ? o->echo_len : 0)) {
        ts_reply_free(r);
        return NULL;
    }
    r->reply_at = r->len;
    r->echo_due = o->echo != NULL;
    return r;
}

void ts_reply_free(ts_reply *r) {
    if (!r) return;
    free(r->text);
    free(r->toks);
    free(r);
}

/* The logprobs object of toks[0..n) (NULL when the request asked for none or out of memory:
 * r->oom says which). */
static json_t *logprobs_json(ts_reply *r, const ts_sreq_token *t, int n) {
    if (r->o.logprobs < 0) return NULL;
    json_t *j = r->o.meta.kind == TS_API_CHAT
                    ? ts_api_logprobs_chat(r->tok, t, n)
                    : ts_api_logprobs_completion(r->tok, t, n, r->text, r->len, r->reply_at, &r->cur);
    if (!j) r->oom = 1;
    return j;
}

/* A content chunk: text and the log-probabilities of toks[0..n); calls: the delta's tool_calls
 * (then content null). */
static void chunk_calls(ts_reply *r, const char *text, size_t len, const ts_sreq_token *t, int n, const char *finish,
                        const json_t *calls, ts_reply_emit_fn emit, void *user) {
    json_t *lp = n ? logprobs_json(r, t, n) : NULL;
    ts_api_extra x = {lp, calls, calls != NULL};
    int first = r->o.meta.kind == TS_API_CHAT && !r->sent_role;
    r->sent_role = 1;
    emit(user, ts_api_chunk_json(&r->o.meta, text, len, first, finish, NULL, r->o.include_usage, &x));
    json_decref(lp);
}

static void chunk(ts_reply *r, const char *text, size_t len, const ts_sreq_token *t, int n, const char *finish,
                  ts_reply_emit_fn emit, void *user) {
    chunk_calls(r, text, len, t, n, finish, NULL, emit, user);
}

/* Streamed with tools: the reply's text that can no longer become a call, with the tokens it
 * completes (the others wait). */
static void send_safe(ts_reply *r, ts_reply_emit_fn emit, void *user) {
    const char *reply = r->text + r->reply_at;
    size_t safe = ts_toolcall_safe(r->o.tools, reply, r->len - r->reply_at);
    int k = 0;
    while (k < r->n_toks && (size_t)r->toks[k].offset + (size_t)r->toks[k].len <= safe) k++;
    if (safe > r->sent || k) chunk(r, reply + r->sent, safe > r->sent ? safe - r->sent : 0, r->toks, k, NULL, emit, user);
    if (safe > r->sent) r->sent = safe;
    if (k) memmove(r->toks, r->toks + k, sizeof *r->toks * (size_t)(r->n_toks - k));
    r->n_toks -= k;
}

void ts_reply_begin(ts_reply *r, ts_reply_emit_fn emit, void *user) {
    if (!r->o.stream) return;
    if (r->o.meta.kind == TS_API_CHAT) chunk(r, "", 0, NULL, 0, NULL, emit, user);
    else if (r->echo_due && r->o.echo_logprobs < 0) {
        chunk(r, r->text, r->reply_at, NULL, 0, NULL, emit, user);
        r->echo_due = 0;
    }
}

int ts_reply_add(ts_reply *r, const char *text, size_t len, const ts_sreq_token *toks, int n, ts_reply_emit_fn emit,
                 void *user) {
    size_t at = r->len;
    if (put_text(r, text, len) || put_toks(r, toks, n)) return -1;
    if (!r->o.stream) return 0;
    int np = 0; /* the prompt's tokens come first, all at once */
    while (np < r->n_toks && r->toks[np].prompt) np++;
    if (r->echo_due && (np || len)) { /* text before the prompt's tokens: they are not coming */
        chunk(r, r->text, r->reply_at, r->toks, np, NULL, emit, user);
        r->echo_due = 0;
    }
    if (r->echo_due) return r->oom ? -1 : 0;
    if (r->o.tools) {
        send_safe(r, emit, user);
        return r->oom ? -1 : 0;
    }
    if (len || r->n_toks > np) chunk(r, r->text + at, len, r->toks + np, r->n_toks - np, NULL, emit, user);
    r->n_toks = 0;
    return r->oom ? -1 : 0;
}

/* Streamed with tools, at the end: the content held back, then one chunk per call. Returns the
 * number of calls sent. */
static int send_calls(ts_reply *r, ts_reply_emit_fn emit, void *user) {
    const char *reply = r->text + r->reply_at;
    size_t rlen = r->len - r->reply_at;
    ts_toolcalls tc;
    if (ts_toolcall_parse(r->o.tools, reply, rlen, &tc)) {
        r->oom = 1;
        return 0;
    }
    int n = !r->o.parallel_tool_calls && tc.n > 1 ? 1 : tc.n;
    if (!n) { /* no call after all: the rest of the reply is content */
        if (rlen > r->sent || r->n_toks) chunk(r, reply + r->sent, rlen - r->sent, r->toks, r->n_toks, NULL, emit, user);
    } else {
        /* what went out is the start of the content (it came before any call) */
        size_t from = tc.content_len >= r->sent && !memcmp(tc.content, reply, r->sent) ? r->sent : tc.content_len;
        if (tc.content_len > from && !tc.content_blank) {
            chunk(r, tc.content + from, tc.content_len - from, r->toks, r->n_toks, NULL, emit, user);
            r->n_toks = 0;
        }
        for (int i = 0; i < n; i++) {
            json_t *calls = ts_toolcall_json(&tc, i, 1, r->o.tools, r->id, 1);
            if (!calls) r->oom = 1;
            else chunk_calls(r, "", 0, r->toks, r->n_toks, NULL, calls, emit, user);
            r->n_toks = 0;
            json_decref(calls);
        }
    }
    r->n_toks = 0;
    ts_toolcalls_free(&tc);
    return n;
}

char *ts_reply_end(ts_reply *r, const ts_api_usage *u, int by_length, ts_reply_emit_fn emit, void *user) {
    const char *finish = ts_api_finish_reason(by_length);
    if (r->o.stream) {
        if (r->echo_due) { /* the prompt's tokens never came (no room for them): the text alone */
            chunk(r, r->text, r->reply_at, NULL, 0, NULL, emit, user);
            r->echo_due = 0;
        }
        if (r->o.tools && send_calls(r, emit, user)) finish = "tool_calls";
        if (r->n_toks) chunk(r, "", 0, r->toks, r->n_toks, NULL, emit, user);
        chunk(r, "", 0, NULL, 0, finish, emit, user);
        if (r->o.include_usage) emit(user, ts_api_chunk_json(&r->o.meta, NULL, 0, 0, NULL, u, 1, NULL));
        return NULL;
    }
    json_t *lp = logprobs_json(r, r->toks, r->n_toks);
    if (r->oom) return NULL;
    ts_api_extra x = {lp, NULL, 0};
    /* chat: the reply; completions: the echoed prompt and the reply */
    size_t from = r->o.meta.kind == TS_API_CHAT ? r->reply_at : 0;
    const char *text = r->text + from;
    size_t tlen = r->len - from;
    ts_toolcalls tc = {0};
    json_t *calls = NULL;
    if (r->o.tools) {
        if (ts_toolcall_parse(r->o.tools, text, tlen, &tc)) {
            json_decref(lp);
            return NULL;
        }
        int n = !r->o.parallel_tool_calls && tc.n > 1 ? 1 : tc.n;
        if (n) {
            if (!(calls = ts_toolcall_json(&tc, 0, n, r->o.tools, r->id, 0))) r->oom = 1;
            x.tool_calls = calls;
            x.content_null = tc.content_blank;
            text = tc.content;
            tlen = tc.content_len;
            finish = "tool_calls";
        }
    }
    char *body = r->oom ? NULL : ts_api_response_json(&r->o.meta, text, tlen, finish, u, &x);
    json_decref(calls);
    ts_toolcalls_free(&tc);
    json_decref(lp);
    return body;
}
