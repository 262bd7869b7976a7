/* OpenAI's request and response JSON (jansson). Every check names the field and what it
 * expects, so a client sees "temperature: expected a number in [0, 2], got \"hot\"" rather
 * than a bare 400; nothing here can fail with anything but 400 for bad input. Text going out
 * is valid UTF-8 (the generator streams whole characters); anything else is repaired, never
 * sent as invalid JSON. */
#include "serve/api.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ts_api_fail(ts_api_error *e, int status, const char *type, const char *param, const char *code,
                const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* A JSON string of possibly invalid UTF-8: bytes that do not form characters become U+FFFD. */
json_t *ts_api_str_json(const char *s, size_t len) {
    json_t *j = json_stringn(s, len);
    if (j) return j;
    char *buf = malloc(len * 3 + 1);
    if (!buf) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        int ok = n > 0 && i + n <= len && c != 0;
        for (size_t k = 1; ok && k < n; k++) ok = ((unsigned char)s[i + k] >> 6) == 2;
        if (ok && n > 1) { /* let jansson judge overlongs and surrogates, one character at a time */
            json_t *t = json_stringn(s + i, n);
            ok = t != NULL;
            json_decref(t);
        }
        if (ok) {
            memcpy(buf + o, s + i, n);
            o += n;
            i += n;
        } else {
            memcpy(buf + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    j = json_stringn(buf, o);
    free(buf);
    return j;
}

static char *dump(json_t *j) {
    if (!j) return NULL;
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

char *ts_api_error_json(const ts_api_error *e) {
    json_t *inner = json_pack("{s:o, s:s, s:o, s:o}", "message", ts_api_str_json(e->message, strlen(e->message)), "type",
                              e->type ? e->type : "invalid_request_error", "param",
                              e->param[0] ? json_string(e->param) : json_null(), "code",
                              e->code ? json_string(e->code) : json_null());
    return dump(inner ? json_pack("{s:o}", "error", inner) : NULL);
}

/* ---- request parsing ---- */

static int bad(ts_api_error *e, const char *field, const char *expect, const json_t *got) {
    char shown[96] = "";
    if (got) {
        char *g = json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY);
        if (g) {
            size_t n = strlen(g);
            if (n > 64) snprintf(shown, sizeof shown, ", got %.60s...", g);
            else snprintf(shown, sizeof shown, ", got %s", g);
        }
        free(g);
    }
    return ts_api_fail(e, 400, "invalid_request_error", field, "invalid_value", "%s: expected %s%s", field, expect,
                       shown);
}

/* The field's value; NULL when absent or null (OpenAI's clients send null for "not given"). */
static const json_t *field(const json_t *o, const char *k) {
    const json_t *v = json_object_get(o, k);
    return v && !json_is_null(v) ? v : NULL;
}

static int get_num(const json_t *o, const char *k, double lo, double hi, const char *range, double *out,
                   ts_api_error *e) {
    const json_t *v = field(o, k);
    if (!v) return 0;
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!json_is_number(v) || !(x >= lo && x <= hi)) {
        char ex[96];
        snprintf(ex, sizeof ex, "a number in %s", range);
        return bad(e, k, ex, v);
    }
    *out = x;
    return 1;
}

static int get_int(const json_t *o, const char *k, long long lo, long long hi, const char *expect, long long *out,
                   ts_api_error *e) {
    const json_t *v = field(o, k);
    if (!v) return 0;
    /* 5.0 is accepted as 5: some clients write every number as a float */
    long long x = 0;
    int ok = 0;
    if (json_is_integer(v)) {
        x = (long long)json_integer_value(v);
        ok = 1;
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        ok = d == floor(d) && d >= -9.2e18 && d <= 9.2e18;
        x = ok ? (long long)d : 0;
    }
    if (!ok || x < lo || x > hi) return bad(e, k, expect, v);
    *out = x;
    return 1;
}

static int get_bool(const json_t *o, const char *k, int *out, ts_api_error *e) {
    const json_t *v = field(o, k);
    if (!v) return 0;
    if (!json_is_boolean(v)) return bad(e, k, "true or false", v);
    *out = json_is_true(v);
    return 1;
}

/* A feature OpenAI has and this server does not: refused by name rather than ignored, when the
 * request asks for something other than the default. */
static int unsupported(ts_api_error *e, const char *k, const char *why) {
    return ts_api_fail(e, 400, "invalid_request_error", k, "unsupported_parameter", "%s: %s", k, why);
}

static int parse_fields(ts_api_request *r, const json_t *o, int max_tokens_limit, ts_api_error *e) {
    const json_t *v;
    if ((v = field(o, "model")) && !json_is_string(v)) return bad(e, "model", "a string", v);
    r->model = v ? json_string_value(v) : NULL;
    if (r->kind == TS_API_CHAT) {
        v = json_object_get(o, "messages");
        if (!v) return ts_api_fail(e, 400, "invalid_request_error", "messages", "missing_required_parameter",
                                   "messages: required (a list of {\"role\", \"content\"} objects)");
        if (!json_is_array(v) || json_array_size(v) == 0) return bad(e, "messages", "a non-empty list of messages", v);
        for (size_t i = 0; i < json_array_size(v); i++) {
            const json_t *m = json_array_get(v, i);
            char f[64];
            snprintf(f, sizeof f, "messages[%zu]", i);
            if (!json_is_object(m)) return bad(e, f, "an object with \"role\" and \"content\"", m);
            const json_t *role = json_object_get(m, "role");
            snprintf(f, sizeof f, "messages[%zu].role", i);
            if (!json_is_string(role)) return bad(e, f, "a string (\"system\", \"user\", \"assistant\", \"tool\")", role);
            const json_t *c = json_object_get(m, "content");
            snprintf(f, sizeof f, "messages[%zu].content", i);
            if (c && !json_is_null(c) && !json_is_string(c) && !json_is_array(c))
                return bad(e, f, "a string, a list of content parts or null", c);
        }
        r->messages = v;
        if ((v = field(o, "tools")) && !json_is_array(v)) return bad(e, "tools", "a list of tools", v);
        r->tools = v;
        r->tool_calls = v && json_array_size(v) > 0;
        if ((v = field(o, "tool_choice"))) {
            /* "required" and a named function need constrained decoding: refused, not ignored */
            const char *c = json_is_string(v) ? json_string_value(v) : NULL;
            if (c && !strcmp(c, "none")) r->tool_calls = 0;
            else if (c && !strcmp(c, "required"))
                return unsupported(e, "tool_choice", "only \"auto\" and \"none\" are supported (no constrained decoding)");
            else if (json_is_object(v))
                return unsupported(e, "tool_choice",
                                   "naming a function is not supported, only \"auto\" and \"none\" (no constrained decoding)");
            else if (!c || strcmp(c, "auto")) return bad(e, "tool_choice", "\"auto\" or \"none\"", v);
        }
        r->parallel_tool_calls = 1;
        if (get_bool(o, "parallel_tool_calls", &r->parallel_tool_calls, e) < 0) return -1;
        if ((v = field(o, "chat_template_kwargs")) && !json_is_object(v))
            return bad(e, "chat_template_kwargs", "an object of template variables", v);
        r->template_vars = v;
    } else {
        v = json_object_get(o, "prompt");
        if (!v) return ts_api_fail(e, 400, "invalid_request_error", "prompt", "missing_required_parameter",
                                   "prompt: required (a string)");
        /* A list of one string is the same prompt; several (a batch) or token ids are not served. */
        if (json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)))
            v = json_array_get(v, 0);
        if (!json_is_string(v)) return bad(e, "prompt", "a string (batches of prompts and token ids are not supported)", v);
        r->prompt = json_string_value(v);
        if (get_bool(o, "echo", &r->echo, e) < 0) return -1;
        if ((v = field(o, "suffix")) && !(json_is_string(v) && json_string_length(v) == 0))
            return unsupported(e, "suffix", "insertion (a suffix) is not supported");
        long long bo = 1;
        if (get_int(o, "best_of", 1, 1, "1 (only one completion per request is served)", &bo, e) < 0) return -1;
    }
    if (get_bool(o, "stream", &r->stream, e) < 0) return -1;
    if ((v = field(o, "stream_options"))) {
        if (!json_is_object(v)) return bad(e, "stream_options", "an object such as {\"include_usage\": true}", v);
        const json_t *iu = field(v, "include_usage");
        if (iu && !json_is_boolean(iu)) return bad(e, "stream_options.include_usage", "true or false", iu);
        r->include_usage = iu && json_is_true(iu);
    }
    long long n = 0;
    /* 0 tokens: the prompt alone, which only echo makes useful (its log-probabilities) */
    long long min = r->echo ? 0 : 1;
    const char *mexp = r->echo ? "an integer >= 0" : "an integer >= 1 (0 only with echo)";
    int has_max = get_int(o, "max_completion_tokens", min, 1LL << 30, mexp, &n, e);
    if (has_max < 0) return -1;
    if (!has_max && (has_max = get_int(o, "max_tokens", min, 1LL << 30, mexp, &n, e)) < 0) return -1;
    if (has_max) {
        const char *k = field(o, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
        if (max_tokens_limit > 0 && n > max_tokens_limit)
            return ts_api_fail(e, 400, "invalid_request_error", k, "invalid_value",
                               "%s: %lld is more than this server serves per request (%d, --max-tokens-limit)", k, n,
                               max_tokens_limit);
        r->max_tokens = (int)n;
    }
    double x = 0;
    int got;
    if ((got = get_num(o, "temperature", 0, 2, "[0, 2]", &x, e)) < 0) return -1;
    if (got) r->sample.temp = (float)x;
    if ((got = get_num(o, "top_p", 0, 1, "(0, 1]", &x, e)) < 0) return -1;
    if (got && x <= 0) return bad(e, "top_p", "a number in (0, 1]", field(o, "top_p"));
    if (got) r->sample.top_p = (float)x;
    if ((got = get_num(o, "min_p", 0, 1, "[0, 1]", &x, e)) < 0) return -1;
    if (got) r->sample.min_p = (float)x;
    if ((got = get_num(o, "repetition_penalty", 1e-3, 100, "(0, 100]", &x, e)) < 0) return -1;
    if (got) r->sample.repeat_penalty = (float)x;
    if ((got = get_int(o, "top_k", 0, 1 << 30, "an integer >= 0 (0: off)", &n, e)) < 0) return -1;
    if (got) r->sample.top_k = (int)n;
    if ((got = get_int(o, "seed", -(1LL << 62), 1LL << 62, "an integer", &n, e)) < 0) return -1;
    if (got) {
        r->sample.seed = (uint64_t)n;
        r->seed_given = 1;
    }
    if ((got = get_int(o, "n", 1, 1, "1 (only one choice per request is served)", &n, e)) < 0) return -1;
    if ((v = field(o, "stop"))) {
        if (json_is_string(v)) {
            if (json_string_length(v)) r->stop[r->n_stop++] = json_string_value(v);
        } else if (json_is_array(v)) {
            if (json_array_size(v) > TS_API_MAX_STOP) {
                char ex[80];
                snprintf(ex, sizeof ex, "at most %d stop strings", TS_API_MAX_STOP);
                return bad(e, "stop", ex, NULL);
            }
            for (size_t i = 0; i < json_array_size(v); i++) {
                const json_t *s = json_array_get(v, i);
                if (!json_is_string(s)) {
                    char f[32];
                    snprintf(f, sizeof f, "stop[%zu]", i);
                    return bad(e, f, "a string", s);
                }
                if (json_string_length(s)) r->stop[r->n_stop++] = json_string_value(s);
            }
        } else return bad(e, "stop", "a string or a list of strings", v);
    }
    static const char *const zero_only[] = {"presence_penalty", "frequency_penalty"};
    for (int i = 0; i < 2; i++)
        if ((got = get_num(o, zero_only[i], -2, 2, "[-2, 2]", &x, e)) < 0) return -1;
        else if (got && x != 0) return unsupported(e, zero_only[i], "only 0 is supported (repetition_penalty is)");
    if (r->kind == TS_API_CHAT) {
        int b = 0;
        if (get_bool(o, "logprobs", &b, e) < 0) return -1;
        if ((got = get_int(o, "top_logprobs", 0, TS_API_MAX_TOP_LOGPROBS, "an integer in [0, 20]", &n, e)) < 0)
            return -1;
        if (got && !b)
            return ts_api_fail(e, 400, "invalid_request_error", "top_logprobs", "invalid_value",
                               "top_logprobs: only with \"logprobs\": true");
        r->logprobs = b ? (got ? (int)n : 0) : -1;
    } else {
        if ((got = get_int(o, "logprobs", 0, TS_API_MAX_LOGPROBS, "an integer in [0, 5] (the alternatives per token)",
                           &n, e)) < 0)
            return -1;
        r->logprobs = got ? (int)n : -1;
    }
    if ((v = field(o, "response_format"))) {
        const json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
        if (!json_is_string(t)) return bad(e, "response_format", "an object {\"type\": \"text\"}", v);
        if (strcmp(json_string_value(t), "text"))
            return unsupported(e, "response_format", "only {\"type\": \"text\"} is supported (no constrained output)");
    }
    return 0;
}

int ts_api_parse(ts_api_kind kind, const char *body, size_t len, const ts_sample_opts *defaults,
                 int max_tokens_limit, ts_api_request *r, ts_api_error *e) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->max_tokens = -1;
    r->logprobs = -1;
    r->sample = *defaults;
    json_error_t je;
    r->root = json_loadb(body, len, JSON_DECODE_ANY, &je);
    if (!r->root)
        return ts_api_fail(e, 400, "invalid_request_error", NULL, "invalid_json",
                           "the request body is not valid JSON: line %d, column %d: %s", je.line, je.column, je.text);
    if (!json_is_object(r->root)) {
        ts_api_fail(e, 400, "invalid_request_error", NULL, "invalid_json",
                    "the request body must be a JSON object, got %s",
                    json_is_array(r->root) ? "a list" : json_is_string(r->root) ? "a string" : "a scalar");
        ts_api_request_free(r);
        return -1;
    }
    if (parse_fields(r, r->root, max_tokens_limit, e)) {
        ts_api_request_free(r);
        return -1;
    }
    return 0;
}

void ts_api_request_free(ts_api_request *r) {
    json_decref(r->root);
    memset(r, 0, sizeof *r);
}

/* ---- responses ---- */

const char *ts_api_finish_reason(int stopped_by_length) { return stopped_by_length ? "length" : "stop"; }

static json_t *usage_json(const ts_api_usage *u) {
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", u->prompt_tokens, "completion_tokens",
                     u->completion_tokens, "total_tokens", u->prompt_tokens + u->completion_tokens,
                     "prompt_tokens_details", "cached_tokens", u->cached_tokens);
}

static json_t *head(const ts_api_meta *m, const char *object) {
    return json_pack("{s:s, s:s, s:I, s:s}", "id", m->id, "object", object, "created", (json_int_t)m->created,
                     "model", m->model);
}

/* The choice's "logprobs" (null when none). */
static json_t *logprobs_of(const ts_api_extra *x) {
    return x && x->logprobs ? json_incref((json_t *)x->logprobs) : json_null(); /* borrowed: one more reference */
}

char *ts_api_response_json(const ts_api_meta *m, const char *text, size_t len, const char *finish_reason,
                           const ts_api_usage *u, const ts_api_extra *x) {
    int chat = m->kind == TS_API_CHAT;
    json_t *o = head(m, chat ? "chat.completion" : "text_completion");
    json_t *choice;
    if (chat) {
        json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content",
                                x && x->content_null ? json_null() : ts_api_str_json(text, len));
        if (msg && x && x->tool_calls) json_object_set_new(msg, "tool_calls", json_incref((json_t *)x->tool_calls));
        choice = json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "message", msg, "logprobs", logprobs_of(x),
                           "finish_reason", finish_reason);
    } else {
        choice = json_pack("{s:o, s:i, s:o, s:s}", "text", ts_api_str_json(text, len), "index", 0, "logprobs",
                           logprobs_of(x), "finish_reason", finish_reason);
    }
    if (!o || !choice) {
        json_decref(o);
        json_decref(choice);
        return NULL;
    }
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    json_object_set_new(o, "usage", usage_json(u));
    return dump(o);
}

char *ts_api_chunk_json(const ts_api_meta *m, const char *text, size_t len, int first, const char *finish_reason,
                        const ts_api_usage *u, int with_usage_null, const ts_api_extra *x) {
    int chat = m->kind == TS_API_CHAT;
    json_t *o = head(m, chat ? "chat.completion.chunk" : "text_completion");
    if (!o) return NULL;
    if (u) {
        json_object_set_new(o, "choices", json_array());
        json_object_set_new(o, "usage", usage_json(u));
        return dump(o);
    }
    json_t *choice;
    if (chat) {
        json_t *delta = json_object();
        if (first) json_object_set_new(delta, "role", json_string("assistant"));
        if (x && x->content_null) json_object_set_new(delta, "content", json_null());
        else if (!finish_reason || len) json_object_set_new(delta, "content", ts_api_str_json(text, len));
        if (x && x->tool_calls) json_object_set_new(delta, "tool_calls", json_incref((json_t *)x->tool_calls));
        choice = json_pack("{s:i, s:o, s:o, s:o}", "index", 0, "delta", delta, "logprobs", logprobs_of(x),
                           "finish_reason", finish_reason ? json_string(finish_reason) : json_null());
    } else {
        choice = json_pack("{s:o, s:i, s:o, s:o}", "text", ts_api_str_json(text, len), "index", 0, "logprobs",
                           logprobs_of(x), "finish_reason", finish_reason ? json_string(finish_reason) : json_null());
    }
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    if (with_usage_null) json_object_set_new(o, "usage", json_null());
    return dump(o);
}

char *ts_api_models_json(const char *model, int64_t created) {
    return dump(json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id", model, "object", "model",
                          "created", (json_int_t)created, "owned_by", "tessera"));
}
