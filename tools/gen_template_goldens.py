#!/usr/bin/env python3
"""Golden renderings of the real chat templates by Hugging Face transformers.

Writes tests/fixtures/templates/golden.json: every template of tests/fixtures/shared/templates
(plus the Llama-3 template inside tests/fixtures/shared/tokenizers/llama3.tar.xz) rendered on a
shared list of conversations, with add_generation_prompt false and true, exactly as
`tokenizer.apply_chat_template(conversation, tools=..., add_generation_prompt=..., tokenize=False,
**kwargs)` renders them in transformers. The pipeline is transformers' own code, called the way
apply_chat_template calls it (transformers/tokenization_utils_base.py):

    chat = _normalize_chat_messages(conversation)        # message keys whose value is None dropped
    render_jinja_template(conversations=[chat], tools=tools, documents=None, chat_template=TEMPLATE,
                          return_assistant_tokens_mask=False, continue_final_message=False,
                          add_generation_prompt=AGP, **{**special_tokens_map, **kwargs})

with the model's special_tokens_map (only the tokens its tokenizer defines) and the date that
`strftime_now` sees frozen at FROZEN_NOW. A template that raises records the exception instead of
an output: {"error": msg} for raise_exception() (a bare jinja2 TemplateError), {"error_type":
"UndefinedError", "error": msg} for any other exception type.

Before writing, it checks that AutoTokenizer.apply_chat_template(tokenize=False) of the llama3 and
qwen3 tokenizers in the shared tarballs gives the same strings (and the same errors) as this
pipeline on every conversation. torch/transformers are needed only to regenerate, never by CI.

    /work/venv-hf/bin/python tools/gen_template_goldens.py
"""
import copy
import datetime as _dt
import json
import os
import sys
import tarfile
import tempfile

import jinja2
import transformers
import transformers.utils.chat_template_utils as ctu
from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "templates", "golden.json")

FROZEN_NOW = _dt.datetime(2026, 3, 14, 9, 26, 53)


class _FrozenDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FROZEN_NOW if tz is None else FROZEN_NOW.replace(tzinfo=tz)


# strftime_now (chat_template_utils) calls the module's `datetime.now()` at render time.
ctu.datetime = _FrozenDatetime

# Templates: name -> (path relative to tests/fixtures, path relative to TS_REALDATA, special tokens).
# The special tokens are those each model's tokenizer_config.json defines (a token that is null
# there, like Qwen's bos_token, is absent from special_tokens_map and so undefined in the template).
LLAMA3X = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
QWEN = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
TEMPLATES = {
    "meta-llama-Llama-3.2-3B-Instruct": LLAMA3X,
    "meta-llama-Llama-3.1-8B-Instruct": LLAMA3X,
    "Qwen-Qwen2.5-7B-Instruct": QWEN,
    "Qwen-Qwen3-0.6B": QWEN,
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": {
        "bos_token": "<｜begin▁of▁sentence｜>",
        "eos_token": "<｜end▁of▁sentence｜>",
        "pad_token": "<｜end▁of▁sentence｜>",
    },
    "google-gemma-2-2b-it": {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"},
    "microsoft-Phi-3.5-mini-instruct": {
        "bos_token": "<s>",
        "eos_token": "<|endoftext|>",
        "unk_token": "<unk>",
        "pad_token": "<|endoftext|>",
    },
    "mistralai-Mistral-Nemo-Instruct-2407": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"},
    "HuggingFaceTB-SmolLM2-1.7B-Instruct": None,  # read from tests/fixtures/chat/smollm2/tokenizer_config.json
}
SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")

# ---------------------------------------------------------------------------------------------
# Tools (OpenAI style). Numbers exercise json.dumps: 0.5, 1e-3 -> 0.001, 1e-7 -> 1e-07, 1.0, 2.5e20.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": 'Get the current weather for a location; "quoted" names and back\\slashes are kept.',
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": 'City and country, e.g. "Zürich, CH"'},
                    "unit": {
                        "type": "string",
                        "enum": ["celsius", "fahrenheit"],
                        "description": "Temperature unit",
                        "default": "celsius",
                    },
                    "days": {"type": "integer", "description": "Forecast days", "minimum": 1, "maximum": 14},
                    "include_hourly": {"type": "boolean", "description": "Include hourly data", "default": False},
                },
                "required": ["location"],
            },
            "return": {
                "type": "object",
                "description": "Temperature per day, keyed by ISO date",
                "additionalProperties": {"type": "number"},
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_documents",
            "description": "Search a document collection — returns ranked hits.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "  Free-text query  "},
                    "filters": {
                        "type": "object",
                        "description": "Optional filters",
                        "properties": {
                            "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags to match"},
                            "date_range": {
                                "type": "object",
                                "description": "Inclusive range",
                                "properties": {"from": {"type": "string"}, "to": {"type": "string"}},
                            },
                        },
                    },
                    "top_k": {"type": "integer", "description": "Number of results", "default": 5},
                    "threshold": {"type": "number", "description": "Minimum score", "default": 0.5, "minimum": 1e-3},
                    "weights": {
                        "type": "array",
                        "items": {"type": "number"},
                        "description": "Per-field weights",
                        "default": [1.0, 0.25, 1e-7, 2.5e20],
                    },
                    "mode": {"type": ["string", "integer"], "description": "Ranking mode name or id"},
                },
                "required": ["query"],
            },
        },
    },
]
CUSTOM_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_user",
        "description": "Find a user by id",
        "parameters": {
            "type": "object",
            "properties": {"user_id": {"type": "integer", "description": "Numeric id"}},
            "required": ["user_id"],
        },
    },
}

WEATHER_ARGS = {"location": "Zürich, CH", "unit": "celsius", "days": 3, "include_hourly": False}
WEATHER_CALL = {"id": "Ab3dE5gH1", "type": "function", "function": {"name": "get_weather", "arguments": WEATHER_ARGS}}
SEARCH_ARGS_STR = '{"query": "na\\u00efve \\"quoted\\" C:\\\\temp", "top_k": 3, "threshold": 0.25}'
SEARCH_CALL_STR = {
    "id": "Zx9Yw8Vu7",
    "type": "function",
    "function": {"name": "search_documents", "arguments": SEARCH_ARGS_STR},
}
SEARCH_CALL = {
    "id": "Q1w2E3r4T",
    "type": "function",
    "function": {
        "name": "search_documents",
        "arguments": {"query": "rainfall records", "filters": {"tags": ["climate", "europe"]}, "top_k": 2},
    },
}
WEATHER_RESULT = {
    "role": "tool",
    "tool_call_id": "Ab3dE5gH1",
    "name": "get_weather",
    "content": '{"temperature": 21.5, "condition": "sunny ☀"}',
}
SEARCH_RESULT = {
    "role": "tool",
    "tool_call_id": "Q1w2E3r4T",
    "name": "search_documents",
    "content": '[{"title": "Rain in Europe", "score": 0.93}]',
}

LONG = "\n\n".join(
    f"Paragraph {i}: The quick brown fox jumps over the lazy dog. "
    "Pack my box with five dozen liquor jugs. «Guillemets», “curly quotes”, and a tab\there. "
    "Ünïcödé ✓ 中文 — line ends here."
    for i in range(1, 25)
)

UNICODE = (
    "CJK: 你好，世界！日本語のテキスト。한국어 텍스트.\n"
    "Emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️\n"
    "Combining: e\u0301 vs \u00e9, n\u0303, A\u030a\n"
    "RTL: مرحبا بالعالم — שלום עולם\n"
    "Tab:\tend, CRLF:\r\nnext line, quotes: \"double\" 'single' `back`, backslashes: \\ \\\\ \\n (literal)\n"
    "Escape\x1b[0m DEL\x7f LS\u2028PS\u2029 BOM\ufeff NBSP\u00a0."
)

C = []  # the conversations, in order


def conv(cid, messages, tools=None, kwargs=None, note=None):
    c = {"id": cid}
    if note:
        c["note"] = note
    c["messages"] = messages
    if tools is not None:
        c["tools"] = tools
    if kwargs is not None:
        c["kwargs"] = kwargs
    C.append(c)


def u(text, **kw):
    return {"role": "user", "content": text, **kw}


def a(text, **kw):
    return {"role": "assistant", "content": text, **kw}


def s(text, **kw):
    return {"role": "system", "content": text, **kw}


conv("single-user", [u("Hello!")])
conv("system-user", [s("You are a concise assistant."), u("What is 2+2?")])
conv(
    "multi-turn",
    [u("Hi there."), a("Hello! How can I help?"), u("Name a prime number."), a("7."), u("And another one?")],
)
conv(
    "multi-turn-system",
    [
        s("You answer in one sentence."),
        u("What is the capital of France?"),
        a("Paris is the capital of France."),
        u("And of Italy?"),
        a("Rome is the capital of Italy."),
        u("And of Spain?"),
    ],
)
conv("ends-with-assistant", [u("Say hi."), a("Hi!")])
conv(
    "reasoning-history",
    [
        s("Think step by step."),
        u("What is 17 * 3?"),
        a("17 * 3 = 51.", reasoning_content="17 * 3 = 10 * 3 + 7 * 3 = 30 + 21 = 51."),
        u("Now double it."),
    ],
    note="reasoning_content on an assistant turn before the last user message",
)
conv(
    "reasoning-last",
    [u("Is 91 prime?"), a("No: 91 = 7 × 13.", reasoning_content="\nTry small divisors: 7 × 13 = 91.\n")],
    note="reasoning_content on the final assistant turn (after the last user message)",
)
conv(
    "think-inline-history",
    [
        u("What is 6 * 7?"),
        a("<think>\nSix sevens: 42.\n</think>\n\nThe answer is 42."),
        u("Thanks. Is it even?"),
    ],
)
conv("think-inline-last", [u("What is 6 * 7?"), a("<think>\nSix sevens: 42.\n</think>\n\nThe answer is 42.")])
conv(
    "reasoning-alias-thinking",
    [u("Pick a colour."), a("Blue.", thinking="Any colour will do; blue is common.")],
    note="'thinking' key: render_jinja_template copies it to reasoning_content",
)
conv(
    "reasoning-alias-reasoning",
    [u("Pick a number."), a("Four.", reasoning="Between one and ten; four.", reasoning_content=None)],
    note="'reasoning' key (reasoning_content None is dropped first): aliased to thinking and reasoning_content",
)
conv("thinking-enabled", [u("Give me a riddle.")], kwargs={"enable_thinking": True})
conv("thinking-disabled", [u("Give me a riddle.")], kwargs={"enable_thinking": False})
conv(
    "thinking-disabled-history",
    [u("What is 2+3?"), a("5.", reasoning_content="2 + 3 = 5."), u("And 2+4?")],
    kwargs={"enable_thinking": False},
)
conv("unicode", [s("Réponds en français, s'il te plaît. 🙏"), u(UNICODE), a("Reçu : « " + UNICODE[:40] + " »"), u("ok")])
conv("empty-content", [u(""), a(""), u("Hi")])
conv(
    "whitespace",
    [
        s("  \n  Be brief.\n\n"),
        u("\n\n  spaced out  \n"),
        a("  answer with spaces \n"),
        u("\tTabbed\t\r\n"),
    ],
    note="leading/trailing whitespace: some templates |trim, others keep it",
)
conv(
    "unicode-whitespace",
    [
        u("\u3000\u00a0\u2003 wide spaces \u2028\x1f\x85"),
        a("\ufeffBOM is not whitespace\ufeff"),
        u("\v\fvertical tab and form feed\v\u200b"),
    ],
    note="|trim is Python str.strip(): strips Unicode whitespace (U+3000, U+00A0, U+2003, U+2028, U+001F, U+0085, VT, FF) but not U+FEFF or U+200B",
)
conv("long-content", [u(LONG), a("Noted."), u("Summarise the above.")])
conv(
    "extra-keys",
    [
        s("System.", name="root"),
        u("Hi, I'm Alice.", name="alice", metadata={"lang": "en", "n": 1}),
        a("Hello Alice.", name="bot", tool_calls=None),
        u("Bye.", name="alice"),
    ],
    note="extra keys (name, metadata) are passed through; tool_calls None is dropped",
)
conv("system-mid", [u("Hi."), a("Hello."), s("Switch to formal register."), u("Good day.")])
conv("assistant-first", [a("Hello, how can I help?"), u("Tell me a joke.")])
conv("system-only", [s("You are a helpful assistant.")])
conv("consecutive-users", [u("First."), u("Second."), a("Both received.")])
# ------------------------------- tools ---------------------------------------------------------
conv("tools-user", [u("What's the weather in Zürich?")], tools=TOOLS)
conv("tools-system-user", [s("Use tools when helpful."), u("What's the weather in Zürich?")], tools=TOOLS)
conv(
    "tool-call-dict",
    [
        u("What's the weather in Zürich?"),
        a(None, tool_calls=[WEATHER_CALL]),
        WEATHER_RESULT,
        a("It is 21.5 °C and sunny in Zürich."),
        u("Thanks!"),
    ],
    tools=TOOLS,
    note="assistant content null with tool_calls (arguments a dict): normalisation drops content",
)
conv(
    "tool-call-string-args",
    [
        s("You can search documents."),
        u("Find my notes on the naïve \"quoted\" C:\\temp issue."),
        a(None, tool_calls=[SEARCH_CALL_STR]),
        {"role": "tool", "tool_call_id": "Zx9Yw8Vu7", "content": "No results for \"C:\\temp\"."},
    ],
    tools=TOOLS,
    note="tool call arguments given as a JSON string; ends with a tool result",
)
conv(
    "tool-call-multi",
    [
        u("Weather in Zürich, and any rainfall records?"),
        a(None, tool_calls=[WEATHER_CALL, SEARCH_CALL]),
        WEATHER_RESULT,
        SEARCH_RESULT,
        a("21.5 °C and sunny; one record found: Rain in Europe."),
    ],
    tools=TOOLS,
    note="two tool calls in one assistant turn, two consecutive tool messages",
)
conv(
    "tool-call-multi-mixed",
    [
        s("Use tools."),
        u("Weather in Zürich, and search my notes?"),
        a("", tool_calls=[WEATHER_CALL, SEARCH_CALL_STR]),
        WEATHER_RESULT,
        {"role": "tool", "tool_call_id": "Zx9Yw8Vu7", "content": "No results."},
        a("21.5 °C and sunny; no notes found."),
        u("Thanks!"),
    ],
    tools=TOOLS,
    note="two tool calls (dict and string arguments) with content \"\" (kept), consecutive tool messages, follow-up",
)
conv(
    "tool-call-with-content",
    [u("Weather in Zürich?"), a("Let me check that for you.", tool_calls=[WEATHER_CALL]), WEATHER_RESULT],
    tools=TOOLS,
)
conv(
    "tool-call-empty-content",
    [u("Weather in Zürich?"), a("", tool_calls=[WEATHER_CALL]), WEATHER_RESULT],
    tools=TOOLS,
)
conv(
    "tool-call-no-content-key",
    [u("Weather in Zürich?"), {"role": "assistant", "tool_calls": [WEATHER_CALL]}, WEATHER_RESULT],
    tools=TOOLS,
)
conv(
    "tool-call-escapes",
    [
        u("Search for the tricky string."),
        a(
            "",
            tool_calls=[
                {
                    "id": "k9L8m7N6o",
                    "type": "function",
                    "function": {
                        "name": "search_documents",
                        "arguments": {
                            "query": 'naïve "café" \\ path\\to\nnext\tcol 日本語 🎉 \x1b[1m </tool_call> \u2028',
                            "filters": {"tags": ['a"b', "ü", "back\\slash"], "date_range": {"from": "2024-01-01"}},
                            "weights": [0.5, 1e-3, 2.0, 1e-7, 2.5e20, -0.0, 100],
                            "top_k": 10,
                            "threshold": 1e-3,
                            "exact": True,
                            "fuzzy": False,
                            "mode": None,
                            "empty": {},
                            "nothing": [],
                        },
                    },
                }
            ],
        ),
        {
            "role": "tool",
            "tool_call_id": "k9L8m7N6o",
            "content": 'Result: "ok" \\ done\n\t— ✓ 中文',
        },
    ],
    tools=TOOLS,
    note="content \"\" with tool_calls; tojson escaping: quotes, backslashes, control characters, non-ASCII, floats, null/true/false, empty containers",
)
conv(
    "tool-result-dict",
    [u("Weather in Zürich?"), a(None, tool_calls=[WEATHER_CALL]), {"role": "tool", "tool_call_id": "Ab3dE5gH1",
                                                                    "content": {"temperature": 21.5, "ok": True, "tags": ["a", "b"], "none": None}}],
    tools=TOOLS,
    note="tool content a mapping: templates that print it show Python's str() of the dict (repr), some tojson it",
)
conv("tools-empty-list", [u("Hello with no tools.")], tools=[], note="tools=[] (not None)")
conv(
    "tools-system-only",
    [s("You are a helpful assistant.")],
    tools=TOOLS,
    note="Llama 3.x with tools in the user message needs a first user message",
)
conv(
    "tools-repeated-user",
    [u("Hi"), a("Hello!"), u("Hi")],
    tools=TOOLS,
    note="Mistral puts [AVAILABLE_TOOLS] before every user message equal (==) to the last one",
)
conv(
    "tool-call-bad-id",
    [
        u("Weather in Zürich?"),
        a(None, tool_calls=[{"id": "call_abc123456", "type": "function",
                             "function": {"name": "get_weather", "arguments": {"location": "Zürich"}}}]),
        {"role": "tool", "tool_call_id": "call_abc123456", "content": "21.5"},
    ],
    tools=TOOLS,
    note="tool call id not 9 characters (Mistral raises)",
)
conv(
    "multi-step-tools",
    [
        s("Use tools."),
        u("Plan a picnic in Zürich."),
        a("", reasoning_content="Need the weather first.", tool_calls=[WEATHER_CALL]),
        WEATHER_RESULT,
        a("", reasoning_content="Sunny. Check rainfall records too.", tool_calls=[SEARCH_CALL]),
        SEARCH_RESULT,
        u("<tool_response>\nextra context from a tool\n</tool_response>"),
        a("Go ahead: 21.5 °C and sunny.", reasoning_content="All data in."),
    ],
    tools=TOOLS,
    note="Qwen3 last_query_index: reasoning kept after the last real user query; a user message wrapped in <tool_response> does not count",
)
conv(
    "llama-date-string",
    [s("Be precise."), u("What is today's date?")],
    kwargs={"date_string": "01 Jan 2025"},
)
conv(
    "llama-tools-in-system",
    [s("Use tools."), u("Weather in Zürich?"), a(None, tool_calls=[WEATHER_CALL]), WEATHER_RESULT],
    tools=TOOLS,
    kwargs={"tools_in_user_message": False},
)
conv(
    "llama-custom-tools",
    [u("Who is user 42?")],
    kwargs={"custom_tools": [CUSTOM_TOOL]},
    note="custom_tools keyword (Llama 3.x replaces tools with it); no tools argument",
)
conv(
    "llama-builtin-tools",
    [
        s("You can search the web."),
        u("Who won the 2022 World Cup?"),
        a(None, tool_calls=[{"id": "b1C2d3E4f", "type": "function",
                             "function": {"name": "brave_search", "arguments": {"query": "2022 World Cup winner"}}}]),
        {"role": "ipython", "content": "Argentina won the 2022 FIFA World Cup."},
    ],
    kwargs={"builtin_tools": ["brave_search", "wolfram_alpha", "code_interpreter"]},
    note="builtin_tools keyword (Llama 3.1 ipython mode, <|python_tag|>, <|eom_id|>); role ipython",
)
conv(
    "content-parts",
    [u([{"type": "text", "text": "Describe this."}, {"type": "text", "text": "Briefly."}])],
    note="content as a list of parts: string templates concatenate (TypeError) or str() it (Python repr)",
)


# ---------------------------------------------------------------------------------------------
def render(template, special, c, agp):
    """transformers' apply_chat_template(tokenize=False), minus tokenizer lookup of the template."""
    conversation = copy.deepcopy(c["messages"])
    tools = copy.deepcopy(c.get("tools"))
    kwargs = copy.deepcopy(c.get("kwargs", {}))
    if isinstance(conversation, (list, tuple)) and len(conversation) == 0:
        raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
    conversations = [_normalize_chat_messages(conversation)]
    template_kwargs = {**special, **kwargs}
    rendered, _ = render_jinja_template(
        conversations=conversations,
        tools=tools,
        documents=None,
        chat_template=template,
        return_assistant_tokens_mask=False,
        continue_final_message=False,
        add_generation_prompt=agp,
        **template_kwargs,
    )
    return rendered[0]


def outcome(fn):
    try:
        return {"output": fn()}
    except Exception as e:  # noqa: BLE001 - every failure is recorded
        if type(e) is jinja2.exceptions.TemplateError:  # raise_exception() in the template
            return {"error": str(e)}
        return {"error_type": type(e).__name__, "error": str(e)}


def sanity_check(tmp):
    """AutoTokenizer.apply_chat_template must agree with render() on the shared tokenizers."""
    from transformers import AutoTokenizer

    for name in ("llama3", "qwen3"):
        d = os.path.join(tmp, name)
        tok = AutoTokenizer.from_pretrained(d)
        special = tok.special_tokens_map
        n = 0
        for c in C:
            for agp in (False, True):
                def via_tok():
                    return tok.apply_chat_template(
                        copy.deepcopy(c["messages"]),
                        tools=copy.deepcopy(c.get("tools")),
                        add_generation_prompt=agp,
                        tokenize=False,
                        **copy.deepcopy(c.get("kwargs", {})),
                    )
                want = outcome(via_tok)
                got = outcome(lambda: render(tok.chat_template, special, c, agp))
                if want != got:
                    sys.exit(f"sanity check failed: {name} {c['id']} agp={agp}\n want {want!r}\n got  {got!r}")
                n += 1
        print(f"sanity: AutoTokenizer({name}).apply_chat_template == pipeline on {n} renders; special {special}")


def main():
    tdir = os.path.join(FIX, "shared", "templates")
    smol_cfg = json.load(open(os.path.join(FIX, "chat", "smollm2", "tokenizer_config.json"), encoding="utf-8"))
    TEMPLATES["HuggingFaceTB-SmolLM2-1.7B-Instruct"] = {
        k: smol_cfg[k] for k in SPECIAL_KEYS if smol_cfg.get(k) is not None
    }
    templates = {}
    texts = {}
    for name, special in TEMPLATES.items():
        rel = f"templates/{name}.jinja"
        with open(os.path.join(tdir, f"{name}.jinja"), encoding="utf-8", newline="") as f:
            texts[name] = f.read()
        templates[name] = {"file": "shared/" + rel, "realdata": rel, "vars": special}
    smol_text = texts["HuggingFaceTB-SmolLM2-1.7B-Instruct"]
    assert smol_text == smol_cfg["chat_template"], "SmolLM2 .jinja differs from tokenizer_config.json"

    with tempfile.TemporaryDirectory() as tmp:
        for name in ("llama3", "qwen3"):
            with tarfile.open(os.path.join(FIX, "shared", "tokenizers", f"{name}.tar.xz")) as tf:
                tf.extractall(tmp, filter="data")
        sanity_check(tmp)
        cfg = json.load(open(os.path.join(tmp, "llama3", "tokenizer_config.json"), encoding="utf-8"))
        from transformers import AutoTokenizer

        special = AutoTokenizer.from_pretrained(os.path.join(tmp, "llama3")).special_tokens_map
        texts["tokenizers-llama3"] = cfg["chat_template"]
        templates["tokenizers-llama3"] = {
            "file": "shared/tokenizers/llama3.tar.xz",
            "realdata": "tokenizers/llama3/tokenizer_config.json",
            "json_key": "chat_template",
            "vars": special,
        }
        qcfg = json.load(open(os.path.join(tmp, "qwen3", "tokenizer_config.json"), encoding="utf-8"))
        assert qcfg["chat_template"] == texts["Qwen-Qwen3-0.6B"], "qwen3 tarball template != Qwen-Qwen3-0.6B.jinja"

    cases = []
    for name, t in templates.items():
        for c in C:
            for agp in (False, True):
                r = outcome(lambda: render(texts[name], t["vars"], c, agp))
                cases.append({"template": name, "conversation": c["id"], "add_generation_prompt": agp, **r})

    golden = {
        "generator": f"tools/gen_template_goldens.py (transformers {transformers.__version__}, "
        f"jinja2 {jinja2.__version__}, Python {sys.version.split()[0]})",
        "date": FROZEN_NOW.isoformat(),
        "templates": templates,
        "conversations": C,
        "cases": cases,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    data = json.dumps(golden, ensure_ascii=False, indent=1) + "\n"
    with open(OUT, "w", encoding="utf-8", newline="") as f:
        f.write(data)

    print(f"wrote {os.path.relpath(OUT, ROOT)}: {len(data.encode())} bytes, {len(C)} conversations, {len(cases)} cases")
    for name in templates:
        ok = sum(1 for x in cases if x["template"] == name and "output" in x)
        rex = sum(1 for x in cases if x["template"] == name and "error" in x and "error_type" not in x)
        oth = sum(1 for x in cases if x["template"] == name and "error_type" in x)
        print(f"  {name:45s} ok {ok:3d}  raise_exception {rex:3d}  other errors {oth:3d}")


if __name__ == "__main__":
    main()
