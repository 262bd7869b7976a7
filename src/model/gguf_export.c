/* A ts_model written back as a GGUF: the inverse of gguf_model.c. Metadata comes from the
 * config (general.architecture and the ARCH.* hyper-parameters ts_config_from_gguf reads),
 * llama3 RoPE scaling becomes the rope_freqs tensor llama.cpp's converter writes, tensors take
 * their GGUF names, and llama's Q/K rows go back into the converter's interleaved order, so the
 * file is an ordinary llama.cpp GGUF. Matrices are quantized (model/quantize.c); everything 1-D
 * is written as F32, as the converter does for norms and biases. */
#include "model/gguf_export.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/dtype.h"
#include "io/gguf.h"
#include "model/gguf_model.h"
#include "model/quantize.h"

/* llama.cpp's LLAMA_FTYPE_MOSTLY_* and GGML_QNT_VERSION, as llama-quantize records them. */
#define FTYPE_Q4_0 2
#define FTYPE_Q8_0 7
#define FTYPE_BF16 32 /* llama.cpp's LLAMA_FTYPE_MOSTLY_BF16: matrices BF16, 1-D tensors F32 */
#define QNT_VERSION 2

static const char *gguf_arch(ts_arch a) {
    return a == TS_ARCH_QWEN2 ? "qwen2" : a == TS_ARCH_QWEN3 ? "qwen3" : "llama";
}

static void arch_u32(ts_gguf_writer *w, const char *arch, const char *suffix, uint32_t v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, suffix);
    ts_gguf_w_u32(w, k, v);
}

static void arch_f32(ts_gguf_writer *w, const char *arch, const char *suffix, double v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, suffix);
    ts_gguf_w_f32(w, k, (float)v);
}

/* The hyper-parameters, inverse of ts_config_from_gguf. */
static void write_hparams(ts_gguf_writer *w, const ts_config *c) {
    const char *a = gguf_arch(c->arch);
    arch_u32(w, a, "context_length", (uint32_t)c->max_pos);
    arch_u32(w, a, "embedding_length", (uint32_t)c->n_embd);
    arch_u32(w, a, "feed_forward_length", (uint32_t)c->n_ff);
    arch_u32(w, a, "block_count", (uint32_t)c->n_layers);
    arch_u32(w, a, "attention.head_count", (uint32_t)c->n_heads);
    arch_u32(w, a, "attention.head_count_kv", (uint32_t)c->n_kv_heads);
    arch_u32(w, a, "attention.key_length", (uint32_t)c->head_dim);
    arch_u32(w, a, "attention.value_length", (uint32_t)c->head_dim);
    arch_u32(w, a, "rope.dimension_count", (uint32_t)c->head_dim);
    arch_f32(w, a, "rope.freq_base", c->rope_theta);
    arch_f32(w, a, "attention.layer_norm_rms_epsilon", c->rms_eps);
    arch_u32(w, a, "vocab_size", (uint32_t)c->n_vocab);
}

/* llama3 scaling as per-frequency divisors, computed as convert_hf_to_gguf.py does (LlamaModel.
 * generate_extra_tensors): wavelengths below original_context / high_freq_factor keep 1,
 * above original_context / low_freq_factor get factor, the band between is smoothed. */
static void llama3_divisors(const ts_config *c, float *div) {
    int d = c->head_dim;
    double lo_wl = c->rope_orig_max_pos / c->rope_low_freq_factor, hi_wl = c->rope_orig_max_pos / c->rope_high_freq_factor;
    for (int i = 0; i < d / 2; i++) {
        float freq = 1.0f / powf((float)c->rope_theta, (float)(2 * i) / (float)d); /* float32, as torch */
        double wl = 2 * 3.14159265358979323846 / freq;
        if (wl < hi_wl) div[i] = 1.0f;
        else if (wl > lo_wl) div[i] = (float)c->rope_factor;
        else {
            double smooth = (c->rope_orig_max_pos / wl - c->rope_low_freq_factor) /
                            (c->rope_high_freq_factor - c->rope_low_freq_factor);
            div[i] = (float)(1 / ((1 - smooth) / c->rope_factor + smooth));
        }
    }
}

/* A BF16 copy of an F32 / F16 matrix (rounded to nearest even, as the converters do); a
 * quantized one is refused: widening Q8_0 / Q4_0 to BF16 only makes the file bigger. */
static ts_status to_bf16(const ts_tensor *t, void **out, ts_error *err) {
    if (ts_dtype_block(t->dtype) > 1)
        return ts_fail(err, TS_ERR_UNSUPPORTED, "%s: tensor \"%s\" is %s, expected F32, F16 or BF16 weights to "
                       "write as BF16 (widening quantized weights adds bytes, not precision)",
                       t->file, t->name, ts_dtype_name(t->dtype));
    size_t n = (size_t)t->numel, chunk = 4096;
    uint16_t *b = malloc(n * sizeof *b);
    float *f = malloc(chunk * sizeof *f);
    if (!b || !f) {
        free(b);
        free(f);
        return ts_fail(err, TS_ERR_NOMEM, "%s: out of memory converting \"%s\" to BF16", t->file, t->name);
    }
    for (size_t i = 0; i < n; i += chunk) {
        size_t k = n - i < chunk ? n - i : chunk;
        ts_dtype_to_f32(t->dtype, t->data, i, k, f);
        for (size_t j = 0; j < k; j++) b[i + j] = ts_f32_to_bf16(f[j]);
    }
    free(f);
    *out = b;
    return TS_OK;
}

/* One tensor under its GGUF name: quantized when a matrix, else F32; llama's Q/K rows permuted
 * into the converter's order (rows are whole blocks, so permuting after quantizing is the same
 * as quantizing permuted rows). */
static ts_status write_tensor(ts_gguf_writer *w, const ts_model *m, const ts_tensor *t, const char *gname,
                              ts_dtype type, ts_quantize_report *rep, ts_error *err) {
    const ts_config *c = &m->cfg;
    void *data = NULL;
    ts_dtype dt;
    ts_status s = TS_OK;
    if (ts_tensor_quantizable(t)) {
        dt = type;
        if (t->dtype == type) {
            size_t n = t->nbytes;
            if ((data = malloc(n))) memcpy(data, t->data, n);
        } else if (type == TS_DTYPE_BF16) {
            if ((s = to_bf16(t, &data, err))) return s;
        } else if ((s = ts_tensor_quantize(t, type, &data, err))) {
            return s;
        }
    } else {
        dt = TS_DTYPE_F32;
        if ((data = malloc((size_t)t->numel * sizeof(float))))
            ts_dtype_to_f32(t->dtype, t->data, 0, (size_t)t->numel, data);
    }
    if (!data) return ts_fail(err, TS_ERR_NOMEM, "out of memory writing \"%s\"", gname);
    int heads = 0;
    if (c->arch == TS_ARCH_LLAMA && strstr(gname, ".attn_q.")) heads = c->n_heads;
    if (c->arch == TS_ARCH_LLAMA && strstr(gname, ".attn_k.")) heads = c->n_kv_heads;
    if (heads) {
        int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
        size_t rb = ts_dtype_bytes(dt, (uint64_t)cols);
        uint8_t *p = malloc(rb * (size_t)rows);
        if (!p) {
            free(data);
            return ts_fail(err, TS_ERR_NOMEM, "out of memory writing \"%s\"", gname);
        }
        ts_gguf_permute_rows(p, data, rows, rb, heads, 1);
        free(data);
        data = p;
    }
    ts_gguf_w_tensor(w, gname, dt, t->ndim, t->shape, data);
    free(data);
    if (dt == TS_DTYPE_F32) rep->n_f32++;
    else rep->n_quantized++;
    rep->bytes_weights += ts_dtype_bytes(dt, (uint64_t)t->numel);
    rep->params += (uint64_t)t->numel;
    return TS_OK;
}

static ts_status write_named(ts_gguf_writer *w, const ts_model *m, const char *hf, ts_dtype type,
                             ts_quantize_report *rep, ts_error *err) {
    const ts_tensor *t = ts_store_find(&m->store, hf);
    if (!t) return TS_OK; /* optional (biases, q/k norms): the binder already checked presence */
    char *g = ts_gguf_name_from_hf(hf);
    if (!g) return ts_fail(err, TS_ERR_UNSUPPORTED, "%s: tensor \"%s\" has no GGUF name", t->file, hf);
    ts_status s = write_tensor(w, m, t, g, type, rep, err);
    free(g);
    return s;
}

static ts_status write_tensors(ts_gguf_writer *w, const ts_model *m, ts_dtype type, ts_quantize_report *rep,
                               ts_error *err) {
    const ts_config *c = &m->cfg;
    if (c->rope_llama3 || c->rope_freq_div) {
        int64_t n = c->head_dim / 2;
        float *div = malloc((size_t)n * sizeof *div);
        if (!div) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
        if (c->rope_freq_div) memcpy(div, c->rope_freq_div, (size_t)n * sizeof *div);
        else llama3_divisors(c, div);
        ts_gguf_w_tensor(w, "rope_freqs.weight", TS_DTYPE_F32, 1, &n, div);
        free(div);
        rep->n_f32++;
    }
    ts_status s = write_named(w, m, "model.embed_tokens.weight", type, rep, err);
    char hf[256];
    for (int l = 0; l < c->n_layers && !s; l++)
        for (int i = 0; i < ts_gguf_n_layer_names() && !s; i++) {
            snprintf(hf, sizeof hf, "model.layers.%d.%s", l, ts_gguf_layer_name(i, 1));
            s = write_named(w, m, hf, type, rep, err);
        }
    if (!s) s = write_named(w, m, "model.norm.weight", type, rep, err);
    if (!s && !c->tied) s = write_named(w, m, "lm_head.weight", type, rep, err);
    return s;
}

static int has_prefix(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* general.* (but what this file restates) and tokenizer.* of a GGUF input, copied as they are
 * (a directory's tokenizer.json is the caller's: tok/ is not below model/). */
static ts_status write_meta(ts_gguf_writer *w, const ts_model *m, ts_dtype type, ts_quantize_report *rep,
                            ts_error *err) {
    const ts_config *c = &m->cfg;
    ts_gguf_w_str(w, "general.architecture", gguf_arch(c->arch));
    const ts_gguf *g = m->gguf;
    if (g) {
        for (int i = 0; i < g->n_kv; i++) {
            const char *k = g->kv[i].key;
            if (has_prefix(k, "general.") && strcmp(k, "general.architecture") && strcmp(k, "general.file_type") &&
                strcmp(k, "general.quantization_version") && strcmp(k, "general.alignment"))
                ts_gguf_w_kv(w, &g->kv[i]);
        }
    } else {
        const char *base = strrchr(m->dir, '/');
        base = base && base[1] ? base + 1 : m->dir;
        ts_gguf_w_str(w, "general.name", base);
    }
    ts_gguf_w_u32(w, "general.file_type",
                  type == TS_DTYPE_Q8_0 ? FTYPE_Q8_0 : type == TS_DTYPE_Q4_0 ? FTYPE_Q4_0 : FTYPE_BF16);
    ts_gguf_w_u32(w, "general.quantization_version", QNT_VERSION);
    write_hparams(w, c);
    if (g) {
        int have = 0;
        for (int i = 0; i < g->n_kv; i++)
            if (has_prefix(g->kv[i].key, "tokenizer.")) {
                ts_gguf_w_kv(w, &g->kv[i]);
                have |= !strcmp(g->kv[i].key, "tokenizer.ggml.model");
                rep->chat_template |= !strcmp(g->kv[i].key, "tokenizer.chat_template");
            }
        if (!have)
            return ts_fail(err, TS_ERR_FORMAT, "%s: no tokenizer (metadata \"tokenizer.ggml.model\"), expected one to "
                           "copy: a GGUF without a vocabulary does not load in llama.cpp", g->path);
        rep->tokenizer_from_gguf = 1;
    }
    return TS_OK;
}

ts_status ts_gguf_export(ts_gguf_writer *w, const ts_model *m, ts_dtype type, ts_quantize_report *rep,
                         ts_error *err) {
    if (type != TS_DTYPE_Q8_0 && type != TS_DTYPE_Q4_0 && type != TS_DTYPE_BF16)
        return ts_fail(err, TS_ERR_ARG, "quantize: type %s, expected Q8_0, Q4_0 or BF16", ts_dtype_name(type));
    ts_status s = write_meta(w, m, type, rep, err);
    return s ? s : write_tensors(w, m, type, rep, err);
}

