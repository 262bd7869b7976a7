/* gguf_fixtures_probe.c: ask libllama (llama.cpp) for reference data on one GGUF model.
 *
 * Not part of the tessera build (CMakeLists.txt globs no C file under tools). tools/gen_gguf_fixtures.py compiles it
 * against a llama.cpp build that lives outside the repository:
 *
 *   cc -O1 -o probe tools/gguf_fixtures_probe.c -I LLAMA_CPP/include -I LLAMA_CPP/ggml/include \
 *      -L LLAMA_CPP/build/bin -lllama -lggml -lggml-base -Wl,-rpath,LLAMA_CPP/build/bin
 *
 * Usage: probe MODEL.gguf PROMPT N_GEN LOGITS_OUT.bin
 *
 * The prompt is tokenized by llama.cpp with add_special=1 (so a BOS is put first when the vocab
 * asks for one) and parse_special=0; an empty PROMPT gives BOS alone. Every prompt position is
 * evaluated in one batch with its logits requested, and those rows are written to LOGITS_OUT.bin
 * (int32 n_tokens, int32 n_vocab, then n_tokens*n_vocab float32, little-endian, row-major). Then
 * N_GEN tokens are produced greedily (argmax of the logits, lowest id on ties), one decode per
 * token, stopping early only at an end-of-generation token. A JSON object with the prompt ids, the
 * generated ids and their pieces goes to stdout; llama.cpp's own log goes to stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void json_str(FILE *f, const char *s, int n)
{
    fputc('"', f);
    for (int i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static int argmax(const float *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT N_GEN LOGITS_OUT.bin\n", argv[0]);
        return 2;
    }
    const char *path = argv[1], *prompt = argv[2], *out_path = argv[4];
    int n_gen = atoi(argv[3]);

    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(path, mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", path); return 1; }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int n_vocab = llama_vocab_n_tokens(vocab);

    int cap = (int)strlen(prompt) + 8;
    llama_token *ptoks = malloc(sizeof(llama_token) * cap);
    int n_prompt = llama_tokenize(vocab, prompt, (int32_t)strlen(prompt), ptoks, cap, true, false);
    if (n_prompt <= 0) { fprintf(stderr, "tokenize failed (%d)\n", n_prompt); return 1; }

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot create context\n"); return 1; }

    struct llama_batch b = llama_batch_init(512, 0, 1);
    b.n_tokens = n_prompt;
    for (int i = 0; i < n_prompt; i++) {
        b.token[i] = ptoks[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    if (llama_decode(ctx, b)) { fprintf(stderr, "decode failed\n"); return 1; }

    FILE *lf = fopen(out_path, "wb");
    if (!lf) { perror(out_path); return 1; }
    int32_t hdr[2] = { n_prompt, n_vocab };
    fwrite(hdr, sizeof hdr, 1, lf);
    for (int i = 0; i < n_prompt; i++)
        fwrite(llama_get_logits_ith(ctx, i), sizeof(float), (size_t)n_vocab, lf);
    fclose(lf);

    llama_token *gen = malloc(sizeof(llama_token) * (n_gen + 1));
    int n_done = 0;
    int pos = n_prompt;
    const float *last = llama_get_logits_ith(ctx, n_prompt - 1);
    while (n_done < n_gen) {
        llama_token t = argmax(last, n_vocab);
        gen[n_done++] = t;
        if (llama_vocab_is_eog(vocab, t)) break;
        b.n_tokens = 1;
        b.token[0] = t;
        b.pos[0] = pos++;
        b.n_seq_id[0] = 1;
        b.seq_id[0][0] = 0;
        b.logits[0] = 1;
        if (llama_decode(ctx, b)) { fprintf(stderr, "decode failed\n"); return 1; }
        last = llama_get_logits_ith(ctx, 0);
    }

    printf("{\"n_vocab\": %d, \"prompt\": ", n_vocab);
    json_str(stdout, prompt, (int)strlen(prompt));
    printf(", \"prompt_ids\": [");
    for (int i = 0; i < n_prompt; i++) printf("%s%d", i ? ", " : "", ptoks[i]);
    printf("], \"generated_ids\": [");
    for (int i = 0; i < n_done; i++) printf("%s%d", i ? ", " : "", gen[i]);
    printf("], \"generated_pieces\": [");
    char buf[256];
    for (int i = 0; i < n_done; i++) {
        int n = llama_token_to_piece(vocab, gen[i], buf, sizeof buf, 0, true);
        if (n < 0) n = 0;
        printf("%s", i ? ", " : "");
        json_str(stdout, buf, n);
    }
    printf("]}\n");

    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    free(ptoks);
    free(gen);
    llama_backend_free();
    return 0;
}
