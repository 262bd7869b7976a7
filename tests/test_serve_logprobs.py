"""logprobs and echo of tessera serve (run by test_serve_logprobs.sh), with urllib only.
    usage: test_serve_logprobs.py PORT_PLAIN PORT_LOOKUP TESSERA MODEL TMPDIR
PORT_PLAIN serves with --lookup 0, PORT_LOOKUP with --lookup 8; both 4 slots, the same model.

Tolerances (stated in docs/serve.md): a prompt token's log-probability (echo: the cpu target's
prefill with every row through the LM head) equals the log-softmax of `tessera logits --target
cpu` for the same tokens within 1e-4 (the same arithmetic; only the log-sum-exp differs), and
the oracle's (`tessera logits`, the FP32 ref target) within 0.05; a generated token's (decode
arithmetic, one row through the LM head) the oracle's within 0.05. Between lookup on and off,
batched and alone, streamed and not, they are equal exactly."""
import array
import json
import math
import struct
import subprocess
import sys
import threading
import urllib.error
import urllib.request

p0, p1, binp, model, tmp = sys.argv[1:6]
fails = 0


def check(cond, what):
    global fails
    if cond:
        print("ok:", what)
    else:
        fails += 1
        print("FAIL:", what, file=sys.stderr)


def post(port, path, body):
    q = urllib.request.Request("http://127.0.0.1:%s%s" % (port, path), data=json.dumps(body).encode(),
                               headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(q, timeout=120) as r:
            raw = r.read().decode()
            status = r.status
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())
    if body.get("stream"):
        ev = [e for e in raw.split("\n\n") if e.strip()]
        assert ev[-1] == "data: [DONE]", ev[-1:]
        return status, [json.loads(e[6:]) for e in ev[:-1]]
    return status, json.loads(raw)


def compl(port, **kw):
    st, j = post(port, "/v1/completions", kw)
    assert st == 200, (st, j)
    return j["choices"][0]


def chat(port, **kw):
    st, j = post(port, "/v1/chat/completions", kw)
    assert st == 200, (st, j)
    return j["choices"][0]


def merge_stream(chunks, is_chat):
    """The streamed choice as one: text and the logprobs lists concatenated."""
    text, lp, fin = "", None, None
    for c in chunks:
        for ch in c["choices"]:
            if is_chat:
                text += ch["delta"].get("content") or ""
            else:
                text += ch["text"]
            fin = ch["finish_reason"] or fin
            l = ch["logprobs"]
            if l is None:
                continue
            if lp is None:
                lp = {k: [] for k in l if k != "refusal"}
            for k in lp:
                lp[k] += l[k]
    return text, lp, fin


def oracle(ids, target):
    """log-softmax rows of `tessera logits` over the tokenizer's ids (the padding rows excluded)."""
    out = "%s/logits_%s.bin" % (tmp, target)
    subprocess.run([binp, "logits", model, "--tokens", ",".join(map(str, ids)), "--out", out, "--target", target,
                    "--threads", "2"], check=True, capture_output=True)
    b = open(out, "rb").read()
    n, V = struct.unpack("<ii", b[:8])
    a = array.array("f")
    a.frombytes(b[8:])
    rows = []
    for i in range(n):
        row = a[i * V:(i + 1) * V][:N_TEXT]
        m = max(row)
        lse = m + math.log(sum(math.exp(x - m) for x in row))
        rows.append((row, lse))
    return rows


def tokenize(text):
    r = subprocess.run([binp, "tokenize", model, "--ids"], input=text.encode(), check=True, capture_output=True)
    return [int(x) for x in r.stdout.split()]


N_TEXT = 151669  # the qwen3 tokenizer's ids; the synth model pads its vocabulary to 151936

# ---- completions: greedy, logprobs 5 ----
P = "Hello, my name is"
plain = compl(p0, prompt=P, max_tokens=12, temperature=0)
c = compl(p0, prompt=P, max_tokens=12, temperature=0, logprobs=5)
lp = c["logprobs"]
check(c["text"] == plain["text"] and c["finish_reason"] == plain["finish_reason"], "logprobs do not change the text")
check(len(lp["tokens"]) == 12 and "".join(lp["tokens"]) == c["text"], "12 tokens spelling the text: %r" % lp["tokens"])
ok_top = all(len(t) <= 6 and max(t.values()) == v == t[k] for t, v, k in zip(lp["top_logprobs"], lp["token_logprobs"], lp["tokens"]))
check(ok_top, "greedy: each token is its top_logprobs' maximum (at most 5 + 1 entries)")
offs, at = [], 0
for t in lp["tokens"]:
    offs.append(at)
    at += len(t)
check(lp["text_offset"] == offs, "text_offset counts characters: %r" % lp["text_offset"])

# the same request streamed: the same lists, chunk by chunk
st, chunks = post(p0, "/v1/completions", dict(prompt=P, max_tokens=12, temperature=0, logprobs=5, stream=True))
text, slp, fin = merge_stream(chunks, False)
check(text == c["text"] and slp == lp and fin == c["finish_reason"], "streamed completion logprobs == not streamed")

# ---- echo: the prompt's tokens, against the oracle and the cpu target's prefill ----
full = P + c["text"]
ids = tokenize(full)
e = compl(p0, prompt=full, max_tokens=0, logprobs=5, echo=True)
el = e["logprobs"]
check(e["text"] == full and e["finish_reason"] == "length", "echo with max_tokens 0: the prompt alone (%r)" % e["text"])
check(len(el["tokens"]) == len(ids) and el["token_logprobs"][0] is None and el["top_logprobs"][0] is None,
      "echo: %d tokens, the first without a log-probability" % len(el["tokens"]))
ref, cpu = oracle(ids, "ref"), oracle(ids, "cpu")
d_cpu = max(abs(el["token_logprobs"][i] - (cpu[i - 1][0][ids[i]] - cpu[i - 1][1])) for i in range(1, len(ids)))
d_ref = max(abs(el["token_logprobs"][i] - (ref[i - 1][0][ids[i]] - ref[i - 1][1])) for i in range(1, len(ids)))
check(d_cpu < 1e-4, "echo vs the cpu target's prefill logits: max |diff| %.2e < 1e-4" % d_cpu)
check(d_ref < 0.05, "echo vs the oracle: max |diff| %.4f < 0.05" % d_ref)
# top alternatives: the oracle's top 5 (by its values: ties and near-ties may swap)
row, lse = cpu[3]
want = sorted(range(N_TEXT), key=lambda i: -row[i])[:5]
got = sorted(el["top_logprobs"][4].values(), reverse=True)[:5]
check(all(abs(g - (row[w] - lse)) < 1e-4 for g, w in zip(got, want)), "echo top_logprobs are the 5 most likely")
# the generated tokens: where the reply tokenizes back to the same tokens, against the oracle
n_p = len(tokenize(P))
if el["tokens"][n_p:] == lp["tokens"]:
    d = max(abs(lp["token_logprobs"][k] - (ref[n_p + k - 1][0][ids[n_p + k]] - ref[n_p + k - 1][1])) for k in range(12))
    check(d < 0.05, "generated tokens vs the oracle: max |diff| %.4f < 0.05" % d)
else:
    check(False, "the reply does not tokenize back to its tokens: %r vs %r" % (el["tokens"][n_p:], lp["tokens"]))

# echo with generation: the reply and its log-probabilities are the ones without echo
e2 = compl(p0, prompt=P, max_tokens=12, temperature=0, logprobs=5, echo=True)
n_e = len(tokenize(P))
check(e2["text"] == P + c["text"], "echo + 12 tokens: the prompt then the same reply")
check(e2["logprobs"]["token_logprobs"][n_e:] == lp["token_logprobs"] and e2["logprobs"]["tokens"][n_e:] == lp["tokens"],
      "echo does not change the reply's log-probabilities")
check(e2["logprobs"]["text_offset"][n_e:] == [len(P) + o for o in lp["text_offset"]], "echo: the reply's offsets follow the prompt")
e3 = compl(p0, prompt=P, max_tokens=3, temperature=0, echo=True)
check(e3["text"] == P + plain["text"][:len(e3["text"]) - len(P)] and e3["logprobs"] is None, "echo without logprobs")
st, chunks = post(p0, "/v1/completions", dict(prompt=P, max_tokens=12, temperature=0, logprobs=5, echo=True, stream=True))
text, slp, _ = merge_stream(chunks, False)
check(text == e2["text"] and slp == e2["logprobs"], "streamed echo == not streamed")
check(chunks[0]["choices"][0]["text"] == P, "streamed echo: the prompt is the first chunk")

# ---- chat ----
msgs = [{"role": "user", "content": "Say something about the sea."}]
kw = dict(messages=msgs, max_tokens=16, temperature=0, chat_template_kwargs={"enable_thinking": False})
h0 = chat(p0, **kw)
h = chat(p0, logprobs=True, top_logprobs=3, **kw)
content = h["logprobs"]["content"]
check(h["message"]["content"] == h0["message"]["content"], "chat: logprobs do not change the reply")
check(len(content) == 16 and "".join(x["token"] for x in content) == h["message"]["content"], "chat: 16 tokens spelling the reply")
check(all(len(x["top_logprobs"]) == 3 and x["top_logprobs"][0]["logprob"] == x["logprob"] and
          x["top_logprobs"][0]["token"] == x["token"] and
          x["top_logprobs"][0]["logprob"] >= x["top_logprobs"][1]["logprob"] >= x["top_logprobs"][2]["logprob"]
          for x in content), "chat: top_logprobs sorted, the greedy token first")
check(all(bytes(x["bytes"]).decode("utf-8", "replace") == x["token"] for x in content), "chat: bytes spell each token")
check(h["logprobs"].get("refusal", 0) is None, "chat: refusal null")
h2 = chat(p0, logprobs=True, **kw)
check(all(x["top_logprobs"] == [] for x in h2["logprobs"]["content"]) and
      [x["logprob"] for x in h2["logprobs"]["content"]] == [x["logprob"] for x in content], "chat: top_logprobs 0 by default")
check(h0["logprobs"] is None, "chat without logprobs: null")
st, chunks = post(p0, "/v1/chat/completions", dict(logprobs=True, top_logprobs=3, stream=True, **kw))
text, slp, _ = merge_stream(chunks, True)
check(text == h["message"]["content"] and slp == {"content": content}, "streamed chat logprobs == not streamed")

# ---- seeded sampling: the same draws with and without logprobs ----
sk = dict(prompt="Once upon a time", max_tokens=16, temperature=1.0, top_k=0, top_p=1, min_p=0, seed=11)
s0 = compl(p0, **sk)
s1 = compl(p0, logprobs=2, **sk)
check(s1["text"] == s0["text"], "sampling: logprobs do not change the draws")
check(all(v <= max(t.values()) for t, v in zip(s1["logprobs"]["top_logprobs"], s1["logprobs"]["token_logprobs"])),
      "sampling: each drawn token at most as likely as the top")

# ---- a stop string: no token past the text ----
stop = plain["text"][5:8]
s = compl(p0, prompt=P, max_tokens=12, temperature=0, logprobs=1, stop=[stop])
toks = s["logprobs"]["tokens"]
check(s["finish_reason"] == "stop" and "".join(toks).startswith(s["text"]) and len("".join(toks[:-1])) < len(s["text"]) + 1,
      "stop %r: the tokens cover the text %r and no more (%r)" % (stop, s["text"], toks))

# ---- lookup on vs off, batched vs alone: exactly equal ----
reqs = [("/v1/completions", dict(prompt="one two three one two three one two", max_tokens=24, temperature=0, logprobs=5)),
        ("/v1/completions", dict(prompt=P, max_tokens=20, temperature=0, logprobs=3, echo=True)),
        ("/v1/chat/completions", dict(messages=[{"role": "user", "content": "Repeat: the cat sat on the mat, the cat sat on the mat."}],
                                      max_tokens=24, temperature=0, logprobs=True, top_logprobs=4)),
        ("/v1/completions", dict(prompt="Repeat repeat repeat", max_tokens=24, temperature=0.7, seed=3, logprobs=2)),
        ("/v1/completions", dict(prompt="abc abc abc", max_tokens=16, temperature=0, logprobs=0, stream=True)),
        ("/v1/chat/completions", dict(messages=msgs, max_tokens=20, temperature=0, logprobs=True, top_logprobs=2, stream=True))]


def key(r):
    path, body = r
    st, j = post(port_now, path, body)
    if body.get("stream"):
        return merge_stream(j, "chat" in path)
    c = j["choices"][0]
    return c.get("text", c.get("message")), c["logprobs"], c["finish_reason"]


port_now = p0
alone = [key(r) for r in reqs]
res = [None] * len(reqs)


def run(i):
    res[i] = key(reqs[i])


for port_now in (p0, p1):
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(reqs))]
    [t.start() for t in ts]
    [t.join() for t in ts]
    for i in range(len(reqs)):
        check(res[i] == alone[i], "request %d concurrently on the %s server == alone without lookup" %
              (i, "lookup" if port_now == p1 else "plain"))

# ---- errors ----
for path, body, param, msg in [
        ("/v1/chat/completions", dict(messages=msgs, logprobs=True, top_logprobs=21), "top_logprobs", "[0, 20]"),
        ("/v1/chat/completions", dict(messages=msgs, top_logprobs=2), "top_logprobs", "logprobs"),
        ("/v1/chat/completions", dict(messages=msgs, logprobs=3), "logprobs", "true or false"),
        ("/v1/completions", dict(prompt="x", logprobs=6), "logprobs", "[0, 5]"),
        ("/v1/completions", dict(prompt="x", logprobs=True), "logprobs", "[0, 5]"),
        ("/v1/completions", dict(prompt="x", max_tokens=0), "max_tokens", "0 only with echo"),
        ("/v1/completions", dict(prompt="x", echo="yes"), "echo", "true or false")]:
    st, j = post(p0, path, body)
    err = j.get("error", {})
    check(st == 400 and err.get("param") == param and msg in err.get("message", ""),
          "%s %r: 400 naming %s (%s %r)" % (path, body, param, st, err))

print("test_serve_logprobs.py: %d failed" % fails)
sys.exit(1 if fails else 0)
