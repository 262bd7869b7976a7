/* /proc/self fields, shared by the bench, the measurement harness and the peak probes. */
#include "core/procfs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long ts_proc_kb(const char *file, const char *key) {
    FILE *f = fopen(file, "r");
    char line[256];
    long kb = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n)) kb = atol(line + n);
    if (f) fclose(f);
    return kb;
}
