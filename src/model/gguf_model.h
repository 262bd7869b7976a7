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


/* ---- the inverse direction (writing a GGUF, model/gguf_export.c) ---- */
/* The GGUF name of an HF tensor name (malloc'd), or NULL when GGUF has no name for it. */
char *ts_gguf_name_from_hf(const char *hf);
/* The per-layer names in the converter's order: i < ts_gguf_n_layer_names(); hf selects the HF
 * suffix ("self_attn.q_proj.weight") instead of the GGUF one ("attn_q.weight"). */
int ts_gguf_n_layer_names(void);
const char *ts_gguf_layer_name(int i, int hf);
/* llama.cpp's Q/K row order for `llama`: GGUF row h*D + 2i + j holds HF row h*D + j*D/2 + i
 * (D = rows / heads). to_gguf 1: HF -> GGUF order (the converter's permute), 0: back. */
void ts_gguf_permute_rows(uint8_t *dst, const uint8_t *src, int64_t rows, size_t row_bytes, int heads,
                          int to_gguf);

#endif
