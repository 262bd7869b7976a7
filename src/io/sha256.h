/* SHA-256 of files (OpenSSL's libcrypto does the hashing): model identity in a deployment
 * manifest, re-checked by the evaluator. */
#ifndef TS_IO_SHA256_H
#define TS_IO_SHA256_H
#include "tessera.h"

/* hex: 65 bytes (64 hex digits + NUL). */
ts_status ts_sha256_file(const char *path, char hex[65], ts_error *err);

#endif
