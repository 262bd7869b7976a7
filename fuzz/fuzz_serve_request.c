/* Fuzz target: request bodies of `tessera serve` through ts_api_parse (chat and completion
 * alike: malformed JSON, wrong types, huge or negative numbers, odd stop lists), then, when a
 * body is accepted, every response builder over the text it carries. A refusal must be a 400
 * with a message and an error body that is valid JSON; an accepted request must have its
 * required fields; no input may crash, leak or produce invalid JSON. The input is also a model's
 * reply to the tool-call parser in every format: the content it leaves is at most the reply,
 * the streaming hold-back within it, and the calls' JSON valid. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/api.h"
#include "serve/toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_json(char *s) {
    if (!s) abort();
    json_error_t je;
    json_t *j = json_loads(s, JSON_ALLOW_NUL, &je);
    if (!j) abort(); /* a builder wrote invalid JSON */
    json_decref(j);
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ts_sample_opts def;
    ts_sample_opts_default(&def);
    for (int k = 0; k < 2; k++) {
        ts_api_kind kind = k ? TS_API_COMPLETION : TS_API_CHAT;
        ts_api_request r;
        ts_api_error e;
        memset(&e, 0, sizeof e);
        if (ts_api_parse(kind, (const char *)data, size, &def, 4096, &r, &e)) {
            if (e.status != 400 || !e.message[0] || r.root) abort();
            check_json(ts_api_error_json(&e));
            continue;
        }
        if (kind == TS_API_CHAT && (!r.messages || !json_is_array(r.messages))) abort();
        if (kind == TS_API_COMPLETION && !r.prompt) abort();
        if (r.n_stop < 0 || r.n_stop > TS_API_MAX_STOP || r.max_tokens < -1 || r.max_tokens > 4096 || (r.max_tokens == 0 && !r.echo)) abort();
        for (int i = 0; i < r.n_stop; i++)
            if (!r.stop[i] || !r.stop[i][0]) abort();
        /* the builders over text that may hold any bytes (a prompt, a stop string) */
        const char *text = r.prompt ? r.prompt : r.n_stop ? r.stop[0] : "";
        size_t len = strlen(text);
        ts_api_meta m = {kind, "id-1", r.model ? r.model : "m", 1};
        ts_api_usage u = {(int)len, 3, 1};
        check_json(ts_api_response_json(&m, text, len, ts_api_finish_reason(r.stream), &u, NULL));
        check_json(ts_api_chunk_json(&m, text, len, 1, NULL, NULL, r.include_usage, NULL));
        check_json(ts_api_chunk_json(&m, "", 0, 0, "stop", NULL, 1, NULL));
        check_json(ts_api_chunk_json(&m, NULL, 0, 0, NULL, &u, 1, NULL));
        /* raw bytes of the input as generated text (invalid UTF-8 must be repaired, not sent) */
        check_json(ts_api_chunk_json(&m, (const char *)data, size < 256 ? size : 256, 0, NULL, NULL, 0, NULL));
        ts_api_request_free(&r);
    }
    for (int f = TS_TOOLCALL_NONE; f <= TS_TOOLCALL_MISTRAL; f++) {
        ts_toolcalls t;
        if (ts_toolcall_parse((ts_toolcall_format)f, (const char *)data, size, &t)) continue; /* out of memory */
        if (t.content_len > size || !t.content || ts_toolcall_safe((ts_toolcall_format)f, (const char *)data, size) > size)
            abort();
        json_t *calls = ts_toolcall_json(&t, 0, t.n, (ts_toolcall_format)f, "seed", f & 1);
        if (!calls || (int)json_array_size(calls) != t.n) abort();
        ts_api_meta m = {TS_API_CHAT, "id-1", "m", 1};
        ts_api_usage u = {1, 1, 0};
        ts_api_extra x = {NULL, calls, t.content_blank};
        check_json(ts_api_response_json(&m, t.content, t.content_len, "tool_calls", &u, &x));
        check_json(ts_api_chunk_json(&m, "", 0, 0, NULL, NULL, 0, &x));
        json_decref(calls);
        ts_toolcalls_free(&t);
    }
    return 0;
}
