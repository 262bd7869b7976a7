/* `tessera synth`: deterministic random-weight checkpoints in HF layout with the exact shapes
 * of the nine seed models (and -tiny variants with the same features in a few MB). Every
 * tensor has its own PRNG stream seeded from (seed, tensor name), so a checkpoint is
 * byte-identical for a given seed whatever order tensors are written in.
 *
 * Statistics imitate a trained model enough that logits are not degenerate: norm weights
 * near 1, projections with std 1/sqrt(fan_in) (output projections scaled down by
 * 1/sqrt(2 * layers) so the residual stream grows slowly), embeddings with std 3/sqrt(hidden)
 * so that tied-head logits have a spread of a few units. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "io/dtype.h"
#include "io/mmap.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/synth.h"

typedef struct preset {
    const char *name;
    ts_arch arch;
    int hidden, ff, layers, heads, kv, head_dim, vocab, max_pos;
    double theta, eps;
    int llama3; /* rope_scaling llama3, factor 32 / 1 / 4 / 8192 as in Llama-3.2 */
    int bos, eos[3], n_eos;
} preset;

/* Shapes from the published config.json of each model. */
static const preset k_presets[] = {
    {"llama-3.2-1b", TS_ARCH_LLAMA, 2048, 8192, 16, 32, 8, 64, 128256, 131072, 500000, 1e-5, 1, 128000, {128001, 128008, 128009}, 3},
    {"llama-3.2-3b", TS_ARCH_LLAMA, 3072, 8192, 28, 24, 8, 128, 128256, 131072, 500000, 1e-5, 1, 128000, {128001, 128008, 128009}, 3},
    {"smollm2-1.7b", TS_ARCH_LLAMA, 2048, 8192, 24, 32, 32, 64, 49152, 8192, 130000, 1e-5, 0, 1, {2}, 1},
    {"qwen2.5-0.5b", TS_ARCH_QWEN2, 896, 4864, 24, 14, 2, 64, 151936, 32768, 1000000, 1e-6, 0, 151643, {151645}, 1},
    {"qwen2.5-1.5b", TS_ARCH_QWEN2, 1536, 8960, 28, 12, 2, 128, 151936, 32768, 1000000, 1e-6, 0, 151643, {151645}, 1},
    {"qwen2.5-3b", TS_ARCH_QWEN2, 2048, 11008, 36, 16, 2, 128, 151936, 32768, 1000000, 1e-6, 0, 151643, {151645}, 1},
    {"qwen3-0.6b", TS_ARCH_QWEN3, 1024, 3072, 28, 16, 8, 128, 151936, 40960, 1000000, 1e-6, 0, 151643, {151645}, 1},
    {"qwen3-1.7b", TS_ARCH_QWEN3, 2048, 6144, 28, 16, 8, 128, 151936, 40960, 1000000, 1e-6, 0, 151643, {151645}, 1},
    {"qwen3-4b", TS_ARCH_QWEN3, 2560, 9728, 36, 32, 8, 128, 151936, 40960, 1000000, 1e-6, 0, 151643, {151645}, 1},
};
#define N_PRESETS ((int)(sizeof k_presets / sizeof k_presets[0]))

/* -tiny variants: same architecture and the same features (GQA ratio or MHA, head_dim equal
 * to or different from hidden/heads, bias, q/k norm, rope scaling), a few MB in all. */
static const struct {
    int hidden, ff, heads, kv, head_dim;
} k_tiny[N_PRESETS] = {
    {128, 384, 8, 2, 16},  /* llama-3.2-1b: GQA 4:1, head_dim = hidden/heads */
    {96, 256, 6, 2, 16},   /* llama-3.2-3b: GQA 3:1 */
    {128, 384, 8, 8, 16},  /* smollm2-1.7b: MHA */
    {112, 304, 7, 1, 16},  /* qwen2.5-0.5b: GQA 7:1, qkv bias */
    {96, 320, 6, 1, 16},   /* qwen2.5-1.5b: GQA 6:1 */
    {128, 352, 8, 1, 16},  /* qwen2.5-3b: GQA 8:1 */
    {64, 192, 4, 2, 32},   /* qwen3-0.6b: heads*head_dim 128 != hidden 64, q/k norm */
    {128, 384, 4, 2, 32},  /* qwen3-1.7b: heads*head_dim == hidden */
    {96, 288, 8, 2, 16},   /* qwen3-4b: heads*head_dim 128 != hidden 96 */
};
#define TINY_LAYERS 4
#define TINY_VOCAB 4096

const char *ts_synth_preset_name(int i) {
    static char tiny[N_PRESETS][40];
    if (i < 0 || i >= 2 * N_PRESETS) return NULL;
    if (i < N_PRESETS) return k_presets[i].name;
    snprintf(tiny[i - N_PRESETS], sizeof tiny[0], "%s-tiny", k_presets[i - N_PRESETS].name);
    return tiny[i - N_PRESETS];
}

static int find_preset(const char *name, preset *out) {
    for (int i = 0; i < 2 * N_PRESETS; i++) {
        if (strcmp(name, ts_synth_preset_name(i)) != 0) continue;
        *out = k_presets[i % N_PRESETS];
        if (i >= N_PRESETS) {
            int j = i - N_PRESETS;
            out->hidden = k_tiny[j].hidden;
            out->ff = k_tiny[j].ff;
            out->heads = k_tiny[j].heads;
            out->kv = k_tiny[j].kv;
            out->head_dim = k_tiny[j].head_dim;
            out->layers = TINY_LAYERS;
            out->vocab = TINY_VOCAB;
        }
        return 1;
    }
    return 0;
}

/* ---- deterministic streams ---- */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t name_seed(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

/* Approximately standard normal: the sum of four 16-bit uniforms (Irwin-Hall), rescaled.
 * Tails are bounded at +-3.46 sigma, which suits weights (no wild outliers) and is cheap
 * enough to fill 4B parameters in seconds. */
static float normal01(uint64_t *s) {
    uint64_t r = splitmix64(s);
    double sum = (double)(r & 0xffff) + (double)((r >> 16) & 0xffff) + (double)((r >> 32) & 0xffff) +
                 (double)(r >> 48);
    const double mean = 4 * 32767.5, sd = 65536.0 * 0.5773502691896258; /* sqrt(4/12) */
    return (float)((sum - mean) / sd);
}

typedef struct gen_tensor {
    char name[96];
    int ndim;
    int64_t shape[2];
    float mean, std;
} gen_tensor;

static void add(gen_tensor *t, int *n, const char *name, int64_t d0, int64_t d1, float mean,
                float std) {
    gen_tensor *g = &t[(*n)++];
    snprintf(g->name, sizeof g->name, "%s", name);
    g->ndim = d1 ? 2 : 1;
    g->shape[0] = d0;
    g->shape[1] = d1;
    g->mean = mean;
    g->std = std;
}

static int plan_tensors(const preset *p, gen_tensor *t) {
    int n = 0, H = p->hidden, Q = p->heads * p->head_dim, KV = p->kv * p->head_dim, F = p->ff;
    float in_h = 1.0f / sqrtf((float)H), out_scale = 1.0f / sqrtf(2.0f * p->layers);
    const float norm_sd = 0.05f, bias_sd = 0.1f;
    add(t, &n, "model.embed_tokens.weight", p->vocab, H, 0, 3.0f * in_h);
    for (int l = 0; l < p->layers; l++) {
        char b[96];
#define L(suffix, d0, d1, mean, sd)                                                                \
    do {                                                                                           \
        snprintf(b, sizeof b, "model.layers.%d.%s", l, suffix);                                    \
        add(t, &n, b, d0, d1, mean, sd);                                                           \
    } while (0)
        L("input_layernorm.weight", H, 0, 1, norm_sd);
        L("self_attn.q_proj.weight", Q, H, 0, in_h);
        L("self_attn.k_proj.weight", KV, H, 0, in_h);
        L("self_attn.v_proj.weight", KV, H, 0, in_h);
        if (p->arch == TS_ARCH_QWEN2) {
            L("self_attn.q_proj.bias", Q, 0, 0, bias_sd);
            L("self_attn.k_proj.bias", KV, 0, 0, bias_sd);
            L("self_attn.v_proj.bias", KV, 0, 0, bias_sd);
        }
        if (p->arch == TS_ARCH_QWEN3) {
            L("self_attn.q_norm.weight", p->head_dim, 0, 1, norm_sd);
            L("self_attn.k_norm.weight", p->head_dim, 0, 1, norm_sd);
        }
        L("self_attn.o_proj.weight", H, Q, 0, out_scale / sqrtf((float)Q));
        L("post_attention_layernorm.weight", H, 0, 1, norm_sd);
        L("mlp.gate_proj.weight", F, H, 0, in_h);
        L("mlp.up_proj.weight", F, H, 0, in_h);
        L("mlp.down_proj.weight", H, F, 0, out_scale / sqrtf((float)F));
#undef L
    }
    add(t, &n, "model.norm.weight", H, 0, 1, norm_sd);
    return n; /* every preset ties its embeddings: no lm_head.weight */
}

static json_t *config_json(const preset *p, uint64_t seed, const char *name) {
    static const char *model_type[] = {"llama", "qwen2", "qwen3"}, *cls[] = {
        "LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"};
    json_t *c = json_object();
    json_object_set_new(c, "architectures", json_pack("[s]", cls[p->arch]));
    json_object_set_new(c, "model_type", json_string(model_type[p->arch]));
    json_object_set_new(c, "hidden_size", json_integer(p->hidden));
    json_object_set_new(c, "intermediate_size", json_integer(p->ff));
    json_object_set_new(c, "num_hidden_layers", json_integer(p->layers));
    json_object_set_new(c, "num_attention_heads", json_integer(p->heads));
    json_object_set_new(c, "num_key_value_heads", json_integer(p->kv));
    json_object_set_new(c, "head_dim", json_integer(p->head_dim));
    json_object_set_new(c, "vocab_size", json_integer(p->vocab));
    json_object_set_new(c, "max_position_embeddings", json_integer(p->max_pos));
    json_object_set_new(c, "rms_norm_eps", json_real(p->eps));
    json_object_set_new(c, "rope_theta", json_real(p->theta));
    json_object_set_new(c, "rope_scaling",
                        p->llama3 ? json_pack("{s:s, s:f, s:f, s:f, s:i}", "rope_type", "llama3",
                                              "factor", 32.0, "low_freq_factor", 1.0,
                                              "high_freq_factor", 4.0,
                                              "original_max_position_embeddings", 8192)
                                  : json_null());
    json_object_set_new(c, "hidden_act", json_string("silu"));
    json_object_set_new(c, "tie_word_embeddings", json_true());
    if (p->arch != TS_ARCH_QWEN2) json_object_set_new(c, "attention_bias", json_false());
    if (p->arch == TS_ARCH_LLAMA) json_object_set_new(c, "mlp_bias", json_false());
    if (p->arch != TS_ARCH_LLAMA) json_object_set_new(c, "use_sliding_window", json_false());
    /* Real special-token ids where the vocabulary holds them, else 1 and 2. */
    int real = p->bos < p->vocab && p->eos[0] < p->vocab;
    json_object_set_new(c, "bos_token_id", json_integer(real ? p->bos : 1));
    if (real && p->n_eos > 1) {
        json_t *e = json_array();
        for (int i = 0; i < p->n_eos; i++) json_array_append_new(e, json_integer(p->eos[i]));
        json_object_set_new(c, "eos_token_id", e);
    } else {
        json_object_set_new(c, "eos_token_id", json_integer(real ? p->eos[0] : 2));
    }
    json_object_set_new(c, "torch_dtype", json_string("bfloat16"));
    json_object_set_new(c, "tessera_synth",
                        json_pack("{s:s, s:I}", "preset", name, "seed", (json_int_t)seed));
    return c;
}

static ts_status write_weights(const preset *p, uint64_t seed, const char *path,
                               ts_progress_fn progress, void *user, ts_error *err) {
    gen_tensor *t = calloc((size_t)p->layers * 16 + 4, sizeof *t);
    ts_st_entry *e = calloc((size_t)p->layers * 16 + 4, sizeof *e);
    enum { CHUNK = 1 << 20 };
    uint16_t *buf = malloc(CHUNK * sizeof *buf);
    FILE *f = NULL;
    ts_status s = TS_OK;
    if (!t || !e || !buf) {
        s = ts_fail(err, TS_ERR_NOMEM, "out of memory");
        goto done;
    }
    int n = plan_tensors(p, t);
    for (int i = 0; i < n; i++) {
        e[i].name = t[i].name;
        e[i].dtype = TS_DTYPE_BF16;
        e[i].ndim = t[i].ndim;
        e[i].shape[0] = t[i].shape[0];
        e[i].shape[1] = t[i].shape[1];
    }
    f = fopen(path, "wb");
    if (!f) {
        s = ts_fail(err, TS_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        goto done;
    }
    if ((s = ts_st_write_header(f, path, e, n, err))) goto done;
    size_t all = 0, written = 0;
    for (int i = 0; i < n; i++) all += ts_st_entry_bytes(&e[i]) / 2;
    for (int i = 0; i < n && !s; i++) {
        uint64_t st = name_seed(seed, t[i].name);
        size_t total = (size_t)t[i].shape[0] * (size_t)(t[i].ndim == 2 ? t[i].shape[1] : 1);
        for (size_t done_n = 0; done_n < total;) {
            size_t k = total - done_n < CHUNK ? total - done_n : CHUNK;
            for (size_t j = 0; j < k; j++)
                buf[j] = ts_f32_to_bf16(t[i].mean + t[i].std * normal01(&st));
            if (fwrite(buf, sizeof *buf, k, f) != k) {
                s = ts_fail(err, TS_ERR_IO, "%s: write failed: %s", path, strerror(errno));
                break;
            }
            done_n += k;
            written += k;
            if (progress) progress(user, "writing weights", (double)written / (double)all);
        }
    }
done:
    if (f && fclose(f) != 0 && !s) s = ts_fail(err, TS_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    free(t);
    free(e);
    free(buf);
    return s;
}

static ts_status lookup(const char *name, int vocab_override, preset *p, ts_error *err) {
    if (!find_preset(name, p)) {
        char list[1024] = "";
        for (int i = 0; ts_synth_preset_name(i); i++) {
            strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
            strncat(list, ts_synth_preset_name(i), sizeof list - strlen(list) - 1);
        }
        return ts_fail(err, TS_ERR_ARG, "unknown preset \"%s\", expected one of: %s", name, list);
    }
    if (vocab_override < 0 || vocab_override > (1 << 24))
        return ts_fail(err, TS_ERR_ARG, "--vocab %d outside [1, 2^24]", vocab_override);
    if (vocab_override > 0) p->vocab = vocab_override;
    return TS_OK;
}

ts_status ts_synth_preset_config(const char *name, int vocab_override, ts_config *out,
                                 ts_error *err) {
    preset p;
    ts_status s = lookup(name, vocab_override, &p, err);
    if (s) return s;
    json_t *j = config_json(&p, 0, name);
    s = ts_config_from_json(j, name, out, err);
    json_decref(j);
    return s;
}

ts_status ts_synth_write(const char *name, const char *out_dir, const ts_synth_opts *opts,
                         ts_error *err) {
    ts_synth_opts def = {0};
    if (!opts) opts = &def;
    uint64_t seed = opts->seed;
    ts_progress_fn progress = opts->progress;
    void *progress_user = opts->progress_user;
    preset p;
    ts_status st = lookup(name, opts->vocab, &p, err);
    if (st) return st;
    if (opts->layers < 0 || opts->layers > 4096)
        return ts_fail(err, TS_ERR_ARG, "--layers %d outside [1, 4096]", opts->layers);
    if (opts->layers > 0) p.layers = opts->layers;
    if (ts_mkdir_p(out_dir) != 0)
        return ts_fail(err, TS_ERR_IO, "%s: cannot create directory: %s", out_dir, strerror(errno));
    char *cfg_path = ts_path_join(out_dir, "config.json");
    char *st_path = ts_path_join(out_dir, "model.safetensors");
    char *tmp_path = ts_path_join(out_dir, "model.safetensors.partial");
    ts_status s = TS_OK;
    json_t *cfg = NULL;
    if (!cfg_path || !st_path || !tmp_path) s = ts_fail(err, TS_ERR_NOMEM, "out of memory");
    else if (ts_file_exists(cfg_path) || ts_file_exists(st_path))
        s = ts_fail(err, TS_ERR_IO,
                    "%s: already holds a model (config.json or model.safetensors); refusing to "
                    "overwrite it",
                    out_dir);
    else if (!(s = write_weights(&p, seed, tmp_path, progress, progress_user, err))) {
        cfg = config_json(&p, seed, name);
        if (json_dump_file(cfg, cfg_path, JSON_INDENT(2)) != 0)
            s = ts_fail(err, TS_ERR_IO, "%s: write failed", cfg_path);
        else if (rename(tmp_path, st_path) != 0)
            s = ts_fail(err, TS_ERR_IO, "%s: rename failed: %s", st_path, strerror(errno));
    }
    if (s && tmp_path) remove(tmp_path);
    json_decref(cfg);
    free(cfg_path);
    free(st_path);
    free(tmp_path);
    return s;
}
