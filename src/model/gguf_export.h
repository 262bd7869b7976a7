/* A model written as a GGUF v3 with Q8_0, Q4_0 or BF16 weight matrices, in the layout llama.cpp's
 * converter (+ `llama-quantize --pure`) produce, so that tessera and llama.cpp both load it
 * (docs/quantization.md). The file itself: runtime/quantize_file.h. */
#ifndef TS_MODEL_GGUF_EXPORT_H
#define TS_MODEL_GGUF_EXPORT_H
#include "io/gguf.h"
#include "model/model.h"

typedef struct ts_quantize_report {
    int n_quantized, n_f32;   /* tensors written quantized / as F32 */
    uint64_t bytes_weights;   /* tensor bytes written */
    uint64_t params;          /* elements written */
    int tokenizer_from_gguf;  /* tokenizer.* copied from the input GGUF (else from tokenizer.json) */
    const char *pre;          /* tokenizer.ggml.pre written for a tokenizer.json (static string) */
    int chat_template;        /* tokenizer.chat_template written */
} ts_quantize_report;

/* Appends m's metadata (general.*, the ARCH.* hyper-parameters, a GGUF input's tokenizer.*
 * keys) and tensors (GGUF names and order, matrices quantized to `type`, the rest F32, llama Q/K
 * rows in the converter's order, rope_freqs for llama3 scaling) to w. A directory's tokenizer is
 * not written here (ts_tok_gguf_write). Counts go to rep (zeroed by the caller). */
ts_status ts_gguf_export(ts_gguf_writer *w, const ts_model *m, ts_dtype type, ts_quantize_report *rep,
                         ts_error *err);

#endif
