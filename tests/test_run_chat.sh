#!/usr/bin/env bash
# tessera run and chat end to end on a synth Qwen3-shaped model carrying the real Qwen3
# tokenizer: greedy output is deterministic and equals an independent greedy walk over
# `tessera logits --target cpu` decoded from tokenizer.json; stop strings; a piped three-turn
# chat that reuses its KV cache; and the exit code + message of each bad input.
set -u
NAME=run_chat
source "$(dirname "$0")/lib.sh"

TOK="$SHARED/tokenizers/qwen3"
M="$TMP/q"
expect 1 "pass --vocab 151669 or more" -- "$BIN" synth qwen3-0.6b-tiny "$TMP/small" --tokenizer "$TOK"
expect 0 "wrote" -- "$BIN" synth qwen3-0.6b-tiny "$M" --seed 5 --vocab 151936 --tokenizer "$TOK"
cmp -s "$M/tokenizer.json" "$TOK/tokenizer.json" && cmp -s "$M/tokenizer_config.json" "$TOK/tokenizer_config.json" \
    && ok || bad "synth --tokenizer did not copy the tokenizer files"

# greedy run: deterministic, non-empty, speed line on stderr
run() { "$BIN" run "$M" -p "Hello, my name is" -n 12 --temp 0 --threads 2 "$@"; }
run --show-ids >"$TMP/o1" 2>"$TMP/e1"; rc1=$?
run >"$TMP/o2" 2>"$TMP/e2"; rc2=$?
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && ok || bad "run exit codes $rc1 $rc2: $(cat "$TMP/e1")"
cmp -s "$TMP/o1" "$TMP/o2" && ok || bad "greedy run is not deterministic"
[ "$(wc -c <"$TMP/o1")" -gt 1 ] && ok || bad "run printed no text"
grep -qE '^prompt: 5 tokens, [0-9.]+ tok/s; generation: 12 tokens, [0-9.]+ tok/s' "$TMP/e1" && ok \
    || bad "speed line missing: $(cat "$TMP/e1")"
# sampling with a seed is deterministic too, and a different seed changes something
srun() { "$BIN" run "$M" -p "Hello" -n 16 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --threads 2 --seed "$1" 2>/dev/null; }
[ "$(srun 7)" = "$(srun 7)" ] && ok || bad "same seed, different text"
[ "$(srun 7)" != "$(srun 8)" ] && ok || bad "seeds 7 and 8 gave the same 16 sampled tokens"

# the independent path: greedy argmax over full-sequence logits from `tessera logits`, and the
# text decoded from tokenizer.json's byte-level vocabulary, must match what run printed
ids=$(sed -n 's/^ids: //p' "$TMP/e1")
prompt_ids=$(printf '%s' "Hello, my name is" | "$BIN" tokenize "$M" --ids | tr ' ' ',' | sed 's/,*$//')
python3 - "$BIN" "$M" "$prompt_ids" "$ids" "$TMP" "$TMP/o1" <<'PY' && ok || bad "run differs from the logits greedy walk"
import json, struct, subprocess, sys
binp, model, prompt, ids, tmp, outp = sys.argv[1:7]
toks = [int(x) for x in prompt.split(",")] if prompt else []
gen = [int(x) for x in ids.split(",")]
tj = json.load(open(model + "/tokenizer.json"))
n_text = 1 + max(list(tj["model"]["vocab"].values()) + [t["id"] for t in tj["added_tokens"]])
for step, want in enumerate(gen):
    seq = ",".join(map(str, toks))
    subprocess.run([binp, "logits", model, "--tokens", seq, "--out", tmp + "/l.bin", "--last",
                    "--target", "cpu", "--threads", "2"], check=True, capture_output=True)
    d = open(tmp + "/l.bin", "rb").read()
    n, v = struct.unpack("<ii", d[:8])
    row = struct.unpack("<%df" % v, d[8:])
    best = max(range(n_text), key=lambda i: row[i])  # rows past the tokenizer are masked
    # prefill+decode and one full forward round differently: a near-tie may flip
    assert best == want or row[best] - row[want] <= 1e-3 * max(1.0, abs(row[best])), \
        "step %d: run chose %d (%g), logits argmax %d (%g)" % (step, want, row[want], best, row[best])
    toks.append(want)
# byte-level BPE decode: GPT-2's byte <-> unicode table
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs = bs[:]
k = 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + k); k += 1
inv = {chr(c): b for b, c in zip(bs, cs)}
vocab = tj["model"]["vocab"]
id2tok = {i: t for t, i in vocab.items()}
text = bytes(inv[ch] for i in gen for ch in id2tok[i]).decode("utf-8", "replace") + "\n"
got = open(outp, encoding="utf-8").read()
assert got == text, "printed %r, decoded ids give %r" % (got, text)
print("run == greedy walk over logits (%d tokens), text == decode(ids)" % len(gen))
PY

# a stop string: the text up to (not including) its first appearance, then exit 0
stop=$(python3 -c "import sys; t=open(sys.argv[1],encoding='utf-8').read(); print(t[4:7])" "$TMP/o1")
want=$(python3 -c "import sys; t=open(sys.argv[1],encoding='utf-8').read(); print(t[:t.index(sys.argv[2])])" "$TMP/o1" "$stop")
got=$(run --stop "$stop" 2>"$TMP/e3")
[ "$got" = "$want" ] && ok || bad "--stop '$stop': printed '$got', expected '$want'"
grep -q "stop: stop string" "$TMP/e3" && ok || bad "stop reason not reported: $(cat "$TMP/e3")"

# chat through a pipe: three turns, exit 0 at EOF, deterministic at temp 0, cache reused
chat() { printf 'Hello there\nWhat is 2+2?\n\nThanks, bye\n' | "$BIN" chat "$M" -n 6 --temp 0 --threads 2 --verbose "$@"; }
chat >"$TMP/c1" 2>"$TMP/ce1"; rc=$?
[ $rc -eq 0 ] && ok || bad "chat exit $rc: $(cat "$TMP/ce1")"
[ "$(grep -c '^prompt: .* generation: 6 tokens' "$TMP/ce1")" -eq 3 ] && ok || bad "expected 3 replies: $(cat "$TMP/ce1")"
grep -q "turn 3: cache reused" "$TMP/ce1" && ok || bad "turn 3 did not reuse the cache: $(cat "$TMP/ce1")"
[ -s "$TMP/c1" ] && ok || bad "chat printed nothing"
chat >"$TMP/c2" 2>/dev/null
cmp -s "$TMP/c1" "$TMP/c2" && ok || bad "chat at temp 0 is not deterministic"
# turn 1 of the chat equals `run --chat` on the same message
"$BIN" run "$M" --chat -p "Hello there" -n 6 --temp 0 --threads 2 >"$TMP/r1" 2>/dev/null
[ "$(head -c "$(wc -c <"$TMP/r1")" "$TMP/c1")" = "$(cat "$TMP/r1")" ] && ok || bad "run --chat differs from chat turn 1"
expect 0 "" -- "$BIN" chat "$M" --system "Be brief." --no-think -n 2 --temp 0 --threads 2

# bad inputs
mkdir -p "$TMP/notok" && cp "$M/config.json" "$M/model.safetensors" "$TMP/notok/"
expect 2 "no tokenizer" -- "$BIN" run "$TMP/notok" -p hi -n 2
expect 2 "no such tokenizer file" -- "$BIN" run "$TMP/notok" -p hi --tokenizer "$TMP/nope.json"
expect 0 "" -- "$BIN" run "$TMP/notok" -p hi -n 2 --temp 0 --tokenizer "$TOK/tokenizer.json"
expect 64 "-n expects an integer" -- "$BIN" run "$M" -p hi -n 0
expect 64 "-n expects an integer" -- "$BIN" run "$M" -p hi -n -3
expect 64 "--temp expects" -- "$BIN" run "$M" -p hi --temp abc
expect 64 "--top-p expects" -- "$BIN" run "$M" -p hi --top-p 0
expect 64 "expects MODEL_DIR (or DEPLOY_DIR) and -p" -- "$BIN" run "$M"
expect 64 "unexpected argument" -- "$BIN" chat "$M" --frobnicate
expect 1 "prompt of 6 tokens does not fit the context of 4 positions (--ctx 4)" -- "$BIN" run "$M" -p "one two three four five six" --ctx 4

# -n beyond the context: said up front (how many tokens, which limit, where it stops), and the
# run stops there with exit 0. The 5-token prompt leaves 10 - 5 + 1 = 6 (the last token sampled
# is never fed back); --ctx past max_position_embeddings is refused naming both numbers.
expect 0 "generation capped at 6 tokens (-n 12): the context holds 10 positions (--ctx 10) and the prompt fills 5 of them, so it stops at position 10" \
    -- "$BIN" run "$M" -p "Hello, my name is" -n 12 --ctx 10 --temp 0 --threads 2
expect 0 "generation: 6 tokens" -- "$BIN" run "$M" -p "Hello, my name is" -n 12 --ctx 10 --temp 0 --threads 2
mkdir -p "$TMP/short" && ln -sf "$M/model.safetensors" "$M/tokenizer.json" "$M/tokenizer_config.json" "$TMP/short/"
sed 's/"max_position_embeddings": [0-9]*/"max_position_embeddings": 16/' "$M/config.json" >"$TMP/short/config.json"
expect 0 "generation capped at 12 tokens (-n 100): the context holds 16 positions (max_position_embeddings in $TMP/short/config.json)" \
    -- "$BIN" run "$TMP/short" -p "Hello, my name is" -n 100 --temp 0 --threads 2
expect 1 "--ctx 17 exceeds the model's context of 16 positions (max_position_embeddings in $TMP/short/config.json)" \
    -- "$BIN" run "$TMP/short" -p "Hello" --ctx 17
printf 'Hello there\n' | "$BIN" chat "$TMP/short" -n 100 --temp 0 --threads 2 >/dev/null 2>"$TMP/ce_short"
grep -q "tessera chat: note: generation capped at" "$TMP/ce_short" && ok || bad "chat did not say its reply is capped: $(cat "$TMP/ce_short")"
expect 7 "a session of 4096 positions" -- env TESSERA_MEM_AVAILABLE=1000000 "$BIN" run "$M" -p "Hello" -n 2
expect 2 "no such directory" -- "$BIN" chat "$TMP/missing"

finish
