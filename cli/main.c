/* tessera: one binary, subcommands. Dispatch, help and the shared error/exit helpers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} k_cmds[] = {
    {"synth", cmd_synth, "write a deterministic random-weight checkpoint of a seed-model shape"},
    {"inspect", cmd_inspect, "print a model's features, tensors, parameters and memory needs"},
    {"logits", cmd_logits, "run the oracle on token ids and write all positions' logits"},
    {"deploy", cmd_deploy, "deploy a model: phases 0-7, each closed by a numerical gate against the oracle"},
    {"tokenize", cmd_tokenize, "encode text with a model's tokenizer.json (ids, token text, --bench)"},
    {"eval", cmd_eval, "phase 7: re-check a deployment independently (hashes, gates, determinism, speed claims)"},
    {"bench", cmd_bench, "prefill/decode speed of the cpu target against this machine's peaks"},
    {"quantize", cmd_quantize, "write a model's weights as a Q8_0 / Q4_0 GGUF that tessera and llama.cpp load"},
    {"run", cmd_run, "generate text from a prompt, streamed as it is produced"},
    {"chat", cmd_chat, "multi-turn chat with the model's chat template (stdin, one line a turn)"},
    {"template", cmd_template, "print what a model's chat template makes of a conversation (messages JSON)"},
};

int cli_exit_code(ts_status s) { return (int)s; }

int cli_fail(const char *cmd, ts_status s, const ts_error *err) {
    fflush(stdout); /* the tables so far first: with both streams on one pipe, a line of them
                     * split by this message at a buffer boundary reads as garbage */
    fprintf(stderr, "tessera %s: error (%s): %s\n", cmd, ts_status_name(s), err->msg);
    return cli_exit_code(s);
}

int cli_usage(const char *cmd, const char *usage, const char *problem) {
    if (problem) fprintf(stderr, "tessera %s: %s\n", cmd, problem);
    fprintf(stderr, "usage: %s\n", usage);
    return TS_EXIT_USAGE;
}

int cli_parse_int(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static void help(FILE *f) {
    fprintf(f, "tessera %s: deploy and run LLMs with a numerical gate after every phase\n\n"
               "usage: tessera COMMAND [ARGS]   (tessera COMMAND --help for its options)\n\n",
            ts_version());
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        fprintf(f, "  %-8s %s\n", k_cmds[i].name, k_cmds[i].help);
    fprintf(f, "\nexit codes: 0 ok, 1 bad argument, 2 i/o, 3 malformed file, 4 unsupported, "
               "5 tensor/shape mismatch,\n            6 non-finite value, 7 out of memory, "
               "8 gate failed, 64 usage\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        help(stderr);
        return TS_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        help(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("tessera %s\n", ts_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        if (!strcmp(argv[1], k_cmds[i].name)) return k_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "tessera: unknown command \"%s\"\n\n", argv[1]);
    help(stderr);
    return TS_EXIT_USAGE;
}
