/* tessera synth PRESET OUT [--seed N] [--vocab N] | --list */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

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
    "tessera synth PRESET OUT_DIR [--seed N] [--vocab N] [--layers N]  |  tessera synth --list";

int cmd_synth(int argc, char **argv) {
    const char *pos[2] = {0};
    int npos = 0;
    long long seed = 0, vocab = 0, layers = 0;
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
    ts_status s = ts_synth_write(pos[0], pos[1], &so, &err);
    if (s) return cli_fail("synth", s, &err);
    clock_gettime(CLOCK_MONOTONIC, &b);
    fprintf(stderr, "synth: wrote %s (%s, seed %lld) in %.1f s\n", pos[1], pos[0], seed,
            (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
    return 0;
}
