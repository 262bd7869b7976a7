/* tessera deploy MODEL [--phases 0-3] [--golden FILE] [--out DIR] [--threads N] [--force]
 *                [--json]
 * Phases run in order, each closed by its gate (0 oracle, 1 kernels, 2 blocks, 3 model; 4-7
 * are not written yet). Each report goes to OUT/phaseN.json (default deployments/<model dir
 * name>/). A failed gate stops the run unless --force, which the report records. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "core/error.h"
#include "deploy/phase0.h"
#include "deploy/manifest.h"
#include "deploy/phases.h"
#include "io/mmap.h"

static const char *k_usage =
    "tessera deploy MODEL_DIR [--phases 0-3] [--golden GOLDEN_JSON] [--out DIR] [--threads N]\n"
    "                      [--force] [--json]";

#define LAST_PHASE 3


static void default_out(const char *model, char *buf, size_t len) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", model);
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/') tmp[--n] = 0;
    const char *base = strrchr(tmp, '/');
    snprintf(buf, len, "deployments/%s", base ? base + 1 : tmp);
}

/* "2", "0-3": first and last phase; -1 on a malformed range. */
static int parse_phases(const char *p, int *lo, int *hi) {
    char *end;
    long a = strtol(p, &end, 10), b = a;
    if (end == p) return -1;
    if (*end == '-') {
        const char *q = end + 1;
        b = strtol(q, &end, 10);
        if (end == q) return -1;
    }
    if (*end || a < 0 || b < a || b > 7) return -1;
    *lo = (int)a;
    *hi = (int)b;
    return 0;
}

/* Writes OUT/phaseN.json and prints it when --json; returns 0 on success. */
static int write_report(const char *outdir, int phase, json_t *rep, int forced, int as_json) {
    char name[32];
    snprintf(name, sizeof name, "phase%d.json", phase);
    if (forced) json_object_set_new(rep, "forced", json_true());
    char *path = ts_path_join(outdir, name);
    int ok = path && ts_mkdir_p(outdir) == 0 && json_dump_file(rep, path, JSON_INDENT(2)) == 0;
    if (!ok) fprintf(stderr, "tessera deploy: cannot write %s/%s\n", outdir, name);
    else if (!as_json) printf("report: %s\n", path);
    if (as_json) {
        char *txt = json_dumps(rep, JSON_INDENT(2));
        if (txt) puts(txt);
        free(txt);
    }
    free(path);
    return ok ? 0 : -1;
}

int cmd_deploy(int argc, char **argv) {
    const char *model = NULL, *phases = "0-3", *golden = NULL, *outdir = NULL;
    int as_json = 0, force = 0;
    long long threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--phases") && i + 1 < argc) phases = argv[++i];
        else if (!strcmp(argv[i], "--golden") && i + 1 < argc) golden = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) outdir = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 1, 256, &threads))
                return cli_usage("deploy", k_usage, "--threads expects an integer in [1, 256]");
        } else if (!strcmp(argv[i], "--force")) force = 1;
        else if (!strcmp(argv[i], "--json")) as_json = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s\n", k_usage);
            return 0;
        } else if (argv[i][0] == '-' || model) return cli_usage("deploy", k_usage, "unexpected argument");
        else model = argv[i];
    }
    if (!model) return cli_usage("deploy", k_usage, "expects MODEL_DIR");
    int lo, hi;
    if (parse_phases(phases, &lo, &hi)) return cli_usage("deploy", k_usage, "--phases expects N or A-B within 0-7");
    if (hi > LAST_PHASE) {
        fprintf(stderr, "tessera deploy: phases \"%s\" requested; phases 0-%d exist so far (4-7: prefill and "
                        "decode optimization, finalize, evaluate are not written yet)\n", phases, LAST_PHASE);
        return cli_exit_code(TS_ERR_UNSUPPORTED);
    }
    char def[4096];
    if (!outdir) {
        default_out(model, def, sizeof def);
        outdir = def;
    }
    FILE *out = as_json ? stderr : stdout;
    ts_error err, fail_err;
    ts_status s = TS_OK, first_fail = TS_OK;
    json_t *reports[TS_N_PHASES] = {0};
    ts_model *m = NULL;
    if (lo == 0) {
        ts_phase0_opts o = {golden, out};
        s = ts_phase0_run(model, &o, &reports[0], &err);
        if (reports[0] && write_report(outdir, 0, reports[0], 0, as_json) && !s)
            s = ts_fail(&err, TS_ERR_IO, "%s: cannot write phase0.json", outdir);
        if (s && s != TS_ERR_GATE) goto fail;
        if (s) first_fail = s, fail_err = err;
    }
    if ((s = ts_model_open(model, &m, &err))) goto fail;
    ts_phase_opts po = {.out = out, .threads = (int)threads, .seed = 0};
    ts_status (*run[])(const ts_model *, const ts_phase_opts *, json_t **, ts_error *) = {
        NULL, ts_phase1_run, ts_phase2_run, ts_phase3_run};
    for (int p = lo > 1 ? lo : 1; p <= hi && (first_fail == TS_OK || force); p++) {
        s = run[p](m, &po, &reports[p], &err);
        if (reports[p] && write_report(outdir, p, reports[p], first_fail != TS_OK, as_json) && !s)
            s = ts_fail(&err, TS_ERR_IO, "%s: cannot write phase%d.json", outdir, p);
        if (s && s != TS_ERR_GATE) goto fail;
        if (s && first_fail == TS_OK) first_fail = s, fail_err = err;
    }
    if (first_fail && !force && out)
        fprintf(out, "a gate failed: later phases were not run (--force runs them anyway)\n");
    /* The deployment directory is finalized whatever happened, so a failure is on record. */
    int nthreads = threads > 0 ? (int)threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if ((s = ts_manifest_write(m, outdir, reports, nthreads, force && first_fail, &err))) goto fail;
    if (!as_json) printf("manifest: %s/manifest.json\nreport: %s/report.md\n", outdir, outdir);
    for (int p = 0; p < TS_N_PHASES; p++) json_decref(reports[p]);
    ts_model_close(m);
    /* With --force every phase ran, but the exit code still says a gate failed. */
    return first_fail ? cli_fail("deploy", first_fail, &fail_err) : 0;
fail:
    for (int p = 0; p < TS_N_PHASES; p++) json_decref(reports[p]);
    ts_model_close(m);
    return cli_fail("deploy", s, &err);
}
