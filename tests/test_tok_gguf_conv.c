/* GGUF vocabularies made by llama.cpp's own converter (convert_hf_to_gguf.py --vocab-only from
 * the committed Llama-3 and Qwen3 tokenizer files plus a minimal config.json; see
 * docs/tokenizer.md) against the tokenizer.json path: every golden string must encode to the
 * same ids (and HF's) and decode the same. */
#include "tok_cmp.h"

int main(void) {
    /* committed (tests/fixtures/shared/tokenizers/gguf-vocab.tar.xz); TS_TOK_GGUF_DIR points
     * the test at other converter output */
    char dir[4096];
    const char *env = getenv("TS_TOK_GGUF_DIR");
    snprintf(dir, sizeof dir, "%s", env && *env ? env : th_shared("tokenizers/gguf-vocab"));
    json_t *gold;
    ts_error err;
    ts_status s = ts_json_load_file(th_fixture("tok/golden.json"), 16 << 20, &gold, &err);
    CHECK(s == TS_OK, "%s", err.msg);
    if (!s) {
        static const char *names[] = {"llama3", "qwen3"};
        for (int i = 0; i < 2; i++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/%s.gguf", dir, names[i]);
            ts_tok *tj = NULL, *tg;
            if (ts_tok_load(shared_tok(names[i]), &tj, &err) || !(tg = open_gguf(path))) {
                CHECK(0, "%s: %s", names[i], err.msg);
                ts_tok_free(tj);
                continue;
            }
            char label[64];
            snprintf(label, sizeof label, "%s (converter)", names[i]);
            compare(label, tj, tg, json_object_get(gold, names[i]), 1);
            /* the converter types HF's non-special added tokens that look special ("<|...|>")
             * as control: special flags may differ, ids may not */
            compare_tables(label, tj, tg, 1);
            printf("%-16s bos %d/%d eos %d/%d add_bos %d (GGUF/json)\n", label, ts_tok_bos(tg),
                   ts_tok_bos(tj), ts_tok_eos(tg), ts_tok_eos(tj), ts_tok_add_bos(tg));
            CHECK(ts_tok_eos(tg) == ts_tok_eos(tj), "%s: eos %d vs %d", label, ts_tok_eos(tg),
                  ts_tok_eos(tj));
            ts_tok_free(tg);
            ts_tok_free(tj);
        }
    }
    json_decref(gold);
    return th_finish("test_tok_gguf_conv");
}
