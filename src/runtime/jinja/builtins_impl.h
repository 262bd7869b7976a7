/* Helpers shared by the builtin filters, tests, methods and globals (builtins*.c): argument
 * binding, iteration and attribute lookup with jinja2's rules, sorting, and the Python str
 * operations that both str methods and string filters are made of. Private to jinja/. */
#ifndef TS_RUNTIME_JINJA_BUILTINS_IMPL_H
#define TS_RUNTIME_JINJA_BUILTINS_IMPL_H
#include "runtime/jinja/value.h"

/* Binds a call's arguments to the parameters names[0..np-1] as Python would (positional first,
 * then by keyword): vals[i] set and bit i of *have when given. Errors name `who` ("filter
 * 'join'"): too many arguments, unknown or repeated keywords. */
int jb_bind(jctx *c, const char *who, const jargs *a, const char *const *names, int np, jv *vals,
            unsigned *have);
/* No arguments allowed. */
int jb_noargs(jctx *c, const char *who, const jargs *a);

/* The items `for x in v` visits: a list's items (borrowed), a dict's keys, a string's
 * characters, nothing for undefined; error for what is not iterable. */
int jb_iter(jctx *c, const char *who, jv v, const jv **items, size_t *n);
/* jinja2's environment.getitem(obj, key): subscript, falling back to attribute; undefined
 * (with jinja2's hint) when missing. */
int jb_getitem(jctx *c, jv obj, jv key, jv *out);
/* make_attrgetter: "a.b.0" looked up part by part (digit parts are indexes). dflt (NULL: none)
 * replaces an undefined result. */
int jb_attrpath(jctx *c, jv item, jv attr, const jv *dflt, jv *out);
/* jinja2's ignore_case: strings lowercased, anything else as is. */
int jb_ignore_case(jctx *c, jv v, jv *out);
/* Stable sort of items by keys (keys NULL: by the items), Python's sorted(..., reverse=). */
int jb_sort(jctx *c, jv *items, jv *keys, size_t n, int reverse);
/* str(v) as a jstr. */
int jb_str(jctx *c, jv v, const jstr **out);
/* An int argument (bool counts, as in Python): error naming who otherwise. */
int jb_int_arg(jctx *c, const char *who, jv v, int64_t *out);

/* Filters and tests known (for the `filter` and `test` tests). */
int jb_is_filter(const char *name);
int jb_is_test(const char *name);
/* Calls the str method `name` on s: 0, -1 error, -2 no such method. */
int jb_str_method(jctx *c, jv self, const char *name, const jargs *a, jv *out);
int jb_str_has_method(const char *name);

/* Python str operations (s is a str value). */
int jb_s_upper(jctx *c, const jstr *s, jv *out);
int jb_s_lower(jctx *c, const jstr *s, jv *out);
int jb_s_capitalize(jctx *c, const jstr *s, jv *out);
/* jinja2's title filter (not str.title): words split at '-', spaces and opening brackets. */
int jb_s_jtitle(jctx *c, const jstr *s, jv *out);
int jb_s_strip(jctx *c, const jstr *s, const jstr *chars, int left, int right, jv *out);
int jb_s_replace(jctx *c, const jstr *s, const jstr *old, const jstr *new_, int64_t count, jv *out);
int jb_s_center(jctx *c, const jstr *s, int64_t width, uint32_t fill, int how, jv *out);
int jb_s_splitlines(jctx *c, const jstr *s, int keepends, jv *out);
int jb_s_islower(const jstr *s);
int jb_s_isupper(const jstr *s);
/* Python's str % args (printf-style); args is a tuple, a single value, or a dict. */
int jb_s_percent(jctx *c, const jstr *fmt, jv args, jv *out);
/* str.format(*args, **kwargs) with simple fields ({}, {0}, {name}) and format specs. */
int jb_s_format(jctx *c, const jstr *fmt, const jargs *a, jv *out);
/* n copies of the code point fill, charged against the budgets. */
int jb_put_fill(jbuf *b, uint32_t fill, int64_t n);
/* Python's str.isspace() for one code point (what split() and strip() remove). */
int jb_py_isspace(uint32_t cp);
/* `\w` of Python's re for one code point. */
int jb_py_isword(uint32_t cp);
/* memmem (not in POSIX): the first occurrence of needle in hay, or NULL. */
const char *jb_find(const char *hay, size_t hn, const char *needle, size_t nn);
/* The code points of s in a fresh arena array (s->nchars of them). */
int jb_decode(jctx *c, const jstr *s, uint32_t **out);
/* A str value from n code points. */
int jb_encode(jctx *c, const uint32_t *cp, size_t n, jv *out);

#endif
