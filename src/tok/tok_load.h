/* The byte-level BPE builder shared by the two readers that produce one: tokenizer.json
 * (tok_load.c) and GGUF with tokenizer.ggml.model = "gpt2" (tok_gguf.c). A reader fills the
 * vocabulary entries and merges through the functions below and the small sections as
 * jansson values shaped like tokenizer.json's; tok_loader_build then makes the same tables
 * from either source, which is what keeps the two paths' ids identical. Private to src/tok. */
#ifndef TS_TOK_LOAD_H
#define TS_TOK_LOAD_H
#include <jansson.h>

#include "tok/tok_internal.h"

typedef struct tok_vocab_ent {
    uint32_t off, len; /* spelling in t->arena */
    int64_t id;
} tok_vocab_ent;

typedef struct tok_loader {
    ts_tok *t; /* being built; tok_loader_free frees it unless taken */
    const char *file;
    ts_error *err;
    /* what the vocabulary and merges are called in messages ("model.vocab" in a
     * tokenizer.json, "tokenizer.ggml.tokens" in a GGUF) */
    const char *vocab_key, *merges_key;
    tok_vocab_ent *ents;
    size_t n_ents, cap_ents;
    int vocab_mapped;                /* by_str holds the vocabulary */
    const char *merges_b, *merges_e; /* JSON span of model.merges when it came before model.vocab */
    int merges_seen;
    int32_t *trip; /* per merge: left, right, merged id */
    size_t n_merges;
    json_t *model;  /* model's other fields: type, dropout, ignore_merges, ... */
    json_t *sec[5]; /* added_tokens, normalizer, pre_tokenizer, post_processor, decoder */
} tok_loader;

/* A fresh byte-level ts_tok in L->t; names default to tokenizer.json's. */
ts_status tok_loader_init(tok_loader *L, const char *file, ts_error *err);
/* Frees the scratch state and L->t (set L->t = NULL first to keep it). */
void tok_loader_free(tok_loader *L);
ts_status tok_loader_nomem(tok_loader *L);

/* Appends one vocabulary entry (spelling copied into the arena). */
ts_status tok_loader_vocab(tok_loader *L, const char *s, size_t len, int64_t id);
/* Once every entry is in: spelling -> id table; a spelling given twice is refused. */
ts_status tok_loader_map_vocab(tok_loader *L);

/* Merges arrive one by one and are resolved to ids in chunks (see tok_load.c). */
typedef struct tok_merge_rec {
    uint32_t off, split, len; /* in the scratch buffer: left = [off, off+split), right the rest */
    uint32_t h[3];            /* hashes of left, right, merged */
} tok_merge_rec;
typedef struct tok_merges {
    tok_buf sb; /* the current chunk's strings */
    tok_merge_rec *rec;
    size_t n, cap, k; /* merges resolved, L->trip capacity, merges in this chunk */
} tok_merges;
ts_status tok_merges_begin(tok_loader *L, tok_merges *m);
/* The merge whose two tokens were appended to m->sb from off, the left one split bytes long. */
ts_status tok_merges_add(tok_loader *L, tok_merges *m, size_t off, size_t split);
/* The "a b" form: the string appended to m->sb from off must hold exactly one space. */
ts_status tok_merges_add_spaced(tok_loader *L, tok_merges *m, size_t off);
/* Resolves what is left unless s is already an error; sets L->n_merges. Returns s or the
 * first error. */
ts_status tok_merges_end(tok_loader *L, tok_merges *m, ts_status s);

/* Builds every table of L->t from the entries, merges and sections. dir (may be NULL): where
 * config.json / tokenizer_config.json may supply BOS/EOS. */
ts_status tok_loader_build(tok_loader *L, const char *dir);

/* Opens a GGUF file and builds its tokenizer (tok_gguf.c; ts_tok_load's GGUF branch). */
ts_status tok_load_gguf(const char *path, ts_tok **out, ts_error *err);

/* The tokenizer.ggml.pre name whose pre-tokenizer, normalizer and ignore_merges are exactly a
 * tokenizer.json's (root: the whole file), as convert_hf_to_gguf.py would name it; NULL when
 * none is (tok_gguf.c's table; used by tok_gguf_write.c). */
const char *tok_gguf_pre_for_json(const json_t *root);

#endif
