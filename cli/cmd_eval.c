/* tessera eval DEPLOY_DIR [--seed N] [--threads N] [--baseline OTHER_DIR]: phase 7 in a fresh
 * process, optionally compared with an earlier deployment of the same model. Exit 0 PASS,
 * 9 PASS-with-warnings, 8 FAIL (or the status of an error that stopped it: 1 when the
 * baseline is another model's). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "deploy/phases.h"

static const char *k_usage = "tessera eval DEPLOY_DIR [--seed N] [--threads N] [--baseline OTHER_DEPLOY_DIR]";

int cmd_eval(int argc, char **argv) {
    const char *dir = NULL, *baseline = NULL;
    long long seed = 0, threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 1, 0x7fffffffffffffffLL, &seed))
                return cli_usage("eval", k_usage, "--seed expects a positive integer (0 is deploy's own set)");
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 1, 256, &threads))
                return cli_usage("eval", k_usage, "--threads expects an integer in [1, 256]");
        } else if (!strcmp(argv[i], "--baseline") && i + 1 < argc) {
            baseline = argv[++i];
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s\n", k_usage);
            return 0;
        } else if (argv[i][0] == '-' || dir) return cli_usage("eval", k_usage, "unexpected argument");
        else dir = argv[i];
    }
    if (!dir) return cli_usage("eval", k_usage, "expects DEPLOY_DIR");
    /* Inputs the deployment never saw: a seed from the clock unless one is given (printed,
     * so a failure can be reproduced). */
    if (!seed) seed = 1 + (long long)(time(NULL) % 100000);
    ts_eval_opts o = {.out = stdout, .threads = (int)threads, .seed = (uint64_t)seed, .baseline = baseline};
    ts_verdict v;
    ts_error err;
    ts_status s = ts_evaluate(dir, &o, &v, &err);
    if (s) return cli_fail("eval", s, &err);
    return v == TS_VERDICT_PASS ? 0 : (v == TS_VERDICT_WARN ? 9 : cli_exit_code(TS_ERR_GATE));
}
