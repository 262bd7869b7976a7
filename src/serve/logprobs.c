/* The logprobs JSON of responses and stream chunks. A log-probability that is not finite
 * (a token the model rules out entirely) is written as -9999.0, as OpenAI does, since JSON has
 * no -Infinity. */
#include "serve/logprobs.h"

#include <math.h>
#include <string.h>

#include "serve/api.h"

static json_t *lp_num(float x) { return json_real(isfinite(x) ? (double)x : -9999.0); }

/* The token's text and bytes (an id the tokenizer does not know: empty). */
static const char *tok_bytes(const ts_tok *t, int32_t id, size_t *len) {
    const char *b = ts_tok_token_bytes(t, id, len);
    if (!b) *len = 0;
    return b ? b : "";
}

static json_t *bytes_json(const char *b, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer((unsigned char)b[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* {"token", "logprob", "bytes"} */
static json_t *chat_entry(const ts_tok *t, int32_t id, float lp) {
    size_t n;
    const char *b = tok_bytes(t, id, &n);
    return json_pack("{s:o, s:o, s:o}", "token", ts_api_str_json(b, n), "logprob", lp_num(lp), "bytes",
                     bytes_json(b, n));
}

json_t *ts_api_logprobs_chat(const ts_tok *t, const ts_sreq_token *toks, int n) {
    json_t *content = json_array();
    for (int i = 0; content && i < n; i++) {
        const ts_logprob *lp = &toks[i].lp;
        json_t *e = chat_entry(t, lp->id, lp->logprob), *top = json_array();
        for (int k = 0; top && k < lp->n_top; k++)
            if (json_array_append_new(top, chat_entry(t, lp->top_id[k], lp->top_lp[k]))) {
                json_decref(top);
                top = NULL;
            }
        if (!e || !top || json_object_set_new(e, "top_logprobs", top) || json_array_append_new(content, e)) {
            json_decref(e);
            json_decref(content);
            return NULL;
        }
    }
    return content ? json_pack("{s:o, s:n}", "content", content, "refusal") : NULL;
}

/* Characters of text up to byte b (b only grows between calls). */
static size_t chars_at(const char *text, size_t len, size_t b, ts_api_offsets *cur) {
    if (b > len) b = len;
    if (b < cur->byte) cur->byte = cur->chars = 0; /* not expected: start over */
    for (; cur->byte < b; cur->byte++) cur->chars += ((unsigned char)text[cur->byte] & 0xC0) != 0x80;
    return cur->chars;
}

json_t *ts_api_logprobs_completion(const ts_tok *t, const ts_sreq_token *toks, int n, const char *text,
                                   size_t len, size_t reply, ts_api_offsets *cur) {
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    json_t *o = json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                          "text_offset", offs);
    if (!o) return NULL;
    for (int i = 0; i < n; i++) {
        const ts_sreq_token *tk = &toks[i];
        const ts_logprob *lp = &tk->lp;
        size_t bl;
        const char *b = tok_bytes(t, lp->id, &bl);
        int none = isnan(lp->logprob);
        json_t *top = none ? json_null() : json_object();
        for (int k = 0; top && !none && k <= lp->n_top; k++) {
            /* the most likely, then the token itself (OpenAI: up to logprobs + 1 entries) */
            int32_t id = k < lp->n_top ? lp->top_id[k] : lp->id;
            float v = k < lp->n_top ? lp->top_lp[k] : lp->logprob;
            size_t kl;
            const char *kb = tok_bytes(t, id, &kl);
            json_t *key = ts_api_str_json(kb, kl);
            const char *ks = key ? json_string_value(key) : NULL;
            /* the token itself is added only when it is not among the most likely */
            int fail = !ks || (!(k == lp->n_top && json_object_get(top, ks)) && json_object_set_new(top, ks, lp_num(v)));
            json_decref(key);
            if (fail) {
                json_decref(top);
                top = NULL;
                break;
            }
        }
        size_t at = (tk->prompt ? 0 : reply) + (size_t)tk->offset;
        if (!top || json_array_append_new(tokens, ts_api_str_json(b, bl)) ||
            json_array_append_new(lps, none ? json_null() : lp_num(lp->logprob)) || json_array_append_new(tops, top) ||
            json_array_append_new(offs, json_integer((json_int_t)chars_at(text, len, at, cur)))) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}
