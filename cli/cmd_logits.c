/* tessera logits MODEL --tokens 1,2,3 [--target ref] --out FILE [--last] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/error.h"
#include "io/logits_file.h"
#include "io/quant.h"
#include "model/memory.h"
#include "model/quantize.h"
#include "target/cpu/cpu_target.h"
#include "target/ref/ref_mem.h"

static const char *k_usage =
    "tessera logits MODEL_DIR --tokens ID,ID,... --out FILE [--target ref|cpu] [--threads N]\n"
    "                      [--last] [--hidden FILE] [--quant q8_0|q4_0] [--kv-cache f32|f16]";

/* Parses "1,2,3" into a malloc'd array; returns the count or -1. */
static int parse_tokens(const char *s, int32_t **out) {
    int n = 1;
    for (const char *p = s; *p; p++) n += *p == ',';
    int32_t *t = malloc(sizeof *t * (size_t)n);
    if (!t) return -1;
    int k = 0;
    const char *p = s;
    while (k < n) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char buf[32];
        long long v;
        if (len == 0 || len >= sizeof buf) break;
        memcpy(buf, p, len);
        buf[len] = 0;
        if (cli_parse_int(buf, 0, 0x7fffffff, &v)) break;
        t[k++] = (int32_t)v;
        if (!comma) break;
        p = comma + 1;
    }
    if (k != n) {
        free(t);
        return -1;
    }
    *out = t;
    return n;
}

int cmd_logits(int argc, char **argv) {
    const char *model = NULL, *tokens = NULL, *outp = NULL, *target = "ref", *hidp = NULL;
    int last = 0, quant = -1, kv = TS_DTYPE_F32;
    long long threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) outp = argv[++i];
        else if (!strcmp(argv[i], "--target") && i + 1 < argc) target = argv[++i];
        else if (!strcmp(argv[i], "--hidden") && i + 1 < argc) hidp = argv[++i];
        else if (!strcmp(argv[i], "--last")) last = 1;
        else if (!strcmp(argv[i], "--kv-cache") && i + 1 < argc) {
            if ((kv = ts_kv_cache_parse(argv[++i])) < 0) return cli_usage("logits", k_usage, "--kv-cache expects f32 or f16");
        }
        else if (!strcmp(argv[i], "--quant") && i + 1 < argc) {
            if ((quant = ts_quant_parse(argv[++i])) < 0) return cli_usage("logits", k_usage, "--quant expects q8_0 or q4_0");
        }
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 1, 256, &threads))
                return cli_usage("logits", k_usage, "--threads expects an integer in [1, 256]");
        }
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s\n\nWrites int32 n_tokens, int32 n_vocab, then n_tokens x n_vocab "
                   "float32 (little-endian);\nwith --last only the last position (n_tokens = 1).\n"
                   "--hidden writes int32 n_states, n_tokens, hidden, then the embedding output and the\n"
                   "residual stream after each layer (before the final norm) as float32.\n",
                   k_usage);
            return 0;
        } else if (argv[i][0] == '-' || model) return cli_usage("logits", k_usage, "unexpected argument");
        else model = argv[i];
    }
    if (!model || !tokens || !outp) return cli_usage("logits", k_usage, "expects MODEL_DIR, --tokens and --out");
    int use_cpu = !strcmp(target, "cpu");
    if (!use_cpu && strcmp(target, "ref") != 0) {
        fprintf(stderr, "tessera logits: target \"%s\" is not available, expected \"ref\" or \"cpu\"\n", target);
        return cli_exit_code(TS_ERR_UNSUPPORTED);
    }
    int32_t *ids;
    int n = parse_tokens(tokens, &ids);
    if (n < 1) return cli_usage("logits", k_usage, "--tokens expects comma-separated token ids");
    ts_error err;
    ts_model *m = NULL;
    ts_ref *r = NULL;
    ts_cpu *cp = NULL;
    ts_cpu_opts co = {.n_threads = (int)threads, .force_variant = -1};
    float *logits = NULL, *hidden = NULL;
    ts_status s = ts_model_open(model, &m, &err);
    /* the oracle then runs the dequantized quantized weights exactly (ts_dtype_to_f32) */
    if (!s && quant >= 0) s = ts_model_quantize(m, (ts_dtype)quant, &err);
    if (!s) m->kv_type = kv; /* the oracle's cache rounded as the target's holds it */
    /* Both refusals come before the first large allocation: a request beyond the trained
     * context, or one the machine cannot hold, fails in milliseconds instead of running (or
     * swapping) for minutes. */
    if (!s) s = ts_model_check_context(m, n, "--tokens: token count", &err);
    size_t logits_bytes = 0, hidden_bytes = 0;
    if (!s) {
        ts_mem_need need;
        if (use_cpu) ts_cpu_mem_need(m, n, &co, &need);
        else ts_ref_mem_need(m, n, n, (int)threads, &need);
        logits_bytes = sizeof(float) * (last ? 1 : (size_t)n) * (size_t)ts_model_n_vocab(m);
        if (hidp)
            hidden_bytes = sizeof(float) * (size_t)(ts_model_n_layers(m) + 1) * (size_t)n * (size_t)ts_model_n_embd(m);
        need.outputs = logits_bytes + hidden_bytes;
        char d[256], w[32], a[32], src[64], what[64];
        uint64_t avail;
        ts_mem_describe(&need, d, sizeof d);
        fprintf(stderr, "logits: memory for %d tokens on the %s target: %s; weights %s mapped", n, target, d,
                ts_mem_str(need.weights_mapped, w, sizeof w));
        if (ts_mem_available(&avail, src, sizeof src))
            fprintf(stderr, "; %s available (%s)", ts_mem_str(avail, a, sizeof a), src);
        fputc('\n', stderr);
        snprintf(what, sizeof what, "logits of %d tokens", n);
        s = ts_mem_check(&need, what, &err);
        if (s && !last && n > 1) {
            size_t V = (size_t)ts_model_n_vocab(m);
            snprintf(err.msg + strlen(err.msg), sizeof err.msg - strlen(err.msg),
                     "; --last keeps one row of logits (%s instead of %s)", ts_mem_str(sizeof(float) * V, w, sizeof w),
                     ts_mem_str(logits_bytes, a, sizeof a));
        }
    }
    if (!s) s = use_cpu ? ts_cpu_new(m, n, &co, &cp, &err) : ts_ref_new(m, n, &r, &err);
    if (!s && r) s = ts_ref_set_threads(r, (int)threads, &err);
    if (!s) {
        logits = malloc(logits_bytes);
        if (hidp) hidden = malloc(hidden_bytes);
        if (!logits || (hidp && !hidden)) s = ts_fail(&err, TS_ERR_NOMEM, "out of memory for outputs");
    }
    if (!s)
        s = use_cpu ? ts_cpu_forward(cp, ids, n, logits, !last, hidden, &err)
                    : ts_ref_forward(r, ids, n, logits, !last, hidden, &err);
    if (!s) s = ts_logits_write(outp, last ? 1 : n, ts_model_n_vocab(m), logits, &err);
    if (!s && hidp)
        s = ts_hidden_write(hidp, ts_model_n_layers(m) + 1, n, ts_model_n_embd(m), hidden, &err);
    int rc = s ? cli_fail("logits", s, &err) : 0;
    if (!s) fprintf(stderr, "logits: %d positions x %d vocab -> %s\n", last ? 1 : n, ts_model_n_vocab(m), outp);
    free(logits);
    free(hidden);
    free(ids);
    ts_ref_free(r);
    ts_cpu_free(cp);
    ts_model_close(m);
    return rc;
}
