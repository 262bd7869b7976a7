/* tessera template MODEL|FILE --messages FILE.json [--tools FILE.json] [--add-generation-prompt]
 *                  [--date YYYY-MM-DD] [--var key=value]... [--chat-template FILE]
 * Prints exactly the text a model's chat template makes of a conversation (what `chat` feeds
 * the model, what transformers' apply_chat_template(..., tokenize=False) returns), with no
 * newline added. The template is found as run/chat find it (runtime/chat_template.h). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/error.h"
#include "io/json.h"
#include "io/mmap.h"
#include "runtime/chat_template.h"

static const char *k_usage = "tessera template MODEL|FILE --messages FILE.json [--tools FILE.json] [--add-generation-prompt]\n"
                             "       [--date YYYY-MM-DD] [--var key=value]... [--chat-template FILE]";

#define MAX_INPUT ((size_t)256 << 20)

/* A JSON file, or stdin for "-"; errors name the file, line and column. */
static ts_status load_json(const char *path, json_t **out, ts_error *err) {
    if (strcmp(path, "-")) return ts_json_load_file(path, MAX_INPUT, out, err);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, stdin);
        n += r;
        if (r == 0) break;
        if (n == cap) {
            char *p = n < MAX_INPUT ? realloc(buf, cap *= 2) : NULL;
            if (!p) {
                free(buf);
                return ts_fail(err, TS_ERR_NOMEM, "stdin: more than %zu MiB of messages", MAX_INPUT >> 20);
            }
            buf = p;
        }
    }
    if (!buf) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    if (ferror(stdin)) {
        free(buf);
        return ts_fail(err, TS_ERR_IO, "stdin: read failed");
    }
    ts_status st = ts_json_parse(buf, n, "stdin", out, err);
    free(buf);
    return st;
}

/* The messages file: a list of message objects, or {"messages": [...], "tools": [...]}. */
static ts_status read_messages(const char *path, json_t **messages, json_t **tools, ts_error *err) {
    json_t *root;
    ts_status st = load_json(path, &root, err);
    if (st) return st;
    const char *name = strcmp(path, "-") ? path : "stdin";
    json_t *ms = root, *tl = NULL;
    if (json_is_object(root)) {
        ms = json_object_get(root, "messages");
        tl = json_object_get(root, "tools");
        if (!ms) {
            json_decref(root);
            return ts_fail(err, TS_ERR_FORMAT, "%s: an object without \"messages\", expected a list of messages "
                           "or {\"messages\": [...], \"tools\": [...]}", name);
        }
        if (tl && !json_is_null(tl) && !json_is_array(tl)) {
            st = ts_fail(err, TS_ERR_FORMAT, "%s: \"tools\" is %s, expected a list of tool definitions", name,
                         ts_json_type_name(tl));
            json_decref(root);
            return st;
        }
    }
    if (!json_is_array(ms)) {
        st = ts_fail(err, TS_ERR_FORMAT, "%s: %s is %s, expected a list of messages ([{\"role\": \"user\", "
                     "\"content\": \"...\"}, ...])", name, ms == root ? "the document" : "\"messages\"",
                     ts_json_type_name(ms));
        json_decref(root);
        return st;
    }
    size_t i;
    json_t *m;
    json_array_foreach(ms, i, m) {
        if (!json_is_object(m)) {
            st = ts_fail(err, TS_ERR_FORMAT, "%s: message %zu is %s, expected an object {\"role\": ..., "
                         "\"content\": ...}", name, i, ts_json_type_name(m));
            json_decref(root);
            return st;
        }
    }
    *messages = json_incref(ms);
    *tools = tl && json_is_array(tl) ? json_incref(tl) : NULL;
    json_decref(root);
    return TS_OK;
}

/* key=value: the value as JSON when it parses as JSON (true, 3, "x", {...}), else as text. */
static ts_status add_var(json_t *vars, const char *kv, ts_error *err) {
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv) return ts_fail(err, TS_ERR_ARG, "--var expects key=value, got \"%s\"", kv);
    char *key = strndup(kv, (size_t)(eq - kv));
    if (!key) return ts_fail(err, TS_ERR_NOMEM, "out of memory");
    json_error_t je;
    json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, &je);
    if (!v) v = json_string(eq + 1);
    ts_status st = TS_OK;
    if (!v) st = ts_fail(err, TS_ERR_ARG, "--var %s: the value is not valid UTF-8", key);
    else if (json_object_set_new(vars, key, v)) st = ts_fail(err, TS_ERR_ARG, "--var: key \"%s\" is not valid UTF-8", key);
    free(key);
    return st;
}

int cmd_template(int argc, char **argv) {
    const char *path = NULL, *msgs_path = NULL, *tools_path = NULL, *override = NULL;
    int gen = 0;
    int64_t now = -1;
    ts_error err;
    json_t *vars = json_object();
    if (!vars) return cli_exit_code(TS_ERR_NOMEM);
    int rc = -1;
    if (cli_date_from_env(&now, &err)) rc = cli_usage("template", k_usage, err.msg);
    for (int i = 1; rc < 0 && i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: %s\n\n"
                   "Prints the text MODEL's chat template makes of a conversation, exactly (no newline\n"
                   "added): what `tessera chat` feeds the model, and what transformers'\n"
                   "apply_chat_template(messages, tools=..., add_generation_prompt=..., tokenize=False)\n"
                   "returns.\n"
                   "  MODEL|FILE               a directory with tokenizer_config.json (or chat_template.jinja),\n"
                   "                           a tokenizer_config.json, a .gguf (tokenizer.chat_template) or a\n"
                   "                           .jinja template file\n"
                   "  --messages FILE.json     an OpenAI-style list of messages, or {\"messages\": [...],\n"
                   "                           \"tools\": [...]}; - reads stdin\n"
                   "  --tools FILE.json        a list of tool definitions (JSON schemas)\n"
                   "  --add-generation-prompt  end with the header of the assistant's reply\n"
                   "  --date YYYY-MM-DD        the date strftime_now() sees (default: TESSERA_DATE, else today)\n"
                   "  --var key=value          a template variable (enable_thinking=false, date_string=...);\n"
                   "                           the value is JSON when it parses as JSON, else text; repeatable\n"
                   "  --chat-template FILE     a .jinja template used instead of MODEL's own\n",
                   k_usage);
            rc = 0;
        } else if (!strcmp(a, "--add-generation-prompt")) {
            gen = 1;
        } else if (!strcmp(a, "--messages") && has_value) {
            msgs_path = argv[++i];
        } else if (!strcmp(a, "--tools") && has_value) {
            tools_path = argv[++i];
        } else if (!strcmp(a, "--chat-template") && has_value) {
            override = argv[++i];
        } else if (!strcmp(a, "--date") && has_value) {
            if ((now = ts_chat_parse_date(argv[++i], "--date", &err)) < 0) rc = cli_usage("template", k_usage, err.msg);
        } else if (!strcmp(a, "--var") && has_value) {
            ts_status st = add_var(vars, argv[++i], &err);
            if (st) rc = st == TS_ERR_ARG ? cli_usage("template", k_usage, err.msg) : cli_fail("template", st, &err);
        } else if (a[0] == '-' && a[1]) {
            char msg[300];
            snprintf(msg, sizeof msg, "unexpected argument \"%s\"%s", a,
                     !has_value && (!strcmp(a, "--messages") || !strcmp(a, "--tools") || !strcmp(a, "--date") ||
                                    !strcmp(a, "--var") || !strcmp(a, "--chat-template"))
                         ? " (it expects a value)"
                         : "");
            rc = cli_usage("template", k_usage, msg);
        } else if (path) {
            rc = cli_usage("template", k_usage, "expects one MODEL or template FILE");
        } else {
            path = a;
        }
    }
    if (rc >= 0) {
        json_decref(vars);
        return rc;
    }
    if (!path || !msgs_path) {
        json_decref(vars);
        return cli_usage("template", k_usage, "expects MODEL|FILE and --messages FILE.json");
    }
    json_t *messages = NULL, *tools = NULL;
    ts_chat_template *t = NULL;
    char *out = NULL;
    size_t len = 0;
    ts_status st = read_messages(msgs_path, &messages, &tools, &err);
    if (!st && tools_path) {
        json_decref(tools);
        tools = NULL;
        st = load_json(tools_path, &tools, &err);
        if (!st && !json_is_array(tools) && !json_is_null(tools))
            st = ts_fail(&err, TS_ERR_FORMAT, "%s: the document is %s, expected a list of tool definitions",
                         tools_path, ts_json_type_name(tools));
    }
    if (!st) st = ts_chat_template_open(path, override, &t, &err);
    if (!st && now >= 0) ts_chat_template_set_now(t, now);
    if (!st) st = ts_chat_render_json(t, messages, tools, vars, gen, &out, &len, &err);
    if (!st && (fwrite(out, 1, len, stdout) != len || fflush(stdout)))
        st = ts_fail(&err, TS_ERR_IO, "stdout: write failed");
    free(out);
    ts_chat_template_free(t);
    json_decref(messages);
    json_decref(tools);
    json_decref(vars);
    return st ? cli_fail("template", st, &err) : 0;
}
