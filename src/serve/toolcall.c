/* Tool-call parsing. The JSON of a call is jansson's to judge (json_loadb stops after one
 * value with JSON_DISABLE_EOF_CHECK and says where), so a call is exactly a JSON object whose
 * "name" is a non-empty string and whose "arguments" (or "parameters", Llama's word) is an
 * object, a string, or absent ({}). */
#include "serve/toolcall.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char k_open[] = "<tool_call>", k_close[] = "</tool_call>";
static const char k_mistral[] = "[TOOL_CALLS]", k_python_tag[] = "<|python_tag|>";

const char *ts_toolcall_format_name(ts_toolcall_format f) {
    switch (f) {
    case TS_TOOLCALL_NONE: return "none";
    case TS_TOOLCALL_HERMES: return "hermes";
    case TS_TOOLCALL_LLAMA3: return "llama3";
    case TS_TOOLCALL_MISTRAL: return "mistral";
    }
    return "?";
}

ts_toolcall_format ts_toolcall_format_of(const char *t) {
    if (!t) return TS_TOOLCALL_NONE;
    if (strstr(t, k_open)) return TS_TOOLCALL_HERMES;
    if (strstr(t, k_mistral)) return TS_TOOLCALL_MISTRAL;
    /* Llama 3.1-3.3: "Environment: ipython", the tool role rendered as ipython, and the
     * {"name": ..., "parameters": ...} answer format */
    if (strstr(t, "ipython") && strstr(t, "\"parameters\"")) return TS_TOOLCALL_LLAMA3;
    return TS_TOOLCALL_NONE;
}

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static size_t skip_ws(const char *s, size_t i, size_t len) {
    while (i < len && is_ws(s[i])) i++;
    return i;
}

static int starts(const char *s, size_t i, size_t len, const char *lit) {
    size_t n = strlen(lit);
    return len - i >= n && !memcmp(s + i, lit, n);
}

static const char *find(const char *s, size_t from, size_t len, const char *lit) {
    size_t n = strlen(lit);
    for (size_t i = from; i + n <= len; i++)
        if (s[i] == lit[0] && !memcmp(s + i, lit, n)) return s + i;
    return NULL;
}

/* One JSON value at s[0..len) (after white space); *end: the bytes it took, white space after
 * it included. NULL when there is none. */
static json_t *json_at(const char *s, size_t len, size_t *end) {
    json_error_t je;
    json_t *j = json_loadb(s, len, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &je);
    if (j) *end = skip_ws(s, (size_t)je.position, len);
    return j;
}

/* A call object into c (name and arguments malloc'd). 0: not a call; -1: out of memory. */
static int call_of(const json_t *o, ts_toolcall *c) {
    if (!json_is_object(o)) return 0;
    const json_t *name = json_object_get(o, "name"), *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    if (!json_is_string(name) || !json_string_length(name) || (args && !json_is_object(args) && !json_is_string(args)))
        return 0;
    c->name = strdup(json_string_value(name));
    c->arguments = !args ? strdup("{}")
                   : json_is_string(args) ? strdup(json_string_value(args))
                                          : json_dumps(args, JSON_COMPACT);
    if (c->name && c->arguments) return 1;
    free(c->name);
    free(c->arguments);
    return -1;
}

typedef struct buf {
    char *p;
    size_t n, cap;
    int oom;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (n > SIZE_MAX / 4) b->oom = 1; /* not reached: every n here is a length inside the reply */
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

/* Appends call c to out (taking its strings). -1: out of memory. */
static int add_call(ts_toolcalls *out, int *cap, ts_toolcall *c) {
    if (out->n == *cap) {
        int nc = *cap ? *cap * 2 : 4;
        ts_toolcall *p = realloc(out->call, sizeof *p * (size_t)nc);
        if (!p) {
            free(c->name);
            free(c->arguments);
            return -1;
        }
        out->call = p;
        *cap = nc;
    }
    out->call[out->n++] = *c;
    return 0;
}

/* The <tool_call> blocks; the text around and between them (and any block that is not a call)
 * is content. The JSON is read first, so a "</tool_call>" inside one of its strings is text; a
 * block without its close tag at the very end is a call when the JSON is whole (a model that
 * stops right after it). A block that is not a call runs to the next close tag. */
static int parse_hermes(const char *s, size_t len, ts_toolcalls *out, buf *content, int *cap) {
    size_t pos = 0;
    const char *a;
    while ((a = find(s, pos, len, k_open))) {
        size_t at = (size_t)(a - s), i = skip_ws(s, at + strlen(k_open), len), used = 0, next = 0;
        json_t *j = i < len ? json_at(s + i, len - i, &used) : NULL;
        ts_toolcall c;
        int ok = 0;
        if (j && (i + used == len || starts(s, i + used, len, k_close))) {
            ok = call_of(j, &c);
            next = i + used == len ? len : i + used + strlen(k_close);
        }
        json_decref(j);
        if (ok < 0) return -1;
        put(content, s + pos, at - pos);
        if (ok) {
            if (add_call(out, cap, &c)) return -1;
        } else {
            const char *cl = find(s, at + strlen(k_open), len, k_close);
            next = cl ? (size_t)(cl - s) + strlen(k_close) : len;
            put(content, s + at, next - at);
        }
        pos = next;
    }
    put(content, s + pos, len - pos);
    return 0;
}

/* [TOOL_CALLS] (gone when the tokenizer has it as a special token) then a list of calls; any
 * text after the list is content. All or nothing: a list with one non-call is content. */
static int parse_mistral(const char *s, size_t len, ts_toolcalls *out, buf *content, int *cap) {
    size_t i = skip_ws(s, 0, len);
    if (starts(s, i, len, k_mistral)) i = skip_ws(s, i + strlen(k_mistral), len);
    size_t used = 0;
    json_t *j = i < len && s[i] == '[' ? json_at(s + i, len - i, &used) : NULL;
    int ok = json_is_array(j) && json_array_size(j) > 0;
    for (size_t k = 0; ok && k < json_array_size(j); k++) {
        ts_toolcall c;
        ok = call_of(json_array_get(j, k), &c);
        if (ok < 0 || (ok && add_call(out, cap, &c))) {
            json_decref(j);
            return -1;
        }
    }
    json_decref(j);
    if (!ok) { /* take back what was added */
        for (int k = 0; k < out->n; k++) free(out->call[k].name), free(out->call[k].arguments);
        out->n = 0;
        put(content, s, len);
        return 0;
    }
    put(content, s + i + used, len - i - used);
    return 0;
}

/* The whole reply (white space and Llama's <|python_tag|> aside) one call object. 1: it was. */
static int parse_whole(const char *s, size_t len, ts_toolcalls *out, int *cap) {
    size_t i = skip_ws(s, 0, len);
    if (starts(s, i, len, k_python_tag)) i = skip_ws(s, i + strlen(k_python_tag), len);
    if (i >= len || s[i] != '{') return 0;
    size_t used = 0;
    json_t *j = json_at(s + i, len - i, &used);
    ts_toolcall c;
    int ok = j && i + used == len ? call_of(j, &c) : 0;
    json_decref(j);
    if (ok < 0) return -1;
    if (ok && add_call(out, cap, &c)) return -1;
    return ok;
}

void ts_toolcalls_free(ts_toolcalls *t) {
    for (int i = 0; i < t->n; i++) {
        free(t->call[i].name);
        free(t->call[i].arguments);
    }
    free(t->call);
    free(t->content);
    memset(t, 0, sizeof *t);
}

int ts_toolcall_parse(ts_toolcall_format f, const char *text, size_t len, ts_toolcalls *out) {
    memset(out, 0, sizeof *out);
    buf content = {0};
    int cap = 0, rc = 0;
    if (f == TS_TOOLCALL_HERMES) rc = parse_hermes(text, len, out, &content, &cap);
    else if (f == TS_TOOLCALL_MISTRAL) rc = parse_mistral(text, len, out, &content, &cap);
    if (!rc && out->n == 0 && f != TS_TOOLCALL_NONE) {
        content.n = 0; /* a whole-reply call (Llama's format, and any model that answers so) */
        rc = parse_whole(text, len, out, &cap);
        if (rc == 1) rc = 0;
        else if (!rc) put(&content, text, len);
    } else if (!rc && f == TS_TOOLCALL_NONE) put(&content, text, len);
    if (!rc && !content.p) put(&content, "", 0);
    if (rc || content.oom) {
        free(content.p);
        ts_toolcalls_free(out);
        return -1;
    }
    out->content = content.p;
    out->content_len = content.n;
    out->content_blank = skip_ws(content.p, 0, content.n) == content.n;
    return 0;
}

size_t ts_toolcall_safe(ts_toolcall_format f, const char *text, size_t len) {
    if (f == TS_TOOLCALL_NONE) return len;
    size_t i = skip_ws(text, 0, len);
    if (i == len) return 0;                          /* white space so far: not known yet */
    if (text[i] == '{' || text[i] == '[') return 0;  /* a whole-reply call, perhaps */
    size_t m = len - i < strlen(k_python_tag) ? len - i : strlen(k_python_tag);
    if (!memcmp(text + i, k_python_tag, m)) return 0; /* Llama's tag written out, or its start */
    if (f != TS_TOOLCALL_HERMES) return len;
    const char *a = find(text, 0, len, k_open);
    if (a) return (size_t)(a - text);
    /* a suffix that could still become "<tool_call>" */
    size_t n = strlen(k_open);
    for (size_t k = n - 1; k > 0; k--)
        if (len >= k && !memcmp(text + len - k, k_open, k)) return len - k;
    return len;
}

void ts_toolcall_id(ts_toolcall_format f, const char *seed, int i, char *out, size_t n) {
    static const char k_alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a of the seed, then splitmix64 per character */
    for (const char *p = seed; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    h ^= (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
    int mistral = f == TS_TOOLCALL_MISTRAL, k = 0, want = mistral ? 9 : 24;
    char id[40];
    if (!mistral) memcpy(id, "call_", 5), k = 5;
    for (int j = 0; j < want; j++) {
        uint64_t z = (h += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        id[k++] = k_alnum[(z ^ (z >> 31)) % 62];
    }
    id[k] = 0;
    snprintf(out, n, "%s", id);
}

json_t *ts_toolcall_json(const ts_toolcalls *t, int first, int n, ts_toolcall_format f, const char *seed,
                         int with_index) {
    json_t *a = json_array();
    for (int i = first; a && i < first + n && i < t->n; i++) {
        char id[40];
        ts_toolcall_id(f, seed, i, id, sizeof id);
        json_t *c = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function", "name",
                              t->call[i].name, "arguments", t->call[i].arguments);
        if (c && with_index && json_object_set_new(c, "index", json_integer(i))) json_decref(c), c = NULL;
        if (!c || json_array_append_new(a, c)) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* ---- the arguments of tool calls sent back ---- */

/* Renders the probe (a question, an assistant turn calling probe_fn, its result) with the
 * given content and arguments; 1 when it renders and the arguments appear as an object. */
static int probe(const ts_chat_template *t, const char *content, int object, int *rendered) {
    char msgs[1024];
    snprintf(msgs, sizeof msgs,
             "[{\"role\": \"user\", \"content\": \"q\"},"
             " {\"role\": \"assistant\", \"content\": %s, \"tool_calls\": [{\"id\": \"abcdEFG12\", \"type\": \"function\","
             " \"function\": {\"name\": \"probe_fn\", \"arguments\": %s}}]},"
             " {\"role\": \"tool\", \"tool_call_id\": \"abcdEFG12\", \"content\": \"r\"}]",
             content, object ? "{\"probe_arg\": \"probe_val\"}" : "\"{\\\"probe_arg\\\": \\\"probe_val\\\"}\"");
    static const char k_tools[] = "[{\"type\": \"function\", \"function\": {\"name\": \"probe_fn\", \"description\": \"d\","
                                  " \"parameters\": {\"type\": \"object\", \"properties\": {\"probe_arg\": {\"type\": \"string\"}}}}}]";
    json_t *m = json_loads(msgs, 0, NULL), *tools = json_loads(k_tools, 0, NULL);
    char *out = NULL;
    ts_error err;
    *rendered = m && tools && !ts_chat_render_json(t, m, tools, NULL, 1, &out, NULL, &err) && out;
    int obj = *rendered && (strstr(out, "\"probe_arg\": \"probe_val\"") || strstr(out, "\"probe_arg\":\"probe_val\""));
    free(out);
    json_decref(m);
    json_decref(tools);
    return obj;
}

void ts_toolcall_caps_of(const ts_chat_template *t, ts_toolcall_caps *out) {
    int ok;
    memset(out, 0, sizeof *out);
    if (probe(t, "null", 1, &ok)) { /* as sent, with the arguments an object */
        out->object_args = 1;
        return;
    }
    if (ok) return; /* renders, but not the object as JSON: leave the arguments alone */
    probe(t, "null", 0, &ok);
    if (ok) return; /* the arguments as a string: as sent (DeepSeek) */
    out->empty_content = 1;
    out->object_args = probe(t, "\"\"", 1, &ok);
}

json_t *ts_toolcall_fix_messages(const json_t *messages, const ts_toolcall_caps *caps) {
    json_t *m = json_deep_copy(messages);
    for (size_t i = 0; m && i < json_array_size(m); i++) {
        json_t *msg = json_array_get(m, i), *calls = json_object_get(msg, "tool_calls");
        if (!json_is_array(calls) || !json_array_size(calls)) continue;
        const json_t *c = json_object_get(msg, "content");
        if (caps->empty_content && (!c || json_is_null(c)) && json_object_set_new(msg, "content", json_string(""))) {
            json_decref(m);
            return NULL;
        }
        for (size_t k = 0; caps->object_args && k < json_array_size(calls); k++) {
            json_t *fn = json_object_get(json_array_get(calls, k), "function");
            json_t *args = json_object_get(fn, "arguments");
            if (!json_is_string(args)) continue;
            json_t *o = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
            if (json_is_object(o)) json_object_set_new(fn, "arguments", o);
            else json_decref(o);
        }
    }
    return m;
}
