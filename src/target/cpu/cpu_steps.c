/* The cpu target's step list as stages over the session's buffers. A fused plan runs each
 * group as one parallel region, stages separated by pool barriers only where the next stage
 * splits the work differently:
 *   D1 [attn_norm | qkv (+bias) | qk_norm, rope + KV store]
 *   D2 [attention]
 *   D3 [o_proj + residual | ffn_norm | gate_up + silu*mul | down + residual]
 * An unfused plan (the baseline phase 4 starts from) runs every stage as its own region.
 * Rows are split between threads for row-wise stages, output columns for GEMMs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/quant.h"
#include "target/cpu/attn.h"
#include "target/cpu/cpu_internal.h"
#include "target/cpu/gemm.h"
#include "target/cpu/rows.h"
#include "core/clock.h"

/* ---- small row kernels (plain C; the silu in rows_avx2.c) ---- */

/* The sum of squares in double as the oracle's, but in 8 partial sums: one chain of dependent
 * adds took about 1 us per 1024 values, on a decode token's path between two GEMVs. The same
 * order on every variant (this file has no vector flags). */
static void rmsnorm(float *out, const float *x, const float *w, int n, double eps) {
    double p[8] = {0}, ss = 0;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) p[j] += (double)x[i + j] * x[i + j];
    for (; i < n; i++) p[i % 8] += (double)x[i] * x[i];
    for (int j = 0; j < 8; j++) ss += p[j];
    float r = (float)(1.0 / sqrt(ss / n + eps));
    for (i = 0; i < n; i++) out[i] = w[i] * (x[i] * r);
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

void ts_cpu_split(int n, int ith, int nth, int align, int *a, int *b) {
    int units = (n + align - 1) / align, per = units / nth, rem = units % nth;
    int u0 = ith * per + (ith < rem ? ith : rem), u1 = u0 + per + (ith < rem);
    *a = u0 * align < n ? u0 * align : n;
    *b = u1 * align < n ? u1 * align : n;
}

int ts_cpu_s_bucket(int S) { return S == 1 ? 1 : (S < 16 ? 2 : 3); }

ts_gemm_tile ts_cpu_tile_for(const ts_cpu *c, int S, int N, int K) {
    if (c->batch) S = 1; /* each row of a batched decode runs the decode GEMV's tile */
    int b = ts_cpu_s_bucket(S);
    ts_gemm_tile t = ts_cpu_gemm_default_tile(S, N, K);
    for (int i = 0; i < c->n_tiles; i++)
        if (c->tiles[i].bucket == b && c->tiles[i].n == N && c->tiles[i].k == K) t = c->tiles[i].tile;
    if (S == 1 && (c->disable & TS_OPT_GEMV) && t.nr <= 1) t.nr = 4; /* the general tile path */
    return t;
}

/* The injected fault (debug option) on elements [col0, col0 + n) of one output row of a step
 * with `width` output columns. */
static void corrupt(const ts_cpu_fault *f, float *p, int row, int col0, int n, int width) {
    if (f->nan) {
        if (row == 0 && col0 == 0 && n > 0) p[0] = NAN;
    } else if (f->last) {
        if (col0 <= width - 1 && width - 1 < col0 + n) p[width - 1 - col0] = -p[width - 1 - col0];
    } else {
        for (int i = 0; i < n; i++)
            if ((col0 + i) % 16 == 5) p[i] = -p[i];
    }
}

void ts_cpu_fault_apply(const ts_cpu_fault *f, ts_step step, int layer, float *y, int S, int ldy, int col0, int n,
                        int width) {
    if (!f || f->step != step || (f->layer >= 0 && f->layer != layer)) return;
    for (int s = 0; s < S; s++) corrupt(f, y + (size_t)s * ldy, s, col0, n, width);
}

/* Output columns of a step (where a `last` fault lands). */
static int step_width(const ts_config *c, ts_step step) {
    int Q = c->n_heads * c->head_dim, KV = c->n_kv_heads * c->head_dim;
    switch (step) {
    case TS_STEP_QKV: return Q + 2 * KV;
    case TS_STEP_QK_NORM:
    case TS_STEP_ROPE: return Q + KV;
    case TS_STEP_ATTENTION: return Q;
    case TS_STEP_GATE_UP: return c->n_ff;
    default: return c->n_embd;
    }
}

/* The session's fault on elements [col0, col0 + n) of output row `row` of a step. */
static void fault(const ts_cpu *c, ts_step step, float *p, int row, int col0, int n) {
    if (!c->has_fault || c->fault.step != step || (c->fault.layer >= 0 && c->fault.layer != c->layer)) return;
    corrupt(&c->fault, p, row, col0, n, step_width(c->c, step));
}

ts_status ts_cpu_fault_parse(const char *spec, ts_cpu_fault *f, ts_error *err) {
    char name[32];
    size_t n = strcspn(spec, ":@");
    *f = (ts_cpu_fault){TS_STEP_ATTN_NORM, 0, -1, 0};
    int step = -1;
    if (n < sizeof name) {
        memcpy(name, spec, n);
        name[n] = 0;
        step = ts_step_parse(name);
    }
    const char *p = spec + n;
    if (step >= 0 && !strncmp(p, ":nan", 4)) f->nan = 1, p += 4;
    else if (step >= 0 && !strncmp(p, ":last", 5)) f->last = 1, p += 5;
    if (step >= 0 && *p == '@') {
        char *end;
        long l = strtol(p + 1, &end, 10);
        if (end == p + 1 || l < 0 || l > 1000000) step = -1;
        f->layer = (int)l;
        p = end;
    }
    if (step < 0 || *p)
        return ts_fail(err, TS_ERR_ARG,
                       "fault \"%s\": expected STEP[:nan|:last][@LAYER] with STEP one of attn_norm, qkv, qk_norm, "
                       "rope, attention, o_proj, ffn_norm, gate_up, down", spec);
    f->step = (ts_step)step;
    return TS_OK;
}

static float *thread_tmp(const ts_cpu *c, int ith) { return c->rowtmp + (size_t)ith * ts_cpu_rowtmp_floats(c->c); }

/* The thread's own packed copy of a decode row (own_rows). */
static float *own_row(const ts_cpu *c, int ith) { return thread_tmp(c, ith) + ts_cpu_rowtmp_natural(c->c); }

/* The packed normed rows a GEMV of this thread reads: its own copy of a decode row, else xn_p. */
static const float *xn_in(const ts_cpu *c, int ith) { return c->own_rows ? own_row(c, ith) : c->xn_p; }

/* Rows [row0, row0 + R) of x normed with w and packed (fault: step's, TS_N_STEPS for none): with
 * own, the one row by every thread into its own copy (no barrier needed after), else the rows
 * split between threads into xn_p's rows 0.. (the caller's barrier follows). Returns what this
 * thread's GEMV reads. The one-thread norm of a decode row took 1.5-1.9 us a layer on Zen 5 (most
 * of it the packed row's lines taken from the other core, which had read them, and the weights
 * from DRAM) while the other thread waited at the barrier after it. */
static const float *norm_pack(ts_cpu *c, const float *w, ts_step step, int row0, int R, int own, int ith, int nth) {
    int H = c->c->n_embd, a = 0, b = 1;
    float *tmp = thread_tmp(c, ith);
    if (!own) ts_cpu_split(R, ith, nth, 1, &a, &b);
    for (int r = a; r < b; r++) {
        rmsnorm(tmp, c->x + (size_t)(row0 + r) * H, w, H, c->c->rms_eps);
        fault(c, step, tmp, r, 0, H);
        ts_cpu_pack_row(own ? own_row(c, ith) : c->xn_p + (size_t)r * c->Hp, tmp, H);
    }
    return own ? own_row(c, ith) : c->xn_p;
}

static void norm_rows(ts_cpu *c, const float *w, ts_step step, int ith, int nth) {
    norm_pack(c, w, step, 0, c->S, c->own_rows, ith, nth);
}

static void st_attn_norm(ts_cpu *c, int ith, int nth) {
    norm_rows(c, c->L[c->layer].attn_norm, TS_STEP_ATTN_NORM, ith, nth);
}

/* Share boundaries for a GEMM over W: whole 16-row groups for a tile-order matrix (gemm.h), whose
 * kernels read a group whole (a boundary inside one has both threads read it), else align. */
static int mat_align(cpu_mat w, int align) { return ts_dtype_is_t16(w.dt) ? 16 : align; }

static void st_qkv(ts_cpu *c, int ith, int nth) {
    const ts_config *cf = c->c;
    const cpu_layer *L = &c->L[c->layer];
    int S = c->S, H = cf->n_embd, Q = cf->n_heads * cf->head_dim, KV = cf->n_kv_heads * cf->head_dim;
    int NT = Q + 2 * KV, a, b;
    ts_cpu_split(NT, ith, nth, mat_align(L->wq, mat_align(L->wk, mat_align(L->wv, 4))), &a, &b);
    const struct {
        cpu_mat w;
        const float *bias;
        int off, n;
    } parts[3] = {{L->wq, L->bq, 0, Q}, {L->wk, L->bk, Q, KV}, {L->wv, L->bv, Q + KV, KV}};
    for (int p = 0; p < 3; p++) {
        int lo = a > parts[p].off ? a : parts[p].off;
        int hi = b < parts[p].off + parts[p].n ? b : parts[p].off + parts[p].n;
        if (lo >= hi) continue;
        ts_cpu_gemm_mat(c, parts[p].w, c->qkv + parts[p].off, NT, xn_in(c, ith), c->Hp, c->Hp, S, lo - parts[p].off,
                        hi - parts[p].off, ts_cpu_tile_for(c, S, parts[p].n, H));
        const float *bias = parts[p].bias;
        for (int s = 0; s < S; s++) {
            float *y = c->qkv + (size_t)s * NT;
            if (bias)
                for (int n = lo; n < hi; n++) y[n] += bias[n - parts[p].off];
            fault(c, TS_STEP_QKV, y + lo, s, lo, hi - lo);
        }
    }
}

static void kv_store_head(const ts_cpu_seq *kv, int l, int pos, int g, const float *k, const float *v);

/* qk_norm and rope split each row's q heads and, apart, its k heads between threads (k's head
 * u - n_heads sits right after q's in the qkv row): a decode row's heads are spread over the
 * threads instead of one thread doing them while the others wait at the region's end. Both
 * stages split alike, so a thread ropes (and stores) exactly the heads it normed: no barrier
 * between them. Each head's arithmetic is what the whole-row loop did. The k heads apart: a k
 * head also goes into the cache, and one list of q then k heads cut in halves gave one thread
 * every k head (on Qwen3-0.6B 2.5 us a layer against 0.3). Where the thread count divides the kv
 * heads, the vector variants' decode attention (kv heads split alike) then reads the cache rows
 * and q heads this thread just wrote. A thread's units of a row: q heads [u[0], u[1]) and k heads
 * n_heads + [u[2], u[3]). */
static void head_units(const ts_cpu *c, int ith, int nth, int u[4]) {
    ts_cpu_split(c->c->n_heads, ith, nth, 1, &u[0], &u[1]);
    ts_cpu_split(c->c->n_kv_heads, ith, nth, 1, &u[2], &u[3]);
    u[2] += c->c->n_heads, u[3] += c->c->n_heads;
}

static void st_qk_norm(ts_cpu *c, int ith, int nth) {
    const ts_config *cf = c->c;
    const cpu_layer *L = &c->L[c->layer];
    if (!L->q_norm) return;
    int hd = cf->head_dim, nh = cf->n_heads, NT = (nh + 2 * cf->n_kv_heads) * hd, r[4];
    head_units(c, ith, nth, r);
    for (int s = 0; s < c->S; s++)
        for (int k = 0; k < 4; k += 2)
            for (int u = r[k]; u < r[k + 1]; u++) {
                float *h = c->qkv + (size_t)s * NT + (size_t)u * hd;
                rmsnorm(h, h, u < nh ? L->q_norm : L->k_norm, hd, cf->rms_eps);
                fault(c, TS_STEP_QK_NORM, h, s, u * hd, hd);
            }
}

static void st_rope(ts_cpu *c, int ith, int nth) {
    const ts_config *cf = c->c;
    int hd = cf->head_dim, nh = cf->n_heads, KV = cf->n_kv_heads * hd, NT = nh * hd + 2 * KV, r[4];
    head_units(c, ith, nth, r);
    for (int s = 0; s < c->S; s++)
        for (int k = 0; k < 4; k += 2)
            for (int u = r[k]; u < r[k + 1]; u++) {
                float *h = c->qkv + (size_t)s * NT + (size_t)u * hd;
                const float *cs = c->rope_cs + (size_t)s * hd, *sn = cs + hd / 2;
                rope(h, 1, hd, cs, sn);
                fault(c, TS_STEP_ROPE, h, s, u * hd, hd);
                if (u < nh) continue;
                /* k's head g is roped: it and v's head g go into the cache; a batched decode row
                 * into its own sequence's cache at its own position */
                const ts_cpu_seq *kv = c->batch ? c->row_kv[s] : c->kv;
                int pos = c->batch ? c->row_pos[s] : c->pos0 + s;
                kv_store_head(kv, c->layer, pos, u - nh, h, h + KV);
            }
}

/* One head's row of hd values into an F16 cache, rounded as the oracle rounds (io/quant.h). */
static void f16_row(const ts_cpu *c, void *dst, const float *src, int hd) {
    if (c->variant >= TS_CPU_AVX2) ts_cpu_kv_f16_rows_avx2(dst, src, 1, hd, hd);
    else
        for (int i = 0; i < hd; i++) ((uint16_t *)dst)[i] = ts_f32_to_f16_sat(src[i]);
}

/* kv head g's k and v rows (head_dim values each) at position pos of layer l */
static void kv_store_head(const ts_cpu_seq *kv, int l, int pos, int g, const float *k, const float *v) {
    const ts_cpu *c = kv->c;
    size_t hd = (size_t)c->c->head_dim, es = c->kv_esize, off = ts_cpu_kv_off(c->c, kv->cap, l, g, pos);
    if (c->kv_f16) {
        f16_row(c, ts_cpu_kv_at(kv->k_cache, off, es), k, (int)hd);
        f16_row(c, ts_cpu_kv_at(kv->v_cache, off, es), v, (int)hd);
        return;
    }
    memcpy(ts_cpu_kv_at(kv->k_cache, off, es), k, sizeof(float) * hd);
    memcpy(ts_cpu_kv_at(kv->v_cache, off, es), v, sizeof(float) * hd);
}

void ts_cpu_kv_store(const ts_config *cf, const ts_cpu_seq *kv, int l, int pos, int S, const float *k, int ldk,
                     const float *v, int ldv) {
    size_t hd = (size_t)cf->head_dim;
    for (int s = 0; s < S; s++)
        for (int g = 0; g < cf->n_kv_heads; g++)
            kv_store_head(kv, l, pos + s, g, k + (size_t)s * ldk + g * hd, v + (size_t)s * ldv + g * hd);
}

static void st_attention(ts_cpu *c, int ith, int nth) {
    const ts_config *cf = c->c;
    int hd = cf->head_dim, nh = cf->n_heads, Q = nh * hd, KV = cf->n_kv_heads * hd, NT = Q + 2 * KV;
    int group = nh / cf->n_kv_heads, a, b;
    /* head g's rows from element ts_cpu_kv_off(cf, cap, layer, g, 0) of (kv)->*_cache, kvb elements
     * between blocks */
    const ts_cpu_seq *kv0 = c->kv;
    int kvb = ts_cpu_kv_block(cf), f16 = c->kv_f16;
    size_t es = c->kv_esize;
    float scale = (float)(1.0 / sqrt((double)hd));
    if (c->variant >= TS_CPU_AVX2 && c->S > 1 && !c->batch && !(c->disable & TS_OPT_TILED_ATTN)) {
        /* Prefill: tiles of query rows per head, so each cached row is read once per tile. */
        float *sc = c->scores + (size_t)ith * (size_t)TS_ATTN_TILE * (size_t)(c->sc_len + 16);
        int wide = c->variant >= TS_CPU_AVX512BF16 && ts_cpu_attn_tile_avx512_ok(hd);
        int tiles = (c->S + TS_ATTN_TILE - 1) / TS_ATTN_TILE;
        /* Round robin, not contiguous ranges: a causal tile's cost grows with its position,
         * so halves of the tile list would leave one thread with most of the work. */
        for (int it = ith; it < tiles * nh; it += nth) {
            int tile = it / nh, h = it % nh, s0 = tile * TS_ATTN_TILE, g = h / group;
            int T = c->S - s0 < TS_ATTN_TILE ? c->S - s0 : TS_ATTN_TILE;
            float *o = c->att + (size_t)s0 * Q + (size_t)h * hd;
            size_t ko = ts_cpu_kv_off(cf, kv0->cap, c->layer, g, 0);
            (wide ? ts_cpu_attn_tile_avx512 : ts_cpu_attn_tile_avx2)(o, Q, c->qkv + (size_t)s0 * NT + (size_t)h * hd, NT,
                                                                    ts_cpu_kv_at(kv0->k_cache, ko, es),
                                                                    ts_cpu_kv_at(kv0->v_cache, ko, es), c->pos0 + s0 + 1,
                                                                    T, kvb, hd, scale, sc, f16);
            for (int t = 0; t < T; t++) fault(c, TS_STEP_ATTENTION, o + (size_t)t * Q, s0 + t, h * hd, hd);
        }
        return;
    }
    if (c->variant >= TS_CPU_AVX2 && group <= TS_ATTN_TILE) {
        /* Decode rows (and prefill without tiles): the q heads of a GQA group in one call, so
         * each cached row is read once per group; the same call whether a row is alone or in a
         * batch, so a row's result does not depend on the batch. */
        float *sc = c->scores + (size_t)ith * (size_t)TS_ATTN_TILE * (size_t)(c->sc_len + 16);
        int nkv = cf->n_kv_heads, wide = c->variant >= TS_CPU_AVX512BF16 && ts_cpu_attn_tile_avx512_ok(hd);
        ts_cpu_split(c->S * nkv, ith, nth, 1, &a, &b);
        for (int it = a; it < b; it++) {
            int s = it / nkv, g = it % nkv, n_ctx = c->pos0 + s + 1;
            const ts_cpu_seq *kv = kv0;
            if (c->batch) kv = c->row_kv[s], n_ctx = c->row_pos[s] + 1;
            size_t ko = ts_cpu_kv_off(cf, kv->cap, c->layer, g, 0);
            int h0 = g * group;
            float *o = c->att + (size_t)s * Q + (size_t)h0 * hd;
            (wide ? ts_cpu_attn_group_avx512 : ts_cpu_attn_group_avx2)(o, c->qkv + (size_t)s * NT + (size_t)h0 * hd,
                                                                      ts_cpu_kv_at(kv->k_cache, ko, es),
                                                                      ts_cpu_kv_at(kv->v_cache, ko, es), n_ctx, kvb, hd,
                                                                      scale, sc, group, f16);
            for (int h = h0; h < h0 + group; h++) fault(c, TS_STEP_ATTENTION, c->att + (size_t)s * Q + (size_t)h * hd, s, h * hd, hd);
        }
        return;
    }
    float *sc = c->scores + (size_t)ith * (size_t)c->sc_len;
    ts_cpu_split(c->S * nh, ith, nth, 1, &a, &b);
    for (int it = a; it < b; it++) {
        int s = it / nh, h = it % nh, n_ctx = c->pos0 + s + 1, g = h / group;
        const ts_cpu_seq *kv = kv0;
        if (c->batch) kv = c->row_kv[s], n_ctx = c->row_pos[s] + 1; /* decode row s over its own sequence's cache */
        size_t ko = ts_cpu_kv_off(cf, kv->cap, c->layer, g, 0);
        float *o = c->att + (size_t)s * Q + (size_t)h * hd;
        c->attn_row(o, c->qkv + (size_t)s * NT + (size_t)h * hd, ts_cpu_kv_at(kv->k_cache, ko, es),
                    ts_cpu_kv_at(kv->v_cache, ko, es), n_ctx, kvb, hd, scale, sc, f16);
        fault(c, TS_STEP_ATTENTION, o, s, h * hd, hd);
    }
}

/* x[:, a:b] += y[:, a:b] (+ bias): the residual adds of o_proj and down on own columns. */
static void residual(ts_cpu *c, const float *bias, ts_step step, int a, int b) {
    int H = c->c->n_embd;
    for (int s = 0; s < c->S; s++) {
        float *x = c->x + (size_t)s * H, *o = c->o + (size_t)s * H;
        fault(c, step, o + a, s, a, b - a);
        for (int n = a; n < b; n++) x[n] += o[n] + (bias ? bias[n] : 0.0f);
    }
}

static void st_o_proj(ts_cpu *c, int ith, int nth) {
    const ts_config *cf = c->c;
    const cpu_layer *L = &c->L[c->layer];
    int S = c->S, H = cf->n_embd, Q = cf->n_heads * cf->head_dim, a, b;
    const float *in = c->att_p;
    if (c->own_rows) { /* each thread packs the decode row for itself: no barrier */
        ts_cpu_pack_row(own_row(c, ith), c->att, Q);
        in = own_row(c, ith);
    } else {
        ts_cpu_split(S, ith, nth, 1, &a, &b);
        for (int s = a; s < b; s++) ts_cpu_pack_row(c->att_p + (size_t)s * c->Qp, c->att + (size_t)s * Q, Q);
        ts_pool_barrier(c->pool);
    }
    ts_cpu_split(H, ith, nth, mat_align(L->wo, 4), &a, &b);
    if (a < b) ts_cpu_gemm_mat(c, L->wo, c->o, H, in, c->Qp, c->Qp, S, a, b, ts_cpu_tile_for(c, S, H, Q));
    residual(c, L->bo, TS_STEP_O_PROJ, a, b);
}

static void st_ffn_norm(ts_cpu *c, int ith, int nth) {
    norm_rows(c, c->L[c->layer].ffn_norm, TS_STEP_FFN_NORM, ith, nth);
}

static void st_gate_up(ts_cpu *c, int ith, int nth) {
    const ts_config *cf = c->c;
    const cpu_layer *L = &c->L[c->layer];
    int S = c->S, H = cf->n_embd, F = cf->n_ff, a, b;
    /* 16-aligned shares: each thread packs whole blocks of its own h columns (the last share
     * also the zero pad up to Fp). */
    ts_cpu_split(F, ith, nth, TS_GEMM_KBLOCK, &a, &b);
    if (a >= b) return;
    ts_cpu_gemm_mat(c, L->wg, c->g, F, xn_in(c, ith), c->Hp, c->Hp, S, a, b, ts_cpu_tile_for(c, S, F, H));
    ts_cpu_gemm_mat(c, L->wu, c->u, F, xn_in(c, ith), c->Hp, c->Hp, S, a, b, ts_cpu_tile_for(c, S, F, H));
    for (int s = 0; s < S; s++) {
        float *g = c->g + (size_t)s * F, *u = c->u + (size_t)s * F;
        if (L->bg || L->bu)
            for (int n = a; n < b; n++) g[n] += L->bg ? L->bg[n] : 0.0f, u[n] += L->bu ? L->bu[n] : 0.0f;
        if (c->variant >= TS_CPU_AVX2) ts_cpu_silu_mul_avx2(g + a, u + a, b - a);
        else
            for (int n = a; n < b; n++) g[n] = g[n] / (1.0f + expf(-g[n])) * u[n];
        fault(c, TS_STEP_GATE_UP, g + a, s, a, b - a);
        ts_cpu_pack_row(c->h_p + (size_t)s * c->Fp + a, g + a, b - a);
    }
}

static void st_down(ts_cpu *c, int ith, int nth) {
    const ts_config *cf = c->c;
    const cpu_layer *L = &c->L[c->layer];
    int S = c->S, H = cf->n_embd, F = cf->n_ff, a, b;
    ts_cpu_split(H, ith, nth, mat_align(L->wd, 4), &a, &b);
    if (a < b) ts_cpu_gemm_mat(c, L->wd, c->o, H, c->h_p, c->Fp, c->Fp, S, a, b, ts_cpu_tile_for(c, S, H, F));
    residual(c, L->bd, TS_STEP_DOWN, a, b);
}

/* barrier_after: the next stage of the group reads what other threads wrote (1), or only with
 * the rows shared (2: a norm, whose decode row each thread makes for itself under own_rows). */
static const struct stage {
    void (*fn)(ts_cpu *c, int ith, int nth);
    int group, barrier_after;
} k_stages[TS_N_STEPS] = {
    [TS_STEP_ATTN_NORM] = {st_attn_norm, 0, 2}, [TS_STEP_QKV] = {st_qkv, 0, 1},
    [TS_STEP_QK_NORM] = {st_qk_norm, 0, 0},     [TS_STEP_ROPE] = {st_rope, 0, 0},
    [TS_STEP_ATTENTION] = {st_attention, 1, 0}, [TS_STEP_O_PROJ] = {st_o_proj, 2, 1},
    [TS_STEP_FFN_NORM] = {st_ffn_norm, 2, 2},   [TS_STEP_GATE_UP] = {st_gate_up, 2, 1},
    [TS_STEP_DOWN] = {st_down, 2, 0},
};

static void run_stages(void *ctx, int ith, int nth) {
    ts_cpu *c = ctx;
    cpu_step_clock *clk = c->step_clock ? &c->step_clock[ith] : NULL;
    for (int i = c->st_first; i <= c->st_last; i++) {
        double t0 = clk ? ts_now_s() : 0, t1 = 0;
        k_stages[i].fn(c, ith, nth);
        if (clk) t1 = ts_now_s(), clk->work[i] += t1 - t0;
        int bar = k_stages[i].barrier_after;
        if (bar && !(bar == 2 && c->own_rows) && i < c->st_last) {
            ts_pool_barrier(c->pool);
            if (clk) clk->wait[i] += ts_now_s() - t1;
        }
    }
}

ts_status ts_cpu_step_timing(ts_cpu *c, ts_error *err) {
    if (!c->step_clock) {
        c->step_clock = aligned_alloc(64, (sizeof(cpu_step_clock) * (size_t)c->nth + 63) & ~(size_t)63);
        if (!c->step_clock) return ts_fail(err, TS_ERR_NOMEM, "out of memory for the step timing");
    }
    ts_cpu_step_timing_reset(c);
    return TS_OK;
}

void ts_cpu_step_timing_reset(ts_cpu *c) {
    if (c->step_clock) memset(c->step_clock, 0, sizeof(cpu_step_clock) * (size_t)c->nth);
}

int ts_cpu_step_times(const ts_cpu *c, ts_cpu_step_time *out, int max) {
    int n = 0;
    for (int i = 0; c->step_clock && i < TS_N_STEPS && n < max; i++) {
        ts_cpu_step_time t = {(ts_step)i, 0, 1e300, 0};
        for (int th = 0; th < c->nth; th++) {
            const cpu_step_clock *k = &c->step_clock[th];
            if (k->work[i] > t.work_max_s) t.work_max_s = k->work[i];
            if (k->work[i] < t.work_min_s) t.work_min_s = k->work[i];
            if (k->work[i] + k->wait[i] > t.span_s) t.span_s = k->work[i] + k->wait[i];
        }
        if (t.work_max_s > 0) out[n++] = t;
    }
    return n;
}

void ts_cpu_dispatch(ts_cpu *c, ts_pool_fn fn, int slot) {
    double t0 = ts_now_s() * 1e3;
    ts_pool_run(c->pool, fn, c);
    c->prof_ms[slot] += ts_now_s() * 1e3 - t0;
    c->prof_calls[slot]++;
}

void ts_cpu_run_stage(ts_cpu *c, ts_step step) {
    c->own_rows = 0; /* a stage alone hands its rows to the next through the shared buffers */
    c->st_first = c->st_last = (int)step;
    ts_cpu_dispatch(c, run_stages, CPU_PROF_STEP0 + (int)step);
}

void ts_cpu_run_layer(ts_cpu *c) {
    if (!(c->disable & TS_OPT_FUSED)) {
        c->own_rows = c->S == 1;
        for (int g = 0, i = 0; g < 3; g++) {
            c->st_first = i;
            while (i + 1 < TS_N_STEPS && k_stages[i + 1].group == g) i++;
            c->st_last = i++;
            ts_cpu_dispatch(c, run_stages, CPU_PROF_D1 + g);
        }
        return;
    }
    for (int s = 0; s < TS_N_STEPS; s++)
        if (s != TS_STEP_QK_NORM || c->L[c->layer].q_norm) ts_cpu_run_stage(c, (ts_step)s);
}

/* final norm + LM head on rows [lg_row0, lg_row0 + lg_rows) of the chunk into lg_out. */
void ts_cpu_lm_head(void *ctx, int ith, int nth) {
    ts_cpu *c = ctx;
    const ts_config *cf = c->c;
    int H = cf->n_embd, V = cf->n_vocab, R = c->lg_rows, a, b;
    /* one row: every thread norms it for itself, no barrier */
    const float *in = norm_pack(c, c->final_norm, TS_N_STEPS, c->lg_row0, R, R == 1, ith, nth);
    if (R != 1) ts_pool_barrier(c->pool);
    ts_cpu_split(V, ith, nth, mat_align(c->lm_head, 4), &a, &b);
    if (a < b) ts_cpu_gemm_mat(c, c->lm_head, c->lg_out, V, in, c->Hp, c->Hp, R, a, b, ts_cpu_tile_for(c, R, V, H));
}
