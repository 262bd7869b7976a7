#!/usr/bin/env bash
# GGUF files through the binary: the real trained stories260K tells its story with `tessera run
# -p "" --temp 0` (BOS only) on the cpu target, deploys through all eight phases with phase 0
# compared against transformers' own reading of the same file (the committed golden from
# tools/hf_golden.py), `inspect` and `tokenize` read GGUF metadata and vocabularies, a GGUF
# made by llama.cpp's converter runs, and broken files give their exit code and a message that
# names the file.
set -u
NAME=gguf_cli
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/deploy_rounds.sh"

M="$SHARED/models/stories260K.gguf"
STORY="Once upon a time, there was a little girl named Lily. She loved to play outside in the park."

# --- the story, from BOS alone, on the cpu target (2 threads and 1: the same text) ---
for th in 1 2; do
    "$BIN" run "$M" -p "" --temp 0 -n 40 --threads $th >"$TMP/story$th" 2>"$TMP/story$th.err"
    rc=$?
    [ $rc -eq 0 ] && ok || bad "run stories260K (threads $th) exit $rc: $(cat "$TMP/story$th.err")"
    grep -qF "$STORY" "$TMP/story$th" && [ "$(head -c 9 "$TMP/story$th")" = "Once upon" ] && ok \
        || bad "stories260K (threads $th) did not tell its story: $(cat "$TMP/story$th")"
done
grep -qE '^prompt: 1 tokens' "$TMP/story1.err" && ok || bad "the empty prompt is not BOS alone: $(cat "$TMP/story1.err")"
# a prompt continues the story's way
"$BIN" run "$M" -p "Once upon a time" --temp 0 -n 12 --threads 1 >"$TMP/cont" 2>/dev/null
grep -qF "Once upon a time, there was a little girl" <(printf 'Once upon a time%s' "$(cat "$TMP/cont")") && ok \
    || bad "continuation of 'Once upon a time': $(cat "$TMP/cont")"

# --- inspect and tokenize read the file ---
expect 0 "gguf          version 3, 19 metadata entries" -- "$BIN" inspect "$M"
expect 0 "tokenizer.ggml.model                         \"llama\"" -- "$BIN" inspect "$M"
expect 0 '"format": "gguf"' -- "$BIN" inspect "$M" --json
ids=$(printf 'Once upon a time, there was a little girl named Lily.' | "$BIN" tokenize "$M" --ids --bos 2>/dev/null)
# llama.cpp's llama-tokenize gives these for the same file (tests/fixtures/gguf/README.md)
[ "$(echo $ids)" = "1 403 407 261 378 432 383 286 261 376 298 315 421 395 317 426" ] && ok \
    || bad "tokenize stories260K: $ids"

# --- a converter-made GGUF with a gpt2 (byte-level BPE) vocabulary runs like its HF copy ---
Q="$FIX/gguf/qwen3/qwen3-f32.gguf"
"$BIN" run "$Q" -p "Hello" --temp 0 -n 8 --threads 1 --show-ids >"$TMP/qg" 2>/dev/null
"$BIN" run "$FIX/gguf/qwen3/hf" --tokenizer "$FIX/gguf/qwen3/hf" -p "Hello" --temp 0 -n 8 --threads 1 --show-ids \
    >"$TMP/qh" 2>/dev/null
[ -s "$TMP/qg" ] && cmp -s "$TMP/qg" "$TMP/qh" && ok || bad "qwen3 GGUF and HF copies generate differently: $(cat "$TMP/qg") / $(cat "$TMP/qh")"

# --- broken files: exit code and the file named ---
head -c 5000 "$M" >"$TMP/cut.gguf"
expect 3 "$TMP/cut.gguf: truncated at byte" -- "$BIN" inspect "$TMP/cut.gguf"
printf 'GGUF\001\000\000\000' >"$TMP/v1.gguf"
expect 4 "GGUF version 1 is not supported, expected 2 or 3" -- "$BIN" run "$TMP/v1.gguf" -p hi
printf 'not a model' >"$TMP/x.bin"
expect 3 "not a GGUF file and not a directory" -- "$BIN" inspect "$TMP/x.bin"
cp "$M" "$TMP/bad.gguf"
# token_embd.weight's type (its info record: name, n_dims 2, dims 64 512, then the type) -> 12 (Q4_K)
off=$(grep -obaF "token_embd.weight" "$TMP/bad.gguf" | head -1 | cut -d: -f1)
printf '\014' | dd of="$TMP/bad.gguf" bs=1 seek=$((off + 17 + 4 + 16)) conv=notrunc 2>/dev/null
expect 4 "has type Q4_K (ggml type 12), expected F32, F16, BF16, Q8_0 or Q4_0" -- "$BIN" inspect "$TMP/bad.gguf"
cmp -s "$M" "$SHARED/models/stories260K.gguf" && ok || bad "the model file was modified"

# --- all eight phases, phase 0 against transformers (committed golden, no torch needed) ---
D="$TMP/deploy"
# a speed claim phase 7 does not reproduce at once gets the rounds of deploy_rounds.sh
deploy_ok "$D" "phase 7 (evaluate)" "$M" --golden "$FIX/gguf/stories260K_golden/golden.json" --out "$D" --threads 1
honest "$D" && ok || bad "phase 7 warned or failed on more than a speed claim: $(grep -E '^\| (WARN|FAIL)' "$D/evaluation.md")"
grep -qF "Phase verdicts: 0 oracle PASS, 1 kernels PASS, 2 block PASS, 3 model PASS, 4 prefill PASS, 5 decode PASS, 6 finalize PASS." \
    "$D/report.md" && ok || bad "report.md verdicts: $(grep -F 'Phase verdicts' "$D/report.md")"
grep -qE '"pass": true' "$D/phase0.json" && grep -qF "top1_frac" "$D/phase0.json" && ok \
    || bad "phase 0 was not compared with the golden"
# the trained model's own vocabulary makes the gate prompts real text
grep -qE '"kind": *"text"' "$D/phase3.json" && grep -qE '"kind": *"text"' "$D/phase5.json" && ok \
    || bad "phases 3/5 did not run text prompts from the GGUF's tokenizer"
# --- the same trained model quantized at load: Q8_0 read in place by the quantized kernels,
# phases 0-6 (phase 7's speed re-measurement is the F32 run's above) ---
DQ="$TMP/deploy-q8"
"$BIN" deploy "$M" --quant q8_0 --golden "$FIX/gguf/stories260K_golden/golden.json" --out "$DQ" --threads 1 \
    --phases 0-6 >"$TMP/deploy-q8.log" 2>&1
rc=$?
[ $rc -eq 0 ] && ok || bad "deploy stories260K --quant q8_0 exit $rc: $(tail -30 "$TMP/deploy-q8.log")"
grep -qF "Q8_0/Q4_0 matrices" "$TMP/deploy-q8.log" && grep -qF "read in place by the quantized kernels" "$TMP/deploy-q8.log" \
    && ok || bad "the quantized matrices were not read in place: $(grep placement "$TMP/deploy-q8.log")"
grep -qE '"decisive_top1_kept": 53' "$DQ/phase3.json" && ok || bad "Q8_0 did not keep all 53 decisive top-1 of stories260K"
# phase 7 names the kernels a deployment ran: the quantized ones only where its matrices are
grep -F "kernels as deployed" "$D/evaluation.md" | grep -qvF "Q8_0/Q4_0 matrices" && ok \
    || bad "the F32 deployment's phase 7 named quantized kernels: $(grep -F 'kernels as deployed' "$D/evaluation.md")"
"$BIN" eval "$DQ" --threads 1 >"$TMP/eval-q8.log" 2>&1
grep -F "kernels as deployed" "$TMP/eval-q8.log" | grep -qF "; Q8_0/Q4_0 matrices: " && ok \
    || bad "phase 7 of the Q8_0 deployment did not name its quantized kernels: $(grep -F 'kernels as' "$TMP/eval-q8.log")"
finish
