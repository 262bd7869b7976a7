/* The optimization trajectories of phases 4 (prefill) and 5 (decode): the plan measured with
 * its optimizations switched on one after another, the final row being the deployed plan. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "deploy/phases.h"
#include "deploy/placement.h"

typedef struct traj_step {
    const char *name;
    unsigned disable;
    int tuned;             /* the final plan: phase 4's autotuned tiles and weight placement */
    const char *name_copy; /* its name when the placement probe chose the copy */
} traj_step;

/* Cumulative: each row turns on one more optimization. The baseline runs one dispatch per
 * step, attention one query row at a time, copies of the weights, the LM head over every row
 * and default tiles. */
static const traj_step k_prefill[] = {
    {"baseline: unfused, row attention, copied weights, all-row LM head", TS_OPT_ALL, 0, NULL},
    {"+ fused dispatches (3 per layer)", TS_OPT_ALL & ~TS_OPT_FUSED, 0, NULL},
    {"+ tiled prefill attention", TS_OPT_GEMV | TS_OPT_ZERO_COPY | TS_OPT_LAST_LOGITS, 0, NULL},
    {"+ last-token LM head (one streaming GEMV row)", TS_OPT_ZERO_COPY, 0, NULL},
    /* The tuned tiles join this last row instead of a row of their own: for S >= 2 the panel
     * kernel has no tile choice, so such a row measured the same kernels twice (only the
     * one-row LM head can take a tuned tile). */
    {"+ zero-copy weights (from the mmap), tuned tiles", 0, 1, "+ autotuned tiles, weights copied to huge pages (probe's pick)"},
};
static const traj_step k_decode[] = {
    {"baseline: unfused, GEMM tile for one row, copied weights", TS_OPT_ALL, 0, NULL},
    {"+ fused dispatches (3 per layer)", TS_OPT_ALL & ~TS_OPT_FUSED, 0, NULL},
    {"+ streaming GEMV", TS_OPT_ZERO_COPY, 0, NULL},
    {"+ zero-copy weights (borrowed from the mmap)", 0, 0, NULL},
    {"+ phase-4 autotuned tiles", 0, 1, "+ phase-4 autotuned tiles, weights copied to huge pages"},
};

void ts_perf_defaults(ts_perf_opts *o, int phase) {
    memset(o, 0, sizeof *o);
    o->trials = 5;
    o->prefill = 128;
    /* 8 tokens a trial (16 before): phases 5 and 7 time every decode trial, and 16 tokens
     * kept the 1.7B deployments over their 15-minute goal. Each row still has >= 5 trials
     * with their standard deviation, which phase 7's 3-sigma check uses. */
    o->decode_tokens = 8;
    o->weights = -1;
    o->n_sizes = 2;
    o->sizes[0] = 128;
    o->sizes[1] = phase == 4 ? 512 : 1024;
}

ts_status ts_perf_trajectory(const ts_model *m, const ts_perf_opts *o, int phase, const json_t *tiles, int copy,
                             int size, json_t *rows, json_t **base_profile, json_t **final_profile,
                             ts_measurement *last, int *invalid, ts_error *err) {
    const traj_step *steps = phase == 4 ? k_prefill : k_decode;
    int n = phase == 4 ? (int)(sizeof k_prefill / sizeof *k_prefill) : (int)(sizeof k_decode / sizeof *k_decode);
    const char *key = phase == 4 ? "prefill_tok_s" : "decode_tok_s";
    /* The copying baseline doubles the weights' memory; beyond a share of RAM it is skipped. */
    int fits = ts_placement_copy_fits(m);
    ts_status s = TS_OK;
    for (int i = 0; i < n && !s; i++) {
        unsigned d = steps[i].tuned ? ts_placement_mask(copy) : steps[i].disable;
        const char *name = steps[i].tuned && copy ? steps[i].name_copy : steps[i].name;
        char pick[160];
        if (phase == 5 && steps[i].tuned) { /* phase 5's pick by measurement (plan_choice.h) */
            snprintf(pick, sizeof pick, "+ phase-5 pick: %s tiles, weights %s", tiles ? "phase-4 autotuned" : "default",
                     copy ? "copied to huge pages" : "from the mmap");
            name = pick;
        }
        if (!fits) d &= ~(unsigned)TS_OPT_ZERO_COPY;
        ts_measurement r;
        ts_measure_opts mo = {.threads = o->threads, .trials = o->trials, .disable = d,
                              .tiles = steps[i].tuned ? tiles : NULL, .fault = o->fault};
        s = phase == 4 ? ts_measure_prefill(m, &mo, size, &r, err)
                       : ts_measure_decode(m, &mo, size, o->decode_tokens, &r, err);
        if (s) break;
        if (o->out)
            fprintf(o->out, "  %-62.62s cold %9.1f ms  warm %9.2f ms +- %7.2f  %8.2f tok/s  %d/layer\n", name,
                    r.cold_ms, r.mean_ms, r.sd_ms, r.rate, r.dpl);
        int valid = ts_measurement_valid(&r, o->trials);
        *invalid += !valid;
        json_t *row = ts_measurement_json(&r, key);
        json_object_set_new(row, "valid", json_boolean(valid));
        json_object_set_new(row, "step", json_string(name));
        json_object_set_new(row, "disabled_mask", json_integer((json_int_t)d));
        if (!fits && (steps[i].disable & TS_OPT_ZERO_COPY))
            json_object_set_new(row, "note", json_string("copying skipped: two copies of the weights exceed 70% of RAM"));
        json_array_append_new(rows, row);
        if (i == 0) *base_profile = r.profile, r.profile = NULL;
        else if (i == n - 1) *final_profile = r.profile, r.profile = NULL;
        if (i == n - 1) *last = r;
        else ts_measurement_free(&r);
    }
    return s;
}
