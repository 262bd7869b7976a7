#!/usr/bin/env bash
# tessera serve side by side with llama.cpp's llama-server on the same GGUF file and the same
# concurrent load (issue 15: requests/s and p50/p99 time to first token; the goal is to be ahead).
#
#   scripts/bench_serve_sbs.sh --model FILE.gguf --llama-server PATH [--bin build/tessera]
#       [--rounds 2] [--clients 8] [--requests 4] [--parallel 8] [--ctx 1024] [--threads 2]
#       [--prompt-words 20:200] [--max-tokens 16:48] [--prefix-words 0] [--tessera-args "..."]
#       [--out DIR]
#
# Each round starts one server, warms it with one request, runs scripts/serve_load.py (CLIENTS
# closed-loop clients x REQUESTS streamed greedy completions each, prompts and lengths from a
# fixed seed, so both servers get the same requests), stops it, then does the same with the
# other; the order alternates between rounds so a drifting machine lands on both. Both servers
# get the same slots, per-slot context and threads (llama-server's -c is shared by its slots).
# llama.cpp is built outside this repository; nothing here needs it otherwise.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=build/tessera MODEL= LLAMA= ROUNDS=2 CLIENTS=8 REQUESTS=4 PARALLEL=8 CTX=1024 THREADS=2
PWORDS=20:200 MAXTOK=16:48 PREFIX=0 TARGS= OUT=
while [ $# -gt 0 ]; do
    case $1 in
    --bin) BIN=$2 ;; --model) MODEL=$2 ;; --llama-server) LLAMA=$2 ;; --rounds) ROUNDS=$2 ;;
    --clients) CLIENTS=$2 ;; --requests) REQUESTS=$2 ;; --parallel) PARALLEL=$2 ;; --ctx) CTX=$2 ;;
    --threads) THREADS=$2 ;; --prompt-words) PWORDS=$2 ;; --max-tokens) MAXTOK=$2 ;;
    --prefix-words) PREFIX=$2 ;; --tessera-args) TARGS=$2 ;; --out) OUT=$2 ;;
    *) echo "usage: see the head of $0" >&2; exit 64 ;;
    esac
    shift 2
done
[ -f "$MODEL" ] || { echo "$0: --model FILE.gguf is required (the same file for both servers)" >&2; exit 64; }
[ -x "$LLAMA" ] || { echo "$0: --llama-server PATH (llama.cpp's build/bin/llama-server) is required" >&2; exit 64; }
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
PORT=$((20000 + RANDOM % 20000))
SPID=
trap '[ -n "$SPID" ] && kill $SPID 2>/dev/null; true' EXIT

up() { # waits for /health to answer 200
    for _ in $(seq 1200); do
        curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
        kill -0 "$SPID" 2>/dev/null || return 1
        sleep 0.25
    done
    return 1
}
load() { # NAME ROUND
    local f=$OUT/$1-r$2.json
    python3 "$HERE/serve_load.py" --url "http://127.0.0.1:$PORT" --clients 1 --requests 1 \
        --prompt-words 8 --max-tokens 4 --seed 999 >/dev/null
    python3 "$HERE/serve_load.py" --url "http://127.0.0.1:$PORT" --clients "$CLIENTS" \
        --requests "$REQUESTS" --prompt-words "$PWORDS" --max-tokens "$MAXTOK" \
        --prefix-words "$PREFIX" --seed 1 >"$f"
    echo "$(date +%T) round $2 $1 load $(cut -d' ' -f1 /proc/loadavg): $(cat "$f")"
}
run_tessera() {
    PORT=$((PORT + 1))
    # shellcheck disable=SC2086
    "$BIN" serve "$MODEL" --port "$PORT" --parallel "$PARALLEL" --ctx "$CTX" --threads "$THREADS" \
        $TARGS 2>"$OUT/tessera.log" &
    SPID=$!
    up || { cat "$OUT/tessera.log" >&2; exit 1; }
    load tessera "$1"
    kill -TERM $SPID; wait $SPID || true; SPID=
}
run_llama() {
    PORT=$((PORT + 1))
    "$LLAMA" -m "$MODEL" --port "$PORT" -np "$PARALLEL" -c $((PARALLEL * CTX)) -t "$THREADS" \
        -tb "$THREADS" >"$OUT/llama.log" 2>&1 &
    SPID=$!
    up || { tail -20 "$OUT/llama.log" >&2; exit 1; }
    load llama "$1"
    kill -TERM $SPID; wait $SPID || true; SPID=
}
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then run_tessera "$r"; run_llama "$r"; else run_llama "$r"; run_tessera "$r"; fi
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
get = lambda n, r: json.load(open("%s/%s-r%d.json" % (out, n, r)))
keys = ["requests_per_s", "ttft_p50_s", "ttft_p99_s", "completion_tokens_per_s"]
for r in range(1, rounds + 1):
    t, l = get("tessera", r), get("llama", r)
    print("round %d: " % r + ", ".join("%s %.3f vs %.3f (%.2fx)" % (k, t[k], l[k],
          (t[k] / l[k]) if not k.startswith("ttft") else (l[k] / t[k])) for k in keys)
          + "; tokens %d+%d vs %d+%d" % (t["prompt_tokens"], t["completion_tokens"], l["prompt_tokens"],
                                         l["completion_tokens"]))
for k in keys:
    t = statistics.median(get("tessera", r)[k] for r in range(1, rounds + 1))
    l = statistics.median(get("llama", r)[k] for r in range(1, rounds + 1))
    better = t / l if not k.startswith("ttft") else l / t
    print("median %-24s tessera %8.3f  llama-server %8.3f  tessera ahead by %.2fx" % (k, t, l, better))
PY
