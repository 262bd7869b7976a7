/* /proc/self fields, shared by the bench, the measurement harness and the peak probes. */
#include "core/procfs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ts_proc_kbs(const char *file, const char *const *keys, long *out, int n) {
    FILE *f = fopen(file, "r");
    char line[256];
    for (int i = 0; i < n; i++) out[i] = -1;
    while (f && fgets(line, sizeof line, f))
        for (int i = 0; i < n; i++)
            if (!strncmp(line, keys[i], strlen(keys[i]))) out[i] = atol(line + strlen(keys[i]));
    if (f) fclose(f);
}

long ts_proc_kb(const char *file, const char *key) {
    long kb;
    ts_proc_kbs(file, &key, &kb, 1);
    return kb;
}
