/* The scheduler thread. Locking: one mutex guards the queue, the slots' request pointers and
 * every request's shared fields (output text, done, cancelled, refs); the thread never holds
 * it while the model runs, so connections append, cancel and read while a step computes.
 *
 * The model side is the several-sequences API of target/cpu/cpu_target.h: each slot owns a
 * ts_cpu_seq (its KV cache), prefilled with ts_cpu_forward_seq; the decode step is one
 * ts_cpu_decode_batch, whose row b is bit-identical to that sequence decoded alone, so a
 * request's greedy text does not depend on what else is being served.
 *
 * The prefix cache: a finished request's prompt (its tokens and the KV of those positions,
 * copied into a sequence of just that capacity) is kept, up to o.cache_bytes, least recently
 * used first out. A new request whose prompt starts with a kept one's tokens copies that KV
 * into its slot (ts_cpu_seq_copy) and prefills only the rest. This is exact because prefill is
 * split-invariant (tests/test_cpu_prefix.c): a position's KV and the last position's logits do
 * not depend on where the calls to ts_cpu_forward_seq were cut, as long as no piece is a single
 * token (that runs the decode arithmetic); so at least 2 prompt tokens are always prefilled,
 * and generated positions (decode arithmetic) are never kept.
 *
 * Chunked prefill (o.prefill_chunk > 0): the same invariance lets a prompt be prefilled in
 * pieces over several steps, each step's pieces (at most prefill_chunk tokens in all, given to
 * the slots still prefilling oldest first) followed by the decode step of the generating slots.
 * ts_sched_piece never cuts a piece of 1 row, so a request's KV and first logits are those of
 * its prompt prefilled in one call, and its text is the text it gets alone.
 *
 * Prompt lookup (opts.lookup > 0): the step is one ts_cpu_decode_multi whose rows are, per
 * generating slot, its next token and then the tokens ts_gen_draft copies from where the
 * context's last tokens occurred before (up to the step's TS_CPU_BATCH_MAX rows, every slot
 * keeping at least its one row); ts_gen_next_run consumes each slot's rows while the drafts
 * match what it samples, and the slot's sequence is truncated back to the rows consumed. Row
 * j of a slot is bit-identical to its j-th single decode and is consumed only when its input
 * is the token plain decoding would have fed, so the text is plain decoding's. */
#include "serve/sched.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "model/memory.h"
#include "runtime/generate.h"

/* ---- requests ---- */

struct ts_sreq {
    ts_sched *s;
    int refs;
    pthread_cond_t cv;
    int32_t *prompt;
    int n_prompt;
    ts_gen *gen;
    char *out; /* text produced and not yet taken */
    size_t out_len, out_cap;
    int oom;
    int done, cancelled;
    /* log-probabilities: the tokens recorded (prompt ones first), those handed over */
    int logprobs, echo_logprobs, prompt_bos, prompt_only;
    ts_sreq_token *toks;
    int n_toks, cap_toks, toks_taken;
    int gen_bytes;  /* the reply's bytes as the kept tokens spell them (the next token's offset) */
    size_t emitted; /* the reply's bytes given to on_text */
    int cut;        /* a stop string ended the reply: tokens past its text are not handed over */
    ts_sreq_result res;
    double t_arrival;
    struct ts_sreq *next; /* queue link */
};

typedef struct slot {
    ts_cpu_seq *seq;
    ts_sreq *r; /* NULL: free */
    int32_t next; /* sampled, to be appended next step */
    int n_drafted, n_accepted; /* prompt lookup, this request */
    int begun;     /* the cache lookup done and the generator given the prompt */
    int n_cached;  /* prompt positions from the prefix cache */
    int prefilled; /* the whole prompt is in seq and the first token sampled */
    int pieces, steps_between; /* prefill pieces so far; decode steps run after the first one */
    uint64_t order; /* admission order: the oldest prefilling slot gets the budget first */
    double t_first, t_last; /* the first token; the slot's last decode step (inter-token gaps) */
} slot;

struct ts_sched {
    ts_cpu *cpu;
    const ts_model *m;
    const ts_tok *tok;
    int32_t eos[16];
    int n_eos;
    ts_sched_opts o;
    ts_smetrics *metrics;
    int n_vocab;
    pthread_mutex_t mu;
    pthread_cond_t work; /* a request arrived, was cancelled, or draining began */
    pthread_cond_t idle; /* queue and slots empty */
    pthread_t th;
    int started;
    int draining, quit;
    ts_sreq *qhead, *qtail;
    int n_queued, n_active;
    slot *slots;
    int n_slots;
    /* the step's buffers (scheduler thread only) */
    int rows_max; /* rows a step may have: ts_cpu_batch_max */
    float *logits; /* (max(n_slots, rows_max), n_vocab) */
    float *plogits; /* (PROMPT_LP_PIECE, n_vocab) every prompt position's logits (echo_logprobs), made on first use */
    int n_text;     /* ids below this are the tokenizer's (the rest are padding rows) */
    ts_cpu_seq **bseqs;
    int32_t *btok; /* (max(n_slots, rows_max)) the step's rows: per slot its next token, then drafts */
    int *bslot, *bn, *bp0; /* per slot in the step: which, rows, positions before the step */
    int rot; /* the slot that drafts first this step (rotates: fairness when rows run short) */
    uint64_t admitted; /* requests admitted so far (slot.order) */
    /* the prefix cache (scheduler thread only) */
    struct centry *cache;
    int n_cache, cache_cap;
    uint64_t cache_bytes, cache_max, pos_bytes, clock;
};

/* ---- the prefix cache ---- */

/* Shorter common prefixes are not worth a lookup and a copy. */
#define CACHE_MIN_TOKENS 16

typedef struct centry {
    ts_cpu_seq *seq; /* n positions, all from prefill */
    int32_t *tok;
    int n;
    uint64_t used; /* s->clock at the last hit or insert */
} centry;

static void centry_drop(ts_sched *s, int i) {
    ts_cpu_seq_free(s->cache[i].seq);
    free(s->cache[i].tok);
    s->cache_bytes -= (uint64_t)s->cache[i].n * s->pos_bytes;
    s->cache[i] = s->cache[--s->n_cache];
}

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static void cache_gauge(ts_sched *s) { ts_smetrics_prefix_cache(s->metrics, s->n_cache, s->cache_bytes); }

/* The longest kept prefix of prompt, at most n - 2 positions (2 tokens or more are prefilled:
 * one alone would run the decode arithmetic), copied into seq (emptied first). Returns the
 * positions taken, 0 when none. */
static int cache_take(ts_sched *s, const int32_t *prompt, int n, ts_cpu_seq *seq) {
    int best = -1, len = 0;
    for (int i = 0; i < s->n_cache; i++) {
        int l = common_prefix(s->cache[i].tok, s->cache[i].n, prompt, n - 2);
        if (l > len) best = i, len = l;
    }
    ts_cpu_seq_truncate(seq, 0);
    if (best < 0 || len < CACHE_MIN_TOKENS) return 0;
    ts_error err;
    if (ts_cpu_seq_copy(seq, s->cache[best].seq, len, &err)) return 0;
    s->cache[best].used = ++s->clock;
    return len;
}

/* Keeps the first n prompt positions of seq (computed by prefill), evicting the least recently
 * used entries to stay within the bound. Entries that are a prefix of this one go: it serves
 * every prompt they would. Failing to allocate just keeps nothing. */
static void cache_put(ts_sched *s, const int32_t *prompt, int n, const ts_cpu_seq *seq) {
    if (!s->cache_max || !s->pos_bytes) return;
    uint64_t fit = s->cache_max / s->pos_bytes;
    if ((uint64_t)n > fit) n = (int)fit; /* a prompt beyond the bound: its start still serves */
    if (n < CACHE_MIN_TOKENS || ts_cpu_seq_n_past(seq) < n) return;
    for (int i = 0; i < s->n_cache; i++) {
        centry *e = &s->cache[i];
        if (e->n >= n && common_prefix(e->tok, e->n, prompt, n) == n) { /* kept already */
            e->used = ++s->clock;
            return;
        }
    }
    for (int i = 0; i < s->n_cache;) {
        centry *e = &s->cache[i];
        if (e->n < n && common_prefix(e->tok, e->n, prompt, n) == e->n) centry_drop(s, i);
        else i++;
    }
    while (s->n_cache && s->cache_bytes + (uint64_t)n * s->pos_bytes > s->cache_max) {
        int lru = 0;
        for (int i = 1; i < s->n_cache; i++)
            if (s->cache[i].used < s->cache[lru].used) lru = i;
        centry_drop(s, lru);
    }
    if (s->n_cache == s->cache_cap) {
        int cap = s->cache_cap ? 2 * s->cache_cap : 16;
        centry *p = realloc(s->cache, sizeof *p * (size_t)cap);
        if (!p) goto out;
        s->cache = p, s->cache_cap = cap;
    }
    centry e = {NULL, malloc(sizeof(int32_t) * (size_t)n), n, ++s->clock};
    ts_error err;
    if (!e.tok || ts_cpu_seq_new(s->cpu, n, &e.seq, &err) || ts_cpu_seq_copy(e.seq, seq, n, &err)) {
        ts_cpu_seq_free(e.seq);
        free(e.tok);
        goto out;
    }
    memcpy(e.tok, prompt, sizeof(int32_t) * (size_t)n);
    s->cache[s->n_cache++] = e;
    s->cache_bytes += (uint64_t)n * s->pos_bytes;
out:
    cache_gauge(s);
}

static void req_free(ts_sreq *r) {
    ts_gen_free(r->gen);
    free(r->toks);
    free(r->prompt);
    free(r->out);
    pthread_cond_destroy(&r->cv);
    free(r);
}

/* With s->mu held. */
static void req_unref(ts_sreq *r) {
    if (--r->refs == 0) req_free(r);
}

/* The generator's text, on the scheduler thread. */
static void on_text(void *user, const char *text, size_t len) {
    ts_sreq *r = user;
    ts_sched *s = r->s;
    pthread_mutex_lock(&s->mu);
    if (!r->cancelled) {
        if (r->out_len + len + 1 > r->out_cap) {
            size_t cap = r->out_cap ? r->out_cap * 2 : 256;
            while (cap < r->out_len + len + 1) cap *= 2;
            char *p = realloc(r->out, cap);
            if (p) {
                r->out = p;
                r->out_cap = cap;
            } else r->oom = 1;
        }
        if (!r->oom) {
            memcpy(r->out + r->out_len, text, len);
            r->out_len += len;
            r->emitted += len;
        }
        pthread_cond_signal(&r->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

/* With s->mu held: room for n more tokens (0, or -1 out of memory: r->oom is set). */
static int toks_reserve(ts_sreq *r, int n) {
    if (r->n_toks + n <= r->cap_toks) return 0;
    int cap = r->cap_toks ? r->cap_toks : 64;
    while (cap < r->n_toks + n) cap *= 2;
    ts_sreq_token *p = realloc(r->toks, sizeof *p * (size_t)cap);
    if (!p) {
        r->oom = 1;
        return -1;
    }
    r->toks = p;
    r->cap_toks = cap;
    return 0;
}

/* The bytes a token adds to the text: the stream decoder drops special tokens. */
static int tok_text_len(const ts_tok *t, int32_t id) {
    size_t n = 0;
    if (ts_tok_is_special(t, id) || !ts_tok_token_bytes(t, id, &n)) return 0;
    return (int)n;
}

/* The generator's log-probabilities of a kept token, on the scheduler thread (before its text). */
static void on_token(void *user, const ts_logprob *lp) {
    ts_sreq *r = user;
    ts_sched *s = r->s;
    int len = tok_text_len(s->tok, lp->id);
    pthread_mutex_lock(&s->mu);
    if (!r->cancelled && !toks_reserve(r, 1)) {
        r->toks[r->n_toks++] = (ts_sreq_token){*lp, r->gen_bytes, len, 0};
        r->gen_bytes += len;
    }
    pthread_mutex_unlock(&s->mu);
}

ts_status ts_sreq_new(ts_sched *s, const ts_sreq_params *p, ts_sreq **out, ts_error *err) {
    *out = NULL;
    if (p->n_prompt < 1 || p->n_prompt > s->o.n_ctx)
        return ts_fail(err, TS_ERR_ARG, "prompt of %d tokens, expected 1..%d", p->n_prompt, s->o.n_ctx);
    ts_sreq *r = calloc(1, sizeof *r);
    if (!r) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    if (pthread_cond_init(&r->cv, NULL)) {
        free(r);
        return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    }
    r->s = s;
    r->refs = 1;
    r->t_arrival = ts_now_s();
    r->n_prompt = p->n_prompt;
    r->res.n_prompt = p->n_prompt;
    r->logprobs = p->logprobs < TS_LOGPROB_TOP_MAX ? p->logprobs : TS_LOGPROB_TOP_MAX;
    r->echo_logprobs = p->echo_logprobs < TS_LOGPROB_TOP_MAX ? p->echo_logprobs : TS_LOGPROB_TOP_MAX;
    r->prompt_bos = p->prompt_bos;
    r->prompt_only = p->max_tokens < 1;
    r->prompt = malloc(sizeof(int32_t) * (size_t)p->n_prompt);
    ts_status st = r->prompt ? TS_OK : ts_fail(err, TS_ERR_NOMEM, "out of memory");
    if (!st) {
        memcpy(r->prompt, p->prompt, sizeof(int32_t) * (size_t)p->n_prompt);
        /* `tessera run`'s cap: the last token sampled is never fed back, so a prompt of P
         * tokens leaves room for n_ctx - P + 1 of them. */
        int room = s->o.n_ctx - p->n_prompt + 1;
        int max = p->max_tokens < 1 ? 1 : p->max_tokens; /* prompt_only: the generator is never asked */
        ts_gen_opts go = {max < room ? max : room,
                          s->o.n_ctx,
                          p->sample,
                          p->stop,
                          p->n_stop,
                          s->eos,
                          s->n_eos,
                          on_text,
                          r,
                          s->o.lookup,
                          s->o.lookup_ngram,
                          s->o.lookup_min,
                          r->logprobs >= 0 ? on_token : NULL,
                          r->logprobs};
        st = ts_gen_new(NULL, s->m, s->tok, &go, &r->gen, err);
    }
    if (st) {
        req_free(r);
        return st;
    }
    *out = r;
    return TS_OK;
}

int ts_sched_submit(ts_sched *s, ts_sreq *r) {
    pthread_mutex_lock(&s->mu);
    /* Requests in the queue that free slots will take at the next step do not count. */
    int rc = s->draining ? 2 : s->n_queued >= s->o.max_queue + (s->n_slots - s->n_active) ? 1 : 0;
    if (!rc) {
        r->refs++;
        r->next = NULL;
        if (s->qtail) s->qtail->next = r;
        else s->qhead = r;
        s->qtail = r;
        s->n_queued++;
        ts_smetrics_set_queue(s->metrics, s->n_queued, s->n_active, s->n_slots);
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int ts_sreq_wait(ts_sreq *r, int timeout_ms, char **text, size_t *len, ts_sreq_token **toks, int *n_toks) {
    ts_sched *s = r->s;
    *text = NULL;
    *len = 0;
    if (toks) *toks = NULL, *n_toks = 0;
    pthread_mutex_lock(&s->mu);
    if (!r->out_len && !r->done && timeout_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&r->cv, &s->mu, &ts);
    }
    if (r->out_len) {
        /* hand over the buffer itself: the scheduler starts a new one */
        *text = r->out;
        *len = r->out_len;
        r->out[r->out_len] = 0;
        r->out = NULL;
        r->out_len = r->out_cap = 0;
    }
    int over = r->done;
    if (toks) {
        /* the tokens whose text the caller now has (offsets only grow: the first one not
         * handed over ends the run) */
        int a = r->toks_taken, b = a;
        while (b < r->n_toks) {
            const ts_sreq_token *t = &r->toks[b];
            if (!(t->prompt || (size_t)t->offset + (size_t)t->len <= r->emitted ||
                  (over && (!r->cut || (size_t)t->offset < r->emitted))))
                break;
            b++;
        }
        if (b > a && (*toks = malloc(sizeof **toks * (size_t)(b - a)))) {
            memcpy(*toks, r->toks + a, sizeof **toks * (size_t)(b - a));
            *n_toks = b - a;
            r->toks_taken = b;
        } else if (b > a) {
            r->res.failed = 1;
            snprintf(r->res.error, sizeof r->res.error, "out of memory handing over log-probabilities");
        }
        if (over) r->toks_taken = r->n_toks;
    }
    pthread_mutex_unlock(&s->mu);
    return over;
}

void ts_sreq_cancel(ts_sreq *r) {
    ts_sched *s = r->s;
    pthread_mutex_lock(&s->mu);
    if (!r->done) {
        r->cancelled = 1;
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
}

void ts_sreq_release(ts_sreq *r) {
    if (!r) return;
    ts_sched *s = r->s;
    pthread_mutex_lock(&s->mu);
    if (!r->done) r->cancelled = 1;
    req_unref(r);
    pthread_mutex_unlock(&s->mu);
}

void ts_sreq_result_get(ts_sreq *r, ts_sreq_result *out) {
    pthread_mutex_lock(&r->s->mu);
    *out = r->res;
    pthread_mutex_unlock(&r->s->mu);
}

/* ---- the thread ---- */

/* With s->mu held: the request is over; the scheduler lets go of it and of its slot. */
static void finish_locked(ts_sched *s, slot *sl, ts_sreq *r) {
    r->done = 1;
    if (r->oom && !r->res.failed) {
        r->res.failed = 1;
        snprintf(r->res.error, sizeof r->res.error, "out of memory keeping the reply text");
    }
    pthread_cond_broadcast(&r->cv);
    if (sl) {
        sl->r = NULL;
        s->n_active--;
    }
    req_unref(r);
    if (!s->n_active && !s->n_queued) pthread_cond_broadcast(&s->idle);
}

static void finish(ts_sched *s, slot *sl, ts_gen_stop why, const ts_status *st, const ts_error *err) {
    ts_sreq *r = sl->r;
    int n_kept = 0;
    if (!st || !*st) why = ts_gen_end(r->gen, why); /* the text held back for stop strings */
    ts_gen_tokens(r->gen, &n_kept, NULL);
    double now = ts_now_s();
    /* the prompt's positions came from prefill: kept for later prompts that start the same */
    if (sl->prefilled && (!st || !*st)) cache_put(s, r->prompt, r->n_prompt, sl->seq);
    ts_cpu_seq_truncate(sl->seq, 0);
    pthread_mutex_lock(&s->mu);
    r->res.n_gen = n_kept;
    r->res.n_drafted = sl->n_drafted;
    r->res.n_accepted = sl->n_accepted;
    r->res.by_length = why == TS_GEN_STOP_MAX || why == TS_GEN_STOP_CTX;
    r->cut = why == TS_GEN_STOP_STRING;
    if (st && *st) {
        r->res.failed = 1;
        snprintf(r->res.error, sizeof r->res.error, "%s", err->msg);
    }
    /* counted before finish_locked hands the reply over: a client that has its reply, and a
     * /metrics read after it counts that reply's 200, must also see its tokens (test_serve_load
     * read 14 tokens fewer than its replies held once, when this came after the unlock) */
    ts_smetrics_tokens(s->metrics, 0, n_kept);
    finish_locked(s, sl, r);
    ts_smetrics_set_queue(s->metrics, s->n_queued, s->n_active, s->n_slots);
    pthread_mutex_unlock(&s->mu);
    if (n_kept > 1 && now > sl->t_first) ts_smetrics_decode_rate(s->metrics, (n_kept - 1) / (now - sl->t_first));
}

/* Prefill pieces when every position's logits are wanted: (PROMPT_LP_PIECE, n_vocab) floats at
 * a time rather than the whole prompt's. */
#define PROMPT_LP_PIECE 64

/* Prefills r's prompt into seq (empty) and records the prompt tokens' log-probabilities (the
 * first has none) from every position's logits. The KV and the last position's logits, which
 * the first token is sampled from, must be bit-identical to the ordinary prefill's, or echo
 * would change the reply. Prefill is split-invariant (tests/test_cpu_prefix.c) as long as no
 * piece is a single token (that runs the decode arithmetic), but the LM head over many rows
 * does not round as the one-row LM head of the last position does. So: prompt[0, n-1) in
 * pieces of at most PROMPT_LP_PIECE tokens with every row's logits (rows 0..n-2 predict tokens
 * 1..n-1), then the last two positions again, as an ordinary prefill of two tokens with the
 * last row's logits only. *last: those logits. */
static ts_status prefill_logprobs(ts_sched *s, ts_cpu_seq *seq, ts_sreq *r, float **last, ts_error *err) {
    size_t V = (size_t)s->n_vocab;
    if (!s->plogits && !(s->plogits = malloc(sizeof(float) * PROMPT_LP_PIECE * V)))
        return ts_fail(err, TS_ERR_NOMEM, "out of memory for the prompt's logits (echo with logprobs)");
    int n = r->n_prompt;
    ts_sreq_token *t = malloc(sizeof *t * (size_t)n);
    if (!t) return ts_fail(err, TS_ERR_NOMEM, "out of memory for the prompt's log-probabilities");
    int off = 0;
    for (int i = 0; i < n; i++) {
        t[i].lp.id = r->prompt[i];
        t[i].lp.logprob = NAN;
        t[i].lp.n_top = 0;
        t[i].offset = off;
        size_t bl = 0; /* a prompt spells its special tokens; an added BOS is not in its text */
        t[i].len = !(i == 0 && r->prompt_bos) && ts_tok_token_bytes(s->tok, r->prompt[i], &bl) ? (int)bl : 0;
        t[i].prompt = 1;
        off += t[i].len;
    }
    ts_status st = TS_OK;
    for (int p = 0; p < n - 1 && !st;) {
        int take = n - 1 - p < PROMPT_LP_PIECE ? n - 1 - p : PROMPT_LP_PIECE;
        if (n - 1 - p - take == 1) take--; /* the last piece would be one token */
        st = ts_cpu_forward_seq(s->cpu, seq, r->prompt + p, take, s->plogits, 1, err);
        for (int j = 0; !st && j < take; j++)
            ts_logprobs(s->plogits + (size_t)j * V, s->n_text, r->prompt[p + j + 1], r->echo_logprobs,
                        &t[p + j + 1].lp);
        p += take;
    }
    if (!st) {
        int keep = n > 2 ? n - 2 : 0;
        ts_cpu_seq_truncate(seq, keep);
        st = ts_cpu_forward_seq(s->cpu, seq, r->prompt + keep, n - keep, s->plogits, 0, err);
        *last = s->plogits;
    }
    if (!st) {
        pthread_mutex_lock(&s->mu);
        if (!toks_reserve(r, n)) {
            memcpy(r->toks + r->n_toks, t, sizeof *t * (size_t)n);
            r->n_toks += n;
            pthread_cond_signal(&r->cv);
        } else st = ts_fail(err, TS_ERR_NOMEM, "out of memory for the prompt's log-probabilities");
        pthread_mutex_unlock(&s->mu);
    }
    free(t);
    return st;
}

int ts_sched_piece(int rest, int budget) {
    if (budget < 0 || rest <= budget) return rest;
    if (budget < 2) return 0;
    if (rest - budget != 1) return budget;
    return budget >= 3 ? budget - 1 : rest; /* a last piece of 2 rows, not 1 */
}

/* The prefilling slot admitted first that has not had its piece this step, or NULL. */
static slot *oldest_prefilling(ts_sched *s, uint64_t after) {
    slot *best = NULL;
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->r && !sl->prefilled && sl->order >= after && (!best || sl->order < best->order)) best = sl;
    }
    return best;
}

/* Prefills the next pieces of the slots still prefilling, at most o.prefill_chunk tokens in
 * all (0: every prompt whole), oldest first; a slot whose prompt is complete samples its first
 * token. */
static void prefill_step(ts_sched *s) {
    ts_error err;
    /* newly admitted: the prefix cache's KV, and the prompt as the generator's context */
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->r || sl->begun) continue;
        ts_sreq *r = sl->r;
        if (r->echo_logprobs >= 0) { /* every position's logits: no cached prefix, one call */
            ts_cpu_seq_truncate(sl->seq, 0);
            sl->n_cached = 0;
        } else sl->n_cached = cache_take(s, r->prompt, r->n_prompt, sl->seq); /* empties the sequence first */
        ts_gen_begin(r->gen, r->prompt, r->n_prompt);
        sl->begun = 1;
        pthread_mutex_lock(&s->mu);
        r->res.n_cached = sl->n_cached;
        pthread_mutex_unlock(&s->mu);
    }
    int budget = s->o.prefill_chunk > 0 ? s->o.prefill_chunk : -1, chunks = 0, tokens = 0;
    for (slot *sl = oldest_prefilling(s, 0); sl && budget; sl = oldest_prefilling(s, sl->order + 1)) {
        ts_sreq *r = sl->r;
        int at = ts_cpu_seq_n_past(sl->seq), n = ts_sched_piece(r->n_prompt - at, budget);
        if (r->echo_logprobs >= 0) n = r->n_prompt; /* prefill_logprobs takes the prompt whole */
        if (!n) break;
        int last = at + n == r->n_prompt;
        /* the logits of the prompt's last position only: earlier pieces skip the LM head */
        float *lg = last ? s->logits : NULL;
        ts_status st = r->echo_logprobs >= 0 ? prefill_logprobs(s, sl->seq, r, &lg, &err)
                                             : ts_cpu_forward_seq(s->cpu, sl->seq, r->prompt + at, n, lg, 0, &err);
        chunks++, tokens += n, sl->pieces++;
        if (budget > 0) budget = n < budget ? budget - n : 0;
        if (!st && !last) continue;
        int done = 1;
        ts_gen_stop why = TS_GEN_STOP_EOS;
        if (!st && r->prompt_only) why = TS_GEN_STOP_MAX;
        else if (!st) st = ts_gen_next(r->gen, lg, ts_cpu_seq_n_past(sl->seq), &sl->next, &done, &why, &err);
        sl->prefilled = 1;
        sl->t_first = sl->t_last = ts_now_s();
        pthread_mutex_lock(&s->mu);
        r->res.n_pieces = sl->pieces;
        r->res.n_steps_between = sl->steps_between;
        pthread_mutex_unlock(&s->mu);
        ts_smetrics_tokens(s->metrics, r->n_prompt, 0);
        if (sl->n_cached) ts_smetrics_prefix_hit(s->metrics, sl->n_cached);
        ts_smetrics_ttft(s->metrics, sl->t_first - r->t_arrival);
        if (st || done) finish(s, sl, why, &st, &err);
    }
    if (chunks) ts_smetrics_prefill(s->metrics, chunks, tokens);
}

static void *sched_main(void *arg) {
    ts_sched *s = arg;
    ts_error err;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->quit && !s->qhead && !s->n_active) pthread_cond_wait(&s->work, &s->mu);
        if (s->quit && !s->qhead && !s->n_active) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        /* Clients that left: a queued request goes, a slot frees now. */
        for (ts_sreq **pp = &s->qhead; *pp;) {
            ts_sreq *r = *pp;
            if (r->cancelled) {
                *pp = r->next;
                s->n_queued--;
                finish_locked(s, NULL, r);
            } else pp = &r->next;
        }
        s->qtail = NULL;
        for (ts_sreq *r = s->qhead; r; r = r->next) s->qtail = r;
        int n_cancel = 0;
        for (int i = 0; i < s->n_slots; i++)
            if (s->slots[i].r && s->slots[i].r->cancelled) n_cancel++;
        /* Admission: FIFO into free slots. */
        for (int i = 0; i < s->n_slots && s->qhead; i++) {
            if (s->slots[i].r) continue;
            ts_sreq *r = s->qhead;
            s->qhead = r->next;
            if (!s->qhead) s->qtail = NULL;
            s->n_queued--;
            s->slots[i].r = r;
            s->slots[i].begun = s->slots[i].prefilled = 0;
            s->slots[i].pieces = s->slots[i].steps_between = 0;
            s->slots[i].order = s->admitted++;
            s->slots[i].n_drafted = s->slots[i].n_accepted = 0;
            s->n_active++;
        }
        ts_smetrics_set_queue(s->metrics, s->n_queued, s->n_active, s->n_slots);
        pthread_mutex_unlock(&s->mu);

        if (n_cancel)
            for (int i = 0; i < s->n_slots; i++) {
                slot *sl = &s->slots[i];
                if (!sl->r) continue;
                pthread_mutex_lock(&s->mu);
                int c = sl->r->cancelled;
                pthread_mutex_unlock(&s->mu);
                if (c) finish(s, sl, TS_GEN_STOP_EOS, NULL, NULL);
            }

        prefill_step(s);

        /* One decode step over every generating slot: its next token, and with lookup the
         * drafts that fit (each slot after it keeps room for its one row). */
        int B = 0, R = 0, n_gen = 0;
        for (int i = 0; i < s->n_slots; i++) n_gen += s->slots[i].r && s->slots[i].prefilled;
        for (int k = 0; k < s->n_slots && R < s->rows_max; k++) {
            int i = (s->rot + k) % s->n_slots;
            slot *sl = &s->slots[i];
            if (!sl->r || !sl->prefilled) continue;
            int p0 = ts_cpu_seq_n_past(sl->seq), room = s->rows_max - R - n_gen--;
            if (room > s->o.n_ctx - p0 - 1) room = s->o.n_ctx - p0 - 1; /* the drafts' positions fit the cache */
            s->btok[R] = sl->next;
            int d = room > 0 ? ts_gen_draft(sl->r->gen, room, s->btok + R + 1) : 0;
            s->bseqs[B] = sl->seq;
            s->bslot[B] = i;
            s->bn[B] = 1 + d;
            s->bp0[B] = p0;
            B++, R += 1 + d;
        }
        s->rot = (s->rot + 1) % s->n_slots;
        if (!B) continue;
        for (int i = 0; i < s->n_slots; i++) /* the decode steps a prompt's prefill let through */
            s->slots[i].steps_between += s->slots[i].r && !s->slots[i].prefilled && s->slots[i].pieces;
        ts_status st = ts_cpu_decode_multi(s->cpu, s->bseqs, s->bn, s->btok, B, s->logits, &err);
        double now = ts_now_s();
        int drafted = 0, accepted = 0, verifies = 0;
        for (int b = 0, r = 0; b < B; r += s->bn[b], b++) {
            slot *sl = &s->slots[s->bslot[b]];
            ts_smetrics_token_gap(s->metrics, now - sl->t_last);
            sl->t_last = now;
            int done = 1, used = 1, d = s->bn[b] - 1;
            ts_gen_stop why = TS_GEN_STOP_EOS;
            ts_status st2 = st;
            if (!st2)
                st2 = ts_gen_next_run(sl->r->gen, s->logits + (size_t)r * (size_t)s->n_vocab, s->btok + r + 1, d,
                                      s->bp0[b], &sl->next, &used, &done, &why, &err);
            if (!st && d) {
                ts_cpu_seq_truncate(sl->seq, s->bp0[b] + used); /* the rejected drafts' rows */
                drafted += d, accepted += used - 1, verifies++;
                sl->n_drafted += d, sl->n_accepted += used - 1;
            }
            if (st2 || done) finish(s, sl, why, &st2, &err);
        }
        if (verifies) ts_smetrics_lookup(s->metrics, verifies, drafted, accepted);
    }
    return NULL;
}

ts_status ts_sched_new(ts_cpu *c, const ts_model *m, const ts_tok *t, const int32_t *eos, int n_eos,
                       const ts_sched_opts *o, ts_smetrics *metrics, ts_sched **out, ts_error *err) {
    *out = NULL;
    if (o->parallel < 1 || o->max_queue < 0 || o->n_ctx < 1 || o->lookup < 0 || o->lookup > TS_GEN_LOOKUP_MAX ||
        o->prefill_chunk < 0 || o->prefill_chunk == 1)
        return ts_fail(err, TS_ERR_ARG,
                       "serve: parallel %d, queue %d, context %d, lookup %d, prefill chunk %d: expected >= 1, >= 0, "
                       ">= 1, 0..%d, 0 or >= 2",
                       o->parallel, o->max_queue, o->n_ctx, o->lookup, TS_GEN_LOOKUP_MAX, o->prefill_chunk);
    ts_sched *s = calloc(1, sizeof *s);
    if (!s) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    s->cpu = c;
    s->m = m;
    s->tok = t;
    s->o = *o;
    s->metrics = metrics;
    for (int i = 0; i < n_eos && s->n_eos < 16; i++) s->eos[s->n_eos++] = eos[i];
    s->n_vocab = ts_model_config(m)->n_vocab;
    s->n_text = ts_tok_n_vocab(t) < s->n_vocab ? ts_tok_n_vocab(t) : s->n_vocab;
    s->n_slots = o->parallel;
    {
        const ts_config *cf = ts_model_config(m);
        /* K and V of one position in every layer: the prefix cache's unit (--kv-cache f16 halves it) */
        s->pos_bytes = 2ull * ts_kv_cache_elem_bytes(m->kv_type) * (uint64_t)cf->n_layers * (uint64_t)cf->n_kv_heads * (uint64_t)cf->head_dim;
        s->cache_max = o->cache_bytes;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->idle, NULL);
    ts_status st = TS_OK;
    { /* every slot's KV cache, checked against the memory left before it is allocated */
        ts_mem_need need;
        ts_cpu_opts co = {.force_variant = -1};
        ts_cpu_mem_need(m, o->n_ctx, &co, &need);
        ts_mem_need kv = {.kv = need.kv * (uint64_t)s->n_slots};
        char what[160];
        snprintf(what, sizeof what, "the KV caches of %d slots of %d positions (--parallel, --ctx)", s->n_slots,
                 o->n_ctx);
        st = ts_mem_check(&kv, what, err);
    }
    s->rows_max = ts_cpu_batch_max(c);
    size_t rows = (size_t)(s->n_slots > s->rows_max ? s->n_slots : s->rows_max);
    s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
    s->logits = malloc(sizeof(float) * rows * (size_t)s->n_vocab);
    s->bseqs = calloc((size_t)s->n_slots, sizeof *s->bseqs);
    s->btok = calloc(rows, sizeof *s->btok);
    s->bslot = calloc((size_t)s->n_slots, sizeof *s->bslot);
    s->bn = calloc((size_t)s->n_slots, sizeof *s->bn);
    s->bp0 = calloc((size_t)s->n_slots, sizeof *s->bp0);
    if (!st && (!s->slots || !s->logits || !s->bseqs || !s->btok || !s->bslot || !s->bn || !s->bp0))
        st = ts_fail(err, TS_ERR_NOMEM, "out of memory");
    for (int i = 0; !st && i < s->n_slots; i++) st = ts_cpu_seq_new(c, o->n_ctx, &s->slots[i].seq, err);
    if (!st && pthread_create(&s->th, NULL, sched_main, s)) st = ts_fail(err, TS_ERR_NOMEM, "serve: no thread");
    if (st) {
        ts_sched_free(s);
        return st;
    }
    s->started = 1;
    ts_smetrics_set_queue(metrics, 0, 0, s->n_slots);
    *out = s;
    return TS_OK;
}

int ts_sched_slots(const ts_sched *s) { return s->n_slots; }

void ts_sched_drain(ts_sched *s) {
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    while (s->started && (s->n_queued || s->n_active)) pthread_cond_wait(&s->idle, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

void ts_sched_free(ts_sched *s) {
    if (!s) return;
    if (s->started) {
        ts_sched_drain(s);
        pthread_mutex_lock(&s->mu);
        s->quit = 1;
        pthread_cond_signal(&s->work);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
    }
    for (int i = 0; s->slots && i < s->n_slots; i++)
        if (s->slots[i].seq) ts_cpu_seq_free(s->slots[i].seq);
    free(s->slots);
    free(s->logits);
    free(s->plogits);
    free(s->bseqs);
    free(s->btok);
    free(s->bslot);
    while (s->n_cache) centry_drop(s, s->n_cache - 1);
    free(s->cache);
    free(s->bn);
    free(s->bp0);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->idle);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
