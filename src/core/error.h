/* Error reporting helpers shared by every module: format a message into a ts_error and
 * return the status, so failure paths are one line. */
#ifndef TS_CORE_ERROR_H
#define TS_CORE_ERROR_H
#include "tessera.h"

#if defined(__GNUC__)
#define TS_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TS_PRINTF(a, b)
#endif

/* Writes the message (if err is non-NULL) and returns s. */
ts_status ts_fail(ts_error *err, ts_status s, const char *fmt, ...) TS_PRINTF(3, 4);
/* Prefixes an existing message with more context ("while loading X: ..."). */
void ts_error_prefix(ts_error *err, const char *fmt, ...) TS_PRINTF(2, 3);

#endif
