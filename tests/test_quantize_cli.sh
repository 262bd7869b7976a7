#!/usr/bin/env bash
# `tessera quantize` and `--quant` through the binary: an HF directory becomes a Q8_0 / Q4_0 GGUF
# that runs, whose oracle logits equal `logits --quant` on the directory bit for bit; an existing
# output is kept without --force and the input is never the output; a matrix whose rows are not
# whole blocks is refused naming the file and the tensor; `--weights q8_0` points to --quant.
# With TS_LLAMA_CPP_BIN (a llama.cpp build's bin/, not in CI) llama-simple must load the file and
# print text.
set -u
NAME=quantize_cli
source "$(dirname "$0")/lib.sh"

HF="$FIX/gguf/qwen3/hf"
IDS=257,284,78,264,291,75,67
for t in q8_0 q4_0; do
    expect 0 "tokenizer.ggml.pre \"qwen2\"" -- "$BIN" quantize "$HF" "$TMP/$t.gguf" --type $t
    expect 0 "$(echo $t | tr a-z A-Z)" -- "$BIN" inspect "$TMP/$t.gguf"
    expect 0 "" -- "$BIN" logits "$TMP/$t.gguf" --tokens $IDS --out "$TMP/file_$t.bin"
    expect 0 "" -- "$BIN" logits "$HF" --quant $t --tokens $IDS --out "$TMP/mem_$t.bin"
    cmp -s "$TMP/file_$t.bin" "$TMP/mem_$t.bin" && ok || bad "$t: file and --quant logits differ"
    expect 0 "generation: 8 tokens" -- "$BIN" run "$TMP/$t.gguf" -p "Hello" --temp 0 -n 8 --threads 1
    expect 0 "generation: 8 tokens" -- "$BIN" run "$HF" --quant $t -p "Hello" --temp 0 -n 8 --threads 1
done
# the same greedy text from the file and from --quant
a=$("$BIN" run "$TMP/q8_0.gguf" -p "Hello" --temp 0 -n 8 --threads 1 --show-ids 2>/dev/null)
b=$("$BIN" run "$HF" --quant q8_0 -p "Hello" --temp 0 -n 8 --threads 1 --show-ids 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "run file vs --quant: '$a' vs '$b'"

# --- BF16 (llama.cpp's converter with --outtype bf16): a BF16 directory's matrices are copied bit
# for bit, so the file's logits are the directory's (llama: Q/K rows permuted on the way); F32
# is rounded to nearest even; quantized weights are not widened ---
"$BIN" synth llama-3.2-1b-tiny "$TMP/lb" --seed 3 --vocab 128256 --tokenizer "$SHARED/tokenizers/llama3" \
    >/dev/null 2>&1 || bad "synth llama-3.2-1b-tiny"
expect 0 "tensors BF16" -- "$BIN" quantize "$TMP/lb" "$TMP/lb.gguf" --type bf16
expect 0 "BF16" -- "$BIN" inspect "$TMP/lb.gguf"
# config.json's three end-of-sequence ids survive: EOS 128001 as eos, <|eot_id|> as eot and the
# Llama-3.0 vocabulary's reserved 128008 (3.1's <|eom_id|>) as eom; read back all three
"$BIN" inspect "$TMP/lb.gguf" >"$TMP/lb.inspect" 2>&1
grep -Eq "eot_token_id +128009" "$TMP/lb.inspect" && grep -Eq "eom_token_id +128008" "$TMP/lb.inspect" &&
    grep -q "eos 128001 128009 128008" "$TMP/lb.inspect" && ok || bad "stop ids in the GGUF: $(grep -E 'eos|eot|eom' "$TMP/lb.inspect")"
expect 0 "" -- "$BIN" logits "$TMP/lb.gguf" --tokens $IDS --out "$TMP/lb_file.bin"
expect 0 "" -- "$BIN" logits "$TMP/lb" --tokens $IDS --out "$TMP/lb_dir.bin"
[ -s "$TMP/lb_file.bin" ] && cmp -s "$TMP/lb_file.bin" "$TMP/lb_dir.bin" && ok || bad "bf16: file and directory logits differ"
a=$("$BIN" run "$TMP/lb.gguf" -p "Hello" --temp 0 -n 8 --threads 1 --show-ids 2>/dev/null)
b=$("$BIN" run "$TMP/lb" -p "Hello" --temp 0 -n 8 --threads 1 --show-ids 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "bf16 run file vs directory: '$a' vs '$b'"
expect 0 "tensors BF16" -- "$BIN" quantize "$TMP/lb.gguf" "$TMP/lb2.gguf" --type bf16
expect 0 "" -- "$BIN" logits "$TMP/lb2.gguf" --tokens $IDS --out "$TMP/lb_file2.bin"
cmp -s "$TMP/lb_file.bin" "$TMP/lb_file2.bin" && ok || bad "bf16 GGUF -> bf16 GGUF changed the logits"
expect 0 "tensors BF16" -- "$BIN" quantize "$HF" "$TMP/bf16.gguf" --type bf16
expect 0 "generation: 8 tokens" -- "$BIN" run "$TMP/bf16.gguf" -p "Hello" --temp 0 -n 8 --threads 1
expect 4 "is Q4_0, expected F32, F16 or BF16 weights to write as BF16" -- \
    "$BIN" quantize "$TMP/q4_0.gguf" "$TMP/x.gguf" --type bf16

# --- never overwrite without --force, never the input ---
sum=$(sha256sum "$TMP/q8_0.gguf")
expect 1 "exists, expected a new file (pass --force" -- "$BIN" quantize "$HF" "$TMP/q8_0.gguf" --type q4_0
[ "$(sha256sum "$TMP/q8_0.gguf")" = "$sum" ] && ok || bad "an existing output was changed without --force"
expect 0 "wrote" -- "$BIN" quantize "$HF" "$TMP/q8_0.gguf" --type q4_0 --force
cmp -s "$TMP/q8_0.gguf" "$TMP/q4_0.gguf" && ok || bad "--force did not rewrite the output"
cp "$TMP/q4_0.gguf" "$TMP/in.gguf"
expect 1 "is the input model itself" -- "$BIN" quantize "$TMP/in.gguf" "$TMP/in.gguf" --type q8_0 --force
ls "$TMP"/*.tmp* >/dev/null 2>&1 && bad "a temporary file was left behind" || ok

# --- refusals ---
expect 5 "has rows of 172 elements, expected a multiple of 32" -- \
    "$BIN" quantize "$SHARED/models/stories260K.gguf" "$TMP/s.gguf" --type q8_0
[ -e "$TMP/s.gguf" ] && bad "a refused quantize left an output" || ok
expect 4 "is already Q4_0" -- "$BIN" quantize "$TMP/q4_0.gguf" "$TMP/x.gguf" --type q8_0
expect 64 "--type expects q8_0, q4_0 or bf16" -- "$BIN" quantize "$HF" "$TMP/x.gguf" --type q5_k
expect 64 "--type q8_0|q4_0|bf16 is required" -- "$BIN" quantize "$HF" "$TMP/x.gguf"
expect 64 "for a weight type use --quant" -- "$BIN" run "$HF" --weights q8_0 -p x
expect 64 "--quant expects q8_0 or q4_0" -- "$BIN" run "$HF" --quant q5 -p x
# --quant keeps matrices whose rows are not whole blocks as stored (llama-quantize falls back
# too): stories260K's down projections (172 wide); Q8_0 still tells the story
"$BIN" run "$SHARED/models/stories260K.gguf" --quant q8_0 -p "" --temp 0 -n 24 --threads 1 >"$TMP/sq" 2>/dev/null
grep -qF "Once upon a time, there was a little girl named Lily." "$TMP/sq" && ok || bad "stories260K --quant q8_0: $(cat "$TMP/sq")"

# --- deploy --quant: phase 0 on the weights as stored (against transformers), phases 1-7 on the
# matrices quantized at load; the manifest records it, eval and run apply it, a resume must match ---
QG="$FIX/gguf/qwen3/qwen3-f32.gguf"
D="$TMP/dq"
"$BIN" deploy "$QG" --quant q8_0 --golden "$FIX/gguf/qwen3/golden/golden.json" --out "$D" --threads 1 \
    --phases 0-3 >"$TMP/dq.log" 2>&1
rc=$?
[ $rc -eq 0 ] && ok || bad "deploy --quant q8_0 phases 0-3 exit $rc: $(tail -20 "$TMP/dq.log")"
grep -qF "quantized to Q8_0 at load" "$TMP/dq.log" && ok || bad "deploy did not say the weights are quantized"
grep -qE '"quant": "Q8_0"' "$D/phase3.json" && ok || bad "phase3.json does not record quant Q8_0"
# the cost of quantizing, against the weights as stored, gated in phase 3
grep -qF '"metric": "quant_q8_0_decisive_top1"' "$D/phase3.json" && grep -qF '"metric": "quant_q8_0_top5"' "$D/phase3.json" \
    && grep -qE '"decisive_top1_kept": [0-9]+' "$D/phase3.json" && ok || bad "phase3.json lacks the quantization agreement gates"
expect 1 "ran the weights quantized to Q8_0; this run asks for the weights as stored" -- \
    "$BIN" deploy "$QG" --out "$D" --phases 4-7 --threads 1
# phase 7 (eval) re-measures speed claims, which test_deploy checks alone on a quiet machine;
# here phases 4-6 write the manifest, and eval's reading of model.quant is checked below
"$BIN" deploy "$QG" --quant q8_0 --out "$D" --phases 4-6 --threads 1 >"$TMP/dq2.log" 2>&1
rc=$?
[ $rc -eq 0 ] && ok || bad "deploy --quant q8_0 phases 4-6 exit $rc: $(tail -20 "$TMP/dq2.log")"
grep -qE '"quant": "Q8_0"' "$D/manifest.json" && ok || bad "manifest.json does not record quant Q8_0"
# run DEPLOY_DIR quantizes as deployed: the same greedy ids as --quant on the file
"$BIN" run "$D" -p "Hello" --temp 0 -n 6 --show-ids >"$TMP/rd" 2>"$TMP/rd.err"
grep -qF "was deployed with --quant q8_0" "$TMP/rd.err" && ok || bad "run DEPLOY_DIR did not apply the quantization: $(cat "$TMP/rd.err")"
"$BIN" run "$QG" --quant q8_0 -p "Hello" --temp 0 -n 6 --threads 1 --show-ids >"$TMP/rq" 2>/dev/null
[ -s "$TMP/rd" ] && cmp -s "$TMP/rd" "$TMP/rq" && ok || bad "run DEPLOY_DIR differs from run --quant q8_0: $(cat "$TMP/rd") / $(cat "$TMP/rq")"

# a manifest whose model.quant is not a type: eval says so (a FAIL), run refuses
sed 's/"quant": "Q8_0"/"quant": "Q5_K"/' "$D/manifest.json" >"$TMP/man" && cp "$TMP/man" "$D/manifest.json"
expect 3 'model.quant: expected null, "Q8_0" or "Q4_0"' -- "$BIN" run "$D" -p x
expect 8 'model.quant: expected null, "Q8_0" or "Q4_0"' -- "$BIN" eval "$D" --threads 1

# --- llama.cpp loads what tessera wrote (only where a llama.cpp build is given) ---
if [ -n "${TS_LLAMA_CPP_BIN:-}" ] && [ -x "$TS_LLAMA_CPP_BIN/llama-simple" ]; then
    out=$(LD_LIBRARY_PATH="$TS_LLAMA_CPP_BIN" "$TS_LLAMA_CPP_BIN/llama-simple" -m "$TMP/q4_0.gguf" -n 8 "Hello" 2>/dev/null)
    [ -n "$out" ] && ok || bad "llama-simple printed nothing for the tessera-written file"
    echo "llama-simple on the tessera-written Q4_0 file: $out"
    out=$(LD_LIBRARY_PATH="$TS_LLAMA_CPP_BIN" "$TS_LLAMA_CPP_BIN/llama-simple" -m "$TMP/lb.gguf" -n 8 "Hello" 2>/dev/null)
    [ -n "$out" ] && ok || bad "llama-simple printed nothing for the tessera-written BF16 file"
    echo "llama-simple on the tessera-written BF16 (llama) file: $out"
fi
finish
