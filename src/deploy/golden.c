/* Loading golden.json and the binary files it names (paths relative to the json's folder). */
#include "deploy/golden.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/json.h"
#include "io/logits_file.h"
#include "io/mmap.h"

void ts_golden_free(ts_golden *g) {
    for (int i = 0; i < g->n_seqs; i++) {
        free(g->seqs[i].tokens);
        free(g->seqs[i].logits);
        free(g->seqs[i].hidden);
    }
    free(g->seqs);
    memset(g, 0, sizeof *g);
}

static char *sibling(const char *json_path, const char *name) {
    const char *slash = strrchr(json_path, '/');
    size_t dl = slash ? (size_t)(slash - json_path) : 1;
    char *dir = malloc(dl + 1);
    if (!dir) return NULL;
    memcpy(dir, slash ? json_path : ".", dl);
    dir[dl] = 0;
    char *p = ts_path_join(dir, name);
    free(dir);
    return p;
}

static ts_status load_seq(const char *path, const json_t *js, int idx, ts_golden_seq *q,
                          ts_error *err) {
    const json_t *toks = json_object_get(js, "tokens");
    const json_t *lg = json_object_get(js, "logits");
    const json_t *hd = json_object_get(js, "hidden");
    if (!json_is_array(toks) || json_array_size(toks) == 0 || !json_is_string(lg))
        return ts_fail(err, TS_ERR_FORMAT,
                       "%s: sequences[%d] needs a non-empty \"tokens\" list and a \"logits\" file",
                       path, idx);
    q->n_tokens = (int)json_array_size(toks);
    q->tokens = malloc(sizeof(int32_t) * (size_t)q->n_tokens);
    if (!q->tokens) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    for (int i = 0; i < q->n_tokens; i++) {
        const json_t *t = json_array_get(toks, (size_t)i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
            return ts_fail(err, TS_ERR_FORMAT, "%s: sequences[%d].tokens[%d] is not a token id",
                           path, idx, i);
        q->tokens[i] = (int32_t)json_integer_value(t);
    }
    char *lp = sibling(path, json_string_value(lg));
    if (!lp) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    int nt;
    ts_status s = ts_logits_read(lp, &nt, &q->n_vocab, &q->logits, err);
    if (!s && nt != q->n_tokens)
        s = ts_fail(err, TS_ERR_FORMAT, "%s: %d positions of logits, expected %d (the tokens)", lp,
                    nt, q->n_tokens);
    free(lp);
    if (s || !json_is_string(hd)) return s;
    char *hp = sibling(path, json_string_value(hd));
    if (!hp) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    s = ts_hidden_read(hp, &q->n_states, &nt, &q->hidden_size, &q->hidden, err);
    if (!s && nt != q->n_tokens)
        s = ts_fail(err, TS_ERR_FORMAT, "%s: %d positions of hidden states, expected %d", hp, nt,
                    q->n_tokens);
    free(hp);
    return s;
}

ts_status ts_golden_load(const char *path, ts_golden *g, ts_error *err) {
    memset(g, 0, sizeof *g);
    json_t *root;
    ts_status s = ts_json_load_file(path, 16u << 20, &root, err);
    if (s) return s;
    const json_t *seqs = json_object_get(root, "sequences");
    const char *gen = NULL;
    if (!json_is_array(seqs) || json_array_size(seqs) == 0) {
        s = ts_fail(err, TS_ERR_FORMAT, "%s: \"sequences\" is %s, expected a non-empty list", path,
                    ts_json_type_name(seqs));
        goto done;
    }
    if ((s = ts_json_str(root, "generator", path, 0, "unknown", &gen, err))) goto done;
    snprintf(g->generator, sizeof g->generator, "%s", gen);
    if ((s = ts_json_str(root, "transformers_version", path, 0, "", &gen, err))) goto done;
    snprintf(g->transformers_version, sizeof g->transformers_version, "%s", gen);
    g->seqs = calloc(json_array_size(seqs), sizeof *g->seqs);
    if (!g->seqs) {
        s = ts_fail(err, TS_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < json_array_size(seqs) && !s; i++) {
        g->n_seqs++;
        s = load_seq(path, json_array_get(seqs, i), (int)i, &g->seqs[i], err);
    }
done:
    json_decref(root);
    if (s) ts_golden_free(g);
    return s;
}
