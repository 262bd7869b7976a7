/* What a request costs in memory, said before anything is allocated: each target reports the
 * bytes its session would allocate for a context (from the same arithmetic its constructor
 * uses), and ts_mem_check compares the private part with what the machine has left, so a
 * request too large fails with TS_ERR_NOMEM up front instead of thrashing or dying half-way. */
#ifndef TS_MODEL_MEMORY_H
#define TS_MODEL_MEMORY_H
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"

typedef struct ts_mem_need {
    uint64_t weights_mapped; /* the checkpoint's files, read through the mmap (page cache:
                              * shared with other readers and reclaimable, so not private) */
    uint64_t weights_owned;  /* weights the target copies or converts at load */
    uint64_t kv;             /* the KV cache (FP32 on both targets) */
    uint64_t scratch;        /* activations and per-thread scratch */
    uint64_t outputs;        /* the caller's own buffers (logits, hidden states) */
} ts_mem_need;

/* Bytes the process allocates itself: everything but the mapped weights. */
uint64_t ts_mem_private(const ts_mem_need *n);

/* Memory this process can still take without swapping: MemAvailable of /proc/meminfo,
 * lowered to the room under a cgroup v2 memory.max when one is set. The environment variable
 * TESSERA_MEM_AVAILABLE (bytes) replaces both: a budget, and how tests reach the refusal.
 * src (may be NULL) names where the number came from. Returns 0 when nothing could be read
 * (then the check below lets the request through). */
int ts_mem_available(uint64_t *bytes, char *src, size_t src_len);

/* "1.234 GiB", "12.5 MiB", "900.0 KiB", "12 B" into buf; returns buf. */
const char *ts_mem_str(uint64_t bytes, char *buf, size_t len);

/* "KV cache 12.0 MiB + scratch 1.2 MiB + outputs 48.0 KiB = 13.3 MiB" (the parts that are
 * not zero, then the private total). */
void ts_mem_describe(const ts_mem_need *n, char *buf, size_t len);

/* TS_ERR_NOMEM naming `what`, the parts, the total and the memory available when the private
 * bytes exceed it; TS_OK when they fit or the available memory is unknown. */
ts_status ts_mem_check(const ts_mem_need *n, const char *what, ts_error *err);

#endif
