/* Builtins of the Jinja interpreter, part 4: Python's two string formatting languages, the
 * printf-style `%` of the format filter and str.format's {} fields with their format specs.
 * Numbers are printed by the C library in the "C" locale's shape, whatever the locale. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/jinja/builtins_impl.h"

/* ---- printf-style formatting (Python's str % args) ---------------------------------------- */

typedef struct fspec {
    uint32_t fill;
    char align; /* '<' '>' '^' '=' or 0 for the default */
    char sign;  /* '+' ' ' or '-' */
    int alt, zero;
    int64_t width;
    int prec; /* -1: none */
    char type;
} fspec;

static int pad_out(jbuf *b, const fspec *f, const char *sign, const char *body, size_t blen, char dflt_align) {
    jctx *c = b->c;
    int64_t len = (int64_t)(strlen(sign) + jutf8_count(body, blen));
    int64_t pad = f->width > len ? f->width - len : 0;
    char al = f->align ? f->align : dflt_align;
    uint32_t fill = f->fill ? f->fill : ' ';
    if (f->width > (int64_t)c->max_bytes)
        return jfail_st(c, TS_ERR_UNSUPPORTED, "template exceeded its memory budget of %zu bytes", c->max_bytes);
    int64_t left = al == '<' ? 0 : al == '^' ? pad / 2 : al == '=' ? 0 : pad;
    int64_t right = al == '=' ? 0 : pad - left;
    if (jb_put_fill(b, fill, left) < 0 || jbuf_puts(b, sign) < 0) return -1;
    if (al == '=' && jb_put_fill(b, fill, pad) < 0) return -1;
    if (jbuf_put(b, body, blen) < 0) return -1;
    return jb_put_fill(b, fill, right);
}

static int num_value(jctx *c, jv v, int want_int, const char *conv, jv *out) {
    if (v.k == JV_BOOL) v = jv_int(v.u.b);
    if (v.k == JV_INT || (v.k == JV_FLOAT && !want_int)) {
        *out = v;
        return 0;
    }
    if (v.k == JV_FLOAT && want_int) {
        if (!isfinite(v.u.f)) return jfail(c, "cannot convert float %s to integer", isnan(v.u.f) ? "NaN" : "infinity");
        if (fabs(v.u.f) >= 9.2e18) return jfail_st(c, TS_ERR_UNSUPPORTED, "integer too large");
        *out = jv_int((int64_t)v.u.f);
        return 0;
    }
    if (v.k == JV_UNDEF) return jv_undef_fail(c, v);
    return jfail(c, "TypeError: %%%s format: a real number is required, not %s", conv, jv_type_name(v));
}

/* printf of one double with a conversion chosen at run time, each format a literal. */
static int fmt_double(char *buf, size_t n, char cf, int alt, int prec, double x) {
    switch (cf) {
    case 'e': return alt ? snprintf(buf, n, "%#.*e", prec, x) : snprintf(buf, n, "%.*e", prec, x);
    case 'E': return alt ? snprintf(buf, n, "%#.*E", prec, x) : snprintf(buf, n, "%.*E", prec, x);
    case 'f': return alt ? snprintf(buf, n, "%#.*f", prec, x) : snprintf(buf, n, "%.*f", prec, x);
    case 'g': return alt ? snprintf(buf, n, "%#.*g", prec, x) : snprintf(buf, n, "%.*g", prec, x);
    default: return alt ? snprintf(buf, n, "%#.*G", prec, x) : snprintf(buf, n, "%.*G", prec, x);
    }
}

/* One conversion of a number or string per the spec; type 0 is str.format's default. */
static int format_one(jbuf *b, jv v, fspec *f, int pct) {
    jctx *c = b->c;
    char t = f->type;
    char tmp[512];
    if (t == 's' || t == 'r' || (t == 0 && v.k != JV_INT && v.k != JV_FLOAT && v.k != JV_BOOL) ||
        (t == 0 && v.k == JV_BOOL)) {
        jbuf s;
        jbuf_init(&s, c);
        if ((t == 'r' ? jv_write_repr(&s, v) : jv_write_str(&s, v)) < 0) goto fail_s;
        size_t n = s.n;
        if (f->prec >= 0) { /* precision truncates strings, in code points */
            size_t k = 0, i = 0;
            while (i < s.n && (int64_t)k < f->prec) jutf8_next(s.p ? s.p : "", &i), k++;
            n = i;
        }
        int r = pad_out(b, f, "", s.p ? s.p : "", n, pct ? '>' : '<'); /* '%' right-aligns */
        jbuf_free(&s);
        return r;
    fail_s:
        jbuf_free(&s);
        return -1;
    }
    if (t == 'c') {
        char u[5];
        uint32_t cp;
        if (v.k == JV_STR && v.u.s->nchars == 1) {
            size_t i = 0;
            cp = jutf8_next(v.u.s->s, &i);
        } else if (v.k == JV_INT && v.u.i >= 0 && v.u.i <= 0x10ffff && !(v.u.i >= 0xd800 && v.u.i <= 0xdfff)) {
            cp = (uint32_t)v.u.i;
        } else return jfail(c, "%%c requires an int or a unicode character");
        int ul = ts_utf8_put(u, cp);
        return pad_out(b, f, "", u, (size_t)ul, pct ? '>' : '<');
    }
    int is_int_t = t == 'd' || t == 'i' || t == 'u' || t == 'x' || t == 'X' || t == 'o' || t == 'b';
    jv n = jv_none();
    char conv[2] = {t ? t : 'd', 0};
    if (num_value(c, v, is_int_t, conv, &n) < 0) return -1;
    if (!pct && is_int_t && n.k == JV_FLOAT)
        return jfail(c, "Unknown format code '%c' for object of type 'float'", t);
    const char *sign = "";
    int neg;
    size_t blen;
    if (n.k == JV_INT && (is_int_t || t == 0)) {
        neg = n.u.i < 0;
        uint64_t u = neg ? (uint64_t)0 - (uint64_t)n.u.i : (uint64_t)n.u.i;
        int base = (t == 'x' || t == 'X') ? 16 : t == 'o' ? 8 : t == 'b' ? 2 : 10;
        char d[80];
        int k = 0;
        do {
            d[k++] = "0123456789abcdef"[u % (unsigned)base];
            u /= (unsigned)base;
        } while (u);
        blen = 0;
        if (f->alt && base != 10) {
            tmp[blen++] = '0';
            tmp[blen++] = base == 16 ? (t == 'X' ? 'X' : 'x') : base == 8 ? 'o' : 'b';
        }
        while (k) {
            char ch = d[--k];
            tmp[blen++] = (t == 'X' && ch >= 'a') ? (char)(ch - 32) : ch;
        }
    } else {
        double x = n.k == JV_INT ? (double)n.u.i : n.u.f;
        neg = signbit(x) && !isnan(x);
        double ax = fabs(x);
        int prec = f->prec;
        char ft = t;
        if (t == 0) {
            if (prec < 0) {
                /* str.format's default for floats is repr */
                blen = (size_t)jv_float_repr(ax, tmp);
                goto have_body;
            }
            ft = 'g';
        }
        if (ft == '%') ax *= 100;
        if (!isfinite(ax)) {
            int up = ft == 'F' || ft == 'E' || ft == 'G';
            strcpy(tmp, isnan(ax) ? (up ? "NAN" : "nan") : (up ? "INF" : "inf"));
            blen = strlen(tmp);
            if (ft == '%') tmp[blen++] = '%';
            goto have_body;
        }
        if (prec < 0) prec = 6;
        if (prec > 400) return jfail_st(c, TS_ERR_UNSUPPORTED, "format precision %d too large", prec);
        char cf = ft == '%' ? 'f' : ft == 'F' ? 'f' : ft;
        if (strchr("eEfgG", cf) == NULL) return jfail(c, "unsupported format character '%c'", t);
        int k = fmt_double(tmp, sizeof tmp, cf, f->alt, prec, ax);
        if (k < 0 || (size_t)k >= sizeof tmp - 2) return jfail_st(c, TS_ERR_UNSUPPORTED, "formatted number too long");
        for (int i = 0; i < k; i++) /* the locale's decimal point, whatever it is, becomes '.' */
            if (!((tmp[i] >= '0' && tmp[i] <= '9') || tmp[i] == 'e' || tmp[i] == 'E' || tmp[i] == '+' ||
                  tmp[i] == '-'))
                tmp[i] = '.';
        blen = (size_t)k;
        if (ft == '%') tmp[blen++] = '%';
    }
have_body:
    if (neg) sign = "-";
    else if (f->sign == '+') sign = "+";
    else if (f->sign == ' ') sign = " ";
    if (f->zero && !f->align) {
        fspec z = *f;
        z.fill = '0';
        z.align = '=';
        return pad_out(b, &z, sign, tmp, blen, '>');
    }
    return pad_out(b, f, sign, tmp, blen, '>');
}

int jb_s_percent(jctx *c, const jstr *fmt, jv args, jv *out) {
    const jv *pos = NULL;
    size_t np = 0, used = 0;
    int is_map = args.k == JV_DICT;
    if (args.k == JV_LIST && args.u.l->tuple) pos = args.u.l->items, np = args.u.l->n;
    else if (!is_map) pos = &args, np = 1;
    jbuf b;
    jbuf_init(&b, c);
    const char *s = fmt->s;
    size_t i = 0, n = fmt->len;
    int used_map = 0;
    while (i < n) {
        const char *p = memchr(s + i, '%', n - i);
        size_t at = p ? (size_t)(p - s) : n;
        if (jbuf_put(&b, s + i, at - i) < 0) goto fail;
        if (!p) break;
        i = at + 1;
        if (jcharge(c, 1) < 0) goto fail;
        fspec f = {0, 0, '-', 0, 0, 0, -1, 0};
        jv arg = jv_none();
        int have_arg = 0;
        if (i < n && s[i] == '(') {
            size_t depth = 1, k = i + 1;
            while (k < n && depth) depth += s[k] == '(' ? 1 : s[k] == ')' ? -1 : 0, k++;
            if (depth) {
                jfail(c, "ValueError: incomplete format key");
                goto fail;
            }
            if (!is_map) {
                jfail(c, "TypeError: format requires a mapping");
                goto fail;
            }
            jv key;
            if (jv_str_trusted(c, s + i + 1, k - i - 2, &key) < 0) goto fail;
            const jv *v = jv_dict_get(&args, key);
            if (!v) {
                jbuf kb;
                jbuf_init(&kb, c);
                if (jv_write_repr(&kb, key) == 0) jfail(c, "KeyError: %s", kb.p);
                jbuf_free(&kb);
                goto fail;
            }
            arg = *v;
            have_arg = used_map = 1;
            i = k;
        }
        for (; i < n && strchr("-+ #0", s[i]); i++) {
            if (s[i] == '-') f.align = '<';
            else if (s[i] == '+') f.sign = '+';
            else if (s[i] == ' ' && f.sign != '+') f.sign = ' ';
            else if (s[i] == '#') f.alt = 1;
            else f.zero = 1;
        }
        if (f.align) f.zero = 0;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            if ((f.width = f.width * 10 + (s[i] - '0')) > 100000000) {
                jfail_st(c, TS_ERR_UNSUPPORTED, "format width too large");
                goto fail;
            }
        if (i < n && s[i] == '.') {
            f.prec = 0;
            for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++)
                if ((f.prec = f.prec * 10 + (s[i] - '0')) > 100000) {
                    jfail_st(c, TS_ERR_UNSUPPORTED, "format precision too large");
                    goto fail;
                }
        }
        while (i < n && (s[i] == 'l' || s[i] == 'h' || s[i] == 'L')) i++;
        if (i >= n) {
            jfail(c, "ValueError: incomplete format");
            goto fail;
        }
        char t = s[i++];
        if (t == '%') {
            if (jbuf_put(&b, "%", 1) < 0) goto fail;
            continue;
        }
        if (!strchr("sradiuxXoeEfFgGc", t)) {
            jfail(c, "ValueError: unsupported format character '%c' (0x%x) at index %zu", t, (unsigned char)t, i - 1);
            goto fail;
        }
        if (t == 'a') t = 'r';
        if (!have_arg) {
            if (is_map) arg = args, used_map = 1;
            else if (used >= np) {
                jfail(c, "TypeError: not enough arguments for format string");
                goto fail;
            } else arg = pos[used++];
        }
        f.type = t;
        if (format_one(&b, arg, &f, 1) < 0) goto fail;
    }
    if (!is_map && used < np) {
        jfail(c, "TypeError: not all arguments converted during string formatting");
        goto fail;
    }
    (void)used_map;
    return jbuf_to_str(&b, out);
fail:
    jbuf_free(&b);
    return -1;
}

/* str.format: {} {0} {name}, with !r/!s and a format spec ([[fill]align][sign][#][0][width][.prec][type]). */
int jb_s_format(jctx *c, const jstr *fmt, const jargs *a, jv *out) {
    jbuf b;
    jbuf_init(&b, c);
    const char *s = fmt->s;
    size_t i = 0, n = fmt->len;
    int auto_idx = 0, mode = 0; /* 1 automatic numbering, 2 manual */
    while (i < n) {
        char ch = s[i];
        if (ch == '}') {
            if (i + 1 < n && s[i + 1] == '}') {
                if (jbuf_put(&b, "}", 1) < 0) goto fail;
                i += 2;
                continue;
            }
            jfail(c, "ValueError: Single '}' encountered in format string");
            goto fail;
        }
        if (ch != '{') {
            size_t j = i;
            while (j < n && s[j] != '{' && s[j] != '}') j++;
            if (jbuf_put(&b, s + i, j - i) < 0) goto fail;
            i = j;
            continue;
        }
        if (i + 1 < n && s[i + 1] == '{') {
            if (jbuf_put(&b, "{", 1) < 0) goto fail;
            i += 2;
            continue;
        }
        if (jcharge(c, 1) < 0) goto fail;
        size_t j = i + 1;
        while (j < n && s[j] != '}' && s[j] != '!' && s[j] != ':' && s[j] != '{') j++;
        size_t name0 = i + 1, name1 = j;
        char conv = 0;
        if (j < n && s[j] == '!') {
            if (j + 1 >= n) goto bad;
            conv = s[j + 1];
            j += 2;
            if (conv != 'r' && conv != 's' && conv != 'a') {
                jfail(c, "ValueError: Unknown conversion specifier %c", conv);
                goto fail;
            }
        }
        size_t spec0 = j, spec1 = j;
        if (j < n && s[j] == ':') {
            spec0 = ++j;
            while (j < n && s[j] != '}') {
                if (s[j] == '{') {
                    jfail_st(c, TS_ERR_UNSUPPORTED, "str.format: nested replacement fields are not supported");
                    goto fail;
                }
                j++;
            }
            spec1 = j;
        }
        if (j >= n || s[j] != '}') goto bad;
        i = j + 1;
        jv arg;
        if (name0 == name1) {
            if (mode == 2) {
                jfail(c, "ValueError: cannot switch from manual field specification to automatic field numbering");
                goto fail;
            }
            mode = 1;
            if (auto_idx >= a->n) {
                jfail(c, "IndexError: Replacement index %d out of range for positional args tuple", auto_idx);
                goto fail;
            }
            arg = a->pos[auto_idx++];
        } else if (s[name0] >= '0' && s[name0] <= '9') {
            int64_t idx = 0;
            for (size_t k = name0; k < name1; k++) {
                if (s[k] < '0' || s[k] > '9' || idx > 1000000) {
                    jfail_st(c, TS_ERR_UNSUPPORTED, "str.format: only simple fields ({}, {0}, {name}) are supported");
                    goto fail;
                }
                idx = idx * 10 + (s[k] - '0');
            }
            if (mode == 1) {
                jfail(c, "ValueError: cannot switch from automatic field numbering to manual field specification");
                goto fail;
            }
            mode = 2;
            if (idx >= a->n) {
                jfail(c, "IndexError: Replacement index %" PRId64 " out of range for positional args tuple", idx);
                goto fail;
            }
            arg = a->pos[idx];
        } else {
            int k;
            for (k = 0; k < a->nk; k++)
                if (strlen(a->kname[k]) == name1 - name0 && !memcmp(a->kname[k], s + name0, name1 - name0)) break;
            if (k == a->nk) {
                for (size_t q = name0; q < name1; q++)
                    if (s[q] == '.' || s[q] == '[') {
                        jfail_st(c, TS_ERR_UNSUPPORTED, "str.format: only simple fields ({}, {0}, {name}) are supported");
                        goto fail;
                    }
                jfail(c, "KeyError: '%.*s'", (int)(name1 - name0), s + name0);
                goto fail;
            }
            arg = a->kval[k];
        }
        if (conv) {
            jbuf cb;
            jbuf_init(&cb, c);
            if ((conv == 's' ? jv_write_str(&cb, arg) : jv_write_repr(&cb, arg)) < 0 || jbuf_to_str(&cb, &arg) < 0) {
                jbuf_free(&cb);
                goto fail;
            }
        }
        fspec f = {0, 0, '-', 0, 0, 0, -1, 0};
        size_t k = spec0;
        if (spec1 - k >= 2) {
            size_t q = k;
            uint32_t fc = jutf8_next(s, &q);
            if (q < spec1 && strchr("<>^=", s[q])) f.fill = fc, f.align = s[q], k = q + 1;
        }
        if (!f.align && k < spec1 && strchr("<>^=", s[k])) f.align = s[k++];
        if (k < spec1 && strchr("+- ", s[k])) f.sign = s[k++];
        if (k < spec1 && s[k] == '#') f.alt = 1, k++;
        if (k < spec1 && s[k] == '0') f.zero = 1, k++;
        for (; k < spec1 && s[k] >= '0' && s[k] <= '9'; k++)
            if ((f.width = f.width * 10 + (s[k] - '0')) > 100000000) goto toolarge;
        if (k < spec1 && s[k] == '.') {
            f.prec = 0;
            for (k++; k < spec1 && s[k] >= '0' && s[k] <= '9'; k++)
                if ((f.prec = f.prec * 10 + (s[k] - '0')) > 100000) goto toolarge;
        }
        if (k < spec1) f.type = s[k++];
        if (k != spec1 || (f.type && !strchr("sdxXobeEfFgGc%n", f.type))) {
            jfail(c, "ValueError: Invalid format specifier '%.*s' for object of type '%s'", (int)(spec1 - spec0),
                  s + spec0, jv_type_name(arg));
            goto fail;
        }
        if (f.type == 'n') f.type = f.prec >= 0 ? 'g' : 'd';
        if (f.type == 's' && arg.k != JV_STR) {
            jfail(c, "ValueError: Unknown format code 's' for object of type '%s'", jv_type_name(arg));
            goto fail;
        }
        if (f.type && f.type != 's' && arg.k == JV_STR) {
            jfail(c, "ValueError: Unknown format code '%c' for object of type 'str'", f.type);
            goto fail;
        }
        if (format_one(&b, arg, &f, 0) < 0) goto fail;
    }
    return jbuf_to_str(&b, out);
toolarge:
    jfail_st(c, TS_ERR_UNSUPPORTED, "format width or precision too large");
    goto fail;
bad:
    jfail(c, "ValueError: unmatched '{' in format spec");
fail:
    jbuf_free(&b);
    return -1;
}

