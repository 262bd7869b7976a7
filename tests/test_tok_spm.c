/* SentencePiece-style BPE from hand-built vocabulary arrays, with the expected ids worked out
 * by hand in the comments: score order (not vocabulary order) decides merges, ties go to the
 * leftmost pair, "▁" and the dummy prefix, <0xNN> byte fallback, <unk> without byte tokens,
 * control/user tokens written in the text, and decoding back. */
#include <stdlib.h>
#include <string.h>

#include "tharness.h"
#include "tok/tokenizer.h"

#define SP "\xE2\x96\x81" /* ▁ */

/* ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then the pieces below */
enum {
    T_SP = 259,
    T_t,
    T_h,
    T_e,
    T_c,
    T_a,
    T_SPt,
    T_he,
    T_SPthe,
    T_at,
    T_SPc,
    T_th,
    T_aa,
    T_USER,
    N_VOCAB
};

static ts_tok *build(int with_bytes) {
    static char names[256][8];
    const char *tok[N_VOCAB];
    float score[N_VOCAB];
    int32_t type[N_VOCAB];
    tok[0] = "<unk>";
    tok[1] = "<s>";
    tok[2] = "</s>";
    type[0] = TS_TOK_TYPE_UNKNOWN;
    type[1] = type[2] = TS_TOK_TYPE_CONTROL;
    for (int b = 0; b < 256; b++) {
        snprintf(names[b], sizeof names[b], "<0x%02X>", b);
        /* without byte tokens the same spellings are typed unused: no fallback to them */
        tok[3 + b] = names[b];
        type[3 + b] = with_bytes ? TS_TOK_TYPE_BYTE : TS_TOK_TYPE_UNUSED;
    }
    struct {
        int id;
        const char *s;
        float score;
    } p[] = {
        {T_SP, SP, -10},         {T_t, "t", -10},       {T_h, "h", -10},     {T_e, "e", -10},
        {T_c, "c", -10},         {T_a, "a", -10},       {T_SPt, SP "t", -1}, {T_he, "he", -2},
        {T_SPthe, SP "the", -3}, {T_at, "at", -1.5f},   {T_SPc, SP "c", -4}, {T_th, "th", -0.5f},
        {T_aa, "aa", -1},        {T_USER, "<tool>", 0},
    };
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
        tok[p[i].id] = p[i].s;
        score[p[i].id] = p[i].score;
        type[p[i].id] = p[i].id == T_USER ? TS_TOK_TYPE_USER_DEFINED : TS_TOK_TYPE_NORMAL;
    }
    for (int i = 0; i < 259; i++)
        score[i] = 0;
    ts_tok_spm_params prm = {.n_vocab = N_VOCAB,
                             .tokens = tok,
                             .scores = score,
                             .types = type,
                             .bos = 1,
                             .eos = 2,
                             .unk = 0,
                             .add_space_prefix = 1};
    ts_tok *t;
    ts_error err;
    ts_status s = ts_tok_spm_new(&prm, &t, &err);
    CHECK(s == TS_OK, "%s", err.msg);
    return s ? NULL : t;
}

static void expect(const ts_tok *t, const char *text, int bos, const int32_t *want, int nwant) {
    int32_t *ids;
    int n;
    ts_error err;
    ts_status s = ts_tok_encode(t, text, strlen(text), bos, &ids, &n, &err);
    CHECK(s == TS_OK, "encode \"%s\": %s", text, err.msg);
    if (s) return;
    int same = n == nwant;
    for (int i = 0; same && i < n; i++)
        same = ids[i] == want[i];
    CHECK(same, "encode \"%s\": got %d ids, first %d", text, n, n ? ids[0] : -1);
    if (!same) {
        for (int i = 0; i < n; i++)
            fprintf(stderr, " %d", ids[i]);
        fputc('\n', stderr);
    }
    free(ids);
}

static void expect_decode(const ts_tok *t, const int32_t *ids, int n, int skip, const char *want) {
    char *out;
    size_t len;
    ts_error err;
    ts_status s = ts_tok_decode(t, ids, n, skip, &out, &len, &err);
    CHECK(s == TS_OK && len == strlen(want) && !memcmp(out, want, len),
          "decode: got \"%s\", want \"%s\"", s ? err.msg : out, want);
    if (!s) free(out);
}

int main(void) {
    ts_tok *t = build(1);
    if (!t) return th_finish("test_tok_spm");
    /* "the cat" -> "▁the▁cat": pairs ▁t -1, th -0.5, he -2, ▁c -4, at -1.5. th merges first
     * (best score) so ▁t and he go stale and ▁the is never reached; then at, then ▁c:
     * ▁ th e ▁c at */
    expect(t, "the cat", 0, (int32_t[]){T_SP, T_th, T_e, T_SPc, T_at}, 5);
    /* with bos */
    expect(t, "the cat", 1, (int32_t[]){1, T_SP, T_th, T_e, T_SPc, T_at}, 6);
    /* "▁aaa": aa at positions 1 and 2 tie at -1; the leftmost wins: ▁ aa a */
    expect(t, "aaa", 0, (int32_t[]){T_SP, T_aa, T_a}, 3);
    /* "hé": é is no piece, so its two bytes C3 A9 fall back to <0xC3> = 3 + 0xC3, <0xA9> */
    expect(t, "h\xC3\xA9", 0, (int32_t[]){T_SP, T_h, 3 + 0xC3, 3 + 0xA9}, 4);
    /* "t": ▁ + t merge into ▁t */
    expect(t, "t", 0, (int32_t[]){T_SPt}, 1);
    /* a control token in the text, and the run after it gets the dummy prefix (llama.cpp) */
    expect(t, "<s>t</s>", 0, (int32_t[]){1, T_SPt, 2}, 3);
    /* user-defined token; the spaces around it are ▁ pieces */
    expect(t, "a <tool> a", 0, (int32_t[]){T_SP, T_a, T_SP, T_USER, T_SP, T_SP, T_a}, 7);
    expect(t, "", 0, NULL, 0);
    CHECK(ts_tok_bos(t) == 1 && ts_tok_eos(t) == 2 && ts_tok_n_vocab(t) == N_VOCAB,
          "bos/eos/n_vocab");
    CHECK(ts_tok_token_id(t, SP "the", 6) == T_SPthe, "token id of ▁the");
    size_t len;
    const char *b = ts_tok_token_bytes(t, T_SPthe, &len);
    CHECK(b && len == 4 && !memcmp(b, " the", 4), "bytes of ▁the");
    b = ts_tok_token_bytes(t, 3 + 0xC3, &len);
    CHECK(b && len == 1 && (uint8_t)b[0] == 0xC3, "bytes of <0xC3>");
    /* decoding drops the dummy prefix's space, joins byte tokens, and can skip control tokens */
    expect_decode(t, (int32_t[]){1, T_SP, T_th, T_e, T_SPc, T_at}, 6, 1, "the cat");
    expect_decode(t, (int32_t[]){1, T_SP, T_th, T_e, T_SPc, T_at}, 6, 0, "<s>the cat");
    expect_decode(t, (int32_t[]){T_SP, T_h, 3 + 0xC3, 3 + 0xA9}, 4, 1, "h\xC3\xA9");
    ts_tok_free(t);

    /* no byte tokens: an unknown character becomes <unk> (one per byte, as llama.cpp) */
    t = build(0);
    if (t) {
        expect(t, "h\xC3\xA9", 0, (int32_t[]){T_SP, T_h, 0, 0}, 4);
        ts_tok_free(t);
    }

    /* argument errors */
    ts_tok_spm_params bad = {0};
    ts_error err;
    CHECK(ts_tok_spm_new(&bad, &t, &err) == TS_ERR_ARG, "empty vocabulary refused");
    const char *one[] = {"a"};
    float sc[] = {0};
    ts_tok_spm_params bad2 = {
        .n_vocab = 1, .tokens = one, .scores = sc, .bos = 5, .eos = -1, .unk = -1};
    CHECK(ts_tok_spm_new(&bad2, &t, &err) == TS_ERR_ARG && strstr(err.msg, "bos id 5"),
          "bos outside the vocabulary refused: %s", err.msg);
    return th_finish("test_tok_spm");
}
