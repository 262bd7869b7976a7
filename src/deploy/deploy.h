/* `tessera deploy` as a library call: the phase driver. Runs phases lo..hi in order, each
 * closed by its gate, writes OUT/phaseN.json after each, resumes from the reports already in
 * OUT when starting later than phase 0, runs the diagnosis once when a numerical gate fails,
 * stops the later phases then unless forced (recorded), always leaves manifest.json and
 * report.md behind, and runs phase 7 as a fresh `tessera eval` process. The CLI only parses
 * arguments into ts_deploy_opts. */
#ifndef TS_DEPLOY_DEPLOY_H
#define TS_DEPLOY_DEPLOY_H
#include <stdio.h>

#include "deploy/phases.h"

typedef struct ts_deploy_opts {
    const char *model_dir;
    const char *out_dir;       /* NULL: deployments/<model dir name> */
    int lo, hi;                /* phases to run, 0 <= lo <= hi <= 7 */
    int threads;               /* 0: every core; resolved once and recorded as the real count */
    int force;                 /* run later phases after a failed gate (recorded) */
    const char *golden;        /* phase 0: golden.json, or NULL */
    const char *hf_python;     /* phase 0: a python with torch + transformers that makes the goldens */
    const char *hf_script;     /* phase 0: tools/hf_golden.py elsewhere than where it is looked for */
    ts_perf_opts p4, p5;       /* phases 4-5 (ts_perf_defaults); out/threads/fault are set here */
    const ts_cpu_fault *fault; /* debug: corrupt one cpu step, or NULL */
    FILE *out;                 /* progress and tables, or NULL */
    FILE *json;                /* each phase report as JSON, or NULL */
    const char *eval_exe;      /* the tessera binary that runs phase 7 (`EXE eval OUT`) */
    int quant;                 /* -1, or TS_DTYPE_Q8_0 / TS_DTYPE_Q4_0: phases 1-7 run the weight
                                  matrices quantized at load (--quant); phase 0 checks the oracle
                                  on the weights as stored. Recorded in every report and the
                                  manifest; a resumed run must ask for the same. */
    int kv_cache;              /* TS_DTYPE_F32 (default) or TS_DTYPE_F16: what phases 1-7's KV
                                  caches hold, the oracle's rounded alike (--kv-cache). Recorded
                                  like quant; a resumed run must ask for the same. */
} ts_deploy_opts;

/* Fills the defaults: phases 0-7, perf defaults, everything else off. */
void ts_deploy_defaults(ts_deploy_opts *o);

/* TS_OK when every phase that ran passed; TS_ERR_GATE (err: the first failure) when a gate
 * failed, whether or not --force ran the rest; other statuses for errors that stopped it. */
ts_status ts_deploy_run(const ts_deploy_opts *o, ts_error *err);

/* deployments/<last path component of model_dir>. */
void ts_deploy_default_out(const char *model_dir, char *buf, size_t len);

#endif
