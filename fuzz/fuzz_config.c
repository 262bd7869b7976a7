/* Fuzz target: config.json bytes through ts_json_parse and ts_config_from_json. An accepted
 * config must satisfy what later code trusts without re-checking (sizes in range, heads
 * divisible, even head_dim, token ids inside the vocabulary). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_failure(const ts_error *err) {
    if (err->msg[0] == 0 || memchr(err->msg, 0, sizeof err->msg) == NULL) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *root = NULL;
    ts_error err;
    err.msg[0] = 0;
    if (ts_json_parse((const char *)data, size, "config.json", &root, &err) != TS_OK) {
        check_failure(&err);
        return 0;
    }
    ts_config c;
    err.msg[0] = 0;
    ts_status s = ts_config_from_json(root, "config.json", &c, &err);
    json_decref(root);
    if (s != TS_OK) {
        check_failure(&err);
        return 0;
    }
    if (c.n_embd < 1 || c.n_ff < 1 || c.n_layers < 1 || c.n_vocab < 1 || c.max_pos < 1) abort();
    if (c.n_heads < 1 || c.n_kv_heads < 1 || c.n_heads % c.n_kv_heads != 0) abort();
    if (c.head_dim < 2 || c.head_dim % 2 != 0) abort();
    if (c.bos_id < -1 || c.bos_id >= c.n_vocab || c.n_eos < 0 || c.n_eos > TS_MAX_EOS) abort();
    for (int i = 0; i < c.n_eos; i++)
        if (c.eos_ids[i] < 0 || c.eos_ids[i] >= c.n_vocab) abort();
    if (!isfinite(c.rope_theta) || c.rope_theta < 1.0 || !(c.rms_eps >= 0 && c.rms_eps <= 1))
        abort();
    if (c.rope_llama3 && (!(c.rope_factor >= 1.0) || c.rope_orig_max_pos < 1 ||
                          !(c.rope_high_freq_factor > c.rope_low_freq_factor)))
        abort();
    if (!c.arch_name || memchr(c.torch_dtype, 0, sizeof c.torch_dtype) == NULL) abort();
    char buf[256];
    ts_config_features(&c, buf, sizeof buf);
    if (memchr(buf, 0, sizeof buf) == NULL) abort();
    return 0;
}
