/* A tokenizer.json (byte-level BPE) as GGUF tokenizer metadata, laid out the way llama.cpp's
 * convert_hf_to_gguf.py writes it: tokens by id with holes up to the model's vocabulary size
 * filled by "[PADn]" (type unused), added tokens typed control when special and user-defined
 * otherwise, merges as "a b" strings, tokenizer.ggml.pre naming the pre-tokenizer family
 * (tok_gguf.c's table read backwards), BOS/EOS/padding ids, add_bos, and the chat template
 * from tokenizer_config.json. Reading the result back (ts_tok_from_gguf) gives the same ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/gguf.h"
#include "io/json.h"
#include "io/mmap.h"
#include "tok/tok_load.h"
#include "tok/tokenizer.h"

typedef struct tok_out {
    char **tokens;
    int32_t *types;
    int n;
    char **merges;
    size_t n_merges;
} tok_out;

static void tok_out_free(tok_out *o) {
    for (int i = 0; o->tokens && i < o->n; i++) free(o->tokens[i]);
    for (size_t i = 0; o->merges && i < o->n_merges; i++) free(o->merges[i]);
    free(o->tokens);
    free(o->types);
    free(o->merges);
}

/* A JSON string as a C string, refusing embedded NULs (GGUF token spellings cannot hold one). */
static ts_status set_token(tok_out *o, int64_t id, const json_t *s, int type, const char *file,
                           const char *where, ts_error *err) {
    if (id < 0 || id >= o->n)
        return ts_fail(err, TS_ERR_FORMAT, "%s: %s id %lld is outside [0, %d), expected an id below the model's "
                       "vocabulary size", file, where, (long long)id, o->n);
    if (!json_is_string(s) || strlen(json_string_value(s)) != json_string_length(s) || !json_string_length(s))
        return ts_fail(err, TS_ERR_FORMAT, "%s: %s token %lld is not a non-empty string without NUL", file, where,
                       (long long)id);
    free(o->tokens[id]);
    if (!(o->tokens[id] = strdup(json_string_value(s)))) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    o->types[id] = type;
    return TS_OK;
}

static ts_status collect(const json_t *root, const char *file, tok_out *o, ts_error *err) {
    const json_t *model = json_object_get(root, "model"), *vocab = json_object_get(model, "vocab");
    const json_t *added = json_object_get(root, "added_tokens"), *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab))
        return ts_fail(err, TS_ERR_FORMAT, "%s: \"model.vocab\" is %s, expected an object of token -> id", file,
                       ts_json_type_name(vocab));
    const char *k;
    const json_t *v;
    ts_status s = TS_OK;
    json_object_foreach((json_t *)vocab, k, v) {
        json_t *str = json_string(k);
        if (!str) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
        s = json_is_integer(v) ? set_token(o, json_integer_value(v), str, TS_TOK_TYPE_NORMAL, file, "model.vocab", err)
                               : ts_fail(err, TS_ERR_FORMAT, "%s: model.vocab[\"%s\"] is %s, expected an integer id",
                                         file, k, ts_json_type_name(v));
        json_decref(str);
        if (s) return s;
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i);
        int type = json_is_true(json_object_get(a, "special")) ? TS_TOK_TYPE_CONTROL : TS_TOK_TYPE_USER_DEFINED;
        if ((s = set_token(o, json_integer_value(json_object_get(a, "id")), json_object_get(a, "content"), type, file,
                           "added_tokens", err)))
            return s;
    }
    for (int i = 0; i < o->n; i++)
        if (!o->tokens[i]) {
            char b[32];
            snprintf(b, sizeof b, "[PAD%d]", i);
            if (!(o->tokens[i] = strdup(b))) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
            o->types[i] = TS_TOK_TYPE_UNUSED;
        }
    o->n_merges = json_array_size(merges);
    if (!(o->merges = calloc(o->n_merges + 1, sizeof *o->merges))) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < o->n_merges; i++) {
        const json_t *m = json_array_get(merges, i);
        const char *a = json_string_value(json_array_get(m, 0)), *b = json_string_value(json_array_get(m, 1));
        if (json_is_string(m)) {
            o->merges[i] = strdup(json_string_value(m));
        } else if (a && b && json_array_size(m) == 2) {
            if ((o->merges[i] = malloc(strlen(a) + strlen(b) + 2))) sprintf(o->merges[i], "%s %s", a, b);
        } else {
            return ts_fail(err, TS_ERR_FORMAT, "%s: model.merges[%zu] is %s, expected \"a b\" or [\"a\", \"b\"]", file,
                           i, ts_json_type_name(m));
        }
        if (!o->merges[i]) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    }
    return TS_OK;
}

/* tokenizer_config.json: integers beyond 64 bits (model_max_length often is 1e30) read as reals. */
static ts_status load_side_json(const char *path, json_t **out, ts_error *err) {
    char *buf;
    size_t len;
    ts_status s = ts_file_read_all(path, 64 << 20, &buf, &len, err);
    if (s) return s;
    json_error_t je;
    *out = json_loadb(buf, len, JSON_DECODE_INT_AS_REAL, &je);
    free(buf);
    if (!*out)
        return ts_fail(err, TS_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", path, je.line, je.column,
                       je.text);
    return TS_OK;
}

/* The id of tokenizer_config.json's `key` token (a string or {"content": ...}), or -1. */
static int32_t config_token(const ts_tok *t, const json_t *cfg, const char *key) {
    const json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!json_is_string(v)) return -1;
    return ts_tok_token_id(t, json_string_value(v), json_string_length(v));
}

/* tokenizer_config.json's chat_template: a string, or a list of {name, template} (the "default"
 * one); else a chat_template.jinja next to it (newer transformers save it there). */
static ts_status chat_template(ts_gguf_writer *w, const json_t *cfg, const char *dir, ts_error *err) {
    const json_t *ct = json_object_get(cfg, "chat_template");
    for (size_t i = 0; i < json_array_size(ct); i++) {
        const json_t *e = json_array_get(ct, i);
        const char *name = json_string_value(json_object_get(e, "name"));
        if (name && !strcmp(name, "default")) ct = json_object_get(e, "template");
    }
    if (json_is_string(ct)) {
        ts_gguf_w_str(w, "tokenizer.chat_template", json_string_value(ct));
        return TS_OK;
    }
    char *jinja = ts_path_join(dir, "chat_template.jinja");
    if (!jinja) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    ts_status s = TS_OK;
    if (ts_file_exists(jinja)) {
        ts_mmap map;
        if (!(s = ts_mmap_open(&map, jinja, err))) {
            char *text = malloc(map.size + 1);
            if (!text) s = ts_fail(err, TS_ERR_NOMEM, "out of memory");
            else {
                memcpy(text, map.data, map.size);
                text[map.size] = 0;
                ts_gguf_w_str(w, "tokenizer.chat_template", text);
                free(text);
            }
            ts_mmap_close(&map);
        }
    }
    free(jinja);
    return s;
}

/* The model's end-of-sequence ids besides the tokenizer's EOS in the two keys GGUF has for more:
 * <|eom_id|> as eom, an end-of-turn marker (<|eot_id|>, <|im_end|>, ...) as eot, then any other
 * id into a key still free. Readers that know the markers by their text (llama.cpp, tessera)
 * find those anyway; the keys carry the others (a Llama-3.0 vocabulary's reserved 128008). */
static void stop_keys(ts_gguf_writer *w, const tok_out *o, int eos, const int *stop, int n_stop) {
    int key[2] = {-1, -1}; /* eot, eom */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n_stop; i++) {
            int id = stop[i];
            if (id < 0 || id >= o->n || id == eos || id == key[0] || id == key[1]) continue;
            int m = ts_gguf_stop_marker(o->tokens[id], strlen(o->tokens[id]));
            if (pass == 0 && m && key[m - 1] < 0) key[m - 1] = id;
            else if (pass == 1 && key[0] < 0) key[0] = id;
            else if (pass == 1 && key[1] < 0) key[1] = id;
        }
    if (key[0] >= 0) ts_gguf_w_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)key[0]);
    if (key[1] >= 0) ts_gguf_w_u32(w, "tokenizer.ggml.eom_token_id", (uint32_t)key[1]);
}

ts_status ts_tok_gguf_write(ts_gguf_writer *w, const char *path, int n_vocab, const int *stop_ids, int n_stop,
                            const char *pre, const char **pre_used, ts_error *err) {
    int is_dir = ts_dir_exists(path);
    char *json_path = is_dir ? ts_path_join(path, "tokenizer.json") : strdup(path);
    char *dir = is_dir ? strdup(path) : strdup(path);
    if (!json_path || !dir) {
        free(json_path);
        free(dir);
        return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    }
    if (!is_dir) { /* the directory the tokenizer.json lives in */
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else strcpy(dir, ".");
    }
    json_t *root = NULL, *cfg = NULL;
    ts_tok *t = NULL;
    tok_out o = {0};
    ts_status s = ts_json_load_file(json_path, (size_t)1 << 30, &root, err);
    if (!s) s = ts_tok_load(path, &t, err);
    const json_t *model = json_object_get(root, "model");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    if (!s && (!mtype || strcmp(mtype, "BPE") || json_is_true(json_object_get(model, "byte_fallback"))))
        s = ts_fail(err, TS_ERR_UNSUPPORTED, "%s: \"model\" is %s%s, expected a byte-level BPE (GGUF tokenizer "
                    "\"gpt2\"), the kind tessera writes; SentencePiece vocabularies need the original GGUF or "
                    "llama.cpp's converter", json_path, mtype ? mtype : "(no type)",
                    json_is_true(json_object_get(model, "byte_fallback")) ? " with byte_fallback (SentencePiece style)" : "");
    if (!s && !pre && !(pre = tok_gguf_pre_for_json(root)))
        s = ts_fail(err, TS_ERR_UNSUPPORTED, "%s: \"pre_tokenizer\" (with its normalizer and model.ignore_merges) is "
                    "not one tessera can name in tokenizer.ggml.pre, expected the Llama-3, Qwen2, GPT-2 or SmolLM "
                    "byte-level family (docs/tokenizer.md)", json_path);
    if (!s && n_vocab <= 0) n_vocab = ts_tok_n_vocab(t);
    if (!s && n_vocab < ts_tok_n_vocab(t))
        s = ts_fail(err, TS_ERR_SHAPE, "%s: %d tokens, but the model's embedding has %d rows, expected at most as "
                    "many tokens as rows", json_path, ts_tok_n_vocab(t), n_vocab);
    if (!s) {
        o.n = n_vocab;
        o.tokens = calloc((size_t)o.n, sizeof *o.tokens);
        o.types = calloc((size_t)o.n, sizeof *o.types);
        s = o.tokens && o.types ? collect(root, json_path, &o, err) : ts_fail(err, TS_ERR_NOMEM, "out of memory");
    }
    char *cfg_path = s ? NULL : ts_path_join(dir, "tokenizer_config.json");
    if (cfg_path && ts_file_exists(cfg_path)) s = load_side_json(cfg_path, &cfg, err);
    free(cfg_path);
    if (!s) {
        ts_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
        ts_gguf_w_str(w, "tokenizer.ggml.pre", pre);
        ts_gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)o.tokens, (uint64_t)o.n);
        ts_gguf_w_arr(w, "tokenizer.ggml.token_type", TS_GGUF_I32, o.types, (uint64_t)o.n);
        ts_gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)o.merges, o.n_merges);
        if (ts_tok_bos(t) >= 0) ts_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)ts_tok_bos(t));
        if (ts_tok_eos(t) >= 0) ts_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)ts_tok_eos(t));
        stop_keys(w, &o, ts_tok_eos(t), stop_ids, n_stop);
        int32_t pad = config_token(t, cfg, "pad_token");
        if (pad >= 0) ts_gguf_w_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)pad);
        ts_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", ts_tok_add_bos(t));
        s = chat_template(w, cfg, dir, err);
        if (pre_used) *pre_used = pre;
    }
    tok_out_free(&o);
    ts_tok_free(t);
    json_decref(root);
    json_decref(cfg);
    free(json_path);
    free(dir);
    return s;
}
