#!/usr/bin/env python3
"""Golden chat-template renderings for tests/test_chat_template.c.

Writes tests/fixtures/chat/{qwen25,smollm2}/tokenizer_config.json (the published templates of
Qwen2.5-Instruct and SmolLM2-Instruct, which tessera's shared tokenizers do not carry) and
tests/fixtures/chat/golden.json: for each template, conversations rendered by transformers'
apply_chat_template (tokenize=False). Llama-3 and Qwen3 come from the real tokenizer_config.json
files in ../shared/tokenizers. Run with the HF venv:

    /work/venv-hf/bin/python tools/gen_chat_fixtures.py [--shared ../shared]
"""
import argparse
import json
import os
import shutil
import tempfile

from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "tests", "fixtures", "chat")

# Qwen2.5-Instruct's chat_template (tool branches included, as published).
QWEN25 = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, "
    "\\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
    "(message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n"
    "            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

# SmolLM2-Instruct's chat_template.
SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

FIXTURE_CONFIGS = {
    "qwen25": {"add_bos_token": False, "bos_token": None, "eos_token": "<|im_end|>",
               "pad_token": "<|endoftext|>", "tokenizer_class": "Qwen2Tokenizer",
               "model_max_length": 131072, "chat_template": QWEN25},
    "smollm2": {"add_prefix_space": False, "bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                "pad_token": "<|im_end|>", "unk_token": "<|endoftext|>", "tokenizer_class": "GPT2Tokenizer",
                "model_max_length": 8192, "chat_template": SMOLLM2},
}

U, A, S = "user", "assistant", "system"
CONVS = [
    ("one turn", [(U, "Hello!")]),
    ("one turn + system", [(S, "You are terse."), (U, "What is 2+2?")]),
    ("two turns", [(U, "Hi"), (A, "Hello! How can I help?"), (U, "Tell me a joke.")]),
    ("three turns + system", [(S, "Answer in French.\nBe brief."), (U, "Good morning"), (A, "Bonjour !"),
                              (U, "How are you?"), (A, "Très bien, merci."), (U, "And the weather?")]),
    ("spaces and newlines", [(U, "  leading spaces and trailing newline\n"), (A, "\n  indented\nreply  "),
                             (U, "\ttab\n\nblank line ")]),
    ("unicode", [(S, "  Système: réponds en 日本語 🙂 "), (U, "Ünïcödé — “quotes” 你好\u00a0"),
                 (A, "\u3000全角スペース"), (U, "ok")]),
    ("ends with assistant", [(U, "Say hi"), (A, "hi")]),
]
# Qwen3 keeps the <think> block only for turns after the last user query.
QWEN3_ONLY = [
    ("think in history", [(U, "What is 1+1?"), (A, "<think>\nsimple sum\n</think>\n\n2"),
                          (U, "And 2+2?")]),
    ("think in last turn", [(U, "What is 1+1?"), (A, "<think>\nsimple sum\n</think>\n\n2")]),
    ("no think in last turn", [(S, "sys"), (U, "q"), (A, "\n\nplain answer")]),
]


def msgs(pairs):
    return [{"role": r, "content": c} for r, c in pairs]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    for name, cfg in FIXTURE_CONFIGS.items():
        os.makedirs(os.path.join(OUT, name), exist_ok=True)
        with open(os.path.join(OUT, name, "tokenizer_config.json"), "w") as f:
            json.dump(cfg, f, indent=2, ensure_ascii=False)
            f.write("\n")
    qwen_tok_json = os.path.join(args.shared, "tokenizers", "qwen3", "tokenizer.json")
    sources = {
        "llama3": ("shared", "tokenizers/llama3/tokenizer_config.json"),
        "qwen3": ("shared", "tokenizers/qwen3/tokenizer_config.json"),
        "qwen2.5": ("fixtures", "chat/qwen25/tokenizer_config.json"),
        "smollm2": ("fixtures", "chat/smollm2/tokenizer_config.json"),
    }
    cases = []
    tmp = tempfile.mkdtemp()
    try:
        for fam, (root, rel) in sources.items():
            if root == "shared":
                tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.join(args.shared, rel)))
            else:
                # The fixture dir has only the config: borrow a byte-level BPE tokenizer.json
                # (rendering with tokenize=False never looks at the vocabulary).
                d = os.path.join(tmp, fam)
                os.makedirs(d)
                shutil.copy(os.path.join(OUT, os.path.basename(os.path.dirname(rel)), "tokenizer_config.json"), d)
                os.symlink(os.path.abspath(qwen_tok_json), os.path.join(d, "tokenizer.json"))
                tok = AutoTokenizer.from_pretrained(d)
            convs = CONVS + (QWEN3_ONLY if fam == "qwen3" else [])
            for title, pairs in convs:
                for gen in (False, True):
                    thinking = [None, True, False] if fam == "qwen3" else [None]
                    for th in thinking:
                        kw = {} if th is None else {"enable_thinking": th}
                        text = tok.apply_chat_template(msgs(pairs), tokenize=False,
                                                       add_generation_prompt=gen, **kw)
                        cases.append({"family": fam, "root": root, "config": rel, "title": title,
                                      "add_generation_prompt": gen,
                                      "enable_thinking": -1 if th is None else int(th),
                                      "messages": msgs(pairs), "expected": text})
    finally:
        shutil.rmtree(tmp)
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump({"generator": "tools/gen_chat_fixtures.py", "cases": cases}, f, indent=1,
                  ensure_ascii=False)
        f.write("\n")
    print("wrote %d cases to %s" % (len(cases), os.path.join(OUT, "golden.json")))


if __name__ == "__main__":
    main()
