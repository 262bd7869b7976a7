/* Helpers of the GGUF tokenizer tests: the same texts through two tokenizers (ids, decode) and
 * their token tables, with a one-line summary each. Included by test_tok_gguf*.c only. */
#ifndef TS_TESTS_TOK_CMP_H
#define TS_TESTS_TOK_CMP_H
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "tharness.h"
#include "tok/tokenizer.h"

static const char *shared_tok(const char *name) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s/tokenizer.json", th_shared("tokenizers"), name);
    return buf;
}

/* ---- comparing the two paths ---- */

static int same_ids(const int32_t *a, int na, const int32_t *b, int nb) {
    return na == nb && (na == 0 || !memcmp(a, b, (size_t)na * sizeof *a));
}

/* Every golden text through both tokenizers (and HF's ids when `hf`); returns mismatches. */
static int compare(const char *name, const ts_tok *tj, const ts_tok *tg, const json_t *rows, int hf) {
    int same = 0, dec_same = 0, hf_same = 0, shown = 0, total = (int)json_array_size(rows);
    for (size_t i = 0; i < json_array_size(rows); i++) {
        const json_t *r = json_array_get(rows, i), *jt = json_object_get(r, "text");
        const char *text = json_string_value(jt);
        size_t len = json_string_length(jt);
        int32_t *a = NULL, *b = NULL;
        int na = 0, nb = 0;
        ts_error err;
        ts_status s1 = ts_tok_encode(tj, text, len, 0, &a, &na, &err);
        ts_status s2 = ts_tok_encode(tg, text, len, 0, &b, &nb, &err);
        CHECK(!s1 && !s2, "%s: encode: %s", name, err.msg);
        int eq = !s1 && !s2 && same_ids(a, na, b, nb);
        same += eq;
        if (!eq && shown++ < 3) fprintf(stderr, "%s: ids differ on \"%s\"\n", name, text);
        if (hf) {
            const json_t *want = json_object_get(r, "ids");
            int ok = nb == (int)json_array_size(want);
            for (int k = 0; ok && k < nb; k++)
                ok = b[k] == (int32_t)json_integer_value(json_array_get(want, (size_t)k));
            hf_same += ok;
        }
        int dec_eq = 1;
        for (int skip = 0; skip < 2 && eq; skip++) {
            char *da = NULL, *db = NULL;
            size_t la = 0, lb = 0;
            s1 = ts_tok_decode(tj, a, na, skip, &da, &la, &err);
            s2 = ts_tok_decode(tg, b, nb, skip, &db, &lb, &err);
            dec_eq &= !s1 && !s2 && la == lb && !memcmp(da, db, la);
            free(da);
            free(db);
        }
        dec_same += eq && dec_eq;
        free(a);
        free(b);
    }
    printf("%-16s %d/%d strings: same ids on both paths %d, same decode %d", name, total, total,
           same, dec_same);
    if (hf) printf(", GGUF path = HF %d", hf_same);
    printf("\n");
    CHECK(same == total && dec_same == total, "%s: %d ids / %d decodes differ", name, total - same,
          total - dec_same);
    CHECK(!hf || hf_same == total, "%s: %d strings differ from HF", name, total - hf_same);
    return total - same;
}

/* Token tables: every json id has the same spelling, bytes and special flag in the GGUF. */
static void compare_tables(const char *name, const ts_tok *tj, const ts_tok *tg, int special_ok) {
    int n = ts_tok_n_vocab(tj), str_diff = 0, spec_diff = 0;
    CHECK(ts_tok_n_vocab(tg) >= n, "%s: GGUF has %d tokens, json %d", name, ts_tok_n_vocab(tg), n);
    for (int32_t id = 0; id < n && id < ts_tok_n_vocab(tg); id++) {
        size_t la, lb;
        const char *a = ts_tok_token_bytes(tj, id, &la), *b = ts_tok_token_bytes(tg, id, &lb);
        if (!a || !b || la != lb || memcmp(a, b, la)) str_diff++;
        if (ts_tok_is_special(tj, id) != ts_tok_is_special(tg, id)) spec_diff++;
    }
    printf("%-16s tables: %d ids, bytes differ %d, special flag differs %d\n", name, n, str_diff,
           spec_diff);
    CHECK(str_diff == 0, "%s: %d token byte strings differ", name, str_diff);
    CHECK(special_ok || spec_diff == 0, "%s: %d special flags differ", name, spec_diff);
}

static ts_tok *open_gguf(const char *path) {
    ts_tok *t = NULL;
    ts_error err;
    ts_status s = ts_tok_load(path, &t, &err); /* detects the GGUF magic */
    CHECK(s == TS_OK, "%s", err.msg);
    return s ? NULL : t;
}

#endif
