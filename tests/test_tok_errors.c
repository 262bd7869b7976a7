/* Malformed and unsupported tokenizer.json files: each must be refused with the right status
 * and a message naming the file and the field (bad JSON, missing model, model type not BPE,
 * unknown pre-tokenizer, merges naming unknown tokens, ...). Small valid files come first
 * (HF drops a character missing from the vocabulary; a merges list longer than the loader's
 * chunks, with a bad entry in a later chunk). */
#include <stdlib.h>
#include <string.h>

#include "tharness.h"
#include "tok/tokenizer.h"

#define VOCAB "\"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}"
#define BL "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}"

/* A file with one part replaced: model body, pre_tokenizer, extra top-level fields. */
static char *make(const char *model, const char *pre, const char *extra) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "{\"version\": \"1.0\", \"model\": {%s}, \"pre_tokenizer\": %s%s}",
             model, pre, extra);
    return buf;
}

static void refused(const char *what, const char *json, ts_status want, const char *needle1,
                    const char *needle2) {
    ts_tok *t = NULL;
    ts_error err = {{0}};
    ts_status s = ts_tok_load_json(json, strlen(json), "bad/tokenizer.json", NULL, &t, &err);
    CHECK(s == want, "%s: status %s, expected %s (%s)", what, ts_status_name(s),
          ts_status_name(want), err.msg);
    CHECK(strstr(err.msg, "bad/tokenizer.json") != NULL, "%s: message does not name the file: %s",
          what, err.msg);
    CHECK(!needle1 || strstr(err.msg, needle1), "%s: message lacks \"%s\": %s", what, needle1,
          err.msg);
    CHECK(!needle2 || strstr(err.msg, needle2), "%s: message lacks \"%s\": %s", what, needle2,
          err.msg);
    CHECK(t == NULL, "%s: no tokenizer on failure", what);
    ts_tok_free(t);
}

static void encodes(const ts_tok *t, const char *text, const int32_t *want, int nwant) {
    int32_t *ids;
    int n;
    ts_error err;
    ts_status s = ts_tok_encode(t, text, strlen(text), 0, &ids, &n, &err);
    CHECK(s == TS_OK, "%s", err.msg);
    if (s) return;
    int same = n == nwant;
    for (int i = 0; same && i < n; i++)
        same = ids[i] == want[i];
    CHECK(same, "\"%s\" gave %d ids", text, n);
    free(ids);
}

int main(void) {
    ts_tok *t;
    ts_error err;
    /* valid: expected ids checked against HF tokenizers by hand ("xab" -> [2]: x is dropped) */
    const char *ok = make("\"type\": \"BPE\", " VOCAB ", \"merges\": [\"a b\"]", BL, "");
    ts_status s = ts_tok_load_json(ok, strlen(ok), "ok.json", NULL, &t, &err);
    CHECK(s == TS_OK, "%s", err.msg);
    if (!s) {
        encodes(t, "ab", (int32_t[]){2}, 1);
        encodes(t, "ba", (int32_t[]){1, 0}, 2);
        encodes(t, "xab", (int32_t[]){2}, 1);
        encodes(t, "a b", (int32_t[]){0, 1}, 2);
        encodes(t, "abab", (int32_t[]){2, 2}, 2);
        int32_t *ids;
        int n;
        CHECK(ts_tok_encode(t, "a\xC3", 2, 0, &ids, &n, &err) == TS_ERR_ARG &&
                  strstr(err.msg, "UTF-8"),
              "invalid UTF-8 text refused: %s", err.msg);
        char *out;
        size_t len;
        CHECK(ts_tok_decode(t, (int32_t[]){0, 7}, 2, 0, &out, &len, &err) == TS_ERR_ARG &&
                  strstr(err.msg, "id 7"),
              "decode of an unknown id refused: %s", err.msg);
        ts_tok_free(t);
    }
    /* an added token spelled like a vocabulary token takes over its spelling; ids may leave holes
     */
    ok = make("\"type\": \"BPE\", " VOCAB ", \"merges\": [\"a b\"]", BL,
              ", \"added_tokens\": [{\"id\": 5, \"content\": \"ab\", \"special\": true}]");
    s = ts_tok_load_json(ok, strlen(ok), "ok.json", NULL, &t, &err);
    CHECK(s == TS_OK, "added over vocab: %s", err.msg);
    if (!s) {
        size_t k;
        CHECK(ts_tok_n_vocab(t) == 6 && ts_tok_token_id(t, "ab", 2) == 5, "added token id wins");
        CHECK(ts_tok_token_str(t, 3, &k) == NULL, "a hole in the ids has no spelling");
        encodes(t, "xaby", (int32_t[]){5}, 1);
        ts_tok_free(t);
    }
    /* merges as pairs load too */
    ok = make("\"type\": \"BPE\", " VOCAB ", \"merges\": [[\"a\", \"b\"]]", BL, "");
    s = ts_tok_load_json(ok, strlen(ok), "ok.json", NULL, &t, &err);
    CHECK(s == TS_OK, "pair merges: %s", err.msg);
    if (!s) ts_tok_free(t);

    /* a list longer than the loader's 4096-merge chunks: 26 letters, 676 pairs "a b" (ranks
     * 0..675), then 17576 triples "ab c"; ids: letters 0..25, pairs 26.., triples 702.. */
    {
        size_t cap = 2u << 20, w = 0;
        char *js = malloc(cap);
        int bad_at = -1;
        for (int pass = 0; pass < 2 && js; pass++) {
            w = (size_t)snprintf(js, cap, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
            int id = 0;
            for (int a = 0; a < 26; a++, id++)
                w += (size_t)snprintf(js + w, cap - w, "%s\"%c\": %d", id ? ", " : "", 'a' + a, id);
            for (int a = 0; a < 26; a++)
                for (int b = 0; b < 26; b++)
                    w +=
                        (size_t)snprintf(js + w, cap - w, ", \"%c%c\": %d", 'a' + a, 'a' + b, id++);
            for (int a = 0; a < 26; a++)
                for (int b = 0; b < 26; b++)
                    for (int c = 0; c < 26; c++)
                        w += (size_t)snprintf(js + w, cap - w, ", \"%c%c%c\": %d", 'a' + a, 'a' + b,
                                              'a' + c, id++);
            w += (size_t)snprintf(js + w, cap - w, "}, \"merges\": [");
            int r = 0;
            for (int a = 0; a < 26; a++)
                for (int b = 0; b < 26; b++)
                    w += (size_t)snprintf(js + w, cap - w, "%s\"%c %c\"", r++ ? ", " : "", 'a' + a,
                                          'a' + b);
            for (int a = 0; a < 26; a++)
                for (int b = 0; b < 26; b++)
                    for (int c = 0; c < 26; c++) {
                        /* the second pass breaks merge 9000 (in the third chunk) */
                        int broken = pass == 1 && r == 9000;
                        if (broken) bad_at = r;
                        w += (size_t)snprintf(js + w, cap - w, ", \"%c%c %c\"", 'a' + a,
                                              broken ? 'A' : 'a' + b, 'a' + c);
                        r++;
                    }
            w += (size_t)snprintf(js + w, cap - w, "]}, \"pre_tokenizer\": " BL "}");
            s = ts_tok_load_json(js, w, "big.json", NULL, &t, &err);
            if (pass == 0) {
                CHECK(s == TS_OK, "18252 merges: %s", err.msg);
                if (!s) {
                    /* "abc": ab (rank 1) before bc (rank 28), then "ab c" -> abc = 702 + 0*676 +
                     * 1*26 + 2 */
                    encodes(t, "abc", (int32_t[]){702 + 28}, 1);
                    /* "zab": ab (rank 1) before za (rank 650); "z ab" is no merge */
                    encodes(t, "zab", (int32_t[]){25, 26 + 1}, 2);
                    encodes(t, "zzz", (int32_t[]){702 + 17575}, 1);
                    ts_tok_free(t);
                }
            } else {
                char want[32];
                snprintf(want, sizeof want, "model.merges[%d]", bad_at);
                CHECK(s == TS_ERR_FORMAT && strstr(err.msg, want), "bad merge in a later chunk: %s",
                      err.msg);
            }
        }
        free(js);
    }

    refused("truncated JSON", "{\"model\": {\"type\": \"BPE\", ", TS_ERR_FORMAT, "invalid JSON",
            "line 1");
    refused("not JSON", "hello", TS_ERR_FORMAT, "invalid JSON", "an object at the top");
    refused("garbage after", "{\"model\": {}} x", TS_ERR_FORMAT, "end of the file", NULL);
    refused("missing model", "{\"version\": \"1.0\", \"pre_tokenizer\": null}", TS_ERR_FORMAT,
            "\"model\" is missing", NULL);
    refused("model type WordPiece", make("\"type\": \"WordPiece\", " VOCAB, BL, ""),
            TS_ERR_UNSUPPORTED, "model.type is \"WordPiece\"", "BPE");
    refused("Unigram model", "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", -1.5]]}}",
            TS_ERR_UNSUPPORTED, "model.type is \"Unigram\"", NULL);
    refused("model type not a string", make("\"type\": 3, " VOCAB ", \"merges\": []", BL, ""),
            TS_ERR_FORMAT, "\"type\"", "expected a string");
    refused("vocab missing", make("\"type\": \"BPE\", \"merges\": []", BL, ""), TS_ERR_FORMAT,
            "model.vocab", "missing");
    refused("vocab value not an integer",
            make("\"type\": \"BPE\", \"vocab\": {\"a\": \"x\"}", BL, ""), TS_ERR_FORMAT,
            "model.vocab", "an integer");
    refused("vocab id negative", make("\"type\": \"BPE\", \"vocab\": {\"a\": -1}", BL, ""),
            TS_ERR_FORMAT, "model.vocab", "-1");
    refused("id far outside", make("\"type\": \"BPE\", \"vocab\": {\"a\": 100000000}", BL, ""),
            TS_ERR_FORMAT, "token id 100000000", NULL);
    refused("model twice", "{\"model\": {\"type\": \"BPE\", " VOCAB "}, \"model\": {}}",
            TS_ERR_FORMAT, "one \"model\" field", NULL);
    refused("vocab key twice", make("\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"a\": 1}", BL, ""),
            TS_ERR_FORMAT, "model.vocab", "appears twice");
    refused("vocab id twice", make("\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}", BL, ""),
            TS_ERR_FORMAT, "id 0 is given to both", NULL);
    refused("merge of unknown token",
            make("\"type\": \"BPE\", " VOCAB ", \"merges\": [\"a b\", \"a x\"]", BL, ""),
            TS_ERR_FORMAT, "model.merges[1]", "token \"x\" is not in model.vocab");
    refused("merged token unknown",
            make("\"type\": \"BPE\", " VOCAB ", \"merges\": [\"b a\"]", BL, ""), TS_ERR_FORMAT,
            "model.merges[0]", "the merged token \"ba\"");
    refused("merge without space",
            make("\"type\": \"BPE\", " VOCAB ", \"merges\": [\"ab\"]", BL, ""), TS_ERR_FORMAT,
            "model.merges[0]", "separated by one space");
    refused("merge pair malformed",
            make("\"type\": \"BPE\", " VOCAB ", \"merges\": [[\"a\"]]", BL, ""), TS_ERR_FORMAT,
            "model.merges", "','");
    refused("merges before vocab, unknown",
            make("\"type\": \"BPE\", \"merges\": [\"a q\"], " VOCAB, BL, ""), TS_ERR_FORMAT,
            "model.merges[0]", "\"q\"");
    refused("dropout",
            make("\"type\": \"BPE\", \"dropout\": 0.1, " VOCAB ", \"merges\": []", BL, ""),
            TS_ERR_UNSUPPORTED, "model.dropout", NULL);
    refused("word suffix",
            make("\"type\": \"BPE\", \"end_of_word_suffix\": \"</w>\", " VOCAB, BL, ""),
            TS_ERR_UNSUPPORTED, "end_of_word_suffix", NULL);
    refused("unknown pre-tokenizer",
            make("\"type\": \"BPE\", " VOCAB,
                 "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Whitespace\"}, " BL
                 "]}",
                 ""),
            TS_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[0]", "\"Whitespace\"");
    refused("no ByteLevel",
            make("\"type\": \"BPE\", " VOCAB,
                 "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": "
                 "\"Isolated\", \"invert\": false}",
                 ""),
            TS_ERR_UNSUPPORTED, "ByteLevel", NULL);
    refused("split behaviour",
            make("\"type\": \"BPE\", " VOCAB,
                 "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
                 "{\"Regex\": \"a\"}, "
                 "\"behavior\": \"Sideways\"}, " BL "]}",
                 ""),
            TS_ERR_UNSUPPORTED, "behavior is \"Sideways\"", NULL);
    refused("bad regex",
            make("\"type\": \"BPE\", " VOCAB,
                 "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
                 "{\"Regex\": \"(a\"}, "
                 "\"behavior\": \"Isolated\"}, " BL "]}",
                 ""),
            TS_ERR_UNSUPPORTED, "pretokenizers[0].pattern", "does not compile");
    refused("split pattern missing",
            make("\"type\": \"BPE\", " VOCAB,
                 "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"behavior\": "
                 "\"Isolated\"}, " BL "]}",
                 ""),
            TS_ERR_FORMAT, "pretokenizers[0].pattern", NULL);
    refused("unknown normalizer",
            make("\"type\": \"BPE\", " VOCAB, BL, ", \"normalizer\": {\"type\": \"Lowercase\"}"),
            TS_ERR_UNSUPPORTED, "normalizer", "\"Lowercase\"");
    refused("added token without content",
            make("\"type\": \"BPE\", " VOCAB, BL, ", \"added_tokens\": [{\"id\": 5}]"),
            TS_ERR_FORMAT, "added_tokens[0]", "\"content\"");
    refused("added tokens not an array",
            make("\"type\": \"BPE\", " VOCAB, BL, ", \"added_tokens\": {}"), TS_ERR_FORMAT,
            "added_tokens", "an array");
    refused("decoder",
            make("\"type\": \"BPE\", " VOCAB, BL, ", \"decoder\": {\"type\": \"WordPiece\"}"),
            TS_ERR_UNSUPPORTED, "decoder", "ByteLevel");
    /* 2^32 + 2 would wrap to the valid id 2 if it were cast without a range check */
    refused("template bos id beyond 32 bits",
            make("\"type\": \"BPE\", " VOCAB, BL,
                 ", \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
                 "{\"id\": \"<s>\", \"type_id\": 0}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", "
                 "\"ids\": [4294967298], \"tokens\": [\"<s>\"]}}}"),
            TS_ERR_FORMAT, "post_processor", "4294967298");
    refused("template bos id outside the vocabulary",
            make("\"type\": \"BPE\", " VOCAB, BL,
                 ", \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
                 "{\"id\": \"<s>\", \"type_id\": 0}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", "
                 "\"ids\": [3], \"tokens\": [\"<s>\"]}}}"),
            TS_ERR_FORMAT, "post_processor", "[0, 3)");
    refused("bad escape", make("\"type\": \"BPE\", \"vocab\": {\"a\\q\": 0}", BL, ""),
            TS_ERR_FORMAT, "invalid JSON", "escape");
    refused("lone surrogate", make("\"type\": \"BPE\", \"vocab\": {\"\\udc00\": 0}", BL, ""),
            TS_ERR_FORMAT, "invalid JSON", "surrogate");

    /* an added token with an embedded NUL keeps its full content: "a\0b" is one token (id 7)
     * and the text "a" alone is not it */
    {
        const char *j = make("\"type\": \"BPE\", " VOCAB ", \"merges\": [\"a b\"]", BL,
                             ", \"added_tokens\": [{\"id\": 7, \"content\": \"a\\u0000b\", \"special\": true}]");
        ts_tok *tn = NULL;
        s = ts_tok_load_json(j, strlen(j), "nul.json", NULL, &tn, &err);
        CHECK(s == TS_OK, "added token with NUL: %s", err.msg);
        if (!s) {
            CHECK(ts_tok_token_id(tn, "a\0b", 3) == 7, "\"a\\0b\" is not token 7 (%d)", ts_tok_token_id(tn, "a\0b", 3));
            CHECK(ts_tok_token_id(tn, "a", 1) != 7, "the content was shortened to \"a\"");
            ts_tok_free(tn);
        }
    }
    s = ts_tok_load("/nonexistent/tokenizer.json", &t, &err);
    CHECK(s == TS_ERR_IO && strstr(err.msg, "/nonexistent/tokenizer.json"), "missing file: %s",
          err.msg);
    const char *dir = th_tmpdir("tok_errors");
    s = ts_tok_load(dir, &t, &err);
    CHECK(s == TS_ERR_IO && strstr(err.msg, "tokenizer.json"),
          "directory without tokenizer.json: %s", err.msg);
    return th_finish("test_tok_errors");
}
