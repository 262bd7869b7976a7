/* Template text -> tokens, following jinja2's lexer as transformers configures it: text between
 * tags; {{ }}, {% %} and {# #} tags; whitespace control ("-" strips all whitespace on that
 * side, "+" keeps it); trim_blocks (one newline after a block or comment tag goes);
 * lstrip_blocks (spaces and tabs before a block or comment tag at the start of a line go);
 * {% raw %}. "Whitespace" is Python's str.isspace() set, as jinja2's regexes use it. */
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"
#include "runtime/jinja/ast.h"

typedef struct lexer {
    jpool *p;
    const char *src;
    size_t len, pos;
    int line, col; /* of pos */
    const char *what;
    ts_error *err;
    jtok *toks;
    size_t n, cap;
    int line_starting;
} lexer;

/* Length of the Python whitespace character at s (0 when none). */
static size_t space_at(const char *s, size_t n) {
    if (!n) return 0;
    unsigned char c = (unsigned char)s[0];
    if ((c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20)) return 1;
    if (c < 0x80 || n < 2) return 0;
    unsigned char d = (unsigned char)s[1];
    if (c == 0xc2) return (d == 0x85 || d == 0xa0) ? 2 : 0;
    if (n < 3) return 0;
    unsigned char e = (unsigned char)s[2];
    unsigned cp;
    if ((c & 0xf0) != 0xe0) return 0;
    cp = ((unsigned)(c & 0x0f) << 12) | ((unsigned)(d & 0x3f) << 6) | (e & 0x3f);
    if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
        cp == 0x205f || cp == 0x3000)
        return 3;
    return 0;
}

/* Bytes of s[0..n) left after Python's str.rstrip(). */
static size_t rstrip_len(const char *s, size_t n) {
    size_t i = 0, keep = 0;
    while (i < n) {
        size_t w = space_at(s + i, n - i);
        if (w) {
            i += w;
        } else {
            i++;
            while (i < n && ((unsigned char)s[i] & 0xc0) == 0x80) i++;
            keep = i;
        }
    }
    return keep;
}

static size_t skip_space(const char *s, size_t n) {
    size_t i = 0, w;
    while (i < n && (w = space_at(s + i, n - i))) i += w;
    return i;
}

static int fail(lexer *L, int line, int col, const char *msg) {
    ts_fail(L->err, TS_ERR_FORMAT, "%s:%d:%d: template syntax error: %s", L->what, line, col, msg);
    return -1;
}

/* Moves pos to to, counting lines and columns (columns in bytes, from 1). */
static void advance(lexer *L, size_t to) {
    for (size_t i = L->pos; i < to; i++) {
        if (L->src[i] == '\n') {
            L->line++;
            L->col = 1;
        } else {
            L->col++;
        }
    }
    L->pos = to;
}

static jtok *push(lexer *L, jtok_kind k) {
    if (L->n == L->cap) {
        size_t nc = L->cap ? L->cap * 2 : 256;
        jtok *t = realloc(L->toks, nc * sizeof *t);
        if (!t) {
            ts_fail(L->err, TS_ERR_NOMEM, "%s: out of memory tokenizing the template", L->what);
            return NULL;
        }
        L->toks = t;
        L->cap = nc;
    }
    jtok *t = &L->toks[L->n++];
    memset(t, 0, sizeof *t);
    t->k = k;
    t->line = L->line;
    t->col = L->col;
    return t;
}

static int push_data(lexer *L, const char *s, size_t n, int line, int col) {
    if (!n) return 0;
    jtok *t = push(L, JT_DATA);
    if (!t) return -1;
    t->s = s;
    t->n = n;
    t->line = line;
    t->col = col;
    return 0;
}

/* Text before a tag, with the tag's whitespace control (sign '-', '+' or 0) and lstrip_blocks
 * (block and comment tags only). */
static size_t text_keep(lexer *L, const char *text, size_t n, char sign, int is_var) {
    if (sign == '-') return rstrip_len(text, n);
    if (sign == '+' || is_var) return n;
    size_t l_pos = n;
    while (l_pos > 0 && text[l_pos - 1] != '\n') l_pos--;
    if (l_pos > 0 || L->line_starting) {
        size_t ws = skip_space(text + l_pos, n - l_pos);
        if (ws > 0 && l_pos + ws == n) return l_pos;
    }
    return n;
}

/* After a block or comment tag's closing delimiter ending at e: "-" already consumed the
 * following whitespace; otherwise trim_blocks drops one newline unless the tag said "+". */
static size_t after_block_end(lexer *L, size_t e, char sign) {
    if (sign == '-') return e + skip_space(L->src + e, L->len - e);
    if (sign == '+') return e;
    return (e < L->len && L->src[e] == '\n') ? e + 1 : e;
}

/* {% raw %} ... {% endraw %}: the text in between is data, untouched. start: after "{%",
 * sign: the opener's sign. Returns 1 when this tag is raw (and consumed), 0 when not. */
static int try_raw(lexer *L, size_t start) {
    const char *s = L->src;
    size_t i = start;
    if (i < L->len && (s[i] == '-' || s[i] == '+')) i++;
    i += skip_space(s + i, L->len - i);
    if (L->len - i < 3 || memcmp(s + i, "raw", 3)) return 0;
    i += 3;
    i += skip_space(s + i, L->len - i);
    size_t e;
    if (L->len - i >= 3 && !memcmp(s + i, "-%}", 3)) {
        e = i + 3;
        e += skip_space(s + e, L->len - e);
    } else if (L->len - i >= 2 && !memcmp(s + i, "%}", 2)) {
        e = i + 2;
    } else {
        return 0;
    }
    /* find {%[-+]? endraw [-+]?%} */
    int line = L->line, col = L->col;
    size_t body = e;
    for (size_t j = e; j + 1 < L->len; j++) {
        if (s[j] != '{' || s[j + 1] != '%') continue;
        size_t k = j + 2;
        char sign = 0;
        if (k < L->len && (s[k] == '-' || s[k] == '+')) sign = s[k++];
        k += skip_space(s + k, L->len - k);
        if (L->len - k < 6 || memcmp(s + k, "endraw", 6)) continue;
        k += 6;
        k += skip_space(s + k, L->len - k);
        char esign = 0;
        if (k < L->len && (s[k] == '-' || s[k] == '+')) esign = s[k++];
        if (L->len - k < 2 || memcmp(s + k, "%}", 2)) continue;
        size_t keep = text_keep(L, s + body, j - body, sign, 0);
        advance(L, body);
        if (push_data(L, s + body, keep, L->line, L->col)) return -1;
        size_t end = after_block_end(L, k + 2, esign);
        advance(L, end);
        L->line_starting = end > 0 && s[end - 1] == '\n';
        return 1;
    }
    fail(L, line, col, "missing end of raw directive");
    return -1;
}

static const char *const k_ops2[] = {"**", "//", "==", "!=", "<=", ">="};
static const char k_ops1[] = "+-*/%~<>=()[]{},.:|";

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}


/* A string literal's body (between the quotes) with Python's escapes decoded. */
static int lex_string(lexer *L, jtok *t, const char *s, size_t n) {
    char *o = jpool_alloc(L->p, n + 1);
    if (!o) return fail(L, t->line, t->col, "out of memory");
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\') {
            o[m++] = s[i];
            continue;
        }
        if (++i >= n) break;
        char c = s[i];
        int digits = 0;
        switch (c) {
        case '\n': break; /* line continuation */
        case '\\': o[m++] = '\\'; break;
        case '\'': o[m++] = '\''; break;
        case '"': o[m++] = '"'; break;
        case 'a': o[m++] = '\a'; break;
        case 'b': o[m++] = '\b'; break;
        case 'f': o[m++] = '\f'; break;
        case 'n': o[m++] = '\n'; break;
        case 'r': o[m++] = '\r'; break;
        case 't': o[m++] = '\t'; break;
        case 'v': o[m++] = '\v'; break;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 'N': return fail(L, t->line, t->col, "\\N{...} escapes are not supported in string literals");
        default:
            if (c >= '0' && c <= '7') {
                unsigned v = 0;
                int k = 0;
                while (k < 3 && i < n && s[i] >= '0' && s[i] <= '7') v = v * 8 + (unsigned)(s[i++] - '0'), k++;
                i--;
                m += (size_t)ts_utf8_put(o + m, v);
            } else {
                o[m++] = '\\'; /* unknown escapes stay as written, as in Python */
                o[m++] = c;
            }
        }
        if (digits) {
            unsigned long v = 0;
            for (int k = 0; k < digits; k++) {
                int h = i + 1 < n ? hexval(s[i + 1]) : -1;
                if (h < 0) return fail(L, t->line, t->col, "truncated \\x, \\u or \\U escape in a string literal");
                v = v * 16 + (unsigned long)h;
                i++;
            }
            if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
                return fail(L, t->line, t->col, "escape is not a valid Unicode character");
            m += (size_t)ts_utf8_put(o + m, (uint32_t)v);
        }
    }
    o[m] = 0;
    t->s = o;
    t->n = m;
    return 0;
}

/* Number at s: Python/jinja2 integer (with 0b/0o/0x, underscores) or float. */
static size_t lex_number(lexer *L, jtok *t, const char *s, size_t n) {
    char buf[128];
    size_t i = 0, b = 0;
    int base = 10;
    if (n >= 2 && s[0] == '0' && strchr("bBoOxX", s[1]) && n > 2) {
        base = (s[1] == 'b' || s[1] == 'B') ? 2 : (s[1] == 'o' || s[1] == 'O') ? 8 : 16;
        i = 2;
        while (i < n && (hexval(s[i]) >= 0 || s[i] == '_') && (s[i] == '_' || hexval(s[i]) < base)) {
            if (s[i] != '_' && b < sizeof buf - 1) buf[b++] = s[i];
            i++;
        }
        buf[b] = 0;
        t->k = JT_INT;
        t->i = (int64_t)strtoull(buf, NULL, base);
        return i;
    }
    int is_float = 0;
    while (i < n && ((s[i] >= '0' && s[i] <= '9') || s[i] == '_')) {
        if (s[i] != '_' && b < sizeof buf - 1) buf[b++] = s[i];
        i++;
    }
    if (i + 1 < n && s[i] == '.' && s[i + 1] >= '0' && s[i + 1] <= '9') {
        is_float = 1;
        if (b < sizeof buf - 1) buf[b++] = s[i];
        i++;
        while (i < n && ((s[i] >= '0' && s[i] <= '9') || s[i] == '_')) {
            if (s[i] != '_' && b < sizeof buf - 1) buf[b++] = s[i];
            i++;
        }
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < n && (s[j] == '+' || s[j] == '-')) j++;
        if (j < n && s[j] >= '0' && s[j] <= '9') {
            is_float = 1;
            if (b < sizeof buf - 1) buf[b++] = 'e';
            for (size_t k = i + 1; k < j && b < sizeof buf - 1; k++) buf[b++] = s[k];
            i = j;
            while (i < n && ((s[i] >= '0' && s[i] <= '9') || s[i] == '_')) {
                if (s[i] != '_' && b < sizeof buf - 1) buf[b++] = s[i];
                i++;
            }
        }
    }
    buf[b] = 0;
    if (is_float) {
        t->k = JT_FLOAT;
        t->f = strtod(buf, NULL);
    } else {
        t->k = JT_INT;
        unsigned long long v = strtoull(buf, NULL, 10);
        if (b > 18 && (v > (unsigned long long)INT64_MAX || b > 19)) {
            fail(L, t->line, t->col, "integer literal too large");
            return 0;
        }
        t->i = (int64_t)v;
    }
    return i;
}

/* The inside of a {{ }} or {% %} tag, up to and including its end. */
static int lex_tag(lexer *L, int is_var) {
    const char *s = L->src;
    char stack[64];
    int depth = 0;
    int line0 = L->line, col0 = L->col;
    for (;;) {
        size_t ws = skip_space(s + L->pos, L->len - L->pos);
        advance(L, L->pos + ws);
        if (L->pos >= L->len)
            return fail(L, line0, col0, is_var ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'");
        const char *c = s + L->pos;
        size_t rest = L->len - L->pos;
        if (depth == 0) {
            if (is_var && ((rest >= 3 && !memcmp(c, "-}}", 3)) || (rest >= 2 && !memcmp(c, "}}", 2)))) {
                int minus = c[0] == '-';
                jtok *t = push(L, JT_VAR_END);
                if (!t) return -1;
                size_t e = L->pos + (minus ? 3 : 2);
                if (minus) e += skip_space(s + e, L->len - e);
                L->line_starting = e > 0 && s[e - 1] == '\n';
                advance(L, e);
                return 0;
            }
            if (!is_var && ((rest >= 3 && (c[0] == '-' || c[0] == '+') && !memcmp(c + 1, "%}", 2)) ||
                            (rest >= 2 && !memcmp(c, "%}", 2)))) {
                char sign = c[0] == '%' ? 0 : c[0];
                jtok *t = push(L, JT_BLOCK_END);
                if (!t) return -1;
                size_t e = after_block_end(L, L->pos + (sign ? 3 : 2), sign);
                L->line_starting = e > 0 && s[e - 1] == '\n';
                advance(L, e);
                return 0;
            }
        }
        jtok *t = push(L, JT_OP);
        if (!t) return -1;
        unsigned char ch = (unsigned char)*c;
        if (ch == '_' || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z')) {
            size_t i = 1;
            while (i < rest && (c[i] == '_' || (c[i] >= '0' && c[i] <= '9') || ((c[i] | 0x20) >= 'a' && (c[i] | 0x20) <= 'z'))) i++;
            t->k = JT_NAME;
            char *nm = jpool_alloc(L->p, i + 1);
            if (!nm) return fail(L, t->line, t->col, "out of memory");
            memcpy(nm, c, i);
            t->s = nm;
            t->n = i;
            advance(L, L->pos + i);
        } else if (ch >= '0' && ch <= '9') {
            size_t i = lex_number(L, t, c, rest);
            if (!i) return -1;
            advance(L, L->pos + i);
        } else if (ch == '\'' || ch == '"') {
            size_t i = 1;
            while (i < rest && c[i] != (char)ch) i += (c[i] == '\\' && i + 1 < rest) ? 2 : 1;
            if (i >= rest) return fail(L, t->line, t->col, "unterminated string literal");
            t->k = JT_STRING;
            if (lex_string(L, t, c + 1, i - 1)) return -1;
            advance(L, L->pos + i + 1);
        } else {
            const char *op = NULL;
            for (size_t k = 0; k < sizeof k_ops2 / sizeof *k_ops2; k++)
                if (rest >= 2 && !memcmp(c, k_ops2[k], 2)) op = k_ops2[k];
            if (!op) {
                const char *hit = ch ? strchr(k_ops1, ch) : NULL;
                if (!hit) {
                    char msg[64];
                    if (ch >= 0x20 && ch < 0x7f) snprintf(msg, sizeof msg, "unexpected character '%c'", ch);
                    else snprintf(msg, sizeof msg, "unexpected byte 0x%02x", ch);
                    return fail(L, t->line, t->col, msg);
                }
                static const char singles[][2] = {"+", "-", "*", "/", "%", "~", "<", ">", "=", "(", ")", "[", "]",
                                                  "{", "}", ",", ".", ":", "|"};
                op = singles[hit - k_ops1];
            }
            t->s = op;
            t->n = strlen(op);
            if (t->n == 1 && strchr("([{", op[0])) {
                if (depth == (int)sizeof stack) return fail(L, t->line, t->col, "brackets nested too deeply");
                stack[depth++] = op[0] == '(' ? ')' : op[0] == '[' ? ']' : '}';
            } else if (t->n == 1 && strchr(")]}", op[0])) {
                char msg[64];
                if (!depth) {
                    snprintf(msg, sizeof msg, "unexpected '%c'", op[0]);
                    return fail(L, t->line, t->col, msg);
                }
                if (stack[depth - 1] != op[0]) {
                    snprintf(msg, sizeof msg, "unexpected '%c', expected '%c'", op[0], stack[depth - 1]);
                    return fail(L, t->line, t->col, msg);
                }
                depth--;
            }
            advance(L, L->pos + t->n);
        }
    }
}

int jlex(jpool *p, const char *src, size_t len, const char *what, jtok **out, size_t *n, ts_error *err) {
    lexer L = {p, src, len, 0, 1, 1, what, err, NULL, 0, 0, 1};
    *out = NULL;
    *n = 0;
    while (L.pos < L.len) {
        /* the next tag opener */
        size_t j = L.pos;
        const char *hit = NULL;
        while (j + 1 < L.len) {
            if (src[j] == '{' && (src[j + 1] == '{' || src[j + 1] == '%' || src[j + 1] == '#')) {
                hit = src + j;
                break;
            }
            j++;
        }
        if (!hit) {
            if (push_data(&L, src + L.pos, L.len - L.pos, L.line, L.col)) goto fail;
            advance(&L, L.len);
            break;
        }
        char kind = hit[1];
        char sign = (j + 2 < L.len && (src[j + 2] == '-' || src[j + 2] == '+')) ? src[j + 2] : 0;
        if (kind == '%') {
            size_t keep = text_keep(&L, src + L.pos, j - L.pos, sign, 0);
            if (push_data(&L, src + L.pos, keep, L.line, L.col)) goto fail;
            advance(&L, j);
            int r = try_raw(&L, j + 2);
            if (r < 0) goto fail;
            if (r) continue;
        } else {
            size_t keep = text_keep(&L, src + L.pos, j - L.pos, sign, kind == '{');
            if (push_data(&L, src + L.pos, keep, L.line, L.col)) goto fail;
            advance(&L, j);
        }
        if (kind == '#') {
            size_t k = j + 2 + (sign ? 1 : 0);
            size_t e = 0;
            char esign = 0;
            for (; k + 1 < L.len; k++) {
                if (src[k] == '#' && src[k + 1] == '}') {
                    esign = (k > j + 2 && (src[k - 1] == '-' || src[k - 1] == '+')) ? src[k - 1] : 0;
                    e = k + 2;
                    break;
                }
            }
            if (!e) {
                fail(&L, L.line, L.col, "missing end of comment tag");
                goto fail;
            }
            e = after_block_end(&L, e, esign);
            L.line_starting = e > 0 && src[e - 1] == '\n';
            advance(&L, e);
            continue;
        }
        jtok *t = push(&L, kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN);
        if (!t) goto fail;
        advance(&L, j + 2 + (sign ? 1 : 0));
        if (lex_tag(&L, kind == '{')) goto fail;
    }
    jtok *t = push(&L, JT_EOF);
    if (!t) goto fail;
    *out = L.toks;
    *n = L.n;
    return 0;
fail:
    free(L.toks);
    return -1;
}
