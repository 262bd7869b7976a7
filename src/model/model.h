/* ts_model: a validated config plus one borrowed weight view per tensor the step list needs.
 * Shapes and dtypes are checked at open; targets can index weights without re-checking. */
#ifndef TS_MODEL_MODEL_H
#define TS_MODEL_MODEL_H
#include "io/tensor_store.h"
#include "model/config.h"

typedef struct ts_layer_w {
    const ts_tensor *attn_norm;        /* (n_embd) */
    const ts_tensor *wq, *wk, *wv;     /* (n_heads*head_dim, n_embd), (n_kv*head_dim, n_embd) */
    const ts_tensor *bq, *bk, *bv;     /* optional biases */
    const ts_tensor *q_norm, *k_norm;  /* optional (head_dim) */
    const ts_tensor *wo, *bo;          /* (n_embd, n_heads*head_dim), optional bias (n_embd) */
    const ts_tensor *ffn_norm;         /* (n_embd) */
    const ts_tensor *w_gate, *w_up;    /* (n_ff, n_embd) */
    const ts_tensor *w_down;           /* (n_embd, n_ff) */
    const ts_tensor *b_gate, *b_up, *b_down;
} ts_layer_w;

struct ts_model {
    char *dir;
    char *config_path;
    ts_config cfg;
    ts_store store;
    const ts_tensor *embed;      /* (n_vocab, n_embd) */
    const ts_tensor *final_norm; /* (n_embd) */
    const ts_tensor *lm_head;    /* (n_vocab, n_embd); == embed when tied */
    ts_layer_w *layers;
    uint64_t n_params; /* counted once, tied weights once */
    /* A GGUF model: dir and config_path are the .gguf file itself; the parsed metadata stays
     * for the tokenizer and chat template (its views point into store.maps[0]). NULL for a
     * Hugging Face directory. */
    struct ts_gguf *gguf;
    int quantized;  /* -1, or the type ts_model_quantize made the matrices at load (--quant) */
    int quant_kept; /* matrices it left as stored: rows not whole 32-element blocks */
    /* What the KV cache holds, in every target and in the oracle: TS_DTYPE_F32 (the default,
     * zeroed by calloc) or TS_DTYPE_F16 (--kv-cache f16: K and V rows rounded as
     * ts_f32_to_f16_sat does when stored, so the oracle computes exactly what the targets do). */
    int kv_type;
};

/* "f32" / "f16" (either case) -> TS_DTYPE_F32 / TS_DTYPE_F16; -1 for anything else. */
int ts_kv_cache_parse(const char *s);
/* "f32" or "f16": the spelling --kv-cache takes and manifests record. */
const char *ts_kv_cache_name(int kv_type);
/* Bytes per cached K or V element: 2 for TS_DTYPE_F16, else 4. */
static inline unsigned ts_kv_cache_elem_bytes(int kv_type) { return kv_type == TS_DTYPE_F16 ? 2u : 4u; }

const ts_config *ts_model_config(const ts_model *m);
/* The weight matrices in the order a forward pass reads them: per layer q, k, v, o, gate, up,
 * down, then the embedding and (when not tied) the LM head; 7 * n_layers + 2 at most. Returns
 * how many it wrote to out. Weight copies and quantized slabs are laid out in this order so
 * that one decode streams them front to back. */
int ts_model_matrices(const ts_model *m, const ts_tensor **out);
/* Shared argument check of every target's forward: n >= 1 tokens that fit after n_past of
 * max_seq positions, each inside the vocabulary. who names the target in messages. */
ts_status ts_model_check_tokens(const ts_config *c, const int32_t *tokens, int n, int n_past,
                                int max_seq, const char *who, ts_error *err);
/* TS_ERR_ARG when n positions exceed max_position_embeddings, naming both numbers and
 * config.json: "WHAT N exceeds the model's context of M positions (...)". The targets run any
 * position their cache holds; the trained context is enforced where a request comes in
 * (logits, a session's --ctx), before anything is allocated. */
ts_status ts_model_check_context(const ts_model *m, int n, const char *what, ts_error *err);

#endif
