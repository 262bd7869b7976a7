/* manifest.json -> what a session needs to run the deployed plan. */
#include "deploy/deployment.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "deploy/manifest.h"
#include "deploy/tiles.h"
#include "io/quant.h"
#include "deploy/placement.h"
#include "model/model.h"
#include "io/mmap.h"

int ts_deployment_is(const char *dir) {
    char *p = ts_path_join(dir, "manifest.json");
    int yes = p && ts_file_exists(p);
    free(p);
    return yes;
}

ts_status ts_deployment_quant(const json_t *q, const char *path, int *quant, ts_error *err) {
    *quant = -1;
    if (!q || json_is_null(q)) return TS_OK;
    *quant = json_is_string(q) ? ts_quant_parse(json_string_value(q)) : -1;
    if (*quant < 0)
        return ts_fail(err, TS_ERR_FORMAT, "%s: model.quant: expected null, \"Q8_0\" or \"Q4_0\"", path);
    return TS_OK;
}

ts_status ts_deployment_kv_cache(const json_t *k, const char *path, int *kv, ts_error *err) {
    *kv = TS_DTYPE_F32;
    if (!k) return TS_OK;
    *kv = json_is_string(k) ? ts_kv_cache_parse(json_string_value(k)) : -1;
    if (*kv < 0) return ts_fail(err, TS_ERR_FORMAT, "%s: model.kv_cache: expected \"f32\" or \"f16\"", path);
    return TS_OK;
}

ts_status ts_deployment_load(const char *dir, ts_deployment *d, ts_error *err) {
    memset(d, 0, sizeof *d);
    char *path = ts_path_join(dir, "manifest.json");
    if (!path) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    json_error_t je;
    json_t *man = json_load_file(path, 0, &je);
    ts_status s = TS_OK;
    if (!man) {
        s = ts_fail(err, ts_file_exists(path) ? TS_ERR_FORMAT : TS_ERR_IO, "%s: %s (line %d)", path, je.text, je.line);
        goto done;
    }
    const char *mdir = json_string_value(json_object_get(json_object_get(man, "model"), "dir"));
    const json_t *target = json_object_get(man, "target");
    json_t *threads = json_object_get(target, "threads"), *tiles = json_object_get(target, "tiles");
    if (!mdir || strlen(mdir) >= sizeof d->model_dir) {
        s = ts_fail(err, TS_ERR_FORMAT, "%s: model.dir: expected the model directory as a string", path);
        goto done;
    }
    if (!json_is_integer(threads) || json_integer_value(threads) < 1 || json_integer_value(threads) > 256) {
        s = ts_fail(err, TS_ERR_FORMAT, "%s: target.threads: expected an integer in [1, 256]", path);
        goto done;
    }
    snprintf(d->model_dir, sizeof d->model_dir, "%s", mdir);
    d->threads = (int)json_integer_value(threads);
    d->all_gates_passed = json_is_true(json_object_get(man, "all_gates_passed"));
    const char *key;
    json_t *g;
    json_object_foreach(json_object_get(man, "gates"), key, g) {
        ts_phase_verdict v = ts_phase_verdict_of(g);
        d->gates_failed += v == TS_PHASE_FAIL;
        if (!strcmp(key, "phase0")) d->oracle_not_compared = v == TS_PHASE_NOT_COMPARED;
    }
    if (json_is_true(json_object_get(man, "forced")) && !d->gates_failed) d->gates_failed = 1;
    char where[4200];
    snprintf(where, sizeof where, "%s: target.tiles", path);
    s = ts_tiles_parse(tiles, where, d->tiles, TS_DEPLOY_MAX_TILES, &d->n_tiles, err);
    snprintf(where, sizeof where, "%s: target.weights", path);
    if (!s) s = ts_placement_parse(json_object_get(target, "weights"), where, &d->copy_weights, err);
    if (!s) s = ts_deployment_quant(json_object_get(json_object_get(man, "model"), "quant"), path, &d->quant, err);
    if (!s)
        s = ts_deployment_kv_cache(json_object_get(json_object_get(man, "model"), "kv_cache"), path, &d->kv_cache, err);
done:
    json_decref(man);
    free(path);
    return s;
}
