/* Several sequences on one session (tessera serve's continuous batching): a ts_cpu_seq is a KV
 * cache of its own, run by the session's one forward pass (ts_cpu_forward_kv) with the
 * session's weights, threads and arena. ts_cpu_decode_batch runs one decode step of B
 * sequences as one pass of B rows: each GEMM reads its weights once for all B rows (decode is
 * bound by that read), while RoPE, the KV store and attention use each row's own position and
 * cache. Every row goes through the S = 1 decode arithmetic (the batch GEMVs, gemm.h), so a
 * sequence's logits do not depend on what else is in the batch. ts_cpu_decode_run appends k
 * consecutive tokens of one sequence the same way (k rows, each the decode arithmetic at its own
 * position): the verify step of prompt-lookup speculative decoding. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "target/cpu/cpu_internal.h"
#include "target/cpu/cpu_target.h"
#include "target/cpu/gemm.h"

_Static_assert(TS_GEMM_BATCH_MAX >= TS_CPU_BATCH_MAX, "the batch GEMVs take every row of a batch");

/* Attention scores hold one row of the largest cache: a sequence longer than the session's
 * own max_seq moves them off the arena into a larger buffer (between passes, never during). */
static ts_status grow_scores(ts_cpu *c, int cap, ts_error *err) {
    if (cap <= c->sc_len) return TS_OK;
    size_t n = (size_t)c->nth * TS_ATTN_TILE * ((size_t)cap + 16);
    float *p = malloc(n * sizeof *p);
    if (!p) return ts_fail(err, TS_ERR_NOMEM, "cpu sequence: cannot allocate %zu KiB of attention scores", n * 4 >> 10);
    free(c->sc_heap);
    c->sc_heap = c->scores = p;
    c->sc_len = cap;
    return TS_OK;
}

ts_status ts_cpu_seq_new(ts_cpu *c, int max_seq, ts_cpu_seq **out, ts_error *err) {
    *out = NULL;
    const ts_config *cf = c->c;
    if (max_seq < 1 || max_seq > (1 << 24))
        return ts_fail(err, TS_ERR_ARG, "cpu sequence: capacity %d outside [1, 2^24]", max_seq);
    ts_status st = ts_model_check_context(c->m, max_seq, "cpu sequence: capacity", err);
    if (st) return st;
    size_t kv = ts_cpu_kv_floats(cf, max_seq) * c->kv_esize;
    ts_cpu_seq *s = calloc(1, sizeof *s);
    if (s) *s = (ts_cpu_seq){c, ts_cpu_kv_alloc(kv), ts_cpu_kv_alloc(kv), max_seq, 0, 0, 0, ts_cpu_kv_huge(kv)};
    if (!s || !s->k_cache || !s->v_cache) {
        ts_cpu_seq_free(s);
        return ts_fail(err, TS_ERR_NOMEM, "cpu sequence: cannot allocate %zu MiB of KV cache (%d positions)",
                       2 * kv >> 20, max_seq);
    }
    if ((st = grow_scores(c, max_seq, err))) {
        ts_cpu_seq_free(s);
        return st;
    }
    ts_cpu_kv_fault_first(s);
    *out = s;
    return TS_OK;
}

void ts_cpu_seq_free(ts_cpu_seq *s) {
    if (!s) return;
    free(s->k_cache);
    free(s->v_cache);
    free(s);
}

int ts_cpu_seq_n_past(const ts_cpu_seq *s) { return s->n_past; }
int ts_cpu_seq_capacity(const ts_cpu_seq *s) { return s->cap; }

void ts_cpu_seq_truncate(ts_cpu_seq *s, int n) {
    if (n >= 0 && n < s->n_past) s->n_past = n;
}

ts_status ts_cpu_seq_copy(ts_cpu_seq *dst, const ts_cpu_seq *src, int n, ts_error *err) {
    if (dst->c != src->c)
        return ts_fail(err, TS_ERR_ARG, "cpu sequence copy: the two sequences belong to different sessions");
    if (n < 0 || n > src->n_past || n > dst->cap)
        return ts_fail(err, TS_ERR_ARG,
                       "cpu sequence copy: %d positions, but the source holds %d and the destination has room for %d",
                       n, src->n_past, dst->cap);
    if (dst == src) {
        dst->n_past = n;
        return TS_OK;
    }
    const ts_config *cf = dst->c->c;
    /* per layer and head, in runs of positions contiguous in both caches: two capacities mean two
     * layer strides and maybe two block sizes (cpu_internal.h) */
    size_t rs = ts_cpu_kv_rows(src->cap), rd = ts_cpu_kv_rows(dst->cap);
    for (int l = 0; l < cf->n_layers; l++)
        for (int g = 0; g < cf->n_kv_heads; g++)
            for (int p = 0, r; p < n; p += r) {
                size_t a = rs - (size_t)p % rs, b = rd - (size_t)p % rd, m = a < b ? a : b;
                r = (size_t)(n - p) < m ? n - p : (int)m;
                size_t od = ts_cpu_kv_off(cf, dst->cap, l, g, p), os = ts_cpu_kv_off(cf, src->cap, l, g, p);
                size_t es = dst->c->kv_esize, len = (size_t)r * (size_t)cf->head_dim * es;
                memcpy(ts_cpu_kv_at(dst->k_cache, od, es), ts_cpu_kv_at(src->k_cache, os, es), len);
                memcpy(ts_cpu_kv_at(dst->v_cache, od, es), ts_cpu_kv_at(src->v_cache, os, es), len);
            }
    dst->n_past = n;
    return TS_OK;
}

ts_status ts_cpu_forward_seq(ts_cpu *c, ts_cpu_seq *s, const int32_t *tokens, int n, float *logits, int all_logits,
                             ts_error *err) {
    if (!s || s->c != c) return ts_fail(err, TS_ERR_ARG, "cpu forward: the sequence belongs to another session");
    return ts_cpu_forward_kv(c, s, tokens, n, logits, all_logits, NULL, err);
}

int ts_cpu_batch_max(const ts_cpu *c) { return c->chunk < CPU_BATCH_MAX ? c->chunk : CPU_BATCH_MAX; }

/* The one pass behind ts_cpu_decode_batch, _run and _multi: sequence b appends n[b] tokens
 * (n NULL: one each), rows in order. Row r of sequence b sits at position n_past + j of its
 * own cache: the KV store (in the pass's first dispatch of each layer) writes every row before
 * the attention dispatch reads any, and each row's decode attention covers the positions up
 * to its own, so j > 0 rows see the earlier rows of the same step exactly as successive single
 * decodes would. */
static ts_status decode_rows(ts_cpu *c, ts_cpu_seq *const *seqs, const int *n, const int32_t *tokens, int B,
                             float *logits, const char *what, ts_error *err) {
    const ts_config *cf = c->c;
    int bmax = ts_cpu_batch_max(c), R = 0;
    if (B < 1 || B > bmax)
        return ts_fail(err, TS_ERR_ARG,
                       "cpu decode %s: %d sequences, this session takes 1 to %d in one step (at most %d, and at "
                       "most its prefill chunk of %d rows)",
                       what, B, bmax, CPU_BATCH_MAX, c->chunk);
    for (int b = 0; b < B; b++) {
        const ts_cpu_seq *s = seqs[b];
        int k = n ? n[b] : 1;
        if (!s || s->c != c)
            return ts_fail(err, TS_ERR_ARG, "cpu decode %s: sequence %d is %s", what, b,
                           s ? "from another session" : "NULL");
        for (int j = 0; j < b; j++)
            if (seqs[j] == s)
                return ts_fail(err, TS_ERR_ARG, "cpu decode %s: sequences %d and %d are the same sequence", what, j, b);
        if (k < 1 || k > bmax - R)
            return ts_fail(err, TS_ERR_ARG,
                           "cpu decode %s: %d tokens for sequence %d, after %d rows: a step takes 1 to %d rows in all",
                           what, k, b, R, bmax);
        if (s->n_past + k > s->cap)
            return ts_fail(err, TS_ERR_ARG, "cpu decode %s: sequence %d is full (%d of %d positions): %d more do not fit",
                           what, b, s->n_past, s->cap, k);
        for (int j = 0; j < k; j++)
            if (tokens[R + j] < 0 || tokens[R + j] >= cf->n_vocab)
                return ts_fail(err, TS_ERR_ARG,
                               "cpu decode %s: token %d of sequence %d is outside the vocabulary [0, %d)", what,
                               tokens[R + j], b, cf->n_vocab);
        R += k;
    }
    int H = cf->n_embd;
    c->batch = R;
    for (int b = 0, r = 0; b < B; b++)
        for (int j = 0; j < (n ? n[b] : 1); j++, r++) {
            ts_cpu_kv_prefault(seqs[b], seqs[b]->n_past + j);
            c->row_kv[r] = seqs[b];
            c->row_pos[r] = seqs[b]->n_past + j;
            ts_cpu_embed_row(c, tokens[r], c->x + (size_t)r * H);
        }
    ts_cpu_set_rows(c, R, 0);
    int pinned = ts_pool_enter(c->pool); /* the caller on the pool's first CPU for the pass */
    for (int l = 0; l < cf->n_layers; l++) {
        c->layer = l;
        ts_cpu_run_layer(c);
    }
    /* every row needs its logits: all R rows through the LM head, straight into the output */
    c->lg_row0 = 0, c->lg_rows = R, c->lg_out = logits;
    ts_cpu_dispatch(c, ts_cpu_lm_head, CPU_PROF_LM_HEAD);
    ts_pool_leave(c->pool, pinned);
    c->batch = 0;
    for (int b = 0; b < B; b++) seqs[b]->n_past += n ? n[b] : 1;
    return TS_OK;
}

ts_status ts_cpu_decode_batch(ts_cpu *c, ts_cpu_seq *const *seqs, const int32_t *tokens, int B, float *logits,
                              ts_error *err) {
    return decode_rows(c, seqs, NULL, tokens, B, logits, "batch", err);
}

ts_status ts_cpu_decode_run(ts_cpu *c, ts_cpu_seq *s, const int32_t *tokens, int k, float *logits, ts_error *err) {
    if (k < 1 || k > ts_cpu_batch_max(c))
        return ts_fail(err, TS_ERR_ARG, "cpu decode run: %d tokens, this session takes 1 to %d in one step", k,
                       ts_cpu_batch_max(c));
    return decode_rows(c, &s, &k, tokens, 1, logits, "run", err);
}

ts_status ts_cpu_decode_multi(ts_cpu *c, ts_cpu_seq *const *seqs, const int *n, const int32_t *tokens, int B,
                              float *logits, ts_error *err) {
    return decode_rows(c, seqs, n, tokens, B, logits, "multi", err);
}

/* ---- The batch GEMVs of each variant (gemm.h; kernels in gemm_avx2.c, gemm_avx512.c,
 * gemv_avx512.c, gemm_q*.c) ---- */

ts_gemm_fn ts_cpu_gemv_batch_for(ts_cpu_variant v) {
    if (v >= TS_CPU_AVX512BF16) return ts_cpu_gemv_batch_bf16_avx512;
    /* the scalar GEMM computes each (row, column) alone, the same whatever S: it is its own batch */
    return v >= TS_CPU_AVX2 ? ts_cpu_gemv_batch_bf16_avx2 : ts_cpu_gemm_bf16_scalar;
}

ts_gemm_q_fn ts_cpu_gemv_batch_q_for(ts_cpu_variant v) {
    ts_gemm_q_fn f = ts_cpu_gemm_q_for(v);
    if (f == ts_cpu_gemm_q_avx512) return ts_cpu_gemv_batch_q_avx512;
    return f == ts_cpu_gemm_q_avx2 ? ts_cpu_gemv_batch_q_avx2 : ts_cpu_gemv_batch_q_scalar;
}
