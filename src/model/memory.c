/* Memory accounting of a request (model/memory.h): the machine's available memory from
 * /proc/meminfo and the cgroup, and the check that turns an impossible request into
 * TS_ERR_NOMEM before the first large allocation. */
#include "model/memory.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

uint64_t ts_mem_private(const ts_mem_need *n) {
    return n->weights_owned + n->kv + n->scratch + n->outputs;
}

const char *ts_mem_str(uint64_t b, char *buf, size_t len) {
    if (b >= (1ull << 30)) snprintf(buf, len, "%.3f GiB", (double)b / (double)(1ull << 30));
    else if (b >= (1ull << 20)) snprintf(buf, len, "%.1f MiB", (double)b / (double)(1ull << 20));
    else if (b >= 1024) snprintf(buf, len, "%.1f KiB", (double)b / 1024.0);
    else snprintf(buf, len, "%llu B", (unsigned long long)b);
    return buf;
}

/* The first number after "key" in a file of "key value" lines, times mult; -1 if absent. */
static int64_t read_keyed(const char *path, const char *key, int64_t mult) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    int64_t v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl)) {
            long long x;
            if (sscanf(line + kl, " %lld", &x) == 1 && x >= 0) v = (int64_t)x * mult;
            break;
        }
    fclose(f);
    return v;
}

/* One number in a file, or -1 (also for "max": no limit). */
static int64_t read_number(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long long x;
    int ok = fscanf(f, "%lld", &x) == 1 && x >= 0;
    fclose(f);
    return ok ? (int64_t)x : -1;
}

/* The least room (memory.max - memory.current) of this process's cgroup v2 and its parents:
 * a container's limit sits on an ancestor, and /proc/meminfo shows the host. -1: no limit. */
static int64_t cgroup_room(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return -1;
    char line[1024], path[1200];
    int found = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "0::", 3)) {
            line[strcspn(line, "\n")] = 0;
            snprintf(path, sizeof path, "/sys/fs/cgroup%s", line + 3);
            found = 1;
            break;
        }
    fclose(f);
    if (!found) return -1;
    int64_t room = -1;
    for (;;) {
        char p[1300];
        snprintf(p, sizeof p, "%s/memory.max", path);
        int64_t max = read_number(p);
        snprintf(p, sizeof p, "%s/memory.current", path);
        int64_t cur = read_number(p);
        if (max >= 0 && cur >= 0) {
            int64_t r = max > cur ? max - cur : 0;
            if (room < 0 || r < room) room = r;
        }
        char *slash = strrchr(path, '/');
        if (!slash || slash - path <= (ptrdiff_t)strlen("/sys/fs/cgroup")) break;
        *slash = 0;
    }
    return room;
}

int ts_mem_available(uint64_t *bytes, char *src, size_t src_len) {
    const char *env = getenv("TESSERA_MEM_AVAILABLE");
    if (env && *env) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(env, &end, 10);
        if (!*end && !errno && *env != '-') {
            *bytes = v;
            if (src) snprintf(src, src_len, "TESSERA_MEM_AVAILABLE");
            return 1;
        }
    }
    int64_t avail = read_keyed("/proc/meminfo", "MemAvailable:", 1024);
    int64_t room = cgroup_room();
    if (avail < 0 && room < 0) return 0;
    if (room >= 0 && (avail < 0 || room < avail)) {
        *bytes = (uint64_t)room;
        if (src) snprintf(src, src_len, "cgroup memory.max - memory.current");
    } else {
        *bytes = (uint64_t)avail;
        if (src) snprintf(src, src_len, "MemAvailable in /proc/meminfo");
    }
    return 1;
}

void ts_mem_describe(const ts_mem_need *n, char *buf, size_t len) {
    const struct {
        const char *name;
        uint64_t b;
    } parts[] = {{"KV cache", n->kv}, {"scratch", n->scratch}, {"weight copies", n->weights_owned},
                 {"outputs", n->outputs}};
    size_t at = 0;
    int k = 0;
    char s[32];
    buf[0] = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (!parts[i].b) continue;
        int w = snprintf(buf + at, len - at, "%s%s %s", k++ ? " + " : "", parts[i].name,
                         ts_mem_str(parts[i].b, s, sizeof s));
        if (w < 0 || (size_t)w >= len - at) return;
        at += (size_t)w;
    }
    snprintf(buf + at, len - at, "%s%s", k ? " = " : "", ts_mem_str(ts_mem_private(n), s, sizeof s));
}

ts_status ts_mem_check(const ts_mem_need *n, const char *what, ts_error *err) {
    uint64_t avail;
    char src[64], d[256], a[32];
    if (!ts_mem_available(&avail, src, sizeof src) || ts_mem_private(n) <= avail) return TS_OK;
    ts_mem_describe(n, d, sizeof d);
    return ts_fail(err, TS_ERR_NOMEM, "%s needs %s but only %s is available (%s)", what, d,
                   ts_mem_str(avail, a, sizeof a), src);
}
