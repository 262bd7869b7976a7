/* The cpu target: DESIGN.md's step list grouped into three dispatches per layer
 * ([attn_norm..rope + KV store] [attention] [o_proj..down + residual]), each one parallel
 * region of the thread pool, BF16 weights used in place from the mmap, FP32 activations,
 * accumulation and KV cache. */
#ifndef TS_TARGET_CPU_TARGET_H
#define TS_TARGET_CPU_TARGET_H
#include <stdio.h>

#include "model/memory.h"
#include "model/model.h"
#include "plan/steps.h"
#include "target/cpu/cpu_features.h"

typedef struct ts_cpu ts_cpu;

/* A deliberate kernel fault for testing diagnosis and the gates (`tessera deploy
 * --inject-fault`): the step's output is corrupted after its kernel runs, in every layer or in
 * one. */
typedef struct ts_cpu_fault {
    ts_step step;
    int nan;   /* 1: one NaN in the first row; 0: one element in 16 has its sign flipped */
    int layer; /* -1: every layer */
    int last;  /* 1 (with nan 0): only the step's last output column, in every row */
} ts_cpu_fault;

/* "STEP[:nan|:last][@LAYER]" -> fault; TS_ERR_ARG with the list of step names when malformed. */
ts_status ts_cpu_fault_parse(const char *spec, ts_cpu_fault *f, ts_error *err);
/* The fault as the session applies it to step `step` of layer `layer` (nothing when f is NULL or
 * names another step or layer), on y (S, ldy) columns [col0, col0 + n) of the step's `width`
 * output columns: phase 1 checks a step's GEMMs alone through ts_cpu_matmul, and this gives
 * them the same fault the step carries in a session. */
void ts_cpu_fault_apply(const ts_cpu_fault *f, ts_step step, int layer, float *y, int S, int ldy, int col0, int n,
                        int width);

typedef struct ts_cpu_opts {
    int n_threads;          /* 0: all online cores */
    int force_variant;      /* -1: best the CPU supports; else a ts_cpu_variant (tests) */
    unsigned disable;       /* TS_OPT_* optimizations turned off (phases 4-5); 0: full plan */
    int release_source;     /* with TS_OPT_ZERO_COPY off: drop each tensor's mapped pages once it
                             * is copied (a process whose only reader of the weights is this
                             * session: run, chat, bench) */
    const ts_cpu_fault *fault; /* NULL: none */
} ts_cpu_opts;

/* max_seq: KV cache capacity. Q8_0 / Q4_0 matrices are read in place by the quantized kernels
 * (gemm.h); other non-BF16 matrices (F32/F16 checkpoints) are converted to BF16 copies once here; BF16 ones are borrowed from the mmap, except those whose K (columns) is
 * not a multiple of 16, which are copied with rows padded to whole 16-element blocks (gemm.h
 * says why). */
ts_status ts_cpu_new(const ts_model *m, int max_seq, const ts_cpu_opts *o, ts_cpu **out,
                     ts_error *err);
void ts_cpu_free(ts_cpu *c);
/* The matrices a session copies even when it borrows the weights from the mmap: *n_converted
 * stored other than BF16 (converted), *n_padded stored as BF16 with K not a multiple of 16
 * (copied, zero-padded rows), and the bytes of those padded copies. */
void ts_cpu_weight_copies(const ts_model *m, int *n_converted, int *n_padded, uint64_t *padded_bytes);
/* The Q8_0 / Q4_0 matrices a session reads in place (quantized kernels, no BF16 copy) and their
 * bytes; they are not counted as converted above. */
int ts_cpu_weight_quantized(const ts_model *m, uint64_t *bytes);
/* Where a session that was not told (no deployment, no --weights) reads its weights: 1 = a copy
 * in huge pages, 0 = the mmap. A copy when the file stores Q8_0 / Q4_0 matrices: read from the
 * page cache's 4 KiB pages they decoded 0.82-0.97x (Q4_0) and 0.88-0.93x (Q8_0) as fast as from
 * the copy on an Intel Xeon (docs/performance.md); BF16 keeps the mmap (no second copy, no load
 * time; the copy was not reliably faster there). Matrices quantized at load (--quant) are
 * already in their own huge-page slab (ts_model_quantize): no copy. (Chat and server sessions
 * copy every weight type: runtime/session.c.) */
int ts_cpu_default_copy(const ts_model *m);
/* What ts_cpu_new(m, max_seq, o) would allocate (model/memory.h), from the same sizes: KV
 * cache, the arena (activations, per-thread attention scores), and the weights it copies or
 * converts (non-BF16 tensors, every matrix without TS_OPT_ZERO_COPY, the FP32 norm and bias
 * vectors). Outputs are the caller's: left 0. */
void ts_cpu_mem_need(const ts_model *m, int max_seq, const ts_cpu_opts *o, ts_mem_need *out);
void ts_cpu_reset(ts_cpu *c);
int ts_cpu_n_past(const ts_cpu *c);
/* Same contract as ts_ref_forward: appends n tokens; logits for all positions or the last;
 * hidden: NULL or (n_layers + 1, n, n_embd). */
ts_status ts_cpu_forward(ts_cpu *c, const int32_t *tokens, int n, float *logits, int all_logits,
                         float *hidden, ts_error *err);

/* ---- several sequences on one session (tessera serve) ----------------------------------------
 * A sequence is a KV cache of its own; the weights, plan, threads and scratch are the session's.
 * The session's own cache (ts_cpu_forward above) is unaffected by the sequences. */
typedef struct ts_cpu_seq ts_cpu_seq;
/* A sequence of capacity max_seq positions (<= the model's max positions); allocated here. */
ts_status ts_cpu_seq_new(ts_cpu *c, int max_seq, ts_cpu_seq **out, ts_error *err);
void ts_cpu_seq_free(ts_cpu_seq *s);
int ts_cpu_seq_n_past(const ts_cpu_seq *s);
int ts_cpu_seq_capacity(const ts_cpu_seq *s);
/* Keeps the first n positions (n <= n_past): a prefix cache reuses what two prompts share, and
 * speculative decoding drops the rows of rejected drafts (ts_cpu_decode_run). */
void ts_cpu_seq_truncate(ts_cpu_seq *s, int n);
/* dst's first n positions := src's (n <= src's n_past and <= dst's capacity); dst's n_past = n. */
ts_status ts_cpu_seq_copy(ts_cpu_seq *dst, const ts_cpu_seq *src, int n, ts_error *err);
/* Appends n tokens to one sequence (prefill, or one decode step when n == 1): the same
 * contract and the same numbers as ts_cpu_forward on a session whose cache held what s holds. */
ts_status ts_cpu_forward_seq(ts_cpu *c, ts_cpu_seq *s, const int32_t *tokens, int n, float *logits,
                             int all_logits, ts_error *err);
/* One decode step of B sequences together (continuous batching): tokens[b] is appended to
 * seqs[b] (all distinct); logits (B, n_vocab). Each weight matrix is read once for the whole
 * batch, and row b's logits are bit-identical to ts_cpu_forward_seq(c, seqs[b], &tokens[b], 1)
 * (the same kernels' arithmetic per row), so a request's greedy output does not depend on what
 * else is being served. */
ts_status ts_cpu_decode_batch(ts_cpu *c, ts_cpu_seq *const *seqs, const int32_t *tokens, int B, float *logits,
                              ts_error *err);
/* k consecutive tokens of ONE sequence in one pass (verifying drafted tokens: prompt-lookup
 * speculative decoding): tokens[0..k) are appended to s at positions n_past..n_past+k-1;
 * logits (k, n_vocab). Each weight matrix is read once for the k rows, and row i is
 * bit-identical to the i-th of k successive ts_cpu_forward_seq(c, s, &tokens[i], 1) calls
 * (the decode kernels' arithmetic per row, as ts_cpu_decode_batch; row i attends over
 * positions <= its own, the KV of every row being written before any row's attention). s
 * advances by k: to reject drafts, ts_cpu_seq_truncate back to the rows kept (the KV of a
 * kept row depends only on the tokens up to it). 1 <= k <= ts_cpu_batch_max(c), n_past + k <=
 * capacity; errors as ts_cpu_decode_batch (TS_ERR_ARG, nothing run, nothing advanced). */
ts_status ts_cpu_decode_run(ts_cpu *c, ts_cpu_seq *s, const int32_t *tokens, int k, float *logits, ts_error *err);
/* Both at once: sequence b (all distinct) appends n[b] >= 1 consecutive tokens, the rows of
 * all sequences in order in tokens and logits (sum n[b] rows, <= ts_cpu_batch_max(c)); row
 * j of sequence b is bit-identical to its j-th successive single decode. A server verifies
 * one slot's drafts while the other slots take their ordinary step. */
ts_status ts_cpu_decode_multi(ts_cpu *c, ts_cpu_seq *const *seqs, const int *n, const int32_t *tokens, int B,
                              float *logits, ts_error *err);
/* The most rows one ts_cpu_decode_batch / _run / _multi step takes: TS_CPU_BATCH_MAX, or fewer on a session
 * whose prefill chunk (min(max_seq, TS_CPU_PREFILL_CHUNK)) is smaller, since the batch's rows
 * live in the chunk's activation buffers. More rows would gain little: at 32 rows a decode
 * step's GEMVs are no longer bound by reading the weights. */
#define TS_CPU_BATCH_MAX 32
int ts_cpu_batch_max(const ts_cpu *c);

/* One layer alone (phase-2 blocks): same contract as ts_ref_layer; n <= the prefill chunk. */
ts_status ts_cpu_layer(ts_cpu *c, int layer, float *x, int n, int pos0, ts_error *err);

/* Keeps the first n positions of the KV cache (n <= n_past): benchmarks rerun decode from
 * the same context. */
void ts_cpu_truncate(ts_cpu *c, int n);
/* The session's own KV cache as a sequence (what ts_cpu_forward appends to), for
 * ts_cpu_decode_run on it (tessera run --lookup). Not to be freed. */
ts_cpu_seq *ts_cpu_own_seq(ts_cpu *c);

/* One step of one layer alone on the named buffers of st (plan/steps.h), with the same
 * contract as ts_ref_step: the diagnosis hands it the oracle's inputs. S <= the chunk. */
ts_status ts_cpu_step(ts_cpu *c, int layer, ts_step step, ts_step_state *st, int S, int pos0, ts_error *err);

/* Time spent per dispatch since creation or the last reset: fused plans report their three
 * groups and the LM head; unfused plans report each step. */
typedef struct ts_cpu_prof {
    const char *name;
    long calls;
    double ms;
} ts_cpu_prof;
int ts_cpu_profile(const ts_cpu *c, ts_cpu_prof *out, int max);
void ts_cpu_profile_reset(ts_cpu *c);

/* Step timing (tessera bench --steps): once switched on (for the session's life), every thread
 * clocks each step it runs and its wait at the barrier after it (two clock reads a step).
 * ts_cpu_step_times gives, per step that ran since it was switched on or reset, summed over the calls: the seconds of the thread
 * that worked longest and of the one that worked least, and the step's span, the most any
 * thread spent in it and at the barrier after it (the wall time the step holds the threads; a
 * region's last step has no barrier after it: the region's end is not in any span). */
typedef struct ts_cpu_step_time {
    ts_step step;
    double work_max_s, work_min_s, span_s;
} ts_cpu_step_time;
ts_status ts_cpu_step_timing(ts_cpu *c, ts_error *err);
void ts_cpu_step_timing_reset(ts_cpu *c);
int ts_cpu_step_times(const ts_cpu *c, ts_cpu_step_time *out, int max);

ts_cpu_variant ts_cpu_variant_of(const ts_cpu *c);
int ts_cpu_threads(const ts_cpu *c);
/* Parallel regions run so far (dispatches), and bytes of weights converted at load. */
long ts_cpu_dispatches(const ts_cpu *c);
size_t ts_cpu_converted_bytes(const ts_cpu *c);
/* Times candidate GEMM tiles for every shape of the model at prefill size S and at decode,
 * keeps the fastest whose output is within max_rel_l2 of the scalar kernel's (the caller's
 * gate: deploy passes its phase-1 threshold); progress lines go to log (may be NULL). */
ts_status ts_cpu_autotune(ts_cpu *c, int S, double max_rel_l2, FILE *log, ts_error *err);
/* Autotuned tiles: export for a manifest and import from one (tile.ms, nr, sb as in gemm.h). */
typedef struct ts_cpu_tile_rec {
    int bucket, n, k, ms, nr, sb;
    double gflops;
} ts_cpu_tile_rec;
int ts_cpu_tiles_get(const ts_cpu *c, ts_cpu_tile_rec *out, int max);
ts_status ts_cpu_tiles_set(ts_cpu *c, const ts_cpu_tile_rec *in, int n, ts_error *err);
/* Back to the default tiles (phase 5 times a plan with and without the tuned ones). */
void ts_cpu_tiles_clear(ts_cpu *c);
/* Dispatches per layer of this session's plan. */
int ts_cpu_dispatches_per_layer(const ts_cpu *c);
/* What the variant's prefill kernel computes with, for manifests and reports. */
const char *ts_cpu_prefill_kernel_name(ts_cpu_variant v);
/* The decode GEMV this variant runs on this core (the avx512bf16 one is chosen per core). */
const char *ts_cpu_decode_kernel_name(ts_cpu_variant v);
/* What Q8_0 / Q4_0 matrices run with on this core: the decode GEMV and the prefill kernel (the
 * AVX-512 one chosen per core by timing; TESSERA_Q_PREFILL overrides). */
const char *ts_cpu_gemm_q_name(ts_cpu_variant v);
/* Rows per prefill chunk: a P-token prompt runs its GEMMs and attention on pieces of at most
 * this many rows (phase 1 checks those shapes). */
#define TS_CPU_PREFILL_CHUNK 256
/* One matrix product alone, y (S, N) = x (S, K) @ W^T with W BF16 (N, K) and x FP32 in natural
 * order, by the kernel the best variant runs for S rows (decode GEMV at S = 1) with its default
 * tile, on the calling thread: phase 1 checks every weight matrix through it against the
 * oracle. Any K: when K is not a multiple of 16 it runs as a session does, on a zero-padded
 * copy of W (made inside the call, so its time includes that copy). */
ts_status ts_cpu_matmul(const float *x, int S, const uint16_t *W, int N, int K, float *y, ts_error *err);
/* The same for a Q8_0 / Q4_0 matrix read in place (K % 32 == 0), by the quantized kernel the
 * best variant runs (gemm.h): W is the stored blocks, N rows of K / 32. */
ts_status ts_cpu_matmul_q(const float *x, int S, const void *W, ts_dtype dt, int N, int K, float *y, ts_error *err);
/* The session's thread pool (benchmarks run their probes on it). */
struct ts_pool *ts_cpu_pool(ts_cpu *c);

#endif
