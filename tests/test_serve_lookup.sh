#!/usr/bin/env bash
# Prompt-lookup speculative decoding in tessera serve (docs/serve.md): many requests, sent
# concurrently to a server with --lookup 8 and to one with --lookup 0 (4 slots each, so drafted
# slots share steps with plain ones), must give byte-identical text, finish_reason and usage;
# greedy ones must also equal `tessera run --temp 0` and `tessera run --lookup 8`. Two models:
# stories260K (a real trained model: it repeats phrases, so drafts are partly accepted) with
# input-copying prompts, stop strings that end inside an accepted draft, small max_tokens and
# seeded sampling; and a synth Qwen3-tiny with the real tokenizer and chat template (random
# weights fall into loops: long accepted drafts) with "repeat this text" and code-editing
# chats. /metrics counts drafted and accepted tokens (0 without lookup).
set -u
NAME=serve_lookup
source "$(dirname "$0")/lib.sh"

kill_at_exit

# start_server LOG MODEL ARGS...: sets PORT and SPID
start_server() { serve_start "$1" "$2" --threads 2 "${@:3}"; }

# send PORT REQS OUT: every request of the JSON list REQS ({"path", "body"}) at once, one
# thread each; OUT: a JSON list of [text, finish_reason, usage] in the same order
send() {
    python3 - "$@" <<'PY'
import json, sys, threading, urllib.request
port, reqs, out = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3]
res = [None] * len(reqs)
def one(i, r):
    try:
        q = urllib.request.Request("http://127.0.0.1:%s%s" % (port, r["path"]), data=json.dumps(r["body"]).encode(),
                                   headers={"Content-Type": "application/json"})
        j = json.load(urllib.request.urlopen(q, timeout=120))
        c = j["choices"][0]
        # cached_tokens depends on which requests finished first (the prefix cache): not compared
        u = {k: v for k, v in j["usage"].items() if k != "prompt_tokens_details"}
        res[i] = [c["text"] if "text" in c else c["message"]["content"], c["finish_reason"], u]
    except Exception as e:
        res[i] = ["ERROR %r" % e, None, None]
ts = [threading.Thread(target=one, args=(i, r)) for i, r in enumerate(reqs)]
[t.start() for t in ts]
[t.join() for t in ts]
json.dump(res, open(out, "w"))
PY
}

# compare NAME A B: the two result lists, request by request
compare() {
    python3 - "$@" <<'PY'
import json, sys
name, a, b = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
bad = [i for i in range(len(a)) if a[i] != b[i] or a[i][1] is None]
for i in bad[:3]:
    print("FAIL: %s: request %d differs:\n  lookup: %r\n  plain:  %r" % (name, i, a[i], b[i]), file=sys.stderr)
print("%s: %d of %d requests identical" % (name, len(a) - len(bad), len(a)))
sys.exit(1 if bad else 0)
PY
}

# metric PORT NAME: its value
metric() { curl -sS -m 5 "http://127.0.0.1:$1/metrics" | sed -n "s/^$2 //p"; }

# ---- stories260K: completions ----
M="$SHARED/models/stories260K.gguf"
python3 - "$TMP/reqs1.json" "$TMP/prompts1" <<'PY'
import json, sys
story = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
         "One day, she saw a big red ball under a tree. She ran to the ball and picked it up. ")
prompts = [
    "Once upon a time",
    "Tom and Sue went to the beach",
    "The little cat was sad because",
    "Lily had a red ball",
    story + story[:60],                               # a story, then its start again: copying
    "Repeat this story: " + story + "\nThe story again: " + story[:40],
    story + "\n" + story + "\n" + story[:25],
    "One day, a boy named Ben wanted to fly. He jumped and jumped. One day, a boy",
    'def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return',
    "Sue said, \"I like the sun.\" Tom said, \"I like the sun.\" Sue said,",
    "The dog ran. The dog ran. The dog ran. The dog",
    "Mom and Dad took Tim to the zoo. They saw a lion, a bear and a big elephant. Tim",
]
reqs = []
for i, p in enumerate(prompts):
    reqs.append({"path": "/v1/completions", "body": {"prompt": p, "max_tokens": 40 + 23 * (i % 5), "temperature": 0}})
# stops that end inside a run of accepted drafts, max_tokens that ends inside one
reqs.append({"path": "/v1/completions", "body": {"prompt": story + story[:60], "max_tokens": 200, "temperature": 0, "stop": ["ball"]}})
reqs.append({"path": "/v1/completions", "body": {"prompt": prompts[6], "max_tokens": 200, "temperature": 0, "stop": ["park.", "tree"]}})
reqs.append({"path": "/v1/completions", "body": {"prompt": prompts[10], "max_tokens": 7, "temperature": 0}})
reqs.append({"path": "/v1/completions", "body": {"prompt": prompts[6], "max_tokens": 13, "temperature": 0}})
# seeded sampling: the verify consumes the sampler exactly as plain decoding does
for s in range(4):
    reqs.append({"path": "/v1/completions", "body": {"prompt": prompts[s * 2], "max_tokens": 120, "temperature": 0.8, "seed": 11 + s}})
reqs.append({"path": "/v1/completions", "body": {"prompt": prompts[10], "max_tokens": 120, "temperature": 0.7, "seed": 3, "top_k": 5, "repetition_penalty": 1.1}})
json.dump(reqs, open(sys.argv[1], "w"))
# the greedy ones for `tessera run`: prompt and -n, NUL-separated
with open(sys.argv[2], "w") as f:
    for r in reqs[:len(prompts)]:
        f.write("%d\0%s\0" % (r["body"]["max_tokens"], r["body"]["prompt"]))
PY
start_server "$TMP/a.log" "$M" --parallel 4 --lookup 8
PA=$PORT A=$SPID
start_server "$TMP/b.log" "$M" --parallel 4 --lookup 0
PB=$PORT B=$SPID
send "$PA" "$TMP/reqs1.json" "$TMP/a1.json"
send "$PB" "$TMP/reqs1.json" "$TMP/b1.json"
compare "stories260K, lookup 8 vs 0" "$TMP/a1.json" "$TMP/b1.json" && ok || bad "stories260K outputs differ"
# the greedy ones alone, by `tessera run` (its own plain decode loop, and its --lookup path)
python3 - "$TMP/a1.json" "$TMP/prompts1" "$BIN" "$M" <<'PY' && ok || bad "serve != run"
import json, subprocess, sys
res, raw, bin_, m = json.load(open(sys.argv[1])), open(sys.argv[2]).read().split("\0")[:-1], sys.argv[3], sys.argv[4]
bad = 0
for i in range(0, len(raw), 2):
    for look in ("0", "8"):
        out = subprocess.run([bin_, "run", m, "-p", raw[i + 1], "-n", raw[i], "--temp", "0", "--threads", "1",
                              "--lookup", look], capture_output=True).stdout.decode()
        out = out[:-1] if out.endswith("\n") else out  # run ends its output with a newline
        if out != res[i // 2][0]:
            bad += 1
            print("FAIL: prompt %d, run --lookup %s: %r != serve %r" % (i // 2, look, out, res[i // 2][0]), file=sys.stderr)
print("stories260K: %d greedy requests equal to tessera run (--lookup 0 and 8)" % (len(raw) // 2))
sys.exit(1 if bad else 0)
PY
d=$(metric "$PA" tessera_lookup_draft_tokens_total)
a=$(metric "$PA" tessera_lookup_accepted_tokens_total)
v=$(metric "$PA" tessera_lookup_verify_steps_total)
echo "stories260K --lookup 8: $v verify steps, $d tokens drafted, $a accepted"
[ "${d:-0}" -gt 0 ] && [ "${a:-0}" -gt 0 ] && [ "$a" -le "$d" ] && [ "${v:-0}" -gt 0 ] && ok || bad "lookup metrics: d=$d a=$a v=$v"
[ "$(metric "$PB" tessera_lookup_draft_tokens_total)" = 0 ] && ok || bad "--lookup 0 drafted"
grep -q "lookup 8, weights " "$TMP/a.log" && grep -q "(lookup: [0-9]* of [0-9]* drafted accepted)" "$TMP/a.log" && ok ||
    bad "log lines: $(head -5 "$TMP/a.log")"
kill -TERM "$A" "$B"
wait "$A" "$B"

# ---- synth Qwen3-tiny with the real tokenizer and template: chat ----
Q="$TMP/q"
"$BIN" synth qwen3-0.6b-tiny "$Q" --seed 5 --vocab 151936 --tokenizer "$SHARED/tokenizers/qwen3" >/dev/null || { bad "synth"; finish; exit; }
python3 - "$TMP/reqs2.json" <<'PY'
import json, sys
code = "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs)\n"
doc = ("The committee met on Tuesday to review the budget. It approved the new library, "
       "postponed the road repairs and asked for a report on the school buses by June.")
msgs = [
    "Repeat this text exactly: " + doc,
    "Quote the second sentence of this document: " + doc,
    "Rename the variable total to acc in this code and return the whole file:\n" + code,
    "Add a docstring to this function:\n" + code,
    "Fix the bug: " + code.replace("len(xs)", "len(x)"),
    "Write a haiku about the sea.",
    "What is the capital of France?",
    "Tell me a story about a robot.",
]
reqs = []
for i, m in enumerate(msgs):
    reqs.append({"path": "/v1/chat/completions",
                 "body": {"messages": [{"role": "user", "content": m}], "max_tokens": 30 + 17 * (i % 4), "temperature": 0,
                          "chat_template_kwargs": {"enable_thinking": False}}})
reqs.append({"path": "/v1/completions", "body": {"prompt": code + code[:30], "max_tokens": 64, "temperature": 0}})
reqs.append({"path": "/v1/completions", "body": {"prompt": doc + " " + doc[:50], "max_tokens": 64, "temperature": 0, "seed": 1}})
reqs.append({"path": "/v1/completions", "body": {"prompt": doc, "max_tokens": 48, "temperature": 1.0, "seed": 9}})
json.dump(reqs, open(sys.argv[1], "w"))
PY
start_server "$TMP/c.log" "$Q" --parallel 4 --lookup 8 --ctx 1024
PA=$PORT A=$SPID
start_server "$TMP/d.log" "$Q" --parallel 4 --lookup 0 --ctx 1024
PB=$PORT B=$SPID
send "$PA" "$TMP/reqs2.json" "$TMP/a2.json"
send "$PB" "$TMP/reqs2.json" "$TMP/b2.json"
compare "qwen3-tiny synth, lookup 8 vs 0" "$TMP/a2.json" "$TMP/b2.json" && ok || bad "qwen3-tiny outputs differ"
d=$(metric "$PA" tessera_lookup_draft_tokens_total)
a=$(metric "$PA" tessera_lookup_accepted_tokens_total)
echo "qwen3-tiny synth --lookup 8: $d tokens drafted, $a accepted"
[ "${a:-0}" -gt 0 ] && ok || bad "no draft accepted on the synth model: d=$d a=$a"
# the same requests one at a time (no batching with other slots) equal too
for i in 0 1 2; do
    python3 -c "import json,sys; json.dump([json.load(open(sys.argv[1]))[$i]], open(sys.argv[2], 'w'))" "$TMP/reqs2.json" "$TMP/one$i.json"
    send "$PA" "$TMP/one$i.json" "$TMP/alone$i.json"
    python3 -c "import json,sys; a=json.load(open(sys.argv[1]))[0]; b=json.load(open(sys.argv[2]))[$i]; sys.exit(a!=b)" \
        "$TMP/alone$i.json" "$TMP/b2.json" && ok || bad "request $i alone differs from the batched plain one"
done
kill -TERM "$A" "$B"
wait "$A" "$B"
finish
