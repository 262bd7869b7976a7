/* Fuzz target: template bytes through the Jinja interpreter (parse, then render against a
 * conversation with tools, tool calls and reasoning, as a chat template sees it), under small
 * step and memory budgets so a hostile template must end in an error, never a hang or a
 * crash. A failure must leave a message; a success a NUL-terminated text of the stated length. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/jinja/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char k_vars[] =
    "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"add_generation_prompt\": true,"
    " \"enable_thinking\": false, \"documents\": null,"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    "   \"description\": \"Weather \\\"now\\\"\", \"parameters\": {\"type\": \"object\","
    "   \"properties\": {\"city\": {\"type\": \"string\", \"enum\": [\"Paris\", \"東京\"]},"
    "   \"days\": {\"type\": [\"integer\", \"null\"], \"minimum\": 0.5}}, \"required\": [\"city\"]}}}],"
    " \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    "  {\"role\": \"user\", \"content\": \"  Hi \\u00e9\\ud83d\\ude00\\n\"},"
    "  {\"role\": \"assistant\", \"content\": \"<think>x</think>ok\", \"reasoning_content\": \"x\","
    "   \"tool_calls\": [{\"id\": \"abcdefghi\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    "   \"arguments\": {\"city\": \"Paris\", \"days\": 2}}}]},"
    "  {\"role\": \"tool\", \"content\": \"{\\\"t\\\": 21.5}\", \"tool_call_id\": \"abcdefghi\"},"
    "  {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"and now?\"}]}]}";

static json_t *g_vars;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_vars) {
        json_error_t je;
        g_vars = json_loads(k_vars, 0, &je);
        if (!g_vars) abort();
    }
    ts_jinja *t = NULL;
    ts_error err;
    err.msg[0] = 0;
    if (ts_jinja_parse((const char *)data, size, "fuzz.jinja", &t, &err) != TS_OK) {
        if (!err.msg[0] || t) abort();
        return 0;
    }
    ts_jinja_limits lim = {200000, (size_t)16 << 20, 40};
    char *out = NULL;
    size_t len = 0;
    err.msg[0] = 0;
    ts_status st = ts_jinja_render(t, g_vars, 1773480413, &lim, &out, &len, &err);
    if (st != TS_OK) {
        if (!err.msg[0] || out) abort();
    } else {
        if (!out || out[len] != 0) abort();
    }
    free(out);
    ts_jinja_free(t);
    return 0;
}
