#!/usr/bin/env bash
# Log-probabilities and echo in tessera serve (docs/serve.md): on a synth Qwen3-tiny with the
# real tokenizer and template, two servers (prompt lookup on and off, 4 slots each) answer the
# requests of tests/test_serve_logprobs.py, which checks the values against the oracle
# (`tessera logits`, ref target) and the cpu target's own prefill logits, the text unchanged by
# logprobs and echo, streamed == not streamed, lookup and batching bit-identical, and the errors.
set -u
NAME=serve_logprobs
source "$(dirname "$0")/lib.sh"

kill_at_exit

TOK="$SHARED/tokenizers/qwen3"
M="$TMP/q"
"$BIN" synth qwen3-0.6b-tiny "$M" --seed 5 --vocab 151936 --tokenizer "$TOK" >/dev/null || { bad "synth"; finish; exit; }

serve_start "$TMP/plain.log" "$M" --threads 2 --parallel 4 --ctx 512 --lookup 0
P0=$PORT
serve_start "$TMP/look.log" "$M" --threads 2 --parallel 4 --ctx 512 --lookup 8
P1=$PORT
python3 "$(dirname "$0")/test_serve_logprobs.py" "$P0" "$P1" "$BIN" "$M" "$TMP" && ok || bad "test_serve_logprobs.py failed"
grep -q '(lookup: [1-9][0-9]* of' "$TMP/look.log" && ok || bad "no lookup drafts were accepted: $(tail -5 "$TMP/look.log")"

for p in "${PIDS[@]}"; do kill -TERM "$p"; done
for p in "${PIDS[@]}"; do
    wait "$p"
    rc=$?
    [ $rc = 0 ] && ok || bad "SIGTERM: exit $rc"
done
PIDS=()
finish
