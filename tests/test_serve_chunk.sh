#!/usr/bin/env bash
# Chunked prefill in tessera serve (--prefill-chunk, docs/serve.md): long prompts (1,500+ tokens
# on stories260K, whose context is 2,048) arrive while other requests are decoding, with short
# ones, then prompts that extend a kept prefix (the prefix cache takes the start, the rest is
# prefilled in pieces) and one that repeats a kept prompt. Every reply must be byte-identical to
# the same request sent alone to a server with --prefill-chunk 0, one slot and no cache (and the
# greedy ones to `tessera run --temp 0`): with chunks of 16, 17 and 33 tokens (odd sizes: pieces
# end inside the GEMM and attention tiles), with the cache on and off, with lookup on and off,
# and with 0 (whole prompts) while others decode. The prompts' lengths are picked so that each
# chunk size meets a prompt of k * chunk + 1 tokens (the last piece would be 1 row: ts_sched_piece
# cuts it 2). /metrics counts the pieces, the log line says how many a prompt took and how many
# decode steps ran between them.
set -u
NAME=serve_chunk
source "$(dirname "$0")/lib.sh"

M="$SHARED/models/stories260K.gguf"
kill_at_exit

# The requests: phase 1 (decoders first, streamed; then long and short prompts at once), phase 2
# (prompts extending phase 1's), and for `tessera run` the greedy ones' prompts and -n.
python3 - "$BIN" "$M" "$TMP/reqs.json" "$TMP/run" <<'PY' || { bad "making the prompts"; finish; exit; }
import json, random, subprocess, sys
bin_, model, out, runf = sys.argv[1:5]
rng = random.Random(3)
names = ["Lily", "Tom", "Sue", "Ben", "Mia", "Max", "Anna", "Tim"]
things = ["ball", "cat", "dog", "kite", "box", "tree", "cake", "boat", "hat", "bird"]
acts = ["played with", "found", "saw", "liked", "wanted", "shared", "lost", "made"]
adj = ["big", "red", "little", "happy", "soft", "shiny", "old", "funny"]
words = " ".join("%s %s a %s %s." % (rng.choice(names), rng.choice(acts), rng.choice(adj), rng.choice(things))
                 for _ in range(1200)).split(" ")
def ntok(text):  # as the server counts: BOS, then the text
    r = subprocess.run([bin_, "tokenize", model, "--ids", "--bos"], input=text.encode(), capture_output=True,
                       check=True)
    return len(r.stdout.split())
def find(start, lo, want):
    """the first prefix of words[start:] from about lo tokens on whose length satisfies want"""
    k = int(lo / 2.4)
    while True:
        t = " ".join(words[start:start + k])
        n = ntok(t)
        if n >= lo and want(n):
            return t, n
        k += 1
longs, plen = [], {}
for i, c in enumerate((16, 17, 33)):  # k * c + 1 tokens, at different places in the text
    t, n = find(900 * i, 1500 + 40 * i, lambda n, c=c: n % c == 1)
    longs.append(t)
    plen[c] = n
# short ones of k * c + 1 tokens, and of 1, 2 and 4 tokens
shorts = [find(2900 + 40 * i, 2 * c + 1, lambda n, c=c: n % c == 1)[0] for i, c in enumerate((16, 17, 33))]
shorts += ["", "Lily", "Tom saw"]
dec = ["Once upon a time, there was a little girl named Lily.", "Tom and Sue went to the park.",
       "The little cat was sad because"]
def comp(p, n, stream=False, **kw):
    b = {"prompt": p, "max_tokens": n, "temperature": 0, "stream": stream}
    b.update(kw)
    return b
phase1_dec = [comp(p, 300, True) for p in dec]
phase1 = [comp(t, 24) for t in longs] + [comp(t, 16) for t in shorts]
phase1.append(comp(longs[1], 24, temperature=0.8, seed=5, top_k=20))  # seeded sampling, long
# phase 2: the first half of a long prompt then new text (a prefix-cache hit, the rest in pieces),
# a repeated long prompt (the cache gives all but 2 tokens), one extended by a sentence
half = longs[0][:len(longs[0]) // 2]
half = half[:half.rfind(" ")]
phase2 = [comp(half + " " + " ".join(words[3500:3700]), 20), comp(longs[2], 24),
          comp(longs[1] + " The end came soon.", 20), comp(dec[0], 12, True)]
json.dump({"dec": phase1_dec, "p1": phase1, "p2": phase2, "plen": plen}, open(out, "w"))
with open(runf, "w") as f:
    for b in (phase1[0], phase1[5], phase2[0]):
        f.write("%d\0%s\0" % (b["max_tokens"], b["prompt"]))
print("serve_chunk: long prompts of %s tokens" % ", ".join("%d (chunk %d)" % (n, c) for c, n in plen.items()))
PY

# workload PORT OUT [alone]: the requests of reqs.json; OUT: a JSON list of [text, finish_reason,
# prompt tokens, completion tokens] per request, phase 1's decoders first. Normally the decoders
# go first (streamed) and the rest of phase 1 is sent at once when each decoder has its first
# text, then phase 2 at once; "alone": one request at a time.
workload() {
    python3 - "$TMP/reqs.json" "$@" <<'PY'
import json, sys, threading, urllib.request
reqs, port, out = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
alone = len(sys.argv) > 4
def call(body, started=None):
    q = urllib.request.Request("http://127.0.0.1:%s/v1/completions" % port, data=json.dumps(body).encode(),
                               headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(q, timeout=120) as r:
            if not body.get("stream"):
                j = json.load(r)
                c = j["choices"][0]
                return [c["text"], c["finish_reason"], j["usage"]["prompt_tokens"], j["usage"]["completion_tokens"]]
            text, why, usage = "", None, None
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                j = json.loads(line[6:])
                if j.get("usage"):
                    usage = j["usage"]
                for c in j.get("choices", []):
                    text += c.get("text", "")
                    why = c.get("finish_reason") or why
                if started and text:
                    started.set()
            return [text, why, usage and usage["prompt_tokens"], usage and usage["completion_tokens"]]
    except Exception as e:
        return ["ERROR %r" % e, None, None, None]
    finally:
        if started:
            started.set()
every = reqs["dec"] + reqs["p1"] + reqs["p2"]
for b in every:
    if b.get("stream"):
        b["stream_options"] = {"include_usage": True}
res = [None] * len(every)
def run(i, ev=None):
    res[i] = call(every[i], ev)
if alone:
    for i in range(len(every)):
        run(i)
else:
    nd, n1 = len(reqs["dec"]), len(reqs["p1"])
    evs = [threading.Event() for _ in range(nd)]
    ts = [threading.Thread(target=run, args=(i, evs[i])) for i in range(nd)]
    [t.start() for t in ts]
    [e.wait(60) for e in evs]
    t1 = [threading.Thread(target=run, args=(nd + i,)) for i in range(n1)]
    [t.start() for t in t1]
    [t.join() for t in t1]
    t2 = [threading.Thread(target=run, args=(nd + n1 + i,)) for i in range(len(reqs["p2"]))]
    [t.start() for t in t2]
    [t.join() for t in t2 + ts]
json.dump(res, open(out, "w"))
PY
}

# compare NAME A B: request by request
compare() {
    python3 - "$@" <<'PY'
import json, sys
name, a, b = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
bad = [i for i in range(len(b)) if a[i] != b[i] or a[i][1] is None]
for i in bad[:3]:
    print("FAIL: %s: request %d differs:\n  got:   %r\n  alone: %r" % (name, i, a[i], b[i]), file=sys.stderr)
print("%s: %d of %d replies identical to the requests alone" % (name, len(b) - len(bad), len(b)))
sys.exit(1 if bad else 0)
PY
}
metric() { curl -sS -m 5 "http://127.0.0.1:$1/metrics" | sed -n "s/^$2 //p"; }

# the reference: one request at a time, whole prompts, no cache, no lookup
serve_start "$TMP/ref.log" "$M" --threads 1 --parallel 1 --prefill-chunk 0 --cache-mb 0 --lookup 0
workload "$PORT" "$TMP/ref.json" alone || bad "reference workload"
kill -TERM "$SPID"
wait "$SPID" || bad "reference server exit $?"
# every reply came; the decoders were still generating when the long prompts came (300 tokens)
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(any(x[1] is None for x in r) or
    any(x[1] != "length" for x in r[:3]))' "$TMP/ref.json" && ok || bad "reference replies: $(head -c 600 "$TMP/ref.json")"

# the greedy long and short ones equal `tessera run --temp 0`
python3 - "$TMP/ref.json" "$TMP/run" "$BIN" "$M" <<'PY' && ok || bad "serve != run"
import json, subprocess, sys
res, raw, bin_, m = json.load(open(sys.argv[1])), open(sys.argv[2]).read().split("\0")[:-1], sys.argv[3], sys.argv[4]
idx = [3, 8, len(res) - 4]  # phase1[0], phase1[5] (after the 3 decoders), phase2[0]
bad = 0
for j, i in enumerate(idx):
    out = subprocess.run([bin_, "run", m, "-p", raw[2 * j + 1], "-n", raw[2 * j], "--temp", "0", "--threads", "1"],
                         capture_output=True).stdout.decode()
    out = out[:-1] if out.endswith("\n") else out
    if out != res[i][0]:
        bad += 1
        print("FAIL: request %d: run %r != serve %r" % (i, out, res[i][0]), file=sys.stderr)
sys.exit(1 if bad else 0)
PY

# check_server NAME CHUNK LOG PORT: /metrics and the log after the workload
check_server() {
    local name=$1 chunk=$2 log=$3 port=$4
    local pieces tokens prompt cached gaps
    pieces=$(metric "$port" tessera_prefill_chunks_total)
    tokens=$(metric "$port" tessera_prefill_tokens_total)
    prompt=$(metric "$port" tessera_prompt_tokens_total)
    cached=$(metric "$port" tessera_prefix_cache_tokens_total)
    gaps=$(metric "$port" tessera_inter_token_seconds_count)
    echo "$name: $pieces pieces, $tokens tokens prefilled, $cached from the cache, $gaps inter-token gaps"
    [ "$tokens" = $((prompt - cached)) ] && ok || bad "$name: prefilled $tokens != prompt $prompt - cached $cached"
    [ "${gaps:-0}" -gt 100 ] && ok || bad "$name: inter-token gaps $gaps"
    local n
    n=$(python3 -c 'import json,sys; print(sum(len(v) for k, v in json.load(open(sys.argv[1])).items() if k != "plen"))' \
        "$TMP/reqs.json")
    if [ "$chunk" = 0 ]; then
        [ "$pieces" = "$n" ] && ok || bad "$name: $pieces pieces for $n prompts"
        grep -q "(prefill: " "$log" && bad "$name: a prompt in pieces: $(grep -m1 "(prefill: " "$log")" || ok
    else
        # each piece at most chunk + 1 tokens; the long prompts took many, and decode steps of
        # the decoders ran between them
        [ $((pieces * (chunk + 1))) -ge "$tokens" ] && [ "$pieces" -gt $((n + 3 * 1400 / (chunk + 1))) ] && ok ||
            bad "$name: $pieces pieces for $tokens tokens"
        grep -q "(prefill: [0-9]* pieces, [1-9][0-9]* decode steps between)" "$log" && ok ||
            bad "$name: no prompt's prefill let decode steps through: $(grep "(prefill" "$log" | head -3)"
    fi
}

for cfg in "16 --prefill-chunk 16" "17 --prefill-chunk 17 --cache-mb 0" "33 --prefill-chunk 33 --lookup 0" \
    "0 --prefill-chunk 0"; do
    set -- $cfg
    chunk=$1
    shift
    serve_start "$TMP/c$chunk.log" "$M" --threads 1 --parallel 6 "$@"
    workload "$PORT" "$TMP/c$chunk.json" || bad "workload $*"
    compare "$*" "$TMP/c$chunk.json" "$TMP/ref.json" && ok || bad "$*: replies differ from alone"
    check_server "$*" "$chunk" "$TMP/c$chunk.log" "$PORT"
    kill -TERM "$SPID"
    wait "$SPID" || bad "$* exit $?"
done
# the cache served phase 2 where it was on
grep -q "prompt ([1-9][0-9]* cached)" "$TMP/c16.log" && ok || bad "no cache hit with chunk 16"
grep -q "prompt ([1-9][0-9]* cached)" "$TMP/c17.log" && bad "a cache hit with --cache-mb 0" || ok
grep -q "prefill chunk 16, lookup 8, weights " "$TMP/c16.log" && ok || bad "start-up line: $(head -3 "$TMP/c16.log")"

# flags
expect 64 "--prefill-chunk 1" -- "$BIN" serve "$M" --prefill-chunk 1
expect 64 "--prefill-chunk" -- "$BIN" serve "$M" --prefill-chunk -3
PIDS=()
finish
