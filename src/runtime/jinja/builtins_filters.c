/* Builtins of the Jinja interpreter, part 3: the filters, with jinja2 3.1's semantics and
 * transformers' tojson (json.dumps without HTML escaping). Filters that jinja2 writes as
 * generators (map, select, batch, ...) return lists here: templates only iterate, join or
 * |list them. Every loop over the input charges steps. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/jinja/builtins_impl.h"

typedef int (*filter_fn)(jctx *c, const char *who, jv v, const jargs *a, jv *out);

#define BIND(...)                                                                                  \
    jv p[8];                                                                                       \
    unsigned have = 0;                                                                             \
    do {                                                                                           \
        static const char *const names_[] = {__VA_ARGS__};                                         \
        if (jb_bind(c, who, a, names_, (int)(sizeof names_ / sizeof *names_), p, &have) < 0) return -1; \
    } while (0)
#define HAS(k) ((have >> (k)) & 1u)

static int set_str(jctx *c, const char *s, jv *out) { return jv_str_trusted(c, s, strlen(s), out); }

/* Arguments that template authors pass as booleans; Python would take any truthy value. */
static int flag(const jv *p, unsigned have, int k, int dflt) { return HAS(k) ? jv_truthy(p[k]) : dflt; }


/* ---- string filters ------------------------------------------------------------------------ */

static int f_upper(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    const jstr *s;
    if (jb_noargs(c, who, a) < 0 || jb_str(c, v, &s) < 0) return -1;
    return jb_s_upper(c, s, out);
}
static int f_lower(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    const jstr *s;
    if (jb_noargs(c, who, a) < 0 || jb_str(c, v, &s) < 0) return -1;
    return jb_s_lower(c, s, out);
}
static int f_capitalize(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    const jstr *s;
    if (jb_noargs(c, who, a) < 0 || jb_str(c, v, &s) < 0) return -1;
    return jb_s_capitalize(c, s, out);
}
static int f_title(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    const jstr *s;
    if (jb_noargs(c, who, a) < 0 || jb_str(c, v, &s) < 0) return -1;
    return jb_s_jtitle(c, s, out);
}
static int f_string(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    if (jb_noargs(c, who, a) < 0) return -1;
    return jv_to_str(c, v, out);
}

static int f_trim(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    BIND("chars");
    const jstr *s, *chars = NULL;
    if (jb_str(c, v, &s) < 0) return -1;
    if (HAS(0) && p[0].k != JV_NONE) {
        if (p[0].k != JV_STR) return jfail(c, "%s: strip arg must be None or str", who);
        chars = p[0].u.s;
    }
    return jb_s_strip(c, s, chars, 1, 1, out);
}

static int f_center(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    BIND("width");
    const jstr *s;
    int64_t w = 80;
    if (jb_str(c, v, &s) < 0 || (HAS(0) && jb_int_arg(c, who, p[0], &w) < 0)) return -1;
    return jb_s_center(c, s, w, ' ', 0, out);
}

static int f_replace(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    BIND("old", "new", "count");
    const jstr *s, *o, *n;
    int64_t cnt = -1;
    if (!HAS(0) || !HAS(1)) return jfail(c, "%s: needs the old and the new string", who);
    if (jb_str(c, v, &s) < 0 || jb_str(c, p[0], &o) < 0 || jb_str(c, p[1], &n) < 0) return -1;
    if (HAS(2) && p[2].k != JV_NONE && jb_int_arg(c, who, p[2], &cnt) < 0) return -1;
    return jb_s_replace(c, s, o, n, cnt, out);
}

static int f_escape(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    const jstr *s;
    if (jb_noargs(c, who, a) < 0 || jb_str(c, v, &s) < 0) return -1;
    jbuf b;
    jbuf_init(&b, c);
    size_t run = 0;
    for (size_t i = 0; i < s->len; i++) {
        const char *rep = NULL;
        switch (s->s[i]) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&#34;"; break;
        case '\'': rep = "&#39;"; break;
        default: continue;
        }
        if (jbuf_put(&b, s->s + run, i - run) < 0 || jbuf_puts(&b, rep) < 0) goto fail;
        run = i + 1;
    }
    if (jbuf_put(&b, s->s + run, s->len - run) < 0) goto fail;
    return jbuf_to_str(&b, out);
fail:
    jbuf_free(&b);
    return -1;
}

static int f_safe(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    /* No autoescaping in chat templates, so Markup is just its string. */
    if (jb_noargs(c, who, a) < 0) return -1;
    return jv_to_str(c, v, out);
}

static int f_indent(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    BIND("width", "first", "blank");
    const jstr *s, *ind;
    jv indv;
    if (jb_str(c, v, &s) < 0) return -1;
    if (HAS(0) && p[0].k == JV_STR) ind = p[0].u.s;
    else {
        int64_t w = 4;
        if (HAS(0) && jb_int_arg(c, who, p[0], &w) < 0) return -1;
        if (w < 0) w = 0;
        if ((uint64_t)w > c->max_bytes) return jfail_st(c, TS_ERR_UNSUPPORTED, "%s: width too large", who);
        char *sp = jalloc(c, (size_t)w + 1);
        if (!sp) return -1;
        memset(sp, ' ', (size_t)w);
        if (jv_str_trusted(c, sp, (size_t)w, &indv) < 0) return -1;
        ind = indv.u.s;
    }
    int first = flag(p, have, 1, 0), blank = flag(p, have, 2, 0);
    /* jinja2 appends "\n" before splitlines() so a trailing newline does not add a line. */
    jbuf t;
    jbuf_init(&t, c);
    jv sn, lines;
    if (jbuf_put(&t, s->s, s->len) < 0 || jbuf_put(&t, "\n", 1) < 0) {
        jbuf_free(&t);
        return -1;
    }
    if (jbuf_to_str(&t, &sn) < 0 || jb_s_splitlines(c, sn.u.s, 0, &lines) < 0) return -1;
    jbuf b;
    jbuf_init(&b, c);
    if (first && jbuf_put(&b, ind->s, ind->len) < 0) goto fail;
    for (size_t i = 0; i < lines.u.l->n; i++) {
        const jstr *ln = lines.u.l->items[i].u.s;
        if (jcharge(c, 1) < 0) goto fail;
        if (i) {
            if (jbuf_put(&b, "\n", 1) < 0) goto fail;
            if ((blank || ln->len) && jbuf_put(&b, ind->s, ind->len) < 0) goto fail;
        }
        if (jbuf_put(&b, ln->s, ln->len) < 0) goto fail;
    }
    return jbuf_to_str(&b, out);
fail:
    jbuf_free(&b);
    return -1;
}

static int f_truncate(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    BIND("length", "killwords", "end", "leeway");
    const jstr *s, *end;
    jv endv;
    int64_t len = 255, leeway = 5;
    if (jb_str(c, v, &s) < 0) return -1;
    if (HAS(0) && jb_int_arg(c, who, p[0], &len) < 0) return -1;
    if (HAS(2)) {
        if (jb_str(c, p[2], &end) < 0) return -1;
    } else {
        if (set_str(c, "...", &endv) < 0) return -1;
        end = endv.u.s;
    }
    if (HAS(3) && p[3].k != JV_NONE && jb_int_arg(c, who, p[3], &leeway) < 0) return -1;
    if (len < (int64_t)end->nchars) return jfail(c, "%s: expected length >= %zu, got %" PRId64, who, end->nchars, len);
    if (leeway < 0) return jfail(c, "%s: expected leeway >= 0, got %" PRId64, who, leeway);
    if ((int64_t)s->nchars <= len + leeway) return jv_str_trusted(c, s->s, s->len, out);
    size_t cut = jutf8_offset(s, (size_t)(len - (int64_t)end->nchars));
    if (!flag(p, have, 1, 0)) {
        /* rsplit(" ", 1)[0] */
        for (size_t i = cut; i-- > 0;)
            if (s->s[i] == ' ') {
                cut = i;
                break;
            }
    }
    jbuf b;
    jbuf_init(&b, c);
    if (jbuf_put(&b, s->s, cut) < 0 || jbuf_put(&b, end->s, end->len) < 0) {
        jbuf_free(&b);
        return -1;
    }
    return jbuf_to_str(&b, out);
}

static int f_wordcount(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    const jstr *s;
    if (jb_noargs(c, who, a) < 0 || jb_str(c, v, &s) < 0 || jcharge(c, s->nchars / 16) < 0) return -1;
    int64_t n = 0;
    int in = 0;
    size_t i = 0;
    while (i < s->len) {
        int w = jb_py_isword(jutf8_next(s->s, &i));
        n += w && !in;
        in = w;
    }
    *out = jv_int(n);
    return 0;
}

static int f_format(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    const jstr *s;
    jv args;
    if (a->n && a->nk) return jfail(c, "%s: can't handle positional and keyword arguments at the same time", who);
    if (jb_str(c, v, &s) < 0) return -1;
    if (a->nk) {
        if (jv_dict_new(c, (size_t)a->nk, &args) < 0) return -1;
        for (int k = 0; k < a->nk; k++) {
            jv key;
            if (jv_cstr(c, a->kname[k], &key) < 0 || jv_dict_set(c, &args, key, a->kval[k]) < 0) return -1;
        }
    } else if (jv_list(c, (size_t)a->n, a->pos, 1, &args) < 0)
        return -1;
    return jb_s_percent(c, s, args, out);
}

static int url_quote(jbuf *b, const jstr *s, int for_qs) {
    for (size_t i = 0; i < s->len; i++) {
        unsigned char ch = (unsigned char)s->s[i];
        int safe = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                   ch == '.' || ch == '-' || ch == '~' || (ch == '/' && !for_qs);
        if (safe) {
            if (jbuf_put(b, (const char *)&ch, 1) < 0) return -1;
        } else if (ch == ' ' && for_qs) {
            if (jbuf_put(b, "+", 1) < 0) return -1;
        } else if (jbuf_printf(b, "%%%02X", ch) < 0)
            return -1;
    }
    return 0;
}

static int f_urlencode(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    if (jb_noargs(c, who, a) < 0) return -1;
    jbuf b;
    jbuf_init(&b, c);
    if (v.k == JV_DICT || v.k == JV_LIST) {
        size_t n = v.k == JV_DICT ? v.u.d->n : v.u.l->n;
        for (size_t i = 0; i < n; i++) {
            jv k, val;
            if (v.k == JV_DICT) k = v.u.d->keys[i], val = v.u.d->vals[i];
            else {
                jv pr = v.u.l->items[i];
                if (pr.k != JV_LIST || pr.u.l->n != 2) {
                    jbuf_free(&b);
                    return jfail(c, "%s: expected pairs of key and value", who);
                }
                k = pr.u.l->items[0], val = pr.u.l->items[1];
            }
            const jstr *ks, *vs;
            if (jcharge(c, 1) < 0 || jb_str(c, k, &ks) < 0 || jb_str(c, val, &vs) < 0 ||
                (i && jbuf_put(&b, "&", 1) < 0) || url_quote(&b, ks, 1) < 0 || jbuf_put(&b, "=", 1) < 0 ||
                url_quote(&b, vs, 1) < 0) {
                jbuf_free(&b);
                return -1;
            }
        }
    } else {
        const jstr *s;
        if (jb_str(c, v, &s) < 0 || url_quote(&b, s, 0) < 0) {
            jbuf_free(&b);
            return -1;
        }
    }
    return jbuf_to_str(&b, out);
}

/* ---- conversions and numbers --------------------------------------------------------------- */

static int f_length(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    if (jb_noargs(c, who, a) < 0) return -1;
    switch (v.k) {
    case JV_UNDEF: *out = jv_int(0); return 0;
    case JV_STR: *out = jv_int((int64_t)v.u.s->nchars); return 0;
    case JV_LIST: *out = jv_int((int64_t)v.u.l->n); return 0;
    case JV_DICT: *out = jv_int((int64_t)v.u.d->n); return 0;
    default: return jfail(c, "%s: object of type '%s' has no len()", who, jv_type_name(v));
    }
}

static int f_list(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    const jv *items;
    size_t n;
    if (jb_noargs(c, who, a) < 0 || jb_iter(c, who, v, &items, &n) < 0) return -1;
    if (v.k == JV_LIST && !v.u.l->tuple) {
        *out = v;
        return 0;
    }
    return jcharge(c, n) < 0 ? -1 : jv_list(c, n, items, 0, out);
}

static int f_abs(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    if (jb_noargs(c, who, a) < 0) return -1;
    if (v.k == JV_BOOL) *out = jv_int(v.u.b);
    else if (v.k == JV_INT) {
        if (v.u.i == INT64_MIN) return jfail_st(c, TS_ERR_UNSUPPORTED, "%s: integer overflow", who);
        *out = jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    } else if (v.k == JV_FLOAT) *out = jv_float(fabs(v.u.f));
    else if (v.k == JV_UNDEF) return jv_undef_fail(c, v);
    else return jfail(c, "%s: bad operand type for abs(): '%s'", who, jv_type_name(v));
    return 0;
}

/* Python's float(str): surrounding whitespace, underscores between digits, inf/nan words;
 * no hex (which strtod would take). */
static int parse_float(const jstr *s, double *out) {
    size_t b = 0, e = s->len;
    while (b < e && jb_py_isspace((unsigned char)s->s[b])) b++;
    while (e > b && jb_py_isspace((unsigned char)s->s[e - 1])) e--;
    if (b == e || e - b > 400) return 0;
    char tmp[408];
    size_t k = 0;
    for (size_t i = b; i < e; i++) {
        char ch = s->s[i];
        if (ch == '_') {
            if (i == b || i + 1 == e || !(s->s[i - 1] >= '0' && s->s[i - 1] <= '9') ||
                !(s->s[i + 1] >= '0' && s->s[i + 1] <= '9'))
                return 0;
            continue;
        }
        if (ch == 'x' || ch == 'X' || ch == 'p' || ch == 'P' || ch == '(') return 0;
        tmp[k++] = ch;
    }
    tmp[k] = 0;
    const char *q = tmp + (tmp[0] == '+' || tmp[0] == '-');
    int word = (q[0] | 32) == 'i' || (q[0] | 32) == 'n';
    if (word) {
        char low[16];
        size_t n = strlen(q);
        if (n >= sizeof low) return 0;
        for (size_t i = 0; i <= n; i++) low[i] = (char)(q[i] >= 'A' && q[i] <= 'Z' ? q[i] + 32 : q[i]);
        if (strcmp(low, "inf") && strcmp(low, "infinity") && strcmp(low, "nan")) return 0;
    }
    char *end;
    double d = strtod(tmp, &end);
    if (*end) return 0;
    *out = d;
    return 1;
}

/* Python's int(str, base). */
static int parse_int(const jstr *s, int64_t base, int64_t *out, int *overflow) {
    size_t b = 0, e = s->len;
    *overflow = 0;
    while (b < e && jb_py_isspace((unsigned char)s->s[b])) b++;
    while (e > b && jb_py_isspace((unsigned char)s->s[e - 1])) e--;
    int neg = 0;
    if (b < e && (s->s[b] == '+' || s->s[b] == '-')) neg = s->s[b++] == '-';
    if (b + 1 < e && s->s[b] == '0') {
        char x = (char)(s->s[b + 1] | 32);
        int pb = x == 'x' ? 16 : x == 'o' ? 8 : x == 'b' ? 2 : 0;
        if (pb && (base == 0 || base == pb)) base = pb, b += 2;
    }
    if (base == 0) base = 10;
    if (base < 2 || base > 36 || b == e) return 0;
    uint64_t acc = 0;
    int prev_digit = 0;
    for (size_t i = b; i < e; i++) {
        char ch = s->s[i];
        if (ch == '_') {
            if (!prev_digit || i + 1 == e) return 0;
            prev_digit = 0;
            continue;
        }
        int d = ch >= '0' && ch <= '9' ? ch - '0' : (ch | 32) >= 'a' && (ch | 32) <= 'z' ? (ch | 32) - 'a' + 10 : 99;
        if (d >= base) return 0;
        if (acc > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) *overflow = 1;
        else acc = acc * (uint64_t)base + (uint64_t)d;
        prev_digit = 1;
    }
    if (acc > (uint64_t)INT64_MAX + (uint64_t)neg) *overflow = 1;
    if (*overflow) return 0;
    *out = neg ? (int64_t)(0 - acc) : (int64_t)acc;
    return 1;
}

static int f_int(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    BIND("default", "base");
    int64_t base = 10;
    if (HAS(1) && jb_int_arg(c, who, p[1], &base) < 0) return -1;
    jv dflt = HAS(0) ? p[0] : jv_int(0);
    switch (v.k) {
    case JV_INT: *out = v; return 0;
    case JV_BOOL: *out = jv_int(v.u.b); return 0;
    case JV_FLOAT:
        if (!isfinite(v.u.f)) break;
        if (fabs(v.u.f) >= 9.2e18) return jfail_st(c, TS_ERR_UNSUPPORTED, "%s: integer too large", who);
        *out = jv_int((int64_t)v.u.f);
        return 0;
    case JV_STR: {
        int64_t r;
        int ovf;
        double d;
        if (parse_int(v.u.s, base, &r, &ovf)) {
            *out = jv_int(r);
            return 0;
        }
        if (ovf) return jfail_st(c, TS_ERR_UNSUPPORTED, "%s: integer too large", who);
        /* jinja2's quirk: "42.23"|int is 42, through float(). */
        if (parse_float(v.u.s, &d) && isfinite(d)) {
            if (fabs(d) >= 9.2e18) return jfail_st(c, TS_ERR_UNSUPPORTED, "%s: integer too large", who);
            *out = jv_int((int64_t)d);
            return 0;
        }
        break;
    }
    default: break;
    }
    *out = dflt;
    return 0;
}

static int f_float(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    BIND("default");
    double d;
    if (v.k == JV_FLOAT) *out = v;
    else if (v.k == JV_INT) *out = jv_float((double)v.u.i);
    else if (v.k == JV_BOOL) *out = jv_float(v.u.b);
    else if (v.k == JV_STR && parse_float(v.u.s, &d)) *out = jv_float(d);
    else *out = HAS(0) ? p[0] : jv_float(0.0);
    return 0;
}

/* Python's round(x, n) for floats: correctly rounded, ties to even on the exact binary
 * value, which is what %.*f does in glibc. */
static double round_float(double x, int64_t prec) {
    if (!isfinite(x) || prec > 308) return x;
    if (prec >= 0) {
        char tmp[400];
        snprintf(tmp, sizeof tmp, "%.*f", (int)prec, x);
        for (char *q = tmp; *q; q++)
            if (!((*q >= '0' && *q <= '9') || *q == '-')) *q = '.';
        double r = strtod(tmp, NULL);
        return r == 0 ? copysign(0.0, x) : r;
    }
    if (prec < -308) return copysign(0.0, x);
    double m = pow(10.0, (double)-prec);
    double r = nearbyint(x / m) * m;
    return r == 0 ? copysign(0.0, x) : r;
}

static int f_round(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    BIND("precision", "method");
    int64_t prec = 0;
    if (HAS(0) && jb_int_arg(c, who, p[0], &prec) < 0) return -1;
    const char *m = "common";
    if (HAS(1)) {
        if (p[1].k != JV_STR) return jfail(c, "%s: method must be common, ceil or floor", who);
        m = p[1].u.s->s;
    }
    if (strcmp(m, "common") && strcmp(m, "ceil") && strcmp(m, "floor"))
        return jfail(c, "%s: method must be common, ceil or floor", who);
    if (v.k == JV_UNDEF) return jv_undef_fail(c, v);
    if (v.k != JV_INT && v.k != JV_BOOL && v.k != JV_FLOAT)
        return jfail(c, "%s: type %s doesn't define __round__ method", who, jv_type_name(v));
    if (!strcmp(m, "common")) {
        if (v.k == JV_FLOAT) {
            *out = jv_float(round_float(v.u.f, prec));
            return 0;
        }
        int64_t x = v.k == JV_INT ? v.u.i : v.u.b;
        if (prec < 0) {
            if (prec < -18) x = 0;
            else {
                int64_t m10 = 1;
                for (int64_t i = 0; i < -prec; i++) m10 *= 10;
                int64_t q = x / m10, r = x % m10;
                if (r < 0) r += m10, q--;
                /* ties to even, as Python rounds ints */
                if (2 * (r / 2) != r || r) {
                    if (r * 2 > m10 || (r * 2 == m10 && (q & 1))) q++;
                }
                x = q * m10;
            }
        }
        *out = jv_int(x);
        return 0;
    }
    /* ceil/floor: math.ceil(value * 10**precision) / 10**precision, a float. */
    double x = v.k == JV_FLOAT ? v.u.f : (double)(v.k == JV_INT ? v.u.i : v.u.b);
    if (prec > 308 || prec < -308) return jfail(c, "%s: precision out of range", who);
    double scale = pow(10.0, (double)prec);
    double y = !strcmp(m, "ceil") ? ceil(x * scale) : floor(x * scale);
    if (!isfinite(y)) return jfail(c, "%s: cannot convert float infinity to integer", who);
    *out = jv_float(y / scale);
    return 0;
}

/* ---- sequences ----------------------------------------------------------------------------- */

static int f_first(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    const jv *items;
    size_t n;
    if (jb_noargs(c, who, a) < 0) return -1;
    if (v.k == JV_STR && v.u.s->len) {
        size_t i = 0;
        jutf8_next(v.u.s->s, &i);
        return jv_str_trusted(c, v.u.s->s, i, out);
    }
    if (jb_iter(c, who, v, &items, &n) < 0) return -1;
    *out = n ? items[0] : jv_undef("No first item, sequence was empty.");
    return 0;
}

static int f_last(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    const jv *items;
    size_t n;
    if (jb_noargs(c, who, a) < 0) return -1;
    if (v.k == JV_STR && v.u.s->len) {
        size_t i = v.u.s->len - 1;
        while (i > 0 && ((unsigned char)v.u.s->s[i] & 0xC0) == 0x80) i--;
        return jv_str_trusted(c, v.u.s->s + i, v.u.s->len - i, out);
    }
    if (jb_iter(c, who, v, &items, &n) < 0) return -1;
    *out = n ? items[n - 1] : jv_undef("No last item, sequence was empty.");
    return 0;
}

static int f_reverse(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    const jv *items;
    size_t n;
    if (jb_noargs(c, who, a) < 0) return -1;
    if (v.k == JV_STR) {
        uint32_t *cp;
        if (jb_decode(c, v.u.s, &cp) < 0) return -1;
        for (size_t i = 0, j = v.u.s->nchars; i + 1 < j; i++, j--) {
            uint32_t t = cp[i];
            cp[i] = cp[j - 1];
            cp[j - 1] = t;
        }
        return jb_encode(c, cp, v.u.s->nchars, out);
    }
    if (jb_iter(c, who, v, &items, &n) < 0 || jcharge(c, n) < 0 || jv_list(c, n, NULL, 0, out) < 0) return -1;
    for (size_t i = 0; i < n; i++) out->u.l->items[i] = items[n - 1 - i];
    return 0;
}

static int f_join(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    BIND("d", "attribute");
    const jv *items;
    size_t n;
    const jstr *sep = NULL;
    if (HAS(0) && jb_str(c, p[0], &sep) < 0) return -1;
    if (jb_iter(c, who, v, &items, &n) < 0) return -1;
    jbuf b;
    jbuf_init(&b, c);
    for (size_t i = 0; i < n; i++) {
        jv it = items[i];
        if (jcharge(c, 1) < 0) goto fail;
        if (HAS(1) && p[1].k != JV_NONE && jb_attrpath(c, it, p[1], NULL, &it) < 0) goto fail;
        if (i && sep && jbuf_put(&b, sep->s, sep->len) < 0) goto fail;
        if (jv_write_str(&b, it) < 0) goto fail;
    }
    return jbuf_to_str(&b, out);
fail:
    jbuf_free(&b);
    return -1;
}

static int f_batch_slice(jctx *c, const char *who, jv v, const jargs *a, jv *out, int is_slice) {
    BIND("n", "fill_with");
    const jv *items;
    int64_t k;
    size_t n;
    if (!HAS(0)) return jfail(c, "%s: missing the count", who);
    if (jb_int_arg(c, who, p[0], &k) < 0 || jb_iter(c, who, v, &items, &n) < 0) return -1;
    int fill = HAS(1) && p[1].k != JV_NONE;
    if (jcharge(c, n + 1) < 0) return -1;
    jv *groups;
    size_t ng = 0;
    if (!is_slice) {
        if (k <= 0) return jfail(c, "%s: the batch size must be positive", who);
        ng = (n + (size_t)k - 1) / (size_t)k;
        groups = jalloc(c, (ng + 1) * sizeof(jv));
        if (!groups) return -1;
        for (size_t g = 0; g < ng; g++) {
            size_t lo = g * (size_t)k, cnt = n - lo < (size_t)k ? n - lo : (size_t)k;
            size_t len = (fill && cnt < (size_t)k) ? (size_t)k : cnt;
            if (jv_list(c, len, NULL, 0, &groups[g]) < 0) return -1;
            for (size_t i = 0; i < len; i++) groups[g].u.l->items[i] = i < cnt ? items[lo + i] : p[1];
        }
    } else {
        if (k <= 0) return jfail(c, "%s: %s", who, k == 0 ? "integer division or modulo by zero" : "slices must be positive");
        if (k > 1000000) return jfail_st(c, TS_ERR_UNSUPPORTED, "%s: too many slices", who);
        size_t per = n / (size_t)k, extra = n % (size_t)k, off = 0;
        ng = (size_t)k;
        groups = jalloc(c, ng * sizeof(jv));
        if (!groups || jcharge(c, ng) < 0) return -1;
        for (size_t g = 0; g < ng; g++) {
            size_t start = off + g * per;
            if (g < extra) off++;
            size_t end = off + (g + 1) * per;
            size_t len = end - start + (fill && g >= extra);
            if (jv_list(c, len, items + start, 0, &groups[g]) < 0) return -1;
            if (fill && g >= extra) groups[g].u.l->items[len - 1] = p[1];
        }
    }
    return jv_list(c, ng, groups, 0, out);
}
static int f_batch(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    return f_batch_slice(c, who, v, a, out, 0);
}
static int f_slice(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    return f_batch_slice(c, who, v, a, out, 1);
}

/* sort's key: the attributes (comma-separated) as a list, each lowercased unless case-sensitive. */
static int multi_key(jctx *c, jv item, const jstr *attrs, int cs, jv *out) {
    if (!attrs) return cs ? (*out = item, 0) : jb_ignore_case(c, item, out);
    size_t nparts = 1;
    for (size_t i = 0; i < attrs->len; i++) nparts += attrs->s[i] == ',';
    if (jv_list(c, nparts, NULL, 0, out) < 0) return -1;
    size_t i = 0, k = 0;
    while (k < nparts) {
        size_t j = i;
        while (j < attrs->len && attrs->s[j] != ',') j++;
        jv part, val;
        if (jv_str_trusted(c, attrs->s + i, j - i, &part) < 0 || jb_attrpath(c, item, part, NULL, &val) < 0)
            return -1;
        if (!cs && jb_ignore_case(c, val, &val) < 0) return -1;
        out->u.l->items[k++] = val;
        i = j + 1;
    }
    return 0;
}

static int f_sort(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    BIND("reverse", "case_sensitive", "attribute");
    const jv *items;
    size_t n;
    int rev = flag(p, have, 0, 0), cs = flag(p, have, 1, 0);
    if (jb_iter(c, who, v, &items, &n) < 0 || jcharge(c, n) < 0) return -1;
    const jstr *attrs = NULL;
    jv single;
    int multi = HAS(2) && p[2].k == JV_STR;
    if (multi) attrs = p[2].u.s;
    if (jv_list(c, n, items, 0, out) < 0) return -1;
    jv *keys = jalloc(c, (n ? n : 1) * sizeof(jv));
    if (!keys) return -1;
    for (size_t i = 0; i < n; i++) {
        if (HAS(2) && !multi && p[2].k != JV_NONE) {
            /* an int attribute: one index, still wrapped in a list as make_multi_attrgetter does */
            if (jb_attrpath(c, items[i], p[2], NULL, &single) < 0) return -1;
            if (!cs && jb_ignore_case(c, single, &single) < 0) return -1;
            if (jv_list(c, 1, &single, 0, &keys[i]) < 0) return -1;
        } else if (multi_key(c, items[i], attrs, cs, &keys[i]) < 0)
            return -1;
    }
    return jb_sort(c, out->u.l->items, keys, n, rev);
}

static int f_dictsort(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    BIND("case_sensitive", "by", "reverse");
    int cs = flag(p, have, 0, 0), rev = flag(p, have, 2, 0), pos = 0;
    if (HAS(1)) {
        if (p[1].k == JV_STR && !strcmp(p[1].u.s->s, "value")) pos = 1;
        else if (!(p[1].k == JV_STR && !strcmp(p[1].u.s->s, "key")))
            return jfail(c, "%s: You can only sort by either \"key\" or \"value\"", who);
    }
    if (v.k != JV_DICT) return jfail(c, "%s: '%s' object has no attribute 'items'", who, jv_type_name(v));
    size_t n = v.u.d->n;
    if (jcharge(c, n) < 0 || jv_list(c, n, NULL, 0, out) < 0) return -1;
    jv *keys = jalloc(c, (n ? n : 1) * sizeof(jv));
    if (!keys) return -1;
    for (size_t i = 0; i < n; i++) {
        jv kv[2] = {v.u.d->keys[i], v.u.d->vals[i]};
        if (jv_list(c, 2, kv, 1, &out->u.l->items[i]) < 0) return -1;
        keys[i] = kv[pos];
        if (!cs && jb_ignore_case(c, keys[i], &keys[i]) < 0) return -1;
    }
    return jb_sort(c, out->u.l->items, keys, n, rev);
}

static int f_items(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    if (jb_noargs(c, who, a) < 0) return -1;
    if (v.k == JV_UNDEF) return jv_list(c, 0, NULL, 0, out);
    if (v.k != JV_DICT) return jfail(c, "%s: Can only get item pairs from a mapping.", who);
    size_t n = v.u.d->n;
    if (jcharge(c, n) < 0 || jv_list(c, n, NULL, 0, out) < 0) return -1;
    for (size_t i = 0; i < n; i++) {
        jv kv[2] = {v.u.d->keys[i], v.u.d->vals[i]};
        if (jv_list(c, 2, kv, 1, &out->u.l->items[i]) < 0) return -1;
    }
    return 0;
}

static int f_minmax(jctx *c, const char *who, jv v, const jargs *a, jv *out, int want_max) {
    BIND("case_sensitive", "attribute");
    const jv *items;
    size_t n;
    int cs = flag(p, have, 0, 0);
    if (jb_iter(c, who, v, &items, &n) < 0) return -1;
    if (!n) {
        *out = jv_undef("No aggregated item, sequence was empty.");
        return 0;
    }
    jv best = items[0], bestk;
    for (size_t i = 0; i < n; i++) {
        jv k = items[i];
        if (jcharge(c, 1) < 0) return -1;
        if (HAS(1) && p[1].k != JV_NONE && jb_attrpath(c, k, p[1], NULL, &k) < 0) return -1;
        if (!cs && jb_ignore_case(c, k, &k) < 0) return -1;
        if (i == 0) {
            bestk = k;
            continue;
        }
        int r;
        if (jv_compare(c, k, bestk, &r) < 0) return -1;
        if (want_max ? r > 0 : r < 0) best = items[i], bestk = k;
    }
    *out = best;
    return 0;
}
static int f_max(jctx *c, const char *who, jv v, const jargs *a, jv *out) { return f_minmax(c, who, v, a, out, 1); }
static int f_min(jctx *c, const char *who, jv v, const jargs *a, jv *out) { return f_minmax(c, who, v, a, out, 0); }

static int f_unique(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    BIND("case_sensitive", "attribute");
    const jv *items;
    size_t n, k = 0;
    int cs = flag(p, have, 0, 0);
    jv seen;
    if (jb_iter(c, who, v, &items, &n) < 0 || jv_dict_new(c, 8, &seen) < 0) return -1;
    jv *keep = jalloc(c, (n ? n : 1) * sizeof(jv));
    if (!keep) return -1;
    for (size_t i = 0; i < n; i++) {
        jv key = items[i];
        if (jcharge(c, 1) < 0) return -1;
        if (HAS(1) && p[1].k != JV_NONE && jb_attrpath(c, key, p[1], NULL, &key) < 0) return -1;
        if (!cs && jb_ignore_case(c, key, &key) < 0) return -1;
        if (jv_dict_get(&seen, key)) continue;
        if (jv_dict_set(c, &seen, key, jv_none()) < 0) return -1;
        keep[k++] = items[i];
    }
    return jv_list(c, k, keep, 0, out);
}

static int add_values(jctx *c, const char *who, jv x, jv y, jv *out) {
    int xn = x.k == JV_INT || x.k == JV_BOOL || x.k == JV_FLOAT, yn = y.k == JV_INT || y.k == JV_BOOL || y.k == JV_FLOAT;
    if (xn && yn) {
        if (x.k == JV_FLOAT || y.k == JV_FLOAT) {
            double a_ = x.k == JV_FLOAT ? x.u.f : (double)(x.k == JV_INT ? x.u.i : x.u.b);
            double b_ = y.k == JV_FLOAT ? y.u.f : (double)(y.k == JV_INT ? y.u.i : y.u.b);
            *out = jv_float(a_ + b_);
            return 0;
        }
        int64_t a_ = x.k == JV_INT ? x.u.i : x.u.b, b_ = y.k == JV_INT ? y.u.i : y.u.b, r;
        if (__builtin_add_overflow(a_, b_, &r)) return jfail_st(c, TS_ERR_UNSUPPORTED, "%s: integer overflow", who);
        *out = jv_int(r);
        return 0;
    }
    if (x.k == JV_LIST && y.k == JV_LIST && !x.u.l->tuple == !y.u.l->tuple) {
        size_t n = x.u.l->n + y.u.l->n;
        if (jcharge(c, n) < 0 || jv_list(c, n, NULL, x.u.l->tuple, out) < 0) return -1;
        memcpy(out->u.l->items, x.u.l->items, x.u.l->n * sizeof(jv));
        memcpy(out->u.l->items + x.u.l->n, y.u.l->items, y.u.l->n * sizeof(jv));
        return 0;
    }
    if (x.k == JV_UNDEF || y.k == JV_UNDEF) return jv_undef_fail(c, x.k == JV_UNDEF ? x : y);
    if (x.k == JV_LIST)
        return jfail(c, "%s: can only concatenate %s (not \"%s\") to %s", who, jv_type_name(x), jv_type_name(y),
                     jv_type_name(x));
    return jfail(c, "%s: unsupported operand type(s) for +: '%s' and '%s'", who, jv_type_name(x), jv_type_name(y));
}

static int f_sum(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    BIND("attribute", "start");
    const jv *items;
    size_t n;
    if (jb_iter(c, who, v, &items, &n) < 0) return -1;
    jv acc = HAS(1) ? p[1] : jv_int(0);
    for (size_t i = 0; i < n; i++) {
        jv it = items[i];
        if (jcharge(c, 1) < 0) return -1;
        if (HAS(0) && p[0].k != JV_NONE && jb_attrpath(c, it, p[0], NULL, &it) < 0) return -1;
        if (add_values(c, who, acc, it, &acc) < 0) return -1;
    }
    *out = acc;
    return 0;
}

static int f_groupby(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    BIND("attribute", "default", "case_sensitive");
    const jv *items;
    size_t n;
    if (!HAS(0)) return jfail(c, "%s: missing the attribute", who);
    int cs = flag(p, have, 2, 0);
    const jv *dflt = HAS(1) && p[1].k != JV_NONE ? &p[1] : NULL;
    if (jb_iter(c, who, v, &items, &n) < 0) return -1;
    jv sorted;
    jv *keys = jalloc(c, (n ? n : 1) * sizeof(jv));
    if (!keys || jv_list(c, n, items, 0, &sorted) < 0) return -1;
    for (size_t i = 0; i < n; i++) {
        if (jcharge(c, 1) < 0 || jb_attrpath(c, items[i], p[0], dflt, &keys[i]) < 0) return -1;
        if (!cs && jb_ignore_case(c, keys[i], &keys[i]) < 0) return -1;
    }
    jv *it = sorted.u.l->items;
    if (jb_sort(c, it, keys, n, 0) < 0) return -1;
    jv *groups = jalloc(c, (n ? n : 1) * sizeof(jv));
    if (!groups) return -1;
    size_t ng = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && jv_equal(keys[j], keys[i])) j++;
        jv pair[2];
        pair[0] = keys[i];
        if (!cs && jb_attrpath(c, it[i], p[0], dflt, &pair[0]) < 0) return -1;
        if (jv_list(c, j - i, it + i, 0, &pair[1]) < 0 || jv_list(c, 2, pair, 2, &groups[ng++]) < 0) return -1;
        i = j;
    }
    return jv_list(c, ng, groups, 0, out);
}

static int sub_call_args(const jargs *a, int skip, jargs *sub) {
    sub->n = a->n - skip;
    sub->pos = a->pos ? a->pos + skip : NULL; /* no positional arguments: NULL, not NULL + 0 */
    sub->nk = a->nk;
    sub->kname = a->kname;
    sub->kval = a->kval;
    return 0;
}

static int f_map(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    const jv *items;
    size_t n;
    const jv *attr = NULL, *dflt = NULL;
    if (a->n == 0) {
        for (int k = 0; k < a->nk; k++) {
            if (!strcmp(a->kname[k], "attribute")) attr = &a->kval[k];
            else if (!strcmp(a->kname[k], "default")) dflt = &a->kval[k];
            else return jfail(c, "%s: Unexpected keyword argument '%s'", who, a->kname[k]);
        }
        if (!attr) return jfail(c, "%s: map requires a filter argument", who);
        if (dflt && dflt->k == JV_NONE) dflt = NULL;
    } else if (a->pos[0].k != JV_STR)
        return jfail(c, "%s: the filter name must be a string", who);
    if (!jv_truthy(v)) return jv_list(c, 0, NULL, 0, out);
    if (jb_iter(c, who, v, &items, &n) < 0 || jv_list(c, n, NULL, 0, out) < 0) return -1;
    jargs sub;
    sub_call_args(a, 1, &sub);
    for (size_t i = 0; i < n; i++) {
        jv *slot = &out->u.l->items[i];
        if (jcharge(c, 1) < 0) return -1;
        if (attr) {
            if (jb_attrpath(c, items[i], *attr, dflt, slot) < 0) return -1;
            continue;
        }
        int r = jb_filter(c, a->pos[0].u.s->s, items[i], &sub, slot);
        if (r == -2) return jfail(c, "%s: no filter named '%s'", who, a->pos[0].u.s->s);
        if (r < 0) return -1;
    }
    return 0;
}

static int select_reject(jctx *c, const char *who, jv v, const jargs *a, jv *out, int want, int by_attr) {
    const jv *items;
    size_t n, k = 0;
    if (by_attr && a->n < 1) return jfail(c, "%s: Missing parameter for attribute name", who);
    int off = by_attr;
    const char *test = NULL;
    if (a->n > off) {
        if (a->pos[off].k != JV_STR) return jfail(c, "%s: the test name must be a string", who);
        test = a->pos[off].u.s->s;
    }
    if (!jv_truthy(v)) return jv_list(c, 0, NULL, 0, out);
    if (jb_iter(c, who, v, &items, &n) < 0) return -1;
    jv *keep = jalloc(c, (n ? n : 1) * sizeof(jv));
    if (!keep) return -1;
    jargs sub;
    sub_call_args(a, off + 1 > a->n ? a->n : off + 1, &sub);
    for (size_t i = 0; i < n; i++) {
        jv x = items[i];
        int ok;
        if (jcharge(c, 1) < 0) return -1;
        if (by_attr && jb_attrpath(c, x, a->pos[0], NULL, &x) < 0) return -1;
        if (test) {
            int r = jb_test(c, test, x, &sub, &ok);
            if (r == -2) return jfail(c, "%s: no test named '%s'", who, test);
            if (r < 0) return -1;
        } else ok = jv_truthy(x);
        if (!!ok == want) keep[k++] = items[i];
    }
    return jv_list(c, k, keep, 0, out);
}
static int f_select(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    return select_reject(c, who, v, a, out, 1, 0);
}
static int f_reject(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    return select_reject(c, who, v, a, out, 0, 0);
}
static int f_selectattr(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    return select_reject(c, who, v, a, out, 1, 1);
}
static int f_rejectattr(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    return select_reject(c, who, v, a, out, 0, 1);
}

/* ---- others -------------------------------------------------------------------------------- */

static int f_default(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    BIND("default_value", "boolean");
    jv dflt;
    if (HAS(0)) dflt = p[0];
    else if (jv_str_trusted(c, "", 0, &dflt) < 0) return -1;
    *out = (v.k == JV_UNDEF || (flag(p, have, 1, 0) && !jv_truthy(v))) ? dflt : v;
    return 0;
}

static int f_attr(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    BIND("name");
    if (!HAS(0)) return jfail(c, "%s: missing the attribute name", who);
    if (p[0].k != JV_STR) return jfail(c, "%s: attribute name must be string", who);
    /* Attributes, not items: a dict's keys are not found this way, a namespace's are. */
    if (v.k == JV_NS) {
        const jv *x = jv_dict_get(&v, p[0]);
        *out = x ? *x : jv_undef(NULL);
        return 0;
    }
    int r = jb_method_lookup(c, v, p[0].u.s->s, out);
    if (r == -2) *out = jv_undef(NULL);
    return r == -2 ? 0 : r;
}

static int f_tojson(jctx *c, const char *who, jv v, const jargs *a, jv *out) {
    BIND("ensure_ascii", "indent", "separators", "sort_keys");
    int ea = flag(p, have, 0, 0), sk = flag(p, have, 3, 0);
    int64_t indent = -1;
    const char *isep = NULL, *ksep = NULL;
    if (HAS(1) && p[1].k != JV_NONE) {
        if (jb_int_arg(c, who, p[1], &indent) < 0) return -1;
        if (indent < 0) indent = 0; /* Python: a negative indent is "" */
        if (indent > 1000) return jfail_st(c, TS_ERR_UNSUPPORTED, "%s: indent too large", who);
    }
    if (HAS(2) && p[2].k != JV_NONE) {
        jv s = p[2];
        if (s.k != JV_LIST || s.u.l->n != 2 || s.u.l->items[0].k != JV_STR || s.u.l->items[1].k != JV_STR)
            return jfail(c, "%s: separators must be a pair of strings", who);
        isep = s.u.l->items[0].u.s->s;
        ksep = s.u.l->items[1].u.s->s;
    }
    jbuf b;
    jbuf_init(&b, c);
    if (jv_write_json(&b, v, ea, (int)indent, isep, ksep, sk) < 0) {
        jbuf_free(&b);
        return -1;
    }
    return jbuf_to_str(&b, out);
}

static const struct {
    const char *name;
    filter_fn fn;
} k_filters[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize}, {"center", f_center},
    {"count", f_length}, {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape},
    {"escape", f_escape}, {"first", f_first}, {"float", f_float}, {"format", f_format}, {"groupby", f_groupby},
    {"indent", f_indent}, {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last},
    {"length", f_length}, {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min},
    {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},
    {"round", f_round}, {"safe", f_safe}, {"select", f_select}, {"selectattr", f_selectattr}, {"slice", f_slice},
    {"sort", f_sort}, {"string", f_string}, {"sum", f_sum}, {"title", f_title}, {"tojson", f_tojson},
    {"trim", f_trim}, {"truncate", f_truncate}, {"unique", f_unique}, {"upper", f_upper},
    {"urlencode", f_urlencode}, {"wordcount", f_wordcount}, {"forceescape", f_escape},
};

int jb_is_filter(const char *name) {
    for (size_t i = 0; i < sizeof k_filters / sizeof *k_filters; i++)
        if (!strcmp(k_filters[i].name, name)) return 1;
    return 0;
}

int jb_filter(jctx *c, const char *name, jv self, const jargs *a, jv *out) {
    for (size_t i = 0; i < sizeof k_filters / sizeof *k_filters; i++)
        if (!strcmp(k_filters[i].name, name)) {
            char who[64];
            snprintf(who, sizeof who, "filter '%s'", name);
            if (jcharge(c, 1) < 0) return -1;
            return k_filters[i].fn(c, who, self, a, out);
        }
    return -2;
}
