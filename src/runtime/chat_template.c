/* Chat templates run by the Jinja interpreter (runtime/jinja/), with the inputs transformers'
 * apply_chat_template gives a template (utils/chat_template_utils.py, render_jinja_template):
 * messages with their null fields dropped and reasoning aliased, tools (none when absent),
 * documents (none), add_generation_prompt, the tokenizer's special tokens and the caller's
 * variables. Where the template text comes from (tokenizer_config.json, chat_template.jinja,
 * a GGUF, a file) and the ChatML fallback are decided here too. */
#include "runtime/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "io/gguf.h"
#include "io/json.h"
#include "io/mmap.h"
#include "runtime/jinja/jinja.h"

/* The ChatML layout of the Qwen/SmolLM family, for a tokenizer with <|im_start|> and no
 * template of its own (transformers' old default_chat_template, content printed as is so that
 * a tool-call turn without content renders). */
static const char k_chatml[] =
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}{{ message['content'] }}{{ '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/* The markers that close a turn, most specific first: the first one the template writes is
 * where generation of a reply stops. */
static const char *const k_end_of_turn[] = {"<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>",
                                            "<|END_OF_TURN_TOKEN|>", "<|eot|>", "<|return|>"};

static const char *const k_special_keys[] = {"bos_token", "eos_token", "unk_token", "pad_token"};

/* A tokenizer_config.json can hold a model_max_length of 1e30 written as an integer. */
#define TS_CHAT_MAX_CONFIG ((size_t)64 << 20)

struct ts_chat_template {
    ts_jinja *j;
    char *text;
    char *source;
    char *eot; /* NULL when none is known */
    json_t *specials; /* bos_token, eos_token, ... (only those the tokenizer defines) */
    int64_t now;      /* -1: the local time at each render */
};

void ts_chat_template_free(ts_chat_template *t) {
    if (!t) return;
    ts_jinja_free(t->j);
    free(t->text);
    free(t->source);
    free(t->eot);
    json_decref(t->specials);
    free(t);
}

const char *ts_chat_template_source(const ts_chat_template *t) { return t->source; }
const char *ts_chat_template_text(const ts_chat_template *t) { return t->text; }
const char *ts_chat_template_end_of_turn(const ts_chat_template *t) { return t->eot; }
void ts_chat_template_set_now(ts_chat_template *t, int64_t now) { t->now = now; }

/* Takes ownership of specials (may be NULL). tmpl NULL: the ChatML fallback when the tokenizer
 * has <|im_start|>, else an error naming `what`. */
static ts_status make(const char *tmpl, json_t *specials, int has_im_start, const char *what,
                      ts_chat_template **out, ts_error *err) {
    *out = NULL;
    char source[1200];
    if (!tmpl && !has_im_start) {
        json_decref(specials);
        return ts_fail(err, TS_ERR_UNSUPPORTED,
                       "%s: no chat template (no \"chat_template\" and no chat_template.jinja), and the tokenizer "
                       "has no <|im_start|> token to fall back to ChatML; pass one with --chat-template FILE",
                       what);
    }
    if (!tmpl) {
        fprintf(stderr, "tessera: %s has no chat template; using ChatML (the tokenizer has <|im_start|>)\n", what);
        snprintf(source, sizeof source, "ChatML fallback (%s has no chat template)", what);
        tmpl = k_chatml;
    } else {
        snprintf(source, sizeof source, "%s", what);
    }
    ts_chat_template *t = calloc(1, sizeof *t);
    if (!t) {
        json_decref(specials);
        return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    }
    t->now = -1;
    t->specials = specials ? specials : json_object();
    t->text = strdup(tmpl);
    t->source = strdup(source);
    if (!t->specials || !t->text || !t->source) {
        ts_chat_template_free(t);
        return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    }
    ts_status st = ts_jinja_parse(t->text, strlen(t->text), t->source, &t->j, err);
    if (st) {
        ts_chat_template_free(t);
        return st;
    }
    for (size_t i = 0; i < sizeof k_end_of_turn / sizeof k_end_of_turn[0] && !t->eot; i++)
        if (strstr(t->text, k_end_of_turn[i]) && !(t->eot = strdup(k_end_of_turn[i]))) st = TS_ERR_NOMEM;
    const char *eos = json_string_value(json_object_get(t->specials, "eos_token"));
    if (!t->eot && eos && *eos && !(t->eot = strdup(eos))) st = TS_ERR_NOMEM;
    if (st) {
        ts_chat_template_free(t);
        return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    }
    *out = t;
    return TS_OK;
}

/* {"bos_token": bos, "eos_token": eos} without the NULL ones. */
static json_t *specials_of(const char *bos, const char *eos) {
    json_t *o = json_object();
    if (o && bos) json_object_set_new(o, "bos_token", json_string(bos));
    if (o && eos) json_object_set_new(o, "eos_token", json_string(eos));
    return o;
}

ts_status ts_chat_template_new(const char *tmpl, const char *bos, const char *eos, int has_im_start,
                               const char *what, ts_chat_template **out, ts_error *err) {
    json_t *sp = specials_of(bos, eos);
    if (!sp) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    return make(tmpl, sp, has_im_start, what, out, err);
}

/* The spelling of a token id, NUL-terminated, or NULL. */
static char *tok_text(const ts_tok *tok, int32_t id) {
    size_t n;
    const char *p = tok && id >= 0 ? ts_tok_token_str(tok, id, &n) : NULL;
    return p ? strndup(p, n) : NULL;
}

static json_t *specials_of_tok(const ts_tok *tok) {
    char *bos = tok_text(tok, tok ? ts_tok_bos(tok) : -1), *eos = tok_text(tok, tok ? ts_tok_eos(tok) : -1);
    json_t *o = specials_of(bos, eos);
    free(bos);
    free(eos);
    return o;
}

static int has_chatml(const ts_tok *tok) { return tok && ts_tok_token_id(tok, "<|im_start|>", 12) >= 0; }

/* Reads a template file (a .jinja) into *text. */
static ts_status read_template(const char *path, char **text, ts_error *err) {
    size_t len;
    ts_status st = ts_file_read_all(path, TS_CHAT_MAX_CONFIG, text, &len, err);
    if (st) return st;
    if (memchr(*text, 0, len)) {
        size_t at = (size_t)((char *)memchr(*text, 0, len) - *text);
        free(*text);
        *text = NULL;
        return ts_fail(err, TS_ERR_FORMAT, "%s: a NUL byte at byte %zu of %zu, expected a template text", path, at,
                       len);
    }
    return TS_OK;
}

/* bos_token and friends are a string or an AddedToken object {"content": ...}. */
static const char *token_text(const json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return json_string_value(json_object_get(v, "content"));
    return NULL;
}

ts_status ts_chat_template_load_with(const char *config, const char *jinja, const ts_tok *tok,
                                     ts_chat_template **out, ts_error *err) {
    *out = NULL;
    /* chat_template.jinja lives beside tokenizer_config.json (newer transformers save it there) */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", config);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    char *beside = ts_path_join(dir, "chat_template.jinja");
    if (!beside) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    json_t *root = NULL, *sp = NULL;
    char *text = NULL, what[4400];
    const char *tmpl = NULL;
    ts_status st = TS_OK;
    if (ts_file_exists(config)) {
        char *buf;
        size_t len;
        st = ts_file_read_all(config, TS_CHAT_MAX_CONFIG, &buf, &len, err);
        if (!st) {
            json_error_t je;
            root = json_loadb(buf, len, JSON_DECODE_INT_AS_REAL, &je);
            free(buf);
            if (!root)
                st = ts_fail(err, TS_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", config, je.line,
                             je.column, je.text);
            else if (!json_is_object(root))
                st = ts_fail(err, TS_ERR_FORMAT, "%s: the document is %s, expected an object", config,
                             ts_json_type_name(root));
        }
        if (!st && !(sp = json_object())) st = ts_fail(err, TS_ERR_NOMEM, "out of memory");
        for (size_t i = 0; !st && i < sizeof k_special_keys / sizeof k_special_keys[0]; i++) {
            const char *v = token_text(json_object_get(root, k_special_keys[i]));
            if (v) json_object_set_new(sp, k_special_keys[i], json_string(v));
        }
        const json_t *ct = st || jinja ? NULL : json_object_get(root, "chat_template");
        if (json_is_string(ct)) {
            tmpl = json_string_value(ct);
            snprintf(what, sizeof what, "%s chat_template", config);
        } else if (json_is_array(ct)) { /* named templates: [{"name": "default", "template": ...}] */
            size_t i;
            const json_t *e;
            json_array_foreach(ct, i, e) {
                const char *name = json_string_value(json_object_get(e, "name"));
                if (name && !strcmp(name, "default")) tmpl = json_string_value(json_object_get(e, "template"));
            }
            if (!tmpl)
                st = ts_fail(err, TS_ERR_FORMAT, "%s: chat_template is a list of named templates without a "
                             "\"default\" one", config);
            snprintf(what, sizeof what, "%s chat_template \"default\"", config);
        } else if (ct && !json_is_null(ct)) {
            st = ts_fail(err, TS_ERR_FORMAT, "%s: chat_template is %s, expected a string or a list of named "
                         "templates", config, ts_json_type_name(ct));
        }
    } else if (!jinja && !ts_file_exists(beside) && !has_chatml(tok)) {
        st = ts_fail(err, TS_ERR_IO, "%s: no such file, and no chat_template.jinja beside it: no chat template "
                     "(pass one with --chat-template FILE)", config);
    } else {
        sp = specials_of_tok(tok);
        if (!sp) st = ts_fail(err, TS_ERR_NOMEM, "out of memory");
    }
    const char *file = jinja ? jinja : !tmpl && ts_file_exists(beside) ? beside : NULL;
    if (!st && file) {
        st = read_template(file, &text, err);
        tmpl = text;
        snprintf(what, sizeof what, "%s", file);
    }
    if (!st) {
        if (!tmpl) snprintf(what, sizeof what, "%s", config);
        st = make(tmpl, sp, has_chatml(tok), what, out, err);
        sp = NULL;
    }
    json_decref(sp);
    json_decref(root);
    free(text);
    free(beside);
    return st;
}

ts_status ts_chat_template_load(const char *path, const ts_tok *tok, ts_chat_template **out, ts_error *err) {
    return ts_chat_template_load_with(path, NULL, tok, out, err);
}

ts_status ts_chat_template_file(const char *path, const ts_tok *tok, ts_chat_template **out, ts_error *err) {
    *out = NULL;
    char *text;
    ts_status st = read_template(path, &text, err);
    if (st) return st;
    json_t *sp = specials_of_tok(tok);
    st = sp ? make(text, sp, 0, path, out, err) : ts_fail(err, TS_ERR_NOMEM, "out of memory");
    free(text);
    return st;
}

ts_status ts_chat_template_gguf(const ts_gguf *g, const ts_tok *tok, ts_chat_template **out, ts_error *err) {
    *out = NULL;
    const char *t;
    size_t n;
    ts_status st = ts_gguf_get_str(g, "tokenizer.chat_template", 0, &t, &n, err);
    if (st) return st;
    if (t && memchr(t, 0, n))
        return ts_fail(err, TS_ERR_FORMAT, "%s: metadata \"tokenizer.chat_template\" contains a NUL byte at byte %zu "
                       "of %zu, expected a template text", g->path, (size_t)((const char *)memchr(t, 0, n) - t), n);
    char *tmpl = t ? strndup(t, n) : NULL, what[4200];
    if (t && !tmpl) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    snprintf(what, sizeof what, "%s tokenizer.chat_template", g->path);
    json_t *sp = specials_of_tok(tok);
    if (!sp) st = ts_fail(err, TS_ERR_NOMEM, "out of memory");
    else if (!tmpl && !has_chatml(tok)) {
        json_decref(sp);
        st = ts_fail(err, TS_ERR_UNSUPPORTED, "%s: no chat template (metadata \"tokenizer.chat_template\"), and the "
                     "tokenizer has no <|im_start|> token to fall back to ChatML; pass one with --chat-template FILE",
                     g->path);
    } else st = make(tmpl, sp, has_chatml(tok), tmpl ? what : g->path, out, err);
    free(tmpl);
    return st;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

ts_status ts_chat_template_open(const char *path, const char *override, ts_chat_template **out, ts_error *err) {
    *out = NULL;
    ts_status st = TS_OK;
    if (ts_dir_exists(path)) {
        char *cfg = ts_path_join(path, "tokenizer_config.json"), *tj = ts_path_join(path, "tokenizer.json");
        if (!cfg || !tj) st = ts_fail(err, TS_ERR_NOMEM, "out of memory");
        ts_tok *tok = NULL;
        /* The tokenizer only matters when there is no template (is ChatML its language?), and
         * a 150k-token vocabulary is not free to load: only then. */
        if (!st) st = ts_chat_template_load_with(cfg, override, NULL, out, err);
        if ((st == TS_ERR_UNSUPPORTED || st == TS_ERR_IO) && !override && ts_file_exists(tj)) {
            ts_error e2;
            if (!ts_tok_load(path, &tok, &e2)) st = ts_chat_template_load_with(cfg, NULL, tok, out, err);
        }
        ts_tok_free(tok);
        free(cfg);
        free(tj);
        return st;
    }
    if (!ts_file_exists(path)) return ts_fail(err, TS_ERR_IO, "%s: no such file or directory", path);
    if (ts_gguf_is_file(path)) {
        ts_gguf g;
        ts_tok *tok = NULL;
        st = ts_gguf_open(path, &g, err);
        if (st) return st;
        st = ts_tok_from_gguf(&g, &tok, err);
        if (!st && override) st = ts_chat_template_file(override, tok, out, err);
        else if (!st) st = ts_chat_template_gguf(&g, tok, out, err);
        ts_tok_free(tok);
        ts_gguf_close(&g);
        return st;
    }
    if (override) return ts_chat_template_load_with(path, override, NULL, out, err);
    if (ends_with(path, ".json")) return ts_chat_template_load(path, NULL, out, err);
    return ts_chat_template_file(path, NULL, out, err);
}

/* ---- the date strftime_now sees ---- */

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar (H. Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* The local wall-clock time as seconds that, formatted as UTC, read as local time: what
 * Python's datetime.now().strftime gives. */
static int64_t local_now(void) {
    time_t t = time(NULL);
    struct tm lt;
    if (!localtime_r(&t, &lt)) return (int64_t)t;
    return days_from_civil(lt.tm_year + 1900, lt.tm_mon + 1, lt.tm_mday) * 86400 + lt.tm_hour * 3600 +
           lt.tm_min * 60 + (lt.tm_sec > 59 ? 59 : lt.tm_sec);
}

static int digits(const char *s, int n, int *out) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

int64_t ts_chat_parse_date(const char *text, const char *what, ts_error *err) {
    int y, mo, d, h = 0, mi = 0, s = 0;
    size_t n = text ? strlen(text) : 0;
    int ok = (n == 10 || n == 19) && !digits(text, 4, &y) && text[4] == '-' && !digits(text + 5, 2, &mo) &&
             text[7] == '-' && !digits(text + 8, 2, &d);
    if (ok && n == 19)
        ok = (text[10] == 'T' || text[10] == ' ') && !digits(text + 11, 2, &h) && text[13] == ':' &&
             !digits(text + 14, 2, &mi) && text[16] == ':' && !digits(text + 17, 2, &s);
    static const int mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (ok) {
        int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        ok = y >= 1970 && mo >= 1 && mo <= 12 && d >= 1 && d <= mdays[mo - 1] && !(mo == 2 && d == 29 && !leap) &&
             h < 24 && mi < 60 && s < 60;
    }
    if (!ok) {
        ts_fail(err, TS_ERR_ARG, "%s expects a date YYYY-MM-DD (or YYYY-MM-DDTHH:MM:SS) from 1970 on, got \"%s\"",
                what ? what : "the date", text ? text : "");
        return -1;
    }
    return days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s;
}

/* ---- rendering ---- */

/* The message as transformers hands it to the template: top-level nulls dropped, then
 * {"thinking": R, **message, "reasoning_content": R} when any reasoning field is set. */
static json_t *normalize(const json_t *m) {
    static const char *const k_reasoning[] = {"reasoning_content", "thinking", "reasoning"};
    json_t *r = NULL;
    for (size_t i = 0; i < 3 && !r; i++) {
        json_t *v = json_object_get(m, k_reasoning[i]);
        if (v && !json_is_null(v)) r = v;
    }
    json_t *o = json_object();
    if (!o) return NULL;
    /* jansson keeps insertion order, and setting an existing key keeps its place: as a dict */
    if (r && json_object_set(o, "thinking", r)) goto fail;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v) {
        if (!json_is_null(v) && json_object_set(o, k, v)) goto fail;
    }
    if (r && json_object_set(o, "reasoning_content", r)) goto fail;
    return o;
fail:
    json_decref(o);
    return NULL;
}

ts_status ts_chat_render_json(const ts_chat_template *t, const json_t *messages, const json_t *tools,
                              const json_t *vars, int add_generation_prompt, char **out, size_t *len,
                              ts_error *err) {
    *out = NULL;
    if (len) *len = 0;
    if (!json_is_array(messages))
        return ts_fail(err, TS_ERR_ARG, "messages: expected a list of message objects, found %s",
                       ts_json_type_name(messages));
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return ts_fail(err, TS_ERR_ARG, "tools: expected a list of tool definitions, found %s",
                       ts_json_type_name(tools));
    if (vars && !json_is_object(vars))
        return ts_fail(err, TS_ERR_ARG, "template variables: expected an object, found %s", ts_json_type_name(vars));
    size_t i;
    const json_t *m;
    json_array_foreach(messages, i, m) {
        if (!json_is_object(m))
            return ts_fail(err, TS_ERR_ARG, "messages[%zu]: expected a message object ({\"role\": ..., "
                           "\"content\": ...}), found %s", i, ts_json_type_name(m));
    }
    json_t *g = json_deep_copy(t->specials), *ms = json_array();
    int oom = !g || !ms;
    if (!oom && vars) oom = json_object_update((json_t *)g, (json_t *)vars) != 0;
    json_array_foreach(messages, i, m) {
        if (!oom) oom = json_array_append_new(ms, normalize(m)) != 0;
    }
    if (!oom) {
        oom = json_object_set(g, "messages", ms) || json_object_set_new(g, "tools", tools ? json_incref((json_t *)tools)
                                                                                          : json_null()) ||
              json_object_set_new(g, "documents", json_null()) ||
              json_object_set_new(g, "add_generation_prompt", json_boolean(add_generation_prompt));
    }
    json_decref(ms);
    ts_status st;
    size_t n = 0;
    if (oom) st = ts_fail(err, TS_ERR_NOMEM, "out of memory");
    else st = ts_jinja_render(t->j, g, t->now >= 0 ? t->now : local_now(), NULL, out, &n, err);
    if (len) *len = n;
    json_decref(g);
    return st;
}

ts_status ts_chat_render(const ts_chat_template *t, const ts_chat_msg *msgs, int n, int add_generation_prompt,
                         int enable_thinking, char **out, size_t *len, ts_error *err) {
    *out = NULL;
    if (len) *len = 0;
    for (int i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return ts_fail(err, TS_ERR_ARG, "message %d has no %s", i, msgs[i].role ? "content" : "role");
    json_t *ms = json_array(), *vars = json_object();
    int oom = !ms || !vars, bad = -1;
    for (int i = 0; i < n && !oom && bad < 0; i++) {
        json_t *o = json_object(), *role = json_string(msgs[i].role), *content = json_string(msgs[i].content);
        if (!role || !content) { /* jansson refuses text that is not UTF-8 */
            json_decref(o);
            json_decref(role);
            json_decref(content);
            bad = i;
            break;
        }
        oom = !o || json_object_set_new(o, "role", role) || json_object_set_new(o, "content", content) ||
              json_array_append_new(ms, o);
    }
    if (!oom && enable_thinking >= 0) oom = json_object_set_new(vars, "enable_thinking", json_boolean(enable_thinking));
    ts_status st = bad >= 0 ? ts_fail(err, TS_ERR_ARG, "message %d: its role or content is not valid UTF-8", bad)
                   : oom    ? ts_fail(err, TS_ERR_NOMEM, "out of memory")
                            : ts_chat_render_json(t, ms, NULL, vars, add_generation_prompt, out, len, err);
    json_decref(ms);
    json_decref(vars);
    return st;
}
