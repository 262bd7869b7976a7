/* The render context (arena, budgets, error formatting) and the Python semantics of template
 * values: equality, ordering, truthiness, str()/repr() and json.dumps, each written to match
 * what CPython prints byte for byte, since chat-template output is compared to transformers'. */
#include "runtime/jinja/value.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "runtime/jinja/jinja.h"

struct jarena_block {
    jarena_block *next;
    size_t cap, used, pad; /* pad: keeps data 16-byte aligned after a 16-aligned malloc */
    unsigned char data[];
};

#define JARENA_BLOCK ((size_t)64 << 10)
/* Python's own limit is ~1000 frames; values deeper than this can only come from a hostile
 * template or input, and recursing further would risk the C stack. */
#define JV_MAX_NEST 1000

void jctx_init(jctx *c, ts_error *err, const char *what, size_t max_bytes, uint64_t max_steps,
               int max_depth, int64_t now) {
    memset(c, 0, sizeof *c);
    c->err = err;
    c->status = TS_OK;
    c->max_bytes = max_bytes ? max_bytes : TS_JINJA_DEFAULT_BYTES;
    c->max_steps = max_steps ? max_steps : TS_JINJA_DEFAULT_STEPS;
    c->max_depth = max_depth > 0 ? max_depth : TS_JINJA_DEFAULT_DEPTH;
    c->now = now;
    c->what = what ? what : "template";
}

void jctx_free(jctx *c) {
    jarena_block *b = c->blocks;
    while (b) {
        jarena_block *n = b->next;
        free(b);
        b = n;
    }
    c->blocks = NULL;
    c->used_bytes = 0;
}

static int vfail(jctx *c, ts_status st, const char *fmt, va_list ap) {
    /* The first error is the cause; later ones are usually its consequences. */
    if (c->status != TS_OK) return -1;
    char msg[TS_ERROR_LEN];
    vsnprintf(msg, sizeof msg, fmt, ap);
    c->status = st;
    ts_fail(c->err, st, "%s:%d:%d: %s", c->what, c->line, c->col, msg);
    return -1;
}

int jfail(jctx *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(c, TS_ERR_FORMAT, fmt, ap);
    va_end(ap);
    return -1;
}

int jfail_st(jctx *c, ts_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(c, st, fmt, ap);
    va_end(ap);
    return -1;
}

static int over_budget(jctx *c) {
    return jfail_st(c, TS_ERR_UNSUPPORTED, "template exceeded its memory budget of %zu bytes",
                    c->max_bytes);
}

/* Reserves n bytes of the budget; -1 with the error set when it would be exceeded. */
static int budget_take(jctx *c, size_t n) {
    if (n > c->max_bytes || c->used_bytes > c->max_bytes - n) return over_budget(c);
    c->used_bytes += n;
    return 0;
}

void *jalloc(jctx *c, size_t n) {
    if (c->status != TS_OK) return NULL;
    if (n == 0) n = 1;
    if (n > c->max_bytes) {
        over_budget(c);
        return NULL;
    }
    n = (n + 15) & ~(size_t)15;
    jarena_block *b = c->blocks;
    if (b && b->cap - b->used >= n) {
        void *p = b->data + b->used;
        b->used += n;
        return p;
    }
    /* Big requests get a block of their own, placed behind the current one so the space left
     * in the current block is not abandoned. */
    size_t cap = n > JARENA_BLOCK / 4 ? n : JARENA_BLOCK;
    if (budget_take(c, cap + sizeof(jarena_block)) < 0) return NULL;
    jarena_block *nb = calloc(1, sizeof(jarena_block) + cap);
    if (!nb) {
        c->used_bytes -= cap + sizeof(jarena_block);
        jfail_st(c, TS_ERR_NOMEM, "out of memory (%zu bytes)", cap);
        return NULL;
    }
    nb->cap = cap;
    nb->used = n;
    if (b && cap != JARENA_BLOCK) {
        nb->next = b->next;
        b->next = nb;
    } else {
        nb->next = b;
        c->blocks = nb;
    }
    return nb->data;
}

int jcharge(jctx *c, uint64_t n) {
    if (c->status != TS_OK) return -1;
    if (n > c->max_steps || c->steps > c->max_steps - n)
        return jfail_st(c, TS_ERR_UNSUPPORTED, "template exceeded its budget of %" PRIu64 " steps",
                        c->max_steps);
    c->steps += n;
    return 0;
}

/* ---- jbuf ---------------------------------------------------------------------------------- */

void jbuf_init(jbuf *b, jctx *c) {
    b->c = c;
    b->p = NULL;
    b->n = b->cap = 0;
}

void jbuf_free(jbuf *b) {
    if (b->p) {
        b->c->used_bytes -= b->cap;
        free(b->p);
    }
    b->p = NULL;
    b->n = b->cap = 0;
}

static int jbuf_reserve(jbuf *b, size_t extra) {
    jctx *c = b->c;
    if (c->status != TS_OK) return -1;
    if (extra > SIZE_MAX / 2 - b->n) return over_budget(c);
    size_t need = b->n + extra + 1; /* room for a NUL */
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap * 2 : 256;
    if (cap < need) cap = need;
    /* Near the budget, take what is left of it (once), so the limit is the budget and not the
     * power of two below it. */
    size_t left = c->max_bytes - c->used_bytes;
    if (cap - b->cap > left && need - b->cap <= left) cap = b->cap + left;
    if (budget_take(c, cap - b->cap) < 0) return -1;
    char *p = realloc(b->p, cap);
    if (!p) {
        c->used_bytes -= cap - b->cap;
        return jfail_st(c, TS_ERR_NOMEM, "out of memory (%zu bytes)", cap);
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

int jbuf_put(jbuf *b, const char *s, size_t n) {
    if (jbuf_reserve(b, n) < 0) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int jbuf_puts(jbuf *b, const char *s) { return jbuf_put(b, s, strlen(s)); }

int jbuf_printf(jbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return jfail(b->c, "internal formatting error");
    if ((size_t)k < sizeof tmp) return jbuf_put(b, tmp, (size_t)k);
    if (jbuf_reserve(b, (size_t)k) < 0) return -1;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
    return 0;
}

int jbuf_to_str(jbuf *b, jv *out) {
    int r = jv_str_trusted(b->c, b->p ? b->p : "", b->n, out);
    jbuf_free(b);
    return r;
}

/* ---- UTF-8 --------------------------------------------------------------------------------- */

size_t jutf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp, min;
        if (c >= 0xC2 && c <= 0xDF) k = 1, cp = c & 0x1F, min = 0x80;
        else if (c >= 0xE0 && c <= 0xEF) k = 2, cp = c & 0x0F, min = 0x800;
        else if (c >= 0xF0 && c <= 0xF4) k = 3, cp = c & 0x07, min = 0x10000;
        else return i;
        if (n - i <= k) return i;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += k + 1;
    }
    return n;
}

size_t jutf8_count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

size_t jutf8_offset(const jstr *s, size_t cp) {
    if (s->nchars == s->len) return cp < s->len ? cp : s->len;
    size_t i = 0;
    while (i < s->len && cp > 0) {
        i++;
        while (i < s->len && ((unsigned char)s->s[i] & 0xC0) == 0x80) i++;
        cp--;
    }
    return i;
}

uint32_t jutf8_next(const char *str, size_t *i) {
    const unsigned char *s = (const unsigned char *)str + *i;
    uint32_t c = s[0];
    if (c < 0x80) {
        *i += 1;
        return c;
    }
    if (c < 0xE0) {
        *i += 2;
        return ((c & 0x1F) << 6) | (s[1] & 0x3F);
    }
    if (c < 0xF0) {
        *i += 3;
        return ((c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    }
    *i += 4;
    return ((c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
           (s[3] & 0x3F);
}


/* ---- constructors -------------------------------------------------------------------------- */

int jv_str_trusted(jctx *c, const char *s, size_t n, jv *out) {
    if (n > SIZE_MAX - sizeof(jstr) - 1) return over_budget(c);
    jstr *js = jalloc(c, sizeof(jstr) + n + 1);
    if (!js) return -1;
    js->len = n;
    js->nchars = jutf8_count(s, n);
    if (n) memcpy(js->s, s, n);
    js->s[n] = 0;
    *out = jv_none();
    out->k = JV_STR;
    out->u.s = js;
    return 0;
}

int jv_str(jctx *c, const char *s, size_t n, jv *out) {
    size_t ok = jutf8_valid(s, n);
    if (ok != n) return jfail(c, "invalid UTF-8 in a string at byte %zu", ok);
    return jv_str_trusted(c, s, n, out);
}

int jv_cstr(jctx *c, const char *s, jv *out) { return jv_str(c, s, strlen(s), out); }

int jv_list(jctx *c, size_t n, const jv *items, int tuple, jv *out) {
    if (n > (SIZE_MAX - sizeof(jlist)) / sizeof(jv)) return over_budget(c);
    jlist *l = jalloc(c, sizeof(jlist) + n * sizeof(jv));
    if (!l) return -1;
    l->n = n;
    l->tuple = tuple;
    l->items = (jv *)(l + 1);
    if (items && n) memcpy(l->items, items, n * sizeof(jv));
    *out = jv_none();
    out->k = JV_LIST;
    out->u.l = l;
    return 0;
}

static int dict_alloc(jctx *c, size_t cap, jv_kind k, jv *out) {
    if (cap < 4) cap = 4;
    if (cap > SIZE_MAX / (4 * sizeof(jv))) return over_budget(c);
    jdict *d = jalloc(c, sizeof(jdict));
    if (!d) return -1;
    d->keys = jalloc(c, cap * sizeof(jv));
    d->vals = jalloc(c, cap * sizeof(jv));
    if (!d->keys || !d->vals) return -1;
    d->cap = cap;
    *out = jv_none();
    out->k = k;
    out->u.d = d;
    return 0;
}

int jv_dict_new(jctx *c, size_t cap, jv *out) { return dict_alloc(c, cap, JV_DICT, out); }
int jv_ns_new(jctx *c, jv *out) { return dict_alloc(c, 4, JV_NS, out); }

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* Hash consistent with jv_equal (1 == 1.0 == True hash alike); 0 = unhashable. */
static int jv_hash(jv v, uint64_t *h) {
    switch (v.k) {
    case JV_UNDEF: *h = 0x75; return 1;
    case JV_NONE: *h = 0x9e3779b9; return 1;
    case JV_BOOL: *h = mix64((uint64_t)v.u.b); return 1;
    case JV_INT: *h = mix64((uint64_t)v.u.i); return 1;
    case JV_FLOAT: {
        double f = v.u.f;
        if (f == floor(f) && f >= -9.2e18 && f <= 9.2e18) *h = mix64((uint64_t)(int64_t)f);
        else {
            uint64_t bits;
            memcpy(&bits, &f, sizeof bits);
            *h = mix64(bits ^ 0x5555);
        }
        return 1;
    }
    case JV_STR: {
        uint64_t x = 1469598103934665603ull;
        for (size_t i = 0; i < v.u.s->len; i++) x = (x ^ (unsigned char)v.u.s->s[i]) * 1099511628211ull;
        *h = mix64(x);
        return 1;
    }
    case JV_LIST: {
        if (!v.u.l->tuple) return 0;
        uint64_t x = 0x345678;
        for (size_t i = 0; i < v.u.l->n; i++) {
            uint64_t e;
            if (!jv_hash(v.u.l->items[i], &e)) return 0;
            x = mix64(x ^ e) + i;
        }
        *h = x;
        return 1;
    }
    case JV_DICT: return 0;
    default: *h = mix64((uint64_t)(uintptr_t)v.u.p); return 1;
    }
}

static void hidx_insert(jdict *d, size_t entry, uint64_t h) {
    size_t m = d->hcap - 1, i = (size_t)h & m;
    while (d->hidx[i]) i = (i + 1) & m;
    d->hidx[i] = (uint32_t)(entry + 1);
}

static int hidx_build(jctx *c, jdict *d, size_t hcap) {
    uint32_t *idx = jalloc(c, hcap * sizeof(uint32_t));
    if (!idx) return -1;
    d->hidx = idx;
    d->hcap = hcap;
    for (size_t e = 0; e < d->n; e++) {
        uint64_t h = 0;
        jv_hash(d->keys[e], &h);
        hidx_insert(d, e, h);
    }
    return 0;
}

static const jv *dict_find(const jdict *d, jv key, size_t *pos) {
    if (!d->hidx) {
        for (size_t i = 0; i < d->n; i++)
            if (jv_equal(d->keys[i], key)) {
                if (pos) *pos = i;
                return &d->vals[i];
            }
        return NULL;
    }
    uint64_t h;
    if (!jv_hash(key, &h)) return NULL;
    size_t m = d->hcap - 1;
    for (size_t i = (size_t)h & m; d->hidx[i]; i = (i + 1) & m) {
        size_t e = d->hidx[i] - 1;
        if (jv_equal(d->keys[e], key)) {
            if (pos) *pos = e;
            return &d->vals[e];
        }
    }
    return NULL;
}

int jv_dict_set(jctx *c, jv *dv, jv key, jv val) {
    jdict *d = dv->u.d;
    uint64_t h;
    if (!jv_hash(key, &h)) return jfail(c, "unhashable type: '%s'", jv_type_name(key));
    size_t pos;
    if (dict_find(d, key, &pos)) {
        d->vals[pos] = val;
        return 0;
    }
    if (d->n >= UINT32_MAX - 1) return over_budget(c);
    if (d->n == d->cap) {
        size_t cap = d->cap * 2;
        jv *k = jalloc(c, cap * sizeof(jv)), *v = jalloc(c, cap * sizeof(jv));
        if (!k || !v) return -1;
        memcpy(k, d->keys, d->n * sizeof(jv));
        memcpy(v, d->vals, d->n * sizeof(jv));
        d->keys = k;
        d->vals = v;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    if (d->hidx && d->n * 2 <= d->hcap) hidx_insert(d, d->n - 1, h);
    else if (d->n > 16) {
        size_t hcap = 64;
        while (hcap < d->n * 2) hcap *= 2;
        if (hidx_build(c, d, hcap) < 0) return -1;
    }
    return 0;
}

const jv *jv_dict_get(const jv *d, jv key) {
    if (d->k != JV_DICT && d->k != JV_NS) return NULL;
    return dict_find(d->u.d, key, NULL);
}

const jv *jv_dict_gets(const jv *d, const char *key) {
    if (d->k != JV_DICT && d->k != JV_NS) return NULL;
    size_t n = strlen(key);
    _Alignas(jstr) char tmpbuf[sizeof(jstr) + 64];
    jstr *h = (jstr *)tmpbuf;
    if (n >= 64) {
        const jdict *dd = d->u.d;
        for (size_t i = 0; i < dd->n; i++)
            if (dd->keys[i].k == JV_STR && dd->keys[i].u.s->len == n && !memcmp(dd->keys[i].u.s->s, key, n))
                return &dd->vals[i];
        return NULL;
    }
    h->len = n;
    h->nchars = jutf8_count(key, n);
    memcpy(h->s, key, n + 1);
    jv k = jv_none();
    k.k = JV_STR;
    k.u.s = h;
    return dict_find(d->u.d, k, NULL);
}

/* ---- Python semantics ---------------------------------------------------------------------- */

const char *jv_type_name(jv v) {
    switch (v.k) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.u.l->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_FUNC: return "function";
    case JV_BOUND: return "builtin_function_or_method";
    case JV_MACRO: return "Macro";
    case JV_LOOP: return "LoopContext";
    }
    return "object";
}

int jv_undef_fail(jctx *c, jv v) {
    if (v.k == JV_UNDEF && v.hint) return jfail(c, "%s", v.hint);
    return jfail(c, "an undefined value was used");
}

int jv_truthy(jv v) {
    switch (v.k) {
    case JV_UNDEF:
    case JV_NONE: return 0;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

static int is_num(jv v) { return v.k == JV_INT || v.k == JV_BOOL || v.k == JV_FLOAT; }

/* a (int) vs b (double), exactly as Python compares them: -1/0/1, 2 when b is NaN. */
static int cmp_int_float(int64_t a, double b) {
    if (isnan(b)) return 2;
    if (b >= 9223372036854775808.0) return -1;
    if (b < -9223372036854775808.0) return 1;
    double fl = floor(b);
    int64_t bi = (int64_t)fl;
    if (a < bi) return -1;
    if (a > bi) return 1;
    return fl == b ? 0 : -1; /* a == floor(b) < b when b has a fraction */
}

/* Numeric compare of two numbers: -1/0/1, 2 for unordered (NaN). */
static int num_cmp(jv a, jv b) {
    if (a.k != JV_FLOAT && b.k != JV_FLOAT) {
        int64_t x = a.k == JV_BOOL ? a.u.b : a.u.i, y = b.k == JV_BOOL ? b.u.b : b.u.i;
        return x < y ? -1 : x > y;
    }
    if (a.k == JV_FLOAT && b.k == JV_FLOAT) {
        if (isnan(a.u.f) || isnan(b.u.f)) return 2;
        return a.u.f < b.u.f ? -1 : a.u.f > b.u.f;
    }
    if (a.k == JV_FLOAT) {
        int r = cmp_int_float(b.k == JV_BOOL ? b.u.b : b.u.i, a.u.f);
        return r == 2 ? 2 : -r;
    }
    return cmp_int_float(a.k == JV_BOOL ? a.u.b : a.u.i, b.u.f);
}

int jv_equal(jv a, jv b) {
    if (is_num(a) && is_num(b)) return num_cmp(a, b) == 0;
    if (a.k != b.k) return 0;
    switch (a.k) {
    case JV_UNDEF:
    case JV_NONE: return 1;
    case JV_STR: return a.u.s->len == b.u.s->len && !memcmp(a.u.s->s, b.u.s->s, a.u.s->len);
    case JV_LIST:
        if (!a.u.l->tuple != !b.u.l->tuple || a.u.l->n != b.u.l->n) return 0;
        if (a.u.l == b.u.l) return 1;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_equal(a.u.l->items[i], b.u.l->items[i])) return 0;
        return 1;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        if (a.u.d == b.u.d) return 1;
        for (size_t i = 0; i < a.u.d->n; i++) {
            const jv *o = dict_find(b.u.d, a.u.d->keys[i], NULL);
            if (!o || !jv_equal(a.u.d->vals[i], *o)) return 0;
        }
        return 1;
    case JV_FUNC: return !strcmp(a.u.fn, b.u.fn);
    case JV_BOUND:
        return !strcmp(a.u.bm->name, b.u.bm->name) && a.u.bm->self->k == b.u.bm->self->k &&
               jv_equal(*a.u.bm->self, *b.u.bm->self);
    default: return a.u.p == b.u.p; /* namespaces, macros, loops: identity */
    }
}

static int unorderable(jctx *c, jv a, jv b) {
    if (a.k == JV_UNDEF) return jv_undef_fail(c, a);
    if (b.k == JV_UNDEF) return jv_undef_fail(c, b);
    return jfail(c, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a),
                 jv_type_name(b));
}

static int compare_at(jctx *c, jv a, jv b, int *out, int depth) {
    if (is_num(a) && is_num(b)) {
        int r = num_cmp(a, b);
        *out = r == 2 ? 0 : r;
        return 0;
    }
    if (a.k == JV_STR && b.k == JV_STR) {
        /* UTF-8 byte order is code point order, which is Python's str order. */
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int r = memcmp(a.u.s->s, b.u.s->s, n);
        if (!r) r = a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
        *out = r < 0 ? -1 : r > 0;
        return 0;
    }
    if (a.k == JV_LIST && b.k == JV_LIST && !a.u.l->tuple == !b.u.l->tuple) {
        if (depth > JV_MAX_NEST)
            return jfail_st(c, TS_ERR_UNSUPPORTED, "maximum recursion depth exceeded in comparison");
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_equal(a.u.l->items[i], b.u.l->items[i])) continue;
            return compare_at(c, a.u.l->items[i], b.u.l->items[i], out, depth + 1);
        }
        *out = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
        return 0;
    }
    return unorderable(c, a, b);
}

int jv_compare(jctx *c, jv a, jv b, int *out) { return compare_at(c, a, b, out, 0); }

/* ---- str() and repr() ---------------------------------------------------------------------- */

int jv_float_repr(double f, char *buf) {
    if (isnan(f)) return (int)(strcpy(buf, "nan"), 3);
    if (isinf(f)) return f < 0 ? (int)(strcpy(buf, "-inf"), 4) : (int)(strcpy(buf, "inf"), 3);
    if (f == 0) return signbit(f) ? (int)(strcpy(buf, "-0.0"), 4) : (int)(strcpy(buf, "0.0"), 3);
    /* The shortest correctly rounded digit string that reads back as f is the one Python's
     * repr picks (the closest among the shortest); %e is exact in glibc. */
    char tmp[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* Pull the digits and exponent out without trusting the locale's decimal point. */
    char dig[24];
    int nd = 0, neg = 0, e = 0;
    const char *p = tmp;
    if (*p == '-') neg = 1, p++;
    for (; *p && *p != 'e' && *p != 'E'; p++)
        if (*p >= '0' && *p <= '9' && nd < 20) dig[nd++] = *p;
    if (*p) e = atoi(p + 1);
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    dig[nd] = 0;
    int decpt = e + 1, k = 0;
    if (neg) buf[k++] = '-';
    if (decpt <= -4 || decpt > 16) {
        buf[k++] = dig[0];
        if (nd > 1) {
            buf[k++] = '.';
            memcpy(buf + k, dig + 1, (size_t)nd - 1);
            k += nd - 1;
        }
        k += sprintf(buf + k, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    } else if (decpt <= 0) {
        buf[k++] = '0';
        buf[k++] = '.';
        for (int i = 0; i < -decpt; i++) buf[k++] = '0';
        memcpy(buf + k, dig, (size_t)nd);
        k += nd;
    } else if (decpt >= nd) {
        memcpy(buf + k, dig, (size_t)nd);
        k += nd;
        for (int i = nd; i < decpt; i++) buf[k++] = '0';
        buf[k++] = '.';
        buf[k++] = '0';
    } else {
        memcpy(buf + k, dig, (size_t)decpt);
        k += decpt;
        buf[k++] = '.';
        memcpy(buf + k, dig + decpt, (size_t)(nd - decpt));
        k += nd - decpt;
    }
    buf[k] = 0;
    return k;
}

/* Python's str.isprintable() for one code point, which decides what repr() escapes. */
static int py_printable(uint32_t cp) {
    if (cp < 0x20 || cp == 0x7f) return 0;
    if (cp < 0x7f) return 1;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return 0;
    default: return 1;
    }
}

static int write_str_repr(jbuf *b, const jstr *s) {
    int has_sq = memchr(s->s, '\'', s->len) != NULL, has_dq = memchr(s->s, '"', s->len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (jbuf_put(b, &q, 1) < 0) return -1;
    size_t i = 0, run = 0;
    while (i < s->len) {
        size_t at = i;
        uint32_t cp = jutf8_next(s->s, &i);
        char esc[12];
        int ne = 0;
        if (cp == (uint32_t)q || cp == '\\') esc[0] = '\\', esc[1] = (char)cp, ne = 2;
        else if (cp == '\n') ne = 2, memcpy(esc, "\\n", 2);
        else if (cp == '\r') ne = 2, memcpy(esc, "\\r", 2);
        else if (cp == '\t') ne = 2, memcpy(esc, "\\t", 2);
        else if (!py_printable(cp)) {
            if (cp <= 0xff) ne = snprintf(esc, sizeof esc, "\\x%02x", cp);
            else if (cp <= 0xffff) ne = snprintf(esc, sizeof esc, "\\u%04x", cp);
            else ne = snprintf(esc, sizeof esc, "\\U%08x", cp);
        }
        if (ne) {
            if (jbuf_put(b, s->s + run, at - run) < 0 || jbuf_put(b, esc, (size_t)ne) < 0) return -1;
            run = i;
        }
    }
    if (jbuf_put(b, s->s + run, s->len - run) < 0) return -1;
    return jbuf_put(b, &q, 1);
}

/* Namespaces being printed, innermost first: the only way a value can contain itself, which
 * Python prints as "{...}". */
typedef struct ns_stack {
    const jdict *d;
    const struct ns_stack *up;
} ns_stack;

static int write_repr_at(jbuf *b, jv v, int depth, const ns_stack *ns);

static int write_str_at(jbuf *b, jv v, int depth, const ns_stack *ns) {
    switch (v.k) {
    case JV_UNDEF: return 0;
    case JV_STR: return jbuf_put(b, v.u.s->s, v.u.s->len);
    default: return write_repr_at(b, v, depth, ns);
    }
}

static int write_repr_at(jbuf *b, jv v, int depth, const ns_stack *ns) {
    char num[48];
    if (depth > JV_MAX_NEST)
        return jfail_st(b->c, TS_ERR_UNSUPPORTED, "maximum recursion depth exceeded while getting the repr of an object");
    switch (v.k) {
    case JV_UNDEF: return jbuf_puts(b, "Undefined");
    case JV_NONE: return jbuf_puts(b, "None");
    case JV_BOOL: return jbuf_puts(b, v.u.b ? "True" : "False");
    case JV_INT: return jbuf_printf(b, "%" PRId64, v.u.i);
    case JV_FLOAT: return jbuf_put(b, num, (size_t)jv_float_repr(v.u.f, num));
    case JV_STR: return write_str_repr(b, v.u.s);
    case JV_LIST: {
        const jlist *l = v.u.l;
        if (jbuf_puts(b, l->tuple ? "(" : "[") < 0) return -1;
        for (size_t i = 0; i < l->n; i++) {
            if (jcharge(b->c, 1) < 0) return -1;
            if (i && jbuf_puts(b, ", ") < 0) return -1;
            if (write_repr_at(b, l->items[i], depth + 1, ns) < 0) return -1;
        }
        return jbuf_puts(b, l->tuple ? (l->n == 1 ? ",)" : ")") : "]");
    }
    case JV_NS:
    case JV_DICT: {
        const jdict *d = v.u.d;
        ns_stack here = {d, ns};
        if (v.k == JV_NS) {
            for (const ns_stack *s = ns; s; s = s->up)
                if (s->d == d) return jbuf_puts(b, "<Namespace {...}>");
            if (jbuf_puts(b, "<Namespace ") < 0) return -1;
            ns = &here;
        }
        if (jbuf_puts(b, "{") < 0) return -1;
        for (size_t i = 0; i < d->n; i++) {
            if (jcharge(b->c, 1) < 0) return -1;
            if (i && jbuf_puts(b, ", ") < 0) return -1;
            if (write_repr_at(b, d->keys[i], depth + 1, ns) < 0 || jbuf_puts(b, ": ") < 0 ||
                write_repr_at(b, d->vals[i], depth + 1, ns) < 0)
                return -1;
        }
        return jbuf_puts(b, v.k == JV_NS ? "}>" : "}");
    }
    case JV_FUNC: return jbuf_printf(b, "<function %s>", v.u.fn);
    case JV_BOUND:
        return jbuf_printf(b, "<built-in method %s of %s object>", v.u.bm->name, jv_type_name(*v.u.bm->self));
    case JV_MACRO: return jbuf_puts(b, "<Macro>");
    case JV_LOOP: return jbuf_puts(b, "<LoopContext>");
    }
    return 0;
}

int jv_write_str(jbuf *b, jv v) { return write_str_at(b, v, 0, NULL); }
int jv_write_repr(jbuf *b, jv v) { return write_repr_at(b, v, 0, NULL); }

int jv_to_str(jctx *c, jv v, jv *out) {
    if (v.k == JV_STR) {
        *out = v;
        out->hint = NULL;
        return 0;
    }
    jbuf b;
    jbuf_init(&b, c);
    if (jv_write_str(&b, v) < 0) {
        jbuf_free(&b);
        return -1;
    }
    return jbuf_to_str(&b, out);
}

/* ---- json.dumps ---------------------------------------------------------------------------- */

typedef struct json_opts {
    int ensure_ascii, indent, sort_keys;
    const char *item_sep, *key_sep;
} json_opts;

static int json_put_str(jbuf *b, const char *s, size_t n, int ensure_ascii) {
    if (jbuf_put(b, "\"", 1) < 0) return -1;
    size_t i = 0, run = 0;
    while (i < n) {
        size_t at = i;
        uint32_t cp = jutf8_next(s, &i);
        char esc[16];
        int ne = 0;
        switch (cp) {
        case '"': ne = 2, memcpy(esc, "\\\"", 2); break;
        case '\\': ne = 2, memcpy(esc, "\\\\", 2); break;
        case '\n': ne = 2, memcpy(esc, "\\n", 2); break;
        case '\r': ne = 2, memcpy(esc, "\\r", 2); break;
        case '\t': ne = 2, memcpy(esc, "\\t", 2); break;
        case '\b': ne = 2, memcpy(esc, "\\b", 2); break;
        case '\f': ne = 2, memcpy(esc, "\\f", 2); break;
        default:
            if (cp < 0x20 || (ensure_ascii && cp >= 0x7f && cp <= 0xffff))
                ne = snprintf(esc, sizeof esc, "\\u%04x", cp);
            else if (ensure_ascii && cp > 0xffff) {
                uint32_t v = cp - 0x10000;
                ne = snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
            }
        }
        if (ne) {
            if (jbuf_put(b, s + run, at - run) < 0 || jbuf_put(b, esc, (size_t)ne) < 0) return -1;
            run = i;
        }
    }
    if (jbuf_put(b, s + run, n - run) < 0) return -1;
    return jbuf_put(b, "\"", 1);
}

static int json_float(jbuf *b, double f) {
    char num[48];
    if (isnan(f)) return jbuf_puts(b, "NaN");
    if (isinf(f)) return jbuf_puts(b, f < 0 ? "-Infinity" : "Infinity");
    return jbuf_put(b, num, (size_t)jv_float_repr(f, num));
}

static int json_newline(jbuf *b, const json_opts *o, int level) {
    if (jbuf_put(b, "\n", 1) < 0) return -1;
    for (int i = 0; i < level; i++) {
        if (jcharge(b->c, 1) < 0) return -1;
        for (int k = 0; k < o->indent; k++)
            if (jbuf_put(b, " ", 1) < 0) return -1;
    }
    return 0;
}

static int json_key(jbuf *b, jv k, const json_opts *o) {
    switch (k.k) {
    case JV_STR: return json_put_str(b, k.u.s->s, k.u.s->len, o->ensure_ascii);
    case JV_INT: return jbuf_printf(b, "\"%" PRId64 "\"", k.u.i);
    case JV_BOOL: return jbuf_puts(b, k.u.b ? "\"true\"" : "\"false\"");
    case JV_NONE: return jbuf_puts(b, "\"null\"");
    case JV_FLOAT:
        return jbuf_put(b, "\"", 1) < 0 || json_float(b, k.u.f) < 0 ? -1 : jbuf_put(b, "\"", 1);
    default:
        return jfail(b->c, "TypeError: keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    }
}

/* Stable merge sort of the entry order by key (Python's sorted(dict.items())). */
static int sort_keys(jctx *c, const jdict *d, size_t *ord, size_t *tmp, size_t lo, size_t hi) {
    if (hi - lo < 2) return 0;
    size_t mid = lo + (hi - lo) / 2;
    if (sort_keys(c, d, ord, tmp, lo, mid) < 0 || sort_keys(c, d, ord, tmp, mid, hi) < 0) return -1;
    size_t i = lo, j = mid, k = lo;
    while (i < mid && j < hi) {
        int r;
        if (jcharge(c, 1) < 0 || jv_compare(c, d->keys[ord[j]], d->keys[ord[i]], &r) < 0) return -1;
        tmp[k++] = r < 0 ? ord[j++] : ord[i++];
    }
    while (i < mid) tmp[k++] = ord[i++];
    while (j < hi) tmp[k++] = ord[j++];
    memcpy(ord + lo, tmp + lo, (hi - lo) * sizeof *ord);
    return 0;
}

static int json_at(jbuf *b, jv v, const json_opts *o, int level) {
    if (level > JV_MAX_NEST)
        return jfail_st(b->c, TS_ERR_UNSUPPORTED, "maximum recursion depth exceeded while encoding a JSON object");
    switch (v.k) {
    case JV_NONE: return jbuf_puts(b, "null");
    case JV_BOOL: return jbuf_puts(b, v.u.b ? "true" : "false");
    case JV_INT: return jbuf_printf(b, "%" PRId64, v.u.i);
    case JV_FLOAT: return json_float(b, v.u.f);
    case JV_STR: return json_put_str(b, v.u.s->s, v.u.s->len, o->ensure_ascii);
    case JV_LIST: {
        const jlist *l = v.u.l;
        if (!l->n) return jbuf_puts(b, "[]");
        if (jbuf_puts(b, "[") < 0) return -1;
        for (size_t i = 0; i < l->n; i++) {
            if (jcharge(b->c, 1) < 0) return -1;
            if (i && jbuf_puts(b, o->item_sep) < 0) return -1;
            if (o->indent >= 0 && json_newline(b, o, level + 1) < 0) return -1;
            if (json_at(b, l->items[i], o, level + 1) < 0) return -1;
        }
        if (o->indent >= 0 && json_newline(b, o, level) < 0) return -1;
        return jbuf_puts(b, "]");
    }
    case JV_DICT: {
        const jdict *d = v.u.d;
        if (!d->n) return jbuf_puts(b, "{}");
        size_t *ord = NULL;
        if (o->sort_keys) {
            ord = jalloc(b->c, 2 * d->n * sizeof(size_t));
            if (!ord) return -1;
            for (size_t i = 0; i < d->n; i++) ord[i] = i;
            if (sort_keys(b->c, d, ord, ord + d->n, 0, d->n) < 0) return -1;
        }
        if (jbuf_puts(b, "{") < 0) return -1;
        for (size_t i = 0; i < d->n; i++) {
            size_t e = ord ? ord[i] : i;
            if (jcharge(b->c, 1) < 0) return -1;
            if (i && jbuf_puts(b, o->item_sep) < 0) return -1;
            if (o->indent >= 0 && json_newline(b, o, level + 1) < 0) return -1;
            if (json_key(b, d->keys[e], o) < 0 || jbuf_puts(b, o->key_sep) < 0 ||
                json_at(b, d->vals[e], o, level + 1) < 0)
                return -1;
        }
        if (o->indent >= 0 && json_newline(b, o, level) < 0) return -1;
        return jbuf_puts(b, "}");
    }
    default:
        return jfail(b->c, "TypeError: Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

int jv_write_json(jbuf *b, jv v, int ensure_ascii, int indent, const char *item_sep,
                  const char *key_sep, int sort_keys_) {
    json_opts o = {ensure_ascii, indent, sort_keys_, item_sep, key_sep};
    if (!o.item_sep) o.item_sep = indent >= 0 ? "," : ", ";
    if (!o.key_sep) o.key_sep = ": ";
    return json_at(b, v, &o, 0);
}

static int from_json_at(jctx *c, const json_t *j, jv *out, int depth) {
    if (depth > JV_MAX_NEST) return jfail_st(c, TS_ERR_UNSUPPORTED, "JSON input nested too deeply");
    if (jcharge(c, 1) < 0) return -1;
    switch (json_typeof(j)) {
    case JSON_NULL: *out = jv_none(); return 0;
    case JSON_TRUE: *out = jv_bool(1); return 0;
    case JSON_FALSE: *out = jv_bool(0); return 0;
    case JSON_INTEGER: *out = jv_int((int64_t)json_integer_value(j)); return 0;
    case JSON_REAL: *out = jv_float(json_real_value(j)); return 0;
    case JSON_STRING: return jv_str(c, json_string_value(j), json_string_length(j), out);
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        if (jv_list(c, n, NULL, 0, out) < 0) return -1;
        for (size_t i = 0; i < n; i++)
            if (from_json_at(c, json_array_get(j, i), &out->u.l->items[i], depth + 1) < 0) return -1;
        return 0;
    }
    case JSON_OBJECT: {
        if (jv_dict_new(c, json_object_size(j), out) < 0) return -1;
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)j, key, val) {
            jv k, v;
            if (jv_cstr(c, key, &k) < 0 || from_json_at(c, val, &v, depth + 1) < 0 ||
                jv_dict_set(c, out, k, v) < 0)
                return -1;
        }
        return 0;
    }
    }
    return jfail(c, "unknown JSON value type");
}

int jv_from_json(jctx *c, const json_t *j, jv *out) { return from_json_at(c, j, out, 0); }
