/* The interpreter's entry points: source normalization as jinja2 does it (newlines to "\n",
 * one trailing newline dropped), parse once, render with a fresh arena per call. */
#include "runtime/jinja/jinja.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/jinja/ast.h"

struct jpool_block {
    jpool_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *jpool_alloc(jpool *p, size_t n) {
    n = (n + 15) & ~(size_t)15;
    jpool_block *b = p->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 32768 ? n : 32768;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->next = p->head;
        b->used = 0;
        b->cap = cap;
        p->head = b;
    }
    void *r = b->data + b->used;
    b->used += n;
    memset(r, 0, n);
    return r;
}

void jpool_free(jpool *p) {
    for (jpool_block *b = p->head, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    p->head = NULL;
}

struct ts_jinja {
    jpool pool;
    jnode **body;
    int nbody;
    char *what;
};

/* Offset of the first invalid UTF-8 sequence, or len. */
static size_t utf8_valid(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        size_t k;
        unsigned cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            k = 1, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            k = 2, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            k = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return i;
        }
        if (len - i <= k) return i;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return i;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
        i += k + 1;
    }
    return len;
}

ts_status ts_jinja_parse(const char *src, size_t len, const char *what, ts_jinja **out, ts_error *err) {
    *out = NULL;
    if (!what) what = "template";
    size_t bad = utf8_valid((const unsigned char *)src, len);
    if (bad != len) return ts_fail(err, TS_ERR_FORMAT, "%s: invalid UTF-8 at byte %zu of the template", what, bad);
    ts_jinja *t = calloc(1, sizeof *t);
    char *norm = malloc(len + 1);
    if (t) t->what = strdup(what);
    if (!t || !norm || !t->what) {
        free(norm);
        ts_jinja_free(t);
        return ts_fail(err, TS_ERR_NOMEM, "%s: out of memory", what);
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            norm[n++] = src[i];
        }
    }
    if (n && norm[n - 1] == '\n') n--; /* jinja2's keep_trailing_newline=False */
    norm[n] = 0;
    jtok *toks = NULL;
    size_t ntok = 0;
    int r = jlex(&t->pool, norm, n, t->what, &toks, &ntok, err);
    if (!r) r = jparse(&t->pool, toks, ntok, t->what, &t->body, &t->nbody, err);
    free(toks);
    free(norm);
    if (r) {
        ts_jinja_free(t);
        return TS_ERR_FORMAT;
    }
    *out = t;
    return TS_OK;
}

void ts_jinja_free(ts_jinja *t) {
    if (!t) return;
    jpool_free(&t->pool);
    free(t->what);
    free(t);
}

ts_status ts_jinja_render(const ts_jinja *t, const json_t *vars, int64_t now, const ts_jinja_limits *lim,
                          char **out, size_t *len, ts_error *err) {
    *out = NULL;
    *len = 0;
    ts_jinja_limits L = lim ? *lim : (ts_jinja_limits){0, 0, 0};
    if (!L.max_steps) L.max_steps = TS_JINJA_DEFAULT_STEPS;
    if (!L.max_bytes) L.max_bytes = TS_JINJA_DEFAULT_BYTES;
    if (!L.max_depth) L.max_depth = TS_JINJA_DEFAULT_DEPTH;
    if (vars && !json_is_object(vars))
        return ts_fail(err, TS_ERR_ARG, "%s: template variables must be a JSON object", t->what);
    jctx c;
    jctx_init(&c, err, t->what, L.max_bytes, L.max_steps, L.max_depth, now);
    jv globals;
    jbuf b;
    jbuf_init(&b, &c);
    int r = 0;
    if (vars) r = jv_from_json(&c, vars, &globals);
    else r = jv_dict_new(&c, 4, &globals);
    if (!r) r = jeval(&c, t->body, t->nbody, globals, &b);
    if (!r) r = jbuf_put(&b, "", 1); /* the NUL the caller gets */
    ts_status st = TS_OK;
    if (r) {
        st = c.status ? c.status : TS_ERR_FORMAT;
        jbuf_free(&b);
    } else {
        *out = b.p;
        *len = b.n - 1;
    }
    jctx_free(&c);
    return st;
}
