/* HF goldens (tools/gen_hf_fixtures.py for the test fixtures, tools/hf_golden.py for any
 * checkpoint): token sequences with transformers' fp32 logits and per-layer hidden states,
 * described by a golden.json. */
#ifndef TS_DEPLOY_GOLDEN_H
#define TS_DEPLOY_GOLDEN_H
#include <stdint.h>

#include "tessera.h"

typedef struct ts_golden_seq {
    int32_t *tokens;
    int n_tokens;
    float *logits; /* (n_tokens, n_vocab) */
    int n_vocab;
    float *hidden; /* (n_states, n_tokens, hidden_size) or NULL */
    int n_states, hidden_size;
} ts_golden_seq;

typedef struct ts_golden {
    ts_golden_seq *seqs;
    int n_seqs;
    char generator[128];
    char transformers_version[64]; /* "" when golden.json does not say */
} ts_golden;

ts_status ts_golden_load(const char *json_path, ts_golden *g, ts_error *err);
void ts_golden_free(ts_golden *g);

#endif
