/* tessera deploy MODEL [--phases 0-7] [--golden FILE | --hf-python PY [--hf-script FILE]] [--out DIR]
 *                [--threads N] [--force] [--json] [--trials N] [--prefill N] [--prefill-sizes LIST] [--decode-contexts LIST]
 *                [--decode-tokens N] [--weights auto|mmap|copy] [--inject-fault STEP[:nan][@LAYER]]
 * Phases run in order, each closed by its gate: 0 oracle, 1 kernels, 2 blocks, 3 model,
 * 4 prefill trajectory + autotuning, 5 decode trajectory, 6 finalize, 7 evaluate (a fresh
 * `tessera eval` process). Each report goes to OUT/phaseN.json (default deployments/<model dir
 * name>/). Starting later than phase 0 resumes from the reports already in OUT. A failed gate
 * runs the diagnosis once and stops the later phases unless --force, which is recorded.
 * --hf-python makes phase 0's golden logits with transformers (tools/hf_golden.py, into
 * OUT/golden/); without any goldens phase 0's verdict is "not compared", which is no failure. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "core/error.h"
#include "deploy/diagnose.h"
#include "deploy/finalize.h"
#include "deploy/manifest.h"
#include "deploy/perf.h"
#include "deploy/phase0.h"
#include "deploy/phases.h"
#include "io/mmap.h"
#include "core/clock.h"

static const char *k_usage =
    "tessera deploy MODEL_DIR [--phases 0-7] [--golden GOLDEN_JSON | --hf-python PYTHON [--hf-script FILE]]\n"
    "                      [--out DIR] [--threads N] [--force]\n"
    "                      [--json] [--trials N] [--prefill N] [--prefill-sizes 128,512]\n"
    "                      [--decode-contexts 128,1024] [--decode-tokens N] [--weights auto|mmap|copy]\n"
    "                      [--inject-fault STEP[:nan][@LAYER]]   (debug: corrupts one cpu step)";

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

/* "128,512" -> sizes; -1 when malformed. */
static int parse_sizes(const char *s, ts_perf_opts *o) {
    o->n_sizes = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > (1 << 20) || o->n_sizes == TS_PERF_MAX_SIZES) return -1;
        o->sizes[o->n_sizes++] = (int)v;
        s = end;
        if (*s == ',') s++;
        else if (*s) return -1;
    }
    return o->n_sizes ? 0 : -1;
}

/* Writes OUT/<name> and prints it when --json; returns 0 on success. */
static int write_json(const char *outdir, const char *name, json_t *rep, int as_json) {
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

/* Phase 7 in a fresh process: this binary's `eval` on the deployment directory. */
static ts_status spawn_eval(const char *outdir, int threads, FILE *out, ts_error *err) {
    char self[4096], th[16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return ts_fail(err, TS_ERR_IO, "phase 7: cannot find the tessera binary (/proc/self/exe)");
    self[n] = 0;
    snprintf(th, sizeof th, "%d", threads);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return ts_fail(err, TS_ERR_IO, "phase 7: fork: %s", strerror(errno));
    if (pid == 0) {
        if (out == stderr) dup2(2, 1); /* --json: keep stdout for the JSON reports */
        execl(self, self, "eval", outdir, "--threads", th, (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return ts_fail(err, TS_ERR_IO, "phase 7: waitpid: %s", strerror(errno));
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    if (code == 0 || code == 9) return TS_OK; /* PASS, or PASS with warnings */
    if (code == 8) return ts_fail(err, TS_ERR_GATE, "phase 7: the evaluator's verdict is FAIL (%s/evaluation.md)", outdir);
    return ts_fail(err, TS_ERR_IO, "phase 7: `tessera eval` exited with %d", code);
}

/* Earlier phases' reports for a resumed run. */
static int load_earlier(const char *outdir, int lo, json_t *reports[TS_N_PHASES], int *failed_phase) {
    *failed_phase = -1;
    for (int p = 0; p < lo && p < 6; p++) {
        char name[32];
        snprintf(name, sizeof name, "phase%d.json", p);
        char *path = ts_path_join(outdir, name);
        if (path && ts_file_exists(path)) {
            json_error_t je;
            reports[p] = json_load_file(path, 0, &je);
            if (!reports[p]) {
                fprintf(stderr, "tessera deploy: %s: %s (line %d)\n", path, je.text, je.line);
                free(path);
                return -1;
            }
            /* "not compared" (phase 0 without HF goldens) is no failure */
            if (ts_phase_verdict_of(reports[p]) == TS_PHASE_FAIL && *failed_phase < 0) *failed_phase = p;
        }
        free(path);
    }
    return 0;
}

int cmd_deploy(int argc, char **argv) {
    const char *model = NULL, *phases = "0-7", *golden = NULL, *outdir = NULL, *fault_spec = NULL;
    const char *hf_python = NULL, *hf_script = NULL;
    int as_json = 0, force = 0;
    long long threads = 0, v;
    ts_perf_opts p4, p5;
    ts_perf_defaults(&p4, 4);
    ts_perf_defaults(&p5, 5);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--phases") && i + 1 < argc) phases = argv[++i];
        else if (!strcmp(argv[i], "--golden") && i + 1 < argc) golden = argv[++i];
        else if (!strcmp(argv[i], "--hf-python") && i + 1 < argc) hf_python = argv[++i];
        else if (!strcmp(argv[i], "--hf-script") && i + 1 < argc) hf_script = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) outdir = argv[++i];
        else if (!strcmp(argv[i], "--inject-fault") && i + 1 < argc) fault_spec = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 1, 256, &threads))
                return cli_usage("deploy", k_usage, "--threads expects an integer in [1, 256]");
        } else if (!strcmp(argv[i], "--trials") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 5, 1000, &v))
                return cli_usage("deploy", k_usage, "--trials expects an integer in [5, 1000]");
            p4.trials = p5.trials = (int)v;
        } else if (!strcmp(argv[i], "--prefill") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 1, 1 << 20, &v)) return cli_usage("deploy", k_usage, "--prefill expects N >= 1");
            p4.prefill = (int)v;
        } else if (!strcmp(argv[i], "--decode-tokens") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 1, 1 << 16, &v))
                return cli_usage("deploy", k_usage, "--decode-tokens expects N >= 1");
            p5.decode_tokens = (int)v;
        } else if (!strcmp(argv[i], "--weights") && i + 1 < argc) {
            const char *w = argv[++i];
            if (strcmp(w, "auto") && strcmp(w, "mmap") && strcmp(w, "copy"))
                return cli_usage("deploy", k_usage, "--weights expects auto, mmap or copy");
            p4.weights = !strcmp(w, "auto") ? -1 : !strcmp(w, "copy");
        } else if (!strcmp(argv[i], "--prefill-sizes") && i + 1 < argc) {
            if (parse_sizes(argv[++i], &p4))
                return cli_usage("deploy", k_usage, "--prefill-sizes expects up to 8 comma-separated lengths");
        } else if (!strcmp(argv[i], "--decode-contexts") && i + 1 < argc) {
            if (parse_sizes(argv[++i], &p5))
                return cli_usage("deploy", k_usage, "--decode-contexts expects up to 8 comma-separated lengths");
        } else if (!strcmp(argv[i], "--force")) force = 1;
        else if (!strcmp(argv[i], "--json")) as_json = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s\n", k_usage);
            return 0;
        } else if (argv[i][0] == '-' || model) return cli_usage("deploy", k_usage, "unexpected argument");
        else model = argv[i];
    }
    if (!model) return cli_usage("deploy", k_usage, "expects MODEL_DIR");
    if (golden && hf_python) return cli_usage("deploy", k_usage, "--golden and --hf-python exclude each other");
    if (hf_script && !hf_python) return cli_usage("deploy", k_usage, "--hf-script needs --hf-python");
    int lo, hi;
    if (parse_phases(phases, &lo, &hi)) return cli_usage("deploy", k_usage, "--phases expects N or A-B within 0-7");
    if ((golden || hf_python) && lo > 0)
        return cli_usage("deploy", k_usage, "--golden and --hf-python feed phase 0, which --phases leaves out");
    ts_error err, fail_err;
    ts_cpu_fault fault;
    if (fault_spec && ts_cpu_fault_parse(fault_spec, &fault, &err)) return cli_usage("deploy", k_usage, err.msg);
    char def[4096];
    if (!outdir) {
        default_out(model, def, sizeof def);
        outdir = def;
    }
    FILE *out = as_json ? stderr : stdout;
    ts_status s = TS_OK, first_fail = TS_OK;
    json_t *reports[TS_N_PHASES] = {0}, *diag = NULL;
    ts_model *m = NULL;
    int earlier_fail;
    if (load_earlier(outdir, lo, reports, &earlier_fail)) return cli_exit_code(TS_ERR_FORMAT);
    if (earlier_fail >= 0) {
        if (!force) {
            fprintf(stderr, "tessera deploy: phase %d failed its gate in an earlier run (%s/phase%d.json); phase %d "
                            "refuses to start (--force runs it anyway)\n", earlier_fail, outdir, earlier_fail, lo);
            for (int p = 0; p < TS_N_PHASES; p++) json_decref(reports[p]);
            return cli_exit_code(TS_ERR_GATE);
        }
        first_fail = TS_ERR_GATE;
        snprintf(fail_err.msg, sizeof fail_err.msg, "phase %d failed its gate in an earlier run", earlier_fail);
    }
    int nthreads = threads > 0 ? (int)threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    ts_phase_opts po = {.out = out, .threads = (int)threads, .seed = 0, .fault = fault_spec ? &fault : NULL};
    p4.out = p5.out = out;
    p4.threads = p5.threads = (int)threads;
    p4.fault = p5.fault = po.fault;
    if (fault_spec && out) fprintf(out, "debug: fault injected into the cpu step %s\n", fault_spec);
    int wrote_manifest = 0;
    double t_start = ts_now_s();
    for (int p = lo; p <= hi && (first_fail == TS_OK || force); p++) {
        double t_phase = ts_now_s();
        if (p == 0) {
            ts_phase0_opts o0 = {.golden = golden, .out = out, .threads = (int)threads, .hf_python = hf_python,
                                 .hf_script = hf_script, .deploy_dir = outdir};
            s = ts_phase0_run(model, &o0, &reports[0], &err);
        } else {
            if (!m && (s = ts_model_open(model, &m, &err))) goto fail;
            if (p <= 3) {
                ts_status (*run[])(const ts_model *, const ts_phase_opts *, json_t **, ts_error *) = {
                    NULL, ts_phase1_run, ts_phase2_run, ts_phase3_run};
                s = run[p](m, &po, &reports[p], &err);
            } else if (p == 4) {
                s = ts_phase4_run(m, &p4, &reports[4], &err);
            } else if (p == 5) {
                s = ts_phase5_run(m, &p5, reports[4], &reports[5], &err);
            } else if (p == 6) {
                s = ts_phase6_run(m, outdir, reports, nthreads, force && first_fail, diag, out, &err);
                wrote_manifest = 1;
            } else {
                if (!wrote_manifest &&
                    (s = ts_manifest_write(m, outdir, reports, nthreads, force && first_fail, diag, &err)))
                    goto fail;
                wrote_manifest = 1;
                if (out) fprintf(out, "phase 7 (evaluate): a fresh `tessera eval %s`\n", outdir);
                s = spawn_eval(outdir, nthreads, out, &err);
            }
        }
        if (out) fprintf(out, "phase %d took %.1f s\n", p, ts_now_s() - t_phase);
        if (p != 7 && reports[p]) {
            json_object_set_new(reports[p], "wall_s", json_real(ts_now_s() - t_phase));
            char name[32];
            snprintf(name, sizeof name, "phase%d.json", p);
            if (first_fail != TS_OK) json_object_set_new(reports[p], "forced", json_true());
            if (write_json(outdir, name, reports[p], as_json) && !s)
                s = ts_fail(&err, TS_ERR_IO, "%s: cannot write %s", outdir, name);
        }
        if (s && s != TS_ERR_GATE) goto fail;
        if (s && first_fail == TS_OK) {
            first_fail = s, fail_err = err;
            /* Numerical gates get a diagnosis (once): which layer, which step, where NaN starts. */
            if (p >= 1 && p <= 5 && p != 4 && m) {
                ts_cpu_opts co = {.n_threads = (int)threads, .force_variant = -1, .fault = po.fault};
                ts_error derr;
                ts_status ds = ts_diagnose(m, &co, out, &diag, &derr);
                if (ds) fprintf(stderr, "tessera deploy: diagnosis could not run: %s\n", derr.msg);
                else write_json(outdir, "diagnosis.json", diag, 0);
            }
        }
    }
    if (first_fail && !force && out)
        fprintf(out, "a gate failed: later phases were not run (--force runs them anyway)\n");
    if (!m && (s = ts_model_open(model, &m, &err))) goto fail;
    /* The deployment directory is finalized whatever happened, so a failure is on record. */
    if (!wrote_manifest && (s = ts_manifest_write(m, outdir, reports, nthreads, force && first_fail, diag, &err))) goto fail;
    if (!as_json) printf("manifest: %s/manifest.json\nreport: %s/report.md\n", outdir, outdir);
    if (out) fprintf(out, "deploy: phases %d-%d in %.1f s\n", lo, hi, ts_now_s() - t_start);
    for (int p = 0; p < TS_N_PHASES; p++) json_decref(reports[p]);
    json_decref(diag);
    ts_model_close(m);
    /* With --force every phase ran, but the exit code still says a gate failed. */
    return first_fail ? cli_fail("deploy", first_fail, &fail_err) : 0;
fail:
    for (int p = 0; p < TS_N_PHASES; p++) json_decref(reports[p]);
    json_decref(diag);
    ts_model_close(m);
    return cli_fail("deploy", s, &err);
}
