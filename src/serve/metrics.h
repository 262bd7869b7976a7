/* The server's counters for GET /metrics (Prometheus text format 0.0.4): requests by endpoint
 * and status, prompt and generated tokens, queue depth, active slots, time-to-first-token,
 * per-request decode tokens/s and inter-token gap histograms, prefill pieces, prefix-cache hits.
 * Thread-safe: connection threads and the scheduler update it, the /metrics handler reads it. */
#ifndef TS_SERVE_METRICS_H
#define TS_SERVE_METRICS_H
#include <stddef.h>
#include <stdint.h>

typedef struct ts_smetrics ts_smetrics;

ts_smetrics *ts_smetrics_new(void);
void ts_smetrics_free(ts_smetrics *m);

/* One finished HTTP request: endpoint is the route ("/v1/chat/completions", ..., or "other"). */
void ts_smetrics_request(ts_smetrics *m, const char *endpoint, int status);
void ts_smetrics_tokens(ts_smetrics *m, int prompt, int generated);
void ts_smetrics_ttft(ts_smetrics *m, double seconds);
void ts_smetrics_decode_rate(ts_smetrics *m, double tokens_per_s);
void ts_smetrics_prefix_hit(ts_smetrics *m, int tokens_reused);
/* What the prefix cache holds now: prompts kept and the bytes of their KV. */
void ts_smetrics_prefix_cache(ts_smetrics *m, int entries, uint64_t bytes);
/* Prefill, per scheduler step: pieces of prompts prefilled (ts_cpu_forward_seq calls) and their
 * tokens (prompt tokens not from the prefix cache). */
void ts_smetrics_prefill(ts_smetrics *m, int chunks, int tokens);
/* A generating slot's time since its previous decode step (or its first token): the gap a
 * streaming client sees between deltas. */
void ts_smetrics_token_gap(ts_smetrics *m, double seconds);
/* Prompt lookup, per decode step: slots that verified drafts, tokens drafted, tokens accepted. */
void ts_smetrics_lookup(ts_smetrics *m, int verifies, int drafted, int accepted);
/* Gauges, set by the scheduler. */
void ts_smetrics_set_queue(ts_smetrics *m, int queued, int active, int slots);
void ts_smetrics_get_queue(ts_smetrics *m, int *queued, int *active);

/* The exposition text (malloc'd). */
char *ts_smetrics_render(ts_smetrics *m, size_t *len);

#endif
