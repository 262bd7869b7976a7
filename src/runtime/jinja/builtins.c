/* Builtins of the Jinja interpreter, part 1: argument binding and the jinja2 lookup rules the
 * filters share, the tests (`is odd`, `is mapping`, ...), the globals transformers installs
 * (range, namespace, dict, raise_exception, strftime_now) and methods of dicts and lists. The
 * filters are in builtins_filters.c, str methods and str operations in builtins_str.c. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/jinja/builtins_impl.h"

/* ---- shared helpers ------------------------------------------------------------------------ */

int jb_bind(jctx *c, const char *who, const jargs *a, const char *const *names, int np, jv *vals,
            unsigned *have) {
    *have = 0;
    if (a->n > np)
        return jfail(c, "%s: takes at most %d argument%s (%d given)", who, np, np == 1 ? "" : "s", a->n);
    for (int i = 0; i < a->n; i++) {
        vals[i] = a->pos[i];
        *have |= 1u << i;
    }
    for (int k = 0; k < a->nk; k++) {
        int i = 0;
        while (i < np && strcmp(names[i], a->kname[k])) i++;
        if (i == np) return jfail(c, "%s: unexpected keyword argument '%s'", who, a->kname[k]);
        if (*have & (1u << i)) return jfail(c, "%s: got multiple values for argument '%s'", who, names[i]);
        vals[i] = a->kval[k];
        *have |= 1u << i;
    }
    return 0;
}

int jb_noargs(jctx *c, const char *who, const jargs *a) {
    if (a->n || a->nk) return jfail(c, "%s: takes no arguments", who);
    return 0;
}

int jb_iter(jctx *c, const char *who, jv v, const jv **items, size_t *n) {
    switch (v.k) {
    case JV_UNDEF: *items = NULL, *n = 0; return 0;
    case JV_LIST: *items = v.u.l->items, *n = v.u.l->n; return 0;
    case JV_DICT: *items = v.u.d->keys, *n = v.u.d->n; return 0;
    case JV_STR: {
        const jstr *s = v.u.s;
        jv *out = jalloc(c, (s->nchars ? s->nchars : 1) * sizeof(jv));
        if (!out || jcharge(c, s->nchars) < 0) return -1;
        size_t i = 0, k = 0;
        while (i < s->len) {
            size_t at = i;
            jutf8_next(s->s, &i);
            if (jv_str_trusted(c, s->s + at, i - at, &out[k++]) < 0) return -1;
        }
        *items = out, *n = k;
        return 0;
    }
    default: return jfail(c, "%s: '%s' object is not iterable", who, jv_type_name(v));
    }
}

/* jinja2's object_type_repr, for "'dict object' has no attribute 'x'". */
static const char *obj_repr(jv v) {
    switch (v.k) {
    case JV_NONE: return "None";
    case JV_DICT: return "dict object";
    case JV_LIST: return v.u.l->tuple ? "tuple object" : "list object";
    case JV_STR: return "str object";
    case JV_INT: return "int object";
    case JV_FLOAT: return "float object";
    case JV_BOOL: return "bool object";
    case JV_NS: return "Namespace object";
    default: return "object";
    }
}

static int missing(jctx *c, jv obj, jv key, jv *out) {
    jbuf b;
    jbuf_init(&b, c);
    if (jbuf_printf(&b, "'%s' has no attribute ", obj_repr(obj)) < 0 || jv_write_repr(&b, key) < 0) {
        jbuf_free(&b);
        return -1;
    }
    jv s;
    if (jbuf_to_str(&b, &s) < 0) return -1;
    *out = jv_undef(s.u.s->s);
    return 0;
}

int jb_getitem(jctx *c, jv obj, jv key, jv *out) {
    if (obj.k == JV_UNDEF) return jv_undef_fail(c, obj);
    if (obj.k == JV_DICT || obj.k == JV_NS) {
        const jv *v = jv_dict_get(&obj, key);
        if (v) {
            *out = *v;
            return 0;
        }
    } else if ((obj.k == JV_LIST || obj.k == JV_STR) && (key.k == JV_INT || key.k == JV_BOOL)) {
        int64_t i = key.k == JV_INT ? key.u.i : key.u.b;
        int64_t n = obj.k == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)obj.u.s->nchars;
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
            if (obj.k == JV_LIST) {
                *out = obj.u.l->items[i];
                return 0;
            }
            size_t b0 = jutf8_offset(obj.u.s, (size_t)i), b1 = b0;
            jutf8_next(obj.u.s->s, &b1);
            return jv_str_trusted(c, obj.u.s->s + b0, b1 - b0, out);
        }
    }
    if (key.k == JV_STR) {
        int r = jb_method_lookup(c, obj, key.u.s->s, out);
        if (r != -2) return r;
    }
    return missing(c, obj, key, out);
}

int jb_attrpath(jctx *c, jv item, jv attr, const jv *dflt, jv *out) {
    if (attr.k != JV_STR) {
        if (jb_getitem(c, item, attr, out) < 0) return -1;
    } else {
        const jstr *s = attr.u.s;
        size_t i = 0;
        do {
            size_t j = i;
            while (j < s->len && s->s[j] != '.') j++;
            jv part;
            int digits = j > i;
            int64_t num = 0;
            for (size_t k = i; k < j && digits; k++) {
                if (s->s[k] < '0' || s->s[k] > '9' || num > (INT64_MAX - 9) / 10) digits = 0;
                else num = num * 10 + (s->s[k] - '0');
            }
            if (digits) part = jv_int(num);
            else if (jv_str_trusted(c, s->s + i, j - i, &part) < 0) return -1;
            if (jb_getitem(c, item, part, &item) < 0) return -1;
            if (dflt && item.k == JV_UNDEF) item = *dflt;
            i = j + 1;
        } while (i <= s->len);
        *out = item;
        return 0;
    }
    if (dflt && out->k == JV_UNDEF) *out = *dflt;
    return 0;
}

int jb_ignore_case(jctx *c, jv v, jv *out) {
    if (v.k != JV_STR) {
        *out = v;
        return 0;
    }
    return jb_s_lower(c, v.u.s, out);
}

static int sort_rec(jctx *c, jv *items, jv *keys, jv *ti, jv *tk, size_t lo, size_t hi, int rev) {
    if (hi - lo < 2) return 0;
    size_t mid = lo + (hi - lo) / 2;
    if (sort_rec(c, items, keys, ti, tk, lo, mid, rev) < 0 || sort_rec(c, items, keys, ti, tk, mid, hi, rev) < 0)
        return -1;
    size_t i = lo, j = mid, k = lo;
    while (i < mid && j < hi) {
        int r;
        if (jcharge(c, 1) < 0) return -1;
        /* Take from the right half only when strictly before: keeps the sort stable, and a
         * reversed sort stays stable as Python's is. */
        if (rev ? jv_compare(c, keys[i], keys[j], &r) : jv_compare(c, keys[j], keys[i], &r)) return -1;
        size_t from = r < 0 ? j++ : i++;
        ti[k] = items[from];
        tk[k++] = keys[from];
    }
    for (; i < mid; i++, k++) ti[k] = items[i], tk[k] = keys[i];
    for (; j < hi; j++, k++) ti[k] = items[j], tk[k] = keys[j];
    memcpy(items + lo, ti + lo, (hi - lo) * sizeof(jv));
    memcpy(keys + lo, tk + lo, (hi - lo) * sizeof(jv));
    return 0;
}

int jb_sort(jctx *c, jv *items, jv *keys, size_t n, int reverse) {
    if (n < 2) return 0;
    jv *tmp = jalloc(c, (keys ? 2 : 3) * n * sizeof(jv));
    if (!tmp) return -1;
    if (!keys) {
        keys = tmp + 2 * n;
        memcpy(keys, items, n * sizeof(jv));
    }
    return sort_rec(c, items, keys, tmp, tmp + n, 0, n, reverse);
}

int jb_str(jctx *c, jv v, const jstr **out) {
    jv s;
    if (jv_to_str(c, v, &s) < 0) return -1;
    *out = s.u.s;
    return 0;
}

int jb_int_arg(jctx *c, const char *who, jv v, int64_t *out) {
    if (v.k == JV_INT) *out = v.u.i;
    else if (v.k == JV_BOOL) *out = v.u.b;
    else if (v.k == JV_UNDEF) return jv_undef_fail(c, v);
    else return jfail(c, "%s: '%s' object cannot be interpreted as an integer", who, jv_type_name(v));
    return 0;
}

/* ---- tests --------------------------------------------------------------------------------- */

static int one_arg(jctx *c, const char *name, const jargs *a, jv *arg) {
    char who[64];
    snprintf(who, sizeof who, "test '%s'", name);
    static const char *const names[] = {"other"};
    unsigned have;
    if (jb_bind(c, who, a, names, 1, arg, &have) < 0) return -1;
    if (!have) return jfail(c, "%s: missing an argument", who);
    return 0;
}

static int num_mod(jctx *c, const char *name, jv v, jv m, int64_t want, int *out) {
    if (v.k == JV_UNDEF) return jv_undef_fail(c, v);
    if ((v.k != JV_INT && v.k != JV_BOOL && v.k != JV_FLOAT) || (m.k != JV_INT && m.k != JV_BOOL && m.k != JV_FLOAT))
        return jfail(c, "test '%s': unsupported operand type(s) for %%: '%s' and '%s'", name, jv_type_name(v),
                     jv_type_name(m));
    if (v.k == JV_FLOAT || m.k == JV_FLOAT) {
        double x = v.k == JV_FLOAT ? v.u.f : (double)(v.k == JV_INT ? v.u.i : v.u.b);
        double y = m.k == JV_FLOAT ? m.u.f : (double)(m.k == JV_INT ? m.u.i : m.u.b);
        if (y == 0) return jfail(c, "test '%s': float modulo by zero", name);
        double r = fmod(x, y);
        if (r != 0 && ((r < 0) != (y < 0))) r += y; /* Python's modulo takes the divisor's sign */
        *out = r == (double)want;
        return 0;
    }
    int64_t x = v.k == JV_INT ? v.u.i : v.u.b, y = m.k == JV_INT ? m.u.i : m.u.b;
    if (y == 0) return jfail(c, "test '%s': integer modulo by zero", name);
    int64_t r = (y == -1) ? 0 : x % y;
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    *out = r == want;
    return 0;
}

static int is_in(jctx *c, jv v, jv seq, int *out) {
    *out = 0;
    switch (seq.k) {
    case JV_STR:
        if (v.k != JV_STR)
            return jfail(c, "'in <string>' requires string as left operand, not %s", jv_type_name(v));
        *out = v.u.s->len == 0 ||
               jb_find(seq.u.s->s, seq.u.s->len, v.u.s->s, v.u.s->len) != NULL;
        return 0;
    case JV_DICT:
    case JV_LIST:
    case JV_UNDEF: {
        if (seq.k == JV_DICT) {
            *out = jv_dict_get(&seq, v) != NULL;
            return 0;
        }
        const jv *items;
        size_t n;
        if (jb_iter(c, "in", seq, &items, &n) < 0) return -1;
        for (size_t i = 0; i < n; i++) {
            if (jcharge(c, 1) < 0) return -1;
            if (jv_equal(items[i], v)) {
                *out = 1;
                break;
            }
        }
        return 0;
    }
    default: return jfail(c, "argument of type '%s' is not iterable", jv_type_name(seq));
    }
}

static const char *const k_tests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "escaped", "even", "false",
    "filter", "float", "ge", ">=", "gt", "greaterthan", ">", "in", "integer", "iterable", "le", "<=",
    "lower", "lt", "lessthan", "<", "mapping", "ne", "!=", "none", "number", "odd", "sameas", "sequence",
    "string", "test", "true", "undefined", "upper", NULL};

int jb_is_test(const char *name) {
    for (int i = 0; k_tests[i]; i++)
        if (!strcmp(k_tests[i], name)) return 1;
    return 0;
}

static int cmp_test(jctx *c, jv a, jv b, int *r) {
    /* Comparisons with == and != never fail in Python; the others go through jv_compare. */
    return jv_compare(c, a, b, r);
}

int jb_test(jctx *c, const char *name, jv v, const jargs *a, int *out) {
    jv arg;
    *out = 0;
#define IS(n) (!strcmp(name, n))
    int takes_arg = IS("divisibleby") || IS("eq") || IS("equalto") || IS("==") || IS("ne") || IS("!=") ||
                    IS("ge") || IS(">=") || IS("gt") || IS("greaterthan") || IS(">") || IS("le") ||
                    IS("<=") || IS("lt") || IS("lessthan") || IS("<") || IS("in") || IS("sameas");
    if (!jb_is_test(name)) return -2;
    if (takes_arg) {
        if (one_arg(c, name, a, &arg) < 0) return -1;
    } else {
        char who[64];
        snprintf(who, sizeof who, "test '%s'", name);
        if (jb_noargs(c, who, a) < 0) return -1;
    }
    if (IS("defined")) *out = v.k != JV_UNDEF;
    else if (IS("undefined")) *out = v.k == JV_UNDEF;
    else if (IS("none")) *out = v.k == JV_NONE;
    else if (IS("boolean")) *out = v.k == JV_BOOL;
    else if (IS("true")) *out = v.k == JV_BOOL && v.u.b;
    else if (IS("false")) *out = v.k == JV_BOOL && !v.u.b;
    else if (IS("integer")) *out = v.k == JV_INT;
    else if (IS("float")) *out = v.k == JV_FLOAT;
    else if (IS("number")) *out = v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL;
    else if (IS("string")) *out = v.k == JV_STR;
    else if (IS("mapping")) *out = v.k == JV_DICT;
    /* Undefined defines __len__ and __getitem__ (to fail), so jinja2 calls it a sequence. */
    else if (IS("sequence")) *out = v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT || v.k == JV_UNDEF;
    else if (IS("iterable"))
        *out = v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT || v.k == JV_UNDEF || v.k == JV_LOOP;
    else if (IS("callable"))
        *out = v.k == JV_FUNC || v.k == JV_BOUND || v.k == JV_MACRO || v.k == JV_LOOP || v.k == JV_UNDEF;
    else if (IS("escaped")) *out = 0;
    else if (IS("filter")) *out = v.k == JV_STR && jb_is_filter(v.u.s->s);
    else if (IS("test")) *out = v.k == JV_STR && jb_is_test(v.u.s->s);
    else if (IS("lower") || IS("upper")) {
        const jstr *s;
        if (jb_str(c, v, &s) < 0) return -1;
        *out = IS("lower") ? jb_s_islower(s) : jb_s_isupper(s);
    } else if (IS("odd")) return num_mod(c, name, v, jv_int(2), 1, out);
    else if (IS("even")) return num_mod(c, name, v, jv_int(2), 0, out);
    else if (IS("divisibleby")) return num_mod(c, name, v, arg, 0, out);
    else if (IS("eq") || IS("equalto") || IS("==")) *out = jv_equal(v, arg);
    else if (IS("ne") || IS("!=")) *out = !jv_equal(v, arg);
    else if (IS("in")) return is_in(c, v, arg, out);
    else if (IS("sameas")) {
        /* `is`: singletons by value, containers by identity; CPython caches small ints. */
        if (v.k != arg.k) *out = 0;
        else if (v.k == JV_NONE) *out = 1;
        else if (v.k == JV_BOOL) *out = v.u.b == arg.u.b;
        else if (v.k == JV_INT) *out = v.u.i == arg.u.i && v.u.i >= -5 && v.u.i <= 256;
        else if (v.k == JV_FLOAT || v.k == JV_UNDEF) *out = 0;
        else *out = v.u.p == arg.u.p;
    } else {
        int r;
        if (cmp_test(c, v, arg, &r) < 0) return -1;
        if (IS("ge") || IS(">=")) *out = r >= 0;
        else if (IS("gt") || IS("greaterthan") || IS(">")) *out = r > 0;
        else if (IS("le") || IS("<=")) *out = r <= 0;
        else *out = r < 0;
        /* NaN is neither smaller nor greater nor equal. */
        if ((v.k == JV_FLOAT && isnan(v.u.f)) || (arg.k == JV_FLOAT && isnan(arg.u.f))) *out = 0;
    }
#undef IS
    return 0;
}

/* ---- globals ------------------------------------------------------------------------------- */

static const char *const k_globals[] = {"range", "namespace", "dict", "raise_exception", "strftime_now", NULL};

int jb_global(jctx *c, const char *name, jv *out) {
    (void)c;
    for (int i = 0; k_globals[i]; i++)
        if (!strcmp(k_globals[i], name)) {
            *out = jv_none();
            out->k = JV_FUNC;
            out->u.fn = k_globals[i];
            return 0;
        }
    return -2;
}

#define MAX_RANGE 100000

static int g_range(jctx *c, const jargs *a, jv *out) {
    if (a->nk) return jfail(c, "range() takes no keyword arguments");
    if (a->n < 1 || a->n > 3) return jfail(c, "range expected at least 1 argument, got %d", a->n);
    int64_t v[3] = {0, 0, 1};
    for (int i = 0; i < a->n; i++)
        if (jb_int_arg(c, "range()", a->pos[i], &v[a->n == 1 ? 1 : i]) < 0) return -1;
    int64_t start = v[0], stop = v[1], step = v[2];
    if (step == 0) return jfail(c, "range() arg 3 must not be zero");
    /* Count in wide arithmetic: start and stop may be anywhere in int64. */
    long double span = step > 0 ? (long double)stop - start : (long double)start - stop;
    long double st = step > 0 ? (long double)step : -(long double)step;
    long double cnt = span <= 0 ? 0 : floorl((span - 1) / st) + 1;
    if (cnt > MAX_RANGE)
        return jfail(c, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
    size_t n = (size_t)cnt;
    if (jcharge(c, n) < 0 || jv_list(c, n, NULL, 0, out) < 0) return -1;
    for (size_t i = 0; i < n; i++) out->u.l->items[i] = jv_int(start + (int64_t)i * step);
    return 0;
}

/* dict(*args, **kwargs): a mapping or an iterable of pairs, then the keywords. */
static int build_dict(jctx *c, const char *who, const jargs *a, jv *out) {
    if (a->n > 1) return jfail(c, "%s expected at most 1 argument, got %d", who, a->n);
    if (jv_dict_new(c, 4, out) < 0) return -1;
    if (a->n == 1) {
        jv src = a->pos[0];
        if (src.k == JV_DICT || src.k == JV_NS) {
            for (size_t i = 0; i < src.u.d->n; i++)
                if (jcharge(c, 1) < 0 || jv_dict_set(c, out, src.u.d->keys[i], src.u.d->vals[i]) < 0) return -1;
        } else {
            const jv *items;
            size_t n;
            if (jb_iter(c, who, src, &items, &n) < 0) return -1;
            for (size_t i = 0; i < n; i++) {
                jv p = items[i];
                size_t pn = p.k == JV_LIST ? p.u.l->n : p.k == JV_STR ? p.u.s->nchars : 0;
                if (p.k != JV_LIST && p.k != JV_STR)
                    return jfail(c, "cannot convert dictionary update sequence element #%zu to a sequence", i);
                if (pn != 2)
                    return jfail(c, "dictionary update sequence element #%zu has length %zu; 2 is required", i, pn);
                const jv *kv;
                size_t kn;
                if (jcharge(c, 1) < 0 || jb_iter(c, who, p, &kv, &kn) < 0 || jv_dict_set(c, out, kv[0], kv[1]) < 0)
                    return -1;
            }
        }
    }
    for (int k = 0; k < a->nk; k++) {
        jv key;
        if (jv_cstr(c, a->kname[k], &key) < 0 || jv_dict_set(c, out, key, a->kval[k]) < 0) return -1;
    }
    return 0;
}

static int g_namespace(jctx *c, const jargs *a, jv *out) {
    jv d;
    if (build_dict(c, "namespace", a, &d) < 0) return -1;
    for (size_t i = 0; i < d.u.d->n; i++) {
        jv k = d.u.d->keys[i];
        if (k.k == JV_STR && k.u.s->s[0] == '_') {
            jbuf b;
            jbuf_init(&b, c);
            if (jv_write_repr(&b, k) < 0) {
                jbuf_free(&b);
                return -1;
            }
            jfail(c, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got %s. "
                     "Please rename the attribute.", b.p);
            jbuf_free(&b);
            return -1;
        }
    }
    *out = d;
    out->k = JV_NS;
    return 0;
}

static int g_strftime(jctx *c, const jargs *a, jv *out) {
    static const char *const names[] = {"format"};
    jv f;
    unsigned have;
    if (jb_bind(c, "strftime_now()", a, names, 1, &f, &have) < 0) return -1;
    if (!have) return jfail(c, "strftime_now() missing 1 required positional argument: 'format'");
    if (f.k != JV_STR) return jfail(c, "strftime() argument 1 must be str, not %s", jv_type_name(f));
    const jstr *fmt = f.u.s;
    if (memchr(fmt->s, 0, fmt->len)) return jfail(c, "embedded null character");
    if (fmt->len > 4096) return jfail_st(c, TS_ERR_UNSUPPORTED, "strftime_now(): format longer than 4096 bytes");
    if (!fmt->len) return jv_str_trusted(c, "", 0, out);
    struct tm tm;
    time_t t = (time_t)c->now;
    if (!gmtime_r(&t, &tm)) return jfail(c, "strftime_now(): time out of range");
    /* strftime returns 0 both for "no room" and for an empty result (e.g. "%p" in some
     * locales); a trailing marker tells them apart, and the room grows a bounded number of
     * times (no conversion expands one format byte to more than a few dozen). */
    size_t fl = fmt->len;
    char *f2 = jalloc(c, fl + 2);
    if (!f2) return -1;
    memcpy(f2, fmt->s, fl);
    f2[fl] = 'x';
    f2[fl + 1] = 0;
    for (size_t cap = 256 + 8 * fl; cap <= 64 * (fl + 16); cap *= 4) {
        char *buf = jalloc(c, cap);
        if (!buf) return -1;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        size_t n = strftime(buf, cap, f2, &tm); /* the template's format, as Python passes it on */
#pragma GCC diagnostic pop
        if (n > 0) {
            if (jutf8_valid(buf, n - 1) != n - 1) return jfail(c, "strftime_now(): result is not UTF-8");
            return jv_str_trusted(c, buf, n - 1, out);
        }
    }
    return jfail_st(c, TS_ERR_UNSUPPORTED, "strftime_now(): result too long");
}

int jb_call_func(jctx *c, const char *fn, const jargs *a, jv *out) {
    if (!strcmp(fn, "range")) return g_range(c, a, out);
    if (!strcmp(fn, "namespace")) return g_namespace(c, a, out);
    if (!strcmp(fn, "dict")) return build_dict(c, "dict", a, out);
    if (!strcmp(fn, "strftime_now")) return g_strftime(c, a, out);
    if (!strcmp(fn, "raise_exception")) {
        static const char *const names[] = {"message"};
        jv m;
        unsigned have;
        if (jb_bind(c, "raise_exception()", a, names, 1, &m, &have) < 0) return -1;
        if (!have) return jfail(c, "raise_exception() missing 1 required positional argument: 'message'");
        const jstr *s;
        if (jb_str(c, m, &s) < 0) return -1;
        return jfail_st(c, TS_ERR_ARG, "%s", s->s);
    }
    return jfail(c, "'%s' is not callable", fn);
}

/* ---- methods of dicts and lists ------------------------------------------------------------ */

static const char *const k_dict_methods[] = {"items", "keys", "values", "get", "copy", NULL};
static const char *const k_dict_unsafe[] = {"clear", "pop", "popitem", "setdefault", "update", NULL};
static const char *const k_list_methods[] = {"index", "count", "copy", NULL};
static const char *const k_list_unsafe[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse",
                                            "sort", NULL};

static int in_set(const char *const *set, const char *name) {
    for (int i = 0; set[i]; i++)
        if (!strcmp(set[i], name)) return 1;
    return 0;
}

int jb_method_lookup(jctx *c, jv self, const char *name, jv *out) {
    int ok = 0;
    if (self.k == JV_LIST && self.u.l->tuple == 2 && (!strcmp(name, "grouper") || !strcmp(name, "list"))) {
        *out = self.u.l->items[name[0] == 'l'];
        return 0;
    }
    if (self.k == JV_STR) ok = jb_str_has_method(name);
    else if (self.k == JV_DICT) {
        if (in_set(k_dict_unsafe, name))
            return jfail(c, "access to attribute '%s' of 'dict' object is unsafe.", name);
        ok = in_set(k_dict_methods, name);
    } else if (self.k == JV_LIST) {
        if (!self.u.l->tuple && in_set(k_list_unsafe, name))
            return jfail(c, "access to attribute '%s' of 'list' object is unsafe.", name);
        ok = in_set(k_list_methods, name) && !(self.u.l->tuple && !strcmp(name, "copy"));
    }
    if (!ok) return -2;
    jbound *m = jalloc(c, sizeof *m + sizeof(jv));
    if (!m) return -1;
    m->self = (jv *)(m + 1);
    *m->self = self;
    size_t nl = strlen(name);
    char *nm = jalloc(c, nl + 1);
    if (!nm) return -1;
    memcpy(nm, name, nl + 1);
    m->name = nm;
    *out = jv_none();
    out->k = JV_BOUND;
    out->u.bm = m;
    return 0;
}

/* Python's slice-index normalization for start/end arguments. */
static int64_t clamp_index(int64_t i, int64_t n) {
    if (i < 0) i += n;
    if (i < 0) i = 0;
    if (i > n) i = n;
    return i;
}

static int list_method(jctx *c, jv self, const char *name, const jargs *a, jv *out) {
    const jlist *l = self.u.l;
    char who[48];
    snprintf(who, sizeof who, "%s.%s()", l->tuple ? "tuple" : "list", name);
    if (!strcmp(name, "copy")) {
        if (jb_noargs(c, who, a) < 0) return -1;
        return jv_list(c, l->n, l->items, 0, out);
    }
    static const char *const names[] = {"value", "start", "stop"};
    jv v[3];
    unsigned have;
    if (a->nk) return jfail(c, "%s takes no keyword arguments", who);
    if (jb_bind(c, who, a, names, !strcmp(name, "count") ? 1 : 3, v, &have) < 0) return -1;
    if (!(have & 1)) return jfail(c, "%s takes at least 1 argument (0 given)", who);
    int64_t n = (int64_t)l->n, lo = 0, hi = n;
    if ((have & 2) && (jb_int_arg(c, who, v[1], &lo) < 0)) return -1;
    if ((have & 4) && (jb_int_arg(c, who, v[2], &hi) < 0)) return -1;
    lo = clamp_index(lo, n);
    hi = clamp_index(hi, n);
    int64_t cnt = 0;
    for (int64_t i = lo; i < hi; i++) {
        if (jcharge(c, 1) < 0) return -1;
        if (jv_equal(l->items[i], v[0])) {
            if (!strcmp(name, "index")) {
                *out = jv_int(i);
                return 0;
            }
            cnt++;
        }
    }
    if (!strcmp(name, "count")) {
        *out = jv_int(cnt);
        return 0;
    }
    return jfail(c, "%s.index(x): x not in %s", l->tuple ? "tuple" : "list", l->tuple ? "tuple" : "list");
}

static int dict_method(jctx *c, jv self, const char *name, const jargs *a, jv *out) {
    const jdict *d = self.u.d;
    char who[48];
    snprintf(who, sizeof who, "dict.%s()", name);
    if (!strcmp(name, "get")) {
        if (a->nk) return jfail(c, "%s takes no keyword arguments", who);
        if (a->n < 1 || a->n > 2) return jfail(c, "get expected 1 or 2 arguments, got %d", a->n);
        const jv *v = jv_dict_get(&self, a->pos[0]);
        *out = v ? *v : a->n == 2 ? a->pos[1] : jv_none();
        return 0;
    }
    if (jb_noargs(c, who, a) < 0) return -1;
    if (!strcmp(name, "copy")) {
        if (jv_dict_new(c, d->n, out) < 0) return -1;
        for (size_t i = 0; i < d->n; i++)
            if (jcharge(c, 1) < 0 || jv_dict_set(c, out, d->keys[i], d->vals[i]) < 0) return -1;
        return 0;
    }
    if (jcharge(c, d->n) < 0 || jv_list(c, d->n, NULL, 0, out) < 0) return -1;
    for (size_t i = 0; i < d->n; i++) {
        jv *slot = &out->u.l->items[i];
        if (!strcmp(name, "keys")) *slot = d->keys[i];
        else if (!strcmp(name, "values")) *slot = d->vals[i];
        else {
            jv kv[2] = {d->keys[i], d->vals[i]};
            if (jv_list(c, 2, kv, 1, slot) < 0) return -1;
        }
    }
    return 0;
}

int jb_call_bound(jctx *c, const jbound *m, const jargs *a, jv *out) {
    jv self = *m->self;
    switch (self.k) {
    case JV_STR: {
        int r = jb_str_method(c, self, m->name, a, out);
        if (r == -2) return jfail(c, "'str' object has no attribute '%s'", m->name);
        return r;
    }
    case JV_LIST: return list_method(c, self, m->name, a, out);
    case JV_DICT: return dict_method(c, self, m->name, a, out);
    default: return jfail(c, "'%s' object has no attribute '%s'", jv_type_name(self), m->name);
    }
}
