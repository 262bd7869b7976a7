/* Cursor-style JSON reading for the large flat sections of tokenizer.json (see tok_json.c).
 * Errors name the file, the line and column, the section and what was expected. */
#ifndef TS_TOK_JSON_H
#define TS_TOK_JSON_H
#include <stdint.h>
#include <stdio.h>

#include "tok/tok_internal.h"

typedef struct tok_jcur {
    const char *p, *b, *e; /* position, start and end of the whole buffer */
    const char *file;
    const char *where; /* section named in messages ("model.vocab"), or NULL */
    ts_error *err;
} tok_jcur;

ts_status tok_json_fail(tok_jcur *c, const char *expected);
void tok_json_ws(tok_jcur *c);
/* Skips white space; consumes ch and returns 1 if it is next. */
int tok_json_eat(tok_jcur *c, char ch);
/* Appends the decoded string to out (does not reset it). */
ts_status tok_json_string(tok_jcur *c, tok_buf *out);
ts_status tok_json_int(tok_jcur *c, int64_t *v);
/* Skips one value and returns its byte span. */
ts_status tok_json_skip(tok_jcur *c, const char **start, const char **end);

#endif
