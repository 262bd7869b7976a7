/* jansson wrappers: parse with positions in error messages, typed getters with ranges. */
#include "io/json.h"

#include <math.h>
#include <stdlib.h>

#include "core/error.h"
#include "io/mmap.h"

const char *ts_json_type_name(const json_t *v) {
    if (!v) return "nothing";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "an unknown value";
}

ts_status ts_json_parse(const char *buf, size_t len, const char *what, json_t **out,
                        ts_error *err) {
    json_error_t je;
    *out = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!*out)
        return ts_fail(err, TS_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", what,
                       je.line, je.column, je.text);
    return TS_OK;
}

ts_status ts_json_load_file(const char *path, size_t max_size, json_t **out, ts_error *err) {
    char *buf;
    size_t len;
    ts_status s = ts_file_read_all(path, max_size, &buf, &len, err);
    if (s) return s;
    s = ts_json_parse(buf, len, path, out, err);
    free(buf);
    return s;
}

static const json_t *field(const json_t *obj, const char *key) {
    const json_t *v = json_object_get(obj, key);
    return (v && !json_is_null(v)) ? v : NULL;
}

ts_status ts_json_int(const json_t *obj, const char *key, const char *file, int required,
                      int64_t def, int64_t lo, int64_t hi, int64_t *out, ts_error *err) {
    const json_t *v = field(obj, key);
    if (!v) {
        if (required)
            return ts_fail(err, TS_ERR_FORMAT, "%s: field \"%s\" is missing, expected an integer",
                           file, key);
        *out = def;
        return TS_OK;
    }
    if (!json_is_integer(v))
        return ts_fail(err, TS_ERR_FORMAT, "%s: field \"%s\" is %s, expected an integer", file, key,
                       ts_json_type_name(v));
    int64_t x = (int64_t)json_integer_value(v);
    if (x < lo || x > hi)
        return ts_fail(err, TS_ERR_FORMAT,
                       "%s: field \"%s\" is %lld, expected an integer in [%lld, %lld]", file, key,
                       (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return TS_OK;
}

ts_status ts_json_num(const json_t *obj, const char *key, const char *file, int required,
                      double def, double lo, double hi, double *out, ts_error *err) {
    const json_t *v = field(obj, key);
    if (!v) {
        if (required)
            return ts_fail(err, TS_ERR_FORMAT, "%s: field \"%s\" is missing, expected a number",
                           file, key);
        *out = def;
        return TS_OK;
    }
    if (!json_is_number(v))
        return ts_fail(err, TS_ERR_FORMAT, "%s: field \"%s\" is %s, expected a number", file, key,
                       ts_json_type_name(v));
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi)
        return ts_fail(err, TS_ERR_FORMAT, "%s: field \"%s\" is %g, expected a number in [%g, %g]",
                       file, key, x, lo, hi);
    *out = x;
    return TS_OK;
}

ts_status ts_json_bool(const json_t *obj, const char *key, const char *file, int required, int def,
                       int *out, ts_error *err) {
    const json_t *v = field(obj, key);
    if (!v) {
        if (required)
            return ts_fail(err, TS_ERR_FORMAT, "%s: field \"%s\" is missing, expected a boolean",
                           file, key);
        *out = def;
        return TS_OK;
    }
    if (!json_is_boolean(v))
        return ts_fail(err, TS_ERR_FORMAT, "%s: field \"%s\" is %s, expected true or false", file,
                       key, ts_json_type_name(v));
    *out = json_is_true(v);
    return TS_OK;
}

ts_status ts_json_str(const json_t *obj, const char *key, const char *file, int required,
                      const char *def, const char **out, ts_error *err) {
    const json_t *v = field(obj, key);
    if (!v) {
        if (required)
            return ts_fail(err, TS_ERR_FORMAT, "%s: field \"%s\" is missing, expected a string",
                           file, key);
        *out = def;
        return TS_OK;
    }
    if (!json_is_string(v))
        return ts_fail(err, TS_ERR_FORMAT, "%s: field \"%s\" is %s, expected a string", file, key,
                       ts_json_type_name(v));
    *out = json_string_value(v);
    return TS_OK;
}
