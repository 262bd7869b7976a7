/* tessera serve MODEL|DEPLOY_DIR [--host H] [--port P] [--api-key K] [--parallel N] [...]
 * An OpenAI-compatible HTTP server over one model (src/serve/). Prints
 * "listening on http://HOST:PORT" on stderr once the socket is open, serves until SIGINT or
 * SIGTERM, then stops accepting, lets the requests in flight finish and exits 0. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "deploy/deployment.h"
#include "runtime/session.h"
#include "serve/http.h"

#define TS_SERVE_LOOKUP_DEFAULT 8

static const char *k_usage =
    "tessera serve MODEL_DIR|DEPLOY_DIR [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--parallel N]\n"
    "       [--ctx N] [--chat-template FILE] [--date YYYY-MM-DD] [--think|--no-think] [--max-queue N]\n"
    "       [--cache-mb N] [--prefill-chunk N]\n"
    "       [--max-body BYTES] [--max-header BYTES] [--max-conn N] [--max-tokens-limit N] [--timeout S]\n"
    "       [--model-name NAME] [--threads N] [--weights mmap|copy] [--quant q8_0|q4_0] [--kv-cache f32|f16] [--tokenizer PATH]\n"
    "       [--temp T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--lookup N] [--lookup-ngram N]\n"
    "       [--lookup-min N] [--quiet]";

static const char *k_help =
    "  --host ADDR            address to listen on (default 127.0.0.1: this machine only)\n"
    "  --port N               port (default 8080; 0: any free port, said on stderr)\n"
    "  --api-key KEY          require \"Authorization: Bearer KEY\" on /v1/* and /metrics (also $TESSERA_API_KEY)\n"
    "  --parallel N           sequences generating together (default 1)\n"
    "  --ctx N                positions per sequence (default min(max_position_embeddings, 4096))\n"
    "  --max-queue N          requests waiting for a sequence beyond those; more get 503 (default 64)\n"
    "  --max-body BYTES       largest request body; more is 413 (default 8388608)\n"
    "  --max-header BYTES     request line + headers; more is 431 (default 65536)\n"
    "  --max-conn N           connections at once (default 64)\n"
    "  --max-tokens-limit N   the most max_tokens a request may ask (default 4096; also the default)\n"
    "  --cache-mb N           prefix cache: KV of earlier prompts kept for prompts that start the same\n"
    "                         (MiB, least recently used out; default 1024, 0: off)\n"
    "  --prefill-chunk N      prompt tokens prefilled per step, shared by the prompts being prefilled (oldest\n"
    "                         first), between the decode steps of the others (default 256; 0: whole prompts)\n"
    "  --timeout S            close a connection idle for S seconds (default 600)\n"
    "  --model-name NAME      the model id /v1/models lists (default: the directory's name)\n"
    "  --think | --no-think   enable_thinking for requests whose chat_template_kwargs lack it\n"
    "  --temp, --top-k, --top-p, --min-p, --repeat-penalty: sampling for requests that omit the field\n"
    "  --threads, --weights, --quant, --kv-cache, --tokenizer, --chat-template, --date: as for tessera run\n"
    "  --lookup N             prompt-lookup speculative decoding: up to N tokens per slot and step drafted from\n"
    "                         the prompt and reply (where the last tokens occurred before) and verified in the\n"
    "                         step's one pass; the text is exactly the text without it (default 8; 0: off)\n"
    "  --lookup-ngram N       the longest suffix matched (default 3)\n"
    "  --lookup-min N         the shortest suffix matched (default 2)\n"
    "  --quiet                no per-request log lines on stderr\n";

static int parse_size(const char *flag, const char *v, long long lo, long long hi, long long *out) {
    if (cli_parse_int(v, lo, hi, out)) {
        fprintf(stderr, "tessera serve: %s %s: expected an integer in [%lld, %lld]\n", flag, v, lo, hi);
        return -1;
    }
    return 0;
}

static const char *base_name(const char *p, char *buf, size_t n) {
    snprintf(buf, n, "%s", p);
    size_t l = strlen(buf);
    while (l > 1 && buf[l - 1] == '/') buf[--l] = 0;
    const char *b = strrchr(buf, '/');
    return b ? b + 1 : buf;
}

int cmd_serve(int argc, char **argv) {
    ts_session_opts o;
    ts_session_opts_default(&o);
    o.lookup = -1; /* serve's default below */
    ts_server_opts so;
    ts_server_opts_default(&so);
    so.api_key = getenv("TESSERA_API_KEY");
    if (so.api_key && !*so.api_key) so.api_key = NULL;
    const char *model_name = NULL;
    int quiet = 0;
    ts_error err;
    if (cli_date_from_env(&o.now, &err)) return cli_usage("serve", k_usage, err.msg);
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        long long v;
        int has = i + 1 < argc;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            printf("usage: %s\n\n%s", k_usage, k_help);
            return 0;
        } else if (!strcmp(f, "--quiet")) {
            quiet = 1;
        } else if (!strcmp(f, "--host") && has) {
            so.host = argv[++i];
        } else if (!strcmp(f, "--api-key") && has) {
            so.api_key = argv[++i];
            if (!*so.api_key) return cli_usage("serve", k_usage, "--api-key: an empty key");
        } else if (!strcmp(f, "--model-name") && has) {
            model_name = argv[++i];
        } else if (!strcmp(f, "--port") && has) {
            if (parse_size(f, argv[++i], 0, 65535, &v)) return TS_EXIT_USAGE;
            so.port = (int)v;
        } else if (!strcmp(f, "--parallel") && has) {
            if (parse_size(f, argv[++i], 1, 256, &v)) return TS_EXIT_USAGE;
            so.parallel = (int)v;
        } else if (!strcmp(f, "--cache-mb") && has) {
            if (parse_size(f, argv[++i], 0, 1 << 24, &v)) return TS_EXIT_USAGE;
            so.cache_mb = (int)v;
        } else if (!strcmp(f, "--prefill-chunk") && has) {
            if (parse_size(f, argv[++i], 0, 1 << 24, &v)) return TS_EXIT_USAGE;
            if (v == 1) return cli_usage("serve", k_usage, "--prefill-chunk 1: expected 0 (whole prompts) or >= 2 "
                                                           "(a piece of one token would run the decode arithmetic)");
            so.prefill_chunk = (int)v;
        } else if (!strcmp(f, "--max-queue") && has) {
            if (parse_size(f, argv[++i], 0, 1 << 20, &v)) return TS_EXIT_USAGE;
            so.max_queue = (int)v;
        } else if (!strcmp(f, "--max-body") && has) {
            if (parse_size(f, argv[++i], 64, 1LL << 32, &v)) return TS_EXIT_USAGE;
            so.max_body = (size_t)v;
        } else if (!strcmp(f, "--max-header") && has) {
            if (parse_size(f, argv[++i], 4096, 1 << 24, &v)) return TS_EXIT_USAGE;
            so.max_header = (size_t)v;
        } else if (!strcmp(f, "--max-conn") && has) {
            if (parse_size(f, argv[++i], 1, 1 << 16, &v)) return TS_EXIT_USAGE;
            so.max_conn = (int)v;
        } else if (!strcmp(f, "--max-tokens-limit") && has) {
            if (parse_size(f, argv[++i], 1, 1 << 24, &v)) return TS_EXIT_USAGE;
            so.max_tokens_limit = (int)v;
        } else if (!strcmp(f, "--timeout") && has) {
            if (parse_size(f, argv[++i], 1, 86400, &v)) return TS_EXIT_USAGE;
            so.timeout_s = (int)v;
        } else if (!strcmp(f, "-n") || !strcmp(f, "--system") || !strcmp(f, "--stop") || !strcmp(f, "--seed")) {
            fprintf(stderr, "tessera serve: %s is set per request (max_tokens, messages, stop, seed), not on the "
                            "server\n", f);
            return cli_usage("serve", k_usage, NULL);
        } else {
            int r = cli_session_parse_flag(&o, argc, argv, &i, &err);
            if (r < 0) return cli_usage("serve", k_usage, err.msg);
            if (r) continue;
            if (f[0] == '-' || o.model_dir) {
                fprintf(stderr, "tessera serve: unexpected argument \"%s\"\n", f);
                return cli_usage("serve", k_usage, NULL);
            }
            o.model_dir = f;
        }
    }
    if (!o.model_dir) return cli_usage("serve", k_usage, "expects MODEL_DIR (or DEPLOY_DIR)");
    char nb[4096];
    so.model_name = model_name ? model_name : base_name(o.model_dir, nb, sizeof nb);
    so.defaults = o.sample;
    so.lookup = o.lookup < 0 ? TS_SERVE_LOOKUP_DEFAULT : o.lookup;
    so.lookup_ngram = o.lookup_ngram;
    so.lookup_min = o.lookup_min;
    o.lookup = 0; /* the session's own generator is not the server's */
    so.enable_thinking = o.enable_thinking;
    so.log = quiet ? NULL : stderr;

    /* SIGINT/SIGTERM are taken by sigwait below: blocked here, before any thread exists, so
     * every thread inherits the mask and none of them is interrupted. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    ts_deployment dep;
    ts_session *s = NULL;
    ts_status st = cli_resolve_deployment("serve", &o, &dep, &err);
    if (!st) st = ts_session_open(&o, 2, NULL, NULL, &s, &err);
    ts_server *srv = NULL;
    if (!st) st = ts_server_start(s, &so, &srv, &err);
    if (st) {
        ts_session_close(s);
        return cli_fail("serve", st, &err);
    }
    if (!ts_session_template(s))
        fprintf(stderr, "tessera serve: note: the model has no chat template: /v1/chat/completions answers 400 "
                        "(--chat-template FILE gives it one)\n");
    const char *h = so.host;
    int v6 = strchr(h, ':') != NULL;
    char placed[64] = "read in place (mmap)";
    if (o.quant >= 0) snprintf(placed, sizeof placed, "quantized at load (--quant)");
    else if (ts_session_copied_bytes(s))
        snprintf(placed, sizeof placed, "%.0f MB copied at load", (double)ts_session_copied_bytes(s) / 1e6);
    fprintf(stderr,
            "tessera serve: model %s, %d sequence(s) of %d positions, %d threads, prefill chunk %d, lookup %d, "
            "weights %s, KV cache %s\n",
            so.model_name, ts_server_slots(srv), ts_session_n_ctx(s), ts_session_threads(s), so.prefill_chunk,
            so.lookup, placed, ts_kv_cache_name(ts_session_model(s)->kv_type)); /* what the slots hold */
    fprintf(stderr, "tessera serve: listening on http://%s%s%s:%d\n", v6 ? "[" : "", h, v6 ? "]" : "",
            ts_server_port(srv));
    fflush(stderr);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "tessera serve: %s: finishing the requests in flight\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    ts_server_shutdown(srv);
    ts_session_close(s);
    fprintf(stderr, "tessera serve: stopped\n");
    return 0;
}
