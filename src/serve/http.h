/* `tessera serve`'s HTTP side: libmicrohttpd (one thread per connection, bounded in count,
 * header memory and idle time) routing OpenAI's endpoints to the scheduler, with the limits
 * checked before any work: body size (413), API key (401, compared in constant time), method
 * (405), route (404), queue (503), the prompt against the context (400). */
#ifndef TS_SERVE_HTTP_H
#define TS_SERVE_HTTP_H
#include <stddef.h>
#include <stdio.h>

#include "runtime/sample.h"
#include "runtime/session.h"

/* --prefill-chunk's default: the cpu target's own prefill chunk (TS_CPU_PREFILL_CHUNK), so a piece
 * runs at full prefill speed and a step holds the decode of the others up by one such chunk. */
#define TS_SERVE_PREFILL_CHUNK 256

typedef struct ts_server_opts {
    const char *host;       /* numeric address or name to listen on; default 127.0.0.1 */
    int port;               /* 0: a free port (ts_server_port says which) */
    const char *api_key;    /* NULL: no key; else "Authorization: Bearer KEY" on /v1/ and /metrics */
    const char *model_name; /* the id /v1/models lists and responses carry */
    int parallel;           /* sequences generating together */
    int lookup;             /* prompt-lookup drafts per slot and step (0: off) */
    int lookup_ngram;       /* longest suffix matched (0: the default) */
    int lookup_min;         /* shortest suffix matched (0: the default) */
    int max_queue;          /* requests waiting beyond those (503 past it) */
    size_t max_body;        /* bytes of a request body (413 past it) */
    size_t max_header;      /* bytes of the request line and headers (libmicrohttpd answers 431) */
    int max_conn;           /* connections at once */
    int timeout_s;          /* an idle connection (no bytes either way) is closed after it */
    int max_tokens_limit;   /* the most max_tokens a request may ask for */
    int cache_mb;           /* the prefix cache's bound in MiB (KV of kept prompts); 0: none */
    int prefill_chunk;      /* prompt tokens prefilled per scheduler step (0 or >= 2); 0: whole prompts */
    ts_sample_opts defaults; /* sampling for fields a request omits */
    int enable_thinking;     /* -1: none; 0/1: the template variable for requests that do not set it */
    FILE *log;               /* one line per request, or NULL */
} ts_server_opts;

/* Defaults: 127.0.0.1:8080, 1 slot, queue 64, body 8 MiB, headers 64 KiB, 64 connections,
 * 600 s idle timeout, max_tokens up to 4096, a prefix cache of 1024 MiB, prefill chunks of
 * TS_SERVE_PREFILL_CHUNK tokens, ts_sample_opts_default. */
void ts_server_opts_default(ts_server_opts *o);

typedef struct ts_server ts_server;

/* Starts serving the session's model (borrowed; it must outlive the server): the scheduler
 * thread and the listening socket. */
ts_status ts_server_start(ts_session *sess, const ts_server_opts *o, ts_server **out, ts_error *err);
/* The port it listens on (the one the system picked for port 0). */
int ts_server_port(const ts_server *s);
/* Slots it really runs (see ts_sched_slots). */
int ts_server_slots(const ts_server *s);
/* Stops accepting connections, refuses new requests on open ones (503), lets every request in
 * flight finish and its response go out, then stops and frees. */
void ts_server_shutdown(ts_server *s);

#endif
