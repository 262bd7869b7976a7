#!/usr/bin/env bash
# Tool calls in tessera serve (docs/serve.md) end to end, as far as a random-weight model allows:
# it never writes a call, so the parsing itself is tests/test_toolcall.c's (many replies in every
# format). Here, for three real templates (Qwen3, Qwen2.5, Llama 3.1) on a synth Qwen3-tiny with
# the real tokenizer: a request with tools answers OpenAI's shape (content, no tool_calls,
# finish_reason stop/length; streamed == not streamed; with logprobs); tool_choice and
# parallel_tool_calls are checked; and a conversation sent back the way OpenAI's clients send it
# (the assistant's call with content null and the arguments a JSON string, then the tool's
# result) is rendered as the template wants it: the prompt has exactly the tokens of
# `tessera template` on the same conversation written with an object and "" content where the
# template needs them (tests/test_serve_tools.py).
set -u
NAME=serve_tools
source "$(dirname "$0")/lib.sh"

kill_at_exit
# slots_freed: waits up to 5 s for no active slot; freed=1 if so, m = the last /metrics text
slots_freed() {
    freed=0
    for _ in $(seq 50); do
        m=$(curl -sS -m 5 "http://127.0.0.1:$PORT/metrics")
        grep -q '^tessera_active_slots 0$' <<<"$m" && { freed=1; break; }
        sleep 0.1
    done
}

TOK="$SHARED/tokenizers/qwen3"
M="$TMP/q"
"$BIN" synth qwen3-0.6b-tiny "$M" --seed 5 --vocab 151936 --tokenizer "$TOK" >/dev/null || { bad "synth"; finish; exit; }
D=2026-03-14
for t in qwen3 qwen2.5 llama3.1; do
    case $t in
    qwen3) tmpl=() ;;
    qwen2.5) tmpl=(--chat-template "$SHARED/templates/Qwen-Qwen2.5-7B-Instruct.jinja") ;;
    llama3.1) tmpl=(--chat-template "$SHARED/templates/meta-llama-Llama-3.1-8B-Instruct.jinja") ;;
    esac
    serve_start "$TMP/$t.log" "$M" --threads 2 --parallel 2 --ctx 2560 --date $D "${tmpl[@]}"
    python3 "$(dirname "$0")/test_serve_tools.py" "$PORT" "$t" "$BIN" "$M" "$TMP" $D "${tmpl[@]}" && ok || bad "test_serve_tools.py $t failed"
    if [ $t = qwen3 ]; then
        # a client leaving while its reply is held back (this model writes white space: nothing
        # but the role chunk goes out) frees its slot long before its 2000 tokens are done
        curl -sS -N "http://127.0.0.1:$PORT/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "Hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}], "max_tokens": 2000, "temperature": 0, "stream": true}' >"$TMP/cut" 2>/dev/null &
        cut_pid=$!
        for _ in $(seq 200); do grep -q '^data: {' "$TMP/cut" && break; sleep 0.05; done
        kill "$cut_pid"
        wait "$cut_pid" 2>/dev/null
        slots_freed
        [ $freed = 1 ] && grep -q 'status="499"} 1' <<<"$m" && ! grep -q DONE "$TMP/cut" && ok \
            || bad "a client gone during a held-back reply: slot not freed or not counted 499: $(grep -E 'active|499' <<<"$m")"
        # the same, not streamed: nothing is written before the end, so the socket is watched
        curl -sS "http://127.0.0.1:$PORT/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2000, "temperature": 0}' >/dev/null 2>&1 &
        cut_pid=$!
        for _ in $(seq 100); do grep -q '^tessera_active_slots 1$' <(curl -sS -m 5 "http://127.0.0.1:$PORT/metrics") && break; sleep 0.02; done
        kill "$cut_pid"
        wait "$cut_pid" 2>/dev/null
        slots_freed
        [ $freed = 1 ] && grep -q 'status="499"} 2' <<<"$m" && ok \
            || bad "a non-streamed client gone: slot not freed or not counted 499: $(grep -E 'active|499' <<<"$m")"
    fi
    kill -TERM "$SPID"
    wait "$SPID"
    rc=$?
    [ $rc = 0 ] && ok || bad "$t: SIGTERM: exit $rc: $(tail -3 "$TMP/$t.log")"
    PIDS=()
done
finish
