/* The ref target's forward pass: DESIGN.md's step list, one step at a time, in FP32, over an
 * FP32 KV cache (holding F16-rounded values for --kv-cache f16). Prefill and decode are the
 * same code (decode is a chunk of one token), so the oracle has a single path to trust. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/pool.h"
#include "io/quant.h"
#include "model/model.h"
#include "target/ref/ref_kernels.h"
#include "target/ref/ref_mem.h"
#include "target/ref/ref_steps.h"

/* Tokens per chunk: bounds the scratch size; chunking does not change results because
 * attention reads earlier chunks from the cache. */
#define REF_CHUNK 64

struct ts_ref {
    const ts_model *m;
    int max_seq;
    int n_past;
    float *k_cache, *v_cache; /* (n_layers, max_seq, n_kv*head_dim) */
    int kv_f16;               /* the cache holds values rounded to F16 (the model's kv_type at ts_ref_new) */
    float *inv_freq;          /* (head_dim/2) */
    ts_pool *pool;            /* NULL: single-threaded */
    size_t row_len;           /* the longest K of any matmul */
    float *rows;              /* per thread: one weight row */
};

/* The matmul, split by output column over the pool (the only parallel step: it is where the
 * oracle spends its time, and each output column is computed alone by the same code). */
typedef struct mm_job {
    ts_ref *r;
    float *out;
    const float *x;
    const ts_tensor *W, *b;
    int S, N, K;
} mm_job;

static void mm_part(void *ctx, int ith, int nth) {
    const mm_job *j = ctx;
    int n0 = (int)((long)j->N * ith / nth), n1 = (int)((long)j->N * (ith + 1) / nth);
    ts_ref_matmul_cols(j->out, j->x, j->W, j->b, j->S, j->N, j->K, n0, n1,
                       j->r->rows + (size_t)ith * TS_REF_ROW_SCRATCH(j->r->row_len));
}

static void mm(ts_ref *r, float *out, const float *x, const ts_tensor *W, const ts_tensor *b, int S, int N, int K,
               float *row) {
    if (!r->pool) {
        ts_ref_matmul(out, x, W, b, S, N, K, row);
        return;
    }
    mm_job j = {r, out, x, W, b, S, N, K};
    ts_pool_run(r->pool, mm_part, &j);
}

static int max3(int a, int b, int c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

/* Sizes shared by the allocations and ts_ref_mem_need, so the estimate is what is allocated. */
static size_t kv_floats(const ts_config *c, int max_seq) { /* one of K, V */
    return (size_t)c->n_layers * (size_t)max_seq * (size_t)c->n_kv_heads * (size_t)c->head_dim;
}
static size_t row_floats(const ts_config *c) {
    return TS_REF_ROW_SCRATCH(max3(c->n_embd, c->n_heads * c->head_dim, c->n_ff));
}
/* Scratch of a forward call in chunks of CH tokens attending over n_scores positions. */
static size_t scratch_floats(const ts_config *c, int CH, int n_scores) {
    size_t Q = (size_t)c->n_heads * (size_t)c->head_dim, KV = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    return (size_t)CH * (4 * (size_t)c->n_embd + 2 * Q + 2 * KV + 2 * (size_t)c->n_ff) + row_floats(c) +
           (size_t)n_scores;
}
void ts_ref_mem_need(const ts_model *m, int max_seq, int n_tokens, int n_threads, ts_mem_need *out) {
    const ts_config *c = &m->cfg;
    int nth = ts_pool_resolve_threads(n_threads);
    int CH = n_tokens < REF_CHUNK ? n_tokens : REF_CHUNK;
    memset(out, 0, sizeof *out);
    out->weights_mapped = ts_store_file_bytes(&m->store);
    out->kv = 2 * (uint64_t)kv_floats(c, max_seq) * sizeof(float);
    out->scratch = ((uint64_t)scratch_floats(c, CH < 1 ? 1 : CH, max_seq) + (size_t)c->head_dim / 2 +
                    (nth > 1 ? (uint64_t)nth * row_floats(c) : 0)) * sizeof(float);
}

/* Row scratch for n threads. */
static int rows_alloc(ts_ref *r, int n) {
    free(r->rows);
    r->rows = malloc(sizeof(float) * TS_REF_ROW_SCRATCH(r->row_len) * (size_t)n);
    return r->rows != NULL;
}

ts_status ts_ref_new(const ts_model *m, int max_seq, ts_ref **out, ts_error *err) {
    *out = NULL;
    const ts_config *c = &m->cfg;
    if (max_seq < 1 || max_seq > (1 << 24))
        return ts_fail(err, TS_ERR_ARG, "ref session: max_seq %d outside [1, 2^24]", max_seq);
    ts_ref *r = calloc(1, sizeof *r);
    if (!r) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    size_t kv = kv_floats(c, max_seq);
    r->m = m;
    r->max_seq = max_seq;
    r->kv_f16 = m->kv_type == TS_DTYPE_F16;
    r->k_cache = malloc(kv * sizeof(float));
    r->v_cache = malloc(kv * sizeof(float));
    r->inv_freq = malloc((size_t)c->head_dim / 2 * sizeof(float));
    r->row_len = (size_t)max3(c->n_embd, c->n_heads * c->head_dim, c->n_ff);
    if (!r->k_cache || !r->v_cache || !r->inv_freq) {
        ts_ref_free(r);
        return ts_fail(err, TS_ERR_NOMEM, "ref session: cannot allocate a KV cache of %zu MiB",
                       2 * kv * sizeof(float) >> 20);
    }
    ts_ref_rope_freqs(r->inv_freq, c);
    *out = r;
    return TS_OK;
}

void ts_ref_set_kv_cache(ts_ref *r, int kv_type) {
    ts_ref_reset(r);
    r->kv_f16 = kv_type == TS_DTYPE_F16;
}

ts_status ts_ref_set_threads(ts_ref *r, int n_threads, ts_error *err) {
    if (n_threads < 0 || n_threads > TS_POOL_MAX_THREADS)
        return ts_fail(err, TS_ERR_ARG, "ref session: %d threads outside [0, %d]", n_threads, TS_POOL_MAX_THREADS);
    n_threads = ts_pool_resolve_threads(n_threads);
    ts_pool_free(r->pool);
    r->pool = NULL;
    if (n_threads == 1) return TS_OK;
    if (!rows_alloc(r, n_threads)) return ts_fail(err, TS_ERR_NOMEM, "ref session: out of memory for %d row buffers", n_threads);
    return ts_pool_new(n_threads, &r->pool, err);
}

void ts_ref_free(ts_ref *r) {
    if (!r) return;
    ts_pool_free(r->pool);
    free(r->rows);
    free(r->k_cache);
    free(r->v_cache);
    free(r->inv_freq);
    free(r);
}

void ts_ref_reset(ts_ref *r) { r->n_past = 0; }
int ts_ref_n_past(const ts_ref *r) { return r->n_past; }

typedef struct scratch {
    float *x, *xn, *q, *k, *v, *att, *o, *g, *u, *row, *scores;
} scratch;

/* Where row s of a step lives: session r at position pos0 + s, or, for a batch of sessions
 * (seqs != NULL), session seqs[s] at its own next position. */
static ts_ref *row_seq(ts_ref *r, ts_ref *const *seqs, int s) { return seqs ? seqs[s] : r; }
static int row_pos(int pos0, ts_ref *const *seqs, int s) { return seqs ? seqs[s]->n_past : pos0 + s; }
/* Layer l's cache rows of session r from position pos. */
static float *cache_at(const ts_ref *r, float *cache, int l, int pos) {
    size_t KV = (size_t)r->m->cfg.n_kv_heads * (size_t)r->m->cfg.head_dim;
    return cache + ((size_t)l * (size_t)r->max_seq + (size_t)pos) * KV;
}

/* n values into the cache as the session holds them (r->kv_f16): FP32, or rounded to F16 and
 * back, exactly what the targets' F16 caches give their attention. */
static void cache_put(const ts_ref *r, float *dst, const float *src, size_t n) {
    if (!r->kv_f16) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < n; i++) dst[i] = ts_f16_to_f32(ts_f32_to_f16_sat(src[i]));
}

/* One step of layer l on rows [0, S) (the step list in plan/steps.h). Rows are independent
 * everywhere but in rope (which writes the cache) and attention (which reads it). */
static void run_step(ts_ref *r, int l, ts_step step, scratch *w, int S, int pos0, ts_ref *const *seqs) {
    const ts_config *c = &r->m->cfg;
    const ts_layer_w *L = &r->m->layers[l];
    int H = c->n_embd, hd = c->head_dim, Q = c->n_heads * hd, KV = c->n_kv_heads * hd, F = c->n_ff;
    switch (step) {
    case TS_STEP_ATTN_NORM:
    case TS_STEP_FFN_NORM:
        for (int s = 0; s < S; s++)
            ts_ref_rmsnorm(w->xn + (size_t)s * H, w->x + (size_t)s * H,
                           step == TS_STEP_ATTN_NORM ? L->attn_norm : L->ffn_norm, H, c->rms_eps);
        break;
    case TS_STEP_QKV:
        mm(r, w->q, w->xn, L->wq, L->bq, S, Q, H, w->row);
        mm(r, w->k, w->xn, L->wk, L->bk, S, KV, H, w->row);
        mm(r, w->v, w->xn, L->wv, L->bv, S, KV, H, w->row);
        break;
    case TS_STEP_QK_NORM:
        if (!c->qk_norm) break;
        for (int s = 0; s < S; s++) {
            float *qs = w->q + (size_t)s * Q, *ks = w->k + (size_t)s * KV;
            for (int h = 0; h < c->n_heads; h++)
                ts_ref_rmsnorm(qs + (size_t)h * hd, qs + (size_t)h * hd, L->q_norm, hd, c->rms_eps);
            for (int h = 0; h < c->n_kv_heads; h++)
                ts_ref_rmsnorm(ks + (size_t)h * hd, ks + (size_t)h * hd, L->k_norm, hd, c->rms_eps);
        }
        break;
    case TS_STEP_ROPE:
        for (int s = 0; s < S; s++) {
            ts_ref *sq = row_seq(r, seqs, s);
            int pos = row_pos(pos0, seqs, s);
            float *qs = w->q + (size_t)s * Q, *ks = w->k + (size_t)s * KV;
            ts_ref_rope(qs, c->n_heads, hd, pos, r->inv_freq);
            ts_ref_rope(ks, c->n_kv_heads, hd, pos, r->inv_freq);
            cache_put(sq, cache_at(sq, sq->k_cache, l, pos), ks, (size_t)KV);
            cache_put(sq, cache_at(sq, sq->v_cache, l, pos), w->v + (size_t)s * KV, (size_t)KV);
        }
        break;
    case TS_STEP_ATTENTION:
        for (int s = 0; s < S; s++) {
            ts_ref *sq = row_seq(r, seqs, s);
            ts_ref_attention(w->att + (size_t)s * Q, w->q + (size_t)s * Q, cache_at(sq, sq->k_cache, l, 0),
                             cache_at(sq, sq->v_cache, l, 0), row_pos(pos0, seqs, s) + 1, c->n_heads, c->n_kv_heads,
                             hd, KV, w->scores);
        }
        break;
    case TS_STEP_O_PROJ:
        mm(r, w->o, w->att, L->wo, L->bo, S, H, Q, w->row);
        for (size_t i = 0; i < (size_t)S * H; i++) w->x[i] += w->o[i];
        break;
    case TS_STEP_GATE_UP:
        mm(r, w->g, w->xn, L->w_gate, L->b_gate, S, F, H, w->row);
        mm(r, w->u, w->xn, L->w_up, L->b_up, S, F, H, w->row);
        ts_ref_silu_mul(w->g, w->g, w->u, S * F);
        break;
    case TS_STEP_DOWN:
        mm(r, w->o, w->g, L->w_down, L->b_down, S, H, F, w->row);
        for (size_t i = 0; i < (size_t)S * H; i++) w->x[i] += w->o[i];
        break;
    default: break;
    }
}

static void layer_forward(ts_ref *r, int l, scratch *w, int S, int pos0, ts_ref *const *seqs) {
    for (int step = 0; step < TS_N_STEPS; step++) run_step(r, l, (ts_step)step, w, S, pos0, seqs);
}

/* Scratch for chunks of up to CH tokens, carved from one allocation (returned; caller frees). */
static float *scratch_new(const ts_ref *r, int CH, int n_scores, scratch *w) {
    const ts_config *c = &r->m->cfg;
    int H = c->n_embd, hd = c->head_dim, Q = c->n_heads * hd, KV = c->n_kv_heads * hd, F = c->n_ff;
    size_t sh = (size_t)CH * H;
    float *buf = malloc(sizeof(float) * scratch_floats(c, CH, n_scores));
    if (!buf) return NULL;
    float *p = buf;
    w->x = p, p += sh;
    w->xn = p, p += sh;
    w->o = p, p += 2 * sh;
    w->q = p, p += (size_t)CH * Q;
    w->att = p, p += (size_t)CH * Q;
    w->k = p, p += (size_t)CH * KV;
    w->v = p, p += (size_t)CH * KV;
    w->g = p, p += (size_t)CH * F;
    w->u = p, p += (size_t)CH * F;
    w->row = p, p += TS_REF_ROW_SCRATCH(max3(H, Q, F));
    w->scores = p;
    return buf;
}

ts_status ts_ref_layer(ts_ref *r, int l, float *x, int S, int pos0, ts_error *err) {
    const ts_config *c = &r->m->cfg;
    if (l < 0 || l >= c->n_layers || S < 1 || pos0 < 0 || pos0 + S > r->max_seq)
        return ts_fail(err, TS_ERR_ARG, "ref layer %d: %d tokens at position %d do not fit %d layers / %d positions",
                       l, S, pos0, c->n_layers, r->max_seq);
    scratch w;
    float *buf = scratch_new(r, S, r->max_seq, &w);
    if (!buf) return ts_fail(err, TS_ERR_NOMEM, "ref layer: out of memory for scratch");
    w.x = x; /* the caller's rows are the layer's input and output */
    layer_forward(r, l, &w, S, pos0, NULL);
    free(buf);
    return TS_OK;
}

/* Final norm and LM head of rows [s0, S) into out (S - s0 rows), all in one matmul: the LM
 * head is read once per chunk, not once per row. */
static void lm_head(ts_ref *r, scratch *w, int s0, int S, float *out) {
    const ts_model *m = r->m;
    int H = m->cfg.n_embd;
    for (int s = s0; s < S; s++)
        ts_ref_rmsnorm(w->xn + (size_t)(s - s0) * H, w->x + (size_t)s * H, m->final_norm, H, m->cfg.rms_eps);
    if (s0 < S) mm(r, out, w->xn, m->lm_head, NULL, S - s0, m->cfg.n_vocab, H, w->row);
}

ts_status ts_ref_forward(ts_ref *r, const int32_t *tokens, int n, float *logits, int all_logits,
                         float *hidden, ts_error *err) {
    const ts_model *m = r->m;
    const ts_config *c = &m->cfg;
    ts_status st = ts_model_check_tokens(c, tokens, n, r->n_past, r->max_seq, "ref", err);
    if (st) return st;
    int H = c->n_embd, CH = n < REF_CHUNK ? n : REF_CHUNK;
    scratch w;
    float *buf = scratch_new(r, CH, r->max_seq, &w);
    if (!buf) return ts_fail(err, TS_ERR_NOMEM, "ref forward: out of memory for scratch");

    for (int c0 = 0; c0 < n; c0 += CH) {
        int S = n - c0 < CH ? n - c0 : CH;
        int pos0 = r->n_past + c0;
        for (int s = 0; s < S; s++) ts_ref_embed(w.x + (size_t)s * H, m->embed, tokens[c0 + s], H);
        if (hidden) memcpy(hidden + (size_t)c0 * H, w.x, sizeof(float) * (size_t)S * H);
        for (int l = 0; l < c->n_layers; l++) {
            layer_forward(r, l, &w, S, pos0, NULL);
            if (hidden)
                memcpy(hidden + ((size_t)(l + 1) * n + c0) * H, w.x, sizeof(float) * (size_t)S * H);
        }
        if (logits)
            lm_head(r, &w, all_logits ? 0 : (c0 + S == n ? S - 1 : S), S,
                    logits + (all_logits ? (size_t)c0 * c->n_vocab : 0));
    }
    r->n_past += n;
    free(buf);
    return TS_OK;
}

ts_status ts_ref_step(ts_ref *r, int l, ts_step step, ts_step_state *st, int S, int pos0, ts_error *err) {
    const ts_config *c = &r->m->cfg;
    if (l < 0 || l >= c->n_layers || (int)step < 0 || step >= TS_N_STEPS || S < 1 || pos0 < 0 ||
        pos0 + S > r->max_seq)
        return ts_fail(err, TS_ERR_ARG, "ref step %d of layer %d: %d tokens at position %d do not fit", (int)step, l,
                       S, pos0);
    scratch w;
    float *buf = scratch_new(r, S, r->max_seq, &w);
    if (!buf) return ts_fail(err, TS_ERR_NOMEM, "ref step: out of memory for scratch");
    int KV = c->n_kv_heads * c->head_dim;
    w.x = st->x, w.xn = st->xn, w.q = st->q, w.k = st->k, w.v = st->v, w.att = st->att, w.g = st->h;
    if (step == TS_STEP_ATTENTION) { /* the step reads keys and values of these rows from the cache */
        size_t off = (size_t)l * (size_t)r->max_seq * (size_t)KV + (size_t)pos0 * KV;
        cache_put(r, r->k_cache + off, st->k, (size_t)S * KV);
        cache_put(r, r->v_cache + off, st->v, (size_t)S * KV);
    }
    run_step(r, l, step, &w, S, pos0, NULL);
    free(buf);
    return TS_OK;
}

ts_status ts_ref_decode_batch(ts_ref *const *seqs, int n, const int32_t *tokens, float *logits, ts_error *err) {
    if (n < 1 || n > REF_CHUNK) return ts_fail(err, TS_ERR_ARG, "ref batch: %d sessions outside [1, %d]", n, REF_CHUNK);
    ts_ref *r = seqs[0];
    const ts_model *m = r->m;
    int H = m->cfg.n_embd, max_seq = 0;
    for (int i = 0; i < n; i++) {
        if (seqs[i]->m != m) return ts_fail(err, TS_ERR_ARG, "ref batch: session %d runs another model than session 0", i);
        for (int j = 0; j < i; j++)
            if (seqs[j] == seqs[i]) return ts_fail(err, TS_ERR_ARG, "ref batch: session %d is also session %d", i, j);
    }
    for (int i = 0; i < n; i++) {
        ts_status st = ts_model_check_tokens(&m->cfg, tokens + i, 1, seqs[i]->n_past, seqs[i]->max_seq, "ref", err);
        if (st) return st;
        if (seqs[i]->max_seq > max_seq) max_seq = seqs[i]->max_seq;
    }
    scratch w;
    float *buf = scratch_new(r, n, max_seq, &w);
    if (!buf) return ts_fail(err, TS_ERR_NOMEM, "ref batch: out of memory for scratch");
    for (int i = 0; i < n; i++) ts_ref_embed(w.x + (size_t)i * H, m->embed, tokens[i], H);
    for (int l = 0; l < m->cfg.n_layers; l++) layer_forward(r, l, &w, n, 0, seqs);
    if (logits) lm_head(r, &w, 0, n, logits);
    for (int i = 0; i < n; i++) seqs[i]->n_past++;
    free(buf);
    return TS_OK;
}
