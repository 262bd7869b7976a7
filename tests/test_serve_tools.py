"""Tool requests against tessera serve (run by test_serve_tools.sh), with urllib only.
    usage: test_serve_tools.py PORT TEMPLATE_NAME TESSERA MODEL TMPDIR DATE [--chat-template FILE]"""
import json
import subprocess
import sys
import urllib.error
import urllib.request

port, name, binp, model, tmp, date = sys.argv[1:7]
tmpl_args = sys.argv[7:]
fails = 0


def check(cond, what):
    global fails
    if cond:
        print("ok: %s: %s" % (name, what))
    else:
        fails += 1
        print("FAIL: %s: %s" % (name, what), file=sys.stderr)


def post(body):
    q = urllib.request.Request("http://127.0.0.1:%s/v1/chat/completions" % port, data=json.dumps(body).encode(),
                               headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(q, timeout=120) as r:
            raw = r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())
    if body.get("stream"):
        ev = [e for e in raw.split("\n\n") if e.strip()]
        assert ev[-1] == "data: [DONE]", ev[-1:]
        return 200, [json.loads(e[6:]) for e in ev[:-1]]
    return 200, json.loads(raw)


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
base = dict(messages=ASK, tools=TOOLS, max_tokens=12, temperature=0)

# ---- the shape of a reply without a call ----
st, j = post(base)
c = j["choices"][0] if st == 200 else {}
msg = c.get("message", {})
check(st == 200 and isinstance(msg.get("content"), str) and "tool_calls" not in msg and
      c["finish_reason"] in ("stop", "length"), "tools, no call: content, no tool_calls, finish %r" % c.get("finish_reason"))
st, chunks = post(dict(base, stream=True))
text = "".join(ch["delta"].get("content") or "" for k in chunks for ch in k["choices"])
fins = [ch["finish_reason"] for k in chunks for ch in k["choices"] if ch["finish_reason"]]
check(text == msg.get("content") and fins == [c.get("finish_reason")] and
      not any("tool_calls" in ch["delta"] for k in chunks for ch in k["choices"]), "streamed == not streamed")
st, j2 = post(dict(base, tool_choice="none"))
check(st == 200 and j2["choices"][0]["message"]["content"] == msg.get("content"), "tool_choice none: the same reply")
st, j3 = post(dict(base, tool_choice="auto", parallel_tool_calls=False, logprobs=True))
lp = j3["choices"][0]["logprobs"]["content"] if st == 200 else []
check(st == 200 and "".join(x["token"] for x in lp) == msg.get("content") and len(lp) == j3["usage"]["completion_tokens"],
      "with logprobs: the tokens spell the content")
st, chunks = post(dict(base, stream=True, logprobs=True))
toks = [x["token"] for k in chunks for ch in k["choices"] if ch["logprobs"] for x in ch["logprobs"]["content"]]
check("".join(toks) == msg.get("content"), "streamed with logprobs: every token once")

# ---- refusals ----
for body, param, what in [(dict(base, tool_choice="required"), "tool_choice", "no constrained decoding"),
                          (dict(base, tool_choice={"type": "function", "function": {"name": "get_weather"}}), "tool_choice",
                           "naming a function"),
                          (dict(base, tool_choice="sometimes"), "tool_choice", "\"auto\" or \"none\""),
                          (dict(base, parallel_tool_calls="yes"), "parallel_tool_calls", "true or false")]:
    st, e = post(body)
    err = e.get("error", {})
    check(st == 400 and err.get("param") == param and what in err.get("message", ""), "refused: %r (%r)" % (body.get(param), err))

# ---- a call sent back as OpenAI's clients send it ----
ARGS = {"city": "Paris"}
sent = ASK + [{"role": "assistant", "content": None,
               "tool_calls": [{"id": "abcDEF123", "type": "function",
                               "function": {"name": "get_weather", "arguments": json.dumps(ARGS)}}]},
              {"role": "tool", "tool_call_id": "abcDEF123", "content": "{\"temp_c\": 21}"}]


def rendered_tokens(messages):
    with open("%s/%s_msgs.json" % (tmp, name), "w") as f:
        json.dump({"messages": messages, "tools": TOOLS}, f)
    r = subprocess.run([binp, "template", model, "--messages", f.name, "--add-generation-prompt", "--date", date] +
                       tmpl_args, capture_output=True)
    if r.returncode:
        return None
    t = subprocess.run([binp, "tokenize", model, "--ids"], input=r.stdout, check=True, capture_output=True)
    return len(t.stdout.split())


# what the template wants: Qwen3 content "" (it tests '</think>' in the content), the others the
# arguments as an object (they apply tojson to them)
want_msgs = json.loads(json.dumps(sent))
want_msgs[1]["tool_calls"][0]["function"]["arguments"] = ARGS
if name == "qwen3":
    want_msgs[1]["content"] = ""
want = rendered_tokens(want_msgs)
asis = rendered_tokens(sent)
st, j = post(dict(messages=sent, tools=TOOLS, max_tokens=4, temperature=0))
got = j["usage"]["prompt_tokens"] if st == 200 else None
check(want is not None and got == want, "sent back: %r prompt tokens, the template's rendering has %r (%r)" %
      (got, want, j if st != 200 else ""))
check(asis != want, "sent back as is, the template renders something else (%r tokens, or an error: None)" % asis)
# the arguments already an object: the same prompt
obj_msgs = json.loads(json.dumps(sent))
obj_msgs[1]["tool_calls"][0]["function"]["arguments"] = ARGS
st, j = post(dict(messages=obj_msgs, tools=TOOLS, max_tokens=4, temperature=0))
check(st == 200 and j["usage"]["prompt_tokens"] == want, "arguments sent as an object: the same prompt")

print("test_serve_tools.py %s: %d failed" % (name, fails))
sys.exit(1 if fails else 0)
