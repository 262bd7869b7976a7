/* Tool calls in a model's reply, in the formats the chat templates teach their models, parsed
 * back into OpenAI's message.tool_calls: Hermes / Qwen2.5 / Qwen3 (<tool_call> blocks),
 * Llama 3.x (the whole reply one JSON object) and Mistral ([TOOL_CALLS] and a JSON list). Pure
 * functions of the text (tests/test_toolcall.c); nothing is guessed from a call that does not
 * parse: it stays in the content. */
#ifndef TS_SERVE_TOOLCALL_H
#define TS_SERVE_TOOLCALL_H
#include <jansson.h>
#include <stddef.h>

#include "runtime/chat_template.h"

typedef enum ts_toolcall_format {
    TS_TOOLCALL_NONE = 0, /* the template renders no tools (or in a format not parsed here) */
    TS_TOOLCALL_HERMES,   /* <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>, any number, text around them */
    TS_TOOLCALL_LLAMA3,   /* the whole reply {"name": N, "parameters": {...}} (<|python_tag|> before it) */
    TS_TOOLCALL_MISTRAL,  /* [TOOL_CALLS][{"name": N, "arguments": {...}}, ...] */
} ts_toolcall_format;

const char *ts_toolcall_format_name(ts_toolcall_format f);
/* The format a chat template teaches, from its text (NULL: none). */
ts_toolcall_format ts_toolcall_format_of(const char *template_text);

typedef struct ts_toolcall {
    char *name;      /* malloc'd */
    char *arguments; /* a JSON text: the object the model wrote, compact; or the string it wrote */
} ts_toolcall;

typedef struct ts_toolcalls {
    ts_toolcall *call; /* n of them (malloc'd) */
    int n;
    char *content; /* the reply without its calls (malloc'd, NUL-terminated) */
    size_t content_len;
    int content_blank; /* content is empty or only white space: OpenAI's "content": null */
} ts_toolcalls;

/* Parses a whole reply: every call in the format f (and, whatever f, a reply that is nothing but
 * one {"name", "arguments"|"parameters"} object). A call whose JSON does not parse, or lacks a
 * name, stays in the content as it was written. Returns 0, or -1 when out of memory (out is
 * then empty). */
int ts_toolcall_parse(ts_toolcall_format f, const char *text, size_t len, ts_toolcalls *out);
void ts_toolcalls_free(ts_toolcalls *t);

/* Streaming: how many bytes at the start of text (the reply so far) can go out as content now.
 * The rest could become a call and is held back until the reply is complete: from a
 * "<tool_call>" (or a suffix that could start one) on; everything when the reply starts (after
 * white space) with "{" or "[" (a whole-reply call); nothing goes out while it is only white
 * space. Never decreases as text grows. */
size_t ts_toolcall_safe(ts_toolcall_format f, const char *text, size_t len);

/* The id of call i of a response: "call_" and 24 letters and digits drawn from seed; Mistral's
 * template wants exactly 9 letters and digits, so with f Mistral that is all it is. */
void ts_toolcall_id(ts_toolcall_format f, const char *seed, int i, char *out, size_t n);

/* OpenAI's tool_calls list for calls[0..n): [{"id", "type": "function", "function": {"name",
 * "arguments"}}]; with_index: each with its "index" (a stream chunk's delta). NULL: out of memory. */
json_t *ts_toolcall_json(const ts_toolcalls *t, int first, int n, ts_toolcall_format f, const char *seed,
                         int with_index);

/* How a template wants the assistant turns with tool calls that a client sends back (OpenAI's
 * clients send "content": null and "arguments" as a JSON string), found by rendering a probe
 * conversation: */
typedef struct ts_toolcall_caps {
    /* the arguments as an object: Qwen2.5, Llama 3.x and Mistral apply tojson to them, which
     * would encode the string twice (DeepSeek's concatenates them as a string: kept) */
    int object_args;
    /* content "" rather than null: Qwen3's template tests '</think>' in message.content */
    int empty_content;
} ts_toolcall_caps;
void ts_toolcall_caps_of(const ts_chat_template *t, ts_toolcall_caps *out);
/* messages with each assistant turn that has tool_calls changed as caps say (a new reference;
 * the input is not modified). NULL: out of memory. */
json_t *ts_toolcall_fix_messages(const json_t *messages, const ts_toolcall_caps *caps);

#endif
