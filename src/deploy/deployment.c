/* manifest.json -> what a session needs to run the deployed plan. */
#include "deploy/deployment.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/mmap.h"

int ts_deployment_is(const char *dir) {
    char *p = ts_path_join(dir, "manifest.json");
    int yes = p && ts_file_exists(p);
    free(p);
    return yes;
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
    if (tiles && !json_is_array(tiles) && !json_is_string(tiles)) {
        s = ts_fail(err, TS_ERR_FORMAT, "%s: target.tiles: expected an array of tiles", path);
        goto done;
    }
    snprintf(d->model_dir, sizeof d->model_dir, "%s", mdir);
    d->threads = (int)json_integer_value(threads);
    d->all_gates_passed = json_is_true(json_object_get(man, "all_gates_passed"));
    size_t i;
    const json_t *t;
    if (json_is_array(tiles)) json_array_foreach(tiles, i, t) {
            static const char *keys[6] = {"bucket", "n", "k", "ms", "nr", "sb"};
            int v[6];
            for (int k = 0; k < 6; k++) {
                const json_t *x = json_object_get(t, keys[k]);
                if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > 1 << 24) {
                    s = ts_fail(err, TS_ERR_FORMAT, "%s: target.tiles[%zu].%s: expected a non-negative integer", path, i,
                                keys[k]);
                    goto done;
                }
                v[k] = (int)json_integer_value(x);
            }
            if (d->n_tiles == TS_DEPLOY_MAX_TILES) {
                s = ts_fail(err, TS_ERR_FORMAT, "%s: target.tiles: more than %d tiles", path, TS_DEPLOY_MAX_TILES);
                goto done;
            }
            d->tiles[d->n_tiles++] = (ts_cpu_tile_rec){v[0], v[1], v[2], v[3], v[4], v[5],
                                                       json_number_value(json_object_get(t, "gflops"))};
        }
done:
    json_decref(man);
    free(path);
    return s;
}
