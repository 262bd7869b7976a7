/* Quantizing a model's weight matrices in memory: row by row through FP32 (the exact value of
 * any BF16 / F16 / F32 weight), so the result is the same bytes llama-quantize gives from the
 * same values. */
#include "model/quantize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int ts_tensor_quantizable(const ts_tensor *t) { return t->ndim == 2; }

ts_status ts_tensor_quantize(const ts_tensor *t, ts_dtype type, void **out, ts_error *err) {
    *out = NULL;
    const char *tn = ts_dtype_name(type);
    if (type != TS_DTYPE_Q8_0 && type != TS_DTYPE_Q4_0)
        return ts_fail(err, TS_ERR_ARG, "quantize: type %s, expected Q8_0 or Q4_0", tn);
    if (ts_dtype_block(t->dtype) > 1 && t->dtype != type)
        return ts_fail(err, TS_ERR_UNSUPPORTED, "%s: tensor \"%s\" is already %s, expected F32, F16 or BF16 "
                       "weights to quantize to %s (re-quantizing would round twice; start from the original)",
                       t->file, t->name, ts_dtype_name(t->dtype), tn);
    int64_t rows = t->shape[0], cols = t->numel / (rows ? rows : 1);
    if (cols % TS_QBLOCK)
        return ts_fail(err, TS_ERR_SHAPE, "%s: tensor \"%s\" has rows of %lld elements, expected a multiple of "
                       "%d to quantize to %s (whole blocks)", t->file, t->name, (long long)cols, TS_QBLOCK, tn);
    size_t rb = ts_dtype_bytes(type, (uint64_t)cols);
    uint8_t *q = malloc(rb * (size_t)rows);
    float *row = malloc((size_t)cols * sizeof *row);
    if (!q || !row) {
        free(q);
        free(row);
        return ts_fail(err, TS_ERR_NOMEM, "%s: out of memory quantizing \"%s\"", t->file, t->name);
    }
    ts_status s = TS_OK;
    for (int64_t r = 0; r < rows && !s; r++) {
        ts_dtype_to_f32(t->dtype, t->data, (size_t)(r * cols), (size_t)cols, row);
        int64_t bad;
        ts_quant_result qr = ts_quant_row(type, row, cols, q + (size_t)r * rb, &bad);
        if (qr == TS_QUANT_NONFINITE)
            s = ts_fail(err, TS_ERR_VALUE, "%s: tensor \"%s\" row %lld element %lld is %g, expected a finite number",
                        t->file, t->name, (long long)r, (long long)bad, row[bad]);
        else if (qr == TS_QUANT_RANGE)
            s = ts_fail(err, TS_ERR_VALUE, "%s: tensor \"%s\" row %lld elements %lld..%lld need a %s scale beyond "
                        "F16's 65504, expected weights of magnitude below %g", t->file, t->name, (long long)r,
                        (long long)bad, (long long)bad + TS_QBLOCK - 1, tn, type == TS_DTYPE_Q8_0 ? 65504.0 * 127 : 65504.0 * 8);
    }
    free(row);
    if (s) {
        free(q);
        return s;
    }
    *out = q;
    return TS_OK;
}

ts_status ts_model_quantize(ts_model *m, ts_dtype type, ts_error *err) {
    ts_store *st = &m->store;
    for (int i = 0; i < st->n_tensors; i++) {
        ts_tensor *t = &st->tensors[i];
        if (!ts_tensor_quantizable(t) || t->dtype == type) continue;
        /* rows that are not whole blocks stay as stored, as llama-quantize falls back for them
         * (stories260K's down projections, 172 wide) */
        if (t->shape[1] % TS_QBLOCK) {
            m->quant_kept++;
            continue;
        }
        void **grown = realloc(st->heap, (size_t)(st->n_heap + 1) * sizeof *grown);
        if (!grown) return ts_fail(err, TS_ERR_NOMEM, "%s: out of memory quantizing \"%s\"", t->file, t->name);
        st->heap = grown;
        void *q;
        ts_status s = ts_tensor_quantize(t, type, &q, err);
        if (s) return s;
        st->heap[st->n_heap++] = q;
        t->data = q;
        t->dtype = type;
        t->nbytes = ts_dtype_bytes(type, (uint64_t)t->numel);
        t->heap = 1;
    }
    snprintf(m->cfg.torch_dtype, sizeof m->cfg.torch_dtype, "%s", ts_dtype_name(type));
    m->quantized = (int)type;
    return TS_OK;
}
