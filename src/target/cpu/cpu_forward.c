/* The cpu target's forward pass. Per layer, three parallel regions:
 *   D1 [attn_norm -> pack -> q/k/v GEMM (+bias) -> q/k norm -> rope -> KV store]
 *   D2 [attention over the KV cache, one (position, head) pair per work item]
 *   D3 [pack -> o_proj + residual -> ffn_norm -> gate/up GEMM -> silu*mul -> down + residual]
 * and one more per forward for [final_norm -> lm_head] on the rows that need logits.
 * Phases inside a region are separated by pool barriers; every buffer lives in one arena
 * allocated at creation, so nothing is allocated per token. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "target/cpu/attn.h"
#include "target/cpu/cpu_internal.h"
#include "target/cpu/cpu_target.h"
#include "target/cpu/gemm.h"
#include "target/cpu/pool.h"
#include "target/ref/ref_kernels.h"


/* ---- weights ---- */

static void *own(ts_cpu *c, size_t bytes) {
    void *p = malloc(bytes);
    if (!p) return NULL;
    c->owned[c->n_owned++] = p;
    return p;
}

static const uint16_t *mat(ts_cpu *c, const ts_tensor *t) {
    if (t->dtype == TS_DTYPE_BF16) return t->data; /* zero-copy */
    uint16_t *w = own(c, (size_t)t->numel * sizeof *w);
    if (!w) return NULL;
    float buf[256];
    for (int64_t i = 0; i < t->numel; i += 256) {
        size_t k = (size_t)(t->numel - i < 256 ? t->numel - i : 256);
        ts_dtype_to_f32(t->dtype, t->data, (size_t)i, k, buf);
        for (size_t j = 0; j < k; j++) w[i + (int64_t)j] = ts_f32_to_bf16(buf[j]);
    }
    c->converted += (size_t)t->numel * sizeof *w;
    return w;
}

static const float *vec(ts_cpu *c, const ts_tensor *t) {
    if (!t) return NULL;
    float *v = own(c, (size_t)t->numel * sizeof *v);
    if (v) ts_dtype_to_f32(t->dtype, t->data, 0, (size_t)t->numel, v);
    return v;
}

static int bind_weights(ts_cpu *c) {
    const ts_model *m = c->m;
    for (int l = 0; l < c->c->n_layers; l++) {
        const ts_layer_w *w = &m->layers[l];
        cpu_layer *L = &c->L[l];
        L->wq = mat(c, w->wq), L->wk = mat(c, w->wk), L->wv = mat(c, w->wv), L->wo = mat(c, w->wo);
        L->wg = mat(c, w->w_gate), L->wu = mat(c, w->w_up), L->wd = mat(c, w->w_down);
        L->attn_norm = vec(c, w->attn_norm), L->ffn_norm = vec(c, w->ffn_norm);
        L->q_norm = vec(c, w->q_norm), L->k_norm = vec(c, w->k_norm);
        L->bq = vec(c, w->bq), L->bk = vec(c, w->bk), L->bv = vec(c, w->bv), L->bo = vec(c, w->bo);
        L->bg = vec(c, w->b_gate), L->bu = vec(c, w->b_up), L->bd = vec(c, w->b_down);
        if (!L->wq || !L->wk || !L->wv || !L->wo || !L->wg || !L->wu || !L->wd || !L->attn_norm ||
            !L->ffn_norm || (w->q_norm && !L->q_norm) || (w->k_norm && !L->k_norm) ||
            (w->bq && !L->bq) || (w->bk && !L->bk) || (w->bv && !L->bv) || (w->bo && !L->bo) ||
            (w->b_gate && !L->bg) || (w->b_up && !L->bu) || (w->b_down && !L->bd))
            return -1;
    }
    c->embed = mat(c, m->embed);
    c->lm_head = m->lm_head == m->embed ? c->embed : mat(c, m->lm_head);
    c->final_norm = vec(c, m->final_norm);
    return c->embed && c->lm_head && c->final_norm ? 0 : -1;
}

/* ---- small row kernels (plain C: a small share of the time) ---- */

static void rmsnorm(float *out, const float *x, const float *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) out[i] = w[i] * (x[i] * r);
}

static void rope(float *v, int n_heads, int hd, const float *cs, const float *sn) {
    int half = hd / 2;
    for (int h = 0; h < n_heads; h++, v += hd)
        for (int i = 0; i < half; i++) {
            float x0 = v[i], x1 = v[i + half];
            v[i] = x0 * cs[i] - x1 * sn[i];
            v[i + half] = x1 * cs[i] + x0 * sn[i];
        }
}

/* Contiguous share [a, b) of n items for thread ith, boundaries on multiples of align. */
static void split(int n, int ith, int nth, int align, int *a, int *b) {
    int units = (n + align - 1) / align, per = units / nth, rem = units % nth;
    int u0 = ith * per + (ith < rem ? ith : rem), u1 = u0 + per + (ith < rem);
    *a = u0 * align < n ? u0 * align : n;
    *b = u1 * align < n ? u1 * align : n;
}

int ts_cpu_s_bucket(int S) { return S == 1 ? 1 : (S < 16 ? 2 : 3); }

ts_gemm_tile ts_cpu_tile_for(const ts_cpu *c, int S, int N, int K) {
    int b = ts_cpu_s_bucket(S);
    for (int i = 0; i < c->n_tiles; i++)
        if (c->tiles[i].bucket == b && c->tiles[i].n == N && c->tiles[i].k == K) return c->tiles[i].tile;
    return ts_cpu_gemm_default_tile(S, N, K);
}

/* ---- D1: attention input ---- */
static void d1_attn_in(void *ctx, int ith, int nth) {
    ts_cpu *c = ctx;
    const ts_config *cf = c->c;
    const cpu_layer *L = &c->L[c->layer];
    int S = c->S, H = cf->n_embd, hd = cf->head_dim, Q = cf->n_heads * hd, KV = cf->n_kv_heads * hd;
    int NT = Q + 2 * KV, a, b;
    float *tmp = c->rowtmp + (size_t)ith * (size_t)(H > hd ? H : hd) * 2;
    split(S, ith, nth, 1, &a, &b);
    for (int s = a; s < b; s++) {
        rmsnorm(tmp, c->x + (size_t)s * H, L->attn_norm, H, cf->rms_eps);
        ts_cpu_pack_row(c->xn_p + (size_t)s * H, tmp, H);
    }
    ts_pool_barrier(c->pool);
    split(NT, ith, nth, 4, &a, &b);
    const struct {
        const uint16_t *w;
        int off, n;
    } parts[3] = {{L->wq, 0, Q}, {L->wk, Q, KV}, {L->wv, Q + KV, KV}};
    for (int p = 0; p < 3; p++) {
        int lo = a > parts[p].off ? a : parts[p].off;
        int hi = b < parts[p].off + parts[p].n ? b : parts[p].off + parts[p].n;
        if (lo < hi)
            c->gemm(c->qkv + parts[p].off, NT, c->xn_p, H, parts[p].w, H, S, lo - parts[p].off,
                    hi - parts[p].off, ts_cpu_tile_for(c, S, parts[p].n, H));
    }
    ts_pool_barrier(c->pool);
    split(S, ith, nth, 1, &a, &b);
    size_t layer_off = (size_t)c->layer * (size_t)c->max_seq * (size_t)KV;
    for (int s = a; s < b; s++) {
        float *q = c->qkv + (size_t)s * NT, *k = q + Q, *v = k + KV;
        if (L->bq)
            for (int i = 0; i < Q; i++) q[i] += L->bq[i];
        if (L->bk)
            for (int i = 0; i < KV; i++) k[i] += L->bk[i];
        if (L->bv)
            for (int i = 0; i < KV; i++) v[i] += L->bv[i];
        if (L->q_norm) {
            for (int h = 0; h < cf->n_heads; h++) rmsnorm(q + (size_t)h * hd, q + (size_t)h * hd, L->q_norm, hd, cf->rms_eps);
            for (int h = 0; h < cf->n_kv_heads; h++) rmsnorm(k + (size_t)h * hd, k + (size_t)h * hd, L->k_norm, hd, cf->rms_eps);
        }
        int pos = c->pos0 + s;
        const float *cs = c->rope_cs + (size_t)s * hd, *sn = cs + hd / 2;
        rope(q, cf->n_heads, hd, cs, sn);
        rope(k, cf->n_kv_heads, hd, cs, sn);
        memcpy(c->k_cache + layer_off + (size_t)pos * KV, k, sizeof(float) * (size_t)KV);
        memcpy(c->v_cache + layer_off + (size_t)pos * KV, v, sizeof(float) * (size_t)KV);
    }
}

/* ---- D2: attention ---- */
static void d2_attention(void *ctx, int ith, int nth) {
    ts_cpu *c = ctx;
    const ts_config *cf = c->c;
    int hd = cf->head_dim, nh = cf->n_heads, Q = nh * hd, KV = cf->n_kv_heads * hd, NT = Q + 2 * KV;
    int group = nh / cf->n_kv_heads, a, b;
    size_t layer_off = (size_t)c->layer * (size_t)c->max_seq * (size_t)KV;
    const float *kc = c->k_cache + layer_off, *vc = c->v_cache + layer_off;
    float scale = (float)(1.0 / sqrt((double)hd));
    if (c->variant >= TS_CPU_AVX2 && c->S > 1) {
        /* Prefill: tiles of query rows per head, so each cached row is read once per tile. */
        float *sc = c->scores + (size_t)ith * (size_t)TS_ATTN_TILE * (size_t)c->max_seq;
        int tiles = (c->S + TS_ATTN_TILE - 1) / TS_ATTN_TILE;
        split(tiles * nh, ith, nth, 1, &a, &b);
        for (int it = a; it < b; it++) {
            int tile = it / nh, h = it % nh, s0 = tile * TS_ATTN_TILE, g = h / group;
            int T = c->S - s0 < TS_ATTN_TILE ? c->S - s0 : TS_ATTN_TILE;
            ts_cpu_attn_tile_avx2(c->att + (size_t)s0 * Q + (size_t)h * hd, Q, c->qkv + (size_t)s0 * NT + (size_t)h * hd,
                                  NT, kc + (size_t)g * hd, vc + (size_t)g * hd, c->pos0 + s0 + 1, T, KV, hd, scale, sc);
        }
        return;
    }
    float *sc = c->scores + (size_t)ith * (size_t)c->max_seq;
    split(c->S * nh, ith, nth, 1, &a, &b);
    for (int it = a; it < b; it++) {
        int s = it / nh, h = it % nh, n_ctx = c->pos0 + s + 1, g = h / group;
        c->attn_row(c->att + (size_t)s * Q + (size_t)h * hd, c->qkv + (size_t)s * NT + (size_t)h * hd,
                    kc + (size_t)g * hd, vc + (size_t)g * hd, n_ctx, KV, hd, scale, sc);
    }
}

/* ---- D3: attention output and FFN ---- */
static void d3_ffn(void *ctx, int ith, int nth) {
    ts_cpu *c = ctx;
    const ts_config *cf = c->c;
    const cpu_layer *L = &c->L[c->layer];
    int S = c->S, H = cf->n_embd, Q = cf->n_heads * cf->head_dim, F = cf->n_ff, a, b;
    float *tmp = c->rowtmp + (size_t)ith * (size_t)(H > cf->head_dim ? H : cf->head_dim) * 2;
    split(S, ith, nth, 1, &a, &b);
    for (int s = a; s < b; s++) ts_cpu_pack_row(c->att_p + (size_t)s * Q, c->att + (size_t)s * Q, Q);
    ts_pool_barrier(c->pool);
    split(H, ith, nth, 4, &a, &b);
    if (a < b) c->gemm(c->o, H, c->att_p, Q, L->wo, Q, S, a, b, ts_cpu_tile_for(c, S, H, Q));
    for (int s = 0; s < S; s++) {
        float *x = c->x + (size_t)s * H, *o = c->o + (size_t)s * H;
        for (int n = a; n < b; n++) x[n] += o[n] + (L->bo ? L->bo[n] : 0.0f);
    }
    ts_pool_barrier(c->pool);
    split(S, ith, nth, 1, &a, &b);
    for (int s = a; s < b; s++) {
        rmsnorm(tmp, c->x + (size_t)s * H, L->ffn_norm, H, cf->rms_eps);
        ts_cpu_pack_row(c->xn_p + (size_t)s * H, tmp, H);
    }
    ts_pool_barrier(c->pool);
    /* 16-aligned shares: each thread packs whole blocks of its own h columns. */
    split(F, ith, nth, TS_GEMM_KBLOCK, &a, &b);
    if (a < b) {
        c->gemm(c->g, F, c->xn_p, H, L->wg, H, S, a, b, ts_cpu_tile_for(c, S, F, H));
        c->gemm(c->u, F, c->xn_p, H, L->wu, H, S, a, b, ts_cpu_tile_for(c, S, F, H));
        for (int s = 0; s < S; s++) {
            float *g = c->g + (size_t)s * F, *u = c->u + (size_t)s * F;
            for (int n = a; n < b; n++) {
                float gv = g[n] + (L->bg ? L->bg[n] : 0.0f), uv = u[n] + (L->bu ? L->bu[n] : 0.0f);
                g[n] = gv / (1.0f + expf(-gv)) * uv;
            }
            ts_cpu_pack_row(c->h_p + (size_t)s * F + a, g + a, b - a);
        }
    }
    ts_pool_barrier(c->pool);
    split(H, ith, nth, 4, &a, &b);
    if (a < b) c->gemm(c->o, H, c->h_p, F, L->wd, F, S, a, b, ts_cpu_tile_for(c, S, H, F));
    for (int s = 0; s < S; s++) {
        float *x = c->x + (size_t)s * H, *o = c->o + (size_t)s * H;
        for (int n = a; n < b; n++) x[n] += o[n] + (L->bd ? L->bd[n] : 0.0f);
    }
}

/* ---- final norm + LM head on rows [lg_row0, lg_row0 + lg_rows) of the chunk ---- */
static void d4_logits(void *ctx, int ith, int nth) {
    ts_cpu *c = ctx;
    const ts_config *cf = c->c;
    int H = cf->n_embd, V = cf->n_vocab, R = c->lg_rows, a, b;
    float *tmp = c->rowtmp + (size_t)ith * (size_t)(H > cf->head_dim ? H : cf->head_dim) * 2;
    split(R, ith, nth, 1, &a, &b);
    for (int r = a; r < b; r++) {
        rmsnorm(tmp, c->x + (size_t)(c->lg_row0 + r) * H, c->final_norm, H, cf->rms_eps);
        ts_cpu_pack_row(c->xn_p + (size_t)r * H, tmp, H);
    }
    ts_pool_barrier(c->pool);
    split(V, ith, nth, 4, &a, &b);
    if (a < b) c->gemm(c->lg_out, V, c->xn_p, H, c->lm_head, H, R, a, b, ts_cpu_tile_for(c, R, V, H));
}

/* ---- session ---- */

ts_status ts_cpu_new(const ts_model *m, int max_seq, const ts_cpu_opts *o, ts_cpu **out,
                     ts_error *err) {
    *out = NULL;
    const ts_config *cf = ts_model_config(m);
    int H = cf->n_embd, hd = cf->head_dim, Q = cf->n_heads * hd, KV = cf->n_kv_heads * hd, F = cf->n_ff;
    if (max_seq < 1 || max_seq > (1 << 24))
        return ts_fail(err, TS_ERR_ARG, "cpu session: max_seq %d outside [1, 2^24]", max_seq);
    if (H % TS_GEMM_KBLOCK || Q % TS_GEMM_KBLOCK || F % TS_GEMM_KBLOCK)
        return ts_fail(err, TS_ERR_UNSUPPORTED,
                       "%s: the cpu target needs hidden_size (%d), heads x head_dim (%d) and "
                       "intermediate_size (%d) to be multiples of %d",
                       m->config_path, H, Q, F, TS_GEMM_KBLOCK);
    ts_cpu_variant v = ts_cpu_best_variant();
    if (o && o->force_variant >= 0) {
        if (!ts_cpu_variant_supported((ts_cpu_variant)o->force_variant))
            return ts_fail(err, TS_ERR_UNSUPPORTED, "cpu variant %s is not supported by this CPU",
                           ts_cpu_variant_name((ts_cpu_variant)o->force_variant));
        v = (ts_cpu_variant)o->force_variant;
    }
    int nth = o && o->n_threads > 0 ? o->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nth < 1) nth = 1;
    if (nth > 256) nth = 256; /* the pool's limit; more cores than that gain nothing here */
    ts_cpu *c = calloc(1, sizeof *c);
    if (!c) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    c->m = m;
    c->c = cf;
    c->variant = v;
    c->gemm = ts_cpu_gemm_for(v);
    c->attn_row = v >= TS_CPU_AVX2 ? ts_cpu_attn_row_avx2 : ts_cpu_attn_row_scalar;
    c->max_seq = max_seq;
    c->chunk = max_seq < CPU_CHUNK ? max_seq : CPU_CHUNK;
    c->nth = nth;
    ts_status s = ts_pool_new(nth, &c->pool, err);
    if (s) {
        ts_cpu_free(c);
        return s;
    }
    c->L = calloc((size_t)cf->n_layers, sizeof *c->L);
    c->owned = calloc((size_t)cf->n_layers * 20 + 8, sizeof *c->owned);
    size_t kv = (size_t)cf->n_layers * (size_t)max_seq * (size_t)KV;
    c->k_cache = malloc(kv * sizeof(float));
    c->v_cache = malloc(kv * sizeof(float));
    c->inv_freq = malloc(sizeof(float) * (size_t)(hd / 2));
    size_t CH = (size_t)c->chunk, NT = (size_t)Q + 2 * (size_t)KV, rt = (size_t)(H > hd ? H : hd) * 2;
    size_t arena = CH * H * 3 + CH * NT + CH * Q * 2 + CH * F * 3 + (size_t)nth * TS_ATTN_TILE * max_seq +
                   (size_t)nth * rt + CH * (size_t)hd;
    c->arena = malloc(arena * sizeof(float));
    if (!c->L || !c->owned || !c->k_cache || !c->v_cache || !c->inv_freq || !c->arena) {
        ts_cpu_free(c);
        return ts_fail(err, TS_ERR_NOMEM, "cpu session: cannot allocate %zu MiB of KV cache and arena",
                       (2 * kv + arena) * sizeof(float) >> 20);
    }
    float *p = c->arena;
    c->x = p, p += CH * H;
    c->xn_p = p, p += CH * H;
    c->o = p, p += CH * H;
    c->qkv = p, p += CH * NT;
    c->att = p, p += CH * Q;
    c->att_p = p, p += CH * Q;
    c->g = p, p += CH * F;
    c->u = p, p += CH * F;
    c->h_p = p, p += CH * F;
    c->scores = p, p += (size_t)nth * TS_ATTN_TILE * max_seq;
    c->rowtmp = p, p += (size_t)nth * rt;
    c->rope_cs = p;
    if (bind_weights(c) != 0) {
        ts_cpu_free(c);
        return ts_fail(err, TS_ERR_NOMEM, "cpu session: out of memory converting weights to BF16");
    }
    {
        /* The oracle's frequency table: one definition of llama3 scaling for both targets. */
        ts_ref_rope_freqs(c->inv_freq, hd, cf->rope_theta, cf->rope_llama3 ? cf->rope_factor : 0,
                          cf->rope_low_freq_factor, cf->rope_high_freq_factor, cf->rope_orig_max_pos);
    }
    *out = c;
    return TS_OK;
}

void ts_cpu_free(ts_cpu *c) {
    if (!c) return;
    ts_pool_free(c->pool);
    for (int i = 0; i < c->n_owned; i++) free(c->owned[i]);
    free(c->owned);
    free(c->L);
    free(c->k_cache);
    free(c->v_cache);
    free(c->inv_freq);
    free(c->arena);
    free(c);
}

void ts_cpu_reset(ts_cpu *c) { c->n_past = 0; }
int ts_cpu_n_past(const ts_cpu *c) { return c->n_past; }
ts_cpu_variant ts_cpu_variant_of(const ts_cpu *c) { return c->variant; }
int ts_cpu_threads(const ts_cpu *c) { return c->nth; }
long ts_cpu_dispatches(const ts_cpu *c) { return ts_pool_regions(c->pool); }
size_t ts_cpu_converted_bytes(const ts_cpu *c) { return c->converted; }
ts_pool *ts_cpu_pool(ts_cpu *c) { return c->pool; }

/* Sets the rows of the next dispatches and their RoPE cos/sin, once per chunk rather than
 * once per layer (every layer rotates the same positions). The angle is rounded to float
 * before cos/sin, as the oracle and transformers do. */
static void set_rows(ts_cpu *c, int S, int pos0) {
    int half = c->c->head_dim / 2;
    c->S = S;
    c->pos0 = pos0;
    for (int s = 0; s < S; s++) {
        float *cs = c->rope_cs + (size_t)s * 2 * half;
        for (int i = 0; i < half; i++) {
            float ang = (float)(pos0 + s) * c->inv_freq[i];
            cs[i] = (float)cos((double)ang);
            cs[half + i] = (float)sin((double)ang);
        }
    }
}

ts_status ts_cpu_layer(ts_cpu *c, int l, float *x, int S, int pos0, ts_error *err) {
    const ts_config *cf = c->c;
    if (l < 0 || l >= cf->n_layers || S < 1 || S > c->chunk || pos0 < 0 || pos0 + S > c->max_seq)
        return ts_fail(err, TS_ERR_ARG, "cpu layer %d: %d tokens at position %d do not fit (chunk %d, %d positions)",
                       l, S, pos0, c->chunk, c->max_seq);
    size_t bytes = sizeof(float) * (size_t)S * (size_t)cf->n_embd;
    memcpy(c->x, x, bytes);
    set_rows(c, S, pos0);
    c->layer = l;
    ts_pool_run(c->pool, d1_attn_in, c);
    ts_pool_run(c->pool, d2_attention, c);
    ts_pool_run(c->pool, d3_ffn, c);
    memcpy(x, c->x, bytes);
    return TS_OK;
}

ts_status ts_cpu_forward(ts_cpu *c, const int32_t *tokens, int n, float *logits, int all_logits,
                         float *hidden, ts_error *err) {
    const ts_config *cf = c->c;
    ts_status st = ts_model_check_tokens(cf, tokens, n, c->n_past, c->max_seq, "cpu", err);
    if (st) return st;
    int H = cf->n_embd, L = cf->n_layers;
    for (int c0 = 0; c0 < n; c0 += c->chunk) {
        int S = n - c0 < c->chunk ? n - c0 : c->chunk;
        set_rows(c, S, c->n_past + c0);
        for (int s = 0; s < S; s++)
            ts_dtype_to_f32(TS_DTYPE_BF16, c->embed, (size_t)tokens[c0 + s] * (size_t)H, (size_t)H,
                            c->x + (size_t)s * H);
        if (hidden) memcpy(hidden + (size_t)c0 * H, c->x, sizeof(float) * (size_t)S * H);
        for (int l = 0; l < L; l++) {
            c->layer = l;
            ts_pool_run(c->pool, d1_attn_in, c);
            ts_pool_run(c->pool, d2_attention, c);
            ts_pool_run(c->pool, d3_ffn, c);
            if (hidden) memcpy(hidden + ((size_t)(l + 1) * n + c0) * H, c->x, sizeof(float) * (size_t)S * H);
        }
        if (logits && (all_logits || c0 + S == n)) {
            c->lg_row0 = all_logits ? 0 : S - 1;
            c->lg_rows = all_logits ? S : 1;
            c->lg_out = logits + (all_logits ? (size_t)c0 * cf->n_vocab : 0);
            ts_pool_run(c->pool, d4_logits, c);
        }
    }
    c->n_past += n;
    return TS_OK;
}
