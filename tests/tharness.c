/* Implementation of the test harness helpers. */
#include "tharness.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int th_failures, th_checks;

const char *th_fixture(const char *rel) {
    static char buf[4096];
    const char *root = getenv("TS_FIXTURES");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : "tests/fixtures", rel);
    return buf;
}

const char *th_shared(const char *rel) {
    static char buf[4096];
    const char *root = getenv("TS_REALDATA");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : "build/fixtures-shared", rel);
    return buf;
}

const char *th_bin(void) {
    const char *bin = getenv("TS_BIN");
    return bin ? bin : "build/tessera";
}

/* Every scratch directory handed out, removed by th_finish when the suite passed: the suite's
 * synth checkpoints add up to gigabytes across the release and sanitizer builds, more than a
 * small CI disk holds. A failing suite keeps them for inspection, and so does TS_KEEP_TMP=1. */
static char *th_made[64];
static int th_nmade;

static void th_remove_made(void) {
    const char *keep = getenv("TS_KEEP_TMP");
    for (int i = 0; i < th_nmade; i++) {
        if (!keep || !*keep || strcmp(keep, "0") == 0) {
            char cmd[8300];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", th_made[i]);
            if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", th_made[i]);
        }
        free(th_made[i]);
    }
    th_nmade = 0;
}

const char *th_tmpdir(const char *name) {
    static char buf[4096];
    const char *root = getenv("TS_TMP");
    if (!root) root = "/tmp/tessera-tests";
    char cmd[8300];
    snprintf(buf, sizeof buf, "%s/%s", root, name);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", buf, buf);
    if (system(cmd) != 0) fprintf(stderr, "cannot create %s\n", buf);
    int seen = 0;
    for (int i = 0; i < th_nmade && !seen; i++) seen = strcmp(th_made[i], buf) == 0;
    if (!seen && th_nmade < (int)(sizeof th_made / sizeof th_made[0])) th_made[th_nmade++] = strdup(buf);
    else if (!seen) fprintf(stderr, "note: %s will not be removed (more than %d scratch directories)\n", buf, th_nmade);
    return buf;
}

void th_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("SKIP: ", stdout);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
    if (!th_failures) th_remove_made();
    exit(th_failures ? 1 : TH_SKIP);
}

static char th_gaps[2048];

void th_isa_gap(const char *isa, const char *what) {
    size_t n = strlen(th_gaps);
    snprintf(th_gaps + n, sizeof th_gaps - n, "SKIP: " TH_ISA_PHRASE " %s: %s not run\n", isa, what);
    printf("%s: not supported by this CPU (no %s), not run\n", what, isa);
}

int th_finish(const char *suite) {
    printf("%s: %d checks, %d passed, %d failed\n", suite, th_checks, th_checks - th_failures,
           th_failures);
    if (th_failures) return 1;
    th_remove_made();
    if (th_gaps[0]) {
        fputs(th_gaps, stdout);
        return TH_SKIP;
    }
    return 0;
}
