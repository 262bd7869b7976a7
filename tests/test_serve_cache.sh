#!/usr/bin/env bash
# The prefix cache of tessera serve (src/serve/sched.c, docs/serve.md): the same multi-turn
# conversations (a long system prompt, each turn sending the whole history back) and a
# completion that extends an earlier prompt give byte-identical greedy text with the cache off
# (--cache-mb 0), on (the default) and on with a bound smaller than one prompt (kept entries
# cut to the bound, the least recently used evicted); /metrics and usage.prompt_tokens_details
# show the hits, and the cache's bytes stay within the bound.
set -u
NAME=serve_cache
source "$(dirname "$0")/lib.sh"

TOK="$SHARED/tokenizers/qwen3"
M="$TMP/q"
"$BIN" synth qwen3-0.6b-tiny "$M" --seed 5 --vocab 151936 --tokenizer "$TOK" >/dev/null || { bad "synth"; finish; exit; }
kill_at_exit

# start_server LOG ARGS...: as in test_serve.sh; sets PORT and SPID.
start_server() { serve_start "$1" "$M" --threads 2 --ctx 2048 --date 2026-03-14 "${@:2}"; }

# converse PORT OUT: two conversations of 4 turns, interleaved (each turn sends the history back
# with the replies so far), then two completions, the second extending the first's prompt;
# writes every reply and its usage to OUT, one JSON line each.
converse() {
    python3 - "$1" "$2" <<'PY'
import json, sys, urllib.request
port, out = sys.argv[1], open(sys.argv[2], "w")
def post(path, body):
    req = urllib.request.Request("http://127.0.0.1:%s%s" % (port, path), json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=120))
system = ("You are a careful assistant for a small bakery. " * 12) + "Answer briefly."
convs = [[{"role": "system", "content": system}], [{"role": "system", "content": system + " Be kind."}]]
for turn in range(4):
    for i, msgs in enumerate(convs):
        msgs.append({"role": "user", "content": "Question %d of conversation %d: what about bread number %d?" % (turn, i, turn * 7 + i)})
        j = post("/v1/chat/completions", {"messages": msgs, "max_tokens": 12, "temperature": 0,
                                          "chat_template_kwargs": {"enable_thinking": False}})
        reply = j["choices"][0]["message"]["content"]
        msgs.append({"role": "assistant", "content": reply})
        out.write(json.dumps({"conv": i, "turn": turn, "text": reply, "usage": j["usage"]}) + "\n")
doc = "The bakery opens at seven. " * 20
for p in (doc + "It closes at", doc + "It closes at nine, and on Sundays it"):
    j = post("/v1/completions", {"prompt": p, "max_tokens": 10, "temperature": 0})
    out.write(json.dumps({"text": j["choices"][0]["text"], "usage": j["usage"]}) + "\n")
PY
}
# field FILE KEY: the texts (or usages) of a conversation log, one line each
texts() { python3 -c 'import json,sys; [print(json.dumps(json.loads(l)["text"])) for l in open(sys.argv[1])]' "$1"; }
cached() { python3 -c 'import json,sys; print(" ".join(str(json.loads(l)["usage"]["prompt_tokens_details"]["cached_tokens"]) for l in open(sys.argv[1])))' "$1"; }
metric() { curl -sS -m 5 "http://127.0.0.1:$1/metrics" | sed -n "s/^$2 //p"; }

start_server "$TMP/off.log" --cache-mb 0 --parallel 2
P_OFF=$PORT
start_server "$TMP/on.log" --parallel 2
P_ON=$PORT
# 1 MiB: 512 positions of this model (2 KiB of KV each), less than the conversations' last turns
start_server "$TMP/small.log" --cache-mb 1 --parallel 2
P_SMALL=$PORT

converse "$P_OFF" "$TMP/off.jsonl" || bad "conversation without the cache"
converse "$P_ON" "$TMP/on.jsonl" || bad "conversation with the cache"
converse "$P_SMALL" "$TMP/small.jsonl" || bad "conversation with a small cache"

[ "$(wc -l <"$TMP/off.jsonl")" = 10 ] && ok || bad "expected 10 replies: $(cat "$TMP/off.jsonl")"
[ "$(texts "$TMP/on.jsonl")" = "$(texts "$TMP/off.jsonl")" ] && ok ||
    bad "replies differ with the cache: $(diff <(texts "$TMP/off.jsonl") <(texts "$TMP/on.jsonl"))"
[ "$(texts "$TMP/small.jsonl")" = "$(texts "$TMP/off.jsonl")" ] && ok ||
    bad "replies differ with a small cache: $(diff <(texts "$TMP/off.jsonl") <(texts "$TMP/small.jsonl"))"

# without the cache nothing is cached; with it every turn after the first of each conversation
# (and the second conversation's first turn: the template's start) and the second completion hit
c_off=$(cached "$TMP/off.jsonl")
[ "$c_off" = "0 0 0 0 0 0 0 0 0 0" ] && ok || bad "cached tokens without the cache: $c_off"
c_on=$(cached "$TMP/on.jsonl")
python3 - "$c_on" <<'PY' && ok || bad "cached tokens with the cache: $c_on"
import sys
c = [int(x) for x in sys.argv[1].split()]
assert c[0] == 0 and all(x > 100 for x in c[1:8]) and c[9] > 100, c
PY
[ "$(metric "$P_OFF" tessera_prefix_cache_hits_total)" = 0 ] && ok || bad "hits without the cache"
h=$(metric "$P_ON" tessera_prefix_cache_hits_total)
t=$(metric "$P_ON" tessera_prefix_cache_tokens_total)
sum=$(python3 -c 'import sys; print(sum(int(x) for x in sys.argv[1].split()))' "$c_on")
[ "$h" -ge 8 ] && [ "$t" = "$sum" ] && ok || bad "metrics: $h hits, $t tokens (usage says $sum)"
e=$(metric "$P_ON" tessera_prefix_cache_entries)
# a turn's prompt does not extend the previous one (Qwen3's template renders the reply to come
# with an empty think block, the history without it): each stays until evicted; the second
# completion replaces the first (its prefix)
[ "$e" = 9 ] && ok || bad "entries: $e, expected 8 turns and 1 completion"
b=$(metric "$P_SMALL" tessera_prefix_cache_bytes)
[ "$b" -gt 0 ] && [ "$b" -le 1048576 ] && ok || bad "small cache holds $b bytes"
[ "$(metric "$P_SMALL" tessera_prefix_cache_hits_total)" -ge 1 ] && ok || bad "no hit with the small cache"
grep -q 'prompt ([1-9][0-9]* cached)' "$TMP/on.log" && ok || bad "no cached count in the log: $(tail -3 "$TMP/on.log")"

# flags
expect 64 "--cache-mb" -- "$BIN" serve "$M" --cache-mb -1
for p in "${PIDS[@]}"; do kill -TERM "$p"; wait "$p" || bad "exit $? on SIGTERM"; done
PIDS=()
finish
