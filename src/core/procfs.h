/* One field of a /proc/self file: what the memory reports (peak RSS, huge pages) read. */
#ifndef TS_CORE_PROCFS_H
#define TS_CORE_PROCFS_H

/* The number after a "Key:" line of file (e.g. "/proc/self/status", "VmHWM:"; in kB), or -1. */
long ts_proc_kb(const char *file, const char *key);

#endif
