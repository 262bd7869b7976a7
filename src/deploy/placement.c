/* Phase 4's weight-placement probe (see placement.h). */
#include "deploy/placement.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "deploy/gates.h"
#include "deploy/tiles.h"
#include "deploy/phases.h"

enum { CTX = 16, TOKENS = 4, ROUNDS = 5 };

int ts_placement_copy_fits(const ts_model *m) {
    double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE), w = 0;
    for (int i = 0; i < m->store.n_maps; i++) w += (double)m->store.maps[i].size;
    return phys <= 0 || 2 * w < 0.7 * phys;
}

ts_status ts_placement_parse(const json_t *weights, const char *where, int *copy, ts_error *err) {
    *copy = 0;
    if (!weights) return TS_OK;
    const char *v = json_string_value(weights);
    if (v && !strcmp(v, "mmap")) return TS_OK;
    if (v && !strcmp(v, "copy")) return *copy = 1, TS_OK;
    return ts_fail(err, TS_ERR_FORMAT, "%s: expected \"mmap\" or \"copy\"", where);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One round: TOKENS greedy decode steps from the CTX-token context, in tok/s. */
static ts_status round_rate(ts_cpu *cp, const float *lg0, float *lg, int V, double *rate, ts_error *err) {
    ts_cpu_truncate(cp, CTX);
    memcpy(lg, lg0, sizeof(float) * (size_t)V);
    double a = ts_now_s();
    ts_status s = TS_OK;
    for (int g = 0; g < TOKENS && !s; g++) {
        int32_t t = ts_argmax(lg, V);
        s = ts_cpu_forward(cp, &t, 1, lg, 0, NULL, err);
    }
    double dt = ts_now_s() - a;
    *rate = dt > 0 ? TOKENS / dt : 0;
    return s;
}

ts_status ts_placement_probe(const ts_model *m, int threads, const ts_cpu_fault *fault, const json_t *tiles, FILE *out,
                             json_t **report, int *copy, ts_error *err) {
    const ts_config *c = ts_model_config(m);
    int V = c->n_vocab;
    *copy = 0;
    *report = NULL;
    if (!ts_placement_copy_fits(m)) {
        if (out) fprintf(out, "  weight placement: mmap (a copy beside the mapped file would exceed 70%% of RAM)\n");
        *report = json_pack("{s:s, s:s}", "weights", "mmap", "why", "a copy beside the mapped file exceeds 70% of RAM");
        return TS_OK;
    }
    if (c->max_pos < CTX + TOKENS) {
        if (out) fprintf(out, "  weight placement: mmap (max_position_embeddings %d is below the probe's %d)\n", c->max_pos,
                         CTX + TOKENS);
        *report = json_pack("{s:s, s:s}", "weights", "mmap", "why", "context too short for the probe");
        return TS_OK;
    }
    ts_cpu *cp[2] = {NULL, NULL}; /* [0] borrows the mmap, [1] copies */
    float *lg0[2] = {malloc(sizeof(float) * (size_t)V), malloc(sizeof(float) * (size_t)V)};
    float *lg = malloc(sizeof(float) * (size_t)V);
    double rate[2][ROUNDS], ratio[ROUNDS], load_ms[2] = {0, 0};
    int32_t toks[CTX];
    ts_status s = lg0[0] && lg0[1] && lg ? TS_OK : ts_fail(err, TS_ERR_NOMEM, "phase 4: out of memory");
    ts_phase_prompt_tokens(c, 9, 500, toks, CTX);
    for (int p = 0; p < 2 && !s; p++) {
        ts_cpu_opts co = {.n_threads = threads, .force_variant = -1, .disable = ts_placement_mask(p), .fault = fault};
        double a = ts_now_s();
        if (!(s = ts_cpu_new(m, CTX + TOKENS, &co, &cp[p], err)) && tiles) s = ts_tiles_apply(cp[p], tiles, err);
        load_ms[p] = (ts_now_s() - a) * 1e3;
        if (!s) s = ts_cpu_forward(cp[p], toks, CTX, lg0[p], 0, NULL, err);
    }
    /* Round 0 warms both up (first touch of the mapped pages, caches); the order alternates so
     * that a drift in the machine's speed does not favour one placement. */
    for (int r = -1; r < ROUNDS && !s; r++) {
        double x[2];
        for (int q = 0; q < 2 && !s; q++) {
            int p = (r & 1) ? 1 - q : q;
            s = round_rate(cp[p], lg0[p], lg, V, &x[p], err);
        }
        if (!s && r >= 0) rate[0][r] = x[0], rate[1][r] = x[1], ratio[r] = x[0] > 0 ? x[1] / x[0] : 0;
    }
    ts_cpu_free(cp[0]), ts_cpu_free(cp[1]);
    free(lg0[0]), free(lg0[1]), free(lg);
    if (s) return s;
    int wins = 0;
    for (int r = 0; r < ROUNDS; r++) wins += rate[1][r] > rate[0][r];
    qsort(ratio, ROUNDS, sizeof *ratio, cmp_double);
    qsort(rate[0], ROUNDS, sizeof **rate, cmp_double);
    qsort(rate[1], ROUNDS, sizeof **rate, cmp_double);
    double med = ratio[ROUNDS / 2];
    *copy = wins >= ROUNDS - 1 && med >= 1.03;
    if (out)
        fprintf(out, "  weight placement: mmap %.2f tok/s, copy in huge pages %.2f tok/s (median of %d rounds of %d "
                     "tokens; the copy faster in %d, median ratio %.3f, +%.0f ms to load): %s\n",
                rate[0][ROUNDS / 2], rate[1][ROUNDS / 2], ROUNDS, TOKENS, wins, med, load_ms[1] - load_ms[0],
                *copy ? "copy" : "mmap");
    *report = json_pack("{s:s, s:f, s:f, s:f, s:i, s:i, s:i, s:f, s:s}", "weights", *copy ? "copy" : "mmap",
                        "mmap_decode_tok_s", rate[0][ROUNDS / 2], "copy_decode_tok_s", rate[1][ROUNDS / 2],
                        "median_ratio", med, "rounds", ROUNDS, "tokens_per_round", TOKENS, "copy_faster_rounds", wins,
                        "copy_extra_load_ms", load_ms[1] - load_ms[0], "rule",
                        "copy when faster in all rounds but at most one and by >= 3% (median ratio)");
    return TS_OK;
}

void ts_placement_note_copies(const ts_model *m, json_t *report, FILE *out) {
    int conv, pad;
    uint64_t pad_bytes;
    ts_cpu_weight_copies(m, &conv, &pad, &pad_bytes);
    uint64_t q_bytes;
    int quant = ts_cpu_weight_quantized(m, &q_bytes);
    if (quant && report) {
        json_object_set_new(report, "quantized_in_place_matrices", json_integer(quant));
        json_object_set_new(report, "quantized_in_place_bytes", json_integer((json_int_t)q_bytes));
    }
    if (quant && out)
        fprintf(out, "  weight placement: %d Q8_0/Q4_0 matri%s (%.2f MiB) read in place by the quantized kernels, no "
                     "BF16 copy\n", quant, quant == 1 ? "x" : "ces", (double)q_bytes / 1048576.0);
    if (pad && report) {
        json_object_set_new(report, "padded_matrices", json_integer(pad));
        json_object_set_new(report, "padded_bytes", json_integer((json_int_t)pad_bytes));
    }
    if (conv && report) json_object_set_new(report, "converted_matrices", json_integer(conv));
    if (pad && out)
        fprintf(out, "  weight placement: %d BF16 matri%s with K not a multiple of 16 copied with zero-padded rows "
                     "(%.2f MiB) whatever the placement\n", pad, pad == 1 ? "x" : "ces", (double)pad_bytes / 1048576.0);
    if (conv && out)
        fprintf(out, "  weight placement: %d matri%s stored other than BF16 converted to BF16 copies whatever the "
                     "placement\n", conv, conv == 1 ? "x" : "ces");
}
