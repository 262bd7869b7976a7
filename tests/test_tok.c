/* Tokenizer exactness against Hugging Face `tokenizers`: every corpus string of
 * tests/fixtures/tok/golden.json must encode to HF's ids for the trained SmolLM2-style file
 * (with and without add_prefix_space) and the real Llama-3 and Qwen3 files; decoding and the
 * streaming decoder must give the text back wherever HF's decode does. Also HF's Split
 * behaviours (split.json) and hand-checked streaming cases. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "io/json.h"
#include "io/mmap.h"
#include "tharness.h"
#include "tok/tok_internal.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* tokenizers/NAME/tokenizer.json of the unpacked real tokenizers (th_shared). */
static const char *shared_tok(const char *name) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s/tokenizer.json", th_shared("tokenizers"), name);
    return buf;
}

/* Streams ids through a fresh decoder; the concatenation is malloc'd. Checks that no call
 * returns a partial character. */
static char *stream_all(const ts_tok *t, const int32_t *ids, int n, size_t *out_len) {
    ts_tok_stream *st;
    ts_error err;
    if (ts_tok_stream_new(t, 0, &st, &err)) return NULL;
    tok_buf b = {0};
    tok_buf_put(&b, "", 0);
    for (int i = 0; i < n; i++) {
        const char *p;
        size_t k;
        ts_status s = ts_tok_stream_feed(st, ids[i], &p, &k, &err);
        CHECK(s == TS_OK, "stream feed: %s", err.msg);
        CHECK(tok_utf8_valid((const uint8_t *)p, k) == k,
              "stream gave a partial character at id %d", i);
        tok_buf_put(&b, p, k);
    }
    size_t k;
    const char *p = ts_tok_stream_flush(st, &k);
    tok_buf_put(&b, p, k);
    ts_tok_stream_free(st);
    *out_len = b.len;
    return b.p;
}

static void run_golden(const char *name, const ts_tok *t, const json_t *rows) {
    int matched = 0, rt = 0, rt_want = 0, streamed = 0, shown = 0;
    for (size_t i = 0; i < json_array_size(rows); i++) {
        const json_t *r = json_array_get(rows, i);
        const json_t *jt = json_object_get(r, "text"), *jids = json_object_get(r, "ids");
        const char *text = json_string_value(jt);
        size_t len = json_string_length(jt);
        int32_t *ids;
        int n;
        ts_error err;
        ts_status s = ts_tok_encode(t, text, len, 0, &ids, &n, &err);
        CHECK(s == TS_OK, "%s: encode failed: %s", name, err.msg);
        if (s) continue;
        int same = n == (int)json_array_size(jids);
        for (int k = 0; same && k < n; k++)
            same = ids[k] == (int32_t)json_integer_value(json_array_get(jids, (size_t)k));
        matched += same;
        if (!same && shown++ < 5) {
            fprintf(stderr, "%s: mismatch on \"%s\"\n  ours:", name, text);
            for (int k = 0; k < n; k++)
                fprintf(stderr, " %d", ids[k]);
            fprintf(stderr, "\n  HF:  ");
            for (size_t k = 0; k < json_array_size(jids); k++)
                fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(jids, k)));
            fputc('\n', stderr);
        }
        if (json_is_true(json_object_get(r, "rt"))) {
            rt_want++;
            char *dec;
            size_t dlen, slen;
            s = ts_tok_decode(t, ids, n, 0, &dec, &dlen, &err);
            CHECK(s == TS_OK, "%s: decode: %s", name, err.msg);
            if (!s) {
                rt += dlen == len && !memcmp(dec, text, len);
                free(dec);
            }
            char *str = stream_all(t, ids, n, &slen);
            streamed += str && slen == len && !memcmp(str, text, len);
            free(str);
        }
        free(ids);
    }
    int total = (int)json_array_size(rows);
    printf("%-12s encode: %d/%d strings match HF; decode round-trips %d/%d, streaming %d/%d "
           "(of those HF round-trips)\n",
           name, matched, total, rt, rt_want, streamed, rt_want);
    CHECK(matched == total, "%s: %d of %d strings differ from HF", name, total - matched, total);
    CHECK(rt == rt_want && streamed == rt_want, "%s: round-trip %d, streamed %d, want %d", name, rt,
          streamed, rt_want);
}

static void test_golden(void) {
    json_t *gold, *split;
    ts_error err;
    ts_status s = ts_json_load_file(th_fixture("tok/golden.json"), 16 << 20, &gold, &err);
    CHECK(s == TS_OK, "%s", err.msg);
    if (s) return;
    /* smol and smol_prefix: the trained file, then the same with add_prefix_space on */
    ts_tok *t;
    s = ts_tok_load(th_fixture("tok/smol/tokenizer.json"), &t, &err);
    CHECK(s == TS_OK, "%s", err.msg);
    if (!s) {
        run_golden("smol", t, json_object_get(gold, "smol"));
        CHECK(ts_tok_token_id(t, "<|im_end|>", 10) == 2, "im_end id");
        ts_tok_free(t);
    }
    char *buf;
    size_t len;
    if (ts_file_read_all(th_fixture("tok/smol/tokenizer.json"), 1 << 24, &buf, &len, &err) ==
        TS_OK) {
        const char *key = "\"add_prefix_space\": false";
        char *p = strstr(buf, key);
        CHECK(p != NULL, "smol tokenizer.json: no add_prefix_space field");
        if (p) memcpy(p + strlen(key) - 5, " true", 5);
        s = ts_tok_load_json(buf, len, "smol_prefix", NULL, &t, &err);
        CHECK(s == TS_OK, "%s", err.msg);
        if (!s) {
            run_golden("smol_prefix", t, json_object_get(gold, "smol_prefix"));
            ts_tok_free(t);
        }
        free(buf);
    }
    /* smol_flags: lstrip on <|im_start|>, rstrip on <|im_end|>, single_word and normalized on
     * <|endoftext|>, and an NFKC normalizer: the same edits the generator made for HF */
    if (ts_file_read_all(th_fixture("tok/smol/tokenizer.json"), 1 << 24, &buf, &len, &err) ==
        TS_OK) {
        static const char *edit[4][2] = {{"<|im_start|>", "\"lstrip\": false"},
                                         {"<|im_end|>", "\"rstrip\": false"},
                                         {"<|endoftext|>", "\"single_word\": false"},
                                         {"<|endoftext|>", "\"normalized\": false"}};
        for (int i = 0; i < 4; i++) {
            char key[64];
            snprintf(key, sizeof key, "\"content\": \"%s\"", edit[i][0]);
            char *p = strstr(buf, key);
            p = p ? strstr(p, edit[i][1]) : NULL;
            CHECK(p != NULL, "smol tokenizer.json: cannot set the flag of %s", edit[i][0]);
            if (p) memcpy(p + strlen(edit[i][1]) - 5, "true ", 5);
        }
        const char *from = "\"normalizer\": null", *to = "\"normalizer\": {\"type\": \"NFKC\"}";
        char *at = strstr(buf, from), *nb = malloc(len + strlen(to) + 1);
        CHECK(at && nb, "smol tokenizer.json: no null normalizer to replace");
        if (at && nb) {
            size_t head = (size_t)(at - buf), tail = len - head - strlen(from);
            memcpy(nb, buf, head);
            memcpy(nb + head, to, strlen(to));
            memcpy(nb + head + strlen(to), at + strlen(from), tail);
            free(buf);
            buf = nb;
            len = head + strlen(to) + tail;
            nb = NULL;
        }
        free(nb);
        s = ts_tok_load_json(buf, len, "smol_flags", NULL, &t, &err);
        CHECK(s == TS_OK, "%s", err.msg);
        if (!s) {
            run_golden("smol_flags", t, json_object_get(gold, "smol_flags"));
            ts_tok_free(t);
        }
        free(buf);
    }
    /* smol_digits / smol_digit_runs: Sequence [Digits, the file's ByteLevel], built with jansson */
    for (int each = 1; each >= 0; each--) {
        json_t *js;
        if (ts_json_load_file(th_fixture("tok/smol/tokenizer.json"), 1 << 24, &js, &err)) break;
        json_t *seq =
            json_pack("{s:s, s:[{s:s, s:b}, O]}", "type", "Sequence", "pretokenizers", "type",
                      "Digits", "individual_digits", each, json_object_get(js, "pre_tokenizer"));
        json_object_set_new(js, "pre_tokenizer", seq);
        char *text = json_dumps(js, JSON_COMPACT);
        const char *name = each ? "smol_digits" : "smol_digit_runs";
        s = text ? ts_tok_load_json(text, strlen(text), name, NULL, &t, &err) : TS_ERR_NOMEM;
        CHECK(s == TS_OK, "%s: %s", name, err.msg);
        if (!s) {
            run_golden(name, t, json_object_get(gold, name));
            ts_tok_free(t);
        }
        free(text);
        json_decref(js);
    }
    static const char *real[] = {"llama3", "qwen3"};
    for (int i = 0; i < 2; i++) {
        const char *path = shared_tok(real[i]);
        double t0 = now_ms();
        s = ts_tok_load(path, &t, &err);
        double t1 = now_ms();
        CHECK(s == TS_OK, "%s", err.msg);
        if (s) continue;
        printf("%-12s loaded %d tokens in %.1f ms\n", real[i], ts_tok_n_vocab(t), t1 - t0);
        run_golden(real[i], t, json_object_get(gold, real[i]));
        if (i == 0) {
            CHECK(ts_tok_bos(t) == 128000, "llama3 bos %d (tokenizer_config.json)", ts_tok_bos(t));
            CHECK(ts_tok_eos(t) == 128001, "llama3 eos %d", ts_tok_eos(t));
            int32_t *ids;
            int n;
            s = ts_tok_encode(t, "hi", 2, 1, &ids, &n, &err);
            CHECK(s == TS_OK && n == 2 && ids[0] == 128000 && ids[1] == 6151, "llama3 bos + hi");
            if (!s) free(ids);
        } else {
            CHECK(ts_tok_bos(t) == -1, "qwen3 has no bos, found %d", ts_tok_bos(t));
            CHECK(ts_tok_eos(t) == 151645, "qwen3 eos %d", ts_tok_eos(t));
            CHECK(ts_tok_token_id(t, "<|im_start|>", 12) == 151644, "im_start");
            CHECK(ts_tok_is_special(t, 151644) && !ts_tok_is_special(t, 872), "special flags");
        }
        ts_tok_free(t);
    }
    json_decref(gold);

    /* HF's Split behaviours, with and without invert */
    s = ts_json_load_file(th_fixture("tok/split.json"), 16 << 20, &split, &err);
    CHECK(s == TS_OK, "%s", err.msg);
    if (s) return;
    static const char *beh[] = {"removed", "isolated", "merged_with_previous", "merged_with_next",
                                "contiguous"};
    pcre2_match_data *md = pcre2_match_data_create(16, NULL);
    tok_spans sp = {0};
    int ok = 0, total = (int)json_array_size(split);
    for (size_t i = 0; i < json_array_size(split); i++) {
        const json_t *r = json_array_get(split, i);
        const json_t *pat = json_object_get(r, "pattern"), *jt = json_object_get(r, "text");
        const json_t *want = json_object_get(r, "pieces");
        tok_stage st = {0};
        for (int b = 0; b < 5; b++)
            if (!strcmp(json_string_value(json_object_get(r, "behavior")), beh[b]))
                st.behavior = (tok_behavior)b;
        st.invert = json_is_true(json_object_get(r, "invert"));
        if (tok_stage_regex(&st, json_string_value(pat), json_string_length(pat), 1, "split",
                            &err)) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        const char *text = json_string_value(jt);
        int got = tok_split(&st, md, text, json_string_length(jt), &sp, &err);
        int same = got >= 0 && sp.n == json_array_size(want);
        for (size_t k = 0; same && k < sp.n; k++) {
            const json_t *w = json_array_get(want, k);
            size_t a = sp.v[2 * k], b = sp.v[2 * k + 1];
            same = b - a == json_string_length(w) && !memcmp(text + a, json_string_value(w), b - a);
        }
        ok += same;
        CHECK(same, "split /%s/ %s invert=%d on \"%s\"", json_string_value(pat),
              json_string_value(json_object_get(r, "behavior")), st.invert, text);
        pcre2_code_free(st.re);
    }
    printf("split        %d/%d HF Split cases match\n", ok, total);
    free(sp.v);
    pcre2_match_data_free(md);
    json_decref(split);
}

/* Streaming over byte tokens: a character arrives only once its last byte has. */
static void test_stream_bytes(void) {
    const char *toks[260];
    float scores[260];
    int32_t types[260];
    char names[256][8];
    for (int b = 0; b < 256; b++) {
        snprintf(names[b], sizeof names[b], "<0x%02X>", b);
        toks[b] = names[b];
        scores[b] = 0;
        types[b] = TS_TOK_TYPE_BYTE;
    }
    toks[256] = "\xE2\x96\x81h"; /* "▁h" */
    toks[257] = "<s>";
    toks[258] = "i";
    toks[259] = "\xC3\xA9"; /* é */
    for (int i = 256; i < 260; i++) {
        scores[i] = 1;
        types[i] = i == 257 ? TS_TOK_TYPE_CONTROL : TS_TOK_TYPE_NORMAL;
    }
    ts_tok_spm_params p = {.n_vocab = 260,
                           .tokens = toks,
                           .scores = scores,
                           .types = types,
                           .bos = 257,
                           .eos = -1,
                           .unk = -1,
                           .add_space_prefix = 1};
    ts_tok *t;
    ts_error err;
    ts_status s = ts_tok_spm_new(&p, &t, &err);
    CHECK(s == TS_OK, "%s", err.msg);
    if (s) return;
    ts_tok_stream *st;
    if (ts_tok_stream_new(t, 1, &st, &err)) return;
    /* 😀 = F0 9F 98 80 as four byte tokens, then "▁h": the emoji appears whole on the 4th */
    struct {
        int32_t id;
        const char *want;
    } seq[] = {
        {257, ""},
        {256, "h"},
        {0xF0, ""},
        {0x9F, ""},
        {0x98, ""},
        {0x80, "\xF0\x9F\x98\x80"},
        {256, " h"},
        {259, "\xC3\xA9"},
        {0xC3, ""},
        {0xA9, "\xC3\xA9"},
        /* invalid: a lone continuation byte, a lead cut by ASCII, an impossible byte */
        {0x80, "\xEF\xBF\xBD"},
        {0xE2, ""},
        {0x82, ""},
        {258, "\xEF\xBF\xBDi"},
        {0xFF, "\xEF\xBF\xBD"},
        {0xE2, ""},
    };
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
        const char *out;
        size_t n;
        s = ts_tok_stream_feed(st, seq[i].id, &out, &n, &err);
        CHECK(s == TS_OK && n == strlen(seq[i].want) && !memcmp(out, seq[i].want, n),
              "stream step %zu (id %d): got %zu bytes \"%.*s\"", i, seq[i].id, n, (int)n, out);
    }
    size_t n;
    const char *out = ts_tok_stream_flush(st, &n);
    CHECK(n == 3 && !memcmp(out, "\xEF\xBF\xBD", 3), "flush of a cut character gives U+FFFD");
    CHECK(ts_tok_stream_feed(st, 9999, &out, &n, &err) == TS_ERR_ARG, "out-of-range id refused");
    ts_tok_stream_free(st);
    ts_tok_free(t);
}

/* Multi-byte characters split across real byte-level tokens (Llama-3 encodes rare CJK and
 * emoji as several byte tokens): each feed must give whole characters only, and the pieces
 * must add up to the text. */
static void test_stream_real(void) {
    const char *path = shared_tok("llama3");
    ts_tok *t;
    ts_error err;
    if (ts_tok_load(path, &t, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    const char *texts[] = {"🧑🏻‍🤝‍🧑🏿 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
                           "ᚠᛇᚻ ქართული Հայերեն", "👨‍👩‍👧‍👦 mixed 中文"};
    int split_chars = 0;
    for (int i = 0; i < 3; i++) {
        int32_t *ids;
        int n;
        if (ts_tok_encode(t, texts[i], strlen(texts[i]), 0, &ids, &n, &err)) continue;
        for (int k = 0; k < n; k++) {
            size_t len;
            const char *b = ts_tok_token_bytes(t, ids[k], &len);
            split_chars += tok_utf8_valid((const uint8_t *)b, len) != len;
        }
        size_t slen;
        char *s = stream_all(t, ids, n, &slen);
        CHECK(s && slen == strlen(texts[i]) && !memcmp(s, texts[i], slen), "stream of \"%s\"",
              texts[i]);
        free(s);
        free(ids);
    }
    CHECK(split_chars > 5, "the texts should put characters across tokens (%d tokens did)",
          split_chars);
    ts_tok_free(t);
}

/* Several threads encoding with one tokenizer (its word cache is shared) must all get HF's
 * ids; run under ASan/TSan this also checks the cache's locking. */
typedef struct th_job {
    const ts_tok *t;
    const json_t *rows;
    int bad;
} th_job;

static void *encode_all(void *arg) {
    th_job *j = arg;
    for (int round = 0; round < 3; round++)
        for (size_t i = 0; i < json_array_size(j->rows); i++) {
            const json_t *r = json_array_get(j->rows, i), *jt = json_object_get(r, "text");
            const json_t *want = json_object_get(r, "ids");
            int32_t *ids;
            int n;
            ts_error err;
            if (ts_tok_encode(j->t, json_string_value(jt), json_string_length(jt), 0, &ids, &n,
                              &err)) {
                j->bad++;
                continue;
            }
            int same = n == (int)json_array_size(want);
            for (int k = 0; same && k < n; k++)
                same = ids[k] == (int32_t)json_integer_value(json_array_get(want, (size_t)k));
            j->bad += !same;
            free(ids);
        }
    return NULL;
}

static void test_threads(void) {
    json_t *gold;
    ts_error err;
    ts_tok *t;
    if (ts_json_load_file(th_fixture("tok/golden.json"), 16 << 20, &gold, &err)) return;
    if (ts_tok_load(th_fixture("tok/smol/tokenizer.json"), &t, &err) == TS_OK) {
        pthread_t th[4];
        th_job jobs[4];
        for (int i = 0; i < 4; i++) {
            jobs[i] = (th_job){t, json_object_get(gold, "smol"), 0};
            CHECK(pthread_create(&th[i], NULL, encode_all, &jobs[i]) == 0, "pthread_create");
        }
        int bad = 0;
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            bad += jobs[i].bad;
        }
        CHECK(bad == 0, "%d encodings differ from HF when 4 threads share the tokenizer", bad);
        printf("threads      4 threads x 3 rounds over the smol goldens: %d differ\n", bad);
        ts_tok_free(t);
    }
    json_decref(gold);
}

/* Runs a shell command; stdout into out (NUL-terminated), returns the exit status. */
static int run(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* `tessera tokenize`: --ids and the default listing agree with the library, --bos uses the
 * model directory's BOS, and a malformed file exits with the format status naming the file. */
static void test_cli(void) {
    const char *bin = th_bin();
    char dir[4096], in[4200], bad[4200], smol[4096], cmd[16384];
    static char out[1 << 16];
    snprintf(dir, sizeof dir, "%s", th_tmpdir("tok_cli"));
    snprintf(in, sizeof in, "%s/in.txt", dir);
    snprintf(bad, sizeof bad, "%s/bad.json", dir);
    snprintf(smol, sizeof smol, "%s", th_fixture("tok/smol/tokenizer.json"));
    const char *text = "Hello, world!\n<|im_end|> caf\xC3\xA9 \xF0\x9F\x98\x80";
    FILE *f = fopen(in, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    f = fopen(bad, "wb");
    if (f) {
        fputs("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}", f);
        fclose(f);
    }
    ts_tok *t;
    ts_error err;
    if (ts_tok_load(smol, &t, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    int32_t *ids;
    int n;
    if (ts_tok_encode(t, text, strlen(text), 0, &ids, &n, &err)) {
        CHECK(0, "%s", err.msg);
        ts_tok_free(t);
        return;
    }
    char want[4096] = "";
    size_t w = 0;
    for (int i = 0; i < n; i++)
        w += (size_t)snprintf(want + w, sizeof want - w, i ? " %d" : "%d", ids[i]);
    snprintf(cmd, sizeof cmd, "'%s' tokenize '%s' --ids --file '%s'", bin, smol, in);
    int rc = run(cmd, out, sizeof out);
    CHECK(rc == 0 && !strncmp(out, want, w) && out[w] == '\n',
          "--ids: rc %d, got \"%s\", want \"%s\"", rc, out, want);
    /* default: one "id<TAB>quoted text" line per token, read from stdin */
    snprintf(cmd, sizeof cmd, "'%s' tokenize '%s' < '%s'", bin, smol, in);
    rc = run(cmd, out, sizeof out);
    int lines = 0;
    for (char *q = out; *q; q++)
        lines += *q == '\n';
    CHECK(rc == 0 && lines == n, "listing: rc %d, %d lines for %d tokens", rc, lines, n);
    char first[64];
    snprintf(first, sizeof first, "%d\t\"Hello\"\n", ids[0]);
    CHECK(!strncmp(out, first, strlen(first)), "listing starts with %s, got %.40s", first, out);
    CHECK(strstr(out, "\t\"\\n\"\n") != NULL, "the newline token is escaped: %s", out);
    free(ids);
    ts_tok_free(t);
    snprintf(cmd, sizeof cmd, "'%s' tokenize '%s' --ids < '%s' 2>&1", bin, bad, in);
    rc = run(cmd, out, sizeof out);
    CHECK(rc == TS_ERR_FORMAT && strstr(out, "bad.json") && strstr(out, "invalid JSON"),
          "malformed file: rc %d, %s", rc, out);
    char ldir[4096];
    snprintf(ldir, sizeof ldir, "%s", shared_tok("llama3"));
    *strrchr(ldir, '/') = 0; /* the directory: BOS from its tokenizer_config.json */
    snprintf(cmd, sizeof cmd, "printf 'Hello' | '%s' tokenize '%s' --ids --bos", bin, ldir);
    rc = run(cmd, out, sizeof out);
    CHECK(rc == 0 && !strcmp(out, "128000 9906\n"), "--bos on the Llama-3 directory: %s", out);
    printf("cli          tokenize --ids / listing / --bos / malformed file checked\n");
}

/* A Split whose pattern is a plain string (not a regex) compiles as a literal: PCRE2 refuses
 * UCP with LITERAL, which once made such files fail to load. */
static void split_string_pattern(void) {
    static const char js[] =
        "{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\","
        "\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"String\":\"x\"},\"behavior\":\"Isolated\","
        "\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
        "\"use_regex\":false}]},\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{"
        "\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"x\":2,\"ab\":3},\"merges\":[\"a b\"]}}";
    ts_tok *t = NULL;
    ts_error err;
    ts_status st = ts_tok_load_json(js, sizeof js - 1, "string-split", NULL, &t, &err);
    CHECK(st == TS_OK, "Split with a String pattern: %s", st ? err.msg : "");
    if (st) return;
    int32_t *ids = NULL;
    int n = 0;
    CHECK(ts_tok_encode(t, "abxab", 5, 0, &ids, &n, &err) == TS_OK && n == 3 && ids[0] == 3 && ids[1] == 2 &&
              ids[2] == 3,
          "\"abxab\" split on the literal x: %d ids", n);
    free(ids);
    ts_tok_free(t);
}

int main(void) {
    split_string_pattern();
    test_golden();
    test_threads();
    test_cli();
    test_stream_bytes();
    test_stream_real();
    return th_finish("test_tok");
}
