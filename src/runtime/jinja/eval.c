/* Evaluates a template's syntax tree: statements write to the output buffer, expressions give
 * values. Scoping follows jinja2: the template's top level is one scope over the globals; each
 * for-loop iteration starts a fresh scope (a {% set %} inside a loop is gone at the next
 * iteration and after the loop: namespaces exist for that); if-blocks share their scope;
 * macros run in a scope over the one they were defined in, seeing later top-level sets. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/jinja/ast.h"
#include "runtime/jinja/builtins_impl.h"

typedef struct scope {
    struct scope *parent;
    jv d; /* JV_DICT */
} scope;

typedef struct jmacro {
    const jnode *def;
    scope *defscope;
} jmacro;

typedef struct jloop {
    const jlist *items;
    int64_t index0;
    int depth;
    jv last_changed; /* loop.changed() */
    int has_changed;
} jloop;

typedef struct ev {
    jctx *c;
    jbuf *out;
    scope *sc;
} ev;

enum { FLOW_NORMAL = 0, FLOW_BREAK = 1, FLOW_CONTINUE = 2 };

static int eval(ev *e, const jnode *n, jv *out);
static int exec_body(ev *e, jnode *const *body, int n);

static void at(ev *e, const jnode *n) {
    e->c->line = n->line;
    e->c->col = n->col;
}

/* The message an undefined value carries: "'<a>' is undefined" (b NULL) or
 * "'<a> object' has no attribute '<b>'" style, prefix + a + middle + b + suffix. */
static const char *hintf(jctx *c, const char *pre, const char *a, const char *mid, const char *b, const char *post) {
    size_t n = strlen(pre) + strlen(a) + strlen(mid) + strlen(b) + strlen(post) + 1;
    char *s = jalloc(c, n);
    if (s) snprintf(s, n, "%s%s%s%s%s", pre, a, mid, b, post);
    return s;
}

static int undefined_error(ev *e, jv v) {
    return jfail(e->c, "%s", v.hint ? v.hint : "value is undefined");
}

static int new_scope(ev *e, scope *parent, scope **out) {
    scope *s = jalloc(e->c, sizeof *s);
    if (!s || jv_dict_new(e->c, 8, &s->d)) return -1;
    s->parent = parent;
    *out = s;
    return 0;
}

static int lookup(ev *e, const jnode *n, jv *out) {
    for (scope *s = e->sc; s; s = s->parent) {
        const jv *v = jv_dict_gets(&s->d, n->name);
        if (v) {
            *out = *v;
            return 0;
        }
    }
    int r = jb_global(e->c, n->name, out);
    if (r != -2) return r;
    *out = jv_undef(hintf(e->c, "'", n->name, "' is undefined", "", ""));
    return 0;
}

static int set_name(ev *e, const char *name, jv v) {
    jv k;
    if (jv_cstr(e->c, name, &k)) return -1;
    return jv_dict_set(e->c, &e->sc->d, k, v);
}

/* ---- attribute and item access ------------------------------------------------------------- */

static int loop_attr(ev *e, jv lv, const char *name, jv *out) {
    jloop *L = lv.u.p;
    int64_t n = (int64_t)L->items->n, i = L->index0;
    if (!strcmp(name, "index")) *out = jv_int(i + 1);
    else if (!strcmp(name, "index0")) *out = jv_int(i);
    else if (!strcmp(name, "revindex")) *out = jv_int(n - i);
    else if (!strcmp(name, "revindex0")) *out = jv_int(n - i - 1);
    else if (!strcmp(name, "first")) *out = jv_bool(i == 0);
    else if (!strcmp(name, "last")) *out = jv_bool(i == n - 1);
    else if (!strcmp(name, "length")) *out = jv_int(n);
    else if (!strcmp(name, "depth")) *out = jv_int(L->depth);
    else if (!strcmp(name, "depth0")) *out = jv_int(L->depth - 1);
    else if (!strcmp(name, "previtem"))
        *out = i > 0 ? L->items->items[i - 1] : jv_undef("there is no previous item");
    else if (!strcmp(name, "nextitem"))
        *out = i + 1 < n ? L->items->items[i + 1] : jv_undef("there is no next item");
    else if (!strcmp(name, "cycle") || !strcmp(name, "changed")) {
        jbound *b = jalloc(e->c, sizeof *b);
        jv *self = jalloc(e->c, sizeof *self);
        if (!b || !self) return -1;
        *self = lv;
        b->self = self;
        b->name = !strcmp(name, "cycle") ? "cycle" : "changed";
        out->k = JV_BOUND;
        out->u.bm = b;
        out->hint = NULL;
    } else
        *out = jv_undef(hintf(e->c, "'LoopContext object' has no attribute '", name, "'", "", ""));
    return 0;
}

static int get_attr(ev *e, jv obj, const char *name, jv *out) {
    if (obj.k == JV_UNDEF) return undefined_error(e, obj);
    if (obj.k == JV_LOOP) return loop_attr(e, obj, name, out);
    if (obj.k == JV_NS) {
        const jv *v = jv_dict_gets(&obj, name);
        *out = v ? *v : jv_undef(hintf(e->c, "'Namespace object' has no attribute '", name, "'", "", ""));
        return 0;
    }
    int r = jb_method_lookup(e->c, obj, name, out);
    if (r != -2) return r;
    if (obj.k == JV_DICT) {
        const jv *v = jv_dict_gets(&obj, name);
        if (v) {
            *out = *v;
            return 0;
        }
    }
    *out = jv_undef(hintf(e->c, "'", jv_type_name(obj), " object' has no attribute '", name, "'"));
    return 0;
}

/* obj[key]: jinja2's getitem (subscript, then attribute), the loop object's attributes too. */
static int get_item(ev *e, jv obj, jv key, jv *out) {
    if (obj.k == JV_LOOP && key.k == JV_STR) return loop_attr(e, obj, key.u.s->s, out);
    return jb_getitem(e->c, obj, key, out);
}

static int slice_bound(ev *e, const jnode *n, int64_t *v, int *present) {
    *present = 0;
    if (!n) return 0;
    jv x;
    if (eval(e, n, &x)) return -1;
    if (x.k == JV_NONE) return 0;
    if (x.k == JV_BOOL) x = jv_int(x.u.b);
    if (x.k != JV_INT) {
        at(e, n);
        return jfail(e->c, "slice indices must be integers or None, not %s", jv_type_name(x));
    }
    *v = x.u.i;
    *present = 1;
    return 0;
}

/* Python's slice.indices(): the start, the count and the step over a sequence of length n. */
static int slice_indices(ev *e, const jnode *s, int64_t n, int64_t *start, int64_t *count, int64_t *step) {
    int64_t a = 0, b = 0, st = 1;
    int ha, hb, hs;
    if (slice_bound(e, s->args[0], &a, &ha) || slice_bound(e, s->args[1], &b, &hb) ||
        slice_bound(e, s->args[2], &st, &hs))
        return -1;
    if (!hs) st = 1;
    if (st == 0) {
        at(e, s);
        return jfail(e->c, "slice step cannot be zero");
    }
    if (st > 0) {
        if (!ha) a = 0;
        else if (a < 0) a = a + n < 0 ? 0 : a + n;
        else if (a > n) a = n;
        if (!hb) b = n;
        else if (b < 0) b = b + n < 0 ? 0 : b + n;
        else if (b > n) b = n;
        *count = b > a ? (b - a + st - 1) / st : 0;
    } else {
        if (!ha) a = n - 1;
        else if (a < 0) a = a + n < 0 ? -1 : a + n;
        else if (a >= n) a = n - 1;
        if (!hb) b = -1;
        else if (b < 0) b = b + n < 0 ? -1 : b + n;
        else if (b >= n) b = n - 1;
        *count = a > b ? (a - b + (-st) - 1) / (-st) : 0;
    }
    *start = a;
    *step = st;
    return 0;
}

static int eval_slice(ev *e, const jnode *n, jv *out) {
    jv obj;
    if (eval(e, n->a, &obj)) return -1;
    if (obj.k == JV_UNDEF) return undefined_error(e, obj);
    if (obj.k != JV_LIST && obj.k != JV_STR) {
        *out = jv_undef(hintf(e->c, "'", jv_type_name(obj), " object' cannot be sliced", "", ""));
        return 0;
    }
    int64_t len = obj.k == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)obj.u.s->nchars, a = 0, cnt = 0, st = 1;
    if (slice_indices(e, n, len, &a, &cnt, &st) || jcharge(e->c, (uint64_t)cnt)) return -1;
    if (obj.k == JV_LIST) {
        if (jv_list(e->c, (size_t)cnt, NULL, obj.u.l->tuple, out)) return -1;
        for (int64_t i = 0; i < cnt; i++) out->u.l->items[i] = obj.u.l->items[a + i * st];
        return 0;
    }
    const jstr *s = obj.u.s;
    if (st == 1) {
        size_t x = jutf8_offset(s, (size_t)a), y = jutf8_offset(s, (size_t)(a + cnt));
        return jv_str(e->c, s->s + x, y - x, out);
    }
    jbuf b;
    jbuf_init(&b, e->c);
    for (int64_t i = 0; i < cnt; i++) {
        size_t x = jutf8_offset(s, (size_t)(a + i * st)), y = jutf8_offset(s, (size_t)(a + i * st + 1));
        if (jbuf_put(&b, s->s + x, y - x)) {
            jbuf_free(&b);
            return -1;
        }
    }
    return jbuf_to_str(&b, out);
}

/* ---- operators ----------------------------------------------------------------------------- */

static int is_num(jv v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }
static double num_f(jv v) { return v.k == JV_FLOAT ? v.u.f : v.k == JV_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t num_i(jv v) { return v.k == JV_INT ? v.u.i : v.u.b; }

static const char *op_sym(int op) {
    static const char *const s[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    return op >= JOP_ADD && op <= JOP_POW ? s[op] : "?";
}

static int type_error(ev *e, int op, jv a, jv b) {
    if (op == JOP_ADD && a.k == JV_STR)
        return jfail(e->c, "can only concatenate str (not \"%s\") to str", jv_type_name(b));
    if (op == JOP_ADD && a.k == JV_LIST && !a.u.l->tuple)
        return jfail(e->c, "can only concatenate list (not \"%s\") to list", jv_type_name(b));
    return jfail(e->c, "unsupported operand type(s) for %s: '%s' and '%s'", op_sym(op), jv_type_name(a),
                 jv_type_name(b));
}

static int repeat(ev *e, jv seq, int64_t times, jv *out) {
    if (times < 0) times = 0;
    if (seq.k == JV_STR) {
        if (times && seq.u.s->len > e->c->max_bytes / (uint64_t)times)
            return jfail_st(e->c, TS_ERR_UNSUPPORTED, "string repetition exceeds the template's memory budget");
        jbuf b;
        jbuf_init(&b, e->c);
        for (int64_t i = 0; i < times; i++)
            if (jbuf_put(&b, seq.u.s->s, seq.u.s->len)) {
                jbuf_free(&b);
                return -1;
            }
        return jbuf_to_str(&b, out);
    }
    size_t n = seq.u.l->n;
    if (times && n > (e->c->max_bytes / sizeof(jv)) / (uint64_t)times)
        return jfail_st(e->c, TS_ERR_UNSUPPORTED, "list repetition exceeds the template's memory budget");
    if (jcharge(e->c, n * (uint64_t)times) || jv_list(e->c, n * (size_t)times, NULL, seq.u.l->tuple, out)) return -1;
    for (int64_t i = 0; i < times; i++) memcpy(out->u.l->items + i * n, seq.u.l->items, n * sizeof(jv));
    return 0;
}

static int arith_int(ev *e, int op, int64_t a, int64_t b, jv *out) {
    int64_t r;
    switch (op) {
    case JOP_ADD: if (__builtin_add_overflow(a, b, &r)) goto overflow; break;
    case JOP_SUB: if (__builtin_sub_overflow(a, b, &r)) goto overflow; break;
    case JOP_MUL: if (__builtin_mul_overflow(a, b, &r)) goto overflow; break;
    case JOP_DIV:
        if (!b) return jfail(e->c, "division by zero");
        *out = jv_float((double)a / (double)b);
        return 0;
    case JOP_FLOORDIV:
    case JOP_MOD:
        if (!b) return jfail(e->c, op == JOP_MOD ? "integer modulo by zero" : "integer division or modulo by zero");
        if (a == INT64_MIN && b == -1) goto overflow;
        r = op == JOP_FLOORDIV ? a / b : a % b;
        if (op == JOP_FLOORDIV && (a % b) && ((a < 0) != (b < 0))) r--;
        if (op == JOP_MOD && r && ((r < 0) != (b < 0))) r += b;
        break;
    case JOP_POW:
        if (b < 0) {
            *out = jv_float(pow((double)a, (double)b));
            return 0;
        }
        r = 1;
        for (int64_t i = 0; i < b; i++) {
            if (__builtin_mul_overflow(r, a, &r)) goto overflow;
            if (r == 0 || r == 1) break;
            if (jcharge(e->c, 1)) return -1;
        }
        if (r == 1 && a == -1 && (b & 1)) r = -1;
        break;
    default: return jfail(e->c, "bad operator");
    }
    *out = jv_int(r);
    return 0;
overflow:
    return jfail(e->c, "integer overflow in '%s' (values beyond 64 bits are not supported)", op_sym(op));
}

static int arith(ev *e, int op, jv a, jv b, jv *out) {
    if (a.k == JV_UNDEF) return undefined_error(e, a);
    if (b.k == JV_UNDEF) return undefined_error(e, b);
    if (is_num(a) && is_num(b)) {
        if (a.k != JV_FLOAT && b.k != JV_FLOAT) return arith_int(e, op, num_i(a), num_i(b), out);
        double x = num_f(a), y = num_f(b), r;
        switch (op) {
        case JOP_ADD: r = x + y; break;
        case JOP_SUB: r = x - y; break;
        case JOP_MUL: r = x * y; break;
        case JOP_DIV:
            if (y == 0) return jfail(e->c, "float division by zero");
            r = x / y;
            break;
        case JOP_FLOORDIV:
            if (y == 0) return jfail(e->c, "float floor division by zero");
            r = floor(x / y);
            break;
        case JOP_MOD:
            if (y == 0) return jfail(e->c, "float modulo");
            r = fmod(x, y);
            if (r != 0 && ((r < 0) != (y < 0))) r += y;
            break;
        case JOP_POW:
            if (x == 0 && y < 0) return jfail(e->c, "0.0 cannot be raised to a negative power");
            r = pow(x, y);
            break;
        default: return jfail(e->c, "bad operator");
        }
        *out = jv_float(r);
        return 0;
    }
    if (op == JOP_ADD && a.k == JV_STR && b.k == JV_STR) {
        jbuf buf;
        jbuf_init(&buf, e->c);
        if (jbuf_put(&buf, a.u.s->s, a.u.s->len) || jbuf_put(&buf, b.u.s->s, b.u.s->len)) {
            jbuf_free(&buf);
            return -1;
        }
        return jbuf_to_str(&buf, out);
    }
    if (op == JOP_ADD && a.k == JV_LIST && b.k == JV_LIST && !a.u.l->tuple == !b.u.l->tuple) {
        size_t n = a.u.l->n + b.u.l->n;
        if (jcharge(e->c, n) || jv_list(e->c, n, NULL, a.u.l->tuple, out)) return -1;
        if (a.u.l->n) memcpy(out->u.l->items, a.u.l->items, a.u.l->n * sizeof(jv));
        if (b.u.l->n) memcpy(out->u.l->items + a.u.l->n, b.u.l->items, b.u.l->n * sizeof(jv));
        return 0;
    }
    if (op == JOP_MUL && (a.k == JV_STR || a.k == JV_LIST) && (b.k == JV_INT || b.k == JV_BOOL))
        return repeat(e, a, num_i(b), out);
    if (op == JOP_MUL && (b.k == JV_STR || b.k == JV_LIST) && (a.k == JV_INT || a.k == JV_BOOL))
        return repeat(e, b, num_i(a), out);
    if (op == JOP_MOD && a.k == JV_STR) {
        jargs args = {1, &b, 0, NULL, NULL};
        if (b.k == JV_LIST && b.u.l->tuple) args = (jargs){(int)b.u.l->n, b.u.l->items, 0, NULL, NULL};
        int r = jb_filter(e->c, "format", a, &args, out);
        return r == -2 ? type_error(e, op, a, b) : r;
    }
    return type_error(e, op, a, b);
}

static int contains(ev *e, jv container, jv item, int *out) {
    switch (container.k) {
    case JV_UNDEF: *out = 0; return 0; /* jinja2's Undefined iterates as empty */
    case JV_STR:
        if (item.k == JV_UNDEF) return undefined_error(e, item);
        if (item.k != JV_STR)
            return jfail(e->c, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        if (jcharge(e->c, container.u.s->len / 64 + 1)) return -1;
        *out = item.u.s->len == 0 || strstr(container.u.s->s, item.u.s->s) != NULL;
        /* strstr stops at a NUL inside the text; templates' strings hold none in practice, but be exact */
        if (!*out && memchr(container.u.s->s, 0, container.u.s->len)) {
            const char *h = container.u.s->s;
            size_t hn = container.u.s->len, nn = item.u.s->len;
            for (size_t i = 0; i + nn <= hn && !*out; i++) *out = !memcmp(h + i, item.u.s->s, nn);
        }
        return 0;
    case JV_LIST:
        *out = 0;
        if (jcharge(e->c, container.u.l->n)) return -1;
        for (size_t i = 0; i < container.u.l->n && !*out; i++) *out = jv_equal(container.u.l->items[i], item);
        return 0;
    case JV_DICT:
    case JV_NS:
        *out = jv_dict_get(&container, item) != NULL;
        return 0;
    default:
        return jfail(e->c, "argument of type '%s' is not iterable", jv_type_name(container));
    }
}

static int compare(ev *e, const jnode *n, jv *out) {
    jv left;
    if (eval(e, n->a, &left)) return -1;
    for (int i = 0; i < n->nargs; i++) {
        jv right;
        int r = 0;
        if (eval(e, n->args[i], &right)) return -1;
        at(e, n);
        switch (n->ops[i]) {
        case JOP_EQ: r = jv_equal(left, right); break;
        case JOP_NE: r = !jv_equal(left, right); break;
        case JOP_IN:
        case JOP_NOTIN:
            if (contains(e, right, left, &r)) return -1;
            if (n->ops[i] == JOP_NOTIN) r = !r;
            break;
        default: {
            int c;
            if (left.k == JV_UNDEF) return undefined_error(e, left);
            if (right.k == JV_UNDEF) return undefined_error(e, right);
            if (jv_compare(e->c, left, right, &c)) return -1;
            r = n->ops[i] == JOP_LT ? c < 0 : n->ops[i] == JOP_LE ? c <= 0 : n->ops[i] == JOP_GT ? c > 0 : c >= 0;
        }
        }
        if (!r) {
            *out = jv_bool(0);
            return 0;
        }
        left = right;
    }
    *out = jv_bool(1);
    return 0;
}

/* ---- calls ---------------------------------------------------------------------------------- */

typedef struct argv_ {
    jv *pos;
    jv *kval;
    jargs a;
} argv_;

static int eval_args(ev *e, const jnode *n, argv_ *av) {
    av->pos = n->nargs ? jalloc(e->c, sizeof(jv) * (size_t)n->nargs) : NULL;
    av->kval = n->nkargs ? jalloc(e->c, sizeof(jv) * (size_t)n->nkargs) : NULL;
    if ((n->nargs && !av->pos) || (n->nkargs && !av->kval)) return -1;
    for (int i = 0; i < n->nargs; i++)
        if (eval(e, n->args[i], &av->pos[i])) return -1;
    for (int i = 0; i < n->nkargs; i++)
        if (eval(e, n->kargs[i], &av->kval[i])) return -1;
    av->a = (jargs){n->nargs, av->pos, n->nkargs, n->knames, av->kval};
    return 0;
}

static int render_into(ev *e, jnode *const *body, int nbody, jv *out) {
    jbuf b, *saved = e->out;
    jbuf_init(&b, e->c);
    e->out = &b;
    int r = exec_body(e, body, nbody);
    e->out = saved;
    if (r < 0) {
        jbuf_free(&b);
        return -1;
    }
    return jbuf_to_str(&b, out);
}

static int call_macro(ev *e, const jnode *call, jv mv, const jargs *a, jv *out) {
    const jmacro *m = mv.u.p;
    const jnode *d = m->def;
    if (a->n > d->nargs) {
        at(e, call);
        return jfail(e->c, "macro '%s' takes not more than %d argument(s)", d->name, d->nargs);
    }
    if (++e->c->depth > e->c->max_depth) {
        at(e, call);
        return jfail_st(e->c, TS_ERR_UNSUPPORTED, "macro calls nested deeper than %d (runaway recursion?)",
                        e->c->max_depth);
    }
    scope *s, *saved = e->sc;
    if (new_scope(e, m->defscope, &s)) return -1;
    e->sc = s;
    int r = 0;
    for (int k = 0; k < a->nk && !r; k++) {
        int found = 0;
        for (int i = 0; i < d->nargs; i++) found |= !strcmp(d->args[i]->name, a->kname[k]);
        if (!found) {
            at(e, call);
            r = jfail(e->c, "macro '%s' takes no keyword argument '%s'", d->name, a->kname[k]);
        }
    }
    for (int i = 0; i < d->nargs && !r; i++) {
        jv v;
        int have = 0;
        if (i < a->n) {
            v = a->pos[i];
            have = 1;
        }
        for (int k = 0; k < a->nk; k++)
            if (!strcmp(d->args[i]->name, a->kname[k])) {
                if (have) {
                    at(e, call);
                    r = jfail(e->c, "macro '%s' got multiple values for argument '%s'", d->name, a->kname[k]);
                }
                v = a->kval[k];
                have = 1;
            }
        if (r) break;
        if (!have) {
            if (d->kargs[i]) r = eval(e, d->kargs[i], &v);
            else v = jv_undef(hintf(e->c, "parameter '", d->args[i]->name, "' was not provided", "", ""));
        }
        if (!r) r = set_name(e, d->args[i]->name, v);
    }
    if (!r) r = render_into(e, d->body, d->nbody, out);
    e->sc = saved;
    e->c->depth--;
    return r;
}

static int loop_call(ev *e, const jnode *n, const jbound *b, const jargs *a, jv *out) {
    jloop *L = b->self->u.p;
    if (!strcmp(b->name, "cycle")) {
        if (!a->n) {
            at(e, n);
            return jfail(e->c, "no items for cycling given");
        }
        *out = a->pos[L->index0 % a->n];
        return 0;
    }
    jv cur;
    if (jv_list(e->c, (size_t)a->n, a->pos, 1, &cur)) return -1;
    int changed = !L->has_changed || !jv_equal(cur, L->last_changed);
    L->last_changed = cur;
    L->has_changed = 1;
    *out = jv_bool(changed);
    return 0;
}

static int eval_call(ev *e, const jnode *n, jv *out) {
    jv f;
    argv_ av;
    if (eval(e, n->a, &f) || eval_args(e, n, &av)) return -1;
    at(e, n);
    switch (f.k) {
    case JV_FUNC: return jb_call_func(e->c, f.u.fn, &av.a, out);
    case JV_BOUND:
        if (f.u.bm->self->k == JV_LOOP) return loop_call(e, n, f.u.bm, &av.a, out);
        return jb_call_bound(e->c, f.u.bm, &av.a, out);
    case JV_MACRO: return call_macro(e, n, f, &av.a, out);
    case JV_UNDEF: return undefined_error(e, f);
    default: return jfail(e->c, "'%s' object is not callable", jv_type_name(f));
    }
}

/* A filter node; input: the value being filtered (the body's text for block filters). */
static int apply_filter(ev *e, const jnode *f, jv input, jv *out) {
    if (f->a) {
        if (eval(e, f->a, &input)) return -1;
    }
    argv_ av;
    if (eval_args(e, f, &av)) return -1;
    at(e, f);
    int r = jb_filter(e->c, f->name, input, &av.a, out);
    if (r == -2) return jfail(e->c, "no filter named '%s'", f->name);
    return r;
}

/* Block filters: the chain's innermost filter (a == NULL) reads the text. */
static int apply_chain(ev *e, const jnode *f, jv text, jv *out) {
    if (!f) {
        *out = text;
        return 0;
    }
    jv inner;
    if (f->a) {
        if (apply_chain(e, f->a, text, &inner)) return -1;
    } else {
        inner = text;
    }
    argv_ av;
    if (eval_args(e, f, &av)) return -1;
    at(e, f);
    int r = jb_filter(e->c, f->name, inner, &av.a, out);
    if (r == -2) return jfail(e->c, "no filter named '%s'", f->name);
    return r;
}

/* ---- expressions ---------------------------------------------------------------------------- */

static int eval_seq(ev *e, const jnode *n, jv *out) {
    if (n->k == JE_DICT) {
        if (jv_dict_new(e->c, (size_t)n->nargs / 2 + 1, out)) return -1;
        for (int i = 0; i + 1 < n->nargs; i += 2) {
            jv k, v;
            if (eval(e, n->args[i], &k) || eval(e, n->args[i + 1], &v)) return -1;
            if (k.k == JV_LIST && !k.u.l->tuple) {
                at(e, n->args[i]);
                return jfail(e->c, "unhashable type: 'list'");
            }
            if (k.k == JV_DICT || k.k == JV_NS) {
                at(e, n->args[i]);
                return jfail(e->c, "unhashable type: 'dict'");
            }
            if (jv_dict_set(e->c, out, k, v)) return -1;
        }
        return 0;
    }
    if (jv_list(e->c, (size_t)n->nargs, NULL, n->k == JE_TUPLE, out)) return -1;
    for (int i = 0; i < n->nargs; i++)
        if (eval(e, n->args[i], &out->u.l->items[i])) return -1;
    return 0;
}

static int eval(ev *e, const jnode *n, jv *out) {
    jctx *c = e->c;
    if (jcharge(c, 1)) return -1;
    switch (n->k) {
    case JE_CONST: *out = n->cval; return 0;
    case JE_NAME: return lookup(e, n, out);
    case JE_ATTR: {
        jv obj;
        if (eval(e, n->a, &obj)) return -1;
        at(e, n);
        return get_attr(e, obj, n->name, out);
    }
    case JE_ITEM: {
        jv obj, key;
        if (eval(e, n->a, &obj) || eval(e, n->b, &key)) return -1;
        at(e, n);
        return get_item(e, obj, key, out);
    }
    case JE_SLICE: return eval_slice(e, n, out);
    case JE_CALL: return eval_call(e, n, out);
    case JE_FILTER: return apply_filter(e, n, jv_undef(NULL), out);
    case JE_TEST: {
        jv v;
        argv_ av;
        int r, res = 0;
        if (eval(e, n->a, &v) || eval_args(e, n, &av)) return -1;
        at(e, n);
        r = jb_test(c, n->name, v, &av.a, &res);
        if (r == -2) return jfail(c, "no test named '%s'", n->name);
        if (r) return -1;
        *out = jv_bool(n->op ? !res : res);
        return 0;
    }
    case JE_NOT: {
        jv v;
        if (eval(e, n->a, &v)) return -1;
        *out = jv_bool(!jv_truthy(v));
        return 0;
    }
    case JE_NEG:
    case JE_POS: {
        jv v;
        if (eval(e, n->a, &v)) return -1;
        at(e, n);
        if (v.k == JV_UNDEF) return undefined_error(e, v);
        if (v.k == JV_FLOAT) *out = jv_float(n->k == JE_NEG ? -v.u.f : v.u.f);
        else if (v.k == JV_INT || v.k == JV_BOOL) {
            int64_t i = num_i(v);
            if (n->k == JE_NEG && i == INT64_MIN) return jfail(c, "integer overflow in unary '-'");
            *out = jv_int(n->k == JE_NEG ? -i : i);
        } else
            return jfail(c, "bad operand type for unary %s: '%s'", n->k == JE_NEG ? "-" : "+", jv_type_name(v));
        return 0;
    }
    case JE_BINOP: {
        jv a, b;
        if (eval(e, n->a, &a) || eval(e, n->b, &b)) return -1;
        at(e, n);
        return arith(e, n->op, a, b, out);
    }
    case JE_AND:
    case JE_OR: {
        jv a;
        if (eval(e, n->a, &a)) return -1;
        if (jv_truthy(a) == (n->k == JE_OR)) {
            *out = a;
            return 0;
        }
        return eval(e, n->b, out);
    }
    case JE_COND: {
        jv cond;
        if (eval(e, n->a, &cond)) return -1;
        if (jv_truthy(cond)) return eval(e, n->b, out);
        if (n->c) return eval(e, n->c, out);
        *out = jv_undef("the inline if-expression on its false branch has no else section");
        return 0;
    }
    case JE_COMPARE: return compare(e, n, out);
    case JE_CONCAT: {
        jbuf b;
        jbuf_init(&b, c);
        for (int i = 0; i < n->nargs; i++) {
            jv v;
            if (eval(e, n->args[i], &v) || jv_write_str(&b, v)) {
                jbuf_free(&b);
                return -1;
            }
        }
        return jbuf_to_str(&b, out);
    }
    case JE_LIST:
    case JE_TUPLE:
    case JE_DICT: return eval_seq(e, n, out);
    default: at(e, n); return jfail(c, "internal error: statement where an expression was expected");
    }
}

/* ---- statements ----------------------------------------------------------------------------- */

/* The items a for loop (or an unpacking) walks, as builtins' jb_iter gives them: a list's
 * items, a dict's keys, a string's characters, nothing for undefined. */
static int iter_items(ev *e, const char *who, jv v, jlist **out) {
    const jv *items;
    size_t n;
    if (jb_iter(e->c, who, v, &items, &n) < 0) return -1;
    jlist *l = jalloc(e->c, sizeof *l);
    if (!l) return -1;
    l->n = n;
    l->items = (jv *)items; /* read only here: loops and unpacking never write into it */
    *out = l;
    return 0;
}

static int assign(ev *e, const jnode *target, jv v) {
    if (target->k == JE_NAME) return set_name(e, target->name, v);
    if (target->k == JE_ATTR) {
        jv ns;
        if (lookup(e, target->a, &ns)) return -1;
        at(e, target);
        if (ns.k != JV_NS) return jfail(e->c, "cannot assign attribute on non-namespace object");
        if (target->name[0] == '_')
            return jfail(e->c, "chat templates cannot store underscore-prefixed attributes on a namespace ('%s')",
                         target->name);
        jv k;
        return jv_cstr(e->c, target->name, &k) || jv_dict_set(e->c, &ns, k, v);
    }
    /* tuple of names */
    jlist *items;
    at(e, target);
    if (v.k == JV_UNDEF) return undefined_error(e, v);
    if (iter_items(e, "unpacking", v, &items)) return -1;
    if ((int)items->n != target->nargs)
        return (int)items->n > target->nargs
                   ? jfail(e->c, "too many values to unpack (expected %d)", target->nargs)
                   : jfail(e->c, "not enough values to unpack (expected %d, got %zu)", target->nargs, items->n);
    for (int i = 0; i < target->nargs; i++)
        if (assign(e, target->args[i], items->items[i])) return -1;
    return 0;
}

static int exec_for(ev *e, const jnode *n) {
    jv seq;
    jlist *items;
    if (eval(e, n->a, &seq)) return -1;
    at(e, n->a);
    if (iter_items(e, "for", seq, &items)) return -1;
    scope *saved = e->sc, *s;
    if (new_scope(e, saved, &s)) return -1;
    e->sc = s;
    int r = 0;
    if (n->b) { /* {% for x in xs if cond %}: the loop (and loop.length) sees only what passes */
        jv kept;
        size_t m = 0;
        if (jv_list(e->c, items->n, NULL, 0, &kept)) r = -1;
        for (size_t i = 0; i < items->n && !r; i++) {
            jv cond;
            s->d.u.d->n = 0;
            if (assign(e, n->target, items->items[i]) || eval(e, n->b, &cond)) r = -1;
            else if (jv_truthy(cond)) kept.u.l->items[m++] = items->items[i];
        }
        if (!r) {
            kept.u.l->n = m;
            items = kept.u.l;
        }
    }
    jloop *L = r ? NULL : jalloc(e->c, sizeof *L);
    if (!r && !L) r = -1;
    if (!r) {
        L->items = items;
        L->depth = 1;
        jv lv = {JV_LOOP, {0}, NULL};
        lv.u.p = L;
        for (size_t i = 0; i < items->n; i++) {
            if (jcharge(e->c, 1)) {
                r = -1;
                break;
            }
            s->d.u.d->n = 0; /* a fresh scope per iteration, as jinja2 */
            L->index0 = (int64_t)i;
            if (set_name(e, "loop", lv) || assign(e, n->target, items->items[i])) {
                r = -1;
                break;
            }
            int f = exec_body(e, n->body, n->nbody);
            if (f < 0) {
                r = -1;
                break;
            }
            if (f == FLOW_BREAK) break;
        }
    }
    e->sc = saved;
    if (!r && !items->n && n->norelse) r = exec_body(e, n->orelse, n->norelse) < 0 ? -1 : 0;
    return r;
}

static int exec_stmt(ev *e, const jnode *n) {
    jctx *c = e->c;
    if (jcharge(c, 1)) return -1;
    switch (n->k) {
    case JN_DATA: return jbuf_put(e->out, n->cval.u.s->s, n->cval.u.s->len);
    case JN_OUTPUT: {
        jv v;
        if (eval(e, n->a, &v)) return -1;
        return jv_write_str(e->out, v);
    }
    case JN_IF: {
        jv cond;
        if (eval(e, n->a, &cond)) return -1;
        return jv_truthy(cond) ? exec_body(e, n->body, n->nbody) : exec_body(e, n->orelse, n->norelse);
    }
    case JN_FOR: return exec_for(e, n);
    case JN_SET: {
        jv v;
        if (eval(e, n->a, &v)) return -1;
        return assign(e, n->target, v);
    }
    case JN_SETBLOCK: {
        jv text, v;
        if (render_into(e, n->body, n->nbody, &text) || apply_chain(e, n->filters, text, &v)) return -1;
        return assign(e, n->target, v);
    }
    case JN_FILTERBLOCK: {
        jv text, v;
        if (render_into(e, n->body, n->nbody, &text) || apply_chain(e, n->filters, text, &v)) return -1;
        return jv_write_str(e->out, v);
    }
    case JN_MACRO: {
        jmacro *m = jalloc(c, sizeof *m);
        if (!m) return -1;
        m->def = n;
        m->defscope = e->sc;
        jv v = {JV_MACRO, {0}, NULL};
        v.u.p = m;
        return set_name(e, n->name, v);
    }
    case JN_WITH: {
        scope *saved = e->sc, *s;
        jv *vals = jalloc(c, sizeof(jv) * (size_t)(n->nargs + 1));
        if (!vals) return -1;
        for (int i = 0; i < n->nargs; i++) /* values see the outer scope, as in jinja2 */
            if (eval(e, n->kargs[i], &vals[i])) return -1;
        if (new_scope(e, saved, &s)) return -1;
        e->sc = s;
        int r = 0;
        for (int i = 0; i < n->nargs && !r; i++) r = assign(e, n->args[i], vals[i]);
        if (!r) r = exec_body(e, n->body, n->nbody);
        e->sc = saved;
        return r;
    }
    case JN_SCOPE: return exec_body(e, n->body, n->nbody);
    case JN_BREAK: return FLOW_BREAK;
    case JN_CONTINUE: return FLOW_CONTINUE;
    default: at(e, n); return jfail(c, "internal error: expression where a statement was expected");
    }
}

static int exec_body(ev *e, jnode *const *body, int n) {
    for (int i = 0; i < n; i++) {
        int r = exec_stmt(e, body[i]);
        if (r) return r; /* error, break or continue: up to the enclosing loop */
    }
    return FLOW_NORMAL;
}

int jeval(jctx *c, jnode **body, int nbody, jv vars, jbuf *out) {
    scope globals = {NULL, vars}, *top;
    ev e = {c, out, &globals};
    if (new_scope(&e, &globals, &top)) return -1;
    e.sc = top;
    int r = exec_body(&e, body, nbody);
    if (r > 0) {
        c->line = c->col = 0;
        return jfail(c, "'break' or 'continue' outside a loop");
    }
    return r;
}
