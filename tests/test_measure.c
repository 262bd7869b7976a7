/* The measurement harness (measure.h), autotuned tiles as JSON (tiles.h) and the optimization
 * trajectory of phases 4-5 (perf_trajectory.c) on a tiny fixture: statistics on known data, the
 * bytes and FLOPs formulas against hand-computed values, measurements whose fields agree with
 * their own samples and with the plan's dispatch count, and tiles that survive a round trip and
 * are refused with errors naming the field. */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "deploy/measure.h"
#include "deploy/phases.h"
#include "deploy/tiles.h"
#include "tharness.h"

static const char *str(const json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "(null)";
}

static void test_stats(void) {
    double x[8] = {2, 4, 4, 4, 5, 5, 7, 9}, mean, sd;
    ts_measure_stats(x, 8, &mean, &sd);
    /* Squared deviations sum to 32: the sample sd is sqrt(32 / 7), not the population's 2. */
    CHECK(fabs(mean - 5) < 1e-12 && fabs(sd - sqrt(32.0 / 7)) < 1e-12, "mean %g sd %g", mean, sd);
    ts_measure_stats(x + 7, 1, &mean, &sd);
    CHECK(mean == 9 && sd == 0, "one sample: mean %g sd %g", mean, sd);
    ts_measure_stats(x, 0, &mean, &sd);
    CHECK(isnan(mean) && sd == 0, "no samples: mean %g sd %g", mean, sd);
    double y[3] = {-1, -1, -1};
    ts_measure_stats(y, 3, &mean, &sd);
    CHECK(mean == -1 && sd == 0, "constant: mean %g sd %g", mean, sd);
}

/* qwen3_qknorm: hidden 64, 4 heads x 32 (Q 128), 2 kv heads (KV 64), ffn 128, 2 layers, vocab
 * 256, tied. Per layer q 64x128 + k,v 2x64x64 + o 128x64 + gate,up,down 3x64x128 = 49152
 * parameters; 2 layers 98304; with the 256x64 embedding 114688, 229376 bytes as BF16. The FP32
 * KV cache is 2 layers x (K + V) x 64 x 4 bytes = 1024 bytes per position. */
static void test_formulas(const ts_model *m) {
    const ts_config *c = ts_model_config(m);
    CHECK(c->n_embd == 64 && c->n_heads == 4 && c->head_dim == 32 && c->n_kv_heads == 2 && c->n_ff == 128 &&
              c->n_layers == 2 && c->n_vocab == 256,
          "fixture shapes changed: the hand-computed values below assume qwen3_qknorm's");
    CHECK(ts_measure_decode_bytes(m, 0) == 229376, "decode bytes at ctx 0: %.0f", ts_measure_decode_bytes(m, 0));
    CHECK(ts_measure_decode_bytes(m, 100) == 229376 + 102400, "decode bytes at ctx 100: %.0f",
          ts_measure_decode_bytes(m, 100));
    /* A Q8_0 GGUF: its blocks as stored, 34 bytes per 32 weights (every matrix is Q8_0). */
    {
        char path[1024];
        ts_model *q;
        ts_error err;
        snprintf(path, sizeof path, "%s/qwen3/qwen3-q8_0.gguf", th_fixture("gguf"));
        if (ts_model_open(path, &q, &err) == TS_OK) {
            const ts_config *qc = ts_model_config(q);
            double H = qc->n_embd, Q = (double)qc->n_heads * qc->head_dim, KV = (double)qc->n_kv_heads * qc->head_dim;
            double params = qc->n_layers * (2 * H * Q + 2 * H * KV + 3 * H * qc->n_ff) + (double)qc->n_vocab * H;
            CHECK(ts_measure_decode_bytes(q, 0) == params / 32 * 34, "Q8_0 decode bytes %.0f, expected %.0f",
                  ts_measure_decode_bytes(q, 0), params / 32 * 34);
            ts_model_close(q);
        } else {
            CHECK(0, "%s", err.msg);
        }
    }
    /* S = 10: GEMMs 2 x 98304 x 10 = 1966080; causal attention QK^T and PV, 2 layers x 4 x 4
     * heads x 32 x (10 x 11 / 2) = 56320; the one-row LM head 2 x 256 x 64 = 32768. */
    CHECK(ts_measure_prefill_flops(c, 10) == 1966080 + 56320 + 32768, "prefill flops S=10: %.0f",
          ts_measure_prefill_flops(c, 10));
    CHECK(ts_measure_prefill_flops(c, 1) == 2 * 98304 + 2 * 4 * 4 * 32 + 32768, "prefill flops S=1: %.0f",
          ts_measure_prefill_flops(c, 1));
}

/* Fields of one measurement agree with its samples and with the plan it timed. */
static void check_measurement(const ts_measurement *r, int trials, int tokens, double dispatches, int dpl,
                              const char *what) {
    CHECK(r->trials == trials && r->samples, "%s: %d trials (asked %d)", what, r->trials, trials);
    if (!r->samples) return;
    int finite = 1;
    for (int i = 0; i < r->trials; i++) finite &= isfinite(r->samples[i]) && r->samples[i] > 0;
    CHECK(finite, "%s: every sample finite and > 0", what);
    double mean, sd;
    ts_measure_stats(r->samples, r->trials, &mean, &sd);
    CHECK(fabs(mean - r->rate) <= 1e-9 * mean && fabs(sd - r->rate_sd) <= 1e-9 * (sd + 1),
          "%s: rate %g +- %g is not its samples' %g +- %g", what, r->rate, r->rate_sd, mean, sd);
    /* Each sample is tokens / that trial's time: the times recovered from the samples have the
     * measurement's mean and sd. */
    double t[64];
    for (int i = 0; i < r->trials && i < 64; i++) t[i] = tokens * 1e3 / r->samples[i];
    ts_measure_stats(t, r->trials < 64 ? r->trials : 64, &mean, &sd);
    CHECK(fabs(mean - r->mean_ms) <= 1e-9 * mean && fabs(sd - r->sd_ms) <= 1e-9 * (mean + sd),
          "%s: warm %g +- %g ms, the samples' times %g +- %g", what, r->mean_ms, r->sd_ms, mean, sd);
    /* The rate is the mean of tokens / time per trial, so by Jensen it is >= tokens / mean time
     * (equal only when every trial took the same time). */
    CHECK(r->mean_ms > 0 && r->rate >= tokens / (r->mean_ms / 1e3) * (1 - 1e-9), "%s: rate %g vs %d tok / %g ms",
          what, r->rate, tokens, r->mean_ms);
    CHECK(r->sd_ms >= 0 && (trials > 1 || r->sd_ms == 0), "%s: sd %g", what, r->sd_ms);
    CHECK(r->create_ms >= 0 && r->cold_ms >= 0 && isfinite(r->cold_ms), "%s: create %g cold %g", what, r->create_ms,
          r->cold_ms);
    CHECK(r->dpl == dpl, "%s: %d dispatches per layer, expected %d", what, r->dpl, dpl);
    CHECK(r->dispatches_per_run == dispatches, "%s: %g dispatches per run, expected %g", what,
          r->dispatches_per_run, dispatches);
    /* The profile accounts for every dispatch of a run, and its shares sum to one. */
    CHECK(json_is_array(r->profile) && json_array_size(r->profile) > 0, "%s: profile array", what);
    double calls = 0, share = 0;
    int keys = 1;
    size_t i;
    const json_t *p;
    json_array_foreach(r->profile, i, p) {
        keys &= json_is_string(json_object_get(p, "dispatch")) && json_is_number(json_object_get(p, "calls_per_run")) &&
                json_is_number(json_object_get(p, "ms_per_run")) && json_is_number(json_object_get(p, "share"));
        calls += json_number_value(json_object_get(p, "calls_per_run"));
        share += json_number_value(json_object_get(p, "share"));
    }
    CHECK(keys, "%s: profile rows have dispatch, calls_per_run, ms_per_run, share", what);
    CHECK(fabs(calls - dispatches) < 1e-9, "%s: profile counts %g calls per run, the pool %g", what, calls,
          dispatches);
    CHECK(fabs(share - 1) < 1e-9, "%s: profile shares sum to %g", what, share);
}

/* Each trial over the mean of its two probes, then the median: worked by hand. */
static void test_probe_fraction(void) {
    /* 1 GB a token: trials read 10, 20, 30, 100 GB/s; probes around them 20, 20, 30, 50 */
    const double rates[4] = {10, 20, 30, 100}, probes[5] = {10, 30, 10, 50, 50};
    double lo, hi, f = ts_measure_probe_fraction(rates, probes, 4, 1e9, &lo, &hi);
    CHECK(fabs(f - 1.0) < 1e-12 && lo == 10 && hi == 50, "fractions 0.5, 1, 1, 2: median %g (expected 1), probes %g-%g",
          f, lo, hi);
    f = ts_measure_probe_fraction(rates, probes, 3, 1e9, &lo, &hi);
    CHECK(fabs(f - 1.0) < 1e-12 && lo == 10 && hi == 50, "three trials: median %g", f);
    f = ts_measure_probe_fraction(rates + 3, probes + 3, 1, 2e9, &lo, &hi);
    CHECK(fabs(f - 4.0) < 1e-12 && lo == 50 && hi == 50, "one trial at 2 GB a token: %g (expected 4)", f);
    CHECK(ts_measure_probe_fraction(rates, probes, 0, 1e9, &lo, &hi) == 0, "no trials: 0");
    /* the median itself: odd, even (mean of the middle two), unsorted input left as it was */
    const double v[4] = {7, 1, 5, 3};
    CHECK(ts_measure_median(v, 3) == 5 && ts_measure_median(v, 4) == 4 && v[0] == 7 && v[1] == 1,
          "median of 7 1 5: %g, of 7 1 5 3: %g", ts_measure_median(v, 3), ts_measure_median(v, 4));
    CHECK(isnan(ts_measure_median(v, 0)), "median of nothing: NaN");
}

static void test_measure(const ts_model *m) {
    const ts_config *c = ts_model_config(m);
    int L = c->n_layers, unfused = TS_N_STEPS; /* qwen3 has qk_norm: every step is a dispatch */
    ts_error err;
    ts_measurement r;

    /* Fused prefill: 3 dispatches per layer and the one LM head, zero-copy BF16 (nothing copied). */
    ts_measure_opts o = {.threads = 2, .trials = 3};
    ts_status s = ts_measure_prefill(m, &o, 8, &r, &err);
    CHECK(s == TS_OK, "prefill: %s", err.msg);
    if (!s) {
        check_measurement(&r, 3, 8, 3 * L + 1, 3, "prefill fused");
        /* A prefill's cold time includes the session's creation (a decode's is its first run). */
        CHECK(r.cold_ms >= r.create_ms && r.create_ms > 0, "cold %g ms < create %g ms", r.cold_ms, r.create_ms);
        CHECK(r.copied == 0, "zero-copy BF16 copied %zu bytes", r.copied);
        json_t *j = ts_measurement_json(&r, "prefill_tok_s");
        static const char *keys[] = {"create_ms", "cold_ms", "warm_ms_mean", "warm_ms_sd", "prefill_tok_s",
                                     "prefill_tok_s_sd", "samples_tok_s", "dispatches_per_layer",
                                     "weights_copied_bytes", "anon_huge_mb", "file_pmd_mb"};
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            CHECK(json_object_get(j, keys[k]) != NULL, "measurement JSON lacks %s", keys[k]);
        CHECK(json_object_size(j) == sizeof keys / sizeof *keys, "measurement JSON has %zu keys",
              json_object_size(j));
        CHECK(json_array_size(json_object_get(j, "samples_tok_s")) == 3 &&
                  json_number_value(json_array_get(json_object_get(j, "samples_tok_s"), 2)) == r.samples[2],
              "samples_tok_s: the trials' rates");
        CHECK(json_number_value(json_object_get(j, "prefill_tok_s")) == r.rate &&
                  json_number_value(json_object_get(j, "prefill_tok_s_sd")) == r.rate_sd &&
                  json_number_value(json_object_get(j, "warm_ms_mean")) == r.mean_ms &&
                  json_integer_value(json_object_get(j, "dispatches_per_layer")) == 3 &&
                  json_number_value(json_object_get(j, "file_pmd_mb")) == r.file_pmd_mb &&
                  json_number_value(json_object_get(j, "anon_huge_mb")) == r.anon_huge_mb,
              "measurement JSON values");
        json_decref(j);
        ts_measurement_free(&r);
        CHECK(r.samples == NULL && r.profile == NULL, "free clears the pointers");
        ts_measurement_free(&r); /* twice is harmless */
    }

    /* Unfused, copied weights, every-row LM head: one dispatch per step, still one LM head per
     * forward, and the copy is exactly the BF16 weights decode streams (tied: embedding once). */
    o = (ts_measure_opts){.threads = 2, .trials = 2, .disable = TS_OPT_ALL};
    s = ts_measure_prefill(m, &o, 8, &r, &err);
    CHECK(s == TS_OK, "unfused prefill: %s", err.msg);
    if (!s) {
        check_measurement(&r, 2, 8, unfused * L + 1, unfused, "prefill unfused");
        CHECK(r.copied == (size_t)ts_measure_decode_bytes(m, 0), "copied %zu bytes, the weights are %.0f", r.copied,
              ts_measure_decode_bytes(m, 0));
        ts_measurement_free(&r);
    }

    /* Decode: per token, 3 dispatches per layer and the LM head; one trial has sd 0. */
    o = (ts_measure_opts){.threads = 2, .trials = 1};
    s = ts_measure_decode(m, &o, 5, 3, &r, &err);
    CHECK(s == TS_OK, "decode: %s", err.msg);
    if (!s) {
        check_measurement(&r, 1, 3, 3 * L + 1, 3, "decode fused");
        CHECK(r.rate_sd == 0 && r.sd_ms == 0, "one trial: sd %g", r.rate_sd);
        json_t *j = ts_measurement_json(&r, "decode_tok_s");
        CHECK(json_object_get(j, "decode_tok_s") && json_object_get(j, "decode_tok_s_sd") &&
                  !json_object_get(j, "prefill_tok_s"),
              "decode JSON names its rate decode_tok_s");
        json_decref(j);
        ts_measurement_free(&r);
    }
    o = (ts_measure_opts){.threads = 1, .trials = 4, .disable = TS_OPT_FUSED};
    s = ts_measure_decode(m, &o, 3, 2, &r, &err);
    CHECK(s == TS_OK, "unfused decode: %s", err.msg);
    if (!s) {
        check_measurement(&r, 4, 2, unfused * L + 1, unfused, "decode unfused");
        CHECK(r.probe_fraction == 0 && r.probe_min_gbs == 0, "no probe asked: fraction %g", r.probe_fraction);
        ts_measurement_free(&r);
    }

    /* A read probe around every decode trial: each trial's GB/s over its probes, so the median
     * lies between the slowest trial over the fastest probe and the fastest over the slowest. */
    o = (ts_measure_opts){.threads = 2, .trials = 3, .probe_each_trial = 1};
    s = ts_measure_decode(m, &o, 5, 3, &r, &err);
    CHECK(s == TS_OK, "decode with probes: %s", err.msg);
    if (!s) {
        check_measurement(&r, 3, 3, 3 * L + 1, 3, "decode with probes");
        double lo = r.samples[0], hi = r.samples[0], bytes = ts_measure_decode_bytes(m, 5 + 3 / 2.0) / 1e9;
        for (int i = 1; i < 3; i++) lo = fmin(lo, r.samples[i]), hi = fmax(hi, r.samples[i]);
        CHECK(r.probe_min_gbs > 0 && r.probe_min_gbs <= r.probe_max_gbs && isfinite(r.probe_max_gbs),
              "probes %g-%g GB/s", r.probe_min_gbs, r.probe_max_gbs);
        CHECK(r.probe_fraction >= bytes * lo / r.probe_max_gbs * (1 - 1e-9) &&
                  r.probe_fraction <= bytes * hi / r.probe_min_gbs * (1 + 1e-9),
              "probe fraction %g outside [%g, %g]", r.probe_fraction, bytes * lo / r.probe_max_gbs,
              bytes * hi / r.probe_min_gbs);
        ts_measurement_free(&r);
    }

    /* Bad options: TS_ERR_ARG naming both values, nothing to free. */
    int bad[3][2] = {{0, 3}, {2, 0}, {-1, -1}};
    for (int i = 0; i < 3; i++) {
        o = (ts_measure_opts){.threads = bad[i][0], .trials = bad[i][1]};
        err.msg[0] = 0;
        s = ts_measure_prefill(m, &o, 4, &r, &err);
        CHECK(s == TS_ERR_ARG && strstr(err.msg, "threads") && strstr(err.msg, "trials") && !r.samples,
              "prefill threads %d trials %d: %s", bad[i][0], bad[i][1], err.msg);
        s = ts_measure_decode(m, &o, 4, 2, &r, &err);
        CHECK(s == TS_ERR_ARG && !r.samples, "decode threads %d trials %d: %s", bad[i][0], bad[i][1], err.msg);
    }
    /* Empty prompts or decodes: TS_ERR_ARG, nothing held (a 0-token prefill once wrote its
     * BOS past a 0-element prompt). */
    o = (ts_measure_opts){.threads = 2, .trials = 2};
    int sizes[4][2] = {{0, 2}, {-3, 2}, {4, 0}, {1, -1}};
    for (int i = 0; i < 4; i++) {
        err.msg[0] = 0;
        s = i < 2 ? ts_measure_prefill(m, &o, sizes[i][0], &r, &err)
                  : ts_measure_decode(m, &o, sizes[i][0], sizes[i][1], &r, &err);
        CHECK(s == TS_ERR_ARG && !r.samples && !r.profile && strstr(err.msg, ">= 1"), "%s of %d, %d tokens: %s %s",
              i < 2 ? "prefill" : "decode", sizes[i][0], sizes[i][1], ts_status_name(s), err.msg);
    }
    s = ts_measure_decode(m, &o, 0, 2, &r, &err);
    CHECK(s == TS_ERR_ARG && !r.samples, "decode after an empty context: %s", ts_status_name(s));

    /* Tiles handed to a measurement are applied; a tile the model has no shape for fails it
     * inside the session, which frees what the measurement held. */
    json_t *bad_tiles = json_pack("[{s:i, s:i, s:i, s:i, s:i, s:i}]", "bucket", 1, "n", 77, "k", 64, "ms", 1, "nr",
                                  1, "sb", 64);
    o = (ts_measure_opts){.threads = 2, .trials = 1, .tiles = bad_tiles};
    s = ts_measure_decode(m, &o, 4, 2, &r, &err);
    CHECK(s == TS_ERR_FORMAT && !r.samples, "a tile of no shape of the model: %s", ts_status_name(s));
    json_decref(bad_tiles);
}

static json_t *tile(int bucket, int n, int k, int ms, int nr, int sb, double gf) {
    return json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:f}", "bucket", bucket, "n", n, "k", k, "ms", ms, "nr", nr,
                     "sb", sb, "gflops", gf);
}

static void expect_parse_error(json_t *tiles, const char *field, const char *what) {
    ts_cpu_tile_rec r[4];
    int n = -1;
    ts_error err = {{0}};
    ts_status s = ts_tiles_parse(tiles, "man.json: target.tiles", r, 4, &n, &err);
    CHECK(s == TS_ERR_FORMAT && strstr(err.msg, "man.json: target.tiles") && strstr(err.msg, field),
          "%s: expected an error naming %s, got %s: %s", what, field, ts_status_name(s), err.msg);
    json_decref(tiles);
}

static void test_tiles(const ts_model *m) {
    const ts_config *c = ts_model_config(m);
    int H = c->n_embd, Q = c->n_heads * c->head_dim, KV = c->n_kv_heads * c->head_dim, F = c->n_ff;
    ts_cpu_tile_rec r[4];
    int n = -1;
    ts_error err;

    /* Absent or a string ("defaults (phase 4 did not run)"): no tiles. */
    CHECK(ts_tiles_parse(NULL, "t", r, 4, &n, &err) == TS_OK && n == 0, "NULL tiles");
    json_t *d = json_string("defaults (phase 4 did not run)");
    n = -1;
    CHECK(ts_tiles_parse(d, "t", r, 4, &n, &err) == TS_OK && n == 0, "string tiles");
    json_decref(d);

    json_t *ok = json_array();
    json_array_append_new(ok, tile(1, Q, H, 2, 4, 256, 12.5));
    json_array_append_new(ok, tile(3, H, F, 1, 2, 64, 0));
    CHECK(ts_tiles_parse(ok, "t", r, 4, &n, &err) == TS_OK && n == 2, "valid tiles: %s", err.msg);
    CHECK(r[0].bucket == 1 && r[0].n == Q && r[0].k == H && r[0].ms == 2 && r[0].nr == 4 && r[0].sb == 256 &&
              r[0].gflops == 12.5 && r[1].bucket == 3 && r[1].n == H && r[1].k == F && r[1].sb == 64,
          "parsed values");
    /* Room for one tile only. */
    err.msg[0] = 0;
    CHECK(ts_tiles_parse(ok, "t", r, 1, &n, &err) == TS_ERR_FORMAT && strstr(err.msg, "more than 1"), "over max: %s",
          err.msg);

    expect_parse_error(json_object(), "expected an array", "an object");
    expect_parse_error(json_integer(3), "expected an array", "a number");
    json_t *t = json_array();
    json_array_append_new(t, tile(1, Q, H, 1, 1, 64, 0));
    json_array_append_new(t, json_pack("{s:i, s:i, s:i, s:s, s:i, s:i}", "bucket", 1, "n", Q, "k", H, "ms", "2", "nr",
                                       1, "sb", 64));
    expect_parse_error(t, "[1].ms", "ms as a string");
    expect_parse_error(json_pack("[{s:i, s:i, s:i, s:i, s:i, s:i}]", "bucket", 1, "n", Q, "k", H, "ms", 1, "nr", -2,
                                 "sb", 64),
                       "[0].nr", "negative nr");
    expect_parse_error(json_pack("[{s:i, s:i, s:i, s:i, s:f, s:i}]", "bucket", 1, "n", Q, "k", H, "ms", 1, "nr", 1.0,
                                 "sb", 64),
                       "[0].nr", "nr as a real");
    expect_parse_error(json_pack("[{s:i, s:i, s:i, s:i, s:i}]", "bucket", 1, "n", Q, "k", H, "ms", 1, "nr", 1),
                       "[0].sb", "sb missing");
    expect_parse_error(json_pack("[{s:i, s:I, s:i, s:i, s:i, s:i}]", "bucket", 1, "n", (json_int_t)1 << 40, "k", H,
                                 "ms", 1, "nr", 1, "sb", 64),
                       "[0].n", "n too large");
    expect_parse_error(json_pack("[i]", 4), "[0].bucket", "a number instead of a tile");

    /* Applied to a session and read back: the same tiles. */
    ts_cpu *cp = NULL;
    ts_cpu_opts co = {.n_threads = 1, .force_variant = -1};
    if (ts_cpu_new(m, 8, &co, &cp, &err)) {
        CHECK(0, "%s", err.msg);
        json_decref(ok);
        return;
    }
    json_t *none = ts_tiles_json(cp);
    CHECK(json_is_array(none) && json_array_size(none) == 0, "a new session has no tuned tiles");
    json_decref(none);
    json_t *defaults = json_string("defaults (phase 4 did not run)");
    CHECK(ts_tiles_apply(cp, NULL, &err) == TS_OK && ts_tiles_apply(cp, defaults, &err) == TS_OK, "nothing to apply");
    json_decref(defaults);
    CHECK(ts_tiles_apply(cp, ok, &err) == TS_OK, "apply: %s", err.msg);
    json_t *back = ts_tiles_json(cp);
    CHECK(json_equal(back, ok), "round trip: %s", json_dumps(back, JSON_COMPACT));
    CHECK(ts_tiles_parse(back, "t", r, 4, &n, &err) == TS_OK && n == 2 && r[0].gflops == 12.5, "round trip parse");
    json_decref(back);
    /* The same shape again replaces its tile instead of adding one. */
    json_t *again = json_array();
    json_array_append_new(again, tile(1, Q, H, 3, 1, 128, 7));
    json_array_append_new(again, tile(2, KV, H, 1, 1, 32, 1)); /* a new one, (K,V) shape */
    CHECK(ts_tiles_apply(cp, again, &err) == TS_OK, "apply again: %s", err.msg);
    back = ts_tiles_json(cp);
    CHECK(json_array_size(back) == 3 &&
              json_integer_value(json_object_get(json_array_get(back, 0), "ms")) == 3 &&
              json_integer_value(json_object_get(json_array_get(back, 2), "n")) == KV,
          "replace by shape: %s", json_dumps(back, JSON_COMPACT));
    json_decref(back);
    json_decref(again);
    /* Well-formed JSON the kernels or the model do not accept: the cpu target refuses it. */
    struct {
        int bucket, n, k, ms, nr, sb;
        const char *why;
    } rej[] = {{1, Q + 1, H, 1, 1, 64, "N of no model shape"}, {1, Q, F, 1, 1, 64, "K of another shape"},
               {0, Q, H, 1, 1, 64, "bucket 0"},               {4, Q, H, 1, 1, 64, "bucket 4"},
               {1, Q, H, 4, 1, 64, "ms 4"},                   {1, Q, H, 1, 3, 64, "nr 3"},
               {1, Q, H, 1, 1, 0, "block 0"},                 {1, Q, H, 1, 1, 5000, "block 5000"}};
    for (size_t i = 0; i < sizeof rej / sizeof *rej; i++) {
        json_t *a = json_array();
        json_array_append_new(a, tile(rej[i].bucket, rej[i].n, rej[i].k, rej[i].ms, rej[i].nr, rej[i].sb, 0));
        err.msg[0] = 0;
        CHECK(ts_tiles_apply(cp, a, &err) == TS_ERR_FORMAT && strstr(err.msg, "tile 0"), "%s: %s", rej[i].why,
              err.msg);
        json_decref(a);
    }
    /* The vocabulary's LM head is a shape too. */
    json_t *lm = json_array();
    json_array_append_new(lm, tile(1, c->n_vocab, H, 1, 4, 64, 0));
    CHECK(ts_tiles_apply(cp, lm, &err) == TS_OK, "LM head tile: %s", err.msg);
    json_decref(lm);
    ts_cpu_free(cp);
    json_decref(ok);
}

/* The trajectories: one row per optimization, baseline first, the last row the deployed plan
 * with the tiles and placement it was given. */
static void test_trajectory(const ts_model *m) {
    const ts_config *c = ts_model_config(m);
    ts_perf_opts o;
    ts_perf_defaults(&o, 4);
    CHECK(o.trials == 5 && o.prefill == 128 && o.decode_tokens == 8 && o.weights == -1 && o.n_sizes == 2 &&
              o.sizes[0] == 128 && o.sizes[1] == 512,
          "phase-4 defaults");
    ts_perf_defaults(&o, 5);
    CHECK(o.sizes[1] == 1024, "phase-5 defaults: contexts 128 and 1024");
    o.threads = 2;
    o.trials = 2;
    o.decode_tokens = 2;
    json_t *tiles = json_array();
    json_array_append_new(tiles, tile(1, c->n_vocab, c->n_embd, 1, 2, 64, 3));
    ts_error err;
    for (int phase = 4; phase <= 5; phase++)
        for (int copy = 0; copy <= 1; copy++) {
            json_t *rows = json_array(), *bp = NULL, *fp = NULL;
            ts_measurement last = {0};
            int invalid = 0; /* the trajectory adds its invalid rows to it */
            ts_status s = ts_perf_trajectory(m, &o, phase, tiles, copy, 6, rows, &bp, &fp, &last, &invalid, &err);
            CHECK(s == TS_OK, "phase %d copy %d: %s", phase, copy, err.msg);
            CHECK(s || invalid == 0, "phase %d copy %d: %d invalid rows", phase, copy, invalid);
            if (s) {
                json_decref(rows);
                continue;
            }
            const char *key = phase == 4 ? "prefill_tok_s" : "decode_tok_s";
            size_t n = json_array_size(rows);
            CHECK(n == 5, "phase %d: %zu rows", phase, n);
            const json_t *first = json_array_get(rows, 0), *fin = json_array_get(rows, n - 1);
            CHECK(json_integer_value(json_object_get(first, "disabled_mask")) == TS_OPT_ALL &&
                      strstr(str(first, "step"), "baseline") &&
                      json_integer_value(json_object_get(first, "dispatches_per_layer")) == TS_N_STEPS &&
                      json_integer_value(json_object_get(first, "weights_copied_bytes")) ==
                          (json_int_t)ts_measure_decode_bytes(m, 0),
                  "phase %d baseline row: %s", phase, json_dumps(first, JSON_COMPACT));
            CHECK(json_integer_value(json_object_get(json_array_get(rows, 1), "dispatches_per_layer")) == 3,
                  "phase %d: the second row fuses", phase);
            /* Each row turns on more: the disabled masks only lose bits (up to the final row,
             * which takes the placement it is given). */
            for (size_t i = 1; i + 1 < n; i++) {
                json_int_t a = json_integer_value(json_object_get(json_array_get(rows, i - 1), "disabled_mask")),
                           b = json_integer_value(json_object_get(json_array_get(rows, i), "disabled_mask"));
                CHECK((a & b) == b, "phase %d row %zu re-disables an optimization (%lld after %lld)", phase, i,
                      (long long)b, (long long)a);
            }
            CHECK(json_integer_value(json_object_get(fin, "disabled_mask")) == (copy ? TS_OPT_ZERO_COPY : 0) &&
                      json_integer_value(json_object_get(fin, "weights_copied_bytes")) ==
                          (copy ? (json_int_t)ts_measure_decode_bytes(m, 0) : 0),
                  "phase %d copy %d final row: %s", phase, copy, json_dumps(fin, JSON_COMPACT));
            CHECK((strstr(str(fin, "step"), "huge pages") != NULL) == copy, "phase %d copy %d final step name: %s",
                  phase, copy, str(fin, "step"));
            int rows_ok = 1;
            for (size_t i = 0; i < n; i++) {
                const json_t *r = json_array_get(rows, i);
                rows_ok &= json_number_value(json_object_get(r, key)) > 0 &&
                           json_array_size(json_object_get(r, "samples_tok_s")) == 2 && !json_object_get(r, "note");
            }
            CHECK(rows_ok, "phase %d: every row has %s > 0 and 2 samples", phase, key);
            CHECK(last.samples && last.trials == 2 && last.rate == json_number_value(json_object_get(fin, key)),
                  "phase %d: *last is the final row", phase);
            CHECK(json_array_size(bp) > json_array_size(fp) && json_array_size(fp) > 0,
                  "phase %d: unfused baseline profile has more dispatches (%zu) than the final (%zu)", phase,
                  json_array_size(bp), json_array_size(fp));
            ts_measurement_free(&last);
            json_decref(bp), json_decref(fp), json_decref(rows);
        }
    /* Only the final row takes the tiles: one the model has no shape for fails it, after the
     * rows before it were measured with default tiles. */
    json_t *bad = json_array();
    json_array_append_new(bad, tile(1, c->n_vocab + 1, c->n_embd, 1, 2, 64, 3));
    json_t *rows = json_array(), *bp = NULL, *fp = NULL;
    ts_measurement last = {0};
    int invalid = 0;
    ts_status s = ts_perf_trajectory(m, &o, 5, bad, 0, 4, rows, &bp, &fp, &last, &invalid, &err);
    CHECK(s == TS_ERR_FORMAT && json_array_size(rows) == 4 && !last.samples, "a bad tile: %s, %zu rows",
          ts_status_name(s), json_array_size(rows));
    json_decref(bp), json_decref(fp), json_decref(rows), json_decref(bad);
    json_decref(tiles);
}

int main(void) {
    test_stats();
    test_probe_fraction();
    ts_model *m = NULL;
    ts_error err;
    if (ts_model_open(th_fixture("hf/qwen3_qknorm"), &m, &err)) {
        CHECK(0, "%s", err.msg);
        return th_finish("test_measure");
    }
    test_formulas(m);
    test_measure(m);
    test_tiles(m);
    test_trajectory(m);
    ts_model_close(m);
    return th_finish("test_measure");
}
