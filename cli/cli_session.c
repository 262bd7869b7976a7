/* The session options shared by `tessera run` and `tessera chat` (sampling, context, threads,
 * tokenizer, weights, chat switches): argv parsing belongs to the command line, the session
 * only receives the parsed ts_session_opts. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/error.h"
#include "io/quant.h"
#include "model/model.h"
#include "runtime/session.h"

const char *cli_session_flags_help(void) {
    return "  -n N                 tokens to generate per reply (default 256)\n"
           "  --temp T             temperature; 0 = greedy (default 0.8)\n"
           "  --top-k K            keep the K most likely tokens; 0 = off (default 40)\n"
           "  --top-p P            keep the smallest set with mass >= P; 1 = off (default 0.95)\n"
           "  --min-p P            drop tokens below P x the top probability; 0 = off (default 0.05)\n"
           "  --repeat-penalty R   HF repetition penalty over the context; 1 = off (default 1)\n"
           "  --seed S             sampling seed (default 0); same seed, same output\n"
           "  --stop STR           stop when STR appears (not printed); repeatable, up to 16\n"
           "  --threads N          worker threads (default: all cores)\n"
           "  --tokenizer PATH     tokenizer.json or its directory (default: MODEL)\n"
           "  --ctx N              KV cache capacity in tokens (default min(max positions, 4096))\n"
           "  --weights mmap|copy  read the weights from the file's mmap, or copy them into huge pages\n"
           "                       at load (default: a deployment's measured choice, else a copy for\n"
           "                       Q8_0/Q4_0 files and the mmap for others)\n"
           "  --quant q8_0|q4_0    quantize BF16/F16/F32 weight matrices to Q8_0 / Q4_0 at load (as\n"
           "                       `tessera quantize` would write them); default: the weights as stored\n"
           "  --kv-cache f32|f16   what the KV cache holds: f16 halves its memory and what a long-context\n"
           "                       decode reads (K and V rounded to IEEE half); default: a deployment's\n"
           "                       choice, else f32\n"
           "  --system TEXT        system message (chat templates)\n"
           "  --chat-template FILE a Jinja chat template (.jinja) used instead of the model's own\n"
           "  --date YYYY-MM-DD    the date the template's strftime_now() sees (Llama-3.2's \"Today Date\"),\n"
           "                       for reproducible prompts; also YYYY-MM-DDTHH:MM:SS; default: the\n"
           "                       environment's TESSERA_DATE, else the local time at each turn\n"
           "  --think | --no-think Qwen3's enable_thinking switch (default: template's)\n"
           "  --lookup N           prompt-lookup speculative decoding: up to N drafted tokens (copied from\n"
           "                       where the last tokens occurred before) verified in one pass per step;\n"
           "                       the output is exactly the output without it (default 0: off; serve 8)\n"
           "  --lookup-ngram N     the longest suffix matched (default 3)\n"
           "  --lookup-min N       the shortest suffix matched (default 2)\n";
}

static int parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_float(const char *s, double lo, double hi, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi) return -1;
    *out = (float)v;
    return 0;
}

int cli_date_from_env(int64_t *now, ts_error *err) {
    const char *v = getenv("TESSERA_DATE");
    if (!v || !*v) return 0;
    int64_t t = ts_chat_parse_date(v, "the environment variable TESSERA_DATE", err);
    if (t < 0) return -1;
    *now = t;
    return 0;
}

int cli_session_parse_flag(ts_session_opts *o, int argc, char **argv, int *i, ts_error *err) {
    const char *f = argv[*i];
    if (!strcmp(f, "--think") || !strcmp(f, "--no-think")) {
        o->enable_thinking = !strcmp(f, "--think");
        return 1;
    }
    static const char *const with_value[] = {"-n", "--temp", "--top-k", "--top-p", "--min-p",
                                             "--repeat-penalty", "--seed", "--stop", "--threads",
                                             "--tokenizer", "--ctx", "--system", "--weights", "--quant", "--kv-cache",
                                             "--chat-template", "--date", "--lookup", "--lookup-ngram", "--lookup-min"};
    int known = 0;
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= !strcmp(f, with_value[k]);
    if (!known) return 0;
    if (*i + 1 >= argc) {
        ts_fail(err, TS_ERR_ARG, "%s expects a value", f);
        return -1;
    }
    const char *v = argv[++*i];
    long n;
    int bad = 0;
    const char *want = "";
    if (!strcmp(f, "-n")) {
        bad = parse_long(v, 1, 1 << 24, &n), want = "an integer in [1, 16777216]";
        if (!bad) o->max_tokens = (int)n;
    } else if (!strcmp(f, "--temp")) {
        bad = parse_float(v, 0, 100, &o->sample.temp), want = "a number in [0, 100]";
    } else if (!strcmp(f, "--top-k")) {
        bad = parse_long(v, 0, 1 << 24, &n), want = "an integer >= 0";
        if (!bad) o->sample.top_k = (int)n;
    } else if (!strcmp(f, "--top-p")) {
        bad = parse_float(v, 1e-6, 1, &o->sample.top_p) , want = "a number in (0, 1]";
    } else if (!strcmp(f, "--min-p")) {
        bad = parse_float(v, 0, 1, &o->sample.min_p), want = "a number in [0, 1]";
    } else if (!strcmp(f, "--repeat-penalty")) {
        bad = parse_float(v, 1e-3, 1e3, &o->sample.repeat_penalty), want = "a number in [0.001, 1000]";
    } else if (!strcmp(f, "--seed")) {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(v, &end, 10);
        bad = !*v || *end || errno || *v == '-', want = "a non-negative integer";
        if (!bad) o->sample.seed = s;
    } else if (!strcmp(f, "--stop")) {
        bad = o->n_stop >= TS_SESSION_MAX_STOP || !*v, want = "a non-empty string, at most 16 times";
        if (!bad) o->stop[o->n_stop++] = v;
    } else if (!strcmp(f, "--threads")) {
        bad = parse_long(v, 1, 256, &n), want = "an integer in [1, 256]";
        if (!bad) o->n_threads = (int)n;
    } else if (!strcmp(f, "--ctx")) {
        bad = parse_long(v, 1, 1 << 24, &n), want = "an integer in [1, 16777216]";
        if (!bad) o->n_ctx = (int)n;
    } else if (!strcmp(f, "--lookup")) {
        bad = parse_long(v, 0, TS_GEN_LOOKUP_MAX, &n), want = "an integer in [0, 31]";
        if (!bad) o->lookup = (int)n;
    } else if (!strcmp(f, "--lookup-ngram")) {
        bad = parse_long(v, 1, 64, &n), want = "an integer in [1, 64]";
        if (!bad) o->lookup_ngram = (int)n;
    } else if (!strcmp(f, "--lookup-min")) {
        bad = parse_long(v, 1, 64, &n), want = "an integer in [1, 64]";
        if (!bad) o->lookup_min = (int)n;
    } else if (!strcmp(f, "--tokenizer")) {
        o->tokenizer = v;
    } else if (!strcmp(f, "--system")) {
        o->system = v;
    } else if (!strcmp(f, "--chat-template")) {
        o->chat_template = v;
    } else if (!strcmp(f, "--date")) {
        if ((o->now = ts_chat_parse_date(v, "--date", err)) < 0) return -1;
    } else if (!strcmp(f, "--weights")) {
        /* placement only: a weight type is --quant, so that both can be chosen together */
        bad = strcmp(v, "mmap") && strcmp(v, "copy");
        want = ts_quant_parse(v) >= 0 ? "mmap or copy (where the weights live; for a weight type use --quant)"
                                      : "mmap or copy";
        if (!bad) o->copy_weights = !strcmp(v, "copy");
    } else if (!strcmp(f, "--quant")) {
        bad = (o->quant = ts_quant_parse(v)) < 0, want = "q8_0 or q4_0";
    } else if (!strcmp(f, "--kv-cache")) {
        bad = (o->kv_cache = ts_kv_cache_parse(v)) < 0, want = "f32 or f16";
    }
    if (bad) {
        ts_fail(err, TS_ERR_ARG, "%s expects %s, got \"%s\"", f, want, v);
        return -1;
    }
    return 1;
}
