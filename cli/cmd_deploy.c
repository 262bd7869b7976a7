/* tessera deploy MODEL [--phases 0-7] [--golden FILE | --hf-python PY [--hf-script FILE]] [--out DIR]
 *                [--threads N] [--force] [--json] [--trials N] [--prefill N] [--prefill-sizes LIST]
 *                [--decode-contexts LIST]
 *                [--decode-tokens N] [--weights auto|mmap|copy] [--quant q8_0|q4_0] [--kv-cache f32|f16]
 *                [--inject-fault STEP[:nan|:last][@LAYER]]
 * Parses the arguments into ts_deploy_opts; the phase driver is src/deploy/driver.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "deploy/deploy.h"
#include "io/quant.h"
#include "model/model.h"

static const char *k_usage =
    "tessera deploy MODEL_DIR|FILE.gguf [--phases 0-7] [--golden GOLDEN_JSON | --hf-python PYTHON [--hf-script FILE]]\n"
    "                      [--out DIR] [--threads N] [--force]\n"
    "                      [--json] [--trials N] [--prefill N] [--prefill-sizes 128,512]\n"
    "                      [--decode-contexts 128,1024] [--decode-tokens N] [--weights auto|mmap|copy]\n"
    "                      [--quant q8_0|q4_0]   (phases 1-7 on the weight matrices quantized at load)\n"
    "                      [--kv-cache f32|f16]  (what phases 1-7's KV caches hold, the oracle's alike)\n"
    "                      [--inject-fault STEP[:nan|:last][@LAYER]]   (debug: corrupts one cpu step)";

/* "2", "0-3": first and last phase; -1 on a malformed range. */
static int parse_phases(const char *p, int *lo, int *hi) {
    char *end;
    long a = strtol(p, &end, 10), b = a;
    if (end == p) return -1;
    if (*end == '-') {
        const char *q = end + 1;
        b = strtol(q, &end, 10);
        if (end == q) return -1;
    }
    if (*end || a < 0 || b < a || b > 7) return -1;
    *lo = (int)a;
    *hi = (int)b;
    return 0;
}

/* "128,512" -> sizes; -1 when malformed. */
static int parse_sizes(const char *s, ts_perf_opts *o) {
    o->n_sizes = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > (1 << 20) || o->n_sizes == TS_PERF_MAX_SIZES) return -1;
        o->sizes[o->n_sizes++] = (int)v;
        s = end;
        if (*s == ',') s++;
        else if (*s) return -1;
    }
    return o->n_sizes ? 0 : -1;
}

int cmd_deploy(int argc, char **argv) {
    const char *phases = "0-7", *fault_spec = NULL;
    int as_json = 0;
    long long v;
    ts_deploy_opts o;
    ts_deploy_defaults(&o);
    ts_perf_opts *p4 = &o.p4, *p5 = &o.p5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--phases") && i + 1 < argc) phases = argv[++i];
        else if (!strcmp(argv[i], "--golden") && i + 1 < argc) o.golden = argv[++i];
        else if (!strcmp(argv[i], "--hf-python") && i + 1 < argc) o.hf_python = argv[++i];
        else if (!strcmp(argv[i], "--hf-script") && i + 1 < argc) o.hf_script = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) o.out_dir = argv[++i];
        else if (!strcmp(argv[i], "--inject-fault") && i + 1 < argc) fault_spec = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 1, 256, &v))
                return cli_usage("deploy", k_usage, "--threads expects an integer in [1, 256]");
            o.threads = (int)v;
        } else if (!strcmp(argv[i], "--trials") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 5, 1000, &v))
                return cli_usage("deploy", k_usage, "--trials expects an integer in [5, 1000]");
            p4->trials = p5->trials = (int)v;
        } else if (!strcmp(argv[i], "--prefill") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 1, 1 << 20, &v)) return cli_usage("deploy", k_usage, "--prefill expects N >= 1");
            p4->prefill = (int)v;
        } else if (!strcmp(argv[i], "--decode-tokens") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 1, 1 << 16, &v))
                return cli_usage("deploy", k_usage, "--decode-tokens expects N >= 1");
            p5->decode_tokens = (int)v;
        } else if (!strcmp(argv[i], "--weights") && i + 1 < argc) {
            const char *w = argv[++i];
            if (strcmp(w, "auto") && strcmp(w, "mmap") && strcmp(w, "copy"))
                return cli_usage("deploy", k_usage, "--weights expects auto, mmap or copy");
            p4->weights = !strcmp(w, "auto") ? -1 : !strcmp(w, "copy");
        } else if (!strcmp(argv[i], "--quant") && i + 1 < argc) {
            if ((o.quant = ts_quant_parse(argv[++i])) < 0) return cli_usage("deploy", k_usage, "--quant expects q8_0 or q4_0");
        } else if (!strcmp(argv[i], "--kv-cache") && i + 1 < argc) {
            if ((o.kv_cache = ts_kv_cache_parse(argv[++i])) < 0) return cli_usage("deploy", k_usage, "--kv-cache expects f32 or f16");
        } else if (!strcmp(argv[i], "--prefill-sizes") && i + 1 < argc) {
            if (parse_sizes(argv[++i], p4))
                return cli_usage("deploy", k_usage, "--prefill-sizes expects up to 8 comma-separated lengths");
        } else if (!strcmp(argv[i], "--decode-contexts") && i + 1 < argc) {
            if (parse_sizes(argv[++i], p5))
                return cli_usage("deploy", k_usage, "--decode-contexts expects up to 8 comma-separated lengths");
        } else if (!strcmp(argv[i], "--force")) o.force = 1;
        else if (!strcmp(argv[i], "--json")) as_json = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s\n", k_usage);
            return 0;
        } else if (argv[i][0] == '-' || o.model_dir) return cli_usage("deploy", k_usage, "unexpected argument");
        else o.model_dir = argv[i];
    }
    if (!o.model_dir) return cli_usage("deploy", k_usage, "expects MODEL_DIR");
    if (o.golden && o.hf_python) return cli_usage("deploy", k_usage, "--golden and --hf-python exclude each other");
    if (o.hf_script && !o.hf_python) return cli_usage("deploy", k_usage, "--hf-script needs --hf-python");
    if (parse_phases(phases, &o.lo, &o.hi)) return cli_usage("deploy", k_usage, "--phases expects N or A-B within 0-7");
    if ((o.golden || o.hf_python) && o.lo > 0)
        return cli_usage("deploy", k_usage, "--golden and --hf-python feed phase 0, which --phases leaves out");
    ts_error err;
    ts_cpu_fault fault;
    if (fault_spec) {
        if (ts_cpu_fault_parse(fault_spec, &fault, &err)) return cli_usage("deploy", k_usage, err.msg);
        o.fault = &fault;
    }
    /* Phase 7 runs this binary's `eval` in a fresh process. */
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) self[n] = 0, o.eval_exe = self;
    o.out = as_json ? stderr : stdout;
    o.json = as_json ? stdout : NULL;
    ts_status s = ts_deploy_run(&o, &err);
    return s ? cli_fail("deploy", s, &err) : 0;
}
