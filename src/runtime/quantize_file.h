/* `tessera quantize MODEL OUT.gguf`: the whole file operation (checks on OUT, the tokenizer of
 * a directory, the export, a safe write, the read-back). */
#ifndef TS_RUNTIME_QUANTIZE_FILE_H
#define TS_RUNTIME_QUANTIZE_FILE_H
#include "model/gguf_export.h"

/* Writes model's weights quantized to `type` into out. Never overwrites an existing out unless
 * force, never the input itself (even with force), never leaves a partial out (written to a
 * temporary name, then renamed). Refusals name the file, the field or tensor and the expected
 * value: rows that are not whole blocks, a tokenizer that cannot be written, and so on. */
ts_status ts_quantize_file(const char *model, const char *out, ts_dtype type, int force, ts_quantize_report *rep,
                           ts_error *err);

#endif
