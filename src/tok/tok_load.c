/* tokenizer.json -> ts_tok for byte-level BPE. model.vocab and model.merges go through the
 * fast reader straight into the arena and hash tables; the small sections (added_tokens,
 * normalizer, pre_tokenizer, post_processor, decoder, model's scalar fields) through jansson.
 * Anything we cannot reproduce exactly is refused with TS_ERR_UNSUPPORTED naming the field. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "io/gguf.h"
#include "io/json.h"
#include "io/mmap.h"
#include "tok/tok_json.h"
#include "tok/tok_load.h"

/* HF ByteLevel's pre-tokenization regex (GPT-2's), used when use_regex is true. */
static const char k_gpt2_re[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* GPT-2's byte <-> character map: printable bytes stand for themselves, the other 68 bytes
 * take the code points from U+0100 up, in byte order. */
static void byte_map(uint32_t cp_of[256], int16_t byte_of[324]) {
    for (int i = 0; i < 324; i++)
        byte_of[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        cp_of[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        byte_of[cp_of[b]] = (int16_t)b;
    }
}

static const char *k_sections[5] = {"added_tokens", "normalizer", "pre_tokenizer", "post_processor",
                                    "decoder"};

ts_status tok_loader_nomem(tok_loader *L) {
    return ts_fail(L->err, TS_ERR_NOMEM, "%s: out of memory", L->file);
}

/* jansson on one value's span; scalars too (model.type is a bare string). */
static ts_status parse_span(tok_loader *L, const char *a, const char *b, const char *key,
                            json_t **out) {
    json_error_t je;
    *out = json_loadb(a, (size_t)(b - a), JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
                      &je);
    if (!*out)
        return ts_fail(L->err, TS_ERR_FORMAT, "%s: field \"%s\": invalid JSON: %s", L->file, key,
                       je.text);
    return TS_OK;
}

static ts_status read_merges(tok_loader *L, tok_jcur *c);

/* Hashes every vocabulary string first, then inserts with the slot of entry i + 16 already
 * on its way into the cache. */
ts_status tok_loader_map_vocab(tok_loader *L) {
    ts_tok *t = L->t;
    L->vocab_mapped = 1;
    if (tok_strmap_init(&t->by_str, L->n_ents)) return tok_loader_nomem(L);
    uint32_t *h = malloc((L->n_ents + 1) * sizeof *h);
    if (!h) return tok_loader_nomem(L);
    for (size_t i = 0; i < L->n_ents; i++)
        h[i] = tok_hash(t->arena.p + L->ents[i].off, L->ents[i].len);
    for (size_t i = 0; i < L->n_ents; i++) {
        if (i + 16 < L->n_ents) tok_strmap_prefetch(&t->by_str, h[i + 16]);
        const tok_vocab_ent *e = &L->ents[i];
        int32_t got =
            tok_strmap_put_h(&t->by_str, t->arena.p, e->off, e->len, (int32_t)e->id, h[i]);
        if (got != (int32_t)e->id) {
            free(h);
            return ts_fail(L->err, TS_ERR_FORMAT, "%s: %s: token \"%.*s\" appears twice (ids %d and %lld)",
                           L->file, L->vocab_key, (int)e->len, t->arena.p + e->off, got,
                           (long long)e->id);
        }
    }
    free(h);
    return TS_OK;
}

/* Records the spelling the arena holds from `before` as token id. */
static ts_status ent_push(tok_loader *L, size_t before, int64_t id) {
    if (id < 0 || id >= (1 << 30))
        return ts_fail(L->err, TS_ERR_FORMAT, "%s: %s: id %lld is out of range [0, 2^30)", L->file,
                       L->vocab_key, (long long)id);
    if (L->t->arena.len - before > UINT32_MAX / 2 || L->t->arena.len > UINT32_MAX / 2)
        return ts_fail(L->err, TS_ERR_FORMAT, "%s: %s: too large", L->file, L->vocab_key);
    if (L->n_ents == L->cap_ents) {
        size_t cap = L->cap_ents ? L->cap_ents * 2 : 65536;
        tok_vocab_ent *e = realloc(L->ents, cap * sizeof *e);
        if (!e) return tok_loader_nomem(L);
        L->ents = e;
        L->cap_ents = cap;
    }
    tok_vocab_ent *e = &L->ents[L->n_ents++];
    e->off = (uint32_t)before;
    e->len = (uint32_t)(L->t->arena.len - before);
    e->id = id;
    return TS_OK;
}

ts_status tok_loader_vocab(tok_loader *L, const char *s, size_t len, int64_t id) {
    size_t before = L->t->arena.len;
    if (tok_buf_put(&L->t->arena, s, len)) return tok_loader_nomem(L);
    return ent_push(L, before, id);
}

/* model.vocab: {"token": id, ...} into ents (strings into the arena). */
static ts_status read_vocab(tok_loader *L, tok_jcur *c) {
    c->where = "model.vocab";
    if (L->vocab_mapped) return tok_json_fail(c, "one \"vocab\" field in \"model\"");
    if (!tok_json_eat(c, '{')) return tok_json_fail(c, "an object");
    if (tok_json_eat(c, '}')) return tok_loader_map_vocab(L);
    for (;;) {
        size_t before = L->t->arena.len;
        int64_t id;
        ts_status s = tok_json_string(c, &L->t->arena);
        if (s) return s;
        if (!tok_json_eat(c, ':')) return tok_json_fail(c, "':'");
        if ((s = tok_json_int(c, &id))) return s;
        if ((s = ent_push(L, before, id))) return s;
        if (tok_json_eat(c, '}')) return tok_loader_map_vocab(L);
        if (!tok_json_eat(c, ',')) return tok_json_fail(c, "',' or '}'");
    }
}

/* The "model" object: vocab and merges read here (merges only located, for later, when they
 * come before the vocabulary), the other fields through jansson. */
static ts_status read_model(tok_loader *L, tok_jcur *c) {
    if (!tok_json_eat(c, '{')) return tok_json_fail(c, "an object for \"model\"");
    L->model = json_object();
    if (!L->model) return tok_loader_nomem(L);
    if (tok_json_eat(c, '}')) return TS_OK;
    tok_buf key = {0};
    ts_status s = TS_OK;
    for (;;) {
        key.len = 0;
        c->where = "model";
        if ((s = tok_json_string(c, &key))) break;
        if (!tok_json_eat(c, ':')) {
            s = tok_json_fail(c, "':'");
            break;
        }
        const char *a, *b;
        const char *type = json_string_value(json_object_get(L->model, "type"));
        if (type && strcmp(type, "BPE") && (!strcmp(key.p, "vocab") || !strcmp(key.p, "merges"))) {
            /* a Unigram or WordPiece vocab would only fail to parse as BPE's: say what it is */
            s = ts_fail(L->err, TS_ERR_UNSUPPORTED,
                        "%s: model.type is \"%s\", expected \"BPE\" "
                        "(tessera reads byte-level BPE tokenizer.json files)",
                        L->file, type);
        } else if (!strcmp(key.p, "vocab")) {
            s = read_vocab(L, c);
        } else if (!strcmp(key.p, "merges")) {
            c->where = "model.merges";
            if (L->merges_seen) {
                s = tok_json_fail(c, "one \"merges\" field in \"model\"");
            } else {
                L->merges_seen = 1;
                /* HF writes vocab first; otherwise come back once the vocabulary is known */
                s = L->vocab_mapped ? read_merges(L, c)
                                    : tok_json_skip(c, &L->merges_b, &L->merges_e);
            }
        } else if (!(s = tok_json_skip(c, &a, &b))) {
            json_t *v;
            if ((s = parse_span(L, a, b, key.p, &v))) break;
            json_object_set_new(L->model, key.p, v);
        }
        if (s) break;
        c->where = "model";
        if (tok_json_eat(c, '}')) break;
        if (!tok_json_eat(c, ',')) {
            s = tok_json_fail(c, "',' or '}'");
            break;
        }
    }
    tok_buf_free(&key);
    return s;
}

static ts_status read_top(tok_loader *L, const char *buf, size_t len) {
    tok_jcur c = {.p = buf, .b = buf, .e = buf + len, .file = L->file, .err = L->err};
    if (!tok_json_eat(&c, '{')) return tok_json_fail(&c, "an object at the top");
    int have_model = 0;
    tok_buf key = {0};
    ts_status s = TS_OK;
    if (!tok_json_eat(&c, '}'))
        for (;;) {
            key.len = 0;
            c.where = NULL;
            if ((s = tok_json_string(&c, &key))) break;
            if (!tok_json_eat(&c, ':')) {
                s = tok_json_fail(&c, "':'");
                break;
            }
            if (!strcmp(key.p, "model")) {
                if (have_model) {
                    s = tok_json_fail(&c, "one \"model\" field");
                    break;
                }
                have_model = 1;
                if ((s = read_model(L, &c))) break;
            } else {
                const char *a, *b;
                if ((s = tok_json_skip(&c, &a, &b))) break;
                for (int i = 0; i < 5; i++)
                    if (!strcmp(key.p, k_sections[i])) {
                        json_decref(L->sec[i]);
                        if ((s = parse_span(L, a, b, key.p, &L->sec[i]))) break;
                    }
                if (s) break;
            }
            c.where = NULL;
            if (tok_json_eat(&c, '}')) break;
            if (!tok_json_eat(&c, ',')) {
                s = tok_json_fail(&c, "',' or '}'");
                break;
            }
        }
    tok_buf_free(&key);
    if (s) return s;
    tok_json_ws(&c);
    if (c.p != c.e) return tok_json_fail(&c, "the end of the file after the top-level object");
    if (!have_model)
        return ts_fail(L->err, TS_ERR_FORMAT,
                       "%s: field \"model\" is missing, expected the "
                       "tokenizer model object",
                       L->file);
    return TS_OK;
}

/* ---- the small sections ---- */

static ts_status check_model(tok_loader *L) {
    ts_tok *t = L->t;
    const json_t *m = L->model;
    const char *type;
    ts_status s = ts_json_str(m, "type", L->file, 0, L->merges_b ? "BPE" : NULL, &type, L->err);
    if (s) return s;
    if (!type)
        return ts_fail(L->err, TS_ERR_FORMAT,
                       "%s: field \"model.type\" is missing, expected \"BPE\"", L->file);
    if (strcmp(type, "BPE"))
        return ts_fail(L->err, TS_ERR_UNSUPPORTED,
                       "%s: model.type is \"%s\", expected \"BPE\" "
                       "(tessera reads byte-level BPE tokenizer.json files)",
                       L->file, type);
    double dropout;
    if ((s = ts_json_num(m, "dropout", L->file, 0, 0, 0, 1, &dropout, L->err))) return s;
    if (dropout > 0)
        return ts_fail(L->err, TS_ERR_UNSUPPORTED,
                       "%s: model.dropout is %g, expected null or 0 "
                       "(BPE dropout is not deterministic)",
                       L->file, dropout);
    const char *pre, *suf;
    if ((s = ts_json_str(m, "continuing_subword_prefix", L->file, 0, "", &pre, L->err))) return s;
    if ((s = ts_json_str(m, "end_of_word_suffix", L->file, 0, "", &suf, L->err))) return s;
    if (*pre || *suf)
        return ts_fail(L->err, TS_ERR_UNSUPPORTED, "%s: model.%s is \"%s\", expected null or \"\"",
                       L->file, *pre ? "continuing_subword_prefix" : "end_of_word_suffix",
                       *pre ? pre : suf);
    if ((s = ts_json_bool(m, "ignore_merges", L->file, 0, 0, &t->ignore_merges, L->err))) return s;
    return TS_OK;
}

static ts_status read_added(tok_loader *L, int64_t *max_id) {
    const json_t *a = L->sec[0];
    ts_tok *t = L->t;
    if (!a || json_is_null(a)) return TS_OK;
    if (!json_is_array(a))
        return ts_fail(L->err, TS_ERR_FORMAT, "%s: field \"added_tokens\" is %s, expected an array",
                       L->file, ts_json_type_name(a));
    size_t n = json_array_size(a);
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added) return tok_loader_nomem(L);
    for (size_t i = 0; i < n; i++) {
        const json_t *o = json_array_get(a, i);
        char where[64];
        snprintf(where, sizeof where, "%s: added_tokens[%zu]", L->file, i);
        if (!json_is_object(o))
            return ts_fail(L->err, TS_ERR_FORMAT, "%s is %s, expected an object", where,
                           ts_json_type_name(o));
        int64_t id;
        const char *content;
        int f[5];
        static const char *flags[5] = {"lstrip", "rstrip", "single_word", "normalized", "special"};
        ts_status s = ts_json_int(o, "id", where, 1, 0, 0, (1 << 30) - 1, &id, L->err);
        if (!s) s = ts_json_str(o, "content", where, 1, NULL, &content, L->err);
        for (int k = 0; !s && k < 5; k++)
            s = ts_json_bool(o, flags[k], where, 0, k == 3 ? 1 : 0, &f[k], L->err);
        if (s) return s;
        /* json_string_length, not strlen: a "\u0000" inside the content is part of it. */
        size_t len = json_string_length(json_object_get(o, "content"));
        if (!len) return ts_fail(L->err, TS_ERR_FORMAT, "%s: field \"content\" is empty", where);
        tok_added *ad = &t->added[t->n_added++];
        ad->id = (int32_t)id;
        ad->off = (uint32_t)t->arena.len;
        ad->len = (uint32_t)len;
        if (tok_buf_put(&t->arena, content, len)) return tok_loader_nomem(L);
        ad->lstrip = (uint8_t)f[0];
        ad->rstrip = (uint8_t)f[1];
        ad->single_word = (uint8_t)f[2];
        ad->normalized = (uint8_t)f[3];
        ad->special = (uint8_t)f[4];
        if (id > *max_id) *max_id = id;
    }
    return TS_OK;
}

static ts_status read_norm(tok_loader *L, const json_t *n, const char *where) {
    ts_tok *t = L->t;
    if (!n || json_is_null(n)) return TS_OK;
    const char *type;
    ts_status s = ts_json_str(n, "type", where, 1, NULL, &type, L->err);
    if (s) return s;
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(n, "normalizers");
        if (!json_is_array(arr))
            return ts_fail(L->err, TS_ERR_FORMAT,
                           "%s: field \"normalizers\" is %s, expected an array", where,
                           ts_json_type_name(arr));
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char w[160];
            snprintf(w, sizeof w, "%s.normalizers[%zu]", where, i);
            if ((s = read_norm(L, json_array_get(arr, i), w))) return s;
        }
        return TS_OK;
    }
    static const char *names[] = {"", "NFC", "NFD", "NFKC", "NFKD"};
    for (int k = 1; k <= 4; k++)
        if (!strcmp(type, names[k])) {
            if (t->n_norms == TOK_MAX_NORMS)
                return ts_fail(L->err, TS_ERR_UNSUPPORTED, "%s: more than %d normalizers", where,
                               TOK_MAX_NORMS);
            t->norms[t->n_norms++] = (tok_norm)k;
            return TS_OK;
        }
    return ts_fail(L->err, TS_ERR_UNSUPPORTED,
                   "%s: type is \"%s\", expected one of NFC, NFD, NFKC, "
                   "NFKD or Sequence",
                   where, type);
}

static ts_status read_pretok(tok_loader *L, const json_t *p, const char *where) {
    ts_tok *t = L->t;
    if (!json_is_object(p))
        return ts_fail(L->err, TS_ERR_FORMAT, "%s is %s, expected an object", where,
                       ts_json_type_name(p));
    const char *type;
    ts_status s = ts_json_str(p, "type", where, 1, NULL, &type, L->err);
    if (s) return s;
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(p, "pretokenizers");
        if (!json_is_array(arr))
            return ts_fail(L->err, TS_ERR_FORMAT,
                           "%s: field \"pretokenizers\" is %s, expected an array", where,
                           ts_json_type_name(arr));
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char w[160];
            snprintf(w, sizeof w, "%s.pretokenizers[%zu]", where, i);
            if ((s = read_pretok(L, json_array_get(arr, i), w))) return s;
        }
        return TS_OK;
    }
    if (t->n_stages == TOK_MAX_STAGES)
        return ts_fail(L->err, TS_ERR_UNSUPPORTED, "%s: more than %d pre-tokenizers", where,
                       TOK_MAX_STAGES);
    if (t->n_stages > 0 && t->stages[t->n_stages - 1].bytelevel)
        return ts_fail(L->err, TS_ERR_UNSUPPORTED,
                       "%s: a \"%s\" after ByteLevel, expected ByteLevel "
                       "to be the last pre-tokenizer",
                       where, type);
    tok_stage *st = &t->stages[t->n_stages];
    memset(st, 0, sizeof *st);
    if (!strcmp(type, "ByteLevel")) {
        int use_regex;
        if ((s = ts_json_bool(p, "add_prefix_space", where, 0, 1, &st->add_prefix_space, L->err)))
            return s;
        if ((s = ts_json_bool(p, "use_regex", where, 0, 1, &use_regex, L->err))) return s;
        st->bytelevel = 1;
        st->behavior = TOK_SPLIT_ISOLATED;
        if (use_regex &&
            (s = tok_stage_regex(st, k_gpt2_re, sizeof k_gpt2_re - 1, 1, where, L->err)))
            return s;
        t->n_stages++;
        return TS_OK;
    }
    if (!strcmp(type, "Digits")) { /* HF: numeric characters (Rust's is_numeric = \p{N}) isolated */
        int each;
        if ((s = ts_json_bool(p, "individual_digits", where, 0, 0, &each, L->err))) return s;
        st->behavior = TOK_SPLIT_ISOLATED;
        const char *pat = each ? "\\p{N}" : "\\p{N}+";
        if ((s = tok_stage_regex(st, pat, strlen(pat), 1, where, L->err))) return s;
        t->n_stages++;
        return TS_OK;
    }
    if (!strcmp(type, "Split")) {
        const json_t *pat = json_object_get(p, "pattern");
        const char *re = NULL, *lit = NULL, *beh;
        char w[200];
        snprintf(w, sizeof w, "%s.pattern", where);
        if (!json_is_object(pat))
            return ts_fail(L->err, TS_ERR_FORMAT,
                           "%s is %s, expected {\"Regex\": ...} or {\"String\": ...}", w,
                           ts_json_type_name(pat));
        if ((s = ts_json_str(pat, "Regex", w, 0, NULL, &re, L->err))) return s;
        if ((s = ts_json_str(pat, "String", w, 0, NULL, &lit, L->err))) return s;
        if (!re && !lit)
            return ts_fail(L->err, TS_ERR_FORMAT, "%s: expected a \"Regex\" or \"String\" field",
                           w);
        if ((s = ts_json_str(p, "behavior", where, 1, NULL, &beh, L->err))) return s;
        static const char *bnames[] = {"Removed", "Isolated", "MergedWithPrevious",
                                       "MergedWithNext", "Contiguous"};
        int b = -1;
        for (int k = 0; k < 5; k++)
            if (!strcmp(beh, bnames[k])) b = k;
        if (b < 0)
            return ts_fail(L->err, TS_ERR_UNSUPPORTED,
                           "%s: behavior is \"%s\", expected Removed, Isolated, "
                           "MergedWithPrevious, MergedWithNext or Contiguous",
                           where, beh);
        st->behavior = (tok_behavior)b;
        if ((s = ts_json_bool(p, "invert", where, 0, 0, &st->invert, L->err))) return s;
        const json_t *pv = json_object_get(pat, re ? "Regex" : "String");
        if ((s = tok_stage_regex(st, json_string_value(pv), json_string_length(pv), re != NULL, w,
                                 L->err)))
            return s;
        t->n_stages++;
        return TS_OK;
    }
    return ts_fail(L->err, TS_ERR_UNSUPPORTED,
                   "%s: type is \"%s\", expected Split, Digits, ByteLevel or "
                   "Sequence",
                   where, type);
}

/* First special token of a TemplateProcessing's "single" template, if it comes first: its id
 * as written (64-bit, range-checked by the caller), or -1. */
static json_int_t template_bos(const json_t *pp) {
    if (!json_is_object(pp)) return -1;
    const char *type = json_string_value(json_object_get(pp, "type"));
    if (type && !strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(pp, "processors");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            json_int_t b = template_bos(json_array_get(arr, i));
            if (b >= 0) return b;
        }
        return -1;
    }
    if (!type || strcmp(type, "TemplateProcessing")) return -1;
    const json_t *first = json_array_get(json_object_get(pp, "single"), 0);
    const json_t *st = json_object_get(first, "SpecialToken");
    const char *name = json_string_value(json_object_get(st, "id"));
    if (!name) return -1;
    const json_t *ids =
        json_object_get(json_object_get(json_object_get(pp, "special_tokens"), name), "ids");
    const json_t *id = json_array_get(ids, 0);
    return json_is_integer(id) ? json_integer_value(id) : -1;
}

/* A side file (config.json, tokenizer_config.json), or NULL when absent or unreadable: these
 * only supply defaults. Integers too big for 64 bits (tokenizer_config.json's
 * model_max_length often is) are read as reals instead of failing the whole file. */
static json_t *side_file(const char *dir, const char *name) {
    char *p = ts_path_join(dir, name), *buf = NULL;
    size_t len;
    json_t *j = NULL;
    if (p && ts_file_exists(p) && ts_file_read_all(p, 64 << 20, &buf, &len, NULL) == TS_OK) {
        json_error_t je;
        j = json_loadb(buf, len, JSON_DECODE_INT_AS_REAL, &je);
    }
    free(buf);
    free(p);
    return j;
}

/* bos/eos from config.json (id, or a list whose first entry counts) or tokenizer_config.json
 * (a token string or {"content": ...}); files that do not exist are skipped. */
static void dir_special(ts_tok *t, const char *dir, const char *which, int32_t *out) {
    if (!dir || *out >= 0) return;
    char key[32];
    snprintf(key, sizeof key, "%s_token_id", which);
    json_t *j = side_file(dir, "config.json");
    const json_t *v = json_object_get(j, key);
    if (json_is_array(v)) v = json_array_get(v, 0);
    if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < t->n_vocab)
        *out = (int32_t)json_integer_value(v);
    json_decref(j);
    if (*out >= 0) return;
    snprintf(key, sizeof key, "%s_token", which);
    j = side_file(dir, "tokenizer_config.json");
    v = json_object_get(j, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (json_is_string(v)) *out = ts_tok_token_id(t, json_string_value(v), json_string_length(v));
    json_decref(j);
}

/* ---- building the tables ---- */

static ts_status build_vocab(tok_loader *L, int64_t max_id) {
    ts_tok *t = L->t;
    for (size_t i = 0; i < L->n_ents; i++)
        if (L->ents[i].id > max_id) max_id = L->ents[i].id;
    /* ids may leave holes, but not so many that the id tables dwarf the tokens */
    int64_t n_tokens = (int64_t)L->n_ents + t->n_added;
    if (max_id >= 4 * n_tokens + 4096)
        return ts_fail(L->err, TS_ERR_FORMAT,
                       "%s: token id %lld is far beyond the %lld tokens the file "
                       "defines (%s and added tokens)",
                       L->file, (long long)max_id, (long long)n_tokens, L->vocab_key);
    ts_status s = tok_alloc_ids(t, (int)(max_id + 1), L->err);
    if (s) return s;
    if (tok_strmap_init(&t->by_bytes, L->n_ents)) return tok_loader_nomem(L);
    for (size_t i = 0; i < L->n_ents; i++) {
        int32_t id = (int32_t)L->ents[i].id;
        const char *str = t->arena.p + L->ents[i].off;
        if (t->flags[id] & TOK_F_PRESENT)
            return ts_fail(L->err, TS_ERR_FORMAT,
                           "%s: %s: id %d is given to both \"%.*s\" and \"%.*s\"", L->file,
                           L->vocab_key, id, (int)t->str_len[id], t->arena.p + t->str_off[id],
                           (int)L->ents[i].len, str);
        if (tok_utf8_valid((const uint8_t *)str, L->ents[i].len) != L->ents[i].len)
            return ts_fail(L->err, TS_ERR_FORMAT, "%s: %s: token %d is not valid UTF-8",
                           L->file, L->vocab_key, id);
        t->str_off[id] = L->ents[i].off;
        t->str_len[id] = L->ents[i].len;
        t->flags[id] |= TOK_F_PRESENT;
    }
    return TS_OK;
}

/* Resolves rec[0..n) (merges base .. base+n) to ids in L->trip. The slots of merge i + 16 are
 * prefetched, then the key bytes of merge i + 8 once its slots are in: the ~1M lookups of a
 * large list are otherwise bound by cache misses. */
static ts_status resolve_merges(tok_loader *L, const tok_merge_rec *rec, size_t n, const char *sb,
                                size_t base) {
    ts_tok *t = L->t;
    for (size_t i = 0; i < n; i++) {
        if (i + 16 < n)
            for (int k = 0; k < 3; k++)
                tok_strmap_prefetch(&t->by_str, rec[i + 16].h[k]);
#if defined(__GNUC__)
        if (i + 8 < n)
            for (int k = 0; k < 3; k++) {
                const tok_slot *e = &t->by_str.slots[rec[i + 8].h[k] & t->by_str.mask];
                if (e->id >= 0) __builtin_prefetch(t->arena.p + e->off);
            }
#endif
        const tok_merge_rec *m = &rec[i];
        const char *p = sb + m->off;
        size_t lo[3] = {0, m->split, 0}, ln[3] = {m->split, m->len - m->split, m->len};
        for (int k = 0; k < 3; k++) {
            int32_t id = tok_strmap_get_h(&t->by_str, t->arena.p, p + lo[k], ln[k], m->h[k]);
            if (id < 0)
                return ts_fail(L->err, TS_ERR_FORMAT,
                               "%s: %s[%zu]: %s \"%.*s\" is not in %s", L->file, L->merges_key,
                               base + i, k == 2 ? "the merged token" : "token", (int)ln[k],
                               p + lo[k], L->vocab_key);
            L->trip[3 * (base + i) + (size_t)k] = id;
        }
    }
    return TS_OK;
}

/* Merges are read in chunks: each chunk's strings go to a small scratch buffer with their
 * hashes, then are resolved to ids, so the working set stays in cache whatever the list's
 * length. */
enum { MERGE_CHUNK = 4096 };

ts_status tok_merges_begin(tok_loader *L, tok_merges *m) {
    memset(m, 0, sizeof *m);
    m->rec = malloc(MERGE_CHUNK * sizeof *m->rec);
    return m->rec ? TS_OK : tok_loader_nomem(L);
}

static ts_status merges_flush(tok_loader *L, tok_merges *m) {
    if (!m->k) return TS_OK;
    if (m->n + m->k > (size_t)INT32_MAX / 4)
        return ts_fail(L->err, TS_ERR_FORMAT, "%s: %s: too many", L->file, L->merges_key);
    if (m->n + m->k > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 262144;
        int32_t *tr = realloc(L->trip, cap * 3 * sizeof *tr);
        if (!tr) return tok_loader_nomem(L);
        L->trip = tr;
        m->cap = cap;
    }
    ts_status s = resolve_merges(L, m->rec, m->k, m->sb.p, m->n);
    if (s) return s;
    m->n += m->k;
    m->k = 0;
    m->sb.len = 0;
    return TS_OK;
}

ts_status tok_merges_add(tok_loader *L, tok_merges *m, size_t off, size_t split) {
    if (m->sb.len > UINT32_MAX / 2)
        return ts_fail(L->err, TS_ERR_FORMAT, "%s: %s: a merge is too long", L->file,
                       L->merges_key);
    tok_merge_rec *r = &m->rec[m->k++];
    r->off = (uint32_t)off;
    r->split = (uint32_t)split;
    r->len = (uint32_t)(m->sb.len - off);
    const char *p = m->sb.p + off;
    r->h[0] = tok_hash(p, r->split);
    r->h[1] = tok_hash(p + r->split, r->len - r->split);
    r->h[2] = tok_hash(p, r->len);
    return m->k == MERGE_CHUNK ? merges_flush(L, m) : TS_OK;
}

ts_status tok_merges_add_spaced(tok_loader *L, tok_merges *m, size_t off) {
    /* exactly one space, as HF requires */
    char *p = m->sb.p + off, *sp = memchr(p, ' ', m->sb.len - off);
    if (!sp || memchr(sp + 1, ' ', m->sb.len - off - (size_t)(sp - p) - 1))
        return ts_fail(L->err, TS_ERR_FORMAT,
                       "%s: %s[%zu] is \"%s\", expected two tokens separated by one space",
                       L->file, L->merges_key, m->n + m->k, p);
    size_t split = (size_t)(sp - p);
    memmove(sp, sp + 1, m->sb.len - off - split - 1);
    m->sb.len--;
    return tok_merges_add(L, m, off, split);
}

ts_status tok_merges_end(tok_loader *L, tok_merges *m, ts_status s) {
    if (!s) s = merges_flush(L, m);
    L->n_merges = m->n;
    free(m->rec);
    tok_buf_free(&m->sb);
    memset(m, 0, sizeof *m);
    return s;
}

/* model.merges: ["a b", ...] or [["a", "b"], ...]; rank = position in the list. */
static ts_status read_merges(tok_loader *L, tok_jcur *c) {
    tok_merges m;
    ts_status s = tok_merges_begin(L, &m);
    c->where = "model.merges";
    if (!s && !tok_json_eat(c, '[')) s = tok_json_fail(c, "an array");
    int done = !s && tok_json_eat(c, ']');
    while (!s && !done) {
        size_t off = m.sb.len;
        if (tok_json_eat(c, '[')) { /* ["a", "b"] */
            if ((s = tok_json_string(c, &m.sb))) break;
            if (!tok_json_eat(c, ',')) {
                s = tok_json_fail(c, "',' between the two tokens of a merge");
                break;
            }
            size_t split = m.sb.len - off;
            if ((s = tok_json_string(c, &m.sb))) break;
            if (!tok_json_eat(c, ']')) {
                s = tok_json_fail(c, "']' after the two tokens of a merge");
                break;
            }
            s = tok_merges_add(L, &m, off, split);
        } else { /* "a b" */
            if ((s = tok_json_string(c, &m.sb))) break;
            s = tok_merges_add_spaced(L, &m, off);
        }
        if (s) break;
        if (tok_json_eat(c, ']'))
            done = 1;
        else if (!tok_json_eat(c, ','))
            s = tok_json_fail(c, "',' or ']'");
    }
    return tok_merges_end(L, &m, s);
}

/* A later entry for the same pair replaces an earlier one, as in HF's map. */
static ts_status build_merges(tok_loader *L) {
    ts_tok *t = L->t;
    if (L->merges_b) { /* merges came before the vocabulary */
        tok_jcur c = {
            .p = L->merges_b, .b = L->merges_b, .e = L->merges_e, .file = L->file, .err = L->err};
        ts_status s = read_merges(L, &c);
        if (s) return s;
    }
    if (tok_pairmap_init(&t->merges, L->n_merges + 1)) return tok_loader_nomem(L);
    const int32_t *r = L->trip;
    for (size_t i = 0; i < L->n_merges; i++) {
#if defined(__GNUC__)
        if (i + 16 < L->n_merges)
            __builtin_prefetch(
                &t->merges.slots[tok_pair_slot(&t->merges, r[3 * i + 48], r[3 * i + 49])]);
#endif
        tok_pairmap_put(&t->merges, r[3 * i], r[3 * i + 1], (int32_t)i, r[3 * i + 2]);
    }
    return TS_OK;
}

/* Spelling -> bytes for every id. All-mapped spellings undo the byte-level map (HF's ByteLevel
 * decoder); others, e.g. added tokens with raw newlines, decode to their own UTF-8. */
static ts_status build_bytes(tok_loader *L) {
    ts_tok *t = L->t;
    uint32_t cp_of[256];
    int16_t byte_of[324];
    byte_map(cp_of, byte_of);
    size_t longest = 1;
    for (int id = 0; id < t->n_vocab; id++)
        if (t->str_len[id] > longest) longest = t->str_len[id];
    uint32_t *h = malloc((size_t)t->n_vocab * sizeof *h);
    uint8_t *tmp = malloc(longest);
    if (!h || !tmp) {
        free(h);
        free(tmp);
        return tok_loader_nomem(L);
    }
    for (int id = 0; id < t->n_vocab; id++) {
        h[id] = 0;
        if (!(t->flags[id] & TOK_F_PRESENT)) continue;
        const uint8_t *s = (const uint8_t *)t->arena.p + t->str_off[id];
        size_t n = t->str_len[id], k = 0, i = 0;
        int mapped = 1;
        while (mapped && i < n) {
            uint32_t cp;
            i += (size_t)tok_utf8_next(s + i, &cp);
            if (cp >= 324 || byte_of[cp] < 0)
                mapped = 0;
            else
                tmp[k++] = (uint8_t)byte_of[cp];
        }
        if (mapped) {
            t->byt_off[id] = (uint32_t)t->arena.len;
            t->byt_len[id] = (uint32_t)k;
            if (tok_buf_put(&t->arena, tmp, k)) {
                free(h);
                free(tmp);
                return tok_loader_nomem(L);
            }
            /* only the model's own tokens are whole-word candidates (ignore_merges) */
            if (!(t->flags[id] & TOK_F_ADDED)) {
                t->flags[id] |= TOK_F_BYTE;
                h[id] = tok_hash(tmp, k);
            }
        } else {
            t->byt_off[id] = t->str_off[id];
            t->byt_len[id] = t->str_len[id];
        }
        if (t->byt_len[id] > t->max_token_bytes) t->max_token_bytes = t->byt_len[id];
    }
    /* inserted in a second pass so the slot of id + 16 can be prefetched */
    for (int id = 0; id < t->n_vocab; id++) {
        if (id + 16 < t->n_vocab) tok_strmap_prefetch(&t->by_bytes, h[id + 16]);
        if (t->flags[id] & TOK_F_BYTE) {
            t->flags[id] &= (uint8_t)~TOK_F_BYTE;
            tok_strmap_put_h(&t->by_bytes, t->arena.p, t->byt_off[id], t->byt_len[id], id, h[id]);
        }
    }
    free(h);
    free(tmp);
    for (int b = 0; b < 256; b++) {
        char ch = (char)b;
        t->byte_id[b] = tok_strmap_get(&t->by_bytes, t->arena.p, &ch, 1);
    }
    return TS_OK;
}

ts_status tok_loader_build(tok_loader *L, const char *dir) {
    ts_tok *t = L->t;
    ts_status s = check_model(L);
    if (s) return s;
    int64_t max_id = -1;
    if ((s = read_added(L, &max_id))) return s;
    if (!L->n_ents)
        return ts_fail(L->err, TS_ERR_FORMAT,
                       "%s: %s is missing or empty, expected the vocabulary", L->file,
                       L->vocab_key);
    if ((s = build_vocab(L, max_id))) return s;
    if ((s = build_merges(L))) return s;
    if (tok_strmap_reserve(&t->by_str, (size_t)t->n_added)) return tok_loader_nomem(L);
    for (int i = 0; i < t->n_added; i++) {
        tok_added *a = &t->added[i];
        /* The added token's spelling wins for its id, as in HF's id_to_token. */
        t->str_off[a->id] = a->off;
        t->str_len[a->id] = a->len;
        t->flags[a->id] |= TOK_F_PRESENT | TOK_F_ADDED | (a->special ? TOK_F_SPECIAL : 0);
        /* HF's token_to_id asks the added vocabulary first */
        int32_t held = tok_strmap_put(&t->by_str, t->arena.p, a->off, a->len, a->id);
        if (held != a->id) tok_strmap_set(&t->by_str, t->arena.p, a->off, a->len, a->id);
    }
    tok_sort_added(t);
    if ((s = read_norm(L, L->sec[1], "normalizer"))) goto where;
    if (L->sec[2] && !json_is_null(L->sec[2]) && (s = read_pretok(L, L->sec[2], "pre_tokenizer")))
        goto where;
    if (!t->n_stages || !t->stages[t->n_stages - 1].bytelevel) {
        s = ts_fail(L->err, TS_ERR_UNSUPPORTED,
                    "pre_tokenizer: no ByteLevel step, expected a byte-level BPE "
                    "tokenizer (ByteLevel last, after optional Split steps)");
        goto where;
    }
    const json_t *dec = L->sec[4];
    if (dec && !json_is_null(dec)) {
        const char *type = json_string_value(json_object_get(dec, "type"));
        if (!type || strcmp(type, "ByteLevel")) {
            s = ts_fail(L->err, TS_ERR_UNSUPPORTED,
                        "decoder: type is \"%s\", expected \"ByteLevel\"",
                        type ? type : "(missing)");
            goto where;
        }
    }
    if ((s = build_bytes(L))) return s;
    if (!(t->cache = tok_cache_new())) return tok_loader_nomem(L);
    json_int_t bos = template_bos(L->sec[3]);
    if (bos < -1 || bos >= t->n_vocab) {
        s = ts_fail(L->err, TS_ERR_FORMAT,
                    "post_processor: the template's first special token has id %lld, expected an id in "
                    "[0, %d)", (long long)bos, t->n_vocab);
        goto where;
    }
    t->bos = (int32_t)bos;
    dir_special(t, dir, "bos", &t->bos);
    dir_special(t, dir, "eos", &t->eos);
    /* tokenizer.json has no add_bos flag of its own: a BOS it names is meant to be prepended
     * (HF's template does; Llama-3's tokenizer_config.json asks for it) */
    t->add_bos = t->bos >= 0;
    return TS_OK;
where:
    ts_error_prefix(L->err, "%s", L->file);
    return s;
}

ts_status tok_loader_init(tok_loader *L, const char *file, ts_error *err) {
    memset(L, 0, sizeof *L);
    L->file = file;
    L->err = err;
    L->vocab_key = "model.vocab";
    L->merges_key = "model.merges";
    ts_tok *t = L->t = calloc(1, sizeof *t);
    if (!t) return tok_loader_nomem(L);
    t->kind = TOK_KIND_BPE;
    t->bos = t->eos = t->unk = t->pad = -1;
    return TS_OK;
}

void tok_loader_free(tok_loader *L) {
    free(L->ents);
    free(L->trip);
    json_decref(L->model);
    for (int i = 0; i < 5; i++)
        json_decref(L->sec[i]);
    ts_tok_free(L->t);
    memset(L, 0, sizeof *L);
}

ts_status ts_tok_load_json(const char *buf, size_t len, const char *what, const char *dir,
                           ts_tok **out, ts_error *err) {
    *out = NULL;
    tok_loader L;
    ts_status s = tok_loader_init(&L, what, err);
    /* the strings are about a fifth of the file: one allocation instead of a dozen copies */
    if (!s && tok_buf_reserve(&L.t->arena, len / 5)) s = tok_loader_nomem(&L);
    if (!s) s = read_top(&L, buf, len);
    if (!s) s = tok_loader_build(&L, dir);
    if (!s) {
        *out = L.t;
        L.t = NULL;
    }
    tok_loader_free(&L);
    return s;
}

ts_status ts_tok_load(const char *path, ts_tok **out, ts_error *err) {
    struct stat st;
    *out = NULL;
    if (stat(path, &st) != 0) return ts_fail(err, TS_ERR_IO, "%s: no such file or directory", path);
    if (!S_ISDIR(st.st_mode) && ts_gguf_is_file(path)) return tok_load_gguf(path, out, err);
    char *file = NULL, *dir = NULL;
    if (S_ISDIR(st.st_mode)) {
        file = ts_path_join(path, "tokenizer.json");
        dir = strdup(path);
    } else {
        file = strdup(path);
        dir = strdup(path);
        if (dir) {
            char *slash = strrchr(dir, '/');
            if (slash)
                slash[1] = 0;
            else
                strcpy(dir, ".");
        }
    }
    ts_status s;
    if (!file || !dir) {
        s = ts_fail(err, TS_ERR_NOMEM, "%s: out of memory", path);
    } else {
        /* mapped, not read: the reader never needs a terminating NUL */
        ts_mmap m;
        s = ts_mmap_open(&m, file, err);
        if (!s) {
            s = ts_tok_load_json((const char *)m.data, m.size, file, dir, out, err);
            ts_mmap_close(&m);
        }
    }
    free(file);
    free(dir);
    return s;
}
