/* Golden logits from Hugging Face transformers for any checkpoint (`tessera deploy MODEL
 * --hf-python PY`). Phase 0 writes the token prompts it will compare to DIR/hf_prompts.json and
 * runs `PY tools/hf_golden.py MODEL DIR --prompts DIR/hf_prompts.json`, which writes
 * DIR/golden.json and its binaries in the format golden.h reads. golden.json carries the tokens
 * back and phase 0 checks them against the prompts, so the two sides cannot drift. */
#ifndef TS_DEPLOY_HF_GOLDEN_H
#define TS_DEPLOY_HF_GOLDEN_H
#include <stdint.h>
#include <stdio.h>

#include "tessera.h"

typedef struct ts_hf_golden_opts {
    const char *python; /* an interpreter that imports torch and transformers */
    const char *script; /* tools/hf_golden.py, or NULL to find it (ts_hf_golden_script) */
    FILE *out;          /* where the script's own output goes (stdout or stderr), or NULL: silenced */
    int threads;        /* torch threads; 0 = torch's choice */
} ts_hf_golden_opts;

/* The generator script: `override` when given, else $TESSERA_HF_SCRIPT, else the source tree's
 * tools/hf_golden.py (TS_SOURCE_DIR, fixed at build time), else tools/hf_golden.py one folder
 * above the running binary's. Errors name every place tried. */
ts_status ts_hf_golden_script(const char *override, char *path, size_t len, ts_error *err);

/* Writes dir/hf_prompts.json (n prompts, lens[k] ids each), removes a stale dir/golden.json and
 * runs the script on model_dir; returns TS_OK when it exited 0 and dir/golden.json exists.
 * A failure (TS_ERR_IO) names the command line and its exit status; the script's own message is
 * on stderr. *script_used (may be NULL) receives the script path, caller frees. */
ts_status ts_hf_golden_generate(const char *model_dir, const char *dir, const int32_t *const *prompts, const int *lens,
                                int n, const ts_hf_golden_opts *o, char **script_used, ts_error *err);

#endif
