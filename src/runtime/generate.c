/* The generation loop on the cpu target. Prefill is one forward call (the target chunks it);
 * each step samples from the last logits, checks EOS, streams the token's text through the
 * stop filter, and only then runs the decode step, so a stopping token never costs a forward. */
#include "runtime/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/clock.h"

#define GEN_MAX_EOS 32

struct ts_gen {
    ts_cpu *cpu;
    const ts_tok *tok;
    ts_gen_opts o;
    int n_vocab;
    int n_text; /* ids below this have text in the tokenizer; the rest are padding rows */
    float *logits; /* (n_vocab) last position */
    ts_sampler *sampler;
    ts_tok_stream *stream;
    ts_stopper *stopper;
    int32_t eos[GEN_MAX_EOS];
    int n_eos;
    int32_t *toks; /* (max_tokens + 1) this run's sampled tokens */
    int n_kept, n_total;
    /* prompt lookup: the prompt given to ts_gen_begin then toks (n_ctx_tok of cap_ctx), and
     * the verify pass's logits ((1 + lookup) rows, for ts_gen_run) */
    int32_t *ctx;
    int n_ctx_tok, cap_ctx;
    float *vlogits;
    int dcur; /* the next draft's most tokens: adapts to what was accepted (ts_gen_next_run) */
    float *lp_logits; /* (n_vocab) the raw logits kept for on_token: the sampler scales its own in place */
};

const char *ts_gen_stop_name(ts_gen_stop r) {
    switch (r) {
    case TS_GEN_STOP_EOS: return "eos";
    case TS_GEN_STOP_STRING: return "stop string";
    case TS_GEN_STOP_MAX: return "max tokens";
    case TS_GEN_STOP_CTX: return "context full";
    }
    return "?";
}

static void add_eos(ts_gen *g, int32_t id) {
    if (id < 0 || id >= g->n_vocab) return;
    for (int i = 0; i < g->n_eos; i++)
        if (g->eos[i] == id) return;
    if (g->n_eos < GEN_MAX_EOS) g->eos[g->n_eos++] = id;
}

static int is_eos(const ts_gen *g, int32_t id) {
    for (int i = 0; i < g->n_eos; i++)
        if (g->eos[i] == id) return 1;
    return 0;
}

static void emit_text(void *user, const char *text, size_t len) {
    ts_gen *g = user;
    if (g->o.on_text && len) g->o.on_text(g->o.user, text, len);
}

ts_status ts_gen_new(ts_cpu *c, const ts_model *m, const ts_tok *t, const ts_gen_opts *o,
                     ts_gen **out, ts_error *err) {
    *out = NULL;
    if (o->max_tokens < 1)
        return ts_fail(err, TS_ERR_ARG, "generate: max tokens %d, expected >= 1", o->max_tokens);
    if (o->n_ctx < 1) return ts_fail(err, TS_ERR_ARG, "generate: context %d, expected >= 1", o->n_ctx);
    if (o->lookup < 0 || o->lookup > TS_GEN_LOOKUP_MAX || o->lookup_ngram < 0 || o->lookup_ngram > 64 ||
        o->lookup_min < 0 || o->lookup_min > 64)
        return ts_fail(err, TS_ERR_ARG, "generate: lookup %d (expected 0..%d), n-grams %d..%d (expected 0..64)",
                       o->lookup, TS_GEN_LOOKUP_MAX, o->lookup_min, o->lookup_ngram);
    const ts_config *cf = ts_model_config(m);
    if (ts_tok_n_vocab(t) > cf->n_vocab)
        return ts_fail(err, TS_ERR_SHAPE,
                       "tokenizer has %d tokens but the model's vocab_size is %d (%s): they do "
                       "not belong together", ts_tok_n_vocab(t), cf->n_vocab, m->config_path);
    ts_gen *g = calloc(1, sizeof *g);
    if (!g) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    g->cpu = c;
    g->tok = t;
    g->o = *o;
    g->o.stop = NULL; /* copied by the stopper; the caller's array need not live on */
    g->n_vocab = cf->n_vocab;
    g->n_text = ts_tok_n_vocab(t);
    for (int i = 0; i < cf->n_eos; i++) add_eos(g, cf->eos_ids[i]);
    add_eos(g, ts_tok_eos(t));
    for (int i = 0; i < o->n_extra_eos; i++) add_eos(g, o->extra_eos[i]);
    g->o.extra_eos = NULL;
    g->logits = malloc(sizeof(float) * (size_t)g->n_vocab);
    g->toks = malloc(sizeof(int32_t) * ((size_t)o->max_tokens + 1));
    if (o->on_token) g->lp_logits = malloc(sizeof(float) * (size_t)g->n_vocab);
    if (!g->o.lookup_ngram) g->o.lookup_ngram = TS_GEN_LOOKUP_NGRAM;
    if (!g->o.lookup_min) g->o.lookup_min = TS_GEN_LOOKUP_MIN;
    if (g->o.lookup_min > g->o.lookup_ngram) g->o.lookup_min = g->o.lookup_ngram;
    if (c && o->lookup) {
        int k = 1 + o->lookup < ts_cpu_batch_max(c) ? 1 + o->lookup : ts_cpu_batch_max(c);
        g->o.lookup = k - 1;
        g->vlogits = malloc(sizeof(float) * (size_t)k * (size_t)g->n_vocab);
    }
    ts_status s = g->logits && g->toks && (!c || !g->o.lookup || g->vlogits) && (!o->on_token || g->lp_logits)
                      ? TS_OK
                      : ts_fail(err, TS_ERR_NOMEM, "generate: out of memory");
    if (!s) s = ts_sampler_new(g->n_vocab, &o->sample, &g->sampler, err);
    if (!s) s = ts_tok_stream_new(t, 1, &g->stream, err);
    if (!s) s = ts_stopper_new(o->stop, o->n_stop, emit_text, g, &g->stopper, err);
    if (s) {
        ts_gen_free(g);
        return s;
    }
    *out = g;
    return TS_OK;
}

void ts_gen_free(ts_gen *g) {
    if (!g) return;
    free(g->logits);
    free(g->toks);
    free(g->ctx);
    free(g->vlogits);
    free(g->lp_logits);
    ts_sampler_free(g->sampler);
    ts_tok_stream_free(g->stream);
    ts_stopper_free(g->stopper);
    free(g);
}

void ts_gen_reset(ts_gen *g) {
    if (g->cpu) ts_cpu_reset(g->cpu);
    ts_sampler_reset(g->sampler);
}

const int32_t *ts_gen_tokens(const ts_gen *g, int *n_kept, int *n_total) {
    if (n_kept) *n_kept = g->n_kept;
    if (n_total) *n_total = g->n_total;
    return g->toks;
}

void ts_gen_begin(ts_gen *g, const int32_t *prompt, int n) {
    g->n_kept = g->n_total = 0;
    g->n_ctx_tok = 0;
    g->dcur = g->o.lookup;
    if (g->o.lookup) { /* without room for the context, no drafts: the output is the same */
        int cap = n + g->o.max_tokens + 1;
        if (cap > g->cap_ctx) {
            int32_t *p = realloc(g->ctx, sizeof(int32_t) * (size_t)cap);
            if (p) g->ctx = p, g->cap_ctx = cap;
        }
        if (g->ctx && n + g->o.max_tokens + 1 <= g->cap_ctx) {
            memcpy(g->ctx, prompt, sizeof(int32_t) * (size_t)n);
            g->n_ctx_tok = n;
        }
    }
    for (int i = 0; i < n; i++) ts_sampler_accept(g->sampler, prompt[i]);
    ts_tok_stream_reset(g->stream);
    ts_stopper_reset(g->stopper);
}

ts_status ts_gen_next(ts_gen *g, float *logits, int n_past, int32_t *id_out, int *done, ts_gen_stop *why,
                      ts_error *err) {
    *done = 1;
    /* Embedding rows past the tokenizer (vocab padded to a multiple of 64/128) have no text;
     * trained models never pick them, random-weight ones would, and could not print them. */
    for (int i = g->n_text; i < g->n_vocab; i++) logits[i] = -INFINITY;
    if (g->o.on_token) memcpy(g->lp_logits, logits, sizeof(float) * (size_t)g->n_text);
    int32_t id = ts_sampler_sample(g->sampler, logits);
    *id_out = id;
    g->toks[g->n_total++] = id;
    if (g->n_ctx_tok && g->n_ctx_tok < g->cap_ctx) g->ctx[g->n_ctx_tok++] = id;
    if (is_eos(g, id)) {
        *why = TS_GEN_STOP_EOS;
        return TS_OK;
    }
    g->n_kept++;
    ts_sampler_accept(g->sampler, id);
    if (g->o.on_token) {
        ts_logprob lp;
        ts_logprobs(g->lp_logits, g->n_text, id, g->o.top_logprobs, &lp);
        g->o.on_token(g->o.user, &lp);
    }
    const char *text;
    size_t len;
    ts_status s = ts_tok_stream_feed(g->stream, id, &text, &len, err);
    if (s) return s;
    if (ts_stopper_feed(g->stopper, text, len)) *why = TS_GEN_STOP_STRING;
    else if (g->n_kept >= g->o.max_tokens) *why = TS_GEN_STOP_MAX;
    else if (n_past >= g->o.n_ctx) *why = TS_GEN_STOP_CTX;
    else *done = 0;
    return TS_OK;
}

ts_gen_stop ts_gen_end(ts_gen *g, ts_gen_stop why) {
    if (why == TS_GEN_STOP_STRING) return why;
    /* A character cut by the last token comes out as U+FFFD, as HF's lossy decode. */
    size_t len;
    const char *tail = ts_tok_stream_flush(g->stream, &len);
    if (ts_stopper_feed(g->stopper, tail, len)) return TS_GEN_STOP_STRING;
    ts_stopper_flush(g->stopper);
    return why;
}

int ts_lookup_draft(const int32_t *ctx, int n, int ngram_min, int ngram_max, int max_draft, int32_t *out) {
    if (ngram_min < 1) ngram_min = 1;
    for (int L = ngram_max < n - 1 ? ngram_max : n - 1; L >= ngram_min && max_draft > 0; L--) {
        const int32_t *suf = ctx + n - L;
        /* The latest earlier occurrence followed by max_draft tokens (in copying work the
         * source being copied), else the one followed by the most (an occurrence that
         * overlaps the suffix, as in a loop of a short period, is followed by fewer). */
        int best = -1;
        for (int i = n - L - 1; i >= 0; i--) {
            if (ctx[i] != suf[0] || memcmp(ctx + i, suf, sizeof(int32_t) * (size_t)L)) continue;
            best = i;
            if (n - (i + L) >= max_draft) break;
        }
        if (best < 0) continue;
        int d = n - (best + L) < max_draft ? n - (best + L) : max_draft;
        memcpy(out, ctx + best + L, sizeof(int32_t) * (size_t)d);
        return d;
    }
    return 0;
}

int ts_gen_draft(ts_gen *g, int max_draft, int32_t *out) {
    if (!g->o.lookup || !g->n_ctx_tok) return 0;
    int left = g->o.max_tokens - g->n_kept - 1; /* tokens the drafts could still add */
    if (max_draft > g->dcur) max_draft = g->dcur;
    if (max_draft > left) max_draft = left;
    if (max_draft < 1) return 0;
    return ts_lookup_draft(g->ctx, g->n_ctx_tok, g->o.lookup_min, g->o.lookup_ngram, max_draft, out);
}

ts_status ts_gen_next_run(ts_gen *g, float *logits, const int32_t *draft, int n_draft, int n_past0, int32_t *id,
                          int *n_used, int *done, ts_gen_stop *why, ts_error *err) {
    for (int j = 0;; j++) {
        ts_status s = ts_gen_next(g, logits + (size_t)j * (size_t)g->n_vocab, n_past0 + j + 1, id, done, why, err);
        *n_used = j + 1;
        /* row j + 1 was given draft[j]: its logits are the next ones only if that is what
         * row j sampled */
        if (s || *done || j == n_draft || *id != draft[j]) {
            /* the next draft's length: doubled after a draft accepted whole, else what was
             * accepted (at least 1) */
            if (n_draft) g->dcur = j == n_draft ? (2 * g->dcur < g->o.lookup ? 2 * g->dcur : g->o.lookup) : (j > 0 ? j : 1);
            return s;
        }
    }
}

ts_status ts_gen_run(ts_gen *g, const int32_t *prompt, int n, ts_gen_result *res, ts_error *err) {
    memset(res, 0, sizeof *res);
    g->n_kept = g->n_total = 0;
    if (!g->cpu) return ts_fail(err, TS_ERR_ARG, "generate: a generator made without a cpu session cannot run");
    int past = ts_cpu_n_past(g->cpu);
    if (n < 1) return ts_fail(err, TS_ERR_ARG, "generate: empty prompt");
    if (n > g->o.n_ctx - past)
        return ts_fail(err, TS_ERR_ARG,
                       "generate: prompt of %d tokens does not fit the context (%d of %d used); "
                       "raise --ctx", n, past, g->o.n_ctx);
    ts_gen_begin(g, prompt, n);
    double t0 = ts_now_s();
    ts_status s = ts_cpu_forward(g->cpu, prompt, n, g->logits, 0, NULL, err);
    if (s) return s;
    double t1 = ts_now_s();
    res->n_prompt = n;
    res->prompt_s = t1 - t0;
    ts_gen_stop why = TS_GEN_STOP_MAX;
    int32_t id, rows[1 + TS_GEN_LOOKUP_MAX];
    int done;
    s = ts_gen_next(g, g->logits, ts_cpu_n_past(g->cpu), &id, &done, &why, err);
    while (!s && !done) {
        int p0 = ts_cpu_n_past(g->cpu), room = g->o.n_ctx - p0 - 1; /* the drafts' rows must fit the cache */
        int d = ts_gen_draft(g, room, rows + 1);
        res->n_steps++;
        if (!d) { /* plain decoding */
            s = ts_cpu_forward(g->cpu, &id, 1, g->logits, 0, NULL, err);
            if (!s) s = ts_gen_next(g, g->logits, ts_cpu_n_past(g->cpu), &id, &done, &why, err);
            continue;
        }
        /* the verify pass: rows bit-identical to 1 + d single decodes (cpu_target.h) */
        rows[0] = id;
        s = ts_cpu_decode_run(g->cpu, ts_cpu_own_seq(g->cpu), rows, 1 + d, g->vlogits, err);
        if (s) break;
        int used;
        s = ts_gen_next_run(g, g->vlogits, rows + 1, d, p0, &id, &used, &done, &why, err);
        ts_cpu_truncate(g->cpu, p0 + used); /* the rejected drafts' positions */
        res->n_drafted += d;
        res->n_accepted += used - 1;
    }
    if (!s) why = ts_gen_end(g, why);
    res->n_gen = g->n_kept;
    res->gen_s = ts_now_s() - t1;
    res->stop = why;
    return s;
}
