/* Implementation of the test harness helpers. */
#include "tharness.h"

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

const char *th_tmpdir(const char *name) {
    static char buf[4096];
    const char *root = getenv("TS_TMP");
    if (!root) root = "/tmp/tessera-tests";
    char cmd[8300];
    snprintf(buf, sizeof buf, "%s/%s", root, name);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", buf, buf);
    if (system(cmd) != 0) fprintf(stderr, "cannot create %s\n", buf);
    return buf;
}

int th_finish(const char *suite) {
    printf("%s: %d checks, %d passed, %d failed\n", suite, th_checks, th_checks - th_failures,
           th_failures);
    return th_failures ? 1 : 0;
}
