#!/usr/bin/env bash
# scripts/deploy_all.sh (`make deploy-all`) on tiny presets, phases 0-3: a failing deployment
# (a NaN in a weight; a gate broken by --inject-fault) does not stop the ones after it, the
# script exits non-zero, and the summary table (printed and in OUT/deploy-all.md) has one row
# per model with its exit code, wall time, verdict and peak RSS. A run where all pass exits 0.
set -u
NAME=deploy_all
source "$(dirname "$0")/lib.sh"
SCRIPT="$(dirname "$0")/../scripts/deploy_all.sh"
M="$TMP/models"

# llama-3.2-1b-tiny's checkpoint is written beforehand with a NaN: the script deploys what
# it finds (it synthesizes only missing checkpoints), and this one fails phase 0 with exit 6.
expect 0 "wrote" -- "$BIN" synth llama-3.2-1b-tiny "$M/llama-3.2-1b-tiny"
python3 - "$M/llama-3.2-1b-tiny/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; d = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', d[:8])[0]; h = json.loads(d[8:8 + n])
off = 8 + n + h["model.layers.2.mlp.up_proj.weight"]["data_offsets"][0]
d[off + 2 * 10: off + 2 * 11] = b'\xc0\x7f'  # BF16 NaN at element 10
open(p, 'wb').write(d)
PY

run_all() { bash "$SCRIPT" --bin "$BIN" --models "$M" "$@"; }
run_all --out "$TMP/d1" --args "--phases 0-3 --threads 2" llama-3.2-1b-tiny qwen3-0.6b-tiny >"$TMP/o1" 2>&1
rc=$?
[ $rc -eq 1 ] && ok || bad "a failed deployment: deploy_all exited $rc, expected 1: $(cat "$TMP/o1")"
# the failing row names the error; the one after it still ran (synthesized, gates passed)
row() { grep -E "^\| $1 \| $2 \| [0-9.]+ s \| $3" "$4"; }
for f in "$TMP/o1" "$TMP/d1/deploy-all.md"; do
    row llama-3.2-1b-tiny 6 'ERROR \(non-finite value\): .*element 10 is NaN.* \| [0-9]+ MB \|' "$f" >/dev/null \
        && ok || bad "NaN row missing in $f: $(cat "$f")"
    row qwen3-0.6b-tiny 0 'gates PASS \(phases 0-3, no eval, phase 0 not compared\) \| [0-9]+ MB \| [0-9.]+ / - / - / - \|' "$f" >/dev/null \
        && ok || bad "passing row missing in $f: $(cat "$f")"
    grep -q "^1 of 2 deployments failed" "$f" && ok || bad "summary line missing in $f"
done
[ -f "$TMP/d1/qwen3-0.6b-tiny/phase3.json" ] && [ -f "$M/qwen3-0.6b-tiny/config.json" ] && ok \
    || bad "the deployment after the failure did not run"
grep -q "is NaN" "$TMP/d1/llama-3.2-1b-tiny.log" && ok || bad "the failing deployment's log lacks its error"

# a gate failure: the manifest's failing phase is the verdict
run_all --out "$TMP/d2" --args "--phases 0-3 --threads 2 --inject-fault down" qwen3-0.6b-tiny >"$TMP/o2" 2>&1
rc=$?
[ $rc -eq 1 ] && ok || bad "an injected fault: deploy_all exited $rc: $(cat "$TMP/o2")"
row qwen3-0.6b-tiny 8 'FAIL \(phase 1 gate\) \|' "$TMP/o2" >/dev/null && ok || bad "gate row: $(cat "$TMP/o2")"

# every deployment passes: exit 0; the earlier failure in d1 does not leak into a new run there
run_all --out "$TMP/d1" --args "--phases 0-1 --threads 2" qwen3-0.6b-tiny >"$TMP/o3" 2>&1
rc=$?
[ $rc -eq 0 ] && ok || bad "all passing: deploy_all exited $rc: $(cat "$TMP/o3")"
row qwen3-0.6b-tiny 0 'gates PASS \(phases 0-1, no eval, phase 0 not compared\)' "$TMP/d1/deploy-all.md" >/dev/null && ok \
    || bad "rewritten table: $(cat "$TMP/d1/deploy-all.md")"
grep -q llama "$TMP/d1/deploy-all.md" && bad "a model not in this run is in its table" || ok

expect 64 "usage" -- bash "$SCRIPT" --bin "$BIN"
finish
