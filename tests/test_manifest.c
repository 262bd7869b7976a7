/* manifest.json and report.md (manifest.h) from hand-built phase reports, and the deployment
 * read back from them (deployment.h): model identity hashed independently, target threads,
 * tiles and placement, the gate summary, the built-in threshold table, the performance claims
 * copied from phases 4-5; manifests with a broken field are refused with errors naming it. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "deploy/deployment.h"
#include "deploy/gates.h"
#include "deploy/manifest.h"
#include "io/sha256.h"
#include "tharness.h"

static const char *str(const json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "(null)";
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (b) b[n] = 0;
    fclose(f);
    return b;
}

/* A phase report as the phases write it: gate rows from the table, and pass. */
static json_t *report(int phase, int pass) {
    static const struct {
        int phase;
        const char *metric;
        double ok, bad;
    } rows[] = {{0, "top1_frac", 1, 0.5},           {0, "pearson", 0.999999, 0.9}, {0, "rel_l2", 1e-6, 1e-2},
                {1, "rel_l2", 1e-3, 0.5},           {1, "pearson", 0.99999, 0.9},  {2, "cosine", 0.99999, 0.9},
                {2, "min_row_cosine_hd64", 0.999, 0.5}, {3, "lockstep_violations", 0, 2},
                {4, "position_violations", 0, 1},   {4, "invalid_measurements", 0, 1},
                {5, "lockstep_violations", 0, 1},   {5, "invalid_measurements", 0, 2},
                {6, "generation_runs", 1, 0}};
    json_t *gates = json_array();
    char ph[24];
    snprintf(ph, sizeof ph, "phase%d", phase);
    int all = 1;
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        if (rows[i].phase == phase) {
            json_t *row = ts_gate_row(ph, rows[i].metric, pass ? rows[i].ok : rows[i].bad, NULL, &all);
            CHECK(row != NULL, "%s/%s is not in the threshold table", ph, rows[i].metric);
            if (row) json_array_append_new(gates, row);
        }
    CHECK(all == pass, "phase %d: the hand-built gate rows do not give pass %d", phase, pass);
    return json_pack("{s:i, s:o, s:b}", "phase", phase, "gates", gates, "pass", pass);
}

static json_t *tile(int bucket, int n, int k, int ms, int nr, int sb, double gf) {
    return json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:f}", "bucket", bucket, "n", n, "k", k, "ms", ms, "nr", nr,
                     "sb", sb, "gflops", gf);
}

static json_t *phase4(const char *weights, int probed) {
    json_t *r = report(4, 1);
    json_t *tiles = json_array();
    json_array_append_new(tiles, tile(1, 64, 32, 2, 4, 256, 11.5));
    json_array_append_new(tiles, tile(3, 320, 32, 1, 2, 64, 3.25));
    json_object_set_new(r, "tiles", tiles);
    json_object_set_new(r, "trials", json_integer(5));
    json_object_set_new(
        r, "placement",
        probed ? json_pack("{s:s, s:f, s:f, s:f, s:i, s:i, s:i, s:f, s:s}", "weights", weights, "mmap_decode_tok_s",
                           100.0, "copy_decode_tok_s", 111.0, "median_ratio", 1.11, "rounds", 5, "tokens_per_round", 4,
                           "copy_faster_rounds", 5, "copy_extra_load_ms", 3.0, "rule", "the probe's rule")
               : json_pack("{s:s, s:s}", "weights", weights, "why", "set by --weights"));
    json_object_set_new(r, "trajectory",
                        json_pack("[{s:s, s:f, s:f, s:f, s:f, s:i}, {s:s, s:f, s:f, s:f, s:f, s:i}]", "step",
                                  "baseline row", "cold_ms", 90.0, "warm_ms_mean", 40.0, "warm_ms_sd", 1.0,
                                  "prefill_tok_s", 3200.0, "dispatches_per_layer", 9, "step", "final row", "cold_ms",
                                  30.0, "warm_ms_mean", 10.0, "warm_ms_sd", 0.5, "prefill_tok_s", 12800.0,
                                  "dispatches_per_layer", 3));
    json_object_set_new(r, "ttft",
                        json_pack("[{s:i, s:f, s:f, s:f, s:f}, {s:i, s:f, s:f, s:f, s:f}]", "tokens", 128,
                                  "warm_ms_mean", 12.5, "warm_ms_sd", 0.25, "prefill_tok_s", 10240.0, "cold_ms", 41.0,
                                  "tokens", 512, "warm_ms_mean", 60.0, "warm_ms_sd", 2.0, "prefill_tok_s", 8533.0,
                                  "cold_ms", 95.0));
    json_object_set_new(r, "profile_final",
                        json_pack("[{s:s, s:f, s:f, s:f}]", "dispatch", "ffn_group", "calls_per_run", 3.0,
                                  "ms_per_run", 7.0, "share", 0.7));
    return r;
}

static json_t *phase5(void) {
    json_t *r = report(5, 1);
    json_object_set_new(r, "trials", json_integer(6));
    json_object_set_new(r, "decode_tokens", json_integer(8));
    json_object_set_new(r, "peak_read_gbs", json_real(12.5));
    json_object_set_new(r, "trajectory", json_pack("[{s:s, s:f, s:f, s:f, s:f, s:i}]", "step", "only row", "cold_ms",
                                                   2.0, "warm_ms_mean", 160.0, "warm_ms_sd", 3.0, "decode_tok_s",
                                                   50.0, "dispatches_per_layer", 3));
    json_object_set_new(r, "contexts",
                        json_pack("[{s:i, s:f, s:f, s:f, s:f}, {s:i, s:f, s:f, s:f, s:f}]", "context", 128,
                                  "decode_tok_s", 50.0, "decode_tok_s_sd", 1.5, "gb_s", 2.5, "bandwidth_fraction", 0.2,
                                  "context", 1024, "decode_tok_s", 40.0, "decode_tok_s_sd", 1.0, "gb_s", 2.25,
                                  "bandwidth_fraction", 0.18));
    return r;
}

static json_t *load(const char *dir, const char *name) {
    char p[8300];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    CHECK(j != NULL, "%s: %s", p, je.text);
    return j;
}

/* The model identity, hashed here from the files themselves. */
static void check_identity(const ts_model *m, const json_t *man, const char *model_dir) {
    const json_t *id = json_object_get(man, "model");
    char *abs = realpath(model_dir, NULL), hex[65], path[8300];
    ts_error err;
    CHECK(abs && !strcmp(str(id, "dir"), abs), "model.dir %s, expected %s", str(id, "dir"), abs ? abs : "?");
    free(abs);
    CHECK(!strcmp(str(id, "architecture"), m->cfg.arch_name), "architecture %s", str(id, "architecture"));
    CHECK(json_integer_value(json_object_get(id, "n_params")) == (json_int_t)m->n_params && m->n_params > 0,
          "n_params");
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    CHECK(ts_sha256_file(path, hex, &err) == TS_OK && !strcmp(str(id, "config_sha256"), hex),
          "config_sha256 %s, the file's %s", str(id, "config_sha256"), hex);
    const json_t *w = json_object_get(id, "weights"), *f;
    CHECK(json_array_size(w) == 3, "the sharded fixture has 3 weight files, manifest lists %zu", json_array_size(w));
    size_t i;
    int seen = 0;
    json_array_foreach(w, i, f) {
        snprintf(path, sizeof path, "%s/%s", model_dir, str(f, "file"));
        struct stat st;
        CHECK(!strchr(str(f, "file"), '/') && stat(path, &st) == 0, "weights[%zu].file %s: a file of the model dir", i,
              str(f, "file"));
        CHECK(json_integer_value(json_object_get(f, "bytes")) == (json_int_t)st.st_size, "weights[%zu].bytes", i);
        CHECK(ts_sha256_file(path, hex, &err) == TS_OK && !strcmp(str(f, "sha256"), hex), "weights[%zu].sha256 %s", i,
              str(f, "sha256"));
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(str(json_array_get(w, j), "file"), str(f, "file")), "%s listed twice", str(f, "file"));
        seen++;
    }
    CHECK(seen == 3, "weights");
}

static void check_thresholds(const json_t *man) {
    int n;
    const ts_threshold *t = ts_thresholds(&n);
    const json_t *a = json_object_get(man, "thresholds");
    CHECK(json_array_size(a) == (size_t)n && n > 0, "thresholds: %zu rows, the table has %d", json_array_size(a), n);
    for (int i = 0; i < n && i < (int)json_array_size(a); i++) {
        const json_t *r = json_array_get(a, (size_t)i);
        CHECK(!strcmp(str(r, "phase"), t[i].phase) && !strcmp(str(r, "metric"), t[i].metric) &&
                  !strcmp(str(r, "op"), t[i].op == TS_GATE_GE ? ">=" : "<=") &&
                  json_number_value(json_object_get(r, "value")) == t[i].value,
              "thresholds[%d] %s %s differs from the table's %s %s", i, str(r, "phase"), str(r, "metric"), t[i].phase,
              t[i].metric);
    }
}

/* The gate summary: one entry per phase that ran, its pass and its gate rows. */
static void check_gates(const json_t *man, json_t *const reps[TS_N_PHASES], int forced) {
    const json_t *g = json_object_get(man, "gates");
    int all = 1, ran = 0;
    for (int p = 0; p < TS_N_PHASES; p++) {
        char key[24];
        snprintf(key, sizeof key, "phase%d", p);
        const json_t *e = json_object_get(g, key);
        if (!reps[p]) {
            CHECK(e == NULL, "gates.%s present for a phase that did not run", key);
            continue;
        }
        ran++;
        int pass = json_is_true(json_object_get(reps[p], "pass"));
        all &= pass;
        CHECK(json_is_boolean(json_object_get(e, "pass")) && json_is_true(json_object_get(e, "pass")) == pass,
              "gates.%s.pass", key);
        CHECK(json_equal(json_object_get(e, "gates"), json_object_get(reps[p], "gates")), "gates.%s.gates", key);
    }
    CHECK(json_object_size(g) == (size_t)ran, "gates: %zu entries for %d phases", json_object_size(g), ran);
    CHECK(json_is_boolean(json_object_get(man, "all_gates_passed")) &&
              json_is_true(json_object_get(man, "all_gates_passed")) == all,
          "all_gates_passed should be %d", all);
    CHECK(json_is_boolean(json_object_get(man, "forced")) && json_is_true(json_object_get(man, "forced")) == forced,
          "forced should be %d", forced);
}

/* performance: the claims phase 7 re-measures, copied from the reports. */
static void check_performance(const json_t *man, const json_t *p4, const json_t *p5) {
    const json_t *perf = json_object_get(man, "performance");
    if (!p4 && !p5) {
        CHECK(json_is_null(perf), "performance without phases 4-5: null");
        return;
    }
    const json_t *pre = json_object_get(perf, "prefill"), *dec = json_object_get(perf, "decode"), *r;
    const json_t *ttft = json_object_get(p4, "ttft"), *ctx = json_object_get(p5, "contexts");
    CHECK(json_array_size(pre) == json_array_size(ttft) && json_is_array(pre), "performance.prefill: %zu rows",
          json_array_size(pre));
    size_t i;
    json_array_foreach(ttft, i, r) {
        const json_t *c = json_array_get(pre, i);
        CHECK(json_equal(json_object_get(c, "tokens"), json_object_get(r, "tokens")) &&
                  json_equal(json_object_get(c, "ttft_ms_mean"), json_object_get(r, "warm_ms_mean")) &&
                  json_equal(json_object_get(c, "ttft_ms_sd"), json_object_get(r, "warm_ms_sd")) &&
                  json_equal(json_object_get(c, "prefill_tok_s"), json_object_get(r, "prefill_tok_s")) &&
                  json_equal(json_object_get(c, "cold_ms"), json_object_get(r, "cold_ms")),
              "performance.prefill[%zu] is not ttft[%zu]", i, i);
    }
    CHECK(json_array_size(dec) == json_array_size(ctx) && json_is_array(dec), "performance.decode: %zu rows",
          json_array_size(dec));
    json_array_foreach(ctx, i, r) {
        const json_t *c = json_array_get(dec, i);
        CHECK(json_equal(json_object_get(c, "context"), json_object_get(r, "context")) &&
                  json_equal(json_object_get(c, "decode_tok_s"), json_object_get(r, "decode_tok_s")) &&
                  json_equal(json_object_get(c, "decode_tok_s_sd"), json_object_get(r, "decode_tok_s_sd")) &&
                  json_equal(json_object_get(c, "gb_s"), json_object_get(r, "gb_s")),
              "performance.decode[%zu] is not contexts[%zu]", i, i);
    }
    const json_t *dt = json_object_get(perf, "decode_tokens_per_trial");
    CHECK(p5 ? json_integer_value(dt) == json_integer_value(json_object_get(p5, "decode_tokens")) : json_is_null(dt),
          "decode_tokens_per_trial");
    CHECK(json_integer_value(json_object_get(perf, "trials")) ==
              json_integer_value(json_object_get(p4 ? p4 : p5, "trials")),
          "performance.trials: %lld", (long long)json_integer_value(json_object_get(perf, "trials")));
}

/* target: threads, tiles and placement from phase 4 (defaults and mmap without it). */
static void check_target(const json_t *man, int threads, const json_t *p4, const char *weights) {
    const json_t *t = json_object_get(man, "target");
    CHECK(!strcmp(str(t, "name"), "cpu") && json_integer_value(json_object_get(t, "threads")) == threads,
          "target.threads %lld, expected %d", (long long)json_integer_value(json_object_get(t, "threads")), threads);
    CHECK(json_integer_value(json_object_get(t, "dispatches_per_layer")) == 3 &&
              json_array_size(json_object_get(t, "dispatch_plan")) == 3,
          "target: 3 dispatches per layer in the plan");
    CHECK(json_is_string(json_object_get(t, "variant")) && json_is_string(json_object_get(t, "prefill_kernel")) &&
              json_is_object(json_object_get(t, "features")),
          "target: variant, prefill kernel, features");
    const json_t *tiles = json_object_get(t, "tiles");
    if (p4 && json_object_get(p4, "tiles"))
        CHECK(json_equal(tiles, json_object_get(p4, "tiles")), "target.tiles are phase 4's");
    else
        CHECK(json_is_string(tiles), "target.tiles without phase 4: a string (defaults)");
    CHECK(!strcmp(str(t, "weights"), weights), "target.weights %s, expected %s", str(t, "weights"), weights);
    const json_t *pl = p4 ? json_object_get(p4, "placement") : NULL;
    CHECK(pl ? json_equal(json_object_get(t, "weights_probe"), pl) : !json_object_get(t, "weights_probe"),
          "target.weights_probe: phase 4's placement");
}

static void check_common(const ts_model *m, const json_t *man, const char *model_dir) {
    CHECK(!strcmp(str(man, "tessera_version"), ts_version()), "tessera_version %s", str(man, "tessera_version"));
    const char *c = str(man, "created");
    CHECK(strlen(c) == 20 && c[4] == '-' && c[10] == 'T' && c[13] == ':' && c[19] == 'Z', "created %s", c);
    check_identity(m, man, model_dir);
    check_thresholds(man);
}

static void expect_in(const char *md, const char *needle, const char *what) {
    CHECK(md && strstr(md, needle), "%s: report.md lacks \"%s\"", what, needle);
}

static ts_status write_case(const ts_model *m, const char *dir, json_t *reps[TS_N_PHASES], int threads, int forced,
                            const json_t *diag) {
    ts_error err;
    ts_status s = ts_manifest_write(m, dir, reps, threads, forced, diag, &err);
    CHECK(s == TS_OK, "manifest write into %s: %s", dir, err.msg);
    return s;
}

/* A mutation of a good manifest that ts_deployment_load must refuse, naming `field`. */
static void expect_refused(const json_t *good, const char *name, const char *field, ts_status want,
                           void (*mutate)(json_t *)) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", th_tmpdir(name));
    json_t *man = json_deep_copy(good);
    mutate(man);
    char path[8300];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    CHECK(json_dump_file(man, path, 0) == 0, "write %s", path);
    json_decref(man);
    ts_deployment d;
    ts_error err = {{0}};
    ts_status s = ts_deployment_load(dir, &d, &err);
    CHECK(s == want && strstr(err.msg, path) && strstr(err.msg, field), "%s: expected %s naming %s, got %s: %s", name,
          ts_status_name(want), field, ts_status_name(s), err.msg);
}

static json_t *target(json_t *man) { return json_object_get(man, "target"); }
static void no_dir(json_t *m) { json_object_del(json_object_get(m, "model"), "dir"); }
static void int_dir(json_t *m) { json_object_set_new(json_object_get(m, "model"), "dir", json_integer(3)); }
static void no_model(json_t *m) { json_object_del(m, "model"); }
static void no_threads(json_t *m) { json_object_del(target(m), "threads"); }
static void zero_threads(json_t *m) { json_object_set_new(target(m), "threads", json_integer(0)); }
static void many_threads(json_t *m) { json_object_set_new(target(m), "threads", json_integer(257)); }
static void string_threads(json_t *m) { json_object_set_new(target(m), "threads", json_string("4")); }
static void real_threads(json_t *m) { json_object_set_new(target(m), "threads", json_real(4.0)); }
static void no_target(json_t *m) { json_object_del(m, "target"); }
static void object_tiles(json_t *m) { json_object_set_new(target(m), "tiles", json_object()); }
static void negative_tile(json_t *m) {
    json_object_set_new(json_array_get(json_object_get(target(m), "tiles"), 1), "nr", json_integer(-1));
}
static void string_tile(json_t *m) {
    json_object_set_new(json_array_get(json_object_get(target(m), "tiles"), 0), "k", json_string("32"));
}
static void too_many_tiles(json_t *m) {
    json_t *a = json_array();
    for (int i = 0; i < TS_DEPLOY_MAX_TILES + 1; i++) json_array_append_new(a, tile(1, 64, 32, 1, 1, 64, 0));
    json_object_set_new(target(m), "tiles", a);
}
static void bad_weights(json_t *m) { json_object_set_new(target(m), "weights", json_string("huge-pages")); }
static void int_weights(json_t *m) { json_object_set_new(target(m), "weights", json_integer(1)); }

int main(void) {
    ts_error err;
    /* The hash the checks below compare against, on a known vector (FIPS 180-2 "abc"). */
    char tmp[4096], abc[4200], hex[65] = {0};
    snprintf(tmp, sizeof tmp, "%s", th_tmpdir("manifest"));
    snprintf(abc, sizeof abc, "%s/abc", tmp);
    FILE *f = fopen(abc, "wb");
    if (f) fputs("abc", f), fclose(f);
    CHECK(ts_sha256_file(abc, hex, &err) == TS_OK &&
              !strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
          "sha256(\"abc\") = %s", hex);

    char model_dir[4096];
    snprintf(model_dir, sizeof model_dir, "%s", th_fixture("hf/llama_untied_sharded"));
    ts_model *m = NULL;
    if (ts_model_open(model_dir, &m, &err)) {
        CHECK(0, "%s", err.msg);
        return th_finish("test_manifest");
    }

    /* A: every gate of phases 0-5 passed, the probe chose the copy, a diagnosis attached. */
    char dir_a[4200];
    snprintf(dir_a, sizeof dir_a, "%s", th_tmpdir("manifest/a"));
    json_t *reps[TS_N_PHASES] = {0};
    for (int p = 0; p < 4; p++) reps[p] = report(p, 1);
    reps[4] = phase4("copy", 1);
    reps[5] = phase5();
    json_t *diag = json_pack("{s:s, s:i, s:[], s:[{s:i, s:f, s:f, s:f, s:i}]}", "summary",
                             "the hand-written diagnosis summary", "failing_layer", 1, "steps", "layers", "layer", 0,
                             "cosine", 0.5, "min_row_cosine", 0.25, "rel_l2", 0.75, "nonfinite", 0);
    json_t *man = NULL;
    if (!write_case(m, dir_a, reps, 3, 0, diag) && (man = load(dir_a, "manifest.json"))) {
        check_common(m, man, model_dir);
        check_target(man, 3, reps[4], "copy");
        check_gates(man, reps, 0);
        check_performance(man, reps[4], reps[5]);
        char p[8300];
        snprintf(p, sizeof p, "%s/report.md", dir_a);
        char *md = slurp(p);
        expect_in(md, "# Deployment report:", "A");
        static const char *names[6] = {"| 0 oracle |", "| 1 kernels |", "| 2 block |",
                                       "| 3 model |",  "| 4 prefill |", "| 5 decode |"};
        for (int i = 0; i < 6; i++) expect_in(md, names[i], "A");
        expect_in(md, "| PASS |", "A");
        CHECK(md && !strstr(md, "**FAIL**"), "A: no failing gate in report.md");
        expect_in(md, "Phases not run: none.", "A");
        expect_in(md, "Weight placement: **copy**", "A");
        expect_in(md, "the probe's rule", "A");
        expect_in(md, "| 128 | 41.0 | 12.50 +- 0.25 | 10240.00 |", "A: TTFT row");
        expect_in(md, "| 1024 | 40.00 +- 1.00 | 2.25 | 18% |", "A: decode row");
        expect_in(md, "| final row | 30.0 | 10.00 +- 0.50 | 12800.00 | 4.00x | 3 |", "A: trajectory speed-up");
        expect_in(md, "| ffn_group | 3.0 | 7.000 | 70.0% |", "A: profile");
        expect_in(md, "## Diagnosis", "A");
        expect_in(md, "the hand-written diagnosis summary", "A");
        free(md);

        ts_deployment d;
        CHECK(ts_deployment_is(dir_a) && !ts_deployment_is(tmp), "ts_deployment_is");
        err.msg[0] = 0;
        CHECK(ts_deployment_load(dir_a, &d, &err) == TS_OK, "load A: %s", err.msg);
        char *abs = realpath(model_dir, NULL);
        CHECK(abs && !strcmp(d.model_dir, abs), "A: model_dir %s", d.model_dir);
        free(abs);
        CHECK(d.threads == 3 && d.copy_weights == 1 && d.all_gates_passed == 1 && d.n_tiles == 2, "A: read back %d "
              "threads, copy %d, passed %d, %d tiles", d.threads, d.copy_weights, d.all_gates_passed, d.n_tiles);
        CHECK(d.tiles[0].bucket == 1 && d.tiles[0].n == 64 && d.tiles[0].k == 32 && d.tiles[0].ms == 2 &&
                  d.tiles[0].nr == 4 && d.tiles[0].sb == 256 && d.tiles[0].gflops == 11.5 && d.tiles[1].bucket == 3 &&
                  d.tiles[1].n == 320 && d.tiles[1].nr == 2 && d.tiles[1].sb == 64,
              "A: tiles read back");

        /* Broken manifests: each refused with an error naming the manifest and the field. */
        expect_refused(man, "manifest/no_dir", "model.dir", TS_ERR_FORMAT, no_dir);
        expect_refused(man, "manifest/int_dir", "model.dir", TS_ERR_FORMAT, int_dir);
        expect_refused(man, "manifest/no_model", "model.dir", TS_ERR_FORMAT, no_model);
        expect_refused(man, "manifest/no_threads", "target.threads", TS_ERR_FORMAT, no_threads);
        expect_refused(man, "manifest/zero_threads", "target.threads", TS_ERR_FORMAT, zero_threads);
        expect_refused(man, "manifest/many_threads", "target.threads", TS_ERR_FORMAT, many_threads);
        expect_refused(man, "manifest/string_threads", "target.threads", TS_ERR_FORMAT, string_threads);
        expect_refused(man, "manifest/real_threads", "target.threads", TS_ERR_FORMAT, real_threads);
        expect_refused(man, "manifest/no_target", "target.threads", TS_ERR_FORMAT, no_target);
        expect_refused(man, "manifest/object_tiles", "target.tiles", TS_ERR_FORMAT, object_tiles);
        expect_refused(man, "manifest/negative_tile", "target.tiles[1].nr", TS_ERR_FORMAT, negative_tile);
        expect_refused(man, "manifest/string_tile", "target.tiles[0].k", TS_ERR_FORMAT, string_tile);
        expect_refused(man, "manifest/too_many_tiles", "more than 64", TS_ERR_FORMAT, too_many_tiles);
        expect_refused(man, "manifest/bad_weights", "target.weights", TS_ERR_FORMAT, bad_weights);
        expect_refused(man, "manifest/int_weights", "target.weights", TS_ERR_FORMAT, int_weights);
        /* Not JSON; no manifest at all. */
        char bad[4200], p2[8300];
        snprintf(bad, sizeof bad, "%s", th_tmpdir("manifest/not_json"));
        snprintf(p2, sizeof p2, "%s/manifest.json", bad);
        f = fopen(p2, "w");
        if (f) fputs("{\"model\": {\"dir\": \"x\"},\n  \"target\": ", f), fclose(f);
        ts_deployment d2;
        err.msg[0] = 0;
        CHECK(ts_deployment_load(bad, &d2, &err) == TS_ERR_FORMAT && strstr(err.msg, p2) && strstr(err.msg, "line 2"),
              "truncated JSON: %s", err.msg);
        err.msg[0] = 0;
        CHECK(ts_deployment_load(tmp, &d2, &err) == TS_ERR_IO && strstr(err.msg, "manifest.json"), "no manifest: %s",
              err.msg);
        /* What is optional: all_gates_passed absent reads as not passed; weights absent as mmap. */
        json_t *opt = json_deep_copy(man);
        json_object_del(opt, "all_gates_passed");
        json_object_del(target(opt), "weights");
        json_object_set_new(target(opt), "tiles", json_string("defaults (phase 4 did not run)"));
        snprintf(bad, sizeof bad, "%s", th_tmpdir("manifest/optional"));
        snprintf(p2, sizeof p2, "%s/manifest.json", bad);
        json_dump_file(opt, p2, 0);
        json_decref(opt);
        err.msg[0] = 0;
        CHECK(ts_deployment_load(bad, &d2, &err) == TS_OK && d2.all_gates_passed == 0 && d2.copy_weights == 0 &&
                  d2.n_tiles == 0 && d2.threads == 3,
              "optional fields: %s", err.msg);
        json_decref(man);
    }
    json_decref(diag);

    /* B: phase 2 failed, --force ran phase 3, phases 4-5 did not run. */
    char dir_b[4200];
    snprintf(dir_b, sizeof dir_b, "%s", th_tmpdir("manifest/b"));
    json_decref(reps[2]);
    reps[2] = report(2, 0);
    json_t *p4 = reps[4], *p5 = reps[5];
    reps[4] = reps[5] = NULL;
    if (!write_case(m, dir_b, reps, 1, 1, NULL) && (man = load(dir_b, "manifest.json"))) {
        check_common(m, man, model_dir);
        check_target(man, 1, NULL, "mmap");
        check_gates(man, reps, 1);
        check_performance(man, NULL, NULL);
        char p[8300];
        snprintf(p, sizeof p, "%s/report.md", dir_b);
        char *md = slurp(p);
        expect_in(md, "| 2 block | cosine |", "B");
        expect_in(md, "| **FAIL** |", "B");
        expect_in(md, "Phases not run: 4 prefill, 5 decode.", "B");
        CHECK(md && !strstr(md, "## Performance") && !strstr(md, "## Diagnosis") && !strstr(md, "| 4 prefill |"),
              "B: no performance, diagnosis or phase-4 rows");
        free(md);
        ts_deployment d;
        err.msg[0] = 0;
        CHECK(ts_deployment_load(dir_b, &d, &err) == TS_OK && d.threads == 1 && d.copy_weights == 0 &&
                  d.all_gates_passed == 0 && d.n_tiles == 0,
              "B read back: %s", err.msg);
        json_decref(man);
    }

    /* C: phase 4 with --weights mmap (no probe), phase 5 not run; D: phase 5 alone. */
    char dir_c[4200];
    snprintf(dir_c, sizeof dir_c, "%s", th_tmpdir("manifest/c"));
    json_decref(reps[2]);
    reps[2] = report(2, 1);
    reps[4] = phase4("mmap", 0);
    if (!write_case(m, dir_c, reps, 2, 0, NULL) && (man = load(dir_c, "manifest.json"))) {
        check_target(man, 2, reps[4], "mmap");
        check_gates(man, reps, 0);
        check_performance(man, reps[4], NULL);
        char p[8300];
        snprintf(p, sizeof p, "%s/report.md", dir_c);
        char *md = slurp(p);
        expect_in(md, "Weight placement: **mmap** (set by --weights).", "C");
        expect_in(md, "Phases not run: 5 decode.", "C");
        CHECK(md && !strstr(md, "Decode trajectory"), "C: no decode section");
        free(md);
        json_decref(man);
    }
    char dir_d[4200];
    snprintf(dir_d, sizeof dir_d, "%s", th_tmpdir("manifest/d"));
    json_decref(reps[4]);
    reps[4] = NULL;
    reps[5] = p5;
    if (!write_case(m, dir_d, reps, 4, 0, NULL) && (man = load(dir_d, "manifest.json"))) {
        check_target(man, 4, NULL, "mmap");
        check_performance(man, NULL, reps[5]);
        json_decref(man);
    }
    /* A placement value the manifest does not know is recorded as the mmap, which it is. */
    char dir_e[4200];
    snprintf(dir_e, sizeof dir_e, "%s", th_tmpdir("manifest/e"));
    reps[4] = phase4("huge", 0);
    if (!write_case(m, dir_e, reps, 4, 0, NULL) && (man = load(dir_e, "manifest.json"))) {
        CHECK(!strcmp(str(target(man), "weights"), "mmap"), "unknown placement: target.weights %s",
              str(target(man), "weights"));
        json_decref(man);
    }

    /* An output directory that does not exist: TS_ERR_IO naming it, nothing written. */
    char nodir[4300];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir", tmp);
    err.msg[0] = 0;
    CHECK(ts_manifest_write(m, nodir, reps, 2, 0, NULL, &err) == TS_ERR_IO && strstr(err.msg, nodir),
          "unwritable output: %s", err.msg);

    for (int p = 0; p < TS_N_PHASES; p++) json_decref(reps[p]);
    json_decref(p4);
    ts_model_close(m);
    return th_finish("test_manifest");
}
