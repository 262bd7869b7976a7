/* The GGUF reader: a written file reads back exactly (metadata of every type, tensors of every
 * supported type, dequantized values of Q8_0 / Q4_0 computed by hand); every prefix of a valid
 * file and a list of hostile edits give one clean error naming the file and what was expected;
 * the metadata -> config mapping refuses what it cannot run with the key and the value. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "model/gguf_model.h"
#include "tharness.h"

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return p;
}

/* A complete tiny llama-shaped GGUF: hidden 32, ffn 64, 1 layer, 2 heads / 1 kv head, vocab 8. */
/* skip: a key not to write (an edit then writes its own value), or NULL. */
static ts_gguf_writer *tiny_llama(int with_output, const char *skip) {
    ts_gguf_writer *w = ts_gguf_writer_new();
    const char *sk = skip ? skip : "";
#define U32(k, v) if (strcmp(k, sk)) ts_gguf_w_u32(w, k, v)
    if (strcmp("general.architecture", sk)) ts_gguf_w_str(w, "general.architecture", "llama");
    U32("llama.context_length", 64);
    U32("llama.embedding_length", 32);
    U32("llama.feed_forward_length", 64);
    U32("llama.block_count", 1);
    U32("llama.attention.head_count", 2);
    U32("llama.attention.head_count_kv", 1);
    if (strcmp("llama.attention.layer_norm_rms_epsilon", sk))
        ts_gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    ts_gguf_w_f32(w, "llama.rope.freq_base", 10000.0f);
    U32("tokenizer.ggml.bos_token_id", 1);
    U32("tokenizer.ggml.eos_token_id", 2);
#undef U32
    static float buf[64 * 64];
    for (int i = 0; i < 64 * 64; i++) buf[i] = (float)((i * 37) % 17 - 8) / 64.0f;
    struct {
        const char *name;
        int nd;
        int64_t s0, s1;
    } ts[] = {{"token_embd.weight", 2, 8, 32},       {"output_norm.weight", 1, 32, 0},
              {"blk.0.attn_norm.weight", 1, 32, 0},  {"blk.0.attn_q.weight", 2, 32, 32},
              {"blk.0.attn_k.weight", 2, 16, 32},    {"blk.0.attn_v.weight", 2, 16, 32},
              {"blk.0.attn_output.weight", 2, 32, 32}, {"blk.0.ffn_norm.weight", 1, 32, 0},
              {"blk.0.ffn_gate.weight", 2, 64, 32},  {"blk.0.ffn_up.weight", 2, 64, 32},
              {"blk.0.ffn_down.weight", 2, 32, 64}};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        int64_t sh[2] = {ts[i].s0, ts[i].s1};
        ts_gguf_w_tensor(w, ts[i].name, TS_DTYPE_F32, ts[i].nd, sh, buf);
    }
    if (with_output) {
        int64_t sh[2] = {8, 32};
        ts_gguf_w_tensor(w, "output.weight", TS_DTYPE_Q8_0, 2, sh, buf);
    }
    return w;
}

static void test_roundtrip(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/rt.gguf", dir);
    ts_gguf_writer *w = ts_gguf_writer_new();
    ts_gguf_w_str(w, "general.architecture", "qwen3");
    ts_gguf_w_u32(w, "a.u32", 4000000000u);
    ts_gguf_w_f32(w, "a.f32", -2.5f);
    ts_gguf_w_bool(w, "a.bool", 1);
    int32_t ints[3] = {-1, 0, 7};
    ts_gguf_w_arr(w, "a.ints", TS_GGUF_I32, ints, 3);
    const char *strs[3] = {"x", "", "\xe2\x96\x81the"};
    ts_gguf_w_arr_str(w, "a.strs", strs, 3);
    /* One tensor of each type; Q8_0 block: d = 0.5, q = -16..15; Q4_0: d = 0.25, codes 0..15. */
    uint8_t q8[34], q4[18];
    uint16_t half = 0x3800; /* 0.5 */
    memcpy(q8, &half, 2);
    for (int j = 0; j < 32; j++) q8[2 + j] = (uint8_t)(int8_t)(j - 16);
    half = 0x3400; /* 0.25 */
    memcpy(q4, &half, 2);
    for (int j = 0; j < 16; j++) q4[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    float f32[4] = {1, -2, 3.5f, 1e-3f};
    uint16_t bf[4] = {0x3f80, 0xc000, 0x4060, 0x0000}, f16[4] = {0x3c00, 0xc000, 0x4300, 0x0001};
    int64_t s4[2] = {2, 2}, s32[1] = {32};
    ts_gguf_w_tensor(w, "f32", TS_DTYPE_F32, 2, s4, f32);
    ts_gguf_w_tensor(w, "bf16", TS_DTYPE_BF16, 2, s4, bf);
    ts_gguf_w_tensor(w, "f16", TS_DTYPE_F16, 2, s4, f16);
    ts_gguf_w_tensor(w, "q8", TS_DTYPE_Q8_0, 1, s32, q8);
    ts_gguf_w_tensor(w, "q4", TS_DTYPE_Q4_0, 1, s32, q4);
    ts_error e = {0};
    CHECK(ts_gguf_writer_save(w, path, &e) == TS_OK, "%s", e.msg);
    ts_gguf_writer_free(w);

    ts_gguf g;
    if (ts_gguf_open(path, &g, &e) != TS_OK) {
        CHECK(0, "open: %s", e.msg);
        return;
    }
    CHECK(g.version == 3 && g.n_kv == 6 && g.n_tensors == 5 && g.alignment == 32, "header");
    CHECK(g.arch && strcmp(g.arch, "qwen3") == 0, "arch %s", g.arch ? g.arch : "(null)");
    int64_t iv;
    double dv;
    int bv;
    CHECK(ts_gguf_get_int(&g, "a.u32", 1, 0, 0, INT64_MAX, &iv, &e) == TS_OK && iv == 4000000000LL, "u32");
    CHECK(ts_gguf_get_int(&g, "a.u32", 1, 0, 0, 100, &iv, &e) == TS_ERR_FORMAT && strstr(e.msg, "a.u32") &&
              strstr(e.msg, "[0, 100]"), "range: %s", e.msg);
    CHECK(ts_gguf_get_num(&g, "a.f32", 1, 0, -10, 10, &dv, &e) == TS_OK && dv == -2.5, "f32");
    CHECK(ts_gguf_get_int(&g, "a.f32", 1, 0, -10, 10, &iv, &e) == TS_ERR_FORMAT && strstr(e.msg, "float32") &&
              strstr(e.msg, "rt.gguf"), "type: %s", e.msg);
    CHECK(ts_gguf_get_bool(&g, "a.bool", 0, &bv, &e) == TS_OK && bv == 1, "bool");
    CHECK(ts_gguf_get_int(&g, "nope", 1, 0, 0, 1, &iv, &e) == TS_ERR_FORMAT && strstr(e.msg, "\"nope\" is missing"),
          "missing: %s", e.msg);
    CHECK(ts_gguf_get_int(&g, "nope", 0, 42, 0, 100, &iv, &e) == TS_OK && iv == 42, "default");
    const ts_gguf_kv *kv;
    CHECK(ts_gguf_get_arr(&g, "a.ints", 1, TS_GGUF_I32, &kv, &e) == TS_OK && kv->n == 3 &&
              ts_gguf_arr_int(kv, 0) == -1 && ts_gguf_arr_int(kv, 2) == 7, "ints");
    CHECK(ts_gguf_get_arr(&g, "a.ints", 1, TS_GGUF_STRING, &kv, &e) == TS_ERR_FORMAT &&
              strstr(e.msg, "an array of string"), "arr type: %s", e.msg);
    if (ts_gguf_get_arr(&g, "a.strs", 1, TS_GGUF_STRING, &kv, &e) == TS_OK) {
        const char *s;
        size_t n;
        ts_gguf_arr_str(kv, 2, &s, &n);
        CHECK(n == 6 && memcmp(s, "\xe2\x96\x81the", 6) == 0, "string 2");
        ts_gguf_arr_str(kv, 1, &s, &n);
        CHECK(n == 0, "empty string");
    }
    float v[32];
    const ts_tensor *t = ts_gguf_tensor(&g, "f32");
    CHECK(t && t->shape[0] == 2 && t->shape[1] == 2 && t->nbytes == 16, "f32 tensor");
    ts_dtype_to_f32(TS_DTYPE_F32, t->data, 0, 4, v);
    CHECK(v[2] == 3.5f, "f32 value");
    t = ts_gguf_tensor(&g, "bf16");
    ts_dtype_to_f32(t->dtype, t->data, 0, 4, v);
    CHECK(t->dtype == TS_DTYPE_BF16 && v[0] == 1 && v[1] == -2 && v[2] == 3.5f, "bf16 values");
    t = ts_gguf_tensor(&g, "f16");
    ts_dtype_to_f32(t->dtype, t->data, 0, 4, v);
    CHECK(t->dtype == TS_DTYPE_F16 && v[2] == 3.5f && v[3] == ldexpf(1, -24), "f16 values");
    t = ts_gguf_tensor(&g, "q8");
    CHECK(t && t->dtype == TS_DTYPE_Q8_0 && t->nbytes == 34, "q8 tensor");
    ts_dtype_to_f32(t->dtype, t->data, 0, 32, v);
    int bad = 0;
    for (int j = 0; j < 32; j++) bad += v[j] != 0.5f * (float)(j - 16);
    CHECK(bad == 0, "q8 dequantized values (%d wrong)", bad);
    ts_dtype_to_f32(t->dtype, t->data, 31, 1, v);
    CHECK(v[0] == 7.5f, "q8 single element at the end");
    t = ts_gguf_tensor(&g, "q4");
    CHECK(t && t->dtype == TS_DTYPE_Q4_0 && t->nbytes == 18, "q4 tensor");
    ts_dtype_to_f32(t->dtype, t->data, 0, 32, v);
    bad = 0;
    /* element j < 16: low nibble of byte j (= j); element 16 + j: its high nibble (= 15 - j) */
    for (int j = 0; j < 16; j++) bad += v[j] != 0.25f * (float)(j - 8) || v[16 + j] != 0.25f * (float)(7 - j);
    CHECK(bad == 0, "q4 dequantized values (%d wrong)", bad);
    ts_gguf_close(&g);
}

/* Every prefix of a valid file fails cleanly (ASan checks the reads). */
static void test_truncation(const char *path) {
    size_t len;
    unsigned char *buf = slurp(path, &len);
    CHECK(buf != NULL, "read %s", path);
    if (!buf) return;
    /* The padding after the last tensor's bytes may go: the file ends where its data ends. */
    ts_gguf whole;
    ts_error e0 = {0};
    size_t end = 0;
    if (ts_gguf_parse(buf, len, "whole.gguf", &whole, &e0) == TS_OK) {
        for (int i = 0; i < whole.n_tensors; i++)
            if (whole.tensors[i].offset + whole.tensors[i].nbytes > end)
                end = whole.tensors[i].offset + whole.tensors[i].nbytes;
        ts_gguf_close(&whole);
    }
    CHECK(end > len - 32 && end <= len, "data end %zu of %zu", end, len);
    int bad = 0;
    for (size_t n = 0; n < end; n++) {
        unsigned char *cut = malloc(n + 1); /* exactly n bytes reachable: ASan sees overreads */
        memcpy(cut, buf, n);
        ts_gguf g;
        ts_error e = {0};
        ts_status s = ts_gguf_parse(cut, n, "cut.gguf", &g, &e);
        if (s == TS_OK || !strstr(e.msg, "cut.gguf")) bad++;
        if (s == TS_OK) ts_gguf_close(&g);
        free(cut);
    }
    CHECK(bad == 0, "%d of %zu prefixes did not fail with a message naming the file", bad, end);
    free(buf);
}

/* buf edited in place at `at` with `n` bytes of `with`; must fail with status and message. */
static void hostile(const unsigned char *orig, size_t len, size_t at, const void *with, size_t n,
                    ts_status want, const char *needle, const char *what) {
    unsigned char *b = malloc(len);
    memcpy(b, orig, len);
    memcpy(b + at, with, n);
    ts_gguf g;
    ts_error e = {0};
    ts_status s = ts_gguf_parse(b, len, "bad.gguf", &g, &e);
    CHECK(s == want && strstr(e.msg, needle) && strstr(e.msg, "bad.gguf"), "%s: status %d, message: %s", what,
          (int)s, e.msg);
    if (s == TS_OK) ts_gguf_close(&g);
    free(b);
}

/* Offset of the first occurrence of needle (a length-prefixed string in the file) + its length. */
static size_t after_str(const unsigned char *b, size_t len, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 8; i + n <= len; i++)
        if (memcmp(b + i, s, n) == 0) {
            uint64_t l;
            memcpy(&l, b + i - 8, 8);
            if (l == n) return i + n;
        }
    return 0;
}

static void test_hostile(const char *path) {
    size_t len;
    unsigned char *b = slurp(path, &len);
    if (!b) return;
    uint32_t u32;
    uint64_t u64;
    hostile(b, len, 0, "GGML", 4, TS_ERR_FORMAT, "not a GGUF file", "magic");
    u32 = 1;
    hostile(b, len, 4, &u32, 4, TS_ERR_UNSUPPORTED, "version 1 is not supported, expected 2 or 3", "v1");
    u32 = 4;
    hostile(b, len, 4, &u32, 4, TS_ERR_UNSUPPORTED, "version 4", "v4");
    u64 = UINT64_MAX;
    hostile(b, len, 8, &u64, 8, TS_ERR_FORMAT, "expected at most", "tensor count");
    hostile(b, len, 16, &u64, 8, TS_ERR_FORMAT, "expected at most", "kv count");
    u64 = 100000; /* within the limits but far more than the file holds */
    hostile(b, len, 8, &u64, 8, TS_ERR_FORMAT, "truncated", "tensor count too big");
    /* the first key is general.architecture: its length, its type */
    u64 = 1ull << 40;
    hostile(b, len, 24, &u64, 8, TS_ERR_FORMAT, "expected at most 4096", "key length");
    size_t at = after_str(b, len, "general.architecture");
    u32 = 13;
    hostile(b, len, at, &u32, 4, TS_ERR_FORMAT, "value type 13", "value type");
    u32 = TS_GGUF_ARRAY;
    /* an array whose element type then reads as the string length's low bytes: 5 = int32 with
     * a huge count (the string's bytes), which must be caught as truncation */
    hostile(b, len, at, &u32, 4, TS_ERR_FORMAT, "general.architecture", "scalar turned array");
    /* tensor records: the first tensor's name is token_embd.weight, then n_dims, dims, type, offset */
    at = after_str(b, len, "token_embd.weight");
    u32 = 0;
    hostile(b, len, at, &u32, 4, TS_ERR_FORMAT, "0 dimensions, expected 1 to 4", "n_dims 0");
    u32 = 5;
    hostile(b, len, at, &u32, 4, TS_ERR_FORMAT, "5 dimensions", "n_dims 5");
    u64 = 0;
    hostile(b, len, at + 4, &u64, 8, TS_ERR_FORMAT, "dimension 0 is 0", "zero dim");
    u32 = 12;
    hostile(b, len, at + 20, &u32, 4, TS_ERR_UNSUPPORTED, "type Q4_K (ggml type 12), expected F32, F16, BF16, Q8_0 or Q4_0",
            "Q4_K refused by name");
    u32 = 999;
    hostile(b, len, at + 20, &u32, 4, TS_ERR_UNSUPPORTED, "ggml type 999", "unknown type");
    u64 = 4;
    hostile(b, len, at + 24, &u64, 8, TS_ERR_FORMAT, "multiple of the alignment", "misaligned");
    u64 = 1ull << 40;
    hostile(b, len, at + 24, &u64, 8, TS_ERR_FORMAT, "runs past the end", "offset past the end");
    u64 = 32; /* token_embd is 1 KiB: moving it by 32 bytes overlaps the next tensor */
    hostile(b, len, at + 24, &u64, 8, TS_ERR_FORMAT, "overlap", "overlap");
    free(b);
}

static void test_dup_and_align(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/dup.gguf", dir);
    ts_error e = {0};
    ts_gguf g;
    ts_gguf_writer *w = ts_gguf_writer_new();
    ts_gguf_w_u32(w, "k", 1);
    ts_gguf_w_u32(w, "k", 2);
    ts_gguf_writer_save(w, path, &e);
    ts_gguf_writer_free(w);
    CHECK(ts_gguf_open(path, &g, &e) == TS_ERR_FORMAT && strstr(e.msg, "metadata key \"k\" appears twice"), "%s",
          e.msg);
    float x[32] = {0};
    int64_t s1[1] = {4};
    w = ts_gguf_writer_new();
    ts_gguf_w_tensor(w, "t", TS_DTYPE_F32, 1, s1, x);
    ts_gguf_w_tensor(w, "t", TS_DTYPE_F32, 1, s1, x);
    ts_gguf_writer_save(w, path, &e);
    ts_gguf_writer_free(w);
    CHECK(ts_gguf_open(path, &g, &e) == TS_ERR_FORMAT && strstr(e.msg, "tensor \"t\" appears twice"), "%s", e.msg);
    w = ts_gguf_writer_new();
    ts_gguf_w_u32(w, "general.alignment", 48);
    ts_gguf_writer_save(w, path, &e);
    ts_gguf_writer_free(w);
    CHECK(ts_gguf_open(path, &g, &e) == TS_ERR_FORMAT && strstr(e.msg, "power of two"), "%s", e.msg);
    /* a Q8_0 tensor whose rows are not whole blocks: the writer refuses to build it, so patch
     * a valid file's first dimension from 32 to 48 */
    w = ts_gguf_writer_new();
    int64_t s32[1] = {32};
    uint8_t blk[34] = {0};
    ts_gguf_w_tensor(w, "q", TS_DTYPE_Q8_0, 1, s32, blk);
    ts_gguf_writer_save(w, path, &e);
    ts_gguf_writer_free(w);
    size_t len;
    unsigned char *b = slurp(path, &len);
    uint64_t d48 = 48;
    size_t at = after_str(b, len, "q") + 4;
    hostile(b, len, at, &d48, 8, TS_ERR_FORMAT, "rows of 48 elements, expected a multiple of 32", "partial block");
    free(b);
}

/* general.alignment 1 lets the data area start at any byte: a tensor that would start
 * mid-element (an F32 rope_freqs, a BF16 matrix used in place, both read through typed
 * pointers) is refused. The writer pads to 32 whatever the key says, so the parser's data area
 * starts where the header ends; a string of 0..3 bytes moves that end through every residue. */
static void test_elem_align(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/align1.gguf", dir);
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int64_t s8[1] = {8};
    int refused = 0, opened = 0;
    for (int pad = 0; pad < 4; pad++) {
        char str[4] = "xxx";
        str[pad] = 0;
        ts_error e = {0};
        ts_gguf_writer *w = ts_gguf_writer_new();
        ts_gguf_w_u32(w, "general.alignment", 1);
        ts_gguf_w_str(w, "pad", str);
        ts_gguf_w_tensor(w, "rope_freqs.weight", TS_DTYPE_F32, 1, s8, x);
        CHECK(ts_gguf_writer_save(w, path, &e) == TS_OK, "%s", e.msg);
        ts_gguf_writer_free(w);
        ts_gguf g;
        ts_status s = ts_gguf_open(path, &g, &e);
        if (s == TS_OK) {
            opened++;
            CHECK(g.tensors[0].offset % 4 == 0, "pad %d: F32 tensor at offset %zu", pad, g.tensors[0].offset);
            ts_gguf_close(&g);
        } else {
            refused++;
            CHECK(s == TS_ERR_FORMAT && strstr(e.msg, "align1.gguf") && strstr(e.msg, "\"rope_freqs.weight\"") &&
                      strstr(e.msg, "expected a multiple of 4") && strstr(e.msg, "general.alignment 1"),
                  "pad %d: status %d: %s", pad, (int)s, e.msg);
        }
    }
    CHECK(opened == 1 && refused == 3, "alignment 1: %d opened, %d refused (expected 1 and 3)", opened, refused);
}

/* Metadata the runtime cannot honour is refused with the key and the value. */
static void config_case(const char *dir, const char *what, const char *skip, void (*edit)(ts_gguf_writer *),
                        ts_status want, const char *needle) {
    char path[1024];
    snprintf(path, sizeof path, "%s/cfg.gguf", dir);
    ts_gguf_writer *w = tiny_llama(1, skip);
    if (edit) edit(w);
    ts_error e = {0};
    ts_gguf_writer_save(w, path, &e);
    ts_gguf_writer_free(w);
    ts_gguf g;
    ts_config c;
    ts_status s = ts_gguf_open(path, &g, &e);
    if (!s) {
        s = ts_config_from_gguf(&g, &c, &e);
        if (!s && !needle) CHECK(c.n_embd == 32 && c.n_heads == 2 && c.n_kv_heads == 1 && c.head_dim == 16 &&
                                     c.n_ff == 64 && c.n_vocab == 8 && !c.tied && c.bos_id == 1 && c.n_eos == 1,
                                 "%s: config values", what);
        ts_gguf_close(&g);
    }
    CHECK(s == want && (!needle || (strstr(e.msg, needle) && strstr(e.msg, "cfg.gguf"))), "%s: status %d: %s", what,
          (int)s, e.msg);
}

static void e_arch(ts_gguf_writer *w) { ts_gguf_w_str(w, "general.architecture", "gemma2"); }
static void e_rope_linear(ts_gguf_writer *w) { ts_gguf_w_str(w, "llama.rope.scaling.type", "linear"); }
static void e_rope_dims(ts_gguf_writer *w) { ts_gguf_w_u32(w, "llama.rope.dimension_count", 8); }
static void e_eps_str(ts_gguf_writer *w) { ts_gguf_w_str(w, "llama.attention.layer_norm_rms_epsilon", "1e-5"); }
static void e_vocab(ts_gguf_writer *w) { ts_gguf_w_u32(w, "llama.vocab_size", 9); }
static void e_bos(ts_gguf_writer *w) { ts_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 8); }
static void e_hidden1(ts_gguf_writer *w) { ts_gguf_w_u32(w, "llama.embedding_length", 1); } /* 1 / 2 heads = 0 */
static void e_wide(ts_gguf_writer *w) { /* 512 heads of 4096: 2^21 */
    ts_gguf_w_u32(w, "llama.attention.head_count", 512);
    ts_gguf_w_u32(w, "llama.attention.key_length", 4096);
}

/* The end-of-generation ids: the eos, eot and eom keys, then every token spelled as one of the
 * markers llama.cpp knows by their text, each once. */
static void test_stop_ids(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/stops.gguf", dir);
    ts_gguf_writer *w = tiny_llama(1, NULL);
    static const char *const toks[8] = {"<unk>", "<s>", "</s>", "<|eot_id|>", "a", "<|im_end|>", "<|eom_id|>", "<|im_end|x"};
    ts_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 8);
    ts_gguf_w_u32(w, "tokenizer.ggml.eot_token_id", 4);
    ts_gguf_w_u32(w, "tokenizer.ggml.eom_token_id", 6);
    ts_error e = {0};
    CHECK(ts_gguf_writer_save(w, path, &e) == TS_OK, "%s", e.msg);
    ts_gguf_writer_free(w);
    ts_gguf g;
    ts_config c;
    if (ts_gguf_open(path, &g, &e) || ts_config_from_gguf(&g, &c, &e)) {
        CHECK(0, "stop ids: %s", e.msg);
        return;
    }
    ts_gguf_close(&g);
    static const int want[] = {2, 4, 6, 3, 5};
    int ok = c.n_eos == 5;
    for (int i = 0; ok && i < 5; i++) ok = c.eos_ids[i] == want[i];
    CHECK(ok, "stop ids: %d of them (%d %d %d %d %d), expected 2 4 6 3 5", c.n_eos, c.eos_ids[0], c.eos_ids[1],
          c.eos_ids[2], c.eos_ids[3], c.eos_ids[4]);
    CHECK(ts_gguf_stop_marker("<|eom_id|>", 10) == 2 && ts_gguf_stop_marker("<|endoftext|>", 13) == 1 &&
              ts_gguf_stop_marker("<|endoftext|", 12) == 0 && ts_gguf_stop_marker("<|eot_id|>x", 10) == 1,
          "stop markers by text");
}

int main(void) {
    const char *dir = th_tmpdir("gguf");
    test_stop_ids(dir);
    test_roundtrip(dir);
    char path[1024];
    snprintf(path, sizeof path, "%s/tiny.gguf", dir);
    ts_gguf_writer *w = tiny_llama(1, NULL);
    ts_error e = {0};
    CHECK(ts_gguf_writer_save(w, path, &e) == TS_OK, "%s", e.msg);
    ts_gguf_writer_free(w);
    test_truncation(path);
    test_hostile(path);
    test_dup_and_align(dir);
    test_elem_align(dir);
    struct {
        const char *what, *skip;
        void (*edit)(ts_gguf_writer *);
        ts_status want;
        const char *needle;
    } cases[] = {
        {"valid", NULL, NULL, TS_OK, NULL},
        {"duplicate key", NULL, e_bos, TS_ERR_FORMAT, "\"tokenizer.ggml.bos_token_id\" appears twice"},
        {"architecture", "general.architecture", e_arch, TS_ERR_UNSUPPORTED, "\"gemma2\" is not supported"},
        {"no architecture", "general.architecture", NULL, TS_ERR_FORMAT, "general.architecture\" is missing"},
        {"rope linear", NULL, e_rope_linear, TS_ERR_UNSUPPORTED, "llama.rope.scaling.type\" is \"linear\""},
        {"partial rope", NULL, e_rope_dims, TS_ERR_UNSUPPORTED, "dimension_count\" is 8, expected the head size 16"},
        {"vocab mismatch", NULL, e_vocab, TS_ERR_SHAPE, "vocab_size\" is 9, but token_embd.weight has 8 rows"},
        {"eps as string", "llama.attention.layer_norm_rms_epsilon", e_eps_str, TS_ERR_FORMAT,
         "layer_norm_rms_epsilon\" is string, expected a number"},
        {"eps missing", "llama.attention.layer_norm_rms_epsilon", NULL, TS_ERR_FORMAT,
         "layer_norm_rms_epsilon\" is missing"},
        {"bos out of range", "tokenizer.ggml.bos_token_id", e_bos, TS_ERR_FORMAT, "is 8, expected a token id in [0, 8)"},
        {"no heads", "llama.attention.head_count", NULL, TS_ERR_FORMAT, "llama.attention.head_count\" is missing"},
        {"head size 0 by default", "llama.embedding_length", e_hidden1, TS_ERR_FORMAT,
         "key_length 0 / value_length 0, expected one even head size of at least 2"},
        {"heads x head size", "llama.attention.head_count", e_wide, TS_ERR_FORMAT,
         "head_count 512 x key_length 4096 = 2097152, expected at most 1048576"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        config_case(dir, cases[i].what, cases[i].skip, cases[i].edit, cases[i].want, cases[i].needle);
    return th_finish("test_gguf");
}
