/* Phase 3 of a --quant deployment, second half: the kernels are gated against the oracle on the
 * quantized weights (exact dequantized values), which says nothing about what quantizing cost.
 * This measures that cost against the weights as stored, both on the oracle, on phase 3's own
 * prompts: where the stored model is decisive (top-1 probability >= phase3.decisive_prob) the
 * quantized one must keep its top-1; everywhere the stored top-1 must stay in the quantized
 * top-5. The thresholds differ for 8-bit and 4-bit weights (gates.c). All positions' top-1
 * agreement and the logits' rel_l2 are recorded, not gated. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "deploy/gates.h"
#include "deploy/phases.h"

ts_status ts_phase_quant_agreement(const ts_model *m, const ts_prompt_set *ps, const ts_phase_opts *o, json_t *rep,
                                   json_t *gates, int *pass, ts_error *err) {
    if (m->quantized < 0) return TS_OK;
    const char *tn = m->quantized == TS_DTYPE_Q8_0 ? "q8_0" : "q4_0";
    const ts_config *c = ts_model_config(m);
    int V = c->n_vocab;
    double pmin = ts_threshold_find("phase3", "decisive_prob")->value;
    ts_model *orig = NULL;
    ts_ref *rq = NULL, *ro = NULL;
    float *lq = malloc(sizeof(float) * TS_PHASE_PROMPT_MAX * (size_t)V);
    float *lo = malloc(sizeof(float) * TS_PHASE_PROMPT_MAX * (size_t)V);
    int32_t toks[TS_PHASE_PROMPT_MAX];
    char name[320];
    long positions = 0, decisive = 0, dec_kept = 0, top1 = 0, top5 = 0;
    double num = 0, den = 0;
    ts_status s = lq && lo ? TS_OK : ts_fail(err, TS_ERR_NOMEM, "phase 3: out of memory");
    if (!s) s = ts_model_open(m->dir, &orig, err);
    if (!s) s = ts_ref_new(m, TS_PHASE_PROMPT_MAX, &rq, err);
    if (!s) s = ts_ref_new(orig, TS_PHASE_PROMPT_MAX, &ro, err);
    if (!s) s = ts_ref_set_threads(rq, o->threads, err);
    if (!s) s = ts_ref_set_threads(ro, o->threads, err);
    for (int k = 0; k < TS_PHASE_PROMPTS && !s; k++) {
        int n = ts_phase_prompt_lens[k];
        ts_prompts_get(ps, o->seed, k, toks, n, name, sizeof name);
        ts_ref_reset(rq);
        ts_ref_reset(ro);
        if ((s = ts_ref_forward(rq, toks, n, lq, 1, NULL, err)) || (s = ts_ref_forward(ro, toks, n, lo, 1, NULL, err)))
            break;
        for (int i = 0; i < n; i++) {
            const float *a = lq + (size_t)i * (size_t)V, *b = lo + (size_t)i * (size_t)V;
            int want = ts_argmax(b, V), rank = ts_rank_of(a, V, want);
            int dec = ts_softmax_prob(b, V, want) >= pmin;
            positions++;
            decisive += dec;
            dec_kept += dec && rank == 0;
            top1 += rank == 0;
            top5 += rank < 5;
            for (int v = 0; v < V; v++) num += ((double)a[v] - b[v]) * ((double)a[v] - b[v]), den += (double)b[v] * b[v];
        }
    }
    ts_ref_free(rq);
    ts_ref_free(ro);
    ts_model_close(orig);
    free(lq), free(lo);
    if (s) return s;
    /* No decisive position (a random-weight model can have none): nothing to keep, a full score. */
    double f_dec = decisive ? (double)dec_kept / (double)decisive : 1.0, f_top5 = (double)top5 / (double)positions;
    double rel = den > 0 ? sqrt(num / den) : 0;
    FILE *out = o->out;
    if (out && m->quant_kept)
        fprintf(out, "  %d matrices kept as stored (rows not whole 32-element blocks)\n", m->quant_kept);
    if (out)
        fprintf(out, "  quantized (%s) vs the weights as stored, oracle on both: decisive top-1 kept %ld/%ld, stored top-1 "
                     "in the quantized top-5 %ld/%ld, top-1 equal %ld/%ld, logits rel_l2 %.3e\n",
                tn, dec_kept, decisive, top5, positions, top1, positions, rel);
    char metric[64];
    snprintf(metric, sizeof metric, "quant_%s_decisive_top1", tn);
    json_array_append_new(gates, ts_gate_row("phase3", metric, f_dec, out, pass));
    snprintf(metric, sizeof metric, "quant_%s_top5", tn);
    json_array_append_new(gates, ts_gate_row("phase3", metric, f_top5, out, pass));
    json_object_set_new(rep, "quantization",
                        json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:o}", "type", ts_dtype_name((ts_dtype)m->quantized),
                                  "matrices_kept_as_stored", m->quant_kept,
                                  "positions", (int)positions, "decisive", (int)decisive, "decisive_top1_kept",
                                  (int)dec_kept, "top1_equal", (int)top1, "top5", (int)top5, "logits_rel_l2",
                                  ts_json_number(rel)));
    return TS_OK;
}
