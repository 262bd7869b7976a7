/* The cpu plan's switches and step API: every optimization phase 4-5 can turn off gives the
 * same answer as the full plan (bit-identical where only scheduling or copying changes); the
 * dispatch count per layer follows fusion; each step alone on the oracle's inputs passes the
 * phase-1 kernel gate at the shapes of the HF fixtures and tiny presets (bias, q/k norm,
 * GQA, F16 weights); KV truncation reruns decode exactly; tiles round-trip and bad ones are
 * refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "deploy/gates.h"
#include "model/model.h"
#include "target/cpu/cpu_target.h"
#include "target/cpu/gemm.h"
#include "target/ref/ref_steps.h"
#include "tharness.h"

#define NTOK 40

static void logits_with(const ts_model *m, unsigned disable, const int32_t *toks, float *out, long *disp,
                        int *dpl, ts_cpu_prof *prof, int *nprof) {
    ts_error err;
    ts_cpu *cp = NULL;
    ts_cpu_opts o = {.n_threads = 2, .force_variant = -1, .disable = disable};
    const ts_config *c = ts_model_config(m);
    CHECK(ts_cpu_new(m, NTOK + 4, &o, &cp, &err) == TS_OK, "%s", err.msg);
    if (!cp) return;
    long d0 = ts_cpu_dispatches(cp);
    CHECK(ts_cpu_forward(cp, toks, NTOK, out, 0, NULL, &err) == TS_OK, "%s", err.msg);
    *disp = ts_cpu_dispatches(cp) - d0;
    *dpl = ts_cpu_dispatches_per_layer(cp);
    *nprof = ts_cpu_profile(cp, prof, 16);
    /* then 3 decode steps, appended after the prefill logits */
    for (int i = 0; i < 3; i++)
        CHECK(ts_cpu_forward(cp, &toks[i], 1, out + (size_t)(i + 1) * c->n_vocab, 0, NULL, &err) == TS_OK, "%s",
              err.msg);
    ts_cpu_free(cp);
}

static void check_switches(const char *name, const ts_model *m) {
    const ts_config *c = ts_model_config(m);
    int V = c->n_vocab, L = c->n_layers;
    int32_t toks[NTOK];
    for (int i = 0; i < NTOK; i++) toks[i] = (int32_t)((i * 7919 + 13) % V);
    float *full = malloc(sizeof(float) * 4 * V), *got = malloc(sizeof(float) * 4 * V);
    ts_cpu_prof prof[16];
    int nprof, dpl;
    long disp;
    logits_with(m, 0, toks, full, &disp, &dpl, prof, &nprof);
    CHECK(dpl == 3 && disp == 3L * L + 1, "%s: full plan: %d per layer, %ld dispatches", name, dpl, disp);
    CHECK(nprof == 4, "%s: full plan profile has %d slots, expected D1 D2 D3 lm_head", name, nprof);
    /* The avx512bf16 _dp prefill GEMM rounds its input to BF16 while the GEMV keeps FP32-level
     * x, so an LM head over all rows differs from the last-token GEMV by that rounding (2^-9 per
     * element; 7.8e-4 measured); the FP32 kernels differ by summation order only. */
    double tol = ts_cpu_best_variant() == TS_CPU_AVX512BF16 && !ts_cpu_avx512_prefill_f32() ? 4e-3 : 1e-5;
    static const unsigned cases[] = {TS_OPT_FUSED, TS_OPT_TILED_ATTN, TS_OPT_GEMV, TS_OPT_ZERO_COPY,
                                     TS_OPT_LAST_LOGITS, TS_OPT_ALL};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        unsigned d = cases[k];
        logits_with(m, d, toks, got, &disp, &dpl, prof, &nprof);
        /* Fusion and copying change scheduling only: bit-identical. The attention and GEMV
         * switches pick other kernels, and an LM head over all rows runs the GEMM tile instead
         * of the GEMV: equal to rounding. */
        int exact = !(d & (TS_OPT_TILED_ATTN | TS_OPT_GEMV | TS_OPT_LAST_LOGITS));
        ts_metrics mt;
        ts_metrics_compute(got, full, 4, V, &mt);
        if (exact)
            CHECK(memcmp(got, full, sizeof(float) * 4 * V) == 0, "%s: without %s the logits differ (rel_l2 %.3e)",
                  name, d == TS_OPT_ALL ? "all" : ts_opt_name(d), mt.rel_l2);
        else
            CHECK(mt.rel_l2 <= tol && mt.nonfinite == 0, "%s: without %s rel_l2 %.3e (bound %g)", name,
                  d == TS_OPT_ALL ? "all" : ts_opt_name(d), mt.rel_l2, tol);
        int want_dpl = (d & TS_OPT_FUSED) ? TS_N_STEPS - (c->qk_norm ? 0 : 1) : 3;
        CHECK(dpl == want_dpl && disp == (long)want_dpl * L + 1, "%s: disable %#x: %d per layer, %ld dispatches", name,
              d, dpl, disp);
        if (d & TS_OPT_FUSED) CHECK(nprof == want_dpl + 1, "%s: unfused profile has %d slots", name, nprof);
    }
    free(full), free(got);
}

/* Each step alone: cpu vs oracle on identical inputs (the oracle's chain from embeddings). */
static void check_steps(const char *name, const ts_model *m, int layer) {
    const ts_config *c = ts_model_config(m);
    int S = 24, H = c->n_embd, Q = c->n_heads * c->head_dim, KV = c->n_kv_heads * c->head_dim, F = c->n_ff;
    size_t per = 2 * (size_t)H + 2 * (size_t)Q + 2 * (size_t)KV + (size_t)F, nf = per * S;
    float *a = calloc(nf, sizeof(float)), *b = calloc(nf, sizeof(float)), *mine = calloc(nf, sizeof(float));
    float *xl = malloc(sizeof(float) * (size_t)S * H);
    ts_step_state sa, sm;
    float *bufs[2] = {a, mine};
    ts_step_state *sts[2] = {&sa, &sm};
    for (int i = 0; i < 2; i++) {
        float *p = bufs[i];
        sts[i]->x = p, p += S * H;
        sts[i]->xn = p, p += S * H;
        sts[i]->q = p, p += S * Q;
        sts[i]->k = p, p += S * KV;
        sts[i]->v = p, p += S * KV;
        sts[i]->att = p, p += S * Q;
        sts[i]->h = p;
    }
    ts_error err;
    ts_ref *r = NULL;
    ts_cpu *cp = NULL;
    ts_cpu_opts o = {.n_threads = 2, .force_variant = -1};
    CHECK(ts_ref_new(m, S, &r, &err) == TS_OK, "%s", err.msg);
    CHECK(ts_cpu_new(m, S, &o, &cp, &err) == TS_OK, "%s", err.msg);
    for (int s = 0; s < S; s++)
        ts_dtype_to_f32(m->embed->dtype, m->embed->data, (size_t)((s * 31 + 7) % c->n_vocab) * H, (size_t)H, a + (size_t)s * H);
    memcpy(xl, a, sizeof(float) * (size_t)S * H);
    double worst = 0;
    for (int k = 0; k < TS_N_STEPS && r && cp; k++) {
        memcpy(b, a, sizeof(float) * nf); /* b: the oracle's state before step k */
        CHECK(ts_ref_step(r, layer, (ts_step)k, &sa, S, 0, &err) == TS_OK, "%s", err.msg);
        memcpy(mine, b, sizeof(float) * nf);
        CHECK(ts_cpu_step(cp, layer, (ts_step)k, &sm, S, 0, &err) == TS_OK, "%s", err.msg);
        ts_metrics mt;
        ts_metrics_compute(mine, a, 1, (int)nf, &mt); /* every buffer at once */
        worst = mt.rel_l2 > worst ? mt.rel_l2 : worst;
        CHECK(mt.rel_l2 <= ts_threshold_find("phase1", "rel_l2")->value && mt.nonfinite == 0,
              "%s layer %d step %s: rel_l2 %.3e against the oracle", name, layer, ts_step_name((ts_step)k), mt.rel_l2);
    }
    /* The oracle's step chain is exactly its layer. */
    if (r) {
        CHECK(ts_ref_layer(r, layer, xl, S, 0, &err) == TS_OK, "%s", err.msg);
        CHECK(memcmp(xl, sa.x, sizeof(float) * (size_t)S * H) == 0, "%s: ref steps != ref layer", name);
    }
    printf("  %-22s layer %d: every step alone, worst rel_l2 %.2e\n", name, layer, worst);
    ts_ref_free(r);
    ts_cpu_free(cp);
    free(a), free(b), free(mine), free(xl);
}

static void check_truncate_and_tiles(const ts_model *m) {
    const ts_config *c = ts_model_config(m);
    int V = c->n_vocab;
    ts_error err;
    ts_cpu *cp = NULL;
    ts_cpu_opts o = {.n_threads = 2, .force_variant = -1};
    CHECK(ts_cpu_new(m, 32, &o, &cp, &err) == TS_OK, "%s", err.msg);
    if (!cp) return;
    int32_t toks[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, t = 11;
    float *l1 = malloc(sizeof(float) * V), *l2 = malloc(sizeof(float) * V);
    CHECK(ts_cpu_forward(cp, toks, 10, l1, 0, NULL, &err) == TS_OK, "%s", err.msg);
    CHECK(ts_cpu_forward(cp, &t, 1, l1, 0, NULL, &err) == TS_OK, "%s", err.msg);
    ts_cpu_truncate(cp, 10);
    CHECK(ts_cpu_n_past(cp) == 10, "truncate: n_past %d", ts_cpu_n_past(cp));
    CHECK(ts_cpu_forward(cp, &t, 1, l2, 0, NULL, &err) == TS_OK, "%s", err.msg);
    CHECK(memcmp(l1, l2, sizeof(float) * V) == 0, "decode after truncation differs");
    int H = c->n_embd, F = c->n_ff;
    ts_cpu_tile_rec good[2] = {{3, F, H, 3, 4, 16, 1.0}, {1, H, F, 1, 1, 1, 2.0}}, got[8];
    CHECK(ts_cpu_tiles_set(cp, good, 2, &err) == TS_OK, "%s", err.msg);
    int n = ts_cpu_tiles_get(cp, got, 8);
    CHECK(n == 2 && got[0].ms == 3 && got[0].sb == 16 && got[1].nr == 1, "tiles round trip: %d", n);
    ts_cpu_tile_rec bad[4] = {{3, F + 1, H, 2, 4, 64, 0}, {3, F, H, 4, 4, 64, 0}, {3, F, H, 2, 3, 64, 0}, {0, F, H, 2, 4, 64, 0}};
    for (int i = 0; i < 4; i++) {
        CHECK(ts_cpu_tiles_set(cp, &bad[i], 1, &err) == TS_ERR_FORMAT, "bad tile %d accepted", i);
        CHECK(strstr(err.msg, "tile") != NULL, "message: %s", err.msg);
    }
    /* still correct after importing tiles */
    ts_cpu_reset(cp);
    CHECK(ts_cpu_forward(cp, toks, 10, l2, 0, NULL, &err) == TS_OK, "%s", err.msg);
    ts_cpu_fault f;
    CHECK(ts_cpu_fault_parse("gate_up:nan@3", &f, &err) == TS_OK && f.step == TS_STEP_GATE_UP && f.nan && f.layer == 3,
          "fault parse");
    CHECK(ts_cpu_fault_parse("rope", &f, &err) == TS_OK && f.step == TS_STEP_ROPE && !f.nan && f.layer == -1, "fault parse");
    CHECK(ts_cpu_fault_parse("bogus", &f, &err) == TS_ERR_ARG && strstr(err.msg, "gate_up"), "fault parse: %s", err.msg);
    CHECK(ts_cpu_fault_parse("down@x", &f, &err) == TS_ERR_ARG, "fault parse layer");
    CHECK(ts_cpu_fault_parse("down:last@2", &f, &err) == TS_OK && f.step == TS_STEP_DOWN && f.last && !f.nan &&
              f.layer == 2, "fault parse :last");
    CHECK(ts_cpu_fault_parse("down:last:nan", &f, &err) == TS_ERR_ARG, "fault parse: two kinds");
    /* ts_cpu_fault_apply: a `last` fault lands on the step's last column only, in every row,
     * and only for its step and layer; the sign-flip kind on every 16th column. */
    {
        float y[2][40];
        f = (ts_cpu_fault){TS_STEP_DOWN, 0, 2, 1}; /* down:last@2 */
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < 40; i++) y[r][i] = 1;
        ts_cpu_fault_apply(&f, TS_STEP_DOWN, 2, &y[0][0], 2, 40, 100, 40, 140); /* columns 100..139 of 140 */
        ts_cpu_fault_apply(&f, TS_STEP_DOWN, 1, &y[0][0], 2, 40, 100, 40, 140); /* another layer */
        ts_cpu_fault_apply(&f, TS_STEP_QKV, 2, &y[0][0], 2, 40, 100, 40, 140);  /* another step */
        int flipped = 0;
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < 40; i++) flipped += y[r][i] < 0;
        CHECK(flipped == 2 && y[0][39] < 0 && y[1][39] < 0, "last-column fault: %d flipped", flipped);
        ts_cpu_fault_apply(NULL, TS_STEP_DOWN, 2, &y[0][0], 2, 40, 100, 40, 140);
        ts_cpu_fault sign = {TS_STEP_DOWN, 0, -1, 0};
        ts_cpu_fault_apply(&sign, TS_STEP_DOWN, 7, &y[0][0], 1, 40, 0, 40, 40);
        CHECK(y[0][5] < 0 && y[0][21] < 0 && y[0][37] < 0 && y[0][6] > 0, "sign-flip fault");
    }
    free(l1), free(l2);
    ts_cpu_free(cp);
}

int main(void) {
    static const char *hf[] = {"llama_gqa_rope3", "llama_mha", "llama_untied_sharded", "qwen2_bias", "qwen3_qknorm", "llama_attn_bias"};
    /* CMakeLists.txt runs this test again with each AVX-512 prefill kernel forced: on a CPU
     * without the variant those runs would only repeat the plain one. */
    if (getenv("TESSERA_AVX512_PREFILL") && !ts_cpu_variant_supported(TS_CPU_AVX512BF16))
        th_skip(TH_ISA_PHRASE " avx512bf16: TESSERA_AVX512_PREFILL=%s not run", getenv("TESSERA_AVX512_PREFILL"));
    const char *tmp = th_tmpdir("cpu_plan");
    for (size_t i = 0; i < sizeof hf / sizeof hf[0] + 2; i++) {
        char dir[1200];
        const char *name;
        ts_error err;
        if (i < sizeof hf / sizeof hf[0]) {
            name = hf[i];
            snprintf(dir, sizeof dir, "%s/%s", th_fixture("hf"), name);
        } else {
            name = i == sizeof hf / sizeof hf[0] ? "qwen3-0.6b-tiny" : "llama-3.2-1b-tiny";
            snprintf(dir, sizeof dir, "%s/%s", tmp, name);
            if (ts_synth_write(name, dir, &(ts_synth_opts){5, 0, 0, NULL, NULL}, &err) != TS_OK) {
                CHECK(0, "%s", err.msg);
                continue;
            }
        }
        ts_model *m;
        if (ts_model_open(dir, &m, &err)) {
            CHECK(0, "%s: %s", name, err.msg);
            continue;
        }
        check_switches(name, m);
        check_steps(name, m, 0);
        check_steps(name, m, ts_model_config(m)->n_layers - 1);
        if (i == 0) check_truncate_and_tiles(m);
        ts_model_close(m);
    }
    return th_finish("test_cpu_plan");
}
