/* Internals shared by the tokenizer files: the ts_tok layout, the string and pair hash tables
 * (written here because jansson's objects are far too slow for 150k-entry vocabularies), the
 * pre-tokenizer stages and small UTF-8 helpers. Not part of any API. */
#ifndef TS_TOK_INTERNAL_H
#define TS_TOK_INTERNAL_H
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "tok/tokenizer.h"

/* ---- growable byte arena; strings are referenced by offset so the arena may move ---- */
typedef struct tok_buf {
    char *p;
    size_t len, cap;
} tok_buf;
int tok_buf_put(tok_buf *b, const void *src, size_t n); /* 0 on success, -1 out of memory */
void tok_buf_free(tok_buf *b);
int tok_buf_reserve(tok_buf *b, size_t cap); /* 0 on success */

/* ---- string -> id. A slot carries the key's offset and length in the caller's arena, so a
 * lookup touches the slot and the key bytes only (two cache misses: load time is dominated by
 * the ~1M lookups of a large merges list). ---- */
typedef struct tok_slot {
    uint32_t hash;
    int32_t id; /* -1 = empty */
    uint32_t off, len;
} tok_slot;
typedef struct tok_strmap {
    tok_slot *slots;
    size_t mask, n;
} tok_strmap;
uint32_t tok_hash(const void *s, size_t n);
int tok_strmap_init(tok_strmap *m, size_t n_expected);
void tok_strmap_free(tok_strmap *m);
/* Returns the id of key s[0..n) or -1; h is tok_hash(s, n). */
int32_t tok_strmap_get_h(const tok_strmap *m, const char *base, const char *s, size_t n,
                         uint32_t h);
static inline int32_t tok_strmap_get(const tok_strmap *m, const char *base, const char *s,
                                     size_t n) {
    return tok_strmap_get_h(m, base, s, n, tok_hash(s, n));
}
/* Inserts (key at base + off, len) -> id unless the key is present; returns the id holding it. */
int32_t tok_strmap_put_h(tok_strmap *m, const char *base, uint32_t off, uint32_t len, int32_t id,
                         uint32_t h);
static inline int32_t tok_strmap_put(tok_strmap *m, const char *base, uint32_t off, uint32_t len,
                                     int32_t id) {
    return tok_strmap_put_h(m, base, off, len, id, tok_hash(base + off, len));
}
/* Points an existing key at a new id (no-op when absent). */
void tok_strmap_set(tok_strmap *m, const char *base, uint32_t off, uint32_t len, int32_t id);
/* Makes room for n_more insertions (keeps the load under 2/3); -1 out of memory. */
int tok_strmap_reserve(tok_strmap *m, size_t n_more);
static inline void tok_strmap_prefetch(const tok_strmap *m, uint32_t h) {
#if defined(__GNUC__)
    __builtin_prefetch(&m->slots[h & m->mask]);
#else
    (void)m;
    (void)h;
#endif
}

/* ---- (left id, right id) -> (rank, merged id) ---- */
typedef struct tok_pair {
    uint64_t key; /* UINT64_MAX = empty */
    int32_t rank, id;
} tok_pair;
typedef struct tok_pairmap {
    tok_pair *slots;
    size_t mask;
} tok_pairmap;
int tok_pairmap_init(tok_pairmap *m, size_t n_expected);
void tok_pairmap_free(tok_pairmap *m);
void tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t id);
static inline size_t tok_pair_slot(const tok_pairmap *m, int32_t a, int32_t b) {
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 32) & m->mask;
}
static inline const tok_pair *tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b) {
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t i = tok_pair_slot(m, a, b);
    for (;;) {
        const tok_pair *p = &m->slots[i];
        if (p->key == k) return p;
        if (p->key == UINT64_MAX) return NULL;
        i = (i + 1) & m->mask;
    }
}

/* ---- pre-tokenizer stages, applied in order to each piece of text ---- */
typedef enum tok_behavior {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok_behavior;

typedef struct tok_stage {
    int bytelevel;  /* 0: Split; 1: ByteLevel (always the last stage) */
    pcre2_code *re; /* Split's pattern, or ByteLevel's GPT-2 pattern when use_regex */
    int jit;        /* re was JIT-compiled */
    tok_behavior behavior;
    int invert;
    int add_prefix_space;
} tok_stage;

/* Compiles pattern (literal when !is_regex) for a Split stage; `where` names the field. */
ts_status tok_stage_regex(tok_stage *st, const char *pattern, size_t len, int is_regex,
                          const char *where, ts_error *err);
/* Pieces of s (offsets into s) after one Split stage; reuses *spans. Returns count or -1 on
 * a matching error (message in err). spans hold 2 entries (start, end) per piece. */
typedef struct tok_spans {
    size_t *v;
    size_t n, cap;
} tok_spans;
int tok_split(const tok_stage *st, pcre2_match_data *md, const char *s, size_t len, tok_spans *out,
              ts_error *err);

/* ---- added tokens (HF added_tokens / SentencePiece control and user tokens) ---- */
typedef struct tok_added {
    int32_t id;
    uint32_t off, len; /* content in the string arena */
    uint8_t first;     /* first byte of the content, for the sort */
    uint8_t lstrip, rstrip, single_word, normalized, special;
} tok_added;

typedef enum tok_kind { TOK_KIND_BPE, TOK_KIND_SPM } tok_kind;

typedef enum tok_norm {
    TOK_NORM_NONE,
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD
} tok_norm;

enum { TOK_F_SPECIAL = 1, TOK_F_ADDED = 2, TOK_F_BYTE = 4, TOK_F_PRESENT = 8 };

/* Merge results of short pre-tokens, shared by all encode calls: direct-mapped, guarded by a
 * mutex that encoders only try-lock, so threads never wait on it (a busy cache is skipped). */
#define TOK_CACHE_SLOTS 16384
#define TOK_CACHE_WORD 22
#define TOK_CACHE_IDS 8
typedef struct tok_cache_ent {
    uint8_t wlen, nids; /* wlen 0: empty */
    char word[TOK_CACHE_WORD];
    int32_t ids[TOK_CACHE_IDS];
} tok_cache_ent;
typedef struct tok_cache tok_cache;
tok_cache *tok_cache_new(void);
void tok_cache_free(tok_cache *c);
/* 1 and the ids when word is cached; 0 otherwise (also when the cache is busy). */
int tok_cache_get(tok_cache *c, const char *w, size_t n, uint32_t h, int32_t *ids, int *nids);
void tok_cache_put(tok_cache *c, const char *w, size_t n, uint32_t h, const int32_t *ids, int nids);

#define TOK_MAX_STAGES 8
#define TOK_MAX_NORMS 4

struct ts_tok {
    tok_kind kind;
    int n_vocab;
    /* per id: spelling and decoded bytes, both in `arena` */
    tok_buf arena;
    uint32_t *str_off, *str_len, *byt_off, *byt_len;
    uint8_t *flags;
    size_t max_token_bytes;
    tok_strmap by_str;    /* spelling -> id (vocabulary and added tokens) */
    tok_strmap by_bytes;  /* decoded bytes -> id (model vocabulary only; BPE ignore_merges) */
    int32_t byte_id[256]; /* token of each single byte, -1 if absent */
    /* BPE */
    tok_pairmap merges;
    tok_cache *cache; /* NULL: no caching */
    int ignore_merges;
    tok_norm norms[TOK_MAX_NORMS];
    int n_norms;
    tok_stage stages[TOK_MAX_STAGES];
    int n_stages;
    /* added tokens, longest first within each first byte */
    tok_added *added;
    int n_added;
    int32_t added_start[257]; /* added[added_start[b] .. added_start[b+1]) start with byte b */
    int n_added_normalized;   /* added tokens matched after normalization */
    /* SPM */
    float *scores;
    int add_space_prefix;
    int32_t unk;
    int32_t bos, eos, pad;
    int add_bos, add_eos; /* what the model asks for (GGUF add_bos_token / add_eos_token) */
};

/* Shared by both kinds (tok_core.c). */
ts_status tok_alloc_ids(ts_tok *t, int n_vocab, ts_error *err);
void tok_sort_added(ts_tok *t);
/* Leftmost-longest added token in s[from, len) whose `normalized` flag equals normalized
 * (-1: any); on success sets *ms,*me (after lstrip/rstrip) and returns its index, else -1. */
int tok_find_added(const ts_tok *t, const char *s, size_t len, size_t from, int normalized,
                   size_t *ms, size_t *me);
/* Length of the valid UTF-8 prefix of s (== n when s is valid). */
size_t tok_utf8_valid(const uint8_t *s, size_t n);
/* Decodes one character of valid UTF-8 at s; returns its byte length. */
int tok_utf8_next(const uint8_t *s, uint32_t *cp);
int tok_utf8_len(uint8_t lead);

/* Growable id list used by the encoders. */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;
int tok_ids_push(tok_ids *a, int32_t id);

/* Kind-specific encoders of one text piece that holds no added tokens. */
ts_status tok_bpe_encode(const ts_tok *t, const char *text, size_t len, tok_ids *out,
                         ts_error *err);
/* first: the piece gets the dummy prefix (when add_space_prefix). */
ts_status tok_spm_encode(const ts_tok *t, const char *text, size_t len, int first, tok_ids *out,
                         ts_error *err);

#endif
