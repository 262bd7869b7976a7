/* tessera synth PRESET OUT [--seed N] [--vocab N] [--layers N] [--tokenizer DIR] | --list */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "core/error.h"
#include "model/synth.h"
#include "tok/tokenizer.h"

/* Copies DIR/NAME to OUT/NAME byte for byte. */
static ts_status copy_file(const char *dir, const char *out, const char *name, ts_error *err) {
    char src[4200], dst[4200], buf[1 << 16];
    snprintf(src, sizeof src, "%s/%s", dir, name);
    snprintf(dst, sizeof dst, "%s/%s", out, name);
    FILE *in = fopen(src, "rb");
    if (!in) return ts_fail(err, TS_ERR_IO, "%s: cannot open", src);
    FILE *o = fopen(dst, "wb");
    if (!o) {
        fclose(in);
        return ts_fail(err, TS_ERR_IO, "%s: cannot create", dst);
    }
    size_t n;
    int bad = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) bad |= fwrite(buf, 1, n, o) != n;
    bad |= ferror(in);
    fclose(in);
    bad |= fclose(o) != 0;
    return bad ? ts_fail(err, TS_ERR_IO, "copying %s to %s failed", src, dst) : TS_OK;
}

/* A synth model gets a real tokenizer only if every token id has an embedding row. */
static ts_status check_tokenizer(const char *preset, const char *dir, int vocab, ts_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    ts_tok *t = NULL;
    ts_status s = ts_tok_load(path, &t, err);
    if (s) return s;
    int need = ts_tok_n_vocab(t);
    ts_tok_free(t);
    ts_config c;
    if ((s = ts_synth_preset_config(preset, vocab, &c, err))) return s;
    if (c.n_vocab < need)
        return ts_fail(err, TS_ERR_ARG, "%s has %d tokens but %s's vocab is %d: pass --vocab %d or more",
                       path, need, preset, c.n_vocab, need);
    return TS_OK;
}

/* A one-line progress bar on a terminal; silent when stderr is piped. */
static void progress(void *user, const char *stage, double frac) {
    int *last = user;
    int pct = (int)(frac * 100);
    if (pct == *last) return;
    *last = pct;
    fprintf(stderr, "\r%s: %3d%%", stage, pct);
    if (pct >= 100) fputc('\n', stderr);
}

static const char *k_usage =
    "tessera synth PRESET OUT_DIR [--seed N] [--vocab N] [--layers N] [--tokenizer DIR]\n"
    "       tessera synth --list";

int cmd_synth(int argc, char **argv) {
    const char *pos[2] = {0};
    int npos = 0;
    long long seed = 0, vocab = 0, layers = 0;
    const char *tokdir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--list")) {
            for (int k = 0; ts_synth_preset_name(k); k++) printf("%s\n", ts_synth_preset_name(k));
            return 0;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s\n", k_usage);
            return 0;
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 0, 0x7fffffffffffffffLL, &seed))
                return cli_usage("synth", k_usage, "--seed expects a non-negative integer");
        } else if (!strcmp(argv[i], "--vocab") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 1, 1 << 24, &vocab))
                return cli_usage("synth", k_usage, "--vocab expects an integer in [1, 16777216]");
        } else if (!strcmp(argv[i], "--layers") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 1, 4096, &layers))
                return cli_usage("synth", k_usage, "--layers expects an integer in [1, 4096]");
        } else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) {
            tokdir = argv[++i];
        } else if (argv[i][0] == '-' || npos == 2) {
            return cli_usage("synth", k_usage, "unexpected argument");
        } else {
            pos[npos++] = argv[i];
        }
    }
    if (npos != 2) return cli_usage("synth", k_usage, "expects PRESET and OUT_DIR");
    ts_error err;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int last = -1;
    ts_synth_opts so = {(uint64_t)seed, (int)vocab, (int)layers, isatty(2) ? progress : NULL, &last};
    ts_status s = tokdir ? check_tokenizer(pos[0], tokdir, (int)vocab, &err) : TS_OK;
    if (!s) s = ts_synth_write(pos[0], pos[1], &so, &err);
    if (!s && tokdir) s = copy_file(tokdir, pos[1], "tokenizer.json", &err);
    if (!s && tokdir) s = copy_file(tokdir, pos[1], "tokenizer_config.json", &err);
    if (s) return cli_fail("synth", s, &err);
    clock_gettime(CLOCK_MONOTONIC, &b);
    fprintf(stderr, "synth: wrote %s (%s, seed %lld) in %.1f s\n", pos[1], pos[0], seed,
            (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
    return 0;
}
