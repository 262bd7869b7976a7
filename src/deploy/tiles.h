/* Autotuned GEMM tiles as JSON: phase 4 writes them into its report, the manifest carries them
 * as target.tiles, and every later session of the deployed plan (phases 5-7, run, chat, bench)
 * applies them. The cpu target checks the values against the model when they are set. */
#ifndef TS_DEPLOY_TILES_H
#define TS_DEPLOY_TILES_H
#include <jansson.h>

#include "target/cpu/cpu_target.h"

#define TS_TILES_MAX 64

/* Tiles of a phase-4 report or a manifest's target.tiles (a string there means defaults: no
 * tiles); errors name `where` and the field. */
ts_status ts_tiles_parse(const json_t *tiles, const char *where, ts_cpu_tile_rec *out, int max, int *n, ts_error *err);
/* The same, applied to a session. NULL or a string: nothing to apply. */
ts_status ts_tiles_apply(ts_cpu *c, const json_t *tiles, ts_error *err);
/* A session's tuned tiles as a JSON array (caller decrefs). */
json_t *ts_tiles_json(const ts_cpu *c);

#endif
