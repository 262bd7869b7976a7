/* Prometheus counters, gauges and histograms behind one mutex: updates are a few per request
 * or per token batch, so contention is nothing next to a forward pass. */
#include "serve/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SERIES 64

static const double k_ttft_buckets[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double k_rate_buckets[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000};
static const double k_gap_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
#define N_TTFT (sizeof k_ttft_buckets / sizeof k_ttft_buckets[0])
#define N_RATE (sizeof k_rate_buckets / sizeof k_rate_buckets[0])
#define N_GAP (sizeof k_gap_buckets / sizeof k_gap_buckets[0])
_Static_assert(N_TTFT < 16 && N_RATE < 16 && N_GAP < 16, "a histogram's buckets fit hist.counts");

typedef struct hist {
    uint64_t counts[16]; /* per bucket (not cumulative) + the +Inf one */
    double sum;
    uint64_t n;
} hist;

struct ts_smetrics {
    pthread_mutex_t mu;
    struct {
        char endpoint[40];
        int status;
        uint64_t n;
    } req[MAX_SERIES];
    int n_req;
    uint64_t prompt_tokens, generated_tokens, prefix_hits, prefix_tokens, cache_bytes;
    int cache_entries;
    uint64_t lookup_verifies, lookup_drafted, lookup_accepted;
    uint64_t prefill_chunks, prefill_tokens;
    int queued, active, slots;
    hist ttft, rate, gap;
};

ts_smetrics *ts_smetrics_new(void) {
    ts_smetrics *m = calloc(1, sizeof *m);
    if (m && pthread_mutex_init(&m->mu, NULL)) {
        free(m);
        return NULL;
    }
    return m;
}

void ts_smetrics_free(ts_smetrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void ts_smetrics_request(ts_smetrics *m, const char *endpoint, int status) {
    pthread_mutex_lock(&m->mu);
    int i;
    for (i = 0; i < m->n_req; i++)
        if (m->req[i].status == status && !strcmp(m->req[i].endpoint, endpoint)) break;
    if (i == m->n_req && m->n_req < MAX_SERIES) {
        snprintf(m->req[i].endpoint, sizeof m->req[i].endpoint, "%s", endpoint);
        m->req[i].status = status;
        m->n_req++;
    }
    if (i < m->n_req) m->req[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void ts_smetrics_tokens(ts_smetrics *m, int prompt, int generated) {
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)prompt;
    m->generated_tokens += (uint64_t)generated;
    pthread_mutex_unlock(&m->mu);
}

void ts_smetrics_lookup(ts_smetrics *m, int verifies, int drafted, int accepted) {
    pthread_mutex_lock(&m->mu);
    m->lookup_verifies += (uint64_t)verifies;
    m->lookup_drafted += (uint64_t)drafted;
    m->lookup_accepted += (uint64_t)accepted;
    pthread_mutex_unlock(&m->mu);
}

void ts_smetrics_prefill(ts_smetrics *m, int chunks, int tokens) {
    pthread_mutex_lock(&m->mu);
    m->prefill_chunks += (uint64_t)chunks;
    m->prefill_tokens += (uint64_t)tokens;
    pthread_mutex_unlock(&m->mu);
}

static void observe(hist *h, const double *b, size_t nb, double v) {
    size_t i = 0;
    while (i < nb && v > b[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->n++;
}

void ts_smetrics_ttft(ts_smetrics *m, double s) {
    pthread_mutex_lock(&m->mu);
    observe(&m->ttft, k_ttft_buckets, N_TTFT, s);
    pthread_mutex_unlock(&m->mu);
}

void ts_smetrics_decode_rate(ts_smetrics *m, double r) {
    pthread_mutex_lock(&m->mu);
    observe(&m->rate, k_rate_buckets, N_RATE, r);
    pthread_mutex_unlock(&m->mu);
}

void ts_smetrics_token_gap(ts_smetrics *m, double s) {
    pthread_mutex_lock(&m->mu);
    observe(&m->gap, k_gap_buckets, N_GAP, s);
    pthread_mutex_unlock(&m->mu);
}

void ts_smetrics_prefix_hit(ts_smetrics *m, int tokens) {
    pthread_mutex_lock(&m->mu);
    m->prefix_hits++;
    m->prefix_tokens += (uint64_t)tokens;
    pthread_mutex_unlock(&m->mu);
}

void ts_smetrics_prefix_cache(ts_smetrics *m, int entries, uint64_t bytes) {
    pthread_mutex_lock(&m->mu);
    m->cache_entries = entries;
    m->cache_bytes = bytes;
    pthread_mutex_unlock(&m->mu);
}

void ts_smetrics_set_queue(ts_smetrics *m, int queued, int active, int slots) {
    pthread_mutex_lock(&m->mu);
    m->queued = queued;
    m->active = active;
    m->slots = slots;
    pthread_mutex_unlock(&m->mu);
}

void ts_smetrics_get_queue(ts_smetrics *m, int *queued, int *active) {
    pthread_mutex_lock(&m->mu);
    *queued = m->queued;
    *active = m->active;
    pthread_mutex_unlock(&m->mu);
}

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

static void put_hist(sbuf *b, const char *name, const char *help, const hist *h, const double *bk, size_t nb) {
    put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t i = 0; i < nb; i++) {
        cum += h->counts[i];
        put(b, "%s_bucket{le=\"%g\"} %llu\n", name, bk[i], (unsigned long long)cum);
    }
    cum += h->counts[nb];
    put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)cum, name, h->sum,
        name, (unsigned long long)h->n);
}

char *ts_smetrics_render(ts_smetrics *m, size_t *len) {
    sbuf b = {malloc(4096), 0, 4096, 0};
    if (!b.p) return NULL;
    b.p[0] = 0;
    pthread_mutex_lock(&m->mu);
    put(&b, "# HELP tessera_requests_total HTTP requests answered, by endpoint and status.\n"
            "# TYPE tessera_requests_total counter\n");
    for (int i = 0; i < m->n_req; i++)
        put(&b, "tessera_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", m->req[i].endpoint, m->req[i].status,
            (unsigned long long)m->req[i].n);
    put(&b, "# HELP tessera_prompt_tokens_total Prompt tokens of generation requests (cached ones included).\n# TYPE tessera_prompt_tokens_total counter\n"
            "tessera_prompt_tokens_total %llu\n", (unsigned long long)m->prompt_tokens);
    put(&b, "# HELP tessera_generated_tokens_total Tokens generated.\n"
            "# TYPE tessera_generated_tokens_total counter\ntessera_generated_tokens_total %llu\n",
        (unsigned long long)m->generated_tokens);
    put(&b, "# HELP tessera_queue_depth Requests waiting for a slot.\n# TYPE tessera_queue_depth gauge\n"
            "tessera_queue_depth %d\n", m->queued);
    put(&b, "# HELP tessera_active_slots Slots generating now.\n# TYPE tessera_active_slots gauge\n"
            "tessera_active_slots %d\n", m->active);
    put(&b, "# HELP tessera_slots Slots (--parallel).\n# TYPE tessera_slots gauge\ntessera_slots %d\n", m->slots);
    put_hist(&b, "tessera_time_to_first_token_seconds", "From a request's arrival to its first generated token.",
             &m->ttft, k_ttft_buckets, N_TTFT);
    put_hist(&b, "tessera_decode_tokens_per_second", "Per request: generated tokens over the time after the first.",
             &m->rate, k_rate_buckets, N_RATE);
    put_hist(&b, "tessera_inter_token_seconds",
             "Per generating request and decode step: the time since its previous step or first token.", &m->gap,
             k_gap_buckets, N_GAP);
    put(&b, "# HELP tessera_prefill_chunks_total Pieces of prompts prefilled (at most --prefill-chunk tokens a step).\n"
            "# TYPE tessera_prefill_chunks_total counter\ntessera_prefill_chunks_total %llu\n",
        (unsigned long long)m->prefill_chunks);
    put(&b, "# HELP tessera_prefill_tokens_total Prompt tokens prefilled (those not taken from the prefix cache).\n"
            "# TYPE tessera_prefill_tokens_total counter\ntessera_prefill_tokens_total %llu\n",
        (unsigned long long)m->prefill_tokens);
    put(&b, "# HELP tessera_prefix_cache_hits_total Requests that started from a cached prefix.\n"
            "# TYPE tessera_prefix_cache_hits_total counter\ntessera_prefix_cache_hits_total %llu\n",
        (unsigned long long)m->prefix_hits);
    put(&b, "# HELP tessera_prefix_cache_tokens_total Prompt tokens not prefilled thanks to the prefix cache.\n"
            "# TYPE tessera_prefix_cache_tokens_total counter\ntessera_prefix_cache_tokens_total %llu\n",
        (unsigned long long)m->prefix_tokens);
    put(&b, "# HELP tessera_prefix_cache_entries Prompts whose KV the prefix cache holds.\n"
            "# TYPE tessera_prefix_cache_entries gauge\ntessera_prefix_cache_entries %d\n", m->cache_entries);
    put(&b, "# HELP tessera_prefix_cache_bytes Bytes of KV the prefix cache holds (bounded by --cache-mb).\n"
            "# TYPE tessera_prefix_cache_bytes gauge\ntessera_prefix_cache_bytes %llu\n",
        (unsigned long long)m->cache_bytes);
    put(&b, "# HELP tessera_lookup_verify_steps_total Decode steps of a request that verified drafted tokens "
            "(prompt lookup).\n# TYPE tessera_lookup_verify_steps_total counter\ntessera_lookup_verify_steps_total %llu\n",
        (unsigned long long)m->lookup_verifies);
    put(&b, "# HELP tessera_lookup_draft_tokens_total Tokens drafted by prompt lookup and verified.\n"
            "# TYPE tessera_lookup_draft_tokens_total counter\ntessera_lookup_draft_tokens_total %llu\n",
        (unsigned long long)m->lookup_drafted);
    put(&b, "# HELP tessera_lookup_accepted_tokens_total Drafted tokens accepted (each one a decode step saved).\n"
            "# TYPE tessera_lookup_accepted_tokens_total counter\ntessera_lookup_accepted_tokens_total %llu\n",
        (unsigned long long)m->lookup_accepted);
    pthread_mutex_unlock(&m->mu);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}
