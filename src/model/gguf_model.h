/* GGUF metadata and tensors mapped onto the model description a Hugging Face directory gives
 * (docs/gguf.md has the key and name tables). Used by ts_model_open for .gguf files. */
#ifndef TS_MODEL_GGUF_MODEL_H
#define TS_MODEL_GGUF_MODEL_H
#include "io/gguf.h"
#include "io/tensor_store.h"
#include "model/config.h"

/* The config a GGUF's metadata describes (architecture llama, qwen2 or qwen3). */
ts_status ts_config_from_gguf(const ts_gguf *g, ts_config *c, ts_error *err);
/* Moves g's file map into st and fills it with g's tensors under their HF names, Q/K rows of
 * `llama` files un-permuted into heap copies. st must then be indexed (ts_store_index). */
ts_status ts_store_from_gguf(ts_store *st, ts_gguf *g, const ts_config *c, ts_error *err);

#endif
