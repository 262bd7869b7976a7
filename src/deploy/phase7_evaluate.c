/* The evaluator. Every check appends a line (OK / WARN / FAIL + reason) to evaluation.md;
 * the verdict is FAIL if any check failed, PASS-with-warnings if any warned. This file runs
 * the checks in order and re-derives what needs the model; eval_audit.c audits the recorded
 * thresholds and gates, eval_perf.c the performance claims and the baseline comparison. */
#include "deploy/phases.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/pool.h"
#include "deploy/eval_internal.h"
#include "deploy/deployment.h"
#include "deploy/gates.h"
#include "deploy/placement.h"
#include "deploy/tiles.h"
#include "io/json.h"
#include "io/mmap.h"
#include "io/sha256.h"
#include "model/quantize.h"
#include "target/cpu/cpu_target.h"

void ts_eval_note(ts_eval_checks *k, int level, const char *fmt, ...) {
    static const char *tag[] = {"OK", "WARN", "FAIL"};
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (level == TS_EVAL_WARN) k->warns++;
    if (level == TS_EVAL_FAIL) k->fails++;
    fprintf(k->md, "| %s | %s |\n", tag[level], msg);
    json_array_append_new(k->rows, json_pack("{s:s, s:s}", "result", tag[level], "check", msg));
    if (k->out) fprintf(k->out, "  %-4s %s\n", tag[level], msg);
}

/* The kernels this process runs against those the deployment was measured with: another
 * variant (a different CPU) or another AVX-512 prefill kernel (the per-core probe, gemm.h)
 * changes the numbers phase 7 re-measures, so it is said before them. */
static int check_kernels(ts_eval_checks *k, const json_t *man) {
    const json_t *t = json_object_get(man, "target");
    const char *var = json_string_value(json_object_get(t, "variant"));
    const char *pk = json_string_value(json_object_get(t, "prefill_kernel"));
    ts_cpu_variant v = ts_cpu_best_variant();
    const char *now_var = ts_cpu_variant_name(v), *now_pk = ts_cpu_prefill_kernel_name(v);
    const char *dk = json_string_value(json_object_get(t, "decode_kernel")), *now_dk = ts_cpu_decode_kernel_name(v);
    const char *qk = json_string_value(json_object_get(t, "quant_kernels")), *now_qk = ts_cpu_gemm_q_name(v);
    if (var && strcmp(var, now_var))
        ts_eval_note(k, 1, "this CPU runs the %s kernels; the deployment was measured with %s", now_var, var);
    else if (pk && strcmp(pk, now_pk))
        ts_eval_note(k, 1, "this process's prefill GEMM is %s; the deployment was measured with %s", now_pk, pk);
    else if (dk && strcmp(dk, now_dk))
        ts_eval_note(k, 1, "this process's decode GEMV is %s; the deployment was measured with %s", now_dk, dk);
    else if (qk && strcmp(qk, now_qk)) /* TESSERA_Q_PREFILL set differently, or another core */
        ts_eval_note(k, 1, "this process's Q8_0/Q4_0 kernels are %s; the deployment was measured with %s", now_qk, qk);
    else {
        /* a deployment whose matrices are Q8_0/Q4_0 runs the quantized kernels on them: name those */
        const json_t *wp = json_object_get(t, "weights_probe");
        int quantized = json_integer_value(json_object_get(wp, "quantized_in_place_matrices")) > 0 ||
                        json_string_value(json_object_get(json_object_get(man, "model"), "quant"));
        ts_eval_note(k, 0, "kernels as deployed: %s%s%s%s%s", now_var, pk ? ", prefill " : "", pk ? pk : "",
                     quantized && qk ? "; Q8_0/Q4_0 matrices: " : "", quantized && qk ? qk : "");
        return 1;
    }
    return 0;
}

static void check_hashes(ts_eval_checks *k, const json_t *model, const char *dir) {
    char hex[65];
    ts_error e;
    /* A GGUF deployment's model is one file: it is its own config, its directory holds it. */
    int gguf = ts_file_exists(dir);
    char *parent = strdup(dir), *slash = parent ? strrchr(parent, '/') : NULL;
    if (slash) *slash = 0;
    const char *wdir = !gguf ? dir : slash ? parent : ".";
    char *cfg = gguf ? strdup(dir) : ts_path_join(dir, "config.json");
    const char *want = json_string_value(json_object_get(model, "config_sha256"));
    if (!want) ts_eval_note(k, 2, "manifest has no config_sha256");
    else if (ts_sha256_file(cfg, hex, &e)) ts_eval_note(k, 2, "%s", e.msg);
    else if (strcmp(hex, want)) ts_eval_note(k, 2, "%s changed since deployment: sha256 %.16s..., manifest says %.16s...", cfg, hex, want);
    else ts_eval_note(k, 0, "%s sha256 matches the manifest", gguf ? "the GGUF file's" : "config.json");
    free(cfg);
    size_t i;
    json_t *w;
    int n = 0;
    json_array_foreach(json_object_get(model, "weights"), i, w) {
        const char *file = json_string_value(json_object_get(w, "file"));
        const char *sha = json_string_value(json_object_get(w, "sha256"));
        if (!file || !sha || strchr(file, '/')) {
            ts_eval_note(k, 2, "manifest weights[%zu] is malformed", i);
            continue;
        }
        char *p = ts_path_join(wdir, file);
        if (ts_sha256_file(p, hex, &e)) ts_eval_note(k, 2, "%s", e.msg);
        else if (strcmp(hex, sha)) ts_eval_note(k, 2, "%s changed since deployment: sha256 %.16s..., manifest says %.16s...", p, hex, sha);
        else n++;
        free(p);
    }
    if (n && n == (int)i) ts_eval_note(k, 0, "%d weight file(s): sha256 match the manifest", n);
    else if (!i) ts_eval_note(k, 2, "manifest lists no weight files");
    free(parent);
}

static long long count(const json_t *cls, const char *group, const char *which) {
    return (long long)json_integer_value(json_object_get(json_object_get(cls, group), which));
}

/* " (text prompts, decisive / competitive: positions D / C, ...)" from a phase-3 report. */
static void class_line(const json_t *cls, const char *kind, char *buf, size_t len) {
    snprintf(buf, len, " (%s prompts, decisive / competitive: positions %lld / %lld, prompts %lld / %lld, lockstep "
             "steps %lld / %lld, divergences at %lld / %lld)",
             !kind ? "unknown" : !strcmp(kind, "random ids") ? "random-id" : kind,
             count(cls, "positions", "decisive"), count(cls, "positions", "competitive"),
             count(cls, "prompts", "decisive"), count(cls, "prompts", "competitive"),
             count(cls, "lockstep_steps", "decisive"), count(cls, "lockstep_steps", "competitive"),
             count(cls, "lockstep_divergences", "decisive"), count(cls, "lockstep_divergences", "competitive"));
}

/* Greedy generation twice from fresh sessions of the deployed plan (its tiles and weight
 * placement) must give the same ids; the prompt from the evaluation's prompts (ps, or random ids
 * when NULL). */
static void determinism(ts_eval_checks *k, const ts_model *m, const json_t *man, int threads, uint64_t seed,
                        const ts_prompt_set *ps) {
    const json_t *target = json_object_get(man, "target");
    int copy;
    ts_error pe;
    if (ts_placement_parse(json_object_get(target, "weights"), "manifest.json: target.weights", &copy, &pe)) {
        ts_eval_note(k, 2, "%s", pe.msg);
        return;
    }
    enum { P = 8, G = 32 };
    const ts_config *c = ts_model_config(m);
    int32_t runs[2][P + G];
    ts_error e;
    float *lg = malloc(sizeof(float) * (size_t)c->n_vocab);
    for (int r = 0; r < 2 && lg; r++) {
        ts_cpu *cp;
        ts_cpu_opts o = {.n_threads = threads, .force_variant = -1, .disable = ts_placement_mask(copy)};
        if (ts_cpu_new(m, P + G, &o, &cp, &e) ||
            ts_tiles_apply(cp, json_object_get(target, "tiles"), &e)) {
            ts_cpu_free(cp);
            ts_eval_note(k, 2, "%s", e.msg);
            free(lg);
            return;
        }
        char name[320];
        if (ps) ts_prompts_get(ps, seed, 400, runs[r], P, name, sizeof name);
        else ts_phase_prompt_tokens(c, seed, 400, runs[r], P);
        ts_status s = ts_cpu_forward(cp, runs[r], P, lg, 0, NULL, &e);
        for (int g = 0; g < G && !s; g++) {
            runs[r][P + g] = ts_argmax(lg, c->n_vocab);
            if (g + 1 < G) s = ts_cpu_forward(cp, &runs[r][P + g], 1, lg, 0, NULL, &e);
        }
        ts_cpu_free(cp);
        if (s) {
            ts_eval_note(k, 2, "%s", e.msg);
            free(lg);
            return;
        }
    }
    free(lg);
    if (memcmp(runs[0], runs[1], sizeof runs[0]) == 0) ts_eval_note(k, 0, "greedy output byte-identical across two runs (%d tokens)", G);
    else ts_eval_note(k, 2, "greedy output differs between two runs: the target is not deterministic");
}

/* The prompts of the re-derived phase 3, from the same source as the deployment's (its phase-3
 * report, else phase 4's or 5's): text re-tokenized here with the model's tokenizer and held to
 * the recorded fingerprint (no ids are taken from the deployment), or random ids. A tokenizer
 * gone or changed since deployment is a warning: the gates still re-derive, on other prompts. */
static ts_status eval_prompts(ts_eval_checks *k, const ts_model *m, json_t *const reports[TS_N_PHASES],
                              ts_prompt_set *ps, ts_error *err) {
    const json_t *rec = NULL;
    for (int p = 3; p <= 5 && !rec; p++) rec = json_object_get(reports[p], "prompt_source");
    const char *kind = json_string_value(json_object_get(rec, "kind"));
    const char *fp = json_string_value(json_object_get(rec, "fingerprint"));
    char why[400];
    if (kind && !strcmp(kind, "random ids")) {
        const char *rwhy = json_string_value(json_object_get(rec, "why"));
        snprintf(why, sizeof why, "as deployed (%s)", rwhy ? rwhy : "no reason recorded");
        ts_status s = ts_prompts_open(m, why, ps, err);
        if (!s) ts_eval_note(k, TS_EVAL_OK, "prompts: random token ids, %s", why);
        return s;
    }
    ts_status s = ts_prompts_open(m, NULL, ps, err);
    if (s) return s;
    if (!kind)
        ts_eval_note(k, TS_EVAL_OK, "prompts: %s (the deployment records no prompt source)",
                     ps->text ? "text through the model's tokenizer" : "random token ids");
    else if (strcmp(kind, "text"))
        ts_eval_note(k, TS_EVAL_FAIL, "prompts: the deployment records an unknown prompt source \"%s\"", kind);
    else if (!ps->text)
        ts_eval_note(k, TS_EVAL_WARN, "prompts: the deployment ran on text prompts, but now %s: the gates are "
                     "re-derived on random token ids", ps->why);
    else if (!fp || strcmp(fp, ps->fingerprint))
        ts_eval_note(k, TS_EVAL_WARN, "prompts: the model's tokenizer encodes the prompt texts differently than at "
                     "deployment (fingerprint %s, recorded %s): the tokenizer changed", ps->fingerprint, fp ? fp : "none");
    else
        ts_eval_note(k, TS_EVAL_OK, "prompts: text, re-tokenized with the model's tokenizer as at deployment "
                     "(fingerprint %s)", ps->fingerprint);
    return TS_OK;
}

/* The baseline's manifest, refused unless it is a deployment of the same model. */
static ts_status load_baseline(const json_t *man, const char *bdir, json_t **base, ts_error *err) {
    char *bpath = ts_path_join(bdir, "manifest.json");
    ts_status s = bpath ? ts_json_load_file(bpath, 64u << 20, base, err) : ts_fail(err, TS_ERR_NOMEM, "out of memory");
    free(bpath);
    if (!s) s = ts_eval_same_model(man, *base, bdir, err);
    if (s) json_decref(*base), *base = NULL;
    return s;
}

ts_status ts_evaluate(const char *dir, const ts_eval_opts *o, ts_verdict *verdict, ts_error *err) {
    char *mpath = ts_path_join(dir, "manifest.json"), *epath = ts_path_join(dir, "evaluation.md");
    json_t *man = NULL, *base = NULL;
    ts_status s = ts_json_load_file(mpath, 64u << 20, &man, err);
    free(mpath);
    if (!s && o->baseline) s = load_baseline(man, o->baseline, &base, err);
    if (s) {
        json_decref(man);
        free(epath);
        return s;
    }
    const json_t *model = json_object_get(man, "model");
    const char *mdir = json_string_value(json_object_get(model, "dir"));
    FILE *md = fopen(epath, "w");
    if (!md || !mdir) {
        if (md) fclose(md);
        json_decref(man), json_decref(base);
        s = ts_fail(err, mdir ? TS_ERR_IO : TS_ERR_FORMAT, "%s: %s", dir,
                    mdir ? "cannot write evaluation.md" : "manifest.json has no model.dir");
        free(epath);
        return s;
    }
    ts_eval_checks k = {md, o->out, 0, 0, json_array()};
    /* The thread count, resolved once: --threads, else the deployment's, else every core. */
    long long rec = json_integer_value(json_object_get(json_object_get(man, "target"), "threads"));
    int threads = o->threads > 0 ? o->threads : rec > 0 && rec <= TS_POOL_MAX_THREADS ? (int)rec : ts_pool_default_threads();
    /* Speed claims hold for the thread count they were measured with: they are re-measured
     * with it whatever --threads says (that one runs the re-derived gates). */
    int perf_threads = rec > 0 && rec <= TS_POOL_MAX_THREADS ? (int)rec : threads;
    fprintf(md, "# Evaluation of %s\n\nmodel %s, evaluation seed %llu, tessera %s%s%s\n\n| result | check |\n|---|---|\n",
            dir, mdir, (unsigned long long)o->seed, ts_version(), base ? ", baseline " : "", base ? o->baseline : "");
    if (o->out) fprintf(o->out, "phase 7 (evaluate): %s (model %s, seed %llu)\n", dir, mdir, (unsigned long long)o->seed);
    check_hashes(&k, model, mdir);
    int same_kernels = check_kernels(&k, man);
    ts_eval_audit_thresholds(&k, man);
    json_t *reports[TS_N_PHASES] = {0}, *got = json_array(), *prompts = json_object();
    ts_eval_recorded_gates(&k, man, dir, reports);
    ts_model *m = NULL;
    ts_error e;
    const json_t *perf = json_object_get(man, "performance");
    int quant = -1, kv = TS_DTYPE_F32;
    /* a --quant deployment: its matrices are quantized at load exactly as deploy did; a
     * --kv-cache f16 one holds (and its oracle rounds) the cache as deploy did */
    if (ts_deployment_quant(json_object_get(model, "quant"), "manifest.json", &quant, &e) ||
        ts_deployment_kv_cache(json_object_get(model, "kv_cache"), "manifest.json", &kv, &e) ||
        ts_model_open(mdir, &m, &e) || ts_model_check_values(m, &e) ||
        (quant >= 0 && ts_model_quantize(m, (ts_dtype)quant, &e))) {
        ts_eval_note(&k, TS_EVAL_FAIL, "%s", e.msg);
    } else {
        m->kv_type = kv;
        /* Phase 1 again at the prefill sizes deploy's phase 1 checked (the trajectory's and every
         * TTFT size: their GEMM chunks), else the claimed TTFT sizes, else its defaults. */
        int sizes[TS_PERF_MAX_SIZES], n_sizes = 0;
        size_t pi;
        json_t *pr;
        json_array_foreach(json_object_get(reports[1], "prefill_sizes"), pi, pr) {
            json_int_t t = json_integer_value(pr);
            if (t > 0 && t <= (1 << 20) && n_sizes < TS_PERF_MAX_SIZES) sizes[n_sizes++] = (int)t;
        }
        if (!n_sizes)
            json_array_foreach(json_object_get(perf, "prefill"), pi, pr) {
                json_int_t t = json_integer_value(json_object_get(pr, "tokens"));
                if (t > 0 && t <= (1 << 20) && n_sizes < TS_PERF_MAX_SIZES) sizes[n_sizes++] = (int)t;
            }
        ts_prompt_set ps = {0};
        ts_status pst = eval_prompts(&k, m, reports, &ps, &e);
        if (pst) ts_eval_note(&k, TS_EVAL_FAIL, "prompts could not be prepared: %s", e.msg);
        ts_phase_opts po = {.out = NULL, .threads = threads, .seed = o->seed, .prefill_sizes = sizes,
                            .n_prefill_sizes = n_sizes, .prompts = pst ? NULL : &ps};
        ts_status (*run[3])(const ts_model *, const ts_phase_opts *, json_t **, ts_error *) = {
            ts_phase1_run, ts_phase2_run, ts_phase3_run};
        for (int p = 0; p < 3; p++) {
            json_t *rep = NULL;
            ts_status rs = run[p](m, &po, &rep, &e);
            char cl[400] = "";
            if (p == 2 && rep) { /* what the re-derived phase 3 ran on, for phase7.json and the line */
                const json_t *src = json_object_get(rep, "prompt_source");
                json_object_set(prompts, "source", (json_t *)src);
                json_object_set(prompts, "classes", json_object_get(rep, "classes"));
                json_object_set(prompts, "prompts", json_object_get(rep, "prompts"));
                json_object_set(prompts, "lockstep", json_object_get(rep, "lockstep"));
                class_line(json_object_get(rep, "classes"), json_string_value(json_object_get(src, "kind")), cl, sizeof cl);
            }
            if (rs == TS_OK) ts_eval_note(&k, TS_EVAL_OK, "phase %d gate re-derived on new inputs: pass%s", p + 1, cl);
            else if (rs == TS_ERR_GATE) ts_eval_note(&k, TS_EVAL_FAIL, "phase %d gate re-derived on new inputs: FAIL%s", p + 1, cl);
            else ts_eval_note(&k, TS_EVAL_FAIL, "phase %d could not run: %s", p + 1, e.msg);
            json_decref(rep);
        }
        determinism(&k, m, man, threads, o->seed, pst ? NULL : &ps);
        ts_prompts_close(&ps);
        if (json_is_object(perf)) ts_eval_remeasure(&k, m, man, perf_threads, same_kernels, reports[4], reports[5], got);
    }
    if (!json_is_object(perf))
        ts_eval_note(&k, TS_EVAL_WARN, "no performance claims to re-measure (phases 4-5 not run)");
    ts_model_close(m);
    /* The comparison tables go after the list of checks, so they are gathered apart. */
    char *tab = NULL;
    size_t tab_len = 0;
    json_t *cmp = NULL;
    if (base) {
        FILE *t = open_memstream(&tab, &tab_len);
        if (!t) ts_eval_note(&k, TS_EVAL_FAIL, "baseline: out of memory");
        else {
            cmp = ts_eval_baseline(&k, man, base, o->baseline, got, t);
            fclose(t);
        }
    }
    *verdict = k.fails ? TS_VERDICT_FAIL : (k.warns ? TS_VERDICT_WARN : TS_VERDICT_PASS);
    static const char *names[] = {"PASS", "PASS-with-warnings", "FAIL"};
    if (tab) fputs(tab, md);
    free(tab);
    fprintf(md, "\n**Verdict: %s** (%d failed, %d warnings)\n", names[*verdict], k.fails, k.warns);
    if (o->out) fprintf(o->out, "verdict: %s (%d failed, %d warnings); %s\n", names[*verdict], k.fails, k.warns, epath);
    fclose(md);
    free(epath);
    json_t *rep = json_pack("{s:i, s:s, s:b, s:i, s:i, s:I, s:o, s:o}", "phase", 7, "verdict", names[*verdict], "pass",
                            *verdict != TS_VERDICT_FAIL, "failed", k.fails, "warnings", k.warns, "seed",
                            (json_int_t)o->seed, "checks", k.rows, "remeasured", got);
    if (cmp) json_object_set_new(rep, "baseline", cmp);
    json_object_set_new(rep, "prompts", prompts);
    json_object_set_new(rep, "gates", json_pack("[{s:s, s:i, s:s, s:i, s:b}]", "metric", "failed_checks", "measured",
                                                k.fails, "op", "<=", "threshold", 0, "pass", k.fails == 0));
    char *jpath = ts_path_join(dir, "phase7.json");
    if (!jpath || json_dump_file(rep, jpath, JSON_INDENT(2)))
        if (o->out) fprintf(o->out, "warning: cannot write %s/phase7.json\n", dir);
    free(jpath);
    json_decref(rep);
    for (int p = 0; p < TS_N_PHASES; p++) json_decref(reports[p]);
    json_decref(man), json_decref(base);
    return TS_OK;
}
