/* Chat templates byte-for-byte against transformers' apply_chat_template: every case of
 * tests/fixtures/chat/golden.json (tools/gen_chat_fixtures.py) for Llama-3 and Qwen3 (the real
 * tokenizer_config.json files under TS_REALDATA), Qwen2.5 and SmolLM2 (fixture configs), plus
 * family detection, the ChatML fallback and the errors for templates we cannot render. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/chat_template.h"
#include "tharness.h"

/* Index of the first differing byte. */
static size_t first_diff(const char *a, size_t na, const char *b, size_t nb) {
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

static void test_goldens(void) {
    json_error_t je;
    json_t *root = json_load_file(th_fixture("chat/golden.json"), 0, &je);
    CHECK(root != NULL, "golden.json: %s", je.text);
    if (!root) return;
    json_t *cases = json_object_get(root, "cases");
    size_t i;
    json_t *c;
    int n = 0, fam_counts[5] = {0};
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
        CHECK(!strcmp(ts_chat_family_name(ts_chat_template_family(t)), fam), "%s: family %s, expected %s",
              path, ts_chat_family_name(ts_chat_template_family(t)), fam);
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
        char *out = NULL;
        size_t len = 0;
        s = ts_chat_render(t, msgs, nm, gen, think, &out, &len, &err);
        CHECK(s == TS_OK, "render: %s", err.msg);
        const char *exp = json_string_value(json_object_get(c, "expected"));
        size_t nexp = json_string_length(json_object_get(c, "expected"));
        if (out) {
            size_t d = first_diff(out, len, exp, nexp);
            CHECK(len == nexp && d == nexp, "%s \"%s\" gen=%d thinking=%d: differs at byte %zu\n  got: %.60s\n  exp: %.60s",
                  fam, title, gen, think, d, out + (d < len ? d : len), exp + (d < nexp ? d : nexp));
        }
        for (int f = 0; f < 5; f++)
            if (!strcmp(fam, ts_chat_family_name((ts_chat_family)f))) fam_counts[f]++;
        n++;
        free(out);
        ts_chat_template_free(t);
    }
    printf("golden cases: %d (llama3 %d, qwen3 %d, qwen2.5 %d, smollm2 %d)\n", n, fam_counts[0],
           fam_counts[3], fam_counts[2], fam_counts[4]);
    CHECK(n >= 90 && fam_counts[0] && fam_counts[2] && fam_counts[3] && fam_counts[4],
          "too few goldens: %d", n);
    json_decref(root);
}

static void test_detection_and_errors(void) {
    ts_chat_template *t = NULL;
    ts_error err;
    /* an unknown template: ChatML when the tokenizer has <|im_start|>, else an error naming it */
    CHECK(ts_chat_template_new("{{ messages }}", NULL, NULL, 1, "x.json", &t, &err) == TS_OK &&
          ts_chat_template_family(t) == TS_CHAT_CHATML, "fallback to ChatML");
    ts_chat_msg m[2] = {{"user", "hi"}, {"assistant", "yo"}};
    char *out = NULL;
    CHECK(ts_chat_render(t, m, 2, 1, -1, &out, NULL, &err) == TS_OK && out &&
          !strcmp(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n<|im_start|>assistant\n"),
          "plain ChatML: %s", out ? out : "(null)");
    CHECK(!strcmp(ts_chat_template_end_of_turn(t), "<|im_end|>"), "ChatML end of turn");
    free(out);
    ts_chat_template_free(t);
    t = NULL;
    CHECK(ts_chat_template_new("{{ messages }}", NULL, NULL, 0, "dir/tokenizer_config.json", &t, &err) ==
              TS_ERR_UNSUPPORTED && strstr(err.msg, "dir/tokenizer_config.json") && strstr(err.msg, "<|im_start|>"),
          "unknown template without ChatML tokens: %s", err.msg);
    CHECK(ts_chat_template_new(NULL, NULL, NULL, 0, "cfg.json", &t, &err) == TS_ERR_UNSUPPORTED &&
              strstr(err.msg, "no chat_template"), "no template: %s", err.msg);
    CHECK(ts_chat_template_new("<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: ",
                               "<|begin_of_text|>", NULL, 0, "l32.json", &t, &err) == TS_ERR_UNSUPPORTED &&
              strstr(err.msg, "Llama-3.1/3.2"), "Llama-3.2 template: %s", err.msg);
    CHECK(ts_chat_template_load("/nonexistent/tokenizer_config.json", NULL, &t, &err) == TS_ERR_IO &&
              strstr(err.msg, "/nonexistent/tokenizer_config.json"), "missing file: %s", err.msg);
    /* Qwen's templates index messages[0]: an empty conversation is an error, as in Jinja */
    CHECK(ts_chat_template_load(th_shared("tokenizers/qwen3/tokenizer_config.json"), NULL, &t, &err) == TS_OK,
          "%s", err.msg);
    if (t) {
        CHECK(ts_chat_render(t, NULL, 0, 1, -1, &out, NULL, &err) == TS_ERR_ARG, "empty conversation");
        ts_chat_msg bad = {"user", NULL};
        CHECK(ts_chat_render(t, &bad, 1, 1, -1, &out, NULL, &err) == TS_ERR_ARG && strstr(err.msg, "content"),
              "missing content");
        ts_chat_template_free(t);
    }
}

int main(void) {
    test_goldens();
    test_detection_and_errors();
    return th_finish("test_chat_template");
}
