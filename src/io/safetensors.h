/* safetensors: an 8-byte little-endian header length N, N bytes of JSON describing each
 * tensor (dtype, shape, data_offsets relative to the data area), then the data area.
 * The parser checks everything against the buffer size before any view is handed out. */
#ifndef TS_IO_SAFETENSORS_H
#define TS_IO_SAFETENSORS_H
#include <stdint.h>
#include <stdio.h>

#include "io/dtype.h"
#include "tessera.h"

#define TS_MAX_DIMS 8
/* A header larger than this is refused: real ones are well under 1 MiB. */
#define TS_ST_MAX_HEADER (100u << 20)

typedef struct ts_tensor {
    char *name; /* owned by the table */
    ts_dtype dtype;
    int ndim;
    int64_t shape[TS_MAX_DIMS];
    int64_t numel;
    size_t nbytes;
    const void *data; /* borrowed from the mapped file */
    const char *file; /* borrowed: path of the file that holds it */
    size_t offset;    /* byte offset of data inside the file */
    int heap;         /* data is a heap copy its store owns (GGUF Q/K rows put back in HF
                         order), not file pages: never madvise'd away */
} ts_tensor;

/* Parses a whole safetensors file image. Views point into buf, so buf must outlive them.
 * fname is used in messages and stored (borrowed) in every tensor. */
ts_status ts_st_parse(const uint8_t *buf, size_t size, const char *fname, ts_tensor **out,
                      int *n_out, ts_error *err);
void ts_tensors_free(ts_tensor *t, int n);

/* Formats "[a, b, c]" into buf. */
const char *ts_shape_str(const int64_t *shape, int ndim, char *buf, size_t len);

/* ---- writing (synth, tests) ---- */
typedef struct ts_st_entry {
    const char *name;
    ts_dtype dtype;
    int ndim;
    int64_t shape[TS_MAX_DIMS];
} ts_st_entry;

/* Writes the length prefix and the JSON header (padded to 8 bytes) for entries laid out
 * back to back in the given order; the caller then writes each tensor's bytes in order. */
ts_status ts_st_write_header(FILE *f, const char *fname, const ts_st_entry *e, int n,
                             ts_error *err);
size_t ts_st_entry_bytes(const ts_st_entry *e);

#endif
