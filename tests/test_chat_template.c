/* Chat templates through the Jinja interpreter, byte-for-byte against transformers'
 * apply_chat_template: every case of tests/fixtures/chat/golden.json (tools/gen_chat_fixtures.py:
 * Llama-3 and Qwen3 from the real tokenizer_config.json files under TS_REALDATA, Qwen2.5 and
 * SmolLM2 from fixture configs), Llama-3.2's template given as a --chat-template file with a
 * fixed date (tests/fixtures/templates/golden.json), a GGUF's template, the message
 * normalization transformers does, the ChatML fallback, dates, and the errors. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/gguf.h"
#include "runtime/chat_template.h"
#include "tharness.h"
#include "tok/tokenizer.h"

/* Index of the first differing byte. */
static size_t first_diff(const char *a, size_t na, const char *b, size_t nb) {
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

static void check_same(const char *what, const char *out, size_t len, const char *exp, size_t nexp) {
    size_t d = first_diff(out, len, exp, nexp);
    CHECK(len == nexp && d == nexp, "%s: differs at byte %zu (%zu vs %zu bytes)\n  got: %.80s\n  exp: %.80s", what, d,
          len, nexp, out + (d < len ? d : len), exp + (d < nexp ? d : nexp));
}

static void test_goldens(void) {
    json_error_t je;
    json_t *root = json_load_file(th_fixture("chat/golden.json"), 0, &je);
    CHECK(root != NULL, "golden.json: %s", je.text);
    if (!root) return;
    json_t *cases = json_object_get(root, "cases");
    size_t i;
    json_t *c;
    int n = 0;
    json_t *counts = json_object();
    json_array_foreach(cases, i, c) {
        const char *where = json_string_value(json_object_get(c, "root"));
        const char *rel = json_string_value(json_object_get(c, "config"));
        const char *fam = json_string_value(json_object_get(c, "family"));
        const char *title = json_string_value(json_object_get(c, "title"));
        const char *path = !strcmp(where, "shared") ? th_shared(rel) : th_fixture(rel);
        ts_chat_template *t = NULL;
        ts_error err;
        ts_status s = ts_chat_template_load(path, NULL, &t, &err);
        CHECK(s == TS_OK, "%s: %s", path, err.msg);
        if (s) continue;
        CHECK(strstr(ts_chat_template_source(t), rel) != NULL, "source \"%s\" does not name %s",
              ts_chat_template_source(t), rel);
        json_t *ms = json_object_get(c, "messages");
        int nm = (int)json_array_size(ms);
        ts_chat_msg msgs[16];
        for (int k = 0; k < nm && k < 16; k++) {
            json_t *m = json_array_get(ms, (size_t)k);
            msgs[k].role = json_string_value(json_object_get(m, "role"));
            msgs[k].content = json_string_value(json_object_get(m, "content"));
        }
        int gen = json_is_true(json_object_get(c, "add_generation_prompt"));
        int think = (int)json_integer_value(json_object_get(c, "enable_thinking"));
        const char *exp = json_string_value(json_object_get(c, "expected"));
        size_t nexp = json_string_length(json_object_get(c, "expected"));
        char what[512];
        snprintf(what, sizeof what, "%s \"%s\" gen=%d thinking=%d", fam, title, gen, think);
        /* the plain entry point, and the JSON one with the same conversation */
        char *out = NULL;
        size_t len = 0;
        s = ts_chat_render(t, msgs, nm, gen, think, &out, &len, &err);
        CHECK(s == TS_OK, "%s: render: %s", what, err.msg);
        if (out) check_same(what, out, len, exp, nexp);
        free(out);
        json_t *vars = json_object();
        if (think >= 0) json_object_set_new(vars, "enable_thinking", json_boolean(think));
        out = NULL;
        s = ts_chat_render_json(t, ms, NULL, vars, gen, &out, &len, &err);
        CHECK(s == TS_OK, "%s: render_json: %s", what, err.msg);
        if (out) check_same(what, out, len, exp, nexp);
        free(out);
        json_decref(vars);
        json_object_set_new(counts, fam, json_integer(json_integer_value(json_object_get(counts, fam)) + 1));
        n++;
        ts_chat_template_free(t);
    }
    char *summary = json_dumps(counts, JSON_COMPACT);
    printf("golden cases: %d %s\n", n, summary ? summary : "");
    free(summary);
    CHECK(n >= 90 && json_object_size(counts) == 4, "too few goldens: %d", n);
    json_decref(counts);
    json_decref(root);
}

/* The case of tests/fixtures/templates/golden.json for (template, conversation, gen). */
static const char *template_golden(json_t *root, const char *tmpl, const char *conv, int gen, size_t *len) {
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        if (!strcmp(json_string_value(json_object_get(c, "template")), tmpl) &&
            !strcmp(json_string_value(json_object_get(c, "conversation")), conv) &&
            json_is_true(json_object_get(c, "add_generation_prompt")) == gen) {
            json_t *o = json_object_get(c, "output");
            *len = json_string_length(o);
            return json_string_value(o);
        }
    }
    return NULL;
}

static json_t *conversation(json_t *root, const char *id) {
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(root, "conversations"), i, c) {
        if (!strcmp(json_string_value(json_object_get(c, "id")), id)) return c;
    }
    return NULL;
}

/* Llama-3.2's template (the knowledge-cutoff/date header) as a --chat-template file over the
 * llama3 tokenizer's config: the date comes from set_now, the specials from the config. */
static void test_template_file_and_date(void) {
    json_error_t je;
    json_t *root = json_load_file(th_fixture("templates/golden.json"), 0, &je);
    CHECK(root != NULL, "templates/golden.json: %s", je.text);
    if (!root) return;
    ts_error err;
    int64_t now = ts_chat_parse_date(json_string_value(json_object_get(root, "date")), "date", &err);
    CHECK(now == 1773480413, "golden date: %lld %s", (long long)now, err.msg);
    const char *jinja = "templates/meta-llama-Llama-3.2-3B-Instruct.jinja";
    char jpath[4096];
    snprintf(jpath, sizeof jpath, "%s", th_shared(jinja));
    ts_chat_template *t = NULL;
    ts_status s = ts_chat_template_load_with(th_shared("tokenizers/llama3/tokenizer_config.json"), jpath, NULL, &t, &err);
    CHECK(s == TS_OK, "load_with: %s", err.msg);
    if (!s) {
        CHECK(strstr(ts_chat_template_source(t), jinja) != NULL, "source: %s", ts_chat_template_source(t));
        CHECK(!strcmp(ts_chat_template_end_of_turn(t), "<|eot_id|>"), "end of turn: %s", ts_chat_template_end_of_turn(t));
        ts_chat_template_set_now(t, now);
        const char *convs[] = {"single-user", "system-user", "multi-turn", "unicode", "tools-user", "tool-call-dict"};
        for (size_t k = 0; k < sizeof convs / sizeof convs[0]; k++) {
            json_t *c = conversation(root, convs[k]);
            CHECK(c != NULL, "conversation %s", convs[k]);
            if (!c) continue;
            for (int gen = 0; gen < 2; gen++) {
                size_t nexp = 0;
                const char *exp = template_golden(root, "meta-llama-Llama-3.2-3B-Instruct", convs[k], gen, &nexp);
                CHECK(exp != NULL, "golden for %s", convs[k]);
                char *out = NULL;
                size_t len = 0;
                s = ts_chat_render_json(t, json_object_get(c, "messages"), json_object_get(c, "tools"),
                                        json_object_get(c, "kwargs"), gen, &out, &len, &err);
                CHECK(s == TS_OK, "Llama-3.2 %s: %s", convs[k], err.msg);
                char what[200];
                snprintf(what, sizeof what, "Llama-3.2 %s gen=%d", convs[k], gen);
                if (out && exp) check_same(what, out, len, exp, nexp);
                free(out);
            }
        }
        /* another day, and the date line follows */
        ts_chat_template_set_now(t, ts_chat_parse_date("2024-02-29", "d", &err));
        ts_chat_msg m = {"user", "hi"};
        char *out = NULL;
        CHECK(ts_chat_render(t, &m, 1, 1, -1, &out, NULL, &err) == TS_OK && strstr(out, "Today Date: 29 Feb 2024\n"),
              "date 2024-02-29: %s", out ? out : err.msg);
        free(out);
        /* the default: today, local time */
        ts_chat_template_set_now(t, -1);
        out = NULL;
        char today[64];
        time_t tt = time(NULL);
        struct tm lt;
        localtime_r(&tt, &lt);
        strftime(today, sizeof today, "Today Date: %d %b %Y\n", &lt);
        CHECK(ts_chat_render(t, &m, 1, 1, -1, &out, NULL, &err) == TS_OK && strstr(out, today),
              "live date (%s): %s", today, out ? out : err.msg);
        free(out);
        ts_chat_template_free(t);
    }
    /* the .jinja alone: no special tokens (bos_token undefined prints nothing) */
    s = ts_chat_template_file(jpath, NULL, &t, &err);
    CHECK(s == TS_OK, "template file: %s", err.msg);
    if (!s) {
        ts_chat_msg m = {"user", "hi"};
        char *out = NULL;
        CHECK(ts_chat_render(t, &m, 1, 0, -1, &out, NULL, &err) == TS_OK && !strncmp(out, "<|start_header_id|>", 19),
              "no bos: %s", out ? out : err.msg);
        free(out);
        ts_chat_template_free(t);
    }
    json_decref(root);
}

/* A GGUF's tokenizer.chat_template with the bos/eos of the tokenizer in use. */
static void test_gguf(void) {
    ts_error err;
    ts_tok *tok = NULL;
    ts_status s = ts_tok_load(th_shared("tokenizers/llama3"), &tok, &err);
    CHECK(s == TS_OK, "llama3 tokenizer: %s", err.msg);
    if (s) return;
    json_error_t je;
    json_t *cfg = json_load_file(th_shared("tokenizers/llama3/tokenizer_config.json"), JSON_DECODE_INT_AS_REAL, &je);
    json_t *golden = json_load_file(th_fixture("chat/golden.json"), 0, &je);
    const char *tmpl = json_string_value(json_object_get(cfg, "chat_template"));
    CHECK(tmpl != NULL, "llama3 tokenizer_config.json has a chat_template");
    char path[4200];
    snprintf(path, sizeof path, "%s/t.gguf", th_tmpdir("chat_template_gguf"));
    ts_gguf_writer *w = ts_gguf_writer_new();
    ts_gguf_w_str(w, "general.architecture", "llama");
    ts_gguf_w_str(w, "tokenizer.chat_template", tmpl ? tmpl : "");
    s = ts_gguf_writer_save(w, path, &err);
    ts_gguf_writer_free(w);
    CHECK(s == TS_OK, "write %s: %s", path, err.msg);
    ts_gguf g;
    if (!s) s = ts_gguf_open(path, &g, &err);
    CHECK(s == TS_OK, "open %s: %s", path, err.msg);
    if (!s) {
        ts_chat_template *t = NULL;
        s = ts_chat_template_gguf(&g, tok, &t, &err);
        CHECK(s == TS_OK && strstr(ts_chat_template_source(t), "tokenizer.chat_template"), "gguf template: %s",
              s ? err.msg : ts_chat_template_source(t));
        size_t i;
        json_t *c;
        int n = 0;
        json_array_foreach(json_object_get(golden, "cases"), i, c) {
            if (s || strcmp(json_string_value(json_object_get(c, "family")), "llama3")) continue;
            char *out = NULL;
            size_t len = 0;
            ts_status r = ts_chat_render_json(t, json_object_get(c, "messages"), NULL, NULL,
                                              json_is_true(json_object_get(c, "add_generation_prompt")), &out, &len, &err);
            CHECK(r == TS_OK, "gguf render: %s", err.msg);
            json_t *e = json_object_get(c, "expected");
            if (out) check_same("gguf llama3", out, len, json_string_value(e), json_string_length(e));
            free(out);
            n++;
        }
        CHECK(n > 5, "gguf: %d llama3 cases", n);
        ts_chat_template_free(t);
        /* a whole model path through the `tessera template` resolver */
        t = NULL;
        CHECK(ts_chat_template_open(path, NULL, &t, &err) != TS_OK, "a GGUF without a tokenizer has no bos/eos");
        ts_chat_template_free(t);
        ts_gguf_close(&g);
    }
    /* no template in the GGUF, a tokenizer without ChatML: the error names the file */
    snprintf(path, sizeof path, "%s/none.gguf", th_tmpdir("chat_template_gguf_none"));
    w = ts_gguf_writer_new();
    ts_gguf_w_str(w, "general.architecture", "llama");
    s = ts_gguf_writer_save(w, path, &err);
    ts_gguf_writer_free(w);
    if (!s && !ts_gguf_open(path, &g, &err)) {
        ts_chat_template *t = NULL;
        s = ts_chat_template_gguf(&g, tok, &t, &err);
        CHECK(s == TS_ERR_UNSUPPORTED && strstr(err.msg, path) && strstr(err.msg, "no chat template"),
              "gguf without template: %s", err.msg);
        ts_chat_template_free(t);
        ts_gguf_close(&g);
    }
    json_decref(cfg);
    json_decref(golden);
    ts_tok_free(tok);
}

static char *render1(const ts_chat_template *t, const char *messages_json, const char *vars_json, int gen) {
    json_error_t je;
    json_t *ms = json_loads(messages_json, 0, &je), *vars = vars_json ? json_loads(vars_json, 0, &je) : NULL;
    char *out = NULL;
    ts_error err;
    if (ts_chat_render_json(t, ms, NULL, vars, gen, &out, NULL, &err)) {
        fprintf(stderr, "render: %s\n", err.msg);
        out = NULL;
    }
    json_decref(ms);
    json_decref(vars);
    return out;
}

/* What transformers does to messages and variables before the template sees them. */
static void test_normalization(void) {
    ts_chat_template *t = NULL;
    ts_error err;
    const char *keys = "{% for m in messages %}{% for k, v in m.items() %}{{ k }}={{ v }};{% endfor %}|{% endfor %}"
                       "{{ tools is none }} {{ documents is none }} {{ add_generation_prompt }} {{ bos_token }} "
                       "{{ eos_token is defined }} {{ x | default('-') }}";
    CHECK(ts_chat_template_new(keys, "<s>", NULL, 0, "keys", &t, &err) == TS_OK, "%s", err.msg);
    if (!t) return;
    char *out = render1(t,
                        "[{\"role\": \"a\", \"content\": null, \"reasoning\": \"R\", \"n\": 1},"
                        " {\"role\": \"b\", \"reasoning_content\": \"X\", \"thinking\": \"Y\", \"name\": null},"
                        " {\"role\": \"c\", \"content\": \"\", \"reasoning_content\": null}]",
                        NULL, 1);
    const char *want = "thinking=R;role=a;reasoning=R;n=1;reasoning_content=R;|"
                       "thinking=Y;role=b;reasoning_content=X;|role=c;content=;|True True True <s> False -";
    CHECK(out && !strcmp(out, want), "normalized:\n  got: %s\n  exp: %s", out ? out : "(error)", want);
    free(out);
    /* caller variables override the special tokens */
    out = render1(t, "[]", "{\"bos_token\": \"B\", \"x\": 3}", 0);
    CHECK(out && !strcmp(out, "True True False B False 3"), "vars: %s", out ? out : "(error)");
    free(out);
    /* bad inputs are named */
    json_t *bad = json_loads("[{\"role\": \"user\", \"content\": \"hi\"}, 7]", 0, NULL);
    char *o2 = NULL;
    CHECK(ts_chat_render_json(t, bad, NULL, NULL, 0, &o2, NULL, &err) == TS_ERR_ARG && strstr(err.msg, "messages[1]"),
          "a message that is not an object: %s", err.msg);
    json_decref(bad);
    bad = json_string("hi");
    CHECK(ts_chat_render_json(t, bad, NULL, NULL, 0, &o2, NULL, &err) == TS_ERR_ARG && strstr(err.msg, "list"),
          "messages not a list: %s", err.msg);
    json_decref(bad);
    ts_chat_msg nocontent = {"user", NULL};
    CHECK(ts_chat_render(t, &nocontent, 1, 1, -1, &o2, NULL, &err) == TS_ERR_ARG && strstr(err.msg, "content"),
          "missing content: %s", err.msg);
    ts_chat_template_free(t);
    /* a 20-turn conversation renders well under a millisecond (Qwen3's template, the longest seed one) */
    t = NULL;
    if (ts_chat_template_load(th_shared("tokenizers/qwen3/tokenizer_config.json"), NULL, &t, &err) == TS_OK) {
        ts_chat_msg conv[20];
        for (int i = 0; i < 20; i++)
            conv[i] = (ts_chat_msg){i % 2 ? "assistant" : "user",
                                    i % 2 ? "<think>\nfine\n</think>\n\nA reply of a few words, as chats have."
                                          : "A question of a few words, as users ask them?"};
        struct timespec a, b;
        int reps = 200, ok = 1;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (int r = 0; r < reps && ok; r++) {
            char *o = NULL;
            ok = ts_chat_render(t, conv, 20, 1, -1, &o, NULL, &err) == TS_OK;
            free(o);
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        double us = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 1e3 / reps;
        printf("20-turn Qwen3 render: %.1f us\n", us);
        CHECK(ok, "20 turns: %s", err.msg);
        CHECK(us < 20000, "20-turn render took %.0f us", us); /* loose: sanitizer builds run this too */
        ts_chat_template_free(t);
    }
}

static void test_fallback_and_errors(void) {
    ts_chat_template *t = NULL;
    ts_error err;
    /* no template, a tokenizer that speaks ChatML: the built-in ChatML template */
    CHECK(ts_chat_template_new(NULL, NULL, NULL, 1, "x/tokenizer_config.json", &t, &err) == TS_OK, "ChatML: %s", err.msg);
    if (t) {
        CHECK(strstr(ts_chat_template_source(t), "ChatML") && strstr(ts_chat_template_source(t), "x/tokenizer_config.json"),
              "source: %s", ts_chat_template_source(t));
        ts_chat_msg m[2] = {{"user", "hi"}, {"assistant", "yo"}};
        char *out = NULL;
        CHECK(ts_chat_render(t, m, 2, 1, -1, &out, NULL, &err) == TS_OK && out &&
                  !strcmp(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n<|im_start|>assistant\n"),
              "plain ChatML: %s", out ? out : err.msg);
        CHECK(!strcmp(ts_chat_template_end_of_turn(t), "<|im_end|>"), "ChatML end of turn");
        free(out);
        ts_chat_template_free(t);
    }
    t = NULL;
    CHECK(ts_chat_template_new(NULL, NULL, NULL, 0, "dir/tokenizer_config.json", &t, &err) == TS_ERR_UNSUPPORTED &&
              strstr(err.msg, "dir/tokenizer_config.json") && strstr(err.msg, "no chat template"),
          "no template: %s", err.msg);
    /* any template text is run as written now, Llama-3.2's header included */
    CHECK(ts_chat_template_new("{{ bos_token }}Cutting Knowledge Date: {{ strftime_now('%d %b %Y') }}", "<b>", "<e>", 0,
                               "l32.json", &t, &err) == TS_OK, "%s", err.msg);
    if (t) {
        ts_chat_template_set_now(t, ts_chat_parse_date("2026-03-14", "d", &err));
        char *out = NULL;
        CHECK(ts_chat_render(t, NULL, 0, 0, -1, &out, NULL, &err) == TS_OK && !strcmp(out, "<b>Cutting Knowledge Date: 14 Mar 2026"),
              "date: %s", out ? out : err.msg);
        CHECK(!strcmp(ts_chat_template_end_of_turn(t), "<e>"), "end of turn falls back to eos");
        free(out);
        ts_chat_template_free(t);
    }
    /* a template that does not parse: what:line:column */
    t = NULL;
    CHECK(ts_chat_template_new("line one\n{% if %}", NULL, NULL, 0, "bad.jinja", &t, &err) == TS_ERR_FORMAT &&
              strstr(err.msg, "bad.jinja:2:"), "syntax error: %s", err.msg);
    CHECK(ts_chat_template_load("/nonexistent/tokenizer_config.json", NULL, &t, &err) == TS_ERR_IO &&
              strstr(err.msg, "/nonexistent/tokenizer_config.json"), "missing file: %s", err.msg);
    CHECK(ts_chat_template_file("/nonexistent/t.jinja", NULL, &t, &err) == TS_ERR_IO &&
              strstr(err.msg, "/nonexistent/t.jinja"), "missing template file: %s", err.msg);
    /* a template's raise_exception is the conversation's fault: TS_ERR_ARG with its message */
    if (ts_chat_template_file(th_shared("templates/google-gemma-2-2b-it.jinja"), NULL, &t, &err) == TS_OK) {
        ts_chat_msg m[2] = {{"system", "be brief"}, {"user", "hi"}};
        char *out = NULL;
        CHECK(ts_chat_render(t, m, 2, 1, -1, &out, NULL, &err) == TS_ERR_ARG && strstr(err.msg, "System role not supported"),
              "raise_exception: %s", err.msg);
        CHECK(!strcmp(ts_chat_template_end_of_turn(t), "<end_of_turn>"), "gemma end of turn");
        free(out);
        ts_chat_template_free(t);
    } else {
        CHECK(0, "gemma template: %s", err.msg);
    }
    /* dates */
    CHECK(ts_chat_parse_date("1970-01-01", "d", &err) == 0, "epoch");
    CHECK(ts_chat_parse_date("2026-03-14", "d", &err) == 1773446400, "2026-03-14");
    CHECK(ts_chat_parse_date("2026-03-14T09:26:53", "d", &err) == 1773480413, "2026-03-14T09:26:53");
    CHECK(ts_chat_parse_date("2024-02-29", "d", &err) > 0, "leap day");
    const char *bad[] = {"2025-02-29", "2026-02-30", "2026-3-14", "2026-13-01", "14/03/2026", "", "2026-03-14T25:00:00",
                         "1969-12-31", "2026-03-14x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(ts_chat_parse_date(bad[i], "--date", &err) == -1 && strstr(err.msg, "--date") && strstr(err.msg, "YYYY-MM-DD"),
              "bad date \"%s\": %s", bad[i], err.msg);
}

int main(void) {
    test_goldens();
    test_template_file_and_date();
    test_gguf();
    test_normalization();
    test_fallback_and_errors();
    return th_finish("test_chat_template");
}
