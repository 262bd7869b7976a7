/* Chat templates: the model's own Jinja chat template (tokenizer_config.json's chat_template, a
 * chat_template.jinja beside it, a GGUF's tokenizer.chat_template, or a file the user names)
 * run by the Jinja interpreter (runtime/jinja/) exactly as transformers' apply_chat_template
 * runs it: messages normalized the same way (null fields dropped, reasoning aliased), the
 * tokenizer's special tokens and the caller's variables passed as globals. Parsed once per
 * template; every render is bounded in time and memory. */
#ifndef TS_RUNTIME_CHAT_TEMPLATE_H
#define TS_RUNTIME_CHAT_TEMPLATE_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"
#include "tok/tokenizer.h"

typedef struct ts_chat_msg {
    const char *role; /* "system", "user", "assistant", "tool", ... */
    const char *content;
} ts_chat_msg;

typedef struct ts_chat_template ts_chat_template;

/* path: a tokenizer_config.json ("chat_template": a string, or a list of {name, template}
 * where "default" is used), else a chat_template.jinja in the same directory. Special tokens
 * (bos/eos/unk/pad, strings or {"content": ...}) come from the same file. tok (may be NULL)
 * decides the fallback when there is no template at all: ChatML when the vocabulary has
 * <|im_start|> (said on stderr), else TS_ERR_UNSUPPORTED naming the file. A missing file is
 * TS_ERR_IO; a template that does not parse is TS_ERR_FORMAT naming file:line:column. */
ts_status ts_chat_template_load(const char *path, const ts_tok *tok, ts_chat_template **out, ts_error *err);
/* From the template text itself (NULL: the ChatML fallback when has_im_start, else an error);
 * bos/eos token text may be NULL (then undefined in the template, as for Qwen's missing bos).
 * what names the source in messages. */
ts_status ts_chat_template_new(const char *tmpl, const char *bos, const char *eos, int has_im_start,
                               const char *what, ts_chat_template **out, ts_error *err);
/* A .jinja file given with --chat-template, with the special tokens of tok (may be NULL). */
ts_status ts_chat_template_file(const char *path, const ts_tok *tok, ts_chat_template **out, ts_error *err);
/* tokenizer_config.json at config (the special tokens; it may be missing) with the template
 * of jinja (a --chat-template file) when non-NULL, else found as ts_chat_template_load does. */
ts_status ts_chat_template_load_with(const char *config, const char *jinja, const ts_tok *tok,
                                     ts_chat_template **out, ts_error *err);
/* A GGUF's tokenizer.chat_template with the bos/eos spellings of its tokenizer tok (ChatML when
 * it has none and tok has <|im_start|>). */
struct ts_gguf;
ts_status ts_chat_template_gguf(const struct ts_gguf *g, const ts_tok *tok, ts_chat_template **out, ts_error *err);
/* What `tessera template MODEL|FILE` reads: a directory with tokenizer_config.json (or
 * chat_template.jinja; its tokenizer.json decides the ChatML fallback), a tokenizer_config.json,
 * a .gguf or a .jinja file; override (may be NULL) is a .jinja file that replaces the
 * template, keeping the special tokens of path. */
ts_status ts_chat_template_open(const char *path, const char *override, ts_chat_template **out, ts_error *err);
void ts_chat_template_free(ts_chat_template *t);

/* Where the template came from ("tokenizer_config.json chat_template", "ChatML fallback"...). */
const char *ts_chat_template_source(const ts_chat_template *t);
/* The template text as parsed. */
const char *ts_chat_template_text(const ts_chat_template *t);
/* The token text that closes an assistant turn, for stopping generation: the first of the
 * known end-of-turn markers the template writes (<|eot_id|>, <|im_end|>, <end_of_turn>,
 * <|end|>, ...), else the eos token; NULL when neither is known. */
const char *ts_chat_template_end_of_turn(const ts_chat_template *t);

/* The date strftime_now() sees: seconds since the epoch, formatted as UTC. Default: the local
 * time at each render, as transformers' datetime.now(). */
void ts_chat_template_set_now(ts_chat_template *t, int64_t now);
/* "YYYY-MM-DD" (a date alone is that day's midnight) or "YYYY-MM-DDTHH:MM:SS" -> seconds since
 * the epoch; -1 with err naming the text and the expected form. */
int64_t ts_chat_parse_date(const char *text, const char *what, ts_error *err);

/* Renders a conversation. messages: a JSON array of OpenAI-style message objects (content may
 * be a string, a list of parts, or absent; tool_calls, reasoning_content, name, ... passed
 * through); tools: a JSON array or NULL (then none in the template); vars: a JSON object of
 * extra template variables (enable_thinking, date_string, ...; they override the special
 * tokens) or NULL. *out: malloc'd, NUL-terminated. A raise_exception in the template is
 * TS_ERR_ARG with the template's message. len may be NULL. */
ts_status ts_chat_render_json(const ts_chat_template *t, const json_t *messages, const json_t *tools,
                              const json_t *vars, int add_generation_prompt, char **out, size_t *len,
                              ts_error *err);
/* The plain case: role/content pairs. enable_thinking: -1 undefined (the template's
 * default), 0 false, 1 true. */
ts_status ts_chat_render(const ts_chat_template *t, const ts_chat_msg *msgs, int n, int add_generation_prompt,
                         int enable_thinking, char **out, size_t *len, ts_error *err);

#endif
