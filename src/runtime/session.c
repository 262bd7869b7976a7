/* Session plumbing for run/chat. Chat keeps the cache across turns by remembering the exact
 * text the cache holds: the next turn's rendered conversation must start with that text, and
 * only the rest is tokenized and prefilled. When a template rewrites history (Qwen3 drops old
 * <think> blocks, Llama-3 trims replies) the prefix test fails and the turn re-prefills from
 * an empty cache, so the model always sees exactly what apply_chat_template would give it. */
#include "runtime/session.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "io/gguf.h"
#include "io/mmap.h"
#include "model/memory.h"
#include "model/quantize.h"

typedef struct text_buf {
    char *p;
    size_t len, cap;
} text_buf;

static int tb_put(text_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

typedef struct owned_msg {
    char *role, *content;
} owned_msg;

struct ts_session {
    ts_session_opts o;
    ts_model *m;
    ts_tok *tok;
    ts_cpu *cpu;
    ts_gen *gen;
    ts_chat_template *tmpl;
    ts_text_fn on_text;
    void *user;
    text_buf reply;   /* this turn's emitted text */
    text_buf kv_text; /* the text of every token in the cache (plus the pending one) */
    int32_t pending;  /* last kept token of the previous reply, not yet in the cache; -1 */
    owned_msg *msgs;
    int n_msgs, cap_msgs;
    int reused;
    int nomem; /* reply text could not be kept */
    char ctx_src[512]; /* where n_ctx came from, for messages */
};

void ts_session_opts_default(ts_session_opts *o) {
    memset(o, 0, sizeof *o);
    ts_sample_opts_default(&o->sample);
    o->max_tokens = 256;
    o->enable_thinking = -1;
    o->copy_weights = -1;
    o->quant = -1;
    o->kv_cache = -1;
    o->now = -1;
}

static void on_piece(void *user, const char *text, size_t len) {
    ts_session *s = user;
    if (tb_put(&s->reply, text, len)) s->nomem = 1;
    if (s->on_text) s->on_text(s->user, text, len);
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* The session's allocations with these cpu options against the memory the machine has left. */
static ts_status session_mem_check(const ts_session *s, const ts_cpu_opts *co, ts_error *err) {
    ts_mem_need need;
    char what[600];
    ts_cpu_mem_need(s->m, s->o.n_ctx, co, &need);
    need.outputs = sizeof(float) * (size_t)ts_model_config(s->m)->n_vocab; /* the generator's logits */
    snprintf(what, sizeof what, "a session of %d positions (%s)", s->o.n_ctx, s->ctx_src);
    return ts_mem_check(&need, what, err);
}

ts_status ts_session_open(const ts_session_opts *o, int need_template, ts_text_fn on_text,
                          void *user, ts_session **out, ts_error *err) {
    *out = NULL;
    ts_session *s = calloc(1, sizeof *s);
    if (!s) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    s->o = *o;
    s->on_text = on_text;
    s->user = user;
    s->pending = -1;
    char tokdir[4096], path[4200];
    const char *tp = o->tokenizer ? o->tokenizer : o->model_dir;
    /* The directory the tokenizer lives in also holds its tokenizer_config.json. */
    if (is_dir(tp)) {
        snprintf(tokdir, sizeof tokdir, "%s", tp);
        snprintf(path, sizeof path, "%s/tokenizer.json", tp);
    } else {
        snprintf(path, sizeof path, "%s", tp);
        snprintf(tokdir, sizeof tokdir, "%s", tp);
        char *slash = strrchr(tokdir, '/');
        if (slash) *slash = 0;
        else snprintf(tokdir, sizeof tokdir, ".");
    }
    ts_status st = ts_model_open(o->model_dir, &s->m, err);
    if (!st && o->quant >= 0) st = ts_model_quantize(s->m, (ts_dtype)o->quant, err);
    if (!st && o->kv_cache >= 0) s->m->kv_type = o->kv_cache;
    /* A GGUF carries its tokenizer and chat template; --tokenizer still overrides. */
    int from_gguf = !st && s->m->gguf && !o->tokenizer;
    if (from_gguf) st = ts_tok_from_gguf(s->m->gguf, &s->tok, err);
    else if (!st && !exists(path))
        st = ts_fail(err, TS_ERR_IO,
                     o->tokenizer ? "%s: no such tokenizer file"
                                  : "%s: no tokenizer (a synth model has none: pass --tokenizer PATH, "
                                    "or synth it with --tokenizer DIR)", path);
    /* Loading the directory (not the file) lets the tokenizer read eos/bos from
     * tokenizer_config.json and config.json next to it. */
    if (!st && !from_gguf) st = ts_tok_load(is_dir(tp) ? tp : path, &s->tok, err);
    /* Reserved once so that streaming a reply normally never reallocates. */
    if (!st && tb_put(&s->reply, "", 0)) st = ts_fail(err, TS_ERR_NOMEM, "out of memory");
    /* The model's own template (a GGUF's tokenizer.chat_template, else tokenizer_config.json
     * or chat_template.jinja beside the tokenizer) or the --chat-template file, with the
     * special tokens of the tokenizer in use. */
    int tmpl_from = !st; /* the status below is the template's own */
    if (!st && need_template && from_gguf) {
        st = o->chat_template ? ts_chat_template_file(o->chat_template, s->tok, &s->tmpl, err)
                              : ts_chat_template_gguf(s->m->gguf, s->tok, &s->tmpl, err);
    } else if (!st && need_template) {
        snprintf(path, sizeof path, "%s/tokenizer_config.json", tokdir);
        st = ts_chat_template_load_with(path, o->chat_template, s->tok, &s->tmpl, err);
    }
    /* 2: a template when the model has one (the server's chat endpoint), none otherwise. */
    if (tmpl_from && st == TS_ERR_UNSUPPORTED && need_template == 2 && !o->chat_template) st = TS_OK;
    if (!st && s->tmpl && o->now >= 0) ts_chat_template_set_now(s->tmpl, o->now);
    if (!st) {
        const ts_config *cf = ts_model_config(s->m);
        if (s->o.n_ctx > 0) {
            snprintf(s->ctx_src, sizeof s->ctx_src, "--ctx %d", s->o.n_ctx);
            st = ts_model_check_context(s->m, s->o.n_ctx, "--ctx", err);
        } else if (cf->max_pos <= 4096) {
            s->o.n_ctx = cf->max_pos;
            snprintf(s->ctx_src, sizeof s->ctx_src, "max_position_embeddings in %s", s->m->config_path);
        } else {
            s->o.n_ctx = 4096;
            snprintf(s->ctx_src, sizeof s->ctx_src,
                     "the default; --ctx raises it up to max_position_embeddings %d", cf->max_pos);
        }
    }
    /* Not told where (no --weights, no deployment): a Q8_0/Q4_0 file is copied into huge pages
     * (ts_cpu_default_copy), and so is every file in a chat or a server, which live long enough
     * to repay the copy's load time (BF16 decoded 1.18-1.31x faster from the copy than from the
     * page cache on the Intel Xeon with AMX, docs/performance.md; a 1B copy loads in 2.2-2.4 s),
     * unless --quant already put the matrices in their own slab or the copy does not fit. */
    int told = o->copy_weights >= 0;
    int copy = told ? o->copy_weights : !st && (ts_cpu_default_copy(s->m) || (need_template && o->quant < 0));
    ts_cpu_opts co = {.n_threads = o->n_threads, .force_variant = -1,
                      .disable = copy ? TS_OPT_ZERO_COPY : 0, .release_source = 1};
    if (!st) {
        /* The KV cache of a long --ctx (or a copy of the weights) is the session's big
         * allocation: refused here when the machine cannot hold it, rather than swapping. */
        st = session_mem_check(s, &co, err);
        if (st == TS_ERR_NOMEM && copy && !told) { /* a copy nobody asked for: read the mmap instead */
            copy = 0, co.disable = 0;
            st = session_mem_check(s, &co, err);
        }
    }
    if (!st) {
        st = ts_cpu_new(s->m, s->o.n_ctx, &co, &s->cpu, err);
        if (!st && o->n_tiles) st = ts_cpu_tiles_set(s->cpu, o->tiles, o->n_tiles, err);
        /* The session holds its own copy of every weight now (each tensor's mapped pages went
         * as it was copied): the pages shared between tensors go too. */
        if (!st && copy)
            for (int i = 0; i < s->m->store.n_maps; i++) ts_mmap_release(&s->m->store.maps[i]);
    }
    if (!st) {
        int32_t eot = -1;
        const char *e = s->tmpl ? ts_chat_template_end_of_turn(s->tmpl) : NULL;
        if (e) eot = ts_tok_token_id(s->tok, e, strlen(e));
        ts_gen_opts go = {s->o.max_tokens, s->o.n_ctx, s->o.sample, s->o.stop, s->o.n_stop,
                          &eot, eot >= 0, on_piece, s, s->o.lookup, s->o.lookup_ngram,
                          s->o.lookup_min, NULL, 0};
        st = ts_gen_new(s->cpu, s->m, s->tok, &go, &s->gen, err);
    }
    if (st) {
        ts_session_close(s);
        return st;
    }
    *out = s;
    return TS_OK;
}

void ts_session_close(ts_session *s) {
    if (!s) return;
    ts_gen_free(s->gen);
    ts_cpu_free(s->cpu);
    ts_chat_template_free(s->tmpl);
    ts_tok_free(s->tok);
    ts_model_close(s->m);
    for (int i = 0; i < s->n_msgs; i++) {
        free(s->msgs[i].role);
        free(s->msgs[i].content);
    }
    free(s->msgs);
    free(s->reply.p);
    free(s->kv_text.p);
    free(s);
}

size_t ts_session_copied_bytes(const ts_session *s) { return ts_cpu_converted_bytes(s->cpu); }
ts_cpu *ts_session_cpu(ts_session *s) { return s->cpu; }
const ts_model *ts_session_model(const ts_session *s) { return s->m; }
int ts_session_n_ctx(const ts_session *s) { return s->o.n_ctx; }
const char *ts_session_ctx_source(const ts_session *s) { return s->ctx_src; }
int ts_session_threads(const ts_session *s) { return ts_cpu_threads(s->cpu); }
const ts_tok *ts_session_tok(const ts_session *s) { return s->tok; }
const ts_chat_template *ts_session_template(const ts_session *s) { return s->tmpl; }
int ts_session_reused(const ts_session *s) { return s->reused; }
const int32_t *ts_session_tokens(const ts_session *s, int *n) { return ts_gen_tokens(s->gen, n, NULL); }

/* Before a prompt is prefilled: it must fit what the cache has left, and when the context
 * leaves room for fewer than max_tokens the caller hears how many and where generation stops.
 * The last token sampled is never fed back, so n_ctx - used + 1 tokens can come out. */
static ts_status check_room(ts_session *s, int n, ts_error *err) {
    int past = ts_cpu_n_past(s->cpu), C = s->o.n_ctx;
    if (n > C - past)
        return ts_fail(err, TS_ERR_ARG, "prompt of %d tokens%s does not fit the context of %d positions (%s)", n,
                       past ? " after the cached conversation" : "", C, s->ctx_src);
    int cap = C - past - n + 1;
    if (cap < s->o.max_tokens && s->o.on_notice) {
        char msg[1024];
        snprintf(msg, sizeof msg,
                 "generation capped at %d tokens (-n %d): the context holds %d positions (%s) and the prompt "
                 "fills %d of them, so it stops at position %d",
                 cap, s->o.max_tokens, C, s->ctx_src, past + n, C);
        s->o.on_notice(s->o.notice_user, msg);
    }
    return TS_OK;
}

static ts_status run_tokens(ts_session *s, const int32_t *ids, int n, ts_gen_result *res, ts_error *err) {
    ts_status st = check_room(s, n, err);
    if (st) return st;
    s->reply.len = 0;
    if (s->reply.p) s->reply.p[0] = 0;
    s->nomem = 0;
    st = ts_gen_run(s->gen, ids, n, res, err);
    if (!st && s->nomem) st = ts_fail(err, TS_ERR_NOMEM, "out of memory keeping the reply text");
    return st;
}

ts_status ts_session_complete(ts_session *s, const char *prompt, ts_gen_result *res, ts_error *err) {
    int32_t *ids = NULL;
    int n = 0;
    ts_gen_reset(s->gen);
    s->pending = -1;
    s->kv_text.len = 0;
    ts_status st = ts_tok_encode(s->tok, prompt, strlen(prompt), ts_tok_add_bos(s->tok), &ids, &n, err);
    if (!st && n == 0) st = ts_fail(err, TS_ERR_ARG, "the prompt encodes to no tokens");
    if (!st) st = run_tokens(s, ids, n, res, err);
    free(ids);
    return st;
}

static ts_status push_msg(ts_session *s, const char *role, const char *content, size_t len, ts_error *err) {
    if (s->n_msgs == s->cap_msgs) {
        int cap = s->cap_msgs ? s->cap_msgs * 2 : 8;
        owned_msg *p = realloc(s->msgs, sizeof *p * (size_t)cap);
        if (!p) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
        s->msgs = p;
        s->cap_msgs = cap;
    }
    owned_msg *m = &s->msgs[s->n_msgs];
    m->role = strdup(role);
    m->content = malloc(len + 1);
    if (!m->role || !m->content) {
        free(m->role);
        free(m->content);
        return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    }
    memcpy(m->content, content, len);
    m->content[len] = 0;
    s->n_msgs++;
    return TS_OK;
}

static void pop_msgs(ts_session *s, int n) {
    while (s->n_msgs > n) {
        s->n_msgs--;
        free(s->msgs[s->n_msgs].role);
        free(s->msgs[s->n_msgs].content);
    }
}

int ts_session_n_messages(const ts_session *s) { return s->n_msgs; }

ts_status ts_session_chat(ts_session *s, const char *user_msg, ts_gen_result *res, ts_error *err) {
    if (!s->tmpl) return ts_fail(err, TS_ERR_ARG, "chat: the session was opened without a chat template");
    ts_status st = TS_OK;
    int n_before = s->n_msgs;
    if (s->n_msgs == 0 && s->o.system) st = push_msg(s, "system", s->o.system, strlen(s->o.system), err);
    if (!st) st = push_msg(s, "user", user_msg, strlen(user_msg), err);
    ts_chat_msg *view = st ? NULL : malloc(sizeof *view * (size_t)s->n_msgs);
    if (!st && !view) st = ts_fail(err, TS_ERR_NOMEM, "out of memory");
    if (st) {
        pop_msgs(s, n_before);
        return st;
    }
    for (int i = 0; i < s->n_msgs; i++) view[i] = (ts_chat_msg){s->msgs[i].role, s->msgs[i].content};
    char *full = NULL;
    size_t flen = 0;
    st = ts_chat_render(s->tmpl, view, s->n_msgs, 1, s->o.enable_thinking, &full, &flen, err);
    free(view);
    int32_t *ids = NULL, *all = NULL;
    int n = 0;
    size_t from = 0;
    if (!st) {
        s->reused = s->kv_text.len > 0 && s->kv_text.len <= flen && !memcmp(full, s->kv_text.p, s->kv_text.len);
        if (s->reused) {
            from = s->kv_text.len;
        } else {
            ts_gen_reset(s->gen);
            s->pending = -1;
            s->kv_text.len = 0;
        }
        /* The template writes BOS as text where it wants one; HF encodes without adding. */
        st = ts_tok_encode(s->tok, full + from, flen - from, 0, &ids, &n, err);
    }
    if (!st) {
        int np = s->pending >= 0;
        all = malloc(sizeof(int32_t) * (size_t)(n + np));
        if (!all) st = ts_fail(err, TS_ERR_NOMEM, "out of memory");
        else {
            if (np) all[0] = s->pending;
            if (n) memcpy(all + np, ids, sizeof(int32_t) * (size_t)n);
            n += np;
        }
    }
    if (!st && n == 0) st = ts_fail(err, TS_ERR_ARG, "chat: the turn encodes to no tokens");
    if (!st) st = run_tokens(s, all, n, res, err);
    if (!st && tb_put(&s->kv_text, full + from, flen - from)) st = ts_fail(err, TS_ERR_NOMEM, "out of memory");
    if (!st) {
        /* The text of every kept token (specials included) extends kv_text. */
        int kept;
        const int32_t *toks = ts_gen_tokens(s->gen, &kept, NULL);
        char *txt = NULL;
        size_t tl = 0;
        if (kept) st = ts_tok_decode(s->tok, toks, kept, 0, &txt, &tl, err);
        if (!st && tb_put(&s->kv_text, txt ? txt : "", tl)) st = ts_fail(err, TS_ERR_NOMEM, "out of memory");
        free(txt);
        /* After an EOS stop every kept token was already fed (the EOS was sampled from the
         * last one's logits); after the other stops the last kept one was not. */
        s->pending = kept && res->stop != TS_GEN_STOP_EOS ? toks[kept - 1] : -1;
    }
    if (!st) st = push_msg(s, "assistant", s->reply.p ? s->reply.p : "", s->reply.len, err);
    if (st) {
        /* A failed turn leaves the cache in an unknown state: start over next time, and the
         * conversation as it was before the turn (the message that failed is not kept). */
        ts_gen_reset(s->gen);
        s->pending = -1;
        s->kv_text.len = 0;
        pop_msgs(s, n_before);
    }
    free(full);
    free(ids);
    free(all);
    return st;
}
