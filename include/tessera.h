/* tessera public C API.
 * Handles are opaque; every fallible call returns a ts_status and, on failure, writes a
 * message naming the file, the field or tensor, and the expected vs found value into the
 * caller's ts_error. Library code never exits or aborts on bad input. */
#ifndef TESSERA_H
#define TESSERA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ts_status {
    TS_OK = 0,
    TS_ERR_ARG = 1,         /* caller passed an invalid argument */
    TS_ERR_IO = 2,          /* a file is missing or unreadable */
    TS_ERR_FORMAT = 3,      /* a file is malformed (JSON, header, offsets, truncation) */
    TS_ERR_UNSUPPORTED = 4, /* well-formed but not supported (architecture, dtype, feature) */
    TS_ERR_SHAPE = 5,       /* tensor missing, unexpected, or its shape disagrees with config */
    TS_ERR_VALUE = 6,       /* NaN or Inf in weights or outputs */
    TS_ERR_NOMEM = 7,       /* allocation failed */
    TS_ERR_GATE = 8,        /* a numerical gate failed */
} ts_status;

#define TS_ERROR_LEN 1024
typedef struct ts_error {
    char msg[TS_ERROR_LEN];
} ts_error;

const char *ts_status_name(ts_status s);
const char *ts_version(void);

/* ---- models: an HF snapshot directory (config.json + safetensors) ---- */
typedef struct ts_model ts_model;

/* Opens and validates structure: config, every tensor's presence, shape, dtype, offsets.
 * Weights stay in the mmap (borrowed views). Does not read weight values. */
ts_status ts_model_open(const char *dir, ts_model **out, ts_error *err);
/* Scans every weight for NaN/Inf (touches all pages). */
ts_status ts_model_check_values(const ts_model *m, ts_error *err);
void ts_model_close(ts_model *m);

int ts_model_n_vocab(const ts_model *m);
int ts_model_n_layers(const ts_model *m);
int ts_model_n_embd(const ts_model *m);

/* ---- the ref target: FP32 oracle with a KV cache ---- */
typedef struct ts_ref ts_ref;

/* max_seq: KV cache capacity in tokens. The model must outlive the session. The cache holds
 * what the model's kv_type says at this call (FP32, or values rounded to F16). */
ts_status ts_ref_new(const ts_model *m, int max_seq, ts_ref **out, ts_error *err);
/* Empties the cache and makes it hold kv_type (TS_DTYPE_F32 or TS_DTYPE_F16) from now on: the
 * oracle on one model with either cache (what --kv-cache f16 cost, phase 3). */
void ts_ref_set_kv_cache(ts_ref *r, int kv_type);
void ts_ref_free(ts_ref *r);
void ts_ref_reset(ts_ref *r); /* empties the KV cache */
int ts_ref_n_past(const ts_ref *r);
/* Splits the oracle's matmuls by output column over n threads (0 = all cores; default 1).
 * Results do not depend on n: each output is computed whole by one thread. */
ts_status ts_ref_set_threads(ts_ref *r, int n_threads, ts_error *err);

/* Appends n tokens after the cached ones (prefill when n > 1, decode when n == 1).
 * logits: NULL, or n x n_vocab floats (all_logits != 0) or n_vocab floats (last position).
 * hidden: NULL, or (n_layers + 1) x n x n_embd floats: the embedding output, then the
 * residual stream after each layer (before the final norm). */
ts_status ts_ref_forward(ts_ref *r, const int32_t *tokens, int n, float *logits, int all_logits,
                         float *hidden, ts_error *err);

/* One decode step of n sessions of one model together (n <= 64): session i appends tokens[i]
 * at its own position. The matmuls run over the n rows at once, so the weights are read once
 * per step instead of n times; session 0's threads run them. The results are bit-identical to
 * n separate ts_ref_forward calls (every step but rope and attention is row by row, and those
 * two use each row's own cache). logits: NULL or n x n_vocab floats. */
ts_status ts_ref_decode_batch(ts_ref *const *seqs, int n, const int32_t *tokens, float *logits, ts_error *err);

/* Progress of a long step: frac in [0, 1]. Called from the calling thread. */
typedef void (*ts_progress_fn)(void *user, const char *stage, double frac);

/* One layer alone (a phase-2 block): x (n, n_embd) in place, positions pos0..pos0+n-1 of the
 * layer's KV cache are written and attention reads 0..pos. */
ts_status ts_ref_layer(ts_ref *r, int layer, float *x, int n, int pos0, ts_error *err);

/* ---- synth: deterministic random-weight checkpoints of the seed model shapes ---- */
typedef struct ts_synth_opts {
    uint64_t seed;
    int vocab;  /* > 0: replaces the preset's vocabulary size */
    int layers; /* > 0: replaces the preset's layer count (real widths, fewer layers) */
    ts_progress_fn progress;
    void *progress_user;
} ts_synth_opts;

/* Writes OUT_DIR/config.json and OUT_DIR/model.safetensors (BF16); opts may be NULL (seed 0,
 * the preset as published). Fails if OUT_DIR holds a model already. */
ts_status ts_synth_write(const char *preset, const char *out_dir, const ts_synth_opts *opts,
                         ts_error *err);
/* The i-th preset name, or NULL past the end. */
const char *ts_synth_preset_name(int i);

#ifdef __cplusplus
}
#endif
#endif
