#!/usr/bin/env bash
# Chunked prefill in tessera serve (issue 15): how long a decoding stream stalls while another
# request's long prompt is prefilled, and that request's time to first token, with whole-prompt
# prefill (--prefill-chunk 0) and in pieces (default 256).
#
#   scripts/bench_chunk.sh [--bin build/tessera] [--model DIR] [--trials N] [--threads N]
#                          [--chunks "0 256"] [--words N]
#
# DIR (default bench-models/qwen3-0.6b, written by `tessera synth qwen3-0.6b` with the Qwen3
# tokenizer when missing) is served by one server per chunk size, each with --parallel 2,
# --lookup 0 (a decode step is one token: the gaps are steps) and no prefix cache. A trial, on
# each server in turn: a streamed completion starts decoding; once it has streamed 8 tokens, a
# fresh prompt of about N words (default 1,750: about 2,000 tokens) arrives, streamed with
# max_tokens 2; when its first token is out the decoder is dropped. Printed per trial: the
# decoder's longest gap between two tokens from the long prompt's arrival to its first token,
# its median gap before the arrival (a plain decode step) and its tokens meanwhile, the long
# prompt's time to first token, and the ratio of the two (the machine's speed, which other work
# on it changes from trial to trial, cancels out of it); then medians over the trials.
set -eu
BIN=build/tessera
MODEL=bench-models/qwen3-0.6b
TRIALS=3
THREADS=
CHUNKS="0 256"
WORDS=1750
while [ $# -gt 0 ]; do
    case $1 in
    --bin) BIN=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --trials) TRIALS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --chunks) CHUNKS=$2; shift 2 ;;
    --words) WORDS=$2; shift 2 ;;
    *) echo "usage: $0 [--bin B] [--model DIR] [--trials N] [--threads N] [--chunks \"0 256\"] [--words N]" >&2
       exit 64 ;;
    esac
done
TOK=${TS_REALDATA:-build/fixtures-shared}/tokenizers/qwen3
if [ ! -f "$MODEL/config.json" ]; then
    mkdir -p "$(dirname "$MODEL")"
    "$BIN" synth qwen3-0.6b "$MODEL" --tokenizer "$TOK" >&2
fi
DIR=$(mktemp -d)
SPIDS=()
trap 'for p in "${SPIDS[@]}"; do kill $p 2>/dev/null; done; rm -rf "$DIR"' EXIT
PORTS=()
for c in $CHUNKS; do
    "$BIN" serve "$MODEL" --port 0 --parallel 2 --ctx 2560 --lookup 0 --cache-mb 0 --prefill-chunk "$c" --quiet \
        ${THREADS:+--threads $THREADS} 2>"$DIR/$c.log" &
    SPIDS+=($!)
    port=
    for _ in $(seq 600); do
        port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\)$|\1|p' "$DIR/$c.log")
        [ -n "$port" ] && break
        kill -0 "${SPIDS[-1]}" 2>/dev/null || { cat "$DIR/$c.log" >&2; exit 1; }
        sleep 0.1
    done
    PORTS+=("$c:$port")
done
python3 - "$TRIALS" "$WORDS" "${PORTS[@]}" <<'PY'
import json, random, statistics, sys, threading, time, urllib.request
trials, nwords, servers = int(sys.argv[1]), int(sys.argv[2]), [a.split(":") for a in sys.argv[3:]]

def stream(port, prompt, max_tokens, times, stop=None):
    """a streamed completion; appends the time of each chunk with text to times"""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    q = urllib.request.Request("http://127.0.0.1:%s/v1/completions" % port, body, {"Content-Type": "application/json"})
    usage = None
    with urllib.request.urlopen(q, timeout=900) as r:
        for line in r:
            if stop is not None and stop.is_set():
                break  # closing the connection cancels the request
            line = line.decode().strip()
            if not line.startswith("data: {"):
                continue
            j = json.loads(line[6:])
            if j.get("usage"):
                usage = j["usage"]
            if any(c.get("text") for c in j.get("choices", [])):
                times.append(time.perf_counter())
    return usage

words = ("bread flour water salt yeast oven crust crumb dough proof knead bake loaf rye wheat starter butter milk "
         "honey seed").split()
res = {c: [] for c, _ in servers}
for c, port in servers:  # warm up: weights paged in
    stream(port, "warm up", 2, [])
for t in range(trials):
    for c, port in servers:
        rng = random.Random(1000 * t + int(c))
        prompt = " ".join(rng.choice(words) for _ in range(nwords)) + ".\nSummary:"
        dec, stop = [], threading.Event()
        th = threading.Thread(target=stream, args=(port, "Once upon a time", 2000, dec, stop))
        th.start()
        while len(dec) < 8:
            time.sleep(0.01)
        t_send = time.perf_counter()
        first = []
        usage = stream(port, prompt, 2, first)
        t_first = first[0]
        time.sleep(0.5)
        stop.set()
        th.join()
        before = [b - a for a, b in zip(dec, dec[1:]) if b <= t_send]
        # gaps that overlap the long prompt's wait: the one spanning its arrival included
        during = [b - a for a, b in zip(dec, dec[1:]) if b > t_send and a < t_first]
        n_during = sum(1 for x in dec if t_send < x <= t_first)
        r = (max(during), statistics.median(before), t_first - t_send, usage["prompt_tokens"], n_during)
        res[c].append(r)
        print("chunk %4s trial %d: longest decode gap %6.2f s (plain step %.3f s, %d tokens while the long prompt "
              "waited); long prompt of %d tokens: first token after %6.2f s; gap / that %.2f" % (
                  c, t, r[0], r[1], r[4], r[3], r[2], r[0] / r[2]), flush=True)
for c, _ in servers:
    g = [r[0] for r in res[c]]
    f = [r[2] for r in res[c]]
    print("--prefill-chunk %4s, median of %d: longest gap %.2f s (%.2f-%.2f), plain step %.3f s, time to first token "
          "%.2f s (%.2f-%.2f), gap / time to first token %.2f" % (
              c, trials, statistics.median(g), min(g), max(g), statistics.median(r[1] for r in res[c]),
              statistics.median(f), min(f), max(f), statistics.median(r[0] / r[2] for r in res[c])))
PY
