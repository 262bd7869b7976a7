/* Fuzz target: ts_gguf_parse on arbitrary bytes, then the metadata -> config mapping. A parse
 * that succeeds must hand out metadata and tensor views that lie inside the input (every
 * string's bytes, every tensor's first and last byte are read, which ASan checks); a failure
 * must say why. The file's vocabulary then goes through the GGUF tokenizer builders. Built
 * with libFuzzer (clang) or fuzz/standalone.c. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "model/gguf_model.h"
#include "tok/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int inside(const void *p, size_t n, const uint8_t *data, size_t size) {
    const uint8_t *q = p;
    return q >= data && q <= data + size && n <= (size_t)(data + size - q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ts_gguf g;
    ts_error err;
    err.msg[0] = 0;
    ts_status s = ts_gguf_parse(data, size, "fuzz.gguf", &g, &err);
    if (s != TS_OK) {
        if (g.tensors || g.kv || err.msg[0] == 0 || memchr(err.msg, 0, sizeof err.msg) == NULL) abort();
        return 0;
    }
    volatile uint8_t sink = 0;
    for (int i = 0; i < g.n_kv; i++) {
        const ts_gguf_kv *kv = &g.kv[i];
        if (!kv->key || !kv->key[0]) abort();
        if (kv->type == TS_GGUF_ARRAY && kv->arr_type == TS_GGUF_STRING)
            for (uint64_t j = 0; j < kv->n; j++) {
                const char *str;
                size_t len;
                ts_gguf_arr_str(kv, j, &str, &len);
                if (!inside(str, len, data, size)) abort();
                if (len) sink ^= (uint8_t)str[len - 1];
            }
        else if (kv->type == TS_GGUF_ARRAY && kv->n && kv->arr_type != TS_GGUF_BOOL)
        {
            double v = ts_gguf_arr_num(kv, kv->n - 1); /* any value: NaN, negative, huge */
            sink ^= (uint8_t)(v >= 0 && v < 256 ? (unsigned)v : 1u);
        }
    }
    for (int i = 0; i < g.n_tensors; i++) {
        const ts_tensor *t = &g.tensors[i];
        if (!t->name || !t->name[0] || t->numel < 1 || t->nbytes != ts_dtype_bytes(t->dtype, (uint64_t)t->numel))
            abort();
        if (!inside(t->data, t->nbytes, data, size) || (const uint8_t *)t->data != data + t->offset) abort();
        const uint8_t *p = t->data;
        sink ^= p[0];
        sink ^= p[t->nbytes - 1];
        float v[2];
        ts_dtype_to_f32(t->dtype, t->data, 0, 1, &v[0]);
        ts_dtype_to_f32(t->dtype, t->data, (size_t)t->numel - 1, 1, &v[1]);
    }
    ts_config c;
    err.msg[0] = 0;
    if (ts_config_from_gguf(&g, &c, &err) != TS_OK && err.msg[0] == 0) abort();
    /* the vocabulary arrays of a hostile file through the tokenizer builders */
    ts_tok *tok = NULL;
    err.msg[0] = 0;
    if (ts_tok_from_gguf(&g, &tok, &err) == TS_OK) {
        int32_t *ids = NULL;
        int n = 0;
        if (ts_tok_encode(tok, "Once upon a time <s>\n", 21, 1, &ids, &n, &err) == TS_OK) free(ids);
        ts_tok_free(tok);
    } else if (err.msg[0] == 0) {
        abort();
    }
    (void)sink;
    ts_gguf_close(&g);
    return 0;
}
