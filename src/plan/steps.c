/* Names and report shapes of the step list. */
#include "plan/steps.h"

#include <stdio.h>
#include <string.h>

#include "model/config.h"

static const char *const k_names[TS_N_STEPS] = {
    "attn_norm", "qkv", "qk_norm", "rope", "attention", "o_proj", "ffn_norm", "gate_up", "down",
};

const char *ts_step_name(ts_step s) { return s >= 0 && s < TS_N_STEPS ? k_names[s] : "?"; }

int ts_step_parse(const char *name) {
    for (int i = 0; i < TS_N_STEPS; i++)
        if (!strcmp(name, k_names[i])) return i;
    return -1;
}

void ts_step_shape(ts_step s, const ts_config *c, int S, char *buf, int len) {
    int H = c->n_embd, hd = c->head_dim, Q = c->n_heads * hd, KV = c->n_kv_heads * hd;
    switch (s) {
    case TS_STEP_ATTN_NORM:
    case TS_STEP_FFN_NORM: snprintf(buf, (size_t)len, "RMSNorm S=%d n=%d", S, H); break;
    case TS_STEP_QKV: snprintf(buf, (size_t)len, "GEMM S=%d N=%d+%d+%d K=%d", S, Q, KV, KV, H); break;
    case TS_STEP_QK_NORM: snprintf(buf, (size_t)len, "RMSNorm S=%d heads=%d+%d n=%d", S, c->n_heads, c->n_kv_heads, hd); break;
    case TS_STEP_ROPE: snprintf(buf, (size_t)len, "RoPE S=%d heads=%d+%d head_dim=%d", S, c->n_heads, c->n_kv_heads, hd); break;
    case TS_STEP_ATTENTION:
        snprintf(buf, (size_t)len, "attention S=%d heads=%d kv_heads=%d head_dim=%d", S, c->n_heads, c->n_kv_heads, hd);
        break;
    case TS_STEP_O_PROJ: snprintf(buf, (size_t)len, "GEMM S=%d N=%d K=%d + residual", S, H, Q); break;
    case TS_STEP_GATE_UP: snprintf(buf, (size_t)len, "GEMM S=%d N=%d K=%d (x2) + silu*mul", S, c->n_ff, H); break;
    case TS_STEP_DOWN: snprintf(buf, (size_t)len, "GEMM S=%d N=%d K=%d + residual", S, H, c->n_ff); break;
    default: snprintf(buf, (size_t)len, "?");
    }
}

const char *ts_opt_name(unsigned opt) {
    switch (opt) {
    case TS_OPT_FUSED: return "fused dispatches";
    case TS_OPT_TILED_ATTN: return "tiled attention";
    case TS_OPT_GEMV: return "streaming GEMV";
    case TS_OPT_ZERO_COPY: return "zero-copy weights";
    case TS_OPT_LAST_LOGITS: return "last-token LM head";
    default: return "?";
    }
}
