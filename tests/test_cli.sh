#!/usr/bin/env bash
# The tessera binary end to end: synth -> inspect -> logits -> deploy phase 0, the logits file
# format against HF goldens, a failing gate, and the exit code + message of each bad input.
set -u
NAME=cli
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/deploy_rounds.sh"

# relcmp A B HEADER_BYTES LIMIT LABEL: rel_l2 of two float32 files after equal headers
relcmp() {
    python3 - "$@" <<'PY'
import struct, sys, math
a, b = (open(p, 'rb').read() for p in sys.argv[1:3])
h, limit, label = int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
assert a[:h] == b[:h], "headers differ"
n = (len(a) - h) // 4
x, y = struct.unpack('<%df' % n, a[h:]), struct.unpack('<%df' % n, b[h:])
d = math.sqrt(sum((p - q) ** 2 for p, q in zip(x, y))) / math.sqrt(sum(q * q for q in y))
print("%s rel_l2 vs HF: %.3e" % (label, d))
sys.exit(0 if d < limit else 1)
PY
}

expect 0 "synth" -- "$BIN" --help
expect 64 "usage" -- "$BIN" frobnicate
expect 1 'unknown preset "gpt-9"' -- "$BIN" synth gpt-9 "$TMP/x"
expect 0 "qwen3-4b-tiny" -- "$BIN" synth --list

# synth -> inspect -> logits -> deploy on a tiny model
expect 0 "wrote" -- "$BIN" synth llama-3.2-1b-tiny "$TMP/tiny" --seed 3
expect 0 "wrote" -- "$BIN" synth qwen3-0.6b-tiny "$TMP/nested/dirs/model"  # parents are created
expect 2 "refusing to overwrite" -- "$BIN" synth llama-3.2-1b-tiny "$TMP/tiny"
expect 0 "GQA 8/2 heads" -- "$BIN" inspect "$TMP/tiny"
expect 0 '"architecture": "LlamaForCausalLM"' -- "$BIN" inspect "$TMP/tiny" --json
expect 0 "3 positions x 4096 vocab" -- "$BIN" logits "$TMP/tiny" --tokens 1,2,3 --out "$TMP/l.bin"
size=$(stat -c %s "$TMP/l.bin")
[ "$size" -eq $((8 + 3 * 4096 * 4)) ] && ok || bad "logits file is $size bytes"
read -r nt nv < <(od -An -t d4 -N8 "$TMP/l.bin")
[ "$nt" = 3 ] && [ "$nv" = 4096 ] && ok || bad "logits header $nt $nv"
expect 0 "1 positions" -- "$BIN" logits "$TMP/tiny" --tokens 1,2,3 --out "$TMP/last.bin" --last
# --last must equal the last row of the full run
cmp -s <(tail -c 16384 "$TMP/l.bin") <(tail -c 16384 "$TMP/last.bin") && ok || bad "--last differs from last row"
# without HF goldens phase 0 is "not compared": no failure (exit 0), no passed gate either
expect 0 "phase 0: not compared" -- "$BIN" deploy "$TMP/tiny" --phases 0 --out "$TMP/dep"
grep -q '"verdict": "not compared"' "$TMP/dep/phase0.json" && grep -q '"pass": null' "$TMP/dep/phase0.json" \
    && ok || bad "phase0.json lacks verdict: not compared"

# logits of an HF fixture equal transformers' golden logits (same format, tolerance 1e-4 rel)
G="$FIX/hf/qwen2_bias/golden"
toks=$(python3 -c "import json;print(','.join(map(str,json.load(open('$G/golden.json'))['sequences'][2]['tokens'])))")
expect 0 "" -- "$BIN" logits "$FIX/hf/qwen2_bias" --tokens "$toks" --out "$TMP/q.bin"
relcmp "$TMP/q.bin" "$G/logits_2.bin" 8 1e-4 "qwen2_bias ref logits" && ok || bad "logits differ from HF golden"

# the cpu target through the CLI agrees with the oracle and with HF
expect 0 "" -- "$BIN" logits "$FIX/hf/qwen2_bias" --tokens "$toks" --out "$TMP/qc.bin" --target cpu --threads 2
relcmp "$TMP/qc.bin" "$G/logits_2.bin" 8 1e-2 "qwen2_bias cpu-target logits" && ok || bad "cpu logits differ from HF golden"
expect 64 "--prefill expects" -- "$BIN" bench "$TMP/tiny" --prefill ""
expect 0 '"dispatches_per_layer": 3.00' -- "$BIN" bench "$TMP/tiny" --prefill 16,32 --decode 8 --gen 4 --trials 2 --json
out=$("$BIN" bench "$TMP/tiny" --prefill 16 --decode 8 --gen 4 --trials 2 --json 2>/dev/null)
python3 -c 'import json, sys; j = json.loads(sys.argv[1]); lo, hi = j["decode_probe_gbs"]
assert j["decode_probe_fraction"] > 0 and 0 < lo <= hi, (j["decode_probe_fraction"], lo, hi)' "$out" \
    && ok || bad "bench JSON: decode_probe_fraction and decode_probe_gbs [lo, hi]: $out"
# --steps: per step of a decoded token its span, the threads' work and the GB/s of what it reads
out=$("$BIN" bench "$TMP/tiny" --prefill 16 --decode 8 --gen 4 --trials 2 --threads 2 --steps --json 2>/dev/null)
python3 -c '
import json, math, sys
j = json.loads(sys.argv[1]); rows = {r["step"]: r for r in j["decode_steps"]}
assert {"attn_norm", "qkv", "attention", "o_proj", "ffn_norm", "gate_up", "down", "lm_head"} <= set(rows), rows
for name, r in rows.items():
    assert r["ms_per_token"] > 0 and r["fastest_thread_ms_per_token"] <= r["slowest_thread_ms_per_token"] <= r["ms_per_token"] * 1.000001, r
    reads = name in ("qkv", "attention", "o_proj", "gate_up", "down", "lm_head")
    assert (r["bytes_per_token"] > 0) == reads, r
    if reads: assert math.isclose(r["gbs"], r["bytes_per_token"] / r["ms_per_token"] / 1e6, rel_tol=1e-3), r
token_ms = 1e3 / j["decode_tok_s"]
assert 0 < sum(r["ms_per_token"] for r in rows.values()) < 2 * token_ms, (rows, token_ms)' "$out" \
    && ok || bad "bench --steps JSON: decode_steps rows: $out"
expect 0 "decode step by step" -- "$BIN" bench "$TMP/tiny" --prefill 16 --decode 8 --gen 4 --trials 1 --steps
expect 64 "--steps times the single-sequence decode" -- "$BIN" bench "$TMP/tiny" --steps --batch 1,2

# --hidden writes the per-layer residual stream in the golden hidden format
expect 0 "" -- "$BIN" logits "$FIX/hf/qwen2_bias" --tokens "$toks" --out "$TMP/q.bin" --hidden "$TMP/h.bin"
relcmp "$TMP/h.bin" "$G/hidden_2.bin" 12 1e-4 "qwen2_bias hidden states" && ok || bad "hidden states differ from HF golden"

# phase 0 against HF goldens passes; a corrupted golden makes the gate fail with exit 8
# One thread: phase 7 re-measures this deployment's speed claims in a fresh process, and a tiny
# model's microsecond decode steps on two threads swing 2-3x between processes with the pool's
# wake-ups (measured: 24k-62k tok/s back to back; one thread 38k-50k). Even on one thread two CI
# runs failed here on a claim not reproduced (one decode, one TTFT under ASan), so a claim FAIL
# gets the rounds of deploy_rounds.sh, as test_deploy.sh's deployments do.
deploy_ok "$TMP/dep2" "phase 0: PASS" "$FIX/hf/llama_gqa_rope3" --out "$TMP/dep2" --threads 1
python3 - "$TMP/dep2" <<'PY' && ok || bad "an HF-compared deployment does not record phase 0 PASS / all gates passed"
import json, sys
d = sys.argv[1]
p0, m = json.load(open(d + "/phase0.json")), json.load(open(d + "/manifest.json"))
assert p0["verdict"] == "PASS" and p0["pass"] is True and p0["hf_compared"], p0
assert p0["golden_source"].startswith("model directory") and p0["golden_generator"] == "tools/gen_hf_fixtures.py", p0
assert m["gates"]["phase0"]["verdict"] == "PASS" and m["not_compared"] == [] and m["all_gates_passed"], m["gates"]["phase0"]
assert "Phase verdicts: 0 oracle PASS" in open(d + "/report.md").read()
PY
# every HF fixture's own golden prompts: phase 0 compares and passes
for f in "$FIX"/hf/*/; do
    f=$(basename "$f")
    expect 0 "phase 0: PASS" -- "$BIN" deploy "$FIX/hf/$f" --phases 0 --threads 2 --out "$TMP/p0-$f"
done
cp -r "$FIX/hf/llama_gqa_rope3" "$TMP/perturbed" && chmod -R u+w "$TMP/perturbed"
python3 - "$TMP/perturbed/golden/logits_1.bin" <<'PY'
import struct, sys
p = sys.argv[1]; d = bytearray(open(p, 'rb').read())
n, v = struct.unpack('<ii', d[:8])
# raise a wrong token to the top at position 3: top-1 must now disagree
row = list(struct.unpack('<%df' % v, d[8 + 3 * v * 4: 8 + 4 * v * 4]))
j = min(range(v), key=lambda i: row[i]); row[j] = max(row) + 5.0
d[8 + 3 * v * 4: 8 + 4 * v * 4] = struct.pack('<%df' % v, *row)
open(p, 'wb').write(d)
PY
expect 8 "top1_frac" -- "$BIN" deploy "$TMP/perturbed" --out "$TMP/dep3"
grep -q '"pass": false' "$TMP/dep3/phase0.json" && ok || bad "failed gate not recorded in phase0.json"
[ ! -e "$TMP/dep3/phase1.json" ] && ok || bad "phases after a failed gate ran without --force"
grep -q '"all_gates_passed": false' "$TMP/dep3/manifest.json" && ok || bad "failed gate not in manifest"
expect 8 "top1_frac" -- "$BIN" deploy "$TMP/perturbed" --out "$TMP/dep3f" --force
[ -e "$TMP/dep3f/phase3.json" ] && grep -q '"forced": true' "$TMP/dep3f/manifest.json" && ok || bad "--force did not run later phases or was not recorded"

# bad inputs: exit code by class, message names the file/field/tensor
expect 2 "no such directory" -- "$BIN" inspect "$TMP/nonexistent"
mkdir -p "$TMP/noweights" && cp "$FIX/hf/llama_mha/config.json" "$TMP/noweights/"
expect 2 "no model.safetensors" -- "$BIN" inspect "$TMP/noweights"
cp -r "$FIX/hf/llama_mha" "$TMP/badjson" && chmod -R u+w "$TMP/badjson"
echo '{"architectures": ["LlamaForCausalLM"], "hidden_size": 64,' > "$TMP/badjson/config.json"
expect 3 "config.json: invalid JSON at line" -- "$BIN" inspect "$TMP/badjson"
sed 's/LlamaForCausalLM/MistralForCausalLM/' "$FIX/hf/llama_mha/config.json" > "$TMP/badjson/config.json"
expect 4 '"MistralForCausalLM" is not supported' -- "$BIN" deploy "$TMP/badjson" --out "$TMP/d4"
sed 's/"intermediate_size": 128/"intermediate_size": 130/' "$FIX/hf/llama_mha/config.json" > "$TMP/badjson/config.json"
expect 5 "expected [130, 64]" -- "$BIN" logits "$TMP/badjson" --tokens 1 --out "$TMP/x.bin"
cp "$FIX/hf/llama_mha/config.json" "$TMP/badjson/config.json"
head -c 300000 "$FIX/hf/llama_mha/model.safetensors" > "$TMP/badjson/model.safetensors"
expect 3 "truncated" -- "$BIN" inspect "$TMP/badjson"
# a NaN in a weight: structure is fine, phase 0's value scan names the tensor
cp "$FIX/hf/llama_mha/model.safetensors" "$TMP/badjson/model.safetensors"
python3 - "$TMP/badjson/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; d = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', d[:8])[0]; h = json.loads(d[8:8 + n])
off = 8 + n + h["model.layers.1.mlp.up_proj.weight"]["data_offsets"][0]
d[off + 4 * 10: off + 4 * 11] = struct.pack('<f', float('nan'))
open(p, 'wb').write(d)
PY
expect 6 'tensor "model.layers.1.mlp.up_proj.weight" element 10 is NaN' -- "$BIN" deploy "$TMP/badjson" --out "$TMP/d6"
expect 1 "outside the vocabulary" -- "$BIN" logits "$FIX/hf/llama_mha" --tokens 1,256 --out "$TMP/x.bin"
expect 64 "--tokens expects" -- "$BIN" logits "$FIX/hf/llama_mha" --tokens 1,,2 --out "$TMP/x.bin"
# beyond the context (max_position_embeddings 256 in the fixture): refused before any work,
# naming both numbers and config.json; the memory a request needs is said before allocating,
# and a request larger than the memory available is refused with exit 7 (TESSERA_MEM_AVAILABLE
# stands in for a small machine)
over=$(python3 -c "print(','.join(['7'] * 257))")
for t in ref cpu; do
    expect 1 "token count 257 exceeds the model's context of 256 positions (max_position_embeddings in $FIX/hf/llama_mha/config.json)" \
        -- "$BIN" logits "$FIX/hf/llama_mha" --tokens "$over" --out "$TMP/x.bin" --target $t
    [ ! -e "$TMP/x.bin" ] && ok || bad "logits over the context wrote $TMP/x.bin"
    expect 0 "logits: memory for 3 tokens on the $t target: KV cache 3.0 KiB" -- \
        "$BIN" logits "$FIX/hf/llama_mha" --tokens 1,2,3 --out "$TMP/m.bin" --target $t --threads 1
    expect 7 "logits of 256 tokens needs KV cache 256.0 KiB" -- env TESSERA_MEM_AVAILABLE=100000 \
        "$BIN" logits "$FIX/hf/llama_mha" --tokens "${over#7,}" --out "$TMP/x.bin" --target $t
done
expect 0 "positions x 256 vocab" -- "$BIN" logits "$FIX/hf/llama_mha" --tokens "${over#7,}" --out "$TMP/x.bin" --last
expect 0 "(beyond max_position_embeddings: logits and run refuse it)" -- "$BIN" inspect "$FIX/hf/llama_mha" --ctx 300
expect 64 "--phases expects" -- "$BIN" deploy "$FIX/hf/llama_mha" --phases 3-1

# phases 1-3 (cpu target vs oracle) on a synth model and on an F32 HF fixture (converted to BF16)
expect 0 "phase 3: PASS" -- "$BIN" deploy "$TMP/tiny" --phases 0-3 --out "$TMP/dep_all"
for p in 1 2 3; do grep -q '"pass": true' "$TMP/dep_all/phase$p.json" && ok || bad "phase$p.json lacks pass: true"; done
# manifest: weight hashes equal sha256sum's, every gate recorded, report.md has the gate table
want=$(sha256sum "$TMP/tiny/model.safetensors" | cut -d' ' -f1)
grep -q "\"sha256\": \"$want\"" "$TMP/dep_all/manifest.json" && ok || bad "manifest weight sha256 differs from sha256sum"
grep -q '"all_gates_passed": false' "$TMP/dep_all/manifest.json" && ok || bad "phase 0 not compared counted as passed"
grep -q "| 3 model | lockstep_violations | 0 | <= 0 | PASS |" "$TMP/dep_all/report.md" && ok || bad "report.md gate table"
# phase 7: the evaluator passes an intact deployment (warnings: phase 0 not compared, no
# performance claims yet) ...
expect 9 "verdict: PASS-with-warnings (0 failed" -- "$BIN" eval "$TMP/dep_all" --seed 5
grep -q "| WARN | phase 0 not compared with Hugging Face" "$TMP/dep_all/evaluation.md" && ok || bad "eval does not warn of phase 0 not compared"
grep -q "Verdict: PASS-with-warnings" "$TMP/dep_all/evaluation.md" && ok || bad "evaluation.md verdict"
# ... fails when a weight changed after deployment, naming the file ...
python3 -c "import sys; p=sys.argv[1]; d=bytearray(open(p,'rb').read()); d[-6]^=1; open(p,'wb').write(d)" "$TMP/tiny/model.safetensors"
expect 8 "model.safetensors changed since deployment" -- "$BIN" eval "$TMP/dep_all" --seed 5
# ... and when a threshold in the manifest was loosened
python3 - "$TMP/dep2/manifest.json" <<'PY'
import json, sys
p = sys.argv[1]; m = json.load(open(p))
for t in m["thresholds"]:
    if t["phase"] == "phase2" and t["metric"] == "cosine": t["value"] = 0.9
json.dump(m, open(p, "w"), indent=2)
PY
expect 8 "loosened" -- "$BIN" eval "$TMP/dep2" --seed 5
expect 0 "phase 2: PASS" -- "$BIN" deploy "$FIX/hf/llama_attn_bias" --phases 1-3 --threads 2 --out "$TMP/dep_hf"

finish
