#!/usr/bin/env bash
# The unmodified `openai` Python package (from PyPI, in the venv scripts/setup.sh makes at
# build/venv-test, ignored by git; TS_VENV_TEST names another) against `tessera serve` over loopback: plain and streamed
# chat and a completion, equal to `tessera run`, log-probabilities and echo, tools, and its error
# classes (tests/test_serve_openai.py).
# Skipped, saying why, only when that venv is missing.
set -u
NAME=serve_openai
source "$(dirname "$0")/lib.sh"

VENV=${TS_VENV_TEST:-$(cd "$(dirname "$0")/.." && pwd)/build/venv-test}
PY=$VENV/bin/python
if ! [ -x "$PY" ] || ! "$PY" -c "import openai" 2>/dev/null; then
    skip "no openai package in $VENV (scripts/setup.sh makes it: python3 -m venv + pip install openai; PyPI unreachable?)"
fi

TOK="$SHARED/tokenizers/qwen3"
M="$TMP/q"
"$BIN" synth qwen3-0.6b-tiny "$M" --seed 5 --vocab 151936 --tokenizer "$TOK" >/dev/null || { bad "synth"; finish; exit; }
KEY=openai-test-key
"$BIN" serve "$M" --port 0 --threads 2 --parallel 2 --ctx 512 --api-key "$KEY" 2>"$TMP/s.log" &
SPID=$!
trap 'kill -KILL $SPID 2>/dev/null' EXIT
PORT=
for _ in $(seq 100); do
    PORT=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\)$|\1|p' "$TMP/s.log")
    [ -n "$PORT" ] && break
    sleep 0.1
done
[ -n "$PORT" ] || { bad "server did not start: $(cat "$TMP/s.log")"; finish; exit; }

run_text() { "$BIN" run "$M" --temp 0 --threads 2 --ctx 512 "$@" 2>/dev/null | head -c -1; }
run_text --chat -p "Hello there" -n 10 --no-think >"$TMP/chat"
run_text -p "Hello, my name is" -n 12 >"$TMP/compl"
"$PY" "$(dirname "$0")/test_serve_openai.py" "$PORT" "$KEY" q "$TMP/chat" "$TMP/compl" && ok || bad "test_serve_openai.py failed"

kill -TERM $SPID
wait $SPID
rc=$?
[ $rc = 0 ] && ok || bad "SIGTERM: exit $rc: $(tail -5 "$TMP/s.log")"
finish
