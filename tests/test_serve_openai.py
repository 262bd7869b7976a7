"""The unmodified `openai` Python client against `tessera serve` (run by test_serve_openai.sh):
models, a plain and a streamed chat (with usage), a completion, and the client's own error
classes for a wrong key and a refused parameter. Greedy texts must equal `tessera run`'s,
passed in as arguments.
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
