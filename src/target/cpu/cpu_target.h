/* The cpu target: DESIGN.md's step list grouped into three dispatches per layer
 * ([attn_norm..rope + KV store] [attention] [o_proj..down + residual]), each one parallel
 * region of the thread pool, BF16 weights used in place from the mmap, FP32 activations,
 * accumulation and KV cache. */
#ifndef TS_TARGET_CPU_TARGET_H
#define TS_TARGET_CPU_TARGET_H
#include <stdio.h>

#include "model/model.h"
#include "target/cpu/cpu_features.h"

typedef struct ts_cpu ts_cpu;

typedef struct ts_cpu_opts {
    int n_threads;          /* 0: all online cores */
    int force_variant;      /* -1: best the CPU supports; else a ts_cpu_variant (tests) */
} ts_cpu_opts;

/* max_seq: KV cache capacity. Non-BF16 matrices (F32/F16 checkpoints) are converted to BF16
 * copies once here; BF16 ones are borrowed from the mmap. */
ts_status ts_cpu_new(const ts_model *m, int max_seq, const ts_cpu_opts *o, ts_cpu **out,
                     ts_error *err);
void ts_cpu_free(ts_cpu *c);
void ts_cpu_reset(ts_cpu *c);
int ts_cpu_n_past(const ts_cpu *c);
/* Same contract as ts_ref_forward: appends n tokens; logits for all positions or the last;
 * hidden: NULL or (n_layers + 1, n, n_embd). */
ts_status ts_cpu_forward(ts_cpu *c, const int32_t *tokens, int n, float *logits, int all_logits,
                         float *hidden, ts_error *err);

/* One layer alone (phase-2 blocks): same contract as ts_ref_layer; n <= the prefill chunk. */
ts_status ts_cpu_layer(ts_cpu *c, int layer, float *x, int n, int pos0, ts_error *err);

ts_cpu_variant ts_cpu_variant_of(const ts_cpu *c);
int ts_cpu_threads(const ts_cpu *c);
/* Parallel regions run so far (dispatches), and bytes of weights converted at load. */
long ts_cpu_dispatches(const ts_cpu *c);
size_t ts_cpu_converted_bytes(const ts_cpu *c);
/* Times candidate GEMM tiles for every shape of the model at prefill size S and at decode,
 * keeps the fastest that passes the phase-1 gate; progress lines go to log (may be NULL). */
ts_status ts_cpu_autotune(ts_cpu *c, int S, FILE *log, ts_error *err);
/* The session's thread pool (benchmarks run their probes on it). */
struct ts_pool *ts_cpu_pool(ts_cpu *c);

#endif
