/* POSIX mmap/read helpers. Files are mapped PROT_READ + MAP_PRIVATE: nothing the user owns
 * can be modified through a view. */
#define _DEFAULT_SOURCE /* madvise (posix_madvise's DONTNEED does nothing on Linux) */
#include "io/mmap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

char *ts_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a > 0 && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

int ts_mkdir_p(const char *path) {
    size_t n = strlen(path);
    char *buf = malloc(n + 1);
    if (!buf) return -1;
    memcpy(buf, path, n + 1);
    int rc = 0;
    for (char *p = buf + 1; *p && !rc; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) rc = -1;
        *p = '/';
    }
    if (!rc && mkdir(buf, 0755) != 0 && errno != EEXIST) rc = -1;
    free(buf);
    return rc;
}

int ts_dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int ts_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

ts_status ts_mmap_open(ts_mmap *m, const char *path, ts_error *err) {
    memset(m, 0, sizeof *m);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ts_fail(err, TS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ts_fail(err, TS_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ts_fail(err, TS_ERR_IO, "%s: not a regular file", path);
    }
    m->size = (size_t)st.st_size;
    if (m->size > 0) {
        void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return ts_fail(err, TS_ERR_IO, "%s: mmap of %zu bytes failed: %s", path, m->size,
                           strerror(e));
        }
        m->data = p;
#ifdef MADV_HUGEPAGE
        /* Where the kernel keeps this file's page cache in large folios (ext4 and others on
         * Linux 6.x), a VM_HUGEPAGE mapping reads a file not yet cached in 2 MiB folios and maps
         * them with one TLB entry each, as weights copied to huge pages are. Without it, a model
         * first read through this map lands in 4 KiB pages (Qwen3-0.6B BF16 on a 6.18 kernel:
         * 119 of 1171 MB PMD-mapped without, 964-993 MB with), and decoding from 4 KiB pages
         * was 5-8% slower (docs/loading.md). Advice only: nothing changes where THP is off,
         * or for pages already cached small. */
        if (m->size >= ((size_t)2 << 20)) madvise(p, m->size, MADV_HUGEPAGE);
#endif
    }
    close(fd);
    m->path = strdup(path);
    if (!m->path) {
        ts_mmap_close(m);
        return ts_fail(err, TS_ERR_NOMEM, "%s: out of memory", path);
    }
    return TS_OK;
}

void ts_mmap_close(ts_mmap *m) {
    if (m->data) munmap((void *)m->data, m->size);
    free(m->path);
    memset(m, 0, sizeof *m);
}

void ts_mmap_release(const ts_mmap *m) {
    if (m->data) madvise((void *)m->data, m->size, MADV_DONTNEED);
}

ts_status ts_file_read_all(const char *path, size_t max_size, char **out, size_t *out_len,
                           ts_error *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ts_fail(err, TS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ts_fail(err, TS_ERR_IO, "%s: not a readable regular file", path);
    }
    if ((uint64_t)st.st_size > max_size) {
        close(fd);
        return ts_fail(err, TS_ERR_FORMAT, "%s: file is %lld bytes, expected at most %zu", path,
                       (long long)st.st_size, max_size);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return ts_fail(err, TS_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = errno;
            close(fd);
            free(buf);
            return ts_fail(err, TS_ERR_IO, "%s: read failed after %zu of %zu bytes: %s", path, got,
                           n, r == 0 ? "unexpected end of file" : strerror(e));
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    *out = buf;
    if (out_len) *out_len = n;
    return TS_OK;
}
