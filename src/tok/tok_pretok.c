/* HF's Split pre-tokenizer over PCRE2: the regex (compiled with UTF + UCP so \p{L}, \s and
 * (?i:...) follow Unicode, and JIT-compiled when the platform allows) cuts a piece into
 * matches and the gaps between them; `invert` swaps the two and the behaviour decides what
 * becomes a piece (removed, isolated, merged with the previous or next, contiguous). */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tok/tok_internal.h"

/* HF matches with Oniguruma, whose Unicode tables differ from PCRE2's in two ways that show
 * in real text: Oniguruma's \s is the White_Space property, which no longer holds U+180E
 * while PCRE2's \s still does; and its tables are Unicode 16, so letters and digits added
 * since Unicode 14 (PCRE2 10.42) are \p{L} / \p{N} there only. rewrite() spells \s, \S,
 * \p{L}, \p{N} (and \P{..}) out as classes that match what Oniguruma matches; the lists
 * were derived by running both engines over every code point (tools/gen_tok_fixtures.py
 * checks the result end to end through the random-string goldens). */
static const char k_ws[] =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";
static const char k_extra_l[] =
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}"
    "\\x{10D4A}-\\x{10D65}\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{1123F}-\\x{11240}"
    "\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}"
    "\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}"
    "\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}\\x{16D40}-"
    "\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}"
    "\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{2B739}\\x{2EBF0}-\\x{2EE5D}"
    "\\x{31350}-\\x{323AF}";
static const char k_extra_n[] =
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11F50}-\\x{11F59}"
    "\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}"
    "\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}";

static int put(tok_buf *b, const char *s) { return tok_buf_put(b, s, strlen(s)); }

/* Copies pattern into out with the four classes spelled out (see above). Inside [...] a
 * positive item is replaced by its members; a negated one (\S, \P{..}) is kept as written. */
static int rewrite(const char *p, size_t n, tok_buf *out) {
    int in_class = 0;
    for (size_t i = 0; i < n;) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            size_t k = 2; /* length of the escape */
            const char *prop = NULL;
            if ((e == 'p' || e == 'P') && i + 2 < n && p[i + 2] == '{') {
                const char *close = memchr(p + i, '}', n - i);
                if (close) k = (size_t)(close - (p + i)) + 1;
                if (k == 5 && p[i + 3] == 'L') prop = k_extra_l;
                if (k == 5 && p[i + 3] == 'N') prop = k_extra_n;
            } else if (e == 'x' && i + 2 < n && p[i + 2] == '{') {
                const char *close = memchr(p + i, '}', n - i);
                if (close) k = (size_t)(close - (p + i)) + 1;
            }
            int r = 0;
            if (e == 's' && in_class)
                r = put(out, k_ws);
            else if (e == 's')
                r = put(out, "[") || put(out, k_ws) || put(out, "]");
            else if (e == 'S' && !in_class)
                r = put(out, "[^") || put(out, k_ws) || put(out, "]");
            else if (prop && e == 'p' && in_class)
                r = tok_buf_put(out, p + i, k) || put(out, prop);
            else if (prop && !in_class)
                r = put(out, e == 'p' ? "[" : "[^") || put(out, "\\p{") ||
                    tok_buf_put(out, p + i + 3, 1) || put(out, "}") || put(out, prop) ||
                    put(out, "]");
            else
                r = tok_buf_put(out, p + i, k);
            if (r) return -1;
            i += k;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            /* a ']' right after '[' or '[^' is a literal member */
            size_t j = i + 1;
            if (j < n && p[j] == '^') j++;
            if (j < n && p[j] == ']') j++;
            if (tok_buf_put(out, p + i, j - i)) return -1;
            i = j;
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') { /* [:alpha:] */
            const char *close = NULL;
            for (size_t j = i + 2; j + 1 < n; j++)
                if (p[j] == ':' && p[j + 1] == ']') {
                    close = p + j + 2;
                    break;
                }
            size_t k = close ? (size_t)(close - (p + i)) : 1;
            if (tok_buf_put(out, p + i, k)) return -1;
            i += k;
            continue;
        }
        if (in_class && c == ']') in_class = 0;
        if (tok_buf_put(out, p + i, 1)) return -1;
        i++;
    }
    return 0;
}

ts_status tok_stage_regex(tok_stage *st, const char *pattern, size_t len, int is_regex,
                          const char *where, ts_error *err) {
    int code;
    PCRE2_SIZE off;
    /* PCRE2 refuses UCP together with LITERAL; a literal needs no character classes anyway. */
    uint32_t opts = PCRE2_UTF | (is_regex ? PCRE2_UCP : PCRE2_LITERAL);
    tok_buf rw = {0};
    if (is_regex) {
        if (rewrite(pattern, len, &rw) || tok_buf_put(&rw, "", 0)) {
            tok_buf_free(&rw);
            return ts_fail(err, TS_ERR_NOMEM, "%s: out of memory", where);
        }
        pattern = rw.p;
        len = rw.len;
    }
    st->re = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &code, &off, NULL);
    if (!st->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        size_t o = (size_t)off;
        ts_fail(err, TS_ERR_UNSUPPORTED, "%s: pattern does not compile at \"%.20s\": %s", where,
                o < len ? pattern + o : "(end)", (const char *)msg);
        tok_buf_free(&rw);
        return TS_ERR_UNSUPPORTED;
    }
    tok_buf_free(&rw);
    /* JIT is an optimization only: when it is unavailable the interpreter gives the same
     * matches. */
    st->jit = pcre2_jit_compile(st->re, PCRE2_JIT_COMPLETE) == 0;
    return TS_OK;
}

static int spans_push(tok_spans *o, size_t a, size_t b, size_t m) {
    if (o->n + 3 > o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 192;
        size_t *v = realloc(o->v, cap * sizeof *v);
        if (!v) return -1;
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = a;
    o->v[o->n++] = b;
    o->v[o->n++] = m;
    return 0;
}

/* One match of st->re in s at or after `from`: 1 found, 0 none, -1 error. */
static int find(const tok_stage *st, pcre2_match_data *md, const char *s, size_t len, size_t from,
                size_t *ms, size_t *me, ts_error *err) {
    int rc;
    if (st->jit) {
        rc = pcre2_jit_match(st->re, (PCRE2_SPTR)s, len, from, 0, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* the interpreter keeps its frames on the heap */
            rc = pcre2_match(st->re, (PCRE2_SPTR)s, len, from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                             md, NULL);
    } else {
        rc = pcre2_match(st->re, (PCRE2_SPTR)s, len, from, PCRE2_NO_UTF_CHECK, md, NULL);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        ts_fail(err, TS_ERR_ARG, "pre-tokenizer regex failed on a piece of %zu bytes: %s", len,
                (const char *)msg);
        return -1;
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

/* The output keeps (start, end) pairs; the third slot of each triple is dropped at the end. */
int tok_split(const tok_stage *st, pcre2_match_data *md, const char *s, size_t len, tok_spans *out,
              ts_error *err) {
    out->n = 0;
    /* 1. the whole piece as alternating (gap | match) segments, flagged with is_match */
    size_t pos = 0, prev = 0;
    int matched = 0;
    while (pos <= len) {
        size_t ms, me;
        int r = find(st, md, s, len, pos, &ms, &me, err);
        if (r < 0) return -1;
        if (r == 0) break;
        /* Like Oniguruma's iterator (which HF uses), an empty match right where the previous
         * match ended does not count. */
        if (ms == me && matched && ms == prev) {
            if (me >= len) break;
            int k = tok_utf8_len((uint8_t)s[me]);
            pos = me + (size_t)(k ? k : 1);
            continue;
        }
        matched = 1;
        if (ms > prev && spans_push(out, prev, ms, 0)) goto nomem;
        if (spans_push(out, ms, me, 1)) goto nomem;
        prev = me;
        if (me == ms) { /* an empty match: step over one character to make progress */
            if (me >= len) break;
            int k = tok_utf8_len((uint8_t)s[me]);
            pos = me + (size_t)(k ? k : 1);
        } else {
            pos = me;
        }
    }
    if (prev < len && spans_push(out, prev, len, 0)) goto nomem;
    size_t n = out->n / 3;
    size_t *v = out->v;
    if (st->invert)
        for (size_t i = 0; i < n; i++)
            v[3 * i + 2] ^= 1;
    /* 2. the behaviour folds segments into pieces, in place (never more pieces than segments) */
    size_t k = 0; /* pieces written */
    switch (st->behavior) {
    case TOK_SPLIT_REMOVED:
        for (size_t i = 0; i < n; i++)
            if (!v[3 * i + 2]) {
                v[3 * k] = v[3 * i];
                v[3 * k + 1] = v[3 * i + 1];
                k++;
            }
        break;
    case TOK_SPLIT_ISOLATED: k = n; break;
    case TOK_SPLIT_MERGED_PREV:
    case TOK_SPLIT_CONTIGUOUS: {
        int prev_match = 0;
        for (size_t i = 0; i < n; i++) {
            int m = (int)v[3 * i + 2];
            int join =
                st->behavior == TOK_SPLIT_MERGED_PREV ? (m && !prev_match) : (m == prev_match);
            if (join && k > 0) {
                v[3 * (k - 1) + 1] = v[3 * i + 1];
            } else {
                v[3 * k] = v[3 * i];
                v[3 * k + 1] = v[3 * i + 1];
                k++;
            }
            prev_match = m;
        }
        break;
    }
    case TOK_SPLIT_MERGED_NEXT: {
        /* Mirror image of MERGED_PREV: walk backwards, writing pieces from the end. */
        int next_match = 0;
        size_t w = n; /* pieces occupy [w, n) */
        for (size_t i = n; i-- > 0;) {
            int m = (int)v[3 * i + 2];
            if (m && !next_match && w < n) {
                v[3 * w] = v[3 * i];
            } else {
                w--;
                v[3 * w] = v[3 * i];
                v[3 * w + 1] = v[3 * i + 1];
            }
            next_match = m;
        }
        for (size_t i = w; i < n; i++) {
            v[3 * (i - w)] = v[3 * i];
            v[3 * (i - w) + 1] = v[3 * i + 1];
        }
        k = n - w;
        break;
    }
    }
    /* 3. drop empty pieces and compact to (start, end) pairs */
    size_t m = 0;
    for (size_t i = 0; i < k; i++)
        if (v[3 * i + 1] > v[3 * i]) {
            v[2 * m] = v[3 * i];
            v[2 * m + 1] = v[3 * i + 1];
            m++;
        }
    out->n = m;
    return (int)(m > INT32_MAX ? INT32_MAX : m);
nomem:
    ts_fail(err, TS_ERR_NOMEM, "out of memory splitting a piece of %zu bytes", len);
    return -1;
}
