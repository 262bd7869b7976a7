/* Chunked prefill's cuts (ts_sched_piece, src/serve/sched.c): for every prompt rest and step
 * budget in a range, the pieces a prompt is prefilled in never include one of a single row
 * (that would run the decode arithmetic, and the text would differ from the request alone)
 * unless the whole prompt is one token, never exceed the budget by more than one row, cover the
 * prompt exactly, and make progress at every step a slot has the whole budget (no livelock). A
 * budget left over by older slots (any size, 1 included) gives a piece or 0. Then the pieces it
 * cuts, with random budgets left by older slots and after a prefix taken from the cache, run on
 * the cpu target (a synth model, every kernel variant): the KV and the last logits are
 * bit-identical to the prompt prefilled in one call (the server's text is tests/test_serve_chunk.sh;
 * greedy text alone would hide a difference in the last bits). A planner that cut 1-row pieces is
 * run alongside, to show the check can see what it guards against. */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "serve/sched.h"
#include "target/cpu/cpu_internal.h"
#include "tharness.h"

#define CAP 140

static int same_kv(const ts_cpu_seq *a, const ts_cpu_seq *b, const ts_config *cf, int n) {
    size_t es = a->c->kv_esize, len = (size_t)cf->head_dim * es;
    for (int l = 0; l < cf->n_layers; l++)
        for (int r = 0; r < n; r++)
            for (int g = 0; g < cf->n_kv_heads; g++) {
                size_t o = ts_cpu_kv_off(cf, CAP, l, g, r);
                if (memcmp(ts_cpu_kv_at(a->k_cache, o, es), ts_cpu_kv_at(b->k_cache, o, es), len) ||
                    memcmp(ts_cpu_kv_at(a->v_cache, o, es), ts_cpu_kv_at(b->v_cache, o, es), len))
                    return 0;
            }
    return 1;
}

/* Prefills toks[0:P] into s as the scheduler would: a first piece of `cached` tokens (the
 * prefix cache's copy, 0: none), then per step the piece the budget left by older slots allows
 * (random, the whole chunk when that gave nothing). naive: min(rest, budget), 1-row pieces
 * included. Returns 0, or -1 on a target error. */
static int run_pieces(ts_cpu *c, ts_cpu_seq *s, const int32_t *toks, int P, int cached, int chunk, int naive,
                      unsigned *rng, float *lg) {
    ts_error err;
    ts_cpu_seq_truncate(s, 0);
    if (cached && ts_cpu_forward_seq(c, s, toks, cached, NULL, 0, &err)) return -1;
    int at = cached, left = 0;
    while (at < P) {
        *rng = *rng * 1103515245u + 12345u;
        left = left ? chunk : (int)((*rng >> 16) % (unsigned)(chunk + 1)); /* after a step with nothing: all */
        int rest = P - at, n = naive ? (rest < left ? rest : left) : ts_sched_piece(rest, left);
        if (!n) continue;
        left = 0;
        if (ts_cpu_forward_seq(c, s, toks + at, n, at + n == P ? lg : NULL, 0, &err)) {
            CHECK(0, "%s", err.msg);
            return -1;
        }
        at += n;
    }
    return 0;
}

static void check_target(const char *dir, ts_cpu_variant v) {
    ts_error err;
    ts_model *m = NULL;
    ts_cpu *c = NULL;
    ts_cpu_seq *cold = NULL, *warm = NULL;
    /* one thread: the arithmetic does not depend on it, and two spin against each other on a
     * loaded machine (the calls here are small) */
    ts_cpu_opts o = {.n_threads = 1, .force_variant = (int)v};
    if (ts_model_open(dir, &m, &err) || ts_cpu_new(m, CAP, &o, &c, &err) || ts_cpu_seq_new(c, CAP, &cold, &err) ||
        ts_cpu_seq_new(c, CAP, &warm, &err)) {
        CHECK(0, "%s", err.msg);
        goto done;
    }
    const ts_config *cf = ts_model_config(m);
    int V = cf->n_vocab, runs = 0, naive_runs = 0, naive_bad = 0;
    float *ref = malloc(sizeof(float) * (size_t)V), *got = malloc(sizeof(float) * (size_t)V);
    int32_t toks[CAP];
    for (int i = 0; i < CAP; i++) toks[i] = (int32_t)((i * 7919 + 13) % V);
    static const int chunks[] = {2, 3, 16, 17, 33};
    unsigned rng = 1;
    for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
        int ch = chunks[ci];
        /* every length near the chunk's multiples, a few others */
        /* (the scalar kernels are slow: short prompts there; test_cpu_prefix covers their splits) */
        for (int P = 2; P <= (v == TS_CPU_SCALAR ? 24 : ch < 16 ? 40 : CAP); P++) {
            if (P % ch > 2 && P % ch < ch - 1 && P % 11) continue;
            if (ts_cpu_forward_seq(c, cold, toks, P, ref, 0, &err)) {
                CHECK(0, "%s", err.msg);
                goto out;
            }
            for (int trial = 0; trial < 3; trial++) {
                int cached = trial == 2 && P >= 4 ? 2 + (int)(rng % (unsigned)(P - 3)) : 0; /* leaves >= 2 */
                for (int naive = 0; naive < 2; naive++) {
                    if (run_pieces(c, warm, toks, P, cached, ch, naive, &rng, got)) goto out;
                    int same = same_kv(cold, warm, cf, P) && !memcmp(ref, got, sizeof(float) * (size_t)V);
                    if (naive) naive_runs++, naive_bad += !same;
                    else {
                        runs++;
                        CHECK(same, "chunk %d, P %d, %d cached: the pieces' KV or logits differ from one call", ch, P,
                              cached);
                    }
                }
            }
            ts_cpu_seq_truncate(cold, 0);
        }
    }
    printf("  %s [%s]: %d piece plans bit-identical to one call; naive plans (1-row pieces allowed) %d of %d differ\n",
           "qwen3-0.6b-tiny", ts_cpu_variant_name(ts_cpu_variant_of(c)), runs, naive_bad, naive_runs);
out:
    free(ref), free(got);
done:
    ts_cpu_seq_free(cold), ts_cpu_seq_free(warm);
    ts_cpu_free(c);
    ts_model_close(m);
}

int main(void) {
    long pieces = 0;
    for (int P = 1; P <= 600; P++) {
        /* unlimited: the whole prompt at once */
        CHECK(ts_sched_piece(P, -1) == P, "no budget: %d tokens -> %d", P, ts_sched_piece(P, -1));
        for (int budget = 2; budget <= 80; budget++) {
            int rest = P, steps = 0;
            while (rest > 0) {
                int n = ts_sched_piece(rest, budget);
                steps++, pieces++;
                CHECK(n > 0 && n <= rest, "P %d budget %d: rest %d -> piece %d", P, budget, rest, n);
                if (n <= 0 || n > rest) break;
                CHECK(n <= budget || (n == budget + 1 && rest == n), "P %d budget %d: piece %d of rest %d", P, budget,
                      n, rest);
                CHECK(n != 1 || P == 1, "P %d budget %d: a piece of one row (rest %d)", P, budget, rest);
                CHECK(rest - n != 1, "P %d budget %d: leaves one row (rest %d, piece %d)", P, budget, rest, n);
                rest -= n;
            }
            /* at least budget - 1 rows a step */
            CHECK(steps <= (P + budget - 2) / (budget - 1), "P %d budget %d: %d steps", P, budget, steps);
        }
        /* what older slots left: a piece that leaves 0 or >= 2 rows, or nothing */
        for (int left = 0; left <= 40; left++) {
            int n = ts_sched_piece(P, left);
            CHECK(n == 0 || ((n >= 2 || P == 1) && P - n != 1 && (n <= left || (n == left + 1 && n == P))),
                  "rest %d, %d left: piece %d", P, left, n);
        }
    }
    printf("  %ld pieces checked\n", pieces);
    const char *dir = th_tmpdir("serve_sched");
    ts_error err;
    if (ts_synth_write("qwen3-0.6b-tiny", dir, &(ts_synth_opts){11, 0, 0, NULL, NULL}, &err)) CHECK(0, "%s", err.msg);
    else
        for (int v = 0; v < TS_CPU_VARIANT_COUNT; v++) {
            if (ts_cpu_variant_supported((ts_cpu_variant)v)) check_target(dir, (ts_cpu_variant)v);
            else th_isa_gap(ts_cpu_variant_name((ts_cpu_variant)v), "kernel variant");
        }
    return th_finish("test_serve_sched");
}
