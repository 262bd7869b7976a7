/* Reading and writing the little-endian logits / hidden-state files. The header's sizes are
 * checked against the file length before anything is allocated. */
#include "io/logits_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/mmap.h"

static void put_i32(uint8_t *p, int32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)((uint32_t)v >> (8 * i));
}
static int32_t get_i32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

static ts_status write_dims(const char *path, int ndims, const int *dims, const float *data,
                            ts_error *err) {
    FILE *f = fopen(path, "wb");
    if (!f) return ts_fail(err, TS_ERR_IO, "%s: cannot create", path);
    uint8_t hdr[12];
    size_t n = 1;
    for (int i = 0; i < ndims; i++) {
        put_i32(hdr + 4 * i, dims[i]);
        n *= (size_t)dims[i];
    }
    /* x86 and every target we run on are little-endian: floats go out as they are. */
    int ok = fwrite(hdr, 4, (size_t)ndims, f) == (size_t)ndims && fwrite(data, sizeof(float), n, f) == n;
    ok = (fclose(f) == 0) && ok;
    if (!ok) return ts_fail(err, TS_ERR_IO, "%s: write failed (disk full?)", path);
    return TS_OK;
}

ts_status ts_logits_write(const char *path, int n_tokens, int n_vocab, const float *data,
                          ts_error *err) {
    int d[2] = {n_tokens, n_vocab};
    return write_dims(path, 2, d, data, err);
}

ts_status ts_hidden_write(const char *path, int n_states, int n_tokens, int hidden, const float *data,
                          ts_error *err) {
    int d[3] = {n_states, n_tokens, hidden};
    return write_dims(path, 3, d, data, err);
}

static ts_status read_dims(const char *path, int ndims, int *dims, float **data, ts_error *err) {
    ts_mmap m;
    ts_status s = ts_mmap_open(&m, path, err);
    if (s) return s;
    size_t hdr = 4 * (size_t)ndims;
    uint64_t count = 1;
    if (m.size < hdr) {
        s = ts_fail(err, TS_ERR_FORMAT, "%s: %zu bytes, too short for a %zu-byte header", path,
                    m.size, hdr);
        goto done;
    }
    for (int i = 0; i < ndims; i++) {
        dims[i] = get_i32(m.data + 4 * i);
        if (dims[i] <= 0 || dims[i] > (1 << 26)) {
            s = ts_fail(err, TS_ERR_FORMAT, "%s: header dimension %d is %d, expected 1..2^26", path,
                        i, dims[i]);
            goto done;
        }
        count *= (uint64_t)dims[i];
        if (count > ((uint64_t)1 << 40)) {
            s = ts_fail(err, TS_ERR_FORMAT, "%s: header dimensions are absurdly large", path);
            goto done;
        }
    }
    if (m.size != hdr + count * 4) {
        s = ts_fail(err, TS_ERR_FORMAT, "%s: %zu bytes, expected %llu for the header's dimensions",
                    path, m.size, (unsigned long long)(hdr + count * 4));
        goto done;
    }
    *data = malloc((size_t)count * 4);
    if (!*data) {
        s = ts_fail(err, TS_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    memcpy(*data, m.data + hdr, (size_t)count * 4);
done:
    ts_mmap_close(&m);
    return s;
}

ts_status ts_logits_read(const char *path, int *n_tokens, int *n_vocab, float **data,
                         ts_error *err) {
    int d[2];
    ts_status s = read_dims(path, 2, d, data, err);
    if (s) return s;
    *n_tokens = d[0];
    *n_vocab = d[1];
    return TS_OK;
}

ts_status ts_hidden_read(const char *path, int *n_states, int *n_tokens, int *hidden, float **data,
                         ts_error *err) {
    int d[3];
    ts_status s = read_dims(path, 3, d, data, err);
    if (s) return s;
    *n_states = d[0];
    *n_tokens = d[1];
    *hidden = d[2];
    return TS_OK;
}
