/* Several sequences on one cpu session (cpu_target.h, src/target/cpu/batch.c): sequences with
 * different prompt lengths decode together in ts_cpu_decode_batch, over changing subsets
 * (B = 1..8, sequences joining and leaving, in changing orders), and every row's logits must
 * be bit-identical to the same sequence decoded alone with ts_cpu_forward_seq: BF16, Q8_0 and
 * Q4_0 weights, every kernel variant this CPU has, synth models at real widths (one layer,
 * small vocabulary) and a tiny one whose K have 16- and 32-element tails. Also: a sequence
 * equals the session's own cache, copy / truncate of a prefix, and the argument errors.
 * ts_cpu_decode_run (k tokens of one sequence in one pass: speculative decoding's verify, with
 * rejected drafts truncated away) and ts_cpu_decode_multi (several sequences, several rows
 * each) must give the same bits row for row. */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/quantize.h"
#include "target/cpu/cpu_features.h"
#include "target/cpu/cpu_target.h"
#include "target/cpu/gemm.h"
#include "tharness.h"

#define NS 8     /* sequences */
#define NSTEP 10 /* decode steps per sequence */
#define CAP 40   /* positions per sequence */

static int32_t prompt_tok(int seq, int i, int V) { return (int32_t)((seq * 7919 + i * 104729 + 5) % V); }
static int32_t decode_tok(int seq, int k, int V) { return (int32_t)((seq * 31 + k * 577 + 11) % V); }
static int prompt_len(int seq) { return 1 + (seq * 5) % 13; } /* 1..13, different per sequence */

/* Sequence i decoded alone: prompt, then NSTEP single decodes; logits of each step. */
static int decode_alone(ts_cpu *c, int i, int V, float *out) {
    ts_error err;
    ts_cpu_seq *s;
    int32_t toks[CAP];
    if (ts_cpu_seq_new(c, CAP, &s, &err)) {
        CHECK(0, "%s", err.msg);
        return -1;
    }
    int P = prompt_len(i), ok = 1;
    for (int k = 0; k < P; k++) toks[k] = prompt_tok(i, k, V);
    float *tmp = malloc(sizeof(float) * (size_t)V);
    ok &= ts_cpu_forward_seq(c, s, toks, P, tmp, 0, &err) == TS_OK;
    for (int k = 0; k < NSTEP && ok; k++) {
        int32_t t = decode_tok(i, k, V);
        ok &= ts_cpu_forward_seq(c, s, &t, 1, out + (size_t)k * V, 0, &err) == TS_OK;
    }
    CHECK(ok, "seq %d alone: %s", i, err.msg);
    free(tmp);
    ts_cpu_seq_free(s);
    return ok ? 0 : -1;
}

/* Which sequences step t decodes: each joins at its own step and leaves when done, and some
 * steps leave some out, so B and the members change every step; the order rotates. */
static int active_at(int t, int i, const int *done) {
    int join = (i * 3) % 7;
    return t >= join && done[i] < NSTEP && ((t + i) % 5 != 3 || t % 3 == 0); /* t = 6: all 8 */
}

/* ts_cpu_decode_run and ts_cpu_decode_multi on the sequences check_batch left (truncated back to
 * their prompts): each sequence's NSTEP tokens again, in runs of 1-5 rows followed by 0-2 wrong
 * drafts that are truncated away (the next run overwrites their KV), then all sequences
 * together in multi steps of 1-4 rows each (some left out, rotating order); every kept row
 * memcmp-equal to the sequence's single decode. */
static void check_runs(const char *name, ts_cpu *c, ts_cpu_variant v, ts_cpu_seq **seqs, const float *alone, int V) {
    ts_error err;
    float *lg = malloc(sizeof(float) * (size_t)TS_CPU_BATCH_MAX * V);
    int bad = 0, rows = 0, runs = 0, mbad = 0, mrows = 0, msteps = 0, maxr = 0, ok = 1;
    for (int i = 0; i < NS && ok; i++) {
        int P = prompt_len(i);
        ts_cpu_seq_truncate(seqs[i], P);
        for (int k0 = 0, t = 0; k0 < NSTEP; t++) {
            int k = 1 + (i + t * 3) % 5, junk = (i + t) % 3;
            if (k > NSTEP - k0) k = NSTEP - k0;
            int32_t bt[8];
            for (int j = 0; j < k; j++) bt[j] = decode_tok(i, k0 + j, V);
            for (int j = 0; j < junk; j++) bt[k + j] = (decode_tok(i, k0 + k + j, V) + 1 + j) % V; /* wrong drafts */
            if (ts_cpu_decode_run(c, seqs[i], bt, k + junk, lg, &err) ||
                ts_cpu_seq_n_past(seqs[i]) != P + k0 + k + junk) {
                CHECK(0, "%s: decode run of %d: %s", name, k + junk, err.msg);
                ok = 0;
                break;
            }
            for (int j = 0; j < k; j++, rows++)
                if (memcmp(lg + (size_t)j * V, alone + ((size_t)i * NSTEP + k0 + j) * V, sizeof(float) * (size_t)V)) {
                    if (!bad) fprintf(stderr, "  first difference: seq %d, run %d of %d rows, row %d\n", i, t, k + junk, j);
                    bad++;
                }
            ts_cpu_seq_truncate(seqs[i], P + k0 + k); /* the wrong drafts rejected */
            k0 += k, runs++;
        }
    }
    int done[NS] = {0};
    for (int i = 0; i < NS; i++) ts_cpu_seq_truncate(seqs[i], prompt_len(i));
    for (int t = 0; t < 64 && ok; t++) {
        ts_cpu_seq *bs[NS];
        int32_t bt[TS_CPU_BATCH_MAX];
        int who[NS], n[NS], B = 0, R = 0;
        for (int j = 0; j < NS; j++) {
            int i = (j + t) % NS;
            if (done[i] >= NSTEP || (t + i) % 4 == 1) continue;
            int k = 1 + (i * 2 + t) % 4;
            if (k > NSTEP - done[i]) k = NSTEP - done[i];
            for (int r = 0; r < k; r++) bt[R + r] = decode_tok(i, done[i] + r, V);
            who[B] = i, bs[B] = seqs[i], n[B] = k, B++, R += k;
        }
        if (!B) continue;
        if (ts_cpu_decode_multi(c, bs, n, bt, B, lg, &err)) {
            CHECK(0, "%s: multi step %d (%d sequences, %d rows): %s", name, t, B, R, err.msg);
            break;
        }
        msteps++, maxr = R > maxr ? R : maxr;
        for (int b = 0, r = 0; b < B; b++)
            for (int j = 0; j < n[b]; j++, r++, mrows++) {
                int i = who[b];
                if (memcmp(lg + (size_t)r * V, alone + ((size_t)i * NSTEP + done[i]) * V, sizeof(float) * (size_t)V)) {
                    if (!mbad) fprintf(stderr, "  first difference: multi step %d, row %d of %d (seq %d)\n", t, r, R, i);
                    mbad++;
                }
                done[i]++;
            }
    }
    for (int i = 0; i < NS && ok; i++) CHECK(done[i] == NSTEP, "%s: multi: seq %d decoded %d of %d", name, i, done[i], NSTEP);
    CHECK(bad == 0 && mbad == 0, "%s [%s]: decode run: %d of %d rows differ; multi: %d of %d differ", name,
          ts_cpu_variant_name(v), bad, rows, mbad, mrows);
    printf("  %-28s %-10s          runs: %d runs (1-5 kept rows, 0-2 rejected), %d rows; multi: %d steps, up to %d "
           "rows, %d rows: all bit-identical\n",
           name, ts_cpu_variant_name(v), runs, rows, msteps, maxr, mrows);
    free(lg);
}

static void check_batch(const char *name, const ts_model *m, ts_cpu_variant v, unsigned disable) {
    const ts_config *cf = ts_model_config(m);
    int V = cf->n_vocab;
    ts_error err;
    ts_cpu *c = NULL;
    ts_cpu_opts o = {.n_threads = 2, .force_variant = (int)v, .disable = disable};
    if (ts_cpu_new(m, 64, &o, &c, &err)) {
        CHECK(0, "%s: %s", name, err.msg);
        return;
    }
    float *alone = malloc(sizeof(float) * (size_t)NS * NSTEP * V), *lg = malloc(sizeof(float) * (size_t)NS * V);
    for (int i = 0; i < NS; i++)
        if (decode_alone(c, i, V, alone + (size_t)i * NSTEP * V)) goto done;

    /* the session's own cache still runs and gives the numbers a sequence gives */
    {
        int32_t toks[CAP];
        int P = prompt_len(3);
        for (int k = 0; k < P; k++) toks[k] = prompt_tok(3, k, V);
        for (int k = 0; k < NSTEP; k++) toks[P + k] = decode_tok(3, k, V);
        ts_cpu_reset(c);
        int ok = ts_cpu_forward(c, toks, P, lg, 0, NULL, &err) == TS_OK, same = 1;
        for (int k = 0; k < NSTEP && ok; k++) {
            ok &= ts_cpu_forward(c, &toks[P + k], 1, lg, 0, NULL, &err) == TS_OK;
            same &= !memcmp(lg, alone + ((size_t)3 * NSTEP + k) * V, sizeof(float) * (size_t)V);
        }
        CHECK(ok && same, "%s [%s]: the session's own cache differs from a sequence (%s)", name,
              ts_cpu_variant_name(v), ok ? "logits" : err.msg);
    }

    ts_cpu_seq *seqs[NS] = {0};
    int done[NS] = {0}, steps = 0, rows = 0, bad = 0, maxb = 0;
    for (int i = 0; i < NS; i++) {
        int32_t toks[CAP];
        int P = prompt_len(i);
        for (int k = 0; k < P; k++) toks[k] = prompt_tok(i, k, V);
        if (ts_cpu_seq_new(c, CAP, &seqs[i], &err) || ts_cpu_forward_seq(c, seqs[i], toks, P, lg, 0, &err)) {
            CHECK(0, "%s: %s", name, err.msg);
            goto free_seqs;
        }
    }
    for (int t = 0; t < 64; t++) {
        ts_cpu_seq *bs[NS];
        int32_t bt[NS];
        int who[NS], B = 0;
        for (int j = 0; j < NS; j++) {
            int i = (j + t) % NS; /* rotating order */
            if (!active_at(t, i, done)) continue;
            who[B] = i, bs[B] = seqs[i], bt[B] = decode_tok(i, done[i], V), B++;
        }
        if (!B) continue;
        if (ts_cpu_decode_batch(c, bs, bt, B, lg, &err)) {
            CHECK(0, "%s: step %d, B %d: %s", name, t, B, err.msg);
            break;
        }
        steps++, maxb = B > maxb ? B : maxb;
        for (int b = 0; b < B; b++, rows++) {
            int i = who[b];
            if (memcmp(lg + (size_t)b * V, alone + ((size_t)i * NSTEP + done[i]) * V, sizeof(float) * (size_t)V)) {
                if (!bad) fprintf(stderr, "  first difference: step %d, row %d of %d (seq %d, decode %d)\n", t, b, B, i, done[i]);
                bad++;
            }
            done[i]++;
        }
    }
    for (int i = 0; i < NS; i++) CHECK(done[i] == NSTEP, "%s: seq %d decoded %d of %d steps", name, i, done[i], NSTEP);
    CHECK(bad == 0, "%s [%s]: %d of %d batched rows differ from the sequence decoded alone", name,
          ts_cpu_variant_name(v), bad, rows);
    printf("  %-28s %-10s %s: %d steps, B up to %d, %d rows bit-identical to single decodes\n", name,
           ts_cpu_variant_name(v), disable ? "GEMV off" : "        ", steps, maxb, rows - bad);
    check_runs(name, c, v, seqs, alone, V);
free_seqs:
    for (int i = 0; i < NS; i++) ts_cpu_seq_free(seqs[i]);
done:
    free(alone), free(lg);
    ts_cpu_free(c);
}

/* A prefix kept by truncate or copied into another sequence, then continued, gives the logits
 * of a fresh run of the same tokens in the same pieces. */
static void check_copy(const char *name, const ts_model *m, ts_cpu_variant v) {
    int V = ts_model_config(m)->n_vocab, n = 6, total = 15;
    ts_error err;
    ts_cpu *c = NULL;
    ts_cpu_seq *a = NULL, *b = NULL, *d = NULL;
    ts_cpu_opts o = {.n_threads = 2, .force_variant = (int)v};
    int32_t toks[CAP];
    for (int k = 0; k < total; k++) toks[k] = prompt_tok(1, k, V);
    float *ref = malloc(sizeof(float) * (size_t)V * 2), *got = malloc(sizeof(float) * (size_t)V * 2);
    if (ts_cpu_new(m, 64, &o, &c, &err) || ts_cpu_seq_new(c, CAP, &a, &err) || ts_cpu_seq_new(c, 24, &b, &err) ||
        ts_cpu_seq_new(c, CAP, &d, &err)) {
        CHECK(0, "%s: %s", name, err.msg);
        goto done;
    }
    /* fresh: n tokens, then the rest, then one decode step */
    int ok = !ts_cpu_forward_seq(c, a, toks, n, got, 0, &err) &&
             !ts_cpu_forward_seq(c, a, toks + n, total - n - 1, ref, 0, &err) &&
             !ts_cpu_forward_seq(c, a, toks + total - 1, 1, ref + V, 0, &err);
    /* truncated back to n and continued the same way */
    ts_cpu_seq_truncate(a, n);
    ok = ok && ts_cpu_seq_n_past(a) == n && !ts_cpu_forward_seq(c, a, toks + n, total - n - 1, got, 0, &err) &&
         !ts_cpu_forward_seq(c, a, toks + total - 1, 1, got + V, 0, &err);
    CHECK(ok && !memcmp(got, ref, sizeof(float) * 2 * (size_t)V), "%s [%s]: truncate then continue differs (%s)", name,
          ts_cpu_variant_name(v), ok ? "logits" : err.msg);
    /* a's first n positions copied into b (another capacity, so another layer stride) */
    ok = !ts_cpu_seq_copy(b, a, n, &err) && ts_cpu_seq_n_past(b) == n && ts_cpu_seq_capacity(b) == 24 &&
         !ts_cpu_forward_seq(c, b, toks + n, total - n - 1, got, 0, &err) &&
         !ts_cpu_forward_seq(c, b, toks + total - 1, 1, got + V, 0, &err);
    CHECK(ok && !memcmp(got, ref, sizeof(float) * 2 * (size_t)V), "%s [%s]: copy then continue differs (%s)", name,
          ts_cpu_variant_name(v), ok ? "logits" : err.msg);
    /* the copied prefix continued by batched decode steps alongside its source */
    ts_cpu_seq_truncate(a, total - 1);
    ts_cpu_seq_truncate(b, total - 1);
    ts_cpu_seq *two[2] = {b, a};
    int32_t tt[2] = {toks[total - 1], toks[total - 1]};
    ok = !ts_cpu_decode_batch(c, two, tt, 2, got, &err);
    CHECK(ok && !memcmp(got, ref + V, sizeof(float) * (size_t)V) && !memcmp(got + V, ref + V, sizeof(float) * (size_t)V),
          "%s [%s]: batched decode of a copy and its source differs (%s)", name, ts_cpu_variant_name(v),
          ok ? "logits" : err.msg);
    /* copy of the whole of one prefill into d, then the next token: a prefix of a longer
     * prefill continued */
    ok = !ts_cpu_seq_copy(d, a, total - 1, &err) && !ts_cpu_forward_seq(c, d, toks + total - 1, 1, got, 0, &err);
    CHECK(ok && !memcmp(got, ref + V, sizeof(float) * (size_t)V), "%s [%s]: copy of a full prefix differs (%s)", name,
          ts_cpu_variant_name(v), ok ? "logits" : err.msg);
done:
    ts_cpu_seq_free(a), ts_cpu_seq_free(b), ts_cpu_seq_free(d);
    ts_cpu_free(c);
    free(ref), free(got);
}

static void expect_arg(ts_status st, const ts_error *err, const char *phrase, const char *what) {
    CHECK(st == TS_ERR_ARG && strstr(err->msg, phrase), "%s: status %d, message \"%s\" (wanted TS_ERR_ARG naming \"%s\")",
          what, (int)st, st ? err->msg : "", phrase);
    if (st == TS_ERR_ARG) printf("    %-28s -> %s\n", what, err->msg);
}

static void check_errors(const ts_model *m) {
    ts_error err;
    ts_cpu *c = NULL, *c2 = NULL;
    ts_cpu_opts o = {.n_threads = 1, .force_variant = -1};
    if (ts_cpu_new(m, 64, &o, &c, &err) || ts_cpu_new(m, 16, &o, &c2, &err)) {
        CHECK(0, "%s", err.msg);
        ts_cpu_free(c);
        return;
    }
    int V = ts_model_config(m)->n_vocab;
    CHECK(ts_cpu_batch_max(c) == TS_CPU_BATCH_MAX && ts_cpu_batch_max(c2) == 16, "batch max %d and %d",
          ts_cpu_batch_max(c), ts_cpu_batch_max(c2));
    ts_cpu_seq *s[TS_CPU_BATCH_MAX + 1] = {0}, *small = NULL, *other = NULL;
    int ok = 1;
    for (int i = 0; i <= TS_CPU_BATCH_MAX; i++) ok &= ts_cpu_seq_new(c, 4, &s[i], &err) == TS_OK;
    ok &= ts_cpu_seq_new(c, 2, &small, &err) == TS_OK && ts_cpu_seq_new(c2, 4, &other, &err) == TS_OK;
    CHECK(ok, "%s", err.msg);
    if (!ok) goto done;
    int32_t t[TS_CPU_BATCH_MAX + 1] = {0};
    float *lg = malloc(sizeof(float) * (size_t)V * (TS_CPU_BATCH_MAX + 1));
    expect_arg(ts_cpu_decode_batch(c, s, t, TS_CPU_BATCH_MAX + 1, lg, &err), &err, "1 to 32", "B too big");
    expect_arg(ts_cpu_decode_batch(c, s, t, 0, lg, &err), &err, "0 sequences", "B = 0");
    ts_cpu_seq *dup[3] = {s[0], s[1], s[0]};
    expect_arg(ts_cpu_decode_batch(c, dup, t, 3, lg, &err), &err, "sequences 0 and 2 are the same", "duplicate");
    ts_cpu_seq *foreign[2] = {s[0], other};
    expect_arg(ts_cpu_decode_batch(c, foreign, t, 2, lg, &err), &err, "another session", "foreign sequence");
    int32_t bad_tok[2] = {0, V};
    expect_arg(ts_cpu_decode_batch(c, s, bad_tok, 2, lg, &err), &err, "vocab", "token outside the vocabulary");
    CHECK(ts_cpu_seq_n_past(s[0]) == 0 && ts_cpu_seq_n_past(s[1]) == 0, "a refused batch advanced a sequence");
    int32_t two[2] = {1, 2};
    CHECK(ts_cpu_forward_seq(c, small, two, 2, lg, 0, &err) == TS_OK, "%s", err.msg);
    ts_cpu_seq *full[2] = {s[0], small};
    expect_arg(ts_cpu_decode_batch(c, full, t, 2, lg, &err), &err, "full (2 of 2 positions)", "capacity exceeded");
    expect_arg(ts_cpu_forward_seq(c, small, two, 1, lg, 0, &err), &err, "2", "forward past capacity");
    expect_arg(ts_cpu_decode_run(c, s[2], t, 5, lg, &err), &err, "full (0 of 4 positions): 5 more", "run past capacity");
    expect_arg(ts_cpu_decode_run(c, s[2], t, TS_CPU_BATCH_MAX + 1, lg, &err), &err, "1 to 32", "run too long");
    expect_arg(ts_cpu_decode_run(c, s[2], t, 0, lg, &err), &err, "0 tokens", "run of 0");
    int nn[3] = {2, 0, 1};
    expect_arg(ts_cpu_decode_multi(c, s + 2, nn, t, 3, lg, &err), &err, "0 tokens for sequence 1", "multi: 0 rows");
    int nbig[2] = {2, TS_CPU_BATCH_MAX - 1};
    expect_arg(ts_cpu_decode_multi(c, s + 2, nbig, t, 2, lg, &err), &err, "after 2 rows", "multi: too many rows");
    CHECK(ts_cpu_seq_n_past(s[2]) == 0 && ts_cpu_seq_n_past(s[3]) == 0, "a refused run advanced a sequence");

    expect_arg(ts_cpu_seq_copy(s[0], small, 3, &err), &err, "the source holds 2", "copy more than the source");
    expect_arg(ts_cpu_seq_copy(s[1], s[2], 1, &err), &err, "the source holds 0", "copy from an empty source");
    CHECK(ts_cpu_forward_seq(c, s[0], two, 2, lg, 0, &err) == TS_OK && ts_cpu_forward_seq(c, s[1], two, 2, lg, 0, &err) == TS_OK, "%s", err.msg);
    ts_cpu_seq *big = NULL;
    if (ts_cpu_seq_new(c, 3, &big, &err) == TS_OK) {
        CHECK(ts_cpu_forward_seq(c, big, two, 2, lg, 0, &err) == TS_OK && ts_cpu_forward_seq(c, big, two, 1, lg, 0, &err) == TS_OK, "%s", err.msg);
        expect_arg(ts_cpu_seq_copy(small, big, 3, &err), &err, "room for 2", "copy past the capacity");
        ts_cpu_seq_free(big);
    }
    expect_arg(ts_cpu_seq_copy(other, s[0], 1, &err), &err, "different sessions", "copy across sessions");
    expect_arg(ts_cpu_forward_seq(c, other, two, 1, lg, 0, &err), &err, "another session", "forward on a foreign seq");
    expect_arg(ts_cpu_seq_new(c, 0, &big, &err), &err, "capacity 0", "capacity 0");
    expect_arg(ts_cpu_seq_new(c, ts_model_config(m)->max_pos + 1, &big, &err), &err, "exceeds the model's context",
               "capacity past the model's context");
    free(lg);
done:
    for (int i = 0; i <= TS_CPU_BATCH_MAX; i++) ts_cpu_seq_free(s[i]);
    ts_cpu_seq_free(small), ts_cpu_seq_free(other);
    ts_cpu_free(c), ts_cpu_free(c2);
}

/* The AVX-512 FP32 batch GEMV alone (register tiles of 3 W rows x 4 x rows, blocks of 24 W
 * rows, two passes over K) against the one-row GEMV, row by row with memcmp: every S from 1
 * to 10 (x-group tails), N with tile and block tails, column sub-ranges (thread splits), K
 * with 64-position steps and 16-, 32- and 48-position tails. */
static void check_f32_kernel(void) {
    static const int Ks[] = {16, 32, 48, 64, 80, 96, 112, 304, 1024, 1040};
    static const int Ns[] = {1, 2, 3, 4, 5, 7, 23, 24, 25, 49, 77};
    int bad = 0, runs = 0;
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
        int K = Ks[ki];
        for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++) {
            int N = Ns[ni], S = 10;
            uint16_t *W = malloc(sizeof(uint16_t) * (size_t)N * K);
            float *x = malloc(sizeof(float) * (size_t)S * K), *y = malloc(sizeof(float) * (size_t)S * N),
                  *y1 = malloc(sizeof(float) * (size_t)N);
            for (size_t i = 0; i < (size_t)N * K; i++) W[i] = (uint16_t)(0x3c00 + (i * 2654435761u >> 20) % 0x900);
            for (size_t i = 0; i < (size_t)S * K; i++) x[i] = (float)((i * 40503u) % 1999) / 999.0f - 1.0f;
            for (int s = 1; s <= S; s++)
                for (int split = 0; split < 2; split++) {
                    int n0 = split && N > 2 ? 1 : 0, n1 = split && N > 2 ? N - 1 : N;
                    memset(y, 0, sizeof(float) * (size_t)S * N);
                    ts_cpu_gemv_batch_f32_avx512(y, N, x, K, W, K, s, n0, n1);
                    for (int r = 0; r < s; r++) {
                        ts_cpu_gemv_f32_avx512(y1, x + (size_t)r * K, W, K, n0, n1);
                        bad += memcmp(y + (size_t)r * N + n0, y1 + n0, sizeof(float) * (size_t)(n1 - n0)) != 0;
                        runs++;
                    }
                }
            free(W), free(x), free(y), free(y1);
        }
    }
    CHECK(bad == 0, "avx512 FP32 batch GEMV: %d of %d rows differ from the one-row GEMV", bad, runs);
    printf("  avx512 FP32 batch GEMV: %d rows (S 1-10, N 1-77, K 16-1040, column splits) bit-identical to one-row\n",
           runs);
}

int main(void) {
    /* real widths (one layer, 1000 tokens): qwen2.5-0.5b has K = 896 and 4864 (28 and 152
     * Q4_0 blocks: the 16-block groups and their tails), GQA 7:1 and biases; qwen3-0.6b
     * q/k norms and head_dim 128. The tiny preset's K = 112 and 304 have 32- and 16-element
     * tails (and are not whole Q4_0 blocks: its quantized copy keeps those matrices BF16). */
    static const struct {
        const char *preset;
        int layers, vocab;
    } models[] = {{"qwen2.5-0.5b", 1, 1000}, {"qwen3-0.6b", 1, 1000}, {"qwen2.5-0.5b-tiny", 0, 0}};
    if (ts_cpu_variant_supported(TS_CPU_AVX512BF16)) check_f32_kernel();
    const char *tmp = th_tmpdir("cpu_batch");
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
                check_batch(name, m, (ts_cpu_variant)v, 0);
                /* the decode GEMV switched off: the register-tile decode path (AVX2 tiles,
                 * AVX-512 bf16x3 with 4 W rows per pass) */
                if (mi == 2) check_batch(name, m, (ts_cpu_variant)v, TS_OPT_GEMV);
                if (q == 0 || mi == 0) check_copy(name, m, (ts_cpu_variant)v);
            }
            if (mi == 0 && q == 0) check_errors(m);
            ts_model_close(m);
        }
    }
    return th_finish("test_cpu_batch");
}
