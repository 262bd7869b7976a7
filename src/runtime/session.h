/* A text-in, text-out session over one model: loads the model, its tokenizer and chat
 * template, creates the cpu target and the generator, and runs single prompts or a multi-turn
 * chat that keeps the KV cache across turns (only each new turn's tokens are prefilled).
 * `tessera run` and `tessera chat` are thin wrappers around it. */
#ifndef TS_RUNTIME_SESSION_H
#define TS_RUNTIME_SESSION_H
#include "runtime/chat_template.h"
#include "runtime/generate.h"

#define TS_SESSION_MAX_STOP 16

typedef struct ts_session_opts {
    const char *model_dir;
    const char *tokenizer; /* tokenizer.json or a directory holding it; NULL: model_dir */
    int n_ctx;             /* KV capacity; 0: min(max_position_embeddings, 4096) */
    int n_threads;         /* 0: all cores */
    int max_tokens;        /* per reply */
    ts_sample_opts sample;
    const char *stop[TS_SESSION_MAX_STOP];
    int n_stop;
    const char *system;  /* chat: a system message, or NULL for the template's default */
    const char *chat_template; /* --chat-template: a .jinja file replacing the model's template, or NULL */
    int64_t now;               /* --date: the time strftime_now sees (seconds since the epoch, as
                                * UTC); -1: the local time at each turn */
    int enable_thinking; /* -1: template default; 0/1: Qwen3's switch */
    const ts_cpu_tile_rec *tiles; /* a deployment's autotuned tiles (borrowed), or NULL */
    int n_tiles;
    int copy_weights; /* --weights: 1 copy, 0 mmap, -1 unset (a deployment's choice, else the
                       * default of session.c: copy quantized files, and any file in chat/serve) */
    int lookup;       /* --lookup: drafted tokens verified per decode step (prompt lookup); 0: off */
    int lookup_ngram; /* --lookup-ngram: longest suffix matched (0: TS_GEN_LOOKUP_NGRAM) */
    int lookup_min;   /* --lookup-min: shortest suffix matched (0: TS_GEN_LOOKUP_MIN) */
    int quant;        /* --quant: TS_DTYPE_Q8_0 / TS_DTYPE_Q4_0 (weight matrices quantized at load,
                       * model/quantize.h), or -1 to run the weights as stored */
    int kv_cache;     /* --kv-cache: TS_DTYPE_F32 / TS_DTYPE_F16 (ts_model.kv_type), or -1: FP32 */
    /* Said once per reply when the context caps it below max_tokens: how many tokens it can
     * have and where it stops (the caller prints it; may be NULL). */
    void (*on_notice)(void *user, const char *msg);
    void *notice_user;
} ts_session_opts;

/* Defaults: ts_sample_opts_default, 256 tokens per reply, n_ctx 0, enable_thinking -1, now -1. */
void ts_session_opts_default(ts_session_opts *o);

typedef struct ts_session ts_session;

/* on_text gets generated text as it is produced. need_template: 1 load the chat template too
 * (an error if the model has none and no ChatML fallback applies), 2 load it when there is
 * one (ts_session_template is NULL when not), 0 not at all. Refused before the KV
 * cache is allocated: --ctx beyond max_position_embeddings (TS_ERR_ARG, both numbers named)
 * and a session larger than the memory available (TS_ERR_NOMEM, model/memory.h). */
ts_status ts_session_open(const ts_session_opts *o, int need_template, ts_text_fn on_text,
                          void *user, ts_session **out, ts_error *err);
void ts_session_close(ts_session *s);

const ts_tok *ts_session_tok(const ts_session *s);
/* Bytes of weights the session copied at load (--weights copy, or non-BF16 checkpoints). */
size_t ts_session_copied_bytes(const ts_session *s);
const ts_chat_template *ts_session_template(const ts_session *s);
/* The session's pieces, for a caller that drives the target itself (the server's scheduler
 * runs its own sequences on the session's cpu target; the session's own generator is then
 * unused). */
ts_cpu *ts_session_cpu(ts_session *s);
const ts_model *ts_session_model(const ts_session *s);
int ts_session_threads(const ts_session *s);
/* The context (positions) and where it came from ("--ctx 512", "max_position_embeddings in
 * DIR/config.json", or the 4096 default), for messages. */
int ts_session_n_ctx(const ts_session *s);
const char *ts_session_ctx_source(const ts_session *s);

/* Generates a continuation of raw text (BOS added when the tokenizer has one), from an empty
 * cache. A prompt that does not fit the context is TS_ERR_ARG naming the context and where
 * its size came from (--ctx, max_position_embeddings or the default). */
ts_status ts_session_complete(ts_session *s, const char *prompt, ts_gen_result *res, ts_error *err);
/* One chat turn: appends the user message, prefills only the tokens the cache lacks, and
 * generates the reply (which is kept in the conversation). */
ts_status ts_session_chat(ts_session *s, const char *user_msg, ts_gen_result *res, ts_error *err);
/* Messages in the conversation (system, user and assistant turns); a failed turn adds none. */
int ts_session_n_messages(const ts_session *s);
/* Tokens prefilled by the last call: fewer than the whole conversation when the cache was
 * reused. And whether the last chat turn had to re-prefill from scratch. */
int ts_session_reused(const ts_session *s);
/* Tokens generated by the last call (borrowed; the stopping EOS is not included). */
const int32_t *ts_session_tokens(const ts_session *s, int *n);

#endif
