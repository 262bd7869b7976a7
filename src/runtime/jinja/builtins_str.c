/* Builtins of the Jinja interpreter, part 2: Python's str — its methods ("a,b".split(","),
 * s.startswith(...)) and the operations string filters share (case mapping with Unicode tables
 * from utf8proc, strip, replace, splitlines); formatting is in builtins_fmt.c. Indexes are in
 * code points as in Python; nothing depends on the C locale. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "runtime/jinja/builtins_impl.h"

/* ---- code points --------------------------------------------------------------------------- */

const char *jb_find(const char *hay, size_t hn, const char *needle, size_t nn) {
    if (nn == 0) return hay;
    if (nn > hn) return NULL;
    const char *end = hay + (hn - nn) + 1;
    for (const char *p = hay; p < end; p++) {
        p = memchr(p, needle[0], (size_t)(end - p));
        if (!p) return NULL;
        if (!memcmp(p, needle, nn)) return p;
    }
    return NULL;
}

/* Last occurrence within hay. */
static const char *rfind_bytes(const char *hay, size_t hn, const char *needle, size_t nn) {
    if (nn > hn) return NULL;
    for (size_t i = hn - nn + 1; i-- > 0;)
        if (!memcmp(hay + i, needle, nn)) return hay + i;
    return NULL;
}

int jb_decode(jctx *c, const jstr *s, uint32_t **out) {
    uint32_t *cp = jalloc(c, (s->nchars + 1) * sizeof(uint32_t));
    if (!cp || jcharge(c, s->nchars / 16) < 0) return -1;
    size_t i = 0, k = 0;
    while (i < s->len) cp[k++] = jutf8_next(s->s, &i);
    *out = cp;
    return 0;
}

int jb_encode(jctx *c, const uint32_t *cp, size_t n, jv *out) {
    if (n > SIZE_MAX / 8) return jfail_st(c, TS_ERR_UNSUPPORTED, "string too long");
    char *b = jalloc(c, 4 * n + 1);
    if (!b) return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += (size_t)ts_utf8_put(b + k, cp[i]);
    return jv_str_trusted(c, b, k, out);
}

int jb_py_isspace(uint32_t cp) {
    if (cp < 128) return (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x20);
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

static int cat_of(uint32_t cp) { return (int)utf8proc_category((utf8proc_int32_t)cp); }

static int is_alpha(uint32_t cp) {
    if (cp < 128) return (cp | 32) >= 'a' && (cp | 32) <= 'z';
    int k = cat_of(cp);
    return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}
static int is_decimal(uint32_t cp) {
    if (cp < 128) return cp >= '0' && cp <= '9';
    return cat_of(cp) == UTF8PROC_CATEGORY_ND;
}
/* Python's isdigit adds the superscript and circled digits (numeric type "digit") to Nd. */
static int is_digit(uint32_t cp) {
    return is_decimal(cp) || cp == 0xb2 || cp == 0xb3 || cp == 0xb9 || (cp >= 0x2070 && cp <= 0x2079) ||
           (cp >= 0x2080 && cp <= 0x2089) || (cp >= 0x2460 && cp <= 0x2468);
}
static int is_numeric(uint32_t cp) {
    if (cp < 128) return cp >= '0' && cp <= '9';
    int k = cat_of(cp);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}
static int is_alnum(uint32_t cp) { return is_alpha(cp) || is_numeric(cp); }
int jb_py_isword(uint32_t cp) {
    if (cp == '_') return 1;
    if (is_alnum(cp)) return 1;
    int k = cat_of(cp);
    return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC;
}
static int is_lower(uint32_t cp) {
    if (cp < 128) return cp >= 'a' && cp <= 'z';
    return cat_of(cp) == UTF8PROC_CATEGORY_LL;
}
static int is_upper(uint32_t cp) {
    if (cp < 128) return cp >= 'A' && cp <= 'Z';
    return cat_of(cp) == UTF8PROC_CATEGORY_LU;
}
static int is_title(uint32_t cp) { return cp >= 128 && cat_of(cp) == UTF8PROC_CATEGORY_LT; }
static int is_cased(uint32_t cp) { return is_lower(cp) || is_upper(cp) || is_title(cp); }

/* Case maps. utf8proc has the simple (1:1) mappings; Python uses the full ones, whose few
 * multi-character cases that occur in real text are spelled out here. */
static size_t to_upper(uint32_t cp, uint32_t *o) {
    if (cp < 128) return o[0] = (cp >= 'a' && cp <= 'z') ? cp - 32 : cp, 1;
    if (cp == 0xdf) return o[0] = 'S', o[1] = 'S', 2;
    return o[0] = (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp), 1;
}
static size_t to_lower(uint32_t cp, uint32_t *o) {
    if (cp < 128) return o[0] = (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp, 1;
    if (cp == 0x130) return o[0] = 'i', o[1] = 0x307, 2;
    return o[0] = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), 1;
}
static size_t to_title(uint32_t cp, uint32_t *o) {
    if (cp < 128) return to_upper(cp, o);
    if (cp == 0xdf) return o[0] = 'S', o[1] = 's', 2;
    return o[0] = (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp), 1;
}

enum { CM_UPPER, CM_LOWER, CM_SWAP, CM_CAPITALIZE, CM_TITLE, CM_JTITLE };

static int is_jtitle_sep(uint32_t cp) {
    return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || jb_py_isspace(cp);
}

static int casemap(jctx *c, const jstr *s, int mode, jv *out) {
    uint32_t *cp, *o;
    if (jb_decode(c, s, &cp) < 0) return -1;
    o = jalloc(c, (2 * s->nchars + 1) * sizeof(uint32_t));
    if (!o) return -1;
    size_t k = 0;
    int prev_cased = 0, prev_sep = 1;
    for (size_t i = 0; i < s->nchars; i++) {
        uint32_t ch = cp[i];
        switch (mode) {
        case CM_UPPER: k += to_upper(ch, o + k); break;
        case CM_LOWER: k += to_lower(ch, o + k); break;
        case CM_SWAP:
            k += is_upper(ch) ? to_lower(ch, o + k) : is_lower(ch) ? to_upper(ch, o + k) : (o[k] = ch, 1);
            break;
        case CM_CAPITALIZE: k += i == 0 ? to_title(ch, o + k) : to_lower(ch, o + k); break;
        case CM_TITLE:
            k += prev_cased ? to_lower(ch, o + k) : to_title(ch, o + k);
            prev_cased = is_cased(ch);
            break;
        case CM_JTITLE: {
            /* jinja2's title: each run between separators ("-", space, brackets) gets its first
             * character upper-cased and the rest lower-cased. */
            int sep = is_jtitle_sep(ch);
            k += (prev_sep != sep) ? to_upper(ch, o + k) : to_lower(ch, o + k);
            prev_sep = sep;
            break;
        }
        }
    }
    return jb_encode(c, o, k, out);
}

int jb_s_upper(jctx *c, const jstr *s, jv *out) { return casemap(c, s, CM_UPPER, out); }
int jb_s_lower(jctx *c, const jstr *s, jv *out) { return casemap(c, s, CM_LOWER, out); }
int jb_s_capitalize(jctx *c, const jstr *s, jv *out) { return casemap(c, s, CM_CAPITALIZE, out); }
int jb_s_jtitle(jctx *c, const jstr *s, jv *out) { return casemap(c, s, CM_JTITLE, out); }

int jb_s_islower(const jstr *s) {
    size_t i = 0;
    int cased = 0;
    while (i < s->len) {
        uint32_t ch = jutf8_next(s->s, &i);
        if (is_upper(ch) || is_title(ch)) return 0;
        if (is_lower(ch)) cased = 1;
    }
    return cased;
}

int jb_s_isupper(const jstr *s) {
    size_t i = 0;
    int cased = 0;
    while (i < s->len) {
        uint32_t ch = jutf8_next(s->s, &i);
        if (is_lower(ch) || is_title(ch)) return 0;
        if (is_upper(ch)) cased = 1;
    }
    return cased;
}

static int s_istitle(const jstr *s) {
    size_t i = 0;
    int cased = 0, prev = 0;
    while (i < s->len) {
        uint32_t ch = jutf8_next(s->s, &i);
        if (is_upper(ch) || is_title(ch)) {
            if (prev) return 0;
            prev = cased = 1;
        } else if (is_lower(ch)) {
            if (!prev) return 0;
            prev = cased = 1;
        } else prev = 0;
    }
    return cased;
}

/* ---- operations ---------------------------------------------------------------------------- */

static int sub(jctx *c, const jstr *s, size_t b0, size_t b1, jv *out) {
    return jv_str_trusted(c, s->s + b0, b1 - b0, out);
}

static int in_chars(uint32_t ch, const jstr *chars) {
    if (!chars) return jb_py_isspace(ch);
    size_t i = 0;
    while (i < chars->len)
        if (jutf8_next(chars->s, &i) == ch) return 1;
    return 0;
}

int jb_s_strip(jctx *c, const jstr *s, const jstr *chars, int left, int right, jv *out) {
    size_t b0 = 0, b1 = s->len;
    if (jcharge(c, s->nchars / 16) < 0) return -1;
    if (left)
        while (b0 < b1) {
            size_t i = b0;
            if (!in_chars(jutf8_next(s->s, &i), chars)) break;
            b0 = i;
        }
    if (right)
        while (b1 > b0) {
            size_t i = b1 - 1;
            while (i > b0 && ((unsigned char)s->s[i] & 0xC0) == 0x80) i--;
            size_t j = i;
            if (!in_chars(jutf8_next(s->s, &j), chars)) break;
            b1 = i;
        }
    return sub(c, s, b0, b1, out);
}

int jb_s_replace(jctx *c, const jstr *s, const jstr *old, const jstr *new_, int64_t count, jv *out) {
    jbuf b;
    jbuf_init(&b, c);
    if (count < 0) count = INT64_MAX;
    size_t i = 0;
    int64_t done = 0;
    if (old->len == 0) {
        /* Python inserts `new` before every character and at the end. */
        while (done < count && i <= s->len) {
            if (jcharge(c, 1) < 0 || jbuf_put(&b, new_->s, new_->len) < 0) goto fail;
            done++;
            if (i == s->len) {
                i++;
                break;
            }
            size_t j = i;
            jutf8_next(s->s, &j);
            if (jbuf_put(&b, s->s + i, j - i) < 0) goto fail;
            i = j;
        }
        if (i < s->len && jbuf_put(&b, s->s + i, s->len - i) < 0) goto fail;
        return jbuf_to_str(&b, out);
    }
    while (done < count) {
        const char *p = jb_find(s->s + i, s->len - i, old->s, old->len);
        if (!p) break;
        size_t at = (size_t)(p - s->s);
        if (jcharge(c, 1) < 0 || jbuf_put(&b, s->s + i, at - i) < 0 || jbuf_put(&b, new_->s, new_->len) < 0)
            goto fail;
        i = at + old->len;
        done++;
    }
    if (jbuf_put(&b, s->s + i, s->len - i) < 0) goto fail;
    return jbuf_to_str(&b, out);
fail:
    jbuf_free(&b);
    return -1;
}

int jb_put_fill(jbuf *b, uint32_t fill, int64_t n) {
    char f[4], chunk[256];
    int fl = ts_utf8_put(f, fill);
    if (n <= 0) return 0;
    if ((uint64_t)n > b->c->max_bytes / (uint64_t)fl)
        return jfail_st(b->c, TS_ERR_UNSUPPORTED, "template exceeded its memory budget of %zu bytes", b->c->max_bytes);
    int per = (int)sizeof chunk / fl;
    for (int i = 0; i < per; i++) memcpy(chunk + i * fl, f, (size_t)fl);
    while (n > 0) {
        int64_t k = n < per ? n : per;
        if (jcharge(b->c, 1) < 0 || jbuf_put(b, chunk, (size_t)(k * fl)) < 0) return -1;
        n -= k;
    }
    return 0;
}

/* how: 0 center, 1 ljust, 2 rjust. */
int jb_s_center(jctx *c, const jstr *s, int64_t width, uint32_t fill, int how, jv *out) {
    int64_t len = (int64_t)s->nchars;
    if (width <= len) return sub(c, s, 0, s->len, out);
    int64_t marg = width - len, left;
    if (how == 0) left = marg / 2 + (marg & width & 1); /* CPython's rounding of the odd space */
    else left = how == 1 ? 0 : marg;
    jbuf b;
    jbuf_init(&b, c);
    if (jb_put_fill(&b, fill, left) < 0 || jbuf_put(&b, s->s, s->len) < 0 || jb_put_fill(&b, fill, marg - left) < 0) {
        jbuf_free(&b);
        return -1;
    }
    return jbuf_to_str(&b, out);
}

/* Python's line boundaries: \n \r \r\n \v \f \x1c-\x1e \x85 \u2028 \u2029. */
static size_t line_break(const jstr *s, size_t i) {
    unsigned char ch = (unsigned char)s->s[i];
    if (ch == '\r') return (i + 1 < s->len && s->s[i + 1] == '\n') ? 2 : 1;
    if (ch == '\n' || ch == 0x0b || ch == 0x0c || (ch >= 0x1c && ch <= 0x1e)) return 1;
    if (ch == 0xc2 && i + 1 < s->len && (unsigned char)s->s[i + 1] == 0x85) return 2;
    if (ch == 0xe2 && i + 2 < s->len && (unsigned char)s->s[i + 1] == 0x80 &&
        ((unsigned char)s->s[i + 2] == 0xa8 || (unsigned char)s->s[i + 2] == 0xa9))
        return 3;
    return 0;
}

int jb_s_splitlines(jctx *c, const jstr *s, int keepends, jv *out) {
    size_t n = 0, i = 0, start = 0;
    jv *parts = jalloc(c, (s->len + 1) * sizeof(jv));
    if (!parts || jcharge(c, s->len / 16) < 0) return -1;
    while (i < s->len) {
        size_t k = line_break(s, i);
        if (!k) {
            i++;
            continue;
        }
        if (sub(c, s, start, keepends ? i + k : i, &parts[n++]) < 0) return -1;
        i += k;
        start = i;
    }
    if (start < s->len && sub(c, s, start, s->len, &parts[n++]) < 0) return -1;
    return jv_list(c, n, parts, 0, out);
}

/* split / rsplit; sep NULL: runs of whitespace. */
static int s_split(jctx *c, const jstr *s, const jstr *sep, int64_t maxsplit, int right, jv *out) {
    if (sep && sep->len == 0) return jfail(c, "ValueError: empty separator");
    if (maxsplit < 0) maxsplit = INT64_MAX;
    jv *parts = jalloc(c, (s->nchars + 2) * sizeof(jv));
    if (!parts || jcharge(c, s->nchars / 16 + 1) < 0) return -1;
    size_t n = 0;
    if (sep) {
        if (!right) {
            size_t i = 0;
            while ((int64_t)n < maxsplit) {
                const char *p = jb_find(s->s + i, s->len - i, sep->s, sep->len);
                if (!p) break;
                size_t at = (size_t)(p - s->s);
                if (sub(c, s, i, at, &parts[n++]) < 0) return -1;
                i = at + sep->len;
            }
            if (sub(c, s, i, s->len, &parts[n++]) < 0) return -1;
        } else {
            size_t e = s->len;
            while ((int64_t)n < maxsplit) {
                const char *p = rfind_bytes(s->s, e, sep->s, sep->len);
                if (!p) break;
                size_t at = (size_t)(p - s->s);
                if (sub(c, s, at + sep->len, e, &parts[n++]) < 0) return -1;
                e = at;
            }
            if (sub(c, s, 0, e, &parts[n++]) < 0) return -1;
            for (size_t a = 0, b = n - 1; a < b; a++, b--) {
                jv t = parts[a];
                parts[a] = parts[b];
                parts[b] = t;
            }
        }
        return jv_list(c, n, parts, 0, out);
    }
    uint32_t *cp;
    size_t *off = jalloc(c, (s->nchars + 1) * sizeof(size_t));
    if (!off || jb_decode(c, s, &cp) < 0) return -1;
    for (size_t i = 0, b = 0; i <= s->nchars; i++) {
        off[i] = b;
        if (i < s->nchars) jutf8_next(s->s, &b);
    }
    size_t N = s->nchars;
    if (!right) {
        size_t i = 0;
        for (;;) {
            while (i < N && jb_py_isspace(cp[i])) i++;
            if (i == N) break;
            if ((int64_t)n == maxsplit) {
                size_t e = N;
                if (sub(c, s, off[i], off[e], &parts[n++]) < 0) return -1;
                break;
            }
            size_t j = i;
            while (j < N && !jb_py_isspace(cp[j])) j++;
            if (sub(c, s, off[i], off[j], &parts[n++]) < 0) return -1;
            i = j;
        }
    } else {
        size_t e = N;
        for (;;) {
            while (e > 0 && jb_py_isspace(cp[e - 1])) e--;
            if (e == 0) break;
            if ((int64_t)n == maxsplit) {
                if (sub(c, s, 0, off[e], &parts[n++]) < 0) return -1;
                break;
            }
            size_t j = e;
            while (j > 0 && !jb_py_isspace(cp[j - 1])) j--;
            if (sub(c, s, off[j], off[e], &parts[n++]) < 0) return -1;
            e = j;
        }
        for (size_t a = 0, b = n ? n - 1 : 0; n && a < b; a++, b--) {
            jv t = parts[a];
            parts[a] = parts[b];
            parts[b] = t;
        }
    }
    return jv_list(c, n, parts, 0, out);
}

/* ---- methods ------------------------------------------------------------------------------- */

static const char *const k_methods[] = {
    "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "replace",
    "upper", "lower", "title", "capitalize", "swapcase", "casefold", "find", "rfind", "index", "rindex",
    "count", "join", "format", "isdigit", "isdecimal", "isnumeric", "isalpha", "isalnum", "isspace",
    "isupper", "islower", "istitle", "center", "ljust", "rjust", "zfill", "partition", "rpartition",
    "removeprefix", "removesuffix", "encode", NULL};

int jb_str_has_method(const char *name) {
    for (int i = 0; k_methods[i]; i++)
        if (!strcmp(k_methods[i], name)) return 1;
    return 0;
}

static int want_str(jctx *c, const char *who, jv v, int allow_none, const jstr **out) {
    if (v.k == JV_STR) {
        *out = v.u.s;
        return 0;
    }
    if (allow_none && v.k == JV_NONE) {
        *out = NULL;
        return 0;
    }
    if (v.k == JV_UNDEF) return jv_undef_fail(c, v);
    return jfail(c, "TypeError: %s: must be str%s, not %s", who, allow_none ? " or None" : "", jv_type_name(v));
}

/* start/end arguments of find and friends, as byte offsets; 0 when the range is empty or
 * starts past the end (then Python finds nothing, not even ""). */
static int range_args(jctx *c, const char *who, const jstr *s, const jv *v, unsigned have, int first,
                      size_t *b0, size_t *b1, int *ok) {
    int64_t n = (int64_t)s->nchars, st = 0, en = n;
    if ((have >> first) & 1 && v[first].k != JV_NONE && jb_int_arg(c, who, v[first], &st) < 0) return -1;
    if ((have >> (first + 1)) & 1 && v[first + 1].k != JV_NONE && jb_int_arg(c, who, v[first + 1], &en) < 0)
        return -1;
    if (en > n) en = n;
    else if (en < 0 && (en += n) < 0) en = 0;
    if (st < 0 && (st += n) < 0) st = 0;
    *ok = st <= en;
    if (!*ok) return 0;
    *b0 = jutf8_offset(s, (size_t)st);
    *b1 = jutf8_offset(s, (size_t)en);
    return 0;
}

static int affix(jctx *c, const char *who, const jstr *s, jv pre, size_t b0, size_t b1, int end, int *out) {
    const jv *items = &pre;
    size_t n = 1;
    if (pre.k == JV_LIST && pre.u.l->tuple) items = pre.u.l->items, n = pre.u.l->n;
    else if (pre.k != JV_STR)
        return jfail(c, "TypeError: %s first arg must be str or a tuple of str, not %s", who, jv_type_name(pre));
    *out = 0;
    for (size_t i = 0; i < n; i++) {
        if (items[i].k != JV_STR)
            return jfail(c, "TypeError: tuple for %s must only contain str, not %s", who, jv_type_name(items[i]));
        const jstr *p = items[i].u.s;
        if (p->len > b1 - b0) continue;
        if (!memcmp(s->s + (end ? b1 - p->len : b0), p->s, p->len)) {
            *out = 1;
            return 0;
        }
    }
    return 0;
}

static int str_bool(int b, jv *out) {
    *out = jv_bool(b);
    return 0;
}

static int str_pred(const jstr *s, int (*pred)(uint32_t)) {
    if (!s->len) return 0;
    size_t i = 0;
    while (i < s->len)
        if (!pred(jutf8_next(s->s, &i))) return 0;
    return 1;
}

int jb_str_method(jctx *c, jv self, const char *name, const jargs *a, jv *out) {
    const jstr *s = self.u.s;
    char who[48];
    snprintf(who, sizeof who, "str.%s()", name);
    jv v[4];
    unsigned have = 0;
#define IS(n) (!strcmp(name, n))
#define BIND(...)                                                                                  \
    do {                                                                                           \
        static const char *const names_[] = {__VA_ARGS__};                                         \
        if (jb_bind(c, who, a, names_, (int)(sizeof names_ / sizeof *names_), v, &have) < 0) return -1; \
    } while (0)
#define NEED(k)                                                                                    \
    do {                                                                                           \
        if (!(have & (1u << (k)))) return jfail(c, "TypeError: %s missing a required argument", who); \
    } while (0)
    if (!jb_str_has_method(name)) return -2;
    if (IS("upper") || IS("lower") || IS("title") || IS("capitalize") || IS("swapcase") || IS("casefold")) {
        if (jb_noargs(c, who, a) < 0) return -1;
        int mode = IS("upper") ? CM_UPPER : IS("lower") || IS("casefold") ? CM_LOWER : IS("title") ? CM_TITLE
                   : IS("capitalize") ? CM_CAPITALIZE : CM_SWAP;
        return casemap(c, s, mode, out);
    }
    if (IS("isdigit") || IS("isdecimal") || IS("isnumeric") || IS("isalpha") || IS("isalnum") || IS("isspace") ||
        IS("isupper") || IS("islower") || IS("istitle")) {
        if (jb_noargs(c, who, a) < 0) return -1;
        if (IS("isupper")) return str_bool(jb_s_isupper(s), out);
        if (IS("islower")) return str_bool(jb_s_islower(s), out);
        if (IS("istitle")) return str_bool(s_istitle(s), out);
        int (*pred)(uint32_t) = IS("isdigit") ? is_digit : IS("isdecimal") ? is_decimal : IS("isnumeric") ? is_numeric
                                : IS("isalpha") ? is_alpha : IS("isalnum") ? is_alnum : jb_py_isspace;
        return str_bool(str_pred(s, pred), out);
    }
    if (IS("strip") || IS("lstrip") || IS("rstrip")) {
        BIND("chars");
        const jstr *chars = NULL;
        if (have && want_str(c, who, v[0], 1, &chars) < 0) return -1;
        return jb_s_strip(c, s, chars, !IS("rstrip"), !IS("lstrip"), out);
    }
    if (IS("split") || IS("rsplit")) {
        BIND("sep", "maxsplit");
        const jstr *sep = NULL;
        int64_t maxs = -1;
        if ((have & 1) && want_str(c, who, v[0], 1, &sep) < 0) return -1;
        if ((have & 2) && jb_int_arg(c, who, v[1], &maxs) < 0) return -1;
        return s_split(c, s, sep, maxs, IS("rsplit"), out);
    }
    if (IS("splitlines")) {
        BIND("keepends");
        return jb_s_splitlines(c, s, have ? jv_truthy(v[0]) : 0, out);
    }
    if (IS("replace")) {
        BIND("old", "new", "count");
        NEED(0);
        NEED(1);
        const jstr *o, *nw;
        int64_t cnt = -1;
        if (want_str(c, who, v[0], 0, &o) < 0 || want_str(c, who, v[1], 0, &nw) < 0) return -1;
        if ((have & 4) && jb_int_arg(c, who, v[2], &cnt) < 0) return -1;
        return jb_s_replace(c, s, o, nw, cnt, out);
    }
    if (IS("startswith") || IS("endswith")) {
        BIND("prefix", "start", "end");
        NEED(0);
        size_t b0, b1;
        int ok, r;
        if (range_args(c, who, s, v, have, 1, &b0, &b1, &ok) < 0) return -1;
        if (!ok) {
            if (v[0].k != JV_STR && !(v[0].k == JV_LIST && v[0].u.l->tuple))
                return affix(c, who, s, v[0], 0, 0, 0, &r);
            return str_bool(0, out);
        }
        if (affix(c, who, s, v[0], b0, b1, IS("endswith"), &r) < 0) return -1;
        return str_bool(r, out);
    }
    if (IS("find") || IS("rfind") || IS("index") || IS("rindex") || IS("count")) {
        BIND("sub", "start", "end");
        NEED(0);
        const jstr *t;
        size_t b0, b1;
        int ok;
        if (want_str(c, who, v[0], 0, &t) < 0 || range_args(c, who, s, v, have, 1, &b0, &b1, &ok) < 0) return -1;
        if (jcharge(c, s->len / 64 + 1) < 0) return -1;
        if (IS("count")) {
            int64_t cnt = 0;
            if (ok) {
                if (!t->len) cnt = (int64_t)jutf8_count(s->s + b0, b1 - b0) + 1;
                else
                    for (size_t i = b0;;) {
                        const char *p = jb_find(s->s + i, b1 - i, t->s, t->len);
                        if (!p) break;
                        cnt++;
                        i = (size_t)(p - s->s) + t->len;
                    }
            }
            *out = jv_int(cnt);
            return 0;
        }
        const char *p = NULL;
        if (ok) p = (IS("find") || IS("index")) ? jb_find(s->s + b0, b1 - b0, t->s, t->len)
                                                : rfind_bytes(s->s + b0, b1 - b0, t->s, t->len);
        if (!p) {
            if (IS("index") || IS("rindex")) return jfail(c, "ValueError: substring not found");
            *out = jv_int(-1);
            return 0;
        }
        *out = jv_int((int64_t)jutf8_count(s->s, (size_t)(p - s->s)));
        return 0;
    }
    if (IS("join")) {
        BIND("iterable");
        NEED(0);
        const jv *items;
        size_t n;
        if (jb_iter(c, who, v[0], &items, &n) < 0) return -1;
        jbuf b;
        jbuf_init(&b, c);
        for (size_t i = 0; i < n; i++) {
            if (items[i].k != JV_STR) {
                jbuf_free(&b);
                return jfail(c, "TypeError: sequence item %zu: expected str instance, %s found", i,
                             jv_type_name(items[i]));
            }
            if (jcharge(c, 1) < 0 || (i && jbuf_put(&b, s->s, s->len) < 0) ||
                jbuf_put(&b, items[i].u.s->s, items[i].u.s->len) < 0) {
                jbuf_free(&b);
                return -1;
            }
        }
        return jbuf_to_str(&b, out);
    }
    if (IS("format")) return jb_s_format(c, s, a, out);
    if (IS("center") || IS("ljust") || IS("rjust")) {
        BIND("width", "fillchar");
        NEED(0);
        int64_t w;
        uint32_t fill = ' ';
        if (jb_int_arg(c, who, v[0], &w) < 0) return -1;
        if (have & 2) {
            if (v[1].k != JV_STR || v[1].u.s->nchars != 1)
                return jfail(c, "TypeError: The fill character must be exactly one character long");
            size_t i = 0;
            fill = jutf8_next(v[1].u.s->s, &i);
        }
        return jb_s_center(c, s, w, fill, IS("center") ? 0 : IS("ljust") ? 1 : 2, out);
    }
    if (IS("zfill")) {
        BIND("width");
        NEED(0);
        int64_t w;
        if (jb_int_arg(c, who, v[0], &w) < 0) return -1;
        int64_t pad = w - (int64_t)s->nchars;
        if (pad <= 0) return sub(c, s, 0, s->len, out);
        size_t sg = s->len && (s->s[0] == '+' || s->s[0] == '-');
        jbuf b;
        jbuf_init(&b, c);
        if (jbuf_put(&b, s->s, sg) < 0 || jb_put_fill(&b, '0', pad) < 0 || jbuf_put(&b, s->s + sg, s->len - sg) < 0) {
            jbuf_free(&b);
            return -1;
        }
        return jbuf_to_str(&b, out);
    }
    if (IS("partition") || IS("rpartition")) {
        BIND("sep");
        NEED(0);
        const jstr *sep;
        if (want_str(c, who, v[0], 0, &sep) < 0) return -1;
        if (!sep->len) return jfail(c, "ValueError: empty separator");
        const char *p = IS("partition") ? jb_find(s->s, s->len, sep->s, sep->len)
                                        : rfind_bytes(s->s, s->len, sep->s, sep->len);
        jv parts[3];
        if (!p) {
            int r = IS("partition");
            if (sub(c, s, 0, r ? s->len : 0, &parts[0]) < 0 || sub(c, s, 0, 0, &parts[1]) < 0 ||
                sub(c, s, r ? s->len : 0, s->len, &parts[2]) < 0)
                return -1;
        } else {
            size_t at = (size_t)(p - s->s);
            parts[1] = v[0];
            if (sub(c, s, 0, at, &parts[0]) < 0 || sub(c, s, at + sep->len, s->len, &parts[2]) < 0) return -1;
        }
        return jv_list(c, 3, parts, 1, out);
    }
    if (IS("removeprefix") || IS("removesuffix")) {
        BIND("affix");
        NEED(0);
        const jstr *p;
        if (want_str(c, who, v[0], 0, &p) < 0) return -1;
        int pre = IS("removeprefix");
        if (p->len <= s->len && !memcmp(s->s + (pre ? 0 : s->len - p->len), p->s, p->len))
            return pre ? sub(c, s, p->len, s->len, out) : sub(c, s, 0, s->len - p->len, out);
        return sub(c, s, 0, s->len, out);
    }
    return jfail(c, "access to attribute '%s' of 'str' object is not supported in templates", name);
#undef IS
#undef BIND
#undef NEED
}
