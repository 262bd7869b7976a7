/* The step list every layer runs (DESIGN.md, "one plan, two executors"), the named buffers
 * the steps pass between them, and the optimization switches a target's plan can turn off.
 * Both targets run these steps over the same buffers, so a gate can compare them one step at
 * a time and diagnosis can hand any single step the oracle's inputs. */
#ifndef TS_PLAN_STEPS_H
#define TS_PLAN_STEPS_H

typedef enum ts_step {
    TS_STEP_ATTN_NORM, /* x -> xn */
    TS_STEP_QKV,       /* xn -> q, k, v (+ bias) */
    TS_STEP_QK_NORM,   /* q, k -> q, k (per head; models with q_norm/k_norm only) */
    TS_STEP_ROPE,      /* q, k -> q, k rotated; k, v stored in the KV cache */
    TS_STEP_ATTENTION, /* q + KV cache -> att */
    TS_STEP_O_PROJ,    /* x += att @ Wo^T (+ bias) */
    TS_STEP_FFN_NORM,  /* x -> xn */
    TS_STEP_GATE_UP,   /* xn -> h = silu(xn Wg^T) * (xn Wu^T) (+ biases) */
    TS_STEP_DOWN,      /* x += h @ Wd^T (+ bias) */
    TS_N_STEPS
} ts_step;

/* Rows [0, S) of every buffer a layer's steps read or write, plain row-major FP32:
 * x, xn (S, n_embd); q (S, n_heads*head_dim); k, v (S, n_kv*head_dim); att like q;
 * h (S, n_ff). Borrowed. */
typedef struct ts_step_state {
    float *x, *xn, *q, *k, *v, *att, *h;
} ts_step_state;

const char *ts_step_name(ts_step s);
/* Step from its name; -1 when unknown. */
int ts_step_parse(const char *name);
/* A one-line description of the step's shape for reports, e.g. "GEMM S=8 N=3072 K=1024 (x2)". */
struct ts_config;
void ts_step_shape(ts_step s, const struct ts_config *c, int S, char *buf, int len);

/* Optimizations of the cpu plan, each switchable so phases 4-5 can time them one after the
 * other. ts_cpu_opts.disable holds the ones turned off; 0 runs the full plan. */
enum {
    TS_OPT_FUSED = 1 << 0,       /* 3 dispatches per layer instead of one per step */
    TS_OPT_TILED_ATTN = 1 << 1,  /* prefill attention in 16-query tiles instead of one row */
    TS_OPT_GEMV = 1 << 2,        /* decode GEMV streams W rows instead of the GEMM tile path */
    TS_OPT_ZERO_COPY = 1 << 3,   /* BF16 weights borrowed from the mmap instead of copied */
    TS_OPT_LAST_LOGITS = 1 << 4, /* LM head on the last position only instead of all */
    TS_OPT_ALL = (1 << 5) - 1
};
const char *ts_opt_name(unsigned opt);

#endif
