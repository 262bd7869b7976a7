/* Tokenizers: byte-level BPE loaded from a Hugging Face tokenizer.json (Llama-3, Qwen2/3,
 * SmolLM2 style) and SentencePiece-style BPE built from vocabulary arrays (what a GGUF with
 * tokenizer.ggml.model = "llama" provides). One opaque handle serves both; encoding is
 * exact against HF `tokenizers` (see docs/tokenizer.md for the semantics we follow). */
#ifndef TS_TOK_TOKENIZER_H
#define TS_TOK_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"

typedef struct ts_tok ts_tok;

/* path: a tokenizer.json file, a GGUF file (detected by its magic; see ts_tok_from_gguf),
 * or a directory holding a tokenizer.json. In a directory, config.json's
 * bos/eos_token_id and tokenizer_config.json's bos/eos_token are read when the tokenizer
 * itself names none. */
ts_status ts_tok_load(const char *path, ts_tok **out, ts_error *err);
/* Same from a buffer; `what` names the source in messages. dir may be NULL. */
ts_status ts_tok_load_json(const char *buf, size_t len, const char *what, const char *dir,
                           ts_tok **out, ts_error *err);

/* From a parsed GGUF's tokenizer.ggml.* keys (io/gguf.h): model "llama" (SentencePiece
 * BPE) or "gpt2" (byte-level BPE, the same tables tokenizer.json gives, pre-tokenizer chosen
 * by tokenizer.ggml.pre). Copies what it needs: g may be closed afterwards. Other models or
 * missing keys: an error naming the file and the key (docs/tokenizer.md lists what is read). */
struct ts_gguf;
ts_status ts_tok_from_gguf(const struct ts_gguf *g, ts_tok **out, ts_error *err);

/* Appends a byte-level BPE tokenizer's GGUF metadata to w, as llama.cpp's converter lays it
 * out (tokenizer.ggml.model "gpt2", pre, tokens, token types, merges, BOS/EOS/padding ids,
 * add_bos_token, and tokenizer.chat_template from tokenizer_config.json or chat_template.jinja).
 * path: a tokenizer.json or its directory. n_vocab: the model's embedding rows (tokens are
 * padded to it with "[PADn]"; 0 = the tokenizer's size). pre: the tokenizer.ggml.pre to write,
 * or NULL to name the tokenizer.json's own pre-tokenizer family (refused, naming the file, when
 * tessera knows none that matches); *pre_used (may be NULL) gets the one written. SentencePiece
 * tokenizer.json files (byte_fallback) are refused. stop_ids (n_stop, may be NULL): the model's
 * end-of-sequence ids (config.json and generation_config.json), those other than the tokenizer's
 * EOS written as tokenizer.ggml.eom_token_id (<|eom_id|>) and eot_token_id (an end-of-turn
 * marker such as <|eot_id|>), any other id into whichever of the two is still free. */
struct ts_gguf_writer;
ts_status ts_tok_gguf_write(struct ts_gguf_writer *w, const char *path, int n_vocab, const int *stop_ids, int n_stop,
                            const char *pre, const char **pre_used, ts_error *err);

/* SentencePiece token types, numbered as in GGUF tokenizer.ggml.token_type. */
enum {
    TS_TOK_TYPE_NORMAL = 1,
    TS_TOK_TYPE_UNKNOWN = 2,
    TS_TOK_TYPE_CONTROL = 3,
    TS_TOK_TYPE_USER_DEFINED = 4,
    TS_TOK_TYPE_UNUSED = 5,
    TS_TOK_TYPE_BYTE = 6,
};

typedef struct ts_tok_spm_params {
    int n_vocab;
    const char *const *tokens; /* n_vocab UTF-8 strings, "▁" marks a space; borrowed */
    const float *scores;       /* n_vocab merge scores: higher merges first */
    const int32_t *types;      /* n_vocab TS_TOK_TYPE_*; NULL: all normal */
    int32_t bos, eos, unk;     /* -1 when absent */
    int add_space_prefix;      /* prepend "▁" to the text (SentencePiece's dummy prefix) */
    int add_bos, add_eos;      /* reported by ts_tok_add_bos/eos; encode does not read them */
} ts_tok_spm_params;

/* Copies everything it needs from p. */
ts_status ts_tok_spm_new(const ts_tok_spm_params *p, ts_tok **out, ts_error *err);

void ts_tok_free(ts_tok *t);

int ts_tok_n_vocab(const ts_tok *t);
int32_t ts_tok_bos(const ts_tok *t); /* -1 when the tokenizer has none */
int32_t ts_tok_eos(const ts_tok *t);
int32_t ts_tok_pad(const ts_tok *t); /* GGUF tokenizer.ggml.padding_token_id, else -1 */
/* Whether the model wants BOS prepended / EOS appended to a prompt: GGUF's
 * tokenizer.ggml.add_bos_token / add_eos_token (llama.cpp's defaults when absent); for a
 * tokenizer.json, add_bos is 1 when it names a BOS. ts_tok_encode adds BOS only when asked. */
int ts_tok_add_bos(const ts_tok *t);
int ts_tok_add_eos(const ts_tok *t);
/* Id of a token by its vocabulary spelling ("Ġthe", "<|im_end|>", "▁the"), or -1. */
int32_t ts_tok_token_id(const ts_tok *t, const char *s, size_t len);
/* Vocabulary spelling of id (borrowed, not NUL-terminated in general: use *len), or NULL. */
const char *ts_tok_token_str(const ts_tok *t, int32_t id, size_t *len);
/* The bytes id decodes to (byte-level map or "▁" undone), borrowed, or NULL. */
const char *ts_tok_token_bytes(const ts_tok *t, int32_t id, size_t *len);
int ts_tok_is_special(const ts_tok *t, int32_t id);

/* Encodes len bytes of UTF-8 text (invalid UTF-8 is refused with TS_ERR_ARG). Special and
 * added tokens written in the text are recognized, as HF does by default. *ids: caller frees.
 * Safe to call from several threads on one tokenizer. */
ts_status ts_tok_encode(const ts_tok *t, const char *text, size_t len, int add_bos, int32_t **ids,
                        int *n, ts_error *err);
/* Concatenated bytes of the tokens (skip_special drops special tokens), NUL-terminated;
 * caller frees *out. Bytes are returned as they are: a cut character is not replaced. */
ts_status ts_tok_decode(const ts_tok *t, const int32_t *ids, int n, int skip_special, char **out,
                        size_t *out_len, ts_error *err);

/* Streaming decoder: feed ids one by one, get back only complete UTF-8 characters. Bytes
 * that can never form a character become U+FFFD, as HF's lossy decode does. */
typedef struct ts_tok_stream ts_tok_stream;
ts_status ts_tok_stream_new(const ts_tok *t, int skip_special, ts_tok_stream **out, ts_error *err);
void ts_tok_stream_free(ts_tok_stream *s);
void ts_tok_stream_reset(ts_tok_stream *s);
/* Returns the text completed by this id (borrowed until the next call; may be empty). An
 * out-of-range id gives TS_ERR_ARG. */
ts_status ts_tok_stream_feed(ts_tok_stream *s, int32_t id, const char **text, size_t *len,
                             ts_error *err);
/* Ends the stream: a dangling partial character comes back as U+FFFD. */
const char *ts_tok_stream_flush(ts_tok_stream *s, size_t *len);

#endif
