/* tessera quantize MODEL OUT.gguf --type q8_0|q4_0|bf16 [--force] [--json]: the work is
 * ts_quantize_file (src/model/gguf_export.c); this parses arguments and prints the summary. */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cli.h"
#include "io/quant.h"
#include "runtime/quantize_file.h"

static const char *k_usage = "tessera quantize MODEL OUT.gguf --type q8_0|q4_0|bf16 [--force] [--json]\n"
                             "  MODEL     a Hugging Face directory (BF16/F16/F32 safetensors + tokenizer.json) or a .gguf\n"
                             "  --type    Q8_0 (8-bit) or Q4_0 (4-bit) for every weight matrix, or BF16 (what llama.cpp's\n"
                             "            converter writes with --outtype bf16); norms and biases F32\n"
                             "  --force   overwrite OUT.gguf if it exists (never the input)\n"
                             "  --json    one JSON object on stdout instead of the summary";

int cmd_quantize(int argc, char **argv) {
    const char *pos[2] = {0};
    int npos = 0, force = 0, as_json = 0, type = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s\n", k_usage);
            return 0;
        } else if (!strcmp(argv[i], "--force")) {
            force = 1;
        } else if (!strcmp(argv[i], "--json")) {
            as_json = 1;
        } else if (!strcmp(argv[i], "--type")) {
            if (i + 1 >= argc) return cli_usage("quantize", k_usage, "--type expects q8_0, q4_0 or bf16");
            type = strcasecmp(argv[++i], "bf16") ? ts_quant_parse(argv[i]) : (int)TS_DTYPE_BF16;
            if (type < 0) return cli_usage("quantize", k_usage, "--type expects q8_0, q4_0 or bf16");
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "tessera quantize: unknown option \"%s\"\n", argv[i]);
            return cli_usage("quantize", k_usage, NULL);
        } else if (npos < 2) {
            pos[npos++] = argv[i];
        } else {
            return cli_usage("quantize", k_usage, "too many arguments");
        }
    }
    if (npos < 2) return cli_usage("quantize", k_usage, "expected MODEL and OUT.gguf");
    if (type < 0) return cli_usage("quantize", k_usage, "--type q8_0|q4_0|bf16 is required");
    ts_quantize_report r;
    ts_error err;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ts_status s = ts_quantize_file(pos[0], pos[1], (ts_dtype)type, force, &r, &err);
    if (s) return cli_fail("quantize", s, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    const char *tok = r.tokenizer_from_gguf ? "copied from the input GGUF" : "tokenizer.json";
    if (as_json) {
        printf("{\"out\": \"%s\", \"type\": \"%s\", \"quantized_tensors\": %d, \"f32_tensors\": %d, "
               "\"params\": %llu, \"weight_bytes\": %llu, \"tokenizer\": \"%s\", \"pre\": %s%s%s, "
               "\"chat_template\": %s, \"seconds\": %.3f}\n",
               pos[1], ts_dtype_name((ts_dtype)type), r.n_quantized, r.n_f32, (unsigned long long)r.params,
               (unsigned long long)r.bytes_weights, r.tokenizer_from_gguf ? "gguf" : "tokenizer.json",
               r.pre ? "\"" : "", r.pre ? r.pre : "null", r.pre ? "\"" : "", r.chat_template ? "true" : "false", secs);
    } else {
        printf("wrote %s: %d tensors %s, %d F32, %.1f M parameters in %.1f MB (%.2f bits/weight), %.2f s\n", pos[1],
               r.n_quantized, ts_dtype_name((ts_dtype)type), r.n_f32, (double)r.params / 1e6,
               (double)r.bytes_weights / 1e6, 8.0 * (double)r.bytes_weights / (double)(r.params ? r.params : 1), secs);
        printf("tokenizer: %s%s%s%s; chat template: %s\n", tok, r.pre ? " (tokenizer.ggml.pre \"" : "",
               r.pre ? r.pre : "", r.pre ? "\")" : "", r.chat_template ? "yes" : "none");
    }
    return 0;
}
