/* GGUF (versions 2 and 3): a little-endian header ("GGUF", version, tensor count, metadata
 * count), typed key/value metadata, one info record per tensor (name, dims with the fastest
 * first, ggml type, offset), then the data area at the next multiple of general.alignment.
 * The parser checks every count, length and offset against the buffer before anything is
 * handed out; metadata values and tensors are views into the buffer, never copies. */
#ifndef TS_IO_GGUF_H
#define TS_IO_GGUF_H
#include <stddef.h>
#include <stdint.h>

#include "io/mmap.h"
#include "io/safetensors.h"
#include "tessera.h"

/* Metadata value types, numbered as in the file. */
typedef enum ts_gguf_type {
    TS_GGUF_U8 = 0,
    TS_GGUF_I8 = 1,
    TS_GGUF_U16 = 2,
    TS_GGUF_I16 = 3,
    TS_GGUF_U32 = 4,
    TS_GGUF_I32 = 5,
    TS_GGUF_F32 = 6,
    TS_GGUF_BOOL = 7,
    TS_GGUF_STRING = 8,
    TS_GGUF_ARRAY = 9,
    TS_GGUF_U64 = 10,
    TS_GGUF_I64 = 11,
    TS_GGUF_F64 = 12,
    TS_GGUF_TYPE_COUNT
} ts_gguf_type;

typedef struct ts_gguf_kv {
    char *key;             /* owned, NUL-terminated */
    ts_gguf_type type;     /* for an array: TS_GGUF_ARRAY */
    ts_gguf_type arr_type; /* element type of an array */
    uint64_t n;            /* elements of an array; 1 otherwise */
    const uint8_t *val;    /* borrowed: the value (an array's first element, a string's length) */
    uint64_t *str_off;     /* owned, for arrays of strings: offset of element i from val */
} ts_gguf_kv;

/* Limits that keep hostile counts from turning into huge allocations or loops. */
#define TS_GGUF_MAX_KV (1u << 16)
#define TS_GGUF_MAX_TENSORS (1u << 20)
#define TS_GGUF_MAX_ARRAY (UINT64_C(1) << 26)
#define TS_GGUF_MAX_NAME 4096u

typedef struct ts_gguf {
    char *path; /* owned: used in messages */
    ts_mmap map; /* when opened from a file */
    uint32_t version;
    ts_gguf_kv *kv;
    int n_kv;
    /* In file order, under their GGUF names, shapes in row-major order (the file's dims
     * reversed: a (ne0 = cols, ne1 = rows) matrix is [rows, cols] here, as safetensors has it). */
    ts_tensor *tensors;
    int n_tensors;
    uint32_t alignment;
    uint64_t data_offset; /* file offset of the data area */
    const char *arch;     /* general.architecture, borrowed from kv (NUL-terminated copy) */
    char *arch_buf;
} ts_gguf;

/* Parses a whole GGUF image; views point into buf, so buf must outlive g, and buf must be
 * 4-byte aligned (tensor file offsets are checked to be multiples of their element size, so
 * the views are then aligned for typed loads). fname names the source in messages. */
ts_status ts_gguf_parse(const uint8_t *buf, size_t size, const char *fname, ts_gguf *g,
                        ts_error *err);
/* Maps path and parses it. */
ts_status ts_gguf_open(const char *path, ts_gguf *g, ts_error *err);
void ts_gguf_close(ts_gguf *g);
/* 1 when the file at path starts with the GGUF magic. */
int ts_gguf_is_file(const char *path);

const ts_gguf_kv *ts_gguf_find(const ts_gguf *g, const char *key);
const ts_tensor *ts_gguf_tensor(const ts_gguf *g, const char *name);
const char *ts_gguf_type_name(ts_gguf_type t);
/* Whether a token's text is one of the end-of-generation markers llama.cpp's vocabulary loader
 * knows by their text: 2 for <|eom_id|>, 1 for an end of turn or text (<|eot_id|>, <|im_end|>,
 * <|endoftext|>, ...), 0 otherwise. A GGUF's tokens so spelled end generation (as in llama.cpp). */
int ts_gguf_stop_marker(const char *text, size_t len);

/* Typed getters. Absent keys: required gives TS_ERR_FORMAT naming the key, otherwise *out =
 * def and TS_OK. Present keys must have a fitting type (any integer type for ints; any integer
 * or float type for numbers) and lie in [lo, hi]; messages name the file, the key and the
 * expected value. */
ts_status ts_gguf_get_int(const ts_gguf *g, const char *key, int required, int64_t def, int64_t lo,
                          int64_t hi, int64_t *out, ts_error *err);
ts_status ts_gguf_get_num(const ts_gguf *g, const char *key, int required, double def, double lo,
                          double hi, double *out, ts_error *err);
ts_status ts_gguf_get_bool(const ts_gguf *g, const char *key, int def, int *out, ts_error *err);
/* String value (not NUL-terminated in the file: use *len). Absent and not required: *s = NULL. */
ts_status ts_gguf_get_str(const ts_gguf *g, const char *key, int required, const char **s,
                          size_t *len, ts_error *err);
/* An array of elem_type (TS_GGUF_TYPE_COUNT: any); absent and not required: *kv = NULL. */
ts_status ts_gguf_get_arr(const ts_gguf *g, const char *key, int required, ts_gguf_type elem_type,
                          const ts_gguf_kv **kv, ts_error *err);

/* Element i of an array (no bounds check beyond i < kv->n, which the caller ensures). */
void ts_gguf_arr_str(const ts_gguf_kv *kv, uint64_t i, const char **s, size_t *len);
int64_t ts_gguf_arr_int(const ts_gguf_kv *kv, uint64_t i); /* integer element types */
double ts_gguf_arr_num(const ts_gguf_kv *kv, uint64_t i);  /* integer or float types */

/* ---- writing (synth, tests, fuzz seeds) ----
 * A minimal writer for the subset tessera produces: scalars, strings, arrays of numbers or
 * strings, and tensors of the types above laid out back to back. */
typedef struct ts_gguf_writer ts_gguf_writer;
ts_gguf_writer *ts_gguf_writer_new(void);
void ts_gguf_writer_free(ts_gguf_writer *w);
void ts_gguf_w_u32(ts_gguf_writer *w, const char *key, uint32_t v);
void ts_gguf_w_f32(ts_gguf_writer *w, const char *key, float v);
void ts_gguf_w_bool(ts_gguf_writer *w, const char *key, int v);
void ts_gguf_w_str(ts_gguf_writer *w, const char *key, const char *v);
/* n elements of type t (U8..F64 except strings/arrays), read from v in the file's layout. */
void ts_gguf_w_arr(ts_gguf_writer *w, const char *key, ts_gguf_type t, const void *v, uint64_t n);
void ts_gguf_w_arr_str(ts_gguf_writer *w, const char *key, const char *const *v, uint64_t n);
/* A metadata entry of a parsed file, copied as it is (any type, arrays of strings included). */
void ts_gguf_w_kv(ts_gguf_writer *w, const ts_gguf_kv *kv);
/* shape in row-major order (as ts_tensor has it); data holds ts_dtype_bytes(dtype, numel). */
void ts_gguf_w_tensor(ts_gguf_writer *w, const char *name, ts_dtype dtype, int ndim,
                      const int64_t *shape, const void *data);
/* Writes the file; fails with a message naming path on I/O or allocation failure. */
ts_status ts_gguf_writer_save(ts_gguf_writer *w, const char *path, ts_error *err);

#endif
