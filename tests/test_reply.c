/* src/serve/reply.c: a chat reply with tools, handed over in pieces as the scheduler would,
 * becomes OpenAI's response and stream: the calls in message.tool_calls with content null (or
 * the text around them), finish_reason "tool_calls", the stream's content deltas holding back
 * what could be a call and its tool_calls deltas (index, id, type, function) at the end,
 * parallel_tool_calls false keeping the first; a reply without a call unchanged. The model's
 * text is given here, since a random-weight model never writes a call (test_serve_tools.sh
 * covers the server end to end). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "serve/reply.h"
#include "tharness.h"

typedef struct events {
    json_t *list; /* the chunks' JSON */
} events;

static void collect(void *user, char *s) {
    events *e = user;
    json_t *j = s ? json_loads(s, 0, NULL) : NULL;
    CHECK(j != NULL, "an event that is not JSON: %s", s ? s : "(null)");
    if (j) json_array_append_new(e->list, j);
    free(s);
}

/* Feeds text in pieces of `piece` bytes; returns the non-streamed body (parsed) or, streamed, the
 * chunks in e. */
static json_t *run(const char *text, int stream, int piece, int parallel, events *e) {
    ts_reply_opts o = {{TS_API_CHAT, "chatcmpl-test", "m", 1}, stream, 0, -1, NULL, 0, -1, TS_TOOLCALL_HERMES,
                       parallel};
    ts_reply *r = ts_reply_new(&o, NULL);
    e->list = json_array();
    ts_reply_begin(r, collect, e);
    size_t len = strlen(text);
    for (size_t i = 0; i < len; i += (size_t)piece) {
        size_t n = len - i < (size_t)piece ? len - i : (size_t)piece;
        CHECK(ts_reply_add(r, text + i, n, NULL, 0, collect, e) == 0, "add");
    }
    ts_api_usage u = {10, 5, 0};
    char *body = ts_reply_end(r, &u, 0, collect, e);
    ts_reply_free(r);
    json_t *j = body ? json_loads(body, 0, NULL) : NULL;
    free(body);
    return j;
}

/* The stream folded as a client does: content concatenated, tool_calls by index. */
static void fold(const json_t *chunks, char *content, size_t cap, json_t *calls, const char **finish) {
    content[0] = 0;
    *finish = NULL;
    size_t i;
    const json_t *c;
    json_array_foreach(chunks, i, c) {
        const json_t *ch = json_array_get(json_object_get(c, "choices"), 0);
        const json_t *d = json_object_get(ch, "delta"), *fr = json_object_get(ch, "finish_reason");
        if (json_is_string(fr)) *finish = json_string_value(fr);
        const json_t *t = json_object_get(d, "content");
        if (json_is_string(t) && strlen(content) + json_string_length(t) < cap) strcat(content, json_string_value(t));
        size_t k;
        const json_t *tc;
        json_array_foreach(json_object_get(d, "tool_calls"), k, tc) json_array_append(calls, (json_t *)tc);
    }
}

static void test_calls(void) {
    const char *text = "Checking both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
                       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>";
    events e;
    json_t *j = run(text, 0, 1000, 1, &e);
    const json_t *ch = json_array_get(json_object_get(j, "choices"), 0), *msg = json_object_get(ch, "message");
    const json_t *calls = json_object_get(msg, "tool_calls");
    CHECK(json_is_array(calls) && json_array_size(calls) == 2, "two calls");
    const json_t *c0 = json_array_get(calls, 0), *f0 = json_object_get(c0, "function");
    CHECK(!strcmp(json_string_value(json_object_get(f0, "name")), "get_weather") &&
              !strcmp(json_string_value(json_object_get(f0, "arguments")), "{\"city\":\"Paris\"}") &&
              !strcmp(json_string_value(json_object_get(c0, "type")), "function") &&
              !strncmp(json_string_value(json_object_get(c0, "id")), "call_", 5) && !json_object_get(c0, "index"),
          "call 0's fields");
    CHECK(!strcmp(json_string_value(json_object_get(msg, "content")), "Checking both.\n\n"), "content around the calls: %s",
          json_string_value(json_object_get(msg, "content")));
    CHECK(!strcmp(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls"), "finish_reason tool_calls");
    char *ids0 = strdup(json_string_value(json_object_get(c0, "id")));
    json_decref(j);
    json_decref(e.list);

    /* streamed, a few bytes at a time: the same content and calls, the same ids */
    for (int piece = 1; piece <= 7; piece += 3) {
        j = run(text, 1, piece, 1, &e);
        CHECK(j == NULL, "streamed: no body");
        char content[512];
        const char *finish;
        json_t *sc = json_array();
        fold(e.list, content, sizeof content, sc, &finish);
        CHECK(!strcmp(content, "Checking both.\n\n") && finish && !strcmp(finish, "tool_calls"),
              "piece %d: content \"%s\", finish %s", piece, content, finish ? finish : "(none)");
        CHECK(json_array_size(sc) == 2 && json_integer_value(json_object_get(json_array_get(sc, 1), "index")) == 1 &&
                  !strcmp(json_string_value(json_object_get(json_array_get(sc, 0), "id")), ids0) &&
                  !strcmp(json_string_value(json_object_get(json_object_get(json_array_get(sc, 1), "function"), "arguments")),
                          "{\"tz\":\"CET\"}"),
              "piece %d: tool_calls deltas", piece);
        /* no content delta carries any of a call's text */
        size_t i;
        const json_t *c;
        int leak = 0;
        json_array_foreach(e.list, i, c) {
            const json_t *t = json_object_get(json_object_get(json_array_get(json_object_get(c, "choices"), 0), "delta"), "content");
            if (json_is_string(t) && (strchr(json_string_value(t), '<') || strchr(json_string_value(t), '{'))) leak = 1;
        }
        CHECK(!leak, "piece %d: a call's text went out as content", piece);
        json_decref(sc);
        json_decref(e.list);
    }
    free(ids0);

    /* parallel_tool_calls false: the first call only */
    j = run(text, 0, 1000, 0, &e);
    calls = json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"), "tool_calls");
    CHECK(json_array_size(calls) == 1, "parallel_tool_calls false: %zu calls", json_array_size(calls));
    json_decref(j);
    json_decref(e.list);

    /* only a call: content null */
    j = run("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", 0, 1000, 1, &e);
    msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    CHECK(json_is_null(json_object_get(msg, "content")) && json_array_size(json_object_get(msg, "tool_calls")) == 1,
          "a call alone: content null");
    json_decref(j);
    json_decref(e.list);
}

static void test_no_call(void) {
    static const char *const k_texts[] = {"Plain text, with a < and a {brace}.", "  \n", "<tool_call>\n{\"name\": oops}\n</tool_call>",
                                          "{\"answer\": 42}", "Almost <tool_"};
    for (size_t k = 0; k < sizeof k_texts / sizeof k_texts[0]; k++) {
        events e;
        json_t *j = run(k_texts[k], 0, 1000, 1, &e);
        const json_t *ch = json_array_get(json_object_get(j, "choices"), 0), *msg = json_object_get(ch, "message");
        CHECK(!json_object_get(msg, "tool_calls") && !strcmp(json_string_value(json_object_get(msg, "content")), k_texts[k]) &&
                  !strcmp(json_string_value(json_object_get(ch, "finish_reason")), "stop"),
              "no call in \"%s\": the text as content", k_texts[k]);
        json_decref(j);
        json_decref(e.list);
        for (int piece = 1; piece <= 4; piece += 3) {
            run(k_texts[k], 1, piece, 1, &e);
            char content[512];
            const char *finish;
            json_t *sc = json_array();
            fold(e.list, content, sizeof content, sc, &finish);
            CHECK(!strcmp(content, k_texts[k]) && json_array_size(sc) == 0 && finish && !strcmp(finish, "stop"),
                  "streamed in pieces of %d, no call in \"%s\": \"%s\"", piece, k_texts[k], content);
            json_decref(sc);
            json_decref(e.list);
        }
    }
}

int main(void) {
    test_calls();
    test_no_call();
    return th_finish("test_reply");
}
