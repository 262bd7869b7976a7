/* tessera bench MODEL [--prefill 128,512] [--decode 128] [--gen N] [--threads N] [--trials N]
 *                     [--steps] [--json] [--batch 1,2,4,8]
 * Prefill and decode speed of the cpu target, with this machine's own peaks (FMA throughput,
 * streaming read bandwidth) measured in the same run, so results are quoted as fractions. The
 * timing is deploy/measure.h's, the same harness phases 4, 5 and 7 use. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "core/procfs.h"
#include "core/clock.h"
#include "core/pool.h"
#include "deploy/gates.h"
#include "deploy/measure.h"
#include "deploy/tiles.h"
#include "io/quant.h"
#include "model/model.h"
#include "model/quantize.h"
#include "target/cpu/cpu_target.h"
#include "target/cpu/gemm.h"
#include "target/cpu/prefetch.h"

static const char *k_usage =
    "tessera bench MODEL_DIR [--prefill 128,512] [--decode 128] [--gen 16] [--threads N]\n"
    "                     [--trials 5] [--autotune] [--copy-weights|--mmap-weights] [--quant q8_0|q4_0]\n"
    "                     [--kv-cache f32|f16] [--steps] [--json] [--batch 1,2,4,8]\n\n"
    "--copy-weights copies the weights at load (2 MiB huge pages where the kernel allows),\n"
    "--mmap-weights reads them in place from the mmap; default: as `tessera run` does (a copy\n"
    "when the file stores Q8_0/Q4_0 matrices, else the mmap). --quant quantizes BF16/F16/F32 weight\n"
    "matrices to Q8_0 / Q4_0 at load (as `tessera quantize` would write them). --kv-cache f16\n"
    "holds the KV cache in IEEE half (default f32).\n"
    "--steps also clocks every step of the decode on every thread (two clock reads a step) and\n"
    "prints where a token's time goes: per step its span (the slowest thread and the barrier\n"
    "after it), the slowest and fastest thread's work, and the GB/s of the weights (attention:\n"
    "the KV cache) it reads over the span.\n"
    "--batch measures only batched decode instead (continuous batching): for each count B,\n"
    "B sequences with their own --decode-token contexts decode --gen tokens together; it\n"
    "reports the aggregate tokens/s and its ratio to B = 1.";


#define MAX_SIZES 8

/* "128,512" -> sizes; -1 when malformed or more than MAX_SIZES. */
static int parse_sizes(const char *p, int *sizes, long long hi) {
    int n = 0;
    while (*p) {
        long long v;
        char buf[32];
        size_t len = strcspn(p, ",");
        if (n == MAX_SIZES || len == 0 || len >= sizeof buf) return -1;
        memcpy(buf, p, len);
        buf[len] = 0;
        if (cli_parse_int(buf, 1, hi, &v)) return -1;
        sizes[n++] = (int)v;
        p += len + (p[len] == ',');
    }
    return n;
}

/* --batch: aggregate decode tokens/s at each batch size, and the ratio to one sequence. */
static int bench_batch(const char *dir, ts_model *m, const ts_measure_opts *mo, const int *bs, int nb, int ctx, int gen,
                       int as_json) {
    ts_measurement r[MAX_SIZES] = {{0}};
    ts_error err;
    ts_status s = TS_OK;
    for (int k = 0; k < nb && !s; k++) s = ts_measure_decode_batch(m, mo, ctx, gen, bs[k], &r[k], &err);
    if (s) {
        for (int k = 0; k < nb; k++) ts_measurement_free(&r[k]);
        ts_model_close(m);
        return cli_fail("bench", s, &err);
    }
    double base = r[0].rate; /* the ratio's reference: B = 1 when listed, else the first size */
    for (int k = 0; k < nb; k++)
        if (bs[k] == 1) base = r[k].rate;
    const char *variant = ts_cpu_variant_name(ts_cpu_best_variant());
    if (as_json) {
        printf("{\"model\": \"%s\", \"target\": \"cpu\", \"variant\": \"%s\", \"threads\": %d, \"decode_ctx\": %d, "
               "\"gen\": %d, \"batch\": [", dir, variant, mo->threads, ctx, gen);
        for (int k = 0; k < nb; k++)
            printf("%s{\"sequences\": %d, \"tok_s\": %.3f, \"sd\": %.3f, \"per_sequence_tok_s\": %.3f, \"ratio\": %.3f}",
                   k ? ", " : "", bs[k], r[k].rate, r[k].rate_sd, r[k].rate / bs[k], r[k].rate / base);
        printf("]}\n");
    } else {
        printf("bench %s: cpu target, %s, %d threads, %d trials; batched decode of %d tokens after %d-token contexts\n",
               dir, variant, mo->threads, mo->trials, gen, ctx);
        for (int k = 0; k < nb; k++)
            printf("decode %2d sequences: %8.2f tok/s aggregate (sd %.2f), %7.2f per sequence, %.2fx one sequence\n", bs[k],
                   r[k].rate, r[k].rate_sd, r[k].rate / bs[k], r[k].rate / base);
        for (int k = 0; k < nb; k++) { /* where a step's time goes, per dispatch (per decode step) */
            printf("  profile per step, %d sequences:\n", bs[k]);
            ts_measure_print_profile(stdout, r[k].profile);
        }
    }
    for (int k = 0; k < nb; k++) ts_measurement_free(&r[k]);
    ts_model_close(m);
    return 0;
}

/* --steps: where a decoded token's time goes (ts_measurement.steps) */
static void print_steps(const json_t *a, double token_ms, double peak_gbs) {
    printf("decode step by step, ms a token: the step's span (its slowest thread and the barrier after it), "
           "then the slowest and fastest thread's work:\n");
    double sum = 0;
    size_t i;
    json_t *r;
    json_array_foreach(a, i, r) {
        double ms = json_real_value(json_object_get(r, "ms_per_token"));
        double mb = json_real_value(json_object_get(r, "bytes_per_token")) / 1e6, gbs = json_real_value(json_object_get(r, "gbs"));
        sum += ms;
        printf("  %-10s %7.3f  (threads %7.3f / %7.3f)", json_string_value(json_object_get(r, "step")), ms,
               json_real_value(json_object_get(r, "slowest_thread_ms_per_token")),
               json_real_value(json_object_get(r, "fastest_thread_ms_per_token")));
        if (mb > 0) printf("  %8.1f MB  %6.1f GB/s (%.2f of the read peak)", mb, gbs, gbs / peak_gbs);
        printf("\n");
    }
    printf("  the spans sum to %.3f of the token's %.3f ms (the rest: regions starting and ending, the embedding, "
           "the sampling)\n", sum, token_ms);
}

int cmd_bench(int argc, char **argv) {
    const char *dir = NULL, *prefill = "128,512", *batch = NULL;
    long long decode_ctx = 128, gen = 16, threads = 0, trials = 5;
    int as_json = 0, autotune = 0, copy_weights = -1, quant = -1, kv = TS_DTYPE_F32, steps = 0;
    for (int i = 1; i < argc; i++) {
        long long *dst = NULL;
        long long lo = 1, hi = 1 << 20;
        if (!strcmp(argv[i], "--prefill") && i + 1 < argc) prefill = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = argv[++i];
        else if (!strcmp(argv[i], "--decode") && i + 1 < argc) dst = &decode_ctx;
        else if (!strcmp(argv[i], "--gen") && i + 1 < argc) dst = &gen;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) dst = &threads, hi = 256;
        else if (!strcmp(argv[i], "--trials") && i + 1 < argc) dst = &trials, hi = 1000;
        else if (!strcmp(argv[i], "--json")) as_json = 1;
        else if (!strcmp(argv[i], "--steps")) steps = 1;
        else if (!strcmp(argv[i], "--autotune")) autotune = 1;
        else if (!strcmp(argv[i], "--copy-weights")) copy_weights = 1;
        else if (!strcmp(argv[i], "--mmap-weights")) copy_weights = 0;
        else if (!strcmp(argv[i], "--quant") && i + 1 < argc) {
            if ((quant = ts_quant_parse(argv[++i])) < 0) return cli_usage("bench", k_usage, "--quant expects q8_0 or q4_0");
        }
        else if (!strcmp(argv[i], "--kv-cache") && i + 1 < argc) {
            if ((kv = ts_kv_cache_parse(argv[++i])) < 0) return cli_usage("bench", k_usage, "--kv-cache expects f32 or f16");
        }
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s\n", k_usage);
            return 0;
        } else if (argv[i][0] == '-' || dir) return cli_usage("bench", k_usage, "unexpected argument");
        else dir = argv[i];
        if (dst && cli_parse_int(argv[++i], lo, hi, dst))
            return cli_usage("bench", k_usage, "numeric option out of range");
    }
    if (!dir) return cli_usage("bench", k_usage, "expects MODEL_DIR");
    int sizes[MAX_SIZES], n_sizes = parse_sizes(prefill, sizes, 1 << 20), bsz[MAX_SIZES], n_b = 0;
    if (n_sizes <= 0) return cli_usage("bench", k_usage, "--prefill expects at most 8 sizes like 128,512");
    if (batch && steps) return cli_usage("bench", k_usage, "--steps times the single-sequence decode, not --batch");
    if (batch && (n_b = parse_sizes(batch, bsz, TS_CPU_BATCH_MAX)) <= 0)
        return cli_usage("bench", k_usage, "--batch expects at most 8 sequence counts from 1 to 32, like 1,2,4,8");

    double t0 = ts_now_s();
    ts_error err;
    ts_model *m;
    ts_status s = ts_model_open(dir, &m, &err);
    if (!s && quant >= 0 && (s = ts_model_quantize(m, (ts_dtype)quant, &err))) ts_model_close(m);
    if (s) return cli_fail("bench", s, &err);
    m->kv_type = kv;
    double t_open = ts_now_s() - t0;
    if (copy_weights < 0) copy_weights = ts_cpu_default_copy(m); /* as `tessera run` places them */
    int nth = ts_pool_resolve_threads((int)threads);
    json_t *tiles = NULL;
    if (autotune) {
        ts_cpu *cp;
        ts_cpu_opts co = {.n_threads = nth, .force_variant = -1};
        if (!(s = ts_cpu_new(m, sizes[n_sizes - 1], &co, &cp, &err))) {
            s = ts_cpu_autotune(cp, sizes[n_sizes - 1], ts_threshold_find("phase1", "rel_l2")->value,
                                as_json ? stderr : stdout, &err);
            if (!s) tiles = ts_tiles_json(cp);
            ts_cpu_free(cp);
        }
        if (s) {
            ts_model_close(m);
            return cli_fail("bench", s, &err);
        }
    }
    /* A copying plan drops the mapped pages as a copying `tessera run` does. */
    ts_measure_opts mo = {.threads = nth, .trials = (int)trials, .disable = copy_weights ? TS_OPT_ZERO_COPY : 0,
                          .tiles = tiles, .release_source = copy_weights};
    if (n_b) {
        int rc = bench_batch(dir, m, &mo, bsz, n_b, (int)decode_ctx, (int)gen, as_json);
        json_decref(tiles);
        return rc;
    }
    const ts_config *c = ts_model_config(m);
    ts_measurement pf[MAX_SIZES] = {{0}}, dec = {0};
    /* The peaks are probed before and after the measurements and the better of the two kept: a
     * shared host's bandwidth moves within seconds, and a decode must not look faster than
     * the machine only because the probe ran at a slow moment. */
    ts_peaks pk0;
    s = ts_measure_peaks(m, nth, 8, &pk0, &err);
    FILE *cr = fopen("/proc/self/clear_refs", "w"); /* "5": VmHWM restarts here, without the probe's buffers */
    if (cr) fputs("5", cr), fclose(cr);
    for (int k = 0; k < n_sizes && !s; k++) s = ts_measure_prefill(m, &mo, sizes[k], &pf[k], &err);
    if (!s) { /* and a read probe between every two decode trials (measure.h) */
        ts_measure_opts md = mo;
        md.probe_each_trial = 1;
        md.step_timing = steps;
        s = ts_measure_decode(m, &md, (int)decode_ctx, (int)gen, &dec, &err);
    }
    /* before the decode's probe buffer (measure.h) and the peak probes' 1 GiB */
    double rss_mb = dec.rss_peak_mb;
    double huge_mb = dec.anon_huge_mb; /* copied weights in THP, read while the decode session held them */
    double pmd_mb = dec.file_pmd_mb;   /* weights read from the mmap in 2 MiB folios (io/mmap.c) */
    ts_peaks pk;
    if (!s) s = ts_measure_peaks(m, nth, 8, &pk, &err);
    if (!s) ts_peaks_max(&pk, &pk0);
    if (s) {
        for (int k = 0; k < n_sizes; k++) ts_measurement_free(&pf[k]);
        ts_measurement_free(&dec);
        json_decref(tiles);
        ts_model_close(m);
        return cli_fail("bench", s, &err);
    }
    double pf_gflops[MAX_SIZES];
    for (int k = 0; k < n_sizes; k++) pf_gflops[k] = ts_measure_prefill_flops(c, sizes[k]) / (pf[k].mean_ms / 1e3) / 1e9;
    const ts_measurement *last = &pf[n_sizes - 1];
    double bytes_tok = ts_measure_decode_bytes(m, decode_ctx + gen / 2.0);
    double pf_frac = pf_gflops[n_sizes - 1] / pk.flops_gflops;
    double dec_gbs = bytes_tok * dec.rate / 1e9, dec_frac = dec_gbs / pk.read_gbs;
    /* Load: opening the model and creating the first session; cold TTFT adds its first prefill. */
    double t_load = t_open + pf[0].create_ms / 1e3, cold_ttft = t_open + pf[0].cold_ms / 1e3;
    const char *variant = ts_cpu_variant_name(ts_cpu_best_variant());
    /* The kernels the matrices run with (the AVX-512 ones are chosen per core by timing, gemm.h) */
    char kernels[512];
    int qmats = !strcmp(m->cfg.torch_dtype, "Q8_0") || !strcmp(m->cfg.torch_dtype, "Q4_0");
    ts_dtype qdt = !strcmp(m->cfg.torch_dtype, "Q8_0") ? TS_DTYPE_Q8_0 : TS_DTYPE_Q4_0;
    /* copies of Q8_0 / Q4_0 matrices in 16-block lane order (gemm.h) */
    int x16 = qmats && copy_weights && ts_cpu_x16_wanted(ts_cpu_best_variant(), qdt);
    /* Q8_0 / Q4_0 in tile order where the prefill runs AMX or I16 (gemm_q.c), the other matrices in lane order */
    int t16 = qmats && copy_weights && ts_cpu_t16_wanted(ts_cpu_best_variant(), qdt, 16 * 16, 512);
    if (qmats)
        snprintf(kernels, sizeof kernels, "%s%s", ts_cpu_gemm_q_name(ts_cpu_best_variant()),
                 t16   ? "; weights copied in tile order (16 rows interleaved per block) where N % 16 == 0 and K % 512 == 0, "
                         "the others in 16-block lane order"
                 : x16 ? "; weights copied in 16-block lane order" : "");
    else
        snprintf(kernels, sizeof kernels, "prefill %s; decode %s", ts_cpu_prefill_kernel_name(ts_cpu_best_variant()),
                 ts_cpu_decode_kernel_name(ts_cpu_best_variant()));
    /* The decode prefetch distances this process measured and kept (target/cpu/prefetch.h) */
    char pfd[512] = "";
    /* only the kernels that take part: the FP32 BF16 GEMV (not the x3 one), the VNNI Q GEMVs */
    if (ts_cpu_best_variant() >= TS_CPU_AVX512BF16 &&
        (qmats ? ts_cpu_features_get()->avx512vnni : ts_cpu_avx512_decode_f32()))
        ts_pf_describe(!qmats                    ? TS_PF_BF16
                       : qdt == TS_DTYPE_Q8_0 ? (x16 || t16 ? TS_PF_Q8X16 : TS_PF_Q8)
                                              : (x16 ? TS_PF_Q4X16 : TS_PF_Q4),
                       pfd, sizeof pfd);
    if (t16) { /* the tile order's matrices have their own candidates; the lane order's only where some decoded */
        char lanes[256];
        snprintf(lanes, sizeof lanes, "%.255s", pfd);
        ts_pf_report lr;
        ts_pf_get_report(qdt == TS_DTYPE_Q8_0 ? TS_PF_Q8X16 : TS_PF_Q4X16, &lr);
        double lane_gb = 0;
        for (int i = 0; i < TS_PF_CANDS; i++) lane_gb += lr.gbytes[i];
        ts_pf_describe(qdt == TS_DTYPE_Q8_0 ? TS_PF_Q8T16 : TS_PF_Q4T16, pfd, sizeof pfd - 300);
        size_t w = strlen(pfd);
        if (lane_gb > 0 || lr.forced) snprintf(pfd + w, sizeof pfd - w, "; lane-order matrices %s", lanes);
    }
    /* Counted, not declared: the regions one decoded token ran, less the LM head's, per layer. */
    double dpl = (dec.dispatches_per_run - 1) / c->n_layers;
    if (as_json) {
        printf("{\"model\": \"%s\", \"target\": \"cpu\", \"variant\": \"%s\", \"kernels\": \"%s\", \"threads\": %d, "
               "\"prefill_tokens\": %d, \"prefill_tok_s\": %.3f, \"prefill_tok_s_sd\": %.3f, "
               "\"prefill_gflops\": %.2f, \"decode_ctx\": %lld, \"decode_tok_s\": %.3f, "
               "\"decode_tok_s_sd\": %.3f, \"decode_gbs\": %.2f, \"bytes_per_token\": %.0f, "
               "\"peak_bf16_gflops\": %.2f, \"peak_instruction\": \"%s\", \"peak_read_gbs\": %.2f, "
               "\"prefill_peak_fraction\": %.4f, \"decode_bandwidth_fraction\": %.4f, "
               "\"peak_read_by_pattern\": {\"stream_4k\": %.2f, \"gemv_4k\": %.2f, \"stream_2m\": %.2f, "
               "\"gemv_2m\": %.2f, \"best\": \"%s\", \"huge_page_share\": %.3f}, \"decode_exceeds_read_peak\": %s, "
               "\"decode_probe_fraction\": %.4f, \"decode_probe_gbs\": [%.2f, %.2f], "
               "\"decode_prefetch\": \"%s\", \"dispatches_per_layer\": %.2f, \"load_s\": %.3f, \"cold_ttft_s\": %.3f, "
               "\"rss_peak_mb\": %.1f, \"anon_huge_mb\": %.1f, \"file_pmd_mb\": %.1f, \"copied_weights\": %s, "
               "\"trials\": %lld, \"kv_cache\": \"%s\", "
               "\"prefill\": [",
               dir, variant, kernels, nth, sizes[n_sizes - 1], last->rate, last->rate_sd, pf_gflops[n_sizes - 1], decode_ctx,
               dec.rate, dec.rate_sd, dec_gbs, bytes_tok, pk.flops_gflops, pk.flops_instr, pk.read_gbs, pf_frac,
               dec_frac, pk.read_stream_4k_gbs, pk.read_gemv_4k_gbs, pk.read_stream_2m_gbs, pk.read_gemv_2m_gbs,
               pk.read_best, pk.huge_share, dec_frac > 1 ? "true" : "false", dec.probe_fraction, dec.probe_min_gbs,
               dec.probe_max_gbs, pfd, dpl, t_load, cold_ttft, rss_mb, huge_mb, pmd_mb, copy_weights ? "true" : "false", trials,
               ts_kv_cache_name(kv));
        for (int k = 0; k < n_sizes; k++)
            printf("%s{\"tokens\": %d, \"tok_s\": %.3f, \"sd\": %.3f, \"gflops\": %.2f}", k ? ", " : "",
                   sizes[k], pf[k].rate, pf[k].rate_sd, pf_gflops[k]);
        printf("]");
        if (dec.steps) {
            char *js = json_dumps(dec.steps, JSON_COMPACT | JSON_REAL_PRECISION(6));
            printf(", \"decode_steps\": %s", js ? js : "null");
            free(js);
        }
        printf("}\n");
    } else {
        printf("bench %s: cpu target, %s, %d threads, %lld trials, KV cache %s\n", dir, variant, nth, trials,
               ts_kv_cache_name(kv));
        printf("kernels: %s\n", kernels);
        printf("machine peaks (this run): %.1f GFLOP/s %s, %.1f GB/s read (%s)\n", pk.flops_gflops,
               pk.flops_instr, pk.read_gbs, pk.read_best);
        printf("  read by pattern, GB/s: load stream %.1f (4 KiB pages) %.1f (2 MiB: %.0f%% huge); decode GEMV %.1f "
               "(4 KiB) %.1f (2 MiB)\n", pk.read_stream_4k_gbs, pk.read_stream_2m_gbs, 100 * pk.huge_share,
               pk.read_gemv_4k_gbs, pk.read_gemv_2m_gbs);
        for (int k = 0; k < n_sizes; k++)
            printf("prefill %5d tokens: %8.2f tok/s (sd %.2f)  %7.1f GFLOP/s = %.1f%% of peak\n", sizes[k],
                   pf[k].rate, pf[k].rate_sd, pf_gflops[k], 100 * pf_gflops[k] / pk.flops_gflops);
        /* the peak is a floating-point instruction's; Q8_0/Q4_0 prefill multiplies integer codes
         * (VNNI or AMX tiles), which can pass it (AMX did from 32 tokens on the Intel Xeon) */
        ts_q_prefill qk = ts_cpu_avx512_q_prefill();
        if (qmats && ts_cpu_gemm_q_for(ts_cpu_best_variant()) == ts_cpu_gemm_q_avx512 &&
            (qk == TS_Q_PREFILL_I8 || qk == TS_Q_PREFILL_I16 || qk == TS_Q_PREFILL_AMX))
            printf("  (peak: %s; this model's prefill runs integer products on the weight codes, %s, not bound by it)\n",
                   pk.flops_instr, ts_q_prefill_name(qk));
        printf("decode at %lld ctx:   %8.2f tok/s (sd %.2f)  %7.1f GB/s = %.1f%% of read peak (%.0f MB/token)\n",
               decode_ctx, dec.rate, dec.rate_sd, dec_gbs, 100 * dec_frac, bytes_tok / 1e6);
        printf("  against a read probe before and after each trial: median %.1f%% (probes %.1f-%.1f GB/s)\n",
               100 * dec.probe_fraction, dec.probe_min_gbs, dec.probe_max_gbs);
        if (pfd[0]) printf("decode prefetch: %s\n", pfd);
        if (dec_frac > 1)
            printf("warning: decode read %.1f GB/s, above the measured read peak %.1f GB/s: the peak probe ran on a busier "
                   "machine, or decode reads less than %.0f MB/token\n", dec_gbs, pk.read_gbs, bytes_tok / 1e6);
        if (dec.steps) print_steps(dec.steps, dec.mean_ms / (double)gen, pk.read_gbs);
        printf("dispatches per layer %.0f; load %.3f s; cold time to first token %.3f s; peak RSS %.0f MB\n", dpl,
               t_load, cold_ttft, rss_mb);
        if (copy_weights) printf("weights copied at load: %.0f MB of it in transparent huge pages\n", huge_mb);
        else if (pmd_mb >= 0) /* 4 KiB pages where the file was cached in small folios before (io/mmap.c) */
            printf("weights read from the mmap: %.0f MB of them mapped in 2 MiB pages\n", pmd_mb);
    }
    for (int k = 0; k < n_sizes; k++) ts_measurement_free(&pf[k]);
    ts_measurement_free(&dec);
    json_decref(tiles);
    ts_model_close(m);
    return 0;
}
