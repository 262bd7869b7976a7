/* One field of a /proc/self file: what the memory reports (peak RSS, huge pages) read. */
#ifndef TS_CORE_PROCFS_H
#define TS_CORE_PROCFS_H

/* The number after a "Key:" line of file (e.g. "/proc/self/status", "VmHWM:"; in kB), or -1. */
long ts_proc_kb(const char *file, const char *key);
/* Several fields of one read of file (smaps_rollup walks the page tables on every read):
 * out[i] for keys[i], -1 where absent. */
void ts_proc_kbs(const char *file, const char *const *keys, long *out, int n);

#endif
