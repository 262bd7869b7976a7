/* Chat templates: the conversation text transformers' `apply_chat_template` produces, for the
 * template families we know (Llama-3, ChatML, Qwen2.5, Qwen3 with its thinking switch,
 * SmolLM2), recognized from distinctive markers in tokenizer_config.json's chat_template and
 * rendered by hand-written C. Not a Jinja interpreter: an unknown template falls back to plain
 * ChatML only when the tokenizer has <|im_start|>. */
#ifndef TS_RUNTIME_CHAT_TEMPLATE_H
#define TS_RUNTIME_CHAT_TEMPLATE_H
#include <stddef.h>

#include "tessera.h"
#include "tok/tokenizer.h"

typedef enum ts_chat_family {
    TS_CHAT_LLAMA3 = 0, /* <|start_header_id|>role<|end_header_id|>\n\n content|trim <|eot_id|> */
    TS_CHAT_CHATML,     /* <|im_start|>role\n content <|im_end|>\n, no default system */
    TS_CHAT_QWEN25,     /* ChatML + Qwen's default system prompt */
    TS_CHAT_QWEN3,      /* ChatML + <think> handling and enable_thinking */
    TS_CHAT_SMOLLM2,    /* ChatML + SmolLM's default system prompt */
} ts_chat_family;

typedef struct ts_chat_msg {
    const char *role; /* "system", "user", "assistant" (Qwen: also "tool") */
    const char *content;
} ts_chat_msg;

typedef struct ts_chat_template ts_chat_template;

/* path: a tokenizer_config.json. tok (may be NULL) decides the ChatML fallback for a
 * template we do not recognize or a file without one. A missing file is TS_ERR_IO. */
ts_status ts_chat_template_load(const char *path, const ts_tok *tok, ts_chat_template **out,
                                ts_error *err);
/* From the template text itself; bos/eos token text may be NULL; what names the source. */
ts_status ts_chat_template_new(const char *tmpl, const char *bos, const char *eos,
                               int has_im_start, const char *what, ts_chat_template **out,
                               ts_error *err);
void ts_chat_template_free(ts_chat_template *t);

ts_chat_family ts_chat_template_family(const ts_chat_template *t);
const char *ts_chat_family_name(ts_chat_family f);
/* The token text that closes a turn ("<|eot_id|>", "<|im_end|>"): generation stops on it. */
const char *ts_chat_template_end_of_turn(const ts_chat_template *t);

/* enable_thinking: -1 undefined (the template's default), 0 false, 1 true. *out: caller frees,
 * NUL-terminated. */
ts_status ts_chat_render(const ts_chat_template *t, const ts_chat_msg *msgs, int n,
                         int add_generation_prompt, int enable_thinking, char **out, size_t *len,
                         ts_error *err);

#endif
