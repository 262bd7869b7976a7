/* synth presets: full-size shapes give the published parameter counts (checked through the
 * real config reader, without writing gigabytes); every -tiny variant writes, opens, keeps
 * its family's features and runs the oracle without NaN; output is deterministic per seed;
 * an existing model is never overwritten. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/synth.h"
#include "tharness.h"

/* Parameter count from the config alone (tied head counted once), written independently of
 * the synth code. */
static uint64_t params_of(const ts_config *c) {
    uint64_t H = (uint64_t)c->n_embd, Q = (uint64_t)c->n_heads * c->head_dim,
             KV = (uint64_t)c->n_kv_heads * c->head_dim, F = (uint64_t)c->n_ff;
    uint64_t layer = H * Q + 2 * H * KV + Q * H + 3 * H * F + 2 * H;
    if (c->qkv_bias) layer += Q + 2 * KV;
    if (c->qk_norm) layer += 2 * (uint64_t)c->head_dim;
    return (uint64_t)c->n_vocab * H * (c->tied ? 1 : 2) + H + layer * (uint64_t)c->n_layers;
}

static void check_full_presets(void) {
    /* Published totals of the Hugging Face checkpoints (model cards / safetensors metadata). */
    static const struct {
        const char *name;
        uint64_t params;
        ts_arch arch;
    } k[] = {
        {"llama-3.2-1b", 1235814400ull, TS_ARCH_LLAMA}, {"llama-3.2-3b", 3212749824ull, TS_ARCH_LLAMA},
        {"smollm2-1.7b", 1711376384ull, TS_ARCH_LLAMA}, {"qwen2.5-0.5b", 494032768ull, TS_ARCH_QWEN2},
        {"qwen2.5-1.5b", 1543714304ull, TS_ARCH_QWEN2}, {"qwen2.5-3b", 3085938688ull, TS_ARCH_QWEN2},
        {"qwen3-0.6b", 596049920ull, TS_ARCH_QWEN3},    {"qwen3-1.7b", 1720574976ull, TS_ARCH_QWEN3},
        {"qwen3-4b", 4022468096ull, TS_ARCH_QWEN3},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        ts_config c;
        ts_error err;
        ts_status s = ts_synth_preset_config(k[i].name, 0, &c, &err);
        CHECK(s == TS_OK, "%s: %s", k[i].name, err.msg);
        if (s) continue;
        uint64_t n = params_of(&c);
        printf("%-14s %12llu parameters (published %llu)\n", k[i].name, (unsigned long long)n,
               (unsigned long long)k[i].params);
        CHECK(n == k[i].params, "%s: %llu parameters, expected %llu", k[i].name,
              (unsigned long long)n, (unsigned long long)k[i].params);
        CHECK(c.arch == k[i].arch && c.tied, "%s arch/tied", k[i].name);
    }
    ts_config c;
    ts_error err;
    CHECK(ts_synth_preset_config("llama-3.2-1b", 0, &c, &err) == TS_OK, "%s", err.msg);
    CHECK(c.rope_llama3 && c.rope_factor == 32 && c.rope_orig_max_pos == 8192 && c.n_eos == 3 &&
              c.eos_ids[0] == 128001 && c.bos_id == 128000,
          "llama-3.2-1b rope/eos");
    CHECK(ts_synth_preset_config("qwen3-0.6b", 0, &c, &err) == TS_OK && c.qk_norm &&
              c.head_dim * c.n_heads != c.n_embd,
          "qwen3-0.6b features");
    CHECK(ts_synth_preset_config("smollm2-1.7b", 0, &c, &err) == TS_OK && c.n_kv_heads == c.n_heads &&
              !c.rope_llama3,
          "smollm2 MHA");
    CHECK(ts_synth_preset_config("qwen2.5-0.5b", 0, &c, &err) == TS_OK && c.qkv_bias && !c.o_bias,
          "qwen2.5 bias");
    CHECK(ts_synth_preset_config("gpt-5", 0, &c, &err) == TS_ERR_ARG && strstr(err.msg, "gpt-5") &&
              strstr(err.msg, "qwen3-4b-tiny"),
          "unknown preset message: %s", err.msg);
}

static int files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int eq = fa && fb;
    while (eq) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) eq = 0;
        if (x == EOF || y == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

static void check_tiny_presets(void) {
    const char *root = th_tmpdir("synth");
    char base[1024];
    snprintf(base, sizeof base, "%s", root);
    for (int i = 0; ts_synth_preset_name(i); i++) {
        const char *name = ts_synth_preset_name(i);
        if (!strstr(name, "-tiny")) continue;
        char dir[1200], full[64];
        snprintf(dir, sizeof dir, "%s/%s", base, name);
        ts_error err;
        ts_status s = ts_synth_write(name, dir, &(ts_synth_opts){7, 0, 0, NULL, NULL}, &err);
        CHECK(s == TS_OK, "%s: %s", name, err.msg);
        if (s) continue;
        ts_model *m;
        s = ts_model_open(dir, &m, &err);
        CHECK(s == TS_OK, "%s: open: %s", name, err.msg);
        if (s) continue;
        /* Same family features as the full-size preset. */
        snprintf(full, sizeof full, "%.*s", (int)(strlen(name) - 5), name);
        ts_config fc;
        const ts_config *c = ts_model_config(m);
        CHECK(ts_synth_preset_config(full, 0, &fc, &err) == TS_OK, "%s", err.msg);
        CHECK(c->arch == fc.arch && c->qkv_bias == fc.qkv_bias && c->qk_norm == fc.qk_norm &&
                  c->rope_llama3 == fc.rope_llama3 && (c->n_kv_heads == c->n_heads) == (fc.n_kv_heads == fc.n_heads) &&
                  (c->head_dim * c->n_heads == c->n_embd) == (fc.head_dim * fc.n_heads == fc.n_embd),
              "%s features differ from %s", name, full);
        CHECK(ts_model_check_values(m, &err) == TS_OK, "%s: %s", name, err.msg);
        /* Logits must be finite and spread out (not degenerate). */
        int V = ts_model_n_vocab(m);
        int32_t toks[6] = {1, 17, 300, 5, 4000 % V, 2};
        float *lg = malloc(sizeof(float) * 6 * (size_t)V);
        ts_ref *r;
        CHECK(ts_ref_new(m, 6, &r, &err) == TS_OK, "%s", err.msg);
        CHECK(ts_ref_forward(r, toks, 6, lg, 1, NULL, &err) == TS_OK, "%s", err.msg);
        double sum = 0, sq = 0;
        int bad = 0;
        for (size_t k = 0; k < 6 * (size_t)V; k++) {
            bad += !isfinite(lg[k]);
            sum += lg[k];
            sq += (double)lg[k] * lg[k];
        }
        double sd = sqrt(sq / (6.0 * V) - (sum / (6.0 * V)) * (sum / (6.0 * V)));
        printf("%-20s logits std %.3f\n", name, sd);
        CHECK(bad == 0 && sd > 0.5 && sd < 20, "%s: logits std %.3f, %d non-finite", name, sd, bad);
        free(lg);
        ts_ref_free(r);
        ts_model_close(m);
    }
    /* Deterministic per seed, different across seeds, and no overwriting. */
    char a[1200], b[1200], c[1200], fa[1300], fb[1300], fc[1300];
    snprintf(a, sizeof a, "%s/det_a", base);
    snprintf(b, sizeof b, "%s/det_b", base);
    snprintf(c, sizeof c, "%s/det_c", base);
    ts_error err;
    CHECK(ts_synth_write("qwen3-0.6b-tiny", a, &(ts_synth_opts){42, 0, 0, NULL, NULL}, &err) == TS_OK, "%s", err.msg);
    CHECK(ts_synth_write("qwen3-0.6b-tiny", b, &(ts_synth_opts){42, 0, 0, NULL, NULL}, &err) == TS_OK, "%s", err.msg);
    CHECK(ts_synth_write("qwen3-0.6b-tiny", c, &(ts_synth_opts){43, 0, 0, NULL, NULL}, &err) == TS_OK, "%s", err.msg);
    snprintf(fa, sizeof fa, "%s/model.safetensors", a);
    snprintf(fb, sizeof fb, "%s/model.safetensors", b);
    snprintf(fc, sizeof fc, "%s/model.safetensors", c);
    CHECK(files_equal(fa, fb), "same seed must give identical bytes");
    CHECK(!files_equal(fa, fc), "different seeds must differ");
    CHECK(ts_synth_write("qwen3-0.6b-tiny", a, &(ts_synth_opts){1, 0, 0, NULL, NULL}, &err) == TS_ERR_IO && strstr(err.msg, "refusing"),
          "overwrite must be refused: %s", err.msg);
    CHECK(files_equal(fa, fb), "refused overwrite left the model intact");
    /* --vocab override, e.g. to pair a tiny model with a real tokenizer. */
    snprintf(c, sizeof c, "%s/vocab", base);
    ts_model *m;
    CHECK(ts_synth_write("llama-3.2-1b-tiny", c, &(ts_synth_opts){0, 128256, 0, NULL, NULL}, &err) == TS_OK, "%s", err.msg);
    CHECK(ts_model_open(c, &m, &err) == TS_OK, "%s", err.msg);
    if (m) {
        CHECK(ts_model_n_vocab(m) == 128256 && ts_model_config(m)->bos_id == 128000, "vocab override");
        ts_model_close(m);
    }
}

int main(void) {
    check_full_presets();
    check_tiny_presets();
    return th_finish("test_synth");
}
