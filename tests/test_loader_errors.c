/* Bad checkpoints give one precise error, never a crash: truncated or corrupt safetensors
 * (length prefix, header JSON, dtype, offsets, overlap), tensors that disagree with config.json,
 * broken shard indexes, NaN/Inf weights in BF16/F16/F32, and config.json mistakes. Each case is
 * a corrupted copy of a real fixture in a temp dir; we assert the status and that the message
 * names the file, the tensor or field, and the expected value, and that no file is modified. */
#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "model/model.h"
#include "tharness.h"

#define SHARD1 "model-00001-of-00003.safetensors"
#define SHARD2 "model-00002-of-00003.safetensors"
#define SHARD3 "model-00003-of-00003.safetensors"

/* ---- files ---- */

/* dir + "/" + name in one of a few rotating static buffers (several may be live at once). */
static const char *P(const char *dir, const char *name) {
    static char buf[8][2048];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", dir, name);
    return b;
}

/* Whole regular file into malloc'd memory (NUL-terminated), or NULL. */
static unsigned char *slurp(const char *path, size_t *len) {
    struct stat st;
    if (len) *len = 0;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t n = (size_t)st.st_size;
    unsigned char *p = malloc(n + 1);
    if (p && fread(p, 1, n, f) != n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) p[n] = 0;
    if (p && len) *len = n;
    return p;
}

static void spit(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(p, 1, n, f) == n;
    CHECK(f && fclose(f) == 0 && ok, "cannot write %s", path);
}

/* A fresh copy of fixture's regular files (not golden/) in TS_TMP/loader_errors/<name>. */
static const char *model_copy(const char *fixture, const char *name) {
    static char dir[1024];
    char src[1024];
    snprintf(src, sizeof src, "loader_errors/%s", name); /* apart from other tests' dirs */
    snprintf(dir, sizeof dir, "%s", th_tmpdir(src));
    snprintf(src, sizeof src, "%s/%s", th_fixture("hf"), fixture);
    DIR *d = opendir(src);
    CHECK(d != NULL, "cannot list %s", src);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char from[2048], to[2048]; /* not P(): callers hold P() paths across this call */
        size_t n;
        snprintf(from, sizeof from, "%s/%s", src, e->d_name);
        snprintf(to, sizeof to, "%s/%s", dir, e->d_name);
        unsigned char *p = slurp(from, &n); /* NULL for ".", ".." and golden/ */
        if (p) spit(to, p, n);
        free(p);
    }
    if (d) closedir(d);
    return dir;
}

/* s with its first `from` replaced by `to` (malloc'd), or NULL; *line: 1-based line of it. */
static char *replace(const char *s, const char *from, const char *to, int *line) {
    const char *at = s ? strstr(s, from) : NULL;
    CHECK(at != NULL, "\"%s\" not found", from);
    if (!at) return NULL;
    *line = 1;
    for (const char *q = s; q < at; q++) *line += *q == '\n';
    size_t a = (size_t)(at - s), tl = strlen(to);
    char *out = malloc(strlen(s) - strlen(from) + tl + 1);
    memcpy(out, s, a);
    memcpy(out + a, to, tl);
    strcpy(out + a + tl, at + strlen(from));
    return out;
}

/* Edits a text file (config.json, the index); returns the line of the edit. */
static int edit_text(const char *path, const char *from, const char *to) {
    int line = 0;
    char *s = (char *)slurp(path, NULL), *out = replace(s, from, to, &line);
    if (out) spit(path, out, strlen(out));
    free(out);
    free(s);
    return line;
}

/* ---- safetensors images: 8-byte length, JSON header, data area ---- */
typedef struct st_img {
    unsigned char *raw;
    size_t size, hlen;
    char *hdr; /* NUL-terminated copy of the header text */
} st_img;

static int st_load(const char *path, st_img *im) {
    memset(im, 0, sizeof *im);
    im->raw = slurp(path, &im->size);
    CHECK(im->raw && im->size >= 8, "%s unreadable", path);
    if (!im->raw || im->size < 8) return 0;
    for (int i = 7; i >= 0; i--) im->hlen = (im->hlen << 8) | im->raw[i];
    im->hdr = malloc(im->hlen + 1);
    memcpy(im->hdr, im->raw + 8, im->hlen);
    im->hdr[im->hlen] = 0;
    return 1;
}

static void st_free(st_img *im) {
    free(im->raw);
    free(im->hdr);
}

static const unsigned char *st_data(const st_img *im) { return im->raw + 8 + im->hlen; }
static size_t st_data_size(const st_img *im) { return im->size - 8 - im->hlen; }

static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Writes length + hdr (space-padded to 8 bytes, keeping the data aligned) + data. */
static void st_save(const char *path, const char *hdr, const void *data, size_t dlen) {
    size_t hl = strlen(hdr), padded = (hl + 7) & ~(size_t)7;
    unsigned char *out = malloc(8 + padded + dlen);
    put_u64(out, padded);
    memcpy(out + 8, hdr, hl);
    memset(out + 8 + hl, ' ', padded - hl);
    if (dlen) memcpy(out + 8 + padded, data, dlen);
    spit(path, out, 8 + padded + dlen);
    free(out);
}

/* Header text edit: first `from` -> `to`, data area unchanged. */
static void st_edit(const char *path, const char *from, const char *to) {
    st_img im;
    int line;
    if (!st_load(path, &im)) return;
    char *h = replace(im.hdr, from, to, &line);
    if (h) st_save(path, h, st_data(&im), st_data_size(&im));
    free(h);
    st_free(&im);
}

/* Drops the entry ,"name":{...} from the header. */
static void st_remove(const char *path, const char *name) {
    st_img im;
    if (!st_load(path, &im)) return;
    char key[256];
    snprintf(key, sizeof key, ",\"%s\":{", name);
    char *at = strstr(im.hdr, key), *end = at ? strchr(at, '}') : NULL;
    CHECK(end != NULL, "no entry %s in %s", name, path);
    if (end) {
        memmove(at, end + 1, strlen(end + 1) + 1);
        st_save(path, im.hdr, st_data(&im), st_data_size(&im));
    }
    st_free(&im);
}

/* Adds a real BF16 [64] tensor: a header entry, its 128 bytes appended to the data area. */
static void st_append(const char *path, const char *name) {
    st_img im;
    if (!st_load(path, &im)) return;
    size_t ds = st_data_size(&im), hl = im.hlen + 256;
    char *h = malloc(hl);
    unsigned char *data = calloc(ds + 128, 1);
    memcpy(data, st_data(&im), ds);
    snprintf(h, hl, "{\"%s\":{\"dtype\":\"BF16\",\"shape\":[64],\"data_offsets\":[%zu,%zu]},%s",
             name, ds, ds + 128, im.hdr + 1);
    st_save(path, h, data, ds + 128);
    free(h);
    free(data);
    st_free(&im);
}

/* Looks up a tensor of a safetensors file through the parser under test (which must accept
 * the file): its absolute file offset and its index in header order. */
static int st_find(const char *path, const char *name, size_t *offset, ts_dtype *dt) {
    size_t n;
    unsigned char *p = slurp(path, &n);
    ts_tensor *t = NULL;
    int nt = 0, found = -1;
    ts_error err;
    CHECK(p && ts_st_parse(p, n, path, &t, &nt, &err) == TS_OK, "parse %s", path);
    for (int i = 0; i < nt && found < 0; i++)
        if (strcmp(t[i].name, name) == 0) {
            found = i;
            if (offset) *offset = t[i].offset;
            if (dt) *dt = t[i].dtype;
        }
    ts_tensors_free(t, nt);
    free(p);
    return found;
}

/* Overwrites element `elem` of tensor `name` with the raw little-endian bits. */
static void poke(const char *path, const char *name, size_t elem, uint32_t bits) {
    size_t off = 0;
    ts_dtype dt = TS_DTYPE_F32;
    CHECK(st_find(path, name, &off, &dt) >= 0, "%s not in %s", name, path);
    size_t esz = ts_dtype_size(dt), n;
    unsigned char *p = slurp(path, &n);
    for (size_t i = 0; i < esz; i++) p[off + elem * esz + i] = (unsigned char)(bits >> (8 * i));
    spit(path, p, n);
    free(p);
}

static void truncate_to(const char *path, size_t n) {
    size_t len;
    unsigned char *p = slurp(path, &len);
    CHECK(p && n <= len, "truncate %s", path);
    if (p) spit(path, p, n);
    free(p);
}

/* ---- expectations ---- */

/* Checks status and that every NULL-terminated needle is in the message. */
static void expect_msg(const char *what, ts_status got, ts_status want, const ts_error *err, ...) {
    CHECK(got == want, "%s: got %s, expected %s (%s)", what, ts_status_name(got),
          ts_status_name(want), got ? err->msg : "");
    if (got == TS_OK) return;
    printf("  %-24s %-22s %s\n", what, ts_status_name(got), err->msg);
    va_list ap;
    va_start(ap, err);
    for (const char *s; (s = va_arg(ap, const char *));)
        CHECK(strstr(err->msg, s) != NULL, "%s: message lacks \"%s\": %s", what, s, err->msg);
    va_end(ap);
}

static ts_status try_open(const char *dir, ts_error *err) {
    ts_model *m = NULL;
    memset(err->msg, 0, sizeof err->msg);
    ts_status s = ts_model_open(dir, &m, err);
    CHECK((s == TS_OK) == (m != NULL), "model handle must be set exactly on success");
    ts_model_close(m);
    return s;
}

#define EXPECT_OPEN(what, dir, want, ...)                                                          \
    do {                                                                                           \
        ts_error e_;                                                                               \
        ts_status s_ = try_open(dir, &e_);                                                         \
        expect_msg(what, s_, want, &e_, __VA_ARGS__, (const char *)NULL);                          \
    } while (0)

/* ---- safetensors structure ---- */

/* d, f := a fresh copy of the Qwen3 fixture and its model.safetensors. */
#define QWEN(name) (d = model_copy("qwen3_qknorm", name), f = P(d, "model.safetensors"))

static void test_truncation(void) {
    const char *d, *f;
    QWEN("trunc_data");
    st_img im;
    if (!st_load(f, &im)) return;
    size_t cut = 8 + im.hlen + st_data_size(&im) / 2;
    /* The first tensor in header order that no longer fits is the one reported. */
    ts_tensor *t;
    int n;
    ts_error err;
    char want[64] = "?", area[64];
    CHECK(ts_st_parse(im.raw, im.size, f, &t, &n, &err) == TS_OK, "%s", err.msg);
    for (int i = 0; i < n; i++)
        if (t[i].offset + t[i].nbytes > cut) {
            snprintf(want, sizeof want, "\"%s\"", t[i].name);
            break;
        }
    ts_tensors_free(t, n);
    snprintf(area, sizeof area, "outside the data area of %zu bytes", cut - 8 - im.hlen);
    truncate_to(f, cut);
    EXPECT_OPEN("cut in data area", d, TS_ERR_FORMAT, f, want, area);

    char hl[64], sz[64];
    QWEN("trunc_header");
    truncate_to(f, 8 + im.hlen / 2);
    snprintf(hl, sizeof hl, "header length %zu", im.hlen);
    snprintf(sz, sizeof sz, "file of %zu bytes", 8 + im.hlen / 2);
    EXPECT_OPEN("cut in header", d, TS_ERR_FORMAT, f, hl, sz);

    truncate_to(f, 5);
    EXPECT_OPEN("5-byte file", d, TS_ERR_FORMAT, f, "file is 5 bytes", "8-byte length");
    truncate_to(f, 0);
    EXPECT_OPEN("empty file", d, TS_ERR_FORMAT, f, "file is 0 bytes");
    st_free(&im);
}

static void test_header_length(void) {
    const char *d, *f;
    QWEN("hlen");
    size_t n;
    unsigned char *orig = slurp(f, &n), *p = malloc(n);
    memcpy(p, orig, n);
    put_u64(p, UINT64_C(1) << 60);
    spit(f, p, n);
    EXPECT_OPEN("header length 2^60", d, TS_ERR_FORMAT, f, "1152921504606846976", "at most");
    char sz[64], hl[64];
    put_u64(p, n); /* plausible size, but more than the file holds after the prefix */
    spit(f, p, n);
    snprintf(hl, sizeof hl, "header length %zu", n);
    snprintf(sz, sizeof sz, "file of %zu bytes", n);
    EXPECT_OPEN("header length > file", d, TS_ERR_FORMAT, f, hl, sz);
    put_u64(p, 0);
    spit(f, p, n);
    EXPECT_OPEN("header length 0", d, TS_ERR_FORMAT, f, "header length 0");
    memcpy(p, orig, n);
    p[8] = '[';
    spit(f, p, n);
    EXPECT_OPEN("header not an object", d, TS_ERR_FORMAT, f, "'{'");
    free(p);
    free(orig);
}

static void test_header_content(void) {
    const char *d, *f;
    QWEN("bad_json");
    const char *embed = "\"model.embed_tokens.weight\"",
               *norm0 = "\"model.layers.0.input_layernorm.weight\"";
    st_edit(f, "{\"dtype\":\"BF16\",\"shape\":[256,64]", "{\"dtype\":\"BF16\" \"shape\":[256,64]");
    EXPECT_OPEN("bad header JSON", d, TS_ERR_FORMAT, f, "invalid JSON at line 1 column");

    QWEN("dup_key");
    st_edit(f, "{\"__metadata__\"", "{\"model.norm.weight\":{},\"__metadata__\"");
    EXPECT_OPEN("duplicate tensor name", d, TS_ERR_FORMAT, f, "model.norm.weight");

    QWEN("dtype_i64");
    st_edit(f, "\"dtype\":\"BF16\"", "\"dtype\":\"I64\"");
    EXPECT_OPEN("dtype I64", d, TS_ERR_UNSUPPORTED, f, embed, "\"I64\"", "BF16, F16 or F32");
    QWEN("dtype_f64");
    st_edit(f, "\"model.norm.weight\":{\"dtype\":\"BF16\"",
            "\"model.norm.weight\":{\"dtype\":\"F64\"");
    EXPECT_OPEN("dtype F64", d, TS_ERR_UNSUPPORTED, f, "\"model.norm.weight\"", "\"F64\"");
    QWEN("dtype_num");
    st_edit(f, "\"dtype\":\"BF16\"", "\"dtype\":16");
    EXPECT_OPEN("dtype not a string", d, TS_ERR_FORMAT, f, embed, "\"dtype\" is an integer");

    /* [255, 64] BF16 needs 32640 bytes, the offsets still span 32768. */
    QWEN("span");
    st_edit(f, "\"shape\":[256,64]", "\"shape\":[255,64]");
    EXPECT_OPEN("span != shape*dtype", d, TS_ERR_FORMAT, f, embed, "span 32768 bytes",
                "expected 32640 for BF16 [255, 64]");

    QWEN("overlap");
    st_edit(f, "[32768,32896]", "[32640,32768]");
    EXPECT_OPEN("overlapping offsets", d, TS_ERR_FORMAT, f, embed, norm0, "overlap");

    st_img im;
    if (!st_load(f, &im)) return;
    char past[64], area[64];
    size_t ds = st_data_size(&im);
    st_free(&im);
    QWEN("past_end");
    snprintf(past, sizeof past, "[%zu,%zu]", ds - 64, ds + 64);
    st_edit(f, "[32768,32896]", past);
    snprintf(area, sizeof area, "data area of %zu bytes", ds);
    EXPECT_OPEN("offsets past the end", d, TS_ERR_FORMAT, f, norm0, area);
    QWEN("neg_offset");
    st_edit(f, "[32768,32896]", "[-128,0]");
    EXPECT_OPEN("negative offset", d, TS_ERR_FORMAT, f, norm0, "[-128, 0]");
    QWEN("odd_offset");
    st_edit(f, "[32768,32896]", "[32769,32897]");
    EXPECT_OPEN("misaligned offset", d, TS_ERR_FORMAT, f, norm0, "not aligned");
    QWEN("shape_bad");
    st_edit(f, "\"shape\":[256,64]", "\"shape\":[256,-64]");
    EXPECT_OPEN("negative dimension", d, TS_ERR_FORMAT, f, embed, "shape[1]");
}

/* ---- tensors against config.json ---- */

static void test_tensor_set(void) {
    const char *d, *f;
    QWEN("ff_mismatch");
    edit_text(P(d, "config.json"), "\"intermediate_size\": 128", "\"intermediate_size\": 96");
    EXPECT_OPEN("intermediate_size 96", d, TS_ERR_SHAPE, f,
                "\"model.layers.0.mlp.gate_proj.weight\"", "shape [128, 64], expected [96, 64]",
                "intermediate_size", P(d, "config.json"));

    QWEN("ndim");
    st_edit(f, "\"model.norm.weight\":{\"dtype\":\"BF16\",\"shape\":[64]",
            "\"model.norm.weight\":{\"dtype\":\"BF16\",\"shape\":[8,8]");
    EXPECT_OPEN("norm as [8, 8]", d, TS_ERR_SHAPE, f, "\"model.norm.weight\"",
                "shape [8, 8], expected [64]");

    QWEN("missing");
    st_remove(f, "model.layers.1.self_attn.k_norm.weight");
    EXPECT_OPEN("missing k_norm", d, TS_ERR_SHAPE, d, "\"model.layers.1.self_attn.k_norm.weight\"",
                "missing, expected [32]", "head_dim");

    QWEN("extra");
    st_append(f, "model.layers.1.mlp.extra.weight");
    EXPECT_OPEN("unexpected tensor", d, TS_ERR_SHAPE, f, "unexpected tensor",
                "\"model.layers.1.mlp.extra.weight\"", "Qwen3ForCausalLM with 2 layers");
    QWEN("extra_bias");
    st_append(f, "model.layers.0.self_attn.q_proj.bias");
    EXPECT_OPEN("bias w/o attention_bias", d, TS_ERR_SHAPE, f,
                "\"model.layers.0.self_attn.q_proj.bias\"", "attention_bias");
}

/* ---- sharded checkpoints ---- */

static void test_shards(void) {
    const char *d = model_copy("llama_untied_sharded", "shard_missing");
    const char *idx = P(d, "model.safetensors.index.json");
    CHECK(unlink(P(d, SHARD2)) == 0, "unlink");
    EXPECT_OPEN("missing shard", d, TS_ERR_IO, idx, "\"" SHARD2 "\"", "missing",
                "model.layers.0.input_layernorm.weight");

    d = model_copy("llama_untied_sharded", "shard_wrong");
    idx = P(d, "model.safetensors.index.json");
    edit_text(idx, "\"model.embed_tokens.weight\": \"" SHARD1 "\"",
              "\"model.embed_tokens.weight\": \"" SHARD2 "\"");
    EXPECT_OPEN("tensor in wrong shard", d, TS_ERR_FORMAT, idx, "\"model.embed_tokens.weight\"",
                "is in " SHARD1, "index says " SHARD2);

    d = model_copy("llama_untied_sharded", "shard_dotdot");
    idx = P(d, "model.safetensors.index.json");
    edit_text(idx, "\"lm_head.weight\": \"" SHARD3 "\"", "\"lm_head.weight\": \"../x\"");
    EXPECT_OPEN("weight_map ../x", d, TS_ERR_FORMAT, idx, "weight_map[\"lm_head.weight\"]",
                "inside the model directory");
    edit_text(idx, "\"../x\"", "\"/etc/passwd\"");
    EXPECT_OPEN("weight_map /abs", d, TS_ERR_FORMAT, idx, "weight_map[\"lm_head.weight\"]");

    d = model_copy("llama_untied_sharded", "shard_unlisted");
    idx = P(d, "model.safetensors.index.json");
    edit_text(idx, "\"model.layers.2.input_layernorm.weight\": \"" SHARD3 "\",", "");
    EXPECT_OPEN("tensor not in index", d, TS_ERR_SHAPE, P(d, SHARD3),
                "\"model.layers.2.input_layernorm.weight\"", "not listed in", idx);

    d = model_copy("llama_untied_sharded", "shard_lost");
    idx = P(d, "model.safetensors.index.json");
    st_remove(P(d, SHARD3), "model.norm.weight");
    EXPECT_OPEN("listed, not in shard", d, TS_ERR_SHAPE, idx, "\"model.norm.weight\"",
                "listed but missing from " SHARD3);
}

/* ---- weight values ---- */

static void expect_nonfinite(const char *what, const char *fixture, const char *file,
                             const char *tensor, size_t elem, uint32_t bits, const char *kind) {
    const char *d = model_copy(fixture, "nonfinite");
    const char *f = P(d, file);
    poke(f, tensor, elem, bits);
    ts_model *m = NULL;
    ts_error err;
    ts_status s = ts_model_open(d, &m, &err);
    CHECK(s == TS_OK, "%s: open must not read values: %s", what, err.msg);
    if (s) return;
    char el[64], nm[160];
    snprintf(el, sizeof el, "element %zu is %s", elem, kind);
    snprintf(nm, sizeof nm, "\"%s\"", tensor);
    expect_msg(what, ts_model_check_values(m, &err), TS_ERR_VALUE, &err, f, nm, el, "finite",
               (const char *)NULL);
    ts_model_close(m);
}

static void test_values(void) {
    expect_nonfinite("BF16 NaN", "qwen3_qknorm", "model.safetensors",
                     "model.layers.1.mlp.down_proj.weight", 1234, 0x7fc0, "NaN");
    expect_nonfinite("BF16 +Inf", "qwen3_qknorm", "model.safetensors", "model.norm.weight", 63,
                     0x7f80, "+Inf");
    expect_nonfinite("F16 NaN", "llama_untied_sharded", SHARD3, "lm_head.weight", 20479, 0x7e00,
                     "NaN");
    expect_nonfinite("F16 -Inf", "llama_untied_sharded", SHARD1, "model.embed_tokens.weight", 0,
                     0xfc00, "-Inf");
    expect_nonfinite("F32 NaN", "llama_mha", "model.safetensors",
                     "model.layers.0.self_attn.v_proj.weight", 77, 0x7fc00001u, "NaN");
    expect_nonfinite("F32 +Inf", "llama_mha", "model.safetensors", "model.embed_tokens.weight",
                     16383, 0x7f800000u, "+Inf");
}

/* ---- config.json ---- */

static void test_config(void) {
    const char *d = model_copy("qwen3_qknorm", "config_errors");
    const char *cfg = P(d, "config.json");
    size_t n;
    char *orig = (char *)slurp(cfg, &n), at[64];
    int line = edit_text(cfg, "\"hidden_size\": 64,", "\"hidden_size\": 64,,");
    snprintf(at, sizeof at, "invalid JSON at line %d column", line);
    EXPECT_OPEN("config invalid JSON", d, TS_ERR_FORMAT, cfg, at);
    struct {
        const char *what, *from, *to;
        ts_status want;
        const char *n1, *n2;
    } k[] = {
        {"arch Mistral", "Qwen3ForCausalLM", "MistralForCausalLM", TS_ERR_UNSUPPORTED,
         "\"MistralForCausalLM\"", "LlamaForCausalLM"},
        {"no hidden_size", "\"hidden_size\": 64,", "", TS_ERR_FORMAT, "\"hidden_size\" is missing",
         "integer"},
        {"hidden_size string", "\"hidden_size\": 64", "\"hidden_size\": \"64\"", TS_ERR_FORMAT,
         "\"hidden_size\" is a string", "expected an integer"},
        {"kv heads 3", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3", TS_ERR_FORMAT,
         "num_attention_heads 4", "num_key_value_heads 3"},
        {"rope yarn", "\"rope_type\": \"default\"", "\"rope_type\": \"yarn\", \"factor\": 4.0",
         TS_ERR_UNSUPPORTED, "\"yarn\"", "llama3"},
        {"head_dim 31", "\"head_dim\": 32", "\"head_dim\": 31", TS_ERR_FORMAT, "head_dim 31",
         "even"},
        {"hidden_act gelu", "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"",
         TS_ERR_UNSUPPORTED, "\"gelu\"", "\"silu\""},
        {"sliding window", "\"use_sliding_window\": false", "\"use_sliding_window\": true",
         TS_ERR_UNSUPPORTED, "use_sliding_window", "expected false"},
        {"eos out of vocab", "\"eos_token_id\": 2", "\"eos_token_id\": 256", TS_ERR_FORMAT,
         "\"eos_token_id\" is 256", "[0, 255]"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        spit(cfg, orig, n);
        edit_text(cfg, k[i].from, k[i].to);
        EXPECT_OPEN(k[i].what, d, k[i].want, cfg, k[i].n1, k[i].n2);
    }
    free(orig);

    CHECK(unlink(cfg) == 0, "unlink config");
    EXPECT_OPEN("no config.json", d, TS_ERR_IO, d, "no config.json");
    d = model_copy("qwen3_qknorm", "no_weights");
    CHECK(unlink(P(d, "model.safetensors")) == 0, "unlink weights");
    EXPECT_OPEN("no safetensors", d, TS_ERR_IO, d, "no model.safetensors");
    EXPECT_OPEN("no such directory", "/nonexistent/tessera/model", TS_ERR_IO,
                "/nonexistent/tessera/model", "no such directory");
    static int sentinel;
    ts_model *m = (ts_model *)(void *)&sentinel;
    ts_error err;
    CHECK(ts_model_open(NULL, &m, &err) == TS_ERR_ARG && m == NULL, "NULL dir");
}

/* generation_config.json's eos_token_id joins config.json's, as transformers' generate() stops
 * at it; a malformed one names the file and the field. */
static void test_generation_config(void) {
    const char *d = model_copy("qwen3_qknorm", "generation_eos"), *g = P(d, "generation_config.json");
    static const char ok[] = "{\"bos_token_id\": 1, \"eos_token_id\": [5, 2, 7], \"do_sample\": true}";
    spit(g, ok, strlen(ok));
    ts_model *m = NULL;
    ts_error err;
    if (ts_model_open(d, &m, &err) == TS_OK) {
        const ts_config *c = ts_model_config(m);
        /* config.json's 2 first, then the new ones in the file's order, 2 once */
        CHECK(c->n_eos == 3 && c->eos_ids[0] == 2 && c->eos_ids[1] == 5 && c->eos_ids[2] == 7,
              "generation eos: %d ids (%d %d %d)", c->n_eos, c->eos_ids[0], c->eos_ids[1], c->eos_ids[2]);
        ts_model_close(m);
    } else CHECK(0, "generation_config.json with eos [5, 2, 7]: %s", err.msg);
    static const char none[] = "{\"temperature\": 0.6}";
    spit(g, none, strlen(none));
    if (ts_model_open(d, &m, &err) == TS_OK) {
        CHECK(ts_model_config(m)->n_eos == 1, "no eos field: %d ids", ts_model_config(m)->n_eos);
        ts_model_close(m);
    } else CHECK(0, "generation_config.json without eos: %s", err.msg);
    struct {
        const char *what, *text, *n1, *n2;
    } k[] = {
        {"eos out of vocab", "{\"eos_token_id\": 256}", "\"eos_token_id\" is 256", "[0, 255]"},
        {"eos list entry", "{\"eos_token_id\": [2, -1]}", "eos_token_id[1]", "[0, 256)"},
        {"eos string", "{\"eos_token_id\": \"2\"}", "\"eos_token_id\" is a string", "an integer or a list"},
        {"eos too many", "{\"eos_token_id\": [10, 11, 12, 13, 14, 15, 16, 17]}", "more than 8",
         "config.json"},
        {"top level list", "[2]", "top level is an array", "expected an object"},
        {"invalid JSON", "{\"eos_token_id\": [2,}", "invalid JSON", "generation_config.json"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        spit(g, k[i].text, strlen(k[i].text));
        EXPECT_OPEN(k[i].what, d, TS_ERR_FORMAT, g, k[i].n1, k[i].n2);
    }
}

/* ---- nothing the user owns is modified ---- */

typedef struct snap {
    int n;
    char name[16][256];
    unsigned char *bytes[16];
    size_t size[16];
} snap;

static void snap_take(const char *dir, snap *s) {
    memset(s, 0, sizeof *s);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) && s->n < 16) {
        if (e->d_name[0] == '.') continue;
        snprintf(s->name[s->n], sizeof s->name[0], "%s", e->d_name);
        s->bytes[s->n] = slurp(P(dir, e->d_name), &s->size[s->n]); /* NULL for golden/ */
        s->n++;
    }
    if (d) closedir(d);
}

static void snap_same(const char *dir, const snap *a, const char *what) {
    snap b;
    snap_take(dir, &b);
    CHECK(a->n == b.n, "%s: %d entries before, %d after in %s", what, a->n, b.n, dir);
    for (int i = 0; i < a->n && i < b.n; i++) {
        int same = strcmp(a->name[i], b.name[i]) == 0 && a->size[i] == b.size[i] &&
                   (!a->bytes[i] || memcmp(a->bytes[i], b.bytes[i], a->size[i]) == 0);
        CHECK(same, "%s: %s/%s changed", what, dir, a->name[i]);
    }
    for (int i = 0; i < a->n; i++) free(a->bytes[i]);
    for (int i = 0; i < b.n; i++) free(b.bytes[i]);
}

static void test_unmodified(void) {
    char src[1024];
    snprintf(src, sizeof src, "%s/qwen3_qknorm", th_fixture("hf"));
    snap s;
    snap_take(src, &s);
    ts_model *m;
    ts_error err;
    CHECK(ts_model_open(src, &m, &err) == TS_OK, "%s", err.msg);
    if (m) {
        CHECK(ts_model_check_values(m, &err) == TS_OK, "%s", err.msg);
        ts_model_close(m);
    }
    snap_same(src, &s, "good model");

    const char *d = model_copy("qwen3_qknorm", "unmodified");
    st_edit(P(d, "model.safetensors"), "[32768,32896]", "[32640,32768]");
    snap_take(d, &s);
    CHECK(try_open(d, &err) == TS_ERR_FORMAT, "overlap");
    snap_same(d, &s, "failed open");
}

/* An empty tensor sorted between two overlapping ones must not hide the overlap. */
static void test_overlap_behind_empty(void) {
    const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[25],\"data_offsets\":[0,100]},"
                    "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[52,52]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[25],\"data_offsets\":[60,160]}}";
    size_t hl = strlen(h), pad = (hl + 7) & ~(size_t)7, n = 8 + pad + 160;
    unsigned char *buf = calloc(n, 1);
    if (!buf) return;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(pad >> (8 * i));
    memcpy(buf + 8, h, hl);
    memset(buf + 8 + hl, ' ', pad - hl);
    ts_tensor *t = NULL;
    int nt = 0;
    ts_error e;
    ts_status st = ts_st_parse(buf, n, "empty_between.safetensors", &t, &nt, &e);
    CHECK(st == TS_ERR_FORMAT && strstr(e.msg, "overlap") && strstr(e.msg, "\"a\"") && strstr(e.msg, "\"b\""),
          "overlap hidden by an empty tensor: status %d, %s", st, st ? e.msg : "accepted");
    if (!st) ts_tensors_free(t, nt);
    free(buf);
}

int main(void) {
    test_overlap_behind_empty();
    test_truncation();
    test_header_length();
    test_header_content();
    test_tensor_set();
    test_shards();
    test_values();
    test_config();
    test_generation_config();
    test_unmodified();
    return th_finish("test_loader_errors");
}
