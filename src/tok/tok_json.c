/* A small JSON reader for the two big arrays of a tokenizer.json (model.vocab, model.merges):
 * jansson needs ~600 ms and ~100 MB of nodes for Qwen's 11 MB file, while these sections are
 * flat strings and integers that can go straight into the arena and hash tables. Everything
 * else in the file is handed to jansson as a byte span (tok_json_span). */
#include "tok/tok_json.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/utf8.h"

ts_status tok_json_fail(tok_jcur *c, const char *expected) {
    size_t line = 1, col = 1;
    for (const char *q = c->b; q < c->p && q < c->e; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    char found[16] = "end of file";
    if (c->p < c->e)
        snprintf(found, sizeof found, "'%c'", *c->p >= 32 && *c->p < 127 ? *c->p : '?');
    return ts_fail(c->err, TS_ERR_FORMAT,
                   "%s: invalid JSON at line %zu column %zu%s%s: expected %s, found %s", c->file,
                   line, col, c->where ? " in " : "", c->where ? c->where : "", expected, found);
}

void tok_json_ws(tok_jcur *c) {
    while (c->p < c->e && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
        c->p++;
}

int tok_json_eat(tok_jcur *c, char ch) {
    tok_json_ws(c);
    if (c->p < c->e && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

static int hex4(const char *p, uint32_t *v) {
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) {
        char h = p[i];
        x <<= 4;
        if (h >= '0' && h <= '9')
            x |= (uint32_t)(h - '0');
        else if (h >= 'a' && h <= 'f')
            x |= (uint32_t)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F')
            x |= (uint32_t)(h - 'A' + 10);
        else
            return -1;
    }
    *v = x;
    return 0;
}


/* Bytes that end a plain run inside a string: '"', '\\' and control characters. */
static inline int ends_run(uint8_t c) { return c < 0x20 || c == '"' || c == '\\'; }

ts_status tok_json_string(tok_jcur *c, tok_buf *out) {
    tok_json_ws(c);
    if (c->p >= c->e || *c->p != '"') return tok_json_fail(c, "a string");
    c->p++;
    for (;;) {
        const char *q = c->p;
        while (q < c->e && !ends_run((uint8_t)*q))
            q++;
        if (tok_buf_put(out, c->p, (size_t)(q - c->p)))
            return ts_fail(c->err, TS_ERR_NOMEM, "%s: out of memory", c->file);
        c->p = q;
        if (q >= c->e) return tok_json_fail(c, "the end of a string");
        if (*q == '"') {
            c->p++;
            return TS_OK;
        }
        if (*q != '\\') return tok_json_fail(c, "no raw control character inside a string");
        if (q + 1 >= c->e) return tok_json_fail(c, "an escape");
        char e = q[1], ch[4];
        size_t k = 1;
        c->p = q + 2;
        switch (e) {
        case '"': ch[0] = '"'; break;
        case '\\': ch[0] = '\\'; break;
        case '/': ch[0] = '/'; break;
        case 'b': ch[0] = '\b'; break;
        case 'f': ch[0] = '\f'; break;
        case 'n': ch[0] = '\n'; break;
        case 'r': ch[0] = '\r'; break;
        case 't': ch[0] = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (c->e - c->p < 4 || hex4(c->p, &cp))
                return tok_json_fail(c, "4 hex digits after \\u");
            c->p += 4;
            if (cp >= 0xD800 && cp < 0xDC00) {
                if (c->e - c->p < 6 || c->p[0] != '\\' || c->p[1] != 'u' || hex4(c->p + 2, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return tok_json_fail(c, "a low surrogate after a high surrogate");
                c->p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                return tok_json_fail(c, "no lone low surrogate");
            }
            k = (size_t)ts_utf8_put(ch, cp);
            break;
        }
        default: c->p = q + 1; return tok_json_fail(c, "a valid escape character");
        }
        if (tok_buf_put(out, ch, k))
            return ts_fail(c->err, TS_ERR_NOMEM, "%s: out of memory", c->file);
    }
}

ts_status tok_json_int(tok_jcur *c, int64_t *v) {
    tok_json_ws(c);
    const char *q = c->p;
    int neg = 0;
    if (q < c->e && *q == '-') {
        neg = 1;
        q++;
    }
    if (q >= c->e || *q < '0' || *q > '9') return tok_json_fail(c, "an integer");
    int64_t x = 0;
    while (q < c->e && *q >= '0' && *q <= '9') {
        if (x > (INT64_MAX - 9) / 10) return tok_json_fail(c, "an integer that fits 64 bits");
        x = x * 10 + (*q++ - '0');
    }
    if (q < c->e && (*q == '.' || *q == 'e' || *q == 'E')) {
        c->p = q;
        return tok_json_fail(c, "an integer, not a real number");
    }
    c->p = q;
    *v = neg ? -x : x;
    return TS_OK;
}

/* Skips one value of any kind, checking its syntax. */
static ts_status skip(tok_jcur *c, int depth) {
    tok_json_ws(c);
    if (depth > 200) return tok_json_fail(c, "nesting at most 200 deep");
    if (c->p >= c->e) return tok_json_fail(c, "a value");
    char ch = *c->p;
    if (ch == '"') { /* checks escapes lexically, keeps nothing */
        const char *q = c->p + 1;
        for (;;) {
            while (q < c->e && *q != '"' && *q != '\\' && (uint8_t)*q >= 0x20)
                q++;
            c->p = q;
            if (q >= c->e) return tok_json_fail(c, "the end of a string");
            if (*q == '"') break;
            if (*q != '\\') return tok_json_fail(c, "no raw control character inside a string");
            uint32_t v;
            if (q + 1 < c->e && q[1] == 'u') {
                if (c->e - q < 6 || hex4(q + 2, &v))
                    return tok_json_fail(c, "4 hex digits after \\u");
                q += 6;
            } else if (q + 1 < c->e && strchr("\"\\/bfnrt", q[1]) && q[1]) {
                q += 2;
            } else {
                return tok_json_fail(c, "a valid escape");
            }
        }
        c->p++;
        return TS_OK;
    }
    if (ch == '{' || ch == '[') {
        char close = ch == '{' ? '}' : ']';
        c->p++;
        if (tok_json_eat(c, close)) return TS_OK;
        for (;;) {
            if (ch == '{') {
                ts_status s = skip(c, depth + 1);
                if (s) return s;
                if (!tok_json_eat(c, ':')) return tok_json_fail(c, "':'");
            }
            ts_status s = skip(c, depth + 1);
            if (s) return s;
            if (tok_json_eat(c, close)) return TS_OK;
            if (!tok_json_eat(c, ','))
                return tok_json_fail(c, close == '}' ? "',' or '}'" : "',' or ']'");
        }
    }
    static const char *lits[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t k = strlen(lits[i]);
        if ((size_t)(c->e - c->p) >= k && !memcmp(c->p, lits[i], k)) {
            c->p += k;
            return TS_OK;
        }
    }
    const char *q = c->p;
    if (q < c->e && *q == '-') q++;
    const char *d = q;
    while (q < c->e && ((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E' ||
                        *q == '+' || *q == '-'))
        q++;
    if (q == d) return tok_json_fail(c, "a value");
    c->p = q;
    return TS_OK;
}

ts_status tok_json_skip(tok_jcur *c, const char **start, const char **end) {
    tok_json_ws(c);
    *start = c->p;
    ts_status s = skip(c, 0);
    *end = c->p;
    return s;
}
