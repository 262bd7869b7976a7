/* Streams a file through EVP SHA-256 in 4 MiB reads (no mmap: hashing must not pull a
 * multi-GB checkpoint into this process's resident set). */
#include "io/sha256.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

ts_status ts_sha256_file(const char *path, char hex[65], ts_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return ts_fail(err, TS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    enum { CHUNK = 4 << 20 };
    unsigned char *buf = malloc(CHUNK);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    ts_status s = TS_OK;
    if (!buf || !ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        s = ts_fail(err, TS_ERR_NOMEM, "%s: cannot start SHA-256", path);
        goto done;
    }
    size_t n;
    while ((n = fread(buf, 1, CHUNK, f)) > 0)
        if (EVP_DigestUpdate(ctx, buf, n) != 1) {
            s = ts_fail(err, TS_ERR_IO, "%s: SHA-256 update failed", path);
            goto done;
        }
    if (ferror(f)) {
        s = ts_fail(err, TS_ERR_IO, "%s: read failed", path);
        goto done;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    if (EVP_DigestFinal_ex(ctx, md, &len) != 1 || len != 32) {
        s = ts_fail(err, TS_ERR_IO, "%s: SHA-256 final failed", path);
        goto done;
    }
    for (unsigned i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
done:
    EVP_MD_CTX_free(ctx);
    free(buf);
    fclose(f);
    return s;
}
