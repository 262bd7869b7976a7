/* Sampling as HF `generate` does it: repetition penalty on the raw logits, then temperature,
 * top-k, top-p and min-p, each on the distribution the previous one left, then one draw from
 * a splitmix64 stream owned by the sampler (same seed, same tokens, whatever else runs).
 * Also the stop-string filter used by the generation loop. */
#include "runtime/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "core/error.h"
#include "core/exp_poly.h"

struct ts_sampler {
    int n_vocab;
    ts_sample_opts o;
    uint64_t rng;
    uint8_t *seen;   /* (n_vocab) 1 when the token is in the context */
    int32_t *seen_ids; /* (n_seen) the same set as a list, so the penalty costs O(context) */
    int n_seen;
    int32_t *ids;    /* (n_vocab) candidates, descending logit */
    float *val;      /* (n_vocab) candidate logits, then probabilities */
    struct cand { float v; int32_t id; } *sort; /* (n_vocab) sort scratch */
    int n_cand;
};

void ts_sample_opts_default(ts_sample_opts *o) {
    o->temp = 0.8f;
    o->top_k = 40;
    o->top_p = 0.95f;
    o->min_p = 0.05f;
    o->repeat_penalty = 1.0f;
    o->seed = 0;
}

/* splitmix64: one 64-bit state, full period, good enough equidistribution for a draw. */
static uint64_t rng_next(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t *x) { return (double)(rng_next(x) >> 11) * (1.0 / 9007199254740992.0); }

ts_status ts_sampler_new(int n_vocab, const ts_sample_opts *o, ts_sampler **out, ts_error *err) {
    *out = NULL;
    if (n_vocab < 1) return ts_fail(err, TS_ERR_ARG, "sampler: n_vocab %d, expected >= 1", n_vocab);
    if (o->repeat_penalty <= 0 || !isfinite(o->repeat_penalty))
        return ts_fail(err, TS_ERR_ARG, "sampler: repeat penalty %g, expected > 0", (double)o->repeat_penalty);
    if (!(o->top_p > 0) || !(o->min_p <= 1) || isnan(o->temp))
        return ts_fail(err, TS_ERR_ARG, "sampler: top-p %g (expected in (0, 1]) or min-p %g (expected <= 1)",
                       (double)o->top_p, (double)o->min_p);
    ts_sampler *s = calloc(1, sizeof *s);
    if (!s) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    s->n_vocab = n_vocab;
    s->o = *o;
    s->seen = calloc((size_t)n_vocab, 1);
    s->seen_ids = calloc((size_t)n_vocab, sizeof(int32_t));
    s->ids = malloc(sizeof(int32_t) * (size_t)n_vocab);
    s->val = malloc(sizeof(float) * (size_t)n_vocab);
    s->sort = malloc(sizeof *s->sort * (size_t)n_vocab);
    if (!s->seen || !s->seen_ids || !s->ids || !s->val || !s->sort) {
        ts_sampler_free(s);
        return ts_fail(err, TS_ERR_NOMEM, "sampler: out of memory for %d-token buffers", n_vocab);
    }
    ts_sampler_reset(s);
    *out = s;
    return TS_OK;
}

void ts_sampler_free(ts_sampler *s) {
    if (!s) return;
    free(s->seen);
    free(s->seen_ids);
    free(s->ids);
    free(s->val);
    free(s->sort);
    free(s);
}

void ts_sampler_reset(ts_sampler *s) {
    for (int i = 0; i < s->n_seen; i++) s->seen[s->seen_ids[i]] = 0;
    s->n_seen = 0;
    s->n_cand = 0;
    /* Mixing the seed once keeps seeds 0, 1, 2... from starting on correlated states. */
    s->rng = s->o.seed;
    s->rng = rng_next(&s->rng);
}

void ts_sampler_accept(ts_sampler *s, int32_t id) {
    if (id < 0 || id >= s->n_vocab || s->seen[id]) return;
    s->seen[id] = 1;
    s->seen_ids[s->n_seen++] = id;
}

int ts_sampler_candidates(const ts_sampler *s, const int32_t **ids, const float **probs) {
    *ids = s->ids;
    *probs = s->val;
    return s->n_cand;
}

/* Descending by value; equal values by ascending id so the order never depends on qsort. */
static int cmp_desc(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Keeps the k largest of logits in s->ids/s->val (descending), ties at the k-th kept as HF
 * does (it removes only values strictly below the k-th largest). The k-th largest comes from a
 * min-heap of the k largest seen so far (s->val), which most logits pass by with one compare
 * against its root: over Qwen3's 151936 logits a quickselect on a copy took most of the
 * sampler's 1.3 ms a token, a quarter of a decoded token of Qwen3-0.6B Q4_0. No NaN here
 * (degenerate() made them -inf). */
static void select_candidates(ts_sampler *s, const float *logits, int k) {
    int V = s->n_vocab;
    if (k >= V) {
        for (int i = 0; i < V; i++) s->ids[i] = i;
        s->n_cand = V;
    } else {
        float *h = s->val; /* h[0] the smallest of the k largest */
        int n = 0;
        for (int i = 0; i < V; i++) {
            float x = logits[i];
            int j;
            if (n < k) { /* up from the new leaf */
                for (j = n++; j > 0 && h[(j - 1) / 2] > x; j = (j - 1) / 2) h[j] = h[(j - 1) / 2];
            } else if (x > h[0]) { /* the root replaced, down */
                for (j = 0;;) {
                    int c = 2 * j + 1;
                    if (c >= k) break;
                    if (c + 1 < k && h[c + 1] < h[c]) c++;
                    if (!(h[c] < x)) break;
                    h[j] = h[c];
                    j = c;
                }
            } else
                continue;
            h[j] = x;
        }
        float kth = h[0];
        n = 0;
        for (int i = 0; i < V; i++)
            if (logits[i] >= kth) s->ids[n++] = i;
        s->n_cand = n;
    }
    for (int i = 0; i < s->n_cand; i++) s->sort[i] = (struct cand){logits[s->ids[i]], s->ids[i]};
    qsort(s->sort, (size_t)s->n_cand, sizeof *s->sort, cmp_desc);
    for (int i = 0; i < s->n_cand; i++) {
        s->ids[i] = s->sort[i].id;
        s->val[i] = s->sort[i].v;
    }
}

/* The first index in [i, n) whose value is >= t (ge) or > t, else n; NaN never is. Four at a
 * time with SSE2: over a whole vocabulary most blocks hold none. */
static int next_above(const float *x, int i, int n, float t, int ge) {
#ifdef __SSE2__
    const __m128 tv = _mm_set1_ps(t);
    for (; i + 4 <= n; i += 4) {
        __m128 v = _mm_loadu_ps(x + i);
        int m = _mm_movemask_ps(ge ? _mm_cmpge_ps(v, tv) : _mm_cmpgt_ps(v, tv));
        if (m) return i + __builtin_ctz((unsigned)m);
    }
#endif
    for (; i < n; i++)
        if (ge ? x[i] >= t : x[i] > t) return i;
    return n;
}

/* The largest value, NaN skipped (-inf when there is none). */
static float max_of(const float *x, int n) {
    float mx = -INFINITY;
    int i = 0;
#ifdef __SSE2__
    __m128 m0 = _mm_set1_ps(-INFINITY), m1 = m0;
    for (; i + 8 <= n; i += 8) { /* maxps gives its second operand when either is NaN */
        m0 = _mm_max_ps(_mm_loadu_ps(x + i), m0);
        m1 = _mm_max_ps(_mm_loadu_ps(x + i + 4), m1);
    }
    float lanes[4];
    _mm_storeu_ps(lanes, _mm_max_ps(m0, m1));
    for (int j = 0; j < 4; j++) mx = lanes[j] > mx ? lanes[j] : mx;
#endif
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    return mx;
}

/* The sum over i of e^(x[i] - mx), mx >= every x[i], in double; -inf and NaN count as 0. Over a
 * whole vocabulary (the top-k 0 threshold, ts_logprobs): an expf per logit took 0.9 ms a token
 * over Qwen3's 151936 (Zen 5). With SSE2 (x86-64's baseline) four lanes at a time, by exp_poly.h's
 * polynomial without FMA (within 1.22 ulp of e^x over every float in [-87, 0], a scratch sweep);
 * a term below e^-87 (1.6e-38) counts as 0, which no vocabulary's sum, at least 1 (the maximum's
 * term), can resolve. */
static double sum_exp(const float *x, int n, float mx) {
    double sum = 0;
    int i = 0;
#ifdef __SSE2__
    const __m128 m = _mm_set1_ps(mx), lo = _mm_set1_ps(-87.0f), log2e = _mm_set1_ps(TS_EXP_LOG2E);
    const __m128 hi_ = _mm_set1_ps(TS_EXP_LN2_HI), lo_ = _mm_set1_ps(TS_EXP_LN2_LO);
    __m128d s0 = _mm_setzero_pd(), s1 = _mm_setzero_pd();
    for (; i + 4 <= n; i += 4) {
        __m128 d = _mm_sub_ps(_mm_loadu_ps(x + i), m);
        __m128 keep = _mm_cmpge_ps(d, lo); /* false for NaN and for -inf */
        d = _mm_max_ps(d, lo);             /* lo where NaN: the result is masked anyway */
        __m128i ni = _mm_cvtps_epi32(_mm_mul_ps(d, log2e)); /* to nearest */
        __m128 nf = _mm_cvtepi32_ps(ni);
        __m128 r = _mm_sub_ps(_mm_sub_ps(d, _mm_mul_ps(nf, hi_)), _mm_mul_ps(nf, lo_));
        __m128 p = _mm_set1_ps(ts_exp_taylor[0]);
        for (int k = 1; k <= TS_EXP_DEGREE; k++) p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(ts_exp_taylor[k]));
        __m128 e = _mm_mul_ps(p, _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(ni, _mm_set1_epi32(127)), 23)));
        e = _mm_and_ps(e, keep);
        s0 = _mm_add_pd(s0, _mm_cvtps_pd(e));
        s1 = _mm_add_pd(s1, _mm_cvtps_pd(_mm_movehl_ps(e, e)));
    }
    double t[2];
    _mm_storeu_pd(t, _mm_add_pd(s0, s1));
    sum = t[0] + t[1];
#endif
    for (; i < n; i++)
        if (x[i] > -INFINITY) sum += (double)expf(x[i] - mx);
    return sum;
}

/* s->val: logits (descending) -> probabilities over the current candidates. */
static void softmax_cand(ts_sampler *s) {
    double sum = 0;
    float mx = s->val[0];
    for (int i = 0; i < s->n_cand; i++) {
        s->val[i] = expf(s->val[i] - mx);
        sum += s->val[i];
    }
    for (int i = 0; i < s->n_cand; i++) s->val[i] = (float)(s->val[i] / sum);
}

/* Without top-k, only tokens that can survive top-p and min-p need sorting: those with a
 * probability above a threshold whose set already holds top_p of the mass (lowered until it
 * does) and min_p * p_max. s->val gets probabilities over the whole vocabulary, as HF's top-p
 * sees them; the min-p and top-p steps that follow decide exactly. */
static void select_by_threshold(ts_sampler *s, const float *logits, float mx) {
    int V = s->n_vocab;
    double z = sum_exp(logits, V, mx);
    double pmax = 1.0 / z, floor_p = s->o.min_p > 0 ? s->o.min_p * pmax * 0.999 : 0;
    double t = s->o.top_p < 1.0f ? pmax * 1e-3 : 0;
    if (t < floor_p) t = floor_p;
    int n;
    for (;;) {
        float lt = t > 0 ? (float)(mx + log(t * z)) : -INFINITY;
        n = 0;
        for (int i = next_above(logits, 0, V, lt, 1); i < V; i = next_above(logits, i + 1, V, lt, 1)) {
            s->val[n] = logits[i];
            s->ids[n++] = i;
        }
        /* summed as z is: once every logit is a candidate, mass / z is 1 to double's rounding, so
         * a top_p just below 1 still ends the loop (an expf per candidate, against z's polynomial,
         * could leave it a few 1e-8 short: some 70 more passes) */
        double mass = sum_exp(s->val, n, mx);
        if (t <= floor_p || mass / z >= s->o.top_p || t < 1e-300) break;
        t = t * 1e-4 > floor_p ? t * 1e-4 : floor_p;
    }
    s->n_cand = n;
    for (int i = 0; i < n; i++) s->sort[i] = (struct cand){logits[s->ids[i]], s->ids[i]};
    qsort(s->sort, (size_t)n, sizeof *s->sort, cmp_desc);
    for (int i = 0; i < n; i++) {
        s->ids[i] = s->sort[i].id;
        s->val[i] = (float)(expf(s->sort[i].v - mx) / z);
    }
}

/* Non-finite logits (a broken model, an extreme temperature) must not reach the samplers,
 * whose thresholds would turn NaN and never converge: NaN counts as -inf, and without a finite
 * maximum the first maximum wins. Returns 1 when that fallback applies. Each logit is divided
 * by div first (the temperature; 1 leaves it as is). The maximum in 16 lanes, then its first
 * index: one loop carrying the index was a chain of dependent compares (0.5 ms over 151936
 * logits). */
static int degenerate(float *logits, int V, float div, int *best) {
    float mx = -INFINITY;
    int i = 0;
#ifdef __SSE2__ /* x86-64's baseline; the compiler left the plain loop scalar */
    const __m128 d = _mm_set1_ps(div), ninf = _mm_set1_ps(-INFINITY);
    __m128 m[4] = {ninf, ninf, ninf, ninf};
    for (; i + 16 <= V; i += 16)
        for (int j = 0; j < 4; j++) {
            __m128 x = _mm_div_ps(_mm_loadu_ps(logits + i + 4 * j), d), nan = _mm_cmpunord_ps(x, x);
            x = _mm_or_ps(_mm_andnot_ps(nan, x), _mm_and_ps(nan, ninf));
            _mm_storeu_ps(logits + i + 4 * j, x);
            m[j] = _mm_max_ps(m[j], x); /* no NaN left: the larger, either zero on a tie */
        }
    float lanes[16];
    for (int j = 0; j < 4; j++) _mm_storeu_ps(lanes + 4 * j, m[j]);
    for (int j = 0; j < 16; j++) mx = lanes[j] > mx ? lanes[j] : mx;
#endif
    for (; i < V; i++) {
        float x = logits[i] / div;
        logits[i] = x = x != x ? -INFINITY : x;
        mx = x > mx ? x : mx;
    }
    int b = 0;
    while (b < V - 1 && logits[b] != mx) b++;
    *best = b;
    return !isfinite(mx);
}

int32_t ts_sampler_sample(ts_sampler *s, float *logits) {
    const ts_sample_opts *o = &s->o;
    int V = s->n_vocab;
    if (o->repeat_penalty != 1.0f)
        for (int i = 0; i < s->n_seen; i++) {
            float *l = &logits[s->seen_ids[i]];
            *l = *l > 0 ? *l / o->repeat_penalty : *l * o->repeat_penalty;
        }
    if (o->temp <= 0) {
        int best; /* first maximum, as torch.argmax (NaN counts as -inf) */
        degenerate(logits, V, 1.0f, &best);
        s->n_cand = 0;
        return best;
    }
    int best;
    if (degenerate(logits, V, o->temp, &best)) {
        s->n_cand = 0;
        return best;
    }
    if (o->top_k > 0) {
        select_candidates(s, logits, o->top_k);
        softmax_cand(s);
    } else {
        select_by_threshold(s, logits, logits[best]); /* the maximum (degenerate) */
    }
    if (o->top_p < 1.0f) {
        /* HF removes a token when the mass of it and everything less likely is <= 1 - p:
         * the smallest prefix whose mass reaches p survives. */
        double cum = 0;
        int n = 0;
        while (n < s->n_cand && (n == 0 || cum < o->top_p)) cum += s->val[n++];
        /* Later tokens equal to the last kept one have the same tail mass test result only
         * up to rounding; HF keeps by the float cumulative, so do we. */
        s->n_cand = n;
    }
    if (o->min_p > 0) {
        /* Ratios to the top are unchanged by renormalization, so the threshold can use the
         * current (possibly top-p-truncated, not yet renormalized) values. */
        float thr = o->min_p * s->val[0];
        int n = 1;
        while (n < s->n_cand && s->val[n] >= thr) n++;
        s->n_cand = n;
    }
    double sum = 0, total = 0;
    for (int i = 0; i < s->n_cand; i++) sum += s->val[i];
    for (int i = 0; i < s->n_cand; i++) total += s->val[i] = (float)(s->val[i] / sum);
    double u = rng_uniform(&s->rng) * total, acc = 0;
    for (int i = 0; i < s->n_cand; i++) {
        acc += s->val[i];
        if (u < acc) return s->ids[i];
    }
    return s->ids[s->n_cand - 1]; /* u landed in the rounding slack above the last sum */
}

void ts_logprobs(const float *logits, int n, int32_t id, int k, ts_logprob *out) {
    if (k > TS_LOGPROB_TOP_MAX) k = TS_LOGPROB_TOP_MAX;
    if (k < 0) k = 0;
    out->id = id;
    out->n_top = 0;
    float mx = max_of(logits, n);
    /* the top k, kept sorted by insertion (k is small; a value equal to a kept one goes after it,
     * so ties keep the lower id first, as greedy's argmax): only values above -inf while fewer
     * than k are kept, then above the k-th */
    float above = -INFINITY;
    for (int i = k ? next_above(logits, 0, n, above, 0) : n; i < n; i = next_above(logits, i + 1, n, above, 0)) {
        float x = logits[i];
        int j = out->n_top < k ? out->n_top++ : k - 1;
        while (j > 0 && x > out->top_lp[j - 1]) {
            out->top_lp[j] = out->top_lp[j - 1];
            out->top_id[j] = out->top_id[j - 1];
            j--;
        }
        out->top_lp[j] = x;
        out->top_id[j] = i;
        if (out->n_top == k) above = out->top_lp[k - 1];
    }
    double sum = isfinite(mx) ? sum_exp(logits, n, mx) : 0;
    double lse = isfinite(mx) ? (double)mx + log(sum) : 0;
    for (int j = 0; j < out->n_top; j++) out->top_lp[j] = (float)((double)out->top_lp[j] - lse);
    float x = id >= 0 && id < n ? logits[id] : -INFINITY;
    out->logprob = x == x ? (float)((double)x - lse) : -INFINITY;
}

/* ---- stop strings ---- */

#define STOP_CHUNK 256

struct ts_stopper {
    char **stops;
    size_t *lens;
    int n;
    size_t maxlen;
    ts_text_fn emit;
    void *user;
    char *buf; /* held text + one chunk of new text */
    size_t len;
    int stopped;
};

ts_status ts_stopper_new(const char *const *stops, int n, ts_text_fn emit, void *user,
                         ts_stopper **out, ts_error *err) {
    *out = NULL;
    ts_stopper *s = calloc(1, sizeof *s);
    if (!s) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    s->emit = emit;
    s->user = user;
    s->stops = calloc((size_t)(n > 0 ? n : 1), sizeof(char *));
    s->lens = calloc((size_t)(n > 0 ? n : 1), sizeof(size_t));
    if (!s->stops || !s->lens) goto oom;
    for (int i = 0; i < n; i++) {
        size_t l = strlen(stops[i]);
        if (!l) continue;
        if (!(s->stops[s->n] = malloc(l + 1))) goto oom;
        memcpy(s->stops[s->n], stops[i], l + 1);
        s->lens[s->n++] = l;
        if (l > s->maxlen) s->maxlen = l;
    }
    if (!(s->buf = malloc(s->maxlen + STOP_CHUNK))) goto oom;
    *out = s;
    return TS_OK;
oom:
    ts_stopper_free(s);
    return ts_fail(err, TS_ERR_NOMEM, "stop strings: out of memory");
}

void ts_stopper_free(ts_stopper *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) free(s->stops[i]);
    free(s->stops);
    free(s->lens);
    free(s->buf);
    free(s);
}

void ts_stopper_reset(ts_stopper *s) {
    s->len = 0;
    s->stopped = 0;
}

/* Earliest position of any stop string in buf[0..len), or -1. */
static long find_stop(const ts_stopper *s) {
    long best = -1;
    for (int k = 0; k < s->n; k++) {
        size_t l = s->lens[k];
        for (size_t i = 0; i + l <= s->len && (best < 0 || (long)i < best); i++)
            if (!memcmp(s->buf + i, s->stops[k], l)) {
                best = (long)i;
                break;
            }
    }
    return best;
}

/* Length of the longest suffix of buf that is a proper prefix of some stop string. */
static size_t held_suffix(const ts_stopper *s) {
    size_t max = s->maxlen - 1 < s->len ? s->maxlen - 1 : s->len;
    for (size_t l = max; l > 0; l--)
        for (int k = 0; k < s->n; k++)
            if (s->lens[k] > l && !memcmp(s->buf + s->len - l, s->stops[k], l)) return l;
    return 0;
}

int ts_stopper_feed(ts_stopper *s, const char *text, size_t len) {
    if (s->stopped) return 1;
    if (s->n == 0) {
        if (len) s->emit(s->user, text, len);
        return 0;
    }
    while (len > 0) {
        size_t take = len < STOP_CHUNK ? len : STOP_CHUNK;
        memcpy(s->buf + s->len, text, take);
        s->len += take;
        text += take;
        len -= take;
        long at = find_stop(s);
        if (at >= 0) {
            if (at > 0) s->emit(s->user, s->buf, (size_t)at);
            s->len = 0;
            s->stopped = 1;
            return 1;
        }
        size_t keep = held_suffix(s);
        if (s->len > keep) s->emit(s->user, s->buf, s->len - keep);
        memmove(s->buf, s->buf + s->len - keep, keep);
        s->len = keep;
    }
    return 0;
}

void ts_stopper_flush(ts_stopper *s) {
    if (!s->stopped && s->len) s->emit(s->user, s->buf, s->len);
    s->len = 0;
}
