/* A small GGUF v3 writer: metadata and tensor records are serialized into memory as they are
 * added (an allocation failure is remembered and reported by save), tensor data is copied so
 * callers may free their buffers at once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/gguf.h"

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
} wbuf;

typedef struct wtensor {
    char *name;
    ts_dtype dtype;
    int ndim;
    int64_t shape[4];
    uint8_t *data;
    size_t nbytes;
} wtensor;

struct ts_gguf_writer {
    wbuf kv;
    uint64_t n_kv;
    wtensor *t;
    int n_t, cap_t;
    int failed;
};

#define ALIGN 32

static void put(ts_gguf_writer *w, wbuf *b, const void *p, size_t n) {
    if (w->failed || n == 0) return; /* p may be NULL then (an empty metadata buffer) */
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            w->failed = 1;
            return;
        }
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void put_u32(ts_gguf_writer *w, wbuf *b, uint32_t v) { put(w, b, &v, 4); }
static void put_u64(ts_gguf_writer *w, wbuf *b, uint64_t v) { put(w, b, &v, 8); }
static void put_str(ts_gguf_writer *w, wbuf *b, const char *s) {
    put_u64(w, b, strlen(s));
    put(w, b, s, strlen(s));
}

static void key(ts_gguf_writer *w, const char *k, ts_gguf_type t) {
    put_str(w, &w->kv, k);
    put_u32(w, &w->kv, (uint32_t)t);
    w->n_kv++;
}

ts_gguf_writer *ts_gguf_writer_new(void) { return calloc(1, sizeof(ts_gguf_writer)); }

void ts_gguf_writer_free(ts_gguf_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->t);
    free(w->kv.p);
    free(w);
}

void ts_gguf_w_u32(ts_gguf_writer *w, const char *k, uint32_t v) {
    key(w, k, TS_GGUF_U32);
    put_u32(w, &w->kv, v);
}

void ts_gguf_w_f32(ts_gguf_writer *w, const char *k, float v) {
    key(w, k, TS_GGUF_F32);
    put(w, &w->kv, &v, 4);
}

void ts_gguf_w_bool(ts_gguf_writer *w, const char *k, int v) {
    uint8_t b = v != 0;
    key(w, k, TS_GGUF_BOOL);
    put(w, &w->kv, &b, 1);
}

void ts_gguf_w_str(ts_gguf_writer *w, const char *k, const char *v) {
    key(w, k, TS_GGUF_STRING);
    put_str(w, &w->kv, v);
}

void ts_gguf_w_arr(ts_gguf_writer *w, const char *k, ts_gguf_type t, const void *v, uint64_t n) {
    static const size_t size[TS_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if ((unsigned)t >= TS_GGUF_TYPE_COUNT || !size[t]) {
        w->failed = 1;
        return;
    }
    key(w, k, TS_GGUF_ARRAY);
    put_u32(w, &w->kv, (uint32_t)t);
    put_u64(w, &w->kv, n);
    put(w, &w->kv, v, (size_t)n * size[t]);
}

void ts_gguf_w_arr_str(ts_gguf_writer *w, const char *k, const char *const *v, uint64_t n) {
    key(w, k, TS_GGUF_ARRAY);
    put_u32(w, &w->kv, TS_GGUF_STRING);
    put_u64(w, &w->kv, n);
    for (uint64_t i = 0; i < n; i++) put_str(w, &w->kv, v[i]);
}

void ts_gguf_w_kv(ts_gguf_writer *w, const ts_gguf_kv *kv) {
    static const size_t size[TS_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    size_t bytes;
    uint64_t len;
    key(w, kv->key, kv->type);
    if (kv->type == TS_GGUF_ARRAY) {
        put_u32(w, &w->kv, (uint32_t)kv->arr_type);
        put_u64(w, &w->kv, kv->n);
        if (kv->arr_type == TS_GGUF_STRING && kv->n) { /* up to the end of the last string */
            const char *last;
            size_t n;
            ts_gguf_arr_str(kv, kv->n - 1, &last, &n);
            bytes = (size_t)((const uint8_t *)last - kv->val) + n;
        } else {
            bytes = kv->arr_type < TS_GGUF_TYPE_COUNT ? (size_t)kv->n * size[kv->arr_type] : 0;
        }
    } else if (kv->type == TS_GGUF_STRING) {
        memcpy(&len, kv->val, 8);
        bytes = 8 + (size_t)len;
    } else {
        bytes = kv->type < TS_GGUF_TYPE_COUNT ? size[kv->type] : 0;
    }
    put(w, &w->kv, kv->val, bytes);
}

void ts_gguf_w_tensor(ts_gguf_writer *w, const char *name, ts_dtype dtype, int ndim, const int64_t *shape,
                      const void *data) {
    if (w->failed) return;
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    size_t nbytes = ts_dtype_bytes(dtype, (uint64_t)numel);
    if (ndim < 1 || ndim > 4 || !nbytes) {
        w->failed = 1;
        return;
    }
    if (w->n_t == w->cap_t) {
        int cap = w->cap_t ? 2 * w->cap_t : 16;
        wtensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) {
            w->failed = 1;
            return;
        }
        w->t = t, w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    t->name = strdup(name);
    t->data = malloc(nbytes);
    if (!t->name || !t->data) {
        free(t->name);
        free(t->data);
        w->failed = 1;
        return;
    }
    memcpy(t->data, data, nbytes);
    t->dtype = dtype, t->ndim = ndim, t->nbytes = nbytes;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    w->n_t++;
}

static uint32_t ggml_type(ts_dtype d) {
    switch (d) {
    case TS_DTYPE_F32: return 0;
    case TS_DTYPE_F16: return 1;
    case TS_DTYPE_Q4_0: return 2;
    case TS_DTYPE_Q8_0: return 8;
    default: return 30; /* BF16 */
    }
}

ts_status ts_gguf_writer_save(ts_gguf_writer *w, const char *path, ts_error *err) {
    wbuf h = {0};
    put(w, &h, "GGUF", 4);
    put_u32(w, &h, 3);
    put_u64(w, &h, (uint64_t)w->n_t);
    put_u64(w, &h, w->n_kv);
    put(w, &h, w->kv.p, w->kv.n);
    uint64_t off = 0;
    for (int i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(w, &h, t->name);
        put_u32(w, &h, (uint32_t)t->ndim);
        for (int d = t->ndim - 1; d >= 0; d--) put_u64(w, &h, (uint64_t)t->shape[d]); /* fastest first */
        put_u32(w, &h, ggml_type(t->dtype));
        put_u64(w, &h, off);
        off += (t->nbytes + ALIGN - 1) / ALIGN * ALIGN;
    }
    static const uint8_t zeros[ALIGN];
    put(w, &h, zeros, (ALIGN - h.n % ALIGN) % ALIGN);
    if (w->failed) {
        free(h.p);
        return ts_fail(err, TS_ERR_NOMEM, "%s: out of memory or an invalid entry while building the GGUF", path);
    }
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(h.p, 1, h.n, f) == h.n;
    for (int i = 0; i < w->n_t && ok; i++) {
        const wtensor *t = &w->t[i];
        ok = fwrite(t->data, 1, t->nbytes, f) == t->nbytes &&
             fwrite(zeros, 1, (ALIGN - t->nbytes % ALIGN) % ALIGN, f) == (ALIGN - t->nbytes % ALIGN) % ALIGN;
    }
    if (f && fclose(f) != 0) ok = 0;
    free(h.p);
    if (!ok) return ts_fail(err, TS_ERR_IO, "%s: cannot write the GGUF file", path);
    return TS_OK;
}
