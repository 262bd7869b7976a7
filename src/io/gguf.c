/* GGUF parser. Every read goes through the cursor below, which checks the remaining length
 * first; counts are bounded before anything is allocated from them; tensor extents are
 * checked against the file size, the alignment and each other. */
#include "io/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static const struct {
    int ggml;
    ts_dtype dtype;
} k_supported[] = {
    {0, TS_DTYPE_F32}, {1, TS_DTYPE_F16}, {2, TS_DTYPE_Q4_0}, {8, TS_DTYPE_Q8_0}, {30, TS_DTYPE_BF16},
};

/* Names of the ggml types we refuse, so the message says what the file holds. */
static const char *ggml_type_name(uint32_t t) {
    static const char *names[] = {
        "F32",     "F16",    "Q4_0",   "Q4_1",  "Q4_2", "Q4_3",  "Q5_0",    "Q5_1",  "Q8_0",  "Q8_1",
        "Q2_K",    "Q3_K",   "Q4_K",   "Q5_K",  "Q6_K", "Q8_K",  "IQ2_XXS", "IQ2_XS", "IQ3_XXS",
        "IQ1_S",   "IQ4_NL", "IQ3_S",  "IQ2_S", "IQ4_XS", "I8",  "I16",     "I32",   "I64",   "F64",
        "IQ1_M",   "BF16",   "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4",
        "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
    return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

static const size_t k_scalar_size[TS_GGUF_TYPE_COUNT] = {
    [TS_GGUF_U8] = 1,  [TS_GGUF_I8] = 1,  [TS_GGUF_U16] = 2, [TS_GGUF_I16] = 2, [TS_GGUF_U32] = 4,
    [TS_GGUF_I32] = 4, [TS_GGUF_F32] = 4, [TS_GGUF_BOOL] = 1, [TS_GGUF_U64] = 8, [TS_GGUF_I64] = 8,
    [TS_GGUF_F64] = 8,
};

const char *ts_gguf_type_name(ts_gguf_type t) {
    static const char *names[TS_GGUF_TYPE_COUNT] = {"uint8", "int8",   "uint16", "int16", "uint32",
                                                    "int32", "float32", "bool",  "string", "array",
                                                    "uint64", "int64", "float64"};
    return (unsigned)t < TS_GGUF_TYPE_COUNT ? names[t] : "unknown";
}

typedef struct cursor {
    const uint8_t *buf;
    size_t size, pos;
    const char *fname;
    ts_error *err;
} cursor;

static ts_status truncated(cursor *c, const char *what) {
    return ts_fail(c->err, TS_ERR_FORMAT, "%s: truncated at byte %zu reading %s (file is %zu bytes)",
                   c->fname, c->pos, what, c->size);
}

static ts_status take(cursor *c, size_t n, const char *what, const uint8_t **p) {
    *p = NULL;
    if (n > c->size - c->pos) return truncated(c, what);
    *p = c->buf + c->pos;
    c->pos += n;
    return TS_OK;
}

static ts_status rd_u32(cursor *c, const char *what, uint32_t *v) {
    const uint8_t *p;
    *v = 0;
    ts_status s = take(c, 4, what, &p);
    if (!s) memcpy(v, p, 4);
    return s;
}

static ts_status rd_u64(cursor *c, const char *what, uint64_t *v) {
    const uint8_t *p;
    *v = 0;
    ts_status s = take(c, 8, what, &p);
    if (!s) memcpy(v, p, 8);
    return s;
}

/* A length-prefixed string; max bounds the length (names), UINT64_MAX for values. */
static ts_status rd_str(cursor *c, const char *what, uint64_t max, const uint8_t **p, uint64_t *len) {
    *p = NULL;
    *len = 0;
    ts_status s = rd_u64(c, what, len);
    if (s) return s;
    if (*len > max)
        return ts_fail(c->err, TS_ERR_FORMAT, "%s: %s at byte %zu is %llu bytes long, expected at most %llu",
                       c->fname, what, c->pos - 8, (unsigned long long)*len, (unsigned long long)max);
    return take(c, (size_t)*len, what, p);
}

static char *dup_n(const uint8_t *p, uint64_t n) {
    char *s = malloc((size_t)n + 1);
    if (s) {
        memcpy(s, p, (size_t)n);
        s[n] = 0;
    }
    return s;
}

/* Reads one value of type t (not an array) and checks it fits. */
static ts_status skip_scalar(cursor *c, ts_gguf_type t, const char *key) {
    const uint8_t *p;
    uint64_t len;
    if (t == TS_GGUF_STRING) return rd_str(c, key, UINT64_MAX, &p, &len);
    return take(c, k_scalar_size[t], key, &p);
}

static ts_status read_kv(cursor *c, ts_gguf_kv *kv) {
    const uint8_t *kp;
    uint64_t klen;
    uint32_t type;
    ts_status s = rd_str(c, "a metadata key", TS_GGUF_MAX_NAME, &kp, &klen);
    if (s) return s;
    if (klen == 0) return ts_fail(c->err, TS_ERR_FORMAT, "%s: empty metadata key at byte %zu", c->fname, c->pos - 8);
    if (memchr(kp, 0, (size_t)klen))
        return ts_fail(c->err, TS_ERR_FORMAT, "%s: metadata key at byte %zu contains a NUL byte", c->fname,
                       c->pos - (size_t)klen);
    if (!(kv->key = dup_n(kp, klen))) return ts_fail(c->err, TS_ERR_NOMEM, "%s: out of memory", c->fname);
    if ((s = rd_u32(c, kv->key, &type))) return s;
    if (type >= TS_GGUF_TYPE_COUNT)
        return ts_fail(c->err, TS_ERR_FORMAT, "%s: metadata \"%s\" has value type %u, expected 0..12", c->fname,
                       kv->key, type);
    kv->type = (ts_gguf_type)type;
    kv->n = 1;
    if (type != TS_GGUF_ARRAY) {
        kv->val = c->buf + c->pos;
        return skip_scalar(c, kv->type, kv->key);
    }
    uint32_t et;
    if ((s = rd_u32(c, kv->key, &et)) || (s = rd_u64(c, kv->key, &kv->n))) return s;
    if (et >= TS_GGUF_TYPE_COUNT || et == TS_GGUF_ARRAY)
        return ts_fail(c->err, TS_ERR_FORMAT,
                       "%s: metadata \"%s\" is an array of type %u, expected an array of numbers, bools or strings",
                       c->fname, kv->key, et);
    if (kv->n > TS_GGUF_MAX_ARRAY)
        return ts_fail(c->err, TS_ERR_FORMAT, "%s: metadata \"%s\" has %llu elements, expected at most %llu",
                       c->fname, kv->key, (unsigned long long)kv->n, (unsigned long long)TS_GGUF_MAX_ARRAY);
    kv->arr_type = (ts_gguf_type)et;
    kv->val = c->buf + c->pos;
    if (et != TS_GGUF_STRING) {
        const uint8_t *p;
        return take(c, (size_t)kv->n * k_scalar_size[et], kv->key, &p); /* n <= 2^26: no overflow */
    }
    /* Every string's length is checked now, and its offset kept for random access. */
    if (kv->n > (c->size - c->pos) / 8) return truncated(c, kv->key);
    if (!(kv->str_off = malloc((size_t)kv->n * sizeof *kv->str_off + 1)))
        return ts_fail(c->err, TS_ERR_NOMEM, "%s: out of memory", c->fname);
    for (uint64_t i = 0; i < kv->n; i++) {
        kv->str_off[i] = (uint64_t)(c->buf + c->pos - kv->val);
        if ((s = skip_scalar(c, TS_GGUF_STRING, kv->key))) return s;
    }
    return TS_OK;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Duplicate names (keys or tensors) make a file ambiguous: refused. */
static ts_status check_unique(char **names, int n, const char *fname, const char *what, ts_error *err) {
    if (n < 2) return TS_OK;
    char **sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted) return ts_fail(err, TS_ERR_NOMEM, "%s: out of memory", fname);
    memcpy(sorted, names, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_str_ptr);
    ts_status s = TS_OK;
    for (int i = 1; i < n && !s; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0)
            s = ts_fail(err, TS_ERR_FORMAT, "%s: %s \"%s\" appears twice", fname, what, sorted[i]);
    free(sorted);
    return s;
}

#define TS_GGUF_MAX_DIM (INT64_C(1) << 40)

static ts_status read_tensor_info(cursor *c, ts_tensor *t, uint64_t *offset) {
    const uint8_t *np;
    uint64_t nlen;
    uint32_t nd, type;
    ts_status s = rd_str(c, "a tensor name", TS_GGUF_MAX_NAME, &np, &nlen);
    if (s) return s;
    if (nlen == 0 || memchr(np, 0, (size_t)nlen))
        return ts_fail(c->err, TS_ERR_FORMAT, "%s: tensor name at byte %zu is empty or contains a NUL byte",
                       c->fname, c->pos - (size_t)nlen);
    if (!(t->name = dup_n(np, nlen))) return ts_fail(c->err, TS_ERR_NOMEM, "%s: out of memory", c->fname);
    if ((s = rd_u32(c, t->name, &nd))) return s;
    if (nd < 1 || nd > 4)
        return ts_fail(c->err, TS_ERR_FORMAT, "%s: tensor \"%s\" has %u dimensions, expected 1 to 4", c->fname,
                       t->name, nd);
    uint64_t ne[4];
    int64_t numel = 1;
    for (uint32_t i = 0; i < nd; i++) {
        if ((s = rd_u64(c, t->name, &ne[i]))) return s;
        if (ne[i] < 1 || ne[i] > (uint64_t)TS_GGUF_MAX_DIM)
            return ts_fail(c->err, TS_ERR_FORMAT, "%s: tensor \"%s\" dimension %u is %llu, expected 1 to 2^40",
                           c->fname, t->name, i, (unsigned long long)ne[i]);
        if (numel > TS_GGUF_MAX_DIM / (int64_t)ne[i])
            return ts_fail(c->err, TS_ERR_FORMAT, "%s: tensor \"%s\" has more than 2^40 elements", c->fname,
                           t->name);
        numel *= (int64_t)ne[i];
    }
    if ((s = rd_u32(c, t->name, &type)) || (s = rd_u64(c, t->name, offset))) return s;
    int found = -1;
    for (size_t i = 0; i < sizeof k_supported / sizeof k_supported[0]; i++)
        if ((uint32_t)k_supported[i].ggml == type) found = (int)i;
    if (found < 0)
        return ts_fail(c->err, TS_ERR_UNSUPPORTED,
                       "%s: tensor \"%s\" has type %s (ggml type %u), expected F32, F16, BF16, Q8_0 or Q4_0",
                       c->fname, t->name, ggml_type_name(type), type);
    t->dtype = k_supported[found].dtype;
    if (ne[0] % (uint64_t)ts_dtype_block(t->dtype))
        return ts_fail(c->err, TS_ERR_FORMAT, "%s: tensor \"%s\" of type %s has rows of %llu elements, expected a "
                       "multiple of %d", c->fname, t->name, ts_dtype_name(t->dtype),
                       (unsigned long long)ne[0], ts_dtype_block(t->dtype));
    t->ndim = (int)nd;
    for (uint32_t i = 0; i < nd; i++) t->shape[i] = (int64_t)ne[nd - 1 - i];
    t->numel = numel;
    t->nbytes = ts_dtype_bytes(t->dtype, (uint64_t)numel);
    return TS_OK;
}

static int cmp_offset(const void *a, const void *b) {
    const ts_tensor *x = *(ts_tensor *const *)a, *y = *(ts_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Data extents: inside the file, aligned, not overlapping. */
static ts_status check_extents(ts_gguf *g, const uint8_t *buf, size_t size, const uint64_t *rel,
                               ts_error *err) {
    for (int i = 0; i < g->n_tensors; i++) {
        ts_tensor *t = &g->tensors[i];
        if (rel[i] % g->alignment)
            return ts_fail(err, TS_ERR_FORMAT, "%s: tensor \"%s\" starts at data offset %llu, expected a multiple "
                           "of the alignment %u", g->path, t->name, (unsigned long long)rel[i], g->alignment);
        if (rel[i] > size - g->data_offset || t->nbytes > size - g->data_offset - rel[i])
            return ts_fail(err, TS_ERR_FORMAT, "%s: tensor \"%s\" (%zu bytes at data offset %llu) runs past the end "
                           "of the file (%zu bytes of data)", g->path, t->name, t->nbytes,
                           (unsigned long long)rel[i], size - (size_t)g->data_offset);
        t->offset = (size_t)(g->data_offset + rel[i]);
        /* Elements are read through typed pointers (an F32 rope_freqs, a zero-copy BF16
         * matrix): with general.alignment below 4 a tensor could start mid-element. The
         * mapping is page-aligned, so an aligned file offset is an aligned address. */
        size_t ealign = t->dtype == TS_DTYPE_F32 ? 4 : 2; /* F16, BF16; Q8_0/Q4_0: the F16 scale */
        if (t->offset % ealign)
            return ts_fail(err, TS_ERR_FORMAT, "%s: tensor \"%s\" (%s) starts at file offset %zu, expected a "
                           "multiple of %zu (general.alignment %u, data area at byte %llu)", g->path, t->name,
                           ts_dtype_name(t->dtype), t->offset, ealign, g->alignment,
                           (unsigned long long)g->data_offset);
        t->data = buf + t->offset;
        t->file = g->path;
    }
    if (g->n_tensors < 2) return TS_OK;
    ts_tensor **by = malloc((size_t)g->n_tensors * sizeof *by);
    if (!by) return ts_fail(err, TS_ERR_NOMEM, "%s: out of memory", g->path);
    for (int i = 0; i < g->n_tensors; i++) by[i] = &g->tensors[i];
    qsort(by, (size_t)g->n_tensors, sizeof *by, cmp_offset);
    ts_status s = TS_OK;
    for (int i = 1; i < g->n_tensors && !s; i++)
        if (by[i - 1]->offset + by[i - 1]->nbytes > by[i]->offset)
            s = ts_fail(err, TS_ERR_FORMAT, "%s: tensors \"%s\" and \"%s\" overlap in the data area", g->path,
                        by[i - 1]->name, by[i]->name);
    free(by);
    return s;
}

static ts_status parse(cursor *c, ts_gguf *g) {
    const uint8_t *magic;
    uint64_t n_tensors, n_kv;
    ts_status s = take(c, 4, "the magic", &magic);
    if (s) return s;
    if (memcmp(magic, "GGUF", 4) != 0)
        return ts_fail(c->err, TS_ERR_FORMAT, "%s: not a GGUF file (the first bytes are not \"GGUF\")", c->fname);
    if ((s = rd_u32(c, "the version", &g->version))) return s;
    if (g->version != 2 && g->version != 3)
        return ts_fail(c->err, TS_ERR_UNSUPPORTED, "%s: GGUF version %u is not supported, expected 2 or 3",
                       c->fname, g->version);
    if ((s = rd_u64(c, "the tensor count", &n_tensors)) || (s = rd_u64(c, "the metadata count", &n_kv))) return s;
    if (n_tensors > TS_GGUF_MAX_TENSORS || n_kv > TS_GGUF_MAX_KV)
        return ts_fail(c->err, TS_ERR_FORMAT, "%s: %llu tensors and %llu metadata entries, expected at most %u and %u",
                       c->fname, (unsigned long long)n_tensors, (unsigned long long)n_kv, TS_GGUF_MAX_TENSORS,
                       TS_GGUF_MAX_KV);
    /* Each entry takes at least 12 bytes: a hostile count cannot make us allocate much more
     * than the file itself. */
    if (n_kv > c->size / 12 || n_tensors > c->size / 12) return truncated(c, "the metadata");
    g->kv = calloc((size_t)n_kv + 1, sizeof *g->kv);
    g->tensors = calloc((size_t)n_tensors + 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) return ts_fail(c->err, TS_ERR_NOMEM, "%s: out of memory", c->fname);
    for (uint64_t i = 0; i < n_kv; i++) {
        s = read_kv(c, &g->kv[i]);
        g->n_kv = (int)i + 1; /* so that close frees what this entry allocated */
        if (s) return s;
    }
    char **names = malloc(((size_t)(n_kv > n_tensors ? n_kv : n_tensors) + 1) * sizeof *names);
    if (!names) return ts_fail(c->err, TS_ERR_NOMEM, "%s: out of memory", c->fname);
    for (int i = 0; i < g->n_kv; i++) names[i] = g->kv[i].key;
    s = check_unique(names, g->n_kv, c->fname, "metadata key", c->err);
    int64_t align = 32;
    if (!s) s = ts_gguf_get_int(g, "general.alignment", 0, 32, 1, 1 << 20, &align, c->err);
    if (!s && (align & (align - 1)))
        s = ts_fail(c->err, TS_ERR_FORMAT, "%s: general.alignment is %lld, expected a power of two", c->fname,
                    (long long)align);
    g->alignment = (uint32_t)align;
    const char *arch;
    size_t alen;
    if (!s) s = ts_gguf_get_str(g, "general.architecture", 0, &arch, &alen, c->err);
    /* used as a C string (the <arch>.* keys, the architecture table): "llama\0..." is not llama */
    if (!s && arch && memchr(arch, 0, alen))
        s = ts_fail(c->err, TS_ERR_FORMAT, "%s: metadata \"general.architecture\" (\"%.*s\"...) contains a NUL byte, "
                    "expected an architecture name", c->fname, (int)strnlen(arch, alen), arch);
    if (!s && arch && !(g->arch = g->arch_buf = dup_n((const uint8_t *)arch, alen)))
        s = ts_fail(c->err, TS_ERR_NOMEM, "%s: out of memory", c->fname);
    uint64_t *rel = s ? NULL : malloc(((size_t)n_tensors + 1) * sizeof *rel);
    if (!s && !rel) s = ts_fail(c->err, TS_ERR_NOMEM, "%s: out of memory", c->fname);
    for (uint64_t i = 0; i < n_tensors && !s; i++) {
        s = read_tensor_info(c, &g->tensors[i], &rel[i]);
        g->n_tensors = (int)i + 1;
    }
    if (!s) {
        for (int i = 0; i < g->n_tensors; i++) names[i] = g->tensors[i].name;
        s = check_unique(names, g->n_tensors, c->fname, "tensor", c->err);
    }
    free(names);
    if (!s) {
        g->data_offset = ((uint64_t)c->pos + g->alignment - 1) / g->alignment * g->alignment;
        if (g->n_tensors && g->data_offset > c->size)
            s = ts_fail(c->err, TS_ERR_FORMAT, "%s: the data area would start at byte %llu, past the end of the file "
                        "(%zu bytes)", c->fname, (unsigned long long)g->data_offset, c->size);
    }
    if (!s) s = check_extents(g, c->buf, c->size, rel, c->err);
    free(rel);
    return s;
}

ts_status ts_gguf_parse(const uint8_t *buf, size_t size, const char *fname, ts_gguf *g, ts_error *err) {
    memset(g, 0, sizeof *g);
    if (!(g->path = strdup(fname))) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    cursor c = {buf, buf ? size : 0, 0, g->path, err};
    ts_status s = parse(&c, g);
    if (s) ts_gguf_close(g);
    return s;
}

ts_status ts_gguf_open(const char *path, ts_gguf *g, ts_error *err) {
    ts_mmap m;
    ts_status s = ts_mmap_open(&m, path, err);
    if (s) {
        memset(g, 0, sizeof *g);
        return s;
    }
    s = ts_gguf_parse(m.data, m.size, path, g, err);
    if (s) ts_mmap_close(&m);
    else g->map = m;
    return s;
}

void ts_gguf_close(ts_gguf *g) {
    for (int i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str_off);
    }
    free(g->kv);
    ts_tensors_free(g->tensors, g->n_tensors);
    free(g->arch_buf);
    free(g->path);
    if (g->map.path || g->map.data) ts_mmap_close(&g->map);
    memset(g, 0, sizeof *g);
}

int ts_gguf_is_file(const char *path) {
    FILE *f = fopen(path, "rb");
    char m[4] = {0};
    int ok = f && fread(m, 1, 4, f) == 4 && memcmp(m, "GGUF", 4) == 0;
    if (f) fclose(f);
    return ok;
}

const ts_gguf_kv *ts_gguf_find(const ts_gguf *g, const char *key) {
    for (int i = 0; i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, key) == 0) return &g->kv[i];
    return NULL;
}

const ts_tensor *ts_gguf_tensor(const ts_gguf *g, const char *name) {
    for (int i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0) return &g->tensors[i];
    return NULL;
}

static int is_int_type(ts_gguf_type t) {
    return t <= TS_GGUF_I32 || t == TS_GGUF_U64 || t == TS_GGUF_I64;
}

/* The integer at p of type t; *big set when a uint64 does not fit in int64. */
static int64_t int_at(const uint8_t *p, ts_gguf_type t, int *big) {
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
    } v;
    memcpy(&v, p, k_scalar_size[t]);
    switch (t) {
    case TS_GGUF_U8: return v.u8;
    case TS_GGUF_I8: return v.i8;
    case TS_GGUF_U16: return v.u16;
    case TS_GGUF_I16: return v.i16;
    case TS_GGUF_U32: return v.u32;
    case TS_GGUF_I32: return v.i32;
    case TS_GGUF_I64: return v.i64;
    case TS_GGUF_U64:
        if (v.u64 > (uint64_t)INT64_MAX) *big = 1;
        return (int64_t)(v.u64 & (uint64_t)INT64_MAX);
    default: return 0;
    }
}

static double num_at(const uint8_t *p, ts_gguf_type t) {
    if (t == TS_GGUF_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    if (t == TS_GGUF_F64) {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    int big = 0;
    int64_t v = int_at(p, t, &big);
    return big ? (double)(uint64_t)v + 9223372036854775808.0 : (double)v;
}

static ts_status wrong_type(const ts_gguf *g, const ts_gguf_kv *kv, const char *expected, ts_error *err) {
    return ts_fail(err, TS_ERR_FORMAT, "%s: metadata \"%s\" is %s%s, expected %s", g->path, kv->key,
                   kv->type == TS_GGUF_ARRAY ? "an array of " : "", ts_gguf_type_name(kv->type == TS_GGUF_ARRAY ? kv->arr_type : kv->type),
                   expected);
}

static ts_status absent(const ts_gguf *g, const char *key, const char *expected, ts_error *err) {
    return ts_fail(err, TS_ERR_FORMAT, "%s: metadata \"%s\" is missing, expected %s", g->path, key, expected);
}

ts_status ts_gguf_get_int(const ts_gguf *g, const char *key, int required, int64_t def, int64_t lo,
                          int64_t hi, int64_t *out, ts_error *err) {
    const ts_gguf_kv *kv = ts_gguf_find(g, key);
    char want[96];
    snprintf(want, sizeof want, "an integer in [%lld, %lld]", (long long)lo, (long long)hi);
    if (!kv) {
        *out = def;
        return required ? absent(g, key, want, err) : TS_OK;
    }
    if (!is_int_type(kv->type)) return wrong_type(g, kv, want, err);
    int big = 0;
    int64_t v = int_at(kv->val, kv->type, &big);
    if (big || v < lo || v > hi)
        return ts_fail(err, TS_ERR_FORMAT, "%s: metadata \"%s\" is %s%lld, expected %s", g->path, key,
                       big ? "above 2^63: " : "", (long long)v, want);
    *out = v;
    return TS_OK;
}

ts_status ts_gguf_get_num(const ts_gguf *g, const char *key, int required, double def, double lo,
                          double hi, double *out, ts_error *err) {
    const ts_gguf_kv *kv = ts_gguf_find(g, key);
    char want[96];
    snprintf(want, sizeof want, "a number in [%g, %g]", lo, hi);
    if (!kv) {
        *out = def;
        return required ? absent(g, key, want, err) : TS_OK;
    }
    if (!is_int_type(kv->type) && kv->type != TS_GGUF_F32 && kv->type != TS_GGUF_F64)
        return wrong_type(g, kv, want, err);
    double v = num_at(kv->val, kv->type);
    if (!(v >= lo && v <= hi)) /* NaN fails too */
        return ts_fail(err, TS_ERR_FORMAT, "%s: metadata \"%s\" is %g, expected %s", g->path, key, v, want);
    *out = v;
    return TS_OK;
}

ts_status ts_gguf_get_bool(const ts_gguf *g, const char *key, int def, int *out, ts_error *err) {
    const ts_gguf_kv *kv = ts_gguf_find(g, key);
    *out = def;
    if (!kv) return TS_OK;
    if (kv->type != TS_GGUF_BOOL) return wrong_type(g, kv, "a bool", err);
    if (kv->val[0] > 1)
        return ts_fail(err, TS_ERR_FORMAT, "%s: metadata \"%s\" is the byte %u, expected a bool (0 or 1)", g->path,
                       key, kv->val[0]);
    *out = kv->val[0];
    return TS_OK;
}

ts_status ts_gguf_get_str(const ts_gguf *g, const char *key, int required, const char **s, size_t *len,
                          ts_error *err) {
    const ts_gguf_kv *kv = ts_gguf_find(g, key);
    *s = NULL;
    *len = 0;
    if (!kv) return required ? absent(g, key, "a string", err) : TS_OK;
    if (kv->type != TS_GGUF_STRING) return wrong_type(g, kv, "a string", err);
    uint64_t n;
    memcpy(&n, kv->val, 8);
    *s = (const char *)kv->val + 8;
    *len = (size_t)n;
    return TS_OK;
}

ts_status ts_gguf_get_arr(const ts_gguf *g, const char *key, int required, ts_gguf_type elem_type,
                          const ts_gguf_kv **out, ts_error *err) {
    const ts_gguf_kv *kv = ts_gguf_find(g, key);
    char want[64];
    snprintf(want, sizeof want, "an array of %s", elem_type == TS_GGUF_TYPE_COUNT ? "values" : ts_gguf_type_name(elem_type));
    *out = NULL;
    if (!kv) return required ? absent(g, key, want, err) : TS_OK;
    if (kv->type != TS_GGUF_ARRAY || (elem_type != TS_GGUF_TYPE_COUNT && kv->arr_type != elem_type))
        return wrong_type(g, kv, want, err);
    *out = kv;
    return TS_OK;
}

void ts_gguf_arr_str(const ts_gguf_kv *kv, uint64_t i, const char **s, size_t *len) {
    const uint8_t *p = kv->val + kv->str_off[i];
    uint64_t n;
    memcpy(&n, p, 8);
    *s = (const char *)p + 8;
    *len = (size_t)n;
}

int64_t ts_gguf_arr_int(const ts_gguf_kv *kv, uint64_t i) {
    int big = 0;
    return int_at(kv->val + i * k_scalar_size[kv->arr_type], kv->arr_type, &big);
}

double ts_gguf_arr_num(const ts_gguf_kv *kv, uint64_t i) {
    return num_at(kv->val + i * k_scalar_size[kv->arr_type], kv->arr_type);
}

int ts_gguf_stop_marker(const char *text, size_t len) {
    static const char *const marks[] = {"<|eom_id|>",    "<|eot_id|>", "<|im_end|>", "<|end|>",
                                        "<end_of_turn>", "<|endoftext|>", "<EOT>", "_<EOT>"};
    for (size_t k = 0; k < sizeof marks / sizeof marks[0]; k++)
        if (len == strlen(marks[k]) && !memcmp(text, marks[k], len)) return k ? 1 : 2;
    return 0;
}
