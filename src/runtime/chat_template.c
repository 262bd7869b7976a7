/* Chat template families rendered by hand. Each renderer follows its Jinja template statement
 * by statement (the comments name the template construct being mirrored), so that the output
 * is byte-identical to transformers' apply_chat_template; tests/test_chat_template.c checks
 * that against goldens made by tools/gen_chat_fixtures.py. */
#include "runtime/chat_template.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

struct ts_chat_template {
    ts_chat_family family;
    char *bos; /* bos_token text, "" when none */
    char *what;
};

static const char *k_qwen25_system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
static const char *k_smollm2_system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

static char *dupstr(const char *s) {
    size_t n = strlen(s ? s : "");
    char *d = malloc(n + 1);
    if (d) memcpy(d, s ? s : "", n + 1);
    return d;
}

const char *ts_chat_family_name(ts_chat_family f) {
    switch (f) {
    case TS_CHAT_LLAMA3: return "llama3";
    case TS_CHAT_CHATML: return "chatml";
    case TS_CHAT_QWEN25: return "qwen2.5";
    case TS_CHAT_QWEN3: return "qwen3";
    case TS_CHAT_SMOLLM2: return "smollm2";
    }
    return "?";
}

ts_chat_family ts_chat_template_family(const ts_chat_template *t) { return t->family; }

const char *ts_chat_template_end_of_turn(const ts_chat_template *t) {
    return t->family == TS_CHAT_LLAMA3 ? "<|eot_id|>" : "<|im_end|>";
}

void ts_chat_template_free(ts_chat_template *t) {
    if (!t) return;
    free(t->bos);
    free(t->what);
    free(t);
}

ts_status ts_chat_template_new(const char *tmpl, const char *bos, const char *eos,
                               int has_im_start, const char *what, ts_chat_template **out,
                               ts_error *err) {
    (void)eos;
    *out = NULL;
    ts_chat_family f;
    if (tmpl && strstr(tmpl, "<|start_header_id|>")) {
        /* Llama-3.1/3.2 add a "Cutting Knowledge Date / Today Date" system header whose date
         * comes from the clock; rendering it by guess would silently differ from HF. */
        if (strstr(tmpl, "Cutting Knowledge Date"))
            return ts_fail(err, TS_ERR_UNSUPPORTED,
                           "%s: chat_template is Llama-3.1/3.2's (with the knowledge-cutoff date "
                           "header); only Llama-3's is rendered so far", what);
        f = TS_CHAT_LLAMA3;
    } else if (tmpl && strstr(tmpl, "<|im_start|>")) {
        if (strstr(tmpl, "<think>") && strstr(tmpl, "last_query_index")) f = TS_CHAT_QWEN3;
        else if (strstr(tmpl, "You are Qwen, created by Alibaba Cloud")) f = TS_CHAT_QWEN25;
        else if (strstr(tmpl, "named SmolLM")) f = TS_CHAT_SMOLLM2;
        else f = TS_CHAT_CHATML;
    } else if (has_im_start) {
        f = TS_CHAT_CHATML; /* the tokenizer speaks ChatML; the template is one we do not know */
    } else {
        return ts_fail(err, TS_ERR_UNSUPPORTED,
                       "%s: %s, and the tokenizer has no <|im_start|> token to fall back to "
                       "ChatML; known templates: Llama-3, ChatML, Qwen2.5, Qwen3, SmolLM2", what,
                       tmpl ? "chat_template is not one we recognize" : "no chat_template");
    }
    ts_chat_template *t = calloc(1, sizeof *t);
    if (!t || !(t->bos = dupstr(bos)) || !(t->what = dupstr(what))) {
        ts_chat_template_free(t);
        return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    }
    t->family = f;
    *out = t;
    return TS_OK;
}

/* bos_token / eos_token are a string or an AddedToken object {"content": ...}. */
static const char *token_text(const json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return json_string_value(json_object_get(v, "content"));
    return NULL;
}

ts_status ts_chat_template_load(const char *path, const ts_tok *tok, ts_chat_template **out,
                                ts_error *err) {
    *out = NULL;
    int has_im_start = tok && ts_tok_token_id(tok, "<|im_start|>", 12) >= 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (has_im_start) return ts_chat_template_new(NULL, NULL, NULL, 1, path, out, err);
        return ts_fail(err, TS_ERR_IO, "%s: cannot open (no chat template), and the tokenizer has "
                       "no <|im_start|> token to fall back to ChatML", path);
    }
    json_error_t je;
    json_t *root = json_loadf(f, JSON_DECODE_INT_AS_REAL, &je); /* model_max_length can be 1e30 */
    fclose(f);
    if (!root) return ts_fail(err, TS_ERR_FORMAT, "%s: invalid JSON at line %d: %s", path, je.line, je.text);
    const json_t *ct = json_object_get(root, "chat_template");
    const char *tmpl = NULL;
    if (json_is_string(ct)) {
        tmpl = json_string_value(ct);
    } else if (json_is_array(ct)) { /* named templates: [{"name": "default", "template": ...}] */
        size_t i;
        const json_t *e;
        json_array_foreach(ct, i, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            if (name && !strcmp(name, "default")) tmpl = json_string_value(json_object_get(e, "template"));
        }
    } else if (ct && !json_is_null(ct)) {
        json_decref(root);
        return ts_fail(err, TS_ERR_FORMAT, "%s: chat_template is neither a string nor a list of "
                       "named templates", path);
    }
    ts_status s = ts_chat_template_new(tmpl, token_text(json_object_get(root, "bos_token")),
                                       token_text(json_object_get(root, "eos_token")), has_im_start,
                                       path, out, err);
    json_decref(root);
    return s;
}

/* ---- rendering ---- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

/* Python's str.isspace() for one code point: what Jinja's |trim (str.strip()) removes. */
static int py_space(unsigned cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Decodes the code point at s (length *n); invalid bytes count as one non-space unit. */
static unsigned utf8_at(const unsigned char *s, size_t avail, size_t *n) {
    unsigned c = s[0];
    int k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (k == 0 || (size_t)k > avail) {
        *n = 1;
        return 0xFFFFFFFFu;
    }
    unsigned cp = k == 1 ? c : k == 2 ? c & 0x1F : k == 3 ? c & 0x0F : c & 0x07;
    for (int i = 1; i < k; i++) cp = cp << 6 | (s[i] & 0x3F);
    *n = (size_t)k;
    return cp;
}

/* Jinja |trim: strips Unicode whitespace at both ends. */
static void put_trimmed(sbuf *b, const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    size_t len = strlen(s), a = 0, z = 0, n;
    while (a < len && py_space(utf8_at(u + a, len - a, &n))) a += n;
    /* the end: walk forward remembering where the last non-space character ended */
    for (size_t i = a; i < len; i += n)
        if (!py_space(utf8_at(u + i, len - i, &n))) z = i + n;
    if (z > a) put(b, s + a, z - a);
}

/* Python-style strip of '\n' only (the Qwen3 template's .strip('\n') family). */
static void span_strip_nl(const char **s, size_t *n, int left, int right) {
    while (left && *n && **s == '\n') (*s)++, (*n)--;
    while (right && *n && (*s)[*n - 1] == '\n') (*n)--;
}

static const char *find_last(const char *s, size_t n, const char *pat) {
    size_t m = strlen(pat);
    for (size_t i = n >= m ? n - m + 1 : 0; i-- > 0;)
        if (!memcmp(s + i, pat, m)) return s + i;
    return NULL;
}

static int starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }
static int ends(const char *s, const char *p) {
    size_t a = strlen(s), b = strlen(p);
    return a >= b && !memcmp(s + a - b, p, b);
}
static int is(const char *role, const char *r) { return !strcmp(role, r); }

static void chatml_msg(sbuf *b, const char *role, const char *content) {
    puts_(b, "<|im_start|>");
    puts_(b, role);
    puts_(b, "\n");
    puts_(b, content);
    puts_(b, "<|im_end|>\n");
}

/* {{'<|start_header_id|>' + role + '<|end_header_id|>\n\n' + content|trim + '<|eot_id|>'}},
 * bos_token before the first; the assistant header after the loop is unconditional in
 * Llama-3's template (it ignores add_generation_prompt). */
static void render_llama3(const ts_chat_template *t, sbuf *b, const ts_chat_msg *m, int n) {
    for (int i = 0; i < n; i++) {
        if (i == 0) puts_(b, t->bos);
        puts_(b, "<|start_header_id|>");
        puts_(b, m[i].role);
        puts_(b, "<|end_header_id|>\n\n");
        put_trimmed(b, m[i].content);
        puts_(b, "<|eot_id|>");
    }
    puts_(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Qwen's tool turns: consecutive tool messages share one user turn of <tool_response>s. */
static void qwen_tool(sbuf *b, const ts_chat_msg *m, int n, int i) {
    if (i == 0 || !is(m[i - 1].role, "tool")) puts_(b, "<|im_start|>user");
    puts_(b, "\n<tool_response>\n");
    puts_(b, m[i].content);
    puts_(b, "\n</tool_response>");
    if (i == n - 1 || !is(m[i + 1].role, "tool")) puts_(b, "<|im_end|>\n");
}

/* Qwen2.5 (no tools): system first or the default one; user, later system and assistant
 * messages as ChatML; other roles are dropped by the template's if/elif chain. */
static void render_qwen25(sbuf *b, const ts_chat_msg *m, int n) {
    chatml_msg(b, "system", n > 0 && is(m[0].role, "system") ? m[0].content : k_qwen25_system);
    for (int i = 0; i < n; i++) {
        if (is(m[i].role, "user") || (is(m[i].role, "system") && i > 0) || is(m[i].role, "assistant"))
            chatml_msg(b, m[i].role, m[i].content);
        else if (is(m[i].role, "tool"))
            qwen_tool(b, m, n, i);
    }
}

/* SmolLM2: the default system turn goes first when the conversation has none. */
static void render_smollm2(sbuf *b, const ts_chat_msg *m, int n) {
    for (int i = 0; i < n; i++) {
        if (i == 0 && !is(m[0].role, "system")) chatml_msg(b, "system", k_smollm2_system);
        chatml_msg(b, m[i].role, m[i].content);
    }
}

/* Qwen3 (no tools): reasoning after the last real user query keeps its <think> block, older
 * assistant turns lose it (content after the last </think>). */
static void render_qwen3(sbuf *b, const ts_chat_msg *m, int n) {
    if (n > 0 && is(m[0].role, "system")) chatml_msg(b, "system", m[0].content);
    int last_query = n - 1; /* ns.last_query_index default: messages|length - 1 */
    for (int i = n - 1; i >= 0; i--)
        if (is(m[i].role, "user") &&
            !(starts(m[i].content, "<tool_response>") && ends(m[i].content, "</tool_response>"))) {
            last_query = i;
            break;
        }
    for (int i = 0; i < n; i++) {
        const char *role = m[i].role, *c = m[i].content;
        if (is(role, "user") || (is(role, "system") && i > 0)) {
            chatml_msg(b, role, c);
        } else if (is(role, "assistant")) {
            size_t cl = strlen(c), rl = 0;
            const char *content = c, *reason = "";
            const char *end = find_last(c, cl, "</think>");
            if (end) {
                /* content = c.split('</think>')[-1].lstrip('\n') */
                content = end + 8;
                cl = strlen(content);
                span_strip_nl(&content, &cl, 1, 0);
                /* reasoning = c.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
                const char *first_end = strstr(c, "</think>");
                size_t hl = (size_t)(first_end - c);
                span_strip_nl(&c, &hl, 0, 1);
                const char *open = find_last(c, hl, "<think>");
                reason = open ? open + 7 : c;
                rl = hl - (size_t)(reason - c);
                span_strip_nl(&reason, &rl, 1, 0);
            }
            puts_(b, "<|im_start|>assistant\n");
            if (i > last_query && (i == n - 1 || rl > 0)) {
                span_strip_nl(&reason, &rl, 1, 1);
                span_strip_nl(&content, &cl, 1, 0);
                puts_(b, "<think>\n");
                put(b, reason, rl);
                puts_(b, "\n</think>\n\n");
            }
            put(b, content, cl);
            puts_(b, "<|im_end|>\n");
        } else if (is(role, "tool")) {
            qwen_tool(b, m, n, i);
        }
    }
}

ts_status ts_chat_render(const ts_chat_template *t, const ts_chat_msg *msgs, int n,
                         int add_generation_prompt, int enable_thinking, char **out, size_t *len,
                         ts_error *err) {
    *out = NULL;
    if (n < 0 || (n > 0 && !msgs)) return ts_fail(err, TS_ERR_ARG, "chat template: %d messages", n);
    for (int i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return ts_fail(err, TS_ERR_ARG, "chat template: message %d has no %s", i,
                           msgs[i].role ? "content" : "role");
    /* Qwen's templates read messages[0] unconditionally: Jinja fails on an empty list too. */
    if (n == 0 && (t->family == TS_CHAT_QWEN3 || t->family == TS_CHAT_QWEN25))
        return ts_fail(err, TS_ERR_ARG, "%s: the %s template needs at least one message", t->what,
                       ts_chat_family_name(t->family));
    sbuf b = {0};
    puts_(&b, ""); /* an empty conversation still yields a (possibly empty) string */
    switch (t->family) {
    case TS_CHAT_LLAMA3: render_llama3(t, &b, msgs, n); break;
    case TS_CHAT_QWEN25: render_qwen25(&b, msgs, n); break;
    case TS_CHAT_QWEN3: render_qwen3(&b, msgs, n); break;
    case TS_CHAT_SMOLLM2: render_smollm2(&b, msgs, n); break;
    case TS_CHAT_CHATML:
        for (int i = 0; i < n; i++) chatml_msg(&b, msgs[i].role, msgs[i].content);
        break;
    }
    if (add_generation_prompt && t->family != TS_CHAT_LLAMA3) {
        puts_(&b, "<|im_start|>assistant\n");
        if (t->family == TS_CHAT_QWEN3 && enable_thinking == 0) puts_(&b, "<think>\n\n</think>\n\n");
    }
    if (b.oom) {
        free(b.p);
        return ts_fail(err, TS_ERR_NOMEM, "chat template: out of memory");
    }
    *out = b.p;
    if (len) *len = b.len;
    return TS_OK;
}
