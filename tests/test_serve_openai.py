"""The unmodified `openai` Python client against `tessera serve` (run by test_serve_openai.sh):
models, a plain and a streamed chat (with usage), a completion, log-probabilities (chat, streamed
chat, completions, echo) read through the client's own types, a request with tools and a tool
call sent back, and the client's own error classes for a wrong key and refused parameters.
Greedy texts must equal `tessera run`'s, passed in as arguments.
    usage: test_serve_openai.py PORT KEY MODEL CHAT_TEXT_FILE COMPLETION_TEXT_FILE"""
import sys

import openai
from openai import OpenAI

port, key, model = sys.argv[1:4]
want_chat, want_compl = (open(f, encoding="utf-8").read() for f in sys.argv[4:6])
base = "http://127.0.0.1:%s/v1" % port
client = OpenAI(base_url=base, api_key=key, max_retries=0, timeout=30)
fails = 0


def check(cond, what):
    global fails
    if cond:
        print("ok:", what)
    else:
        fails += 1
        print("FAIL:", what, file=sys.stderr)


ids = [m.id for m in client.models.list()]
check(ids == [model], "models.list() == [%r] (got %r)" % (model, ids))

msgs = [{"role": "user", "content": "Hello there"}]
kw = {"chat_template_kwargs": {"enable_thinking": False}}
r = client.chat.completions.create(model=model, messages=msgs, max_tokens=10, temperature=0, extra_body=kw)
check(r.choices[0].message.content == want_chat, "chat == run --chat (%r vs %r)" % (r.choices[0].message.content, want_chat))
check(r.choices[0].message.role == "assistant" and r.object == "chat.completion", "chat response shape")
check(r.usage.completion_tokens == 10 and r.usage.total_tokens == r.usage.prompt_tokens + 10, "chat usage %r" % r.usage)
check(r.choices[0].finish_reason == "length", "finish_reason length")

text, usage, finish, roles = "", None, None, []
with client.chat.completions.create(model=model, messages=msgs, max_tokens=10, temperature=0, stream=True,
                                    stream_options={"include_usage": True}, extra_body=kw) as stream:
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
            if c.delta.role:
                roles.append(c.delta.role)
check(text == want_chat, "streamed chat == run --chat (%r)" % text)
check(usage is not None and usage.completion_tokens == 10, "streamed usage %r" % usage)
check(finish == "length" and roles == ["assistant"], "stream finish %r, roles %r" % (finish, roles))

r = client.completions.create(model=model, prompt="Hello, my name is", max_tokens=12, temperature=0)
check(r.choices[0].text == want_compl, "completion == run (%r vs %r)" % (r.choices[0].text, want_compl))
check(r.usage.prompt_tokens == 5 and r.usage.completion_tokens == 12, "completion usage %r" % r.usage)

# ---- log-probabilities through the client's types ----
r = client.chat.completions.create(model=model, messages=msgs, max_tokens=10, temperature=0, logprobs=True,
                                   top_logprobs=3, extra_body=kw)
lp = r.choices[0].logprobs.content
check(r.choices[0].message.content == want_chat, "chat with logprobs: the same text")
check(len(lp) == 10 and "".join(t.token for t in lp) == want_chat, "chat logprobs: 10 tokens spelling the reply")
check(all(len(t.top_logprobs) == 3 and t.top_logprobs[0].token == t.token and t.top_logprobs[0].logprob == t.logprob
          and t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob >= t.top_logprobs[2].logprob and t.logprob <= 0
          and isinstance(t.bytes, list) for t in lp), "chat logprobs: greedy token first, sorted, bytes")
slp = []
with client.chat.completions.create(model=model, messages=msgs, max_tokens=10, temperature=0, stream=True,
                                    logprobs=True, top_logprobs=3, extra_body=kw) as stream:
    for chunk in stream:
        for c in chunk.choices:
            if c.logprobs and c.logprobs.content:
                slp += c.logprobs.content
check([(t.token, t.logprob) for t in slp] == [(t.token, t.logprob) for t in lp], "streamed chat logprobs == not streamed")
r = client.completions.create(model=model, prompt="Hello, my name is", max_tokens=12, temperature=0, logprobs=2)
l = r.choices[0].logprobs
check(r.choices[0].text == want_compl and "".join(l.tokens) == want_compl and len(l.token_logprobs) == 12,
      "completion logprobs: the same text, 12 tokens")
check(all(len(d) <= 3 and max(d.values()) == v for d, v in zip(l.top_logprobs, l.token_logprobs)) and
      l.text_offset == sorted(l.text_offset) and l.text_offset[0] == 0, "completion logprobs: top dicts, offsets")
r = client.completions.create(model=model, prompt="Hello, my name is", max_tokens=12, temperature=0, logprobs=1,
                              echo=True)
l = r.choices[0].logprobs
check(r.choices[0].text == "Hello, my name is" + want_compl and l.token_logprobs[0] is None and
      l.top_logprobs[0] is None and len(l.tokens) == 5 + 12, "echo: the prompt, then the reply; its first token null")

# ---- tools: the shape of a reply without a call, and a call sent back ----
tools = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
ask = [{"role": "user", "content": "Weather in Paris?"}]
r = client.chat.completions.create(model=model, messages=ask, tools=tools, max_tokens=6, temperature=0, extra_body=kw)
check(r.choices[0].message.tool_calls is None and isinstance(r.choices[0].message.content, str) and
      r.choices[0].finish_reason in ("stop", "length"), "tools without a call: content, no tool_calls")
back = ask + [{"role": "assistant", "content": None,
               "tool_calls": [{"id": "call_abc", "type": "function",
                               "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
              {"role": "tool", "tool_call_id": "call_abc", "content": "21 C"}]
r = client.chat.completions.create(model=model, messages=back, tools=tools, max_tokens=4, temperature=0, extra_body=kw)
check(r.usage.prompt_tokens > 100 and r.choices[0].message.role == "assistant", "a tool call and its result sent back")
try:
    client.chat.completions.create(model=model, messages=ask, tools=tools, tool_choice="required", max_tokens=2)
    check(False, "tool_choice required is refused")
except openai.BadRequestError as e:
    check((e.body or {}).get("param") == "tool_choice", "tool_choice required: BadRequestError naming it (%r)" % e.body)

try:
    OpenAI(base_url=base, api_key=key + "x", max_retries=0).models.list()
    check(False, "a wrong key is refused")
except openai.AuthenticationError as e:
    check(e.status_code == 401, "a wrong key: AuthenticationError 401")
try:
    client.chat.completions.create(model=model, messages=msgs, n=2)
    check(False, "n=2 is refused")
except openai.BadRequestError as e:
    check(e.status_code == 400 and "n" == (e.body or {}).get("param"), "n=2: BadRequestError naming n (%r)" % e.body)

print("test_serve_openai.py: %d failed" % fails)
sys.exit(1 if fails else 0)
