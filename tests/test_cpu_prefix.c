/* Split invariance of prefill, which the server's prefix cache (src/serve/sched.c) relies on:
 * the KV cache and the logits after ts_cpu_forward_seq(prompt[0:P]) in one call must be
 * bit-identical to ts_cpu_forward_seq(prompt[0:a]) followed by ts_cpu_forward_seq(prompt[a:P])
 * (and to three pieces), whatever a and P, across the session's chunk boundaries, the GEMM
 * register tiles' remainder rows, the S buckets of the autotuned tiles and the 16-query
 * attention tiles: BF16, Q8_0 and Q4_0 weights, every kernel variant this CPU has. A piece of
 * one token runs the decode path (GEMV, one-row attention), whose arithmetic differs: the
 * cache never leaves a single token to prefill (docs/serve.md), and this test measures that
 * difference rather than asserting it away. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "deploy/gates.h"
#include "model/model.h"
#include "model/quantize.h"
#include "target/cpu/cpu_internal.h"
#include "target/cpu/cpu_target.h"
#include "tharness.h"

#define CAP 72 /* positions per sequence */

static int32_t tok_at(int i, int V) { return (int32_t)((i * 104729 + 7919) % V); }

/* Rows [0, n) of every layer's K and V equal? Returns the first differing layer*CAP+row or -1. */
static int kv_diff(const ts_cpu_seq *a, const ts_cpu_seq *b, const ts_config *cf, int n) {
    size_t es = a->c->kv_esize, hb = (size_t)cf->head_dim * es;
    for (int l = 0; l < cf->n_layers; l++)
        for (int r = 0; r < n; r++)
            for (int g = 0; g < cf->n_kv_heads; g++) {
                size_t oa = ts_cpu_kv_off(cf, a->cap, l, g, r), ob = ts_cpu_kv_off(cf, b->cap, l, g, r);
                if (memcmp(ts_cpu_kv_at(a->k_cache, oa, es), ts_cpu_kv_at(b->k_cache, ob, es), hb) ||
                    memcmp(ts_cpu_kv_at(a->v_cache, oa, es), ts_cpu_kv_at(b->v_cache, ob, es), hb))
                    return l * CAP + r;
            }
    return -1;
}

/* Runs prompt[0:P] in the pieces cuts[0] < cuts[1] < ... < P; logits of the last one. */
static int run_pieces(ts_cpu *c, ts_cpu_seq *s, const int32_t *toks, const int *cuts, int n_cuts, int P, float *lg) {
    ts_error err;
    ts_cpu_seq_truncate(s, 0);
    int at = 0;
    for (int i = 0; i <= n_cuts; i++) {
        int end = i < n_cuts ? cuts[i] : P;
        if (ts_cpu_forward_seq(c, s, toks + at, end - at, lg, 0, &err)) {
            CHECK(0, "%s", err.msg);
            return -1;
        }
        at = end;
    }
    return 0;
}

/* copy: the weights copied (TS_OPT_ZERO_COPY off), so Q8_0 / Q4_0 take the cpu target's 16-block
 * lane order where its kernels want it (gemm.h), and its few-row prefill (2-11 rows) */
static void check_split(const char *name, const ts_model *m, ts_cpu_variant v, int chunk, int wide, int copy) {
    const ts_config *cf = ts_model_config(m);
    int V = cf->n_vocab;
    ts_error err;
    ts_cpu *c = NULL;
    ts_cpu_seq *cold = NULL, *warm = NULL;
    /* the session's max_seq sets its prefill chunk (min(max_seq, 256)): a small one puts chunk
     * boundaries inside these prompts */
    ts_cpu_opts o = {.n_threads = 2, .force_variant = (int)v, .disable = copy ? TS_OPT_ZERO_COPY : 0};
    float *ref = malloc(sizeof(float) * (size_t)V), *got = malloc(sizeof(float) * (size_t)V);
    int32_t toks[CAP];
    for (int i = 0; i < CAP; i++) toks[i] = tok_at(i, V);
    if (ts_cpu_new(m, chunk, &o, &c, &err) || ts_cpu_seq_new(c, CAP, &cold, &err) || ts_cpu_seq_new(c, CAP, &warm, &err)) {
        CHECK(0, "%s: %s", name, err.msg);
        goto done;
    }
    /* at real widths (slow under the scalar kernels) a few prompt lengths */
    static const int all[] = {2, 3, 7, 16, 17, 24, 25, 33, 49, 70}, few[] = {49};
    const int *Ps = wide ? few : all;
    int nP = wide ? 1 : (int)(sizeof all / sizeof all[0]);
    int runs = 0, bad = 0, single = 0, single_bad = 0;
    for (int pi = 0; pi < nP; pi++) {
        int P = Ps[pi];
        if (run_pieces(c, cold, toks, NULL, 0, P, ref)) goto done;
        for (int a = 1; a < P; a++) {
            /* every cut for short prompts; around tiles and chunks for long ones */
            int near = a <= 2 || P - a <= 2 || a % 16 <= 1 || a % 16 == 15 || a % chunk <= 1 || a % chunk == chunk - 1;
            if ((P > 17 || wide) && !near) continue;
            for (int three = 0; three < 2 - wide; three++) {
                int cuts[2] = {a, a + (P - a) / 2}, n_cuts = three && cuts[1] > a ? 2 : 1;
                if (three && n_cuts == 1) continue;
                if (run_pieces(c, warm, toks, cuts, n_cuts, P, got)) goto done;
                int one = P - cuts[n_cuts - 1] == 1 || cuts[0] == 1 || (n_cuts == 2 && cuts[1] - cuts[0] == 1);
                int d = kv_diff(cold, warm, cf, P), same = d < 0 && !memcmp(ref, got, sizeof(float) * (size_t)V);
                runs++;
                if (one) {
                    single++;
                    single_bad += !same;
                    continue;
                }
                if (!same && !bad)
                    fprintf(stderr, "  %s [%s] chunk %d: P %d cut at %d and %d: %s differ (layer %d, row %d)\n", name,
                            ts_cpu_variant_name(v), chunk, P, cuts[0], n_cuts == 2 ? cuts[1] : P,
                            d >= 0 ? "KV rows" : "logits", d >= 0 ? d / CAP : -1, d >= 0 ? d % CAP : -1);
                bad += !same;
            }
        }
    }
    /* the server's path: an earlier prompt (25 tokens) prefilled, its first 20 positions kept in
     * a sequence of just that capacity, copied into another and the rest of a longer prompt
     * prefilled there: the cold prompt's KV and logits */
    {
        int P = wide ? 49 : 33, keep = 20;
        ts_cpu_seq *e = NULL, *d = NULL;
        int ok = !run_pieces(c, warm, toks, NULL, 0, 25, got) && !run_pieces(c, cold, toks, NULL, 0, P, ref) &&
                 !ts_cpu_seq_new(c, keep, &e, &err) && !ts_cpu_seq_copy(e, warm, keep, &err) &&
                 !ts_cpu_seq_new(c, CAP, &d, &err) && !ts_cpu_seq_copy(d, e, keep, &err) &&
                 !ts_cpu_forward_seq(c, d, toks + keep, P - keep, got, 0, &err);
        CHECK(ok && kv_diff(cold, d, cf, P) < 0 && !memcmp(ref, got, sizeof(float) * (size_t)V),
              "%s [%s]: a kept prefix copied and continued differs from the cold prompt (%s)", name,
              ts_cpu_variant_name(v), ok ? "KV or logits" : err.msg);
        ts_cpu_seq_free(e), ts_cpu_seq_free(d);
    }
    CHECK(bad == 0, "%s [%s] chunk %d: %d of %d split prefills differ from the prefill in one call", name,
          ts_cpu_variant_name(v), chunk, bad, runs - single);
    printf("  %-26s %-10s chunk %2d: %d splits bit-identical; with a 1-token piece (decode path) %d of %d differ\n",
           name, ts_cpu_variant_name(v), chunk, runs - single - bad, single_bad, single);
done:
    ts_cpu_seq_free(cold), ts_cpu_seq_free(warm);
    ts_cpu_free(c);
    free(ref), free(got);
}

/* A context past one KV block (TS_KV_BLOCK positions, cpu_internal.h): the prefill and a few
 * decode steps across the block boundary against the oracle (the phase-2 cosine: a row read
 * from the wrong place is far off), and a prefix copied through a cache of another block size
 * (one smaller than a block is one run per head) and continued,
 * bit-identical to the cold one. The session holds three blocks and decodes on into the second
 * half of block 1, where its steps fault in the pages of block 2 ahead (ts_cpu_kv_prefault,
 * which rewrites bytes with themselves: out of bounds, ASan would say). */
static void check_long(const char *name, const ts_model *m, ts_cpu_variant v) {
    const ts_config *cf = ts_model_config(m);
    enum { P = TS_KV_BLOCK + 88, D = 4, SMALL = 300, CAP3 = 3 * TS_KV_BLOCK - 100 /* not whole blocks */ };
    int V = cf->n_vocab;
    ts_error err;
    ts_ref *r = NULL;
    ts_cpu *c = NULL;
    ts_cpu_seq *a = NULL, *b = NULL, *d = NULL;
    ts_cpu_opts o = {.n_threads = 2, .force_variant = (int)v};
    float *lr = malloc(sizeof(float) * (size_t)V), *lc = malloc(sizeof(float) * (size_t)V);
    float *la = malloc(sizeof(float) * (size_t)V);
    int32_t *toks = malloc(sizeof(int32_t) * (P + D));
    for (int i = 0; i < P + D; i++) toks[i] = tok_at(i, V);
    if (ts_ref_new(m, P + D, &r, &err) || ts_cpu_new(m, CAP3, &o, &c, &err) || ts_cpu_seq_new(c, P + 40, &a, &err) ||
        ts_cpu_seq_new(c, SMALL, &b, &err) || ts_cpu_seq_new(c, P + 40, &d, &err)) {
        CHECK(0, "%s long: %s", name, err.msg);
        goto done;
    }
    const ts_threshold *tcos = ts_threshold_find("phase2", "cosine");
    double worst = 1;
    for (int i = 0; i <= D; i++) { /* i = 0: the prefill, then each decode step */
        int at = i ? P + i - 1 : 0, n = i ? 1 : P;
        if (ts_ref_forward(r, toks + at, n, lr, 0, NULL, &err) || ts_cpu_forward(c, toks + at, n, lc, 0, NULL, &err)) {
            CHECK(0, "%s long: %s", name, err.msg);
            goto done;
        }
        ts_metrics mt;
        ts_metrics_compute(lc, lr, 1, V, &mt);
        worst = fmin(worst, mt.cosine);
    }
    CHECK(ts_threshold_pass(tcos, worst), "%s [%s] long context: logits cosine %.6f against the oracle (>= %g)", name,
          ts_cpu_variant_name(v), worst, tcos->value);
    /* on into the second half of block 1, where the steps fault block 2's pages ahead (not on
     * the scalar variant: slow at real widths under the sanitizers, and the same code) */
    for (int pos = P + D; v != TS_CPU_SCALAR && pos <= TS_KV_BLOCK + TS_KV_BLOCK / 2 + 1; pos++) {
        int32_t t = tok_at(pos, V);
        if (ts_cpu_forward(c, &t, 1, lc, 0, NULL, &err)) {
            CHECK(0, "%s long: %s", name, err.msg);
            goto done;
        }
    }
    /* in 2 MiB pages where the cache is 2 MiB or more (the full-size model's), else nothing to fault */
    const int huge = c->self.huge;
    CHECK(huge == (ts_cpu_kv_floats(cf, CAP3) * c->kv_esize >= ((size_t)2 << 20) && !getenv("TESSERA_KV_PAGES")),
          "%s [%s] long context: the cache in %s pages", name, ts_cpu_variant_name(v), huge ? "2 MiB" : "4 KiB");
    CHECK((v == TS_CPU_SCALAR || !huge || (c->self.pf_block == 2 && c->self.pf_done > 0)) && isfinite(lc[0]),
          "%s [%s] long context: the next block not faulted ahead (block %d, %d pages)", name, ts_cpu_variant_name(v),
          c->self.pf_block, c->self.pf_done);
    int ok = !ts_cpu_forward_seq(c, a, toks, P, la, 0, &err) && !ts_cpu_seq_copy(b, a, SMALL, &err) &&
             !ts_cpu_seq_copy(d, b, SMALL, &err) && !ts_cpu_forward_seq(c, d, toks + SMALL, P - SMALL, lc, 0, &err);
    CHECK(ok && kv_diff(a, d, cf, P) < 0 && !memcmp(la, lc, sizeof(float) * (size_t)V),
          "%s [%s] long context: a prefix copied through a %d-position cache and continued differs (%s)", name,
          ts_cpu_variant_name(v), SMALL, ok ? "KV or logits" : err.msg);
    printf("  %-26s %-10s context %d: cosine %.7f against the oracle; prefix copy across block sizes bit-identical;"
           " cache in %s pages%s\n", name, ts_cpu_variant_name(v), P + D, worst, huge ? "2 MiB" : "4 KiB",
           huge && v != TS_CPU_SCALAR ? ", block 2 faulted ahead" : "");
done:
    ts_cpu_seq_free(a), ts_cpu_seq_free(b), ts_cpu_seq_free(d);
    ts_cpu_free(c);
    ts_ref_free(r);
    free(lr), free(lc), free(la), free(toks);
}

int main(void) {
    static const struct {
        const char *preset;
        int layers, vocab;
    } models[] = {{"qwen2.5-0.5b-tiny", 0, 0}, {"qwen3-0.6b-tiny", 0, 0}, {"qwen3-0.6b", 1, 1000}};
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *tmp = th_tmpdir("cpu_prefix");
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        char dir[1200];
        ts_error err;
        snprintf(dir, sizeof dir, "%s/%s", tmp, models[mi].preset);
        if (ts_synth_write(models[mi].preset, dir, &(ts_synth_opts){7, models[mi].vocab, models[mi].layers, NULL, NULL},
                           &err)) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        for (int q = 0; q < 3; q++) {
            ts_model *m;
            if (ts_model_open(dir, &m, &err)) {
                CHECK(0, "%s", err.msg);
                break;
            }
            static const ts_dtype qt[3] = {TS_DTYPE_BF16, TS_DTYPE_Q8_0, TS_DTYPE_Q4_0};
            if (q && ts_model_quantize(m, qt[q], &err)) {
                CHECK(0, "%s: %s", models[mi].preset, err.msg);
                ts_model_close(m);
                continue;
            }
            char name[128];
            snprintf(name, sizeof name, "%s %s", models[mi].preset, ts_dtype_name(qt[q]));
            for (int v = 0; v < TS_CPU_VARIANT_COUNT; v++) {
                if (!ts_cpu_variant_supported((ts_cpu_variant)v)) {
                    if (mi == 0 && q == 0) th_isa_gap(ts_cpu_variant_name((ts_cpu_variant)v), "kernel variant");
                    continue;
                }
                /* ctest runs it again with each AVX-512 prefill kernel forced: only that variant */
                if (getenv("TESSERA_AVX512_PREFILL") && v != TS_CPU_AVX512BF16) continue;
                /* Q8_0 / Q4_0 copied where the tile order is taken (the AMX or I16 prefill): as by
                 * default (every matrix of whole groups in tile order), then in lane order
                 * (TESSERA_Q_LAYOUT=lanes); real widths only. Pieces of 2 rows run the tile order's
                 * few-row kernel, the longer ones its tiles or panels */
                const int t16 = q && ts_cpu_t16_wanted(TS_CPU_AVX512BF16, qt[q], 1024, 1024);
                if (models[mi].layers && q && v == TS_CPU_AVX512BF16) {
                    if (t16) {
                        char nt[160];
                        snprintf(nt, sizeof nt, "%s, copied in tile order", name);
                        check_split(nt, m, (ts_cpu_variant)v, 24, 1, 1);
                        setenv("TESSERA_Q_LAYOUT", "lanes", 1);
                        snprintf(nt, sizeof nt, "%s, copied in lane order", name);
                        check_split(nt, m, (ts_cpu_variant)v, 24, 1, 1);
                        unsetenv("TESSERA_Q_LAYOUT");
                    } else {
                        th_isa_gap("AVX-512 VNNI with the AMX or I16 prefill", "Q8_0 / Q4_0 tile order");
                    }
                }
                /* real widths: the vector kernels (the scalar one is slow there and has no tiles) */
                if (models[mi].layers && (v == TS_CPU_SCALAR || q == 1)) continue;
                if (mi == 0 && q) continue; /* the second tiny model: BF16 (its K are not whole Q blocks) */
                check_split(name, m, (ts_cpu_variant)v, 24, models[mi].layers != 0, 0);
                /* the copies (lane or tile order; at real widths the tile order ran above), pieces of
                 * 2-11 rows included */
                if (q && v == TS_CPU_AVX512BF16 && !(models[mi].layers && t16)) {
                    char nc[160];
                    snprintf(nc, sizeof nc, "%s, copied", name);
                    check_split(nc, m, (ts_cpu_variant)v, 24, models[mi].layers != 0, 1);
                }
                if (mi && !q) check_long(name, m, (ts_cpu_variant)v); /* 2 and 8 kv heads */
                if (q || v == TS_CPU_SCALAR) continue;
                /* the same with an F16 cache (--kv-cache f16): its stores, copies across
                 * capacities and blocks, and split prefills bit-identical to one prefill */
                char n16[160];
                snprintf(n16, sizeof n16, "%s, F16 KV cache", name);
                m->kv_type = TS_DTYPE_F16;
                check_split(n16, m, (ts_cpu_variant)v, 24, models[mi].layers != 0, 0);
                if (mi) check_long(n16, m, (ts_cpu_variant)v);
                m->kv_type = TS_DTYPE_F32;
            }
            ts_model_close(m);
        }
    }
    return th_finish("test_cpu_prefix");
}
