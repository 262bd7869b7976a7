#!/usr/bin/env bash
# `tessera deploy --hf-python PY`: phase 0 writes the prompts it compares to DEPLOY/golden/
# hf_prompts.json, runs `PY tools/hf_golden.py MODEL DEPLOY/golden --prompts ...` and gates on
# the golden.json that comes back. CI has no torch, so a stand-in interpreter plays
# transformers: it writes a golden in the script's format from tessera's own oracle (`tessera
# logits`), or a wrong one, or fails. Also: the script's standalone prompts equal phase 0's, its
# input errors, and (only when TS_HF_PYTHON names a Python with torch + transformers) the real
# script end to end.
set -u
NAME=hf_golden
source "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SCRIPT="$ROOT/tools/hf_golden.py"

"$BIN" synth qwen3-0.6b-tiny "$TMP/m" --seed 4 >/dev/null 2>&1 || bad "synth qwen3-0.6b-tiny"
"$BIN" synth llama-3.2-1b-tiny "$TMP/l" --seed 4 >/dev/null 2>&1 || bad "synth llama-3.2-1b-tiny"
M="$TMP/m"

cat >"$TMP/fakepy" <<'SH'
#!/usr/bin/env bash
# Stand-in for a Python with torch + transformers (FAKE_MODE: ok, perturb, tokens, fail, notorch, nofile).
printf '%s\n' "$@" >"$FAKE_LOG"
case "$FAKE_MODE" in
    fail) echo "fake: something broke" >&2; exit 1 ;;
    notorch) echo "tools/hf_golden.py: cannot import torch" >&2; exit 3 ;;
    nofile) exit 0 ;;
esac
python3 - "$2" "$3" "$5" <<'PY'
import json, os, struct, subprocess, sys
model, out, prompts = sys.argv[1:4]
mode = os.environ["FAKE_MODE"]
meta = []
for i, s in enumerate(json.load(open(prompts))["sequences"]):
    toks = s["tokens"][:-1] if mode == "tokens" and i == 2 else s["tokens"]
    subprocess.run([os.environ["FAKE_BIN"], "logits", model, "--tokens", ",".join(map(str, toks)), "--out",
                    f"{out}/logits_{i}.bin", "--hidden", f"{out}/hidden_{i}.bin"], check=True, stdout=subprocess.DEVNULL)
    meta.append({"tokens": toks, "logits": f"logits_{i}.bin", "hidden": f"hidden_{i}.bin"})
if mode == "perturb":  # a wrong token on top at position 3 of the 8-token prompt
    p = f"{out}/logits_1.bin"; d = bytearray(open(p, "rb").read())
    n, v = struct.unpack("<ii", d[:8]); a, b = 8 + 3 * v * 4, 8 + 4 * v * 4
    row = list(struct.unpack("<%df" % v, d[a:b])); row[min(range(v), key=row.__getitem__)] = max(row) + 5
    d[a:b] = struct.pack("<%df" % v, *row); open(p, "wb").write(d)
json.dump({"generator": "fake interpreter", "transformers_version": "0.fake", "sequences": meta}, open(out + "/golden.json", "w"))
print("fake: wrote", out + "/golden.json")
PY
SH
chmod +x "$TMP/fakepy"
export FAKE_BIN="$BIN" FAKE_LOG="$TMP/args"
fake() { local mode=$1; shift; env FAKE_MODE="$mode" "$@"; }

# The interpreter is called with the source tree's script, the model, DEPLOY/golden and the
# prompts file; phase 0 compares with what it wrote and passes.
expect 0 "phase 0: PASS" -- fake ok "$BIN" deploy "$M" --phases 0 --out "$TMP/d" --hf-python "$TMP/fakepy" --threads 2
printf '%s\n' "$SCRIPT" "$M" "$TMP/d/golden" --prompts "$TMP/d/golden/hf_prompts.json" --threads 2 >"$TMP/want"
cmp -s "$TMP/args" "$TMP/want" && ok || bad "interpreter arguments: $(cat "$TMP/args")"
python3 - "$TMP/d" <<'PY' && ok || bad "phase0.json does not record the --hf-python comparison"
import json, sys
d = sys.argv[1]
p0 = json.load(open(d + "/phase0.json"))
assert p0["verdict"] == "PASS" and p0["pass"] is True and p0["hf_compared"], p0
assert p0["golden_source"] == "--hf-python" and p0["golden"] == d + "/golden/golden.json", p0
assert p0["golden_generator"] == "fake interpreter" and p0["transformers_version"] == "0.fake", p0
assert [s["n_tokens"] for s in p0["sequences"]] == [1, 8, 32], p0["sequences"]
assert all(s["rel_l2"] == 0 and s["top1_match"] == s["n_tokens"] for s in p0["sequences"]), p0["sequences"]
m = json.load(open(d + "/manifest.json"))
assert m["gates"]["phase0"]["verdict"] == "PASS" and m["not_compared"] == [] and m["all_gates_passed"], m
PY
[ ! -e "$M/golden" ] && ok || bad "--hf-python wrote into the model directory"

# Phase 0's prompts, as tools/hf_golden.py computes them alone (no torch needed), equal the ones
# tessera handed over; also for a model without a BOS token.
cp -r "$TMP/l" "$TMP/nobos" && python3 - "$TMP/nobos/config.json" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p)); c["bos_token_id"] = None; json.dump(c, open(p, "w"))
PY
for mdl in m l nobos; do
    fake ok "$BIN" deploy "$TMP/$mdl" --phases 0 --out "$TMP/dp-$mdl" --hf-python "$TMP/fakepy" >/dev/null 2>&1 \
        || bad "deploy $mdl --hf-python (fake)"
    python3 "$SCRIPT" --print-prompts "$TMP/$mdl" >"$TMP/pp-$mdl" || bad "hf_golden.py --print-prompts $mdl"
    python3 - "$TMP/pp-$mdl" "$TMP/dp-$mdl/golden/hf_prompts.json" <<'PY' && ok || bad "hf_golden.py's prompts differ from phase 0's ($mdl)"
import json, sys
a, b = (json.load(open(p))["sequences"] for p in sys.argv[1:3])
assert [s["tokens"] for s in a] == [s["tokens"] for s in b], (a, b)
PY
done
python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['sequences']; sys.exit(not all(x['tokens'][0]==1 for x in s))" \
    "$TMP/dp-l/golden/hf_prompts.json" && ok || bad "prompts do not start with BOS"

# Its output is the gate: a wrong golden fails phase 0 (exit 8) like any golden would.
expect 8 "top1_frac" -- fake perturb "$BIN" deploy "$M" --phases 0 --out "$TMP/dbad" --hf-python "$TMP/fakepy"
grep -q '"verdict": "FAIL"' "$TMP/dbad/phase0.json" && ok || bad "a failed --hf-python comparison is not FAIL in phase0.json"
# A golden over other tokens than the prompts handed over is refused.
expect 3 "is not the prompt phase 0 wrote to" -- fake tokens "$BIN" deploy "$M" --phases 0 --out "$TMP/dtok" --hf-python "$TMP/fakepy"

# A failing interpreter is an error (exit 2) that says what ran and points at its message.
expect 2 "exited with 1 (its message is above)" -- fake fail "$BIN" deploy "$M" --phases 0 --out "$TMP/df" --hf-python "$TMP/fakepy"
expect 2 "fake: something broke" -- fake fail "$BIN" deploy "$M" --phases 0 --out "$TMP/df" --hf-python "$TMP/fakepy"
[ ! -e "$TMP/df/phase0.json" ] && ok || bad "a failed golden generation left a phase0.json"
expect 2 "cannot import torch/transformers (exit 3). Make a venv outside the repository" -- \
    fake notorch "$BIN" deploy "$M" --phases 0 --out "$TMP/df" --hf-python "$TMP/fakepy"
expect 2 "exited 0 but wrote no" -- fake nofile "$BIN" deploy "$M" --phases 0 --out "$TMP/df" --hf-python "$TMP/fakepy"
expect 2 "cannot run the --hf-python interpreter $TMP/no-python" -- \
    "$BIN" deploy "$M" --phases 0 --out "$TMP/df" --hf-python "$TMP/no-python"

# Where the script comes from: --hf-script, then TESSERA_HF_SCRIPT, then the source tree.
echo "# stand-in" >"$TMP/other.py"
expect 0 "phase 0: PASS" -- fake ok "$BIN" deploy "$M" --phases 0 --out "$TMP/ds" --hf-python "$TMP/fakepy" --hf-script "$TMP/other.py"
[ "$(head -1 "$TMP/args")" = "$TMP/other.py" ] && ok || bad "--hf-script not passed: $(head -1 "$TMP/args")"
expect 0 "phase 0: PASS" -- fake ok env TESSERA_HF_SCRIPT="$TMP/other.py" "$BIN" deploy "$M" --phases 0 --out "$TMP/ds" --hf-python "$TMP/fakepy"
[ "$(head -1 "$TMP/args")" = "$TMP/other.py" ] && ok || bad "TESSERA_HF_SCRIPT not used: $(head -1 "$TMP/args")"
expect 2 "--hf-script $TMP/none.py: no such file" -- "$BIN" deploy "$M" --phases 0 --out "$TMP/ds" --hf-python "$TMP/fakepy" --hf-script "$TMP/none.py"
expect 64 "--golden and --hf-python exclude each other" -- "$BIN" deploy "$M" --golden x.json --hf-python "$TMP/fakepy"
expect 64 "--hf-script needs --hf-python" -- "$BIN" deploy "$M" --hf-script "$TMP/other.py"
expect 64 "which --phases leaves out" -- "$BIN" deploy "$M" --phases 1-3 --hf-python "$TMP/fakepy"

# The real script's own checks, which run before it imports torch.
expect 2 "refusing to write inside the model directory" -- python3 "$SCRIPT" "$M" "$M/golden"
expect 2 "config.json" -- python3 "$SCRIPT" "$TMP/nonexistent" "$TMP/o"
echo '{"sequences": [{"tokens": [1, 99999]}]}' >"$TMP/badprompts.json"
expect 2 "sequences[0].tokens must be a non-empty list of ids in [0, 4096)" -- \
    python3 "$SCRIPT" "$M" "$TMP/o" --prompts "$TMP/badprompts.json"
if ! python3 -c "import torch, transformers" >/dev/null 2>&1; then
    expect 3 "python3 -m venv" -- python3 "$SCRIPT" "$M" "$TMP/o"
    expect 2 "cannot import torch/transformers" -- "$BIN" deploy "$M" --phases 0 --out "$TMP/dn" --hf-python python3
fi

# The real thing, where a Python with torch + transformers is named (not in CI).
if [ -n "${TS_HF_PYTHON:-}" ]; then
    for mdl in m l; do
        expect 0 "phase 0: PASS" -- "$BIN" deploy "$TMP/$mdl" --phases 0 --out "$TMP/real-$mdl" --hf-python "$TS_HF_PYTHON" --threads 2
        grep -q '"golden_generator": "tools/hf_golden.py"' "$TMP/real-$mdl/phase0.json" && ok || bad "real golden not from tools/hf_golden.py"
    done
fi

finish
