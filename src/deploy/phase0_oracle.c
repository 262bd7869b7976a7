/* Phase 0 as DESIGN.md defines it. Without golden logits the phase still loads, validates and
 * runs the oracle (no NaN/Inf anywhere, which still gates), but its verdict is "not compared":
 * an oracle never checked against transformers is not a passed gate. With --hf-python the
 * goldens are made for this checkpoint on the very prompts phase 0 runs (hf_golden.h). */
#include "deploy/phase0.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "deploy/gates.h"
#include "deploy/golden.h"
#include "deploy/hf_golden.h"
#include "io/mmap.h"
#include "model/model.h"
#include "core/clock.h"

enum { N_CANON = 3, CANON_MAX = 32 };

/* Canonical inputs when no golden file is given, and the prompts --hf-python sends to
 * transformers: BOS alone, then two fixed pseudo-random sequences (8 and 32 tokens) over the
 * whole vocabulary. tools/hf_golden.py mirrors this (canonical_prompts) for standalone use. */
static int canonical_seq(const ts_config *c, int k, int32_t *toks) {
    static const int lens[] = {1, 8, 32};
    uint64_t s = 0x7e55e7a0ull + (uint64_t)k;
    for (int i = 0; i < lens[k]; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((s >> 33) % (uint64_t)c->n_vocab);
    }
    if (c->bos_id >= 0) toks[0] = c->bos_id;
    return lens[k];
}

ts_status ts_phase0_run(const char *dir, const ts_phase0_opts *o, json_t **report, ts_error *err) {
    *report = NULL;
    FILE *out = o->out;
    double t0 = ts_now_s() * 1e3;
    ts_model *m;
    ts_status s = ts_model_open(dir, &m, err);
    if (s) return s;
    double t_open = ts_now_s() * 1e3 - t0;
    const ts_config *c = ts_model_config(m);
    char feat[256];
    ts_config_features(c, feat, sizeof feat);
    if (out)
        fprintf(out, "phase 0 (oracle): %s\n  %s, %d layers, hidden %d, ffn %d, vocab %d\n  %s\n"
                     "  %d tensors, %.4g M parameters, opened in %.1f ms\n",
                dir, c->arch_name, c->n_layers, c->n_embd, c->n_ff, c->n_vocab, feat,
                m->store.n_tensors, (double)m->n_params / 1e6, t_open);
    t0 = ts_now_s() * 1e3;
    s = ts_model_check_values(m, err);
    double t_check = ts_now_s() * 1e3 - t0;
    if (s) {
        ts_model_close(m);
        return s;
    }
    if (out) fprintf(out, "  every weight finite (scanned in %.1f ms)\n", t_check);

    int32_t canon[N_CANON][CANON_MAX];
    int canon_len[N_CANON];
    const int32_t *canon_p[N_CANON];
    for (int k = 0; k < N_CANON; k++) canon_len[k] = canonical_seq(c, k, canon[k]), canon_p[k] = canon[k];
    char *auto_golden = ts_path_join(dir, "golden/golden.json"), *gen_dir = NULL, *gen_golden = NULL, *script = NULL;
    const char *gpath = o->golden ? o->golden
                                  : (auto_golden && ts_file_exists(auto_golden) ? auto_golden : NULL);
    const char *source = o->golden ? "--golden" : gpath ? "model directory (golden/golden.json)" : NULL;
    ts_golden g = {0};
    json_t *rep = json_object(), *seqs = json_array(), *gates = json_array();
    json_object_set_new(rep, "phase", json_integer(0));
    json_object_set_new(rep, "model", json_string(dir));
    json_object_set_new(rep, "architecture", json_string(c->arch_name));
    json_object_set_new(rep, "features", json_string(feat));
    json_object_set_new(rep, "n_params", json_integer((json_int_t)m->n_params));
    json_object_set_new(rep, "open_ms", json_real(t_open));
    json_object_set_new(rep, "value_scan_ms", json_real(t_check));
    if (o->hf_python) {
        if (o->golden || !o->deploy_dir) {
            s = ts_fail(err, TS_ERR_ARG, "phase 0: --hf-python %s", o->golden ? "and --golden exclude each other"
                                                                               : "needs the deployment directory");
            goto done;
        }
        /* Generated goldens live in the deployment, never in the user's model directory. */
        gen_dir = ts_path_join(o->deploy_dir, "golden");
        gen_golden = gen_dir ? ts_path_join(gen_dir, "golden.json") : NULL;
        if (!gen_golden) {
            s = ts_fail(err, TS_ERR_NOMEM, "out of memory");
            goto done;
        }
        ts_hf_golden_opts ho = {o->hf_python, o->hf_script, out, o->threads};
        double tg = ts_now_s();
        if ((s = ts_hf_golden_generate(dir, gen_dir, canon_p, canon_len, N_CANON, &ho, &script, err))) {
            ts_error_prefix(err, "phase 0: ");
            goto done;
        }
        json_object_set_new(rep, "hf_python", json_string(o->hf_python));
        json_object_set_new(rep, "hf_script", json_string(script));
        json_object_set_new(rep, "hf_golden_s", json_real(ts_now_s() - tg));
        gpath = gen_golden;
        source = "--hf-python";
    }
    json_object_set_new(rep, "golden", gpath ? json_string(gpath) : json_null());
    json_object_set_new(rep, "golden_source", source ? json_string(source) : json_null());
    if (gpath && (s = ts_golden_load(gpath, &g, err))) goto done;
    if (gpath) {
        json_object_set_new(rep, "golden_generator", json_string(g.generator));
        if (g.transformers_version[0])
            json_object_set_new(rep, "transformers_version", json_string(g.transformers_version));
        if (out)
            fprintf(out, "  golden: %s (from %s; %s%s%s)\n", gpath, source, g.generator,
                    g.transformers_version[0] ? ", transformers " : "", g.transformers_version);
    }
    /* The generated golden must hold exactly the prompts phase 0 handed over. */
    for (int k = 0; o->hf_python && k < N_CANON; k++)
        if (g.n_seqs != N_CANON || g.seqs[k].n_tokens != canon_len[k] ||
            memcmp(g.seqs[k].tokens, canon[k], sizeof(int32_t) * (size_t)canon_len[k])) {
            s = ts_fail(err, TS_ERR_FORMAT, "%s: sequence %d is not the prompt phase 0 wrote to %s/hf_prompts.json",
                        gpath, g.n_seqs != N_CANON ? g.n_seqs : k, gen_dir);
            goto done;
        }

    int n_seqs = gpath ? g.n_seqs : N_CANON, V = c->n_vocab, L = c->n_layers, H = c->n_embd;
    double worst_top1 = 1, worst_p = 1, worst_rel = 0, nonfinite = 0, t_fwd = 0;
    int all_pass = 1;
    for (int k = 0; k < n_seqs && !s; k++) {
        const int32_t *toks = gpath ? g.seqs[k].tokens : canon[k];
        int n = gpath ? g.seqs[k].n_tokens : canon_len[k];
        if (gpath && g.seqs[k].n_vocab != V) {
            s = ts_fail(err, TS_ERR_SHAPE, "%s: sequence %d has logits over %d tokens, model vocab is %d",
                        gpath, k, g.seqs[k].n_vocab, V);
            break;
        }
        float *logits = malloc(sizeof(float) * (size_t)n * V);
        float *hidden = malloc(sizeof(float) * (size_t)(L + 1) * n * H);
        ts_ref *r = NULL;
        if (!logits || !hidden) s = ts_fail(err, TS_ERR_NOMEM, "out of memory");
        else if (!(s = ts_ref_new(m, n, &r, err)) && !(s = ts_ref_set_threads(r, o->threads, err))) {
            double tf = ts_now_s() * 1e3;
            s = ts_ref_forward(r, toks, n, logits, 1, hidden, err);
            t_fwd += ts_now_s() * 1e3 - tf;
        }
        ts_ref_free(r);
        if (!s) {
            json_t *js = json_object();
            int64_t bad = 0;
            for (size_t i = 0; i < (size_t)(L + 1) * n * H; i++) bad += !isfinite(hidden[i]);
            for (size_t i = 0; i < (size_t)n * V; i++) bad += !isfinite(logits[i]);
            nonfinite += (double)bad;
            json_object_set_new(js, "n_tokens", json_integer(n));
            json_object_set_new(js, "nonfinite", json_integer(bad));
            if (gpath) {
                ts_metrics mt;
                ts_metrics_compute(logits, g.seqs[k].logits, n, V, &mt);
                double top1 = ts_metric_value(&mt, "top1_frac");
                worst_top1 = ts_worst_min(worst_top1, top1);
                worst_p = ts_worst_min(worst_p, mt.pearson);
                worst_rel = ts_worst_max(worst_rel, mt.rel_l2);
                json_object_set_new(js, "top1_match", json_integer(mt.top1_match));
                json_object_set_new(js, "pearson", (json_t *)ts_json_number(mt.pearson));
                json_object_set_new(js, "rel_l2", (json_t *)ts_json_number(mt.rel_l2));
                json_object_set_new(js, "max_abs", (json_t *)ts_json_number(mt.max_abs));
                if (out)
                    fprintf(out, "  seq %d: %3d tokens  top-1 %d/%d  pearson %.9f  rel_l2 %.3e  max_abs %.3e\n",
                            k, n, mt.top1_match, n, mt.pearson, mt.rel_l2, mt.max_abs);
                if (g.seqs[k].hidden && g.seqs[k].n_states == L + 1 && g.seqs[k].hidden_size == H) {
                    json_t *layers = json_array();
                    double wl = 0;
                    for (int l = 0; l <= L; l++) {
                        ts_metrics hm;
                        size_t off = (size_t)l * n * H;
                        ts_metrics_compute(hidden + off, g.seqs[k].hidden + off, n, H, &hm);
                        json_array_append_new(layers, (json_t *)ts_json_number(hm.rel_l2));
                        wl = fmax(wl, hm.rel_l2);
                    }
                    json_object_set_new(js, "hidden_rel_l2", layers);
                    if (out) fprintf(out, "         per-layer hidden states: worst rel_l2 %.3e (informational)\n", wl);
                }
            } else if (out) {
                fprintf(out, "  seq %d: %3d tokens  oracle ran, %lld non-finite values\n", k, n,
                        (long long)bad);
            }
            json_array_append_new(seqs, js);
        }
        free(logits);
        free(hidden);
    }
    if (s) goto done;
    json_object_set_new(rep, "forward_ms", json_real(t_fwd));
    if (out) fprintf(out, "  oracle forward: %.1f ms in all\n  gate (measured, threshold):\n", t_fwd);
    json_array_append_new(gates, (json_t *)ts_gate_row("phase0", "nonfinite", nonfinite, out, &all_pass));
    if (gpath) {
        json_array_append_new(gates, (json_t *)ts_gate_row("phase0", "top1_frac", worst_top1, out, &all_pass));
        json_array_append_new(gates, (json_t *)ts_gate_row("phase0", "pearson", worst_p, out, &all_pass));
        json_array_append_new(gates, (json_t *)ts_gate_row("phase0", "rel_l2", worst_rel, out, &all_pass));
    } else if (out) {
        fprintf(out, "  no Hugging Face golden logits: the oracle was NOT compared with transformers\n"
                     "  (--hf-python PYTHON makes them with tools/hf_golden.py; or --golden FILE, MODEL/golden/golden.json)\n");
    }
    /* Without goldens nothing vouches for the oracle: not a failure, and not a pass either. */
    const char *verdict = !all_pass ? "FAIL" : gpath ? "PASS" : "not compared";
    json_object_set_new(rep, "hf_compared", json_boolean(gpath != NULL));
    json_object_set_new(rep, "verdict", json_string(verdict));
    json_object_set_new(rep, "pass", !all_pass ? json_false() : gpath ? json_true() : json_null());
    if (out) fprintf(out, "phase 0: %s\n", verdict);
    if (!all_pass)
        s = ts_fail(err, TS_ERR_GATE, "%s: phase 0 gate failed (see the table above)", dir);
done:
    json_object_set_new(rep, "sequences", seqs);
    json_object_set_new(rep, "gates", gates);
    if (!s || s == TS_ERR_GATE) *report = rep;
    else json_decref(rep);
    ts_golden_free(&g);
    free(auto_golden);
    free(gen_dir);
    free(gen_golden);
    free(script);
    ts_model_close(m);
    return s;
}
