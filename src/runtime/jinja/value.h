/* Values of the Jinja interpreter and the render context they live in. Python semantics
 * throughout (jinja2 evaluates templates as Python): str() and repr() of lists and dicts,
 * truthiness, == across int and float, strings measured and sliced in code points.
 *
 * Memory: every value of one render is carved from that render's arena (jctx) and freed with
 * it, so values are plain structs copied by value with no reference counts. The arena and
 * the output share one byte budget; running out is an error, never a crash. Lists and dicts
 * are immutable once built (transformers renders in jinja2's ImmutableSandboxedEnvironment);
 * only namespace objects change, through {% set ns.attr = ... %}. */
#ifndef TS_RUNTIME_JINJA_VALUE_H
#define TS_RUNTIME_JINJA_VALUE_H
#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/utf8.h"
#include "tessera.h"

typedef enum jv_kind {
    JV_UNDEF = 0, /* jinja2's Undefined: prints "", falsy, iterates empty; most other uses fail */
    JV_NONE,
    JV_BOOL,
    JV_INT,   /* int64; arithmetic that overflows is an error (Python would grow) */
    JV_FLOAT,
    JV_STR,
    JV_LIST,  /* also tuples (jlist.tuple): they differ only in repr */
    JV_DICT,  /* insertion-ordered */
    JV_NS,    /* namespace(): a dict whose attributes {% set ns.x %} may change */
    JV_FUNC,  /* a global function (range, namespace, dict, raise_exception, strftime_now) */
    JV_BOUND, /* a method looked up on a value ("abc".upper, d.items), called later */
    JV_MACRO, /* a {% macro %} (owned by the evaluator) */
    JV_LOOP,  /* the `loop` object of a for loop (owned by the evaluator) */
} jv_kind;

typedef struct jstr {
    size_t len;    /* bytes */
    size_t nchars; /* code points (== len for ASCII) */
    char s[];      /* UTF-8, NUL-terminated */
} jstr;

struct jv;
typedef struct jlist {
    size_t n;
    int tuple; /* 1: a tuple; 2: groupby's (grouper, list) pair, which also has those two attributes */
    struct jv *items;
} jlist;

typedef struct jdict {
    size_t n, cap;
    struct jv *keys;
    struct jv *vals;
    /* Open-addressing index (entry + 1, 0 = empty) built once n > 16, so that a hostile
     * template's big dict is not quadratic to fill; NULL while the dict is small. */
    uint32_t *hidx;
    size_t hcap;
} jdict;

typedef struct jbound {
    struct jv *self;
    const char *name; /* method name, static storage or arena */
} jbound;

typedef struct jv {
    jv_kind k;
    union {
        int b;
        int64_t i;
        double f;
        jstr *s;
        jlist *l;
        jdict *d;           /* JV_DICT and JV_NS */
        const char *fn;     /* JV_FUNC: the global's name */
        jbound *bm;         /* JV_BOUND */
        void *p;            /* JV_MACRO, JV_LOOP: evaluator structs */
    } u;
    /* JV_UNDEF only: what was looked up, for the message when it is used ("'x' is undefined",
     * "'dict object' has no attribute 'y'"); may be NULL. */
    const char *hint;
} jv;

/* ---- render context ---------------------------------------------------------------------- */

typedef struct jarena_block jarena_block;

typedef struct jctx {
    ts_error *err;
    ts_status status;       /* the status of the error in err, once one happened */
    jarena_block *blocks;
    size_t used_bytes, max_bytes; /* arena + output buffers together */
    uint64_t steps, max_steps;
    int depth, max_depth;
    int64_t now;            /* strftime_now's clock, seconds since the epoch (UTC) */
    const char *what;       /* template name for messages */
    int line, col;          /* position being evaluated, for messages */
} jctx;

void jctx_init(jctx *c, ts_error *err, const char *what, size_t max_bytes, uint64_t max_steps,
               int max_depth, int64_t now);
void jctx_free(jctx *c);
/* Arena memory, 16-byte aligned, zeroed; NULL (with the error set) past the budget. */
void *jalloc(jctx *c, size_t n);
/* Charge n steps of work; -1 (error set) past the budget. Builtins that loop over their input
 * charge per element, so no filter call is an unbounded amount of work for one step. */
int jcharge(jctx *c, uint64_t n);
/* Set the error: TS_ERR_FORMAT, message "what:line:col: ..." ; returns -1. */
int jfail(jctx *c, const char *fmt, ...) TS_PRINTF(2, 3);
/* Same with another status (TS_ERR_ARG for raise_exception, TS_ERR_UNSUPPORTED for budgets). */
int jfail_st(jctx *c, ts_status st, const char *fmt, ...) TS_PRINTF(3, 4);

/* Growable byte buffer (malloc), charged against the context's byte budget. */
typedef struct jbuf {
    jctx *c;
    char *p;
    size_t n, cap;
} jbuf;
void jbuf_init(jbuf *b, jctx *c);
int jbuf_put(jbuf *b, const char *s, size_t n);
int jbuf_puts(jbuf *b, const char *s);
int jbuf_printf(jbuf *b, const char *fmt, ...) TS_PRINTF(2, 3);
/* The contents as an arena string; frees the buffer. */
int jbuf_to_str(jbuf *b, jv *out);
void jbuf_free(jbuf *b);

/* ---- constructors ---------------------------------------------------------------------- */

static inline jv jv_undef(const char *hint) { jv v = {JV_UNDEF, {0}, hint}; return v; }
static inline jv jv_none(void) { jv v = {JV_NONE, {0}, NULL}; return v; }
static inline jv jv_bool(int b) { jv v = {JV_BOOL, {0}, NULL}; v.u.b = !!b; return v; }
static inline jv jv_int(int64_t i) { jv v = {JV_INT, {0}, NULL}; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {JV_FLOAT, {0}, NULL}; v.u.f = f; return v; }
/* Copies s (n bytes, must be valid UTF-8) into the arena. */
int jv_str(jctx *c, const char *s, size_t n, jv *out);
int jv_cstr(jctx *c, const char *s, jv *out);
/* A list of n items copied from items (may be NULL: n undefined slots to fill). */
int jv_list(jctx *c, size_t n, const jv *items, int tuple, jv *out);
int jv_dict_new(jctx *c, size_t cap, jv *out);       /* kind JV_DICT */
int jv_ns_new(jctx *c, jv *out);                     /* kind JV_NS */
/* Sets key (replacing an equal key in place, keeping its position, as Python dicts do). */
int jv_dict_set(jctx *c, jv *d, jv key, jv val);
/* The value under key, or NULL. */
const jv *jv_dict_get(const jv *d, jv key);
const jv *jv_dict_gets(const jv *d, const char *key);

/* ---- Python semantics --------------------------------------------------------------------- */

const char *jv_type_name(jv v); /* Python's: 'str', 'int', 'list', 'dict', 'NoneType', ... */
int jv_truthy(jv v);
int jv_equal(jv a, jv b); /* ==, deep, 1 == 1.0 == True */
/* <, for sorting and comparisons: *out = -1/0/1; error for unorderable types
 * ("'<' not supported between instances of 'str' and 'int'"). */
int jv_compare(jctx *c, jv a, jv b, int *out);
/* str(v) as jinja2 prints it: None -> "None", True -> "True", undefined -> "", lists and
 * dicts as their repr; floats as Python's repr (shortest round-trip, "1.0", "1e-05", "inf"). */
int jv_to_str(jctx *c, jv v, jv *out);
int jv_write_str(jbuf *b, jv v);
int jv_write_repr(jbuf *b, jv v); /* repr(v): strings quoted the way Python quotes them */
/* json.dumps(v, ensure_ascii, indent (<0 = None), separators (NULL = default), sort_keys).
 * Only none/bool/int/float/str/list/dict serialize; anything else is a TypeError as in Python
 * ("Object of type Namespace is not JSON serializable"); undefined too. */
int jv_write_json(jbuf *b, jv v, int ensure_ascii, int indent, const char *item_sep,
                  const char *key_sep, int sort_keys);
/* A JSON value (jansson) as a template value: objects become dicts in their order. */
int jv_from_json(jctx *c, const json_t *j, jv *out);

/* Code-point helpers for str methods and slicing. */
size_t jutf8_count(const char *s, size_t n);
/* Byte offset of code point index cp in s (cp <= nchars). */
size_t jutf8_offset(const jstr *s, size_t cp);
/* Byte length of the longest valid UTF-8 prefix of s (== n when all of it is valid). */
size_t jutf8_valid(const char *s, size_t n);
/* The code point at s[*i] (valid UTF-8, *i < n) and *i moved past it. */
uint32_t jutf8_next(const char *s, size_t *i);
/* jv_str for bytes already known to be valid UTF-8 (built from valid pieces): no check. */
int jv_str_trusted(jctx *c, const char *s, size_t n, jv *out);
/* Python's repr of a float ("1.0", "1e-05", "inf"); buf needs 32 bytes; returns the length. */
int jv_float_repr(double f, char *buf);
/* The message of an error about using an undefined value (its hint, or a generic one). */
int jv_undef_fail(jctx *c, jv v);

/* ---- builtins (builtins.c) ------------------------------------------------------------------
 * Arguments of a call: positional then keyword, as written in the template. */
typedef struct jargs {
    int n;
    const jv *pos;
    int nk;
    const char *const *kname;
    const jv *kval;
} jargs;

/* Return 0 with *out set, -1 on error (c has it), -2 when no builtin has that name (the
 * evaluator reports "no filter named 'x'" with the position). */
int jb_filter(jctx *c, const char *name, jv self, const jargs *a, jv *out);
int jb_test(jctx *c, const char *name, jv self, const jargs *a, int *out);
/* Attribute lookup that finds a method (str.upper, dict.items, ...): 0 and *out a JV_BOUND,
 * -2 when the type has no such method. Sandboxed methods that would mutate (list.append,
 * dict.update, ...) are an error ("access to attribute 'append' of 'list' object is unsafe"). */
int jb_method_lookup(jctx *c, jv self, const char *name, jv *out);
int jb_call_bound(jctx *c, const jbound *m, const jargs *a, jv *out);
/* Globals: 0 with *out a JV_FUNC when name is one (range, namespace, dict, raise_exception,
 * strftime_now, lipsum/cycler/joiner are not provided), else -2. */
int jb_global(jctx *c, const char *name, jv *out);
int jb_call_func(jctx *c, const char *fn, const jargs *a, jv *out);

#endif
