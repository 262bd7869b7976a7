/* tessera inspect MODEL [--ctx N] [--all-tensors] [--json]: what a checkpoint is and what
 * running it costs in memory. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "model/model.h"

static const char *k_usage = "tessera inspect MODEL_DIR [--ctx N] [--all-tensors] [--json]";

static void print_tensor(const ts_tensor *t) {
    char sh[96];
    printf("  %-52s %-4s %s\n", t->name, ts_dtype_name(t->dtype), ts_shape_str(t->shape, t->ndim, sh, sizeof sh));
}

/* "1.234 GiB" / "12.5 MiB" / "900 KiB": one static buffer per call slot. */
static const char *sz(uint64_t b, int slot) {
    static char buf[4][32];
    if (b >= (1ull << 30)) snprintf(buf[slot], sizeof buf[0], "%.3f GiB", (double)b / (1ull << 30));
    else if (b >= (1ull << 20)) snprintf(buf[slot], sizeof buf[0], "%.1f MiB", (double)b / (1ull << 20));
    else snprintf(buf[slot], sizeof buf[0], "%.1f KiB", (double)b / 1024.0);
    return buf[slot];
}

int cmd_inspect(int argc, char **argv) {
    const char *dir = NULL;
    long long ctx = 4096;
    int all = 0, as_json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ctx") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 1, 1 << 24, &ctx))
                return cli_usage("inspect", k_usage, "--ctx expects a positive integer");
        } else if (!strcmp(argv[i], "--all-tensors")) all = 1;
        else if (!strcmp(argv[i], "--json")) as_json = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s\n", k_usage);
            return 0;
        } else if (argv[i][0] == '-' || dir) return cli_usage("inspect", k_usage, "unexpected argument");
        else dir = argv[i];
    }
    if (!dir) return cli_usage("inspect", k_usage, "expects MODEL_DIR");
    ts_error err;
    ts_model *m;
    ts_status s = ts_model_open(dir, &m, &err);
    if (s) return cli_fail("inspect", s, &err);
    const ts_config *c = &m->cfg;
    int n_dt[TS_DTYPE_COUNT] = {0};
    for (int i = 0; i < m->store.n_tensors; i++) n_dt[m->store.tensors[i].dtype]++;
    uint64_t wbytes = ts_store_file_bytes(&m->store);
    uint64_t kv_tok = 2ull * (uint64_t)c->n_layers * (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim;
    uint64_t kv_f32 = kv_tok * 4 * (uint64_t)ctx, kv_bf16 = kv_tok * 2 * (uint64_t)ctx;
    /* ref scratch: 64-token chunk of activations + one weight row + scores + one logits row */
    uint64_t Q = (uint64_t)c->n_heads * c->head_dim, KVd = (uint64_t)c->n_kv_heads * c->head_dim;
    uint64_t scratch = 4 * (64 * (4 * (uint64_t)c->n_embd + 2 * Q + 2 * KVd + 2 * (uint64_t)c->n_ff) +
                            (uint64_t)c->n_ff + Q + (uint64_t)ctx + (uint64_t)c->n_vocab);
    char feat[256];
    ts_config_features(c, feat, sizeof feat);
    if (as_json) {
        printf("{\"model\": \"%s\", \"architecture\": \"%s\", \"features\": \"%s\", \"n_params\": %llu, "
               "\"n_tensors\": %d, \"weight_bytes\": %llu, \"hidden_size\": %d, \"intermediate_size\": %d, "
               "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
               "\"head_dim\": %d, \"vocab_size\": %d, \"ctx\": %lld, \"kv_cache_bytes_f32\": %llu, "
               "\"kv_cache_bytes_bf16\": %llu, \"scratch_bytes\": %llu}\n",
               dir, c->arch_name, feat, (unsigned long long)m->n_params, m->store.n_tensors,
               (unsigned long long)wbytes, c->n_embd, c->n_ff, c->n_layers, c->n_heads, c->n_kv_heads,
               c->head_dim, c->n_vocab, ctx, (unsigned long long)kv_f32, (unsigned long long)kv_bf16,
               (unsigned long long)scratch);
        ts_model_close(m);
        return 0;
    }
    printf("model         %s\narchitecture  %s\nfeatures      %s\n", dir, c->arch_name, feat);
    printf("shape         hidden %d, ffn %d, %d layers, %d heads / %d kv heads, head_dim %d, vocab %d, "
           "max positions %d\n",
           c->n_embd, c->n_ff, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->n_vocab, c->max_pos);
    printf("rope          theta %g", c->rope_theta);
    if (c->rope_llama3)
        printf(", llama3 scaling (factor %g, low %g, high %g, original %d)", c->rope_factor,
               c->rope_low_freq_factor, c->rope_high_freq_factor, c->rope_orig_max_pos);
    printf("\nrms_norm_eps  %g\ntokens        bos %d, eos", c->rms_eps, c->bos_id);
    for (int i = 0; i < c->n_eos; i++) printf(" %d", c->eos_ids[i]);
    printf("\nweights       %d file%s%s, %s, %d tensors (BF16 %d, F16 %d, F32 %d)\n", m->store.n_maps,
           m->store.n_maps > 1 ? "s" : "", m->store.sharded ? " (sharded)" : "", sz(wbytes, 0),
           m->store.n_tensors, n_dt[TS_DTYPE_BF16], n_dt[TS_DTYPE_F16], n_dt[TS_DTYPE_F32]);
    printf("parameters    %llu (%.4g M%s)\n", (unsigned long long)m->n_params, (double)m->n_params / 1e6,
           c->tied ? ", tied embeddings counted once" : "");
    printf("tensors%s\n", all ? "" : " (layer 0 shown; every layer has the same; --all-tensors lists all)");
    for (int i = 0; i < m->store.n_tensors; i++) {
        const ts_tensor *t = &m->store.tensors[i];
        if (!all && !strncmp(t->name, "model.layers.", 13) && strncmp(t->name, "model.layers.0.", 15)) continue;
        print_tensor(t);
    }
    printf("memory for a generation run at %lld positions\n", ctx);
    printf("  weights (mmap'd, shared page cache)   %12s\n", sz(wbytes, 0));
    printf("  KV cache FP32 (ref target)            %12s  (%llu bytes/token)\n", sz(kv_f32, 1),
           (unsigned long long)(kv_tok * 4));
    printf("  KV cache BF16 (optimized targets)     %12s  (%llu bytes/token)\n", sz(kv_bf16, 2),
           (unsigned long long)(kv_tok * 2));
    printf("  scratch (ref target, 64-token chunks) %12s\n", sz(scratch, 3));
    printf("  total (ref)                           %12s\n", sz(wbytes + kv_f32 + scratch, 0));
    ts_model_close(m);
    return 0;
}
