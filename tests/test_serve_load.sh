#!/usr/bin/env bash
# tessera serve under load (docs/serve.md, Tests): 16 clients x 8 requests at once, a seeded mix
# of completions and chats, prompts of 1 to a few hundred tokens, max_tokens 1 to 100, greedy and
# seeded sampling, streamed and not, stop strings, and about 1 in 8 clients leaving in the middle
# of a reply (tests/serve_load.py). Two servers take each round together, stories260K (trained;
# completions) and a synth Qwen3-tiny with the real tokenizer and chat template (chats and
# completions), fewer slots than clients so requests queue. Round 1: stories260K with 8 slots,
# prompt lookup (the default) and the default prefix cache, the synth with 4 slots, no lookup
# and a 1 MiB cache that evicts; round 2 (another seed) the other way round: stories260K with 3
# slots, the synth with 8 and two threads. Every reply that completed must equal, byte for byte
# (text, finish_reason, usage), the same request sent alone afterwards, not streamed; some also
# equal `tessera run`. After the load /metrics shows no slot held, no queue, 499 for each client
# that left, no other error status, little generated after the clients left; a lone client
# leaving frees its slot at once; the logs have no error; SIGTERM exits 0. Round 3: SIGTERM a
# third into the load; every answer begun is finished (the replies in flight whole and equal to
# the same request alone, the others a whole 503 or a closed socket), no request is dropped
# after it was taken in (no 499 but the clients that left), exit 0. Under ASan+UBSan (detected
# from the binary) the clients send 4 requests each instead of 8 (TS_LOAD_PER sets it).
set -u
NAME=serve_load
source "$(dirname "$0")/lib.sh"
HERE=$(dirname "$0")

kill_at_exit
T0=$(date +%s.%N)

PER=8
if [ -z "${TS_LOAD_PER:-}" ] && grep -qa __asan_init "$BIN"; then PER=4; fi
PER=${TS_LOAD_PER:-$PER}
echo "serve_load: 16 clients x $PER requests a round"

S="$SHARED/models/stories260K.gguf"
Q="$TMP/q"
"$BIN" synth qwen3-0.6b-tiny "$Q" --seed 5 --vocab 151936 --tokenizer "$SHARED/tokenizers/qwen3" >/dev/null || { bad "synth"; finish; exit; }

REF=(--threads 1 --parallel 1 --cache-mb 0 --lookup 0)
# start4 DIR STORY_ARGS CHAT_ARGS: the two loaded servers and their references (plain decoding,
# one request at a time, nothing kept from the load); sets PS PC PSR PCR (ports), SS SC SSR SCR
start4() {
    local d=$1
    mkdir -p "$d"
    read -ra sargs <<<"$2"
    read -ra cargs <<<"$3"
    serve_start "$d/story.log" "$S" "${sargs[@]}"
    PS=$PORT SS=$SPID
    serve_start "$d/chat.log" "$Q" --ctx 2048 "${cargs[@]}"
    PC=$PORT SC=$SPID
    serve_start "$d/story-ref.log" "$S" "${REF[@]}"
    PSR=$PORT SSR=$SPID
    serve_start "$d/chat-ref.log" "$Q" --ctx 2048 "${REF[@]}"
    PCR=$PORT SCR=$SPID
}

# stop WHAT PID...: SIGTERM, and each exits 0
stop() {
    local what=$1 p rc
    shift
    kill -TERM "$@" 2>/dev/null
    for p in "$@"; do
        wait "$p"
        rc=$?
        [ $rc = 0 ] && ok || bad "$what: a server exited $rc after SIGTERM"
    done
}

# round SEED STORY_ARGS CHAT_ARGS: one round in $TMP/rSEED
round() {
    local seed=$1 d="$TMP/r$1"
    start4 "$d" "$2" "$3"
    python3 "$HERE/serve_load.py" --server "story=$PS:story:$PSR" --server "chat=$PC:chat:$PCR" --seed "$seed" \
        --clients 16 --per "$PER" --out "$d" && ok || bad "round $seed: the load (above)"
    check_run "$d"
    for p in "$PS" "$PC"; do # still answering
        out=$(curl -sS -m 10 "http://127.0.0.1:$p/health")
        grep -q '"status":"ok",.*"active":0,"queued":0' <<<"$out" && ok || bad "round $seed: /health after the load: $out"
    done
    stop "round $seed" "$SS" "$SC" "$SSR" "$SCR"
    check_logs '200\|499' "$d"/*.log
}

# term_round SEED STORY_ARGS CHAT_ARGS: SIGTERM to the loaded servers a third into the load;
# each answer begun is finished (the requests in flight go on to their end and equal the same
# request alone; the others get a whole 503 or find the socket closed), and they exit 0
term_round() {
    local seed=$1 d="$TMP/t$1"
    start4 "$d" "$2" "$3"
    python3 "$HERE/serve_load.py" --server "story=$PS:story:$PSR" --server "chat=$PC:chat:$PCR" --seed "$seed" \
        --clients 16 --per "$PER" --term "$SS,$SC" --out "$d" && ok || bad "SIGTERM under load: (above)"
    stop "SIGTERM under load" "$SS" "$SC"
    stop "SIGTERM under load, the references" "$SSR" "$SCR"
    # a 499 is a client that left; one more would be a request taken in and then dropped
    local n499 left
    n499=$(cat "$d/story.log" "$d/chat.log" | grep -c '^tessera serve: POST .* 499, ')
    left=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['left'])" "$d/summary.json")
    [ "$n499" -le "$left" ] && ok || bad "SIGTERM under load: $n499 requests logged 499, $left clients left"
    check_logs '200\|499\|503' "$d"/*.log
}

# check_run DIR: some of the round's requests equal `tessera run` (its own decode loop, one
# sequence): greedy and seeded, with stop strings, completions and single-turn chats
check_run() {
python3 - "$1" "$BIN" "$S" "$Q" <<'PY' && ok || bad "$1: serve under load != tessera run"
import json, subprocess, sys
d, bin_, story, chat = sys.argv[1:]
mix, load = json.load(open(d + "/requests.json")), json.load(open(d + "/load.json"))
flags = {"temperature": "--temp", "seed": "--seed", "top_k": "--top-k", "top_p": "--top-p", "min_p": "--min-p",
         "repetition_penalty": "--repeat-penalty"}
picked = {"story": [], "chat": []}
for r in mix:
    b = r["body"]
    if r["leave"] or len(picked[r["server"]]) >= 4:
        continue
    args = [story if r["server"] == "story" else chat, "--ctx", "2048"]
    if not r["chat"]:
        p = b["prompt"] if isinstance(b["prompt"], str) else b["prompt"][0]
        if not p:
            continue
        args += ["-p", p]
    else:
        m = b["messages"]
        if [x["role"] for x in m] not in (["user"], ["system", "user"]):
            continue
        args += ["--chat", "-p", m[-1]["content"]] + (["--system", m[0]["content"]] if len(m) == 2 else [])
        if "chat_template_kwargs" in b:
            args.append("--no-think")
    for k, f in flags.items():
        if k in b:
            args += [f, str(b[k])]
    stops = b.get("stop", [])
    for st in [stops] if isinstance(stops, str) else stops:
        args += ["--stop", st]
    picked[r["server"]].append((r["i"], args + ["-n", str(b["max_tokens"]), "--threads", "1"]))
bad = 0
for name, runs in picked.items():
    if not runs:
        bad += 1
        print("FAIL: no request of %s to compare with tessera run" % name, file=sys.stderr)
    for i, args in runs:
        out = subprocess.run([bin_, "run"] + args, capture_output=True).stdout.decode()
        out = out[:-1] if out.endswith("\n") else out  # run ends its output with a newline
        if out != load[i]["text"]:
            bad += 1
            print("FAIL: request %d: tessera run %s: %r != serve %r" % (i, args[1:], out, load[i]["text"]), file=sys.stderr)
print("%d requests equal to tessera run" % sum(len(v) for v in picked.values()))
sys.exit(1 if bad else 0)
PY
}

# check_logs STATUSES LOG...: start-up lines, one line per request (STATUSES, a grep pattern:
# 200, 499 for a client that left, 503 while stopping), libmicrohttpd's notes on the connections
# those clients dropped, the drain; nothing else
check_logs() {
local st=$1 log
shift
for log in "$@"; do
    odd=$(grep -v -e "^tessera serve: POST /v1/\\(chat/\\)\\?completions \\($st\\), [0-9]* prompt" \
        -e '^tessera serve: \(model\|listening\|note: the model has no chat template\)' \
        -e '^tessera serve: libmicrohttpd: Failed to send the [a-z ]* for the request for `/v1/[a-z/]*'"'"'\. Error: \(The connection was forcibly closed by remote peer\|The socket is no longer available for sending\)$' \
        -e '^tessera serve: libmicrohttpd: \(Application reported internal error, closing connection\|Closing connection (application error generating response)\)\.$' \
        -e "^tessera serve: SIGTERM: finishing the requests in flight$" -e "^tessera serve: stopped$" "$log")
    [ -z "$odd" ] && ok || bad "$log: unexpected lines: $(head -20 <<<"$odd")"
done
}

round 7 "--threads 1 --parallel 8" "--threads 1 --parallel 4 --lookup 0 --cache-mb 1"
round 8 "--threads 1 --parallel 3 --lookup 0 --cache-mb 1" "--threads 2 --parallel 8 --lookup 8"
term_round 9 "--threads 1 --parallel 4" "--threads 1 --parallel 2"
echo "serve_load: $(python3 -c "import time,sys; print('%.1f' % (time.time() - float(sys.argv[1])))" "$T0") s in all"
finish
