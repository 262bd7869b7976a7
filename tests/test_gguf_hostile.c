/* Hostile GGUF models end to end (ts_model_open, sessions): strings used as C strings must not
 * hold a NUL (general.architecture, tokenizer.chat_template); tensor names map only in their
 * canonical spelling (blk.N. with N in decimal, no sign, no leading zero, no overflow), and a
 * name that is not a GGUF one is unexpected even when it is a Hugging Face name; metadata gives
 * the same bounds config.json does (head size at least 2, heads x head size at most 2^20); a
 * llama Q/K bias stored in a block type, which cannot be un-permuted row by row, is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "model/model.h"
#include "runtime/session.h"
#include "tharness.h"

static const char *g_dir;

typedef struct edit {
    const char *rename_from, *rename_to; /* a tensor name to write differently */
    const char *arch;                    /* general.architecture (default llama) */
    const char *tmpl;                    /* tokenizer.chat_template, or NULL */
    int q_bias_q8;                       /* attn_q/k/v biases, q's in Q8_0 */
    uint32_t hidden, heads, key_length;  /* 0: defaults 32, 2, absent */
} edit;

/* hidden 32 (or e->hidden), ffn 64, 1 layer, heads / 1 kv head, vocab 8 with an SPM vocabulary. */
static void write_model(const char *path, const edit *e) {
    ts_gguf_writer *w = ts_gguf_writer_new();
    const char *arch = e->arch ? e->arch : "llama";
    uint32_t H = e->hidden ? e->hidden : 32, heads = e->heads ? e->heads : 2;
    uint32_t hd = e->key_length ? e->key_length : H / heads;
    char k[128];
    ts_gguf_w_str(w, "general.architecture", arch);
#define U32(key, v) snprintf(k, sizeof k, "llama.%s", key), ts_gguf_w_u32(w, k, v)
    U32("context_length", 64);
    U32("embedding_length", H);
    U32("feed_forward_length", 64);
    U32("block_count", 1);
    U32("attention.head_count", heads);
    U32("attention.head_count_kv", 1);
    if (e->key_length) U32("attention.key_length", e->key_length);
#undef U32
    ts_gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    const char *toks[8] = {"<unk>", "<s>", "</s>", "a", "b", "ab", "\xE2\x96\x81", "\xE2\x96\x81" "a"};
    float scores[8] = {0, 0, 0, -1, -2, -3, -4, -5};
    int32_t types[8] = {2, 3, 3, 1, 1, 1, 1, 1};
    ts_gguf_w_str(w, "tokenizer.ggml.model", "llama");
    ts_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 8);
    ts_gguf_w_arr(w, "tokenizer.ggml.scores", TS_GGUF_F32, scores, 8);
    ts_gguf_w_arr(w, "tokenizer.ggml.token_type", TS_GGUF_I32, types, 8);
    ts_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
    ts_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (e->tmpl) ts_gguf_w_str(w, "tokenizer.chat_template", e->tmpl);
    float *buf = calloc((size_t)64 * 1024, sizeof *buf);
    for (int i = 0; i < 64 * 1024; i++) buf[i] = (float)((i * 37) % 17 - 8) / 64.0f;
    int64_t Q = (int64_t)heads * hd;
    struct {
        const char *name;
        int nd;
        int64_t s0, s1;
    } ts[] = {{"token_embd.weight", 2, 8, H},          {"output_norm.weight", 1, H, 0},
              {"blk.0.attn_norm.weight", 1, H, 0},     {"blk.0.attn_q.weight", 2, Q, H},
              {"blk.0.attn_k.weight", 2, hd, H},       {"blk.0.attn_v.weight", 2, hd, H},
              {"blk.0.attn_output.weight", 2, H, Q},   {"blk.0.ffn_norm.weight", 1, H, 0},
              {"blk.0.ffn_gate.weight", 2, 64, H},     {"blk.0.ffn_up.weight", 2, 64, H},
              {"blk.0.ffn_down.weight", 2, H, 64}};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        int64_t sh[2] = {ts[i].s0, ts[i].s1};
        const char *name = e->rename_from && !strcmp(ts[i].name, e->rename_from) ? e->rename_to : ts[i].name;
        ts_gguf_w_tensor(w, name, TS_DTYPE_F32, ts[i].nd, sh, buf);
    }
    if (e->q_bias_q8) {
        uint8_t q8[34 * 4] = {0}; /* 128 elements at most */
        int64_t sq[1] = {Q}, sk[1] = {hd};
        ts_gguf_w_tensor(w, "blk.0.attn_q.bias", TS_DTYPE_Q8_0, 1, sq, q8);
        ts_gguf_w_tensor(w, "blk.0.attn_k.bias", TS_DTYPE_F32, 1, sk, buf);
        ts_gguf_w_tensor(w, "blk.0.attn_v.bias", TS_DTYPE_F32, 1, sk, buf);
    }
    ts_error err = {0};
    CHECK(ts_gguf_writer_save(w, path, &err) == TS_OK, "%s", err.msg);
    ts_gguf_writer_free(w);
    free(buf);
}

/* Replaces the first occurrence of `from` in the file by `to` (same length). */
static void patch(const char *path, const char *from, const char *to, size_t n) {
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len);
    size_t got = fread(b, 1, (size_t)len, f);
    int done = 0;
    for (size_t i = 0; i + n <= got && !done; i++)
        if (!memcmp(b + i, from, n)) {
            fseek(f, (long)i, SEEK_SET);
            fwrite(to, 1, n, f);
            done = 1;
        }
    CHECK(done, "patch: \"%s\" not found in %s", from, path);
    fclose(f);
    free(b);
}

static char *path_of(const char *name) {
    static char p[1200];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    return p;
}

/* ts_model_open must fail with status want and a message holding the file and needle; NULL
 * needle: must open. */
static void expect_open(const char *path, ts_status want, const char *needle, const char *what) {
    ts_model *m = NULL;
    ts_error e = {0};
    ts_status s = ts_model_open(path, &m, &e);
    CHECK(s == want && (!needle || (strstr(e.msg, needle) && strstr(e.msg, path))), "%s: status %d (want %d): %s",
          what, (int)s, (int)want, e.msg);
    ts_model_close(m);
}

static void test_arch_nul(void) {
    const char *p = path_of("arch_nul.gguf");
    write_model(p, &(edit){.arch = "llamaXevil"});
    expect_open(p, TS_ERR_UNSUPPORTED, "\"llamaXevil\" is not supported", "architecture llamaXevil");
    patch(p, "llamaXevil", "llama\0evil", 10);
    expect_open(p, TS_ERR_FORMAT, "\"general.architecture\" (\"llama\"...) contains a NUL byte", "llama\\0evil");
}

static ts_status open_session(const char *path, ts_session **s, ts_error *e) {
    ts_session_opts o;
    ts_session_opts_default(&o);
    o.model_dir = path;
    o.n_ctx = 32;
    o.n_threads = 1;
    o.max_tokens = 2;
    o.sample.temp = 0;
    *s = NULL;
    return ts_session_open(&o, 1, NULL, NULL, s, e);
}

/* A template whose tail a NUL would hide: whole, it opens (the interpreter runs any template);
 * cut by a NUL, the file is refused rather than run on half its template. */
static void test_template_nul(void) {
    const char *p = path_of("tmpl_nul.gguf");
    write_model(p, &(edit){.tmpl = "<|start_header_id|>system<|end_header_id|>@Cutting Knowledge Date: x"});
    ts_session *s;
    ts_error e = {0};
    ts_status st = open_session(p, &s, &e);
    CHECK(st == TS_OK, "the whole template: status %d: %s", (int)st, e.msg);
    ts_session_close(s);
    patch(p, ">@Cutting", ">\0Cutting", 9);
    st = open_session(p, &s, &e);
    CHECK(st == TS_ERR_FORMAT && strstr(e.msg, p) && strstr(e.msg, "\"tokenizer.chat_template\" contains a NUL byte"),
          "the template cut by a NUL: status %d: %s", (int)st, e.msg);
    ts_session_close(s);
}

/* Names in another spelling than llama.cpp's, or Hugging Face names in a GGUF: unexpected. */
static void test_names(void) {
    static const char *const bad[][2] = {
        {"blk.0.attn_q.weight", "blk.00.attn_q.weight"},
        {"blk.0.attn_q.weight", "blk.+0.attn_q.weight"},
        {"blk.0.attn_q.weight", "blk. 0.attn_q.weight"},
        {"blk.0.attn_q.weight", "blk.4294967296.attn_q.weight"}, /* %d overflow: read as layer 0 */
        {"output_norm.weight", "model.norm.weight"},
        {"blk.0.ffn_up.weight", "model.layers.0.mlp.up_proj.weight"},
    };
    const char *p = path_of("names.gguf");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_model(p, &(edit){.rename_from = bad[i][0], .rename_to = bad[i][1]});
        char needle[160];
        snprintf(needle, sizeof needle, "unexpected tensor \"%s\": not a tensor name of a GGUF", bad[i][1]);
        expect_open(p, TS_ERR_SHAPE, needle, bad[i][1]);
    }
    /* the canonical spelling of a layer past the last: the binder's message, under the HF name */
    write_model(p, &(edit){.rename_from = "blk.0.ffn_up.weight", .rename_to = "blk.10.ffn_up.weight"});
    expect_open(p, TS_ERR_SHAPE, "model.layers.0.mlp.up_proj.weight\" is missing", "blk.10");
}

/* A llama Q bias in Q8_0: its elements cannot be moved back row by row; refused, not run with
 * the converter's interleaved order. The F32 K and V biases beside it are fine. */
static void test_block_bias(void) {
    const char *p = path_of("q8_bias.gguf");
    write_model(p, &(edit){.q_bias_q8 = 1});
    expect_open(p, TS_ERR_UNSUPPORTED, "tensor \"blk.0.attn_q.bias\" is a 1-D Q8_0 tensor, expected F32, F16 or BF16",
                "Q8_0 q bias");
}

int main(void) {
    g_dir = th_tmpdir("gguf_hostile");
    const char *ok = path_of("ok.gguf");
    write_model(ok, &(edit){0});
    expect_open(ok, TS_OK, NULL, "the valid model");
    test_arch_nul();
    test_template_nul();
    test_names();
    test_block_bias();
    return th_finish("test_gguf_hostile");
}
