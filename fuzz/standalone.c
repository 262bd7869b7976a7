/* main() for the fuzz targets without libFuzzer (gcc builds): replays every input file (or every
 * file of a directory), then a bounded mutation loop seeded by -seed, so runs are reproducible.
 * Flags use libFuzzer's spelling: -runs=N -seconds=S (or -max_total_time=S) -seed=N -max_len=N
 * -artifact_prefix=P; others are ignored. A crashing input is saved as
 * <artifact_prefix>crash-standalone (sanitizer death callback or fatal-signal handler). */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Present only when linked with a sanitizer runtime. */
extern void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));

typedef struct input {
    uint8_t *p;
    size_t n;
} input;

static input *g_corpus;
static size_t g_n_corpus, g_cap_corpus;
static const uint8_t *volatile g_cur;
static volatile size_t g_cur_len;
static char g_crash_path[4096] = "crash-standalone";

/* ---- crash artifacts (async-signal-safe: open/write/close only) ---- */

static void write_artifact(void) {
    const uint8_t *p = g_cur;
    size_t n = g_cur_len;
    if (!p && n) return;
    int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) break;
        p += w;
        n -= (size_t)w;
    }
    close(fd);
    static const char msg[] = "standalone: crashing input written to ";
    if (write(2, msg, sizeof msg - 1) < 0 || write(2, g_crash_path, strlen(g_crash_path)) < 0 ||
        write(2, "\n", 1) < 0)
        return;
}

static void on_signal(int sig) {
    write_artifact();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_crash_hooks(void) {
    int sanitized = __sanitizer_set_death_callback != NULL;
    if (sanitized) __sanitizer_set_death_callback(write_artifact);
    /* abort() (the targets' invariant checks) is not a sanitizer death; segfaults are, and the
     * sanitizer's own handler must keep reporting them. */
    int sigs[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        if (sanitized && sigs[i] != SIGABRT) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

/* ---- running one input ---- */

/* Runs the target on an exactly-sized heap copy, so any read past the end is an ASan report. */
static void run_one(const uint8_t *p, size_t n) {
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy) {
        fprintf(stderr, "standalone: out of memory\n");
        exit(2);
    }
    if (n) memcpy(copy, p, n);
    g_cur = copy;
    g_cur_len = n;
    LLVMFuzzerTestOneInput(copy, n);
    g_cur = NULL;
    g_cur_len = 0;
    free(copy);
}

/* ---- corpus ---- */

static void add_input(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "standalone: cannot open %s\n", path);
        exit(2);
    }
    uint8_t *p = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *q = realloc(p, cap);
            if (!q) exit(2);
            p = q;
        }
        size_t r = fread(p + n, 1, cap - n, f);
        if (r == 0) break;
        n += r;
    }
    fclose(f);
    if (g_n_corpus == g_cap_corpus) {
        g_cap_corpus = g_cap_corpus ? 2 * g_cap_corpus : 64;
        input *c = realloc(g_corpus, g_cap_corpus * sizeof *c);
        if (!c) exit(2);
        g_corpus = c;
    }
    g_corpus[g_n_corpus].p = p;
    g_corpus[g_n_corpus].n = n;
    g_n_corpus++;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A directory contributes its regular files in name order (readdir order is not stable). */
static void add_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "standalone: %s does not exist\n", path);
        exit(2);
    }
    if (!S_ISDIR(st.st_mode)) {
        add_input(path);
        return;
    }
    DIR *d = opendir(path);
    if (!d) exit(2);
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, e->d_name);
        if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **q = realloc(names, cap * sizeof *q);
            if (!q) exit(2);
            names = q;
        }
        names[n++] = strdup(full);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        add_input(names[i]);
        free(names[i]);
    }
    free(names);
}

/* ---- mutation ---- */

static uint64_t g_rng;

static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (g_rng += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}
static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* Tokens of the two input languages: JSON structure, safetensors and config.json keys, and
 * numbers at the edges of the integer types. */
static const char *const k_tokens[] = {
    "{", "}", "[", "]", ",", ":", "\"", "null", "true", "false", "-1", "0", "1", "2", "1e308",
    "-0", "0.5", "4294967296", "9223372036854775807", "18446744073709551616", "1099511627776",
    "\\u0000", "\"dtype\"", "\"shape\"", "\"data_offsets\"", "\"__metadata__\"", "\"F32\"",
    "\"F16\"", "\"BF16\"", "\"I64\"", "[0,0]", "[]", "{}", "\"architectures\"",
    "\"LlamaForCausalLM\"", "\"Qwen2ForCausalLM\"", "\"Qwen3ForCausalLM\"", "\"hidden_size\"",
    "\"intermediate_size\"", "\"num_attention_heads\"", "\"num_key_value_heads\"",
    "\"head_dim\"", "\"vocab_size\"", "\"eos_token_id\"", "\"bos_token_id\"", "\"rope_scaling\"",
    "\"rope_parameters\"", "\"rope_type\"", "\"type\"", "\"llama3\"", "\"factor\"",
    "\"low_freq_factor\"", "\"high_freq_factor\"", "\"original_max_position_embeddings\"",
    "\"rope_theta\"", "\"tie_word_embeddings\"", "\"attention_bias\"", "\"torch_dtype\""
};
static const uint8_t k_bytes[] = {0,   1,   2,   7,   8,   0x7f, 0x80, 0xff, '"', '{', '}',
                                  '[', ']', ',', ':', '-', '0',  '9',  'e',  '.', ' ', '\\'};

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void insert(buf *b, size_t at, const uint8_t *src, size_t k) {
    if (b->n + k > b->cap) k = b->cap - b->n;
    if (!k) return;
    memmove(b->p + at + k, b->p + at, b->n - at);
    memcpy(b->p + at, src, k);
    b->n += k;
}

static void erase(buf *b, size_t at, size_t k) {
    if (at + k > b->n) k = b->n - at;
    memmove(b->p + at, b->p + at + k, b->n - at - k);
    b->n -= k;
}

/* Rewrites the 8-byte little-endian word at `at` (the safetensors length prefix at 0). */
static void put_word(buf *b, size_t at) {
    if (b->n < at + 8) return;
    uint64_t n = b->n, v;
    switch (below(8)) {
    case 0: v = 0; break;
    case 1: v = 2; break;
    case 2: v = n - 8; break;
    case 3: v = n - 7; break;
    case 4: v = UINT64_C(1) << 63; break;
    case 5: v = UINT64_MAX; break;
    case 6: v = below(n + 16); break;
    default: v = (100u << 20) + below(2); break;
    }
    for (int i = 0; i < 8; i++) b->p[at + i] = (uint8_t)(v >> (8 * i));
}

/* Replaces a run of ASCII digits with another number (offsets and sizes live there). */
static void renumber(buf *b) {
    if (!b->n) return;
    size_t i = below(b->n), j;
    while (i < b->n && (b->p[i] < '0' || b->p[i] > '9')) i++;
    if (i == b->n) return;
    for (j = i; j < b->n && b->p[j] >= '0' && b->p[j] <= '9'; j++) {}
    char num[32];
    uint64_t v = 0;
    for (size_t k = i; k < j && k < i + 18; k++) v = v * 10 + (uint64_t)(b->p[k] - '0');
    switch (below(6)) {
    case 0: v += 1; break;
    case 1: v = v ? v - 1 : 0; break;
    case 2: v *= 2; break;
    case 3: v = below(4096); break;
    case 4: v += 1 + below(256); break;
    default: v = rnd(); break;
    }
    int k = snprintf(num, sizeof num, "%llu", (unsigned long long)v);
    erase(b, i, j - i);
    insert(b, i, (const uint8_t *)num, (size_t)k);
}

static void mutate(buf *b) {
    int rounds = 1 + (int)below(4);
    for (int r = 0; r < rounds; r++) {
        size_t at = below(b->n + 1);
        switch (below(12)) {
        case 0:
            if (b->n) b->p[below(b->n)] ^= (uint8_t)(1u << below(8));
            break;
        case 1:
            if (b->n) b->p[below(b->n)] = (uint8_t)rnd();
            break;
        case 2:
            if (b->n) b->p[below(b->n)] = k_bytes[below(sizeof k_bytes)];
            break;
        case 3: {
            uint8_t tmp[8];
            size_t k = 1 + below(8);
            for (size_t i = 0; i < k; i++) tmp[i] = (uint8_t)rnd();
            insert(b, at, tmp, k);
            break;
        }
        case 4: {
            const char *t = k_tokens[below(sizeof k_tokens / sizeof k_tokens[0])];
            insert(b, at, (const uint8_t *)t, strlen(t));
            break;
        }
        case 5:
            if (b->n) erase(b, below(b->n), 1 + below(16));
            break;
        case 6:
            b->n = below(b->n + 1); /* truncate */
            break;
        case 7: /* copy a chunk over another place in the input */
            if (b->n > 1) {
                size_t from = below(b->n), to = below(b->n), k = 1 + below(64);
                if (k > b->n - from) k = b->n - from;
                if (k > b->n - to) k = b->n - to;
                memmove(b->p + to, b->p + from, k);
            }
            break;
        case 8: /* splice: our prefix, another input's suffix */
            if (g_n_corpus) {
                const input *o = &g_corpus[below(g_n_corpus)];
                size_t keep = below(b->n + 1), from = below(o->n + 1);
                b->n = keep;
                insert(b, keep, o->p + from, o->n - from);
            }
            break;
        case 9:
            put_word(b, below(4) ? 0 : below(b->n + 1));
            break;
        default:
            renumber(b);
            break;
        }
    }
}

/* ---- main ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int flag(const char *arg, const char *name, const char **val) {
    size_t k = strlen(name);
    if (strncmp(arg, name, k) != 0 || arg[k] != '=') return 0;
    *val = arg + k + 1;
    return 1;
}

int main(int argc, char **argv) {
    long long runs = -1;
    double seconds = -1;
    uint64_t seed = 1;
    size_t max_len = 0;
    const char *prefix = "", *v;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] != '-') continue;
        if (flag(argv[i], "-runs", &v)) runs = atoll(v);
        else if (flag(argv[i], "-seconds", &v) || flag(argv[i], "-max_total_time", &v))
            seconds = atof(v);
        else if (flag(argv[i], "-seed", &v)) seed = strtoull(v, NULL, 10);
        else if (flag(argv[i], "-max_len", &v)) max_len = (size_t)strtoull(v, NULL, 10);
        else if (flag(argv[i], "-artifact_prefix", &v)) prefix = v;
        else fprintf(stderr, "standalone: ignoring %s\n", argv[i]);
    }
    if (runs < 0 && seconds < 0) runs = 10000; /* bounded by default */
    snprintf(g_crash_path, sizeof g_crash_path, "%scrash-standalone", prefix);
    install_crash_hooks();
    for (int i = 1; i < argc; i++)
        if (argv[i][0] != '-') add_path(argv[i]);

    size_t largest = 0, total = 0;
    for (size_t i = 0; i < g_n_corpus; i++) {
        if (g_corpus[i].n > largest) largest = g_corpus[i].n;
        total += g_corpus[i].n;
    }
    if (!max_len) max_len = largest > 4096 ? largest : 4096;
    printf("standalone: %zu inputs (%zu bytes), seed %llu, max_len %zu, runs %lld, seconds %g\n",
           g_n_corpus, total, (unsigned long long)seed, max_len, runs, seconds);
    fflush(stdout);

    double t0 = now_s();
    for (size_t i = 0; i < g_n_corpus; i++) run_one(g_corpus[i].p, g_corpus[i].n);
    double t_replay = now_s() - t0;

    g_rng = seed;
    buf b = {malloc(max_len ? max_len : 1), 0, max_len};
    if (!b.p) return 2;
    long long done = 0;
    for (; runs < 0 || done < runs; done++) {
        if ((done & 63) == 0 && seconds >= 0 && now_s() - t0 >= seconds) break;
        b.n = 0;
        if (g_n_corpus) {
            const input *in = &g_corpus[below(g_n_corpus)];
            b.n = in->n < max_len ? in->n : max_len;
            memcpy(b.p, in->p, b.n);
        }
        mutate(&b);
        run_one(b.p, b.n);
    }
    double el = now_s() - t0;
    printf("standalone: replayed %zu inputs in %.2f s; %lld mutated runs in %.2f s total "
           "(%.0f exec/s); no crash\n",
           g_n_corpus, t_replay, done, el, el > 0 ? (double)done / el : 0.0);
    printf("Done %lld runs in %.0f second(s)\n", done + (long long)g_n_corpus, el);
    free(b.p);
    for (size_t i = 0; i < g_n_corpus; i++) free(g_corpus[i].p);
    free(g_corpus);
    return 0;
}
