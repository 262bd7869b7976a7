/* Read-only memory maps of model files. Every tensor view in tessera points into one of
 * these; the map owns the bytes, views borrow them. */
#ifndef TS_IO_MMAP_H
#define TS_IO_MMAP_H
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"

typedef struct ts_mmap {
    const uint8_t *data; /* NULL when size == 0 */
    size_t size;
    char *path; /* caller frees via ts_mmap_close */
} ts_mmap;

ts_status ts_mmap_open(ts_mmap *m, const char *path, ts_error *err);
void ts_mmap_close(ts_mmap *m);
/* Drops this process's page mappings of the file (the page cache keeps the bytes, and a later
 * read faults them back in): once a session has copied every weight, the mapped pages would
 * only double the resident set. */
void ts_mmap_release(const ts_mmap *m);

/* Reads a whole (small) file into a NUL-terminated malloc'd buffer; caller frees. max_size
 * guards against reading a huge file by mistake. */
ts_status ts_file_read_all(const char *path, size_t max_size, char **out, size_t *out_len,
                           ts_error *err);
int ts_file_exists(const char *path);
int ts_dir_exists(const char *path);
/* mkdir -p: creates path and any missing parents (mode 0755); 0 on success. */
int ts_mkdir_p(const char *path);
/* Joins dir and name into a malloc'd path; caller frees. NULL on allocation failure. */
char *ts_path_join(const char *dir, const char *name);

#endif
