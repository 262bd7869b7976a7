/* Architecture features of a checkpoint, read from HF config.json. A new model of a known
 * family is a new set of values here, never new code. */
#ifndef TS_MODEL_CONFIG_H
#define TS_MODEL_CONFIG_H
#include <jansson.h>

#include "tessera.h"

typedef enum ts_arch { TS_ARCH_LLAMA = 0, TS_ARCH_QWEN2, TS_ARCH_QWEN3 } ts_arch;

#define TS_MAX_EOS 8

typedef struct ts_config {
    ts_arch arch;
    const char *arch_name; /* static string: the HF class name */
    int n_embd;            /* hidden_size */
    int n_ff;              /* intermediate_size */
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim; /* given, or hidden_size / num_attention_heads */
    int n_vocab;
    int max_pos; /* max_position_embeddings */
    double rope_theta;
    double rms_eps;
    /* rope_scaling of type llama3 */
    int rope_llama3;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_orig_max_pos;
    /* Per-frequency divisors (head_dim / 2 floats) from a GGUF's rope_freqs tensor, the form
     * llama.cpp's converter gives llama3 scaling; borrowed from the model's weights, or NULL. */
    const float *rope_freq_div;
    /* features */
    int qkv_bias; /* q/k/v projections have bias (Qwen2 always; Llama/Qwen3: attention_bias) */
    int o_bias;   /* o_proj has bias (Llama/Qwen3 attention_bias) */
    int mlp_bias; /* gate/up/down have bias (Llama mlp_bias) */
    int qk_norm;  /* per-head RMSNorm on q and k before RoPE (Qwen3) */
    int tied;     /* lm_head shares embed_tokens */
    int bos_id;   /* -1 when absent */
    int eos_ids[TS_MAX_EOS];
    int n_eos;
    char torch_dtype[16];
    int gguf; /* read from a GGUF file's metadata rather than config.json */
} ts_config;

/* Reads and validates DIR/config.json (path given whole). */
ts_status ts_config_load(const char *path, ts_config *c, ts_error *err);
/* id into c->eos_ids unless there already; 0 when the list is full (TS_MAX_EOS) and id is new. */
int ts_config_add_eos(ts_config *c, int id);
/* generation_config.json's eos_token_id (an id or a list) added to c->eos_ids, as transformers'
 * generate() stops at them: Qwen3 and Qwen2.5 list <|endoftext|> there beside config.json's
 * <|im_end|>. A file without the field adds nothing; a malformed one is an error naming it. */
ts_status ts_config_add_generation(const char *path, ts_config *c, ts_error *err);
/* Validates a parsed config object; fname is used in messages. */
ts_status ts_config_from_json(const json_t *root, const char *fname, ts_config *c, ts_error *err);
/* One line of feature names, e.g. "GQA 32/8, tied embeddings, rope llama3 x32". */
void ts_config_features(const ts_config *c, char *buf, size_t len);

#endif
