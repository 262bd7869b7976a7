/* Q8_0 / Q4_0 quantizers (src/io/quant.c) against llama.cpp: quantizing the F32 GGUF fixtures'
 * tensors must give exactly the bytes `llama-quantize --pure` wrote into the committed Q8_0 / Q4_0
 * files, tensor by tensor; F32 -> F16 rounding agrees with the compiler's _Float16 (IEEE round to
 * nearest even) on every half and on random floats; edge blocks (zeros, ties of magnitude, the
 * clamp at code 15) and refusals (NaN, a scale beyond F16) behave as ggml's reference does. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "io/quant.h"
#include "runtime/quantize_file.h"
#include "model/quantize.h"
#include "tharness.h"
#include "tok/tokenizer.h"

/* Every quantized tensor of `qfile` against our quantization of the same tensor of `ffile`. */
static void same_as_llamacpp(const char *ffile, const char *qfile, ts_dtype want) {
    ts_gguf f, q;
    ts_error err;
    if (ts_gguf_open(th_fixture(ffile), &f, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    if (ts_gguf_open(th_fixture(qfile), &q, &err)) {
        CHECK(0, "%s", err.msg);
        ts_gguf_close(&f);
        return;
    }
    int n_quant = 0, n_same = 0, n_plain = 0;
    for (int i = 0; i < q.n_tensors; i++) {
        const ts_tensor *qt = &q.tensors[i], *ft = ts_gguf_tensor(&f, qt->name);
        CHECK(ft && ft->dtype == TS_DTYPE_F32 && ft->numel == qt->numel, "%s: %s has no F32 twin", qfile,
              qt->name);
        if (!ft) continue;
        if (qt->dtype == TS_DTYPE_F32) { /* norms stay as they were */
            n_plain++;
            CHECK(!memcmp(qt->data, ft->data, qt->nbytes), "%s: %s changed", qfile, qt->name);
            continue;
        }
        CHECK(qt->dtype == want, "%s: %s is %s", qfile, qt->name, ts_dtype_name(qt->dtype));
        n_quant++;
        uint8_t *mine = malloc(qt->nbytes);
        float *src = malloc((size_t)ft->numel * sizeof *src);
        memcpy(src, ft->data, (size_t)ft->numel * sizeof *src); /* the views may be unaligned */
        int64_t bad;
        ts_quant_result r = ts_quant_row(want, src, ft->numel, mine, &bad);
        int same = r == TS_QUANT_OK && !memcmp(mine, qt->data, qt->nbytes);
        if (!same) {
            size_t k = 0;
            while (k < qt->nbytes && mine[k] == ((const uint8_t *)qt->data)[k]) k++;
            CHECK(0, "%s: %s differs from llama-quantize's from byte %zu of %zu (block %zu)", qfile, qt->name,
                  k, qt->nbytes, k / ts_dtype_bytes(want, TS_QBLOCK));
        }
        n_same += same;
        free(mine);
        free(src);
    }
    CHECK(n_quant > 0 && n_plain > 0, "%s: %d quantized, %d F32 tensors", qfile, n_quant, n_plain);
    printf("%-26s %2d %s tensors byte-identical to llama-quantize --pure (of %d), %d F32 unchanged\n", qfile,
           n_same, ts_dtype_name(want), n_quant, n_plain);
    ts_gguf_close(&f);
    ts_gguf_close(&q);
}

static void test_f16(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) { /* every half survives the round trip */
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaN payloads */
        float v = ts_f16_to_f32((uint16_t)h);
        bad += ts_f32_to_f16(v) != h;
    }
    CHECK(bad == 0, "%d halves do not round-trip", bad);
    CHECK(ts_f32_to_f16(65519.99f) == 0x7bff && ts_f32_to_f16(65520.0f) == 0x7c00, "overflow edge");
    CHECK(ts_f32_to_f16(ldexpf(1, -25)) == 0 && ts_f32_to_f16(ldexpf(3, -26)) == 1, "subnormal ties");
    CHECK((ts_f32_to_f16(NAN) & 0x7e00) == 0x7e00, "NaN");
#ifdef __FLT16_MAX__
    uint32_t s = 12345;
    int diff = 0;
    for (int i = 0; i < 2000000; i++) {
        s = s * 1664525u + 1013904223u;
        uint32_t u = (s & 0x8fffffffu) | ((s >> 3) & 0x3f000000u); /* magnitudes around F16's range */
        float f;
        memcpy(&f, &u, 4);
        if (!isfinite(f)) continue;
        _Float16 r = (_Float16)f;
        uint16_t want;
        memcpy(&want, &r, 2);
        diff += ts_f32_to_f16(f) != want;
    }
    CHECK(diff == 0, "%d of 2M random floats round differently from _Float16", diff);
    printf("F32 -> F16        every half round-trips; 2M random floats agree with _Float16\n");
#else
    printf("F32 -> F16        every half round-trips (no _Float16 in this compiler to compare with)\n");
#endif
}

static void test_blocks(void) {
    float x[TS_QBLOCK] = {0};
    uint8_t o[2 + TS_QBLOCK];
    int64_t bad = -1;
    /* all zeros: scale 0, Q8_0 codes 0, Q4_0 codes 8 (value 0) */
    CHECK(ts_quant_row(TS_DTYPE_Q8_0, x, TS_QBLOCK, o, &bad) == TS_QUANT_OK && o[0] == 0 && o[1] == 0 && o[2] == 0,
          "zero block Q8_0");
    CHECK(ts_quant_row(TS_DTYPE_Q4_0, x, TS_QBLOCK, o, &bad) == TS_QUANT_OK && o[2] == 0x88, "zero block Q4_0");
    /* Q4_0: -2 comes first with the largest magnitude: d = -2 / -8 = 0.25, -2 -> code 0, +2 -> 16 clamped to 15 */
    x[0] = -2, x[16] = 2, x[1] = 1;
    CHECK(ts_quant_row(TS_DTYPE_Q4_0, x, TS_QBLOCK, o, &bad) == TS_QUANT_OK && ts_f16_to_f32((uint16_t)(o[0] | o[1] << 8)) == 0.25f &&
              o[2] == 0xf0 && (o[3] & 15) == 12,
          "Q4_0 signed extreme: d %g, byte0 %02x byte1 %02x", ts_f16_to_f32((uint16_t)(o[0] | o[1] << 8)), o[2], o[3]);
    x[0] = 2, x[16] = -2; /* now +2 decides: d = -0.25, +2 -> code 0 */
    CHECK(ts_quant_row(TS_DTYPE_Q4_0, x, TS_QBLOCK, o, &bad) == TS_QUANT_OK && ts_f16_to_f32((uint16_t)(o[0] | o[1] << 8)) == -0.25f &&
              o[2] == 0xf0,
          "Q4_0 first extreme wins");
    /* Q8_0 rounds half away from zero: 127 * 0.5/127 ... x = 0.5 * d gives code 1 */
    memset(x, 0, sizeof x);
    x[0] = 127, x[1] = 0.5f, x[2] = -0.5f, x[3] = 1.5f;
    CHECK(ts_quant_row(TS_DTYPE_Q8_0, x, TS_QBLOCK, o, &bad) == TS_QUANT_OK && (int8_t)o[2] == 127 &&
              (int8_t)o[3] == 1 && (int8_t)o[4] == -1 && (int8_t)o[5] == 2,
          "Q8_0 rounding: %d %d %d %d", (int8_t)o[2], (int8_t)o[3], (int8_t)o[4], (int8_t)o[5]);
    x[7] = NAN;
    CHECK(ts_quant_row(TS_DTYPE_Q8_0, x, TS_QBLOCK, o, &bad) == TS_QUANT_NONFINITE && bad == 7, "NaN refused");
    x[7] = 1e7f;
    CHECK(ts_quant_row(TS_DTYPE_Q8_0, x, TS_QBLOCK, o, &bad) == TS_QUANT_RANGE && bad == 0, "scale beyond F16");
    CHECK(ts_quant_parse("q8_0") == TS_DTYPE_Q8_0 && ts_quant_parse("Q4_0") == TS_DTYPE_Q4_0 &&
              ts_quant_parse("q4_1") == -1,
          "type names");
}

/* `tessera quantize` of the F32 GGUF (ts_quantize_file) against llama-quantize's file: the same
 * tensors under the same names, types, shapes and bytes (llama's Q/K rows included: un-permuted
 * on reading, permuted back on writing), and every metadata key llama.cpp wrote that we also
 * write holds the same value. */
static void file_same_as_llamacpp(const char *ffile, const char *qfile, ts_dtype type) {
    char out[4200];
    snprintf(out, sizeof out, "%s/out.gguf", th_tmpdir("quant_file"));
    ts_quantize_report r;
    ts_error err;
    ts_status s = ts_quantize_file(th_fixture(ffile), out, type, 0, &r, &err);
    CHECK(s == TS_OK, "quantize %s: %s", ffile, err.msg);
    if (s) return;
    ts_gguf a, b;
    if (ts_gguf_open(out, &a, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    if (ts_gguf_open(th_fixture(qfile), &b, &err)) {
        CHECK(0, "%s", err.msg);
        ts_gguf_close(&a);
        return;
    }
    int same = 0, keys = 0, keys_same = 0;
    CHECK(a.n_tensors == b.n_tensors, "%s: %d tensors, llama.cpp %d", ffile, a.n_tensors, b.n_tensors);
    for (int i = 0; i < b.n_tensors; i++) {
        const ts_tensor *bt = &b.tensors[i], *at = ts_gguf_tensor(&a, bt->name);
        int eq = at && at->dtype == bt->dtype && at->ndim == bt->ndim && at->nbytes == bt->nbytes &&
                 !memcmp(at->shape, bt->shape, sizeof at->shape) && !memcmp(at->data, bt->data, bt->nbytes);
        CHECK(eq, "%s: tensor %s differs from %s's", out, bt->name, qfile);
        same += eq;
    }
    for (int i = 0; i < b.n_kv; i++) {
        const ts_gguf_kv *bk = &b.kv[i], *ak = ts_gguf_find(&a, bk->key);
        if (!ak) continue;
        keys++;
        int eq = ak->type == bk->type && ak->n == bk->n && ak->arr_type == bk->arr_type;
        if (eq && bk->type == TS_GGUF_STRING) {
            const char *x, *y;
            size_t nx, ny;
            ts_gguf_get_str(&a, bk->key, 1, &x, &nx, &err);
            ts_gguf_get_str(&b, bk->key, 1, &y, &ny, &err);
            eq = nx == ny && !memcmp(x, y, nx);
        } else if (eq && bk->type != TS_GGUF_ARRAY) {
            eq = !memcmp(ak->val, bk->val, bk->type == TS_GGUF_U64 || bk->type >= TS_GGUF_I64 ? 8 : bk->type == TS_GGUF_BOOL || bk->type <= TS_GGUF_I8 ? 1 : bk->type <= TS_GGUF_I16 ? 2 : 4);
        } else if (eq) {
            for (uint64_t k = 0; eq && k < bk->n; k++) {
                if (bk->arr_type == TS_GGUF_STRING) {
                    const char *x, *y;
                    size_t nx, ny;
                    ts_gguf_arr_str(ak, k, &x, &nx);
                    ts_gguf_arr_str(bk, k, &y, &ny);
                    eq = nx == ny && !memcmp(x, y, nx);
                } else {
                    eq = ts_gguf_arr_num(ak, k) == ts_gguf_arr_num(bk, k);
                }
            }
        }
        CHECK(eq, "%s: metadata \"%s\" differs from %s's", out, bk->key, qfile);
        keys_same += eq;
    }
    printf("tessera quantize %-26s -> %d/%d tensors byte-identical to %s; %d/%d shared metadata keys equal (of "
           "llama.cpp's %d)\n", ffile, same, b.n_tensors, qfile, keys_same, keys, b.n_kv);
    ts_gguf_close(&a);
    ts_gguf_close(&b);
}

/* Oracle logits of a model on fixed ids (all positions). */
static float *oracle(const ts_model *m, const int32_t *ids, int n) {
    ts_ref *r;
    ts_error err;
    float *lg = malloc(sizeof(float) * (size_t)n * (size_t)ts_model_n_vocab(m));
    if (ts_ref_new(m, n, &r, &err) || ts_ref_forward(r, ids, n, lg, 1, NULL, &err)) {
        CHECK(0, "oracle: %s", err.msg);
        free(lg);
        return NULL;
    }
    ts_ref_free(r);
    return lg;
}

/* --quant's path (ts_model_quantize) on a fixture's HF weights: how far the quantized weights
 * and the oracle's logits move (printed for docs/quantization.md; bounds are loose sanity
 * limits, the gates live in deploy), and, for qwen3, that the in-memory model and the file
 * `tessera quantize` writes from the same directory give bit-identical oracle logits and that
 * the file's tokenizer encodes like the directory's tokenizer.json. */
static void accuracy(const char *name, ts_dtype type, double max_w, double max_logits) {
    char dir[256];
    snprintf(dir, sizeof dir, "gguf/%s/hf", name);
    static const int32_t ids[8] = {1, 17, 42, 99, 150, 200, 7, 260};
    ts_model *m, *q;
    ts_error err;
    if (ts_model_open(th_fixture(dir), &m, &err) || ts_model_open(th_fixture(dir), &q, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    ts_status s = ts_model_quantize(q, type, &err);
    CHECK(s == TS_OK, "%s", err.msg);
    double num = 0, den = 0;
    int nq = 0;
    for (int i = 0; i < q->store.n_tensors && !s; i++) {
        const ts_tensor *a = &m->store.tensors[i], *b = &q->store.tensors[i];
        if (b->dtype != type) continue;
        nq++;
        float *x = malloc(sizeof(float) * (size_t)a->numel), *y = malloc(sizeof(float) * (size_t)a->numel);
        ts_dtype_to_f32(a->dtype, a->data, 0, (size_t)a->numel, x);
        ts_dtype_to_f32(b->dtype, b->data, 0, (size_t)b->numel, y);
        for (int64_t k = 0; k < a->numel; k++) num += (double)(y[k] - x[k]) * (y[k] - x[k]), den += (double)x[k] * x[k];
        free(x);
        free(y);
    }
    double w_rel = sqrt(num / den);
    float *la = s ? NULL : oracle(m, ids, 8), *lb = s ? NULL : oracle(q, ids, 8);
    int V = ts_model_n_vocab(m), top = 0;
    num = den = 0;
    for (int p = 0; la && lb && p < 8; p++) {
        int ia = 0, ib = 0;
        for (int v = 0; v < V; v++) {
            double d = lb[p * V + v] - la[p * V + v];
            num += d * d, den += (double)la[p * V + v] * la[p * V + v];
            if (la[p * V + v] > la[p * V + ia]) ia = v;
            if (lb[p * V + v] > lb[p * V + ib]) ib = v;
        }
        top += ia == ib;
    }
    double l_rel = sqrt(num / (den > 0 ? den : 1));
    CHECK(la && lb && w_rel < max_w && l_rel < max_logits, "%s %s: weights rel_l2 %.3g, logits rel_l2 %.3g",
          name, ts_dtype_name(type), w_rel, l_rel);
    printf("--quant %-4s %-6s %2d matrices: weight rel_l2 %.4f; oracle logits rel_l2 %.4f, top-1 %d/8\n",
           ts_dtype_name(type), name, nq, w_rel, l_rel, top);
    if (!strcmp(name, "qwen3") && lb) { /* the file from the same directory runs the same numbers */
        char out[4200];
        snprintf(out, sizeof out, "%s/q.gguf", th_tmpdir("quant_hf"));
        ts_model *f = NULL;
        s = ts_quantize_file(th_fixture(dir), out, type, 0, NULL, &err);
        if (!s) s = ts_model_open(out, &f, &err);
        CHECK(s == TS_OK, "%s", err.msg);
        float *lf = f ? oracle(f, ids, 8) : NULL;
        CHECK(lf && !memcmp(lf, lb, sizeof(float) * 8 * (size_t)V), "qwen3 %s: file vs --quant logits differ",
              ts_dtype_name(type));
        ts_tok *tj = NULL, *tg = NULL;
        static const char *texts[] = {"Hello world, it's 2025!", "  spaces\tand\nnewlines", "<|im_start|>user",
                                      "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87"};
        int same = 0;
        if (!ts_tok_load(th_fixture(dir), &tj, &err) && !ts_tok_load(out, &tg, &err))
            for (int i = 0; i < 4; i++) {
                int32_t *a = NULL, *b = NULL;
                int na = 0, nb = 0;
                ts_tok_encode(tj, texts[i], strlen(texts[i]), 0, &a, &na, &err);
                ts_tok_encode(tg, texts[i], strlen(texts[i]), 0, &b, &nb, &err);
                same += na == nb && na > 0 && !memcmp(a, b, sizeof *a * (size_t)na);
                free(a);
                free(b);
            }
        CHECK(same == 4, "qwen3 file tokenizer: %d/4 texts encode as tokenizer.json does", same);
        printf("tessera quantize qwen3/hf -> %s: oracle logits bit-identical to --quant, tokenizer %d/4 texts same ids\n",
               ts_dtype_name(type), same);
        ts_tok_free(tj);
        ts_tok_free(tg);
        free(lf);
        ts_model_close(f);
    }
    free(la);
    free(lb);
    ts_model_close(m);
    ts_model_close(q);
}

int main(void) {
    test_f16();
    test_blocks();
    same_as_llamacpp("gguf/llama/llama-f32.gguf", "gguf/llama/llama-q8_0.gguf", TS_DTYPE_Q8_0);
    same_as_llamacpp("gguf/llama/llama-f32.gguf", "gguf/llama/llama-q4_0.gguf", TS_DTYPE_Q4_0);
    same_as_llamacpp("gguf/qwen3/qwen3-f32.gguf", "gguf/qwen3/qwen3-q8_0.gguf", TS_DTYPE_Q8_0);
    same_as_llamacpp("gguf/qwen3/qwen3-f32.gguf", "gguf/qwen3/qwen3-q4_0.gguf", TS_DTYPE_Q4_0);
    file_same_as_llamacpp("gguf/llama/llama-f32.gguf", "gguf/llama/llama-q8_0.gguf", TS_DTYPE_Q8_0);
    file_same_as_llamacpp("gguf/llama/llama-f32.gguf", "gguf/llama/llama-q4_0.gguf", TS_DTYPE_Q4_0);
    file_same_as_llamacpp("gguf/qwen3/qwen3-f32.gguf", "gguf/qwen3/qwen3-q8_0.gguf", TS_DTYPE_Q8_0);
    file_same_as_llamacpp("gguf/qwen3/qwen3-f32.gguf", "gguf/qwen3/qwen3-q4_0.gguf", TS_DTYPE_Q4_0);
    for (int t = 0; t < 2; t++) {
        ts_dtype type = t ? TS_DTYPE_Q4_0 : TS_DTYPE_Q8_0;
        double mw = t ? 0.2 : 0.02, ml = t ? 0.6 : 0.05; /* random tiny models: flat, sensitive logits */
        accuracy("llama", type, mw, ml);
        accuracy("qwen2", type, mw, ml);
        accuracy("qwen3", type, mw, ml);
    }
    return th_finish("test_quant");
}
