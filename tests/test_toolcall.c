/* src/serve/toolcall.c over many model replies: each format's calls (one, several, with text
 * around them, unicode, arguments as an object, a string or absent), what is not a call left in
 * the content as written (malformed JSON, no name, a truncated block, JSON that answers rather
 * than calls), the streaming hold-back (never decreasing, always a prefix of the final content),
 * ids, the format of each real template, and the probe for object arguments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/toolcall.h"
#include "tharness.h"

typedef struct tcase {
    ts_toolcall_format f;
    const char *reply;
    int n;                   /* calls expected */
    const char *name0, *args0; /* the first call's, when n > 0 */
    const char *name1, *args1; /* the second's, when n > 1 */
    const char *content;     /* NULL: the reply itself */
    int blank;               /* content null */
} tcase;

#define H TS_TOOLCALL_HERMES
#define L TS_TOOLCALL_LLAMA3
#define M TS_TOOLCALL_MISTRAL
#define N TS_TOOLCALL_NONE

static const tcase k_cases[] = {
    /* Hermes / Qwen */
    {H, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", 1, "get_weather",
     "{\"city\":\"Paris\"}", NULL, NULL, "", 1},
    {H, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", "
        "\"arguments\": {\"y\": [1, 2, {\"z\": null}]}}\n</tool_call>",
     2, "a", "{\"x\":1}", "b", "{\"y\":[1,2,{\"z\":null}]}", "\n", 1},
    {H, "Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", 1, "f", "{}", NULL, NULL,
     "Let me check.\n", 0},
    {H, "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"q\": 1}}\n</tool_call>",
     1, "w", "{\"q\":1}", NULL, NULL, "<think>\nThe user wants the weather.\n</think>\n\n", 0},
    {H, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {H, "<tool_call>\n{\"name\": \"ok\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"bad\", \"arguments\": [1\n</tool_call> after",
     1, "ok", "{}", NULL, NULL, "\n<tool_call>\n{\"name\": \"bad\", \"arguments\": [1\n</tool_call> after", 0},
    {H, "<tool_call>{\"name\": \"wetter\", \"arguments\": {\"stadt\": \"Z\\u00fcrich\", \"e\": \"\xF0\x9F\x8C\x8D\"}}</tool_call>", 1,
     "wetter", "{\"stadt\":\"Z\xC3\xBCrich\",\"e\":\"\xF0\x9F\x8C\x8D\"}", NULL, NULL, "", 1},
    {H, "<tool_call>\n{\"name\": \"\xE5\xA4\xA9\xE6\xB0\x94\", \"arguments\": {\"\xE5\x9F\x8E\": \"\xE5\x8C\x97\xE4\xBA\xAC\"}}\n</tool_call>",
     1, "\xE5\xA4\xA9\xE6\xB0\x94", "{\"\xE5\x9F\x8E\":\"\xE5\x8C\x97\xE4\xBA\xAC\"}", NULL, NULL, "", 1},
    {H, "<tool_call>\n{\"name\": \"s\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>", 1, "s", "{\"x\": 1}", NULL, NULL, "", 1},
    {H, "<tool_call>\n{\"name\": \"noargs\"}\n</tool_call>", 1, "noargs", "{}", NULL, NULL, "", 1},
    {H, "<tool_call>\n{\"arguments\": {}}\n</tool_call>", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {H, "<tool_call>\n{\"name\": 3, \"arguments\": {}}\n</tool_call>", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {H, "<tool_call>\n{\"name\": \"\", \"arguments\": {}}\n</tool_call>", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {H, "<tool_call>\n{\"name\": \"f\", \"arguments\": 7}\n</tool_call>", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {H, "<tool_call>\n[{\"name\": \"f\"}]\n</tool_call>", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {H, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}} trailing\n</tool_call>", 0, NULL, NULL, NULL, NULL, NULL, 0},
    /* a close tag inside a string of the arguments is text */
    {H, "<tool_call>\n{\"name\": \"echo\", \"arguments\": {\"s\": \"</tool_call>\"}}\n</tool_call>", 1, "echo",
     "{\"s\":\"</tool_call>\"}", NULL, NULL, "", 1},
    /* the close tag never came: a whole object is still a call, a cut one is not */
    {H, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n", 1, "f", "{\"a\":1}", NULL, NULL, "", 1},
    {H, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": ", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {H, "Text <tool_call> and no JSON", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {H, "{\"name\": \"bare\", \"arguments\": {\"k\": \"v\"}}", 1, "bare", "{\"k\":\"v\"}", NULL, NULL, "", 1},
    {H, "Just an answer, no tools needed.", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {H, "", 0, NULL, NULL, NULL, NULL, "", 1},
    {H, "{\"answer\": 42}", 0, NULL, NULL, NULL, NULL, NULL, 0},
    /* Llama 3.x */
    {L, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", 1, "get_weather", "{\"city\":\"Paris\"}", NULL,
     NULL, "", 1},
    {L, "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"n\": 2.5}}", 1, "f", "{\"n\":2.5}", NULL, NULL, "", 1},
    {L, "\n {\"type\": \"function\", \"name\": \"f\", \"parameters\": {}} \n", 1, "f", "{}", NULL, NULL, "", 1},
    {L, "Sure! {\"name\": \"f\", \"parameters\": {}}", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {L, "{\"name\": \"f\", \"parameters\": {}} and then some", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {L, "{\"name\": \"f\", \"parameters\": {\"a\": tru}}", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {L, "{\"result\": \"a JSON answer\"}", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {L, "The capital of France is Paris.", 0, NULL, NULL, NULL, NULL, NULL, 0},
    /* Mistral */
    {M, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}}, {\"name\": \"g\", \"arguments\": {}}]", 2, "f",
     "{\"a\":1}", "g", "{}", "", 1},
    {M, " [{\"name\": \"f\", \"arguments\": {\"a\": \"\xC3\xA9t\xC3\xA9\"}, \"id\": \"abc123XYZ\"}]", 1, "f",
     "{\"a\":\"\xC3\xA9t\xC3\xA9\"}", NULL, NULL, "", 1},
    {M, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, {\"oops\": 1}]", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {M, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {M, "[1, 2, 3]", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {M, "[]", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {M, "[{\"name\": \"f\", \"arguments\": {}}] Done.", 1, "f", "{}", NULL, NULL, "Done.", 0},
    {M, "I cannot call tools for that.", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {M, "{\"name\": \"single\", \"arguments\": {}}", 1, "single", "{}", NULL, NULL, "", 1},
    /* no format: nothing is parsed */
    {N, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", 0, NULL, NULL, NULL, NULL, NULL, 0},
    {N, "{\"name\": \"f\", \"arguments\": {}}", 0, NULL, NULL, NULL, NULL, NULL, 0},
};

static void test_parse(void) {
    int n_calls = 0;
    for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0]; k++) {
        const tcase *c = &k_cases[k];
        ts_toolcalls t;
        size_t len = strlen(c->reply);
        CHECK(ts_toolcall_parse(c->f, c->reply, len, &t) == 0, "case %zu: out of memory?", k);
        const char *want = c->content ? c->content : c->reply;
        CHECK(t.n == c->n, "case %zu (%s): %d calls, expected %d: %s", k, ts_toolcall_format_name(c->f), t.n, c->n,
              c->reply);
        if (t.n == c->n && c->n > 0)
            CHECK(!strcmp(t.call[0].name, c->name0) && !strcmp(t.call[0].arguments, c->args0),
                  "case %zu: call 0 %s(%s), expected %s(%s)", k, t.call[0].name, t.call[0].arguments, c->name0, c->args0);
        if (t.n == c->n && c->n > 1)
            CHECK(!strcmp(t.call[1].name, c->name1) && !strcmp(t.call[1].arguments, c->args1),
                  "case %zu: call 1 %s(%s), expected %s(%s)", k, t.call[1].name, t.call[1].arguments, c->name1, c->args1);
        CHECK(t.content && t.content_len == strlen(want) && !memcmp(t.content, want, t.content_len),
              "case %zu: content \"%s\", expected \"%s\"", k, t.content ? t.content : "(null)", want);
        CHECK(t.content_blank == (c->blank || !*want), "case %zu: blank %d", k, t.content_blank);
        n_calls += t.n;
        ts_toolcalls_free(&t);
    }
    printf("parse: %zu replies, %d calls\n", sizeof k_cases / sizeof k_cases[0], n_calls);
}

/* Streaming: the bytes that may go out never shrink as the reply grows, never pass what was
 * received, and are a prefix of the final content (so the content sent at the end is the rest). */
static void test_safe(void) {
    static const struct {
        ts_toolcall_format f;
        const char *text;
        size_t safe;
    } k_safe[] = {{H, "Hello <tool", 6},   {H, "Hello <tool_call>{\"na", 6}, {H, "Hello", 5},   {H, "  \n", 0},
                  {H, " {\"name\"", 0},     {H, "<think>", 7},               {H, "<t", 0},      {H, "a <", 2},
                  {L, "Hi", 2},             {L, "{", 0},                     {L, " <|py", 0},   {L, "<b>", 3},
                  {L, "<|python_tag|>{", 0}, {M, "[", 0},                   {M, "[TOOL", 0},   {M, "Hi [", 4},
                  {N, "{\"name\"", 7}};
    for (size_t k = 0; k < sizeof k_safe / sizeof k_safe[0]; k++) {
        size_t got = ts_toolcall_safe(k_safe[k].f, k_safe[k].text, strlen(k_safe[k].text));
        CHECK(got == k_safe[k].safe, "safe(%s, \"%s\") = %zu, expected %zu", ts_toolcall_format_name(k_safe[k].f),
              k_safe[k].text, got, k_safe[k].safe);
    }
    int n = 0;
    for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0]; k++)
        for (int f = TS_TOOLCALL_NONE; f <= TS_TOOLCALL_MISTRAL; f++) {
            const char *s = k_cases[k].reply;
            size_t len = strlen(s), prev = 0;
            int mono = 1;
            for (size_t i = 0; i <= len; i++) {
                size_t v = ts_toolcall_safe((ts_toolcall_format)f, s, i);
                if (v < prev || v > i) mono = 0;
                prev = v;
            }
            ts_toolcalls t;
            CHECK(ts_toolcall_parse((ts_toolcall_format)f, s, len, &t) == 0, "parse");
            CHECK(mono && t.content_len >= prev && !memcmp(t.content, s, prev),
                  "case %zu as %s: hold-back not monotonic or not a prefix of the content (%zu of \"%s\")", k,
                  ts_toolcall_format_name((ts_toolcall_format)f), prev, s);
            ts_toolcalls_free(&t);
            n++;
        }
    printf("safe: %d (reply, format) pairs\n", n);
}

static int alnum(const char *s) {
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9'))) return 0;
    return 1;
}

static void test_ids_json(void) {
    char a[40], b[40], c[40];
    ts_toolcall_id(H, "chatcmpl-1", 0, a, sizeof a);
    ts_toolcall_id(H, "chatcmpl-1", 1, b, sizeof b);
    ts_toolcall_id(H, "chatcmpl-1", 0, c, sizeof c);
    CHECK(strlen(a) == 29 && !strncmp(a, "call_", 5) && alnum(a + 5) && strcmp(a, b) && !strcmp(a, c), "ids %s %s", a, b);
    ts_toolcall_id(M, "chatcmpl-1", 0, a, sizeof a);
    CHECK(strlen(a) == 9 && alnum(a), "mistral id %s", a);
    ts_toolcalls t;
    const char *r = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call><tool_call>{\"name\": \"g\"}</tool_call>";
    CHECK(ts_toolcall_parse(H, r, strlen(r), &t) == 0 && t.n == 2, "two calls");
    json_t *j = ts_toolcall_json(&t, 0, 2, H, "x", 0), *d = ts_toolcall_json(&t, 1, 1, H, "x", 1);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL, *sd = d ? json_dumps(d, JSON_COMPACT) : NULL;
    char id1[40];
    ts_toolcall_id(H, "x", 1, id1, sizeof id1);
    CHECK(s && strstr(s, "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}") &&
              !strstr(s, "index"), "tool_calls %s", s ? s : "(null)");
    CHECK(sd && strstr(sd, "\"index\":1") && strstr(sd, id1) && json_array_size(d) == 1, "delta %s", sd ? sd : "(null)");
    free(s);
    free(sd);
    json_decref(j);
    json_decref(d);
    ts_toolcalls_free(&t);
}

static void test_templates(void) {
    static const struct {
        const char *file;
        ts_toolcall_format f;
        int objects, empty; /* the caps the probe finds; objects -1: not checked */
    } k_t[] = {{"Qwen-Qwen2.5-7B-Instruct.jinja", H, 1, 0},
               {"Qwen-Qwen3-0.6B.jinja", H, 1, 1},
               {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", H, 1, 0},
               {"meta-llama-Llama-3.1-8B-Instruct.jinja", L, 1, 0},
               {"meta-llama-Llama-3.2-3B-Instruct.jinja", L, 1, 0},
               {"mistralai-Mistral-Nemo-Instruct-2407.jinja", M, 1, 0},
               /* its tool-call branch wants content none, which transformers' null-dropping makes
                * undefined: it fails either way, and renders the turn as empty content with "" */
               {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", N, 0, 1},
               {"HuggingFaceTB-SmolLM2-1.7B-Instruct.jinja", N, -1, 0},
               {"google-gemma-2-2b-it.jinja", N, -1, 0},
               {"microsoft-Phi-3.5-mini-instruct.jinja", N, -1, 0}};
    for (size_t k = 0; k < sizeof k_t / sizeof k_t[0]; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s", th_shared("templates"));
        snprintf(path + strlen(path), sizeof path - strlen(path), "/%s", k_t[k].file);
        ts_chat_template *t = NULL;
        ts_error err;
        /* the special tokens as the models have them (Mistral's template writes eos_token) */
        CHECK(ts_chat_template_new(NULL, NULL, NULL, 0, "x", &t, &err) != TS_OK, "no text, no ChatML: refused");
        char *text = NULL;
        FILE *fp = fopen(path, "rb");
        if (fp) {
            fseek(fp, 0, SEEK_END);
            long n = ftell(fp);
            fseek(fp, 0, SEEK_SET);
            text = calloc(1, (size_t)n + 1);
            if (text && fread(text, 1, (size_t)n, fp) != (size_t)n) free(text), text = NULL;
            fclose(fp);
        }
        CHECK(text && ts_chat_template_new(text, "<s>", "</s>", 0, k_t[k].file, &t, &err) == TS_OK, "%s: %s", path,
              err.msg);
        free(text);
        if (!t) continue;
        ts_toolcall_format f = ts_toolcall_format_of(ts_chat_template_text(t));
        CHECK(f == k_t[k].f, "%s: format %s, expected %s", k_t[k].file, ts_toolcall_format_name(f),
              ts_toolcall_format_name(k_t[k].f));
        if (k_t[k].objects >= 0) {
            ts_toolcall_caps caps;
            ts_toolcall_caps_of(t, &caps);
            CHECK(caps.object_args == k_t[k].objects && caps.empty_content == k_t[k].empty,
                  "%s: object arguments %d, empty content %d; expected %d, %d", k_t[k].file, caps.object_args,
                  caps.empty_content, k_t[k].objects, k_t[k].empty);
        }
        ts_chat_template_free(t);
    }
    json_t *m = json_loads("[{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"function\": {\"name\": \"f\", "
                           "\"arguments\": \"{\\\"a\\\": [1]}\"}}, {\"function\": {\"name\": \"g\", \"arguments\": \"not json\"}}]},"
                           " {\"role\": \"assistant\", \"content\": null}]",
                           0, NULL);
    ts_toolcall_caps caps = {1, 1};
    json_t *o = m ? ts_toolcall_fix_messages(m, &caps) : NULL;
    CHECK(json_is_string(json_object_get(json_array_get(o, 0), "content")) &&
              json_is_null(json_object_get(json_array_get(o, 1), "content")), "content \"\" only with tool calls");
    json_t *calls = json_object_get(json_array_get(o, 0), "tool_calls");
    json_t *a0 = json_object_get(json_object_get(json_array_get(calls, 0), "function"), "arguments");
    json_t *a1 = json_object_get(json_object_get(json_array_get(calls, 1), "function"), "arguments");
    CHECK(json_is_object(a0) && json_is_array(json_object_get(a0, "a")) && json_is_string(a1), "arguments to objects");
    const json_t *orig = json_object_get(json_object_get(json_array_get(json_object_get(json_array_get(m, 0),
                                                                                          "tool_calls"), 0), "function"), "arguments");
    CHECK(json_is_string(orig) && json_is_null(json_object_get(json_array_get(m, 0), "content")),
          "the input is not modified");
    json_decref(o);
    json_decref(m);
}

int main(void) {
    test_parse();
    test_safe();
    test_ids_json();
    test_templates();
    return th_finish("test_toolcall");
}
