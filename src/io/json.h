/* JSON via jansson, with typed field getters whose errors name the file, the field, the
 * expected type or range and what was found. */
#ifndef TS_IO_JSON_H
#define TS_IO_JSON_H
#include <jansson.h>
#include <stdint.h>

#include "tessera.h"

/* Parses buf (len bytes, need not be NUL-terminated); duplicate keys are rejected. `what`
 * names the source in messages (a file path). Caller json_decref()s *out. */
ts_status ts_json_parse(const char *buf, size_t len, const char *what, json_t **out,
                        ts_error *err);
ts_status ts_json_load_file(const char *path, size_t max_size, json_t **out, ts_error *err);

/* Getters: a missing key (or JSON null) leaves *out = def when !required, else fails. A value of
 * the wrong type or outside [lo, hi] always fails. */
ts_status ts_json_int(const json_t *obj, const char *key, const char *file, int required,
                      int64_t def, int64_t lo, int64_t hi, int64_t *out, ts_error *err);
ts_status ts_json_num(const json_t *obj, const char *key, const char *file, int required,
                      double def, double lo, double hi, double *out, ts_error *err);
ts_status ts_json_bool(const json_t *obj, const char *key, const char *file, int required, int def,
                       int *out, ts_error *err);
/* *out is borrowed from obj (or def). */
ts_status ts_json_str(const json_t *obj, const char *key, const char *file, int required,
                      const char *def, const char **out, ts_error *err);

const char *ts_json_type_name(const json_t *v);

#endif
