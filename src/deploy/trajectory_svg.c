/* Hand-written SVG: a chart that opens in any browser, with no plotting dependency. */
#include "deploy/trajectory_svg.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"

#define W 1100
#define LABEL_W 470
#define BAR_W 460
#define ROW_H 30
#define PANEL_HEAD 56

static void text_esc(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else fputc(*s, f);
    }
}

static double num(const json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

/* One panel at y; returns its height. */
static int panel(FILE *f, int y, const json_t *rep, const char *key, const char *title, const char *color) {
    const json_t *rows = json_object_get(rep, "trajectory"), *r;
    size_t i, n = json_array_size(rows);
    double vmax = 0;
    json_array_foreach(rows, i, r) {
        double v = num(r, key) + num(r, strcmp(key, "prefill_tok_s") ? "decode_tok_s_sd" : "prefill_tok_s_sd");
        if (isfinite(v) && v > vmax) vmax = v;
    }
    if (vmax <= 0) vmax = 1;
    double base = n ? num(json_array_get(rows, 0), key) : 0;
    fprintf(f, "<text x=\"20\" y=\"%d\" font-size=\"17\" font-weight=\"bold\">", y + 24);
    text_esc(f, title);
    fprintf(f, "</text>\n<text x=\"20\" y=\"%d\" font-size=\"12\" fill=\"#555\">warm tok/s, mean of %lld trials, "
               "whiskers +-1 sd; each row adds one optimization to the row above</text>\n",
            y + 44, (long long)json_integer_value(json_object_get(rep, "trials")));
    int y0 = y + PANEL_HEAD;
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#999\"/>\n", LABEL_W, y0 - 4, LABEL_W,
            y0 + (int)n * ROW_H);
    json_array_foreach(rows, i, r) {
        int ry = y0 + (int)i * ROW_H;
        double v = num(r, key), sd = num(r, strcmp(key, "prefill_tok_s") ? "decode_tok_s_sd" : "prefill_tok_s_sd");
        double w = isfinite(v) ? v / vmax * BAR_W : 0, e0 = (v - sd) / vmax * BAR_W, e1 = (v + sd) / vmax * BAR_W;
        if (e0 < 0) e0 = 0;
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"end\">", LABEL_W - 8, ry + 17);
        text_esc(f, json_string_value(json_object_get(r, "step")));
        fprintf(f, "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>\n", LABEL_W, ry + 4, w,
                ROW_H - 8, color);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#222\" stroke-width=\"1.5\"/>\n",
                LABEL_W + e0, ry + ROW_H / 2, LABEL_W + e1, ry + ROW_H / 2);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"12\">%.2f tok/s (%.2fx)</text>\n", LABEL_W + (e1 > w ? e1 : w) + 6,
                ry + 17, v, base > 0 ? v / base : 0.0);
    }
    return PANEL_HEAD + (int)n * ROW_H + 24;
}

ts_status ts_trajectory_svg(const json_t *p4, const json_t *p5, const char *title, const char *path, ts_error *err) {
    int n4 = (int)json_array_size(json_object_get(p4, "trajectory")), n5 = (int)json_array_size(json_object_get(p5, "trajectory"));
    int h = 50 + (p4 ? PANEL_HEAD + n4 * ROW_H + 24 : 0) + (p5 ? PANEL_HEAD + n5 * ROW_H + 24 : 0) + 20;
    FILE *f = fopen(path, "w");
    if (!f) return ts_fail(err, TS_ERR_IO, "%s: cannot write", path);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, h, W, h);
    fprintf(f, "<text x=\"20\" y=\"30\" font-size=\"20\" font-weight=\"bold\">Optimization trajectory: ");
    text_esc(f, title);
    fprintf(f, "</text>\n");
    int y = 44;
    char t[128];
    if (p4) {
        snprintf(t, sizeof t, "Prefill of %lld tokens (phase 4)", (long long)json_integer_value(json_object_get(p4, "prefill_tokens")));
        y += panel(f, y, p4, "prefill_tok_s", t, "#4e79a7");
    }
    if (p5) {
        snprintf(t, sizeof t, "Decode, %lld tokens after %lld of context (phase 5)",
                 (long long)json_integer_value(json_object_get(p5, "decode_tokens")),
                 (long long)json_integer_value(json_object_get(p5, "context")));
        panel(f, y, p5, "decode_tok_s", t, "#f28e2b");
    }
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0) return ts_fail(err, TS_ERR_IO, "%s: cannot write", path);
    return TS_OK;
}
