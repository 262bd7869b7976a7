/* Autotuned tiles to and from JSON (tiles.h). */
#include "deploy/tiles.h"

#include "core/error.h"

ts_status ts_tiles_parse(const json_t *tiles, const char *where, ts_cpu_tile_rec *out, int max, int *n,
                              ts_error *err) {
    *n = 0;
    if (!tiles || json_is_string(tiles)) return TS_OK; /* "defaults (phase 4 did not run)" */
    if (!json_is_array(tiles)) return ts_fail(err, TS_ERR_FORMAT, "%s: expected an array of tiles", where);
    size_t i;
    const json_t *t;
    json_array_foreach(tiles, i, t) {
        static const char *keys[6] = {"bucket", "n", "k", "ms", "nr", "sb"};
        int v[6];
        for (int k = 0; k < 6; k++) {
            const json_t *x = json_object_get(t, keys[k]);
            if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > 1 << 24)
                return ts_fail(err, TS_ERR_FORMAT, "%s[%zu].%s: expected a non-negative integer", where, i, keys[k]);
            v[k] = (int)json_integer_value(x);
        }
        if (*n == max) return ts_fail(err, TS_ERR_FORMAT, "%s: more than %d tiles", where, max);
        out[(*n)++] = (ts_cpu_tile_rec){v[0], v[1], v[2], v[3], v[4], v[5], json_number_value(json_object_get(t, "gflops"))};
    }
    return TS_OK;
}

ts_status ts_tiles_apply(ts_cpu *c, const json_t *tiles, ts_error *err) {
    ts_cpu_tile_rec r[TS_TILES_MAX];
    int n;
    ts_status s = ts_tiles_parse(tiles, "tiles", r, TS_TILES_MAX, &n, err);
    return s || n == 0 ? s : ts_cpu_tiles_set(c, r, n, err);
}

json_t *ts_tiles_json(const ts_cpu *c) {
    ts_cpu_tile_rec r[TS_TILES_MAX];
    int n = ts_cpu_tiles_get(c, r, TS_TILES_MAX);
    json_t *a = json_array();
    for (int i = 0; i < n && i < TS_TILES_MAX; i++)
        json_array_append_new(a, json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:f}", "bucket", r[i].bucket, "n", r[i].n,
                                           "k", r[i].k, "ms", r[i].ms, "nr", r[i].nr, "sb", r[i].sb, "gflops",
                                           r[i].gflops));
    return a;
}
