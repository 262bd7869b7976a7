/* Binding checkpoint tensors to the step list: every expected tensor must exist with the
 * shape config.json implies; anything left over is an error (a tensor we would silently
 * ignore is a model we would silently run wrong). */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "model/gguf_model.h"

typedef struct binder {
    const ts_model *m;
    unsigned char *used; /* one flag per store tensor */
    ts_error *err;
} binder;

/* Looks up name, checks its shape against (d0[, d1]); optional tensors may be absent. */
static ts_status bind(binder *b, const char *name, int required, int ndim, int64_t d0, int64_t d1,
                      const char *why, const ts_tensor **out) {
    const ts_store *st = &b->m->store;
    const ts_tensor *t = ts_store_find(st, name);
    int64_t want[2] = {d0, d1};
    char ws[64], fs[128];
    *out = NULL;
    if (!t) {
        if (!required) return TS_OK;
        return ts_fail(b->err, TS_ERR_SHAPE,
                       "%s: tensor \"%s\" is missing, expected %s (%s in %s)", b->m->dir, name,
                       ts_shape_str(want, ndim, ws, sizeof ws), why, b->m->config_path);
    }
    if (!required)
        return ts_fail(b->err, TS_ERR_SHAPE,
                       "%s: tensor \"%s\" is present but %s in %s does not use it", t->file, name,
                       why, b->m->config_path);
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim > 1 && t->shape[1] != d1))
        return ts_fail(b->err, TS_ERR_SHAPE, "%s: tensor \"%s\" has shape %s, expected %s (%s in %s)",
                       t->file, name, ts_shape_str(t->shape, t->ndim, fs, sizeof fs),
                       ts_shape_str(want, ndim, ws, sizeof ws), why, b->m->config_path);
    b->used[t - st->tensors] = 1;
    *out = t;
    return TS_OK;
}

static ts_status bind_layer(binder *b, int i, ts_layer_w *L) {
    const ts_config *c = &b->m->cfg;
    int64_t H = c->n_embd, F = c->n_ff, Q = (int64_t)c->n_heads * c->head_dim,
            KV = (int64_t)c->n_kv_heads * c->head_dim;
    char n[160], why_attn[128], why_kv[160];
    snprintf(why_attn, sizeof why_attn, "num_attention_heads %d x head_dim %d, hidden_size %lld",
             c->n_heads, c->head_dim, (long long)H);
    snprintf(why_kv, sizeof why_kv, "num_key_value_heads %d x head_dim %d, hidden_size %lld",
             c->n_kv_heads, c->head_dim, (long long)H);
    const char *hid = "hidden_size", *ffw = "intermediate_size and hidden_size",
               *hd = "head_dim";
    ts_status s;
#define B(field, suffix, req, nd, a, bb, why)                                                      \
    do {                                                                                           \
        snprintf(n, sizeof n, "model.layers.%d.%s", i, suffix);                                    \
        if ((s = bind(b, n, req, nd, a, bb, why, &L->field))) return s;                            \
    } while (0)
    B(attn_norm, "input_layernorm.weight", 1, 1, H, 0, hid);
    B(wq, "self_attn.q_proj.weight", 1, 2, Q, H, why_attn);
    B(wk, "self_attn.k_proj.weight", 1, 2, KV, H, why_kv);
    B(wv, "self_attn.v_proj.weight", 1, 2, KV, H, why_kv);
    const char *qkvb = c->arch == TS_ARCH_QWEN2 ? "the Qwen2 architecture" : "attention_bias";
    B(bq, "self_attn.q_proj.bias", c->qkv_bias, 1, Q, 0, qkvb);
    B(bk, "self_attn.k_proj.bias", c->qkv_bias, 1, KV, 0, qkvb);
    B(bv, "self_attn.v_proj.bias", c->qkv_bias, 1, KV, 0, qkvb);
    B(q_norm, "self_attn.q_norm.weight", c->qk_norm, 1, c->head_dim, 0, c->qk_norm ? hd : "the architecture");
    B(k_norm, "self_attn.k_norm.weight", c->qk_norm, 1, c->head_dim, 0, c->qk_norm ? hd : "the architecture");
    B(wo, "self_attn.o_proj.weight", 1, 2, H, Q, why_attn);
    B(bo, "self_attn.o_proj.bias", c->o_bias, 1, H, 0, "attention_bias");
    B(ffn_norm, "post_attention_layernorm.weight", 1, 1, H, 0, hid);
    B(w_gate, "mlp.gate_proj.weight", 1, 2, F, H, ffw);
    B(w_up, "mlp.up_proj.weight", 1, 2, F, H, ffw);
    B(w_down, "mlp.down_proj.weight", 1, 2, H, F, ffw);
    B(b_gate, "mlp.gate_proj.bias", c->mlp_bias, 1, F, 0, "mlp_bias");
    B(b_up, "mlp.up_proj.bias", c->mlp_bias, 1, F, 0, "mlp_bias");
    B(b_down, "mlp.down_proj.bias", c->mlp_bias, 1, H, 0, "mlp_bias");
#undef B
    return TS_OK;
}

/* Tensors a checkpoint may carry that the forward pass legitimately does not read. */
static int ignorable(const char *name) {
    const char *inv = "rotary_emb.inv_freq";
    size_t n = strlen(name), k = strlen(inv);
    return n >= k && strcmp(name + n - k, inv) == 0;
}

static ts_status bind_all(ts_model *m, ts_error *err) {
    const ts_config *c = &m->cfg;
    binder b = {m, calloc((size_t)m->store.n_tensors + 1, 1), err};
    if (!b.used) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    ts_status s;
    char why[96];
    snprintf(why, sizeof why, "vocab_size %d, hidden_size %d", c->n_vocab, c->n_embd);
    if ((s = bind(&b, "model.embed_tokens.weight", 1, 2, c->n_vocab, c->n_embd, why, &m->embed)) ||
        (s = bind(&b, "model.norm.weight", 1, 1, c->n_embd, 0, "hidden_size", &m->final_norm)))
        goto done;
    if (c->tied) {
        /* Some exporters keep a copy of the tied head; it must still have the right shape. */
        const ts_tensor *copy = ts_store_find(&m->store, "lm_head.weight");
        if (copy && (s = bind(&b, "lm_head.weight", 1, 2, c->n_vocab, c->n_embd, why, &copy)))
            goto done;
        m->lm_head = m->embed;
    } else if ((s = bind(&b, "lm_head.weight", 1, 2, c->n_vocab, c->n_embd,
                         "tie_word_embeddings false", &m->lm_head))) {
        goto done;
    }
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) {
        s = ts_fail(err, TS_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < c->n_layers; i++)
        if ((s = bind_layer(&b, i, &m->layers[i]))) goto done;
    for (int i = 0; i < m->store.n_tensors; i++) {
        const ts_tensor *t = &m->store.tensors[i];
        if (!b.used[i] && !ignorable(t->name)) {
            s = ts_fail(err, TS_ERR_SHAPE,
                        "%s: unexpected tensor \"%s\": %s with %d layers does not use it", t->file,
                        t->name, c->arch_name, c->n_layers);
            goto done;
        }
        if (b.used[i] && !(c->tied && strcmp(t->name, "lm_head.weight") == 0))
            m->n_params += (uint64_t)t->numel;
    }
done:
    free(b.used);
    return s;
}

/* A .gguf file: metadata -> config, tensors -> store under HF names; then bound as usual. */
static ts_status open_gguf(ts_model *m, const char *path, ts_error *err) {
    if (!(m->gguf = calloc(1, sizeof *m->gguf))) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    ts_status s = ts_gguf_open(path, m->gguf, err);
    if (s) {
        free(m->gguf);
        m->gguf = NULL;
        return s;
    }
    if ((s = ts_config_from_gguf(m->gguf, &m->cfg, err))) return s;
    if ((s = ts_store_from_gguf(&m->store, m->gguf, &m->cfg, err)) || (s = ts_store_index(&m->store, err)))
        return s;
    return bind_all(m, err);
}

int ts_kv_cache_parse(const char *s) {
    if (!s) return -1;
    if (!strcasecmp(s, "f32")) return TS_DTYPE_F32;
    if (!strcasecmp(s, "f16")) return TS_DTYPE_F16;
    return -1;
}

const char *ts_kv_cache_name(int kv_type) { return kv_type == TS_DTYPE_F16 ? "f16" : "f32"; }

/* A directory's generation_config.json, where there is one: its end-of-sequence ids too. */
static ts_status generation_eos(ts_model *m, const char *dir, ts_error *err) {
    char *p = ts_path_join(dir, "generation_config.json");
    if (!p) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    ts_status s = ts_file_exists(p) ? ts_config_add_generation(p, &m->cfg, err) : TS_OK;
    free(p);
    return s;
}

ts_status ts_model_open(const char *dir, ts_model **out, ts_error *err) {
    *out = NULL;
    if (!dir) return ts_fail(err, TS_ERR_ARG, "model directory is NULL");
    ts_model *m = calloc(1, sizeof *m);
    if (!m) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    m->dir = strdup(dir);
    m->quantized = -1;
    int gguf = !ts_dir_exists(dir) && ts_file_exists(dir);
    m->config_path = gguf ? strdup(dir) : ts_path_join(dir, "config.json");
    ts_status s;
    if (!m->dir || !m->config_path) s = ts_fail(err, TS_ERR_NOMEM, "out of memory");
    else if (gguf && !ts_gguf_is_file(dir))
        s = ts_fail(err, TS_ERR_FORMAT, "%s: not a GGUF file and not a directory (expected a Hugging Face model "
                    "directory or a .gguf file)", dir);
    else if (gguf) s = open_gguf(m, dir, err);
    else if (!ts_dir_exists(dir))
        s = ts_fail(err, TS_ERR_IO, "%s: no such directory (expected a Hugging Face model directory)",
                    dir);
    else if (!ts_file_exists(m->config_path))
        s = ts_fail(err, TS_ERR_IO, "%s: no config.json (expected a Hugging Face model directory)",
                    dir);
    else if (!(s = ts_config_load(m->config_path, &m->cfg, err)) && !(s = generation_eos(m, dir, err)) &&
             !(s = ts_store_open(&m->store, dir, err)))
        s = bind_all(m, err);
    if (s) {
        ts_model_close(m);
        return s;
    }
    *out = m;
    return TS_OK;
}

void ts_model_close(ts_model *m) {
    if (!m) return;
    if (m->gguf) ts_gguf_close(m->gguf); /* its views point into the store's map: first */
    free(m->gguf);
    ts_store_close(&m->store);
    free(m->layers);
    free(m->config_path);
    free(m->dir);
    free(m);
}

const ts_config *ts_model_config(const ts_model *m) { return &m->cfg; }

int ts_model_matrices(const ts_model *m, const ts_tensor **out) {
    int n = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const ts_layer_w *w = &m->layers[l];
        const ts_tensor *use[] = {w->wq, w->wk, w->wv, w->wo, w->w_gate, w->w_up, w->w_down};
        for (int k = 0; k < 7; k++) out[n++] = use[k];
    }
    out[n++] = m->embed;
    if (m->lm_head != m->embed) out[n++] = m->lm_head;
    return n;
}

ts_status ts_model_check_tokens(const ts_config *c, const int32_t *tokens, int n, int n_past,
                                int max_seq, const char *who, ts_error *err) {
    if (n < 1) return ts_fail(err, TS_ERR_ARG, "%s forward: %d tokens, expected at least 1", who, n);
    if (n > max_seq - n_past)
        return ts_fail(err, TS_ERR_ARG,
                       "%s forward: %d tokens after %d cached exceed the session's %d positions", who,
                       n, n_past, max_seq);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->n_vocab)
            return ts_fail(err, TS_ERR_ARG, "token %d at position %d is outside the vocabulary [0, %d)",
                           tokens[i], i, c->n_vocab);
    return TS_OK;
}
ts_status ts_model_check_context(const ts_model *m, int n, const char *what, ts_error *err) {
    if (n <= m->cfg.max_pos) return TS_OK;
    return ts_fail(err, TS_ERR_ARG,
                   "%s %d exceeds the model's context of %d positions (max_position_embeddings in %s)",
                   what, n, m->cfg.max_pos, m->config_path);
}
int ts_model_n_vocab(const ts_model *m) { return m->cfg.n_vocab; }
int ts_model_n_layers(const ts_model *m) { return m->cfg.n_layers; }
int ts_model_n_embd(const ts_model *m) { return m->cfg.n_embd; }

/* Index of the first non-finite element, or -1. Integer tests on the exponent bits: cheap
 * enough to scan billions of weights at memory speed. */
static int64_t first_nonfinite(const ts_tensor *t) {
    const uint8_t *p = t->data;
    if (ts_dtype_block(t->dtype) > 1) { /* a block is finite when its F16 scale is */
        size_t bs = ts_dtype_bytes(t->dtype, TS_QBLOCK);
        for (int64_t b = 0; b < t->numel / TS_QBLOCK; b++) {
            uint16_t h;
            memcpy(&h, p + (size_t)b * bs, 2);
            if ((h & 0x7c00) == 0x7c00) return b * TS_QBLOCK;
        }
        return -1;
    }
    if (t->dtype == TS_DTYPE_F32) {
        for (int64_t i = 0; i < t->numel; i++) {
            uint32_t u;
            memcpy(&u, p + 4 * i, 4);
            if ((u & 0x7f800000u) == 0x7f800000u) return i;
        }
    } else {
        uint16_t mask = t->dtype == TS_DTYPE_BF16 ? 0x7f80 : 0x7c00;
        for (int64_t i = 0; i < t->numel; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            if ((h & mask) == mask) return i;
        }
    }
    return -1;
}

ts_status ts_model_check_values(const ts_model *m, ts_error *err) {
    for (int i = 0; i < m->store.n_tensors; i++) {
        const ts_tensor *t = &m->store.tensors[i];
        int64_t k = first_nonfinite(t);
        if (k >= 0) {
            float v;
            ts_dtype_to_f32(t->dtype, t->data, (size_t)k, 1, &v);
            return ts_fail(err, TS_ERR_VALUE,
                           "%s: tensor \"%s\" element %lld is %s, expected a finite number",
                           t->file, t->name, (long long)k, isnan(v) ? "NaN" : (v > 0 ? "+Inf" : "-Inf"));
        }
    }
    return TS_OK;
}
