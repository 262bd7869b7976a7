/* The test prompts of phases 3-5 (src/deploy/prompts.h): every text is long enough for the
 * longest prompt with the real Llama-3 and Qwen3 tokenizers; a model with a tokenizer gets
 * exactly what its tokenizer gives (BOS first when it has one), truncated, with each group of
 * prompts on texts of its own and the evaluator's seeds on others; a model without one, or
 * with a tokenizer larger than its vocabulary, gets the random ids with the reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deploy/phases.h"
#include "deploy/prompts.h"
#include "io/mmap.h"
#include "tharness.h"

static void texts_long_enough(const char *tokdir) {
    ts_tok *t = NULL;
    ts_error err;
    if (ts_tok_load(th_shared(tokdir), &t, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    int shortest = 1 << 30;
    for (int i = 0; i < TS_PROMPT_TEXTS; i++) {
        const char *name, *text = ts_prompt_text(i, &name);
        int32_t *ids = NULL;
        int n = 0;
        CHECK(ts_tok_encode(t, text, strlen(text), 1, &ids, &n, &err) == TS_OK, "%s: %s", name, err.msg);
        CHECK(n >= TS_PHASE_PROMPT_MAX, "%s: text %s gives %d tokens, fewer than %d", tokdir, name, n, TS_PHASE_PROMPT_MAX);
        if (n < shortest) shortest = n;
        for (int j = 0; j < i; j++) {
            const char *other;
            ts_prompt_text(j, &other);
            CHECK(strcmp(name, other), "two texts named %s", name);
        }
        free(ids);
    }
    printf("  %s: the shortest text gives %d tokens\n", tokdir, shortest);
    ts_tok_free(t);
}

/* A synth model with a real tokenizer (`tessera synth ... --tokenizer`). */
static ts_model *synth(const char *preset, int vocab, const char *tokdir, const char *name) {
    char cmd[2048];
    const char *dir = th_tmpdir(name);
    snprintf(cmd, sizeof cmd, "%s synth %s %s/m --seed 2 --vocab %d --tokenizer %s >/dev/null 2>&1", th_bin(), preset,
             dir, vocab, th_shared(tokdir));
    CHECK(system(cmd) == 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "%s/m", dir);
    ts_model *m = NULL;
    ts_error err;
    CHECK(ts_model_open(cmd, &m, &err) == TS_OK, "%s", err.msg);
    return m;
}

static void with_tokenizer(const char *preset, int vocab, const char *tokdir, int32_t want_bos) {
    char own[64]; /* a directory of this test's own: test_tok_gguf's are named after the tokenizers */
    snprintf(own, sizeof own, "prompts-%s", tokdir + 11);
    ts_model *m = synth(preset, vocab, tokdir, own);
    if (!m) return;
    ts_prompt_set p, q;
    ts_error err;
    CHECK(ts_prompts_open(m, NULL, &p, &err) == TS_OK, "%s", err.msg);
    CHECK(p.text == 1, "%s: random ids: %s", tokdir, p.why);
    if (!p.text) goto out;
    CHECK(ts_tok_bos(p.tok) == want_bos && ts_tok_add_bos(p.tok) == (want_bos >= 0), "%s: BOS %d, expected %d", tokdir,
          ts_tok_bos(p.tok), want_bos);
    /* Phase 3's first prompt: the first text's first 8 tokens, exactly as the tokenizer gives. */
    const char *name, *text = ts_prompt_text(0, &name);
    int32_t *ids = NULL, t[TS_PHASE_PROMPT_MAX];
    int n = 0;
    char got[320];
    CHECK(ts_tok_encode(p.tok, text, strlen(text), ts_tok_add_bos(p.tok), &ids, &n, &err) == TS_OK, "%s", err.msg);
    ts_prompts_get(&p, 0, 0, t, 8, got, sizeof got);
    CHECK(!strcmp(got, name) && n >= 8 && !memcmp(t, ids, sizeof(int32_t) * 8), "prompt 0 is %s, not the first 8 tokens of %s",
          got, name);
    CHECK(want_bos < 0 || t[0] == want_bos, "prompt 0 starts with %d, not BOS %d", t[0], want_bos);
    free(ids);
    /* Each group on texts of its own at seed 0; every evaluator seed tried on others. */
    char seen[TS_PROMPT_TEXTS][320];
    int ks[] = {0, 1, 2, 3, 4, 5, 100, 101, 102, 103, 104, 105, 106, 107, 300, 301, 302, 303, 304, 305, 306, 307};
    for (int i = 0; i < TS_PROMPT_TEXTS; i++) {
        ts_prompts_get(&p, 0, ks[i], t, 8, seen[i], sizeof seen[i]);
        for (int j = 0; j < i; j++) CHECK(strcmp(seen[i], seen[j]), "k %d and k %d both take %s", ks[i], ks[j], seen[i]);
    }
    for (uint64_t seed = 1; seed < 60; seed++)
        for (int k = 0; k < TS_PHASE_PROMPTS; k++) {
            ts_prompts_get(&p, seed, k, t, 8, got, sizeof got);
            CHECK(strcmp(got, seen[k]), "seed %llu gives prompt %d deploy's text %s", (unsigned long long)seed, k, got);
        }
    /* A prompt longer than its text: the next text joined on, encoded as one. */
    int need = p.n_ids[0] + 5;
    int32_t *longer = malloc(sizeof(int32_t) * (size_t)need);
    ts_prompts_get(&p, 0, 0, longer, need, got, sizeof got);
    const char *second;
    ts_prompt_text(1, &second);
    char want[320];
    snprintf(want, sizeof want, "%s+%s", name, second);
    CHECK(!strcmp(got, want), "a %d-token prompt 0 is %s, expected %s", need, got, want);
    free(longer);
    /* The same texts, the same ids: the fingerprint the evaluator compares. */
    CHECK(ts_prompts_open(m, NULL, &q, &err) == TS_OK && q.text && !strcmp(p.fingerprint, q.fingerprint),
          "fingerprints differ: %s, %s", p.fingerprint, q.fingerprint);
    json_t *j = ts_prompts_json(&p);
    CHECK(!strcmp(json_string_value(json_object_get(j, "kind")), "text") &&
              !strcmp(json_string_value(json_object_get(j, "fingerprint")), p.fingerprint),
          "prompt_source is not text with the fingerprint");
    json_decref(j);
    ts_prompts_close(&q);
    /* Forced random ids (the evaluator following a random-id deployment). */
    CHECK(ts_prompts_open(m, "as deployed", &q, &err) == TS_OK && !q.text && !strcmp(q.why, "as deployed"),
          "forced random ids: text %d, why %s", q.text, q.why);
    ts_prompts_close(&q);
out:
    ts_prompts_close(&p);
    ts_model_close(m);
}

static void random_ids(const char *dir, const char *why) {
    ts_model *m = NULL;
    ts_error err;
    if (ts_model_open(dir, &m, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    ts_prompt_set p;
    CHECK(ts_prompts_open(m, NULL, &p, &err) == TS_OK, "%s", err.msg);
    CHECK(!p.text && strstr(p.why, why), "%s: text %d, why \"%s\", expected random ids because \"%s\"", dir, p.text, p.why,
          why);
    int32_t a[24], b[24];
    char name[320];
    ts_prompts_get(&p, 7, 3, a, 24, name, sizeof name);
    ts_phase_prompt_tokens(ts_model_config(m), 7, 3, b, 24);
    CHECK(!memcmp(a, b, sizeof a) && !strcmp(name, "random ids"), "random ids differ from ts_phase_prompt_tokens");
    json_t *j = ts_prompts_json(&p);
    CHECK(!strcmp(json_string_value(json_object_get(j, "kind")), "random ids") &&
              strstr(json_string_value(json_object_get(j, "why")), why), "prompt_source lacks the reason");
    json_decref(j);
    ts_prompts_close(&p);
    ts_model_close(m);
}

int main(void) {
    texts_long_enough("tokenizers/llama3");
    texts_long_enough("tokenizers/qwen3");
    with_tokenizer("qwen3-0.6b-tiny", 151936, "tokenizers/qwen3", -1);
    with_tokenizer("llama-3.2-1b-tiny", 128256, "tokenizers/llama3", 128000);
    random_ids(th_fixture("hf/qwen3_qknorm"), "the model has no tokenizer");
    /* A 256-token model beside the 151669-token Qwen3 tokenizer: random ids, not a crash. */
    const char *d = th_tmpdir("prompts-big-tokenizer");
    char src[2048], dst[2048];
    const char *files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s", th_fixture("hf/qwen3_qknorm"));
        snprintf(src + strlen(src), sizeof src - strlen(src), "/%s", files[i]);
        snprintf(dst, sizeof dst, "%s/%s", d, files[i]);
        CHECK(symlink(src, dst) == 0, "symlink %s", dst);
    }
    snprintf(src, sizeof src, "%s/tokenizer.json", th_shared("tokenizers/qwen3"));
    snprintf(dst, sizeof dst, "%s/tokenizer.json", d);
    CHECK(symlink(src, dst) == 0, "symlink %s", dst);
    random_ids(d, "the tokenizer's 151669 tokens exceed the model's vocabulary of 256");
    /* A tokenizer.json that does not load: random ids, saying why. */
    unlink(dst);
    FILE *f = fopen(dst, "w");
    if (f) fputs("{\"model\": 3}", f), fclose(f);
    random_ids(d, "the tokenizer could not be loaded");
    return th_finish("test_prompts");
}
