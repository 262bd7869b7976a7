/* SentencePiece-style BPE from vocabulary arrays (tokens, scores, types), as a GGUF with
 * tokenizer.ggml.model = "llama" stores them: spaces become "▁", a dummy "▁" starts the text,
 * adjacent pieces merge best-score first when their concatenation is a token, and characters
 * left outside the vocabulary fall back to <0xNN> byte tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tok/tok_internal.h"

static const char k_space[] = "\xE2\x96\x81"; /* U+2581, SentencePiece's space marker */

/* "<0xNN>" -> NN, or -1. */
static int byte_token(const char *s) {
    unsigned v;
    char tail;
    if (strlen(s) != 6 || sscanf(s, "<0x%2x%c", &v, &tail) != 2 || tail != '>') return -1;
    return (int)v;
}

ts_status ts_tok_spm_new(const ts_tok_spm_params *p, ts_tok **out, ts_error *err) {
    *out = NULL;
    if (!p || p->n_vocab <= 0 || !p->tokens || !p->scores)
        return ts_fail(err, TS_ERR_ARG,
                       "SentencePiece vocabulary: expected n_vocab > 0 with tokens "
                       "and scores, found n_vocab %d",
                       p ? p->n_vocab : 0);
    int32_t specials[3] = {p->bos, p->eos, p->unk};
    for (int i = 0; i < 3; i++)
        if (specials[i] < -1 || specials[i] >= p->n_vocab)
            return ts_fail(err, TS_ERR_ARG, "SentencePiece vocabulary: %s id %d is outside [0, %d)",
                           i == 0   ? "bos"
                           : i == 1 ? "eos"
                                    : "unk",
                           specials[i], p->n_vocab);
    ts_tok *t = calloc(1, sizeof *t);
    if (!t) return ts_fail(err, TS_ERR_NOMEM, "out of memory for a tokenizer");
    t->kind = TOK_KIND_SPM;
    t->bos = p->bos;
    t->eos = p->eos;
    t->unk = p->unk;
    t->add_space_prefix = p->add_space_prefix;
    t->pad = -1;
    t->add_bos = p->add_bos;
    t->add_eos = p->add_eos;
    ts_status s = tok_alloc_ids(t, p->n_vocab, err);
    size_t n = (size_t)p->n_vocab;
    if (!s && (!(t->scores = malloc(n * sizeof *t->scores)) ||
               !(t->added = calloc(n, sizeof *t->added)) || tok_strmap_init(&t->by_str, n)))
        s = ts_fail(err, TS_ERR_NOMEM, "out of memory for a vocabulary of %d tokens", p->n_vocab);
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = -1;
    for (int32_t id = 0; !s && id < p->n_vocab; id++) {
        const char *str = p->tokens[id];
        if (!str) {
            s = ts_fail(err, TS_ERR_ARG, "SentencePiece vocabulary: token %d is NULL", id);
            break;
        }
        size_t len = strlen(str);
        if (tok_utf8_valid((const uint8_t *)str, len) != len) {
            s = ts_fail(err, TS_ERR_ARG, "SentencePiece vocabulary: token %d is not valid UTF-8",
                        id);
            break;
        }
        int type = p->types ? p->types[id] : TS_TOK_TYPE_NORMAL;
        t->scores[id] = p->scores[id];
        t->str_off[id] = (uint32_t)t->arena.len;
        t->str_len[id] = (uint32_t)len;
        t->flags[id] = TOK_F_PRESENT;
        if (tok_buf_put(&t->arena, str, len)) goto nomem;
        int bv = byte_token(str);
        if (bv >= 0 && (type == TS_TOK_TYPE_BYTE || !p->types)) {
            uint8_t ch = (uint8_t)bv;
            t->flags[id] |= TOK_F_BYTE;
            if (t->byte_id[ch] < 0) t->byte_id[ch] = id;
            t->byt_off[id] = (uint32_t)t->arena.len;
            t->byt_len[id] = 1;
            if (tok_buf_put(&t->arena, &ch, 1)) goto nomem;
        } else { /* "▁" back to a space */
            t->byt_off[id] = (uint32_t)t->arena.len;
            for (size_t i = 0; i < len;) {
                if (len - i >= 3 && !memcmp(str + i, k_space, 3)) {
                    if (tok_buf_put(&t->arena, " ", 1)) goto nomem;
                    i += 3;
                } else {
                    if (tok_buf_put(&t->arena, str + i, 1)) goto nomem;
                    i++;
                }
            }
            t->byt_len[id] = (uint32_t)(t->arena.len - t->byt_off[id]);
        }
        if (t->byt_len[id] > t->max_token_bytes) t->max_token_bytes = t->byt_len[id];
        if (type == TS_TOK_TYPE_CONTROL || type == TS_TOK_TYPE_UNKNOWN)
            t->flags[id] |= TOK_F_SPECIAL;
        /* control, unknown and user-defined tokens are recognized when written in the text,
         * as llama.cpp parses specials and as HF's tokenizer.json lists <unk> among its
         * added tokens */
        if ((type == TS_TOK_TYPE_CONTROL || type == TS_TOK_TYPE_UNKNOWN || type == TS_TOK_TYPE_USER_DEFINED) &&
            len) {
            tok_added *a = &t->added[t->n_added++];
            a->id = id;
            a->off = t->str_off[id];
            a->len = (uint32_t)len;
            a->special = type != TS_TOK_TYPE_USER_DEFINED;
        }
        tok_strmap_put(&t->by_str, t->arena.p, t->str_off[id], t->str_len[id], id);
    }
    if (s) {
        ts_tok_free(t);
        return s;
    }
    tok_sort_added(t);
    *out = t;
    return TS_OK;
nomem:
    ts_tok_free(t);
    return ts_fail(err, TS_ERR_NOMEM, "out of memory for a vocabulary of %d tokens", p->n_vocab);
}

typedef struct bigram {
    float score;
    int32_t left;
    uint32_t size; /* bytes of the pair when pushed: a later mismatch means it is stale */
} bigram;

/* Best score first, then leftmost. */
static int bg_before(const bigram *a, const bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct spm_ctx {
    const ts_tok *t;
    const char *s;
    int32_t *start, *len, *prev, *next;
    bigram *heap;
    size_t heap_n;
} spm_ctx;

static void bg_push(spm_ctx *c, int32_t l) {
    if (l < 0 || c->next[l] < 0) return;
    int32_t r = c->next[l];
    size_t n = (size_t)c->len[l] + (size_t)c->len[r];
    int32_t id = tok_strmap_get(&c->t->by_str, c->t->arena.p, c->s + c->start[l], n);
    if (id < 0) return;
    bigram e = {c->t->scores[id], l, (uint32_t)n};
    size_t i = c->heap_n++;
    while (i > 0 && bg_before(&e, &c->heap[(i - 1) / 2])) {
        c->heap[i] = c->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    c->heap[i] = e;
}

static bigram bg_pop(spm_ctx *c) {
    bigram top = c->heap[0], e = c->heap[--c->heap_n];
    size_t i = 0, n = c->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const bigram *best = &e;
        if (l < n && bg_before(&c->heap[l], best)) best = &c->heap[m = l];
        if (l + 1 < n && bg_before(&c->heap[l + 1], best)) m = l + 1;
        if (m == i) break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    if (n) c->heap[i] = e;
    return top;
}

ts_status tok_spm_encode(const ts_tok *t, const char *text, size_t len, int first, tok_ids *out,
                         ts_error *err) {
    tok_buf b = {0};
    ts_status s = TS_OK;
    if (first && t->add_space_prefix && tok_buf_put(&b, k_space, 3)) s = TS_ERR_NOMEM;
    for (size_t i = 0; !s && i < len; i++)
        if (text[i] == ' ' ? tok_buf_put(&b, k_space, 3) : tok_buf_put(&b, text + i, 1))
            s = TS_ERR_NOMEM;
    if (s || !b.len) {
        tok_buf_free(&b);
        return s;
    }
    size_t n = b.len; /* symbols <= bytes */
    spm_ctx c = {.t = t, .s = b.p};
    c.start = malloc(n * sizeof *c.start);
    c.len = malloc(n * sizeof *c.len);
    c.prev = malloc(n * sizeof *c.prev);
    c.next = malloc(n * sizeof *c.next);
    c.heap = malloc(3 * n * sizeof *c.heap); /* n-1 initial pairs + 2 per merge */
    if (!c.start || !c.len || !c.prev || !c.next || !c.heap) s = TS_ERR_NOMEM;
    int32_t m = 0;
    for (size_t i = 0; !s && i < n; m++) {
        int k = tok_utf8_len((uint8_t)b.p[i]);
        c.start[m] = (int32_t)i;
        c.len[m] = k;
        c.prev[m] = m - 1;
        c.next[m] = m + 1;
        i += (size_t)k;
    }
    if (!s) {
        c.next[m - 1] = -1;
        for (int32_t i = 0; i + 1 < m; i++)
            bg_push(&c, i);
        while (c.heap_n) {
            bigram e = bg_pop(&c);
            int32_t l = e.left, r = c.next[l];
            if (c.len[l] == 0 || r < 0 || (uint32_t)(c.len[l] + c.len[r]) != e.size) continue;
            c.len[l] += c.len[r];
            c.len[r] = 0;
            c.next[l] = c.next[r];
            if (c.next[r] >= 0) c.prev[c.next[r]] = l;
            bg_push(&c, c.prev[l]);
            bg_push(&c, l);
        }
        for (int32_t i = 0; !s && i >= 0; i = c.next[i]) {
            int32_t id = tok_strmap_get(&t->by_str, t->arena.p, b.p + c.start[i], (size_t)c.len[i]);
            if (id >= 0) {
                if (tok_ids_push(out, id)) s = TS_ERR_NOMEM;
                continue;
            }
            for (int32_t j = 0; !s && j < c.len[i]; j++) {
                int32_t bid = t->byte_id[(uint8_t)b.p[c.start[i] + j]];
                if (bid < 0) bid = t->unk;
                if (bid >= 0 && tok_ids_push(out, bid)) s = TS_ERR_NOMEM;
            }
        }
    }
    if (s == TS_ERR_NOMEM) ts_fail(err, s, "out of memory encoding %zu bytes", len);
    free(c.start);
    free(c.len);
    free(c.prev);
    free(c.next);
    free(c.heap);
    tok_buf_free(&b);
    return s;
}
