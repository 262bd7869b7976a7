/* Fuzz target: ts_st_parse on arbitrary bytes. A parse that succeeds must hand out views that
 * lie inside the input (we read every tensor's first and last byte, which ASan checks) and a
 * parse that fails must say why. Built with libFuzzer (clang) or fuzz/standalone.c. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ts_tensor *t = NULL;
    int n = 0;
    ts_error err;
    err.msg[0] = 0;
    ts_status s = ts_st_parse(data, size, "fuzz.safetensors", &t, &n, &err);
    if (s != TS_OK) {
        /* Failure: no table, and a NUL-terminated message that is not empty. */
        if (t || n || err.msg[0] == 0 || memchr(err.msg, 0, sizeof err.msg) == NULL) abort();
        return 0;
    }
    volatile uint8_t sink = 0;
    for (int i = 0; i < n; i++) {
        const ts_tensor *x = &t[i];
        size_t esz = ts_dtype_size(x->dtype);
        if (!x->name || !x->name[0] || esz == 0 || x->ndim < 0 || x->ndim > TS_MAX_DIMS) abort();
        if (x->numel < 0 || x->nbytes != (size_t)x->numel * esz) abort();
        if (x->offset > size || x->nbytes > size - x->offset) abort();
        if ((const uint8_t *)x->data != data + x->offset || x->offset % esz != 0) abort();
        if (x->nbytes) {
            const uint8_t *p = x->data;
            sink ^= p[0];
            sink ^= p[x->nbytes - 1];
            float v[2];
            ts_dtype_to_f32(x->dtype, x->data, 0, 1, &v[0]);
            ts_dtype_to_f32(x->dtype, x->data, (size_t)x->numel - 1, 1, &v[1]);
        }
    }
    (void)sink;
    ts_tensors_free(t, n);
    return 0;
}
