/* The chat session on a synth Qwen3-shaped model with the real Qwen3 tokenizer: a turn that
 * fails (the conversation outgrows the context) leaves the conversation as it was, and the
 * next turn works and reuses nothing stale. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/session.h"
#include "tharness.h"

int main(void) {
    const char *shared = getenv("TS_SHARED");
    char tokp[4096], dir[4200];
    snprintf(tokp, sizeof tokp, "%s/tokenizers/qwen3", shared ? shared : "../shared");
    struct stat st;
    if (stat(tokp, &st) != 0) {
        printf("no %s: skipped\n", tokp);
        return th_finish("test_session");
    }
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
    return th_finish("test_session");
}
