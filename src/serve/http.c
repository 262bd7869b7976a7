/* libmicrohttpd glue for `tessera serve`. One thread per connection (MHD's own), so a
 * connection may block while its request generates: a non-streamed request waits in the
 * access handler, a streamed one in its content reader, each polling every 100 ms for the
 * scheduler's text and for its client having gone (then the request is cancelled and its slot
 * freed at the next step). While a request is with the scheduler the connection's idle timeout
 * is off (the server, not the client, is the slow one); it is back as soon as everything has
 * been produced, so a client that stops reading is dropped after --timeout. */
#include "serve/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "runtime/chat_template.h"
#include "serve/api.h"
#include "serve/metrics.h"
#include "serve/reply.h"
#include "serve/sched.h"
#include "serve/toolcall.h"

void ts_server_opts_default(ts_server_opts *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->model_name = "tessera";
    o->parallel = 1;
    o->max_queue = 64;
    o->max_body = 8u << 20;
    o->max_header = 64u << 10;
    o->max_conn = 64;
    o->timeout_s = 600;
    o->max_tokens_limit = 4096;
    o->cache_mb = 1024;
    o->prefill_chunk = TS_SERVE_PREFILL_CHUNK;
    o->enable_thinking = -1;
    ts_sample_opts_default(&o->defaults);
}

struct ts_server {
    ts_server_opts o;
    char model_name[256];
    unsigned char key_hash[SHA256_DIGEST_LENGTH];
    ts_session *sess;
    const ts_tok *tok;
    const ts_chat_template *tmpl;
    ts_toolcall_format tool_format; /* how the template's model writes tool calls */
    ts_toolcall_caps tool_caps;     /* how it wants the calls a client sends back */
    int n_ctx;
    const char *ctx_src;
    ts_sched *sched;
    ts_smetrics *metrics;
    struct MHD_Daemon *d;
    int port;
    int64_t started;
    uint64_t id_salt; /* this process's: ids differ between servers started the same second */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int inflight; /* generation requests past the draining check whose response has not finished */
    int draining;
    uint64_t counter;
};

enum route { R_OTHER = 0, R_CHAT, R_COMPLETIONS, R_MODELS, R_HEALTH, R_METRICS };
static const struct {
    const char *path, *method;
} k_routes[] = {{"", ""},
                {"/v1/chat/completions", "POST"},
                {"/v1/completions", "POST"},
                {"/v1/models", "GET"},
                {"/health", "GET"},
                {"/metrics", "GET"}};

typedef struct conn_ctx {
    enum route route;
    char *body;
    size_t len, cap;
    int too_large;
    int responded; /* a response is queued: the rest of the upload is dropped */
    int status;    /* for /metrics */
    int held;      /* counted in ts_server.inflight: shutdown waits for its response */
    int inflight;  /* with the scheduler: a connection that ends early is the client leaving (499) */
    double t0;
    int n_prompt, n_gen, n_cached;
    int n_drafted, n_accepted;
    int n_pieces, n_steps_between;
    char method[8];
} conn_ctx;

/* ---- helpers ---- */

static void logf_(ts_server *s, const char *fmt, ...) {
    if (!s->o.log) return;
    va_list ap;
    va_start(ap, fmt);
    flockfile(s->o.log);
    vfprintf(s->o.log, fmt, ap);
    fputc('\n', s->o.log);
    fflush(s->o.log);
    funlockfile(s->o.log);
    va_end(ap);
}

static enum MHD_Result send_body(struct MHD_Connection *c, conn_ctx *cc, int status, char *body, const char *type,
                                 const char *hname, const char *hval) {
    if (!body) { /* out of memory building the body: say so plainly */
        static const char k_oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                                    "\"param\":null,\"code\":null}}";
        body = strdup(k_oom);
        status = 500;
        type = "application/json";
        if (!body) return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (hname) MHD_add_response_header(r, hname, hval);
    cc->status = status;
    cc->responded = 1;
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, conn_ctx *cc, const ts_api_error *e) {
    const char *hn = NULL, *hv = NULL;
    if (e->status == 401) hn = "WWW-Authenticate", hv = "Bearer";
    else if (e->status == 503 || e->status == 429) hn = "Retry-After", hv = "1";
    else if (e->status == 405) hn = "Allow", hv = k_routes[cc->route].method;
    return send_body(c, cc, e->status, ts_api_error_json(e), "application/json", hn, hv);
}

static enum MHD_Result fail(struct MHD_Connection *c, conn_ctx *cc, int status, const char *type, const char *param,
                            const char *code, const char *fmt, ...) {
    ts_api_error e;
    char msg[TS_ERROR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ts_api_fail(&e, status, type, param, code, "%s", msg);
    return send_error(c, cc, &e);
}

/* The client closed its end (EOF pending on the socket), or the socket failed. */
static int client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return 1;
    if (p.revents & POLLIN) {
        char b;
        return recv(ci->connect_fd, &b, 1, MSG_PEEK) == 0;
    }
    return 0;
}

static void set_timeout(struct MHD_Connection *c, unsigned s) {
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, s);
}

/* "Bearer KEY" against the key, in time independent of where they differ: both are hashed
 * first, so even the lengths are compared as 32 bytes. */
static int key_ok(const ts_server *s, struct MHD_Connection *c) {
    if (!s->o.api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncmp(h, "Bearer ", 7)) return 0;
    h += 7;
    while (*h == ' ') h++;
    unsigned char got[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)h, strlen(h), got);
    return CRYPTO_memcmp(got, s->key_hash, sizeof got) == 0;
}

static void make_id(ts_server *s, const char *prefix, char *out, size_t n) {
    pthread_mutex_lock(&s->mu);
    uint64_t k = ++s->counter;
    pthread_mutex_unlock(&s->mu);
    uint64_t x = k * 0x9E3779B97F4A7C15ull ^ s->id_salt * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    snprintf(out, n, "%s%016llx%08llx", prefix, (unsigned long long)x, (unsigned long long)k);
}

/* ---- generation requests ---- */

typedef struct stream_ctx {
    ts_server *s;
    ts_sreq *r;
    ts_reply *rp;
    int want_toks; /* the request asked for log-probabilities */
    struct MHD_Connection *c;
    conn_ctx *cc;
    int begun, ended;
    char *pend;
    size_t pend_len, pend_off, pend_cap;
    int oom;
} stream_ctx;

static void pend_put(stream_ctx *sc, const char *a, size_t n) {
    if (sc->oom) return;
    if (sc->pend_len + n > sc->pend_cap) {
        size_t cap = sc->pend_cap ? sc->pend_cap * 2 : 1024;
        while (cap < sc->pend_len + n) cap *= 2;
        char *p = realloc(sc->pend, cap);
        if (!p) {
            sc->oom = 1;
            return;
        }
        sc->pend = p;
        sc->pend_cap = cap;
    }
    memcpy(sc->pend + sc->pend_len, a, n);
    sc->pend_len += n;
}

/* One server-sent event: "data: JSON\n\n" (the JSON is freed). */
static void pend_event(stream_ctx *sc, char *json) {
    if (!json) {
        sc->oom = 1;
        return;
    }
    pend_put(sc, "data: ", 6);
    pend_put(sc, json, strlen(json));
    pend_put(sc, "\n\n", 2);
    free(json);
}

static void emit_event(void *user, char *json) { pend_event(user, json); }

static void request_done(conn_ctx *cc, const ts_sreq_result *res) {
    cc->n_prompt = res->n_prompt;
    cc->n_gen = res->n_gen;
    cc->n_cached = res->n_cached;
    cc->n_drafted = res->n_drafted;
    cc->n_pieces = res->n_pieces;
    cc->n_steps_between = res->n_steps_between;
    cc->n_accepted = res->n_accepted;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ctx *sc = cls;
    while (sc->pend_off == sc->pend_len) {
        sc->pend_off = sc->pend_len = 0;
        if (sc->oom) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (sc->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!sc->begun) {
            ts_reply_begin(sc->rp, emit_event, sc);
            sc->begun = 1;
            continue;
        }
        char *text;
        size_t len;
        ts_sreq_token *toks = NULL;
        int nt = 0;
        int over = ts_sreq_wait(sc->r, 100, &text, &len, sc->want_toks ? &toks : NULL, &nt);
        if ((len || nt) && ts_reply_add(sc->rp, text, len, toks, nt, emit_event, sc)) sc->oom = 1;
        free(text);
        free(toks);
        if (over) {
            ts_sreq_result res;
            ts_sreq_result_get(sc->r, &res);
            request_done(sc->cc, &res);
            if (res.failed) {
                ts_api_error e;
                ts_api_fail(&e, 500, "server_error", NULL, NULL, "generation failed: %s", res.error);
                pend_event(sc, ts_api_error_json(&e));
                sc->cc->status = 500;
            } else {
                ts_api_usage u = {res.n_prompt, res.n_gen, res.n_cached};
                ts_reply_end(sc->rp, &u, res.by_length, emit_event, sc);
            }
            pend_put(sc, "data: [DONE]\n\n", 14);
            sc->ended = 1;
            set_timeout(sc->c, (unsigned)sc->s->o.timeout_s); /* a client that stops reading now goes */
        } else if (!sc->pend_len && client_gone(sc->c)) { /* nothing to write (text may be held back) */
            ts_sreq_cancel(sc->r);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t n = sc->pend_len - sc->pend_off;
    if (n > max) n = max;
    memcpy(buf, sc->pend + sc->pend_off, n);
    sc->pend_off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream_ctx *sc = cls;
    ts_sreq_release(sc->r); /* cancels it when the client went before the end */
    ts_reply_free(sc->rp);
    free(sc->pend);
    free(sc);
}

static enum MHD_Result serve_generate(ts_server *s, struct MHD_Connection *c, conn_ctx *cc) {
    ts_api_kind kind = cc->route == R_CHAT ? TS_API_CHAT : TS_API_COMPLETION;
    ts_api_request req;
    ts_api_error e;
    if (ts_api_parse(kind, cc->body ? cc->body : "", cc->len, &s->o.defaults, s->o.max_tokens_limit, &req, &e))
        return send_error(c, cc, &e);
    char *text = NULL;
    size_t tlen = 0;
    ts_error err;
    ts_status st = TS_OK;
    int add_bos = 0;
    const char *field = kind == TS_API_CHAT ? "messages" : "prompt";
    if (kind == TS_API_CHAT) {
        if (!s->tmpl) {
            ts_api_request_free(&req);
            return fail(c, cc, 400, "invalid_request_error", NULL, "no_chat_template",
                        "this model has no chat template (pass --chat-template FILE to tessera serve); "
                        "/v1/completions works without one");
        }
        json_t *vars = req.template_vars ? json_deep_copy(req.template_vars) : json_object();
        if (vars && s->o.enable_thinking >= 0 && !json_object_get(vars, "enable_thinking"))
            json_object_set_new(vars, "enable_thinking", json_boolean(s->o.enable_thinking));
        /* the assistant turns with tool calls that OpenAI's clients send back, as the template wants them */
        json_t *msgs = s->tool_caps.object_args || s->tool_caps.empty_content
                           ? ts_toolcall_fix_messages(req.messages, &s->tool_caps)
                           : json_incref((json_t *)req.messages);
        st = vars && msgs ? ts_chat_render_json(s->tmpl, msgs, req.tools, vars, 1, &text, &tlen, &err)
                          : ts_fail(&err, TS_ERR_NOMEM, "out of memory");
        json_decref(vars);
        json_decref(msgs);
        if (st) {
            ts_api_request_free(&req);
            return fail(c, cc, 400, "invalid_request_error", "messages", "chat_template_error",
                        "the chat template refused the conversation: %s", err.msg);
        }
    } else {
        add_bos = ts_tok_add_bos(s->tok);
    }
    const char *src = text ? text : req.prompt;
    size_t slen = text ? tlen : strlen(req.prompt);
    int32_t *ids = NULL;
    int n = 0;
    /* The template writes BOS as text where it wants one; HF encodes a chat without adding. */
    st = ts_tok_encode(s->tok, src, slen, add_bos, &ids, &n, &err);
    free(text);
    if (st) {
        ts_api_request_free(&req);
        return fail(c, cc, 400, "invalid_request_error", field, NULL, "%s could not be tokenized: %s", field, err.msg);
    }
    if (n == 0) {
        ts_api_request_free(&req);
        free(ids);
        return fail(c, cc, 400, "invalid_request_error", field, NULL, "%s encodes to no tokens", field);
    }
    if (n > s->n_ctx) {
        ts_api_request_free(&req);
        free(ids);
        return fail(c, cc, 400, "invalid_request_error", field, "context_length_exceeded",
                    "the prompt is %d tokens, more than the context of %d positions (%s)", n, s->n_ctx, s->ctx_src);
    }
    ts_sreq_params p = {ids,
                        n,
                        req.max_tokens >= 0 ? req.max_tokens : s->o.max_tokens_limit,
                        req.sample,
                        req.stop,
                        req.n_stop,
                        req.logprobs,
                        req.echo ? req.logprobs : -1,
                        add_bos && ts_tok_bos(s->tok) >= 0 && ids[0] == ts_tok_bos(s->tok)};
    if (!req.seed_given) { /* OpenAI's default: a different draw each request */
        char idb[40];
        make_id(s, "", idb, sizeof idb);
        p.sample.seed = strtoull(idb, NULL, 16) ^ (uint64_t)(ts_now_s() * 1e9);
    }
    ts_sreq *r = NULL;
    st = ts_sreq_new(s->sched, &p, &r, &err);
    free(ids);
    cc->n_prompt = n;
    if (st) {
        ts_api_request_free(&req);
        return fail(c, cc, st == TS_ERR_NOMEM ? 503 : 400, st == TS_ERR_NOMEM ? "server_error" : "invalid_request_error",
                    NULL, NULL, "%s", err.msg);
    }
    int rc = ts_sched_submit(s->sched, r);
    if (rc) {
        ts_sreq_release(r);
        ts_api_request_free(&req);
        return fail(c, cc, 503, "server_error", NULL, rc == 1 ? "queue_full" : "shutting_down",
                    rc == 1 ? "the server is busy: %d requests are waiting already (--max-queue); retry later"
                            : "the server is shutting down%s",
                    s->o.max_queue, "");
    }
    cc->inflight = 1;
    set_timeout(c, 0); /* the server is the slow one now */

    char id[64];
    make_id(s, kind == TS_API_CHAT ? "chatcmpl-" : "cmpl-", id, sizeof id);
    ts_reply_opts ro = {{kind, id, s->model_name, (int64_t)time(NULL)},
                        req.stream,
                        req.include_usage,
                        req.logprobs,
                        req.echo ? req.prompt : NULL,
                        req.echo ? strlen(req.prompt) : 0,
                        p.echo_logprobs,
                        kind == TS_API_CHAT && req.tool_calls ? s->tool_format : TS_TOOLCALL_NONE,
                        req.parallel_tool_calls};
    ts_reply *rp = ts_reply_new(&ro, s->tok);
    int want_toks = req.logprobs >= 0, stream = req.stream;
    ts_api_request_free(&req);
    if (!rp) {
        ts_sreq_release(r);
        return fail(c, cc, 500, "server_error", NULL, NULL, "out of memory");
    }
    if (stream) {
        stream_ctx *sc = calloc(1, sizeof *sc);
        if (!sc) {
            ts_sreq_release(r);
            ts_reply_free(rp);
            return MHD_NO;
        }
        sc->s = s;
        sc->r = r;
        sc->rp = rp;
        sc->want_toks = want_toks;
        sc->c = c;
        sc->cc = cc;
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, sc,
                                                                      stream_free);
        if (!resp) {
            stream_free(sc);
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        cc->status = 200;
        cc->responded = 1;
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    /* Not streamed: wait here for the whole reply. */
    int oom = 0;
    for (;;) {
        char *piece;
        size_t len;
        ts_sreq_token *toks = NULL;
        int nt = 0;
        int over = ts_sreq_wait(r, 100, &piece, &len, want_toks ? &toks : NULL, &nt);
        if ((len || nt) && !oom && ts_reply_add(rp, piece, len, toks, nt, NULL, NULL)) oom = 1;
        free(piece);
        free(toks);
        if (over) break;
        /* Asked after every piece, not only when none came: while text flows a wait never
         * times out, and a client that left would hold its slot to the end of its reply. */
        if (client_gone(c)) {
            ts_sreq_cancel(r);
            ts_sreq_release(r);
            ts_reply_free(rp);
            cc->status = 499;
            return MHD_NO; /* closes the connection */
        }
    }
    ts_sreq_result res;
    ts_sreq_result_get(r, &res);
    ts_sreq_release(r);
    request_done(cc, &res);
    set_timeout(c, (unsigned)s->o.timeout_s);
    ts_api_usage u = {res.n_prompt, res.n_gen, res.n_cached};
    char *body = oom || res.failed ? NULL : ts_reply_end(rp, &u, res.by_length, NULL, NULL);
    ts_reply_free(rp);
    if (oom || res.failed) {
        return fail(c, cc, 500, "server_error", NULL, NULL, "generation failed: %s",
                    oom ? "out of memory keeping the reply" : res.error);
    }
    return send_body(c, cc, 200, body, "application/json", NULL, NULL);
}

/* ---- the access handler ---- */

static enum route route_of(const char *url) {
    for (int i = 1; i < (int)(sizeof k_routes / sizeof k_routes[0]); i++)
        if (!strcmp(url, k_routes[i].path)) return (enum route)i;
    return R_OTHER;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    ts_server *s = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) { /* headers are in: everything that can be refused without the body is */
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        *con_cls = cc;
        cc->t0 = ts_now_s();
        snprintf(cc->method, sizeof cc->method, "%s", method);
        cc->route = route_of(url);
        if (cc->route == R_OTHER)
            return fail(c, cc, 404, "invalid_request_error", NULL, "not_found",
                        "no route %s %s (serving POST /v1/chat/completions, POST /v1/completions, GET /v1/models, "
                        "GET /health, GET /metrics)", method, url);
        if (strcmp(method, k_routes[cc->route].method))
            return fail(c, cc, 405, "invalid_request_error", NULL, "method_not_allowed", "%s takes %s, not %s", url,
                        k_routes[cc->route].method, method);
        if (cc->route != R_HEALTH && !key_ok(s, c))
            return fail(c, cc, 401, "authentication_error", NULL, "invalid_api_key",
                        "missing or wrong API key (send \"Authorization: Bearer KEY\")");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body)
            return fail(c, cc, 413, "invalid_request_error", NULL, "request_too_large",
                        "the request body is %s bytes, more than the %zu this server accepts (--max-body)", cl,
                        s->o.max_body);
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cc->responded && !cc->too_large) {
            size_t n = *upload_size;
            if (cc->len + n > s->o.max_body) {
                cc->too_large = 1;
                free(cc->body);
                cc->body = NULL;
                cc->len = cc->cap = 0;
            } else {
                if (cc->len + n + 1 > cc->cap) {
                    size_t cap = cc->cap ? cc->cap * 2 : 4096;
                    while (cap < cc->len + n + 1) cap *= 2;
                    char *p = realloc(cc->body, cap);
                    if (!p) return MHD_NO;
                    cc->body = p;
                    cc->cap = cap;
                }
                memcpy(cc->body + cc->len, upload, n);
                cc->len += n;
                cc->body[cc->len] = 0;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (cc->responded) return MHD_YES;
    if (cc->too_large)
        return fail(c, cc, 413, "invalid_request_error", NULL, "request_too_large",
                    "the request body is more than the %zu bytes this server accepts (--max-body)", s->o.max_body);
    switch (cc->route) {
    case R_HEALTH: {
        int q, a;
        ts_smetrics_get_queue(s->metrics, &q, &a);
        pthread_mutex_lock(&s->mu);
        int dr = s->draining;
        pthread_mutex_unlock(&s->mu);
        char *b = malloc(160);
        if (b)
            snprintf(b, 160, "{\"status\":\"%s\",\"slots\":%d,\"active\":%d,\"queued\":%d}",
                     dr ? "shutting_down" : "ok", ts_sched_slots(s->sched), a, q);
        return send_body(c, cc, dr ? 503 : 200, b, "application/json", NULL, NULL);
    }
    case R_MODELS: return send_body(c, cc, 200, ts_api_models_json(s->model_name, s->started), "application/json", NULL, NULL);
    case R_METRICS: {
        size_t n;
        char *b = ts_smetrics_render(s->metrics, &n);
        return send_body(c, cc, 200, b, "text/plain; version=0.0.4; charset=utf-8", NULL, NULL);
    }
    case R_CHAT:
    case R_COMPLETIONS: {
        /* Counted before it is let through, in one step with the check: a request counted only
         * once with the scheduler could pass the check, let shutdown see nothing in flight and
         * close the connection, and then be dropped without a response. */
        pthread_mutex_lock(&s->mu);
        int dr = s->draining;
        if (!dr) s->inflight++;
        pthread_mutex_unlock(&s->mu);
        if (dr) return fail(c, cc, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
        cc->held = 1;
        return serve_generate(s, c, cc);
    }
    default: break;
    }
    return MHD_NO;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c;
    ts_server *s = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) return;
    *con_cls = NULL;
    int status = cc->status;
    if (cc->inflight && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) status = 499; /* the client left */
    if (status) {
        ts_smetrics_request(s->metrics, k_routes[cc->route].path[0] ? k_routes[cc->route].path : "other", status);
        if (cc->route == R_CHAT || cc->route == R_COMPLETIONS || status >= 400) {
            char look[64] = "", pieces[80] = "";
            if (cc->n_drafted)
                snprintf(look, sizeof look, " (lookup: %d of %d drafted accepted)", cc->n_accepted, cc->n_drafted);
            if (cc->n_pieces > 1)
                snprintf(pieces, sizeof pieces, " (prefill: %d pieces, %d decode steps between)", cc->n_pieces,
                         cc->n_steps_between);
            logf_(s, "tessera serve: %s %s %d, %d prompt (%d cached) + %d generated tokens, %.3f s%s%s", cc->method,
                  k_routes[cc->route].path[0] ? k_routes[cc->route].path : "(other)", status, cc->n_prompt,
                  cc->n_cached, cc->n_gen, ts_now_s() - cc->t0, pieces, look);
        }
    }
    if (cc->held) {
        pthread_mutex_lock(&s->mu);
        s->inflight--;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    free(cc->body);
    free(cc);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    ts_server *s = cls;
    if (!s->o.log) return;
    flockfile(s->o.log);
    fputs("tessera serve: libmicrohttpd: ", s->o.log);
    vfprintf(s->o.log, fmt, ap);
    funlockfile(s->o.log);
}

ts_status ts_server_start(ts_session *sess, const ts_server_opts *o, ts_server **out, ts_error *err) {
    *out = NULL;
    if (o->max_body < 1 || o->max_conn < 1 || o->timeout_s < 1 || o->max_tokens_limit < 1 || o->max_header < 1024)
        return ts_fail(err, TS_ERR_ARG, "serve: a limit is out of range (body %zu, connections %d, timeout %d, "
                                        "max tokens %d, header %zu)", o->max_body, o->max_conn, o->timeout_s,
                       o->max_tokens_limit, o->max_header);
    ts_server *s = calloc(1, sizeof *s);
    if (!s) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    s->o = *o;
    s->o.api_key = NULL;
    if (o->api_key) {
        SHA256((const unsigned char *)o->api_key, strlen(o->api_key), s->key_hash);
        s->o.api_key = "set";
    }
    snprintf(s->model_name, sizeof s->model_name, "%s", o->model_name ? o->model_name : "tessera");
    s->o.model_name = s->model_name;
    s->sess = sess;
    s->tok = ts_session_tok(sess);
    s->tmpl = ts_session_template(sess);
    if (s->tmpl) {
        s->tool_format = ts_toolcall_format_of(ts_chat_template_text(s->tmpl));
        ts_toolcall_caps_of(s->tmpl, &s->tool_caps);
    }
    s->n_ctx = ts_session_n_ctx(sess);
    s->ctx_src = ts_session_ctx_source(sess);
    s->started = (int64_t)time(NULL);
    {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        s->id_salt = ((uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec) ^ (uint64_t)getpid() << 40;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->metrics = ts_smetrics_new();
    ts_status st = s->metrics ? TS_OK : ts_fail(err, TS_ERR_NOMEM, "out of memory");
    if (!st) {
        /* A reply ends at the model's EOS ids (the generator adds those) and at the chat
         * template's end-of-turn token. */
        int32_t eos[1];
        int n_eos = 0;
        const char *eot = s->tmpl ? ts_chat_template_end_of_turn(s->tmpl) : NULL;
        if (eot) {
            int32_t id = ts_tok_token_id(s->tok, eot, strlen(eot));
            if (id >= 0) eos[n_eos++] = id;
        }
        ts_sched_opts so = {o->parallel,  o->max_queue, s->n_ctx, o->lookup, o->lookup_ngram, o->lookup_min,
                            (uint64_t)o->cache_mb << 20, o->prefill_chunk};
        st = ts_sched_new(ts_session_cpu(sess), ts_session_model(sess), s->tok, eos, n_eos, &so, s->metrics, &s->sched,
                          err);
    }
    struct addrinfo *ai = NULL;
    if (!st) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
        char port[16];
        snprintf(port, sizeof port, "%d", o->port);
        int g = getaddrinfo(o->host, port, &hints, &ai);
        if (g) st = ts_fail(err, TS_ERR_ARG, "serve: --host %s: %s", o->host, gai_strerror(g));
    }
    if (!st) {
        unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                         MHD_USE_ERROR_LOG | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
        s->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, handler, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
                                s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_conn, MHD_OPTION_CONNECTION_TIMEOUT,
                                (unsigned)o->timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, o->max_header,
                                MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_END);
        if (!s->d)
            st = ts_fail(err, TS_ERR_IO, "serve: cannot listen on %s port %d (in use, or not an address of this "
                                         "machine)", o->host, o->port);
    }
    if (ai) freeaddrinfo(ai);
    if (!st) {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
        s->port = di ? di->port : o->port;
    }
    if (st) {
        ts_server_shutdown(s);
        return st;
    }
    *out = s;
    return TS_OK;
}

int ts_server_port(const ts_server *s) { return s->port; }
int ts_server_slots(const ts_server *s) { return ts_sched_slots(s->sched); }

void ts_server_shutdown(ts_server *s) {
    if (!s) return;
    if (s->d) {
        MHD_socket fd = MHD_quiesce_daemon(s->d); /* no new connections */
        if (fd != MHD_INVALID_SOCKET) close(fd);
    }
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    while (s->inflight > 0) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    if (s->d) MHD_stop_daemon(s->d);
    ts_sched_free(s->sched);
    ts_smetrics_free(s->metrics);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
