/* manifest.json: model identity (config and weight-file SHA-256), tessera version, target and
 * CPU features, the dispatch plan, thresholds, and every gate that ran; report.md: the same
 * for a person, gate tables with measured values next to thresholds. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "deploy/manifest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "deploy/diagnose.h"
#include "deploy/gates.h"
#include "io/mmap.h"
#include "io/sha256.h"
#include "target/cpu/cpu_features.h"
#include "target/cpu/cpu_target.h"

static const char *k_plan[3][8] = {
    {"attn_norm", "qkv(+bias)", "qk_norm", "rope+kv_store", NULL},
    {"attention", NULL},
    {"o_proj(+bias)+residual", "ffn_norm", "gate_up(+bias)+silu_mul", "down(+bias)+residual", NULL},
};

static json_t *identity(const ts_model *m, ts_error *err, ts_status *s) {
    json_t *id = json_object(), *files = json_array();
    char hex[65];
    char *abs = realpath(m->dir, NULL);
    json_object_set_new(id, "dir", json_string(abs ? abs : m->dir));
    free(abs);
    json_object_set_new(id, "architecture", json_string(m->cfg.arch_name));
    char feat[256];
    ts_config_features(&m->cfg, feat, sizeof feat);
    json_object_set_new(id, "features", json_string(feat));
    json_object_set_new(id, "n_params", json_integer((json_int_t)m->n_params));
    /* --quant: phases 1-7 ran the matrices quantized at load; eval and run do the same */
    json_object_set_new(id, "quant", m->quantized >= 0 ? json_string(ts_dtype_name((ts_dtype)m->quantized)) : json_null());
    /* --kv-cache: what every phase's KV cache held (the oracle's rounded alike); eval and run too */
    json_object_set_new(id, "kv_cache", json_string(ts_kv_cache_name(m->kv_type)));
    if ((*s = ts_sha256_file(m->config_path, hex, err))) {
        json_decref(files);
        return id;
    }
    json_object_set_new(id, "config_sha256", json_string(hex));
    for (int i = 0; i < m->store.n_maps; i++) {
        const ts_mmap *mp = &m->store.maps[i];
        if ((*s = ts_sha256_file(mp->path, hex, err))) break;
        const char *base = strrchr(mp->path, '/');
        json_array_append_new(files, json_pack("{s:s, s:I, s:s}", "file", base ? base + 1 : mp->path, "bytes",
                                               (json_int_t)mp->size, "sha256", hex));
    }
    json_object_set_new(id, "weights", files);
    return id;
}

static json_t *target_json(int threads, const json_t *phase4, const json_t *phase5) {
    const ts_cpu_features *f = ts_cpu_features_get();
    json_t *plan = json_array();
    for (int d = 0; d < 3; d++) {
        json_t *g = json_array();
        for (int i = 0; k_plan[d][i]; i++) json_array_append_new(g, json_string(k_plan[d][i]));
        json_array_append_new(plan, g);
    }
    /* The weight placement phase 4's probe chose (mmap when phase 4 did not run), unless phase 5
     * measured another complete plan faster (plan_choice.h): then its weights and tiles. */
    const json_t *pl = phase4 ? json_object_get(phase4, "placement") : NULL;
    const json_t *pick = phase5 ? json_object_get(phase5, "plan_choice") : NULL;
    const char *w = json_string_value(json_object_get(pick ? pick : pl, "weights"));
    const char *tl = json_string_value(json_object_get(pick, "tiles"));
    int default_tiles = tl && !strcmp(tl, "default");
    json_t *t = json_pack("{s:s, s:s, s:i, s:s, s:{s:b, s:b, s:b, s:b}, s:o, s:i, s:s, s:o, s:s}", "name", "cpu", "variant",
                          ts_cpu_variant_name(ts_cpu_best_variant()), "threads", threads, "cpu", f->brand, "features",
                          "avx2", f->avx2, "fma", f->fma, "avx512f", f->avx512f, "avx512bf16", f->avx512bf16,
                          "dispatch_plan", plan, "dispatches_per_layer", 3, "lm_head", "last position only in prefill",
                          "tiles", default_tiles ? json_string("defaults (phase 5 measured them at least as fast)")
                                   : phase4 && json_object_get(phase4, "tiles") ? json_deep_copy(json_object_get(phase4, "tiles"))
                                                                                : json_string("defaults (phase 4 did not run)"),
                          "weights", w && !strcmp(w, "copy") ? "copy" : "mmap");
    if (pl) json_object_set_new(t, "weights_probe", json_deep_copy(pl));
    const char *pwhy = json_string_value(json_object_get(pick, "why"));
    if (pick)
        json_object_set_new(t, "decode_plan", json_pack("{s:s, s:s, s:s}", "weights", w ? w : "mmap", "tiles", tl ? tl : "",
                                                        "why", pwhy ? pwhy : ""));
    json_object_set_new(t, "prefill_kernel", json_string(ts_cpu_prefill_kernel_name(ts_cpu_best_variant())));
    json_object_set_new(t, "decode_kernel", json_string(ts_cpu_decode_kernel_name(ts_cpu_best_variant())));
    /* what Q8_0 / Q4_0 matrices run with here (a quantized model's GEMMs; gemm.h) */
    json_object_set_new(t, "quant_kernels", json_string(ts_cpu_gemm_q_name(ts_cpu_best_variant())));
    return t;
}

/* The claims phase 7 re-measures: the final plan's prefill (TTFT) and decode rates, with the
 * trials' samples, from which the evaluator re-derives each claim's mean and spread. */
static json_t *performance_json(const json_t *p4, const json_t *p5) {
    if (!p4 && !p5) return json_null();
    json_t *perf = json_object(), *pre = json_array(), *dec = json_array();
    size_t i;
    const json_t *r;
    json_array_foreach(json_object_get(p4, "ttft"), i, r)
        json_array_append_new(pre, json_pack("{s:O, s:O, s:O, s:O, s:O, s:O*}", "tokens", json_object_get(r, "tokens"),
                                             "ttft_ms_mean", json_object_get(r, "warm_ms_mean"), "ttft_ms_sd",
                                             json_object_get(r, "warm_ms_sd"), "prefill_tok_s",
                                             json_object_get(r, "prefill_tok_s"), "cold_ms", json_object_get(r, "cold_ms"),
                                             "samples_tok_s", json_object_get(r, "samples_tok_s")));
    json_array_foreach(json_object_get(p5, "contexts"), i, r)
        json_array_append_new(dec, json_pack("{s:O, s:O, s:O, s:O, s:O*}", "context", json_object_get(r, "context"),
                                             "decode_tok_s", json_object_get(r, "decode_tok_s"), "decode_tok_s_sd",
                                             json_object_get(r, "decode_tok_s_sd"), "gb_s", json_object_get(r, "gb_s"),
                                             "samples_tok_s", json_object_get(r, "samples_tok_s")));
    json_object_set_new(perf, "prefill", pre);
    json_object_set_new(perf, "decode", dec);
    json_object_set_new(perf, "decode_tokens_per_trial",
                        p5 ? json_integer(json_integer_value(json_object_get(p5, "decode_tokens"))) : json_null());
    json_object_set_new(perf, "trials", json_integer(json_integer_value(json_object_get(p4 ? p4 : p5, "trials"))));
    return perf;
}

static json_t *thresholds_json(void) {
    int n;
    const ts_threshold *t = ts_thresholds(&n);
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_pack("{s:s, s:s, s:s, s:f}", "phase", t[i].phase, "metric", t[i].metric, "op",
                                           t[i].op == TS_GATE_GE ? ">=" : "<=", "value", t[i].value));
    return a;
}

ts_phase_verdict ts_phase_verdict_of(const json_t *rep) {
    const char *v = json_string_value(json_object_get(rep, "verdict"));
    if (v) return !strcmp(v, "PASS") ? TS_PHASE_PASS : !strcmp(v, "not compared") ? TS_PHASE_NOT_COMPARED : TS_PHASE_FAIL;
    return json_is_true(json_object_get(rep, "pass")) ? TS_PHASE_PASS : TS_PHASE_FAIL;
}

const char *ts_phase_verdict_name(ts_phase_verdict v) {
    return v == TS_PHASE_PASS ? "PASS" : v == TS_PHASE_NOT_COMPARED ? "not compared" : "FAIL";
}

static double num(const json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }
/* A string field of a report (possibly read back from disk), "" when absent or not a string. */
static const char *str(const json_t *o, const char *k) {
    const char *v = json_string_value(json_object_get(o, k));
    return v ? v : "";
}

static void profile_md(FILE *f, const char *title, const json_t *prof) {
    if (!json_array_size(prof)) return;
    fprintf(f, "\n%s\n\n| dispatch | calls | ms | share |\n|---|---|---|---|\n", title);
    size_t i;
    const json_t *p;
    json_array_foreach(prof, i, p)
        fprintf(f, "| %s | %.1f | %.3f | %.1f%% |\n", json_string_value(json_object_get(p, "dispatch")),
                num(p, "calls_per_run"), num(p, "ms_per_run"), 100 * num(p, "share"));
}

static void trajectory_md(FILE *f, const json_t *rep, const char *rate_key, const char *what) {
    const json_t *rows = json_object_get(rep, "trajectory"), *r;
    size_t i;
    fprintf(f, "\n### %s trajectory (%lld warm trials each; cold = %s)\n\n"
               "| optimization | cold ms | warm ms (mean +- sd) | tok/s | speed-up | dispatches/layer |\n"
               "|---|---|---|---|---|---|\n", what, (long long)json_integer_value(json_object_get(rep, "trials")),
            strcmp(what, "Prefill") ? "the first decode run of a new session, after its prefill"
                                    : "new session, weights bound, first forward");
    double base = 0;
    json_array_foreach(rows, i, r) {
        if (i == 0) base = num(r, "warm_ms_mean");
        fprintf(f, "| %s | %.1f | %.2f +- %.2f | %.2f | %.2fx | %lld |\n", json_string_value(json_object_get(r, "step")),
                num(r, "cold_ms"), num(r, "warm_ms_mean"), num(r, "warm_ms_sd"), num(r, rate_key),
                base / num(r, "warm_ms_mean"), (long long)json_integer_value(json_object_get(r, "dispatches_per_layer")));
    }
}

static void perf_md(FILE *f, const json_t *p4, const json_t *p5) {
    if (!p4 && !p5) return;
    fprintf(f, "\n## Performance\n\nThe chart of both trajectories is trajectory.svg.\n");
    const json_t *pl = p4 ? json_object_get(p4, "placement") : NULL;
    if (pl && json_object_get(pl, "copy_decode_tok_s"))
        fprintf(f, "\nWeight placement: **%s**. Decode probe (median of %lld rounds of %lld tokens): %.2f tok/s from the "
                   "mmap, %.2f tok/s copied to huge pages, the copy faster in %lld rounds, median ratio %.3f, %.0f ms "
                   "more to load. Rule: %s.\n",
                str(pl, "weights"), (long long)json_integer_value(json_object_get(pl, "rounds")),
                (long long)json_integer_value(json_object_get(pl, "tokens_per_round")), num(pl, "mmap_decode_tok_s"),
                num(pl, "copy_decode_tok_s"), (long long)json_integer_value(json_object_get(pl, "copy_faster_rounds")),
                num(pl, "median_ratio"), num(pl, "copy_extra_load_ms"), str(pl, "rule"));
    else if (pl)
        fprintf(f, "\nWeight placement: **%s** (%s).\n", str(pl, "weights"), str(pl, "why"));
    if (pl && json_object_get(pl, "padded_matrices"))
        fprintf(f, "%lld BF16 weight matrices whose K is not a multiple of 16 are copied with zero-padded rows "
                   "(%.2f MiB) whatever the placement: the cpu kernels run whole 16-element blocks.\n",
                (long long)json_integer_value(json_object_get(pl, "padded_matrices")),
                (double)json_integer_value(json_object_get(pl, "padded_bytes")) / 1048576.0);
    if (pl && json_object_get(pl, "converted_matrices"))
        fprintf(f, "%lld weight matrices stored other than BF16 are converted to BF16 copies whatever the placement.\n",
                (long long)json_integer_value(json_object_get(pl, "converted_matrices")));
    if (p4) {
        trajectory_md(f, p4, "prefill_tok_s", "Prefill");
        fprintf(f, "\nTime to first token of the final plan:\n\n| prompt tokens | cold ms | TTFT ms (mean +- sd) | "
                   "prefill tok/s |\n|---|---|---|---|\n");
        size_t i;
        const json_t *r;
        json_array_foreach(json_object_get(p4, "ttft"), i, r)
            fprintf(f, "| %lld | %.1f | %.2f +- %.2f | %.2f |\n", (long long)json_integer_value(json_object_get(r, "tokens")),
                    num(r, "cold_ms"), num(r, "warm_ms_mean"), num(r, "warm_ms_sd"), num(r, "prefill_tok_s"));
        profile_md(f, "Where prefill time goes, final plan (per forward):", json_object_get(p4, "profile_final"));
        profile_md(f, "Where prefill time goes, unfused baseline (one dispatch per step):",
                   json_object_get(p4, "profile_baseline"));
    }
    const json_t *pc = p5 ? json_object_get(p5, "plan_choice") : NULL;
    if (pc) {
        fprintf(f, "\nFinal decode plan by measurement (%lld alternating rounds of %lld tokens after %lld): **%s**, %s.\n\n"
                   "| plan | median tok/s | |\n|---|---|---|\n",
                (long long)json_integer_value(json_object_get(pc, "rounds")),
                (long long)json_integer_value(json_object_get(pc, "tokens_per_round")),
                (long long)json_integer_value(json_object_get(pc, "context")),
                str(json_array_get(json_object_get(pc, "candidates"), (size_t)json_integer_value(json_object_get(pc, "chosen"))), "plan"),
                str(pc, "why"));
        size_t i;
        const json_t *r;
        json_array_foreach(json_object_get(pc, "candidates"), i, r)
            fprintf(f, "| %s | %.2f | %s |\n", str(r, "plan"), num(r, "median_tok_s"),
                    (json_int_t)i == json_integer_value(json_object_get(pc, "chosen")) ? "shipped"
                    : json_is_true(json_object_get(r, "phase4_plan"))                 ? "phase 4's plan"
                                                                                       : "");
    }
    if (p5) {
        trajectory_md(f, p5, "decode_tok_s", "Decode");
        fprintf(f, "\nDecode of the final plan (%lld tokens per trial; read peak measured in the same run: %.1f GB/s):\n\n"
                   "| context | tok/s (mean +- sd) | GB/s | share of read peak |\n|---|---|---|---|\n",
                (long long)json_integer_value(json_object_get(p5, "decode_tokens")), num(p5, "peak_read_gbs"));
        size_t i;
        const json_t *r;
        json_array_foreach(json_object_get(p5, "contexts"), i, r)
            fprintf(f, "| %lld | %.2f +- %.2f | %.2f | %.0f%% |\n", (long long)json_integer_value(json_object_get(r, "context")),
                    num(r, "decode_tok_s"), num(r, "decode_tok_s_sd"), num(r, "gb_s"), 100 * num(r, "bandwidth_fraction"));
        profile_md(f, "Where decode time goes, final plan (per token):", json_object_get(p5, "profile_final"));
    }
}

static long long count(const json_t *cls, const char *group, const char *which) {
    return (long long)json_integer_value(json_object_get(json_object_get(cls, group), which));
}

/* What the oracle checks of phases 3-5 ran on: text or random ids, and how many positions,
 * prompts and greedy steps fell in each class of the phase-3 rule. */
static void prompts_md(FILE *f, json_t *const reports[TS_N_PHASES]) {
    static const char *what[3] = {"3 model: prompts and lockstep", "4 prefill: final plan on the phase-3 prompts",
                                  "5 decode: lockstep"};
    int any = 0;
    for (int p = 3; p <= 5; p++) {
        const json_t *src = json_object_get(reports[p], "prompt_source"), *cls = json_object_get(reports[p], "classes");
        if (!src) continue;
        if (!any++)
            fprintf(f, "\n## Test prompts\n\nDecisive: the oracle's top-1 probability > %g (same top-1 required); "
                       "competitive: the rest (mutual top-5). A prompt or lockstep run counts in the class of most of "
                       "its positions.\n\n| phase | prompts | positions (decisive / competitive) | prompts | "
                       "lockstep steps | lockstep runs | divergences at |\n|---|---|---|---|---|---|---|\n",
                    json_number_value(json_object_get(cls, "decisive_prob")));
        const char *kind = json_string_value(json_object_get(src, "kind"));
        char source[600];
        if (kind && !strcmp(kind, "text"))
            snprintf(source, sizeof source, "text (the model's tokenizer, fingerprint %s)",
                     json_string_value(json_object_get(src, "fingerprint")));
        else snprintf(source, sizeof source, "random ids: %s", json_string_value(json_object_get(src, "why")));
        fprintf(f, "| %s | %s |", what[p - 3], source);
        const char *groups[5] = {"positions", "prompts", "lockstep_steps", "lockstep_runs", "lockstep_divergences"};
        for (int i = 0; i < 5; i++) {
            if (json_object_get(cls, groups[i]))
                fprintf(f, " %lld / %lld |", count(cls, groups[i], "decisive"), count(cls, groups[i], "competitive"));
            else fprintf(f, " - |");
        }
        fprintf(f, "\n");
    }
}

static void report_md(FILE *f, const ts_model *m, json_t *const reports[TS_N_PHASES], const json_t *man,
                      const json_t *diag) {
    static const char *names[TS_N_PHASES] = {"oracle", "kernels", "block", "model", "prefill", "decode",
                                             "finalize", "evaluate"};
    char feat[256];
    ts_config_features(&m->cfg, feat, sizeof feat);
    fprintf(f, "# Deployment report: %s\n\n", m->dir);
    fprintf(f, "- model: %s, %d layers, hidden %d, vocab %d, %.1f M parameters\n- features: %s\n", m->cfg.arch_name,
            m->cfg.n_layers, m->cfg.n_embd, m->cfg.n_vocab, (double)m->n_params / 1e6, feat);
    fprintf(f, "- target: cpu (%s; prefill GEMM: %s), 3 dispatches per layer\n", ts_cpu_variant_name(ts_cpu_best_variant()),
            ts_cpu_prefill_kernel_name(ts_cpu_best_variant()));
    /* the numbers every phase ran: the weights' type and what the KV cache held */
    fprintf(f, "- weights: %s%s; KV cache: %s\n", m->quantized >= 0 ? "quantized at load to " : "as stored",
            m->quantized >= 0 ? ts_dtype_name((ts_dtype)m->quantized) : "", m->kv_type == TS_DTYPE_F16 ? "F16" : "FP32");
    fprintf(f, "- tessera %s, created %s\n\n", ts_version(), json_string_value(json_object_get(man, "created")));
    fprintf(f, "## Gates\n\n| phase | metric | measured | threshold | result |\n|---|---|---|---|---|\n");
    for (int p = 0; p < TS_N_PHASES; p++) {
        if (!reports[p]) continue;
        size_t i;
        json_t *g;
        json_array_foreach(json_object_get(reports[p], "gates"), i, g) {
            const json_t *mv = json_object_get(g, "measured");
            char meas[32];
            if (json_is_number(mv)) snprintf(meas, sizeof meas, "%.9g", json_number_value(mv));
            else snprintf(meas, sizeof meas, "NaN/Inf");
            fprintf(f, "| %d %s | %s | %s | %s %g | %s |\n", p, names[p],
                    json_string_value(json_object_get(g, "metric")), meas,
                    json_string_value(json_object_get(g, "op")), json_number_value(json_object_get(g, "threshold")),
                    json_is_true(json_object_get(g, "pass")) ? "PASS" : "**FAIL**");
        }
        if (p == 0 && ts_phase_verdict_of(reports[0]) == TS_PHASE_NOT_COMPARED) {
            const ts_threshold *t1 = ts_threshold_find("phase0", "top1_frac"), *tp = ts_threshold_find("phase0", "pearson"),
                               *tr = ts_threshold_find("phase0", "rel_l2");
            fprintf(f, "| 0 %s | top1_frac, pearson, rel_l2 vs Hugging Face | no golden logits | >= %g, >= %g, <= %g | "
                       "**not compared** |\n", names[0], t1 ? t1->value : 1.0, tp ? tp->value : 0.99999,
                    tr ? tr->value : 1e-4);
        }
    }
    fprintf(f, "\nPhase verdicts: ");
    for (int p = 0, n = 0; p < TS_N_PHASES; p++) {
        if (!reports[p]) continue;
        ts_phase_verdict v = ts_phase_verdict_of(reports[p]);
        fprintf(f, "%s%d %s %s%s%s", n++ ? ", " : "", p, names[p], v == TS_PHASE_PASS ? "" : "**",
                ts_phase_verdict_name(v), v == TS_PHASE_PASS ? "" : "**");
    }
    fprintf(f, ".\n");
    if (reports[0] && ts_phase_verdict_of(reports[0]) == TS_PHASE_NOT_COMPARED)
        fprintf(f, "\n**Phase 0 not compared**: the oracle's logits were not compared with Hugging Face transformers "
                   "(no golden logits), so nothing vouches for the oracle every later gate is measured against. The "
                   "deployment runs, but its gates are not all passed. `tessera deploy MODEL --phases 0 --hf-python "
                   "PYTHON` (an interpreter with torch and transformers) makes the goldens and compares.\n");
    fprintf(f, "\nPhases not run: ");
    int any = 0;
    for (int p = 0; p < TS_N_PHASES; p++)
        if (!reports[p] && p < 6) fprintf(f, "%s%d %s", any++ ? ", " : "", p, names[p]);
    fprintf(f, "%s.\n", any ? "" : "none");
    prompts_md(f, reports);
    perf_md(f, reports[4], reports[5]);
    if (diag) ts_diagnosis_markdown(diag, f);
}

ts_status ts_manifest_write(const ts_model *m, const char *out_dir, json_t *const reports[TS_N_PHASES],
                            int threads, int forced, const json_t *diag, ts_error *err) {
    ts_status s = TS_OK;
    json_t *man = json_object(), *gates = json_object();
    char when[64];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    json_object_set_new(man, "tessera_version", json_string(ts_version()));
    json_object_set_new(man, "created", json_string(when));
    json_object_set_new(man, "model", identity(m, err, &s));
    json_object_set_new(man, "target", target_json(threads, reports[4], reports[5]));
    json_object_set_new(man, "thresholds", thresholds_json());
    int all = 1;
    json_t *not_compared = json_array();
    for (int p = 0; p < TS_N_PHASES; p++) {
        if (!reports[p]) continue;
        char key[16];
        snprintf(key, sizeof key, "phase%d", p);
        ts_phase_verdict v = ts_phase_verdict_of(reports[p]);
        all &= v == TS_PHASE_PASS; /* a gate that compared nothing is not a passed gate */
        if (v == TS_PHASE_NOT_COMPARED) json_array_append_new(not_compared, json_string(key));
        json_t *g = json_pack("{s:o, s:s, s:O}", "pass",
                              v == TS_PHASE_NOT_COMPARED ? json_null() : json_boolean(v == TS_PHASE_PASS), "verdict",
                              ts_phase_verdict_name(v), "gates", json_object_get(reports[p], "gates"));
        /* What the oracle checks of phases 3-5 ran on, beside their gates. */
        const char *keep[2] = {"prompt_source", "classes"};
        for (int i = 0; i < 2; i++)
            if (json_object_get(reports[p], keep[i])) json_object_set(g, keep[i], json_object_get(reports[p], keep[i]));
        json_object_set_new(gates, key, g);
    }
    json_object_set_new(man, "gates", gates);
    json_object_set_new(man, "all_gates_passed", json_boolean(all));
    json_object_set_new(man, "not_compared", not_compared);
    json_object_set_new(man, "forced", json_boolean(forced));
    json_object_set_new(man, "performance", performance_json(reports[4], reports[5]));
    char *mp = ts_path_join(out_dir, "manifest.json"), *rp = ts_path_join(out_dir, "report.md");
    if (!s && (!mp || json_dump_file(man, mp, JSON_INDENT(2)) != 0))
        s = ts_fail(err, TS_ERR_IO, "%s: cannot write manifest.json", out_dir);
    if (!s) {
        FILE *f = rp ? fopen(rp, "w") : NULL;
        if (!f) s = ts_fail(err, TS_ERR_IO, "%s: cannot write report.md", out_dir);
        else {
            report_md(f, m, reports, man, diag);
            if (fclose(f) != 0) s = ts_fail(err, TS_ERR_IO, "%s: cannot write report.md", out_dir);
        }
    }
    free(mp);
    free(rp);
    json_decref(man);
    return s;
}
