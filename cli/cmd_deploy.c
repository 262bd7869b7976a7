/* tessera deploy MODEL --phases 0 [--golden FILE] [--out DIR] [--json]
 * Phases run in order, each closed by its gate; today phase 0 (the oracle) exists. The phase
 * report goes to OUT/phaseN.json (default deployments/<model dir name>/). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "core/error.h"
#include "deploy/phase0.h"
#include "io/mmap.h"

static const char *k_usage =
    "tessera deploy MODEL_DIR [--phases 0] [--golden GOLDEN_JSON] [--out DIR] [--json]";

static int mkdir_p(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static void default_out(const char *model, char *buf, size_t len) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", model);
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/') tmp[--n] = 0;
    const char *base = strrchr(tmp, '/');
    snprintf(buf, len, "deployments/%s", base ? base + 1 : tmp);
}

int cmd_deploy(int argc, char **argv) {
    const char *model = NULL, *phases = "0", *golden = NULL, *outdir = NULL;
    int as_json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--phases") && i + 1 < argc) phases = argv[++i];
        else if (!strcmp(argv[i], "--golden") && i + 1 < argc) golden = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) outdir = argv[++i];
        else if (!strcmp(argv[i], "--json")) as_json = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s\n", k_usage);
            return 0;
        } else if (argv[i][0] == '-' || model) return cli_usage("deploy", k_usage, "unexpected argument");
        else model = argv[i];
    }
    if (!model) return cli_usage("deploy", k_usage, "expects MODEL_DIR");
    if (strcmp(phases, "0") != 0 && strcmp(phases, "0-0") != 0) {
        fprintf(stderr, "tessera deploy: phases \"%s\" requested; only phase 0 (the oracle) is "
                        "implemented so far\n", phases);
        return cli_exit_code(TS_ERR_UNSUPPORTED);
    }
    char def[4096];
    if (!outdir) {
        default_out(model, def, sizeof def);
        outdir = def;
    }
    ts_phase0_opts o = {golden, as_json ? stderr : stdout};
    ts_error err;
    json_t *rep = NULL;
    ts_status s = ts_phase0_run(model, &o, &rep, &err);
    if (rep) {
        char *path = NULL;
        if (mkdir_p(outdir) != 0 || !(path = ts_path_join(outdir, "phase0.json")) ||
            json_dump_file(rep, path, JSON_INDENT(2)) != 0) {
            fprintf(stderr, "tessera deploy: cannot write %s/phase0.json\n", outdir);
            if (!s) s = ts_fail(&err, TS_ERR_IO, "%s: cannot write phase0.json", outdir);
        } else if (!as_json) {
            printf("report: %s\n", path);
        }
        if (as_json) {
            char *txt = json_dumps(rep, JSON_INDENT(2));
            if (txt) puts(txt);
            free(txt);
        }
        free(path);
        json_decref(rep);
    }
    return s ? cli_fail("deploy", s, &err) : 0;
}
