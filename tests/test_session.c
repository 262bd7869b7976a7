/* The chat session on a synth Qwen3-shaped model with the real Qwen3 tokenizer: a turn that
 * fails (the conversation outgrows the context) leaves the conversation as it was, and the
 * next turn works and reuses nothing stale; a turn that stops on EOS leaves the cache holding
 * exactly the conversation, so the next turn prefills only its own text (the last reply token
 * is not fed twice). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/session.h"
#include "tharness.h"

typedef struct text {
    char buf[4096];
    size_t len;
} text;

static void collect(void *user, const char *t, size_t n) {
    text *x = user;
    if (x->len + n < sizeof x->buf) memcpy(x->buf + x->len, t, n), x->len += n, x->buf[x->len] = 0;
}

/* The model of `dir` again in `out`, with config.json's eos_token_id set to eos. */
static void with_eos(const char *dir, const char *out, int eos) {
    char a[8192], b[8192];
    mkdir(out, 0755);
    snprintf(a, sizeof a, "%s/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/model.safetensors", out);
    CHECK(symlink(a, b) == 0, "symlink %s", b);
    snprintf(a, sizeof a, "%s/config.json", dir);
    snprintf(b, sizeof b, "%s/config.json", out);
    json_t *cfg = json_load_file(a, 0, NULL);
    CHECK(cfg && json_object_set_new(cfg, "eos_token_id", json_integer(eos)) == 0 && json_dump_file(cfg, b, 0) == 0,
          "rewrite %s", b);
    json_decref(cfg);
}

/* Turn 1 stops on EOS after some kept tokens; turn 2 must prefill exactly the text the
 * template adds after turn 1's prompt and reply: one token more means the last reply token
 * was fed again and sits twice in the cache. */
static void check_eos_turn(const char *dir, ts_session_opts o) {
    ts_error err;
    ts_gen_result r;
    ts_session *s = NULL;
    int n, stop_at = -1;
    /* The model's own greedy reply, to pick a token it will produce as the EOS (a random
     * model repeats one token: the repetition penalty makes it move on). */
    o.max_tokens = 6;
    o.sample.repeat_penalty = 3;
    CHECK(ts_session_open(&o, 1, NULL, NULL, &s, &err) == TS_OK, "%s", err.msg);
    if (!s) return;
    CHECK(ts_session_chat(s, "Hi there", &r, &err) == TS_OK, "%s", err.msg);
    const int32_t *g = ts_session_tokens(s, &n);
    int32_t greedy[8];
    memcpy(greedy, g, sizeof(int32_t) * (size_t)(n < 8 ? n : 8));
    for (int i = 1; i < n && stop_at < 0; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= greedy[j] == greedy[i];
        if (!seen) stop_at = i;
    }
    ts_session_close(s);
    CHECK(stop_at > 0, "the greedy reply repeats one token: no EOS candidate");
    if (stop_at <= 0) return;
    char edir[4400];
    snprintf(edir, sizeof edir, "%s-eos", dir);
    with_eos(dir, edir, greedy[stop_at]);
    o.model_dir = edir;
    o.max_tokens = 8;
    text reply = {.len = 0};
    CHECK(ts_session_open(&o, 1, collect, &reply, &s, &err) == TS_OK, "%s", err.msg);
    if (!s) return;
    CHECK(ts_session_chat(s, "Hi there", &r, &err) == TS_OK, "%s", err.msg);
    CHECK(r.stop == TS_GEN_STOP_EOS && r.n_gen == stop_at, "turn 1: stop %d after %d tokens, expected EOS after %d",
          (int)r.stop, r.n_gen, stop_at);
    int n1 = r.n_prompt;
    /* The text the cache holds after turn 1: its prompt and the kept reply tokens. */
    ts_chat_msg m1[1] = {{"user", "Hi there"}};
    char *p1 = NULL, *p2 = NULL, *kept = NULL;
    size_t l1, l2, lk;
    const int32_t *t1 = ts_session_tokens(s, &n);
    CHECK(ts_chat_render(ts_session_template(s), m1, 1, 1, o.enable_thinking, &p1, &l1, &err) == TS_OK, "%s", err.msg);
    CHECK(ts_tok_decode(ts_session_tok(s), t1, n, 0, &kept, &lk, &err) == TS_OK, "%s", err.msg);
    char reply1[4096];
    snprintf(reply1, sizeof reply1, "%s", reply.buf);
    CHECK(ts_session_chat(s, "And now?", &r, &err) == TS_OK, "turn 2: %s", err.msg);
    CHECK(ts_session_reused(s), "turn 2 did not reuse the cache: the EOS path was not exercised");
    ts_chat_msg m2[3] = {{"user", "Hi there"}, {"assistant", reply1}, {"user", "And now?"}};
    CHECK(ts_chat_render(ts_session_template(s), m2, 3, 1, o.enable_thinking, &p2, &l2, &err) == TS_OK, "%s", err.msg);
    int32_t *ids = NULL;
    int nid = -1;
    if (p1 && p2 && kept && l1 + lk <= l2 && !memcmp(p2, p1, l1) && !memcmp(p2 + l1, kept, lk))
        CHECK(ts_tok_encode(ts_session_tok(s), p2 + l1 + lk, l2 - l1 - lk, 0, &ids, &nid, &err) == TS_OK, "%s", err.msg);
    else
        CHECK(0, "turn 2's rendering does not start with turn 1's prompt and reply");
    CHECK(r.n_prompt == nid, "turn 2 prefilled %d tokens, its new text is %d (turn 1 prefilled %d)", r.n_prompt, nid, n1);
    free(p1), free(p2), free(kept), free(ids);
    ts_session_close(s);
}

int main(void) {
    char tokp[4096], dir[4200];
    snprintf(tokp, sizeof tokp, "%s", th_shared("tokenizers/qwen3"));
    snprintf(dir, sizeof dir, "%s/m", th_tmpdir("session"));
    ts_error err;
    ts_synth_opts so = {5, 151936, 2, NULL, NULL};
    CHECK(ts_synth_write("qwen3-0.6b-tiny", dir, &so, &err) == TS_OK, "%s", err.msg);
    ts_session_opts o;
    ts_session_opts_default(&o);
    o.model_dir = dir;
    o.tokenizer = tokp;
    o.n_ctx = 96;
    o.n_threads = 2;
    o.max_tokens = 4;
    o.sample.temp = 0;
    ts_session *s = NULL;
    CHECK(ts_session_open(&o, 1, NULL, NULL, &s, &err) == TS_OK, "%s", err.msg);
    if (!s) return th_finish("test_session");
    ts_gen_result r;
    CHECK(ts_session_chat(s, "Hi there", &r, &err) == TS_OK, "%s", err.msg);
    CHECK(ts_session_n_messages(s) == 2, "after one turn: %d messages", ts_session_n_messages(s));
    char big[4000] = "";
    for (int i = 0; i < 150; i++) strcat(big, "word ");
    ts_status fs = ts_session_chat(s, big, &r, &err);
    CHECK(fs != TS_OK, "a turn longer than the context succeeded");
    CHECK(ts_session_n_messages(s) == 2, "the failed turn stayed in the conversation: %d messages",
          ts_session_n_messages(s));
    CHECK(ts_session_chat(s, "And now?", &r, &err) == TS_OK, "turn after a failure: %s", err.msg);
    CHECK(ts_session_n_messages(s) == 4, "after the next turn: %d messages", ts_session_n_messages(s));
    ts_session_close(s);
    check_eos_turn(dir, o);
    return th_finish("test_session");
}
