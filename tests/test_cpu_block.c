/* Phase-2 style block gate at the real widths of all nine seed models: a one-layer synth
 * checkpoint of each (real hidden size, heads, kv heads, head_dim, ffn, bias, q/k norm, rope),
 * a 1024-token vocabulary, prefill of 48 tokens then 4 decode steps, cpu target vs oracle; and
 * the same on stories260K (intermediate size 172: K not a multiple of 16). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "deploy/gates.h"
#include "model/model.h"
#include "target/cpu/cpu_target.h"
#include "tharness.h"

#define S 48
#define GEN 4

static void check_dir(const char *preset, const char *dir) {
    ts_error err;
    ts_model *m;
    if (ts_model_open(dir, &m, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    const ts_config *c = ts_model_config(m);
    int V = c->n_vocab, H = c->n_embd, n = S + GEN;
    int32_t toks[S + GEN];
    for (int i = 0; i < n; i++) toks[i] = (int32_t)((i * 389 + 7) % V);
    size_t nh = (size_t)(c->n_layers + 1) * S * (size_t)H; /* the embeddings, then each layer's output */
    float *hr = malloc(sizeof(float) * nh), *hc = malloc(sizeof(float) * nh);
    float *lr = malloc(sizeof(float) * (size_t)n * V), *lc = malloc(sizeof(float) * (size_t)n * V);
    ts_ref *r = NULL;
    ts_cpu *cp = NULL;
    ts_cpu_opts o = {.n_threads = 2, .force_variant = -1};
    if (ts_ref_new(m, n, &r, &err) || ts_cpu_new(m, n, &o, &cp, &err)) {
        CHECK(0, "%s: %s", preset, err.msg);
        goto done;
    }
    CHECK(ts_ref_forward(r, toks, S, lr, 1, hr, &err) == TS_OK, "%s", err.msg);
    CHECK(ts_cpu_forward(cp, toks, S, lc, 1, hc, &err) == TS_OK, "%s", err.msg);
    for (int g = 0; g < GEN; g++) {
        CHECK(ts_ref_forward(r, toks + S + g, 1, lr + (size_t)(S + g) * V, 0, NULL, &err) == TS_OK, "%s", err.msg);
        CHECK(ts_cpu_forward(cp, toks + S + g, 1, lc + (size_t)(S + g) * V, 0, NULL, &err) == TS_OK, "%s", err.msg);
    }
    ts_metrics blk, lg;
    ts_metrics_compute(hc + (size_t)S * H, hr + (size_t)S * H, S, H, &blk); /* layer 0 output */
    ts_metrics_compute(lc, lr, n, V, &lg);
    const ts_threshold *tc = ts_threshold_find("phase2", "cosine"), *tr = ts_phase2_row_cosine(c->head_dim);
    int ok = ts_threshold_pass(tc, blk.cosine) && ts_threshold_pass(tr, blk.min_row_cosine) && lg.nonfinite == 0 &&
             ts_threshold_pass(tc, lg.cosine);
    printf("%-14s H=%-5d heads %2d/%-2d hd %-3d F=%-5d  block cosine %.7f (>= %g), min/position %.7f (>= %g); "
           "prefill+decode logits cosine %.7f  %s\n",
           preset, H, c->n_heads, c->n_kv_heads, c->head_dim, c->n_ff, blk.cosine, tc->value, blk.min_row_cosine,
           tr->value, lg.cosine, ok ? "ok" : "FAIL");
    CHECK(ok, "%s: block gate failed", preset);
done:
    ts_ref_free(r);
    ts_cpu_free(cp);
    free(hr), free(hc), free(lr), free(lc);
    ts_model_close(m);
}

static void check(const char *preset, const char *root) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/%s", root, preset);
    ts_error err;
    ts_synth_opts so = {5, 1024, 1, NULL, NULL};
    if (ts_synth_write(preset, dir, &so, &err)) {
        CHECK(0, "%s: %s", preset, err.msg);
        return;
    }
    check_dir(preset, dir);
    char *cmd = malloc(strlen(dir) + 16);
    sprintf(cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    free(cmd);
}

int main(void) {
    char root[1024];
    snprintf(root, sizeof root, "%s", th_tmpdir("cpu_block"));
    for (int i = 0; ts_synth_preset_name(i); i++)
        if (!strstr(ts_synth_preset_name(i), "-tiny")) check(ts_synth_preset_name(i), root);
    /* a real trained model whose intermediate size (172) is not a multiple of 16 */
    check_dir("stories260K", th_shared("models/stories260K.gguf"));
    return th_finish("test_cpu_block");
}
