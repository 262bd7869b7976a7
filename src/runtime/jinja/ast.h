/* The parsed form of a template: tokens (lex.c), syntax tree nodes (parse.c), evaluated by
 * eval.c. Everything here lives in the template's pool and is freed with the template. */
#ifndef TS_RUNTIME_JINJA_AST_H
#define TS_RUNTIME_JINJA_AST_H
#include <stddef.h>
#include <stdint.h>

#include "runtime/jinja/value.h"

/* ---- pool: parse-time memory, freed with the template ------------------------------------ */
typedef struct jpool_block jpool_block;
typedef struct jpool {
    jpool_block *head;
} jpool;
void *jpool_alloc(jpool *p, size_t n); /* zeroed; NULL when out of memory */
void jpool_free(jpool *p);

/* ---- tokens -------------------------------------------------------------------------------- */
typedef enum jtok_kind {
    JT_EOF = 0,
    JT_DATA,        /* template text, whitespace control already applied */
    JT_VAR_BEGIN,   /* {{ */
    JT_VAR_END,     /* }} */
    JT_BLOCK_BEGIN, /* {% */
    JT_BLOCK_END,   /* %} */
    JT_NAME,
    JT_STRING,      /* escapes decoded */
    JT_INT,
    JT_FLOAT,
    JT_OP,          /* one of + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : | */
} jtok_kind;

typedef struct jtok {
    jtok_kind k;
    int line, col;
    const char *s; /* DATA, NAME, STRING (pool copy, NUL-terminated), OP (static) */
    size_t n;
    int64_t i;
    double f;
} jtok;

/* Tokenizes src (already newline-normalized by the caller) with jinja2's trim_blocks and
 * lstrip_blocks rules. 0, or -1 with err set (TS_ERR_FORMAT naming what:line:col). */
int jlex(jpool *p, const char *src, size_t len, const char *what, jtok **out, size_t *n, ts_error *err);

/* ---- syntax tree --------------------------------------------------------------------------- */
typedef enum jnode_kind {
    /* statements */
    JN_DATA = 1,  /* literal text: cval */
    JN_OUTPUT,    /* {{ a }} */
    JN_IF,        /* a: cond, body: then, orelse: else (elif nests an JN_IF there) */
    JN_FOR,       /* target, a: iterable, b: filter or NULL, body, orelse */
    JN_SET,       /* target, a: value */
    JN_SETBLOCK,  /* target, body, filters: a chain of JE_FILTER applied to the body's text */
    JN_MACRO,     /* name, params (names) with defaults (args, NULL where none), body */
    JN_BREAK,
    JN_CONTINUE,
    JN_FILTERBLOCK, /* filters applied to the body's text */
    JN_WITH,      /* targets/args assigned in a new scope, body */
    JN_SCOPE,     /* body rendered as is ({% generation %}) */
    /* expressions */
    JE_CONST,     /* cval */
    JE_NAME,      /* name */
    JE_ATTR,      /* a.name */
    JE_ITEM,      /* a[b] */
    JE_SLICE,     /* a[b:c:d]: args[0..2] may be NULL */
    JE_CALL,      /* a(args, kwargs) */
    JE_FILTER,    /* a | name(args, kwargs); a NULL inside a filter block */
    JE_TEST,      /* a is [not] name(args) ; op = 1 for "is not" */
    JE_NOT,
    JE_NEG,
    JE_POS,
    JE_BINOP,     /* a op b: op is one of + - * / // % ** */
    JE_AND,
    JE_OR,
    JE_COND,      /* b if a else c (c may be NULL: undefined) */
    JE_COMPARE,   /* a then (ops[i], args[i]) for i < nargs */
    JE_CONCAT,    /* args joined by ~ */
    JE_LIST,
    JE_TUPLE,
    JE_DICT,      /* args: key, value, key, value, ... */
} jnode_kind;

enum { JOP_ADD = 1, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW,
       JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN };

typedef struct jnode jnode;
struct jnode {
    jnode_kind k;
    int line, col;
    int op;
    const char *name;
    jnode *a, *b, *c;
    jnode *target;        /* JN_FOR / JN_SET / JN_SETBLOCK: JE_NAME, JE_TUPLE of names, JE_ATTR */
    jnode **args;         /* call/filter/test positional arguments; list/tuple/dict items */
    int nargs;
    const char **knames;  /* keyword arguments */
    jnode **kargs;
    int nkargs;
    int *ops;             /* JE_COMPARE */
    jnode **body;
    int nbody;
    jnode **orelse;
    int norelse;
    jnode *filters;       /* JN_SETBLOCK / JN_FILTERBLOCK: innermost JE_FILTER has a == NULL */
    jv cval;
};

/* Parses the token stream into the template's statement list. */
int jparse(jpool *p, const jtok *toks, size_t n, const char *what, jnode ***body, int *nbody,
           ts_error *err);

/* Renders body into out (a jbuf of c) with vars (a JV_DICT) as the globals. */
int jeval(jctx *c, jnode **body, int nbody, jv vars, jbuf *out);

#endif
