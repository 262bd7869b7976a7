/* GGUF files as models: the llama Q/K row permutation is undone exactly (rows tagged with
 * their GGUF index land where HF has them; qwen files are left alone), a GGUF model opens,
 * binds and runs like a safetensors one, and the real trained stories260K tells its story:
 * greedy decoding from BOS on the oracle gives the 64 token ids pinned below. */
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "model/model.h"
#include "tharness.h"

/* First 64 greedy ids of stories260K.gguf from BOS on the oracle: "Once upon a time, there was
 * a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red
 * ball. She wanted to play with it, but it was too high.\nLily ..." (tests/fixtures/gguf/README.md
 * has llama.cpp's ids for the same file). */
static const int32_t k_story[64] = {
    403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338,
    401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385,
    328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267,
    337, 335, 312, 432, 398, 312, 286, 267, 414, 270, 333, 415, 426, 13,  438, 310};

static void test_story(void) {
    const char *path = th_shared("models/stories260K.gguf");
    ts_model *m;
    ts_ref *r;
    ts_error e = {0};
    if (ts_model_open(path, &m, &e) != TS_OK) {
        CHECK(0, "open %s: %s", path, e.msg);
        return;
    }
    const ts_config *c = ts_model_config(m);
    CHECK(c->arch == TS_ARCH_LLAMA && c->n_embd == 64 && c->n_ff == 172 && c->n_layers == 5 && c->n_heads == 8 &&
              c->n_kv_heads == 4 && c->head_dim == 8 && c->n_vocab == 512 && c->bos_id == 1 && !c->tied,
          "stories260K config");
    CHECK(ts_model_check_values(m, &e) == TS_OK, "%s", e.msg);
    CHECK(ts_ref_new(m, 80, &r, &e) == TS_OK, "%s", e.msg);
    float *lg = malloc(sizeof(float) * (size_t)c->n_vocab);
    int32_t tok = c->bos_id, got[64];
    int n = 0;
    for (; n < 64; n++) {
        if (ts_ref_forward(r, &tok, 1, lg, 0, NULL, &e) != TS_OK) break;
        int b = 0;
        for (int v = 1; v < c->n_vocab; v++)
            if (lg[v] > lg[b]) b = v;
        got[n] = tok = b;
    }
    CHECK(n == 64, "forward: %s", e.msg);
    int first_diff = -1;
    for (int i = 0; i < n && first_diff < 0; i++)
        if (got[i] != k_story[i]) first_diff = i;
    CHECK(first_diff < 0, "greedy id %d is %d, expected %d", first_diff, first_diff >= 0 ? got[first_diff] : 0,
          first_diff >= 0 ? k_story[first_diff] : 0);
    /* The text through the file's own vocabulary, so a reader sees what the ids say. */
    const ts_gguf_kv *kv;
    char text[1024] = "";
    size_t k = 0;
    if (ts_gguf_get_arr(m->gguf, "tokenizer.ggml.tokens", 1, TS_GGUF_STRING, &kv, &e) == TS_OK)
        for (int i = 0; i < n && k + 16 < sizeof text; i++) {
            const char *s;
            size_t len;
            ts_gguf_arr_str(kv, (uint64_t)got[i], &s, &len);
            for (size_t j = 0; j < len && k + 4 < sizeof text; j++) {
                if (j + 2 < len && memcmp(s + j, "\xe2\x96\x81", 3) == 0) text[k++] = ' ', j += 2;
                else text[k++] = s[j];
            }
        }
    text[k] = 0;
    CHECK(strncmp(text, " Once upon a time, there was a little girl named Lily. She loved to play outside in the park.",
                  93) == 0, "story text: %s", text);
    free(lg);
    ts_ref_free(r);
    ts_model_close(m);
}

/* A GGUF whose Q/K rows hold their own GGUF row index in every element. */
static void write_tagged(const char *path, const char *arch, int heads, int kv_heads, int hd) {
    int H = heads * hd, KV = kv_heads * hd, F = 32, V = 4;
    ts_gguf_writer *w = ts_gguf_writer_new();
    char key[96];
    ts_gguf_w_str(w, "general.architecture", arch);
#define K(suffix, v) snprintf(key, sizeof key, "%s.%s", arch, suffix), ts_gguf_w_u32(w, key, v)
    K("context_length", 32);
    K("embedding_length", (uint32_t)H);
    K("feed_forward_length", (uint32_t)F);
    K("block_count", 1);
    K("attention.head_count", (uint32_t)heads);
    K("attention.head_count_kv", (uint32_t)kv_heads);
#undef K
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    ts_gguf_w_f32(w, key, 1e-6f);
    float *buf = calloc((size_t)(H > F ? H : F) * (size_t)(H > F ? H : F), sizeof *buf);
    float *q = malloc(sizeof(float) * (size_t)H * (size_t)H), *k = malloc(sizeof(float) * (size_t)KV * (size_t)H);
    for (int r = 0; r < H; r++)
        for (int c = 0; c < H; c++) q[r * H + c] = (float)r;
    for (int r = 0; r < KV; r++)
        for (int c = 0; c < H; c++) k[r * H + c] = (float)r;
    int64_t sVH[2] = {V, H}, sH[1] = {H}, sHH[2] = {H, H}, sKV[2] = {KV, H}, sFH[2] = {F, H}, sHF[2] = {H, F},
            shd[1] = {hd};
    ts_gguf_w_tensor(w, "token_embd.weight", TS_DTYPE_F32, 2, sVH, buf);
    ts_gguf_w_tensor(w, "output_norm.weight", TS_DTYPE_F32, 1, sH, buf);
    ts_gguf_w_tensor(w, "blk.0.attn_norm.weight", TS_DTYPE_F32, 1, sH, buf);
    ts_gguf_w_tensor(w, "blk.0.attn_q.weight", TS_DTYPE_F32, 2, sHH, q);
    ts_gguf_w_tensor(w, "blk.0.attn_k.weight", TS_DTYPE_F32, 2, sKV, k);
    ts_gguf_w_tensor(w, "blk.0.attn_v.weight", TS_DTYPE_F32, 2, sKV, buf);
    ts_gguf_w_tensor(w, "blk.0.attn_output.weight", TS_DTYPE_F32, 2, sHH, buf);
    ts_gguf_w_tensor(w, "blk.0.ffn_norm.weight", TS_DTYPE_F32, 1, sH, buf);
    ts_gguf_w_tensor(w, "blk.0.ffn_gate.weight", TS_DTYPE_F32, 2, sFH, buf);
    ts_gguf_w_tensor(w, "blk.0.ffn_up.weight", TS_DTYPE_F32, 2, sFH, buf);
    ts_gguf_w_tensor(w, "blk.0.ffn_down.weight", TS_DTYPE_F32, 2, sHF, buf);
    if (!strcmp(arch, "qwen3")) {
        ts_gguf_w_tensor(w, "blk.0.attn_q_norm.weight", TS_DTYPE_F32, 1, shd, buf);
        ts_gguf_w_tensor(w, "blk.0.attn_k_norm.weight", TS_DTYPE_F32, 1, shd, buf);
    }
    ts_error e = {0};
    CHECK(ts_gguf_writer_save(w, path, &e) == TS_OK, "%s", e.msg);
    ts_gguf_writer_free(w);
    free(buf);
    free(q);
    free(k);
}

/* GGUF row of HF row r in a head of hd rows: HF (j * hd/2 + i) came from GGUF (2i + j). */
static int gguf_row(int r, int hd) {
    int h = r / hd, x = r % hd, half = hd / 2, j = x / half, i = x % half;
    return h * hd + 2 * i + j;
}

static void check_rows(const ts_tensor *t, int rows, int cols, int hd, int permuted, const char *what) {
    int bad = 0;
    for (int r = 0; r < rows; r++) {
        float v;
        ts_dtype_to_f32(t->dtype, t->data, (size_t)r * (size_t)cols + (size_t)(cols - 1), 1, &v);
        if (v != (float)(permuted ? gguf_row(r, hd) : r)) bad++;
    }
    CHECK(bad == 0, "%s: %d of %d rows in the wrong place", what, bad, rows);
}

static void test_permutation(const char *dir) {
    char path[1024];
    ts_error e = {0};
    const char *archs[2] = {"llama", "qwen3"};
    for (int a = 0; a < 2; a++) {
        snprintf(path, sizeof path, "%s/tagged_%s.gguf", dir, archs[a]);
        write_tagged(path, archs[a], 4, 2, 8);
        ts_model *m;
        if (ts_model_open(path, &m, &e) != TS_OK) {
            CHECK(0, "open %s: %s", path, e.msg);
            continue;
        }
        int llama = a == 0;
        check_rows(m->layers[0].wq, 32, 32, 8, llama, llama ? "llama q_proj" : "qwen3 q_proj");
        check_rows(m->layers[0].wk, 16, 32, 8, llama, llama ? "llama k_proj" : "qwen3 k_proj");
        CHECK(m->layers[0].wq->heap == llama && m->layers[0].wv->heap == 0, "%s: heap copies only for llama Q/K",
              archs[a]);
        CHECK(m->cfg.tied && m->lm_head == m->embed, "%s: no output.weight means tied", archs[a]);
        ts_model_close(m);
    }
}

int main(void) {
    test_story();
    test_permutation(th_tmpdir("gguf_model"));
    return th_finish("test_gguf_model");
}
