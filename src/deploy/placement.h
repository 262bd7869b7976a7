/* Weight placement, chosen by measurement in phase 4: the plan either reads the BF16 weights
 * where they lie in the file's mmap (zero-copy: nothing to load, the page cache shared) or
 * copies them once into 2 MiB-aligned buffers advised as transparent huge pages, which decode
 * streams through far fewer TLB entries. Which one is faster depends on the machine and the
 * model, so the deployment measures both and records the choice in manifest.json
 * (target.weights); `tessera run` and the evaluator follow it. */
#ifndef TS_DEPLOY_PLACEMENT_H
#define TS_DEPLOY_PLACEMENT_H
#include <jansson.h>
#include <stdio.h>

#include "model/model.h"
#include "target/cpu/cpu_target.h"

/* 1 when a copy of the weights beside the mapped file stays under 70% of RAM. */
int ts_placement_copy_fits(const ts_model *m);

/* The probe: two sessions of the final plan (tiles applied), one per placement, decode the
 * same greedy tokens in alternating rounds after one warm-up round. The copy is chosen when it
 * is faster in all but at most one round and by >= 3% (median of the per-round ratios);
 * otherwise the mmap, which costs no load time and no memory. *report: the measurement and
 * the choice ("weights": "copy" | "mmap"). */
ts_status ts_placement_probe(const ts_model *m, int threads, const ts_cpu_fault *fault, const json_t *tiles, FILE *out,
                             json_t **report, int *copy, ts_error *err);

/* Adds to a placement report the matrices no placement borrows from the mmap (the cpu target
 * copies them either way): BF16 matrices whose K is not a multiple of 16 are copied with
 * zero-padded rows ("padded_matrices", "padded_bytes"), non-BF16 ones converted
 * ("converted_matrices"); says so on out (may be NULL). Nothing when there are none. */
void ts_placement_note_copies(const ts_model *m, json_t *report, FILE *out);

/* A manifest's target.weights or a report's placement.weights: "mmap" or "copy" (absent:
 * "mmap", as manifests before the probe). Errors name `where`. */
ts_status ts_placement_parse(const json_t *weights, const char *where, int *copy, ts_error *err);

/* The disabled-optimization bits of a placement. */
static inline unsigned ts_placement_mask(int copy) { return copy ? (unsigned)TS_OPT_ZERO_COPY : 0u; }

#endif
