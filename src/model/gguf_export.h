/* `tessera quantize`: a model (Hugging Face directory or GGUF) written as a GGUF v3 file with
 * Q8_0 or Q4_0 weight matrices, in the layout llama.cpp's converter + `llama-quantize --pure`
 * produce, so that tessera and llama.cpp both load it (docs/quantization.md). */
#ifndef TS_MODEL_GGUF_EXPORT_H
#define TS_MODEL_GGUF_EXPORT_H
#include "io/dtype.h"
#include "tessera.h"

typedef struct ts_quantize_report {
    int n_quantized, n_f32;   /* tensors written quantized / as F32 */
    uint64_t bytes_weights;   /* tensor bytes written */
    uint64_t params;          /* elements written */
    int tokenizer_from_gguf;  /* tokenizer.* copied from the input GGUF (else from tokenizer.json) */
    const char *pre;          /* tokenizer.ggml.pre written for a tokenizer.json (static string) */
    int chat_template;        /* tokenizer.chat_template written */
} ts_quantize_report;

/* Writes model's weights quantized to `type` into out. Never overwrites an existing out unless
 * force, never the input itself (even with force), never leaves a partial out (written to a
 * temporary name, then renamed). Refusals name the file, the field or tensor and the expected
 * value: rows that are not whole blocks, a tokenizer that cannot be written, and so on. */
ts_status ts_quantize_file(const char *model, const char *out, ts_dtype type, int force, ts_quantize_report *rep,
                           ts_error *err);

#endif
