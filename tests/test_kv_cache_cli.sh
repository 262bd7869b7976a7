#!/usr/bin/env bash
# `--kv-cache f16` through the binary: the oracle's logits move (its cache is rounded as the
# targets store it) and the cpu target follows them; run/chat/bench/logits/deploy take the flag
# and refuse other values naming it; a deployment records model.kv_cache, every phase report
# records it, a resume must ask for the same, and run DEPLOY_DIR applies it.
set -u
NAME=kv_cache_cli
source "$(dirname "$0")/lib.sh"

HF="$FIX/gguf/qwen3/hf"
IDS=257,284,78,264,291,75,67,300,12,99,41,7
# --- the oracle and the cpu target on an F16 cache ---
for t in ref cpu; do
    for kv in f32 f16; do
        expect 0 "" -- "$BIN" logits "$HF" --target $t --kv-cache $kv --tokens $IDS --out "$TMP/${t}_$kv.bin" --threads 1
    done
    # rounding K and V to half moves the logits (a flag that changed nothing would leave them equal)
    cmp -s "$TMP/${t}_f32.bin" "$TMP/${t}_f16.bin" && bad "$t: --kv-cache f16 logits equal the f32 ones" || ok
done
# the cpu target stays as close to the oracle with the F16 cache as with FP32 (rel_l2 of all
# logits, this tiny model's near-flat ones: test_cpu_forward's bound 1e-2; the cache is rounded
# alike on both sides, so its 2^-11 rounding is not in the gap)
python3 - "$TMP" <<'EOF' && ok || bad "cpu vs oracle logits with --kv-cache f16 (see above)"
import struct, sys, math
def load(p):
    b = open(p, 'rb').read()
    return struct.unpack('<%df' % (len(b) // 4), b)
t = sys.argv[1]
def rel(a, b):
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)) / sum(y * y for y in b))
r16, r32 = rel(load(t + '/cpu_f16.bin'), load(t + '/ref_f16.bin')), rel(load(t + '/cpu_f32.bin'), load(t + '/ref_f32.bin'))
moved = rel(load(t + '/ref_f16.bin'), load(t + '/ref_f32.bin'))
print('cpu vs oracle rel_l2: f16 cache %.3e, f32 cache %.3e; oracle f16 vs f32 %.3e' % (r16, r32, moved))
sys.exit(0 if r16 < 1e-2 and r16 < 2 * r32 and moved > 0 else 1)
EOF
# stories260K greedy: the same story from an F16 cache
"$BIN" run "$SHARED/models/stories260K.gguf" --kv-cache f16 -p "" --temp 0 -n 24 --threads 1 >"$TMP/s16" 2>/dev/null
grep -qF "Once upon a time, there was a little girl named Lily." "$TMP/s16" && ok || bad "stories260K --kv-cache f16: $(cat "$TMP/s16")"
# the bench counts the F16 cache's bytes per token (half the FP32 cache's)
"$BIN" bench "$HF" --prefill 4 --decode 32 --gen 2 --trials 1 --threads 1 --json --kv-cache f32 >"$TMP/b32" 2>/dev/null
"$BIN" bench "$HF" --prefill 4 --decode 32 --gen 2 --trials 1 --threads 1 --json --kv-cache f16 >"$TMP/b16" 2>/dev/null
python3 - "$TMP" <<'EOF' && ok || bad "bench bytes_per_token with --kv-cache f16"
import json, sys
t = sys.argv[1]
a, b = json.load(open(t + '/b32'))['bytes_per_token'], json.load(open(t + '/b16'))['bytes_per_token']
print('bench bytes per token: f32 cache %d, f16 cache %d' % (a, b))
sys.exit(0 if 0 < b < a else 1)
EOF
for cmd in run chat; do
    expect 64 '--kv-cache expects f32 or f16, got "q8_0"' -- "$BIN" $cmd "$HF" --kv-cache q8_0 -p x
done
expect 64 "--kv-cache expects f32 or f16" -- "$BIN" bench "$HF" --kv-cache bf16
expect 64 "--kv-cache expects f32 or f16" -- "$BIN" logits "$HF" --kv-cache f8 --tokens 1 --out "$TMP/x.bin"
expect 64 "--kv-cache expects f32 or f16" -- "$BIN" deploy "$HF" --kv-cache half

# --- deploy --kv-cache f16: phases 1-3 gate the cpu target against the oracle on the same
# rounded cache; recorded in every report and the manifest; a resume must match ---
D="$TMP/dk"
"$BIN" deploy "$HF" --kv-cache f16 --out "$D" --threads 1 --phases 1-3 >"$TMP/dk.log" 2>&1
rc=$?
[ $rc -eq 0 ] && ok || bad "deploy --kv-cache f16 phases 1-3 exit $rc: $(tail -20 "$TMP/dk.log")"
grep -qF "KV cache: F16 in phases 1-7" "$TMP/dk.log" && ok || bad "deploy did not say the KV cache is F16"
grep -qE '"kv_cache": "f16"' "$D/phase3.json" && ok || bad "phase3.json does not record kv_cache f16"
# what the F16 cache cost, the oracle with it against the oracle with an FP32 cache, gated in phase 3
python3 - "$D/phase3.json" <<'EOF' && ok || bad "phase3.json lacks the kv_f16 agreement gates or record"
import json, sys
r = json.load(open(sys.argv[1]))
gates = {g['metric']: g for g in r['gates']}
k = r['kv_cache_agreement']
print('F16 vs FP32 cache (oracle): top5 %d/%d, top-1 equal %d, rel_l2 %.3e' % (k['top5'], k['positions'], k['top1_equal'], k['logits_rel_l2']))
ok = all(m in gates for m in ('kv_f16_decisive_top1', 'kv_f16_top5')) and k['type'] == 'f16' and 0 < k['logits_rel_l2'] < 1e-2
sys.exit(0 if ok else 1)
EOF
expect 1 "ran a KV cache of f16; this run asks for --kv-cache f32" -- "$BIN" deploy "$HF" --out "$D" --phases 4-6 --threads 1
"$BIN" deploy "$HF" --kv-cache f16 --out "$D" --phases 4-6 --threads 1 >"$TMP/dk2.log" 2>&1
rc=$?
[ $rc -eq 0 ] && ok || bad "deploy --kv-cache f16 phases 4-6 exit $rc: $(tail -20 "$TMP/dk2.log")"
grep -qE '"kv_cache": "f16"' "$D/manifest.json" && ok || bad "manifest.json does not record kv_cache f16"
grep -qF -- "- weights: as stored; KV cache: F16" "$D/report.md" && ok || bad "report.md does not name the F16 cache: $(head -8 "$D/report.md")"
# run DEPLOY_DIR holds the cache as deployed (the note says it applied it) and gives the same
# greedy text and ids (--show-ids, on stderr) as --kv-cache f16 on the model
"$BIN" run "$D" -p "Hello" --temp 0 -n 6 --show-ids >"$TMP/rd" 2>"$TMP/rd.err"
grep -qF "was deployed with --kv-cache f16" "$TMP/rd.err" && ok || bad "run DEPLOY_DIR did not apply the cache type: $(cat "$TMP/rd.err")"
"$BIN" run "$HF" --kv-cache f16 -p "Hello" --temp 0 -n 6 --threads 1 --show-ids >"$TMP/rk" 2>"$TMP/rk.err"
a=$(grep '^ids: ' "$TMP/rd.err") b=$(grep '^ids: ' "$TMP/rk.err")
[ -n "$a" ] && [ "$a" = "$b" ] && cmp -s "$TMP/rd" "$TMP/rk" && ok || bad "run DEPLOY_DIR differs from run --kv-cache f16: '$a' / '$b'"
# a manifest whose model.kv_cache is not a cache type: run refuses, eval says so (a FAIL)
sed 's/"kv_cache": "f16"/"kv_cache": "q4"/' "$D/manifest.json" >"$TMP/man" && cp "$TMP/man" "$D/manifest.json"
expect 3 'model.kv_cache: expected "f32" or "f16"' -- "$BIN" run "$D" -p x
expect 8 'model.kv_cache: expected "f32" or "f16"' -- "$BIN" eval "$D" --threads 1
finish
