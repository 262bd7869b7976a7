/* ts_status names and the message helpers declared in core/error.h. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *ts_status_name(ts_status s) {
    switch (s) {
    case TS_OK: return "ok";
    case TS_ERR_ARG: return "invalid argument";
    case TS_ERR_IO: return "i/o error";
    case TS_ERR_FORMAT: return "malformed file";
    case TS_ERR_UNSUPPORTED: return "unsupported";
    case TS_ERR_SHAPE: return "tensor/shape mismatch";
    case TS_ERR_VALUE: return "non-finite value";
    case TS_ERR_NOMEM: return "out of memory";
    case TS_ERR_GATE: return "gate failed";
    }
    return "unknown status";
}

const char *ts_version(void) { return TS_VERSION; }

ts_status ts_fail(ts_error *err, ts_status s, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return s;
}

void ts_error_prefix(ts_error *err, const char *fmt, ...) {
    if (!err) return;
    char prefix[512], old[TS_ERROR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    size_t k = strlen(prefix);
    if (k > sizeof err->msg - 3) k = sizeof err->msg - 3;
    memcpy(err->msg, prefix, k);
    memcpy(err->msg + k, ": ", 2);
    size_t rest = sizeof err->msg - k - 3, n = strlen(old);
    if (n > rest) n = rest;
    memcpy(err->msg + k + 2, old, n);
    err->msg[k + 2 + n] = 0;
}
