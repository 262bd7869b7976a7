/* GGUF tokenizers (src/tok/tok_gguf.c) against the tokenizer.json path and HF's goldens:
 * - stories260K.gguf (SentencePiece, 512 tokens): ids as llama.cpp's llama-tokenize gives them,
 *   BOS as llama.cpp adds it, exact decode;
 * - GGUFs written from tokenizer.json files by ts_tok_gguf_write, which must name their
 *   pre-tokenizers as llama.cpp's converter does (smol as "gpt-2" and, with Digits, "smollm",
 *   Llama-3 as "llama-bpe", Qwen3 as "qwen2"): every golden
 *   string (corpus + random) must encode to the same ids as the tokenizer.json path (and HF's),
 *   decode the same, and agree on special tokens and BOS/EOS;
 * - malformed or unsupported files refused with the file and the key named.
 * test_tok_gguf_conv does the same comparison on files made by llama.cpp's converter. */
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "io/json.h"
#include "tharness.h"
#include "tok/tokenizer.h"
#include "tok_cmp.h"

/* ---- writing a GGUF vocabulary from a tokenizer.json (the library's ts_tok_gguf_write, which
 * `tessera quantize` uses for Hugging Face directories) ---- */

/* The pre-tokenizer name is chosen from the tokenizer.json itself and must be `pre`. */
static int write_gguf_from_json(const char *json_path, const char *pre, const char *out) {
    ts_error err;
    const char *used = NULL;
    ts_gguf_writer *w = ts_gguf_writer_new();
    ts_gguf_w_str(w, "general.architecture", "llama");
    ts_status s = ts_tok_gguf_write(w, json_path, 0, NULL, 0, NULL, &used, &err);
    CHECK(s == TS_OK, "%s", err.msg);
    CHECK(s || (used && !strcmp(used, pre)), "%s: tokenizer.ggml.pre \"%s\", expected \"%s\"", json_path,
          used ? used : "", pre);
    if (!s) s = ts_gguf_writer_save(w, out, &err);
    CHECK(s == TS_OK, "%s", err.msg);
    ts_gguf_writer_free(w);
    return s ? -1 : 0;
}

/* json -> GGUF (pre) -> both compared on the golden rows of `gold_key`. */
static void json_vs_gguf(const char *name, const char *json_path, const char *pre, const json_t *gold,
                         const char *gold_key, int hf) {
    ts_tok *tj, *tg;
    ts_error err;
    ts_status s = ts_tok_load(json_path, &tj, &err);
    CHECK(s == TS_OK, "%s", err.msg);
    if (s) return;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.gguf", th_tmpdir(name), name);
    if (!write_gguf_from_json(json_path, pre, path) && (tg = open_gguf(path))) {
        compare(name, tj, tg, json_object_get(gold, gold_key), hf);
        compare_tables(name, tj, tg, 0);
        CHECK(ts_tok_bos(tg) == ts_tok_bos(tj) && ts_tok_eos(tg) == ts_tok_eos(tj),
              "%s: bos/eos %d/%d vs json %d/%d", name, ts_tok_bos(tg), ts_tok_eos(tg),
              ts_tok_bos(tj), ts_tok_eos(tj));
        ts_tok_free(tg);
    }
    ts_tok_free(tj);
}

/* ---- SentencePiece: stories260K ---- */

static void test_spm(void) {
    ts_tok *t = open_gguf(th_shared("models/stories260K.gguf"));
    if (!t) return;
    CHECK(ts_tok_n_vocab(t) == 512 && ts_tok_bos(t) == 1 && ts_tok_eos(t) == 2,
          "stories260K: %d tokens, bos %d, eos %d", ts_tok_n_vocab(t), ts_tok_bos(t), ts_tok_eos(t));
    CHECK(ts_tok_add_bos(t) == 1 && ts_tok_add_eos(t) == 0, "llama.cpp's SPM defaults: BOS, no EOS");
    static const char text[] = "Once upon a time, there was a little girl named Lily.";
    /* llama.cpp's llama-tokenize on this file */
    static const int32_t want[] = {1,   403, 407, 261, 378, 432, 383, 286,
                                   261, 376, 298, 315, 421, 395, 317, 426};
    int32_t *ids;
    int n;
    ts_error err;
    ts_status s = ts_tok_encode(t, text, sizeof text - 1, ts_tok_add_bos(t), &ids, &n, &err);
    CHECK(s == TS_OK && same_ids(ids, n, want, 16), "stories260K ids (n %d)", n);
    if (!s) {
        char *dec;
        size_t len;
        s = ts_tok_decode(t, ids, n, 1, &dec, &len, &err);
        CHECK(s == TS_OK && len == sizeof text - 1 && !memcmp(dec, text, len),
              "stories260K decode: \"%s\"", s ? err.msg : dec);
        if (!s) free(dec);
        free(ids);
    }
    printf("stories260K      %d tokens, \"%s\" -> %d ids with BOS, decodes back exactly\n",
           ts_tok_n_vocab(t), text, n);
    ts_tok_free(t);
}

/* `tessera tokenize` takes the .gguf as PATH. */
static void test_cli(void) {
    char in[4200], cmd[16384], out[4096] = {0};
    snprintf(in, sizeof in, "%s/in.txt", th_tmpdir("tok_gguf_cli"));
    FILE *f = fopen(in, "wb");
    if (f) {
        fputs("Once upon a time, there was a little girl named Lily.", f);
        fclose(f);
    }
    snprintf(cmd, sizeof cmd, "'%s' tokenize '%s' --ids --bos --file '%s'", th_bin(),
             th_shared("models/stories260K.gguf"), in);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    int rc = p ? pclose(p) : -1;
    out[n] = 0;
    CHECK(rc == 0 && !strcmp(out, "1 403 407 261 378 432 383 286 261 376 298 315 421 395 317 426\n"),
          "tessera tokenize stories260K.gguf: rc %d, \"%s\"", rc, out);
}

/* ---- refusals ---- */

/* A small gpt2 vocabulary ({"a", "b", "ab", "<s>"}, merge "a b") with some keys replaced. */
typedef struct bad_case {
    const char *what, *model, *pre;
    const char *const *tokens;
    int n_tokens;
    const int32_t *types;
    int n_types;
    const char *const *merges;
    int n_merges;
    const float *scores;
    int n_scores;
    int64_t bos; /* -1: absent */
    const char *n1, *n2; /* must appear in the message */
} bad_case;

static void refused(const bad_case *c) {
    static const char *toks[] = {"a", "b", "ab", "<s>"};
    static const char *merges[] = {"a b"};
    static const int32_t types[] = {1, 1, 1, 3};
    char path[4200];
    snprintf(path, sizeof path, "%s/bad.gguf", th_tmpdir("tok_gguf_bad"));
    ts_gguf_writer *w = ts_gguf_writer_new();
    ts_gguf_w_str(w, "tokenizer.ggml.model", c->model ? c->model : "gpt2");
    if (c->pre) ts_gguf_w_str(w, "tokenizer.ggml.pre", c->pre);
    ts_gguf_w_arr_str(w, "tokenizer.ggml.tokens", c->tokens ? c->tokens : toks,
                      c->tokens ? (uint64_t)c->n_tokens : 4);
    ts_gguf_w_arr(w, "tokenizer.ggml.token_type", TS_GGUF_I32, c->types ? c->types : types,
                  c->types ? (uint64_t)c->n_types : 4);
    ts_gguf_w_arr_str(w, "tokenizer.ggml.merges", c->merges ? c->merges : merges,
                      c->merges ? (uint64_t)c->n_merges : 1);
    if (c->scores) ts_gguf_w_arr(w, "tokenizer.ggml.scores", TS_GGUF_F32, c->scores, (uint64_t)c->n_scores);
    if (c->bos >= 0) ts_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)c->bos);
    ts_error err = {{0}};
    ts_status s = ts_gguf_writer_save(w, path, &err);
    ts_gguf_writer_free(w);
    CHECK(s == TS_OK, "%s", err.msg);
    ts_tok *t = NULL;
    s = ts_tok_load(path, &t, &err);
    CHECK(s != TS_OK && strstr(err.msg, "bad.gguf") && strstr(err.msg, c->n1) &&
              (!c->n2 || strstr(err.msg, c->n2)),
          "%s: status %s, message \"%s\" (want \"%s\", \"%s\")", c->what, ts_status_name(s),
          err.msg, c->n1, c->n2 ? c->n2 : "");
    printf("refused (%s): %s\n", c->what, err.msg);
    ts_tok_free(t);
}

static void test_refusals(void) {
    static const int32_t t3[] = {1, 1, 1}, t9[] = {1, 9, 1, 3};
    static const char *m2[] = {"a b", "ab"}, *mx[] = {"a x"}, *dup[] = {"a", "b", "ab", "a"};
    static const float sc[] = {0, 0};
    const bad_case cases[] = {
        {.what = "bert", .model = "bert", .bos = -1, .n1 = "tokenizer.ggml.model",
         .n2 = "\"bert\" (WordPiece"},
        {.what = "pre", .pre = "tekken", .bos = -1, .n1 = "tokenizer.ggml.pre", .n2 = "\"tekken\""},
        {.what = "types", .types = t3, .n_types = 3, .bos = -1, .n1 = "tokenizer.ggml.token_type",
         .n2 = "has 3 entries, expected 4"},
        {.what = "type 9", .types = t9, .n_types = 4, .bos = -1,
         .n1 = "tokenizer.ggml.token_type[1]", .n2 = "is 9"},
        {.what = "bos", .bos = 7, .n1 = "tokenizer.ggml.bos_token_id", .n2 = "is 7"},
        {.what = "merge", .merges = m2, .n_merges = 2, .bos = -1, .n1 = "tokenizer.ggml.merges[1]",
         .n2 = "one space"},
        {.what = "merge token", .merges = mx, .n_merges = 1, .bos = -1,
         .n1 = "tokenizer.ggml.merges[0]", .n2 = "not in tokenizer.ggml.tokens"},
        {.what = "duplicate", .tokens = dup, .n_tokens = 4, .bos = -1,
         .n1 = "tokenizer.ggml.tokens", .n2 = "appears twice"},
        {.what = "scores", .model = "llama", .scores = sc, .n_scores = 2, .bos = -1,
         .n1 = "tokenizer.ggml.scores", .n2 = "has 2 entries"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        refused(&cases[i]);
}

/* A GGUF with weights' metadata but no vocabulary. */
static void test_no_tokenizer(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/bad.gguf", th_tmpdir("tok_gguf_none"));
    ts_gguf_writer *w = ts_gguf_writer_new();
    ts_gguf_w_str(w, "general.architecture", "llama");
    ts_error err = {{0}};
    ts_status s = ts_gguf_writer_save(w, path, &err);
    ts_gguf_writer_free(w);
    ts_tok *t = NULL;
    if (!s) s = ts_tok_load(path, &t, &err);
    CHECK(s == TS_ERR_FORMAT && strstr(err.msg, "bad.gguf: no tokenizer") &&
              strstr(err.msg, "tokenizer.ggml.model"),
          "no tokenizer: %s", err.msg);
    ts_tok_free(t);
}

int main(void) {
    test_spm();
    test_cli();
    test_refusals();
    test_no_tokenizer();

    json_t *gold;
    ts_error err;
    ts_status s = ts_json_load_file(th_fixture("tok/golden.json"), 16 << 20, &gold, &err);
    CHECK(s == TS_OK, "%s", err.msg);
    if (!s) {
        /* smol's file is GPT-2's pre-tokenizer; with Digits(individual) first it is SmolLM2's */
        json_vs_gguf("smol_gpt2", th_fixture("tok/smol/tokenizer.json"), "gpt-2", gold, "smol", 1);
        json_t *js;
        ts_json_load_file(th_fixture("tok/smol/tokenizer.json"), 16 << 20, &js, &err);
        json_t *seq = json_pack("{s:s, s:[{s:s, s:b}, O]}", "type", "Sequence", "pretokenizers",
                                "type", "Digits", "individual_digits", 1,
                                json_object_get(js, "pre_tokenizer"));
        json_object_set_new(js, "pre_tokenizer", seq);
        char dpath[4200];
        snprintf(dpath, sizeof dpath, "%s/tokenizer.json", th_tmpdir("smol_digits_json"));
        json_dump_file(js, dpath, JSON_COMPACT);
        json_decref(js);
        json_vs_gguf("smol_smollm", dpath, "smollm", gold, "smol_digits", 1);
        json_vs_gguf("llama3", shared_tok("llama3"), "llama-bpe", gold, "llama3", 1);
        json_vs_gguf("qwen3", shared_tok("qwen3"), "qwen2", gold, "qwen3", 1);
    }

    json_decref(gold);
    return th_finish("test_tok_gguf");
}
