/* GGUF vocabularies (tokenizer.ggml.* keys, as llama.cpp's converter writes them) -> ts_tok.
 * "llama" becomes the SentencePiece-style BPE of tok_spm.c. "gpt2" becomes the byte-level BPE
 * that a tokenizer.json gives: the file carries no pre-tokenizer, only its family's name in
 * tokenizer.ggml.pre, so each known name maps to the sections of that family's HF
 * tokenizer.json, and the shared builder (tok_load.h) makes the same tables from them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/gguf.h"
#include "tok/tok_load.h"

#define K_MODEL "tokenizer.ggml.model"
#define K_PRE "tokenizer.ggml.pre"
#define K_TOKENS "tokenizer.ggml.tokens"
#define K_TYPES "tokenizer.ggml.token_type"
#define K_SCORES "tokenizer.ggml.scores"
#define K_MERGES "tokenizer.ggml.merges"

/* The Split regexes of HF's tokenizer.json files, not llama.cpp's adaptations: llama.cpp spells
 * (?i:'s|...) out as '[sS]|... because its engine lacks (?i:), which drops Unicode case folding
 * (ſ, K); PCRE2 has it, and we want HF's ids. */
static const char k_re_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char k_re_qwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* llama.cpp's "default" (no HF file behind it): its four regexes, each piece split again. */
static const char *const k_re_default[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
};

typedef struct pre_def {
    const char *names[3];   /* the tokenizer.ggml.pre values llama.cpp accepts for it */
    const char *re;         /* one Split (Isolated) before ByteLevel, or NULL */
    int bl_regex;           /* ByteLevel runs its own GPT-2 regex (use_regex) */
    int digits;             /* Digits with individual_digits before ByteLevel (SmolLM2) */
    int nfc;                /* NFC normalizer (Qwen2/3's tokenizer.json has one; llama.cpp none) */
    int ignore_merges, add_bos; /* llama.cpp's defaults for the name */
    int written;                /* names[written] is what convert_hf_to_gguf.py writes */
} pre_def;

static const pre_def k_pre[] = {
    {{"llama3", "llama-v3", "llama-bpe"}, k_re_llama3, 0, 0, 0, 1, 1, 2},
    /* the same regex; llama.cpp keeps merges and adds no BOS for these names */
    {{"smaug-bpe", "dbrx", NULL}, k_re_llama3, 0, 0, 0, 0, 0, 0},
    {{"qwen2", "deepseek-r1-qwen", NULL}, k_re_qwen2, 0, 0, 1, 0, 0, 0},
    {{"smollm", NULL, NULL}, NULL, 1, 1, 0, 0, 0, 0},
    {{"gpt-2", "gpt2", NULL}, NULL, 1, 0, 0, 0, 0, 0},
    {{"default", NULL, NULL}, NULL, 0, 0, 0, 0, 0, 0},
};
#define K_PRE_KNOWN                                                                                \
    "llama3, llama-v3, llama-bpe, smaug-bpe, dbrx, qwen2, deepseek-r1-qwen, smollm, gpt-2, gpt2, " \
    "default"

static int is_int_type(ts_gguf_type t) {
    return t <= TS_GGUF_I32 || t == TS_GGUF_U64 || t == TS_GGUF_I64;
}

/* An array of n elements that must match the token list (required or absent: *kv NULL). */
static ts_status arr_n(const ts_gguf *g, const char *key, int required, int ints, uint64_t n,
                       const ts_gguf_kv **kv, ts_error *err) {
    ts_status s = ts_gguf_get_arr(g, key, required, TS_GGUF_TYPE_COUNT, kv, err);
    if (s || !*kv) return s;
    ts_gguf_type t = (*kv)->arr_type;
    if (ints ? !is_int_type(t) : !(is_int_type(t) || t == TS_GGUF_F32 || t == TS_GGUF_F64))
        return ts_fail(err, TS_ERR_FORMAT, "%s: metadata \"%s\" is an array of %s, expected %s",
                       g->path, key, ts_gguf_type_name(t),
                       ints ? "an array of integers" : "an array of numbers");
    if ((*kv)->n != n)
        return ts_fail(err, TS_ERR_FORMAT,
                       "%s: metadata \"%s\" has %llu entries, expected %llu (one per token of %s)",
                       g->path, key, (unsigned long long)(*kv)->n, (unsigned long long)n, K_TOKENS);
    return TS_OK;
}

/* The token list: 1 .. 2^30 non-empty, valid UTF-8 strings. */
static ts_status read_tokens(const ts_gguf *g, const ts_gguf_kv **kv, ts_error *err) {
    ts_status s = ts_gguf_get_arr(g, K_TOKENS, 1, TS_GGUF_STRING, kv, err);
    if (s) return s;
    if ((*kv)->n == 0 || (*kv)->n >= (1u << 30))
        return ts_fail(err, TS_ERR_FORMAT, "%s: metadata \"%s\" has %llu tokens, expected 1 to 2^30",
                       g->path, K_TOKENS, (unsigned long long)(*kv)->n);
    for (uint64_t i = 0; i < (*kv)->n; i++) {
        const char *p;
        size_t len;
        ts_gguf_arr_str(*kv, i, &p, &len);
        if (!len || memchr(p, 0, len) || tok_utf8_valid((const uint8_t *)p, len) != len)
            return ts_fail(err, TS_ERR_FORMAT,
                           "%s: metadata \"%s[%llu]\" is %s, expected a non-empty UTF-8 spelling "
                           "without NUL",
                           g->path, K_TOKENS, (unsigned long long)i,
                           !len ? "empty" : "not valid UTF-8 or holds a NUL");
    }
    return TS_OK;
}

static ts_status read_types(const ts_gguf *g, uint64_t n, int32_t **types, ts_error *err) {
    const ts_gguf_kv *kv;
    *types = NULL;
    ts_status s = arr_n(g, K_TYPES, 0, 1, n, &kv, err);
    if (s || !kv) return s;
    if (!(*types = malloc(n * sizeof **types)))
        return ts_fail(err, TS_ERR_NOMEM, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < n; i++) {
        int64_t v = ts_gguf_arr_int(kv, i);
        /* 0 is llama.cpp's "undefined", read as normal */
        if (v < 0 || v > TS_TOK_TYPE_BYTE) {
            free(*types);
            *types = NULL;
            return ts_fail(err, TS_ERR_FORMAT,
                           "%s: metadata \"%s[%llu]\" is %lld, expected a token type 0..6 "
                           "(1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte)",
                           g->path, K_TYPES, (unsigned long long)i, (long long)v);
        }
        (*types)[i] = (int32_t)v;
    }
    return TS_OK;
}

/* A special token id: def when absent; -1 and UINT32_MAX (what converters write for "none")
 * give -1; anything else must be a token. */
static ts_status special_id(const ts_gguf *g, const char *key, int32_t def, int64_t n, int32_t *out,
                            ts_error *err) {
    int64_t v;
    ts_status s = ts_gguf_get_int(g, key, 0, def, -1, UINT32_MAX, &v, err);
    if (s) return s;
    if (v == -1 || v == UINT32_MAX) v = -1;
    if (v >= n)
        return ts_fail(err, TS_ERR_FORMAT,
                       "%s: metadata \"%s\" is %lld, expected a token id in [0, %lld) "
                       "(or 4294967295 for none)",
                       g->path, key, (long long)v, (long long)n);
    *out = (int32_t)v;
    return TS_OK;
}

static ts_status read_flags(const ts_gguf *g, int def_bos, ts_tok *t, ts_error *err) {
    ts_status s = ts_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", def_bos, &t->add_bos, err);
    if (!s) s = ts_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", 0, &t->add_eos, err);
    if (!s) s = special_id(g, "tokenizer.ggml.padding_token_id", -1, t->n_vocab, &t->pad, err);
    if (!s && t->add_bos && t->bos < 0)
        s = ts_fail(err, TS_ERR_FORMAT,
                    "%s: metadata \"tokenizer.ggml.add_bos_token\" is true, expected a BOS id in "
                    "\"tokenizer.ggml.bos_token_id\"",
                    g->path);
    return s;
}

/* ---- the other direction: which name describes a tokenizer.json ---- */

/* What a pre-tokenizer and normalizer do, in the terms of pre_def. */
typedef struct pre_shape {
    const char *re; /* the one Split regex, or NULL */
    int n_split, bl_regex, digits, nfc, ignore_merges, bytelevel, other;
} pre_shape;

static void shape_step(const json_t *p, pre_shape *sh) {
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!type) {
        sh->other = 1;
    } else if (!strcmp(type, "Split")) {
        const char *re = json_string_value(json_object_get(json_object_get(p, "pattern"), "Regex"));
        const char *beh = json_string_value(json_object_get(p, "behavior"));
        if (!re || !beh || strcmp(beh, "Isolated") || json_is_true(json_object_get(p, "invert"))) sh->other = 1;
        sh->re = re;
        sh->n_split++;
    } else if (!strcmp(type, "ByteLevel")) {
        const json_t *ur = json_object_get(p, "use_regex");
        sh->bytelevel++;
        sh->bl_regex = !ur || json_is_true(ur); /* tokenizers' default is true */
        if (json_is_true(json_object_get(p, "add_prefix_space"))) sh->other = 1;
    } else if (!strcmp(type, "Digits")) {
        if (!json_is_true(json_object_get(p, "individual_digits"))) sh->other = 1;
        sh->digits = 1;
    } else {
        sh->other = 1;
    }
}

const char *tok_gguf_pre_for_json(const json_t *root) {
    pre_shape sh = {0};
    const json_t *pt = json_object_get(root, "pre_tokenizer"), *norm = json_object_get(root, "normalizer");
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (type && !strcmp(type, "Sequence")) {
        const json_t *seq = json_object_get(pt, "pretokenizers");
        for (size_t i = 0; i < json_array_size(seq); i++) shape_step(json_array_get(seq, i), &sh);
    } else if (pt) {
        shape_step(pt, &sh);
    }
    const char *nt = json_string_value(json_object_get(norm, "type"));
    sh.nfc = nt && !strcmp(nt, "NFC");
    if (norm && !json_is_null(norm) && !sh.nfc) sh.other = 1;
    sh.ignore_merges = json_is_true(json_object_get(json_object_get(root, "model"), "ignore_merges"));
    if (sh.other || sh.bytelevel != 1 || sh.n_split > 1) return NULL;
    for (size_t i = 0; i < sizeof k_pre / sizeof k_pre[0]; i++) {
        const pre_def *p = &k_pre[i];
        if (!strcmp(p->names[0], "default")) continue; /* four regexes: no HF file has that form */
        if ((p->re ? !sh.re || strcmp(p->re, sh.re) : sh.n_split != 0) || p->bl_regex != sh.bl_regex ||
            p->digits != sh.digits || p->nfc != sh.nfc || p->ignore_merges != sh.ignore_merges)
            continue;
        return p->names[p->written];
    }
    return NULL;
}

/* ---- "llama": SentencePiece ---- */

static ts_status from_spm(const ts_gguf *g, ts_tok **out, ts_error *err) {
    const ts_gguf_kv *tok, *sc;
    ts_status s = read_tokens(g, &tok, err);
    if (s) return s;
    uint64_t n = tok->n;
    if ((s = arr_n(g, K_SCORES, 0, 0, n, &sc, err))) return s;
    ts_tok_spm_params p = {.n_vocab = (int)n, .add_space_prefix = 1};
    /* llama.cpp's defaults for an SPM vocabulary */
    if ((s = special_id(g, "tokenizer.ggml.bos_token_id", n > 1 ? 1 : -1, (int64_t)n, &p.bos, err)) ||
        (s = special_id(g, "tokenizer.ggml.eos_token_id", n > 2 ? 2 : -1, (int64_t)n, &p.eos, err)) ||
        (s = special_id(g, "tokenizer.ggml.unknown_token_id", 0, (int64_t)n, &p.unk, err)) ||
        (s = ts_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", 1, &p.add_space_prefix, err)))
        return s;
    int32_t *types = NULL;
    if ((s = read_types(g, n, &types, err))) return s;
    /* the spellings, NUL-terminated, as ts_tok_spm_new takes them */
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *str;
        size_t len;
        ts_gguf_arr_str(tok, i, &str, &len);
        total += len + 1;
    }
    char *buf = malloc(total);
    const char **strs = malloc(n * sizeof *strs);
    float *scores = calloc(n, sizeof *scores);
    if (!buf || !strs || !scores) {
        s = ts_fail(err, TS_ERR_NOMEM, "%s: out of memory", g->path);
        goto done;
    }
    char *w = buf;
    for (uint64_t i = 0; i < n; i++) {
        const char *str;
        size_t len;
        ts_gguf_arr_str(tok, i, &str, &len);
        /* the SentencePiece builder takes C strings: a NUL would cut the token silently */
        if (memchr(str, 0, len)) {
            s = ts_fail(err, TS_ERR_FORMAT, "%s: tokenizer.ggml.tokens[%llu] contains a NUL byte, expected a "
                        "SentencePiece piece", g->path, (unsigned long long)i);
            goto done;
        }
        memcpy(w, str, len);
        w[len] = 0;
        strs[i] = w;
        w += len + 1;
        if (sc) scores[i] = (float)ts_gguf_arr_num(sc, i);
        if (!isfinite(scores[i])) { /* merge priorities: NaN would make their order meaningless */
            s = ts_fail(err, TS_ERR_FORMAT, "%s: " K_SCORES "[%llu] is %g, expected a finite number", g->path,
                        (unsigned long long)i, scores[i]);
            goto done;
        }
    }
    p.tokens = strs;
    p.scores = scores;
    p.types = types;
    if ((s = ts_tok_spm_new(&p, out, err))) {
        ts_error_prefix(err, "%s", g->path);
        goto done;
    }
    if ((s = read_flags(g, 1, *out, err))) {
        ts_tok_free(*out);
        *out = NULL;
    }
done:
    free(buf);
    free(strs);
    free(scores);
    free(types);
    return s;
}

/* ---- "gpt2": byte-level BPE ---- */

static ts_status find_pre(const ts_gguf *g, const pre_def **out, ts_error *err) {
    const char *v;
    size_t len;
    ts_status s = ts_gguf_get_str(g, K_PRE, 0, &v, &len, err);
    if (s) return s;
    if (!v) { /* llama.cpp warns and uses "default" */
        v = "default";
        len = 7;
    }
    for (size_t i = 0; i < sizeof k_pre / sizeof k_pre[0]; i++)
        for (int k = 0; k < 3 && k_pre[i].names[k]; k++)
            if (strlen(k_pre[i].names[k]) == len && !memcmp(k_pre[i].names[k], v, len)) {
                *out = &k_pre[i];
                return TS_OK;
            }
    return ts_fail(err, TS_ERR_UNSUPPORTED,
                   "%s: metadata \"%s\" is \"%.*s\", expected one of the pre-tokenizers tessera "
                   "knows: " K_PRE_KNOWN,
                   g->path, K_PRE, (int)(len > 64 ? 64 : len), v);
}

/* tokenizer.json's pre_tokenizer and normalizer for the family. */
static ts_status pre_sections(tok_loader *L, const pre_def *pre) {
    json_t *seq = json_array();
    if (!seq) return tok_loader_nomem(L);
    L->sec[2] = json_pack("{s:s, s:o}", "type", "Sequence", "pretokenizers", seq);
    if (!L->sec[2]) return tok_loader_nomem(L);
    int bad = 0;
    if (pre->digits)
        bad |= json_array_append_new(
            seq, json_pack("{s:s, s:b}", "type", "Digits", "individual_digits", 1));
    const char *const *res = pre->re ? &pre->re : k_re_default;
    int n_re = pre->re ? 1 : (pre->bl_regex || pre->digits) ? 0 : 4;
    for (int i = 0; i < n_re; i++)
        bad |= json_array_append_new(seq, json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split",
                                                    "pattern", "Regex", res[i], "behavior",
                                                    "Isolated", "invert", 0));
    bad |= json_array_append_new(seq, json_pack("{s:s, s:b, s:b}", "type", "ByteLevel",
                                                "add_prefix_space", 0, "use_regex",
                                                pre->bl_regex));
    if (pre->nfc && !(L->sec[1] = json_pack("{s:s}", "type", "NFC"))) bad = 1;
    L->sec[4] = json_pack("{s:s}", "type", "ByteLevel");
    L->model = json_pack("{s:s, s:b}", "type", "BPE", "ignore_merges", pre->ignore_merges);
    return bad || !L->sec[4] || !L->model ? tok_loader_nomem(L) : TS_OK;
}

/* Every token goes into the vocabulary; control (3) and user-defined (4) ones are also added
 * tokens, matched in the raw text before pre-tokenization, as llama.cpp and HF both do.
 * Control ones are special (skipped by a decode that skips specials, like llama.cpp's). */
static ts_status bpe_vocab(tok_loader *L, const ts_gguf_kv *tok, const int32_t *types) {
    L->sec[0] = json_array();
    if (!L->sec[0]) return tok_loader_nomem(L);
    for (uint64_t i = 0; i < tok->n; i++) {
        const char *p;
        size_t len;
        ts_gguf_arr_str(tok, i, &p, &len);
        ts_status s = tok_loader_vocab(L, p, len, (int64_t)i);
        if (s) return s;
        int type = types ? types[i] : TS_TOK_TYPE_NORMAL;
        if (type != TS_TOK_TYPE_CONTROL && type != TS_TOK_TYPE_USER_DEFINED) continue;
        json_t *a = json_pack("{s:I, s:s%, s:b, s:b}", "id", (json_int_t)i, "content", p, len,
                              "special", type == TS_TOK_TYPE_CONTROL, "normalized", 0);
        if (!a || json_array_append_new(L->sec[0], a)) return tok_loader_nomem(L);
    }
    return tok_loader_map_vocab(L);
}

static ts_status bpe_merges(tok_loader *L, const ts_gguf *g) {
    const ts_gguf_kv *kv;
    ts_status s = ts_gguf_get_arr(g, K_MERGES, 1, TS_GGUF_STRING, &kv, L->err);
    if (s) return s;
    tok_merges m;
    if ((s = tok_merges_begin(L, &m))) return s;
    for (uint64_t i = 0; !s && i < kv->n; i++) {
        const char *p;
        size_t len;
        ts_gguf_arr_str(kv, i, &p, &len);
        size_t off = m.sb.len;
        if (tok_buf_put(&m.sb, p, len))
            s = tok_loader_nomem(L);
        else
            s = tok_merges_add_spaced(L, &m, off);
    }
    return tok_merges_end(L, &m, s);
}

static ts_status from_bpe(const ts_gguf *g, ts_tok **out, ts_error *err) {
    const ts_gguf_kv *tok;
    const pre_def *pre = NULL;
    ts_status s = read_tokens(g, &tok, err);
    if (!s) s = find_pre(g, &pre, err);
    if (s) return s;
    int32_t *types = NULL;
    if ((s = read_types(g, tok->n, &types, err))) return s;
    tok_loader L;
    if (!(s = tok_loader_init(&L, g->path, err))) {
        L.vocab_key = K_TOKENS;
        L.merges_key = K_MERGES;
        s = bpe_vocab(&L, tok, types);
    }
    if (!s) s = bpe_merges(&L, g);
    if (!s) s = pre_sections(&L, pre);
    if (!s) s = tok_loader_build(&L, NULL);
    ts_tok *t = L.t;
    if (!s && !(s = special_id(g, "tokenizer.ggml.bos_token_id", -1, t->n_vocab, &t->bos, err)) &&
        !(s = special_id(g, "tokenizer.ggml.eos_token_id", -1, t->n_vocab, &t->eos, err)) &&
        !(s = read_flags(g, pre && pre->add_bos, t, err))) {
        *out = t;
        L.t = NULL;
    }
    tok_loader_free(&L);
    free(types);
    return s;
}

ts_status ts_tok_from_gguf(const ts_gguf *g, ts_tok **out, ts_error *err) {
    *out = NULL;
    const char *model;
    size_t len;
    ts_status s = ts_gguf_get_str(g, K_MODEL, 0, &model, &len, err);
    if (s) return s;
    if (!model)
        return ts_fail(err, TS_ERR_FORMAT,
                       "%s: no tokenizer: metadata \"%s\" is missing, expected \"llama\" "
                       "(SentencePiece) or \"gpt2\" (byte-level BPE)",
                       g->path, K_MODEL);
    if (len == 5 && !memcmp(model, "llama", 5)) return from_spm(g, out, err);
    if (len == 4 && !memcmp(model, "gpt2", 4)) return from_bpe(g, out, err);
    static const char *const kinds[][2] = {
        {"bert", "WordPiece"}, {"t5", "Unigram"}, {"rwkv", "RWKV's trie"},
        {"plamo2", "PLaMo-2's"}, {"none", "no vocabulary"}, {"no_vocab", "no vocabulary"}};
    const char *what = "an unknown kind";
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strlen(kinds[i][0]) == len && !memcmp(kinds[i][0], model, len)) what = kinds[i][1];
    return ts_fail(err, TS_ERR_UNSUPPORTED,
                   "%s: metadata \"%s\" is \"%.*s\" (%s tokenizer), expected \"llama\" "
                   "(SentencePiece BPE) or \"gpt2\" (byte-level BPE), the kinds tessera reads",
                   g->path, K_MODEL, (int)(len > 64 ? 64 : len), model, what);
}

ts_status tok_load_gguf(const char *path, ts_tok **out, ts_error *err) {
    ts_gguf g;
    *out = NULL;
    ts_status s = ts_gguf_open(path, &g, err);
    if (s) return s;
    s = ts_tok_from_gguf(&g, out, err);
    ts_gguf_close(&g);
    return s;
}
