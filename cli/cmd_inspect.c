/* tessera inspect MODEL [--ctx N] [--all-tensors] [--json]: what a checkpoint is and what
 * running it costs in memory. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "io/gguf.h"
#include "model/memory.h"
#include "model/model.h"
#include "target/cpu/cpu_target.h"
#include "target/ref/ref_mem.h"

static const char *k_usage = "tessera inspect MODEL_DIR|FILE.gguf [--ctx N] [--all-tensors] [--json]";

/* One metadata entry of a GGUF: scalars in full, strings up to a line, arrays as their type,
 * length and first elements (a vocabulary has 10^5 of them). */
/* The file's bytes, but no control characters (escapes, newlines) on the user's terminal. */
static void put_clean(const char *s, size_t n) {
    for (size_t c = 0; c < n; c++) putchar((unsigned char)s[c] < 0x20 || s[c] == 0x7f ? '?' : s[c]);
}

static void print_kv(const ts_gguf_kv *kv) {
    size_t kl = strlen(kv->key);
    printf("  ");
    put_clean(kv->key, kl);
    printf("%*s ", kl < 44 ? (int)(44 - kl) : 0, "");
    ts_gguf_type t = kv->type == TS_GGUF_ARRAY ? kv->arr_type : kv->type;
    uint64_t n = kv->type == TS_GGUF_ARRAY ? kv->n : 1, show = n < 4 ? n : 4;
    if (kv->type == TS_GGUF_ARRAY) printf("[%s x %llu] ", ts_gguf_type_name(t), (unsigned long long)n);
    for (uint64_t i = 0; i < show; i++) {
        if (i) printf(", ");
        if (t == TS_GGUF_STRING) {
            const char *str;
            size_t len;
            if (kv->type == TS_GGUF_ARRAY) ts_gguf_arr_str(kv, i, &str, &len);
            else {
                uint64_t l;
                memcpy(&l, kv->val, 8);
                str = (const char *)kv->val + 8, len = (size_t)l;
            }
            /* a chat template is kilobytes of lines: its first line, up to 60 bytes */
            size_t k = len < 60 ? len : 60;
            const char *nl = memchr(str, '\n', k);
            if (nl) k = (size_t)(nl - str);
            putchar('"');
            put_clean(str, k);
            putchar('"');
            if (k < len) printf("... (%zu bytes)", len);
        } else if (t == TS_GGUF_BOOL) {
            printf("%s", kv->val[i] ? "true" : "false");
        } else if (t == TS_GGUF_F32 || t == TS_GGUF_F64) {
            ts_gguf_kv one = *kv;
            one.arr_type = t;
            printf("%g", ts_gguf_arr_num(&one, i));
        } else {
            ts_gguf_kv one = *kv;
            one.arr_type = t;
            printf("%lld", (long long)ts_gguf_arr_int(&one, i));
        }
    }
    printf("%s\n", show < n ? ", ..." : "");
}

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
    long long ctx = 0; /* 0: run's default, min(max_position_embeddings, 4096) */
    int all = 0, as_json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ctx") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 1, 1 << 24, &ctx))
                return cli_usage("inspect", k_usage, "--ctx expects a positive integer");
        } else if (!strcmp(argv[i], "--all-tensors")) all = 1;
        else if (!strcmp(argv[i], "--json")) as_json = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s\n\n  --ctx N   positions the memory estimate is for (default: run's, min(max_position_embeddings, 4096))\n", k_usage);
            return 0;
        } else if (argv[i][0] == '-' || dir) return cli_usage("inspect", k_usage, "unexpected argument");
        else dir = argv[i];
    }
    if (!dir) return cli_usage("inspect", k_usage, "expects MODEL_DIR or FILE.gguf");
    ts_error err;
    ts_model *m;
    ts_status s = ts_model_open(dir, &m, &err);
    if (s) return cli_fail("inspect", s, &err);
    const ts_config *c = &m->cfg;
    if (ctx == 0) ctx = c->max_pos < 4096 ? c->max_pos : 4096;
    int n_dt[TS_DTYPE_COUNT] = {0};
    for (int i = 0; i < m->store.n_tensors; i++) n_dt[m->store.tensors[i].dtype]++;
    uint64_t wbytes = ts_store_file_bytes(&m->store);
    /* The same estimates logits and run check before they allocate: a generation run of ctx
     * positions decodes in chunks of up to ctx tokens, on every core. */
    ts_mem_need ref, cpu, cpu16;
    ts_ref_mem_need(m, (int)ctx, (int)ctx, 0, &ref);
    ts_cpu_mem_need(m, (int)ctx, NULL, &cpu);
    m->kv_type = TS_DTYPE_F16; /* the cpu cache with --kv-cache f16 (capacity in whole blocks) */
    ts_cpu_mem_need(m, (int)ctx, NULL, &cpu16);
    m->kv_type = TS_DTYPE_F32;
    uint64_t kv_tok = ref.kv / (uint64_t)ctx;
    char feat[256];
    ts_config_features(c, feat, sizeof feat);
    if (as_json) {
        printf("{\"model\": \"%s\", \"format\": \"%s\", \"architecture\": \"%s\", \"features\": \"%s\", \"n_params\": %llu, "
               "\"n_tensors\": %d, \"weight_bytes\": %llu, \"hidden_size\": %d, \"intermediate_size\": %d, "
               "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
               "\"head_dim\": %d, \"vocab_size\": %d, \"max_position_embeddings\": %d, \"ctx\": %lld, "
               "\"kv_cache_bytes_f32\": %llu, \"kv_cache_bytes_f16\": %llu, \"scratch_bytes\": %llu, \"ref_total_bytes\": %llu, "
               "\"cpu_scratch_bytes\": %llu, \"cpu_weight_copy_bytes\": %llu, \"cpu_total_bytes\": %llu}\n",
               dir, m->gguf ? "gguf" : "safetensors", c->arch_name, feat, (unsigned long long)m->n_params, m->store.n_tensors,
               (unsigned long long)wbytes, c->n_embd, c->n_ff, c->n_layers, c->n_heads, c->n_kv_heads,
               c->head_dim, c->n_vocab, c->max_pos, ctx, (unsigned long long)ref.kv, (unsigned long long)cpu16.kv,
               (unsigned long long)ref.scratch,
               (unsigned long long)ts_mem_private(&ref), (unsigned long long)cpu.scratch,
               (unsigned long long)cpu.weights_owned, (unsigned long long)ts_mem_private(&cpu));
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
    if (c->rope_freq_div) printf(", per-frequency divisors from rope_freqs.weight (llama3 scaling as converted)");
    printf("\nrms_norm_eps  %g\ntokens        bos %d, eos", c->rms_eps, c->bos_id);
    for (int i = 0; i < c->n_eos; i++) printf(" %d", c->eos_ids[i]);
    printf("\nweights       %d file%s%s, %s, %d tensors (", m->store.n_maps, m->store.n_maps > 1 ? "s" : "",
           m->store.sharded ? " (sharded)" : "", sz(wbytes, 0), m->store.n_tensors);
    for (int d = 0, first = 1; d < TS_DTYPE_COUNT; d++)
        if (n_dt[d] || d <= TS_DTYPE_BF16) printf("%s%s %d", first ? "" : ", ", ts_dtype_name((ts_dtype)d), n_dt[d]), first = 0;
    printf(")\n");
    if (m->gguf) {
        printf("gguf          version %u, %d metadata entries, alignment %u, data at byte %llu%s\n", m->gguf->version,
               m->gguf->n_kv, m->gguf->alignment, (unsigned long long)m->gguf->data_offset,
               c->arch == TS_ARCH_LLAMA ? "; Q/K rows un-permuted to HF order" : "");
        for (int i = 0; i < m->gguf->n_kv; i++) print_kv(&m->gguf->kv[i]);
    }
    printf("parameters    %llu (%.4g M%s)\n", (unsigned long long)m->n_params, (double)m->n_params / 1e6,
           c->tied ? ", tied embeddings counted once" : "");
    printf("tensors%s\n", all ? "" : " (layer 0 shown; every layer has the same; --all-tensors lists all)");
    for (int i = 0; i < m->store.n_tensors; i++) {
        const ts_tensor *t = &m->store.tensors[i];
        if (!all && !strncmp(t->name, "model.layers.", 13) && strncmp(t->name, "model.layers.0.", 15)) continue;
        print_tensor(t);
    }
    printf("memory for a generation run at %lld positions%s\n", ctx,
           ctx > c->max_pos ? " (beyond max_position_embeddings: logits and run refuse it)" : "");
    printf("  weights (mmap'd, shared page cache)   %12s\n", sz(wbytes, 0));
    printf("  KV cache FP32 (both targets)          %12s  (%llu bytes/token)\n", sz(ref.kv, 1),
           (unsigned long long)kv_tok);
    printf("  KV cache F16 (cpu, --kv-cache f16)    %12s  (%llu bytes/token)\n", sz(cpu16.kv, 1),
           (unsigned long long)kv_tok / 2);
    printf("  scratch (ref target, 64-token chunks) %12s\n", sz(ref.scratch, 2));
    printf("  arena (cpu target, all cores)         %12s\n", sz(cpu.scratch, 3));
    if (cpu.weights_owned) printf("  weight copies (cpu: non-BF16, norms)  %12s\n", sz(cpu.weights_owned, 1));
    printf("  total (ref)                           %12s  + weights\n", sz(ts_mem_private(&ref), 0));
    printf("  total (cpu)                           %12s  + weights\n", sz(ts_mem_private(&cpu), 2));
    ts_model_close(m);
    return 0;
}
