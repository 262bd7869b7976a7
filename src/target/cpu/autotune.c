/* GEMM tile autotuner. For every GEMM shape the model runs at a given prefill size (and at
 * decode), it times a small candidate set of register/cache tiles on the real weights through
 * the same thread split the forward pass uses, rejects any candidate whose output is further
 * than the caller's bound (deploy passes its phase-1 gate) from the scalar kernel's, and keeps the fastest. Results live in the session
 * (ts_cpu_tile_for reads them) and can be exported for a deployment manifest. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/metrics.h"
#include "target/cpu/cpu_internal.h"
#include "core/clock.h"

typedef struct tune_job {
    ts_gemm_fn gemm;
    const uint16_t *W;
    int S, N, K; /* K: the padded row stride, as the session's GEMMs run it */
    const float *xp;
    float *y;
    ts_gemm_tile t;
} tune_job;

static void tune_run(void *p, int ith, int nth) {
    tune_job *j = p;
    int units = (j->N + 3) / 4, per = units / nth, rem = units % nth;
    int u0 = ith * per + (ith < rem ? ith : rem), u1 = u0 + per + (ith < rem);
    int a = u0 * 4 < j->N ? u0 * 4 : j->N, b = u1 * 4 < j->N ? u1 * 4 : j->N;
    if (a < b) j->gemm(j->y, j->N, j->xp, j->K, j->W, j->K, j->S, a, b, j->t);
}

static void record(ts_cpu *c, int bucket, int N, int K, ts_gemm_tile t, double gf) {
    for (int i = 0; i < c->n_tiles; i++)
        if (c->tiles[i].bucket == bucket && c->tiles[i].n == N && c->tiles[i].k == K) {
            c->tiles[i].tile = t;
            c->tiles[i].gflops = gf;
            return;
        }
    if (c->n_tiles < CPU_MAX_TILES) c->tiles[c->n_tiles++] = (ts_tile_entry){bucket, N, K, t, gf};
}

/* Tunes one (S, N, K) on weights W, whose rows are ts_gemm_kpad(K) apart (the session's
 * layout); tiles are keyed by the model's K. */
static ts_status tune_shape(ts_cpu *c, const char *name, cpu_mat Wm, int S, int N, int K, double max_rel_l2,
                            FILE *log, ts_error *err) {
    if (Wm.dt != TS_DTYPE_BF16) { /* the quantized kernels take no tile (gemm.h): nothing to tune */
        if (log)
            fprintf(log, "  autotune %-9s S=%-4d N=%-6d K=%-5d -> %s weights%s: fixed kernel, not tuned\n", name, S, N, K,
                    ts_dtype_name(ts_x16_stored(Wm.dt)),
                    ts_dtype_is_x16(Wm.dt) ? " (16-block lane order)" : ts_dtype_is_t16(Wm.dt) ? " (tile order)" : "");
        return TS_OK;
    }
    const uint16_t *W = Wm.w;
    int bucket = ts_cpu_s_bucket(S), nref = N < 64 ? N : 64;
    for (int i = 0; i < c->n_tiles; i++)
        if (c->tiles[i].bucket == bucket && c->tiles[i].n == N && c->tiles[i].k == K) return TS_OK;
    int Kp = ts_gemm_kpad(K);
    float *x = malloc(sizeof(float) * (size_t)S * K), *xp = malloc(sizeof(float) * (size_t)S * Kp);
    float *y = malloc(sizeof(float) * (size_t)S * N), *ref = malloc(sizeof(float) * (size_t)S * N);
    float *got = malloc(sizeof(float) * (size_t)S * nref), *want = malloc(sizeof(float) * (size_t)S * nref);
    if (!x || !xp || !y || !ref || !got || !want) {
        free(x), free(xp), free(y), free(ref), free(got), free(want);
        return ts_fail(err, TS_ERR_NOMEM, "autotune: out of memory for %s (%d x %d x %d)", name, S, N, K);
    }
    uint64_t r = 88172645463325252ull;
    for (size_t i = 0; i < (size_t)S * K; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        x[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 2 - 1);
    }
    for (int s = 0; s < S; s++) ts_cpu_pack_row(xp + (size_t)s * Kp, x + (size_t)s * K, K);
    ts_gemm_tile def = ts_cpu_gemm_default_tile(S, N, K);
    ts_cpu_gemm_bf16_scalar(ref, N, xp, Kp, W, Kp, S, 0, nref, def);
    /* The AVX2 kernel runs one panel kernel for every S >= 2 whatever the tile (gemm_avx2.c),
     * and the scalar one ignores tiles: for prefill the autotuner only measures. */
    static const ts_gemm_tile prefill[] = {{2, 4, 64}};
    static const ts_gemm_tile decode[] = {{1, 4, 1}, {1, 2, 1}, {1, 1, 1}};
    const ts_gemm_tile *cand = S == 1 ? decode : prefill;
    int n_cand = S == 1 ? 3 : (int)(sizeof prefill / sizeof prefill[0]);
    double flops = 2.0 * S * N * K, best = 0, gemv_gf = 0;
    ts_gemm_tile gemv_t = def;
    ts_gemm_tile best_t = def;
    for (int i = 0; i < n_cand; i++) {
        tune_job j = {c->gemm, W, S, N, Kp, xp, y, cand[i]};
        ts_pool_run(c->pool, tune_run, &j); /* warm-up, and the output for the gate */
        for (int s = 0; s < S; s++) {
            memcpy(got + (size_t)s * nref, y + (size_t)s * N, sizeof(float) * nref);
            memcpy(want + (size_t)s * nref, ref + (size_t)s * N, sizeof(float) * nref);
        }
        ts_metrics m;
        ts_metrics_compute(got, want, S, nref, &m);
        if (!(m.rel_l2 <= max_rel_l2) || m.nonfinite) continue;
        double t = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double a = ts_now_s();
            ts_pool_run(c->pool, tune_run, &j);
            double d = ts_now_s() - a;
            if (d < t) t = d;
        }
        double gf = flops / t / 1e9;
        if (gf > best) best = gf, best_t = cand[i];
        if (S == 1 && cand[i].nr == 1) gemv_gf = gf, gemv_t = cand[i];
    }
    /* Decode: the streaming GEMV stays unless a tile beats it clearly; best-of-3 timings on a
     * shared host otherwise swap them on noise (seen in a deploy: a tile "won" and the
     * tuned decode was slower than the untuned one). */
    if (S == 1 && gemv_gf > 0 && best < 1.05 * gemv_gf) best = gemv_gf, best_t = gemv_t;
    record(c, bucket, N, K, best_t, best);
    if (log)
        fprintf(log, "  autotune %-9s S=%-4d N=%-6d K=%-5d -> tile %dx%d block %-3d %7.1f GFLOP/s\n", name, S,
                N, K, best_t.ms, best_t.nr, best_t.sb, best);
    free(x), free(xp), free(y), free(ref), free(got), free(want);
    return TS_OK;
}

ts_status ts_cpu_autotune(ts_cpu *c, int S, double max_rel_l2, FILE *log, ts_error *err) {
    const ts_config *cf = c->c;
    const cpu_layer *L = &c->L[0];
    int H = cf->n_embd, Q = cf->n_heads * cf->head_dim, KV = cf->n_kv_heads * cf->head_dim, F = cf->n_ff;
    const struct {
        const char *name;
        cpu_mat w;
        int n, k;
    } shapes[] = {{"q_proj", L->wq, Q, H}, {"kv_proj", L->wk, KV, H}, {"o_proj", L->wo, H, Q},
                  {"gate_up", L->wg, F, H}, {"down", L->wd, H, F}};
    ts_status s = TS_OK;
    int sizes[2] = {S, 1};
    int pinned = ts_pool_enter(c->pool); /* timed as a forward runs them (core/pool.h) */
    for (int k = 0; k < 2 && !s; k++) {
        if (k == 1 && S == 1) break;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0] && !s; i++)
            s = tune_shape(c, shapes[i].name, shapes[i].w, sizes[k], shapes[i].n, shapes[i].k, max_rel_l2,
                           log, err);
    }
    if (!s) s = tune_shape(c, "lm_head", c->lm_head, 1, cf->n_vocab, H, max_rel_l2, log, err);
    ts_pool_leave(c->pool, pinned);
    return s;
}

int ts_cpu_tiles_get(const ts_cpu *c, ts_cpu_tile_rec *out, int max) {
    int n = c->n_tiles < max ? c->n_tiles : max;
    for (int i = 0; i < n; i++) {
        const ts_tile_entry *e = &c->tiles[i];
        out[i] = (ts_cpu_tile_rec){e->bucket, e->n, e->k, e->tile.ms, e->tile.nr, e->tile.sb, e->gflops};
    }
    return c->n_tiles;
}

/* Tiles from a manifest: only shapes this model runs and tile values the kernels accept, so a
 * hand-edited manifest cannot select an out-of-range tile. */
ts_status ts_cpu_tiles_set(ts_cpu *c, const ts_cpu_tile_rec *in, int n, ts_error *err) {
    const ts_config *cf = c->c;
    int H = cf->n_embd, Q = cf->n_heads * cf->head_dim, KV = cf->n_kv_heads * cf->head_dim, F = cf->n_ff;
    for (int i = 0; i < n; i++) {
        const ts_cpu_tile_rec *r = &in[i];
        int shape_ok = (r->n == Q && r->k == H) || (r->n == KV && r->k == H) || (r->n == H && r->k == Q) ||
                       (r->n == F && r->k == H) || (r->n == H && r->k == F) || (r->n == cf->n_vocab && r->k == H);
        if (r->bucket < 1 || r->bucket > 3 || !shape_ok || r->ms < 1 || r->ms > 3 ||
            (r->nr != 1 && r->nr != 2 && r->nr != 4) || r->sb < 1 || r->sb > 4096)
            return ts_fail(err, TS_ERR_FORMAT,
                           "tile %d (bucket %d, N %d, K %d, tile %dx%d block %d) is not a tile this model and "
                           "kernel accept: bucket 1-3, N x K one of the model's GEMM shapes, ms 1-3, nr 1/2/4, "
                           "block 1-4096", i, r->bucket, r->n, r->k, r->ms, r->nr, r->sb);
        record(c, r->bucket, r->n, r->k, (ts_gemm_tile){r->ms, r->nr, r->sb}, r->gflops);
    }
    return TS_OK;
}

void ts_cpu_tiles_clear(ts_cpu *c) { c->n_tiles = 0; }
