/* The cpu target's session: weights bound once (borrowed from the mmap when BF16 with K a
 * multiple of 16, else copied with a zero-padded row stride: gemm.h), one arena
 * for every activation buffer and the KV cache, so nothing is allocated per token; the
 * forward pass runs each layer's stages (cpu_steps.c) and one more dispatch per forward for
 * [final_norm -> lm_head] on the rows that need logits. */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/error.h"
#include "target/cpu/attn.h"
#include "target/cpu/cpu_internal.h"
#include "target/cpu/cpu_target.h"
#include "target/cpu/gemm.h"
#include "core/pool.h"
#include "target/ref/ref_kernels.h"


/* ---- weights ---- */

#define HUGE_PAGE ((size_t)2 << 20)

/* Weight copies of 2 MiB or more are 2 MiB aligned and advised as huge pages: decode streams
 * every weight once per token, and a copy in (transparent) huge pages is read through far
 * fewer TLB entries than the page cache's 4 KiB pages of the mmap (see docs/cpu-target.md for
 * what it measured). Without THP the advice is ignored and the copy is an ordinary one. Freed
 * with free(). The KV cache too (ts_cpu_kv_alloc), with its next block faulted ahead. */
static void *alloc_huge(size_t bytes) {
    if (bytes >= HUGE_PAGE) {
        size_t sz = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
        void *p = aligned_alloc(HUGE_PAGE, sz);
        if (p) {
            madvise(p, sz, MADV_HUGEPAGE);
            return p;
        }
    }
    return malloc(bytes);
}

/* Why the KV cache in 2 MiB pages: decode attention streams the cache, and from 4 KiB pages it
 * read 0.64-0.65 of the read peak on the Intel Xeon (Qwen3-0.6B Q4_0, `tessera bench --steps`),
 * about the probe's own 4 KiB-page rate, against 0.74-0.78 from 2 MiB pages: 1.02-1.07x the
 * tok/s at context 128, 1.06-1.13x at 1024 (docs/performance.md, session 41).
 * TESSERA_KV_PAGES=4k keeps malloc's pages. */
int ts_cpu_kv_huge(size_t bytes) {
    const char *e = getenv("TESSERA_KV_PAGES");
    return bytes >= HUGE_PAGE && !(e && !strcmp(e, "4k"));
}

void *ts_cpu_kv_alloc(size_t bytes) { return ts_cpu_kv_huge(bytes) ? alloc_huge(bytes) : malloc(bytes); }

/* A 2 MiB page faulted in on the first write to it zeroes 2 MiB, and the step that enters a
 * block writes every layer's first rows of it at once: 56 pages, 112 MB, for Qwen3-0.6B's FP32
 * cache, which made that step 27-270 ms instead of 12-14 when session 31 tried 2 MiB pages
 * without this. So block 0 is faulted in when the cache is made (ts_cpu_kv_fault_first: 112 MB
 * resident from the start for that cache, where 4 KiB pages grew with the positions used;
 * llama.cpp clears its whole cache then), and every decode step in the second half of a block
 * faults in its share of the next block's pages, as does a prefill chunk for its last row, so
 * that block is resident before a step enters it (a prompt ending late in a block leaves what
 * remains to its few steps left, at worst all to the one before the boundary). Not earlier: the
 * cache's resident memory stays within the blocks in use and, past half of the last, the next.
 * A page is faulted in by rewriting one byte of it with itself, on the calling thread before the
 * step's regions: the same values, no other thread running. A unit is one 2 MiB page of one
 * layer's K or V rows of a block (block_units of them). */
static size_t region_pages(const ts_cpu_seq *kv) { /* a region's 2 MiB pages at most */
    const ts_cpu *c = kv->c;
    size_t region = ts_cpu_kv_rows(kv->cap) * (size_t)c->c->n_kv_heads * (size_t)c->c->head_dim * c->kv_esize;
    return (region + HUGE_PAGE - 1) / HUGE_PAGE + 1;
}
static size_t block_units(const ts_cpu_seq *kv) { return 2 * (size_t)kv->c->c->n_layers * region_pages(kv); }

static void fault_units(ts_cpu_seq *kv, size_t b, size_t u0, size_t u1) {
    const ts_cpu *c = kv->c;
    const size_t R = ts_cpu_kv_rows(kv->cap), cap = ts_cpu_kv_cap(kv->cap);
    const size_t KV = (size_t)c->c->n_kv_heads * (size_t)c->c->head_dim, es = c->kv_esize;
    const size_t region = R * KV * es, pages = region_pages(kv), units = block_units(kv);
    for (size_t u = u0; u < u1 && u < units; u++) {
        size_t l = u / (2 * pages), which = u / pages % 2, pg = u % pages;
        uint8_t *base = (uint8_t *)(which ? kv->v_cache : kv->k_cache);
        uintptr_t r0 = (uintptr_t)(base + ((size_t)l * cap + b * R) * KV * es), r1 = r0 + region;
        uintptr_t at = (r0 & ~(uintptr_t)(HUGE_PAGE - 1)) + pg * HUGE_PAGE;
        if (at < r0) at = r0;
        if (at >= r1) continue; /* a region spanning fewer pages */
        volatile uint8_t *p = (volatile uint8_t *)at;
        *p = *p;
    }
}

void ts_cpu_kv_fault_first(ts_cpu_seq *kv) {
    if (kv->huge) fault_units(kv, 0, 0, block_units(kv));
}

void ts_cpu_kv_prefault(ts_cpu_seq *kv, int pos) {
    const size_t R = ts_cpu_kv_rows(kv->cap), nb = (size_t)pos / R + 1, i = (size_t)pos % R;
    if (!kv->huge || nb * R >= ts_cpu_kv_cap(kv->cap) || i < R / 2) return; /* 4 KiB pages, no next block, or not yet */
    if (kv->pf_block != (int)nb) kv->pf_block = (int)nb, kv->pf_done = 0;
    /* what is left, evenly over the steps left in this block */
    const size_t left = R - i, todo = block_units(kv) - (size_t)kv->pf_done;
    const size_t want = (size_t)kv->pf_done + (todo + left - 1) / left;
    fault_units(kv, nb, (size_t)kv->pf_done, want);
    kv->pf_done = (int)want;
}

static void *own(ts_cpu *c, size_t bytes) {
    void *p = alloc_huge(bytes);
    if (!p) return NULL;
    c->owned[c->n_owned++] = p;
    return p;
}

/* The matrix copies of a session are carved in load order from one slab (own_mat), the slab
 * in 2 MiB huge pages as above. Allocated one by one, every Q4_0 matrix of a 0.6B model (0.3-1.8
 * MB each) stayed under the huge-page threshold: `tessera bench --copy-weights` found 84 of
 * 370 MB in huge pages and decode at 0.57 of the read peak, reading 4 KiB pages. */
#define SLAB_ALIGN 64
static size_t slab_round(size_t n) { return (n + SLAB_ALIGN - 1) / SLAB_ALIGN * SLAB_ALIGN; }

static void *own_mat(ts_cpu *c, size_t bytes) {
    if (c->slab && c->slab_used + slab_round(bytes) <= c->slab_size) {
        void *p = c->slab + c->slab_used;
        c->slab_used += slab_round(bytes);
        return p;
    }
    return own(c, bytes);
}

/* The copy is split over the pool: each thread copies (and first-touches, so the kernel
 * zero-fills its huge pages) a contiguous share. One thread copying a multi-GB model was most
 * of a copying session's start-up. */
typedef struct copy_job {
    void *dst;
    const void *src;
    size_t n;
} copy_job;

static void copy_part(void *ctx, int ith, int nth) {
    const copy_job *j = ctx;
    size_t per = ((j->n + (size_t)nth - 1) / (size_t)nth + 63) & ~(size_t)63, a = per * (size_t)ith;
    if (a >= j->n) return;
    size_t b = a + per < j->n ? a + per : j->n;
    memcpy((char *)j->dst + a, (const char *)j->src + a, b - a);
}

/* A Q8_0 / Q4_0 matrix copied into 16-block lane order (gemm.h), rows split over the pool. */
typedef struct repack_job {
    void *dst;
    const void *src;
    int64_t N, K;
    ts_dtype dt;
} repack_job;

static void repack_part(void *ctx, int ith, int nth) {
    const repack_job *j = ctx;
    if (ts_dtype_is_t16(j->dt)) { /* whole 16-row groups */
        ts_t16_repack_groups(ts_x16_stored(j->dt), j->dst, j->src, (int)j->K, j->N / 16 * ith / nth,
                             j->N / 16 * (ith + 1) / nth);
        return;
    }
    ts_x16_repack_rows(j->dt, j->dst, j->src, (int)j->K, j->N * ith / nth, j->N * (ith + 1) / nth);
}

/* The whole pages inside [p, p + n) leave this process's mappings (the page cache keeps
 * them): copying one tensor at a time, the resident set then never holds the mapped model and
 * the copy at once. Pages shared with a neighbouring tensor stay until the caller releases the
 * whole map. */
static void release_pages(const void *p, size_t n) {
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = ((uintptr_t)p + pg - 1) & ~(pg - 1),
              b = ((uintptr_t)p + n) & ~(pg - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

/* A matrix whose K is not a multiple of 16, copied row by row into (N, ts_gemm_kpad(K)) with a
 * zero pad (gemm.h says why), converted to BF16 on the way when stored otherwise; the rows are
 * split over the pool like the plain copy. */
typedef struct pad_job {
    uint16_t *dst;
    const ts_tensor *t;
    int64_t N, K, Kp;
} pad_job;

static void pad_part(void *ctx, int ith, int nth) {
    const pad_job *j = ctx;
    int64_t a = j->N * ith / nth, b = j->N * (ith + 1) / nth;
    for (int64_t n = a; n < b; n++) {
        uint16_t *d = j->dst + n * j->Kp;
        if (j->t->dtype == TS_DTYPE_BF16) {
            memcpy(d, (const uint16_t *)j->t->data + n * j->K, sizeof *d * (size_t)j->K);
        } else {
            float buf[256];
            for (int64_t i = 0; i < j->K; i += 256) {
                size_t k = (size_t)(j->K - i < 256 ? j->K - i : 256);
                ts_dtype_to_f32(j->t->dtype, j->t->data, (size_t)(n * j->K + i), k, buf);
                for (size_t q = 0; q < k; q++) d[i + (int64_t)q] = ts_f32_to_bf16(buf[q]);
            }
        }
        memset(d + j->K, 0, sizeof *d * (size_t)(j->Kp - j->K));
    }
}

/* Q8_0 / Q4_0 matrices the quantized kernels read as stored (rows of whole blocks). */
static int quant_in_place(const ts_tensor *t) { return ts_dtype_is_quant(t->dtype) && t->shape[1] % TS_QBLOCK == 0; }

static const uint16_t *mat_bf16(ts_cpu *c, const ts_tensor *t);

static cpu_mat mat(ts_cpu *c, const ts_tensor *t) {
    if (!quant_in_place(t)) return (cpu_mat){mat_bf16(c, t), TS_DTYPE_BF16};
    if (!(c->disable & TS_OPT_ZERO_COPY)) return (cpu_mat){t->data, t->dtype}; /* zero-copy */
    void *w = own_mat(c, t->nbytes); /* the copying baseline, still quantized */
    if (!w) return (cpu_mat){NULL, t->dtype};
    ts_dtype dt = t->dtype;
    if (ts_cpu_t16_wanted(c->variant, dt, t->shape[0], t->shape[1])) { /* the same bytes in tile order */
        repack_job j = {w, t->data, t->shape[0], t->shape[1], ts_t16_of(dt)};
        ts_pool_run(c->pool, repack_part, &j);
        dt = ts_t16_of(dt);
    } else if (ts_cpu_x16_wanted(c->variant, dt)) { /* the same bytes in lane order */
        repack_job j = {w, t->data, t->shape[0], t->shape[1], dt};
        ts_pool_run(c->pool, repack_part, &j);
        dt = dt == TS_DTYPE_Q8_0 ? TS_DTYPE_Q8_0X16 : TS_DTYPE_Q4_0X16;
    } else {
        copy_job j = {w, t->data, t->nbytes};
        ts_pool_run(c->pool, copy_part, &j);
    }
    if (c->release_source && !t->heap) release_pages(t->data, t->nbytes);
    c->converted += t->nbytes;
    return (cpu_mat){w, dt};
}

static const uint16_t *mat_bf16(ts_cpu *c, const ts_tensor *t) {
    int64_t N = t->shape[0], K = t->shape[1], Kp = ts_gemm_kpad((int)K);
    if (Kp != K) { /* even a BF16 tensor: the kernels need the padded row stride */
        uint16_t *w = own_mat(c, (size_t)(N * Kp) * sizeof *w);
        if (!w) return NULL;
        pad_job j = {w, t, N, K, Kp};
        ts_pool_run(c->pool, pad_part, &j);
        if (t->dtype == TS_DTYPE_BF16 && c->release_source && !t->heap) release_pages(t->data, t->nbytes);
        c->converted += (size_t)(N * Kp) * sizeof *w;
        return w;
    }
    if (t->dtype == TS_DTYPE_BF16 && !(c->disable & TS_OPT_ZERO_COPY)) return t->data; /* zero-copy */
    uint16_t *w = own_mat(c, (size_t)t->numel * sizeof *w);
    if (!w) return NULL;
    if (t->dtype == TS_DTYPE_BF16) { /* the copying baseline phase 4 measures against */
        copy_job j = {w, t->data, (size_t)t->numel * sizeof *w};
        ts_pool_run(c->pool, copy_part, &j);
        if (c->release_source && !t->heap) release_pages(t->data, j.n);
        c->converted += (size_t)t->numel * sizeof *w;
        return w;
    }
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
        if (!L->wq.w || !L->wk.w || !L->wv.w || !L->wo.w || !L->wg.w || !L->wu.w || !L->wd.w || !L->attn_norm ||
            !L->ffn_norm || (w->q_norm && !L->q_norm) || (w->k_norm && !L->k_norm) ||
            (w->bq && !L->bq) || (w->bk && !L->bk) || (w->bv && !L->bv) || (w->bo && !L->bo) ||
            (w->b_gate && !L->bg) || (w->b_up && !L->bu) || (w->b_down && !L->bd))
            return -1;
    }
    c->embed = mat(c, m->embed);
    c->lm_head = m->lm_head == m->embed ? c->embed : mat(c, m->lm_head);
    c->final_norm = vec(c, m->final_norm);
    return c->embed.w && c->lm_head.w && c->final_norm ? 0 : -1;
}

/* ---- session ---- */

/* The arena's floats (carved in ts_cpu_new below); ts_cpu_mem_need uses the same sum. */
static size_t arena_floats(const ts_config *cf, int chunk, int nth, int max_seq) {
    size_t H = (size_t)cf->n_embd, hd = (size_t)cf->head_dim, Q = (size_t)cf->n_heads * hd,
           KV = (size_t)cf->n_kv_heads * hd, F = (size_t)cf->n_ff, CH = (size_t)chunk, NT = Q + 2 * KV,
           rt = ts_cpu_rowtmp_floats(cf), Hp = (size_t)ts_gemm_kpad((int)H), Qp = (size_t)ts_gemm_kpad((int)Q),
           Fp = (size_t)ts_gemm_kpad((int)F);
    /* x, o (H); xn_p (Hp); qkv; att (Q), att_p (Qp); g, u (F), h_p (Fp); scores; rowtmp; rope */
    return CH * H * 2 + CH * Hp + CH * NT + CH * Q + CH * Qp + CH * F * 2 + CH * Fp +
           (size_t)nth * TS_ATTN_TILE * ((size_t)max_seq + 16) + (size_t)nth * rt + CH * hd;
}

/* What own() takes for a copy of `bytes` (huge-page copies are rounded up to whole pages). */
static uint64_t owned_bytes(size_t bytes) {
    return bytes >= HUGE_PAGE ? (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE : bytes;
}
/* Bytes of the copy mat() makes of t (0: read in place), rounded as own_mat carves them. */
static uint64_t mat_bytes(const ts_tensor *t, unsigned disable) {
    if (!t) return 0;
    if (quant_in_place(t)) return disable & TS_OPT_ZERO_COPY ? slab_round(t->nbytes) : 0;
    int64_t Kp = ts_gemm_kpad((int)t->shape[1]);
    if (Kp != t->shape[1]) return slab_round((size_t)(t->shape[0] * Kp) * sizeof(uint16_t)); /* padded copy */
    if (t->dtype == TS_DTYPE_BF16 && !(disable & TS_OPT_ZERO_COPY)) return 0;
    return slab_round((size_t)t->numel * sizeof(uint16_t));
}

/* The matrices bind_weights binds (ts_model_matrices' order, which is also its own); NULL when
 * out of memory. */
static const ts_tensor **model_mats(const ts_model *m, int *n) {
    const ts_tensor **mats = malloc(sizeof *mats * (size_t)(7 * ts_model_config(m)->n_layers + 2));
    *n = mats ? ts_model_matrices(m, mats) : 0;
    return mats;
}

/* The slab: every matrix copy bind_weights makes (the same tensors, the same rule). */
static uint64_t slab_bytes(const ts_model *m, unsigned disable) {
    int n;
    const ts_tensor **mats = model_mats(m, &n);
    uint64_t b = 0;
    for (int i = 0; i < n; i++) b += mat_bytes(mats[i], disable);
    free(mats);
    return b;
}
static uint64_t vec_bytes(const ts_tensor *t) { return t ? owned_bytes((size_t)t->numel * sizeof(float)) : 0; }

void ts_cpu_mem_need(const ts_model *m, int max_seq, const ts_cpu_opts *o, ts_mem_need *out) {
    const ts_config *cf = ts_model_config(m);
    unsigned disable = o ? o->disable & TS_OPT_ALL : 0;
    int chunk = max_seq < CPU_CHUNK ? max_seq : CPU_CHUNK;
    memset(out, 0, sizeof *out);
    out->weights_mapped = ts_store_file_bytes(&m->store);
    /* the same tensors bind_weights takes */
    out->weights_owned = owned_bytes(slab_bytes(m, disable));
    for (int l = 0; l < cf->n_layers; l++) {
        const ts_layer_w *w = &m->layers[l];
        const ts_tensor *vecs[] = {w->attn_norm, w->ffn_norm, w->q_norm, w->k_norm, w->bq, w->bk,
                                   w->bv, w->bo, w->b_gate, w->b_up, w->b_down};
        for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++) out->weights_owned += vec_bytes(vecs[i]);
    }
    out->weights_owned += vec_bytes(m->final_norm);
    out->kv = 2 * (uint64_t)ts_cpu_kv_floats(cf, max_seq) * ts_kv_cache_elem_bytes(m->kv_type);
    int nth = ts_pool_resolve_threads(o ? o->n_threads : 0);
    out->scratch = ((uint64_t)arena_floats(cf, chunk, nth, max_seq) + (uint64_t)cf->head_dim / 2 +
                    ((disable & TS_OPT_LAST_LOGITS) ? (uint64_t)chunk * (uint64_t)cf->n_vocab : 0)) *
                   sizeof(float);
}

void ts_cpu_weight_copies(const ts_model *m, int *n_converted, int *n_padded, uint64_t *padded_bytes) {
    int n;
    const ts_tensor **mats = model_mats(m, &n);
    *n_converted = *n_padded = 0;
    *padded_bytes = 0;
    for (int i = 0; i < n; i++) {
        const ts_tensor *t = mats[i];
        if (!t || quant_in_place(t)) continue; /* read in place by the quantized kernels */
        if (t->dtype != TS_DTYPE_BF16) (*n_converted)++;
        else if (ts_gemm_kpad((int)t->shape[1]) != t->shape[1]) {
            (*n_padded)++;
            *padded_bytes += (uint64_t)t->shape[0] * (uint64_t)ts_gemm_kpad((int)t->shape[1]) * sizeof(uint16_t);
        }
    }
    free(mats);
}

int ts_cpu_weight_quantized(const ts_model *m, uint64_t *bytes) {
    int n, q = 0;
    const ts_tensor **mats = model_mats(m, &n);
    *bytes = 0;
    for (int i = 0; i < n; i++)
        if (mats[i] && quant_in_place(mats[i])) q++, *bytes += mats[i]->nbytes;
    free(mats);
    return q;
}

int ts_cpu_default_copy(const ts_model *m) {
    int n, copy = 0;
    const ts_tensor **mats = model_mats(m, &n);
    for (int i = 0; i < n && !copy; i++) copy = mats[i] && quant_in_place(mats[i]) && !mats[i]->heap;
    free(mats);
    return copy;
}

ts_status ts_cpu_new(const ts_model *m, int max_seq, const ts_cpu_opts *o, ts_cpu **out,
                     ts_error *err) {
    *out = NULL;
    const ts_config *cf = ts_model_config(m);
    int H = cf->n_embd, hd = cf->head_dim, Q = cf->n_heads * hd, KV = cf->n_kv_heads * hd, F = cf->n_ff;
    if (max_seq < 1 || max_seq > (1 << 24))
        return ts_fail(err, TS_ERR_ARG, "cpu session: max_seq %d outside [1, 2^24]", max_seq);
    ts_cpu_variant v = ts_cpu_best_variant();
    if (o && o->force_variant >= 0) {
        if (!ts_cpu_variant_supported((ts_cpu_variant)o->force_variant))
            return ts_fail(err, TS_ERR_UNSUPPORTED, "cpu variant %s is not supported by this CPU",
                           ts_cpu_variant_name((ts_cpu_variant)o->force_variant));
        v = (ts_cpu_variant)o->force_variant;
    }
    int nth = ts_pool_resolve_threads(o ? o->n_threads : 0);
    ts_cpu *c = calloc(1, sizeof *c);
    if (!c) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    c->m = m;
    c->c = cf;
    c->variant = v;
    c->gemm = ts_cpu_gemm_for(v);
    c->gemm_q = ts_cpu_gemm_q_for(v);
    c->gemv_batch = ts_cpu_gemv_batch_for(v);
    c->gemv_batch_q = ts_cpu_gemv_batch_q_for(v);
    c->attn_row = v >= TS_CPU_AVX2 ? ts_cpu_attn_row_avx2 : ts_cpu_attn_row_scalar;
    c->kv_f16 = m->kv_type == TS_DTYPE_F16;
    c->kv_esize = ts_kv_cache_elem_bytes(m->kv_type);
    c->max_seq = max_seq;
    c->Hp = ts_gemm_kpad(H), c->Qp = ts_gemm_kpad(Q), c->Fp = ts_gemm_kpad(F);
    c->chunk = max_seq < CPU_CHUNK ? max_seq : CPU_CHUNK;
    c->nth = nth;
    c->disable = o ? o->disable & TS_OPT_ALL : 0;
    c->release_source = o && o->release_source && (c->disable & TS_OPT_ZERO_COPY);
    if (o && o->fault) c->has_fault = 1, c->fault = *o->fault;
    ts_status s = ts_pool_new(nth, &c->pool, err);
    if (s) {
        ts_cpu_free(c);
        return s;
    }
    c->L = calloc((size_t)cf->n_layers, sizeof *c->L);
    c->owned = calloc((size_t)cf->n_layers * 20 + 8, sizeof *c->owned);
    size_t kv = ts_cpu_kv_floats(cf, max_seq) * c->kv_esize;
    c->self = (ts_cpu_seq){c, ts_cpu_kv_alloc(kv), ts_cpu_kv_alloc(kv), max_seq, 0, 0, 0, ts_cpu_kv_huge(kv)};
    c->kv = &c->self;
    c->sc_len = max_seq;
    c->inv_freq = malloc(sizeof(float) * (size_t)(hd / 2));
    size_t CH = (size_t)c->chunk, NT = (size_t)Q + 2 * (size_t)KV, rt = ts_cpu_rowtmp_floats(cf);
    size_t arena = arena_floats(cf, c->chunk, nth, max_seq);
    c->arena = malloc(arena * sizeof(float));
    if (c->disable & TS_OPT_LAST_LOGITS) c->lg_all = malloc(CH * (size_t)cf->n_vocab * sizeof(float));
    if (!c->L || !c->owned || !c->self.k_cache || !c->self.v_cache || !c->inv_freq || !c->arena ||
        ((c->disable & TS_OPT_LAST_LOGITS) && !c->lg_all)) {
        ts_cpu_free(c);
        return ts_fail(err, TS_ERR_NOMEM, "cpu session: cannot allocate %zu MiB of KV cache and arena",
                       (2 * kv + arena * sizeof(float)) >> 20);
    }
    ts_cpu_kv_fault_first(&c->self);
    float *p = c->arena;
    c->x = p, p += CH * H;
    c->xn_p = p, p += CH * (size_t)c->Hp;
    c->o = p, p += CH * H;
    c->qkv = p, p += CH * NT;
    c->att = p, p += CH * Q;
    c->att_p = p, p += CH * (size_t)c->Qp;
    c->g = p, p += CH * F;
    c->u = p, p += CH * F;
    c->h_p = p, p += CH * (size_t)c->Fp;
    c->scores = p, p += (size_t)nth * TS_ATTN_TILE * (max_seq + 16); /* rows rounded up to 16 */
    c->rowtmp = p, p += (size_t)nth * rt;
    c->rope_cs = p;
    size_t slab = slab_bytes(m, c->disable);
    if (slab && !(c->slab = own(c, slab))) {
        ts_cpu_free(c);
        return ts_fail(err, TS_ERR_NOMEM, "cpu session: cannot allocate %zu MiB for the weight copies", slab >> 20);
    }
    c->slab_size = slab;
    if (bind_weights(c) != 0) {
        ts_cpu_free(c);
        return ts_fail(err, TS_ERR_NOMEM, "cpu session: out of memory copying or converting weights");
    }
    {
        /* The oracle's frequency table: one definition of llama3 scaling for both targets. */
        ts_ref_rope_freqs(c->inv_freq, cf);
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
    free(c->self.k_cache);
    free(c->self.v_cache);
    free(c->sc_heap);
    free(c->inv_freq);
    free(c->arena);
    free(c->lg_all);
    free(c->step_clock);
    free(c);
}

void ts_cpu_reset(ts_cpu *c) { c->self.n_past = 0; }
void ts_cpu_truncate(ts_cpu *c, int n) { ts_cpu_seq_truncate(&c->self, n); }
ts_cpu_seq *ts_cpu_own_seq(ts_cpu *c) { return &c->self; }
int ts_cpu_dispatches_per_layer(const ts_cpu *c) {
    if (!(c->disable & TS_OPT_FUSED)) return 3;
    return TS_N_STEPS - (c->c->qk_norm ? 0 : 1);
}
int ts_cpu_n_past(const ts_cpu *c) { return c->self.n_past; }
ts_cpu_variant ts_cpu_variant_of(const ts_cpu *c) { return c->variant; }
int ts_cpu_threads(const ts_cpu *c) { return c->nth; }
long ts_cpu_dispatches(const ts_cpu *c) { return ts_pool_regions(c->pool); }
size_t ts_cpu_converted_bytes(const ts_cpu *c) { return c->converted; }
ts_pool *ts_cpu_pool(ts_cpu *c) { return c->pool; }

/* Sets the rows of the next dispatches and their RoPE cos/sin, once per chunk rather than
 * once per layer (every layer rotates the same positions). The angle is rounded to float
 * before cos/sin, as the oracle and transformers do. */
void ts_cpu_set_rows(ts_cpu *c, int S, int pos0) {
    int half = c->c->head_dim / 2;
    c->S = S;
    c->pos0 = pos0;
    for (int s = 0; s < S; s++) {
        float *cs = c->rope_cs + (size_t)s * 2 * half;
        int pos = c->batch ? c->row_pos[s] : pos0 + s; /* a batched decode row: its own position */
        for (int i = 0; i < half; i++) {
            float ang = (float)pos * c->inv_freq[i];
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
    ts_cpu_set_rows(c, S, pos0);
    c->layer = l;
    int pinned = ts_pool_enter(c->pool);
    ts_cpu_run_layer(c);
    ts_pool_leave(c->pool, pinned);
    memcpy(x, c->x, bytes);
    return TS_OK;
}

void ts_cpu_embed_row(const ts_cpu *c, int32_t token, float *x) {
    /* a BF16 embedding's rows are Hp apart (a padded copy when H % 16 != 0), a quantized one's H */
    int H = c->c->n_embd;
    if (ts_dtype_is_t16(c->embed.dt)) {
        ts_t16_row_to_f32(c->embed.dt, c->embed.w, H, token, x);
        return;
    }
    if (ts_dtype_is_x16(c->embed.dt)) {
        ts_x16_row_to_f32(c->embed.dt, (const uint8_t *)c->embed.w + (size_t)token * ts_gemm_row_bytes(c->embed.dt, H), H, x);
        return;
    }
    size_t row = c->embed.dt == TS_DTYPE_BF16 ? (size_t)c->Hp : (size_t)H;
    ts_dtype_to_f32(c->embed.dt, c->embed.w, (size_t)token * row, (size_t)H, x);
}

/* The forward on KV cache kv (the session's own or a sequence's). */
ts_status ts_cpu_forward_kv(ts_cpu *c, ts_cpu_seq *kv, const int32_t *tokens, int n, float *logits, int all_logits,
                            float *hidden, ts_error *err) {
    const ts_config *cf = c->c;
    ts_status st = ts_model_check_tokens(cf, tokens, n, kv->n_past, kv->cap, "cpu", err);
    if (st) return st;
    int H = cf->n_embd, L = cf->n_layers;
    c->kv = kv;
    int pinned = ts_pool_enter(c->pool); /* the caller on the pool's first CPU for the pass */
    for (int c0 = 0, S; c0 < n; c0 += S) {
        S = n - c0 < c->chunk ? n - c0 : c->chunk;
        /* Never a last chunk of one row: one row runs the decode arithmetic (GEMV, attention
         * row), so that position's KV would differ from a prefill split elsewhere, and the
         * prefix cache (src/serve/sched.c) relies on prefill being split-invariant. */
        if (n - c0 - S == 1 && S >= 3) S--;
        ts_cpu_set_rows(c, S, kv->n_past + c0);
        ts_cpu_kv_prefault(kv, kv->n_past + c0 + S - 1);
        for (int s = 0; s < S; s++) ts_cpu_embed_row(c, tokens[c0 + s], c->x + (size_t)s * H);
        if (hidden) memcpy(hidden + (size_t)c0 * H, c->x, sizeof(float) * (size_t)S * H);
        for (int l = 0; l < L; l++) {
            c->layer = l;
            ts_cpu_run_layer(c);
            if (hidden) memcpy(hidden + ((size_t)(l + 1) * n + c0) * H, c->x, sizeof(float) * (size_t)S * H);
        }
        if (logits && (all_logits || c0 + S == n)) {
            /* Without the last-token optimization every row of the chunk goes through the
             * LM head, as a naive port would do, and the caller gets the rows it asked for. */
            int every = all_logits || (c->disable & TS_OPT_LAST_LOGITS);
            c->lg_row0 = every ? 0 : S - 1;
            c->lg_rows = every ? S : 1;
            c->lg_out = all_logits ? logits + (size_t)c0 * cf->n_vocab : (every ? c->lg_all : logits);
            ts_cpu_dispatch(c, ts_cpu_lm_head, CPU_PROF_LM_HEAD);
            if (!all_logits && every)
                memcpy(logits, c->lg_all + (size_t)(S - 1) * cf->n_vocab, sizeof(float) * (size_t)cf->n_vocab);
        }
    }
    ts_pool_leave(c->pool, pinned);
    kv->n_past += n;
    c->kv = &c->self;
    return TS_OK;
}

ts_status ts_cpu_forward(ts_cpu *c, const int32_t *tokens, int n, float *logits, int all_logits,
                         float *hidden, ts_error *err) {
    return ts_cpu_forward_kv(c, &c->self, tokens, n, logits, all_logits, hidden, err);
}

/* ---- one step alone (diagnosis) ---- */

/* Packed rows are ts_gemm_kpad(n) apart, natural ones n. */
static void unpack_rows(float *dst, const float *packed, int S, int n) {
    for (int s = 0; s < S; s++) ts_cpu_unpack_row(dst + (size_t)s * n, packed + (size_t)s * ts_gemm_kpad(n), n);
}
static void pack_rows(float *packed, const float *src, int S, int n) {
    for (int s = 0; s < S; s++) ts_cpu_pack_row(packed + (size_t)s * ts_gemm_kpad(n), src + (size_t)s * n, n);
}

/* Moves q, k, v between the step state (three arrays) and the session's interleaved rows. */
static void qkv_io(ts_cpu *c, ts_step_state *st, int S, int to_session) {
    int Q = c->c->n_heads * c->c->head_dim, KV = c->c->n_kv_heads * c->c->head_dim, NT = Q + 2 * KV;
    for (int s = 0; s < S; s++) {
        float *row = c->qkv + (size_t)s * NT;
        float *parts[3] = {st->q + (size_t)s * Q, st->k + (size_t)s * KV, st->v + (size_t)s * KV};
        int off[3] = {0, Q, Q + KV}, n[3] = {Q, KV, KV};
        for (int p = 0; p < 3; p++) {
            if (to_session) memcpy(row + off[p], parts[p], sizeof(float) * (size_t)n[p]);
            else memcpy(parts[p], row + off[p], sizeof(float) * (size_t)n[p]);
        }
    }
}

ts_status ts_cpu_step(ts_cpu *c, int l, ts_step step, ts_step_state *st, int S, int pos0, ts_error *err) {
    const ts_config *cf = c->c;
    int H = cf->n_embd, Q = cf->n_heads * cf->head_dim, KV = cf->n_kv_heads * cf->head_dim, F = cf->n_ff;
    if (l < 0 || l >= cf->n_layers || (int)step < 0 || step >= TS_N_STEPS || S < 1 || S > c->chunk || pos0 < 0 ||
        pos0 + S > c->max_seq)
        return ts_fail(err, TS_ERR_ARG, "cpu step %d of layer %d: %d tokens at position %d do not fit (chunk %d)",
                       (int)step, l, S, pos0, c->chunk);
    size_t xb = sizeof(float) * (size_t)S * H;
    ts_cpu_set_rows(c, S, pos0);
    c->layer = l;
    switch (step) { /* inputs */
    case TS_STEP_ATTN_NORM:
    case TS_STEP_FFN_NORM: memcpy(c->x, st->x, xb); break;
    case TS_STEP_QKV:
    case TS_STEP_GATE_UP: pack_rows(c->xn_p, st->xn, S, H); break;
    case TS_STEP_QK_NORM:
    case TS_STEP_ROPE: qkv_io(c, st, S, 1); break;
    case TS_STEP_ATTENTION: {
        qkv_io(c, st, S, 1);
        ts_cpu_kv_store(cf, &c->self, l, pos0, S, st->k, KV, st->v, KV);
        break;
    }
    case TS_STEP_O_PROJ:
        memcpy(c->att, st->att, sizeof(float) * (size_t)S * Q);
        memcpy(c->x, st->x, xb);
        break;
    case TS_STEP_DOWN:
        pack_rows(c->h_p, st->h, S, F);
        memcpy(c->x, st->x, xb);
        break;
    default: break;
    }
    ts_cpu_run_stage(c, step);
    switch (step) { /* outputs */
    case TS_STEP_ATTN_NORM:
    case TS_STEP_FFN_NORM: unpack_rows(st->xn, c->xn_p, S, H); break;
    case TS_STEP_QKV:
    case TS_STEP_QK_NORM:
    case TS_STEP_ROPE: qkv_io(c, st, S, 0); break;
    case TS_STEP_ATTENTION: memcpy(st->att, c->att, sizeof(float) * (size_t)S * Q); break;
    case TS_STEP_GATE_UP: unpack_rows(st->h, c->h_p, S, F); break;
    case TS_STEP_O_PROJ:
    case TS_STEP_DOWN: memcpy(st->x, c->x, xb); break;
    default: break;
    }
    return TS_OK;
}

/* ---- profile ---- */

int ts_cpu_profile(const ts_cpu *c, ts_cpu_prof *out, int max) {
    static const char *const groups[4] = {"D1 attn_norm..rope", "D2 attention", "D3 o_proj..down", "lm_head"};
    int n = 0;
    for (int i = 0; i < CPU_N_PROF && n < max; i++) {
        if (!c->prof_calls[i]) continue;
        out[n++] = (ts_cpu_prof){i < CPU_PROF_STEP0 ? groups[i] : ts_step_name((ts_step)(i - CPU_PROF_STEP0)),
                                 c->prof_calls[i], c->prof_ms[i]};
    }
    return n;
}

void ts_cpu_profile_reset(ts_cpu *c) {
    memset(c->prof_ms, 0, sizeof c->prof_ms);
    memset(c->prof_calls, 0, sizeof c->prof_calls);
}
