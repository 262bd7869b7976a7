/* The weights of one checkpoint directory: model.safetensors, or the shards listed by
 * model.safetensors.index.json, each mmap'd once; one name-sorted table of borrowed views. */
#ifndef TS_IO_TENSOR_STORE_H
#define TS_IO_TENSOR_STORE_H
#include "io/mmap.h"
#include "io/safetensors.h"

typedef struct ts_store {
    ts_mmap *maps;
    int n_maps;
    ts_tensor *tensors; /* sorted by name */
    int n_tensors;
    int sharded;
    void **heap; /* owned buffers some tensors point into (ts_tensor.heap) */
    int n_heap;
} ts_store;

ts_status ts_store_open(ts_store *st, const char *dir, ts_error *err);
void ts_store_close(ts_store *st);
const ts_tensor *ts_store_find(const ts_store *st, const char *name);
/* Sorts the table by name and refuses duplicate names (done by ts_store_open; other builders
 * of a store call it themselves). */
ts_status ts_store_index(ts_store *st, ts_error *err);
/* Total bytes of all weight files. */
uint64_t ts_store_file_bytes(const ts_store *st);

#endif
