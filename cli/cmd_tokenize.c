/* tessera tokenize PATH [--ids] [--bos] [--file F] | --bench --file F [--mb N]
 * Encodes text with a tokenizer.json (PATH: the file or a model directory holding it) or a
 * GGUF's vocabulary (PATH: the .gguf, recognized by its magic in ts_tok_load) and
 * prints one "id<TAB>"decoded text"" line per token, or the ids on one line. --bench times the
 * load and the encoding of a corpus (a JSON list of strings, or any text file). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "core/error.h"
#include "io/mmap.h"
#include "tok/tokenizer.h"
#include "core/clock.h"

static const char *k_usage = "tessera tokenize PATH [--ids] [--bos] [--file F]\n"
                             "       tessera tokenize PATH --bench --file CORPUS [--mb N]";

/* Reads all of f into a malloc'd buffer; NULL on failure. */
static char *slurp(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
        if (n == cap) {
            char *p = realloc(buf, cap *= 2);
            if (!p) {
                free(buf);
                return NULL;
            }
            buf = p;
        }
    }
    if (!buf || ferror(f)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* Quoted, with C escapes for quotes, backslashes, control bytes and bytes that are not part of
 * a whole UTF-8 character (a token may end inside one). */
static void print_escaped(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        int k = c < 0x80                 ? 1
                : c >= 0xC2 && c <= 0xDF ? 2
                : c >= 0xE0 && c <= 0xEF ? 3
                : c >= 0xF0 && c <= 0xF4 ? 4
                                         : 0;
        int whole = k > 0 && i + (size_t)k <= n;
        for (int j = 1; whole && j < k; j++)
            whole = ((unsigned char)s[i + (size_t)j] & 0xC0) == 0x80;
        if (k == 1 && (c < 0x20 || c == 0x7f || c == '"' || c == '\\')) {
            if (c == '\n')
                fputs("\\n", stdout);
            else if (c == '\t')
                fputs("\\t", stdout);
            else if (c == '\r')
                fputs("\\r", stdout);
            else if (c == '"' || c == '\\')
                printf("\\%c", c);
            else
                printf("\\x%02x", c);
            i++;
        } else if (whole) {
            fwrite(s + i, 1, (size_t)k, stdout);
            i += (size_t)k;
        } else {
            printf("\\x%02x", c);
            i++;
        }
    }
    putchar('"');
}

/* Corpus for --bench: a JSON array of strings, else the file as one text. */
static int load_corpus(const char *path, char ***texts, size_t **lens, size_t *n) {
    size_t len;
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char *buf = slurp(f, &len);
    fclose(f);
    if (!buf) return -1;
    json_error_t je;
    json_t *j = json_loadb(buf, len, JSON_ALLOW_NUL, &je);
    size_t m = json_is_array(j) ? json_array_size(j) : 1;
    char **tx = calloc(m, sizeof *tx);
    size_t *ln = calloc(m, sizeof *ln);
    int ok = tx && ln;
    if (ok && json_is_array(j)) {
        for (size_t i = 0; ok && i < m; i++) {
            const json_t *s = json_array_get(j, i);
            ln[i] = json_string_length(s);
            tx[i] = malloc(ln[i] + 1);
            if (tx[i])
                memcpy(tx[i], json_is_string(s) ? json_string_value(s) : "", ln[i] + 1);
            else
                ok = 0;
        }
        free(buf);
    } else if (ok) {
        tx[0] = buf;
        ln[0] = len;
    } else {
        free(buf);
    }
    json_decref(j);
    if (!ok) {
        for (size_t i = 0; tx && i < m; i++)
            free(tx[i]);
        free(tx);
        free(ln);
        return -1;
    }
    *texts = tx;
    *lens = ln;
    *n = m;
    return 0;
}

static int bench(const char *path, const char *file, double mb) {
    ts_error err;
    ts_tok *t;
    double t0 = ts_now_s();
    ts_status s = ts_tok_load(path, &t, &err);
    double load_ms = (ts_now_s() - t0) * 1e3;
    if (s) return cli_fail("tokenize", s, &err);
    char **texts;
    size_t *lens, n, total = 0;
    if (load_corpus(file, &texts, &lens, &n)) {
        fprintf(stderr, "tessera tokenize: cannot read corpus %s\n", file);
        ts_tok_free(t);
        return cli_exit_code(TS_ERR_IO);
    }
    for (size_t i = 0; i < n; i++)
        total += lens[i];
    size_t target = (size_t)(mb * 1e6), done = 0, tokens = 0, rounds = 0;
    /* one untimed round warms caches and checks every string encodes */
    for (size_t i = 0; !s && i < n; i++) {
        int32_t *ids;
        int k;
        s = ts_tok_encode(t, texts[i], lens[i], 0, &ids, &k, &err);
        if (!s) free(ids);
    }
    t0 = ts_now_s();
    while (!s && total && done < target) {
        for (size_t i = 0; !s && i < n; i++) {
            int32_t *ids;
            int k;
            s = ts_tok_encode(t, texts[i], lens[i], 0, &ids, &k, &err);
            if (!s) {
                tokens += (size_t)k;
                free(ids);
            }
        }
        done += total;
        rounds++;
    }
    double sec = ts_now_s() - t0;
    int rc = 0;
    if (s)
        rc = cli_fail("tokenize", s, &err);
    else
        printf("{\"load_ms\": %.1f, \"n_vocab\": %d, \"strings\": %zu, \"rounds\": %zu, \"bytes\": "
               "%zu, "
               "\"tokens\": %zu, \"seconds\": %.4f, \"mb_per_s\": %.2f}\n",
               load_ms, ts_tok_n_vocab(t), n, rounds, done, tokens, sec,
               sec > 0 ? done / sec / 1e6 : 0.0);
    for (size_t i = 0; i < n; i++)
        free(texts[i]);
    free(texts);
    free(lens);
    ts_tok_free(t);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    const char *path = NULL, *file = NULL;
    int ids_only = 0, bos = 0, do_bench = 0;
    double mb = 4;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ids"))
            ids_only = 1;
        else if (!strcmp(argv[i], "--bos"))
            bos = 1;
        else if (!strcmp(argv[i], "--bench"))
            do_bench = 1;
        else if (!strcmp(argv[i], "--file") && i + 1 < argc)
            file = argv[++i];
        else if (!strcmp(argv[i], "--mb") && i + 1 < argc) {
            long long v;
            if (cli_parse_int(argv[++i], 1, 10000, &v))
                return cli_usage("tokenize", k_usage, "--mb expects 1..10000");
            mb = (double)v;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf(
                "usage: %s\n\nPATH is a tokenizer.json, a model directory holding one, or a GGUF\n"
                "file (its tokenizer.ggml.* vocabulary). Text comes from\n"
                "stdin or --file. Prints one line per token: id, a tab, the token's text quoted\n"
                "with C escapes; --ids prints the ids on one line instead. --bos prepends the\n"
                "BOS token (from the post-processor, config.json or tokenizer_config.json;\n"
                "a GGUF's tokenizer.ggml.bos_token_id).\n"
                "--bench prints JSON: load time and encode throughput over CORPUS (a JSON list\n"
                "of strings or a text file) repeated to about N MB (default 4).\n",
                k_usage);
            return 0;
        } else if (argv[i][0] == '-' || path)
            return cli_usage("tokenize", k_usage, "unexpected argument");
        else
            path = argv[i];
    }
    if (!path) return cli_usage("tokenize", k_usage, "expects PATH");
    if (do_bench) {
        if (!file) return cli_usage("tokenize", k_usage, "--bench needs --file CORPUS");
        return bench(path, file, mb);
    }
    ts_error err;
    ts_tok *t;
    ts_status s = ts_tok_load(path, &t, &err);
    if (s) return cli_fail("tokenize", s, &err);
    FILE *f = file ? fopen(file, "rb") : stdin;
    if (!f) {
        ts_fail(&err, TS_ERR_IO, "%s: cannot open", file);
        ts_tok_free(t);
        return cli_fail("tokenize", TS_ERR_IO, &err);
    }
    size_t len;
    char *text = slurp(f, &len);
    if (file) fclose(f);
    if (!text) {
        ts_fail(&err, TS_ERR_IO, "%s: read failed", file ? file : "stdin");
        ts_tok_free(t);
        return cli_fail("tokenize", TS_ERR_IO, &err);
    }
    if (bos && ts_tok_bos(t) < 0)
        fprintf(stderr, "tessera tokenize: warning: the tokenizer names no BOS token\n");
    int32_t *ids = NULL;
    int n = 0;
    s = ts_tok_encode(t, text, len, bos, &ids, &n, &err);
    if (!s) {
        for (int i = 0; i < n; i++) {
            if (ids_only) {
                printf(i ? " %d" : "%d", ids[i]);
                continue;
            }
            size_t k;
            const char *b = ts_tok_token_bytes(t, ids[i], &k);
            printf("%d\t", ids[i]);
            print_escaped(b, k);
            putchar('\n');
        }
        if (ids_only) putchar('\n');
    }
    int rc = s ? cli_fail("tokenize", s, &err) : 0;
    free(ids);
    free(text);
    ts_tok_free(t);
    return rc;
}
