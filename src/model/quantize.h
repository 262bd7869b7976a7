/* Quantized weights from a BF16 / F16 / F32 checkpoint: every 2-D weight matrix (embedding and
 * LM head included, as `llama-quantize --pure` does) becomes Q8_0 or Q4_0; 1-D norms and biases
 * stay as they are. Used at load time (`--quant`) and by `tessera quantize` (gguf_export.h). */
#ifndef TS_MODEL_QUANTIZE_H
#define TS_MODEL_QUANTIZE_H
#include "io/quant.h"
#include "model/model.h"

/* One tensor quantized into a new buffer (*out: caller frees, ts_dtype_bytes(type, numel)).
 * Refuses, naming the file and tensor: rows that are not whole blocks, non-finite values, a
 * block whose scale overflows F16, and a tensor already of the other quantized type. */
ts_status ts_tensor_quantize(const ts_tensor *t, ts_dtype type, void **out, ts_error *err);
/* 1 when t is what gets quantized: a 2-D matrix. */
int ts_tensor_quantizable(const ts_tensor *t);

/* Replaces every quantizable tensor of m's store by an owned quantized copy (ts_tensor.heap),
 * in place, so the model's views stay valid; tensors already of `type` are kept, and so are
 * matrices whose rows are not whole blocks (counted in m->quant_kept, as llama-quantize falls
 * back for them). The config's
 * torch_dtype then names the type. The oracle reads the copies through ts_dtype_to_f32, i.e. it
 * runs the dequantized weights exactly. */
ts_status ts_model_quantize(ts_model *m, ts_dtype type, ts_error *err);

#endif
