/* What phases 1-5 share: their seeded inputs (random activations, token prompts), the model's
 * tokenizer for the text prompts, and the way a phase report is closed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "deploy/phases.h"
#include "io/gguf.h"
#include "io/mmap.h"

const int ts_phase_prompt_lens[TS_PHASE_PROMPTS] = {8, 16, 24, 32, 48, TS_PHASE_PROMPT_MAX};

float ts_phase_frand(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2 - 1);
}

json_t *ts_phase_finish(json_t *rep, json_t *gates, int phase, int pass, FILE *out) {
    json_object_set_new(rep, "phase", json_integer(phase));
    json_object_set_new(rep, "gates", gates);
    json_object_set_new(rep, "pass", json_boolean(pass));
    if (out) fprintf(out, "phase %d: %s\n", phase, pass ? "PASS" : "FAIL");
    return rep;
}

void ts_phase_prompt_tokens(const ts_config *c, uint64_t seed, int k, int32_t *t, int n) {
    uint64_t s = 0xabcdef12345ull + (uint64_t)k * 7919 + seed * 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)((s >> 33) % (uint64_t)c->n_vocab);
    }
    if (c->bos_id >= 0 && n > 0) t[0] = c->bos_id;
}


/* A Hugging Face model directory's tokenizer.json; the one place to teach another model format
 * (a GGUF's own vocabulary) where its tokenizer lives. */
ts_status ts_phase_model_tokenizer(const ts_model *m, ts_tok **out, ts_error *err) {
    *out = NULL;
    if (m->gguf) /* the file carries its vocabulary, when it has one */
        return ts_gguf_find(m->gguf, "tokenizer.ggml.model") ? ts_tok_from_gguf(m->gguf, out, err) : TS_OK;
    char *path = ts_path_join(m->dir, "tokenizer.json");
    if (!path) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    int has = ts_file_exists(path);
    free(path);
    /* The directory, not the file: the tokenizer reads bos/eos from the configs beside it. */
    return has ? ts_tok_load(m->dir, out, err) : TS_OK;
}

ts_status ts_phase_prompts(const ts_model *m, const ts_prompt_set *given, ts_prompt_set *own,
                           const ts_prompt_set **use, ts_error *err) {
    memset(own, 0, sizeof *own);
    *use = given ? given : own;
    return given ? TS_OK : ts_prompts_open(m, NULL, own, err);
}
