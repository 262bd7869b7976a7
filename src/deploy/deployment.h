/* Reading a deployment directory back (`tessera run DEPLOY_DIR`, phase 6): the model it was
 * made for, and the plan it chose (threads, autotuned tiles, weight placement) from
 * manifest.json. */
#ifndef TS_DEPLOY_DEPLOYMENT_H
#define TS_DEPLOY_DEPLOYMENT_H
#include <jansson.h>

#include "target/cpu/cpu_target.h"

#define TS_DEPLOY_MAX_TILES 64

typedef struct ts_deployment {
    char model_dir[4096];
    int threads;
    ts_cpu_tile_rec tiles[TS_DEPLOY_MAX_TILES];
    int n_tiles;
    int copy_weights; /* target.weights: 1 "copy", 0 "mmap" (or absent) */
    int all_gates_passed; /* every phase that ran passed (a "not compared" phase is not a pass) */
    int gates_failed;     /* phases whose recorded verdict is FAIL, or 1 when the deploy was --force'd */
    int oracle_not_compared; /* phase 0 ran without Hugging Face goldens */
    int quant;               /* model.quant: -1, or the ts_dtype the matrices were quantized to at load */
    int kv_cache;            /* model.kv_cache: TS_DTYPE_F32 (also when absent) or TS_DTYPE_F16 */
} ts_deployment;

/* model.quant of a manifest (null/absent: -1); path names the manifest in the message. */
ts_status ts_deployment_quant(const json_t *q, const char *path, int *quant, ts_error *err);
/* model.kv_cache of a manifest ("f32" / "f16"; absent: a deployment from before the option,
 * FP32); path names the manifest in the message. */
ts_status ts_deployment_kv_cache(const json_t *k, const char *path, int *kv, ts_error *err);
/* 1 when dir holds a manifest.json. */
int ts_deployment_is(const char *dir);
/* Errors name the manifest and the field (TS_ERR_FORMAT) or the missing file (TS_ERR_IO). */
ts_status ts_deployment_load(const char *dir, ts_deployment *d, ts_error *err);

#endif
