/* config.json -> ts_config for LlamaForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM.
 * Defaults follow the transformers config classes; every value is range-checked so later code
 * can trust it (sizes fit in int, products fit in size_t). */
#include "model/config.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "io/json.h"

#define BIG (1 << 20) /* generous bound on any model dimension */

static const struct {
    const char *name;
    ts_arch arch;
} k_archs[] = {
    {"LlamaForCausalLM", TS_ARCH_LLAMA},
    {"Qwen2ForCausalLM", TS_ARCH_QWEN2},
    {"Qwen3ForCausalLM", TS_ARCH_QWEN3},
};

static ts_status get_arch(const json_t *root, const char *f, ts_config *c, ts_error *err) {
    const json_t *a = json_object_get(root, "architectures");
    if (!json_is_array(a) || json_array_size(a) < 1 || !json_is_string(json_array_get(a, 0)))
        return ts_fail(err, TS_ERR_FORMAT,
                       "%s: field \"architectures\" is %s, expected a list with one class name", f,
                       ts_json_type_name(a));
    const char *name = json_string_value(json_array_get(a, 0));
    for (size_t i = 0; i < sizeof k_archs / sizeof k_archs[0]; i++)
        if (strcmp(name, k_archs[i].name) == 0) {
            c->arch = k_archs[i].arch;
            c->arch_name = k_archs[i].name;
            return TS_OK;
        }
    return ts_fail(err, TS_ERR_UNSUPPORTED,
                   "%s: architecture \"%s\" is not supported, expected one of LlamaForCausalLM, "
                   "Qwen2ForCausalLM, Qwen3ForCausalLM",
                   f, name);
}

/* RoPE settings: either transformers' older rope_theta + rope_scaling, or the newer
 * rope_parameters object holding both. */
static ts_status get_rope(const json_t *root, const char *f, ts_config *c, ts_error *err) {
    const json_t *params = json_object_get(root, "rope_parameters");
    const json_t *scaling = json_object_get(root, "rope_scaling");
    ts_status s;
    if (params && !json_is_null(params)) {
        if (!json_is_object(params))
            return ts_fail(err, TS_ERR_FORMAT, "%s: field \"rope_parameters\" is %s, expected an object",
                           f, ts_json_type_name(params));
        s = ts_json_num(params, "rope_theta", f, 0, 10000.0, 1.0, 1e12, &c->rope_theta, err);
        if (s) return s;
        if (!scaling || json_is_null(scaling)) scaling = params;
    }
    if (!params || json_is_null(params)) {
        s = ts_json_num(root, "rope_theta", f, 0, 10000.0, 1.0, 1e12, &c->rope_theta, err);
        if (s) return s;
    }
    if (!scaling || json_is_null(scaling)) return TS_OK;
    if (!json_is_object(scaling))
        return ts_fail(err, TS_ERR_FORMAT, "%s: field \"rope_scaling\" is %s, expected an object or null",
                       f, ts_json_type_name(scaling));
    const char *type = NULL;
    s = ts_json_str(scaling, "rope_type", f, 0, NULL, &type, err);
    if (!s && !type) s = ts_json_str(scaling, "type", f, 0, "default", &type, err);
    if (s) return s;
    if (strcmp(type, "default") == 0) return TS_OK;
    if (strcmp(type, "llama3") != 0)
        return ts_fail(err, TS_ERR_UNSUPPORTED,
                       "%s: rope scaling type \"%s\" is not supported, expected \"llama3\" or none",
                       f, type);
    c->rope_llama3 = 1;
    int64_t orig;
    if ((s = ts_json_num(scaling, "factor", f, 1, 0, 1.0, 1e6, &c->rope_factor, err)) ||
        (s = ts_json_num(scaling, "low_freq_factor", f, 1, 0, 1e-6, 1e6, &c->rope_low_freq_factor, err)) ||
        (s = ts_json_num(scaling, "high_freq_factor", f, 1, 0, 1e-6, 1e6, &c->rope_high_freq_factor,
                         err)) ||
        (s = ts_json_int(scaling, "original_max_position_embeddings", f, 1, 0, 1, 1 << 30, &orig, err)))
        return s;
    if (c->rope_high_freq_factor <= c->rope_low_freq_factor)
        return ts_fail(err, TS_ERR_FORMAT,
                       "%s: rope_scaling high_freq_factor %g must be greater than low_freq_factor %g",
                       f, c->rope_high_freq_factor, c->rope_low_freq_factor);
    c->rope_orig_max_pos = (int)orig;
    return TS_OK;
}

int ts_config_add_eos(ts_config *c, int id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == id) return 1;
    if (c->n_eos >= TS_MAX_EOS) return 0;
    c->eos_ids[c->n_eos++] = id;
    return 1;
}

/* root's eos_token_id (an id, a list of ids, absent or null) added to c->eos_ids. */
static ts_status add_eos_ids(const json_t *root, const char *f, ts_config *c, ts_error *err) {
    const json_t *e = json_object_get(root, "eos_token_id");
    if (!e || json_is_null(e)) return TS_OK;
    if (json_is_integer(e)) {
        int64_t id;
        ts_status s = ts_json_int(root, "eos_token_id", f, 1, 0, 0, c->n_vocab - 1, &id, err);
        if (s) return s;
        if (!ts_config_add_eos(c, (int)id)) goto full;
        return TS_OK;
    }
    if (!json_is_array(e) || json_array_size(e) > TS_MAX_EOS)
        return ts_fail(err, TS_ERR_FORMAT,
                       "%s: field \"eos_token_id\" is %s, expected an integer or a list of at most %d",
                       f, ts_json_type_name(e), TS_MAX_EOS);
    for (size_t i = 0; i < json_array_size(e); i++) {
        const json_t *x = json_array_get(e, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= c->n_vocab)
            return ts_fail(err, TS_ERR_FORMAT,
                           "%s: eos_token_id[%zu] is not a token id in [0, %d)", f, i, c->n_vocab);
        if (!ts_config_add_eos(c, (int)json_integer_value(x))) goto full;
    }
    return TS_OK;
full:
    return ts_fail(err, TS_ERR_FORMAT, "%s: field \"eos_token_id\" brings the model's end-of-sequence ids to more than "
                   "%d (with config.json's), expected at most %d", f, TS_MAX_EOS, TS_MAX_EOS);
}

static ts_status get_token_ids(const json_t *root, const char *f, ts_config *c, ts_error *err) {
    int64_t bos;
    ts_status s = ts_json_int(root, "bos_token_id", f, 0, -1, -1, c->n_vocab - 1, &bos, err);
    if (s) return s;
    c->bos_id = (int)bos;
    c->n_eos = 0;
    return add_eos_ids(root, f, c, err);
}

ts_status ts_config_from_json(const json_t *root, const char *f, ts_config *c, ts_error *err) {
    memset(c, 0, sizeof *c);
    if (!json_is_object(root))
        return ts_fail(err, TS_ERR_FORMAT, "%s: top level is %s, expected an object", f,
                       ts_json_type_name(root));
    ts_status s = get_arch(root, f, c, err);
    if (s) return s;
    int64_t hidden, ff, layers, heads, kv, hd, vocab, maxpos;
    if ((s = ts_json_int(root, "hidden_size", f, 1, 0, 1, BIG, &hidden, err)) ||
        (s = ts_json_int(root, "intermediate_size", f, 1, 0, 1, BIG, &ff, err)) ||
        (s = ts_json_int(root, "num_hidden_layers", f, 1, 0, 1, 4096, &layers, err)) ||
        (s = ts_json_int(root, "num_attention_heads", f, 1, 0, 1, 4096, &heads, err)) ||
        (s = ts_json_int(root, "num_key_value_heads", f, 0, heads, 1, heads, &kv, err)) ||
        (s = ts_json_int(root, "vocab_size", f, 1, 0, 1, 1 << 24, &vocab, err)) ||
        (s = ts_json_int(root, "max_position_embeddings", f, 0, 2048, 1, 1 << 30, &maxpos, err)))
        return s;
    if (heads % kv != 0)
        return ts_fail(err, TS_ERR_FORMAT,
                       "%s: num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
                       f, (long long)heads, (long long)kv);
    int64_t def_hd = hidden / heads;
    if ((s = ts_json_int(root, "head_dim", f, 0, def_hd, 2, 4096, &hd, err))) return s;
    if (hd < 2 || hd % 2 != 0) /* a derived default (hidden_size < heads) skips the range check */
        return ts_fail(err, TS_ERR_FORMAT, "%s: head_dim %lld is odd or 0, expected an even size for RoPE",
                       f, (long long)hd);
    if (hd * heads > BIG)
        return ts_fail(err, TS_ERR_FORMAT, "%s: num_attention_heads x head_dim = %lld is too large",
                       f, (long long)(hd * heads));
    c->n_embd = (int)hidden;
    c->n_ff = (int)ff;
    c->n_layers = (int)layers;
    c->n_heads = (int)heads;
    c->n_kv_heads = (int)kv;
    c->head_dim = (int)hd;
    c->n_vocab = (int)vocab;
    c->max_pos = (int)maxpos;
    if ((s = ts_json_num(root, "rms_norm_eps", f, 0, 1e-6, 0.0, 1.0, &c->rms_eps, err))) return s;
    if ((s = get_rope(root, f, c, err))) return s;

    const char *act;
    if ((s = ts_json_str(root, "hidden_act", f, 0, "silu", &act, err))) return s;
    if (strcmp(act, "silu") != 0)
        return ts_fail(err, TS_ERR_UNSUPPORTED, "%s: hidden_act \"%s\" is not supported, expected \"silu\"",
                       f, act);
    int attn_bias, mlp_bias, sliding;
    if ((s = ts_json_bool(root, "attention_bias", f, 0, 0, &attn_bias, err)) ||
        (s = ts_json_bool(root, "mlp_bias", f, 0, 0, &mlp_bias, err)) ||
        (s = ts_json_bool(root, "tie_word_embeddings", f, 0, 0, &c->tied, err)) ||
        (s = ts_json_bool(root, "use_sliding_window", f, 0, 0, &sliding, err)))
        return s;
    if (sliding)
        return ts_fail(err, TS_ERR_UNSUPPORTED,
                       "%s: use_sliding_window is true, expected false (sliding-window attention is "
                       "not supported)",
                       f);
    switch (c->arch) {
    case TS_ARCH_LLAMA:
        c->qkv_bias = c->o_bias = attn_bias;
        c->mlp_bias = mlp_bias;
        break;
    case TS_ARCH_QWEN2: /* q/k/v always carry bias in Qwen2, whatever attention_bias says */
        c->qkv_bias = 1;
        break;
    case TS_ARCH_QWEN3:
        c->qkv_bias = c->o_bias = attn_bias;
        c->qk_norm = 1;
        break;
    }
    if ((s = get_token_ids(root, f, c, err))) return s;
    const char *dt = NULL;
    if ((s = ts_json_str(root, "torch_dtype", f, 0, NULL, &dt, err))) return s;
    if (!dt && (s = ts_json_str(root, "dtype", f, 0, "", &dt, err))) return s;
    snprintf(c->torch_dtype, sizeof c->torch_dtype, "%s", dt);
    return TS_OK;
}

ts_status ts_config_load(const char *path, ts_config *c, ts_error *err) {
    json_t *root;
    ts_status s = ts_json_load_file(path, 16u << 20, &root, err);
    if (s) return s;
    s = ts_config_from_json(root, path, c, err);
    json_decref(root);
    return s;
}

ts_status ts_config_add_generation(const char *path, ts_config *c, ts_error *err) {
    json_t *root;
    ts_status s = ts_json_load_file(path, 16u << 20, &root, err);
    if (s) return s;
    if (!json_is_object(root))
        s = ts_fail(err, TS_ERR_FORMAT, "%s: top level is %s, expected an object", path, ts_json_type_name(root));
    else s = add_eos_ids(root, path, c, err);
    json_decref(root);
    return s;
}

void ts_config_features(const ts_config *c, char *buf, size_t len) {
    int k = 0;
#define ADD(...) k += snprintf(buf + k, (size_t)k < len ? len - (size_t)k : 0, __VA_ARGS__)
    if (c->n_kv_heads == c->n_heads) ADD("MHA %d heads", c->n_heads);
    else ADD("GQA %d/%d heads", c->n_heads, c->n_kv_heads);
    ADD(", head_dim %d%s", c->head_dim,
        c->head_dim * c->n_heads != c->n_embd ? " (!= hidden/heads)" : "");
    if (c->qkv_bias) ADD(", qkv bias");
    if (c->o_bias) ADD(", o bias");
    if (c->mlp_bias) ADD(", mlp bias");
    if (c->qk_norm) ADD(", q/k norm");
    ADD(c->tied ? ", tied embeddings" : ", untied lm_head");
    ADD(", rope theta %g", c->rope_theta);
    if (c->rope_llama3) ADD(" llama3 x%g", c->rope_factor);
    if (c->rope_freq_div) ADD(" with rope_freqs");
#undef ADD
}
