/* Internals of the cpu target shared by its files (forward pass, autotuner). */
#ifndef TS_TARGET_CPU_INTERNAL_H
#define TS_TARGET_CPU_INTERNAL_H
#include "target/cpu/attn.h"
#include "target/cpu/cpu_target.h"
#include "target/cpu/gemm.h"
#include "core/pool.h"

#define CPU_CHUNK TS_CPU_PREFILL_CHUNK /* tokens per prefill chunk: bounds the arena */
#define CPU_MAX_TILES 64
#define CPU_N_PROF (4 + TS_N_STEPS)

/* One autotuned choice: GEMM tile for (S bucket, N, K). */
typedef struct ts_tile_entry {
    int bucket; /* 1: decode (S = 1), 2: S < 16, 3: prefill */
    int n, k;
    ts_gemm_tile tile;
    double gflops;
} ts_tile_entry;

/* A weight matrix (N, K) as the kernels read it: BF16 with rows ts_gemm_kpad(K) apart (borrowed
 * from the mmap when stored as BF16 with K a multiple of 16, otherwise a zero-padded or
 * converted copy), or Q8_0 / Q4_0 blocks as stored (K % 32 == 0), borrowed from the mmap. */
typedef struct cpu_mat {
    const void *w;
    ts_dtype dt; /* TS_DTYPE_BF16, TS_DTYPE_Q8_0, TS_DTYPE_Q4_0 or (copies, gemm.h) TS_DTYPE_Q8_0X16 / _Q4_0X16 /
                  * TS_DTYPE_Q8_0T16 / _Q4_0T16 (tile order: rows not contiguous) */
} cpu_mat;

/* A KV cache: FP32 or F16 (the model's kv_type, --kv-cache), (layer, block of R positions, kv head, position, head_dim) with R =
 * TS_KV_BLOCK, or the whole capacity when it is smaller (ts_cpu_kv_off; cap rounded up to whole
 * blocks). Decode attention reads one kv head's rows for a group of q heads: here up to 512 of
 * them are one contiguous run (256 KiB at head_dim 128), where position-major rows put them a
 * whole cache row apart (4 KiB on the seed shapes), each on its own page, in one L1 set and past
 * the hardware prefetchers. Blocks rather than one run per head so that the cache grows in
 * position order (docs/cpu-target.md, "KV cache").
 * The session's own cache is one (ts_cpu.self); ts_cpu_seq_new makes more (batch.c). The
 * forward runs on whichever ts_cpu.kv points at, so a sequence and the session share one code
 * path. */
struct ts_cpu_seq {
    ts_cpu *c; /* the session it belongs to */
    void *k_cache, *v_cache; /* elements of ts_cpu.kv_esize bytes (ts_cpu_kv_alloc) */
    int cap, n_past;
    int pf_block, pf_done; /* ts_cpu_kv_prefault: the block being faulted ahead, its pages done */
    int huge;              /* the caches advised into 2 MiB pages (ts_cpu_kv_huge) */
};

/* The KV caches' memory: 2 MiB-aligned and advised MADV_HUGEPAGE when 2 MiB or more
 * (ts_cpu_kv_huge; else malloc); freed with free(). So that no step meets a block's worth of
 * page faults at once (cpu_forward.c): ts_cpu_kv_fault_first faults in block 0 of a new cache,
 * and ts_cpu_kv_prefault(kv, pos), before a step writes position pos (a decode step, or the
 * last row of a prefill chunk), a few pages a step of the next block over the second half of
 * pos's block. Both do nothing on caches in 4 KiB pages. */
int ts_cpu_kv_huge(size_t bytes);
void *ts_cpu_kv_alloc(size_t bytes);
void ts_cpu_kv_fault_first(ts_cpu_seq *kv);
void ts_cpu_kv_prefault(ts_cpu_seq *kv, int pos);

/* Most sequences one decode step takes together (ts_cpu_decode_batch; also at most the
 * session's prefill chunk, whose arena rows hold the batch). */
#define CPU_BATCH_MAX TS_CPU_BATCH_MAX

/* Positions per block of a cache of cap positions, and the positions it holds room for. */
static inline size_t ts_cpu_kv_rows(int cap) { return cap < TS_KV_BLOCK ? (size_t)cap : TS_KV_BLOCK; }
static inline size_t ts_cpu_kv_cap(int cap) { return ((size_t)cap + ts_cpu_kv_rows(cap) - 1) / ts_cpu_kv_rows(cap) * ts_cpu_kv_rows(cap); }
/* Elements of K (and of V) in a cache of cap positions. */
static inline size_t ts_cpu_kv_floats(const ts_config *cf, int cap) {
    return (size_t)cf->n_layers * ts_cpu_kv_cap(cap) * (size_t)cf->n_kv_heads * (size_t)cf->head_dim;
}
/* Element off of a cache whose elements are esize bytes. */
static inline void *ts_cpu_kv_at(void *cache, size_t off, size_t esize) { return (char *)cache + off * esize; }
/* Offset in elements of head g's row at position pos of layer l, in a cache of cap positions. A
 * head's rows are then where the attention kernels look for them (ts_kv_idx, attn.h) with
 * stride ts_cpu_kv_block: a cache smaller than one block never reaches a second one. */
static inline size_t ts_cpu_kv_off(const ts_config *cf, int cap, int l, int g, int pos) {
    size_t KV = (size_t)cf->n_kv_heads * (size_t)cf->head_dim, R = ts_cpu_kv_rows(cap);
    return ((size_t)l * ts_cpu_kv_cap(cap) + (size_t)pos / R * R) * KV + ((size_t)g * R + (size_t)pos % R) * (size_t)cf->head_dim;
}
/* Floats of a thread's row scratch: a natural row (norm output) then its own packed copy of a
 * decode row (Hp or Qp floats), then 16 unused floats: the arena is not 64-byte aligned, and
 * that gap keeps two threads' copies off one cache line. */
static inline size_t ts_cpu_rowtmp_natural(const ts_config *cf) { /* where the packed copy starts */
    size_t H = (size_t)cf->n_embd, hd = (size_t)cf->head_dim, n = H > hd ? H : hd;
    return (n + 15) / 16 * 16;
}
static inline size_t ts_cpu_rowtmp_floats(const ts_config *cf) {
    size_t Hp = (size_t)ts_gemm_kpad(cf->n_embd), Qp = (size_t)ts_gemm_kpad(cf->n_heads * cf->head_dim);
    return ts_cpu_rowtmp_natural(cf) + (Hp > Qp ? Hp : Qp) + 16;
}
static inline int ts_cpu_kv_block(const ts_config *cf) { return TS_KV_BLOCK * cf->n_kv_heads * cf->head_dim; }
/* Stores rows [pos, pos + S) of k and v (S rows of kv_heads x head_dim each) at layer l. */
void ts_cpu_kv_store(const ts_config *cf, const ts_cpu_seq *kv, int l, int pos, int S, const float *k, int ldk,
                     const float *v, int ldv);

typedef struct cpu_step_clock {
    double work[TS_N_STEPS], wait[TS_N_STEPS];
    char pad[64];
} cpu_step_clock;

typedef struct cpu_layer {
    cpu_mat wq, wk, wv, wo, wg, wu, wd;
    const float *attn_norm, *ffn_norm, *q_norm, *k_norm, *bq, *bk, *bv, *bo, *bg, *bu, *bd;
} cpu_layer;

struct ts_cpu {
    const ts_model *m;
    const ts_config *c;
    ts_pool *pool;
    ts_cpu_variant variant;
    ts_gemm_fn gemm;
    ts_gemm_q_fn gemm_q; /* for Q8_0 / Q4_0 matrices */
    /* B rows each computed exactly as the S = 1 decode GEMV above computes one (bit for bit),
     * W read once for all of them (ts_cpu_decode_batch) */
    ts_gemm_fn gemv_batch;
    ts_gemm_q_fn gemv_batch_q;
    ts_attn_row_fn attn_row;
    int kv_f16;     /* the KV cache holds F16 (m->kv_type): the attention kernels' f16 argument */
    size_t kv_esize; /* bytes per cached element */
    int max_seq, chunk, nth;
    ts_cpu_seq self; /* the session's own KV cache (ts_cpu_forward) */
    ts_cpu_seq *kv;  /* the cache the next dispatches read and write: &self or a sequence */
    /* Batched decode (ts_cpu_decode_batch): batch = B > 0 rows, row b one decode step of
     * row_kv[b] at position row_pos[b]; 0: the rows are positions pos0.. of kv. */
    int batch;
    ts_cpu_seq *row_kv[CPU_BATCH_MAX];
    int row_pos[CPU_BATCH_MAX];
    /* Row strides of the packed activations feeding a GEMM and of the weights it reads, for
     * K = hidden, heads x head_dim, intermediate: ts_gemm_kpad of each (gemm.h). */
    int Hp, Qp, Fp;
    cpu_layer *L;
    cpu_mat embed, lm_head; /* (n_vocab, Hp) */
    const float *final_norm;
    void **owned;
    int n_owned;
    char *slab; /* the matrix copies, carved in load order (own_mat in cpu_forward.c) */
    size_t slab_size, slab_used;
    size_t converted;
    float *inv_freq;
    int sc_len;         /* positions one attention score row holds: the largest cache capacity */
    float *sc_heap;     /* scores moved off the arena for a sequence larger than max_seq */
    float *arena;
    float *x, *xn_p, *qkv, *att, *att_p, *o, *g, *u, *h_p, *scores, *rowtmp;
    /* A single decode row in a fused plan: each thread norms (or packs) the whole row into its
     * own packed copy (own_row in cpu_steps.c) and its GEMV reads that, so no barrier waits on
     * one thread doing the row while the others idle. (The LM head does the same whenever it
     * runs one row, fused or not.) */
    int own_rows;
    float *rope_cs; /* (chunk, head_dim): cos then sin for each row's position */
    /* per-call state read by the dispatch functions */
    int S, pos0, layer, lg_row0, lg_rows;
    ts_tile_entry tiles[CPU_MAX_TILES];
    int n_tiles;
    float *lg_out;
    float *lg_all;      /* (chunk, n_vocab) when the last-token LM head is switched off */
    unsigned disable;   /* TS_OPT_* turned off */
    int release_source; /* ts_cpu_opts.release_source */
    int has_fault;
    ts_cpu_fault fault;
    int st_first, st_last; /* stages of the region being run (cpu_steps.c) */
    double prof_ms[CPU_N_PROF];
    long prof_calls[CPU_N_PROF];
    /* ts_cpu_step_timing: per thread (a cache line apart) the seconds each stage ran and then
     * waited at the barrier after it, in fused and unfused plans alike; NULL while off */
    cpu_step_clock *step_clock;
};

/* Profile slots: the three fused groups, the LM head, then one per step (unfused plans). */
enum { CPU_PROF_D1, CPU_PROF_D2, CPU_PROF_D3, CPU_PROF_LM_HEAD, CPU_PROF_STEP0 };

/* cpu_steps.c: the step list as stages; a fused plan runs a group of stages in one region
 * separated by barriers, an unfused plan runs each stage as its own region. */
void ts_cpu_run_layer(ts_cpu *c);
void ts_cpu_run_stage(ts_cpu *c, ts_step step);
/* Runs fn as one timed parallel region into profile slot `slot`. */
void ts_cpu_dispatch(ts_cpu *c, ts_pool_fn fn, int slot);
void ts_cpu_lm_head(void *ctx, int ith, int nth);
/* Contiguous share [a, b) of n items for thread ith, boundaries on multiples of align. */
void ts_cpu_split(int n, int ith, int nth, int align, int *a, int *b);

int ts_cpu_s_bucket(int S);
/* y[s * ldy + n] = x @ W^T for n in [n0, n1) by the kernel for W's type (gemm.h); K: the row
 * stride of xp's rows and of BF16 W (a padded K). */
/* In a batched decode the S rows are S independent decode rows (the batch GEMVs). */
static inline void ts_cpu_gemm_mat(const ts_cpu *c, cpu_mat W, float *y, int ldy, const float *xp, int ldx, int K,
                                   int S, int n0, int n1, ts_gemm_tile t) {
    if (W.dt == TS_DTYPE_BF16) (c->batch ? c->gemv_batch : c->gemm)(y, ldy, xp, ldx, W.w, K, S, n0, n1, t);
    else (c->batch ? c->gemv_batch_q : c->gemm_q)(y, ldy, xp, ldx, W.w, W.dt, K, S, n0, n1, t);
}
ts_gemm_tile ts_cpu_tile_for(const ts_cpu *c, int S, int N, int K);
/* cpu_forward.c: the rows of the next dispatches (S; positions pos0.., or each batch row's)
 * and their RoPE cos/sin; one token's embedding row into x (n_embd); the forward pass on one
 * KV cache (ts_cpu_forward's contract), leaving c->kv at the session's own afterwards. */
void ts_cpu_set_rows(ts_cpu *c, int S, int pos0);
void ts_cpu_embed_row(const ts_cpu *c, int32_t token, float *x);
ts_status ts_cpu_forward_kv(ts_cpu *c, ts_cpu_seq *kv, const int32_t *tokens, int n, float *logits, int all_logits,
                            float *hidden, ts_error *err);

#endif
