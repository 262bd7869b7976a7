/* config.json -> ts_config on accepted inputs: the three architectures and their features
 * (Qwen2's unconditional q/k/v bias, Qwen3's q/k norm, explicit vs derived head_dim, tying,
 * eos as int / list / null), RoPE via the older rope_theta + rope_scaling and the newer
 * rope_parameters spellings, real published configs, and every HF fixture's config.json. */
#include <math.h>
#include <string.h>

#include "io/json.h"
#include "model/config.h"
#include "tharness.h"

static ts_status parse(const char *text, ts_config *c, ts_error *err) {
    json_t *root;
    memset(c, 0xab, sizeof *c); /* every field must be written by the parser */
    ts_status s = ts_json_parse(text, strlen(text), "test.json", &root, err);
    CHECK(s == TS_OK, "test JSON itself is bad: %s", err->msg);
    if (s) return s;
    s = ts_config_from_json(root, "config.json", c, err);
    json_decref(root);
    return s;
}

/* Parses text and fails the check (with the message) if it is refused. */
static int ok(const char *what, const char *text, ts_config *c) {
    ts_error err;
    ts_status s = parse(text, c, &err);
    CHECK(s == TS_OK, "%s: %s", what, err.msg);
    return s == TS_OK;
}

/* Small Llama/Qwen body; the caller adds fields not listed here. */
#define SMALL(arch, extra)                                                                         \
    "{\"architectures\": [\"" arch "\"], \"hidden_size\": 64, \"intermediate_size\": 128,"         \
    "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 256" extra "}"

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * fabs(b); }

static void expect_features(const ts_config *c, const char *want) {
    char buf[256];
    ts_config_features(c, buf, sizeof buf);
    CHECK(strcmp(buf, want) == 0, "features \"%s\", expected \"%s\"", buf, want);
}

static void test_defaults(void) {
    ts_config c;
    if (!ok("llama defaults", SMALL("LlamaForCausalLM", ""), &c)) return;
    CHECK(c.arch == TS_ARCH_LLAMA && strcmp(c.arch_name, "LlamaForCausalLM") == 0, "arch");
    CHECK(c.n_embd == 64 && c.n_ff == 128 && c.n_layers == 2 && c.n_vocab == 256, "sizes");
    CHECK(c.n_heads == 4 && c.n_kv_heads == 4, "kv heads default to heads: %d", c.n_kv_heads);
    CHECK(c.head_dim == 16, "head_dim derived 64/4: %d", c.head_dim);
    CHECK(c.max_pos == 2048, "max_position_embeddings default: %d", c.max_pos);
    CHECK(c.rope_theta == 10000.0 && c.rms_eps == 1e-6, "theta %g eps %g", c.rope_theta, c.rms_eps);
    CHECK(c.rope_llama3 == 0, "no rope scaling");
    CHECK(!c.qkv_bias && !c.o_bias && !c.mlp_bias && !c.qk_norm, "no features");
    CHECK(c.tied == 0, "tie_word_embeddings defaults to false");
    CHECK(c.bos_id == -1 && c.n_eos == 0, "bos %d n_eos %d", c.bos_id, c.n_eos);
    CHECK(c.torch_dtype[0] == 0, "dtype \"%s\"", c.torch_dtype);
    expect_features(&c, "MHA 4 heads, head_dim 16, untied lm_head, rope theta 10000");

    /* JSON null means "absent" for optional fields. */
    if (!ok("nulls",
            SMALL("LlamaForCausalLM", ", \"head_dim\": null, \"num_key_value_heads\": null,"
                                      "\"bos_token_id\": null, \"eos_token_id\": null,"
                                      "\"rope_scaling\": null, \"rope_theta\": null"),
            &c))
        return;
    CHECK(c.head_dim == 16 && c.n_kv_heads == 4 && c.bos_id == -1 && c.n_eos == 0 &&
              c.rope_theta == 10000.0 && !c.rope_llama3,
          "nulls: hd %d kv %d bos %d eos %d", c.head_dim, c.n_kv_heads, c.bos_id, c.n_eos);
}

static void test_features(void) {
    ts_config c;
    if (ok("llama biases",
           SMALL("LlamaForCausalLM", ", \"attention_bias\": true, \"mlp_bias\": true"), &c))
        CHECK(c.qkv_bias == 1 && c.o_bias == 1 && c.mlp_bias == 1 && !c.qk_norm, "llama biases");
    if (ok("llama attn bias", SMALL("LlamaForCausalLM", ", \"attention_bias\": true"), &c))
        CHECK(c.qkv_bias == 1 && c.o_bias == 1 && c.mlp_bias == 0, "attention_bias only");

    /* Qwen2 always has q/k/v bias and never o/mlp bias, whatever the flags say. */
    const char *q2[] = {
        SMALL("Qwen2ForCausalLM", ""), SMALL("Qwen2ForCausalLM", ", \"attention_bias\": false"),
        SMALL("Qwen2ForCausalLM", ", \"attention_bias\": true, \"mlp_bias\": true")};
    for (int i = 0; i < 3; i++)
        if (ok("qwen2 bias", q2[i], &c))
            CHECK(c.arch == TS_ARCH_QWEN2 && c.qkv_bias == 1 && c.o_bias == 0 && c.mlp_bias == 0 &&
                      c.qk_norm == 0,
                  "qwen2 case %d: qkv %d o %d mlp %d", i, c.qkv_bias, c.o_bias, c.mlp_bias);

    if (ok("qwen3", SMALL("Qwen3ForCausalLM", ", \"head_dim\": 32"), &c)) {
        CHECK(c.arch == TS_ARCH_QWEN3 && c.qk_norm == 1 && c.qkv_bias == 0 && c.o_bias == 0,
              "qwen3 features");
        CHECK(c.head_dim == 32, "explicit head_dim beats hidden/heads: %d", c.head_dim);
    }
    if (ok("qwen3 bias", SMALL("Qwen3ForCausalLM", ", \"attention_bias\": true"), &c))
        CHECK(c.qk_norm == 1 && c.qkv_bias == 1 && c.o_bias == 1 && c.head_dim == 16, "qwen3 bias");

    if (ok("head_dim derived",
           "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 96, "
           "\"intermediate_size\": 1,"
           "\"num_hidden_layers\": 1, \"num_attention_heads\": 6, \"num_key_value_heads\": 3,"
           "\"vocab_size\": 10}",
           &c))
        CHECK(c.head_dim == 16 && c.n_kv_heads == 3 && c.n_ff == 1, "derived: %d", c.head_dim);

    if (ok("tied", SMALL("LlamaForCausalLM", ", \"tie_word_embeddings\": true"), &c))
        CHECK(c.tied == 1, "tied");
    if (ok("untied", SMALL("Qwen2ForCausalLM", ", \"tie_word_embeddings\": false"), &c))
        CHECK(c.tied == 0, "untied");
    if (ok("dtype (v5 key)", SMALL("LlamaForCausalLM", ", \"dtype\": \"float16\""), &c))
        CHECK(strcmp(c.torch_dtype, "float16") == 0, "dtype \"%s\"", c.torch_dtype);
    if (ok("torch_dtype wins",
           SMALL("LlamaForCausalLM", ", \"torch_dtype\": \"bfloat16\", \"dtype\": \"float32\""),
           &c))
        CHECK(strcmp(c.torch_dtype, "bfloat16") == 0, "dtype \"%s\"", c.torch_dtype);
    if (ok("eps, max pos",
           SMALL("LlamaForCausalLM", ", \"rms_norm_eps\": 1e-05,"
                                     "\"max_position_embeddings\": 4096"),
           &c))
        CHECK(c.rms_eps == 1e-5 && c.max_pos == 4096, "eps %g max_pos %d", c.rms_eps, c.max_pos);
}

static void test_token_ids(void) {
    ts_config c;
    if (ok("eos int", SMALL("LlamaForCausalLM", ", \"bos_token_id\": 0, \"eos_token_id\": 255"),
           &c))
        CHECK(c.bos_id == 0 && c.n_eos == 1 && c.eos_ids[0] == 255, "eos int");
    if (ok("eos list", SMALL("LlamaForCausalLM", ", \"eos_token_id\": [2, 7, 3]"), &c))
        CHECK(c.n_eos == 3 && c.eos_ids[0] == 2 && c.eos_ids[1] == 7 && c.eos_ids[2] == 3,
              "eos list: %d", c.n_eos);
    if (ok("eos empty list", SMALL("LlamaForCausalLM", ", \"eos_token_id\": []"), &c))
        CHECK(c.n_eos == 0, "eos []");
    if (ok("eos 8", SMALL("LlamaForCausalLM", ", \"eos_token_id\": [1,2,3,4,5,6,7,8]"), &c))
        CHECK(c.n_eos == TS_MAX_EOS && c.eos_ids[7] == 8, "eos 8");
    if (ok("eos null", SMALL("Qwen3ForCausalLM", ", \"eos_token_id\": null"), &c))
        CHECK(c.n_eos == 0, "eos null");
}

static void expect_llama3(const char *what, const char *text, double theta, double factor,
                          double lo, double hi, int orig) {
    ts_config c;
    if (!ok(what, text, &c)) return;
    CHECK(c.rope_llama3 == 1, "%s: llama3 scaling not seen", what);
    CHECK(near(c.rope_theta, theta) && near(c.rope_factor, factor) &&
              near(c.rope_low_freq_factor, lo) && near(c.rope_high_freq_factor, hi) &&
              c.rope_orig_max_pos == orig,
          "%s: theta %g factor %g low %g high %g orig %d", what, c.rope_theta, c.rope_factor,
          c.rope_low_freq_factor, c.rope_high_freq_factor, c.rope_orig_max_pos);
}

static void test_rope(void) {
    /* transformers < 5: top-level rope_theta, rope_scaling with "rope_type" or older "type". */
    expect_llama3("rope_scaling rope_type",
                  SMALL("LlamaForCausalLM", ", \"rope_theta\": 500000.0, \"rope_scaling\": {"
                                            "\"factor\": 32.0, \"high_freq_factor\": 4.0,"
                                            "\"low_freq_factor\": 1.0,"
                                            "\"original_max_position_embeddings\": 8192,"
                                            "\"rope_type\": \"llama3\"}"),
                  500000.0, 32.0, 1.0, 4.0, 8192);
    expect_llama3("rope_scaling type",
                  SMALL("LlamaForCausalLM", ", \"rope_theta\": 500000, \"rope_scaling\": {"
                                            "\"type\": \"llama3\", \"factor\": 8,"
                                            "\"low_freq_factor\": 1, \"high_freq_factor\": 4,"
                                            "\"original_max_position_embeddings\": 8192}"),
                  500000.0, 8.0, 1.0, 4.0, 8192);
    /* transformers >= 5: one rope_parameters object. */
    expect_llama3("rope_parameters",
                  SMALL("LlamaForCausalLM", ", \"rope_parameters\": {\"factor\": 8.0,"
                                            "\"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0,"
                                            "\"original_max_position_embeddings\": 64,"
                                            "\"rope_theta\": 500000.0, \"rope_type\": \"llama3\"}"),
                  500000.0, 8.0, 1.0, 4.0, 64);

    ts_config c;
    if (ok("rope_parameters default",
           SMALL("Qwen3ForCausalLM", ", \"rope_parameters\": {\"rope_theta\": 1000000.0,"
                                     "\"rope_type\": \"default\"}"),
           &c))
        CHECK(c.rope_theta == 1e6 && !c.rope_llama3, "theta %g", c.rope_theta);
    if (ok("rope_parameters no theta",
           SMALL("LlamaForCausalLM", ", \"rope_parameters\": {\"rope_type\": \"default\"}"), &c))
        CHECK(c.rope_theta == 10000.0 && !c.rope_llama3, "theta %g", c.rope_theta);
    if (ok("rope_theta only", SMALL("Qwen2ForCausalLM", ", \"rope_theta\": 1000000.0"), &c))
        CHECK(c.rope_theta == 1e6 && !c.rope_llama3, "theta %g", c.rope_theta);
    if (ok("rope_scaling default",
           SMALL("LlamaForCausalLM", ", \"rope_theta\": 130000, \"rope_scaling\": {\"rope_type\":"
                                     " \"default\"}"),
           &c))
        CHECK(c.rope_theta == 130000.0 && !c.rope_llama3, "theta %g", c.rope_theta);
    if (ok("rope_scaling {}", SMALL("LlamaForCausalLM", ", \"rope_scaling\": {}"), &c))
        CHECK(!c.rope_llama3, "empty rope_scaling is the default");
}

/* Modelled on the published Llama-3.2-1B, Qwen2.5-0.5B and Qwen3-0.6B configs (sizes, ids, rope as
 * shipped; some fields tessera ignores are left out). */
static void test_real_configs(void) {
    ts_config c;
    if (ok("Llama-3.2-1B",
           "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false,"
           "\"bos_token_id\": 128000, \"eos_token_id\": [128001, 128008, 128009],"
           "\"head_dim\": 64, \"hidden_act\": \"silu\", \"hidden_size\": 2048,"
           "\"intermediate_size\": 8192, \"max_position_embeddings\": 131072, \"mlp_bias\": false,"
           "\"model_type\": \"llama\", \"num_attention_heads\": 32, \"num_hidden_layers\": 16,"
           "\"num_key_value_heads\": 8, \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05,"
           "\"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": "
           "1.0,"
           "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},"
           "\"rope_theta\": 500000.0, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
           "\"use_cache\": true, \"vocab_size\": 128256}",
           &c)) {
        CHECK(c.n_embd == 2048 && c.n_ff == 8192 && c.n_layers == 16 && c.n_heads == 32 &&
                  c.n_kv_heads == 8 && c.head_dim == 64 && c.n_vocab == 128256 &&
                  c.max_pos == 131072 && c.rms_eps == 1e-5,
              "llama 3.2 sizes");
        CHECK(c.bos_id == 128000 && c.n_eos == 3 && c.eos_ids[2] == 128009 && c.tied, "ids, tied");
        expect_features(&c, "GQA 32/8 heads, head_dim 64, tied embeddings, rope theta 500000 "
                            "llama3 x32");
    }
    if (ok("Qwen2.5-0.5B",
           "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0,"
           "\"bos_token_id\": 151643, \"eos_token_id\": 151643, \"hidden_act\": \"silu\","
           "\"hidden_size\": 896, \"initializer_range\": 0.02, \"intermediate_size\": 4864,"
           "\"max_position_embeddings\": 32768, \"max_window_layers\": 24,"
           "\"model_type\": \"qwen2\", \"num_attention_heads\": 14, \"num_hidden_layers\": 24,"
           "\"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0,"
           "\"sliding_window\": 32768, \"tie_word_embeddings\": true, \"torch_dtype\": "
           "\"bfloat16\","
           "\"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}",
           &c)) {
        CHECK(c.n_embd == 896 && c.n_heads == 14 && c.n_kv_heads == 2 && c.head_dim == 64 &&
                  c.n_ff == 4864 && c.n_vocab == 151936 && c.rope_theta == 1e6,
              "qwen2.5 sizes");
        CHECK(c.n_eos == 1 && c.eos_ids[0] == 151643 && c.bos_id == 151643, "qwen2.5 ids");
        expect_features(&c, "GQA 14/2 heads, head_dim 64, qkv bias, tied embeddings, rope theta "
                            "1e+06");
    }
    if (ok("Qwen3-0.6B",
           "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false,"
           "\"attention_dropout\": 0.0, \"bos_token_id\": 151643, \"eos_token_id\": 151645,"
           "\"head_dim\": 128, \"hidden_act\": \"silu\", \"hidden_size\": 1024,"
           "\"intermediate_size\": 3072, \"max_position_embeddings\": 40960,"
           "\"max_window_layers\": 28, \"model_type\": \"qwen3\", \"num_attention_heads\": 16,"
           "\"num_hidden_layers\": 28, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-06,"
           "\"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": null,"
           "\"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", \"use_cache\": true,"
           "\"use_sliding_window\": false, \"vocab_size\": 151936}",
           &c)) {
        CHECK(c.n_embd == 1024 && c.head_dim == 128 && c.n_heads == 16 && c.n_kv_heads == 8 &&
                  c.n_layers == 28 && c.max_pos == 40960 && c.eos_ids[0] == 151645,
              "qwen3 sizes");
        expect_features(&c, "GQA 16/8 heads, head_dim 128 (!= hidden/heads), q/k norm, tied "
                            "embeddings, rope theta 1e+06");
    }
}

/* The committed fixtures, through the file loader. */
static int load(const char *name, ts_config *c) {
    char p[1024];
    ts_error err;
    snprintf(p, sizeof p, "%s/%s/config.json", th_fixture("hf"), name);
    ts_status s = ts_config_load(p, c, &err);
    CHECK(s == TS_OK, "%s: %s", name, err.msg);
    return s == TS_OK;
}

static void test_fixtures(void) {
    ts_config c;
    if (load("llama_gqa_rope3", &c)) {
        CHECK(c.arch == TS_ARCH_LLAMA && c.n_heads == 4 && c.n_kv_heads == 2 && c.head_dim == 16,
              "gqa");
        CHECK(c.rope_llama3 && c.rope_factor == 8.0 && c.rope_low_freq_factor == 1.0 &&
                  c.rope_high_freq_factor == 4.0 && c.rope_orig_max_pos == 64 &&
                  c.rope_theta == 5e5,
              "rope3");
        CHECK(c.tied && c.n_eos == 2 && c.eos_ids[0] == 2 && c.eos_ids[1] == 3 && c.bos_id == 1,
              "ids");
        CHECK(strcmp(c.torch_dtype, "bfloat16") == 0, "dtype %s", c.torch_dtype);
    }
    if (load("llama_mha", &c))
        CHECK(c.n_heads == 4 && c.n_kv_heads == 4 && c.rope_theta == 1.3e5 && !c.rope_llama3 &&
                  c.tied && c.rms_eps == 1e-5,
              "mha");
    if (load("llama_untied_sharded", &c))
        CHECK(!c.tied && c.n_heads == 8 && c.n_kv_heads == 2 && c.head_dim == 8 &&
                  c.n_vocab == 320 && c.n_layers == 3 && strcmp(c.torch_dtype, "float16") == 0,
              "sharded");
    if (load("qwen2_bias", &c))
        CHECK(c.arch == TS_ARCH_QWEN2 && c.qkv_bias && !c.o_bias && c.rms_eps == 1e-6 &&
                  c.rope_theta == 1e6 && c.head_dim == 16 && c.tied,
              "qwen2");
    if (load("qwen3_qknorm", &c))
        CHECK(c.arch == TS_ARCH_QWEN3 && c.qk_norm && c.head_dim == 32 && c.n_embd == 64 &&
                  !c.qkv_bias,
              "qwen3");
    if (load("llama_attn_bias", &c))
        CHECK(c.qkv_bias && c.o_bias && c.mlp_bias && c.n_kv_heads == 1 && c.head_dim == 16 &&
                  c.n_embd == 48 && !c.tied && c.n_eos == 1 && c.eos_ids[0] == 2,
              "attn bias");
}

/* A few refusals that only ts_config_from_json sees (the loader test covers the rest). */
static void test_refusals(void) {
    ts_config c;
    ts_error err;
    struct {
        const char *text, *needle;
        ts_status want;
    } k[] = {
        {"[]", "top level is an array", TS_ERR_FORMAT},
        {SMALL("LlamaForCausalLM", ", \"num_key_value_heads\": 8"), "num_key_value_heads",
         TS_ERR_FORMAT},
        {SMALL("LlamaForCausalLM",
               ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8}"),
         "low_freq_factor", TS_ERR_FORMAT},
        {SMALL("LlamaForCausalLM", ", \"eos_token_id\": [1,2,3,4,5,6,7,8,9]"), "at most 8",
         TS_ERR_FORMAT},
        {SMALL("LlamaForCausalLM", ", \"tie_word_embeddings\": 1"), "true or false", TS_ERR_FORMAT},
        /* hidden_size < num_attention_heads and no head_dim: derived head_dim would be 0 */
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 2, \"intermediate_size\": 4,"
         "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"vocab_size\": 8}",
         "head_dim 0", TS_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        ts_status s = parse(k[i].text, &c, &err);
        CHECK(s == k[i].want, "refusal %zu: got %s", i, s ? err.msg : "ok");
        CHECK(s == TS_OK || strstr(err.msg, k[i].needle), "refusal %zu: \"%s\" not in: %s", i,
              k[i].needle, err.msg);
    }
}

int main(void) {
    test_defaults();
    test_features();
    test_token_ids();
    test_rope();
    test_real_configs();
    test_fixtures();
    test_refusals();
    return th_finish("test_config");
}
