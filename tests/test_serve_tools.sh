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

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; }
trap cleanup EXIT

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
    serve_start "$TMP/$t.log" "$M" --threads 2 --parallel 2 --ctx 1024 --date $D "${tmpl[@]}"
    python3 "$(dirname "$0")/test_serve_tools.py" "$PORT" "$t" "$BIN" "$M" "$TMP" $D "${tmpl[@]}" && ok || bad "test_serve_tools.py $t failed"
    kill -TERM "$SPID"
    wait "$SPID"
    rc=$?
    [ $rc = 0 ] && ok || bad "$t: SIGTERM: exit $rc: $(tail -3 "$TMP/$t.log")"
    PIDS=()
done
finish
