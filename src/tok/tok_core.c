/* What both tokenizer kinds share: hash tables, UTF-8 helpers, added-token matching, the
 * top-level encode (added tokens first, then the kind's encoder on the text between them),
 * decoding and the streaming UTF-8-safe decoder. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/error.h"
#include "tok/tok_internal.h"

/* ---- arena ---- */

int tok_buf_put(tok_buf *b, const void *src, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int tok_buf_reserve(tok_buf *b, size_t cap) {
    if (cap <= b->cap) return 0;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

void tok_buf_free(tok_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

int tok_ids_push(tok_ids *a, int32_t id) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return 0;
}

/* ---- hashing: 8 bytes at a time, multiply-xorshift mixing ---- */

uint32_t tok_hash(const void *s, size_t n) {
    const uint8_t *p = s;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0x100000001B3ull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = (h ^ v) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    /* the tail without a variable-length copy: two overlapping loads, or three bytes */
    uint64_t v = 0;
    if (n >= 4) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + n - 4, 4);
        v = lo | (uint64_t)hi << 32;
    } else if (n > 0) {
        v = p[0] | (uint64_t)p[n / 2] << 8 | (uint64_t)p[n - 1] << 16;
    }
    h = (h ^ v) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    h *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

/* Load stays under 2/3: with the key's length and offset in the slot, probes are cheap, and
 * a smaller table is fewer cache and TLB misses for the ~1M lookups of a merges list. */
int tok_strmap_init(tok_strmap *m, size_t n_expected) {
    size_t cap = pow2_at_least(n_expected + n_expected / 2 + 1);
    m->slots = malloc(cap * sizeof *m->slots);
    m->mask = cap - 1;
    m->n = 0;
    if (!m->slots) return -1;
    memset(m->slots, 0xff, cap * sizeof *m->slots); /* id -1: empty */
    return 0;
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

int tok_strmap_reserve(tok_strmap *m, size_t n_more) {
    if (3 * (m->n + n_more) < 2 * (m->mask + 1)) return 0;
    tok_strmap g;
    if (tok_strmap_init(&g, m->n + n_more)) return -1;
    for (size_t i = 0; i <= m->mask; i++) {
        const tok_slot *e = &m->slots[i];
        if (e->id < 0) continue;
        size_t j = e->hash & g.mask;
        while (g.slots[j].id >= 0)
            j = (j + 1) & g.mask;
        g.slots[j] = *e;
    }
    g.n = m->n;
    free(m->slots);
    *m = g;
    return 0;
}

int32_t tok_strmap_get_h(const tok_strmap *m, const char *base, const char *s, size_t n,
                         uint32_t h) {
    if (!m->slots) return -1;
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        const tok_slot *e = &m->slots[i];
        if (e->id < 0) return -1;
        if (e->hash == h && e->len == n && !memcmp(base + e->off, s, n)) return e->id;
    }
}

/* The caller keeps the load under 2/3 (init size or tok_strmap_reserve). */
int32_t tok_strmap_put_h(tok_strmap *m, const char *base, uint32_t off, uint32_t len, int32_t id,
                         uint32_t h) {
    const char *s = base + off;
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        tok_slot *e = &m->slots[i];
        if (e->id < 0) {
            *e = (tok_slot){h, id, off, len};
            m->n++;
            return id;
        }
        if (e->hash == h && e->len == len && !memcmp(base + e->off, s, len)) return e->id;
    }
}

void tok_strmap_set(tok_strmap *m, const char *base, uint32_t off, uint32_t len, int32_t id) {
    const char *s = base + off;
    uint32_t h = tok_hash(s, len);
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        tok_slot *e = &m->slots[i];
        if (e->id < 0) return;
        if (e->hash == h && e->len == len && !memcmp(base + e->off, s, len)) {
            e->id = id;
            e->off = off;
            return;
        }
    }
}

int tok_pairmap_init(tok_pairmap *m, size_t n_expected) {
    /* load up to 2/3: the table is large (16 bytes a slot) and page faults cost more than
     * the slightly longer probes */
    size_t cap = pow2_at_least(n_expected + n_expected / 2 + 1);
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < cap; i++)
        m->slots[i].key = UINT64_MAX;
    m->mask = cap - 1;
    return 0;
}

void tok_pairmap_free(tok_pairmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* A later entry for the same pair replaces the earlier one, as HF's map collection does. */
void tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t id) {
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t i = tok_pair_slot(m, a, b);
    while (m->slots[i].key != UINT64_MAX && m->slots[i].key != k)
        i = (i + 1) & m->mask;
    m->slots[i].key = k;
    m->slots[i].rank = rank;
    m->slots[i].id = id;
}

/* ---- UTF-8 ---- */

int tok_utf8_len(uint8_t c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* Allowed range of the second byte after lead c (the rest are always 80..BF). */
static void second_range(uint8_t c, uint8_t *lo, uint8_t *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (c == 0xE0)
        *lo = 0xA0;
    else if (c == 0xED)
        *hi = 0x9F;
    else if (c == 0xF0)
        *lo = 0x90;
    else if (c == 0xF4)
        *hi = 0x8F;
}

size_t tok_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int k = tok_utf8_len(s[i]);
        if (!k || i + (size_t)k > n) return i;
        uint8_t lo, hi;
        second_range(s[i], &lo, &hi);
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (int j = 2; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return i;
        i += (size_t)k;
    }
    return n;
}

int tok_utf8_next(const uint8_t *s, uint32_t *cp) {
    int k = tok_utf8_len(s[0]);
    if (k <= 1) {
        *cp = s[0];
        return 1;
    }
    uint32_t c = s[0] & (0x7F >> k);
    for (int j = 1; j < k; j++)
        c = (c << 6) | (s[j] & 0x3F);
    *cp = c;
    return k;
}

/* ---- the word cache ---- */

struct tok_cache {
    pthread_mutex_t mu;
    tok_cache_ent ent[TOK_CACHE_SLOTS];
};

tok_cache *tok_cache_new(void) {
    tok_cache *c = calloc(1, sizeof *c);
    if (c && pthread_mutex_init(&c->mu, NULL)) {
        free(c);
        return NULL;
    }
    return c;
}

void tok_cache_free(tok_cache *c) {
    if (!c) return;
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int tok_cache_get(tok_cache *c, const char *w, size_t n, uint32_t h, int32_t *ids, int *nids) {
    if (n > TOK_CACHE_WORD || pthread_mutex_trylock(&c->mu)) return 0;
    const tok_cache_ent *e = &c->ent[h & (TOK_CACHE_SLOTS - 1)];
    int hit = e->wlen == n && !memcmp(e->word, w, n);
    if (hit) {
        memcpy(ids, e->ids, e->nids * sizeof *ids);
        *nids = e->nids;
    }
    pthread_mutex_unlock(&c->mu);
    return hit;
}

void tok_cache_put(tok_cache *c, const char *w, size_t n, uint32_t h, const int32_t *ids,
                   int nids) {
    if (n == 0 || n > TOK_CACHE_WORD || nids > TOK_CACHE_IDS || pthread_mutex_trylock(&c->mu))
        return;
    tok_cache_ent *e = &c->ent[h & (TOK_CACHE_SLOTS - 1)];
    e->wlen = (uint8_t)n;
    e->nids = (uint8_t)nids;
    memcpy(e->word, w, n);
    memcpy(e->ids, ids, (size_t)nids * sizeof *ids);
    pthread_mutex_unlock(&c->mu);
}

/* ---- ids and the per-id tables ---- */

ts_status tok_alloc_ids(ts_tok *t, int n_vocab, ts_error *err) {
    size_t n = (size_t)n_vocab;
    t->n_vocab = n_vocab;
    t->str_off = calloc(n, sizeof *t->str_off);
    t->str_len = calloc(n, sizeof *t->str_len);
    t->byt_off = calloc(n, sizeof *t->byt_off);
    t->byt_len = calloc(n, sizeof *t->byt_len);
    t->flags = calloc(n, 1);
    if (!t->str_off || !t->str_len || !t->byt_off || !t->byt_len || !t->flags)
        return ts_fail(err, TS_ERR_NOMEM, "out of memory for a vocabulary of %d tokens", n_vocab);
    return TS_OK;
}

void ts_tok_free(ts_tok *t) {
    if (!t) return;
    tok_buf_free(&t->arena);
    free(t->str_off);
    free(t->str_len);
    free(t->byt_off);
    free(t->byt_len);
    free(t->flags);
    tok_strmap_free(&t->by_str);
    tok_strmap_free(&t->by_bytes);
    tok_pairmap_free(&t->merges);
    tok_cache_free(t->cache);
    for (int i = 0; i < t->n_stages; i++)
        pcre2_code_free(t->stages[i].re);
    free(t->added);
    free(t->scores);
    free(t);
}

int ts_tok_n_vocab(const ts_tok *t) { return t->n_vocab; }
int32_t ts_tok_bos(const ts_tok *t) { return t->bos; }
int32_t ts_tok_eos(const ts_tok *t) { return t->eos; }
int32_t ts_tok_pad(const ts_tok *t) { return t->pad; }
int ts_tok_add_bos(const ts_tok *t) { return t->add_bos; }
int ts_tok_add_eos(const ts_tok *t) { return t->add_eos; }

int32_t ts_tok_token_id(const ts_tok *t, const char *s, size_t len) {
    return tok_strmap_get(&t->by_str, t->arena.p, s, len);
}

const char *ts_tok_token_str(const ts_tok *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab || !(t->flags[id] & TOK_F_PRESENT)) return NULL;
    *len = t->str_len[id];
    return t->arena.p + t->str_off[id];
}

const char *ts_tok_token_bytes(const ts_tok *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab || !(t->flags[id] & TOK_F_PRESENT)) return NULL;
    *len = t->byt_len[id];
    return t->arena.p + t->byt_off[id];
}

int ts_tok_is_special(const ts_tok *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && (t->flags[id] & TOK_F_SPECIAL);
}

/* ---- added tokens ---- */

static int cmp_added(const void *a, const void *b) {
    const tok_added *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Sorting by (first byte, length descending) makes the first hit at a position the longest,
 * which is HF's leftmost-longest rule. Empty contents were refused at load. */
void tok_sort_added(ts_tok *t) {
    t->n_added_normalized = 0;
    for (int i = 0; i < t->n_added; i++) {
        t->added[i].first = (uint8_t)t->arena.p[t->added[i].off];
        t->n_added_normalized += t->added[i].normalized;
    }
    if (t->n_added) qsort(t->added, (size_t)t->n_added, sizeof *t->added, cmp_added);
    int k = 0;
    for (int b = 0; b < 256; b++) {
        t->added_start[b] = k;
        while (k < t->n_added && t->added[k].first == b)
            k++;
    }
    t->added_start[256] = k;
}

/* Unicode White_Space (Rust's char::is_whitespace), what lstrip/rstrip remove in HF. */
static int is_space_cp(uint32_t c) {
    return c == ' ' || (c >= '\t' && c <= '\r') || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}
/* HF's single_word boundary is a regex word character: letters, marks, decimal and letter
 * numbers, connector punctuation ('_') and the two joiners, as measured against HF (other
 * numbers such as '½', symbols, emoji and white space are not). */
static int is_word_cp(uint32_t cp) {
    if (cp < 0x80)
        return cp == '_' || (cp >= '0' && cp <= '9') || ((cp | 32) >= 'a' && (cp | 32) <= 'z');
    if (cp == 0x200C || cp == 0x200D) return 1;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC: return 1;
    default: return 0;
    }
}

/* Is the character ending just before s[i] (i > 0) or starting at s[i] a word character? */
static int word_before(const char *s, size_t i) {
    size_t j = i - 1;
    while (j > 0 && ((uint8_t)s[j] & 0xC0) == 0x80)
        j--;
    uint32_t cp;
    tok_utf8_next((const uint8_t *)s + j, &cp);
    return is_word_cp(cp);
}

static int word_at(const char *s, size_t i) {
    uint32_t cp;
    tok_utf8_next((const uint8_t *)s + i, &cp);
    return is_word_cp(cp);
}

int tok_find_added(const ts_tok *t, const char *s, size_t len, size_t from, int normalized,
                   size_t *ms, size_t *me) {
    if (!t->n_added) return -1;
    const char *base = t->arena.p;
    for (size_t i = from; i < len; i++) {
        uint8_t c = (uint8_t)s[i];
        for (int k = t->added_start[c]; k < t->added_start[c + 1]; k++) {
            const tok_added *a = &t->added[k];
            if (normalized >= 0 && a->normalized != normalized) continue;
            if (a->len > len - i || memcmp(base + a->off, s + i, a->len)) continue;
            size_t e = i + a->len;
            /* single_word: the match may not touch word characters on either side. */
            if (a->single_word && ((i > 0 && word_before(s, i)) || (e < len && word_at(s, e))))
                continue;
            size_t b = i;
            while (a->lstrip && b > from) { /* back over whole white-space characters */
                size_t j = b - 1;
                while (j > from && ((uint8_t)s[j] & 0xC0) == 0x80)
                    j--;
                uint32_t cp;
                tok_utf8_next((const uint8_t *)s + j, &cp);
                if (!is_space_cp(cp)) break;
                b = j;
            }
            while (a->rstrip && e < len) {
                uint32_t cp;
                int k2 = tok_utf8_next((const uint8_t *)s + e, &cp);
                if (!is_space_cp(cp)) break;
                e += (size_t)k2;
            }
            *ms = b;
            *me = e;
            return k;
        }
    }
    return -1;
}

/* ---- encode / decode ---- */

ts_status ts_tok_encode(const ts_tok *t, const char *text, size_t len, int add_bos, int32_t **ids,
                        int *n, ts_error *err) {
    *ids = NULL;
    *n = 0;
    size_t ok = tok_utf8_valid((const uint8_t *)text, len);
    if (ok != len)
        return ts_fail(err, TS_ERR_ARG, "text is not valid UTF-8 at byte %zu (0x%02x)", ok,
                       (uint8_t)text[ok]);
    tok_ids out = {0};
    ts_status s = TS_OK;
    if (add_bos && t->bos >= 0 && tok_ids_push(&out, t->bos)) s = TS_ERR_NOMEM;
    /* HF splits on added tokens that match the raw text first; those flagged `normalized`
     * are looked for again after normalization (inside tok_bpe_encode). */
    /* SentencePiece: every run of text starts the text or follows a token written in it, and
     * llama.cpp gives each such run the dummy prefix; we do the same. */
    size_t pos = 0;
    while (!s && pos < len) {
        size_t ms = len, me = len;
        int k = tok_find_added(t, text, len, pos, t->kind == TOK_KIND_BPE ? 0 : -1, &ms, &me);
        if (k < 0) ms = me = len;
        if (ms > pos)
            s = t->kind == TOK_KIND_BPE ? tok_bpe_encode(t, text + pos, ms - pos, &out, err)
                                        : tok_spm_encode(t, text + pos, ms - pos, 1, &out, err);
        if (!s && k >= 0 && tok_ids_push(&out, t->added[k].id)) s = TS_ERR_NOMEM;
        pos = me;
    }
    if (s == TS_ERR_NOMEM) ts_fail(err, s, "out of memory while encoding %zu bytes", len);
    if (s) {
        free(out.v);
        return s;
    }
    if (out.n > (size_t)INT32_MAX) {
        free(out.v);
        return ts_fail(err, TS_ERR_ARG, "text of %zu bytes gives more than 2^31 tokens", len);
    }
    *ids = out.v;
    *n = (int)out.n;
    return TS_OK;
}

ts_status ts_tok_decode(const ts_tok *t, const int32_t *ids, int n, int skip_special, char **out,
                        size_t *out_len, ts_error *err) {
    tok_buf b = {0};
    int started = 0;
    *out = NULL;
    *out_len = 0;
    for (int i = 0; i < n; i++) {
        size_t k;
        const char *p = ts_tok_token_bytes(t, ids[i], &k);
        if (!p) {
            tok_buf_free(&b);
            return ts_fail(err, TS_ERR_ARG,
                           "token id %d at position %d is outside the vocabulary "
                           "[0, %d)",
                           ids[i], i, t->n_vocab);
        }
        if (skip_special && (t->flags[ids[i]] & TOK_F_SPECIAL)) continue;
        /* SentencePiece's dummy prefix is undone on the first piece of text. */
        if (!started && t->kind == TOK_KIND_SPM && t->add_space_prefix && k && p[0] == ' ' &&
            !(t->flags[ids[i]] & TOK_F_SPECIAL)) {
            p++;
            k--;
        }
        if (!(t->flags[ids[i]] & TOK_F_SPECIAL)) started = 1;
        if (tok_buf_put(&b, p, k)) {
            tok_buf_free(&b);
            return ts_fail(err, TS_ERR_NOMEM, "out of memory while decoding %d tokens", n);
        }
    }
    if (tok_buf_put(&b, "", 0)) return ts_fail(err, TS_ERR_NOMEM, "out of memory while decoding");
    *out = b.p;
    *out_len = b.len;
    return TS_OK;
}

/* ---- streaming decode ---- */

struct ts_tok_stream {
    const ts_tok *t;
    int skip_special, started;
    uint8_t pend[4];
    size_t npend;
    uint8_t *work; /* pend + one token */
    char *out;     /* each input byte becomes at most 3 bytes (U+FFFD) */
};

ts_status ts_tok_stream_new(const ts_tok *t, int skip_special, ts_tok_stream **out, ts_error *err) {
    ts_tok_stream *s = calloc(1, sizeof *s);
    if (s) {
        s->work = malloc(t->max_token_bytes + 8);
        s->out = malloc(3 * (t->max_token_bytes + 8));
    }
    if (!s || !s->work || !s->out) {
        ts_tok_stream_free(s);
        return ts_fail(err, TS_ERR_NOMEM, "out of memory for a decoding stream");
    }
    s->t = t;
    s->skip_special = skip_special;
    *out = s;
    return TS_OK;
}

void ts_tok_stream_free(ts_tok_stream *s) {
    if (!s) return;
    free(s->work);
    free(s->out);
    free(s);
}

void ts_tok_stream_reset(ts_tok_stream *s) {
    s->npend = 0;
    s->started = 0;
}

static size_t put_fffd(char *o) {
    o[0] = (char)0xEF;
    o[1] = (char)0xBF;
    o[2] = (char)0xBD;
    return 3;
}

ts_status ts_tok_stream_feed(ts_tok_stream *s, int32_t id, const char **text, size_t *len,
                             ts_error *err) {
    const ts_tok *t = s->t;
    size_t k;
    const char *p = ts_tok_token_bytes(t, id, &k);
    *text = s->out;
    *len = 0;
    if (!p)
        return ts_fail(err, TS_ERR_ARG, "token id %d is outside the vocabulary [0, %d)", id,
                       t->n_vocab);
    int special = (t->flags[id] & TOK_F_SPECIAL) != 0;
    if (s->skip_special && special) return TS_OK;
    if (!s->started && t->kind == TOK_KIND_SPM && t->add_space_prefix && k && p[0] == ' ' &&
        !special) {
        p++;
        k--;
    }
    if (!special) s->started = 1;
    uint8_t *w = s->work;
    memcpy(w, s->pend, s->npend);
    memcpy(w + s->npend, p, k);
    size_t n = s->npend + k, i = 0, o = 0;
    s->npend = 0;
    /* Emit whole characters; a sequence that can never complete becomes one U+FFFD per
     * maximal invalid subpart; a sequence cut by the end of the token waits. */
    while (i < n) {
        uint8_t c = w[i];
        if (c < 0x80) {
            s->out[o++] = (char)c;
            i++;
            continue;
        }
        int need = tok_utf8_len(c);
        if (!need) {
            o += put_fffd(s->out + o);
            i++;
            continue;
        }
        int j = 1;
        for (; j < need; j++) {
            if (i + (size_t)j >= n) {
                memcpy(s->pend, w + i, n - i);
                s->npend = n - i;
                *len = o;
                return TS_OK;
            }
            uint8_t lo = 0x80, hi = 0xBF;
            if (j == 1) second_range(c, &lo, &hi);
            if (w[i + (size_t)j] < lo || w[i + (size_t)j] > hi) break;
        }
        if (j == need) {
            memcpy(s->out + o, w + i, (size_t)need);
            o += (size_t)need;
        } else {
            o += put_fffd(s->out + o);
        }
        i += (size_t)j;
    }
    *len = o;
    return TS_OK;
}

const char *ts_tok_stream_flush(ts_tok_stream *s, size_t *len) {
    *len = s->npend ? put_fffd(s->out) : 0;
    s->npend = 0;
    return s->out;
}
