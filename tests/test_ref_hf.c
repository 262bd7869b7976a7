/* Phase-0 gate as a test: the ref target against transformers' fp32 logits and per-layer
 * hidden states on every HF fixture (tools/gen_hf_fixtures.py). Prints the measured values. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "deploy/gates.h"
#include "deploy/golden.h"
#include "tharness.h"

static const char *k_fixtures[] = {"llama_gqa_rope3", "llama_mha",   "llama_untied_sharded",
                                   "qwen2_bias",      "qwen3_qknorm", "llama_attn_bias"};

static void check_fixture(const char *name) {
    char dir[512], gpath[600];
    snprintf(dir, sizeof dir, "%s", th_fixture("hf"));
    snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/%s", name);
    snprintf(gpath, sizeof gpath, "%s/golden/golden.json", dir);
    ts_error err;
    ts_model *m = NULL;
    ts_golden g;
    ts_status s = ts_model_open(dir, &m, &err);
    CHECK(s == TS_OK, "%s: open: %s", name, err.msg);
    if (s) return;
    CHECK(ts_model_check_values(m, &err) == TS_OK, "%s: %s", name, err.msg);
    s = ts_golden_load(gpath, &g, &err);
    CHECK(s == TS_OK, "%s: golden: %s", name, err.msg);
    if (s) {
        ts_model_close(m);
        return;
    }
    int V = ts_model_n_vocab(m), L = ts_model_n_layers(m), H = ts_model_n_embd(m);
    const ts_threshold *t_top1 = ts_threshold_find("phase0", "top1_frac"),
                       *t_p = ts_threshold_find("phase0", "pearson"),
                       *t_rel = ts_threshold_find("phase0", "rel_l2");
    for (int i = 0; i < g.n_seqs; i++) {
        ts_golden_seq *q = &g.seqs[i];
        CHECK(q->n_vocab == V, "%s: golden vocab %d vs model %d", name, q->n_vocab, V);
        if (q->n_vocab != V) continue;
        float *logits = malloc(sizeof(float) * (size_t)q->n_tokens * V);
        float *hidden = malloc(sizeof(float) * (size_t)(L + 1) * q->n_tokens * H);
        ts_ref *r;
        s = ts_ref_new(m, q->n_tokens, &r, &err);
        CHECK(s == TS_OK, "%s", err.msg);
        if (!s) {
            s = ts_ref_forward(r, q->tokens, q->n_tokens, logits, 1, hidden, &err);
            CHECK(s == TS_OK, "%s", err.msg);
            ts_ref_free(r);
        }
        if (!s) {
            ts_metrics mt;
            ts_metrics_compute(logits, q->logits, q->n_tokens, V, &mt);
            printf("%-22s seq %d (%2d tok): top1 %d/%d  pearson %.9f  rel_l2 %.3e  max_abs %.3e\n",
                   name, i, q->n_tokens, mt.top1_match, mt.rows, mt.pearson, mt.rel_l2, mt.max_abs);
            CHECK(ts_threshold_pass(t_top1, ts_metric_value(&mt, "top1_frac")), "%s top1", name);
            CHECK(ts_threshold_pass(t_p, mt.pearson), "%s pearson %.9f", name, mt.pearson);
            CHECK(ts_threshold_pass(t_rel, mt.rel_l2), "%s rel_l2 %.3e", name, mt.rel_l2);
            CHECK(mt.nonfinite == 0, "%s nonfinite", name);
            if (q->hidden) {
                CHECK(q->n_states == L + 1 && q->hidden_size == H, "%s hidden dims", name);
                for (int l = 0; l <= L && q->n_states == L + 1; l++) {
                    size_t off = (size_t)l * q->n_tokens * H;
                    ts_metrics hm;
                    ts_metrics_compute(hidden + off, q->hidden + off, q->n_tokens, H, &hm);
                    CHECK(hm.rel_l2 <= 1e-4, "%s seq %d state %d rel_l2 %.3e", name, i, l,
                          hm.rel_l2);
                    if (l == L) printf("%-22s seq %d last hidden state rel_l2 %.3e\n", name, i, hm.rel_l2);
                }
            }
        }
        free(logits);
        free(hidden);
    }
    ts_golden_free(&g);
    ts_model_close(m);
}

/* Prefill in one call must equal prefill split into pieces plus decode steps through the KV
 * cache (same oracle, different call pattern). */
static void check_decode_matches_prefill(const char *name) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", th_fixture("hf"), name);
    ts_error err;
    ts_model *m;
    if (ts_model_open(dir, &m, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    int V = ts_model_n_vocab(m), n = 12;
    int32_t toks[12];
    for (int i = 0; i < n; i++) toks[i] = (int32_t)((i * 37 + 5) % V);
    float *all = malloc(sizeof(float) * (size_t)n * V), *step = malloc(sizeof(float) * (size_t)V);
    ts_ref *r;
    CHECK(ts_ref_new(m, n, &r, &err) == TS_OK, "%s", err.msg);
    CHECK(ts_ref_forward(r, toks, n, all, 1, NULL, &err) == TS_OK, "%s", err.msg);
    ts_ref_reset(r);
    CHECK(ts_ref_forward(r, toks, 5, NULL, 0, NULL, &err) == TS_OK, "%s", err.msg);
    double worst = 0;
    for (int i = 5; i < n; i++) {
        CHECK(ts_ref_forward(r, toks + i, 1, step, 0, NULL, &err) == TS_OK, "%s", err.msg);
        for (int v = 0; v < V; v++) {
            double d = fabs(step[v] - all[(size_t)i * V + v]);
            if (d > worst) worst = d;
        }
    }
    printf("%-22s decode vs prefill max_abs %.3e\n", name, worst);
    CHECK(worst <= 1e-5, "%s decode/prefill differ by %.3e", name, worst);
    /* Over capacity must be an error, not a write past the cache. */
    CHECK(ts_ref_forward(r, toks, 1, step, 0, NULL, &err) == TS_ERR_ARG, "capacity");
    ts_ref_free(r);
    free(all);
    free(step);
    ts_model_close(m);
}

int main(void) {
    for (size_t i = 0; i < sizeof k_fixtures / sizeof k_fixtures[0]; i++) {
        check_fixture(k_fixtures[i]);
        check_decode_matches_prefill(k_fixtures[i]);
    }
    return th_finish("test_ref_hf");
}
