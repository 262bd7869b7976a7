#!/usr/bin/env bash
# tessera serve end to end over loopback with curl, on a synth Qwen3-shaped model carrying the
# real Qwen3 tokenizer and chat template: /health, /v1/models, greedy chat and completion (plain
# and streamed) equal to `tessera run` with the same prompt, stop strings, finish_reason length,
# usage, every error status, the API key, 8 concurrent clients each equal to the same request
# alone, a client leaving mid-stream (its slot freed, the next requests fine), a full queue, and
# SIGTERM draining a request in flight before exit 0.
set -u
NAME=serve
source "$(dirname "$0")/lib.sh"

TOK="$SHARED/tokenizers/qwen3"
M="$TMP/q"
"$BIN" synth qwen3-0.6b-tiny "$M" --seed 5 --vocab 151936 --tokenizer "$TOK" >/dev/null || { bad "synth"; finish; exit; }
KEY=sekret-key
kill_at_exit

# start_server LOG ARGS...: starts `tessera serve M --port 0 ARGS`, waits for its "listening on"
# line and sets PORT and SPID.
start_server() { serve_start "$1" "$M" --threads 2 "${@:2}"; }

start_server "$TMP/s1.log" --parallel 4 --ctx 2048 --api-key "$KEY" --max-body 65536 --max-tokens-limit 2000 --date 2026-03-14
URL=http://127.0.0.1:$PORT
AUTH=(-H "Authorization: Bearer $KEY")
# A server copies the weights into huge pages unless told (it lives long enough to repay it).
grep -q "^tessera serve: model .*, weights [0-9]* MB copied at load, KV cache f32$" "$TMP/s1.log" && ok || bad "serve did not copy: $(cat "$TMP/s1.log")"
# req PATH BODY: POST with the key; prints the body, then "HTTP <code>" on its own line
req() { curl -sS -m 30 "${AUTH[@]}" -H 'Content-Type: application/json' -w '\nHTTP %{http_code}\n' "$URL$1" -d "$2"; }
code_of() { sed -n 's/^HTTP \([0-9]*\)$/\1/p' <<<"$1"; }
body_of() { sed '/^HTTP [0-9]*$/d' <<<"$1"; }
# expect_status CODE PATTERN OUTPUT: the status, and a substring of the body
expect_status() {
    local got
    got=$(code_of "$3")
    if [ "$got" != "$1" ]; then bad "status $got, expected $1: $3"; return; fi
    if [ -n "$2" ] && ! grep -qF -- "$2" <<<"$3"; then bad "body lacks '$2': $3"; return; fi
    ok
}
# text FILE [OUT]: the generated text of a JSON response or an SSE stream, then a line
# "finish=R usage=P,C,T"; with OUT, the text goes there byte for byte and only that line is printed
text() {
    python3 - "$@" <<'PY'
import json, sys
raw = open(sys.argv[1], encoding="utf-8").read()
raw = "\n".join(l for l in raw.split("\n") if not l.startswith("HTTP "))
out, fin, usage = "", None, None
if raw.lstrip().startswith("data:"):
    events = [e for e in raw.split("\n\n") if e.strip()]
    assert events[-1].strip() == "data: [DONE]", "stream does not end with [DONE]: %r" % events[-1:]
    for e in events[:-1]:
        assert e.startswith("data: "), e
        j = json.loads(e[6:])
        if j.get("usage"): usage = j["usage"]
        for c in j["choices"]:
            out += c.get("text") or c.get("delta", {}).get("content") or ""
            fin = c.get("finish_reason") or fin
else:
    j = json.loads(raw)
    c = j["choices"][0]
    out = c["text"] if "text" in c else c["message"]["content"]
    fin, usage = c["finish_reason"], j["usage"]
if len(sys.argv) > 2:
    open(sys.argv[2], "w", encoding="utf-8").write(out)
else:
    sys.stdout.write(out + "\n")
u = "%d,%d,%d" % (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) if usage else "-"
sys.stdout.write("finish=%s usage=%s\n" % (fin, u))
PY
}

# ---- health, models, metrics ----
out=$(curl -sS -m 5 "$URL/health")
grep -q '"status":"ok","slots":4' <<<"$out" && ok || bad "/health: $out"
out=$(curl -sS -m 5 "${AUTH[@]}" "$URL/v1/models")
grep -q '"id":"q","object":"model"' <<<"$out" && ok || bad "/v1/models: $out"
out=$(curl -sS -m 5 "${AUTH[@]}" "$URL/metrics")
grep -q '^tessera_slots 4$' <<<"$out" && grep -q '^tessera_prefix_cache_hits_total 0$' <<<"$out" && ok || bad "/metrics: $out"

# ---- greedy text equals tessera run ----
P="Hello, my name is"
run_text() { "$BIN" run "$M" --temp 0 --threads 2 --ctx 2048 --date 2026-03-14 "$@" 2>/dev/null | head -c -1; }
want=$(run_text -p "$P" -n 12)
req /v1/completions "{\"prompt\": \"$P\", \"max_tokens\": 12, \"temperature\": 0}" >"$TMP/c1"
[ "$(text "$TMP/c1")" = "$want"$'\n'"finish=length usage=5,12,17" ] && ok || bad "completion differs from run: $(cat "$TMP/c1") vs '$want'"
req /v1/completions "{\"prompt\": \"$P\", \"max_tokens\": 12, \"temperature\": 0, \"stream\": true}" >"$TMP/c2"
[ "$(text "$TMP/c2")" = "$want"$'\n'"finish=length usage=-" ] && ok || bad "streamed completion differs from run: $(cat "$TMP/c2")"
# chat: exact bytes (this greedy reply starts with newlines)
"$BIN" run "$M" --temp 0 --threads 2 --ctx 2048 --chat -p "Hello there" -n 10 --no-think 2>/dev/null | head -c -1 >"$TMP/want_chat"
msgs='[{"role": "user", "content": "Hello there"}]'
req /v1/chat/completions "{\"messages\": $msgs, \"max_tokens\": 10, \"temperature\": 0, \"chat_template_kwargs\": {\"enable_thinking\": false}}" >"$TMP/h1"
meta=$(text "$TMP/h1" "$TMP/got_chat")
[ -s "$TMP/want_chat" ] && cmp -s "$TMP/want_chat" "$TMP/got_chat" && ok || bad "chat differs from run --chat: $(cat "$TMP/h1") vs '$(cat "$TMP/want_chat")'"
grep -q '"object":"chat.completion"' "$TMP/h1" && grep -q '"role":"assistant"' "$TMP/h1" && ok || bad "chat response shape: $(cat "$TMP/h1")"
[ "$meta" = "finish=length usage=14,10,24" ] && ok || bad "chat finish and usage: $meta"
req /v1/chat/completions "{\"messages\": $msgs, \"max_completion_tokens\": 10, \"temperature\": 0, \"stream\": true, \"stream_options\": {\"include_usage\": true}, \"chat_template_kwargs\": {\"enable_thinking\": false}}" >"$TMP/h2"
meta=$(text "$TMP/h2" "$TMP/got_chat2")
cmp -s "$TMP/want_chat" "$TMP/got_chat2" && ok || bad "streamed chat differs from run --chat: $(cat "$TMP/h2")"
[ "$meta" = "finish=length usage=14,10,24" ] && grep -q 'chat.completion.chunk' "$TMP/h2" && ok \
    || bad "streamed chat's usage chunk: $meta: $(cat "$TMP/h2")"
# without chat_template_kwargs the template's default (Qwen3 thinks): another prompt, run's text
want2=$(run_text --chat -p "Why is the sky blue?" -n 10)
req /v1/chat/completions '{"messages": [{"role": "user", "content": "Why is the sky blue?"}], "max_tokens": 10, "temperature": 0}' >"$TMP/h3"
[ -n "$want2" ] && [ "$(text "$TMP/h3" | head -n -1)" = "$want2" ] && ok || bad "chat without kwargs differs from run --chat: $(cat "$TMP/h3")"

# ---- stop strings: the text before the first occurrence, finish_reason stop ----
full=$(run_text -p "$P" -n 12)
stop=$(python3 -c "import sys; print(sys.argv[1][4:7])" "$full")
want=$(python3 -c "import sys; t=sys.argv[1]; print(t[:t.index(sys.argv[2])], end='')" "$full" "$stop")
body=$(python3 -c "import json,sys; print(json.dumps({'prompt': sys.argv[1], 'max_tokens': 12, 'temperature': 0, 'stop': ['zzz-none', sys.argv[2]]}))" "$P" "$stop")
req /v1/completions "$body" >"$TMP/s1"
[ "$(text "$TMP/s1" | head -n -1)" = "$want" ] && grep -q '"finish_reason":"stop"' "$TMP/s1" && ok || bad "stop '$stop': $(cat "$TMP/s1"), expected '$want'"
body=$(python3 -c "import json,sys; print(json.dumps({'prompt': sys.argv[1], 'max_tokens': 12, 'temperature': 0, 'stop': sys.argv[2], 'stream': True}))" "$P" "$stop")
req /v1/completions "$body" >"$TMP/s2"
[ "$(text "$TMP/s2" | head -n -1)" = "$want" ] && ok || bad "streamed stop '$stop': $(cat "$TMP/s2")"
# sampling with a seed is reproducible
sb='{"prompt": "Hi", "max_tokens": 16, "temperature": 1.5, "top_k": 0, "top_p": 1, "min_p": 0, "seed": 7}'
req /v1/completions "$sb" >"$TMP/r1"
req /v1/completions "$sb" >"$TMP/r2"
a=$(text "$TMP/r1") b=$(text "$TMP/r2")
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "same seed, different text: '$a' vs '$b'"
req /v1/completions "${sb/\"seed\": 7/\"seed\": 8}" >"$TMP/r3"
[ "$(text "$TMP/r3")" != "$a" ] && ok || bad "seeds 7 and 8 gave the same 16 sampled tokens"

# ---- errors: status, OpenAI's shape, the field named ----
out=$(req /v1/completions '{"prompt": "x", "max_tokens": 3,}')
expect_status 400 "line 1, column" "$out"
grep -q '"error":{"message":' <<<"$out" && grep -q '"type":"invalid_request_error"' <<<"$out" && ok || bad "error shape: $out"
expect_status 400 '"param":"temperature"' "$(req /v1/completions '{"prompt": "x", "temperature": "hot"}')"
expect_status 400 'temperature: expected a number in [0, 2], got \"hot\"' "$(req /v1/completions '{"prompt": "x", "temperature": "hot"}')"
expect_status 400 '"param":"n"' "$(req /v1/completions '{"prompt": "x", "n": 2}')"
expect_status 400 '"param":"messages"' "$(req /v1/chat/completions '{"model": "q"}')"
expect_status 400 'messages[0].role' "$(req /v1/chat/completions '{"messages": [{"content": "hi"}]}')"
expect_status 400 '"param":"stop[1]"' "$(req /v1/completions '{"prompt": "x", "stop": ["a", 3]}')"
expect_status 400 'more than this server serves per request (2000, --max-tokens-limit)' "$(req /v1/completions '{"prompt": "x", "max_tokens": 2001}')"
expect_status 400 'must be a JSON object' "$(req /v1/completions '[1, 2]')"
expect_status 400 'max_tokens: expected an integer >= 1' "$(req /v1/completions '{"prompt": "x", "max_tokens": 0}')"
long=$(python3 -c "print(' '.join(['word'] * 2100))")
expect_status 400 'more than the context of 2048 positions (--ctx 2048)' "$(req /v1/completions "{\"prompt\": \"$long\"}")"
expect_status 400 '"code":"context_length_exceeded"' "$(req /v1/completions "{\"prompt\": \"$long\"}")"
big=$(python3 -c "print('{\"prompt\": \"' + 'x' * 70000 + '\"}')")
expect_status 413 'more than the 65536 this server accepts (--max-body)' "$(req /v1/completions "$big")"
# chunked upload (no Content-Length): counted as it arrives
out=$(printf '%s' "$big" | curl -sS -m 10 "${AUTH[@]}" -H 'Transfer-Encoding: chunked' -w '\nHTTP %{http_code}\n' "$URL/v1/completions" --data-binary @-)
expect_status 413 '--max-body' "$out"
expect_status 404 'no route POST /v1/nope' "$(req /v1/nope '{}')"
expect_status 405 'takes POST, not GET' "$(curl -sS -m 5 "${AUTH[@]}" -w '\nHTTP %{http_code}\n' "$URL/v1/completions")"
expect_status 401 '"code":"invalid_api_key"' "$(curl -sS -m 5 -w '\nHTTP %{http_code}\n' "$URL/v1/completions" -d '{"prompt": "x"}')"
expect_status 401 'Bearer' "$(curl -sS -m 5 -H "Authorization: Bearer $KEY-" -w '\nHTTP %{http_code}\n' "$URL/v1/models")"
expect_status 401 '' "$(curl -sS -m 5 -H "Authorization: Bearer ${KEY:0:5}" -w '\nHTTP %{http_code}\n' "$URL/metrics")"
hdr=$(python3 -c "print('x' * 70000)")
code=$(curl -sS -m 5 "${AUTH[@]}" -H "X-Big: $hdr" -o /dev/null -w '%{http_code}' "$URL/health")
[ "$code" = 431 ] || [ "$code" = 413 ] && ok || bad "a 70 kB header: status $code, expected 431"

# ---- 8 concurrent clients, each equal to the same request alone ----
cpids=()
for i in 1 2 3 4 5 6 7 8; do
    n=$((4 + i * 5))
    if [ $((i % 2)) = 0 ]; then
        b="{\"prompt\": \"Story $i begins with\", \"max_tokens\": $n, \"temperature\": 0, \"stream\": true}"
        ep=/v1/completions
    else
        b="{\"messages\": [{\"role\": \"user\", \"content\": \"Question $i: why?\"}], \"max_tokens\": $n, \"temperature\": 0}"
        ep=/v1/chat/completions
    fi
    echo "$ep" >"$TMP/ep$i"
    echo "$b" >"$TMP/b$i"
    req "$ep" "$b" >"$TMP/par$i" &
    cpids+=($!)
done
wait "${cpids[@]}"
for i in 1 2 3 4 5 6 7 8; do
    req "$(cat "$TMP/ep$i")" "$(cat "$TMP/b$i")" >"$TMP/alone$i"
    a=$(text "$TMP/par$i") b=$(text "$TMP/alone$i")
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "client $i: concurrent '$a' != alone '$b'"
done

# ---- a client leaving mid-stream frees its slot; the next requests are fine ----
# the client goes as soon as the first tokens arrive, long before its 2000 tokens are out
curl -sS -N "${AUTH[@]}" "$URL/v1/completions" -d '{"prompt": "Go on forever", "max_tokens": 2000, "temperature": 0, "stream": true}' >"$TMP/cut" 2>/dev/null &
cut_pid=$!
for _ in $(seq 200); do grep -q '^data: {' "$TMP/cut" && break; sleep 0.05; done
kill "$cut_pid"
wait "$cut_pid" 2>/dev/null
grep -q '^data: {' "$TMP/cut" && ! grep -q 'DONE' "$TMP/cut" && ok || bad "the cut stream did not start or already ended: $(head -c 300 "$TMP/cut")"
freed=0
for _ in $(seq 50); do
    m=$(curl -sS -m 5 "${AUTH[@]}" "$URL/metrics")
    grep -q '^tessera_active_slots 0$' <<<"$m" && { freed=1; break; }
    sleep 0.1
done
[ $freed = 1 ] && ok || bad "slot not freed after the client left: $(grep active <<<"$m")"
grep -q 'tessera_requests_total{endpoint="/v1/completions",status="499"} 1' <<<"$m" && ok || bad "the cut request is not counted as 499: $m"
req /v1/completions "{\"prompt\": \"$P\", \"max_tokens\": 12, \"temperature\": 0}" >"$TMP/c3"
[ "$(text "$TMP/c3")" = "$(text "$TMP/c1")" ] && ok || bad "after the disconnect: $(cat "$TMP/c3")"
m=$(curl -sS -m 5 "${AUTH[@]}" "$URL/metrics")
grep -q '^tessera_queue_depth 0$' <<<"$m" && grep -q '^tessera_time_to_first_token_seconds_count [1-9]' <<<"$m" && ok || bad "metrics after the load: $m"

kill -TERM "$SPID"
wait "$SPID"
rc=$?
[ $rc = 0 ] && ok || bad "SIGTERM on an idle server: exit $rc: $(tail -5 "$TMP/s1.log")"

# ---- one slot, no queue: a second request is 503 while the first runs; SIGTERM drains it ----
start_server "$TMP/s2.log" --parallel 1 --max-queue 0 --ctx 1024 --quiet --weights mmap
URL=http://127.0.0.1:$PORT
AUTH=()
grep -q "^tessera serve: model .*, weights read in place (mmap), KV cache f32$" "$TMP/s2.log" && ok || bad "--weights mmap: $(cat "$TMP/s2.log")"
long='{"prompt": "Once upon a time", "max_tokens": 800, "temperature": 0, "stream": true}'
req /v1/completions "$long" >"$TMP/long" &
cpid=$!
for _ in $(seq 50); do grep -q '^tessera_active_slots 1$' <(curl -sS -m 5 "$URL/metrics") && break; sleep 0.05; done
out=$(req /v1/completions '{"prompt": "x", "max_tokens": 2}')
expect_status 503 '"code":"queue_full"' "$out"
grep -qi 'retry-after: 1' <(curl -sS -m 5 -D - -o /dev/null "$URL/v1/completions" -d '{"prompt": "x", "max_tokens": 2}') && ok || bad "503 without Retry-After"
kill -TERM "$SPID"
wait "$cpid"
wait "$SPID"
rc=$?
[ $rc = 0 ] && ok || bad "SIGTERM with a request in flight: exit $rc: $(tail -5 "$TMP/s2.log")"
t=$(text "$TMP/long")
grep -q '^finish=length' <<<"$(tail -1 <<<"$t")" && ok || bad "the request in flight did not finish: $(tail -c 300 "$TMP/long")"
grep -q 'finishing the requests in flight' "$TMP/s2.log" && ok || bad "no drain message: $(cat "$TMP/s2.log")"

# --quant: the matrices sit in their own slab, which the start-up line says (no copy on top)
start_server "$TMP/s3.log" --quant q8_0 --quiet
grep -q "^tessera serve: model .*, weights quantized at load (--quant), KV cache f32$" "$TMP/s3.log" && ok || bad "--quant: $(cat "$TMP/s3.log")"
kill -TERM "$SPID"
wait "$SPID"

# --kv-cache f16: the slots hold F16 caches; greedy text equals tessera run with the same cache
start_server "$TMP/s4.log" --kv-cache f16 --parallel 2 --ctx 2048 --date 2026-03-14 --quiet
URL=http://127.0.0.1:$PORT
grep -q "^tessera serve: model .*, KV cache f16$" "$TMP/s4.log" && ok || bad "--kv-cache f16: $(cat "$TMP/s4.log")"
want=$(run_text --kv-cache f16 -p "$P" -n 12)
curl -sS -m 30 -H 'Content-Type: application/json' -w '\nHTTP %{http_code}\n' "$URL/v1/completions" \
    -d "{\"prompt\": \"$P\", \"max_tokens\": 12, \"temperature\": 0}" >"$TMP/k1"
[ -n "$want" ] && [ "$(text "$TMP/k1")" = "$want"$'\n'"finish=length usage=5,12,17" ] && ok || bad "--kv-cache f16 completion differs from run --kv-cache f16: $(cat "$TMP/k1") vs '$want'"
kill -TERM "$SPID"
wait "$SPID"

# ---- flags ----
expect 64 "set per request" -- "$BIN" serve "$M" --seed 3
expect 64 "--port 70000: expected an integer in [0, 65535]" -- "$BIN" serve "$M" --port 70000
expect 64 "expects MODEL_DIR" -- "$BIN" serve

finish
