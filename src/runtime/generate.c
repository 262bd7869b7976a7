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
    ts_status s = g->logits && g->toks ? TS_OK : ts_fail(err, TS_ERR_NOMEM, "generate: out of memory");
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
    int32_t id = ts_sampler_sample(g->sampler, logits);
    *id_out = id;
    g->toks[g->n_total++] = id;
    if (is_eos(g, id)) {
        *why = TS_GEN_STOP_EOS;
        return TS_OK;
    }
    g->n_kept++;
    ts_sampler_accept(g->sampler, id);
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
    for (;;) {
        int32_t id;
        int done;
        s = ts_gen_next(g, g->logits, ts_cpu_n_past(g->cpu), &id, &done, &why, err);
        if (s || done) break;
        s = ts_cpu_forward(g->cpu, &id, 1, g->logits, 0, NULL, err);
        if (s) break;
    }
    if (!s) why = ts_gen_end(g, why);
    res->n_gen = g->n_kept;
    res->gen_s = ts_now_s() - t1;
    res->stop = why;
    return s;
}
