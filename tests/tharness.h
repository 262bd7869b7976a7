/* Minimal test harness: CHECK records a failure with file:line and goes on; each test
 * executable returns non-zero if anything failed. Helpers for temp dirs and fixture paths. */
#ifndef TS_THARNESS_H
#define TS_THARNESS_H
#include <stdio.h>

#include "tessera.h"

extern int th_failures, th_checks;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        th_checks++;                                                                               \
        if (!(cond)) {                                                                             \
            th_failures++;                                                                         \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* Fixture root (TS_FIXTURES, set by ctest) joined with rel; static buffer. */
const char *th_fixture(const char *rel);
/* A fresh empty directory under TS_TMP (or /tmp) named after `name`; static buffer. */
const char *th_tmpdir(const char *name);
/* Summary line and exit code. */
int th_finish(const char *suite);

#endif
