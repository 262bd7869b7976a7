/* Tokens -> syntax tree, by recursive descent with jinja2's grammar and precedence:
 * conditional < or < and < not < comparisons (chained, in, not in) < + - < ~ < * / // % < **
 * < unary - + < postfix (.attr [item] [a:b:c] call) and then filters / tests / calls. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/jinja/ast.h"

typedef struct parser {
    jpool *p;
    const jtok *t;
    size_t n, i;
    const char *what;
    ts_error *err;
    int depth;
} parser;

#define MAX_NEST 400 /* nested expressions / blocks: a hostile template cannot blow the C stack */

static const jtok *cur(parser *P) { return &P->t[P->i]; }
static const jtok *peek(parser *P, size_t k) { return &P->t[P->i + k < P->n ? P->i + k : P->n - 1]; }
static const jtok *next(parser *P) {
    const jtok *t = cur(P);
    if (P->i + 1 < P->n) P->i++;
    return t;
}

static const char *tok_desc(const jtok *t, char *buf, size_t n) {
    switch (t->k) {
    case JT_EOF: return "end of template";
    case JT_DATA: return "template text";
    case JT_VAR_BEGIN: return "'{{'";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_BLOCK_END: return "'%}'";
    case JT_STRING: return "string";
    case JT_INT: return "integer";
    case JT_FLOAT: return "float";
    default: snprintf(buf, n, "'%.*s'", (int)(t->n < 40 ? t->n : 40), t->s); return buf;
    }
}

static void *perr(parser *P, const jtok *t, const char *fmt, ...) TS_PRINTF(3, 4);
static void *perr(parser *P, const jtok *t, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ts_fail(P->err, TS_ERR_FORMAT, "%s:%d:%d: template syntax error: %s", P->what, t->line, t->col, msg);
    return NULL;
}

static void *unexpected(parser *P, const char *expected) {
    char buf[64], msg[200];
    snprintf(msg, sizeof msg, "unexpected %s%s%s", tok_desc(cur(P), buf, sizeof buf), expected ? ", expected " : "",
             expected ? expected : "");
    return perr(P, cur(P), "%s", msg);
}

static int is_op(const jtok *t, const char *op) { return t->k == JT_OP && !strcmp(t->s, op); }
static int is_name(const jtok *t, const char *nm) { return t->k == JT_NAME && !strcmp(t->s, nm); }

static int expect_op(parser *P, const char *op) {
    if (is_op(cur(P), op)) {
        next(P);
        return 0;
    }
    char e[16];
    snprintf(e, sizeof e, "'%s'", op);
    unexpected(P, e);
    return -1;
}

static jnode *node(parser *P, jnode_kind k, const jtok *at) {
    jnode *n = jpool_alloc(P->p, sizeof *n);
    if (!n) return perr(P, at, "%s", "out of memory");
    n->k = k;
    n->line = at->line;
    n->col = at->col;
    return n;
}

/* A growable array of node pointers in the pool (old storage is left to the pool). */
typedef struct nodevec {
    jnode **v;
    int n, cap;
} nodevec;

static int vec_push(parser *P, nodevec *v, jnode *x) {
    if (v->n == v->cap) {
        int nc = v->cap ? v->cap * 2 : 4;
        jnode **nv = jpool_alloc(P->p, sizeof *nv * (size_t)nc);
        if (!nv) {
            perr(P, cur(P), "%s", "out of memory");
            return -1;
        }
        if (v->n) memcpy(nv, v->v, sizeof *nv * (size_t)v->n);
        v->v = nv;
        v->cap = nc;
    }
    v->v[v->n++] = x;
    return 0;
}

static int pool_str(parser *P, const char *s, size_t n, jv *out) {
    jstr *js = jpool_alloc(P->p, sizeof *js + n + 1);
    if (!js) {
        perr(P, cur(P), "%s", "out of memory");
        return -1;
    }
    memcpy(js->s, s, n);
    js->s[n] = 0;
    js->len = n;
    size_t nc = 0;
    for (size_t i = 0; i < n; i++) nc += ((unsigned char)s[i] & 0xc0) != 0x80;
    js->nchars = nc;
    out->k = JV_STR;
    out->u.s = js;
    out->hint = NULL;
    return 0;
}

static jnode *parse_expr(parser *P, int with_cond);
static jnode *parse_tuple(parser *P, int with_cond, int explicit_parens);
static jnode *parse_unary(parser *P, int with_filter);
static jnode *parse_primary(parser *P);
static jnode *parse_postfix(parser *P, jnode *n);

/* Call arguments after '(' : positional, then name=value keywords; ')' consumed. */
static int parse_args(parser *P, jnode *call) {
    nodevec pos = {0}, kw = {0};
    const char **names = NULL;
    int nnames = 0, capn = 0;
    if (expect_op(P, "(")) return -1;
    while (!is_op(cur(P), ")")) {
        if (pos.n + kw.n) {
            if (expect_op(P, ",")) return -1;
            if (is_op(cur(P), ")")) break;
        }
        if (is_op(cur(P), "*") || is_op(cur(P), "**")) {
            perr(P, cur(P), "%s", "*args and **kwargs in calls are not supported");
            return -1;
        }
        if (cur(P)->k == JT_NAME && is_op(peek(P, 1), "=")) {
            const char *nm = next(P)->s;
            next(P);
            jnode *v = parse_expr(P, 1);
            if (!v || vec_push(P, &kw, v)) return -1;
            if (nnames == capn) {
                int nc = capn ? capn * 2 : 4;
                const char **nn = jpool_alloc(P->p, sizeof *nn * (size_t)nc);
                if (!nn) return -1;
                if (nnames) memcpy(nn, names, sizeof *nn * (size_t)nnames);
                names = nn;
                capn = nc;
            }
            names[nnames++] = nm;
        } else {
            if (kw.n) {
                perr(P, cur(P), "%s", "positional argument after a keyword argument");
                return -1;
            }
            jnode *v = parse_expr(P, 1);
            if (!v || vec_push(P, &pos, v)) return -1;
        }
    }
    next(P);
    call->args = pos.v;
    call->nargs = pos.n;
    call->kargs = kw.v;
    call->knames = names;
    call->nkargs = kw.n;
    return 0;
}

/* name(.name)* : filter and test names may be dotted in jinja2 */
static const char *dotted_name(parser *P) {
    if (cur(P)->k != JT_NAME) return unexpected(P, "a name");
    const jtok *t = next(P);
    if (!is_op(cur(P), ".") || peek(P, 1)->k != JT_NAME) return t->s;
    size_t len = t->n;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", t->s);
    while (is_op(cur(P), ".") && peek(P, 1)->k == JT_NAME) {
        next(P);
        const jtok *u = next(P);
        len += 1 + u->n;
        if (len < sizeof buf) strcat(strcat(buf, "."), u->s);
    }
    char *s = jpool_alloc(P->p, strlen(buf) + 1);
    if (s) strcpy(s, buf);
    return s;
}

static jnode *parse_filter(parser *P, jnode *arg) {
    const jtok *at = cur(P);
    next(P); /* '|' */
    jnode *f = node(P, JE_FILTER, at);
    if (!f) return NULL;
    f->a = arg;
    if (!(f->name = dotted_name(P))) return NULL;
    if (is_op(cur(P), "(") && parse_args(P, f)) return NULL;
    return f;
}

static jnode *parse_test(parser *P, jnode *arg) {
    const jtok *at = cur(P);
    next(P); /* 'is' */
    jnode *t = node(P, JE_TEST, at);
    if (!t) return NULL;
    t->a = arg;
    if (is_name(cur(P), "not")) {
        next(P);
        t->op = 1;
    }
    if (!(t->name = dotted_name(P))) return NULL;
    const jtok *c = cur(P);
    if (is_op(c, "(")) {
        if (parse_args(P, t)) return NULL;
    } else if ((c->k == JT_NAME || c->k == JT_STRING || c->k == JT_INT || c->k == JT_FLOAT || is_op(c, "[") ||
                is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) return perr(P, c, "%s", "you cannot chain multiple tests with is");
        jnode *a = parse_primary(P);
        if (!a || !(a = parse_postfix(P, a))) return NULL;
        t->args = jpool_alloc(P->p, sizeof *t->args);
        if (!t->args) return NULL;
        t->args[0] = a;
        t->nargs = 1;
    }
    return t;
}

/* After '[': an index or a slice a:b:c (each part optional). */
static jnode *parse_subscribed(parser *P) {
    const jtok *at = cur(P);
    jnode *parts[3] = {NULL, NULL, NULL};
    if (!is_op(cur(P), ":")) {
        jnode *e = parse_expr(P, 1);
        if (!e) return NULL;
        if (!is_op(cur(P), ":")) return e;
        parts[0] = e;
    }
    next(P); /* ':' */
    if (!is_op(cur(P), "]") && !is_op(cur(P), ",") && !is_op(cur(P), ":"))
        if (!(parts[1] = parse_expr(P, 1))) return NULL;
    if (is_op(cur(P), ":")) {
        next(P);
        if (!is_op(cur(P), "]") && !is_op(cur(P), ","))
            if (!(parts[2] = parse_expr(P, 1))) return NULL;
    }
    jnode *s = node(P, JE_SLICE, at);
    if (!s || !(s->args = jpool_alloc(P->p, sizeof *s->args * 3))) return NULL;
    memcpy(s->args, parts, sizeof parts);
    s->nargs = 3;
    return s;
}

static jnode *parse_postfix(parser *P, jnode *n) {
    for (;;) {
        const jtok *at = cur(P);
        if (is_op(at, ".")) {
            next(P);
            if (cur(P)->k == JT_NAME) {
                jnode *a = node(P, JE_ATTR, at);
                if (!a) return NULL;
                a->a = n;
                a->name = next(P)->s;
                n = a;
            } else if (cur(P)->k == JT_INT) {
                jnode *a = node(P, JE_ITEM, at), *k = node(P, JE_CONST, cur(P));
                if (!a || !k) return NULL;
                k->cval = jv_int(next(P)->i);
                a->a = n;
                a->b = k;
                n = a;
            } else {
                return unexpected(P, "an attribute name");
            }
        } else if (is_op(at, "[")) {
            next(P);
            nodevec idx = {0};
            while (!is_op(cur(P), "]")) {
                if (idx.n && expect_op(P, ",")) return NULL;
                if (is_op(cur(P), "]")) break;
                jnode *e = parse_subscribed(P);
                if (!e || vec_push(P, &idx, e)) return NULL;
            }
            next(P);
            if (!idx.n) return perr(P, at, "%s", "expected an index or a slice inside []");
            jnode *key = idx.v[0];
            for (int k = 0; idx.n > 1 && k < idx.n; k++)
                if (idx.v[k]->k == JE_SLICE) return perr(P, at, "%s", "a slice inside a tuple subscript is not supported");
            if (idx.n > 1) {
                if (!(key = node(P, JE_TUPLE, at))) return NULL;
                key->args = idx.v;
                key->nargs = idx.n;
            }
            if (key->k == JE_SLICE) {
                key->a = n;
                n = key;
            } else {
                jnode *a = node(P, JE_ITEM, at);
                if (!a) return NULL;
                a->a = n;
                a->b = key;
                n = a;
            }
        } else if (is_op(at, "(")) {
            jnode *c = node(P, JE_CALL, at);
            if (!c) return NULL;
            c->a = n;
            if (parse_args(P, c)) return NULL;
            n = c;
        } else {
            return n;
        }
    }
}

static jnode *parse_filter_expr(parser *P, jnode *n) {
    for (;;) {
        if (!n) return NULL;
        if (is_op(cur(P), "|")) {
            n = parse_filter(P, n);
        } else if (is_name(cur(P), "is")) {
            n = parse_test(P, n);
        } else if (is_op(cur(P), "(")) {
            jnode *c = node(P, JE_CALL, cur(P));
            if (!c) return NULL;
            c->a = n;
            if (parse_args(P, c)) return NULL;
            n = c;
        } else {
            return n;
        }
    }
}

static jnode *parse_seq(parser *P, jnode_kind k, const char *close) {
    const jtok *at = next(P); /* opener */
    jnode *n = node(P, k, at);
    nodevec items = {0};
    if (!n) return NULL;
    while (!is_op(cur(P), close)) {
        if (items.n && expect_op(P, ",")) return NULL;
        if (is_op(cur(P), close)) break;
        jnode *e = parse_expr(P, 1);
        if (!e || vec_push(P, &items, e)) return NULL;
        if (k == JE_DICT) {
            if (expect_op(P, ":")) return NULL;
            if (!(e = parse_expr(P, 1)) || vec_push(P, &items, e)) return NULL;
        }
    }
    next(P);
    n->args = items.v;
    n->nargs = items.n;
    return n;
}

static jnode *parse_primary(parser *P) {
    const jtok *t = cur(P);
    if (++P->depth > MAX_NEST) return perr(P, t, "%s", "expression nested too deeply");
    jnode *n = NULL;
    if (t->k == JT_NAME) {
        next(P);
        n = node(P, JE_CONST, t);
        if (!n) return NULL;
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) n->cval = jv_bool(1);
        else if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) n->cval = jv_bool(0);
        else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) n->cval = jv_none();
        else {
            n->k = JE_NAME;
            n->name = t->s;
        }
    } else if (t->k == JT_STRING) {
        /* adjacent literals concatenate, as in Python */
        size_t len = 0, k = P->i;
        while (P->t[k].k == JT_STRING) len += P->t[k++].n;
        char *buf = malloc(len + 1);
        if (!buf) return perr(P, t, "%s", "out of memory");
        size_t o = 0;
        while (cur(P)->k == JT_STRING) {
            memcpy(buf + o, cur(P)->s, cur(P)->n);
            o += cur(P)->n;
            next(P);
        }
        n = node(P, JE_CONST, t);
        int bad = !n || pool_str(P, buf, len, &n->cval);
        free(buf);
        if (bad) return NULL;
    } else if (t->k == JT_INT || t->k == JT_FLOAT) {
        next(P);
        n = node(P, JE_CONST, t);
        if (!n) return NULL;
        n->cval = t->k == JT_INT ? jv_int(t->i) : jv_float(t->f);
    } else if (is_op(t, "(")) {
        next(P);
        n = parse_tuple(P, 1, 1);
        if (!n || expect_op(P, ")")) return NULL;
    } else if (is_op(t, "[")) {
        n = parse_seq(P, JE_LIST, "]");
    } else if (is_op(t, "{")) {
        n = parse_seq(P, JE_DICT, "}");
    } else {
        return unexpected(P, "an expression");
    }
    P->depth--;
    return n;
}

static jnode *parse_unary(parser *P, int with_filter) {
    const jtok *t = cur(P);
    jnode *n;
    if (++P->depth > MAX_NEST) return perr(P, t, "%s", "expression nested too deeply");
    if (is_op(t, "-") || is_op(t, "+")) {
        next(P);
        n = node(P, is_op(t, "-") ? JE_NEG : JE_POS, t);
        if (!n || !(n->a = parse_unary(P, 0))) return NULL;
    } else {
        n = parse_primary(P);
    }
    if (n) n = parse_postfix(P, n);
    if (n && with_filter) n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

static jnode *binop(parser *P, const jtok *at, int op, jnode *l, jnode *r) {
    if (!l || !r) return NULL;
    jnode *n = node(P, JE_BINOP, at);
    if (!n) return NULL;
    n->op = op;
    n->a = l;
    n->b = r;
    return n;
}

static jnode *parse_pow(parser *P) {
    jnode *l = parse_unary(P, 1);
    while (l && is_op(cur(P), "**")) {
        const jtok *at = next(P);
        l = binop(P, at, JOP_POW, l, parse_unary(P, 1));
    }
    return l;
}

static jnode *parse_math2(parser *P) {
    jnode *l = parse_pow(P);
    for (;;) {
        const jtok *t = cur(P);
        int op = is_op(t, "*") ? JOP_MUL : is_op(t, "/") ? JOP_DIV : is_op(t, "//") ? JOP_FLOORDIV : is_op(t, "%") ? JOP_MOD : 0;
        if (!l || !op) return l;
        next(P);
        l = binop(P, t, op, l, parse_pow(P));
    }
}

static jnode *parse_concat(parser *P) {
    const jtok *at = cur(P);
    jnode *first = parse_math2(P);
    if (!first || !is_op(cur(P), "~")) return first;
    nodevec parts = {0};
    if (vec_push(P, &parts, first)) return NULL;
    while (is_op(cur(P), "~")) {
        next(P);
        jnode *e = parse_math2(P);
        if (!e || vec_push(P, &parts, e)) return NULL;
    }
    jnode *n = node(P, JE_CONCAT, at);
    if (!n) return NULL;
    n->args = parts.v;
    n->nargs = parts.n;
    return n;
}

static jnode *parse_math1(parser *P) {
    jnode *l = parse_concat(P);
    for (;;) {
        const jtok *t = cur(P);
        int op = is_op(t, "+") ? JOP_ADD : is_op(t, "-") ? JOP_SUB : 0;
        if (!l || !op) return l;
        next(P);
        l = binop(P, t, op, l, parse_concat(P));
    }
}

static jnode *parse_compare(parser *P) {
    const jtok *at = cur(P);
    jnode *first = parse_math1(P);
    if (!first) return NULL;
    nodevec rhs = {0};
    int ops[64], nops = 0;
    for (;;) {
        const jtok *t = cur(P);
        int op = is_op(t, "==") ? JOP_EQ : is_op(t, "!=") ? JOP_NE : is_op(t, "<") ? JOP_LT : is_op(t, "<=") ? JOP_LE
               : is_op(t, ">") ? JOP_GT : is_op(t, ">=") ? JOP_GE : is_name(t, "in") ? JOP_IN : 0;
        if (!op && is_name(t, "not") && is_name(peek(P, 1), "in")) {
            next(P);
            op = JOP_NOTIN;
        }
        if (!op) break;
        if (nops == 64) return perr(P, t, "%s", "comparison chain too long");
        next(P);
        jnode *r = parse_math1(P);
        if (!r || vec_push(P, &rhs, r)) return NULL;
        ops[nops++] = op;
    }
    if (!nops) return first;
    jnode *n = node(P, JE_COMPARE, at);
    if (!n || !(n->ops = jpool_alloc(P->p, sizeof *n->ops * (size_t)nops))) return NULL;
    memcpy(n->ops, ops, sizeof *ops * (size_t)nops);
    n->a = first;
    n->args = rhs.v;
    n->nargs = rhs.n;
    return n;
}

static jnode *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        const jtok *at = next(P);
        if (++P->depth > MAX_NEST) return perr(P, at, "%s", "expression nested too deeply");
        jnode *n = node(P, JE_NOT, at);
        if (!n || !(n->a = parse_not(P))) return NULL;
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static jnode *parse_andor(parser *P, int is_or) {
    jnode *l = is_or ? parse_andor(P, 0) : parse_not(P);
    while (l && is_name(cur(P), is_or ? "or" : "and")) {
        const jtok *at = next(P);
        jnode *n = node(P, is_or ? JE_OR : JE_AND, at);
        if (!n) return NULL;
        n->a = l;
        if (!(n->b = is_or ? parse_andor(P, 0) : parse_not(P))) return NULL;
        l = n;
    }
    return l;
}

static jnode *parse_expr(parser *P, int with_cond) {
    if (++P->depth > MAX_NEST) return perr(P, cur(P), "%s", "expression nested too deeply");
    jnode *e = parse_andor(P, 1);
    while (with_cond && e && is_name(cur(P), "if")) {
        const jtok *at = next(P);
        jnode *c = node(P, JE_COND, at);
        if (!c || !(c->a = parse_andor(P, 1))) return NULL;
        c->b = e;
        if (is_name(cur(P), "else")) {
            next(P);
            if (!(c->c = parse_expr(P, 1))) return NULL;
        }
        e = c;
    }
    P->depth--;
    return e;
}

/* a, b, c (a tuple when a comma appears); explicit_parens: inside (), where () is empty. */
static jnode *parse_tuple(parser *P, int with_cond, int explicit_parens) {
    const jtok *at = cur(P);
    nodevec items = {0};
    int comma = 0;
    for (;;) {
        const jtok *t = cur(P);
        if (t->k == JT_VAR_END || t->k == JT_BLOCK_END || is_op(t, ")") || is_name(t, "in") ||
            (items.n && is_name(t, "if") && !with_cond))
            break;
        if (items.n) {
            if (!is_op(t, ",")) break;
            next(P);
            comma = 1;
            t = cur(P);
            if (t->k == JT_VAR_END || t->k == JT_BLOCK_END || is_op(t, ")")) break;
        }
        jnode *e = parse_expr(P, with_cond);
        if (!e || vec_push(P, &items, e)) return NULL;
    }
    if (!items.n && !explicit_parens) return unexpected(P, "an expression");
    if (items.n == 1 && !comma) return items.v[0];
    jnode *n = node(P, JE_TUPLE, at);
    if (!n) return NULL;
    n->args = items.v;
    n->nargs = items.n;
    return n;
}

/* ---- statements ---------------------------------------------------------------------------- */

static int expect_block_end(parser *P) {
    if (cur(P)->k == JT_BLOCK_END) {
        next(P);
        return 0;
    }
    unexpected(P, "end of statement '%}'");
    return -1;
}

static int parse_body(parser *P, const char *const *ends, jnode ***body, int *nbody);

/* for/set targets: a name, names separated by commas (optionally in parentheses), or, for set,
 * ns.attr. */
static jnode *parse_target(parser *P, int allow_ns) {
    const jtok *at = cur(P);
    if (allow_ns && at->k == JT_NAME && is_op(peek(P, 1), ".") && peek(P, 2)->k == JT_NAME) {
        jnode *base = node(P, JE_NAME, at), *n = node(P, JE_ATTR, at);
        if (!base || !n) return NULL;
        base->name = next(P)->s;
        next(P);
        n->a = base;
        n->name = next(P)->s;
        return n;
    }
    int paren = is_op(at, "(");
    if (paren) next(P);
    nodevec names = {0};
    do {
        if (names.n) next(P); /* ',' */
        if (cur(P)->k != JT_NAME) return unexpected(P, "a variable name");
        jnode *nm = node(P, JE_NAME, cur(P));
        if (!nm) return NULL;
        nm->name = next(P)->s;
        if (!strcmp(nm->name, "true") || !strcmp(nm->name, "false") || !strcmp(nm->name, "none") ||
            !strcmp(nm->name, "True") || !strcmp(nm->name, "False") || !strcmp(nm->name, "None"))
            return perr(P, at, "can't assign to %s", nm->name);
        if (vec_push(P, &names, nm)) return NULL;
    } while (is_op(cur(P), ","));
    if (paren && expect_op(P, ")")) return NULL;
    if (names.n == 1 && !paren) return names.v[0];
    jnode *t = node(P, JE_TUPLE, at);
    if (!t) return NULL;
    t->args = names.v;
    t->nargs = names.n;
    return t;
}

/* | f | g(x) after {% set x %} or {% filter %}: a chain whose innermost filter reads the body. */
static jnode *parse_filter_chain(parser *P, int need_first) {
    jnode *chain = NULL;
    if (need_first) {
        jnode *f = node(P, JE_FILTER, cur(P));
        if (!f || !(f->name = dotted_name(P))) return NULL;
        if (is_op(cur(P), "(") && parse_args(P, f)) return NULL;
        chain = f;
    }
    while (is_op(cur(P), "|")) {
        chain = parse_filter(P, chain);
        if (!chain) return NULL;
    }
    return chain;
}

static const char *const k_end_if[] = {"elif", "else", "endif", NULL};
static const char *const k_end_for[] = {"else", "endfor", NULL};
static const char *const k_end_endfor[] = {"endfor", NULL};

/* Consumes "{% NAME" of an end tag that parse_body stopped at; returns the name. */
static const char *end_tag(parser *P) {
    next(P); /* {% */
    return next(P)->s;
}

static jnode *parse_if(parser *P, const jtok *at) {
    jnode *n = node(P, JN_IF, at);
    if (!n || !(n->a = parse_tuple(P, 1, 0)) || expect_block_end(P)) return NULL;
    if (parse_body(P, k_end_if, &n->body, &n->nbody)) return NULL;
    const jtok *endt = peek(P, 1);
    const char *e = end_tag(P);
    if (!strcmp(e, "elif")) {
        jnode *el = parse_if(P, endt);
        if (!el || !(n->orelse = jpool_alloc(P->p, sizeof *n->orelse))) return NULL;
        n->orelse[0] = el;
        n->norelse = 1;
        return n; /* the nested if consumed endif */
    }
    if (!strcmp(e, "else")) {
        static const char *const k_end_else[] = {"endif", NULL};
        if (expect_block_end(P) || parse_body(P, k_end_else, &n->orelse, &n->norelse)) return NULL;
        end_tag(P);
    }
    return expect_block_end(P) ? NULL : n;
}

static jnode *parse_for(parser *P, const jtok *at) {
    jnode *n = node(P, JN_FOR, at);
    if (!n || !(n->target = parse_target(P, 0))) return NULL;
    if (!is_name(cur(P), "in")) return unexpected(P, "'in'");
    next(P);
    if (!(n->a = parse_tuple(P, 0, 0))) return NULL;
    if (is_name(cur(P), "if")) {
        next(P);
        if (!(n->b = parse_expr(P, 1))) return NULL;
    }
    if (is_name(cur(P), "recursive")) return perr(P, cur(P), "%s", "recursive for loops are not supported");
    if (expect_block_end(P) || parse_body(P, k_end_for, &n->body, &n->nbody)) return NULL;
    if (!strcmp(end_tag(P), "else")) {
        if (expect_block_end(P) || parse_body(P, k_end_endfor, &n->orelse, &n->norelse)) return NULL;
        end_tag(P);
    }
    return expect_block_end(P) ? NULL : n;
}

static jnode *parse_set(parser *P, const jtok *at) {
    jnode *n = node(P, JN_SET, at);
    if (!n || !(n->target = parse_target(P, 1))) return NULL;
    if (is_op(cur(P), "=")) {
        next(P);
        if (!(n->a = parse_tuple(P, 1, 0))) return NULL;
        return expect_block_end(P) ? NULL : n;
    }
    if (n->target->k != JE_NAME && n->target->k != JE_ATTR) return unexpected(P, "'='");
    n->k = JN_SETBLOCK;
    if (is_op(cur(P), "|") && !(n->filters = parse_filter_chain(P, 0))) return NULL;
    static const char *const ends[] = {"endset", NULL};
    if (expect_block_end(P) || parse_body(P, ends, &n->body, &n->nbody)) return NULL;
    end_tag(P);
    return expect_block_end(P) ? NULL : n;
}

static jnode *parse_macro(parser *P, const jtok *at) {
    jnode *n = node(P, JN_MACRO, at);
    if (!n) return NULL;
    if (cur(P)->k != JT_NAME) return unexpected(P, "a macro name");
    n->name = next(P)->s;
    if (expect_op(P, "(")) return NULL;
    nodevec names = {0}, defs = {0};
    while (!is_op(cur(P), ")")) {
        if (names.n && expect_op(P, ",")) return NULL;
        if (is_op(cur(P), ")")) break;
        if (cur(P)->k != JT_NAME) return unexpected(P, "a parameter name");
        jnode *nm = node(P, JE_NAME, cur(P));
        if (!nm) return NULL;
        nm->name = next(P)->s;
        jnode *d = NULL;
        if (is_op(cur(P), "=")) {
            next(P);
            if (!(d = parse_expr(P, 1))) return NULL;
        } else if (defs.n && defs.v[defs.n - 1]) {
            return perr(P, cur(P), "%s", "non-default argument follows default argument");
        }
        if (vec_push(P, &names, nm) || vec_push(P, &defs, d)) return NULL;
    }
    next(P);
    n->args = names.v;
    n->kargs = defs.v;
    n->nargs = names.n;
    static const char *const ends[] = {"endmacro", NULL};
    if (expect_block_end(P) || parse_body(P, ends, &n->body, &n->nbody)) return NULL;
    end_tag(P);
    if (cur(P)->k == JT_NAME) next(P); /* {% endmacro name %} */
    return expect_block_end(P) ? NULL : n;
}

static jnode *parse_with(parser *P, const jtok *at) {
    jnode *n = node(P, JN_WITH, at);
    nodevec targets = {0}, values = {0};
    if (!n) return NULL;
    while (cur(P)->k != JT_BLOCK_END) {
        if (targets.n && expect_op(P, ",")) return NULL;
        jnode *t = parse_target(P, 0), *v;
        if (!t || expect_op(P, "=") || !(v = parse_expr(P, 1))) return NULL;
        if (vec_push(P, &targets, t) || vec_push(P, &values, v)) return NULL;
    }
    n->args = targets.v;
    n->kargs = values.v;
    n->nargs = targets.n;
    static const char *const ends[] = {"endwith", NULL};
    if (expect_block_end(P) || parse_body(P, ends, &n->body, &n->nbody)) return NULL;
    end_tag(P);
    return expect_block_end(P) ? NULL : n;
}

static jnode *parse_statement(parser *P) {
    const jtok *at = next(P); /* {% */
    const jtok *t = cur(P);
    if (t->k != JT_NAME) return unexpected(P, "a statement name");
    next(P);
    const char *nm = t->s;
    if (!strcmp(nm, "if")) return parse_if(P, at);
    if (!strcmp(nm, "for")) return parse_for(P, at);
    if (!strcmp(nm, "set")) return parse_set(P, at);
    if (!strcmp(nm, "macro")) return parse_macro(P, at);
    if (!strcmp(nm, "with")) return parse_with(P, at);
    if (!strcmp(nm, "break") || !strcmp(nm, "continue")) {
        jnode *n = node(P, nm[0] == 'b' ? JN_BREAK : JN_CONTINUE, at);
        return !n || expect_block_end(P) ? NULL : n;
    }
    if (!strcmp(nm, "filter")) {
        jnode *n = node(P, JN_FILTERBLOCK, at);
        static const char *const ends[] = {"endfilter", NULL};
        if (!n || !(n->filters = parse_filter_chain(P, 1)) || expect_block_end(P) ||
            parse_body(P, ends, &n->body, &n->nbody))
            return NULL;
        end_tag(P);
        return expect_block_end(P) ? NULL : n;
    }
    if (!strcmp(nm, "generation")) {
        /* transformers' AssistantTracker tag: renders its body; the spans it records only
         * matter for training masks */
        jnode *n = node(P, JN_SCOPE, at);
        static const char *const ends[] = {"endgeneration", NULL};
        if (!n || expect_block_end(P) || parse_body(P, ends, &n->body, &n->nbody)) return NULL;
        end_tag(P);
        return expect_block_end(P) ? NULL : n;
    }
    static const char *const unsupported[] = {"call", "include", "import", "from", "extends", "block",
                                              "do", "autoescape", "trans", NULL};
    for (int i = 0; unsupported[i]; i++)
        if (!strcmp(nm, unsupported[i]))
            return perr(P, t, "'%s' statements are not supported in chat templates", nm);
    return perr(P, t, "encountered unknown tag '%s'", nm);
}

/* Statements until a block tag named in ends (left unconsumed), or the end of the template
 * when ends is NULL. */
static int parse_body(parser *P, const char *const *ends, jnode ***body, int *nbody) {
    nodevec v = {0};
    const jtok *start = cur(P);
    if (++P->depth > MAX_NEST) {
        perr(P, start, "%s", "blocks nested too deeply");
        return -1;
    }
    for (;;) {
        const jtok *t = cur(P);
        jnode *n = NULL;
        if (t->k == JT_EOF) {
            if (!ends) break;
            char want[128] = "";
            for (int i = 0; ends[i]; i++)
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s'%s'", i ? " or " : "", ends[i]);
            perr(P, t, "unexpected end of template, expected %s", want);
            return -1;
        }
        if (t->k == JT_DATA) {
            next(P);
            if (!(n = node(P, JN_DATA, t)) || pool_str(P, t->s, t->n, &n->cval)) return -1;
        } else if (t->k == JT_VAR_BEGIN) {
            next(P);
            if (!(n = node(P, JN_OUTPUT, t)) || !(n->a = parse_tuple(P, 1, 0))) return -1;
            if (cur(P)->k != JT_VAR_END) {
                unexpected(P, "end of print statement '}}'");
                return -1;
            }
            next(P);
        } else if (t->k == JT_BLOCK_BEGIN) {
            const jtok *nm = peek(P, 1);
            int is_end = 0;
            for (int i = 0; ends && ends[i]; i++) is_end |= is_name(nm, ends[i]);
            if (is_end) break;
            if (nm->k == JT_NAME && (!strncmp(nm->s, "end", 3) || !strcmp(nm->s, "elif") || !strcmp(nm->s, "else"))) {
                perr(P, nm, "encountered unexpected tag '%s'", nm->s);
                return -1;
            }
            if (!(n = parse_statement(P))) return -1;
        } else {
            unexpected(P, NULL);
            return -1;
        }
        if (vec_push(P, &v, n)) return -1;
    }
    P->depth--;
    *body = v.v;
    *nbody = v.n;
    return 0;
}

int jparse(jpool *p, const jtok *toks, size_t n, const char *what, jnode ***body, int *nbody, ts_error *err) {
    parser P = {p, toks, n, 0, what, err, 0};
    return parse_body(&P, NULL, body, nbody);
}
