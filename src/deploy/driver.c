/* The phase driver (deploy.h): order, resume, failure policy, diagnosis trigger, manifest and
 * the fresh evaluator process. */
#include "deploy/deploy.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/pool.h"
#include "deploy/diagnose.h"
#include "deploy/manifest.h"
#include "io/mmap.h"
#include "io/quant.h"
#include "model/quantize.h"

void ts_deploy_defaults(ts_deploy_opts *o) {
    memset(o, 0, sizeof *o);
    o->quant = -1;
    o->lo = 0;
    o->hi = 7;
    ts_perf_defaults(&o->p4, 4);
    ts_perf_defaults(&o->p5, 5);
}

void ts_deploy_default_out(const char *model, char *buf, size_t len) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", model);
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/') tmp[--n] = 0;
    const char *base = strrchr(tmp, '/');
    snprintf(buf, len, "deployments/%s", base ? base + 1 : tmp);
}

/* Writes OUT/<name>, and the report as JSON to o->json. */
static ts_status write_report(const ts_deploy_opts *o, const char *outdir, const char *name, json_t *rep,
                              ts_error *err) {
    char *path = ts_path_join(outdir, name);
    int ok = path && ts_mkdir_p(outdir) == 0 && json_dump_file(rep, path, JSON_INDENT(2)) == 0;
    if (ok && o->out && !o->json) fprintf(o->out, "report: %s\n", path);
    if (o->json) {
        char *txt = json_dumps(rep, JSON_INDENT(2));
        if (txt) fprintf(o->json, "%s\n", txt);
        free(txt);
    }
    free(path);
    return ok ? TS_OK : ts_fail(err, TS_ERR_IO, "%s: cannot write %s", outdir, name);
}

/* Phase 7 in a fresh process: `EXE eval OUT --threads N`. Exit 0 (PASS) passes; 9 (PASS with
 * warnings: unverified claims, another kernel) passes too, its warnings are in evaluation.md;
 * 8 is a failed gate. */
static ts_status spawn_eval(const ts_deploy_opts *o, const char *outdir, int threads, ts_error *err) {
    if (!o->eval_exe) return ts_fail(err, TS_ERR_ARG, "phase 7: no tessera binary to run the evaluator with");
    char th[16];
    snprintf(th, sizeof th, "%d", threads);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return ts_fail(err, TS_ERR_IO, "phase 7: fork: %s", strerror(errno));
    if (pid == 0) {
        if (o->out == stderr) dup2(2, 1); /* JSON on stdout: the evaluator's tables go to stderr */
        execl(o->eval_exe, o->eval_exe, "eval", outdir, "--threads", th, (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return ts_fail(err, TS_ERR_IO, "phase 7: waitpid: %s", strerror(errno));
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    if (code == 0 || code == 9) return TS_OK;
    if (code == 8) return ts_fail(err, TS_ERR_GATE, "phase 7: the evaluator's verdict is FAIL (%s/evaluation.md)", outdir);
    return ts_fail(err, TS_ERR_IO, "phase 7: `%s eval` exited with %d", o->eval_exe, code);
}

/* Earlier phases' reports for a resumed run; *failed_phase: the first that failed its gate. */
static ts_status load_earlier(const char *outdir, int lo, json_t *reports[TS_N_PHASES], int *failed_phase,
                              ts_error *err) {
    *failed_phase = -1;
    for (int p = 0; p < lo && p < 6; p++) {
        char name[32];
        snprintf(name, sizeof name, "phase%d.json", p);
        char *path = ts_path_join(outdir, name);
        if (path && ts_file_exists(path)) {
            json_error_t je;
            reports[p] = json_load_file(path, 0, &je);
            if (!reports[p]) {
                ts_status s = ts_fail(err, TS_ERR_FORMAT, "%s: %s (line %d)", path, je.text, je.line);
                free(path);
                return s;
            }
            /* "not compared" (phase 0 without HF goldens) is no failure */
            if (ts_phase_verdict_of(reports[p]) == TS_PHASE_FAIL && *failed_phase < 0) *failed_phase = p;
        }
        free(path);
    }
    return TS_OK;
}

/* The model phases 1-7 run: as stored, or with its matrices quantized at load. */
static ts_status open_model(const ts_deploy_opts *o, ts_model **m, ts_error *err) {
    ts_status s = ts_model_open(o->model_dir, m, err);
    if (!s) (*m)->kv_type = o->kv_cache;
    if (!s && o->quant >= 0 && (s = ts_model_quantize(*m, (ts_dtype)o->quant, err))) {
        ts_model_close(*m);
        *m = NULL;
    }
    if (!s && o->quant >= 0 && (*m)->quant_kept && o->out)
        fprintf(o->out, "weights: %d matrices stay as stored (rows not whole 32-element blocks)\n", (*m)->quant_kept);
    return s;
}

static const char *quant_name(int quant) { return quant >= 0 ? ts_dtype_name((ts_dtype)quant) : NULL; }

static ts_status run_phase(const ts_deploy_opts *o, int p, ts_model **m, const char *outdir, int threads, int forced,
                           json_t *reports[TS_N_PHASES], const json_t *diag, int *wrote_manifest, ts_error *err) {
    if (p == 0) {
        ts_phase0_opts o0 = {.golden = o->golden, .out = o->out, .threads = threads, .hf_python = o->hf_python,
                             .hf_script = o->hf_script, .deploy_dir = outdir};
        return ts_phase0_run(o->model_dir, &o0, &reports[0], err);
    }
    ts_status s = *m ? TS_OK : open_model(o, m, err);
    if (s) return s;
    /* Phase 1 checks the shapes of every prefill phase 4 measures: its trajectory and TTFT sizes. */
    int sizes[TS_PERF_MAX_SIZES + 1], n_sizes = 0;
    sizes[n_sizes++] = o->p4.prefill;
    for (int i = 0; i < o->p4.n_sizes && i < TS_PERF_MAX_SIZES; i++) sizes[n_sizes++] = o->p4.sizes[i];
    ts_phase_opts po = {.out = o->out, .threads = threads, .seed = 0, .fault = o->fault,
                        .prefill_sizes = sizes, .n_prefill_sizes = n_sizes};
    ts_perf_opts p4 = o->p4, p5 = o->p5;
    p4.out = p5.out = o->out;
    p4.threads = p5.threads = threads;
    p4.fault = p5.fault = o->fault;
    switch (p) {
    case 1: return ts_phase1_run(*m, &po, &reports[1], err);
    case 2: return ts_phase2_run(*m, &po, &reports[2], err);
    case 3: return ts_phase3_run(*m, &po, &reports[3], err);
    case 4: return ts_phase4_run(*m, &p4, &reports[4], err);
    case 5: return ts_phase5_run(*m, &p5, reports[4], &reports[5], err);
    case 6:
        *wrote_manifest = 1;
        return ts_phase6_run(*m, outdir, reports, threads, forced, diag, o->out, err);
    default:
        if (!*wrote_manifest && (s = ts_manifest_write(*m, outdir, reports, threads, forced, diag, err))) return s;
        *wrote_manifest = 1;
        if (o->out) fprintf(o->out, "phase 7 (evaluate): a fresh `tessera eval %s`\n", outdir);
        return spawn_eval(o, outdir, threads, err);
    }
}

ts_status ts_deploy_run(const ts_deploy_opts *o, ts_error *err) {
    if (!o->model_dir || o->lo < 0 || o->hi > 7 || o->lo > o->hi)
        return ts_fail(err, TS_ERR_ARG, "deploy: phases %d-%d: expected 0 <= first <= last <= 7", o->lo, o->hi);
    char def[4096];
    const char *outdir = o->out_dir;
    if (!outdir) {
        ts_deploy_default_out(o->model_dir, def, sizeof def);
        outdir = def;
    }
    FILE *out = o->out;
    int threads = ts_pool_resolve_threads(o->threads);
    json_t *reports[TS_N_PHASES] = {0}, *diag = NULL;
    ts_model *m = NULL;
    ts_error fail_err = {{0}};
    ts_status s, first_fail = TS_OK;
    int earlier_fail, wrote_manifest = 0;
    if ((s = load_earlier(outdir, o->lo, reports, &earlier_fail, err))) goto done;
    /* A resumed run continues the same deployment: the weight type of phases 1.. must match. */
    for (int p = 1; p < o->lo && p < TS_N_PHASES; p++) {
        if (!reports[p]) continue;
        const char *was = json_string_value(json_object_get(reports[p], "quant")), *now = quant_name(o->quant);
        if ((was == NULL) != (now == NULL) || (was && strcmp(was, now))) {
            s = ts_fail(err, TS_ERR_ARG, "%s/phase%d.json ran the weights %s%s; this run asks for %s%s (pass the same "
                        "--quant, or start again at phase 0)", outdir, p, was ? "quantized to " : "as stored",
                        was ? was : "", now ? "--quant " : "the weights as stored", now ? now : "");
            goto done;
        }
        /* absent: a report from before --kv-cache, which ran FP32 */
        const char *kv_was = json_string_value(json_object_get(reports[p], "kv_cache"));
        if (!kv_was) kv_was = "f32";
        if (strcmp(kv_was, ts_kv_cache_name(o->kv_cache))) {
            s = ts_fail(err, TS_ERR_ARG, "%s/phase%d.json ran a KV cache of %s; this run asks for --kv-cache %s (pass "
                        "--kv-cache %s, or start again at phase 0)", outdir, p, kv_was, ts_kv_cache_name(o->kv_cache),
                        kv_was);
            goto done;
        }
    }
    if (out && o->quant >= 0)
        fprintf(out, "weights: phase 0 checks the oracle on the weights as stored; phases 1-7 run the weight matrices "
                     "quantized to %s at load (the oracle on their exact dequantized values)\n", quant_name(o->quant));
    if (out && o->kv_cache == TS_DTYPE_F16)
        fprintf(out, "KV cache: F16 in phases 1-7 (K and V rounded to IEEE half when stored; the oracle's cache rounded "
                     "alike)\n");
    if (earlier_fail >= 0) {
        if (!o->force) {
            s = ts_fail(err, TS_ERR_GATE, "phase %d failed its gate in an earlier run (%s/phase%d.json); phase %d "
                        "refuses to start (--force runs it anyway)", earlier_fail, outdir, earlier_fail, o->lo);
            goto done;
        }
        first_fail = TS_ERR_GATE;
        snprintf(fail_err.msg, sizeof fail_err.msg, "phase %d failed its gate in an earlier run", earlier_fail);
    }
    if (o->fault && out) fprintf(out, "debug: a fault is injected into a cpu step\n");
    if (out) fprintf(out, "deploy %s -> %s: phases %d-%d, %d threads\n", o->model_dir, outdir, o->lo, o->hi, threads);
    double t_start = ts_now_s();
    for (int p = o->lo; p <= o->hi && (first_fail == TS_OK || o->force); p++) {
        double t_phase = ts_now_s();
        s = run_phase(o, p, &m, outdir, threads, o->force && first_fail, reports, diag, &wrote_manifest, err);
        if (out) fprintf(out, "phase %d took %.1f s\n", p, ts_now_s() - t_phase);
        if (p != 7 && reports[p]) {
            json_object_set_new(reports[p], "wall_s", json_real(ts_now_s() - t_phase));
            json_object_set_new(reports[p], "threads", json_integer(threads));
            if (p >= 1) json_object_set_new(reports[p], "quant", o->quant >= 0 ? json_string(quant_name(o->quant)) : json_null());
            if (p >= 1) json_object_set_new(reports[p], "kv_cache", json_string(ts_kv_cache_name(o->kv_cache)));
            if (first_fail != TS_OK) json_object_set_new(reports[p], "forced", json_true());
            char name[32];
            snprintf(name, sizeof name, "phase%d.json", p);
            ts_error werr;
            if (write_report(o, outdir, name, reports[p], &werr) && !s) s = TS_ERR_IO, *err = werr;
        }
        if (s && s != TS_ERR_GATE) goto done;
        if (s && first_fail == TS_OK) {
            first_fail = s, fail_err = *err;
            /* Numerical gates get a diagnosis (once): which layer, which step, where NaN starts. */
            if (p >= 1 && p <= 5 && p != 4 && m) {
                ts_cpu_opts co = {.n_threads = threads, .force_variant = -1, .fault = o->fault};
                ts_error derr;
                if (ts_diagnose(m, &co, out, &diag, &derr)) {
                    if (out) fprintf(out, "diagnosis could not run: %s\n", derr.msg);
                } else if (write_report(o, outdir, "diagnosis.json", diag, &derr) && out) {
                    fprintf(out, "%s\n", derr.msg);
                }
            }
        }
    }
    if (first_fail && !o->force && out) fprintf(out, "a gate failed: later phases were not run (--force runs them anyway)\n");
    /* The deployment directory is finalized whatever happened, so a failure is on record. */
    s = m ? TS_OK : open_model(o, &m, err);
    if (!s && !wrote_manifest) s = ts_manifest_write(m, outdir, reports, threads, o->force && first_fail, diag, err);
    if (s) goto done;
    if (out) {
        fprintf(out, "manifest: %s/manifest.json\nreport: %s/report.md\n", outdir, outdir);
        fprintf(out, "deploy: phases %d-%d in %.1f s\n", o->lo, o->hi, ts_now_s() - t_start);
    }
    /* With --force every phase ran, but the status still says a gate failed. */
    if (first_fail) s = first_fail, *err = fail_err;
done:
    for (int p = 0; p < TS_N_PHASES; p++) json_decref(reports[p]);
    json_decref(diag);
    ts_model_close(m);
    return s;
}
