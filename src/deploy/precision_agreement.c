/* Phase 3, second half, for a deployment that chose a lower precision than the model's own:
 * the kernels are gated against the oracle on the same numbers (the exact dequantized weights,
 * the cache rounded to F16 as the targets store it), which says nothing about what that choice
 * cost. This measures the cost, oracle against oracle, on phase 3's own prompts:
 * - --quant: the quantized weights against the weights as stored (both with the deployment's
 *   KV cache), gates quant_<type>_*;
 * - --kv-cache f16: the F16 cache against the FP32 one (both on the deployment's weights),
 *   gates kv_f16_*.
 * Where the reference is decisive (top-1 probability >= phase3.decisive_prob) the deployed
 * oracle must keep its top-1; everywhere the reference top-1 must stay in the deployed top-5.
 * Thresholds per choice (gates.c). All positions' top-1 agreement and the logits' rel_l2 are
 * recorded, not gated. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "deploy/gates.h"
#include "deploy/phases.h"

typedef struct agreement {
    long positions, decisive, dec_kept, top1, top5;
    double rel_l2;
} agreement;

/* The oracle on m (as deployed) against the oracle on ref with its cache holding ref_kv. */
static ts_status measure(const ts_model *m, const ts_model *ref, int ref_kv, const ts_prompt_set *ps,
                         const ts_phase_opts *o, agreement *a, ts_error *err) {
    int V = ts_model_config(m)->n_vocab;
    double pmin = ts_threshold_find("phase3", "decisive_prob")->value, num = 0, den = 0;
    ts_ref *rd = NULL, *rr = NULL;
    float *ld = malloc(sizeof(float) * TS_PHASE_PROMPT_MAX * (size_t)V);
    float *lr = malloc(sizeof(float) * TS_PHASE_PROMPT_MAX * (size_t)V);
    int32_t toks[TS_PHASE_PROMPT_MAX];
    char name[320];
    memset(a, 0, sizeof *a);
    ts_status s = ld && lr ? TS_OK : ts_fail(err, TS_ERR_NOMEM, "phase 3: out of memory");
    if (!s) s = ts_ref_new(m, TS_PHASE_PROMPT_MAX, &rd, err);
    if (!s) s = ts_ref_new(ref, TS_PHASE_PROMPT_MAX, &rr, err);
    if (!s) ts_ref_set_kv_cache(rr, ref_kv);
    if (!s) s = ts_ref_set_threads(rd, o->threads, err);
    if (!s) s = ts_ref_set_threads(rr, o->threads, err);
    for (int k = 0; k < TS_PHASE_PROMPTS && !s; k++) {
        int n = ts_phase_prompt_lens[k];
        ts_prompts_get(ps, o->seed, k, toks, n, name, sizeof name);
        ts_ref_reset(rd);
        ts_ref_reset(rr);
        if ((s = ts_ref_forward(rd, toks, n, ld, 1, NULL, err)) || (s = ts_ref_forward(rr, toks, n, lr, 1, NULL, err)))
            break;
        for (int i = 0; i < n; i++) {
            const float *x = ld + (size_t)i * (size_t)V, *y = lr + (size_t)i * (size_t)V;
            int want = ts_argmax(y, V), rank = ts_rank_of(x, V, want);
            int dec = ts_softmax_prob(y, V, want) >= pmin;
            a->positions++;
            a->decisive += dec;
            a->dec_kept += dec && rank == 0;
            a->top1 += rank == 0;
            a->top5 += rank < 5;
            for (int v = 0; v < V; v++) num += ((double)x[v] - y[v]) * ((double)x[v] - y[v]), den += (double)y[v] * y[v];
        }
    }
    ts_ref_free(rd);
    ts_ref_free(rr);
    free(ld), free(lr);
    a->rel_l2 = den > 0 ? sqrt(num / den) : 0;
    return s;
}

/* Gate rows <prefix>_decisive_top1 and <prefix>_top5 and the record under key. No decisive
 * position (a random-weight model can have none): nothing to keep, a full score. */
static void record(const agreement *a, const char *prefix, const char *key, json_t *extra, json_t *rep,
                   json_t *gates, FILE *out, int *pass) {
    double f_dec = a->decisive ? (double)a->dec_kept / (double)a->decisive : 1.0;
    char metric[64];
    snprintf(metric, sizeof metric, "%s_decisive_top1", prefix);
    json_array_append_new(gates, ts_gate_row("phase3", metric, f_dec, out, pass));
    snprintf(metric, sizeof metric, "%s_top5", prefix);
    json_array_append_new(gates, ts_gate_row("phase3", metric, (double)a->top5 / (double)a->positions, out, pass));
    json_t *counts = json_pack("{s:i, s:i, s:i, s:i, s:i, s:o}", "positions", (int)a->positions, "decisive",
                               (int)a->decisive, "decisive_top1_kept", (int)a->dec_kept, "top1_equal", (int)a->top1,
                               "top5", (int)a->top5, "logits_rel_l2", ts_json_number(a->rel_l2));
    json_object_update(extra, counts);
    json_decref(counts);
    json_object_set_new(rep, key, extra);
}

ts_status ts_phase_precision_agreement(const ts_model *m, const ts_prompt_set *ps, const ts_phase_opts *o,
                                       json_t *rep, json_t *gates, int *pass, ts_error *err) {
    FILE *out = o->out;
    agreement a;
    ts_status s = TS_OK;
    if (m->quantized >= 0) {
        const char *tn = m->quantized == TS_DTYPE_Q8_0 ? "q8_0" : "q4_0";
        ts_model *orig = NULL;
        if (!(s = ts_model_open(m->dir, &orig, err))) {
            orig->kv_type = m->kv_type;
            s = measure(m, orig, m->kv_type, ps, o, &a, err);
        }
        ts_model_close(orig);
        if (s) return s;
        if (out && m->quant_kept)
            fprintf(out, "  %d matrices kept as stored (rows not whole 32-element blocks)\n", m->quant_kept);
        if (out)
            fprintf(out, "  quantized (%s) vs the weights as stored, oracle on both: decisive top-1 kept %ld/%ld, stored "
                         "top-1 in the quantized top-5 %ld/%ld, top-1 equal %ld/%ld, logits rel_l2 %.3e\n",
                    tn, a.dec_kept, a.decisive, a.top5, a.positions, a.top1, a.positions, a.rel_l2);
        char prefix[16];
        snprintf(prefix, sizeof prefix, "quant_%s", tn);
        record(&a, prefix, "quantization",
               json_pack("{s:s, s:i}", "type", ts_dtype_name((ts_dtype)m->quantized), "matrices_kept_as_stored",
                         m->quant_kept),
               rep, gates, out, pass);
    }
    if (m->kv_type == TS_DTYPE_F16) {
        if ((s = measure(m, m, TS_DTYPE_F32, ps, o, &a, err))) return s;
        if (out)
            fprintf(out, "  F16 KV cache vs FP32, oracle on both: decisive top-1 kept %ld/%ld, FP32 top-1 in the F16 "
                         "top-5 %ld/%ld, top-1 equal %ld/%ld, logits rel_l2 %.3e\n",
                    a.dec_kept, a.decisive, a.top5, a.positions, a.top1, a.positions, a.rel_l2);
        record(&a, "kv_f16", "kv_cache_agreement", json_pack("{s:s}", "type", "f16"), rep, gates, out, pass);
    }
    return TS_OK;
}
