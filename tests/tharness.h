/* Minimal test harness: CHECK records a failure with file:line and goes on; each test
 * executable returns non-zero if anything failed, TH_SKIP if part of it could not run (ctest's
 * SKIP_RETURN_CODE, so a skip is never counted as a pass). Helpers for temp dirs and fixtures. */
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

/* The exit code ctest reads as "skipped" (SKIP_RETURN_CODE in CMakeLists.txt, as in tests/lib.sh). */
#define TH_SKIP 77
/* The phrase every skip for a missing CPU feature carries: .ci/run accepts those skips and
 * fails on any other. */
#define TH_ISA_PHRASE "this machine lacks the instruction set"

/* Fixture root (TS_FIXTURES, set by ctest) joined with rel; static buffer. */
const char *th_fixture(const char *rel);
/* The unpacked real tokenizers, templates and models (TS_REALDATA, set by ctest to
 * BUILD/fixtures-shared; tests/fixtures/shared/README.md) joined with rel; static buffer. */
const char *th_shared(const char *rel);
/* The tessera binary (TS_BIN, set by ctest; build/tessera when run by hand). */
const char *th_bin(void);
/* A fresh empty directory under TS_TMP (or /tmp) named after `name`; static buffer. */
const char *th_tmpdir(const char *name);
/* Ends the test now as skipped, printing "SKIP: <reason>"; a failure already recorded wins
 * (exit 1). Only for what cannot run here, never for a missing fixture: those are committed. */
#if defined(__GNUC__)
__attribute__((noreturn, format(printf, 1, 2)))
#endif
void th_skip(const char *fmt, ...);
/* Records that `what` was not run because this CPU lacks `isa` (a kernel variant's instruction
 * set); the rest of the test goes on and th_finish reports the gap as a skip. */
void th_isa_gap(const char *isa, const char *what);
/* Summary line and exit code: 1 on any failure, else TH_SKIP if an ISA gap was recorded, else 0. */
int th_finish(const char *suite);

#endif
