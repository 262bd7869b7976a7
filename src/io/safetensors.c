/* safetensors parser and header writer. Every length and offset from the file is checked
 * with overflow-safe arithmetic before use; tensors are views, never copies. */
#include "io/safetensors.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/json.h"

const char *ts_shape_str(const int64_t *shape, int ndim, char *buf, size_t len) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, len - k, "[");
    for (int i = 0; i < ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
    return buf;
}

void ts_tensors_free(ts_tensor *t, int n) {
    if (!t) return;
    for (int i = 0; i < n; i++) free(t[i].name);
    free(t);
}

/* Largest dimension we accept: far beyond any model, small enough that products of a few of
 * them cannot overflow before the explicit check below catches it. */
#define TS_MAX_DIM (INT64_C(1) << 40)

static ts_status parse_entry(const char *fname, const char *name, const json_t *v,
                             size_t data_size, size_t data_start, ts_tensor *t, ts_error *err) {
    if (!json_is_object(v))
        return ts_fail(err, TS_ERR_FORMAT, "%s: tensor \"%s\": entry is %s, expected an object",
                       fname, name, ts_json_type_name(v));
    const json_t *dt = json_object_get(v, "dtype");
    if (!json_is_string(dt))
        return ts_fail(err, TS_ERR_FORMAT, "%s: tensor \"%s\": \"dtype\" is %s, expected a string",
                       fname, name, ts_json_type_name(dt));
    int d = ts_dtype_parse(json_string_value(dt));
    if (d < 0)
        return ts_fail(err, TS_ERR_UNSUPPORTED,
                       "%s: tensor \"%s\": dtype \"%s\" is not supported, expected BF16, F16 or F32",
                       fname, name, json_string_value(dt));
    t->dtype = (ts_dtype)d;

    const json_t *sh = json_object_get(v, "shape");
    if (!json_is_array(sh))
        return ts_fail(err, TS_ERR_FORMAT, "%s: tensor \"%s\": \"shape\" is %s, expected an array",
                       fname, name, ts_json_type_name(sh));
    size_t nd = json_array_size(sh);
    if (nd > TS_MAX_DIMS)
        return ts_fail(err, TS_ERR_FORMAT, "%s: tensor \"%s\": %zu dimensions, expected at most %d",
                       fname, name, nd, TS_MAX_DIMS);
    t->ndim = (int)nd;
    int64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        const json_t *x = json_array_get(sh, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 ||
            json_integer_value(x) > TS_MAX_DIM)
            return ts_fail(err, TS_ERR_FORMAT,
                           "%s: tensor \"%s\": shape[%zu] is not an integer in [0, 2^40]", fname,
                           name, i);
        t->shape[i] = (int64_t)json_integer_value(x);
        if (t->shape[i] != 0 && numel > INT64_MAX / t->shape[i])
            return ts_fail(err, TS_ERR_FORMAT, "%s: tensor \"%s\": element count overflows",
                           fname, name);
        numel *= t->shape[i];
    }
    t->numel = numel;
    size_t esz = ts_dtype_size(t->dtype);
    if ((uint64_t)numel > SIZE_MAX / esz)
        return ts_fail(err, TS_ERR_FORMAT, "%s: tensor \"%s\": byte size overflows", fname, name);
    t->nbytes = (size_t)numel * esz;

    const json_t *off = json_object_get(v, "data_offsets");
    if (!json_is_array(off) || json_array_size(off) != 2 ||
        !json_is_integer(json_array_get(off, 0)) || !json_is_integer(json_array_get(off, 1)))
        return ts_fail(err, TS_ERR_FORMAT,
                       "%s: tensor \"%s\": \"data_offsets\" must be an array of two integers", fname,
                       name);
    json_int_t b = json_integer_value(json_array_get(off, 0));
    json_int_t e = json_integer_value(json_array_get(off, 1));
    if (b < 0 || e < b || (uint64_t)e > data_size)
        return ts_fail(err, TS_ERR_FORMAT,
                       "%s: tensor \"%s\": data_offsets [%lld, %lld] outside the data area of %zu "
                       "bytes (file truncated?)",
                       fname, name, (long long)b, (long long)e, data_size);
    if ((uint64_t)(e - b) != (uint64_t)t->nbytes) {
        char s[128];
        return ts_fail(err, TS_ERR_FORMAT,
                       "%s: tensor \"%s\": data_offsets span %lld bytes, expected %zu for %s %s",
                       fname, name, (long long)(e - b), t->nbytes, ts_dtype_name(t->dtype),
                       ts_shape_str(t->shape, t->ndim, s, sizeof s));
    }
    t->offset = data_start + (size_t)b;
    if (t->offset % esz != 0)
        return ts_fail(err, TS_ERR_FORMAT,
                       "%s: tensor \"%s\": data at file offset %zu is not aligned to its %zu-byte "
                       "elements",
                       fname, name, t->offset, esz);
    return TS_OK;
}

static int cmp_offset(const void *a, const void *b) {
    const ts_tensor *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

ts_status ts_st_parse(const uint8_t *buf, size_t size, const char *fname, ts_tensor **out,
                      int *n_out, ts_error *err) {
    *out = NULL;
    *n_out = 0;
    if (size < 8)
        return ts_fail(err, TS_ERR_FORMAT,
                       "%s: file is %zu bytes, too short for a safetensors header (8-byte length)",
                       fname, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > TS_ST_MAX_HEADER)
        return ts_fail(err, TS_ERR_FORMAT,
                       "%s: header length %llu is absurd, expected at most %u bytes", fname,
                       (unsigned long long)hlen, TS_ST_MAX_HEADER);
    if (hlen < 2)
        return ts_fail(err, TS_ERR_FORMAT, "%s: header length %llu, expected at least 2 (\"{}\")",
                       fname, (unsigned long long)hlen);
    if (hlen > size - 8)
        return ts_fail(err, TS_ERR_FORMAT,
                       "%s: header length %llu does not fit a file of %zu bytes (truncated?)",
                       fname, (unsigned long long)hlen, size);
    if (buf[8] != '{')
        return ts_fail(err, TS_ERR_FORMAT, "%s: header does not start with '{' (not safetensors?)",
                       fname);
    json_t *root;
    ts_status s = ts_json_parse((const char *)buf + 8, (size_t)hlen, fname, &root, err);
    if (s) return s;
    if (!json_is_object(root)) {
        json_decref(root);
        return ts_fail(err, TS_ERR_FORMAT, "%s: header is %s, expected a JSON object", fname,
                       ts_json_type_name(root));
    }
    size_t data_start = 8 + (size_t)hlen, data_size = size - data_start;
    size_t cap = json_object_size(root);
    ts_tensor *t = calloc(cap ? cap : 1, sizeof *t);
    if (!t) {
        json_decref(root);
        return ts_fail(err, TS_ERR_NOMEM, "%s: out of memory", fname);
    }
    int n = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(v)) {
                s = ts_fail(err, TS_ERR_FORMAT, "%s: \"__metadata__\" is %s, expected an object",
                            fname, ts_json_type_name(v));
                break;
            }
            continue;
        }
        if (key[0] == 0) {
            s = ts_fail(err, TS_ERR_FORMAT, "%s: a tensor has an empty name", fname);
            break;
        }
        s = parse_entry(fname, key, v, data_size, data_start, &t[n], err);
        if (s) break;
        t[n].name = strdup(key);
        if (!t[n].name) {
            s = ts_fail(err, TS_ERR_NOMEM, "%s: out of memory", fname);
            break;
        }
        t[n].data = buf + t[n].offset;
        t[n].file = fname;
        n++;
    }
    json_decref(root);
    if (!s && n > 1) {
        /* No two tensors may share bytes: sort by offset and compare neighbours. */
        ts_tensor *sorted = malloc((size_t)n * sizeof *sorted);
        if (!sorted) s = ts_fail(err, TS_ERR_NOMEM, "%s: out of memory", fname);
        else {
            memcpy(sorted, t, (size_t)n * sizeof *sorted);
            qsort(sorted, (size_t)n, sizeof *sorted, cmp_offset);
            /* Compare each tensor with the last non-empty one before it: an empty tensor in
             * between must not hide an overlap. */
            const ts_tensor *a = NULL;
            for (int i = 0; i < n && !s; i++) {
                const ts_tensor *b = &sorted[i];
                if (!b->nbytes) continue;
                if (a && b->offset < a->offset + a->nbytes)
                    s = ts_fail(err, TS_ERR_FORMAT,
                                "%s: tensors \"%s\" and \"%s\" overlap (data at %zu+%zu and %zu)",
                                fname, a->name, b->name, a->offset - data_start, a->nbytes,
                                b->offset - data_start);
                a = b;
            }
            free(sorted);
        }
    }
    if (s) {
        ts_tensors_free(t, n);
        return s;
    }
    *out = t;
    *n_out = n;
    return TS_OK;
}

size_t ts_st_entry_bytes(const ts_st_entry *e) {
    size_t n = ts_dtype_size(e->dtype);
    for (int i = 0; i < e->ndim; i++) n *= (size_t)e->shape[i];
    return n;
}

ts_status ts_st_write_header(FILE *f, const char *fname, const ts_st_entry *e, int n,
                             ts_error *err) {
    json_t *root = json_object(), *meta = json_object();
    if (!root || !meta) goto nomem;
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(root, "__metadata__", meta);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        json_t *o = json_object(), *sh = json_array(), *of = json_array();
        if (!o || !sh || !of) goto nomem;
        for (int d = 0; d < e[i].ndim; d++) json_array_append_new(sh, json_integer(e[i].shape[d]));
        size_t nb = ts_st_entry_bytes(&e[i]);
        json_array_append_new(of, json_integer((json_int_t)off));
        json_array_append_new(of, json_integer((json_int_t)(off + nb)));
        off += nb;
        json_object_set_new(o, "dtype", json_string(ts_dtype_name(e[i].dtype)));
        json_object_set_new(o, "shape", sh);
        json_object_set_new(o, "data_offsets", of);
        json_object_set_new(root, e[i].name, o);
    }
    char *txt = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!txt) return ts_fail(err, TS_ERR_NOMEM, "%s: out of memory", fname);
    size_t len = strlen(txt), padded = (len + 7) & ~(size_t)7;
    uint8_t lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int ok = fwrite(lenbuf, 1, 8, f) == 8 && fwrite(txt, 1, len, f) == len;
    for (size_t i = len; i < padded && ok; i++) ok = fputc(' ', f) != EOF;
    free(txt);
    if (!ok) return ts_fail(err, TS_ERR_IO, "%s: write failed", fname);
    return TS_OK;
nomem:
    json_decref(root);
    return ts_fail(err, TS_ERR_NOMEM, "%s: out of memory", fname);
}
