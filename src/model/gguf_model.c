/* A GGUF file as a ts_model: its metadata becomes the ts_config that config.json would give,
 * its tensors take the Hugging Face names the binder expects, and for `llama` files the Q/K
 * rows that llama.cpp's converter interleaves are put back in HF's half-split order. After
 * that a GGUF model is bound, checked and run exactly like a safetensors one. */
#include "model/gguf_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define BIG (1 << 20)

static const struct {
    const char *gguf, *hf_class;
    ts_arch arch;
} k_archs[] = {
    {"llama", "LlamaForCausalLM", TS_ARCH_LLAMA},
    {"qwen2", "Qwen2ForCausalLM", TS_ARCH_QWEN2},
    {"qwen3", "Qwen3ForCausalLM", TS_ARCH_QWEN3},
};

/* GGUF tensor name (after "blk.N.") -> HF name (after "model.layers.N."), in the order
 * llama.cpp's converter writes a layer's tensors. */
static const char *const k_layer_names[][2] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_gate.bias", "mlp.gate_proj.bias"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_up.bias", "mlp.up_proj.bias"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"ffn_down.bias", "mlp.down_proj.bias"},
};

static const char *const k_top_names[][2] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

#define N_LAYER_NAMES (sizeof k_layer_names / sizeof k_layer_names[0])
#define N_TOP_NAMES (sizeof k_top_names / sizeof k_top_names[0])

char *ts_gguf_name_from_hf(const char *hf) {
    char buf[256];
    for (size_t i = 0; i < N_TOP_NAMES; i++)
        if (strcmp(hf, k_top_names[i][1]) == 0) return strdup(k_top_names[i][0]);
    int layer, used = 0;
    if (sscanf(hf, "model.layers.%d.%n", &layer, &used) == 1 && used > 0 && layer >= 0)
        for (size_t i = 0; i < N_LAYER_NAMES; i++)
            if (strcmp(hf + used, k_layer_names[i][1]) == 0) {
                snprintf(buf, sizeof buf, "blk.%d.%s", layer, k_layer_names[i][0]);
                return strdup(buf);
            }
    return NULL;
}

int ts_gguf_n_layer_names(void) { return (int)N_LAYER_NAMES; }
const char *ts_gguf_layer_name(int i, int hf) { return k_layer_names[i][hf != 0]; }

void ts_gguf_permute_rows(uint8_t *dst, const uint8_t *src, int64_t rows, size_t row_bytes, int heads,
                          int to_gguf) {
    int64_t D = rows / heads, half = D / 2;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t j = 0; j < 2; j++)
            for (int64_t i = 0; i < half; i++) {
                size_t hf_row = (size_t)(h * D + j * half + i), gguf_row = (size_t)(h * D + 2 * i + j);
                if (to_gguf) memcpy(dst + gguf_row * row_bytes, src + hf_row * row_bytes, row_bytes);
                else memcpy(dst + hf_row * row_bytes, src + gguf_row * row_bytes, row_bytes);
            }
}

/* "blk.N." in its one spelling (N decimal, no sign, space or leading zero, below 10^6): the
 * layer, and *used the prefix length; -1 otherwise. sscanf's %d would take "blk.00.", "blk.+0.",
 * "blk. 0." and overflow on "blk.4294967296." (undefined; it reads as layer 0 here). */
static int blk_layer(const char *g, size_t *used) {
    if (strncmp(g, "blk.", 4) != 0) return -1;
    size_t i = 4;
    int layer = 0;
    if (g[i] == '0' && g[i + 1] != '.') return -1;
    for (; g[i] >= '0' && g[i] <= '9'; i++) {
        if (i - 4 >= 6) return -1;
        layer = layer * 10 + (g[i] - '0');
    }
    if (i == 4 || g[i] != '.') return -1;
    *used = i + 1;
    return layer;
}

/* The HF name of a GGUF tensor, malloc'd (NULL: out of memory); *known 0 when the name is not
 * one a llama / qwen2 / qwen3 GGUF uses. */
static char *hf_name(const char *g, int *known) {
    char buf[256];
    *known = 1;
    for (size_t i = 0; i < N_TOP_NAMES; i++)
        if (strcmp(g, k_top_names[i][0]) == 0) return strdup(k_top_names[i][1]);
    size_t used = 0;
    int layer = blk_layer(g, &used);
    if (layer >= 0)
        for (size_t i = 0; i < N_LAYER_NAMES; i++)
            if (strcmp(g + used, k_layer_names[i][0]) == 0) {
                snprintf(buf, sizeof buf, "model.layers.%d.%s", layer, k_layer_names[i][1]);
                return strdup(buf);
            }
    *known = 0;
    return strdup(g);
}

/* Reads <arch>.<suffix>. */
static ts_status arch_int(const ts_gguf *g, const char *suffix, int required, int64_t def, int64_t lo,
                          int64_t hi, int64_t *out, ts_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", g->arch, suffix);
    return ts_gguf_get_int(g, key, required, def, lo, hi, out, err);
}

static ts_status arch_num(const ts_gguf *g, const char *suffix, int required, double def, double lo, double hi,
                          double *out, ts_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", g->arch, suffix);
    return ts_gguf_get_num(g, key, required, def, lo, hi, out, err);
}

/* A token id key: absent or llama.cpp's "none" (0xffffffff, or -1) give -1. */
static ts_status token_id(const ts_gguf *g, const char *key, int n_vocab, int *out, ts_error *err) {
    int64_t v;
    ts_status s = ts_gguf_get_int(g, key, 0, -1, -1, UINT32_MAX, &v, err);
    if (s) return s;
    if (v == UINT32_MAX) v = -1;
    if (v >= n_vocab)
        return ts_fail(err, TS_ERR_FORMAT, "%s: metadata \"%s\" is %lld, expected a token id in [0, %d)", g->path,
                       key, (long long)v, n_vocab);
    *out = (int)v;
    return TS_OK;
}

/* As llama.cpp's vocabulary loader does for a GGUF: a token spelled as one of the usual
 * end-of-generation markers ends generation too, whatever the eos/eot/eom keys say (converters
 * store one EOS id; Llama-3's <|eot_id|> and <|eom_id|>, Qwen's <|im_end|> and <|endoftext|> are
 * then found by their text), so generation stops where llama.cpp stops on the same file. */
static void add_eos_by_text(const ts_gguf *g, ts_config *c) {
    const ts_gguf_kv *kv = ts_gguf_find(g, "tokenizer.ggml.tokens");
    if (!kv || kv->type != TS_GGUF_ARRAY || kv->arr_type != TS_GGUF_STRING) return;
    uint64_t n = kv->n < (uint64_t)c->n_vocab ? kv->n : (uint64_t)c->n_vocab;
    for (uint64_t i = 0; i < n; i++) {
        const char *t;
        size_t len;
        ts_gguf_arr_str(kv, i, &t, &len);
        if (ts_gguf_stop_marker(t, len)) ts_config_add_eos(c, (int)i); /* past TS_MAX_EOS: dropped */
    }
}

static ts_status rope_settings(const ts_gguf *g, ts_config *c, ts_error *err) {
    ts_status s = arch_num(g, "rope.freq_base", 0, 10000.0, 1.0, 1e12, &c->rope_theta, err);
    if (s) return s;
    int64_t dims;
    if ((s = arch_int(g, "rope.dimension_count", 0, c->head_dim, 1, 4096, &dims, err))) return s;
    if (dims != c->head_dim)
        return ts_fail(err, TS_ERR_UNSUPPORTED, "%s: metadata \"%s.rope.dimension_count\" is %lld, expected the head "
                       "size %d (partial rotary embeddings are not supported)", g->path, g->arch, (long long)dims,
                       c->head_dim);
    char key[128];
    const char *type;
    size_t tlen;
    snprintf(key, sizeof key, "%s.rope.scaling.type", g->arch);
    if ((s = ts_gguf_get_str(g, key, 0, &type, &tlen, err))) return s;
    if (type && !(tlen == 4 && memcmp(type, "none", 4) == 0))
        return ts_fail(err, TS_ERR_UNSUPPORTED, "%s: metadata \"%s\" is \"%.*s\", expected \"none\" (only llama3 "
                       "scaling, given as a rope_freqs tensor, is supported)", g->path, key, (int)tlen, type);
    const ts_tensor *rf = ts_gguf_tensor(g, "rope_freqs.weight");
    if (!rf) return TS_OK;
    if (rf->dtype != TS_DTYPE_F32 || rf->ndim != 1 || rf->numel != c->head_dim / 2)
        return ts_fail(err, TS_ERR_SHAPE, "%s: tensor \"rope_freqs.weight\" is %s with %lld elements, expected F32 "
                       "with head_dim / 2 = %d", g->path, ts_dtype_name(rf->dtype), (long long)rf->numel,
                       c->head_dim / 2);
    const float *div = rf->data; /* data offsets are multiples of the alignment: aligned */
    for (int i = 0; i < c->head_dim / 2; i++)
        if (!(div[i] > 0 && isfinite(div[i])))
            return ts_fail(err, TS_ERR_VALUE, "%s: rope_freqs.weight[%d] is %g, expected a positive number", g->path,
                           i, div[i]);
    c->rope_freq_div = div;
    return TS_OK;
}

ts_status ts_config_from_gguf(const ts_gguf *g, ts_config *c, ts_error *err) {
    memset(c, 0, sizeof *c);
    c->gguf = 1;
    if (!g->arch) return ts_fail(err, TS_ERR_FORMAT, "%s: metadata \"general.architecture\" is missing, expected "
                                 "\"llama\", \"qwen2\" or \"qwen3\"", g->path);
    for (size_t i = 0; i < sizeof k_archs / sizeof k_archs[0]; i++)
        if (strcmp(g->arch, k_archs[i].gguf) == 0) c->arch = k_archs[i].arch, c->arch_name = k_archs[i].hf_class;
    if (!c->arch_name)
        return ts_fail(err, TS_ERR_UNSUPPORTED, "%s: general.architecture \"%s\" is not supported, expected \"llama\", "
                       "\"qwen2\" or \"qwen3\"", g->path, g->arch);
    const ts_tensor *embd = ts_gguf_tensor(g, "token_embd.weight");
    if (!embd || embd->ndim != 2)
        return ts_fail(err, TS_ERR_SHAPE, "%s: tensor \"token_embd.weight\" is %s, expected a 2-D embedding table",
                       g->path, embd ? "not 2-D" : "missing");
    int64_t hidden, ff, layers, heads, kv, hd, vhd, maxpos, vocab;
    ts_status s;
    if ((s = arch_int(g, "embedding_length", 1, 0, 1, BIG, &hidden, err)) ||
        (s = arch_int(g, "feed_forward_length", 1, 0, 1, BIG, &ff, err)) ||
        (s = arch_int(g, "block_count", 1, 0, 1, 4096, &layers, err)) ||
        (s = arch_int(g, "attention.head_count", 1, 0, 1, 4096, &heads, err)) ||
        (s = arch_int(g, "attention.head_count_kv", 0, heads, 1, heads, &kv, err)) ||
        (s = arch_int(g, "context_length", 1, 0, 1, 1 << 30, &maxpos, err)) ||
        (s = arch_int(g, "vocab_size", 0, embd->shape[0], 1, 1 << 24, &vocab, err)))
        return s;
    if (vocab != embd->shape[0])
        return ts_fail(err, TS_ERR_SHAPE, "%s: metadata \"%s.vocab_size\" is %lld, but token_embd.weight has %lld rows",
                       g->path, g->arch, (long long)vocab, (long long)embd->shape[0]);
    if (heads % kv)
        return ts_fail(err, TS_ERR_FORMAT, "%s: attention.head_count %lld is not a multiple of head_count_kv %lld",
                       g->path, (long long)heads, (long long)kv);
    if ((s = arch_int(g, "attention.key_length", 0, hidden / heads, 2, 4096, &hd, err)) ||
        (s = arch_int(g, "attention.value_length", 0, hd, 2, 4096, &vhd, err)))
        return s;
    /* hd < 2: the default hidden / heads skips the range check (embedding_length < head_count) */
    if (hd < 2 || hd % 2 || vhd != hd)
        return ts_fail(err, TS_ERR_FORMAT, "%s: attention.key_length %lld / value_length %lld, expected one even "
                       "head size of at least 2", g->path, (long long)hd, (long long)vhd);
    if (hd * heads > BIG) /* the bound config.json's head_dim x num_attention_heads has */
        return ts_fail(err, TS_ERR_FORMAT, "%s: attention.head_count %lld x key_length %lld = %lld, expected at most "
                       "%d", g->path, (long long)heads, (long long)hd, (long long)(hd * heads), BIG);
    c->n_embd = (int)hidden, c->n_ff = (int)ff, c->n_layers = (int)layers, c->n_heads = (int)heads;
    c->n_kv_heads = (int)kv, c->head_dim = (int)hd, c->n_vocab = (int)vocab, c->max_pos = (int)maxpos;
    if ((s = arch_num(g, "attention.layer_norm_rms_epsilon", 1, 0, 0.0, 1.0, &c->rms_eps, err)) ||
        (s = rope_settings(g, c, err)))
        return s;
    /* Features are what the file holds; the binder then insists every layer has them. */
    c->tied = ts_gguf_tensor(g, "output.weight") == NULL;
    int qb = ts_gguf_tensor(g, "blk.0.attn_q.bias") != NULL;
    c->qkv_bias = c->arch == TS_ARCH_QWEN2 ? 1 : qb;
    c->o_bias = ts_gguf_tensor(g, "blk.0.attn_output.bias") != NULL;
    c->mlp_bias = ts_gguf_tensor(g, "blk.0.ffn_gate.bias") != NULL;
    c->qk_norm = c->arch == TS_ARCH_QWEN3;
    int id;
    if ((s = token_id(g, "tokenizer.ggml.bos_token_id", c->n_vocab, &c->bos_id, err))) return s;
    static const char *eos_keys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                     "tokenizer.ggml.eom_token_id"};
    for (size_t i = 0; i < sizeof eos_keys / sizeof eos_keys[0]; i++) {
        if ((s = token_id(g, eos_keys[i], c->n_vocab, &id, err))) return s;
        if (id >= 0) ts_config_add_eos(c, id);
    }
    add_eos_by_text(g, c);
    /* The type of most weight bytes, as torch_dtype names a checkpoint's. */
    size_t bytes[TS_DTYPE_COUNT] = {0};
    for (int i = 0; i < g->n_tensors; i++) bytes[g->tensors[i].dtype] += g->tensors[i].nbytes;
    int best = 0;
    for (int i = 1; i < TS_DTYPE_COUNT; i++)
        if (bytes[i] > bytes[best]) best = i;
    snprintf(c->torch_dtype, sizeof c->torch_dtype, "%s", ts_dtype_name((ts_dtype)best));
    return TS_OK;
}

/* llama.cpp's converter stores each head's rows of a `llama` Q or K projection as interleaved
 * pairs (row 2i + j holds HF row j * D/2 + i) because its RoPE rotates adjacent pairs; ours, like
 * HF, rotates (i, i + D/2). Putting the rows back makes the same weights right for our RoPE. */
static ts_status unpermute(ts_store *st, ts_tensor *t, int heads, const char *gname, const char *path,
                           ts_error *err) {
    int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
    if (rows % (2 * heads)) return TS_OK; /* a wrong shape: the binder names it */
    size_t rb = ts_dtype_bytes(t->dtype, (uint64_t)cols);
    if (!rb) /* a 1-D Q8_0 / Q4_0 bias: its elements sit inside 32-element blocks */
        return ts_fail(err, TS_ERR_UNSUPPORTED, "%s: tensor \"%s\" is a 1-D %s tensor, expected F32, F16 or BF16 (the "
                       "rows of a llama Q/K bias are put back in HF order one element at a time, which a block type "
                       "cannot hold)", path, gname, ts_dtype_name(t->dtype));
    uint8_t *dst = malloc(t->nbytes);
    void **grown = realloc(st->heap, (size_t)(st->n_heap + 1) * sizeof *grown);
    if (grown) st->heap = grown;
    if (!dst || !grown) {
        free(dst);
        return ts_fail(err, TS_ERR_NOMEM, "%s: out of memory un-permuting \"%s\"", path, t->name);
    }
    st->heap[st->n_heap++] = dst;
    ts_gguf_permute_rows(dst, t->data, rows, rb, heads, 0);
    t->data = dst;
    t->heap = 1;
    return TS_OK;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

ts_status ts_store_from_gguf(ts_store *st, ts_gguf *g, const ts_config *c, ts_error *err) {
    memset(st, 0, sizeof *st);
    st->maps = calloc(1, sizeof *st->maps);
    st->tensors = calloc((size_t)g->n_tensors + 1, sizeof *st->tensors);
    if (!st->maps || !st->tensors) {
        free(st->maps);
        free(st->tensors);
        st->maps = NULL, st->tensors = NULL;
        return ts_fail(err, TS_ERR_NOMEM, "%s: out of memory", g->path);
    }
    /* The store owns the file from here on; g's views stay valid while the store lives. */
    st->maps[0] = g->map;
    st->n_maps = 1;
    memset(&g->map, 0, sizeof g->map);
    ts_status s = TS_OK;
    for (int i = 0; i < g->n_tensors && !s; i++) {
        const ts_tensor *src = &g->tensors[i];
        if (strcmp(src->name, "rope_freqs.weight") == 0) continue; /* read into the config */
        ts_tensor *t = &st->tensors[st->n_tensors];
        *t = *src;
        t->file = st->maps[0].path;
        int known;
        if (!(t->name = hf_name(src->name, &known))) {
            s = ts_fail(err, TS_ERR_NOMEM, "%s: out of memory", g->path);
            break;
        }
        st->n_tensors++;
        /* Refused here, not left to the binder: kept under its own name, a tensor that happens
         * to be spelled like a Hugging Face one ("lm_head.weight") would be bound. */
        if (!known) {
            s = ts_fail(err, TS_ERR_SHAPE, "%s: unexpected tensor \"%s\": not a tensor name of a GGUF llama, qwen2 "
                        "or qwen3 model (token_embd, output_norm, output, rope_freqs or blk.N.<name>, docs/gguf.md)",
                        g->path, src->name);
            break;
        }
        if (c->arch != TS_ARCH_LLAMA) continue;
        if (ends_with(t->name, "self_attn.q_proj.weight") || ends_with(t->name, "self_attn.q_proj.bias"))
            s = unpermute(st, t, c->n_heads, src->name, g->path, err);
        else if (ends_with(t->name, "self_attn.k_proj.weight") || ends_with(t->name, "self_attn.k_proj.bias"))
            s = unpermute(st, t, c->n_kv_heads, src->name, g->path, err);
    }
    return s;
}
