/* Byte-level BPE encoding of text that holds no raw-matched added tokens: normalize (NFC &c.
 * via utf8proc), split on `normalized` added tokens, run the pre-tokenizer stages, then merge
 * each pre-token by rank. Merging works on raw bytes: the byte-level alphabet is a bijection,
 * so ids are the same as merging the mapped characters, without building mapped strings. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/error.h"
#include "tok/tok_internal.h"

typedef struct heap_ent {
    int32_t rank, pos;
} heap_ent;

typedef struct bpe_ctx {
    const ts_tok *t;
    tok_ids *out;
    ts_error *err;
    pcre2_match_data *md;
    tok_spans spans[TOK_MAX_STAGES];
    tok_buf prefixed[TOK_MAX_STAGES]; /* " " + piece for ByteLevel's add_prefix_space */
    int32_t *sym, *prev, *next;
    heap_ent *heap;
    size_t sym_cap, heap_n;
} bpe_ctx;

/* Lowest rank first, then leftmost: HF's merge order. */
static int ent_less(heap_ent a, heap_ent b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(bpe_ctx *c, heap_ent e) {
    size_t i = c->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ent_less(e, c->heap[p])) break;
        c->heap[i] = c->heap[p];
        i = p;
    }
    c->heap[i] = e;
}

static heap_ent heap_pop(bpe_ctx *c) {
    heap_ent top = c->heap[0], e = c->heap[--c->heap_n];
    size_t i = 0, n = c->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        heap_ent best = e;
        if (l < n && ent_less(c->heap[l], best)) {
            m = l;
            best = c->heap[l];
        }
        if (l + 1 < n && ent_less(c->heap[l + 1], best)) m = l + 1;
        if (m == i) break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    if (n) c->heap[i] = e;
    return top;
}

static int reserve(bpe_ctx *c, size_t n) {
    if (n <= c->sym_cap) return 0;
    size_t cap = c->sym_cap ? c->sym_cap : 64;
    while (cap < n)
        cap *= 2;
    int32_t *a = realloc(c->sym, cap * sizeof *a);
    if (a) c->sym = a;
    int32_t *b = realloc(c->prev, cap * sizeof *b);
    if (b) c->prev = b;
    int32_t *d = realloc(c->next, cap * sizeof *d);
    if (d) c->next = d;
    heap_ent *h = realloc(c->heap, 3 * cap * sizeof *h);
    if (h) c->heap = h;
    if (!a || !b || !d || !h) return -1;
    c->sym_cap = cap;
    return 0;
}

static void push_pair(bpe_ctx *c, int32_t pos) {
    int32_t nx = c->next[pos];
    if (nx < 0) return;
    const tok_pair *p = tok_pairmap_get(&c->t->merges, c->sym[pos], c->sym[nx]);
    if (p) heap_push(c, (heap_ent){p->rank, pos});
}

/* One pre-token (raw bytes) to ids. */
static ts_status bpe_word(bpe_ctx *c, const uint8_t *w, size_t n) {
    const ts_tok *t = c->t;
    if (t->ignore_merges) { /* Llama-3: a pre-token that is a token is emitted whole */
        int32_t id = tok_strmap_get(&t->by_bytes, t->arena.p, (const char *)w, n);
        if (id >= 0) return tok_ids_push(c->out, id) ? TS_ERR_NOMEM : TS_OK;
    }
    uint32_t h = 0;
    if (t->cache && n <= TOK_CACHE_WORD) {
        int32_t ids[TOK_CACHE_IDS];
        int k;
        h = tok_hash(w, n);
        if (tok_cache_get(t->cache, (const char *)w, n, h, ids, &k)) {
            for (int i = 0; i < k; i++)
                if (tok_ids_push(c->out, ids[i])) return TS_ERR_NOMEM;
            return TS_OK;
        }
    }
    size_t first = c->out->n;
    if (reserve(c, n)) return TS_ERR_NOMEM;
    int32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[w[i]];
        if (id < 0) continue; /* HF drops a character missing from the vocab when there is no unk */
        c->sym[m] = id;
        c->prev[m] = m - 1;
        c->next[m] = m + 1;
        m++;
    }
    if (m == 0) return TS_OK;
    c->next[m - 1] = -1;
    c->heap_n = 0;
    for (int32_t i = 0; i + 1 < m; i++)
        push_pair(c, i);
    while (c->heap_n) {
        heap_ent e = heap_pop(c);
        int32_t a = e.pos, b = c->next[a];
        /* stale entries: the left symbol died, or the pair changed since it was pushed */
        if (c->sym[a] < 0 || b < 0) continue;
        const tok_pair *p = tok_pairmap_get(&t->merges, c->sym[a], c->sym[b]);
        if (!p || p->rank != e.rank) continue;
        c->sym[a] = p->id;
        c->sym[b] = -1;
        c->next[a] = c->next[b];
        if (c->next[b] >= 0) c->prev[c->next[b]] = a;
        if (c->prev[a] >= 0) push_pair(c, c->prev[a]);
        push_pair(c, a);
    }
    for (int32_t i = 0; i >= 0; i = c->next[i])
        if (tok_ids_push(c->out, c->sym[i])) return TS_ERR_NOMEM;
    if (t->cache && n <= TOK_CACHE_WORD)
        tok_cache_put(t->cache, (const char *)w, n, h, c->out->v + first, (int)(c->out->n - first));
    return TS_OK;
}

/* Runs stage `k` and the ones after it on one piece. */
static ts_status run_stage(bpe_ctx *c, int k, const char *s, size_t len) {
    const ts_tok *t = c->t;
    if (k == t->n_stages) return bpe_word(c, (const uint8_t *)s, len);
    const tok_stage *st = &t->stages[k];
    if (st->bytelevel && st->add_prefix_space && s[0] != ' ') {
        tok_buf *b = &c->prefixed[k];
        b->len = 0;
        if (tok_buf_put(b, " ", 1) || tok_buf_put(b, s, len)) return TS_ERR_NOMEM;
        s = b->p;
        len = b->len;
    }
    if (!st->re) return run_stage(c, k + 1, s, len);
    tok_spans *sp = &c->spans[k];
    if (tok_split(st, c->md, s, len, sp, c->err) < 0) return TS_ERR_ARG;
    /* sp is reused by this stage only; deeper stages use their own */
    for (size_t i = 0; i < sp->n; i++) {
        size_t a = sp->v[2 * i], b = sp->v[2 * i + 1];
        ts_status r = run_stage(c, k + 1, s + a, b - a);
        if (r) return r;
    }
    return TS_OK;
}

static ts_status encode_normalized(bpe_ctx *c, const char *s, size_t len) {
    const ts_tok *t = c->t;
    if (!t->n_added_normalized) return run_stage(c, 0, s, len);
    size_t pos = 0;
    while (pos < len) {
        size_t ms = len, me = len;
        int k = tok_find_added(t, s, len, pos, 1, &ms, &me);
        if (k < 0) ms = me = len;
        if (ms > pos) {
            ts_status r = run_stage(c, 0, s + pos, ms - pos);
            if (r) return r;
        }
        if (k >= 0 && tok_ids_push(c->out, t->added[k].id)) return TS_ERR_NOMEM;
        pos = me;
    }
    return TS_OK;
}

/* 1 when every normal form provably leaves s as it is: each character is a starter without
 * any decomposition that takes part in no composition (utf8proc's own tables; Hangul
 * composes by rule, not by table, so it always goes through utf8proc). Most CJK, Cyrillic
 * and emoji text passes, and the check costs a fraction of normalizing. */
static int norm_inert(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        if ((uint8_t)s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        i += (size_t)tok_utf8_next((const uint8_t *)s + i, &cp);
        if ((cp >= 0x1100 && cp <= 0x11FF) || (cp >= 0xAC00 && cp <= 0xD7A3)) return 0;
        const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
        if (p->combining_class || p->decomp_seqindex != UINT16_MAX || p->comb_index != UINT16_MAX)
            return 0;
    }
    return 1;
}

ts_status tok_bpe_encode(const ts_tok *t, const char *text, size_t len, tok_ids *out,
                         ts_error *err) {
    bpe_ctx c = {.t = t, .out = out, .err = err};
    ts_status s = TS_OK;
    uint8_t *norm = NULL;
    const char *p = text;
    size_t n = len;
    c.md = pcre2_match_data_create(16, NULL);
    if (!c.md) s = TS_ERR_NOMEM;
    for (int i = 0; !s && i < t->n_norms && !norm_inert(p, n); i++) {
        static const int opts[] = {0, UTF8PROC_COMPOSE, UTF8PROC_DECOMPOSE,
                                   UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
                                   UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT};
        uint8_t *o = NULL;
        utf8proc_ssize_t r = utf8proc_map((const uint8_t *)p, (utf8proc_ssize_t)n, &o,
                                          (utf8proc_option_t)(UTF8PROC_STABLE | opts[t->norms[i]]));
        if (r < 0) {
            s = ts_fail(err, TS_ERR_ARG, "normalizer failed on %zu bytes: %s", n,
                        utf8proc_errmsg(r));
            break;
        }
        free(norm);
        norm = o;
        p = (const char *)o;
        n = (size_t)r;
    }
    if (!s) s = encode_normalized(&c, p, n);
    free(norm);
    pcre2_match_data_free(c.md);
    for (int i = 0; i < TOK_MAX_STAGES; i++) {
        free(c.spans[i].v);
        tok_buf_free(&c.prefixed[i]);
    }
    free(c.sym);
    free(c.prev);
    free(c.next);
    free(c.heap);
    return s;
}
