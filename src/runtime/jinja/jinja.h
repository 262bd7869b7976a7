/* A Jinja interpreter for chat templates: the subset Hugging Face chat templates use, with the
 * semantics of jinja2 as transformers configures it (ImmutableSandboxedEnvironment,
 * trim_blocks, lstrip_blocks, loopcontrols, the {% generation %} tag; globals raise_exception,
 * strftime_now, namespace, dict; a tojson filter that keeps non-ASCII text). A template is
 * parsed once and rendered many times; every render runs under a step and a memory budget so a
 * hostile template fails with a message instead of hanging or exhausting the machine. */
#ifndef TS_RUNTIME_JINJA_H
#define TS_RUNTIME_JINJA_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"

typedef struct ts_jinja ts_jinja;

typedef struct ts_jinja_limits {
    uint64_t max_steps; /* evaluation steps (nodes, loop iterations, builtin work); 0 = default */
    size_t max_bytes;   /* memory for values plus output; 0 = default */
    int max_depth;      /* nesting of macro calls and expressions; 0 = default */
} ts_jinja_limits;

#define TS_JINJA_DEFAULT_STEPS 20000000ull
#define TS_JINJA_DEFAULT_BYTES ((size_t)256 << 20)
#define TS_JINJA_DEFAULT_DEPTH 200

/* src: the template text (len bytes, may hold any byte but must be valid UTF-8); what names it
 * in error messages ("tokenizer_config.json chat_template"). Syntax errors are TS_ERR_FORMAT and
 * name what:line:column. */
ts_status ts_jinja_parse(const char *src, size_t len, const char *what, ts_jinja **out, ts_error *err);
void ts_jinja_free(ts_jinja *t);

/* vars: a JSON object whose members become the template's globals (messages, tools,
 * add_generation_prompt, bos_token, ...); a member absent is undefined in the template, a JSON
 * null is none. now: the time strftime_now formats (seconds since the epoch, taken as UTC).
 * lim may be NULL (defaults). *out: malloc'd, NUL-terminated, *len bytes. Failures:
 * raise_exception in the template is TS_ERR_ARG carrying the template's own message (the
 * conversation is one this template refuses); a step, memory or depth budget exceeded is
 * TS_ERR_UNSUPPORTED; any other runtime error (a type error, an undefined value used) is
 * TS_ERR_FORMAT. Every message names what:line:column. */
ts_status ts_jinja_render(const ts_jinja *t, const json_t *vars, int64_t now, const ts_jinja_limits *lim,
                          char **out, size_t *len, ts_error *err);

#endif
