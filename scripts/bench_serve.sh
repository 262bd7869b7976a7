#!/usr/bin/env bash
# Time to first token of tessera serve with and without the prefix cache (issue 15: a turn
# whose ~1,000-token prefix is cached should take <= 1/10 of the cold time).
#
#   scripts/bench_serve.sh [--bin build/tessera] [--model DIR] [--trials N] [--threads N]
#
# DIR (default bench-models/qwen3-0.6b, written by `tessera synth qwen3-0.6b` with the Qwen3
# tokenizer when missing) is served with --parallel 1. Each trial sends a fresh ~1,000-token
# prefix with one question (cold: nothing of it is cached; only the chat template's opening
# could be) and then the same prefix with another question (the prefix is cached), both as
# non-streamed completions of max_tokens 1, so the request's time is its time to first token
# (prefill, one sample, the response). Cold and cached requests alternate, so the machine's
# noise lands on both; medians and the ratio are printed.
set -eu
BIN=build/tessera
MODEL=bench-models/qwen3-0.6b
TRIALS=3
THREADS=
while [ $# -gt 0 ]; do
    case $1 in
    --bin) BIN=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --trials) TRIALS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    *) echo "usage: $0 [--bin B] [--model DIR] [--trials N] [--threads N]" >&2; exit 64 ;;
    esac
done
TOK=${TS_REALDATA:-build/fixtures-shared}/tokenizers/qwen3
if [ ! -f "$MODEL/config.json" ]; then
    mkdir -p "$(dirname "$MODEL")"
    "$BIN" synth qwen3-0.6b "$MODEL" --tokenizer "$TOK" >&2
fi
LOG=$(mktemp)
"$BIN" serve "$MODEL" --port 0 --parallel 1 --ctx 2048 ${THREADS:+--threads $THREADS} 2>"$LOG" &
SPID=$!
trap 'kill $SPID 2>/dev/null; rm -f "$LOG"' EXIT
PORT=
for _ in $(seq 600); do
    PORT=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\)$|\1|p' "$LOG")
    [ -n "$PORT" ] && break
    kill -0 $SPID 2>/dev/null || { cat "$LOG" >&2; exit 1; }
    sleep 0.1
done
python3 - "$PORT" "$TRIALS" <<'PY'
import json, random, statistics, sys, time, urllib.request
port, trials = sys.argv[1], int(sys.argv[2])
def post(prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0}).encode()
    req = urllib.request.Request("http://127.0.0.1:%s/v1/completions" % port, body, {"Content-Type": "application/json"})
    t = time.perf_counter()
    j = json.load(urllib.request.urlopen(req, timeout=600))
    return time.perf_counter() - t, j["usage"]
words = "bread flour water salt yeast oven crust crumb dough proof knead bake loaf rye wheat starter".split()
post("warm up")
cold, hot = [], []
for t in range(trials):
    rng = random.Random(t)
    prefix = " ".join(rng.choice(words) for _ in range(950)) + ".\n"
    tc, uc = post(prefix + "Question: which bread is best?")
    th, uh = post(prefix + "Question: how long does rye take to proof?")
    cold.append(tc), hot.append(th)
    print("trial %d: cold %.3f s (%d prompt tokens, %d cached), cached %.3f s (%d prompt tokens, %d cached)" % (
        t, tc, uc["prompt_tokens"], uc["prompt_tokens_details"]["cached_tokens"], th, uh["prompt_tokens"],
        uh["prompt_tokens_details"]["cached_tokens"]), flush=True)
c, h = statistics.median(cold), statistics.median(hot)
print("time to first token, median of %d: cold %.3f s, cached prefix %.3f s: %.1fx faster (ratio %.3f; goal <= 0.1)"
      % (trials, c, h, c / h, h / c))
PY
