/* Decode side by side with llama.cpp in ONE process: tessera and llama.cpp (linked as a
 * library, its public llama.h API) each keep a session on the same GGUF file, prefill the same
 * context once, then decode in alternating rounds (the order swapped every round), and a read
 * bandwidth probe runs between rounds.
 *
 * Why: on a shared host whose memory bandwidth swings by 1.5x within a minute (a 2-core Zen 5
 * VM: tessera bench's probe read 46-80 GB/s), runs in separate processes, as llama-bench and
 * tools/sbs_decode.sh do, compare two moments as much as two programs. Here each round pairs
 * the two within about a second, and each round's GB/s sits next to its own probe, so a run
 * faster than the probe shows up in the round it happened.
 *
 * --token-probe judges "GB/s as a fraction of the read peak" at the scale this host moves on: a
 * 256 MiB read probe (tessera's probe code, src/target/cpu/probe.h) runs before every decoded
 * token and after the last, in both programs' rounds, 10 ms apart from the tokens
 * (SBS_PAUSE_MS), and each token's GB/s is divided by the mean of the probes either side of it.
 * Both programs' threads are pinned one per core for it (tessera's pool pins itself;
 * llama.cpp's OpenMP threads by OMP_PROC_BIND=close, OMP_PLACES=cores), since after the pauses
 * unpinned threads often share a core. SBS_DEBUG=1 prints every probe and token time.
 *
 * Built and run by tools/sbs_inproc.sh (needs a llama.cpp build: LLAMA_DIR); not part of the
 * project's build or tests. Output: one line per round, then a summary; --json adds one JSON
 * object per file on the last line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sched.h>

#include "llama.h"

#include "core/clock.h"
#include "core/error.h"
#include "core/metrics.h"
#include "deploy/measure.h"
#include "deploy/phases.h"
#include "model/model.h"
#include "target/cpu/cpu_target.h"
#include "target/cpu/probe.h"
#include "core/pool.h"

enum { MAXF = 8 }; /* files in one --types run */
typedef struct args {
    const char *file, *weights;
    const char *files[MAXF]; /* every file named, file = files[0] */
    int n_files, ctx, gen, rounds, threads, probe, json, types, kv, token_probe;
} args;

static int usage(void) {
    fprintf(stderr, "usage: sbs_inproc FILE.gguf [--ctx 128] [--gen 32] [--rounds 8] [--threads 2] "
                    "[--weights default|mmap|copy] [--kv-cache f32|f16] [--no-probe] [--token-probe] [--json]\n"
                    "       sbs_inproc --types FILE.gguf OTHER.gguf... [--ctx/--gen/--rounds/--threads]: tessera alone\n"
                    "       on each file, in one process, each file's speed over the first's (FILE@f16: that KV cache,\n"
                    "       FILE@nopin: threads not pinned, FILE@stored / @lanes: the Q layouts) [--pause-ms N]\n");
    return 64;
}

/* tessera's arm: one session, the context prefilled once; a round truncates back to it and
 * decodes gen greedy tokens (what ts_measure_decode times, without a new session per round). */
typedef struct ts_arm {
    ts_model *m;
    ts_cpu *cp;
    float *lg, *lg0;
    int nv, copy;
    int32_t *toks; /* the context's ids, shared with llama.cpp's arm */
} ts_arm;

/* weights: default (as `tessera run` places them), mmap or copy (2 MiB huge pages). */
static int ts_arm_open(ts_arm *a, const char *file, const char *weights, int threads, int ctx, int gen, int kv) {
    ts_error e;
    memset(a, 0, sizeof *a);
    if (ts_model_open(file, &a->m, &e)) return fprintf(stderr, "sbs_inproc: %s\n", e.msg), 1;
    a->m->kv_type = kv; /* --kv-cache (llama.cpp's arm keeps its default, F16) */
    const ts_config *c = ts_model_config(a->m);
    a->copy = !strcmp(weights, "copy") || (!strcmp(weights, "default") && ts_cpu_default_copy(a->m));
    /* zero-copy switched off: the weights copied (to huge pages), their mapped pages dropped */
    ts_cpu_opts co = {.n_threads = threads, .force_variant = -1, .disable = a->copy ? TS_OPT_ZERO_COPY : 0,
                      .release_source = a->copy};
    a->nv = c->n_vocab;
    a->toks = malloc(sizeof(int32_t) * (size_t)ctx);
    a->lg = malloc(sizeof(float) * (size_t)c->n_vocab);
    a->lg0 = malloc(sizeof(float) * (size_t)c->n_vocab);
    if (!a->toks || !a->lg || !a->lg0) return fprintf(stderr, "sbs_inproc: out of memory\n"), 1;
    ts_phase_prompt_tokens(c, 7, 200, a->toks, ctx);
    if (ts_cpu_new(a->m, ctx + gen, &co, &a->cp, &e) || ts_cpu_forward(a->cp, a->toks, ctx, a->lg0, 0, NULL, &e))
        return fprintf(stderr, "sbs_inproc: tessera on %s: %s\n", file, e.msg), 1;
    return 0;
}

static void ts_arm_close(ts_arm *a) {
    ts_cpu_free(a->cp);
    ts_model_close(a->m);
    free(a->toks), free(a->lg), free(a->lg0);
}

/* --token-probe: a read probe before every decoded token and after the last one, in both
 * programs' rounds, so each token's GB/s stands next to what the memory read in the few
 * milliseconds on either side of it (this host's bandwidth moves within seconds: a probe
 * after a 1-second round can miss the moment the round ran in). pr[0..gen] the probes' GB/s,
 * tt[0..gen) the tokens' seconds (probe time not counted in the round's rate). */
typedef struct tok_probe {
    ts_read_probe *rp;
    ts_pool *pool;
    int gemv;        /* the pattern that read fastest at the start */
    double *pr, *tt;
} tok_probe;

static void tp_probe(tok_probe *tp, int g) {
    if (!tp) return;
    static long ms = -1;
    if (ms < 0) ms = getenv("SBS_PAUSE_MS") ? atol(getenv("SBS_PAUSE_MS")) : 10;
    struct timespec pause = {ms / 1000, ms % 1000 * 1000000L};
    nanosleep(&pause, NULL);
    int pin = ts_pool_enter(tp->pool); /* placed as a forward places its threads */
    tp->pr[g] = ts_read_probe_run(tp->rp, tp->gemv);
    ts_pool_leave(tp->pool, pin);
    /* 10 ms before and after: llama.cpp's OpenMP workers spin for some milliseconds after a
     * token (libgomp's default; the probe right after one read 25-44 GB/s against 50 after
     * tessera's at 3 ms, about alike at 10), tessera's pool spins, yields, then sleeps */
    nanosleep(&pause, NULL);
}

static long g_pause_ms; /* --types --pause-ms: idle before each token, as between a chat's turns */

/* the round's tokens/s; tp (optional) probes around each token */
static double ts_round(ts_arm *a, int ctx, int gen, tok_probe *tp, ts_error *e) {
    ts_cpu_truncate(a->cp, ctx);
    memcpy(a->lg, a->lg0, sizeof(float) * (size_t)a->nv);
    double sum = 0;
    for (int g = 0; g < gen; g++) {
        int32_t tok = ts_argmax(a->lg, a->nv);
        tp_probe(tp, g);
        if (g_pause_ms > 0) nanosleep(&(struct timespec){g_pause_ms / 1000, g_pause_ms % 1000 * 1000000L}, NULL);
        double t = ts_now_s();
        if (ts_cpu_forward(a->cp, &tok, 1, a->lg, 0, NULL, e)) return -1;
        t = ts_now_s() - t;
        sum += t;
        if (tp) tp->tt[g] = t;
    }
    tp_probe(tp, gen);
    return gen / sum;
}

/* llama.cpp's arm, the same shape: sequence 0 cut back to the context, gen greedy tokens at
 * explicit positions. */
typedef struct ll_arm {
    struct llama_context *ctx;
    float *lg0;
    int nv;
} ll_arm;

static double ll_round(ll_arm *a, int ctx, int gen, tok_probe *tp) {
    llama_memory_seq_rm(llama_get_memory(a->ctx), 0, ctx, -1);
    struct llama_batch b = llama_batch_init(1, 0, 1);
    const float *lg = a->lg0;
    double sum = 0;
    for (int g = 0; g < gen; g++) {
        b.n_tokens = 1;
        b.token[0] = ts_argmax(lg, a->nv);
        b.pos[0] = ctx + g;
        b.n_seq_id[0] = 1;
        b.seq_id[0][0] = 0;
        b.logits[0] = 1;
        tp_probe(tp, g);
        /* --token-probe: llama.cpp's calling thread on the first CPU too (libgomp bound it once,
         * when it loaded, and main() gave it every CPU back; its worker stays bound) */
        int pin = tp ? ts_pool_enter(tp->pool) : 0;
        double t = ts_now_s();
        int rc = llama_decode(a->ctx, b);
        if (rc) {
            ts_pool_leave(tp ? tp->pool : NULL, pin);
            llama_batch_free(b);
            return -1;
        }
        lg = llama_get_logits_ith(a->ctx, -1);
        t = ts_now_s() - t;
        if (tp) ts_pool_leave(tp->pool, pin);
        sum += t;
        if (tp) tp->tt[g] = t;
    }
    tp_probe(tp, gen);
    llama_batch_free(b);
    return gen / sum;
}

static int cmp_d(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* --types: tessera alone on several files of one model (BF16, Q8_0, Q4_0), each as `run` places
 * it, in alternating rounds (the order rotated every round): each file's speed over the
 * first's per round, which is what "Q8_0 >= 1.8x our BF16" asks of the same moment. A file
 * named FILE@f16 or FILE@f32 runs with that KV cache (else --kv-cache's): the same file twice
 * compares the cache types at the same moment. FILE@stored: Q8_0 / Q4_0 matrices copied as
 * stored instead of in tile or lane order (TESSERA_Q_LAYOUT=stored, gemm.h); FILE@lanes: in lane
 * order, not tile order (=lanes). FILE@nopin: that arm's threads not pinned
 * (TESSERA_PIN_THREADS=0, core/pool.c); with --pause-ms N each token waits N ms first (not
 * timed), as a chat's turns or a server's requests do, after which an unpinned pool's woken
 * threads may share a core. */
static int types_mode(const args *A) {
    const char *const *files = A->files;
    int n = A->n_files;
    if (n < 2) return usage();
    ts_arm a[MAXF];
    char pin_buf[64] = "", layout_buf[64] = "";
    if (getenv("TESSERA_PIN_THREADS")) snprintf(pin_buf, sizeof pin_buf, "%s", getenv("TESSERA_PIN_THREADS"));
    if (getenv("TESSERA_Q_LAYOUT")) snprintf(layout_buf, sizeof layout_buf, "%s", getenv("TESSERA_Q_LAYOUT"));
    const char *pin_env = getenv("TESSERA_PIN_THREADS") ? pin_buf : NULL;
    const char *layout_env = getenv("TESSERA_Q_LAYOUT") ? layout_buf : NULL;
    for (int f = 0; f < n; f++) {
        char path[4096];
        snprintf(path, sizeof path, "%s", files[f]);
        char *at = strrchr(path, '@');
        int kv = A->kv;
        /* read when the arm makes its session: the caller's own values, unless the suffix says */
        if (pin_env) setenv("TESSERA_PIN_THREADS", pin_env, 1);
        else unsetenv("TESSERA_PIN_THREADS");
        if (layout_env) setenv("TESSERA_Q_LAYOUT", layout_env, 1);
        else unsetenv("TESSERA_Q_LAYOUT");
        if (at && ts_kv_cache_parse(at + 1) >= 0) kv = ts_kv_cache_parse(at + 1), *at = 0;
        else if (at && !strcmp(at + 1, "nopin")) setenv("TESSERA_PIN_THREADS", "0", 1), *at = 0;
        else if (at && !strcmp(at + 1, "stored")) setenv("TESSERA_Q_LAYOUT", "stored", 1), *at = 0;
        else if (at && !strcmp(at + 1, "lanes")) setenv("TESSERA_Q_LAYOUT", "lanes", 1), *at = 0;
        if (ts_arm_open(&a[f], path, "default", A->threads, A->ctx, A->gen, kv)) return 1;
        if (ts_pool_pinned(ts_cpu_pool(a[f].cp))) printf("%s: threads pinned\n", files[f]);
    }
    ts_error e;
    double *ratio = malloc(sizeof(double) * (size_t)A->rounds * MAXF), rate[MAXF];
    if (!ratio) return 1;
    for (int f = 0; f < n; f++) ts_round(&a[f], A->ctx, A->gen, NULL, &e); /* warm-up */
    printf("sbs_inproc --types: %d threads, context %d, %d tokens a round; ratios over %s\n", A->threads, A->ctx,
           A->gen, files[0]);
    for (int r = 0; r < A->rounds; r++) {
        printf("round %d:", r);
        for (int k = 0; k < n; k++) {
            int f = (k + r) % n;
            rate[f] = ts_round(&a[f], A->ctx, A->gen, NULL, &e);
            if (rate[f] <= 0) return fprintf(stderr, "sbs_inproc: round %d failed: %s\n", r, e.msg), 1;
        }
        for (int f = 0; f < n; f++) {
            ratio[f * A->rounds + r] = rate[f] / rate[0];
            printf(" %.2f tok/s%s", rate[f], f ? "" : " (first)");
            if (f) printf(" = %.3fx", rate[f] / rate[0]);
        }
        printf("\n");
        fflush(stdout);
    }
    for (int f = 1; f < n; f++) {
        double *x = ratio + f * A->rounds;
        qsort(x, (size_t)A->rounds, sizeof(double), cmp_d);
        double med = A->rounds % 2 ? x[A->rounds / 2] : 0.5 * (x[A->rounds / 2 - 1] + x[A->rounds / 2]);
        printf("summary: %s / %s (%s): median %.3fx (min %.3f, max %.3f) over %d rounds\n", files[f], files[0],
               a[f].copy ? "copied" : "mmap", med, x[0], x[A->rounds - 1], A->rounds);
    }
    for (int f = 0; f < n; f++) ts_arm_close(&a[f]);
    free(ratio);
    return 0;
}

/* --token-probe: a 256 MiB buffer in 2 MiB pages read on tessera's pool (both programs' tokens
 * are bracketed by the same probe), by the pattern that read fastest in 3 tries of each. */
static int token_probe_open(ts_arm *ta, const args *A, tok_probe tp[2], double *tfrac[2]) {
    ts_pool *pool = ts_cpu_pool(ta->cp);
    ts_read_probe *rp = ts_read_probe_new(pool, ts_cpu_variant_of(ta->cp), (size_t)256 << 20, 1);
    if (!rp) return fprintf(stderr, "sbs_inproc: no memory for the token probe\n"), 1;
    double best[2] = {0, 0};
    for (int t = 0; t < 3; t++)
        for (int q = 0; q < 2; q++) best[q] = fmax(best[q], ts_read_probe_run(rp, q));
    for (int k = 0; k < 2; k++) {
        tp[k] = (tok_probe){rp, pool, best[1] > best[0], malloc(sizeof(double) * (size_t)(A->gen + 1)),
                            malloc(sizeof(double) * (size_t)A->gen)};
        tfrac[k] = malloc(sizeof(double) * (size_t)A->rounds * (size_t)A->gen);
        if (!tp[k].pr || !tp[k].tt || !tfrac[k]) return fprintf(stderr, "sbs_inproc: out of memory\n"), 1;
    }
    printf("token probe: 256 MiB, %.0f%% in 2 MiB pages, on tessera's %d threads (%s); pattern %s (load stream %.1f, "
           "decode GEMV %.1f GB/s at the start)\n", 100 * ts_read_probe_huge_share(rp), A->threads,
           ts_pool_pinned(pool) ? "pinned" : "not pinned", ts_read_probe_names[2 + tp[0].gemv], best[0], best[1]);
    return 0;
}

/* Each token's GB/s (tessera's bytes at its position) over the mean of the probes either side of
 * it, into out[0..gen); prints the round's median and largest. */
static void token_fractions(const ts_model *m, const args *A, const tok_probe *tp, double *out, const char *name) {
    double s[4096], pmin = 1e30, pmax = 0;
    int n = A->gen < 4096 ? A->gen : 4096;
    for (int g = 0; g < A->gen; g++) {
        double peak = 0.5 * (tp->pr[g] + tp->pr[g + 1]);
        out[g] = ts_measure_decode_bytes(m, A->ctx + g + 1) / tp->tt[g] / 1e9 / peak;
        if (g < n) s[g] = out[g];
        pmin = fmin(pmin, tp->pr[g]), pmax = fmax(pmax, tp->pr[g]);
    }
    qsort(s, (size_t)n, sizeof(double), cmp_d);
    printf(" %s median %.3f max %.3f (probes %.1f-%.1f GB/s);", name, s[n / 2], s[n - 1], pmin, pmax);
    if (getenv("SBS_DEBUG")) { for (int g = 0; g <= A->gen; g++) printf(" %.1f", tp->pr[g]); printf(" | tt"); for (int g = 0; g < A->gen; g++) printf(" %.2f", tp->tt[g] * 1e3); }
}

/* All tokens of the run: the fraction's median, 90th percentile and largest, and how many
 * exceeded their probes. */
static void token_summary(double *f, int n, const char *name) {
    qsort(f, (size_t)n, sizeof(double), cmp_d);
    int over = 0, over5 = 0;
    for (int i = 0; i < n; i++) over += f[i] > 1.0, over5 += f[i] > 1.05;
    printf("token probes, %s: %d tokens, fraction of the probes either side median %.3f, p10 %.3f, p90 %.3f, max "
           "%.3f; above 1.00: %d, above 1.05: %d\n", name, n, f[n / 2], f[n / 10], f[n * 9 / 10], f[n - 1], over, over5);
}

int main(int argc, char **argv) {
    args A = {.weights = "default", .ctx = 128, .gen = 32, .rounds = 8, .threads = 2, .probe = 1, .kv = TS_DTYPE_F32};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ctx") && i + 1 < argc) A.ctx = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gen") && i + 1 < argc) A.gen = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) A.rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) A.threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--weights") && i + 1 < argc) A.weights = argv[++i];
        else if (!strcmp(argv[i], "--kv-cache") && i + 1 < argc) {
            if ((A.kv = ts_kv_cache_parse(argv[++i])) < 0) return usage();
        } else if (!strcmp(argv[i], "--no-probe")) A.probe = 0;
        else if (!strcmp(argv[i], "--token-probe")) A.token_probe = 1;
        else if (!strcmp(argv[i], "--json")) A.json = 1;
        else if (!strcmp(argv[i], "--types")) A.types = 1;
        else if (!strcmp(argv[i], "--pause-ms") && i + 1 < argc) g_pause_ms = atol(argv[++i]);
        else if (argv[i][0] != '-' && A.n_files < MAXF) A.files[A.n_files++] = argv[i];
        else return usage();
    }
    /* --token-probe: llama.cpp's OpenMP threads pinned one per core too (tessera's pool pins
     * itself, core/pool.c), else a token's threads may share a core after the probe's pause
     * and the token reads half of what the probe beside it did. libgomp reads the variables
     * when it loads, so the program runs itself again with them. */
    if (A.token_probe && !getenv("OMP_PROC_BIND")) {
        /* the CPUs this process may use, for the run after the exec (libgomp narrows them) */
        cpu_set_t mine;
        char list[8192] = "";
        if (sched_getaffinity(0, sizeof mine, &mine) == 0)
            for (int c = 0, w = 0; c < CPU_SETSIZE && w < (int)sizeof list - 8; c++)
                if (CPU_ISSET(c, &mine)) w += snprintf(list + w, sizeof list - (size_t)w, "%d,", c);
        setenv("SBS_CPUS", list, 1);
        setenv("OMP_PROC_BIND", "close", 1);
        setenv("OMP_PLACES", "cores", 1);
        execv("/proc/self/exe", argv);
        return fprintf(stderr, "sbs_inproc: could not run itself again with OMP_PROC_BIND\n"), 1;
    }
    if (A.token_probe && getenv("SBS_CPUS")) { /* libgomp bound this (the initial) thread to its
                                               * first place when it loaded: its CPUs back, before
                                               * tessera makes its pool */
        cpu_set_t mine;
        CPU_ZERO(&mine);
        for (const char *p = getenv("SBS_CPUS"); *p;) {
            char *e;
            long c = strtol(p, &e, 10);
            if (e == p) break;
            if (c >= 0 && c < CPU_SETSIZE) CPU_SET((int)c, &mine);
            p = *e == ',' ? e + 1 : e;
        }
        if (CPU_COUNT(&mine)) sched_setaffinity(0, sizeof mine, &mine);
    } else if (A.token_probe)
        fprintf(stderr, "sbs_inproc: OMP_PROC_BIND was set before the run: its binding of this thread stays\n");
    if (g_pause_ms && !A.types) return fprintf(stderr, "sbs_inproc: --pause-ms is for --types runs\n"), usage();
    A.file = A.files[0];
    if (!A.file || (A.n_files > 1 && !A.types) || A.ctx < 1 || A.gen < 1 || A.rounds < 1 || A.rounds > 1000 || A.threads < 1) return usage();
    if (A.types) return types_mode(&A);
    ts_error e;
    ts_arm ta;
    if (ts_arm_open(&ta, A.file, A.weights, A.threads, A.ctx, A.gen, A.kv)) return 1;
    ts_model *m = ta.m;
    const ts_config *c = ts_model_config(m);
    int32_t *toks = ta.toks;
    int copy = ta.copy;

    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *lm = llama_model_load_from_file(A.file, mp);
    if (!lm) return fprintf(stderr, "sbs_inproc: llama.cpp could not load %s\n", A.file), 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(A.ctx + A.gen + 64);
    cp.n_batch = cp.n_ubatch = (uint32_t)(A.ctx > 512 ? 512 : A.ctx);
    cp.n_threads = cp.n_threads_batch = A.threads;
    ll_arm la = {llama_init_from_model(lm, cp), NULL, llama_vocab_n_tokens(llama_model_get_vocab(lm))};
    if (!la.ctx || la.nv != c->n_vocab)
        return fprintf(stderr, "sbs_inproc: llama.cpp context failed or vocab %d != %d\n", la.nv, c->n_vocab), 1;
    for (int p = 0; p < A.ctx; p += (int)cp.n_batch) { /* the context, as tessera's */
        int n = A.ctx - p < (int)cp.n_batch ? A.ctx - p : (int)cp.n_batch;
        struct llama_batch b = llama_batch_init(n, 0, 1);
        for (int i = 0; i < n; i++) {
            b.token[i] = toks[p + i], b.pos[i] = p + i, b.n_seq_id[i] = 1, b.seq_id[i][0] = 0;
            b.logits[i] = p + i == A.ctx - 1;
        }
        b.n_tokens = n;
        int rc = llama_decode(la.ctx, b);
        llama_batch_free(b);
        if (rc) return fprintf(stderr, "sbs_inproc: llama.cpp prefill failed (%d)\n", rc), 1;
    }
    la.lg0 = malloc(sizeof(float) * (size_t)la.nv);
    memcpy(la.lg0, llama_get_logits_ith(la.ctx, -1), sizeof(float) * (size_t)la.nv);

    /* bytes a token reads, tessera's count for both (with --kv-cache f32, llama.cpp's F16 KV
     * cache is half of ours, so its GB/s is overstated by that half at long contexts) */
    double bytes = ts_measure_decode_bytes(m, A.ctx + A.gen / 2.0);
    double *ratio = malloc(sizeof(double) * (size_t)A.rounds);
    double sum_t = 0, sum_l = 0, max_ft = 0, max_fl = 0, best_peak = 0;
    int wins = 0;
    /* one warm-up round each, not counted */
    if (ts_round(&ta, A.ctx, A.gen, NULL, &e) < 0 || ll_round(&la, A.ctx, A.gen, NULL) < 0)
        return fprintf(stderr, "sbs_inproc: warm-up failed\n"), 1;
    tok_probe tp[2]; /* tessera's, llama.cpp's */
    double *tfrac[2] = {NULL, NULL}; /* every token's fraction of its probes, per arm */
    if (A.token_probe && token_probe_open(&ta, &A, tp, tfrac)) return 1;
    printf("sbs_inproc %s: %s weights, %d threads, context %d, %d tokens a round, %.0f MB a token, tessera's KV "
           "cache %s (llama.cpp's f16)\n", A.file, copy ? "copied" : "mmap", A.threads, A.ctx, A.gen, bytes / 1e6,
           ts_kv_cache_name(A.kv));
    for (int r = 0; r < A.rounds; r++) {
        double rt = 0, rl = 0;
        for (int k = 0; k < 2; k++) {
            struct timespec pause = {0, 100 * 1000 * 1000}; /* OpenMP workers of llama.cpp spin a while */
            nanosleep(&pause, NULL);
            if ((k == 0) == (r % 2 == 0)) rt = ts_round(&ta, A.ctx, A.gen, A.token_probe ? &tp[0] : NULL, &e);
            else rl = ll_round(&la, A.ctx, A.gen, A.token_probe ? &tp[1] : NULL);
        }
        if (rt <= 0 || rl <= 0) return fprintf(stderr, "sbs_inproc: round %d failed\n", r), 1;
        double peak = 0;
        if (A.probe) {
            ts_peaks pk;
            if (!ts_measure_peaks(m, A.threads, 2, &pk, &e)) peak = pk.read_gbs;
        }
        double gt = bytes * rt / 1e9, gl = bytes * rl / 1e9;
        ratio[r] = rt / rl;
        sum_t += rt, sum_l += rl, wins += rt > rl;
        if (peak > 0) max_ft = fmax(max_ft, gt / peak), max_fl = fmax(max_fl, gl / peak);
        best_peak = fmax(best_peak, peak);
        printf("round %d (%s first): tessera %.2f tok/s %.1f GB/s, llama.cpp %.2f tok/s %.1f GB/s, ratio %.3f", r,
               r % 2 == 0 ? "tessera" : "llama.cpp", rt, gt, rl, gl, ratio[r]);
        if (peak > 0) printf("; probe %.1f GB/s (fractions %.2f, %.2f)", peak, gt / peak, gl / peak);
        if (A.token_probe) {
            printf("\n  token probes:");
            for (int k = 0; k < 2; k++) token_fractions(m, &A, &tp[k], tfrac[k] + (size_t)r * A.gen, k ? "llama.cpp" : "tessera");
        }
        printf("\n");
        fflush(stdout);
    }
    qsort(ratio, (size_t)A.rounds, sizeof(double), cmp_d);
    double med = A.rounds % 2 ? ratio[A.rounds / 2] : 0.5 * (ratio[A.rounds / 2 - 1] + ratio[A.rounds / 2]);
    printf("summary: tessera / llama.cpp median %.3f (min %.3f, max %.3f), tessera faster in %d of %d rounds; "
           "means %.2f vs %.2f tok/s", med, ratio[0], ratio[A.rounds - 1], wins, A.rounds, sum_t / A.rounds,
           sum_l / A.rounds);
    /* a round's probe runs seconds after its decodes and this host swings within seconds, so
     * a round can beat its own probe; the best probe of the run is the steadier bound */
    double ft = best_peak > 0 ? bytes * sum_t / A.rounds / 1e9 / best_peak : 0;
    double fl = best_peak > 0 ? bytes * sum_l / A.rounds / 1e9 / best_peak : 0;
    if (A.probe)
        printf("; mean GB/s over the best probe of the run (%.1f GB/s): tessera %.2f, llama.cpp %.2f; largest "
               "fraction of a round's own probe: tessera %.2f, llama.cpp %.2f", best_peak, ft, fl, max_ft, max_fl);
    printf("\n");
    if (A.token_probe)
        for (int k = 0; k < 2; k++) token_summary(tfrac[k], A.rounds * A.gen, k ? "llama.cpp" : "tessera");
    if (A.json)
        printf("{\"file\": \"%s\", \"weights\": \"%s\", \"kv_cache\": \"%s\", \"threads\": %d, \"ctx\": %d, \"gen\": %d, \"rounds\": %d, "
               "\"median_ratio\": %.4f, \"min_ratio\": %.4f, \"max_ratio\": %.4f, \"tessera_faster_rounds\": %d, "
               "\"tessera_tok_s\": %.3f, \"llama_tok_s\": %.3f, \"max_probe_fraction_tessera\": %.3f, "
               "\"max_probe_fraction_llama\": %.3f, \"best_probe_gbs\": %.2f, \"fraction_of_best_probe_tessera\": %.3f, "
               "\"fraction_of_best_probe_llama\": %.3f}\n", A.file, copy ? "copy" : "mmap", ts_kv_cache_name(A.kv), A.threads, A.ctx, A.gen,
               A.rounds, med, ratio[0], ratio[A.rounds - 1], wins, sum_t / A.rounds, sum_l / A.rounds, max_ft, max_fl, best_peak, ft, fl);
    llama_free(la.ctx);
    llama_model_free(lm);
    llama_backend_free();
    ts_arm_close(&ta);
    free(la.lg0), free(ratio);
    if (A.token_probe) {
        ts_read_probe_free(tp[0].rp);
        for (int k = 0; k < 2; k++) free(tp[k].pr), free(tp[k].tt), free(tfrac[k]);
    }
    return 0;
}
