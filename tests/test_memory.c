/* The memory a request needs, said before it is allocated: the targets' estimates equal what
 * their constructors allocate (glibc's own count of malloc'd bytes, where the allocator is
 * glibc's), the context check names both numbers and config.json, the availability check
 * refuses a request larger than TESSERA_MEM_AVAILABLE, and a forward past the cache is an
 * error on the cpu target as on the oracle (never a write past it). */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "model/memory.h"
#include "model/model.h"
#include "target/cpu/cpu_target.h"
#include "target/ref/ref_mem.h"
#include "tharness.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TS_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TS_ASAN 1
#endif

/* Bytes glibc's malloc holds now (small blocks + mmap'd large ones); 0 under ASan, whose
 * allocator glibc does not count. */
static long long held(void) {
#ifdef TS_ASAN
    return 0;
#else
    struct mallinfo2 mi = mallinfo2();
    return (long long)(mi.uordblks + mi.hblkhd);
#endif
}

/* |estimate - allocated| within slack (the session structs, the pool, small tables). */
static void near(const char *what, unsigned long long est, long long got, long long slack) {
#ifdef TS_ASAN
    if (got <= 0) return; /* ASan's allocator is not counted by mallinfo2 */
#else
    CHECK(got > 0, "%s: glibc counted no allocation", what);
    if (got <= 0) return;
#endif
    long long d = (long long)est - got;
    CHECK(d <= slack && d >= -slack, "%s: estimate %llu bytes, allocated %lld", what, est, got);
    printf("%-34s estimate %10llu  allocated %10lld\n", what, est, got);
}

static void test_estimates(const char *rel) {
    ts_model *m;
    ts_error err;
    CHECK(ts_model_open(th_fixture(rel), &m, &err) == TS_OK, "%s", err.msg);
    if (!m) return;
    const ts_config *c = ts_model_config(m);
    for (int nth = 1; nth <= 3; nth += 2) {
        ts_mem_need need;
        ts_ref_mem_need(m, 100, 100, nth, &need);
        CHECK(need.kv == 2ull * c->n_layers * 100 * c->n_kv_heads * c->head_dim * 4, "ref kv %llu",
              (unsigned long long)need.kv);
        CHECK(need.weights_owned == 0 && need.outputs == 0, "ref owns no weights");
        ts_ref *r = NULL;
        long long h0 = held();
        CHECK(ts_ref_new(m, 100, &r, &err) == TS_OK && ts_ref_set_threads(r, nth, &err) == TS_OK, "%s", err.msg);
        /* the session holds the KV cache (and rows per thread); the forward's scratch, the rest
         * of need.scratch, lives only during a call */
        near(nth == 1 ? "ref session, 1 thread" : "ref session, 3 threads", need.kv, held() - h0,
             (long long)need.scratch + 4096);
        ts_ref_free(r);
    }
    unsigned disables[2] = {0, TS_OPT_ZERO_COPY};
    for (int k = 0; k < 2; k++) {
        ts_cpu_opts o = {.n_threads = 2, .force_variant = -1, .disable = disables[k]};
        ts_mem_need need;
        ts_cpu_mem_need(m, 300, &o, &need);
        CHECK(need.kv == 2ull * c->n_layers * 300 * c->n_kv_heads * c->head_dim * 4, "cpu kv");
        CHECK(need.weights_mapped > 0, "mapped weights counted");
        ts_cpu *cp = NULL;
        long long h0 = held();
        CHECK(ts_cpu_new(m, 300, &o, &cp, &err) == TS_OK, "%s", err.msg);
        if (!cp) continue;
        near(k ? "cpu session, weights copied" : "cpu session, zero-copy", ts_mem_private(&need), held() - h0,
             1 << 16);
        CHECK(need.weights_owned >= ts_cpu_converted_bytes(cp), "owned %llu < converted %zu",
              (unsigned long long)need.weights_owned, ts_cpu_converted_bytes(cp));
        /* a forward past the cache: an error naming the capacity, the cache untouched */
        int32_t *toks = calloc(301, sizeof *toks);
        CHECK(ts_cpu_forward(cp, toks, 301, NULL, 0, NULL, &err) == TS_ERR_ARG && strstr(err.msg, "300"),
              "301 tokens into 300 positions: %s", err.msg);
        CHECK(ts_cpu_n_past(cp) == 0, "a refused forward moved the cache");
        CHECK(ts_cpu_forward(cp, toks, 300, NULL, 0, NULL, &err) == TS_OK, "%s", err.msg);
        CHECK(ts_cpu_forward(cp, toks, 1, NULL, 0, NULL, &err) == TS_ERR_ARG, "decode past a full cache");
        free(toks);
        ts_cpu_free(cp);
    }
    ts_model_close(m);
}

static void test_context_and_budget(void) {
    ts_model *m;
    ts_error err;
    CHECK(ts_model_open(th_fixture("hf/llama_mha"), &m, &err) == TS_OK, "%s", err.msg);
    if (!m) return;
    int max = ts_model_config(m)->max_pos;
    CHECK(ts_model_check_context(m, max, "--tokens: token count", &err) == TS_OK, "%s", err.msg);
    char want[128];
    snprintf(want, sizeof want, "token count %d exceeds the model's context of %d positions", max + 1, max);
    CHECK(ts_model_check_context(m, max + 1, "--tokens: token count", &err) == TS_ERR_ARG &&
              strstr(err.msg, want) && strstr(err.msg, "config.json"),
          "%s", err.msg);

    ts_mem_need need = {.weights_mapped = 1 << 20, .kv = 3 << 20, .scratch = 1 << 10, .outputs = 5 << 20};
    CHECK(ts_mem_private(&need) == (8u << 20) + 1024, "private excludes the mapped weights");
    char d[256];
    ts_mem_describe(&need, d, sizeof d);
    CHECK(!strcmp(d, "KV cache 3.0 MiB + scratch 1.0 KiB + outputs 5.0 MiB = 8.0 MiB"), "describe: %s", d);
    setenv("TESSERA_MEM_AVAILABLE", "8388608", 1);
    uint64_t avail = 0;
    CHECK(ts_mem_available(&avail, NULL, 0) && avail == 8388608, "override read as %llu", (unsigned long long)avail);
    CHECK(ts_mem_check(&need, "logits of 3 tokens", &err) == TS_ERR_NOMEM && strstr(err.msg, "logits of 3 tokens") &&
              strstr(err.msg, "8.0 MiB is available (TESSERA_MEM_AVAILABLE)"),
          "%s", err.msg);
    setenv("TESSERA_MEM_AVAILABLE", "8389632", 1); /* exactly the private bytes: fits */
    CHECK(ts_mem_check(&need, "x", &err) == TS_OK, "%s", err.msg);
    unsetenv("TESSERA_MEM_AVAILABLE");
    CHECK(ts_mem_available(&avail, d, sizeof d) && avail > 0, "no available memory read on Linux");
    printf("available: %llu bytes (%s)\n", (unsigned long long)avail, d);
    ts_model_close(m);
}

int main(void) {
    test_estimates("hf/llama_mha");        /* F32: the cpu target converts every matrix */
    test_estimates("hf/qwen3_qknorm");
    test_context_and_budget();
    return th_finish("memory");
}
