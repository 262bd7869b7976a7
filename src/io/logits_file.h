/* The logits file format shared by `tessera logits` and the HF golden fixtures:
 * int32 n_tokens, int32 n_vocab, then n_tokens x n_vocab float32, all little-endian.
 * Hidden-state files add a leading int32 n_states: (n_states, n_tokens, hidden). */
#ifndef TS_IO_LOGITS_FILE_H
#define TS_IO_LOGITS_FILE_H
#include "tessera.h"

ts_status ts_logits_write(const char *path, int n_tokens, int n_vocab, const float *data,
                          ts_error *err);
ts_status ts_hidden_write(const char *path, int n_states, int n_tokens, int hidden, const float *data,
                          ts_error *err);
/* *data is malloc'd; caller frees. */
ts_status ts_logits_read(const char *path, int *n_tokens, int *n_vocab, float **data,
                         ts_error *err);
ts_status ts_hidden_read(const char *path, int *n_states, int *n_tokens, int *hidden, float **data,
                         ts_error *err);

#endif
