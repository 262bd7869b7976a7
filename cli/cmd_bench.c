/* tessera bench MODEL [--prefill 128,512] [--decode 128] [--gen N] [--threads N] [--trials N]
 *                     [--json]
 * Prefill and decode speed of the cpu target, with this machine's own peaks (FMA throughput,
 * streaming read bandwidth) measured in the same run, so results are quoted as fractions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "io/mmap.h"
#include "model/model.h"
#include "target/cpu/cpu_target.h"
#include "target/cpu/probe.h"
#include "core/clock.h"

static const char *k_usage =
    "tessera bench MODEL_DIR [--prefill 128,512] [--decode 128] [--gen 16] [--threads N]\n"
    "                     [--trials 5] [--autotune] [--copy-weights] [--json]\n\n"
    "--copy-weights copies the weights at load (2 MiB huge pages where the kernel allows)\n"
    "instead of reading them in place from the mmap.";

/* A "Key:   N kB" line of a /proc/self file, or -1. */
static long proc_kb(const char *file, const char *key) {
    FILE *f = fopen(file, "r");
    char line[256];
    long kb = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n)) kb = atol(line + n);
    if (f) fclose(f);
    return kb;
}

typedef struct stat {
    double mean, sd;
} stat;

static stat stats(const double *x, int n) {
    stat s = {0, 0};
    for (int i = 0; i < n; i++) s.mean += x[i];
    s.mean /= n;
    for (int i = 0; i < n; i++) s.sd += (x[i] - s.mean) * (x[i] - s.mean);
    s.sd = n > 1 ? sqrt(s.sd / (n - 1)) : 0;
    return s;
}

#define MAX_SIZES 8

int cmd_bench(int argc, char **argv) {
    const char *dir = NULL, *prefill = "128,512";
    long long decode_ctx = 128, gen = 16, threads = 0, trials = 5;
    int as_json = 0, autotune = 0, copy_weights = 0;
    for (int i = 1; i < argc; i++) {
        long long *dst = NULL;
        long long lo = 1, hi = 1 << 20;
        if (!strcmp(argv[i], "--prefill") && i + 1 < argc) prefill = argv[++i];
        else if (!strcmp(argv[i], "--decode") && i + 1 < argc) dst = &decode_ctx;
        else if (!strcmp(argv[i], "--gen") && i + 1 < argc) dst = &gen;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) dst = &threads, hi = 256;
        else if (!strcmp(argv[i], "--trials") && i + 1 < argc) dst = &trials, hi = 1000;
        else if (!strcmp(argv[i], "--json")) as_json = 1;
        else if (!strcmp(argv[i], "--autotune")) autotune = 1;
        else if (!strcmp(argv[i], "--copy-weights")) copy_weights = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s\n", k_usage);
            return 0;
        } else if (argv[i][0] == '-' || dir) return cli_usage("bench", k_usage, "unexpected argument");
        else dir = argv[i];
        if (dst && cli_parse_int(argv[++i], lo, hi, dst))
            return cli_usage("bench", k_usage, "numeric option out of range");
    }
    if (!dir) return cli_usage("bench", k_usage, "expects MODEL_DIR");
    int sizes[MAX_SIZES], n_sizes = 0, max_s = (int)(decode_ctx + gen);
    for (const char *p = prefill; *p;) {
        if (n_sizes == MAX_SIZES) return cli_usage("bench", k_usage, "--prefill takes at most 8 sizes");
        long long v;
        char buf[32];
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof buf) return cli_usage("bench", k_usage, "--prefill expects sizes like 128,512");
        memcpy(buf, p, len);
        buf[len] = 0;
        if (cli_parse_int(buf, 1, 1 << 20, &v)) return cli_usage("bench", k_usage, "--prefill expects sizes like 128,512");
        sizes[n_sizes++] = (int)v;
        if (v > max_s) max_s = (int)v;
        p += len + (p[len] == ',');
    }
    if (n_sizes == 0) return cli_usage("bench", k_usage, "--prefill expects sizes like 128,512");

    double t0 = ts_now_s();
    ts_error err;
    ts_model *m;
    ts_status s = ts_model_open(dir, &m, &err);
    if (s) return cli_fail("bench", s, &err);
    ts_cpu *cp;
    ts_cpu_opts o = {.n_threads = (int)threads, .force_variant = -1, .disable = copy_weights ? TS_OPT_ZERO_COPY : 0,
                     .release_source = 1};
    if ((s = ts_cpu_new(m, max_s, &o, &cp, &err))) {
        ts_model_close(m);
        return cli_fail("bench", s, &err);
    }
    /* As a copying session of `tessera run` does: the mapped pages go, the copy stays. */
    if (copy_weights)
        for (int i = 0; i < m->store.n_maps; i++) ts_mmap_release(&m->store.maps[i]);
    double t_load = ts_now_s() - t0;
    if (autotune && (s = ts_cpu_autotune(cp, sizes[n_sizes - 1], as_json ? stderr : stdout, &err))) {
        ts_cpu_free(cp);
        ts_model_close(m);
        return cli_fail("bench", s, &err);
    }
    const ts_config *c = ts_model_config(m);
    int V = c->n_vocab, H = c->n_embd, L = c->n_layers, hd = c->head_dim;
    double Q = (double)c->n_heads * hd, KV = (double)c->n_kv_heads * hd;
    double mat_params = (double)L * (H * Q + 2 * H * KV + Q * H + 3.0 * H * c->n_ff);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)max_s);
    float *logits = malloc(sizeof(float) * (size_t)V);
    for (int i = 0; i < max_s; i++) toks[i] = (int32_t)((i * 2654435761u) % (unsigned)V);

    /* Prefill: the first run of the first size is the cold one (weights paged in). */
    double cold_ttft = 0, pf_tok_s[MAX_SIZES], pf_sd[MAX_SIZES], pf_gflops[MAX_SIZES];
    double *tv = malloc(sizeof(double) * (size_t)trials);
    for (int k = 0; k < n_sizes; k++) {
        int S = sizes[k];
        for (int t = -1; t < trials; t++) {
            ts_cpu_reset(cp);
            double a = ts_now_s();
            if ((s = ts_cpu_forward(cp, toks, S, logits, 0, NULL, &err))) goto fail;
            double dt = ts_now_s() - a;
            if (t < 0 && k == 0) cold_ttft = t_load + dt;
            if (t >= 0) tv[t] = S / dt;
        }
        stat st = stats(tv, (int)trials);
        pf_tok_s[k] = st.mean;
        pf_sd[k] = st.sd;
        double flops = 2 * mat_params * S + (double)L * 4 * c->n_heads * hd * (double)S * (S + 1) / 2 + 2.0 * V * H;
        pf_gflops[k] = flops / (S / st.mean) / 1e9;
    }
    /* Decode: gen tokens after a decode_ctx-token prompt. */
    for (int t = 0; t < trials; t++) {
        ts_cpu_reset(cp);
        if ((s = ts_cpu_forward(cp, toks, (int)decode_ctx, logits, 0, NULL, &err))) goto fail;
        double a = ts_now_s();
        for (int g = 0; g < gen; g++)
            if ((s = ts_cpu_forward(cp, toks + decode_ctx + g, 1, logits, 0, NULL, &err))) goto fail;
        tv[t] = gen / (ts_now_s() - a);
    }
    stat dec = stats(tv, (int)trials);
    double avg_ctx = decode_ctx + gen / 2.0;
    double bytes_tok = 2 * mat_params + 2.0 * V * H + (double)L * avg_ctx * 2 * KV * 4;
    long before = ts_cpu_dispatches(cp);
    ts_cpu_forward(cp, toks, 1, logits, 0, NULL, &err); /* may exceed capacity: count only */
    long per_tok = ts_cpu_dispatches(cp) - before;
    double rss_mb = proc_kb("/proc/self/status", "VmHWM:") / 1024.0; /* before the probes' 1 GiB buffer */
    double huge_mb = proc_kb("/proc/self/smaps_rollup", "AnonHugePages:") / 1024.0; /* copied weights in THP */
    ts_peaks pk;
    ts_probe_peaks(ts_cpu_pool(cp), ts_cpu_variant_of(cp), 3, &pk);
    double pf_frac = pf_gflops[n_sizes - 1] / pk.flops_gflops;
    double dec_gbs = bytes_tok * dec.mean / 1e9, dec_frac = dec_gbs / pk.read_gbs;
    double dpl = (double)(per_tok > 0 ? per_tok - 1 : 3 * L) / L;
    if (as_json) {
        printf("{\"model\": \"%s\", \"target\": \"cpu\", \"variant\": \"%s\", \"threads\": %d, "
               "\"prefill_tokens\": %d, \"prefill_tok_s\": %.3f, \"prefill_tok_s_sd\": %.3f, "
               "\"prefill_gflops\": %.2f, \"decode_ctx\": %lld, \"decode_tok_s\": %.3f, "
               "\"decode_tok_s_sd\": %.3f, \"decode_gbs\": %.2f, \"bytes_per_token\": %.0f, "
               "\"peak_bf16_gflops\": %.2f, \"peak_instruction\": \"%s\", \"peak_read_gbs\": %.2f, "
               "\"prefill_peak_fraction\": %.4f, \"decode_bandwidth_fraction\": %.4f, "
               "\"dispatches_per_layer\": %.2f, \"load_s\": %.3f, \"cold_ttft_s\": %.3f, "
               "\"rss_peak_mb\": %.1f, \"anon_huge_mb\": %.1f, \"copied_weights\": %s, \"trials\": %lld, "
               "\"prefill\": [",
               dir, ts_cpu_variant_name(ts_cpu_variant_of(cp)), ts_cpu_threads(cp), sizes[n_sizes - 1],
               pf_tok_s[n_sizes - 1], pf_sd[n_sizes - 1], pf_gflops[n_sizes - 1], decode_ctx, dec.mean,
               dec.sd, dec_gbs, bytes_tok, pk.flops_gflops, pk.flops_instr, pk.read_gbs, pf_frac, dec_frac,
               dpl, t_load, cold_ttft, rss_mb, huge_mb, copy_weights ? "true" : "false", trials);
        for (int k = 0; k < n_sizes; k++)
            printf("%s{\"tokens\": %d, \"tok_s\": %.3f, \"sd\": %.3f, \"gflops\": %.2f}", k ? ", " : "",
                   sizes[k], pf_tok_s[k], pf_sd[k], pf_gflops[k]);
        printf("]}\n");
    } else {
        printf("bench %s: cpu target, %s, %d threads, %lld trials\n", dir,
               ts_cpu_variant_name(ts_cpu_variant_of(cp)), ts_cpu_threads(cp), trials);
        printf("machine peaks (this run): %.1f GFLOP/s %s, %.1f GB/s streaming read\n", pk.flops_gflops,
               pk.flops_instr, pk.read_gbs);
        for (int k = 0; k < n_sizes; k++)
            printf("prefill %5d tokens: %8.2f tok/s (sd %.2f)  %7.1f GFLOP/s = %.1f%% of peak\n", sizes[k],
                   pf_tok_s[k], pf_sd[k], pf_gflops[k], 100 * pf_gflops[k] / pk.flops_gflops);
        printf("decode at %lld ctx:   %8.2f tok/s (sd %.2f)  %7.1f GB/s = %.1f%% of read peak (%.0f MB/token)\n",
               decode_ctx, dec.mean, dec.sd, dec_gbs, 100 * dec_frac, bytes_tok / 1e6);
        printf("dispatches per layer %.0f; load %.3f s; cold time to first token %.3f s; peak RSS %.0f MB\n",
               dpl, t_load, cold_ttft, rss_mb);
        if (copy_weights) printf("weights copied at load: %.0f MB of it in transparent huge pages\n", huge_mb);
    }
    free(toks), free(logits), free(tv);
    ts_cpu_free(cp);
    ts_model_close(m);
    return 0;
fail:
    free(toks), free(logits), free(tv);
    ts_cpu_free(cp);
    ts_model_close(m);
    return cli_fail("bench", s, &err);
}
