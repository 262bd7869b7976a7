/* The oracle's kernels: one per step of the step list, FP32, plain C, with double accumulation
 * in reductions. Their only job is to be obviously right. Only the matmul is split over
 * threads, by output column: every output is computed by the same code whatever the split. */
#ifndef TS_TARGET_REF_KERNELS_H
#define TS_TARGET_REF_KERNELS_H
#include "io/safetensors.h"
#include "model/config.h"

/* out (n) = x (n) / rms(x) * w (n); w is a weight view of any dtype. out may alias x. */
void ts_ref_rmsnorm(float *out, const float *x, const ts_tensor *w, int n, double eps);

/* Dot product with double accumulation (ref_dot.h: fixed lanes, same result on every ISA). */
double ts_ref_dot(const float *a, const float *b, int n);

/* Scratch floats ts_ref_matmul needs for a K-long row: two weight rows widened to double,
 * one row as float, and room to align the doubles. */
#define TS_REF_ROW_SCRATCH(K) (5 * (size_t)(K) + 2)
/* Activation rows from which ts_ref_matmul_cols pairs columns over double-widened rows. */
#define TS_REF_PAIR_MIN_ROWS 32

/* out (S, N) = x (S, K) @ W^T + b; W is (N, K) of any dtype, b (N) or NULL.
 * row: scratch of TS_REF_ROW_SCRATCH(K) floats. */
void ts_ref_matmul(float *out, const float *x, const ts_tensor *W, const ts_tensor *b, int S, int N,
                   int K, float *row);
/* The same for output columns [n0, n1) only (one thread's share). */
void ts_ref_matmul_cols(float *out, const float *x, const ts_tensor *W, const ts_tensor *b, int S, int N,
                        int K, int n0, int n1, float *row);

/* Embedding lookup: out (n_embd) = row `id` of E. */
void ts_ref_embed(float *out, const ts_tensor *E, int id, int n_embd);

/* RoPE frequencies (head_dim / 2 of them) of a config: theta, then llama3 scaling from its
 * parameters (HF config) or its per-frequency divisors (a GGUF's rope_freqs tensor). */
void ts_ref_rope_freqs(float *inv_freq, const ts_config *c);
/* Rotates each head of x (n_heads, head_dim) in place at position pos (half-split pairs
 * (i, i + head_dim/2), as HF's rotate_half). */
void ts_ref_rope(float *x, int n_heads, int head_dim, int pos, const float *inv_freq);

/* Causal attention of one query position over keys/values 0..n_ctx-1 of the cache.
 * q (n_heads, hd); k, v: cache rows of stride kv_stride floats, (n_ctx, n_kv*hd) used;
 * out (n_heads, hd); scores: scratch of n_ctx floats. GQA: head h reads kv head
 * h / (n_heads / n_kv). */
void ts_ref_attention(float *out, const float *q, const float *k, const float *v, int n_ctx,
                      int n_heads, int n_kv, int hd, int kv_stride, float *scores);

/* out (n) = silu(gate) * up */
void ts_ref_silu_mul(float *out, const float *gate, const float *up, int n);

#endif
